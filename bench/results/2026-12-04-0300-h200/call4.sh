#!/bin/bash
# Fourth H200 call (the session's last device time): the fmod fix and the rule test's float64 judgement on the
# H200 (tests/autodiff), with tests/gpu and the Triton tests (the compile processes' changes); then cold training
# compiles of BERT, LLaMA and T5 with wick's own autodiff and, as far as the time allows, inductor's for LLaMA and T5
# (ViT-B's, BERT's and GPT-2's inductor rows are call 2's). From the repository root; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
timeout 170 python3 -m pytest tests/autodiff tests/gpu tests/codegen/test_triton_interpret.py -p no:cacheprovider \
  -p no:warnings -rfE -q --tb=short -n 16 2>&1 | grep -v "DEBUG\|^$" > $OUT/tests.log
echo "tests rc ${PIPESTATUS[0]} at $(( $(date +%s) - S0 )) s: $(grep -E '[0-9]+ (passed|failed)' $OUT/tests.log | tail -1)"
grep "^FAILED\|^ERROR" $OUT/tests.log | cut -c1-300 | head -20
for row in "BertForMaskedLM wick-own" "LlamaForCausalLM wick-own" "T5ForConditionalGeneration wick-own" \
           "LlamaForCausalLM inductor" "T5ForConditionalGeneration inductor"; do
  set -- $row
  [ $(( $(date +%s) - S0 )) -gt $([ $2 = inductor ] && echo 250 || echo 300) ] && continue
  COLD_DIR=/tmp/cold4-$1-$2 timeout 60 python3 bench/cold_compile.py --device cuda --suite huggingface --model $1 \
    --mode training --compiler $2 --json $OUT/cold.jsonl > /dev/null 2>> $OUT/cold.err
  echo "cold $1 $2 rc $?: $(python3 -c "
import json,sys; d=[json.loads(l) for l in open(sys.argv[1])][-1]; t=d.get('triton_timeline') or {}
print(d['model'], d['compiler'], d['cold_s'], d['pass'], d['check'].get('autodiff'))
print({k: v for k, v in t.items() if k != 'slowest'})" $OUT/cold.jsonl 2>&1 | tail -2)"
done
echo "== call done at $(( $(date +%s) - S0 )) s"
