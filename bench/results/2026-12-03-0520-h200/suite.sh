#!/bin/bash
# The whole test suite on the H200 (Python 3.12, torch 2.11): build wick, then pytest with 16 workers, every
# result named (-vv) and the slowest tests listed; the whole log comes back gzipped ($OUT/tests.log.gz).
# From the repository root on the device; carry [".whl"] (expecttest, pytest-xdist, execnet wheels).
# Knobs: TESTS (pytest arguments, default tests), SUITE_S (pytest's limit, default 520), N (workers, default 16).
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
python3 -c "import sys, torch, triton, transformers; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout ${SUITE_S:-520} python3 -m pytest ${TESTS:-tests} -p no:cacheprovider -p no:warnings -rfE -vv --tb=short \
  --durations=30 -n ${N:-16} 2>&1 | grep -v "DEBUG\|^$" > $OUT/tests.log
echo "pytest done at $(( $(date +%s) - S0 )) s"
echo "results: $(grep -c ' PASSED ' $OUT/tests.log) passed, $(grep -c ' SKIPPED ' $OUT/tests.log) skipped, $(grep -c ' FAILED ' $OUT/tests.log) failed, $(grep -c ' ERROR ' $OUT/tests.log) errors"
grep -E "[0-9]+ passed" $OUT/tests.log | tail -1
grep "^FAILED\|^ERROR" $OUT/tests.log | cut -c1-300 | head -40
grep -A32 "slowest 30 durations" $OUT/tests.log | cut -c1-160
gzip -f $OUT/tests.log
echo "== done in $(( $(date +%s) - S0 )) s"
