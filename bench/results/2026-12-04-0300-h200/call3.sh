#!/bin/bash
# Third H200 call: the whole test suite at this tree (bench/results/2026-12-02-1000-h200/suite.sh: build, pytest -n 16,
# every result named in tests.log.gz), then, in the time left, cold training compiles of ViT-B and GPT-2 with the
# warm-up no longer waiting for Triton's installation hash, GPT-2's with a profile of the first call.
# From the repository root; carry [".whl"].
S0=$(date +%s)
SUITE_S=${SUITE_S:-470} bash bench/results/2026-12-02-1000-h200/suite.sh
export PYTHONPATH=/tmp/site
for row in "timm vit_base_patch16_224" "huggingface GPT2LMHeadModel"; do
  set -- $row
  [ $(( $(date +%s) - S0 )) -gt 545 ] && break
  prof=""; [ $2 = GPT2LMHeadModel ] && prof="--profile $OUT/gpt2.prof"
  COLD_DIR=/tmp/cold3-$2 timeout 40 python3 bench/cold_compile.py --device cuda --suite $1 --model $2 --mode training \
    --compiler wick-own $prof --json $OUT/cold.jsonl > /dev/null 2>> $OUT/cold.err
  echo "cold $2 rc $?: $(python3 -c "
import json,sys; d=[json.loads(l) for l in open(sys.argv[1])][-1]; t=d.get('triton_timeline') or {}
print(d['model'], d['cold_s'], d['first_call_s'], d['pass'], d['check'].get('autodiff'))
print({k: v for k, v in t.items() if k != 'slowest'})" $OUT/cold.jsonl 2>&1 | tail -3)"
done
[ -f $OUT/gpt2.prof ] && python3 -c "
import pstats,sys; pstats.Stats(sys.argv[1]).sort_stats('cumulative').print_stats(40)" $OUT/gpt2.prof 2>&1 | grep -v "^$" | cut -c1-200 | tail -45
echo "== call done at $(( $(date +%s) - S0 )) s"
