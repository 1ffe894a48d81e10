"""next() on iterators capture knows the items of (iter() of lists, tuples,
dict views, sets): the same step a for loop takes, sharing the position with
a loop over the same iterator; an exhausted iterator gives the default or
raises StopIteration as eager."""
import pytest
import torch

from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, one_graph, reasons


def next_of_list(x):
    return x * next(iter([2, 3]))


def next_twice(x):
    it = iter([x.sin(), x.cos(), x.exp()])
    a = next(it)
    b = next(it)
    return a + b


def next_then_loop(x):
    it = iter([1, 2, 3, 4])
    first = next(it)
    for v in it:  # continues after the item next() took
        x = x + v
    return x * first


def next_of_dict_values(x):
    d = {"a": x.tanh(), "b": 2}
    return next(iter(d.values())) + 1


def next_of_dict_items(x):
    k, v = next(iter({"w": x * 3}.items()))
    return v, k


def next_of_set(x):
    return x * next(iter({3}))


def next_default_when_exhausted(x):
    it = iter([x])
    next(it)
    return next(it, None) is None, next(it, 5) * x


def next_of_tuple_of_tensors(x):
    return next(iter((x + 1, x - 1))) * 2


def next_of_enumerate(x):
    i, v = next(enumerate([x * 2, x]))
    return v + i


def next_of_zip(x):
    a, b = next(zip([x, x * 2], [3, 4]))
    return a * b


CASES = [next_of_list, next_twice, next_then_loop, next_of_dict_values, next_of_dict_items, next_of_set,
         next_default_when_exhausted, next_of_tuple_of_tensors, next_of_enumerate, next_of_zip]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(3, 4), (5,), ()])
def test_next_is_one_graph(fn, shape):
    torch.manual_seed(0)
    x = torch.randn(shape)
    f = compiled(fn)
    want = fn(x)
    assert_same(f(x), want)
    assert_same(f(x), want)
    one_graph(fn)


def next_exhausted_raises(x):
    it = iter([x])
    next(it)
    return next(it)


def next_after_list_changed(x):
    items = [x, x * 2]
    it = iter(items)
    items.append(x * 3)  # the list changed under its iterator: not the snapshot's items
    next(it)
    next(it)
    return next(it)


def test_exhausted_iterator_raises_stop_iteration_as_eager():
    x = torch.randn(3)
    with pytest.raises(StopIteration):
        next_exhausted_raises(x)
    with pytest.raises(StopIteration):
        compiled(next_exhausted_raises)(x)


def test_list_changed_under_its_iterator_matches_eager():
    x = torch.randn(3)
    f = compiled(next_after_list_changed)
    assert_same(f(x), next_after_list_changed(x))
    assert_same(f(x), next_after_list_changed(x))
    assert reasons(next_after_list_changed), "a list changed under its iterator must end capture"
