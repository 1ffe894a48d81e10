#!/bin/bash
# Call 3 of 2026-12-05 19:00 (H200), at 57a83bb: vision training rows (bf16 autocast SGD step, batch 64) with
# eager, inductor, wick and wick reduce-overhead, one process per model, fresh caches; then (a fourth command on
# the same warm machine, kept here) a kernel profile of resnet50's step, inductor against wick (prof-resnet50.log).
S0=$(date +%s); python3 setup.py -q build_ext --inplace --parallel 16 > /dev/null 2>&1; echo build $?; mkdir -p /tmp/c
for m in resnet50 vit_base_patch16_224 convnext_base; do
  left=$(( 540 - ($(date +%s) - S0) )); [ $left -lt 60 ] && break; rm -rf /tmp/c/*
  TORCHINDUCTOR_CACHE_DIR=/tmp/c/i TRITON_CACHE_DIR=/tmp/c/t WICK_CACHE_DIR=/tmp/c/w timeout $left \
    python3 bench/host_ab.py timm:$m eager,inductor,wick,wick-ro training > $OUT/ab-$m.log 2>&1
  echo "ab $m rc $? at $(( $(date +%s) - S0 )) s"; grep -E "first call|FAILED|CUDA graphs:|^\| [^m]" $OUT/ab-$m.log | cut -c1-220
done
# the profile (its own command):
rm -rf /tmp/c/*; TORCHINDUCTOR_CACHE_DIR=/tmp/c/i TRITON_CACHE_DIR=/tmp/c/t WICK_CACHE_DIR=/tmp/c/w PROFILE_TOP=40 \
  timeout 420 python3 bench/host_ab.py timm:resnet50 inductor,wick training > $OUT/prof-resnet50.log 2>&1
