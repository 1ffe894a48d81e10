"""nn.Module objects constructed inside the captured frame (vals/newmodule.c):
loss modules built in forward, nn.Identity/ReLU/Dropout, Sequential, user
Module subclasses; each compared with eager and its graph count asserted.

A module that leaves the frame is rebuilt after the graph (a real Module:
its __init__ bookkeeping, buffers, submodules, training flag). nn.Linear
built in forward makes Parameters (a new random leaf every call, which no
graph input stands for): the frame breaks there and that instruction runs
eagerly."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import wick._C as C
from test_capture_util import *  # noqa: F401,F403  (fixtures and helpers)
from test_capture_util import assert_same, compiled, entries, one_graph, reasons


def ce_default(x, y):
    return nn.CrossEntropyLoss()(x, y)


def ce_keywords(x, y):
    loss = nn.CrossEntropyLoss(ignore_index=1, reduction="sum", label_smoothing=0.1)
    return loss(x, y) * 2


def ce_weight(x, y, w):
    return nn.CrossEntropyLoss(weight=w)(x, y)


def mse_and_l1(x, t):
    return nn.MSELoss(reduction="sum")(x, t) + nn.L1Loss()(x, t)


def identity_relu(x):
    a = nn.Identity(3, unused=True)(x)
    return nn.ReLU()(a) + nn.ReLU(inplace=False)(-a)


def dropout_eval(x):
    d = nn.Dropout(0.5)
    d.eval()
    return d(x) * 2 + nn.Dropout(p=0.3).train(False)(x)


def dropout_zero_train(x):
    return nn.Dropout(0.0)(x) + 1  # training mode, p=0: dropout keeps every element


def sequential(x):
    s = nn.Sequential(nn.Tanh(), nn.Softmax(dim=-1), nn.Identity())
    return s(x), len(s)


def gelu_and_softmax(x):
    return nn.GELU(approximate="tanh")(x), nn.LogSoftmax(dim=1)(x)


class Scaled(nn.Module):
    """A user Module subclass made in forward: attributes, a buffer computed
    from the input, a submodule, its own forward and property."""

    def __init__(self, scale, ref):
        super().__init__()
        self.scale = scale
        self.register_buffer("offset", ref.mean(0))
        self.act = nn.Tanh()

    @property
    def double_scale(self):
        return self.scale * 2

    def forward(self, x):
        return self.act(x * self.double_scale + self.offset)


def user_module(x):
    m = Scaled(1.5, x)
    return m(x) + m.offset, m.training, isinstance(m, nn.Module)


class Stack(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = nn.ModuleList([nn.ReLU() for _ in range(n)])
        self.add_module("last", nn.Sigmoid())

    def forward(self, x):
        for layer in self.layers:
            x = layer(x) - 0.5
        return self.last(x)


def module_list_inside(x):
    return Stack(3)(x)


def missing_attribute(x):
    m = nn.ReLU()
    try:
        m.nope
    except AttributeError:
        return m(x) - 1
    return x


def attribute_reassigned(x):
    m = Scaled(2.0, x)
    m.act = nn.Sigmoid()   # a module replaces a module
    m.offset = x[0] * 0    # a registered buffer takes a new tensor
    m.scale = 0.25
    return m(x)


SMALL = [
    (ce_default, lambda: (torch.randn(6, 5), torch.randint(0, 5, (6,)))),
    (ce_keywords, lambda: (torch.randn(7, 4), torch.randint(0, 4, (7,)))),
    (ce_weight, lambda: (torch.randn(6, 5), torch.randint(0, 5, (6,)), torch.rand(5) + 0.5)),
    (mse_and_l1, lambda: (torch.randn(3, 4), torch.randn(3, 4))),
    (identity_relu, lambda: (torch.randn(4, 5),)),
    (dropout_eval, lambda: (torch.randn(4, 5),)),
    (dropout_zero_train, lambda: (torch.randn(2, 3, 4),)),
    (sequential, lambda: (torch.randn(3, 6),)),
    (gelu_and_softmax, lambda: (torch.randn(3, 6),)),
    (user_module, lambda: (torch.randn(4, 3),)),
    (module_list_inside, lambda: (torch.randn(4, 3),)),
    (missing_attribute, lambda: (torch.randn(4, 3),)),
    (attribute_reassigned, lambda: (torch.randn(4, 3),)),
]


@pytest.mark.parametrize("fn,make", SMALL, ids=[f.__name__ for f, _ in SMALL])
def test_module_made_in_frame_is_one_graph(fn, make):
    args = make()
    with torch.no_grad():
        expected = fn(*args)
        got = compiled(fn)(*args)
    assert_same(got, expected)
    one_graph(fn)
    # a second call with other values reuses the entry
    args2 = tuple(a.clone() if a.is_floating_point() else a for a in make())
    with torch.no_grad():
        assert_same(compiled(fn)(*args2), fn(*args2))
    assert len(entries(fn)) == 1


@pytest.mark.parametrize("fn,make", [s for s in SMALL if s[0] not in (missing_attribute,)],
                         ids=[f.__name__ for f, _ in SMALL if f is not missing_attribute])
def test_module_made_in_frame_forward_backward(fn, make):
    args = make()
    # the input requires grad (a loss's class weight may not: torch refuses it)
    leaves = [a.clone().requires_grad_(i == 0) for i, a in enumerate(args)]
    leaves2 = [a.clone().requires_grad_(i == 0) for i, a in enumerate(args)]

    def loss(out):
        outs = out if isinstance(out, tuple) else (out,)
        g = torch.Generator().manual_seed(3)
        return sum((o * torch.randn(o.shape, generator=g)).sum() for o in outs
                   if isinstance(o, torch.Tensor) and o.requires_grad)

    want = torch.autograd.grad(loss(fn(*leaves)), [a for a in leaves if a.requires_grad])
    got = torch.autograd.grad(loss(compiled(fn)(*leaves2)), [a for a in leaves2 if a.requires_grad])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    one_graph(fn)


def returns_module(x):
    m = Scaled(0.5, x)
    m.eval()
    return m, m(x)


def test_module_leaving_the_frame_is_rebuilt():
    x = torch.randn(4, 3)
    with torch.no_grad():
        em, ey = returns_module(x)
        gm, gy = compiled(returns_module)(x)
    one_graph(returns_module)
    assert type(gm) is Scaled and gm is not em
    assert gm.training is False and gm.act.training is False and gm.scale == 0.5
    assert_same(gy, ey)
    assert list(gm.state_dict()) == list(em.state_dict()) == ["offset"]
    assert_same(gm.offset, em.offset)
    assert [n for n, _ in gm.named_modules()] == [n for n, _ in em.named_modules()]
    # a real module: hooks, calls and repr work as on eager's
    seen = []
    gm.register_forward_hook(lambda *a: seen.append(1))
    assert_same(gm(x), em(x))
    assert seen == [1] and repr(gm) == repr(em)


def linear_in_forward(x):
    lin = nn.Linear(3, 2)
    return lin(x).relu() + 1


def test_linear_built_in_forward_breaks_there():
    """nn.Linear.__init__ makes Parameters (fresh random leaves on every
    call): not modelled, so the frame breaks before the construction, which
    runs eagerly and draws the same random numbers as eager does."""
    x = torch.randn(4, 3)
    torch.manual_seed(5)
    with torch.no_grad():
        expected = linear_in_forward(x)
    torch.manual_seed(5)
    with torch.no_grad():
        got = compiled(linear_in_forward)(x)
    assert_same(got, expected)
    rs = reasons(linear_in_forward)
    assert rs and any("Parameter" in r for r in rs), rs


def test_global_registration_hook_is_guarded():
    """Module construction would call global registration hooks: capture
    models it only while none exist, guarded."""
    fn = sequential
    x = torch.randn(3, 6)
    with torch.no_grad():
        compiled(fn)(x)
    one_graph(fn)
    calls = []
    h = torch.nn.modules.module.register_module_module_registration_hook(
        lambda mod, name, sub: calls.append(name))
    try:
        with torch.no_grad():
            got = compiled(fn)(x)
            assert_same(got, fn(x))
        assert calls.count("0") == 2  # once in wick's call, once in eager's
    finally:
        h.remove()


def test_class_changes_are_guarded():
    x = torch.randn(4, 3)
    with torch.no_grad():
        assert_same(compiled(user_module)(x), user_module(x))
        old = Scaled.forward
        Scaled.forward = lambda self, x: x * 0 + self.scale
        try:
            assert_same(compiled(user_module)(x), user_module(x))
        finally:
            Scaled.forward = old
        assert_same(compiled(user_module)(x), user_module(x))


class NoSuperInit(nn.Module):
    def __init__(self):
        pass  # Module.__init__ never runs: using it raises in eager

    def forward(self, x):
        return x


def uses_module_without_init(x):
    try:
        NoSuperInit()(x)
    except AttributeError:
        return x + 1
    return x


def test_module_without_super_init_is_not_modelled():
    x = torch.randn(3)
    with torch.no_grad():
        assert_same(compiled(uses_module_without_init)(x), uses_module_without_init(x))


class Hooked(nn.Module):
    def forward(self, x):
        return x * 2


def registers_hook_on_new_module(x):
    m = Hooked()
    m.register_forward_hook(lambda mod, inp, out: out + 1)
    return m(x)


def test_hooks_on_a_new_module_are_not_dropped():
    x = torch.randn(3)
    with torch.no_grad():
        assert_same(compiled(registers_hook_on_new_module)(x), registers_hook_on_new_module(x))


def test_after_dynamo_patched_module_init():
    """Once torch.compile has run, nn.Module.__init__ is Dynamo's patched
    wrapper (it tags modules for Dynamo): modelled as the original."""
    torch.compile(lambda a: a + 1, backend="eager")(torch.randn(2))
    x, y = torch.randn(6, 5), torch.randint(0, 5, (6,))
    with torch.no_grad():
        assert_same(compiled(ce_default)(x, y), ce_default(x, y))
    one_graph(ce_default)


def test_patched_module_method_is_inlined_not_modelled(monkeypatch):
    """A program that patches nn.Module.register_buffer gets its patch run:
    only torch's own function is modelled."""
    calls = []
    orig = nn.Module.register_buffer

    def patched(self, name, tensor, persistent=True):
        calls.append(name)
        return orig(self, name, tensor, persistent)

    monkeypatch.setattr(nn.Module, "register_buffer", patched)
    x = torch.randn(4, 3)
    with torch.no_grad():
        got = compiled(user_module)(x)
    assert_same(got, user_module(x))
    assert calls.count("offset") == 2  # once in wick's run, once in eager's
