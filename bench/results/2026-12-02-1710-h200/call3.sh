#!/bin/bash
# Call 3 of the fifth 2026-12-02 session: the CUDA op_db sweep of the ops whose samples fell back at the last
# baseline (complex dtypes, 16-bit batch norms, ...) plus group norm, with inductor on the same samples, written
# for a --merge into tests/ops/opdb_baseline_cuda.json; then resnet50's training row (the split column
# reductions, 16-bit batch norm decomposed in training). From the repository root on the H200; carry [".whl"].
# Knobs: OPS (the sweep's --ops), AB and TOTAL_S (run.sh's).
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build0.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
timeout 150 python3 tests/ops/opdb_sweep.py --device cuda --jobs 14 --max-samples 2 --inductor --ops "$OPS" \
  --budget 120 --write $OUT/opdb_cuda_ops.json > $OUT/sweep.log 2>&1
echo "sweep exit $? at $(( $(date +%s) - S0 )) s"; tail -3 $OUT/sweep.log | cut -c1-300
TOTAL_S=$(( ${TOTAL_S:-300} - ($(date +%s) - S0) )) PROFILE_TOP=${PROFILE_TOP:-8} bash bench/results/2026-12-02-1000-h200/run.sh
echo "== call done in $(( $(date +%s) - S0 )) s"
