"""Training batch norm through wick's own autodiff (wick/_autodiff.py): the
captured F.batch_norm call (capture's Functional wrapper, which updates
clones of the running statistics the frame copies back) becomes table ops
(_graph_layout.decompose_batch_norms: the batch's mean and biased variance,
the normalisation, the momentum update with the unbiased variance), which
the autodiff differentiates like any others; the updated statistics are
outputs without a gradient. No AOTAutograd, no batch norm kernel of
PyTorch's. Each case runs steps of SGD on a compiled module and its eager
twin, comparing outputs, running statistics, gradients and parameters
after every step."""
import copy

import pytest
import torch

import wick
from tests.runtime.test_batch_norm_stats_in_place import SharedNorm, conv_bn_relu, rand
from wick import _autodiff, backends


def fresh():
    wick.reset()
    _autodiff.reset_stats()
    backends.fallback_reasons.clear()
    backends.compiled_graphs.clear()


def close(got, want, ref, what, scale=1.0):
    """got (compiled) no further from the float64 reference than eager's
    result want is, give or take a few units in the last place of scale or
    of the reference: the decomposition's float32 statistics and reductions
    round differently from eager's batch norm kernel, so neither is the
    exact one. (A convolution's bias before a batch norm has a gradient of
    zero, rounding noise the size of the step's other gradients: scale.)"""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if not got.dtype.is_floating_point:  # num_batches_tracked
        assert torch.equal(got, want), what
        return
    ref = ref.double()
    scale = max(scale, ref.abs().max().item()) if ref.numel() else scale
    floor = 8 * torch.finfo(got.dtype).eps * scale
    err_got = (got.double() - ref).abs().max().item() if ref.numel() else 0.0
    err_want = (want.double() - ref).abs().max().item() if ref.numel() else 0.0
    assert err_got <= 2 * err_want + floor, f"{what}: error {err_got:.3g}, eager's {err_want:.3g} (floor {floor:.3g})"


def steps(eager, net, fn, dtype, shapes, autocast=False, n=3, seed=10, channels_last=False):
    """n steps of SGD on eager; before each, the compiled module and a
    float64 reference take eager's parameters and statistics, so each step
    compares one forward and backward (an error does not compound)."""
    ref = copy.deepcopy(eager).double()
    opt = torch.optim.SGD(eager.parameters(), lr=0.05)
    for step in range(n):
        with torch.no_grad():
            for a, b, c in zip(eager.state_dict().values(), net.state_dict().values(), ref.state_dict().values()):
                b.copy_(a)
                c.copy_(a)
        x = rand(shapes[step % len(shapes)], dtype, seed + step)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            want, got = eager(x), fn(x)
        expect = ref(x.double())
        close(got, want, expect, f"step {step}: output")
        for (name, a), b, c in zip(net.named_buffers(), eager.buffers(), ref.buffers(), strict=True):
            close(a, b, c, f"step {step}: {name}")
        for y in (want, got, expect):
            y.float().square().sum().backward()
        scale = max(r.grad.abs().max().item() for r in ref.parameters())
        for (name, p), q, r in zip(net.named_parameters(), eager.parameters(), ref.parameters(), strict=True):
            close(p.grad, q.grad, r.grad, f"step {step}: {name}.grad", scale)
        opt.step()
        for m in (eager, net, ref):
            m.zero_grad()


def own_graphs_only(graphs=1):
    """Every training graph took wick's autodiff, none AOTAutograd."""
    s = _autodiff.stats()
    assert s["fallbacks"] == 0 and s["graphs"] == graphs, s
    assert backends.compiled_graphs == [], backends.compiled_graphs
    assert not backends.fallback_reasons, backends.fallback_reasons


@pytest.mark.parametrize("case", ["float32", "bfloat16", "autocast"])
def test_training_steps_match_eager(case):
    dtype = torch.bfloat16 if case == "bfloat16" else torch.float32
    eager = conv_bn_relu(dtype, channels=(3, 6, 5, 4))
    net = copy.deepcopy(eager)
    fresh()
    steps(eager, net, wick.compile(net), dtype, ((4, 3, 11, 11), (2, 3, 9, 13)), autocast=case == "autocast")
    own_graphs_only(graphs=2)  # a graph per input shape


def batch_norm_calls(fn, x):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn(x).float().sum().backward()
    return sorted({e.name for e in prof.events() if "batch_norm" in e.name})


