#!/bin/bash
# Quiet-box cold compiles at the merged head of the fourth 2026-12-02 session (after .ci/run, no helper running):
# a fresh process per row, empty caches (bench/cold_compile.py), wick.compile ("wick-own") and inductor, training
# and inference, the five transformers models; then the ratio table. From the repository root.
D=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-.venv/bin/python}
for m in GPT2LMHeadModel LlamaForCausalLM ViTForImageClassification BertForMaskedLM DistilBertForMaskedLM; do
  for mode in training inference; do
    for c in wick-own inductor; do
      echo "start $m $mode $c $(uptime)" >> $D/cold_loads.txt
      $PY bench/cold_compile.py --model $m --mode $mode --compiler $c --json $D/cold.jsonl > /dev/null 2>> $D/cold_stderr.txt
    done
  done
done
uptime >> $D/cold_loads.txt
$PY bench/cold_compile_table.py --ratio $D/cold.jsonl > $D/cold_ratio.md 2>&1
