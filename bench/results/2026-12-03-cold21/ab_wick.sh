#!/bin/bash
# wick.compile only, this branch against main (BEFORE), interleaved, 4 rounds per model; CPU time is the figure to
# read on a loaded box. From the repository root.
D=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-/work/main/.venv/bin/python}
BEFORE=${BEFORE:-/work/main}
for r in 1 2 3 4; do
  for m in LlamaForCausalLM GPT2LMHeadModel; do
    echo "start $r $m $(uptime)" >> $D/ab_loads.txt
    $PY bench/cold_compile.py --model $m --mode training --compiler wick-own --json $D/ab_branch.jsonl > /dev/null 2>> $D/ab_stderr.txt
    COLD_REPO=$BEFORE $PY bench/cold_compile.py --model $m --mode training --compiler wick-own --json $D/ab_main.jsonl > /dev/null 2>> $D/ab_stderr.txt
  done
done
uptime >> $D/ab_loads.txt
