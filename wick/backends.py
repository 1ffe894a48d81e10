"""The two pairings of wick's halves with PyTorch's.

* ``wick_backend`` is ``torch.compile(model, backend="wick")``: PyTorch's own
  capture (TorchDynamo) hands over an FX graph, AOTAutograd traces it to ATen
  (forward and backward graphs), and each ATen graph is imported into a wick
  graph: native nodes fused into C kernels, every other op an extern call into
  PyTorch. ``compiled_graphs`` records what each graph became (native and
  extern counts). What wick cannot compile at all (an input mutation, a GPU
  tensor) runs eagerly and the reason is appended to ``fallback_reasons``.
* ``compile_graph_with`` goes the other way: a wick graph (from wick's own
  capture, or built by hand) is exported to an FX GraphModule of torch calls
  and handed to any torch.compile backend ("inductor", "eager", a callable).

torch is imported inside functions only: ``import wick`` must not need it.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import math
import os
import sys

from . import _C

__all__ = ["wick_backend", "register", "compile_graph_with", "fallback_reasons", "compiled_graphs"]

# Why torch.compile(backend="wick") ran a graph eagerly, oldest first.
fallback_reasons: list = []

_REGISTRY_MODULE = "torch._dynamo.backends.registry"


class _Unsupported(Exception):
    """The importer met something wick does not compile; the message says what."""


def _log_breaks():
    spec = os.environ.get("WICK_LOG", "")
    names = {s.strip() for s in spec.replace(" ", ",").split(",")}
    return "breaks" in names or "all" in names


def _fallback(gm, reason):
    reason = f"torch.compile(backend='wick'): {reason}"
    fallback_reasons.append(reason)
    if _log_breaks():
        print(f"[wick:breaks] {reason}; running the graph eagerly", file=sys.stderr)
    return gm.forward


# ---- the op table, resolved against torch once ----------------------------

_tables = None


def _resolve(torch, dotted):
    """'torch.nn.functional.relu' -> the object, or None."""
    parts = dotted.split(".")
    if parts[0] == "Tensor":
        obj = torch.Tensor
    elif parts[0] == "torch":
        obj = torch
    else:
        return None
    for p in parts[1:]:
        obj = getattr(obj, p, None)
        if obj is None:
            return None
    return obj


def _parse_signature(sig):
    """'input, other, *, alpha=1' -> (positional names, kw-only names, defaults)."""
    positional, kwonly, defaults = [], [], {}
    star = False
    for part in [p.strip() for p in sig.split(",") if p.strip()]:
        if part == "*":
            star = True
            continue
        name, _, default = part.partition("=")
        name = name.strip()
        if default:
            defaults[name] = eval(default.strip(), {"None": None})  # literal defaults only
        (kwonly if star else positional).append(name)
    return positional, kwonly, defaults


def _op_tables():
    """(function -> row, method name -> row, op name -> row, row['torch'] functions)."""
    global _tables
    if _tables is not None:
        return _tables
    import operator

    import torch

    by_fn, by_method, by_name = {}, {}, {}
    for row in _C.op_table():
        row = dict(row)
        row["params"] = _parse_signature(row["signature"])
        by_name[row["name"]] = row
        for dotted in row["torch"].split():
            obj = _resolve(torch, dotted)
            if obj is not None:
                by_fn[obj] = row
            if dotted.startswith("Tensor."):
                by_method[dotted[len("Tensor."):]] = row
    ops = {
        operator.add: "ADD", operator.sub: "SUB", operator.mul: "MUL", operator.truediv: "DIV",
        operator.pow: "POW", operator.neg: "NEG", operator.abs: "ABS", operator.eq: "EQ",
        operator.ne: "NE", operator.lt: "LT", operator.le: "LE", operator.gt: "GT", operator.ge: "GE",
    }
    for fn, name in ops.items():
        if name in by_name:
            by_fn[fn] = by_name[name]
    _tables = (by_fn, by_method, by_name)
    return _tables


# ---- ATen FX (from AOTAutograd) -> wick ---------------------------------------
#
# torch.compile(backend="wick") goes through AOTAutograd: dynamo's graph is
# functionalised and traced to ATen ops, split into a forward and (when
# something requires grad) a backward graph, and each graph is compiled here.
# Every call_function node is either lowered to a native wick op (pointwise,
# reductions, conversions: fused into C kernels) or becomes an EXTERN node that
# calls the ATen op itself at run time (matmul, convolution, views, softmax,
# anything else); an unknown op never makes the graph fall back. Metadata for
# externs comes from node.meta["val"] (fake tensors). A native node is used
# only when its result has exactly the dtype, shape and (contiguous) strides
# the fake tensor promises, so every value has the layout eager would give.
# Symbolic sizes (SymInt) are specialised: the graph is compiled for the
# sizes it gets, and a call with other sizes compiles again (guarded by a
# key of the sizes), never refused.

class _Opaque:
    """A non-tensor item of an extern's result that the graph may not read."""

    def __init__(self, reason):
        self.reason = reason


class _Multi:
    """A node whose value is a tuple/list: items are value ids, constants or None."""

    def __init__(self, items, kind):
        self.items, self.kind = items, kind


class _Const:
    """A node whose value is a Python constant (a specialised SymInt, None...)."""

    def __init__(self, value):
        self.value = value


def _aten_native():
    """aten overload -> (wick op, how its arguments bind)."""
    import torch

    aten, prims = torch.ops.aten, torch.ops.prims
    table = {}

    def add(overloads, op, kind):
        for ov in overloads:
            table[ov] = (op, kind)

    add([aten.add.Tensor, aten.add.Scalar], "ADD", "alpha")
    add([aten.sub.Tensor, aten.sub.Scalar], "SUB", "alpha")
    add([aten.mul.Tensor, aten.mul.Scalar], "MUL", "binary")
    add([aten.div.Tensor, aten.div.Scalar], "DIV", "binary")
    add([aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar], "POW", "binary")
    add([aten.maximum.default], "MAXIMUM", "binary")
    add([aten.minimum.default], "MINIMUM", "binary")
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        packet = getattr(aten, name)
        add([packet.Tensor, packet.Scalar], name.upper(), "binary")
    add([aten.where.self], "WHERE", "ternary")
    for name in ("neg", "abs", "relu", "exp", "log", "sqrt", "sigmoid", "tanh"):
        add([getattr(aten, name).default], name.upper(), "unary")
    add([aten.sum.dim_IntList, aten.sum.default], "SUM", "reduce")
    add([aten.mean.dim, aten.mean.default], "MEAN", "reduce")
    add([aten.amax.default], "AMAX", "amax")
    add([prims.convert_element_type.default], "CONVERT", "convert")
    add([aten._to_copy.default], "CONVERT", "to_copy")
    # the op breadth of csrc/lower (ops.def rows after TANH)
    for name in ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                 "erf", "erfc", "erfinv", "log1p", "expm1", "log2", "log10", "exp2", "reciprocal", "floor",
                 "ceil", "round", "trunc", "frac", "sign", "bitwise_not", "logical_not", "isnan", "isinf",
                 "isposinf", "isneginf", "mish", "hardswish", "hardsigmoid"):
        add([getattr(aten, name).default], name.upper(), "unary")
    add([aten.sgn.default], "SIGN", "unary")
    add([aten.isfinite.default], "ISFINITE", "unary")
    for name in ("atan2", "logical_and", "logical_or", "logical_xor"):
        add([getattr(aten, name).default], name.upper(), "binary")
    for name in ("fmod", "remainder", "bitwise_and", "bitwise_or", "bitwise_xor"):
        packet = getattr(aten, name)
        add([packet.Tensor, packet.Scalar], name.upper(), "binary")
    add([aten.floor_divide.default, aten.floor_divide.Scalar], "FLOOR_DIVIDE", "binary")
    add([aten.masked_fill.Scalar, aten.masked_fill.Tensor], "MASKED_FILL", "ternary")
    add([aten.lerp.Scalar, aten.lerp.Tensor], "LERP", "ternary")
    add([aten.clamp.default, aten.clamp.Tensor], "CLAMP", "clamp")
    add([prims.rsqrt.default, aten.rsqrt.default], "RSQRT", "unary")
    add([aten.scalar_tensor.default], "CONVERT", "scalar_tensor")
    add([aten.clone.default], "CONVERT", "clone")
    add([aten.addcmul.default], "ADDCMUL", "ternary")
    add([aten.addcdiv.default], "ADDCDIV", "ternary")
    add([aten.leaky_relu.default], "LEAKY_RELU", "params")
    add([aten.softplus.default], "SOFTPLUS", "params")
    add([aten.elu.default], "ELU", "params")
    add([aten.nan_to_num.default], "NAN_TO_NUM", "params")
    add([aten.gelu.default], "GELU", "gelu")
    add([aten.prod.default, aten.prod.dim_int], "PROD", "reduce")
    add([aten.amin.default], "AMIN", "amax")
    add([aten.any.default, aten.any.dim, aten.any.dims], "ANY", "reduce")
    add([aten.all.default, aten.all.dim, aten.all.dims], "ALL", "reduce")
    add([aten.argmax.default], "ARGMAX", "reduce")
    add([aten.argmin.default], "ARGMIN", "reduce")
    add([aten.logsumexp.default], "LOGSUMEXP", "reduce")
    add([aten.var.correction], "VAR", "var")
    add([aten.std.correction], "STD", "var")
    return table


# Scalar parameters of "params" ops after the tensor: torch's defaults, and
# how many of them wick's op takes (the rest must keep their defaults).
_PARAM_DEFAULTS = {
    "LEAKY_RELU": ((0.01,), 1), "SOFTPLUS": ((1, 20), 2), "ELU": ((1, 1, 1), 1),
    "NAN_TO_NUM": ((None, None, None), 0),
}


_native_table = None
_view_table = None
_indexing_table = None
_indirect_table = None


def _indexing_ops():
    """ATen ops AtenImporter.try_indexing makes native (indirect loads and
    creation ops, ops.def notes 11 and 12)."""
    global _indexing_table
    if _indexing_table is None:
        import torch

        aten = torch.ops.aten
        _indexing_table = {
            aten.embedding.default, aten.index_select.default, aten.gather.default, aten.index.Tensor,
            aten.tril.default, aten.triu.default, aten.arange.default, aten.arange.start,
            aten.arange.start_step, aten.full.default, aten.zeros.default, aten.ones.default,
            aten.full_like.default, aten.zeros_like.default, aten.ones_like.default,
            aten.scatter.src, aten.scatter.value, aten.scatter_add.default, aten.index_put.default,
        }
    return _indexing_table


def _tensor_operands(torch, node):
    """The fake tensors of a node's tensor operands (in lists too)."""
    found = []

    def visit(a):
        if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor):
            found.append(a.meta["val"])
        return a

    torch.fx.node.map_aggregate((node.args, node.kwargs), visit)
    return found


def _indirect_load_ops():
    """The part of _indexing_ops that reads at computed offsets (an index
    out of range must raise: see try_indexing)."""
    global _indirect_table
    if _indirect_table is None:
        import torch

        aten = torch.ops.aten
        _indirect_table = {aten.embedding.default, aten.index_select.default, aten.gather.default,
                           aten.index.Tensor, aten.scatter.src, aten.scatter.value, aten.scatter_add.default,
                           aten.index_put.default}
    return _indirect_table


def _view_ops():
    """ATen ops whose result is a view of input 0 (aliases its memory): each
    becomes a VIEW node, read by kernels through an index remap."""
    global _view_table
    if _view_table is None:
        import torch

        aten = torch.ops.aten
        names = ["view.default", "_unsafe_view.default", "_reshape_alias.default", "t.default", "transpose.int",
                 "permute.default", "expand.default", "unsqueeze.default", "squeeze.default", "squeeze.dim",
                 "squeeze.dims", "slice.Tensor", "select.int", "narrow.default", "detach.default", "alias.default",
                 "as_strided.default", "unfold.default", "diagonal.default", "numpy_T.default", "view_as.default",
                 "expand_as.default", "movedim.int", "swapaxes.default", "unflatten.int", "flatten.using_ints",
                 # several outputs, each a view of input 0
                 "split.Tensor", "split_with_sizes.default", "unbind.int", "chunk.default",
                 "tensor_split.sections", "tensor_split.indices", "unsafe_split.Tensor"]
        table = set()
        for name in names:
            packet, _, overload = name.partition(".")
            ov = getattr(getattr(aten, packet, None), overload, None)
            if ov is not None:
                table.add(ov)
        _view_table = table
    return _view_table


def _wick_decompositions():
    """ATen ops rewritten into ops wick lowers natively before import (a small,
    exact set: softmax and friends become amax/sub/exp/sum/div kernels)."""
    import torch
    from torch._decomp import get_decompositions

    aten = torch.ops.aten
    table = get_decompositions([
        aten._softmax, aten._log_softmax, aten._softmax_backward_data, aten.silu, aten.silu_backward,
        aten.threshold_backward, aten.sigmoid_backward, aten.tanh_backward, aten.hardtanh,
        aten.square, aten.clamp_min, aten.clamp_max, aten.masked_fill,
        # 1 - mask in attention (rsub) and the ones/zeros a graph makes from
        # another tensor's metadata: pointwise work and creation ops, not
        # extern calls that allocate and fill
        aten.rsub, aten.new_ones, aten.new_zeros, aten.new_full,
        # the math attention of F.scaled_dot_product_attention (T5's in
        # training, where its position bias needs a gradient): softmax with
        # the rows that are all -inf zeroed (softmax, eq, all, where), the
        # ops eager's kernel runs, instead of an extern call
        aten._safe_softmax,
    ])
    # Normalisations and backward ops whose eager kernels keep float32
    # intermediates for 16-bit inputs in their own order: decomposed for
    # float32/float64 only, so 16-bit results stay bit-identical to eager's
    # (the decomposition returns NotImplemented and the op is traced as is).
    wide = get_decompositions([
        # training: the backward ops of layer norm, gelu and log_softmax become
        # pointwise work and row sums that fuse with their neighbours
        aten.native_layer_norm_backward, aten.gelu_backward, aten._log_softmax_backward_data,
        # batch norm (inference and training) and group norm: statistics and
        # the normalisation as native reductions and pointwise work
        aten._native_batch_norm_legit_no_training, aten._native_batch_norm_legit, aten.native_batch_norm,
        aten._native_batch_norm_legit_functional, aten._batch_norm_with_update_functional,
        aten.native_group_norm, aten.native_batch_norm_backward, aten.native_group_norm_backward,
        # the cross-entropy loss: a gather, a masked sum and a one-element
        # scatter that fuse with log_softmax and its backward (an extern
        # nll_loss_backward zero-fills a logits-sized tensor first)
        aten.nll_loss_forward, aten.nll_loss_backward,
    ])
    # Batch norm in eval mode on CUDA is decomposed for 16-bit inputs too (as
    # inductor does): float32 arithmetic with one rounding at the end, so the
    # normalisation fuses with the convolution's epilogue (ReLU, the residual
    # add) instead of a cuDNN pass of its own. The result may differ from
    # cuDNN's in the last bit of a bfloat16 (another order of float32 steps).
    # In training 16-bit batch and group norm stay cuDNN's unless
    # WICK_CUDA_NORM_TRAINING=decompose: decomposed, their statistics are
    # per-channel column reductions over channels-last tensors. Measured on
    # the H200 (resnet50's bf16 step): 50.5 ms of device time when each block
    # of channels was one program, 17.5 ms with those reductions split across
    # programs, against 14.9 ms with cuDNN's batch norm, and the first call
    # took 48 s instead of 16 (many more kernels to compile and tune).
    eval_bn = {aten._native_batch_norm_legit_no_training.default: None, aten._native_batch_norm_legit.default: 5}
    training = os.environ.get("WICK_CUDA_NORM_TRAINING", "aot").strip() == "decompose"
    norms = {aten._native_batch_norm_legit_no_training, aten._native_batch_norm_legit, aten.native_batch_norm,
             aten._native_batch_norm_legit_functional, aten._batch_norm_with_update_functional,
             aten.native_batch_norm_backward, aten.native_group_norm, aten.native_group_norm_backward}
    cuda_16bit = {ov for packet in norms for ov in (getattr(packet, name) for name in packet.overloads())}
    for op, fn in wide.items():
        if training and op in cuda_16bit:
            table[op] = _wide_floats_only(torch, fn, cuda_16bit=True)
        else:
            table[op] = _wide_floats_only(torch, fn, eval_bn.get(op, -1) if op in eval_bn else -1)
    table[aten.cumsum.default] = _cumsum_converted_first(torch)
    table[aten.convolution.default] = _conv_bias_as_add(torch)
    table[aten.native_layer_norm.default] = _mixed_layer_norm_in_float32(torch)
    return table


def _mixed_layer_norm_in_float32(torch):
    """layer_norm of a 16-bit CPU input with float32 weight/bias (BERT's head
    under CPU autocast): eager's mixed-dtype kernel normalises the input
    widened to float32, rounds the output once to the input's dtype, and
    returns float32 mean and rstd, which its backward kernel requires. The
    op's meta function says the statistics have the input's dtype, so a
    forward compiled from the op as traced saved 16-bit statistics and the
    backward kernel raised. Traced as that float32 layer_norm and one
    conversion instead: the same values, and float32 statistics for the
    backward (autograd still differentiates the op itself)."""
    aten = torch.ops.aten

    def decompose(x, normalized_shape, weight, bias, eps):
        params = [p for p in (weight, bias) if p is not None]
        if (x.device.type != "cpu" or x.dtype not in (torch.bfloat16, torch.float16) or not params
                or any(p.dtype != torch.float32 for p in params)):
            return NotImplemented
        out, mean, rstd = aten.native_layer_norm.default(
            torch.ops.prims.convert_element_type.default(x, torch.float32), normalized_shape, weight, bias, eps)
        return torch.ops.prims.convert_element_type.default(out, x.dtype), mean, rstd

    return decompose


