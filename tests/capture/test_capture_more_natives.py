"""Torch calls that wick's own capture turns into native nodes or into the
ATen op the runtime calls through PyTorch's C shim, instead of an extern
call of the torch function: zeros_like/ones_like/full_like/empty_like
(FULL), torch.min/max of two tensors (MINIMUM/MAXIMUM), gather (GATHER),
diff (CAT, views, SUB), cumsum, baddbmm and conv2d (aten externs),
F.cross_entropy (LOG_SOFTMAX, GATHER, WHERE, SUM, DIV), and the factory
calls without device= (the default device and float dtype read at capture
and guarded). Each is compared with eager on random inputs; calls whose
arguments the rules do not model keep eager's result (and eager's error)."""
import re

import pytest
import torch
import torch.nn.functional as F

from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries, reasons

FLOATS = [torch.float32, torch.float64, torch.bfloat16]


def only_graph(fn):
    es = entries(fn)
    assert es and all(not e["eager"] and e["graph_count"] == 1 for e in es), reasons(fn)
    return es[-1]["graph"]


def externs(fn):
    return re.findall(r"EXTERN\[\d+ ([^\]]+)\]", only_graph(fn))


def run(fn, *args):
    want = fn(*args)
    got = compiled(fn)(*args)
    assert_same(got, want)
    return got, want


# ---- *_like -> FULL ------------------------------------------------------------


def likes(x):
    return (torch.zeros_like(x), torch.ones_like(x), torch.full_like(x, 3), torch.zeros_like(x, dtype=torch.int32),
            torch.ones_like(x, memory_format=torch.contiguous_format), x + torch.full_like(x, 2))


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int8])
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 1, 3)])
def test_like_calls_are_full_nodes(shape, dtype):
    x = (torch.randn(shape) * 10).to(dtype)
    got, want = run(likes, x)
    for g, w in zip(got, want):
        assert g.stride() == w.stride() and g.dtype == w.dtype
    assert externs(likes) == []


def empties(x):
    e = torch.empty_like(x)
    return e.shape, e.dtype, e.stride(), x * 2


def test_empty_like_has_eagers_layout():
    x = torch.randn(3, 4)
    got, want = run(empties, x)
    assert got[:3] == want[:3]
    assert externs(empties) == []


def like_of_view(x):
    return torch.zeros_like(x.t()), torch.full_like(x[:, ::2], 1.5)


def test_like_of_a_non_contiguous_tensor_keeps_eagers_strides():
    x = torch.randn(4, 6)
    got, want = run(like_of_view, x)
    for g, w in zip(got, want):
        assert g.stride() == w.stride()


def overflowing_fill(x):
    return torch.full_like(x, 1e6)


def test_fill_beyond_the_dtype_raises_as_eager():
    x = torch.randn(3).half()
    with pytest.raises(RuntimeError):
        overflowing_fill(x)
    with pytest.raises(RuntimeError):
        compiled(overflowing_fill)(x)


# ---- min / max of two tensors ----------------------------------------------------


def min_max(x, y):
    return torch.min(x, y), torch.max(x, y), x.min(y), y.max(x), torch.max(x, 0)[0]


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_min_max_of_two_tensors_are_minimum_maximum(dtype):
    x = (torch.randn(4, 5) * 10).to(dtype)
    y = (torch.randn(5) * 10).to(dtype)
    if dtype.is_floating_point:
        x[0, 0] = float("nan")
    run(min_max, x, y)
    assert "torch.min" not in externs(min_max)


# ---- gather -------------------------------------------------------------------


def gathers(x, i0, i1):
    return torch.gather(x, 0, i0), x.gather(1, i1), torch.gather(x, -1, i1) * 2


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32])
@pytest.mark.parametrize("rows", [3, 6])
def test_gather_is_a_gather_node(rows, dtype):
    x = (torch.randn(rows, 5) * 10).to(dtype)
    i0 = torch.randint(0, rows, (2, 5))
    i1 = torch.randint(0, 5, (rows, 3))
    run(gathers, x, i0, i1)
    assert externs(gathers) == []


