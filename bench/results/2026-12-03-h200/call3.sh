#!/bin/bash
# Call 3: after the cudnn bool-mask form (transformers 5.17 gives BERT a bool mask while compiling): the own
# capture's CUDA attention tests, then BERT inference eager / inductor / wick.compile. From the repository root;
# carry [".whl"].
export PYTHONUNBUFFERED=1
TOTAL_S=${TOTAL_S:-180} TESTS_S=70 TESTS="tests/gpu/test_capture_attention_gpu.py" \
  AB="huggingface:BertForMaskedLM|eager,inductor,wick|inference" \
  bash bench/results/2026-12-02-1000-h200/run.sh
