#!/bin/bash
# Call 1 of the 2026-12-03 session: which attention kernel eager picks in the transformers models on CUDA
# (probe_sdpa.py); the GPU tests of the own capture's attention; then where the device time goes (PROFILE_TOP) in
# BERT inference, GPT-2 training and resnet50 training, eager / inductor / wick.compile. From the repository root;
# carry [".whl"].
D=bench/results/2026-12-03-h200
export PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build0.log 2>&1; echo "build $?"
timeout 100 python3 $D/probe_sdpa.py > $OUT/probe.log 2>&1; echo "probe $?"; grep -v "^\[wick\|arning" $OUT/probe.log | cut -c1-400
PROFILE_TOP=15 TOTAL_S=${TOTAL_S:-480} TESTS_S=150 \
  TESTS="tests/gpu/test_capture_attention_gpu.py tests/gpu/test_native_externs_gpu.py tests/gpu/test_autocast_capture_gpu.py" \
  AB="huggingface:BertForMaskedLM|eager,inductor,wick|inference;huggingface:GPT2LMHeadModel|eager,inductor,wick|training;timm:resnet50|eager,inductor,wick|training" \
  bash bench/results/2026-12-02-1000-h200/run.sh
grep -A16 "top 15" $OUT/ab.log | cut -c1-160 | head -120
