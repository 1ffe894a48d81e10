"""The two pairings with PyTorch: torch.compile(backend="wick") (FX graph in,
wick kernels out) and compile_graph_with (wick graph out to torch backends)."""
import copy

import pytest
import torch
import torch._dynamo

import wick
import wick._C as C
import wick.backends as B


@pytest.fixture(autouse=True)
def fresh_dynamo():
    B.register()
    torch._dynamo.reset()
    B.fallback_reasons.clear()
    yield
    torch._dynamo.reset()


def rand(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=gen, dtype=dtype)
    return torch.randint(-4, 5, shape, generator=gen, dtype=dtype)


def assert_same(got, want):
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.is_floating_point:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(got, want)


def pointwise(x, y):
    a = (x + y) * 2.5 - y / 3
    b = torch.where(x > y, torch.exp(-x.abs()), torch.sigmoid(y))
    return a, b, torch.maximum(x, y) ** 2, -torch.relu(x)


def reductions(x, y):
    s = x * y + 1
    return s.sum(dim=1, keepdim=True), torch.mean(s, dim=(0,)), s.amax(-1), torch.sum(s)


def methods_and_kwargs(x, y):
    a = torch.add(x, y, alpha=2)
    b = torch.sub(x, y, alpha=0.5)
    c = x.to(torch.float64) + 1
    d = x.sum(dim=[0, 1], dtype=torch.float64)
    e = x.float() * 2
    f = torch.nn.functional.relu(y)
    return a, b, c, d, e, f


def ints(x, y):
    return (x + y) * 3, x.sum(1), x.float() / 2, torch.where(x >= y, x, y), x ** 2


def single_output(x, y):
    return torch.tanh(x) + torch.sqrt(y.abs())


CASES = [
    (pointwise, [(6, 9), (9,)], torch.float32),
    (pointwise, [(33, 17), (33, 17)], torch.float64),
    (reductions, [(7, 11), (7, 11)], torch.float32),
    (methods_and_kwargs, [(4, 5), (4, 5)], torch.float32),
    (ints, [(5, 6), (5, 6)], torch.int64),
    (single_output, [(3, 4), (3, 4)], torch.float32),
]


@pytest.mark.parametrize("fn,shapes,dtype", CASES, ids=lambda c: getattr(c, "__name__", None))
def test_torch_compile_wick_matches_eager(fn, shapes, dtype):
    x, y = rand(*shapes[0], dtype=dtype, seed=1), rand(*shapes[1], dtype=dtype, seed=2)
    compiled = torch.compile(fn, backend="wick")
    with torch.no_grad():
        got = compiled(x, y)
    assert_same(got, fn(x, y))
    assert B.fallback_reasons == []
    # Non-contiguous inputs: dynamo guards on strides and recompiles.
    xt = rand(*reversed(shapes[0]), dtype=dtype, seed=3).t()
    yt = rand(*shapes[1], dtype=dtype, seed=4)
    assert_same(compiled(xt, yt), fn(xt, yt))


def test_unknown_ops_become_externs_not_fallbacks():
    def f(x):
        return torch.matmul(x, x) * 2 + torch.cumsum(x, 0).t()

    x = rand(4, 4, seed=5)
    with torch.no_grad():
        got = torch.compile(f, backend="wick")(x)
    assert_same(got, f(x))
    assert B.fallback_reasons == []
    info = B.compiled_graphs[-1]
    assert info["native"] >= 2 and info["extern"] >= 2 and info["views"] >= 1  # .t() is an index remap
    assert any("mm" in name for name in info["externs"]) and any("cumsum" in n for n in info["externs"])


def grads_of(fn, params, *args):
    for p in params:
        p.grad = None
    out = fn(*args)
    out.backward()
    return out.detach(), [p.grad.clone() for p in params]


