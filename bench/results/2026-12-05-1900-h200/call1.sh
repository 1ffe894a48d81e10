#!/bin/bash
# Call 1 of 2026-12-05 19:00 (H200), at 57a83bb: the GPU-facing tests, then reduce-overhead training rows
# (BERT, GPT-2, LLaMA, T5). carry [".whl"]. Output: call1/ (ab-*.log, suite/).
TOTAL=540 bash tests/gpu/h200_reduce_overhead_training.sh
