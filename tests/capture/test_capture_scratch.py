"""copy.deepcopy of an object reached from the frame's arguments (a model's
config, as T5 and Whisper copy theirs to set up their decoder's cache):
made for real at capture time, the original guarded equal to a snapshot,
the copy worked on for real and never leaving the capture
(vals/scratch.c). Each case runs eagerly and through wick."""
import copy

import pytest
import torch
from torch import nn

from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries, reasons


class Config:
    shared = {}  # class-level: the program's, never a copy's

    def __init__(self, **kw):
        self.hidden = 4
        self.layers = 2
        self.decoder_layers = 3
        self.names = ["a", "b"]
        self.__dict__.update(kw)

    def __eq__(self, other):
        return type(other) is type(self) and self.__dict__ == other.__dict__

    def to_dict(self):
        out = copy.deepcopy(self.__dict__)
        out["kind"] = type(self).__name__
        return out

    @property
    def total(self):
        return self.layers + self.decoder_layers


class NoValueEq:
    def __init__(self):
        self.layers = 2


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        c = copy.deepcopy(self.config)
        c.layers = self.config.decoder_layers
        d = c.to_dict()
        for key in list(d):
            if key.startswith("decoder_"):
                delattr(c, key)
                setattr(c, key[len("decoder_"):] + "_copy", d[key])
        c.names.append("c")
        for _ in range(c.layers + len(c.names)):
            x = torch.tanh(self.lin(x))
        return x * c.total_copy if hasattr(c, "total_copy") else x * c.layers_copy


def _one_graph(fn):
    es = entries(fn)
    assert es and not es[-1]["eager"], es[-1]["reason"]
    assert es[-1]["graph_count"] == 1, reasons(fn)


@pytest.mark.parametrize("shape", [(2, 4), (3, 2, 4)])
def test_deepcopy_of_config_is_one_graph(shape):
    torch.manual_seed(0)
    m = Model(Config())
    x = torch.randn(*shape)
    expected = m(x)
    got = compiled(Model.forward)(m, x)
    assert_same(got, expected)
    _one_graph(Model.forward)
    assert m.config == Config()  # the original is untouched


def test_changed_config_is_seen():
    torch.manual_seed(0)
    m = Model(Config())
    x = torch.randn(2, 4)
    f = compiled(Model.forward)
    assert_same(f(m, x), m(x))
    m.config.decoder_layers = 1  # the guard on the snapshot fails: captured again
    assert_same(f(m, x), m(x))
    m.config.names.append("z")  # a nested change
    assert_same(f(m, x), m(x))
    assert len(entries(Model.forward)) == 3


def returns_copy(m, x):
    c = copy.deepcopy(m.config)
    return x + c.layers, c


def test_copy_never_leaves_the_capture():
    m = Model(Config())
    x = torch.randn(3)
    f = compiled(returns_copy)
    got1, c1 = f(m, x)
    got2, c2 = f(m, x)
    exp, ce = returns_copy(m, x)
    assert_same(got1, exp)
    assert c1 == ce and c1 is not c2 and c1 is not m.config
    assert any("returning" in r or "scratch" in r or "copied" in r or "returning a" in r for r in reasons(returns_copy)), \
        reasons(returns_copy)


def copies_no_value_eq(m, x):
    c = copy.deepcopy(m.config)
    return x * c.layers


def test_copy_of_object_without_value_eq_is_not_folded():
    m = Model(NoValueEq())
    x = torch.randn(3)
    assert_same(compiled(copies_no_value_eq)(m, x), copies_no_value_eq(m, x))
    assert any("does not compare by value" in r for r in reasons(copies_no_value_eq)), reasons(copies_no_value_eq)


def writes_class_dict(m, x):
    c = copy.deepcopy(m.config)
    c.shared["seen"] = 1  # the class's dict, not the copy's
    return x + 1


def test_class_level_state_reached_through_a_copy_is_not_scratch():
    m = Model(Config())
    x = torch.randn(3)
    Config.shared.clear()
    got = compiled(writes_class_dict)(m, x)
    assert_same(got, x + 1)
    assert Config.shared == {"seen": 1}  # the write happened, as in Python
    Config.shared.clear()


def list_alias(m, x):
    c = copy.deepcopy(m.config)
    extra = [1, 2]
    c.extra = extra
    extra.append(3)  # the copy holds the same list
    return x * len(c.extra) + sum(c.extra)


def test_list_stored_in_a_copy_stays_aliased():
    m = Model(Config())
    x = torch.randn(3)
    assert_same(compiled(list_alias)(m, x), list_alias(m, x))


def missing_attr(m, x):
    c = copy.deepcopy(m.config)
    try:
        v = c.nothing_here
    except AttributeError:
        v = 5
    return x * v + (2 if hasattr(c, "names") else 0)


def test_attribute_error_on_a_copy_is_modelled():
    m = Model(Config())
    x = torch.randn(3)
    assert_same(compiled(missing_attr)(m, x), missing_attr(m, x))
    _one_graph(missing_attr)
