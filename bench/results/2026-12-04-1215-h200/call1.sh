#!/bin/bash
# First H200 call of the 2026-12-04 12:10 session: two diagnostics, then the whole suite in the time left.
#  1. ViT-B/16's cold training compile with wick-own, its first-call jobs grouped by kernel (cold_compile's
#     jobs_per_kernel: what differs between two jobs of one kernel);
#  2. GPT-2's cold training compile with torch.profiler's operator table of the first call (where the 1.3 s after
#     its last kernel compiled goes);
#  3. the whole suite (-vv, --dist worksteal), failures streamed to $OUT/failures.txt (stream_failures.py).
# From the repository root; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
D=bench/results/2026-12-04-1215-h200
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
python3 -c "import sys, torch, triton, transformers; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
export PYTHONPATH=/tmp/site
for row in "timm vit_base_patch16_224" "huggingface GPT2LMHeadModel"; do
  set -- $row
  tp=""; [ $2 = GPT2LMHeadModel ] && tp="--torch-profile $OUT/gpt2_ops.txt"
  COLD_DIR=/tmp/cold1-$2 timeout 60 python3 bench/cold_compile.py --device cuda --suite $1 --model $2 --mode training \
    --compiler wick-own $tp --json $OUT/cold.jsonl > /dev/null 2>> $OUT/cold.err
  echo "cold $2 rc $?: $(python3 -c "
import json,sys; d=[json.loads(l) for l in open(sys.argv[1])][-1]; t=d.get('triton_timeline') or {}
print(d['model'], d['cold_s'], d['first_call_s'], d['pass'], d['check'].get('autodiff'))
print({k: v for k, v in t.items() if k not in ('slowest', 'repeated_examples')})
for e in t.get('repeated_examples', []): print(e)" $OUT/cold.jsonl 2>&1 | tail -12)"
done
[ -f $OUT/gpt2_ops.txt ] && head -30 $OUT/gpt2_ops.txt | cut -c1-170
S1=$(( 585 - ($(date +%s) - S0) ))
echo "suite limit $S1 s"
timeout $S1 env PYTHONPATH=/tmp/site:$D python3 -m pytest tests -p stream_failures -p no:cacheprovider -p no:warnings \
  -rfE -vv --tb=short --durations=20 -n 16 --dist worksteal 2>&1 | grep -v "DEBUG\|^$" > $OUT/tests.log
echo "pytest done at $(( $(date +%s) - S0 )) s"
echo "results: $(grep -c ' PASSED ' $OUT/tests.log) passed, $(grep -c ' SKIPPED ' $OUT/tests.log) skipped, $(grep -c ' FAILED ' $OUT/tests.log) failed, $(grep -c ' ERROR ' $OUT/tests.log) errors"
grep -E "[0-9]+ passed" $OUT/tests.log | tail -1
grep " FAILED \| ERROR " $OUT/tests.log | cut -c1-250 | head -20
[ -f $OUT/failures.txt ] && grep "^== " $OUT/failures.txt
gzip -f $OUT/tests.log
echo "== done in $(( $(date +%s) - S0 )) s"
