"""Loops capture cannot unroll: a while loop on a tensor's value, a loop
longer than capture unrolls, a loop over an iterator capture cannot model,
a break in the body. The frame splits before the loop and a driver calls
the body as a function of its own (csrc/capture/loops.c), captured with its
own cache entries and reused in every iteration: the body's tensor work is
compiled, with a bounded number of graphs however many iterations run.

Each function runs eagerly and through wick on several inputs (shapes,
dtypes, a non-contiguous one, an empty one, a 0-d one); results, the
state it leaves behind and the exceptions it raises must be eager's, also
when the body raises midway.
"""
import logging
import sys

import pytest
import torch

import wick
import wick._C as C
from test_capture_util import break_counts, dynamo_graph_count, entry_tree
from test_capture_util import fresh_wick  # noqa: F401  (the fixture pytestmark names)

OPTS = {"backend": "wick", "fullgraph": False, "dynamic": None, "mode": "default"}

log = logging.getLogger("wick.test.loops")
log.addHandler(logging.NullHandler())
log.propagate = False
# enabled for DEBUG: a tensor logged is formatted, so the call is a break
# (a logger not enabled for it answers isEnabledFor as a guarded constant
# and the call does nothing, in the graph as in eager)
log.setLevel(logging.DEBUG)


pytestmark = pytest.mark.usefixtures("fresh_wick")


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    out = [torch.randn(4, 6, generator=g), torch.randn(6, 4, generator=g).t(), torch.randn(5, generator=g),
           torch.randn(3, 2, 2, generator=g, dtype=torch.float64), torch.randn((), generator=g),
           torch.randn(0, 3, generator=g)]
    return out


def _same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(b, a, equal_nan=True)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for p, q in zip(a, b):
            _same(p, q)
    else:
        assert a == b, (a, b)


def _call(f, *args):
    try:
        return f(*args), None
    except Exception as e:  # the same exception, eager or compiled
        return None, (type(e), str(e))


def _body_codes(fn):
    codes, todo, seen = [], [fn.__code__], set()
    while todo:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        if c.co_qualname.startswith("wick_loop_body_in_"):
            codes.append(c)
        for e in C.code_entries(c):
            for b in e.get("breaks") or ():
                todo.extend(b["resume"])
                if b.get("callee") is not None:
                    todo.append(b["callee"])
    return codes


# ---- while on a tensor's value: unknown trip count ---------------------------------


def halve_until_small(x):
    x = x.abs() + 1
    while x.sum() > 1:
        x = x * 0.9 + 0.001
    return x.exp()


def while_no_work_before(x):
    while x.abs().sum() > 1:
        x = x * 0.9
    return x


def test_while_on_tensor_value_runs_100_iterations_with_bounded_graphs():
    cf = C.CompiledFunction(halve_until_small, OPTS)
    for x in _inputs():
        x = x * 200
        _same(cf(x), halve_until_small(x))
    codes = _body_codes(halve_until_small)
    assert len(codes) == 1
    # every input above runs dozens to hundreds of iterations; the body's
    # entries stay few (one per input shape and dtype), each with its graphs
    body = C.code_entries(codes[0])
    assert 1 <= len(body) <= 8 and all(not e["eager"] for e in body), body
    assert all(e["graph_count"] >= 1 for e in body)
    x = torch.full((50,), 2.0)
    n_before = len(C.code_entries(codes[0]))
    _same(cf(x), halve_until_small(x))
    assert len(C.code_entries(codes[0])) == n_before + 1  # a new shape: one more, reused ~500 times


def test_while_without_work_before_still_compiles_the_body():
    cf = C.CompiledFunction(while_no_work_before, OPTS)
    for x in _inputs(1):
        x = x * 50
        _same(cf(x), while_no_work_before(x))
    graphs, breaks, eager = break_counts(while_no_work_before)
    assert graphs >= 1 and eager == 0
    assert _body_codes(while_no_work_before)