def _conv_bias_as_add(torch, devices=("cuda",)):
    """A convolution with a bias, on CUDA: the convolution without it, then
    the bias added as a pointwise op of the graph, which fuses into the
    kernel after it (ConvNeXt's layer norm, an activation). Eager's cuDNN
    convolutions add the bias in a pass of their own over the output (40 of
    ConvNeXt-B's 338 kernels, 0.9 of its 10.4 ms on the H200); inductor
    splits it off the same way. The sum is rounded as eager's is when nothing
    fuses (the convolution's result in its dtype, then a float32 add); fused,
    the rounding after the add is left to the consumer. On the CPU oneDNN adds
    the bias inside the convolution, so it stays there."""
    aten = torch.ops.aten

    def decompose(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
        if bias is None or x.device.type not in devices or x.dtype != bias.dtype:
            return NotImplemented
        out = aten.convolution.default(x, weight, None, stride, padding, dilation, transposed, output_padding, groups)
        return aten.add.Tensor(out, aten.view.default(bias, [1, bias.shape[0]] + [1] * (out.dim() - 2)))

    return decompose


def _cumsum_converted_first(torch):
    """cumsum whose result dtype differs from its input's (a bool or int32
    mask counted in int64: transformers' packed-sequence check in LLaMA's
    mask code): the conversion as a graph op of its own, a native CONVERT
    that fuses with the kernel making the mask, then cumsum of the converted
    tensor. Eager's cumsum converts its input to the result dtype first
    (an extra allocation and pass inside the extern call, 3x the call's cost
    in LLaMA's step); the sums are the same."""
    aten = torch.ops.aten

    def decompose(x, dim, dtype=None):
        want = dtype if dtype is not None else (
            torch.int64 if not (x.dtype.is_floating_point or x.dtype.is_complex) else x.dtype)
        if want == x.dtype:
            return NotImplemented  # traced as it is: nothing to convert
        if not (want.is_floating_point or want == torch.int64):
            # cumsum without dtype= widens a narrower integer to int64: the
            # converted tensor's sums would not have the dtype asked for
            return NotImplemented
        return aten.cumsum.default(torch.ops.prims.convert_element_type.default(x, want), dim)

    return decompose


def _wide_floats_only(torch, fn, cuda_eval_training_arg=-1, cuda_16bit=False):
    """fn for float32/float64 inputs only (NotImplemented keeps the op as it
    is). cuda_eval_training_arg: a batch norm that also takes 16-bit inputs on
    CUDA when it is not training (None: the op never trains; k: args[k] says).
    cuda_16bit: float16/bfloat16 inputs too, training or not, when every
    tensor is on CUDA."""
    def decompose(*args, **kwargs):
        tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
        if any(t.dtype in (torch.float16, torch.bfloat16) for t in tensors):
            if not all(t.device.type == "cuda" for t in tensors):
                return NotImplemented
            if cuda_16bit:
                return fn(*args, **kwargs)
            if cuda_eval_training_arg == -1:
                return NotImplemented
            k = cuda_eval_training_arg
            training = kwargs.get("training", args[k] if k is not None and k < len(args) else False)
            if training is not False:
                return NotImplemented
        return fn(*args, **kwargs)

    return decompose


def _fresh_result_ops(aten):
    """Ops whose result is a new tensor (never an input or a view of one), in
    wick's plan as in eager: an extern call's own output or the generated
    embedding gradient (codegen/pipeline.c). A native op is not here: the
    importer may hand its consumer the very value it read (a no-op conversion)."""
    return (aten.mm.default, aten.addmm.default, aten.bmm.default, aten.embedding_dense_backward.default)


class _StandIn:
    """An FX call the importer makes in place of one of the graph's (the
    fields extern() reads: target, args, kwargs, meta, users)."""

    def __init__(self, target, args, meta):
        self.target, self.args, self.kwargs, self.meta, self.users = target, args, {}, meta, {}


class _AtenImporter:
    def __init__(self, torch, gm, bindings, native_indexing=True):
        global _native_table
        if _native_table is None:
            _native_table = _aten_native()
        self.torch = torch
        self.gm = gm
        self.bindings = bindings  # sympy symbol -> int, for symbolic sizes
        self.g = _C.Graph()
        self.env = {}
        self.externs = []
        self.tensor_inputs = []  # placeholder positions that are graph inputs
        self.nnative = 0
        self.nextern = 0
        self.nview = 0
        self.extern_names = {}
        self.native_indexing = native_indexing  # indirect loads as kernels (else extern calls)
        self.nindirect = 0  # indirect loads made native
        # batch norms updating their running statistics in place (_StatsInPlace)
        self.stats_outputs = None  # AOTAutograd's mutation and saved output positions, or None: never
        self.stats_plan = {}  # functional batch-norm node -> its _StatsInPlace
        self.stats_aliases = {}  # new-statistics node -> the placeholder it is, updated in place
        self.stats_views = {}  # output position -> the node (a buffer updated in place) whose alias it returns
        self.stats_runs = []  # per in-place batch norm: calls made (read when a run fails)
        self.stats_slots = {}  # per in-place batch norm: (output position, its buffer's input position)
        self.stats_order = []  # the stats_slots of each in-place batch norm, in stats_runs' order
        self.stats_counters = {}  # add(counter, 1) node -> the counter's placeholder (plan_counters)
        self.stats_counter_slots = []  # per counter: (output position, its buffer's input position)

    # -- values ---------------------------------------------------------------
    def concrete(self, x):
        """A SymInt/SymFloat/SymBool as the Python number it is for these sizes."""
        torch = self.torch
        if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            expr = x.node.expr
            if self.bindings:
                try:
                    val = expr.xreplace(self.bindings)
                    if isinstance(val, (bool, int, float)) or val.is_number:
                        return bool(val) if isinstance(x, torch.SymBool) else (
                            int(val) if isinstance(x, torch.SymInt) else float(val))
                except (TypeError, ValueError, AttributeError):  # fall back to the hint
                    pass
            hint = x.node.hint
            if hint is None:
                raise _Unsupported(f"a size without a value ({expr}): data-dependent shapes")
            return hint
        if isinstance(x, (list, tuple)):
            return type(x)(self.concrete(v) for v in x)
        return x

    def on_graph_device(self, dev):
        dev = self.torch.device(dev)
        if dev.type == "cuda" and dev.index is None:
            dev = self.torch.device("cuda", self.torch.cuda.current_device())
        return dev == self.device

    def meta_of(self, t):
        return {"dtype": t.dtype, "sizes": tuple(self.concrete(s) for s in t.shape),
                "strides": tuple(self.concrete(s) for s in t.stride()),
                "device": str(t.device), "requires_grad": bool(t.requires_grad)}

    # -- the graph ------------------------------------------------------------
    def run(self, example_inputs):
        torch = self.torch
        import torch.fx

        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(example_inputs):
            raise _Unsupported("example inputs do not match the graph's placeholders")
        self.layout_free = self.layout_free_nodes()
        # the graph's device: CPU (C kernels) or one CUDA device (Triton kernels)
        devices = {placeholders[i].meta.get("val", t).device for i, t in enumerate(example_inputs)
                   if isinstance(placeholders[i].meta.get("val", t), torch.Tensor)}
        if len(devices) > 1:
            raise _Unsupported(f"inputs on several devices ({', '.join(sorted(map(str, devices)))})")
        if not devices:
            # no tensor input (torch.zeros(3, device="cuda"), a window function):
            # the device the graph's own tensors are made on
            devices = {v.device for v in (n.meta.get("val") for n in self.gm.graph.nodes if n.op == "call_function")
                       if isinstance(v, torch.Tensor)}
            if len(devices) > 1:
                raise _Unsupported(f"tensors made on several devices ({', '.join(sorted(map(str, devices)))})")
        self.device = devices.pop() if devices else torch.device("cpu")
        if self.device.type not in ("cpu", "cuda"):
            raise _Unsupported(f"inputs on {self.device}: wick compiles for CPU and CUDA")
        folds, folded_mms = self.addmm_folds()
        self.plan_stats_in_place(placeholders)
        for i, node in enumerate(placeholders):
            val = node.meta.get("val", example_inputs[i])
            if isinstance(val, torch.Tensor):
                if val.layout != torch.strided:
                    raise _Unsupported(f"input {node.name} has layout {val.layout}")
                example = example_inputs[i]
                if isinstance(example, torch.Tensor) and not example.is_complex() and example.is_neg():
                    # kernels would read its memory without the pending sign
                    # (guards recompile for an input without the bit)
                    raise _Unsupported(f"input {node.name} has a lazy negation bit (the imaginary part of a "
                                       "conjugate view)")
                m = self.meta_of(val)
                self.env[node] = self.g.input(m["dtype"], m["sizes"], m["strides"], requires_grad=m["requires_grad"],
                                              source=node.name, any_dtype=True, device=m["device"])
                self.tensor_inputs.append(i)
            else:
                self.env[node] = _Const(self.concrete(val))
        output = None
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                output = node.args[0]
                continue
            if node.op == "get_attr":
                self.env[node] = self.constant(node)
                continue
            if node.op != "call_function":
                raise _Unsupported(f"FX node {node.op} {node.target}")
            if node in folded_mms:
                continue  # computed by the addmm its one user becomes
            if node in self.stats_aliases:  # the buffer the in-place batch norm updated
                self.env[node] = self.env[self.stats_aliases[node]]
                continue
            if node in self.stats_plan:
                self.env[node] = self.stats_in_place(node, self.stats_plan[node])
                continue
            if node in self.stats_counters:
                if node not in self.env:  # the first: all of them, one call
                    self.counters_in_place()
                continue
            if node in folds:
                self.env[node] = self.extern(folds[node], node.meta["val"])
                continue
            try:
                self.env[node] = self.call(node)
            except _C.CompileError as exc:  # name the node in the fallback's reason
                raise _C.CompileError(f"{node.name} ({_target_name_aten(node.target)}): {exc}") from exc
        return self.outputs(output)

    def plan_stats_in_place(self, placeholders):
        """Which functional batch norms run as their in-place op (see
        _StatsInPlace): each running statistic a placeholder that nothing
        else reads, its new value (or its conversion back to the buffer's
        dtype) read by nothing but the graph's outputs: once as AOTAutograd's
        mutation output of that very input, otherwise only as saved for the
        backward. Fills stats_plan, stats_aliases and stats_views."""
        if self.stats_outputs is None:
            return
        import operator

        torch = self.torch
        mutated, saved, regenerated = self.stats_outputs
        position = {node: i for i, node in enumerate(placeholders)}
        output = [n for n in self.gm.graph.nodes if n.op == "output"][0].args[0]
        output = list(output) if isinstance(output, (list, tuple)) else [output]
        for node in self.gm.graph.nodes:
            variant = _StatsInPlace.variants(torch).get(node.target)
            if variant is None or not variant.training(node) or len(node.args) < 5 or node.kwargs:
                continue
            stats = node.args[3], node.args[4]
            if not all(isinstance(b, torch.fx.Node) and b.op == "placeholder" for b in stats) or stats[0] is stats[1]:
                continue
            if any(len(b.users) != 1 for b in stats):
                continue  # read elsewhere too: their old values are needed
            items = {}
            for u in node.users:
                if u.target is not operator.getitem or u.kwargs:
                    break
                items.setdefault(u.args[1], []).append(u)
            else:
                aliases, views, slots = {}, {}, []
                for k, buffer in zip(variant.new_stats, stats):
                    at = position[buffer]
                    found = self.stats_final(buffer, items.get(k, []), output, mutated, saved, regenerated, at)
                    if found is None:
                        break
                    chain, at_mutation, at_saved = found
                    aliases.update((n, buffer) for n in chain)
                    views.update((i, buffer) for i in [at_mutation, *at_saved])
                    slots += [(i, at) for i in [at_mutation, *at_saved]]
                else:
                    self.stats_plan[node] = variant
                    self.stats_aliases.update(aliases)
                    self.stats_views.update(views)
                    self.stats_slots[node] = slots
        if self.stats_plan:  # (where batch norm is native, so is its counter's add: left to fuse)
            self.plan_counters(position, output, mutated, regenerated)

    def plan_counters(self, position, output, mutated, regenerated):
        """The batch norms' num_batches_tracked += 1 (add(counter, 1) of an
        int64 0-d placeholder that nothing else reads, returned only as its
        mutation output, or as an output AOTAutograd returns the counter
        itself for) in a graph whose batch norms update their running
        statistics in place: all made by one _foreach_add_ on the buffers,
        returned as aliases (see _StatsInPlace), instead of a kernel's fresh
        result that AOTAutograd copies back into each buffer."""
        torch = self.torch
        for node in self.gm.graph.nodes:
            if (node.op != "call_function" or node.target is not torch.ops.aten.add.Tensor or node.kwargs
                    or len(node.args) != 2 or type(node.args[1]) is not int or node.args[1] != 1):
                continue
            counter = node.args[0]
            if not isinstance(counter, torch.fx.Node) or counter.op != "placeholder" or len(counter.users) != 1:
                continue
            want, got = counter.meta.get("val"), node.meta.get("val")
            if not all(isinstance(t, torch.Tensor) and t.dtype == torch.int64 and t.dim() == 0 for t in (want, got)):
                continue
            if any(u.op != "output" for u in node.users):
                continue
            at = position[counter]
            where = [i for i, a in enumerate(output) if a is node]
            if (len([i for i in where if mutated.get(i) == at]) != 1
                    or any(mutated.get(i) != at and regenerated.get(i) != at for i in where)):
                continue
            self.stats_counters[node] = counter
            for i in where:
                self.stats_views[i] = node
                self.stats_counter_slots.append((i, at))

    def counters_in_place(self):
        """The one extern call that adds 1 to every counter of
        stats_counters; each add node's value is its buffer, returned."""
        from wick._C import ExternInput

        counters = list(self.stats_counters.values())
        k = len(self.stats_runs)
        self.stats_runs.append(0)
        self.stats_order.append(list(self.stats_counter_slots))
        idx = len(self.externs)
        fn = _counting_calls(_bump_counters, self.stats_runs, k)
        self.externs.append((fn, tuple(ExternInput(i) for i in range(len(counters))), None,
                             tuple(range(len(counters)))))
        self.nextern += 1
        name = "aten._foreach_add_.Scalar"
        self.extern_names[name] = self.extern_names.get(name, 0) + 1
        ids = self.g.extern(idx, [self.env[c] for c in counters], [self.meta_of(c.meta["val"]) for c in counters],
                            name=name)
        for add, vid in zip(self.stats_counters, ids):
            self.env[add] = vid

    def stats_final(self, buffer, getitems, output, mutated, saved, regenerated, at):
        """(the nodes that stand for buffer's new value, the output position
        AOTAutograd copies it back into buffer from, the other output
        positions reading it: saved ones, and those AOTAutograd returns
        buffer itself for), or None where it is read otherwise. at: buffer's
        placeholder position."""
        torch = self.torch
        if len(getitems) != 1:
            return None
        chain = [getitems[0]]
        last = chain[0]
        want = buffer.meta.get("val")
        if not isinstance(want, torch.Tensor):
            return None
        if any(u.op != "output" for u in last.users):
            conv = list(last.users)
            if len(conv) != 1 or conv[0].target is not torch.ops.aten._to_copy.default or conv[0].args != (last,):
                return None
            kw = dict(conv[0].kwargs)
            if (kw.pop("dtype", None) != want.dtype or kw.pop("layout", torch.strided) != torch.strided
                    or kw.pop("device", want.device) != want.device or kw):
                return None
            last = conv[0]
            chain.append(last)
            if any(u.op != "output" for u in last.users):
                return None
        got = last.meta.get("val")
        if (not isinstance(got, torch.Tensor) or got.dtype != want.dtype or got.shape != want.shape
                or got.stride() != want.stride()):
            return None
        where = [i for i, a in enumerate(output) if a is last]
        mine = [i for i in where if mutated.get(i) == at]
        rest = [i for i in where if i not in mine]
        if len(mine) != 1 or any(i not in saved and regenerated.get(i) != at for i in rest):
            return None
        return chain, mine[0], rest

    def stats_in_place(self, node, variant):
        """The functional batch norm as its in-place op on the running
        buffers: the extern returns only the items the in-place op has."""
        val = node.meta["val"]
        k = len(self.stats_runs)
        self.stats_runs.append(0)
        self.stats_order.append(self.stats_slots[node])
        return self.extern(node, type(val)(val[:variant.nitems]), target=variant.in_place,
                           counted=(self.stats_runs, k))

    def stats_restore(self):
        """The _StatsRestore of this graph's in-place batch norms."""
        return _StatsRestore(self.stats_runs, self.stats_order)

    def addmm_folds(self):
        """add(mm(a, b), t) -> addmm(t, a, b), one extern call where the mm's
        result would otherwise be written, then read back by a kernel of its
        own: the mm's only user is the add, and the add feeds no op that
        could fuse it into a kernel anyway (e.g. a tied embedding's gradient,
        the embedding's scatter plus the output projection's mm, a graph
        output). t has the mm's shape or is a row vector over its columns;
        float32/float64 on CPU, all of one dtype, no alpha. Returns ({add
        node: a stand-in addmm or addmm_ node}, {folded mm and transpose nodes})."""
        torch = self.torch
        aten = torch.ops.aten
        folds, mms = {}, set()
        if self.device.type != "cpu":
            return folds, mms
        for node in self.gm.graph.nodes:
            if node.op != "call_function" or node.target is not aten.add.Tensor or node.kwargs or len(node.args) != 2:
                continue
            for k in (0, 1):
                mm, t = node.args[k], node.args[1 - k]
                # through pairs of transposes (t(t(mm)): AOTAutograd's
                # gradient of a weight read as w.t())
                chain = []
                while (isinstance(mm, torch.fx.Node) and mm.op == "call_function" and mm.target is aten.t.default
                       and len(mm.users) == 1):
                    chain.append(mm)
                    mm = mm.args[0]
                if len(chain) % 2:
                    continue
                if not (isinstance(mm, torch.fx.Node) and isinstance(t, torch.fx.Node) and mm is not t
                        and mm.op == "call_function" and mm.target is aten.mm.default and len(mm.users) == 1
                        and mm not in mms):
                    continue
                mv, tv, av = mm.meta.get("val"), t.meta.get("val"), node.meta.get("val")
                if not all(isinstance(v, torch.Tensor) for v in (mv, tv, av)):
                    continue
                if (mv.dtype not in (torch.float32, torch.float64) or tv.dtype != mv.dtype or av.dtype != mv.dtype
                        or mv.device.type != "cpu" or tv.device.type != "cpu"):
                    continue
                shape = tuple(self.concrete(s) for s in mv.shape)
                if tuple(self.concrete(s) for s in av.shape) != shape or \
                        not _is_contiguous(shape, tuple(self.concrete(s) for s in av.stride())):
                    continue
                tshape = tuple(self.concrete(s) for s in tv.shape)
                if tshape != shape and tshape != shape[1:]:
                    continue
                if any(u.op == "call_function" and (u.target in _native_table or u.target in _view_ops())
                       for u in node.users):
                    continue
                # the addend in place when nothing else can see it: a fresh
                # result (extern or generated embedding gradient) read by this
                # add alone, of the sum's layout. addmm would allocate the sum
                # and copy t into it first: for a tied embedding's gradient a
                # vocabulary-sized copy into fresh pages (350 us of BERT's
                # step, more than the zero fill and scatter that made t);
                # addmm_ runs the same gemm (beta = 1 over t's values)
                inplace = (tshape == shape and t.op == "call_function" and t.target in _fresh_result_ops(aten)
                           and len(t.users) == 1
                           and _is_contiguous(shape, tuple(self.concrete(s) for s in tv.stride())))
                folds[node] = _StandIn(aten.addmm_.default if inplace else aten.addmm.default,
                                       (t, mm.args[0], mm.args[1]), node.meta)
                mms.add(mm)
                mms.update(chain)
                break
        return folds, mms

    def layout_free_nodes(self):
        """Nodes whose value may have any strides: not a graph output, and read
        only by ops of the native table whose own value is contiguous or again
        layout-free. Such a value feeds only ops whose results do not depend on
        strides (pointwise, reductions, conversions: natively or through torch),
        never a graph output or a stride-dependent op (as_strided), so a native
        kernel may produce it contiguous where eager would keep a permuted
        layout. A native-table op that ends up an extern with such an input is
        computed by torch from the same logical values; if generated kernels
        read its result, the runtime copies it into the promised layout."""
        torch = self.torch
        import torch.fx

        out_node = [n for n in self.gm.graph.nodes if n.op == "output"]
        outputs = set()
        if out_node:
            def collect(a):
                outputs.add(a)
                return a
            torch.fx.node.map_arg(out_node[0].args, collect)
        free = set()
        for node in reversed(list(self.gm.graph.nodes)):
            if node.op != "call_function" or node in outputs or node.target not in _native_table:
                continue
            users = list(node.users)
            agnostic = (torch.ops.aten.cat.default, torch.ops.aten.stack.default, torch.ops.aten.constant_pad_nd.default,
                        torch.ops.aten.slice_backward.default,
                        torch.ops.aten.embedding.default, torch.ops.aten.index_select.default,
                        torch.ops.aten.gather.default, torch.ops.aten.index.Tensor)
            if _touches_complex(torch, node, node.meta.get("val")):
                continue  # an extern call (complex values are torch's): eager's layout
            if users and all(u.op == "call_function" and (u.target in _native_table or u.target in agnostic) and
                             not _touches_complex(torch, u, u.meta.get("val")) and
                             (u in free or _meta_contiguous(self, u)) for u in users):
                free.add(node)
        return free

    def constant(self, node):
        torch = self.torch
        obj = self.gm
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        if not isinstance(obj, torch.Tensor):
            return _Const(obj)
        const = obj  # no torch call here: the compiler may run under a fake mode
        meta = self.meta_of(const)
        fetch = lambda: const  # noqa: E731  an extern with no inputs: fetch the constant
        if const.dim() == 0 and const.device.type == "cpu" and self.device.type == "cuda":
            # a 0-d CPU constant in a CUDA graph (eager mixes them freely):
            # copied to the graph's device once, at its first call
            moved, device = [], self.device

            def fetch():
                if not moved:
                    moved.append(const.to(device))
                return moved[0]

            meta["device"] = str(device)
        idx = len(self.externs)
        self.externs.append(fetch)
        self.nextern += 1
        return self.g.extern(idx, [], [meta], name=f"constant {node.target}")[0]

    def lookup(self, arg):
        """FX argument -> ('v', value id) | ('c', Python value) | ('m', _Multi)."""
        import torch.fx

        if isinstance(arg, torch.fx.Node):
            e = self.env[arg]
            if isinstance(e, int):
                return "v", e
            if isinstance(e, _Const):
                return "c", e.value
            return "m", e
        return "c", self.concrete(arg)

    def call(self, node):
        import operator

        torch = self.torch
        target = node.target
        if "val" not in node.meta:
            raise _Unsupported(f"{_target_name_aten(target)}: the node has no fake-tensor metadata")
        val = node.meta["val"]
        if target is operator.getitem:
            kind, src = self.lookup(node.args[0])
            if kind == "m":
                item = src.items[node.args[1]]
                if isinstance(item, _Opaque):
                    raise _Unsupported(item.reason)
                return item if isinstance(item, int) else _Const(item)
        if not isinstance(val, (torch.Tensor, list, tuple)):
            schema = getattr(target, "_schema", None)
            if schema is not None and schema.is_mutable:
                raise _Unsupported(f"{target} mutates its input")
            if val is None and schema is not None:
                return _Const(None)  # e.g. aten._assert_tensor_metadata: a check, no value
            return _Const(self.concrete(val))  # a size computation: specialised
        schema = getattr(target, "_schema", None)
        if schema is not None and schema.is_mutable:
            raise _Unsupported(f"{target} mutates its input")
        if _touches_complex(torch, node, val):
            # wick's kernels compute no complex value (graph.h): torch does,
            # whatever the op (views of complex tensors included: their conj
            # and neg bits are torch's to resolve)
            return self.extern(node, val)
        if isinstance(val, torch.Tensor):
            native = _native_table.get(target)
            if native is not None:
                vid = self.try_native(node, native, val)
                if vid is not None:
                    self.nnative += 1
                    return vid
        elif target is torch.ops.aten.var_mean.correction:
            multi = self.try_var_mean(node, val)
            if multi is not None:
                self.nnative += 1
                return multi
        elif target is torch.ops.aten.native_layer_norm.default:
            multi = self.try_layer_norm(node, val)
            if multi is not None:
                self.nnative += 1
                return multi
        if isinstance(val, torch.Tensor) and target in (torch.ops.aten.cat.default, torch.ops.aten.stack.default,
                                                        torch.ops.aten.constant_pad_nd.default,
                                                        torch.ops.aten.slice_backward.default):
            vid = self.try_cat_pad(node, val)
            if vid is not None:
                self.nnative += 1
                return vid
        if isinstance(val, torch.Tensor) and target in _indexing_ops():
            vid = self.try_indexing(node, val)
            if vid is not None:
                self.nnative += 1
                return vid
        if isinstance(val, torch.Tensor) and target in _view_ops():
            vid = self.try_view(node, val)
            if vid is not None:
                self.nview += 1
                return vid
        if isinstance(val, (list, tuple)) and target in _view_ops() and val and \
                all(isinstance(t, torch.Tensor) for t in val):
            ids = [self.try_view(node, t) for t in val]  # split/unbind: one view per item
            if all(i is not None for i in ids):
                self.nview += len(ids)
                return _Multi(ids, type(val))
        return self.extern(node, val)

    def try_cat_pad(self, node, val):
        """aten.cat / aten.constant_pad_nd -> a CAT or PAD node (clamped loads
        selected by index comparisons), or None."""
        import torch.fx

        torch, g = self.torch, self.g
        if not self.on_graph_device(val.device) or val.layout != torch.strided:
            return None
        try:
            if node.target in (torch.ops.aten.cat.default, torch.ops.aten.stack.default):
                tensors = node.args[0]
                dim = self.concrete(node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0))
                if not isinstance(tensors, (list, tuple)) or not tensors or \
                        not all(isinstance(t, torch.fx.Node) for t in tensors):
                    return None
                ins = [self.lookup(t) for t in tensors]
                if any(k != "v" for k, _ in ins) or not isinstance(dim, int):
                    return None
                ins = [v for _, v in ins]
                if node.target is torch.ops.aten.stack.default:  # cat of views with a new size-1 dim
                    nd = len(g.value(ins[0])["sizes"]) + 1
                    dim = dim + nd if dim < 0 else dim
                    if not 0 <= dim < nd:
                        return None
                    views = []
                    for v in ins:
                        sz, st = list(g.value(v)["sizes"]), list(g.value(v)["strides"])
                        sz.insert(dim, 1)
                        st.insert(dim, st[dim] * max(sz[dim + 1], 1) if dim < len(st) else 1)
                        views.append(g.op("VIEW", [v], ints=[nd, *sz, *st, 0]))
                    ins = views
                vid = g.op("CAT", ins, ints=[dim])
            elif node.target is torch.ops.aten.slice_backward.default:
                # the gradient of x[..., start:end] (step 1): zeros around it, a PAD
                x = self.lookup(node.args[0])
                sizes, dim, start, end, step = (self.concrete(a) for a in node.args[1:6])
                if x[0] != "v" or step != 1 or not isinstance(dim, int):
                    return None
                nd = len(sizes)
                dim = dim + nd if dim < 0 else dim
                if not 0 <= dim < nd:
                    return None
                n = sizes[dim]
                start = min(max(start + n if start < 0 else start, 0), n)
                end = min(max(end + n if end < 0 else end, start), n)
                if list(g.value(x[1])["sizes"]) != [end - start if d == dim else sizes[d] for d in range(nd)]:
                    return None
                per = []
                for d in range(nd):
                    per += [start, n - end] if d == dim else [0, 0]
                vid = g.op("PAD", [x[1], g.scalar(0)], ints=per)
            else:
                x = self.lookup(node.args[0])
                pads = self.concrete(node.args[1])
                value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value", 0)
                value = self.concrete(value)
                if x[0] != "v" or not isinstance(value, (bool, int, float)) or len(pads) % 2:
                    return None
                nd = len(g.value(x[1])["sizes"])
                if len(pads) > 2 * nd:
                    return None
                per = []
                for d in range(nd):  # torch lists (lo, hi) from the last dim backwards
                    k = nd - 1 - d
                    per += [pads[2 * k], pads[2 * k + 1]] if 2 * k + 1 < len(pads) else [0, 0]
                vid = g.op("PAD", [x[1], g.scalar(value)], ints=per)
        except (ValueError, TypeError):
            return None
        got, m = g.value(vid), self.meta_of(val)
        if got["dtype"] != str(m["dtype"]).replace("torch.", "") or tuple(got["sizes"]) != m["sizes"]:
            return None
        if not _is_contiguous(m["sizes"], m["strides"]) and node not in self.layout_free:
            return None
        return vid

    def try_indexing(self, node, val):
        """Indexing and creation ops (ops.def notes 11, 12) -> INDEX, GATHER,
        ARANGE, FULL, TRIL or TRIU nodes, or None (then an extern).
        An index out of range: a C kernel reports it (the runtime raises
        IndexError and the guard below reruns the graph eagerly for eager's
        own error); a Triton kernel asserts it on the device (wick/_triton.py
        compiles such kernels with device asserts on), a device-side
        assertion as eager's own CUDA indexing kernels raise.
        WICK_CUDA_INDEXING=0 keeps indexing extern on CUDA. Under Triton's
        interpreter (CPU tests) indexing stays extern: the interpreter
        cannot raise a device assertion. Creation ops (arange, full, tril,
        triu and the zeros/ones forms) read no index: native on every
        target."""
        import torch.fx

        torch, g = self.torch, self.g
        aten = torch.ops.aten
        t = node.target
        if val.layout != torch.strided or not self.on_graph_device(val.device):
            return None
        # every tensor operand on the graph's device: x_cuda[idx_cpu] is legal
        # in eager, but a kernel cannot read the CPU index
        if not all(self.on_graph_device(v.device) for v in _tensor_operands(torch, node)):
            return None
        if t in _indirect_load_ops() and (not self.native_indexing or os.environ.get("WICK_TRITON") == "interpret" or (
                self.device.type == "cuda" and os.environ.get("WICK_CUDA_INDEXING", "1") == "0")):
            return None
        args = [self.lookup(a) for a in node.args]
        kw = {k: self.lookup(v) for k, v in node.kwargs.items()}

        def arg(i, name, default=None):
            if i < len(args):
                return args[i]
            return kw.get(name, ("c", default))

        def const(i, name, default=None):
            k, v = arg(i, name, default)
            if k != "c":
                raise _NotNative
            return v

        def tensor(i, name):
            k, v = arg(i, name)
            if k != "v":
                raise _NotNative
            return v

        dt_name = str(val.dtype).replace("torch.", "")
        try:
            if t is aten.embedding.default:
                vid = g.op("INDEX", [tensor(0, "weight"), tensor(1, "indices")], ints=[0, 0])
            elif t is aten.index_select.default:
                x, dim, idx = tensor(0, "self"), const(1, "dim"), tensor(2, "index")
                nd = len(g.value(x)["sizes"])
                dim = dim + nd if dim < 0 else dim
                if len(g.value(idx)["sizes"]) == 0:  # a 0-d index keeps the dim (size 1)
                    idx = g.op("VIEW", [idx], ints=[1, 1, 1, 0])
                vid = g.op("INDEX", [x, idx], ints=[0, dim])
            elif t is aten.gather.default:
                if const(3, "sparse_grad", False):
                    return None
                vid = g.op("GATHER", [tensor(0, "self"), tensor(2, "index")], ints=[const(1, "dim")])
            elif t is aten.index.Tensor:
                x = tensor(0, "self")
                raw = node.args[1] if len(node.args) > 1 else node.kwargs.get("indices")
                if not isinstance(raw, (list, tuple)):
                    return None
                ins, dims = [x], []
                for d, a in enumerate(raw):
                    if a is None:
                        continue
                    if not isinstance(a, torch.fx.Node):
                        return None
                    k, v = self.lookup(a)
                    if k != "v" or g.value(v)["dtype"] not in ("int64", "int32"):
                        return None  # bool masks select a data-dependent number of elements
                    ins.append(v)
                    dims.append(d)
                if not dims:
                    return None
                vid = g.op("INDEX", ins, ints=[1, *dims])
            elif t in (aten.scatter.src, aten.scatter.value, aten.scatter_add.default):
                x, dim, idx = tensor(0, "self"), const(1, "dim"), tensor(2, "index")
                k, src = arg(3, "src" if t is not aten.scatter.value else "value")
                if k == "c":
                    if not isinstance(src, (bool, int, float)):
                        return None
                    src = g.scalar(src)
                vid = self.scatter(val, x, idx, src, dim, int(t is aten.scatter_add.default), 0)
            elif t is aten.index_put.default:
                vid = self.index_put(val, tensor(0, "self"), node.args[1] if len(node.args) > 1 else None,
                                     tensor(2, "values"), bool(const(3, "accumulate", False)))
            elif t in (aten.tril.default, aten.triu.default):
                vid = g.op("TRIL" if t is aten.tril.default else "TRIU", [tensor(0, "self")],
                           ints=[const(1, "diagonal", 0)])
            elif t in (aten.arange.default, aten.arange.start, aten.arange.start_step):
                start = const(0, "start") if t is not aten.arange.default else 0
                step = const(2, "step", 1) if t is aten.arange.start_step else 1
                if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, step)):
                    return None
                if not val.is_floating_point() and not (isinstance(start, int) and isinstance(step, int)):
                    return None
                vid = g.op("ARANGE", [g.scalar(start), g.scalar(step)], ints=[val.shape[0]], dtype=val.dtype,
                           device=str(self.device))
            else:  # full, zeros, ones and their _like forms
                name = t._opname if hasattr(t, "_opname") else ""
                fill = {"zeros": 0, "zeros_like": 0, "ones": 1, "ones_like": 1}.get(name)
                if fill is None:
                    fill = const(1, "fill_value")
                if not isinstance(fill, (bool, int, float)):
                    return None
                if not val.is_floating_point() and val.dtype != torch.bool:
                    info = torch.iinfo(val.dtype)  # eager raises on overflow: keep its call
                    if not (fill == fill and info.min <= fill <= info.max):
                        return None
                vid = g.op("FULL", [g.scalar(fill)], ints=list(self.meta_of(val)["sizes"]), dtype=val.dtype,
                           device=str(self.device))
        except (_NotNative, ValueError, TypeError, IndexError):
            return None
        if vid is None:  # scatter/index_put declined
            return None
        got, m = g.value(vid), self.meta_of(val)
        if got["dtype"] != dt_name or tuple(got["sizes"]) != m["sizes"]:
            return None
        if not _is_contiguous(m["sizes"], m["strides"]) and node not in self.layout_free:
            return None
        self.nindirect += t in _indirect_load_ops()
        return vid

    # SCATTER reduces over the index's extent along dim for every output
    # element (ops.def note 13): native only where that stays cheap
    SCATTER_MAX_EXTENT = 128
    SCATTER_MAX_WORK = 1 << 24

    def scatter(self, val, x, idx, src, dim, add, wrap):
        g = self.g
        sizes = g.value(idx)["sizes"]
        nd = len(sizes)
        if not sizes or not -nd <= dim < nd:
            return None
        extent = sizes[dim % nd]
        if extent > self.SCATTER_MAX_EXTENT or val.numel() * extent > self.SCATTER_MAX_WORK:
            return None
        return g.op("SCATTER", [x, idx, src], ints=[dim, add, wrap])

    def index_put(self, val, x, indices, values, accumulate):
        """index_put with one int64/int32 index tensor at dim 0 (x[i] = v,
        x.index_put_((i,), v, accumulate)) as a SCATTER along dim 0: the
        index expanded over x's other dims, the values broadcast to
        [len(i), *x.shape[1:]]; negative indices wrap, as in indexing."""
        import torch.fx

        g = self.g
        if not isinstance(indices, (list, tuple)) or len(indices) != 1 or not isinstance(indices[0], torch.fx.Node):
            return None
        k, i = self.lookup(indices[0])
        if k != "v" or g.value(i)["dtype"] not in ("int64", "int32") or len(g.value(i)["sizes"]) != 1:
            return None
        if g.value(i)["dtype"] == "int32":
            i = g.op("CONVERT", [i], dtype=self.torch.int64)
        xs = list(g.value(x)["sizes"])
        n = g.value(i)["sizes"][0]
        shape = [n] + xs[1:]
        # the index over every dim of x: stride 0 past dim 0
        istride = g.value(i)["strides"][0]
        idx = g.op("VIEW", [i], ints=[len(shape), *shape, istride, *([0] * (len(shape) - 1)), 0])
        vs, vst = list(g.value(values)["sizes"]), list(g.value(values)["strides"])
        if len(vs) > len(shape):
            return None
        vs, vst = [1] * (len(shape) - len(vs)) + vs, [0] * (len(shape) - len(vs)) + vst
        if any(a not in (1, b) for a, b in zip(vs, shape)):
            return None
        src = g.op("VIEW", [values], ints=[len(shape), *shape,
                                           *[0 if a == 1 else st for a, st in zip(vs, vst)], 0])
        return self.scatter(val, x, idx, src, 0, int(accumulate), 1)

    def try_view(self, node, val):
        """A view op -> a VIEW node (sizes, strides and offset of its fake
        output over its input's memory), or None (then an extern). The base's
        layout in the wick graph must be the one the fake input has, so the
        offsets mean the same memory."""
        torch, g = self.torch, self.g
        # on the graph's device (CPU or CUDA alike: a view is an index remap in
        # the kernels that read it, or one as_strided where a tensor is needed)
        if not node.args or not self.on_graph_device(val.device) or val.layout != torch.strided:
            return None
        kind, vid = self.lookup(node.args[0])
        base = node.args[0].meta.get("val") if kind == "v" else None
        if not isinstance(base, torch.Tensor) or base.dtype != val.dtype:
            return None
        have = g.value(vid)
        want = self.meta_of(base)
        if tuple(have["sizes"]) != want["sizes"] or any(
                n != 1 and a != b for n, a, b in zip(want["sizes"], have["strides"], want["strides"])):
            return None
        from torch.multiprocessing.reductions import StorageWeakRef

        try:  # reshape/flatten copy where no view exists: only aliases are views
            if StorageWeakRef(val.untyped_storage()) != StorageWeakRef(base.untyped_storage()):
                return None
        except (RuntimeError, NotImplementedError):
            return None
        m = self.meta_of(val)
        offset = self.concrete(val.storage_offset()) - self.concrete(base.storage_offset())
        nd = len(m["sizes"])
        try:
            return g.op("VIEW", [vid], ints=[nd, *m["sizes"], *m["strides"], offset])
        except ValueError:
            return None

    def try_var_mean(self, node, val):
        """aten.var_mean -> (VAR, MEAN) native nodes over one input, or None."""
        g = self.g
        params = _var_params([self.lookup(a) for a in node.args],
                             {k: self.lookup(v) for k, v in node.kwargs.items()})
        if params is None:
            return None
        x, dims, correction, keepdim = params
        try:
            var = g.op("VAR", [x], dims=dims, keepdim=keepdim, correction=correction)
            mean = g.op("MEAN", [x], dims=dims, keepdim=keepdim)
        except ValueError:
            return None
        for vid, t in zip((var, mean), val):
            got, m = g.value(vid), self.meta_of(t)
            if got["dtype"] != str(m["dtype"]).replace("torch.", "") or tuple(got["sizes"]) != m["sizes"] or \
                    not _is_contiguous(m["sizes"], m["strides"]):
                return None
        return _Multi([var, mean], type(val))

    def try_layer_norm(self, node, val):
        """aten.native_layer_norm -> (LAYER_NORM, mean, rstd) as native nodes
        (mean and rstd get kernels only when something reads them), or None."""
        torch, g = self.torch, self.g
        args = [self.lookup(a) for a in node.args]
        if node.kwargs or len(args) != 5 or args[0][0] != "v" or args[1][0] != "c" or args[4][0] != "c":
            return None
        x, shape, eps = args[0][1], args[1][1], args[4][1]
        if not isinstance(eps, (int, float)) or not isinstance(shape, (list, tuple)) or not shape:
            return None
        if any(isinstance(t, torch.Tensor) and (t.device != self.device or t.layout != torch.strided) for t in val):
            return None
        nd = len(g.value(x)["sizes"])
        dims = tuple(range(nd - len(shape), nd))

        def param(a, default):
            if a == ("c", None):
                return g.scalar(default)
            return a[1] if a[0] == "v" else None

        w, b = param(args[2], 1.0), param(args[3], 0.0)
        if w is None or b is None:
            return None
        try:
            out = g.op("LAYER_NORM", [x, w, b], dims=dims, eps=float(eps))
            # the statistics come in the dtype the kernel reports (CUDA's for
            # 16-bit inputs: float32)
            stats_dtype = val[1].dtype if isinstance(val[1], torch.Tensor) else None
            xs = x
            if stats_dtype is not None and str(stats_dtype).replace("torch.", "") != g.value(x)["dtype"]:
                xs = g.op("CONVERT", [x], dtype=stats_dtype)
            mean = g.op("MEAN", [xs], dims=dims, keepdim=True)
            var = g.op("VAR", [xs], dims=dims, keepdim=True, correction=0.0)
            rstd = g.op("RSQRT", [g.op("ADD", [var, g.scalar(float(eps))])])
        except ValueError:
            return None
        for vid, t in zip((out, mean, rstd), val):
            got = g.value(vid)
            m = self.meta_of(t)
            if got["dtype"] != str(m["dtype"]).replace("torch.", "") or tuple(got["sizes"]) != m["sizes"] or \
                    not _is_contiguous(m["sizes"], m["strides"]):
                return None  # the dead nodes get no kernel
        return _Multi([out, mean, rstd], type(val))

    # -- native ops -----------------------------------------------------------
    def try_native(self, node, native, val):
        """The value id of a native wick node computing `node`, or None (then
        the caller makes it an extern)."""
        torch = self.torch
        op, kind = native
        args = [self.lookup(a) for a in node.args]
        kwargs = {k: self.lookup(v) for k, v in node.kwargs.items()}
        if any(k == "m" for k, _ in args) or any(k == "m" for k, _ in kwargs.values()):
            return None
        if val.device != self.device or val.layout != torch.strided:
            return None
        g = self.g

        def operand(a):
            k, v = a
            if k == "v":
                return v
            if isinstance(v, (bool, int, float)):
                return g.scalar(v)
            raise _NotNative

        try:
            if kind in ("binary", "alpha", "ternary", "unary"):
                n = {"unary": 1, "binary": 2, "alpha": 2, "ternary": 3}[kind]
                if len(args) != n or any(k not in ("alpha",) for k in kwargs):
                    return None
                if all(k == "c" for k, _ in args):
                    return None
                ins = [operand(a) for a in args]
                alpha = kwargs.get("alpha", ("c", 1))[1]
                if kind == "alpha" and alpha != 1:
                    if not isinstance(alpha, (bool, int, float)):
                        return None
                    # torch computes other * alpha in the result dtype of
                    # (input, other): convert other to it first, then scale
                    result = g.value(g.op(op, ins))["dtype"]  # dtype and torch's checks; left dead
                    other = ins[1]
                    if g.value(other)["dtype"] != result or g.value(other)["is_wrapped_number"]:
                        other = g.op("CONVERT", [other], dtype=result)
                    ins[1] = g.op("MUL", [other, g.scalar(alpha)])
                vid = g.op(op, ins)
            elif kind in ("reduce", "amax"):
                if not args or args[0][0] != "v":
                    return None
                pos = [v for _, v in args[1:]]
                kw = {k: v for k, (_, v) in kwargs.items()}
                if kind == "amax":
                    dims = pos[0] if len(pos) > 0 else kw.get("dim", [])
                    keepdim = pos[1] if len(pos) > 1 else kw.get("keepdim", False)
                    dtype = None
                elif node.target in (torch.ops.aten.sum.default, torch.ops.aten.mean.default,
                                     torch.ops.aten.prod.default):
                    dims, keepdim, dtype = None, False, kw.get("dtype")
                else:
                    dims = pos[0] if len(pos) > 0 else kw.get("dim")
                    keepdim = pos[1] if len(pos) > 1 else kw.get("keepdim", False)
                    dtype = kw.get("dtype")
                if set(kw) - {"dim", "keepdim", "dtype"}:
                    return None
                if isinstance(dims, (list, tuple)):
                    dims = tuple(dims)
                    if dims == () and kind != "amax":
                        dims = None
                if kind == "amax" and dims == ():
                    dims = None
                src = args[0][1]
                if dtype is not None:
                    src = g.op("CONVERT", [src], dtype=dtype)  # sum(dtype=) casts first, as torch does
                vid = g.op(op, [src], dims=dims, keepdim=bool(keepdim), dtype=dtype)
            elif kind == "params":
                defaults, ntake = _PARAM_DEFAULTS[op]
                if kwargs or not 1 <= len(args) <= 1 + len(defaults) or args[0][0] != "v":
                    return None
                given = [v for _, v in args[1:]] + list(defaults[len(args) - 1:])
                if any(k != "c" for k, _ in args[1:]) or given[ntake:] != list(defaults[ntake:]):
                    return None  # a parameter wick's op does not take, not at its default
                vid = g.op(op, [args[0][1]] + [g.scalar(v) for v in given[:ntake]])
            elif kind == "clamp":  # a missing bound makes it clamp_min or clamp_max
                if kwargs or len(args) not in (2, 3) or args[0][0] != "v":
                    return None
                lo = args[1]
                hi = args[2] if len(args) == 3 else ("c", None)
                if lo == ("c", None) and hi == ("c", None):
                    return None
                if hi == ("c", None):
                    vid = g.op("CLAMP_MIN", [args[0][1], operand(lo)])
                elif lo == ("c", None):
                    vid = g.op("CLAMP_MAX", [args[0][1], operand(hi)])
                else:
                    vid = g.op(op, [args[0][1], operand(lo), operand(hi)])
            elif kind == "scalar_tensor":  # a Python number as a 0-d tensor
                kw = {k: v for k, (_, v) in kwargs.items()}
                if len(args) != 1 or args[0][0] != "c" or not isinstance(args[0][1], (bool, int, float)):
                    return None
                if kw.pop("layout", None) not in (None, torch.strided):
                    return None
                dev = kw.pop("device", None)
                if (dev is None and self.device.type != "cpu") or (dev is not None and not self.on_graph_device(dev)):
                    return None  # a CPU 0-d tensor in a CUDA graph: an extern, moved to the graph's device
                dtype = kw.pop("dtype", None) or torch.get_default_dtype()
                kw.pop("pin_memory", None)
                if kw:
                    return None
                vid = g.op("CONVERT", [g.scalar(args[0][1])], dtype=dtype, device=str(self.device))
            elif kind == "gelu":
                approx = kwargs.get("approximate", ("c", "none"))[1]
                if len(args) != 1 or args[0][0] != "v" or set(kwargs) - {"approximate"}:
                    return None
                if approx not in ("none", "tanh"):
                    return None
                vid = g.op("GELU" if approx == "none" else "GELU_TANH", [args[0][1]])
            elif kind == "var":
                params = _var_params(args, kwargs)
                if params is None:
                    return None
                x, dims, correction, keepdim = params
                vid = g.op(op, [x], dims=dims, keepdim=keepdim, correction=correction)
            elif kind == "convert":
                if len(args) != 2 or args[0][0] != "v" or not isinstance(args[1][1], torch.dtype):
                    return None
                vid = self.convert(args[0][1], args[1][1])
            elif kind == "clone":  # a copy: CONVERT to its own dtype is a new buffer
                if len(args) != 1 or args[0][0] != "v" or set(kwargs) - {"memory_format"}:
                    return None
                if kwargs.get("memory_format", ("c", None))[1] not in (None, torch.preserve_format,
                                                                      torch.contiguous_format):
                    return None
                vid = self.convert(args[0][1], val.dtype)
            elif kind == "to_copy":
                kw = {k: v for k, (_, v) in kwargs.items()}
                dtype = kw.pop("dtype", None)
                if len(args) != 1 or args[0][0] != "v":
                    return None
                if kw.pop("layout", torch.strided) not in (None, torch.strided):
                    return None
                dev = kw.pop("device", None)
                if dev is not None and not self.on_graph_device(dev):
                    return None
                kw.pop("non_blocking", None)
                if kw.pop("memory_format", None) not in (None, torch.preserve_format, torch.contiguous_format):
                    return None
                if kw:
                    return None
                # _to_copy always copies, and so does a CONVERT node, also to
                # its own dtype (a new buffer, as for clone)
                vid = self.convert(args[0][1], dtype or val.dtype)
            else:
                return None
        except (_NotNative, ValueError, TypeError):
            return None
        got = g.value(vid)
        m = self.meta_of(val)
        if got["dtype"] != str(m["dtype"]).replace("torch.", "") or tuple(got["sizes"]) != m["sizes"]:
            return None  # torch would compute something else: let torch do it
        if not self.on_graph_device(got["device"]) or not self.on_graph_device(m["device"]):
            return None  # e.g. a CPU 0-d tensor in a CUDA graph: the extern path moves it
        if got["is_wrapped_number"]:
            return None
        if not _is_contiguous(m["sizes"], m["strides"]) and node not in self.layout_free:
            # eager keeps the input's layout here and it matters: a pointwise
            # result is written in that layout (a permutation of a dense one)
            if kind in ("binary", "alpha", "ternary", "unary", "params", "clamp", "gelu", "convert",
                        "clone", "to_copy"):
                return self.in_layout(vid, m)
            return None
        return vid

    def in_layout(self, vid, m):
        """Value `vid` (contiguous in wick) materialised in the dense layout
        with eager's strides m["strides"]: a copy of its permuted view (the
        producer's work is inlined into that copy's kernel), viewed back in
        the logical dim order. None when eager's strides are no permutation
        of a dense layout (overlapping, gaps)."""
        g = self.g
        sizes, strides = list(m["sizes"]), list(m["strides"])
        nd = len(sizes)
        perm = sorted(range(nd), key=lambda d: (-strides[d] if sizes[d] != 1 else 0, d))
        psizes = [sizes[p] for p in perm]
        dense = _contiguous_strides(psizes)
        if any(psizes[d] != 1 and strides[perm[d]] != dense[d] for d in range(nd)):
            return None
        have = g.value(vid)["strides"]
        permuted = g.op("VIEW", [vid], ints=[nd, *psizes, *[have[p] for p in perm], 0])
        copy = g.op("CONVERT", [permuted], dtype=getattr(self.torch, g.value(vid)["dtype"]))
        back = [0] * nd
        for d in range(nd):
            back[perm[d]] = dense[d]
        return g.op("VIEW", [copy], ints=[nd, *sizes, *back, 0])

    def convert(self, vid, dtype):
        return self.g.op("CONVERT", [vid], dtype=dtype)

    # -- externs --------------------------------------------------------------
    def embedding_backward_ints(self, node, inputs):
        """[padding_idx, scale_grad_by_freq] of an embedding_dense_backward on
        the CPU whose grad and indices are the call's two tensor inputs, in
        that order, and whose other arguments are constants: the plan then
        runs generated C (a zeroed gradient and a scatter-add loop) instead
        of the call; None otherwise."""
        torch = self.torch
        if (not _native_embedding_backward or node.target is not torch.ops.aten.embedding_dense_backward.default
                or self.device.type != "cpu"):
            return None
        args = list(node.args)
        names = ["grad_output", "indices", "num_weights", "padding_idx", "scale_grad_by_freq"]
        for k in names[len(args):]:
            if k not in node.kwargs:
                return None
            args.append(node.kwargs[k])
        if len(args) != 5 or len(inputs) != 2:
            return None
        try:
            if self.lookup(args[0]) != ("v", inputs[0]) or self.lookup(args[1]) != ("v", inputs[1]):
                return None
            pad, scale = self.concrete(args[3]), args[4]
        except Exception:  # noqa: BLE001 - anything unusual stays the extern call
            return None
        if not isinstance(pad, int) or isinstance(pad, bool) or not isinstance(scale, bool):
            return None
        if scale and args[0].meta.get("val") is not None and args[0].meta["val"].dtype == torch.bfloat16:
            return None  # eager's bfloat16 scale rounds per code path (codegen/pipeline.c): the call
        gv, iv = args[0].meta.get("val"), args[1].meta.get("val")
        if not (isinstance(gv, torch.Tensor) and isinstance(iv, torch.Tensor)
                and gv.dtype in (torch.float32, torch.float64, torch.bfloat16)
                and iv.dtype in (torch.int32, torch.int64) and gv.dim() == iv.dim() + 1):
            return None  # what the generated code does not cover: the extern call
        try:
            sizes = [self.concrete(x) for x in gv.shape[:-1]], [self.concrete(x) for x in iv.shape]
        except Exception:  # noqa: BLE001
            return None
        if sizes[0] != sizes[1] or not all(isinstance(x, int) for x in sizes[0]):
            return None
        return [pad, int(scale)]

    def extern(self, node, val, target=None, counted=None):
        """node as an extern call (target: the op called in place of
        node.target; counted: (list, k), list[k] counts the calls)."""
        import operator

        torch = self.torch
        from wick._C import ExternInput

        inputs = []
        index_of = {}

        def template(a):
            import torch.fx

            if isinstance(a, torch.fx.Node):
                k, v = self.lookup(a)
                if k == "v":
                    return ref(v)
                if k == "c":
                    return v
                items = [ref(x) if x is not None else None for x in v.items]
                return tuple(items) if issubclass(v.kind, tuple) else items
            # plain lists and tuples: the runtime walks exactly these (FX's
            # immutable_list would be passed through unsubstituted)
            if isinstance(a, list):
                return [template(x) for x in a]
            if isinstance(a, tuple):
                return tuple(template(x) for x in a)
            if isinstance(a, dict):
                return {k: template(v) for k, v in a.items()}
            return self.concrete(a)

        def ref(v):
            if v not in index_of:
                index_of[v] = len(inputs)
                inputs.append(v)
            return ExternInput(index_of[v])

        args = template(tuple(node.args))
        kwargs = template(dict(node.kwargs))
        target = node.target if target is None else target
        name = _target_name_aten(target)
        if isinstance(val, torch.Tensor):
            metas, picks, kind = [self.meta_of(val)], None, None
        else:
            kind = type(val)
            # only the items the graph reads: an unread one may be None at run
            # time where the fake kernel said tensor (cudnn attention's logsumexp)
            read = {u.args[1] for u in node.users if u.target is operator.getitem}
            if any(u.target is not operator.getitem for u in node.users):
                read = set(range(len(val)))
            positions = [i for i, t in enumerate(val) if isinstance(t, torch.Tensor) and i in read]
            # non-tensor items (the int sizes cudnn attention returns): fine
            # while nothing reads them; a getitem of one refuses the graph
            opaque = {i: f"{name} returns a {type(t).__name__} item" for i, t in enumerate(val)
                      if t is not None and not isinstance(t, torch.Tensor)}
            # tensors on another device among the items (attention's CPU rng
            # seed and offset in a CUDA graph): likewise unread, or refused
            for i in list(positions):
                if str(val[i].device) != str(self.device):
                    opaque[i] = f"{name} returns a tensor on {val[i].device}, the graph is on {self.device}"
                    positions.remove(i)
            metas, picks = [self.meta_of(val[i]) for i in positions], tuple(positions)
        # an OpOverload's _op is the C++ builtin its __call__ forwards to: calling
        # it directly saves a Python frame per extern call
        fn = getattr(target, "_op", None) if isinstance(target, torch._ops.OpOverload) else None
        fn = fn or target
        if counted is not None:
            fn = _counting_calls(fn, *counted)
        if target in _stats_widened_ops(torch) and isinstance(val, (list, tuple)):
            # 16-bit batch norm in training: the functional variants' fake
            # kernels give the updated running statistics as float32, the
            # CPU and CUDA kernels in the running buffers' dtype; widening the
            # kernel's values to float32 is exact, and the graph's own
            # conversion back (AOTAutograd's _to_copy) gives eager's values
            fn = _widening_results(torch, fn, [t.dtype if isinstance(t, torch.Tensor) else None for t in val])
        if _may_return_neg_view(torch, node, val):
            # a real tensor with torch's lazy negation bit (the imaginary part
            # of a conjugate): kernels read memory, where the sign is not yet
            # applied, so the call's result is resolved (a copy, equal values)
            fn = _resolving_neg(fn)
        if picks is None and node.meta.get("wick_force_contiguous"):
            # wick/_layout.py promised this value contiguous (an NHWC-ordered
            # operand of a channels-last convolution); torch keeps its
            # operand's layout, so the call's result is made contiguous
            layout_inner = fn
            fn = lambda *a, **k: layout_inner(*a, **k).contiguous()  # noqa: E731
        if (picks is None and metas[0]["device"] == "cpu" and self.device.type == "cuda"
                and len(metas[0]["sizes"]) == 0):
            # a 0-d CPU tensor in a CUDA graph (lift_fresh_copy of a constant):
            # eager mixes them freely; here it is moved to the graph's device
            inner, device = fn, self.device
            fn = lambda *a, **k: inner(*a, **k).to(device)  # noqa: E731
            metas[0]["device"] = str(device)
        for m in metas:
            if m["device"] != str(self.device):
                raise _Unsupported(f"{name} returns a tensor on {m['device']}, the graph is on {self.device}")
        idx = len(self.externs)
        self.externs.append((fn, args, kwargs or None, picks))
        ints = self.embedding_backward_ints(node, inputs) if picks is None else None
        if ints is not None:  # generated C in place of the call (codegen/pipeline.c)
            self.nnative += 1
            return self.g.extern(idx, inputs, metas, name=name, ints=ints)[0]
        self.nextern += 1
        self.extern_names[name] = self.extern_names.get(name, 0) + 1
        if picks is None:
            return self.g.extern(idx, inputs, metas, name=name)[0]
        items = [_Opaque(opaque[i]) if i in opaque else None for i in range(len(val))]
        if not metas:
            return _Multi(items, kind)
        ids = self.g.extern(idx, inputs, metas, name=name)
        for p, vid in zip(picks, ids):
            items[p] = vid
        return _Multi(items, kind)

    def outputs(self, output):
        import torch.fx

        items = list(output) if isinstance(output, (tuple, list)) else [output]
        spec = []  # per item: ("t", k) a compiled output, ("c", value) a constant
        self.output_strides = []  # per item: the strides the compiled graph returns it with, or None
        nt = 0
        for pos, item in enumerate(items):
            self.output_strides.append(None)
            if pos in self.stats_views:
                # a running buffer updated in place, returned as its new value
                # and, where the backward takes it (it reads no running
                # statistic in training), saved: an alias of its memory, a
                # tensor of its own with a version counter of its own
                # (alias_views). The buffer itself would be an input
                # returned by AOTAutograd's autograd.Function, which hands
                # out a view_as of it instead, and its copy back onto the
                # buffer would bump the version of the very tensor saved.
                item = self.stats_views[pos]
                v = self.env[item]
                m = self.g.value(v)
                v = self.g.op("VIEW", [v], ints=[len(m["sizes"]), *m["sizes"], *m["strides"], 0])
                self.g.output(v)
                self.output_strides[-1] = tuple(m["strides"])
                spec.append(("t", nt))
                nt += 1
                continue
            if isinstance(item, torch.fx.Node):
                k, v = self.lookup(item)
                if k == "v":
                    want = item.meta.get("val")
                    if (isinstance(want, self.torch.Tensor) and
                            not self.on_graph_device(self.g.value(v)["device"]) == self.on_graph_device(want.device)):
                        # a 0-d CPU tensor computed on the graph's device
                        raise _Unsupported(f"graph output {item.name} is on {want.device} in eager")
                    self.g.output(v)
                    self.output_strides[-1] = tuple(self.g.value(v)["strides"])
                    spec.append(("t", nt))
                    nt += 1
                    continue
                if k == "m":
                    raise _Unsupported("a graph output is a tuple")
                spec.append(("c", v))
            else:
                spec.append(("c", self.concrete(item)))
        return spec, type(output) if isinstance(output, (tuple, list)) else None