@pytest.mark.parametrize("shape", [(2, 3), (5, 7)])
def test_training_forward_and_backward_compiled(shape):
    torch.manual_seed(0)
    lin = torch.nn.Linear(shape[1], 4)
    x = rand(*shape, seed=6).requires_grad_()

    def f(x):
        h = torch.sigmoid(lin(x) * 2.0)
        return (torch.softmax(h, -1) * h.exp()).sum()

    params = [x, lin.weight, lin.bias]
    got, got_grads = grads_of(torch.compile(f, backend="wick"), params, x)
    want, want_grads = grads_of(f, params, x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert B.fallback_reasons == []
    kinds = [i["graph"] for i in B.compiled_graphs[-2:]]
    assert kinds == ["forward", "backward"]
    assert all(i["native"] > 0 for i in B.compiled_graphs[-2:])


def test_add_sub_alpha_compute_like_eager():
    def f(x, y):
        return torch.add(x, 0.1, alpha=3), torch.sub(x, y, alpha=0.7), torch.add(y, x, alpha=2)

    x = rand(5, dtype=torch.float64, seed=12)
    y = rand(5, dtype=torch.float32, seed=13)
    with torch.no_grad():
        got = torch.compile(f, backend="wick")(x, y)
    want = f(x, y)
    for g_, w in zip(got, want):
        assert g_.dtype == w.dtype
        torch.testing.assert_close(g_, w, rtol=1e-15, atol=1e-15)
    assert B.fallback_reasons == []
    xi = rand(6, dtype=torch.int64, seed=14)
    with torch.no_grad():
        got = torch.compile(lambda a: torch.sub(a, 3, alpha=5), backend="wick")(xi)
    assert torch.equal(got, torch.sub(xi, 3, alpha=5))


def test_scalar_operands_and_dtype_promotion():
    def f(x, n):
        return x * 2, 2 ** x.abs(), x / 4, x > 0.5, x + True

    x = rand(5, dtype=torch.int64, seed=7)
    got = torch.compile(f, backend="wick")(x, 3)
    assert_same(got, f(x, 3))


def test_fallback_logs_when_asked(monkeypatch, capfd):
    """Data-dependent sizes (nonzero) are not compiled yet: the graph runs
    eagerly, says why, and still computes the right thing."""
    monkeypatch.setenv("WICK_LOG", "breaks")

    def f(x):
        return torch.nonzero(x > 0).float() * 2

    x = rand(6, seed=8)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        got = torch.compile(f, backend="wick")(x)
    assert_same(got, f(x))
    assert "[wick:breaks]" in capfd.readouterr().err
    assert any("data-dependent" in r for r in B.fallback_reasons)


def test_input_mutation_keeps_eager_semantics():
    def f(x):
        x.add_(1)
        return x * 2

    x = rand(4, seed=15)
    x_eager = x.clone()
    got = torch.compile(f, backend="wick")(x)
    assert_same(got, f(x_eager))
    assert torch.equal(x, x_eager)
    assert B.fallback_reasons == []


def test_backend_is_registered():
    assert torch._dynamo.lookup_backend("wick") is B.wick_backend


def build_graph():
    g = C.Graph()
    a = g.input("float32", (5, 6), (6, 1))
    b = g.input("float32", (6,), (1,))
    s = g.op("mul", [g.op("add", [a, b]), g.scalar(2)])
    r = g.op("sum", [s], dims=1, keepdim=True)
    w = g.op("where", [g.op("gt", [a, g.scalar(0)]), a, g.scalar(1.5)])
    m = g.op("maximum", [a, b])
    c = g.op("convert", [g.op("lt", [a, b])], dtype="int64")
    e = g.op("mean", [g.op("exp", [a])])
    for v in (s, r, a, w, m, c, e, s):
        g.output(v)
    return g


def reference(a, b):
    s = (a + b) * 2
    return (s, s.sum(1, keepdim=True), a, torch.where(a > 0, a, 1.5), torch.maximum(a, b),
            (a < b).to(torch.int64), torch.exp(a).mean(), s)


@pytest.mark.parametrize("backend", ["eager", "inductor", "callable"])
def test_wick_graph_to_other_backends(backend):
    g = build_graph()
    a, b = rand(5, 6, seed=9), rand(6, seed=10)
    seen = []

    def my_backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    be = my_backend if backend == "callable" else backend
    fn = B.compile_graph_with(be, g, [a, b])
    got = fn(a, b)
    assert isinstance(got, tuple)
    assert_same(got, reference(a, b))
    if backend == "callable":
        assert len(seen) == 1 and isinstance(seen[0], torch.fx.GraphModule)
    # And the same graph through wick's own compiler agrees.
    if backend == "eager":
        assert_same(g.compile()(a, b), reference(a, b))


def test_dynamic_shapes_compiled_per_size():
    def f(x, y):
        return (x + y).sum(0) * x.shape[0]

    compiled = torch.compile(f, backend="wick", dynamic=True)
    for n in (3, 5, 3, 9):
        x, y = rand(n, 4, seed=n), rand(4, seed=11)
        assert_same(compiled(x, y), f(x, y))
    assert B.fallback_reasons == []


def test_symbolic_sizes_compile_at_their_second_call(monkeypatch):
    """A graph with symbolic sizes is compiled per size: the size the graph
    was traced with at once, any other at its second call (its first runs
    the graph eagerly: a decode step's cache length never comes back), and
    no more than WICK_SIZES_PER_GRAPH sizes, the reason recorded."""
    monkeypatch.setenv("WICK_SIZES_PER_GRAPH", "3")
    B.symbolic_calls.clear()

    def f(x, y):
        return torch.softmax(x * y, -1).sum(0) + x.shape[0]

    compiled = torch.compile(f, backend="wick", dynamic=True)
    sizes = (3, 5, 3, 5, 5, 9, 9, 11, 11, 11, 0)
    for n in sizes:
        x, y = rand(n, 6, seed=n), rand(6, seed=11)
        assert_same(compiled(x, y), f(x, y))
    # 3: traced with, compiled; 5, 9: compiled at their second call; 11:
    # over the limit of 3, eager; 0: a graph of its own (dynamo specialises
    # sizes 0 and 1), compiled for the size it was traced with
    counts = dict(B.symbolic_calls)
    assert counts == {"compiled": 6, "eager: new size": 3, "eager: size limit": 2}, counts
    assert len(B.fallback_reasons) == 1 and "3 sizes compiled" in B.fallback_reasons[0], B.fallback_reasons
    assert wick.stats()["symbolic_calls"] == counts
    wick.reset()
    assert wick.stats()["symbolic_calls"] == {}


def test_symbolic_training_steps_mix_compiled_and_eager_sizes():
    """Forward and backward graphs with symbolic sizes, each size's first
    step run eagerly and later ones compiled: gradients equal eager's."""
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 4))
    mine = copy.deepcopy(eager)
    compiled = torch.compile(mine, backend="wick", dynamic=True)
    B.symbolic_calls.clear()
    for n in (4, 7, 4, 7, 9, 7):
        x = rand(n, 8, seed=n)
        for model in (eager, mine):
            model.zero_grad()
        compiled(x).square().mean().backward()
        eager(x).square().mean().backward()
        for p, q in zip(eager.parameters(), mine.parameters()):
            assert_same(q.grad, p.grad)
    counts = dict(B.symbolic_calls)
    # forward and backward alike: 4 compiled (traced with) at each of its two
    # calls, 7 eager then compiled twice, 9 eager
    assert counts == {"compiled": 8, "eager: new size": 4}, counts


