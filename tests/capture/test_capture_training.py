"""Forward+backward through wick's own capture: in grad mode, a captured graph
whose node outputs require grad is compiled through AOTAutograd (wick's
forward and backward compilers); with another backend the same FX module
goes to that backend. Outputs, requires_grad and every gradient are
compared with eager, on several shapes and dtypes, views, empty and 0-d
tensors, no_grad/enable_grad blocks inside the frame."""
import pytest
import torch
import torch.nn.functional as F

from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries


class MLP(torch.nn.Module):
    def __init__(self, d=8, h=13):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, h)
        self.down = torch.nn.Linear(h, d)

    def forward(self, x):
        y = self.up(self.norm(x))
        return x + self.down(F.gelu(y) * torch.sigmoid(y))


class Attention(torch.nn.Module):
    def __init__(self, d=8, heads=2):
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        return self.out((a @ v).transpose(1, 2).reshape(b, t, d))


def _grads(out, tensors):
    outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if o.requires_grad]
    loss = sum((o.float() * torch.linspace(-1, 1, o.numel()).view(o.shape)).sum() for o in outs)
    return torch.autograd.grad(loss, tensors, allow_unused=True)


def _check(fn, args, wrt, backend="wick", rtol=None, atol=None):
    expected = fn(*args)
    want = _grads(expected, wrt)
    got_out = compiled(fn, backend)(*args)
    assert_same(got_out, expected, rtol, atol)
    for g, e in zip(got_out if isinstance(got_out, tuple) else (got_out,),
                    expected if isinstance(expected, tuple) else (expected,)):
        assert g.requires_grad == e.requires_grad
    got = _grads(got_out, wrt)
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if w is not None:
            assert_same(g, w, rtol, atol)
    es = entries(fn)
    assert es and not es[0]["eager"], es[0].get("reason")
    assert es[0]["graph_count"] == 1
    return es[0]


@pytest.mark.parametrize("shape", [(2, 5, 8), (1, 1, 8), (3, 8)])
@pytest.mark.parametrize("backend", ["wick", "eager"])
def test_mlp_forward_backward(shape, backend):
    torch.manual_seed(0)
    m = MLP()
    x = torch.randn(*shape)
    e = _check(MLP.forward, (m, x), list(m.parameters()), backend)
    assert e["via_fx"]


def test_attention_forward_backward_input_grad_too():
    torch.manual_seed(1)
    m = Attention()
    x = torch.randn(2, 4, 8, requires_grad=True)
    _check(Attention.forward, (m, x), [x] + list(m.parameters()))


def test_float64_and_non_contiguous_input():
    torch.manual_seed(2)
    m = MLP().double()
    x = torch.randn(8, 3, dtype=torch.float64).t()  # (3, 8), strides (1, 3)
    _check(MLP.forward, (m, x), list(m.parameters()))


def views_and_many_outputs(x, w):
    y = x * w
    return y, y[1:], y.t(), (y.exp() - 1).sum(0), x.sum()


def test_views_several_outputs_and_a_constant_output():
    x, w = torch.randn(4, 3), torch.randn(4, 3, requires_grad=True)
    _check(views_and_many_outputs, (x, w), [w])


def zero_dim(x, w):
    return torch.tanh(x * w) + w.sum()


@pytest.mark.parametrize("shape", [(), (0, 3), (5,)])
def test_zero_dim_and_empty(shape):
    x, w = torch.randn(shape), torch.randn(shape, requires_grad=True)
    _check(zero_dim, (x, w), [w])


def mixed_grad_modes(x, w):
    with torch.no_grad():
        scale = (w * 2).sum()
    y = x * w * scale
    with torch.no_grad():
        z = y * 3
    return y, z, w.detach() + 1


def test_no_grad_blocks_inside_a_training_graph():
    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    for backend in ("wick", "ref", "eager"):
        e = _check(mixed_grad_modes, (x, w), [w], backend)
        assert e["via_fx"]
        assert torch.is_grad_enabled()
        from wick import _C as C

        C.reset()


def enable_grad_inside(x, w):
    with torch.enable_grad():
        y = (x * w).sin()
    return y, x * w


def test_enable_grad_block_under_no_grad():
    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    with torch.no_grad():
        expected = enable_grad_inside(x, w)
        got = compiled(enable_grad_inside)(x, w)
    assert_same(got, expected)
    assert [t.requires_grad for t in got] == [True, False]
    assert_same(torch.autograd.grad(got[0].sum(), w), torch.autograd.grad(expected[0].sum(), w))
    (e,) = entries(enable_grad_inside)
    assert not e["eager"] and e["via_fx"]


def raises_inside(x, w):
    with torch.no_grad():
        y = x.view(7, -1)  # raises for 3 elements
    return y * w


def test_exception_inside_no_grad_leaves_grad_mode_on():
    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError):
        compiled(raises_inside)(x, w)
    assert torch.is_grad_enabled()


