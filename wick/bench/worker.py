"""One row of the benchmark, run in its own process: ``python worker.py SPEC.json``.

The parent writes the row's spec (model, batch, device, mode, precision,
compiler, repeats, paths) to a JSON file, gives the process fresh cache
directories (WICK_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR) and a
time limit, and reads back ``result_path``. The worker rewrites that file
after every phase, so a row that hangs or dies still tells how far it got.

Phases: setup, build, fp64_ref, eager (twice), compile (cold: first call),
accuracy, warm_compile (after a reset, caches populated), timing (interleaved
eager/compiled repeats), memory.

Compile time = first call - a steady-state call, as seen by the caller.
Training = one step (zero_grad, forward, loss, backward, SGD step) with the
model (not the step) compiled; the accuracy run compares 2 steps: loss,
outputs, gradients, updated parameters and buffers.
"""
from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import resource
import statistics
import sys
import time
import traceback

if __package__ in (None, ""):  # run by path: load this folder as a package, without importing wick
    import importlib.util

    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]  # no sibling shadows a library
    _spec = importlib.util.spec_from_file_location("wick_bench", os.path.join(_here, "__init__.py"),
                                                   submodule_search_locations=[_here])
    _pkg = importlib.util.module_from_spec(_spec)
    sys.modules["wick_bench"] = _pkg
    _spec.loader.exec_module(_pkg)
    __package__ = "wick_bench"

from . import accuracy  # noqa: E402
from . import compilers as C  # noqa: E402
from . import models as M  # noqa: E402


class RowDone(Exception):
    def __init__(self, status, detail=""):
        super().__init__(detail)
        self.status, self.detail = status, detail


def _tail(exc: BaseException, limit=1500) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-limit:]


def _finish_tuning(runner):
    """wick's Triton kernels are timed once their autotuning candidates,
    compiled in the background after the first call, are in: a call after
    that wait tunes them, so that what is timed next is the tuned code (and a
    warm compile finds the tuning choices on disk)."""
    triton = sys.modules.get("wick._triton")
    if triton is not None and triton._later:
        triton.wait_background()
        runner()


