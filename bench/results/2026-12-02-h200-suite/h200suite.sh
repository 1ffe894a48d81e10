#!/bin/bash
# Whole test suite on the H200 (Python 3.12): build, then pytest tests/ with 16 workers,
# each result named as it comes (-v) so a run cut by its limit still names its failures.
set -u
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
python3 -c "import sys, torch, triton, transformers; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout ${SUITE_S:-450} python3 -m pytest ${TESTS:-tests} -p no:cacheprovider -p no:warnings -rfE -vv --tb=short -n ${N:-16} \
  2>&1 | grep -v "DEBUG\|^$" > $OUT/tests_full.log
tail -c 300000 $OUT/tests_full.log > $OUT/tests.log; rm -f $OUT/tests_full.log
echo "results: $(grep -c ' PASSED ' $OUT/tests.log) passed, $(grep -c ' SKIPPED ' $OUT/tests.log) skipped, $(grep -c ' FAILED ' $OUT/tests.log) failed, $(grep -c ' ERROR ' $OUT/tests.log) errors"
grep -E "[0-9]+ passed" $OUT/tests.log | tail -1
grep " FAILED \| ERROR \|^FAILED\|^ERROR" $OUT/tests.log | cut -c1-300 | head -40
echo "== done in $(( $(date +%s) - S0 )) s"
