#!/bin/bash
# Fourth H200 call: resnet50's training step through wick.compile at the final tree (the sinking reverted).
# From the repository root on the device; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
PROFILE_TOP=0 timeout 75 python3 bench/host_ab.py timm:resnet50 eager,wick training 2>&1 \
  | grep -v "^\[wick\|DEBUG\|[Ww]arning\|warn(" | grep "^|\|first call"
echo "== done in $(( $(date +%s) - S0 )) s"
