"""F.scaled_dot_product_attention where eager runs the math kernel
(aten._scaled_dot_product_attention_math: 3-D or 2-D inputs on the CPU, a
mask that needs a gradient, the MATH backend forced, and on CUDA the cases
no fused kernel takes): capture inlines the kernel's own ops
(wick/_inlined.py attention_math), so the graph holds two bmm (or mm) extern
kernels and native softmax and pointwise work instead of one Python call.
16-bit inputs are computed in float32 as eager's kernel does, below the
caller's autocast; rows whose mask is all False give 0 and a gradient of 0
(eager's _safe_softmax). Each case is compared with eager on the same random
inputs, values and gradients."""
import re
import zlib

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import wick._C as C
from test_capture_util import *  # noqa: F401,F403  (fixtures and helpers)
from test_capture_util import assert_same, compiled, entries, reasons

SDPA = "torch._C._nn.scaled_dot_product_attention"


def externs(fn):
    es = entries(fn)
    assert es and all(not e["eager"] and e["graph_count"] == 1 and not e.get("breaks") for e in es), reasons(fn)
    return re.findall(r"EXTERN\[\d+ ([^\]]+)\]", es[-1]["graph"])


def tol(dtype):
    # half types: two units in the last place (eager rounds each step to the
    # half type; the fused kernel keeps float32 between them)
    return {torch.float32: (2e-5, 2e-6), torch.float64: (1e-10, 1e-12),
            torch.bfloat16: (1.6e-2, 1e-5), torch.float16: (2e-3, 1e-5)}[dtype]


def mask_of(form, shape, dtype, g):
    s = shape[:-1] + (shape[-2],)
    if form == "bool":
        m = torch.rand(s, generator=g) > 0.3
        m[..., 1, :] = False  # a row that attends to nothing
        return m
    if form == "float":
        return torch.randn(s, generator=g).to(dtype)
    return None


def attend(q, k, v, m, causal, scale):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal, scale=scale) * 1.5


@pytest.mark.parametrize("shape", [(3, 7, 16), (2, 3, 5, 8), (6, 4)], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("form", ["none", "bool", "float", "causal"])
@pytest.mark.parametrize("scale", [None, 0.3, -0.2])
def test_math_attention_is_inlined_and_equal_to_eager(shape, dtype, form, scale):
    g = torch.Generator().manual_seed(zlib.crc32(repr((shape, form)).encode()) % 1000)  # str hashes vary per process
    q, k, v = (torch.randn(shape, generator=g).to(dtype) for _ in range(3))
    m = mask_of(form, shape, dtype, g)
    fn = attend
    with sdpa_kernel(SDPBackend.MATH):  # 4-D CPU inputs would otherwise take the flash kernel
        want = fn(q, k, v, m, form == "causal", scale)
        C.reset()
        got = compiled(fn)(q, k, v, m, form == "causal", scale)
    rtol, atol = tol(dtype)
    assert_same(got, want, rtol, atol)
    matmul = "aten.mm.default" if len(shape) == 2 else "aten.bmm.default"
    assert externs(fn) == [matmul, matmul]


@pytest.mark.usefixtures("host_profile_on")
def test_math_attention_under_autocast_is_computed_in_float32():
    # autocast casts q, k, v to bfloat16 (sdpa is a lower-precision op); the
    # kernel then computes in float32 with autocast off, as eager's does. The
    # float32 bmm externs run natively (the C shim), not as Python calls
    # wrapped to turn autocast off (which they are without the shim change)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 9, 32, generator=g) for _ in range(3))
    m = torch.randn(2, 9, 9, generator=g)

    def fn(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m) * 2

    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):  # no_grad: natively called
        want = fn(q, k, v, m)
        C.reset()
        f = compiled(fn)
        f(q, k, v, m)
        C.host_profile(True)
        got = f(q, k, v, m)
    assert C.host_profile(True).get("extern_native", (0, 0.0))[0] == 2
    assert want.dtype == torch.bfloat16
    assert_same(got, want, *tol(torch.bfloat16))
    assert externs(fn) == ["aten.bmm.default", "aten.bmm.default"]


