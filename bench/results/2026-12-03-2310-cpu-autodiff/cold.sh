#!/bin/bash
# Cold training compiles on the CPU (a fresh process per row, empty caches), two rounds, interleaved per model:
# wick.compile with wick's own autodiff (the default), wick.compile with WICK_AUTODIFF=aot (AOTAutograd, as
# before), and inductor. From the repository root.
D=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-.venv/bin/python}
for r in 1 2; do
  for m in GPT2LMHeadModel LlamaForCausalLM BertForMaskedLM T5ForConditionalGeneration; do
    echo "start $r $m own $(uptime)" >> $D/cold_loads.txt
    $PY bench/cold_compile.py --model $m --mode training --compiler wick-own --json $D/cold.jsonl > /dev/null 2>> $D/cold_stderr.txt
    echo "start $r $m aot $(uptime)" >> $D/cold_loads.txt
    WICK_AUTODIFF=aot $PY bench/cold_compile.py --model $m --mode training --compiler wick-own --json $D/cold_aot.jsonl > /dev/null 2>> $D/cold_stderr.txt
    echo "start $r $m inductor $(uptime)" >> $D/cold_loads.txt
    $PY bench/cold_compile.py --model $m --mode training --compiler inductor --json $D/cold.jsonl > /dev/null 2>> $D/cold_stderr.txt
  done
done
uptime >> $D/cold_loads.txt
$PY bench/cold_compile_table.py --ratio $D/cold.jsonl > $D/cold_ratio.md 2>&1
grep '"inductor"' $D/cold.jsonl | cat $D/cold_aot.jsonl - > $D/cold_aot_with_inductor.jsonl
$PY bench/cold_compile_table.py --ratio $D/cold_aot_with_inductor.jsonl > $D/cold_aot_ratio.md 2>&1
