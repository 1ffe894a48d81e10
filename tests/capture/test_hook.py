"""The PEP 523 frame hook of wick._C (csrc/capture/hook.c, frame.c), driven by
the test-only compiler: `_C._set_test_compiler(fn)` makes every cache miss
call fn(code, args) -> None (run eagerly) or (new_code_or_None, guard_or_None
[, flags[, reason]]). A guard returns true (pass), false, or a str (fails,
the str is the reason). Without flags, test entries are ENTRY_IMPURE: an
exception raised by the new code propagates instead of re-running the
original frame eagerly.

Torch-free: runs on every CPython that tests/run_pyversions.sh finds (3.11,
3.12, 3.13). Where the hook cannot transform frames (HOOK_CAN_TRANSFORM == 0,
an interpreter newer than frame.c knows), CompiledFunction still calls the
function, eagerly; the tests that need transforms are skipped there.
"""
import asyncio
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
import traceback
import types

import pytest

from wick import _C

CAN = bool(_C.HOOK_CAN_TRANSFORM)
needs_hook = pytest.mark.skipif(not CAN, reason="frame transform not supported on this Python")


class Recorder:
    """A test compiler: replacement code per original code, optional guard."""

    def __init__(self, table=None, guard=None, decline=False):
        self.table = table or {}
        self.guard = guard
        self.decline = decline
        self.calls = []

    def __call__(self, code, args):
        self.calls.append((code, args))
        if self.decline:
            return None
        new = self.table.get(code)
        guard = self.guard(code, args) if self.guard else None
        return (new, guard)


@pytest.fixture(autouse=True)
def clean_hook():
    _C.reset()
    _C._set_test_compiler(None)
    assert _C.set_enabled(False) is False
    yield
    _C._set_test_compiler(None)
    assert _C.set_enabled(False) is False, "a test left the hook enabled"
    _C.reset()


def compiled(fn, table=None, **kw):
    rec = Recorder(table, **kw)
    _C._set_test_compiler(rec)
    return _C.CompiledFunction(fn, {"test": True}), rec


# ---- plain replacement ------------------------------------------------------

def sub(a, b):
    return a - b


def add_instead(a, b):
    return a + b


@needs_hook
def test_replaces_plain_function():
    cf, rec = compiled(sub, {sub.__code__: add_instead.__code__})
    assert cf(10, 3) == 13
    assert cf(1, 2) == 3
    assert sub(10, 3) == 7  # not enabled outside the CompiledFunction
    assert len(rec.calls) == 1 and rec.calls[0] == (sub.__code__, (10, 3))
    st = _C.hook_stats()
    assert st["compiles"] >= 1 and st["hits"] >= 1
    assert _C.code_entries(sub.__code__) == [{"eager": False}]


def test_compiled_function_attributes_and_eager_fallback():
    cf, rec = compiled(sub, decline=True)
    assert cf.__wrapped__ is sub
    assert cf.__name__ == "sub" and cf.__qualname__ == "sub"
    assert cf(5, 2) == 3
    if CAN:
        assert _C.code_entries(sub.__code__) == [{"reason": "test compiler declined", "eager": True}]
        assert len(rec.calls) == 1
        assert cf(7, 2) == 5 and len(rec.calls) == 1  # the eager entry is a hit
    assert "CompiledFunction" in repr(cf)


def test_enabled_state_restored_even_on_exceptions():
    def raiser(x):
        raise KeyError(x)
    cf, _ = compiled(raiser, decline=True)
    with pytest.raises(KeyError):
        cf(1)
    assert _C.set_enabled(False) is False
    _C.set_enabled(True)
    with pytest.raises(KeyError):
        cf(2)
    assert _C.set_enabled(False) is True


@needs_hook
def test_method_binding():
    class A:
        def __init__(self, k):
            self.k = k

        def m(self, x):
            return self.k * x

    def m_alt(self, x):
        return self.k + x

    A.cm = _C.CompiledFunction(A.m, {})
    _C._set_test_compiler(Recorder({A.m.__code__: m_alt.__code__}))
    a = A(10)
    assert a.cm(3) == 13
    assert A.cm(a, 4) == 14
    assert a.m(3) == 30


# ---- argument layouts -------------------------------------------------------

def make_adder(n):
    def add(x):
        return x + n
    return add


def make_alt_adder(n):
    def add(x):
        return x + 100 * n
    return add


