"""Capture benchmark: per-call overhead and capture time of wick's frame hook
and capture, side by side with PyTorch's capture (torch.compile with
backend="eager": Dynamo's overhead alone, no compiler) and plain eager.

    python bench/capture_bench.py [--out DIR] [--repeat N] [--number N] [--quick]
                                  [--models all|none|bert,...] [--clock wall|cpu]
    python bench/capture_bench.py --fresh-process [--models ...] [--out DIR]
        (cold capture: each model's first capture in a process of its own)

Cases (each variant gets code objects of its own, made with exec, so caches
never mix):
  inputs100   a function of 100 tensor inputs (returns their sum), with 10
              cache entries (10 input shapes compiled first); then calls with
              one shape ("same") and round-robin over the 10 shapes ("rr").
  flat12      a 12-layer transformer-like block stack written in ops wick
              captures today (hand-written LayerNorm, gated residual; 48
              parameter tensors); no matmul, which wick's capture lacks.
  linear12    12 blocks of nn.LayerNorm + nn.Linear + ReLU + residual in a
              ModuleList: ordinary module code.
  models      the transformers models of tests/capture/test_models.py
              (BERT, GPT-2, T5, LLaMA, DistilBERT, RoBERTa, ViT, Whisper):
              capture time, graphs and per-call time, inference and
              forward+backward (--models to pick).

Timing: every variant of a case (plain eager, wick, wick's capture with the
"eager" backend, Dynamo with the "eager" backend, and each captured graph
called directly) is warmed up, then timed in interleaved rounds (each round
`number` calls of every variant in turn), so load changes on a shared
machine hit all variants alike. Per-call time = median over rounds (min also
kept), in microseconds. Overhead = per-call time minus the captured graph
called directly (wick: the object its transformed code calls; Dynamo: its
FX GraphModule with the inputs its backend was given); where wick falls
back, minus plain eager. Capture time = first call of a fresh compile minus
one plain call, median of 3 fresh compiles.
Writes results.json and report.md into --out.
"""
import argparse
import dis
import json
import os
import platform
import statistics
import subprocess
import sys
import time

# 10 cache entries must fit under both caches' limits (8 by default)
os.environ.setdefault("WICK_CACHE_LIMIT", "16")

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch._dynamo.utils  # noqa: E402

for _name in ("recompile_limit", "cache_size_limit"):
    if hasattr(torch._dynamo.config, _name):
        setattr(torch._dynamo.config, _name, 16)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import wick  # noqa: E402
from wick import _C  # noqa: E402

torch.set_num_threads(1)


# ---- timing ----------------------------------------------------------------------------

CLOCK = time.perf_counter  # --clock cpu: time.thread_time (CPU time of this thread)


def time_interleaved(fns, number, repeat):
    """{name: fn} -> {name: {"median": us, "min": us}} over interleaved rounds."""
    for f in fns.values():
        for _ in range(3):
            f()
    samples = {k: [] for k in fns}
    clock = CLOCK
    for _ in range(repeat):
        for k, f in fns.items():
            t0 = clock()
            for _ in range(number):
                f()
            samples[k].append((clock() - t0) / number * 1e6)
    return {k: {"median": statistics.median(v), "min": min(v)} for k, v in samples.items()}


# ---- models (fresh code objects per call) -------------------------------------------------

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
    return Flat12().eval()


LINEAR12_SRC = '''
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
'''


def make_linear12():
    ns = {"torch": torch}
    exec(compile(LINEAR12_SRC, "<bench:linear12>", "exec"), ns)
    torch.manual_seed(0)
    return ns["Linear12"]().eval().requires_grad_(False)


# ---- what each capture produced ------------------------------------------------------------

def wick_graph_and_inputs(code, args_by_name):
    """The compiled graph the newest transformed code of `code` calls (through
    its GraphLoader), and the graph inputs the loader resolves from the roots
    the code loads before the call."""
    for nc in _C._entry_codes(code):
        if nc is None:
            continue
        loader = next((c for c in nc.co_consts if type(c).__name__ == "GraphLoader"), None)
        if loader is None:
            continue
        roots = []
        for ins in dis.get_instructions(nc):
            if ins.opname in ("LOAD_FAST", "LOAD_FAST_CHECK"):
                roots.append(args_by_name[ins.argval])
            elif ins.opname == "LOAD_GLOBAL":
                roots.append(nc.co_consts and globals().get(ins.argval))
            elif ins.opname == "CALL":
                return loader.compiled, loader.inputs(*roots)
    return None, None


