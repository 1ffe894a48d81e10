"""os.environ read inside a captured frame (transformers' use_gqa_in_sdpa
asks os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA", "0") in every attention
call): a read by a str key is a constant of the graph, guarded on that entry
of the environment, absent included. Setting, changing or removing the
variable later recompiles, and the frame then sees the new value, as eager
does. os.environ.get, `in`, os.getenv and a subscript (KeyError caught by
the frame) are one graph each; a non-str key raises TypeError as eager."""
import os

import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403
from test_breaks_inplace import SHAPES, check, t

VAR = "WICK_TEST_ENVIRON_FLAG"


@pytest.fixture(autouse=True)
def clean_var():
    os.environ.pop(VAR, None)
    yield
    os.environ.pop(VAR, None)


def by_get(x):
    if os.environ.get(VAR, "0") == "1":
        return x * 3
    return x.sin()


def by_contains(x):
    return x + 1 if VAR in os.environ else x - 1


def by_getenv(x):
    v = os.getenv(VAR)
    return x * 2 if v is None else x * float(v)


def by_subscript(x):
    try:
        scale = float(os.environ[VAR])
    except KeyError:
        scale = 0.5
    return x * scale


def bad_key(x):
    return x + 1, os.environ.get(3)  # TypeError: str expected, not int


def run(fn, x):
    return fn(x.clone())


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fn", [by_get, by_contains, by_getenv, by_subscript])
def test_unset_variable_is_one_graph(fn, shape):
    check(fn, lambda: [t(*shape)], (1, 0, 0))


@pytest.mark.parametrize("fn", [by_get, by_contains, by_getenv, by_subscript])
def test_setting_the_variable_recompiles(fn):
    C.reset()
    cf = compiled(fn)
    x = t(5, 4, seed=3)
    torch.testing.assert_close(cf(x), fn(x))
    for value in ["1", "2.5", "1", None]:
        if value is None:
            os.environ.pop(VAR)
        else:
            os.environ[VAR] = value
        torch.testing.assert_close(cf(x), fn(x))
    es = entries(fn)
    assert all(not e["eager"] and e["graph_count"] == 1 and not e.get("breaks") for e in es), reasons(fn)
    # unset, "1", "2.5" each compiled once; "1" again and unset again hit
    # their entries (a new str object for "1": the guard reads the value)
    assert 2 <= len(es) <= 4, len(es)


def test_guard_follows_the_value_not_the_object():
    C.reset()
    cf = compiled(by_get)
    x = t(3, 2, seed=5)
    os.environ[VAR] = "1"
    torch.testing.assert_close(cf(x), x * 3)
    os.environ[VAR] = "0"
    torch.testing.assert_close(cf(x), x.sin())
    os.environ[VAR] = "1"
    torch.testing.assert_close(cf(x), x * 3)


def test_non_str_key_raises_as_eager():
    # the graph before it, then a break where the TypeError leaves the
    # frame; Mapping.get, called eagerly there, breaks and falls back on
    # its own (its self is an argument there, not the pinned os.environ)
    check(bad_key, lambda: [t(4, 3)], (1, 2, 1), dynamo=False)
