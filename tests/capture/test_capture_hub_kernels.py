"""The wrappers Hugging Face's `kernels` package puts around transformers'
layers (transformers 5.25 requires it; 5.24 uses it when installed): a
module-level function becomes a module-level nn.Module instance (`Func`)
with a class attribute naming its layer, each decorated layer keeps one such
module per name in a plain dict attribute (`_kernel_funcs`), and its forward
publishes {id(function): (module, forward)} through a global
"context variable" object whose attributes it sets and resets around the
call. Capture reads the dict of modules (keys and types guarded), `id()` of
pinned objects, and the global object's attribute writes (replayed, here
back to their values before the call), so the model stays one graph. The
first tests build that pattern here; the last ones use the real package
and LLaMA when they are installed."""
import functools
from contextvars import ContextVar

import pytest
import torch
from torch import nn

import wick
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import text_model_is_one_graph


class GlobalSlot:
    """A ContextVar that, under compilation, keeps its value in attributes."""

    def __init__(self, name):
        self.var = ContextVar(name, default=None)
        self.value = None
        self.in_use = False

    def get(self):
        if self.in_use or torch.compiler.is_compiling():
            return self.value
        return self.var.get()

    def set(self, value):
        if self.in_use or torch.compiler.is_compiling():
            before, self.value, self.in_use = self.value, value, True
            return before
        return self.var.set(value)

    def reset(self, token):
        if self.in_use:
            self.value, self.in_use = token, token is not None
        else:
            self.var.reset(token)


SELECTED = GlobalSlot("selected")


def as_layer(fn):
    class Wrapped(nn.Module):
        def forward(self, *args):
            chosen = SELECTED.get()
            if chosen is not None and (pick := chosen.get(id(self))) is not None:
                replacement, forward = pick
                if not torch.compiler.is_compiling():
                    return replacement(*args)
                if forward is not type(self).forward:
                    return forward(self, *args)
            return fn(*args)

    Wrapped.layer_name = fn.__name__ + "_layer"
    return Wrapped()


def swap_halves(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


swap_halves_layer = as_layer(swap_halves)


def with_layers(*layers):
    def decorate(cls):
        init, forward = cls.__init__, cls.forward

        def new_init(self, *a, **k):
            init(self, *a, **k)
            own = self.__dict__.setdefault("_own_layers", {})
            for layer in layers:
                own[getattr(layer, "__name__", None) or layer.layer_name] = type(layer)()

        @functools.wraps(forward)
        def new_forward(self, *args):
            chosen = dict(SELECTED.get() or {})
            for layer in layers:
                mine = self._own_layers[getattr(layer, "__name__", None) or getattr(layer, "layer_name", None)]
                chosen[id(layer)] = (mine, mine.forward.__func__)
            token = SELECTED.set(chosen)
            try:
                return forward(self, *args)
            finally:
                SELECTED.reset(token)

        cls.__init__, cls.forward = new_init, new_forward
        return cls

    return decorate


@with_layers(swap_halves_layer)
class Rotary(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        y = self.proj(x)
        return y * 0.5 + swap_halves_layer(y) * 0.25


class TwoBlocks(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.first, self.second = Rotary(width), Rotary(width)

    def forward(self, x):
        return self.second(self.first(x).tanh())


@pytest.mark.parametrize("shape", [(2, 8), (3, 5, 8), (0, 8)])
def test_kernel_wrapped_layers_are_one_graph(shape):
    torch.manual_seed(0)
    m = TwoBlocks()
    x = torch.randn(shape)
    wick.reset()
    f = wick.compile(m)
    for _ in range(3):
        torch.testing.assert_close(f(x), m(x))
    st = wick.stats()
    assert st["graphs"] == 1 and st["breaks"] == 0 and not st["fallbacks"], st
    assert SELECTED.value is None and SELECTED.in_use is False  # restored as eager leaves it


def test_a_replaced_wrapper_recompiles():
    torch.manual_seed(0)
    m = TwoBlocks()
    x = torch.randn(2, 8)
    wick.reset()
    f = wick.compile(m)
    torch.testing.assert_close(f(x), m(x))

    class Doubled(type(swap_halves_layer)):
        def forward(self, *args):
            return swap_halves(*args) * 2

    m.first._own_layers["swap_halves_layer"] = Doubled()  # another class: the guard on its type fails
    torch.testing.assert_close(f(x), m(x))
    assert wick.stats()["graphs"] == 2


def test_id_of_a_fresh_value_is_not_folded():
    def f(x):
        return x + (id([1]) > 0)

    x = torch.randn(3)
    out = wick.explain(f)(x)
    torch.testing.assert_close(out.result, x + 1)
    assert any("id() of" in r for r in out.break_reasons), out.break_reasons


def test_the_kernels_package_decorators_are_one_graph():
    kernels = pytest.importorskip("kernels")

    @kernels.use_kernel_forward_from_hub("WickTestRotate")
    def rotate(x):
        return x.flip(-1) * 2

    @kernels.use_kernelized_func(rotate)
    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 6)

        def forward(self, x):
            return rotate(self.lin(x)) + 1

    torch.manual_seed(0)
    m = nn.Sequential(Layer(), nn.ReLU(), Layer())
    x = torch.randn(4, 6)
    wick.reset()
    f = wick.compile(m)
    for _ in range(2):
        torch.testing.assert_close(f(x), m(x))
    st = wick.stats()
    assert st["graphs"] == 1 and st["breaks"] == 0 and not st["fallbacks"], st


def test_llama_with_kernels_installed_is_one_graph():
    pytest.importorskip("kernels")
    transformers = pytest.importorskip("transformers")
    from transformers.utils import import_utils

    if not import_utils.is_kernels_available():
        pytest.skip("this transformers does not use the installed kernels")
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(cfg).eval()
    assert "_kernel_funcs" in vars(m.model.layers[0].self_attn)  # the wrappers are there
    text_model_is_one_graph(m, 96)
