#!/bin/bash
# Call 4 of the fifth 2026-12-02 session: at the final tree, the CUDA op_db sweep of the batch-norm ops again
# (16-bit training batch norm back to cuDNN's by default after call 3), then the whole test suite with 16
# workers inside what is left of the call's 600 s. From the repository root on the H200; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
timeout 75 python3 tests/ops/opdb_sweep.py --device cuda --jobs 14 --max-samples 2 --inductor --budget 50 \
  --ops _batch_norm_with_update,_native_batch_norm_legit,native_batch_norm,nn.functional.batch_norm,nn.functional.batch_norm.without_cudnn,nn.functional.instance_norm,nn.functional.group_norm \
  --write $OUT/opdb_cuda_bn.json > $OUT/sweep.log 2>&1
echo "sweep exit $? at $(( $(date +%s) - S0 )) s"; tail -1 $OUT/sweep.log | cut -c1-300
SUITE_S=$(( ${TOTAL_S:-585} - ($(date +%s) - S0) )) N=16 bash bench/results/2026-12-02-1000-h200/suite.sh
echo "== call done in $(( $(date +%s) - S0 )) s"
