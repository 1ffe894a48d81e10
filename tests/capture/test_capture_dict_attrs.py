"""Dict attributes of argument objects (a transformers config's id2label,
read by its num_labels property) in wick's own capture: a dict of plain keys
and values is read as a guarded constant (keys in order, every key and value
of the same type), so len(), `in`, [key], .get and iteration over
.items/.keys/.values stay in one graph. A dict changed between calls must
give eager's result (the guard fails and capture runs again). A change the
frame itself makes to such a dict (transformers' EncoderDecoderCache marks
`is_updated[layer] = True`) is seen by the frame's later reads, through any
path that reaches that dict, and written back to the dict after the graph,
keys in eager's order."""
import pytest
import torch
import torch.nn as nn

from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries, one_graph, reasons


class Config:
    def __init__(self, id2label):
        self.id2label = id2label
        self.scale = 2.0

    @property
    def num_labels(self):  # transformers' PreTrainedConfig.num_labels
        return len(self.id2label)


class Head(nn.Module):
    def __init__(self, id2label, hidden=8):
        super().__init__()
        self.config = Config(id2label)
        self.proj = nn.Linear(hidden, 16)

    def forward(self, x):
        labels = self.config.id2label
        n = self.config.num_labels
        logits = self.proj(x)[..., :n]
        if 1 in labels:
            v1 = labels[1]
            logits = logits + float(len(v1) if isinstance(v1, str) else v1)
        if labels.get(2) == "cat":
            logits = logits * self.config.scale
        miss = labels.get("missing", 3)
        logits = logits - miss
        for k, v in labels.items():
            logits = logits + (k * 0.5 if isinstance(v, str) else v)
        for k in labels.keys():
            logits = logits * 1.0 + k
        for v in labels.values():  # 7, 7.0 and True differ here
            if type(v) is float:
                logits = logits * 2 - v
            elif type(v) is bool:
                logits = logits + 100
            elif isinstance(v, int):
                logits = logits - v
        return logits


def call_both(m, x):
    want = Head.forward(m, x)
    got = compiled(Head.forward)(m, x)
    assert_same(got, want)
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(3, 8), (2, 5, 8)])
def test_dict_attribute_reads_stay_in_one_graph(shape, dtype):
    m = Head({0: "dog", 1: "ab", 2: "cat"}).to(dtype)
    x = torch.randn(shape, dtype=dtype)
    with torch.no_grad():
        call_both(m, x)
    one_graph(Head.forward)
    assert len(entries(Head.forward)) == 1


def test_dict_changed_between_calls_gives_eagers_result():
    labels = {0: "dog", 1: "ab", 2: "cat"}
    m = Head(labels)
    x = torch.randn(4, 8)
    with torch.no_grad():
        call_both(m, x)
        labels[3] = "bird"  # a new key: len and iteration change
        call_both(m, x)
        labels[2] = "cow"  # a value: .get(2) == "cat" changes
        call_both(m, x)
        del labels[1]  # `in` changes
        call_both(m, x)
        labels[1] = "abcd"  # back, but last in order and another length
        call_both(m, x)
        labels[1] = 7  # a value of another type
        call_both(m, x)
        labels[1] = 7.0  # equal for Python, another type for capture
        call_both(m, x)
        labels[1] = True
        call_both(m, x)
        labels.clear()
        labels.update({2: "cat", 0: "dog"})  # another order of keys
        call_both(m, x)
        m.config.id2label = {5: 1.5}  # another dict object
        call_both(m, x)
    # every change recompiled (8 entries, the cache limit: the tenth runs eagerly)
    assert sum(not e["eager"] and e["graph_count"] == 1 for e in entries(Head.forward)) == 8


def test_same_dict_contents_reuse_the_entry():
    m = Head({0: "dog", 1: "ab", 2: "cat"})
    x = torch.randn(4, 8)
    with torch.no_grad():
        call_both(m, x)
        m.config.id2label = {0: "dog", 1: "ab", 2: "cat"}  # a new but equal dict
        call_both(m, x)
        m.config.id2label[1] = "ab"  # rewritten with an equal value
        call_both(m, x)
    assert len(entries(Head.forward)) == 1


