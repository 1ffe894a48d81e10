#!/bin/bash
# Rows after the math-path attention and lay21's layouts (70606ec): T5 inference and training (its float32 position
# bias masks take eager's math kernel), LLaMA, GPT-2 and resnet50 inference; eager / inductor / wick.compile,
# bf16 autocast. From the repository root; carry [".whl"].
export PYTHONUNBUFFERED=1
TOTAL_S=${TOTAL_S:-340} TESTS= \
  AB="huggingface:T5ForConditionalGeneration|eager,inductor,wick|inference;huggingface:T5ForConditionalGeneration|eager,inductor,wick|training;huggingface:LlamaForCausalLM|eager,inductor,wick|inference;huggingface:GPT2LMHeadModel|eager,inductor,wick|inference;timm:resnet50|eager,inductor,wick|inference" \
  bash bench/results/2026-12-02-1000-h200/run.sh
