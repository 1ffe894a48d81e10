"""Channels-last convolutions on graphs of wick's own capture (wick.compile).

cuDNN's 16-bit convolutions run much faster on NHWC (channels-last) tensors
than on NCHW ones, and the pointwise work between them then reads and writes
memory in order. wick/_layout.py does this for the ATen graphs of the
torch.compile path; this module does it on a captured graph itself, so a
convolutional inference graph compiles natively (no export to FX, no
AOTAutograd: that took 4.7 of resnet50's 9 s cold first call on the H200).

Two rewrites, each a replay of the graph node by node into a new one
(Graph.copy(inputs_only=True), Graph.replay, Graph.extern):

* eval-mode batch norm (an extern call of F.batch_norm with training False)
  becomes table ops in float32, rounded once to the input's dtype, so it fuses
  with the convolution's epilogue (ReLU, the residual add) as inductor's
  decomposition does; the result may differ from cuDNN's in the last bit of
  a bfloat16;
* channels-last:
  * the pointwise producers of a convolution's input and weight (autocast's
    conversions, the previous block's activation) are computed in NHWC order:
    the op is replayed on permuted views of its operands (a contiguous
    [N, H, W, C] result), and a view with NCHW sizes and channels-last
    strides stands for its value;
  * a weight no kernel produces (a parameter outside autocast) of a
    convolution whose input is not channels-last (the stem) gets one
    NHWC-ordered copy per call;
  * an extern call reading a value whose strides changed has its outputs'
    metadata computed again on fake tensors of the new strides
    (_capture_meta.outputs): cuDNN answers a channels-last input with a
    channels-last output, and so do pooling and the like;
  * pointwise ops and reductions over a channels-last value (made so here,
    or already so in the captured graph, as eager's ConvNeXt activations
    are after its stem's permutes) follow it into NHWC order;
  * a view of a value whose strides changed is recomputed for them where it
    is a permutation (timm's ConvNeXt permutes to NHWC and back: both become
    free), else it reads a copy in the traced layout; capture's own copies
    into a layout (giving an extern the strides eager would) go where the
    value is already held so;
  * a CUDA convolution's bias becomes an add that fuses with the next
    kernel, and adaptive_avg_pool2d(x, 1) a mean, as on the ATen path;
  * graph outputs keep their traced strides (a copy back where they moved).

Values are unchanged: only the order of operands and strides move. Where a
step cannot be done the pass raises Abandon and capture compiles the graph
through the ATen path as before (symbolic.c), with the reason logged.
WICK_LAYOUT_PASS=fx sends every such graph there (the A/B of bench runs).
"""
from . import _C

TO_NHWC = [0, 2, 3, 1]
TO_NCHW = [0, 3, 1, 2]
_CONVOLUTIONS = ("aten.convolution.default",)
# broadcast-shaped table ops whose attributes name dims (not plain pointwise)
_READS_DIMS = {"LAYER_NORM", "TRIL", "TRIU"}
_FLOATS = ("float16", "bfloat16", "float32", "float64")


class Abandon(Exception):
    """This graph is not rewritten; the reason is the message."""


_op_info = None


def _ops():
    global _op_info
    if _op_info is None:
        _op_info = {row["name"]: (row["kind"], row["shape"]) for row in _C.op_table()}
    return _op_info


def dense_strides(sizes, order):
    """Strides of a dense tensor of `sizes` whose dims, outer first, are `order`."""
    strides, acc = [0] * len(sizes), 1
    for d in reversed(order):
        strides[d] = acc
        acc *= max(sizes[d], 1)
    return strides


def channels_last_strides(sizes):
    return dense_strides(sizes, TO_NHWC)


def is_channels_last(sizes, strides):
    """Channels-last strides that are not also contiguous ones."""
    sizes = list(sizes)
    return _same_layout(sizes, strides, channels_last_strides(sizes)) and \
        not _same_layout(sizes, strides, dense_strides(sizes, range(len(sizes))))


