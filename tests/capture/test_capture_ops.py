"""Capture of straight-line torch code: every op, operator and method the
capture slice supports gives eager's results, on float32, float64, int64 and
bool, contiguous and non-contiguous inputs, odd, 0-d and empty shapes.

Each case runs through wick._C.CompiledFunction with two backends: "ref"
(the captured graph run node by node with eager torch, see
test_capture_util.py: checks what capture builds) and "wick" (wick's own
compiler, when this build links it). Where eager raises, the compiled
function must raise the same exception type (capture falls back to eager).
"""
import math
import zlib

import pytest
import torch
import torch.nn.functional as F

import wick._C as C
from test_capture_util import *  # noqa: F401,F403  (fixtures and helpers)
from test_capture_util import assert_same, compiled, entries, fallbacks, graphs, one_graph, reasons

DTYPES = [torch.float32, torch.float64, torch.int64, torch.bool]


def wick_backend_available():
    g = C.Graph()
    x = g.input(dtype="float32", sizes=[2], strides=[1])
    g.output(g.op("NEG", [x]))
    try:
        g.compile()
        return True
    except Exception:
        return False


WICK_OK = wick_backend_available()
BACKENDS = ["ref", pytest.param("wick", marks=pytest.mark.skipif(not WICK_OK, reason="wick compiler not linked"))]


def rand(shape, dtype, gen):
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype == torch.int64:
        return torch.randint(-6, 7, shape, generator=gen)
    return torch.randn(shape, generator=gen, dtype=dtype) + 0.1


def layouts(shape, dtype, gen):
    """(name, tensor) for several layouts of one logical shape."""
    yield "contiguous", rand(shape, dtype, gen)
    if len(shape) == 2:
        yield "transposed", rand(shape[::-1], dtype, gen).t()
        yield "sliced", rand((shape[0], shape[1] * 2 + 1), dtype, gen)[:, 1::2]
        yield "expanded", rand((1, shape[1]), dtype, gen).expand(shape)


def run_case(fn, args, kwargs, backend, dtype, expect_graph=True):
    """Compiled fn(*args, **kwargs) equals eager; one graph (or an eager
    fallback with a reason when eager itself raises)."""
    C.reset()
    try:
        expected = fn(*args, **kwargs)
    except Exception as e:  # eager raises: compiled raises the same
        with pytest.raises(type(e)):
            compiled(fn, backend)(*args, **kwargs)
        return
    cf = compiled(fn, backend)
    got = cf(*args, **kwargs)
    assert_same(got, expected)
    got2 = cf(*args, **kwargs)  # second call: a cache hit, same answer
    assert_same(got2, expected)
    es = entries(fn)
    assert len(es) == 1, es
    if expect_graph:
        assert not es[0]["eager"], es[0].get("reason")
        computed = [t for t in flat(expected) if isinstance(t, torch.Tensor)
                    and not any(t is a for a in list(args) + list(kwargs.values()))]
        assert es[0]["graph_count"] == (1 if computed else 0), es[0]
        assert es[0]["reason"] is None


def flat(v):
    if isinstance(v, (tuple, list)):
        for i in v:
            yield from flat(i)
    else:
        yield v


# ---- cases: f(x, y) on two tensors of one dtype ------------------------------

def b_add(x, y): return x + y
def b_sub(x, y): return x - y
def b_mul(x, y): return x * y
def b_div(x, y): return x / y
def b_pow2(x, y): return x ** 2
def b_pow(x, y): return x.abs() ** y
def b_mixed(x, y): return (x * 2 + y) * (x - 1.5) / 4
def b_rsub(x, y): return 2 - x
def b_rdiv(x, y): return 1 / (x.abs() + 1)
def b_neg(x, y): return -x
def b_cmp(x, y): return x < y, x <= y, x == y, x != y, x > y, x >= y
def b_cmp_scalar(x, y): return x > 0, x == 1, 2 >= x
def b_iadd(x, y):
    z = x * 1
    z += y
    z -= 1
    z *= 2
    return z
