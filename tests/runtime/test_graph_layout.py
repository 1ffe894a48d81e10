"""Channels-last convolutions on wick's own graphs (wick/_graph_layout.py).

wick.compile's convolutional inference graphs (on CUDA by default; on any
device with WICK_CHANNELS_LAST=1) are rewritten on the captured graph and
compiled natively: eval batch norms become kernels, the pointwise work
around the convolutions runs in NHWC order, views are re-derived for the new
strides, outputs keep eager's strides. Here the rewritten graphs run through
the C backend (and, in a child process, the Triton backend under Triton's
interpreter) and are compared with eager on random inputs."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import wick
import wick._C as C
from wick import _graph_layout as GL
from wick import backends as B

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_channels_last import ConvNeXtBlock, ResSE, _bn_random  # noqa: E402


@pytest.fixture
def rewrites(monkeypatch):
    """WICK_CHANNELS_LAST=1; yields the (source graph, rewritten graph) pairs
    of this test's compiles."""
    monkeypatch.setenv("WICK_CHANNELS_LAST", "1")
    monkeypatch.delenv("WICK_LAYOUT_PASS", raising=False)
    seen = []
    real = GL.apply

    def spy(graph, externs):
        out = real(graph, externs)
        seen.append((graph, out[0], out[1]))
        return out

    monkeypatch.setattr(GL, "apply", spy)
    C.env_reload()
    wick.reset()
    yield seen
    monkeypatch.undo()
    C.env_reload()
    wick.reset()


def _run(model, x, autocast=False):
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        want = model(x)
        f = wick.compile(model)
        got = f(x)
        again = f(x)
    return [w if isinstance(w, tuple) else (w,) for w in (want, got, again)]


def _same(want, got, tol):
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.stride() == w.stride(), (g.stride(), w.stride())
        torch.testing.assert_close(g.float(), w.float(), rtol=tol, atol=tol)


def _convolutions(graph):
    """(input metadata, weight metadata) of each convolution of a graph."""
    return [(graph.value(nd["inputs"][0]), graph.value(nd["inputs"][1])) for nd in graph.nodes()
            if nd["op"] == "EXTERN" and nd["name"] == "aten.convolution.default"]


def _is_cl(m):
    return GL.is_channels_last(m["sizes"], m["strides"]) or \
        GL._same_layout(m["sizes"], m["strides"], GL.channels_last_strides(list(m["sizes"])))


@pytest.mark.parametrize("shape", [(2, 3, 16, 16), (3, 3, 13, 9), (1, 3, 7, 11)])
def test_residual_se_net(rewrites, shape):
    torch.manual_seed(sum(shape))
    m = _bn_random(ResSE().eval(), sum(shape))
    n0 = len(B.compiled_graphs)
    want, got, again = _run(m, torch.randn(shape))
    _same(want, got, 1e-4)
    _same(want, again, 1e-4)
    assert B.compiled_graphs[n0:] == []  # natively compiled: no ATen graph
    assert len(rewrites) == 1
    src, new, _ = rewrites[0]
    names = [nd["name"] for nd in new.nodes() if nd["op"] == "EXTERN"]
    assert not any("batch_norm" in n for n in names), names  # eval batch norms are kernels
    assert any("batch_norm" in (nd["name"] or "") for nd in src.nodes())
    convs = _convolutions(new)
    assert len(convs) == 6
    # the stem reads the graph's NCHW input with a weight copied channels-last
    # (so its output is); every later convolution reads a channels-last input
    assert _is_cl(convs[0][1]) and not _is_cl(convs[0][0])
    for k, (inp, weight) in enumerate(convs[1:]):
        assert _is_cl(inp), (k, inp)


def test_autocast_bfloat16(rewrites):
    m = _bn_random(ResSE().eval(), 3)
    want, got, _ = _run(m, torch.randn(2, 3, 12, 12), autocast=True)
    _same(want, got, 0.05)
    # autocast's weight conversions are computed in NHWC order: no separate copy
    src, new, _ = rewrites[0]
    converts = sum(nd["op"] == "CONVERT" for nd in new.nodes())
    assert converts <= sum(nd["op"] == "CONVERT" for nd in src.nodes()) + 8, new.print()
    for inp, weight in _convolutions(new):
        assert _is_cl(weight)  # autocast's conversions write them channels-last
    for inp, weight in _convolutions(new)[1:]:
        assert _is_cl(inp)


def test_conv_output_is_graph_output_and_views(rewrites):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(4, 6, 3, padding=1)
            self.b = nn.Conv2d(6, 6, 1)
            self.norm = nn.LayerNorm(6)

        def forward(self, x):
            y = self.a(torch.relu(x))
            z = self.b(y * 2)
            t = z.flatten(2).transpose(1, 2)  # a ViT patch embedding's views: read a traced copy
            return z, self.norm(t), y.sum(0), y.mean(1, keepdim=True), y.amax((1, 2)), y[:, 1:3, ::2]

    torch.manual_seed(1)
    want, got, again = _run(M().eval(), torch.randn(2, 4, 5, 7))
    _same(want, got, 1e-4)
    _same(want, again, 1e-4)
    assert len(rewrites) == 1


