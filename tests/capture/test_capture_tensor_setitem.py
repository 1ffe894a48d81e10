"""Tensor item assignment and in-place tensor methods on intermediates
(T5's _shift_right: `shifted[..., 1:] = ids[..., :-1]`, then
`shifted.masked_fill_(...)`): an extern node running the write on a clone
(wick._capture_meta.Functional), whose result the
tensor then stands for. An input written so is copied back after the
graph; on views or viewed tensors the in-place update is not modelled (the
frame breaks or runs eagerly: results equal)."""
import pytest
import torch

from test_capture_util import *  # noqa: F401,F403  (fixtures and helpers)
from test_capture_util import assert_same, compiled, one_graph, reasons


def shift_right(ids):
    s = ids.new_zeros(ids.shape)
    s[..., 1:] = ids[..., :-1].clone()
    s[..., 0] = 7
    s.masked_fill_(s == -100, 0)
    return s


def setitem_int_and_tensor_value(x):
    y = x * 2
    y[0] = x[1] + 1
    y[:, 1] = 0.5
    return y.sin()


def setitem_mask(x):
    y = x.clone() + 0
    y[y > 0] = 0.0
    return y


def setitem_tensor_index(x, idx):
    y = x + 1
    y[idx] = -1.0
    return y


def setitem_0d(x):
    y = x.sum() * 1
    y[()] = 3.0
    return y + x.mean()


def setitem_empty(x):
    y = x + 1
    y[:0] = 5.0
    return y


def inplace_methods(x):
    y = x * 3
    y.clamp_(-1.0, 1.0)
    y.masked_fill_(y < -0.5, 0.25)
    y.index_fill_(1, torch.tensor([0]), 2.0)
    z = (x + 0).mul_(2).add_(x, alpha=0.5)
    return y, z


def inplace_dtype_promotion_stays(x):
    y = x.to(torch.float64) * 1
    y.add_(x)  # float32 added into float64: y keeps float64
    return y


CASES = [
    (shift_right, lambda: (torch.randint(-100, 50, (2, 6)),)),
    (shift_right, lambda: (torch.randint(0, 50, (3, 1)),)),
    (setitem_int_and_tensor_value, lambda: (torch.randn(3, 4),)),
    (setitem_int_and_tensor_value, lambda: (torch.randn(4, 6).t(),)),  # non-contiguous input
    (setitem_mask, lambda: (torch.randn(5, 3),)),
    (setitem_tensor_index, lambda: (torch.randn(6), torch.tensor([0, 3, 5]))),
    (setitem_0d, lambda: (torch.randn(4),)),
    (setitem_empty, lambda: (torch.randn(3, 2),)),
    (setitem_empty, lambda: (torch.randn(0, 2),)),
    (inplace_methods, lambda: (torch.randn(3, 4),)),
    (inplace_dtype_promotion_stays, lambda: (torch.randn(3),)),
]


@pytest.mark.parametrize("fn,make", CASES, ids=[f"{f.__name__}{i}" for i, (f, _) in enumerate(CASES)])
def test_setitem_and_inplace_methods_one_graph(fn, make):
    args = make()
    with torch.no_grad():
        expected = fn(*args)
        got = compiled(fn)(*args)
    assert_same(got, expected)
    one_graph(fn)


def grad_through_setitem(x, v):
    y = x * 2
    y[1:, 0] = v * 3
    y.masked_fill_(y > 1.5, 0.0)
    return (y * y).sum()


def test_setitem_forward_backward():
    x, v = torch.randn(4, 3), torch.randn(3)
    xa, va = x.clone().requires_grad_(), v.clone().requires_grad_()
    xb, vb = x.clone().requires_grad_(), v.clone().requires_grad_()
    want = torch.autograd.grad(grad_through_setitem(xa, va), [xa, va])
    got = torch.autograd.grad(compiled(grad_through_setitem)(xb, vb), [xb, vb])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    one_graph(grad_through_setitem)


def setitem_on_input(x):
    x[0] = 1.0
    return x * 2


def setitem_on_view(x):
    y = x + 0
    v = y[1:]
    v[0] = 9.0  # writes through to y
    return y


def setitem_on_viewed(x):
    y = x + 0
    v = y[1:]
    y[1] = 9.0  # v sees it
    return v * 1


def test_setitem_on_input_is_written_back():
    # an input written in place: the graph computes the new value, the
    # transformed code copies it into the caller's tensor after the graph
    x = torch.randn(3, 2)
    x1, x2 = x.clone(), x.clone()
    with torch.no_grad():
        expected = setitem_on_input(x1)
        got = compiled(setitem_on_input)(x2)
    assert_same(got, expected)
    assert torch.equal(x1, x2)
    one_graph(setitem_on_input)


@pytest.mark.parametrize("fn", [setitem_on_view, setitem_on_viewed])
def test_setitem_on_aliased_tensors_is_not_modelled(fn):
    x = torch.randn(3, 2)
    x1, x2 = x.clone(), x.clone()
    with torch.no_grad():
        expected = fn(x1)
        got = compiled(fn)(x2)
    assert_same(got, expected)
    assert torch.equal(x1, x2)  # the input changed (or not) the same way
    assert any("view" in r or "input" in r for r in reasons(fn)), reasons(fn)
