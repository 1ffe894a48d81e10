"""Every derivative rule of wick's own autodiff (wick/_autodiff.py) against
eager autograd, on torch's op database: for each op below, the first
samples (float64, and bfloat16 where the op takes it; inputs that require
grad, random values, the database's shapes, broadcasting, non-contiguous
and 0-d cases) are run through wick.compile, a random gradient flows back
from every floating output, and every input's gradient is compared with
eager's. Every graph of every sample must take wick's autodiff (not
AOTAutograd); none may run eagerly."""
import warnings

import pytest
import torch

import opdb_sweep as sweep
import wick

# op_db names -> the rule they reach: table ops (pointwise, reductions,
# norms, views, cat/pad, indexing) and extern calls (mm/addmm/bmm/matmul,
# convolution, unbind, cat)
OPS = [
    "add", "sub", "mul", "div.no_rounding_mode", "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "nn.functional.relu",
    "nn.functional.gelu", "nn.functional.silu", "square", "reciprocal", "abs", "sin", "cos", "tan", "asin",
    "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv", "log1p", "expm1", "log2",
    "log10", "exp2", "frac", "nan_to_num", "clamp", "clamp_min", "clamp_max", "nn.functional.hardtanh",
    "nn.functional.relu6", "nn.functional.leaky_relu", "nn.functional.elu", "nn.functional.softplus",
    "nn.functional.hardswish", "nn.functional.hardsigmoid", "nn.functional.mish", "maximum", "minimum", "atan2",
    "lerp", "addcmul", "addcdiv", "fmod", "remainder", "pow", "where", "masked_fill", "sum", "mean", "amax",
    "amin", "var", "std", "logsumexp", "softmax", "log_softmax", "nn.functional.layer_norm", "tril", "triu",
    "cat", "nn.functional.pad.constant", "gather", "index_select", "nn.functional.embedding", "matmul", "mm", "bmm",
    "addmm", "transpose", "permute", "narrow", "select", "unbind", "expand", "reshape", "flatten", "squeeze",
    "unsqueeze", "t", "nn.functional.linear", "nn.functional.conv2d", "nn.functional.cross_entropy",
]
SAMPLES = 3


# view ops: their samples' result is a view of an input, which wick's autodiff
# leaves to AOTAutograd (autograd must see the aliasing): the functions
# tested return it doubled, so the view's own rule is what runs
VIEW_OPS = {"transpose", "permute", "narrow", "select", "reshape", "flatten", "squeeze", "unsqueeze", "t", "expand"}


def _flat_fn(op, sample):
    """(fn, tensors): fn(*tensors) calls the op on the sample in straight-line
    code (its tensors are the arguments, everything else constants)."""
    tensors, consts = [], {}

    def expr(v):
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return f"t{len(tensors) - 1}"
        if isinstance(v, tuple) and not hasattr(v, "_fields"):
            return "(" + "".join(expr(x) + ", " for x in v) + ")"
        if isinstance(v, list):
            return "[" + ", ".join(expr(x) for x in v) + "]"
        name = f"c{len(consts)}"
        consts[name] = v
        return name

    call = ", ".join([expr(sample.input)] + [expr(a) for a in sample.args] +
                     [f"{k}={expr(v)}" for k, v in sample.kwargs.items()])
    params = ", ".join(f"t{k}" for k in range(len(tensors)))
    scope = dict(consts, callee=op.op)
    post = " * 2" if op.name in VIEW_OPS else ""
    exec(f"def fn({params}):\n    return callee({call}){post}\n", scope)  # noqa: S102 - test code from op_db
    return scope["fn"], tensors


def _float_outputs(x, out):
    if isinstance(x, torch.Tensor):
        if x.is_floating_point() and x.requires_grad:
            out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _float_outputs(v, out)
    return out


def _grads(fn, ts, seed, grad_dtype=None):
    """Outputs and input gradients of fn; the incoming gradients are random
    (seeded), rounded to grad_dtype first where given (a float64 reference
    of a bfloat16 run gets the run's values)."""
    ins = [t.detach().clone().requires_grad_(t.requires_grad) for t in ts]
    outs = _float_outputs(fn(*ins), [])
    wanted = [t for t in ins if t.requires_grad]
    if not outs or not wanted:
        return None, None
    gen = torch.Generator().manual_seed(seed)
    grads = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(grad_dtype or o.dtype).to(o.dtype)
             for o in outs]
    got = torch.autograd.grad(outs, wanted, grads, allow_unused=True)
    return [o.detach() for o in outs], [None if g is None else g.detach() for g in got]