def wick_summary(code):
    entries = _C.code_entries(code)
    return {
        "entries": len(entries),
        "graphs": sum(int(e.get("graph_count") or 0) for e in entries if not e["eager"]),
        "eager_entries": sum(1 for e in entries if e["eager"]),
        "fallback_reasons": sorted({e["reason"] for e in entries if e.get("reason")}),
        "guards_per_entry": max((len(e.get("guards") or []) for e in entries), default=0),
    }


class DynamoRecorder:
    """Dynamo's "eager" backend (run the FX graph as is) that also keeps the
    graphs and the inputs it was given."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append((gm, list(example_inputs)))
        return gm.forward


def dynamo_counters():
    c = torch._dynamo.utils.counters
    return {"graph_breaks": int(sum(c["graph_break"].values()))}


# ---- benchmarks --------------------------------------------------------------------------------

def bench_inputs100(number, repeat):
    shapes = [(i + 1,) for i in range(10)]
    g = torch.Generator().manual_seed(1)
    argsets = [[torch.randn(s, generator=g) for _ in range(100)] for s in shapes]
    plain = make_sum100()
    variants, info = {}, {}
    fns = {"plain eager": lambda: plain(*argsets[0])}
    for name in ("wick", "wick_eagerbackend", "dynamo_eager"):
        f = make_sum100()
        torch._dynamo.utils.counters.clear()
        rec = DynamoRecorder()
        if name == "wick":
            cf = wick.compile(f)
        elif name == "wick_eagerbackend":
            cf = wick.compile(f, backend="eager")
        else:
            cf = torch.compile(f, backend=rec, dynamic=False)
        for a in argsets:  # 10 cache entries
            torch.testing.assert_close(cf(*a), plain(*a))
        cf(*argsets[0])  # the entry for argsets[0] is the most recently used
        k = [0]

        def rr(cf=cf, k=k):
            k[0] = (k[0] + 1) % 10
            return cf(*argsets[k[0]])

        fns[name] = (lambda cf=cf: cf(*argsets[0]))
        fns[name + " rr"] = rr
        if name.startswith("wick"):
            info[name] = wick_summary(f.__code__)
            graph, ins = wick_graph_and_inputs(f.__code__, {f"a{i}": argsets[0][i] for i in range(100)})
        else:
            info[name] = dict(dynamo_counters(), graphs=len(rec.graphs))
            gm, ins = next(((gm, ex) for gm, ex in rec.graphs if ex[0].shape == argsets[0][0].shape),
                           (None, None))
            graph = gm
        if graph is not None:
            fns[name + " graph"] = (lambda graph=graph, ins=ins: graph(*ins))
        variants[name] = cf
    t = time_interleaved(fns, number, repeat)
    return {"case": "inputs100", "timings": t, "info": info}


def bench_module(case, make, x, number, repeat):
    plain = make()
    want = plain(x)
    fns = {"plain eager": lambda: plain(x)}
    info = {}
    with torch.no_grad():
        for name in ("wick", "wick_eagerbackend", "dynamo_eager"):
            caps = []
            for _ in range(3):  # capture time: fresh code objects every time
                m = make()
                torch._dynamo.utils.counters.clear()
                rec = DynamoRecorder()
                t0 = time.perf_counter()
                if name == "wick":
                    cm = wick.compile(m)
                elif name == "wick_eagerbackend":
                    cm = wick.compile(m, backend="eager")
                else:
                    cm = torch.compile(m, backend=rec, dynamic=False)
                out = cm(x)
                caps.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            plain(x)
            once = time.perf_counter() - t0
            torch.testing.assert_close(out, want)
            fns[name] = (lambda cm=cm: cm(x))
            if name.startswith("wick"):
                code = type(m).forward.__code__
                info[name] = wick_summary(code)
                graph, ins = wick_graph_and_inputs(code, {"self": m, "x": x})
            else:
                info[name] = dict(dynamo_counters(), graphs=len(rec.graphs))
                graph, ins = rec.graphs[0] if len(rec.graphs) == 1 else (None, None)
            if graph is not None:
                fns[name + " graph"] = (lambda graph=graph, ins=ins: graph(*ins))
            info[name]["capture_s"] = statistics.median(caps) - once
        t = time_interleaved(fns, number, repeat)
    return {"case": case, "timings": t, "info": info}


def model_builders():
    """The transformers models of the capture tests (tiny configs, random
    weights): name -> () -> (model, kwargs)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "capture"))
    import test_models as tm

    return {f.__name__: f for f in tm.MODELS}


