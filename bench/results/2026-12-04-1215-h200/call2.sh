#!/bin/bash
# Second H200 call: cuDNN attention plans built while the kernels compile (wick/_autodiff.py warm_attention_plans).
#  1. GPT-2's cold training compile without (WICK_WARM_ATTENTION=0) and with the warm-up, the second with the
#     operator table of its first call (does the real call hit the plan cache?);
#  2. BERT, LLaMA, T5 cold with wick-own; LLaMA's and T5's inductor cold rows;
#  3. ViT-B's generated Triton modules from a cold run ($OUT/vit_modules.tgz: why 349 kernels are 142 distinct);
#  4. tests/gpu, tests/autodiff and tests/models (-n 16).
# From the repository root; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
export PYTHONPATH=/tmp/site
cold() {  # suite model compiler [extra env] [extra args]
  local suite=$1 model=$2 comp=$3 envs=${4:-} extra=${5:-}
  rm -rf /tmp/cold2-$model-$comp
  env $envs COLD_DIR=/tmp/cold2-$model-$comp timeout 90 python3 bench/cold_compile.py --device cuda --suite $suite \
    --model $model --mode training --compiler $comp $extra --json $OUT/cold.jsonl > /dev/null 2>> $OUT/cold.err
  echo "cold $model $comp [$envs] rc $?: $(python3 -c "
import json,sys; d=[json.loads(l) for l in open(sys.argv[1])][-1]; t=d.get('triton_timeline') or {}
print(d['model'], d['compiler'], 'cold', d['cold_s'], 'first', d['first_call_s'], 'steady', d['steady_s'], d['pass'], d['check'].get('autodiff'))
print({k: v for k, v in t.items() if k not in ('slowest', 'repeated_examples')})" $OUT/cold.jsonl 2>&1 | tail -2)"
}
cold huggingface GPT2LMHeadModel wick-own WICK_WARM_ATTENTION=0
cold huggingface GPT2LMHeadModel wick-own "" "--torch-profile $OUT/gpt2_ops.txt"
grep -i "attention\|WickGraph" $OUT/gpt2_ops.txt | cut -c1-170
cold huggingface GPT2LMHeadModel wick-own
cold huggingface BertForMaskedLM wick-own
cold huggingface LlamaForCausalLM wick-own
cold huggingface T5ForConditionalGeneration wick-own
cold timm vit_base_patch16_224 wick-own
tar czf $OUT/vit_modules.tgz -C /tmp/cold2-vit_base_patch16_224-wick-own/wick_cache_dir/triton . --exclude '*.cubin' 2>&1 | tail -1
cold huggingface LlamaForCausalLM inductor
cold huggingface T5ForConditionalGeneration inductor
echo "tests at $(( $(date +%s) - S0 )) s"
timeout $(( 580 - ($(date +%s) - S0) )) env PYTHONPATH=/tmp/site:bench/results/2026-12-04-1215-h200 python3 -m pytest \
  tests/gpu tests/autodiff tests/models -p stream_failures -p no:cacheprovider -p no:warnings -rfE -vv --tb=short \
  -n 16 --dist worksteal 2>&1 | grep -v "DEBUG\|^$" > $OUT/tests.log
echo "results: $(grep -c ' PASSED ' $OUT/tests.log) passed, $(grep -c ' SKIPPED ' $OUT/tests.log) skipped, $(grep -c ' FAILED ' $OUT/tests.log) failed, $(grep -c ' ERROR ' $OUT/tests.log) errors"
grep -E "[0-9]+ passed" $OUT/tests.log | tail -1
grep "cudnn_attention_plans" $OUT/tests.log | cut -c1-200
[ -f $OUT/failures.txt ] && grep "^== " $OUT/failures.txt
gzip -f $OUT/tests.log
echo "== done in $(( $(date +%s) - S0 )) s"
