#!/bin/bash
# helper gpu9's last device call: build, the GPU tests (8 workers), then
# bench/layout_ab.py (eager / inductor / wick / wick NCHW / wick reduce-overhead
# in one process) on MODELS. Writes under $OUT.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
S0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import sys, torch, triton; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
timeout ${TESTS_S:-45} python3 -m pytest tests/gpu -n 8 -p no:cacheprovider -p no:warnings -q 2>&1 | tail -c 20000 > $OUT/tests.log
grep -E "passed|failed|error" $OUT/tests.log | tail -2; grep "^FAILED\|^ERROR" $OUT/tests.log | cut -c1-300 | head
echo "== A/B at $(( $(date +%s) - S0 )) s"
timeout ${AB_S:-170} python3 bench/layout_ab.py ${MODELS:-resnet50,mobilenetv3_large_100} 2>&1 | grep -v "Warning\|warn(" | tee $OUT/layout_ab.log | grep "^|\|first call"
echo "== done at $(( $(date +%s) - S0 )) s"
