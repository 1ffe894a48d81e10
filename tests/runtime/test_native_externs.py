"""Extern calls made through PyTorch's C shim (csrc/runtime/shim_ops.c):
matmuls, convolution and its backward, pooling and its backward, and
attention called from C with no Python call, compared with eager (also a
small ResNet's training step through torch.compile); and the cases that must
keep the Python call (grad mode on, a dispatch mode, a tensor subclass,
integer results, a wrapped callable, results output_mask leaves out,
WICK_NATIVE_EXTERNS=0)."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import wick._C as C

X = C.ExternInput
aten = torch.ops.aten


# graphs compiled with the host profile on count their native calls (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("host_profile_on")


class Seen(TorchDispatchMode):
    """Records the ATen ops that reach it: a call that went through Python
    dispatch (not the C shim) shows up here."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def native_calls():
    return C.host_profile(True).get("extern_native", (0, 0.0))[0]


def meta(t):
    return {"dtype": t.dtype, "sizes": tuple(t.shape), "strides": t.stride()}


def one_extern(op, tensors, args, kwargs=None, picks=None, metas=None):
    """A graph of one extern node (plus a pointwise use of each output, so
    kernels read the outputs too), compiled; returns the compiled graph."""
    g = C.Graph()
    ids = [g.input_like(t) for t in tensors]
    name = f"aten.{op._opname}.{op._overloadname}"
    outs = g.extern(0, ids, metas, name=name)
    for o in outs:
        g.output(o)
        g.output(g.op("mul", [o, g.scalar(2)]))
    return g.compile(externs=[(op._op, args, kwargs, picks)])


