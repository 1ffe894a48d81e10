#!/bin/bash
# Third and last H200 call of the session: after the Triton cache-key index, the plan stages' sinking of pointwise
# work and the in-place statistics through wick.compile's own capture. The GPU tests and the changed files' tests,
# the cold training compiles of convnext_base and vit_base_patch16_224 (wick.compile, phases), and the training rows
# of vit_base_patch16_224 (against inductor), resnet50 and mobilenetv3_large_100.
# From the repository root on the device; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
left() { echo $(( ${TOTAL_S:-585} - ($(date +%s) - S0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
timeout ${TESTS_S:-210} python3 -m pytest tests/gpu tests/runtime/test_batch_norm_stats_in_place.py tests/runtime/test_batch_norm_stats_own_capture.py tests/runtime/test_externs.py \
  tests/codegen/test_triton_interpret.py -p no:cacheprovider -p no:warnings -rfE -q --tb=short -n 16 2>&1 \
  | grep -v "DEBUG\|^$" > $OUT/tests.log
echo "tests rc ${PIPESTATUS[0]} at $(( $(date +%s) - S0 )) s"; grep -E "[0-9]+ (passed|failed)" $OUT/tests.log | tail -1
grep "^FAILED\|^ERROR" $OUT/tests.log | cut -c1-250 | head -20
for m in convnext_base vit_base_patch16_224; do
  timeout $(( $(left) < 90 ? $(left) : 90 )) python3 bench/cold_compile.py --suite timm --model $m --mode training \
    --compiler wick-own --device cuda --json $OUT/cold-$m.json > $OUT/cold-$m.log 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['model'], 'first call', d['first_call_s'], 'tuned', d['tuned_s'], 'pass', d['pass'], {k.strip(): v['wall_s'] for k, v in d['phases'].items() if 'AOT' in k or 'compile_kernel' in k or 'compile_batch' in k})" $OUT/cold-$m.json 2>&1 | tail -1
done
echo "cold done at $(( $(date +%s) - S0 )) s"
for row in "vit_base_patch16_224|eager,inductor,wick" "resnet50|eager,dynamo+wick,wick" "mobilenetv3_large_100|eager,wick"; do
  m=${row%%|*}; v=${row#*|}; T=$(left); [ $T -lt 40 ] && { echo "$m: not run ($T s left)"; continue; }
  PROFILE_TOP=${PROFILE_TOP:-0} timeout $T python3 bench/host_ab.py timm:$m $v training 2>&1 \
    | grep -v "^\[wick\|DEBUG\|[Ww]arning\|warn(" > $OUT/ab-$m.log
  echo "== $m rc ${PIPESTATUS[0]} at $(( $(date +%s) - S0 )) s"; grep "^|" $OUT/ab-$m.log | cut -c1-260
done
echo "== done in $(( $(date +%s) - S0 )) s"