def test_math_attention_on_strided_inputs():
    # transformers' (B, S, H*D) -> (B, H, S, D) views, a broadcast bool mask
    # built from a (B, 1, 1, S) comparison (BERT's padding mask)
    g = torch.Generator().manual_seed(2)
    b, s, h, d = 2, 12, 3, 8
    x = torch.randn(b, s, 3 * h * d, generator=g)
    keep = torch.rand(b, s, generator=g) > 0.2

    def fn(x, keep):
        q, k, v = (t.view(b, s, h, d).transpose(1, 2) for t in x.split(h * d, -1))
        m = keep[:, None, None, :].expand(b, 1, s, s)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m).transpose(1, 2).reshape(b, s, h * d)

    with sdpa_kernel(SDPBackend.MATH):
        want = fn(x, keep)
        C.reset()
        got = compiled(fn)(x, keep)
    assert_same(got, want)
    assert externs(fn) == ["aten.bmm.default", "aten.bmm.default"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_math_attention_gradients_are_eagers(dtype):
    # every input needs a gradient, the mask too; a row with nothing to attend
    # to has a gradient of 0 in eager (not NaN)
    g = torch.Generator().manual_seed(3)
    base = [torch.randn(2, 3, 6, 8, generator=g).to(dtype) for _ in range(3)]
    bias = torch.randn(2, 1, 6, 6, generator=g).to(dtype)
    bias[1, :, 2] = float("-inf")
    args = base + [bias]
    mine = [t.clone().requires_grad_() for t in args]
    refs = [t.clone().requires_grad_() for t in args]

    def fn(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m) * 2

    C.reset()
    got, want = compiled(fn)(*mine), fn(*refs)
    assert_same(got, want)
    dy = torch.randn(want.shape, generator=g).to(dtype)
    got.backward(dy)
    want.backward(dy)
    for a, r in zip(mine, refs):
        assert not a.grad.isnan().any()
        assert_same(a.grad, r.grad)
    assert externs(fn) == ["aten.bmm.default", "aten.bmm.default"]


def test_math_attention_with_broadcast_batches():
    # a key and value shared by every head (batch size 1 there): matmul's
    # expand of eager's kernel
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 4, 5, 8, generator=g)
    k, v = torch.randn(2, 1, 7, 8, generator=g), torch.randn(2, 1, 7, 8, generator=g)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    with sdpa_kernel(SDPBackend.MATH):
        want = fn(q, k, v)
        C.reset()
        got = compiled(fn)(q, k, v)
    assert_same(got, want)
    assert externs(fn) == ["aten.bmm.default", "aten.bmm.default"]


def test_dropout_keeps_eagers_call():
    # dropout draws random numbers inside eager's kernel: not inlined
    q = torch.randn(3, 5, 8)

    def fn(q):
        return F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)

    torch.manual_seed(5)
    want = fn(q)
    C.reset()
    torch.manual_seed(5)
    got = compiled(fn)(q)
    assert_same(got, want)
    assert externs(fn) == [SDPA]


def test_math_attention_inside_a_disabled_float32_autocast():
    # the caller's autocast dtype is float32 (a disabled block set it): the
    # inlined kernel's own autocast-off block must not make torch.autocast
    # warn (a graph break)
    q = torch.randn(3, 5, 8)

    def fn(q):
        return F.scaled_dot_product_attention(q, q, q) * 2

    with torch.autocast("cpu", dtype=torch.float32, enabled=False):
        want = fn(q)
        C.reset()
        got = compiled(fn)(q)
    assert_same(got, want)
    assert externs(fn) == ["aten.bmm.default", "aten.bmm.default"]
