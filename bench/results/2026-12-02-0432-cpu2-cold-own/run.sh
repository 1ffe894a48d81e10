#!/bin/bash
# Cold compile, wick's own front end (wick.compile) against dynamo+wick (torch.compile(backend="wick")) and
# inductor: one fresh process per row, compilers interleaved per (model, mode). From the repository root;
# SNAP: a copy of the checkout's bench/ and wick/ (built) the rows run from (default: this checkout).
D=$(cd "$(dirname "$0")" && pwd)
SNAP=${SNAP:-.}
PY=${PY:-/work/main/.venv/bin/python}
uptime > $D/load_before.txt
for m in BertForMaskedLM GPT2LMHeadModel DistilBertForMaskedLM LlamaForCausalLM; do
  for mode in inference training; do
    for c in wick-own wick inductor; do
      echo "start $m $mode $c $(uptime)" >> $D/cold_loads.txt
      nice $PY $SNAP/bench/cold_compile.py --model $m --mode $mode --compiler $c --json $D/cold.jsonl > /dev/null 2>> $D/cold_stderr.txt
      echo "end   $m $mode $c $(uptime)" >> $D/cold_loads.txt
    done
  done
done
uptime > $D/load_after.txt
$PY bench/cold_compile_table.py --ratio $D/cold.jsonl > $D/cold_ratio.md 2>&1
