"""Models on CUDA in one process, eager vs inductor vs wick, with wick's host
time per phase (helper gpu10, issue 9).

    python bench/host_ab.py MODELS [VARIANTS] [MODE]

MODELS: comma list of suite:name (suite timm or huggingface, the rows of
bench/suites/<suite>.txt: their CUDA batch sizes and options), e.g.
timm:mobilenetv3_large_100,huggingface:BertForMaskedLM. VARIANTS (default
eager,inductor,dynamo+wick,wick): eager | inductor (torch.compile) |
dynamo+wick (torch.compile(backend="wick")) | wick (wick.compile, wick's
capture) | dynamo+wick-ro and inductor-ro (mode="reduce-overhead": CUDA
graphs) | dynamo+wick-py and
wick-py (the same, compiled with WICK_NATIVE_EXTERNS=0: every extern call
through Python, the A/B of csrc/runtime/shim_ops.c) | wick-aot (wick.compile
with WICK_AUTODIFF=aot: training graphs through AOTAutograd instead of
wick's own autodiff) | wick-fx (wick.compile with WICK_LAYOUT_PASS=fx:
conv inference graphs through AOTAutograd and wick/_layout.py, not the
graph's own channels-last pass) | wick-ro (wick.compile,
mode="reduce-overhead"). MODE: inference
(default) or training (SGD step: forward, loss, backward, step).

bf16 autocast. Each variant runs on its own copy of the model; the first
call's time is its compile (cold in-process caches). Then 7 interleaved
rounds of 10 calls timed with CUDA events (median), the host's time to
enqueue 10 calls (perf_counter, no sync inside), torch.profiler's device
kernel time and count per call, and for wick variants wick's host time per
phase (WICK_HOST_PROFILE=1: CompiledGraph call, buffer allocation, launches,
extern calls, their output checks, views), per call. Relative error of the
output against eager's (whole output, float). PROFILE_TOP=N: each variant's
N kernels with the most device time. DEVICE=cpu runs the same on
the CPU (wall clock, no profiler): to try the script without a GPU."""
import contextlib
import copy
import os
import statistics
import sys
import time

os.environ.setdefault("WICK_HOST_PROFILE", "1")

import torch  # noqa: E402

DEVICE = os.environ.get("DEVICE", "cuda")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import wick  # noqa: E402
import wick._C as C  # noqa: E402
import wick.backends  # noqa: E402,F401  (compiled_graphs: each graph's externs)
from wick.bench import models as M  # noqa: E402


def spec_of(item):
    suite, name = item.split(":")
    for s in M.load_suite(suite):
        if s.name == name:
            return s
    raise SystemExit(f"{name} is not in bench/suites/{suite}.txt")


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "logits"):
        return out.logits
    if isinstance(out, dict):
        return next(v for v in out.values() if isinstance(v, torch.Tensor))
    if isinstance(out, (list, tuple)):
        return first_tensor(out[0])
    return out.loss


def runner(fn, module, built, train):
    inputs = built.inputs
    if not train:
        def infer():
            with torch.no_grad(), torch.autocast(DEVICE, dtype=torch.bfloat16):
                return M.call(fn, inputs)
        return infer
    opt = torch.optim.SGD(module.parameters(), lr=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            out = M.call(fn, inputs)
            loss = built.loss(out)
        loss.backward()
        opt.step()
        return loss
    return step


def compile_variant(v, m):
    if v == "dynamo+wick-py":
        # a backend object of its own: Dynamo's cache entries are per backend,
        # so this compiles anew instead of reusing "dynamo+wick"'s graphs
        def python_externs(gm, example_inputs):
            return wick.backends.wick_backend(gm, example_inputs)

        return torch.compile(m, backend=python_externs)
    v = v[:-3] if v.endswith("-py") else v
    if v == "eager":
        return m
    if v == "inductor":
        return torch.compile(m)
    if v == "inductor-ro":
        return torch.compile(m, mode="reduce-overhead")
    if v == "dynamo+wick":
        return torch.compile(m, backend="wick")
    if v == "dynamo+wick-ro":
        return torch.compile(m, backend="wick", mode="reduce-overhead")
    if v in ("wick", "wick-aot", "wick-fx"):
        return wick.compile(m)
    if v == "wick-ro":
        return wick.compile(m, mode="reduce-overhead")
    raise SystemExit(f"unknown variant {v}")


@contextlib.contextmanager
def variant_knobs(v):
    """The knobs a variant's graphs compile under (read when a graph is
    compiled: its first call, and its warm-up after another variant's
    wick.reset())."""
    knobs = {"-py": ("WICK_NATIVE_EXTERNS", "0"), "wick-aot": ("WICK_AUTODIFF", "aot"),
             "wick-fx": ("WICK_LAYOUT_PASS", "fx")}
    set_ = [kv for k, kv in knobs.items() if (v.endswith(k) if k.startswith("-") else v == k)]
    for name, value in set_:
        os.environ[name] = value
    C.env_reload()
    try:
        yield
    finally:
        for name, _ in set_:
            os.environ.pop(name, None)
        C.env_reload()


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed(fn, n=10):
    if DEVICE != "cuda":
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) * 1000 / n
    s, t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        fn()
    t.record()
    torch.cuda.synchronize()
    return s.elapsed_time(t) / n


def host_time(fn, n=10):
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    sync()
    return (t1 - t0) * 1000 / n


