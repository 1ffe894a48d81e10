#!/bin/bash
# Quiet-box cold compiles at the fifth 2026-12-02 session's final head (after .ci/run, no helper running): a fresh
# process per row, empty caches (bench/cold_compile.py), training steps of the five transformers models through
# wick.compile ("wick-own") and inductor, wick-own's rows three times (the box's run-to-run noise is about 0.3 s);
# then the ratio table. From the repository root.
D=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-.venv/bin/python}
for m in GPT2LMHeadModel LlamaForCausalLM ViTForImageClassification BertForMaskedLM DistilBertForMaskedLM; do
  for c in wick-own inductor wick-own wick-own; do
    echo "start $m training $c $(uptime)" >> $D/cold_loads.txt
    $PY bench/cold_compile.py --model $m --mode training --compiler $c --json $D/cold.jsonl > /dev/null 2>> $D/cold_stderr.txt
  done
done
uptime >> $D/cold_loads.txt
$PY bench/cold_compile_table.py --ratio $D/cold.jsonl > $D/cold_ratio.md 2>&1
