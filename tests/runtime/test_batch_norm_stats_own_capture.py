"""Training batch norm through wick.compile (wick's own capture) updating
its running statistics in place, as the torch.compile path does
(test_batch_norm_stats_in_place.py): capture models F.batch_norm as a
Functional call that clones running_mean/var, updates the clones and has
the frame copy them back after the graph; to_fx exports it (and the
num_batches_tracked += 1 the frame copies back) as the in-place calls eager
makes, so that AOTAutograd sees mutations of the buffers and wick's forward
compiler updates them in place (backends._StatsInPlace). Compared with an
eager twin after every step (outputs, gradients, parameters after SGD,
running_mean/var, num_batches_tracked); the calls a step makes counted with
the profiler."""
import copy

import pytest
import torch

import wick
import wick._C as C
from tests.runtime.test_batch_norm_stats_in_place import (grads_agree, no_grad_steps, profile_step, rand, same_state,
                                                          twins, variant, variant_steps)
from wick import backends


def fresh():
    wick.reset()
    backends.fallback_reasons.clear()
    backends.compiled_graphs.clear()


@pytest.fixture(autouse=True)
def _through_aotautograd(monkeypatch):
    """These tests count AOTAutograd's forward graphs (the statistics written
    in place there); a module without running statistics writes no input
    and would take wick's own autodiff (wick/_autodiff.py) instead."""
    monkeypatch.setenv("WICK_AUTODIFF", "aot")


def forward_counts(key="stats_in_place"):
    return [g[key] for g in backends.compiled_graphs if g["graph"] in ("forward", "inference")]


def agree(got, want, exact, what):
    """Bit for bit where batch norm is an extern call (16-bit, autocast);
    float32's decomposes into wick's kernels, and three steps of SGD on a
    squared loss carry their rounding (the torch.compile path's figures are
    the same): close, far closer than a lost or doubled update would be."""
    if exact:
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=what)
    else:
        torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3, msg=what)


def sgd_steps(eager, net, fn, dtype, steps=3, autocast=False, shapes=((4, 3, 9, 9),), seed=10):
    """steps of SGD on both twins, everything compared after each step."""
    exact = autocast or dtype != torch.float32
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_c = torch.optim.SGD(net.parameters(), lr=0.05)
    for step in range(steps):
        x = rand(shapes[step % len(shapes)], dtype, seed + step)
        with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            want, got = eager(x), fn(x)
        agree(got, want, exact, f"step {step}: output")
        for (name, a), b in zip(net.named_buffers(), eager.buffers()):
            assert a.dtype == b.dtype, name
            agree(a, b, exact, f"step {step}: {name}")
        want.float().square().sum().backward()
        got.float().square().sum().backward()
        for (name, p), q in zip(net.named_parameters(), eager.parameters()):
            agree(p.grad, q.grad, exact, f"step {step}: {name}.grad")
        opt_e.step()
        opt_c.step()
        opt_e.zero_grad()
        opt_c.zero_grad()
        for (name, p), q in zip(net.named_parameters(), eager.parameters()):
            agree(p, q, exact, f"step {step}: {name} after SGD")


@pytest.mark.parametrize("case", ["bfloat16", "autocast", "float32"])
def test_training_steps_match_eager(case):
    dtype = torch.bfloat16 if case == "bfloat16" else torch.float32
    eager, net = twins(dtype)
    fresh()
    sgd_steps(eager, net, wick.compile(net), dtype, autocast=case == "autocast")
    assert not backends.fallback_reasons, backends.fallback_reasons
    # 16-bit batch norm (autocast's too) is an extern call, updated in place;
    # float32's decomposes into kernels, whose new statistics AOTAutograd
    # copies into the buffers (no longer the frame)
    assert forward_counts() == ([2] if case != "float32" else [0])
    assert forward_counts("counters_in_place") == ([2] if case != "float32" else [0])


def test_step_makes_no_copies_of_the_statistics():
    """A bf16-autocast step through wick.compile makes the calls the
    torch.compile path makes: the in-place batch norms, one _foreach_add_
    for the counters, no clone, and no more copy_ calls (AOTAutograd's
    copies back copy each buffer onto itself; the frame's, of an output that
    is the buffer itself, are skipped)."""
    channels = (3, 6, 5, 4)
    nbn = len(channels) - 1
    eager, net = twins(torch.float32, channels=channels)
    dynamo_net = copy.deepcopy(net)
    fresh()
    torch._dynamo.reset()
    own, dynamo = wick.compile(net), torch.compile(dynamo_net, backend="wick")
    x = rand((4, 3, 11, 11), torch.float32, 60)

    def step(fn):
        with torch.autocast("cpu", torch.bfloat16):
            return fn(x)

    for _ in range(2):
        for fn in (own, dynamo, eager):
            step(fn).float().sum().backward()
    got, via_dynamo, want = (profile_step(lambda _: step(fn), x) for fn in (own, dynamo, eager))
    assert got["aten::_native_batch_norm_legit"] == nbn, got
    assert got["aten::_native_batch_norm_legit_functional"] == 0, got
    assert got["clone, not for contiguous"] == 0, got
    assert got["aten::_foreach_add_"] == 1, got
    assert got["aten::copy_"] <= via_dynamo["aten::copy_"], (got["aten::copy_"], via_dynamo["aten::copy_"])
    assert got["aten::copy_"] <= want["aten::copy_"], (got["aten::copy_"], want["aten::copy_"])
    same_state(eager, net, torch.bfloat16, "last")
    assert not backends.fallback_reasons, backends.fallback_reasons


