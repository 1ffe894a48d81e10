"""wick's own reverse-mode autodiff, for graphs of wick's own capture that
need a backward (a training step through wick.compile).

Without it such a graph is exported to FX and AOTAutograd traces the forward
and the backward through PyTorch's dispatcher under fake tensors: seconds
for a transformer (4 of ViT-B's 6 s cold first call on the H200). Here the
backward is built from the captured graph directly, one derivative rule per
op of the table and per extern kind, in milliseconds:

  * differentiate() walks the graph backwards from the outputs that need a
    gradient and builds the backward graph node by node (pointwise work,
    reductions, views, extern calls such as mm and the attention backward);
  * every forward value a rule reads becomes an input of the backward and an
    extra output of a copy of the forward graph (the graph inputs among them
    are passed as they are); an extern whose backward needs more of its
    result than the captured node kept (attention's logsumexp, dropout's
    mask) gains that output in the copy, and values the backward would
    otherwise recompute from saved ones (a layer norm's row statistics) are
    computed by the copy, after its own nodes;
  * an extern without a rule of its own is called again under autograd in
    the backward (_RecomputedGradient), unless it draws random numbers;
  * both graphs are compiled by the pipeline as any other, and a
    torch.autograd.Function runs them (compile_training), the backward with
    autocast off.

Before differentiating, training_graph turns batch norms into table ops
(_graph_layout.decompose_batch_norms; a training norm's updated running
statistics are outputs without a gradient, which the frame copies back) and,
on CUDA, runs the channels-last pass over the forward (_graph_layout.
channels_last); a training norm is then differentiated as one
(_batch_norm_backward: eager's two reductions) and the convolution rule
keeps its gradients channels-last. 16-bit training norms on CUDA go to
AOTAutograd by default, or stay calls of eager's kernels here
(WICK_CUDA_NORM_TRAINING=extern: _batch_norm_rule, the buffers updated in
place and left out of the autograd node's outputs).

A table op without a rule, a view no digit decomposition expresses, a random
extern without a rule, symbolic sizes, an output that is an input or a view
of one, or a value needing a gradient that the frame writes into an input
raise Unsupported (backends.py adds CUDA convolution graphs under
WICK_LAYOUT_PASS=fx), and the caller gives the graph to AOTAutograd as
before, with the reason logged (WICK_LOG=breaks) and counted (stats()).
WICK_AUTODIFF=aot sends every graph there.
"""
import os
import sys
import threading

from . import _C, _cudnn_plans
from .backends import _contiguous_strides as contiguous_strides
from .backends import _log_breaks, _log_graphs

FLOATS = ("float16", "bfloat16", "float32", "float64")
COMPLEX = ("complex32", "complex64", "complex128")
LOW = ("float16", "bfloat16")

# ops whose outputs carry no gradient (comparisons, integer results, masks)
_NONDIFF = {"EQ", "NE", "LT", "LE", "GT", "GE", "ISNAN", "ISINF", "ISFINITE", "ISPOSINF", "ISNEGINF", "ARGMAX",
            "ARGMIN", "ANY", "ALL", "LOGICAL_AND", "LOGICAL_OR", "LOGICAL_XOR", "LOGICAL_NOT", "BITWISE_AND",
            "BITWISE_OR", "BITWISE_XOR", "BITWISE_NOT", "ONE_HOT", "ARANGE", "FULL", "SIGN", "FLOOR", "CEIL",
            "ROUND", "TRUNC", "SCALAR"}

# extern calls whose results carry no gradient
_NONDIFF_EXTERNS = {"Tensor.detach", "torch.detach", "Tensor.argmax", "Tensor.argmin", "torch.argmax",
                    "torch.argmin", "Tensor.argsort", "torch.argsort", "Tensor.size", "torch.bucketize",
                    "torch.searchsorted"}

_stats = {"graphs": 0, "fallbacks": 0, "reasons": []}


class Unsupported(Exception):
    """A graph these rules do not cover; it goes through AOTAutograd."""


def enabled():
    return os.environ.get("WICK_AUTODIFF", "own").strip().lower() != "aot"


def stats():
    """How many training graphs took wick's autodiff, how many went to
    AOTAutograd and why (the last 20 reasons)."""
    return {"graphs": _stats["graphs"], "fallbacks": _stats["fallbacks"], "reasons": list(_stats["reasons"])}


def reset_stats():
    _stats.update(graphs=0, fallbacks=0, reasons=[])


def dense_strides(sizes, order):
    """Strides of a dense tensor whose dims, outer first, are `order`."""
    strides, acc = [0] * len(sizes), 1
    for d in reversed(order):
        strides[d] = acc
        acc *= max(sizes[d], 1)
    return strides


def is_channels_last(sizes, strides):
    """Dense channels-last (NHWC-ordered) strides that are not also
    contiguous ones (dims of size 1 do not move an index)."""
    sizes = list(sizes)
    return all(n == 1 or a == b for n, a, b in zip(sizes, strides, dense_strides(sizes, (0, 2, 3, 1)))) and \
        any(n != 1 and a != b for n, a, b in zip(sizes, strides, dense_strides(sizes, range(len(sizes)))))


def like_strides(m):
    """What empty_like(preserve_format) gives a tensor of metadata m: its own
    strides when dense, else dense ones in its dims' stride order."""
    order = sorted(range(len(m["sizes"])), key=lambda d: (-m["strides"][d], d))
    dense = dense_strides(m["sizes"], order)
    own = list(m["strides"])
    return own if all(n == 1 or a == b for n, a, b in zip(m["sizes"], own, dense)) else dense


def _numel(sizes):
    n = 1
    for s in sizes:
        n *= s
    return n


class _Builder:
    """The backward graph under construction, and the forward values it reads."""

    def __init__(self, fwd, fwd_values, producer, nodes):
        self.fwd, self.fwd_values, self.producer, self.nodes = fwd, fwd_values, producer, nodes
        self.g = _C.Graph()
        self.saved = {}        # forward value id (or ("extra", node, k)) -> backward input id
        self.saved_order = []  # those keys, in backward input order
        self.extra = {}        # forward node index -> [metadata of the outputs it gains]
        self.replaced = {}     # forward node index -> the extern entry its copy calls
        self.derived = {}      # key -> builder of a value the forward's copy computes for the backward
        self.recomputed = []   # externs whose gradient calls them again (_RecomputedGradient)
        self.need = set()      # forward values that need a gradient
        self.routed = []       # (forward value, gradient) a rule gives past the node's inputs
        self.extern_entries = []
        self.views = set()   # backward ids made by VIEW
        self.inputs = set()  # backward ids that are its inputs
        self._meta = {}

    def input(self, meta):
        b = self.g.input(meta["dtype"], list(meta["sizes"]), list(meta["strides"]), device=meta["device"],
                         any_dtype=True)
        self.inputs.add(b)
        return b

    # -- values --------------------------------------------------------------
    def fmeta(self, v):
        m = self.fwd_values.get(v)
        if m is None:
            m = self.fwd_values[v] = self.fwd.value(v)
        return m

    def meta(self, b):
        m = self._meta.get(b)
        if m is None:
            m = self._meta[b] = self.g.value(b)
        return m

    def fw(self, v):
        """The forward value v, read by the backward."""
        b = self.saved.get(v)
        if b is not None:
            return b
        number = _const(self, v)
        if number is not None:
            b = self.g.scalar(number)  # a Python number: a constant of the backward too
        else:
            b = self.input(self.fmeta(v))
            self.saved_order.append(v)
        self.saved[v] = b
        return b

    def fw_derived(self, key, meta, build):
        """A value the forward's copy computes after its own nodes,
        build(fwd, vmap, memo) -> its id there (vmap: forward ids to the
        copy's; memo: shared by the builders), read by the backward."""
        b = self.saved.get(key)
        if b is None:
            b = self.input(meta)
            self.saved[key] = b
            self.saved_order.append(key)
            self.derived[key] = build
        return b

    def replace_entry(self, node, entry):
        """The forward's copy calls entry (with picks for its extra outputs) at node."""
        self.replaced[node] = entry

    def fw_extra(self, node, k, meta):
        """Output k of the outputs forward node `node` gains (metadata meta)."""
        key = ("extra", node, k)
        b = self.saved.get(key)
        if b is None:
            self.extra.setdefault(node, [])
            while len(self.extra[node]) <= k:
                self.extra[node].append(None)
            self.extra[node][k] = meta
            b = self.input(meta)
            self.saved[key] = b
            self.saved_order.append(key)
        return b

    # -- ops -----------------------------------------------------------------
    def op(self, name, inputs, **kw):
        return self.g.op(name, inputs, **kw)

    def num(self, x):
        return self.g.scalar(x)

    def mul(self, a, b):
        return self.op("MUL", [a, b])

    def add(self, a, b):
        return self.op("ADD", [a, b])

    def add_in_order(self, a, b):
        """a + b (same sizes), channels-last where a is (two gradients of a
        channels-last activation: the sum stays so, not a copy to NCHW that
        the convolution's gradient would copy back). Other layouts add in
        their dims' order, which later reshapes read without a copy."""
        m = self.meta(a)
        sizes, strides = list(m["sizes"]), list(m["strides"])
        order = [0, 2, 3, 1]
        if len(sizes) != 4 or not is_channels_last(sizes, strides) or list(self.meta(b)["sizes"]) != sizes:
            return self.add(a, b)
        bs = self.meta(b)["strides"]
        out = self.add(self.view(a, [sizes[d] for d in order], [strides[d] for d in order]),
                       self.view(b, [sizes[d] for d in order], [bs[d] for d in order]))
        return self.view(out, sizes, dense_strides(sizes, order))

    def sub(self, a, b):
        return self.op("SUB", [a, b])

    def div(self, a, b):
        return self.op("DIV", [a, b])

    def neg(self, a):
        return self.op("NEG", [a])

    def cast(self, b, dtype):
        return b if self.meta(b)["dtype"] == dtype else self.op("CONVERT", [b], dtype=dtype)

    def wide(self, b):
        """b in float32 when it is 16-bit (derivatives compute as eager's kernels do)."""
        return self.cast(b, "float32") if self.meta(b)["dtype"] in LOW else b

    def copy(self, b):
        return self.op("CONVERT", [b], dtype=self.meta(b)["dtype"])

    def contiguous(self, b):
        m = self.meta(b)
        if list(m["strides"]) == contiguous_strides(m["sizes"]) or _numel(m["sizes"]) <= 1:
            return b
        return self.copy(b)

    def laid_out(self, b, strides):
        """b with these strides (a dense layout): a copy in their dim order,
        seen through a VIEW; b itself when it has them already. What an
        extern that wants one operand laid out like another gets (cuDNN's
        attention backward reads its gradient as laid out like its output)."""
        m = self.meta(b)
        sizes, have = list(m["sizes"]), list(m["strides"])
        if all(n == 1 or s == t for n, s, t in zip(sizes, have, strides)) or _numel(sizes) <= 1:
            return b
        order = sorted(range(len(sizes)), key=lambda d: -strides[d])
        dense = dense_strides(sizes, order)
        if any(n != 1 and s != t for n, s, t in zip(sizes, strides, dense)):
            return self.contiguous(b)  # not a dense layout: none that a copy could give
        t = self.copy(self.view(b, [sizes[d] for d in order], [have[d] for d in order]))
        return self.view(t, sizes, dense)

    def view(self, b, sizes, strides, offset=0):
        sizes, strides = list(sizes), list(strides)
        v = self.op("VIEW", [b], ints=[len(sizes)] + sizes + strides + [offset])
        self.views.add(v)
        return v

    def reshape(self, b, sizes):
        """b (made contiguous) seen with other sizes of the same count."""
        b = self.contiguous(b)
        if list(self.meta(b)["sizes"]) == list(sizes):
            return b
        return self.view(b, sizes, contiguous_strides(sizes))

    def zeros(self, sizes, dtype, device):
        return self.op("FULL", [self.num(0.0 if dtype in FLOATS else 0)], ints=list(sizes), dtype=dtype,
                       device=device)

    def sum_to(self, b, sizes):
        """b summed over the dims broadcasting added to a tensor of `sizes`."""
        have = list(self.meta(b)["sizes"])
        sizes = list(sizes)
        if have == sizes:
            return b
        lead = len(have) - len(sizes)
        if lead < 0:
            raise Unsupported("a gradient of lower rank than its input")
        dims = list(range(lead)) + [lead + i for i, s in enumerate(sizes) if s == 1 and have[lead + i] != 1]
        if dims:
            b = self.op("SUM", [b], dims=dims, keepdim=True)
        return self.reshape(b, sizes)

    def expand_reduced(self, b, in_sizes, dims, keepdim):
        """The gradient of a reduction over `dims` of a tensor of in_sizes,
        broadcast back to in_sizes (a stride-0 view)."""
        nd = len(in_sizes)
        dims = sorted(d % nd for d in dims) if dims else list(range(nd))
        kept = [1 if d in dims else in_sizes[d] for d in range(nd)]
        b = self.reshape(b, kept) if (not keepdim or list(self.meta(b)["sizes"]) != kept) else self.contiguous(b)
        strides = contiguous_strides(kept)
        return self.view(b, in_sizes, [0 if d in dims else strides[d] for d in range(nd)])

    def extern(self, fn, args, kwargs, inputs, outputs, name, picks=None):
        """A call of fn in the backward; args/kwargs templates hold
        ExternInput(k) for inputs[k]. outputs: metadata dicts. Returns ids."""
        index = len(self.extern_entries)
        entry = (fn, tuple(args), dict(kwargs or {})) + ((tuple(picks),) if picks is not None else ())
        self.extern_entries.append(entry)
        return self.g.extern(index, list(inputs), outputs, name=name)

    def transpose(self, b):
        """The last two dims of b swapped (a view)."""
        m = self.meta(b)
        sizes, strides = list(m["sizes"]), list(m["strides"])
        sizes[-2], sizes[-1] = sizes[-1], sizes[-2]
        strides[-2], strides[-1] = strides[-1], strides[-2]
        return self.view(b, sizes, strides)


def _meta(dtype, sizes, device, strides=None):
    return {"dtype": dtype, "sizes": list(sizes), "strides": list(strides or contiguous_strides(sizes)),
            "device": device}


# ---- derivative rules --------------------------------------------------------
# rule(bld, node, gouts, need) -> one gradient per node input (a backward id
# in that input's dtype and shape, or None); gouts: the gradients of the
# node's outputs (None where an output has none). A rule reads forward
# values through bld.fw().

def _in(bld, nd, k):
    return bld.fmeta(nd["inputs"][k])


