"""The op breadth of the lower layer, through the whole compiler (Graph API:
lower -> schedule -> C -> run) against eager torch: math, rounding, bitwise
and logical ops, activations, clamps, reductions (prod, amin, any/all,
argmax/argmin, var/std, logsumexp) and decompositions (softmax,
log_softmax), over float32/float64/bfloat16/float16/int64/int8/uint8/bool,
contiguous, transposed and expanded inputs, special values, 0-d and empty
tensors."""
import math

import pytest
import torch
import torch.nn.functional as F

from compiler_session import compile_run

LAYOUTS = ["contig", "transposed", "expanded"]
HALF = (torch.bfloat16, torch.float16)


def values(shape, dtype, gen):
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) < 0.5
    if dtype == torch.uint8:
        return torch.randint(0, 80, shape, generator=gen).to(dtype)  # sinh(89) overflows in torch
    if not dtype.is_floating_point:
        return torch.randint(-40, 40, shape, generator=gen).to(dtype)
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 2).to(dtype)
    flat = x.view(-1)
    if flat.numel() >= 8:
        flat[1], flat[3], flat[5], flat[6] = math.nan, math.inf, -math.inf, -0.0
    return x


def make(shape, dtype, layout, seed=0):
    gen = torch.Generator().manual_seed(seed)
    if layout == "contig" or len(shape) == 0:
        return values(shape, dtype, gen)
    if layout == "transposed":
        return values(tuple(reversed(shape)), dtype, gen).t()
    return values((1,) + tuple(shape[1:]), dtype, gen).expand(shape)


def tol(dtype, op=""):
    if dtype == torch.bfloat16:
        return 1.6e-2, 1e-2
    if dtype == torch.float16:
        return 1e-3, 1e-3
    if dtype == torch.float32:
        return 2e-5, 1e-5
    return 1e-10, 1e-12


def check(got, want, name=""):
    assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    if want.dtype.is_floating_point:
        rtol, atol = tol(want.dtype)
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True, msg=name)
    else:
        assert torch.equal(got, want), name


def run_each(names, fns, xs, build_one):
    """Compiles every op of `names` into one graph over xs; ops whose graph
    node refuses (ValueError) must be refused by torch too."""
    kept = []

    def build(g, *ids):
        outs = []
        for n in names:
            try:
                outs.append(build_one(g, n, ids))
                kept.append(n)
            except ValueError:
                with pytest.raises(Exception):
                    fns[n](*xs)
        return outs

    cg, outs = compile_run(build, *xs)
    for n, got in zip(kept, outs):
        check(got, fns[n](*xs), n)
    return cg, kept


UNARY = {
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "asin": torch.asin, "acos": torch.acos,
    "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "asinh": torch.asinh,
    "acosh": torch.acosh, "atanh": torch.atanh, "erf": torch.erf, "erfc": torch.erfc,
    "erfinv": torch.erfinv, "log1p": torch.log1p, "expm1": torch.expm1, "log2": torch.log2,
    "log10": torch.log10, "exp2": torch.exp2, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
    "square": torch.square, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
    "trunc": torch.trunc, "frac": torch.frac, "sign": torch.sign, "bitwise_not": torch.bitwise_not,
    "logical_not": torch.logical_not, "isnan": torch.isnan, "isinf": torch.isinf,
    "isfinite": torch.isfinite, "isposinf": torch.isposinf, "isneginf": torch.isneginf,
    "nan_to_num": torch.nan_to_num,
    # torch's gelu(+inf) is NaN or inf depending on the input's layout and dtype:
    # wick follows the contiguous kernel (NaN for float32/bfloat16, else inf)
    "gelu": lambda x: torch.where(x == math.inf, F.gelu(x.contiguous()), F.gelu(x)), "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu, "mish": F.mish, "relu6": F.relu6, "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.uint8,
                                   torch.bool])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_unary(dtype, layout):
    x = make((9, 37), dtype, layout, seed=1)
    if dtype in HALF:  # libm vs torch's kernels near the poles of tan, ... in 16 bits: keep away
        x = x.clamp(-1.4, 1.4)
    cg, kept = run_each(list(UNARY), UNARY, [x], lambda g, n, ids: g.op(n.upper(), [ids[0]]))
    assert len(kept) >= 8
    assert cg.nkernels == 1


