"""Graph breaks, the parts around the corpus (test_breaks.py): side effects
when the function raises midway, graph errors of a frame that breaks,
fullgraph=True, WICK_LOG=breaks, wick.explain, reuse of resume functions,
tracebacks, both sides of a data-dependent branch, open blocks, and a
module whose forward calls a submodule that breaks."""
import traceback

import pytest
import torch

import wick
import wick._C as C
from test_capture_util import *  # noqa: F401,F403  (fixtures and helpers)
from test_capture_util import RefGraph, assert_same, compiled, entries

THIS = __file__


class Box:
    pass


G = 0


def line_of(fn, text):
    import inspect

    lines, start = inspect.getsourcelines(fn)
    for i, l in enumerate(lines):
        if text in l:
            return start + i
    raise AssertionError(text)


def effects_then_raise(x, box, d):
    global G
    box.count = box.count + 1
    d["seen"] = x.sum()
    G = G + 1
    y = x * 2
    if x.shape[0] > 2:
        raise ValueError("too long")
    return y


def test_side_effects_kept_when_the_call_raises_midway():
    for fn in (effects_then_raise, compiled(effects_then_raise)):
        global G
        G = 0
        box, d = Box(), {"a": 1}
        box.count = 5
        with pytest.raises(ValueError, match="too long"):
            fn(torch.randn(3), box, d)
        assert box.count == 6 and set(d) == {"a", "seen"} and G == 1
    box, d = Box(), {}
    box.count = 0
    G = 0
    assert_same(compiled(effects_then_raise)(torch.ones(2), box, d), torch.ones(2) * 2)
    assert box.count == 1 and torch.equal(d["seen"], torch.tensor(2.0)) and G == 1


def prints_between(x, y):
    z = x * y
    print("wick-break-once")
    return z + 1


def test_graph_error_in_a_frame_that_breaks_reruns_it_eagerly_once(monkeypatch, capsys):
    def boom(self, *args):
        raise ValueError("boom from graph")

    monkeypatch.setattr(RefGraph, "__call__", boom)
    x, y = torch.randn(3), torch.randn(3)
    errors = C.hook_stats()["graph_errors"]
    assert_same(compiled(prints_between, "ref")(x, y), x * y + 1)
    # the graph failed before anything impure: the frame ran eagerly, once
    assert capsys.readouterr().out.count("wick-break-once") == 1
    assert C.hook_stats()["graph_errors"] == errors + 1
    (e,) = entries(prints_between)
    assert not e["eager"] and e["breaks"]


def test_base_exception_from_a_graph_before_a_break_propagates(monkeypatch, capsys):
    def interrupt(self, *args):
        raise KeyboardInterrupt

    monkeypatch.setattr(RefGraph, "__call__", interrupt)
    with pytest.raises(KeyboardInterrupt):
        compiled(prints_between, "ref")(torch.randn(3), torch.randn(3))
    assert "wick-break-once" not in capsys.readouterr().out


def test_fullgraph_names_reason_and_line():
    with pytest.raises(C.UnsupportedError) as info:
        compiled(prints_between, fullgraph=True)(torch.randn(3), torch.randn(3))
    assert "print" in str(info.value)
    assert str(info.value).endswith(f"{THIS}:{line_of(prints_between, 'print(')}")


def test_wick_log_breaks(monkeypatch, capfd):
    monkeypatch.setenv("WICK_LOG", "breaks")
    C.env_reload()
    try:
        compiled(prints_between)(torch.randn(3), torch.randn(3))
    finally:
        monkeypatch.delenv("WICK_LOG")
        C.env_reload()
    err = capfd.readouterr().err
    assert f"graph break in prints_between at {THIS}:{line_of(prints_between, 'print(')}" in err, err


def test_explain_lists_graphs_and_breaks(capsys):
    x, y = torch.randn(3), torch.randn(3)
    report = wick.explain(prints_between)(x, y)
    assert_same(report.result, x * y + 1)
    assert report.graph_count == 2  # before the break, and in the resume function
    (brk,) = report.breaks
    assert brk["file"] == THIS and brk["line"] == line_of(prints_between, "print(")
    assert "print" in brk["reason"] and report.fallback_reasons == []
    text = repr(report)
    assert "2 graph(s), 1 graph break(s)" in text and f"graph break at {THIS}:" in text