class _NotNative(Exception):
    pass


class _StatsInPlace:
    """A training batch norm of the forward graph run as its in-place op.

    AOTAutograd makes the module's in-place update of running_mean/var
    functional: the functional op clones both buffers and updates the
    clones (two copies), and after the graph the runtime wrapper copies the
    new values back into the buffers (two more). Where the buffers are
    placeholders nothing else in the graph reads and their new values are
    only returned (as the mutation outputs of those buffers, and saved for
    the backward), the graph calls the in-place op on the buffers instead,
    as eager does, and returns aliases of the buffers as their new values
    (_AtenImporter.outputs says why not the buffers themselves): the
    copy back copies a buffer's memory onto itself, which ATen's copy_
    returns from at once. Values are eager's bit for bit (the functional op
    is the in-place kernel run on clones). Not under CUDA graphs (their
    warm-up run would update the buffers once more) nor for symbolic graphs.

    Should a run fail after some in-place batch norm ran, the run eagerly
    that follows must not update those buffers again: the extern counts its
    calls (stats_runs) and the eager run returns those buffers as they are
    (_eager_on_metadata_mismatch)."""

    def __init__(self, in_place, nitems, new_stats, training_arg):
        self.in_place = in_place        # the in-place overload, same arguments
        self.nitems = nitems            # the items it returns (the functional op's first ones)
        self.new_stats = new_stats      # the functional op's items: new running_mean, running_var
        self.training_arg = training_arg  # its training flag's position, or None: always training

    def training(self, node):
        if self.training_arg is None:
            return True
        return len(node.args) > self.training_arg and node.args[self.training_arg] is True

    _table = None

    @classmethod
    def variants(cls, torch):
        if cls._table is None:
            aten = torch.ops.aten
            cls._table = {
                aten._native_batch_norm_legit_functional.default:
                    cls(aten._native_batch_norm_legit.default, 3, (3, 4), 5),
                aten._batch_norm_with_update_functional.default:
                    cls(aten._batch_norm_with_update.default, 4, (4, 5), None),
            }
        return cls._table


