#!/bin/bash
# Second H200 call: the batch norm backward of two reductions (call 1: the own route had 1560 kernels a resnet50 step,
# AOTAutograd's 802). Float32 training test without TF32.
#  1. tests: the CUDA training test, tests/autodiff, the batch norm and channels-last runtime tests,
#     tests/capture/test_vision_models.py (forward-backward of timm/torchvision models on CUDA);
#  2. cold training compiles through wick.compile of resnet50 and mobilenetv3_large_100;
#  3. bench/host_ab.py training rows of resnet50 and convnext_base: eager, inductor, wick, wick-aot.
# From the repository root; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
export PYTHONPATH=/tmp/site
timeout 150 env WICK_TEST_FAILURES=$OUT/failures.txt python3 -m pytest tests/gpu/test_channels_last_gpu.py \
  tests/autodiff tests/runtime/test_batch_norm_stats_own_capture.py tests/runtime/test_channels_last_training.py \
  tests/capture/test_vision_models.py -p no:cacheprovider -p no:warnings -rfE -v --tb=short -n 16 --dist worksteal \
  2>&1 | grep -v "DEBUG\|^$" > $OUT/tests.log
echo "tests rc $? at $(( $(date +%s) - S0 )) s: $(grep -c PASSED $OUT/tests.log) passed, $(grep -c FAILED $OUT/tests.log) failed; $(tail -1 $OUT/tests.log)"
[ -f $OUT/failures.txt ] && grep "^== " $OUT/failures.txt
cold() {  # suite model compiler mode [extra env]
  local suite=$1 model=$2 comp=$3 mode=$4 envs=${5:-}
  rm -rf /tmp/cold-$model-$comp
  env $envs COLD_DIR=/tmp/cold-$model-$comp timeout 120 python3 bench/cold_compile.py --device cuda --suite $suite \
    --model $model --mode $mode --compiler $comp --json $OUT/cold.jsonl > /dev/null 2>> $OUT/cold.err
  echo "cold $model $comp $mode [$envs] rc $?: $(python3 -c "
import json,sys; d=[json.loads(l) for l in open(sys.argv[1])][-1]
print(d['model'], d['compiler'], d.get('mode'), 'cold', d['cold_s'], 'first', d['first_call_s'], 'steady', d['steady_s'], 'rel err', d['check'].get('rel_err_vs_eager'), 'graphs', d['check'].get('graphs'), 'fallbacks', d['check'].get('fallbacks'), 'via_fx', d['check'].get('via_fx_entries'), 'autodiff', d['check'].get('autodiff'))" $OUT/cold.jsonl 2>&1 | tail -2)"
}
cold timm resnet50 wick-own training
cold timm mobilenetv3_large_100 wick-own training
echo "host_ab at $(( $(date +%s) - S0 )) s"
for model in resnet50 convnext_base; do
  left=$(( 470 - ($(date +%s) - S0) ))
  [ $left -lt 60 ] && { echo "no time for $model"; break; }
  rm -rf /tmp/ab-caches; mkdir -p /tmp/ab-caches
  TORCHINDUCTOR_CACHE_DIR=/tmp/ab-caches/inductor TRITON_CACHE_DIR=/tmp/ab-caches/triton \
    WICK_CACHE_DIR=/tmp/ab-caches/wick timeout $left python3 bench/host_ab.py timm:$model \
    eager,inductor,wick,wick-aot training > $OUT/ab-$model.log 2>&1
  echo "ab $model rc $?"; grep -E "first call|^\| $model" $OUT/ab-$model.log | cut -c1-220
done
echo "== done in $(( $(date +%s) - S0 )) s"
