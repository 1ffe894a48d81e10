"""Training batch norm through torch.compile(backend="wick") updating its
running statistics in place (backends.py _StatsInPlace): the forward graph
calls the in-place op on the module's buffers instead of the functional op
on clones, and returns aliases of the buffers, so AOTAutograd's copy of the
new statistics back into the buffers copies nothing. Compared with eager
after every step: outputs, running_mean/var, num_batches_tracked, gradients
(exact where batch norm is an extern call: 16-bit inputs); and the calls a
step makes, counted with the profiler."""
import collections
import copy
import os
import subprocess
import sys

import pytest
import torch

from wick import backends

aten = torch.ops.aten


def fresh():
    torch._dynamo.reset()
    backends.fallback_reasons.clear()
    backends.compiled_graphs.clear()


def rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def conv_bn_relu(dtype, seed=0, momentum=0.1, channels=(3, 6, 5)):
    torch.manual_seed(seed)
    layers = []
    for cin, cout in zip(channels, channels[1:]):
        layers += [torch.nn.Conv2d(cin, cout, 3), torch.nn.BatchNorm2d(cout, momentum=momentum), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers).to(dtype)
    for m in net.modules():  # statistics that are not the defaults, so an update that is lost shows
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(rand(m.running_mean.shape, dtype, seed + 1))
            m.running_var.copy_(rand(m.running_var.shape, dtype, seed + 2).abs() + 0.5)
    return net


def twins(dtype, **kw):
    eager = conv_bn_relu(dtype, **kw)
    compiled = conv_bn_relu(dtype, **kw)
    compiled.load_state_dict(eager.state_dict())
    return eager, compiled


def exact_or_close(got, want, dtype, what):
    if dtype in (torch.bfloat16, torch.float16):
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=what)
    else:  # float32 batch norm is decomposed into wick's own kernels
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=what)


def same_state(eager, compiled, dtype, step):
    for (name, a), b in zip(compiled.named_buffers(), eager.buffers()):
        assert a.dtype == b.dtype, name
        exact_or_close(a, b, dtype, f"step {step}: {name}")


def grads_agree(eager, compiled, dtype, step):
    for (name, p), q in zip(compiled.named_parameters(), eager.parameters()):
        tol = 0 if dtype in (torch.bfloat16, torch.float16) else 1e-4
        torch.testing.assert_close(p.grad, q.grad, rtol=tol, atol=tol, msg=f"step {step}: {name}")


def in_place_counts():
    return [g["stats_in_place"] for g in backends.compiled_graphs if g["graph"] == "forward"]


def train(eager, compiled_net, fn, dtype, steps=3, shapes=((4, 3, 9, 9),)):
    for step in range(steps):
        x = rand(shapes[step % len(shapes)], dtype, 10 + step)
        want, got = eager(x), fn(x)
        exact_or_close(got, want, dtype, f"step {step}: output")
        same_state(eager, compiled_net, dtype, step)
        want.float().square().sum().backward()
        got.float().square().sum().backward()
        grads_agree(eager, compiled_net, dtype, step)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_training_steps_match_eager(dtype):
    eager, net = twins(dtype)
    fresh()
    train(eager, net, torch.compile(net, backend="wick"), dtype)
    assert not backends.fallback_reasons, backends.fallback_reasons
    # 16-bit batch norm is an extern call, updated in place; float32's is
    # decomposed into kernels (nothing to update in place)
    assert in_place_counts() == ([2] if dtype != torch.float32 else [0])


def test_momentum_none_cumulative_average():
    eager, net = twins(torch.bfloat16, momentum=None)
    fresh()
    train(eager, net, torch.compile(net, backend="wick"), torch.bfloat16, steps=3)
    assert not backends.fallback_reasons, backends.fallback_reasons


