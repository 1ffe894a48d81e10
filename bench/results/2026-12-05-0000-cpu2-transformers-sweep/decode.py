import sys, torch, transformers as T, wick
name = sys.argv[1] if len(sys.argv) > 1 else "LlamaForCausalLM"
torch.manual_seed(0)
cfg = getattr(T, name.replace("ForCausalLM","Config"))()
for k, v in dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=1000,
                 num_key_value_heads=2, head_dim=16, max_position_embeddings=128, n_embd=64, n_layer=2, n_head=4).items():
    if hasattr(cfg, k): setattr(cfg, k, v)
m = getattr(T, name)(cfg).eval()
ids = torch.randint(0, 1000, (2, 16))
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 4


def loop(fn, steps=STEPS):
    out = fn(input_ids=ids)
    cache = out.past_key_values
    toks = [out.logits[:, -1].argmax(-1)]
    logits = [out.logits]
    for i in range(steps):
        out = fn(input_ids=toks[-1][:, None], past_key_values=cache)
        cache = out.past_key_values
        toks.append(out.logits[:, -1].argmax(-1)); logits.append(out.logits)
    return logits, cache
wick.reset(); f = wick.compile(m)
with torch.no_grad():
    la, ca = loop(m); lb, cb = loop(f)
print("max logit diff", max((a-b).abs().max().item() for a, b in zip(la, lb)))
print(type(cb).__name__, [l.keys.shape for l in cb.layers], max((x.keys-y.keys).abs().max().item() for x, y in zip(ca.layers, cb.layers)))
st = wick.stats()
print("calls", STEPS + 1, "graphs", st["graphs"], "entries", st.get("entries"), "breaks", st["breaks"], "fallbacks", len(st["fallbacks"]))
from collections import Counter
for r, c in Counter(st["break_reasons"]).most_common(12): print(c, r[:300])
for r in st["fallbacks"][:5]: print("FB", str(r)[:300])
