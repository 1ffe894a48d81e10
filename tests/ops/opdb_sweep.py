"""Op sweep: every op of torch's own op database (op_db), every sample input,
run through torch.compile(fn, backend="wick") and compared with eager.

Per op and dtype, each sample counts as one of:
  pass      wick compiled every graph natively (no extern call into ATen) and
            the result matches eager
  extern    wick compiled it, with some ops as extern calls into PyTorch's own
            kernels (correct, not native: counted apart, never as pass)
  wrong     wick compiled it and the result differs from eager (must be 0)
  fallback  some graph ran eagerly because wick declined it (reason recorded)
  error     torch.compile itself raised (dynamo, or wick raising where eager did not)
  nograph   dynamo handed wick no graph (nothing to compile: not counted as compiled)
Samples where eager raises, or gives different results on two runs (random
ops), are skipped and not counted.

Dtypes: float32, plus one 16-bit (bfloat16, else float16) and one integer
(int64, else int32) dtype where the op supports them.

Full sweep (writes the baseline the test compares with):
    python tests/ops/opdb_sweep.py --jobs 2 --write tests/ops/opdb_baseline.json
Options: --ops a,b,c  only these ops; --max-samples N per op and dtype (0: all);
--inductor  also run inductor on the same samples (slow), for "wick passes X%
of the samples inductor passes"; --jobs N  N worker processes, one op at a
time each (load-balanced: a slow op does not hold back a whole share);
--shard i/n  only every n-th op from the i-th (shards run on separate
machines or one after another); --merge a.json b.json ...  combine shard
results (and runs of --ops) into one document (later files win per op),
written with --write. Nothing is fetched from the network: the op database
and the compilers are local.

On a 16-core machine (the H200 host), the inductor comparison in one run:
    python tests/ops/opdb_sweep.py --jobs 14 --inductor --write opdb_inductor.json
or in shards (each shard a separate process or machine), then merged:
    python tests/ops/opdb_sweep.py --jobs 7 --inductor --shard 0/2 --write s0.json
    python tests/ops/opdb_sweep.py --jobs 7 --inductor --shard 1/2 --write s1.json
    python tests/ops/opdb_sweep.py --merge s0.json s1.json --write opdb_inductor.json

CUDA (--device cuda): samples made on the GPU and compared with eager on the
GPU, with the same tolerances and outcomes; wick's graphs there are Triton
kernels (a sample whose graph wick ran eagerly is a fallback, never a pass).
Worker processes are spawned, never forked (a fork of a process that has
initialised CUDA cannot use it), and with --jobs > 1 each compiles its Triton
and inductor kernels in its own process (no compile pool per worker: 14
workers x 16 compile processes would swamp 16 cores). A worker whose CUDA
context an op breaks (a device-side assert is sticky) reports that op as a
sweep_error and sweeps nothing more; the ops it was given are rerun in fresh
workers. The result file names the device, mode, GPU, torch, triton and
CUDA versions, and the command.
--budget S: stop after S seconds of wall time; the ops not finished are
listed under "unfinished" (the cheapest ops, by the CPU baseline's times, go
first, so a cut leaves out the fewest), and --unfinished-of FILE sweeps just
those later. Samples of the CUDA and interpreter forms come from a fixed seed
(torch.manual_seed(0) per op and dtype, so a finding reproduces and a
baseline compares sample by sample); the CPU sweep's are unseeded, as before.

The full CUDA sweep with the inductor comparison, on the H200 host (16 cores,
1 GPU, Python 3.12), writing the baseline tests/gpu/test_opdb_sweep_gpu.py
compares with (2 samples per op and dtype, as that test takes). The first
sweep stops within 8 minutes wall (420 s budget + start-up); should its file
list "unfinished" ops, the second, another 8 minutes at most, sweeps those
and merges them in:
    make build
    S="python tests/ops/opdb_sweep.py --device cuda --jobs 14 --max-samples 2 --inductor --budget 420"
    B=tests/ops/opdb_baseline_cuda.json
    $S --write $B
    if grep -q '"unfinished"' $B; then
        $S --unfinished-of $B --write /tmp/rest.json && python tests/ops/opdb_sweep.py --merge $B /tmp/rest.json --write $B
    fi
    python -m pytest -q tests/gpu/test_opdb_sweep_gpu.py

--triton-interpret (CPU only): the same sweep with wick emitting Triton for
CPU tensors, run by Triton's interpreter (TRITON_INTERPRET=1
WICK_TRITON=interpret, which the sweep sets itself before triton is
imported): the CUDA form's code path (the Triton codegen, the Triton
runtime's launches) on a machine without a GPU, e.g.
    python tests/ops/opdb_sweep.py --triton-interpret --max-samples 2 --ops add,sum,softmax
(tests/ops/opdb_triton_interpret.json: the whole op_db that way, 6 samples,
--jobs 2, about half an hour on two cores).
The interpreter rounds float32 -> bfloat16 toward zero where a GPU rounds to
nearest even: bfloat16 results may differ from eager by one ulp there (within
the bfloat16 tolerance). Indirect loads (gather, embedding, index) are extern
calls on this target, as on CUDA by default.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

DEFAULT_MAX_SAMPLES = 6
OUTCOMES = ("pass", "extern", "wrong", "fallback", "error", "nograph")
LETTER = {"pass": "P", "extern": "E", "wrong": "W", "fallback": "F", "error": "X", "nograph": "N"}

# Ops whose results are uninitialised memory: nothing to compare.
UNINITIALISED = {"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided"}

# Results that are the random generator's state, not values (the attention
# kernels' philox seed and offset: at::empty, uninitialised, when dropout_p is
# 0; op_db marks these ops has_nondeterministic_output): left out of the
# comparison, the op's other results compared as usual.
RNG_STATE_ITEMS = {
    "torch.ops.aten._efficient_attention_forward": (2, 3),  # philox_seed, philox_offset
    "torch.ops.aten._flash_attention_forward": (2, 3),  # rng_state, unused
}

TOL = {  # (rtol, atol) by dtype name; libmvec is within 4 ulp, reductions add
    "float32": (1e-4, 1e-5), "float64": (1e-7, 1e-7),
    "bfloat16": (1.6e-2, 1e-2), "float16": (1e-3, 1e-3),
}


def _torch():
    import torch

    return torch


def sweep_dtypes(op, device="cpu"):
    torch = _torch()
    supported = op.supported_dtypes(device)
    out = []
    if torch.float32 in supported:
        out.append(torch.float32)
    for dt in (torch.bfloat16, torch.float16):
        if dt in supported:
            out.append(dt)
            break
    for dt in (torch.int64, torch.int32):
        if dt in supported:
            out.append(dt)
            break
    return out


def _flatten(value, tensors):
    torch = _torch()
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return ("__tensor__", len(tensors) - 1)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return ("__tuple__", [_flatten(v, tensors) for v in value])
    if isinstance(value, list):
        return ("__list__", [_flatten(v, tensors) for v in value])
    if isinstance(value, dict):
        return ("__dict__", {k: _flatten(v, tensors) for k, v in value.items()})
    return ("__const__", value)


def _rebuild(spec, ts):
    kind, v = spec
    if kind == "__tensor__":
        return ts[v]
    if kind == "__tuple__":
        return tuple(_rebuild(x, ts) for x in v)
    if kind == "__list__":
        return [_rebuild(x, ts) for x in v]
    if kind == "__dict__":
        return {k: _rebuild(x, ts) for k, x in v.items()}
    return v


def sample_fn(op, sample):
    """(fn, tensors): fn(*tensors) calls the op on the sample with every
    tensor of the sample passed as an argument (never a constant of the graph)."""
    tensors = []
    spec = _flatten((sample.input, tuple(sample.args), dict(sample.kwargs)), tensors)
    callee = op.op
    drop = RNG_STATE_ITEMS.get(op.name, ())

    def fn(*ts):
        inp, args, kwargs = _rebuild(spec, ts)
        out = callee(inp, *args, **kwargs)
        return tuple(v for i, v in enumerate(out) if i not in drop) if drop else out

    return fn, tensors


def _clone(ts):
    return [t.clone() for t in ts]


def _leaves(x, out):
    torch = _torch()
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _leaves(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _leaves(v, out)
    else:
        out.append(x)
    return out


def same(got, want):
    """None if equal within the dtype's tolerance, else a short reason."""
    torch = _torch()
    g, w = _leaves(got, []), _leaves(want, [])
    if len(g) != len(w):
        return f"{len(g)} results, eager {len(w)}"
    for a, b in zip(g, w):
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"{type(a).__name__} where eager gives a tensor"
            if a.dtype != b.dtype or a.shape != b.shape:
                return f"{a.dtype}{list(a.shape)} vs eager {b.dtype}{list(b.shape)}"
            name = str(b.dtype).replace("torch.", "")
            rtol, atol = TOL.get(name, (0, 0))
            try:
                torch.testing.assert_close(a, b, rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
            except AssertionError as exc:
                return str(exc).strip().splitlines()[0][:200]
        elif a != b and not (a != a and b != b):
            return f"{a!r} vs eager {b!r}"
    return None


class Counting:
    """A torch.compile backend around wick's: counts graphs handed to wick,
    graphs (or parts) that wick ran eagerly, and extern calls in what it
    compiled (wick.backends.compiled_graphs records native/extern counts)."""

    def __init__(self):
        from wick import backends

        self.backends = backends
        self.graphs = self.fallbacks = 0
        self.reasons = []
        self.first_info = len(backends.compiled_graphs)
        self.first_reason = len(backends.fallback_reasons)

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        n = len(self.backends.fallback_reasons)
        fn = self.backends.wick_backend(gm, example_inputs)
        if len(self.backends.fallback_reasons) > n:
            self.fallbacks += 1
            self.reasons.extend(self.backends.fallback_reasons[n:])
        return fn

    def note_runtime_fallbacks(self):
        """Graphs that switched to eager while running (an extern whose output
        contradicted its metadata) count as fallbacks too."""
        later = self.backends.fallback_reasons[self.first_reason:]
        if len(later) > len(self.reasons):
            self.fallbacks += 1
            self.reasons = list(later)

    def externs(self):
        """{extern name: count} over the graphs wick compiled since creation."""
        out = {}
        for info in self.backends.compiled_graphs[self.first_info:]:
            for k, v in info.get("externs", {}).items():
                out[k] = out.get(k, 0) + v
        return out


def closer_to_float64(fn, ts, got, want):
    """For 16-bit float results (which wick computes in float32 without
    rounding between ops, as inductor does): whether wick's result is at
    least as close to a float64 reference as eager's, the rule PyTorch's own
    compiler benchmarks apply (torch._dynamo.utils.same with fp64_ref)."""
    torch = _torch()
    g, w = _leaves(got, []), _leaves(want, [])
    if not any(isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16) for t in w):
        return False
    try:
        ref = _leaves(fn(*[t.double() if t.is_floating_point() else t.clone() for t in ts]), [])
    except Exception:
        return False
    if len(ref) != len(w):
        return False
    for a, b, r in zip(g, w, ref):
        if not isinstance(b, torch.Tensor) or not isinstance(r, torch.Tensor) or a.shape != b.shape:
            return False
        if a.dtype != b.dtype:
            return False
        if not b.is_floating_point():
            if not torch.equal(a, b):
                return False
            continue
        fin = torch.isfinite(r)
        if not torch.equal(torch.isnan(a), torch.isnan(b)):
            return False
        ea = (a.double() - r).abs()[fin].max().item() if fin.any() else 0.0
        eb = (b.double() - r).abs()[fin].max().item() if fin.any() else 0.0
        if ea > max(2.0 * eb, 1e-5):
            return False
    return True


