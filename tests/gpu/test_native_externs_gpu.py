"""Extern calls through PyTorch's C shim on a CUDA device (csrc/runtime/
shim_ops.c; skipped without one): matmuls, convolution and its backward,
pooling and its backward, and the three CUDA attention kernels called from
C, compared with eager, and counted (the host profile's extern_native
phase). The CPU forms: tests/runtime/test_native_externs.py."""
import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import wick._C as C  # noqa: E402
from wick import backends  # noqa: E402

X = C.ExternInput
aten = torch.ops.aten
DEV = "cuda"


# graphs compiled with the host profile on count their native calls (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("host_profile_on")


def native_calls():
    return C.host_profile(True).get("extern_native", (0, 0.0))[0]


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return torch.randn(*shape, generator=g, device=DEV).to(dtype)


def meta(t):
    return {"dtype": t.dtype, "sizes": tuple(t.shape), "strides": t.stride(), "device": t.device}


def check(op, tensors, args, kwargs=None, picks=None, native=True, **tol):
    def real(a):
        return tensors[a.index] if isinstance(a, C.ExternInput) else a

    want = op(*[real(a) for a in args], **{k: real(v) for k, v in (kwargs or {}).items()})
    wants = [want] if picks is None else [want[p] for p in picks]
    g = C.Graph()
    ids = [g.input_like(t) for t in tensors]
    outs = g.extern(0, ids, [meta(w) for w in wants], name=f"aten.{op._opname}.{op._overloadname}")
    for o in outs:
        g.output(o)
        g.output(g.op("mul", [o, g.scalar(2)]))
    cg = g.compile(externs=[(op._op, args, kwargs, picks)])
    native_calls()
    with torch.no_grad():
        got = cg(*tensors)
    torch.cuda.synchronize()
    assert native_calls() == (1 if native else 0)
    for k, w in enumerate(wants):
        assert got[2 * k].device == w.device and got[2 * k].dtype == w.dtype and got[2 * k].shape == w.shape
        torch.testing.assert_close(got[2 * k], w, **tol)
        torch.testing.assert_close(got[2 * k + 1], w * 2, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_matmuls(dtype):
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    a, b, c = rand(33, 64, dtype=dtype), rand(64, 17, dtype=dtype, seed=1), rand(17, dtype=dtype, seed=2)
    check(aten.mm.default, [a, b], (X(0), X(1)), **tol)
    check(aten.mm.default, [a, rand(17, 64, dtype=dtype, seed=3).t()], (X(0), X(1)), **tol)
    check(aten.addmm.default, [c, a, b], (X(0), X(1), X(2)), {"beta": 0.5, "alpha": 2.0}, **tol)
    p, q, r = rand(4, 9, 16, dtype=dtype), rand(4, 16, 5, dtype=dtype, seed=1), rand(4, 9, 5, dtype=dtype, seed=2)
    check(aten.bmm.default, [p, q], (X(0), X(1)), **tol)
    check(aten.baddbmm.default, [r, p, q], (X(0), X(1), X(2)), {"alpha": 0.125}, **tol)
    check(aten.mm.default, [rand(0, 8, dtype=dtype), rand(8, 3, dtype=dtype)], (X(0), X(1)), **tol)


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_convolution(layout, dtype):
    tol = {"rtol": 1e-3, "atol": 1e-3} if dtype == torch.float32 else {"rtol": 3e-2, "atol": 3e-2}
    x, w, b = rand(2, 8, 15, 13, dtype=dtype), rand(16, 4, 3, 3, dtype=dtype, seed=1), rand(16, dtype=dtype, seed=2)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
        w = w.contiguous(memory_format=torch.channels_last)
    check(aten.convolution.default, [x, w, b], (X(0), X(1), X(2), [2, 1], [1, 1], [1, 1], False, [0, 0], 2), **tol)
    check(aten.convolution.default, [x, w], (X(0), X(1), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 2), **tol)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_kernels(causal):
    q, k, v = (rand(2, 4, 64, 64, dtype=torch.bfloat16, seed=s) for s in range(3))
    tol = {"rtol": 2e-2, "atol": 2e-2}
    check(aten._scaled_dot_product_flash_attention.default, [q, k, v], (X(0), X(1), X(2), 0.0, causal),
          picks=(0, 1), **tol)
    check(aten._scaled_dot_product_efficient_attention.default, [q, k, v], (X(0), X(1), X(2), None, True, 0.0,
                                                                          causal), {"scale": 0.2}, picks=(0,), **tol)
    bias = rand(2, 4, 64, 64, dtype=torch.bfloat16, seed=7)
    check(aten._scaled_dot_product_efficient_attention.default, [q, k, v, bias],
          (X(0), X(1), X(2), X(3), False, 0.0, False), picks=(0,), **tol)
    try:
        aten._scaled_dot_product_cudnn_attention.default(q, k, v, None, True, 0.0, causal, False)
    except RuntimeError:
        pytest.skip("no cuDNN attention for these inputs here")
    check(aten._scaled_dot_product_cudnn_attention.default, [q, k, v], (X(0), X(1), X(2), None, True, 0.0, causal,
                                                                      False), picks=(0,), **tol)


def test_bf16_transformer_through_torch_compile():
    torch._dynamo.reset()
    backends.fallback_reasons.clear()
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True).to(DEV)
    x = torch.randn(4, 32, 64, device=DEV)
    f = torch.compile(layer, backend="wick")
    with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
        want = layer(x)
        f(x)
        native_calls()
        got = f(x)
    assert native_calls() >= 4
    assert not backends.fallback_reasons, backends.fallback_reasons
    torch.testing.assert_close(got.float(), want.float(), rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mask", [(True, True, True), (False, True, False), (True, True, False)])
def test_convolution_backward(layout, dtype, mask):
    tol = {"rtol": 1e-3, "atol": 1e-3} if dtype == torch.float32 else {"rtol": 3e-2, "atol": 3e-2}
    x, w = rand(2, 8, 15, 13, dtype=dtype), rand(16, 4, 3, 3, dtype=dtype, seed=1)
    conv = ([2, 1], [1, 1], [1, 1], False, [0, 0], 2)
    gy = rand(*aten.convolution.default(x, w, None, *conv).shape, dtype=dtype, seed=2)
    if layout == "channels_last":
        x, w, gy = (t.contiguous(memory_format=torch.channels_last) for t in (x, w, gy))
    picks = tuple(i for i in range(3) if mask[i])
    check(aten.convolution_backward.default, [gy, x, w], (X(0), X(1), X(2), [16], *conv, list(mask)),
          picks=picks, **tol)


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pooling_and_backward(layout, dtype):
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    x = rand(2, 8, 17, 14, dtype=dtype)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    window = ([3, 3], [2, 2], [1, 1])
    check(aten.max_pool2d_with_indices.default, [x], (X(0), *window), picks=(0, 1))
    y, idx = aten.max_pool2d_with_indices.default(x, *window)
    gy = rand(*y.shape, dtype=dtype, seed=3)
    check(aten.max_pool2d_with_indices_backward.default, [gy, x, idx], (X(0), X(1), *window, [1, 1], False, X(2)))
    check(aten.avg_pool2d.default, [x], (X(0), *window, True, False), **tol)  # ceil_mode: one more column
    gavg = rand(*aten.avg_pool2d.default(x, *window, True, False).shape, dtype=dtype, seed=5)
    check(aten.avg_pool2d_backward.default, [gavg, x], (X(0), X(1), *window, True, False, None), **tol)
    check(aten._adaptive_avg_pool2d.default, [x], (X(0), [3, 2]), **tol)
    ga = rand(2, 8, 3, 2, dtype=dtype, seed=4)
    check(aten._adaptive_avg_pool2d_backward.default, [ga, x], (X(0), X(1)), **tol)


def test_small_resnet_training_step_bf16_autocast():
    """A small ResNet's training step under bf16 autocast through
    torch.compile: convolution_backward and max pooling's backward go
    native (16-bit batch norm in training stays cuDNN's by default, a Python call: no shim function)."""
    import copy
    import os
    import sys

    runtime_tests = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime")
    if runtime_tests not in sys.path:
        sys.path.insert(0, runtime_tests)
    from test_native_externs import SHIM_OPS, SmallResNet

    torch._dynamo.reset()
    backends.fallback_reasons.clear()
    backends.compiled_graphs.clear()
    torch.manual_seed(0)
    model = SmallResNet().to(DEV)
    twin = copy.deepcopy(model)
    x, target = rand(4, 3, 32, 32), torch.randint(0, 10, (4,), device=DEV)
    compiled = torch.compile(twin, backend="wick")

    def step(m):
        with torch.autocast("cuda", torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(m(x), target)
        loss.backward()
        return loss

    step(compiled)
    twin.zero_grad()
    twin.load_state_dict(model.state_dict())
    native_calls()
    got = step(compiled)
    torch.cuda.synchronize()
    calls = native_calls()
    want = step(model)
    assert not backends.fallback_reasons, backends.fallback_reasons
    names = {}
    for g in backends.compiled_graphs:
        for name, n in g["externs"].items():
            names[name] = names.get(name, 0) + n
    assert names.get("aten.convolution_backward.default", 0) == 6, names
    # every convolution_backward and max pooling call at least (a forward
    # convolution made contiguous by wick/_layout.py keeps its Python call)
    assert calls >= 6 + names.get("aten.max_pool2d_with_indices_backward.default", 0), (calls, names)
    assert calls <= sum(n for name, n in names.items() if name in SHIM_OPS)
    tol = {"rtol": 5e-2, "atol": 5e-2}
    torch.testing.assert_close(got, want, **tol)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name, **tol)
