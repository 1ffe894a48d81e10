#!/bin/bash
# Second pass, after the view export change (wick/backends.py _view_plan): all three compilers again with the
# new code (SNAP), and for training wick-own with the code of the first pass too (SNAP_BEFORE, rows in
# cold2_own_before.jsonl), interleaved. From the repository root.
D=$(cd "$(dirname "$0")" && pwd)
SNAP=${SNAP:-.}
PY=${PY:-/work/main/.venv/bin/python}
uptime > $D/load2_before.txt
for m in BertForMaskedLM GPT2LMHeadModel DistilBertForMaskedLM LlamaForCausalLM; do
  for mode in inference training; do
    if [ "$mode" = training ] && [ -n "$SNAP_BEFORE" ]; then
      echo "start $m $mode wick-own(before) $(uptime)" >> $D/cold2_loads.txt
      nice $PY $SNAP_BEFORE/bench/cold_compile.py --model $m --mode $mode --compiler wick-own --json $D/cold2_own_before.jsonl > /dev/null 2>> $D/cold2_stderr.txt
    fi
    for c in wick-own wick inductor; do
      echo "start $m $mode $c $(uptime)" >> $D/cold2_loads.txt
      nice $PY $SNAP/bench/cold_compile.py --model $m --mode $mode --compiler $c --json $D/cold2.jsonl > /dev/null 2>> $D/cold2_stderr.txt
      echo "end   $m $mode $c $(uptime)" >> $D/cold2_loads.txt
    done
  done
done
uptime > $D/load2_after.txt
$PY bench/cold_compile_table.py --ratio $D/cold2.jsonl > $D/cold2_ratio.md 2>&1