def _same_layout(sizes, a, b):
    """Strides a and b address a tensor of `sizes` the same way (dims of size
    1 do not move an index)."""
    return all(n == 1 or x == y for n, x, y in zip(sizes, a, b))


class _Replay:
    """A new graph built from src's inputs, node by node. env maps a value of
    src to the new graph's value holding it (same sizes, possibly other
    strides)."""

    def __init__(self, src):
        self.src = src
        self.g, vmap = src.copy(inputs_only=True)
        self.env = {old: new for old, new in enumerate(vmap) if new >= 0}
        self._new_meta, self._src_meta = {}, {}

    def meta(self, vid):
        m = self._new_meta.get(vid)
        if m is None:
            m = self._new_meta[vid] = self.g.value(vid)
        return m

    def src_meta(self, vid):
        m = self._src_meta.get(vid)
        if m is None:
            m = self._src_meta[vid] = self.src.value(vid)
        return m

    def moved(self, old):
        """Whether src value `old` is now held with other strides."""
        m, s = self.meta(self.env[old]), self.src_meta(old)
        return not _same_layout(s["sizes"], m["strides"], s["strides"])

    def view(self, b, sizes, strides, offset=0):
        sizes, strides = list(sizes), list(strides)
        return self.g.op("VIEW", [b], ints=[len(sizes)] + sizes + strides + [offset])

    def permuted(self, b, order):
        m = self.meta(b)
        return self.view(b, [m["sizes"][d] for d in order], [m["strides"][d] for d in order])

    def copy_to(self, b, sizes, strides):
        """b's value written densely with `strides` (a CONVERT to its own
        dtype: a kernel), seen with those strides; Abandon where they are not
        dense."""
        order = sorted(range(len(sizes)), key=lambda d: (-strides[d] if sizes[d] != 1 else 0, d))
        dense = dense_strides(sizes, order)
        if not _same_layout(sizes, dense, strides):
            raise Abandon(f"no copy with strides {tuple(strides)} (gaps or overlaps)")
        dtype = self.meta(b)["dtype"]
        if order == list(range(len(sizes))):
            return self.g.op("CONVERT", [b], dtype=dtype)
        out = self.g.op("CONVERT", [self.permuted(b, order)], dtype=dtype)
        return self.view(out, sizes, dense)

    def replay(self, n, nd, inputs=None, dims=None):
        ins = [self.env[v] for v in nd["inputs"]] if inputs is None else inputs
        first = self.g.replay(self.src, n, ins, dims=dims)
        for k, o in enumerate(nd["outputs"]):
            self.env[o] = first + k
        return first

    def extern(self, nd, inputs=None, metas=None):
        ins = [self.env[v] for v in nd["inputs"]] if inputs is None else inputs
        if metas is None:
            metas = [self.src_meta(o) for o in nd["outputs"]]
        ids = self.g.extern(nd["extern_index"], ins, [_meta_dict(m) for m in metas], name=nd["name"],
                            ints=list(nd["ints"]) or None)
        for o, i in zip(nd["outputs"], ids):
            self.env[o] = i
        return ids

    def finish(self):
        """The graph with src's outputs, each with its traced strides."""
        for o in self.src.outputs():
            b = self.env[o]
            s = self.src_meta(o)
            if self.moved(o):
                b = self.copy_to(b, list(s["sizes"]), list(s["strides"]))
            if list(self.meta(b)["strides"]) != list(s["strides"]) and s["sizes"]:
                # strides of size-1 dims too, as eager gives them (a view)
                b = self.view(b, s["sizes"], s["strides"])
            self.g.output(b)
        return self.g


def _meta_dict(m):
    return {"dtype": m["dtype"], "sizes": list(m["sizes"]), "strides": list(m["strides"]),
            "device": m["device"], "requires_grad": bool(m.get("requires_grad"))}


def _unwrapped(fn):
    from ._capture_meta import UnderAutocast

    return fn.fn if type(fn) is UnderAutocast else fn


def _entry(externs, nd):
    index = nd["extern_index"]
    entry = externs[index] if externs is not None and 0 <= index < len(externs) else None
    return entry if isinstance(entry, tuple) and len(entry) == 3 else None


