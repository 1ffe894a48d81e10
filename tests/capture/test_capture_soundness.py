"""Guards are sound for everything capture relied on: each case changes
something after compiling (a method on the class or the instance, a
function's defaults or code, a closure cell, a module hook) and the next
call must compute what eager Python computes. Also: unused arguments are
not pinned by value, and internal capture errors run the frame eagerly."""
import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries, one_graph, reasons


class Net:
    def scale(self, x):
        return x * 2

    def run(self, x):
        return self.scale(x) + 1


def test_method_replaced_on_the_class():
    class N(Net):
        pass

    n, x = N(), torch.randn(4)
    f = compiled(N.run)
    assert_same(f(n, x), x * 2 + 1)
    N.scale = lambda self, x: x * 3
    assert_same(f(n, x), x * 3 + 1)
    assert_same(f(N(), x), x * 3 + 1)


def test_method_shadowed_on_the_instance():
    class N(Net):
        pass

    n, x = N(), torch.randn(4)
    f = compiled(N.run)
    assert_same(f(n, x), x * 2 + 1)
    n.scale = lambda x: x - 5
    assert_same(f(n, x), x - 5 + 1)
    assert_same(f(N(), x), x * 2 + 1)


def helper_defaults(x, k=2.0, *, shift=1.0):
    return x * k + shift


def calls_defaults(x):
    return helper_defaults(x)


def test_defaults_changed_after_compiling():
    x = torch.randn(5)
    f = compiled(calls_defaults)
    assert_same(f(x), x * 2.0 + 1.0)
    helper_defaults.__defaults__ = (5.0,)
    assert_same(f(x), x * 5.0 + 1.0)
    helper_defaults.__kwdefaults__ = {"shift": -3.0}
    assert_same(f(x), x * 5.0 - 3.0)
    helper_defaults.__defaults__ = (2.0,)
    helper_defaults.__kwdefaults__ = {"shift": 1.0}


def swapped_a(x):
    return x + 1


def swapped_b(x):
    return x - 1


def calls_swapped(x):
    return swapped_a(x) * 2


def test_code_swapped_after_compiling():
    x = torch.randn(5)
    f = compiled(calls_swapped)
    assert_same(f(x), (x + 1) * 2)
    old = swapped_a.__code__
    swapped_a.__code__ = swapped_b.__code__
    try:
        assert_same(f(x), (x - 1) * 2)
    finally:
        swapped_a.__code__ = old
    assert_same(f(x), (x + 1) * 2)


def test_closure_cell_rebound_after_compiling():
    k = 2.0

    def g(x):
        return x * k

    x = torch.randn(3)
    f = compiled(g)
    assert_same(f(x), x * 2.0)
    k = 7.0  # noqa: F841  (rebinds the cell g reads)
    assert_same(f(x), x * 7.0)


def inner_closure_user(x):
    return make_scaler(3.0)(x) + make_scaler(4.0)(x)


def make_scaler(s):
    def scaler(t):
        return t * s

    return scaler


def test_closures_made_during_capture():
    x = torch.randn(3)
    f = compiled(inner_closure_user)
    assert_same(f(x), x * 3.0 + x * 4.0)
    (e,) = entries(inner_closure_user)
    assert not e["eager"] and e["graph_count"] == 1


def unused_int(x, n):
    return x + 1


def used_int(x, n):
    return x + n


def test_unused_int_argument_is_not_guarded_by_value():
    x = torch.randn(3)
    f = compiled(unused_int)
    for n in range(12):
        assert_same(f(x, n), x + 1)
    (e,) = entries(unused_int)
    assert not e["eager"]
    assert not any("EQUALS_MATCH L['n']" in g for g in e["guards"])
    g = compiled(used_int)
    for n in range(3):
        assert_same(g(x, n), x + n)
    assert len(entries(used_int)) == 3


def erroring(x, y):
    a = x + y
    for i in range(3):
        a = a * 2 + i
    return a.sum(0), [a, y]


@pytest.mark.parametrize("at", [1, 2, 5, 9, 17, 30])
def test_internal_capture_error_runs_eagerly(at):
    C.reset()
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    C._inject_capture_error(at)
    f = compiled(erroring)
    assert_same(f(x, y), erroring(x, y))
    (e,) = entries(erroring)
    assert e["eager"] and "injected internal capture error" in e["reason"]
    C._inject_capture_error(0)


