#!/bin/bash
# Cold training compiles (a fresh process per row, empty caches), three rounds; each round runs, per model,
# wick.compile at this branch, wick.compile at main (BEFORE, another checkout's built tree: COLD_REPO) and
# inductor, interleaved, as in ../2026-12-03-cpu2-final7/cold.sh. From the repository root.
D=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-/work/main/.venv/bin/python}
BEFORE=${BEFORE:-/work/main}
for r in 1 2 3; do
  for m in GPT2LMHeadModel LlamaForCausalLM; do
    echo "start $r $m wick-own $(uptime)" >> $D/cold_loads.txt
    $PY bench/cold_compile.py --model $m --mode training --compiler wick-own --json $D/cold.jsonl > /dev/null 2>> $D/cold_stderr.txt
    echo "start $r $m wick-own-main $(uptime)" >> $D/cold_loads.txt
    COLD_REPO=$BEFORE $PY bench/cold_compile.py --model $m --mode training --compiler wick-own --json $D/cold_main.jsonl > /dev/null 2>> $D/cold_stderr.txt
    echo "start $r $m inductor $(uptime)" >> $D/cold_loads.txt
    $PY bench/cold_compile.py --model $m --mode training --compiler inductor --json $D/cold.jsonl > /dev/null 2>> $D/cold_stderr.txt
  done
done
uptime >> $D/cold_loads.txt
$PY bench/cold_compile_table.py --ratio $D/cold.jsonl > $D/cold_ratio.md 2>&1
# main's wick rows against the same inductor rows
grep '"inductor"' $D/cold.jsonl | cat $D/cold_main.jsonl - > $D/cold_main_with_inductor.jsonl
$PY bench/cold_compile_table.py --ratio $D/cold_main_with_inductor.jsonl > $D/cold_main_ratio.md 2>&1