def b_torch_add(x, y): return torch.add(x, y), torch.sub(x, y), torch.mul(x, y), torch.div(x, y)
def b_alpha(x, y): return torch.add(x, y, alpha=2), torch.sub(x, y, alpha=3), x.add(y, alpha=-1)
def b_alpha_float(x, y): return torch.add(x, y, alpha=0.5)
def b_aliases(x, y): return torch.subtract(x, y), torch.multiply(x, y), torch.divide(x, y), torch.true_divide(x, y)
def b_pow_fn(x, y): return torch.pow(x, 2), x.pow(3), torch.pow(2, x.abs())
def b_maxmin(x, y): return torch.maximum(x, y), torch.minimum(x, y), x.maximum(y), x.minimum(y)
def b_cmp_fn(x, y): return torch.eq(x, y), torch.ne(x, 1), torch.lt(x, y), torch.le(x, y), torch.gt(x, y), torch.ge(x, 0)
def b_cmp_alias(x, y): return torch.less(x, y), torch.greater(x, y), x.eq(y), x.ne(y), x.lt(y), x.le(y), x.gt(y), x.ge(y)
def b_where(x, y): return torch.where(x > y, x, y)
def b_where_scalar(x, y): return torch.where(x > 0, x, 0.0), torch.where(y < 1, 1, y)
def b_unary(x, y): return torch.neg(x), torch.abs(x), torch.relu(x), x.neg(), x.abs(), x.relu()
def b_float_unary(x, y): return torch.exp(x), torch.log(x.abs() + 1), torch.sqrt(x.abs()), torch.sigmoid(x), torch.tanh(x)
def b_float_methods(x, y): return x.exp(), x.abs().log(), x.abs().sqrt(), x.sigmoid(), x.tanh()
def b_functional(x, y): return F.relu(x), F.relu(y, inplace=False), F.sigmoid(x), F.tanh(x), torch.negative(x)
def b_sum(x, y): return x.sum(), torch.sum(x), x.sum(0), x.sum(dim=1), x.sum(-1, keepdim=True), x.sum((0, 1))
def b_sum_list(x, y): return torch.sum(y, dim=[0, -1], keepdim=True), x.sum(dim=[1])
def b_sum_dtype(x, y): return x.sum(dtype=torch.float64), torch.sum(x, 0, dtype=torch.float64)
def b_mean(x, y): return x.mean(), torch.mean(x, 1), x.mean(dim=-1, keepdim=True), torch.mean(x, (0, 1))
def b_mean_dtype(x, y): return x.mean(dtype=torch.float64), torch.mean(y, dim=0, dtype=torch.float64)
def b_amax(x, y): return x.amax(), torch.amax(x, 0), x.amax(dim=-1, keepdim=True), torch.amax(y, dim=(0, 1))
def b_convert(x, y): return x.to(torch.float64), x.float(), x.double(), x.long(), x.int(), x.bool(), x.to(dtype=torch.int64)
def b_type_as(x, y): return x.type_as(y.double())
def b_softmax_like(x, y):
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True)
def b_chain(x, y):
    a = x * y + 1
    b = a.relu() - y.abs().sqrt()
    c = torch.where(b > 0, b, a * 0.5)
    return c.sum(1), c.mean(), c
def b_bool_ops(x, y): return (x > 0) == (y > 0), (x > 0) * 2
def b_keepdim_without_dim(x, y): return x.sum(keepdim=True)  # TypeError in torch
def b_amax_keepdim(x, y): return x.amax(keepdim=True), torch.amax(y, (), True)


BINARY_CASES = [v for k, v in sorted(globals().items()) if k.startswith("b_")]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fn", BINARY_CASES, ids=lambda f: f.__name__)
def test_binary_cases(fn, dtype, backend):
    gen = torch.Generator().manual_seed(zlib.crc32(fn.__name__.encode()) % 1000)
    shapes = [(3, 7)]
    for shape in shapes:
        for name, x in layouts(shape, dtype, gen):
            if backend == "wick" and name not in ("contiguous", "transposed"):
                continue
            y = rand(shape, dtype, gen)
            run_case(fn, (x, y), {}, backend, dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("fn", [b_add, b_mixed, b_sum, b_mean, b_amax, b_unary, b_cmp, b_softmax_like],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(), (0, 3), (1, 1), (5, 1)], ids=str)
