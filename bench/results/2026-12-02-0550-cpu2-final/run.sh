#!/bin/bash
# Quiet-box runs at the session's merged head: kernels, then cold compiles (fresh process per row).
# From the repository root. train_step.txt came from:
#   python bench/train_step.py --compilers eager,inductor,wick,wick-own --threads 1 --repeats 11
D=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-.venv/bin/python}
uptime > $D/load_kernels_before.txt
$PY bench/kernels.py --repeats 7 --threads 1 --clock thread --out $D/kernels > $D/kernels_stdout.txt 2>&1
uptime > $D/load_kernels_after.txt
for m in BertForMaskedLM GPT2LMHeadModel DistilBertForMaskedLM LlamaForCausalLM; do
  for mode in inference training; do
    for c in wick-own wick inductor; do
      echo "start $m $mode $c $(uptime)" >> $D/cold_loads.txt
      $PY bench/cold_compile.py --model $m --mode $mode --compiler $c --json $D/cold.jsonl > /dev/null 2>> $D/cold_stderr.txt
    done
  done
done
uptime >> $D/cold_loads.txt
$PY bench/cold_compile_table.py --ratio $D/cold.jsonl > $D/cold_ratio.md 2>&1
