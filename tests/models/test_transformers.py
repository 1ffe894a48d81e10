"""transformers models from tiny configs (random weights, nothing downloaded)
through torch.compile(backend="wick"): inference and one training step
(forward + backward, gradients compared), with no fallback, equal to eager
within PyTorch's tolerances (1e-3 inference, 1e-2 training)."""
import pytest
import torch
import torch._dynamo

transformers = pytest.importorskip("transformers")

import wick.backends as B  # noqa: E402

VOCAB = 96


def bert():
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    return transformers.BertModel(cfg), text_inputs(mask=True)


def gpt2():
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg), text_inputs()


def t5():
    cfg = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                                dropout_rate=0.0, decoder_start_token_id=0)
    inputs = text_inputs()
    inputs["decoder_input_ids"] = torch.randint(0, VOCAB, (2, 5), generator=torch.Generator().manual_seed(3))
    return transformers.T5Model(cfg), inputs


def llama():
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg), text_inputs()


def distilbert():
    cfg = transformers.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                        max_position_embeddings=64, dropout=0.0, attention_dropout=0.0)
    return transformers.DistilBertModel(cfg), text_inputs(mask=True)


def vit():
    cfg = transformers.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=2, intermediate_size=64, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0)
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(4))
    return transformers.ViTModel(cfg), {"pixel_values": pixels}


def text_inputs(mask=False):
    gen = torch.Generator().manual_seed(2)
    inputs = {"input_ids": torch.randint(0, VOCAB, (2, 12), generator=gen)}
    if mask:
        m = torch.ones(2, 12, dtype=torch.long)
        m[1, 9:] = 0  # padding in the second sequence
        inputs["attention_mask"] = m
    return inputs


MODELS = [bert, gpt2, t5, llama, distilbert, vit]


def first_tensor(out):
    return out[0] if isinstance(out, (tuple, list)) else (out.logits if hasattr(out, "logits") and out.logits is not None
                                                           else out.last_hidden_state)


def build(make):
    torch.manual_seed(0)
    model, inputs = make()
    return model, inputs


@pytest.fixture(autouse=True)
def fresh():
    B.register()
    torch._dynamo.reset()
    B.fallback_reasons.clear()
    B.compiled_graphs.clear()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("make", MODELS, ids=lambda m: m.__name__)
def test_inference_matches_eager(make):
    model, inputs = build(make)
    model.eval()
    compiled = torch.compile(model, backend="wick")
    with torch.no_grad():
        want = first_tensor(model(**inputs))
        got = first_tensor(compiled(**inputs))
    assert B.fallback_reasons == []
    # every graph is compiled by wick (no fallback above); some hold only extern calls
    # (T5 on torch 2.11 gets such a graph), so native kernels are asked of the model as a whole
    assert B.compiled_graphs and any(i["native"] > 0 for i in B.compiled_graphs)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("make", MODELS, ids=lambda m: m.__name__)
def test_training_step_matches_eager(make):
    model, inputs = build(make)
    model.train()  # dropout is 0 in every config: deterministic
    params = [p for p in model.parameters() if p.requires_grad]

    def step(fn):
        for p in params:
            p.grad = None
        out = first_tensor(fn(**inputs))
        loss = (out.float() ** 2).mean()
        loss.backward()
        return loss.detach(), [None if p.grad is None else p.grad.clone() for p in params]

    want_loss, want_grads = step(model)
    got_loss, got_grads = step(torch.compile(model, backend="wick"))
    assert B.fallback_reasons == []
    kinds = {i["graph"] for i in B.compiled_graphs}
    assert {"forward", "backward"} <= kinds
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-2, atol=1e-2)
    for p, g, w in zip(params, got_grads, want_grads):
        # AOTAutograd gives zeros where eager leaves an unused parameter's grad None
        g = torch.zeros_like(p) if g is None else g
        w = torch.zeros_like(p) if w is None else w
        torch.testing.assert_close(g, w, rtol=1e-2, atol=1e-2)
