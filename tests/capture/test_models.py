"""transformers models from tiny configs (random weights, nothing
downloaded), inference through wick: results must equal eager always, and
each model should be one graph, as PyTorch's capture gets.

Forward+backward: in grad mode with parameters that require grad, the
captured graph is compiled through AOTAutograd (forward and backward graphs
both by wick's compiler); gradients are compared with eager's.

Honest status: all eight (BERT, GPT-2, T5, DistilBERT, RoBERTa, ViT,
Whisper, LLaMA) capture as one graph, inference, forward+backward and
train mode, as PyTorch's capture does (torch.compile(backend="eager"): one
frame each for GPT-2, T5, Whisper, LLaMA, measured with transformers 5.24.0):
through transformers' decorators, the output collector's ContextVar
set/reset, the attention and mask registries, ModelOutput rebuilt;
exceptions caught inside the frame (vals/exc.c); the DynamicCache /
EncoderDecoderCache built and returned, rebuilt after the graph and
compared here layer by layer; the config deep-copied to set up T5's and
Whisper's decoder cache (vals/scratch.c, guarded equal to a snapshot)."""
import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import compiled, entries

transformers = pytest.importorskip("transformers")
T = transformers


def bert():
    cfg = T.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=37, max_position_embeddings=64)
    return T.BertModel(cfg), dict(input_ids=torch.randint(0, 100, (2, 8)))


def gpt2():
    cfg = T.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    return T.GPT2Model(cfg), dict(input_ids=torch.randint(0, 100, (2, 8)))


def t5():
    cfg = T.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=2)
    return T.T5Model(cfg), dict(input_ids=torch.randint(0, 100, (2, 8)),
                                decoder_input_ids=torch.randint(0, 100, (2, 8)))


def llama():
    cfg = T.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    return T.LlamaModel(cfg), dict(input_ids=torch.randint(0, 100, (2, 8)))


def distilbert():
    cfg = T.DistilBertConfig(vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=37,
                             max_position_embeddings=64)
    return T.DistilBertModel(cfg), dict(input_ids=torch.randint(0, 100, (2, 8)))


def roberta():
    cfg = T.RobertaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=37, max_position_embeddings=64)
    return T.RobertaModel(cfg), dict(input_ids=torch.randint(0, 100, (2, 8)))


def vit():
    cfg = T.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=37)
    return T.ViTModel(cfg), dict(pixel_values=torch.randn(2, 3, 16, 16))


def whisper():
    cfg = T.WhisperConfig(vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2,
                          encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=37,
                          decoder_ffn_dim=37, num_mel_bins=8, max_source_positions=16, max_target_positions=16,
                          pad_token_id=1, bos_token_id=2, eos_token_id=3, decoder_start_token_id=2)
    return T.WhisperModel(cfg), dict(input_features=torch.randn(2, 8, 32),
                                     decoder_input_ids=torch.randint(0, 100, (2, 4)))


# GPT-2, LLaMA, T5 and Whisper build a DynamicCache inside forward
# (use_cache defaults to True) and return it: DynamicCache(config=...) reads
# config.per_layer_config, a collections.abc.Sequence whose iteration ends
# on an IndexError raised in __getitem__ (vals/exc.c), and holds DynamicLayer
# objects (ABCMeta classes) updated with torch.cat.
BLOCKERS = {
    bert: None, gpt2: None, t5: None, distilbert: None, roberta: None, vit: None,
    whisper: None, llama: None,
}
MODELS = list(BLOCKERS)
# The blockers above are read off transformers 5.24.0, the version `make test`
# installs, and hold for 5.17.0 too (the H200 image; checked on CPython 3.11
# with it on PYTHONPATH: all eight one graph each, through 5.17's
# GradientCheckpointingLayer.__call__; Whisper's train-mode step excepted,
# TRAIN_BLOCKERS below). Other
# versions take other paths: their one-graph tests are expected failures,
# not strict (results must still equal eager).
CAPTURE_VALIDATED_WITH = ("5.24.0", "5.25.0", "5.17.0")


def _one_graph_param(m):
    if BLOCKERS[m]:
        return pytest.param(m, marks=pytest.mark.xfail(strict=True, reason=BLOCKERS[m]))
    if T.__version__ not in CAPTURE_VALIDATED_WITH:
        return pytest.param(m, marks=pytest.mark.xfail(
            strict=False, reason=f"one graph validated with transformers {CAPTURE_VALIDATED_WITH}, "
                                 f"this is {T.__version__}"))
    return m