BINARY = {
    "atan2": torch.atan2, "fmod": torch.fmod, "remainder": torch.remainder,
    "floor_divide": torch.floor_divide, "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or,
    "bitwise_xor": torch.bitwise_xor, "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor, "clamp_min": torch.clamp_min, "clamp_max": torch.clamp_max,
}


@pytest.mark.parametrize("da,db", [(torch.float32, torch.float32), (torch.float64, torch.float32),
                                   (torch.int64, torch.int64), (torch.bool, torch.bool),
                                   (torch.bfloat16, torch.bfloat16), (torch.int8, torch.int64)])
def test_binary(da, db):
    a = make((13, 21), da, "transposed", seed=2)
    b = make((21,), db, "contig", seed=3)
    names = list(BINARY)
    if not da.is_floating_point:  # integer division by a tensor falls back (torch raises on 0)
        names = [n for n in names if n not in ("fmod", "remainder", "floor_divide")]
    cg, kept = run_each(names, BINARY, [a, b], lambda g, n, ids: g.op(n.upper(), list(ids)))
    assert kept


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.int32])
@pytest.mark.parametrize("divisor", [3, -4, 1, -1])
def test_integer_division_by_constants(dtype, divisor):
    x = make((50,), dtype, "contig", seed=4)
    if dtype == torch.int64:
        x[0] = -(2**63)  # INT64_MIN // -1 wraps in torch
    fns = {"fmod": lambda t: torch.fmod(t, divisor), "remainder": lambda t: torch.remainder(t, divisor),
           "floor_divide": lambda t: torch.floor_divide(t, divisor)}
    run_each(list(fns), fns, [x], lambda g, n, ids: g.op(n.upper(), [ids[0], g.scalar(divisor)]))


