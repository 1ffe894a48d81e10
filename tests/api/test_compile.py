"""wick.compile as a user calls it: options per compiled function, what can
be compiled (functions, compiled functions, bound methods, lambdas,
nn.Modules), the backends, try/except/finally around compiled graphs, and
frames that keep falling back. Results are compared with eager PyTorch."""
import pytest
import torch

import wick
from wick import _C


@pytest.fixture(autouse=True)
def fresh():
    wick.reset()
    yield
    wick.reset()


def assert_same(got, want):
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    else:
        assert got == want


def graphs_of(fn):
    code = getattr(fn, "__code__", None) or fn.forward.__code__
    return sum(int(e.get("graph_count") or 0) for e in _C.code_entries(code) if not e["eager"])


def supported(x, y):
    return (x * 2 + y).relu()


def unsupported(x):
    # a graph break inside a loop with no tensor work before it: the whole
    # frame runs eagerly (a try block no longer stops a break)
    for _ in range(1):
        return x * x.sum().item()
    return x


def inputs(shape=(3, 4), dtype=torch.float32):
    g = torch.Generator().manual_seed(sum(shape) + 7)
    return torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype)


# ---- options belong to the compiled function ---------------------------------

def test_fullgraph_after_default_does_not_reuse_the_eager_entry():
    x = inputs()[0]
    assert_same(wick.compile(unsupported)(x), unsupported(x))
    with pytest.raises(wick.UnsupportedError, match="item"):
        wick.compile(unsupported, fullgraph=True)(x)
    assert_same(wick.compile(unsupported)(x), unsupported(x))  # the default still runs eagerly


def test_default_after_fullgraph_error_runs_eagerly():
    x = inputs()[0]
    with pytest.raises(wick.UnsupportedError):
        wick.compile(unsupported, fullgraph=True)(x)
    assert_same(wick.compile(unsupported)(x), unsupported(x))


def test_equal_options_share_entries_and_other_backends_compile_again():
    x, y = inputs()
    a, b = wick.compile(supported), wick.compile(supported)
    assert_same(a(x, y), supported(x, y))
    assert_same(b(x, y), supported(x, y))
    assert len(_C.code_entries(supported.__code__)) == 1
    c = wick.compile(supported, backend="eager")
    assert_same(c(x, y), supported(x, y))
    assert len(_C.code_entries(supported.__code__)) == 2


# ---- what can be compiled ----------------------------------------------------

def test_compiling_a_compiled_function():
    x, y = inputs()
    once = wick.compile(supported)
    twice = wick.compile(once, fullgraph=True)
    assert twice._fn is supported and twice.options["fullgraph"] is True
    assert_same(twice(x, y), supported(x, y))
    assert graphs_of(supported) == 1
    with pytest.raises(wick.UnsupportedError):
        wick.compile(wick.compile(unsupported), fullgraph=True)(x)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(x * 2 + 1)

    def method(self, x, y):
        return x * y - 1


def test_bound_method_lambda_module_and_compiled_module():
    x, y = inputs()
    net = Net()
    assert_same(wick.compile(net.method)(x, y), net.method(x, y))
    assert graphs_of(Net.method) == 1
    lam = lambda a, b: (a - b) * 3  # noqa: E731
    assert_same(wick.compile(lam)(x, y), lam(x, y))
    assert graphs_of(lam) == 1
    cm = wick.compile(net)
    assert_same(cm(x), net(x))
    assert graphs_of(Net.forward) == 1
    cm2 = wick.compile(cm, fullgraph=True)
    assert cm2._orig_mod is net
    assert_same(cm2(x), net(x))


def test_module_hooks_run_around_the_compiled_forward():
    x = inputs()[0]
    net = Net()
    calls = []
    net.register_forward_pre_hook(lambda m, args: (args[0] * 3,))
    net.register_forward_hook(lambda m, args, out: calls.append(1) or out - 1)
    want = net(x)
    cm = wick.compile(net)
    assert_same(cm(x), want)
    assert_same(cm(x), want)
    assert len(calls) == 3  # eager once, compiled twice
    assert graphs_of(Net.forward) == 1  # forward itself compiled, hooks run as Python


def test_compiled_module_calls_forward_directly_only_while_nothing_runs_between():
    """wick.compile(module)(x) skips nn.Module.__call__ while neither module
    has hooks and forward is unchanged; each change below takes the full
    path again and must give eager's result."""
    x = inputs()[0]
    net = Net()
    cm = wick.compile(net)
    assert _C._module_call_is_forward(net, Net.forward)
    assert_same(cm(x), net(x))
    assert_same(cm(x), net(x))
    calls = []
    h = cm.register_forward_hook(lambda m, args, out: calls.append("wrapper") or out + 1)
    assert_same(cm(x), net(x) + 1)
    h.remove()
    h = net.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    assert not _C._module_call_is_forward(net, Net.forward)
    assert_same(cm(x), net(x))
    h.remove()
    h = torch.nn.modules.module.register_module_forward_hook(lambda m, args, out: out * 5)
    try:
        assert not _C._module_call_is_forward(net, Net.forward)
        torch.testing.assert_close(cm(x), Net.forward(net, x) * 5 * 5)  # wrapper and module hooked
    finally:
        h.remove()
    net.forward = lambda t: t - 7  # shadowed on the instance
    assert_same(cm(x), x - 7)
    del net.forward
    assert_same(cm(x), net(x))
    assert calls == ["wrapper"]
    assert graphs_of(Net.forward) == 1


