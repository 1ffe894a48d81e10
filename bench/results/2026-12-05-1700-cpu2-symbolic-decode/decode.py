"""Greedy decode steps of a small LLaMA (2 layers, width 64, random weights) with transformers' DynamicCache: a
prefill of 8 tokens, then N steps of one token each (the cache one longer every step), timed per step.

    PYTHONPATH=. .venv/bin/python bench/results/2026-12-05-1700-cpu2-symbolic-decode/decode.py {eager|ind|wick} 40
    PYTHONPATH=. .venv/bin/python bench/results/2026-12-05-1700-cpu2-symbolic-decode/decode.py MODE 220 median

ind: torch.compile(model) (inductor); wick: torch.compile(model, backend="wick"); aot_eager:
torch.compile(model, backend="aot_eager"); own: wick.compile(model). `median`: one line, the median time of
steps 20 onwards and the first three steps. dynamo makes the sizes symbolic
at the second decode step (automatic dynamic shapes); inductor's kernels take them as arguments, wick's are
compiled per size.
"""
import statistics, sys, time

import torch
import wick
from transformers import LlamaConfig, LlamaForCausalLM, DynamicCache
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
m = LlamaForCausalLM(cfg).eval()
mode = sys.argv[1]
f = {"eager": lambda: m, "wick": lambda: torch.compile(m, backend="wick"), "ind": lambda: torch.compile(m),
     "aot_eager": lambda: torch.compile(m, backend="aot_eager"), "own": lambda: wick.compile(m)}[mode]()
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
if sys.argv[3:] == ["median"]:
    print(mode, "median ms of steps 20..: %.3f" % (statistics.median(ts[20:]) * 1e3), "first 3",
          [round(x * 1e3) for x in ts[:3]])
    sys.exit(0)
print(mode, "steps", len(ts), "first 5 ms", [round(x*1e3,1) for x in ts[:5]], "last 5 ms", [round(x*1e3,1) for x in ts[-5:]], "total s", round(sum(ts),2))
if mode == "wick":
    print(wick.stats()["symbolic_calls"])
    from wick import backends
    print("compiled graphs", len(backends.compiled_graphs), "fallbacks", len(backends.fallback_reasons), backends.fallback_reasons[:3])