def test_frame_copies_nothing_back():
    """The frame's copies back of the statistics are skipped, not made onto
    the buffers themselves: the buffers' version counters move as eager's."""
    eager, net = twins(torch.bfloat16)
    fresh()
    fn = wick.compile(net)
    for step in range(3):
        x = rand((4, 3, 9, 9), torch.bfloat16, 90 + step)
        before = [b._version for b in net.buffers()]
        got = fn(x)
        torch.testing.assert_close(got, eager(x), rtol=0, atol=0)
        same_state(eager, net, torch.bfloat16, step)
        if step:  # (the first run is AOTAutograd's trace and compile)
            moved = [b._version - v for b, v in zip(net.buffers(), before)]
            # the in-place op's write, AOTAutograd's copy onto itself: no third
            assert all(m <= 2 for m in moved), moved
        got.float().sum().backward()


def test_eval_mode_leaves_statistics_alone():
    dtype = torch.bfloat16
    eager, net = twins(dtype)
    eager.eval()
    net.eval()
    fresh()
    fn = wick.compile(net)
    for step in range(2):
        x = rand((3, 3, 8, 8), dtype, 20 + step)
        want, got = eager(x), fn(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        same_state(eager, net, dtype, step)
        want.float().sum().backward()
        got.float().sum().backward()
        grads_agree(eager, net, dtype, step)
    assert not backends.fallback_reasons, backends.fallback_reasons
    assert all(c == 0 for c in forward_counts())


@pytest.mark.parametrize("autocast", [False, True])
def test_momentum_none_cumulative_average(autocast):
    dtype = torch.float32 if autocast else torch.bfloat16
    eager, net = twins(dtype, momentum=None)
    fresh()
    sgd_steps(eager, net, wick.compile(net), dtype, autocast=autocast, steps=3)


@pytest.mark.parametrize("read", ["before", "after", "both"])
def test_statistics_read_elsewhere_stay_functional(read):
    """A running statistic the frame also reads (its old value before the
    batch norm, its new value after): AOTAutograd keeps the batch norm
    functional and copies the new values back itself."""
    dtype = torch.bfloat16
    c = 5
    w = rand((c,), dtype, 1).requires_grad_()
    b = rand((c,), dtype, 2).requires_grad_()
    rm, rv = rand((c,), dtype, 3), rand((c,), dtype, 4).abs() + 0.5

    def f(x, w, b, rm, rv):
        early = rm * 2 if read in ("before", "both") else None
        y = torch.nn.functional.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3)
        late = rv * 3 if read in ("after", "both") else None
        return tuple(t for t in (y, early, late) if t is not None)

    fresh()
    rm_e, rv_e, rm_c, rv_c = rm.clone(), rv.clone(), rm.clone(), rv.clone()
    fn = wick.compile(f)
    for step in range(3):
        x = rand((4, c, 6), dtype, 10 + step)
        want, got = f(x, w, b, rm_e, rv_e), fn(x, w, b, rm_c, rv_c)
        for g_, w_ in zip(got, want, strict=True):
            torch.testing.assert_close(g_, w_, rtol=0, atol=0, msg=f"step {step}")
        torch.testing.assert_close(rm_c, rm_e, rtol=0, atol=0, msg=f"step {step}")
        torch.testing.assert_close(rv_c, rv_e, rtol=0, atol=0, msg=f"step {step}")
        sum(t.float().sum() for t in got).backward()
        sum(t.float().sum() for t in want).backward()
    assert not backends.fallback_reasons, backends.fallback_reasons
    assert forward_counts() == [0]


def test_new_statistics_returned():
    """A frame that returns the module's running_mean after the batch norm:
    the buffer itself, as eager returns it, with its new value."""
    dtype = torch.bfloat16
    eager, net = twins(dtype)

    def step(m, x):
        return m(x), m[1].running_mean, m[1].num_batches_tracked

    fresh()
    fn = wick.compile(step)
    for k in range(3):
        x = rand((4, 3, 9, 9), dtype, 30 + k)
        want, got = step(eager, x), fn(net, x)
        for g_, w_ in zip(got, want):
            torch.testing.assert_close(g_, w_, rtol=0, atol=0)
        assert got[1] is net[1].running_mean and got[2] is net[1].num_batches_tracked
        same_state(eager, net, dtype, k)
        got[0].float().sum().backward()
        want[0].float().sum().backward()
        grads_agree(eager, net, dtype, k)
    assert not backends.fallback_reasons, backends.fallback_reasons


