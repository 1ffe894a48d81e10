"""Modules with forward pre-hooks and forward hooks, and the hook
registries read as values.

A hooked module's call is nn.Module._call_impl's: each pre-hook in order
may replace the positional arguments (registered with_kwargs: the
arguments and the keywords), forward runs, each forward hook in order may
replace the result. Capture inlines the hooks; the registries' keys (in
their OrderedDict order) and the hooks themselves are guarded, so
registering, removing or reordering a hook recompiles (the guards hold the
hooks weakly: a removed hook is freed). A hook that is a bound method of the
user's object is inlined with that object as self. A hook that
appends to a global's or a closure's list (collecting features) has its
appends replayed after the graph. Backward hooks and torch's global module
hooks still run the module eagerly. The registries
(`m._forward_hooks` ...) read as dicts answer len(), truth and iteration,
which nn.TransformerEncoderLayer's fast-path check asks of every submodule.
"""
import pytest
import torch
import torch.nn as nn

import wick
from test_capture_util import *  # noqa: F401,F403
from test_breaks_inplace import t


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))


def doubled(module, args, out):
    return out * 2


def shifted(module, args):
    return args[0] + 1  # not a tuple: becomes the only argument


def observer(module, args, out):
    assert out.shape[-1] == 8  # returns None: the result is kept


def narrowed(module, args, kwargs):
    return (args[0] - 0.5,), kwargs


def tanh_after(module, args, kwargs, out):
    return out.tanh() + args[0].mean()


def hooked(seed=0):
    m = mlp(seed)
    m[1].register_forward_hook(doubled)
    m[1].register_forward_hook(observer)
    m[2].register_forward_pre_hook(shifted)
    m[0].register_forward_pre_hook(narrowed, with_kwargs=True)
    m[0].register_forward_hook(tanh_after, with_kwargs=True)
    return m


@pytest.mark.parametrize("shape,transposed", [((3, 8), False), ((2, 5, 8), False), ((0, 8), False), ((8, 7), True)])
def test_hooks_run_inside_one_graph(shape, transposed):
    m = hooked()
    wick.reset()
    f = wick.compile(m)
    x = t(*shape, seed=1)
    x = x.t() if transposed else x  # (7, 8), not contiguous
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x))
    assert stats_counts() == (1, 0, 0), wick.stats()


def test_gradients_through_hooks():
    me, mc = hooked(), hooked()
    wick.reset()
    f = wick.compile(mc)
    x = t(4, 8, seed=2)
    me(x).square().sum().backward()
    f(x).square().sum().backward()
    for (n, a), b in zip(me.named_parameters(), mc.parameters()):
        torch.testing.assert_close(b.grad, a.grad, msg=n)
    assert stats_counts() == (1, 0, 0), wick.stats()


def test_removing_and_adding_hooks_recompiles():
    m = mlp()
    wick.reset()
    f = wick.compile(m)
    x = t(3, 8, seed=3)
    h = m[1].register_forward_hook(doubled)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x))
        h.remove()
        torch.testing.assert_close(f(x), m(x))
        m[2].register_forward_pre_hook(shifted)
        torch.testing.assert_close(f(x), m(x))
    assert stats_counts() == (3, 0, 0), wick.stats()


def test_hook_order_is_guarded():
    m = mlp()
    wick.reset()
    f = wick.compile(m)
    x = t(3, 8, seed=4)
    m[0].register_forward_hook(lambda mod, a, o: o * 3)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x))
        # prepend=True moves the new hook to the front of the OrderedDict
        m[0].register_forward_hook(lambda mod, a, o: o.sigmoid(), prepend=True)
        torch.testing.assert_close(f(x), m(x))


def test_many_hooks_keep_their_ids():
    # hook ids past 256 are ints that are new objects on every read
    m = mlp()
    handles = [m[1].register_forward_hook(observer) for _ in range(300)]
    for h in handles[:-1]:
        h.remove()
    wick.reset()
    f = wick.compile(m)
    x = t(3, 8, seed=5)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(f(x), m(x))
    assert stats_counts() == (1, 0, 0), wick.stats()


def test_backward_hook_runs_the_module_eagerly():
    me, mc = mlp(), mlp()
    seen = []
    for m in (me, mc):
        m[2].register_full_backward_hook(lambda mod, gi, go: seen.append(go[0].shape))
    wick.reset()
    f = wick.compile(mc)
    x = t(3, 8, seed=6)
    me(x).sum().backward()
    f(x).sum().backward()
    assert seen == [torch.Size([3, 4])] * 2
    for a, b in zip(me.parameters(), mc.parameters()):
        torch.testing.assert_close(b.grad, a.grad)
    assert any("backward hooks" in r for r in wick.stats()["break_reasons"]), wick.stats()


