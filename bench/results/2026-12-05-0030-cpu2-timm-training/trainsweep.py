"""A training step's forward and backward through wick.compile on the CPU for timm models: train mode (batch
norms update their statistics; dropout and drop-path off, so eager and wick draw nothing random), batch 2 at
the model's input size, a cross-entropy loss on random labels; the loss, every parameter's gradient (relative
to the largest) and the running statistics compared with eager's after two steps on two copies of the model;
graphs, breaks and fallbacks from wick.stats()."""
import sys

import timm
import torch

import wick

for name in sys.argv[1].split(","):
    try:
        kw = dict(num_classes=10, drop_rate=0.0, drop_path_rate=0.0)
        try:
            timm.create_model(name, pretrained=False, **kw)
        except TypeError:  # a model without stochastic depth
            kw.pop("drop_path_rate")
        torch.manual_seed(0)
        me = timm.create_model(name, **kw).train()
        torch.manual_seed(0)
        mc = timm.create_model(name, **kw).train()
        size = me.pretrained_cfg.get("input_size", (3, 224, 224))
        wick.reset()
        f = wick.compile(mc)
        lerr = 0.0
        for step in range(2):
            g = torch.Generator().manual_seed(step)
            x = torch.randn(2, *size, generator=g)
            y = torch.randint(0, 10, (2,), generator=g)
            me.zero_grad()
            mc.zero_grad()
            le = torch.nn.functional.cross_entropy(me(x), y)
            lc = torch.nn.functional.cross_entropy(f(x), y)
            le.backward()
            lc.backward()
            lerr = max(lerr, abs(le.item() - lc.item()))
        pe, pc = list(me.parameters()), list(mc.parameters())
        gmax = max(p.grad.abs().max().item() for p in pe if p.grad is not None and p.numel())
        gerr = max(((p.grad if p.grad is not None else torch.zeros_like(q)) -
                    (q.grad if q.grad is not None else torch.zeros_like(p))).abs().max().item()
                   for p, q in zip(pe, pc) if p.numel())
        berr = max([(a.float() - b.float()).abs().max().item() for a, b in zip(me.buffers(), mc.buffers()) if a.numel()]
                   or [0.0])
        st = wick.stats()
        reasons = st["break_reasons"] + [str(r) for r in st["fallbacks"]]
        print(f"{name}: loss err {lerr:.1e}, grad rel err {gerr / gmax:.1e}, buffers err {berr:.1e}, "
              f"graphs {st['graphs']}, breaks {st['breaks']}, fallbacks {len(st['fallbacks'])}; {reasons[:1]}",
              flush=True)
    except Exception as e:
        print(f"{name}: ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