def test_eval_mode_leaves_statistics_alone():
    dtype = torch.bfloat16
    eager, net = twins(dtype)
    eager.eval()
    net.eval()
    fresh()
    fn = torch.compile(net, backend="wick")
    for step in range(2):
        x = rand((3, 3, 8, 8), dtype, 20 + step)
        torch.testing.assert_close(fn(x), eager(x), rtol=0, atol=0)
        same_state(eager, net, dtype, step)
    assert all(c == 0 for c in in_place_counts())


def no_grad_steps(eager, net, fn, dtype, seed):
    """Three training-mode calls under no_grad against the eager twin:
    outputs and statistics, bit for bit."""
    with torch.no_grad():
        for step in range(3):
            x = rand((4, 3, 9, 9), dtype, seed + step)
            torch.testing.assert_close(fn(x), eager(x), rtol=0, atol=0)
            same_state(eager, net, dtype, step)


def test_no_grad_training_mode_updates_once():
    """Training-mode batch norm under no_grad: an inference graph, which
    updates the statistics in place too."""
    dtype = torch.bfloat16
    eager, net = twins(dtype)
    fresh()
    no_grad_steps(eager, net, torch.compile(net, backend="wick"), dtype, seed=30)
    assert [g["stats_in_place"] for g in backends.compiled_graphs] == [2]


@pytest.mark.parametrize("read", ["before", "after"])
def test_statistics_read_elsewhere_stay_functional(read):
    """A running statistic the graph also reads (its old value before the
    batch norm, its new value after) is not updated in place."""
    dtype = torch.bfloat16
    c = 5
    x = rand((4, c, 6), dtype, 0)
    w, b = rand((c,), dtype, 1), rand((c,), dtype, 2)
    rm, rv = rand((c,), dtype, 3), rand((c,), dtype, 4).abs() + 0.5

    def f(x, w, b, rm, rv):
        early = rm * 2 if read == "before" else None
        y = torch.nn.functional.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3)
        late = early if read == "before" else rv * 3
        return y + late.view(1, c, 1)

    fresh()
    rm_e, rv_e, rm_c, rv_c = rm.clone(), rv.clone(), rm.clone(), rv.clone()
    fn = torch.compile(f, backend="wick")
    for _ in range(2):
        torch.testing.assert_close(fn(x, w, b, rm_c, rv_c), f(x, w, b, rm_e, rv_e), rtol=0, atol=0)
        torch.testing.assert_close(rm_c, rm_e, rtol=0, atol=0)
        torch.testing.assert_close(rv_c, rv_e, rtol=0, atol=0)
    assert not backends.fallback_reasons, backends.fallback_reasons
    assert [g["stats_in_place"] for g in backends.compiled_graphs] == [0]


@pytest.mark.parametrize("op", ["_native_batch_norm_legit", "_batch_norm_with_update"])
def test_both_functional_variants_go_in_place(op):
    dtype = torch.bfloat16
    x = rand((6, 4, 5), dtype, 0)
    w, b = rand((4,), dtype, 1), rand((4,), dtype, 2)
    rm, rv = rand((4,), dtype, 3), rand((4,), dtype, 4).abs() + 0.5

    def f(x, w, b, rm, rv):
        if op == "_native_batch_norm_legit":
            return aten._native_batch_norm_legit(x, w, b, rm, rv, True, 0.2, 1e-5)
        return aten._batch_norm_with_update(x, w, b, rm, rv, 0.2, 1e-5)[:3]

    fresh()
    rm_e, rv_e, rm_c, rv_c = rm.clone(), rv.clone(), rm.clone(), rv.clone()
    fn = torch.compile(f, backend="wick")
    for step in range(2):
        for g_, w_ in zip(fn(x, w, b, rm_c, rv_c), f(x, w, b, rm_e, rv_e)):
            torch.testing.assert_close(g_, w_, rtol=0, atol=0)
        torch.testing.assert_close(rm_c, rm_e, rtol=0, atol=0, msg=f"step {step}")
        torch.testing.assert_close(rv_c, rv_e, rtol=0, atol=0, msg=f"step {step}")
    assert not backends.fallback_reasons, backends.fallback_reasons
    assert [g["stats_in_place"] for g in backends.compiled_graphs] == [1]


