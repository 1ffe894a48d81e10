"""torch.div / Tensor.div with rounding_mode (timm's xcit and edgenext
position encodings): None is division, "floor" the floor_divide row, "trunc"
division then trunc for floating operands; integer trunc division and
unknown modes are refused (eager runs, and raises where it raises). Each
function against eager on random values of several shapes, graph and break
counts pinned."""
import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403
from test_breaks_inplace import check, t


def float_modes(x, y):
    return (torch.div(x, 2, rounding_mode="floor"), torch.div(x, y, rounding_mode="trunc"),
            x.div(y, rounding_mode=None), torch.div(x * 7, -1.5, rounding_mode="floor"),
            x.div(3, rounding_mode="trunc"))


def int_floor(i):
    return torch.div(i, 3, rounding_mode="floor"), i.div(-4, rounding_mode="floor")


def position_encoding(x):
    dim_t = torch.arange(16, device=x.device).to(torch.float32)
    dim_t = 10000 ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / 16)
    return x[..., None] / dim_t


def int_trunc(i):
    return torch.div(i, 3, rounding_mode="trunc") + 1


def bad_mode(x):
    return torch.div(x, 2, rounding_mode="round")


@pytest.mark.parametrize("shape", [(4, 3), (5,), (0, 3), ()])
def test_rounding_modes(shape):
    check(float_modes, lambda: [t(*shape) * 10, t(*shape, seed=3).abs() + 0.5], (1, 0, 0))
    check(int_floor, lambda: [torch.randint(-50, 50, shape)], (1, 0, 0))
    check(position_encoding, lambda: [t(*shape)], (1, 0, 0))


def test_refused_modes():
    check(int_trunc, lambda: [torch.randint(-50, 50, (4, 3))], (1, 1, 0))  # a break at the call
    check(bad_mode, lambda: [t(4, 3)], (0, 1, 0))
