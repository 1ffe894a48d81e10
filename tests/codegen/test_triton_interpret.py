"""The Triton backend's generated kernels, run by Triton's interpreter on CPU
tensors (TRITON_INTERPRET=1, WICK_TRITON=interpret) and compared with eager
PyTorch: pointwise chains over views (transposed, sliced, expanded inputs),
each reduction kind over every axis, persistent and looped reductions,
row groups (softmax, log_softmax, layer_norm: several phases in one kernel),
fused epilogues, 16-bit loads/stores with float32 math, integer and bool
arithmetic, empty and 0-d tensors. The same source is what the GPU compiles
(tests/gpu run it there)."""
import math
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton")

import wick._C as C  # noqa: E402

# Triton decides at import whether its own library functions are interpreted,
# and that is for the whole process: so these tests run in a child process
# with the interpreter on, leaving this one able to compile real kernels.
CHILD = os.environ.get("WICK_TRITON_INTERPRET_CHILD") == "1"


@pytest.mark.skipif(CHILD, reason="inside the child")
def test_interpreter_suite_in_a_child_process():
    env = dict(os.environ, TRITON_INTERPRET="1", WICK_TRITON="interpret", WICK_TRITON_INTERPRET_CHILD="1")
    r = subprocess.run([sys.executable, "-m", "pytest", os.path.abspath(__file__), "-p", "no:warnings",
                        "-p", "no:cacheprovider"], env=env, capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-4000:]
    assert " passed" in r.stdout and " failed" not in r.stdout, r.stdout[-2000:]


child_only = pytest.mark.skipif(not CHILD, reason="runs in the interpreter child process")


def run(build, *tensors):
    g = C.Graph()
    ids = [g.input_like(t) for t in tensors]
    for o in build(g, *ids):
        g.output(o)
    cg = g.compile()
    if cg.nkernels:
        assert "@triton.jit" in cg.describe()["source"], "the Triton target was not used"
    return cg(*tensors)


def close(got, want, rtol=1e-5, atol=1e-5):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.is_floating_point():
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        assert torch.equal(got, want), (got, want)


def rand(shape, dtype=torch.float32, seed=0, layout="contig"):
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    if layout == "transposed" and len(shape) >= 2:
        return rand(shape[::-1], dtype, seed).permute(*range(len(shape) - 1, -1, -1))
    if layout == "sliced" and len(shape) >= 1:
        return rand(shape[:-1] + (shape[-1] * 2,), dtype, seed)[..., ::2]
    if layout == "expanded" and len(shape) >= 2:
        return rand((1,) + shape[1:], dtype, seed).expand(shape)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) < 0.5
    if not dtype.is_floating_point:
        return torch.randint(-50, 50, shape, generator=gen, dtype=dtype)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * 2).to(dtype)


@child_only
@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced", "expanded"])
@pytest.mark.parametrize("shape", [(33, 70), (4, 5, 6), (0, 7), ()])
def test_pointwise_chain_over_views(layout, shape):
    x, y = rand(shape, layout=layout), rand(shape[-1:] if shape else (), seed=1)

    def build(g, a, b):
        s = g.op("add", [g.op("mul", [a, g.scalar(2.0)]), b])
        return [g.op("sin", [g.op("relu", [s])]), g.op("gt", [a, b]), g.op("where", [g.op("gt", [a, b]), a, b])]

    got = run(build, x, y)
    s = x * 2.0 + y
    close(got[0], torch.relu(s).sin())
    close(got[1], x > y)
    close(got[2], torch.where(x > y, x, y))


@child_only
@pytest.mark.parametrize("n", [1, 7, 40])
def test_creation_ops_native_on_the_triton_target(n):
    """arange, full, zeros/ones(_like), tril and triu read no index, so the
    ATen importer makes them kernels on the Triton target too (a causal
    mask and positions as a decoder builds them); indexing ops stay extern
    there (an out-of-range index must raise)."""
    from wick import backends

    torch._dynamo.reset()
    backends.fallback_reasons.clear()
    backends.compiled_graphs.clear()

    def f(x, ids):
        pos = torch.arange(x.shape[1], dtype=torch.int64)
        mask = torch.full((x.shape[1], x.shape[1]), float("-inf")).triu(1)
        keep = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        scores = x.unsqueeze(-1) * x.unsqueeze(-2) + mask
        half = torch.arange(0.5, 0.5 + 0.25 * x.shape[1], 0.25)[: x.shape[1]]
        picked = torch.embedding(x, ids)  # an indirect load: stays an extern call here
        return (scores.masked_fill(~keep, 0.0).sum(-1) + pos * half + torch.zeros_like(x),
                torch.ones_like(ids) * 3, picked)

    x = rand((n, n))
    ids = torch.randint(0, n, (3, 2), generator=torch.Generator().manual_seed(n))
    want = f(x, ids)
    got = torch.compile(f, backend="wick")(x, ids)
    assert not backends.fallback_reasons, backends.fallback_reasons
    for g_, w_ in zip(got, want):
        close(g_, w_, 1e-5, 1e-5)
    externs = {}
    for info in backends.compiled_graphs:
        for k, v in info["externs"].items():
            externs[k] = externs.get(k, 0) + v
    assert set(externs) == {"aten.embedding.default"}, externs


@child_only
def test_convolutional_training_step_channels_last(monkeypatch, capfd):
    """A stem of resnet (convolution, batch norm, ReLU, max pooling) and a
    1x1 convolution with its norm, trained through wick's own autodiff with
    the channels-last pass, every kernel run by the interpreter. The pooling's
    recomputed input gradient comes back channels-last, so the first norm's
    backward sums read one order: column reductions of 18432 rows, split
    across programs with their siblings in one loop (they were a row group
    with the kernel converting the weight and bias gradients, whose function
    loops in a handful of programs). Gradients as eager's."""
    import copy

    import wick
    from wick import _autodiff

    monkeypatch.setenv("WICK_CHANNELS_LAST", "1")
    monkeypatch.setenv("WICK_LOG", "code")
    C.env_reload()
    try:
        torch.manual_seed(0)
        eager = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1, bias=False), torch.nn.BatchNorm2d(64),
                                    torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1),
                                    torch.nn.Conv2d(64, 64, 1, bias=False), torch.nn.BatchNorm2d(64),
                                    torch.nn.ReLU())
        net = copy.deepcopy(eager)
        wick.reset()
        _autodiff.reset_stats()
        x = rand((2, 3, 96, 96)).contiguous(memory_format=torch.channels_last)
        w = rand((2, 64, 48, 48), seed=3)
        got, want = wick.compile(net)(x), eager(x)
        (got * w).sum().backward()
        (want * w).sum().backward()
    finally:
        monkeypatch.undo()
        C.env_reload()
    assert _autodiff.stats()["graphs"] == 1 and _autodiff.stats()["fallbacks"] == 0, _autodiff.stats()
    log = capfd.readouterr().err
    assert "column reduction {VIEW WHERE SUM}, 64 x 18432 iterations, split" in log, log[-3000:]
    assert "(siblings: one loop)" in log
    close(got.detach(), want.detach(), 1e-4, 1e-4)
    scale = max(float(q.grad.abs().max()) for q in eager.parameters())
    for (name, p), q in zip(net.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-5 * scale, msg=name)


