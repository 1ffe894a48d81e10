"""Indirect loads (lower.h, "Indirect loads"; ops.def note 11) and creation
ops (note 12): INDEX (aten.index.Tensor, embedding, index_select), GATHER,
ONE_HOT, ARANGE, FULL, TRIL, TRIU, compared with eager on random indices
(negative where eager allows them), int32 and int64 indices, empty index
tensors, 0-d and non-contiguous inputs; an index out of range raises
IndexError (eager raises there too) and never reads outside a buffer; and
through torch.compile(backend="wick"), where these ops are native and fuse
with the pointwise work around them."""
import pytest
import torch
import torch.nn.functional as F

import wick  # noqa: F401
from wick import _C
from wick import backends as B


def gin(g, t):
    return g.input(t.dtype, tuple(t.shape), tuple(t.stride()))


def gen(seed):
    return torch.Generator().manual_seed(seed)


def rand(shape, dtype=torch.float32, seed=0):
    t = torch.randn(shape, generator=gen(seed)) * 3
    return t.to(dtype)


def rand_index(shape, size, dtype=torch.int64, seed=1, negative=False):
    lo = -size if negative else 0
    return torch.randint(lo, max(size, 1), shape, generator=gen(seed)).to(dtype)


def compile_and_run(build, *ts):
    g = _C.Graph()
    ids = [gin(g, t) for t in ts]
    outs = build(g, *ids)
    for o in outs:
        g.output(o)
    return g.compile()(*ts)