def run_sample(op, sample, inductor=False):
    """(outcome, detail) for wick, and inductor's outcome (or None)."""
    torch = _torch()
    if op.name in UNINITIALISED:
        return "skip", "uninitialised memory", None
    fn, ts = sample_fn(op, sample)
    try:
        want = fn(*_clone(ts))
        again = fn(*_clone(ts))
    except Exception:
        return "skip", "eager raises", None
    if same(again, want) is not None:
        return "skip", "eager is not deterministic", None
    torch._dynamo.reset()
    backend = Counting()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = torch.compile(fn, backend=backend)(*_clone(ts))
    except Exception as exc:
        outcome, detail = "error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    else:
        backend.note_runtime_fallbacks()
        ext = backend.externs()
        if backend.fallbacks:
            outcome, detail = "fallback", backend.reasons[0][:200]
        elif backend.graphs == 0:
            outcome, detail = "nograph", ""
        else:
            why = same(got, want)
            if why is not None and closer_to_float64(fn, ts, got, want):
                why = None
            if why is not None:
                outcome, detail = "wrong", why
            elif ext:
                outcome, detail = "extern", " ".join(sorted(ext))[:200]
            else:
                outcome, detail = "pass", ""
    ind = None
    if inductor:
        torch._dynamo.reset()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = torch.compile(fn, backend="inductor")(*_clone(ts))
            ind = "pass" if same(got, want) is None or closer_to_float64(fn, ts, got, want) else "wrong"
        except Exception:
            ind = "error"
    return outcome, detail, ind