def test_compiled_module_sees_forward_replaced_on_the_class():
    class N(torch.nn.Module):
        def forward(self, x):
            return x * 2

    x = inputs()[0]
    n = N()
    cm = wick.compile(n)
    assert_same(cm(x), x * 2)
    N.forward = lambda self, x: x * 3
    assert not _C._module_call_is_forward(n, cm._wick_forward_fn)
    assert_same(cm(x), x * 3)


def test_callable_without_python_code_just_runs():
    assert wick.compile(len)([1, 2, 3]) == 3


# ---- backends ------------------------------------------------------------------

def test_backend_callable_receives_graph_module_and_examples():
    seen = []

    def my_backend(gm, example_inputs):
        seen.append((gm, [tuple(t.shape) for t in example_inputs]))
        return gm.forward

    for shape, dtype in [((3, 4), torch.float32), ((2, 5, 6), torch.float64), ((0, 4), torch.float32)]:
        x, y = inputs(shape, dtype)
        assert_same(wick.compile(supported, backend=my_backend)(x, y), supported(x, y))
    assert len(seen) == 3
    assert isinstance(seen[0][0], torch.fx.GraphModule) and seen[0][1] == [(3, 4), (3, 4)]


@pytest.mark.parametrize("backend", ["wick", "eager"])
def test_named_backends(backend):
    cf = wick.compile(supported, backend=backend)
    for shape in [(3, 4), (7,), ()]:
        x, y = inputs(shape)
        assert_same(cf(x, y), supported(x, y))
        xt = x.t() if x.dim() == 2 else x  # non-contiguous
        assert_same(cf(xt, xt), supported(xt, xt))
    assert graphs_of(supported) >= 3


def test_inductor_backend():
    pytest.importorskip("torch._inductor")
    x, y = inputs((5, 6))
    try:
        got = wick.compile(supported, backend="inductor")(x, y)
    except Exception as exc:  # no C++ toolchain for inductor here
        pytest.skip(f"inductor unavailable: {exc}")
    assert_same(got, supported(x, y))
    assert graphs_of(supported) == 1


# ---- try/except/finally around a compiled graph ----------------------------------

def guarded_add(x, y, log):
    try:
        z = x + y
    except RuntimeError:
        z = x - y
    finally:
        pass
    return z * 2


def flaky_backend(gm, example_inputs):
    """A graph that raises at run time for some inputs, as an extern op
    (cholesky of a matrix that is not positive definite, an index out of
    range) does."""
    def run(*args):
        if float(args[0].flatten()[0]) > 0:
            raise RuntimeError("graph failed at run time")
        return gm.forward(*args)
    return run


def test_exception_from_the_graph_runs_the_frame_eagerly():
    cf = wick.compile(guarded_add, backend=flaky_backend)
    errors = _C.hook_stats()["graph_errors"]
    for sign in (1, -1, 1):
        x, y = inputs()
        x[0, 0] = sign * 5.0
        assert_same(cf(x, y, None), guarded_add(x, y, None))
    assert graphs_of(guarded_add) == 1
    assert _C.hook_stats()["graph_errors"] == errors + 2


def test_try_finally_with_eager_exception_propagates_from_the_user_line():
    def f(x, y):
        try:
            return x + y
        finally:
            pass

    cf = wick.compile(f)
    x, y = inputs()
    assert_same(cf(x, y), f(x, y))
    with pytest.raises(RuntimeError, match="size"):
        cf(x, torch.randn(5))


# ---- a frame that always falls back stops re-interpreting new shapes ----------------

def test_always_falling_back_frame_is_not_reinterpreted_per_shape():
    compiles = _C.hook_stats()["compiles"]
    cf = wick.compile(unsupported)
    for n in range(1, 12):
        x = torch.randn(n, 3)
        assert_same(cf(x), unsupported(x))
    assert _C.hook_stats()["compiles"] - compiles == 2  # the second identical reason weakens
    (e,) = _C.code_entries(unsupported.__code__)
    assert e["eager"] and "item" in e["reason"]
    cf(torch.randn(2, 2, dtype=torch.float64))  # another dtype: still the same weak entry
    assert _C.hook_stats()["compiles"] - compiles == 2
