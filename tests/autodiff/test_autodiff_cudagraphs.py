"""Training through wick.compile(mode="reduce-overhead"): wick's own autodiff
with its forward and backward graphs each replayed as a CUDA graph
(wick/_cudagraphs.py). Several optimizer steps against an eager copy of the
model, parameters and batch norm's running statistics compared after each;
losses kept across steps; microbatches accumulated before one backward
(the forward's saved values still held when it runs again); gradients
kept across steps (zero_grad(set_to_none=False)); dropout drawing a new
mask on every replay. On the CPU the same programs run without CUDA graphs
and still take wick's own autodiff; on CUDA every forward after the first
and every backward after the second is a replay. The runner's bookkeeping
(which inputs it takes in place, copies, records again for; outputs moved
before a replay) is also tested on the CPU, alone and through training
steps with a double of the CUDA graph (cpu_double)."""
import copy

import pytest
import torch
import torch.nn.functional as F

import wick
from wick import _cudagraphs

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
FORWARD, BACKWARD = "wick autodiff forward", "wick autodiff backward"


class MLP(torch.nn.Module):
    def __init__(self, d=32, h=64):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, h)
        self.down = torch.nn.Linear(h, d)

    def forward(self, x):
        y = self.up(self.norm(x))
        return x + self.down(F.gelu(y) * torch.sigmoid(y))


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)) + y)
        return self.head(y.mean((2, 3)))


def _pair(model, device):
    torch.manual_seed(0)
    eager = model().to(device).train()
    mine = copy.deepcopy(eager)
    wick.reset()
    return eager, mine, wick.compile(mine, mode="reduce-overhead")


def _close(a, b, device):
    tol = dict(rtol=1e-4, atol=1e-5) if device == "cpu" else dict(rtol=2e-3, atol=2e-4)
    torch.testing.assert_close(a, b, **tol)


def _same_state(eager, mine, device):
    for (name, p), q in zip(eager.state_dict().items(), mine.state_dict().values()):
        if p.is_floating_point():
            _close(q, p, device)
        else:
            assert torch.equal(q, p), name


def _own_autodiff_only():
    st = wick.stats()
    assert st["graphs"] >= 1 and not st["fallbacks"], st
    assert st["autodiff"]["graphs"] == st["graphs"] and not st["autodiff"]["fallbacks"], st["autodiff"]
    assert not _cudagraphs.reasons, _cudagraphs.reasons


def _replayed(device, steps):
    if device == "cuda":
        # the forward's second call records and replays it; the backward's
        # third (its second read the forward's graph memory for the first time)
        why = (_cudagraphs.recorded, _cudagraphs.replayed, _cudagraphs.skipped)
        assert _cudagraphs.recorded[FORWARD] == 1 and _cudagraphs.recorded[BACKWARD] == 1, why
        assert _cudagraphs.replayed[FORWARD] == steps - 1, why
        assert _cudagraphs.replayed[BACKWARD] == steps - 2, why
        assert not _cudagraphs.skipped, why
    else:
        assert not _cudagraphs.recorded and not _cudagraphs.replayed


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model,shape", [(MLP, (16, 32)), (ConvNet, (4, 3, 12, 12))], ids=["mlp", "convnet"])
def test_sgd_steps_equal_eager(model, shape, device):
    if device == "cuda":
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    eager, mine, compiled = _pair(model, device)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (eager, mine)]
    losses = []
    steps = 5
    for step in range(steps):
        x = torch.randn(shape, device=device)  # a new input tensor every step: copied into the graph's
        pair = []
        for m, run, opt in ((eager, eager, opts[0]), (mine, compiled, opts[1])):
            opt.zero_grad()
            out = run(x)
            loss = out.square().mean()
            loss.backward()
            opt.step()
            pair.append((out, loss))
        losses.append(pair)
        _same_state(eager, mine, device)
    for (e_out, e_loss), (m_out, m_loss) in losses:  # outputs and losses kept across replays stay correct
        _close(m_out, e_out, device)
        _close(m_loss, e_loss, device)
    _own_autodiff_only()
    _replayed(device, steps)