def _unbroadcast(bld, nd, k, g):
    m = _in(bld, nd, k)
    if m["is_wrapped_number"]:
        return None
    return bld.cast(bld.sum_to(g, m["sizes"]), m["dtype"])


def _binary(fa, fb):
    def rule(bld, nd, gouts, need):
        g = gouts[0]
        out = [None, None]
        if need[0]:
            out[0] = _unbroadcast(bld, nd, 0, fa(bld, nd, g))
        if need[1]:
            out[1] = _unbroadcast(bld, nd, 1, fb(bld, nd, g))
        return out
    return rule


def _x(bld, nd, k=0):
    return bld.fw(nd["inputs"][k])


def _y(bld, nd):
    return bld.fw(nd["output"])


def _unary(f):
    """f(bld, nd, g) -> dL/dx for a pointwise op of one input, in the output's
    dtype (cast to the input's here)."""
    def rule(bld, nd, gouts, need):
        if not need[0]:
            return [None] * len(nd["inputs"])
        return [_unbroadcast(bld, nd, 0, f(bld, nd, gouts[0]))] + [None] * (len(nd["inputs"]) - 1)
    return rule


def _wide_unary(f):
    """As _unary, the derivative computed in float32 for 16-bit values (eager's
    backward kernels widen them) and rounded once."""
    def g_of(bld, nd, g):
        return f(bld, nd, bld.wide(g))
    return _unary(g_of)


def _gelu_derivative(bld, nd, g):
    x = bld.wide(_x(bld, nd))
    cdf = bld.mul(bld.add(bld.op("ERF", [bld.mul(x, bld.num(0.7071067811865476))]), bld.num(1.0)), bld.num(0.5))
    pdf = bld.mul(bld.op("EXP", [bld.mul(bld.mul(x, x), bld.num(-0.5))]), bld.num(0.3989422804014327))
    return bld.mul(g, bld.add(cdf, bld.mul(x, pdf)))


def _gelu_tanh_derivative(bld, nd, g):
    x = bld.wide(_x(bld, nd))
    k, c = 0.7978845608028654, 0.044715
    x2 = bld.mul(x, x)
    inner = bld.mul(bld.mul(x, bld.add(bld.mul(x2, bld.num(c)), bld.num(1.0))), bld.num(k))
    t = bld.op("TANH", [inner])
    left = bld.mul(bld.add(t, bld.num(1.0)), bld.num(0.5))
    dinner = bld.mul(bld.add(bld.mul(x2, bld.num(3 * c)), bld.num(1.0)), bld.num(k))
    right = bld.mul(bld.mul(bld.mul(x, bld.num(0.5)), bld.sub(bld.num(1.0), bld.mul(t, t))), dinner)
    return bld.mul(g, bld.add(left, right))


def _silu_derivative(bld, nd, g):
    x = bld.wide(_x(bld, nd))
    s = bld.op("SIGMOID", [x])
    return bld.mul(g, bld.mul(s, bld.add(bld.mul(x, bld.sub(bld.num(1.0), s)), bld.num(1.0))))


def _pow_rule(bld, nd, gouts, need):
    e = bld.producer.get(nd["inputs"][1])
    enode = bld.nodes[e] if e is not None else None
    if need[1] or enode is None or enode["op"] != "SCALAR":
        raise Unsupported("pow with a tensor exponent")
    c = enode["value"]
    if not need[0]:
        return [None, None]
    x = bld.wide(_x(bld, nd))
    d = bld.mul(bld.op("POW", [x, bld.num(float(c) - 1.0)]), bld.num(float(c)))
    return [_unbroadcast(bld, nd, 0, bld.mul(bld.wide(gouts[0]), d)), None]


def _where_rule(bld, nd, gouts, need):
    g = gouts[0]
    c = _x(bld, nd, 0)
    zero = bld.num(0.0)
    out = [None, None, None]
    if need[1]:
        out[1] = _unbroadcast(bld, nd, 1, bld.op("WHERE", [c, g, zero]))
    if need[2]:
        out[2] = _unbroadcast(bld, nd, 2, bld.op("WHERE", [c, zero, g]))
    return out


def _masked_fill_rule(bld, nd, gouts, need):
    out = [None, None, None]
    if need[0]:
        out[0] = _unbroadcast(bld, nd, 0, bld.op("MASKED_FILL", [gouts[0], _x(bld, nd, 1), bld.num(0.0)]))
    if need[2]:  # a 0-d tensor value: the gradients where it was written
        filled = bld.op("WHERE", [_x(bld, nd, 1), gouts[0], bld.num(0.0)])
        out[2] = _unbroadcast(bld, nd, 2, filled)
    return out


def _const(bld, v):
    """The Python number a wrapped-scalar value holds, or None."""
    n = bld.producer.get(v)
    nd = bld.nodes[n] if n is not None else None
    return nd["value"] if nd is not None and nd["op"] == "SCALAR" and bld.fmeta(v)["is_wrapped_number"] else None


def _mask_rule(keep):
    """Ops whose derivative is the gradient where keep(bld, nd) holds, 0
    elsewhere; their other inputs (bounds) must not need one."""
    def rule(bld, nd, gouts, need):
        if any(need[1:]):
            raise Unsupported(f"{nd['op']} with a bound that needs a gradient")
        if not need[0]:
            return [None] * len(nd["inputs"])
        g = bld.op("WHERE", [keep(bld, nd), gouts[0], bld.num(0.0)])
        return [_unbroadcast(bld, nd, 0, g)] + [None] * (len(nd["inputs"]) - 1)
    return rule


def _clamp_rule(lo_k, hi_k):
    """clamp / clamp_min / clamp_max, bounds included (eager's rule: a bound
    gets the gradient where it clamped; with min > max, max wins)."""
    def rule(bld, nd, gouts, need):
        g, x = gouts[0], _x(bld, nd)
        lo = _x(bld, nd, lo_k) if lo_k is not None else None
        hi = _x(bld, nd, hi_k) if hi_k is not None else None

        def where(cond):
            return bld.op("WHERE", [cond, g, bld.num(0.0)])

        def both(a, b, op="LOGICAL_AND"):
            return a if b is None else b if a is None else bld.op(op, [a, b])

        out = [None] * len(nd["inputs"])
        if need[0]:
            keep = both(bld.op("GE", [x, lo]) if lo is not None else None,
                        bld.op("LE", [x, hi]) if hi is not None else None)
            out[0] = _unbroadcast(bld, nd, 0, where(keep))
        if lo_k is not None and need[lo_k]:
            cond = both(bld.op("LT", [x, lo]), bld.op("LT", [lo, hi]) if hi is not None else None)
            out[lo_k] = _unbroadcast(bld, nd, lo_k, where(cond))
        if hi_k is not None and need[hi_k]:
            cond = both(bld.op("GT", [x, hi]), bld.op("LT", [hi, lo]) if lo is not None else None, "LOGICAL_OR")
            out[hi_k] = _unbroadcast(bld, nd, hi_k, where(cond))
        return out
    return rule


def _strictly_between(bld, nd, lo, hi):
    x = _x(bld, nd)
    return bld.op("LOGICAL_AND", [bld.op("GT", [x, lo]), bld.op("LT", [x, hi])])


def _scaled_rule(bld, nd, gouts, need, f):
    """As _unary for ops with scalar parameters (inputs 1..) that need none."""
    if any(need[1:]):
        raise Unsupported(f"{nd['op']} with a parameter that needs a gradient")
    if not need[0]:
        return [None] * len(nd["inputs"])
    return [_unbroadcast(bld, nd, 0, f(bld, nd, bld.wide(gouts[0])))] + [None] * (len(nd["inputs"]) - 1)


def _leaky_relu_rule(bld, nd, gouts, need):
    return _scaled_rule(bld, nd, gouts, need, lambda bld, nd, g: bld.op(
        "WHERE", [bld.op("GT", [_x(bld, nd), bld.num(0.0)]), g, bld.mul(g, _x(bld, nd, 1))]))


def _elu_rule(bld, nd, gouts, need):
    def f(bld, nd, g):
        x = bld.wide(_x(bld, nd))
        neg = bld.mul(bld.mul(g, bld.op("EXP", [x])), _x(bld, nd, 1))
        return bld.op("WHERE", [bld.op("GT", [x, bld.num(0.0)]), g, neg])
    return _scaled_rule(bld, nd, gouts, need, f)


def _softplus_rule(bld, nd, gouts, need):
    def f(bld, nd, g):
        x = bld.wide(_x(bld, nd))
        bx = bld.mul(x, _x(bld, nd, 1))
        return bld.op("WHERE", [bld.op("GT", [bx, _x(bld, nd, 2)]), g, bld.mul(g, bld.op("SIGMOID", [bx]))])
    return _scaled_rule(bld, nd, gouts, need, f)


def _hardswish_derivative(bld, nd, g):
    x = bld.wide(_x(bld, nd))
    mid = bld.mul(g, bld.div(bld.add(bld.mul(x, bld.num(2.0)), bld.num(3.0)), bld.num(6.0)))
    inner = bld.op("WHERE", [bld.op("LT", [x, bld.num(3.0)]), mid, g])
    return bld.op("WHERE", [bld.op("LE", [x, bld.num(-3.0)]), bld.num(0.0), inner])


def _hardsigmoid_derivative(bld, nd, g):
    x = bld.wide(_x(bld, nd))
    inside = bld.op("LOGICAL_AND", [bld.op("GT", [x, bld.num(-3.0)]), bld.op("LT", [x, bld.num(3.0)])])
    return bld.op("WHERE", [inside, bld.div(g, bld.num(6.0)), bld.num(0.0)])


def _mish_derivative(bld, nd, g):
    x = bld.wide(_x(bld, nd))
    sp = bld.op("SOFTPLUS", [x, bld.num(1.0), bld.num(20.0)])
    t = bld.op("TANH", [sp])
    d = bld.add(t, bld.mul(bld.mul(x, bld.op("SIGMOID", [x])), bld.sub(bld.num(1.0), bld.mul(t, t))))
    return bld.mul(g, d)


def _extremum_rule(pick):
    """maximum/minimum: the gradient to the input that won, half to each on a tie (eager's rule)."""
    def rule(bld, nd, gouts, need):
        a, b, g = _x(bld, nd, 0), _x(bld, nd, 1), gouts[0]
        half = bld.mul(g, bld.num(0.5))
        eq = bld.op("EQ", [a, b])
        out = [None, None]
        for k, (mine, theirs) in enumerate(((a, b), (b, a))):
            if need[k]:
                wins = bld.op(pick, [mine, theirs])
                gk = bld.op("WHERE", [eq, half, bld.op("WHERE", [wins, g, bld.num(0.0)])])
                out[k] = _unbroadcast(bld, nd, k, gk)
        return out
    return rule


def _pow_tensor_rule(bld, nd, gouts, need):
    if _const(bld, nd["inputs"][1]) is not None:
        return _pow_rule(bld, nd, gouts, need)
    g = bld.wide(gouts[0])
    a, b = bld.wide(_x(bld, nd, 0)), bld.wide(_x(bld, nd, 1))
    out = [None, None]
    if need[0]:
        da = bld.mul(b, bld.op("POW", [a, bld.sub(b, bld.num(1.0))]))
        # eager's rule: 0 where the exponent is 0 (0 * inf would be NaN)
        da = bld.op("WHERE", [bld.op("EQ", [b, bld.num(0.0)]), bld.num(0.0), da])
        out[0] = _unbroadcast(bld, nd, 0, bld.mul(g, da))
    if need[1]:
        y = bld.wide(_y(bld, nd))
        db = bld.mul(y, bld.op("LOG", [a]))
        db = bld.op("WHERE", [bld.op("LOGICAL_AND", [bld.op("EQ", [a, bld.num(0.0)]),
                                                     bld.op("GE", [b, bld.num(0.0)])]), bld.num(0.0), db])
        out[1] = _unbroadcast(bld, nd, 1, bld.mul(g, db))
    return out


def _atan2_rule(bld, nd, gouts, need):
    g = bld.wide(gouts[0])
    a, b = bld.wide(_x(bld, nd, 0)), bld.wide(_x(bld, nd, 1))
    r = bld.add(bld.mul(a, a), bld.mul(b, b))
    out = [None, None]
    if need[0]:
        out[0] = _unbroadcast(bld, nd, 0, bld.div(bld.mul(g, b), r))
    if need[1]:
        out[1] = _unbroadcast(bld, nd, 1, bld.neg(bld.div(bld.mul(g, a), r)))
    return out


def _lerp_rule(bld, nd, gouts, need):
    g = gouts[0]
    w = _x(bld, nd, 2)
    out = [None, None, None]
    if need[0]:
        out[0] = _unbroadcast(bld, nd, 0, bld.mul(g, bld.sub(bld.num(1.0), w)))
    if need[1]:
        out[1] = _unbroadcast(bld, nd, 1, bld.mul(g, w))
    if need[2]:
        out[2] = _unbroadcast(bld, nd, 2, bld.mul(g, bld.sub(_x(bld, nd, 1), _x(bld, nd, 0))))
    return out


def _addc_rule(div):
    def rule(bld, nd, gouts, need):
        g = gouts[0]
        t1, t2 = _x(bld, nd, 1), _x(bld, nd, 2)
        out = [None, None, None]
        if need[0]:
            out[0] = _unbroadcast(bld, nd, 0, g)
        if need[1]:
            out[1] = _unbroadcast(bld, nd, 1, bld.div(g, t2) if div else bld.mul(g, t2))
        if need[2]:
            out[2] = _unbroadcast(bld, nd, 2, bld.neg(bld.div(bld.mul(g, t1), bld.mul(t2, t2))) if div
                                  else bld.mul(g, t1))
        return out
    return rule


def _division_rule(rounding):
    """fmod / remainder: 1 for the dividend, -round(a / b) for the divisor."""
    def rule(bld, nd, gouts, need):
        g = gouts[0]
        out = [None, None]
        if need[0]:
            out[0] = _unbroadcast(bld, nd, 0, g)
        if need[1]:
            # the quotient rounded in float32, then stored in the divisor's
            # dtype, as eager's div with a rounding mode gives it: a 16-bit
            # a / b first would round 2.99 up to 3, and a 16-bit quotient
            # above 256 is not every integer
            q = bld.op(rounding, [bld.div(bld.wide(_x(bld, nd, 0)), bld.wide(_x(bld, nd, 1)))])
            q = bld.wide(bld.cast(q, _in(bld, nd, 1)["dtype"]))
            out[1] = _unbroadcast(bld, nd, 1, bld.neg(bld.mul(bld.wide(g), q)))
        return out
    return rule