def test_static_recompiles_on_new_shapes():
    def f(x):
        return torch.sigmoid(x) * 3

    compiled = torch.compile(f, backend="wick", dynamic=False)
    for n in (3, 5, 8):
        x = rand(n, 2, seed=n)
        assert_same(compiled(x), f(x))
    assert B.fallback_reasons == []


def test_permuted_layouts_fuse_and_outputs_keep_eager_strides():
    """Intermediate values read only by pointwise ops and reductions may be
    computed contiguous where eager keeps a permuted layout; graph outputs
    keep eager's strides."""

    def f(a, b):
        s = (a * 2 + b).sum(0)  # a is transposed: a*2 and the add are permuted in eager
        e = torch.exp(a) + 1    # a graph output: eager's strides
        return s, e

    a = rand(5, 4, seed=16).t()
    b = rand(4, 5, seed=17)
    with torch.no_grad():
        got = torch.compile(f, backend="wick")(a, b)
    want = f(a, b)
    assert_same(got, want)
    assert got[1].stride() == want[1].stride()
    assert B.fallback_reasons == []
    assert B.compiled_graphs[-1]["native"] >= 3


@torch.library.custom_op("wicktest::doubles_lying", mutates_args=())
def _doubles_lying(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).double()


@_doubles_lying.register_fake
def _(x):
    return torch.empty_like(x)  # promises x's dtype: the kernel returns float64


def test_extern_contradicting_its_metadata_runs_that_graph_eagerly():
    # an op whose fake kernel promises float32 where its kernel returns
    # float64 (16-bit batch norm's statistics were such a case until the
    # importer widened them: tests/runtime/test_batch_norm_16bit.py): wick
    # notices before any kernel reads the result, runs the graph eagerly and
    # records why, instead of failing
    import torch._dynamo

    from wick import backends

    torch._dynamo.reset()
    x = rand(4, 5, seed=3)

    def fn(x):
        return _doubles_lying(x.exp()) + 1

    want = fn(x)
    n = len(backends.fallback_reasons)
    got = torch.compile(fn, backend="wick")(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)
    assert any("metadata" in r for r in backends.fallback_reasons[n:])


class _Norms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(6)
        self.gn = torch.nn.GroupNorm(2, 6)
        self.bn2 = torch.nn.BatchNorm2d(6)

    def forward(self, x):
        y = self.gn(self.bn(x).relu())
        return self.bn2(y.unsqueeze(-1)).squeeze(-1).sum(-1)


