#!/bin/bash
# lead's final H200 check: whole suite (vision models file spread over workers), then wick rows of the bench
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo build $?
timeout ${SUITE_S:-200} python3 -m pytest tests -p no:cacheprovider -p no:warnings -rfE -n 14 --dist loadfile \
  --ignore tests/capture/test_vision_models.py 2>&1 | grep -v "DEBUG\|^$" | tail -c 400000 > $OUT/tests.log
grep -E "passed|failed" $OUT/tests.log | tail -2; grep "^FAILED\|^ERROR" $OUT/tests.log | cut -c1-300 | head -30
timeout ${VISION_S:-150} python3 -m pytest tests/capture/test_vision_models.py -p no:cacheprovider -p no:warnings -rfE -n 12 --dist load 2>&1 | grep -v "DEBUG\|^$" | tail -c 100000 > $OUT/vision.log
grep -E "passed|failed" $OUT/vision.log | tail -2; grep "^FAILED\|^ERROR" $OUT/vision.log | cut -c1-300 | head
if [ -n "${MODELS:-}" ]; then
  OUT=$OUT/bench bash bench/gpu_run.sh 1/1 > $OUT/bench.log 2>&1
  grep "^| " $OUT/bench/report.md | cut -d'|' -f2-13,17 | cut -c1-300 | head -60
fi