def test_resume_functions_are_reused_across_calls(capsys):
    cf = compiled(prints_between)
    x, y = torch.randn(3), torch.randn(3)
    cf(x, y)
    (e,) = entries(prints_between)
    (resume,) = e["breaks"][0]["resume"]
    compiles = C.hook_stats()["compiles"]
    for _ in range(5):
        cf(torch.randn(3), torch.randn(3))
    assert C.hook_stats()["compiles"] == compiles  # same signature: no new compiles
    (e,) = entries(prints_between)
    assert e["breaks"][0]["resume"] == [resume]
    assert len(C.code_entries(resume)) == 1 and C.code_entries(resume)[0]["graph_count"] == 1
    assert resume.co_qualname == "wick_resume_in_prints_between_at_%d" % line_of(prints_between, "print(")
    assert resume.co_name == "prints_between"  # what tracebacks show


def fails_after_break(x, y):
    z = x + 1
    print("wick-tb")
    return z @ y  # raises for mismatched shapes


def test_exception_after_a_break_carries_the_user_lines(capsys):
    with pytest.raises(RuntimeError) as info:
        compiled(fails_after_break)(torch.randn(3, 4), torch.randn(5, 2))
    frames = [(f.filename, f.lineno) for f in traceback.extract_tb(info.value.__traceback__)]
    assert (THIS, line_of(fails_after_break, "return z @ y")) in frames, frames


def sign_branch(x):
    y = x * 3
    if y.sum() > 0:
        z = y + 1
    else:
        z = y - 1
    return z * 2


def test_branch_on_a_tensor_takes_both_sides():
    cf = compiled(sign_branch)
    for x in (torch.ones(4), -torch.ones(4), torch.randn(5), torch.zeros(0)):
        assert_same(cf(x), sign_branch(x))
    (e,) = [e for e in entries(sign_branch) if e["breaks"]][:1]
    assert "data-dependent branch" in e["breaks"][0]["reason"]
    assert len(e["breaks"][0]["resume"]) == 2
    used = [r for r in e["breaks"][0]["resume"] if C.code_entries(r)]
    assert len(used) == 2  # each side compiled on its own


def while_on_tensor(x):
    while x.abs().sum() > 10:
        x = x * 0.5
    return x + 1


def test_while_on_a_tensor():
    cf = compiled(while_on_tensor)
    for x in (torch.full((4,), 100.0), torch.ones(4), torch.randn(3) * 50):
        assert_same(cf(x), while_on_tensor(x))


def no_grad_block(x):
    with torch.no_grad():
        y = x * 2
        print("wick-in-block")
    return y + 1


def try_block(x):
    try:
        y = x * 2
        print("wick-in-try")
    except RuntimeError:
        y = x
    return y + 1


def no_grad_block_raises(x):
    with torch.no_grad():
        y = x * 2
        print("wick-in-block")
        if y.shape[0] > 1:
            raise ValueError("inside the block")
    return y


def test_grad_blocks_are_entered_again_across_a_break(capsys):
    x = torch.randn(3)
    assert_same(compiled(no_grad_block)(x), no_grad_block(x))
    assert torch.is_grad_enabled()
    e = [e for e in entries(no_grad_block) if not e["eager"]][0]
    assert "print" in e["breaks"][0]["reason"]
    resume, handler = e["breaks"][0]["resume"]  # the rest of the block; the block's handler
    assert C.code_entries(resume)  # the rest of the block, captured
    assert not C.code_entries(handler)  # nothing raised: never ran
    with pytest.raises(ValueError, match="inside the block"):
        compiled(no_grad_block_raises)(x)
    assert torch.is_grad_enabled()  # the block's __exit__ ran on the way out
    with torch.no_grad():  # an outer mode other than the default
        assert_same(compiled(no_grad_block)(x), no_grad_block(x))
        assert not torch.is_grad_enabled()


