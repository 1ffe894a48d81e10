#!/bin/bash
# First H200 call of the session: convolutional training on wick's own graphs (training batch norm as table ops,
# the channels-last pass on the forward, the backward following it).
#  1. tests: tests/gpu/test_channels_last_gpu.py, tests/autodiff, the batch norm and channels-last runtime tests,
#     tests/capture/test_vision_models.py (forward-backward of timm/torchvision models on CUDA), and the 11 tests
#     the limit cut from this session's whole-suite run;
#  2. cold training compiles (bench/cold_compile.py, fresh process, empty caches): wick.compile of resnet50,
#     convnext_base, mobilenetv3_large_100; inductor's of resnet50;
#  3. bench/host_ab.py training rows of resnet50: eager, inductor, wick, wick-aot (the old route, AOTAutograd).
# From the repository root; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
export PYTHONPATH=/tmp/site
timeout 200 env WICK_TEST_FAILURES=$OUT/failures.txt python3 -m pytest tests/gpu/test_channels_last_gpu.py \
  tests/autodiff tests/runtime/test_batch_norm_stats_own_capture.py tests/runtime/test_channels_last_training.py \
  tests/runtime/test_graph_layout.py tests/capture/test_vision_models.py tests/capture/test_breaks_api.py \
  "tests/capture/test_models.py::test_model_train_mode_step_is_one_graph[whisper]" \
  "tests/codegen/test_pointwise_streams.py::test_streamed_flat_kernels_take_their_exps_a_chunk_at_a_time[77-1]" \
  tests/gpu/test_opdb_sweep_gpu.py::test_triton_interpret_slice \
  -p no:cacheprovider -p no:warnings -rfE -q --tb=short -n 16 --dist worksteal \
  2>&1 | grep -v "DEBUG\|^$" > $OUT/tests.log
echo "tests rc $? at $(( $(date +%s) - S0 )) s: $(tail -1 $OUT/tests.log)"
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
cold timm convnext_base wick-own training
cold timm mobilenetv3_large_100 wick-own training
cold timm resnet50 inductor training
echo "host_ab at $(( $(date +%s) - S0 )) s"
for model in resnet50; do
  left=$(( 590 - ($(date +%s) - S0) ))
  [ $left -lt 60 ] && { echo "no time for $model"; break; }
  rm -rf /tmp/ab-caches; mkdir -p /tmp/ab-caches
  TORCHINDUCTOR_CACHE_DIR=/tmp/ab-caches/inductor TRITON_CACHE_DIR=/tmp/ab-caches/triton \
    WICK_CACHE_DIR=/tmp/ab-caches/wick timeout $left python3 bench/host_ab.py timm:$model \
    eager,inductor,wick,wick-aot training > $OUT/ab-$model.log 2>&1
  echo "ab $model rc $?"; grep -E "first call|^\| $model" $OUT/ab-$model.log | cut -c1-220
done
echo "== done in $(( $(date +%s) - S0 )) s"
