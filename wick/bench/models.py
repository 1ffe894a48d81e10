"""Suites and model builders. Nothing is downloaded: every model has random weights.

A suite is a plain text file ``bench/suites/<suite>.txt``; one model a line:

    <name>  <cpu_batch>  [cuda_batch=N] [modes=inference,training] [tol=...] [gpu_only] [key=value...]

Extra keys are passed to the builder (e.g. ``seq=64``, ``size=small``).
Suites that need a library that is not installed are reported as skipped.

A builder returns a ``Built``: the float32 model on the device, its example
inputs (a dict for keyword calls or a tuple), and the loss used for training.
"""
from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# bench/suites lives at the repository root, next to the wick package.
REPO_ROOT = Path(__file__).resolve().parents[2]
SUITES_DIR = Path(os.environ.get("WICK_BENCH_SUITES_DIR", REPO_ROOT / "bench" / "suites"))

# suite -> python package it needs (None: torch alone)
SUITE_LIBS = {"micro": None, "toy": None, "huggingface": "transformers", "timm": "timm",
              "torchvision": "torchvision"}
DEFAULT_MODES = ("inference", "training")


@dataclass
class ModelSpec:
    suite: str
    name: str
    batch: int
    cuda_batch: int | None = None
    modes: tuple = DEFAULT_MODES
    tol: dict = field(default_factory=dict)  # mode -> tolerance override
    gpu_only: bool = False
    options: dict = field(default_factory=dict)

    def batch_for(self, device: str) -> int:
        return self.cuda_batch if device == "cuda" and self.cuda_batch else self.batch


def parse_suite_text(suite: str, text: str) -> list[ModelSpec]:
    specs = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) < 2:
            raise ValueError(f"{suite}.txt:{lineno}: expected '<name> <batch> [key=value...]'")
        spec = ModelSpec(suite=suite, name=parts[0], batch=int(parts[1]))
        for tok in parts[2:]:
            key, eq, val = tok.partition("=")
            if not eq:
                if key == "gpu_only":
                    spec.gpu_only = True
                    continue
                raise ValueError(f"{suite}.txt:{lineno}: bad option {tok!r}")
            if key == "cuda_batch":
                spec.cuda_batch = int(val)
            elif key == "modes":
                spec.modes = tuple(m for m in val.split(",") if m)
            elif key == "tol":
                spec.tol = {"inference": float(val), "training": float(val)}
            elif key in ("tol_inference", "tol_training"):
                spec.tol[key.split("_", 1)[1]] = float(val)
            else:
                spec.options[key] = val
        specs.append(spec)
    return specs


def load_suite(suite: str) -> list[ModelSpec]:
    path = SUITES_DIR / f"{suite}.txt"
    return parse_suite_text(suite, path.read_text())


def available_suites() -> list[str]:
    return sorted(p.stem for p in SUITES_DIR.glob("*.txt"))


def suite_missing_reason(suite: str) -> str | None:
    """Why a suite cannot run here (its library is not installed), or None."""
    if suite not in SUITE_LIBS and not (SUITES_DIR / f"{suite}.txt").exists():
        return f"unknown suite {suite!r}"
    lib = SUITE_LIBS.get(suite)
    if lib and importlib.util.find_spec(lib) is None:
        return f"{lib} is not installed"
    return None


@dataclass
class Built:
    model: Any
    inputs: Any  # dict (keyword call) or tuple (positional call)
    loss: Callable[[Any], Any]


def call(model, inputs):
    if isinstance(inputs, dict):
        return model(**inputs)
    return model(*inputs)


def reduce_to_scalar_loss(out):
    """The loss for models without their own: the mean of every floating output, summed."""
    import torch

    if hasattr(out, "loss") and getattr(out, "loss") is not None:
        return out.loss
    if isinstance(out, dict) and out.get("loss") is not None:
        return out["loss"]
    if isinstance(out, torch.Tensor):
        return out.float().mean()
    if isinstance(out, dict):
        vals = list(out.values())
    elif isinstance(out, (list, tuple)):
        vals = list(out)
    else:
        vals = [v for v in vars(out).values()] if hasattr(out, "__dict__") else []
    total = None
    for v in vals:
        if isinstance(v, (torch.Tensor, dict, list, tuple)):
            if isinstance(v, torch.Tensor) and not v.is_floating_point():
                continue
            part = reduce_to_scalar_loss(v)
            total = part if total is None else total + part
    if total is None:
        raise ValueError("model output has no floating tensor to make a loss from")
    return total


