#!/bin/bash
# One device call of helper gpu10 (issue 9): build wick, run the GPU tests,
# then bench/host_ab.py rows, inside one time budget. From the repository
# root on the H200 machine (wheels such as expecttest in /tmp/*.whl).
# Knobs: TOTAL_S (budget, default 225), TESTS_S (GPU tests' limit; 0 skips),
#   TESTS (test files), AB: rows separated by ';', each MODELS|VARIANTS|MODE
#   (bench/host_ab.py's arguments). Writes $OUT/build.log tests.log ab.log.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
S0=$(date +%s)
TOTAL_S=${TOTAL_S:-225}
left() { echo $(( TOTAL_S - ($(date +%s) - S0) )); }
ls /tmp/*.whl > /dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/*.whl \
  && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import sys, torch, triton; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
if [ "${TESTS_S:-70}" != 0 ]; then
  # -v: each result's name as it comes (a run cut by its limit still names its failures)
  timeout ${TESTS_S:-70} python3 -m pytest ${TESTS:-tests/gpu} -p no:cacheprovider -p no:warnings -rfE -vv --tb=short \
    -n ${TESTS_N:-12} 2>&1 | grep -v "DEBUG\|^$\|PytestBenchmarkWarning\|warner(" | tail -c 200000 > $OUT/tests.log
  echo "tests (limit ${TESTS_S:-70} s):"; grep -E "passed|failed" $OUT/tests.log | tail -2
  echo "results: $(grep -c ' PASSED ' $OUT/tests.log) passed, $(grep -c ' SKIPPED ' $OUT/tests.log) skipped, $(grep -c ' FAILED ' $OUT/tests.log) failed"
  grep "FAILED\|^ERROR\|^E  " $OUT/tests.log | cut -c1-300 | head -40
fi
IFS=';' read -ra ROWS <<< "${AB:-}"
for row in "${ROWS[@]}"; do
  IFS='|' read -r models variants mode <<< "$row"
  if [ "$(left)" -lt 25 ]; then echo "not run (budget): $row"; continue; fi
  echo "== $row ($(left) s left)" >> $OUT/ab.log
  timeout "$(left)" python3 bench/host_ab.py "$models" "$variants" "${mode:-inference}" 2>&1 \
    | grep -v "^\[wick\|DEBUG\|[Ww]arning" >> $OUT/ab.log
  echo "row exit ${PIPESTATUS[0]}: $row" >> $OUT/ab.log
done
grep "^|\|FAILED\|first call\|phases\|row exit\|not run\|Error" $OUT/ab.log | cut -c1-400
echo "== done in $(( $(date +%s) - S0 )) s"