@pytest.mark.parametrize("train", [False, True])
def test_batch_norm_and_group_norm_are_native(train):
    """Decomposed (torch._decomp) into reductions and pointwise work that wick
    compiles: no extern call, results, gradients and running statistics as eager."""
    torch.manual_seed(0)
    m, m2 = _Norms(), _Norms()
    m2.load_state_dict(m.state_dict())
    m.train(train)
    m2.train(train)
    x = rand(4, 6, 5, seed=9)
    g0 = len(B.compiled_graphs)
    cm = torch.compile(m2, backend="wick")
    if train:
        want, got = m(x), cm(x)
        want.sum().backward()
        got.sum().backward()
        for p, p2 in zip(m.parameters(), m2.parameters()):
            torch.testing.assert_close(p2.grad, p.grad, rtol=1e-4, atol=1e-4)
        for b, b2 in zip(m.buffers(), m2.buffers()):
            torch.testing.assert_close(b2, b)
    else:
        with torch.no_grad():
            want, got = m(x), cm(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert B.fallback_reasons == []
    assert B.compiled_graphs[g0:] and all(i["externs"] == {} for i in B.compiled_graphs[g0:])


@pytest.mark.parametrize("heads,dim", [(2, 8), (3, 6)])
def test_rotary_embedding_training_is_native_with_eager_strides(heads, dim):
    """LLaMA's rotary embedding: pointwise ops on a transposed view, whose
    eager results keep that permuted layout and feed an attention extern (and
    are saved for backward), are native kernels writing that layout; their
    backward's slice_backward is a PAD, not an extern that zero-fills."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(heads * dim, heads * dim)
    x = rand(2, 5, heads * dim, seed=30).requires_grad_()
    pos = torch.arange(5, dtype=torch.float32)[:, None] * torch.linspace(0.1, 1.0, dim)[None, :]
    cos, sin = pos.cos(), pos.sin()

    def rotate_half(q):
        return torch.cat((-q[..., dim // 2:], q[..., :dim // 2]), -1)

    def f(x):
        q = lin(x).view(2, 5, heads, dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        return torch.nn.functional.scaled_dot_product_attention(q, q, q).square().sum()

    params = [x, lin.weight, lin.bias]
    got, got_grads = grads_of(torch.compile(f, backend="wick"), params, x)
    want, want_grads = grads_of(f, params, x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert B.fallback_reasons == []
    for info in B.compiled_graphs[-2:]:
        assert set(info["externs"]) <= {"aten.addmm.default", "aten.mm.default",
                                        "aten._scaled_dot_product_flash_attention_for_cpu.default",
                                        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default"}


@pytest.mark.parametrize("ignore", [False, True])
def test_cross_entropy_training_is_native(ignore):
    """cross_entropy's nll_loss forward and backward decompose into a gather,
    a masked mean and a one-element scatter fused with log_softmax and its
    backward; ignored targets (-100) count as eager counts them."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 11)
    x = rand(7, 6, seed=31).requires_grad_()
    target = torch.randint(0, 11, (7,), generator=torch.Generator().manual_seed(3))
    if ignore:
        target[::3] = -100

    def f(x, t):
        return torch.nn.functional.cross_entropy(lin(x) * 1.5, t)

    params = [x, lin.weight, lin.bias]
    got, got_grads = grads_of(torch.compile(f, backend="wick"), params, x, target)
    want, want_grads = grads_of(f, params, x, target)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    assert B.fallback_reasons == []
    for info in B.compiled_graphs[-2:]:
        assert not any("nll_loss" in name for name in info["externs"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tied_embedding_gradient_folds_mm_and_add_into_addmm(dtype):
    """A weight used as an embedding and as the output projection (GPT-2's
    tied lm_head): its gradient is the embedding's scatter plus an mm, summed;
    the sum folds into one addmm instead of an mm and a kernel reading it
    back. Also t + x @ w with t a graph output's addend of the mm's shape,
    and a row-vector t."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(13, 6).to(dtype)
    idx = torch.tensor([[1, 4, 4, 12], [0, 1, 7, 7]])

    def f(idx):
        h = torch.tanh(emb(idx))
        return (h @ emb.weight.t()).square().mean()

    params = [emb.weight]
    got, got_grads = grads_of(torch.compile(f, backend="wick"), params, idx)
    want, want_grads = grads_of(f, params, idx)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grads[0], want_grads[0])
    assert B.fallback_reasons == []
    bw = B.compiled_graphs[-1]
    # the embedding gradient is a fresh buffer read by the sum alone: the
    # gemm accumulates into it (addmm_), no copy into a new sum
    assert bw["graph"] == "backward" and "aten.addmm_.default" in bw["externs"]

    def g(x, w, t, r):
        return t + x @ w, x @ w + r, (x @ w + t).relu()

    x, w, t, r = rand(5, 7, dtype=dtype, seed=1), rand(7, 3, dtype=dtype, seed=2), \
        rand(5, 3, dtype=dtype, seed=3), rand(3, dtype=dtype, seed=4)
    with torch.no_grad():
        got = torch.compile(g, backend="wick")(x, w, t, r)
    want = g(x, w, t, r)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
        assert a.stride() == b.stride()
    info = B.compiled_graphs[-1]
    # two folded; the third add fuses with the relu in a kernel instead
    assert info["externs"] == {"aten.addmm.default": 2, "aten.mm.default": 1}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("V,H,n", [(13, 6, 8), (64, 16, 33), (7, 5, 1)])
def test_tied_embedding_gradient_accumulates_in_place(dtype, V, H, n):
    """The tied gradient's addend is the embedding's fresh gradient, read by
    the sum alone: addmm_ accumulates the gemm into it (no new sum, no copy
    of the addend), equal to eager's; an addend the graph also returns or
    reads elsewhere, or an input, keeps the out-of-place addmm."""
    emb = torch.nn.Embedding(V, H).to(dtype)
    with torch.no_grad():
        emb.weight.copy_(rand(V, H, dtype=dtype, seed=V + n))
    gen = torch.Generator().manual_seed(n)
    idx = torch.randint(0, V, (2, n), generator=gen)
    # a column slice: the projection reads a non-contiguous hidden state
    proj = rand(2, n, 2 * H, dtype=dtype, seed=5)[..., ::2]

    def f(idx):
        h = torch.tanh(emb(idx) + proj)
        return (h @ emb.weight.t()).square().mean()

    got, got_grads = grads_of(torch.compile(f, backend="wick"), [emb.weight], idx)
    want, want_grads = grads_of(f, [emb.weight], idx)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grads[0], want_grads[0])
    assert B.fallback_reasons == []
    assert B.compiled_graphs[-1]["externs"].get("aten.addmm_.default") == 1

    def g(x, w, idx, go):
        # the embedding gradient is also returned: the sum may not overwrite it
        e = torch.ops.aten.embedding_dense_backward(go, idx, V, -1, False)
        return e + x @ w, e

    x, w = rand(V, 4, dtype=dtype, seed=1), rand(4, H, dtype=dtype, seed=2)
    go = rand(2, n, H, dtype=dtype, seed=3)
    with torch.no_grad():
        got = torch.compile(g, backend="wick")(x, w, idx, go)
    want = g(x, w, idx, go)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert "aten.addmm_.default" not in B.compiled_graphs[-1]["externs"]


def _embedding_grad(V, H, shape, pad, scale, dtype, idx_dtype, seed, idx=None):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(V, H, generator=gen, dtype=dtype).requires_grad_()
    if idx is None:
        # few distinct rows: repeated indices, the padding row hit too
        idx = torch.randint(0, max(min(V, 4), 1), shape, generator=gen, dtype=idx_dtype) if V else \
            torch.zeros(shape, dtype=idx_dtype)
    scale_by = torch.randn(*shape, H, generator=gen, dtype=dtype)

    def f(w, idx):
        e = torch.nn.functional.embedding(idx, w, padding_idx=pad, scale_grad_by_freq=scale)
        return (e * scale_by).sum()

    got, (gw,) = grads_of(lambda i: torch.compile(f, backend="wick")(w, i), [w], idx)
    want, (ww,) = grads_of(lambda i: f(w, i), [w], idx)
    return got, gw, want, ww


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("pad,scale", [(None, False), (0, False), (2, False), (-1, False), (None, True), (1, True)])
@pytest.mark.parametrize("V,H,shape", [(10, 7, (4, 5)), (37, 64, (3, 9)), (6, 1, (2, 3, 4)), (5, 4, (0, 3))])
def test_embedding_backward_is_generated_code(dtype, pad, scale, V, H, shape):
    """embedding_dense_backward: a zeroed gradient plus a scatter-add loop in
    generated C instead of the extern call; rows of equal indices add in
    index order as eager's CPU kernel adds them, so the gradient is equal,
    not close (bfloat16 rounds after each add, as eager does); padding_idx
    (also negative) adds nothing, scale_grad_by_freq divides by the count."""
    torch._dynamo.reset()
    for idx_dtype in (torch.int64, torch.int32) if dtype == torch.float32 else (torch.int64,):
        got, gw, want, ww = _embedding_grad(V, H, shape, pad, scale, dtype, idx_dtype, seed=V + H)
        torch.testing.assert_close(got, want)
        assert torch.equal(gw, ww)
        assert gw.stride() == ww.stride()
    assert B.fallback_reasons == []
    bw = B.compiled_graphs[-1]
    # bfloat16 with scale_grad_by_freq stays eager's call (pipeline.c says why)
    native = not (scale and dtype == torch.bfloat16)
    assert bw["graph"] == "backward" and ("aten.embedding_dense_backward.default" not in bw["externs"]) == native


def test_embedding_backward_strided_indices_and_out_of_range():
    """Indices that are a view (an expand with stride 0, a slice) are read with
    their strides; an index outside [0, num_weights) in the backward alone
    adds nothing, as eager's CPU kernel."""
    torch._dynamo.reset()
    w = rand(9, 5, seed=3).requires_grad_()
    ids = torch.tensor([[3, 1, 3, 8, 0, 3]])

    def f(w, ids):
        pos = ids[:, 1:5].expand(3, 4)
        return (torch.nn.functional.embedding(pos, w) * torch.arange(60.0).view(3, 4, 5)).sum()

    got, (gw,) = grads_of(lambda i: torch.compile(f, backend="wick")(w, i), [w], ids)
    want, (ww,) = grads_of(lambda i: f(w, i), [w], ids)
    torch.testing.assert_close(got, want)
    assert torch.equal(gw, ww)
    assert "aten.embedding_dense_backward.default" not in B.compiled_graphs[-1]["externs"]

    def g(grad, idx):
        return torch.ops.aten.embedding_dense_backward(grad * 2.0, idx, 4, 1, False)

    grad = rand(5, 3, seed=4)
    idx = torch.tensor([0, 7, -3, 1, 2])
    assert torch.equal(torch.compile(g, backend="wick")(grad, idx), g(grad, idx))


def test_one_hot_scatter_and_rsub_are_native():
    """scatter with one index per row along dim (a one-hot) and 1 - mask."""
    def f(x, idx, m):
        oh = torch.zeros_like(x).scatter(1, idx, 2.5)
        acc = x.scatter_add(1, idx, x[:, :1])
        return oh * x + acc, torch.rsub(m, 1.0) * x

    x = rand(6, 9, seed=32)
    idx = torch.tensor([[0], [8], [3], [3], [5], [1]])
    m = rand(6, 9, seed=33)
    with torch.no_grad():
        got = torch.compile(f, backend="wick")(x, idx, m)
    assert_same(got, f(x, idx, m))
    assert B.fallback_reasons == []
    assert B.compiled_graphs[-1]["externs"] == {}


def test_view_outputs_alias_like_eager():
    """View steps are plain aliases made in C (alias_views, as inductor's);
    outputs that view an input or an intermediate still behave as eager's:
    values, strides, and writes through them reach what they alias."""
    def f(x, w):
        h = x @ w                   # an extern: its views are view steps
        return x.t(), h.t()[1:], h.view(-1)[2:7], (h * 2).t()

    x, w = rand(4, 6, seed=40), rand(6, 5, seed=41)
    cf = torch.compile(f, backend="wick")
    with torch.no_grad():
        got, want = cf(x, w), f(x, w)
    assert_same(got, want)
    assert [t.stride() for t in got] == [t.stride() for t in want]
    assert [t.storage_offset() for t in got] == [t.storage_offset() for t in want]
    assert B.fallback_reasons == []
    assert B.compiled_graphs[-1]["views"] >= 3
    got[0][1, 2] = 100.0        # x.t() is a view of x, as in eager
    assert x[2, 1] == 100.0
    for outs in (got, want):    # h.t()[1:][0, 1] is h[1, 1], which h.view(-1)[2:7][4] also shows
        outs[1][0, 1] = -7.0
        assert outs[2][4] == -7.0


@pytest.mark.parametrize("shape,dim", [((2, 64), -1), ((3, 5, 7), 1), ((9,), 0)])
def test_cumsum_converts_its_input_in_a_kernel(shape, dim):
    """cumsum whose result dtype differs from its input's (a bool mask counted
    in int64, LLaMA's packed-sequence check; int32; an explicit dtype) gets
    its input converted by a native kernel, not inside the extern call; the
    sums are eager's. A float cumsum without dtype is called as it is."""
    x = rand(*shape, dtype=torch.int64, seed=len(shape))
    xf = rand(*shape, dtype=torch.float32, seed=7)

    def f(x, xf):
        m = x != 1
        return (m.cumsum(dim), x.to(torch.int32).cumsum(dim), x.cumsum(dim, dtype=torch.float64),
                xf.to(torch.bfloat16).cumsum(dim, dtype=torch.float32), xf.cumsum(dim),
                # a transposed (non-contiguous) mask
                (x.transpose(0, -1) > 0).cumsum(0))

    got = torch.compile(f, backend="wick")(x, xf)
    want = f(x, xf)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        if b.dtype.is_floating_point:
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
        else:
            assert torch.equal(a, b)
    assert B.fallback_reasons == []
    # the conversions are native: the only externs are the six cumsums
    assert B.compiled_graphs[-1]["externs"] == {"aten.cumsum.default": 6}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(256, 512), (96, 1030)])
def test_one_thread_kernels_have_no_parallel_regions(monkeypatch, tmp_path, dtype, shape):
    """Compiled for one thread (WICK_NUM_THREADS=1, or torch.set_num_threads(1)
    with the knob unset), the C has no OpenMP parallel regions, whose team
    start and end cost a futex system call each even for one thread; the
    loops keep `omp simd`. Row, column and whole reductions, row groups and
    large pointwise kernels give eager's results either way, on a transposed
    input too."""
    def f(x, w):
        h = torch.nn.functional.layer_norm(x, x.shape[-1:], w, None)
        return (torch.softmax(h * 2.0, -1), torch.nn.functional.gelu(x) + 1.0, x.sum(0), x.float().sum(),
                x.t().exp().sum(1))

    x = rand(*shape, dtype=dtype, seed=3)
    xt = rand(shape[1], shape[0], dtype=dtype, seed=4).t()
    w = rand(shape[1], dtype=dtype, seed=5)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-3)
    try:
        for n in ("1", "2"):
            out = tmp_path / n
            monkeypatch.setenv("WICK_NUM_THREADS", n)
            monkeypatch.setenv("WICK_DEBUG_DIR", str(out))
            C.env_reload()
            torch._dynamo.reset()
            for inp in (x, xt):
                got = torch.compile(f, backend="wick")(inp, w)
                for a, b in zip(got, f(inp, w)):
                    assert a.dtype == b.dtype and a.shape == b.shape
                    torch.testing.assert_close(a, b, **tol)
            srcs = [p.read_text() for p in out.glob("kernel-*.c")]
            assert srcs and any("omp simd" in s for s in srcs)
            parallel = any("omp parallel" in s for s in srcs)
            assert parallel == (n == "2"), n
            if n == "1":
                assert not any("omp for" in s or "omp critical" in s for s in srcs)
    finally:
        monkeypatch.undo()
        C.env_reload()  # the knobs as the other tests expect them
    assert B.fallback_reasons == []