class _StatsRestore:
    """What a graph's eager rerun returns for the buffers that its failed
    compiled run already updated in place (_StatsInPlace)."""

    def __init__(self, runs, slots):
        self.runs = runs    # per in-place batch norm: its calls so far
        self.slots = slots  # per in-place batch norm: (output position, its buffer's input position)

    def mark(self):
        return list(self.runs)

    def patch(self, out, args, before):
        """out (the functional graph's outputs, computed from buffers some
        in-place batch norms may have updated already) with those buffers
        returned as their new values: updated once, as eager does."""
        ran = [k for k, (now, then) in enumerate(zip(self.runs, before)) if now != then]
        if not ran:
            return out
        items = list(out)
        for k in ran:
            for pos, at in self.slots[k]:
                items[pos] = args[at].data  # as the compiled graph's aliases (_StatsInPlace)
        return type(out)(items) if isinstance(out, tuple) else items


def _bump_counters(*counters):
    """num_batches_tracked += 1 for every batch norm of a graph, in one call."""
    import torch

    torch._foreach_add_(list(counters), 1)
    return counters


def _counting_calls(fn, counts, k):
    """fn, each of whose calls that returns adds one to counts[k]."""
    def call(*args):
        out = fn(*args)
        counts[k] += 1
        return out
    return call


