"""Constructs the transformers models meet on their way to one graph
(GPT-2, LLaMA; transformers 5.17's layers), each in a small module: run
eagerly and through wick, results compared, graphs counted.

* a module class with its own __call__ that calls super().__call__
  (5.17's GradientCheckpointingLayer): inlined, nn.Module's call modelled
  at the super() call, hooks still honoured;
* @torch.no_grad() on a method (torch's decorator calls ctx.clone());
* torch.is_autocast_enabled("cpu") answered and guarded;
* ModuleList[:n] iterated; isinstance of the slice;
* Tensor.to(device=..., dtype=...) on the tensor's own device;
* user objects whose class derives from collections.abc (ABCMeta)."""
import collections.abc

import pytest
import torch
from torch import nn

from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries, reasons


class Checkpointable(nn.Module):
    """Like transformers 5.17's GradientCheckpointingLayer."""
    checkpointing = False

    def __call__(self, *args, **kwargs):
        if self.checkpointing and self.training:
            kwargs["use_cache"] = False
        return super().__call__(*args, **kwargs)


class Layer(Checkpointable):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x, scale=1.0, use_cache=True):
        y = torch.tanh(self.lin(x)) * scale
        return y + 1 if use_cache else y


class Stack(nn.Module):
    def __init__(self, d=6, n=3):
        super().__init__()
        self.layers = nn.ModuleList([Layer(d) for _ in range(n)])
        self.n_used = n - 1

    def forward(self, x):
        assert isinstance(self.layers[: self.n_used], nn.ModuleList)
        for layer in self.layers[: self.n_used]:
            x = layer(x, scale=0.5)
        return x


class Rotary(nn.Module):
    def __init__(self, d=6):
        super().__init__()
        self.register_buffer("inv", torch.rand(d), persistent=False)

    @torch.no_grad()
    def forward(self, x):
        return x * self.inv.to(device=x.device, dtype=torch.float32)


class Pairs(collections.abc.Sequence):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i >= self.n:
            raise IndexError(i)
        return (i, i * 2)


def _one_graph(fn):
    es = entries(fn)
    assert len(es) == 1, es
    assert not es[0]["eager"], es[0]["reason"]
    assert es[0]["graph_count"] == 1, reasons(fn)


@pytest.mark.parametrize("shape", [(2, 6), (4, 3, 6)])
def test_custom_call_super_call_is_one_graph(shape):
    torch.manual_seed(0)
    m = Stack().eval()
    x = torch.randn(*shape)
    with torch.no_grad():
        expected = m(x)
        got = compiled(Stack.forward)(m, x)
    assert_same(got, expected)
    _one_graph(Stack.forward)


def test_custom_call_keeps_hooks():
    """A forward hook on a layer: nn.Module.__call__ reached through the
    subclass's super().__call__ still runs it, inlined, its append to the
    test's list replayed after the graph."""
    torch.manual_seed(0)
    m = Stack().eval()
    seen = []
    h = m.layers[0].register_forward_hook(lambda mod, a, out: seen.append(1) or out * 2)
    try:
        x = torch.randn(2, 6)
        expected = m(x)
        n_eager = len(seen)
        got = compiled(Stack.forward)(m, x)
        assert_same(got, expected)
        assert len(seen) == 2 * n_eager
        one_graph(Stack.forward)
    finally:
        h.remove()


def test_custom_call_branch_follows_attribute():
    torch.manual_seed(0)
    m = Stack().train()
    Layer.checkpointing = True
    try:
        x = torch.randn(2, 6)
        expected = m(x)
        got = compiled(Stack.forward)(m, x)
        assert_same(got, expected)
    finally:
        Layer.checkpointing = False
    # the class attribute went back: a new entry or the guard catches it
    got2 = compiled(Stack.forward)(m, x)
    assert_same(got2, m(x))


def test_no_grad_decorated_method_and_to():
    torch.manual_seed(0)
    m = Rotary()
    x = torch.randn(3, 6, requires_grad=True)
    expected = m(x)
    got = compiled(Rotary.forward)(m, x)
    assert_same(got, expected)
    assert got.requires_grad == expected.requires_grad is False
    _one_graph(Rotary.forward)


def autocast_query(x):
    if torch.is_autocast_enabled("cpu"):
        return x * 2
    return x + 1


def test_is_autocast_enabled_with_device_is_guarded():
    x = torch.randn(4)
    assert_same(compiled(autocast_query)(x), autocast_query(x))
    _one_graph(autocast_query)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("cpu")
        assert_same(compiled(autocast_query)(x), x * 2)


def sequence_pairs(x):
    p = Pairs(3)
    acc = x
    for i, j in p:
        acc = acc * (i + 1) + j
    return acc + len(p) + p[1][1]


def test_abc_sequence_object_is_one_graph():
    x = torch.randn(5)
    assert_same(compiled(sequence_pairs)(x), sequence_pairs(x))
    _one_graph(sequence_pairs)


def to_variants(x):
    a = x.to(x.device)
    b = x.to(x.device, torch.float64)
    c = x.to(device="cpu", dtype=torch.float32, non_blocking=False)
    d = x.to("cpu")
    return a + 1, b * 2, c - 1, d is x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tensor_to_device_and_dtype(dtype):
    x = torch.randn(3, 4, dtype=dtype)
    assert_same(compiled(to_variants)(x), to_variants(x))
    _one_graph(to_variants)


def seq_compares(x, n):
    a = n
    checks = [
        (a, 2) == (1, 2),
        (a, 2) != (1, 2),
        [a, 3] == [1, 3],
        (a,) == [a],
        (x.shape[0], x.shape[1]) == x.shape,
        (x,) == (x,),
        (a, (a, 2)) == (1, (1, 2)),
        (a, 2) == (2, 2),
    ]
    out = x
    for i, c in enumerate(checks):
        out = out + (i + 1) * (1 if c else -1)
    return out


@pytest.mark.parametrize("n", [1, 2])
def test_tuple_and_list_equality_with_constants(n):
    """(a, 2) == (1, 2) with a tuple built during capture: compared item by
    item as Python does (it once answered False whatever the items)."""
    x = torch.zeros(2, 3)
    assert_same(compiled(seq_compares)(x, n), seq_compares(x, n))