def test_two_forwards_then_one_backward():
    """The backward saves the running buffers (as aliases with their own
    version counter): two forwards before one backward update them twice
    and the backward still runs, as in eager."""
    dtype = torch.bfloat16
    eager, net = twins(dtype)
    fresh()
    fn = torch.compile(net, backend="wick")
    for step in range(2):
        x1, x2 = rand((4, 3, 9, 9), dtype, 40 + step), rand((4, 3, 9, 9), dtype, 50 + step)
        want = eager(x1).float().sum() + eager(x2).float().square().sum()
        got = fn(x1).float().sum() + fn(x2).float().square().sum()
        same_state(eager, net, dtype, step)
        want.backward()
        got.backward()
        grads_agree(eager, net, dtype, step)
    assert in_place_counts() == [2]


@pytest.mark.parametrize("after", ["first", "last"])
@pytest.mark.parametrize("run", [1, 2])
def test_failed_run_updates_statistics_once(monkeypatch, after, run):
    """A compiled forward that fails after some of its in-place updates ran
    (here: an injected error after the first, or the last, of its in-place
    calls: the counters' one call, the batch norms'), at its first run or a
    later one, runs eagerly instead; what was updated is not updated a
    second time."""
    real = backends._counting_calls

    def failing(fn, counts, k):
        counted = real(fn, counts, k)

        def call(*args):
            out = counted(*args)
            if k == (0 if after == "first" else len(counts) - 1) and counts[k] == run:
                raise RuntimeError("injected failure after the batch norm")
            return out
        return call

    monkeypatch.setattr(backends, "_counting_calls", failing)
    dtype = torch.bfloat16
    eager, net = twins(dtype)
    fresh()
    train(eager, net, torch.compile(net, backend="wick"), dtype, steps=2)
    assert any("injected failure" in r for r in backends.fallback_reasons), backends.fallback_reasons


def test_reduce_overhead_stays_functional():
    """mode="reduce-overhead" (CUDA graphs, whose warm-up run would update
    the buffers once more): the functional op; on the CPU, still eager's
    results."""
    dtype = torch.bfloat16
    eager, net = twins(dtype)
    fresh()
    train(eager, net, torch.compile(net, backend="wick", mode="reduce-overhead"), dtype, steps=2)
    assert in_place_counts() == [0]


def profile_step(fn, x):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(x).float().sum().backward()
    counts = collections.Counter(e.name for e in prof.events())
    # clones other than those of .contiguous() (torch 2.11's CPU convolution
    # backward makes its inputs contiguous, eager's step as well)
    counts["clone, not for contiguous"] = sum(
        1 for e in prof.events()
        if e.name == "aten::clone" and (e.cpu_parent is None or e.cpu_parent.name != "aten::contiguous"))
    return counts


def test_step_makes_no_copies_of_the_statistics():
    """Per batch norm the functional op cloned both buffers (two copies),
    its float32 fake results were widened (two more), and AOTAutograd copied
    the new values back (two more). In place: no clone, no widening, the
    copies back copy a buffer onto itself (ATen returns at once), so a step
    makes as many copy_ calls as eager's plus three per batch norm (those two
    and num_batches_tracked's, also onto itself: one _foreach_add_ bumps the
    counters in place)."""
    dtype = torch.bfloat16
    eager, net = twins(dtype, channels=(3, 6, 5, 4))
    fresh()
    fn = torch.compile(net, backend="wick")
    x = rand((4, 3, 11, 11), dtype, 60)
    for _ in range(2):
        fn(x).float().sum().backward()
        eager(x).float().sum().backward()
    got, want = profile_step(fn, x), profile_step(eager, x)
    nbn = 3
    assert got["aten::_native_batch_norm_legit"] == nbn, got
    assert got["aten::_native_batch_norm_legit_functional"] == 0, got
    assert got["clone, not for contiguous"] == 0, got
    assert got["aten::copy_"] <= want["aten::copy_"] + 3 * nbn, (got["aten::copy_"], want["aten::copy_"])
    # the counters' copies back are of a buffer onto itself too: one call added 1 to each
    assert got["aten::_foreach_add_"] == 1, got
    assert [g["counters_in_place"] for g in backends.compiled_graphs if g["graph"] == "forward"] == [nbn]