# In-place updates are modelled by rebinding one value; views made by extern
# calls share storage, so an in-place update of a view or of a base that has
# views must not be captured that way (it ran with the view left stale).
def inplace_on_view(x):
    y = x * 2
    z = y.view(-1)
    z += 1
    return y


def inplace_on_base(x):
    y = x * 2
    z = y[0]
    y += 1
    return z * 1


def inplace_on_input_view(x):
    z = x.view(-1)
    z -= 1
    return z + 0


def inplace_no_alias(x):
    y = x * 2
    s = y.sum(0)  # not a view: keeps the old values
    y += 1
    return y, s


@pytest.mark.parametrize("fn", [inplace_on_view, inplace_on_base, inplace_on_input_view])
def test_inplace_update_through_views_is_not_a_wrong_result(fn):
    x = torch.randn(3, 4)
    want = fn(x.clone())
    got_x = x.clone()
    got = compiled(fn)(got_x)
    assert_same(got, want)
    fn(x)  # the eager effect on the argument, if any
    assert_same(got_x, x)
    assert not graphs(fn), "an in-place update through a view was captured"
    assert "view" in fallbacks(fn)[0]["reason"]


def test_inplace_update_without_aliases_is_captured():
    x = torch.randn(3, 4)
    got = compiled(inplace_no_alias)(x)
    assert_same(got, inplace_no_alias(x))
    assert graphs(inplace_no_alias)


def relu_inplace(m, x):
    return m(x) + 1


def test_relu_inplace_module():
    m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(inplace=True), torch.nn.Linear(5, 3),
                            torch.nn.ReLU(inplace=True))
    x = torch.randn(4, 6)
    with torch.no_grad():
        assert_same(compiled(relu_inplace)(m, x), relu_inplace(m, x))
    assert graphs(relu_inplace), entries(relu_inplace)


def relu_inplace_on_input(x):
    return torch.nn.functional.relu(x, inplace=True) * 2


def test_relu_inplace_on_an_input_is_written_back():
    x = torch.randn(5)
    xe = x.clone()
    got = compiled(relu_inplace_on_input)(x)
    assert_same(got, relu_inplace_on_input(xe))
    assert_same(x, xe)  # the argument was changed as eager changes it: copied back after the graph
    assert graphs(relu_inplace_on_input) and not reasons(relu_inplace_on_input)


def autocast_branch(x):
    if torch.is_autocast_enabled():
        return x + 1
    return x * 2