def _amax_rule(bld, nd, gouts, need):
    """The gradient shared evenly among the elements equal to the extremum."""
    m = _in(bld, nd, 0)
    dims = _reduce_dims(nd, len(m["sizes"]))
    y = bld.expand_reduced(_y(bld, nd), m["sizes"], dims, nd["keepdim"])
    hit = bld.op("CONVERT", [bld.op("EQ", [_x(bld, nd), y])], dtype="float32")
    count = bld.expand_reduced(bld.op("SUM", [hit], dims=dims, keepdim=True), m["sizes"], dims, True)
    g = bld.expand_reduced(bld.wide(gouts[0]), m["sizes"], dims, nd["keepdim"])
    return [bld.cast(bld.div(bld.mul(g, hit), count), m["dtype"])]


def _var_rule(std):
    def rule(bld, nd, gouts, need):
        m = _in(bld, nd, 0)
        dims = _reduce_dims(nd, len(m["sizes"]))
        count = _numel([m["sizes"][d] for d in dims])
        correction = nd["fvalue"] if nd["correction_given"] else 1.0
        x = bld.wide(_x(bld, nd))
        xc = bld.sub(x, bld.op("MEAN", [x], dims=dims, keepdim=True))
        g = bld.expand_reduced(bld.wide(gouts[0]), m["sizes"], dims, nd["keepdim"])
        scale = bld.num(2.0 / max(count - correction, 0.0) if count - correction > 0 else float("inf"))
        gx = bld.mul(bld.mul(g, xc), scale)
        if std:
            y = bld.expand_reduced(bld.wide(_y(bld, nd)), m["sizes"], dims, nd["keepdim"])
            gx = bld.div(bld.mul(gx, bld.num(0.5)), y)
        return [bld.cast(gx, m["dtype"])]
    return rule


def _logsumexp_rule(bld, nd, gouts, need):
    m = _in(bld, nd, 0)
    dims = _reduce_dims(nd, len(m["sizes"]))
    y = bld.expand_reduced(bld.wide(_y(bld, nd)), m["sizes"], dims, nd["keepdim"])
    g = bld.expand_reduced(bld.wide(gouts[0]), m["sizes"], dims, nd["keepdim"])
    return [bld.cast(bld.mul(g, bld.op("EXP", [bld.sub(bld.wide(_x(bld, nd)), y)])), m["dtype"])]


def _tri_rule(op):
    def rule(bld, nd, gouts, need):
        if not need[0]:
            return [None]
        return [bld.op(op, [gouts[0]], ints=list(nd["ints"]))]
    return rule


def _reduce_dims(nd, ndim):
    return list(nd["dims"]) if nd["dims"] else list(range(ndim))


def _sum_rule(bld, nd, gouts, need):
    m = _in(bld, nd, 0)
    g = bld.expand_reduced(gouts[0], m["sizes"], _reduce_dims(nd, len(m["sizes"])), nd["keepdim"])
    return [bld.cast(g, m["dtype"])]


def _mean_rule(bld, nd, gouts, need):
    m = _in(bld, nd, 0)
    dims = _reduce_dims(nd, len(m["sizes"]))
    count = _numel([m["sizes"][d] for d in dims])
    g = bld.expand_reduced(gouts[0], m["sizes"], dims, nd["keepdim"])
    return [bld.cast(bld.div(g, bld.num(float(count))), m["dtype"])]


def _softmax_rule(bld, nd, gouts, need):
    m = _in(bld, nd, 0)
    y = bld.wide(_y(bld, nd))
    g = bld.wide(gouts[0])
    dims = list(nd["dims"])
    gy = bld.mul(g, y)
    s = bld.op("SUM", [gy], dims=dims, keepdim=True)
    return [bld.cast(bld.sub(gy, bld.mul(y, s)), m["dtype"])]


def _log_softmax_rule(bld, nd, gouts, need):
    m = _in(bld, nd, 0)
    y = bld.wide(_y(bld, nd))
    g = bld.wide(gouts[0])
    s = bld.op("SUM", [g], dims=list(nd["dims"]), keepdim=True)
    return [bld.cast(bld.sub(g, bld.mul(bld.op("EXP", [y]), s)), m["dtype"])]


def _layer_norm_rule(bld, nd, gouts, need):
    xm = _in(bld, nd, 0)
    if xm["dtype"] in LOW:
        return _eager_layer_norm_backward(bld, nd, gouts, need)
    dims = list(nd["dims"])
    eps = nd["fvalue"]
    x = _x(bld, nd, 0)
    # the row statistics come from the forward (computed after its nodes, on
    # the same input): recomputed here they would depend on saved values
    # only, so the pipeline would put every norm's in the backward's first
    # stage, one kernel over all of them (slow for Triton to compile)
    xv = nd["inputs"][0]
    stat = _meta(xm["dtype"], [1 if d in dims else n for d, n in enumerate(xm["sizes"])], xm["device"])

    def statistics(fwd, vmap, memo):
        key = ("layer norm statistics", xv, tuple(dims), eps)
        if key not in memo:
            xf = vmap[xv]
            mean_f = fwd.op("MEAN", [xf], dims=dims, keepdim=True)
            c = fwd.op("SUB", [xf, mean_f])
            var_f = fwd.op("MEAN", [fwd.op("MUL", [c, c])], dims=dims, keepdim=True)
            memo[key] = (mean_f, fwd.op("RSQRT", [fwd.op("ADD", [var_f, fwd.scalar(float(eps))])]))
        return memo[key]

    mean = bld.fw_derived(("mean", xv, tuple(dims), eps), stat, lambda f, v, m: statistics(f, v, m)[0])
    rstd = bld.fw_derived(("rstd", xv, tuple(dims), eps), stat, lambda f, v, m: statistics(f, v, m)[1])
    xhat = bld.mul(bld.sub(x, mean), rstd)
    g = bld.wide(gouts[0])
    out = [None, None, None]
    wm = _in(bld, nd, 1)
    if need[1]:
        out[1] = bld.cast(bld.sum_to(bld.mul(g, xhat), wm["sizes"]), wm["dtype"])
    if need[2]:
        bm = _in(bld, nd, 2)
        out[2] = bld.cast(bld.sum_to(g, bm["sizes"]), bm["dtype"])
    if need[0]:
        gxhat = g if wm["is_wrapped_number"] else bld.mul(g, bld.wide(_x(bld, nd, 1)))
        a = bld.op("MEAN", [gxhat], dims=dims, keepdim=True)
        b = bld.op("MEAN", [bld.mul(gxhat, xhat)], dims=dims, keepdim=True)
        gx = bld.mul(bld.sub(bld.sub(gxhat, a), bld.mul(xhat, b)), rstd)
        out[0] = bld.cast(gx, xm["dtype"])
    return out


def _eager_layer_norm_backward(bld, nd, gouts, need):
    """A 16-bit layer norm (the CPU's mixed kernel: 16-bit input, float32
    parameters) gets eager's backward kernel, whose float32 intermediates
    and rounding the rule above does not reproduce bit for bit: its forward
    again under autograd (_RecomputedGradient; the norm is cheap beside what
    it saves), as AOTAutograd keeps eager's native_layer_norm_backward for
    16-bit inputs."""
    import torch

    xm = _in(bld, nd, 0)
    shape = [xm["sizes"][d] for d in nd["dims"]]
    tensors = [0] + [k for k in (1, 2) if not _in(bld, nd, k)["is_wrapped_number"]]
    slot = {k: _C.ExternInput(i) for i, k in enumerate(tensors)}
    template = (slot[0], shape, slot.get(1), slot.get(2), float(nd["fvalue"]))
    entry = (torch.nn.functional.layer_norm, template, {})
    sub = dict(nd, inputs=[nd["inputs"][k] for k in tensors], name="torch.nn.functional.layer_norm")
    got = _recompute_rule(bld, sub, gouts, [need[k] for k in tensors], entry)
    out = [None, None, None]
    for i, k in enumerate(tensors):
        out[k] = got[i]
    return out


def _cat_rule(bld, nd, gouts, need):
    g = bld.contiguous(gouts[0])
    gm = bld.meta(g)
    dim = nd["ints"][0] % len(gm["sizes"])
    strides = contiguous_strides(gm["sizes"])
    out, start = [], 0
    for k, v in enumerate(nd["inputs"]):
        m = bld.fmeta(v)
        n = m["sizes"][dim] if len(m["sizes"]) == len(gm["sizes"]) else 0
        if need[k] and n:
            out.append(bld.cast(bld.view(g, m["sizes"], strides, start * strides[dim]), m["dtype"]))
        else:
            out.append(None)
        start += n
    return out


def _pad_rule(bld, nd, gouts, need):
    if not need[0]:
        return [None, None]
    m = _in(bld, nd, 0)
    crop = [-p for p in nd["ints"]]
    return [bld.cast(bld.op("PAD", [gouts[0], bld.num(0.0)], ints=crop), m["dtype"]), None]


def _gather_rule(bld, nd, gouts, need):
    if not need[0]:
        return [None, None]
    m = _in(bld, nd, 0)
    dim = nd["ints"][0] % len(m["sizes"])
    g = bld.wide(gouts[0]) if m["dtype"] in LOW else gouts[0]
    zeros = bld.zeros(m["sizes"], bld.meta(g)["dtype"], m["device"])
    # scatter_add: each element sums the gradients whose index names it
    gx = bld.op("SCATTER", [zeros, _x(bld, nd, 1), g], ints=[dim, 1, 0])
    return [bld.cast(gx, m["dtype"]), None]


def _index_put_rule(bld, nd, gouts, m, ints):
    """x[i0, i1, ...] (index tensors along ints[1:]): the gradient adds
    into zeros at the same indices (index_put with accumulate)."""
    import torch

    dims = ints[1:]
    g = bld.contiguous(gouts[0])
    indices = [None] * (max(dims) + 1)
    for k, d in enumerate(dims):
        indices[d] = _C.ExternInput(2 + k)
    zeros = bld.zeros(m["sizes"], bld.meta(g)["dtype"], m["device"])
    out = _meta(bld.meta(g)["dtype"], m["sizes"], m["device"])
    ids = bld.extern(torch.ops.aten.index_put.default, (_C.ExternInput(0), indices, _C.ExternInput(1), True), None,
                     [zeros, g] + [_x(bld, nd, 1 + k) for k in range(len(dims))], [out], "aten.index_put.default")
    return [bld.cast(ids[0], m["dtype"])] + [None] * (len(nd["inputs"]) - 1)


def _index_rule(bld, nd, gouts, need):
    """An embedding (a 2-D table indexed along dim 0 by one index tensor):
    embedding_dense_backward, which the C target runs as generated code."""
    import torch

    if any(need[1:]):
        raise Unsupported("an index tensor that needs a gradient")
    if not need[0]:
        return [None] * len(nd["inputs"])
    m = _in(bld, nd, 0)
    ints = list(nd["ints"])
    if len(nd["inputs"]) != 2 or len(m["sizes"]) != 2 or ints[1:] != [0] or ints[0] != 0:
        return _index_put_rule(bld, nd, gouts, m, ints)
    padding_idx = nd["ivalue"] - 1 if nd["ivalue"] > 0 else -1
    g = bld.contiguous(gouts[0])
    out = _meta(bld.meta(g)["dtype"], m["sizes"], m["device"])
    template = (_C.ExternInput(0), _C.ExternInput(1), m["sizes"][0], padding_idx, False)
    index = bld.g.extern(len(bld.extern_entries), [g, _x(bld, nd, 1)], [out],
                         name="aten.embedding_dense_backward.default", ints=[padding_idx, 0])
    bld.extern_entries.append((torch.ops.aten.embedding_dense_backward.default, template, {}))
    return [bld.cast(index[0], m["dtype"])] + [None] * (len(nd["inputs"]) - 1)