def test_step_calls_no_batch_norm_kernel():
    eager = conv_bn_relu(torch.float32)
    net = copy.deepcopy(eager)
    fresh()
    fn = wick.compile(net)
    x = rand((4, 3, 9, 9), torch.float32, 3)
    for _ in range(2):
        fn(x).sum().backward()
    assert batch_norm_calls(fn, x) == []
    assert batch_norm_calls(eager, x) != []  # the profile does see them where they run
    own_graphs_only()


class Norm1d(torch.nn.Module):
    """BatchNorm1d over [N, C, L], momentum 0.3, between two linear maps."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 8)
        self.norm = torch.nn.BatchNorm1d(5, momentum=0.3)
        self.b = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.norm(self.a(x))))


def variant(kind):
    torch.manual_seed(0)
    if kind == "shared":
        return SharedNorm(), (4, 3, 8, 8)
    if kind == "batchnorm1d_2d":
        return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.ReLU()), (7, 6)
    if kind == "batchnorm1d_3d":
        return Norm1d(), (4, 5, 6)
    if kind == "plain_affine":  # no bias before the norm
        return torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3, bias=False), torch.nn.BatchNorm2d(5),
                                   torch.nn.ReLU()), (4, 3, 8, 8)
    norm = torch.nn.BatchNorm2d(5, affine=kind != "no_affine", track_running_stats=kind != "no_running_stats")
    return torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3), norm, torch.nn.ReLU()), (4, 3, 8, 8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["no_affine", "no_running_stats", "batchnorm1d_2d", "batchnorm1d_3d", "shared",
                                  "channels_last"])
def test_module_variants(kind, dtype):
    eager, shape = variant(kind)
    eager = eager.to(dtype)
    net = copy.deepcopy(eager)
    fresh()
    steps(eager, net, wick.compile(net), dtype, (shape,), channels_last=kind == "channels_last")
    own_graphs_only()


def test_two_batches_of_one_row_each_refused_as_eager():
    """One value per channel: eager raises, and so does the compiled call."""
    eager, _ = variant("batchnorm1d_2d")
    net = copy.deepcopy(eager)
    fresh()
    fn = wick.compile(net)
    x = rand((1, 6), torch.float32, 1)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        eager(x)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        fn(x)


def test_momentum_none_cumulative_average():
    eager = conv_bn_relu(torch.float32, momentum=None)
    net = copy.deepcopy(eager)
    fresh()
    steps(eager, net, wick.compile(net), torch.float32, ((4, 3, 9, 9),))
    s = _autodiff.stats()
    assert s["graphs"] + s["fallbacks"] >= 1, s


def test_eval_then_train_again():
    """eval() between training steps: the eval graph normalises with the
    running statistics and leaves them alone; training resumes updating."""
    eager = conv_bn_relu(torch.float32)
    net = copy.deepcopy(eager)
    fresh()
    fn = wick.compile(net)
    steps(eager, net, fn, torch.float32, ((4, 3, 9, 9),), n=2)
    net.load_state_dict(eager.state_dict())  # (the last step's SGD update)
    for m in (eager, net):
        m.eval()
    x = rand((4, 3, 9, 9), torch.float32, 40)
    ref = copy.deepcopy(eager).double()
    close(fn(x), eager(x), ref(x.double()), "eval output")
    for m in (eager, net):
        m.train()
    steps(eager, net, fn, torch.float32, ((4, 3, 9, 9),), n=2, seed=50)


class WritesGradValue(torch.nn.Module):
    """A buffer written in place with a value that needs a gradient: eager
    makes the buffer part of the autograd graph; wick's autodiff leaves such
    a graph to AOTAutograd."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("last", torch.zeros(4))

    def forward(self, x):
        y = self.lin(x)
        self.last.copy_(y[0])
        return y * 2


def test_write_of_a_value_needing_a_gradient_keeps_eager_semantics():
    torch.manual_seed(0)
    eager = WritesGradValue()
    net = copy.deepcopy(eager)
    fresh()
    fn = wick.compile(net)
    x = rand((3, 4), torch.float32, 5)
    want, got = eager(x), fn(x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(net.last, eager.last)
    assert net.last.requires_grad and eager.last.requires_grad


@pytest.mark.parametrize("channels_last", ["0", "1"])
def test_backward_has_two_reductions_per_norm(monkeypatch, record_results, channels_last):
    """The norm's backward reduces twice per channel (the sums of g and of g
    times the normalised input, also the bias's and weight's gradients),
    as eager's kernel; op by op the decomposition would reduce four times.
    NCHW, and NHWC-ordered after the channels-last pass (WICK_CHANNELS_LAST=1)."""
    import wick._C as C

    monkeypatch.setenv("WICK_CHANNELS_LAST", channels_last)
    C.env_reload()
    plans = record_results(_autodiff, "compile_training", "plan")
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, bias=False), torch.nn.BatchNorm2d(6), torch.nn.ReLU(),
                                torch.nn.Conv2d(6, 4, 3, bias=False))
    net = copy.deepcopy(eager)
    fresh()
    try:
        steps(eager, net, wick.compile(net), torch.float32, ((3, 3, 9, 10),), n=2)
    finally:
        monkeypatch.undo()
        C.env_reload()
    own_graphs_only()
    (plan,) = plans
    reductions = [nd for nd in plan.bwd.nodes() if nd["op"] in ("SUM", "MEAN")]
    assert len(reductions) == 2, [(nd["op"], nd["dims"]) for nd in reductions]
    assert all(sorted(nd["dims"]) == ([0, 2, 3] if channels_last == "0" else [0, 1, 2]) for nd in reductions)