def test_break_inside_a_try_block(capsys):
    x = torch.randn(3)
    assert_same(compiled(try_block)(x), try_block(x))
    (e,) = entries(try_block)
    assert not e["eager"] and e["graph_count"] == 1 and "print" in e["breaks"][0]["reason"]
    resume, handler = e["breaks"][0]["resume"]
    assert [r["graph_count"] for r in C.code_entries(resume)] == [1]  # the rest, captured


LOG = []


def raise_if_empty(a):
    LOG.append(a.numel())
    print("", end="")  # a break: the call runs in Python
    if a.numel() == 0:
        raise ValueError("empty")
    if a.numel() == 1:
        raise KeyError("one")
    return a.numel()


def try_except_finally(x):
    y = x * 2
    try:
        n = raise_if_empty(y)  # runs in Python: a break inside the try
        z = y + n
    except ValueError as e:
        LOG.append(str(e))
        z = y - 1
    finally:
        LOG.append("finally")
    return z.sin()


def test_exception_from_the_break_reaches_the_same_handler():
    """The instruction run in Python raises: its exception goes to the
    try's handler (run by a resume function), finally runs once, an
    exception no handler takes leaves with the user's traceback lines."""
    cf = compiled(try_except_finally)
    for shape in ((4,), (0,), (4,), (0, 3)):
        x = torch.randn(shape)
        LOG.clear()
        exp = try_except_finally(x)
        exp_log = list(LOG)
        LOG.clear()
        assert_same(cf(x), exp)
        assert LOG == exp_log, (LOG, exp_log)
    LOG.clear()
    with pytest.raises(KeyError) as info:
        cf(torch.randn(()))
    assert LOG == [1, "finally"]
    frames = [(f.name, f.lineno) for f in traceback.extract_tb(info.value.__traceback__)]
    call = line_of(try_except_finally, "n = raise_if_empty(y)")
    raised = line_of(raise_if_empty, 'raise KeyError("one")')
    # the frame's line once (the handler's resume re-raises), the callee's
    # raise last (the callee breaks too: its own frame and its resume's)
    assert frames[1] == ("try_except_finally", call) and frames[-1] == ("raise_if_empty", raised), frames
    assert frames.count(("try_except_finally", call)) == 1, frames
    (e,) = [e for e in entries(try_except_finally) if not e["eager"]][:1]
    resume, handler = e["breaks"][0]["resume"]
    assert C.code_entries(handler)  # the handler ran in its resume function


class Recorder:
    def __init__(self, suppress=()):
        self.log, self.suppress = [], suppress

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, et, ev, tb):
        self.log.append(("exit", et))
        return et in self.suppress


def user_cm(x, cm):
    y = x.cos()
    with cm as c:
        c.log.append("body")
        n = raise_if_empty(y)
        y = y * n
    return y + 1


def test_break_inside_a_user_context_manager():
    """BEFORE_WITH runs in Python (a break), the body is captured in the
    resume function, and an exception from the body reaches __exit__ once,
    which may suppress it."""
    cf = compiled(user_cm)
    for shape, suppress in (((3,), ()), ((0,), ()), ((0,), (ValueError,)), ((), (KeyError,)), ((5,), ())):
        x = torch.randn(shape)
        got_cm, exp_cm = Recorder(suppress), Recorder(suppress)
        try:
            exp, exp_err = user_cm(x, exp_cm), None
        except Exception as e:
            exp, exp_err = None, type(e)
        try:
            got, got_err = cf(x, got_cm), None
        except Exception as e:
            got, got_err = None, type(e)
        assert got_err is exp_err and got_cm.log == exp_cm.log, (got_cm.log, exp_cm.log)
        if exp is not None:
            assert_same(got, exp)
    graphs = [e["graph_count"] for e in entries(user_cm) if not e["eager"]]
    assert graphs and graphs[0] == 1  # x.cos() before the with block


def passes_an_int(x, k):
    y = x * 2
    print("wick-k", k)  # k is passed on, never computed with: unguarded
    return y + k