def test_graph_whose_indexing_kernels_fail_is_compiled_with_indexing_extern(monkeypatch):
    """A CompileError in a graph with indexing kernels: the graph is built
    again with its indexing as extern calls (compiled, not run eagerly), and
    the reason is kept in the graph's info."""
    real_run = B._AtenImporter.run

    def failing_with_indexing(self, example_inputs):
        out = real_run(self, example_inputs)
        if self.nindirect:
            raise C.CompileError("injected failure of an indexing kernel")
        return out

    monkeypatch.setattr(B._AtenImporter, "run", failing_with_indexing)
    torch._dynamo.reset()
    B.fallback_reasons.clear()
    B.compiled_graphs.clear()
    w = rand(11, 6, seed=40)
    ids = torch.randint(0, 11, (3, 4), generator=torch.Generator().manual_seed(41))

    def f(w, ids):
        return torch.embedding(w, ids).relu() * 2 + w.index_select(0, ids[0]).sum()

    with torch.no_grad():
        got = torch.compile(f, backend="wick")(w, ids)
    torch.testing.assert_close(got, f(w, ids))
    assert B.fallback_reasons == []
    info = B.compiled_graphs[-1]
    assert "injected failure" in info["retried"]
    assert {"aten.embedding.default", "aten.index_select.default"} <= set(info["externs"])
    assert info["native"] > 0