@needs_hook
def test_closures_keep_their_own_cells():
    f3, f4 = make_adder(3), make_adder(4)
    alt = make_alt_adder(0).__code__
    assert alt.co_freevars == f3.__code__.co_freevars == ("n",)
    cf3, rec = compiled(f3, {f3.__code__: alt})
    cf4 = _C.CompiledFunction(f4, {"test": True})  # equal options: shared entries
    assert cf3(1) == 301
    assert cf4(1) == 401  # same code object, same entry, its own closure
    assert len(rec.calls) == 1


def cell_arg(x, y):
    def inner():
        return x * 10
    return inner() + y


def cell_arg_alt_plain(x, y):
    return x * 1000 + y


def cell_arg_alt_cell(x, y):
    def inner():
        return x * 100
    return inner() + y


@needs_hook
@pytest.mark.parametrize("alt", [cell_arg_alt_plain, cell_arg_alt_cell])
def test_cell_arguments(alt):
    assert "x" in cell_arg.__code__.co_cellvars
    cf, _ = compiled(cell_arg, {cell_arg.__code__: alt.__code__})
    assert cf(2, 1) == alt(2, 1)
    assert cf(3, y=4) == alt(3, 4)
    assert cell_arg(2, 1) == 21


def varargs(a, b=2, *args, k, m=5, **kw):
    return ("orig", a, b, args, k, m, kw)


def varargs_alt(a, b=2, *args, k, m=5, **kw):
    return ("alt", a, b, args, k, m, kw)


@needs_hook
def test_varargs_kwargs_kwonly_defaults():
    cf, rec = compiled(varargs, {varargs.__code__: varargs_alt.__code__})
    assert cf(1, k=3) == ("alt", 1, 2, (), 3, 5, {})
    assert cf(1, 9, 8, 7, k=3, m=4, z=0) == ("alt", 1, 9, (8, 7), 3, 4, {"z": 0})
    assert cf(a=1, k=2, q=3) == ("alt", 1, 2, (), 2, 5, {"q": 3})
    # the compiler and guards see the frame's argument slots, defaults applied
    assert rec.calls[0][1] == (1, 2, 3, 5, (), {})


def layout_a(a, b):
    return a


def layout_b(a, *b):
    return b


@needs_hook
def test_incompatible_layout_runs_eagerly_with_reason():
    cf, _ = compiled(layout_a, {layout_a.__code__: layout_b.__code__})
    assert cf(1, 2) == 1
    [entry] = _C.code_entries(layout_a.__code__)
    assert entry["eager"] is True and "argument layout" in entry["reason"]


# ---- nested frames, exceptions, recursion -----------------------------------

def inner_fn(x):
    return x + 1


def inner_alt(x):
    return x + 1000


def outer_fn(x):
    return inner_fn(x) * 2


def outer_alt(x):
    return inner_fn(x) * 3


@needs_hook
def test_nested_marked_frames():
    _C.CompiledFunction(inner_fn, {})
    cf, rec = compiled(outer_fn, {outer_fn.__code__: outer_alt.__code__,
                                  inner_fn.__code__: inner_alt.__code__})
    assert cf(1) == 3003
    assert {c for c, _ in rec.calls} == {outer_fn.__code__, inner_fn.__code__}
    assert outer_fn(1) == 4


def user_raises(x):
    return x


def alt_raises(x):
    y = x + 1  # noqa: F841 (inspected through the traceback)
    raise ValueError("from new code")


@needs_hook
def test_exception_in_new_code_keeps_traceback():
    new = alt_raises.__code__.replace(co_name="user_raises", co_qualname="user_raises")
    cf, _ = compiled(user_raises, {user_raises.__code__: new})

    def caller():
        return cf(41)

    with pytest.raises(ValueError, match="from new code") as ei:
        caller()
    frames = traceback.extract_tb(ei.value.__traceback__)
    assert [f.name for f in frames][-2:] == ["caller", "user_raises"]
    assert frames[-1].filename == __file__
    tb = ei.value.__traceback__
    while tb.tb_next:
        tb = tb.tb_next
    fr = tb.tb_frame
    assert fr.f_code is new
    assert fr.f_locals == {"x": 41, "y": 42}
    assert fr.f_back.f_code.co_name == "caller"  # linked to the real caller
    assert fr.f_back.f_back is not None
    del fr, tb, ei
    gc.collect()


def getframe_user():
    return None


def getframe_alt():
    return sys._getframe(1).f_code.co_name


