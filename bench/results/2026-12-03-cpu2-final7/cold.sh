#!/bin/bash
# Cold training compiles (a fresh process per row, empty caches), three rows per model, wick.compile and inductor
# interleaved, as in ../2026-12-02-2300-cpu2-final6/cold.sh. From the repository root.
D=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-.venv/bin/python}
for r in 1 2 3; do
  for m in GPT2LMHeadModel LlamaForCausalLM; do
    for c in wick-own inductor; do
      echo "start $r $m $c $(uptime)" >> $D/cold_loads.txt
      $PY bench/cold_compile.py --model $m --mode training --compiler $c --json $D/cold.jsonl > /dev/null 2>> $D/cold_stderr.txt
    done
  done
done
uptime >> $D/cold_loads.txt
$PY bench/cold_compile_table.py --ratio $D/cold.jsonl > $D/cold_ratio.md 2>&1