def op_key(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def sweep_op(op, max_samples=DEFAULT_MAX_SAMPLES, inductor=False, device="cpu", seed=None):
    """{dtype: {outcome: count, ..., "details": [...]}} for one OpInfo.
    device: where the samples are made (and eager and wick run); seed: the
    random state the samples of each dtype are made from (None: as it is)."""
    torch = _torch()
    result = {}
    for dt in sweep_dtypes(op, device):
        counts = {k: 0 for k in OUTCOMES}
        if inductor:
            counts.update({"inductor_pass": 0, "both_pass": 0})
        details = []
        letters = []  # one letter per sample, in order: P E W F X N, or - (skipped)
        if seed is not None:
            torch.manual_seed(seed)
        try:
            samples = list(op.sample_inputs(device, dt, requires_grad=False))
        except Exception as exc:
            result[str(dt).replace("torch.", "")] = {"sample_error": str(exc)[:200]}
            continue
        if max_samples:
            samples = samples[:max_samples]
        for k, sample in enumerate(samples):
            outcome, detail, ind = run_sample(op, sample, inductor)
            letters.append(LETTER.get(outcome, "-"))
            if outcome == "skip":
                continue
            counts[outcome] += 1
            if inductor and ind == "pass":
                counts["inductor_pass"] += 1
                counts["both_pass"] += outcome == "pass"
            if outcome in ("wrong", "error") or (outcome in ("fallback", "extern") and len(details) < 3):
                details.append(f"sample {k}: {outcome}: {detail}")
        counts["samples"] = "".join(letters)
        counts["details"] = details[:6]
        result[str(dt).replace("torch.", "")] = counts
    return result


def all_ops():
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def select(ops, names):
    if not names:
        return ops
    wanted = set(names)
    return [op for op in ops if op_key(op) in wanted or op.name in wanted]


INTERPRET_ENV = {"TRITON_INTERPRET": "1", "WICK_TRITON": "interpret"}


def interpreting():
    """Whether this process runs wick's Triton kernels in Triton's interpreter."""
    return all(os.environ.get(k) == v for k, v in INTERPRET_ENV.items())


def enter_interpret_mode():
    """Turns on the Triton interpreter form for this process and the workers
    it spawns. Triton reads TRITON_INTERPRET when it is imported, so this
    must come before anything imports triton (a test runs the sweep in a
    child process for that reason)."""
    if "triton" in sys.modules and not interpreting():
        raise RuntimeError("--triton-interpret: triton is already imported without TRITON_INTERPRET=1; "
                           "run the sweep in a fresh process")
    os.environ.update(INTERPRET_ENV)
    if "wick._C" in sys.modules:
        sys.modules["wick._C"].env_reload()


def sample_seed(device):
    """The seed samples are made from: fixed for the CUDA and interpreter
    forms (a wrong result found there can be reproduced); the CPU sweep's
    samples come from whatever state the generator is in, as they always have."""
    return 0 if device != "cpu" or interpreting() else None


# set in a worker whose CUDA context an op broke (a device-side assert is
# sticky: every later CUDA call of the process fails, and eager's failures
# would read as skipped samples); that worker sweeps nothing more
_cuda_lost = []

LOST = "CUDA context lost"


def _cuda_broken(torch):
    """The error a CUDA call raises now, or None."""
    try:
        torch.cuda.synchronize()
        torch.ones(1, device="cuda").add_(1).item()
    except Exception as exc:  # noqa: BLE001 - any failure means the context is unusable
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    return None


def _worker(args):
    """args: (op keys, max_samples, inductor[, device]); results by op key.
    An op that leaves CUDA broken gets a sweep_error; the ops after it in the
    same worker are returned unswept, marked with LOST (run_ops reruns them
    in fresh workers)."""
    names, max_samples, inductor = args[:3]
    device = args[3] if len(args) > 3 else "cpu"
    import torch

    torch.set_num_threads(1)
    import wick  # noqa: F401  (registers the backend)

    if interpreting():
        wick._C.env_reload()  # WICK_TRITON as this process has it now
    out = {}
    wanted = set(names)  # exact op keys (main expands names to keys)
    for op in [op for op in all_ops() if op_key(op) in wanted]:
        if _cuda_lost:
            out[op_key(op)] = {"sweep_error": f"{LOST} by {_cuda_lost[0]} before this op"}
            continue
        t0 = time.time()
        try:
            out[op_key(op)] = sweep_op(op, max_samples, inductor, device, sample_seed(device))
        except Exception as exc:  # the sweep itself must not stop on one op
            out[op_key(op)] = {"sweep_error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        out[op_key(op)]["seconds"] = round(time.time() - t0, 2)
        broken = _cuda_broken(torch) if device == "cuda" else None
        if broken:
            _cuda_lost.append(op_key(op))
            out[op_key(op)]["sweep_error"] = f"{LOST} after this op (its results are suspect): {broken}"
    return out


def totals(results):
    t = {k: 0 for k in OUTCOMES + ("inductor_pass", "both_pass")}
    for per_op in results.values():
        for dt, c in per_op.items():
            if isinstance(c, dict):
                for k in t:
                    t[k] += c.get(k, 0)
    return t


# what a result file says about where it was measured (besides "torch")
ENVIRONMENT_KEYS = ("device", "mode", "gpu", "triton", "cuda")


def environment(device):
    """Where the sweep ran: device, mode (native kernels or Triton's
    interpreter), GPU name, triton and CUDA versions (None where absent)."""
    torch = _torch()
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    gpu = None
    if device == "cuda" and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(torch.cuda.current_device())
    return {"device": device, "mode": "triton-interpret" if interpreting() else "native", "gpu": gpu,
            "triton": triton_version, "cuda": torch.version.cuda}


def merge(paths, write=""):
    """One document from several result files (shards, or --ops reruns over
    a full run): per-op results of later files replace earlier ones."""
    results, docs = {}, []
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        docs.append(doc)
        results.update(doc["results"])
    results = {k: results[k] for k in sorted(results)}
    kinds = {(d.get("device", "cpu"), d.get("mode", "native")) for d in docs}
    if len(kinds) > 1:
        raise SystemExit(f"--merge: the files were measured on different devices or modes: {sorted(kinds)}")
    # an op left unfinished in one file and swept in another is finished
    unfinished = sorted({k for d in docs for k in d.get("unfinished", ())} - set(results))
    out = {
        "torch": docs[-1].get("torch"), "max_samples": docs[-1].get("max_samples"), "ops": len(results),
        "seconds": round(sum(d.get("seconds", 0) for d in docs), 1), "totals": totals(results),
        "merged_from": [os.path.basename(p) for p in paths], "results": results,
    }
    for k in ENVIRONMENT_KEYS:
        if k in docs[-1]:
            out[k] = docs[-1][k]
    if unfinished:
        out["unfinished"] = unfinished
    print(json.dumps(out["totals"]), f"{out['ops']} ops merged from {len(paths)} files")
    if write:
        with open(write, "w") as f:
            json.dump(out, f, indent=1, sort_keys=False)
            f.write("\n")
    return out


def cpu_seconds(keys):
    """Each op's time in the CPU baseline (a guess at its cost elsewhere;
    ops it lacks count as average)."""
    try:
        with open(os.path.join(HERE, "opdb_baseline.json")) as f:
            base = json.load(f)["results"]
    except (OSError, ValueError, KeyError):
        base = {}
    known = [r.get("seconds", 0) for r in base.values()]
    mean = sum(known) / len(known) if known else 1.0
    return {k: base.get(k, {}).get("seconds", mean) for k in keys}


def report_bad(part):
    """Prints (stderr) the ops of `part` with a wrong result, an error or a
    sweep error as they finish: a long run shows its problems early."""
    for key, per_op in part.items():
        bad = [f"{dt} {c['samples']} {c['details']}" for dt, c in per_op.items()
               if isinstance(c, dict) and (c.get("wrong") or c.get("error"))]
        if "sweep_error" in per_op:
            bad.append(per_op["sweep_error"])
        if bad:
            print(f"[opdb_sweep] {key}: " + " | ".join(bad), file=sys.stderr, flush=True)


def run_ops(keys, max_samples, inductor, device, jobs, budget=0.0):
    """{op key: result} for the ops finished, and the keys left unfinished
    when the budget (seconds of wall time, 0: none) ran out."""
    t0 = time.time()
    left = lambda: budget - (time.time() - t0) if budget else None  # noqa: E731
    if budget:  # cheapest first: a cut leaves out the fewest ops
        cost = cpu_seconds(keys)
        keys = sorted(keys, key=lambda k: cost[k])
    results = {}
    if jobs <= 1:
        for k in keys:
            if budget and left() <= 0:
                break
            part = _worker(([k], max_samples, inductor, device))
            report_bad(part)
            results.update(part)
        return results, [k for k in keys if k not in results]
    import multiprocessing as mp

    # one op per task (imap_unordered keeps every worker busy until the
    # last op); spawn, never fork: a forked child of a process that has
    # initialised CUDA cannot use it
    for _ in range(3):  # ops a broken CUDA context left unswept get fresh workers
        todo = [k for k in keys if k not in results or results[k].get("sweep_error", "").startswith(LOST + " by")]
        if not todo or (budget and left() <= 0):
            break
        tasks = [([k], max_samples, inductor, device) for k in todo]
        pool = mp.get_context("spawn").Pool(min(jobs, len(tasks)))
        cut = True
        try:
            parts = pool.imap_unordered(_worker, tasks)
            for _ in tasks:
                try:
                    part = parts.next(timeout=max(left(), 0.001)) if budget else parts.next()
                except mp.TimeoutError:
                    break
                report_bad(part)
                results.update(part)
            else:
                cut = False
        finally:
            if cut:  # the budget ran out (or an error): stop the ops in flight
                pool.terminate()
            else:
                pool.close()
            pool.join()
    return results, [k for k in keys if k not in results]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="", help="comma-separated op names (default: all of op_db)")
    p.add_argument("--max-samples", type=int, default=DEFAULT_MAX_SAMPLES)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--shard", default="", help="i/n: run only every n-th op from the i-th")
    p.add_argument("--inductor", action="store_true")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--triton-interpret", action="store_true",
                   help="CPU tensors through wick's Triton backend, run by Triton's interpreter")
    p.add_argument("--budget", type=float, default=0.0, help="stop after this many seconds (0: no limit)")
    p.add_argument("--unfinished-of", default="", help="sweep only the ops this result file left unfinished")
    p.add_argument("--write", default="", help="write the results (JSON) here")
    p.add_argument("--merge", nargs="+", default=[], help="combine these result files (later ones win per op)")
    a = p.parse_args(argv)
    if a.merge:
        return merge(a.merge, a.write)
    if a.triton_interpret:
        if a.device != "cpu":
            p.error("--triton-interpret runs on the CPU (Triton's interpreter takes CPU tensors)")
        enter_interpret_mode()
    if a.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            p.error("--device cuda: no CUDA device here (--triton-interpret runs the same Triton code on the CPU)")
    if a.jobs > 1 and a.device == "cuda":
        # each worker compiles in its own process: no compile pools per
        # worker (jobs x cores processes); a caller's own settings stay
        os.environ.setdefault("WICK_TRITON_COMPILE_PROCS", "0")
        os.environ.setdefault("WICK_TRITON_COMPILE_THREADS", "2")
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    names = [n for n in a.ops.split(",") if n]
    ops = select(all_ops(), names)
    keys = [op_key(op) for op in ops]
    if a.unfinished_of:
        with open(a.unfinished_of) as f:
            left = set(json.load(f).get("unfinished", ()))
        keys = [k for k in keys if k in left]
    if a.shard:
        i, n = (int(x) for x in a.shard.split("/"))
        keys = keys[i::n]
    t0 = time.time()
    results, unfinished = run_ops(keys, a.max_samples, a.inductor, a.device, a.jobs, a.budget)
    results = {k: results[k] for k in sorted(results)}
    import torch

    doc = {
        "torch": torch.__version__, "max_samples": a.max_samples, "ops": len(results),
        "seconds": round(time.time() - t0, 1), "totals": totals(results), "results": results,
    }
    if a.device != "cpu" or a.triton_interpret:
        # ahead of the results (long): what was measured where
        doc = {"torch": doc.pop("torch"), **environment(a.device), **doc}
        doc["command"] = "python tests/ops/opdb_sweep.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if unfinished:
        doc["unfinished"] = sorted(unfinished)
    print(json.dumps(doc["totals"]), f"{doc['ops']} ops in {doc['seconds']}s"
          + (f", {len(unfinished)} left unfinished by the budget" if unfinished else ""))
    if a.write:
        with open(a.write, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=False)
            f.write("\n")
    return doc


if __name__ == "__main__":
    main()