_BN_ARGS = ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")


def _eval_batch_norm(entry, torch):
    """The bound arguments of an eval-mode F.batch_norm extern call (tensor
    arguments as their input positions), or None."""
    if entry is None or _unwrapped(entry[0]) is not torch.nn.functional.batch_norm:
        return None
    args, kwargs = entry[1], entry[2] or {}
    if len(args) > len(_BN_ARGS) or any(k not in _BN_ARGS for k in kwargs):
        return None
    bound = dict(zip(_BN_ARGS, args))
    if any(k in bound for k in kwargs):
        return None
    bound.update(kwargs)
    bound.setdefault("weight", None)
    bound.setdefault("bias", None)
    bound.setdefault("training", False)
    bound.setdefault("eps", 1e-5)
    if bound["training"] is not False or not isinstance(bound["eps"], (int, float)):
        return None
    for k in ("input", "running_mean", "running_var", "weight", "bias"):
        a = bound.get(k)
        if k in ("weight", "bias") and a is None:
            continue
        if not isinstance(a, _C.ExternInput):
            return None
        bound[k] = a.index
    return bound


def decompose_eval_batch_norms(graph, externs):
    """graph with each eval-mode batch norm (F.batch_norm, training False, on
    floating inputs with running statistics) as table ops: float32 arithmetic
    for 16-bit inputs, one rounding at the end. Returns (graph, count)."""
    import torch

    nodes = graph.nodes()
    found = {n: b for n, nd in enumerate(nodes) if nd["op"] == "EXTERN"
             for b in [_eval_batch_norm(_entry(externs, nd), torch)] if b is not None}
    if not found:
        return graph, 0
    r = _Replay(graph)
    done = 0
    for n, nd in enumerate(nodes):
        bound = found.get(n)
        if nd["op"] != "EXTERN":
            r.replay(n, nd)
            continue
        if bound is None or not _batch_norm_as_ops(r, nd, bound):
            r.extern(nd)
            continue
        done += 1
    return r.finish(), done


def _batch_norm_as_ops(r, nd, bound):
    ins = nd["inputs"]
    x = r.env[ins[bound["input"]]]
    xm = r.meta(x)
    dtype, ndim = xm["dtype"], len(xm["sizes"])
    if dtype not in _FLOATS or ndim < 2 or len(nd["outputs"]) != 1:
        return False
    params = {k: r.env[ins[bound[k]]] for k in ("running_mean", "running_var", "weight", "bias")
              if bound.get(k) is not None}
    channels = xm["sizes"][1]
    for p in params.values():
        pm = r.meta(p)
        if pm["dtype"] not in _FLOATS or list(pm["sizes"]) != [channels]:
            return False
    wide = "float32" if dtype in ("float16", "bfloat16") else dtype
    g = r.g

    def as_wide(b):
        return b if r.meta(b)["dtype"] == wide else g.op("CONVERT", [b], dtype=wide)

    def per_channel(b):  # [C] seen as [C, 1, ...] against [N, C, ...]
        stride = r.meta(b)["strides"][0]
        return r.view(b, [channels] + [1] * (ndim - 2), [stride] + [1] * (ndim - 2))

    scale = g.op("RSQRT", [g.op("ADD", [as_wide(params["running_var"]), g.scalar(float(bound["eps"]))])])
    if "weight" in params:
        scale = g.op("MUL", [scale, as_wide(params["weight"])])
    y = g.op("MUL", [g.op("SUB", [as_wide(x), per_channel(as_wide(params["running_mean"]))]), per_channel(scale)])
    if "bias" in params:
        y = g.op("ADD", [y, per_channel(as_wide(params["bias"]))])
    if wide != dtype:
        y = g.op("CONVERT", [y], dtype=dtype)
    r.env[nd["outputs"][0]] = y
    return True


