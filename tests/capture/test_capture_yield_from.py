"""`yield from` inside a generator that capture inlines (nn.Module.
named_modules recurses with it): the items of what it delegates to are
yielded in order, as the generator runs to its end; a `yield from` whose
value the generator uses is refused (the frame breaks, eager's values).
Against eager on random values, graph counts pinned."""
import torch

import wick
from test_capture_util import *  # noqa: F401,F403
from test_breaks_inplace import check, t


def delegating(xs):
    yield 0.5
    yield from xs
    yield from (v * 2 for v in xs)
    yield from {"a": 1.0, "b": 3.0}.values()
    yield from inner(len(xs))


def inner(n):
    for k in range(n):
        yield float(k)
    yield from ()


def uses_yield_from(x):
    return sum(v * x for v in delegating([1.0, 2.0, 3.0]))


def returns_value():
    yield 1.0
    return 5.0


def value_used():
    got = yield from returns_value()
    yield got


def uses_the_value(x):
    return sum(v * x for v in value_used())


def test_yield_from_in_one_graph():
    for shape in ((4, 3), (5,), ()):
        check(uses_yield_from, lambda: [t(*shape)], (1, 0, 0))


def test_yield_from_whose_value_is_used_runs_as_eager():
    check(uses_the_value, lambda: [t(4, 3)], (0, 1, 1), dynamo=False)


class Tree(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        self.b = torch.nn.Linear(4, 4)
        self.shared = self.b  # named_modules yields a module once

    def forward(self, x):
        names = [name for name, _ in self.named_modules()]
        return self.b(self.a(x)) * len(names) + len(list(self.modules()))


def test_named_modules_in_forward_is_one_graph():
    torch.manual_seed(0)
    m = Tree()
    wick.reset()
    f = wick.compile(m)
    for seed in range(2):
        x = t(3, 4, seed=seed)
        torch.testing.assert_close(f(x), m(x))
    assert stats_counts() == (1, 0, 0), wick.stats()
