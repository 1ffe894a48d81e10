#!/bin/bash
# Fourth H200 call (the session's last device seconds): ViT-B's cold training compile after the layer norm
# statistics moved to the forward (call 3 found the first call waiting 5.6 s on Triton's compile of 458 kernels,
# one of them every norm's statistics in one kernel). From the repository root on the device; carry [".whl"].
set -u
S0=$(date +%s)
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
timeout 45 python3 bench/cold_compile.py --device cuda --suite timm --model vit_base_patch16_224 --mode training \
  --compiler wick-own --json $OUT/cold-vit.json > /dev/null 2> $OUT/cold-vit.err
echo "cold vit rc $?: $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['cold_s'], d['pass'], d['check'].get('autodiff'), {k: (v['n'], v['wall_s']) for k, v in d['phases'].items() if 'autodiff' in k or 'triton' in k})" $OUT/cold-vit.json 2>&1 | tail -1)"
