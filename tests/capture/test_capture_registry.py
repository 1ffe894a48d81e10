"""A registry read with a key it lacks (transformers' AttentionInterface:
a MutableMapping over a class-level dict, whose .get("eager", default) asks
self["eager"] and catches the KeyError; Gemma-2 attends with "eager"). The
subscript raises KeyError inside capture as eager does, the frame's except
clause (or Mapping.get's) takes it, and the key's absence is guarded:
registering it later recompiles, and the frame then uses what was
registered. Uncaught, the KeyError leaves the frame as in eager."""
import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403
from test_breaks_inplace import SHAPES, check, t
from test_capture_transformers_constructs import Registry


class Interface(Registry):
    """transformers' GeneralInterface, as test_capture_transformers_constructs models it"""

    _global_mapping = {"double": lambda x: x * 2}


FUNCS = Interface()
PLAIN = {"sin": torch.sin}


def default_when_missing(x):
    fn = FUNCS.get("eager", torch.tanh)
    return fn(x) + FUNCS.get("double", None)(x)


def except_clause(x):
    try:
        fn = PLAIN["cos"]
    except KeyError:
        fn = PLAIN["sin"]
    return fn(x) * 3


def uncaught(x):
    return PLAIN["missing"](x)


@pytest.mark.parametrize("shape", SHAPES)
def test_missing_key_is_one_graph(shape):
    check(default_when_missing, lambda: [t(*shape)], (1, 0, 0), dynamo=False)
    check(except_clause, lambda: [t(*shape, seed=1)], (1, 0, 0), dynamo=False)


def test_registering_the_key_recompiles():
    C.reset()
    cf = compiled(except_clause)
    x = t(4, 3, seed=2)
    torch.testing.assert_close(cf(x), except_clause(x))
    PLAIN["cos"] = torch.cos
    try:
        torch.testing.assert_close(cf(x), torch.cos(x) * 3)
    finally:
        del PLAIN["cos"]
    torch.testing.assert_close(cf(x), torch.sin(x) * 3)
    FUNCS["eager"] = torch.exp
    try:
        C.reset()
        cf = compiled(default_when_missing)
        torch.testing.assert_close(cf(x), torch.exp(x) + x * 2)
    finally:
        del FUNCS["eager"]
    torch.testing.assert_close(cf(x), torch.tanh(x) + x * 2)


def test_uncaught_key_error_as_eager():
    C.reset()
    cf = compiled(uncaught)
    with pytest.raises(KeyError):
        cf(t(3))
