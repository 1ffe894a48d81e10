"""The gradient of a VIEW node (wick/_autodiff.py, _view_rule): views made
by chains of random view ops (permute, transpose, slices with a start,
select, narrow, unsqueeze, expand, reshape, flatten) of bases that are
themselves contiguous, permuted or sliced, each a graph x -> view(x) * w
differentiated by wick and compared with torch's gradient of the same
as_strided view on random values (a view the graph builder itself refuses,
which capture makes an extern call, is skipped). Strided slices are views
like any other. A slice whose step does not divide its dim's size has no
rule: wick says so (Unsupported) and wick.compile still gives eager's
gradients, through AOTAutograd."""
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
                         "flatten"])
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


@pytest.mark.parametrize("seed", range(60))
def test_view_gradient_equals_torch(seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    base = _random_base(rng)
    view = _random_view(rng, base, rng.randint(1, 4))
    if view.numel() == 0:
        pytest.skip("an empty view")
    weight = torch.randn(view.shape, dtype=torch.float64)
    out, gx, grad_out = _wick_gradient(base, view, weight)
    ref_base = base.detach().requires_grad_(True)
    offset = view.storage_offset() - base.storage_offset()
    ref = torch.as_strided(ref_base, view.shape, view.stride(), ref_base.storage_offset() + offset) * weight
    (ref_gx,) = torch.autograd.grad(ref, ref_base, grad_out)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(gx, ref_gx)


@pytest.mark.parametrize("step", [2, 3])
def test_strided_slices(step):
    base = torch.randn(4, 6, dtype=torch.float64)
    view = base[1:, ::step]
    weight = torch.randn(view.shape, dtype=torch.float64)
    out, gx, grad_out = _wick_gradient(base, view, weight)
    expected = torch.zeros_like(base)
    expected[1:, ::step] = grad_out * weight
    torch.testing.assert_close(gx, expected)


def test_a_step_that_does_not_divide_is_unsupported_and_compile_still_matches_eager():
    base = torch.randn(4, 6, dtype=torch.float64)
    view = base[:, ::4]
    weight = torch.randn(view.shape, dtype=torch.float64)
    with pytest.raises(_autodiff.Unsupported, match="gradient of a view"):
        _wick_gradient(base, view, weight)

    def f(x, w):
        return (x[:, ::4] * w).sum(dim=1)

    wick.reset()
    x = torch.randn(4, 6, requires_grad=True)
    w = torch.randn(4, 2, requires_grad=True)
    out = wick.compile(f)(x, w)
    gx, gw = torch.autograd.grad(out.sum(), (x, w))
    x2, w2 = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    rgx, rgw = torch.autograd.grad(f(x2, w2).sum(), (x2, w2))
    torch.testing.assert_close(gx, rgx)
    torch.testing.assert_close(gw, rgw)
    s = wick.stats()
    assert s["graphs"] == 1 and not s["fallbacks"]
    assert s["autodiff"]["fallbacks"] == 1 and "view" in s["autodiff"]["reasons"][0]
