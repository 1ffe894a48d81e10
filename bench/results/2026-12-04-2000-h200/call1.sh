#!/bin/bash
# H200 call 1 of the 2026-12-04 20:00 session: 16-bit training batch norms as calls of eager's kernels inside
# wick's own graphs (WICK_CUDA_NORM_TRAINING=extern: _native_batch_norm_legit_functional in the forward,
# native_batch_norm_backward in the backward), then the timm half of the inference table.
#  1. tests: the CUDA conv-net training test (four routes x two dtypes), tests/autodiff, the batch norm and
#     channels-last runtime tests;
#  2. host_ab training rows of resnet50: eager, inductor, wick (own route, norms as calls), wick-aot
#     (AOTAutograd), wick-ro;
#  3. host_ab inference rows of the four timm models: eager, inductor, wick, wick-ro, one process.
# From the repository root; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
export PYTHONPATH=/tmp/site
python3 -c "import sys, torch, triton, timm, transformers; print(sys.version.split()[0], torch.__version__, triton.__version__, timm.__version__, transformers.__version__)"
timeout 110 env WICK_TEST_FAILURES=$OUT/failures.txt python3 -m pytest tests/gpu/test_channels_last_gpu.py \
  tests/autodiff tests/runtime/test_batch_norm_stats_own_capture.py tests/runtime/test_channels_last_training.py \
  -p no:cacheprovider -p no:warnings -rfE -v --tb=short -n 16 --dist worksteal 2>&1 | grep -v "DEBUG\|^$" > $OUT/tests.log
echo "tests rc $? at $(( $(date +%s) - S0 )) s: $(grep -c PASSED $OUT/tests.log) passed, $(grep -c FAILED $OUT/tests.log) failed; $(tail -1 $OUT/tests.log)"
[ -f $OUT/failures.txt ] && grep "^== " $OUT/failures.txt
ab() {  # name models variants mode limit
  rm -rf /tmp/ab-caches; mkdir -p /tmp/ab-caches
  TORCHINDUCTOR_CACHE_DIR=/tmp/ab-caches/inductor TRITON_CACHE_DIR=/tmp/ab-caches/triton \
    WICK_CACHE_DIR=/tmp/ab-caches/wick timeout $5 python3 bench/host_ab.py $2 $3 $4 > $OUT/ab-$1.log 2>&1
  echo "ab $1 rc $? at $(( $(date +%s) - S0 )) s"; grep -E "first call|^\| " $OUT/ab-$1.log | cut -c1-230
}
ab resnet50-training timm:resnet50 eager,inductor,wick,wick-aot,wick-ro training 150
left=$(( 560 - ($(date +%s) - S0) ))
ab timm-inference timm:resnet50,timm:mobilenetv3_large_100,timm:vit_base_patch16_224,timm:convnext_base \
  eager,inductor,wick,wick-ro inference $left
echo "== done in $(( $(date +%s) - S0 )) s"
