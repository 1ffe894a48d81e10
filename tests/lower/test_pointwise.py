"""Pointwise ops through the whole compiler (lower -> schedule -> C codegen ->
cc -> run), compared with eager torch: float32/float64/int64/bool,
contiguous, transposed, sliced, expanded (stride 0), offset, 0-d and empty
inputs, Python scalars, NaN/inf values; plus fusion (kernel counts)."""
import math

import pytest
import torch

from compiler_session import compile_run

LAYOUTS = ["contig", "transposed", "sliced", "expanded", "offset"]


def values(shape, dtype, gen):
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) < 0.5
    if dtype == torch.int64:
        return torch.randint(-20, 20, shape, generator=gen, dtype=torch.int64)
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 3).to(dtype)
    flat = x.view(-1)
    if flat.numel() >= 8:  # special values where there is room
        flat[1], flat[3], flat[5], flat[6] = math.nan, math.inf, -math.inf, 0.0
    return x


def make(shape, dtype, layout, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    if layout == "contig" or len(shape) == 0:
        return values(shape, dtype, gen)
    if layout == "transposed":
        perm = list(range(len(shape)))[::-1]
        return values(tuple(shape[p] for p in perm), dtype, gen).permute(perm)
    if layout == "sliced":
        big = values(shape[:-1] + (shape[-1] * 2 + 1,), dtype, gen)
        return big[..., 1::2]
    if layout == "expanded":
        return values((1,) + shape[1:], dtype, gen).expand(shape)
    if layout == "offset":
        return values((shape[0] + 2,) + shape[1:], dtype, gen)[2:]
    raise ValueError(layout)


def check(got, want, rtol=None, atol=None):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype in (torch.float32, torch.float64):
        rtol = 1.3e-6 if want.dtype == torch.float32 and rtol is None else rtol
        atol = 1e-6 if atol is None else atol
        torch.testing.assert_close(got, want, rtol=rtol or 1e-12, atol=atol, equal_nan=True)
    else:
        assert torch.equal(got, want)


UNARY = {
    "neg": torch.neg, "abs": torch.abs, "relu": torch.relu, "exp": torch.exp, "log": torch.log,
    "sqrt": torch.sqrt, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
}
NOT_BOOL = {"neg", "abs", "relu"}
TRANSCENDENTAL = {"exp", "log", "sigmoid", "tanh"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(5, 7), (33, 129)])
def test_unary(dtype, layout, shape):
    x = make(shape, dtype, layout)
    names = [n for n in UNARY if not (dtype == torch.bool and n in NOT_BOOL)]
    cg, outs = compile_run(lambda g, a: [g.op(n, [a]) for n in names], x)
    assert cg.nkernels == 1
    for n, got in zip(names, outs):
        want = UNARY[n](x)
        # libmvec (<= 4 ulp) vs torch's SLEEF (1 ulp) for float32 transcendentals
        rtol = 1e-5 if n in TRANSCENDENTAL and want.dtype == torch.float32 else None
        check(got, want, rtol=rtol)


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "eq": torch.eq, "ne": torch.ne,
    "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
}


def binary_ok(name, da, db):
    if name == "sub" and torch.bool in (da, db):
        return False
    if name == "pow" and da == db == torch.bool:
        return False
    return True


DTYPE_PAIRS = [
    (torch.float32, torch.float32), (torch.float64, torch.float64), (torch.int64, torch.int64),
    (torch.bool, torch.bool), (torch.float32, torch.float64), (torch.int64, torch.float32),
    (torch.bool, torch.int64), (torch.bool, torch.float32),
]


@pytest.mark.parametrize("da,db", DTYPE_PAIRS)
@pytest.mark.parametrize("layout", ["contig", "transposed", "expanded"])
def test_binary_broadcast(da, db, layout):
    a = make((17, 23), da, layout, seed=1)
    b = make((23,), db, "contig", seed=2)
    if db == torch.int64:
        b = b.abs() % 4  # int pow: small non-negative exponents
    names = [n for n in BINARY if binary_ok(n, da, db)]
    cg, outs = compile_run(lambda g, x, y: [g.op(n, [x, y]) for n in names], a, b)
    assert cg.nkernels == 1
    for n, got in zip(names, outs):
        check(got, BINARY[n](a, b), rtol=1e-5 if n == "pow" else None)


