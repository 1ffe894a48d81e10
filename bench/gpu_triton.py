"""Kernels on a CUDA GPU: eager vs inductor vs wick (Triton backend), with the
device's copy bandwidth measured in the same run as the ceiling of the
memory-bound ones.

    python bench/gpu_triton.py --out DIR [--quick]

Each case is compiled by each compiler (torch.compile(backend="inductor"),
torch.compile(backend="wick"), wick.compile = wick's own capture, and
wick.compile(mode="reduce-overhead")), checked against eager, and timed with
CUDA events (median of 5 runs of N calls, N chosen so a run takes ~50 ms).
Memory-bound cases report GB/s over the bytes they must move (inputs read
once, outputs written once) and that as a percentage of the measured copy
bandwidth. Writes results.json and report.md into DIR.
"""
import argparse
import json
import os
import platform
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import wick  # noqa: E402
from wick import backends  # noqa: E402


def timeit(fn, args, target_ms=50.0):
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    fn(*args)
    e1.record()
    torch.cuda.synchronize()
    one = max(e0.elapsed_time(e1), 1e-3)
    n = int(max(3, min(2000, target_ms / one)))
    runs = []
    for _ in range(5):
        e0.record()
        for _ in range(n):
            fn(*args)
        e1.record()
        torch.cuda.synchronize()
        runs.append(e0.elapsed_time(e1) / n)
    runs.sort()
    return runs[len(runs) // 2] * 1e-3  # seconds


def device_time(fn, args, n=20):
    """Seconds per call with the host out of the picture: n calls recorded in
    one CUDA graph and replayed (None when the calls cannot be recorded)."""
    try:
        for _ in range(2):
            fn(*args)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                fn(*args)
        return timeit(lambda: g.replay(), ()) / n
    except Exception:  # noqa: BLE001 - not every compiler's call records
        torch.cuda.synchronize()
        return None


def copy_bandwidth():
    x = torch.empty(512 * 1024 * 1024 // 4, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    t = timeit(lambda: y.copy_(x), ())
    return 2 * x.numel() * 4 / t


def pointwise(x, y):
    return (torch.relu(x * 2.0 + y).sin() * y).to(x.dtype)


def softmax(x):
    return torch.softmax(x, dim=-1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def sum_rows(x):
    return x.sum(dim=-1)


def sum_cols(x):
    return x.sum(dim=0)


def mm_epilogue(x, w, b):
    return F.gelu(x @ w + b)


def cases(quick):
    n = 16 if quick else 64
    M = 1024 * 1024
    rows = 8192 if quick else 65536
    d = torch.device("cuda")
    out = []
    for dt in (torch.float32, torch.bfloat16):
        es = torch.finfo(dt).bits // 8
        x, y = torch.randn(n * M, device=d, dtype=dt), torch.randn(n * M, device=d, dtype=dt)
        out.append((f"pointwise chain {dt_name(dt)} [{n}M]", pointwise, (x, y), 3 * n * M * es, None))
        x = torch.randn(rows, 1024, device=d, dtype=dt)
        out.append((f"softmax {dt_name(dt)} [{rows}, 1024]", softmax, (x,), 2 * x.numel() * es, None))
        w, b = torch.randn(1024, device=d, dtype=dt), torch.randn(1024, device=d, dtype=dt)
        out.append((f"layer_norm {dt_name(dt)} [{rows}, 1024]", layer_norm, (x, w, b), 2 * x.numel() * es, None))
    x = torch.randn(8192, 8192, device=d)
    out.append(("sum dim=-1 float32 [8192, 8192]", sum_rows, (x,), x.numel() * 4, None))
    out.append(("sum dim=0 float32 [8192, 8192]", sum_cols, (x,), x.numel() * 4, None))
    x = torch.randn(512, 100000, device=d)
    out.append(("sum dim=-1 float32 [512, 100000] (looped)", sum_rows, (x,), x.numel() * 4, None))
    k = 4096
    a, w, b = (torch.randn(k, k, device=d, dtype=torch.bfloat16), torch.randn(k, k, device=d, dtype=torch.bfloat16) / 64,
               torch.randn(k, device=d, dtype=torch.bfloat16))
    out.append((f"matmul+bias+gelu bfloat16 [{k}x{k}x{k}]", mm_epilogue, (a, w, b), None, 2 * k ** 3))
    return out


def dt_name(dt):
    return str(dt).replace("torch.", "")


def compilers():
    return {
        "eager": lambda f: f,
        "inductor": lambda f: torch.compile(f, backend="inductor"),
        "wick": lambda f: torch.compile(f, backend="wick"),
        "wick-capture": lambda f: wick.compile(f),
        "wick-ro": lambda f: wick.compile(f, mode="reduce-overhead"),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import triton

    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "triton": triton.__version__, "gpu": torch.cuda.get_device_name(), "command": " ".join(sys.argv)}
    bw = copy_bandwidth()
    print(f"copy bandwidth: {bw / 1e9:.0f} GB/s", flush=True)
    rows = []
    for name, fn, inputs, nbytes, flops in cases(args.quick):
        if args.only and args.only not in name:
            continue
        want = fn(*inputs)
        row = {"case": name, "bytes": nbytes, "flops": flops, "results": {}}
        for cname, make in compilers().items():
            torch._dynamo.reset()
            wick.reset()
            backends.compiled_graphs.clear()
            nfb = len(backends.fallback_reasons)
            r = {}
            try:
                t0 = time.perf_counter()
                f = make(fn)
                got = f(*inputs)
                torch.cuda.synchronize()
                r["first_call_s"] = time.perf_counter() - t0
                err = (got.float() - want.float()).abs().max().item()
                r["max_abs_err"] = err
                r["time_us"] = timeit(f, inputs) * 1e6
                dt = device_time(f, inputs) if cname != "wick-ro" else None
                r["device_us"] = dt * 1e6 if dt else None
                t = r["device_us"] or r["time_us"]
                if nbytes:
                    r["GB/s"] = nbytes / (t * 1e-6) / 1e9
                    r["pct_copy_bw"] = 100.0 * nbytes / (t * 1e-6) / bw
                if flops:
                    r["TFLOP/s"] = flops / (t * 1e-6) / 1e12
                if cname.startswith("wick"):
                    st = wick.stats()
                    r["fallbacks"] = list(backends.fallback_reasons[nfb:]) + list(st.get("fallbacks", []))
                    r["graphs"] = backends.compiled_graphs[:] if cname == "wick" else st.get("graphs")
            except Exception as exc:  # noqa: BLE001 - a failing row is reported, not fatal
                r["error"] = f"{type(exc).__name__}: {exc}"[:500]
            row["results"][cname] = r
            show = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()
                            if k not in ("graphs",))
            print(f"{name:45s} {cname:13s} {show}", flush=True)
        rows.append(row)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"env": env, "copy_bandwidth_GBps": bw / 1e9, "rows": rows}, f, indent=1, default=str)
    lines = [f"# Kernels on {env['gpu']}", "",
             f"torch {env['torch']}, CUDA {env['cuda']}, Triton {env['triton']}, Python {env['python']}.",
             f"Command: `{env['command']}`. Copy bandwidth measured in this run: {bw / 1e9:.0f} GB/s.", "",
             "| case | " + " | ".join(compilers()) + " |", "|---" * (1 + len(compilers())) + "|"]
    for row in rows:
        cells = []
        for cname in compilers():
            r = row["results"].get(cname, {})
            if "error" in r:
                cells.append("error")
                continue
            c = f"{r.get('time_us', 0):.1f} us"
            if r.get("device_us"):
                c += f" / {r['device_us']:.1f} us"
            if "pct_copy_bw" in r:
                c += f" ({r['pct_copy_bw']:.0f}%)"
            if "TFLOP/s" in r:
                c += f" ({r['TFLOP/s']:.0f} TF/s)"
            if r.get("fallbacks"):
                c += " [fallback]"
            cells.append(c)
        lines.append(f"| {row['case']} | " + " | ".join(cells) + " |")
    lines += ["", "Each cell: time per call from Python (host overhead included) / device time (the calls "
              "recorded in a CUDA graph and replayed; wick-ro is one already). Percentages: bytes the "
              "kernels must move over the device time, against the copy bandwidth above; TF/s likewise. "
              "[fallback]: wick ran something eagerly (the reason is in results.json)."]
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
