"""Capture benchmark: per-call overhead and capture time of wick's frame hook
and capture, side by side with PyTorch's capture (torch.compile with
backend="eager": Dynamo's overhead alone, no compiler) and plain eager.

    python bench/capture_bench.py [--out DIR] [--repeat N] [--quick]

Cases
  inputs100   a function of 100 tensor inputs (sums them), 10 cache entries
              (10 input shapes compiled first); calls with one shape again
              and again ("same"), and round-robin over the 10 shapes ("rr").
  flat12      a 12-layer transformer-like block stack written in ops wick
              captures today (hand-written LayerNorm, gated residual, 48
              parameter tensors); no matmul, which wick's capture lacks.
  linear12    12 layers of nn.Linear + nn.LayerNorm + ReLU in a ModuleList:
              real module code. wick's capture does not handle submodule
              calls and for-loops yet, so wick runs it eagerly: reported so.

Per call: median of `repeat` timing runs (each the mean of `number` calls)
after warm-up, in microseconds. "overhead" = time minus the time of the
captured graph called directly (wick: its CompiledGraph; Dynamo's eager
backend: the same ops as plain eager, so plain eager is the baseline).
Capture time: first call of a fresh compile minus one plain call, with the
"eager" backend for both wick and Dynamo (capture alone, no code
generation); wick's own backend adds its C compile (cached on disk).
Writes results.json and report.md into --out.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import timeit

# 10 cache entries must fit under both caches' limits (8 by default)
os.environ.setdefault("WICK_CACHE_LIMIT", "16")

import torch  # noqa: E402
import torch._dynamo  # noqa: E402

for _name in ("recompile_limit", "cache_size_limit"):
    if hasattr(torch._dynamo.config, _name):
        setattr(torch._dynamo.config, _name, 16)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import wick  # noqa: E402
from wick import _C  # noqa: E402

torch.set_num_threads(1)


def per_call_us(fn, number, repeat):
    fn()
    fn()
    times = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(times) / number * 1e6


# ---- cases ---------------------------------------------------------------------

def make_sum100():
    names = [f"a{i}" for i in range(100)]
    src = f"def sum100({', '.join(names)}):\n    return {' + '.join(names)}\n"
    ns = {}
    exec(compile(src, "<bench:sum100>", "exec"), ns)
    return ns["sum100"]


def make_flat12(n=12, d=64):
    lines = ["def forward(self, x):"]
    for i in range(n):
        lines += ["    m = x.mean(-1, keepdim=True)",
                  "    c = x - m",
                  "    v = (c * c).mean(-1, keepdim=True)",
                  f"    h = c / torch.sqrt(v + 1e-5) * self.g{i} + self.b{i}",
                  f"    x = x + torch.relu(h * self.w{i} + self.c{i})"]
    lines.append("    return x")
    ns = {"torch": torch}
    exec(compile("\n".join(lines), "<bench:flat12>", "exec"), ns)

    class Flat12(torch.nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(0)
            for i in range(n):
                for k in "gbwc":
                    setattr(self, f"{k}{i}", torch.nn.Parameter(torch.randn(d, generator=g) * 0.5,
                                                                 requires_grad=False))

    Flat12.forward = ns["forward"]
    return Flat12()


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.lin = torch.nn.Linear(d, d)

    def forward(self, x):
        return x + torch.relu(self.lin(self.ln(x)))


class Linear12(torch.nn.Module):
    def __init__(self, d=64, n=12):
        super().__init__()
        self.layers = torch.nn.ModuleList([Block(d) for _ in range(n)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


# ---- helpers -------------------------------------------------------------------------

def wick_graph_of(code):
    """The compiled graph object in the newest transformed code of `code`."""
    for nc in _C._entry_codes(code):
        if nc is None:
            continue
        for c in nc.co_consts:
            if callable(c) and not isinstance(c, type(code)):
                return c
    return None


def wick_summary(code):
    entries = _C.code_entries(code)
    return {
        "entries": len(entries),
        "graphs": sum(int(e.get("graph_count") or 0) for e in entries if not e["eager"]),
        "eager_entries": sum(1 for e in entries if e["eager"]),
        "fallback_reasons": sorted({e["reason"] for e in entries if e.get("reason")}),
    }


def dynamo_summary():
    import torch._dynamo.utils as du
    c = du.counters
    return {"graphs": int(c["stats"]["unique_graphs"]),
            "graph_breaks": int(sum(c["graph_break"].values()))}


def dynamo_graph_direct_us(f, args, number, repeat):
    """Dynamo's captured FX graph for args, called directly (what its eager
    backend runs per call, without the guards and the frame machinery)."""
    gms = []

    def record(gm, example_inputs):
        gms.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(f, backend=record, dynamic=False)(*args)
    if len(gms) != 1:
        return None
    gm, inputs = gms[0]  # the real tensors (parameters lifted to inputs included)
    try:
        gm(*inputs)
    except Exception:
        return None
    return per_call_us(lambda: gm(*inputs), number, repeat)


def fresh():
    wick.reset()
    torch._dynamo.reset()
    import torch._dynamo.utils as du
    du.counters.clear()


def first_call_s(make_compiled, args):
    t0 = time.perf_counter()
    cf = make_compiled()
    out = cf(*args)
    return time.perf_counter() - t0, cf, out


# ---- benchmarks ------------------------------------------------------------------------

def bench_inputs100(number, repeat):
    f = make_sum100()
    shapes = [(i + 1,) for i in range(10)]
    argsets = [[torch.randn(s) for _ in range(100)] for s in shapes]
    res = {"case": "inputs100", "inputs": 100, "cache_entries": 10}
    eager_same = per_call_us(lambda: f(*argsets[0]), number, repeat)
    res["eager_us"] = eager_same
    for name, make in [("wick", lambda: wick.compile(f)),
                       ("wick_eagerbackend", lambda: wick.compile(f, backend="eager")),
                       ("dynamo_eager", lambda: torch.compile(f, backend="eager", dynamic=False))]:
        fresh()
        cf = make()
        for a in argsets:  # 10 entries
            torch.testing.assert_close(cf(*a), f(*a))
        same = per_call_us(lambda: cf(*argsets[0]), number, repeat)
        k = [0]

        def rr():
            k[0] = (k[0] + 1) % 10
            return cf(*argsets[k[0]])

        rr_us = per_call_us(rr, number, repeat)
        r = {"same_us": same, "round_robin_us": rr_us}
        if name.startswith("wick"):
            r.update(wick_summary(f.__code__))
            cf(*argsets[0])  # its entry is now the most recently used, the first
            g = wick_graph_of(f.__code__)
            if g is not None:
                r["graph_direct_us"] = per_call_us(lambda: g(*argsets[0]), number, repeat)
                r["overhead_same_us"] = same - r["graph_direct_us"]
        else:
            r.update(dynamo_summary())
            d = dynamo_graph_direct_us(f, argsets[0], number, repeat)
            if d is not None:
                r["graph_direct_us"] = d
                r["overhead_same_us"] = same - d
        res[name] = r
    res["eager_end_us"] = per_call_us(lambda: f(*argsets[0]), number, repeat)
    return res


def bench_module(case, model, x, number, repeat, capture_rounds=3):
    model.eval()
    res = {"case": case}
    with torch.no_grad():
        want = model(x)
        res["eager_us"] = per_call_us(lambda: model(x), number, repeat)
        plain_once = res["eager_us"] * 1e-6
        for name, make in [("wick", lambda: wick.compile(model)),
                           ("wick_eagerbackend", lambda: wick.compile(model, backend="eager")),
                           ("dynamo_eager", lambda: torch.compile(model, backend="eager", dynamic=False))]:
            caps = []
            for _ in range(capture_rounds):
                fresh()
                t, cf, out = first_call_s(make, (x,))
                caps.append(t - plain_once)
            torch.testing.assert_close(out, want)
            r = {"first_call_s": statistics.median(caps)}
            r["per_call_us"] = per_call_us(lambda: cf(x), number, repeat)
            if name.startswith("wick"):
                code = type(model).forward.__code__
                r.update(wick_summary(code))
                g = wick_graph_of(code)
                if g is not None:
                    params = None
                    try:
                        # the transformed code loads x, then parameters: rebuild its inputs
                        params = _graph_inputs(code, model, x)
                    except Exception:
                        params = None
                    if params is not None:
                        r["graph_direct_us"] = per_call_us(lambda: g(*params), number, repeat)
                        r["overhead_us"] = r["per_call_us"] - r["graph_direct_us"]
                if r["graphs"] == 0:
                    r["overhead_us"] = r["per_call_us"] - res["eager_us"]
            else:
                r.update(dynamo_summary())
                d = dynamo_graph_direct_us(model, (x,), number, repeat)
                if d is not None:
                    r["graph_direct_us"] = d
                    r["overhead_us"] = r["per_call_us"] - d
            res[name] = r
        res["eager_end_us"] = per_call_us(lambda: model(x), number, repeat)
    return res


def _graph_inputs(code, model, x):
    """The graph's inputs in order, read from the transformed code's loads."""
    import dis
    nc = next(c for c in _C._entry_codes(code) if c is not None)
    vals, cur = [], None
    for ins in dis.get_instructions(nc):
        if ins.opname in ("LOAD_FAST", "LOAD_FAST_CHECK"):
            if cur is not None:
                vals.append(cur)
            cur = {"self": model, "x": x}.get(ins.argval)
        elif ins.opname == "LOAD_ATTR" and cur is not None:
            cur = getattr(cur, ins.argval)
        elif ins.opname in ("CALL", "PRECALL"):
            if cur is not None:
                vals.append(cur)
            return vals
    raise RuntimeError("no graph call found")


def versions():
    def git(*a):
        try:
            return subprocess.check_output(["git", *a], cwd=ROOT, text=True).strip()
        except Exception:
            return "?"
    return {"python": sys.version.split()[0], "torch": torch.__version__,
            "machine": platform.machine(), "cpus": os.cpu_count(), "threads": torch.get_num_threads(),
            "wick_commit": git("rev-parse", "--short", "HEAD"), "wick_branch": git("rev-parse", "--abbrev-ref", "HEAD")}


def fmt(v):
    return "-" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))


def report(results, meta):
    L = ["# Capture benchmark (wick vs Dynamo backend=eager vs plain eager)", "",
         f"Command: `{meta['command']}`", "",
         "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()), "",
         "Per-call figures are medians over repeats after warm-up, in microseconds; "
         "1 torch thread.", ""]
    r = results["inputs100"]
    L += ["## 100 tensor inputs, 10 cache entries (sum of 100 tensors of 1..10 elements)", "",
          "| | same shape, us | round-robin over 10 shapes, us | overhead (same), us | graphs | notes |",
          "|---|---|---|---|---|---|",
          f"| plain eager | {fmt(r['eager_us'])} (end: {fmt(r['eager_end_us'])}) | | | | |"]
    for k in ("wick", "wick_eagerbackend", "dynamo_eager"):
        x = r[k]
        notes = ""
        if k.startswith("wick"):
            notes = (f"{x['entries']} entries, {x['eager_entries']} eager; " +
                     "; ".join(x["fallback_reasons"])) if x["eager_entries"] else f"{x['entries']} entries"
            if "graph_direct_us" in x:
                notes += f"; graph called directly {x['graph_direct_us']:.1f} us"
        else:
            notes = f"{x['graph_breaks']} graph breaks"
            if "graph_direct_us" in x:
                notes += f"; FX graph called directly {x['graph_direct_us']:.1f} us"
        L.append(f"| {k} | {fmt(x['same_us'])} | {fmt(x['round_robin_us'])} | "
                 f"{fmt(x.get('overhead_same_us'))} | {x['graphs']} | {notes} |")
    for case, title in (("flat12", "12-layer transformer-like stack in ops wick captures (48 parameters, x 8x64)"),
                        ("linear12", "12 x (LayerNorm, Linear, ReLU, residual) nn.Modules (x 8x64)")):
        r = results[case]
        L += ["", f"## {title}", "",
              "| | per call, us | overhead, us | first call (capture), s | graphs | notes |",
              "|---|---|---|---|---|---|",
              f"| plain eager | {fmt(r['eager_us'])} (end: {fmt(r['eager_end_us'])}) | | | | |"]
        for k in ("wick", "wick_eagerbackend", "dynamo_eager"):
            x = r[k]
            if k.startswith("wick"):
                notes = "; ".join(x["fallback_reasons"]) if x["eager_entries"] else ""
                if x["graphs"] == 0:
                    notes = "RUNS EAGERLY (wick fell back): " + notes
                if "graph_direct_us" in x:
                    notes += f" graph called directly {x['graph_direct_us']:.1f} us"
            else:
                notes = f"{x['graph_breaks']} graph breaks"
                if "graph_direct_us" in x:
                    notes += f"; FX graph called directly {x['graph_direct_us']:.1f} us"
            L.append(f"| {k} | {fmt(x['per_call_us'])} | {fmt(x.get('overhead_us'))} | "
                     f"{x['first_call_s']:.4f} | {x['graphs']} | {notes} |")
    L += ["", "overhead: per call minus the captured graph called directly (wick: the object its "
          "transformed code calls; Dynamo: its FX GraphModule), or minus plain eager where wick "
          "falls back. Plain eager is timed before and after the compiled variants (machine noise).",
          "first call: a fresh compile's first call minus one plain call (median of 3): capture "
          "(+ code generation and C compile for the wick backend, cached on disk after the first run)."]
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="fewer calls (smoke test)")
    a = ap.parse_args()
    number = 50 if a.quick else 300
    repeat = 3 if a.quick else a.repeat
    results = {}
    results["inputs100"] = bench_inputs100(number, repeat)
    results["flat12"] = bench_module("flat12", make_flat12(), torch.randn(8, 64), number, repeat)
    results["linear12"] = bench_module("linear12", Linear12(), torch.randn(8, 64), number, repeat)
    meta = {"command": " ".join([os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(ROOT)
                                 else sys.executable] + sys.argv),
            "versions": versions(), "number": number, "repeat": repeat}
    text = report(results, meta)
    print(text)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "results.json"), "w") as fh:
            json.dump({"meta": meta, "results": results}, fh, indent=1, default=str)
        with open(os.path.join(a.out, "report.md"), "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
