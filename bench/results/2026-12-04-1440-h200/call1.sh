#!/bin/bash
# First H200 call of the 2026-12-04 14:30 session: the channels-last pass on wick's own graphs
# (wick/_graph_layout.py; conv inference graphs compile natively instead of through AOTAutograd).
#  1. tests: tests/gpu (the new test_wick_compile_conv_net[graph|fx] among them, and the tune-once test fixed last
#     session), tests/runtime/test_graph_layout.py, test_channels_last.py, test_batch_norm_stats_own_capture.py;
#  2. cold inference compiles (fresh process, empty caches) of resnet50, mobilenetv3_large_100, convnext_base
#     through wick.compile with the graph pass, and resnet50 through the ATen path (WICK_LAYOUT_PASS=fx);
#  3. bench/host_ab.py inference rows of the three models: eager, inductor, wick (graph pass), wick-fx, with fresh
#     inductor/Triton/wick caches (each variant's first call is then its compile in this process).
# From the repository root; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
export PYTHONPATH=/tmp/site
timeout 200 env WICK_TEST_FAILURES=$OUT/failures.txt python3 -m pytest tests/gpu tests/runtime/test_graph_layout.py \
  tests/runtime/test_channels_last.py tests/runtime/test_batch_norm_stats_own_capture.py -p no:cacheprovider \
  -p no:warnings -rfE -q --tb=short -n 16 --dist worksteal 2>&1 | grep -v "DEBUG\|^$" > $OUT/tests.log
echo "tests rc $? at $(( $(date +%s) - S0 )) s: $(grep -E '[0-9]+ (passed|failed)' $OUT/tests.log | tail -1)"
[ -f $OUT/failures.txt ] && grep "^== " $OUT/failures.txt
cold() {  # suite model compiler [extra env]
  local suite=$1 model=$2 comp=$3 envs=${4:-}
  rm -rf /tmp/cold-$model-$comp
  env $envs COLD_DIR=/tmp/cold-$model-$comp timeout 100 python3 bench/cold_compile.py --device cuda --suite $suite \
    --model $model --mode inference --compiler $comp --json $OUT/cold.jsonl > /dev/null 2>> $OUT/cold.err
  echo "cold $model $comp [$envs] rc $?: $(python3 -c "
import json,sys; d=[json.loads(l) for l in open(sys.argv[1])][-1]; t=d.get('triton_timeline') or {}
print(d['model'], d['compiler'], 'cold', d['cold_s'], 'first', d['first_call_s'], 'steady', d['steady_s'], d['pass'], d.get('graphs'), d.get('fallbacks'))
print({k: v for k, v in t.items() if k not in ('slowest', 'repeated_examples', 'jobs_per_kernel')})" $OUT/cold.jsonl 2>&1 | tail -2)"
}
cold timm resnet50 wick-own
cold timm resnet50 wick-own WICK_LAYOUT_PASS=fx
cold timm mobilenetv3_large_100 wick-own
cold timm convnext_base wick-own
echo "host_ab at $(( $(date +%s) - S0 )) s"
for model in resnet50 mobilenetv3_large_100 convnext_base; do
  left=$(( 585 - ($(date +%s) - S0) ))
  [ $left -lt 60 ] && { echo "no time for $model"; break; }
  rm -rf /tmp/ab-caches; mkdir -p /tmp/ab-caches
  TORCHINDUCTOR_CACHE_DIR=/tmp/ab-caches/inductor TRITON_CACHE_DIR=/tmp/ab-caches/triton \
    WICK_CACHE_DIR=/tmp/ab-caches/wick timeout $left python3 bench/host_ab.py timm:$model \
    eager,inductor,wick,wick-fx inference > $OUT/ab-$model.log 2>&1
  echo "ab $model rc $?"; grep -E "first call|^\| $model" $OUT/ab-$model.log | cut -c1-220
done
echo "== done in $(( $(date +%s) - S0 )) s"
