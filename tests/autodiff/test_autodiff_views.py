"""The gradient of a VIEW node (wick/_autodiff.py, _view_rule): views made
by chains of random view ops (permute, transpose, slices with a start,
select, narrow, unsqueeze, expand, reshape, flatten) of bases that are
themselves contiguous, permuted or sliced, each a graph x -> view(x) * w
differentiated by wick and compared with torch's gradient of the same
as_strided view on random values (a view the graph builder itself refuses,
which capture makes an extern call, is skipped). Strided slices are views
like any other; where the step does not divide the dim's size (x[1::2] of
an odd length), the gradient is built dim by dim with zeros between and
around the elements (_stepped_view_gradient)."""
import random

import pytest
import torch

import wick
import wick._C as C
from wick import _autodiff


def _random_base(rng):
    nd = rng.randint(1, 4)
    sizes = [rng.randint(1, 6) for _ in range(nd)]
    storage = torch.randn(sizes, dtype=torch.float64)
    kind = rng.choice(["contiguous", "permuted", "sliced"])
    if kind == "permuted" and nd > 1:
        perm = list(range(nd))
        rng.shuffle(perm)
        return storage.permute(perm)
    if kind == "sliced" and sizes[-1] > 2:
        return storage[..., 1:]
    return storage


def _random_view(rng, base, steps):
    v = base
    for _ in range(steps):
        op = rng.choice(["permute", "transpose", "slice", "select", "narrow", "unsqueeze", "expand", "reshape",
                         "flatten", "step"])
        nd = v.dim()
        try:
            if op == "permute" and nd > 1:
                perm = list(range(nd))
                rng.shuffle(perm)
                v = v.permute(perm)
            elif op == "transpose" and nd > 1:
                v = v.transpose(rng.randrange(nd), rng.randrange(nd))
            elif op == "slice" and nd and v.shape[-1] > 1:
                d = rng.randrange(nd)
                n = v.shape[d]
                if n > 1:
                    start = rng.randrange(n - 1)
                    v = v.narrow(d, start, rng.randint(1, n - start))
            elif op == "select" and nd > 1:
                d = rng.randrange(nd)
                v = v.select(d, rng.randrange(v.shape[d]))
            elif op == "narrow" and nd:
                d = rng.randrange(nd)
                if v.shape[d] > 2:
                    v = v.narrow(d, 1, v.shape[d] - 2)
            elif op == "unsqueeze" and nd < 5:
                v = v.unsqueeze(rng.randint(0, nd))
            elif op == "expand" and nd:
                ones = [d for d in range(nd) if v.shape[d] == 1]
                if ones:
                    sizes = list(v.shape)
                    sizes[rng.choice(ones)] = rng.randint(2, 3)
                    v = v.expand(sizes)
            elif op == "reshape" and nd and v.numel():
                v = v.view(-1) if rng.random() < 0.5 else v.view(list(v.shape[:-1]) + [v.shape[-1]])
            elif op == "flatten" and nd > 1:
                v = v.flatten(0, 1)
            elif op == "step" and nd:
                d = rng.randrange(nd)
                if v.shape[d] > 1:
                    index = [slice(None)] * nd
                    index[d] = slice(rng.randrange(v.shape[d]), None, rng.randint(2, 3))
                    v = v[tuple(index)]
        except RuntimeError:  # not expressible as a view of this layout: skip the step
            pass
    return v


def _wick_gradient(base, view, weight):
    g = C.Graph()
    x = g.input_like(base)
    w = g.input_like(weight)
    offset = view.storage_offset() - base.storage_offset()
    try:
        v = g.op("VIEW", [x], ints=[view.dim()] + list(view.shape) + list(view.stride()) + [offset])
    except ValueError as exc:
        pytest.skip(f"the graph builder refuses this view: {exc}")
    g.output(g.op("MUL", [v, w]))
    xb = base.detach().clone().requires_grad_(True) if base.is_contiguous() else None
    x_in = base.detach().requires_grad_(True) if xb is None else xb
    run = _autodiff.compile_training(g, [], [x_in, weight])
    (out,) = run(x_in, weight)
    grad_out = torch.randn_like(out)
    (gx,) = torch.autograd.grad(out, x_in, grad_out)
    return out, gx, grad_out


