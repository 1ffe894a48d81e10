"""Side effects on containers the frame did not make, replayed after the
graph in program order (issue 8): list arguments' append / extend / insert /
clear / `+=`, set arguments' add / discard / clear, dict arguments' item
writes, pop, update and `del`, `del` on lists and dicts the frame built.
Each function runs eagerly and through wick on equal copies of its
arguments; results, every argument afterwards and the exception raised
must be eager's; graph and break counts are pinned, and never more graphs
than PyTorch's capture (torch.compile with a CompileCounter)."""
import copy

import sys

import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403  (fixtures and helpers)
from test_capture_util import run_eager_and_compiled
from test_breaks_inplace import _same, counts, dynamo_graphs, t

OPTS = {"backend": "wick", "fullgraph": False, "dynamic": None, "mode": "default"}


def check(fn, make_args, expect, dynamo=True):
    C.reset()
    cf = C.CompiledFunction(fn, OPTS)
    first = None
    for i in range(2):
        exp, exp_err, got, got_err, ea, ca = run_eager_and_compiled(fn, cf, make_args())
        assert got_err is exp_err, (got_err, exp_err)
        if exp_err is None:
            _same(exp, got)
        for a, b in zip(ea, ca):
            _same(a, b)
        if first is None:
            first = counts(fn)
    assert first == expect, first
    if dynamo:
        dyn = dynamo_graphs(fn, copy.deepcopy(make_args()))
        if dyn:
            assert first[0] <= dyn, (first, dyn)


def list_ops(x, lst):
    lst.append(x * 2)
    lst.extend([x + 1, 3, "s"])
    lst.insert(0, x.sum())
    lst.insert(-1, 7)
    lst += (x.cos(),)
    return x * 3


def list_clear_then_fill(x, lst):
    lst.append(1)
    lst.clear()
    lst.extend((x, x - 1))
    return len(lst) if False else x


def list_extend_from_other(x, lst, other):
    lst.extend(other)
    other.append(x)
    lst.extend(other)
    return x + 1


def set_ops(x, s):
    s.add(3)
    s.discard(1)
    s.add("k")
    s.discard(99)
    return x + 1


def set_clear(x, s):
    s.clear()
    s.add(x.shape[0] if x.dim() else 0)
    return x * 2


def dict_ops(x, d):
    d["k"] = x * 2
    v = d.pop("a")
    d.update(b=x + v, c=3)
    del d["k"]
    d["z"] = 1
    return x + v


def local_containers(x):
    lst = [x, x * 2, x * 3]
    del lst[1]
    d = {"a": x, "b": 2}
    del d["a"]
    return lst, d


def helper_writes(lst, s, v):
    lst.insert(0, v)
    s.add(5)
    return v * 2


def in_helper(x, lst, s):
    y = helper_writes(lst, s, x + 1)
    lst.append(y)
    return y


def in_loop(x, lst):
    for i in range(3):
        lst.insert(i, x * i)
    return x


def _args_list(shape):
    return lambda: [t(*shape), [t(*shape, seed=3), 5]]


@pytest.mark.parametrize("shape", [(4, 3), (0, 2), ()], ids=str)
def test_list_argument_methods(shape):
    check(list_ops, _args_list(shape), (1, 0, 0))
    check(list_clear_then_fill, _args_list(shape), (1, 0, 0))
    check(in_loop, _args_list(shape), (1, 0, 0))
    check(list_extend_from_other, lambda: [t(*shape), [1], [2, 3]], (1, 0, 0))


@pytest.mark.parametrize("shape", [(4, 3), (2,)], ids=str)
def test_set_and_dict_arguments(shape):
    check(set_ops, lambda: [t(*shape), {1, 2}], (1, 0, 0))
    check(set_clear, lambda: [t(*shape), {1, 2}], (1, 0, 0))
    check(dict_ops, lambda: [t(*shape), {"a": 1.5, "q": t(*shape, seed=2)}], (1, 0, 0))
    check(local_containers, lambda: [t(*shape)], (1, 0, 0))
    check(in_helper, lambda: [t(*shape), [0], {1}], (1, 0, 0))


