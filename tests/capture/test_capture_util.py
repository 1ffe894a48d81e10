"""Shared helpers and fixtures of the capture tests (test_capture_*.py import
them with `from test_capture_util import *`; this file holds no tests).

`ref` is a reference backend used next to wick's own: it runs a captured
wick._C.Graph node by node with eager torch ops, so these tests check what
capture builds (ops, argument binding, constants, dtypes) independently of
wick's compiler. It reaches capture through the same door as any non-wick
backend, `wick.backends.compile_graph_with`, which the fixture below wraps.
"""
import os
import tempfile

import pytest
import torch

import wick._C as C

OPTS = {"backend": "wick", "fullgraph": False, "dynamic": None, "mode": "default"}


def compiled(fn, backend="wick", fullgraph=False):
    opts = dict(OPTS, backend=backend, fullgraph=fullgraph)
    return C.CompiledFunction(fn, opts)


def entries(fn):
    return C.code_entries(fn.__code__)


def graphs(fn):
    return [e for e in entries(fn) if not e.get("eager") and e.get("graph_count")]


def fallbacks(fn):
    return [e for e in entries(fn) if e.get("eager")]


def reasons(fn):
    """Why fn's frame is not one graph: its fallbacks' reasons, then its graph breaks'."""
    es = entries(fn)
    return [e["reason"] for e in es if e.get("eager")] + [b["reason"] for e in es for b in e.get("breaks") or ()]


def one_graph(fn):
    """fn's first cache entry is compiled as exactly one graph, without a break."""
    es = entries(fn)
    assert es and not es[0]["eager"], reasons(fn)
    assert es[0]["graph_count"] == 1 and not es[0].get("breaks"), reasons(fn)


def stats_counts():
    """(graphs, breaks, fallbacks) that wick.stats() reports since the last reset."""
    import wick

    st = wick.stats()
    return st["graphs"], st["breaks"], len(st["fallbacks"])


def text_model_is_one_graph(m, vocab, seed=1):
    """A transformers model (in eval mode) on random input_ids of 2x12, compiled
    with wick.compile: logits within 1e-5 of eager's (relative to their
    largest), one graph, no break, no fallback."""
    import wick

    ids = torch.randint(0, vocab, (2, 12), generator=torch.Generator().manual_seed(seed))
    wick.reset()
    f = wick.compile(m)
    with torch.no_grad():
        want = m(input_ids=ids).logits
        got = f(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())
    assert stats_counts() == (1, 0, 0), wick.stats()


def module_twice_no_grad(m, x):
    """wick.compile(m) after wick.reset(), called twice on x under no_grad:
    (eager's result, the second compiled result, (graphs, breaks, fallbacks))."""
    import wick

    wick.reset()
    f = wick.compile(m)
    with torch.no_grad():
        exp = m(x)
        f(x)
        got = f(x)
    return exp, got, stats_counts()


def entry_tree(code):
    """Every cache entry of code, of the resume functions and callees its
    breaks made, and of the callees its fallbacks' eager runs compiled."""
    out, todo, seen = [], [code], set()
    while todo:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        for e in C.code_entries(c):
            out.append(e)
            for b in e.get("breaks") or ():
                todo.extend(b["resume"])
                if b.get("callee") is not None:
                    todo.append(b["callee"])
            todo.extend(e.get("callees") or ())
    return out


def break_counts(fn):
    """(graphs compiled, breaks, fallbacks) over fn's entry tree. A fallback is an
    eager entry with a reason; a frame left as written on purpose (no graph op of
    its own, hook.c) is none."""
    es = entry_tree(fn.__code__)
    return (sum(e["graph_count"] for e in es if not e["eager"]), sum(len(e.get("breaks") or ()) for e in es),
            sum(1 for e in es if e["eager"] and e.get("reason")))


