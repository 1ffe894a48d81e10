"""Typing forms subscripted at run time (timm's crossvit builds its branch
list with torch.jit.annotate(List[torch.Tensor], [])): List[...],
Optional[...], Tuple[int, ...], Dict[str, Tensor], Union[...], list[int] and
the like are constants of the graph's frame (capture computes them; typing's
own __getitem__ runs through functools caches), torch.jit.annotate(type,
value) is its value. A subscript Python refuses raises as it does eagerly.
Enum members (timm's Format, a str Enum) compare with == and != at
capture, a member read from a module guarded by identity.
Each function against eager on random values of several shapes, graph and
break counts pinned."""
import enum
from typing import Dict, List, Optional, Tuple, Union

import pytest
import torch

import wick
from test_capture_util import *  # noqa: F401,F403
from test_breaks_inplace import SHAPES, check, t


def annotated_list(x):
    out = torch.jit.annotate(List[torch.Tensor], [])
    for k in range(3):
        out.append(x * (k + 1))
    return torch.stack(out).sum(0)


def forms_as_values(x):
    forms = (List[torch.Tensor], Optional[int], Tuple[int, ...], Dict[str, torch.Tensor],
             Union[int, float], list[int], tuple[torch.Tensor, ...], dict[str, int])
    # the forms are equal to eager's (compared where they are used: a
    # branch on one, and one returned)
    scale = 2.0 if forms[1] == Optional[int] and forms[5] == list[int] else 3.0
    return x * scale, forms[2]


def annotated_dict(x):
    d = torch.jit.annotate(Dict[str, torch.Tensor], {})
    d["a"] = x.sin()
    d["b"] = x.cos()
    return d["a"] + d["b"]


def bad_subscript(x):
    return x + 1, Optional[int, str]  # TypeError: Optional takes one argument


@pytest.mark.parametrize("shape", SHAPES)
def test_typing_forms_in_one_graph(shape):
    check(annotated_list, lambda: [t(*shape)], (1, 0, 0))
    check(forms_as_values, lambda: [t(*shape, seed=1)], (1, 0, 0))
    check(annotated_dict, lambda: [t(*shape, seed=2)], (1, 0, 0))


def test_bad_subscript_raises_as_eager():
    # the graph before it, then a break where the TypeError is raised (eagerly)
    check(bad_subscript, lambda: [t(4, 3)], (1, 1, 0), dynamo=False)


# ---- enum members compared (timm's PatchEmbed: self.output_fmt != Format.NCHW) --------

class Format(str, enum.Enum):
    NCHW = "NCHW"
    NHWC = "NHWC"


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class Embed(torch.nn.Module):
    def __init__(self, fmt, color):
        super().__init__()
        self.fmt, self.color = fmt, color

    def forward(self, x):
        if self.fmt != Format.NCHW:
            x = x.permute(0, 2, 3, 1)
        if self.color == Color.BLUE and self.fmt == "NHWC":  # a str Enum equals its value
            x = x * 2
        return x + 1


@pytest.mark.parametrize("fmt", list(Format))
@pytest.mark.parametrize("color", list(Color))
def test_enum_members_compare_in_one_graph(fmt, color):
    m = Embed(fmt, color)
    wick.reset()
    f = wick.compile(m)
    for seed in range(2):
        x = t(2, 3, 4, 5, seed=seed)
        torch.testing.assert_close(f(x), m(x), rtol=0, atol=0)
    assert stats_counts() == (1, 0, 0), wick.stats()


def test_enum_member_swapped_is_guarded():
    """The member read from the module is guarded by identity: another one
    compiles again and computes what eager does."""
    m = Embed(Format.NCHW, Color.RED)
    wick.reset()
    f = wick.compile(m)
    x = t(2, 3, 4, 5)
    torch.testing.assert_close(f(x), m(x))
    m.fmt, m.color = Format.NHWC, Color.BLUE
    torch.testing.assert_close(f(x), m(x))
    assert f(x).shape == (2, 4, 5, 3)
    assert wick.stats()["graphs"] == 2
