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

Training graphs (wick/_autodiff.py, training_graph) take the same
channels-last pass on their forward, after their batch norms became table
ops here too (decompose_batch_norms with training=True: the batch's
statistics and the running statistics' update).

Values are unchanged: only the order of operands and strides move. Where a
step cannot be done the pass raises Abandon and capture compiles the graph
through the ATen path as before (symbolic.c), with the reason logged.
WICK_LAYOUT_PASS=fx sends every such graph there (the A/B of bench runs).
"""
from . import _C
from ._autodiff import dense_strides, is_channels_last, permutation

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


def channels_last_strides(sizes):
    return dense_strides(sizes, TO_NHWC)


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
        self.batch_norms = []  # BatchNormValues of the training norms decomposed

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


def _batch_norm_call(entry, torch):
    """The bound arguments of an F.batch_norm extern call (tensor arguments
    as their input positions; "written": the positions a training call
    updates, its extra outputs in that order), or None. A training call
    that updates its running statistics is capture's Functional wrapper
    (_capture_meta), which clones them, updates the clones and returns
    them after its own result; the frame copies them back."""
    from ._capture_meta import Functional

    if entry is None:
        return None
    fn, written = _unwrapped(entry[0]), ()
    if type(fn) is Functional:
        fn, written = _unwrapped(fn.fn), tuple(fn.written)
    if fn is not torch.nn.functional.batch_norm:
        return None
    args, kwargs = entry[1], entry[2] or {}
    if len(args) > len(_BN_ARGS) or any(k not in _BN_ARGS for k in kwargs):
        return None
    bound = dict(zip(_BN_ARGS, args))
    if any(k in bound for k in kwargs):
        return None
    bound.update(kwargs)
    for k, default in (("running_mean", None), ("running_var", None), ("weight", None), ("bias", None),
                       ("training", False), ("momentum", 0.1), ("eps", 1e-5)):
        bound.setdefault(k, default)
    if type(bound["training"]) is not bool or not isinstance(bound["eps"], (int, float)):
        return None
    for k in ("input", "running_mean", "running_var", "weight", "bias"):
        a = bound.get(k)
        if a is None and k != "input":
            continue
        if not isinstance(a, _C.ExternInput):
            return None
        bound[k] = a.index
    stats = tuple(bound[k] for k in ("running_mean", "running_var") if bound[k] is not None)
    if bound["training"]:
        # the statistics it updates are exactly its running ones, in order
        if written != stats or (stats and type(bound["momentum"]) is not float):
            return None
    elif written or len(stats) != 2:
        return None  # eval mode normalises with the running statistics
    bound["written"] = written
    return bound


class BatchNormValues:
    """The values of a training batch norm decomposed into table ops (ids in
    the graph that holds them): its float32 (wide) output before any
    rounding, its wide input, the normalised input, 1/sqrt(var + eps)
    (reduction-shaped, keepdim), the wide weight and bias vectors (or
    None), the channel dim, the reduced dims and how many elements each
    channel reduces. Where the channels-last pass moved them, the first
    four are its NHWC-ordered values (channel dim 3)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def moved(self, env, nhwc):
        """These values in a graph a replay built (env, and the values it
        holds NHWC-ordered: _ChannelsLast.nhwc, {} for others)."""
        ordered = all(v in nhwc for v in (self.output, self.normalised, self.rstd))
        def at(v):
            return None if v is None else env[v]
        if ordered:
            return BatchNormValues(output=nhwc[self.output], input=env[self.input], normalised=nhwc[self.normalised],
                                   rstd=nhwc[self.rstd], weight=at(self.weight), bias=at(self.bias), channel_dim=3,
                                   dims=[0, 1, 2], count=self.count)
        return BatchNormValues(output=env[self.output], input=env[self.input], normalised=env[self.normalised],
                               rstd=env[self.rstd], weight=at(self.weight), bias=at(self.bias),
                               channel_dim=self.channel_dim, dims=list(self.dims), count=self.count)


def decompose_batch_norms(graph, externs, training, keep=()):
    """graph with each batch norm (F.batch_norm on floating inputs) of the
    mode asked for as table ops, in float32 for 16-bit inputs with one
    rounding at the end:

    * eval: the running statistics normalise;
    * training: the batch's mean and biased variance over every dim but
      the channels (two passes, as eager's CPU kernel: exact where the mean
      is large beside the spread), and the updated running statistics
      (momentum-weighted, the variance made unbiased) as the call's written
      outputs, which the frame copies back into the buffers. The
      normalisation then fuses with the convolution's epilogue; wick's
      autodiff gives the norm the backward eager's kernel has, from the
      values recorded in a BatchNormValues.

    keep: node indices left as calls (16-bit training norms on CUDA, which
    wick's autodiff gives eager's kernels: _autodiff._batch_norm_rule).
    Returns (graph, count, env, norms): env maps each value of graph to the
    new graph's value holding it (None where nothing changed); norms: a
    BatchNormValues per training norm."""
    import torch

    nodes = graph.nodes()
    keep = set(keep)
    found = {n: b for n, nd in enumerate(nodes) if nd["op"] == "EXTERN"
             for b in [_batch_norm_call(_entry(externs, nd), torch)]
             if b is not None and b["training"] == training and n not in keep}
    if not found:
        return graph, 0, None, []
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
    return r.finish(), done, r.env, r.batch_norms


def cuda_norm_calls(graph, externs, devices=("cuda",)):
    """The node indices of graph's training batch norms that read a 16-bit
    input on a device of `devices`: on CUDA those stay calls of eager's
    kernels in training (WICK_CUDA_NORM_TRAINING, _autodiff.training_graph
    and backends.py say why)."""
    import torch

    found = []
    for n, nd in enumerate(graph.nodes()):
        if nd["op"] != "EXTERN":
            continue
        bound = _batch_norm_call(_entry(externs, nd), torch)
        if bound is None or not bound["training"]:
            continue
        x = graph.value(nd["inputs"][bound["input"]])
        if x["dtype"] in ("float16", "bfloat16") and str(x["device"]).startswith(tuple(devices)):
            found.append(n)
    return found


def batch_norm_statistics(graph, externs):
    """The positions among graph's outputs of training batch norms' updated
    running statistics (which eager computes without autograd)."""
    import torch

    produced = set()
    for nd in graph.nodes():
        if nd["op"] == "EXTERN":
            bound = _batch_norm_call(_entry(externs, nd), torch)
            if bound is not None and bound["training"]:
                produced.update(nd["outputs"][1:])
    return [j for j, v in enumerate(graph.outputs()) if v in produced]


def _batch_norm_as_ops(r, nd, bound):
    ins = nd["inputs"]
    x = r.env[ins[bound["input"]]]
    xm = r.meta(x)
    dtype, sizes = xm["dtype"], list(xm["sizes"])
    ndim = len(sizes)
    if dtype not in _FLOATS or ndim < 2 or len(nd["outputs"]) != 1 + len(bound["written"]):
        return False
    params = {k: r.env[ins[bound[k]]] for k in ("running_mean", "running_var", "weight", "bias")
              if bound.get(k) is not None}
    channels = sizes[1]
    for p in params.values():
        pm = r.meta(p)
        if pm["dtype"] not in _FLOATS or list(pm["sizes"]) != [channels]:
            return False
    dims = [0] + list(range(2, ndim))
    count = 1
    for d in dims:
        count *= sizes[d]
    if bound["training"] and count <= 1:
        return False  # eager refuses it ("more than 1 value per channel"); so does the call
    wide = "float32" if dtype in ("float16", "bfloat16") else dtype
    g = r.g

    def as_wide(b):
        return b if r.meta(b)["dtype"] == wide else g.op("CONVERT", [b], dtype=wide)

    def per_channel(b):  # [C] seen as [C, 1, ...] against [N, C, ...]
        stride = r.meta(b)["strides"][0]
        return r.view(b, [channels] + [1] * (ndim - 2), [stride] + [1] * (ndim - 2))

    def channel_vector(b):  # [1, C, 1, ...] (a keepdim reduction) seen as [C]
        return r.view(b, [channels], [r.meta(b)["strides"][1]])

    eps = g.scalar(float(bound["eps"]))
    if bound["training"]:
        xw = as_wide(x)
        mean = g.op("MEAN", [xw], dims=dims, keepdim=True)
        centred = g.op("SUB", [xw, mean])
        var = g.op("MEAN", [g.op("MUL", [centred, centred])], dims=dims, keepdim=True)
        rstd = g.op("RSQRT", [g.op("ADD", [var, eps])])
        y = xhat = g.op("MUL", [centred, rstd])
        weight = as_wide(params["weight"]) if "weight" in params else None
        if weight is not None:
            y = g.op("MUL", [y, per_channel(weight)])
    else:
        scale = g.op("RSQRT", [g.op("ADD", [as_wide(params["running_var"]), eps])])
        if "weight" in params:
            scale = g.op("MUL", [scale, as_wide(params["weight"])])
        y = g.op("MUL", [g.op("SUB", [as_wide(x), per_channel(as_wide(params["running_mean"]))]),
                         per_channel(scale)])
    bias = as_wide(params["bias"]) if "bias" in params else None
    if bias is not None:
        y = g.op("ADD", [y, per_channel(bias)])
    if bound["training"]:
        # what wick's autodiff needs to give the norm the backward of two
        # reductions eager's kernel has (_autodiff._batch_norm_backward)
        r.batch_norms.append(BatchNormValues(output=y, input=xw, normalised=xhat, rstd=rstd, weight=weight,
                                             bias=bias, channel_dim=1, dims=dims, count=count))
    if wide != dtype:
        y = g.op("CONVERT", [y], dtype=dtype)
    r.env[nd["outputs"][0]] = y
    if bound["written"]:
        momentum = float(bound["momentum"])
        keep, take = g.scalar(1.0 - momentum), g.scalar(momentum)
        batch = {"running_mean": channel_vector(mean),
                 "running_var": g.op("MUL", [channel_vector(var), g.scalar(count / (count - 1))])}
        for k, out in zip(("running_mean", "running_var"), nd["outputs"][1:]):
            old = params[k]
            new = g.op("ADD", [g.op("MUL", [as_wide(old), keep]), g.op("MUL", [batch[k], take])])
            if r.meta(old)["dtype"] != wide:
                new = g.op("CONVERT", [new], dtype=r.meta(old)["dtype"])
            r.env[out] = new
    return True


class _ChannelsLast(_Replay):
    """The channels-last rewrite's state over a replay: the extern table it
    extends and the values it holds as contiguous NHWC tensors."""

    def __init__(self, src, externs):
        super().__init__(src)
        self.externs = list(externs)
        self.nhwc = {}  # src value -> new value holding it permuted to NHWC, contiguous

    def ndim(self, old):
        return len(self.src_meta(old)["sizes"])

    def entry(self, nd):
        return _entry(self.externs, nd)

    def follows(self, old):
        """old is held channels-last (by this pass, or already in the
        captured graph, as eager gives it: a ConvNeXt's activations after
        its stem's permutes). Not a value merely moved: a permuted view
        that became contiguous is best read as it is."""
        if self.ndim(old) != 4:
            return False
        if old in self.nhwc:
            return True
        m = self.meta(self.env[old])
        return is_channels_last(m["sizes"], m["strides"])

    def rep(self, old):
        """old as an NHWC-ordered operand (rank <= 4; 0-d as it is)."""
        if old in self.nhwc:
            return self.nhwc[old]
        m = self.meta(self.env[old])
        k = len(m["sizes"])
        if k == 0:
            return self.env[old]
        sizes = [1] * (4 - k) + list(m["sizes"])
        strides = [1] * (4 - k) + list(m["strides"])
        return self.view(self.env[old], [sizes[d] for d in TO_NHWC], [strides[d] for d in TO_NHWC])

    def rep_channels(self, old):
        """a [C] vector as an NHWC-ordered operand: [1, 1, 1, C]."""
        m = self.meta(self.env[old])
        return self.view(self.env[old], [1, 1, 1, m["sizes"][0]], [1, 1, 1, m["strides"][0]])

    def hold_nhwc(self, old, b):
        """b: old's value as a contiguous NHWC tensor."""
        self.nhwc[old] = b
        m = self.meta(b)
        sizes = [m["sizes"][d] for d in TO_NCHW]
        self.env[old] = self.view(b, sizes, channels_last_strides(sizes))

    def traced(self, old):
        """old's value with its traced strides (a copy where they moved)."""
        b = self.env[old]
        if not self.moved(old):
            return b
        s = self.src_meta(old)
        return self.copy_to(b, list(s["sizes"]), list(s["strides"]))

    def moved_view(self, n, nd):
        """A VIEW of a value whose strides moved: a permutation of it (sizes
        and strides of the traced value permuted, no offset) is the same
        permutation of the new strides; anything else views a copy in the
        traced layout."""
        ints = list(nd["ints"])
        k = ints[0]
        sizes, strides, offset = ints[1:1 + k], ints[1 + k:1 + 2 * k], ints[1 + 2 * k]
        base = nd["inputs"][0]
        s, m = self.src_meta(base), self.meta(self.env[base])
        pick = permutation(s["sizes"], s["strides"], sizes, strides, offset)
        if pick is not None:
            self.env[nd["output"]] = self.view(self.env[base], sizes, [m["strides"][d] for d in pick])
            return
        self.replay(n, nd, [self.traced(base)])

    def call(self, nd, is_conv):
        """An extern node; where an input's strides moved, its outputs'
        metadata computed again on fakes of the new strides (read as traced
        where that fails)."""
        import torch

        from . import _capture_meta

        ins = nd["inputs"]
        if is_conv and not self.follows(ins[0]):
            w = ins[1]
            wm = self.meta(self.env[w])
            cl = channels_last_strides(list(wm["sizes"]))
            if w not in self.nhwc and not _same_layout(wm["sizes"], wm["strides"], cl):
                # a weight no kernel of the graph produces, of a convolution whose
                # input is not channels-last (the stem): one NHWC-ordered copy per
                # call, so cuDNN answers channels-last and the activations follow
                self.hold_nhwc(w, self.g.op("CONVERT", [self.rep(w)], dtype=wm["dtype"]))
        if not any(self.moved(v) for v in ins):
            self.extern(nd)
            return
        entry = self.entry(nd)
        metas = None
        if entry is not None:
            inputs = []
            for v in ins:
                m = self.meta(self.env[v])
                inputs.append((getattr(torch, m["dtype"]), torch.device(m["device"]), tuple(m["sizes"]),
                               tuple(m["strides"]), bool(self.src_meta(v).get("requires_grad"))))
            grad = any(self.src_meta(o).get("requires_grad") for o in nd["outputs"])
            try:
                out = _capture_meta.outputs(entry[0], entry[1], entry[2] or {}, inputs, grad)
            except Exception:  # noqa: BLE001 - a call refusing the new strides: it reads them as traced
                out = None
            kinds = ("tensor", "tuple", "list")
            if out is not None and (out[0] in kinds or out[0].startswith("return_types.")) \
                    and len(out[1]) == len(nd["outputs"]) and not out[2] and not out[3]:
                metas = []
                for (dtype, device, sizes, strides, requires_grad), o in zip(out[1], nd["outputs"]):
                    s = self.src_meta(o)
                    if str(dtype).replace("torch.", "") != s["dtype"] or list(sizes) != list(s["sizes"]):
                        metas = None
                        break
                    metas.append(dict(s, strides=list(strides)))
        if metas is None:
            self.extern(nd, [self.traced(v) for v in ins])
            return
        self.extern(nd, None, metas)

    def global_average_pool(self, nd):
        """F.adaptive_avg_pool2d(x, 1) as a MEAN over H and W (kept as size-1
        dims), a reduction that fuses with the work before it instead of a
        call of its own (the ATen path decomposes it so). float32
        accumulation as eager's kernel. Returns whether it was done."""
        import torch

        entry = self.entry(nd)
        if entry is None or _unwrapped(entry[0]) is not torch.nn.functional.adaptive_avg_pool2d or entry[2]:
            return False
        args = entry[1]
        if len(args) != 2 or not isinstance(args[0], _C.ExternInput) or args[0].index != 0 or \
                args[1] not in (1, (1, 1), [1, 1]) or len(nd["inputs"]) != 1 or len(nd["outputs"]) != 1:
            return False
        x = nd["inputs"][0]
        m = self.src_meta(x)
        if len(m["sizes"]) != 4 or m["dtype"] not in _FLOATS or 0 in m["sizes"]:
            return False
        if self.follows(x):
            self.hold_nhwc(nd["output"], self.g.op("MEAN", [self.rep(x)], dims=[1, 2], keepdim=True))
        else:
            self.env[nd["output"]] = self.g.op("MEAN", [self.env[x]], dims=[2, 3], keepdim=True)
        return True

    def split_bias(self, nd):
        """A CUDA convolution with a bias of its output's dtype: the index of
        a new extern entry calling it without the bias (None where it stays),
        whose caller adds the bias as a pointwise op that fuses into the
        kernel after it, as the ATen path does (backends._conv_bias_as_add:
        eager's cuDNN convolutions add the bias in a pass of their own; 40 of
        ConvNeXt-B's kernels). On the CPU oneDNN adds it inside the
        convolution: kept there."""
        entry = self.entry(nd)
        ins = nd["inputs"]
        if entry is None or len(ins) != 3 or entry[2] or len(entry[1]) != 9:
            return None
        args = entry[1]
        if not all(isinstance(a, _C.ExternInput) and a.index == k for k, a in enumerate(args[:3])):
            return None
        x, b, out = self.src_meta(ins[0]), self.src_meta(ins[2]), self.src_meta(nd["output"])
        if not str(x["device"]).startswith("cuda") or b["dtype"] != out["dtype"] or len(b["sizes"]) != 1 or \
                len(nd["outputs"]) != 1 or args[6] is not False:
            return None
        self.externs.append((entry[0], (args[0], args[1], None) + tuple(args[3:]), entry[2]))
        return len(self.externs) - 1


def channels_last(graph, externs):
    """(graph rewritten with channels-last convolutions (module docstring),
    its extern table: externs with the entries the rewrite added, env: each
    value of graph to the new graph's value holding it, nhwc: the values of
    graph it holds as contiguous NHWC-ordered values, and those). Raises
    Abandon."""
    ops = _ops()
    nodes = graph.nodes()
    r = _ChannelsLast(graph, externs)

    def plain_pointwise(nd):
        kind, shape = ops.get(nd["op"], (None, None))
        return kind == "pointwise" and shape == "broadcast" and nd["op"] not in _READS_DIMS and \
            nd["dims"] is None and len(nd["outputs"]) == 1 and r.ndim(nd["output"]) == 4 and \
            all(r.ndim(v) <= 4 for v in nd["inputs"])

    producer = {o: n for n, nd in enumerate(nodes) for o in nd["outputs"]}
    convs = {n for n, nd in enumerate(nodes) if nd["op"] == "EXTERN" and nd["name"] in _CONVOLUTIONS and
             len(nd["inputs"]) >= 2 and r.ndim(nd["inputs"][0]) == 4 and r.entry(nd) is not None}
    if not convs:
        raise Abandon("no 2-d convolution called as aten.convolution")
    seeds = set()
    for n in convs:
        for v in nodes[n]["inputs"][:2]:
            p = producer.get(v)
            if p is not None and plain_pointwise(nodes[p]):
                seeds.add(p)
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
        if nd["op"] == "EXTERN":
            if r.global_average_pool(nd):
                continue
            without_bias = r.split_bias(nd) if n in convs else None
            if without_bias is not None:
                r.call(dict(nd, inputs=ins[:2], extern_index=without_bias, outputs=[nd["output"]]), True)
                r.hold_nhwc(nd["output"], r.g.op("ADD", [r.rep(nd["output"]), r.rep_channels(ins[2])]))
                continue
            r.call(nd, n in convs)
            continue
        if plain_pointwise(nd) and (n in seeds or any(r.follows(v) for v in ins)):
            r.hold_nhwc(nd["output"], r.replay(n, nd, [r.rep(v) for v in ins]))
            continue
        kind, shape = ops.get(nd["op"], (None, None))
        if kind == "reduction" and shape == "reduce" and len(ins) == 1 and nd["dims"] and \
                len(nd["outputs"]) == 1 and r.follows(ins[0]):
            pdims = sorted({TO_NHWC.index(d % 4) for d in nd["dims"]})
            if nd["keepdim"]:
                r.hold_nhwc(nd["output"], r.replay(n, nd, [r.rep(ins[0])], dims=pdims))
                continue
            kept = [TO_NHWC[p] for p in range(4) if p not in pdims]
            if kept == sorted(kept):
                r.replay(n, nd, [r.rep(ins[0])], dims=pdims)
                continue
        if nd["op"] == "VIEW" and r.moved(ins[0]):
            r.moved_view(n, nd)
            continue
        # any other table op reads its operands by logical index, whatever
        # their strides (graph.h, wk_graph_replace_input)
        r.replay(n, nd)
    return r.finish(), r.externs, r.env, r.nhwc


def apply(graph, externs):
    """(rewritten graph, its extern table, note): eval batch norms
    decomposed and convolutions channels-last. The table is externs with
    entries appended (a convolution without its bias); externs itself is not
    changed. Raises Abandon."""
    try:
        g, norms, _, _ = decompose_batch_norms(graph, externs, training=False)
        out, table, _, _ = channels_last(g, externs)
    except ValueError as exc:  # a builder refusal (Graph.op/replay/extern)
        raise Abandon(f"rebuilding the graph: {exc}") from None
    split = len(table) - len(externs)
    return out, table, f"channels-last ({norms} batch norms as kernels, {split} convolution biases as adds)"
