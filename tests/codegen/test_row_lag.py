"""A softmax row group whose float32 output is larger than the last-level
cache runs its last phase one row late (cgen_c.c lag_plan): row i - 1's
scratch row * (1 / sum) is streamed out block by block inside row i's
exp-sum blocks (wk_stream_scaled_f32), and the last row after the loop; with
a parallel row loop, each thread within its own rows, flushing its own last
row. Values compared with eager on random rows with infinities, NaN and an
all -inf row, and bit for bit with the same rows computed below the cache
(no lag). The exp-sum phase's exps in registers (wk_expsum_f32). Rows of odd length (unaligned
row starts, scalar heads and tails), a multiply by a per-row reciprocal
instead of a division, and the shapes that keep today's phases (output
below the cache, float64, bfloat16, empty, log-softmax)."""
import pytest
import torch

import wick._C as C
from compiler_session import compile_run, kernel_source, llc_bytes


def threads(monkeypatch, n):
    monkeypatch.setenv("WICK_NUM_THREADS", str(n))
    C.env_reload()


def softmax_build(g, a):
    m = g.op("amax", [a], dims=[1], keepdim=True)
    e = g.op("exp", [g.op("sub", [a, m])])
    s = g.op("sum", [e], dims=[1], keepdim=True)
    return [g.op("div", [e, s])]


def softmax_by_reciprocal_build(g, a):
    m = g.op("amax", [a], dims=[1], keepdim=True)
    e = g.op("exp", [g.op("sub", [a, m])])
    s = g.op("sum", [e], dims=[1], keepdim=True)
    return [g.op("mul", [e, g.op("div", [g.scalar(1.0), s])])]


def log_softmax_build(g, a):
    m = g.op("amax", [a], dims=[1], keepdim=True)
    d = g.op("sub", [a, m])
    s = g.op("sum", [g.op("exp", [d])], dims=[1], keepdim=True)
    return [g.op("sub", [d, g.op("log", [s])])]