class Returns(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = Config({"a": 1, "b": 2})

    def forward(self, x):
        d = self.config.id2label
        return x * d["a"] + d["b"], d, dict(d), d.copy()


def test_returned_dict_is_the_same_object_and_copies_are_new():
    m = Returns()
    x = torch.randn(3, 4)
    with torch.no_grad():
        want = Returns.forward(m, x)
        got = compiled(Returns.forward)(m, x)
    assert_same(got[0], want[0])
    assert got[1] is m.config.id2label
    assert got[2] == want[2] and got[2] is not m.config.id2label
    assert got[3] == want[3] and got[3] is not m.config.id2label
    one_graph(Returns.forward)


class Mutates(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.config = Config({0: "a", 1: "b"})
        self.how = how

    def forward(self, x):
        d = self.config.id2label
        if self.how == "set":
            d[5] = "z"
        elif self.how == "pop":
            d.pop(0, None)
        elif self.how == "setdefault":
            d.setdefault(7, "y")
        elif self.how == "update":
            d.update({0: "q"})
        elif self.how == "ior":
            d |= {9: "w"}
        elif self.how == "del":
            if 1 in d:
                del d[1]
        elif self.how == "clear":
            d.clear()
        return x * len(d)


@pytest.mark.parametrize("how", ["set", "pop", "setdefault", "update", "ior", "del", "clear"])
def test_frame_changing_the_dict_is_replayed(how):
    m_eager, m = Mutates(how), Mutates(how)
    x = torch.randn(3, 4)
    f = compiled(Mutates.forward)
    with torch.no_grad():
        for _ in range(2):
            want = Mutates.forward(m_eager, x)
            got = f(m, x)
            assert_same(got, want)
            assert m.config.id2label == m_eager.config.id2label
            assert list(m.config.id2label) == list(m_eager.config.id2label)
    assert all(not e["eager"] and not e.get("breaks") for e in entries(Mutates.forward)), reasons(Mutates.forward)


class Flags:
    def __init__(self):
        self.is_updated = {}


class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b


def mark_and_read(x, pair: Pair, layer: int):
    done = pair.a.is_updated.get(layer, False)
    if not done:
        x = x * 2  # the first call of each layer computes
        pair.a.is_updated[layer] = True
    again = pair.b.is_updated.get(layer, False)  # the same dict when a is b
    return x + (10 if again else 0) + len(pair.a.is_updated)


@pytest.mark.parametrize("shape", [(3, 4), (0, 2), ()])
def test_changed_dict_is_seen_through_every_path_that_reaches_it(shape):
    x = torch.randn(shape)
    f = compiled(mark_and_read)
    for shared in (True, False):
        fl, fl_eager = Flags(), Flags()
        fl2, fl2_eager = (fl, fl_eager) if shared else (Flags(), Flags())
        p, p_eager = Pair(fl, fl2), Pair(fl_eager, fl2_eager)
        for layer in (0, 1, 0, 1):
            assert_same(f(x, p, layer), mark_and_read(x, p_eager, layer))
            assert fl.is_updated == fl_eager.is_updated and fl2.is_updated == fl2_eager.is_updated


def mark_then_rebind(x, holder):
    holder.flags.is_updated[0] = True
    holder.flags = Flags()  # the path now reaches another dict
    return x + len(holder.flags.is_updated)


def test_change_through_a_path_the_frame_rebinds_stays_right():
    class Holder:
        def __init__(self):
            self.flags = Flags()

    x = torch.randn(2, 3).t()  # non-contiguous
    h, h_eager = Holder(), Holder()
    old, old_eager = h.flags, h_eager.flags
    got, want = compiled(mark_then_rebind)(x, h), mark_then_rebind(x, h_eager)
    assert_same(got, want)
    assert old.is_updated == old_eager.is_updated == {0: True}
    assert h.flags.is_updated == h_eager.flags.is_updated == {}


def test_encoder_decoder_cache_decode_steps_are_one_graph_each():
    T = pytest.importorskip("transformers")
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    torch.manual_seed(0)
    cfg = T.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                     num_heads=4, decoder_start_token_id=0)
    m = T.T5ForConditionalGeneration(cfg).eval()
    ids = torch.randint(0, 100, (2, 7))

    def run(fn):
        cache = EncoderDecoderCache(DynamicCache(config=cfg), DynamicCache(config=cfg))
        out = fn(input_ids=ids, decoder_input_ids=ids[:, :1], past_key_values=cache, use_cache=True)
        logits, flags = [out.logits], [dict(cache.is_updated)]
        for step in range(2):
            out = fn(encoder_outputs=(out.encoder_last_hidden_state,), decoder_input_ids=ids[:, step + 1:step + 2],
                     past_key_values=out.past_key_values, use_cache=True)
            logits.append(out.logits)
            flags.append(dict(cache.is_updated))
        return logits, flags

    import wick

    with torch.no_grad():
        want, want_flags = run(m)
        wick.reset()
        got, got_flags = run(wick.compile(m))
    for g, w in zip(got, want):
        assert_same(g, w)
    assert got_flags == want_flags and want_flags[0] == {0: True, 1: True}
    st = wick.stats()
    assert st["breaks"] == 0 and not st["fallbacks"], st["break_reasons"]


class NotPlain(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = Config({0: [1, 2]})  # a list value: not a constant capture pins

    def forward(self, x):
        return x * len(self.config.id2label)


def test_dict_of_mutable_values_is_not_read_as_a_constant():
    m = NotPlain()
    x = torch.randn(3, 4)
    with torch.no_grad():
        assert_same(compiled(NotPlain.forward)(m, x), NotPlain.forward(m, x))
        m.config.id2label[1] = [3]
        assert_same(compiled(NotPlain.forward)(m, x), NotPlain.forward(m, x))


def test_transformers_config_num_labels_in_one_graph():
    T = pytest.importorskip("transformers")
    cfg = T.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=64, num_labels=5,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = T.ViTForImageClassification(cfg)
    x = torch.randn(2, 3, 16, 16)
    labels = torch.randint(0, 5, (2,))
    fwd = type(model).forward
    f = compiled(fwd)
    for _ in range(3):
        want = fwd(model, pixel_values=x, labels=labels)
        got = f(model, pixel_values=x, labels=labels)
        torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got.loss, want.loss, rtol=1e-4, atol=1e-5)
    es = entries(fwd)
    assert all(not e["eager"] and e["graph_count"] == 1 for e in es), reasons(fwd)
    # another id2label of as many labels: the guard sees it, the result is eager's
    n_before = len(es)
    model.config.id2label = {i: f"class {i}" for i in range(5)}
    want = fwd(model, pixel_values=x, labels=labels)
    got = f(model, pixel_values=x, labels=labels)
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-4, atol=1e-5)
    es = entries(fwd)
    assert len(es) == n_before + 1 and all(not e["eager"] and e["graph_count"] == 1 for e in es), reasons(fwd)
