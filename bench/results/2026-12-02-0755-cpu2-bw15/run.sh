#!/bin/sh
# Before (ad2aca4, the branch point, built in a copy at $BASE) and after (this branch), alternated,
# each a fresh process of the same bench/kernels.py; the load average is logged around each run.
BASE=${BASE:-/tmp/bw15/base}
D=${D:-bench/results/2026-12-02-0755-cpu2-bw15}
PY=${PY:-/work/main/.venv/bin/python}
for i in 1 2; do
  for which in before after; do
    root=$([ $which = before ] && echo $BASE || echo .)
    echo "$which-$i start $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $D/loads.txt
    (cd $root && $PY bench/kernels.py --repeats 7 --threads 1 --clock thread --out $OLDPWD/$D/$which-$i) > $D/$which-$i.stdout 2>&1
    echo "$which-$i end   $(date -u +%H:%M:%S) $(cat /proc/loadavg)" >> $D/loads.txt
  done
done