@needs_hook
def test_getframe_inside_new_code_sees_caller():
    cf, _ = compiled(getframe_user, {getframe_user.__code__: getframe_alt.__code__})

    def the_caller():
        return cf()

    assert the_caller() == "the_caller"


def rec_fn(n):
    return 0 if n == 0 else rec_fn(n - 1) + 1


def rec_alt(n):
    return 0 if n == 0 else rec_fn(n - 1) + 2


@needs_hook
def test_recursion_500_deep():
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 3000))
    try:
        cf, rec = compiled(rec_fn, {rec_fn.__code__: rec_alt.__code__})
        top = _C._datastack_top()
        assert cf(500) == 1000
        assert cf(500) == 1000
        assert _C._datastack_top() == top
        assert len(rec.calls) == 1
    finally:
        sys.setrecursionlimit(old)


def compile_error_user(x):
    return x


@needs_hook
def test_compiler_exception_propagates():
    def bad_compiler(code, args):
        raise RuntimeError("compiler says no")
    _C._set_test_compiler(bad_compiler)
    cf = _C.CompiledFunction(compile_error_user, {})
    arg = object()
    before = sys.getrefcount(arg)
    top = _C._datastack_top()
    for _ in range(200):
        with pytest.raises(RuntimeError, match="compiler says no"):
            cf(arg)
    assert sys.getrefcount(arg) == before
    assert _C._datastack_top() == top
    assert _C.code_entries(compile_error_user.__code__) == []


@needs_hook
def test_guard_exception_propagates():
    def guard_factory(code, args):
        def guard(a):
            if a[0] == "explode":
                raise LookupError("guard blew up")
            return a[0] == args[0]
        return guard
    cf, _ = compiled(compile_error_user, {compile_error_user.__code__: add_instead.__code__.replace(
        co_varnames=("x",), co_argcount=1, co_nlocals=1, co_code=compile_error_user.__code__.co_code)},
        guard=guard_factory)
    assert cf(1) == 1
    with pytest.raises(LookupError):
        cf("explode")
    assert cf(1) == 1


# ---- generators, coroutines -------------------------------------------------

def gen_fn(n):
    for i in range(n):
        yield i * 2


async def coro_fn(x):
    await asyncio.sleep(0)
    return x + 1


def gen_user(n):
    return list(gen_fn(n))


def test_generators_and_coroutines_pass_through():
    rec = Recorder({})
    _C._set_test_compiler(rec)
    cg = _C.CompiledFunction(gen_fn, {})
    cc = _C.CompiledFunction(coro_fn, {})
    g = cg(4)
    assert list(g) == [0, 2, 4, 6]
    g = cg(10)
    assert next(g) == 0
    with pytest.raises(KeyError):
        g.throw(KeyError("k"))
    g = cg(10)
    next(g)
    g.close()
    assert asyncio.run(cc(41)) == 42
    cu = _C.CompiledFunction(gen_user, {})
    assert cu(3) == [0, 2, 4]
    assert all(c is not gen_fn.__code__ and c is not coro_fn.__code__ for c, _ in rec.calls)
    assert _C.code_entries(gen_fn.__code__) == []


# ---- threads ----------------------------------------------------------------

def thr_user(x):
    return x * 2


def thr_alt(x):
    return x * 3


@needs_hook
def test_flag_is_per_thread():
    cf, _ = compiled(thr_user, {thr_user.__code__: thr_alt.__code__})
    assert cf(1) == 3
    stop = threading.Event()
    bad = []

    def other():
        while not stop.is_set():
            for i in range(100):
                if thr_user(i) != i * 2:
                    bad.append(i)

    t = threading.Thread(target=other)
    t.start()
    try:
        _C.set_enabled(True)  # enabled in this thread only
        for i in range(3000):
            assert thr_user(i) == i * 3
    finally:
        _C.set_enabled(False)
        stop.set()
        t.join()
    assert not bad


@needs_hook
def test_eight_threads_hammering():
    cf, rec = compiled(thr_user, {thr_user.__code__: thr_alt.__code__},
                       guard=lambda code, args: (lambda a, t=type(args[0]): type(a[0]) is t))
    errors = []
    barrier = threading.Barrier(8)

    def work(k):
        try:
            barrier.wait()
            for i in range(2000):
                v = i if (i + k) % 2 else float(i)
                if cf(v) != v * 3:
                    errors.append((k, i))
                if thr_user(v) != v * 2:
                    errors.append(("raw", k, i))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert 2 <= len(_C.code_entries(thr_user.__code__)) <= 8
    assert _C.hook_stats()["enabled_threads"] == 0


