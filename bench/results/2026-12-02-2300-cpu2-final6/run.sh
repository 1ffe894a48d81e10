#!/bin/bash
# Quiet-box runs at the sixth 2026-12-02 session's merged head (no helper running): kernels, then a training step and an
# inference call of the transformers models, eager / inductor / wick (torch.compile backend) / wick-own
# (wick.compile), compilers interleaved in one process, 1 thread, CPU time. From the repository root.
D=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-.venv/bin/python}
uptime > $D/load_kernels_before.txt
$PY bench/kernels.py --repeats 7 --threads 1 --clock thread --out $D/kernels > $D/kernels_stdout.txt 2>&1
uptime > $D/load_kernels_after.txt
$PY bench/train_step.py --models BertForMaskedLM,GPT2LMHeadModel,DistilBertForMaskedLM,LlamaForCausalLM,ViTForImageClassification --compilers eager,inductor,wick,wick-own --threads 1 --repeats 11 > $D/train_step.txt 2> $D/train_step.err
uptime > $D/load_train_after.txt
$PY bench/train_step.py --mode inference --models BertForMaskedLM,GPT2LMHeadModel,DistilBertForMaskedLM,LlamaForCausalLM,T5ForConditionalGeneration,ViTForImageClassification \
  --compilers eager,inductor,wick,wick-own --threads 1 --repeats 11 > $D/inference.txt 2> $D/inference.err
uptime > $D/load_inference_after.txt
uptime > $D/load_end.txt
