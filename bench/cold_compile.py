"""One cold compile through torch.compile, set up as a benchmark row does it, with its phases timed.

    python bench/cold_compile.py --model BertForMaskedLM --mode inference [--compiler wick|inductor]
                                 [--profile out.prof] [--json out.json]

Run it in a fresh process each time: it points WICK_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR at new
empty folders before torch is imported (as wick/bench's parent does for a row), does the row's
setup (imports, building the model, two eager runs), then times the first compiled call minus a
steady call (the row's "cold s"). Phases (wall and this process's CPU; the C compiler's children
counted apart): the whole first call; inside it AOTAutograd (wick_backend's aot call) and, inside
that, wick's own compile of each ATen graph (importer + C pipeline + cc); the rest of the first call
is Dynamo (bytecode tracing, guards) and the step around the compiled code.
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
ap.add_argument("--compiler", default="wick", choices=("wick", "inductor"))
ap.add_argument("--floor", choices=("", "aot", "dynamo"), default="",
                help="aot: wick's compile of each ATen graph replaced by running that graph as it is (what is left is "
                     "Dynamo + AOTAutograd with wick's decompositions); dynamo: torch.compile(backend='eager'), Dynamo alone")
ap.add_argument("--profile", default="")
ap.add_argument("--json", default="")
args = ap.parse_args()

tmp = os.environ.get("COLD_DIR") or tempfile.mkdtemp(prefix="coldc-")
for var in ("WICK_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
    os.environ[var] = os.path.join(tmp, var.lower())

# COLD_REPO: another checkout's wick (a before/after comparison with the same script)
sys.path.insert(0, os.environ.get("COLD_REPO") or os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch  # noqa: E402

torch.set_num_threads(1)
from wick.bench import compilers as C  # noqa: E402
from wick.bench import models as M  # noqa: E402

comp = C.get("dynamo+wick" if args.compiler == "wick" else "inductor")
comp.setup()
spec = next(s for s in M.load_suite("huggingface") if s.name == args.model)
torch.manual_seed(0)
built = M.build(spec, spec.batch_for("cpu"), "cpu")
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
        def as_is(gm, example_inputs, which, bindings=None):
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


def runner_for(fwd, module):
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

for _ in range(2):
    m = copy.deepcopy(model)
    r = runner_for(m, m)
    r()
    r()
comp.begin()
mc = copy.deepcopy(model)
prof = None
if args.profile:
    import cProfile

    prof = cProfile.Profile()
w0, c0, ch0 = time.perf_counter(), time.process_time(), os.times()
if prof:
    prof.enable()
run = runner_for(comp.compile(mc), mc)
run()
if prof:
    prof.disable()
first = time.perf_counter() - w0
cpu = time.process_time() - c0
ch1 = os.times()
children = (ch1.children_user + ch1.children_system) - (ch0.children_user + ch0.children_system)
steady = []
for _ in range(3):
    t = time.perf_counter()
    run()
    steady.append(time.perf_counter() - t)
cold = max(first - min(steady), 0.0)
out = {"model": args.model, "mode": args.mode, "compiler": args.compiler + (f"/floor-{args.floor}" if args.floor else ""), "cold_s": round(cold, 3),
       "first_call_s": round(first, 3), "cpu_s": round(cpu, 3), "children_cpu_s": round(children, 3),
       "load": os.getloadavg()[0],
       "phases": {k: {"n": v[0], "wall_s": round(v[1], 3), "cpu_s": round(v[2], 3), "children_cpu_s": round(v[3], 3)}
                  for k, v in phases.items()}}
if prof:
    prof.dump_stats(args.profile)
print(json.dumps(out))
if args.json:
    with open(args.json, "a") as f:
        f.write(json.dumps(out) + "\n")
sys.stdout.flush()
os._exit(0)
