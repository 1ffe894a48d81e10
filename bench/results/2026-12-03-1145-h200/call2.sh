#!/bin/bash
# The merged residual-sum row groups (vitfuse) and in-place batch-norm statistics (bnhost) on the H200: the GPU,
# codegen, schedule and new tests, then the rows they change (bench/host_ab.py, eager / inductor / wick.compile,
# bf16 autocast, PROFILE_TOP=8). From the repository root on the device; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
timeout 200 python3 -m pytest tests/gpu tests/codegen tests/schedule tests/runtime/test_batch_norm_stats_in_place.py \
  tests/capture/test_models_residual_rows.py -p no:cacheprovider -p no:warnings -rfE -q --tb=short -n 16 > $OUT/tests.log 2>&1
echo "tests rc=$? at $(( $(date +%s) - S0 )) s"; grep -E "[0-9]+ (passed|failed)" $OUT/tests.log | tail -1
grep "^FAILED\|^ERROR" $OUT/tests.log | cut -c1-300 | head -20
for row in "timm:vit_base_patch16_224|inference" "timm:resnet50|training" "huggingface:GPT2LMHeadModel|inference" \
           "huggingface:BertForMaskedLM|inference"; do
  IFS='|' read -r model mode <<< "$row"
  left=$(( ${TOTAL_S:-560} - ($(date +%s) - S0) ))
  if [ $left -lt 40 ]; then echo "not run (budget): $row"; continue; fi
  echo "== $row ($left s left)" >> $OUT/ab.log
  PROFILE_TOP=8 timeout $left python3 bench/host_ab.py $model eager,inductor,wick $mode 2>&1 \
    | grep -v "^\[wick\|DEBUG\|[Ww]arning\|warn(" >> $OUT/ab.log
done
grep "^|\|FAILED\|first call\|background\|host phases\|^== \|Error" $OUT/ab.log | cut -c1-400
echo "== done in $(( $(date +%s) - S0 )) s"