def device_time(fn, n=5):
    """(device ms per call, kernels per call, {kernel name: (ms, count) per call})."""
    if DEVICE != "cuda":
        return 0.0, 0, {}
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    total, count, by_name = 0.0, 0, {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total += e.device_time
            count += 1
            t, c = by_name.get(e.name, (0.0, 0))
            by_name[e.name] = (t + e.device_time / n / 1000.0, c + 1 / n)
    return total / n / 1000.0, count / n, by_name


def print_top_kernels(name, v, by_name, top):
    """The top kernels by device time (PROFILE_TOP=N): where a variant's device
    time goes, to set beside another variant's."""
    rows = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
    print(f"  {name} {v} top {top} kernels (ms/call, count/call, name):", flush=True)
    for k, (ms, c) in rows:
        print(f"    {ms:8.3f} {c:5.1f}  {k[:110]}", flush=True)


def main():
    items = sys.argv[1].split(",")
    variants = (sys.argv[2] if len(sys.argv) > 2 else "eager,inductor,dynamo+wick,wick").split(",")
    mode = sys.argv[3] if len(sys.argv) > 3 else "inference"
    train = mode == "training"
    for item in items:
        spec = spec_of(item)
        batch = spec.batch_for(DEVICE)
        torch.manual_seed(0)
        built = M.build(spec, batch, DEVICE)
        base = built.model.train(train)
        fns, first, errs = {}, {}, {}
        ref = grad_ref = None
        for v in variants:
            m = copy.deepcopy(base)
            wick.reset()
            r = runner(compile_variant(v, m), m, built, train)
            t0 = time.time()
            wick.backends.compiled_graphs.clear()
            try:
                with variant_knobs(v):
                    out = r()
                    sync()
            except Exception as e:  # noqa: BLE001 - a row that fails is reported, the others go on
                print(f"{spec.name} {mode} {v}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            if v == "dynamo+wick":
                for info in wick.backends.compiled_graphs:
                    retried = f", retried: {info['retried']}" if info.get("retried") else ""
                    print(f"  {info['graph']} graph: {info['kernels']} kernels, externs {info['externs']}{retried}",
                          flush=True)
                for reason in wick.backends.fallback_reasons:
                    print(f"  fallback: {reason}", flush=True)
            first[v] = time.time() - t0
            o = first_tensor(out).float()
            if ref is None:
                ref = o
            errs[v] = ((o - ref).norm() / ref.norm().clamp_min(1e-30)).item()
            grad_err = ""
            if train:
                # the first step's gradients (still in .grad: the next call
                # zeroes them) against the first variant's: the loss alone
                # checks only the forward
                g = torch.cat([(q.grad if q.grad is not None else torch.zeros_like(q)).detach().float().flatten()
                               for q in m.parameters()])
                if grad_ref is None:
                    grad_ref = g
                grad_err = f", grad rel err {((g - grad_ref).norm() / grad_ref.norm().clamp_min(1e-30)).item():.1e}"
                del g
            fns[v] = r
            extra = ""
            if v.startswith("wick"):
                s = wick.stats()
                extra = f", graphs {s.get('graphs')}, breaks {s.get('breaks')}, fallbacks {len(s.get('fallbacks') or [])}"
            print(f"{spec.name} {mode} {v}: first call {first[v]:.1f} s, rel err vs {variants[0]} {errs[v]:.1e}"
                  f"{grad_err}{extra}",
                  flush=True)
        if not fns:
            continue
        if "wick._triton" in sys.modules:  # autotuning candidates compiled in the background: the warm-up tunes
            t0 = time.time()
            sys.modules["wick._triton"].wait_background()
            print(f"background compiles: waited {time.time() - t0:.1f} s after the first calls", flush=True)
        for v, fn in fns.items():
            # the next variant's wick.reset() dropped this one's compiled
            # graphs: its warm-up compiles them again, under its own knobs
            with variant_knobs(v):
                for _ in range(3):
                    fn()
        rounds = {v: [] for v in fns}
        for _ in range(7):
            for v, fn in fns.items():
                rounds[v].append(timed(fn))
        host = {v: statistics.median(host_time(fn) for _ in range(3)) for v, fn in fns.items()}
        prof = {v: device_time(fn) for v, fn in fns.items()}
        phases = {}
        for v, fn in fns.items():
            if "wick" not in v or v.endswith("-ro"):
                continue
            C.host_profile(True)
            for _ in range(20):
                fn()
            sync()
            p = C.host_profile(True)
            phases[v] = " ".join(f"{k} {c / 20:.0f}x {s * 1e3 / 20:.3f}" for k, (c, s) in p.items() if c)
        e = statistics.median(rounds[variants[0]]) if variants[0] in rounds else None
        print(f"| model | mode | variant | ms/call (median 7x10) | speedup vs {variants[0]} | host ms/call | "
              f"device ms/call | kernels/call | first call s | rel err |")
        for v in fns:
            ms = statistics.median(rounds[v])
            sp = f"{e / ms:.2f}x" if e else "-"
            print(f"| {spec.name} b{batch} | {mode} | {v} | {ms:.3f} | {sp} | {host[v]:.3f} | {prof[v][0]:.3f} | "
                  f"{prof[v][1]:.0f} | {first[v]:.1f} | {errs[v]:.1e} |", flush=True)
        for v, p in phases.items():
            print(f"  {spec.name} {v} wick host phases per call (count, ms): {p}", flush=True)
        cg = sys.modules.get("wick._cudagraphs")
        if cg is not None and any(v.endswith("-ro") and "wick" in v for v in fns):
            # since the last variant's wick.reset(): the counts of the -ro variants that follow it
            print(f"  CUDA graphs: recorded {dict(cg.recorded)}, replayed {dict(cg.replayed)}, skipped "
                  f"{dict(cg.skipped)}, reasons {cg.reasons}", flush=True)
        if int(os.environ.get("PROFILE_TOP", "0")):
            for v in fns:
                print_top_kernels(spec.name, v, prof[v][2], int(os.environ["PROFILE_TOP"]))
        del fns, base, built
        if DEVICE == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
