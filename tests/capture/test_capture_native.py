"""Torch calls the compiler lowers natively enter wick's own capture as
native nodes, not EXTERN calls: layer_norm, gelu (both approximations),
softmax/log_softmax with dim/dtype/_stacklevel, dropout in eval, casts,
clone/contiguous and every view op as a VIEW node. Each case is compared
with eager (values, dtype, shape, and for views strides, storage offset and
aliasing of the input), and its graph must hold no EXTERN node."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries

DTYPES = [torch.float32, torch.bfloat16, torch.float64]


def tol(dtype):
    return {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}


def only_graph(fn):
    es = entries(fn)
    assert es and all(not e["eager"] and e["graph_count"] == 1 for e in es), [e.get("reason") for e in es]
    return es[-1]["graph"]


def check_native(fn, *args, dtype=torch.float32, views=False):
    """fn compiled equals eager; its graph has no EXTERN node; view outputs
    keep eager's strides, storage offset and aliasing of args[0]."""
    want = fn(*args)
    got = compiled(fn)(*args)
    assert_same(got, want, **tol(dtype))
    graph = only_graph(fn)
    assert "EXTERN" not in graph, graph
    if views:
        outs = got if isinstance(got, tuple) else (got,)
        refs = want if isinstance(want, tuple) else (want,)
        base = args[0]
        for g, w in zip(outs, refs):
            assert g.stride() == w.stride(), (g.stride(), w.stride())
            aliased = w.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
            assert (g.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()) == aliased
            if aliased:
                assert g.storage_offset() == w.storage_offset()
    return graph


def inputs(shape, dtype, layout):
    if layout == "transposed" and len(shape) >= 2:
        return torch.randn(*shape[:-2], shape[-1], shape[-2], dtype=dtype).transpose(-1, -2)
    if layout == "sliced" and len(shape) >= 1:
        return torch.randn(*shape[:-1], shape[-1] * 2, dtype=dtype)[..., ::2]
    return torch.randn(shape, dtype=dtype)


LAYOUTS = ["contiguous", "transposed", "sliced"]

# ---- softmax ------------------------------------------------------------------


def softmax_f(x):
    return F.softmax(x, dim=-1)


def softmax_stacklevel(x):
    return F.softmax(x, -1, _stacklevel=5)


def softmax_dtype(x):
    return F.softmax(x, dim=0, dtype=torch.float64) * 2


def softmax_method(x):
    return x.softmax(-1, dtype=torch.float32)


def log_softmax_torch(x):
    return torch.log_softmax(x, 0) + torch.special.softmax(x, -1)


@pytest.mark.parametrize("fn", [softmax_f, softmax_stacklevel, softmax_dtype, softmax_method, log_softmax_torch],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 7), (3, 2, 5), (), (0, 4)], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_softmax_native(fn, dtype, shape, layout):
    check_native(fn, inputs(shape, dtype, layout), dtype=dtype)


def test_softmax_graph_has_dtype_cast():
    x = torch.randn(3, 4)
    graph = check_native(softmax_dtype, x)
    assert "CONVERT" in graph and "SOFTMAX" in graph


# ---- layer_norm, gelu, silu, relu, dropout ---------------------------------------


def layer_norm_full(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-6)


def layer_norm_no_affine(x, w, b):
    return F.layer_norm(x, x.shape[-1:])


def layer_norm_weight_only(x, w, b):
    return F.layer_norm(x, [x.shape[-1]], weight=w)


def layer_norm_two_dims(x, w, b):
    return F.layer_norm(x, x.shape[-2:], None, None, 1e-5)


@pytest.mark.parametrize("fn", [layer_norm_full, layer_norm_no_affine, layer_norm_weight_only, layer_norm_two_dims],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 8), (2, 3, 16), (0, 8)], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layer_norm_native(fn, dtype, shape, layout):
    x = inputs(shape, dtype, layout)
    w, b = torch.randn(shape[-1], dtype=dtype), torch.randn(shape[-1], dtype=dtype)
    graph = check_native(fn, x, w, b, dtype=dtype)
    assert "LAYER_NORM" in graph


class Block(nn.Module):
    """nn modules whose forwards call the functions above."""

    def __init__(self, approximate="none"):
        super().__init__()
        self.ln = nn.LayerNorm(16)
        self.ln2 = nn.LayerNorm(16, elementwise_affine=False)
        self.act = nn.GELU(approximate)
        self.drop = nn.Dropout(0.1)
        self.sm, self.lsm = nn.Softmax(dim=-1), nn.LogSoftmax(dim=-1)
        self.silu = nn.SiLU()

    def forward(self, x):
        h = self.drop(self.act(self.ln(x))) + self.silu(self.ln2(x))
        return self.sm(h) + self.lsm(h.transpose(0, 1)).transpose(0, 1)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_modules_native(approximate, dtype):
    torch.manual_seed(0)
    m = Block(approximate).to(dtype).eval()
    with torch.no_grad():
        m.ln.weight.normal_()
        m.ln.bias.normal_()
    x = torch.randn(2, 5, 16, dtype=dtype)
    with torch.no_grad():
        want = m(x)
        got = compiled(type(m).forward)(m, x)
    assert_same(got, want, **tol(dtype))
    es = entries(type(m).forward)
    assert es and all(not e["eager"] and e["graph_count"] == 1 for e in es), [e.get("reason") for e in es]
    graph = es[-1]["graph"]
    assert "EXTERN" not in graph and "LAYER_NORM" in graph and "SOFTMAX" in graph, graph