def _stats_outputs(torch, gm, which, cudagraphs):
    """For _StatsInPlace: ({output position: placeholder position} of the
    inputs AOTAutograd copies new values into after the forward, the output
    positions it saves for the backward, {output position: placeholder
    position} of the outputs that are those inputs themselves, which
    AOTAutograd returns in place of the graph's value: a graph of wick's own
    capture returns a buffer it updated in place, to_fx), or None where the
    graph is not one to update buffers in place in."""
    if which not in ("forward", "inference") or cudagraphs or _is_symbolic(torch, gm):
        return None
    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None) if context is not None else None
    if meta is None or getattr(meta, "tokens", None):
        return None
    try:
        mutated = {}
        for pos, at in enumerate(meta.mutated_inp_runtime_indices):
            info = meta.input_info[at]
            if info.mutates_data and not info.mutates_metadata and not info.mutates_storage_metadata:
                mutated[pos] = at
        output = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
        saved = frozenset(range(len(output))[meta.tensors_saved_for_backwards_slice]) if which == "forward" \
            else frozenset()
        first_user = len(meta.mutated_inp_runtime_indices)
        is_input = torch._functorch._aot_autograd.schemas.OutputType.is_input
        regenerated = {first_user + i: info.base_idx for i, info in enumerate(meta.output_info)
                       if info.output_type == is_input and isinstance(info.base_idx, int)}
    except Exception:  # noqa: BLE001 - metadata of another shape: nothing in place
        return None
    return mutated, saved, regenerated


def _stats_widened_ops(torch):
    aten = torch.ops.aten
    return (aten._native_batch_norm_legit_functional.default, aten._batch_norm_with_update_functional.default)


def _widening_results(torch, fn, want):
    """fn, with each 16-bit floating result that its metadata says is a wider
    float converted to that dtype (exact). Any other difference is left for
    the runtime's metadata check to catch (the graph then runs eagerly)."""
    narrow = (torch.float16, torch.bfloat16)
    wide = (torch.float32, torch.float64)

    def call(*args, **kwargs):
        out = fn(*args, **kwargs)
        if not any(isinstance(t, torch.Tensor) and w is not None and t.dtype != w and t.dtype in narrow and w in wide
                   for t, w in zip(out, want)):
            return out
        return type(out)(t.to(w) if isinstance(t, torch.Tensor) and w is not None and t.dtype != w
                         and t.dtype in narrow and w in wide else t for t, w in zip(out, want))
    return call


def _touches_complex(torch, node, val):
    """Whether an FX node reads or makes a complex tensor: such a node is an
    extern call, never a native node (wick's graphs carry complex values
    between externs and to outputs; its kernels compute none)."""
    import torch.fx

    def is_complex(t):
        return isinstance(t, torch.Tensor) and t.is_complex()

    if is_complex(val) or (isinstance(val, (list, tuple)) and any(is_complex(t) for t in val)):
        return True
    found = []
    torch.fx.node.map_arg((node.args, node.kwargs),
                          lambda a: found.append(a) if is_complex(a.meta.get("val")) else None)
    return bool(found)


def _may_return_neg_view(torch, node, val):
    """Whether an extern's real result may carry a lazy negation bit: an
    explicit _neg_view, or a real result of a call that reads a complex
    tensor (the imaginary part of a conjugate view)."""
    vals = val if isinstance(val, (list, tuple)) else [val]
    if not any(isinstance(t, torch.Tensor) and not t.is_complex() for t in vals):
        return False
    if all(u.op == "output" for u in node.users):
        return False  # no kernel reads it: eager's lazy bit is kept
    return node.target is torch.ops.aten._neg_view.default or _touches_complex(torch, node, None)


def _resolving_neg(fn):
    def call(*args, **kwargs):
        out = fn(*args, **kwargs)
        if isinstance(out, (list, tuple)):
            return type(out)(t.resolve_neg() if hasattr(t, "resolve_neg") else t for t in out)
        return out.resolve_neg()
    return call


def _meta_contiguous(imp, node):
    val = node.meta.get("val")
    if not isinstance(val, imp.torch.Tensor):
        return False
    try:
        m = imp.meta_of(val)
    except _Unsupported:
        return False
    return _is_contiguous(m["sizes"], m["strides"])


def _contiguous_strides(sizes):
    out, step = [0] * len(sizes), 1
    for d in reversed(range(len(sizes))):
        out[d] = step
        step *= max(sizes[d], 1)
    return out


def _is_contiguous(sizes, strides):
    expected = 1
    for size, stride in reversed(list(zip(sizes, strides))):
        if size != 1 and stride != expected:
            return False
        expected *= max(size, 1)
    return True


def _target_name_aten(t):
    name = getattr(t, "__name__", None) or repr(t)
    mod = getattr(t, "__module__", "") or ""
    if mod.startswith("torch._ops"):
        return str(t)  # "aten.mm.default"
    return f"{mod}.{name}".lstrip(".")


# What each compiled graph holds, newest last: {"graph": "forward"|"backward"|
# "inference", "native": n, "extern": n, "externs": {name: count}, "kernels": n}.
compiled_graphs: list = []


def _symbol_bindings(torch, gm, args):
    """sympy symbol -> int for the symbolic sizes of the placeholders, read from
    the actual arguments (ints, tensor sizes and strides)."""
    bindings = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, arg in zip(placeholders, args):
        val = node.meta.get("val")
        pairs = []
        if isinstance(val, torch.SymInt):
            pairs.append((val, arg))
        elif isinstance(val, torch.Tensor) and isinstance(arg, torch.Tensor):
            pairs += list(zip(val.shape, arg.shape)) + list(zip(val.stride(), arg.stride()))
        for sym, actual in pairs:
            if isinstance(sym, torch.SymInt):
                expr = sym.node.expr
                if getattr(expr, "is_Symbol", False):
                    bindings[expr] = int(actual)
    return bindings


# calls of graphs with symbolic sizes (torch.compile's dynamic shapes), per
# how they ran: "compiled" (a size compiled for), "eager: new size" (its first
# call; it is compiled at its second), "eager: size limit" (past
# WICK_SIZES_PER_GRAPH compiled sizes), "eager: size refused" (wick could not
# compile the graph for that size; the reason is in fallback_reasons)
symbolic_calls = collections.Counter()


def _sizes_per_graph():
    try:
        return max(1, int(os.environ.get("WICK_SIZES_PER_GRAPH", "8")))
    except ValueError:
        return 8


def _per_size(torch, gm, which, first, example_inputs):
    """The boxed call of a graph with symbolic sizes: wick's kernels are
    compiled for concrete sizes, so each size is a compile of its own (the C
    compiler's tens to hundreds of milliseconds). A size is compiled at its
    second call, its first runs the graph eagerly: a size that never comes
    back (a decode step's cache length, one more each step) would otherwise
    pay a compile per call, a hundred times eager's time. At most
    WICK_SIZES_PER_GRAPH sizes are compiled (8); others run eagerly, the
    reason recorded once. first: the graph compiled for the sizes the
    example inputs stand for (their hints)."""

    def key_of(args):
        return tuple(tuple(a.shape) + tuple(a.stride()) if isinstance(a, torch.Tensor) else a for a in args)

    def hint(x):
        return x.node.hint if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)) else x

    try:
        hinted = tuple(tuple(hint(d) for d in (*a.shape, *a.stride())) if isinstance(a, torch.Tensor) else hint(a)
                       for a in example_inputs)
    except Exception:  # noqa: BLE001 - no hint: nothing compiled in advance
        hinted = None
    cache = {hinted: first} if hinted is not None else {}  # (a size without a hint never matches a call)
    seen = set()
    limit = _sizes_per_graph()
    told = False

    def boxed(args):
        nonlocal told
        key = key_of(args)
        f = cache.get(key)
        if f is None:
            if key not in seen:
                if len(seen) >= 4096:  # sizes that never come back (a long decode): forget them
                    seen.clear()
                seen.add(key)
                symbolic_calls["eager: new size"] += 1
                return gm(*args)
            if len(cache) >= limit:
                if not told:
                    told = True
                    fallback_reasons.append(f"torch.compile(backend='wick'): {which} graph with symbolic sizes: "
                                            f"{limit} sizes compiled (WICK_SIZES_PER_GRAPH); other sizes run eagerly")
                symbolic_calls["eager: size limit"] += 1
                return gm(*args)
            try:
                f, _ = _compile_aten(gm, args, which, _symbol_bindings(torch, gm, args))
            except (_Unsupported, _C.CompileError) as exc:
                fallback_reasons.append(f"torch.compile(backend='wick'): {which} graph for sizes {key}: {exc}")
                f = gm
            cache[key] = f
        symbolic_calls["compiled" if f is not gm else "eager: size refused"] += 1
        return f(*args)

    return boxed