def equal(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    assert torch.equal(got, want) or (want.is_floating_point() and torch.allclose(got, want, equal_nan=True))


# ---- INDEX: x[..., idx, ...] ----------------------------------------------
INDEX_CASES = [
    # x shape, [(dim, index shape)], wrap negatives
    ((7, 5), [(0, (4,))], True),
    ((7, 5), [(1, (2, 3))], True),
    ((4, 6, 5), [(1, (3,))], True),
    ((4, 6, 5), [(0, (2, 1)), (1, (1, 3))], True),     # adjacent: broadcast in place
    ((4, 6, 5), [(0, (3,)), (2, (3,))], True),         # not adjacent: B leads
    ((4, 6, 5), [(0, ()), (2, (2,))], True),           # a 0-d index
    ((9, 3), [(0, (0,))], True),                       # empty index
    ((1, 3), [(0, (5,))], False),                      # a size-1 indexed dim
    ((10, 8), [(0, (2, 3, 4))], False),                # embedding-like
]


@pytest.mark.parametrize("xshape,indices,wrap", INDEX_CASES)
@pytest.mark.parametrize("idtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_index(xshape, indices, wrap, idtype, dtype):
    x = rand(xshape, dtype, seed=3)
    idx = [rand_index(s, xshape[d], idtype, seed=10 + d, negative=wrap) for d, s in indices]
    full = [None] * (max(d for d, _ in indices) + 1)
    for (d, _), i in zip(indices, idx):
        full[d] = i
    want = torch.ops.aten.index.Tensor(x, full)  # Python's x[...] reads a 0-d index as an int
    (got,) = compile_and_run(lambda g, xi, *ii: [g.op("INDEX", [xi, *ii], ints=[int(wrap)] + [d for d, _ in indices])],
                             x, *idx)
    equal(got, want)


def test_index_fused_with_pointwise_and_noncontiguous():
    x = rand((6, 8), seed=4).t()  # a transposed input
    i = rand_index((5, 2), 8, seed=5, negative=True)[:, 1]  # a strided index
    y = rand((5, 6), seed=6)

    def build(g, xi, ii, yi):
        sel = g.op("INDEX", [xi, ii], ints=[1, 0])
        return [g.op("SIGMOID", [g.op("ADD", [g.op("MUL", [sel, yi]), g.scalar(1.0)])])]

    (got,) = compile_and_run(build, x, i, y)
    equal(got, torch.sigmoid(x[i] * y + 1.0))


def test_index_of_index_and_reduction():
    w = rand((12, 7), seed=7)
    a = rand_index((9,), 12, seed=8)
    b = rand_index((4, 3), 9, seed=9)

    def build(g, wi, ai, bi):
        inner = g.op("INDEX", [wi, ai], ints=[0, 0])  # [9, 7]
        outer = g.op("INDEX", [inner, bi], ints=[0, 0])  # [4, 3, 7]
        return [outer, g.op("SUM", [outer], dims=[1, 2])]

    got = compile_and_run(build, w, a, b)
    equal(got[0], w[a][b])
    torch.testing.assert_close(got[1], w[a][b].sum((1, 2)))


@pytest.mark.parametrize("bad", [7, -8, 100])
def test_index_out_of_range_raises(bad):
    x = rand((7, 3), seed=1)
    i = rand_index((5,), 7, seed=2)
    i[3] = bad
    with pytest.raises(IndexError):
        x[i]
    g = _C.Graph()
    g.output(g.op("EXP", [g.op("INDEX", [gin(g, x), gin(g, i)], ints=[1, 0])]))
    c = g.compile()
    with pytest.raises(IndexError, match="index out of range"):
        c(x, i)
    i[3] = 6  # the same compiled graph, now in range
    equal(c(x, i)[0], x[i].exp())


def test_index_refuses_bad_indices():
    g = _C.Graph()
    x = g.input(torch.float32, (3, 4), (4, 1))
    f = g.input(torch.float32, (2,), (1,))
    with pytest.raises(ValueError, match="int32 or int64"):
        g.op("INDEX", [x, f], ints=[0, 0])
    i = g.input(torch.int64, (2,), (1,))
    with pytest.raises(ValueError, match="increase"):
        g.op("INDEX", [x, i, i], ints=[0, 1, 0])


# ---- GATHER ------------------------------------------------------------------
@pytest.mark.parametrize("xshape,ishape,dim", [
    ((4, 5), (4, 3), 1), ((4, 5), (2, 5), 0), ((3, 4, 5), (3, 2, 5), -2), ((6,), (10,), 0),
    ((4, 5), (0, 5), 0), ((3, 4, 5), (1, 4, 2), 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
def test_gather(xshape, ishape, dim, dtype):
    x = rand(xshape, dtype, seed=2)
    i = rand_index(ishape, xshape[dim], seed=3)
    (got,) = compile_and_run(lambda g, xi, ii: [g.op("GATHER", [xi, ii], ints=[dim])], x, i)
    equal(got, torch.gather(x, dim, i))


def test_gather_out_of_range_and_negative_raise():
    x = rand((3, 4), seed=1)
    g = _C.Graph()
    g.output(g.op("GATHER", [gin(g, x), g.input(torch.int64, (3, 2), (2, 1))], ints=[1]))
    c = g.compile()
    for bad in (4, -1):  # gather takes no negative indices
        i = torch.zeros(3, 2, dtype=torch.int64)
        i[2, 1] = bad
        with pytest.raises(RuntimeError):
            torch.gather(x, 1, i)
        with pytest.raises(IndexError):
            c(x, i)


# ---- ONE_HOT ---------------------------------------------------------------
@pytest.mark.parametrize("shape", [(7,), (2, 3), (), (0,)])
def test_one_hot(shape):
    i = rand_index(shape, 5, seed=4)
    (got,) = compile_and_run(lambda g, ii: [g.op("ONE_HOT", [ii], ints=[5])], i)
    equal(got, F.one_hot(i, 5))
    if i.numel():
        bad = i.clone().reshape(-1)
        bad[0] = 5
        with pytest.raises(IndexError):
            compile_and_run(lambda g, ii: [g.op("ONE_HOT", [ii], ints=[5])], bad.reshape(shape))


# ---- creation ops --------------------------------------------------------------
@pytest.mark.parametrize("start,end,step,dtype", [
    (0, 10, 1, torch.int64), (3, -7, -2, torch.int32), (0.5, 3.0, 0.1, torch.float32),
    (-1.0, 1.0, 0.3, torch.float64), (0, 2.5, 0.25, torch.bfloat16), (5, 5, 1, torch.int64)])
def test_arange(start, end, step, dtype):
    want = torch.arange(start, end, step, dtype=dtype)
    g = _C.Graph()
    g.output(g.op("ARANGE", [g.scalar(start), g.scalar(step)], ints=[want.numel()], dtype=dtype))
    equal(g.compile()()[0], want)


@pytest.mark.parametrize("value,dtype,sizes", [
    (1.5, torch.float32, [3, 4]), (7, torch.int64, [5]), (True, torch.bool, [2, 2]), (-2.25, torch.float16, []),
    (0, torch.float32, [0, 3]), (2.7, torch.int32, [2])])
def test_full(value, dtype, sizes):
    g = _C.Graph()
    g.output(g.op("FULL", [g.scalar(value)], ints=sizes, dtype=dtype))
    equal(g.compile()()[0], torch.full(sizes, value, dtype=dtype))


@pytest.mark.parametrize("shape", [(5, 5), (3, 4, 6), (2, 7, 3), (1, 1), (0, 4)])
@pytest.mark.parametrize("k", [0, 1, -2, 9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bool, torch.int64])
def test_tril_triu(shape, k, dtype):
    x = rand(shape, dtype, seed=5)
    got = compile_and_run(lambda g, xi: [g.op("TRIL", [xi], ints=[k]), g.op("TRIU", [xi], ints=[k])], x)
    equal(got[0], x.tril(k))
    equal(got[1], x.triu(k))


def test_causal_mask_in_one_kernel():
    """A causal mask built (ones, tril) and applied (masked_fill) as one kernel."""
    s = rand((2, 6, 6), seed=6)
    g = _C.Graph()
    si = gin(g, s)
    ones = g.op("FULL", [g.scalar(True)], ints=[6, 6], dtype=torch.bool)
    keep = g.op("TRIL", [ones], ints=[0])
    masked = g.op("MASKED_FILL", [si, g.op("LOGICAL_NOT", [keep]), g.scalar(float("-inf"))])
    g.output(masked)
    c = g.compile()
    assert c.nkernels == 1
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    equal(c(s)[0], s.masked_fill(~causal, float("-inf")))


# ---- through torch.compile(backend="wick") -----------------------------------
def compiled_info(fn, *args):
    torch._dynamo.reset()
    n = len(B.compiled_graphs)
    got = torch.compile(fn, backend="wick")(*args)
    return got, B.compiled_graphs[n:]


TC_CASES = {
    "embedding": (lambda w, i: F.embedding(i, w) * 2, lambda: (rand((10, 4)), rand_index((2, 3), 10))),
    "embedding_int32": (lambda w, i: F.embedding(i, w).relu(), lambda: (rand((10, 4)), rand_index((5,), 10, torch.int32))),
    "index_select": (lambda x, i: torch.index_select(x, 1, i).exp(), lambda: (rand((3, 8)), rand_index((5,), 8))),
    "index_select_0d": (lambda x, i: torch.index_select(x, 0, i) + 1, lambda: (rand((3, 8)), torch.tensor(2))),
    "gather": (lambda x, i: torch.gather(x, 1, i) - x[:, :2], lambda: (rand((4, 6)), rand_index((4, 2), 6))),
    "getitem_tensor": (lambda x, i: x[i, 1:3] * 3, lambda: (rand((7, 5)), rand_index((2, 3), 7, negative=True))),
    "getitem_two": (lambda x, i, j: x[i, :, j], lambda: (rand((4, 3, 5)), rand_index((6,), 4), rand_index((6,), 5))),
    "getitem_empty": (lambda x, i: x[i] + 1, lambda: (rand((4, 3)), torch.zeros(0, dtype=torch.int64))),
    "arange": (lambda x: x * torch.arange(5), lambda: (rand((3, 5)),)),
    "full_zeros_ones": (lambda x: x + torch.zeros(5) + torch.ones_like(x) + torch.full((3, 5), 2.5),
                        lambda: (rand((3, 5)),)),
    "causal_softmax": (lambda s: s.masked_fill(torch.ones(6, 6, dtype=torch.bool).tril() == 0, float("-inf"))
                       .softmax(-1), lambda: (rand((2, 6, 6)),)),
    "triu": (lambda x: torch.triu(x, 1) + torch.tril(x, -1), lambda: (rand((4, 5)),)),
}


@pytest.mark.parametrize("name", sorted(TC_CASES))
def test_torch_compile_native(name):
    fn, make = TC_CASES[name]
    args = make()
    got, infos = compiled_info(fn, *args)
    equal(got, fn(*args))
    assert infos and all(i["extern"] == 0 for i in infos), infos  # every op native, none extern


@pytest.mark.parametrize("n", [1, 10, 37])
def test_index_into_creation_ops_at_loaded_positions(n):
    """An index into arange/full values at positions read from a tensor
    (position ids picked by an index): the index value names an indirect
    variable without a read through it. It compiled to C naming a variable
    never declared, and the graph ran eagerly."""
    torch._dynamo.reset()
    B.fallback_reasons.clear()
    B.compiled_graphs.clear()

    def f(x, idx):
        pos = torch.arange(x.shape[0])
        grid = torch.arange(12).view(3, 4) * 3
        return pos[idx] * 2 + x[idx], grid[idx % 3], torch.full((x.shape[0],), 7)[idx] + pos[idx.flip(0)]

    g = torch.Generator().manual_seed(n)
    x, idx = torch.randn(n, generator=g), torch.randint(0, n, (5,), generator=g)
    want = f(x, idx)
    got = torch.compile(f, backend="wick")(x, idx)
    assert not B.fallback_reasons, B.fallback_reasons
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert B.compiled_graphs and all(i["kernels"] for i in B.compiled_graphs)


def test_torch_compile_out_of_range_raises_eagers_error():
    w = rand((10, 4))
    fn = torch.compile(lambda w, i: F.embedding(i, w) * 2, backend="wick")
    torch._dynamo.reset()
    equal(fn(w, rand_index((3,), 10)), F.embedding(rand_index((3,), 10), w) * 2)
    with pytest.raises(IndexError, match="index out of range in self"):  # eager's message
        fn(w, torch.tensor([1, 10, 2]))


VIEW_CASES = {
    # index through views of the table and of the index (VIEW nodes inlined into the indirect load)
    "transposed_table": (lambda x, i: x.t()[i] + 1, lambda: (rand((5, 9)), rand_index((4,), 9, negative=True))),
    "reshaped_table": (lambda x, i: x.reshape(6, 10)[i, 2:7], lambda: (rand((3, 20)), rand_index((2, 2), 6))),
    "strided_index": (lambda x, i: torch.gather(x, 1, i[:, ::2]), lambda: (rand((4, 6)), rand_index((4, 6), 6))),
    "index_of_slice": (lambda x, i: torch.index_select(x[1:, ::2], 0, i[1]), lambda: (rand((7, 8)), rand_index((2, 3), 6))),
    "bf16_embedding": (lambda w, i: F.embedding(i, w) * 2, lambda: (rand((10, 4), torch.bfloat16), rand_index((3,), 10))),
    "gather_then_reduce": (lambda x, i: torch.gather(x, 1, i).sum(1), lambda: (rand((5, 7)), rand_index((5, 9), 7))),
}


@pytest.mark.parametrize("name", sorted(VIEW_CASES))
def test_torch_compile_indexing_through_views(name):
    fn, make = VIEW_CASES[name]
    args = make()
    got, infos = compiled_info(fn, *args)
    want = fn(*args)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want)
    assert infos and all(i["extern"] == 0 for i in infos), infos


def test_index_into_an_empty_dim_raises():
    x = rand((0, 3))
    i = torch.tensor([0])
    with pytest.raises(IndexError):
        x[i]
    g = _C.Graph()
    g.output(g.op("INDEX", [gin(g, x), gin(g, i)], ints=[1, 0]))
    with pytest.raises(IndexError):
        g.compile()(x, i)


def _random_indexing_case(seed):
    """A random graph: a table read through INDEX or GATHER (random dims,
    index ranks and dtypes, negative indices where wrapped), the result
    mixed with a broadcast operand and optionally reduced or indexed again."""
    r = torch.Generator().manual_seed(seed)

    def ri(lo, hi):
        return int(torch.randint(lo, hi, (), generator=r))

    nd = ri(1, 4)
    xshape = tuple(ri(1, 6) for _ in range(nd))
    x = rand(xshape, seed=seed)
    ops = []
    if ri(0, 2) == 0:
        k = ri(1, nd + 1)
        dims = sorted(torch.randperm(nd, generator=r)[:k].tolist())
        bshape = tuple(ri(1, 4) for _ in range(ri(0, 3)))
        idx = [rand_index(bshape[ri(0, len(bshape) + 1):] if bshape else (), xshape[d],
                          torch.int32 if ri(0, 2) else torch.int64, seed=seed + 7 + d, negative=True) for d in dims]
        full = [None] * (dims[-1] + 1)
        for d, i in zip(dims, idx):
            full[d] = i
        want = torch.ops.aten.index.Tensor(x, full)
        ops.append(("INDEX", idx, [1] + dims))
    else:
        dim = ri(0, nd)
        ishape = tuple(ri(1, s + 1) if d != dim else ri(0, 7) for d, s in enumerate(xshape))
        idx = [rand_index(ishape, xshape[dim], seed=seed + 3)]
        want = torch.gather(x, dim, idx[0])
        ops.append(("GATHER", idx, [dim]))
    y = rand(want.shape[-1:] if want.dim() else (), seed=seed + 11)
    post = ri(0, 3)
    if post == 0:
        want2 = torch.tanh(want * y)
    elif post == 1:
        want2 = (want + y).sum(-1) if want.dim() else want + y
    else:
        want2 = want - y
    return x, ops, y, post, want2


@pytest.mark.parametrize("seed", range(40))
def test_random_indexing_graphs(seed):
    x, ops, y, post, want = _random_indexing_case(seed)
    (name, idx, ints), = ops
    g = _C.Graph()
    xi, yi = gin(g, x), gin(g, y)
    ii = [gin(g, i) for i in idx]
    v = g.op(name, [xi, *ii], ints=ints)
    nd = len(g.value(v)["sizes"])
    if post == 0:
        o = g.op("TANH", [g.op("MUL", [v, yi])])
    elif post == 1 and nd:
        o = g.op("SUM", [g.op("ADD", [v, yi])], dims=[nd - 1])
    elif post == 1:
        o = g.op("ADD", [v, yi])
    else:
        o = g.op("SUB", [v, yi])
    g.output(o)
    got = g.compile()(*([x, y] + idx))[0]
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_tril_triu_huge_diagonal_and_full_overflow():
    x = rand((3, 4), seed=2)
    big = 2 ** 62
    got = compile_and_run(lambda g, xi: [g.op("TRIL", [xi], ints=[big]), g.op("TRIU", [xi], ints=[-big]),
                                         g.op("TRIL", [xi], ints=[-big]), g.op("TRIU", [xi], ints=[big])], x)
    equal(got[0], x.tril(big))
    equal(got[1], x.triu(-big))
    equal(got[2], x.tril(-big))
    equal(got[3], x.triu(big))
    g = _C.Graph()
    g.output(g.op("FULL", [g.scalar(1e30)], ints=[2], dtype=torch.int64))
    with pytest.raises(Exception, match="overflow"):
        g.compile()
    fn = lambda x: x + torch.full((3, 4), 2 ** 40, dtype=torch.int32)  # noqa: E731
    for f in (fn, torch.compile(fn, backend="wick")):  # eager's error, compiled or not
        torch._dynamo.reset()
        with pytest.raises(RuntimeError, match="overflow"):
            f(x.int())


# ---- SCATTER (ops.def note 13) ------------------------------------------------
SCATTER_CASES = [
    ((5, 6), (3, 4), (4, 5), 0), ((5, 6), (3, 4), (4, 5), 1), ((4, 3, 5), (4, 2, 5), (4, 2, 6), -2),
    ((7,), (12,), (12,), 0), ((3, 4), (0, 4), (0, 4), 0), ((1, 4), (1, 3), (2, 3), 1)]


@pytest.mark.parametrize("xshape,ishape,sshape,dim", SCATTER_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
@pytest.mark.parametrize("add", [0, 1])
def test_scatter(xshape, ishape, sshape, dim, dtype, add):
    x, src = rand(xshape, dtype, seed=1), rand(sshape, dtype, seed=2)
    i = rand_index(ishape, xshape[dim], seed=3)  # repeated indices: scatter keeps the last, scatter_add sums
    want = x.scatter_add(dim, i, src) if add else x.scatter(dim, i, src)
    (got,) = compile_and_run(lambda g, xi, ii, si: [g.op("SCATTER", [xi, ii, si], ints=[dim, add, 0])], x, i, src)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5) if dtype != torch.bfloat16 else \
        torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1e-2)


def test_scatter_value_and_out_of_range():
    x, i = rand((4, 5), seed=1), rand_index((3, 5), 4, seed=2)
    (got,) = compile_and_run(lambda g, xi, ii: [g.op("SCATTER", [xi, ii, g.scalar(-1.5)], ints=[0, 0, 0])], x, i)
    equal(got, x.scatter(0, i, -1.5))
    i[2, 3] = 4
    with pytest.raises(RuntimeError):
        x.scatter(0, i, -1.5)
    with pytest.raises(IndexError):
        compile_and_run(lambda g, xi, ii: [g.op("SCATTER", [xi, ii, g.scalar(-1.5)], ints=[0, 0, 0])], x, i)


def _setitem(x, i, v):
    y = x.clone()
    y[i] = v
    return y * 2


SCATTER_TC = {
    "setitem_rows": (_setitem, lambda: (rand((6, 3)), torch.tensor([0, -2, 4]), rand((3, 3)))),
    "setitem_broadcast": (_setitem, lambda: (rand((6, 3)), torch.tensor([1, 5]), rand((3,)))),
    "index_put_accumulate": (lambda x, i, v: x.index_put((i,), v, accumulate=True) + 1,
                             lambda: (rand((5, 4)), torch.tensor([0, 2, 0, -1, 2]), rand((5, 4)))),
    "index_put_int32_index": (lambda x, i, v: x.index_put((i,), v, accumulate=True),
                              lambda: (rand((5, 3), torch.int64), torch.tensor([4, 0, 4], dtype=torch.int32),
                                       rand((3, 3), torch.int64))),
    "scatter_add": (lambda x, i, v: x.scatter_add(1, i, v).exp(),
                    lambda: (rand((5, 3)), rand_index((5, 7), 3), rand((5, 7)))),
    "scatter": (lambda x, i, v: x.scatter(0, i, v), lambda: (rand((5, 3)), rand_index((4, 3), 5), rand((4, 3)))),
    "scatter_value": (lambda x, i: x.scatter(0, i, 2.5), lambda: (rand((5, 3)), rand_index((4, 2), 5))),
}


@pytest.mark.parametrize("name", sorted(SCATTER_TC))
def test_torch_compile_scatter_native(name):
    fn, make = SCATTER_TC[name]
    args = make()
    got, infos = compiled_info(fn, *args)
    want = fn(*args)
    torch.testing.assert_close(got, want)
    assert infos and all(i["extern"] == 0 for i in infos), infos


def test_torch_compile_scatter_out_of_range_raises_eagers_error():
    fn = torch.compile(lambda x, i, v: x.scatter_add(0, i, v), backend="wick")
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match="out of bounds"):
        fn(rand((5, 3)), torch.tensor([[7, 0, 0]]), rand((1, 3)))


def test_index_put_with_a_mask_stays_extern():
    """A bool mask selects a data-dependent set: not a SCATTER, an extern call."""
    fn = lambda x, m, v: x.index_put((m,), v)  # noqa: E731
    x, m, v = rand((5, 5)), torch.tensor([True, False, True, False, False]), rand((5,))
    got, infos = compiled_info(fn, x, m, v)
    torch.testing.assert_close(got, fn(x, m, v))
    assert infos and sum(i["extern"] for i in infos) >= 1, infos  # compiled (no fallback), the op extern
