"""Eager's strides for the results of the node kinds beyond pointwise ops
(test_capture_layouts.py): reductions, softmax/log_softmax, layer_norm,
gather and embedding, whose results eager allocates contiguous whatever
their operands' layouts; cat, constant pad and advanced indexing, laid out
by torch's meta rule (channels-last inputs keep channels-last, a permuted
source of an index keeps its order); add/sub with alpha (one iterator over
x and y in eager); autocast's casts (Tensor.to keeps a channels-last input's
layout, so the convolution after it returns channels-last).

Each function returns the result and reads its strides (stride(),
is_contiguous(), a view): compiled, it gives eager's values and strides in
one graph, where it ran the whole frame eagerly before (a recorded
fallback: "Tensor.stride() of a result whose eager layout wick does not
keep")."""
import pytest
import torch
import torch.nn.functional as F

import wick._C as C
from test_capture_util import *  # noqa: F401,F403  (fixtures and helpers)
from test_capture_util import assert_same, break_counts, compiled, entries, reasons


def rand(shape, dtype, gen):
    return (torch.randn(shape, generator=gen) + 0.1).to(dtype)


def layouts(dtype, gen):
    """(name, tensor): dense layouts other than contiguous, and contiguous."""
    yield "transposed", rand((5, 3), dtype, gen).t()
    yield "permuted", rand((2, 4, 3), dtype, gen).permute(0, 2, 1)
    yield "permuted4", rand((2, 3, 4, 5), dtype, gen).permute(0, 2, 3, 1)
    yield "channels_last", rand((2, 3, 4, 5), dtype, gen).to(memory_format=torch.channels_last)
    yield "stepped", rand((4, 9), dtype, gen)[:, ::2]
    yield "expanded_transposed", rand((5, 1), dtype, gen).expand(5, 4).t()
    yield "contiguous", rand((3, 4), dtype, gen)


def strides_read(r):
    """what a program reads of a result's layout"""
    return r.stride(), r.is_contiguous(), r.view(*r.shape, 1).stride()


def k_sum_keepdim(x):
    r = x.sum(1, keepdim=True)
    return r, strides_read(r)


def k_mean(x):
    r = x.mean(1)
    return r, strides_read(r)


def k_amax_keepdim(x):
    r = x.amax(-1, keepdim=True)
    return r, strides_read(r)


def k_var(x):
    r = x.var(0, keepdim=True)
    return r, strides_read(r)


def k_logsumexp(x):
    r = torch.logsumexp(x, 1)
    return r, strides_read(r)


def k_softmax(x):
    r = torch.softmax(x, -1)
    return r, strides_read(r)


def k_log_softmax(x):
    r = F.log_softmax(x, dim=1)
    return r, strides_read(r)


def k_layer_norm(x):
    n = x.shape[-1]
    w = torch.linspace(0.5, 1.5, n, dtype=x.dtype)
    r = F.layer_norm(x, (n,), w, w - 1)
    return r, strides_read(r)


def k_cat(x):
    r = torch.cat([x, x * 2], 1)
    return r, strides_read(r)


def k_cat_sliced(x):
    # a slice of a channels-last tensor still suggests channels-last
    r = torch.cat([x[:, :1], x], 1)
    return r, strides_read(r)


def k_pad(x):
    r = F.pad(x, (1, 2, 0, 1), value=0.5)
    return r, strides_read(r)


def k_pad_crop(x):
    r = F.pad(x, (-1, 0, 0, -1))
    return r, strides_read(r)


def k_index(x):
    r = x[:, torch.tensor([1, 0, 1])]
    return r, strides_read(r)


def k_index_last(x):
    r = x[..., torch.tensor([[0, 1], [1, 0]])] if x.dim() == 2 else x[:, :, torch.tensor([[0, 1], [1, 0]])]
    return r, strides_read(r)


def k_gather(x):
    r = x.gather(1, torch.zeros(x.shape, dtype=torch.int64))
    return r, strides_read(r)


def k_add_alpha(x):
    r = torch.add(x, x * 3, alpha=2)
    return r, strides_read(r)


def k_sub_alpha(x):
    r = torch.sub(x, 1.5, alpha=2) if x.dtype == torch.float32 else x.sub(x.neg(), alpha=3)
    return r, strides_read(r)


KINDS = [k_sum_keepdim, k_mean, k_amax_keepdim, k_var, k_logsumexp, k_softmax, k_log_softmax, k_layer_norm, k_cat,
         k_cat_sliced, k_pad, k_pad_crop, k_index, k_index_last, k_gather, k_add_alpha, k_sub_alpha]


def assert_eager_strides_in_one_graph(fn, x, name):
    C.reset()
    expected = fn(x)
    got = compiled(fn)(x)
    tol = 2e-2 if x.dtype == torch.bfloat16 else None
    assert_same(got[0], expected[0], rtol=tol, atol=tol)
    assert got[0].stride() == expected[0].stride(), (name, got[0].stride(), expected[0].stride())
    assert got[1] == expected[1], (name, got[1], expected[1])
    assert break_counts(fn) == (1, 0, 0), (name, break_counts(fn), reasons(fn))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fn", KINDS, ids=lambda f: f.__name__)