def test_layer_norm_mixed_dtypes():
    # a bfloat16 input with a float32 weight is eager's mixed-dtype CPU kernel:
    # a node (test_capture_more_natives.py); another weight dtype raises in
    # eager, through an extern
    def mixed(x, w):
        return F.layer_norm(x, (8,), w)

    x, w = torch.randn(3, 8, dtype=torch.bfloat16), torch.randn(8)
    assert_same(compiled(mixed)(x, w), mixed(x, w), rtol=2e-2, atol=2e-2)
    assert "EXTERN" not in only_graph(mixed)
    with pytest.raises(RuntimeError, match="mixed dtype"):
        compiled(mixed)(x, w.double())


def test_layer_norm_wrong_shape_raises_like_eager():
    def fn(x):
        return F.layer_norm(x, (5,))

    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError):
        fn(x)
    with pytest.raises(RuntimeError):
        compiled(fn)(x)


def gelu_none(x):
    return F.gelu(x) + F.gelu(x, approximate="none")


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def silu_relu(x):
    return F.silu(x) * F.relu(x, inplace=False) + torch.relu(x)


def dropout_eval(x):
    return F.dropout(x, 0.3, training=False) + F.dropout(x, p=0.0) + torch.dropout(x, 0.5, False)


@pytest.mark.parametrize("fn", [gelu_none, gelu_tanh, silu_relu, dropout_eval],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 7), (), (0, 3)], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_activations_native(fn, dtype, shape, layout):
    check_native(fn, inputs(shape, dtype, layout), dtype=dtype)


def test_gelu_tanh_is_its_own_node():
    assert "GELU_TANH" in check_native(gelu_tanh, torch.randn(5))


def test_dropout_module_eval_is_identity_and_training_stays_extern():
    drop = nn.Dropout(0.5)

    def fn(x):
        return drop(x)

    x = torch.randn(4, 6)
    drop.eval()
    got = compiled(fn)(x)
    assert got is x or torch.equal(got, x)
    assert fn(x) is x
    drop.train()
    torch.manual_seed(0)
    want = fn(x)
    torch.manual_seed(0)
    got = compiled(fn)(x)
    assert torch.equal(got, want)  # same seed, same mask: the dropout ran as torch's
    # the module (stateless, held in a cell) is inlined, one entry per mode:
    # eval's returns its input; training's is never a native node: torch's
    # dropout as an extern, or the call left to Python (the whole frame
    # eager, or a break at the call with nothing before it)
    es = entries(fn)
    assert any(e["eager"] or "EXTERN" in str(e.get("graph")) or (e["graph_count"] == 0 and e.get("breaks"))
               for e in es)
    assert all("DROPOUT" not in str(e.get("graph")) for e in es)


# ---- casts, clone, contiguous ---------------------------------------------------


def casts(x):
    return x.float() + x.to(torch.float64).to(x.dtype) + x.to(dtype=torch.bfloat16).double()


def clone_contiguous(x):
    return x.clone() + x.contiguous() * 2


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 7), (), (0, 3)], ids=str)
def test_casts_native(dtype, shape):
    check_native(casts, torch.randn(shape, dtype=dtype), dtype=torch.bfloat16)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_contiguous_copies_like_eager(layout):
    def fn(x):
        return x.contiguous()

    x = inputs((3, 4), torch.float32, layout)
    got, want = compiled(fn)(x), fn(x)
    assert_same(got, want)
    assert got.is_contiguous() and got.stride() == want.stride()
    if layout == "contiguous":
        assert got.data_ptr() == x.data_ptr()  # no graph at all: x itself
    else:
        assert got.data_ptr() != x.data_ptr()
        assert "EXTERN" not in only_graph(fn)
    check_native(clone_contiguous, torch.randn(3, 5))


def test_clone_is_a_copy():
    def fn(x):
        return x.clone()

    x = torch.randn(3, 4)
    got = compiled(fn)(x)
    assert torch.equal(got, x) and got.data_ptr() != x.data_ptr()
    assert "EXTERN" not in only_graph(fn)


# ---- views ------------------------------------------------------------------------

VIEW_CASES = {
    "view": lambda x: x.view(-1),
    "view_tuple": lambda x: x.view((x.shape[0], -1)),
    "reshape": lambda x: x.reshape(x.shape[0], 2, -1),
    "torch_reshape": lambda x: torch.reshape(x, (-1, 3)),
    "permute": lambda x: x.permute(2, 0, 1),
    "torch_permute": lambda x: torch.permute(x, (1, 2, 0)),
    "transpose": lambda x: x.transpose(0, -1),
    "torch_transpose": lambda x: torch.transpose(x, 1, 2),
    "T": lambda x: x.T,
    "mT": lambda x: x.mT,
    "expand": lambda x: x[:, :1].expand(-1, 5, -1),
    "expand_new_dims": lambda x: x.expand(2, *x.shape),
    "expand_as": lambda x: x[:1].expand_as(x),
    "squeeze": lambda x: x[:, :1].squeeze(),
    "squeeze_dim": lambda x: x[:, :1].squeeze(1),
    "squeeze_dims": lambda x: torch.squeeze(x[:1, :1], (0, 1)),
    "unsqueeze": lambda x: x.unsqueeze(1),
    "unsqueeze_end": lambda x: torch.unsqueeze(x, -1),
    "flatten": lambda x: x.flatten(),
    "flatten_range": lambda x: torch.flatten(x, 1),
    "unflatten": lambda x: x.unflatten(-1, (2, -1)),
    "narrow": lambda x: x.narrow(1, 1, 2),
    "torch_narrow": lambda x: torch.narrow(x, -1, -4, 3),
    "select": lambda x: x.select(0, -1),
    "torch_select": lambda x: torch.select(x, 2, 1),
    "getitem_int": lambda x: x[1],
    "getitem_slices": lambda x: x[:, 1:3, ::2],
    "getitem_neg": lambda x: x[-1, -2:],
    "getitem_none_ellipsis": lambda x: x[None, ..., 1, None],
    "getitem_ellipsis": lambda x: x[..., :2],
    "split": lambda x: x.split(2, dim=-1),
    "split_sections": lambda x: torch.split(x, [1, 3], 1),
    "chunk": lambda x: x.chunk(3, -1),
    "torch_chunk": lambda x: torch.chunk(x, 2, 0),
    "as_strided": lambda x: x.as_strided((2, 2), (1, 2)),
    "chain": lambda x: x.permute(2, 1, 0)[1:].transpose(0, 1).unsqueeze(0)[0, :, ::2],
}


