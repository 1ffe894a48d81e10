"""A list of tensors passed as an argument (a forward taking a list of
feature maps, `torch.cat(inputs, 1)` on a list handed in): read by
subscript, iteration, unpacking or a torch call, each tensor is a graph input
read through its index, the list's length and each item guarded. Changes the
frame makes to the list (append, item assignment, pop) are made to the same
list object after the graph, as eager leaves it. Compared with eager: values,
the list afterwards, gradients through the items, recompilation for another
length, and plain values mixed in (guarded equal)."""
import pytest
import torch

from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries, fallbacks, graphs, one_graph


def fuse(features, dim: int):
    first, *rest = features
    out = torch.cat(features, dim) * 2
    for f in rest:
        first = first + f.sum()
    return out, first, features[-1].relu()


@pytest.mark.parametrize("layout", ["contig", "transposed"])
@pytest.mark.parametrize("count", [1, 3])
def test_feature_list_is_one_graph(count, layout):
    gen = torch.Generator().manual_seed(count)
    feats = [torch.randn(4, 3, generator=gen) for _ in range(count)]
    if layout == "transposed":
        feats = [f.t().contiguous().t() for f in feats]
    got = compiled(fuse)(list(feats), 1)
    assert_same(got, fuse(list(feats), 1))
    one_graph(fuse)


def grow(features, extra):
    total = torch.stack(features).sum(0)
    features.append(extra * 3)
    features[0] = features[0] + 1
    last = features.pop(1) if len(features) > 2 else None
    return total, last


def test_changes_to_the_list_are_made_after_the_graph():
    gen = torch.Generator().manual_seed(0)
    feats = [torch.randn(5, generator=gen) for _ in range(3)]
    extra = torch.randn(5, generator=gen)
    mine, theirs = list(feats), list(feats)
    got = compiled(grow)(mine, extra)
    want = grow(theirs, extra)
    assert_same(got, want)
    assert len(mine) == len(theirs) == 3
    for a, b in zip(mine, theirs):
        assert torch.equal(a, b)
    assert mine[2] is not theirs[2]  # a tensor the frame made: the graph's output
    assert mine[1] is feats[2] and theirs[1] is feats[2]  # an item left in place stays the same object
    one_graph(grow)


def squares(features):
    return (torch.stack(features) ** 2).sum()


def test_gradients_reach_the_items():
    feats = [torch.randn(3, requires_grad=True) for _ in range(2)]
    got = torch.autograd.grad(compiled(squares)(feats), feats)
    again = [f.detach().requires_grad_(True) for f in feats]
    want = torch.autograd.grad(squares(again), again)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    one_graph(squares)


def test_another_length_recompiles_and_plain_items_are_guarded():
    def scaled(items):
        first = items[0]  # a read exposes the list; len() alone would not (breaks.c says why)
        return first * items[-1] if len(items) == 3 else first * 2

    f = compiled(scaled)
    for items in ([torch.randn(2), 3, 4.0], [torch.randn(2), 3], [torch.randn(2), 3, 5.0], [torch.randn(2), 3, 4.0]):
        assert_same(f(items), scaled(items))
    # three entries: length 3 with 4.0, length 2, length 3 with 5.0 (the last call hits the first)
    assert len(graphs(scaled)) == 3 and not fallbacks(scaled), entries(scaled)


def test_the_same_list_twice_is_not_exposed():
    def both(a, b):
        return torch.cat(a) + torch.cat(b)

    feats = [torch.randn(2), torch.randn(2)]
    assert_same(compiled(both)(feats, feats), both(feats, feats))
