import sys, torch, transformers as T, wick
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from hfsweep_config import small_config  # noqa: E402
names = sys.argv[1].split(",")
for name in names:
    try:
        torch.manual_seed(0)
        cfg = small_config(name)
        m = getattr(T, name)(cfg).eval()
        ids = torch.randint(0, 1000, (2, 16))
        kw = {"input_ids": ids}
        if getattr(cfg, "is_encoder_decoder", False): kw["decoder_input_ids"] = ids[:, :8]
        wick.reset()
        f = wick.compile(m)
        with torch.no_grad():
            a = m(**kw); b = f(**kw); b2 = f(**kw)
        la = a.logits if hasattr(a, "logits") else a[0]; lb = b2.logits if hasattr(b2, "logits") else b2[0]
        err = (la - lb).abs().max().item() / max(1e-6, la.abs().max().item())
        st = wick.stats()
        print(f"{name}: rel err {err:.1e}, graphs {st['graphs']}, breaks {st['breaks']}, fallbacks {len(st['fallbacks'])}; {(st['break_reasons'] + st['fallbacks'])[:1]}", flush=True)
    except Exception as e:
        print(f"{name}: ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