def test_gather_out_of_range_raises_eagers_error():
    x = torch.randn(3, 4)
    i0 = torch.randint(0, 3, (2, 4))
    i1 = torch.tensor([[0, 9], [1, 2], [3, 0]])
    with pytest.raises(RuntimeError) as want:
        gathers(x, i0, i1)
    with pytest.raises(RuntimeError) as got:
        compiled(gathers)(x, i0, i1)
    assert str(got.value) == str(want.value)


def gather_grad(x, i):
    return torch.gather(x, 1, i).sum()


def test_gather_gradient():
    x = torch.randn(4, 6, requires_grad=True)
    i = torch.randint(0, 6, (4, 3))
    want = torch.autograd.grad(gather_grad(x, i), x)[0]
    got = torch.autograd.grad(compiled(gather_grad)(x, i), x)[0]
    assert_same(got, want)


# ---- diff, cumsum ----------------------------------------------------------------


def packed(position_ids):
    # transformers' find_packed_sequence_indices
    first = position_ids[:, :1] - 1
    d = torch.diff(position_ids, prepend=first, dim=-1)
    return (d != 1).cumsum(-1), d


def diffs(x, y):
    return torch.diff(x), x.diff(dim=0), torch.diff(x, append=y, dim=1), torch.diff(x > 0, dim=-1)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
@pytest.mark.parametrize("cols", [2, 7])
def test_diff_is_cat_views_and_sub(cols, dtype):
    x = (torch.randn(3, cols) * 10).to(dtype)
    y = (torch.randn(3, 2) * 10).to(dtype)
    run(diffs, x, y)
    assert externs(diffs) == []


@pytest.mark.parametrize("grad", [False, True])
def test_packed_sequence_indices(grad):
    pos = torch.cat([torch.arange(5), torch.arange(3)]).view(1, 8).repeat(2, 1)
    pos[1] = torch.randperm(8)
    with torch.set_grad_enabled(grad):
        run(packed, pos)
    assert externs(packed) == ["aten.cumsum.default"]


