"""VIEW nodes (ops.def note 8): views as index remaps in the loop IR, and as
real views (as_strided of the base, eager's strides) where a tensor is needed.

Every case builds the view's attributes from what torch itself gives for the
op on a real tensor, runs the compiled graph and compares with eager: values
always, and for views that are graph outputs also strides and aliasing.
"""
import pytest
import torch

import wick  # noqa: F401  (registers backend="wick")
from wick import _C
from wick import backends as B

# (name, op on a tensor of the base shape, base shape)
VIEW_CASES = [
    ("t", lambda x: x.t(), (4, 6)),
    ("transpose3", lambda x: x.transpose(0, 2), (2, 3, 5)),
    ("permute", lambda x: x.permute(2, 0, 1), (2, 3, 5)),
    ("view_split", lambda x: x.view(2, 3, 4), (6, 4)),
    ("view_merge", lambda x: x.view(24), (4, 6)),
    ("view_merge_inner", lambda x: x.view(2, 15), (2, 3, 5)),
    ("unsqueeze", lambda x: x.unsqueeze(1), (4, 6)),
    ("squeeze", lambda x: x.squeeze(1), (4, 1, 6)),
    ("expand", lambda x: x.unsqueeze(0).expand(3, 4, 6), (4, 6)),
    ("expand_row", lambda x: x.expand(5, 6), (1, 6)),
    ("slice", lambda x: x[1:3], (4, 6)),
    ("slice_step", lambda x: x[:, 1::2], (4, 6)),
    ("select", lambda x: x[2], (4, 6)),
    ("select_col", lambda x: x[:, 3], (4, 6)),
    ("select_0d", lambda x: x[1, 2], (4, 6)),
    ("narrow", lambda x: x.narrow(1, 2, 3), (4, 6)),
    ("diagonal", lambda x: x.diagonal(), (5, 5)),
    ("unfold", lambda x: x.unfold(1, 3, 2), (4, 7)),
    ("as_strided", lambda x: x.as_strided((3, 3), (2, 1), 1), (4, 6)),
    ("empty", lambda x: x[:, 6:], (4, 6)),
    ("t_of_slice", lambda x: x[1:, 2:].t(), (4, 6)),
]


def view_attrs(v, base):
    return [v.dim(), *v.shape, *v.stride(), v.storage_offset() - base.storage_offset()]


def make_base(shape, layout, seed):
    g = torch.Generator().manual_seed(seed)
    if layout == "contiguous":
        return torch.randn(shape, generator=g)
    if layout == "transposed":  # same shape, reversed memory order
        return torch.randn(tuple(reversed(shape)), generator=g).permute(*reversed(range(len(shape))))
    # a slice of a bigger tensor: a storage offset and row gaps
    big = torch.randn((shape[0] + 1,) + tuple(s + 2 for s in shape[1:]), generator=g)
    return big[(slice(1, None),) + tuple(slice(1, 1 + s) for s in shape[1:])]


def add_input(g, t):
    return g.input(t.dtype, tuple(t.shape), tuple(t.stride()))


@pytest.mark.parametrize("name,op,shape", VIEW_CASES, ids=[c[0] for c in VIEW_CASES])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_view_of_input(name, op, shape, layout):
    x = make_base(shape, layout, seed=len(name))
    try:
        want_view = op(x)
    except RuntimeError:
        pytest.skip("torch has no such view of this layout")
    g = _C.Graph()
    xi = add_input(g, x)
    try:
        v = g.op("VIEW", [xi], ints=view_attrs(want_view, x))
    except ValueError as e:
        # refused views must be the ones no index map expresses: merges of a
        # non-contiguous base; the ATen importer keeps those as externs
        assert layout != "contiguous", e
        return
    g.output(v)  # the view itself: a real view of the input, eager's strides
    g.output(g.op("ADD", [g.op("MUL", [v, g.scalar(2.0)]), g.scalar(1.0)]))  # read by a kernel
    got_view, got = _C.Graph.compile(g)(x)
    assert got_view.shape == want_view.shape and got_view.stride() == want_view.stride()
    assert torch.equal(got_view, want_view)
    if want_view.numel():
        assert got_view.data_ptr() == want_view.data_ptr()  # no copy
    torch.testing.assert_close(got, want_view * 2.0 + 1.0, rtol=0, atol=0)


@pytest.mark.parametrize("name,op,shape", VIEW_CASES, ids=[c[0] for c in VIEW_CASES])
def test_view_of_computed_value(name, op, shape):
    """The base is a kernel's value: the view is inlined into the next kernel
    (an index remap), and as a graph output it views the base's buffer."""
    x = make_base(shape, "contiguous", seed=3)
    base = (x * 3.0).exp()
    want_view = op(base)
    g = _C.Graph()
    xi = add_input(g, x)
    b = g.op("EXP", [g.op("MUL", [xi, g.scalar(3.0)])])
    v = g.op("VIEW", [b], ints=view_attrs(want_view, base))
    g.output(g.op("SUB", [v, g.scalar(0.5)]))
    g.output(v)
    c = _C.Graph.compile(g)
    got, got_view = c(x)
    torch.testing.assert_close(got, want_view - 0.5)
    torch.testing.assert_close(got_view, want_view)
    assert got_view.stride() == want_view.stride()


def test_view_only_read_by_kernels_costs_no_step():
    x = torch.randn(6, 4)
    g = _C.Graph()
    xi = add_input(g, x)
    v = g.op("VIEW", [xi], ints=view_attrs(x.t(), x))
    g.output(g.op("NEG", [v]))
    c = _C.Graph.compile(g)
    assert [s["kind"] for s in c.describe()["steps"]] == ["kernels"]
    assert torch.equal(c(x)[0], -x.t())


