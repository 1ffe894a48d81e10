"""For models whose wick gradients differ from eager's by more than 1e-4: the same step in float64 eager as the
reference, so eager's own float32 error is the measure of what rounding alone does (train mode, batch 2)."""
import sys

import timm
import torch

import wick


SEED = int(sys.argv[2]) if len(sys.argv) > 2 else 0  # the input of trainsweep.py's step SEED + 1


def step(m, fn, dtype):
    size = m.pretrained_cfg.get("input_size", (3, 224, 224))
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(2, *size, generator=g).to(dtype)
    y = torch.randint(0, 10, (2,), generator=g)
    loss = torch.nn.functional.cross_entropy(fn(x), y)
    loss.backward()
    return loss.item(), torch.cat([p.grad.flatten().double() for p in m.parameters() if p.grad is not None])


for name in sys.argv[1].split(","):
    kw = dict(num_classes=10, drop_rate=0.0)  # drop_path_rate is 0 by default
    torch.manual_seed(0)
    m64 = timm.create_model(name, **kw).train().double()
    torch.manual_seed(0)
    me = timm.create_model(name, **kw).train()
    torch.manual_seed(0)
    mc = timm.create_model(name, **kw).train()
    wick.reset()
    l64, g64 = step(m64, m64, torch.float64)
    le, ge = step(me, me, torch.float32)
    lc, gc = step(mc, wick.compile(mc), torch.float32)
    ref = g64.abs().max().item()
    print(f"{name}: loss f64 {l64:.6f} eager {le:.6f} wick {lc:.6f}; grads vs f64: eager {((ge - g64).abs().max().item() / ref):.1e}, "
          f"wick {((gc - g64).abs().max().item() / ref):.1e}; wick vs eager {((gc - ge).abs().max().item() / ref):.1e}", flush=True)
