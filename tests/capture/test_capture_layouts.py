"""Native results of the own capture (wick.compile) laid out as eager lays
them out (csrc/capture/vals/views.c cap_eager_laid): a pointwise result of a
transposed, permuted, channels-last, expanded or stepped tensor keeps the
stride order torch's TensorIterator gives it, a cast or a clone in
preserve_format its input's layout. So the compiled function returns tensors
with eager's strides, and stride(), is_contiguous(), view(), reshape() and
contiguous() of such results compile into the one graph with eager's answers
(they ran the whole frame eagerly before), a view eager refuses raising
eager's exception."""
import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403  (fixtures and helpers)
from test_capture_util import assert_same, compiled, entries, one_graph, reasons


def rand(shape, dtype, gen):
    if dtype == torch.int64:
        return torch.randint(-6, 7, shape, generator=gen)
    return (torch.randn(shape, generator=gen) + 0.1).to(dtype)


def layouts(dtype, gen):
    """(name, tensor) for the input layouts eager keeps in a pointwise result."""
    yield "transposed", rand((5, 3), dtype, gen).t()
    yield "permuted", rand((2, 3, 4, 5), dtype, gen).permute(0, 2, 3, 1)
    yield "channels_last", rand((2, 3, 4, 5), dtype, gen).to(memory_format=torch.channels_last)
    yield "stepped", rand((4, 9), dtype, gen)[:, ::2]
    yield "stepped_transposed", rand((9, 4), dtype, gen)[::2].t()
    yield "expanded", rand((1, 5), dtype, gen).expand(4, 5)
    yield "expanded_transposed", rand((5, 1), dtype, gen).expand(5, 4).t()
    yield "size_one", rand((2, 3, 1), dtype, gen).transpose(1, 2)
    yield "size_one_permuted", rand((1, 4, 3, 1), dtype, gen).permute(3, 2, 0, 1)
    yield "empty", rand((3, 0), dtype, gen).t()
    yield "contiguous", rand((3, 4), dtype, gen)


DTYPES = [torch.float32, torch.bfloat16, torch.int64]


def u_scalar(x): return x * 2 + 1
def u_neg(x): return -x
def u_abs(x): return torch.abs(x)
def u_cmp(x): return x > 0
def u_relu(x): return torch.relu(x)
def u_clamp(x): return torch.clamp(x, -1, 1)
def u_pow(x): return x ** 2
def u_where(x): return torch.where(x > 0, x, 0)
def u_masked_fill(x): return x.masked_fill(x < 0, 3)
def u_clone(x): return x.clone()
def u_cast(x): return x.double() if x.dtype != torch.float64 else x.float()
def u_cast_to(x): return x.to(torch.int32)
def u_zero_dim(x): return x * torch.tensor(3, dtype=x.dtype)
def u_chain(x): return torch.where(x > 1, x * 3, -x) - 1
def u_self(x): return x * x
def u_inplace(x):
    y = x * 2
    y += 1
    y.mul_(3)
    return y


UNARY = [u_scalar, u_neg, u_abs, u_cmp, u_relu, u_clamp, u_pow, u_where, u_masked_fill, u_clone, u_cast, u_cast_to,
         u_zero_dim, u_chain, u_self, u_inplace]


def assert_eager_layout(fn, args):
    """fn compiled gives eager's values with eager's strides, in one graph."""
    C.reset()
    expected = fn(*args)
    got = compiled(fn)(*args)
    assert_same(got, expected, rtol=1e-2 if args[0].dtype == torch.bfloat16 else None,
                atol=1e-2 if args[0].dtype == torch.bfloat16 else None)
    for g, e in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
        if isinstance(e, torch.Tensor):
            assert g.stride() == e.stride(), (g.stride(), e.stride())
    one_graph(fn)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fn", UNARY, ids=lambda f: f.__name__)
def test_pointwise_result_has_eagers_strides(fn, dtype):
    gen = torch.Generator().manual_seed(7)
    for name, x in layouts(dtype, gen):
        assert_eager_layout(fn, (x,))


def b_add(x, y): return x + y
def b_mul_rev(x, y): return y * x
def b_where(x, y): return torch.where(y > 0, x, y)
def b_maximum(x, y): return torch.maximum(x, y)
def b_sub_fn(x, y): return torch.sub(x, y)


def pairs(gen):
    """Two operands of one shape in different layouts."""
    def make(shape, perm):
        full = [shape[p] for p in perm]
        inverse = [perm.index(d) for d in range(len(shape))]
        return rand(full, torch.float32, gen).permute(*inverse)

    shape = (2, 3, 4, 5)
    yield make(shape, (0, 1, 2, 3)), make(shape, (0, 2, 3, 1))
    yield make(shape, (0, 2, 3, 1)), make(shape, (3, 2, 1, 0))
    yield make(shape, (1, 0, 3, 2)), make(shape, (0, 2, 3, 1))
    yield rand((4, 3), torch.float32, gen).t(), rand((3, 4), torch.float32, gen)
    yield rand((3, 4), torch.float32, gen), rand((4, 3), torch.float32, gen).t()
    # broadcasting: a row against a transposed matrix, a column against a stepped one
    yield rand((4,), torch.float32, gen), rand((4, 3), torch.float32, gen).t()
    yield rand((3, 1), torch.float32, gen), rand((3, 9), torch.float32, gen)[:, ::2]
    yield rand((5, 1, 3), torch.float32, gen).transpose(0, 2), rand((3, 4, 1), torch.float32, gen)