# ---- for loops: longer than unrolled, over iterators capture cannot model ------------


def long_range(x, y):
    a = x * 2
    for _ in range(3000):
        a = a * 0.5 + y  # contracting: rounding does not pile up over 3000 steps
    return a


def over_list(x, ws):
    a = x.sin()
    for w in ws:  # a list argument: unrolled up to 64 items, a loop past that
        a = torch.tanh(a * w + 0.1)
    return a.sum(), a


def over_iterator(x, it):
    a = x
    for t in it:
        a = a + t.cos()
    return a


def test_loop_longer_than_unrolled():
    cf = C.CompiledFunction(long_range, OPTS)
    for x in _inputs(2)[:4]:
        y = torch.randn(x.shape, dtype=x.dtype)
        _same(cf(x, y), long_range(x, y))
    codes = _body_codes(long_range)
    assert len(codes) == 1
    body = C.code_entries(codes[0])
    # 3000 iterations per call, 4 calls: one entry per input kind
    assert 1 <= len(body) <= 4 and all(not e["eager"] and e["graph_count"] == 1 for e in body), body
    assert "more than 1024 iterations" in str([b["reason"] for e in C.code_entries(long_range.__code__)
                                               for b in e.get("breaks") or ()])


def test_loop_over_a_list_argument():
    # a list argument of up to 64 items is read item by item, its length
    # guarded (one entry per length, the loop unrolled); a longer one runs
    # the loop, its body compiled as a function of its own
    cf = C.CompiledFunction(over_list, OPTS)
    x = _inputs(3)[0]
    for n in (0, 1, 7, 1, 7):
        ws = [torch.randn(x.shape) for _ in range(n)]
        _same(cf(x, ws), over_list(x, ws))
    top = [e for e in C.code_entries(over_list.__code__) if not e["eager"]]
    assert len(top) == 3 and all(e["graph_count"] == 1 and not e.get("breaks") for e in top)
    assert not _body_codes(over_list)
    for x in _inputs(3)[:3]:
        ws = [torch.randn(x.shape) for _ in range(100)]
        _same(cf(x, ws), over_list(x, ws))
    body = C.code_entries(_body_codes(over_list)[0])
    assert 1 <= len(body) <= 3 and all(not e["eager"] for e in body)


def test_loop_over_a_generator_argument():
    cf = C.CompiledFunction(over_iterator, OPTS)
    for x in _inputs(4)[:3]:
        ts = [torch.randn(x.shape) for _ in range(20)]
        _same(cf(x, (t for t in ts)), over_iterator(x, (t for t in ts)))
        _same(cf(x, iter(ts)), over_iterator(x, iter(ts)))


# ---- breaks in the body, exits, locals ----------------------------------------------


def body_breaks(x, n):
    a = x + 1
    acc = []
    for i in range(n):
        a = a * 0.5 + 1
        log.debug("step %s", a)  # a break in the body (a tensor logged): its graphs before and after
        a = a.cos()
        acc.append(2)
    return a, acc


def with_exits(x, limit):
    a = x.abs()
    steps = 0
    found = None
    for t in [x * 2, x - 1, x.exp(), x * 0]:
        a = a + t
        if a.sum() > limit:  # a tensor condition: a branch in the body
            found = a
            break
        if limit < -100:
            return a, -1, None
        steps = 1
    else:
        steps = 2
    return a, steps, found


def raises_midway(x, boxes):
    a = x
    k = 0
    while a.abs().sum() > 0.01:
        a = a * 0.5
        boxes.append(a.clone())  # a list argument: replayed after the body's graph
        if len(boxes) > 5:
            raise ValueError("too many")
    return a, k


def continue_and_else(x):
    out = x
    i = 0
    while True:
        out = out * 0.9
        if out.abs().sum() > 1:
            continue
        i = 3
        break
    return out, i