@pytest.mark.parametrize("name", list(VIEW_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_views_native(name, dtype, layout):
    fn = VIEW_CASES[name]
    x = inputs((3, 4, 6), dtype, layout)
    if name in ("view", "view_tuple", "unflatten", "as_strided") and layout == "transposed":
        # no view expresses these over a transposed input: eager raises for
        # view, and as_strided reads storage differently; both stay externs
        if name == "as_strided":
            assert_same(compiled(fn)(x), fn(x))
        return
    check_native(fn, x, dtype=dtype, views=True)


@pytest.mark.parametrize("name", ["view", "flatten", "T", "squeeze", "unsqueeze", "getitem_ellipsis"])
def test_views_of_empty(name):
    x = torch.randn(0, 4, 6)
    check_native(VIEW_CASES[name], x, views=True) if name not in ("squeeze",) else None
    if name == "squeeze":
        fn = lambda x: x.squeeze(0)  # noqa: E731
        want, got = fn(x), compiled(fn)(x)
        assert_same(got, want)


@pytest.mark.parametrize("case", ["unsqueeze", "view", "squeeze", "flatten", "T", "getitem"])
def test_views_of_0d(case):
    fns = {"unsqueeze": lambda x: x.unsqueeze(0), "view": lambda x: x.view(1, 1), "squeeze": lambda x: x.squeeze(),
           "flatten": lambda x: x.flatten(), "T": lambda x: x.T, "getitem": lambda x: x[None, ...]}
    check_native(fns[case], torch.randn(()), views=True)


def test_reshape_of_a_transposed_input_copies_like_eager():
    def fn(x):
        return x.reshape(-1)

    x = torch.randn(4, 6).t()
    got, want = compiled(fn)(x), fn(x)
    assert_same(got, want)
    assert got.stride() == want.stride() and got.data_ptr() != x.data_ptr()
    graph = only_graph(fn)
    assert "EXTERN" not in graph and "CONVERT" in graph


def test_view_of_a_transposed_input_raises_like_eager():
    def fn(x):
        return x.view(-1) + 1

    x = torch.randn(4, 6).t()
    with pytest.raises(RuntimeError):
        fn(x)
    with pytest.raises(RuntimeError):
        compiled(fn)(x)


def test_view_of_a_result_of_a_transposed_input_stays_extern():
    # eager's x.t() + 1 keeps the transposed layout, so view(-1) raises in
    # eager: capture must not make it a view of wick's contiguous result
    def fn(x):
        return (x.t() + 1).view(-1)

    x = torch.randn(4, 6)
    with pytest.raises(RuntimeError):
        fn(x)
    with pytest.raises(RuntimeError):
        compiled(fn)(x)


def test_views_feed_fused_kernels():
    def attn_scores(q, k):
        b, t, c = q.shape
        q = q.view(b, t, 2, c // 2).transpose(1, 2)
        k = k.view(b, t, 2, c // 2).transpose(1, 2)
        s = (q.unsqueeze(3) * k.unsqueeze(2)).sum(-1) * (c // 2) ** -0.5
        return s.softmax(-1)

    q, k = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    graph = check_native(attn_scores, q, k)
    assert "VIEW" in graph and "SOFTMAX" in graph


def test_inplace_on_a_view_falls_back_correctly():
    def fn(x):
        y = x * 2
        v = y[0]
        v += 1
        return y

    x = torch.randn(3, 4)
    assert_same(compiled(fn)(x), fn(x))


def test_split_outputs_alias_the_input():
    def fn(x):
        a, b = x.split(2, dim=1)
        return a, b

    x = torch.randn(3, 4)
    check_native(fn, x, views=True)


# ---- autograd: the graph goes through to_fx and AOTAutograd ------------------------


def test_native_nodes_under_autograd():
    def fn(x, w, b):
        h = F.layer_norm(x, (8,), w, b)
        h = F.gelu(h.view(2, 3, 8).transpose(0, 1), approximate="tanh")
        return F.softmax(h.reshape(6, 8), dim=-1, dtype=torch.float64)

    args = [torch.randn(6, 8, requires_grad=True), torch.randn(8, requires_grad=True),
            torch.randn(8, requires_grad=True)]
    ref_args = [a.detach().clone().requires_grad_() for a in args]
    got, want = compiled(fn)(*args), fn(*ref_args)
    # float64 out of float32 kernels: float32 rounding
    assert_same(got, want, rtol=1e-5, atol=1e-6)
    g = torch.randn_like(want)
    got.backward(g)
    want.backward(g)
    for a, r in zip(args, ref_args):
        assert_same(a.grad, r.grad)


# ---- var / std / var_mean -----------------------------------------------------------

VAR_CASES = {
    "var_dim": lambda x: torch.var(x, dim=-1),
    "var_correction": lambda x: x.var(0, correction=0, keepdim=True),
    "std_dims": lambda x: torch.std(x, (0, 1), correction=2),
    "var_all": lambda x: x.var(),
    "var_mean": lambda x: torch.var_mean(x, -1, keepdim=True),
    "var_mean_all": lambda x: torch.var_mean(x, correction=0),
}


@pytest.mark.parametrize("name", list(VAR_CASES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_var_native(name, dtype, layout):
    check_native(VAR_CASES[name], inputs((4, 5, 6), dtype, layout), dtype=dtype)


def test_var_mean_under_autograd():
    def fn(x):
        v, m = torch.var_mean(x, dim=1, correction=0)
        return v * m + torch.std(x, 1)

    x = torch.randn(5, 6, requires_grad=True)
    r = x.detach().clone().requires_grad_()
    got, want = compiled(fn)(x), fn(r)
    assert_same(got, want)
    got.sum().backward()
    want.sum().backward()
    assert_same(x.grad, r.grad)


def test_clone_under_autograd_is_a_copy():
    def fn(x):
        return x.clone(), x.t().contiguous(), x.t().reshape(-1)

    x = torch.randn(3, 4, requires_grad=True)
    outs = compiled(fn)(x)
    assert_same(outs, fn(x))
    for o in outs:
        assert o.data_ptr() != x.data_ptr()
    sum(o.sum() for o in outs).backward()
    assert_same(x.grad, torch.full((3, 4), 3.0))


# ---- cat, pad, embedding, advanced indexing, arange, bitwise operators ---------------
# (capture's rules in csrc/capture/vals/structural.c: CAT, PAD, INDEX, ARANGE nodes;
# what a rule does not model stays an extern call of the torch callable)


def extern_names(graph):
    """The callables of the graph's EXTERN nodes, in order."""
    import re

    return re.findall(r"EXTERN\[\d+ ([^\]]+)\]", graph)


def check_mapped(fn, *args, ops, externs=(), dtype=torch.float32, backend="wick"):
    """fn compiled equals eager in one graph without a break; the graph holds
    each op of `ops` and exactly the extern calls `externs`."""
    want = fn(*args)
    got = compiled(fn, backend=backend)(*args)
    assert_same(got, want, **tol(dtype))
    graph = only_graph(fn)
    assert not entries(fn)[-1].get("breaks"), reasons(fn)
    for op in ops:
        assert f"= {op}(" in graph, graph
    assert extern_names(graph) == list(externs), graph
    return graph


def any_input(shape, dtype, layout="contiguous"):
    if dtype.is_floating_point:
        return inputs(shape, dtype, layout)
    if dtype == torch.bool:
        return inputs(shape, torch.float32, layout) > 0
    return (inputs(shape, torch.float32, layout) * 50).to(dtype)


CAT_CASES = {
    "dim0": lambda x, y: torch.cat([x, y]),
    "last_dim": lambda x, y: torch.cat((x, y, x), dim=-1),
    "dim1_keyword": lambda x, y: torch.cat(tensors=[x * 2, y], dim=1),
    "concat": lambda x, y: torch.concat([x.neg(), y], 1) + 1,
    "rotate_half": lambda x, y: torch.cat((-x[..., 2:], x[..., :2]), dim=-1) * y,
    "one_tensor": lambda x, y: torch.cat([x]) + y,
}


@pytest.mark.parametrize("name", list(CAT_CASES))
@pytest.mark.parametrize("dtype", DTYPES + [torch.int64], ids=str)
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4)], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_cat_native(name, dtype, shape, layout):
    check_mapped(CAT_CASES[name], any_input(shape, dtype, layout), any_input(shape, dtype), ops=["CAT"], dtype=dtype)


def test_cat_promotes_dtypes_like_eager():
    def fn(x, y, i):
        return torch.cat([x, y, i], dim=0)

    check_mapped(fn, torch.randn(2, 3), torch.randn(1, 3, dtype=torch.float64), torch.arange(3).view(1, 3),
                 ops=["CAT"])


def test_cat_cases_it_does_not_model_stay_extern():
    def legacy_empty(x):  # eager skips a 1-d empty tensor among 2-d ones
        return torch.cat([x, torch.zeros(0, dtype=x.dtype, device=x.device)]) * 2

    def out_kw(x, out):
        torch.cat([x, x], out=out)
        return out + 1

    def named_dim_list(x):
        return torch.cat([x, x.unsqueeze(0)], dim=0)  # ranks differ: eager raises

    x = torch.randn(2, 3)
    check_mapped(legacy_empty, x, ops=["FULL"], externs=["torch.cat"])
    out = torch.empty(4, 3)
    got = compiled(out_kw)(x, out.clone())
    assert_same(got, out_kw(x, out.clone()))
    with pytest.raises(RuntimeError):
        named_dim_list(x)
    with pytest.raises(RuntimeError):
        compiled(named_dim_list)(x)


PAD_CASES = {
    "last_dim": lambda x: F.pad(x, (1, 2)),
    "two_dims_value": lambda x: F.pad(x, (1, 1, 2, 0), value=3),
    "crop": lambda x: F.pad(x, [-1, 2], "constant", 0) * 2,
    "all_dims": lambda x: F.pad(x, (0, 1, 1, 0, 2, 2)[:2 * x.dim()], mode="constant"),
    "float_value": lambda x: F.pad(x, (2, 0), value=-1.5),
}


@pytest.mark.parametrize("name", list(PAD_CASES))
@pytest.mark.parametrize("dtype", DTYPES + [torch.int32], ids=str)
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 5)], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_pad_native(name, dtype, shape, layout):
    x = any_input(shape, dtype, layout)
    if name == "float_value" and not dtype.is_floating_point:
        # a float fill into an integer tensor: eager's conversion, its own call
        check_mapped(PAD_CASES[name], x, ops=[], externs=["torch.nn.functional.pad"])
        return
    check_mapped(PAD_CASES[name], x, ops=["PAD"], dtype=dtype)


def test_pad_of_bool_and_other_modes():
    def bool_pad(m):
        return F.pad(m, (1, 1), value=True) | F.pad(m, (2, 0))

    def reflect(x):
        return F.pad(x, (1, 1), mode="reflect") + 1

    check_mapped(bool_pad, torch.randn(3, 4) > 0, ops=["PAD", "BITWISE_OR"])
    check_mapped(reflect, torch.randn(2, 3, 4), ops=["ADD"], externs=["torch.nn.functional.pad"])


def test_pad_that_eager_rejects_raises_like_eager():
    def fn(x):
        return F.pad(x, (-3, -3))

    x = torch.randn(2, 4)
    with pytest.raises(RuntimeError):
        fn(x)
    with pytest.raises(RuntimeError):
        compiled(fn)(x)


EMBED_CASES = {
    "plain": lambda i, w: F.embedding(i, w),
    "keywords": lambda i, w: F.embedding(input=i, weight=w, padding_idx=0) * 2,
    "negative_padding_idx": lambda i, w: F.embedding(i, w, -1, scale_grad_by_freq=True, sparse=False),
}


@pytest.mark.parametrize("name", list(EMBED_CASES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("idx_shape", [(5,), (2, 7), (2, 3, 4), ()], ids=str)
@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32], ids=str)
def test_embedding_native(name, dtype, idx_shape, idx_dtype):
    w = torch.randn(11, 6, dtype=dtype)
    i = torch.randint(0, 11, idx_shape, dtype=idx_dtype)
    check_mapped(EMBED_CASES[name], i, w, ops=["INDEX"], dtype=dtype)


def test_embedding_module_and_grad():
    emb = nn.Embedding(10, 4, padding_idx=1)

    def fn(emb, i):
        return emb(i).sum(-1)

    i = torch.tensor([[1, 2, 9], [0, 1, 3]])
    with torch.no_grad():
        check_mapped(fn, emb, i, ops=["INDEX"])
    # with grad, padding_idx changes the weight's gradient: the node keeps it
    # for the backward (test_capture_more_natives.py)
    C.reset()
    got = compiled(fn)(emb, i)
    assert_same(got, fn(emb, i))
    assert extern_names(only_graph(fn)) == [] and "padding_idx=1" in only_graph(fn)
    got.sum().backward()
    g = emb.weight.grad.clone()
    emb.weight.grad = None
    fn(emb, i).sum().backward()
    assert_same(g, emb.weight.grad)


def test_embedding_without_padding_under_autograd():
    w = torch.randn(10, 4, requires_grad=True)
    r = w.detach().clone().requires_grad_()

    def fn(i, w):
        return F.embedding(i, w) * 3

    i = torch.tensor([[1, 2, 9], [0, 1, 1]])
    got, want = compiled(fn)(i, w), fn(i, r)
    assert_same(got, want)
    assert "= INDEX(" in only_graph(fn)
    got.sum().backward()
    want.sum().backward()
    assert_same(w.grad, r.grad)


def test_embedding_cases_it_does_not_model():
    def max_norm(i, w):  # renormalises w's rows in place, as eager does
        return F.embedding(i, w, max_norm=1.0)

    def float_index(i, w):
        return F.embedding(i, w)

    w = torch.randn(10, 4) * 3
    i = torch.tensor([1, 2, 2, 7])
    w_eager, w_comp = w.clone(), w.clone()
    assert_same(compiled(max_norm)(i, w_comp), max_norm(i, w_eager))
    assert_same(w_comp, w_eager)
    with pytest.raises(RuntimeError):
        compiled(float_index)(i.float(), w)


def test_embedding_index_out_of_range_raises_like_eager():
    def fn(i, w):
        return F.embedding(i, w) + 1

    w = torch.randn(5, 3)
    assert_same(compiled(fn)(torch.tensor([0, 4]), w), fn(torch.tensor([0, 4]), w))
    for bad in (torch.tensor([0, 5]), torch.tensor([-1, 2])):
        with pytest.raises(IndexError):
            fn(bad, w)
        with pytest.raises(IndexError):
            compiled(fn)(bad, w)


GETITEM_CASES = {
    "first_dim": lambda x, i, j: x[i],
    "two_dims": lambda x, i, j: x[i, j],
    "middle_dim": lambda x, i, j: x[:, i] * 2,
    "broadcast": lambda x, i, j: x[i[:, None], j],
    "not_adjacent": lambda x, i, j: x[i, :, j] if x.dim() == 3 else x[i, j],
    "mask_like": lambda x, i, j: x[:, i[:, None], j] if x.dim() == 3 else x[i[None, :], j[:, None]],
}


@pytest.mark.parametrize("name", list(GETITEM_CASES))
@pytest.mark.parametrize("dtype", DTYPES + [torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("shape", [(6, 5), (4, 6, 5)], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_getitem_index_tensors_native(name, dtype, shape, layout):
    x = any_input(shape, dtype, layout)
    n = min(x.shape[:2]) if x.dim() == 2 else min(x.shape)
    i = torch.randint(-n, n, (4,))  # negative indices count from the end
    j = torch.randint(0, n, (4,), dtype=torch.int32)
    check_mapped(GETITEM_CASES[name], x, i, j, ops=["INDEX"], dtype=dtype)


def test_getitem_cases_it_does_not_model_stay_extern():
    def mask(x, m):
        return x[m] * 2

    def with_int(x, i):
        return x[0, i] + 1

    def with_slice(x, i):
        return x[1:, i] + 1

    x = torch.randn(4, 5)
    # a bool mask selects a data-dependent number of elements: eager's own call
    assert_same(compiled(mask)(x, x > 0), mask(x, x > 0))
    assert all("INDEX" not in e["graph"] for e in entries(mask))
    check_mapped(with_int, x, torch.tensor([1, 3]), ops=[], externs=["operator.getitem"])
    check_mapped(with_slice, x, torch.tensor([1, 3]), ops=[], externs=["operator.getitem"])


def test_getitem_out_of_range_raises_like_eager():
    def fn(x, i):
        return x[i] + 1

    x = torch.randn(4, 3)
    with pytest.raises(IndexError):
        fn(x, torch.tensor([4]))
    with pytest.raises(IndexError):
        compiled(fn)(x, torch.tensor([4]))


def test_indexing_stays_extern_under_triton_interpreter(monkeypatch):
    def fn(x, i):
        return x[i] + F.embedding(i, x)

    monkeypatch.setenv("WICK_TRITON", "interpret")
    C.env_reload()
    try:
        x, i = torch.randn(5, 3), torch.tensor([1, 4])
        graph = compiled(fn, backend="ref")(x, i) is not None and only_graph(fn)
        assert extern_names(graph) == ["operator.getitem", "torch.nn.functional.embedding"], graph
    finally:
        monkeypatch.delenv("WICK_TRITON")
        C.env_reload()


ARANGE_CASES = {
    "end": lambda x: torch.arange(7, device=x.device) + x.sum(),
    "start_end": lambda x: torch.arange(2, 9, device=x.device, dtype=x.dtype) * x[0, 0],
    "step": lambda x: x[:, :1] + torch.arange(1, 12, 3, device=x.device),
    "negative_step": lambda x: torch.arange(10, -5, -4, device=x.device) * x.sum(),
    "float_step": lambda x: torch.arange(0.5, 2.0, 0.25, device=x.device) + x[0, 0],
    "float_dtype_ints": lambda x: torch.arange(start=1, end=6, step=2, dtype=torch.float64, device=x.device) * x[0, 0],
    "int32": lambda x: torch.arange(-3, 4, dtype=torch.int32, device="cpu") * 2 + x.sum(),
    "empty": lambda x: torch.arange(3, 3, device=x.device).float() + x.sum(),
}


@pytest.mark.parametrize("name", list(ARANGE_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_arange_native(name, dtype):
    check_mapped(ARANGE_CASES[name], torch.randn(3, 4, dtype=dtype), ops=["ARANGE"], dtype=dtype)


def test_arange_cases_it_does_not_model_stay_extern():
    def no_device(x):  # the default device: read at capture and guarded (test_capture_more_natives.py)
        return torch.arange(5) + x

    def wants_grad(x):
        return torch.arange(3.0, device=x.device, requires_grad=True) * x

    def float_into_int(x):
        return torch.arange(0.5, 4, dtype=torch.int64, device=x.device) + x

    def bare_cuda_name(x):
        return x

    x = torch.randn(5)
    check_mapped(no_device, x, ops=["ARANGE"], externs=[])
    C.reset()
    assert_same(compiled(wants_grad)(x[:3]), wants_grad(x[:3]))
    assert "torch.arange" in extern_names(entries(wants_grad)[-1]["graph"])
    x = torch.randint(0, 5, (4,))
    check_mapped(float_into_int, x, ops=[], externs=["torch.arange"])


def test_arange_that_eager_rejects_raises_like_eager():
    def fn(x):
        return torch.arange(5, 0, 1, device=x.device) + x

    with pytest.raises(RuntimeError):
        fn(torch.randn(1))
    with pytest.raises(RuntimeError):
        compiled(fn)(torch.randn(1))


BITWISE_CASES = {
    "and": lambda a, b: a & b,
    "or_scalar": lambda a, b: (a | True) ^ b if a.dtype == torch.bool else (a | 3) ^ b,
    "xor_not": lambda a, b: ~(a ^ b),
    "functions": lambda a, b: torch.bitwise_and(a, b) | ~a,
}


@pytest.mark.parametrize("name", list(BITWISE_CASES))
@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.int32, torch.uint8], ids=str)
@pytest.mark.parametrize("shape", [(5,), (3, 4)], ids=str)
def test_bitwise_operators_native(name, dtype, shape):
    check_mapped(BITWISE_CASES[name], any_input(shape, dtype), any_input(shape[-1:], dtype), ops=[], dtype=dtype)


def test_bitwise_inplace_operator_native():
    def fn(a, b):
        m = a > 0
        m &= b > 0
        m |= a > 1
        return m

    check_mapped(fn, torch.randn(4, 5), torch.randn(4, 5), ops=["BITWISE_AND", "BITWISE_OR"])


def test_bitwise_operators_on_floats_raise_like_eager():
    def fn(a, b):
        return a & b

    x = torch.randn(3)
    with pytest.raises(RuntimeError):
        fn(x, x)
    with pytest.raises(RuntimeError):
        compiled(fn)(x, x)


# ---- matmuls: F.linear / torch.mm / addmm / bmm as ATen externs the C shim can call --


LINEAR_CASES = {
    "2d_bias": lambda x, w, b: F.linear(x, w, b),
    "3d_no_bias": lambda x, w, b: F.linear(x.view(2, -1, x.shape[-1]), w),
    "keywords": lambda x, w, b: F.linear(input=x, weight=w, bias=b) * 2,
    "4d_bias": lambda x, w, b: F.linear(x.view(2, 1, -1, x.shape[-1]), w, bias=b).sum(1),
}


@pytest.mark.parametrize("name", list(LINEAR_CASES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_linear_as_aten_matmul(name, dtype, layout):
    x, w, b = inputs((6, 8), dtype, layout), inputs((5, 8), dtype, layout), torch.randn(5, dtype=dtype)
    fn = LINEAR_CASES[name]
    want = fn(x, w, b)
    got = compiled(fn)(x, w, b)
    assert_same(got, want, **tol(dtype))
    graph = only_graph(fn)
    names = extern_names(graph)
    assert names == ["aten.mm.default" if "no_bias" in name else "aten.addmm.default"], graph


def test_linear_module_and_grad():
    lin = nn.Linear(8, 5)

    def fn(lin, x):
        return torch.relu(lin(x))

    x = torch.randn(3, 4, 8, requires_grad=True)
    r = x.detach().clone().requires_grad_()
    got, want = compiled(fn)(lin, x), fn(lin, r)
    assert_same(got, want)
    assert extern_names(only_graph(fn)) == ["aten.addmm.default"]
    got.sum().backward()
    gw = lin.weight.grad.clone()
    lin.weight.grad = None
    want.sum().backward()
    assert_same(x.grad, r.grad)
    assert_same(gw, lin.weight.grad)


def test_linear_cases_it_does_not_model_stay_extern():
    def not_viewable(x, w):  # rows of a transposed 3-d input are no matrix view
        return F.linear(x.transpose(0, 1), w)

    def one_d(x, w):
        return F.linear(x[0, 0], w)

    def mixed_dtypes(x, w):
        return F.linear(x, w.double())

    x, w = torch.randn(3, 4, 8), torch.randn(5, 8)
    check_mapped(not_viewable, x, w, ops=[], externs=["torch._C._nn.linear"])
    check_mapped(one_d, x, w, ops=[], externs=["torch._C._nn.linear"])
    with pytest.raises(RuntimeError):
        mixed_dtypes(x, w)
    with pytest.raises(RuntimeError):
        compiled(mixed_dtypes)(x, w)


def test_linear_under_autocast_is_casts_and_addmm():
    # autocast's casts are graph nodes, then ATen's addmm of the cast
    # operands: the C shim's call, outside autocast, computes what eager's does
    def fn(x, w, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.linear(x, w, b)

    x, w, b = torch.randn(4, 8), torch.randn(5, 8), torch.randn(5)
    got = compiled(fn)(x, w, b)
    want = fn(x, w, b)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    graph = only_graph(fn)
    assert extern_names(graph) == ["aten.addmm.default"]
    assert graph.count("CONVERT(") == 3, graph


def test_torch_matmuls_as_aten_ops():
    def fn(b, x, w, y, z):
        return torch.addmm(b, x, w, beta=0.5, alpha=2) + torch.mm(x, w), torch.bmm(y, z)

    args = (torch.randn(5), torch.randn(4, 8), torch.randn(8, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 6))
    check_mapped(fn, *args, ops=[], externs=["aten.addmm.default", "aten.mm.default", "aten.bmm.default"])

    def ints(x, w):
        return torch.mm(x, w)

    x, w = torch.randint(0, 5, (3, 4)), torch.randint(0, 5, (4, 2))
    check_mapped(ints, x, w, ops=[], externs=["torch.mm"])


# ---- a model's pieces together, through wick and through to_fx (another backend) --


def rope_mask_block(ids, w_emb, w_q, inv_freq, pad_mask):
    h = F.embedding(ids, w_emb)
    pos = torch.arange(ids.shape[1], device=ids.device)
    ang = pos[:, None].float() * inv_freq
    emb = torch.cat((ang, ang), dim=-1)
    q = F.linear(h, w_q)
    half = q.shape[-1] // 2
    rot = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
    q = q * emb.cos() + rot * emb.sin()
    b = torch.arange(ids.shape[0], device=ids.device)
    keep = pad_mask[b[:, None, None], pos[None, :, None]] & (pos[None, None, :] <= pos[None, :, None])
    return F.pad(q.masked_fill(~keep[..., :1], 0.0), (0, 2))


@pytest.mark.parametrize("backend", ["wick", "eager"])
def test_model_pieces_together(backend):
    ids = torch.randint(0, 20, (2, 6))
    args = (ids, torch.randn(20, 8), torch.randn(8, 8), torch.rand(4), torch.rand(2, 6) > 0.3)
    check_mapped(rope_mask_block, *args, ops=["INDEX", "ARANGE", "CAT", "PAD", "BITWISE_AND", "BITWISE_NOT"],
                 externs=["aten.mm.default"], backend=backend)


# ---- attention on the CPU: the flash op eager's F.scaled_dot_product_attention calls --


def sdpa_plain(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_bool_mask(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m) * 2


def sdpa_float_mask_scale(q, k, v, m):
    bias = torch.zeros(m.shape, dtype=q.dtype, device=q.device).masked_fill(~m, -1e4)
    return F.scaled_dot_product_attention(q, k, v, bias, 0.0, scale=0.3)


def sdpa_causal(q, k, v, m):
    return F.scaled_dot_product_attention(query=q, key=k, value=v, is_causal=True, dropout_p=0.0)


@pytest.mark.parametrize("fn", [sdpa_plain, sdpa_bool_mask, sdpa_float_mask_scale, sdpa_causal],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(2, 3, 16, 8), (1, 2, 5, 4)], ids=str)
def test_attention_as_cpu_flash_op(fn, dtype, shape):
    q, k, v = (torch.randn(shape, dtype=dtype) for _ in range(3))
    m = torch.rand(shape[0], 1, shape[2], shape[2]) > 0.3
    m[..., 0] = True  # no fully masked row (eager's kernels answer those differently)
    check_mapped(fn, q, k, v, m, ops=[], externs=["aten._scaled_dot_product_flash_attention_for_cpu.default"],
                 dtype=dtype)


def test_attention_under_autograd():
    q, k, v = (torch.randn(2, 2, 8, 4, requires_grad=True) for _ in range(3))
    refs = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    m = torch.rand(2, 1, 8, 8) > 0.3
    m[..., 0] = True
    got, want = compiled(sdpa_bool_mask)(q, k, v, m), sdpa_bool_mask(*refs, m)
    assert_same(got, want)
    got.sum().backward()
    want.sum().backward()
    for a, r in zip((q, k, v), refs):
        assert_same(a.grad, r.grad)


def test_attention_cases_it_does_not_model_stay_extern():
    def dropout(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)

    def gqa(q, k, v):
        return F.scaled_dot_product_attention(q, k[:, :1], v[:, :1], enable_gqa=True)

    q, k, v = (torch.randn(2, 2, 8, 4) for _ in range(3))
    got = compiled(dropout)(q, k, v)
    assert got.shape == (2, 2, 8, 4)
    assert extern_names(only_graph(dropout)) == ["torch._C._nn.scaled_dot_product_attention"]
    check_mapped(gqa, q, k, v, ops=[], externs=["torch._C._nn.scaled_dot_product_attention"])


# ---- zeros / ones / full with an explicit device, Tensor.new_* -> FULL ---------------

FULL_CASES = {
    "new_ones_bool": lambda x: x.new_ones((), dtype=torch.bool) & (x > 0),
    "new_zeros_varargs": lambda x: x.new_zeros(2, 3) + x[:1, :1],
    "new_full": lambda x: x.new_full((3, 1), -2.5) * x[:3],
    "new_full_int": lambda x: x.new_full([4], 7, dtype=torch.int32) + 1,
    "zeros_device": lambda x: torch.zeros(x.shape, device=x.device, dtype=x.dtype).masked_fill(x > 0, 1.0),
    "ones_varargs": lambda x: torch.ones(2, 5, device=x.device) * x.sum(),
    "full_infers_dtype": lambda x: (torch.full((2,), 3, device=x.device), torch.full((2,), True, device="cpu"),
                                    torch.full((1, 2), 0.5, device=x.device, dtype=x.dtype)),
}


@pytest.mark.parametrize("name", list(FULL_CASES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_full_native(name, dtype):
    check_mapped(FULL_CASES[name], torch.randn(4, 5, dtype=dtype), ops=["FULL"], dtype=dtype)


def test_full_cases_it_does_not_model_stay_extern():
    def no_device(x):
        return torch.zeros(3) + x

    def int_overflow(x):
        return x.new_full((2,), 300, dtype=torch.uint8)

    def float_into_int(x):
        return x.new_full((2,), 2.5, dtype=torch.int64)

    x = torch.randn(3)
    check_mapped(no_device, x, ops=["FULL"], externs=[])  # the default device, guarded
    for fn in (int_overflow, float_into_int):
        try:
            want = fn(x)
        except Exception as e:
            with pytest.raises(type(e)):
                compiled(fn)(x)
            continue
        assert_same(compiled(fn)(x), want)
        assert extern_names(only_graph(fn)) == ["Tensor.new_full"]


def test_getitem_with_a_0d_index_tensor_is_a_view_like_eager():
    def fn(x, i):
        y = x[i]
        y.add_(1)  # eager: x[i] with a 0-d index is x.select(0, i), a view
        return x * 2

    x, i = torch.randn(4, 3), torch.tensor(2)
    want = fn(x.clone(), i)
    got = compiled(fn)(x.clone(), i)
    assert_same(got, want)


def test_attention_with_a_mask_that_requires_grad_is_the_math_path_inlined():
    # eager's choice is the math kernel then (the flash op takes no gradient
    # for the mask): its ops, two bmm kernels and native softmax work
    def fn(q, k, v, bias):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    q, k, v = (torch.randn(2, 2, 8, 4, requires_grad=True) for _ in range(3))
    bias = torch.randn(2, 1, 8, 8, requires_grad=True)
    args = (q, k, v, bias)
    refs = [t.detach().clone().requires_grad_() for t in args]
    got, want = compiled(fn)(*args), fn(*refs)
    assert_same(got, want)
    assert extern_names(only_graph(fn)) == ["aten.bmm.default", "aten.bmm.default"]
    got.sum().backward()
    want.sum().backward()
    for a, r in zip(args, refs):
        assert_same(a.grad, r.grad)
