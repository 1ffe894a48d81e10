"""A field of a transformers ModelOutput made in the frame, given a new value
(CLIP's get_text_features: text_outputs.pooler_output =
self.text_projection(pooled_output)). ModelOutput.__setattr__ sets the
attribute and the dict item, and the dict keeps its order when the field
held a value already, so capture models that case: the rebuilt output has
eager's fields, keys and order. Setting a field that held None (eager
appends its key at the end) or setting None stays a graph break."""
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
    out.pooler_output = x.sum(0)  # eager appends the key at the end of its dict
    return out


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


def test_setting_a_none_field_is_refused_and_matches_eager():
    f = compiled(set_none_field)
    x = t(4, 3)
    same_output(set_none_field(x), f(x))
    assert any("assignment to field .pooler_output" in r for r in reasons(set_none_field)), reasons(set_none_field)


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
    st = wick.stats()
    assert (st["graphs"], st["breaks"], len(st["fallbacks"])) == (1, 0, 0), st
