"""wick: a just-in-time compiler for unmodified PyTorch programs, written in C.

    import wick
    fast = wick.compile(fn)          # like torch.compile
    wick.explain(fn)(*args)          # graphs, fallback reasons (file:line), guards
    wick.reset()                     # forget every compiled frame
    torch.compile(model, backend="wick")

This package is deliberately thin: the frame hook, the symbolic bytecode
interpreter, guards, the compiler and the runtime are C (wick._C). Importing
wick does not require torch; the torch-facing parts import it when used.
"""
from __future__ import annotations

import functools
import operator
import sys

try:
    from . import _C
except ImportError as _exc:  # not built: say so when wick is used, not at import
    _C = None
    _C_IMPORT_ERROR = _exc
else:
    _C_IMPORT_ERROR = None

__all__ = ["compile", "reset", "explain", "stats", "ExplainOutput", "UnsupportedError"]

UnsupportedError = getattr(_C, "UnsupportedError", RuntimeError)


def _require_core():
    if _C is None:
        raise ImportError(
            f"wick's C core (wick._C) is not built: {_C_IMPORT_ERROR}. "
            "Run `make build` in the checkout, or `pip install .`"
        )

_BACKEND_DEFAULT = "wick"
_compiled_codes: list = []  # code objects wick.compile has marked since the last reset


def _options(fullgraph, dynamic, backend, mode):
    if mode not in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        raise ValueError(f"wick.compile: unknown mode {mode!r}")
    if not (isinstance(backend, str) or callable(backend)):
        raise TypeError(f"wick.compile: backend must be a name or a callable, got {type(backend).__name__}")
    # CompiledFunction shares one options object among equal options (the
    # hook keeps cache entries per options object)
    return {"backend": backend, "fullgraph": bool(fullgraph), "dynamic": dynamic, "mode": mode}


def _code_of(fn):
    """The code object whose frames compiling fn compiles (see hook.c code_of)."""
    for _ in range(8):
        if isinstance(fn, _C.CompiledFunction):
            fn = fn._fn
        elif isinstance(fn, functools.partial):
            fn = fn.func
        elif hasattr(fn, "__func__"):
            fn = fn.__func__
        elif hasattr(fn, "__code__"):
            return fn.__code__
        elif not isinstance(fn, type) and hasattr(type(fn), "__call__"):
            call = type(fn).__call__
            if call is fn:
                return None
            fn = call
        else:
            return None
    return None


def _compile_function(fn, opts):
    compiled = _C.CompiledFunction(fn, opts)
    code = _code_of(fn)
    if code is not None and code not in _compiled_codes:
        _compiled_codes.append(code)
    return compiled


def _compile_module(module, opts):
    import torch

    if isinstance(getattr(module, "_compiled_forward", None), _C.CompiledFunction) and hasattr(
            module, "_orig_mod"):
        module = module._orig_mod  # compiling a compiled module: the original, new options

    class CompiledModule(torch.nn.Module):
        """The module with its forward run through wick; parameters are shared.

        A call calls the original module as Python would (its forward hooks
        and pre-hooks, global module hooks, a __call__ override), with wick's
        frame hook enabled: the frame of its forward, marked below, is the
        one wick compiles."""

        def __init__(self, mod):
            super().__init__()
            self._orig_mod = mod
            forward = type(mod).forward
            self._compiled_forward = _compile_function(forward, opts)  # marks forward's code
            # operator.call has no Python code: wrapping it marks nothing
            self._compiled_call = _C.CompiledFunction(operator.call, opts)
            # the same module again, as a plain attribute: read without
            # nn.Module.__getattr__ on every call (_orig_mod registers it)
            self.__dict__["_wick_orig"] = mod
            self.__dict__["_wick_forward_fn"] = forward

        def __call__(self, *args, **kwargs):
            # When nothing would run between this call and the module's
            # forward (no hooks on either module, no global hooks, nn.Module's
            # call path, forward not replaced since compiling), call the
            # compiled forward directly: what nn.Module.__call__ twice over
            # would end in, without its two Python frames. Otherwise
            # nn.Module's own path (hooks, then forward below).
            d = self.__dict__
            mod = d["_wick_orig"]
            if (_C._module_call_is_forward(self, CompiledModule.forward, CompiledModule.__call__)
                    and _C._module_call_is_forward(mod, d["_wick_forward_fn"])):
                return d["_compiled_forward"](mod, *args, **kwargs)
            return super().__call__(*args, **kwargs)

        def forward(self, *args, **kwargs):
            return self._compiled_call(self._wick_orig, *args, **kwargs)

        def __getattr__(self, name):
            try:
                return super().__getattr__(name)
            except AttributeError:
                return getattr(self._orig_mod, name)

    return CompiledModule(module)


