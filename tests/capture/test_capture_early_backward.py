"""A grad-mode graph of wick's own capture has its backward compiled early
(wick/backends.py, _EarlyBackward): the forward compiler starts it, its C
compiler runs on a thread beside the forward, and the backward compiler
takes the result only for the graph and inputs it was started with. Each
test compares outputs and every gradient with eager on random inputs, over
shapes and dtypes: with the early compile taken, with the knob off, with a
job that does not match (the backward compiled as before), with a job whose
compile failed on its thread (likewise), and a forward whose backward never
runs."""
import pytest
import torch
import torch.nn.functional as F

import wick.backends as wb
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries


@pytest.fixture(autouse=True)
def _through_aotautograd(monkeypatch):
    """The early backward is AOTAutograd's path: wick's own autodiff
    (wick/_autodiff.py, tests/autodiff/) would take these graphs first."""
    monkeypatch.setenv("WICK_AUTODIFF", "aot")


class Block(torch.nn.Module):
    def __init__(self, d=8, h=12):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, h)
        self.down = torch.nn.Linear(h, d)

    def forward(self, x):
        y = self.up(self.norm(x))
        return x + self.down(F.gelu(y) * torch.tanh(y))


def _loss(out):
    return (out.float() * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum()


def _grads(m, x, out):
    return torch.autograd.grad(_loss(out), list(m.parameters()) + [x])


@pytest.fixture
def takes(monkeypatch):
    """How many backward compiles took an early job's result, and how many
    early jobs were started."""
    counts = {"taken": 0, "started": 0}
    take, start = wb._EarlyBackward.take, wb._EarlyBackward.start.__func__

    def counting_take(self, gm, example_inputs):
        got = take(self, gm, example_inputs)
        counts["taken"] += got is not None
        return got

    def counting_start(cls, torch_, bw_module):
        job = start(cls, torch_, bw_module)
        counts["started"] += job is not None
        return job

    monkeypatch.setattr(wb._EarlyBackward, "take", counting_take)
    monkeypatch.setattr(wb._EarlyBackward, "start", classmethod(counting_start))
    return counts


def _run_and_compare(shape, dtype, seed=0):
    torch.manual_seed(seed)
    m = Block().to(dtype)
    x = torch.randn(*shape, dtype=dtype, requires_grad=True)
    expected = Block.forward(m, x)
    want = _grads(m, x, expected)
    got_out = compiled(Block.forward)(m, x)
    tol = {} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5}
    assert_same(got_out, expected, **tol)
    for g, w in zip(_grads(m, x, got_out), want):
        assert_same(g, w, **tol)
    es = entries(Block.forward)
    assert es and not es[0]["eager"], es[0].get("reason")
    assert es[0]["via_fx"]


