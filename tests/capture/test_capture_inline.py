"""Calls of plain Python functions of the frame's own module, and of
methods of argument objects (self.helper(x)), are inlined into the one
graph; what cannot be inlined falls back with the callee's file:line."""
import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403  (fixtures and helpers)
from test_capture_util import assert_same, compiled, entries, reasons


def gelu(h, c=0.044715):
    return 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + c * h * h * h)))


def normalize(x, *, eps):
    return x / (x.abs().sum(-1, keepdim=True) + eps)


def block(x, b):
    return normalize(gelu(x + b), eps=1e-5), gelu(x, c=0.1), gelu(h=b)


def twice(f, x):
    return f(f(x))


def uses_twice(x):
    return twice(gelu, x)


@pytest.mark.parametrize("backend", ["ref", "wick"])
def test_helpers_are_inlined_into_one_graph(backend):
    x, b = torch.randn(3, 5), torch.randn(5)
    r = compiled(block, backend)(x, b)
    assert_same(r, block(x, b))
    (e,) = entries(block)
    assert not e["eager"] and e["graph_count"] == 1
    assert e["graph"].count("TANH") == 3
    r = compiled(uses_twice, backend)(x)
    assert_same(r, uses_twice(x))
    assert not entries(uses_twice)[0]["eager"]


def test_changing_a_helper_recompiles():
    global gelu
    saved = gelu
    x, b = torch.randn(2, 5), torch.randn(5)
    cf = compiled(block, "ref")
    try:
        cf(x, b)
        gelu = lambda h, c=0: h * 2  # noqa: E731
        assert_same(cf(x, b), block(x, b))
        assert len(entries(block)) == 2
    finally:
        gelu = saved


class Scaler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(5))

    def helper(self, x, k=2):
        return x * self.w * k

    def forward(self, x):
        return self.helper(x) + self.helper(x, k=3)


def test_methods_of_self_are_inlined():
    m = Scaler()
    x = torch.randn(3, 5)
    with torch.no_grad():
        assert_same(compiled(Scaler.forward, "ref")(m, x), m(x))
    (e,) = entries(Scaler.forward)
    assert not e["eager"] and e["op_count"] == 5


def noisy(x):
    y = x + 1
    print("wick-inline-print")
    return y


def calls_noisy(x):
    return noisy(x) * 2


def test_unsupported_callee_reports_its_line(capsys):
    x = torch.randn(3)
    assert_same(compiled(calls_noisy)(x), calls_noisy(x))
    assert capsys.readouterr().out.count("wick-inline-print") == 2  # eager and compiled
    (reason,) = reasons(calls_noisy)  # a graph break at the call: the callee runs as its own frame
    assert "print" in reason
    import inspect

    line = inspect.getsourcelines(noisy)[1] + 2
    assert reason.endswith(f"{__file__}:{line}"), reason
    with pytest.raises(C.UnsupportedError, match="print"):
        C.reset()
        compiled(calls_noisy, fullgraph=True)(x)


def star_args(*xs):
    return xs[0]


def calls_star(x):
    return star_args(x) + 1


def test_varargs_callee_is_inlined():
    x = torch.randn(3)
    assert_same(compiled(calls_star)(x), x + 1)
    (e,) = entries(calls_star)
    assert not e["eager"] and e["graph_count"] == 1


def quick(x):
    return test_capture_util.util_quick_gelu(x) + util_quick_gelu(x)


import test_capture_util  # noqa: E402
from test_capture_util import util_quick_gelu  # noqa: E402


def test_helpers_of_other_modules_are_inlined_and_guarded():
    x = torch.randn(4, 3)
    cf = compiled(quick, "ref")
    assert_same(cf(x), quick(x))
    (e,) = entries(quick)
    assert not e["eager"] and e["graph"].count("SIGMOID") == 2
    assert any("test_capture_util.UTIL_ALPHA" in g for g in e["guards"]), e["guards"]
    saved = test_capture_util.UTIL_ALPHA
    try:
        test_capture_util.UTIL_ALPHA = 2.0  # that module's global: recompiles
        assert_same(cf(x), quick(x))
        assert len(entries(quick)) == 2
    finally:
        test_capture_util.UTIL_ALPHA = saved


def test_no_reference_leaks_through_inlining_modules_and_globals():
    import gc
    import sys

    from test_capture_guards import f_global_tensor
    from test_capture_modules import Affine

    m = Affine()
    x = torch.randn(4, 5)
    calls = [(compiled(quick, "ref"), (x,)), (compiled(Affine.forward, "ref"), (m, x)),
             (compiled(f_global_tensor, "ref"), (x,)), (compiled(block, "ref"),
                                                       (x, x[0]))]
    with torch.no_grad():
        for cf, args in calls:
            for _ in range(10):
                cf(*args)
        gc.collect()
        before = [sys.getrefcount(o) for o in (m, x, m.weight, m.shift)]
        objs = len(gc.get_objects())
        for cf, args in calls:
            for _ in range(3000):
                cf(*args)
        gc.collect()
        after = [sys.getrefcount(o) for o in (m, x, m.weight, m.shift)]
    assert after == before
    assert len(gc.get_objects()) - objs < 100