_BINARY = {
    "ADD": lambda a, b: a + b,
    "SUB": lambda a, b: a - b,
    "MUL": lambda a, b: a * b,
    "DIV": lambda a, b: a / b,
    "POW": lambda a, b: a ** b,
    "MAXIMUM": torch.maximum,
    "MINIMUM": torch.minimum,
    "EQ": lambda a, b: a == b,
    "NE": lambda a, b: a != b,
    "LT": lambda a, b: a < b,
    "LE": lambda a, b: a <= b,
    "GT": lambda a, b: a > b,
    "GE": lambda a, b: a >= b,
}
_UNARY = {
    "NEG": torch.neg,
    "ABS": torch.abs,
    "RELU": torch.relu,
    "EXP": torch.exp,
    "LOG": torch.log,
    "SQRT": torch.sqrt,
    "SIGMOID": torch.sigmoid,
    "TANH": torch.tanh,
}


class RefGraph:
    """Runs a wick._C.Graph with eager torch; returns a tuple like CompiledGraph."""

    calls = 0

    def __init__(self, graph, externs=None, no_grad=(), entry_grad=True):
        self.text = graph.print()
        self.inputs = [d["id"] for d in graph.inputs()]
        self.nodes = graph.nodes()
        self.outputs = graph.outputs()
        self.externs, self.no_grad, self.entry_grad = externs, set(no_grad), entry_grad

    def __call__(self, *args):
        RefGraph.calls += 1
        assert len(args) == len(self.inputs)
        try:
            return self._run(args)
        finally:
            torch.set_grad_enabled(self.entry_grad)

    def _run(self, args):
        import wick.backends as B

        env = dict(zip(self.inputs, args))
        for n in self.nodes:
            op, x = n["op"], [env[i] for i in n["inputs"]]
            torch.set_grad_enabled(n["output"] not in self.no_grad)
            if op == "SCALAR":
                r = n["value"]  # a Python number keeps torch's wrapped-number promotion
            elif op == "EXTERN":
                k = n["extern_index"]
                res = B._extern_callable(k, self.externs[k], "ref")(*x)
                for j, vid in enumerate(n["outputs"]):
                    env[vid] = B._extern_output(res, j)
                continue
            elif op == "CONVERT":  # a fresh buffer, contiguous as every node output (graph.h)
                r = x[0].to(getattr(torch, n["dtype"])).contiguous()
            elif op == "VIEW":  # the base's memory as the node's sizes and strides say
                nd = n["ints"][0]
                sizes, strides, offset = n["ints"][1:1 + nd], n["ints"][1 + nd:1 + 2 * nd], n["ints"][1 + 2 * nd]
                r = x[0].as_strided(sizes, strides, x[0].storage_offset() + offset)
            elif op in _BINARY:
                r = _BINARY[op](*x)
            elif op in _UNARY:
                r = _UNARY[op](x[0])
            elif op == "WHERE":
                r = torch.where(*x)
            elif op in ("SUM", "MEAN", "AMAX"):
                t = x[0]
                dims = n["dims"] if n["dims"] is not None else tuple(range(t.dim()))
                kw = {}
                if op != "AMAX" and n["dtype"] is not None:
                    kw["dtype"] = getattr(torch, n["dtype"])
                f = {"SUM": torch.sum, "MEAN": torch.mean, "AMAX": torch.amax}[op]
                r = f(t, dim=dims, keepdim=n["keepdim"], **kw) if dims else (
                    f(t, **kw) if op != "AMAX" else torch.amax(t, dim=()))
                if not dims and n["keepdim"]:
                    r = r.reshape([1] * t.dim())
            else:
                raise NotImplementedError(op)
            if isinstance(r, torch.Tensor) and op != "VIEW":
                r = r.contiguous()  # eager may keep an operand's layout; a node output is contiguous
            env[n["output"]] = r
        return tuple(env[o] for o in self.outputs)


