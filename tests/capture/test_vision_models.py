"""timm and torchvision models through wick's own capture, random weights,
small inputs (1x3x64x64): inference and a forward+backward call, each one
graph (as PyTorch's capture gets) with results equal to eager.

timm and torchvision are not in `make test`'s environment: this file skips
there and runs where they are installed (the H200 image; here a side venv,
see README). Backend "wick" (its C compiler; training through AOTAutograd)
unless WICK_VISION_BACKEND names another (e.g. "eager" to check capture
alone quickly).

torchvision's vit_b_16 (image_size=64 here) goes through
nn.MultiheadAttention's fast-path checks (Tensor.is_nested, has_torch_function,
the dispatch-mode stack: answered at capture, vals/tensor.c and
vals/builtins.c); in inference the fast path's torch._native_multi_head_attention
is an extern node. convnext_tiny's Permute keeps its dims in a list
attribute (read as a list guarded equal, vals/object.c) and its
StochasticDepth logs API usage once (folded)."""
import os

import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import compiled, entries

timm = pytest.importorskip("timm")
torchvision = pytest.importorskip("torchvision")

BACKEND = os.environ.get("WICK_VISION_BACKEND", "wick")


def _timm(name, **kw):
    return lambda: timm.create_model(name, pretrained=False, **kw)


def _tv(name, **kw):
    return lambda: getattr(torchvision.models, name)(weights=None, **kw)


MODELS = {
    "timm_resnet50": _timm("resnet50"),
    "timm_mobilenetv3_large_100": _timm("mobilenetv3_large_100"),
    "timm_vit_base_patch16_224": _timm("vit_base_patch16_224", img_size=64),
    "timm_convnext_tiny": _timm("convnext_tiny"),
    "tv_resnet50": _tv("resnet50"),
    "tv_mobilenet_v3_large": _tv("mobilenet_v3_large"),
    "tv_vit_b_16": _tv("vit_b_16", image_size=64),
    "tv_convnext_tiny": _tv("convnext_tiny"),
}
# float32 through fused kernels in a different order than eager: deep
# networks (50 layers, batch norm folded at run time) drift a little more
# than one kernel does
TOL = dict(rtol=1e-3, atol=1e-3)


def _make(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    x = torch.randn(1, 3, 64, 64)
    return model, x


def _one_graph(model):
    es = entries(type(model).forward)
    assert len(es) == 1, es
    assert not es[0]["eager"], es[0].get("reason")
    assert es[0]["graph_count"] == 1 and not es[0].get("breaks"), es[0].get("breaks")
    return es[0]


@pytest.mark.parametrize("name", list(MODELS))
def test_inference_is_one_graph_equal_to_eager(name):
    C.reset()
    model, x = _make(name)
    f = compiled(type(model).forward, backend=BACKEND)
    with torch.no_grad():
        want = model(x)
        for _ in range(2):  # the second call runs the cached entry
            got = f(model, x)
            torch.testing.assert_close(got, want, **TOL)
    _one_graph(model)


@pytest.mark.parametrize("name", list(MODELS))
def test_forward_backward_is_one_graph_equal_to_eager(name):
    C.reset()
    model, x = _make(name)
    params = [p for p in model.parameters() if p.requires_grad]
    want_out = model(x)
    want = torch.autograd.grad(want_out.square().mean(), params)
    f = compiled(type(model).forward, backend=BACKEND)
    got_out = f(model, x)
    assert got_out.requires_grad
    got = torch.autograd.grad(got_out.square().mean(), params)
    torch.testing.assert_close(got_out, want_out, **TOL)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **TOL)
    e = _one_graph(model)
    if BACKEND == "wick":
        assert e["via_fx"]  # forward and backward graphs through AOTAutograd
