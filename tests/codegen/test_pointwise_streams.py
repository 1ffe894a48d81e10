"""Flat elementwise kernels (one loop) whose float32 output is larger than
the last-level cache compute it a chunk at a time into a stack array and
write the chunk with non-temporal stores (cgen_c.c gen_pointwise); below
that size, plain stores. Values compared with eager for sizes on both sides
of the threshold, lengths that are no multiple of the chunk or of the
vector width, outputs of other dtypes beside a streamed one, and strided
inputs."""
import pytest
import torch

from compiler_session import compile_run, kernel_source, llc_bytes


def rand(n, seed, dtype=torch.float32):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)).to(dtype)


def pointwise_build(g, a, b):
    t = g.op("sub", [g.op("relu", [g.op("add", [g.op("mul", [a, g.scalar(1.5)]), g.scalar(0.5)])]), b])
    return [g.op("mul", [g.op("sigmoid", [t]), b])]


def eager(x, y):
    return ((x * 1.5 + 0.5).relu() - y).sigmoid() * y


@pytest.mark.parametrize("delta", [-1024, 0, 1, 7, 1029])
def test_flat_kernels_stream_outputs_above_the_cache(delta):
    """Element counts just below the threshold (plain stores) and at or
    above it (streamed), with partial last chunks (1, 7, 1029 past a
    multiple of the 128-element chunk: scalar tails of wk_stream_f32)."""
    n = llc_bytes() // 4 + delta
    x, y = rand(n, 1), rand(n, 2)
    x[5] = float("nan")
    y[n - 1] = float("inf")
    cg, (got,) = compile_run(pointwise_build, x, y)
    torch.testing.assert_close(got, eager(x, y), rtol=1e-6, atol=1e-6, equal_nan=True)
    src = kernel_source(cg)
    streams = n * 4 >= llc_bytes()
    assert ("wk_stream_f32(" in src) == streams
    assert src.count("wk_stream_fence();") == (1 if streams else 0)


def test_streamed_output_beside_plain_stores_of_other_dtypes():
    """One kernel, three outputs: the float32 one streams, the float64 and
    bfloat16 ones (other element sizes) keep plain stores; every value as
    eager."""
    n = llc_bytes() // 4 + 333
    x, y = rand(n, 3), rand(n, 4)

    def build(g, a, b):
        s = g.op("add", [g.op("mul", [a, b]), g.scalar(2.0)])
        return [s, g.op("convert", [g.op("sub", [s, a])], dtype="float64"),
                g.op("convert", [g.op("add", [s, b])], dtype="bfloat16")]

    cg, outs = compile_run(build, x, y)
    s = x * y + 2
    torch.testing.assert_close(outs[0], s, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(outs[1], (s - x).double(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(outs[2], (s + y).bfloat16(), rtol=1e-2, atol=1e-2)
    src = kernel_source(cg)
    assert src.count("wk_stream_f32(") == 1 and "wk_nt1" not in src and "wk_nt2" not in src


def test_strided_input_into_a_streamed_output():
    """A sliced (every other element) input read into a contiguous streamed
    output, and a float64 result (not streamed) of the same size."""
    n = llc_bytes() // 4 + 5
    big = rand(2 * n, 5)
    x = big[::2]
    cg, (got,) = compile_run(lambda g, a: [g.op("mul", [g.op("exp", [a]), g.scalar(0.25)])], x)
    torch.testing.assert_close(got, x.exp() * 0.25, rtol=1e-6, atol=1e-6)
    assert "wk_stream_f32(" in kernel_source(cg)
    xd = x.double()
    cg, (got,) = compile_run(lambda g, a: [g.op("mul", [a, g.scalar(0.25)])], xd)
    assert torch.equal(got, xd * 0.25)
    assert "wk_stream_f32(" not in kernel_source(cg)


def threads(monkeypatch, n):
    import wick._C as C
    monkeypatch.setenv("WICK_NUM_THREADS", str(n))
    C.env_reload()


@pytest.mark.parametrize("nthreads", [1, 2])
@pytest.mark.parametrize("delta", [-1024, 0, 77])
def test_streamed_flat_kernels_take_their_exps_a_chunk_at_a_time(monkeypatch, nthreads, delta):
    """A streamed flat kernel computes each float32 exp of its body (the
    sigmoid's exp(-x), an exp of an exp, exp(x) overflowing to inf and
    underflowing to 0) for a whole chunk before the chunk's main loop
    (wk_expf_block; a partial last chunk, 77 past a multiple of 128, and
    its tail of 5 through a padded vector); below the cache, libmvec's
    expf inline. As eager within float32's default tolerances, NaN and
    infinities included, on one thread and on two."""
    n = llc_bytes() // 4 + delta
    x, y = rand(n, 11) * 4, rand(n, 12)
    x[3], x[n - 1], y[n - 2] = float("nan"), float("inf"), float("-inf")
    x[10], x[n - 3] = 100.0, -120.0  # exp overflows / underflows to 0
    threads(monkeypatch, nthreads)
    try:
        cg, (got,) = compile_run(pointwise_build, x, y)
        # (the nested exp's argument, exp(y / 8) / 2, kept small: exp multiplies
        # its argument's rounding by the argument itself)
        cg2, (e1, e2) = compile_run(lambda g, a, b: [
            g.op("exp", [a]),
            g.op("exp", [g.op("mul", [g.op("exp", [g.op("mul", [b, g.scalar(0.125)])]), g.scalar(0.5)])])], x, y)
    finally:
        threads(monkeypatch, "")
    torch.testing.assert_close(got, eager(x, y), equal_nan=True)
    torch.testing.assert_close(e1, x.exp(), equal_nan=True)
    torch.testing.assert_close(e2, ((y * 0.125).exp() * 0.5).exp(), equal_nan=True)
    streams = n * 4 >= llc_bytes()
    src, src2 = kernel_source(cg), kernel_source(cg2)
    assert src.count("wk_expf_block(wk_ex0, wk_ce - wk_c);") == (1 if streams else 0)
    assert ("expf(" in src.replace("wk_expf_block(", "")) == (not streams)
    # two kernels' worth of exps (one per output), the nested one reading the first's block
    assert ("wk_expf_block(wk_ex1, wk_ce - wk_c);" in src2) == streams
