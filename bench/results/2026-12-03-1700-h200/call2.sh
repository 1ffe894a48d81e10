#!/bin/bash
# Second H200 call: the row-group hoist (rows.c: a layer norm backward's input gradient joins the row sums' group
# past the weight's column sums) and the wider split of column reductions (cgen_triton.c: 4096 rows and up), A/B
# against the same tree without them (call2-change.patch reversed), training rows of vit_base_patch16_224 and
# resnet50; the GPU tests and the changed files' tests first.
# From the repository root on the device; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
D=bench/results/2026-12-03-1700-h200
S0=$(date +%s)
left() { echo $(( ${TOTAL_S:-430} - ($(date +%s) - S0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
row() {  # model variants tag cache
  local T=$(left); [ $T -lt 40 ] && { echo "$1 $3: not run ($T s left)"; return; }
  WICK_CACHE_DIR=$4 PROFILE_TOP=${PROFILE_TOP:-30} timeout $T python3 bench/host_ab.py timm:$1 $2 training 2>&1 \
    | grep -v "^\[wick\|DEBUG\|[Ww]arning\|warn(" > $OUT/ab-$1-$3.log
  echo "== $1 $3 rc ${PIPESTATUS[0]} at $(( $(date +%s) - S0 )) s"; grep "^|" $OUT/ab-$1-$3.log | cut -c1-200
}
row vit_base_patch16_224 eager,inductor,wick new /tmp/wc-new
row resnet50 eager,wick new /tmp/wc-new
timeout ${TESTS_S:-110} python3 -m pytest tests/gpu tests/codegen/test_row_group_hoist.py tests/codegen/test_triton_interpret.py \
  tests/runtime/test_externs.py -p no:cacheprovider -p no:warnings -rfE -q --tb=short -n 16 2>&1 \
  | grep -v "DEBUG\|^$" > $OUT/tests.log
echo "tests rc ${PIPESTATUS[0]} at $(( $(date +%s) - S0 )) s"; grep -E "[0-9]+ (passed|failed)" $OUT/tests.log | tail -1
grep "^FAILED\|^ERROR" $OUT/tests.log | cut -c1-250 | head -20
patch -R -p1 -s < $D/call2-change.patch && python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build-old.log 2>&1
echo "old build $? at $(( $(date +%s) - S0 )) s"
row vit_base_patch16_224 eager,wick old /tmp/wc-old
row resnet50 eager,wick old /tmp/wc-old
patch -p1 -s < $D/call2-change.patch
echo "== done in $(( $(date +%s) - S0 )) s"