def _close(got, want, dtype):
    tol = {torch.float64: (1e-7, 1e-7), torch.float32: (1e-4, 1e-5), torch.bfloat16: (3e-2, 3e-2)}[dtype]
    for g, w in zip(got, want):
        if (g is None) != (w is None):
            return f"a gradient missing: {g is None} against eager's {w is None}"
        if g is None:
            continue
        try:
            torch.testing.assert_close(g, w, rtol=tol[0], atol=tol[1], equal_nan=True)
        except AssertionError as exc:
            return str(exc).splitlines()[0:4]
    return None


def _closer_to_float64(fn, ts, seed, got, want):
    """A bfloat16 result outside the tolerance of eager's may still be the
    more exact one: eager rounds every intermediate to bfloat16 (fmod's
    divisor gradient, -g * trunc(a / b), is rounded per element before its
    sum), wick's kernels keep float32 between ops. Judged against the same
    computation in float64 on the same values: wick's error may be at most
    twice eager's, or 1e-2 of the reference's magnitude. None when so."""
    wide = [t.detach().double().requires_grad_(t.requires_grad) if t.is_floating_point() else t for t in ts]
    ref_out, ref = _grads(fn, wide, seed, torch.bfloat16)
    for kind, gs, ws, rs in (("output", got[0], want[0], ref_out), ("gradient", got[1], want[1], ref)):
        for k, (g, w, r) in enumerate(zip(gs, ws, rs)):
            if g is None or w is None or r is None:
                if (g is None) != (w is None):
                    return f"{kind} {k}: missing in one of wick's and eager's"
                continue
            err_wick = float((g.double() - r).abs().nan_to_num(0.0).max()) if r.numel() else 0.0
            err_eager = float((w.double() - r).abs().nan_to_num(0.0).max()) if r.numel() else 0.0
            scale = 1.0 + (float(r.abs().nan_to_num(0.0).max()) if r.numel() else 0.0)
            if not err_wick <= max(2 * err_eager, 1e-2 * scale):
                return f"{kind} {k}: wick's error {err_wick:.3g} from float64, eager's {err_eager:.3g} (scale {scale:.3g})"
    return None


@pytest.fixture(scope="module")
def op_index():
    return {sweep.op_key(op): op for op in sweep.all_ops()}


@pytest.mark.parametrize("name", OPS)
def test_gradients_equal_eager(name, op_index):
    op = op_index[name]
    dtypes = [torch.float64] + [dt for dt in (torch.bfloat16,) if dt in op.supported_dtypes("cpu")]
    tried = own = 0
    problems, reasons = [], []
    for dtype in dtypes:
        torch.manual_seed(0)
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=True))[:SAMPLES]
        for i, sample in enumerate(samples):
            fn, ts = _flat_fn(op, sample)
            try:
                want_out, want = _grads(fn, ts, i)
            except Exception:  # noqa: BLE001 - eager itself raises: not a case
                continue
            if want is None:
                continue
            wick.reset()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got_out, got = _grads(wick.compile(fn), ts, i)
            stats = wick.stats()
            assert not stats["fallbacks"], (name, dtype, i, stats["fallbacks"])
            if stats["graphs"]:  # (a call capture leaves to eager without a graph, e.g. a 0-d tensor as
                tried += 1       # narrow's start, is not autodiff's case; its gradients are still compared)
                own += stats["autodiff"]["graphs"] == stats["graphs"]
            reasons += stats["autodiff"]["reasons"]
            why = _close(got_out, want_out, dtype) or _close(got, want, dtype)
            if why and dtype == torch.bfloat16:
                why = _closer_to_float64(fn, ts, i, (got_out, got), (want_out, want))
            if why:
                problems.append((str(dtype), i, why))
    assert tried, f"{name}: no sample with a gradient and a graph"
    assert not problems, (name, problems)
    # every graph of every sample through wick's autodiff
    assert own == tried, (name, own, tried, reasons)
