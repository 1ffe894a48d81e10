"""Channels-last training graphs through torch.compile(backend="wick")
(wick/_layout.py): the forward computes its convolutions channels-last and
leaves the activations it saves so, reporting their strides to AOTAutograd
(TracingContext.output_strides); the backward is compiled for those strides,
its convolution_backward calls and the pointwise work around them in NHWC
order. With WICK_CHANNELS_LAST=1 the CPU graphs take the same path (the C
backend here; the Triton kernels under Triton's interpreter in a child
process): loss, input and parameter gradients, the batch-norm running
statistics and every user-visible stride are compared with eager's."""
import copy
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
from test_channels_last import _bn_random  # a sibling test module, as tests/capture shares its helpers

INTERPRET = os.environ.get("WICK_TRITON") == "interpret"


@pytest.fixture
def channels_last(monkeypatch):
    """WICK_CHANNELS_LAST=1; yields the list of (graph kind, given inputs) of
    every rewrite: given inputs are the backward placeholders whose strides
    differ from the traced ones."""
    monkeypatch.setenv("WICK_CHANNELS_LAST", "1")
    seen = []
    real = _layout.rewrite

    def spy(torch_, gm, kinds, free_outputs=(), given_inputs=None, **kw):
        out = real(torch_, gm, kinds, free_outputs, given_inputs, **kw)
        seen.append({"free": set(free_outputs), "given": dict(given_inputs or {}), "graph": out.graph, **kw})
        return out

    monkeypatch.setattr(_layout, "rewrite", spy)
    C.env_reload()
    torch._dynamo.reset()
    wick.reset()
    yield seen
    monkeypatch.undo()
    C.env_reload()
    torch._dynamo.reset()
    wick.reset()


class TrainNet(nn.Module):
    """conv+batchnorm+relu blocks, max pooling, a residual add, a strided
    conv with bias, a grouped and a depthwise conv, adaptive average pooling
    and a classifier."""

    def __init__(self, c=8):
        super().__init__()
        self.stem, self.bn0 = nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, groups=2, bias=False), nn.BatchNorm2d(c)
        self.down = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.dw, self.b3 = nn.Conv2d(2 * c, 2 * c, 3, padding=1, groups=2 * c), nn.BatchNorm2d(2 * c)
        self.fc = nn.Linear(2 * c, 5)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn0(self.stem(x))), 3, 2, 1)
        y = torch.relu(self.b1(self.c1(x)))
        x = torch.relu(self.b2(self.c2(y)) + x)
        x = torch.relu(self.down(x))
        x = torch.relu(self.b3(self.dw(x))) + x
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def _step(model, x, target):
    out = model(x)
    loss = F.cross_entropy(out if isinstance(out, torch.Tensor) else out[0], target)
    loss.backward()
    return loss, out


def _strides(t):
    """t's strides where they matter (dims of size > 1)."""
    return [s for s, n in zip(t.stride(), t.shape) if n != 1]