def test_shared_norm_called_twice():
    """One batch norm called twice in a forward: the second call reads the
    statistics the first wrote."""
    from tests.runtime.test_batch_norm_stats_in_place import SharedNorm

    dtype = torch.bfloat16
    torch.manual_seed(0)
    eager = SharedNorm().to(dtype)
    net = copy.deepcopy(eager)
    fresh()
    sgd_steps(eager, net, wick.compile(net), dtype, shapes=((4, 3, 8, 8),))
    assert not backends.fallback_reasons, backends.fallback_reasons


def failing_counted_calls(monkeypatch, which_call, which_run):
    """backends._counting_calls whose in-place call number which_call (0: the
    first, -1: the last) raises after it ran, at its which_run-th call."""
    real = backends._counting_calls

    def failing(fn, counts, k):
        counted = real(fn, counts, k)

        def call(*args):
            out = counted(*args)
            if k == (which_call % len(counts)) and counts[k] == which_run:
                raise RuntimeError("injected failure after the batch norm")
            return out
        return call

    monkeypatch.setattr(backends, "_counting_calls", failing)


@pytest.mark.parametrize("after", ["first", "last"])
@pytest.mark.parametrize("run", [1, 2])
def test_failed_run_updates_statistics_once(monkeypatch, after, run):
    """A compiled forward that fails after some of its in-place updates ran
    (an injected error after the first, or the last, of its in-place calls:
    the counters' one call, the batch norms'), at its first run or a later
    one: that call runs eagerly, and what was updated is not updated again
    (not by the graph's eager run, nor by the frame's)."""
    failing_counted_calls(monkeypatch, 0 if after == "first" else -1, run)
    dtype = torch.bfloat16
    eager, net = twins(dtype)
    fresh()
    sgd_steps(eager, net, wick.compile(net), dtype, steps=3)
    assert any("injected failure" in r for r in backends.fallback_reasons), backends.fallback_reasons


def test_no_grad_training_mode():
    """Training-mode batch norm under no_grad: wick's own runtime on the CPU
    (its Functional call, as before); correct statistics."""
    dtype = torch.bfloat16
    eager, net = twins(dtype)
    fresh()
    no_grad_steps(eager, net, wick.compile(net), dtype, seed=30)
    assert not backends.fallback_reasons, backends.fallback_reasons


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("layout", ["fx", "graph"])
def test_no_grad_conv_graph(monkeypatch, mode, layout):
    """Training-mode batch norm under no_grad in a conv graph
    (WICK_CHANNELS_LAST=1: conv graphs on any device, as on CUDA).
    WICK_LAYOUT_PASS=fx: through AOTAutograd, whose inference graph updates
    in place; not under mode="reduce-overhead" (a CUDA graph's warm-up run
    would update the buffers once more), where AOTAutograd copies the new
    values back. graph (the default): the channels-last pass on the captured
    graph, compiled natively; the batch norms stay Functional calls whose
    new statistics the frame copies back."""
    monkeypatch.setenv("WICK_CHANNELS_LAST", "1")
    monkeypatch.setenv("WICK_LAYOUT_PASS", layout)
    C.env_reload()
    dtype = torch.bfloat16
    eager, net = twins(dtype)
    fresh()
    no_grad_steps(eager, net, wick.compile(net, mode=mode), dtype, seed=40)
    assert not backends.fallback_reasons, backends.fallback_reasons
    if layout == "graph":
        assert backends.compiled_graphs == []
        return
    assert [g["graph"] for g in backends.compiled_graphs] == ["inference"]
    assert forward_counts() == ([2] if mode == "default" else [0])


def test_reduce_overhead():
    """mode="reduce-overhead" (CUDA graphs on CUDA; on the CPU, eager's
    results all the same)."""
    dtype = torch.bfloat16
    eager, net = twins(dtype)
    fresh()
    sgd_steps(eager, net, wick.compile(net, mode="reduce-overhead"), dtype, steps=3)
    assert not backends.fallback_reasons, backends.fallback_reasons


@pytest.mark.parametrize("kind", ["no_affine", "no_running_stats", "batchnorm1d", "channels_last"])
def test_module_variants(kind):
    dtype = torch.bfloat16
    eager, want_in_place, shape = variant(kind, dtype)
    net = copy.deepcopy(eager)
    fresh()
    variant_steps(eager, net, wick.compile(net), kind, shape, dtype)
    assert not backends.fallback_reasons, backends.fallback_reasons
    assert forward_counts() == [want_in_place]
