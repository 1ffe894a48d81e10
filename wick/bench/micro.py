"""Kernel micro-benchmark: wick vs eager vs torch.compile (inductor), in one process.

    python bench/micro.py [--device cpu|cuda] [--numel N] [--rows R --cols C] [--out DIR]

Kernels:
  pointwise8    ((((x*1.5 + 0.5).relu() - y) / 2).sigmoid().tanh()).exp() over N float32 (default 2**24)
  softmax_rows  m = x.amax(-1, keepdim=True); e = (x - m).exp(); e / e.sum(-1, keepdim=True) on R x C
  overhead      pointwise8 on 16 elements: the per-call cost of eager, inductor and wick

For each kernel: median times over interleaved repeats, speedups vs eager, the
wick/inductor time ratio, cold compile times (both caches point at fresh empty
dirs, set before torch or wick is imported; compile time = first call - a
steady call; wick's own figure from wick.stats() is shown beside it), and an
accuracy check against eager and a float64 reference (tol 1e-3). A wick result
that ran eagerly (fallback) or failed accuracy gets no speedup.

Each compiler's one-time process start-up (inductor: C++ toolchain checks,
worker pool; wick: loading its runtime) is measured separately by compiling an
unrelated function first, and reported as ``init_s``.

Writes results.json and report.md to bench/results/<date>-<machine>-micro/.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def pointwise8(x, y):
    return ((((x * 1.5 + 0.5).relu() - y) / 2.0).sigmoid().tanh()).exp()


def softmax_rows(x):
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True)


def _warmup_fn(z):
    return z * 2.0 + 1.0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--numel", type=int, default=2**24)
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--tiny", type=int, default=16, help="elements for the per-call overhead test")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--sample-s", type=float, default=0.1, help="target seconds per timing sample")
    p.add_argument("--compilers", default="inductor,wick")
    p.add_argument("--out", help="output folder (default bench/results/<date>-<machine>-micro)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Fresh, empty caches for a cold compile: set before torch and wick are imported.
    tmp = tempfile.mkdtemp(prefix="wick-micro-")
    for var, sub in (("WICK_CACHE_DIR", "wick"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                     ("TRITON_CACHE_DIR", "triton")):
        os.environ[var] = os.path.join(tmp, sub)

    import torch

    from . import accuracy, sysinfo

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    comps = [c for c in args.compilers.split(",") if c]

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def timed(fn, inputs, n):
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*inputs)
        sync()
        return (time.perf_counter() - t0) / n

    wick = None
    wick_error = None
    if "wick" in comps:
        try:
            import wick as _w

            if not callable(getattr(_w, "compile", None)):
                raise ImportError("wick.compile is missing")
            wick = _w
        except Exception as e:
            wick_error = f"wick not importable: {type(e).__name__}: {e}"

    def make(comp, fn):
        if comp == "inductor":
            return torch.compile(fn)
        if comp == "wick":
            return wick.compile(fn)
        raise ValueError(comp)

    results = {"kernels": [], "init": {}, "overhead": None}
    small = torch.randn(7, device=device)
    for comp in comps:
        if comp == "wick" and wick is None:
            results["init"][comp] = {"status": "not_supported", "detail": wick_error}
            continue
        try:
            t0 = time.perf_counter()
            make(comp, _warmup_fn)(small)
            sync()
            results["init"][comp] = {"init_s": round(time.perf_counter() - t0, 3)}
        except Exception as e:
            results["init"][comp] = {"status": "compile_error", "detail": f"{type(e).__name__}: {e}"}

    g = torch.Generator().manual_seed(0)
    kernels = [
        ("pointwise8", pointwise8, (torch.randn(args.numel, generator=g).to(device),
                                    torch.randn(args.numel, generator=g).to(device)), f"{args.numel} float32"),
        ("softmax_rows", softmax_rows, ((torch.randn(args.rows, args.cols, generator=g) * 3).to(device),),
         f"{args.rows}x{args.cols} float32"),
        ("overhead_pointwise8", pointwise8, (torch.randn(args.tiny, generator=g).to(device),
                                             torch.randn(args.tiny, generator=g).to(device)),
         f"{args.tiny} float32: per-call overhead"),
    ]
    for name, fn, inputs, shape in kernels:
        print(f"micro: {name} ({shape})", file=sys.stderr, flush=True)
        k = {"kernel": name, "shape": shape, "compilers": {}}
        eager_out = fn(*inputs)
        ref64 = fn(*[t.double() for t in inputs])
        runners = {"eager": fn}
        for comp in comps:
            entry = {"status": None, "detail": ""}
            k["compilers"][comp] = entry
            if comp == "wick" and wick is None:
                entry.update(status="not_supported", detail=wick_error)
                continue
            try:
                if comp == "wick":
                    wick.reset()
                t0 = time.perf_counter()
                c = make(comp, fn)
                out = c(*inputs)
                sync()
                first = time.perf_counter() - t0
            except Exception as e:
                entry.update(status="compile_error", detail=f"{type(e).__name__}: {e}")
                continue
            steady = min(timed(c, inputs, 1) for _ in range(3))
            entry["compile_s"] = round(max(first - steady, 0.0), 4)
            ok, info = accuracy.compare(accuracy.normalize(eager_out), accuracy.normalize(out),
                                        accuracy.normalize(ref64), tol=1e-3)
            entry["accuracy"] = info
            if comp == "wick":
                st = wick.stats()
                entry["wick_stats"] = {k2: v for k2, v in st.items() if k2 != "hook"}
                entry["wick_compile_time_s"] = st.get("compile_time_s")
                fb = list(st.get("fallbacks") or [])
                if not st.get("graphs"):
                    fb = fb or ["wick compiled no graph: ran eagerly"]
                if fb:
                    entry["fallbacks"] = fb
            if not ok:
                entry.update(status="fail_accuracy", detail=info["error"])
            elif entry.get("fallbacks"):
                entry.update(status="fallback", detail="; ".join(entry["fallbacks"][:3]))
            else:
                entry["status"] = "pass"
            runners[comp] = c
        # interleaved timing: eager, then each compiler, repeated
        t1 = min(timed(fn, inputs, 1) for _ in range(3))
        n = max(1, min(100000, int(args.sample_s / max(t1, 1e-7))))
        samples = {c: [] for c in runners}
        for _ in range(args.repeats):
            for c, r in runners.items():
                samples[c].append(timed(r, inputs, n))
        k["calls_per_sample"] = n
        k["eager_ms"] = round(statistics.median(samples["eager"]) * 1e3, 6)
        for c, s in samples.items():
            if c == "eager":
                continue
            e = k["compilers"][c]
            e["ms"] = round(statistics.median(s) * 1e3, 6)
            e["speedup"] = round(k["eager_ms"] / e["ms"], 4) if e["status"] == "pass" else None
        w, i = k["compilers"].get("wick", {}), k["compilers"].get("inductor", {})
        if w.get("status") == "pass" and i.get("status") == "pass":
            k["wick_over_inductor_time"] = round(w["ms"] / i["ms"], 4)
        results["kernels"].append(k)

    info = sysinfo.machine(device)
    tag = sysinfo.machine_tag(device, info)
    stamp = sysinfo.stamp()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    outdir = args.out or os.path.join(repo, "bench", "results", f"{stamp}-{tag}-micro")
    os.makedirs(outdir, exist_ok=True)
    result = {"meta": {"stamp": stamp, "command": sysinfo.command_line(), "machine": info,
                       "versions": sysinfo.versions(), "device": device, "cache_dir": tmp}, **results}
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    md = markdown(result)
    with open(os.path.join(outdir, "report.md"), "w") as f:
        f.write(md)
    print(md)
    print(f"results: {outdir}/ (results.json, report.md)")
    return 0


def _f(v, spec):
    return "-" if v is None else spec.format(v)


def markdown(result):
    m = result["meta"]
    L = [f"# wick micro-benchmark: {m['stamp']}", "",
         f"* command: `{m['command']}`",
         f"* machine: {m['machine'].get('cpu')} ({m['machine'].get('cores')} cores)"
         + (f", GPU {m['machine'].get('gpu')}" if m['machine'].get('gpu') else "") + f"; device `{m['device']}`",
         "* versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v), "",
         "Times are medians of interleaved repeats; speedup = eager / compiled (only for rows that pass the "
         "accuracy check and did not fall back to eager). wick/inductor < 1 means wick is faster. Compile = "
         "first call - steady call, with empty caches (fresh WICK_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR); the "
         "one-time start-up of each compiler in the process is `init` below.", ""]
    init = ", ".join(f"{c}: {_f(v.get('init_s'), '{:.2f} s')}" + (f" ({v.get('status')}: {v.get('detail')})"
                                                                   if v.get("status") else "")
                     for c, v in result["init"].items())
    L += [f"One-time compiler start-up: {init}", ""]
    L += ["| kernel | shape | eager ms | compiler | status | ms | speedup | compile s | wick-reported compile s | "
          "wick/inductor time |", "|---|---|---|---|---|---|---|---|---|---|"]
    for k in result["kernels"]:
        for c, e in k["compilers"].items():
            L.append(f"| {k['kernel']} | {k['shape']} | {_f(k['eager_ms'], '{:.4f}')} | {c} | {e['status']} | "
                     f"{_f(e.get('ms'), '{:.4f}')} | {_f(e.get('speedup'), '{:.2f}x')} | "
                     f"{_f(e.get('compile_s'), '{:.3f}')} | {_f(e.get('wick_compile_time_s'), '{:.3f}')} | "
                     f"{_f(k.get('wick_over_inductor_time'), '{:.2f}') if c == 'wick' else ''} |")
    L.append("")
    ov = [k for k in result["kernels"] if k["kernel"].startswith("overhead")]
    for k in ov:
        parts = [f"eager {k['eager_ms'] * 1e3:.1f} us"]
        for c, e in k["compilers"].items():
            if e.get("ms") is not None:
                parts.append(f"{c} {e['ms'] * 1e3:.1f} us ({e['status']})")
        L.append(f"Per-call overhead ({k['shape']}): " + ", ".join(parts))
    notes = [(k["kernel"], c, e) for k in result["kernels"] for c, e in k["compilers"].items()
             if e["status"] != "pass"]
    if notes:
        L += ["", "## Not passing"]
        for kern, c, e in notes:
            L.append(f"* {kern} `{c}`: **{e['status']}** {e.get('detail', '')}")
    L.append("")
    return "\n".join(L)


if __name__ == "__main__":
    if __package__ in (None, ""):
        import importlib.util

        _here = os.path.dirname(os.path.abspath(__file__))
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]  # no sibling shadows a library
        _spec = importlib.util.spec_from_file_location("wick_bench", os.path.join(_here, "__init__.py"),
                                                       submodule_search_locations=[_here])
        _pkg = importlib.util.module_from_spec(_spec)
        sys.modules["wick_bench"] = _pkg
        _spec.loader.exec_module(_pkg)
        from wick_bench.micro import main as _main

        sys.exit(_main())
    sys.exit(main())
