"""Custom torch.autograd.Function called inside a captured frame
(transformers' Bloom: GeLUFunction.apply in its MLP). Where the call records
no backward (grad mode off, or no tensor argument requires grad) eager runs
forward(ctx, *args) (new style: forward(*args), then setup_context) and
marks the outputs; capture inlines the same calls with a ctx of its own, so
the forward's ops join the graph. ctx.needs_input_grad reads as eager's
(each tensor's requires_grad, under no_grad too). A call that records a
backward is an extern call whose gradient is the call again under autograd,
so the user's backward runs as in eager (test_capture_autograd_function_
backward.py); a forward returning an argument itself (eager returns a view
of it) runs eagerly after a break. Each against eager on random values,
graph counts pinned."""
import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import module_twice_no_grad
from test_breaks_inplace import SHAPES, check, t


class ScaledTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        y = torch.tanh(x) * scale
        return y + (1.0 if ctx.needs_input_grad[0] else 0.0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * ctx.scale * (1 - torch.tanh(x) ** 2) * 3.0, None  # deliberately not the true gradient


class SplitPair(torch.autograd.Function):
    """new style: forward without ctx, setup_context after it; two outputs"""

    @staticmethod
    def forward(x, y):
        return x * y, x - y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, ga, gb):
        x, y = ctx.saved_tensors
        return ga * y, ga * x


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return g


def no_grad_scaled(x):
    with torch.no_grad():
        return ScaledTanh.apply(x.cos(), 2.5) + 1


def plain_scaled(x):
    # grad mode on, x needs no grad: no backward is recorded
    return ScaledTanh.apply(x * 2, 0.5).sum(-1)


def split_pair(x, y):
    a, b = SplitPair.apply(x.exp(), y)
    return a + b


def returns_argument(x):
    return Identity.apply(x + 1) * 2


@pytest.mark.parametrize("shape", SHAPES)
def test_no_backward_calls_are_one_graph(shape):
    check(no_grad_scaled, lambda: [t(*shape)], (1, 0, 0), dynamo=False)
    check(plain_scaled, lambda: [t(*shape, seed=1)], (1, 0, 0), dynamo=False)
    check(split_pair, lambda: [t(*shape, seed=2), t(*shape, seed=3)], (1, 0, 0), dynamo=False)


def test_float64_and_strided_inputs():
    check(no_grad_scaled, lambda: [t(6, 4, dtype=torch.float64).t()], (1, 0, 0), dynamo=False)


def test_bfloat16_within_its_rounding():
    # the fused kernel rounds once, eager after every op: within bf16's step
    C.reset()
    cf = compiled(no_grad_scaled)
    x = t(6, 4, dtype=torch.bfloat16).t()
    got, exp = cf(x), no_grad_scaled(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, exp, rtol=2e-2, atol=2e-2)
    one_graph(no_grad_scaled)


def test_needs_input_grad_under_no_grad_is_eagers():
    # x requires grad: under no_grad eager's ctx still reports True (forward adds 1.0)
    C.reset()
    cf = compiled(no_grad_scaled)
    x = t(4, 5, seed=4).requires_grad_()
    exp = no_grad_scaled(x)
    got = cf(x)
    torch.testing.assert_close(got, exp)
    assert not got.requires_grad
    one_graph(no_grad_scaled)


def test_a_call_recording_a_backward_runs_the_users_backward():
    C.reset()
    cf = compiled(plain_scaled)
    xe = t(3, 4, seed=5).requires_grad_()
    xc = xe.detach().clone().requires_grad_()
    exp, got = plain_scaled(xe), cf(xc)
    torch.testing.assert_close(got, exp)
    exp.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(xc.grad, xe.grad)  # the deliberately scaled gradient: the user's backward ran
    one_graph(plain_scaled)


def test_returning_an_argument_is_refused_and_runs_eagerly():
    C.reset()
    cf = compiled(returns_argument)
    x = t(5, seed=6)
    torch.testing.assert_close(cf(x), returns_argument(x))
    assert any("returning an argument" in r for r in reasons(returns_argument)), reasons(returns_argument)


class BloomStyleGelu(torch.nn.Module):
    class _Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

        @staticmethod
        def backward(ctx, g):
            raise AssertionError("inference only")

    def forward(self, x):
        return self._Fn.apply(x)


def test_module_calling_a_function_in_eval():
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), BloomStyleGelu(), torch.nn.Linear(16, 4)).eval()
    exp, got, counts = module_twice_no_grad(m, t(3, 8, seed=7))
    torch.testing.assert_close(got, exp)
    assert counts == (1, 0, 0), counts