def test_integer_division_by_tensor_refuses():
    from wick import _C

    g = _C.Graph()
    x = g.input("int64", (4,), (1,))
    y = g.input("int64", (4,), (1,))
    with pytest.raises(ValueError, match="integer division"):  # the importer makes it an extern
        g.op("FLOOR_DIVIDE", [x, y])
    with pytest.raises(ValueError, match="integer division"):
        g.op("REMAINDER", [x, g.scalar(0)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_activations_with_parameters(dtype):
    x = make((6, 40), dtype, "contig", seed=5)
    y = make((6, 40), dtype, "transposed", seed=6)
    m = make((40,), torch.bool, "contig", seed=7)
    fns = {
        "softplus": lambda a, b, c: F.softplus(a, 2.0, 3.0), "hardtanh": lambda a, b, c: F.hardtanh(a, -0.3, 0.4),
        "leaky_relu": lambda a, b, c: F.leaky_relu(a, 0.2), "elu": lambda a, b, c: F.elu(a, 0.7),
        "lerp": lambda a, b, c: torch.lerp(a, b, 0.3), "lerp_t": lambda a, b, c: torch.lerp(a, b, b.sigmoid()),
        "addcmul": lambda a, b, c: torch.addcmul(a, b, b), "addcdiv": lambda a, b, c: torch.addcdiv(a, b, b.abs() + 3),
        "clamp": lambda a, b, c: torch.clamp(a, -0.5, 0.7), "masked_fill": lambda a, b, c: a.masked_fill(c, -1.5),
    }

    def one(g, n, ids):
        a, b, c = ids
        s = g.scalar
        return {
            "softplus": lambda: g.op("SOFTPLUS", [a, s(2.0), s(3.0)]),
            "hardtanh": lambda: g.op("HARDTANH", [a, s(-0.3), s(0.4)]),
            "leaky_relu": lambda: g.op("LEAKY_RELU", [a, s(0.2)]), "elu": lambda: g.op("ELU", [a, s(0.7)]),
            "lerp": lambda: g.op("LERP", [a, b, s(0.3)]),
            "lerp_t": lambda: g.op("LERP", [a, b, g.op("SIGMOID", [b])]),
            "addcmul": lambda: g.op("ADDCMUL", [a, b, b]),
            "addcdiv": lambda: g.op("ADDCDIV", [a, b, g.op("ADD", [g.op("ABS", [b]), s(3)])]),
            "clamp": lambda: g.op("CLAMP", [a, s(-0.5), s(0.7)]),
            "masked_fill": lambda: g.op("MASKED_FILL", [a, c, s(-1.5)]),
        }[n]()

    _, kept = run_each(list(fns), fns, [x, y, m], one)
    assert len(kept) == len(fns)


REDUCTIONS = {
    "sum": torch.sum, "prod": torch.prod, "amax": torch.amax, "amin": torch.amin, "any": torch.any,
    "all": torch.all, "argmax": torch.argmax, "argmin": torch.argmin, "var": torch.var, "std": torch.std,
    "logsumexp": torch.logsumexp, "mean": torch.mean,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.uint8,
                                   torch.bool])
@pytest.mark.parametrize("dims,keepdim", [((1,), False), ((0,), True), ((0, 2), False), (None, False),
                                          ((-1,), True)])
def test_reductions(dtype, dims, keepdim):
    x = make((5, 7, 33), dtype, "contig", seed=8)
    if dtype.is_floating_point:
        x = torch.nan_to_num(x, posinf=5.0, neginf=-5.0) if dims == (0, 2) else x  # NaN/inf in the others
    if dtype == torch.int64:
        x = x % 3 - 1  # keep prod in range
    names = list(REDUCTIONS)
    if dims is not None and len(dims) > 1:
        names = [n for n in names if n not in ("argmax", "argmin", "prod")]  # one dim or all
    if dims is None:
        names = [n for n in names if n != "logsumexp"]

    def fn_of(n):
        f = REDUCTIONS[n]
        if dims is None:
            return (lambda t: f(t)) if n not in ("amax", "amin") else (lambda t: f(t, ()))
        d = dims[0] if n in ("argmax", "argmin", "prod") else dims
        return lambda t: f(t, d, keepdim=keepdim)

    fns = {n: fn_of(n) for n in names}

    def one(g, n, ids):
        kd = keepdim if dims is not None else False
        return g.op(n.upper(), [ids[0]], dims=dims, keepdim=kd)

    _, kept = run_each(names, fns, [x], one)
    assert kept


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape,dim", [((4, 50), 1), ((4, 50), 0), ((3, 5, 7), 1), ((), 0), ((0, 5), 1),
                                       ((2, 3000), -1)])
def test_softmax(dtype, shape, dim):
    x = make(shape, dtype, "transposed" if len(shape) == 2 else "contig", seed=9) if shape else \
        torch.tensor(0.5, dtype=dtype)
    x = torch.nan_to_num(x, posinf=5.0, neginf=-5.0, nan=1.0)
    fns = {"softmax": lambda t: torch.softmax(t, dim), "log_softmax": lambda t: torch.log_softmax(t, dim),
           "softmax_f64": lambda t: torch.softmax(t, dim, dtype=torch.float64)}

    def one(g, n, ids):
        if n == "softmax_f64":
            return g.op("SOFTMAX", [ids[0]], dims=dim, dtype=torch.float64)
        return g.op(n.upper(), [ids[0]], dims=dim)

    cg, kept = run_each(list(fns), fns, [x], one)
    assert len(kept) == 3


def test_softmax_is_three_kernels_over_internal_buffers():
    from wick import _C

    g = _C.Graph()
    x = g.input("float32", (8, 64), (64, 1))
    g.output(g.op("SOFTMAX", [x], dims=1))
    cg = g.compile()
    assert cg.nkernels <= 3  # max and sum reductions, the normalised output (row-fused or not)


