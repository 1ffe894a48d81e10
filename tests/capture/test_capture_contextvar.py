"""contextvars.ContextVar set/get/reset during capture: a per-capture overlay
holds what the frame set, so a frame that sets and resets a variable (as
transformers' output collector does around forward) is one graph and leaves
the variable as eager Python would; a frame whose variable is not back at
its entry state, or that reads a variable it did not set, falls back with a
reason. Each function is compared with eager and its graph count asserted."""
import contextvars

import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import compiled, fallbacks, graphs, reasons

VAR = contextvars.ContextVar("wick_test_var", default=None)
VAR2 = contextvars.ContextVar("wick_test_var2", default=None)


class Holder:  # a global instance holding a ContextVar, as transformers' CompileableContextVar
    def __init__(self):
        self.var = contextvars.ContextVar("wick_test_holder", default=None)
        self.compiling = False

    def get(self):
        if self.compiling:
            return None
        return self.var.get()

    def set(self, v):
        return self.var.set(v)

    def reset(self, tok):
        self.var.reset(tok)


HOLDER = Holder()


def _scale_from_var(t):
    return t * VAR.get()["scale"]


def set_get_reset(x):
    tok = VAR.set({"scale": 3.0})
    y = _scale_from_var(x.sin())
    VAR.reset(tok)
    return y + 1


def nested_sets(x):
    t1 = VAR.set(2.0)
    a = x * VAR.get()
    t2 = VAR.set(5.0)
    b = x * VAR.get()
    VAR.reset(t2)
    c = x * VAR.get()
    VAR.reset(t1)
    return a + b + c


def two_vars_and_none_check(x):
    t1 = VAR.set([])
    t2 = VAR2.set(4.0)
    VAR.get().append(x.cos())
    if t1 is not None:
        out = VAR.get()[0] * VAR2.get()
    VAR2.reset(t2)
    VAR.reset(t1)
    return out


def holder_collects(x):
    tok = HOLDER.set({"seen": []})
    h = x.relu()
    HOLDER.get()["seen"].append(h)
    h = h * 2
    HOLDER.get()["seen"].append(h)
    seen = HOLDER.get()["seen"]
    HOLDER.reset(tok)
    return h, tuple(seen)


def set_and_leave(x):
    VAR.set(7.0)
    return x + 1


def get_unset(x):
    v = VAR.get()
    return x + (0 if v is None else v)


def _check_one_graph(fn, x):
    before = VAR.get(), VAR2.get(), HOLDER.var.get()
    expected = fn(x)
    got = compiled(fn)(x)
    assert_same(got, expected)
    assert (VAR.get(), VAR2.get(), HOLDER.var.get()) == before
    assert len(graphs(fn)) == 1 and not fallbacks(fn), fallbacks(fn)
    # a second call runs the compiled code, with the same result and no net effect
    got = compiled(fn)(x)
    assert_same(got, expected)
    assert (VAR.get(), VAR2.get(), HOLDER.var.get()) == before


def test_set_get_reset_one_graph():
    for shape in [(3, 4), (0, 2), ()]:
        C.reset()
        _check_one_graph(set_get_reset, torch.randn(shape))


def test_nested_sets_one_graph():
    C.reset()
    _check_one_graph(nested_sets, torch.randn(5, 3).t())


def test_two_vars_one_graph():
    C.reset()
    _check_one_graph(two_vars_and_none_check, torch.randn(4, 6))


def test_global_holder_one_graph():
    C.reset()
    _check_one_graph(holder_collects, torch.randn(2, 3, dtype=torch.float64))


def test_set_without_reset_falls_back_and_sets_like_eager():
    C.reset()
    x = torch.randn(3)
    ctx = contextvars.copy_context()
    got = ctx.run(compiled(set_and_leave), x)
    torch.testing.assert_close(got, x + 1)
    assert ctx[VAR] == 7.0  # the frame ran eagerly: the variable is set as Python sets it
    fb = fallbacks(set_and_leave)
    assert fb and "ContextVar" in fb[0]["reason"]


def test_get_of_unset_variable_falls_back():
    C.reset()
    x = torch.randn(3)
    ctx = contextvars.copy_context()
    ctx.run(VAR.set, 2.5)
    got = ctx.run(compiled(get_unset), x)
    torch.testing.assert_close(got, x + 2.5)
    got = compiled(get_unset)(x)
    torch.testing.assert_close(got, x)
    rs = reasons(get_unset)  # the get() runs in Python at a graph break
    assert rs and "ContextVar" in rs[0]
