"""One cold compile through torch.compile, set up as a benchmark row does it, with its phases timed.

    python bench/cold_compile.py --model BertForMaskedLM --mode inference [--compiler wick|wick-own|inductor]
                                 [--device cpu|cuda] [--suite huggingface|timm] [--profile out.prof] [--torch-profile ops.txt] [--json out.json]

--device cuda: the row as the H200's benchmark runs it (the suite's CUDA batch, bf16 autocast), with the Triton
phases timed: compile_batch (a graph's kernels compiled in parallel for its first call) and the jobs sent to it; the
autotuning candidates compile in the background and are counted apart, and "tuned_s" is when the first call after
they finished (which times them) returned, from the start of the first call. "triton_timeline" says what the first
call waited on: when the compile processes started and were ready, when each batch was sent (a backward's is sent
early, at SOON urgency), and every first-call job's compile (wick._triton.job_log), the slowest named.

--compiler wick: torch.compile(model, backend="wick") (Dynamo + AOTAutograd + wick's compiler; the row's
"dynamo+wick"); wick-own: wick.compile(model) (wick's own C capture; inference graphs go to wick's native
runtime, grad-mode graphs to wick's own autodiff (wick/_autodiff.py; check["autodiff"] counts them), or, where
its rules do not cover a graph or WICK_AUTODIFF=aot, are exported to FX and compiled through AOTAutograd with
wick's compilers);
inductor: torch.compile(model).

Run it in a fresh process each time: it points WICK_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR at new
empty folders before torch is imported (as wick/bench's parent does for a row), does the row's
setup (imports, building the model, two eager runs), then times the first compiled call minus a
steady call (the row's "cold s"). Phases (wall and this process's CPU; the C compiler's children
counted apart): the whole first call; inside it AOTAutograd (wick_backend's aot call) and, inside
that, wick's own compile of each ATen graph (importer + C pipeline + cc); the rest of the first call
is Dynamo (bytecode tracing, guards) and the step around the compiled code.

wick-own phases: "frame compiles" (wick.stats()'s compile_time_s: capture plus the compile of each captured
graph, per frame), "compile_graph_with" (a grad-mode graph: export to FX, AOTAutograd, wick's compile of the
forward and backward graphs), inside it "to_fx", "wick_backend" (AOTAutograd incl. wick) and "wick compile"
(importer+pipeline+cc per ATen graph), and "wick C compile" (lower+codegen+cc of every graph, native or
through the importer, from WICK_LOG=perf's "compiled graph" lines). capture_s estimates the capture alone:
frame compiles minus compile_graph_with minus the natively compiled graphs' C compile.

Each row records what ran compiled ("check": graphs, breaks, fallback reasons, eager entries, the first
compiled result against eager's) and "pass": graphs > 0, no fallback, no eager entry, result equal to eager's
within 1e-3 (relative to its magnitude). A row that fell back is not a pass.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="BertForMaskedLM")
ap.add_argument("--mode", default="inference", choices=("inference", "training"))
ap.add_argument("--compiler", default="wick", choices=("wick", "wick-own", "inductor"),
                help="wick: torch.compile(backend='wick') (dynamo+wick); wick-own: wick.compile (wick's capture)")
ap.add_argument("--floor", choices=("", "aot", "dynamo"), default="",
                help="aot: wick's compile of each ATen graph replaced by running that graph as it is (what is left is "
                     "Dynamo + AOTAutograd with wick's decompositions); dynamo: torch.compile(backend='eager'), Dynamo alone")
ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                help="cuda: the model on the GPU under bf16 autocast, with the Triton phases timed (compile_batch: the "
                     "parallel compile of a graph's kernels and tuning candidates; compile_kernel: a compile in this "
                     "process; load_module: importing a generated module)")
ap.add_argument("--suite", default="huggingface", choices=("huggingface", "timm"))
ap.add_argument("--profile", default="")
ap.add_argument("--json", default="")
ap.add_argument("--torch-profile", default="",
                help="a file for torch.profiler's table of the first call's operators (CPU time, self first): where a "
                     "first call's time goes inside C calls that cProfile cannot see (an extern's first use)")
args = ap.parse_args()

tmp = os.environ.get("COLD_DIR") or tempfile.mkdtemp(prefix="coldc-")
for var in ("WICK_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
    os.environ[var] = os.path.join(tmp, var.lower())
if args.compiler == "wick-own":
    # "[wick:perf] compiled graph: ... 0.123s" for every graph wick compiles (read back after the first call)
    os.environ["WICK_LOG"] = ",".join(x for x in (os.environ.get("WICK_LOG", ""), "perf") if x)

# COLD_REPO: another checkout's wick (a before/after comparison with the same script)
sys.path.insert(0, os.environ.get("COLD_REPO") or os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch  # noqa: E402

if args.device == "cpu":
    torch.set_num_threads(1)
from wick.bench import compilers as C  # noqa: E402
from wick.bench import models as M  # noqa: E402

comp = C.get({"wick": "dynamo+wick", "wick-own": "wick", "inductor": "inductor"}[args.compiler])
comp.setup()
spec = next(s for s in M.load_suite(args.suite) if s.name == args.model)
torch.manual_seed(0)
built = M.build(spec, spec.batch_for(args.device), args.device)
model, inputs = built.model, built.inputs
train = args.mode == "training"
model.train(train)

phases = {}


def timed(name, fn):
    def wrap(*a, **k):
        w0, c0 = time.perf_counter(), time.process_time()
        ch0 = os.times()
        try:
            return fn(*a, **k)
        finally:
            ch1 = os.times()
            p = phases.setdefault(name, [0, 0.0, 0.0, 0.0])
            p[0] += 1
            p[1] += time.perf_counter() - w0
            p[2] += time.process_time() - c0
            p[3] += (ch1.children_user + ch1.children_system) - (ch0.children_user + ch0.children_system)
    return wrap


if args.compiler == "wick":
    import wick.backends as wb

    wb._compile_aten = timed("wick compile (importer+pipeline+cc)", wb._compile_aten)
    orig_aot = None
    import torch._dynamo.backends.common as common

    _orig_aot_autograd = common.aot_autograd

    def aot_autograd(**kw):
        return timed("aot (AOTAutograd incl. wick)", _orig_aot_autograd(**kw))

    common.aot_autograd = aot_autograd
    if args.floor == "aot":
        def as_is(gm, example_inputs, which, bindings=None, free_outputs=()):
            return gm, {"graph": which, "native": 0, "extern": 0, "views": 0, "externs": {}, "kernels": 0,
                        "layout": "as traced"}

        wb._compile_aten = timed("wick compile (importer+pipeline+cc)", as_is)
    elif args.floor == "dynamo":
        comp.backend = "eager"
    if hasattr(wb._C, "Graph"):
        G = wb._C.Graph
        try:
            G.compile = timed("  of which wick C pipeline+cc", G.compile)
        except (TypeError, AttributeError):
            pass
elif args.compiler == "wick-own":
    # patched names are looked up at call time: the C capture calls wick.backends.compile_graph_with, which
    # calls wick_backend and to_fx by their global names. Nothing is imported here that the first call would
    # import: AOTAutograd's modules (torch._functorch.partitioners, ...) are imported by the first grad-mode
    # graph, inside the timed call, as in the Dynamo rows (torch._dynamo itself is imported by transformers
    # before any row's first call: the row's check says so).
    import wick.backends as wb

    fx_spans = []  # stderr offsets (the log file's, during the first call) of each _compile_aten call

    def spanned(fn):
        def wrap(*a, **k):
            try:
                p0 = os.lseek(2, 0, os.SEEK_CUR)
            except OSError:
                p0 = None
            try:
                return fn(*a, **k)
            finally:
                if p0 is not None:
                    fx_spans.append((p0, os.lseek(2, 0, os.SEEK_CUR)))
        return wrap

    wb.compile_graph_with = timed("compile_graph_with (to_fx + AOTAutograd + wick)", wb.compile_graph_with)
    wb.to_fx = timed("  to_fx (export to FX)", wb.to_fx)
    wb.wick_backend = timed("  wick_backend (AOTAutograd incl. wick)", wb.wick_backend)
    # AOTAutograd compiles the backward graph lazily, at the first backward: outside compile_graph_with
    wb._compile_aten = spanned(timed("    wick compile (importer+pipeline+cc)", wb._compile_aten))
    import wick._autodiff as wa

    # wick's own autodiff (the default for grad-mode graphs): the rules and the forward's copy, then both
    # graphs' compile; its graphs' C compile lines count with the AOTAutograd graphs' (inside compile_graph_with)
    wa.differentiate = timed("  wick autodiff: differentiate (rules + forward copy)", wa.differentiate)
    wa.compile_training = spanned(timed("  wick autodiff: compile_training (differentiate + compiles)",
                                        wa.compile_training))


if args.device == "cuda":
    import wick._triton as wt

    _unwrapped_batch = wt.compile_batch
    _batch = timed("triton compile_batch (parallel compile of the first call's kernels)", wt.compile_batch)

    # batches not timed as a phase (they overlap the rest), counted by their level
    untimed = {wt.BACKGROUND: "  triton jobs compiled in the background (n: jobs)",  # autotuning candidates
               wt.SOON: "  triton jobs sent early (a backward's, compile_soon) (n: jobs)"}  # ahead of a first run

    def counted_batch(cache_dir, path, src_hash, jobs, arch, background=False, batch=None):
        level = wt.BACKGROUND if background else (batch.level if batch is not None else wt.FOREGROUND)
        label = untimed.get(level, "  triton jobs sent to compile_batch (n: jobs)")
        phases.setdefault(label, [0, float("nan"), float("nan"), float("nan")])[0] += len(jobs)
        run = _unwrapped_batch if level in untimed else _batch
        return run(cache_dir, path, src_hash, jobs, arch, background, batch)

    wt.compile_batch = counted_batch
    wt.compile_kernel = timed("triton compile_kernel (in this process: cache hit or a compile)", wt.compile_kernel)
    wt.load_module = timed("triton load_module (import of a generated module)", wt.load_module)


def triton_timeline(t_start, t_end):
    """What the first call's Triton compiles waited on, in seconds from the first call's start: when the compile
    processes were started and ready (Triton imported, one kernel compiled to warm up), each first-call batch's
    start (a graph's own, or a backward's sent early), and the jobs: how many, their summed and longest compile,
    when the last ended, and the slowest ones (kernel name and generated module) from wick._triton.job_log."""
    workers = wt._workers or None
    fg = [j for j in wt.job_log if j[3] != wt.BACKGROUND and j[4] < t_end]
    if not fg and workers is None:
        return None
    durs = sorted(((j[7] - j[6], j) for j in fg), key=lambda x: -x[0])
    rel = lambda t: round(t - t_start, 3)  # noqa: E731
    ready = sorted(workers.ready.values()) if workers else []
    return {
        "processes": len(workers.procs) if workers else 0,
        "processes_started_s": rel(workers.started) if workers else None,
        "processes_ready_s": [rel(ready[0]), rel(ready[len(ready) // 2]), rel(ready[-1])] if ready else None,
        "batches_started_s": sorted({rel(j[4]) for j in fg}),
        "jobs": len(fg), "jobs_compile_s_sum": round(sum(d for d, _ in durs), 3),
        "job_compile_s_max": round(durs[0][0], 3) if durs else None,
        "first_job_started_s": rel(min(j[6] for j in fg)) if fg else None,
        "last_job_ended_s": rel(max(j[7] for j in fg)) if fg else None,
        "slowest": [[j[0], os.path.basename(j[1]), j[3], round(d, 3), rel(j[6])] for d, j in durs[:12]],
        **jobs_per_kernel(fg),
    }


def jobs_per_kernel(jobs):
    """How the first call's jobs map onto distinct kernels (wick._triton.kernel_identity: a module's kernels that
    differ only by name are one), and for kernels compiled more than once, what differed between their jobs (the
    param types or the config), so that a kernel compiled twice in one call shows."""
    by_kernel = {}
    for j in jobs:
        ident = json.dumps(wt.kernel_identity(j[1], os.path.basename(j[1]), j[0]))
        by_kernel.setdefault(ident, []).append(j)
    repeated = [js for js in by_kernel.values() if len(js) > 1]
    examples = []
    for js in sorted(repeated, key=len, reverse=True)[:8]:
        examples.append({"names": sorted({j[0] for j in js})[:4], "modules": sorted({os.path.basename(j[1]) for j in js}),
                         "jobs": len(js), "configs": [json.dumps(j[9]) for j in js[:6]]})
    return {"distinct_kernels": len(by_kernel), "kernels_compiled_more_than_once": len(repeated),
            "repeated_examples": examples}


def runner_for(fwd, module):
    if args.device == "cuda":
        cpu_runner = _runner_for(fwd, module)

        def on_gpu():
            with torch.autocast("cuda", torch.bfloat16):
                out = cpu_runner()
            torch.cuda.synchronize()
            return out
        return on_gpu
    return _runner_for(fwd, module)


def _runner_for(fwd, module):
    if not train:
        def infer():
            with torch.no_grad():
                return M.call(fwd, inputs)
        return infer
    opt = torch.optim.SGD(module.parameters(), lr=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        out = M.call(fwd, {k: v.clone() for k, v in inputs.items()} if isinstance(inputs, dict) else inputs)
        loss = built.loss(out)
        loss.backward()
        opt.step()
        return loss
    return step


import copy  # noqa: E402


def floats(o):
    """The floating tensors of a result, in order (a loss, or a model output's fields)."""
    if isinstance(o, torch.Tensor):
        return [o.detach()] if o.is_floating_point() else []
    if hasattr(o, "to_tuple"):
        o = o.to_tuple()
    if isinstance(o, dict):
        o = list(o.values())
    if isinstance(o, (list, tuple)):
        return [t for x in o for t in floats(x)]
    return []


ref = None
for _ in range(2):
    m = copy.deepcopy(model)
    r = runner_for(m, m)
    out0 = r()
    if ref is None:
        ref = floats(out0)  # eager's first call of a fresh copy: what the first compiled call must give
    r()
comp.begin()
ngraphs0 = len(getattr(sys.modules.get("wick.backends"), "compiled_graphs", []))
dynamo_before = "torch._dynamo" in sys.modules
mc = copy.deepcopy(model)
prof = None
if args.profile:
    import cProfile

    prof = cProfile.Profile()
log_fd = saved_fd = None
if args.compiler == "wick-own":  # WICK_LOG=perf lines of the first call go to a file, read below
    sys.stderr.flush()
    log_fd = tempfile.TemporaryFile()
    saved_fd = os.dup(2)
    os.dup2(log_fd.fileno(), 2)
w0, c0, ch0 = time.perf_counter(), time.process_time(), os.times()
wall0 = time.time()  # the Triton compile processes' records are in wall-clock time
if prof:
    prof.enable()
tprof = None
if args.torch_profile:
    from torch.profiler import ProfilerActivity, profile as torch_profile

    tprof = torch_profile(activities=[ProfilerActivity.CPU])
    tprof.__enter__()
try:
    run = runner_for(comp.compile(mc), mc)
    out1 = run()
except BaseException:
    if log_fd is not None:  # the traceback and the log to the real stderr
        os.dup2(saved_fd, 2)
        log_fd.seek(0)
        sys.stderr.write(log_fd.read().decode(errors="replace"))
    raise
if prof:
    prof.disable()
if tprof is not None:
    tprof.__exit__(None, None, None)
first = time.perf_counter() - w0
cpu = time.process_time() - c0
ch1 = os.times()
children = (ch1.children_user + ch1.children_system) - (ch0.children_user + ch0.children_system)
if log_fd is not None:
    sys.stderr.flush()
    os.dup2(saved_fd, 2)
    os.close(saved_fd)
    log_fd.seek(0)
    raw = log_fd.read()
    lines, pos = [], 0
    for ln in raw.split(b"\n"):
        lines.append((pos, ln.decode(errors="replace")))
        pos += len(ln) + 1
    other = "\n".join(ln for _, ln in lines if ln and not ln.startswith("[wick:perf]"))
    if other:
        print(other, file=sys.stderr)
    perf = [(p, float(ln.rsplit(", ", 1)[1].split("s")[0])) for p, ln in lines
            if ln.startswith("[wick:perf] compiled graph:")]
    in_fx = [sec for p, sec in perf if any(a <= p < b for a, b in fx_spans)]
    native = [sec for p, sec in perf if not any(a <= p < b for a, b in fx_spans)]
    nan = float("nan")
    phases["wick C compile, all graphs (lower+codegen+cc, WICK_LOG=perf)"] = [len(perf), sum(s for _, s in perf), nan, nan]
    phases["  of which native-runtime graphs"] = [len(native), sum(native), nan, nan]
    # (graphs compiled inside compile_graph_with: AOTAutograd's, or wick autodiff's forward and backward)
    phases["  of which AOTAutograd graphs"] = [len(in_fx), sum(in_fx), nan, nan]
    tunes = [ln for _, ln in lines if ln.startswith("[wick:perf] autotune ")]
    phases["autotune timings (launches of candidates, WICK_LOG=perf)"] = [
        len(tunes), sum(float(ln.rsplit(": ", 1)[1].split()[0]) * 11e-6 for ln in tunes), nan, nan]
timeline = None
if args.device == "cuda":
    timeline = triton_timeline(wall0, wall0 + first)
got = floats(out1)
err = None
if ref and len(got) == len(ref):
    err = max(float((a.float() - b.float()).abs().max()) / (1.0 + float(b.float().abs().max())) for a, b in zip(got, ref))
tuned = None
if args.device == "cuda":  # the autotuning candidates compile in the background; the next call times them
    wt.wait_background()
    run()
    tuned = time.perf_counter() - w0
steady = []
for _ in range(3):
    t = time.perf_counter()
    run()
    steady.append(time.perf_counter() - t)
cold = max(first - min(steady), 0.0)
col = comp.collect()
check = {"graphs": col.get("graphs"), "breaks": col.get("breaks"), "fallbacks": col.get("fallbacks", [])[:10],
         "break_reasons": col.get("break_reasons", [])[:10], "rel_err_vs_eager": None if err is None else float(f"{err:.3g}"),
         "dynamo_imported_before_first_call": dynamo_before}
wbm = sys.modules.get("wick.backends")
if args.compiler != "inductor" and wbm is not None:
    new = wbm.compiled_graphs[ngraphs0:]
    check["aten_graphs"] = [g.get("graph") for g in new]
if args.compiler == "wick-own":
    import wick

    st = wick.stats()
    ents = wick._entries(wick._compiled_codes)
    check["entries"] = len(ents)
    check["eager_entries"] = sum(1 for e in ents if e.get("eager") or e.get("reason"))
    check["via_fx_entries"] = sum(1 for e in ents if e.get("via_fx"))
    check["hook"] = {k: st["hook"].get(k) for k in ("compiles", "eager_runs", "graph_errors")}
    # grad-mode graphs: how many wick's own autodiff took, how many went to AOTAutograd (and why)
    check["autodiff"] = st.get("autodiff")
    fc = st.get("compile_time_s") or 0.0
    phases["frame compiles (capture + graph compiles, wick.stats)"] = [len(ents), fc, float("nan"), float("nan")]
ok = bool(check["graphs"]) and not check["fallbacks"] and not check.get("eager_entries") and \
    (err is not None and err <= 1e-3)
if args.compiler == "wick-own":
    ok = ok and not check["hook"].get("eager_runs") and not check["hook"].get("graph_errors")
    fx = phases.get("compile_graph_with (to_fx + AOTAutograd + wick)", [0, 0.0])[1]
    native = phases["  of which native-runtime graphs"][1]
    # capture alone: the frame compiles' time less what compiling their graphs took (a lazily compiled
    # backward graph is outside both)
    phases["capture (frame compiles - graph compiles)"] = [len(ents), fc - fx - native, float("nan"), float("nan")]
if args.floor:
    ok = None  # a floor row runs the graphs as traced (or Dynamo alone): not a compiled run to pass or fail
check["pass"] = ok


def r3(x):
    return None if x != x else round(x, 3)  # NaN: not measured


out = {"model": args.model, "mode": args.mode, "compiler": args.compiler + (f"/floor-{args.floor}" if args.floor else ""), "cold_s": round(cold, 3),
       "first_call_s": round(first, 3), "tuned_s": None if tuned is None else round(tuned, 3), "steady_s": round(min(steady), 4), "cpu_s": round(cpu, 3), "children_cpu_s": round(children, 3),
       "load": os.getloadavg()[0], "pass": ok, "check": check, "triton_timeline": timeline,
       "phases": {k: {"n": v[0], "wall_s": r3(v[1]), "cpu_s": r3(v[2]), "children_cpu_s": r3(v[3])}
                  for k, v in phases.items()}}
if prof:
    prof.dump_stats(args.profile)
if tprof is not None:
    with open(args.torch_profile, "w") as f:
        f.write(tprof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40, max_name_column_width=70))
print(json.dumps(out))
if args.json:
    with open(args.json, "a") as f:
        f.write(json.dumps(out) + "\n")
sys.stdout.flush()
os._exit(0)