# ---- tracing ----------------------------------------------------------------

def traced_user(x):
    return x + 1


def traced_alt(x):
    return x + 50


@needs_hook
def test_settrace_active():
    cf, _ = compiled(traced_user, {traced_user.__code__: traced_alt.__code__})
    seen = []

    def tracer(frame, event, arg):
        # the tracer calls the marked function: tracer frames pass through
        seen.append((event, frame.f_code.co_name, traced_user(1)))
        return tracer

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        r = cf(1)
    finally:
        sys.settrace(old)
    assert r == 51
    assert seen and all(v == 2 for _, _, v in seen)
    assert any(name == "traced_alt" or name == "traced_user" for _, name, _ in seen)


# ---- guards, recompiles, cache limit, reset ---------------------------------

def guarded(x):
    return x


def guarded_alt(x):
    return ("compiled", x)


def _value_guard(code, args):
    want = args[0]
    return lambda a: a[0] == want


@needs_hook
def test_guard_failure_recompiles():
    cf, rec = compiled(guarded, {guarded.__code__: guarded_alt.__code__}, guard=_value_guard)
    assert cf(1) == ("compiled", 1)
    assert cf(1) == ("compiled", 1)
    assert len(rec.calls) == 1
    assert cf(2) == ("compiled", 2)
    assert len(rec.calls) == 2
    assert cf(1) == ("compiled", 1) and cf(2) == ("compiled", 2)
    assert len(rec.calls) == 2
    assert len(_C.code_entries(guarded.__code__)) == 2


@needs_hook
def test_cache_limit_then_eager_with_reason():
    cf, rec = compiled(guarded, {guarded.__code__: guarded_alt.__code__}, guard=_value_guard)
    for v in range(8):
        assert cf(v) == ("compiled", v)
    assert len(rec.calls) == 8
    assert cf(100) == 100  # ninth variant: eager
    assert cf(101) == 101
    assert len(rec.calls) == 8
    entries = _C.code_entries(guarded.__code__)
    assert len(entries) == 9
    assert entries[-1]["eager"] and set(entries[-1]) == {"reason", "eager"}
    reason = entries[-1]["reason"]
    assert reason.startswith("cache limit reached (8 entries): guarded (")
    assert f"{__file__}:{guarded.__code__.co_firstlineno}) has 8 compiled variants" in reason
    assert reason.endswith("failed on: test guard returned false")
    assert all(e == {"eager": False} for e in entries[:-1])
    assert cf(3) == ("compiled", 3)  # old entries still hit
    st = _C.hook_stats()
    assert st["eager_runs"] >= 2


@needs_hook
def test_reset_clears_entries():
    cf, rec = compiled(guarded, {guarded.__code__: guarded_alt.__code__})
    assert cf(1) == ("compiled", 1)
    assert len(_C.code_entries(guarded.__code__)) == 1
    _C.reset()
    assert _C.code_entries(guarded.__code__) == []
    assert cf(1) == ("compiled", 1)
    assert len(rec.calls) == 2


@needs_hook
def test_reset_inside_guard_is_safe():
    def guard_factory(code, args):
        def guard(a):
            _C.reset()  # frees entries while the hook walks them
            return False
        return guard
    cf, rec = compiled(guarded, {guarded.__code__: guarded_alt.__code__}, guard=guard_factory)
    for i in range(20):
        assert cf(i) == ("compiled", i)
    assert len(rec.calls) == 20


# ---- leaks ------------------------------------------------------------------

def leak_user(a, b, *args, **kw):
    return a


def leak_alt(a, b, *args, **kw):
    return b


@needs_hook
def test_no_reference_leaks_over_10000_calls():
    cf, _ = compiled(leak_user, {leak_user.__code__: leak_alt.__code__},
                     guard=lambda code, args: (lambda a: True))
    a, b, c = object(), object(), object()
    cf(a, b, c, k=c)  # compile outside the measurement
    counts = lambda: (sys.getrefcount(a), sys.getrefcount(b), sys.getrefcount(c),
                      sys.getrefcount(leak_user), sys.getrefcount(leak_user.__code__),
                      sys.getrefcount(leak_alt.__code__), sys.getrefcount(cf))
    before = counts()
    top = _C._datastack_top()
    gc.collect()
    nobj = len(gc.get_objects())
    for _ in range(10000):
        assert cf(a, b, c, k=c) is b
    gc.collect()
    assert counts() == before
    assert _C._datastack_top() == top
    assert len(gc.get_objects()) - nobj < 50


