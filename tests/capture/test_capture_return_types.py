"""torch.return_types named tuples (x.max(dim), torch.sort, topk, aminmax,
...): capture keeps the class with the items, as for a namedtuple, so
`.values` and `.indices` read items, and a result returned (or handed to
the code after a graph break) is rebuilt as that very class. Before, it
came back as a plain tuple, and code after a break reading `.values`
(transformers' GPT-OSS attention) raised AttributeError."""
import pytest
import torch

from test_capture_util import *  # noqa: F401,F403
from test_breaks_inplace import t


def max_fields(x):
    m = x.max(dim=-1, keepdim=True)
    return x - m.values, m.indices


def several(x):
    s = torch.sort(x, dim=-1, descending=True)
    k = x.topk(2)
    lo, hi = torch.aminmax(x, dim=0)
    mn = torch.min(x, 1)
    return s.values + k.values.sum() + lo.sum() + hi.sum() + mn[0].sum(), s.indices, k.indices


def returns_it(x):
    return (x * 2).max(dim=0)


def read_after_break(x):
    m = (x + 1).max(dim=-1, keepdim=True)
    print("", end="")  # a graph break: m reaches eager code
    return x - m.values, type(m).__name__


@pytest.mark.parametrize("shape,transposed", [((3, 5), False), ((2, 4, 6), False), ((7, 3), True)])
def test_fields_are_read_in_one_graph(shape, transposed):
    for fn in (max_fields, several):
        x = t(*shape, seed=1)
        x = x.transpose(0, 1) if transposed else x  # (3, 7), not contiguous
        got, exp = compiled(fn)(x), fn(x)
        for a, b in zip(got, exp):
            torch.testing.assert_close(a, b)
        one_graph(fn)


def test_returned_result_is_the_class():
    x = t(4, 3, seed=2)
    got, exp = compiled(returns_it)(x), returns_it(x)
    assert type(got) is type(exp) is torch.return_types.max
    torch.testing.assert_close(got.values, exp.values)
    torch.testing.assert_close(got.indices, exp.indices)
    one_graph(returns_it)


def test_result_handed_over_at_a_break():
    x = t(3, 4, seed=3)
    got, exp = compiled(read_after_break)(x), read_after_break(x)
    torch.testing.assert_close(got[0], exp[0])
    assert got[1] == exp[1] == "max"