def test_without_shim_views(tmp_path):
    """WICK_SHIM=0: views through Tensor.as_strided; the aliases of the
    buffers are views of their .data, so the copy back does not bump the
    version of the tensors the backward saved."""
    code = (
        "import torch, sys; sys.path.insert(0, %r)\n"
        "from tests.runtime.test_batch_norm_stats_in_place import twins, train, fresh, in_place_counts\n"
        "from wick import backends\n"
        "eager, net = twins(torch.bfloat16)\n"
        "fresh()\n"
        "train(eager, net, torch.compile(net, backend='wick'), torch.bfloat16, steps=2)\n"
        "assert in_place_counts() == [2], in_place_counts()\n"
        "assert not backends.fallback_reasons, backends.fallback_reasons\n"
        "print('ok')\n" % os.getcwd())
    env = dict(os.environ, WICK_SHIM="0", WICK_CACHE_DIR=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout[-2000:] + run.stderr[-4000:]


def test_autocast_float32_statistics():
    """bfloat16 autocast over a float32 model (resnet50's training on the
    H200): the convolutions give bfloat16, batch norm updates float32
    running statistics, in place."""
    eager, net = twins(torch.float32)
    fresh()
    fn = torch.compile(net, backend="wick")
    for step in range(3):
        x = rand((4, 3, 9, 9), torch.float32, 70 + step)
        with torch.autocast("cpu", torch.bfloat16):
            want, got = eager(x), fn(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"step {step}: output")
        same_state(eager, net, torch.bfloat16, step)  # exact
        want.float().square().sum().backward()
        got.float().square().sum().backward()
        grads_agree(eager, net, torch.bfloat16, step)
    assert not backends.fallback_reasons, backends.fallback_reasons
    assert in_place_counts() == [2]


class SharedNorm(torch.nn.Module):
    """One batch norm called twice in a forward: its second call reads the
    statistics the first wrote (not in place: the first's new values are
    read by the graph), its own new values go back to the buffers."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.norm = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return self.norm(torch.relu(self.norm(self.conv(x))) * 2)


def variant(kind, dtype):
    """test_module_variants' module for `kind`: (the module, how many batch
    norms its forward graph updates in place, the input's shape)."""
    torch.manual_seed(0)
    if kind == "shared":
        return SharedNorm().to(dtype), 0, (4, 3, 8, 8)
    if kind == "batchnorm1d":
        return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.ReLU()).to(dtype), 1, (7, 6)
    norm = torch.nn.BatchNorm2d(5, affine=kind != "no_affine", track_running_stats=kind != "no_running_stats")
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3), norm, torch.nn.ReLU()).to(dtype)
    return module, 0 if kind == "no_running_stats" else 1, (4, 3, 8, 8)


def variant_steps(eager, net, fn, kind, shape, dtype):
    """Three training steps of a variant and its eager twin: outputs,
    statistics and gradients bit for bit after each."""
    for step in range(3):
        x = rand(shape, dtype, 80 + step)
        if kind == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        want, got = eager(x), fn(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"step {step}: output")
        same_state(eager, net, dtype, step)
        want.float().square().sum().backward()
        got.float().square().sum().backward()
        grads_agree(eager, net, dtype, step)


@pytest.mark.parametrize("kind", ["no_affine", "no_running_stats", "batchnorm1d", "shared", "channels_last"])
def test_module_variants(kind):
    dtype = torch.bfloat16
    eager, want_in_place, shape = variant(kind, dtype)
    net = copy.deepcopy(eager)
    fresh()
    variant_steps(eager, net, torch.compile(net, backend="wick"), kind, shape, dtype)
    assert not backends.fallback_reasons, backends.fallback_reasons
    assert in_place_counts() == [want_in_place]