def _check_against_torch(base, view):
    """wick's gradient of view(x) * w against torch's of the same as_strided view."""
    weight = torch.randn(view.shape, dtype=torch.float64)
    out, gx, grad_out = _wick_gradient(base, view, weight)
    ref_base = base.detach().requires_grad_(True)
    offset = view.storage_offset() - base.storage_offset()
    ref = torch.as_strided(ref_base, view.shape, view.stride(), ref_base.storage_offset() + offset) * weight
    (ref_gx,) = torch.autograd.grad(ref, ref_base, grad_out)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(gx, ref_gx)


@pytest.mark.parametrize("seed", range(90))
def test_view_gradient_equals_torch(seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    base = _random_base(rng)
    view = _random_view(rng, base, rng.randint(1, 4))
    if view.numel() == 0:
        pytest.skip("an empty view")
    _check_against_torch(base, view)


@pytest.mark.parametrize("step", [2, 3])
def test_strided_slices(step):
    base = torch.randn(4, 6, dtype=torch.float64)
    view = base[1:, ::step]
    weight = torch.randn(view.shape, dtype=torch.float64)
    out, gx, grad_out = _wick_gradient(base, view, weight)
    expected = torch.zeros_like(base)
    expected[1:, ::step] = grad_out * weight
    torch.testing.assert_close(gx, expected)


@pytest.mark.parametrize("index", [(slice(None), slice(None, None, 4)), (slice(1, None, 2),),
                                   (slice(None, None, 3), slice(1, None, 2)), (slice(2, 5, 2), 3)])
def test_a_step_that_does_not_divide_the_size(index):
    # zeros between the elements and around them (_stepped_view_gradient)
    base = torch.randn(7, 6, dtype=torch.float64)
    view = base[index]
    weight = torch.randn(view.shape, dtype=torch.float64)
    out, gx, grad_out = _wick_gradient(base, view, weight)
    expected = torch.zeros_like(base)
    expected[index] = grad_out * weight
    torch.testing.assert_close(gx, expected)


@pytest.mark.parametrize("seed", range(24))
def test_random_steps_over_odd_sizes(seed):
    # bases of odd sizes (contiguous, permuted or sliced), stepped slices on
    # one or two dims, then a random view op: 14 of these 24 take
    # _stepped_view_gradient (counted when it was written), the others digits
    rng = random.Random(1000 + seed)
    torch.manual_seed(seed)
    sizes = [rng.choice([5, 7]) for _ in range(rng.randint(1, 3))]
    base = torch.randn(sizes, dtype=torch.float64)
    if rng.random() < 0.5 and len(sizes) > 1:
        base = base.transpose(0, -1)
    elif rng.random() < 0.5:
        base = base[..., 1:]
    index = [slice(None)] * base.dim()
    for d in rng.sample(range(base.dim()), min(base.dim(), rng.randint(1, 2))):
        index[d] = slice(rng.randrange(2), None, rng.randint(2, 3))
    view = _random_view(rng, base[tuple(index)], 1)
    if view.numel() == 0:
        pytest.skip("an empty view")
    _check_against_torch(base, view)


def test_stepped_slices_through_compile_use_wicks_autodiff():
    def f(x, w):
        return (x[:, ::4] * w).sum(dim=1) + x.t()[1::2, ::3].sum(dim=0)

    wick.reset()
    x = torch.randn(3, 7, requires_grad=True)
    w = torch.randn(3, 2, requires_grad=True)
    out = wick.compile(f)(x, w)
    gx, gw = torch.autograd.grad(out.sum(), (x, w))
    x2, w2 = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    rgx, rgw = torch.autograd.grad(f(x2, w2).sum(), (x2, w2))
    torch.testing.assert_close(gx, rgx)
    torch.testing.assert_close(gw, rgw)
    s = wick.stats()
    assert s["graphs"] == 1 and not s["fallbacks"]
    assert s["autodiff"]["graphs"] == 1 and not s["autodiff"]["fallbacks"], s["autodiff"]