@child_only
@pytest.mark.parametrize("name", ["bert", "llama"])
def test_transformers_training_step_through_torch_compile(name):
    # whole model graphs from PyTorch's capture, forward and backward, every
    # kernel Triton source run by the interpreter: breadth real models need
    import copy

    transformers = pytest.importorskip("transformers")
    from wick import backends

    torch._dynamo.reset()
    backends.fallback_reasons.clear()
    backends.compiled_graphs.clear()
    torch.manual_seed(0)
    if name == "bert":
        cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=48, vocab_size=64, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0)
        model = transformers.BertForMaskedLM(cfg)
    else:
        cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                       num_attention_heads=2, num_key_value_heads=1)
        model = transformers.LlamaForCausalLM(cfg)
    twin = copy.deepcopy(model)
    ids = torch.randint(0, 64, (2, 8))
    want = model(input_ids=ids, labels=ids).loss
    want.backward()
    got = torch.compile(twin, backend="wick")(input_ids=ids, labels=ids).loss
    got.backward()
    assert not backends.fallback_reasons, backends.fallback_reasons
    assert len(backends.compiled_graphs) >= 2  # a forward and a backward graph
    assert all(info["kernels"] for info in backends.compiled_graphs)
    close(got.detach(), want.detach(), 1e-4, 1e-4)
    for (pname, p), q in zip(model.named_parameters(), twin.parameters()):
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=pname)


@child_only
def test_math_functions():
    x = rand((257,)) * 0.4
    ops = ["exp", "log", "sqrt", "tanh", "sigmoid", "erf", "erfc", "log1p", "expm1", "atan", "floor", "ceil",
           "round", "trunc", "sign", "rsqrt", "gelu", "silu", "asinh", "sinh", "cos", "erfinv",
           "exp2", "log2", "log10"]
    eager = {"gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu}

    def build(g, a):
        pos = g.op("add", [g.op("abs", [a]), g.scalar(0.01)])
        outs = []
        for op in ops:
            arg = pos if op in ("log", "sqrt", "rsqrt", "log2", "log10") else a
            outs.append(g.op(op, [arg]))
        outs.append(g.op("atan2", [a, pos]))
        outs.append(g.op("pow", [pos, a]))
        outs.append(g.op("fmod", [a, g.scalar(0.3)]))
        outs.append(g.op("remainder", [a, g.scalar(-0.3)]))
        outs.append(g.op("floor_divide", [a, g.scalar(0.3)]))
        return outs

    got = run(build, x)
    pos = x.abs() + 0.01
    for op, r in zip(ops, got):
        arg = pos if op in ("log", "sqrt", "rsqrt", "log2", "log10") else x
        fn = eager.get(op) or getattr(torch, op)
        close(r, fn(arg), rtol=1e-4, atol=1e-5)
    k = len(ops)
    close(got[k], torch.atan2(x, pos), rtol=1e-4, atol=1e-5)
    close(got[k + 1], torch.pow(pos, x), rtol=1e-4, atol=1e-5)
    close(got[k + 2], torch.fmod(x, 0.3), rtol=1e-4, atol=1e-5)
    close(got[k + 3], torch.remainder(x, -0.3), rtol=1e-4, atol=1e-5)
    close(got[k + 4], torch.floor_divide(x, 0.3))


@child_only
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8])
def test_integer_arithmetic(dtype):
    a, b = rand((6, 9), dtype), rand((9,), dtype, seed=2)
    b = torch.where(b == 0, torch.ones_like(b), b)

    def build(g, x, y):  # integer division: by constants (graphs refuse tensor divisors)
        return [g.op("floor_divide", [x, g.scalar(7)]), g.op("remainder", [x, g.scalar(-3)]),
                g.op("fmod", [x, g.scalar(-7)]),
                g.op("bitwise_xor", [x, y]), g.op("mul", [g.op("add", [x, y]), x]), g.op("abs", [x]),
                g.op("maximum", [x, y]), g.op("pow", [x, g.scalar(3)])]

    got = run(build, a, b)
    want = [torch.floor_divide(a, 7), torch.remainder(a, -3), torch.fmod(a, -7), a ^ b, (a + b) * a, a.abs(),
            torch.maximum(a, b), a.pow(3)]
    for r, w in zip(got, want):
        close(r, w)


@child_only
def test_bool_logic():
    a, b = rand((5, 8), torch.bool), rand((5, 8), torch.bool, seed=3)
    got = run(lambda g, x, y: [g.op("logical_and", [x, y]), g.op("logical_not", [x]), g.op("bitwise_or", [x, y]),
                               g.op("logical_xor", [x, y])], a, b)
    close(got[0], a & b)
    close(got[1], ~a)
    close(got[2], a | b)
    close(got[3], a ^ b)


@child_only
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16bit_loads_stores_float32_math(dtype):
    x, y = rand((17, 40), dtype), rand((40,), dtype, seed=4)
    got = run(lambda g, a, b: [g.op("mul", [g.op("tanh", [a]), b]), g.op("sum", [a], dims=1),
                               g.op("convert", [g.op("add", [a, b])], dtype="float32"),
                               g.op("softmax", [a], dims=1)], x, y)
    close(got[0], torch.tanh(x) * y, rtol=1e-2, atol=1e-2)
    close(got[1], x.sum(1), rtol=1e-2, atol=1e-2)
    close(got[2], (x + y).float(), rtol=1e-2, atol=1e-2)
    close(got[3], torch.softmax(x, 1), rtol=1e-2, atol=1e-3)


@child_only
@pytest.mark.parametrize("src", [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool, torch.float64])
@pytest.mark.parametrize("dst", ["bfloat16", "float16"])
def test_casts_to_16bit_round_through_float32(src, dst):
    # what the op_db sweep under the interpreter found: int -> bfloat16 came
    # out as raw bits (masked.mean, nanmean: a count divides a bfloat16 sum).
    # The interpreter rounds float32 -> bfloat16 toward zero (a GPU rounds to
    # nearest even, as PyTorch does), so bfloat16 is compared within one ulp
    big = torch.tensor([2**24 + 2**16 + 1, -(2**24 + 3 * 2**16 + 1), 2**30 + 2**22 + 1], dtype=torch.float64)
    x = rand((5, 6), src, seed=7) if src != torch.uint8 else rand((5, 6), torch.int32, seed=7).abs().to(src)
    if src in (torch.int64, torch.int32, torch.float64):
        x = torch.cat([x.flatten(), big.to(src)]).reshape(3, 11)
    got = run(lambda g, a: [g.op("convert", [a], dtype=dst),
                            g.op("mul", [g.op("convert", [a], dtype=dst), g.scalar(0.5)])], x)
    want = x.to(getattr(torch, dst))
    ulp = 2.0**-7 if dst == "bfloat16" else 0.0
    close(got[0], want, rtol=ulp, atol=0)
    close(got[1], want * 0.5, rtol=ulp, atol=0)


