#!/bin/bash
# Call 2: the whole suite at this tree (the own capture's CUDA attention: fused kernels as C-shim externs), then
# BERT and GPT-2 inference rows (bf16, batch 16) eager / inductor / wick.compile. From the repository root;
# carry [".whl"].
export PYTHONUNBUFFERED=1
S0=$(date +%s)
SUITE_S=${SUITE_S:-400} bash bench/results/2026-12-02-1000-h200/suite.sh
mv $OUT/build.log $OUT/suite-build.log
TOTAL_S=$(( ${TOTAL_S:-575} - ($(date +%s) - S0) )) TESTS= \
  AB="huggingface:BertForMaskedLM,GPT2LMHeadModel|eager,inductor,wick|inference" \
  bash bench/results/2026-12-02-1000-h200/run.sh
