#!/bin/bash
# Call 3, at the merged head: the whole suite (../2026-12-02-1000-h200/suite.sh: build, pytest tests with 16
# workers), then bench/host_ab.py rows through ../2026-12-02-1000-h200/run.sh (AB, TOTAL_S for the rows).
# From the repository root on the H200 machine; carry [".whl"].
set -u
S0=$(date +%s)
SUITE_S=${SUITE_S:-400} bash bench/results/2026-12-02-1000-h200/suite.sh
nvidia-smi --query-gpu=index,name --format=csv,noheader
mv $OUT/build.log $OUT/build_suite.log
TOTAL_S=${ROWS_S:-240} PROFILE_TOP=${PROFILE_TOP:-12} TESTS= bash bench/results/2026-12-02-1000-h200/run.sh
echo "== call done in $(( $(date +%s) - S0 )) s"
