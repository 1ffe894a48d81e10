"""Channels-last check for the torch.compile path (wick/_layout.py), on CUDA
when there is one: a small residual conv net in bf16 autocast inference,
compiled with backend="wick", compared with eager against a float64 reference
(relative error of each) and timed against eager with CUDA events."""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import wick  # noqa: E402,F401


class Net(nn.Module):
    def __init__(self, c=64):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 7, stride=2, padding=3, bias=False)
        self.bn0 = nn.BatchNorm2d(c)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.fc = nn.Linear(c, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn0(self.stem(x))))
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.relu(self.b2(self.c2(y)) + x)
        z = nn.functional.hardswish(self.dw(y))
        z = z * torch.sigmoid(z.mean((2, 3), keepdim=True))
        return self.fc(z.mean((2, 3))), z


def main():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    m = Net().to(dev).eval()
    for b in m.modules():
        if isinstance(b, nn.BatchNorm2d):
            b.running_mean.normal_(0, 0.5)
            b.running_var.uniform_(0.5, 2)
            b.weight.data.normal_(1, 0.2)
            b.bias.data.normal_(0, 0.2)
    x = torch.randn(64 if dev == "cuda" else 4, 3, 112, 112, device=dev)
    os.environ.setdefault("WICK_LOG", "graphs")
    with torch.no_grad():
        m64 = Net().to(dev).double().eval()
        m64.load_state_dict(m.state_dict())
        ref = m64(x.double())
        with torch.autocast(dev, dtype=torch.bfloat16):
            eager = m(x)
            f = torch.compile(m, backend="wick")
            out = f(x)
            out = f(x)
        for name, r, e, o in zip(("logits", "features"), ref, eager, out):
            rel = lambda a: ((a.double() - r).norm() / r.norm()).item()  # noqa: E731
            print(f"{name}: eager rel err {rel(e):.2e}, wick {rel(o):.2e}, strides eager {e.stride()} wick {o.stride()}")
        print("fallbacks:", wick.backends.fallback_reasons, "graph:", wick.backends.compiled_graphs[-1:])
        if dev == "cuda":
            os.environ["WICK_CHANNELS_LAST"] = "0"
            torch._dynamo.reset()
            g = torch.compile(m, backend="wick")
            with torch.autocast(dev, dtype=torch.bfloat16):
                for name, fn in (("eager", m), ("wick", f), ("wick WICK_CHANNELS_LAST=0", g)):
                    for _ in range(5):
                        fn(x)
                    s, t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    times = []
                    for _ in range(10):
                        s.record()
                        for _ in range(10):
                            fn(x)
                        t.record()
                        torch.cuda.synchronize()
                        times.append(s.elapsed_time(t) / 10)
                    print(f"{name}: {sorted(times)[5]:.3f} ms")


def timm_models(names, batch=16):
    """Each timm model (bf16 autocast inference): the layout the pass chose
    for its graphs, wick's fallbacks, the error against eager, and times."""
    import timm

    for name in names:
        torch._dynamo.reset()
        os.environ.pop("WICK_CHANNELS_LAST", None)
        torch.manual_seed(0)
        m = timm.create_model(name, pretrained=False).cuda().eval()
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        n0, f0 = len(wick.backends.compiled_graphs), len(wick.backends.fallback_reasons)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            want = m(x)
            f = torch.compile(m, backend="wick")
            got = f(x)
            err = ((got.float() - want.float()).norm() / want.float().norm()).item()
            times = {}
            for label, fn in (("eager", m), ("wick", f)):
                for _ in range(3):
                    fn(x)
                s, t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(20):
                    fn(x)
                t.record()
                torch.cuda.synchronize()
                times[label] = s.elapsed_time(t) / 20
        layouts = [g.get("layout") for g in wick.backends.compiled_graphs[n0:]]
        print(f"{name} batch {batch}: layouts {layouts}, fallbacks {wick.backends.fallback_reasons[f0:]}, "
              f"rel err vs eager {err:.2e}, eager {times['eager']:.3f} ms, wick {times['wick']:.3f} ms")


if __name__ == "__main__":
    main()
    if len(sys.argv) > 1 and torch.cuda.is_available():
        timm_models(sys.argv[1].split(","))
