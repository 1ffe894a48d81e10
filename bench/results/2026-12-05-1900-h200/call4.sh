#!/bin/bash
# Call 4 of 2026-12-05 19:00 (H200): sibling reductions (one Triton function for reductions over the same loops)
# and one-pass batch statistics on CUDA: the GPU tests of the Triton backend, then resnet50 training with its
# bf16 batch norms decomposed (WICK_CUDA_NORM_TRAINING=decompose) against the default (AOTAutograd, cuDNN's
# norms) and inductor, and BERT training (layer norm weight and bias gradients are siblings). Fresh caches,
# one process per row set. From the repository root; writes $OUT.
set -u
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/wick-site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/wick-site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build rc $?"
timeout 150 python3 -m pytest tests/gpu/test_triton_gpu.py tests/codegen/test_reductions.py -x -q -p no:cacheprovider \
  -p no:warnings -n 8 2>&1 | tail -3
ab() {  # log env models variants
  rm -rf /tmp/c; mkdir -p /tmp/c
  env $2 TORCHINDUCTOR_CACHE_DIR=/tmp/c/i TRITON_CACHE_DIR=/tmp/c/t WICK_CACHE_DIR=/tmp/c/w PROFILE_TOP=${PROFILE_TOP:-0} \
    timeout $(( 560 - ($(date +%s) - S0) )) python3 bench/host_ab.py $3 $4 training > $OUT/$1.log 2>&1
  echo "$1 rc $? at $(( $(date +%s) - S0 )) s"; grep -E "first call|^\| [^m]" $OUT/$1.log | cut -c1-200
}
ab resnet50-default WICK_X=0 timm:resnet50 eager,inductor,wick
PROFILE_TOP=30 ab resnet50-decompose WICK_CUDA_NORM_TRAINING=decompose timm:resnet50 wick
ab bert WICK_X=0 huggingface:BertForMaskedLM wick
echo "== done in $(( $(date +%s) - S0 )) s"
