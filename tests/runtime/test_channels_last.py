"""Channels-last convolutions in the torch.compile path (wick/_layout.py).

The pass runs by default on CUDA inference graphs; WICK_CHANNELS_LAST=1 turns
it on for CPU graphs too, where PyTorch's CPU convolution also answers a
channels-last input with a channels-last output: so the rewritten graphs
(NHWC-ordered pointwise kernels and reductions, permuted views handed to
convolutions and pooling, outputs copied back to eager's strides) run here
through the C backend and are compared with eager on random inputs; the
same module runs again in a child process on the Triton backend under
Triton's interpreter (the kernels the GPU compiles)."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import wick  # noqa: F401
import wick._C as C
from wick import _layout
from wick import backends as B


@pytest.fixture
def channels_last(monkeypatch):
    monkeypatch.setenv("WICK_CHANNELS_LAST", "1")
    seen = []
    real = _layout.rewrite

    def spy(*args):
        gm = real(*args)
        seen.append(gm)
        return gm

    monkeypatch.setattr(_layout, "rewrite", spy)
    C.env_reload()  # wick's capture reads the knob in C
    torch._dynamo.reset()
    wick.reset()
    yield seen
    monkeypatch.undo()
    C.env_reload()
    torch._dynamo.reset()
    wick.reset()


def _bn_random(m, seed):
    g = torch.Generator().manual_seed(seed)
    for b in m.modules():
        if isinstance(b, nn.BatchNorm2d):
            b.running_mean.copy_(torch.randn(b.num_features, generator=g) * 0.5)
            b.running_var.copy_(torch.rand(b.num_features, generator=g) + 0.5)
            b.weight.data.copy_(torch.randn(b.num_features, generator=g) * 0.2 + 1)
            b.bias.data.copy_(torch.randn(b.num_features, generator=g) * 0.2)
    return m


class ResSE(nn.Module):
    """Stem, pooling, a residual block, a depthwise conv with squeeze-excite,
    global pooling and a classifier: the shapes of ResNet and MobileNet."""

    def __init__(self, c=8):
        super().__init__()
        self.stem, self.bn0 = nn.Conv2d(3, c, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 1), nn.BatchNorm2d(c)
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.se1, self.se2 = nn.Conv2d(c, 4, 1), nn.Conv2d(4, c, 1)
        self.fc = nn.Linear(c, 5)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn0(self.stem(x))), 3, 2, 1)
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.relu(self.b2(self.c2(y)) + x)
        z = F.hardswish(self.dw(y))
        s = torch.sigmoid(self.se2(torch.relu(self.se1(z.mean((2, 3), keepdim=True)))))
        z = z * s
        return self.fc(z.mean((2, 3))), z


def _check(model, x, seen, rtol=1e-4, atol=1e-4):
    with torch.no_grad():
        want = model(x)
        got = torch.compile(model, backend="wick")(x)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol)
        assert g.stride() == w.stride(), (g.stride(), w.stride())
    assert not B.fallback_reasons or "channels" not in B.fallback_reasons[-1]
    return B.compiled_graphs[-1]


def _conv_inputs(gm):
    aten = torch.ops.aten
    return [(n.args[0].meta["val"], n.args[1].meta["val"]) for n in gm.graph.nodes
            if n.op == "call_function" and n.target is aten.convolution.default]


@pytest.mark.parametrize("shape", [(2, 3, 16, 16), (3, 3, 13, 9), (1, 3, 7, 11)])
def test_residual_se_net(channels_last, shape):
    torch.manual_seed(sum(shape))
    m = _bn_random(ResSE().eval(), sum(shape))
    x = torch.randn(shape)
    info = _check(m, x, channels_last)
    assert info["layout"] == "channels-last"
    convs = _conv_inputs(channels_last[-1])
    assert len(convs) == 6
    # every weight is channels-last (parameters copied in NHWC order), so
    # is every activation after the stem (whose input is the graph's own
    # NCHW input)
    for k, (inp, weight) in enumerate(convs):
        assert weight.is_contiguous(memory_format=torch.channels_last), weight.stride()
        if k:
            assert inp.is_contiguous(memory_format=torch.channels_last), inp.stride()
    # the kernels between them work in NHWC order: some NHWC-ordered value is
    # computed natively (a contiguous 4-d value whose dim 3 holds the channels)
    perms = [n for n in channels_last[-1].graph.nodes if n.op == "call_function"
             and n.target is torch.ops.aten.permute.default and list(n.args[1]) == _layout.TO_NHWC]
    assert perms


def test_autocast_weights_converted_in_nhwc_order(channels_last):
    # bf16 autocast: the weight conversion feeding each convolution is a
    # kernel that writes the weight channels-last
    m = _bn_random(ResSE().eval(), 3)
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = m(x)
        got = torch.compile(m, backend="wick")(x)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.stride() == w.stride()
        torch.testing.assert_close(g.float(), w.float(), rtol=0.05, atol=0.05)
    assert B.compiled_graphs[-1]["layout"] == "channels-last"
    for _, weight in _conv_inputs(channels_last[-1]):
        assert weight.is_contiguous(memory_format=torch.channels_last), weight.stride()


def test_conv_output_is_graph_output_and_views(channels_last):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(4, 6, 3, padding=1)
            self.b = nn.Conv2d(6, 6, 1)
            self.norm = nn.LayerNorm(6)

        def forward(self, x):
            y = self.a(torch.relu(x))           # relu: computed in NHWC order
            z = self.b(y * 2)                   # conv output returned as is: copied back to NCHW
            t = z.flatten(2).transpose(1, 2)    # a ViT patch embedding's views
            return z, self.norm(t), y.sum(0), y.mean(1, keepdim=True), y.amax((1, 2))

    torch.manual_seed(1)
    m = M().eval()
    x = torch.randn(2, 4, 5, 7)
    info = _check(m, x, channels_last)
    assert info["layout"] == "channels-last"


class ConvNeXtBlock(nn.Module):
    """timm's ConvNeXt block: depthwise 7x7, then NHWC by permute, LayerNorm,
    an MLP of Linear layers, a layer scale, NCHW again and the shortcut."""

    def __init__(self, c=8):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 4, stride=4)
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.rand(c))

    def forward(self, x):
        x = self.stem(x)
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.norm(y)))) * self.gamma
        x = y.permute(0, 3, 1, 2) + x
        return x.mean((2, 3)), x


@pytest.mark.parametrize("shape", [(2, 3, 32, 32), (3, 3, 20, 28)])
def test_convnext_block(channels_last, shape):
    torch.manual_seed(shape[0])
    info = _check(ConvNeXtBlock().eval(), torch.randn(shape), channels_last)
    assert info["layout"] == "channels-last"


def test_empty_batch(channels_last):
    m = _bn_random(ResSE().eval(), 5)
    _check(m, torch.randn(0, 3, 8, 8), channels_last)


def test_channels_last_input_and_double(channels_last):
    torch.manual_seed(2)
    m = _bn_random(ResSE().eval(), 7).double()
    x = torch.randn(2, 3, 10, 10, dtype=torch.float64).to(memory_format=torch.channels_last)
    _check(m, x, channels_last, rtol=1e-10, atol=1e-10)


def test_off_by_default_on_cpu(monkeypatch):
    monkeypatch.delenv("WICK_CHANNELS_LAST", raising=False)
    torch._dynamo.reset()
    m = _bn_random(ResSE().eval(), 1)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.compile(m, backend="wick")(x)
    assert B.compiled_graphs[-1]["layout"] == "not a CUDA graph"
    monkeypatch.setenv("WICK_CHANNELS_LAST", "1")
    torch._dynamo.reset()
    conv = nn.Conv2d(3, 4, 3)
    x = torch.randn(2, 3, 8, 8)
    n0 = len(B.compiled_graphs)
    out = torch.compile(lambda a: torch.relu(conv(a * 2)), backend="wick")(x)
    out.sum().backward()
    assert [i["layout"] for i in B.compiled_graphs[n0:]] == ["channels-last"] * 2  # training too
    assert conv.weight.grad is not None
    monkeypatch.setenv("WICK_CHANNELS_LAST", "0")
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(m, backend="wick")(x)
    assert B.compiled_graphs[-1]["layout"] == "WICK_CHANNELS_LAST=0"
    torch._dynamo.reset()


def test_stride_dependent_graph_is_left_alone(channels_last):
    conv = nn.Conv2d(3, 4, 3)

    def f(a):
        y = torch.relu(conv(a + 1))
        return torch.as_strided(y, (2, 4), (1, 2))

    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        want = f(x)
        got = torch.compile(f, backend="wick")(x)
    torch.testing.assert_close(got, want)
    assert B.compiled_graphs[-1]["layout"].startswith("channels-last abandoned")


@pytest.mark.skipif(os.environ.get("WICK_TRITON") == "interpret", reason="inside the interpreter child")
def test_triton_interpreter_child():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", WICK_TRITON="interpret")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "pytest", os.path.abspath(__file__), "-p", "no:warnings",
                        "-p", "no:cacheprovider", "-p", "no:logging"], env=env, capture_output=True, text=True,
                       cwd=root)
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-4000:]
    assert " passed" in r.stdout and " failed" not in r.stdout, r.stdout[-2000:]


@pytest.mark.parametrize("autocast", [False, True])
def test_wick_capture_goes_through_the_layout_pass(channels_last, autocast, monkeypatch):
    # wick's own capture with WICK_LAYOUT_PASS=fx: a graph with convolutions
    # (on CUDA by default; here through WICK_CHANNELS_LAST=1) is compiled
    # through AOTAutograd and the ATen importer, so this layout pass and batch
    # norm's decomposition apply (by default the graph's own pass does:
    # tests/runtime/test_graph_layout.py)
    monkeypatch.setenv("WICK_LAYOUT_PASS", "fx")
    C.env_reload()
    m = _bn_random(ResSE().eval(), 11)
    x = torch.randn(2, 3, 14, 14)
    n0 = len(B.compiled_graphs)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        want = m(x)
        f = wick.compile(m)
        got = f(x)
        got = f(x)
    tol = 0.05 if autocast else 1e-4
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.stride() == w.stride()
        torch.testing.assert_close(g.float(), w.float(), rtol=tol, atol=tol)
    assert [i["layout"] for i in B.compiled_graphs[n0:]] == ["channels-last"]
    assert len(channels_last) == 1


def test_wick_capture_native_without_the_knob(monkeypatch):
    monkeypatch.delenv("WICK_CHANNELS_LAST", raising=False)
    C.env_reload()
    wick.reset()
    m = _bn_random(ResSE().eval(), 12)
    x = torch.randn(2, 3, 10, 10)
    n0 = len(B.compiled_graphs)
    with torch.no_grad():
        want = m(x)
        got = wick.compile(m)(x)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert B.compiled_graphs[n0:] == []  # wick's native path: no ATen graph


def test_first_run_error_runs_the_graph_eagerly(monkeypatch):
    # an error in a compiled graph's first run (a kernel the device's compiler
    # refuses, say) gives eager's result with the reason recorded; an error
    # eager raises as well stays eager's
    real = B._compile_aten

    def broken(*args, **kwargs):
        fn, info = real(*args, **kwargs)

        def run(*a):
            raise RuntimeError("wick: simulated kernel compile failure")

        return run, info

    monkeypatch.setattr(B, "_compile_aten", broken)
    torch._dynamo.reset()
    n0 = len(B.fallback_reasons)

    def f(x):
        return torch.relu(x) * 2 + x.sum()

    x = torch.randn(5, 7)
    torch.testing.assert_close(torch.compile(f, backend="wick")(x), f(x))
    assert any("first run" in r and "simulated" in r for r in B.fallback_reasons[n0:]), B.fallback_reasons[n0:]

    torch._dynamo.reset()

    def g(x, i):
        return torch.gather(x, 0, i) + 1

    with pytest.raises(RuntimeError, match="out of bounds|out of range"):
        torch.compile(g, backend="wick")(torch.randn(3, 4), torch.tensor([[0, 10, 1, 2]]))
    torch._dynamo.reset()
