#!/bin/bash
# H200 call 2: 16-bit training batch norms as cuDNN's calls inside wick's own graphs, updating the running
# statistics in place (_autodiff._batch_norm_updating, batch_norm_backward), then the training table.
#  1. tests: the CUDA conv-net training test (four routes x two dtypes), the batch norm autodiff tests;
#  2. host_ab training rows (bf16 autocast SGD step): resnet50 with eager, inductor, wick, wick-ro, wick-aot;
#     mobilenetv3_large_100, vit_base_patch16_224, convnext_base, BertForMaskedLM, GPT2LMHeadModel with eager,
#     inductor, wick, wick-ro (one process per model, fresh caches).
# From the repository root; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
export PYTHONPATH=/tmp/site
timeout -k 5 60 env WICK_TEST_FAILURES=$OUT/failures.txt python3 -m pytest \
  "tests/gpu/test_channels_last_gpu.py::test_wick_compile_conv_net_training" tests/autodiff/test_autodiff_batch_norm.py \
  -p no:cacheprovider -p no:warnings -rfE -vv --tb=short -n 16 --dist worksteal 2>&1 | grep -v "DEBUG\|^$" > $OUT/tests.log
pkill -9 -f "sys.stdin.readline" 2>/dev/null; pkill -9 -f "pytest" 2>/dev/null; sleep 1
echo "tests at $(( $(date +%s) - S0 )) s: $(grep -c ' PASSED ' $OUT/tests.log) passed, $(grep -c ' FAILED ' $OUT/tests.log) failed; $(grep -E '[0-9]+ passed' $OUT/tests.log | tail -1)"
grep " PASSED \| FAILED " $OUT/tests.log | grep conv_net_training | sed 's/.*\(PASSED\|FAILED\)/\1/' | tr '\n' ' '; echo
[ -f $OUT/failures.txt ] && grep "^== " $OUT/failures.txt
ab() {  # name models variants mode
  local left=$(( 500 - ($(date +%s) - S0) ))
  [ $left -lt 40 ] && { echo "no time for $1"; return; }
  rm -rf /tmp/ab-caches; mkdir -p /tmp/ab-caches
  TORCHINDUCTOR_CACHE_DIR=/tmp/ab-caches/inductor TRITON_CACHE_DIR=/tmp/ab-caches/triton \
    WICK_CACHE_DIR=/tmp/ab-caches/wick timeout $left python3 bench/host_ab.py $2 $3 $4 > $OUT/ab-$1.log 2>&1
  echo "ab $1 rc $? at $(( $(date +%s) - S0 )) s"; grep -E "first call|FAILED|^\| [^m]" $OUT/ab-$1.log | cut -c1-200
}
ab resnet50 timm:resnet50 eager,inductor,wick,wick-ro,wick-aot training
for m in timm:convnext_base timm:vit_base_patch16_224 huggingface:BertForMaskedLM huggingface:GPT2LMHeadModel \
         timm:mobilenetv3_large_100; do
  ab ${m#*:} $m eager,inductor,wick,wick-ro training
done
echo "== done in $(( $(date +%s) - S0 )) s"