def _is_symbolic(torch, gm):
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            return True
        if isinstance(val, torch.Tensor) and any(
                isinstance(s, torch.SymInt) for s in (*val.shape, *val.stride())):
            return True
    return False


def _var_params(args, kwargs):
    """aten.var / var_mean (input, dim, *, correction, keepdim), imported
    arguments as (kind, value) pairs -> (input value, dims, correction,
    keepdim) for wick's VAR node, or None when they are not constants it takes."""
    if not args or args[0][0] != "v" or len(args) > 2 or set(kwargs) - {"dim", "correction", "keepdim"}:
        return None
    if any(k != "c" for k, _ in list(args[1:]) + list(kwargs.values())):
        return None
    kw = {k: v for k, (_, v) in kwargs.items()}
    dims = args[1][1] if len(args) > 1 else kw.get("dim")
    if isinstance(dims, (list, tuple)):
        dims = tuple(dims) or None
    correction = kw.get("correction")
    correction = 1 if correction is None else correction
    if isinstance(correction, bool) or not isinstance(correction, (int, float)):
        return None
    return args[0][1], dims, float(correction), bool(kw.get("keepdim", False))


def _drop_unused_attention(torch, gm):
    """Removes attention forwards whose results nothing reads. AOTAutograd's
    backward graph of a graph exported from wick's capture keeps one per
    attention call (the ops are tagged nondeterministic_seeded, so FX's dead
    code elimination keeps them): a whole attention forward run for nothing
    in every training step. Only with dropout_p == 0, where the op draws no
    random numbers and removing it changes nothing else."""
    import operator

    aten = torch.ops.aten
    targets = {getattr(aten, n).default for n in (
        "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")
        if hasattr(aten, n)}
    dropped = 0
    for node in reversed(list(gm.graph.nodes)):
        if node.op != "call_function" or node.users:
            continue
        if node.target is operator.getitem and node.args and getattr(node.args[0], "target", None) in targets:
            gm.graph.erase_node(node)
            continue
        if node.target not in targets:
            continue
        names = [a.name for a in node.target._schema.arguments]
        i = names.index("dropout_p")
        p = node.args[i] if i < len(node.args) else node.kwargs.get("dropout_p", 0.0)
        if isinstance(p, (int, float)) and p == 0:
            gm.graph.erase_node(node)
            dropped += 1
    if dropped:
        gm.recompile()
    return dropped


def _import_aten(gm, example_inputs, which, bindings=None, free_outputs=()):
    """The Python half of compiling one ATen graph: the layout pass and the
    importer into a wick graph. Returns the importer; its graph (imp.g) is
    what _finish_aten compiles, with imp.externs."""
    imp = _importer_for(gm, example_inputs, which, bindings, free_outputs)
    imp.spec, imp.out_type = imp.run(list(example_inputs))
    return imp


def _importer_for(gm, example_inputs, which, bindings=None, free_outputs=(), stats=None):
    """The importer of gm after the layout pass, not yet run (stats:
    _stats_outputs' answer)."""
    import torch

    global _native_table
    if _native_table is None:
        _native_table = _aten_native()
    _drop_unused_attention(torch, gm)
    layout = "as traced"
    if not bindings:  # convolutions on channels-last tensors (wick/_layout.py)
        from . import _layout

        kinds = {target: kind for target, (_, kind) in _native_table.items()}
        try:
            gm, why = _layout.apply(torch, gm, list(example_inputs), which, kinds, free_outputs)
        except _layout._Abandon as exc:
            raise _Unsupported(f"inputs with other strides than traced: {exc}")
        layout = why or "channels-last"
    imp = _AtenImporter(torch, gm, bindings or {})
    imp.layout = layout
    imp.stats_outputs = stats
    return imp


def _compile_aten(gm, example_inputs, which, bindings=None, free_outputs=(), stats=None):
    """One ATen graph -> (callable taking the placeholders positionally, info).
    free_outputs: positions of outputs (activations saved for the backward)
    the layout pass may leave channels-last; info["output_strides"] says,
    per output, the strides the compiled graph returns it with (None: not a
    tensor)."""
    imp = _importer_for(gm, example_inputs, which, bindings, free_outputs, stats)
    retried = None
    try:
        imp.spec, imp.out_type = imp.run(list(example_inputs))
        compiled = imp.g.compile(externs=imp.externs)
    except _C.CompileError as exc:
        if not imp.nindirect:
            raise
        # indexing kernels are the newest lowering: rather than the whole
        # graph eagerly, the graph again with its indexing as extern calls
        retried = f"indexing as extern calls: with indexing kernels, {exc}"
        if _log_breaks():
            print(f"[wick:breaks] torch.compile(backend='wick'): {which} graph: {retried}", file=sys.stderr)
        # the graph the layout pass already made, imported again
        first, imp = imp, _AtenImporter(imp.torch, imp.gm, bindings or {}, native_indexing=False)
        imp.layout, imp.stats_outputs = first.layout, first.stats_outputs
        imp.spec, imp.out_type = imp.run(list(example_inputs))
        compiled = imp.g.compile(externs=imp.externs)
    return _finish_aten(imp, compiled, which, retried)


def _finish_aten(imp, compiled, which, retried=None):
    """(callable, info) of an imported graph and its CompiledGraph."""
    compiled.check_inputs = False  # dynamo's and AOTAutograd's guards checked them
    # views as plain aliases (as inductor's): AOTAutograd restores the aliasing
    # of outputs that are views (of inputs and of intermediates) itself
    compiled.alias_views = True
    info = {"graph": which, "native": imp.nnative, "extern": imp.nextern, "views": imp.nview,
            "externs": dict(imp.extern_names),
            "kernels": compiled.nkernels, "layout": imp.layout, "output_strides": imp.output_strides,
            "retried": retried, "stats_in_place": len(imp.stats_plan),
            "counters_in_place": len(imp.stats_counters)}
    if imp.stats_runs:
        info["_stats_restore"] = imp.stats_restore()
    spec, out_type = imp.spec, imp.out_type
    tensor_inputs = imp.tensor_inputs
    nplaceholders = len([n for n in imp.gm.graph.nodes if n.op == "placeholder"])
    all_tensors = len(tensor_inputs) == nplaceholders
    plain_outputs = all(kind == "t" for kind, _ in spec)
    if all_tensors and plain_outputs and out_type is not None:
        return compiled, info
    if out_type is None:
        return (lambda *args: compiled(*[args[i] for i in tensor_inputs])[0]), info

    def run(*args):
        outs = compiled(*[args[i] for i in tensor_inputs])
        return out_type(outs[v] if kind == "t" else v for kind, v in spec)

    return run, info


def _aten_compiler(which, cudagraphs=False, partition=None):
    """fw/bw compiler for AOTAutograd: boxed callables (args come as a list).
    cudagraphs: mode="reduce-overhead", CUDA graphs replay CUDA graphs.
    partition: the dict _early_partition fills for one AOTAutograd call: the
    forward compiler then starts the backward's C compile (_EarlyBackward),
    which the backward compiler takes if it is given that graph."""

    def compiler(gm, example_inputs):
        import torch

        # a forward may leave the activations it saves channels-last when it
        # tells AOTAutograd, which then compiles the backward for them
        context = torch._guards.TracingContext.try_get() if which == "forward" else None
        if context is None or context.output_strides is None or _is_symbolic(torch, gm):
            context = None
        saved = _saved_activations(gm, context)
        if (partition is not None and which == "forward" and partition.get("fw") is gm
                and _early_backward_on()):
            # before the forward's own compile, so that the two C compilers overlap
            partition["early"] = _EarlyBackward.start(torch, partition.pop("bw"))
        early = partition.pop("early", None) if partition is not None and which == "backward" else None
        try:
            got = early.take(gm, example_inputs) if early is not None else None
            if got is None and gm.__dict__.get("_wick_shared_on_copy"):
                gm = _private_copy(gm)  # the importer's passes edit the graph AOTAutograd keeps
            stats = _stats_outputs(torch, gm, which, cudagraphs) if got is None else None
            fn, info = got if got is not None else _compile_aten(gm, example_inputs, which, free_outputs=saved,
                                                                 stats=stats)
        except _Unsupported as exc:
            return _boxed_fallback(gm, f"{which} graph: {exc}")
        except _C.CompileError as exc:
            return _boxed_fallback(gm, f"{which} graph: wick could not compile it: {exc}")
        restore = info.pop("_stats_restore", None)
        compiled_graphs.append(info)
        saved_strides = None  # what the backward is compiled for
        if context is not None and info.get("output_strides") is not None:
            context.output_strides.extend(_changed_strides(torch, gm, info["output_strides"]))
            saved_strides = [s if k in saved else None for k, s in enumerate(info["output_strides"])]
            saved_strides = saved_strides if any(saved_strides) else None
        if _log_graphs():
            print(f"[wick:graphs] torch.compile {which} graph: {info['native']} native nodes in "
                  f"{info['kernels']} kernels, {info['extern']} extern calls {info['externs']}, "
                  f"layout: {info['layout']}", file=sys.stderr)
        if not _is_symbolic(torch, gm):
            def boxed(args):
                return fn(*args)
        else:
            boxed = _per_size(torch, gm, which, fn, example_inputs)
        guarded = _eager_on_metadata_mismatch(gm, which, boxed, saved_strides, restore)
        if cudagraphs:
            from . import _cudagraphs

            if any(isinstance(t, torch.Tensor) and t.device.type == _cudagraphs.CudaGraphRunner.DEVICE
                   for t in example_inputs):
                # the backward's output gradients (AOTAutograd's tangents
                # placeholders) are new tensors every step: always copied in
                inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
                fresh = [k for k, n in enumerate(inputs) if n.name.startswith("tangents")] \
                    if which == "backward" else ()
                return _cudagraphs.wrap_boxed(guarded, name=f"torch.compile {which} graph",
                                              warmup=2 if which == "backward" else 1, fresh=fresh)
        return guarded

    compiler.__name__ = f"wick_{which}_compiler"
    return compiler


def _early_backward_on():
    return os.environ.get("WICK_EARLY_BACKWARD", "1").strip() != "0"


class _EarlyBackward:
    """A backward graph's compile begun when its forward is compiled, rather
    than when AOTAutograd asks for it at the first backward: the importer
    and the C pipeline run at once, on this thread (they hold the GIL); the C
    compiler's processes, which are most of the time, run on a thread of
    their own (Graph.compile drops the GIL around them) while this thread
    runs the forward and traces the graphs after it. take() gives the result
    only for the graph and example inputs it was started with (AOTAutograd
    passes a copy of the partitioned graph, so the graph is compared by its
    code and placeholders' metadata: a forward that left saved activations
    channels-last has AOTAutograd restride them, and the backward is
    compiled again for those); anything else, or a compile that
    failed here, makes the backward compiler compile as before, which also
    reports any error the usual way."""

    def __init__(self, torch, original, metas, imp):
        import threading

        # original: the graph AOTAutograd keeps, shared on copy (_share_on_copy)
        self.original, self.metas, self.imp = original, metas, imp
        self.compiled = self.error = None
        # OpenMP's thread count is per thread, and the code generator reads it
        # (one thread: serial kernels): this thread's, as the backward
        # compiled at the first backward would see it
        self.nthreads = torch.get_num_threads()
        self.thread = threading.Thread(target=self._compile, args=(torch,), name="wick-early-backward", daemon=True)
        self.thread.start()

    def _compile(self, torch):
        try:
            torch.set_num_threads(self.nthreads)
            if sys.platform.startswith("linux"):
                # Linux's nice value is per thread and the compiler processes
                # this thread starts inherit it: the forward's compile, which
                # its first run waits for, and the Python work after it come
                # first; this compile takes the cores they leave idle
                try:
                    import threading

                    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(),
                                   min(os.getpriority(os.PRIO_PROCESS, 0) + 5, 19))
                except OSError:
                    pass
            self.compiled = self.imp.g.compile(externs=self.imp.externs)
        except BaseException as exc:  # noqa: BLE001 - reported by the compile take() falls back to
            self.error = exc

    @staticmethod
    def _metas(torch, inputs):
        return tuple((tuple(t.shape), tuple(t.stride()), t.dtype, t.device, t.storage_offset())
                     if isinstance(t, torch.Tensor) else ("v", type(t), repr(t)) for t in inputs)

    @classmethod
    def start(cls, torch, bw_module):
        """The job for bw_module (AOTAutograd's partitioned backward), or None
        where the graph is not one to compile early (symbolic sizes, or the
        importer refused it: the backward compiler says why, later)."""
        import copy

        try:
            if _is_symbolic(torch, bw_module):
                return None
            with torch._subclasses.fake_tensor.unset_fake_temporarily():
                gm = copy.deepcopy(bw_module)  # the importer's passes edit the graph
            inputs = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
            if os.environ.get("WICK_TRITON") == "interpret" or any(
                    isinstance(t, torch.Tensor) and t.device.type != "cpu" for t in inputs):
                return None  # Triton kernels: compiled through Python, on the thread that runs them
            imp = _import_aten(gm, inputs, "backward")
            return cls(torch, _share_on_copy(bw_module), cls._metas(torch, inputs), imp)
        except Exception:  # noqa: BLE001 - compiled at the first backward instead, errors reported then
            return None

    def take(self, gm, example_inputs):
        """(callable, info) for gm if this job compiled that graph, else None."""
        import torch

        self.thread.join()
        if self.error is not None or self.compiled is None:
            return None
        # (the Python code of a graph AOTAutograd made lazily is generated only where it is read)
        same_graph = gm is self.original or gm.code == self.original.code
        if not same_graph or self._metas(torch, example_inputs) != self.metas:
            return None
        return _finish_aten(self.imp, self.compiled, "backward")


def _share_on_copy(gm):
    """gm, changed so that copy.deepcopy(gm) is gm itself. AOTAutograd copies
    the partitioned backward graph before giving it to the backward compiler
    (a fifth of a second for a transformer's backward: the nodes, then the
    Python code again), in case the compiler edits it; a backward that
    _EarlyBackward compiled is only compared with the graph it was started
    with, and a backward compiler that must compile it after all takes a
    copy of its own first (_private_copy)."""
    base = type(gm)
    shared = type(base.__name__, (base,), {"__deepcopy__": _deepcopy_unless_shared})
    gm.__class__ = shared
    gm.__dict__["_wick_shared_on_copy"] = True
    return gm


def _deepcopy_unless_shared(gm, memo):
    if gm.__dict__.get("_wick_shared_on_copy"):
        memo[id(gm)] = gm
        return gm
    return super(type(gm), gm).__deepcopy__(memo)


def _private_copy(gm):
    """A real deep copy of a graph _share_on_copy made shared (gm is left shared)."""
    import copy

    gm.__dict__["_wick_shared_on_copy"] = False
    try:
        return copy.deepcopy(gm)
    finally:
        gm.__dict__["_wick_shared_on_copy"] = True


def _early_partition(partition):
    """AOTAutograd's default partitioner, recording the forward and backward
    graphs it makes into partition (read by _aten_compiler)."""

    def partition_fn(joint, joint_inputs, **kwargs):
        from torch._functorch.partitioners import default_partition

        fw, bw = default_partition(joint, joint_inputs, **kwargs)
        partition.clear()
        partition["fw"], partition["bw"] = fw, bw
        return fw, bw

    return partition_fn


def _saved_activations(gm, context):
    """Positions of gm's outputs that AOTAutograd saves for the backward
    (after the mutated inputs, the user's outputs and their intermediate
    bases): with a tracing context to report their strides to, these may
    change layout; nothing else may."""
    if context is None or context.fw_metadata is None or getattr(context.fw_metadata, "tokens", None):
        return ()  # (effect tokens would come first among the outputs)
    output = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    try:
        return frozenset(range(len(output))[context.fw_metadata.tensors_saved_for_backwards_slice])
    except Exception:  # noqa: BLE001 - metadata without the counts: nothing changes layout
        return ()


def _changed_strides(torch, gm, output_strides):
    """Per output of gm: the strides its compiled graph returns it with where
    they differ from the traced ones in a dim of size > 1, else None (what
    AOTAutograd's TracingContext.output_strides takes)."""
    output = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    report = []
    for a, real in zip(output if isinstance(output, (list, tuple)) else [output], output_strides):
        val = a.meta.get("val") if hasattr(a, "meta") else None
        if real is None or not isinstance(val, torch.Tensor) or all(
                n == 1 or s == r for n, s, r in zip(val.shape, val.stride(), real)):
            report.append(None)
        else:
            report.append(tuple(real))
    return report


def _restrided(torch, outs, strides):
    """outs, each copied into its strides in `strides` (None: any) where it
    has others."""
    outs = list(outs)
    for i, s in enumerate(strides):
        t = outs[i]
        if s is not None and isinstance(t, torch.Tensor) and any(
                n != 1 and a != b for n, a, b in zip(t.shape, t.stride(), s)):
            outs[i] = torch.empty_strided(t.shape, s, dtype=t.dtype, device=t.device).copy_(t)
    return outs


def _checking_strides(torch, which, boxed, out_strides):
    """boxed, whose first run checks that its outputs have the strides
    out_strides gives them; should one not, they are copied into those from
    then on (the reason recorded)."""
    state = {"checked": False, "copy": False}

    def run(args):
        out = boxed(args)
        if state["copy"] or not state["checked"]:
            fixed = _restrided(torch, out, out_strides)
            if not state["checked"] and any(a is not b for a, b in zip(fixed, out)):
                state["copy"] = True
                fallback_reasons.append(f"torch.compile(backend='wick'): {which} graph returned saved activations "
                                        f"with other strides than its backward was compiled for; copied into those")
            state["checked"] = True
            out = fixed if state["copy"] else out
        return out

    return run