def first_ratio(we, d):
    """The first of the three captures alone (wick's extern-metadata memo and
    torch's fake-tensor cache are cold for the model then): older results
    files lack it."""
    if "capture_first_s" not in we or "capture_first_s" not in d:
        return "-"
    return f"{we['capture_first_s'] / d['capture_first_s']:.3f}"


def bench_models(number, repeat, names=None):
    """Per transformers model: capture time of the first call (median of 3
    fresh captures, minus one plain call), graphs, and per-call time, for
    wick (its compiler), wick with the "eager" backend and Dynamo with the
    "eager" backend; inference (no_grad) and a forward+backward call."""
    out = {}
    for name, make in model_builders().items():
        if names and name not in names:
            continue
        torch.manual_seed(0)
        model, kwargs = make()
        model.eval()
        row = {}
        for variant in ("wick", "wick_eagerbackend", "dynamo_eager"):
            info = {}
            for mode in ("inference", "training"):
                grad = mode == "training"
                caps, graphs, reasons = [], 0, []
                for _ in range(3):
                    wick.reset()
                    torch._dynamo.reset()
                    rec = DynamoRecorder()
                    with torch.set_grad_enabled(grad):
                        t0 = time.perf_counter()
                        model(**kwargs)
                        once = time.perf_counter() - t0
                        t0 = time.perf_counter()
                        if variant == "dynamo_eager":
                            cm = torch.compile(model, backend=rec, dynamic=False)
                        else:
                            cm = wick.compile(model, backend="wick" if variant == "wick" else "eager")
                        res = cm(**kwargs)
                        caps.append(time.perf_counter() - t0 - once)
                    if variant == "dynamo_eager":
                        graphs = len(rec.graphs)
                    else:
                        s = wick_summary(type(model).forward.__code__)
                        graphs, reasons = s["graphs"], s["fallback_reasons"]
                if grad:
                    loss = sum(v.float().sum() for v in res.values() if isinstance(v, torch.Tensor))
                    loss.backward()
                    model.zero_grad(set_to_none=True)
                with torch.set_grad_enabled(grad):
                    t = time_interleaved({"plain eager": lambda: model(**kwargs), variant: lambda: cm(**kwargs)},
                                         number, repeat)
                info[mode] = {"capture_s": statistics.median(caps), "capture_first_s": caps[0], "graphs": graphs,
                              "fallback_reasons": reasons, "per_call_us": t[variant]["median"],
                              "eager_us": t["plain eager"]["median"]}
            row[variant] = info
        out[name] = row
    return out


def entry_tree_counts(code):
    """(graphs, entries run eagerly) over code's cache entries and those of
    the resume functions and callees its graph breaks made."""
    graphs = eager = 0
    todo, seen = [code], set()
    while todo:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        for e in _C.code_entries(c):
            if e["eager"]:
                eager += 1
            else:
                graphs += int(e.get("graph_count") or 0)
            for b in e.get("breaks") or ():
                todo.extend(b["resume"])
                if b.get("callee") is not None:
                    todo.append(b["callee"])
    return graphs, eager


COLD_VARIANTS = ("wick_eagerbackend", "dynamo_eager")


