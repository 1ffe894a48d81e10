"""Transformer blocks through wick.compile with enough tokens for row groups
(64 to 130 rows): each block's residual sum, which the next norm normalises
and the next residual add reads again, is the first phase of that norm's
row group (rows.c), read off the schedules WICK_DEBUG_DIR dumps. ViT and
GPT-2 (layer norm), LLaMA (RMSNorm), float32 and bfloat16; outputs compared
with eager. (The first block's sum of embeddings, a gather or a cat, stays a
kernel of its own.)"""
import glob
import os

import pytest
import torch

import wick
import wick._C as C

transformers = pytest.importorskip("transformers")
T = transformers


def vit():
    cfg = T.ViTConfig(image_size=32, patch_size=4, num_channels=3, hidden_size=64, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=96)
    return T.ViTModel(cfg), dict(pixel_values=torch.randn(2, 3, 32, 32)), "LAYER_NORM"


def gpt2():
    cfg = T.GPT2Config(vocab_size=100, n_embd=64, n_layer=2, n_head=2, n_positions=64, bos_token_id=1,
                       eos_token_id=2)
    return T.GPT2Model(cfg), dict(input_ids=torch.randint(0, 100, (2, 32))), "LAYER_NORM"


def llama():
    cfg = T.LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    return T.LlamaModel(cfg), dict(input_ids=torch.randint(0, 100, (2, 32))), "MEAN"


@pytest.fixture
def debug_dir(tmp_path, monkeypatch):
    # a cache of its own: a graph compiled before would not be dumped again
    monkeypatch.setenv("WICK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("WICK_DEBUG_DIR", str(tmp_path / "debug"))
    C.env_reload()
    yield tmp_path / "debug"
    monkeypatch.undo()
    C.env_reload()


def residual_groups(debug, norm_op):
    """Row groups whose first kernel is a pointwise ADD over [rows, cols]
    and whose later phases include the norm's reduction."""
    found = 0
    for path in glob.glob(os.path.join(str(debug), "schedule-*.txt")):
        kernels = [ln for ln in open(path) if ln.startswith("kernel ")]
        for k, ln in enumerate(kernels):
            head = "kernel %d: pointwise {" % k
            if not ln.startswith(head) or "ADD" not in ln.split("}")[0] or norm_op in ln.split("}")[0]:
                continue
            phases = [p for p in kernels[k + 1:] if "(rows of kernel %d)" % k in p]
            found += any("reduction" in p and norm_op in p for p in phases)
    return found


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("make", [vit, gpt2, llama], ids=lambda f: f.__name__)
def test_residual_sum_fuses_into_the_norm(make, dtype, debug_dir):
    torch.manual_seed(0)
    model, kwargs, norm_op = make()
    model = model.eval().to(dtype)
    kwargs = {k: v.to(dtype) if v.is_floating_point() else v for k, v in kwargs.items()}
    with torch.no_grad():
        want = model(**kwargs).last_hidden_state
        got = wick.compile(model)(**kwargs).last_hidden_state
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    # (a stage repeated layer after layer is dumped once)
    assert residual_groups(debug_dir, norm_op) >= 1, os.listdir(str(debug_dir))
