#!/bin/bash
# First H200 call of the 2026-12-04 session: where a cold training compile's Triton time goes (the compile
# processes' start and readiness, every first-call job's compile time, the slowest kernels; wick._triton.job_log
# through bench/cold_compile.py's "triton_timeline"), for ViT-B, BERT and GPT-2 with wick's own autodiff; and
# ViT-B's training row after the layer norm statistics moved to the forward (not measured since).
# From the repository root on the device; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
for row in "timm vit_base_patch16_224" "huggingface BertForMaskedLM" "huggingface GPT2LMHeadModel"; do
  set -- $row
  rm -rf /tmp/cold-$2
  COLD_DIR=/tmp/cold-$2 timeout 90 python3 bench/cold_compile.py --device cuda --suite $1 --model $2 --mode training \
    --compiler wick-own --json $OUT/cold-$2.json > /dev/null 2> $OUT/cold-$2.err
  echo "cold $2 rc $?: $(python3 -c "
import json,sys; d=json.load(open(sys.argv[1])); t=d['triton_timeline'] or {}
print(d['cold_s'], d['pass'], d['check'].get('autodiff'))
print({k: v for k, v in t.items() if k != 'slowest'})
for s in t.get('slowest', []): print('   ', s)" $OUT/cold-$2.json 2>&1 | tail -16)"
  (cd /tmp/cold-$2 && find . -name "*.py" | tar czf $OUT/kernels-$2.tgz -T - 2>/dev/null)
done
echo "== cold at $(( $(date +%s) - S0 )) s"
PROFILE_TOP=10 timeout 200 python3 bench/host_ab.py timm:vit_base_patch16_224 eager,inductor,wick training 2>&1 \
  | grep -v "^\[wick\|DEBUG\|[Ww]arning\|warn(" > $OUT/ab-vit.log
echo "== vit rc ${PIPESTATUS[0]} at $(( $(date +%s) - S0 )) s"; grep "^|\|host phases\|FAILED" $OUT/ab-vit.log | cut -c1-260
