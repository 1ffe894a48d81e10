#!/bin/bash
# After the math-path attention inlining (32585d0): the own capture's GPU attention, native-extern and autocast
# tests, then BERT inference eager / inductor / wick.compile with the top device kernels. From the repository root;
# carry [".whl"].
export PYTHONUNBUFFERED=1
PROFILE_TOP=12 TOTAL_S=${TOTAL_S:-330} TESTS_S=130 \
  TESTS="tests/gpu/test_capture_attention_gpu.py tests/gpu/test_native_externs_gpu.py tests/gpu/test_autocast_capture_gpu.py" \
  AB="huggingface:BertForMaskedLM|eager,inductor,wick|inference" \
  bash bench/results/2026-12-02-1000-h200/run.sh
grep -A14 "top 12" $OUT/ab.log | cut -c1-160 | head -60
