"""Extern nodes: calls into PyTorch between generated kernels (graph.h,
program.h, runtime.h). Each test builds a wick graph by hand with
Graph.extern, compiles it with an extern table, and compares with eager."""
import pytest
import torch

import wick._C as C

X = C.ExternInput


def meta(t):
    return {"dtype": t.dtype, "sizes": tuple(t.shape), "strides": t.stride()}


def assert_same(got, want, **kw):
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, **kw)


@pytest.mark.parametrize("shape", [(4, 6, 5), (1, 3, 7), (17, 33, 9)])
def test_matmul_between_pointwise(shape):
    m, k, n = shape
    torch.manual_seed(0)
    x, w, b = torch.randn(m, k), torch.randn(k, n), torch.randn(n)
    g = C.Graph()
    xi, wi, bi = g.input_like(x), g.input_like(w), g.input_like(b)
    x2 = g.op("mul", [xi, g.scalar(2.0)])
    (mm,) = g.extern(0, [x2, wi], [meta(torch.empty(m, n))], name="torch.mm")
    y = g.op("relu", [g.op("add", [mm, bi])])
    s = g.op("sum", [y], dims=1)
    g.output(y)
    g.output(s)
    cg = g.compile(externs=[torch.mm])
    assert [st["kind"] for st in cg.steps] == ["kernels", "extern", "kernels"]
    assert cg.nextern == 1 and cg.nnative == 4
    y_w, s_w = cg(x, w, b)
    want = torch.relu(torch.mm(x * 2.0, w) + b)
    assert_same(y_w, want)
    assert_same(s_w, want.sum(1), rtol=1e-5, atol=1e-5)
    # no recompilation of anything on a second call; fresh outputs
    y2, _ = cg(x, w, b)
    assert y2.data_ptr() != y_w.data_ptr()
    assert_same(y2, want)


def test_extern_returning_tuple():
    torch.manual_seed(1)
    x = torch.randn(5, 7)
    g = C.Graph()
    xi = g.input_like(x)
    vals, idx = torch.max(x, dim=1)
    v, i = g.extern(0, [xi], [meta(vals), meta(idx)], name="torch.max")
    g.output(g.op("mul", [v, g.scalar(3)]))
    g.output(g.op("add", [i, g.scalar(1)]))
    cg = g.compile(externs=[(torch.max, (X(0),), {"dim": 1})])
    a, b = cg(x)
    assert_same(a, vals * 3)
    assert_same(b, idx + 1)


def test_extern_picks_skip_non_tensors():
    torch.manual_seed(2)
    x = torch.randn(3, 4)

    def f(t):
        return (None, t.exp(), "ignored", t.sum(0))

    g = C.Graph()
    xi = g.input_like(x)
    e, s = g.extern(0, [xi], [meta(x), meta(x.sum(0))], name="f")
    g.output(g.op("add", [e, s]))
    cg = g.compile(externs=[(f, (X(0),), None, (1, 3))])
    assert_same(cg(x)[0], x.exp() + x.sum(0))


@pytest.mark.parametrize("shape", [(3, 5), (8, 1), (0, 4)])
def test_extern_returning_view(shape):
    torch.manual_seed(3)
    x, y = torch.randn(*shape), torch.randn(shape[::-1])
    g = C.Graph()
    xi, yi = g.input_like(x), g.input_like(y)
    t = x.t()
    (ti,) = g.extern(0, [xi], [meta(t)], name="Tensor.t")  # strides (1, n): a view
    g.output(g.op("add", [ti, yi]))
    g.output(ti)
    cg = g.compile(externs=[(torch.t, (X(0),))])
    s, tv = cg(x, y)
    assert_same(s, x.t() + y)
    assert tv._base is x and tv.stride() == t.stride()  # the view itself, no copy


def test_extern_with_non_tensor_args_and_lists():
    torch.manual_seed(4)
    a, b = torch.randn(2, 3), torch.randn(4, 3)
    g = C.Graph()
    ai, bi = g.input_like(a), g.input_like(b)
    a1 = g.op("sigmoid", [ai])
    c = torch.cat([a, b], 0)
    (ci,) = g.extern(0, [a1, bi], [meta(c)], name="torch.cat")
    s = torch.sum(c, dim=1, keepdim=True, dtype=torch.float64)
    (si,) = g.extern(1, [ci], [meta(s)], name="torch.sum")
    g.output(g.op("mul", [si, g.scalar(0.5)]))
    table = [(torch.cat, ([X(0), X(1)],), {"dim": 0}),
             (torch.sum, (X(0),), {"dim": 1, "keepdim": True, "dtype": torch.float64})]
    cg = g.compile(externs=table)
    (out,) = cg(a, b)
    assert_same(out, torch.sum(torch.cat([a.sigmoid(), b], 0), dim=1, keepdim=True, dtype=torch.float64) * 0.5)