@child_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
@pytest.mark.parametrize("dims", [(0,), (1,), (2,), (0, 2), (0, 1, 2)])
def test_reduction_kinds_over_each_axis(dtype, dims):
    x = rand((6, 5, 7), dtype, layout="transposed")
    if dtype == torch.bool:
        ops = ["any", "all", "amax"]
    elif dtype.is_floating_point:
        ops = ["sum", "mean", "amax", "amin", "prod", "var", "std", "logsumexp"]
    else:
        ops = ["sum", "amax", "amin", "prod"]
    got = run(lambda g, a: [g.op(op, [a], dims=dims, keepdim=(k % 2 == 0)) for k, op in enumerate(ops)], x)
    for k, (op, r) in enumerate(zip(ops, got)):
        keep = k % 2 == 0
        if op in ("any", "all"):
            w = getattr(torch, op)(x, dim=dims, keepdim=keep) if len(dims) > 1 or True else None
        elif op in ("var", "std"):
            w = getattr(torch, op)(x, dim=dims, keepdim=keep)
        else:
            w = getattr(torch, op)(x, dims, keepdim=keep) if op != "prod" else _prod(x, dims, keep)
        close(r, w, rtol=1e-4, atol=1e-4)


def _prod(x, dims, keep):
    for d in sorted(dims, reverse=True):
        x = x.prod(d, keepdim=True)
    return x if keep else x.squeeze(dims) if dims else x


@child_only
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reductions(op):
    x = rand((9, 13))
    x[2, 5] = x[2, 7] = x[2].max() + 1  # ties: the first index wins
    got = run(lambda g, a: [g.op(op, [a], dims=1), g.op(op, [a], dims=0)], x)
    close(got[0], getattr(torch, op)(x, 1))
    close(got[1], getattr(torch, op)(x, 0))


@child_only
def test_nan_propagates_through_max_and_min():
    x = rand((4, 50))
    x[1, 7] = math.nan
    got = run(lambda g, a: [g.op("amax", [a], dims=1), g.op("amin", [a], dims=1),
                            g.op("maximum", [a, g.scalar(0.0)])], x)
    close(got[0], x.amax(1))
    close(got[1], x.amin(1))
    close(got[2], torch.maximum(x, torch.tensor(0.0)))


@child_only
@pytest.mark.parametrize("cols", [70, 5000])  # persistent, looped (> 4096)
def test_row_groups_softmax_log_softmax_layer_norm(cols):
    x, w, b = rand((6, cols)), rand((cols,), seed=5), rand((cols,), seed=6)
    got = run(lambda g, a, ww, bb: [g.op("softmax", [a], dims=1), g.op("log_softmax", [a], dims=1),
                                    g.op("layer_norm", [a, ww, bb], dims=(1,), eps=1e-5)], x, w, b)
    close(got[0], torch.softmax(x, 1), rtol=1e-4, atol=1e-6)
    close(got[1], torch.log_softmax(x, 1), rtol=1e-4, atol=1e-4)
    close(got[2], torch.nn.functional.layer_norm(x, (cols,), w, b, 1e-5), rtol=1e-4, atol=1e-4)


def residual_layer_norm(g, a, c, ww, bb):
    h = g.op("add", [a, c])
    return [h, g.op("layer_norm", [h, ww, bb], dims=(1,), eps=1e-5)]


def residual_rms_norm(g, a, c, ww, bb):
    h = g.op("add", [a, c])
    hf = g.op("convert", [h], dtype="float32")
    ms = g.op("mean", [g.op("mul", [hf, hf])], dims=[1], keepdim=True)
    n = g.op("mul", [hf, g.op("rsqrt", [g.op("add", [ms, g.scalar(1e-5)])])])
    return [h, g.op("mul", [ww, g.op("convert", [n], dtype=g.value(a)["dtype"])])]