@pytest.mark.parametrize("fn", [b_add, b_mul_rev, b_where, b_maximum, b_sub_fn], ids=lambda f: f.__name__)
def test_mixed_layouts_of_two_operands(fn):
    gen = torch.Generator().manual_seed(11)
    for x, y in pairs(gen):
        assert_eager_layout(fn, (x, y))


def reads(x):
    y = x * 2 - 1
    s = y.stride()
    c = y.is_contiguous()
    z = y.view(*y.shape, 1) * (s[0] + y.stride(-1))  # a product: bfloat16 rounds it alike fused or not
    return z, c, y.reshape(-1), y.contiguous(), y.clone().stride(), y.float().is_contiguous()


def flatten_view(x):
    y = x.relu()
    return y.view(-1)


def merge_view(x):
    y = torch.where(x > 0, x, -x)
    return y.view(y.shape[0], -1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layout_reads_of_results_compile_to_one_graph(dtype):
    gen = torch.Generator().manual_seed(3)
    for name, x in layouts(dtype, gen):
        C.reset()
        expected = reads(x)
        got = compiled(reads)(x)
        assert_same(got, expected, rtol=1e-2, atol=1e-2)
        for g, e in zip(got, expected):
            if isinstance(e, torch.Tensor):
                assert g.stride() == e.stride(), (name, g.stride(), e.stride())
        one_graph(reads)
        assert not reasons(reads)


@pytest.mark.parametrize("fn", [flatten_view, merge_view], ids=lambda f: f.__name__)
def test_view_of_a_result_is_eagers_view_or_eagers_error(fn):
    # x.view(-1) of a transposed result: eager raises (no view expresses it);
    # of a contiguous or a stepped-then-densified one it is a view
    gen = torch.Generator().manual_seed(5)
    raised = viewed = 0
    for name, x in layouts(torch.float32, gen):
        C.reset()
        try:
            expected = fn(x)
        except Exception as e:
            raised += 1
            with pytest.raises(type(e)):
                compiled(fn)(x)
            continue
        viewed += 1
        got = compiled(fn)(x)
        assert_same(got, expected)
        assert got.stride() == expected.stride()
        one_graph(fn)
    assert raised >= 2 and viewed >= 2


def inplace_on_result(x):
    y = x * 2
    y.add_(1)
    y[0] = 5
    return y, y.stride()


def test_inplace_updates_of_a_laid_out_result():
    gen = torch.Generator().manual_seed(9)
    for name, x in layouts(torch.float32, gen):
        if x.numel() == 0:
            continue
        C.reset()
        expected = inplace_on_result(x)
        got = compiled(inplace_on_result)(x)
        assert_same(got, expected)
        assert got[0].stride() == expected[0].stride(), name


def contiguous_inputs(x, y, w):
    h = torch.relu(x @ w + y) * 2
    return h.softmax(-1), (h > 0).float().mean()


def test_contiguous_inputs_make_the_graph_they_made():
    # the common case asks torch nothing and adds no node: no VIEW, no copy
    gen = torch.Generator().manual_seed(1)
    x, y, w = (rand(s, torch.float32, gen) for s in ((8, 16), (8, 32), (16, 32)))
    C.reset()
    assert_same(compiled(contiguous_inputs)(x, y, w), contiguous_inputs(x, y, w))
    one_graph(contiguous_inputs)
    text = entries(contiguous_inputs)[0]["graph"]
    assert "VIEW" not in text, text


def only_reduced(x):
    y = x * 2 - 1
    z = torch.relu(y) + y
    return z.sum(-1), z.mean(0)


def test_a_result_only_kernels_read_is_not_copied():
    # z is laid out as eager's (permuted) for whoever would see its strides;
    # the reductions read it by index, from the kernel that computes it: no
    # copy in eager's layout is made, nor read with strides
    gen = torch.Generator().manual_seed(2)
    for name, x in layouts(torch.float32, gen):
        C.reset()
        expected = only_reduced(x)
        got = compiled(only_reduced)(x)
        assert_same(got, expected)
        one_graph(only_reduced)
        kernels = [line for line in entries(only_reduced)[0]["source"].splitlines() if line.startswith("/* kernel")]
        assert kernels and not any("CONVERT" in k or "VIEW" in k for k in kernels), (name, kernels)


def inplace_on_input(x):
    x.add_(1)
    x.mul_(2)
    return x * 3, x.stride()


def test_inplace_updates_of_a_permuted_input():
    # the input keeps its strides (eager writes into its memory); each
    # update's result is laid out as the input, and updated again
    gen = torch.Generator().manual_seed(4)
    for name, x in layouts(torch.float32, gen):
        if x.numel() == 0 or 0 in x.stride():
            continue  # eager refuses to write into an expanded tensor
        C.reset()
        # the layout's dense form (a stepped one's gaps closed): a copy per run
        xe, xc = x.clone(memory_format=torch.preserve_format), x.clone(memory_format=torch.preserve_format)
        expected = inplace_on_input(xe)
        got = compiled(inplace_on_input)(xc)
        assert_same(got, expected)
        assert got[0].stride() == expected[0].stride() and torch.equal(xc, xe), name
        one_graph(inplace_on_input)