def _flatten(o):
    if isinstance(o, torch.Tensor):
        return [o]
    if isinstance(o, T.cache_utils.Cache):
        # a cache built inside forward (DynamicCache, EncoderDecoderCache):
        # its layers' classes and tensors, compared like the outputs
        subs = [o.self_attention_cache, o.cross_attention_cache] if hasattr(o, "self_attention_cache") else [o]
        return [x for c in subs for layer in c.layers
                for x in [torch.tensor(hash(type(layer).__name__) % 1000)] + _flatten(vars(layer))]
    if isinstance(o, dict):
        return [t for v in o.values() for t in _flatten(v)]
    if isinstance(o, (tuple, list)):
        return [t for v in o for t in _flatten(v)]
    return []


def _run(make):
    torch.manual_seed(0)
    model, kwargs = make()
    model.eval()
    with torch.no_grad():
        expected = model(**kwargs)
        got = compiled(type(model).forward)(model, **kwargs)
    return expected, got, entries(type(model).forward)


@pytest.mark.parametrize("make", MODELS, ids=lambda f: f.__name__)
def test_model_results_equal_eager(make):
    expected, got, _ = _run(make)
    assert type(got) is type(expected)
    e, g = _flatten(expected), _flatten(got)
    assert len(e) == len(g) and e
    for a, b in zip(g, e):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make", [_one_graph_param(m) for m in MODELS], ids=lambda f: f.__name__)
def test_model_is_one_graph(make):
    C.reset()
    _, _, es = _run(make)
    assert es and not es[0]["eager"], es[0].get("reason")
    assert es[0]["graph_count"] == 1


def _loss(out):
    # random weights: a plain sum of a layer norm's output has zero gradient
    # (GPT-2's last_hidden_state), leaving only rounding noise to compare
    g = torch.Generator().manual_seed(1)
    return sum((t.float() * torch.randn(t.shape, generator=g)).sum() for t in _flatten(out) if t.requires_grad)


def _train_step(make):
    torch.manual_seed(0)
    model, kwargs = make()
    model.eval()  # no dropout: eager and compiled see the same function
    params = [p for p in model.parameters() if p.requires_grad]
    expected = model(**kwargs)
    want = torch.autograd.grad(_loss(expected), params, allow_unused=True)
    got_out = compiled(type(model).forward)(model, **kwargs)
    got = torch.autograd.grad(_loss(got_out), params, allow_unused=True)
    return expected, got_out, want, got, entries(type(model).forward)


@pytest.mark.parametrize("make", MODELS, ids=lambda f: f.__name__)
def test_model_forward_backward_equals_eager(make):
    expected, got_out, want, got, _ = _train_step(make)
    assert type(got_out) is type(expected)
    for a, b in zip(_flatten(got_out), _flatten(expected)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        assert a.requires_grad == b.requires_grad
    assert sum(g is not None for g in want) > 10
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if w is not None:
            # absolute error scaled to the gradient's size: its sums of
            # terms of that size cancel to small elements in another order
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5 * max(1.0, w.abs().max().item()))


@pytest.mark.parametrize("make", [_one_graph_param(m) for m in MODELS], ids=lambda f: f.__name__)
def test_model_forward_backward_is_one_graph(make):
    C.reset()
    *_, es = _train_step(make)
    assert es and not es[0]["eager"], es[0].get("reason")
    assert es[0]["graph_count"] == 1 and es[0]["via_fx"]


# train mode only: 5.17's Whisper encoder draws torch.rand([]) for LayerDrop
# and branches on it (`if dropout_probability < self.layerdrop`), a
# data-dependent branch PyTorch's capture breaks on too; 5.24 skips the draw
# when layerdrop is 0.
TRAIN_BLOCKERS = {(whisper, "5.17.0"): "5.17's Whisper branches on torch.rand([]) for LayerDrop in train mode"}


def _train_param(m):
    why = TRAIN_BLOCKERS.get((m, T.__version__))
    return pytest.param(m, marks=pytest.mark.xfail(strict=True, reason=why)) if why else _one_graph_param(m)


@pytest.mark.parametrize("make", [_train_param(m) for m in MODELS], ids=lambda f: f.__name__)
def test_model_train_mode_step_is_one_graph(make):
    """model.train(): dropout is random (wick's graph draws its own numbers,
    so values are not compared with eager); one graph, finite gradients
    reaching the parameters."""
    C.reset()
    torch.manual_seed(0)
    model, kwargs = make()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    out = compiled(type(model).forward)(model, **kwargs)
    grads = torch.autograd.grad(_loss(out), params, allow_unused=True)
    es = entries(type(model).forward)
    assert es and not es[0]["eager"], es[0].get("reason")
    assert es[0]["graph_count"] == 1
    assert sum(g is not None for g in grads) > 10
    assert all(torch.isfinite(g).all() for g in grads if g is not None)
