"""Greedy decode steps of a small LLaMA (2 layers, width 64, random weights) with transformers' DynamicCache: a
prefill of 8 tokens, then N steps of one token each (the cache one longer every step), timed per step.

    PYTHONPATH=. .venv/bin/python bench/results/2026-12-05-1700-cpu2-symbolic-decode/decode.py {eager|ind|wick} 40

ind: torch.compile(model) (inductor); wick: torch.compile(model, backend="wick"). dynamo makes the sizes symbolic
at the second decode step (automatic dynamic shapes); inductor's kernels take them as arguments, wick's are
compiled per size.
"""
import time, sys, torch, wick, transformers
from transformers import LlamaConfig, LlamaForCausalLM, DynamicCache
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
m = LlamaForCausalLM(cfg).eval()
mode = sys.argv[1]
f = {"eager": m, "wick": torch.compile(m, backend="wick"), "ind": torch.compile(m)}[mode]
ids = torch.randint(0, 256, (1, 8))
with torch.no_grad():
    cache = DynamicCache(config=cfg)
    out = f(input_ids=ids, past_key_values=cache, use_cache=True)
    ts = []
    for step in range(int(sys.argv[2])):
        nxt = out.logits[:, -1:].argmax(-1)
        t = time.perf_counter()
        out = f(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
        ts.append(time.perf_counter() - t)
print(mode, "steps", len(ts), "first 5 ms", [round(x*1e3,1) for x in ts[:5]], "last 5 ms", [round(x*1e3,1) for x in ts[-5:]], "total s", round(sum(ts),2))
if mode == "wick":
    print(wick.stats()["symbolic_calls"])
    from wick import backends
    print("compiled graphs", len(backends.compiled_graphs), "fallbacks", len(backends.fallback_reasons), backends.fallback_reasons[:3])
