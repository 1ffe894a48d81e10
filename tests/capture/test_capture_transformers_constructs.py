"""Constructs transformers' model code uses, each compared with eager and its
graph count asserted: dropout in eval mode, contiguous() of a contiguous
tensor, type(self), a registry (a Mapping subclass with a class-level dict)
read through `in`/`[]`, a staticmethod read through self, `is` between
functions. A registry change after compiling recompiles (guarded)."""
from collections.abc import MutableMapping

import torch
import torch.nn as nn
import torch.nn.functional as F

import wick._C as C
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, fallbacks, graphs


class Registry(MutableMapping):
    _global_mapping = {"relu": torch.relu, "tanh": torch.tanh}

    def __init__(self):
        self._local_mapping = {}

    def __getitem__(self, key):
        if key in self._local_mapping:
            return self._local_mapping[key]
        return self._global_mapping[key]

    def __setitem__(self, key, value):
        self._local_mapping.update({key: value})

    def __delitem__(self, key):
        del self._local_mapping[key]

    def __iter__(self):
        return iter({**self._global_mapping, **self._local_mapping})

    def __len__(self):
        return len(self._global_mapping.keys() | self._local_mapping.keys())


REG = Registry()


def use_registry(x):
    if "relu" not in REG._global_mapping:
        return x
    if "tanh" in REG:
        return REG["relu"](x) + REG["tanh"](x)
    return x


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.drop = nn.Dropout(0.3)

    @staticmethod
    def scale(t, k=2.0):
        return t * k

    def forward(self, x):
        assert type(self) is Block
        h = self.drop(self.lin(x))
        h = F.dropout(h, p=0.5, training=self.training)
        return self.scale(h.contiguous()) + x.t().contiguous().t()


def fn_identity_check(x):
    f = use_registry
    if f is use_registry:
        return x * 2
    return x


def test_registry_one_graph_and_guarded():
    C.reset()
    x = torch.randn(3, 5)
    assert_same(compiled(use_registry)(x), use_registry(x))
    assert len(graphs(use_registry)) == 1 and not fallbacks(use_registry)
    Registry._global_mapping["tanh"] = torch.sigmoid
    try:
        assert_same(compiled(use_registry)(x), use_registry(x))
    finally:
        Registry._global_mapping["tanh"] = torch.tanh
    assert_same(compiled(use_registry)(x), use_registry(x))


def test_eval_dropout_contiguous_type_staticmethod_one_graph():
    C.reset()
    torch.manual_seed(0)
    m = Block().eval()
    for shape in [(4, 6), (0, 6), (2, 3, 6)]:
        x = torch.randn(shape)
        if len(shape) == 2:
            with torch.no_grad():
                assert_same(compiled(Block.forward)(m, x), m(x))
    x = torch.randn(4, 6)
    with torch.no_grad():
        assert_same(compiled(Block.forward)(m, x), m(x))
    assert graphs(Block.forward) and not fallbacks(Block.forward)
    assert graphs(Block.forward)[0]["graph_count"] == 1


def test_is_between_functions_one_graph():
    C.reset()
    x = torch.randn(3)
    assert_same(compiled(fn_identity_check)(x), fn_identity_check(x))
    assert len(graphs(fn_identity_check)) == 1 and not fallbacks(fn_identity_check)


def _model_output_fn():
    import pytest
    T = pytest.importorskip("transformers")
    MO = T.modeling_outputs.BaseModelOutputWithPooling

    def make_output(x):
        h = x.relu()
        out = MO(last_hidden_state=h, pooler_output=h.sum(-1))
        return MO(last_hidden_state=out.last_hidden_state * 2, pooler_output=out.pooler_output, hidden_states=None)

    def make_output_partial(x):
        return MO(x.sin())

    return make_output, make_output_partial


