"""Reductions through the whole compiler, compared with eager torch: sum,
mean, amax over every dim subset, keepdim, float32/float64/int64/bool,
transposed/sliced/expanded inputs, empty and 0-d tensors, NaN; fused
prologues (softmax-like graphs: two reductions + one pointwise kernel) and
large inputs that take the parallel paths."""
import itertools
import math

import pytest
import torch

import wick._C as C
from compiler_session import compile_run, kernel_source, llc_bytes


def values(shape, dtype, gen):
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) < 0.5
    if dtype == torch.int64:
        return torch.randint(-1000, 1000, shape, generator=gen, dtype=torch.int64)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * 2 + 0.5).to(dtype)


def make(shape, dtype, layout, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    if layout == "contig" or len(shape) == 0:
        return values(shape, dtype, gen)
    if layout == "transposed":
        perm = list(range(len(shape)))[::-1]
        return values(tuple(shape[p] for p in perm), dtype, gen).permute(perm)
    if layout == "sliced":
        return values(shape[:-1] + (shape[-1] * 3,), dtype, gen)[..., ::3]
    if layout == "expanded":
        return values((1,) + shape[1:], dtype, gen).expand(shape)
    raise ValueError(layout)


def check(got, want, rtol=1e-5, atol=1e-5):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.is_floating_point():
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        assert torch.equal(got, want)


def dim_subsets(ndim):
    for k in range(1, ndim + 1):
        yield from itertools.combinations(range(ndim), k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced", "expanded"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_every_dim_subset(dtype, layout, keepdim):
    x = make((6, 5, 7), dtype, layout)
    dims = list(dim_subsets(3))
    ops = ["sum", "amax"] + (["mean"] if dtype.is_floating_point else [])
    if dtype == torch.bool:
        ops.remove("amax")  # torch.amax has no bool kernel on CPU in every version; sum covers bool

    def build(g, a):
        outs = [g.op(op, [a], dims=list(d), keepdim=keepdim) for op in ops for d in dims]
        outs += [g.op(op, [a], dims=None, keepdim=keepdim) for op in ops]  # all dims
        return outs

    cg, outs = compile_run(build, x)
    want = [getattr(torch, op)(x, dim=d, keepdim=keepdim) for op in ops for d in dims]
    want += [getattr(torch, op)(x, dim=tuple(range(3)), keepdim=keepdim) if keepdim else getattr(torch, op)(x)
             for op in ops]
    assert cg.nkernels == len(want)
    for got, w in zip(outs, want):
        check(got, w)


def test_sum_dtype_argument_and_int_accumulation():
    x = make((50, 40), torch.int64, "contig", seed=1)
    b = make((50, 40), torch.bool, "transposed", seed=2)
    f = make((50, 40), torch.float32, "contig", seed=3)

    def build(g, xi, bb, ff):
        return [g.op("sum", [xi], dims=[1], dtype="float32"), g.op("sum", [bb], dims=[0]),
                g.op("sum", [bb]), g.op("mean", [xi], dims=[1], dtype="float64"),
                g.op("sum", [ff], dims=[1], dtype="float64"), g.op("sum", [xi], dims=[0], dtype="int32")]

    _, outs = compile_run(build, x, b, f)
    wants = [x.sum(1, dtype=torch.float32), b.sum(0), b.sum(), x.mean(1, dtype=torch.float64),
             f.sum(1, dtype=torch.float64), x.sum(0, dtype=torch.int32)]
    for got, w in zip(outs, wants):
        check(got, w)


def test_empty_and_zero_dim():
    e = torch.empty((4, 0), dtype=torch.float32)
    z = torch.tensor(2.5, dtype=torch.float64)
    ei = torch.empty((0, 3), dtype=torch.int64)

    def build(g, ee, zz, ii):
        return [g.op("sum", [ee], dims=[1]), g.op("mean", [ee], dims=[1]), g.op("sum", [ee]),
                g.op("mean", [ee]), g.op("sum", [zz]), g.op("mean", [zz]), g.op("amax", [zz]),
                g.op("sum", [ii], dims=[0]), g.op("amax", [ee], dims=[0]), g.op("sum", [zz], dims=[0])]

    _, outs = compile_run(build, e, z, ei)
    wants = [e.sum(1), e.mean(1), e.sum(), e.mean(), z.sum(), z.mean(), torch.amax(z), ei.sum(0),
             torch.amax(e, 0), z.sum(0)]
    for got, w in zip(outs, wants):
        check(got, w)


def test_amax_empty_dim_is_an_error():
    g = C.Graph()
    x = g.input_like(torch.empty((3, 0)))
    with pytest.raises(ValueError, match="amax"):
        g.op("amax", [x], dims=[1])


def test_nan_and_inf():
    x = make((8, 33), torch.float32, "contig", seed=4)
    x[1, 5] = math.nan
    x[2, :] = -math.inf
    x[3, 7] = math.inf
    x[4, 0] = math.nan
    x[4, 1] = math.inf

    def build(g, a):
        return [g.op("amax", [a], dims=[1]), g.op("sum", [a], dims=[1]), g.op("mean", [a], dims=[1]),
                g.op("amax", [a], dims=[0]), g.op("amax", [a])]

    _, outs = compile_run(build, x)
    for got, w in zip(outs, [x.amax(1), x.sum(1), x.mean(1), x.amax(0), x.amax()]):
        check(got, w)


def softmax_build(g, a, dim=1):
    m = g.op("amax", [a], dims=[dim], keepdim=True)
    e = g.op("exp", [g.op("sub", [a, m])])
    s = g.op("sum", [e], dims=[dim], keepdim=True)
    return [g.op("div", [e, s])]


@pytest.mark.parametrize("shape,dim", [((13, 257), 1), ((64, 1000), 1), ((7, 9, 31), 2), ((40, 6), 0)])
@pytest.mark.parametrize("layout", ["contig", "transposed"])
def test_softmax_fuses_into_two_reductions_and_one_pointwise(shape, dim, layout):
    x = make(shape, torch.float32, layout, seed=5) * 4
    cg, (got,) = compile_run(lambda g, a: softmax_build(g, a, dim), x)
    assert cg.nkernels == 3
    assert cg.summary.count("reduction") == 2 and cg.summary.count("pointwise") == 1
    check(got, torch.softmax(x, dim), rtol=1e-5, atol=1e-7)


def test_layernorm_like():
    x = make((37, 96), torch.float32, "contig", seed=6)
    w = make((96,), torch.float32, "contig", seed=7)

    def build(g, a, ww):
        mu = g.op("mean", [a], dims=[1], keepdim=True)
        d = g.op("sub", [a, mu])
        var = g.op("mean", [g.op("mul", [d, d])], dims=[1], keepdim=True)
        inv = g.op("div", [g.scalar(1.0), g.op("sqrt", [g.op("add", [var, g.scalar(1e-5)])])])
        return [g.op("mul", [g.op("mul", [d, inv]), ww])]

    cg, (got,) = compile_run(build, x, w)
    assert cg.nkernels == 3
    want = torch.nn.functional.layer_norm(x, (96,), eps=1e-5) * w
    check(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_large_parallel_reductions(dtype):
    x = make((1 << 20,), dtype, "contig", seed=8)
    y = make((700, 900), dtype, "transposed", seed=9)
    ops = ["sum", "amax"] + (["mean"] if dtype.is_floating_point else [])

    def build(g, a, b):
        outs = [g.op(op, [a]) for op in ops]
        outs += [g.op(op, [b], dims=[d]) for op in ops for d in (0, 1)]
        outs += [g.op(op, [b], dims=[1], keepdim=True) for op in ops]
        return outs

    _, outs = compile_run(build, x, y)
    wants = [getattr(torch, op)(x) for op in ops]
    wants += [getattr(torch, op)(y, dim=d) for op in ops for d in (0, 1)]
    wants += [getattr(torch, op)(y, dim=1, keepdim=True) for op in ops]
    for got, w in zip(outs, wants):
        # torch sums float32 pairwise; we accumulate in double: both are within
        # float32 rounding of the exact sum
        check(got, w, rtol=1e-5, atol=1e-3 if dtype == torch.float32 else 1e-8)


def test_reduction_of_broadcast_pointwise_prologue():
    a = make((30, 1), torch.float32, "contig", seed=10)
    b = make((40,), torch.float32, "contig", seed=11)

    def build(g, aa, bb):
        t = g.op("mul", [g.op("add", [aa, bb]), g.op("tanh", [bb])])
        return [g.op("sum", [t], dims=[0]), g.op("sum", [t], dims=[1]), g.op("amax", [t])]

    cg, outs = compile_run(build, a, b)
    t = (a + b) * torch.tanh(b)
    for got, w in zip(outs, [t.sum(0), t.sum(1), t.amax()]):
        check(got, w)
    # three reductions; tanh(b) is worth materialising once (each of its 40
    # elements would be recomputed 90 times), anything else is inlined
    assert cg.nkernels == 4
    assert "pointwise {TANH}" in cg.summary


def test_float64_result_of_float32_input_adds_in_double():
    # sum/mean(x_f32, dtype=float64) converts first and adds in double: no
    # float32 partial sums may round it (found by the e2e fuzzer, seed 293)
    x = torch.full((3, 4, 5), 1.3678793907165527, dtype=torch.float32)
    y = make((50, 700), torch.float32, "contig", seed=12)

    def build(g, a, b):
        return [g.op("mean", [a], dims=[0, 1, 2], keepdim=True, dtype="float64"),
                g.op("sum", [b], dims=[1], dtype="float64"), g.op("sum", [b], dtype="float64")]

    _, outs = compile_run(build, x, y)
    wants = [torch.mean(x, (0, 1, 2), keepdim=True, dtype=torch.float64), y.sum(1, dtype=torch.float64),
             y.sum(dtype=torch.float64)]
    for got, w in zip(outs, wants):
        check(got, w, rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("cols", [3, 257, 1000, 20000])
def test_softmax_row_keeps_exp_for_its_normalisation(cols):
    """In a row group the sum phase keeps exp(x - max) in a per-thread row
    array and the normalisation reads it there (one exp per element); rows
    above the scratch limit recompute it. Infinities and NaN as eager."""
    x = make((40, cols), torch.float32, "contig", seed=13) * 4
    x[3, 0] = float("inf")
    x[5, cols // 2] = float("-inf")
    x[7, cols - 1] = float("nan")
    cg, (got,) = compile_run(lambda g, a: softmax_build(g, a, 1), x)
    check(got, torch.softmax(x, 1), rtol=1e-5, atol=1e-7)
    src = kernel_source(cg)
    # the sum phase's exps of rows over 16 go through the prelude's vector exp
    # in registers, summed there (wk_expsum_f32), 256 at a time
    assert ("wk_expsum_f32(" in src) == (cols > 16)
    nexp = src.count("expf(") + src.count("wk_expf_block(") + src.count("wk_expsum_f32(")
    if cols * 4 <= 64 * 1024:
        kept = src.count("wk_row0[r0] =") + src.count("wk_expsum_f32(&wk_row0[rb],")
        assert kept == 1 and src.count("= wk_row0[i1];") == 1
        assert nexp == 1
    else:
        assert "wk_row" not in src and nexp == 2


def test_row_scratch_only_for_the_same_computation():
    """exp of another input, or of the same input at another offset, is not
    the kept value: those phases compute their own."""
    a = make((64, 33), torch.float32, "contig", seed=14)
    b = make((64, 33), torch.float32, "contig", seed=15)

    def build(g, x, y):
        s = g.op("sum", [g.op("exp", [x])], dims=[1], keepdim=True)
        return [g.op("div", [g.op("exp", [y]), s]), g.op("mul", [g.op("exp", [x]), s])]

    cg, outs = compile_run(build, a, b)
    s = a.exp().sum(1, keepdim=True)
    check(outs[0], b.exp() / s)
    check(outs[1], a.exp() * s)
    src = kernel_source(cg)
    assert src.count("= wk_row0[i1];") == 1 and src.count("wk_row1") == 0


@pytest.mark.parametrize("rows,cols", [(17, 5), (16, 40), (33, 300), (1000, 1000), (1031, 1100), (4099, 600)])
def test_float32_column_sums_add_rows_in_float_lanes_then_double(rows, cols):
    """x.sum(0) / mean(0) of float32: each row goes into float lanes, folded
    into a double row every few rows (any row count: a partial last block;
    the large ones take the parallel per-thread path): within float32
    rounding of the exact sum, as eager's."""
    x = make((rows, cols), torch.float32, "contig", seed=40) + 100  # large offsets: float lanes would drift
    cg, outs = compile_run(lambda g, a: [g.op("sum", [a], dims=[0]), g.op("mean", [a], dims=[0], keepdim=True)], x)
    exact = x.double().sum(0)
    torch.testing.assert_close(outs[0].double(), exact, rtol=2e-7, atol=0)
    torch.testing.assert_close(outs[1].double(), (exact / rows)[None], rtol=2e-7, atol=0)
    # float lanes from 2^20 elements (and more than 8 rows): else the double row alone
    assert ("facc" in kernel_source(cg)) == (rows > 8 and rows * cols >= 1 << 20)


def test_outputs_larger_than_the_cache_stream_out_with_the_same_values():
    """A softmax and a layer norm whose output is larger than the last-level
    cache write it with non-temporal stores, chunk by chunk (rows of odd
    length: unaligned row starts and a partial last chunk), and prefetch the
    next row in their later phases: values as eager, infinities and NaN
    included."""
    rows, cols = 2049, 4097  # 33.6 MB of float32 output: above a 32 MiB cache
    x = make((rows, cols), torch.float32, "contig", seed=50) * 4
    x[3, 0] = float("inf")
    x[5, cols // 2] = float("-inf")
    x[7, cols - 1] = float("nan")
    x[rows - 1, :] = float("-inf")
    w = make((cols,), torch.float32, "contig", seed=51)

    def layer_norm_build(g, a, ww):
        mu = g.op("mean", [a], dims=[1], keepdim=True)
        d = g.op("sub", [a, mu])
        var = g.op("mean", [g.op("mul", [d, d])], dims=[1], keepdim=True)
        inv = g.op("div", [g.scalar(1.0), g.op("sqrt", [g.op("add", [var, g.scalar(1e-5)])])])
        return [g.op("mul", [g.op("mul", [d, inv]), ww])]

    cg, (got,) = compile_run(lambda g, a: softmax_build(g, a, 1), x)
    check(got, torch.softmax(x, 1), rtol=1e-5, atol=1e-7)
    src = kernel_source(cg)
    assert "wk_expsum_f32(" in src
    xf = x.clone()
    xf[~torch.isfinite(xf)] = 0
    cg2, (got2,) = compile_run(layer_norm_build, xf, w)
    check(got2, torch.nn.functional.layer_norm(xf, (cols,), eps=1e-5) * w, rtol=1e-4, atol=1e-5)
    src2 = kernel_source(cg2)
    streams = rows * cols * 4 >= llc_bytes()
    for s in (src, src2):
        # (a one-thread softmax streams its lagged rows through wk_stream_scaled_f32: test_row_lag.py)
        streamed = "wk_stream_f32(" in s or "wk_stream_scaled_f32(" in s
        assert streamed == streams and ("__builtin_prefetch(" in s) == streams
        assert s.count("wk_stream_fence();") == (1 if streams else 0)


@pytest.mark.parametrize("cols", [17, 256, 263, 1000])
def test_softmax_exp_blocks_within_ulps_and_special_values(cols):
    """A float32 softmax's sum phase (rows > 16) takes exp(x - max) a block
    at a time (wk_expsum_f32: the AVX2/FMA polynomial, else libm), the
    tail of a block (cols not a multiple of 8) through the same function:
    every element within a few ulp of float64 arithmetic on the same x - max, x - max down to
    -200 (denormal and zero exps: the clamped path), -inf entries give 0,
    rows with inf or NaN give NaN, as eager."""
    rows = 24
    gen = torch.Generator().manual_seed(60)
    x = (torch.rand((rows, cols), generator=gen, dtype=torch.float64) * 200 - 100).to(torch.float32)
    x[1] = (torch.rand((cols,), generator=gen, dtype=torch.float64) * 20 - 10).to(torch.float32)
    x[2, 0], x[2, cols - 1] = 100.0, -87.34  # max at the start; a denormal exp in the tail
    x[3, cols // 3] = float("-inf")
    x[4, cols - 1] = float("-inf")
    x[5, 1] = float("inf")
    x[6, cols - 1] = float("nan")
    x[7, :] = float("-inf")
    x[8, :] = 0.0
    x[8, cols - 1] = 88.7
    x[9, cols - 1] = -1e30

    cg, (got,) = compile_run(lambda g, a: softmax_build(g, a, 1), x)
    assert "wk_expsum_f32(" in kernel_source(cg)
    eager = torch.softmax(x, 1)
    assert torch.equal(torch.isnan(got), torch.isnan(eager))
    # the kernel's x - max is float32, as eager's: exp of that in float64
    ed = torch.exp((x - x.amax(1, keepdim=True)).double())
    want = ed / ed.sum(1, keepdim=True)
    ok = ~torch.isnan(want)
    # ulps of the float32 result (the smallest denormal at the bottom)
    ulp = torch.ldexp(torch.ones_like(want), (torch.frexp(want)[1] - 24).clamp(min=-149))
    err = ((got.double() - want).abs() / ulp)[ok]
    # (exp: 1 ulp; the row sum, its reciprocal and the product: a few more)
    assert err.max().item() <= 8.0, err.max().item()
    assert got[torch.isneginf(x) & ok].eq(0).all()
    check(got, eager, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("rows,cols", [(1, 300), (3, 17), (4, 16), (5, 257), (7, 1000), (1027, 300)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.float16, torch.bfloat16])
def test_row_reductions_read_several_rows_per_pass(rows, cols, dtype):
    """Reductions along contiguous rows (16 elements or more) of at least 4
    rows take 4 rows per pass (separate accumulators per row), the rows
    left over (rows % 4) one at a time: every op, row counts not a multiple
    of 4, block tails, NaN in one row of a pass, and a 3-d input whose
    inner output loop is the one taken 4 at a time; as eager."""
    x = make((rows, cols), dtype, "contig", seed=60)
    if dtype.is_floating_point and rows > 2:
        x[2, cols // 2] = math.nan
        x[rows - 1, 0] = -math.inf
    x3 = make((3, rows, cols), dtype, "contig", seed=61)
    ops = ["sum", "amax", "amin"] + (["mean"] if dtype.is_floating_point else [])
    if dtype != torch.int64:  # (int64 products overflow: wrapping is tested elsewhere)
        ops.append("prod")
        if dtype.is_floating_point:  # products within range
            x, x3 = x.clamp(-1.2, 1.2), x3.clamp(-1.2, 1.2)
    tol = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}.get(dtype, (1e-5, 1e-4))

    def want(op, t, dim):
        w = getattr(torch, op)(t, dim)
        return w.float().to(dtype) if op == "prod" and dtype in (torch.float16, torch.bfloat16) else w

    # one graph per op for the 2-d input (reductions of the same rows in one
    # graph run as phases of a row group, which reads one row at a time)
    for op in ops:
        cg, (got,) = compile_run(lambda g, a: [g.op(op, [a], dims=[1])], x)
        check(got, want(op, x, 1), *tol)
        assert ("wk_m" in kernel_source(cg)) == (rows >= 4), op
    cg, outs = compile_run(lambda g, a: [g.op(op, [a], dims=[2], keepdim=True) for op in ops], x3)
    for op, got in zip(ops, outs):
        check(got, want(op, x3, 2).unsqueeze(2), *tol)


@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded"])
def test_row_sums_of_strided_rows_take_one_row_at_a_time(layout):
    """Rows that are not contiguous (no sequential streams to add) keep the
    one-row loop; values as eager."""
    x = make((37, 300), torch.float32, layout, seed=62)
    for op, tol in (("sum", (1e-5, 1e-4)), ("amax", (0, 0))):
        cg, (got,) = compile_run(lambda g, a: [g.op(op, [a], dims=[1])], x)
        check(got, getattr(torch, op)(x, 1), *tol)
        # (an expanded input's rows are one row, contiguous: several per pass)
        assert ("wk_m" in kernel_source(cg)) == (layout == "expanded")


def test_several_rows_per_pass_with_an_epilogue():
    """A row reduction whose kernel also stores a pointwise function of the
    result (the epilogue) writes it for each of the 4 rows of a pass."""
    x = make((4 * 11 + 3, 70), torch.float32, "contig", seed=63)

    def build(g, a):
        s = g.op("sum", [a], dims=[1], keepdim=True)
        return [s, g.op("mul", [g.op("sqrt", [g.op("abs", [s])]), g.scalar(3.0)])]

    cg, outs = compile_run(build, x)
    s = x.sum(1, keepdim=True)
    check(outs[0], s, rtol=1e-5, atol=1e-4)
    check(outs[1], s.abs().sqrt() * 3, rtol=1e-5, atol=1e-4)


def test_row_group_functions_unroll_their_loops():
    """A row group's function (softmax: three phases over each row) is
    marked WK_ROW_GROUP (gcc: loops unrolled); a kernel running alone is
    not; values as eager either way."""
    x = make((40, 300), torch.float32, "contig", seed=64)
    cg, (got,) = compile_run(lambda g, a: softmax_build(g, a, 1), x)
    check(got, torch.softmax(x, 1), rtol=1e-5, atol=1e-7)
    assert "WK_ROW_GROUP static int kernel0(" in kernel_source(cg)
    cg, (got,) = compile_run(lambda g, a: [g.op("sum", [a], dims=[1])], x)
    check(got, x.sum(1), rtol=1e-5, atol=1e-4)
    assert "WK_ROW_GROUP" not in kernel_source(cg)


@pytest.mark.parametrize("cols", [17, 300])
def test_exp_of_an_exp_in_a_reduction_block(cols):
    """A row sum of exp(exp(x) * 0.5): both exps go through blocks
    (emit_exp_blocks), the second's argument loop reading the first's block
    (it printed an index of `(null)` there, which did not compile)."""
    x = make((8, cols), torch.float32, "contig", seed=70)
    cg, (got,) = compile_run(
        lambda g, a: [g.op("sum", [g.op("exp", [g.op("mul", [g.op("exp", [a]), g.scalar(0.5)])])], dims=[1])], x)
    check(got, (x.exp() * 0.5).exp().sum(1))
    assert "wk_expf_block(wk_ex1, re - rb);" in kernel_source(cg)
