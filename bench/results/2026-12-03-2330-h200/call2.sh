#!/bin/bash
# Second H200 call: call 1's tree plus the attention rules' fix (the gradient laid out as the attention output is,
# which cuDNN's backward needs, and the input gradients promised in the layout the backward returns them in).
# Gradients of ViT-B (depth 12) and convnext_base against eager; ViT-B's cold compile with wick's autodiff (which
# failed in call 1) and its training row; convnext_base's cold compile and row with and without wick's autodiff.
# From the repository root on the device; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
timeout 120 python3 bench/autodiff_check.py --device cuda --autocast --batch 16 timm:vit_base_patch16_224 \
  timm:convnext_base timm:resnet50 2>&1 | grep -v "^\[wick\|[Ww]arning\|warn(" | tee $OUT/check.log | cut -c1-400
echo "== check at $(( $(date +%s) - S0 )) s"
for row in "vit_base_patch16_224 own" "convnext_base own" "convnext_base aot"; do
  set -- $row
  if [ $2 = aot ]; then export WICK_AUTODIFF=aot; else unset WICK_AUTODIFF; fi
  timeout 100 python3 bench/cold_compile.py --device cuda --suite timm --model $1 --mode training --compiler wick-own \
    --json $OUT/cold-$1-$2.json > $OUT/cold-$1-$2.out 2> $OUT/cold-$1-$2.err
  rc=$?
  echo "cold $1 $2 rc $rc: $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['first_call_s'], d['pass'], d['check'].get('autodiff'), d['check'].get('fallbacks'))" $OUT/cold-$1-$2.json 2>&1 | tail -1)"
  [ $rc != 0 ] && grep -v "^\[wick\|[Ww]arning\|warn(\|transformers" $OUT/cold-$1-$2.err | tail -12 | cut -c1-300
done
unset WICK_AUTODIFF
echo "== cold at $(( $(date +%s) - S0 )) s"
PROFILE_TOP=14 timeout 120 python3 bench/host_ab.py timm:vit_base_patch16_224 eager,inductor,wick,wick-aot training 2>&1 \
  | grep -v "^\[wick\|DEBUG\|[Ww]arning\|warn(" > $OUT/ab-vit.log
echo "== vit rc ${PIPESTATUS[0]} at $(( $(date +%s) - S0 )) s"; grep "^|\|host phases\|FAILED" $OUT/ab-vit.log | cut -c1-260
timeout $(( ${TOTAL_S:-590} - ($(date +%s) - S0) )) python3 bench/host_ab.py timm:convnext_base eager,wick,wick-aot training 2>&1 \
  | grep -v "^\[wick\|DEBUG\|[Ww]arning\|warn(" > $OUT/ab-convnext.log
echo "== convnext rc ${PIPESTATUS[0]} at $(( $(date +%s) - S0 )) s"; grep "^|\|host phases\|FAILED" $OUT/ab-convnext.log | cut -c1-260