@child_only
@pytest.mark.parametrize("layout", ["contig", "transposed"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cols", [768, 5000])  # persistent, looped (> 4096)
@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_residual_sum_is_the_norms_first_phase(norm, cols, dtype, layout):
    """h = x + y, returned and normalised: one function whose first phase
    stores h and whose norm phases take it from registers (persistent) or
    read it back after a barrier (looped). The norm normalises h as stored:
    16-bit h is rounded first, as eager does (the interpreter rounds toward
    zero, so h is compared within one ulp and the norm with eager's norm of
    the h wick stored)."""
    x, y = rand((32, cols), dtype, layout=layout), rand((32, cols), dtype, seed=2)
    w, b = rand((cols,), dtype, seed=5) * 0.5 + 1, rand((cols,), dtype, seed=6)
    build = residual_layer_norm if norm == "layer_norm" else residual_rms_norm
    g = C.Graph()
    ids = [g.input_like(t) for t in (x, y, w, b)]
    for o in build(g, *ids):
        g.output(o)
    cg = g.compile()
    h, out = cg(x, y, w, b)
    kernels = [ln for ln in cg.describe()["summary"].splitlines() if ln.startswith("kernel ")]
    assert kernels[0].startswith("kernel 0: pointwise {ADD} [32, %d]" % cols), kernels
    assert all("(row-fused into kernel 0)" in ln for ln in kernels[1:]), kernels
    src = cg.describe()["source"]
    assert src.count("@triton.jit\ndef wick_") == 1, src
    if cols <= 4096:
        assert "tl.load(b4 " not in src and "tl.debug_barrier()" not in src, src
    else:
        # one barrier, before the first phase that reads h back; the later ones read what it made visible
        assert "tl.load(b4 " in src and src.count("tl.debug_barrier()") == 1, src
    ulp = 2.0**-7 if dtype == torch.bfloat16 else 0.0
    close(h, x + y, rtol=ulp, atol=0)
    if norm == "layer_norm":
        want = torch.nn.functional.layer_norm(h, (cols,), w, b, 1e-5)
    else:
        hf = h.float()
        want = w * (hf * torch.rsqrt(hf.pow(2).mean(1, keepdim=True) + 1e-5)).to(dtype)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    close(out, want, rtol=tol, atol=tol)


@child_only
def test_norms_of_slices_of_the_residual_sum():
    """Layer norms of every other element and of the second half of each
    row of h: lanes other than the ones that stored, read back through
    memory after a barrier (one: no phase stores h after it) in the
    persistent group."""
    x, y, w, b = rand((32, 768)), rand((32, 768), seed=2), rand((384,), seed=5), rand((384,), seed=6)

    def build(g, a, c, ww, bb):
        h = g.op("add", [a, c])
        every_other = g.op("VIEW", [h], ints=[2, 32, 384, 768, 2, 0])
        second_half = g.op("VIEW", [h], ints=[2, 32, 384, 768, 1, 384])
        return [h, g.op("layer_norm", [every_other, ww, bb], dims=(1,), eps=1e-5),
                g.op("layer_norm", [second_half, ww, bb], dims=(1,), eps=1e-5)]

    g = C.Graph()
    ids = [g.input_like(t) for t in (x, y, w, b)]
    for o in build(g, *ids):
        g.output(o)
    cg = g.compile()
    got = cg(x, y, w, b)
    src = cg.describe()["source"]
    assert src.count("@triton.jit\ndef wick_") == 1 and src.count("tl.debug_barrier()") == 1, src
    h = x + y
    close(got[0], h)
    close(got[1], torch.nn.functional.layer_norm(h[:, ::2], (384,), w, b, 1e-5), rtol=1e-4, atol=1e-4)
    close(got[2], torch.nn.functional.layer_norm(h[:, 384:], (384,), w, b, 1e-5), rtol=1e-4, atol=1e-4)


@child_only
def test_residual_layer_norm_zero_rows():
    x, y, w, b = rand((0, 768)), rand((0, 768), seed=2), rand((768,), seed=5), rand((768,), seed=6)
    got = run(residual_layer_norm, x, y, w, b)
    close(got[0], x + y)
    close(got[1], torch.nn.functional.layer_norm(x + y, (768,), w, b, 1e-5))


@child_only
def test_fused_epilogue_and_prologue():
    x, y = rand((12, 300)), rand((12, 300), seed=7)

    def build(g, a, b):
        s = g.op("mul", [a, b])
        m = g.op("amax", [s], dims=1, keepdim=True)
        c = g.op("exp", [g.op("sub", [s, m])])
        return [g.op("div", [c, g.op("sum", [c], dims=1, keepdim=True)]),
                g.op("add", [g.op("sum", [s], dims=0), g.scalar(1.0)])]

    got = run(build, x, y)
    s = x * y
    c = (s - s.amax(1, keepdim=True)).exp()
    close(got[0], c / c.sum(1, keepdim=True))
    close(got[1], s.sum(0) + 1.0, rtol=1e-4, atol=1e-4)


@child_only
@pytest.mark.parametrize("shape,dims", [((3, 10000), (1,)), ((5000, 3), (0,)), ((20000,), (0,)),
                                        ((2, 40000), (1,)), ((40000,), (0,)),  # split
                                        ((20000, 24), (0,)), ((17000, 200), (0,)),  # column split
                                        ((4100, 96), (0,))])  # column split, a short last chunk
def test_large_reductions(shape, dims):
    x = rand(shape)
    x.view(-1)[7] = math.nan if x.numel() > 30000 else x.view(-1)[7]  # NaN through the partials
    got = run(lambda g, a: [g.op("sum", [a], dims=dims), g.op("amax", [a], dims=dims),
                            g.op("mean", [a], dims=dims),
                            g.op("add", [g.op("sum", [g.op("abs", [a])], dims=dims), g.scalar(1.0)])], x)
    close(got[0], x.sum(dims), rtol=1e-4, atol=1e-3)
    close(got[1], x.amax(dims))
    close(got[2], x.mean(dims), rtol=1e-4, atol=1e-5)
    close(got[3], x.abs().sum(dims) + 1.0, rtol=1e-4, atol=1e-3)


@child_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,dim", [((20000, 24), 0), ((3000, 40), 0), ((6, 5000), 1),  # column: split, looped
                                       ((9, 300), 1), ((33, 7), 0),  # row (persistent), a short column
                                       ((2, 40000), 1), ((0, 5), 1)])  # a split row, no outputs
@pytest.mark.parametrize("layout", ["contig", "transposed"])
def test_sibling_reductions_share_one_loop(shape, dim, dtype, layout):
    """Reductions over the same loops that do not read each other's results
    (batch norm's backward: sum(dy) and sum(dy * x) per channel over a
    channels-last gradient) are one function whose accumulators share the
    loop over r, each address loaded once; a reduction that reads an
    earlier one's result (the variance after the mean) stays a kernel of its
    own. Values of every kind through both (split partials of each sibling
    side by side in one scratch buffer)."""
    dy, x = rand(shape, dtype, seed=1, layout=layout), rand(shape, dtype, seed=2, layout=layout)

    def build(g, a, b):
        prod = g.op("mul", [a, b])
        mean = g.op("mean", [b], dims=dim, keepdim=True)
        centred = g.op("sub", [b, mean])
        return [g.op("sum", [a], dims=dim), g.op("sum", [prod], dims=dim), g.op("amax", [prod], dims=dim),
                mean, g.op("mean", [g.op("mul", [centred, centred])], dims=dim)]

    got = run(build, dy, x)
    g = C.Graph()
    outs = build(g, *[g.input_like(t) for t in (dy, x)])
    for o in outs:
        g.output(o)
    src = g.compile().describe()["source"]
    if dy.numel():
        # one function: siblings sharing a loop, or (the rows contiguous in a
        # transposed input) the phases of a row group reading each row once
        assert "siblings: one loop" in src or (layout == "transposed" and ", row group" in src), src[:3000]
    d64, x64 = dy.double(), x.double()
    want = [d64.sum(dim), (d64 * x64).to(dtype).double().sum(dim), (dy * x).amax(dim) if dy.numel() else None,
            x64.mean(dim, keepdim=True), x64.var(dim, unbiased=False)]
    for r, w in zip(got, want):
        if w is not None:
            # 16-bit results: each rounded once, at most one unit in the last place of the largest
            scale = float(w.abs().max()) if w.numel() else 0.0
            tol = dict(rtol=1e-4, atol=1e-3) if dtype == torch.float32 else dict(rtol=8e-3, atol=scale / 64)
            close(r, w.to(dtype), **tol)


@child_only
@pytest.mark.parametrize("shape,dims", [((2, 40000), (1,)), ((20000, 24), (0,)), ((6000, 40), (0,))])  # row and column splits
def test_large_16bit_reductions(shape, dims):
    # partials of 16-bit data are kept in float32 (Triton's max of two
    # bfloat16 blocks is float32: a bfloat16 scratch made the final kernel's
    # reduce fail to compile on the H200)
    x = rand(shape, torch.bfloat16)
    got = run(lambda g, a: [g.op("amax", [a], dims=dims), g.op("sum", [a], dims=dims), g.op("amin", [a], dims=dims)], x)
    close(got[0], x.amax(dims))
    close(got[1], x.sum(dims), rtol=2e-2, atol=2e-1)
    close(got[2], x.amin(dims))