@pytest.mark.parametrize("knob", [None, "extern", "aot", "decompose"])
def test_16bit_norms_on_cuda_stay_calls_unless_decomposed(monkeypatch, knob):
    """16-bit training batch norm on CUDA: by default
    (WICK_CUDA_NORM_TRAINING=aot) such a graph goes to AOTAutograd, which
    keeps cuDNN's calls, with the reason recorded; extern: wick's own graphs
    with calls of eager's kernels (_autodiff._batch_norm_rule); decompose:
    table ops. Run on the CPU with the CPU counted as CUDA here; float32
    norms are decomposed either way."""
    if knob:
        monkeypatch.setenv("WICK_CUDA_NORM_TRAINING", knob)
    else:
        monkeypatch.delenv("WICK_CUDA_NORM_TRAINING", raising=False)
    monkeypatch.setattr(_autodiff, "_CUDA_NORM_DEVICES", ("cuda", "cpu"))
    for dtype in (torch.bfloat16, torch.float32):
        eager = conv_bn_relu(dtype)
        net = copy.deepcopy(eager)
        fresh()
        steps(eager, net, wick.compile(net), dtype, ((4, 3, 9, 9),), n=2)
        s = _autodiff.stats()
        if knob in (None, "aot") and dtype == torch.bfloat16:
            assert s["graphs"] == 0 and s["fallbacks"] == 1, s
            assert "WICK_CUDA_NORM_TRAINING" in s["reasons"][0], s
            assert [g["graph"] for g in backends.compiled_graphs] == ["forward", "backward"]
        else:
            own_graphs_only()


def extern_names(entries):
    names = [e[0].__name__ if hasattr(e[0], "__code__") else str(e[0]) for e in entries]
    return sorted(n for n in names if "batch_norm" in n)


@pytest.mark.parametrize("channels_last", ["0", "1"])
@pytest.mark.parametrize("case", ["bfloat16", "autocast"])
@pytest.mark.parametrize("kind", ["plain", "no_affine", "no_running_stats", "batchnorm1d_2d", "batchnorm1d_3d",
                                  "channels_last"])
def test_16bit_norm_calls_in_own_graphs(monkeypatch, record_results, kind, case, channels_last):
    """The calls kept (WICK_CUDA_NORM_TRAINING=extern, the CPU counted as
    CUDA): a norm with a weight and running statistics calls
    _batch_norm_with_update, which updates the buffers in place (the frame
    copies nothing back) and returns the batch's mean, 1/std and reserve
    for batch_norm_backward; the others _native_batch_norm_legit_functional
    (or its no_stats overload) and native_batch_norm_backward. Outputs,
    running statistics and gradients as eager's, with and without the
    channels-last pass."""
    import wick._C as C

    monkeypatch.setenv("WICK_CHANNELS_LAST", channels_last)
    monkeypatch.setenv("WICK_CUDA_NORM_TRAINING", "extern")
    monkeypatch.setattr(_autodiff, "_CUDA_NORM_DEVICES", ("cuda", "cpu"))
    C.env_reload()
    plans = record_results(_autodiff, "compile_training", "plan")
    if kind == "plain":
        # convolutions without a bias, as before resnet's norms (a bias's
        # gradient there is zero: rounding noise of 16-bit kernels, whose
        # order differs with the channels-last pass)
        torch.manual_seed(0)
        eager = torch.nn.Sequential(*[layer for cin, cout in ((3, 6), (6, 5), (5, 4))
                                      for layer in (torch.nn.Conv2d(cin, cout, 3, bias=False),
                                                    torch.nn.BatchNorm2d(cout), torch.nn.ReLU())])
        shape = (4, 3, 11, 11)
    else:
        eager, shape = variant(kind)
    dtype = torch.bfloat16 if case == "bfloat16" else torch.float32
    eager = eager.to(dtype)
    net = copy.deepcopy(eager)
    fresh()
    try:
        # with the pass, eager's input channels-last too: 16-bit convolution
        # gradients summed in NHWC order round otherwise than in NCHW
        nhwc = kind == "channels_last" or (channels_last == "1" and len(shape) == 4)
        steps(eager, net, wick.compile(net), dtype, (shape,), autocast=case == "autocast", channels_last=nhwc)
    finally:
        monkeypatch.undo()
        C.env_reload()
    own_graphs_only()
    (plan,) = plans
    norms = 3 if kind == "plain" else 1
    forward, backward = "_batch_norm_updating", "aten.batch_norm_backward.default"
    if kind == "no_running_stats":
        forward, backward = "aten._native_batch_norm_legit.no_stats", "aten.native_batch_norm_backward.default"
    elif kind == "no_affine":
        forward, backward = "aten._native_batch_norm_legit_functional.default", "aten.native_batch_norm_backward.default"
    assert extern_names(plan.fwd_externs) == [forward] * norms
    assert extern_names(plan.bwd_externs) == [backward] * norms
    assert len(plan.in_place) == (2 * norms if forward == "_batch_norm_updating" else 0)