def test_extern_output_is_graph_output_and_shared_index():
    torch.manual_seed(5)
    x = torch.randn(6)
    g = C.Graph()
    xi = g.input_like(x)
    (e1,) = g.extern(0, [xi], [meta(x)], name="torch.sin")
    (e2,) = g.extern(0, [e1], [meta(x)], name="torch.sin")  # the same table entry twice
    g.output(e2)
    g.output(e1)
    cg = g.compile(externs=[torch.sin])
    assert cg.nkernels == 0 and cg.source == ""  # nothing to generate
    o2, o1 = cg(x)
    assert_same(o1, x.sin())
    assert_same(o2, x.sin().sin())


def test_extern_error_propagates():
    x = torch.randn(3, 4)
    g = C.Graph()
    xi = g.input_like(x)
    y = g.op("exp", [xi])
    (e,) = g.extern(0, [y, xi], [meta(torch.empty(3, 3))], name="torch.mm")
    g.output(g.op("neg", [e]))
    cg = g.compile(externs=[torch.mm])
    with pytest.raises(RuntimeError) as got:
        cg(x, )
    with pytest.raises(RuntimeError) as want:
        torch.mm(x.exp(), x)
    assert str(got.value) == str(want.value)

    def boom(t):
        raise KeyError("boom")

    g2 = C.Graph()
    xi = g2.input_like(x)
    (e,) = g2.extern(0, [xi], [meta(x)], name="boom")
    g2.output(e)
    with pytest.raises(KeyError, match="boom"):
        g2.compile(externs=[boom])(x)


def test_extern_other_strides_are_copied():
    """The metadata promised a contiguous tensor, the extern returned a
    transposed view: kernels must still read the right elements."""
    torch.manual_seed(6)
    x = torch.randn(4, 5)
    g = C.Graph()
    xi = g.input_like(x)
    (e,) = g.extern(0, [xi], [meta(torch.empty(5, 4))], name="t")
    g.output(g.op("mul", [e, g.scalar(2.0)]))
    cg = g.compile(externs=[torch.t])
    assert_same(cg(x)[0], x.t() * 2.0)


def test_extern_wrong_metadata_raises():
    x = torch.randn(4, 5)
    g = C.Graph()
    xi = g.input_like(x)
    (e,) = g.extern(0, [xi], [meta(torch.empty(4, 5, dtype=torch.float64))], name="wrong")
    g.output(g.op("mul", [e, g.scalar(2.0)]))
    cg = g.compile(externs=[torch.exp])
    with pytest.raises(RuntimeError, match="differs from its metadata"):
        cg(x)


def test_float16_flows_through_externs_and_kernels():
    torch.manual_seed(7)
    x = torch.randn(3, 4)
    g = C.Graph()
    xi = g.input_like(x)
    h = x.half()
    (hi,) = g.extern(0, [xi], [meta(h)], name="half")
    g.output(g.op("neg", [hi]))  # kernels load float16 as float32 and round on store
    (back,) = g.extern(1, [hi], [meta(x)], name="float")
    g.output(g.op("add", [back, xi]))
    g.output(hi)
    cg = g.compile(externs=[lambda t: t.half(), lambda t: t.float()])
    n, s, hv = cg(x)
    assert_same(n, -x.half())
    assert_same(hv, x.half())
    assert_same(s, x.half().float() + x)


def test_extern_table_errors():
    x = torch.randn(3)
    g = C.Graph()
    xi = g.input_like(x)
    (e,) = g.extern(2, [xi], [meta(x)], name="neg")
    g.output(e)
    with pytest.raises(ValueError, match="no extern table"):
        g.compile()
    with pytest.raises(ValueError, match="entry 2 .neg. is None"):
        g.compile(externs=[torch.neg, None, None])
    with pytest.raises(ValueError, match="has 1 entries, the graph uses 3"):
        g.compile(externs=[torch.neg])
    with pytest.raises(TypeError, match="callable, a tuple"):
        g.compile(externs=[torch.neg, 3, torch.neg])
    with pytest.raises(ValueError, match="picks 2 outputs"):
        g.compile(externs=[None, None, (torch.neg, (X(0),), None, (0, 1))])
    with pytest.raises(ValueError, match="Python scalar"):
        g.extern(0, [g.scalar(1.0)], [meta(x)])
    with pytest.raises(ValueError, match="outputs >= 1"):
        g.extern(0, [xi], [])


