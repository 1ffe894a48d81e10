"""The compilers a row can use: a registry of name -> factory.

Each factory returns a ``Compiler``. The worker calls, in order: ``setup()``
(imports; raises ``NotSupported`` when the compiler cannot run here),
``begin()``, ``compile(model)``, runs the model, then ``collect()`` for
graphs, breaks and fallback reasons; ``reset()`` forgets compiled state
before the warm compile.

Test-only fakes (``fake_ok``, ``fake_wrong``, ``fake_hang``, ``fake_crash``,
``fake_raise``, ``fake_fallback``) are registered when the environment has
``WICK_BENCH_FAKES=1`` (the ``--fake-compilers`` flag sets it for workers).
Other code can add compilers with ``register(name, factory)``.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Callable


class NotSupported(Exception):
    """This compiler cannot run this row here; the row says why."""


class Compiler:
    name = ""
    description = ""
    is_wick = False  # wick's rows can be "fallback": wick ran (part of) the model eagerly
    cuda_only = False

    def unavailable(self, device: str) -> str | None:
        if self.cuda_only and device != "cuda":
            return f"{self.name} needs a GPU (CUDA graphs)"
        return None

    def setup(self):
        pass

    def begin(self):
        pass

    def compile(self, model):
        raise NotImplementedError

    def reset(self):
        pass

    def collect(self) -> dict:
        return {"graphs": None, "breaks": None, "break_reasons": [], "fallbacks": [], "compile_time_s": None}


# ----------------------------------------------------------------------------- torch.compile
def _clear_inductor_memory_caches():
    """Forget inductor's in-memory caches, so a compile reads the on-disk cache (warm) or nothing (cold)."""
    try:
        import torch._inductor.utils as iu
    except Exception:
        return
    for name in ("clear_caches", "clear_inductor_caches"):
        fn = getattr(iu, name, None)
        if fn is not None:
            try:
                fn()
            except Exception:
                pass
            return


class _Dynamo(Compiler):
    """torch.compile with PyTorch's own capture (TorchDynamo)."""

    backend = "inductor"
    mode = None

    def setup(self):
        import torch
        import torch._dynamo  # noqa: F401
        import torch._inductor.config as cfg

        # As PyTorch's accuracy runs do: random ops take eager's RNG path, so results compare.
        cfg.fallback_random = True
        self._torch = torch

    def begin(self):
        self._torch._dynamo.reset()
        self._torch._dynamo.utils.counters.clear()

    def compile(self, model):
        kwargs = {"backend": self.backend}
        if self.mode:
            kwargs["mode"] = self.mode
        return self._torch.compile(model, **kwargs)

    def reset(self):
        self._torch._dynamo.reset()
        _clear_inductor_memory_caches()

    def collect(self):
        counters = self._torch._dynamo.utils.counters
        breaks = counters.get("graph_break", {})
        reasons = sorted(breaks, key=lambda r: -breaks[r])
        return {"graphs": int(counters["stats"].get("unique_graphs", 0)),
                "breaks": int(sum(breaks.values())), "break_reasons": [str(r)[:300] for r in reasons[:20]],
                "fallbacks": [], "compile_time_s": None}


class Inductor(_Dynamo):
    name = "inductor"
    description = "torch.compile (TorchDynamo + TorchInductor)"


class InductorRO(_Dynamo):
    name = "inductor-ro"
    description = "torch.compile mode=reduce-overhead (CUDA graphs)"
    mode = "reduce-overhead"
    cuda_only = True


class Eager(Compiler):
    name = "eager"
    description = "eager PyTorch (the baseline, as a sanity row)"

    def compile(self, model):
        return model


# ----------------------------------------------------------------------------- wick
def _import_wick():
    try:
        import wick
    except Exception as e:  # ImportError, or the extension failing to load
        raise NotSupported(f"wick not importable: {type(e).__name__}: {e}") from None
    if not callable(getattr(wick, "compile", None)):
        raise NotSupported("wick not importable: wick.compile is missing")
    return wick


class WickCompiler(Compiler):
    """wick.compile: wick's capture in front of ``backend`` (wick's compiler or inductor)."""

    is_wick = True

    def __init__(self, name, description, backend="wick", mode="default", cuda_only=False):
        self.name = name
        self.description = description
        self.backend = backend
        self.mode = mode
        self.cuda_only = cuda_only

    def setup(self):
        self._wick = _import_wick()
        if self.backend == "inductor":
            import torch._inductor.config as cfg

            cfg.fallback_random = True

    def begin(self):
        self._wick.reset()

    def compile(self, model):
        try:
            return self._wick.compile(model, backend=self.backend, mode=self.mode)
        except NotImplementedError as e:
            raise NotSupported(f"wick.compile(backend={self.backend!r}, mode={self.mode!r}): {e}") from None

    def reset(self):
        self._wick.reset()
        if self.backend == "inductor":
            import torch

            torch._dynamo.reset()
            _clear_inductor_memory_caches()

    def collect(self):
        s = self._wick.stats()
        breaks = s.get("breaks", s.get("graph_breaks"))
        reasons = s.get("break_reasons", [])
        if isinstance(breaks, (list, tuple)):
            reasons, breaks = list(breaks), len(breaks)
        return {"graphs": s.get("graphs"), "breaks": breaks, "break_reasons": [str(r) for r in reasons][:20],
                "fallbacks": [str(r) for r in s.get("fallbacks", [])],
                "compile_time_s": s.get("compile_time_s")}


