"""A kernel created after unrelated kernels still joins the row group it
belongs to (rows.c, hoist_into_group). A layer norm's backward is the case:
its per-row sums come first, the weight's and bias's column sums next, and
the input's gradient, which reads the rows and the row sums again, last in
graph order. It moves up past the column sums into the rows' group, so the
rows are read once; a kernel that reads what a kernel in between stores
stays where it is. Values are compared with eager, on the C target (the
Triton target's copy of these cases runs under the interpreter in
test_triton_interpret.py)."""
import pytest
import torch

import wick._C as C


def rand(shape, dtype=torch.float32, seed=0, layout="contig"):
    g = torch.Generator().manual_seed(seed)
    if layout == "transposed":
        return torch.randn(tuple(reversed(shape)), generator=g).to(dtype).t()
    return torch.randn(shape, generator=g).to(dtype)


def layer_norm_backward(g, cols, dtype, gy, x, mean, rstd, w, acc, dx_reads_dw=False):
    """Graph order as AOTAutograd's: row sums, column sums, then dx."""
    n = g.scalar(float(cols))
    gf = g.op("CONVERT", [gy], dtype=torch.float32)
    xhat = g.op("mul", [g.op("sub", [x, mean]), rstd])
    gw = g.op("mul", [gf, w])
    s1 = g.op("sum", [gw], dims=[1], keepdim=True)
    s2 = g.op("sum", [g.op("mul", [gw, xhat])], dims=[1], keepdim=True)
    dw = g.op("sum", [g.op("mul", [gf, xhat])], dims=[0])
    db = g.op("sum", [gf], dims=[0])
    inner = g.op("sub", [g.op("sub", [g.op("mul", [gw, n]), s1]), g.op("mul", [xhat, s2])])
    if dx_reads_dw:  # depends on a column sum between it and the group: may not move past it
        inner = g.op("add", [inner, dw])
    dx = g.op("add", [acc, g.op("mul", [g.op("div", [rstd, n]), inner])])
    return [dw, db, dx, g.op("CONVERT", [dx], dtype=dtype)]


def eager(gy, x, mean, rstd, w, acc, dx_reads_dw=False):
    n = x.shape[1]
    gf = gy.float()
    xhat = (x - mean) * rstd
    gw = gf * w
    s1, s2 = gw.sum(1, keepdim=True), (gw * xhat).sum(1, keepdim=True)
    dw, db = (gf * xhat).sum(0), gf.sum(0)
    inner = gw * n - s1 - xhat * s2
    if dx_reads_dw:
        inner = inner + dw
    dx = acc + rstd / n * inner
    return [dw, db, dx, dx.to(gy.dtype)]


def inputs(rows, cols, dtype, layout):
    return (rand((rows, cols), dtype, 1), rand((rows, cols), seed=2, layout=layout), rand((rows, 1), seed=3),
            rand((rows, 1), seed=4).abs() + 0.5, rand((cols,), seed=5), rand((rows, cols), seed=6))


def compile_and_run(tensors, dx_reads_dw):
    g = C.Graph()
    ids = [g.input_like(t) for t in tensors]
    for o in layer_norm_backward(g, tensors[1].shape[1], tensors[0].dtype, *ids, dx_reads_dw=dx_reads_dw):
        g.output(o)
    cg = g.compile()
    kernels = [ln for ln in cg.describe()["summary"].splitlines() if ln.startswith("kernel ")]
    return cg(*tensors), kernels


def check(got, want):
    assert len(got) == len(want)
    for gv, wv in zip(got, want):
        assert gv.dtype == wv.dtype and gv.shape == wv.shape, (gv.dtype, wv.dtype, gv.shape, wv.shape)
        tol = 2e-2 if gv.dtype == torch.bfloat16 else 1e-4
        torch.testing.assert_close(gv.float(), wv.float(), rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("layout", ["contig", "transposed"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,cols", [(64, 96), (200, 768), (40, 5000)])
def test_layer_norm_input_gradient_joins_the_rows_group(rows, cols, dtype, layout):
    tensors = inputs(rows, cols, dtype, layout)
    got, kernels = compile_and_run(tensors, False)
    check(got, eager(*tensors))
    (dx_kernel,) = [k for k in kernels if "pointwise" in k and "ADD" in k]
    assert "(row-fused into kernel" in dx_kernel, kernels
    # the column sums run after the group they were created before
    position = {ln: i for i, ln in enumerate(kernels)}
    columns = [ln for ln in kernels if "reduction" in ln and "over [%d]" % rows in ln]
    assert len(columns) == 2 and all(position[c] > position[dx_kernel] for c in columns), kernels


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_kernel_reading_a_column_sum_between_stays_after_it(dtype):
    tensors = inputs(64, 96, dtype, "contig")
    got, kernels = compile_and_run(tensors, True)
    check(got, eager(*tensors, dx_reads_dw=True))
    (dx_kernel,) = [k for k in kernels if "pointwise" in k and "ADD" in k]
    assert "row-fused" not in dx_kernel, kernels


def test_empty_rows():
    tensors = inputs(0, 96, torch.float32, "contig")
    got, _ = compile_and_run(tensors, False)
    check(got, eager(*tensors))
