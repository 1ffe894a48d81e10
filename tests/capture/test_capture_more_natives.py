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
    assert externs(cumsums) == ["aten.cumsum.default"] * 3  # dtype=: a CONVERT node first


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


# ---- compiler breadth (issue 7): calls that were extern calls of the torch function ----


def like_layouts(dtype=torch.float32):
    """Non-contiguous inputs of every kind eager's preserve_format treats
    apart: transposed, permuted, channels-last (dense: eager keeps their
    strides), sliced with a step and a transposed slice (not dense: dense
    strides in the input's dim order), expanded (a zero stride)."""
    def rand(*shape):
        return (torch.randn(shape) * 10).to(dtype)

    base = rand(4, 6, 5)
    return {"t": base[0].t(), "permuted": base.permute(2, 0, 1),
            "channels_last": rand(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
            "stepped": base[:, ::2], "sliced_t": base[:, 1:4].transpose(1, 2), "expanded": rand(4, 1, 5).expand(4, 3, 5),
            "size1_t": rand(4, 1, 5).transpose(0, 2)}


def likes_of(x):
    return (torch.zeros_like(x), torch.ones_like(x), torch.full_like(x, 3), torch.zeros_like(x, dtype=torch.int32),
            torch.full_like(x, 2.5, dtype=torch.float64), torch.empty_like(x).shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("layout", list(like_layouts()))
def test_like_of_non_contiguous_input_is_full_with_eagers_strides(layout, dtype):
    x = like_layouts(dtype)[layout]
    assert not x.is_contiguous()
    got, want = run(likes_of, x)
    for g, w in zip(got[:5], want[:5]):
        assert g.stride() == w.stride() and g.dtype == w.dtype, (g.stride(), w.stride())
    assert externs(likes_of) == []
    assert "FULL" in only_graph(likes_of)
    C.reset()
    empty = like_layouts(dtype)["t"][:, :0]  # no elements: eager's calls, with eager's strides
    got, want = run(likes_of, empty)
    assert [g.stride() for g in got[:5]] == [w.stride() for w in want[:5]]


def like_updated_in_place(x):
    z = torch.ones_like(x.permute(2, 0, 1))
    z.mul_(3)
    z[1] = 7
    z.add_(x.permute(2, 0, 1))
    w = torch.zeros_like(x[0].t())
    alias = w
    alias += 1
    return z, w, alias


def like_viewed_then_updated(x):
    z = torch.zeros_like(x.t())
    row = z[0]
    z += 1  # row sees it (eager writes into z's memory): the update is refused, eager runs it
    return row * 2, z


def like_accumulated(x, w):
    z = torch.zeros_like(x.t())
    z += x.t() * w
    z.mul_(2)
    return z


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_like_of_non_contiguous_input_updated_in_place_keeps_eagers_strides(dtype):
    x = torch.randn(3, 4, 5, dtype=dtype)
    got, want = run(like_updated_in_place, x)
    for g, w in zip(got, want):
        assert g.stride() == w.stride(), (g.stride(), w.stride())
    assert externs(like_updated_in_place) == ["Tensor.__setitem__"]  # z[1] = 7: eager's setitem on the graph's z
    got, want = run(like_viewed_then_updated, x[0])
    assert [g.stride() for g in got] == [w.stride() for w in want]
    # the update carries a gradient
    w = torch.randn(4, dtype=dtype, requires_grad=True)
    got, want = compiled(like_accumulated)(x[0], w), like_accumulated(x[0], w)
    assert_same(got, want) if dtype == torch.float32 else torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    assert got.stride() == want.stride()
    dy = torch.randn_like(want)
    torch.testing.assert_close(torch.autograd.grad(got, w, dy)[0], torch.autograd.grad(want, w, dy)[0],
                               rtol=1e-2, atol=1e-2)


def empty_and_rand_like(x):
    return torch.empty_like(x), x + 1, torch.rand_like(x)


@pytest.mark.parametrize("layout", ["t", "permuted", "stepped"])
def test_empty_like_of_non_contiguous_input_has_eagers_strides(layout):
    # empty_like's and rand_like's values are unspecified or random: their layout is compared
    x = like_layouts()[layout]
    want = empty_and_rand_like(x)
    got = compiled(empty_and_rand_like)(x)
    assert_same(got[1], want[1])
    for g, w in zip(got[::2], want[::2]):
        assert g.stride() == w.stride() and g.shape == w.shape and g.dtype == w.dtype
    # random numbers come from eager's generator: no node draws the same ones
    assert externs(empty_and_rand_like) == ["torch.rand_like"]


def cumsum_dtypes(x):
    return (torch.cumsum(x, 1, dtype=torch.float64), x.cumsum(0, dtype=torch.float32), x.cumsum(dim=-1, dtype=torch.int64),
            torch.cumsum(x, dim=0, dtype=torch.bfloat16),
            # aten.cumsum without dtype= would widen a narrower integer to int64: eager's call
            torch.cumsum(x, 0, dtype=torch.int32), x.cumsum(0, dtype=torch.int16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.bool])
@pytest.mark.parametrize("shape", [(4, 5), (3, 7, 2)])
def test_cumsum_with_dtype_is_convert_and_aten_cumsum(shape, dtype):
    x = (torch.randn(shape) * 10).to(dtype) if dtype != torch.bool else torch.randn(shape) > 0
    with torch.no_grad():
        got, want = run(cumsum_dtypes, x)
    assert [g.dtype for g in got] == [w.dtype for w in want]
    names = externs(cumsum_dtypes)
    assert names == ["aten.cumsum.default"] * 4 + ["torch.cumsum", "Tensor.cumsum"], names
    assert "CONVERT" in only_graph(cumsum_dtypes)


def cumsum_in_autocast(x):
    return torch.cumsum(x, 1, dtype=torch.bfloat16) + 1, torch.cumsum(x, 1, dtype=torch.float64)


def test_cumsum_to_16bit_inside_autocast():
    # aten.cumsum of a bfloat16 tensor without dtype= may sum in float32 inside
    # autocast (CUDA's policy), where eager's dtype= keeps bfloat16: that one
    # stays the torch call; float64 is a CONVERT and aten.cumsum
    x = torch.randn(3, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = run(cumsum_in_autocast, x)
    assert [g.dtype for g in got] == [torch.bfloat16, torch.float64]
    assert externs(cumsum_in_autocast) == ["torch.cumsum", "aten.cumsum.default"]


def cumsum_grad(x):
    return (torch.cumsum(x, 1, dtype=torch.float64) * torch.arange(x.shape[1])).sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cumsum_with_dtype_gradient(dtype):
    x = torch.randn(3, 6, dtype=dtype, requires_grad=True)
    want = torch.autograd.grad(cumsum_grad(x), x)[0]
    got = torch.autograd.grad(compiled(cumsum_grad)(x), x)[0]
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-5 if dtype == torch.float32 else 1e-2, atol=1e-5)
    assert externs(cumsum_grad) == ["aten.cumsum.default"]


def padded_embedding(ids, w, h):
    return (F.embedding(ids, w, padding_idx=1) * h).sum(-1)


def padded_embedding_negative(ids, w):
    return F.embedding(ids, w, -2) * 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape", [(3, 5), (7,), (2, 2, 3)])
def test_embedding_padding_idx_in_training_is_index_with_no_padding_gradient(shape, dtype):
    tol = {"rtol": 1e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {}
    for fn, pad in ((padded_embedding, 1), (padded_embedding_negative, 8)):
        C.reset()
        w = torch.randn(10, 4, dtype=dtype, requires_grad=True)
        ids = torch.randint(0, 10, shape)
        ids.view(-1)[0], ids.view(-1)[-1] = pad, pad  # the padding row is read
        args = (ids, w, torch.randn(4, dtype=dtype))[:fn.__code__.co_argcount]
        want = fn(*args)
        got = compiled(fn)(*args)
        assert_same(got, want, **tol)
        gw = torch.autograd.grad(want.float().sum(), w)[0]
        gg = torch.autograd.grad(got.float().sum(), w)[0]
        assert_same(gg, gw, **tol)
        assert torch.count_nonzero(gg[pad]) == 0 and torch.count_nonzero(gg) > 0
        graph = only_graph(fn)
        assert externs(fn) == [] and f"padding_idx={pad}" in graph, graph


def embedding_twice(ids, w):
    # one weight, two paddings: two nodes, each with its own gradient rule;
    # scale_grad_by_freq is not modelled: eager's call
    return (F.embedding(ids, w, padding_idx=0) + F.embedding(ids, w, padding_idx=2) + F.embedding(ids, w)
            + F.embedding(ids, w, scale_grad_by_freq=True))


def test_embeddings_with_different_paddings_keep_their_own_gradients():
    w = torch.randn(6, 3, requires_grad=True)
    ids = torch.tensor([[0, 2, 3], [2, 5, 0]])
    want = torch.autograd.grad(embedding_twice(ids, w).square().sum(), w)[0]
    got = torch.autograd.grad(compiled(embedding_twice)(ids, w).square().sum(), w)[0]
    assert_same(got, want)
    assert externs(embedding_twice) == ["torch.nn.functional.embedding"]
    assert "padding_idx=0" in only_graph(embedding_twice) and "padding_idx=2" in only_graph(embedding_twice)


def mixed_layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5), F.layer_norm(x, x.shape[-1:], w), F.layer_norm(x, [x.shape[-1]], bias=b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(4, 8), (2, 3, 64), (1, 5, 768)])
def test_layer_norm_16bit_input_float32_params_on_cpu_is_a_node(shape, dtype):
    # eager's mixed-dtype CPU kernel: the input's dtype out, float32 inside
    x = (torch.randn(shape) * 3 + 1).to(dtype)
    w, b = torch.randn(shape[-1]), torch.randn(shape[-1])
    want = mixed_layer_norm(x, w, b)
    got = compiled(mixed_layer_norm)(x, w, b)
    for g, e in zip(got, want):
        assert g.dtype == e.dtype == dtype
        exact = F.layer_norm(x.float(), e.shape[-1:], w, b).to(dtype) if e is want[0] else e
        torch.testing.assert_close(g, e, rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(g.float(), exact.float(), rtol=1e-2, atol=1e-2)
    graph = only_graph(mixed_layer_norm)
    assert externs(mixed_layer_norm) == [] and graph.count("LAYER_NORM") == 3
    # the mixed kernel takes float32 parameters only: eager raises for others, so does the extern
    for args in ((x, w, b.to(dtype)), (x.float(), w.to(dtype), b.to(dtype))):
        with pytest.raises(RuntimeError, match="mixed dtype"):
            mixed_layer_norm(*args)
        with pytest.raises(RuntimeError, match="mixed dtype"):
            compiled(mixed_layer_norm)(*args)


def test_layer_norm_16bit_input_float32_params_training():
    x = torch.randn(3, 16, dtype=torch.bfloat16, requires_grad=True)
    w, b = torch.randn(16, requires_grad=True), torch.randn(16, requires_grad=True)

    def f(x, w, b):
        return F.layer_norm(x * 2, (16,), w, b)

    want = f(x, w, b)
    got = compiled(f)(x, w, b)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    dy = torch.randn(3, 16, dtype=torch.bfloat16)
    for g, e in zip(torch.autograd.grad(got, (x, w, b), dy), torch.autograd.grad(want, (x, w, b), dy)):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g, e, rtol=2e-2, atol=2e-2)
    assert externs(f) == []


class MlmHead(torch.nn.Module):
    """BERT's MLM head transform: dense, gelu, LayerNorm"""

    def __init__(self, h):
        super().__init__()
        self.dense, self.norm = torch.nn.Linear(h, h), torch.nn.LayerNorm(h)
        with torch.no_grad():
            self.norm.weight.normal_()
            self.norm.bias.normal_()

    def forward(self, x):
        return self.norm(F.gelu(self.dense(x)))


@pytest.mark.parametrize("grad", [False, True])
def test_layer_norm_under_cpu_autocast_bert_head(grad):
    # under CPU autocast the linear gives bfloat16 and layer_norm keeps its float32 parameters
    torch.manual_seed(0)
    m = MlmHead(32)
    x = torch.randn(2, 7, 32)
    with torch.set_grad_enabled(grad), torch.autocast("cpu", dtype=torch.bfloat16):
        want = m(x)
        got = compiled(MlmHead.forward)(m, x)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    if grad:
        dy = torch.randn_like(want)
        params = list(m.parameters())
        for g, e in zip(torch.autograd.grad(got, params, dy), torch.autograd.grad(want, params, dy)):
            torch.testing.assert_close(g, e, rtol=2e-2, atol=2e-2)
    es = entries(MlmHead.forward)
    assert es and all(not e["eager"] and e["graph_count"] == 1 for e in es), reasons(MlmHead.forward)
    graph = es[-1]["graph"]
    assert "LAYER_NORM" in graph and re.findall(r"EXTERN\[\d+ ([^\]]+)\]", graph) == ["aten.addmm.default"], graph


class RelativeBiasAttention(torch.nn.Module):
    """T5's attention in training: a learned position bias (an embedding of
    relative positions) added to the mask, through F.scaled_dot_product_attention;
    the bias needs a gradient, so eager takes the math path"""

    def __init__(self, heads, dim):
        super().__init__()
        self.heads, self.qkv = heads, torch.nn.Linear(dim, 3 * dim)
        self.bias = torch.nn.Embedding(9, heads)

    def forward(self, x, mask):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        rel = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).clamp(-4, 4) + 4
        bias = self.bias(rel).permute(2, 0, 1)[None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias + mask)


@pytest.mark.parametrize("n", [4, 6])
def test_math_attention_in_training_has_no_safe_softmax_extern(n, monkeypatch):
    import wick.backends as B

    monkeypatch.setenv("WICK_AUTODIFF", "aot")  # the graphs AOTAutograd traces (wick's own autodiff makes none)

    torch.manual_seed(0)
    m = RelativeBiasAttention(2, 8)
    x = torch.randn(2, n, 8)
    mask = torch.zeros(2, 1, n, n)
    mask[0, :, :, -1] = float("-inf")
    mask[1, :, 1] = float("-inf")  # a row that attends to nothing
    want = m(x, mask)
    B.compiled_graphs.clear()
    got = compiled(RelativeBiasAttention.forward)(m, x, mask)
    assert_same(got, want)
    dy = torch.randn_like(want)
    params = list(m.parameters())
    assert_same(torch.autograd.grad(got, params, dy), torch.autograd.grad(want, params, dy))
    names = [name for info in B.compiled_graphs for name in info["externs"]]
    assert names and not any("safe_softmax" in name for name in names), names
