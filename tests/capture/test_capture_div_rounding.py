"""torch.div / Tensor.div with rounding_mode (timm's xcit and edgenext
position encodings): None is division, "floor" the floor_divide row, "trunc"
division then trunc for floating operands; integer trunc division and
unknown modes are refused (eager runs, and raises where it raises). Each
function against eager on random values (non-zero divisors) of several
shapes, layouts (transposed, strided slices), 0-d and empty operands and
integer dtypes, graph and break counts pinned."""
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


# ---- layouts, 0-d and empty operands, integer dtypes ---------------------------


def nonzero(x):
    """x pushed away from 0 (|x| >= 0.5, signs kept): a divisor."""
    return torch.where(x >= 0, x + 0.5, x - 0.5)


def tensor_modes(x, y):
    return (torch.div(x, y, rounding_mode="floor"), torch.div(x, y, rounding_mode="trunc"),
            x.div(y, rounding_mode=None), torch.div(y * 5, x, rounding_mode="floor"),
            x.div(2.5, rounding_mode="trunc"), torch.div(x, rounding_mode="floor", other=y))  # not the last keyword


def int_floor_positive(i):  # divisors an unsigned tensor takes as they are
    return torch.div(i, 3, rounding_mode="floor"), i.div(7, rounding_mode="floor") * 2


def int_by_tensor(i, j):
    return torch.div(i, j, rounding_mode="floor") + 1


# operands of shape (4, 3) laid out three ways, their values made by f before
# the view is taken (a pointwise op of a slice would give a contiguous tensor)
LAYOUTS = {
    "transposed": lambda f, s: f(t(3, 4, seed=s)).t(),
    "strided": lambda f, s: f(t(4, 6, seed=s))[:, ::2],
    "contiguous": lambda f, s: f(t(4, 3, seed=s)),
}


@pytest.mark.parametrize("lx,ly", [("transposed", "contiguous"), ("contiguous", "transposed"), ("transposed", "transposed"),
                                   ("strided", "contiguous"), ("contiguous", "strided"), ("strided", "transposed")])
def test_rounding_modes_non_contiguous(lx, ly):
    def make():
        x, y = LAYOUTS[lx](lambda v: v * 10, 1), LAYOUTS[ly](nonzero, 2)
        assert x.shape == y.shape == (4, 3)
        assert (x.is_contiguous(), y.is_contiguous()) == (lx == "contiguous", ly == "contiguous")
        return [x, y]

    check(tensor_modes, make, (1, 0, 0))
    check(float_modes, make, (1, 0, 0))


def test_rounding_modes_zero_dim_operand():
    check(tensor_modes, lambda: [t(4, 3, seed=1) * 10, nonzero(t(seed=2))], (1, 0, 0))  # 0-d divisor
    check(tensor_modes, lambda: [t(seed=1) * 10, nonzero(t(4, 3, seed=2))], (1, 0, 0))  # 0-d dividend
    check(tensor_modes, lambda: [(t(3, 4, seed=1) * 10).t(), nonzero(t(seed=2))], (1, 0, 0))
    # an integer 0-d divisor of a float tensor: a float division
    check(tensor_modes, lambda: [t(4, 3, seed=1) * 10, torch.tensor(-3)], (1, 0, 0))
    check(float_modes, lambda: [t(seed=1) * 10, nonzero(t(seed=2))], (1, 0, 0))


def test_rounding_modes_empty():
    check(tensor_modes, lambda: [t(0, 3, seed=1), nonzero(t(3, seed=2))], (1, 0, 0))  # broadcast against empty
    check(tensor_modes, lambda: [t(3, 0, seed=1).t(), nonzero(t(0, 3, seed=2))], (1, 0, 0))
    check(tensor_modes, lambda: [t(4, 3, seed=1), nonzero(t(0, 1, 3, seed=2))], (1, 0, 0))
    check(int_floor, lambda: [torch.randint(-50, 50, (3, 0)).t()], (1, 0, 0))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
def test_int_floor_dtypes(dtype):
    lo = 0 if dtype == torch.uint8 else -50
    check(int_floor_positive, lambda: [torch.randint(lo, 50, (4, 3), dtype=dtype)], (1, 0, 0))
    check(int_floor_positive, lambda: [torch.randint(lo, 50, (3, 4), dtype=dtype).t()], (1, 0, 0))
    check(int_floor_positive, lambda: [torch.randint(lo, 50, (4, 6), dtype=dtype)[:, ::2]], (1, 0, 0))
    check(int_floor_positive, lambda: [torch.randint(lo, 50, (), dtype=dtype)], (1, 0, 0))
    check(int_floor_positive, lambda: [torch.randint(lo, 50, (0, 3), dtype=dtype)], (1, 0, 0))
    if dtype != torch.uint8:  # negative divisors
        check(int_floor, lambda: [torch.randint(-50, 50, (4, 6), dtype=dtype)[:, ::2]], (1, 0, 0))
        check(int_floor, lambda: [torch.randint(-50, 50, (3, 4), dtype=dtype).t()], (1, 0, 0))


def test_refused_modes_layouts():
    # integer trunc is refused whatever the operand's layout or shape: a break
    # at the call, eager's results
    check(int_trunc, lambda: [torch.randint(-50, 50, (3, 4)).t()], (1, 1, 0))
    check(int_trunc, lambda: [torch.randint(-50, 50, (4, 6), dtype=torch.int32)[:, ::2]], (1, 1, 0))
    check(int_trunc, lambda: [torch.tensor(-7)], (1, 1, 0))
    check(int_trunc, lambda: [torch.randint(-50, 50, (0, 3))], (1, 1, 0))
    # so is integer floor division by an integer tensor (eager raises on a zero
    # divisor, which capture cannot see): non-zero divisors, eager's results
    j = lambda *shape: torch.randint(1, 9, shape) * (torch.randint(0, 2, shape) * 2 - 1)
    check(int_by_tensor, lambda: [torch.randint(-50, 50, (3, 4)).t(), j(4, 3)], (1, 1, 0))
    check(int_by_tensor, lambda: [torch.randint(-50, 50, (4, 3), dtype=torch.int32), j()], (1, 1, 0))