def _digit_intervals(bsizes, bstrides, vsizes, vstrides, offset):
    """A view's memory against its base's, as mixed-radix digits. The base's
    dims are merged where memory allows (adjacent in memory order, as a
    reshape could not tell them apart); within each merged dim, of stride T
    and size N, the index is cut at 1, N and every stride of a view dim
    walking it (in units of T; each must divide the next), so each interval
    is a digit. A view dim walks the digits of one merged dim from its
    stride up: whole ones and, where its extent falls inside a digit, the
    first `count` values from the offset's digit (a slice).
    Returns (intervals, view_of, count, digit): intervals as memory
    positions [T * lo, T * hi) (memory order is their order), per interval
    the view dim walking it (None: none), how many of its values it walks
    and the offset's digit; or None when the view does not decompose so
    (overlapping dims, a stride that does not divide, a carry)."""
    bdims = sorted((k for k in range(len(bsizes)) if bsizes[k] > 1), key=lambda k: -bstrides[k])
    vdims = [d for d in range(len(vsizes)) if vsizes[d] > 1]
    if any(bstrides[k] <= 0 for k in bdims) or any(vstrides[d] <= 0 for d in vdims):
        return None
    merged = []  # [stride, size], outer first
    for k in bdims:
        if merged and merged[-1][0] == bstrides[k] * bsizes[k]:
            merged[-1] = [bstrides[k], merged[-1][1] * bsizes[k]]
        else:
            merged.append([bstrides[k], bsizes[k]])
    if any(a[0] < b[0] * b[1] for a, b in zip(merged, merged[1:])):
        return None  # an overlapping base
    spans = sorted((vstrides[d], vstrides[d] * vsizes[d]) for d in vdims)
    if any(a_hi > b_lo for (_, a_hi), (b_lo, _) in zip(spans, spans[1:])):
        return None  # an overlapping view
    offs, rem = [], offset
    for stride, size in merged:
        o, rem = divmod(rem, stride)
        if o >= size:
            return None
        offs.append(o)
    if rem:
        return None
    walks = [[] for _ in merged]  # (view dim, mult)
    for d in vdims:
        j = next((j for j, (stride, _) in enumerate(merged) if stride <= vstrides[d] and vstrides[d] % stride == 0),
                 None)
        if j is None:
            return None
        walks[j].append((d, vstrides[d] // merged[j][0]))
    intervals, view_of, count, digit = [], [], [], []
    for j, (stride, size) in enumerate(merged):
        points = sorted({1, size} | {m for _, m in walks[j] if m < size})
        if any(b % a for a, b in zip(points, points[1:])):
            return None
        cuts = list(zip(points, points[1:]))
        owner, walked = [None] * len(cuts), [1] * len(cuts)
        for d, m in walks[j]:
            hi_d = m * vsizes[d]
            for i, (lo, hi) in enumerate(cuts):
                if lo < m or lo >= hi_d:
                    continue
                if owner[i] is not None:
                    return None
                owner[i] = d
                if hi <= hi_d:
                    walked[i] = hi // lo
                elif hi_d % lo == 0:
                    walked[i] = hi_d // lo  # a slice of this digit
                else:
                    return None
            if _numel([walked[i] for i in range(len(cuts)) if owner[i] == d]) != vsizes[d]:
                return None
        digits, r = [0] * len(cuts), offs[j]
        for i in range(len(cuts) - 1, -1, -1):
            digits[i], r = divmod(r, cuts[i][0])
        for i, (lo, hi) in enumerate(cuts):
            if owner[i] is not None and (digits[i] + walked[i] > hi // lo or (walked[i] == hi // lo and digits[i])):
                return None  # a carry out of this digit
        for i in range(len(cuts) - 1, -1, -1):  # outer first
            intervals.append((stride * cuts[i][0], stride * cuts[i][1]))
            view_of.append(owner[i])
            count.append(walked[i])
            digit.append(digits[i])
    return intervals, view_of, count, digit


def permutation(bsizes, bstrides, vsizes, vstrides, offset):
    """perm with view dim i = base dim perm[i] (sizes and strides), or None
    where the view is not a permutation of its base's dims."""
    if offset != 0 or len(vsizes) != len(bsizes):
        return None
    perm, used = [], set()
    for size, stride in zip(vsizes, vstrides):
        match = [k for k in range(len(bsizes)) if k not in used and bsizes[k] == size and
                 (size == 1 or bstrides[k] == stride)]
        if not match:
            return None
        perm.append(match[0])
        used.add(match[0])
    return perm


def _view_rule(bld, nd, gouts, need):
    if not need[0]:
        return [None]
    base = _in(bld, nd, 0)
    ints = nd["ints"]
    n = ints[0]
    vsizes, vstrides, offset = list(ints[1:1 + n]), list(ints[1 + n:1 + 2 * n]), ints[1 + 2 * n]
    bsizes, bstrides = list(base["sizes"]), list(base["strides"])
    g = gouts[0]
    if _numel(vsizes) == 0 or _numel(bsizes) == 0:
        return [bld.zeros(bsizes, base["dtype"], base["device"])]
    perm = permutation(bsizes, bstrides, vsizes, vstrides, offset)
    if perm in ([0, 2, 3, 1], [0, 3, 1, 2]):
        # channels-last's NCHW <-> NHWC views: the inverse permutation of the
        # gradient, a view of it as it is, no copy. (Other permutations, a
        # transformer's heads, keep the copy below: the matmuls reading
        # those gradients want them contiguous.)
        gstrides = bld.meta(g)["strides"]
        return [bld.view(g, bsizes, [gstrides[perm.index(k)] for k in range(len(bsizes))])]
    # expanded dims: their gradients add up
    expanded = [d for d in range(n) if vstrides[d] == 0 and vsizes[d] > 1]
    if expanded:
        g = bld.op("SUM", [g], dims=expanded, keepdim=True)
        vsizes = [1 if d in expanded else s for d, s in enumerate(vsizes)]
    found = _digit_intervals(bsizes, bstrides, vsizes, vstrides, offset)
    if found is None:
        stepped = _stepped_view_gradient(bld, g, base, vsizes, vstrides, offset)
        if stepped is not None:
            return [stepped]
        raise Unsupported(f"the gradient of a view {vsizes}/{vstrides}+{offset} of {bsizes}/{bstrides}")
    intervals, view_of, count, digit = found  # outer first
    # 1. each view dim split into its digits (outer first): free on the contiguous gradient
    g = bld.contiguous(g)
    axes = []  # interval of each axis
    for d in range(n):
        axes += [i for i, v in enumerate(view_of) if v == d]
    g = bld.reshape(g, [count[i] for i in axes])
    # 2. the digits in memory order: a copy when the view reordered them
    order = sorted(range(len(axes)), key=lambda a: axes[a])
    if order != list(range(len(axes))):
        strides = contiguous_strides([count[i] for i in axes])
        g = bld.copy(bld.view(g, [count[axes[a]] for a in order], [strides[a] for a in order]))
    # 3. the digits the view does not walk (whole or in part): zeros around it
    full = [hi // lo for lo, hi in intervals]
    g = bld.reshape(g, [count[i] if view_of[i] is not None else 1 for i in range(len(intervals))])
    pads = []
    for i in range(len(intervals)):
        walked = count[i] if view_of[i] is not None else 1
        pads += [digit[i], full[i] - digit[i] - walked]
    if any(pads):
        g = bld.op("PAD", [g, bld.num(0.0)], ints=pads)
    # 4. digits merged into the base's dims (in memory order), seen in the base's order
    mem = sorted((k for k in range(len(bsizes)) if bsizes[k] > 1), key=lambda k: -bstrides[k])
    g = bld.reshape(g, [bsizes[k] for k in mem])
    if mem == sorted(mem):
        return [bld.reshape(g, bsizes)]
    mstrides = contiguous_strides([bsizes[k] for k in mem])
    return [bld.view(g, bsizes, [mstrides[mem.index(k)] if k in mem else 0 for k in range(len(bsizes))])]


def _stepped_view_gradient(bld, g, base, vsizes, vstrides, offset):
    """The gradient of a view that walks each base dim it moves along with a
    step, from a start (x[1::2] of an odd length, a column of a split dim:
    what digit intervals cannot describe): per base dim, step - 1 zeros
    after each element, then zeros before the start and after the end.
    None when the view is not of that form (or the base overlaps itself)."""
    bsizes, bstrides = list(base["sizes"]), list(base["strides"])
    nb = len(bsizes)
    order = sorted((k for k in range(nb) if bsizes[k] > 1), key=lambda k: -bstrides[k])
    for outer, inner in zip(order, order[1:]):  # no overlap: each stride spans the dims inside it
        if bstrides[outer] < bstrides[inner] * bsizes[inner]:
            return None
    if any(bstrides[k] <= 0 for k in order):
        return None
    start, rem = [0] * nb, offset
    for k in order:
        start[k], rem = divmod(rem, bstrides[k])
        if start[k] >= bsizes[k]:
            return None
    if rem:
        return None
    step, count, axis_of = [1] * nb, [1] * nb, {}
    for d, (n, st) in enumerate(zip(vsizes, vstrides)):
        if n == 1:
            continue
        for k in order:
            if k not in axis_of and st % bstrides[k] == 0 and start[k] + (n - 1) * (st // bstrides[k]) < bsizes[k]:
                axis_of[k], step[k], count[k] = d, st // bstrides[k], n
                break
        else:
            return None
    # the gradient's dims in the base's order
    gs = contiguous_strides(list(vsizes))
    g = bld.contiguous(bld.view(bld.contiguous(g), count, [gs[axis_of[k]] if k in axis_of else 0 for k in range(nb)]))
    sizes = list(count)
    for k in range(nb):
        if step[k] == 1 or count[k] == 1:
            continue
        g = bld.reshape(g, sizes[:k + 1] + [1] + sizes[k + 1:])
        pads = [0] * (2 * (nb + 1))
        pads[2 * (k + 1) + 1] = step[k] - 1
        g = bld.op("PAD", [g, bld.num(0.0)], ints=pads)
        sizes[k] = count[k] * step[k]
        g = bld.reshape(g, sizes)
    # the last element's trailing zeros may pass the base's end: cut there, then zeros around
    kept = [min(sizes[k], bsizes[k] - start[k]) for k in range(nb)]
    if kept != sizes:
        g = bld.view(g, kept, contiguous_strides(sizes))
    pads = []
    for k in range(nb):
        pads += [start[k], bsizes[k] - start[k] - kept[k]]
    return bld.op("PAD", [g, bld.num(0.0)], ints=pads) if any(pads) else g


# ---- extern rules --------------------------------------------------------------

def _mm_out(bld, a, b):
    ma, mb = bld.meta(a), bld.meta(b)
    return _meta(ma["dtype"], list(ma["sizes"][:-1]) + [mb["sizes"][-1]], ma["device"])


def _mm(bld, a, b, name="aten.mm.default"):
    import torch

    fn = torch.ops.aten.mm.default if name == "aten.mm.default" else torch.ops.aten.bmm.default
    return bld.extern(fn, (_C.ExternInput(0), _C.ExternInput(1)), None, [a, b], [_mm_out(bld, a, b)], name)[0]


def _plain_template(entry, n):
    """entry's args are ExternInput(0..n-1) in order, no kwargs, no extra args."""
    if callable(entry) or len(entry) < 2:
        return False
    args, kwargs = entry[1], entry[2] if len(entry) > 2 else None
    return (len(args) == n and all(isinstance(a, _C.ExternInput) and a.index == i for i, a in enumerate(args))
            and not kwargs)


def _transposed_base(bld, v):
    """The 2-d value v is a transpose of (a linear layer's weight, seen as
    the matmul's right operand), when it needs a gradient: its gradient is
    then made in the base's orientation (no transposed copy after it)."""
    n = bld.producer.get(v)
    nd = bld.nodes[n] if n is not None else None
    if nd is None or nd["op"] != "VIEW" or nd["inputs"][0] not in bld.need:
        return None
    base = bld.fmeta(nd["inputs"][0])
    ints = nd["ints"]
    if len(base["sizes"]) != 2 or list(ints) != [2, base["sizes"][1], base["sizes"][0], base["strides"][1],
                                                 base["strides"][0], 0]:
        return None
    return nd["inputs"][0]


def _right_operand_gradient(bld, nd, k, left, g, dtype_of):
    """The gradient of a matmul's right operand (input k, [K, N]) given its
    left operand's value `left` ([M, K]) and the output's gradient: left^T g,
    or, where the operand is a transpose of a weight [N, K], g^T left routed
    to the weight itself."""
    base = _transposed_base(bld, nd["inputs"][k])
    if base is None:
        return bld.cast(_mm(bld, bld.transpose(left), g), dtype_of)
    bld.routed.append((base, bld.cast(_mm(bld, bld.transpose(g), left), bld.fmeta(base)["dtype"])))
    return None


def _addmm_rule(bld, nd, gouts, need, entry):
    kwargs = dict(entry[2] or {}) if not callable(entry) and len(entry) > 2 else {}
    plain = (not callable(entry), len(entry) >= 2 and len(entry[1]) == 3, len(entry) < 4)
    if not all(plain) or not all(isinstance(a, _C.ExternInput) and a.index == i for i, a in enumerate(entry[1])) \
            or set(kwargs) - {"beta", "alpha"} or not all(isinstance(v, (int, float)) for v in kwargs.values()):
        raise Unsupported("addmm of another form")
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    g = gouts[0]
    ga = g if alpha == 1 else bld.mul(g, bld.num(float(alpha)))
    out = [None, None, None]
    if need[0]:
        out[0] = _unbroadcast(bld, nd, 0, g if beta == 1 else bld.mul(g, bld.num(float(beta))))
    if need[1]:
        out[1] = bld.cast(_mm(bld, ga, bld.transpose(_x(bld, nd, 2))), _in(bld, nd, 1)["dtype"])
    if need[2]:
        out[2] = _right_operand_gradient(bld, nd, 2, _x(bld, nd, 1), ga, _in(bld, nd, 2)["dtype"])
    return out


def _mm_rule(bld, nd, gouts, need, entry, name="aten.mm.default"):
    if not _plain_template(entry, 2):
        raise Unsupported(f"{name} with other arguments")
    g = gouts[0]
    out = [None, None]
    if need[0]:
        out[0] = bld.cast(_mm(bld, g, bld.transpose(_x(bld, nd, 1)), name), _in(bld, nd, 0)["dtype"])
    if need[1] and name == "aten.mm.default":
        out[1] = _right_operand_gradient(bld, nd, 1, _x(bld, nd, 0), g, _in(bld, nd, 1)["dtype"])
    elif need[1]:
        out[1] = bld.cast(_mm(bld, bld.transpose(_x(bld, nd, 0)), g, name), _in(bld, nd, 1)["dtype"])
    return out


def _bmm_rule(bld, nd, gouts, need, entry):
    return _mm_rule(bld, nd, gouts, need, entry, "aten.bmm.default")


def _convolution_rule(bld, nd, gouts, need, entry):
    import torch

    args = entry[1] if not callable(entry) else ()
    kwargs = entry[2] if len(entry) > 2 else None
    if kwargs or len(args) != 9 or not all(isinstance(a, _C.ExternInput) and a.index == i
                                          for i, a in enumerate(args[:len(nd["inputs"])])):
        raise Unsupported("a convolution call of another form")
    has_bias = len(nd["inputs"]) == 3 and isinstance(args[2], _C.ExternInput)
    if len(nd["inputs"]) != (3 if has_bias else 2):
        raise Unsupported("a convolution call of another form")
    stride, padding, dilation, transposed, output_padding, groups = args[3:9]
    mask = [bool(need[0]), bool(need[1]), bool(has_bias and need[2])]
    xm, wm = _in(bld, nd, 0), _in(bld, nd, 1)
    # a channels-last convolution (_graph_layout.channels_last ran on the
    # forward): its gradient is read in its output's layout, and cuDNN and
    # oneDNN answer channels-last for the input's and the weight's gradients
    # (a layout they do not give is copied into this one by the runtime)
    nhwc = len(xm["sizes"]) == 4 and (is_channels_last(xm["sizes"], xm["strides"]) or is_channels_last(wm["sizes"], wm["strides"]))
    g = bld.laid_out(gouts[0], bld.fmeta(nd["outputs"][0])["strides"]) if nhwc else bld.contiguous(gouts[0])
    bias_sizes = [wm["sizes"][1] * groups if transposed else wm["sizes"][0]] if has_bias else None
    template = (_C.ExternInput(0), _C.ExternInput(1), _C.ExternInput(2), bias_sizes, list(stride), list(padding),
                list(dilation), transposed, list(output_padding), groups, mask)
    picks, metas, which = [], [], []
    for k, (want, m) in enumerate(((mask[0], xm), (mask[1], wm), (mask[2], _in(bld, nd, 2) if has_bias else None))):
        if want:
            picks.append(k)
            strides = dense_strides(m["sizes"], (0, 2, 3, 1)) if nhwc and k < 2 else None
            metas.append(_meta(bld.meta(g)["dtype"], m["sizes"], m["device"], strides))
            which.append(k)
    if not picks:
        return [None] * len(nd["inputs"])
    ids = bld.extern(torch.ops.aten.convolution_backward.default, template, None,
                     [g, _x(bld, nd, 0), _x(bld, nd, 1)], metas, "aten.convolution_backward.default", picks)
    out = [None] * len(nd["inputs"])
    for k, b in zip(which, ids):
        out[k] = bld.cast(b, _in(bld, nd, k)["dtype"])
    return out


def _batch_norm_backward(bld, norm, g):
    """[(forward value, gradient)] of a training batch norm's input, weight
    and bias, given g, the gradient of its wide output (norm: a
    _graph_layout.BatchNormValues). Two reductions per channel, the sums of
    g and of g * normalised, which are also the bias's and the weight's
    gradients, as eager's kernel computes it:

        dx = rstd * weight * (g - sum(g) / n - normalised * sum(g * normalised) / n)

    Differentiating the decomposition op by op gives the same values
    through four reductions."""
    c, dims, n = norm.channel_dim, list(norm.dims), norm.count
    xhat = bld.fw(norm.normalised)
    ndim = len(bld.meta(xhat)["sizes"])
    channels = bld.meta(xhat)["sizes"][c]

    def vector(b):  # a keepdim reduction as [C]
        return bld.view(b, [channels], [bld.meta(b)["strides"][c]])

    def broadcast(b):  # a [C] vector against the activations
        sizes = [1] * ndim
        sizes[c] = channels
        strides = [0] * ndim
        strides[c] = bld.meta(b)["strides"][0]
        return bld.view(b, sizes, strides)

    sum_g = bld.op("SUM", [g], dims=dims, keepdim=True)
    sum_gx = bld.op("SUM", [bld.mul(g, xhat)], dims=dims, keepdim=True)
    scale = bld.fw(norm.rstd)
    if norm.weight is not None:
        scale = bld.mul(scale, broadcast(bld.fw(norm.weight)))
    inv_n = bld.num(1.0 / n)
    centred = bld.sub(bld.sub(g, bld.mul(sum_g, inv_n)), bld.mul(xhat, bld.mul(sum_gx, inv_n)))
    dx = bld.mul(centred, scale)
    x_meta = bld.fmeta(norm.input)
    if c != 1:
        # computed NHWC-ordered (the channels-last pass): seen as the NCHW
        # input. (Told by the channel dim the pass recorded, not by the
        # sizes, which are the same in both orders when C == H == W.)
        have = bld.meta(dx)["strides"]
        dx = bld.view(dx, x_meta["sizes"], [have[d] for d in (0, 3, 1, 2)])
    out = [(norm.input, dx)]
    if norm.weight is not None:
        out.append((norm.weight, vector(sum_gx)))
    if norm.bias is not None:
        out.append((norm.bias, vector(sum_g)))
    return out


def _batch_norm_updating(x, weight, bias, running_mean, running_var, momentum, eps):
    """A training batch norm that updates its running statistics in place
    (the frame's copy back is skipped: the graph returns the buffers
    themselves) and returns what its backward reads: the output, the two
    buffers, the batch's mean, 1/std and the reserve space cuDNN keeps
    for its backward (empty where another kernel ran). Eager's F.batch_norm
    picks its kernel the same way (cuDNN for a 16-bit input with float32
    parameters on CUDA)."""
    import torch

    out, mean, invstd, reserve = torch.ops.aten._batch_norm_with_update.default(
        x, weight, bias, running_mean, running_var, momentum, eps)
    return out, running_mean, running_var, mean, invstd, reserve


_extra_metas = {}


def _norm_extra_metas(call, metas, nextra):
    """Metadata of the last nextra items a norm call (a _batch_norm_rule
    template) picks, for arguments of these metadata (ExternInput k:
    metas[k]): the same call on scratch tensors of those sizes, strides
    and dtypes on their device. The kernels answer differently from the
    meta functions (a 16-bit input's statistics stay 16-bit on CPU and CUDA
    unless its parameters are float32; cuDNN's reserve space has the size
    cuDNN asks for), so the kernels are asked, once per form."""
    import torch

    def key_of(a):
        if not isinstance(a, _C.ExternInput):
            return a
        m = metas[a.index]
        return (m["dtype"], tuple(m["sizes"]), tuple(m["strides"]), str(m["device"]))

    key = (call[0], call[3]) + tuple(key_of(a) for a in call[1])
    got = _extra_metas.get(key)
    if got is None:
        def scratch(a):
            if not isinstance(a, _C.ExternInput):
                return a
            m = metas[a.index]
            return torch.ones(m["sizes"], dtype=getattr(torch, m["dtype"]), device=torch.device(m["device"])) \
                .as_strided(m["sizes"], m["strides"]) if _numel(m["sizes"]) else \
                torch.empty_strided(m["sizes"], m["strides"], dtype=getattr(torch, m["dtype"]),
                                    device=torch.device(m["device"]))

        with torch.no_grad():
            res = call[0](*[scratch(a) for a in call[1]])
        items = [res[k] for k in call[3][len(call[3]) - nextra:]]
        got = _extra_metas[key] = [_meta(str(t.dtype).replace("torch.", ""), list(t.shape), metas[call[1][0].index]["device"],
                                         list(t.stride())) for t in items]
    return got


def _batch_norm_rule(bld, nd, gouts, need, entry, node_index):
    """A training F.batch_norm left a call (16-bit on CUDA, training_graph).
    With a weight and running statistics (resnet's norms) the forward calls
    _batch_norm_updating (the kernel eager picks, cuDNN's on CUDA, updating
    the buffers in place) and the backward batch_norm_backward with its
    saved mean, 1/std and reserve space; without them
    _native_batch_norm_legit_functional (or its no_stats overload) and
    native_batch_norm_backward. Other calls of F.batch_norm:
    _recompute_rule."""
    import torch

    from . import _graph_layout

    bound = _graph_layout._batch_norm_call(entry, torch)
    if bound is None or not bound["training"]:
        return _recompute_rule(bld, nd, gouts, need, entry)
    aten = torch.ops.aten
    x = _C.ExternInput(bound["input"])
    w, b = ([_C.ExternInput(bound[k]) if bound[k] is not None else None for k in ("weight", "bias")])
    eps = float(bound["eps"])
    stats = bound["written"]
    if stats and (len(stats) != 2 or len(nd["outputs"]) != 3):
        raise Unsupported("a training batch norm with one running statistic")
    inputs = {d["id"] for d in bld.fwd.inputs()}
    if stats and w is not None and all(nd["inputs"][k] in inputs for k in stats):
        # the buffers (graph inputs) come back as the node's outputs, themselves
        call = (_batch_norm_updating, (x, w, b, _C.ExternInput(stats[0]), _C.ExternInput(stats[1]),
                                       float(bound["momentum"]), eps), {}, (0, 1, 2, 3, 4, 5))
    elif stats:
        call = (aten._native_batch_norm_legit_functional.default,
                (x, w, b, _C.ExternInput(stats[0]), _C.ExternInput(stats[1]), True, float(bound["momentum"]), eps),
                {}, (0, 3, 4, 1, 2))
    elif bound["running_mean"] is None and bound["running_var"] is None and len(nd["outputs"]) == 1:
        call = (aten._native_batch_norm_legit.no_stats, (x, w, b, True, 0.0, eps), {}, (0, 1, 2))
    else:
        raise Unsupported("a training batch norm of another form")
    if gouts[0] is None:
        return [None] * len(nd["inputs"])
    xm = _in(bld, nd, bound["input"])
    updating = call[0] is _batch_norm_updating
    extra = _norm_extra_metas(call, [_in(bld, nd, k) for k in range(len(nd["inputs"]))], 3 if updating else 2)
    bld.replace_entry(node_index, call)
    saved = [bld.fw_extra(node_index, k, m) for k, m in enumerate(extra)]
    # eager's backward reads the gradient laid out as its input
    g = bld.laid_out(bld.cast(gouts[0], xm["dtype"]), like_strides(xm))
    slots = [(bound["input"], xm)] + [(bound[k], _in(bld, nd, bound[k]) if bound[k] is not None else None)
                                      for k in ("weight", "bias")]
    mask = [bool(k is not None and need[k]) for k, _ in slots]
    picks = [i for i, want in enumerate(mask) if want]
    if not picks:
        return [None] * len(nd["inputs"])
    ins = [g, _x(bld, nd, bound["input"])] + saved
    weight = None
    if w is not None:
        weight = _C.ExternInput(len(ins))
        ins.append(_x(bld, nd, bound["weight"]))
    e = [_C.ExternInput(k) for k in range(len(ins))]
    if updating:
        fn, name = aten.batch_norm_backward.default, "aten.batch_norm_backward.default"
        template = (e[0], e[1], weight, None, None, e[2], e[3], True, eps, mask, e[4])
    else:
        fn, name = aten.native_batch_norm_backward.default, "aten.native_batch_norm_backward.default"
        template = (e[0], e[1], weight, None, None, e[2], e[3], True, eps, mask)
    metas = [_meta(slots[i][1]["dtype"], slots[i][1]["sizes"], slots[i][1]["device"], like_strides(slots[i][1]))
             for i in picks]
    ids = bld.extern(fn, template, None, ins, metas, name, picks)
    out = [None] * len(nd["inputs"])
    for i, gi in zip(picks, ids):
        out[slots[i][0]] = gi
    return out


def _matmul_rule(bld, nd, gouts, need, entry):
    """torch.matmul: a vector operand is a matrix of one row (left) or one
    column (right) for the rule, batch dims broadcast."""
    import torch

    if not _plain_template(entry, 2):
        raise Unsupported("matmul with other arguments")
    a, b = _in(bld, nd, 0), _in(bld, nd, 1)
    if not a["sizes"] or not b["sizes"]:
        raise Unsupported("matmul of a 0-d tensor")
    gm = bld.meta(gouts[0])
    av, bv = len(a["sizes"]) == 1, len(b["sizes"]) == 1
    x0, x1 = _x(bld, nd, 0), _x(bld, nd, 1)
    if av:
        x0 = bld.view(x0, [1, a["sizes"][0]], [0, a["strides"][0]])
    if bv:
        x1 = bld.view(x1, [b["sizes"][0], 1], [b["strides"][0], 0])
    m0, m1 = bld.meta(x0), bld.meta(x1)
    batch = list(torch.broadcast_shapes(tuple(m0["sizes"][:-2]), tuple(m1["sizes"][:-2])))
    g = bld.reshape(gouts[0], batch + [m0["sizes"][-2], m1["sizes"][-1]])

    def matmul(x, y):
        mx, my = bld.meta(x), bld.meta(y)
        shape = list(torch.broadcast_shapes(tuple(mx["sizes"][:-2]), tuple(my["sizes"][:-2])))
        out = _meta(gm["dtype"], shape + [mx["sizes"][-2], my["sizes"][-1]], gm["device"])
        return bld.extern(torch.matmul, (_C.ExternInput(0), _C.ExternInput(1)), None, [x, y], [out],
                          "torch.matmul")[0]

    out = [None, None]
    if need[0]:
        ga = bld.sum_to(matmul(g, bld.transpose(x1)), m0["sizes"])
        out[0] = bld.cast(bld.reshape(ga, a["sizes"]), a["dtype"])
    if need[1]:
        gb = bld.sum_to(matmul(bld.transpose(x0), g), m1["sizes"])
        out[1] = bld.cast(bld.reshape(gb, b["sizes"]), b["dtype"])
    return out


def _dropout_rule(bld, nd, gouts, need, entry, node_index):
    """F.dropout in training: the forward calls aten.native_dropout instead,
    which also returns its mask (the same draw as F.dropout's on CUDA; on the
    CPU F.dropout draws a float mask, native_dropout a bool one); the
    gradient is grad * mask / (1 - p)."""
    import torch

    fn, args = entry[0], list(entry[1])
    kwargs = dict(entry[2] or {}) if len(entry) > 2 else {}
    names = ["input", "p", "training", "inplace"]
    defaults = {"p": 0.5, "training": True, "inplace": False}
    bound = dict(zip(names, args))
    if fn is not torch.nn.functional.dropout or set(kwargs) - set(names) or set(bound) & set(kwargs):
        raise Unsupported("dropout of another form")
    bound.update(kwargs)
    for k, v in defaults.items():
        bound.setdefault(k, v)
    x = bound["input"]
    p = bound["p"]
    if not isinstance(x, _C.ExternInput) or x.index != 0 or bound["inplace"] or bound["training"] is not True or \
            not isinstance(p, (int, float)) or not 0 < p < 1:
        raise Unsupported("dropout of another form")
    xm = _in(bld, nd, 0)
    mask_meta = _meta("bool", xm["sizes"], xm["device"], like_strides(xm))
    bld.replace_entry(node_index, (torch.ops.aten.native_dropout.default, (_C.ExternInput(0), float(p), True), {},
                                   (0, 1)))
    mask = bld.fw_extra(node_index, 0, mask_meta)
    if not need[0]:
        return [None]
    g = bld.mul(bld.mul(bld.wide(gouts[0]), bld.cast(mask, "float32")), bld.num(1.0 / (1.0 - p)))
    return [bld.cast(g, xm["dtype"])]


def _cat_extern_rule(bld, nd, gouts, need, entry):
    """torch.cat left an extern call (inputs of mixed dtypes, ...): each
    input's gradient is its slice of the output's, in its dtype."""
    args = list(entry[1]) if not callable(entry) else []
    kwargs = dict(entry[2] or {}) if len(entry) > 2 else {}
    tensors = args[0] if args else kwargs.get("tensors")
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    if set(kwargs) - {"tensors", "dim"} or not isinstance(tensors, (list, tuple)) or not isinstance(dim, int) or \
            len(args) > 2 or not all(isinstance(t, _C.ExternInput) for t in tensors):
        raise Unsupported("torch.cat of another form")
    g = bld.contiguous(gouts[0])
    gm = bld.meta(g)
    dim %= len(gm["sizes"])
    strides = contiguous_strides(gm["sizes"])
    out, start = [None] * len(nd["inputs"]), 0
    for t in tensors:
        m = _in(bld, nd, t.index)
        if len(m["sizes"]) == 1 and m["sizes"][0] == 0 and len(gm["sizes"]) != 1:
            continue  # cat skips an empty 1-d tensor
        n = m["sizes"][dim]
        if need[t.index] and out[t.index] is None:
            piece = bld.cast(bld.view(g, m["sizes"], strides, start * strides[dim]), m["dtype"])
            out[t.index] = piece
        elif need[t.index]:
            raise Unsupported("torch.cat of one tensor twice")
        start += n
    return out


_RANDOM = ("dropout", "rand", "bernoulli", "normal", "multinomial", "uniform", "exponential", "poisson",
           "cauchy", "geometric", "log_normal")


class _RecomputedGradient:
    """The backward of an extern call with no rule of its own: the call again,
    under autograd, on its saved inputs, and torch.autograd.grad of its
    results (the forward's work once more: a rule of its own avoids that).
    Called with the forward node's tensor inputs, then the gradients of its
    outputs (zeros where one has none); returns one gradient per input that
    needs one."""

    def __init__(self, entry, nin, need, nout):
        self.fn = entry if callable(entry) else entry[0]
        self.args = () if callable(entry) else tuple(entry[1])
        self.kwargs = {} if callable(entry) or len(entry) < 3 else dict(entry[2] or {})
        self.picks = None if callable(entry) or len(entry) < 4 else tuple(entry[3])
        self.whole = callable(entry)
        self.nin, self.need, self.nout = nin, need, nout

    def _sub(self, a, xs):
        if isinstance(a, _C.ExternInput):
            return xs[a.index]
        if isinstance(a, (list, tuple)):
            return type(a)(self._sub(v, xs) for v in a)
        if isinstance(a, dict):
            return {k: self._sub(v, xs) for k, v in a.items()}
        return a

    def __call__(self, *tensors):
        import torch

        xs = [t.detach().requires_grad_(True) if self.need[k] else t for k, t in enumerate(tensors[:self.nin])]
        grads = tensors[self.nin:]
        device = xs[0].device.type if xs else "cpu"
        with torch.enable_grad(), torch.autocast(device, enabled=False):
            res = self.fn(*xs) if self.whole else self.fn(*self._sub(self.args, xs), **self._sub(self.kwargs, xs))
        if self.picks is not None:
            outs = [res[k] for k in self.picks]
        elif isinstance(res, (list, tuple)):
            outs = list(res[:self.nout])
        else:
            outs = [res]
        pairs = [(o, g) for o, g in zip(outs, grads) if isinstance(o, torch.Tensor) and o.requires_grad]
        wanted = [x for k, x in enumerate(xs) if self.need[k]]
        got = torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True) \
            if pairs else [None] * len(wanted)
        return tuple(torch.zeros_like(x) if g is None else g for x, g in zip(wanted, got))


class _SeededOps:
    """Notes whether a call runs an ATen op that draws random numbers."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        import torch

        seeded = torch.Tag.nondeterministic_seeded
        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if seeded in getattr(func, "tags", ()):
                    outer.seen = True
                return func(*args, **(kwargs or {}))

        self.seen = False
        self.mode = Mode()


def _draws_random(bld, nd, entry):
    """Whether the extern call draws random numbers, from one run on fake
    tensors: its recomputation in the backward would draw others (a user's
    autograd.Function with a random forward; torch's own are caught by name).
    A call that cannot run on fakes counts as random."""
    import torch
    from . import _capture_meta

    metas = [_in(bld, nd, k) for k in range(len(nd["inputs"]))]
    probe = _SeededOps()
    try:
        with _capture_meta._fake_mode(), torch.enable_grad():
            fakes = [_capture_meta._fake_input(getattr(torch, m["dtype"]), m["device"], m["sizes"], m["strides"],
                                               m["dtype"] in FLOATS) for m in metas]
            rec = _RecomputedGradient(entry, len(fakes), [False] * len(fakes), len(nd["outputs"]))
            with probe.mode:
                rec.fn(*fakes) if rec.whole else rec.fn(*rec._sub(rec.args, fakes), **rec._sub(rec.kwargs, fakes))
    except Exception:
        return True
    return probe.seen


def _recomputed_grad_meta(m):
    """The layout promised for a recomputed call's gradient of an input of
    metadata m: channels-last where the input is (autograd gives a pooling's
    input gradient its input's memory format, and the kernels after it then
    read one order: resnet's stem norm backward read its gradient NCHW and
    its saved values NHWC, and the gradient was copied to NCHW first),
    contiguous otherwise. The runtime copies a result of another layout into
    the promised one."""
    if _is_nhwc(m):
        return _meta(m["dtype"], m["sizes"], m["device"], dense_strides(m["sizes"], (0, 2, 3, 1)))
    return _meta(m["dtype"], m["sizes"], m["device"])


def _is_nhwc(m):
    return len(m["sizes"]) == 4 and is_channels_last(m["sizes"], m["strides"])


def _recompute_rule(bld, nd, gouts, need, entry):
    name = nd["name"] or ""
    if any(r in name.lower() for r in _RANDOM) or _draws_random(bld, nd, entry):
        raise Unsupported(f"no derivative for the extern {name} (it draws random numbers)")
    outs = []
    for k, o in enumerate(nd["outputs"]):
        m = bld.fmeta(o)
        if gouts[k] is not None:
            # in the output's own order where that is channels-last (as
            # eager's autograd hands a pooling its gradient), else contiguous
            outs.append(bld.laid_out(gouts[k], m["strides"]) if _is_nhwc(m) else bld.contiguous(gouts[k]))
        elif m["dtype"] in FLOATS:
            outs.append(bld.zeros(m["sizes"], m["dtype"], m["device"]))
        else:
            raise Unsupported(f"no derivative for the extern {name} (an output that is not floating)")
    wanted = [k for k in range(len(nd["inputs"])) if need[k]]
    metas = [_recomputed_grad_meta(_in(bld, nd, k)) for k in wanted]
    fn = _RecomputedGradient(entry, len(nd["inputs"]), list(need), len(nd["outputs"]))
    index = len(bld.extern_entries)
    bld.extern_entries.append(fn)
    ids = bld.g.extern(index, [_x(bld, nd, k) for k in range(len(nd["inputs"]))] + outs, metas,
                       name=f"recomputed gradient of {name}")
    out = [None] * len(nd["inputs"])
    for k, b in zip(wanted, ids):
        out[k] = b
    bld.recomputed.append(name)
    return out


def _unbind_rule(bld, nd, gouts, need, entry):
    args = entry[1] if not callable(entry) else ()
    if len(args) != 2 or not isinstance(args[0], _C.ExternInput) or not isinstance(args[1], int) or \
            (len(entry) > 2 and entry[2]):
        raise Unsupported("unbind of another form")
    if not need[0]:
        return [None]
    xm = _in(bld, nd, 0)
    dim = args[1] % len(xm["sizes"])
    parts = []
    for k, o in enumerate(nd["outputs"]):
        om = bld.fmeta(o)
        g = gouts[k] if gouts[k] is not None else bld.zeros(om["sizes"], om["dtype"], om["device"])
        sizes = list(om["sizes"])
        parts.append(bld.reshape(g, sizes[:dim] + [1] + sizes[dim:]))
    return [bld.cast(bld.op("CAT", parts, ints=[dim]), xm["dtype"])]


def _lse_meta(bld, nd, entry, item):
    """Metadata of item `item` of the attention call's result (its
    logsumexp), from a call on meta tensors."""
    import torch

    def sub(a):
        if isinstance(a, _C.ExternInput):
            m = _in(bld, nd, a.index)
            return torch.empty_strided(m["sizes"], m["strides"], dtype=getattr(torch, m["dtype"]), device="meta")
        return a

    fn, args = entry[0], entry[1]
    kwargs = dict(entry[2] or {}) if len(entry) > 2 else {}
    res = fn(*[sub(a) for a in args], **{k: sub(v) for k, v in kwargs.items()})
    t = res[item]
    return _meta(str(t.dtype).replace("torch.", ""), list(t.shape), _in(bld, nd, 0)["device"], list(t.stride()))


def _attention_args(entry):
    args = entry[1]
    kwargs = dict(entry[2] or {}) if len(entry) > 2 else {}
    picks = tuple(entry[3]) if len(entry) > 3 else None
    if picks != (0,) or not all(isinstance(a, _C.ExternInput) and a.index == i for i, a in enumerate(args[:3])):
        raise Unsupported("an attention call of another form")
    return args, kwargs


def _grad_like_out(bld, nd, g):
    """The gradient of an attention output, laid out as the output is (the
    kernels read it so; cuDNN's gives wrong gradients otherwise)."""
    return bld.laid_out(g, list(bld.fmeta(nd["output"])["strides"]))


def _grad_meta(bld, nd, k):
    """An attention backward's gradient of input k: laid out as that input
    (empty_like), which the runtime would otherwise copy into another layout."""
    m = _in(bld, nd, k)
    return _meta(m["dtype"], m["sizes"], m["device"], like_strides(m))


def _flash_cpu_rule(bld, nd, gouts, need, entry, node_index):
    import torch

    args, kwargs = _attention_args(entry)
    if len(args) != 5 or args[3] != 0.0 or set(kwargs) - {"attn_mask", "scale"}:
        raise Unsupported("CPU flash attention with dropout or other arguments")
    mask = kwargs.get("attn_mask")
    if mask is not None and need[mask.index]:
        raise Unsupported("an attention mask that needs a gradient")
    lse = bld.fw_extra(node_index, 0, _lse_meta(bld, nd, entry, 1))
    ins = [_grad_like_out(bld, nd, gouts[0])] + [_x(bld, nd, k) for k in range(3)] + [_y(bld, nd), lse]
    kw = {}
    if mask is not None:
        ins.append(_x(bld, nd, mask.index))
        kw["attn_mask"] = _C.ExternInput(6)
    if "scale" in kwargs:
        kw["scale"] = kwargs["scale"]
    template = [_C.ExternInput(k) for k in range(6)] + [0.0, args[4]]
    metas = [_grad_meta(bld, nd, k) for k in range(3)]
    ids = bld.extern(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default, template, kw,
                     ins, metas, "aten._scaled_dot_product_flash_attention_for_cpu_backward.default")
    return [ids[k] if k < 3 and need[k] else None for k in range(len(nd["inputs"]))]


def _philox(device):
    import torch

    # the attention ops' random state: read by their backward only with dropout,
    # which capture never passes (dropout_p is 0.0)
    return torch.zeros((), dtype=torch.int64, device=device)


def _flash_cuda_rule(bld, nd, gouts, need, entry, node_index):
    import torch

    args, kwargs = _attention_args(entry)
    if len(args) != 6 or args[3] != 0.0 or set(kwargs) - {"scale"}:
        raise Unsupported("CUDA flash attention with dropout or other arguments")
    lse = bld.fw_extra(node_index, 0, _lse_meta(bld, nd, entry, 1))
    q, k = _in(bld, nd, 0), _in(bld, nd, 1)
    ins = [_grad_like_out(bld, nd, gouts[0])] + [_x(bld, nd, i) for i in range(3)] + [_y(bld, nd), lse]
    dev = q["device"]
    template = [_C.ExternInput(i) for i in range(6)] + [None, None, q["sizes"][-2], k["sizes"][-2], 0.0, args[4],
                                                        _philox(dev), _philox(dev)]
    kw = {"scale": kwargs["scale"]} if "scale" in kwargs else {}
    metas = [_grad_meta(bld, nd, i) for i in range(3)]
    ids = bld.extern(torch.ops.aten._scaled_dot_product_flash_attention_backward.default, template, kw, ins, metas,
                     "aten._scaled_dot_product_flash_attention_backward.default", picks=(0, 1, 2))
    return [ids[i] if i < 3 and need[i] else None for i in range(len(nd["inputs"]))]


def _biased_attention(bld, nd, need, entry, node_index, nargs, what):
    """What the efficient and cuDNN rules share: their call's form checked
    (no dropout, the logsumexp asked for, a bias that needs no gradient),
    the logsumexp kept by the forward. Returns (args, kwargs for the
    backward (scale), the bias's ExternInput or None, logsumexp, device)."""
    args, kwargs = _attention_args(entry)
    if len(args) != nargs or args[5] != 0.0 or set(kwargs) - {"scale"} or args[4] is not True:
        raise Unsupported(f"{what} attention with dropout, without its logsumexp, or other arguments")
    bias = args[3] if isinstance(args[3], _C.ExternInput) else None
    if bias is not None and need[bias.index]:
        raise Unsupported("an attention bias that needs a gradient")
    lse = bld.fw_extra(node_index, 0, _lse_meta(bld, nd, entry, 1))
    kw = {"scale": kwargs["scale"]} if "scale" in kwargs else {}
    return args, kw, bias, lse, _in(bld, nd, 0)["device"]


def _efficient_rule(bld, nd, gouts, need, entry, node_index):
    import torch

    args, kw, bias, lse, dev = _biased_attention(bld, nd, need, entry, node_index, 7, "efficient")
    ins = [_grad_like_out(bld, nd, gouts[0])] + [_x(bld, nd, i) for i in range(3)]
    bias_t = None
    if bias is not None:
        ins.append(_x(bld, nd, bias.index))
        bias_t = _C.ExternInput(4)
    base = len(ins)
    ins += [_y(bld, nd), lse]
    template = [_C.ExternInput(i) for i in range(4)] + [bias_t, _C.ExternInput(base), _C.ExternInput(base + 1),
                                                       _philox(dev), _philox(dev), 0.0, [True, True, True, False],
                                                       args[6]]
    metas = [_grad_meta(bld, nd, i) for i in range(3)]
    ids = bld.extern(torch.ops.aten._scaled_dot_product_efficient_attention_backward.default, template, kw, ins,
                     metas, "aten._scaled_dot_product_efficient_attention_backward.default", picks=(0, 1, 2))
    return [ids[i] if i < 3 and need[i] else None for i in range(len(nd["inputs"]))]


def _cudnn_rule(bld, nd, gouts, need, entry, node_index):
    import torch

    args, kw, bias, lse, dev = _biased_attention(bld, nd, need, entry, node_index, 8, "cuDNN")
    q, k = _in(bld, nd, 0), _in(bld, nd, 1)
    ins = [_grad_like_out(bld, nd, gouts[0])] + [_x(bld, nd, i) for i in range(3)] + [_y(bld, nd), lse]
    bias_t = None
    if bias is not None:
        ins.append(_x(bld, nd, bias.index))
        bias_t = _C.ExternInput(6)
    template = [_C.ExternInput(i) for i in range(6)] + [_philox(dev), _philox(dev), bias_t, None, None,
                                                        q["sizes"][-2], k["sizes"][-2], 0.0, args[6]]
    metas = [_grad_meta(bld, nd, i) for i in range(3)]
    ids = bld.extern(torch.ops.aten._scaled_dot_product_cudnn_attention_backward.default, template, kw, ins,
                     metas, "aten._scaled_dot_product_cudnn_attention_backward.default", picks=(0, 1, 2))
    return [ids[i] if i < 3 and need[i] else None for i in range(len(nd["inputs"]))]


_RULES = {
    "CONVERT": _unary(lambda bld, nd, g: g),
    "ADD": _binary(lambda bld, nd, g: g, lambda bld, nd, g: g),
    "SUB": _binary(lambda bld, nd, g: g, lambda bld, nd, g: bld.neg(g)),
    "MUL": _binary(lambda bld, nd, g: bld.mul(g, _x(bld, nd, 1)), lambda bld, nd, g: bld.mul(g, _x(bld, nd, 0))),
    "DIV": _binary(lambda bld, nd, g: bld.div(g, _x(bld, nd, 1)),
                   lambda bld, nd, g: bld.neg(bld.div(bld.mul(g, _y(bld, nd)), _x(bld, nd, 1)))),
    "NEG": _unary(lambda bld, nd, g: bld.neg(g)),
    "RELU": _unary(lambda bld, nd, g: bld.op("WHERE", [bld.op("GT", [_y(bld, nd), bld.num(0)]), g, bld.num(0.0)])),
    "EXP": _unary(lambda bld, nd, g: bld.mul(g, _y(bld, nd))),
    "LOG": _unary(lambda bld, nd, g: bld.div(g, _x(bld, nd))),
    "SQRT": _unary(lambda bld, nd, g: bld.div(g, bld.mul(_y(bld, nd), bld.num(2.0)))),
    "RSQRT": _unary(lambda bld, nd, g: bld.mul(bld.mul(g, bld.op("POW", [_y(bld, nd), bld.num(3)])),
                                               bld.num(-0.5))),
    "TANH": _unary(lambda bld, nd, g: bld.mul(g, bld.sub(bld.num(1.0), bld.mul(_y(bld, nd), _y(bld, nd))))),
    "SIGMOID": _unary(lambda bld, nd, g: bld.mul(g, bld.mul(_y(bld, nd), bld.sub(bld.num(1.0), _y(bld, nd))))),
    "SQUARE": _unary(lambda bld, nd, g: bld.mul(g, bld.mul(_x(bld, nd), bld.num(2.0)))),
    "RECIPROCAL": _unary(lambda bld, nd, g: bld.neg(bld.mul(g, bld.mul(_y(bld, nd), _y(bld, nd))))),
    "ABS": _unary(lambda bld, nd, g: bld.mul(g, bld.op("SIGN", [_x(bld, nd)]))),
    "SIN": _unary(lambda bld, nd, g: bld.mul(g, bld.op("COS", [_x(bld, nd)]))),
    "COS": _unary(lambda bld, nd, g: bld.neg(bld.mul(g, bld.op("SIN", [_x(bld, nd)])))),
    "GELU": _wide_unary(_gelu_derivative),
    "GELU_TANH": _wide_unary(_gelu_tanh_derivative),
    "SILU": _wide_unary(_silu_derivative),
    "POW": _pow_tensor_rule,
    "ERF": _wide_unary(lambda bld, nd, g: bld.mul(g, bld.mul(bld.op("EXP", [bld.neg(bld.mul(
        bld.wide(_x(bld, nd)), bld.wide(_x(bld, nd))))]), bld.num(1.1283791670955126)))),
    "ERFC": _wide_unary(lambda bld, nd, g: bld.mul(g, bld.mul(bld.op("EXP", [bld.neg(bld.mul(
        bld.wide(_x(bld, nd)), bld.wide(_x(bld, nd))))]), bld.num(-1.1283791670955126)))),
    "ERFINV": _wide_unary(lambda bld, nd, g: bld.mul(g, bld.mul(bld.op("EXP", [bld.mul(
        bld.wide(_y(bld, nd)), bld.wide(_y(bld, nd)))]), bld.num(0.886226925452758)))),
    "LOG1P": _unary(lambda bld, nd, g: bld.div(g, bld.add(_x(bld, nd), bld.num(1.0)))),
    "EXPM1": _unary(lambda bld, nd, g: bld.mul(g, bld.add(_y(bld, nd), bld.num(1.0)))),
    "LOG2": _unary(lambda bld, nd, g: bld.div(g, bld.mul(_x(bld, nd), bld.num(0.6931471805599453)))),
    "LOG10": _unary(lambda bld, nd, g: bld.div(g, bld.mul(_x(bld, nd), bld.num(2.302585092994046)))),
    "EXP2": _unary(lambda bld, nd, g: bld.mul(g, bld.mul(_y(bld, nd), bld.num(0.6931471805599453)))),
    "TAN": _unary(lambda bld, nd, g: bld.mul(g, bld.add(bld.mul(_y(bld, nd), _y(bld, nd)), bld.num(1.0)))),
    "ASIN": _unary(lambda bld, nd, g: bld.div(g, bld.op("SQRT", [bld.sub(bld.num(1.0), bld.mul(_x(bld, nd),
                                                                                          _x(bld, nd)))]))),
    "ACOS": _unary(lambda bld, nd, g: bld.neg(bld.div(g, bld.op("SQRT", [bld.sub(bld.num(1.0), bld.mul(
        _x(bld, nd), _x(bld, nd)))])))),
    "ATAN": _unary(lambda bld, nd, g: bld.div(g, bld.add(bld.mul(_x(bld, nd), _x(bld, nd)), bld.num(1.0)))),
    "SINH": _unary(lambda bld, nd, g: bld.mul(g, bld.op("COSH", [_x(bld, nd)]))),
    "COSH": _unary(lambda bld, nd, g: bld.mul(g, bld.op("SINH", [_x(bld, nd)]))),
    "ASINH": _unary(lambda bld, nd, g: bld.div(g, bld.op("SQRT", [bld.add(bld.mul(_x(bld, nd), _x(bld, nd)),
                                                                         bld.num(1.0))]))),
    "ACOSH": _unary(lambda bld, nd, g: bld.div(g, bld.op("SQRT", [bld.sub(bld.mul(_x(bld, nd), _x(bld, nd)),
                                                                         bld.num(1.0))]))),
    "ATANH": _unary(lambda bld, nd, g: bld.div(g, bld.sub(bld.num(1.0), bld.mul(_x(bld, nd), _x(bld, nd))))),
    "FRAC": _unary(lambda bld, nd, g: g),
    "NAN_TO_NUM": _unary(lambda bld, nd, g: bld.op("WHERE", [bld.op("ISFINITE", [_x(bld, nd)]), g,
                                                             bld.num(0.0)])),
    "CLAMP": _clamp_rule(1, 2),
    "CLAMP_MIN": _clamp_rule(1, None),
    "CLAMP_MAX": _clamp_rule(None, 1),
    "HARDTANH": _mask_rule(lambda bld, nd: _strictly_between(bld, nd, _x(bld, nd, 1), _x(bld, nd, 2))),
    "RELU6": _mask_rule(lambda bld, nd: _strictly_between(bld, nd, bld.num(0.0), bld.num(6.0))),
    "LEAKY_RELU": _leaky_relu_rule,
    "ELU": _elu_rule,
    "SOFTPLUS": _softplus_rule,
    "HARDSWISH": _wide_unary(_hardswish_derivative),
    "HARDSIGMOID": _wide_unary(_hardsigmoid_derivative),
    "MISH": _wide_unary(_mish_derivative),
    "MAXIMUM": _extremum_rule("GT"),
    "MINIMUM": _extremum_rule("LT"),
    "ATAN2": _atan2_rule,
    "LERP": _lerp_rule,
    "ADDCMUL": _addc_rule(False),
    "ADDCDIV": _addc_rule(True),
    "FMOD": _division_rule("TRUNC"),
    "REMAINDER": _division_rule("FLOOR"),
    "AMAX": _amax_rule,
    "AMIN": _amax_rule,
    "VAR": _var_rule(False),
    "STD": _var_rule(True),
    "LOGSUMEXP": _logsumexp_rule,
    "TRIL": _tri_rule("TRIL"),
    "TRIU": _tri_rule("TRIU"),
    "WHERE": _where_rule,
    "MASKED_FILL": _masked_fill_rule,
    "SUM": _sum_rule,
    "MEAN": _mean_rule,
    "SOFTMAX": _softmax_rule,
    "LOG_SOFTMAX": _log_softmax_rule,
    "LAYER_NORM": _layer_norm_rule,
    "VIEW": _view_rule,
    "CAT": _cat_rule,
    "PAD": _pad_rule,
    "GATHER": _gather_rule,
    "INDEX": _index_rule,
}

_EXTERN_RULES = {
    "operator.matmul": _matmul_rule,
    "torch.cat": _cat_extern_rule,
    "torch.matmul": _matmul_rule,
    "Tensor.matmul": _matmul_rule,
    "aten.addmm.default": _addmm_rule,
    "aten.mm.default": _mm_rule,
    "aten.bmm.default": _bmm_rule,
    "aten.convolution.default": _convolution_rule,
    "Tensor.unbind": _unbind_rule,
}

# extern rules that change the forward's node (its call, its outputs): they take its index
_NODE_RULES = {
    "torch.nn.functional.dropout": _dropout_rule,
    "aten._scaled_dot_product_flash_attention_for_cpu.default": _flash_cpu_rule,
    "aten._scaled_dot_product_flash_attention.default": _flash_cuda_rule,
    "aten._scaled_dot_product_efficient_attention.default": _efficient_rule,
    "aten._scaled_dot_product_cudnn_attention.default": _cudnn_rule,
    "torch.nn.functional.batch_norm": _batch_norm_rule,
}


def _apply_rule(bld, n, nd, gouts, needin, externs, extern_users):
    """The gradients of node n's inputs (None: nothing flows through it)."""
    if nd["op"] != "EXTERN":
        rule = _RULES.get(nd["op"])
        if rule is None:
            raise Unsupported(f"no derivative for {nd['op']}")
        if len(nd["outputs"]) != 1:
            raise Unsupported(f"{nd['op']} with several outputs")
        return rule(bld, nd, gouts, needin)
    name = nd["name"]
    entry = externs[nd["extern_index"]]
    if name in _NODE_RULES:
        if len(extern_users.get(nd["extern_index"], ())) != 1:
            raise Unsupported(f"{name}: an extern entry shared by several nodes")
        return _NODE_RULES[name](bld, nd, gouts, needin, entry, n)
    if name in _EXTERN_RULES:
        if len(nd["outputs"]) == 1 and gouts[0] is None:
            return None
        return _EXTERN_RULES[name](bld, nd, gouts, needin, entry)
    return _recompute_rule(bld, nd, gouts, needin, entry)


class Plan:
    """The two graphs of a differentiated graph and how to call them."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def differentiate(graph, externs, example_inputs, no_grad=(), written=(), batch_norms=()):
    """graph (a wick._C.Graph of wick's capture), its extern table and
    example inputs -> Plan: the forward graph (the original's outputs, then
    the values the backward reads) and the backward graph (the saved values,
    then a gradient for each differentiable output -> a gradient for each
    input that requires one). no_grad: values computed without autograd.
    written: positions of outputs the frame copies into graph inputs (none
    may need a gradient: eager would make the input part of the autograd
    graph). batch_norms: _graph_layout.BatchNormValues of the training
    batch norms decomposed in graph, differentiated as one
    (_batch_norm_backward). Raises Unsupported."""
    import torch

    nodes = graph.nodes()
    norm_at = {n.output: n for n in batch_norms}
    ins = graph.inputs()
    outs = graph.outputs()
    if len(ins) != len(example_inputs):
        raise Unsupported("example inputs do not match the graph")
    values = {}
    producer = {}
    need = set()
    for i, d in enumerate(ins):
        values[d["id"]] = d
        t = example_inputs[i]
        if isinstance(t, torch.Tensor) and t.requires_grad and d["dtype"] in COMPLEX:
            raise Unsupported("a complex input requires grad")
        if isinstance(t, torch.Tensor) and t.requires_grad and d["dtype"] in FLOATS:
            need.add(d["id"])
    if not need:
        raise Unsupported("no input requires grad")
    no_grad = set(no_grad)
    extern_users = {}
    for n, nd in enumerate(nodes):
        for o in nd["outputs"]:
            producer[o] = n
        if nd["op"] == "EXTERN":
            extern_users.setdefault(nd["extern_index"], []).append(n)
        if nd["op"] in _NONDIFF or not any(i in need for i in nd["inputs"]) or \
                (nd["op"] == "EXTERN" and nd["name"] in _NONDIFF_EXTERNS):
            continue
        for o in nd["outputs"]:
            if o not in no_grad:
                m = values.get(o) or values.setdefault(o, graph.value(o))
                if m["dtype"] in FLOATS:
                    need.add(o)
                elif m["dtype"] in COMPLEX:
                    # its gradient is complex: no rule here sums or fills one
                    raise Unsupported("a complex value on the gradient's path")
    input_ids = {d["id"] for d in ins}
    seen = set()
    for v in outs:
        base = v
        while base in producer and nodes[producer[base]]["op"] == "VIEW":
            base = nodes[producer[base]]["inputs"][0]
        if base in input_ids:
            # eager's output would be a view of the input, which autograd tracks
            # (an in-place write to it); a plain tensor here would not be
            raise Unsupported("an output is a graph input or a view of one")
        if v in seen:
            raise Unsupported("an output appears twice")
        seen.add(v)
    if any(outs[j] in need for j in written):
        raise Unsupported("the graph writes a value that needs a gradient into one of its inputs")
    diff_outs = [j for j, v in enumerate(outs) if v in need]
    if not diff_outs:
        raise Unsupported("no output needs a gradient")
    bld = _Builder(graph, values, producer, nodes)
    bld.need = need
    grads = {}

    def accumulate(v, b):
        have = grads.get(v)
        grads[v] = b if have is None else bld.add_in_order(have, b)

    grad_out_metas = []
    for j in diff_outs:
        m = bld.fmeta(outs[j])
        meta = _meta(m["dtype"], m["sizes"], m["device"])
        grad_out_metas.append(meta)
        accumulate(outs[j], bld.input(meta))
    # the backward's inputs: these gradients, then the saved values as rules ask for them
    for n in range(len(nodes) - 1, -1, -1):
        nd = nodes[n]
        gouts = [grads.pop(o, None) for o in nd["outputs"]]
        if all(g is None for g in gouts):
            continue
        needin = [i in need for i in nd["inputs"]]
        if not any(needin):
            continue
        norm = norm_at.get(nd["outputs"][0]) if len(nd["outputs"]) == 1 else None
        if norm is not None and gouts[0] is not None:
            for v, gi in _batch_norm_backward(bld, norm, gouts[0]):
                if v in need:
                    accumulate(v, gi)
            continue
        try:
            gins = _apply_rule(bld, n, nd, gouts, needin, externs, extern_users)
        except Unsupported:
            raise
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            # a template of another shape than a rule reads, the graph builder
            # refusing a node: what the rules do not cover, said as such
            what = nd["name"] if nd["op"] == "EXTERN" else nd["op"]
            raise Unsupported(f"the derivative of {what}: {type(exc).__name__}: {exc}") from exc
        if gins is None:
            continue
        for v, gi, want in zip(nd["inputs"], gins, needin):
            if gi is not None and want:
                accumulate(v, gi)
        for v, gi in bld.routed:
            accumulate(v, gi)
        bld.routed.clear()
    try:
        return _outputs_and_forward(graph, externs, nodes, ins, outs, diff_outs, grad_out_metas, need, grads, bld)
    except (ValueError, TypeError, IndexError, KeyError) as exc:  # a symbolic size, a dtype the builder refuses
        raise Unsupported(f"the forward's copy or the gradients' outputs: {type(exc).__name__}: {exc}") from exc


def _outputs_and_forward(graph, externs, nodes, ins, outs, diff_outs, grad_out_metas, need, grads, bld):
    grad_inputs = []
    for i, d in enumerate(ins):
        if d["id"] not in need:
            continue
        b = grads.get(d["id"])
        if b is None:
            b = bld.zeros(d["sizes"], d["dtype"], d["device"])
        b = bld.cast(b, d["dtype"])
        m = bld.meta(b)
        if list(m["sizes"]) != list(d["sizes"]):
            raise Unsupported(f"the gradient of input {i} has sizes {m['sizes']}, not {d['sizes']}")
        if b in bld.views or b in bld.inputs:
            b = bld.copy(b)  # a gradient of its own: the optimizer updates .grad in place
        bld.g.output(b)
        grad_inputs.append(i)
    return _finish(graph, externs, nodes, ins, outs, diff_outs, grad_out_metas, grad_inputs, bld)


def _finish(graph, externs, nodes, ins, outs, diff_outs, grad_out_metas, grad_inputs, bld):
    # the forward: a copy with the attention calls' extra results and the saved values as outputs
    extra = {n: metas for n, metas in bld.extra.items()}
    fwd, vmap = graph.copy(extra=extra) if extra else graph.copy()
    fwd_externs = list(externs)
    for n, metas in extra.items():
        nd = nodes[n]
        entry = bld.replaced.get(n)
        if entry is not None and len(entry) > 3:
            # the call's items for the node's outputs, then its extra ones
            assert len(entry[3]) == len(nd["outputs"]) + len(metas), (entry, metas)
            fwd_externs[nd["extern_index"]] = tuple(entry)
            continue
        entry = entry or fwd_externs[nd["extern_index"]]
        fwd_externs[nd["extern_index"]] = tuple(entry[:3]) + (tuple(range(len(nd["outputs"]) + len(metas))),)
    input_pos = {d["id"]: i for i, d in enumerate(ins)}
    saved_spec = []  # ("input", position) or ("output", position among the forward's outputs)
    nout = len(outs)
    memo = {}
    for key in bld.saved_order:
        if key in bld.derived:
            v = bld.derived[key](fwd, vmap, memo)
        elif isinstance(key, tuple):
            _, n, k = key
            v = vmap[nodes[n]["outputs"][-1]] + 1 + k
        elif key in input_pos:
            saved_spec.append(("input", input_pos[key]))
            continue
        else:
            v = vmap[key]
        fwd.output(v)
        saved_spec.append(("output", nout))
        nout += 1
    # a buffer updated in place: (its position among the outputs, and among the inputs)
    updated = {v: input_pos[nodes[n]["inputs"][entry[1][3 + k].index]]
               for n, entry in bld.replaced.items() if entry[0] is _batch_norm_updating
               for k, v in enumerate(nodes[n]["outputs"][1:])}
    return Plan(fwd=fwd, fwd_externs=fwd_externs, bwd=bld.g, bwd_externs=bld.extern_entries,
                in_place=[(j, updated[v]) for j, v in enumerate(outs) if v in updated], noutputs=len(outs),
                recomputed=bld.recomputed, diff_outs=diff_outs, grad_out_metas=grad_out_metas,
                grad_inputs=grad_inputs, saved_spec=saved_spec, nsaved=len(bld.saved_order), ninputs=len(ins))


# ---- running the two graphs -----------------------------------------------------

_function_class = None


def _autograd_function(torch):
    global _function_class
    if _function_class is not None:
        return _function_class

    class WickGraphFunction(torch.autograd.Function):
        """A forward and backward graph compiled by wick, as one autograd node."""

        @staticmethod
        def forward(ctx, runner, *args):
            outs = runner.fwd(*args)
            saved = [args[i] if kind == "input" else outs[i] for kind, i in runner.saved_spec]
            ctx.save_for_backward(*saved)
            ctx.runner = runner
            user = outs[:runner.noutputs]
            nondiff = [user[j] for j in runner.nondiff_outs]
            if nondiff:
                ctx.mark_non_differentiable(*nondiff)
            if runner.in_place:
                # buffers updated in place (_batch_norm_updating): not this
                # node's outputs (autograd would return views of them and
                # the frame would copy them onto themselves); run() puts the
                # buffers themselves in their places, as eager leaves them
                return tuple(t for j, t in enumerate(user) if j not in runner.in_place_outputs)
            return tuple(user)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grads):
            return ctx.runner.backward(torch, ctx.saved_tensors, grads)

    _function_class = WickGraphFunction
    return _function_class


class _Runner:
    def __init__(self, plan, fwd, bwd):
        self.fwd, self.bwd = fwd, bwd
        self.noutputs, self.saved_spec = plan.noutputs, plan.saved_spec
        self.diff_outs, self.grad_out_metas = plan.diff_outs, plan.grad_out_metas
        self.nondiff_outs = [j for j in range(plan.noutputs) if j not in set(plan.diff_outs)]
        self.in_place = plan.in_place  # [(output position, the graph input it is)], ascending
        self.in_place_outputs = {j for j, _ in plan.in_place}
        self.grad_inputs, self.ninputs = plan.grad_inputs, plan.ninputs
        self.bwd_inputs = plan.bwd.inputs()
        self.device_type = "cuda" if any(d["device"].startswith("cuda") for d in self.bwd_inputs) else "cpu"
        self.restride = None  # positions of backward inputs to copy into the promised layout

    def backward(self, torch, saved, grads):
        args = []
        for j, m in zip(self.diff_outs, self.grad_out_metas):
            g = grads[j]
            if g is None:
                g = torch.zeros(m["sizes"], dtype=getattr(torch, m["dtype"]), device=m["device"])
            elif not g.is_contiguous():
                g = g.contiguous()
            args.append(g)
        args.extend(saved)
        if self.restride:
            for k in self.restride:
                args[k] = self._laid_out(torch, k, args[k])
        try:
            res = self._run_backward(torch, args)
        except ValueError:
            # an input in another layout than the graph's (an extern's result
            # with strides of its own): copied into the promised one from now on
            self.restride = [k for k, t in enumerate(args) if tuple(t.stride()) != tuple(self.bwd_inputs[k]["strides"])
                             and t.numel() > 1]
            if not self.restride:
                raise
            if hasattr(self.bwd, "copied"):
                # a CUDA graph runner: these are new tensors every call, even
                # where the allocator gives two calls' copies one address
                self.bwd.copied.update(self.restride)
            for k in self.restride:
                args[k] = self._laid_out(torch, k, args[k])
            res = self._run_backward(torch, args)
        out = [None] * (1 + self.ninputs)
        for k, i in enumerate(self.grad_inputs):
            out[1 + i] = res[k]
        return tuple(out)

    def _run_backward(self, torch, args):
        # a backward called inside an autocast region runs with it on (the
        # engine carries the thread's state): the graph's dtypes are explicit,
        # and an autocast fp32 op inside an extern (the sum in convolution's
        # bias gradient) would change a result's dtype
        if torch.is_autocast_enabled(self.device_type):
            with torch.autocast(self.device_type, enabled=False):
                return self.bwd(*args)
        return self.bwd(*args)

    def _laid_out(self, torch, k, t):
        m = self.bwd_inputs[k]
        if tuple(t.stride()) == tuple(m["strides"]):
            return t
        out = torch.empty_strided(t.shape, m["strides"], dtype=t.dtype, device=t.device)
        out.copy_(t)
        return out


_CUDA_NORM_DEVICES = ("cuda",)  # where 16-bit training batch norm stays a call (tests widen it)


def training_graph(graph, externs, no_grad=(), written=(), channels_last=False):
    """(graph, externs, no_grad, batch norms) as differentiate takes them: batch norms as
    table ops (_graph_layout.decompose_batch_norms; eval-mode ones too, a
    frozen norm being fine-tuned around), training ones' updated
    running statistics (written back by the frame after the graph, eager
    computes them without autograd) among the values without a gradient;
    16-bit training norms on CUDA: WICK_CUDA_NORM_TRAINING=aot (the
    default) raises Unsupported (AOTAutograd keeps them as cuDNN's calls),
    =extern keeps them as calls of eager's kernels (_batch_norm_rule),
    =decompose makes them table ops too; with channels_last,
    the convolutions and the work around them in NHWC order
    (_graph_layout.channels_last), which the backward then follows
    (_convolution_rule)."""
    from . import _graph_layout

    externs = list(externs or [])
    mode = os.environ.get("WICK_CUDA_NORM_TRAINING", "aot").strip()
    keep = () if mode == "decompose" else _graph_layout.cuda_norm_calls(graph, externs, _CUDA_NORM_DEVICES)
    if keep and mode not in ("extern", "decompose"):
        # resnet50's bf16 step on the H200 (2026-12-04, call 2 of
        # bench/results/2026-12-04-2000-h200): 22.34 ms a step through
        # AOTAutograd (802 kernels, 14.14 ms on the device), 23.85 ms on
        # wick's graphs with the norms as cuDNN's calls (911, 15.01 ms),
        # whose first call took 1.6 s against 5.0
        raise Unsupported(f"{len(keep)} 16-bit training batch norms on CUDA go through AOTAutograd "
                          "(WICK_CUDA_NORM_TRAINING=aot, the default)")
    stats = _graph_layout.batch_norm_statistics(graph, externs)
    no_grad = list(no_grad)
    norms = []
    for training in (True, False):
        graph, count, env, found = _graph_layout.decompose_batch_norms(graph, externs, training=training,
                                                                       keep=keep if training else ())
        if env is not None:
            no_grad = [env[v] for v in no_grad if v in env]
            norms = [n.moved(env, {}) for n in norms] + found
    if channels_last:
        try:
            graph, externs, env, nhwc = _graph_layout.channels_last(graph, externs)
        except _graph_layout.Abandon as exc:
            raise Unsupported(f"the channels-last pass: {exc}") from None
        except ValueError as exc:  # a builder refusal
            raise Unsupported(f"the channels-last pass, rebuilding the graph: {exc}") from None
        no_grad = [env[v] for v in no_grad if v in env]
        norms = [n.moved(env, nhwc) for n in norms]
    outs = graph.outputs()
    no_grad += [outs[j] for j in stats if j in set(written)]
    return graph, externs, no_grad, norms


def compile_training(graph, externs, example_inputs, no_grad=(), written=(), channels_last=False, cudagraphs=False):
    """A callable running graph with wick's own backward: args -> tuple of
    outputs, differentiable through one autograd node. written: positions
    of outputs the frame copies into graph inputs (batch norm's running
    statistics); channels_last: see training_graph; cudagraphs
    (mode="reduce-overhead"): the forward and the backward are each replayed
    as a CUDA graph (wick/_cudagraphs.py; on the CPU they run as they are).
    Raises Unsupported (the caller uses AOTAutograd) or wick._C.CompileError."""
    import torch

    graph, externs, no_grad, norms = training_graph(graph, externs, no_grad, written, channels_last)
    plan = differentiate(graph, externs, example_inputs, no_grad, written, norms)
    done = {}
    nthreads = torch.get_num_threads()

    def compile_backward():
        # the backward's C compile overlaps the forward's (Graph.compile drops
        # the GIL around the C compilers); OpenMP's thread count is per thread
        try:
            torch.set_num_threads(nthreads)
            done["bwd"] = plan.bwd.compile(externs=plan.bwd_externs)
            # its GPU kernels compile while the forward's compile and run,
            # after the forward's first-call kernels on the compile processes
            done["bwd"].compile_kernels_soon()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            done["error"] = exc

    thread = threading.Thread(target=compile_backward, name="wick-autodiff-backward", daemon=True)
    thread.start()
    try:
        fwd = plan.fwd.compile(externs=plan.fwd_externs)
    finally:
        thread.join()
    if "error" in done:
        raise done["error"]
    # the forward's kernels start compiling now, and cuDNN's attention plans
    # are built meanwhile (the first run waits for the kernels)
    fwd.compile_kernels_soon()
    _cudnn_plans.warm(plan.fwd, plan.fwd_externs)
    fwd.check_inputs = False  # capture's guards checked them
    fwd.alias_views = True
    bwd = done["bwd"]
    bwd.alias_views = True
    if cudagraphs:
        # The values the forward saves for the backward live in its graph's
        # memory: those an earlier step's autograd node still holds when the
        # forward replays (microbatches before one backward) are moved to
        # copies first, so no saved value changes under the backward that
        # reads it; gradients kept as .grad likewise before the backward's.
        from . import _cudagraphs

        forward = _cudagraphs.wrap(fwd, name="wick autodiff forward", mutated=[i for _, i in plan.in_place])
        # the output gradients autograd hands the backward are new tensors every step
        backward = _cudagraphs.wrap(bwd, name="wick autodiff backward", warmup=2, fresh=range(len(plan.diff_outs)))
        runner = _Runner(plan, forward, backward)
    else:
        runner = _Runner(plan, fwd, bwd)
    apply = _autograd_function(torch).apply
    _stats["graphs"] += 1
    if _log_graphs():
        print(f"[wick:graphs] wick autodiff: forward {len(plan.fwd.nodes())} nodes in {fwd.nkernels} kernels, "
              f"{len(plan.saved_spec)} saved values; backward {len(plan.bwd.nodes())} nodes in {bwd.nkernels} "
              f"kernels, {len(plan.bwd_externs)} extern calls ({len(plan.recomputed)} recomputed: "
              f"{sorted(set(plan.recomputed))})", file=sys.stderr)

    def run(*args):
        outs = apply(runner, *args)
        if runner.in_place:
            outs = list(outs)
            for j, i in runner.in_place:
                outs.insert(j, args[i])
            outs = tuple(outs)
        return outs

    run.plan = plan
    run.runner = runner
    return run


def record_fallback(reason):
    _stats["fallbacks"] += 1
    _stats["reasons"] = (_stats["reasons"] + [reason])[-20:]
    if _log_breaks():
        print(f"[wick:breaks] wick autodiff: {reason}; the graph goes through AOTAutograd", file=sys.stderr)