def test_result_has_eagers_strides_and_reads_compile(fn, dtype):
    gen = torch.Generator().manual_seed(13)
    for name, x in layouts(dtype, gen):
        assert_eager_strides_in_one_graph(fn, x, name)


def embedding_of(weight, idx):
    r = F.embedding(idx, weight)
    return r, strides_read(r)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_embedding_of_a_transposed_table_is_contiguous(dtype):
    gen = torch.Generator().manual_seed(17)
    idx = torch.randint(0, 6, (2, 3), generator=gen)
    for name, weight in (("transposed", rand((4, 6), dtype, gen).t()), ("contiguous", rand((6, 4), dtype, gen))):
        C.reset()
        expected = embedding_of(weight, idx)
        got = compiled(embedding_of)(weight, idx)
        assert_same(got[0], expected[0])
        assert got[0].stride() == expected[0].stride() and got[1] == expected[1], name
        assert break_counts(embedding_of) == (1, 0, 0), (name, reasons(embedding_of))


def autocast_conv(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        r = F.conv2d(x, w)
        s = torch.relu(r)
    return s, strides_read(s)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_autocast_cast_keeps_a_channels_last_input(dtype):
    # eager's autocast casts x with Tensor.to (preserve_format): the
    # convolution reads a channels-last tensor and returns channels-last
    gen = torch.Generator().manual_seed(19)
    w = rand((4, 3, 1, 1), dtype, gen)
    for name, x in (("channels_last", rand((2, 3, 5, 6), dtype, gen).to(memory_format=torch.channels_last)),
                    ("permuted", rand((2, 5, 6, 3), dtype, gen).permute(0, 3, 1, 2)),
                    ("contiguous", rand((2, 3, 5, 6), dtype, gen))):
        C.reset()
        expected = autocast_conv(x, w)
        got = compiled(autocast_conv)(x, w)
        assert_same(got[0], expected[0], rtol=2e-2, atol=2e-2)
        assert got[0].stride() == expected[0].stride() and got[1] == expected[1], (name, got[1], expected[1])
        assert break_counts(autocast_conv) == (1, 0, 0), (name, reasons(autocast_conv))


def only_reduced(x):
    # a cat and a pad of a channels-last input that only kernels read: no
    # copy in eager's layout is made (the layout pass reads wick's own)
    c = torch.cat([x, x + 1], 1)
    p = F.pad(c, (1, 1))
    return p.sum((1, 2)), torch.softmax(p, -1).amax(1)


def test_laid_out_results_only_kernels_read_are_not_copied():
    gen = torch.Generator().manual_seed(23)
    x = rand((2, 3, 4, 5), torch.float32, gen).to(memory_format=torch.channels_last)
    C.reset()
    expected = only_reduced(x)
    got = compiled(only_reduced)(x)
    assert_same(got, expected)
    assert break_counts(only_reduced) == (1, 0, 0), reasons(only_reduced)
    kernels = [line for line in entries(only_reduced)[0]["source"].splitlines() if line.startswith("/* kernel")]
    assert kernels and not any("CONVERT" in k or "VIEW" in k for k in kernels), kernels


def cat_output(x):
    return torch.cat([x, x + 1], 1)


def test_a_cat_output_is_written_in_eagers_layout_by_its_kernel():
    # the graph output in channels-last: the cat's kernel writes the copy
    # (one kernel), not a contiguous cat and then a permuting copy
    gen = torch.Generator().manual_seed(29)
    x = rand((2, 3, 4, 5), torch.float32, gen).to(memory_format=torch.channels_last)
    C.reset()
    expected = cat_output(x)
    got = compiled(cat_output)(x)
    assert_same(got, expected)
    assert got.stride() == expected.stride()
    kernels = [line for line in entries(cat_output)[0]["source"].splitlines() if line.startswith("/* kernel")]
    assert len(kernels) == 1 and "CAT" in kernels[0], kernels


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("layout", ["permuted3", "channels_last", "permuted4_odd", "contiguous"])
def test_cpu_batch_norm_reports_its_kernels_strides(layout, training):
    # an extern: its strides come from fake tensors, whose meta rule keeps a
    # permuted input's strides, where eager's CPU kernel writes a result
    # contiguous in the input's suggested memory format
    gen = torch.Generator().manual_seed(7)
    x = {"permuted3": lambda: rand((2, 6, 4), torch.float32, gen).permute(0, 2, 1),
         "channels_last": lambda: rand((2, 4, 3, 5), torch.float32, gen).to(memory_format=torch.channels_last),
         "permuted4_odd": lambda: rand((2, 3, 4, 5), torch.float32, gen).permute(0, 2, 1, 3),
         "contiguous": lambda: rand((2, 4, 6), torch.float32, gen)}[layout]()
    stats = (torch.randn(4, generator=gen), torch.rand(4, generator=gen) + 0.5)

    def fn(x, mean, var):
        r = F.batch_norm(x, mean, var, training=training)
        return r * 2, r.stride(), r.is_contiguous()

    want = fn(x, *(s.clone() for s in stats))
    C.reset()
    got = compiled(fn)(x, *(s.clone() for s in stats))
    assert_same(got[0], want[0])
    assert got[1:] == want[1:]
    assert break_counts(fn) == (1, 0, 0), reasons(fn)
