"""A residual sum h = x + y that a layer norm (or an RMS norm) normalises
and the graph also returns (a transformer block: the next residual add
reads h again) is computed, stored and normalised in one row group: the sum
is the group's first phase, over [rows, cols], and the norm's phases read h
in the row it was just stored (rows.c). Values compared with eager on the
C backend: float32 and bfloat16 (the norm reads h rounded to bfloat16, as
eager does), rows of 768 and 5000, a 3-d input whose leading dims are the
rows, transposed and sliced inputs, zero rows, norms of slices of h's rows;
and a large output (above the last-level cache) whose sum is kept in cache
for the norm, not streamed.
The same graphs under Triton's interpreter: tests/codegen/test_triton_interpret.py."""
import pytest
import torch

from compiler_session import compile_run, kernel_source, llc_bytes

EPS = 1e-5


def layer_norm_build(g, x, y, w, b):
    h = g.op("add", [x, y])
    return [h, g.op("layer_norm", [h, w, b], dims=(-1,), eps=EPS)]


def rms_norm_build(g, x, y, w, b):
    """x * rsqrt(mean(x * x) + eps) * w, on the residual sum (LLaMA's RMSNorm
    of a float32 model; b unused)."""
    h = g.op("add", [x, y])
    ms = g.op("mean", [g.op("mul", [h, h])], dims=[-1], keepdim=True)
    r = g.op("rsqrt", [g.op("add", [ms, g.scalar(EPS)])])
    return [h, g.op("mul", [g.op("mul", [h, r]), w])]


def rms_norm_float_build(g, x, y, w, b):
    """LLaMA's RMSNorm of a bfloat16 model: the norm computed on h in
    float32, cast back, times the weight."""
    h = g.op("add", [x, y])
    hf = g.op("convert", [h], dtype=torch.float32)
    ms = g.op("mean", [g.op("mul", [hf, hf])], dims=[-1], keepdim=True)
    n = g.op("mul", [hf, g.op("rsqrt", [g.op("add", [ms, g.scalar(EPS)])])])
    return [h, g.op("mul", [w, g.op("convert", [n], dtype=g.value(x)["dtype"])])]


def eager(build, x, y, w, b):
    h = x + y
    if build is layer_norm_build:
        return h, torch.nn.functional.layer_norm(h, (h.shape[-1],), w, b, EPS)
    if build is rms_norm_build:
        return h, h * torch.rsqrt((h * h).mean(-1, keepdim=True) + EPS) * w
    hf = h.float()
    return h, w * (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS)).to(h.dtype)


def tensors(shape, dtype, layout="contig", seed=0):
    gen = torch.Generator().manual_seed(seed)
    cols = shape[-1]

    def r(s, scale=1.0, shift=0.0):
        return (torch.randn(s, generator=gen, dtype=torch.float64) * scale + shift).to(dtype)

    x = r(shape, 3.0, 0.5)
    if layout == "transposed":
        x = r(shape[::-1], 3.0, 0.5).t()
    elif layout == "sliced":
        x = r(shape[:-1] + (cols * 2,), 3.0, 0.5)[..., ::2]
    return x, r(shape), r((cols,), 0.5, 1.0), r((cols,), 0.5)


def tolerances(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)


def summary_lines(cg):
    return [ln for ln in cg.describe()["summary"].splitlines() if ln.startswith("kernel ")]


def assert_one_row_group(cg, rows, cols):
    """The sum is kernel 0 over [rows, cols]; every other kernel is a phase of its group."""
    lines = summary_lines(cg)
    assert lines[0].startswith("kernel 0: pointwise {ADD} [%d, %d]" % (rows, cols)), lines
    assert len(lines) >= 3 and all("(row-fused into kernel 0)" in ln for ln in lines[1:]), lines


BUILDS = [layer_norm_build, rms_norm_build, rms_norm_float_build]


@pytest.mark.parametrize("build", BUILDS, ids=["layer_norm", "rms_norm", "rms_norm_float"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(64, 768), (40, 5000), (4, 16, 96)])
def test_sum_and_norm_are_one_row_group(build, dtype, shape):
    x, y, w, b = tensors(shape, dtype)
    cg, got = compile_run(build, x, y, w, b)
    want = eager(build, x, y, w, b)
    rows = x.numel() // shape[-1]
    assert_one_row_group(cg, rows, shape[-1])
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)  # the sum as eager rounds it
    torch.testing.assert_close(got[1], want[1], **tolerances(dtype))