def compile(model=None, *, fullgraph=False, dynamic=None, backend=_BACKEND_DEFAULT, mode="default"):
    """Compile a function or nn.Module with wick's capture and ``backend``.

    Works like ``torch.compile``: the result is called like the original. Code
    wick cannot capture runs eagerly and the reason is recorded (see
    ``wick.explain``); ``fullgraph=True`` turns that into an UnsupportedError.
    ``backend`` is "wick" (wick's own compiler), or any torch.compile backend
    name ("inductor", "eager", ...) or callable taking (GraphModule, inputs).
    """
    _require_core()
    opts = _options(fullgraph, dynamic, backend, mode)
    if model is None:
        return functools.partial(compile, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.Module):
        return _compile_module(model, opts)
    if not callable(model):
        raise TypeError(f"wick.compile expects a function or nn.Module, got {type(model).__name__}")
    # functions, lambdas, bound methods, functools.partial, callable objects
    # and already compiled functions (their original is compiled again, with
    # these options, as torch.compile does); a callable without Python code
    # (a builtin) just runs
    return _compile_function(model, opts)


def reset():
    """Forget every compiled frame and recorded reason."""
    _require_core()
    _C.reset()
    _C._reset_breaks()
    _compiled_codes.clear()
    backends = sys.modules.get("wick.backends")
    if backends is not None:
        backends.fallback_reasons.clear()
        backends.symbolic_calls.clear()
    autodiff = sys.modules.get("wick._autodiff")
    if autodiff is not None:
        autodiff.reset_stats()
    cudagraphs = sys.modules.get("wick._cudagraphs")
    if cudagraphs is not None:
        cudagraphs.reasons.clear()
        cudagraphs.recorded.clear()
        cudagraphs.replayed.clear()
        cudagraphs.skipped.clear()


def _entries(codes):
    """Cache entries of codes, of the resume functions their graph breaks made, and of their callees
    captured as frames of their own."""
    out, seen, todo = [], set(), list(codes)
    while todo:
        code = todo.pop(0)
        if code in seen:
            continue
        seen.add(code)
        for entry in _C.code_entries(code):
            out.append(dict(entry, code=code))
            for brk in entry.get("breaks") or ():
                todo.extend(brk.get("resume") or ())
                if brk.get("callee") is not None:  # the called function, captured as its own frame
                    todo.append(brk["callee"])
            # a fallback runs eagerly; the functions it called were captured as their own frames
            todo.extend(entry.get("callees") or ())
    return out


def stats():
    """What wick did since the last reset: graphs compiled, eager fallbacks and hook counters."""
    _require_core()
    entries = _entries(_compiled_codes)
    graphs = sum(int(e.get("graph_count", 0) or 0) for e in entries if not e.get("eager"))
    fallbacks = [e["reason"] for e in entries if e.get("reason")]
    backends = sys.modules.get("wick.backends")
    if backends is not None:
        fallbacks += list(backends.fallback_reasons)
    # a graph break compiles the frame in parts; a fallback runs a frame
    # eagerly (whole): both are reasons a frame is not one graph
    breaks = [b["reason"] for e in entries for b in e.get("breaks") or ()]
    return {
        "graphs": graphs,
        "entries": len(entries),
        "fallbacks": fallbacks,
        "breaks": len(breaks) + len(fallbacks),
        "break_reasons": breaks + fallbacks,
        "compile_time_s": sum(float(e.get("compile_time_s", 0) or 0) for e in entries),
        "hook": _C.hook_stats(),
        # training graphs whose backward wick built itself, and those it gave
        # to AOTAutograd (with why): neither is an eager fallback
        "autodiff": _autodiff_stats(),
        # torch.compile(backend="wick") graphs with symbolic sizes: calls per
        # how they ran (compiled for their size, or eagerly and why)
        "symbolic_calls": dict(backends.symbolic_calls) if backends is not None else {},
    }


