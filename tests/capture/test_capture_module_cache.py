"""A module's dict of tensors kept between calls (timm's LeViT, TinyViT,
EfficientFormer and EfficientViT-M cache their attention biases per device
in eval mode: `if key not in self.attention_bias_cache: ...[key] = ...`).
The first call fills the cache: capture refuses to change a module's dict,
so that call breaks there and the write runs eagerly; from then on the dict is read as it is, its keys
guarded in order and each tensor an input read through its path, and the
frame is one graph. A cache emptied again (timm resets it in _apply) or
given other keys compiles again; a tensor replaced in it is read afresh."""
import copy

import torch

import wick
from test_breaks_inplace import t
from test_capture_util import stats_counts


class CachedBias(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.biases = torch.nn.Parameter(torch.randn(3, 10))
        self.register_buffer("idxs", torch.randint(0, 10, (4, 4)), persistent=False)
        self.cache = {}

    def bias(self, device):
        if torch.jit.is_tracing() or self.training:
            return self.biases[:, self.idxs]
        key = str(device)
        if key not in self.cache:
            self.cache[key] = self.biases[:, self.idxs]
        return self.cache[key]

    def forward(self, x):
        return (x @ x.transpose(-1, -2)) + self.bias(x.device)


def test_cache_filled_by_the_first_call_then_read():
    """The first call breaks where it writes the cache (the write runs
    eagerly, once, as eager's); later calls read it."""
    torch.manual_seed(0)
    m = CachedBias().eval()
    twin = copy.deepcopy(m)
    wick.reset()
    f = wick.compile(m)
    with torch.no_grad():
        for seed in range(4):
            x = t(2, 3, 4, 5, seed=seed)
            torch.testing.assert_close(f(x), twin(x), rtol=0, atol=0)
    assert list(m.cache) == ["cpu"]
    torch.testing.assert_close(m.cache["cpu"], twin.cache["cpu"], rtol=0, atol=0)
    wick.reset()
    f = wick.compile(m)
    with torch.no_grad():
        torch.testing.assert_close(f(x), twin(x), rtol=0, atol=0)
    assert stats_counts() == (1, 0, 0), wick.stats()


def test_cache_emptied_or_changed_compiles_again():
    torch.manual_seed(1)
    m = CachedBias().eval()
    with torch.no_grad():
        m(t(2, 3, 4, 5))  # filled eagerly
    wick.reset()
    f = wick.compile(m)
    x = t(2, 3, 4, 5, seed=3)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x), rtol=0, atol=0)
        assert stats_counts() == (1, 0, 0)
        # a tensor replaced in the cache is read through the path
        m.cache["cpu"] = m.cache["cpu"] * 2
        torch.testing.assert_close(f(x), m(x), rtol=0, atol=0)
        m.cache = {}  # as timm's _apply does
        torch.testing.assert_close(f(x), m(x), rtol=0, atol=0)
        torch.testing.assert_close(f(x), m(x), rtol=0, atol=0)
        m.cache["meta"] = torch.zeros(1)  # another key: the keys are guarded
        torch.testing.assert_close(f(x), m(x), rtol=0, atol=0)
    assert list(m.cache) == ["cpu", "meta"]


def test_training_mode_takes_the_uncached_path():
    torch.manual_seed(2)
    m = CachedBias().train()
    wick.reset()
    f = wick.compile(m)
    x = t(2, 3, 4, 5, seed=4)
    y = f(x)
    torch.testing.assert_close(y, m(x), rtol=0, atol=0)
    y.sum().backward()
    assert m.biases.grad is not None and m.cache == {}
    assert stats_counts() == (1, 0, 0)