@child_only
def test_empty_reductions_and_scalars():
    e = rand((0, 4))
    got = run(lambda g, a: [g.op("sum", [a], dims=0), g.op("sum", [a], dims=1), g.op("mean", [a], dims=0)], e)
    close(got[0], e.sum(0))
    close(got[1], e.sum(1))
    close(got[2], e.mean(0))
    z = rand(())
    got = run(lambda g, a: [g.op("sum", [a]), g.op("exp", [a])], z)
    close(got[0], z.sum())
    close(got[1], z.exp())


@child_only
def test_compiled_kernels_are_cached_on_disk(tmp_path):
    # the interpreter path writes the module into the cache; a second compile
    # of the same graph reuses the file (content-addressed)
    x = rand((8, 8))
    run(lambda g, a: [g.op("neg", [a])], x)
    import os

    d = os.path.join(C.cache_dir(), "triton")
    mods = [f for f in os.listdir(d) if f.endswith(".py")]
    assert mods
    run(lambda g, a: [g.op("neg", [a])], x)
    assert sorted(f for f in os.listdir(d) if f.endswith(".py")) == sorted(mods)


@child_only
def test_indirect_loads_and_creation_ops():
    """INDEX/GATHER (indirect loads: an index expression names a loaded
    value), ARANGE, FULL, TRIL/TRIU, fused with pointwise work and a
    reduction over gathered rows. In-range indices only: Triton clamps an
    out-of-range index (asserting only in its debug mode), so the ATen
    importer keeps indexing native on CPU graphs (lower.h)."""
    g = torch.Generator().manual_seed(3)
    w = rand((12, 7))
    ids = torch.randint(-12, 12, (3, 4), generator=g)
    i32 = torch.randint(0, 7, (5,), generator=g).to(torch.int32)
    gi = torch.randint(0, 7, (12, 3), generator=g)

    def build(gr, wi, ii, jj, gg):
        rows = gr.op("INDEX", [wi, ii], ints=[1, 0])  # [3, 4, 7], negative indices wrap
        cols = gr.op("INDEX", [wi, jj], ints=[0, 1])  # [12, 5], int32 indices
        return [gr.op("mul", [rows, gr.scalar(2.0)]), gr.op("sum", [rows], dims=(2,)), gr.op("exp", [cols]),
                gr.op("GATHER", [wi, gg], ints=[1])]

    got = run(build, w, ids, i32, gi)
    close(got[0], w[ids] * 2)
    close(got[1], w[ids].sum(2), rtol=1e-4, atol=1e-4)
    close(got[2], w[:, i32.long()].exp())
    close(got[3], torch.gather(w, 1, gi))
    s = rand((2, 5, 5))

    def build2(gr, si):
        ones = gr.op("FULL", [gr.scalar(True)], ints=[5, 5], dtype=torch.bool)
        keep = gr.op("TRIL", [ones], ints=[0])
        masked = gr.op("MASKED_FILL", [si, gr.op("LOGICAL_NOT", [keep]), gr.scalar(-1e9)])
        return [masked, gr.op("TRIU", [si], ints=[1]),
                gr.op("ARANGE", [gr.scalar(0.5), gr.scalar(0.25)], ints=[9], dtype=torch.float32)]

    x, src = rand((6, 5)), rand((4, 5), seed=4)
    si = torch.randint(0, 6, (4, 5), generator=g)  # repeated indices
    got = run(lambda gr, xi, ii, ss: [gr.op("SCATTER", [xi, ii, ss], ints=[0, 1, 0]),
                                      gr.op("SCATTER", [xi, ii, ss], ints=[0, 0, 0])], x, si, src)
    close(got[0], x.scatter_add(0, si, src), rtol=1e-5, atol=1e-5)
    close(got[1], x.scatter(0, si, src))
    # an index into arange's values at loaded positions (no read through the index)
    pos = torch.randint(-9, 9, (4, 3), generator=g)
    got = run(lambda gr, pi: [gr.op("INDEX", [gr.op("ARANGE", [gr.scalar(2), gr.scalar(3)], ints=[9],
                                                       dtype=torch.int64), pi], ints=[1, 0])], pos)
    close(got[0], torch.arange(2, 29, 3)[pos])
    got = run(build2, s)
    close(got[0], s.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), -1e9))
    close(got[1], s.triu(1))
    close(got[2], torch.arange(0.5, 2.75, 0.25))


@child_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,cols", [(64, 96), (40, 5000)])  # persistent, looped rows
def test_layer_norm_input_gradient_runs_in_the_rows_function(rows, cols, dtype):
    """The layer norm backward of test_row_group_hoist.py on the Triton
    target: its input gradient, created after the column sums, runs as a
    phase of the row sums' group, and the values match eager's."""
    from test_row_group_hoist import check, compile_and_run, eager, inputs

    tensors = inputs(rows, cols, dtype, "transposed")
    got, kernels = compile_and_run(tensors, False)
    check(got, eager(*tensors))
    assert sum("row-fused" in k for k in kernels) == 2 and len(kernels) == 5, kernels


# ---- the same kernels through Triton's real compiler (no GPU needed) --------

COMPILE_CASES = {
    "pointwise_views": (lambda g, a, b: [g.op("sin", [g.op("relu", [g.op("add", [a, b])])]), g.op("gt", [a, b])],
                        lambda: (rand((33, 70), layout="transposed"), rand((70,)))),
    "bf16_math": (lambda g, a, b: [g.op("mul", [g.op("tanh", [a]), b]), g.op("erfinv", [g.op("mul", [a, g.scalar(0.1)])])],
                  lambda: (rand((17, 40), torch.bfloat16), rand((40,), torch.bfloat16))),
    "int_ops": (lambda g, a, b: [g.op("floor_divide", [a, g.scalar(7)]), g.op("remainder", [a, g.scalar(-3)]),
                                 g.op("pow", [a, g.scalar(3)]), g.op("bitwise_xor", [a, b])],
                lambda: (rand((6, 9), torch.int64), rand((9,), torch.int64))),
    "reductions": (lambda g, a: [g.op("sum", [a], dims=(0,)), g.op("amax", [a], dims=(1,)), g.op("prod", [a], dims=(2,)),
                                 g.op("argmax", [a], dims=1), g.op("var", [a], dims=(0, 2)), g.op("mean", [a])],
                   lambda: (rand((6, 5, 7)),)),
    "bool_int_reductions": (lambda g, a, b: [g.op("any", [a], dims=(1,)), g.op("all", [a], dims=(0,)),
                                             g.op("sum", [b], dims=(1,))],
                            lambda: (rand((6, 9), torch.bool), rand((6, 9), torch.int64))),
    "row_groups": (lambda g, a, w, b: [g.op("softmax", [a], dims=1), g.op("layer_norm", [a, w, b], dims=(1,), eps=1e-5)],
                   lambda: (rand((6, 768), torch.float16), rand((768,), torch.float16), rand((768,), torch.float16))),
    "looped_rows": (lambda g, a: [g.op("log_softmax", [a], dims=1), g.op("sum", [a], dims=(0,))],
                    lambda: (rand((4, 9000)),)),
    "split": (lambda g, a: [g.op("amax", [a], dims=(1,)), g.op("mean", [a]), g.op("any", [g.op("gt", [a, g.scalar(3.0)])])],
              lambda: (rand((3, 50000)),)),
    "column_split": (lambda g, a: [g.op("sum", [a], dims=(0,)), g.op("var", [a], dims=(0,)),
                                   g.op("amax", [a], dims=(0,))],
                     lambda: (rand((20000, 24), torch.bfloat16),)),
    "index_into_arange": (lambda g, i: [g.op("INDEX", [g.op("ARANGE", [g.scalar(0), g.scalar(1)], ints=[40],
                                                               dtype=torch.int64), i], ints=[1, 0])],
                          lambda: (torch.randint(-40, 40, (8, 3)),)),
    "indirect": (lambda g, w, i: [g.op("exp", [g.op("INDEX", [w, i], ints=[1, 0])]),
                                  g.op("sum", [g.op("INDEX", [w, i], ints=[1, 0])], dims=(1, 2))],
                 lambda: (rand((50, 64)), torch.randint(-50, 50, (8, 3)))),
}


