"""CAT and PAD (ops.def note 9): clamped loads selected by index comparisons,
compared with eager on several shapes, dtypes, layouts, empty inputs, and
through torch.compile(backend="wick") (cat, stack, constant pad)."""
import pytest
import torch
import torch.nn.functional as F

import wick  # noqa: F401
from wick import _C
from wick import backends as B


def gin(g, t):
    return g.input(t.dtype, tuple(t.shape), tuple(t.stride()))


def rand(shape, dtype, seed):
    t = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 5
    return t.to(dtype)


CAT_CASES = [
    ([(2, 3), (4, 3), (1, 3)], 0, [torch.float32] * 3),
    ([(2, 3), (2, 0), (2, 5)], 1, [torch.float32, torch.float32, torch.int64]),  # promotion, an empty part
    ([(2, 1, 4), (2, 2, 4)], -2, [torch.float16, torch.float32]),
    ([(3,)], 0, [torch.int32]),
    ([(0, 4), (0, 4)], 0, [torch.float32] * 2),
    ([(2, 3), (2, 3)], 1, [torch.bool, torch.bool]),
    ([(1, 1), (1, 1), (1, 1)], 1, [torch.bfloat16] * 3),
]


@pytest.mark.parametrize("shapes,dim,dtypes", CAT_CASES)
@pytest.mark.parametrize("transposed", [False, True])
def test_cat(shapes, dim, dtypes, transposed):
    ts = [rand(s, dt, i) for i, (s, dt) in enumerate(zip(shapes, dtypes))]
    if transposed:
        ts = [t.t().contiguous().t() if t.dim() == 2 else t for t in ts]
    g = _C.Graph()
    o = g.op("CAT", [gin(g, t) for t in ts], ints=[dim])
    g.output(o)
    g.output(g.op("ADD", [o, o]))
    got = g.compile()(*ts)
    want = torch.cat(ts, dim)
    assert got[0].dtype == want.dtype and torch.equal(got[0], want)
    assert torch.equal(got[1], want + want)


def test_cat_refuses_mismatched_sizes():
    g = _C.Graph()
    a = g.input(torch.float32, (2, 3), (3, 1))
    b = g.input(torch.float32, (3, 3), (3, 1))
    with pytest.raises(ValueError, match="sizes of tensors must match"):
        g.op("CAT", [a, b], ints=[1])


PAD_CASES = [
    ((3, 4), [1, 2, 0, 1], 0.5, torch.float32),
    ((3, 4), [-1, 2, 1, -1], -2.0, torch.float32),  # negative pads crop
    ((2, 3, 4), [0, 0, 2, 0, 0, 3], 7, torch.int64),
    ((1, 5), [0, 0, 2, 2], 1.5, torch.float32),
    ((0, 3), [1, 1, 0, 0], 3.0, torch.float32),
    ((4,), [3, 3], 1.0, torch.float16),
    ((2, 2), [1, 1, 1, 1], True, torch.bool),
]


@pytest.mark.parametrize("shape,pads,value,dtype", PAD_CASES)
def test_pad(shape, pads, value, dtype):
    x = rand(shape, dtype, 3)
    want = F.pad(x, pads, value=value)
    nd = x.dim()
    per = []
    for d in range(nd):
        k = nd - 1 - d
        per += [pads[2 * k], pads[2 * k + 1]] if 2 * k + 1 < len(pads) else [0, 0]
    g = _C.Graph()
    g.output(g.op("PAD", [gin(g, x), g.scalar(value)], ints=per))
    got = g.compile()(x)[0]
    assert got.dtype == want.dtype and torch.equal(got, want)


FX_CASES = {
    "rotate_half": lambda x: torch.cat((-x[..., 4:], x[..., :4]), dim=-1) * 2 + x,
    "cat0": lambda x: torch.cat([x, x * 2, x.sin()], 0),
    "pad": lambda x: F.pad(x, (1, 2, 0, 1), value=0.5).exp(),
    "pad_crop": lambda x: F.pad(x, (-1, 1)),
    "stack": lambda x: torch.stack([x, x + 1], 1),
    "stack_last": lambda x: torch.stack([x, x.cos()], -1).sum(0),
}


@pytest.mark.parametrize("name", list(FX_CASES))
@pytest.mark.parametrize("noncontig", [False, True])
def test_cat_pad_through_torch_compile(name, noncontig):
    fn = FX_CASES[name]
    torch._dynamo.reset()
    x = torch.randn(8, 3).t() if noncontig else torch.randn(3, 8)
    want = fn(x)
    n0 = len(B.fallback_reasons)
    with torch.no_grad():
        got = torch.compile(fn, backend="wick")(x)
    assert len(B.fallback_reasons) == n0
    assert B.compiled_graphs[-1]["externs"] == {}  # all native
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want)
