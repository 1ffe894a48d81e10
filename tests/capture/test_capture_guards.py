"""Guards: a compiled entry is reused exactly when its checks pass, and a
change of dtype, shape, stride, requires_grad/grad mode, Python value, type or
global binding compiles a new entry (results stay right throughout)."""
import os

import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403  (fixtures and helpers)
from test_capture_util import assert_same, compiled, entries, graphs


def f_add(x, y):
    return x * 2 + y


def test_hit_then_recompile_on_dtype_shape_stride():
    cf = compiled(f_add, "ref")
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    assert_same(cf(x, y), f_add(x, y))
    assert_same(cf(torch.randn(4, 5), torch.randn(4, 5)).shape, torch.Size([4, 5]))
    assert len(entries(f_add)) == 1  # same signature: a hit

    xd = x.double()
    assert_same(cf(xd, y), f_add(xd, y))  # dtype
    assert len(entries(f_add)) == 2
    x6 = torch.randn(4, 6)
    y6 = torch.randn(6)
    assert_same(cf(x6, y6), f_add(x6, y6))
    n = len(entries(f_add))
    assert n == 3  # shape of x and y
    xt = torch.randn(5, 4).t()
    assert_same(cf(xt, y), f_add(xt, y))  # stride
    assert len(entries(f_add)) == n + 1
    assert all(not e["eager"] and e["graph_count"] == 1 for e in entries(f_add))
    # every variant still hits its own entry
    for a, b in [(x, y), (xd, y), (xt, y)]:
        assert_same(cf(a, b), f_add(a, b))
    assert len(entries(f_add)) == n + 1


def test_recompile_on_requires_grad_and_grad_mode():
    cf = compiled(f_add, "ref")
    w = torch.randn(3, requires_grad=True)
    y = torch.randn(3)
    with torch.no_grad():
        r = cf(w, y)
        assert_same(r, f_add(w, y))
        assert not r.requires_grad
    (e,) = entries(f_add)
    assert not e["eager"] and e["graph_count"] == 1
    assert any(g.startswith("GRAD_MODE disabled") for g in e["guards"])
    r = cf(w, y)  # grad mode on: a second entry, whose graph runs with autograd
    assert r.requires_grad and r.grad_fn is not None
    r.sum().backward()
    assert torch.equal(w.grad, torch.full((3,), 2.0))
    es = entries(f_add)
    assert len(es) == 2 and not es[0]["eager"] and es[0]["graph_count"] == 1
    assert any(g.startswith("GRAD_MODE enabled") for g in es[0]["guards"])
    with torch.no_grad():  # the first entry is still found
        assert not cf(w, y).requires_grad
    assert len(entries(f_add)) == 2
    assert len(entries(f_add)) == 2


def f_scale(x, a):
    return x * a


def test_recompile_on_python_values_and_types():
    cf = compiled(f_scale, "ref")
    x = torch.randn(3)
    for a in (2, 2, 3, 2.0, True, -0.0, 0.0, float("nan"), float("nan")):
        assert_same(cf(x, a), f_scale(x, a))
    es = entries(f_scale)
    # 2, 3, 2.0 (type differs from 2), True, -0.0, 0.0 (sign differs), nan (bitwise equal nans hit)
    assert len(es) == 7, [e["guards"] for e in es]
    assert all(not e["eager"] for e in es)


SCALE = 2.0
ACT = torch.relu


def f_global(x):
    return ACT(x) * SCALE


def test_recompile_on_global_change():
    global SCALE, ACT
    cf = compiled(f_global, "ref")
    x = torch.randn(5)
    try:
        assert_same(cf(x), f_global(x))
        SCALE = 3.0
        assert_same(cf(x), torch.relu(x) * 3.0)
        ACT = torch.tanh
        assert_same(cf(x), torch.tanh(x) * 3.0)
        assert len(entries(f_global)) == 3
        assert all(not e["eager"] for e in entries(f_global))
    finally:
        SCALE, ACT = 2.0, torch.relu


def test_parameter_and_subclass_types():
    cf = compiled(f_add, "ref")
    p = torch.nn.Parameter(torch.randn(3))
    y = torch.randn(3)
    with torch.no_grad():
        assert_same(cf(p, y), f_add(p.detach(), y))
    (e,) = entries(f_add)
    assert any("TYPE_MATCH L['x'] Parameter" in g for g in e["guards"])
    assert_same(cf(p.detach(), y), f_add(p.detach(), y))  # plain tensor: another entry
    assert len(entries(f_add)) == 2


