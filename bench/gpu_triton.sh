#!/usr/bin/env bash
# wick's Triton backend on the H200 (device tool), from the repository root:
#
#   OUT=... bash bench/gpu_triton.sh [tests|bench|all]     (default all)
#
# Builds wick with the machine's python3/torch/triton, runs the GPU tests
# (tests/gpu) and the interpreter tests, then times the kernels (eager vs
# inductor vs wick, copy bandwidth in the same run: bench/gpu_triton.py).
# Writes build.log, tests.log, bench.log, results.json, report.md into $OUT.
set -u
PY=${PY:-python3}
WHAT=${1:-all}
OUT=${OUT:-$PWD/bench/results/gpu-triton-$(date +%Y-%m-%d-%H%M)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export WICK_CACHE_DIR=${WICK_CACHE_DIR:-/tmp/wick-cache}
START=$(date +%s)
{
  echo "== $(date -u)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  "$PY" -c "import sys, torch, triton; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  rm -f wick/_C*.so
  timeout 300 "$PY" setup.py -q build_ext --inplace --force --parallel "$(nproc)"
  echo "build exit code $?"
} > "$OUT/build.log" 2>&1
tail -3 "$OUT/build.log"
if [ "$WHAT" != bench ]; then
  timeout ${TEST_S:-240} "$PY" -m pytest tests/gpu tests/codegen/test_triton_interpret.py -p no:warnings -p no:cacheprovider \
      -q ${PYTEST_ARGS:--x} > "$OUT/tests.log" 2>&1
  echo "tests exit code $? ($(( $(date +%s) - START )) s)"; tail -25 "$OUT/tests.log"
fi
if [ "$WHAT" != tests ]; then
  timeout ${BENCH_S:-300} "$PY" bench/gpu_triton.py --out "$OUT" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
  echo "bench exit code $? ($(( $(date +%s) - START )) s)"; tail -40 "$OUT/bench.log"
fi
