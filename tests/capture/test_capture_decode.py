"""A list of plain objects held by an argument object (transformers'
DynamicCache.layers, a list of DynamicLayer): its length guarded, each item
an object read through path[i] with its type guarded, so reading and
writing the items' attributes works as for any argument object (the writes
replayed after the graph). A decode step that passes the returned cache
back in is then one graph. The cache grows every step, so each step's
shapes are new and each compiles again, up to the cache limit (no dynamic
shapes); with transformers' StaticCache the decode steps keep their shapes and
share one graph. Each against eager on fresh copies."""
import copy

import pytest
import torch

import wick
from test_breaks_inplace import t
from test_capture_util import stats_counts


class Slot:
    def __init__(self):
        self.keys = None
        self.hits = 0


class Store:
    def __init__(self, n):
        self.layers = [Slot() for _ in range(n)]


class Step(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, store):
        for i, slot in enumerate(store.layers):
            y = self.lin(x) * (i + 1)
            slot.keys = y if slot.keys is None else torch.cat([slot.keys, y], dim=0)
            slot.hits += 1
            x = slot.keys.sum(0, keepdim=True).tanh()
        return x


@pytest.mark.parametrize("n", [1, 3])
def test_items_read_and_written_like_argument_objects(n):
    torch.manual_seed(0)
    m = Step()
    wick.reset()
    f = wick.compile(m)
    se, sc = Store(n), Store(n)
    for step in range(3):
        x = t(1, 4, seed=step)
        with torch.no_grad():
            torch.testing.assert_close(f(x, sc), m(x, se))
        for a, b in zip(se.layers, sc.layers):
            torch.testing.assert_close(b.keys, a.keys)
            assert b.hits == a.hits == step + 1
    graphs, breaks, fallbacks = stats_counts()
    assert (breaks, fallbacks) == (0, 0) and graphs == 3, wick.stats()  # each step's keys are longer


def test_same_length_hits_the_entry():
    torch.manual_seed(0)
    m = Step()
    wick.reset()
    f = wick.compile(m)
    for seed in range(3):
        se, sc = Store(2), Store(2)  # fresh objects, same types and length: the same entry
        x = t(1, 4, seed=seed)
        with torch.no_grad():
            torch.testing.assert_close(f(x, sc), m(x, se))
        torch.testing.assert_close(sc.layers[1].keys, se.layers[1].keys)
    assert stats_counts() == (1, 0, 0), wick.stats()
    assert wick.stats()["entries"] == 1, wick.stats()


def test_list_length_is_guarded():
    torch.manual_seed(0)
    m = Step()
    wick.reset()
    f = wick.compile(m)
    for n in (2, 3, 2):
        se, sc = Store(n), Store(n)
        x = t(1, 4, seed=n)
        with torch.no_grad():
            torch.testing.assert_close(f(x, sc), m(x, se))
        assert [s.hits for s in sc.layers] == [1] * n
    assert stats_counts() == (2, 0, 0), wick.stats()  # lengths 2 and 3; the second 2 hits the first entry
    assert wick.stats()["entries"] == 2, wick.stats()


def test_list_with_other_items_still_correct():
    torch.manual_seed(0)
    m = Step()
    wick.reset()
    f = wick.compile(m)
    se, sc = Store(2), Store(2)
    se.layers.append(copy.copy)  # a function: not a plain instance
    sc.layers.append(copy.copy)
    with pytest.raises(AttributeError):
        m(t(1, 4), se)
    with pytest.raises(AttributeError):
        f(t(1, 4), sc)


transformers = pytest.importorskip("transformers")


def tiny_llama():
    """A two-layer LLaMA with random weights, its config and a (2, 8) prompt."""
    T = transformers
    torch.manual_seed(0)
    cfg = T.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return T.LlamaForCausalLM(cfg).eval(), cfg, torch.randint(0, 100, (2, 8))


def test_llama_decode_steps_are_one_graph_each():
    m, cfg, ids = tiny_llama()
    wick.reset()
    f = wick.compile(m)

    def run(fn):
        with torch.no_grad():
            out = fn(input_ids=ids, use_cache=True)
            logits, cache = [out.logits], out.past_key_values
            for _ in range(2):
                nxt = logits[-1][:, -1].argmax(-1, keepdim=True)
                out = fn(input_ids=nxt, past_key_values=cache, use_cache=True)
                logits.append(out.logits)
                cache = out.past_key_values
        return logits, cache

    le, ce = run(m)
    lc, cc = run(f)
    for a, b in zip(le, lc):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    assert type(cc) is type(ce) and len(cc.layers) == len(ce.layers)
    for a, b in zip(ce.layers, cc.layers):
        torch.testing.assert_close(b.keys, a.keys, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(b.values, a.values, rtol=1e-5, atol=1e-5)
    graphs, breaks, fallbacks = stats_counts()
    assert (graphs, breaks, fallbacks) == (3, 0, 0), wick.stats()


@pytest.mark.parametrize("steps", [3, 12])
def test_llama_static_cache_decode_compiles_once(steps):
    """transformers' StaticCache keeps every step's shapes: the prefill and
    all decode steps after it are two graphs, whatever the number of steps
    (past the cache limit of 8), the cache written in place as in eager."""
    from transformers import StaticCache

    m, cfg, ids = tiny_llama()

    def run(fn):
        cache = StaticCache(config=cfg, max_cache_len=32)
        with torch.no_grad():
            out = fn(input_ids=ids, past_key_values=cache, cache_position=torch.arange(8), use_cache=True)
            logits = [out.logits]
            for i in range(steps):
                nxt = logits[-1][:, -1].argmax(-1, keepdim=True)
                out = fn(input_ids=nxt, past_key_values=cache, cache_position=torch.tensor([8 + i]), use_cache=True)
                logits.append(out.logits)
        return logits, cache

    le, ce = run(m)
    wick.reset()
    lc, cc = run(wick.compile(m))
    for a, b in zip(le, lc):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    for a, b in zip(ce.layers, cc.layers):
        torch.testing.assert_close(b.keys, a.keys, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(b.values, a.values, rtol=1e-5, atol=1e-5)
    graphs, breaks, fallbacks = stats_counts()
    assert (graphs, breaks, fallbacks) == (2, 0, 0), wick.stats()
    assert wick.stats()["entries"] == 2


class OnDevice:
    def __init__(self, device):
        self.device = device


def arange_on(x, holder):
    return x + torch.arange(x.shape[-1], device=holder.device)


def test_device_attribute_of_an_argument_object_is_a_guarded_constant():
    wick.reset()
    f = wick.compile(arange_on)
    for shape in [(2, 3), (0, 4), (5,)]:
        x = t(*shape, seed=1)
        torch.testing.assert_close(f(x, OnDevice(torch.device("cpu"))), arange_on(x, OnDevice(torch.device("cpu"))))
    graphs, breaks, fallbacks = stats_counts()
    assert (breaks, fallbacks) == (0, 0) and graphs == 3
    # another device: the guard fails and capture runs again (the meta device keeps this CPU-only)
    y = f(t(2, 3, seed=2).to("meta"), OnDevice(torch.device("meta")))
    assert y.device.type == "meta"
