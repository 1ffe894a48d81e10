import time, torch, transformers
from wick import backends as B
torch.manual_seed(0)
cfg = transformers.GPT2Config(n_embd=128, n_layer=2, n_head=2, vocab_size=1000, n_positions=128)
m = transformers.GPT2LMHeadModel(cfg).cuda().eval()
ids = torch.randint(0, 1000, (16, 64), device="cuda")
def bench(f):
    with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
        for _ in range(5): out = f(input_ids=ids).logits
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(50): out = f(input_ids=ids).logits
        torch.cuda.synchronize(); return out, (time.perf_counter() - t) / 50 * 1e3
want, te = bench(m)
torch._dynamo.reset(); B.fallback_reasons.clear(); B.compiled_graphs.clear()
got, tw = bench(torch.compile(m, backend="wick"))
print(f"eager {te:.3f} ms, dynamo+wick {tw:.3f} ms, speedup {te/tw:.2f}x, max err {(got.float()-want.float()).abs().max().item():.2e}")
print("fallbacks", [str(r)[:400] for r in B.fallback_reasons])
print("graphs", [(g.get("kernels"), g.get("extern"), g.get("externs")) for g in B.compiled_graphs])