def _eager_on_metadata_mismatch(gm, which, boxed, out_strides=None, restore=None):
    """An extern whose real output differs from its fake-tensor metadata (a
    PyTorch meta function that disagrees with its kernel, e.g. batch_norm on
    bfloat16) makes the runtime raise before any kernel reads the wrong data.
    The graph is functional, so running it eagerly from the start gives
    eager's result; that graph stays eager from then on, with the reason.
    Likewise any error of the graph's first run (a kernel Triton could not
    compile for this device, say) when eager runs the graph without one:
    eager's result, the reason recorded; an error eager raises too is eager's.
    out_strides: a forward's, per output, the strides its backward was
    compiled for (those of the saved activations, reported to AOTAutograd
    where they are not the traced ones), which eager's run of the graph is
    given as well, and which the first run checks. restore: the
    _StatsRestore of a graph that updates running statistics in place, so
    that the eager run after a failed one updates them once in all; a later
    run that fails after it updated some of them runs eagerly too, rather
    than raise (the caller could not undo the updates)."""
    import torch

    if out_strides:
        boxed = _checking_strides(torch, which, boxed, out_strides)
    state = {"fn": boxed, "ran": False}

    def eager(args, before=None):
        out = gm(*args)
        if before is not None:
            out = restore.patch(out, args, before)
        return _restrided(torch, out, out_strides) if out_strides else out

    def first_run_failed(args, exc, before):
        out = eager(args, before)  # eager's own error, if it has one, propagates from here
        when = "at its first run" if not state["ran"] else "after updating running statistics in place"
        reason = f"{which} graph {when}: {type(exc).__name__}: {str(exc)[:300]}"
        state["fn"] = _boxed_fallback(gm, reason, out_strides)
        return out

    def runs_eagerly(before):
        # the first run, or a later one that updated statistics in place
        # already: raising would leave them updated, and wick.compile's frame
        # would run eagerly and update them a second time
        return state["fn"] is boxed and (not state["ran"] or (before is not None and restore.mark() != before))

    def guarded(args):
        before = restore.mark() if restore is not None and state["fn"] is boxed else None
        try:
            out = state["fn"](args)
            state["ran"] = True
            return out
        except IndexError as exc:
            # a kernel met an index out of range (lower.h, "Indirect loads"):
            # the graph is functional, so eager from the start raises eager's
            # own error (or, should wick be wrong, gives eager's result)
            if not str(exc).startswith("wick: index out of range"):
                if runs_eagerly(before):
                    return first_run_failed(args, exc, before)
                raise
            return eager(args, before)
        except (RuntimeError, TypeError) as exc:
            msg = str(exc)
            if (state["fn"] is not boxed or not msg.startswith("wick: extern")
                    or ("metadata" not in msg and "returned" not in msg)):
                if runs_eagerly(before):
                    return first_run_failed(args, exc, before)
                raise
            state["fn"] = _boxed_fallback(gm, f"{which} graph at run time: {msg}", out_strides)
            return eager(args, before)
        except Exception as exc:  # noqa: BLE001 - e.g. Triton's CompilationError
            if runs_eagerly(before):
                return first_run_failed(args, exc, before)
            raise

    guarded._boxed_call = True
    return guarded


def _boxed_fallback(gm, reason, out_strides=None):
    """gm run eagerly; out_strides: the strides its backward takes its
    outputs with (see _eager_on_metadata_mismatch)."""
    reason = f"torch.compile(backend='wick'): {reason}"
    fallback_reasons.append(reason)
    if _log_breaks():
        print(f"[wick:breaks] {reason}; running the graph eagerly", file=sys.stderr)

    def boxed(args):
        if out_strides:
            import torch

            return _restrided(torch, gm(*args), out_strides)
        return gm(*args)

    boxed._boxed_call = True
    return boxed


def _log_graphs():
    spec = os.environ.get("WICK_LOG", "")
    names = {s.strip() for s in spec.replace(" ", ",").split(",")}
    return "graphs" in names or "all" in names


_aot_backends = {}

# False: embedding_dense_backward stays an extern call (A/B benchmarks of the
# generated scatter-add, bench/train_step.py --compilers wick-noemb)
_native_embedding_backward = True


def _aot_own_capture(gm, example_inputs, cudagraphs):
    """AOTAutograd for a graph of wick's own capture: what Dynamo's adapter
    (torch._dynamo.backends.common.aot_autograd) does around
    aot_module_simplified, less its debug-logging context, which imports much
    of inductor (a fifth of a second of a cold first call) to do nothing
    unless TORCH_COMPILE_DEBUG=1; and with a partitioner that lets the
    forward compiler begin the backward's compile (_EarlyBackward)."""
    import torch
    import torch._dynamo
    from torch._functorch.aot_autograd import aot_module_simplified

    global _decomposition_table
    if _decomposition_table is None:
        _decomposition_table = _wick_decompositions()
    disable = torch._dynamo.disable
    partition = {}
    bw = _aten_compiler("backward", cudagraphs, partition)

    def bw_compiler(*args, **kwargs):
        # as Dynamo's adapter: neither the compiler nor the backward it returns is traced by Dynamo
        return disable(disable(bw, reason="do not trace backward compiler function")(*args, **kwargs),
                       reason="do not trace generated backwards pass")

    # a tracing context of its own (Dynamo makes one per frame), so the
    # forward's compiler can report the strides of the activations it leaves
    # channels-last and AOTAutograd compiles the backward for them
    context = torch._guards.TracingContext.try_get()
    with contextlib.nullcontext() if context is not None else torch._guards.tracing(
            torch._guards.TracingContext(None)):
        compilers = dict(fw_compiler=_aten_compiler("forward", cudagraphs, partition), bw_compiler=bw_compiler,
                         inference_compiler=_aten_compiler("inference", cudagraphs),
                         partition_fn=_early_partition(partition))
        compiled = _aot_without_logs(torch, gm, example_inputs, compilers)
        if compiled is None:
            compiled = aot_module_simplified(gm, example_inputs, decompositions=_decomposition_table, **compilers)
    return disable(compiled, reason="do not trace AOT-compiled graph")


_PREPARE_PARAMETERS = ("mod", "args", "kwargs", "decompositions", "keep_inference_input_mutations", "ignore_shape_env",
                       "flatten", "force_non_lazy_backward_lowering")
_CREATE_STATE_PARAMETERS = ("stack", "flat_fn", "fake_flat_args", "flat_args_descs", "aot_config", "fake_mode",
                            "shape_env")
_STAGE2_PARAMETERS = ("aot_state", "aot_graph_capture", "partition_fn", "fw_compiler", "bw_compiler",
                      "inference_compiler")


def aot_stages_known(torch):
    """This torch's AOTAutograd stages have the exact parameters of 2.13's,
    which _aot_without_logs calls: another torch (2.11 has other positional
    ones) gets aot_module_simplified, never a shifted call."""
    import inspect

    import torch._functorch.aot_autograd

    aot = torch._functorch.aot_autograd
    expected = {"prepare_aot_module_simplified": _PREPARE_PARAMETERS, "create_aot_state": _CREATE_STATE_PARAMETERS,
                "aot_stage1_graph_capture": ("aot_state", "orig_flat_fn"), "aot_stage2_compile": _STAGE2_PARAMETERS}
    for name, params in expected.items():
        fn = getattr(aot, name, None)
        if fn is None or tuple(inspect.signature(fn).parameters)[:len(params)] != params:
            return False
    return True


def _aot_without_logs(torch, gm, example_inputs, compilers):
    """aot_module_simplified's work, run stage by stage so that its config
    can say enable_log=False: with it on (its default, which callers of
    aot_module_simplified cannot change), AOTAutograd prints the joint,
    forward and backward graphs to strings for its structured log whether
    or not anything reads them (a seventh of a second for a transformer's
    training step). None where this torch's stages are not the ones this
    was written against (2.13), or where its autograd cache is forced on:
    the caller then runs aot_module_simplified itself. (wick passes no
    pre-grad passes and uses only the call of what this returns.)"""
    import dataclasses

    aot = torch._functorch.aot_autograd
    functorch_config = torch._functorch.config
    if not aot_stages_known(torch) or functorch_config.force_autograd_cache:
        return None
    with contextlib.ExitStack() as stack:
        # the graph modules AOTAutograd makes generate their Python code when
        # it is first read or run (as under Dynamo), not at each edit: wick
        # compiles from their nodes
        stack.enter_context(torch.fx._lazy_graph_module._use_lazy_graph_module(True))
        prepared = aot.prepare_aot_module_simplified(
            gm, example_inputs, None, _decomposition_table, keep_inference_input_mutations=False,
            ignore_shape_env=False, flatten=False,
            force_non_lazy_backward_lowering=functorch_config.force_non_lazy_backward_lowering)
        (functional_call, params_and_buffers, _, _, fake_args, arg_descs, aot_config, fake_mode, shape_env, _, _,
         activation_inputs) = prepared
        aot_config = dataclasses.replace(aot_config, enable_log=False)  # (a frozen dataclass)
        stack.enter_context(torch._dynamo.compiled_autograd._disable())
        state = aot.create_aot_state(stack, functional_call, fake_args, arg_descs, aot_config, fake_mode, shape_env)
        state.fw_metadata.act_input_indices = activation_inputs
        captured = aot.aot_stage1_graph_capture(state, functional_call)
        compiled_boxed, _ = aot.aot_stage2_compile(
            state, captured, compilers["partition_fn"], compilers["fw_compiler"], compilers["bw_compiler"],
            compilers["inference_compiler"])
    params_and_buffers = list(params_and_buffers)

    def run(*args):
        # AOTAutograd's compiled function takes one list (boxed): the graph's
        # parameters and buffers, then the call's arguments
        return compiled_boxed(params_and_buffers + list(args))

    return run


_decomposition_table = None


def _start_triton_workers(example_inputs):
    """A graph on a GPU will compile Triton kernels once it is traced: the
    compile processes start now, and import Triton while AOTAutograd runs."""
    try:
        import torch

        dev = next((x.device for x in example_inputs if isinstance(x, torch.Tensor) and x.is_cuda), None)
        if dev is None or os.environ.get("WICK_TRITON", "").strip() == "interpret":
            return
        from wick import _triton

        major, minor = torch.cuda.get_device_capability(dev)
        _triton.start_workers(major * 10 + minor)
    except Exception:  # noqa: BLE001 - only a head start: the compile starts them itself
        pass


def wick_backend(gm, example_inputs, mode=None, options=None, own_capture=False):
    """torch.compile(model, backend="wick"): AOTAutograd traces dynamo's graph
    to ATen (forward, and backward when something requires grad), and wick
    compiles each graph: native kernels plus extern calls into PyTorch.
    mode="reduce-overhead" replays graphs on CUDA tensors as CUDA graphs.
    own_capture: gm is exported from wick's own capture (compile_graph_with),
    not a Dynamo frame's."""
    cudagraphs = mode == "reduce-overhead"
    _start_triton_workers(example_inputs)
    direct = own_capture and os.environ.get("TORCH_COMPILE_DEBUG", "0") != "1" and not any(
        isinstance(x, (list, tuple, dict)) for x in example_inputs)
    aot = _aot_backends.get(cudagraphs)
    if aot is None and not direct:
        from torch._dynamo.backends.common import aot_autograd

        aot = _aot_backends[cudagraphs] = aot_autograd(
            fw_compiler=_aten_compiler("forward", cudagraphs), bw_compiler=_aten_compiler("backward", cudagraphs),
            inference_compiler=_aten_compiler("inference", cudagraphs), decompositions=_wick_decompositions)
    try:
        if direct:
            return _aot_own_capture(gm, example_inputs, cudagraphs)
        return aot(gm, example_inputs)
    except Exception as exc:  # noqa: BLE001 - a program never fails because of wick
        if type(exc).__name__ in ("Unsupported", "RestartAnalysis", "TensorifyScalarRestartAnalysis"):
            raise  # dynamo's own control flow: it handles these itself
        return _fallback(gm, f"AOTAutograd could not trace the graph: {type(exc).__name__}: {exc}")


def _register_into(registry):
    if "wick" not in registry._COMPILER_FNS:
        registry.register_backend(name="wick")(wick_backend)


class _RegisterOnImport:
    """A meta-path finder that registers the backend the moment torch._dynamo's
    registry is imported, so `import wick` does not pay for importing dynamo."""

    def find_spec(self, name, path=None, target=None):
        if name != _REGISTRY_MODULE:
            return None
        import importlib.util

        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_and_register(module):
            exec_module(module)
            try:
                _register_into(module)
            except Exception as exc:  # never break torch's import
                print(f"wick: could not register the torch.compile backend: {exc}", file=sys.stderr)

        loader.exec_module = exec_and_register
        return spec