@pytest.mark.skipif(CHILD, reason="compiles in the parent process")
@pytest.mark.parametrize("case", sorted(COMPILE_CASES))
def test_kernels_compile_for_sm90(case, monkeypatch):
    """Every generated kernel goes through Triton's
    compiler down to a cubin for sm_90 (the interpreter accepts things the
    compiler does not: shapes of constants, loop-carried types)."""
    from wick import _triton

    monkeypatch.setenv("WICK_TRITON", "interpret")  # Triton target for CPU tensors; nothing is launched
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    C.env_reload()
    try:
        build, make_inputs = COMPILE_CASES[case]
        g = C.Graph()
        tensors = make_inputs()
        ids = [g.input_like(t) for t in tensors]
        for o in build(g, *ids):
            g.output(o)
        cg = g.compile()
    finally:
        monkeypatch.undo()
        C.env_reload()
    src = cg.describe()["source"]
    path = _triton.write_module(C.cache_dir(), src)
    kernels = cg.triton_kernels
    assert kernels
    types = {"bool": "*i1", "uint8": "*u8", "int8": "*i8", "int16": "*i16", "int32": "*i32", "int64": "*i64",
             "float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32", "float64": "*fp64"}
    # the default config (and for the looped cases the last candidate too),
    # compiled in one parallel batch as the runtime does, then loaded from the cache
    every = case in ("looped_rows", "split", "column_split")
    jobs = [(k["name"], [types[t] for t in k["params"]], int(k["has_r"]), x, r, w)
            for k in kernels
            for x, r, w in sorted({tuple(k["configs"][0]), tuple(k["configs"][-1] if every else k["configs"][0])})]
    assert all(_triton.compile_batch(C.cache_dir(), path, "test", jobs, 90))
    for name, ptypes, has_r, x, r, w in jobs:
        cubin, sym, shared, warps, nparams = _triton.compile_kernel(C.cache_dir(), path, "test", name, ptypes, has_r,
                                                                   x, r, w, 90, 1)
        # a kernel identical but for its name to one compiled before shares its cubin (and symbol)
        assert cubin and warps == w and nparams >= len(ptypes)
        assert sym == name or _triton.kernel_identity(path, "test", name)[0] == "kernel"


@pytest.mark.skipif(CHILD, reason="compiles in the parent process")
@pytest.mark.parametrize("rows,cols,split", [(20000, 24, True), (17000, 200, True), (17000, 9000, False),
                                             (3000, 24, False), (12608, 768, True), (5000, 3072, True)])