class _ConvBlock(torch.nn.Module):
    """ConvNeXt's block shape: a depthwise convolution with a bias, a layer
    norm over channels, a pointwise MLP; then a convolution with a bias whose
    result feeds another convolution straight away (nothing to fuse into)."""

    def __init__(self, c=8):
        super().__init__()
        self.dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = torch.nn.LayerNorm(c)
        self.fc1, self.fc2 = torch.nn.Linear(c, 2 * c), torch.nn.Linear(2 * c, c)
        self.down = torch.nn.Conv2d(c, c, 2, stride=2)
        self.up = torch.nn.ConvTranspose2d(c, 3, 2, stride=2, bias=True)

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(y)))).permute(0, 3, 1, 2)
        return self.up(self.down(x + y))


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("shape", [(2, 8, 12, 12), (1, 8, 6, 10)])
def test_convolution_bias_split_off_as_a_pointwise_add(monkeypatch, train, shape):
    """_conv_bias_as_add (on CUDA by default; here forced on the CPU): each
    convolution with a bias becomes one without it plus a native add that
    fuses into the kernel after it; results and gradients (the bias's gradient
    a native row sum instead of convolution_backward's) as eager."""
    real, splits = B._conv_bias_as_add, []

    def counting(torch_):
        decompose = real(torch_, devices=("cpu",))

        def run(*args):
            out = decompose(*args)
            splits.append(out is not NotImplemented)
            return out
        return run

    monkeypatch.setattr(B, "_conv_bias_as_add", counting)
    monkeypatch.setattr(B, "_aot_backends", {})  # AOTAutograd keeps the table it built first
    torch.manual_seed(0)
    m, m2 = _ConvBlock(), _ConvBlock()
    m2.load_state_dict(m.state_dict())
    x = rand(*shape, seed=11)
    x_cl = x.to(memory_format=torch.channels_last)
    g0 = len(B.compiled_graphs)
    cm = torch.compile(m2, backend="wick")
    for inp in (x, x_cl):
        if train:
            want, got = m(inp), cm(inp)
            (want * want).sum().backward()
            (got * got).sum().backward()
            for (name, p), p2 in zip(m.named_parameters(), m2.parameters()):
                torch.testing.assert_close(p2.grad, p.grad, rtol=1e-4, atol=1e-4, msg=name)
                p.grad = p2.grad = None
        else:
            with torch.no_grad():
                want, got = m(inp), cm(inp)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert B.fallback_reasons == []
    # three biased convolutions per traced graph split, the down-sampling one's result
    # added to in the kernel that feeds the transposed convolution
    assert splits.count(True) >= 3 and splits.count(True) % 3 == 0, splits
    for info in B.compiled_graphs[g0:]:
        assert set(info["externs"]) <= {"aten.convolution.default", "aten.addmm.default", "aten.mm.default",
                                        "aten.convolution_backward.default"}, info["externs"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads,q,k", [(2, 5, 5), (3, 4, 7)])
def test_math_attention_safe_softmax_is_native(dtype, heads, q, k):
    """T5's attention in training: a position bias that needs a gradient
    makes F.scaled_dot_product_attention take its math path, whose
    _safe_softmax (softmax, rows of only -inf zeroed) is native nodes, not
    an extern call; results and gradients as eager's, a fully masked row
    included."""
    qkv = [rand(2, heads, n, 8, dtype=dtype, seed=40 + i).requires_grad_() for i, n in enumerate((q, k, k))]
    bias = rand(1, heads, q, k, dtype=dtype, seed=44).requires_grad_()
    mask = torch.zeros(2, 1, q, k, dtype=dtype)
    mask[1, :, 0] = float("-inf")  # a row nothing may attend to: zeros in eager's math path

    def f(query, key, value, bias, mask):
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=bias + mask)

    params = qkv + [bias]
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-5}
    got, got_grads = grads_of(lambda *a: torch.compile(f, backend="wick")(*a).float().square().sum(), params,
                              *qkv, bias, mask)
    want, want_grads = grads_of(lambda *a: f(*a).float().square().sum(), params, *qkv, bias, mask)
    torch.testing.assert_close(got, want, **tol)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, **tol)
    out = torch.compile(f, backend="wick")(*qkv, bias, mask)
    torch.testing.assert_close(out, f(*qkv, bias, mask), **tol)
    assert torch.count_nonzero(out[1, :, 0]) == 0
    assert B.fallback_reasons == []
    assert not any("safe_softmax" in name for info in B.compiled_graphs for name in info["externs"])


