#!/bin/bash
# before: the branch point 707376d (git archive into /tmp/t12/base, built there), after: the
# train12 worktree; same venv, 1 thread, CPU time; rounds alternate before/after
set -u
OUT=${OUT:-.}
ARGS="--models BertForMaskedLM,GPT2LMHeadModel,DistilBertForMaskedLM,LlamaForCausalLM --compilers eager,inductor,wick --threads 1 --repeats ${REPEATS:-9}"
for run in "$@"; do
  which=${run%%_*}
  repo=/work/wt-train12; [ "$which" = before ] && repo=/tmp/t12/base
  if [ "$which" = before ]; then echo "707376d (git archive)" > $OUT/${run}_commit.txt; else (cd $repo && git log --oneline -1) > $OUT/${run}_commit.txt; fi
  uptime > $OUT/load_${run}_start.txt
  /work/main/.venv/bin/python $repo/bench/train_step.py $ARGS > $OUT/$run.txt 2>&1
  uptime > $OUT/load_${run}_end.txt
done