def dynamo_graph_count(run):
    """Graphs PyTorch's capture makes when run(compile) calls the function
    compiled by compile(fn): a counting backend. 0 when that capture raised,
    or skipped a frame and ran part of the tensor work eagerly (torch 2.13 on
    3.12 skips a resume function whose loop breaks): fewer graphs then mean
    less compiled, not a better capture, so there is nothing to compare."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    n = [0]

    def counting(gm, example_inputs):
        n[0] += 1
        return gm.forward

    torch._dynamo.reset()
    counters.clear()
    try:
        run(lambda fn: torch.compile(fn, backend=counting))
    except Exception:
        n[0] = 0
    frames = dict(counters.get("frames", {}))
    torch._dynamo.reset()
    if frames.get("total", 0) != frames.get("ok", 0):
        return 0
    return n[0]


def run_eager_and_compiled(fn, compiled_fn, args):
    """fn eagerly and compiled_fn on separate deep copies of args, exceptions
    caught: (eager result, its exception type, compiled result, its exception
    type, the eager copy of args, the compiled copy), for tests that compare
    results and the state of every argument afterwards."""
    import copy

    ea, ca = copy.deepcopy(args), copy.deepcopy(args)
    try:
        exp, exp_err = fn(*ea), None
    except Exception as e:
        exp, exp_err = None, type(e)
    try:
        got, got_err = compiled_fn(*ca), None
    except Exception as e:
        got, got_err = None, type(e)
    return exp, exp_err, got, got_err, ea, ca


def install_ref_backend(monkeypatch):
    import wick.backends as B

    orig = getattr(B, "compile_graph_with", None)

    def compile_graph_with(backend, graph, example_inputs, *rest, **options):
        if backend == "ref":  # (mode and written: for wick's backend)
            return RefGraph(graph, *rest)
        return orig(backend, graph, example_inputs, *rest, **options)

    monkeypatch.setattr(B, "compile_graph_with", compile_graph_with, raising=False)


def assert_same(got, expected, rtol=None, atol=None):
    """Equal to eager: same type, structure, dtype, shape; values close
    (by default within float32/float64 rounding of a fused kernel)."""
    assert type(got) is type(expected), (type(got), type(expected))
    if isinstance(expected, torch.Tensor):
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        assert got.shape == expected.shape, (got.shape, expected.shape)
        assert got.device == expected.device
        if expected.dtype.is_floating_point:
            if rtol is None:
                rtol, atol = (1e-4, 1e-5) if expected.dtype != torch.float64 else (1e-10, 1e-12)
            torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=True)
        else:
            assert torch.equal(got, expected)
    elif isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e, rtol, atol)
    elif isinstance(expected, dict):
        assert list(got) == list(expected)
        for k in expected:
            assert_same(got[k], expected[k], rtol, atol)
    else:
        assert got == expected or (got != got and expected != expected), (got, expected)


# A helper in another module than the tests that inline it (test_capture_inline.py).
UTIL_ALPHA = 1.702


def util_quick_gelu(x):
    return x * torch.sigmoid(UTIL_ALPHA * x)


@pytest.fixture(scope="session", autouse=True)
def _wick_cache_dir():
    """A private WICK_CACHE_DIR for the test session."""
    old = os.environ.get("WICK_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="wick-capture-") as d:
        os.environ["WICK_CACHE_DIR"] = d
        C.env_reload()
        yield d
    if old is None:
        os.environ.pop("WICK_CACHE_DIR", None)
    else:
        os.environ["WICK_CACHE_DIR"] = old
    C.env_reload()


@pytest.fixture
def fresh_wick():
    """wick's caches and cache entries cleared around a test (files that do
    not use the ref backend take it with `pytestmark`)."""
    import wick

    C.reset()
    wick.reset()
    yield
    C.reset()


@pytest.fixture(autouse=True)
def _fresh_capture(monkeypatch):
    install_ref_backend(monkeypatch)
    C.reset()
    yield
    C.reset()


__all__ = [n for n in dir() if not n.startswith("__")]
