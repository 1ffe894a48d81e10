#!/bin/bash
# H200 calls of the 2026-12-02 third session (issue 9): build wick, run test files, then bench/host_ab.py rows,
# inside one time budget. From the repository root on the H200 machine; carry [".whl"] (expecttest, xdist wheels).
# Knobs: TOTAL_S (budget, default 540), TESTS (pytest arguments; empty skips), TESTS_S (their limit), TESTS_N
# (workers), AB: rows separated by ';', each MODELS|VARIANTS|MODE (bench/host_ab.py's arguments), AB_FIRST=1:
# the rows before the tests.
# Writes $OUT/build.log tests.log ab.log.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
S0=$(date +%s)
TOTAL_S=${TOTAL_S:-540}
left() { echo $(( TOTAL_S - ($(date +%s) - S0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import sys, torch, triton; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
run_tests() {
  timeout ${TESTS_S:-150} python3 -m pytest $TESTS -p no:cacheprovider -p no:warnings -rfE -vv --tb=short \
    -n ${TESTS_N:-16} 2>&1 | grep -v "DEBUG\|^$" | tail -c 250000 > $OUT/tests.log
  echo "tests: $(grep -c ' PASSED ' $OUT/tests.log) passed, $(grep -c ' SKIPPED ' $OUT/tests.log) skipped, $(grep -c ' FAILED ' $OUT/tests.log) failed, $(grep -c ' ERROR ' $OUT/tests.log) errors"
  grep -E "[0-9]+ passed|[0-9]+ failed" $OUT/tests.log | tail -1
  grep " FAILED \| ERROR \|^FAILED\|^ERROR\|^E  " $OUT/tests.log | cut -c1-300 | head -30
}
run_rows() {
IFS=';' read -ra ROWS <<< "${AB:-}"
for row in "${ROWS[@]}"; do
  IFS='|' read -r models variants mode <<< "$row"
  rows_left=$(( $(left) - ${RESERVE_S:-0} ))  # RESERVE_S: kept for the tests after the rows
  if [ "$rows_left" -lt 30 ]; then echo "not run (budget): $row"; continue; fi
  echo "== $row ($rows_left s left)" >> $OUT/ab.log
  timeout "$rows_left" python3 bench/host_ab.py "$models" "$variants" "${mode:-inference}" 2>&1 \
    | grep -v "^\[wick\|DEBUG\|[Ww]arning\|warn(" >> $OUT/ab.log
  echo "row exit ${PIPESTATUS[0]}: $row" >> $OUT/ab.log
done
[ -f $OUT/ab.log ] && grep "^|\|FAILED\|first call\|phases\|graph:\|row exit\|not run\|Error" $OUT/ab.log | cut -c1-500
}
# AB_FIRST=1: the rows, then the tests (given the time left, at most TESTS_S)
if [ "${AB_FIRST:-0}" = 1 ]; then
  run_rows
  TESTS_S=$(( $(left) < ${TESTS_S:-150} ? $(left) : ${TESTS_S:-150} ))
  [ -n "${TESTS:-}" ] && run_tests
else
  [ -n "${TESTS:-}" ] && run_tests
  run_rows
fi
echo "== done in $(( $(date +%s) - S0 )) s"