def test_many_stages_and_liveness():
    """Alternating kernels and externs; independent pointwise work is
    computed once, in the stage that reads it."""
    torch.manual_seed(8)
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    g = C.Graph()
    xi, wi = g.input_like(x), g.input_like(w)
    h = xi
    ref = x
    side = g.op("tanh", [xi])  # independent of the matmuls: stage 0
    for _ in range(4):
        (h,) = g.extern(0, [g.op("relu", [h]), wi], [meta(x)], name="mm")
        ref = torch.mm(torch.relu(ref), w)
    g.output(g.op("add", [h, side]))
    cg = g.compile(externs=[torch.mm])
    kinds = [st["kind"] for st in cg.steps]
    assert kinds == ["kernels", "extern"] * 4 + ["kernels"]
    for _ in range(3):
        assert_same(cg(x, w)[0], ref + x.tanh(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("keep", [False, True])
def test_pointwise_work_moves_to_the_stage_that_reads_it(keep):
    """A backward graph's recomputation ((x - mean) * rstd from saved inputs)
    depends only on graph inputs but is read after a matmul: it runs in the
    matmul's reader's stage, fused there, not written out in the first stage
    and read back (pipeline.c, sink_to_readers). Work whose inputs cost more
    to read later than its output costs to write and read back (a where of
    three full-size inputs) stays in the first stage."""
    torch.manual_seed(9)
    rows, cols = 24, 40
    x, gr, w = torch.randn(rows, cols), torch.randn(rows, cols), torch.randn(cols, cols)
    mean, rstd = x.mean(1, keepdim=True), torch.rand(rows, 1) + 0.5
    cond = torch.rand(rows, cols) > 0.5
    g = C.Graph()
    xi, mi, ri, gi, wi, ci = (g.input_like(t) for t in (x, mean, rstd, gr, w, cond))
    xhat = g.op("mul", [g.op("sub", [xi, mi]), ri])
    (h,) = g.extern(0, [gi, wi], [meta(gr)], name="torch.mm")
    g.output(g.op("sum", [g.op("mul", [h, xhat])], dims=0))
    hw = torch.mm(gr, w)
    want = [(hw * ((x - mean) * rstd)).sum(0)]
    if keep:
        kept = g.op("where", [ci, xi, gi])
        g.output(g.op("add", [h, kept]))
        want.append(hw + torch.where(cond, x, gr))
    cg = g.compile(externs=[torch.mm])
    steps = cg.steps
    if keep:
        assert [st["kind"] for st in steps] == ["kernels", "extern", "kernels"]
        assert len(steps[0]["outputs"]) == 1  # the where's value; not the recomputation's
    else:
        assert [st["kind"] for st in steps] == ["extern", "kernels"]
    for got, ref in zip(cg(x, mean, rstd, gr, w, cond), want):
        assert_same(got, ref, rtol=1e-5, atol=1e-5)


def test_node_introspection_and_ints():
    g = C.Graph()
    a = g.input("float32", (2, 3), (3, 1))
    e = g.extern(4, [a], [{"dtype": "float32", "sizes": (3, 2), "strides": (1, 3)},
                          {"dtype": "int64", "sizes": (), "strides": ()}], name="aten.foo")
    assert e == [e[0], e[0] + 1]
    n = [nd for nd in g.nodes() if nd["op"] == "EXTERN"][0]
    assert n["outputs"] == e and n["extern_index"] == 4 and n["name"] == "aten.foo" and n["inputs"] == [a]
    assert g.value(e[0])["strides"] == (1, 3)
    r = g.op("relu", [a], ints=[5, -1, 7])
    assert [nd for nd in g.nodes() if nd["output"] == r][0]["ints"] == (5, -1, 7)
    text = g.print()
    assert "EXTERN[4 aten.foo](%0)" in text and "ints=[5, -1, 7]" in text