def _train_and_compare(model, shape, seed, tol=1e-4, autocast=False, steps=2, fallbacks=0, own_capture=False):
    """Eager and compiled training steps on copies of model: the results,
    gradients and running statistics agree; so many graphs fell back.
    own_capture: wick.compile instead of torch.compile."""
    torch.manual_seed(seed)
    eager = _bn_random(model, seed).train()
    compiled_model = copy.deepcopy(eager)
    compiled = wick.compile(compiled_model) if own_capture else torch.compile(compiled_model, backend="wick")
    n0, f0 = len(B.compiled_graphs), len(B.fallback_reasons)
    for _ in range(steps):
        x = torch.randn(shape)
        target = torch.randint(0, 5, (shape[0],))
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        for m in (eager, compiled_model):
            m.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            want, want_out = _step(eager, xe, target)
            got, got_out = _step(compiled, xc, target)
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
        for g, w in zip(got_out if isinstance(got_out, tuple) else (got_out,),
                        want_out if isinstance(want_out, tuple) else (want_out,)):
            assert g.dtype == w.dtype and g.stride() == w.stride(), (g.stride(), w.stride())
            torch.testing.assert_close(g, w, rtol=tol, atol=tol)
        torch.testing.assert_close(xc.grad, xe.grad, rtol=tol, atol=tol)
        assert _strides(xc.grad) == _strides(xe.grad)
        for (name, pc), pe in zip(compiled_model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(pc.grad, pe.grad, rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")
            assert _strides(pc.grad) == _strides(pe.grad), (name, pc.grad.stride(), pe.grad.stride())
        for (name, bc), be in zip(compiled_model.named_buffers(), eager.buffers()):
            torch.testing.assert_close(bc, be, rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")
    assert len(B.fallback_reasons[f0:]) == fallbacks, B.fallback_reasons[f0:]
    return B.compiled_graphs[n0:]


def _assert_channels_last_training(infos, seen, batch_norm_decomposed=True):
    assert [i["graph"] for i in infos] == ["forward", "backward"], infos
    assert [i["layout"] for i in infos] == ["channels-last"] * 2, [i["layout"] for i in infos]
    # the forward left saved activations channels-last (its reported strides)
    fw = infos[0]
    cl = [s for s in fw["output_strides"] if s is not None and len(s) == 4 and s[1] == 1]
    assert cl, fw["output_strides"]
    # batch norm's statistics reduce NHWC-ordered activations (channels
    # last); under CPU autocast batch norm stays a call into torch
    fw_rewrite, bw_rewrite = seen[-2], seen[-1]
    vm = [n for n in fw_rewrite["graph"].nodes if n.target is torch.ops.aten.var_mean.correction]
    assert bool(vm) == batch_norm_decomposed
    assert all(list(n.args[1]) == [0, 1, 2] and n.args[0].meta["val"].is_contiguous() for n in vm)
    # and the backward was compiled on them
    assert fw_rewrite["free"] and not fw_rewrite["given"]
    given = list(bw_rewrite["given"].values())
    assert given and any(t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and
                         not t.is_contiguous() for t in given), [t.stride() for t in given]
    # with convolution_backward on channels-last grad_output and input
    cbw = [n for n in bw_rewrite["graph"].nodes if n.op == "call_function"
           and n.target is torch.ops.aten.convolution_backward.default]
    assert cbw
    for n in cbw[:-1]:  # the last one's input is the graph's own NCHW input
        for a in n.args[:2]:
            assert a.meta["val"].is_contiguous(memory_format=torch.channels_last), (n, a.meta["val"].stride())


def _shape_id(shape):
    return "x".join(map(str, shape))


@pytest.mark.parametrize("shape", [(1, 3, 11, 9), (3, 3, 13, 15), (2, 3, 16, 16)], ids=_shape_id)
def test_training_matches_eager(channels_last, shape):
    infos = _train_and_compare(TrainNet(), shape, sum(shape))
    _assert_channels_last_training(infos, channels_last)


def test_wick_capture_training_saves_channels_last(channels_last, monkeypatch):
    # wick.compile with WICK_LAYOUT_PASS=fx (the old route: AOTAutograd). wick's
    # own capture has no Dynamo frame: wick's AOTAutograd call makes the
    # tracing context the forward reports its saved activations' strides
    # to, so the backward runs on them channels-last too, as under torch.compile
    monkeypatch.setenv("WICK_LAYOUT_PASS", "fx")
    infos = _train_and_compare(TrainNet(), (2, 3, 12, 10), 4, own_capture=True)
    _assert_channels_last_training(infos, channels_last)


@pytest.mark.parametrize("autocast", [False, True])
def test_wick_capture_training_own_graphs(channels_last, autocast):
    """wick.compile's default: wick's own autodiff on the channels-last
    forward (wick/_graph_layout.py: batch norms as table ops, the
    convolutions and the work around them NHWC), the backward following it
    (wick/_autodiff.py); nothing through AOTAutograd. Gradients with eager's
    strides (checked in _train_and_compare)."""
    from wick import _autodiff

    _autodiff.reset_stats()
    infos = _train_and_compare(TrainNet(), (2, 3, 12, 10), 4, own_capture=True, autocast=autocast,
                               tol=0.05 if autocast else 1e-4)
    assert infos == [] and channels_last == []  # neither AOTAutograd's graphs nor wick/_layout.py
    assert _autodiff.stats() == {"graphs": 1, "fallbacks": 0, "reasons": []}


@pytest.mark.skipif(INTERPRET, reason="bfloat16 through the interpreter: slow")
def test_training_with_bfloat16_autocast(channels_last):
    infos = _train_and_compare(TrainNet(), (2, 3, 12, 12), 5, tol=0.05, autocast=True)
    _assert_channels_last_training(infos, channels_last, batch_norm_decomposed=False)


class FeatureNet(nn.Module):
    """A net returning, besides its logits, a convolution's activation that
    the backward saves too, and a pooled feature map: user-visible outputs
    keep eager's strides while the saved copy may not."""

    def __init__(self, c=6):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c)
        self.c2 = nn.Conv2d(c, c, 1)
        self.fc = nn.Linear(c, 5)

    def forward(self, x):
        a = torch.relu(self.b1(self.c1(x)))
        b = torch.sigmoid(self.c2(a))
        return self.fc(b.mean((2, 3))), a, F.avg_pool2d(b, 2)


@pytest.mark.parametrize("shape", [(1, 3, 7, 9), (3, 3, 10, 6)], ids=_shape_id)
def test_user_visible_outputs_keep_eager_strides(channels_last, shape):
    infos = _train_and_compare(FeatureNet(), shape, 7)
    assert [i["layout"] for i in infos] == ["channels-last"] * 2
    fw = infos[0]
    free = channels_last[-2]["free"]
    user = [k for k in range(len(fw["output_strides"])) if k not in free]
    for k in user:  # nothing reported for them: they have eager's strides
        assert _changed(fw, k) is None, (k, fw["output_strides"][k])


def _changed(info, k):
    s = info["output_strides"][k]
    return s if s is not None and len(s) == 4 and s[1] == 1 and s[-1] != 1 else None


def test_backward_falls_back_to_eager_on_channels_last_inputs(channels_last, monkeypatch):
    # a backward wick cannot compile runs eagerly, on the saved activations
    # as the compiled forward left them (channels-last): still eager's values
    real = B._compile_aten

    def no_backward(gm, example_inputs, which, *args, **kwargs):
        if which == "backward":
            raise B._Unsupported("simulated")
        return real(gm, example_inputs, which, *args, **kwargs)

    monkeypatch.setattr(B, "_compile_aten", no_backward)
    _train_and_compare(TrainNet(), (2, 3, 9, 9), 3, fallbacks=1)
    assert "simulated" in B.fallback_reasons[-1]


def test_forward_falling_back_at_its_first_run_gives_the_reported_strides(channels_last, monkeypatch):
    # the backward was compiled for the strides the forward reported: the
    # forward's eager fallback copies its saved activations into them
    real = B._compile_aten

    def broken_forward(gm, example_inputs, which, *args, **kwargs):
        fn, info = real(gm, example_inputs, which, *args, **kwargs)
        if which != "forward":
            return fn, info

        def run(*a):
            raise RuntimeError("wick: simulated kernel compile failure")

        return run, info

    monkeypatch.setattr(B, "_compile_aten", broken_forward)
    _train_and_compare(TrainNet(), (2, 3, 9, 9), 4, fallbacks=1)
    assert "simulated" in B.fallback_reasons[-1]
    assert [i["layout"] for i in B.compiled_graphs[-2:]] == ["channels-last"] * 2


def test_forward_returning_other_strides_than_reported_is_caught(channels_last, monkeypatch):
    # should a compiled forward return its saved activations with strides
    # other than those the backward was compiled for, its first run finds
    # out: from then on they are copied into those (the reason recorded)
    real = B._compile_aten

    def contiguous_outputs(gm, example_inputs, which, *args, **kwargs):
        fn, info = real(gm, example_inputs, which, *args, **kwargs)
        if which != "forward":
            return fn, info
        return (lambda *a: [t.contiguous() if isinstance(t, torch.Tensor) else t for t in fn(*a)]), info

    monkeypatch.setattr(B, "_compile_aten", contiguous_outputs)
    infos = _train_and_compare(TrainNet(), (2, 3, 9, 9), 8, fallbacks=1)
    assert "other strides than its backward was compiled for" in B.fallback_reasons[-1]
    assert [i["layout"] for i in infos] == ["channels-last"] * 2


@pytest.mark.parametrize("stage", ["layout", "retrace"])
def test_backward_that_cannot_take_the_new_layout(channels_last, monkeypatch, stage):
    # the backward's own pass abandoned (stage "layout"), and even tracing it
    # again on the given strides (stage "retrace"): it is then traced as it
    # was, its inputs first copied back to the traced strides
    real = _layout.rewrite

    def refuse(torch_, gm, kinds, free_outputs=(), given_inputs=None, nhwc_work=True, copy_inputs_back=False):
        if given_inputs and (nhwc_work or (stage == "retrace" and not copy_inputs_back)):
            raise _layout._Abandon("simulated")
        return real(torch_, gm, kinds, free_outputs, given_inputs, nhwc_work=nhwc_work,
                    copy_inputs_back=copy_inputs_back)

    monkeypatch.setattr(_layout, "rewrite", refuse)
    infos = _train_and_compare(TrainNet(), (2, 3, 10, 10), 6)
    assert infos[0]["layout"] == "channels-last"
    note = infos[1]["layout"]
    assert note.startswith("channels-last abandoned: simulated"), note
    assert ("copied to their traced strides" in note) == (stage == "retrace"), note


class FlatNet(nn.Module):
    """A classifier on the flattened feature map: a view no channels-last
    layout allows, so the forward's pass gives up (nothing reported)."""

    def __init__(self):
        super().__init__()
        self.c, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 5 * 5, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.c(x))).flatten(1))


