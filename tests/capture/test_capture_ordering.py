"""sorted/min/max with key=, reverse= and default= inside captured frames: the
items may be tensors, modules or tuples as long as their keys are constants at
capture time; ties, stability and reverse= as eager orders them. Keys that
depend on tensor values end capture there (a recorded reason), never a wrong
order."""
import operator

import pytest
import torch

from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, dynamo_graph_count, entries, one_graph, reasons


class Scaled(torch.nn.Module):
    def __init__(self, order, scale):
        super().__init__()
        self.order, self.scale = order, scale

    def forward(self, x):
        return x * self.scale


class Stack(torch.nn.Module):
    """Runs its blocks in the order of their `order` attribute."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Scaled(3, 2.0), Scaled(1, -1.0), Scaled(2, 0.5), Scaled(1, 3.0)])

    def forward(self, x):
        for m in sorted(self.blocks, key=lambda m: m.order):
            x = m(x) + 1
        return x + min(self.blocks, key=lambda m: m.order)(x)


def sorted_consts_key(x):
    return x * sorted([3, 1, 2], key=lambda v: -v)[0]


def sorted_reverse_consts(x):
    return x * sum(sorted([1, 2, 3], reverse=True)[:2])


def sorted_tensors_by_shape(x):
    parts = [x[:, :3], x[:, :1], x[:, :2]]
    out = sorted(parts, key=lambda t: t.shape[1])
    return torch.cat(out, dim=1)


def sorted_tensors_reverse_stable(x):
    parts = [x.sin(), x.cos(), x + 1, x * 2]
    tags = [2, 1, 2, 1]
    order = sorted(range(4), key=lambda i: tags[i], reverse=True)
    return torch.stack([parts[i] for i in order])


def sorted_dict_items_by_value(x):
    d = {"a": 3, "b": 1, "c": 2}
    return [x * v for _, v in sorted(d.items(), key=lambda kv: kv[1])]


def sorted_tuples_by_second(x):
    pairs = [(x.sin(), 2), (x.cos(), 0), (x.tanh(), 1)]
    return [t for t, _ in sorted(pairs, key=lambda p: p[1])]


def sorted_key_none(x):
    return x * sorted([2, 5, 1], key=None)[-1]


def min_by_key(x):
    pairs = [(1, "a"), (0, "b"), (0, "c")]
    return x * min(pairs, key=lambda t: t[0])[0] + len(min(pairs, key=lambda t: t[0])[1])


def max_tensor_by_dim(x):
    return max([x, x[:1], x[:2]], key=lambda t: t.shape[0]).exp()


def max_ties_first(x):
    parts = [x + 1, x + 2, x + 3]
    return max(parts, key=lambda t: t.dim())  # all equal: the first, as eager


def min_default_empty(x):
    return x * min([], default=4)


def max_default_unused(x):
    return max([x, x * 2], key=lambda t: t.shape[-1], default=None) + 1


def sorted_key_with_len(x):
    words = ["ccc", "a", "bb"]
    return x * len(sorted(words, key=len)[0]) + len(sorted(words, key=len, reverse=True)[0])


def sorted_key_builtin_abs(x):
    return x * sorted([-3, 1, -2], key=abs)[-1]


CASES = [
    sorted_consts_key, sorted_reverse_consts, sorted_tensors_by_shape, sorted_tensors_reverse_stable,
    sorted_dict_items_by_value, sorted_tuples_by_second, sorted_key_none,
    min_by_key, max_tensor_by_dim, max_ties_first, min_default_empty,
    max_default_unused, sorted_key_with_len, sorted_key_builtin_abs,
]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(4, 5), (3, 1)])
def test_ordering_by_key_is_one_graph(fn, shape):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    f = compiled(fn)
    want = fn(x)
    assert_same(f(x), want)
    assert_same(f(x), want)
    one_graph(fn)


def test_modules_sorted_by_attribute_is_one_graph():
    import wick

    torch.manual_seed(0)
    m, x = Stack(), torch.randn(4, 5)
    f = wick.compile(m)
    assert_same(f(x), m(x))
    assert_same(f(x), m(x))
    one_graph(Stack.forward)


@pytest.mark.parametrize("fn", [sorted_tensors_by_shape, min_by_key, sorted_key_with_len],
                         ids=lambda f: f.__name__)
def test_graph_count_not_above_dynamo(fn):
    x = torch.randn(4, 5)
    n = dynamo_graph_count(lambda comp: comp(fn)(x))
    if n:
        assert 1 <= n


def sorted_by_tensor_value(x):
    parts = [x[0], x[1], x[2]]
    return torch.stack(sorted(parts, key=lambda t: t.sum().item()))


def min_by_tensor_value(x):
    return min([x[0], x[1]], key=lambda t: float(t.sum())) * 2


def min_empty_raises(x):
    return x * min([], key=lambda v: v)


def key_call_order(x):
    seen = []

    def key(v):
        seen.append(v)
        return -v

    r = sorted([3, 1, 2], key=key)
    return x * r[0], seen


@pytest.mark.parametrize("fn", [sorted_by_tensor_value, min_by_tensor_value], ids=lambda f: f.__name__)
def test_keys_from_tensor_values_run_as_eager(fn):
    x = torch.randn(3, 4)
    f = compiled(fn)
    assert_same(f(x), fn(x))
    assert_same(f(x), fn(x))
    assert reasons(fn), "a key read from tensor values must not be taken as a constant"


def test_empty_min_raises_as_eager():
    x = torch.randn(2)
    with pytest.raises(ValueError):
        min_empty_raises(x)
    with pytest.raises(ValueError):
        compiled(min_empty_raises)(x)


def test_key_is_called_once_per_item_in_order():
    x = torch.randn(3)
    want = key_call_order(x)
    got = compiled(key_call_order)(x)
    assert_same(got, want)
    assert got[1] == [3, 1, 2]


def test_itemgetter_key_matches_eager():
    def fn(x):
        return [x * v for _, v in sorted({"b": 2, "a": 1}.items(), key=operator.itemgetter(1))]

    x = torch.randn(3)
    assert_same(compiled(fn)(x), fn(x))
    assert entries(fn)
