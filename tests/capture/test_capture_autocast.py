"""Inside torch.autocast, the floating inputs of autocast's lower-precision
ops (linear, matmul, bmm, addmm, baddbmm, convolutions, attention) are cast
by CONVERT nodes of the graph, not by the extern at run time: the casts fuse
with the kernels that make their inputs. Results, dtypes and gradients are
eager's; another autocast state at run time gives eager's result too."""
import pytest
import torch
import torch.nn.functional as F

from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries


def ln_linear_fn(x, w, b):
    h = F.layer_norm(x, (x.shape[-1],))
    return F.linear(h, w, b) + x


def qkv_fn(x, w, b):
    h = F.layer_norm(x, (x.shape[-1],))
    q, k, v = F.linear(h, w, b), F.linear(h, w * 2), F.linear(h, w, b * 3)
    return F.scaled_dot_product_attention(q[None], k[None], v[None])[0] + h


def matmul_ops_fn(x, w, b):
    y = (x.relu() @ w.t()) + torch.matmul(x, w.t())
    z = torch.bmm(x[None], w.t()[None])[0] + torch.addmm(b, x, w.t())
    return y + z + torch.baddbmm(b[None, None], x[None], w.t()[None])[0]


def masked_attention_fn(x, w, b):
    mask = (x[:, :1] > 0).float() * -1e4  # a float mask: autocast casts it too
    q = x.sin()[None, None]
    return F.scaled_dot_product_attention(q, q * 2, q + 1, attn_mask=mask[None, None] + w[:1, :1])


CASES = [ln_linear_fn, qkv_fn, matmul_ops_fn, masked_attention_fn]


def _inputs(n=8, d=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=dtype)
    w = torch.randn(d, d, generator=g, dtype=dtype) / 4
    b = torch.randn(d, generator=g, dtype=dtype)
    return x, w, b


def _tol(dtype):
    return dict(rtol=2e-2, atol=2e-2) if dtype in (torch.bfloat16, torch.float16) else dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("amp", [torch.bfloat16, torch.float16])
def test_autocast_casts_are_graph_nodes(fn, amp):
    x, w, b = _inputs()
    f = compiled(fn)
    with torch.no_grad(), torch.autocast("cpu", dtype=amp):
        want = fn(x, w, b)
        got = f(x, w, b)
        got = f(x, w, b)
    assert got.dtype == want.dtype
    assert_same(got, want, **_tol(amp))
    es = entries(fn)
    assert es and not es[0]["eager"] and es[0]["graph_count"] == 1, [e.get("reason") for e in es]
    assert "CONVERT" in es[0]["graph"] and f"dtype={str(amp).split('.')[1]}" in es[0]["graph"]


def test_shared_input_is_cast_once():
    x, w, b = _inputs()
    f = compiled(qkv_fn)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        f(x, w, b)
    graph = entries(qkv_fn)[0]["graph"]
    ln = [line.split(" = ")[0] for line in graph.splitlines() if "LAYER_NORM(" in line]
    assert len(ln) == 1
    casts_of_ln = [line for line in graph.splitlines() if f"CONVERT({ln[0]}," in line]
    assert len(casts_of_ln) == 1, graph


def test_no_cast_outside_the_autocast_dtype_rules():
    # float64 stays (autocast leaves it), inputs already in the autocast
    # dtype need none, and outside autocast nothing is cast
    def fn(x, w, b):
        return F.linear(x, w, b) * 2

    for dtype in (torch.float64, torch.bfloat16):
        x, w, b = _inputs(dtype=dtype, seed=3)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            want = fn(x, w, b)
            got = compiled(fn)(x, w, b)
        assert got.dtype == want.dtype
        assert_same(got, want, **_tol(dtype))
    x, w, b = _inputs(seed=4)
    with torch.no_grad():
        assert_same(compiled(fn)(x, w, b), fn(x, w, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("in_dtype", [torch.bfloat16, torch.float32])
def test_cpu_fp32_policy_prod(in_dtype):
    # the CPU's autocast runs prod in float32 (its fp32 list); other native
    # ops keep their dtype there
    def fn(x, w, b):
        return (x[:2, :4] * 0.1 + 1).prod() + x.exp().sum() + torch.softmax(x, -1)

    x, w, b = _inputs(dtype=in_dtype, seed=7)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = fn(x, w, b)
        got = compiled(fn)(x, w, b)
    assert got.dtype == want.dtype
    assert_same(got, want, **_tol(torch.bfloat16))


def test_other_autocast_state_at_run_time():
    x, w, b = _inputs(seed=5)
    f = compiled(ln_linear_fn)
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = f(x, w, b)
            assert got.dtype == torch.float32  # the residual add promotes
            assert_same(got, ln_linear_fn(x, w, b), **_tol(torch.bfloat16))
        # autocast off: eager's float32 result, not a bfloat16 one
        assert_same(f(x, w, b), ln_linear_fn(x, w, b), rtol=1e-5, atol=1e-5)
        with torch.autocast("cpu", dtype=torch.float16):
            want = ln_linear_fn(x, w, b)
            got = f(x, w, b)
        assert_same(got, want, **_tol(torch.float16))


def test_autocast_training_gradients():
    x, w, b = _inputs(seed=6)

    def run(fn):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fn(xs, ws, bs)
        out.float().square().sum().backward()
        return out, xs.grad, ws.grad, bs.grad

    f = compiled(qkv_fn)
    want = run(qkv_fn)
    run(f)
    got = run(f)
    assert got[0].dtype == want[0].dtype
    torch.testing.assert_close(got[0], want[0], rtol=1e-2, atol=1e-2)
    # the gradients are summed in bfloat16 in another order where eager casts
    # the shared input three times: bfloat16 rounding, at the gradients' scale
    for g_, w_ in zip(got[1:], want[1:]):
        assert g_.dtype == w_.dtype
        scale = w_.abs().max().item()
        torch.testing.assert_close(g_, w_, rtol=2e-2, atol=2e-2 * scale)


@pytest.mark.parametrize("op", ["linear", "addmm", "bmm", "attention"])
def test_caller_autocast_dtype_is_guarded(op):
    # the matmul goes through the C shim, outside autocast, on operands
    # the graph cast: another autocast dtype (or none) at the next call
    # captures again, and each result has eager's dtype and values
    def fn(x, w, b):
        if op == "linear":
            return F.linear(x, w, b)
        if op == "addmm":
            return torch.addmm(b, x, w.t())
        if op == "bmm":
            return torch.bmm(x[None], w.t()[None])
        return F.scaled_dot_product_attention(x[None, None], w[None, None], w[None, None] * 2)

    x, w, b = _inputs(seed=8)
    f = compiled(fn)
    with torch.no_grad():
        for amp in (torch.bfloat16, torch.float16, None, torch.bfloat16):
            with torch.autocast("cpu", dtype=amp or torch.bfloat16, enabled=amp is not None):
                want = fn(x, w, b)
                got = f(x, w, b)
            assert got.dtype == want.dtype == (amp or torch.float32)
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    es = entries(fn)
    assert len(es) == 3 and not any(e["eager"] for e in es), [e.get("reason") for e in es]
    assert all("aten." in e["graph"] for e in es), [e["graph"] for e in es]