def test_forward_that_gives_up_saves_as_traced(channels_last):
    infos = _train_and_compare(FlatNet(), (2, 3, 7, 7), 9)
    assert infos[0]["layout"].startswith("channels-last abandoned: view"), infos[0]["layout"]
    assert not channels_last[-1]["given"]  # the backward's inputs are as traced
    assert infos[1]["layout"] == "channels-last"


def test_dynamic_shapes_stay_as_traced(channels_last):
    # symbolic graphs are compiled again per shape, as traced: no layout work
    torch._dynamo.reset()
    m = _bn_random(TrainNet(), 2).train()
    f = torch.compile(m, backend="wick", dynamic=True)
    n0, f0 = len(B.compiled_graphs), len(B.fallback_reasons)
    for shape in [(2, 3, 9, 9), (3, 3, 12, 10)]:
        x = torch.randn(shape, requires_grad=True)
        f(x).sum().backward()
        want = x.grad.clone()
        x.grad = None
        m(x).sum().backward()
        torch.testing.assert_close(want, x.grad, rtol=1e-4, atol=1e-4)
    layouts = [i["layout"] for i in B.compiled_graphs[n0:]]
    assert layouts and set(layouts) == {"symbolic shapes"}, layouts
    assert B.fallback_reasons[f0:] == []