def channels_last(graph, externs):
    """(graph rewritten with channels-last convolutions (module docstring),
    its extern table: externs with the entries the rewrite added). Raises
    Abandon."""
    import torch

    from . import _capture_meta

    ops = _ops()
    nodes = graph.nodes()
    r = _Replay(graph)

    def ndim(old):
        return len(r.src_meta(old)["sizes"])

    def plain_pointwise(nd):
        kind, shape = ops.get(nd["op"], (None, None))
        return kind == "pointwise" and shape == "broadcast" and nd["op"] not in _READS_DIMS and \
            nd["dims"] is None and len(nd["outputs"]) == 1 and ndim(nd["output"]) == 4 and \
            all(ndim(v) <= 4 for v in nd["inputs"])

    producer = {o: n for n, nd in enumerate(nodes) for o in nd["outputs"]}
    convs = [n for n, nd in enumerate(nodes) if nd["op"] == "EXTERN" and nd["name"] in _CONVOLUTIONS and
             len(nd["inputs"]) >= 2 and ndim(nd["inputs"][0]) == 4 and _entry(externs, nd) is not None]
    if not convs:
        raise Abandon("no 2-d convolution called as aten.convolution")
    seeds = set()
    for n in convs:
        for v in nodes[n]["inputs"][:2]:
            p = producer.get(v)
            if p is not None and plain_pointwise(nodes[p]):
                seeds.add(p)
    conv_set = set(convs)
    externs = list(externs)
    bias_split = {}  # conv node -> extern index of the same call without its bias
    nhwc = {}  # src value -> new value holding it permuted to NHWC, contiguous

    def follows(old):
        """old is held channels-last (by this pass, or already in the
        captured graph, as eager gives it: a ConvNeXt's activations after
        its stem's permutes). Not a value merely moved: a permuted view
        that became contiguous is best read as it is."""
        if ndim(old) != 4:
            return False
        if old in nhwc:
            return True
        m = r.meta(r.env[old])
        return is_channels_last(m["sizes"], m["strides"])

    def rep(old):
        """old as an NHWC-ordered operand (rank <= 4; 0-d as it is)."""
        if old in nhwc:
            return nhwc[old]
        m = r.meta(r.env[old])
        k = len(m["sizes"])
        if k == 0:
            return r.env[old]
        sizes = [1] * (4 - k) + list(m["sizes"])
        strides = [1] * (4 - k) + list(m["strides"])
        return r.view(r.env[old], [sizes[d] for d in TO_NHWC], [strides[d] for d in TO_NHWC])

    def rep_channels(old):
        """a [C] vector as an NHWC-ordered operand: [1, 1, 1, C]."""
        m = r.meta(r.env[old])
        return r.view(r.env[old], [1, 1, 1, m["sizes"][0]], [1, 1, 1, m["strides"][0]])

    def hold_nhwc(old, b):
        """b: old's value as a contiguous NHWC tensor."""
        nhwc[old] = b
        m = r.meta(b)
        sizes = [m["sizes"][d] for d in TO_NCHW]
        r.env[old] = r.view(b, sizes, channels_last_strides(sizes))

    def traced(old):
        """old's value with its traced strides (a copy where they moved)."""
        b = r.env[old]
        if not r.moved(old):
            return b
        s = r.src_meta(old)
        return r.copy_to(b, list(s["sizes"]), list(s["strides"]))

    outputs = set(graph.outputs())
    for n, nd in enumerate(nodes):
        ins = nd["inputs"]
        if nd["op"] == "CONVERT" and len(ins) == 1 and nd["output"] not in outputs and \
                nd["dtype"] == r.src_meta(ins[0])["dtype"]:
            # a copy (capture's, giving an extern the strides eager would)
            # whose input this pass already holds in the copy's layout: the
            # input itself, so its readers' views see the same memory order
            m, s = r.meta(r.env[ins[0]]), r.src_meta(nd["output"])
            if list(m["sizes"]) == list(s["sizes"]) and _same_layout(s["sizes"], m["strides"], s["strides"]):
                r.env[nd["output"]] = r.env[ins[0]]
                continue
        if nd["op"] == "EXTERN" and _global_average_pool(r, nd, externs, follows, rep, hold_nhwc, torch):
            continue
        if nd["op"] == "EXTERN":
            if n in conv_set and _split_bias(r, nd, externs, bias_split, n):
                call = dict(nd, inputs=ins[:2], extern_index=bias_split[n], outputs=[nd["output"]])
                _extern(r, call, True, externs, nhwc, rep, hold_nhwc, traced, torch, _capture_meta, follows)
                bias = rep_channels(ins[2])
                hold_nhwc(nd["output"], r.g.op("ADD", [rep(nd["output"]), bias]))
                continue
            _extern(r, nd, n in conv_set, externs, nhwc, rep, hold_nhwc, traced, torch, _capture_meta, follows)
            continue
        if plain_pointwise(nd) and (n in seeds or any(follows(v) for v in ins)):
            hold_nhwc(nd["output"], r.replay(n, nd, [rep(v) for v in ins]))
            continue
        kind, shape = ops.get(nd["op"], (None, None))
        if kind == "reduction" and shape == "reduce" and len(ins) == 1 and nd["dims"] and \
                len(nd["outputs"]) == 1 and follows(ins[0]):
            pdims = sorted({TO_NHWC.index(d % 4) for d in nd["dims"]})
            if nd["keepdim"]:
                hold_nhwc(nd["output"], r.replay(n, nd, [rep(ins[0])], dims=pdims))
                continue
            kept = [TO_NHWC[p] for p in range(4) if p not in pdims]
            if kept == sorted(kept):
                r.replay(n, nd, [rep(ins[0])], dims=pdims)
                continue
        if nd["op"] == "VIEW" and r.moved(ins[0]):
            _view(r, n, nd, traced)
            continue
        # any other table op reads its operands by logical index, whatever
        # their strides (graph.h, wk_graph_replace_input)
        r.replay(n, nd)
    return r.finish(), externs