def _autodiff_stats():
    autodiff = sys.modules.get("wick._autodiff")
    return autodiff.stats() if autodiff is not None else {"graphs": 0, "fallbacks": 0, "reasons": []}


class ExplainOutput:
    """What wick.explain found: graphs, their kernel sources, guards, and why anything ran eagerly."""

    def __init__(self, entries, result):
        self.entries = entries
        self.result = result
        compiled = [e for e in entries if not e.get("eager")]
        self.graphs = [e.get("graph", "") for e in compiled]
        self.sources = [e.get("source", "") for e in compiled]
        self.guards = [list(e.get("guards", [])) for e in compiled]
        self.graph_count = sum(int(e.get("graph_count", 1) or 0) for e in compiled)
        # graph breaks: {"reason", "file", "line", "resume"}; the frame went on in a resume function
        self.breaks = [b for e in compiled for b in e.get("breaks") or ()]
        self.fallback_reasons = [e["reason"] for e in entries if e.get("reason")]
        self.break_reasons = [b["reason"] for b in self.breaks] + self.fallback_reasons

    def __repr__(self):
        lines = [f"wick.explain: {self.graph_count} graph(s), {len(self.breaks)} graph break(s), "
                 f"{len(self.fallback_reasons)} fallback reason(s)"]
        for i, g in enumerate(self.graphs):
            lines.append(f"--- graph {i} ---\n{g}")
            if self.guards[i]:
                lines.append("guards:\n  " + "\n  ".join(self.guards[i]))
        for b in self.breaks:
            lines.append(f"graph break at {b['file']}:{b['line']}: {b['reason']}")
        for r in self.fallback_reasons:
            lines.append(f"fallback: {r}")
        return "\n".join(lines)

    __str__ = __repr__


def explain(fn, **compile_kwargs):
    """``wick.explain(fn)(*args)`` compiles fn (if needed), runs it once on args,
    and returns an ExplainOutput for the entries that call used or created."""
    _require_core()
    torch = sys.modules.get("torch")
    if hasattr(fn, "_compiled_forward"):  # a module wick.compile returned
        compiled, code = fn, type(fn._orig_mod).forward.__code__
    elif torch is not None and isinstance(fn, torch.nn.Module):
        compiled, code = compile(fn, **compile_kwargs), type(fn).forward.__code__
    else:
        target = getattr(fn, "__wrapped__", fn)
        compiled = fn if isinstance(fn, _C.CompiledFunction) else compile(target, **compile_kwargs)
        code = target.__code__

    def run(*args, **kwargs):
        result = compiled(*args, **kwargs)
        return ExplainOutput(_entries([code]), result)

    return run


def _register_with_torch():
    """Make torch.compile(..., backend="wick") work once torch is importable."""
    if _C is None:
        return
    try:
        import torch
    except ImportError:
        return
    try:
        # lowered gelu(+inf) answers as torch's vectorised kernel does on this
        # machine: NaN on AVX-512 builds, inf with AVX2
        probe = torch.nn.functional.gelu(torch.full((64,), float("inf")))
        _C.set_gelu_inf_is_nan(bool(probe.isnan().any()))
    except Exception as exc:
        print(f"wick: could not ask torch how gelu(inf) behaves here: {exc}", file=sys.stderr)
    try:
        from . import backends

        backends.register()
    except Exception as exc:  # registration must never break `import wick`
        print(f"wick: could not register the torch.compile backend: {exc}", file=sys.stderr)


_register_with_torch()
