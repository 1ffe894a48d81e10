#!/bin/bash
# Second H200 call (2026-12-03 ~14:35 UTC): why the first calls of vit_base_patch16_224 and convnext_base training
# take 14-49 s (call 1), and where vit training's device time goes against inductor's.
# From the repository root on the device; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
for m in vit_base_patch16_224 convnext_base; do
  timeout 120 python3 bench/cold_compile.py --suite timm --model $m --mode training --compiler wick-own --device cuda \
    --profile $OUT/cold-$m.prof --json $OUT/cold-$m.json 2>&1 | grep -v "^\[wick\|DEBUG\|[Ww]arning\|warn(" | tail -40
  echo "== cold $m at $(( $(date +%s) - S0 )) s"
done
PROFILE_TOP=45 timeout 150 python3 bench/host_ab.py timm:vit_base_patch16_224 inductor,wick training 2>&1 \
  | grep -v "^\[wick\|DEBUG\|[Ww]arning\|warn(" > $OUT/ab-vit.log
grep "^|" $OUT/ab-vit.log
echo "== done in $(( $(date +%s) - S0 )) s"
