"""A softmax row group compiled for one thread, whose float32 output is larger
than the last-level cache, runs its last phase one row late (cgen_c.c
lag_plan): row i - 1's scratch row * (1 / sum) is streamed out block by
block inside row i's exp-sum blocks (wk_stream_scaled_f32), and the last row
after the loop. Values compared with eager on random rows with infinities,
NaN and an all -inf row, and bit for bit with the same graph compiled for
two threads (a parallel row loop, no lag). Rows of odd length (unaligned
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


def compile_both(monkeypatch, build, x):
    """(source, output) compiled for one thread, then for two."""
    out = []
    for n in (1, 2):
        threads(monkeypatch, n)
        cg, (got,) = compile_run(build, x)
        out.append((kernel_source(cg), got))
    threads(monkeypatch, "")
    return out


@pytest.mark.parametrize("cols", [4096, 4097, 1029, 16383])
@pytest.mark.parametrize("build", [softmax_build, softmax_by_reciprocal_build], ids=["div", "mul"])
def test_one_thread_softmax_above_the_cache_lags_its_last_phase(monkeypatch, cols, build):
    x = random_rows(rows_above_the_cache(cols), cols, seed=cols)
    (src1, got1), (src2, got2) = compile_both(monkeypatch, build, x)
    torch.testing.assert_close(got1, torch.softmax(x, 1), rtol=1e-5, atol=1e-7, equal_nan=True)
    # the parallel row loop (no lag) computes every row the same way: the same bits
    torch.testing.assert_close(got1, got2, rtol=0, atol=0, equal_nan=True)
    assert "wk_lag" in src1 and src1.count("wk_stream_scaled_f32(") == 2  # in the blocks, and the last row
    assert src1.count("wk_stream_fence();") == 1 and "wk_stream_f32(" not in src1
    assert "wk_lag" not in src2 and "wk_stream_f32(" in src2


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