def test_unguarded_argument_at_a_break_is_the_calls(capsys):
    """An int argument capture only passes on is read from the argument at
    the break, not frozen to the first call's value (was a wrong result)."""
    cf = compiled(passes_an_int)
    for k in (0, 1, 2):
        x = torch.randn(3)
        assert_same(cf(x, k), passes_an_int(x, k))
    out = capsys.readouterr().out.split("\n")
    assert out[:6] == ["wick-k 0"] * 2 + ["wick-k 1"] * 2 + ["wick-k 2"] * 2, out


def after_block(x):
    with torch.no_grad():
        y = x * 2
    print("wick-after-block")
    return y + 1


def test_break_after_a_closed_block(capsys):
    x = torch.randn(3)
    assert_same(compiled(after_block)(x), after_block(x))
    (e,) = entries(after_block)
    assert not e["eager"] and e["breaks"]


class Noisy(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x) * 2
        print("wick-noisy")
        return y - 1


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Noisy()

    def forward(self, x):
        return self.inner(x * 3) + x


def test_submodule_that_breaks_is_captured_as_its_own_frame(capsys):
    m = Outer()
    x = torch.randn(4)
    fast = wick.compile(m)
    assert_same(fast(x), m(x))
    report = wick.explain(fast)(x)
    # Outer: graph before the call and after it; Noisy.forward: before and after its print
    assert report.graph_count == 4, report
    assert len(report.breaks) == 2
    assert C.code_entries(Noisy.forward.__code__), "the submodule's forward was not captured"


def shared_list(x):
    a = [x * 2]
    b = a
    print("wick-shared")
    b.append(x)
    return a[0] + a[1]


def test_a_list_shared_by_two_locals_never_breaks_into_two_lists(capsys):
    x = torch.randn(3)
    assert_same(compiled(shared_list)(x), shared_list(x))
    (e,) = entries(shared_list)
    assert e["eager"] and "print" in e["reason"]


def many_stack_items(x, y):
    return torch.stack([x, y, x * y, x + 1, torch.relu(x + float(print("wick-mid") is None)), y * 2]).sum(0)


def test_break_with_many_stack_items(capsys):
    x, y = torch.randn(3), torch.randn(3)
    assert_same(compiled(many_stack_items)(x, y), many_stack_items(x, y))
    (e,) = entries(many_stack_items)
    assert not e["eager"] and e["breaks"]


def make_counter(start):
    class Counter:
        def inc(self):
            nonlocal start
            start += 1
            return start

    return Counter()


def bumps_twice(c, t):
    a = c.inc()
    b = c.inc()
    return t * a + b


def test_nonlocal_writes_of_an_outside_closure_are_shared_and_replayed():
    # one cell seen by both inlined calls; its final value written back
    for fn in (bumps_twice, compiled(bumps_twice)):
        c = make_counter(0)
        assert_same(fn(c, torch.ones(2)), torch.full((2,), 3.0))
        assert c.inc() == 3


def sets_attr_in_try(o, x):
    y = x + 1
    try:
        o.foo = 12
    except AttributeError:
        return y * 2
    print("wick-set")
    return y


def test_attribute_write_python_refuses_is_not_modelled_as_done(capsys):
    x = torch.randn(3)
    assert_same(compiled(sets_attr_in_try)(object(), x), (x + 1) * 2)


def make_stepper(scale):
    count = 0

    def step(x):
        nonlocal count
        a = x.sin() * scale
        count += 1
        print("wick-step", count)  # a break in a closure: the resume function needs its cells
        return (a + count).cos()

    return step, (lambda: count)


def test_break_in_a_closure_uses_the_calls_cells(capsys):
    """Two closures of one code with equal cell contents share cache
    entries; each call's resume function is made over its own cells, and
    the nonlocal write goes to the caller's cell (was: the first closure's)."""
    x = torch.randn(4)
    (s1, g1), (s2, g2) = make_stepper(2.0), make_stepper(2.0)
    (e1, h1), (e2, h2) = make_stepper(2.0), make_stepper(2.0)
    for s, e in ((s1, e1), (s2, e2), (s1, e1), (s2, e2), (s2, e2)):
        assert_same(compiled(s)(x), e(x))
    assert (g1(), g2()) == (h1(), h2()) == (2, 3)
    (e,) = [e for e in entries(s1) if not e["eager"]][:1]
    assert e["graph_count"] == 1 and "print" in e["breaks"][0]["reason"]
    (resume,) = e["breaks"][0]["resume"]
    assert resume.co_freevars == s1.__code__.co_freevars
    assert [r["graph_count"] for r in C.code_entries(resume)][:1] == [1]