class DynamoWick(_Dynamo):
    """torch.compile(model, backend="wick"): PyTorch's capture in front of wick's compiler."""

    name = "dynamo+wick"
    description = "torch.compile(backend='wick'): TorchDynamo capture, wick compiler"
    backend = "wick"
    is_wick = True

    def setup(self):
        super().setup()
        self._wick = _import_wick()
        try:
            import wick.backends as wb
        except Exception as e:
            raise NotSupported(f"wick.backends not importable: {type(e).__name__}: {e}") from None
        self._wb = wb

    def begin(self):
        super().begin()
        self._wick.reset()
        self._start = len(getattr(self._wb, "fallback_reasons", []))

    def reset(self):
        super().reset()
        self._wick.reset()
        self._start = len(getattr(self._wb, "fallback_reasons", []))

    def collect(self):
        out = super().collect()
        out["fallbacks"] = [str(r) for r in list(getattr(self._wb, "fallback_reasons", []))[self._start:]]
        try:
            out["compile_time_s"] = self._wick.stats().get("compile_time_s")
        except Exception:
            pass
        return out


# ----------------------------------------------------------------------------- test fakes
class _Perturb:
    """Wraps a model and returns wrong results: every floating output * 1.1 + 0.1."""

    def __init__(self, model):
        self.model = model

    def __call__(self, *args, **kwargs):
        import torch

        def bad(o):
            if isinstance(o, torch.Tensor) and o.is_floating_point():
                return o * 1.1 + 0.1
            if isinstance(o, dict):
                return {k: bad(v) for k, v in o.items()}
            if isinstance(o, (list, tuple)):
                return type(o)(bad(v) for v in o)
            return o

        return bad(self.model(*args, **kwargs))


class _OnFirstCall:
    def __init__(self, model, action):
        self.model, self.action, self.called = model, action, False

    def __call__(self, *args, **kwargs):
        if not self.called:
            self.called = True
            self.action()
        return self.model(*args, **kwargs)


class FakeOk(Compiler):
    name = "fake_ok"
    description = "test fake: runs eagerly, reports one graph"

    def compile(self, model):
        return model

    def collect(self):
        return {"graphs": 1, "breaks": 0, "break_reasons": [], "fallbacks": [], "compile_time_s": None}


class FakeWrong(FakeOk):
    name = "fake_wrong"
    description = "test fake: returns wrong results"

    def compile(self, model):
        return _Perturb(model)


class FakeHang(FakeOk):
    name = "fake_hang"
    description = "test fake: hangs on its first call"

    def compile(self, model):
        def hang():
            while True:
                time.sleep(1)

        return _OnFirstCall(model, hang)


class FakeCrash(FakeOk):
    name = "fake_crash"
    description = "test fake: kills its process with SIGSEGV on its first call"

    def compile(self, model):
        return _OnFirstCall(model, lambda: os.kill(os.getpid(), signal.SIGSEGV))


class FakeRaise(FakeOk):
    name = "fake_raise"
    description = "test fake: raises while compiling"

    def compile(self, model):
        raise RuntimeError("fake compiler failed to compile")


class FakeFallback(FakeOk):
    name = "fake_fallback"
    description = "test fake: a wick-like compiler that ran everything eagerly"
    is_wick = True

    def collect(self):
        return {"graphs": 0, "breaks": 0, "break_reasons": [], "fallbacks": ["fake: op aten.foo not supported"],
                "compile_time_s": None}


class DynamoWickRO(DynamoWick):
    """torch.compile(model, backend="wick", mode="reduce-overhead"): graphs replayed as CUDA graphs."""

    name = "dynamo+wick-ro"
    description = "torch.compile(backend='wick', mode='reduce-overhead'): CUDA graphs"
    mode = "reduce-overhead"
    cuda_only = True


# ----------------------------------------------------------------------------- registry
COMPILERS: dict[str, Callable[[], Compiler]] = {
    "eager": Eager,
    "inductor": Inductor,
    "inductor-ro": InductorRO,
    "wick": lambda: WickCompiler("wick", "wick.compile (wick capture, wick compiler)"),
    "wick-ro": lambda: WickCompiler("wick-ro", "wick.compile mode=reduce-overhead (CUDA graphs)",
                                    mode="reduce-overhead", cuda_only=True),
    "wick+inductor": lambda: WickCompiler("wick+inductor", "wick.compile(backend='inductor'): wick capture, inductor",
                                          backend="inductor"),
    "dynamo+wick": DynamoWick,
    "dynamo+wick-ro": DynamoWickRO,
}

FAKES: dict[str, Callable[[], Compiler]] = {
    c.name: c for c in (FakeOk, FakeWrong, FakeHang, FakeCrash, FakeRaise, FakeFallback)
}

DEFAULT_CPU = ("inductor", "wick", "wick+inductor", "dynamo+wick")
DEFAULT_CUDA = ("inductor", "wick", "wick-ro", "wick+inductor", "dynamo+wick")


def register(name: str, factory: Callable[[], Compiler]):
    COMPILERS[name] = factory


def registry() -> dict[str, Callable[[], Compiler]]:
    reg = dict(COMPILERS)
    if os.environ.get("WICK_BENCH_FAKES") == "1":
        reg.update(FAKES)
    return reg


def get(name: str) -> Compiler:
    reg = registry()
    if name not in reg:
        raise KeyError(f"unknown compiler {name!r}; known: {', '.join(sorted(reg))}")
    return reg[name]()