def test_break_inside_body_and_its_resume_are_reused():
    cf = C.CompiledFunction(body_breaks, OPTS)
    for x in _inputs(5)[:4]:
        for n in (0, 1, 40):
            _same(cf(x, n), body_breaks(x, n))
    codes = _body_codes(body_breaks)
    assert len(codes) == 1
    # the loop counter i is never read: entries do not grow with iterations
    ents = C.code_entries(codes[0])
    assert len(ents) <= 4 and all(len(e.get("breaks") or ()) == 1 for e in ents)


@pytest.mark.parametrize("limit", [-1000.0, -1.0, 0.0, 3.0, 1e9])
def test_exits_break_return_else(limit):
    cf = C.CompiledFunction(with_exits, OPTS)
    for x in _inputs(6)[:4]:
        _same(cf(x, limit), with_exits(x, limit))


def test_raise_midway_leaves_eager_state():
    cf = C.CompiledFunction(raises_midway, OPTS)
    for x in _inputs(7):
        for scale in (0.001, 1.0, 100.0):
            b1, b2 = [], []
            got = _call(cf, x * scale, b1)
            exp = _call(raises_midway, x * scale, b2)
            assert got[1] == exp[1]
            if exp[1] is None:
                _same(got[0], exp[0])
            _same(b1, b2)


def test_while_true_with_continue_and_break():
    cf = C.CompiledFunction(continue_and_else, OPTS)
    for x in _inputs(8):
        _same(cf(x * 30), continue_and_else(x * 30))


# ---- refused loops run eagerly, still right --------------------------------------------


def maybe_unbound(x, n):
    for i in range(n):
        if i:
            y = prev * 2  # noqa: F821 - bound from the second iteration on
        prev = x + i
        print(end="")
    return prev


def nested(x, n):
    a = x
    for i in range(n):
        for j in range(3):
            a = a * 0.9 + j
            print(end="")
        a = a.sin()
    return a


def test_refused_or_nested_loops_stay_right():
    for fn, argsets in [(maybe_unbound, [(torch.randn(3), 0), (torch.randn(3), 4)]),
                        (nested, [(torch.randn(3), 0), (torch.randn(2, 3), 5)])]:
        cf = C.CompiledFunction(fn, OPTS)
        for args in argsets:
            _same(_call(cf, *args), _call(fn, *args))


def test_traceback_shows_the_body_line():
    def boom(x, n):
        a = x
        for i in range(n):
            a = a + 1
            print(end="")
            if i == 2:
                a = a @ torch.ones(7, 7)  # shape error in the 3rd iteration
        return a

    cf = C.CompiledFunction(boom, OPTS)
    with pytest.raises(RuntimeError) as ei:
        cf(torch.randn(3, 3), 5)
    lines = [f.lineno + 1 for f in ei.traceback]  # pytest counts from 0
    assert boom.__code__.co_firstlineno + 6 in lines


# ---- counts against PyTorch's capture ---------------------------------------------------

def _dynamo_graphs(fn, *args):
    return dynamo_graph_count(lambda compile: compile(fn)(*args))


# (graphs, breaks) of the first call; more_than_dynamo: where PyTorch's
# capture makes fewer graphs by unrolling what wick does not (3000
# iterations into one graph; a list
# of tensors built in the frame, whose loop breaks on a tensor branch that
# PyTorch's capture runs eagerly after one graph)
COUNTS = [
    (halve_until_small, lambda x: (x * 200,), (2, 3), False),
    (while_no_work_before, lambda x: (x * 50,), (2, 3), False),
    (body_breaks, lambda x: (x, 5), (3, 2), False),
    (continue_and_else, lambda x: (x * 30,), (1, 2), False),
    (long_range, lambda x: (x, x), (2, 1), True),
    (over_list, lambda x: (x, [x] * 7), (1, 0), False),
    (with_exits, lambda x: (x, 3.0), (2, 2), True),
]


