"""Which kernel eager's F.scaled_dot_product_attention picks in the transformers
bench models on CUDA (bf16 autocast, inference under no_grad and a training
forward), with the arguments' metadata: what wick's own capture must match
to call that kernel itself. python probe_sdpa.py [MODELS]"""
import collections
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

sys.path.insert(0, ".")
from wick.bench import models as M  # noqa: E402

seen = collections.Counter()
orig = F.scaled_dot_product_attention


def meta(t):
    if not isinstance(t, torch.Tensor):
        return repr(t)
    return f"{tuple(t.shape)}/{t.stride()}/{str(t.dtype)[6:]}/rg={int(t.requires_grad)}"


def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    dt = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else q.dtype
    qq, kk, vv = (t.to(dt) for t in (q, k, v))
    m = attn_mask.to(dt) if attn_mask is not None and attn_mask.is_floating_point() else attn_mask
    choice = torch._fused_sdp_choice(qq, kk, vv, m, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    name = SDPBackend(choice).name
    seen[(MODEL, MODE, name, meta(q), meta(attn_mask), dropout_p, is_causal, scale, enable_gqa,
          torch.is_grad_enabled())] += 1
    return orig(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                enable_gqa=enable_gqa)


F.scaled_dot_product_attention = spy
torch.nn.functional.scaled_dot_product_attention = spy
names = (sys.argv[1] if len(sys.argv) > 1 else
         "BertForMaskedLM,GPT2LMHeadModel,T5ForConditionalGeneration,LlamaForCausalLM,"
         "ViTForImageClassification,DistilBertForMaskedLM").split(",")
specs = {s.name: s for s in M.load_suite("huggingface")}
for MODEL in names:
    spec = specs[MODEL]
    built = M.build(spec, spec.batch_for("cuda"), "cuda")
    for MODE in ("inference", "training"):
        built.model.train(MODE == "training")
        with torch.autocast("cuda", torch.bfloat16), torch.set_grad_enabled(MODE == "training"):
            M.call(built.model, built.inputs)
for k, n in sorted(seen.items()):
    print(n, "x", " | ".join(str(x) for x in k))
