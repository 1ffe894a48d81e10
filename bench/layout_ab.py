"""A/B of wick's CUDA layout work in one process (helper gpu9, issue 9):
timm models in bf16 autocast inference, batch 64, each compiled as
  eager | inductor | wick (torch.compile backend, channels-last: the default)
  | wick WICK_CHANNELS_LAST=0 (NCHW, as before) | wick reduce-overhead (CUDA graphs)
on separate copies of the model, then timed interleaved with CUDA events
(median of rounds), and profiled (device kernel time per call, kernel count)
with torch.profiler. Also the first call's time (compile, cold caches for
the first variant of each compiler). Usage: layout_ab.py MODEL[,MODEL] [VARIANTS]"""
import copy
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import wick  # noqa: E402,F401


def timed(fn, x, n):
    s, t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        fn(x)
    t.record()
    torch.cuda.synchronize()
    return s.elapsed_time(t) / n


def device_time(fn, x, n=5):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn(x)
        torch.cuda.synchronize()
    total, count = 0.0, 0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total += e.device_time
            count += 1
    return total / n / 1000.0, count / n


def main():
    import timm

    models = sys.argv[1].split(",")
    variants = (sys.argv[2] if len(sys.argv) > 2 else "eager,inductor,wick,wick-nchw,wick-ro").split(",")
    for name in models:
        torch.manual_seed(0)
        base = timm.create_model(name, pretrained=False).cuda().eval()
        x = torch.randn(64, 3, 224, 224, device="cuda")
        fns, first = {}, {}
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            ref = base(x).float()
            for v in variants:
                m = copy.deepcopy(base)
                if v == "eager":
                    fn = m
                elif v == "inductor":
                    fn = torch.compile(m)
                else:
                    os.environ["WICK_CHANNELS_LAST"] = "0" if v == "wick-nchw" else "auto"
                    fn = torch.compile(m, backend="wick", mode="reduce-overhead" if v == "wick-ro" else None)
                t0 = time.time()
                out = fn(x).float()
                torch.cuda.synchronize()
                first[v] = time.time() - t0
                err = ((out - ref).norm() / ref.norm()).item()
                fns[v] = fn
                print(f"{name} {v}: first call {first[v]:.1f} s, rel err vs eager {err:.1e}", flush=True)
            os.environ.pop("WICK_CHANNELS_LAST", None)
            for fn in fns.values():
                for _ in range(3):
                    fn(x)
            rounds = {v: [] for v in fns}
            for _ in range(9):
                for v, fn in fns.items():
                    rounds[v].append(timed(fn, x, 10))
            prof = {v: device_time(fn, x) for v, fn in fns.items()}
        e = statistics.median(rounds["eager"])
        print(f"| {name} | variant | ms (median of 9 x 10 calls) | speedup | device kernel ms/call | kernels/call | first call s |")
        for v in fns:
            ms = statistics.median(rounds[v])
            print(f"| {name} | {v} | {ms:.3f} (min {min(rounds[v]):.3f}) | {e / ms:.2f}x | {prof[v][0]:.3f} | "
                  f"{prof[v][1]:.0f} | {first[v]:.1f} |", flush=True)
        del fns, base


if __name__ == "__main__":
    main()
