"""A module's attribute holding a functools.partial (transformers' GELUTanh:
self.act = functools.partial(F.gelu, approximate="tanh"), Gemma's MLP) or a
class (a module's autograd.Function or layer class). The partial is pinned
by identity and called as a partial made in the frame would be: its func (a
torch callable or a Python function) with its bound arguments and keywords,
the call's keywords overriding them. A partial binding anything but plain
values (a tensor) is a graph break. Replacing the attribute recompiles.
Each against eager on random values, graph counts pinned."""
import functools

import pytest
import torch
import torch.nn.functional as F

import wick
from test_breaks_inplace import t
from test_capture_util import stats_counts


def poly(k, x, beta=0.0, y=None):
    return x * k + beta if y is None else x * k + y


class Holder(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)
        self.act = act

    def forward(self, x):
        return self.act(self.lin(x))


class TwoArg(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x, beta=0.25)


class WithClass(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.kind = torch.nn.LayerNorm
        self.norm = torch.nn.LayerNorm(6)

    def forward(self, x):
        return self.norm(x) * 2 if isinstance(self.norm, self.kind) else x


def run(m, *shapes, expect=(1, 0, 0), dtype=torch.float32):
    wick.reset()
    f = wick.compile(m)
    for seed in range(2):
        x = t(*shapes, seed=seed, dtype=dtype)
        with torch.no_grad():
            torch.testing.assert_close(f(x), m(x))
    assert stats_counts() == expect, wick.stats()
    return f


@pytest.mark.parametrize("shape", [(3, 6), (2, 4, 6), (0, 6)])
def test_partial_of_torch_function(shape):
    run(Holder(functools.partial(F.gelu, approximate="tanh")).eval(), *shape)


@pytest.mark.parametrize("shape", [(3, 6), (6,), ()])
def test_partial_of_python_function_with_arguments_and_keywords(shape):
    # a bound positional argument first, the call's beta joining it
    run(TwoArg(functools.partial(poly, 3.0)), *shape)
    # the call's beta overrides the partial's
    run(TwoArg(functools.partial(poly, 3.0, beta=7.0)), *shape)


def test_partial_binding_a_tensor_is_a_break():
    m = TwoArg(functools.partial(poly, 2.0, y=t(3, 6, seed=4)))
    wick.reset()
    f = wick.compile(m)
    x = t(3, 6, seed=5)
    for _ in range(2):
        torch.testing.assert_close(f(x), m(x))
    st = wick.stats()
    assert st["breaks"] + len(st["fallbacks"]) >= 1, st
    assert any("partial" in r for r in st["break_reasons"] + [str(r) for r in st["fallbacks"]]), st


def test_replacing_the_partial_recompiles():
    m = Holder(functools.partial(F.gelu, approximate="tanh")).eval()
    f = run(m, 4, 6)
    m.act = functools.partial(F.gelu, approximate="none")
    x = t(4, 6, seed=8)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x))
    m.act = functools.partial(F.leaky_relu, negative_slope=0.3)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x))


def test_class_attribute():
    run(WithClass(), 3, 6)