def zero_dropout(model):
    """Dropout p=0, so eager, float64 and compiled runs are deterministic and comparable."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0
    return model


# ----------------------------------------------------------------------------- micro
def _micro_modules():
    import torch

    class Pointwise8(torch.nn.Module):
        """Eight pointwise ops: mul, add, relu, sub, div, sigmoid, tanh, exp."""

        def forward(self, x, y):
            return ((((x * 1.5 + 0.5).relu() - y) / 2.0).sigmoid().tanh()).exp()

    class SoftmaxRows(torch.nn.Module):
        """Row-wise softmax written out: amax, sub, exp, sum, div."""

        def forward(self, x):
            m = x.amax(-1, keepdim=True)
            e = (x - m).exp()
            return e / e.sum(-1, keepdim=True)

    return Pointwise8, SoftmaxRows


def build_micro(spec: ModelSpec, batch: int, device: str) -> Built:
    import torch

    Pointwise8, SoftmaxRows = _micro_modules()
    g = torch.Generator().manual_seed(0)
    if spec.name in ("pointwise8", "pointwise_tiny"):
        n = int(spec.options.get("numel", 2**24 if spec.name == "pointwise8" else 16))
        x = torch.randn(n, generator=g).to(device)
        y = torch.randn(n, generator=g).to(device)
        return Built(Pointwise8(), (x, y), reduce_to_scalar_loss)
    if spec.name == "softmax_rows":
        rows = int(spec.options.get("rows", 4096))
        cols = int(spec.options.get("cols", 4096))
        x = (torch.randn(rows, cols, generator=g) * 3).to(device)
        return Built(SoftmaxRows(), (x,), reduce_to_scalar_loss)
    raise KeyError(f"unknown micro model {spec.name!r}")


# ----------------------------------------------------------------------------- toy
def build_toy(spec: ModelSpec, batch: int, device: str) -> Built:
    """Tiny torch-only models: the harness's own tests use them."""
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    if spec.name == "toy_mlp":
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10))
        inputs = (torch.randn(batch, 32),)
    elif spec.name == "toy_pointwise":
        class PW(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = nn.Parameter(torch.randn(256))

            def forward(self, x):
                return ((x * self.scale + 0.5).relu() - x).sigmoid() * self.scale.tanh()

        model = PW()
        inputs = (torch.randn(batch, 256),)
    elif spec.name == "toy_conv":
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
        inputs = (torch.randn(batch, 3, 16, 16),)
    else:
        raise KeyError(f"unknown toy model {spec.name!r}")
    inputs = tuple(t.to(device) for t in inputs)
    return Built(model.to(device), inputs, reduce_to_scalar_loss)


# ----------------------------------------------------------------------------- huggingface
# Small configs: hidden size, layers, heads, feed-forward and vocabulary per size preset.
HF_SIZES = {
    "tiny": dict(hidden=64, layers=2, heads=2, ff=128, vocab=512),
    "small": dict(hidden=128, layers=2, heads=2, ff=256, vocab=1024),
    "base": dict(hidden=256, layers=4, heads=4, ff=1024, vocab=8192),
    "large": dict(hidden=768, layers=6, heads=12, ff=3072, vocab=30522),
}


def _hf_config(name: str, sz: dict, seq: int):
    import transformers as T

    h, L, nh, ff, V = sz["hidden"], sz["layers"], sz["heads"], sz["ff"], sz["vocab"]
    pos = max(seq, 128)
    bert_like = dict(vocab_size=V, hidden_size=h, num_hidden_layers=L, num_attention_heads=nh,
                     intermediate_size=ff, max_position_embeddings=pos,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if name == "BertForMaskedLM":
        return T.BertConfig(**bert_like)
    if name == "RobertaForMaskedLM":
        return T.RobertaConfig(**dict(bert_like, max_position_embeddings=pos + 2))
    if name == "ElectraForMaskedLM":
        return T.ElectraConfig(embedding_size=h, **bert_like)
    if name == "AlbertForMaskedLM":
        return T.AlbertConfig(embedding_size=h, **bert_like)
    if name == "DistilBertForMaskedLM":
        return T.DistilBertConfig(vocab_size=V, dim=h, n_layers=L, n_heads=nh, hidden_dim=ff,
                                  max_position_embeddings=pos, dropout=0.0, attention_dropout=0.0)
    if name == "GPT2LMHeadModel":
        return T.GPT2Config(vocab_size=V, n_embd=h, n_layer=L, n_head=nh, n_inner=ff, n_positions=pos,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    if name == "T5ForConditionalGeneration":
        return T.T5Config(vocab_size=V, d_model=h, d_kv=h // nh, d_ff=ff, num_layers=L, num_heads=nh,
                          dropout_rate=0.0, use_cache=False)
    if name == "BartForConditionalGeneration":
        return T.BartConfig(vocab_size=V, d_model=h, encoder_layers=L, decoder_layers=L,
                            encoder_attention_heads=nh, decoder_attention_heads=nh,
                            encoder_ffn_dim=ff, decoder_ffn_dim=ff, max_position_embeddings=pos,
                            dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, use_cache=False)
    if name in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"):
        cfg_cls = {"LlamaForCausalLM": "LlamaConfig", "MistralForCausalLM": "MistralConfig",
                   "Qwen2ForCausalLM": "Qwen2Config"}[name]
        return getattr(T, cfg_cls)(vocab_size=V, hidden_size=h, intermediate_size=ff, num_hidden_layers=L,
                                   num_attention_heads=nh, num_key_value_heads=nh,
                                   max_position_embeddings=pos, use_cache=False)
    if name == "ViTForImageClassification":  # seq: patches per image (+1 class token)
        side = max(1, round(math.sqrt(seq)))
        return T.ViTConfig(image_size=8 * side, patch_size=8, num_channels=3, hidden_size=h, num_hidden_layers=L,
                           num_attention_heads=nh, intermediate_size=ff, num_labels=10,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if name == "OPTForCausalLM":
        return T.OPTConfig(vocab_size=V, hidden_size=h, num_hidden_layers=L, ffn_dim=ff, num_attention_heads=nh,
                           max_position_embeddings=pos, dropout=0.0, attention_dropout=0.0,
                           word_embed_proj_dim=h, use_cache=False)
    raise KeyError(f"no small config for huggingface model {name!r}")


def build_huggingface(spec: ModelSpec, batch: int, device: str) -> Built:
    import torch
    import transformers as T

    sz = dict(HF_SIZES[spec.options.get("size", "small")])
    seq = int(spec.options.get("seq", 64))
    cfg = _hf_config(spec.name, sz, seq)
    torch.manual_seed(0)
    cls = getattr(T, spec.name)
    if "attn" in spec.options:  # attn=eager|sdpa; default: the library's own choice
        model = cls._from_config(cfg, attn_implementation=spec.options["attn"])
    else:
        model = cls(cfg)
    zero_dropout(model)
    g = torch.Generator().manual_seed(0)
    if spec.name == "ViTForImageClassification":
        pixels = torch.randn(batch, 3, cfg.image_size, cfg.image_size, generator=g)
        inputs = {"pixel_values": pixels, "labels": torch.randint(0, cfg.num_labels, (batch,), generator=g)}
        return Built(model.to(device), {k: v.to(device) for k, v in inputs.items()}, reduce_to_scalar_loss)
    V = cfg.vocab_size
    ids = torch.randint(0, V, (batch, seq), generator=g)
    inputs = {"input_ids": ids}
    if spec.name in ("T5ForConditionalGeneration", "BartForConditionalGeneration"):
        inputs["decoder_input_ids"] = torch.randint(0, V, (batch, seq), generator=g)
    inputs["labels"] = torch.randint(0, V, (batch, seq), generator=g)
    inputs = {k: v.to(device) for k, v in inputs.items()}
    return Built(model.to(device), inputs, reduce_to_scalar_loss)


# ----------------------------------------------------------------------------- timm / torchvision
def _image_built(model, batch, device, res, num_classes):
    import torch

    zero_dropout(model)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, res, res, generator=g)
    target = torch.randint(0, num_classes, (batch,), generator=g)

    def loss(out):
        logits = out if isinstance(out, torch.Tensor) else out[0]
        return torch.nn.functional.cross_entropy(logits.float(), target.to(logits.device))

    return Built(model.to(device), (x.to(device),), loss)


def build_timm(spec: ModelSpec, batch: int, device: str) -> Built:
    import timm
    import torch

    torch.manual_seed(0)
    nc = int(spec.options.get("num_classes", 1000))
    model = timm.create_model(spec.name, pretrained=False, num_classes=nc)
    res = int(spec.options.get("res", 224))
    return _image_built(model, batch, device, res, nc)


def build_torchvision(spec: ModelSpec, batch: int, device: str) -> Built:
    import torch
    import torchvision

    torch.manual_seed(0)
    nc = int(spec.options.get("num_classes", 1000))
    kwargs = {"weights": None, "num_classes": nc}
    if spec.name.startswith("inception"):
        kwargs["aux_logits"] = False
        kwargs["init_weights"] = False
    model = getattr(torchvision.models, spec.name)(**kwargs)
    res = int(spec.options.get("res", 224))
    return _image_built(model, batch, device, res, nc)


BUILDERS = {"micro": build_micro, "toy": build_toy, "huggingface": build_huggingface,
            "timm": build_timm, "torchvision": build_torchvision}


def build(spec: ModelSpec, batch: int, device: str) -> Built:
    return BUILDERS[spec.suite](spec, batch, device)
