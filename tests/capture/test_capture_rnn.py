"""nn.LSTM, nn.GRU and nn.RNN inside a captured frame (timm's sequencer2d).
Their forward first calls self._update_flat_weights(), which rebuilds
self._flat_weights from the parameters self._flat_weights_names names when
one was replaced (a weak-reference comparison). Capture reads
self._flat_weights as those parameters through their own attribute paths,
which is what that call leaves, so the call does nothing in the graph; the
recurrent kernel (_VF.lstm, _VF.gru, ...) is an extern call on them. Each
against eager: outputs and final states, gradients in training, a replaced
parameter, several configurations."""
import pytest
import torch

import wick
from test_breaks_inplace import t
from test_capture_util import stats_counts


class Wrap(torch.nn.Module):
    def __init__(self, rnn, with_state=False):
        super().__init__()
        self.rnn = rnn
        self.with_state = with_state

    def forward(self, x, h=None):
        y, state = self.rnn(x.tanh(), h) if self.with_state else self.rnn(x.tanh())
        return y * 2, state


CONFIGS = [
    ("LSTM", dict()),
    ("LSTM", dict(batch_first=True, bidirectional=True, num_layers=2)),
    ("LSTM", dict(proj_size=3, num_layers=2)),
    ("LSTM", dict(bias=False)),
    ("GRU", dict(batch_first=True)),
    ("GRU", dict(bidirectional=True, num_layers=2)),
    ("RNN", dict(nonlinearity="relu")),
    ("RNN", dict(num_layers=2, batch_first=True)),
]


def make(kind, kw, with_state=False):
    torch.manual_seed(0)
    return Wrap(getattr(torch.nn, kind)(6, 5, **kw), with_state)


def same(a, b):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    else:
        assert type(a) is type(b) and len(a) == len(b)
        for p, q in zip(a, b):
            same(p, q)


def config_id(v):
    return v if isinstance(v, str) else "-".join(f"{k}={x}" for k, x in v.items()) or "default"


@pytest.mark.parametrize("kind,kw", CONFIGS, ids=config_id)
def test_inference_is_one_graph(kind, kw):
    m = make(kind, kw).eval()
    wick.reset()
    f = wick.compile(m)
    for seed in range(2):
        x = t(7, 3, 6, seed=seed)
        with torch.no_grad():
            same(m(x), f(x))
    assert stats_counts() == (1, 0, 0), wick.stats()


def test_unbatched_input_and_initial_state():
    m = make("LSTM", dict(num_layers=2), with_state=True).eval()
    wick.reset()
    f = wick.compile(m)
    x = t(7, 6, seed=3)
    h = (t(2, 5, seed=4), t(2, 5, seed=5))
    with torch.no_grad():
        same(m(x, h), f(x, h))
        same(m(x, h), f(x, h))
    assert stats_counts() == (1, 0, 0), wick.stats()


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_training_gradients(kind):
    me, mc = make(kind, dict(batch_first=True)), make(kind, dict(batch_first=True))
    wick.reset()
    f = wick.compile(mc)
    x = t(3, 4, 6, seed=6)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    ye, yc = me(xe), f(xc)
    same(ye, yc)
    for y in (ye, yc):
        out, state = y
        (out.square().sum() + (state[0] if kind == "LSTM" else state).sum()).backward()
    torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-5, atol=1e-5)
    for (n, pe), pc in zip(me.named_parameters(), mc.parameters()):
        torch.testing.assert_close(pc.grad, pe.grad, rtol=1e-5, atol=1e-5, msg=n)
    assert stats_counts()[1:] == (0, 0), wick.stats()


def test_replaced_parameter_is_used():
    m = make("LSTM", dict()).eval()
    wick.reset()
    f = wick.compile(m)
    x = t(5, 2, 6, seed=7)
    with torch.no_grad():
        same(m(x), f(x))
        m.rnn.weight_hh_l0 = torch.nn.Parameter(torch.randn_like(m.rnn.weight_hh_l0))
        same(m(x), f(x))  # eager rebuilt its flat weights; the graph reads the new parameter
    assert stats_counts()[1:] == (0, 0), wick.stats()