def check(op, tensors, args, kwargs=None, picks=None, native=True, **tol):
    want = op(*[tensors[a.index] if isinstance(a, C.ExternInput) else a for a in args],
              **{k: tensors[v.index] if isinstance(v, C.ExternInput) else v for k, v in (kwargs or {}).items()})
    wants = [want] if picks is None else [want[p] for p in picks]
    cg = one_extern(op, tensors, args, kwargs, picks, [meta(w) for w in wants])
    native_calls()
    with torch.no_grad():
        got = cg(*tensors)
    assert native_calls() == (1 if native else 0)
    for k, w in enumerate(wants):
        assert got[2 * k].dtype == w.dtype and got[2 * k].shape == w.shape
        assert got[2 * k].stride() == w.stride() or w.numel() <= 1
        torch.testing.assert_close(got[2 * k], w, **tol)
        torch.testing.assert_close(got[2 * k + 1], w * 2, **tol)
    return cg


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("m,k,n", [(5, 7, 3), (1, 64, 33), (0, 4, 6), (16, 0, 8)])
def test_mm_addmm(dtype, m, k, n):
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
    a, b, c = rand(m, k, dtype=dtype), rand(k, n, dtype=dtype, seed=1), rand(n, dtype=dtype, seed=2)
    check(aten.mm.default, [a, b], (X(0), X(1)), **tol)
    check(aten.mm.default, [a, rand(n, k, dtype=dtype, seed=3).t()], (X(0), X(1)), **tol)  # a transposed operand
    check(aten.addmm.default, [c, a, b], (X(0), X(1), X(2)), **tol)
    check(aten.addmm.default, [c, a, b], (X(0), X(1), X(2)), {"beta": 0.5, "alpha": 2}, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bmm_baddbmm(dtype):
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
    a, b = rand(3, 5, 7, dtype=dtype), rand(3, 7, 4, dtype=dtype, seed=1)
    c = rand(3, 5, 4, dtype=dtype, seed=2)
    check(aten.bmm.default, [a, b], (X(0), X(1)), **tol)
    check(aten.bmm.default, [a, rand(3, 4, 7, dtype=dtype, seed=4).transpose(1, 2)], (X(0), X(1)), **tol)
    check(aten.baddbmm.default, [c, a, b], (X(0), X(1), X(2)), {"beta": -1.0, "alpha": 0.25}, **tol)


@pytest.mark.parametrize("case", ["2d", "2d_nobias", "2d_strided_grouped", "1d", "3d", "transposed", "channels_last"])
def test_convolution(case):
    tol = {"rtol": 1e-4, "atol": 1e-4}
    if case == "1d":
        x, w, b = rand(2, 4, 11), rand(6, 4, 3, seed=1), rand(6, seed=2)
        args = (X(0), X(1), X(2), [2], [1], [1], False, [0], 1)
    elif case == "3d":
        x, w, b = rand(1, 2, 5, 6, 7), rand(3, 2, 3, 3, 3, seed=1), rand(3, seed=2)
        args = (X(0), X(1), X(2), [1, 1, 1], [1, 0, 1], [1, 1, 1], False, [0, 0, 0], 1)
    elif case == "transposed":
        x, w, b = rand(2, 4, 5, 5), rand(4, 3, 3, 3, seed=1), rand(3, seed=2)
        args = (X(0), X(1), X(2), [2, 2], [1, 1], [1, 1], True, [1, 1], 1)
    elif case == "2d_strided_grouped":
        x, w, b = rand(3, 6, 9, 8), rand(6, 2, 3, 3, seed=1), rand(6, seed=2)
        args = (X(0), X(1), X(2), [2, 1], [1, 2], [2, 1], False, [0, 0], 3)
    else:
        x, w, b = rand(2, 3, 8, 7), rand(5, 3, 3, 3, seed=1), rand(5, seed=2)
        if case == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        args = (X(0), X(1), None if case == "2d_nobias" else X(2), [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    tensors = [x, w, b] if args[2] is not None else [x, w]
    check(aten.convolution.default, tensors, args, **tol)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_mask,scale", [(False, None), (True, None), (False, 0.3)])
def test_cpu_flash_attention(causal, with_mask, scale):
    if causal and with_mask:
        pytest.skip("eager refuses a mask together with is_causal")
    q, k, v = rand(2, 3, 9, 16), rand(2, 3, 11, 16, seed=1), rand(2, 3, 11, 16, seed=2)
    tensors, kw = [q, k, v], {}
    if with_mask:
        tensors.append(rand(9, 11, seed=3))
        kw["attn_mask"] = X(3)
    if scale is not None:
        kw["scale"] = scale
    check(aten._scaled_dot_product_flash_attention_for_cpu.default, tensors, (X(0), X(1), X(2), 0.0, causal), kw,
          picks=(0, 1), rtol=1e-4, atol=1e-4)


def test_python_call_where_the_shim_cannot_stand_in():
    a, b = rand(4, 5), rand(5, 3, seed=1)
    # an integer matmul: the Python call
    check(aten.mm.default, [a.to(torch.int64), b.to(torch.int64)], (X(0), X(1)), native=False)
    # attention with dropout: the Python call (random numbers), not a native
    # one; here it gives eager's own error (the CPU kernel has no dropout)
    q = rand(1, 1, 4, 8)
    cg = one_extern(aten._scaled_dot_product_flash_attention_for_cpu.default, [q], (X(0), X(0), X(0), 0.5),
                    picks=(0,), metas=[meta(q)])
    with torch.no_grad(), pytest.raises(RuntimeError, match="dropout"):
        cg(q)
    assert native_calls() == 0
    # a wrapper around the op is not the op
    g = C.Graph()
    ai, bi = g.input_like(a), g.input_like(b)
    (o,) = g.extern(0, [ai, bi], [meta(a @ b)], name="aten.mm.default")
    g.output(o)
    cg = g.compile(externs=[(lambda x, y: aten.mm.default(x, y) + 1, (X(0), X(1)))])
    with torch.no_grad():
        torch.testing.assert_close(cg(a, b)[0], a @ b + 1)
    assert native_calls() == 0


def test_grad_mode_mode_and_subclass_keep_the_python_call():
    a, b = rand(4, 5), rand(5, 3, seed=1)
    cg = one_extern(aten.mm.default, [a, b], (X(0), X(1)), metas=[meta(a @ b)])
    # grad mode on, an input that requires grad: autograd must see the op
    w = b.clone().requires_grad_()
    out = cg(a, w)[0]
    assert native_calls() == 0
    out.sum().backward()
    torch.testing.assert_close(w.grad, a.sum(0)[:, None].expand(5, 3))

    with torch.no_grad(), Seen() as mode:
        cg(a, b)
    assert aten.mm.default in mode.ops and native_calls() == 0

    class Sub(torch.Tensor):
        pass

    with torch.no_grad():
        got = cg(a.as_subclass(Sub), b)[0]
    torch.testing.assert_close(got.as_subclass(torch.Tensor), a @ b)
    assert native_calls() == 0
    with torch.no_grad():
        cg(a, b)
    assert native_calls() == 1


def test_knob_turns_it_off(monkeypatch):
    monkeypatch.setenv("WICK_NATIVE_EXTERNS", "0")
    C.env_reload()
    a, b = rand(4, 5), rand(5, 3, seed=1)
    check(aten.mm.default, [a, b], (X(0), X(1)), native=False)


def test_transformer_block_through_torch_compile():
    """Inference and a training step through torch.compile(backend="wick"):
    the linear layers' and attention's extern calls go native in the
    compiled forward and backward graphs, results equal eager's."""
    import copy

    from wick import backends

    torch._dynamo.reset()
    backends.fallback_reasons.clear()
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    twin = copy.deepcopy(layer)
    x = torch.randn(2, 7, 32)
    compiled = torch.compile(layer, backend="wick")
    with torch.no_grad():
        want = layer(x)
        compiled(x)  # AOTAutograd's first call runs under a dispatch mode of its own: Python calls
        native_calls()
        got = compiled(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert native_calls() >= 4
    torch._dynamo.reset()
    compiled = torch.compile(twin, backend="wick")
    compiled(x).square().mean().backward()
    twin.zero_grad()
    native_calls()
    want = layer(x).square().mean()
    want.backward()
    got = compiled(x).square().mean()
    got.backward()
    assert not backends.fallback_reasons, backends.fallback_reasons
    assert native_calls() >= 8  # forward and backward matmuls
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(layer.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_shim_turned_on_after_a_graph_compiled_with_it_off():
    """WICK_SHIM=0 at a process's first graph, then 1: later graphs allocate
    and call through the shim (neither the shim nor the native calls stay
    off for the process). A fresh process, as the shim resolves once."""
    import os
    import subprocess
    import sys

    code = """
import os, torch
import wick._C as C
X = C.ExternInput
def graph():
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    g = C.Graph()
    ai, bi = g.input_like(a), g.input_like(b)
    (o,) = g.extern(0, [ai, bi], [{"dtype": torch.float32, "sizes": (4, 3), "strides": (3, 1)}],
                    name="aten.mm.default")
    g.output(o)
    return g.compile(externs=[(torch.ops.aten.mm.default._op, (X(0), X(1)))]), a, b
os.environ["WICK_SHIM"] = "0"
os.environ["WICK_HOST_PROFILE"] = "1"
C.env_reload()
for knob in ("0", "1"):
    os.environ["WICK_SHIM"] = knob
    C.env_reload()
    cg, a, b = graph()
    with torch.no_grad():
        torch.testing.assert_close(cg(a, b)[0], a @ b)
    print(knob, C.host_profile(True).get("extern_native", (0, 0))[0])
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=root,
                       env=dict(os.environ, PYTHONPATH=root))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["0", "0", "1", "1"], r.stdout


# ---- convolution models' training ops (convolution_backward, pooling) -------

def conv_case(case, dtype=torch.float32):
    """(x, w, bias or None, stride, padding, dilation, transposed, output_padding, groups) for a convolution."""
    if case == "1d":
        return rand(2, 4, 11, dtype=dtype), rand(6, 4, 3, seed=1, dtype=dtype), rand(6, seed=2, dtype=dtype), \
            [2], [1], [1], False, [0], 1
    if case == "transposed":
        return rand(2, 4, 5, 5, dtype=dtype), rand(4, 3, 3, 3, seed=1, dtype=dtype), rand(3, seed=2, dtype=dtype), \
            [2, 2], [1, 1], [1, 1], True, [1, 1], 1
    if case == "strided_grouped":
        return rand(3, 6, 9, 8, dtype=dtype), rand(6, 2, 3, 3, seed=1, dtype=dtype), None, \
            [2, 1], [1, 2], [2, 1], False, [0, 0], 3
    x = rand(2, 3, 8, 7, dtype=dtype)
    if case == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    return x, rand(5, 3, 3, 3, seed=1, dtype=dtype), rand(5, seed=2, dtype=dtype), [1, 1], [1, 1], [1, 1], \
        False, [0, 0], 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", ["2d", "1d", "transposed", "strided_grouped", "channels_last"])
@pytest.mark.parametrize("mask", [(True, True, True), (False, True, False), (True, True, False), (True, False, True)])
def test_convolution_backward(dtype, case, mask):
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-4}
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = conv_case(case, dtype)
    y = aten.convolution.default(x, w, b, stride, padding, dilation, transposed, output_padding, groups)
    gy = rand(*y.shape, seed=5, dtype=dtype)
    if case == "channels_last":
        gy = gy.contiguous(memory_format=torch.channels_last)
    if b is None and mask[2]:
        mask = (mask[0], mask[1], False)
    bias_sizes = [b.shape[0]] if b is not None else None
    args = (X(0), X(1), X(2), bias_sizes, stride, padding, dilation, transposed, output_padding, groups, list(mask))
    picks = tuple(i for i in range(3) if mask[i])
    check(aten.convolution_backward.default, [gy, x, w], args, picks=picks, **tol)


def test_convolution_backward_picks_of_masked_results_keep_the_python_call():
    x, w, b, *rest = conv_case("2d")
    gy = rand(2, 5, 8, 7, seed=5)
    args = (X(0), X(1), X(2), [5], *rest, [True, True, False])
    # grad_bias asked for by the node but left out by output_mask: None at
    # run time, so no native form (the Python call says what eager says)
    metas = [meta(x), meta(w), meta(b)]
    cg = one_extern(aten.convolution_backward.default, [gy, x, w], args, picks=(0, 1, 2), metas=metas)
    with torch.no_grad(), pytest.raises(TypeError, match="NoneType for output 2"):
        cg(gy, x, w)
    assert native_calls() == 0


def pool_input(dtype, layout, shape=(2, 3, 9, 10)):
    x = rand(*shape, dtype=dtype)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "strided":
        x = rand(shape[0], shape[1], shape[2], shape[3] * 2, dtype=dtype)[..., ::2]
    return x


MAX_POOLS = [  # (kernel_size, stride, padding, dilation, ceil_mode); None: left out (the schema's default)
    ([3, 3], [2, 2], [1, 1], [1, 1], False),
    ([2, 2], None, None, None, None),
    ([3, 2], [2, 1], [1, 0], [2, 1], True),
    ([3, 3], [], [0, 0], None, None),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("window", range(len(MAX_POOLS)))
def test_max_pool2d_and_backward(dtype, layout, window):
    x = pool_input(dtype, layout)
    given = [a for a in MAX_POOLS[window] if a is not None]
    fwd = check(aten.max_pool2d_with_indices.default, [x], (X(0), *given), picks=(0, 1))
    y, idx = aten.max_pool2d_with_indices.default(x, *given)
    torch.testing.assert_close(fwd(x)[2], idx)  # the indices, int64, as eager's
    ks, stride, padding, dilation, ceil = MAX_POOLS[window]
    full = (ks, stride if stride is not None else [], padding if padding is not None else [0],
            dilation if dilation is not None else [1], bool(ceil))
    gy = rand(*y.shape, seed=3, dtype=dtype)
    check(aten.max_pool2d_with_indices_backward.default, [gy, x, idx], (X(0), X(1), *full, X(2)))


AVG_POOLS = [  # (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    ([2, 2], None, None, None, None, None),
    ([3, 3], [2, 2], [1, 1], False, True, None),
    ([3, 2], [2, 1], [1, 0], True, False, None),
    ([2, 3], [1, 2], [0, 1], False, True, 5),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("window", range(len(AVG_POOLS)))
def test_avg_pool2d_and_backward(dtype, layout, window):
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
    x = pool_input(dtype, layout)
    ks, stride, padding, ceil, cip, div = AVG_POOLS[window]
    given = [ks] + ([stride, padding, ceil, cip] if stride is not None else [])
    kw = {"divisor_override": div} if div is not None else {}
    check(aten.avg_pool2d.default, [x], (X(0), *given), kw or None, **tol)
    y = aten.avg_pool2d.default(x, *given, **kw)
    gy = rand(*y.shape, seed=3, dtype=dtype)
    full = (ks, stride if stride is not None else [], padding if padding is not None else [0], bool(ceil),
            True if cip is None else cip, div)
    check(aten.avg_pool2d_backward.default, [gy, x], (X(0), X(1), *full), **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("output_size", [[1, 1], [3, 4], [5, 5]])
def test_adaptive_avg_pool2d_and_backward(dtype, layout, output_size):
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
    x = pool_input(dtype, layout)
    check(aten._adaptive_avg_pool2d.default, [x], (X(0), output_size), **tol)
    gy = rand(*aten._adaptive_avg_pool2d.default(x, output_size).shape, seed=3, dtype=dtype)
    check(aten._adaptive_avg_pool2d_backward.default, [gy, x], (X(0), X(1)), **tol)


class _Block(torch.nn.Module):
    def __init__(self, cin, cout, stride, norm):
        super().__init__()
        nn = torch.nn
        bn = nn.BatchNorm2d if norm else (lambda c: nn.Identity())
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=not norm), bn(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, groups=2, bias=False), bn(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride), bn(cout)) if stride != 1 or cin != cout
                     else nn.Identity())

    def forward(self, x):
        relu = torch.nn.functional.relu
        return relu(self.b2(self.c2(relu(self.b1(self.c1(x))))) + self.down(x))


class SmallResNet(torch.nn.Module):
    """resnet's parts: a strided stem with bias, batch norm in train mode
    (norm=False: none), max pooling, residual blocks (grouped, strided, 1x1
    downsampling), adaptive average pooling, a linear head."""

    def __init__(self, norm=True, classes=10):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Conv2d(3, 8, 5, 2, 2)
        self.bn = nn.BatchNorm2d(8) if norm else nn.Identity()
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.blocks = nn.Sequential(_Block(8, 8, 1, norm), _Block(8, 16, 2, norm))
        self.avg = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.pool(torch.nn.functional.relu(self.bn(self.stem(x))))
        return self.fc(torch.flatten(self.avg(self.blocks(x)), 1))


# extern calls the C shim makes (shim_ops.c's table, the ones a convolution model's step reaches)
SHIM_OPS = {"aten.mm.default", "aten.addmm.default", "aten.convolution.default",
            "aten.convolution_backward.default", "aten.max_pool2d_with_indices.default",
            "aten.max_pool2d_with_indices_backward.default", "aten.avg_pool2d.default",
            "aten.avg_pool2d_backward.default", "aten._adaptive_avg_pool2d.default",
            "aten._adaptive_avg_pool2d_backward.default"}


def extern_calls_per_step():
    """(calls through the shim, {op: calls through Python}) per step of the graphs compiled so far."""
    from wick import backends

    native, python = 0, {}
    for g in backends.compiled_graphs:
        for name, n in g["externs"].items():
            if name in SHIM_OPS:
                native += n
            else:
                python[name] = python.get(name, 0) + n
    return native, python


def small_resnet_input(shape, layout, dtype):
    if layout == "strided":  # every other column of a wider batch: no contiguous layout
        return rand(*shape[:-1], shape[-1] * 2, dtype=dtype)[..., ::2]
    x = rand(*shape, dtype=dtype)
    return x.contiguous(memory_format=torch.channels_last) if layout == "channels_last" else x


@pytest.mark.parametrize("dtype,norm", [(torch.float32, True), (torch.float32, False), (torch.bfloat16, False),
                                        ("autocast", True)])
@pytest.mark.parametrize("shape", [(2, 3, 32, 32), (3, 3, 23, 30)])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
def test_small_resnet_training_step_through_torch_compile(dtype, norm, shape, layout):
    """A training step of a small ResNet through torch.compile(backend="wick"):
    the forward's convolutions, max pooling and head and the backward's
    convolution_backward, max pooling backward and matmuls are all native
    extern calls (batch norm, ReLU, the loss and adaptive pooling are
    kernels); loss and gradients equal eager's. A bfloat16 model is tried
    without batch norm: its CPU kernel's statistics dtype differs from the
    meta function's and wick runs that forward eagerly (a recorded reason).
    Under bfloat16 autocast (float32 parameters, resnet50's training on the
    H200) 16-bit batch norm stays extern, a Python call (no shim function)."""
    import copy

    from wick import backends

    torch._dynamo.reset()
    backends.fallback_reasons.clear()
    backends.compiled_graphs.clear()
    torch.manual_seed(0)
    autocast = dtype == "autocast"
    dtype = torch.float32 if autocast else dtype
    model = SmallResNet(norm).to(dtype)
    twin = copy.deepcopy(model)
    x = small_resnet_input(shape, layout, dtype)
    target = torch.randint(0, 10, (shape[0],), generator=torch.Generator().manual_seed(1))
    compiled = torch.compile(twin, backend="wick")

    def step(m):
        with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(m(x), target)
        loss.backward()
        return loss

    step(compiled)  # AOTAutograd's first call runs under a dispatch mode of its own: Python calls
    twin.zero_grad()
    twin.load_state_dict(model.state_dict())  # batch norm's running statistics as before the first step
    native_calls()
    got = step(compiled)
    profile = C.host_profile(True)
    want = step(model)
    assert not backends.fallback_reasons, backends.fallback_reasons
    native, python = extern_calls_per_step()
    # channels-last input: flatten's backward of the channels-last pooled
    # activations is a copy into an as_strided_scatter, which the shim lacks
    allowed = {"aten.copy.default", "aten.as_strided_scatter.default"} if layout == "channels_last" else set()
    if autocast:
        # the forward's batch norm updates the running buffers in place, its
        # counter too (backends.py _StatsInPlace, plan_counters)
        allowed |= {"aten._native_batch_norm_legit.default", "aten.native_batch_norm_backward.default",
                    "aten._foreach_add_.Scalar"}
    assert native >= 10 and set(python) <= allowed, backends.compiled_graphs
    assert profile.get("extern_native", (0, 0.0))[0] == native
    assert profile.get("extern", (0, 0.0))[0] == sum(python.values())
    tol = {"rtol": 3e-2, "atol": 3e-2} if dtype == torch.bfloat16 or autocast else {"rtol": 1e-4, "atol": 1e-4}
    torch.testing.assert_close(got, want, **tol)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name, **tol)
    for (name, b), c in zip(model.named_buffers(), twin.buffers()):
        torch.testing.assert_close(c, b, msg=name, **tol)


def test_training_ops_keep_the_python_call_under_grad_mode_and_a_dispatch_mode():
    x, w, b, *rest = conv_case("2d")
    gy = rand(2, 5, 8, 7, seed=5)
    bwd = one_extern(aten.convolution_backward.default, [gy, x, w], (X(0), X(1), X(2), [5], *rest, [True] * 3),
                     picks=(0, 1, 2), metas=[meta(x), meta(w), meta(b)])
    want = aten.convolution_backward.default(gy, x, w, [5], *rest, [True] * 3)
    y, idx = aten.max_pool2d_with_indices.default(x, [3, 3], [2, 2], [1, 1])
    pool = one_extern(aten.max_pool2d_with_indices.default, [x], (X(0), [3, 3], [2, 2], [1, 1]),
                      picks=(0, 1), metas=[meta(y), meta(idx)])

    with torch.no_grad(), Seen() as mode:
        got = bwd(gy, x, w)
        got_pool = pool(x)
    assert aten.convolution_backward.default in mode.ops and aten.max_pool2d_with_indices.default in mode.ops
    assert native_calls() == 0
    for k in range(3):
        torch.testing.assert_close(got[2 * k], want[k], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_pool[0], y)
    torch.testing.assert_close(got_pool[2], idx)
    # grad mode on: autograd must see the op (an input that requires grad)
    xg = x.clone().requires_grad_()
    out = pool(xg)[0]
    assert native_calls() == 0 and out.requires_grad
    out.sum().backward()
    torch.testing.assert_close(xg.grad, aten.max_pool2d_with_indices_backward.default(
        torch.ones_like(y), x, [3, 3], [2, 2], [1, 1], [1, 1], False, idx))
    with torch.no_grad():
        bwd(gy, x, w)
        pool(x)
    assert native_calls() == 2
