#!/bin/bash
# First H200 call of the session (2026-12-03 14:00 UTC): the batch-norm test fixed after the last suite run, then
# the timm training rows not measured before (mobilenetv3_large_100, vit_base_patch16_224, convnext_base; bf16
# autocast SGD step, b64): eager, inductor, torch.compile(backend="wick"), wick.compile in one process per model.
# From the repository root on the device; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
python3 -m pytest tests/runtime/test_batch_norm_stats_in_place.py -p no:cacheprovider -p no:warnings -q -n 8 2>&1 | tail -3
for m in ${MODELS:-mobilenetv3_large_100 vit_base_patch16_224 convnext_base}; do
  T=$(( ${TOTAL_S:-575} - ($(date +%s) - S0) )); [ $T -gt ${PER_MODEL_S:-175} ] && T=${PER_MODEL_S:-175}
  [ $T -lt 30 ] && { echo "$m: not run ($T s left)"; continue; }
  PROFILE_TOP=6 timeout $T python3 bench/host_ab.py timm:$m ${VARIANTS:-eager,inductor,dynamo+wick,wick} training 2>&1 \
    | grep -v "^\[wick\|DEBUG\|[Ww]arning\|warn(" > $OUT/ab-$m.log
  echo "== $m rc ${PIPESTATUS[0]} at $(( $(date +%s) - S0 )) s"
  grep "^|\|FAILED\|Traceback\|Error\|first call\|fallback" $OUT/ab-$m.log | cut -c1-260 | head -30
done
echo "== done in $(( $(date +%s) - S0 )) s"