def _global_average_pool(r, nd, externs, follows, rep, hold_nhwc, torch):
    """F.adaptive_avg_pool2d(x, 1) as a MEAN over H and W (kept as size-1
    dims), a reduction that fuses with the work before it instead of a
    call of its own (the ATen path decomposes it so). float32 accumulation
    as eager's kernel. Returns whether it was done."""
    entry = _entry(externs, nd)
    if entry is None or _unwrapped(entry[0]) is not torch.nn.functional.adaptive_avg_pool2d or entry[2]:
        return False
    args = entry[1]
    if len(args) != 2 or not isinstance(args[0], _C.ExternInput) or args[0].index != 0 or \
            args[1] not in (1, (1, 1), [1, 1]) or len(nd["inputs"]) != 1 or len(nd["outputs"]) != 1:
        return False
    x = nd["inputs"][0]
    m = r.src_meta(x)
    if len(m["sizes"]) != 4 or m["dtype"] not in _FLOATS or 0 in m["sizes"]:
        return False
    if follows(x):
        hold_nhwc(nd["output"], r.g.op("MEAN", [rep(x)], dims=[1, 2], keepdim=True))
    else:
        r.env[nd["output"]] = r.g.op("MEAN", [r.env[x]], dims=[2, 3], keepdim=True)
    return True


def _split_bias(r, nd, externs, bias_split, n):
    """A CUDA convolution with a bias of its output's dtype: the call without
    the bias (a new extern entry, recorded in bias_split[n]), whose caller
    adds the bias as a pointwise op that fuses into the kernel after it, as
    the ATen path does (backends._conv_bias_as_add: eager's cuDNN
    convolutions add the bias in a pass of their own; 40 of ConvNeXt-B's
    kernels). On the CPU oneDNN adds it inside the convolution: kept there."""
    entry = _entry(externs, nd)
    ins = nd["inputs"]
    if entry is None or len(ins) != 3 or entry[2] or len(entry[1]) != 9:
        return False
    args = entry[1]
    if not all(isinstance(a, _C.ExternInput) and a.index == k for k, a in enumerate(args[:3])):
        return False
    x, b, out = r.src_meta(ins[0]), r.src_meta(ins[2]), r.src_meta(nd["output"])
    if not str(x["device"]).startswith("cuda") or b["dtype"] != out["dtype"] or len(b["sizes"]) != 1 or \
            len(nd["outputs"]) != 1 or args[6] is not False:
        return False
    bias_split[n] = len(externs)
    externs.append((entry[0], (args[0], args[1], None) + tuple(args[3:]), entry[2]))
    return True


