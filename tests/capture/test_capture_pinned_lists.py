"""A module-level list of plain values (transformers' Canine keeps its hash
primes in one) is read by capture: its length, items, slices and truth,
guarded equal to a copy of it, so changing the list recompiles. A frame that
both reads such a list and appends to it is not captured that way (the append
is replayed after the graph, and reads would miss it). NumPy ufuncs on
constant numbers (CTRL's np.sqrt(d_model)) are folded, and a dict subclass's
`super().__getitem__` on a pinned registry (transformers' ACT2FN) is read as the
item, guarded."""
import numpy as np
import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries, one_graph, reasons

PRIMES = [31, 43, 59, 61, 73]
FLAGS = []
SEEN = []


def hash_buckets(ids, n: int):
    if n > len(PRIMES):
        raise ValueError("too many hashes")
    out = []
    for p in PRIMES[:n]:
        out.append(((ids + 1) * p) % 97)
    return torch.stack(out) + PRIMES[-1] + (1 if FLAGS else 0)


@pytest.mark.parametrize("shape", [(2, 5), (0, 3), ()])
def test_global_list_is_read_and_guarded(shape):
    ids = torch.randint(0, 1000, shape)
    f = compiled(hash_buckets)
    assert_same(f(ids, 3), hash_buckets(ids, 3))
    one_graph(hash_buckets)
    try:
        PRIMES.append(101)  # changed in place: the guard fails, a new entry reads it
        assert_same(f(ids, 3), hash_buckets(ids, 3))
        assert len([e for e in entries(hash_buckets) if not e["eager"]]) == 2
        with pytest.raises(ValueError):
            f(ids, 7)
    finally:
        PRIMES.pop()
    assert_same(f(ids, 4), hash_buckets(ids, 4))


def test_non_contiguous_input():
    ids = torch.randint(0, 1000, (6, 4)).t()
    assert not ids.is_contiguous()
    assert_same(compiled(hash_buckets)(ids, 2), hash_buckets(ids, 2))


def read_then_append(x):
    n = len(SEEN)
    SEEN.append(n)
    return x * (n + 1)


def test_reading_and_appending_one_list_runs_eagerly_right():
    SEEN.clear()
    x = torch.randn(3)
    f = compiled(read_then_append)
    for i in range(3):
        assert_same(f(x), x * (i + 1))
    assert SEEN == [0, 1, 2]
    assert any("appended" in r or "read" in r for r in reasons(read_then_append)), reasons(read_then_append)


def scaled(x, d: int):
    return x * np.sqrt(d) + np.log1p(float(d)) - np.maximum(d, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_numpy_ufunc_on_constants_is_folded(dtype):
    x = torch.randn(4, 3, dtype=dtype)
    got = compiled(scaled)(x, 16)
    want = scaled(x, 16)
    assert got.dtype == want.dtype
    # bfloat16: eager rounds after each op, the fused kernel once at the end
    tol = {"rtol": 1.6e-2, "atol": 3e-2} if dtype == torch.bfloat16 else {}
    assert_same(got, want, **tol)
    assert_same(got.double(), scaled(x.double(), 16), rtol=1.6e-2, atol=3e-2)
    one_graph(scaled)


def ufunc_on_tensor(x):
    return np.sqrt(x) + 1


def test_numpy_ufunc_on_a_tensor_is_not_folded():
    x = torch.rand(3) + 0.5
    f = compiled(ufunc_on_tensor)
    assert_same(torch.as_tensor(f(x)), torch.as_tensor(ufunc_on_tensor(x)))
    assert reasons(ufunc_on_tensor)


class Instantier(dict):
    """transformers' ClassInstantier (ACT2FN): an item is a class, or a
    (class, kwargs) pair, instantiated on every lookup."""

    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


ACTS = Instantier({"silu": torch.nn.SiLU, "leaky": (torch.nn.LeakyReLU, {"negative_slope": 0.3})})


def activate(x, name: str):
    return ACTS[name](x) * 2


@pytest.mark.parametrize("name", ["silu", "leaky"])
def test_registry_subclass_getitem_through_super(name):
    x = torch.randn(3, 5).t()
    f = compiled(activate)
    assert_same(f(x, name), activate(x, name))
    one_graph(activate)


def test_registry_missing_key_raises_as_in_eager():
    f = compiled(activate)
    with pytest.raises(KeyError):
        f(torch.randn(2), "gelu")
    ACTS["gelu"] = torch.nn.GELU  # the absence was guarded: the entry is not reused
    try:
        x = torch.randn(4)
        assert_same(f(x, "gelu"), activate(x, "gelu"))
    finally:
        del ACTS["gelu"]