def test_inference_and_training_entries_side_by_side():
    torch.manual_seed(3)
    m = MLP()
    x = torch.randn(2, 8)
    f = compiled(MLP.forward)
    with torch.no_grad():
        r = f(m, x)
    assert not r.requires_grad
    r2 = f(m, x)
    assert r2.requires_grad
    assert_same(r2.detach(), r)
    es = entries(MLP.forward)
    assert len(es) == 2 and all(not e["eager"] for e in es)
    assert es[0]["via_fx"] and not es[1]["via_fx"]  # newest first: training, then native inference
    with torch.no_grad():
        f(m, x)
    assert len(entries(MLP.forward)) == 2


def test_training_loop_updates_parameters_like_eager():
    torch.manual_seed(4)
    m1 = MLP()
    m2 = MLP()
    m2.load_state_dict(m1.state_dict())
    f = compiled(MLP.forward)
    o1 = torch.optim.SGD(m1.parameters(), lr=0.1)
    o2 = torch.optim.SGD(m2.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(4, 8)
        for m, o, run in ((m1, o1, m1.forward), (m2, o2, lambda x: f(m2, x))):
            o.zero_grad()
            run(x).pow(2).mean().backward()
            o.step()
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        assert_same(p2, p1)
    es = entries(MLP.forward)
    assert len(es) == 1 and not es[0]["eager"]


class Dropping(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(p)

    def forward(self, x):
        return self.drop(torch.tanh(self.lin(x))) + 1


def test_train_mode_dropout_p0_is_the_identity_and_equals_eager():
    torch.manual_seed(7)
    m = Dropping(0.0).train()
    x = torch.randn(4, 8)
    e = _check(Dropping.forward, (m, x), list(m.parameters()))
    assert "dropout" not in e["graph"].lower()


def test_train_mode_dropout_is_compiled_and_drops():
    torch.manual_seed(8)
    m = Dropping(0.5).train()
    x = torch.randn(64, 8)
    r = compiled(Dropping.forward)(m, x)
    (e,) = entries(Dropping.forward)
    assert not e["eager"] and e["graph_count"] == 1 and e["via_fx"]
    dropped = (r == 1).float().mean().item()  # dropped elements are exactly 0 + 1
    assert 0.3 < dropped < 0.7
    g = torch.autograd.grad(r.sum(), m.lin.weight)[0]
    assert torch.isfinite(g).all() and g.abs().sum() > 0


# ---- views: exported as views (permute/reshape/expand), not as_strided ----------------


def test_view_plan_matches_view_of():
    """_view_plan's ops give what _view_of gives (the base's memory in the graph's layout, read with
    the view's sizes and strides), whatever layout the traced base has; None for what is not a
    reordering of all the base's elements."""
    import random

    from wick.backends import _view_of, _view_plan

    def dense(sizes, order):
        st, step = [0] * len(sizes), 1
        for d in reversed(order):
            st[d] = step
            step *= sizes[d]
        return st

    rng = random.Random(0)
    planned = 0
    for _ in range(400):
        nd = rng.randint(1, 4)
        bs = [rng.choice([1, 2, 3, 4]) for _ in range(nd)]
        border = list(range(nd))
        rng.shuffle(border)
        bst = dense(bs, border)
        numel, rem, vs = 1, 1, []
        for n in bs:
            numel *= n
        rem = numel
        while rem > 1:
            f = rng.choice([f for f in range(2, rem + 1) if rem % f == 0])
            vs.append(f)
            rem //= f
        if rng.random() < 0.3:
            vs.insert(rng.randint(0, len(vs)), 1)
        vorder = list(range(len(vs)))
        rng.shuffle(vorder)
        vst = dense(vs, vorder)
        if rng.random() < 0.3:  # a broadcast dim
            k = rng.randint(0, len(vs))
            vs.insert(k, 3)
            vst.insert(k, 0)
        x = torch.randn(bs)
        actual = list(range(nd))
        rng.shuffle(actual)  # the traced base laid out otherwise than the graph says
        x = x.permute(actual).contiguous().permute([actual.index(d) for d in range(nd)])
        plan = _view_plan(bs, bst, vs, vst, 0)
        if plan is None:
            continue
        planned += 1
        base_perm, flat, perm, expand = plan
        got = x.permute(base_perm).reshape(flat).permute(perm)
        if expand is not None:
            got = got.reshape(expand[0]).expand(expand[1])
        assert torch.equal(got, _view_of(x, bst, vs, vst, 0)), (bs, bst, vs, vst, plan)
    assert planned > 300
    # a slice, an offset, an overlapping read: as_strided (_view_of)
    assert _view_plan([4, 6], [6, 1], [4, 3], [6, 1], 0) is None
    assert _view_plan([4, 6], [6, 1], [3, 6], [6, 1], 6) is None
    assert _view_plan([4, 6], [6, 1], [4, 6], [1, 1], 0) is None
    # attention's head split and merge of a (b, t, c) base
    assert _view_plan([2, 64, 128], [8192, 128, 1], [2, 2, 64, 64], [8192, 64, 128, 1], 0) == \
        ([0, 1, 2], [2, 64, 2, 64], [0, 2, 1, 3], None)


class SplitHeads(torch.nn.Module):
    """BERT's attention: separate q/k/v projections, heads split and merged by view and transpose."""

    def __init__(self, d=8, heads=2):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))
        self.out = torch.nn.Linear(d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (p(x).view(b, t, self.heads, d // self.heads).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v)
        return self.out(a.transpose(1, 2).reshape(b, t, d))


def test_attention_views_export_as_views(monkeypatch, record_results):
    """The FX module a training graph is exported to has no _view_of (as_strided) for views that
    reorder their base (heads split and merged), and so the backward graph AOTAutograd makes has
    no as_strided_scatter or copy; gradients equal eager's. (Slices, e.g. of a fused qkv
    projection's chunks, stay _view_of.)"""
    monkeypatch.setenv("WICK_AUTODIFF", "aot")  # the export to FX, which wick's own autodiff skips
    import wick.backends as wb

    modules = record_results(wb, "compile_graph_with", "graph_module")
    start = len(wb.compiled_graphs)
    torch.manual_seed(0)
    m = SplitHeads()
    x = torch.randn(2, 5, 8, requires_grad=True)
    _check(SplitHeads.forward, (m, x), [x] + list(m.parameters()))
    assert modules
    targets = [n.target for gm in modules for n in gm.graph.nodes]
    assert wb._view_of not in targets
    assert "permute" in targets and "reshape" in targets
    externs = {k for g in wb.compiled_graphs[start:] for k in g["externs"]}
    assert not externs & {"aten.as_strided_scatter.default", "aten.copy.default", "aten.as_strided.default"}, externs


class SDPA(torch.nn.Module):
    def __init__(self, d=16, heads=2, dropout_p=0.0):
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.heads, self.p = heads, dropout_p

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).chunk(3, dim=-1))
        return F.scaled_dot_product_attention(q, k, v, dropout_p=self.p).transpose(1, 2).reshape(b, t, d)


def test_backward_graph_runs_no_attention_forward(monkeypatch):
    """AOTAutograd's backward graph of a graph from wick's capture held an attention forward whose
    results nothing read (kept by FX's dead code elimination: the op is tagged as drawing random
    numbers), run in every training step. Dropped when dropout_p == 0; gradients equal eager's."""
    import wick.backends as wb

    monkeypatch.setenv("WICK_AUTODIFF", "aot")  # AOTAutograd's backward graph

    start = len(wb.compiled_graphs)
    torch.manual_seed(0)
    m = SDPA()
    x = torch.randn(2, 5, 16, requires_grad=True)
    _check(SDPA.forward, (m, x), [x] + list(m.parameters()))
    graphs = {g["graph"]: g["externs"] for g in wb.compiled_graphs[start:]}
    assert set(graphs) == {"forward", "backward"}
    assert sum(n for k, n in graphs["forward"].items() if "attention" in k and "backward" not in k) == 1
    assert all("backward" in k for k in graphs["backward"] if "attention" in k), graphs["backward"]


def test_unused_attention_with_dropout_is_kept():
    """With dropout_p > 0 an unused attention forward still draws from the generator: removing it
    would shift every later random op, so it stays."""
    import operator

    import torch.fx as fx
    import wick.backends as wb

    aten = torch.ops.aten
    for p, kept in ((0.0, 0), (0.25, 1)):
        g = fx.Graph()
        q, k, v = (g.placeholder(n) for n in "qkv")
        a = g.call_function(aten._scaled_dot_product_flash_attention_for_cpu.default, (q, k, v, p))
        g.call_function(operator.getitem, (a, 1))
        g.output(q)
        gm = fx.GraphModule(torch.nn.Module(), g)
        assert wb._drop_unused_attention(torch, gm) == 1 - kept
        ops = [n for n in gm.graph.nodes if n.op == "call_function"]
        assert len(ops) == kept  # the unused getitem goes either way


def scalar_parameter_activations(x, w):
    y = F.softplus(x @ w, beta=2.0, threshold=5.0)
    return F.leaky_relu(y, 0.2) + F.elu(y, alpha=0.5) + F.hardtanh(y, -0.5, 0.5)


def test_scalar_parameters_stay_numbers_in_the_fx_export(monkeypatch):
    """softplus' beta and threshold, leaky_relu's slope, elu's alpha and hardtanh's bounds are
    Scalars in torch's signatures: the FX export passes them as numbers. As 0-d tensors, their
    .item() stopped AOTAutograd's trace (the graph then ran eagerly)."""
    monkeypatch.setenv("WICK_AUTODIFF", "aot")
    import wick

    wick.reset()
    x = torch.randn(4, 3)
    w = torch.randn(3, 5, requires_grad=True)
    out = wick.compile(scalar_parameter_activations)(x, w)
    (gw,) = torch.autograd.grad(out.sum(), w)
    w2 = w.detach().requires_grad_(True)
    ref = scalar_parameter_activations(x, w2)
    (rgw,) = torch.autograd.grad(ref.sum(), w2)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(gw, rgw)
    st = wick.stats()
    assert st["graphs"] == 1 and not st["fallbacks"] and not st["breaks"], st