def cold_child(name, variant, mode):
    """One first capture in this (fresh) process: the model's ops have never
    been captured here, so wick's extern-metadata memo and torch's fake-tensor
    cache start empty for them. Both systems are initialised first on an
    unrelated function (imports and one-time set-up, such as the fake-tensor
    machinery both use for op metadata, are not the model's capture).
    Prints one JSON line."""
    make = model_builders()[name]
    torch.manual_seed(0)
    model, kwargs = make()
    model.eval()
    grad = mode == "training"

    def tiny(x):  # pointwise ops and one extern call (flip, roll: no model here uses them)
        return torch.roll(torch.flip(x * 2 + 1, [0]), 1)

    wick.compile(tiny, backend="eager")(torch.ones(3))
    torch.compile(tiny, backend="eager")(torch.ones(3))
    wick.reset()
    torch._dynamo.reset()
    rec = DynamoRecorder()
    with torch.set_grad_enabled(grad):
        model(**kwargs)  # eager's own first-call costs
        t0 = time.perf_counter()
        model(**kwargs)
        once = time.perf_counter() - t0
        t0 = time.perf_counter()
        if variant == "dynamo_eager":
            cm = torch.compile(model, backend=rec, dynamic=False)
        else:
            cm = wick.compile(model, backend="wick" if variant == "wick" else "eager")
        cm(**kwargs)
        capture = time.perf_counter() - t0 - once
    if variant == "dynamo_eager":
        graphs, eager = len(rec.graphs), 0
    else:
        graphs, eager = entry_tree_counts(type(model).forward.__code__)
    print("@@COLD@@" + json.dumps({"capture_s": capture, "graphs": graphs, "eager_entries": eager}))


def bench_models_cold(names=None):
    """Per model, variant and mode: the first capture, each in a fresh process."""
    out = {}
    for name in model_builders():
        if names and name not in names:
            continue
        row = out.setdefault(name, {})
        for mode in ("inference", "training"):
            for variant in COLD_VARIANTS:
                r = subprocess.run([sys.executable, os.path.abspath(__file__), "--cold-child", name, variant, mode],
                                   capture_output=True, text=True)
                line = [ln for ln in r.stdout.splitlines() if ln.startswith("@@COLD@@")]
                if r.returncode or not line:
                    raise RuntimeError(f"cold child {name} {variant} {mode} failed:\n{r.stderr[-2000:]}")
                row.setdefault(variant, {})[mode] = json.loads(line[-1][len("@@COLD@@"):])
                print(name, mode, variant, row[variant][mode], flush=True)
    return out


def report_cold(results, meta):
    L = ["# Cold capture: the first capture of each model in a fresh process, wick vs Dynamo", "",
         f"Command: `{meta['command']}`", "",
         "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()), "",
         "One process per (model, variant, mode): the model built, two plain calls, both systems "
         "initialised on an unrelated function (pointwise ops, flip, roll), then one compiled call. Capture = that "
         "call minus the second plain call, wall clock, ms. wick_eagerbackend = wick's capture with "
         "the graph run by torch ops; dynamo_eager = torch.compile(backend=\"eager\"): capture alone "
         "on both sides. Graphs: over the whole entry tree (resume functions and callees); wick "
         "entries that ran eagerly are listed.", "",
         "| model | mode | wick capture ms | dynamo capture ms | ratio wick / dynamo | graphs wick / dynamo | wick eager entries |",
         "|---|---|---|---|---|---|---|"]
    ratios = []
    for name, row in results.items():
        for mode in ("inference", "training"):
            w, d = row["wick_eagerbackend"][mode], row["dynamo_eager"][mode]
            ratio = w["capture_s"] / d["capture_s"]
            ratios.append(ratio)
            L.append(f"| {name} | {mode} | {w['capture_s'] * 1e3:.1f} | {d['capture_s'] * 1e3:.1f} | "
                     f"{ratio:.3f} | {w['graphs']} / {d['graphs']} | {w['eager_entries']} |")
    if ratios:
        L += ["", f"Ratio range {min(ratios):.3f} to {max(ratios):.3f}; aim <= 0.10 each."]
    return "\n".join(L) + "\n"


# ---- report ----------------------------------------------------------------------------------------

