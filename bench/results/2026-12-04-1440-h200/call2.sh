#!/bin/bash
# Second H200 call: the graph layout pass after call 1's findings (conv biases as adds, adaptive_avg_pool2d(x, 1) as
# a mean, capture's layout copies dropped, activations eager holds channels-last followed) and cuDNN convolution
# plans built while the kernels compile (wick/_cudnn_plans.py).
#  1. tests: tests/gpu, tests/runtime/test_graph_layout.py, tests/autodiff/test_cudnn_plans.py;
#  2. cold inference compiles through wick.compile of resnet50, mobilenetv3_large_100, convnext_base (the last also
#     with WICK_WARM_CUDNN=0), inductor's of mobilenetv3 and convnext_base;
#  3. bench/host_ab.py inference rows of the three: eager, inductor, wick, wick-ro, wick-fx (fresh caches).
# From the repository root; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
export PYTHONPATH=/tmp/site
timeout 170 env WICK_TEST_FAILURES=$OUT/failures.txt python3 -m pytest tests/gpu tests/runtime/test_graph_layout.py \
  tests/autodiff/test_cudnn_plans.py -p no:cacheprovider -p no:warnings -rfE -q --tb=short -n 16 --dist worksteal \
  2>&1 | grep -v "DEBUG\|^$" > $OUT/tests.log
echo "tests rc $? at $(( $(date +%s) - S0 )) s: $(grep -cE '^(PASSED|FAILED)' $OUT/tests.log) lines; $(tail -1 $OUT/tests.log)"
[ -f $OUT/failures.txt ] && grep "^== " $OUT/failures.txt
cold() {  # suite model compiler [extra env]
  local suite=$1 model=$2 comp=$3 envs=${4:-}
  rm -rf /tmp/cold-$model-$comp
  env $envs COLD_DIR=/tmp/cold-$model-$comp timeout 100 python3 bench/cold_compile.py --device cuda --suite $suite \
    --model $model --mode inference --compiler $comp --json $OUT/cold.jsonl > /dev/null 2>> $OUT/cold.err
  echo "cold $model $comp [$envs] rc $?: $(python3 -c "
import json,sys; d=[json.loads(l) for l in open(sys.argv[1])][-1]; t=d.get('triton_timeline') or {}
print(d['model'], d['compiler'], 'cold', d['cold_s'], 'first', d['first_call_s'], 'steady', d['steady_s'], 'rel err', d['check'].get('rel_err_vs_eager'), 'graphs', d['check'].get('graphs'), 'fallbacks', d['check'].get('fallbacks'), 'via_fx', d['check'].get('via_fx_entries'))
print({k: v for k, v in t.items() if k in ('jobs', 'processes_ready_s', 'last_job_ended_s')})" $OUT/cold.jsonl 2>&1 | tail -2)"
}
cold timm resnet50 wick-own
cold timm mobilenetv3_large_100 wick-own
cold timm convnext_base wick-own
cold timm mobilenetv3_large_100 wick-own WICK_WARM_CUDNN=0
cold timm mobilenetv3_large_100 inductor
cold timm convnext_base inductor
echo "host_ab at $(( $(date +%s) - S0 )) s"
for model in convnext_base mobilenetv3_large_100 resnet50; do
  left=$(( 585 - ($(date +%s) - S0) ))
  [ $left -lt 60 ] && { echo "no time for $model"; break; }
  rm -rf /tmp/ab-caches; mkdir -p /tmp/ab-caches
  TORCHINDUCTOR_CACHE_DIR=/tmp/ab-caches/inductor TRITON_CACHE_DIR=/tmp/ab-caches/triton \
    WICK_CACHE_DIR=/tmp/ab-caches/wick timeout $left python3 bench/host_ab.py timm:$model \
    eager,inductor,wick,wick-ro,wick-fx inference > $OUT/ab-$model.log 2>&1
  echo "ab $model rc $?"; grep -E "first call|^\| $model" $OUT/ab-$model.log | cut -c1-220
done
echo "== done in $(( $(date +%s) - S0 )) s"