def effects_then_break(x, lst, s, d):
    lst.insert(0, x * 2)
    s.add(4)
    del d["a"]
    print("wick-effects-break", len(lst), len(s), len(d))  # reads the containers after the replay
    lst.extend([x.sum()])
    s.discard(4)
    return x + 1


def test_effects_before_a_break_are_replayed_before_it(capsys):
    # len() of a list or set argument is not modelled: each is a break of its own
    check(effects_then_break, lambda: [t(4, 3), [1], {1}, {"a": 1, "b": 2}], (2, 3, 0))
    out = capsys.readouterr().out
    assert out.count("wick-effects-break 2 2 1") == 4 + 1  # eager, compiled, twice; PyTorch's capture


def effects_then_raise(x, lst, s, d):
    lst.append(x)
    s.add(2)
    d["n"] = 1
    if x.shape[0] > 2:
        raise ValueError("too long")
    lst.insert(0, 0)
    return x * 2


def test_effects_when_the_call_raises_midway():
    # the exception leaves the frame: a break at the raise, which runs in
    # Python after the effects before it are replayed, as eager keeps them
    check(effects_then_raise, lambda: [t(4, 3), [], set(), {}], (0, 1, 0), dynamo=False)
    check(effects_then_raise, lambda: [t(2, 3), [], set(), {}], (1, 0, 0))


def list_pop(x, lst):
    v = lst.pop()
    return x + v


def set_unhashable(x, s):
    s.add([1])
    return x


def del_missing(x, d):
    del d["missing"]
    return x


def list_insert_dynamic(x, lst):
    lst.insert(x.shape[0], 1)  # a constant after all: shapes are guarded
    return x.exp()


def test_what_capture_does_not_model_runs_in_python():
    # pop on a list argument of plain values or tensors: modelled
    # (test_effects_replay.py, test_capture_list_args.py)
    check(list_pop, lambda: [t(3), [1.0, 2.0]], (1, 0, 0))
    check(list_pop, lambda: [t(3), [t(3, seed=1)]], (1, 0, 0))
    # Python raises: the same exception
    check(set_unhashable, lambda: [t(3), set()], (0, 1, 0), dynamo=False)
    check(del_missing, lambda: [t(3), {"a": 1}], (0, 1, 0), dynamo=False)
    check(list_insert_dynamic, lambda: [t(3), [5, 6]], (1, 0, 0))


# ---- generators: capture runs a generator to its end when it is made ----------


def gen_with_effects(x, lst):
    for i in range(4):
        lst.append(i)  # Python runs this only as far as the consumer pulls
        yield x * i


def stops_early(x, lst):
    s = x
    for v in gen_with_effects(x, lst):
        s = s + v
        if len(lst) > 1:
            break
    return s


def zips_shorter(x, lst):
    return [a + b for a, b in zip(gen_with_effects(x, lst), (x, x))]


def pure_gen(x):
    for i in range(4):
        yield x * i


def pure_stops_early(x):
    s = x
    for v in pure_gen(x):
        s = s + v
        if s.dim() >= 0:
            break
    return s


def test_generator_with_side_effects_is_not_run_ahead():
    # the generator's appends past the consumer's stop never happen in
    # Python: the loop runs in Python (its body a function of its own,
    # compiled: one graph), the list as eager leaves it
    check(stops_early, lambda: [t(4, 3), []], (1, 4, 0))
    # (3.12 inlines the comprehension into the frame (PEP 709): its three
    # break attempts are counted there before the frame runs in Python; on
    # 3.11 the comprehension's function, made before the break, is made
    # again after it, and the resume functions break on in turn: no graph)
    check(zips_shorter, lambda: [t(4, 3), []], (0, 5, 1) if sys.version_info < (3, 12) else (0, 3, 1))
    # a generator without side effects may run ahead: one graph
    check(pure_stops_early, lambda: [t(4, 3)], (1, 0, 0))
