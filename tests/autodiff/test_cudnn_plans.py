"""wick/_cudnn_plans.py off CUDA: the cuDNN plan warm-up is a head
start only, so on a CPU graph it makes no call, and on anything it cannot
read it returns 0 instead of raising (a training graph's compile calls it;
tests/gpu/test_capture_attention_gpu.py checks what it does on a GPU)."""
import torch
import torch.nn.functional as F

import wick
import wick._C as C
from wick import _cudnn_plans


def test_cpu_training_graph_makes_no_warm_up_call(monkeypatch):
    def fn(q, k, v):
        return (F.scaled_dot_product_attention(q, k, v, is_causal=True) * 3).sum()

    g = torch.Generator().manual_seed(0)
    base = [torch.randn(2, 4, 16, 8, generator=g) for _ in range(3)]
    counts = []
    real = _cudnn_plans.warm
    monkeypatch.setattr(_cudnn_plans, "warm", lambda gr, e: counts.append(real(gr, e)) or counts[-1])
    want_in = [t.clone().requires_grad_() for t in base]
    got_in = [t.clone().requires_grad_() for t in base]
    wick.reset()
    want = fn(*want_in)
    want.backward()
    got = wick.compile(fn)(*got_in)
    got.backward()
    assert wick.stats()["autodiff"]["graphs"] >= 1
    assert counts and all(c == 0 for c in counts)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(got_in, want_in):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)


def test_warm_up_never_raises():
    g = C.Graph()
    a = g.input_like(torch.randn(3))
    g.output(g.op("exp", [a]))
    assert _cudnn_plans.warm(g, []) == 0
    assert _cudnn_plans.warm(None, None) == 0
    assert _cudnn_plans.warm_graph(None, g, []) == 0
    assert _cudnn_plans.warm_graph(object(), object(), object()) == 0
