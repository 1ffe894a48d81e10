#!/bin/bash
# Third H200 call: the whole test suite at this session's head (tests/autodiff included), on the H200.
# From the repository root on the device; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
timeout $(( ${TOTAL_S:-590} - ($(date +%s) - S0) )) python3 -m pytest tests -p no:cacheprovider -p no:warnings -rfE -vv \
  --tb=short --durations=15 -n 16 2>&1 | grep -v "DEBUG\|^$" > $OUT/tests.log
echo "pytest done at $(( $(date +%s) - S0 )) s"
echo "results: $(grep -c ' PASSED ' $OUT/tests.log) passed, $(grep -c ' SKIPPED ' $OUT/tests.log) skipped, $(grep -c ' FAILED ' $OUT/tests.log) failed, $(grep -c ' ERROR ' $OUT/tests.log) errors"
grep -E "[0-9]+ passed" $OUT/tests.log | tail -1
grep "^FAILED\|^ERROR" $OUT/tests.log | cut -c1-300 | head -40
gzip -f $OUT/tests.log
echo "== done in $(( $(date +%s) - S0 )) s"
