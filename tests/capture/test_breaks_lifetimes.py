"""Object lifetimes across graph breaks: an object dies exactly when it dies
eagerly, neither earlier nor later.

Eager Python keeps a value while a local holds it (until the local is
overwritten, deleted, or the frame ends) or while it sits on the stack. A
frame split at a break must do the same: the resume function gets every
bound local (a dead one too: a weakref or finalizer can tell), and neither
the transformed code, nor the original frame it runs in place of, nor the
stack of the resume call keeps a reference after the values are handed
over (a call through the eval hook is not inlined by CPython).

Each function takes objects only it holds (popped from a list) and logs,
at probes that are breaks themselves, which of them are still alive; the
log must equal eager's, and so must the tensor results. The
graph count is asserted and never above PyTorch's capture of the function.
"""
import gc
import weakref

import pytest
import torch

import wick
import wick._C as C
from test_capture_util import OPTS, break_counts
from test_capture_util import fresh_wick  # noqa: F401  (the fixture pytestmark names)


class Obj:
    """A plain object the test holds weakrefs to."""


def alive(refs):
    """A probe, run at a break (the weakref calls are C calls): which of the
    objects are still alive after a collection."""
    gc.collect()
    return [r() is not None for r in refs]


def dead_local_kept(x, objs, refs, log):
    # o is never read after it is made, but eager holds it until `o = None`
    o = objs.pop()
    t = x * 2
    log.append(alive(refs))
    t = t + 1
    o = None
    log.append(alive(refs))
    return t.sin()


def proxy_like_test_set(x, objs, refs, log):
    # CPython's test_set.test_weakref, with tensor work around it
    s = set("gallahad")
    p = weakref.proxy(s)
    y = x + 1
    log.append(str(p) == str(s))
    s = None
    gc.collect()
    try:
        str(p)
        log.append("alive")
    except ReferenceError:
        log.append("dead")
    return y * 3


def stack_value_dies(x, objs, refs, log):
    # the popped object sits on the stack across the break at alive() and
    # dies with the list that holds it
    y = x.cos()
    n = len([objs.pop(), alive(refs)])
    log.append(alive(refs))
    return y - n


def reassigned_in_resume(x, objs, refs, log):
    a = objs.pop()
    b = objs.pop()
    y = x * x
    log.append(alive(refs))
    a = b
    log.append(alive(refs))
    b = None
    log.append(alive(refs))
    del a
    log.append(alive(refs))
    return y + 1


def branch_on_tensor(x, objs, refs, log):
    o = objs.pop()
    y = x.abs()
    if y.sum() >= 0:  # a break: a branch on the tensor's value
        o = None
    z = y * 2
    log.append(alive(refs))
    return z


def in_try_block(x, objs, refs, log):
    y = x + 2
    try:
        o = objs.pop()
        log.append(alive(refs))
        o = None
        log.append(alive(refs))
        z = y * 2
    finally:
        log.append(alive(refs))
    return z


def handler_drops(x, objs, refs, log):
    y = x - 1
    o = objs.pop()
    try:
        int("not a number")  # a break that raises, caught by this frame
    except ValueError:
        log.append(alive(refs))
        o = None
    log.append(alive(refs))
    return y * 2


def two_breaks_in_resume(x, objs, refs, log):
    # o1 reaches the first resume function as an argument: the frame that
    # resume function runs in place of must let go of it at the next break
    o1 = objs.pop()
    y = x + 1
    log.append(alive(refs))
    o2 = objs.pop()
    o1 = None
    y = y * 2
    log.append(alive(refs))
    o2 = None
    log.append(alive(refs))
    return y


CASES = [
    (dead_local_kept, 3),
    (proxy_like_test_set, 1),
    (stack_value_dies, 2),
    (reassigned_in_resume, 2),
    (branch_on_tensor, 2),
    (in_try_block, 2),
    (handler_drops, 1),
    (two_breaks_in_resume, 2),
]


def dynamo_graphs(fn, make_args):
    import torch._dynamo

    n = [0]

    def counting(gm, example_inputs):
        n[0] += 1
        return gm.forward

    torch._dynamo.reset()
    try:
        torch.compile(fn, backend=counting)(*make_args())
    except Exception:
        pass
    torch._dynamo.reset()
    return n[0]


pytestmark = pytest.mark.usefixtures("fresh_wick")


def _args(shape, dtype):
    objs = [Obj(), Obj()]
    refs = [weakref.ref(o) for o in objs]
    return torch.randn(shape, dtype=dtype), objs, refs, []


@pytest.mark.parametrize("fn,expected_graphs", CASES, ids=[f.__name__ for f, _ in CASES])
def test_lifetimes_match_eager(fn, expected_graphs):
    cf = C.CompiledFunction(fn, OPTS)
    first = None
    for shape, dtype in [((4, 5), torch.float32), ((3,), torch.float64), ((0, 2), torch.float32),
                         ((), torch.float32)]:
        x, objs, refs, log = _args(shape, dtype)
        exp = fn(x, objs, refs, log)
        del objs
        exp_log = log
        _, objs, refs, log = _args(shape, dtype)
        got = cf(x, objs, refs, log)
        del objs
        assert log == exp_log
        assert alive(refs) == [False, False]
        torch.testing.assert_close(got, exp)
        if first is None:
            first = break_counts(fn)
    graphs, breaks, eager = first
    assert breaks >= 1 and graphs == expected_graphs, (first, fn.__name__)
    dyn = dynamo_graphs(fn, lambda: _args((4, 5), torch.float32))
    if dyn:
        assert graphs <= dyn, (first, dyn)
