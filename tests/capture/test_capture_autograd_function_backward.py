"""Custom torch.autograd.Functions called where a backward is recorded
(training: an argument requires grad, grad mode on).

The call is an extern node of the graph, as torch's own Functions are: the
compiled forward calls Fn.apply, and wick's autodiff gets the gradient by
calling it again under autograd on the saved inputs, so the user's own
backward runs (wick/_autodiff.py _RecomputedGradient). A Function whose
forward draws random numbers would draw others when recomputed: its graph
goes to AOTAutograd instead, which runs the forward once. A dict of plain
items held by the module (YOSO's lsh_config) reaches the Function as a copy
that refuses changes: a Function that changes it fails the graph, and the
frame runs eagerly, changing the real dict. Gradients are compared with
eager's, which runs the same backward."""
import pytest
import torch
import torch.nn as nn

import wick
from test_capture_util import *  # noqa: F401,F403
from test_breaks_inplace import t


class RoundSTE(torch.autograd.Function):
    """Straight-through rounding, as quantization-aware training uses."""

    @staticmethod
    def forward(ctx, x, scale):
        return torch.round(x / scale) * scale

    @staticmethod
    def backward(ctx, g):
        return g, None


class ScaledSquare(torch.autograd.Function):
    """A backward that is not the forward's derivative: eager's, not autodiff's, must win."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gx = 3 * x * w * g if ctx.needs_input_grad[0] else None
        gw = (x * g).sum_to_size(w.shape) if ctx.needs_input_grad[1] else None
        return gx, gw


class TwoOut(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin(), x.cos()

    @staticmethod
    def backward(ctx, ga, gb):
        (x,) = ctx.saved_tensors
        return ga * x.cos() - gb * x.sin()


class NoisyIdentity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x + 0.01 * torch.randn_like(x)

    @staticmethod
    def backward(ctx, g):
        return g


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.w = nn.Parameter(torch.rand(6) + 0.5)
        self.b = nn.Linear(6, 3)

    def forward(self, x):
        h = RoundSTE.apply(self.a(x), 0.25)
        h = ScaledSquare.apply(h, self.w)
        s, c = TwoOut.apply(h)
        return self.b(s + c * h)


def pair():
    torch.manual_seed(0)
    me = Net()
    torch.manual_seed(0)
    return me, Net()


@pytest.mark.parametrize("shape", [(4, 6), (2, 3, 6)])
def test_user_backward_runs_in_one_graph(shape):
    me, mc = pair()
    wick.reset()
    f = wick.compile(mc)
    x = t(*shape, seed=1).requires_grad_()
    xc = x.detach().clone().requires_grad_()
    me(x).square().sum().backward()
    for _ in range(2):
        for p in mc.parameters():
            p.grad = None
        xc.grad = None
        f(xc).square().sum().backward()
    torch.testing.assert_close(xc.grad, x.grad)
    for (n, a), b in zip(me.named_parameters(), mc.parameters()):
        torch.testing.assert_close(b.grad, a.grad, msg=n)
    assert stats_counts() == (1, 0, 0), wick.stats()


def test_inference_still_inlines_the_forward():
    me, mc = pair()
    wick.reset()
    f = wick.compile(mc)
    x = t(4, 6, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(f(x), me(x))
    assert stats_counts() == (1, 0, 0), wick.stats()


def noisy(x, w):
    return NoisyIdentity.apply(x * w).sum()


def test_random_forward_is_not_recomputed():
    # AOTAutograd takes the graph: the gradient is the user's (g), whatever was drawn
    from wick import _autodiff

    before = _autodiff.stats()["fallbacks"]
    f = compiled(noisy)
    x, w = t(5, seed=3), t(5, seed=4).requires_grad_()
    f(x, w).backward()
    torch.testing.assert_close(w.grad, x)
    one_graph(noisy)
    assert _autodiff.stats()["fallbacks"] == before + 1
    assert any("random" in r for r in _autodiff.stats()["reasons"]), _autodiff.stats()


class Configured(torch.autograd.Function):
    """YOSO's pattern: a config dict held by the module goes to the Function."""

    @staticmethod
    def forward(ctx, x, config):
        ctx.scale = config["scale"]
        if config.get("count"):
            config["calls"] = config.get("calls", 0) + 1  # a Function that changes it
        return x * config["scale"] + len(config)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale, None


class ConfigNet(nn.Module):
    def __init__(self, count=False):
        super().__init__()
        self.lin = nn.Linear(5, 5)
        self.config = {"scale": 1.5, "mode": "x"}
        if count:
            self.config["count"] = True

    def forward(self, x):
        return Configured.apply(self.lin(x), self.config)


@pytest.mark.parametrize("count", [False, True])
def test_dict_attribute_passed_to_a_function(count):
    torch.manual_seed(0)
    me = ConfigNet(count)
    torch.manual_seed(0)
    mc = ConfigNet(count)
    wick.reset()
    f = wick.compile(mc)
    x = t(5, 3, seed=3).t()  # non-contiguous
    for _ in range(3):
        me.zero_grad()
        mc.zero_grad()
        ye, yc = me(x), f(x)
        torch.testing.assert_close(yc, ye)
        ye.sum().backward()
        yc.sum().backward()
        for a, b in zip(me.parameters(), mc.parameters()):
            torch.testing.assert_close(b.grad, a.grad)
        assert mc.config == me.config and type(mc.config) is dict
    if not count:
        assert stats_counts() == (1, 0, 0), wick.stats()