def test_special_shapes(fn, dtype, backend, shape):
    gen = torch.Generator().manual_seed(7)
    x, y = rand(shape, dtype, gen), rand(shape, dtype, gen)
    run_case(fn, (x, y), {}, backend, dtype)


def bc_outer(x, y): return x + y, x * y > 0
def bc_rows(x, y): return (x - y).sum(0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [bc_outer, bc_rows], ids=lambda f: f.__name__)
def test_broadcasting_inputs(fn, backend):
    gen = torch.Generator().manual_seed(3)
    for xs, ys in [((4, 1), (1, 5)), ((3, 4), (4,)), ((2, 3, 4), (3, 1)), ((5,), ())]:
        for dtype in (torch.float32, torch.int64):
            run_case(fn, (rand(xs, dtype, gen), rand(ys, dtype, gen)), {}, backend, dtype)


def mixed_dtypes(x, y): return x + y, x * y, x / y, x > y, torch.where(x > 0, x, y)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dx,dy", [(torch.float32, torch.float64), (torch.int64, torch.float32),
                                   (torch.bool, torch.int64), (torch.float64, torch.bool)], ids=str)
def test_type_promotion(dx, dy, backend):
    gen = torch.Generator().manual_seed(5)
    run_case(mixed_dtypes, (rand((3, 4), dx, gen), rand((3, 4), dy, gen)), {}, backend, torch.float32)
    # 0-d tensors and Python scalars are weaker in promotion
    run_case(mixed_dtypes, (rand((3, 4), dx, gen), rand((), dy, gen)), {}, backend, torch.float32)


# ---- Python numbers: arguments, constants, arithmetic -------------------------

def s_scale(x, a, b=2.5):
    return x * a + b


def s_arith(x, n):
    k = (n * 3 + 1) // 2 - n % 3
    m = -n ** 2 + abs(n) - max(n, 1)
    return x + k, x * m, float(k), k


def s_shape_consts(x):
    n, m = x.shape
    return x / (n * m), x.size(0) + x.size()[1] - x.size(-1), x.ndim, x.dim(), x.numel(), len(x), x.dtype


def s_int_float(x, s):
    return x + s, x - s, s * x, x / s, x ** s


