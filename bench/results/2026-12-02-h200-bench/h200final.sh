#!/bin/bash
# Final H200 call of the session: build, the test suite but tests/capture (which passed at 707376d, call 0),
# plus the capture files the merges touched, then first-call times of the convolution models with the Triton
# kernel dedup. From the repository root; carry [".whl"].
set -u
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
timeout ${SUITE_S:-300} python3 -m pytest tests --ignore=tests/capture tests/capture/test_capture_training.py \
  tests/capture/test_models.py -p no:cacheprovider -p no:warnings -rfE -vv --tb=short -n 16 2>&1 \
  | grep -v "DEBUG\|^$" | tail -c 250000 > $OUT/tests.log
echo "tests: $(grep -c ' PASSED ' $OUT/tests.log) passed, $(grep -c ' SKIPPED ' $OUT/tests.log) skipped, $(grep -c ' FAILED ' $OUT/tests.log) failed, $(grep -c ' ERROR ' $OUT/tests.log) errors"
grep -E "[0-9]+ passed" $OUT/tests.log | tail -1
grep " FAILED \| ERROR \|^FAILED\|^ERROR" $OUT/tests.log | cut -c1-300 | head -20
for row in "timm:resnet50|eager,dynamo+wick,wick|inference" "timm:convnext_base|eager,dynamo+wick,wick|inference"; do
  IFS='|' read -r models variants mode <<< "$row"
  left=$(( ${TOTAL_S:-450} - ($(date +%s) - S0) )); [ $left -lt 40 ] && { echo "not run: $row"; continue; }
  timeout $left python3 bench/host_ab.py "$models" "$variants" "$mode" 2>&1 | grep -v "^\[wick\|DEBUG\|[Ww]arning" >> $OUT/ab.log
done
grep "^|\|first call\|Error" $OUT/ab.log | cut -c1-300
echo "== done in $(( $(date +%s) - S0 )) s"
