"""The steps of decode.py, 220 of them, and the median time of steps 20 onwards.

    PYTHONPATH=. .venv/bin/python bench/results/2026-12-05-1700-cpu2-symbolic-decode/decode_median.py {eager|aot_eager|wick|own|ind} 220
"""
import time, sys, statistics, torch, wick
from transformers import LlamaConfig, LlamaForCausalLM, DynamicCache
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
m = LlamaForCausalLM(cfg).eval()
mode = sys.argv[1]
f = {"eager": lambda: m, "wick": lambda: torch.compile(m, backend="wick"), "aot_eager": lambda: torch.compile(m, backend="aot_eager"),
     "own": lambda: wick.compile(m), "ind": lambda: torch.compile(m)}[mode]()
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
print(mode, "median ms of steps 20..: %.3f" % (statistics.median(ts[20:]) * 1e3), "first 3", [round(x*1e3) for x in ts[:3]])