@pytest.mark.parametrize("fn,make,expect,more", COUNTS, ids=[c[0].__name__ for c in COUNTS])
def test_counts_against_pytorch_capture(fn, make, expect, more):
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(9))
    cf = C.CompiledFunction(fn, OPTS)
    _same(cf(*make(x)), fn(*make(x)))
    graphs, breaks, eager = break_counts(fn)
    assert (graphs, breaks) == expect and eager == 0
    dyn = _dynamo_graphs(fn, *make(x))
    if dyn and not more:
        assert graphs <= dyn, (graphs, dyn)
    if more:
        assert graphs > dyn  # the gap above is real: drop the flag when it closes


# ---- loops inside open blocks: the driver keeps them, the body runs inside -------------

EVENTS = []


def loop_in_no_grad(x, w):
    y = x * w
    with torch.no_grad():
        while y.abs().sum() > 1:
            y = y * 0.5 + w * 0
    return y, y.requires_grad


def loop_raising_in_try(x, n):
    a = x + 1
    try:
        for i in range(n):
            a = a * 2
            print(end="")
            if i == 3:
                raise KeyError("k")
    except KeyError:
        a = a - 100
    finally:
        EVENTS.append(1)
    return a


def return_from_loop_in_try(x, n):
    a = x.sin()
    try:
        for i in range(n):
            a = a + 1
            print(end="")
            if a.sum() > 10:
                return a, "early"
    finally:
        EVENTS.append(2)
    return a, "late"


def raise_inside_body_in_try(x, w, n):
    a = x
    try:
        for i in range(n):
            a = a * 2
            print(end="")
            a = a @ w  # raises when w's shape does not fit: inside the body
    except RuntimeError:
        return a, "caught"  # the handler reads a, which the body wrote
    return a, "done"


@pytest.mark.parametrize("fn,args", [
    (raise_inside_body_in_try, lambda: (torch.randn(3, 3), torch.randn(3, 3) * 0.1, 4)),
    (raise_inside_body_in_try, lambda: (torch.randn(3, 3), torch.randn(4, 4), 4)),
    (loop_in_no_grad, lambda: (torch.randn(5, requires_grad=True) * 10, torch.randn(5, requires_grad=True))),
    (loop_raising_in_try, lambda: (torch.randn(3), 2)),
    (loop_raising_in_try, lambda: (torch.randn(2, 3), 6)),
    (return_from_loop_in_try, lambda: (torch.randn(3), 20)),
    (return_from_loop_in_try, lambda: (torch.randn(3), 1)),
], ids=["handler_reads_no_raise", "handler_reads_raise", "no_grad", "try_no_raise", "try_raise", "return_early",
        "return_late"])
def test_loops_inside_blocks(fn, args):
    cf = C.CompiledFunction(fn, OPTS)
    for _ in range(2):
        a = args()
        EVENTS.clear()
        exp = _call(fn, *a)
        exp_events = list(EVENTS)
        EVENTS.clear()
        got = _call(cf, *a)
        assert got[1] == exp[1] and EVENTS == exp_events
        if exp[1] is None:
            _same(got[0], exp[0])
    graphs, breaks, eager = break_counts(fn)
    if fn is return_from_loop_in_try and sys.version_info >= (3, 12):
        # a known gap on 3.12: the resume function at the loop gets the range
        # iterator on its stack and its loop is refused, so it runs eagerly
        # (results and events above still equal eager's)
        assert eager >= 1
    elif fn in (raise_inside_body_in_try, loop_raising_in_try, loop_in_no_grad):
        # the handler around the loop reads a local the body writes (the
        # except clause; after a with block, the code its __exit__ would
        # continue at if it suppressed the exception): the loop runs eagerly,
        # with its frame or in a resume function after a graph
        assert eager >= 1
    else:
        assert graphs >= 2 and breaks >= 2 and eager == 0
