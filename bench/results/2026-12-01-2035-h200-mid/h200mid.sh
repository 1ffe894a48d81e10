#!/bin/bash
# lead's mid-session H200 check: whole suite except vision (3.12), then host_ab rows
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
cp .whl/*.whl /tmp/
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo build $?
timeout ${SUITE_S:-200} python3 -m pytest tests -p no:cacheprovider -p no:warnings -rfE -n 14 --dist loadfile \
  --ignore tests/capture/test_vision_models.py 2>&1 | grep -v "DEBUG\|^$" | tail -c 400000 > $OUT/tests.log
grep -E "passed|failed" $OUT/tests.log | tail -2; grep "^FAILED\|^ERROR" $OUT/tests.log | cut -c1-300 | head -30
mkdir -p $OUT/ab && OUT=$OUT/ab TESTS_S=0 TOTAL_S=${AB_S:-170} AB="$AB" bash bench/gpu10_run.sh 2>&1 | tail -30
