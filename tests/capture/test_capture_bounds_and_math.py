"""torch.clamp with one bound (timm's SwinV2-CR: clamp(scale, max=...)) is
the clamp_min or clamp_max row, with the other bound absent or None, as a
function or a method, the bound a number or a tensor; with neither, eager
raises and so does the compiled call. math functions fold over lists capture
holds item by item (timm's Hiera: math.prod(strides) of a list attribute).
Against eager on random values of several shapes, graph counts pinned."""
import math

import pytest
import torch

from test_capture_util import *  # noqa: F401,F403
from test_breaks_inplace import SHAPES, check, t


def one_bound(x, b):
    return (torch.clamp(x, max=0.5), torch.clamp(x, min=-0.25), torch.clamp(x, None, 0.3),
            torch.clamp(x, -0.1, None), x.clamp(max=b), x.clamp(min=b), x.clip(max=0.2),
            torch.clamp(x, max=math.log(1.0 / 0.01)).exp())


def no_bound(x):
    return torch.clamp(x, min=None, max=None)


def prod_of_list(x):
    sizes = [x.shape[0], 1]
    sizes.append(2)
    steps = [[1, 2], [3]]
    return x * math.prod(sizes) + math.fsum(steps[0]) + math.prod(steps[1])


@pytest.mark.parametrize("shape", SHAPES)
def test_clamp_with_one_bound(shape):
    check(one_bound, lambda: [t(*shape), t(*shape, seed=5)], (1, 0, 0))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int64])
def test_clamp_with_one_bound_dtypes(dtype):
    def ints(x):
        return torch.clamp(x, max=3), x.clamp(min=-2)

    check(ints, lambda: [(t(4, 5) * 10).to(dtype)], (1, 0, 0))


def test_clamp_with_no_bound_raises_as_eager():
    check(no_bound, lambda: [t(3, 4)], (0, 1, 0), dynamo=False)


@pytest.mark.parametrize("shape", [(4, 3), (2,), (3, 0)])
def test_math_of_lists_folds(shape):
    check(prod_of_list, lambda: [t(*shape)], (1, 0, 0))