def test_guard_failure_reason_logged(capfd):
    old = os.environ.get("WICK_LOG")
    os.environ["WICK_LOG"] = "recompiles"
    C.env_reload()
    try:
        cf = compiled(f_add, "ref")
        cf(torch.randn(4, 5), torch.randn(4, 5))
        cf(torch.randn(4, 6), torch.randn(4, 6))
        cf(torch.randn(4, 6).double(), torch.randn(4, 6))
    finally:
        if old is None:
            os.environ.pop("WICK_LOG")
        else:
            os.environ["WICK_LOG"] = old
        C.env_reload()
    err = capfd.readouterr().err
    assert "L['x'] size mismatch: expected [4, 6], got [4, 5]" in err or \
        "L['x'] size mismatch: expected [4, 5], got [4, 6]" in err, err
    assert "dtype mismatch" in err, err


def test_cache_limit_runs_eagerly_and_stays_right():
    cf = compiled(f_add, "ref")
    for n in range(1, 12):
        x, y = torch.randn(n), torch.randn(n)
        assert_same(cf(x, y), f_add(x, y))
    es = entries(f_add)
    assert sum(not e["eager"] for e in es) == 8
    assert any("cache limit" in (e.get("reason") or "") for e in es)


def test_guards_listed_cheapest_first():
    cf = compiled(f_global, "ref")
    cf(torch.randn(2, 3))
    (e,) = entries(f_global)
    kinds = [g.split()[0] for g in e["guards"]]
    assert kinds[0] == "TYPE_MATCH" and kinds[-1] == "TENSOR_MATCH"
    assert "GLOBAL_MATCH" in kinds
    t = [g for g in e["guards"] if g.startswith("TENSOR_MATCH")][0]
    assert "dtype=torch.float32" in t and "sizes=[2, 3]" in t and "strides=[3, 1]" in t


WEIGHT = torch.randn(5)


def f_global_tensor(x):
    return x * WEIGHT + 1, WEIGHT


def test_global_tensor_is_read_per_call_and_guarded():
    global WEIGHT
    saved = WEIGHT
    cf = compiled(f_global_tensor, "ref")
    x = torch.randn(3, 5)
    try:
        r = cf(x)
        assert_same(r, f_global_tensor(x))
        assert r[1] is WEIGHT  # returned unchanged: the global itself
        (e,) = entries(f_global_tensor)
        assert "G['WEIGHT']" in e["graph"]
        WEIGHT.mul_(2)  # in-place update: seen without recompiling
        assert_same(cf(x), f_global_tensor(x))
        WEIGHT = torch.randn(5)  # rebound, same metadata: same entry
        r = cf(x)
        assert_same(r, f_global_tensor(x))
        assert r[1] is WEIGHT
        assert len(entries(f_global_tensor)) == 1
        WEIGHT = torch.randn(3, 1)  # other shape: recompiles
        assert_same(cf(x), f_global_tensor(x))
        assert len(entries(f_global_tensor)) == 2
        del WEIGHT  # eager raises NameError, so does the compiled function
        with pytest.raises(NameError):
            cf(x)
    finally:
        WEIGHT = saved


def no_grad_block(x, w):
    with torch.no_grad():
        y = x * w
        with torch.enable_grad():
            z = y + 1
    return y.sum(), z


def no_grad_return(x, w):
    with torch.no_grad():
        return x * w


def grad_after_block(x, w):
    with torch.no_grad():
        y = x * 2
    return y * w


def test_no_grad_blocks():
    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    for fn in (no_grad_block, no_grad_return):
        r, e = compiled(fn)(x, w), fn(x, w)
        assert_same(r, e)
        (en,) = entries(fn)
        assert not en["eager"] and en["graph_count"] == 1
        assert not any(t.requires_grad for t in (r if isinstance(r, tuple) else (r,)))
    r = compiled(grad_after_block)(x, w)  # w used with grad on: autograd through FX
    assert_same(r, grad_after_block(x, w))
    assert r.requires_grad
    r.sum().backward()
    assert torch.equal(w.grad, x * 2)
    (en,) = entries(grad_after_block)
    assert not en["eager"] and en["via_fx"]
    # the ref backend runs torch ops with autograd on: the graph switches
    # grad mode off around the block's nodes, as the frame did
    C.reset()
    for fn in (no_grad_return, grad_after_block):
        r = compiled(fn, "ref")(x, w)
        assert_same(r, fn(x, w))
        assert r.requires_grad == fn(x, w).requires_grad
        (en,) = entries(fn)
        assert not en["eager"] and torch.is_grad_enabled()
