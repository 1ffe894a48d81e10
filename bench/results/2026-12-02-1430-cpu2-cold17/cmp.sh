#!/bin/bash
# usage: cmp.sh MODEL MODE N  -> alternating before(main)/after(worktree) rows
M=$1; MODE=${2:-training}; N=${3:-2}
cd /work/wt-cold17
for i in $(seq $N); do
  for side in before after; do
    if [ $side = before ]; then R=/work/main; else R=/work/wt-cold17; fi
    COLD_REPO=$R /work/main/.venv/bin/python bench/cold_compile.py --model $M --mode $MODE --compiler wick-own --json /tmp/cold17/rows.jsonl 2>/dev/null | python3 -c "
import json,sys,os; d=json.loads(sys.stdin.read()); print('$side', d['model'], d['mode'], 'cold', d['cold_s'], 'cpu', d['cpu_s'], 'child', d['children_cpu_s'], 'tot', round(d['cpu_s']+d['children_cpu_s'],2), 'steady', d['steady_s'], 'load', round(d['load'],2), 'pass', d['pass'])"
  done
done