def test_column_reduction_split_across_programs(rows, cols, split, monkeypatch):
    """A column reduction (contiguous along its outputs) with few blocks of
    outputs and a long reduced extent, as batch norm's per-channel statistics
    over channels-last activations are, is split across programs: a
    partials kernel over (block of columns, chunk of rows), then a kernel
    reducing each column's partials (values: test_large_reductions)."""
    monkeypatch.setenv("WICK_TRITON", "interpret")  # Triton target for CPU tensors; nothing is launched
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    C.env_reload()
    try:
        g = C.Graph()
        a = g.input_like(rand((rows, cols)))
        g.output(g.op("sum", [a], dims=(0,)))
        cg = g.compile()
    finally:
        monkeypatch.undo()
        C.env_reload()
    src = cg.describe()["source"]
    assert ("column reduction" in src and "_final" in src) == split, src[:2000]
    if split:
        (part,) = [k for k in cg.triton_kernels if not k["name"].endswith("_final")]
        # every configuration's XBLOCK divides the padded column count the grid is made of
        padded = -(-cols // min(64, 1 << (cols - 1).bit_length())) * min(64, 1 << (cols - 1).bit_length())
        assert all(padded % x == 0 for x, _, _ in part["configs"]), part["configs"]


@pytest.mark.skipif(CHILD, reason="compiles in the parent process")
def test_split_reductions_final_kernels_have_their_own_identity(tmp_path, monkeypatch):
    """A reduction split across programs is two kernels, the partials' and
    `<name>_final`: each is indexed as a kernel of its own, so two layers'
    copies of the final kernel share one compile (ViT-B's backward compiled
    its 84 final kernels one by one before), and the partials kernel's
    identity does not take in the final kernel's text."""
    import re

    from wick import _triton

    monkeypatch.setenv("WICK_TRITON", "interpret")  # Triton target for CPU tensors; nothing is launched
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    C.env_reload()
    try:
        g = C.Graph()
        a = g.input_like(rand((20000, 24)))
        g.output(g.op("sum", [a], dims=(0,)))
        src = g.compile().describe()["source"]
    finally:
        monkeypatch.undo()
        C.env_reload()
    names = re.findall(r"^def (\w+_k\d+(?:_final)?)\(", src, re.M)
    assert len(names) == 2 and names[1] == names[0] + "_final", names
    entry = names[0].rsplit("_k", 1)[0]
    renamed = "wick_graph_0123456789abcdef"
    cache = str(tmp_path)
    paths = [_triton.write_module(cache, s) for s in (src, src.replace(entry, renamed))]
    ident = [[_triton.kernel_identity(p, "h", n.replace(entry, e)) for n in names]
             for p, e in zip(paths, (entry, renamed))]
    assert ident[0] == ident[1] and all(i[0] == "kernel" for i in ident[0])
    assert ident[0][0] != ident[0][1]
    # the partials kernel's identity is its own text: the same with the final kernel's text changed
    changed = src.rstrip("\n") + "\n    pass\n"
    other = _triton.write_module(cache, changed)
    assert _triton.kernel_identity(other, "h", names[0]) == ident[0][0]
    assert _triton.kernel_identity(other, "h", names[1]) != ident[0][1]


@pytest.mark.skipif(CHILD, reason="compiles in the parent process")
def test_kernels_differing_only_by_name_compile_once(tmp_path, monkeypatch):
    """A model's repeated layers give kernels that are the same text under
    other names (another entry, another position): they share one compile
    and one cubin; a kernel whose text differs in anything else does not."""
    import re

    from wick import _triton

    monkeypatch.setenv("WICK_TRITON", "interpret")  # Triton target for CPU tensors; nothing is launched
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    C.env_reload()
    try:
        g = C.Graph()
        tensors = (rand((40, 33)), rand((33,)))
        ids = [g.input_like(t) for t in tensors]
        g.output(g.op("sigmoid", [g.op("mul", [ids[0], ids[1]])]))
        g.output(g.op("sum", [g.op("exp", [ids[0]])], dims=(0,)))
        src = g.compile().describe()["source"]
    finally:
        monkeypatch.undo()
        C.env_reload()
    names = re.findall(r"^def (\w+_k\d+)\(", src, re.M)
    assert len(names) == 2
    entry = names[0].rsplit("_k", 1)[0]
    renamed = "wick_graph_0123456789abcdef"
    other = src.replace(entry, renamed)                      # the same kernels under other names
    changed = src.rstrip("\n") + "\n    pass\n"                # the last kernel's text differs
    assert changed != src
    cache = str(tmp_path)
    paths = [_triton.write_module(cache, s) for s in (src, other, changed)]
    ident = [[_triton.kernel_identity(p, "h", n.replace(entry, e)) for n in names]
             for p, e in zip(paths, (entry, renamed, entry))]
    assert ident[0] == ident[1] and ident[0][0][0] == "kernel"
    assert ident[0][0] != ident[0][1]                         # two different kernels
    assert ident[2][1] != ident[0][1]
    types = ["*fp32", "*fp32", "*fp32"]
    k0 = names[0]
    first = _triton.compile_kernel(cache, paths[0], "h", k0, types, 0, 64, 1, 4, 90, 1)
    before = set(os.listdir(os.path.join(cache, "triton")))
    again = _triton.compile_kernel(cache, paths[1], "h2", k0.replace(entry, renamed), types, 0, 64, 1, 4, 90, 1)
    assert again == first and again[1] == k0                  # a cache hit: the first kernel's cubin and symbol
    assert set(os.listdir(os.path.join(cache, "triton"))) == before
    # a batch holding the same kernel twice (two names) compiles it once
    jobs = [(k0, types, 0, 32, 1, 2), (k0.replace(entry, renamed), types, 0, 32, 1, 2)]
    both = _triton.write_module(cache, src + other[other.index(f"@triton.jit\ndef {k0.replace(entry, renamed)}("):])
    cubins = {f for f in os.listdir(os.path.join(cache, "triton")) if f.endswith(".cubin")}
    assert _triton.compile_batch(cache, both, "h", jobs, 90) == [True, True]
    assert len({f for f in os.listdir(os.path.join(cache, "triton")) if f.endswith(".cubin")} - cubins) == 1


def _module_with_kernels(monkeypatch, n):
    """A generated module of n distinct kernels (pointwise and reductions) and
    their compile jobs in every candidate config."""
    from wick import _triton

    monkeypatch.setenv("WICK_TRITON", "interpret")  # Triton target for CPU tensors; nothing is launched
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    C.env_reload()
    try:
        g = C.Graph()
        for k in range(n):  # an input each: row sums of one input would join one row group
            a = g.input_like(rand((64, 96)))
            g.output(g.op("sum", [g.op("mul", [g.op("exp", [a]), g.scalar(float(k + 2))])], dims=(k % 2,)))
        cg = g.compile()
    finally:
        monkeypatch.undo()
        C.env_reload()
    path = _triton.write_module(C.cache_dir(), cg.describe()["source"])
    jobs = [(k["name"], ["*fp32"] * len(k["params"]), int(k["has_r"]), *cfg)
            for k in cg.triton_kernels for cfg in k["configs"]]
    return path, jobs


@pytest.mark.skipif(CHILD, reason="compiles in the parent process")
@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads a worker's mapped libraries")
def test_compile_workers_start_early_without_torch_and_skip_cached_batches(tmp_path, monkeypatch):
    """The compile processes a large batch goes to (on a machine of more than
    two CPUs) start ahead of the batch, import neither wick's package nor
    torch (the generated modules' `from wick._triton import libdevice`
    resolves to the file itself), and compile every job; a batch whose jobs
    are all in the disk cache starts none."""
    from wick import _triton

    path, jobs = _module_with_kernels(monkeypatch, 6)
    assert len(jobs) >= 8
    cache = str(tmp_path)
    monkeypatch.setattr(_triton, "_workers", None)
    monkeypatch.setattr(_triton, "_worker_count", lambda: 2)
    _triton.start_workers(90)
    workers = _triton._workers
    try:
        assert workers and len(workers.procs) == 2
        monkeypatch.setattr(_triton, "job_log", [])
        assert _triton.compile_batch(cache, path, "h", jobs, 90) == [True] * len(jobs)
        # every job ran in a compile process, after that process was ready, and is timed in the log
        pids = {p.pid for p in workers.procs}
        assert len(_triton.job_log) == len({_triton._cache_key(path, "h", *j, 90, 1) for j in jobs})
        for name, mod, pid, level, t_batch, t_take, t0, t1, ok, config in _triton.job_log:
            assert mod == path and pid in pids and level == _triton.FOREGROUND and ok
            assert (name, *config) in [tuple(j) for j in jobs]
            assert workers.started <= workers.ready[pid] <= t0 <= t1 and t_batch <= t_take <= t1
        assert _triton._workers is workers and all(p.poll() is None for p in workers.procs)
        for p in workers.procs:
            with open(f"/proc/{p.pid}/maps") as f:
                libs = f.read()
            assert "libtriton" in libs and "libtorch" not in libs, p.pid
        for name, types, has_r, x, r, w in jobs:  # every job is now a cache hit in this process
            assert _triton._cached(cache, _triton._cache_key(path, "h", name, types, has_r, x, r, w, 90, 1))
        monkeypatch.setattr(_triton, "_workers", None)
        monkeypatch.setattr(_triton, "_worker_count", lambda: 2)
        assert _triton.compile_batch(cache, path, "h", jobs, 90) == [True] * len(jobs)
        assert _triton._workers is None  # all cached: nothing started
    finally:
        for p in workers.procs if workers else ():
            p.kill()
            p.wait()


@pytest.mark.skipif(CHILD, reason="compiles in the parent process")
def test_compile_processes_take_the_most_urgent_waiting_job(tmp_path, monkeypatch):
    """On one compile process: autotuning candidates (BACKGROUND), then a
    graph's kernels sent ahead of its first run (compile_soon), then a graph
    about to run (compile_batch). Once a batch is waiting, no job of a less
    urgent one is taken until all of its jobs are; the early batch's wait()
    makes it as urgent as a foreground one. Every job compiles, and the
    Triton key the process got is this process's own."""
    from wick import _triton

    path, jobs = _module_with_kernels(monkeypatch, 8)
    names = sorted({j[0] for j in jobs})
    assert len(names) == 8 and len(jobs) >= 24
    group = {name: min(i // 3, 2) for i, name in enumerate(names)}  # 3 kernels each (2 in the last) in every config
    bg, soon, fg = ([j for j in jobs if group[j[0]] == g] for g in range(3))
    cache = str(tmp_path)
    monkeypatch.setattr(_triton, "_workers", None)
    monkeypatch.setattr(_triton, "_later", [])
    monkeypatch.setattr(_triton, "job_log", [])
    monkeypatch.setattr(_triton, "_worker_count", lambda: 1)
    try:
        later = _triton.compile_later(cache, path, "h", bg, 90)
        early = _triton.compile_soon(cache, path, "h", soon, 90)
        assert _triton.compile_batch(cache, path, "h", fg, 90) == [True] * len(fg)
        early.wait()
        assert early.done() and _triton.wait_background() and later.done()
        workers = _triton._workers
        assert len(workers.procs) == 1 and workers.waiting == [0, 0, 0]
        assert workers.triton_key == _triton._installation_key()
        for name, types, has_r, x, r, w in jobs:
            assert _triton._cached(cache, _triton._cache_key(path, "h", name, types, has_r, x, r, w, 90, 1)), name
        # the takes of each batch's jobs (this process's clock orders them); by kernel name: the early
        # batch's level is raised by its wait(), so the level a job was taken at does not name its batch
        takes = [sorted(j[5] for j in _triton.job_log if group[j[0]] == g) for g in range(3)]
        assert [len(t) for t in takes] == [len(bg), len(soon), len(fg)]
        fg_takes, soon_takes, bg_takes = takes[2], takes[1], takes[0]
        for urgent, others in ((fg_takes, soon_takes + bg_takes), (soon_takes, bg_takes)):
            assert not any(urgent[0] < t < urgent[-1] for t in others)
    finally:
        for p in _triton._workers.procs if _triton._workers else ():
            p.kill()
            p.wait()


@pytest.mark.skipif(CHILD, reason="compiles in the parent process")
@pytest.mark.parametrize("procs", [2, 0])
def test_background_batch_shares_the_compile_processes_with_a_foreground_batch(tmp_path, monkeypatch, procs):
    """Autotuning candidates compile in the background (compile_later) while
    a graph's first-call batch compiles in the foreground on the same
    processes (or, without processes, on a thread of their own): every job of
    both is compiled, the foreground returns its own answers, and
    wait_background returns once the background batch is done."""
    from wick import _triton

    path, jobs = _module_with_kernels(monkeypatch, 8)
    first, rest = [], []
    seen = set()
    for job in jobs:  # a first config per kernel in the foreground, the others in the background
        (rest if job[0] in seen else first).append(job)
        seen.add(job[0])
    assert len(first) >= 8 and len(rest) >= 8
    cache = str(tmp_path)
    monkeypatch.setattr(_triton, "_workers", None)
    monkeypatch.setattr(_triton, "_later", [])
    monkeypatch.setattr(_triton, "_worker_count", lambda: procs)
    try:
        handle = _triton.compile_later(cache, path, "h", rest, 90)
        assert _triton.compile_batch(cache, path, "h", first, 90) == [True] * len(first)
        assert _triton.wait_background() and handle.done()
        for name, types, has_r, x, r, w in jobs:
            assert _triton._cached(cache, _triton._cache_key(path, "h", name, types, has_r, x, r, w, 90, 1)), name
        if procs:
            assert len(_triton._workers.procs) == procs and _triton._workers.waiting == [0, 0, 0]
    finally:
        for p in _triton._workers.procs if _triton._workers else ():
            p.kill()
            p.wait()


@pytest.mark.skipif(CHILD, reason="compiles in the parent process")
def test_a_module_is_read_once_for_all_its_kernels_and_a_removed_cache_is_made_again(tmp_path, monkeypatch):
    """The cache keys of a module's kernels come from one read and one scan of
    its text (a model's backward module holds hundreds of kernels, each asked
    for in every config: a scan per key made the cold compile of convnext's
    training step spend 20 s there on the H200), and they are what a fresh scan
    gives. A cache folder removed while the process runs is made again when a
    kernel is written."""
    import builtins
    import shutil

    from wick import _triton

    path, jobs = _module_with_kernels(monkeypatch, 12)
    with open(path) as f:
        text = f.read()
    monkeypatch.setattr(_triton, "_kernel_index", {})
    opened = []
    real_open = builtins.open

    def counting_open(file, *a, **k):
        if file == path:
            opened.append(file)
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", counting_open)
    keys = [_triton._cache_key(path, "h", *job, 90, 1) for job in jobs]
    monkeypatch.setattr(builtins, "open", real_open)
    assert len(opened) == 1 and len(set(keys)) == len(jobs)
    names = sorted({job[0] for job in jobs})
    assert len(names) == 12
    import re

    starts = [m.start() for m in re.finditer(r"^@triton\.jit\ndef \w+_k\d+(?:_final)?\(", text, re.M)] + [len(text)]
    head = text[:starts[0]]  # the helpers (wk_*, jit functions too) before the first kernel
    for name in names:  # the identity: the helpers and the kernel's own text, its name taken out
        start = text.index(f"@triton.jit\ndef {name}(")
        body = re.split(r"^#", text[start:starts[starts.index(start) + 1]], flags=re.M)[0]  # not a step's summary
        want = _triton._sha((head + body.replace(name, "WK_KERNEL")).encode())
        assert _triton.kernel_identity(path, "h", name) == ["kernel", want]
        assert _triton._has_asserts(path, name) == ("tl.device_assert(" in body)
    assert _triton.kernel_identity(path, "h", "no_such_k0") == ["h", "no_such_k0"]
    assert _triton._has_asserts(path, "no_such_k0")
    cache = str(tmp_path / "cache")
    name, types, has_r, x, r, w = jobs[0]
    first = _triton.compile_kernel(cache, path, "h", name, types, has_r, x, r, w, 90, 1)
    shutil.rmtree(cache)
    again = _triton.compile_kernel(cache, path, "h", name, types, has_r, x, r, w, 90, 1)
    assert again == first and _triton._cached(cache, keys[0])
