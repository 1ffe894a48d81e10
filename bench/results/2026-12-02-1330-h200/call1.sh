#!/bin/bash
# Call 1 of the fourth 2026-12-02 session: the kernel bench (bench/gpu_triton.py, copy bandwidth in the same run)
# and the full CUDA op_db sweep with inductor on the same samples (tests/ops/opdb_sweep.py's docstring command),
# inside one budget. From the repository root on the H200; carry [".whl"].
# Knobs: KERN_S (kernel bench limit, default 200), SWEEP_BUDGET (the sweep's --budget, default 300).
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
python3 -c "import sys, torch, triton; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
mkdir -p $OUT/kernels
timeout ${KERN_S:-200} python3 bench/gpu_triton.py --out $OUT/kernels > $OUT/kernels/bench.log 2>&1
echo "kernels exit $? at $(( $(date +%s) - S0 )) s"; grep "^|" $OUT/kernels/report.md 2>/dev/null | cut -c1-400
timeout $(( ${SWEEP_BUDGET:-300} + 90 )) python3 tests/ops/opdb_sweep.py --device cuda --jobs 14 --max-samples 2 --inductor \
  --budget ${SWEEP_BUDGET:-300} --write $OUT/opdb_baseline_cuda.json > $OUT/sweep.log 2>&1
echo "sweep exit $? at $(( $(date +%s) - S0 )) s"; tail -25 $OUT/sweep.log | cut -c1-300
echo "== done in $(( $(date +%s) - S0 )) s"
