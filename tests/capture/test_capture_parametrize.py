"""Parametrized modules (torch.nn.utils.parametrize: weight_norm as
Wav2Vec2's positional convolution uses it, and a user parametrization) and
functions marked trace-time constants (torch._dynamo's
assume_constant_result marker, which transformers puts on its lru_cache'd
install probes).

A parametrized module's weight is a property whose getter, the
ParametrizationList and weight-norm module live in torch.nn.utils.
parametrize/parametrizations; capture inlines them as module code (they
were extern calls that cannot take a module), so the weight is computed in
the graph from the original parameters and gradients reach them. A marked
function is called at capture on constant arguments and its plain result
is a constant; called without arguments and answering a bool or None it is
also guarded on that answer."""
import functools

import pytest
import torch
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm

import wick
from test_capture_util import *  # noqa: F401,F403
from test_breaks_inplace import t


class Symmetric(torch.nn.Module):
    def forward(self, w):
        return w.triu() + w.triu(1).transpose(-1, -2)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = weight_norm(torch.nn.Conv1d(4, 6, 3, padding=1), name="weight", dim=2)
        self.lin = torch.nn.Linear(6, 6)
        parametrize.register_parametrization(self.lin, "weight", Symmetric())

    def forward(self, x):
        y = self.conv(x).transpose(1, 2)
        return self.lin(torch.nn.functional.gelu(y))


def pair():
    torch.manual_seed(0)
    a = Net()
    torch.manual_seed(0)
    return a, Net()


def test_inference_is_one_graph():
    me, mc = pair()
    wick.reset()
    f = wick.compile(mc)
    for seed in range(2):
        x = t(2, 4, 9, seed=seed)
        with torch.no_grad():
            torch.testing.assert_close(f(x), me(x))
    assert stats_counts() == (1, 0, 0), wick.stats()


def test_gradients_reach_the_original_parameters():
    me, mc = pair()
    wick.reset()
    f = wick.compile(mc)
    x = t(2, 4, 9, seed=3)
    me(x).square().sum().backward()
    f(x).square().sum().backward()
    for (n, a), b in zip(me.named_parameters(), mc.parameters()):
        assert "original" in n or "bias" in n, n
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-5, msg=n)
    assert stats_counts() == (1, 0, 0), wick.stats()


def test_replaced_original_is_read_each_call():
    me, mc = pair()
    wick.reset()
    f = wick.compile(mc)
    x = t(2, 4, 9, seed=4)
    with torch.no_grad():
        f(x)
        for m in (me, mc):
            m.conv.parametrizations.weight.original0.mul_(1.5)
        torch.testing.assert_close(f(x), me(x))


PROBE_ANSWER = [True]


@functools.lru_cache
def cached_probe():
    return PROBE_ANSWER[0]


cached_probe.__wrapped__._dynamo_marked_constant = True


def scaled_by(name, k):
    return {"double": 2.0, "triple": 3.0}[name] * k


scaled_by._dynamo_marked_constant = True


def uses_probes(x):
    if cached_probe():
        x = x + 1
    return x * scaled_by("triple", 2)


def test_marked_constants_are_folded():
    f = compiled(uses_probes)
    x = t(3, 4)
    torch.testing.assert_close(f(x), uses_probes(x))
    one_graph(uses_probes)


def test_probe_answer_is_guarded():
    f = compiled(uses_probes)
    x = t(3, 4, seed=5)
    torch.testing.assert_close(f(x), (x + 1) * 6)
    try:
        PROBE_ANSWER[0] = False
        cached_probe.cache_clear()
        torch.testing.assert_close(f(x), x * 6)
    finally:
        PROBE_ANSWER[0] = True
        cached_probe.cache_clear()
    torch.testing.assert_close(f(x), (x + 1) * 6)


def test_marked_function_on_a_tensor_is_refused():
    def g(x):
        return scaled_by("double", x)

    f = compiled(g)
    x = t(3)
    torch.testing.assert_close(f(x), g(x))
    assert any("constant-marked" in r for r in reasons(g)), reasons(g)