@needs_hook
def test_no_leaks_with_exceptions_and_eager_entries():
    cf, _ = compiled(user_raises, {user_raises.__code__: alt_raises.__code__})
    x = 12345678
    with pytest.raises(ValueError):
        cf(x)  # compile (the recorder keeps the arguments) outside the measurement
    before = sys.getrefcount(x), sys.getrefcount(user_raises.__code__)
    for _ in range(2000):
        try:
            cf(x)
        except ValueError:
            pass
    gc.collect()
    after = sys.getrefcount(x), sys.getrefcount(user_raises.__code__)
    assert after == before
    cf2, _ = compiled(sub, decline=True)
    cf2(0, 0)
    before = sys.getrefcount(sub.__code__)
    for i in range(2000):
        assert cf2(i, 1) == i - 1
    after = sys.getrefcount(sub.__code__)  # (pytest's assert rewriting would hold a ref)
    assert after == before


def test_marked_code_dies_cleanly():
    for _ in range(50):
        ns = {}
        exec("def f(x):\n    return x + 1\n", ns)
        cf = _C.CompiledFunction(ns["f"], {"opt": 1})
        _C._set_test_compiler(Recorder({}))
        assert cf(1) == 2
        del cf, ns
    gc.collect()


# ---- interpreter shutdown ---------------------------------------------------

