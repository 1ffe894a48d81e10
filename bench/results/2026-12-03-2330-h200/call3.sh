#!/bin/bash
# Third (last) H200 call of the session: the tree after call 2's fixes (the backward runs with autocast off; CUDA
# graphs with several convolutions keep AOTAutograd). ViT-B's cold training compile with wick's autodiff (it failed
# in calls 1-2 on the autocast bug), then the GPU, autodiff and training tests (not the whole suite: the session's
# device time does not cover it). From the repository root on the device; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
for m in vit_base_patch16_224; do
  timeout 60 python3 bench/cold_compile.py --device cuda --suite timm --model $m --mode training --compiler wick-own \
    --json $OUT/cold-$m.json > /dev/null 2> $OUT/cold-$m.err
  rc=$?
  echo "cold $m rc $rc: $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['cold_s'], d['first_call_s'], d['pass'], d['check'].get('autodiff'), d['check'].get('fallbacks'), {k: v['wall_s'] for k, v in d['phases'].items() if 'autodiff' in k or 'compile_batch' in k})" $OUT/cold-$m.json 2>&1 | tail -1)"
  [ $rc != 0 ] && grep -v "^\[wick\|[Ww]arning\|warn(" $OUT/cold-$m.err | tail -8 | cut -c1-300
done
echo "== cold at $(( $(date +%s) - S0 )) s"
timeout $(( ${TOTAL_S:-400} - ($(date +%s) - S0) )) python3 -m pytest tests/gpu tests/autodiff tests/capture/test_capture_training.py \
  tests/capture/test_capture_early_backward.py tests/runtime/test_batch_norm_stats_own_capture.py \
  tests/codegen/test_triton_interpret.py -p no:cacheprovider -p no:warnings -rfE -vv --tb=short -n 16 2>&1 \
  | grep -v "DEBUG\|^$" > $OUT/tests.log
echo "pytest rc ${PIPESTATUS[0]} done at $(( $(date +%s) - S0 )) s"
echo "results: $(grep -c ' PASSED ' $OUT/tests.log) passed, $(grep -c ' SKIPPED ' $OUT/tests.log) skipped, $(grep -c ' FAILED ' $OUT/tests.log) failed, $(grep -c ' ERROR ' $OUT/tests.log) errors"
grep -E "[0-9]+ passed" $OUT/tests.log | tail -1
grep "^FAILED\|^ERROR" $OUT/tests.log | cut -c1-300 | head -30
gzip -f $OUT/tests.log
echo "== done in $(( $(date +%s) - S0 )) s"
