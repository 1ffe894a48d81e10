#!/bin/bash
# Call 2: the full CUDA op_db sweep again after call 1's findings were fixed (written as
# tests/ops/opdb_baseline_cuda.json), the new GPU tests, then bench/host_ab.py rows of the vision
# models with each variant's top kernels (PROFILE_TOP), through ../2026-12-02-1000-h200/run.sh.
# From the repository root on the H200; carry [".whl"]. Knobs: SWEEP_BUDGET, TESTS, AB, TOTAL_S (run.sh's).
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build0.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
timeout $(( ${SWEEP_BUDGET:-240} + 90 )) python3 tests/ops/opdb_sweep.py --device cuda --jobs 14 --max-samples 2 --inductor \
  --budget ${SWEEP_BUDGET:-240} --write $OUT/opdb_baseline_cuda.json > $OUT/sweep.log 2>&1
echo "sweep exit $? at $(( $(date +%s) - S0 )) s"; tail -1 $OUT/sweep.log | cut -c1-300
TOTAL_S=$(( ${TOTAL_S:-540} - ($(date +%s) - S0) )) PROFILE_TOP=${PROFILE_TOP:-15} bash bench/results/2026-12-02-1000-h200/run.sh
echo "== call done in $(( $(date +%s) - S0 )) s"