def cumsums(x):
    return torch.cumsum(x, 0), x.cumsum(-1), x.cumsum(dim=1, dtype=torch.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_cumsum_is_aten_cumsum(dtype):
    x = (torch.randn(4, 5) * 10).to(dtype)
    with torch.no_grad():
        run(cumsums, x)
    assert externs(cumsums).count("aten.cumsum.default") == 2


# ---- baddbmm, conv2d ---------------------------------------------------------------


def baddbmms(b, x, y):
    return torch.baddbmm(b, x, y), torch.baddbmm(b, x, y, beta=0.5, alpha=2.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("grad", [False, True])
def test_baddbmm_is_the_aten_op(dtype, grad):
    b, x, y = torch.randn(1, 3, 4, dtype=dtype), torch.randn(2, 3, 5, dtype=dtype), torch.randn(2, 5, 4, dtype=dtype)
    with torch.set_grad_enabled(grad):
        run(baddbmms, b, x, y)
    assert externs(baddbmms) == ["aten.baddbmm.default"] * 2


def convs(x, w, b, wg):
    return (F.conv2d(x, w, b), F.conv2d(x, w, None, 2, 1), F.conv2d(x, w, b, stride=(1, 2), padding=(2, 1), dilation=2),
            F.conv2d(x, wg, None, groups=2), F.conv2d(x, w, b, padding="same"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("grad", [False, True])
def test_conv2d_is_aten_convolution(dtype, grad):
    x = torch.randn(2, 4, 9, 8, dtype=dtype)
    w, b, wg = torch.randn(6, 4, 3, 3, dtype=dtype), torch.randn(6, dtype=dtype), torch.randn(6, 2, 3, 3, dtype=dtype)
    with torch.set_grad_enabled(grad):
        run(convs, x, w, b, wg)
    names = externs(convs)
    assert names.count("aten.convolution.default") == 4 and "torch.conv2d" in names  # padding="same": eager's call


# ---- cross_entropy -------------------------------------------------------------------


def losses(x, t, t1):
    """t1: t without -100, with 1 the ignored class"""
    return (F.cross_entropy(x, t), F.cross_entropy(x, t, reduction="sum"),
            F.cross_entropy(x, t, reduction="none"), F.cross_entropy(x, t1, ignore_index=1))


def targets(n, classes):
    t = torch.randint(0, classes, (n,))
    t[1] = -100
    return t, torch.where(t < 0, 1, t)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n,classes", [(5, 3), (8, 17)])
def test_cross_entropy_is_nodes(n, classes, dtype):
    x = torch.randn(n, classes, dtype=dtype)
    run(losses, x, *targets(n, classes))
    assert externs(losses) == []


def test_cross_entropy_gradient_and_all_ignored():
    x = torch.randn(6, 5, requires_grad=True)
    t = torch.tensor([0, 4, -100, 2, 1, -100])
    t1 = torch.tensor([0, 4, 1, 2, 1, 1])
    want = losses(x, t, t1)
    got = compiled(losses)(x, t, t1)
    assert_same(got, want)
    gw = torch.autograd.grad(sum(o.sum() for o in want), x)[0]
    gg = torch.autograd.grad(sum(o.sum() for o in got), x)[0]
    assert_same(gg, gw)
    every = torch.full((6,), -100)
    with torch.no_grad():
        assert_same(compiled(losses)(x, every, t1), losses(x, every, t1))  # mean of nothing: NaN


def test_cross_entropy_target_out_of_range_raises_eagers_error():
    x = torch.randn(4, 3)
    t = torch.tensor([0, 3, 1, 2])
    with pytest.raises(IndexError) as want:
        losses(x, t, t)
    with pytest.raises(IndexError) as got:
        compiled(losses)(x, t, t)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("amp", [torch.bfloat16, torch.float16])
def test_cross_entropy_under_autocast_is_float32_nodes(dtype, amp):
    # autocast runs cross_entropy in float32 (ATen's fp32 lists): the 16-bit
    # logits a linear makes are cast, the losses are float32 nodes
    def f(x, w, t, t1):
        return losses(F.linear(x, w), t, t1)

    x, w = torch.randn(9, 6, dtype=dtype), torch.randn(7, 6, dtype=dtype)
    t, t1 = targets(9, 7)
    with torch.no_grad(), torch.autocast("cpu", dtype=amp):
        want = f(x, w, t, t1)
        got = compiled(f)(x, w, t, t1)
    for g, e in zip(got, want):
        assert g.dtype == e.dtype == torch.float32
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
    assert externs(f) == ["aten.mm.default"]


def test_cross_entropy_not_modelled_stays_eagers_call():
    def f(x, t, w):
        return F.cross_entropy(x, t, weight=w), F.cross_entropy(x, t, label_smoothing=0.1), F.cross_entropy(x.bfloat16(), t)
    x, t, w = torch.randn(5, 4), torch.randint(0, 4, (5,)), torch.rand(4)
    run(f, x, t, w)
    assert externs(f).count("torch.nn.functional.cross_entropy") == 3


# ---- factories without device=: the default device and dtype ---------------------------


def factories(x):
    return (x + torch.zeros(x.shape[0], 3), torch.ones(2, 3), torch.full((4,), 1.5), torch.full((2,), 7),
            torch.arange(0.0, 2.0, 0.5), torch.arange(5), torch.zeros(3, dtype=torch.int32))


def test_factories_without_device_are_nodes_guarded_on_the_default_dtype():
    x = torch.randn(4, 3)
    run(factories, x)
    assert externs(factories) == []
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        got, want = run(factories, x.double())
        assert [g.dtype for g in got] == [w.dtype for w in want]
        assert len(entries(factories)) == 2
    finally:
        torch.set_default_dtype(old)
    run(factories, x)
    assert len(entries(factories)) == 2


def test_factories_follow_a_changed_default_device():
    x = torch.randn(4, 3)
    run(factories, x)
    with torch.device("meta"):
        want = factories(x.to("meta"))
        got = compiled(factories)(x.to("meta"))
    assert [g.device for g in got] == [w.device for w in want]
    assert [g.shape for g in got] == [w.shape for w in want]
    run(factories, x)
