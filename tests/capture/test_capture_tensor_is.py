"""`x is y` between two tensors (nn.MultiheadAttention's `query is key`
fast-path check, SigLIP's and nn.Transformer's cross-attention).

Two tensors read from the arguments are compared as the objects found
there, and the answer is guarded: passing the same tensor twice, or tying
two parameters, recompiles. A tensor the frame computed is another object
than every other graph value; the methods eager answers with their input
itself (contiguous(), to() of the same dtype, dropout in eval, in-place
methods) give back their argument's value, so `is` answers True there, as
eager does. Each case is checked against eager's own answer."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import wick
from test_capture_util import *  # noqa: F401,F403
from test_breaks_inplace import t

drop = nn.Dropout(0.3).eval()
ident = nn.Identity()

# (name, expression of x): eager answers `expr is x` with True for some, False for others
EXPRS = [
    ("contiguous", "x.contiguous()"), ("to_same_dtype", "x.to(torch.float32)"), ("float", "x.float()"),
    ("type_as", "x.type_as(x)"), ("dropout_eval", "F.dropout(x, 0.5, training=False)"), ("Dropout", "drop(x)"),
    ("Identity", "ident(x)"), ("add_", "x.add_(1)"), ("relu_inplace", "F.relu(x, inplace=True)"),
    ("imul", "x.__imul__(2)"), ("clamp_", "x.clamp_(0, 1)"), ("flatten_0_0", "x.flatten(0, 0)"),
    ("detach", "x.detach()"), ("ellipsis", "x[...]"), ("view_as", "x.view_as(x)"), ("reshape", "x.reshape(x.shape)"),
    ("flatten", "torch.flatten(x)"), ("clone", "x.clone()"), ("data", "x.data"), ("full_slice", "x[:]"),
    ("split_one", "x.split(100)[0]"), ("permute_id", "x.permute(0, 1)"), ("expand_as", "x.expand_as(x)"),
]


def make(expr, computed):
    src = "def f(x):\n" + ("    x = x * 1.5\n" if computed else "") + f"    y = {expr}\n    return (y is x), y * 1\n"
    ns = {"torch": torch, "F": F, "drop": drop, "ident": ident}
    exec(compile(src, f"<is {expr}>", "exec"), ns)
    return ns["f"]


@pytest.mark.parametrize("transposed", [False, True], ids=["contiguous", "transposed"])
@pytest.mark.parametrize("computed", [False, True], ids=["argument", "computed"])
@pytest.mark.parametrize("name,expr", EXPRS, ids=[n for n, _ in EXPRS])
def test_identity_answers_as_eager(name, expr, computed, transposed):
    # transposed: contiguous() of a non-contiguous tensor is a new one in eager
    f = make(expr, computed)
    x = t(3, 5, seed=1).t() if transposed else t(4, 3, seed=1)
    exp_is, exp = f(x.clone())
    got_is, got = compiled(f)(x.clone())
    assert got_is is exp_is
    torch.testing.assert_close(got, exp)
    one_graph(f)


def pick(a, b):
    return a * 2 if a is b else a - b


def test_two_arguments_are_guarded():
    f = compiled(pick)
    x, y = t(3, 4, seed=2), t(3, 4, seed=3)
    torch.testing.assert_close(f(x, y), x - y)
    torch.testing.assert_close(f(x, x), x * 2)  # the IS_NOT guard fails: recompiles
    torch.testing.assert_close(f(y, x), y - x)
    torch.testing.assert_close(f(y, y), y * 2)
    assert len(entries(pick)) == 2, entries(pick)


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(6, 6)
        self.dec = nn.Linear(6, 6)

    def forward(self, x):
        y = self.dec(self.enc(x))
        return y + 1 if self.enc.weight is self.dec.weight else y - 1


def test_tied_parameters_through_two_paths():
    torch.manual_seed(0)
    m = Tied()
    wick.reset()
    f = wick.compile(m)
    x = t(2, 6, seed=4)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x))
        m.dec.weight = m.enc.weight
        torch.testing.assert_close(f(x), m(x))
        torch.testing.assert_close(f(x), m.dec(m.enc(x)) + 1)
    assert wick.stats()["graphs"] == 2, wick.stats()


@pytest.mark.parametrize("same", [True, False], ids=["self", "cross"])
def test_multihead_attention_is_one_graph(same):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    q = t(2, 5, 16, seed=5)
    kv = q if same else t(2, 7, 16, seed=6)

    def attend(m, q, kv):
        return m(q, kv, kv, need_weights=False)[0]

    f = compiled(attend)
    with torch.no_grad():
        torch.testing.assert_close(f(mha, q, kv), attend(mha, q, kv), rtol=1e-5, atol=1e-5)
    one_graph(attend)


def test_transformer_training_and_inference():
    torch.manual_seed(0)
    me = nn.Transformer(16, 4, 1, 1, 32, dropout=0.0, batch_first=True)
    mc = nn.Transformer(16, 4, 1, 1, 32, dropout=0.0, batch_first=True)
    mc.load_state_dict(me.state_dict())
    src, tgt = t(2, 5, 16, seed=7), t(2, 4, 16, seed=8)
    wick.reset()
    f = wick.compile(mc)
    me(src, tgt).square().sum().backward()
    f(src, tgt).square().sum().backward()
    for (n, a), b in zip(me.named_parameters(), mc.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5, msg=n)
    me.eval()
    mc.eval()
    with torch.no_grad():
        torch.testing.assert_close(f(src, tgt), me(src, tgt), rtol=1e-5, atol=1e-5)
    assert stats_counts() == (2, 0, 0), wick.stats()
