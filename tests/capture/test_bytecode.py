"""The bytecode layer of wick._C (csrc/capture/bytecode.c): decoding code
objects into base instructions with lines, and the assembler.

Torch-free: runs on every CPython that tests/run_pyversions.sh finds.
"""
import collections
import dis
import functools
import importlib
import inspect
import json
import operator
import sys
import traceback
import types

import pytest

from wick import _C

PY = sys.version_info[:2]


# ---- decoding ---------------------------------------------------------------

def _all_codes(co):
    yield co
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            yield from _all_codes(c)


def _module_codes(name):
    mod = importlib.import_module(name)
    src = inspect.getsource(mod)
    top = compile(src, mod.__file__, "exec")
    return list(_all_codes(top))


STDLIB = ["json.decoder", "json.encoder", "collections", "functools", "argparse", "dis", "inspect",
          "typing", "textwrap", "string", "dataclasses", "enum", "ast", "tokenize", "pprint",
          "difflib", "fractions", "statistics", "email.message", "asyncio.tasks"]


def _dis_rows(co):
    rows = []
    for ins in dis.get_instructions(co):
        if ins.opname == "EXTENDED_ARG":
            continue
        line = ins.positions.lineno if ins.positions is not None else None
        rows.append((ins.offset // 2, ins.opname, ins.arg, -1 if line is None else line))
    return rows


def _compare(co):
    ours = _C._bc_decode(co)
    theirs = _dis_rows(co)
    assert len(ours) == len(theirs), co
    for (off, start, name, arg, line), (doff, dname, darg, dline) in zip(ours, theirs):
        assert (off, name, line) == (doff, dname, dline), (co, off)
        if darg is not None:
            assert arg == darg, (co, off, name)
        assert start <= off


@pytest.mark.parametrize("modname", STDLIB)
def test_decode_matches_dis_on_stdlib(modname):
    codes = _module_codes(modname)
    assert len(codes) > 5
    for co in codes:
        _compare(co)


def test_decode_matches_dis_on_live_functions():
    # functions that have run (3.11 quickens after warm-up; 3.12 at creation):
    # decode must read the deoptimised bytecode, not the adaptive copy
    fns = [json.dumps, json.loads, functools.reduce.__class__, collections.OrderedDict.__init__,
           textwrap_dedent_warm(), operator.attrgetter]
    for f in fns:
        co = getattr(f, "__code__", None)
        if co is not None:
            _compare(co)


def textwrap_dedent_warm():
    import textwrap
    for _ in range(200):
        textwrap.dedent("    a\n    b\n")
    return textwrap.dedent


def test_decode_extended_arg():
    n = 300
    src = "def big(x):\n    return [" + ", ".join(f"x + {i}.5" for i in range(n)) + "]\n"
    ns = {}
    exec(compile(src, "<big>", "exec"), ns)
    co = ns["big"].__code__
    ours = _C._bc_decode(co)
    ext = [r for r in ours if r[1] < r[0]]
    assert ext, "expected instructions with EXTENDED_ARG prefixes"
    for off, start, name, arg, line in ext:
        assert arg > 255 and off - start in (1, 2, 3)
    _compare(co)
    assert ns["big"](1)[299] == 300.5


def test_decode_lines_and_no_location():
    def f(a):
        x = a + 1

        y = x * 2
        return y
    rows = _C._bc_decode(f.__code__)
    first = f.__code__.co_firstlineno
    lines = {r[4] for r in rows}
    assert {first + 1, first + 3, first + 4} <= lines and first + 2 not in lines
    _compare(f.__code__)


def test_cache_table_matches_opcode_module():
    import opcode
    caches = _C._bc_cache_entries()
    ice = opcode._inline_cache_entries
    for name, op in opcode.opmap.items():
        if op >= 256:
            continue
        want = ice.get(name, 0) if isinstance(ice, dict) else ice[op]
        assert caches[op] == want, name


# ---- assembling -------------------------------------------------------------

def like2(a, b):
    pass


def like1(a):
    pass


def _fn(code, **glb):
    glb.setdefault("__builtins__", __builtins__)
    return types.FunctionType(code, glb)


def test_asm_call_global():
    co = _C._asm_demo(like2.__code__, [
        ("resume",), ("push_null",), ("global", "max", 0), ("load", "a"), ("load", "b"),
        ("call", 2), ("return",)])
    f = _fn(co)
    assert f(3, 7) == 7 and f(9, -1) == 9
    assert co.co_stacksize == 4  # NULL, max, a, b
    assert co.co_name == "like2" and co.co_filename == __file__
    assert co.co_exceptiontable == b""
    assert co.co_freevars == () and co.co_cellvars == ()


def test_asm_load_global_with_null_bit_and_attr():
    co = _C._asm_demo(like1.__code__, [
        ("resume",), ("global", "str", 1), ("load", "a"), ("call", 1), ("attr", "upper"),
        ("return",)])
    f = _fn(co)
    assert f(12)() == "12"
    co2 = _C._asm_demo(like1.__code__, [
        ("resume",), ("load", "a"), ("attr", "real"), ("return",)])
    assert _fn(co2)(5) == 5 and _fn(co2)(2.5) == 2.5


def test_asm_nested_calls_and_attr_callable():
    # max(len(a), operator.add(a.__len__(), 0) ... ) shapes: a callable made of
    # several instructions under the NULL (exercises 3.13's NULL placement)
    co = _C._asm_demo(like2.__code__, [
        ("resume",), ("push_null",), ("global", "max", 0),
        ("push_null",), ("global", "operator", 0), ("attr", "add"), ("load", "a"), ("load", "b"),
        ("call", 2),
        ("push_null",), ("global", "len", 0), ("global", "DATA", 0), ("call", 1),
        ("call", 2), ("return",)])
    f = _fn(co, operator=operator, DATA=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert f(1, 2) == 10 and f(20, 30) == 50


def test_asm_tuples_locals_and_consts():
    marker = object()
    co = _C._asm_demo(like2.__code__, [
        ("resume",), ("load", "a"), ("load", "b"), ("tuple", 2), ("unpack", 2),
        ("store", "x"), ("store", "y"), ("load", "y"), ("load", "x"), ("const", marker),
        ("tuple", 3), ("return",)])
    f = _fn(co)
    assert f(1, 2) == (2, 1, marker)
    assert co.co_varnames == ("a", "b", "x", "y") and co.co_nlocals == 4
    assert marker in co.co_consts


def test_asm_unbound_local_is_an_error_not_a_crash():
    co = _C._asm_demo(like1.__code__, [("resume",), ("load", "never_set"), ("return",)])
    with pytest.raises(UnboundLocalError):
        _fn(co)(1)


def test_asm_many_consts_and_args_use_extended_arg():
    objs = [object() for _ in range(300)]
    prog = [("resume",), ("push_null",), ("global", "tuple", 0)]
    prog += [("push_null",), ("global", "list", 0)]
    for o in objs:
        prog.append(("const", o))
    prog += [("tuple", 300), ("call", 1), ("call", 1), ("return",)]
    co = _C._asm_demo(like1.__code__, prog)
    assert _fn(co)(0) == tuple(objs)
    # 300 positional arguments through wk_asm_call (3.11 cannot use PRECALL there)
    prog = [("resume",), ("push_null",), ("global", "pack", 0)]
    prog += [("const", i) for i in range(300)]
    prog += [("call", 300), ("return",)]
    co = _C._asm_demo(like1.__code__, prog)
    assert _fn(co, pack=lambda *a: a)(0) == tuple(range(300))
    assert co.co_stacksize >= 302


def test_asm_stacksize_exact():
    # depth: NULL f (1 2 3 4 5) -> 7, then a tuple
    prog = [("resume",), ("push_null",), ("global", "f", 0)]
    prog += [("const", i) for i in range(1, 6)]
    prog += [("call", 5), ("return",)]
    co = _C._asm_demo(like1.__code__, prog)
    assert co.co_stacksize == 7
    assert _fn(co, f=lambda *a: sum(a))(0) == 15


@pytest.mark.parametrize("cmp,op", [(0, operator.lt), (1, operator.le), (2, operator.eq),
                                    (3, operator.ne), (4, operator.gt), (5, operator.ge)])
def test_asm_compare_op_survives_specialisation(cmp, op):
    co = _C._asm_demo(like2.__code__, [
        ("resume",), ("load", "a"), ("load", "b"), ("compare", cmp), ("return",)])
    f = _fn(co)
    pairs = [(1, 2), (2, 2), (3, 2), (1.5, 2.5), (2.5, 2.5), ("a", "b"), ("b", "b")]
    for _ in range(100):  # enough calls for the adaptive interpreter to specialise
        for x, y in pairs:
            assert f(x, y) == op(x, y), (x, y)


def _jump_ops():
    if PY >= (3, 12):
        return "POP_JUMP_IF_FALSE", "JUMP_FORWARD", "JUMP_BACKWARD"
    return "POP_JUMP_FORWARD_IF_FALSE", "JUMP_FORWARD", "JUMP_BACKWARD"


def test_asm_labels_branch():
    jf, jfw, _ = _jump_ops()
    # return "small" if a < b else "big"
    co = _C._asm_demo(like2.__code__, [
        ("resume",), ("load", "a"), ("load", "b"), ("compare", 0), ("jump", jf, 1),
        ("const", "small"), ("return",),
        ("label", 1), ("const", "big"), ("return",)])
    f = _fn(co)
    assert f(1, 2) == "small" and f(3, 2) == "big"
    # forward jump over a long block: the jump needs EXTENDED_ARG
    prog = [("resume",), ("const", 0), ("store", "x"), ("jump", jfw, 2)]
    prog += [("const", i) for i in range(200)] + [("tuple", 200), ("store", "x")]
    prog += [("label", 2), ("load", "x"), ("return",)]
    co = _C._asm_demo(like1.__code__, prog)
    assert _fn(co)(0) == 0


def test_asm_labels_loop():
    jf, _, jb = _jump_ops()
    # i = 0; s = 0; while i < a: s = s + i; i = i + 1; return s  (written with calls)
    prog = [("resume",), ("const", 0), ("store", "i"), ("const", 0), ("store", "s"),
            ("label", 1), ("load", "i"), ("load", "a"), ("compare", 0), ("jump", jf, 2),
            ("push_null",), ("global", "add", 0), ("load", "s"), ("load", "i"), ("call", 2),
            ("store", "s"),
            ("push_null",), ("global", "add", 0), ("load", "i"), ("const", 1), ("call", 2),
            ("store", "i"),
            ("jump", jb, 1),
            ("label", 2), ("load", "s"), ("return",)]
    co = _C._asm_demo(like1.__code__, prog)
    f = _fn(co, add=operator.add)
    assert f(10) == 45 and f(0) == 0 and f(1000) == sum(range(1000))


def test_asm_bad_programs_raise():
    with pytest.raises(SystemError):  # stack underflow
        _C._asm_demo(like1.__code__, [("resume",), ("return",)])
    with pytest.raises(SystemError):  # falls off the end
        _C._asm_demo(like1.__code__, [("resume",), ("load", "a")])
    with pytest.raises(SystemError):  # unbound label
        _C._asm_demo(like1.__code__, [("resume",), ("jump", _jump_ops()[1], 5), ("load", "a"), ("return",)])
    with pytest.raises(ValueError):
        _C._asm_demo(like1.__code__, [("op", "NOT_AN_OPCODE", 0)])


def raises_here(a):
    return a  # the assembled code below is "like" this function


def boom(x):
    raise ValueError(f"boom {x}")


def test_asm_traceback_points_at_original_source():
    line = raises_here.__code__.co_firstlineno + 1
    co = _C._asm_demo(raises_here.__code__, [
        ("resume",), ("line", line), ("push_null",), ("global", "boom", 0), ("load", "a"),
        ("call", 1), ("return",)])
    f = _fn(co, boom=boom)
    with pytest.raises(ValueError) as ei:
        f(7)
    frames = traceback.extract_tb(ei.value.__traceback__)
    names = [(fr.name, fr.filename) for fr in frames]
    assert ("raises_here", __file__) in names
    mine = [fr for fr in frames if fr.name == "raises_here"][0]
    assert mine.lineno == line
    assert frames[-1].name == "boom"


def test_asm_line_table_covers_every_unit():
    base = like2.__code__.co_firstlineno
    prog = [("resume",)]
    for k in range(40):  # line deltas up and down, runs longer than 8 units
        prog += [("line", base + (k * 7) % 23), ("push_null",), ("global", "max", 0),
                 ("load", "a"), ("load", "b"), ("call", 2), ("store", "r")]
    prog += [("line", base + 100), ("load", "r"), ("return",)]
    co = _C._asm_demo(like2.__code__, prog)
    assert _fn(co)(1, 2) == 2
    covered = 0
    for start, end, ln in co.co_lines():
        covered += end - start
    assert covered == len(co.co_code)
    ours = _C._bc_decode(co)
    per_block = 7 if PY < (3, 12) else 6  # 3.11 calls are PRECALL + CALL
    want = [base] + [base + (k * 7) % 23 for k in range(40) for _ in range(per_block)] + [base + 100] * 2
    assert [r[4] for r in ours] == want
    _compare(co)


class Obj:
    def __init__(self, k):
        self.k = k

    def m(self, x, y=0, *, z=0):
        return (self.k, x, y, z)


def test_asm_method_calls_and_keywords():
    # o.m(a) ; o.m(a, z=5) ; pack(a, y=o.m(a, 1, z=2)) : method pairs and
    # keyword calls, nested inside an outer call that has a pending NULL
    co = _C._asm_demo(like2.__code__, [
        ("resume",),
        ("push_null",), ("global", "pack", 0),
        ("load", "a"), ("method", "m"), ("load", "b"), ("call", 1),
        ("load", "a"), ("method", "m"), ("load", "b"), ("const", 5), ("call_kw", 2, ("z",)),
        ("load", "a"), ("method", "m"), ("load", "b"), ("const", 1), ("const", 2),
        ("call_kw", 3, ("z",)),
        ("call_kw", 3, ("y",)),
        ("return",)])
    f = _fn(co, pack=lambda *a, **kw: (a, kw))
    got = f(Obj(7), 3)
    assert got == (((7, 3, 0, 0), (7, 3, 0, 5)), {"y": (7, 3, 1, 2)})
    # method lookup on something without a descriptor (attribute is a plain callable)
    o = Obj(1)
    o.m2 = lambda x: x * 2
    co2 = _C._asm_demo(like2.__code__, [
        ("resume",), ("load", "a"), ("method", "m2"), ("load", "b"), ("call", 1), ("return",)])
    assert _fn(co2)(o, 21) == 42
    for _ in range(100):  # specialised method calls stay right
        assert f(Obj(7), 3)[1] == {"y": (7, 3, 1, 2)}


def test_asm_call_kw_errors():
    with pytest.raises(SystemError):
        _C._asm_demo(like1.__code__, [("resume",), ("push_null",), ("global", "f", 0),
                                      ("load", "a"), ("call_kw", 1, ("x", "y")), ("return",)])


def test_decode_while_instrumented():
    # 3.12+ rewrites co_code_adaptive with INSTRUMENTED_* opcodes under
    # settrace/monitoring; decode must still see the base instructions
    def traced(a):
        s = 0
        for i in range(a):
            s += i
        return s

    def tracer(frame, event, arg):
        return tracer

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        assert traced(5) == 10
        _compare(traced.__code__)
        names = [r[2] for r in _C._bc_decode(traced.__code__)]
    finally:
        sys.settrace(old)
    assert not any(n.startswith("INSTRUMENTED") for n in names)
    assert "FOR_ITER" in names


def _except_program(exc_name="ZeroDivisionError"):
    """try: return 1 / a
       except <exc_name>: return "caught"
    laid out as CPython's compiler does (handler, cleanup with lasti)."""
    jf, jfw, _ = _jump_ops()
    return [
        ("resume",),
        ("try", 0, 1, 2, 0, 0),   # the body unwinds to the handler, stack emptied
        ("try", 3, 4, 5, 1, 1),   # the handler unwinds to the cleanup, keeping prev exc
        ("label", 0),
        ("const", 1), ("load", "a"), ("op", "BINARY_OP", 11), ("return",),
        ("label", 1),
        ("label", 2), ("op", "PUSH_EXC_INFO", 0),
        ("label", 3),
        ("global", exc_name, 0), ("op", "CHECK_EXC_MATCH", 0), ("jump", jf, 6),
        ("op", "POP_TOP", 0), ("jump", jfw, 7),
        ("label", 6), ("op", "RERAISE", 0),
        ("label", 4),
        ("label", 7), ("op", "POP_EXCEPT", 0), ("const", "caught"), ("return",),
        ("label", 5), ("op", "COPY", 3), ("op", "POP_EXCEPT", 0), ("op", "RERAISE", 1),
    ]


def _exception_entries(code):
    """(start, end, target, depth, lasti) in bytes, as dis reads co_exceptiontable."""
    import dis
    return [(e.start, e.end, e.target, e.depth, e.lasti) for e in dis._parse_exception_table(code)]


def test_asm_exception_table_try_except():
    co = _C._asm_demo(like1.__code__, _except_program())
    f = _fn(co)
    assert f(4) == 0.25
    assert f(0) == "caught"
    with pytest.raises(TypeError):  # not matched: re-raised from the handler
        f("x")
    entries = _exception_entries(co)
    assert [(d, lasti) for *_, d, lasti in entries] == [(0, False), (1, True)]
    # the handler targets are real instructions and the stack fits them
    import dis
    offsets = {i.offset: i.opname for i in dis.get_instructions(co)}
    assert offsets[entries[0][2]] == "PUSH_EXC_INFO"
    assert offsets[entries[1][2]] == "COPY"
    assert co.co_stacksize >= 4  # [prev exc, lasti, exc, copy] in the cleanup
    # many calls through the handler: no leak of the exception or the frame
    import gc
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(2000):
        assert f(0) == "caught"
    gc.collect()
    assert len(gc.get_objects()) - before < 50


def test_asm_exception_table_traceback_and_nesting():
    co = _C._asm_demo(like1.__code__, _except_program("KeyError"))  # never matches
    f = _fn(co)
    with pytest.raises(ZeroDivisionError) as ei:
        f(0)
    tb = ei.value.__traceback__
    while tb.tb_next:
        tb = tb.tb_next
    assert tb.tb_frame.f_code is co
    assert ei.value.__context__ is None
    # a region given later wins inside an earlier one: the inner body (1 / a)
    # goes to handler 12, the rest of the outer region (check(a)) to 10
    prog = [("resume",),
            ("try", 0, 1, 10, 0, 0), ("try", 2, 3, 12, 0, 0),
            ("label", 0), ("push_null",), ("global", "check", 0), ("load", "a"), ("call", 1),
            ("op", "POP_TOP", 0),
            ("label", 2), ("const", 1), ("load", "a"), ("op", "BINARY_OP", 11), ("return",),
            ("label", 3), ("label", 1),
            ("label", 10), ("op", "POP_TOP", 0), ("const", "outer"), ("return",),
            ("label", 12), ("op", "POP_TOP", 0), ("const", "inner"), ("return",)]
    co = _C._asm_demo(like1.__code__, prog)
    entries = _exception_entries(co)
    assert len(entries) == 2 and entries[0][1] == entries[1][0]

    def check(a):
        if a == "bad":
            raise ValueError(a)

    g = _fn(co, check=check)
    assert g(2) == 0.5 and g(0) == "inner" and g("bad") == "outer"
    with pytest.raises(SystemError):  # a region whose labels are never bound
        _C._asm_demo(like1.__code__, [("resume",), ("try", 20, 21, 22, 0, 0), ("load", "a"), ("return",)])