def register(lazy=True):
    """Registers "wick" as a torch.compile backend (once). With lazy=True and
    torch._dynamo not imported yet, registration waits for that import."""
    registry = sys.modules.get(_REGISTRY_MODULE)
    if registry is not None:
        _register_into(registry)
        return
    if lazy:
        if not any(isinstance(f, _RegisterOnImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _RegisterOnImport())
        return
    import importlib

    _register_into(importlib.import_module(_REGISTRY_MODULE))


# ---- wick -> FX -----------------------------------------------------------

def _torch_function(torch, row):
    for dotted in row["torch"].split():
        if dotted.startswith("torch."):
            fn = _resolve(torch, dotted)
            if fn is not None:
                return fn
    return None


def _fill_template(t, tensors):
    """An extern's call template with each ExternInput(k) replaced by tensors[k]."""
    from wick._C import ExternInput

    if isinstance(t, ExternInput):
        return tensors[t.index]
    if type(t) is tuple:
        return tuple(_fill_template(x, tensors) for x in t)
    if type(t) is list:
        return [_fill_template(x, tensors) for x in t]
    if type(t) is dict:
        return {k: _fill_template(v, tensors) for k, v in t.items()}
    return t


def _extern_callable(index, entry, name):
    """A function calling extern `entry` (fn, args, kwargs[, picks]) on its tensor
    inputs: an FX call_function target that tracing (AOTAutograd, make_fx)
    runs through, so the torch call itself is what gets traced."""
    fn, args, kwargs = entry[0], entry[1], entry[2] if len(entry) > 2 and entry[2] is not None else {}
    picks = entry[3] if len(entry) > 3 else None

    def call(*tensors):
        return fn(*_fill_template(args, tensors), **_fill_template(kwargs, tensors))

    if picks is not None:  # the node's outputs are these items of the result
        def call(*tensors, whole=call):  # noqa: F811
            result = whole(*tensors)
            return tuple(result[p] for p in picks)

    return _named_extern_call(call, index, name)


def _named_extern_call(call, index, name):
    """call, named for the FX graph's code as extern `index` (`name`)."""
    call.__name__ = call.__qualname__ = f"wick_extern_{index}_{''.join(c if c.isalnum() else '_' for c in name)}"
    call.__module__ = __name__
    return call


def _extern_output(result, k):
    """Output k of an extern node, as wick's runtime reads it: item k of a
    tuple/list result, else the result itself (output 0)."""
    return result[k] if isinstance(result, (tuple, list)) else result


def _view_of(base, base_strides, sizes, strides, offset):
    """A VIEW node in an FX graph: `offset` elements past base's first one,
    base laid out with the strides the wick graph gives it."""
    import torch

    if any(n > 1 and a != b for n, a, b in zip(base.shape, base.stride(), base_strides)):
        laid = torch.empty_strided(base.shape, base_strides, dtype=base.dtype, device=base.device)
        base = laid.copy_(base)
    return base.as_strided(sizes, strides, base.storage_offset() + offset)


def _dense_order(sizes, strides):
    """Dims of a dense, non-overlapping layout from outermost to innermost in
    memory (its strides the contiguous strides of the sizes in that order;
    size-1 dims, whose strides say nothing, keep their place among the
    others), or None when the layout is not one."""
    n = len(sizes)
    order = sorted(range(n), key=lambda d: (-strides[d] if sizes[d] != 1 else 0, d))
    big = [d for d in order if sizes[d] != 1]
    ones = [d for d in range(n) if sizes[d] == 1]
    order = big + ones  # size-1 dims anywhere: innermost, in their order
    return order if _is_contiguous([sizes[d] for d in big], [strides[d] for d in big]) else None


def _view_plan(base_sizes, base_strides, sizes, strides, offset):
    """A VIEW node (the base's memory, laid out with base_strides, read with
    sizes/strides from offset) as logical torch ops, when it is one:
    (base_perm, flat_shape, perm, expand) meaning
    base.permute(base_perm).reshape(flat_shape).permute(perm), then, when
    expand is not None, .reshape(expand[0]).expand(expand[1]). Exact whatever
    layout the traced base has, and AOTAutograd traces it as views (an
    as_strided view of a base laid out otherwise needs a copy, and its
    backward an as_strided_scatter). None: not a reordering of all the base's
    elements (a slice, an offset, an overlapping read): _view_of it is."""
    if offset != 0 or len(base_sizes) != len(base_strides) or len(sizes) != len(strides):
        return None
    if any(n == 0 for n in base_sizes) or any(n == 0 for n in sizes):
        return None
    border = _dense_order(base_sizes, base_strides)
    if border is None:
        return None
    # broadcast dims (stride 0, size > 1) come from an expand of the rest
    bcast = [d for d in range(len(sizes)) if sizes[d] != 1 and strides[d] == 0]
    keep = [d for d in range(len(sizes)) if d not in bcast]
    ksizes, kstrides = [sizes[d] for d in keep], [strides[d] for d in keep]
    if math.prod(ksizes) != math.prod(base_sizes):
        return None
    korder = _dense_order(ksizes, kstrides)
    if korder is None:
        return None
    flat = [ksizes[d] for d in korder]
    perm = [korder.index(d) for d in range(len(ksizes))]
    expand = None
    if bcast:
        expand = ([1 if d in bcast else sizes[d] for d in range(len(sizes))], list(sizes))
    return border, flat, perm, expand


def to_fx(graph, externs=None, no_grad=(), entry_grad=True, written=()):
    """Exports a wick Graph to a torch.fx.GraphModule of torch calls whose
    forward takes the graph inputs positionally and returns a tuple of outputs.
    externs: the extern table capture built (entry i for EXTERN index i).
    no_grad: value ids the captured frame computed with grad mode off (inside
    a no_grad block, or all of a frame entered under no_grad but for its
    enable_grad blocks); the module sets each node's grad mode
    (torch._C._set_grad_enabled nodes, which AOTAutograd traces) and
    returns in `entry_grad` mode. written: (input position, output
    position) pairs, the inputs the captured frame copies those outputs into
    after the graph: a training batch norm's update of such inputs, and
    their num_batches_tracked += 1, are exported as eager makes them, in
    place (_in_place_writes)."""
    import operator

    import torch
    import torch.fx

    _, _, by_name = _op_tables()
    fx = torch.fx.Graph()
    env = {}  # wick value id -> fx node, or a Python scalar for SCALAR values
    for i, inp in enumerate(graph.inputs()):
        env[inp["id"]] = fx.placeholder(f"in{i}")
    in_place = _in_place_writes(torch, graph, externs, written) if written else set()
    no_grad = set(no_grad)
    grad_now = [bool(entry_grad)]

    def grad_mode(on):
        if grad_now[0] != on:
            fx.call_function(torch._C._set_grad_enabled, (on,))
            grad_now[0] = on

    extern_fns = {}
    binary_ops = {"ADD": operator.add, "SUB": operator.sub, "MUL": operator.mul, "DIV": operator.truediv,
                  "POW": operator.pow, "EQ": operator.eq, "NE": operator.ne, "LT": operator.lt,
                  "LE": operator.le, "GT": operator.gt, "GE": operator.ge}
    clamp = {"MAXIMUM": torch.clamp_min, "MINIMUM": torch.clamp_max}

    def as_tensor(x):
        if isinstance(x, torch.fx.Node):
            return x
        dt = torch.bool if isinstance(x, bool) else torch.int64 if isinstance(x, int) else torch.float64
        return fx.call_function(torch.scalar_tensor, (x,), {"dtype": dt})

    for nd in graph.nodes():
        op, out = nd["op"], nd["output"]
        ins = [env[i] for i in nd["inputs"]]
        if op == "SCALAR":
            env[out] = nd["value"]
            continue
        grad_mode(out not in no_grad)
        if op == "EXTERN":
            index = nd["extern_index"]
            if externs is None or index >= len(externs) or callable(externs[index]):
                raise NotImplementedError(f"wick: extern {index} has no call template")
            key = (index, out in in_place)
            if key not in extern_fns:
                make = _in_place_callable if key[1] else _extern_callable
                extern_fns[key] = make(index, externs[index], nd["name"] or "extern")
            result = fx.call_function(extern_fns[key], tuple(ins))
            for k, vid in enumerate(nd["outputs"]):
                env[vid] = fx.call_function(_extern_output, (result, k))
            continue
        row = by_name[op]
        if op == "VIEW":  # the base's memory with the node's sizes and strides
            nd_ = nd["ints"][0]
            sizes, strides = list(nd["ints"][1:1 + nd_]), list(nd["ints"][1 + nd_:1 + 2 * nd_])
            # the torch ops replayed here may lay the base out otherwise than
            # the graph says (eager keeps a transposed input's layout): the
            # view's strides mean the graph's layout, so the base gets it first
            base = graph.value(nd["inputs"][0])
            base_strides = list(base["strides"])
            plan = _view_plan(list(base["sizes"]), base_strides, sizes, strides, nd["ints"][-1])
            if plan is None:
                env[out] = fx.call_function(_view_of, (ins[0], base_strides, sizes, strides, nd["ints"][-1]))
                continue
            # views AOTAutograd traces as views: no copy into the graph's
            # layout, no as_strided_scatter in the backward graph
            base_perm, flat, perm, expand = plan
            x = ins[0]
            if base_perm != sorted(base_perm):
                x = fx.call_method("permute", (x, tuple(base_perm)))
            x = fx.call_method("reshape", (x, tuple(flat)))
            if perm != sorted(perm):
                x = fx.call_method("permute", (x, tuple(perm)))
            if expand is not None:
                x = fx.call_method("expand", (fx.call_method("reshape", (x, tuple(expand[0]))), tuple(expand[1])))
            env[out] = x
            continue
        if op == "LAYER_NORM":
            shape = [graph.value(nd["inputs"][0])["sizes"][d] for d in nd["dims"]]
            wb = [x if isinstance(x, torch.fx.Node) else None for x in ins[1:]]
            env[out] = fx.call_function(torch.nn.functional.layer_norm, (ins[0], shape, wb[0], wb[1], nd["fvalue"]))
            continue
        if op in ("SOFTMAX", "LOG_SOFTMAX"):
            fn = torch.softmax if op == "SOFTMAX" else torch.log_softmax
            env[out] = fx.call_function(fn, (ins[0], nd["dims"][0]))
            continue
        if op == "GELU_TANH":
            env[out] = fx.call_function(torch.nn.functional.gelu, (ins[0],), {"approximate": "tanh"})
            continue
        if op in ("CAT", "PAD", "INDEX", "GATHER", "ARANGE", "FULL"):  # the nodes capture maps torch.cat, F.pad, ... to
            env[out] = _structural_fx(torch, fx, graph, nd, ins)
            continue
        if op == "CONVERT":
            src = nd["inputs"][0]
            if isinstance(ins[0], torch.fx.Node) and graph.value(src)["dtype"] == nd["dtype"]:
                # capture's copy (clone, contiguous, reshape's copy): .to() would return its input
                env[out] = fx.call_function(torch.clone, (ins[0],), {"memory_format": torch.contiguous_format})
                continue
            env[out] = fx.call_method("to", (as_tensor(ins[0]), getattr(torch, nd["dtype"])))
            continue
        if row["kind"] == "reduction":
            fn = _torch_function(torch, row)
            kwargs = {"keepdim": nd["keepdim"]}
            dims = nd["dims"]
            if op in ("VAR", "STD"):
                kwargs["correction"] = nd["fvalue"] if nd["correction_given"] else 1
            if op == "AMAX":
                kwargs["dim"] = tuple(dims or ())
            else:
                kwargs["dim"] = tuple(dims) if dims else None
                if nd["dtype"] is not None:
                    kwargs["dtype"] = getattr(torch, nd["dtype"])
            env[out] = fx.call_function(fn, (as_tensor(ins[0]),), kwargs)
            continue
        if out in in_place:  # num_batches_tracked += 1 (_in_place_writes)
            env[out] = fx.call_method("add_", (ins[0], ins[1]))
            continue
        scalars = [not isinstance(x, torch.fx.Node) for x in ins]
        if op in binary_ops and not all(scalars):
            env[out] = fx.call_function(binary_ops[op], tuple(ins))  # Python scalars keep wrapped-number promotion
        elif op in clamp and any(scalars) and not all(scalars):
            t, s = (ins[0], ins[1]) if scalars[1] else (ins[1], ins[0])
            env[out] = fx.call_function(clamp[op], (t, s))
        elif op == "WHERE" and not scalars[0]:
            env[out] = fx.call_function(torch.where, tuple(ins))
        else:
            fn = _torch_function(torch, row)
            if fn is None:
                raise NotImplementedError(f"wick: no torch function for op {op}")
            # a parameter with a default (softplus' beta, leaky_relu's slope)
            # is a Scalar in torch's signature: a 0-d tensor there is read
            # with .item(), which AOTAutograd cannot trace
            params = [p.strip() for p in row["signature"].split(",") if p.strip() and p.strip() != "*"]
            env[out] = fx.call_function(fn, tuple(
                x if k and k < len(params) and "=" in params[k] and not isinstance(x, torch.fx.Node)
                else as_tensor(x) for k, x in enumerate(ins)))
    outs = []
    for vid in graph.outputs():
        outs.append(as_tensor(env[vid]))
    switches = any(n.target is torch._C._set_grad_enabled for n in fx.nodes)
    grad_mode(bool(entry_grad))
    fx.output(tuple(outs))
    # lazy: its Python code is generated only if something runs or reads it
    # (AOTAutograd interprets the graph node by node: a fallback runs it)
    gm = torch.fx._lazy_graph_module._LazyGraphModule(torch.nn.Module(), fx)
    gm.wick_switches_grad = switches
    return gm


def _batch_norm_functions(torch):
    return (torch.nn.functional.batch_norm, torch.batch_norm)


def _in_place_writes(torch, graph, externs, written):
    """The nodes (by their first output) that to_fx exports as the in-place
    calls eager makes: a training batch norm's update of running statistics
    that are graph inputs (capture's Functional call clones them, updates the
    clones and the frame copies those back into the buffers after the graph)
    and a num_batches_tracked += 1 (an int64 0-d input plus 1, the frame's
    copy back of it as well). AOTAutograd then sees mutations of those
    inputs, as it does in a Dynamo graph: the forward graph updates the
    buffers in place (_StatsInPlace) where nothing else reads them, else
    makes the mutations functional and copies the new values back itself.
    Each written input must be one the frame copies a graph output into
    (written: (input position, output position) pairs), not require grad,
    and be read by nothing after the call, nor be an output itself: in FX
    its placeholder holds the new value from then on. The call's written
    outputs are then the inputs themselves, which AOTAutograd returns as
    they are, and the frame skips a copy back of a tensor onto itself
    (transform.c)."""
    from wick._capture_meta import Functional

    inputs = graph.inputs()
    outputs = list(graph.outputs())
    final = {}  # input value id -> the value the frame copies into it
    for k, j in written:
        if 0 <= k < len(inputs) and 0 <= j < len(outputs):
            final[inputs[k]["id"]] = outputs[j]
    last_read, made_by = {}, {}
    nodes = list(graph.nodes())
    for pos, nd in enumerate(nodes):
        for v in nd["inputs"]:
            last_read[v] = pos
        for v in nd["outputs"]:
            made_by[v] = nd
    returned = set(outputs)

    def free_after(v, pos, nd):
        return v in final and v not in returned and last_read.get(v) == pos and list(nd["inputs"]).count(v) == 1

    norms = _batch_norm_functions(torch)
    chosen = set()
    for pos, nd in enumerate(nodes):
        if nd["op"] == "EXTERN":
            index = nd["extern_index"]
            entry = externs[index] if externs is not None and index < len(externs) else None
            fn = entry[0] if isinstance(entry, tuple) and len(entry) == 3 else None
            if not isinstance(fn, Functional) or not fn.flat or fn.fn not in norms or not fn.written:
                continue
            if all(free_after(nd["inputs"][k], pos, nd) for k in fn.written):
                chosen.add(nd["output"])
        elif nd["op"] == "ADD" and len(nd["inputs"]) == 2:
            counter, one = graph.value(nd["inputs"][0]), made_by.get(nd["inputs"][1])
            if (counter["dtype"] == "int64" and not counter["sizes"] and one is not None and one["op"] == "SCALAR"
                    and type(one["value"]) is int and one["value"] == 1 and free_after(nd["inputs"][0], pos, nd)
                    and final[nd["inputs"][0]] == nd["output"]):
                chosen.add(nd["output"])
    return chosen


def _in_place_callable(index, entry, name):
    """_extern_callable for a Functional extern that to_fx exports in place
    (_in_place_writes): its function called on the inputs themselves, which
    it returns as its written outputs."""
    functional, args, kwargs = entry[0], entry[1], entry[2] if entry[2] is not None else {}

    def call(*tensors):
        out = functional.fn(*_fill_template(args, tensors), **_fill_template(kwargs, tensors))
        return functional.result(out, tuple(tensors[k] for k in functional.written))

    return _named_extern_call(call, index, f"in_place_{name}")


def _structural_fx(torch, fx, graph, nd, ins):
    """The torch call of a CAT, PAD, INDEX, GATHER, ARANGE or FULL node
    (ops.def notes 9, 11, 12) in to_fx's graph: torch.cat, F.pad,
    F.embedding or indexing, torch.gather, torch.arange, torch.full."""
    import operator

    op, ints = nd["op"], list(nd["ints"] or ())
    if op == "CAT":
        return fx.call_function(torch.cat, (list(ins), ints[0]))
    if op == "PAD":  # [lo0, hi0, lo1, hi1, ...] per dim; torch lists them from the last dim
        pads = []
        for d in reversed(range(len(ints) // 2)):
            pads += [ints[2 * d], ints[2 * d + 1]]
        return fx.call_function(torch.nn.functional.pad, (ins[0], pads), {"value": ins[1]})
    if op == "INDEX":
        wrap, dims = ints[0], ints[1:]
        if not wrap and dims == [0] and len(graph.value(nd["inputs"][0])["sizes"]) == 2:
            # ivalue: an embedding's padding_idx + 1 (0: none), for its gradient
            padding = {"padding_idx": nd["ivalue"] - 1} if nd.get("ivalue") else {}
            return fx.call_function(torch.nn.functional.embedding, (ins[1], ins[0]), padding)
        key = [slice(None)] * (max(dims) + 1)
        for d, idx in zip(dims, ins[1:]):
            key[d] = idx
        return fx.call_function(operator.getitem, (ins[0], tuple(key)))
    if op == "GATHER":
        return fx.call_function(torch.gather, (ins[0], ints[0], ins[1]))
    val = graph.value(nd["output"])
    dtype = getattr(torch, nd["dtype"])
    if op == "FULL":
        return fx.call_function(torch.full, (ints, ins[0]), {"dtype": dtype, "device": torch.device(val["device"])})
    # ARANGE: start + i * step, computed in float64 (int64 for integral dtypes)
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    i = fx.call_function(torch.arange, (ints[0],), {"dtype": wide, "device": torch.device(val["device"])})
    return fx.call_method("to", (fx.call_function(operator.add, (fx.call_function(operator.mul, (i, ins[1])), ins[0])),
                                 dtype))


def _channels_last_convolutions(graph):
    """The 2-d convolutions of a graph that wick/_layout.py would run
    channels-last (on CUDA, WICK_CHANNELS_LAST not 0; any device with 1),
    as capture routes such graphs (symbolic.c, conv_graph_for_layout)."""
    knob = os.environ.get("WICK_CHANNELS_LAST", "auto").strip()
    nodes = graph.nodes()
    if knob == "0" or not nodes:
        return 0
    cuda = any(str(v["device"]).startswith("cuda") for v in graph.inputs())
    if not cuda and knob != "1":
        return 0
    return sum(1 for nd in nodes if nd["op"] == "EXTERN" and nd["name"] and
               ("conv2d" in nd["name"] or "convolution" in nd["name"]) and
               len(graph.value(nd["inputs"][0])["sizes"]) == 4)


def _own_autodiff(graph, externs, example_inputs, no_grad, written, cudagraphs=False):
    """wick's own backward for a captured graph (wick/_autodiff.py), or None
    when its rules do not cover the graph: AOTAutograd takes it then.
    cudagraphs: mode="reduce-overhead", the forward and the backward each
    replayed as a CUDA graph."""
    import torch

    if not any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
        return None
    from . import _autodiff

    if not _autodiff.enabled():
        return None
    _start_triton_workers(example_inputs)
    try:
        convs = _channels_last_convolutions(graph)
        layout = convs > 0 and os.environ.get("WICK_LAYOUT_PASS", "graph").strip().lower() != "fx"
        if convs > 1 and not layout:
            # convnext_base's step on the H200: 37.4 ms of device time through
            # AOTAutograd and the layout pass, 49.1 without them
            raise _autodiff.Unsupported(f"{convs} convolutions on CUDA with WICK_LAYOUT_PASS=fx: the channels-last "
                                        "pass of wick/_layout.py runs on AOTAutograd's graphs")
        compiled = _autodiff.compile_training(graph, externs, example_inputs, no_grad, [j for _, j in written],
                                              channels_last=layout, cudagraphs=cudagraphs)
    except _autodiff.Unsupported as exc:
        _autodiff.record_fallback(str(exc))
        return None
    except _C.CompileError as exc:
        _autodiff.record_fallback(f"wick could not compile a graph of it: {exc}")
        return None
    compiled.graph_module = None
    return compiled


def compile_graph_with(backend, graph, example_inputs, externs=None, no_grad=(), entry_grad=None, mode=None,
                       written=()):
    """Compiles a wick Graph with a torch.compile backend (a name such as
    "inductor" or "eager", or a callable taking (GraphModule, example_inputs);
    None or "wick": wick's own, which is how a captured graph that needs
    autograd is compiled: wick's own autodiff (wick/_autodiff.py) where its
    rules cover the graph, else through AOTAutograd, forward and backward
    graphs both compiled by wick). Returns a callable taking the graph inputs and returning a
    tuple of outputs. mode: wick's backend's mode ("reduce-overhead").
    written: (input position, output position) pairs, the inputs the
    captured frame copies outputs into after the graph: for wick's backend,
    batch norm's updates of those inputs stay in place (to_fx)."""
    import torch

    if entry_grad is None:
        entry_grad = torch.is_grad_enabled()
    own = backend is None or backend == "wick"
    written = [(k, j) for k, j in written or ()
               if k < len(example_inputs) and isinstance(example_inputs[k], torch.Tensor)
               and not example_inputs[k].requires_grad] if own else ()
    if own and entry_grad:
        own_backward = _own_autodiff(graph, externs, example_inputs, no_grad, written, mode == "reduce-overhead")
        if own_backward is not None:
            return own_backward
    gm = to_fx(graph, externs, no_grad, entry_grad, written)
    if own:
        backend = functools.partial(wick_backend, mode=mode, own_capture=True)
    elif isinstance(backend, str):
        import torch._dynamo

        backend = torch._dynamo.lookup_backend(backend)
    compiled = backend(gm, list(example_inputs))
    set_grad = torch._C._set_grad_enabled
    switches_grad = gm.wick_switches_grad

    def run(*args):
        if switches_grad:
            # an exception inside a no_grad stretch must not leave grad mode off
            try:
                out = compiled(*args)
            finally:
                set_grad(entry_grad)
        else:
            out = compiled(*args)
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)

    run.graph_module = gm
    return run

