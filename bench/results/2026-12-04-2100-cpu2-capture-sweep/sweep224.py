import sys, torch, timm, wick, traceback
names = sys.argv[1].split(',')
for name in names:
    try:
        torch.manual_seed(0)
        m = timm.create_model(name, num_classes=10).eval()
        cfg = m.pretrained_cfg.get("input_size", (3, 96, 96)); size = cfg[1]
        x = torch.randn(1, 3, cfg[1], cfg[2])
        wick.reset()
        f = wick.compile(m)
        with torch.no_grad():
            a = m(x); b = f(x); b2 = f(x)
        err = (a - b).abs().max().item() / max(1e-6, a.abs().max().item())
        st = wick.stats()
        print(f"{name}: rel err {err:.1e}, graphs {st['graphs']}, breaks {st['breaks']}, fallbacks {len(st['fallbacks'])}; {(st['break_reasons'] + st['fallbacks'])[:1]}", flush=True)
    except Exception as e:
        print(f"{name}: ERROR {type(e).__name__}: {str(e)[:150]}", flush=True)
