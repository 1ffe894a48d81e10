"""Channels-last convolutions on CUDA (wick/_layout.py; on by default there):
bf16 autocast and float32 inference through torch.compile(backend="wick"),
compared with eager against a float64 reference, outputs with eager's strides.
The CPU side of the same pass: tests/runtime/test_channels_last.py."""
import pytest
import torch
import torch.nn as nn

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("triton")

import wick  # noqa: E402,F401
from wick import backends as B  # noqa: E402

import importlib.util  # noqa: E402
import os  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "layout_check", os.path.join(os.path.dirname(__file__), "..", "..", "bench", "layout_check.py"))
_lc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_lc)


def _rel(a, ref):
    return ((a.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("batch", [3, 8])
def test_conv_net_channels_last(monkeypatch, dtype, batch):
    monkeypatch.delenv("WICK_CHANNELS_LAST", raising=False)
    torch._dynamo.reset()
    torch.manual_seed(batch)
    m = _lc.Net(c=32).cuda().eval()
    for b in m.modules():
        if isinstance(b, nn.BatchNorm2d):
            b.running_mean.normal_(0, 0.5)
            b.running_var.uniform_(0.5, 2)
            b.weight.data.normal_(1, 0.2)
            b.bias.data.normal_(0, 0.2)
    m64 = _lc.Net(c=32).cuda().double().eval()
    m64.load_state_dict(m.state_dict())
    x = torch.randn(batch, 3, 37, 45, device="cuda")
    nfallbacks = len(B.fallback_reasons)
    with torch.no_grad():
        ref = m64(x.double())
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            eager = m(x)
            got = torch.compile(m, backend="wick")(x)
    assert B.compiled_graphs[-1]["layout"] == "channels-last", B.compiled_graphs[-1]
    assert B.fallback_reasons[nfallbacks:] == []
    for r, e, g in zip(ref, eager, got):
        assert g.dtype == e.dtype and g.shape == e.shape and g.stride() == e.stride()
        # as accurate as eager, within the dtype's rounding (tf32 convolutions in float32)
        tol = 2e-2 if dtype == torch.bfloat16 else 5e-3
        assert _rel(g, r) <= max(2 * _rel(e, r), tol), (_rel(g, r), _rel(e, r))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("layout", ["graph", "fx"])
def test_wick_compile_conv_net(monkeypatch, dtype, layout):
    """wick.compile of the same net: by default the captured graph gets the
    channels-last pass itself (wick/_graph_layout.py) and compiles natively;
    WICK_LAYOUT_PASS=fx: through AOTAutograd and wick/_layout.py."""
    import wick._C as C
    from wick import _graph_layout as GL

    monkeypatch.delenv("WICK_CHANNELS_LAST", raising=False)
    monkeypatch.setenv("WICK_LAYOUT_PASS", layout)
    C.env_reload()
    wick.reset()
    rewritten = []
    real = GL.apply
    def spy(g, e):
        out = real(g, e)
        rewritten.append(len(out[1]) - len(e))  # convolutions whose bias became an add
        return out

    monkeypatch.setattr(GL, "apply", spy)
    torch.manual_seed(5)
    m = _lc.Net(c=32).cuda().eval()
    for b in m.modules():
        if isinstance(b, nn.BatchNorm2d):
            b.running_mean.normal_(0, 0.5)
            b.running_var.uniform_(0.5, 2)
            b.weight.data.normal_(1, 0.2)
            b.bias.data.normal_(0, 0.2)
    m64 = _lc.Net(c=32).cuda().double().eval()
    m64.load_state_dict(m.state_dict())
    x = torch.randn(4, 3, 37, 45, device="cuda")
    n0 = len(B.compiled_graphs)
    try:
        with torch.no_grad():
            ref = m64(x.double())
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
                eager = m(x)
                f = wick.compile(m)
                got = f(x)
                again = f(x)
    finally:
        monkeypatch.undo()
        C.env_reload()
    if layout == "graph":
        assert rewritten == [1] and B.compiled_graphs[n0:] == []  # the depthwise convolution's bias
    else:
        assert not rewritten and [i["layout"] for i in B.compiled_graphs[n0:]] == ["channels-last"]
    assert wick.stats()["fallbacks"] == []
    for out in (got, again):
        for r, e, g in zip(ref, eager, out):
            assert g.dtype == e.dtype and g.shape == e.shape and g.stride() == e.stride()
            tol = 2e-2 if dtype == torch.bfloat16 else 5e-3
            assert _rel(g, r) <= max(2 * _rel(e, r), tol), (_rel(g, r), _rel(e, r))


def _views_fn(x, y):
    a = torch.relu(x).permute(0, 2, 1, 3)             # a view read by a kernel
    b = (a * 2).transpose(1, 3).contiguous()          # a copy out of a transposed view
    c = y.unsqueeze(0).expand(x.shape[0], -1, -1) + x.sum(-1)
    d = x[:, 1:, ::2].reshape(x.shape[0], -1)         # slice, strided slice, copy-reshape
    e = torch.cat([x, torch.sigmoid(x)], dim=1).narrow(1, 1, 3)
    f = torch.nn.functional.pad(y, (1, 2)) * 3
    g, h = torch.chunk(x.flatten(1), 2, dim=1)
    k = torch.stack([y, y * 2], dim=1).select(1, 1)
    return a, b, c, d.float().mean(1), e, f, g + 1, h, k, x.select(0, 1)[:, 2:5]  # an output aliasing an input


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("noncontig", [False, True])
def test_views_cat_pad_on_cuda(dtype, noncontig):
    # views on CUDA graphs are index remaps (VIEW nodes), cat and pad clamped
    # loads, as on the CPU; outputs that are views have eager's strides
    torch._dynamo.reset()
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(4, 6, 10, 8, device="cuda", generator=gen).to(dtype)
    y = torch.randn(6, 10, device="cuda", generator=gen).to(dtype)
    if noncontig:
        x = x.transpose(2, 3).contiguous().transpose(2, 3)
        y = torch.randn(10, 6, device="cuda", generator=gen).to(dtype).t()
    n0 = len(B.compiled_graphs)
    want = _views_fn(x, y)
    got = torch.compile(_views_fn, backend="wick")(x, y)
    info = B.compiled_graphs[n0:]
    assert info and info[-1]["views"] > 0, info
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride(), (g.stride(), w.stride())
        # bf16: a fused kernel rounds once where eager rounds each op's result
        rtol, atol = (1.6e-2, 0.125) if dtype == torch.bfloat16 else (1e-5, 1e-5)
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("layout", ["graph", "graph-extern", "graph-decompose", "fx"])
def test_wick_compile_conv_net_training(monkeypatch, dtype, layout):
    """A training step of the same net through wick.compile. graph (the
    default): wick's own autodiff, its training batch norms as table ops and
    the forward channels-last (wick/_graph_layout.py), the backward
    following (wick/_autodiff.py); a graph with 16-bit batch norms (bf16
    autocast) goes through AOTAutograd, which keeps cuDNN's calls, unless
    WICK_CUDA_NORM_TRAINING=extern (graph-extern: wick's graphs calling
    _batch_norm_with_update and batch_norm_backward) or decompose
    (graph-decompose: table ops); fx (WICK_LAYOUT_PASS=fx): through
    AOTAutograd and wick/_layout.py. Outputs, running statistics and
    gradients as accurate as eager's against a float64 reference, outputs
    with eager's strides."""
    import copy

    import wick._C as C
    from wick import _autodiff

    monkeypatch.delenv("WICK_CHANNELS_LAST", raising=False)
    monkeypatch.setenv("WICK_LAYOUT_PASS", layout.split("-")[0])
    if layout in ("graph-decompose", "graph-extern"):
        monkeypatch.setenv("WICK_CUDA_NORM_TRAINING", layout.split("-")[1])
    # float32 without TF32: cuDNN's channels-last weight gradients in TF32 are
    # some 3e-2 off the float64 stem's (both routes, 2026-12-04), where
    # eager's NCHW ones are exact; the comparison is of the compiled code
    # (float32 matmuls are full precision by default)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    C.env_reload()
    wick.reset()
    _autodiff.reset_stats()
    torch.manual_seed(6)
    eager = _lc.Net(c=32).cuda().train()
    net, ref = copy.deepcopy(eager), copy.deepcopy(eager).double()
    n0 = len(B.compiled_graphs)
    try:
        f = wick.compile(net)
        for step in range(2):
            x = torch.randn(4, 3, 37, 45, device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
                want, got = eager(x), f(x)
            expect = ref(x.double())
            for y in (want, got, expect):
                (y[0].float().square().sum() + y[1].float().mean()).backward()
            tol = 3e-2 if dtype == torch.bfloat16 else 5e-3
            for r, e, g in zip(expect, want, got):
                assert g.dtype == e.dtype and g.shape == e.shape and g.stride() == e.stride()
                assert _rel(g, r) <= max(2 * _rel(e, r), tol), (step, _rel(g, r), _rel(e, r))
            for (name, a), b, c in zip(net.named_buffers(), eager.buffers(), ref.buffers()):
                if a.dtype.is_floating_point:
                    assert _rel(a, c.double()) <= max(2 * _rel(b, c.double()), 1e-3), (step, name)
                else:
                    assert torch.equal(a, b), name
            for (name, p), q, r in zip(net.named_parameters(), eager.parameters(), ref.parameters()):
                assert _rel(p.grad, r.grad) <= max(2 * _rel(q.grad, r.grad), tol), (step, name)
            for m in (eager, net, ref):
                m.zero_grad()
    finally:
        monkeypatch.undo()
        C.env_reload()
    assert wick.stats()["fallbacks"] == []
    if layout in ("graph-extern", "graph-decompose") or (layout == "graph" and dtype == torch.float32):
        assert _autodiff.stats() == {"graphs": 1, "fallbacks": 0, "reasons": []}
        assert B.compiled_graphs[n0:] == []
    else:
        stats = _autodiff.stats()
        assert stats["graphs"] == 0
        if layout == "graph":
            assert "WICK_CUDA_NORM_TRAINING" in stats["reasons"][0], stats
        assert [i["layout"] for i in B.compiled_graphs[n0:]] == ["channels-last", "channels-last"]