@pytest.mark.parametrize("shape", [(2, 3, 32, 32), (3, 3, 20, 28)])
def test_convnext_block_permutes_are_free(rewrites, shape):
    torch.manual_seed(shape[0])
    want, got, _ = _run(ConvNeXtBlock().eval(), torch.randn(shape))
    _same(want, got, 1e-4)
    src, new, _ = rewrites[0]
    nodes = new.nodes()
    made = {o: nd for nd in nodes for o in nd["outputs"]}
    norm = next(nd for nd in nodes if nd["op"] == "LAYER_NORM")
    # the layer norm reads the depthwise convolution's channels-last output
    # through a view that is contiguous in NHWC order: no copy between them
    x = made[norm["inputs"][0]]
    assert x["op"] == "VIEW" and made[x["inputs"][0]]["name"] == "aten.convolution.default"
    m = new.value(norm["inputs"][0])
    assert list(m["strides"]) == GL.dense_strides(list(m["sizes"]), range(4))


class LayerNorm2d(nn.LayerNorm):
    """timm's: the norm over channels through permutes, so eager's
    activations are channels-last from here on."""

    def forward(self, x):
        return F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias,
                            self.eps).permute(0, 3, 1, 2)


class ConvMlpNet(nn.Module):
    """ConvNeXt-atto's shape: a stem, then blocks of a depthwise conv, a
    LayerNorm2d and an MLP of 1x1 convolutions."""

    def __init__(self, c=8):
        super().__init__()
        self.stem, self.norm0 = nn.Conv2d(3, c, 4, stride=4), LayerNorm2d(c)
        self.dw, self.norm = nn.Conv2d(c, c, 7, padding=3, groups=c), LayerNorm2d(c)
        self.fc1, self.fc2 = nn.Conv2d(c, 4 * c, 1), nn.Conv2d(4 * c, c, 1)
        self.gamma = nn.Parameter(torch.rand(c) + 0.5)

    def forward(self, x):
        x = self.norm0(self.stem(x))
        for _ in range(2):
            y = self.fc2(F.gelu(self.fc1(self.norm(self.dw(x)))))
            x = y * self.gamma.reshape(1, -1, 1, 1) + x
        return F.adaptive_avg_pool2d(x, 1).flatten(1)


def test_eager_channels_last_activations_need_no_copies(rewrites):
    # eager's own activations are channels-last after the stem's permutes:
    # capture gives the convolutions those strides with copies after each
    # pointwise kernel (which writes contiguously); here the pointwise work
    # runs in NHWC order instead and the copies go
    torch.manual_seed(3)
    want, got, _ = _run(ConvMlpNet().eval(), torch.randn(2, 3, 24, 20))
    _same(want, got, 1e-4)
    src, new, _ = rewrites[0]
    copies = [nd for nd in src.nodes() if nd["op"] == "CONVERT"]
    assert len(copies) >= 4, src.print()
    # one copy left: the stem's weight, written channels-last (its input is NCHW)
    assert len([nd for nd in new.nodes() if nd["op"] == "CONVERT"]) == 1, new.print()
    # the global average pool is a reduction, not a call
    assert not any("adaptive_avg_pool2d" in (nd["name"] or "") for nd in new.nodes())


class StdConv(nn.Conv2d):
    """timm's StdConv2d: the weight standardised by a batch norm each call,
    so a kernel of the graph produces it."""

    def forward(self, x):
        w = F.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None, training=True, momentum=0.0,
                         eps=1e-6).reshape_as(self.weight)
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


class OddConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = StdConv(3, 8, 3, padding=1)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.g = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=4)
        self.r = nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect")
        self.one = nn.Conv2d(8, 1, 1)
        self.ps = nn.Conv2d(8, 16, 1)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        y = F.relu(self.bn(self.a(x)))
        u = self.up(y)
        z = self.r(self.g(y)) + y
        c = torch.cat([z, y * 2], 1)  # DenseNet's channel concatenation
        up = F.interpolate(z, scale_factor=2, mode="nearest")
        p = F.pixel_shuffle(self.ps(z), 2)
        return u, c.mean((2, 3)), up + u.sum(1, keepdim=True), p, torch.sigmoid(self.one(z)), \
            z.transpose(1, 3).contiguous()


@pytest.mark.parametrize("shape", [(2, 3, 10, 12), (1, 3, 7, 5)])
def test_transposed_grouped_reflect_cat_upsample_shuffle(rewrites, shape):
    m = _bn_random(OddConvs().eval(), 8)
    want, got, again = _run(m, torch.randn(shape))
    _same(want, got, 1e-4)
    _same(want, again, 1e-4)
    assert len(rewrites) == 1 and wick.stats()["breaks"] == 0


def test_empty_batch(rewrites):
    m = _bn_random(ResSE().eval(), 5)
    want, got, _ = _run(m, torch.randn(0, 3, 8, 8))
    _same(want, got, 1e-4)


