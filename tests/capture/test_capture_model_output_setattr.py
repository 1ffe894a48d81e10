"""A field of a transformers ModelOutput made in the frame, given a new value
(CLIP's get_text_features: text_outputs.pooler_output =
self.text_projection(pooled_output); transformers' output capturing:
outputs["hidden_states"] = tuple(...)), and its keys(), values() and
items(). ModelOutput.__setattr__ and __setitem__ set the attribute and the
dict item. Capture models the stores after which the rebuilt output (made
in field order) has eager's keys in eager's order: a field that held a
value (its key stays in place), or a None field when every later field is
None (eager appends its key at the end, which is its place in field
order). Filling a None field before a field that holds a value, or
setting None, stays a graph break."""
import pytest
import torch

from test_capture_util import *  # noqa: F401,F403
from test_breaks_inplace import t

transformers = pytest.importorskip("transformers")
from transformers.modeling_outputs import BaseModelOutputWithPooling  # noqa: E402


def replace_value(x):
    out = BaseModelOutputWithPooling(last_hidden_state=x.sin(), pooler_output=x.sum(0))
    out.pooler_output = out.pooler_output * 2
    return out


def set_none_field(x):
    out = BaseModelOutputWithPooling(last_hidden_state=x.sin())
    out.pooler_output = x.sum(0)  # eager appends the key at the end: field order still
    out["hidden_states"] = (x, x.cos())
    return out


def set_field_before_a_value(x):
    out = BaseModelOutputWithPooling(last_hidden_state=x.sin(), hidden_states=(x,))
    out.pooler_output = x.sum(0)  # appended after hidden_states: not field order
    return out


def views(x):
    out = BaseModelOutputWithPooling(last_hidden_state=x.sin(), attentions=(x.exp(),))
    kept = {k: v for k, v in out.items() if k != "attentions"}
    return type(out)(**kept), list(out.keys()), len(out.values())


def same_output(a, b):
    assert type(a) is type(b) and list(a.keys()) == list(b.keys())
    for k in a.keys():
        torch.testing.assert_close(b[k], a[k])
    for x, y in zip(a.to_tuple(), b.to_tuple()):
        torch.testing.assert_close(y, x)


@pytest.mark.parametrize("shape", [(4, 3), (5,), (2, 0)])
def test_replacing_a_value_is_one_graph(shape):
    f = compiled(replace_value)
    for seed in range(2):
        x = t(*shape, seed=seed)
        same_output(replace_value(x), f(x))
    one_graph(replace_value)


@pytest.mark.parametrize("shape", [(4, 3), (0, 2)])
def test_filling_the_last_fields_is_one_graph(shape):
    f = compiled(set_none_field)
    x = t(*shape)
    same_output(set_none_field(x), f(x))
    one_graph(set_none_field)


def test_filling_a_field_before_a_value_is_refused_and_matches_eager():
    f = compiled(set_field_before_a_value)
    x = t(4, 3)
    same_output(set_field_before_a_value(x), f(x))
    assert any("assignment to field pooler_output" in r for r in reasons(set_field_before_a_value)), \
        reasons(set_field_before_a_value)


def test_keys_values_items():
    f = compiled(views)
    x = t(3, 2)
    (a, ka, na), (b, kb, nb) = views(x), f(x)
    same_output(a, b)
    assert (ka, na) == (kb, nb) == (["last_hidden_state", "attentions"], 2)
    one_graph(views)


def test_clip_is_one_graph():
    T = transformers
    torch.manual_seed(0)
    cfg = T.CLIPConfig(text_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                                        vocab_size=100, max_position_embeddings=16),
                       vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                          intermediate_size=37, image_size=32, patch_size=8), projection_dim=16)
    m = T.CLIPModel(cfg).eval()
    kw = dict(input_ids=torch.randint(0, 100, (2, 7)), pixel_values=torch.randn(2, 3, 32, 32))
    import wick

    wick.reset()
    f = wick.compile(m)
    with torch.no_grad():
        exp = m(**kw)
        f(**kw)
        got = f(**kw)
    for k in ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds"):
        torch.testing.assert_close(got[k], exp[k])
    same_output(exp.text_model_output, got.text_model_output)
    same_output(exp.vision_model_output, got.vision_model_output)
    assert stats_counts() == (1, 0, 0), wick.stats()


def test_segformer_output_capturing_is_one_graph():
    # transformers registers forward hooks on the first call (output
    # capturing), sets hidden_states on the result and filters it by items()
    T = transformers
    torch.manual_seed(0)
    cfg = T.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                            num_attention_heads=[1, 2], decoder_hidden_size=32, num_labels=3)
    m = T.SegformerForSemanticSegmentation(cfg).eval()
    x = torch.randn(2, 3, 32, 32)
    exp, got, c = module_twice_no_grad(m, x)
    torch.testing.assert_close(got.logits, exp.logits, rtol=1e-5, atol=1e-5)
    assert list(got.keys()) == list(exp.keys())
    assert c == (1, 0, 0), c