def rows_above_the_cache(cols):
    """Enough rows of `cols` float32 for an output of at least the cache."""
    return -(-llc_bytes() // (4 * cols)) + 1


def random_rows(rows, cols, seed, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, cols, generator=gen, dtype=torch.float64) * 4).to(dtype)
    if rows > 8 and cols > 2:
        x[1, 0] = float("inf")
        x[2, cols // 2] = float("-inf")
        x[3, cols - 1] = float("nan")
        x[4, :] = float("-inf")
        x[5, :] = 7.0  # a constant row: every element the max
        x[rows - 1, 1] = -1e30  # exp underflows to 0 in the last row (the one flushed after the loop)
    return x


def compile_with(monkeypatch, n, build, *tensors):
    """(source, output) of the graph compiled for n threads."""
    threads(monkeypatch, n)
    try:
        cg, (got,) = compile_run(build, *tensors)
    finally:
        threads(monkeypatch, "")
    return kernel_source(cg), got


@pytest.mark.parametrize("nthreads", [1, 2, 5])
@pytest.mark.parametrize("cols", [4096, 4097, 1029, 16383])
@pytest.mark.parametrize("build", [softmax_build, softmax_by_reciprocal_build], ids=["div", "mul"])
def test_softmax_above_the_cache_lags_its_last_phase(monkeypatch, cols, build, nthreads):
    """One thread, or a parallel row loop (each thread lags within its own
    rows and flushes its own last row; 5 threads: uneven ranges): values as
    eager, and bit for bit as the same rows computed by a graph below the
    cache (no lag, no streamed stores) -- the first rows, and the last
    rows (the last thread's flushed row)."""
    x = random_rows(rows_above_the_cache(cols), cols, seed=cols)
    src, got = compile_with(monkeypatch, nthreads, build, x)
    want = torch.softmax(x, 1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7, equal_nan=True)
    torch.testing.assert_close(got, want, equal_nan=True)  # (and within the float32 defaults)
    rows = x.shape[0]
    for part in (slice(0, 40), slice(rows - 40, rows)):
        src_small, got_small = compile_with(monkeypatch, 1, build, x[part].contiguous())
        assert "wk_lag" not in src_small and "wk_stream" not in src_small
        torch.testing.assert_close(got[part], got_small, rtol=0, atol=0, equal_nan=True)
    assert "wk_lag" in src and src.count("wk_stream_scaled_f32(") == 2  # in the blocks, and the last row
    assert src.count("wk_stream_fence();") == 1 and "wk_stream_f32(" not in src
    assert "wk_expsum_f32(&wk_row0[rb]," in src  # the exps in registers, kept for the last phase
    # threads: one region, each thread its own rows (no barrier before its flush)
    assert ("#pragma omp for schedule(static) nowait" in src) == (nthreads > 1)
    assert "omp parallel for" not in src


@pytest.mark.parametrize("nthreads", [1, 2])
@pytest.mark.parametrize("cols", [17, 23, 256, 263, 4097])
def test_exp_sums_in_registers_as_eager(monkeypatch, cols, nthreads):
    """The exp-sum phase of softmax and log-softmax (rows over 16) takes
    exp(x - max) in registers and sums it there (wk_expf8 in
    wk_expsum_f32; tails of 1 to 7 through a padded vector left out of the
    sum): as eager within float32's default tolerances, on rows with
    infinities, NaN, an all -inf row and a row whose exps underflow."""
    x = random_rows(67, cols, seed=100 + cols)
    for build, fn, dst in ((softmax_build, torch.softmax, "&wk_row0[rb]"),
                           (log_softmax_build, torch.log_softmax, "NULL")):
        src, got = compile_with(monkeypatch, nthreads, build, x)
        torch.testing.assert_close(got, fn(x, 1), equal_nan=True)
        assert f"wk_expsum_f32({dst}," in src


@pytest.mark.parametrize("nthreads", [1, 2])
def test_one_long_row_sums_its_exps_as_eager(monkeypatch, nthreads):
    """R = 1, a row of 2^22 + 5 float32 (above the cache, too long for a
    row scratch: no lag, the exps summed in registers block by block and
    the blocks in double): softmax and log-softmax as float64's, rounded,
    within float32's default tolerances. (Not as eager's float32: its row
    sum drifts by ~1e-4 relative at this length, 6.6e-4 in log-softmax.)"""
    x = random_rows(1, (1 << 22) + 5, seed=3)
    for build, fn in ((softmax_build, torch.softmax), (log_softmax_build, torch.log_softmax)):
        src, got = compile_with(monkeypatch, nthreads, build, x)
        torch.testing.assert_close(got, fn(x.double(), 1).float())
        assert "wk_expsum_f32(NULL," in src and "wk_lag" not in src


@pytest.mark.parametrize("case", ["below_cache", "float64", "bfloat16", "empty_rows", "log_softmax"])
def test_shapes_that_keep_todays_phases(monkeypatch, case):
    cols = 4097
    rows = rows_above_the_cache(cols)
    build, want_fn = softmax_build, lambda t: torch.softmax(t, 1)
    dtype = torch.float32
    if case == "below_cache":
        rows = 100
    elif case == "float64":
        dtype = torch.float64
    elif case == "bfloat16":
        dtype = torch.bfloat16
    elif case == "empty_rows":
        rows = 0
    else:
        build, want_fn = log_softmax_build, lambda t: torch.log_softmax(t, 1)
    x = random_rows(rows, cols, seed=7, dtype=dtype)
    threads(monkeypatch, 1)
    cg, (got,) = compile_run(build, x)
    threads(monkeypatch, "")
    want = want_fn(x.double()).to(dtype) if dtype == torch.bfloat16 else want_fn(x)
    # (log-softmax: values of -40 and more, an absolute 1e-5 as test_reductions.check)
    tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5 if case == "log_softmax" else 1e-7)
    torch.testing.assert_close(got, want, equal_nan=True, **tol)
    assert "wk_lag" not in kernel_source(cg)
