#!/bin/bash
# Third H200 call (the final tree): cold training compiles of T5 and ViT-B/16 after the kernel-identity fixes
# (split reductions' final kernels deduplicated, tuning shared by kernels of one identity), then the whole suite in
# the time left (-vv, --dist worksteal, failures streamed to $OUT/failures.txt).
# From the repository root; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
export PYTHONPATH=/tmp/site
for row in "huggingface T5ForConditionalGeneration" "timm vit_base_patch16_224"; do
  set -- $row
  COLD_DIR=/tmp/cold3-$2 timeout 60 python3 bench/cold_compile.py --device cuda --suite $1 --model $2 --mode training \
    --compiler wick-own --json $OUT/cold.jsonl > /dev/null 2>> $OUT/cold.err
  echo "cold $2 rc $?: $(python3 -c "
import json,sys; d=[json.loads(l) for l in open(sys.argv[1])][-1]; t=d.get('triton_timeline') or {}
print(d['model'], 'cold', d['cold_s'], 'first', d['first_call_s'], 'tuned', d['tuned_s'], 'steady', d['steady_s'], d['pass'], d['check'].get('autodiff'))
print({k: v for k, v in t.items() if k not in ('slowest', 'repeated_examples')})" $OUT/cold.jsonl 2>&1 | tail -2)"
  ls /tmp/cold3-$2/wick_cache_dir/triton | sed 's/.*\.//; s/^tune-.*/tune/' | sort | uniq -c | tr '\n' ' '; echo
done
S1=$(( 590 - ($(date +%s) - S0) ))
echo "suite limit $S1 s"
timeout $S1 env PYTHONPATH=/tmp/site:bench/results/2026-12-04-1215-h200 python3 -m pytest tests -p stream_failures \
  -p no:cacheprovider -p no:warnings -rfE -vv --tb=short --durations=20 -n 16 --dist worksteal 2>&1 \
  | grep -v "DEBUG\|^$" > $OUT/tests.log
echo "pytest done at $(( $(date +%s) - S0 )) s"
echo "results: $(grep -c ' PASSED ' $OUT/tests.log) passed, $(grep -c ' SKIPPED ' $OUT/tests.log) skipped, $(grep -c ' FAILED ' $OUT/tests.log) failed, $(grep -c ' ERROR ' $OUT/tests.log) errors"
grep -E "[0-9]+ passed" $OUT/tests.log | tail -1
grep " FAILED \| ERROR " $OUT/tests.log | cut -c1-250 | head -20
grep "cudnn_attention_plans\|identity_tune_once" $OUT/tests.log | cut -c1-200
[ -f $OUT/failures.txt ] && grep "^== " $OUT/failures.txt
gzip -f $OUT/tests.log
echo "== done in $(( $(date +%s) - S0 )) s"
