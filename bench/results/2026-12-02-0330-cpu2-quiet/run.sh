#!/bin/bash
# Quiet-box runs after the merge (no other worker): cold compile of wick and inductor, one fresh process per
# row, then one training step of each model, compilers interleaved. From the repository root.
D=$(dirname "$0")
uptime > $D/load_before.txt
for m in BertForMaskedLM GPT2LMHeadModel DistilBertForMaskedLM LlamaForCausalLM; do
  for mode in inference training; do
    for c in wick inductor; do
      .venv/bin/python bench/cold_compile.py --model $m --mode $mode --compiler $c --json $D/cold.jsonl > /dev/null 2>> $D/cold_stderr.txt
      echo "$m $mode $c $(uptime)" >> $D/cold_loads.txt
    done
  done
done
.venv/bin/python bench/cold_compile_table.py $D/cold.jsonl > $D/cold_table.md 2>&1
uptime > $D/load_mid.txt
.venv/bin/python bench/train_step.py --compilers eager,inductor,wick --threads 1 --repeats 9 > $D/train_step.txt 2>&1
uptime > $D/load_after.txt