def _short(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    first = msg[0] if msg else ""
    if len(first) > 300:
        first = first[:300] + "..."
    return f"{type(exc).__name__}: {first}"


class Row:
    def __init__(self, spec: dict):
        self.spec = spec
        self.out = {
            "status": None, "detail": "", "phase": "setup", "final": False,
            "fallbacks": [], "graphs": None, "breaks": None, "break_reasons": [],
            "accuracy": None, "eager_ms": None, "compiled_ms": None, "speedup": None,
            "compile_cold_s": None, "compile_warm_s": None, "wick_compile_time_s": None,
            "first_call_s": None, "peak_mem_eager_mb": None, "peak_mem_compiled_mb": None,
            "rss_peak_mb": None, "timing": None, "error": None,
        }
        self.t_start = time.perf_counter()

    # -- bookkeeping
    def save(self):
        path = self.spec["result_path"]
        self.out["wall_s"] = round(time.perf_counter() - self.t_start, 3)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.out, f, default=str)
        os.replace(tmp, path)

    def phase(self, name):
        self.out["phase"] = name
        self.save()

    # -- helpers built once torch is imported
    def _sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _amp(self):
        prec = self.spec["precision"]
        if prec == "float32":
            return contextlib.nullcontext()
        dtype = {"bf16": self.torch.bfloat16, "fp16": self.torch.float16}[prec]
        return self.torch.autocast(device_type=self.device, dtype=dtype)

    def make_runner(self, fwd, module, inputs, amp=True):
        """A callable running one inference call or one training step; ``collect=True`` returns results."""
        torch = self.torch
        ctx = self._amp if amp else contextlib.nullcontext
        loss_fn = self.built.loss
        if not self.train:
            def infer(collect=False):
                with torch.no_grad(), ctx():
                    out = M.call(fwd, inputs)
                return accuracy.normalize(out) if collect else out
            return infer

        opt = torch.optim.SGD(module.parameters(), lr=0.01)

        def clone(x):
            if isinstance(x, torch.Tensor):
                return x.clone()
            if isinstance(x, dict):
                return {k: clone(v) for k, v in x.items()}
            if isinstance(x, (list, tuple)):
                return type(x)(clone(v) for v in x)
            return x

        def step(collect=False):
            opt.zero_grad(set_to_none=True)
            with ctx():
                out = M.call(fwd, clone(inputs))
                loss = loss_fn(out)
            loss.backward()
            opt.step()
            if not collect:
                return loss
            grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
                     for n, p in module.named_parameters()}
            params = {n: p.detach().clone() for n, p in module.named_parameters()}
            buffers = {n: b.detach().clone() for n, b in module.named_buffers()}
            return {"loss": loss.detach().clone(), "out": accuracy.normalize(out), "grads": grads,
                    "params": params, "buffers": buffers}

        return step

    def first_compiled_call(self, comp, module, inputs):
        """Compiles module and makes its first call (where compilers compile);
        returns the runner and the seconds that took."""
        t0 = time.perf_counter()
        runner = self.make_runner(comp.compile(module), module, inputs)
        runner()
        self._sync()
        return runner, time.perf_counter() - t0

    def run_iters(self, fwd, module, inputs, n=2, amp=True):
        r = self.make_runner(fwd, module, inputs, amp)
        for _ in range(n - 1):
            r()
        return r(collect=True)

    def timed(self, fn, n):
        self._sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        self._sync()
        return (time.perf_counter() - t0) / n

    # -- the row
    def run(self):
        spec = self.spec
        self.device = spec["device"]
        self.train = spec["mode"] == "training"
        self.phase("setup")
        import torch

        self.torch = torch
        if spec.get("threads"):
            torch.set_num_threads(int(spec["threads"]))
        comp = C.get(spec["compiler"])
        why = comp.unavailable(self.device)
        if why:
            raise RowDone("not_supported", why)
        try:
            comp.setup()
        except C.NotSupported as e:
            raise RowDone("not_supported", str(e))

        self.phase("build")
        mspec = M.ModelSpec(**spec["model"])
        try:
            torch.manual_seed(0)
            self.built = M.build(mspec, spec["batch"], self.device)
        except Exception as e:
            self.out["error"] = _tail(e)
            raise RowDone("eager_fail", f"model failed to build: {_short(e)}")
        model, inputs = self.built.model, self.built.inputs
        model.train(self.train)
        if self.device == "cuda":
            # As PyTorch's accuracy runs do: deterministic kernels while results are compared
            # (the parent sets CUBLAS_WORKSPACE_CONFIG); switched off again before timing.
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
            torch.use_deterministic_algorithms(True, warn_only=True)

        # float64 reference
        self.phase("fp64_ref")
        ref64 = None
        try:
            m64 = copy.deepcopy(model).to(torch.float64)
            in64 = accuracy.to_float64(inputs) if isinstance(inputs, dict) else tuple(
                accuracy.to_float64(list(inputs)))
            torch.manual_seed(0)
            ref64 = accuracy.to_float64(self.run_iters(m64, m64, in64, amp=False))
            del m64, in64
        except Exception as e:
            self.out["fp64_note"] = f"no float64 reference ({_short(e)}): cosine similarity decides"

        # two eager runs must agree
        self.phase("eager")
        try:
            results = []
            for _ in range(2):
                m = copy.deepcopy(model)
                torch.manual_seed(0)
                results.append(self.run_iters(m, m, inputs))
                del m
        except Exception as e:
            self.out["error"] = _tail(e)
            raise RowDone("eager_fail", f"eager run failed: {_short(e)}")
        ok, info = accuracy.same_exact(results[0], results[1])
        if not ok:
            # PyTorch's rule is exact agreement; GPU atomics can break it while both runs stay within
            # the row's tolerance of each other: go on, and say so.
            ok2, _ = accuracy.compare(results[0], results[1], None, tol=float(spec["tol"]))
            if not ok2:
                raise RowDone("eager_fail", f"eager_two_runs_differ: {info['error']}")
            self.out["eager_note"] = f"two eager runs differ at tolerance 0 (agree at {spec['tol']}): {info['error']}"
        eager_result = results[0]
        del results

        # cold compile: the first call compiles
        self.phase("compile")
        comp.begin()
        mc = copy.deepcopy(model)
        torch.manual_seed(0)
        try:
            runner, first = self.first_compiled_call(comp, mc, inputs)
        except C.NotSupported as e:
            raise RowDone("not_supported", str(e))
        except Exception as e:
            self.out["error"] = _tail(e)
            raise RowDone("compile_error", _short(e))
        self.out["first_call_s"] = round(first, 4)
        try:
            res = runner(collect=True)
        except Exception as e:
            self.out["error"] = _tail(e)
            raise RowDone("crash", f"second call raised: {_short(e)}")
        st = comp.collect()
        self.out.update(graphs=st.get("graphs"), breaks=st.get("breaks"),
                        break_reasons=st.get("break_reasons") or [], fallbacks=st.get("fallbacks") or [],
                        wick_compile_time_s=st.get("compile_time_s"))

        # accuracy
        self.phase("accuracy")
        tol = float(spec["tol"])
        ok, info = accuracy.compare(eager_result, res, ref64, tol=tol, cosine=ref64 is None)
        self.out["accuracy"] = info
        del res, eager_result, ref64
        fell_back = comp.is_wick and (bool(self.out["fallbacks"]) or self.out["graphs"] == 0)
        if fell_back and not self.out["fallbacks"]:
            self.out["fallbacks"] = ["wick compiled no graph: the model ran eagerly"]

        # steady-state compiled call, for compile times
        steady = min(self.timed(runner, 1) for _ in range(3))
        self.out["compile_cold_s"] = round(max(first - steady, 0.0), 4)
        _finish_tuning(runner)
        if not ok:
            raise RowDone("fail_accuracy", info["error"] or "accuracy check failed")
        if fell_back:
            raise RowDone("fallback", "; ".join(self.out["fallbacks"][:5]))
        del runner, mc

        # warm compile: forget compiled code, keep the on-disk caches
        self.phase("warm_compile")
        if self.device == "cuda":
            torch.use_deterministic_algorithms(False)
            torch.backends.cudnn.deterministic = False
        comp.reset()
        comp.begin()
        mw = copy.deepcopy(model)
        torch.manual_seed(0)
        try:
            crun, warm_first = self.first_compiled_call(comp, mw, inputs)
        except Exception as e:
            self.out["error"] = _tail(e)
            raise RowDone("crash", f"warm recompile raised: {_short(e)}")
        steady = min(self.timed(crun, 1) for _ in range(3))
        self.out["compile_warm_s"] = round(max(warm_first - steady, 0.0), 4)

        # timing: interleaved repeats after warm-up
        self.phase("timing")
        me = copy.deepcopy(model)
        erun = self.make_runner(me, me, inputs)
        _finish_tuning(crun)
        for _ in range(int(spec.get("warmup", 3))):
            erun()
            crun()
        t1 = min(self.timed(erun, 1) for _ in range(2))
        target = float(spec.get("sample_s", 0.05))
        n = max(1, min(10000, math.ceil(target / max(t1, 1e-7))))
        te, tc = [], []
        for _ in range(int(spec.get("repeats", 10))):
            te.append(self.timed(erun, n))
            tc.append(self.timed(crun, n))
        e_med, c_med = statistics.median(te), statistics.median(tc)
        self.out.update(eager_ms=round(e_med * 1e3, 5), compiled_ms=round(c_med * 1e3, 5),
                        speedup=round(e_med / c_med, 4) if c_med > 0 else None,
                        timing={"calls_per_sample": n, "repeats": len(te),
                                "eager_ms": [round(t * 1e3, 5) for t in te],
                                "compiled_ms": [round(t * 1e3, 5) for t in tc]})

        # peak memory
        self.phase("memory")
        if self.device == "cuda":
            import gc

            for key, fn in (("peak_mem_eager_mb", erun), ("peak_mem_compiled_mb", crun)):
                gc.collect()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                fn()
                torch.cuda.synchronize()
                self.out[key] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        raise RowDone("pass", "")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as f:
        spec = json.load(f)
    row = Row(spec)
    try:
        row.run()
    except RowDone as d:
        row.out["status"], row.out["detail"] = d.status, d.detail
    except Exception as e:  # a bug in the harness or an unexpected failure: one failed row
        row.out["status"] = "crash"
        row.out["detail"] = f"in phase {row.out['phase']}: {_short(e)}"
        row.out["error"] = _tail(e)
    row.out["rss_peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    row.out["final"] = True
    row.save()
    sys.stdout.flush()
    # Skip interpreter teardown: compiler pools and CUDA contexts can make exit slow or noisy.
    os._exit(0)


if __name__ == "__main__":
    main()