def appends(x, out):
    a = x.sin()
    out.append(a)
    b = a * 2
    out.append(b)
    out.append("tag")
    if x.shape[0] > 3:
        raise ValueError("too long")  # after the appends: they stay done
    return b


def appends_then_reads(x, out):
    out.append(x * 2)
    n = len(out)  # a read of the list: a break, the append replayed before it
    return x + n


def test_list_argument_appends_are_replayed_in_order():
    cf = compiled(appends)
    for n in (3, 5, 3, 0):
        x = torch.randn(n)
        exp, got = [1], [1]
        for fn, lst in ((appends, exp), (cf, got)):
            try:
                res = fn(x, lst)
            except ValueError:
                res = None
            if res is not None:
                assert res is lst[2]  # the very tensor appended is returned
        assert len(got) == len(exp) and got[0] == 1 and got[3] == "tag"
        assert_same(got[1], exp[1])
        assert_same(got[2], exp[2])
    (e,) = [e for e in entries(appends) if not e["eager"]][:1]
    assert e["graph_count"] == 1 and not e.get("breaks")  # one graph, the appends replayed
    lst = [0]
    assert_same(compiled(appends_then_reads)(torch.ones(2), lst), torch.ones(2) + 2)
    assert len(lst) == 2


def traceback_in_handler(x):
    y = x * 2
    try:
        print("wick-tb")
        raise IndexError()  # a raise inside the try: the handler runs in a resume function
    except IndexError as e:
        tb = e.__traceback__
        return y + (tb is not None and tb.tb_frame.f_code.co_name == "traceback_in_handler")


def test_handler_sees_the_traceback_eager_would(capsys):
    x = torch.randn(3)
    assert_same(compiled(traceback_in_handler)(x), traceback_in_handler(x))
    assert_same(compiled(traceback_in_handler)(x), x * 2 + 1)


class Plain:
    pass


def deletes(o, x):
    y = x * 2
    try:
        del o.maybe
    except AttributeError:
        return y - 1
    return y + 1


def test_deleting_an_attribute_the_frame_did_not_set_runs_in_python():
    """Whether `del o.maybe` raises depends on the object: it runs in
    Python (a break), never as a replayed no-op (was: no AttributeError)."""
    cf = compiled(deletes)
    for has in (False, True, False, True):
        o, p = Plain(), Plain()
        if has:
            o.maybe = p.maybe = 1
        assert_same(cf(o, torch.ones(2)), deletes(p, torch.ones(2)))
        assert not hasattr(o, "maybe") and not hasattr(p, "maybe")


def _forwarding_decorator(func):
    # as transformers' can_return_tuple: the compiled frame is this wrapper,
    # the model code is the function it forwards *args/**kwargs to
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapper


@_forwarding_decorator
def _work_then_break(x, *, scale):
    y = (x * scale).sin().sum(-1)
    print_sink.append(int(y.numel()))  # an outside list's append: replayed after the graph
    print("", end="")  # a break
    z = torch.nn.CrossEntropyLoss()
    return z(y.unsqueeze(0), torch.tensor([0])) + y.sum()


print_sink = []


def test_callee_behind_call_function_ex_is_captured_on_its_own():
    x = torch.randn(4, 5)
    want = _work_then_break(x, scale=2.0)
    got = compiled(_work_then_break)(x, scale=2.0)
    assert_same(got, want)
    inner = _work_then_break.__closure__[0].cell_contents
    assert inner.__name__ == "_work_then_break"
    # the wrapper broke at func(*args, **kwargs); the function it calls got
    # its own entries, with its tensor work in a graph before its own break
    assert any(e.get("graph_count") for e in entries(inner)), entries(inner)
