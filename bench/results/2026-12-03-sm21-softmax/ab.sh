#!/bin/sh
# ab.sh ROUNDS [FIRST]: main (a clone at f094aad, built, in $BASE) and this branch take turns
# running bench/kernels.py, at 1 thread (thread clock) and at 2 threads (wall clock);
# each run's results.json/report.md go under raw/<tree>-t<threads>-r<round>/, and the
# load (uptime) before each run into load.txt.
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
NEW=$(cd "$HERE/../../.." && pwd)
BASE=${BASE:-/tmp/sm21/base}
PY=/work/main/.venv/bin/python
for r in $(seq "${2:-1}" "$(( ${2:-1} + ${1:-5} - 1 ))"); do
  for t in 1 2; do
    clock=wall; [ "$t" = 1 ] && clock=thread
    for tree in main sm21; do
      dir=$NEW; [ "$tree" = main ] && dir=$BASE
      echo "$tree t$t r$r $(date -u +%H:%M:%S) $(uptime)" >> "$HERE/load.txt"
      (cd "$dir" && WICK_CACHE_DIR=/tmp/sm21/cache-ab-$tree PYTHONPATH=. $PY bench/kernels.py --repeats 7 \
        --threads $t --clock $clock --out "$HERE/raw/$tree-t$t-r$r" > /dev/null)
    done
  done
done