def test_model_output_rebuilt_one_graph():
    for fn in _model_output_fn():
        C.reset()
        for shape in [(3, 4), (0, 4), (2, 3, 5)]:
            x = torch.randn(shape)
            expected, got = fn(x), compiled(fn)(x)
            assert type(got) is type(expected) and list(got.keys()) == list(expected.keys())
            for k in expected.keys():
                assert_same(got[k], expected[k])
            assert got.hidden_states is None and got.to_tuple()[0].shape == expected.to_tuple()[0].shape
        assert graphs(fn) and not fallbacks(fn) and graphs(fn)[0]["graph_count"] == 1


import inspect  # noqa: E402


class Chunked(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("ids", torch.arange(4).expand(1, -1), persistent=False)

    def chunk(self, h, k=1.0):
        return self.lin(h) * k

    def forward(self, x):
        n = len(inspect.signature(self.chunk).parameters)
        names = list(inspect.signature(helper_fn).parameters)
        ids = self.ids.to(x.device).expand(x.shape[0], -1)
        return self.chunk(x) * n + len(names) + ids


def helper_fn(a, b=2, *, c=3):
    return a


def test_signature_and_to_same_device_one_graph():
    C.reset()
    torch.manual_seed(0)
    m = Chunked().eval()
    for shape in [(3, 4), (1, 4)]:
        x = torch.randn(shape)
        with torch.no_grad():
            assert_same(compiled(Chunked.forward)(m, x), m(x))
    assert graphs(Chunked.forward) and not fallbacks(Chunked.forward)
    assert graphs(Chunked.forward)[0]["graph_count"] == 1


def test_model_output_subscript_one_graph():
    import pytest
    T = pytest.importorskip("transformers")
    MO = T.modeling_outputs.BaseModelOutputWithPooling

    def index_output(x):
        out = MO(last_hidden_state=x.cos(), pooler_output=None, hidden_states=(x, x * 2))
        return out[0] + out[-1][1] + out["last_hidden_state"] + out[1][0]

    C.reset()
    for shape in [(3, 4), (0, 2)]:
        x = torch.randn(shape)
        assert_same(compiled(index_output)(x), index_output(x))
    assert graphs(index_output) and not fallbacks(index_output)
    assert graphs(index_output)[0]["graph_count"] == 1


# transformers 5.17 keeps its output-capture registry in a plain module-level
# dict read with .get(key) (5.24 wraps it in a class): both are one graph.
_PLAIN_REGISTRY = {"block": {"scale": 2.0}}


def use_plain_registry(x):
    spec = _PLAIN_REGISTRY.get("block") or {}
    missing = _PLAIN_REGISTRY.get("absent")
    y = x * spec.get("scale", 1.0)
    return y if missing is None else y + missing


def test_plain_dict_registry_get_one_graph_and_guarded():
    C.reset()
    x = torch.randn(3, 5)
    assert_same(compiled(use_plain_registry)(x), use_plain_registry(x))
    assert len(graphs(use_plain_registry)) == 1 and not fallbacks(use_plain_registry)
    _PLAIN_REGISTRY["block"] = {"scale": -3.0}
    _PLAIN_REGISTRY["absent"] = 1.5
    try:  # a changed item and a key that appeared: both guarded, both recompile
        assert_same(compiled(use_plain_registry)(x), use_plain_registry(x))
    finally:
        _PLAIN_REGISTRY["block"] = {"scale": 2.0}
        del _PLAIN_REGISTRY["absent"]
    assert_same(compiled(use_plain_registry)(x), use_plain_registry(x))


def mask_layer_index(x, past_key_values=None):
    # transformers 5.17's masking_utils: hasattr of a plain constant (None)
    if hasattr(past_key_values, "is_sliding") and False in past_key_values.is_sliding:
        layer = past_key_values.is_sliding.index(False)
    else:
        layer = 0
    return x * (layer + 2) + getattr(None, "missing", 1)


def test_hasattr_getattr_of_plain_constants_one_graph():
    x = torch.randn(4, 3)
    f = compiled(mask_layer_index)
    assert_same(f(x), mask_layer_index(x))
    assert graphs(mask_layer_index) and not fallbacks(mask_layer_index)