def test_cumsum_to_int32_keeps_its_dtype():
    """cumsum(dtype=int32) of a mask: aten.cumsum of the converted mask would
    widen it to int64, so that one stays the op as it is."""
    x = rand(3, 9, seed=50)

    def f(x):
        return torch.cumsum(x > 0, 1, dtype=torch.int32) * 3, (x > 0).cumsum(0, dtype=torch.int16), x.cumsum(1)

    got, want = torch.compile(f, backend="wick")(x), f(x)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("shape", [(3, 16), (2, 5, 64)])
def test_layer_norm_of_bfloat16_with_float32_params_trains(shape):
    """A bfloat16 input with float32 weight and bias (BERT's head under CPU
    autocast): eager's mixed-dtype kernel, whose backward needs float32
    statistics (the op's meta function says bfloat16: a compiled forward
    saved those and the backward kernel raised). Values and gradients as
    eager's."""
    n = shape[-1]
    x = rand(*shape, seed=51).to(torch.bfloat16).requires_grad_()
    ln = torch.nn.LayerNorm(n)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()

    def f(x):
        return (ln(x * 2).float() * torch.linspace(-1, 1, n)).sum()

    params = [x, ln.weight, ln.bias]
    got, got_grads = grads_of(torch.compile(f, backend="wick"), params, x)
    want, want_grads = grads_of(f, params, x)
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    for g, w in zip(got_grads, want_grads):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)
    assert B.fallback_reasons == []