@pytest.mark.parametrize("layout", ["transposed", "sliced"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_non_contiguous_input(layout, dtype):
    x, y, w, b = tensors((48, 768), dtype, layout)
    assert not x.is_contiguous()
    cg, got = compile_run(layer_norm_build, x, y, w, b)
    want = eager(layer_norm_build, x, y, w, b)
    assert_one_row_group(cg, 48, 768)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], want[1], **tolerances(dtype))


@pytest.mark.parametrize("build", BUILDS, ids=["layer_norm", "rms_norm", "rms_norm_float"])
def test_zero_rows(build):
    x, y, w, b = tensors((0, 768), torch.float32)
    _, got = compile_run(build, x, y, w, b)
    want = eager(build, x, y, w, b)
    assert got[0].shape == want[0].shape and got[1].shape == want[1].shape


def test_norm_reads_the_rounded_bfloat16_sum():
    """h = x + y with x around 200 and y small: bfloat16 keeps 8 bits, so h
    rounds to whole numbers there and the layer norm of the rounded h (which
    centres the row: what is left is mostly the rounding) is far from the
    norm of the float32 sum. Eager normalises the rounded h; so must the
    fused group."""
    build = layer_norm_build
    gen = torch.Generator().manual_seed(3)
    x = (torch.randint(190, 210, (64, 768), generator=gen).double()).to(torch.bfloat16)
    y = (torch.randn(64, 768, generator=gen, dtype=torch.float64) * 0.4).to(torch.bfloat16)
    w = (torch.rand(768, generator=gen, dtype=torch.float64) + 0.5).to(torch.bfloat16)
    b = (torch.randn(768, generator=gen, dtype=torch.float64) * 0.1).to(torch.bfloat16)
    cg, got = compile_run(build, x, y, w, b)
    assert_one_row_group(cg, 64, 768)
    want = eager(build, x, y, w, b)
    # the float32 sum normalised instead: what a group reading its registers unrounded would give
    unrounded = eager(build, x.float(), y.float(), w.float(), b.float())[1]
    assert (unrounded - want[1].float()).abs().max() > 0.1
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], want[1], rtol=2e-2, atol=2e-2)


def test_large_sum_stays_cached_for_the_norm():
    """An output above the last-level cache is streamed out with
    non-temporal stores, except the sum the norm's phases read back."""
    cols = 1024
    rows = -(-llc_bytes() // (4 * cols)) + 8
    x, y, w, b = tensors((rows, cols), torch.float32)
    cg, got = compile_run(layer_norm_build, x, y, w, b)
    want = eager(layer_norm_build, x, y, w, b)
    assert_one_row_group(cg, rows, cols)
    src = kernel_source(cg)
    assert "wk_stream_f32(&b5" in src  # the normalised output
    assert "wk_stream_f32(&b4" not in src  # the sum, read again by the later phases
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)


def test_sum_not_reused_is_recomputed_in_the_norm():
    """Where h is not returned, the norm recomputes the sum (no store): no
    separate kernel, as before."""
    x, y, w, b = tensors((64, 768), torch.float32)
    cg, (got,) = compile_run(lambda g, a, c, ww, bb: layer_norm_build(g, a, c, ww, bb)[1:], x, y, w, b)
    lines = summary_lines(cg)
    assert not any("{ADD}" in ln and "pointwise" in ln and "LAYER_NORM" not in ln for ln in lines), lines
    torch.testing.assert_close(got, eager(layer_norm_build, x, y, w, b)[1], rtol=1e-5, atol=1e-5)


def sliced_norms_build(g, x, y, w, b):
    """Layer norms of two slices of each row of h: every other element, and
    the second half (a read at an offset into the row)."""
    rows, cols = g.value(x)["sizes"]
    h = g.op("add", [x, y])
    every_other = g.op("VIEW", [h], ints=[2, rows, cols // 2, cols, 2, 0])
    second_half = g.op("VIEW", [h], ints=[2, rows, cols // 2, cols, 1, cols // 2])
    return [h, g.op("layer_norm", [every_other, w, b], dims=(-1,), eps=EPS),
            g.op("layer_norm", [second_half, w, b], dims=(-1,), eps=EPS)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norms_of_slices_of_the_sum(dtype):
    """The norms read parts of the row the sum phase stored: all one group."""
    x, y, _, _ = tensors((48, 768), dtype)
    _, _, w, b = tensors((48, 384), dtype, seed=1)
    cg, got = compile_run(sliced_norms_build, x, y, w, b)
    h = x + y
    assert_one_row_group(cg, 48, 768)
    torch.testing.assert_close(got[0], h, rtol=0, atol=0)
    for out, part in zip(got[1:], (h[:, ::2], h[:, 384:])):
        torch.testing.assert_close(out, torch.nn.functional.layer_norm(part, (384,), w, b, EPS), **tolerances(dtype))