def test_channels_last_input_and_double(rewrites):
    torch.manual_seed(2)
    m = _bn_random(ResSE().eval(), 7).double()
    x = torch.randn(2, 3, 10, 10, dtype=torch.float64).to(memory_format=torch.channels_last)
    want, got, _ = _run(m, x)
    _same(want, got, 1e-10)


def test_batch_norm_forms(rewrites):
    # no affine parameters, a 1-d batch norm after pooling, a conv output that
    # is also returned before the norm reads it
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 6, 3)
            self.bn = nn.BatchNorm2d(6, affine=False)
            self.bn1 = nn.BatchNorm1d(6)

        def forward(self, x):
            y = self.conv(x)
            z = F.silu(self.bn(y))
            return self.bn1(z.mean((2, 3))), y, z

    m = M().eval()
    m.bn.running_mean.normal_()
    m.bn.running_var.uniform_(0.5, 2)
    m.bn1.running_mean.normal_()
    m.bn1.running_var.uniform_(0.5, 2)
    want, got, _ = _run(m, torch.randn(4, 3, 9, 9))
    _same(want, got, 1e-4)
    names = [nd["name"] for nd in rewrites[0][1].nodes() if nd["op"] == "EXTERN"]
    assert names == ["aten.convolution.default"], names


def test_training_mode_batch_norm_stays_a_call(rewrites):
    # train-mode batch norm under no_grad updates its running statistics:
    # it stays torch's call, and the statistics end as eager's
    m = _bn_random(ResSE(), 13)
    ref = _bn_random(ResSE(), 13)
    ref.load_state_dict(m.state_dict())
    x = torch.randn(3, 3, 10, 10)
    with torch.no_grad():
        want = ref(x)
        got = wick.compile(m)(x)
    _same(want, got, 1e-4)
    for a, b in zip(m.buffers(), ref.buffers()):
        torch.testing.assert_close(a, b)


def test_fx_knob_and_abandon_take_the_aten_path(rewrites, monkeypatch):
    m = _bn_random(ResSE().eval(), 4)
    x = torch.randn(2, 3, 9, 9)
    monkeypatch.setenv("WICK_LAYOUT_PASS", "fx")
    C.env_reload()
    n0 = len(B.compiled_graphs)
    want, got, _ = _run(m, x)
    _same(want, got, 1e-4)
    assert [i["layout"] for i in B.compiled_graphs[n0:]] == ["channels-last"] and not rewrites
    monkeypatch.setenv("WICK_LAYOUT_PASS", "graph")
    C.env_reload()
    wick.reset()

    def refuse(graph, externs):
        raise GL.Abandon("refused for the test")

    monkeypatch.setattr(GL, "channels_last", refuse)
    n0 = len(B.compiled_graphs)
    want, got, _ = _run(m, x)
    _same(want, got, 1e-4)
    assert [i["layout"] for i in B.compiled_graphs[n0:]] == ["channels-last"]


def test_graph_replay_and_inputs_only_copy():
    g = C.Graph()
    x = g.input("float32", [2, 3, 4], [12, 4, 1])
    s = g.op("SUM", [g.op("EXP", [x])], dims=[1], keepdim=True)
    v = g.op("VAR", [x], dims=[2], correction=0.0)
    g.output(s)
    g.output(v)
    c, vmap = g.copy(inputs_only=True)
    assert vmap[x] == 0 and all(k == -1 for k in vmap[1:])
    nodes = g.nodes()
    e = c.replay(g, 0, [0])
    s2 = c.replay(g, 1, [e], dims=[2])  # the reduction over another dim
    v2 = c.replay(g, 2, [0])  # var's correction travels with the node
    c.output(s2)
    c.output(v2)
    assert c.value(s2)["sizes"] == (2, 3, 1)
    assert nodes[2]["correction_given"]
    a = torch.randn(2, 3, 4)
    got = c.compile()(a)
    torch.testing.assert_close(got[0], a.exp().sum(2, keepdim=True))
    torch.testing.assert_close(got[1], a.var(2, correction=0))
    ge = C.Graph()
    y = ge.input("float32", [2, 2], [2, 1])
    ge.extern(0, [y], [{"dtype": "float32", "sizes": [2, 2], "strides": [2, 1]}], name="f")
    with pytest.raises(ValueError, match="extern"):
        C.Graph().replay(ge, 0, [])
    with pytest.raises(ValueError, match="no node"):
        c.replay(g, 7, [0])
    with pytest.raises(TypeError):
        g.copy(extra={0: []}, inputs_only=True)


@pytest.mark.skipif(os.environ.get("WICK_TRITON") == "interpret", reason="inside the interpreter child")
def test_triton_interpreter_child():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", WICK_TRITON="interpret")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "pytest", os.path.abspath(__file__), "-p", "no:warnings",
                        "-p", "no:cacheprovider", "-p", "no:logging", "-k", "not replay"], env=env,
                       capture_output=True, text=True, cwd=root)
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-4000:]
    assert " passed" in r.stdout and " failed" not in r.stdout, r.stdout[-2000:]