def s_cmp_consts(x, n):
    return x * (n > 2), x + (n == 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_numbers(backend):
    gen = torch.Generator().manual_seed(11)
    x = rand((4, 5), torch.float32, gen)
    run_case(s_scale, (x, 3), {}, backend, torch.float32)
    run_case(s_scale, (x, 0.5), {"b": -1}, backend, torch.float32)
    run_case(s_scale, (x,), {"a": True, "b": 2}, backend, torch.float32)
    for n in (3, -4, 7):
        run_case(s_arith, (x, n), {}, backend, torch.float32)
    run_case(s_shape_consts, (x,), {}, backend, torch.float32)
    for s in (2, 0.5, -3, True):
        for dtype in (torch.float32, torch.int64):
            run_case(s_int_float, (rand((3, 2), dtype, gen).abs() + 1, s), {}, backend, dtype)
    run_case(s_cmp_consts, (x, 3), {}, backend, torch.float32)


def s_consts_only(x, n):
    return n * 2, (n, 1.5), None


def test_constant_and_identity_returns():
    x = torch.randn(3)
    cf = compiled(s_consts_only)
    assert cf(x, 4) == (8, (4, 1.5), None)
    e = entries(s_consts_only)
    assert len(e) == 1 and not e[0]["eager"] and e[0]["graph_count"] == 0


def ident(x, y):
    return x


def ident_tuple(x, y):
    return y, x + 1, x, [y, 2]


def ident_noop_convert(x):
    return x.float(), x.to(torch.float32), x.type_as(x), x.type(torch.float32), x.type(dtype=x.dtype)


def type_by_dtype(x):
    # XLNet's r.type(self.r.dtype): a conversion, or x itself
    return x.type(torch.float64) * 2, x.type(torch.float16), x.type(dtype=torch.int32) + 1, x.type("torch.DoubleTensor")


def test_return_input_unchanged():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    assert compiled(ident)(x, y) is x
    r = compiled(ident_tuple, "ref")(x, y)
    assert type(r) is tuple and r[0] is y and r[2] is x
    assert type(r[3]) is list and r[3][0] is y and r[3][1] == 2
    assert_same(r[1], x + 1)
    r = compiled(ident_noop_convert, "ref")(x)
    assert all(t is x for t in r)
    e = entries(ident)
    assert len(e) == 1 and not e[0]["eager"]


@pytest.mark.parametrize("shape", [(3, 4), (0, 2), ()])
def test_type_by_dtype_is_a_conversion(shape):
    x = torch.randn(shape) * 10
    got, exp = compiled(type_by_dtype)(x), type_by_dtype(x)
    for g, e in zip(got, exp):
        assert g.dtype == e.dtype
        assert_same(g, e)
    one_graph(type_by_dtype)


def kw_fn(x, y, *, scale=1.0, shift=0):
    return (x * scale + y).sum(dim=-1, keepdim=False) + shift


@pytest.mark.parametrize("backend", BACKENDS)
def test_keyword_arguments(backend):
    gen = torch.Generator().manual_seed(2)
    x, y = rand((3, 4), torch.float32, gen), rand((3, 4), torch.float32, gen)
    run_case(kw_fn, (x, y), {}, backend, torch.float32)
    run_case(kw_fn, (x,), {"y": y, "scale": 2.0, "shift": 3}, backend, torch.float32)
    run_case(kw_fn, (), {"x": x, "y": y, "shift": -1}, backend, torch.float32)


def tuple_ops(x, y):
    t = (x, y + 1)
    a, b = t
    c = [a, b][1]
    return t[0] * c, (a, b)[-1], (1, 2, 3)[1] * x


def swap_locals(x, y):
    x, y = y, x
    return x - y


@pytest.mark.parametrize("backend", BACKENDS)
def test_tuples_and_unpacking(backend):
    gen = torch.Generator().manual_seed(4)
    x, y = rand((2, 3), torch.float32, gen), rand((2, 3), torch.float32, gen)
    run_case(tuple_ops, (x, y), {}, backend, torch.float32)
    run_case(swap_locals, (x, y), {}, backend, torch.float32)


def same_twice(x):
    y = x + 1
    return y, y


def test_output_identity_within_result():
    x = torch.randn(3)
    a, b = compiled(same_twice, "ref")(x)
    assert a is b  # eager returns one object twice
    assert_same(a, x + 1)


def module_attr_chain(x):
    return torch.nn.functional.relu(x) + torch.Tensor.add(x, 1)


def inf_consts(x):
    return x * math.pi, torch.where(x > 0, x, math.inf)


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_attributes(backend):
    x = torch.randn(4, 3)
    run_case(module_attr_chain, (x,), {}, backend, torch.float32)
    run_case(inf_consts, (x,), {}, backend, torch.float32)


def test_graph_text_and_info():
    x = torch.randn(4, 5)
    cf = compiled(b_softmax_like, "ref")
    cf(x, x)
    (e,) = entries(b_softmax_like)
    assert "AMAX" in e["graph"] and "EXP" in e["graph"] and "SUM" in e["graph"] and "DIV" in e["graph"]
    assert e["op_count"] == 5
    assert any("L['x']" in g and "[4, 5]" in g for g in e["guards"])
    assert e["compile_time_s"] >= 0


def other_backend_fn(x, y):
    return (x * 2 + y).relu().sum(1), torch.where(x > 0, x, 0.5), x.to(torch.float64).mean(), x


def test_other_backends_get_the_graph():
    """Non-wick backends receive the captured graph through
    wick.backends.compile_graph_with: a torch.compile backend name, or a
    callable taking (GraphModule, example_inputs)."""
    import wick.backends as B

    if not hasattr(B, "to_fx"):
        pytest.skip("wick.backends has no FX exporter in this build")
    seen = []

    def my_backend(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    x, y = torch.randn(4, 5), torch.randn(5)
    for backend in ("eager", my_backend):
        C.reset()
        r = compiled(other_backend_fn, backend)(x, y)
        assert_same(r, other_backend_fn(x, y))
        assert r[3] is x
        (e,) = entries(other_backend_fn)
        assert not e["eager"] and e["graph_count"] == 1
    gm, ex = seen[0]
    assert len(ex) == 2 and ex[0] is x and ex[1] is y
    assert "relu" in str(gm.graph) and "where" in str(gm.graph)


def test_debug_dir_gets_graph_and_code(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("WICK_DEBUG_DIR", str(tmp_path))
    C.env_reload()
    try:
        x = torch.randn(3, 4)
        compiled(b_softmax_like, "ref")(x, x)
    finally:
        monkeypatch.delenv("WICK_DEBUG_DIR")
        C.env_reload()
    names = sorted(os.listdir(tmp_path))
    graph = [n for n in names if n.endswith("b_softmax_like.graph.txt")]
    code = [n for n in names if n.endswith("b_softmax_like.code.txt")]
    assert graph and code, names
    assert "AMAX" in (tmp_path / graph[0]).read_text()
    assert "UNPACK_SEQUENCE" in (tmp_path / code[0]).read_text()


def branchy(x, bias=None, scale=1.0, act=True, mode="a"):
    y = x * scale
    if bias is not None:
        y = y + bias
    if act and scale > 0:
        y = y.relu()
    elif mode == "b":
        y = -y
    z = y.sum() if x.dim() == 2 else y
    return z, bias is None, not act


@pytest.mark.parametrize("backend", BACKENDS)
def test_branches_on_guarded_constants(backend):
    """if/elif/else, `and`/`or`, conditional expressions and `is None` on
    arguments, shapes and flags are decided at compile time (each variant
    its own entry); the graph holds only the path taken."""
    gen = torch.Generator().manual_seed(9)
    x, b = rand((3, 4), torch.float32, gen), rand((4,), torch.float32, gen)
    variants = [((x,), {}), ((x, b), {}), ((x, b, -1.0), {}), ((x,), {"act": False, "mode": "b"}),
                ((x[0],), {}), ((x,), {"act": 0})]
    cf = compiled(branchy, backend)
    for args, kwargs in variants:
        assert_same(cf(*args, **kwargs), branchy(*args, **kwargs))
    es = entries(branchy)
    assert len(es) == len(variants) and not any(e["eager"] for e in es), es


def type_checks(x, y, t):
    a = x * 2 if isinstance(x, torch.Tensor) else x
    b = y + 1 if isinstance(y, (int, float)) else y
    n = len(t) + len((a, b)) + len([a])
    return a, b, n, isinstance(a + 1, torch.Tensor), isinstance(t, tuple)


@pytest.mark.parametrize("backend", BACKENDS)
def test_isinstance_and_len_fold(backend):
    x = torch.randn(3)
    cf = compiled(type_checks, backend)
    for y in (2, 2.5, torch.ones(3)):
        assert_same(cf(x, y, (1, 2)), type_checks(x, y, (1, 2)))
    assert not any(e["eager"] for e in entries(type_checks))


def dtype_checks(x):
    y = x.float() if x.dtype == torch.float64 else x
    if x.dtype.is_floating_point and x.is_floating_point():
        y = y * 2
    c = x.is_contiguous(), x.dtype != torch.int64, x.dtype.itemsize
    return y, c


@pytest.mark.parametrize("backend", BACKENDS)
def test_dtype_checks_fold(backend):
    gen = torch.Generator().manual_seed(1)
    cf = compiled(dtype_checks, backend)
    for dtype in (torch.float32, torch.float64, torch.int64):
        C.reset()  # 4 layouts per dtype: stay under the cache limit
        for _, x in layouts((3, 4), dtype, gen):
            assert_same(cf(x), dtype_checks(x))
        assert not any(e["eager"] for e in entries(dtype_checks))


def contiguous_of_computed(x):
    return (x + 1).is_contiguous()  # eager: follows x's layout, as wick lays x + 1 out


def test_is_contiguous_of_computed_tensor_is_eagers_answer():
    for x in (torch.randn(4, 3).t(), torch.randn(3, 4)):
        C.reset()
        assert compiled(contiguous_of_computed)(x) == contiguous_of_computed(x)
        (e,) = entries(contiguous_of_computed)  # a constant answer: nothing left to run in a graph
        assert not e["eager"] and not e.get("breaks"), reasons(contiguous_of_computed)


def strides_read(x, y):
    # a layout-dependent choice, as model code makes it (a channels-last
    # branch, a reshape guarded by the stride of the last dim)
    s = x.stride()
    out = x * 2 if s[-1] == 1 else x * 3
    return out + y.stride(0) + y.stride(dim=-1) + len(s)


def test_stride_of_an_input_is_its_guarded_strides():
    gen = torch.Generator().manual_seed(3)
    cf = compiled(strides_read)
    seen = 0
    for shape in ((3, 4), (2, 1, 5)):
        C.reset()
        for _, x in layouts(shape, torch.float32, gen):
            y = torch.randn(5, 6, generator=gen)[:, ::2]
            assert_same(cf(x, y), strides_read(x, y))
            seen += 1
            one_graph(strides_read)
    assert seen >= 4
    # every layout is its own cache entry (the strides are guarded): a later
    # call with another layout gets its own answer
    C.reset()
    x = torch.randn(4, 6, generator=gen)
    y = torch.randn(5, 3, generator=gen)
    assert_same(cf(x, y), strides_read(x, y))
    assert_same(cf(x.t(), y.t()), strides_read(x.t(), y.t()))
    assert_same(cf(x, y), strides_read(x, y))
    assert len(graphs(strides_read)) == 2 and not fallbacks(strides_read)


def stride_of_computed(x):
    y = x * 2
    s = (y + 1).stride()  # eager: follows x's layout
    return y * s[0]


def stride_of_a_slice(x):
    y = x * 2
    s = y[1:].stride()  # a view of a computed tensor: its base's layout
    return y * s[0]


def contiguity_of_computed(x):
    y = x * 2
    return y * (3 if (y + 1).is_contiguous() else 5)


def stride_out_of_range(x):
    return x.stride(5)


@pytest.mark.parametrize("fn", [stride_of_computed, stride_of_a_slice, contiguity_of_computed])
def test_layout_reads_of_computed_tensors_match_eager(fn):
    # eager keeps x's order in x * 2 of a transposed x, and so does wick (a
    # contiguous result before, whose layout reads ran the frame eagerly): the
    # reads are answered at capture time, one graph per layout
    C.reset()
    gen = torch.Generator().manual_seed(5)
    for x in (torch.randn(4, 3, generator=gen).t(), torch.randn(4, 3, generator=gen), torch.randn(2, 5, generator=gen)):
        assert_same(compiled(fn)(x), fn(x))
    assert entries(fn) and not reasons(fn)
    assert all(e["graph_count"] == 1 for e in entries(fn))


def test_stride_out_of_range_raises_as_eager():
    with pytest.raises(IndexError):
        compiled(stride_out_of_range)(torch.randn(4, 3))


def reshape_to(x, shape):
    # a torch.Size argument (x.shape[:-1] handed to a helper, or live across
    # a graph break into a resume function): a constant guarded by value
    return x.reshape(*shape, -1) * shape[0], len(shape), shape


def test_torch_size_argument_is_a_guarded_constant():
    f = compiled(reshape_to)
    for shape in [(4, 6), (4, 6), (3, 2, 5)]:
        x = torch.randn(shape)
        got, exp = f(x, x.shape[:-1]), reshape_to(x, x.shape[:-1])
        assert_same(got[0], exp[0])
        assert got[1:] == exp[1:] and type(got[2]) is torch.Size
    es = entries(reshape_to)
    assert len(es) == 2 and all(not e["eager"] and e["graph_count"] == 1 for e in es), reasons(reshape_to)


def numpy_spellings(x, y):
    # torch's argument parser takes NumPy's names: axis, keepdims, x, a, x1, x2
    return (x.mean(axis=1, keepdims=True) + torch.sum(x, axis=0) + torch.amax(a=x, axis=-1, keepdims=True)
            + torch.add(x1=x, x2=y) + torch.sum(x=y, axis=0))


def test_numpy_argument_spellings():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    f = compiled(numpy_spellings)
    torch.testing.assert_close(f(x, y), numpy_spellings(x, y))
    one_graph(numpy_spellings)