SCALARS = [2.5, 3, True, -0.5, 2, 0.5, -1, 0]


REVERSED = {
    "add": lambda s, x: s + x, "sub": lambda s, x: s - x, "mul": lambda s, x: s * x,
    "div": lambda s, x: s / x, "maximum": lambda s, x: torch.maximum(torch.tensor(s), x),
    "minimum": lambda s, x: torch.minimum(torch.tensor(s), x), "eq": lambda s, x: s == x,
    "ne": lambda s, x: s != x, "lt": lambda s, x: s < x, "le": lambda s, x: s <= x,
    "gt": lambda s, x: s > x, "ge": lambda s, x: s >= x,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
@pytest.mark.parametrize("scalar", SCALARS)
def test_tensor_scalar(dtype, scalar):
    x = make((9, 31), dtype, "sliced", seed=3)
    names = list(BINARY)
    if dtype == torch.bool or isinstance(scalar, bool):
        names.remove("sub")  # torch refuses bool subtraction (the graph also for bool scalars)
    if dtype in (torch.int64, torch.bool) and type(scalar) is int and scalar < 0:
        names.remove("pow")  # torch: integers to negative integer powers are not allowed
    rnames = [n for n in names if n != "pow"]

    def build(g, a):
        s = g.scalar(scalar)
        return [g.op(n, [a, s]) for n in names] + [g.op(n, [s, a]) for n in rnames]

    cg, outs = compile_run(build, x)
    assert cg.nkernels == 1
    fwd = {"maximum": lambda a, s: torch.maximum(a, torch.tensor(s)),
           "minimum": lambda a, s: torch.minimum(a, torch.tensor(s))}
    wants = [fwd.get(n, BINARY[n])(x, scalar) for n in names] + [REVERSED[n](scalar, x) for n in rnames]
    for got, want in zip(outs, wants):
        check(got, want, rtol=1e-5)


def test_scalar_on_left_matches_torch():
    x = make((6, 10), torch.float32, "contig", seed=4)

    def build(g, a):
        s = g.scalar(2.0)
        return [g.op("sub", [s, a]), g.op("div", [s, a]), g.op("pow", [s, a])]

    _, (sub, div, pw) = compile_run(build, x)
    check(sub, 2.0 - x)
    check(div, 2.0 / x)
    check(pw, torch.pow(2.0, x), rtol=1e-5)


def test_int_pow_scalar_exponents():
    x = make((50,), torch.int64, "contig", seed=5)

    def build(g, a):
        return [g.op("pow", [a, g.scalar(e)]) for e in (0, 1, 2, 3, 5)]

    _, outs = compile_run(build, x)
    for e, got in zip((0, 1, 2, 3, 5), outs):
        check(got, torch.pow(x, e))


def test_float_pow_specialised_exponents():
    x = make((40, 3), torch.float32, "contig", seed=6)
    exps = (2, 3, 0.5, -1, -2, -0.5, 0, 1, 1.7, -2.5)

    def build(g, a):
        return [g.op("pow", [a, g.scalar(e)]) for e in exps]

    _, outs = compile_run(build, x)
    for e, got in zip(exps, outs):
        check(got, torch.pow(x, e), rtol=1e-5)


def test_where_and_convert():
    c = make((12, 5), torch.bool, "transposed", seed=7)
    a = make((12, 5), torch.float32, "contig", seed=8)
    b = make((5,), torch.int64, "contig", seed=9)

    def build(g, cc, aa, bb):
        w1 = g.op("where", [cc, aa, bb])
        w2 = g.op("where", [cc, bb, g.scalar(1.5)])
        w3 = g.op("where", [cc, bb, g.scalar(7)])
        cv = g.op("convert", [aa], dtype="int64")
        cb = g.op("convert", [aa], dtype="bool")
        cf = g.op("convert", [bb], dtype="float64")
        return [w1, w2, w3, cv, cb, cf]

    _, outs = compile_run(build, c, a, b)
    a_finite = a
    wants = [torch.where(c, a, b), torch.where(c, b, 1.5), torch.where(c, b, 7), None, a.to(torch.bool),
             b.to(torch.float64)]
    for i, (got, want) in enumerate(zip(outs, wants)):
        if want is None:  # float -> int of NaN/inf is undefined: compare finite entries
            fin = torch.isfinite(a_finite)
            assert got.dtype == torch.int64
            assert torch.equal(got[fin], a[fin].to(torch.int64))
            continue
        check(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_zero_dim_and_empty(dtype):
    z = make((), dtype, "contig", seed=10)
    e = make((0, 4), dtype, "contig", seed=11)
    v = make((3, 4), dtype, "contig", seed=12)

    def build(g, zz, ee, vv):
        return [g.op("mul", [zz, zz]), g.op("add", [ee, zz]), g.op("maximum", [vv, zz]), g.op("exp", [zz])]

    _, (zz, ee, vz, ez) = compile_run(build, z, e, v)
    check(zz, z * z)
    check(ee, e + z)
    check(vz, torch.maximum(v, z))
    check(ez, torch.exp(z), rtol=1e-5)


def test_zero_dim_tensor_promotion():
    # a 0-d float64 tensor does not promote a float32 tensor; a 0-d float
    # tensor does promote an int64 tensor (to the default dtype float32)
    x = make((4, 4), torch.float32, "contig", seed=13)
    i = make((4, 4), torch.int64, "contig", seed=14)
    z = torch.tensor(1.25, dtype=torch.float64)

    def build(g, xx, ii, zz):
        return [g.op("add", [xx, zz]), g.op("add", [ii, zz]), g.op("lt", [ii, zz])]

    _, (a, b, c) = compile_run(build, x, i, z)
    check(a, x + z)
    check(b, i + z)
    check(c, i < z)


def test_eight_chained_ops_fuse_into_one_kernel():
    x = make((64, 100), torch.float32, "contig", seed=15)
    y = make((100,), torch.float32, "contig", seed=16)

    def build(g, a, b):
        t = g.op("add", [a, b])
        t = g.op("mul", [t, g.scalar(0.5)])
        t = g.op("sub", [t, a])
        t = g.op("relu", [t])
        t = g.op("tanh", [t])
        t = g.op("mul", [t, b])
        t = g.op("sigmoid", [t])
        t = g.op("add", [t, g.scalar(1)])
        return [t]

    cg, (got,) = compile_run(build, x, y)
    assert cg.nkernels == 1
    want = torch.sigmoid(torch.tanh(torch.relu((x + y) * 0.5 - x)) * y) + 1
    check(got, want, rtol=1e-5)


def test_outputs_alias_inputs_and_repeat():
    x = make((8, 3), torch.float32, "transposed", seed=17)

    def build(g, a):
        n = g.op("neg", [a])
        return [n, a, n]

    cg, (n1, a, n2) = compile_run(build, x)
    assert cg.nkernels == 1
    check(n1, -x)
    check(n2, -x)
    check(a, x)


def test_nan_semantics():
    x = torch.tensor([math.nan, 1.0, -2.0, math.inf, -math.inf, -0.0, 0.0, 3.0])
    y = torch.tensor([0.0, math.nan, -3.0, math.nan, 1.0, 0.0, -0.0, 3.0])

    def build(g, a, b):
        return [g.op("maximum", [a, b]), g.op("minimum", [a, b]), g.op("relu", [a]), g.op("eq", [a, b]),
                g.op("ne", [a, b]), g.op("sigmoid", [a]), g.op("tanh", [a])]

    _, outs = compile_run(build, x, y)
    wants = [torch.maximum(x, y), torch.minimum(x, y), torch.relu(x), x == y, x != y, torch.sigmoid(x),
             torch.tanh(x)]
    for got, want in zip(outs, wants):
        check(got, want)


def test_int64_wraps_like_torch():
    big = torch.tensor([2**62, -2**63, 2**63 - 1, 5], dtype=torch.int64)

    def build(g, a):
        return [g.op("add", [a, a]), g.op("mul", [a, g.scalar(3)]), g.op("neg", [a]), g.op("abs", [a])]

    _, outs = compile_run(build, big)
    for got, want in zip(outs, [big + big, big * 3, -big, torch.abs(big)]):
        check(got, want)


def test_int64_true_division_is_float32():
    a = torch.arange(-6, 6, dtype=torch.int64)
    b = torch.tensor([3, -2, 0, 5, 7, 1, -1, 4, 0, 2, 9, -3], dtype=torch.int64)
    _, (q,) = compile_run(lambda g, x, y: [g.op("div", [x, y])], a, b)
    check(q, a / b)