def bf16_pair_on_extern_norms(monkeypatch, kind):
    """WICK_CUDA_NORM_TRAINING=extern with the CPU counted as CUDA, and
    variant(kind) in bfloat16 twice (eager's and a copy to compile), wick reset"""
    monkeypatch.setenv("WICK_CUDA_NORM_TRAINING", "extern")
    monkeypatch.setattr(_autodiff, "_CUDA_NORM_DEVICES", ("cuda", "cpu"))
    eager, shape = variant(kind)
    eager = eager.to(torch.bfloat16)
    net = copy.deepcopy(eager)
    fresh()
    return eager, net, shape


def test_norm_updates_its_buffers_in_place(monkeypatch):
    """The running statistics stay the module's own tensors, updated in
    place as eager's kernel updates them, and nothing clones them or copies
    them back. (Their version counters move where eager's do not: the op
    declares its writes; eager's cuDNN and CPU kernels write unannounced.)"""
    eager, net, shape = bf16_pair_on_extern_norms(monkeypatch, "plain_affine")
    fn = wick.compile(net)
    norm, twin = net[1], eager[1]
    buffers = (norm.running_mean, norm.running_var)
    for step in range(3):
        x = rand(shape, torch.bfloat16, 60 + step)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            got = fn(x)
        want = eager(x)
        assert norm.running_mean is buffers[0] and norm.running_var is buffers[1]
        if step:  # compiled by now: no [C]-sized copy or clone around the call
            assert not [e.name for e in prof.events() if e.name in ("aten::copy_", "aten::clone")
                        and e.input_shapes and list(e.input_shapes[0]) == [5]]
        torch.testing.assert_close(norm.running_mean, twin.running_mean)
        torch.testing.assert_close(norm.running_var, twin.running_var)
        torch.testing.assert_close(got, want)
        got.float().sum().backward()
    own_graphs_only()


def test_16bit_norm_shared_by_two_calls(monkeypatch):
    """One BatchNorm2d called twice in a step (one extern entry per call or
    shared): the same values as eager's, through whichever route took it."""
    eager, net, shape = bf16_pair_on_extern_norms(monkeypatch, "shared")
    steps(eager, net, wick.compile(net), torch.bfloat16, (shape,))
    s = _autodiff.stats()
    assert s["graphs"] + s["fallbacks"] == 1, s


@pytest.mark.parametrize("channels_last", ["0", "1"])
def test_norm_whose_channels_equal_its_height_and_width(monkeypatch, channels_last):
    """A norm over [N, 8, 8, 8] after a pooling: its NHWC-ordered input
    gradient (the channels-last pass) has the sizes of the NCHW one, which
    the backward once took for the NCHW order, so the gradients of every
    layer before it were those of a transposed tensor. Its order is told by
    the channel dim the pass moved now."""
    import wick._C as C

    monkeypatch.setenv("WICK_CHANNELS_LAST", channels_last)
    C.env_reload()
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 1), torch.nn.BatchNorm2d(8),
                                torch.nn.ReLU())
    net = copy.deepcopy(eager)
    fresh()
    try:
        steps(eager, net, wick.compile(net), torch.float32, ((2, 3, 16, 16),), channels_last=True)
    finally:
        monkeypatch.undo()
        C.env_reload()
    own_graphs_only()