def test_global_hook_runs_the_module_eagerly():
    m = mlp()
    calls = []
    h = nn.modules.module.register_module_forward_hook(lambda mod, a, o: calls.append(type(mod).__name__))
    try:
        wick.reset()
        f = wick.compile(m)
        x = t(3, 8, seed=7)
        with torch.no_grad():
            torch.testing.assert_close(f(x), m(x))
        assert calls.count("Linear") == 4, calls
    finally:
        h.remove()


def count_hooks(module, x):
    n = 0
    for sub in module.modules():
        n += len(getattr(sub, "_forward_hooks", {})) + len(sub._forward_pre_hooks)
    return x * n if any(len(s._forward_hooks) for s in module.children()) else x - n


def test_registries_answer_len_and_truth():
    m = mlp()
    f = compiled(count_hooks)
    x = t(2, 3)
    torch.testing.assert_close(f(m, x), count_hooks(m, x))
    one_graph(count_hooks)
    m[1].register_forward_hook(observer)
    m[0].register_forward_pre_hook(shifted)
    torch.testing.assert_close(f(m, x), count_hooks(m, x))
    torch.testing.assert_close(f(m, x), x * 2)


def test_transformer_encoder_is_one_graph():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    exp, got, c = module_twice_no_grad(enc, t(2, 5, 32, seed=8))
    torch.testing.assert_close(got, exp, rtol=1e-5, atol=1e-5)
    assert c == (1, 0, 0), wick.stats()


FEATURES = []


def collect(module, args, out):
    FEATURES.append(out)


def test_feature_collecting_hooks_are_one_graph():
    # appends to a global list and to a closure's list: replayed after the graph
    m = mlp()
    local = []
    m[1].register_forward_hook(collect)
    m[2].register_forward_hook(lambda mod, a, o: local.append((o, o.shape[0])))
    wick.reset()
    f = wick.compile(m)
    FEATURES.clear()
    x = t(3, 8, seed=8)
    with torch.no_grad():
        exp = m(x)
        for _ in range(3):
            torch.testing.assert_close(f(x), exp)
    assert len(FEATURES) == len(local) == 4
    for feat, (out, n) in zip(FEATURES, local):
        torch.testing.assert_close(feat, FEATURES[0])
        torch.testing.assert_close(out, exp)
        assert n == 3
    assert FEATURES[1] is not FEATURES[2]  # a new tensor per call, as eager's
    assert stats_counts() == (1, 0, 0), wick.stats()


class Scaler:
    """A hook registered as a bound method of the user's own object."""

    def __init__(self):
        self.payload = torch.randn(1000)

    def hook(self, module, args, out):
        return out * 3 - 1


def test_bound_method_hook_is_inlined_and_not_kept_alive():
    import gc
    import weakref

    m = mlp(3)
    scaler = Scaler()
    handle = m[0].register_forward_hook(scaler.hook)
    wick.reset()
    f = wick.compile(m)
    for shape in [(3, 8), (0, 8)]:
        x = t(*shape, seed=4)
        with torch.no_grad():
            torch.testing.assert_close(f(x), m(x))
    assert stats_counts() == (2, 0, 0), wick.stats()
    # the compiled entries' guards hold the hook weakly: removed and dropped, it is freed
    ref = weakref.ref(scaler)
    handle.remove()
    del scaler
    gc.collect()
    assert ref() is None
    x = t(3, 8, seed=5)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x))


class Collector:
    def __init__(self):
        self.feats = []

    def hook(self, module, args, out):
        self.feats.append(out)  # a write to the object's own list: a break, exact


def test_feature_collecting_bound_method_hook_stays_exact():
    m = mlp(4)
    col = Collector()
    m[1].register_forward_hook(col.hook)
    f = wick.compile(m)
    x = t(2, 8, seed=6)
    with torch.no_grad():
        want = m(x)
        want_feats = list(col.feats)
        col.feats.clear()
        for _ in range(2):
            col.feats.clear()
            torch.testing.assert_close(f(x), want)
            assert len(col.feats) == 1
            torch.testing.assert_close(col.feats[0], want_feats[0])
