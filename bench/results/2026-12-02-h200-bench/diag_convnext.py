"""Why convnext falls back on CUDA under bf16 autocast: wick's recorded reasons, both front ends."""
import os, sys, traceback
os.environ.setdefault("WICK_VERBOSE", "1")
sys.path.insert(0, os.getcwd())
import torch, timm, wick, wick.backends as wb
torch.manual_seed(0)
for arg in sys.argv[1:] or ["convnext_tiny:8"]:
    name, batch = arg.split(":")
    m = timm.create_model(name).cuda().eval()
    x = torch.randn(int(batch), 3, 224, 224, device="cuda")
    for front in ("own", "dyn"):
        wick.reset(); torch._dynamo.reset(); wb.fallback_reasons.clear()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            ref = m(x)
            try:
                f = wick.compile(m) if front == "own" else torch.compile(m, backend="wick")
                y = f(x); y = f(x)
                print(name, front, "max err", (y.float() - ref.float()).abs().max().item())
            except Exception:
                traceback.print_exc()
        s = wick.stats()
        print(name, front, {k: (str(v)[:3000]) for k, v in s.items() if any(t in k for t in ("reason", "fallback", "break", "graph"))})
        print(name, front, "backend fallbacks:", [r[:3000] for r in wb.fallback_reasons])