def test_torch_state_queries_are_guarded():
    # torch.is_autocast_enabled() (and torch.cuda.is_current_stream_capturing(),
    # which transformers calls) are answered at capture time: guarded
    import warnings

    x = torch.randn(3)
    f = compiled(autocast_branch)
    assert_same(f(x), x * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.set_autocast_enabled(True)
        try:
            assert_same(f(x), x + 1)
        finally:
            torch.set_autocast_enabled(False)
    assert_same(f(x), x * 2)
    assert len(graphs(autocast_branch)) == 2


# A loop walks a snapshot of a list's items in capture; CPython's list
# iterator reads the live list. A list changed while a loop walks it must
# end capture (eager's result), not give the snapshot's.
def _list_grows(x):
    items, n = [1, 2], 0
    for v in items:
        n += 1
        if n < 4:
            items.append(v)
    return x * n, items


def _list_grows_under_enumerate(x):
    items = [x, x + 1]
    for i, v in enumerate(items):
        if i < 3:
            items.append(v * 2)
    return sum(items)


def _item_ahead_replaced(x):
    items, out = [x, x, x], []
    for i, v in enumerate(items):
        if i == 0:
            items[2] = v * 10
        out.append(v)
    return out[2]


def _second_zipped_list_grows(x):
    a, b = [x, x + 1], [x * 2, x * 3]
    for u, v in zip(a, b):
        b.append(u + v)
    return b[-1] + len(b)


def _other_list_grows(x):
    xs, out = [x, x * 2, x * 3], []
    for v in xs:
        out.append(v.sin())
    return torch.stack(out)


@pytest.mark.parametrize("fn", [_list_grows, _list_grows_under_enumerate, _item_ahead_replaced,
                                _second_zipped_list_grows, _other_list_grows])
@pytest.mark.parametrize("shape", [(3,), (2, 4), ()])
def test_list_changed_while_a_loop_walks_it(fn, shape):
    x = torch.randn(shape)
    f = compiled(fn)
    for _ in range(2):
        assert_same(f(x), fn(x))
    if fn is _other_list_grows:  # appending to another list is modelled: one graph
        one_graph(fn)
    else:
        assert reasons(fn), "the changed list must end capture"



# A list, dict or object the frame made is rebuilt after the graph: one that
# reaches Python through two references must stay one object, as in eager.
class _Holder:
    pass


def _list_stored_and_returned(h, x):
    items = [x * 2]
    h.items = items
    return items, x + 1


def _dict_twice_in_the_result(h, x):
    d = {"a": x.sin()}
    return d, d


def _list_returned_once(h, x):
    return [x * 2, x.cos()]


def _set_in_two_places(h, x):
    s = {1, 2}
    return {"keys": s, "pair": (s, x.exp())}


def _object_in_list_and_attr(h, x):
    o = _Holder()
    o.t = x.tanh()
    h.obj = o
    return [o, o], x - 1


def _list_across_a_break(h, x):
    items = [x.sin()]
    h.items = items
    print(end="")  # a graph break: the resume function gets the same list
    items.append(x.cos())
    return items


def _list_across_a_branch(h, x):
    items = [x.sin()]
    h.items = items
    if x.sum() > 0:  # a data-dependent jump: both sides get the same list
        items.append(x)
    return items, items


def _list_containing_itself(h, x):
    items = [x.sin()]
    items.append(items)
    return items


CASES_IDENTITY = [_list_stored_and_returned, _dict_twice_in_the_result, _list_returned_once, _set_in_two_places,
                  _object_in_list_and_attr, _list_across_a_break, _list_across_a_branch, _list_containing_itself]


def _same_shape_of_references(got, want, h, he):
    """the references to one object in eager's result and holder are to one object in wick's too"""
    def refs(r, holder):
        out = [r] + (list(r) if isinstance(r, (list, tuple)) else [])
        if isinstance(r, tuple):
            for v in r:
                out += list(v.values()) if isinstance(v, dict) else list(v) if isinstance(v, (list, tuple)) else []
        if isinstance(r, dict):
            out += list(r.values())
            for v in r.values():
                out += list(v) if isinstance(v, tuple) else []
        out += [getattr(holder, "items", None), getattr(holder, "obj", None)]
        return [o for o in out if not isinstance(o, (torch.Tensor, type(None)))]
    a, b = refs(got, h), refs(want, he)
    assert len(a) == len(b)
    for i in range(len(a)):
        for j in range(len(a)):
            assert (a[i] is a[j]) == (b[i] is b[j]), (i, j)


@pytest.mark.parametrize("fn", CASES_IDENTITY, ids=lambda f: f.__name__)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_new_container_keeps_its_identity(fn, sign):
    x = torch.randn(5).abs() * sign
    f = compiled(fn)
    for _ in range(2):
        h, he = _Holder(), _Holder()
        got, want = f(h, x), fn(he, x)
        if fn is _list_containing_itself:
            assert got[1] is got and want[1] is want
            assert_same(got[0], want[0])
            continue
        if fn is _object_in_list_and_attr:
            assert_same(got[0][0].t, want[0][0].t)
            assert_same(got[1], want[1])
        else:
            assert_same(got, want)
        _same_shape_of_references(got, want, h, he)
    if fn in (_list_stored_and_returned, _dict_twice_in_the_result, _list_returned_once, _set_in_two_places,
              _object_in_list_and_attr):
        one_graph(fn)


@pytest.mark.parametrize("first", ["plain", "negated"])
def test_negation_bit_input(first):
    # z.conj().imag is a lazily negated view: its memory holds the values'
    # negation. Such an input runs eagerly (reason recorded); one that comes
    # after a plain tensor's graph misses its guards (the Negative dispatch
    # key) rather than being read as it lies in memory.
    def fn(y):
        return y * 2 + 1

    z = torch.randn(6, dtype=torch.complex64)
    plain, negated = z.imag.clone(), z.conj().imag
    assert negated.is_neg()
    f = compiled(fn)
    order = [plain, negated] if first == "plain" else [negated, plain]
    for y in order + order:
        assert_same(f(y), fn(y))
    assert any("negation bit" in (r or "") for r in reasons(fn)), reasons(fn)