def _view(r, n, nd, traced):
    """A VIEW of a value whose strides moved: a permutation of it (sizes and
    strides of the traced value permuted, no offset) is the same permutation
    of the new strides; anything else views a copy in the traced layout."""
    ints = list(nd["ints"])
    k = ints[0]
    sizes, strides, offset = ints[1:1 + k], ints[1 + k:1 + 2 * k], ints[1 + 2 * k]
    base = nd["inputs"][0]
    s, m = r.src_meta(base), r.meta(r.env[base])
    if offset == 0 and k == len(s["sizes"]):
        pick, used = [], set()
        for size, stride in zip(sizes, strides):
            match = [d for d in range(k) if d not in used and s["sizes"][d] == size and
                     (size == 1 or s["strides"][d] == stride)]
            if not match:
                break
            pick.append(match[0])
            used.add(match[0])
        if len(pick) == k:
            new_strides = [m["strides"][d] for d in pick]
            out = r.view(r.env[base], sizes, new_strides)
            r.env[nd["output"]] = out
            return
    r.replay(n, nd, [traced(base)])


def _extern(r, nd, is_conv, externs, nhwc, rep, hold_nhwc, traced, torch, capture_meta, follows):
    ins = nd["inputs"]
    if is_conv and not follows(ins[0]):
        w = ins[1]
        wm = r.meta(r.env[w])
        cl = channels_last_strides(list(wm["sizes"]))
        if w not in nhwc and not _same_layout(wm["sizes"], wm["strides"], cl):
            # a weight no kernel of the graph produces, of a convolution whose
            # input is not channels-last (the stem): one NHWC-ordered copy per
            # call, so cuDNN answers channels-last and the activations follow
            hold_nhwc(w, r.g.op("CONVERT", [rep(w)], dtype=wm["dtype"]))
    if not any(r.moved(v) for v in ins):
        r.extern(nd)
        return
    entry = _entry(externs, nd)
    metas = None
    if entry is not None:
        inputs = []
        for v in ins:
            m = r.meta(r.env[v])
            inputs.append((getattr(torch, m["dtype"]), torch.device(m["device"]), tuple(m["sizes"]),
                           tuple(m["strides"]), bool(r.src_meta(v).get("requires_grad"))))
        grad = any(r.src_meta(o).get("requires_grad") for o in nd["outputs"])
        try:
            out = capture_meta.outputs(entry[0], entry[1], entry[2] or {}, inputs, grad)
        except Exception:  # noqa: BLE001 - a call refusing the new strides: it reads them as traced
            out = None
        if out is not None and out[0] in ("tensor", "tuple", "list") and len(out[1]) == len(nd["outputs"]) and \
                not out[2] and not out[3]:
            metas = []
            for (dtype, device, sizes, strides, requires_grad), o in zip(out[1], nd["outputs"]):
                s = r.src_meta(o)
                if str(dtype).replace("torch.", "") != s["dtype"] or list(sizes) != list(s["sizes"]):
                    metas = None
                    break
                metas.append(dict(s, strides=list(strides)))
    if metas is None:
        r.extern(nd, [traced(v) for v in ins])
        return
    r.extern(nd, None, metas)


def apply(graph, externs):
    """(rewritten graph, its extern table, note): eval batch norms
    decomposed and convolutions channels-last. The table is externs with
    entries appended (a convolution without its bias); externs itself is not
    changed. Raises Abandon."""
    try:
        g, norms = decompose_eval_batch_norms(graph, externs)
        out, table = channels_last(g, externs)
    except ValueError as exc:  # a builder refusal (Graph.op/replay/extern)
        raise Abandon(f"rebuilding the graph: {exc}") from None
    split = len(table) - len(externs)
    return out, table, f"channels-last ({norms} batch norms as kernels, {split} convolution biases as adds)"