def test_exit_with_hook_enabled():
    script = textwrap.dedent("""
        import threading
        from wick import _C
        def f(x):
            return x
        _C._set_test_compiler(lambda code, args: None)
        cf = _C.CompiledFunction(f, {})
        class D:
            def __del__(self):
                cf(1)   # runs during teardown
        d = D()
        def spin():
            _C.set_enabled(True)
            for i in range(1000):
                f(i)
        t = threading.Thread(target=spin); t.start(); t.join()
        _C.set_enabled(True)   # left enabled on purpose
        assert cf(3) == 3
        print("done")
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "done"


# ---- more hazards: profilers, monitoring, signals, finalizers, logging -------

@needs_hook
def test_setprofile_active():
    cf, _ = compiled(traced_user, {traced_user.__code__: traced_alt.__code__})
    seen = []

    def prof(frame, event, arg):
        if event == "call":
            seen.append(traced_user(1))  # profiler frames pass through

    sys.setprofile(prof)
    try:
        r = cf(1)
    finally:
        sys.setprofile(None)
    assert r == 51
    assert seen and all(v == 2 for v in seen)


@needs_hook
@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_sys_monitoring_active():
    cf, _ = compiled(traced_user, {traced_user.__code__: traced_alt.__code__})
    mon = sys.monitoring
    tool = mon.PROFILER_ID
    seen = []

    def on_start(code, offset):
        seen.append((code.co_name, traced_user(1)))

    mon.use_tool_id(tool, "wick-test")
    try:
        mon.register_callback(tool, mon.events.PY_START, on_start)
        mon.set_events(tool, mon.events.PY_START)
        r = cf(1)
        mon.set_events(tool, 0)
    finally:
        mon.register_callback(tool, mon.events.PY_START, None)
        mon.free_tool_id(tool)
    assert r == 51
    assert seen and all(v == 2 for _, v in seen)


@needs_hook
def test_keyboard_interrupt_in_compiler_propagates():
    def compiler(code, args):
        raise KeyboardInterrupt
    _C._set_test_compiler(compiler)
    cf = _C.CompiledFunction(guarded, {})
    with pytest.raises(KeyboardInterrupt):
        cf(1)
    assert _C.code_entries(guarded.__code__) == []


class Finalized:
    def __del__(self):
        FINALIZED.append(thr_user(5))


FINALIZED = []


def fin_user(x):
    return x


def fin_alt(x):
    o = Finalized()
    del o  # __del__ runs a marked function inside the transformed frame
    return x + 1


@needs_hook
def test_finalizer_inside_new_code():
    _C.CompiledFunction(thr_user, {})
    cf, _ = compiled(fin_user, {fin_user.__code__: fin_alt.__code__,
                                thr_user.__code__: thr_alt.__code__})
    FINALIZED.clear()
    assert cf(1) == 2
    assert FINALIZED == [15]


def test_log_recompiles_and_configurable_limit():
    if not CAN:
        pytest.skip("frame transform not supported on this Python")
    script = textwrap.dedent("""
        from wick import _C
        def g(x):
            return x
        def alt(x):
            return -x
        def compiler(code, args):
            want = args[0]
            return (alt.__code__, lambda a: a[0] == want)
        _C._set_test_compiler(compiler)
        cf = _C.CompiledFunction(g, {})
        print([cf(i) for i in range(5)])
        print(_C.code_entries(g.__code__)[-1])
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["WICK_LOG"] = "recompiles"
    env["WICK_CACHE_LIMIT"] = "3"
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "[0, -1, -2, 3, 4]"
    assert "cache limit reached (3 entries)" in out[1] and "'eager': True" in out[1]
    assert r.stderr.count("[wick:recompiles] recompiling g") == 2
    assert "test guard returned false" in r.stderr
    assert "cache limit reached (3 entries)" in r.stderr


def test_thread_exiting_while_enabled_does_not_keep_the_hook():
    cf, _ = compiled(sub, decline=True)

    def leave_enabled():
        _C.set_enabled(True)
        sub(1, 1)

    t = threading.Thread(target=leave_enabled)
    t.start()
    t.join()
    # join() can return before the OS thread has run its exit destructors;
    # any later toggle under the GIL settles the count
    for _ in range(200):
        assert cf(3, 1) == 2
        st = _C.hook_stats()
        if st["enabled_threads"] == 0:
            break
        time.sleep(0.01)
    assert st["enabled_threads"] == 0 and st["installed"] is False


# ---- compile options belong to the compiled function -----------------------

def opt_user(x):
    return x


def opt_alt(x):
    return ("alt", x)


@needs_hook
def test_options_keep_their_own_entries():
    calls = []

    def compiler(code, args):
        calls.append(args)
        return (opt_alt.__code__, None) if len(calls) == 1 else None

    _C._set_test_compiler(compiler)
    a = _C.CompiledFunction(opt_user, {"fullgraph": False})
    b = _C.CompiledFunction(opt_user, {"fullgraph": True})
    assert a(1) == ("alt", 1)
    assert b(1) == 1  # not a's entry: the compiler ran again, and declined
    assert len(calls) == 2
    assert a(2) == ("alt", 2) and b(2) == 2
    assert len(calls) == 2
    # equal options share entries, whatever the dict object
    c = _C.CompiledFunction(opt_user, {"fullgraph": False})
    assert c(3) == ("alt", 3) and len(calls) == 2
    assert len(_C.code_entries(opt_user.__code__)) == 2


@needs_hook
def test_inner_compiled_call_uses_its_own_options():
    seen = []

    def compiler(code, args):
        seen.append(code.co_name)
        return None

    _C._set_test_compiler(compiler)
    inner = _C.CompiledFunction(opt_user, {"which": "inner"})

    def outer(x):
        return inner(x)

    outer_cf = _C.CompiledFunction(outer, {"which": "outer"})
    assert outer_cf(5) == 5
    assert inner(6) == 6
    assert seen == ["outer", "opt_user"]  # inner under its own options once
    assert len(_C.code_entries(opt_user.__code__)) == 1


@needs_hook
def test_compiling_compiled_functions_methods_lambdas_partials_callables():
    import functools

    class Box:
        def __init__(self, k):
            self.k = k

        def scale(self, x):
            return x * self.k

        def __call__(self, x):
            return x + self.k

    seen = []

    def compiler(code, args):
        seen.append(code.co_name)
        return None

    _C._set_test_compiler(compiler)
    cf = _C.CompiledFunction(opt_user, {"a": 1})
    again = _C.CompiledFunction(cf, {"a": 2})
    assert again._fn is opt_user and again.options == {"a": 2}
    assert again(7) == 7
    lam = _C.CompiledFunction(lambda x, y=2: x * y, {})
    assert lam(3) == 6 and lam(3, y=4) == 12
    box = Box(10)
    assert _C.CompiledFunction(box.scale, {})(2) == 20
    assert _C.CompiledFunction(box, {})(2) == 12
    assert _C.CompiledFunction(functools.partial(Box.scale, box), {})(3) == 30
    assert _C.CompiledFunction(len, {})([1, 2]) == 2  # no Python code: just runs
    assert seen == ["opt_user", "<lambda>", "scale", "__call__"]


# ---- recompile and cache-limit messages --------------------------------------

def test_recompile_message_names_the_first_failing_entry():
    if not CAN:
        pytest.skip("frame transform not supported on this Python")
    script = textwrap.dedent("""
        from wick import _C
        def g(x):
            return x
        def compiler(code, args):
            want = args[0]
            return (None, lambda a: a[0] == want or f"x != {want}", 0)
        _C._set_test_compiler(compiler)
        cf = _C.CompiledFunction(g, {})
        print([cf(i) for i in range(4)])
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["WICK_LOG"] = "recompiles"
    env["WICK_CACHE_LIMIT"] = "3"
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[0, 1, 2, 3]"
    lines = [ln for ln in r.stderr.splitlines() if "[wick:recompiles]" in ln]
    # entries are tried newest first: the first failure is the newest entry's
    assert lines[0].endswith("x != 0") and "recompiling g" in lines[0], lines
    assert lines[1].endswith("x != 1") and "recompiling g" in lines[1], lines
    limit = [ln for ln in lines if "cache limit reached" in ln]
    assert len(limit) == 1, lines
    assert "cache limit reached (3 entries): g (<string>:3) has 3 compiled variants" in limit[0]
    assert limit[0].endswith("failed on: x != 2")


# ---- eager entries that do not depend on the arguments' metadata -------------

def weak_user(x):
    return x


def weak_alt(x):
    return ("compiled", x)


@needs_hook
def test_repeated_fallback_reason_weakens_guards_to_types():
    calls = []

    def compiler(code, args):
        calls.append(args[0])
        want = args[0]
        return (None, lambda a: a[0] == want, 0, "unsupported thing at f.py:3")

    _C._set_test_compiler(compiler)
    cf = _C.CompiledFunction(weak_user, {})
    assert cf(1) == 1 and cf(2) == 2  # second miss, same reason: weakened
    weakened = _C.hook_stats()["weakened"]
    for v in range(3, 50):
        assert cf(v) == v
    assert calls == [1, 2]
    assert _C.hook_stats()["weakened"] == weakened
    (e,) = _C.code_entries(weak_user.__code__)  # the redundant first entry is gone
    assert e["eager"] and e["reason"] == "unsupported thing at f.py:3"
    assert "argument types only" in e["guards"][0]
    assert cf("a string") == "a string"  # another type: compiled again
    assert calls == [1, 2, "a string"]


@needs_hook
def test_different_fallback_reasons_keep_their_guards():
    calls = []

    def compiler(code, args):
        calls.append(args[0])
        want = args[0]
        return (None, lambda a: a[0] == want, 0, f"shape {want} unsupported")

    _C._set_test_compiler(compiler)
    cf = _C.CompiledFunction(weak_user, {})
    for v in (1, 2, 3, 1, 2, 3):
        assert cf(v) == v
    assert calls == [1, 2, 3]
    assert _C.hook_stats()["weakened"] == 0 or len(_C.code_entries(weak_user.__code__)) == 3


@needs_hook
def test_args_independent_flag_weakens_at_once_and_compiled_entries_still_win():
    calls = []

    def compiler(code, args):
        calls.append(args[0])
        want = args[0]
        if want == 0:
            return (weak_alt.__code__, lambda a: a[0] == 0, 0)
        return (None, lambda a: a[0] == want, _C.ENTRY_ARGS_INDEPENDENT, "opcode X")

    _C._set_test_compiler(compiler)
    cf = _C.CompiledFunction(weak_user, {})
    assert cf(0) == ("compiled", 0)
    assert cf(1) == 1
    assert cf(2) == 2 and cf(3) == 3
    assert cf(0) == ("compiled", 0)  # the weak entry is last
    assert calls == [0, 1]


# ---- exceptions raised by the new code: the original runs eagerly ------------

def try_user(d):
    try:
        return d["key"]
    except KeyError:
        return "handled"
    finally:
        d["finally"] = d.get("finally", 0) + 1


def raising_alt(d):
    raise KeyError("from compiled code")


def interrupting_alt(d):
    raise KeyboardInterrupt


@needs_hook
@pytest.mark.parametrize("flags", [0, None])
def test_exception_in_pure_new_code_reruns_the_original(flags):
    table = {try_user.__code__: raising_alt.__code__}

    def compiler(code, args):
        return (table[code], None) if flags is None else (table[code], None, flags)

    _C._set_test_compiler(compiler)
    cf = _C.CompiledFunction(try_user, {})
    errors = _C.hook_stats()["graph_errors"]
    d = {}
    if flags is None:  # impure (the default of the test compiler): propagates
        with pytest.raises(KeyError, match="from compiled code"):
            cf(d)
        assert d == {}
        return
    top = _C._datastack_top()
    assert cf(d) == "handled" and d == {"finally": 1}  # the handlers ran, once
    assert cf({"key": 5}) == 5
    assert _C.hook_stats()["graph_errors"] == errors + 2
    assert _C._datastack_top() == top
    # no reference leaks on this path
    before = sys.getrefcount(d), sys.getrefcount(try_user.__code__)
    for _ in range(3000):
        cf(d)
    gc.collect()
    assert (sys.getrefcount(d), sys.getrefcount(try_user.__code__)) == before
    assert d["finally"] == 3001


@needs_hook
def test_base_exception_in_new_code_propagates():
    _C._set_test_compiler(lambda code, args: (interrupting_alt.__code__, None, 0))
    cf = _C.CompiledFunction(try_user, {})
    d = {}
    with pytest.raises(KeyboardInterrupt):
        cf(d)
    assert d == {}


@needs_hook
def test_rerun_raises_the_original_exception_with_its_traceback():
    def user(x):
        return 10 // x

    def alt(x):
        raise ArithmeticError("compiled")

    _C._set_test_compiler(lambda code, args: (alt.__code__, None, 0) if code is user.__code__ else None)
    cf = _C.CompiledFunction(user, {})
    assert cf(5) == 2
    with pytest.raises(ZeroDivisionError) as ei:
        cf(0)
    names = [f.name for f in traceback.extract_tb(ei.value.__traceback__)]
    assert names[-1] == "user"
    assert ei.value.__context__ is None  # the compiled code's exception is gone


def test_compiled_function_copies_attributes_like_functools_wraps():
    import unittest

    @unittest.expectedFailure
    def marked(x: int) -> int:
        "doc"
        return x

    marked.extra = [1]
    cf = _C.CompiledFunction(marked, {})
    assert cf.__unittest_expecting_failure__ is True  # the marker unittest reads
    assert cf.extra is marked.extra and cf.__wrapped__ is marked
    assert cf.__name__ == "marked" and cf.__doc__ == "doc"
    assert cf.__annotations__ == {"x": int, "return": int}
    assert cf.__code__ is marked.__code__ and cf.__defaults__ is None  # read through
    assert cf.__globals__ is marked.__globals__
    again = _C.CompiledFunction(cf, {})
    assert again.__wrapped__ is marked and again.__unittest_expecting_failure__ is True

    class Case(unittest.TestCase):
        @unittest.expectedFailure
        def test_fails(self):
            self.assertEqual(1, 2)

    Case.test_fails = _C.CompiledFunction(Case.test_fails, {})
    result = unittest.TestResult()
    Case("test_fails").run(result)
    assert len(result.expectedFailures) == 1 and not result.failures


@needs_hook
def test_hit_entry_moves_to_the_front():
    def compiler(code, args):
        want = args[0]
        return (guarded_alt.__code__, lambda a: a[0] == want, _C.ENTRY_IMPURE, f"v{want}")

    _C._set_test_compiler(compiler)
    cf = _C.CompiledFunction(guarded, {})
    for v in range(5):
        assert cf(v) == ("compiled", v)
    order = lambda: [e["reason"] for e in _C.code_entries(guarded.__code__)]  # noqa: E731
    assert order() == ["v4", "v3", "v2", "v1", "v0"]
    assert cf(1) == ("compiled", 1)
    assert order() == ["v1", "v4", "v3", "v2", "v0"]
    assert cf(0) == ("compiled", 0) and cf(0) == ("compiled", 0)
    assert order() == ["v0", "v1", "v4", "v3", "v2"]
    assert [c is guarded_alt.__code__ for c in _C._entry_codes(guarded.__code__)] == [True] * 5


@needs_hook
def test_cache_limit_counts_entries_per_options():
    _C._set_test_compiler(lambda code, args: (guarded_alt.__code__, _value_guard(code, args)))
    a = _C.CompiledFunction(guarded, {"o": "a"})
    b = _C.CompiledFunction(guarded, {"o": "b"})
    for v in range(8):
        assert a(v) == ("compiled", v)
    assert a(99) == 99  # a's cache is full
    for v in range(8):
        assert b(v) == ("compiled", v)  # b has its own eight
    assert b(99) == 99
    entries = _C.code_entries(guarded.__code__)
    assert len(entries) == 18 and sum(e["eager"] for e in entries) == 2
    _C.reset()
    c = _C.CompiledFunction(guarded, {"o": "a"})  # after reset: a fresh cache for equal options
    assert c(99) == ("compiled", 99) and a(99) == ("compiled", 99)
