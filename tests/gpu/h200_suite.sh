#!/bin/bash
# The whole test suite on the H200 of the device tool (Python 3.12, torch with CUDA, Triton, transformers, timm,
# torchvision, no network), which includes the GPU op sweep (tests/gpu/test_opdb_sweep_gpu.py) and the model
# checks (tests/capture/test_vision_models.py, tests/models). From the repository root, with the wheels of
# expecttest, pytest-xdist and execnet in .whl/ (carried: `pip download -d .whl --no-deps expecttest pytest-xdist
# execnet` on a machine with network):
#
#   bash tests/gpu/h200_suite.sh            writes $OUT/build.log, $OUT/tests.log.gz, $OUT/failures.txt
#
# Builds wick with the machine's own Python and torch, then runs pytest with 16 workers, the tests of
# tests/gpu/slow_tests.txt first, each at the front of another worker's share (WICK_TEST_SLOW_FIRST, --dist
# worksteal: on 2026-12-05 seven of them began late and were still running at 500 s), every result named (-vv), the slowest
# tests listed, failures written as they happen (WICK_TEST_FAILURES, tests/conftest.py) so that a run the call's
# limit stops still names them. SUITE_S: pytest's limit (default: what is left of 585 s
# after the build); TESTS: pytest's arguments (default tests); N: workers (16). The suite took 458 s of pytest on
# 2026-12-04 (bench/results/2026-12-04-1215-h200/COMMAND.md).
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
OUT=${OUT:-/tmp/wick-suite}
mkdir -p "$OUT"
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/wick-site .whl/*.whl 2>/dev/null &&
    export PYTHONPATH=/tmp/wick-site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 setup.py -q build_ext --inplace --parallel 16 > "$OUT/build.log" 2>&1
echo "build rc $? in $(( $(date +%s) - S0 )) s"
python3 -c "import sys, torch, triton; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
LIMIT=${SUITE_S:-$(( 585 - ($(date +%s) - S0) ))}
echo "pytest limit $LIMIT s"
rm -f "$OUT/failures.txt"
WICK_TEST_SLOW_FIRST=tests/gpu/slow_tests.txt WICK_TEST_FAILURES="$OUT/failures.txt" timeout "$LIMIT" \
  python3 -m pytest ${TESTS:-tests} -p no:cacheprovider -p no:warnings -rfE -vv --tb=short --durations=40 \
  -n "${N:-16}" --dist worksteal 2>&1 | grep -v "DEBUG\|^$" > "$OUT/tests.log"
echo "pytest done at $(( $(date +%s) - S0 )) s"
echo "results: $(grep -c ' PASSED ' "$OUT/tests.log") passed, $(grep -c ' SKIPPED ' "$OUT/tests.log") skipped," \
  "$(grep -c ' FAILED ' "$OUT/tests.log") failed, $(grep -c ' ERROR ' "$OUT/tests.log") errors"
grep -E "[0-9]+ passed" "$OUT/tests.log" | tail -1
[ -f "$OUT/failures.txt" ] && grep "^== " "$OUT/failures.txt"
gzip -f "$OUT/tests.log"
echo "== done in $(( $(date +%s) - S0 )) s"