@pytest.mark.parametrize("shape", [(2, 5, 8), (3, 8), (1, 1, 8)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_early_backward_is_taken_and_equals_eager(shape, dtype, takes):
    _run_and_compare(shape, dtype)
    assert takes == {"taken": 1, "started": 1}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_knob_off_compiles_the_backward_at_the_first_backward(dtype, takes, monkeypatch):
    monkeypatch.setenv("WICK_EARLY_BACKWARD", "0")
    _run_and_compare((2, 3, 8), dtype, seed=1)
    assert takes == {"taken": 0, "started": 0}


def test_a_job_for_another_graph_is_not_taken(takes, monkeypatch):
    """The backward compiler is given a graph the job was not started with
    (its code differs): it compiles that graph itself."""
    start = wb._EarlyBackward.start

    def mismatched(torch_, bw_module):
        job = start(torch_, bw_module)
        if job is not None:
            job.original = torch.fx.symbolic_trace(lambda x: x * 2)  # another graph (its code differs)
        return job

    monkeypatch.setattr(wb._EarlyBackward, "start", mismatched)
    _run_and_compare((4, 8), torch.float32, seed=2)
    assert takes["taken"] == 0 and takes["started"] == 1


def test_a_job_with_other_input_strides_is_not_taken(takes, monkeypatch):
    """As when a forward leaves saved activations in another layout and
    AOTAutograd restrides the backward's inputs: the metadata differ, so the
    backward is compiled for the inputs it is given."""
    start = wb._EarlyBackward.start

    def other_strides(torch_, bw_module):
        job = start(torch_, bw_module)
        if job is not None:
            job.metas = tuple((m[0], tuple(s + 1 for s in m[1])) + m[2:] if m[0] != "v" else m
                              for m in job.metas)
        return job

    monkeypatch.setattr(wb._EarlyBackward, "start", other_strides)
    _run_and_compare((2, 5, 8), torch.float64, seed=3)
    assert takes["taken"] == 0 and takes["started"] == 1


def test_a_compile_that_failed_on_its_thread_is_compiled_again(takes, monkeypatch):
    """An error on the job's thread is not the program's: the backward
    compiler compiles the graph as before (and would report its error the
    usual way)."""

    def failing(self, torch_):
        self.error = wb._C.CompileError("wick: a compile that failed on the early thread")

    monkeypatch.setattr(wb._EarlyBackward, "_compile", failing)
    _run_and_compare((3, 8), torch.float32, seed=4)
    assert takes["taken"] == 0 and takes["started"] == 1
    assert not [r for r in wb.fallback_reasons if "early thread" in r]


def test_importer_refusal_leaves_the_backward_to_the_backward_compiler(takes, monkeypatch):
    def refusing(*args, **kwargs):
        raise wb._Unsupported("refused for the test")

    real = wb._import_aten
    calls = {"n": 0}

    def first_refused(gm, example_inputs, which, *args, **kwargs):
        calls["n"] += 1
        if which == "backward" and calls["n"] == 1:
            refusing()
        return real(gm, example_inputs, which, *args, **kwargs)

    monkeypatch.setattr(wb, "_import_aten", first_refused)
    _run_and_compare((2, 2, 8), torch.float64, seed=5)
    assert takes == {"taken": 0, "started": 0}


def test_forward_without_backward_then_training_steps(takes):
    """A grad-mode forward whose backward never runs leaves its job behind
    (the thread ends on its own); later calls train as eager does."""
    torch.manual_seed(6)
    m = Block()
    ref = Block()
    ref.load_state_dict(m.state_dict())
    x = torch.randn(2, 4, 8)
    f = compiled(Block.forward)
    assert_same(f(m, x), Block.forward(ref, x), rtol=1e-4, atol=1e-5)
    opt, opt_ref = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):
        xs = torch.randn(2, 4, 8)
        for mod, o, fn in ((m, opt, f), (ref, opt_ref, lambda mm, xx: Block.forward(mm, xx))):
            o.zero_grad()
            _loss(fn(mod, xs)).backward()
            o.step()
        for p, q in zip(m.parameters(), ref.parameters()):
            assert_same(p, q, rtol=1e-4, atol=1e-5)
    assert takes["started"] >= 1


def test_the_taken_backward_is_the_graph_aotautograd_keeps_not_a_copy(takes, monkeypatch):
    """AOTAutograd deep-copies the partitioned backward before compiling it
    (a fifth of a second for a transformer); a graph with an early job is
    shared on copy, so the backward compiler is given that graph itself."""
    seen = []
    take = wb._EarlyBackward.take

    def recording_take(self, gm, example_inputs):
        seen.append(gm is self.original)
        return take(self, gm, example_inputs)

    monkeypatch.setattr(wb._EarlyBackward, "take", recording_take)
    _run_and_compare((2, 6, 8), torch.float32, seed=7)
    assert seen == [True] and takes == {"taken": 1, "started": 1}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_job_not_taken_leaves_the_graph_aotautograd_keeps_unedited(dtype, takes, monkeypatch):
    """The job's compile failed, so the backward compiler compiles the shared
    graph after all: on a copy of its own (the importer edits the graph it
    is given), leaving AOTAutograd's graph as it was partitioned."""
    kept = []
    start = wb._EarlyBackward.start

    def failing(self, torch_):
        self.error = wb._C.CompileError("wick: a compile that failed on the early thread")

    def recording_start(torch_, bw_module):
        job = start(torch_, bw_module)
        if job is not None:
            kept.append((job.original, job.original.code, [n.format_node() for n in job.original.graph.nodes]))
        return job

    monkeypatch.setattr(wb._EarlyBackward, "_compile", failing)
    monkeypatch.setattr(wb._EarlyBackward, "start", recording_start)
    _run_and_compare((3, 2, 8), dtype, seed=8)
    assert takes["taken"] == 0 and len(kept) == 1
    original, code, nodes = kept[0]
    assert original.code == code and [n.format_node() for n in original.graph.nodes] == nodes


@pytest.mark.skipif(not wb.aot_stages_known(torch), reason="this torch's AOTAutograd stages are not 2.13's: "
                    "wick calls aot_module_simplified, which logs")
@pytest.mark.parametrize("shape", [(2, 5, 8), (4, 8)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_training_compile_neither_prints_graphs_nor_generates_their_code(shape, dtype, takes, monkeypatch):
    """AOTAutograd run with its logs off (wick's stage-by-stage call) prints no
    graph to a string, and its graph modules are lazy: wick compiles from
    their nodes, so no Python code is generated for any of them."""
    counts = {"printed": 0, "code": 0}
    print_readable, python_code = torch.fx.GraphModule.print_readable, torch.fx.Graph.python_code

    def counting_print(self, *args, **kwargs):
        counts["printed"] += 1
        return print_readable(self, *args, **kwargs)

    def counting_code(self, *args, **kwargs):
        counts["code"] += 1
        return python_code(self, *args, **kwargs)

    monkeypatch.setattr(torch.fx.GraphModule, "print_readable", counting_print)
    monkeypatch.setattr(torch.fx.Graph, "python_code", counting_code)
    _run_and_compare(shape, dtype, seed=9)
    assert counts == {"printed": 0, "code": 0}
    assert takes == {"taken": 1, "started": 1}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_aot_module_simplified_when_the_stages_are_not_usable(dtype, takes, monkeypatch):
    """Where this torch's AOTAutograd stages are not the expected ones, wick
    calls aot_module_simplified as before: same results, early job taken."""
    calls = []

    def unusable(*args):
        calls.append(1)
        return None

    monkeypatch.setattr(wb, "_aot_without_logs", unusable)
    _run_and_compare((2, 4, 8), dtype, seed=10)
    assert calls == [1] and takes == {"taken": 1, "started": 1}


def test_another_torchs_stages_get_aot_module_simplified(takes, monkeypatch):
    """Where AOTAutograd's stages have other parameters (torch 2.11's
    prepare_aot_module_simplified has another positional one), the training
    compile is aot_module_simplified's, taken early as before, equal to eager,
    with no fallback. The expected parameters are made ones that no torch has
    (a name inserted as 2.11 inserts one), so that this runs on every torch."""
    params = wb._PREPARE_PARAMETERS
    monkeypatch.setattr(wb, "_PREPARE_PARAMETERS", params[:5] + ("no_torch_has_this_parameter",) + params[5:])
    assert not wb.aot_stages_known(torch)
    called = []
    real = wb._aot_without_logs
    monkeypatch.setattr(wb, "_aot_without_logs", lambda *a: called.append(1) or real(*a))
    _run_and_compare((2, 6, 8), torch.float32, seed=11)
    assert called and takes["taken"] >= 1
