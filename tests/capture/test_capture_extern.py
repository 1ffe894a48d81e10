"""Torch calls outside the op table enter the graph as EXTERN nodes (the
runtime calls PyTorch; capture computes their output metadata on fake
tensors): they never end a graph."""
import pytest
import torch
import torch.nn.functional as F

from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries


def matmul_fn(x, w):
    return torch.matmul(x, w) + 1


def matmul_op_fn(x, w):
    return (x @ w).relu()


def softmax_method_fn(x, w):
    return x.softmax(-1) * 2


def functional_fn(x, w):
    return F.gelu(F.layer_norm(x, (x.shape[-1],))) + F.softmax(x, dim=0)


def index_fn(x, w):
    return x[0] + x[:, 1:3].sum() + x[..., None][1, 2]


def floordiv_fn(x, w):
    return x // 2 + x % 3


def views_fn(x, w):
    b, n = x.shape
    y = x.view(n, b).transpose(0, 1).contiguous().reshape(-1)
    return y.unsqueeze(0).expand(3, -1) * 2


def cat_stack_fn(x, w):
    return torch.cat([x, x * 2], dim=0).sum(0) + torch.stack((x, x)).mean(0)[0]


def factory_fn(x, w):
    return x + torch.ones(x.shape[-1]) * torch.arange(x.shape[-1], dtype=x.dtype)


def masked_fn(x, w):
    mask = x > 0
    return x.masked_fill(mask, 0.0) + torch.where(mask, x, torch.zeros_like(x))


def tuple_out_fn(x, w):
    values, idx = torch.max(x, dim=1)
    return values + idx.to(x.dtype), torch.chunk(x, 2, dim=1)[1]


def attribute_fn(x, w):
    return x.T @ x + x.mT.sum()


def iterate_fn(x, w):
    acc = 0
    for row in x:
        acc = acc + row.sin()
    return acc


NATIVE_NOW = {softmax_method_fn, functional_fn, index_fn, views_fn, iterate_fn, factory_fn, masked_fn}
CASES = [matmul_fn, matmul_op_fn, softmax_method_fn, functional_fn, index_fn, floordiv_fn, views_fn,
         cat_stack_fn, factory_fn, masked_fn, tuple_out_fn, attribute_fn, iterate_fn]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(4, 6), (2, 4)])
def test_extern_ops_stay_in_one_graph(fn, shape):
    x = torch.randn(*shape)
    w = torch.randn(shape[1], 3)
    assert_same(compiled(fn)(x, w), fn(x, w), rtol=1e-5, atol=1e-5)
    es = entries(fn)
    assert es and all(not e["eager"] and e["graph_count"] == 1 for e in es), [e.get("reason") for e in es]
    if fn in NATIVE_NOW:  # every call maps to a native node (views, softmax, layer_norm: test_capture_native.py)
        assert "EXTERN" not in es[0]["graph"]
    else:
        assert "EXTERN" in es[0]["graph"]


def test_extern_on_noncontiguous_inputs():
    x = torch.randn(6, 4).t()
    w = torch.randn(6, 3)
    assert_same(compiled(matmul_fn)(x, w), matmul_fn(x, w), rtol=1e-5, atol=1e-5)
