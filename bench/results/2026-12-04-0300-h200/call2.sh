#!/bin/bash
# Second H200 call: cold training compiles after the compile processes' changes (Triton's installation hash sent by
# the parent; the backward's kernels compiled early, at SOON priority), wick's own autodiff against inductor in the
# same call (ViT-B, BERT, GPT-2), with each row's Triton timeline; and the kernels of ViT-B's two graphs grouped by
# identity (kernel_groups.py), to see which fail to dedupe across layers. From the repository root; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
for row in "timm vit_base_patch16_224 wick-own" "huggingface BertForMaskedLM wick-own" "huggingface GPT2LMHeadModel wick-own" \
           "timm vit_base_patch16_224 inductor" "huggingface BertForMaskedLM inductor" "huggingface GPT2LMHeadModel inductor"; do
  set -- $row
  rm -rf /tmp/cold-$2-$3
  COLD_DIR=/tmp/cold-$2-$3 timeout 100 python3 bench/cold_compile.py --device cuda --suite $1 --model $2 --mode training \
    --compiler $3 --json $OUT/cold.jsonl > /dev/null 2>> $OUT/cold.err
  echo "cold $2 $3 rc $?: $(python3 -c "
import json,sys; d=[json.loads(l) for l in open(sys.argv[1])][-1]; t=d.get('triton_timeline') or {}
print(d['model'], d['compiler'], d['cold_s'], d['pass'], d['check'].get('autodiff'))
print({k: v for k, v in t.items() if k != 'slowest'})
for s in t.get('slowest', [])[:6]: print('   ', s)" $OUT/cold.jsonl 2>&1 | tail -9)"
done
python3 bench/results/2026-12-04-0300-h200/kernel_groups.py /tmp/cold-vit_base_patch16_224-wick-own /tmp/cold-BertForMaskedLM-wick-own \
  2>&1 | tee $OUT/groups.txt | cut -c1-700
(cd /tmp/cold-vit_base_patch16_224-wick-own && find . -name "wick_*.py" | tar czf $OUT/kernels-vit.tgz -T -)
echo "== done at $(( $(date +%s) - S0 )) s"
