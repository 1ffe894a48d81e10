#!/bin/bash
# First H200 call of the autodiff session: wick's own autodiff (wick/_autodiff.py) on CUDA. Gradients against
# eager for ViT-B (depth 2) and the transformers models (bf16 autocast); cold training compiles of ViT-B and BERT
# with it, with AOTAutograd (WICK_AUTODIFF=aot) and inductor; ViT-B's training row, wick.compile with and without
# it. From the repository root on the device; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
timeout 150 python3 bench/autodiff_check.py --device cuda --autocast --batch 8 --depth 2 timm:vit_base_patch16_224 \
  GPT2LMHeadModel BertForMaskedLM LlamaForCausalLM T5ForConditionalGeneration 2>&1 | grep -v "^\[wick\|[Ww]arning\|warn(" \
  | tee $OUT/check.log | cut -c1-400
echo "== check at $(( $(date +%s) - S0 )) s"
for row in "vit_base_patch16_224 timm wick-own" "vit_base_patch16_224 timm wick-own aot" "BertForMaskedLM huggingface wick-own" \
           "BertForMaskedLM huggingface wick-own aot" "vit_base_patch16_224 timm inductor" "BertForMaskedLM huggingface inductor"; do
  set -- $row
  if [ "${4:-}" = aot ]; then export WICK_AUTODIFF=aot; tag=$3-aot; else unset WICK_AUTODIFF; tag=$3; fi
  timeout 100 python3 bench/cold_compile.py --device cuda --suite $2 --model $1 --mode training --compiler $3 \
    --json $OUT/cold-$1-$tag.json > /dev/null 2> $OUT/cold-$1-$tag.err
  echo "cold $1 $tag rc $?: $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['first_call_s'], d['pass'], d['check'].get('autodiff'), d['check'].get('fallbacks'))" $OUT/cold-$1-$tag.json 2>&1 | tail -1)"
done
unset WICK_AUTODIFF
echo "== cold at $(( $(date +%s) - S0 )) s"
PROFILE_TOP=12 timeout $(( ${TOTAL_S:-590} - ($(date +%s) - S0) )) python3 bench/host_ab.py timm:vit_base_patch16_224 \
  eager,inductor,wick,wick-aot training 2>&1 | grep -v "^\[wick\|DEBUG\|[Ww]arning\|warn(" > $OUT/ab-vit.log
echo "== vit rc ${PIPESTATUS[0]} at $(( $(date +%s) - S0 )) s"; grep "^|\|host phases\|FAILED" $OUT/ab-vit.log | cut -c1-260