def test_off_by_default_on_cpu_training(monkeypatch):
    monkeypatch.delenv("WICK_CHANNELS_LAST", raising=False)
    torch._dynamo.reset()
    n0 = len(B.compiled_graphs)
    m = TrainNet().train()
    x = torch.randn(2, 3, 8, 8)
    torch.compile(m, backend="wick")(x).sum().backward()
    infos = B.compiled_graphs[n0:]
    assert [i["layout"] for i in infos] == ["not a CUDA graph"] * 2
    assert all(s is None or len(s) != 4 or s[1] != 1 for s in infos[0]["output_strides"])
    torch._dynamo.reset()


@pytest.mark.skipif(INTERPRET, reason="inside the interpreter child")
def test_triton_interpreter_child():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", WICK_TRITON="interpret")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "pytest", os.path.abspath(__file__), "-p", "no:warnings",
                        "-p", "no:cacheprovider", "-p", "no:logging", "-k",
                        "test_training_matches_eager and 1x3x11x9 or user_visible and 1x3x7x9 or layout"],
                       env=env, capture_output=True, text=True, cwd=root)
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-4000:]
    assert " passed" in r.stdout and " failed" not in r.stdout, r.stdout[-2000:]


def test_group_norm_extern_reads_its_operands_as_traced(channels_last):
    # a 16-bit group norm stays a call into torch, whose CUDA kernels view
    # their operands as (N, groups, -1): channels-last operands raise there,
    # so the layout pass hands them over with the traced strides
    torch.manual_seed(3)
    m = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1, bias=False), nn.GroupNorm(2, 8), nn.ReLU(),
                      nn.Conv2d(8, 8, 3, padding=1, bias=False)).bfloat16()
    m2 = copy.deepcopy(m)
    x = torch.randn(3, 4, 9, 9).bfloat16()
    want, got = m(x), torch.compile(m2, backend="wick")(x)
    want.float().square().mean().backward()
    got.float().square().mean().backward()
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    for p, p2 in zip(m.parameters(), m2.parameters()):
        torch.testing.assert_close(p2.grad.float(), p.grad.float(), rtol=5e-2, atol=5e-2)
    assert not B.fallback_reasons[-2:], B.fallback_reasons
    gn = [n for seen in channels_last for n in seen["graph"].nodes if n.op == "call_function" and n.target in
          (torch.ops.aten.native_group_norm.default, torch.ops.aten.native_group_norm_backward.default)]
    assert len(gn) == 2, gn
    for n in gn:
        for a in n.all_input_nodes:
            v = a.meta["val"]
            if isinstance(v, torch.Tensor) and v.dim() == 4:
                assert v.is_contiguous(), (n, a, v.stride())