@pytest.mark.parametrize("device", DEVICES)
def test_microbatches_accumulated_before_one_backward(device):
    eager, mine, compiled = _pair(MLP, device)
    for step in range(4):
        xs = [torch.randn(8, 32, device=device) for _ in range(3)]
        for m, run in ((eager, eager), (mine, compiled)):
            m.zero_grad(set_to_none=False)  # gradients kept in place across steps
            loss = sum(run(x).square().mean() for x in xs)  # three forwards before the backward
            loss.backward()
        for p, q in zip(eager.parameters(), mine.parameters()):
            _close(q.grad, p.grad, device)
    _own_autodiff_only()
    if device == "cuda":
        # replays while earlier microbatches' saved values were held: moved to copies first
        assert _cudagraphs.replayed[FORWARD] >= 8, _cudagraphs.replayed


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_accumulated_across_steps_without_zeroing(device):
    eager, mine, compiled = _pair(MLP, device)
    for step in range(4):
        x = torch.randn(8, 32, device=device)
        for run in (eager, compiled):
            run(x).square().mean().backward()  # .grad accumulates: it must not alias the graph's memory
        for p, q in zip(eager.parameters(), mine.parameters()):
            _close(q.grad, p.grad, device)
    _own_autodiff_only()


class Dropping(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)

    def forward(self, x):
        return F.dropout(torch.tanh(self.lin(x)), 0.5, training=True) + 1


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_draws_a_new_mask_every_replay(device):
    torch.manual_seed(3)
    m = Dropping().to(device)
    wick.reset()
    f = wick.compile(m, mode="reduce-overhead")
    x = torch.randn(32, 64, device=device)
    masks = []
    for step in range(4):
        out = f(x)
        out.sum().backward()
        kept = out != 1
        masks.append(kept)
        assert 0.35 < kept.float().mean().item() < 0.65
        # the gradient of the kept elements only: tanh' * 2 (dropout's scale) routed through lin
        want_gy = kept.float() * 2 * (1 - torch.tanh(m.lin(x).detach()) ** 2)
        _close(m.lin.bias.grad, want_gy.sum(0), device)
        m.zero_grad()
    for a, b in zip(masks, masks[1:]):
        assert not torch.equal(a, b)
    _own_autodiff_only()
    _replayed(device, 4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA")
def test_norms_updating_buffers_in_place_update_them_once_a_step(monkeypatch):
    """WICK_CUDA_NORM_TRAINING=extern: 16-bit training norms stay cuDNN's
    calls, which write the running statistics in place inside the forward
    graph. Recording runs the forward once uncaptured (its warm-up) before
    the replay: the buffers get their values back in between, so every step
    moves them once, as eager's."""
    import wick._C as C

    monkeypatch.setenv("WICK_CUDA_NORM_TRAINING", "extern")
    C.env_reload()
    try:
        torch.manual_seed(0)
        eager = ConvNet().cuda().to(torch.bfloat16).train()
        mine = copy.deepcopy(eager)
        wick.reset()
        compiled = wick.compile(mine, mode="reduce-overhead")
        for step in range(4):
            x = torch.randn(4, 3, 12, 12, device="cuda", dtype=torch.bfloat16)
            for run in (eager, compiled):
                run(x).float().square().mean().backward()
            for (name, p), q in zip(eager.named_buffers(), mine.buffers()):
                if name.endswith("num_batches_tracked"):
                    assert int(q) == int(p) == step + 1, name
                else:
                    torch.testing.assert_close(q, p, rtol=2e-2, atol=2e-2)
    finally:
        monkeypatch.undo()
        C.env_reload()
    _own_autodiff_only()
    _replayed("cuda", 4)


def test_outputs_held_only_by_autograd_are_moved_before_a_replay():
    """The runner's bookkeeping (no CUDA needed): a handed-out output that
    autograd saved for a backward (held from C++ only) gets storage of its own before the graph memory is reused; one held
    by nothing is left; one shared through another tensor object (a view the
    caller made) stops the replay."""
    runner = _cudagraphs.CudaGraphRunner(lambda *a: None)
    static = (torch.randn(4), torch.randn(4), torch.randn(4))
    runner.static_outputs = static
    handed = list(runner._hand_out())
    want = handed[0].clone()

    class Saves(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(handed.pop(0))
            return x * 2

        @staticmethod
        def backward(ctx, g):
            (s,) = ctx.saved_tensors
            return g * s

    x = torch.randn(4, requires_grad=True)
    y = Saves.apply(x)
    dropped, viewed = handed
    del handed, dropped
    view = viewed[1:]
    assert not runner._release_outputs()  # the view shares the graph memory: no replay
    del view, viewed
    assert runner._release_outputs()
    static[0].data.fill_(7.0)  # what a replay would write (a replay bumps no version counter)
    (gx,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(gx, want)


def test_bind_tells_moved_inputs_from_ones_that_do_not_fit():
    """The runner's input check (no CUDA needed): an input taken in place
    that arrives at another address is reported by position (the runner
    records again with a buffer for it); one of another shape or dtype, or
    a constant that changed, does not fit the graph at all."""
    runner = _cudagraphs.CudaGraphRunner(lambda *a: None)
    kept, buf = torch.randn(3, 2), torch.empty(4)
    runner.slots = [("static", kept.data_ptr(), kept), ("copy", buf), ("const", 5)]
    fresh = torch.randn(4)
    assert runner._bind([kept, fresh, 5]) == []
    torch.testing.assert_close(buf, fresh)  # copied in
    assert runner._bind([kept.clone(), torch.randn(4), 5]) == [0]
    assert runner._bind([kept, torch.randn(5), 5]) is None
    assert runner.misfit == ("input 1 changed shape", "(4,) -> (5,)")
    assert runner._bind([kept.double(), torch.randn(4), 5]) is None
    assert runner.misfit == ("input 0 changed dtype", "torch.float32 -> torch.float64")
    assert runner._bind([kept.t(), torch.randn(4), 5]) is None
    assert runner.misfit[0] == "input 0 changed shape"
    assert runner._bind([kept, torch.randn(8)[::2], 5]) is None
    assert runner.misfit == ("input 1 changed strides", "(1,) -> (2,)")
    assert runner._bind([kept, torch.randn(4), 6]) is None
    assert runner.misfit == ("input 2 is not the constant it was", "5 -> 6")
    assert runner._bind([kept, torch.randn(4)]) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA")
def test_an_input_that_stops_staying_put_is_copied_after_one_rerecording():
    """An input at the same address on the warm-up and the recording call
    is used in place; when it later arrives elsewhere, the graph is
    recorded again, taking it in place at its new address (where the saved
    values of a forward recorded again stay); when it moves again, it is
    copied in from then on. An input the graph writes in place that moves
    runs without the graph (counted in `skipped`), still updating the
    caller's tensor."""
    wick.reset()
    runner = _cudagraphs.CudaGraphRunner(lambda a, b: a * b + 1, name="t")
    a, b = torch.randn(64, device="cuda"), torch.randn(64, device="cuda")
    for _ in range(3):  # warm-up, recording (a and b stayed put: in place), replay
        torch.testing.assert_close(runner(a, b), a * b + 1)
    a = torch.randn(64, device="cuda")
    for _ in range(3):  # a moved once and stays: recorded again, in place
        torch.testing.assert_close(runner(a, b), a * b + 1)
    assert runner.rerecords == 1 and not runner.copied and runner.slots[0][0] == "static"
    for _ in range(3):  # a moves every call: recorded again, then copied in
        a = torch.randn(64, device="cuda")
        torch.testing.assert_close(runner(a, b), a * b + 1)
    assert runner.rerecords == 2 and runner.copied == {0} and runner.slots[0][0] == "copy"
    assert _cudagraphs.recorded["t"] == 3 and _cudagraphs.replayed["t"] == 8, _cudagraphs.replayed
    assert not _cudagraphs.skipped and not _cudagraphs.reasons

    def bump(a, b):
        a.add_(b)
        return a * 2

    runner = _cudagraphs.CudaGraphRunner(bump, name="w", mutated=[0])
    a = torch.randn(64, device="cuda")
    for _ in range(3):
        want = (a + b) * 2
        torch.testing.assert_close(runner(a, b), want)
        torch.testing.assert_close(a * 2, want)  # updated once a call
    a = torch.randn(64, device="cuda")
    want = (a + b) * 2
    torch.testing.assert_close(runner(a, b), want)
    torch.testing.assert_close(a * 2, want)
    assert _cudagraphs.skipped == {("w", "an input written in place moved"): 1}, _cudagraphs.skipped
    assert _cudagraphs.recorded["w"] == 1 and _cudagraphs.replayed["w"] == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA")
def test_a_call_that_raises_is_no_warm_up():
    """The backward's first call raises when an input arrives in another
    layout than the graph's (wick's autodiff then copies it into that layout
    and calls again): that call does not count among the warm-up calls,
    whose input addresses decide what the graph takes in place."""
    wick.reset()
    calls = []

    def fn(a):
        calls.append(a.data_ptr())
        if len(calls) == 1:
            raise ValueError("strides")
        return a + 1

    runner = _cudagraphs.CudaGraphRunner(fn, name="r")
    a = torch.randn(8, device="cuda")
    with pytest.raises(ValueError):
        runner(a)
    torch.testing.assert_close(runner(a), a + 1)
    assert runner.graph is None  # that was the warm-up
    torch.testing.assert_close(runner(a), a + 1)
    assert _cudagraphs.recorded["r"] == 1 and _cudagraphs.replayed["r"] == 1
    assert runner.slots[0][0] == "static"


def test_held_outputs_move_to_copies_with_their_strides():
    """An output moved out of the graph's memory keeps its strides, an
    expanded one (stride 0) too: the backward that reads it as a saved
    value was recorded with those strides (clone() would make it dense and
    every later backward would run without its graph)."""
    runner = _cudagraphs.CudaGraphRunner(lambda *a: None)
    row = torch.randn(1, 5)
    static = (row.expand(4, 5), torch.randn(6, 4).t()[1:], torch.randn(0, 3))
    runner.static_outputs = static
    handed = list(runner._hand_out())
    want = [h.clone() for h in handed]
    assert runner._release_outputs()
    row.fill_(3.0)
    for h, s, w in zip(handed, static, want):
        assert h.stride() == s.stride() and h.shape == s.shape
        assert h.untyped_storage().data_ptr() != s.untyped_storage().data_ptr() or not h.numel()
        torch.testing.assert_close(h, w)


class _CpuGraph:
    """A test double of a recorded CUDA graph: replay runs the function on
    the inputs the call bound (those taken in place, the buffers of the
    copied ones: a CUDA graph reads them by address) and writes the results
    into the memory of the static outputs."""

    def __init__(self, runner):
        self.runner = runner

    def replay(self):
        inputs, self.runner.double_inputs = self.runner.double_inputs, None
        for s, o in zip(self.runner.static_outputs, self.runner._run(inputs)):
            if isinstance(s, torch.Tensor) and s.numel():
                # what a replay does: the memory behind each output rewritten
                if s.stride() == o.stride():
                    _cudagraphs.storage_window(s).copy_(_cudagraphs.storage_window(o))
                else:
                    s.copy_(o)


class Masked(torch.nn.Module):
    """Saves an expanded value for the backward (a mask broadcast over the
    batch, as BERT's attention mask), and a LayerNorm."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.proj = torch.nn.Linear(16, 16)
        self.mask = torch.nn.Parameter(torch.randn(1, 16))

    def forward(self, x):
        return self.proj(self.norm(x) * self.mask.expand(x.shape[0], 16).sigmoid())


def install_cpu_double(set_attr=setattr, on_misfit=None):
    """Makes CUDA graph runners record and replay _CpuGraph doubles of CPU
    tensors: their CUDA calls replaced, everything else (which inputs are
    taken in place, copied or moved, when a graph is recorded again, when a
    call is skipped) as on the GPU. set_attr: how the runner class is
    changed (monkeypatch.setattr in tests; setattr in the scripts of
    bench/results that run model steps through the double); on_misfit:
    called with the runner when a call's inputs do not fit its graph."""
    runner = _cudagraphs.CudaGraphRunner
    set_attr(runner, "DEVICE", "cpu")
    set_attr(runner, "_warm_up", lambda self, args, inputs: self._run(inputs))
    set_attr(runner, "_capture", lambda self, inputs: (_CpuGraph(self), self._run(inputs)))
    bind = runner._bind

    def binding(self, args):
        moved = bind(self, args)
        if moved == []:
            self.double_inputs = [s[1] if s[0] == "copy" else a for a, s in zip(args, self.slots)]
        elif moved is None and on_misfit is not None:
            on_misfit(self)
        return moved

    set_attr(runner, "_bind", binding)


@pytest.fixture
def cpu_double(monkeypatch):
    """CUDA graph runners that record and replay _CpuGraph doubles of CPU tensors."""
    install_cpu_double(monkeypatch.setattr)


def test_training_steps_replay_every_backward_with_a_cpu_double(cpu_double):
    """The runner's bookkeeping through whole training steps, with CPU
    tensors standing in for CUDA ones: after recording, every forward and
    every backward replays, none is skipped. (The same double run on
    host_ab's BERT and GPT-2 steps found their backward skipping every
    replay after the first, an expanded saved value made dense when it was
    moved: test_held_outputs_move_to_copies_with_their_strides.)"""
    torch.manual_seed(0)
    eager = Masked()
    mine = copy.deepcopy(eager)
    wick.reset()
    compiled = wick.compile(mine, mode="reduce-overhead")
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (eager, mine)]
    kept = []
    steps = 6
    for _ in range(steps):
        x = torch.randn(8, 16)
        for run, opt in ((eager, opts[0]), (compiled, opts[1])):
            opt.zero_grad()
            loss = run(x).square().mean()
            loss.backward()
            opt.step()
            kept.append(loss)  # the losses (and their autograd nodes) live on across steps
        _same_state(eager, mine, "cpu")
    for e, m in zip(kept[::2], kept[1::2]):
        _close(m, e, "cpu")
    _own_autodiff_only()
    why = (_cudagraphs.recorded, _cudagraphs.replayed, _cudagraphs.skipped)
    assert _cudagraphs.replayed[FORWARD] == steps - 1 and _cudagraphs.replayed[BACKWARD] == steps - 2, why
    assert _cudagraphs.recorded[FORWARD] == 1 and _cudagraphs.recorded[BACKWARD] == 1, why
    assert not _cudagraphs.skipped, why


def test_output_gradients_are_always_copied_in(cpu_double):
    """The gradient autograd hands the backward is a new tensor every step;
    one that sits at the same address on the backward's warm-up and
    recording calls (here the very tensor, passed to backward() twice) is
    still copied in, so a later one elsewhere needs no second recording."""
    torch.manual_seed(0)
    model = MLP()
    wick.reset()
    compiled = wick.compile(model, mode="reduce-overhead")
    same = torch.randn(16, 32)
    for step in range(5):
        grad = same if step < 3 else torch.randn(16, 32)
        x = torch.randn(16, 32, requires_grad=True)
        compiled(x).backward(grad)
        want = torch.autograd.grad(MLP.forward(model, x), x, grad)[0]
        _close(x.grad, want, "cpu")
    why = (_cudagraphs.recorded, _cudagraphs.replayed, _cudagraphs.skipped)
    assert _cudagraphs.recorded[BACKWARD] == 1 and _cudagraphs.replayed[BACKWARD] == 3, why
    assert not _cudagraphs.skipped, why


@pytest.mark.parametrize("tangents_fresh", [True, False], ids=["as_named", "unmarked"])
def test_torch_compile_backward_copies_its_output_gradients(cpu_double, monkeypatch, tangents_fresh):
    """torch.compile(backend="wick", mode="reduce-overhead"), whose backward
    AOTAutograd traces: its output gradients (the graph's `tangents` inputs)
    are always copied in. One that sits at the same address on the
    backward's warm-up and recording calls (the very tensor, passed to
    backward() three times) is copied all the same, so a later one
    elsewhere needs no second recording. Unmarked, the runner takes it in
    place and must record again when it moves, which the test shows it does
    (or the double would prove nothing)."""
    if not tangents_fresh:
        wrap_boxed = _cudagraphs.wrap_boxed
        monkeypatch.setattr(_cudagraphs, "wrap_boxed", lambda fn, fresh=(), **kw: wrap_boxed(fn, **kw))
    torch.manual_seed(0)
    eager = MLP()
    mine = copy.deepcopy(eager)
    torch._dynamo.reset()
    for counts in (_cudagraphs.recorded, _cudagraphs.replayed, _cudagraphs.skipped):
        counts.clear()
    compiled = torch.compile(mine, backend="wick", mode="reduce-overhead")
    same = torch.randn(16, 32)
    steps = 6
    for step in range(steps):
        grad = same if step < 3 else torch.randn(16, 32)
        x = torch.randn(16, 32)
        for model in (eager, mine):
            model.zero_grad()
        out = compiled(x)
        out.backward(grad)
        eager(x).backward(grad)
        _close(out, eager(x), "cpu")
        for p, q in zip(eager.parameters(), mine.parameters()):
            _close(q.grad, p.grad, "cpu")
    backward = [k for k in _cudagraphs.recorded if "backward" in k]
    assert len(backward) == 1, dict(_cudagraphs.recorded)
    why = (_cudagraphs.recorded, _cudagraphs.replayed, _cudagraphs.skipped)
    assert not _cudagraphs.skipped, why
    if tangents_fresh:
        assert _cudagraphs.recorded[backward[0]] == 1 and _cudagraphs.replayed[backward[0]] == steps - 2, why
    else:
        # recorded again when the gradient first moves (taken in place at its
        # new address) and when it moves again (copied from then on)
        assert _cudagraphs.recorded[backward[0]] == 3, why