def test_var_correction():
    x = make((6, 17), torch.float32, "contig", seed=10).nan_to_num()
    fns = {"c0": lambda t: torch.var(t, 1, correction=0), "c2": lambda t: torch.std(t, 0, correction=2),
           "c1": lambda t: torch.var(t, (0, 1))}

    def one(g, n, ids):
        return {"c0": lambda: g.op("VAR", [ids[0]], dims=1, correction=0),
                "c2": lambda: g.op("STD", [ids[0]], dims=0, correction=2),
                "c1": lambda: g.op("VAR", [ids[0]], dims=(0, 1))}[n]()

    run_each(list(fns), fns, [x], one)


def test_empty_and_zero_d():
    for x in (torch.zeros(0, 4), torch.tensor(1.5), torch.zeros(3, 0)):
        fns = {"sin": torch.sin, "gelu": F.gelu, "isnan": torch.isnan, "sign": torch.sign}
        run_each(list(fns), fns, [x], lambda g, n, ids: g.op(n.upper(), [ids[0]]))


def test_bfloat16_store_rounds_to_nearest_even():
    # 1 + 2^-8 is halfway between bfloat16 neighbours 1 and 1 + 2^-7: even wins
    x = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 3.0e38, float("nan")], dtype=torch.float32)
    _, (got,) = compile_run(lambda g, a: [g.op("CONVERT", [a], dtype="bfloat16")], x)
    assert torch.equal(got.float().nan_to_num(), x.to(torch.bfloat16).float().nan_to_num())
    _, (back,) = compile_run(lambda g, a: [g.op("CONVERT", [g.op("CONVERT", [a], dtype="bfloat16")],
                                                 dtype="float32")], x)
    assert torch.equal(back.nan_to_num(), x.to(torch.bfloat16).float().nan_to_num())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape,k", [((4, 10, 64), 1), ((4, 10, 64), 2), ((3, 1000), 1), ((5, 1), 1)])
def test_layer_norm(dtype, shape, k):
    gen = torch.Generator().manual_seed(11)
    x = (torch.randn(shape, generator=gen) * 3 + 1).to(dtype)
    w = torch.randn(shape[-k:], generator=gen).to(dtype)
    b = torch.randn(shape[-k:], generator=gen).to(dtype)
    dims = tuple(range(len(shape) - k, len(shape)))
    fns = {"affine": lambda t, ww, bb: F.layer_norm(t, shape[-k:], ww, bb, 1e-5),
           "plain": lambda t, ww, bb: F.layer_norm(t, shape[-k:], None, None, 1e-3)}

    def one(g, n, ids):
        if n == "affine":
            return g.op("LAYER_NORM", list(ids), dims=dims, eps=1e-5)
        return g.op("LAYER_NORM", [ids[0], g.scalar(1.0), g.scalar(0.0)], dims=dims, eps=1e-3)

    _, kept = run_each(list(fns), fns, [x, w, b], one)
    assert kept == list(fns)


def test_layer_norm_through_torch_compile_is_native():
    from wick import backends

    torch._dynamo.reset()
    m = torch.nn.LayerNorm(48)
    x = torch.randn(6, 48)
    n = len(backends.compiled_graphs)
    with torch.no_grad():
        got = torch.compile(m, backend="wick")(x)
        want = m(x)
    check(got, want, "layer_norm")
    infos = backends.compiled_graphs[n:]
    assert infos and all(i["extern"] == 0 for i in infos), infos


def test_layer_norm_refuses_leading_dims():
    from wick import _C

    g = _C.Graph()
    x = g.input("float32", (4, 5), (5, 1))
    with pytest.raises(ValueError, match="trailing"):
        g.op("LAYER_NORM", [x, g.scalar(1.0), g.scalar(0.0)], dims=(0,), eps=1e-5)


def test_var_mean_through_torch_compile_is_native():
    from wick import backends

    x = torch.randn(6, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(12)) * 3 + 1
    for f in (lambda: torch.var_mean(x, 1, correction=0), lambda: torch.var_mean(x, (0, 1), keepdim=True)):
        torch._dynamo.reset()
        n = len(backends.compiled_graphs)
        got, want = torch.compile(f, backend="wick")(), f()
        for a, b in zip(got, want):
            check(a, b, "var_mean")
        assert all(i["extern"] == 0 for i in backends.compiled_graphs[n:])