def test_view_of_view_is_folded():
    x = torch.randn(4, 6, 5)
    v1 = x[1:, :, 2]
    v2 = v1.t()[1:]
    g = _C.Graph()
    xi = add_input(g, x)
    a = g.op("VIEW", [xi], ints=view_attrs(v1, x))
    b = g.op("VIEW", [a], ints=[2, *v2.shape, *v2.stride(), v2.storage_offset() - v1.storage_offset()])
    node = [n for n in g.nodes() if n["op"] == "VIEW"][-1]
    assert node["inputs"] == [xi]  # reads the first base directly
    g.output(b)
    g.output(g.op("MUL", [b, b]))
    got_view, sq = _C.Graph.compile(g)(x)
    assert torch.equal(got_view, v2) and got_view.stride() == v2.stride()
    assert torch.equal(sq, v2 * v2)


def test_views_outside_the_base_are_refused():
    g = _C.Graph()
    xi = g.input(torch.float32, (4, 6), (6, 1))
    with pytest.raises(ValueError, match="outside"):
        g.op("VIEW", [xi], ints=[2, 4, 7, 6, 1, 0])
    with pytest.raises(ValueError, match="outside"):
        g.op("VIEW", [xi], ints=[1, 3, 1, 22])
    with pytest.raises(ValueError):
        g.op("VIEW", [xi], ints=[2, 4, 6])  # malformed attrs


@pytest.mark.parametrize("dtype", [torch.float16, torch.int32, torch.bool, torch.float64])
def test_view_dtypes(dtype):
    x = (torch.randn(5, 8) * 4).to(dtype)
    want = x[:, 1::3].t()
    g = _C.Graph()
    xi = add_input(g, x)
    v = g.op("VIEW", [xi], ints=view_attrs(want, x))
    g.output(v)
    g.output(g.op("CONVERT", [v], dtype=torch.float32))
    got_view, conv = _C.Graph.compile(g)(x)
    assert torch.equal(got_view, want) and got_view.stride() == want.stride()
    assert torch.equal(conv, want.to(torch.float32))


# ---- through torch.compile(backend="wick") ------------------------------------

def _compiled_views():
    return sum(i.get("views", 0) for i in B.compiled_graphs)


FX_CASES = {
    "t_output": lambda x: x.t(),
    "reshape_add": lambda x: x.reshape(-1, 2) + 1,
    "slices": lambda x: x[1:, ::2] * 2,
    "expand": lambda x: x.unsqueeze(0).expand(3, -1, -1).exp(),
    "transpose_softmax": lambda x: torch.softmax(x.transpose(0, 1), -1),
    "select_sum": lambda x: x[2] + x[:, 1].sum(),
    "permute_out": lambda x: (x * 2).permute(1, 0),
    "mm_of_t": lambda x: torch.mm(x.t(), x) + 1,
}


@pytest.mark.parametrize("name", list(FX_CASES))
@pytest.mark.parametrize("noncontig", [False, True])
def test_views_through_torch_compile(name, noncontig):
    fn = FX_CASES[name]
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, 8, generator=g)
    if noncontig:
        x = torch.randn(8, 6, generator=g).t()
    want = fn(x)
    n0, v0 = len(B.fallback_reasons), _compiled_views()
    with torch.no_grad():
        got = torch.compile(fn, backend="wick")(x)
    assert len(B.fallback_reasons) == n0
    assert _compiled_views() > v0
    assert got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got, want)


def test_views_in_training():
    torch._dynamo.reset()
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 6)
    x = torch.randn(2, 5, 8)

    def f(x):
        h = lin(x).transpose(1, 2)  # views around addmm, in forward and backward
        return (h[:, 1:].sigmoid() * h[:, :-1]).sum()

    def run(fn):
        for p in lin.parameters():
            p.grad = None
        out = fn(x)
        out.backward()
        return out.detach(), [p.grad.clone() for p in lin.parameters()]

    want = run(f)
    n0, v0 = len(B.fallback_reasons), _compiled_views()
    got = run(torch.compile(f, backend="wick"))
    assert len(B.fallback_reasons) == n0 and _compiled_views() > v0
    torch.testing.assert_close(got[0], want[0])
    for a, b in zip(got[1], want[1]):
        torch.testing.assert_close(a, b)


SPLIT_CASES = {
    "split": lambda x: [t * 2 for t in x.split(3, dim=1)],
    "split_sizes": lambda x: list(x.split([2, 5], 1)),
    "unbind_chunk": lambda x: [x.unbind(0)[1] + x.chunk(2, 1)[1].sum(1)[0]],
}


@pytest.mark.parametrize("name", list(SPLIT_CASES))
@pytest.mark.parametrize("noncontig", [False, True])
def test_multi_output_views_through_torch_compile(name, noncontig):
    """split/unbind/chunk: one VIEW per item, no extern call."""
    fn = SPLIT_CASES[name]
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 4, generator=g).t() if noncontig else torch.randn(4, 7, generator=g)
    want = fn(x)
    n0, v0 = len(B.fallback_reasons), _compiled_views()
    with torch.no_grad():
        got = torch.compile(fn, backend="wick")(x)
    assert len(B.fallback_reasons) == n0 and _compiled_views() > v0
    assert not any("split" in k or "unbind" in k for k in B.compiled_graphs[-1]["externs"])
    for a, b in zip(got, want):
        assert a.shape == b.shape
        assert all(s == t for n, s, t in zip(a.shape, a.stride(), b.stride()) if n != 1)
        torch.testing.assert_close(a, b)
