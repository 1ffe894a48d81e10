#!/bin/bash
# lead's end-of-session H200 check: GPU tests, compiler tests, vision models (Python 3.12)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo build $?
timeout ${T1:-120} python3 -m pytest tests/gpu tests/runtime tests/codegen -p no:cacheprovider -p no:warnings -rfE -v -n 16 --dist loadfile 2>&1 | grep -v "DEBUG\|^$" | tail -c 400000 > $OUT/tests.log
echo "gpu/runtime/codegen: $(grep -c ' PASSED ' $OUT/tests.log) passed, $(grep -c ' SKIPPED ' $OUT/tests.log) skipped, $(grep -c ' FAILED ' $OUT/tests.log) failed"; grep -E "passed|failed" $OUT/tests.log | tail -1; grep " FAILED \|^ERROR" $OUT/tests.log | cut -c1-250 | head -20
timeout ${T2:-160} python3 -m pytest tests/capture/test_vision_models.py -p no:cacheprovider -p no:warnings -rfE -v -n 16 --dist load 2>&1 | grep -v "DEBUG\|^$" | tail -c 100000 > $OUT/vision.log
echo "vision: $(grep -c ' PASSED ' $OUT/vision.log) passed, $(grep -c ' FAILED ' $OUT/vision.log) failed"; grep -E "passed|failed" $OUT/vision.log | tail -1; grep " FAILED \|^ERROR" $OUT/vision.log | cut -c1-250 | head