def versions():
    def git(*a):
        try:
            return subprocess.check_output(["git", *a], cwd=ROOT, text=True).strip()
        except Exception:
            return "?"
    try:
        load = "%.1f %.1f %.1f" % os.getloadavg()
    except OSError:
        load = "?"
    return {"python": sys.version.split()[0], "torch": torch.__version__, "machine": platform.machine(),
            "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "load_avg_at_start": load,
            "wick_commit": git("rev-parse", "--short", "HEAD"), "wick_branch": git("rev-parse", "--abbrev-ref", "HEAD")}


def us(t, k):
    return f"{t[k]['median']:.1f} ({t[k]['min']:.1f})" if k in t else "-"


def overhead(t, k, fallback_base=None, stat="median"):
    base = k + " graph"
    if base in t:
        return t[k][stat] - t[base][stat]
    if fallback_base in t:
        return t[k][stat] - t[fallback_base][stat]
    return None


def fmt_overhead(t, k, fallback_base=None):
    """median-based (min-based): on a loaded machine the mins are the steadier"""
    o, m = overhead(t, k, fallback_base), overhead(t, k, fallback_base, "min")
    return "-" if o is None else f"{o:.1f} ({m:.1f})"


def report(results, meta):
    L = ["# Capture benchmark: wick vs Dynamo (backend=\"eager\") vs plain eager", "",
         f"Command: `{meta['command']}`", "",
         "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()), "",
         f"Per-call clock: {meta.get('clock', 'wall')} ({'CPU time of the benchmark thread' if meta.get('clock') == 'cpu' else 'wall clock'}); "
         "capture times are wall clock.", "",
         f"Per call: median over {meta['repeat']} interleaved rounds of {meta['number']} calls "
         "(min in parentheses), microseconds. Overhead: per call minus the captured graph called "
         "directly, medians (mins in parentheses), or minus plain eager where wick falls back.", ""]
    r = results["inputs100"]
    t, info = r["timings"], r["info"]
    L += ["## 100 tensor inputs, 10 cache entries (sum of 100 tensors of 1..10 elements)", "",
          "| | same shape | round-robin, 10 shapes | graph called directly | overhead (same shape) | graphs | notes |",
          "|---|---|---|---|---|---|---|",
          f"| plain eager | {us(t, 'plain eager')} | | | | | |"]
    for k in ("wick", "wick_eagerbackend", "dynamo_eager"):
        i = info[k]
        if k.startswith("wick"):
            notes = f"{i['entries']} entries, {i['guards_per_entry']} guards each"
            if i["eager_entries"]:
                notes += f"; {i['eager_entries']} EAGER: " + "; ".join(i["fallback_reasons"])
        else:
            notes = f"{i['graph_breaks']} graph breaks"
        L.append(f"| {k} | {us(t, k)} | {us(t, k + ' rr')} | {us(t, k + ' graph')} | "
                 f"{fmt_overhead(t, k)} | {i['graphs']} | {notes} |")
    titles = {"flat12": "12-layer transformer-like stack in ops wick captures (48 parameters; x: 8x64)",
              "linear12": "12 x (LayerNorm, Linear, ReLU, residual) nn.Modules in a ModuleList (x: 8x64)"}
    for case in ("flat12", "linear12"):
        r = results[case]
        t, info = r["timings"], r["info"]
        L += ["", f"## {titles[case]}", "",
              "| | per call | graph called directly | overhead | capture (first call), ms | graphs | notes |",
              "|---|---|---|---|---|---|---|",
              f"| plain eager | {us(t, 'plain eager')} | | | | | |"]
        for k in ("wick", "wick_eagerbackend", "dynamo_eager"):
            i = info[k]
            if k.startswith("wick"):
                notes = f"{i['guards_per_entry']} guards"
                if i["graphs"] == 0:
                    notes = "RUNS EAGERLY (wick fell back): " + "; ".join(i["fallback_reasons"])
            else:
                notes = f"{i['graph_breaks']} graph breaks"
            L.append(f"| {k} | {us(t, k)} | {us(t, k + ' graph')} | {fmt_overhead(t, k, 'plain eager')} | "
                     f"{i['capture_s'] * 1e3:.1f} | {i['graphs']} | {notes} |")
    if "models" in results:
        L += ["", "## transformers models (tiny configs of tests/capture/test_models.py; first call = capture)", "",
              "Capture: first call minus one plain call, ms (median of 3 fresh captures; the first capture ratio uses the first of them only). Graphs: compiled "
              "graphs (0 = the frame ran eagerly). Per call: median, us, next to plain eager. The capture "
              "ratio compares like with like: wick's capture with the eager backend against Dynamo with "
              "the eager backend (wick's own backend adds C compilation, and for training AOTAutograd "
              "and the compilation of forward and backward graphs).", "",
              "| model | mode | wick capture ms | wick_eagerbackend capture ms | dynamo capture ms | "
              "capture ratio wick_eagerbackend / dynamo | first capture ratio | graphs wick / dynamo | per call wick / wick_eagerbackend / dynamo / eager, us | notes |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        for name, row in results["models"].items():
            for mode in ("inference", "training"):
                w, we, d = row["wick"][mode], row["wick_eagerbackend"][mode], row["dynamo_eager"][mode]
                notes = ("wick RUNS EAGERLY (its capture time is the time to give up): " +
                         "; ".join(w["fallback_reasons"])[:160]) if not w["graphs"] else ""
                L.append(f"| {name} | {mode} | {w['capture_s'] * 1e3:.1f} | {we['capture_s'] * 1e3:.1f} | "
                         f"{d['capture_s'] * 1e3:.1f} | {we['capture_s'] / d['capture_s']:.3f} | "
                         f"{first_ratio(we, d)} | "
                         f"{w['graphs']} / {d['graphs']} | {w['per_call_us']:.0f} / {we['per_call_us']:.0f} / "
                         f"{d['per_call_us']:.0f} / {w['eager_us']:.0f} | {notes} |")
    L += ["", "wick = wick's capture and compiler; wick_eagerbackend = wick's capture, graph run by "
          "torch ops (FX, Dynamo's \"eager\" backend); dynamo_eager = torch.compile(backend=\"eager\"). "
          "Capture time for the wick backend includes generating and compiling C (the compiled "
          "artifact is cached on disk, so repeated runs mostly hit the cache)."]
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--number", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="few calls (smoke test)")
    ap.add_argument("--models", default="all", help="comma list of transformers models, 'all' or 'none'")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="per-call clock: wall (perf_counter) or cpu (this thread's CPU time: steadier when "
                         "other processes share the cores; capture times stay wall-clock)")
    ap.add_argument("--fresh-process", action="store_true",
                    help="cold capture only: each model's first capture in a fresh process, wick vs Dynamo "
                         "(no per-call timing)")
    ap.add_argument("--cold-child", nargs=3, metavar=("MODEL", "VARIANT", "MODE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.cold_child:
        cold_child(*a.cold_child)
        return
    if a.fresh_process:
        meta = {"command": " ".join(["python"] + sys.argv), "versions": versions()}
        results = bench_models_cold(None if a.models in ("all", "none") else a.models.split(","))
        text = report_cold(results, meta)
        print(text)
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, "results.json"), "w") as fh:
                json.dump({"meta": meta, "results": results}, fh, indent=1, default=str)
            with open(os.path.join(a.out, "report.md"), "w") as fh:
                fh.write(text)
        return
    global CLOCK
    CLOCK = time.thread_time if a.clock == "cpu" else time.perf_counter
    number, repeat = (20, 3) if a.quick else (a.number, a.repeat)
    meta = {"command": " ".join(["python"] + sys.argv), "versions": versions(), "number": number,
            "repeat": repeat, "clock": a.clock}
    results = {"inputs100": bench_inputs100(number, repeat),
               "flat12": bench_module("flat12", make_flat12, torch.randn(8, 64), number, repeat),
               "linear12": bench_module("linear12", make_linear12, torch.randn(8, 64), number, repeat)}
    if a.models != "none":
        results["models"] = bench_models(max(number // 20, 3), repeat,
                                         None if a.models == "all" else a.models.split(","))
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
