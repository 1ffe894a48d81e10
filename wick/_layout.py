"""Channels-last layout for convolutional ATen graphs (the torch.compile path).

cuDNN's 16-bit convolutions run much faster on NHWC (channels-last) tensors
than on NCHW ones. When a graph holds 2-d convolutions (inference graphs,
and AOTAutograd's forward and backward graphs), this pass rewrites its FX
graph, before wick imports it, so that:

* the pointwise work feeding a convolution (the autocast conversion of its
  weight and input, the previous block's normalisation and activation; in a
  backward, what feeds a convolution_backward's grad_output and input) is
  computed in NHWC order: the node becomes the same op applied to
  permute(x, [0, 2, 3, 1]) of each operand, a contiguous NHWC tensor, and
  permute(result, [0, 3, 1, 2]) (a view: NCHW sizes, channels-last strides)
  is what the convolution receives;
* pointwise work and keepdim reductions (training batch norm's var_mean
  too) that read a channels-last value (a convolution's output, or a
  pooling of one) follow it into NHWC order,
  so wick's kernels read and write memory in order (coalesced on the GPU)
  instead of striding across channels;
* a weight no kernel produces (a parameter) gets one NHWC-ordered copy per
  call, so cuDNN answers channels-last (convolution_backward alike);
* graph outputs keep the strides eager gives them (a copy back where the
  layout changed), but for the activations a forward saves for its
  backward: those stay channels-last where dense.

Training: AOTAutograd partitions the joint graph before either half is
compiled, so the backward is traced on NCHW activations. The forward's
compiler (backends._aten_compiler) tells AOTAutograd which strides its
compiled graph really returns each output with (TracingContext.
output_strides, as inductor's layout optimisation does); AOTAutograd then
gives the backward's compiler its saved-activation placeholders re-strided
to them. This pass finds such inputs (given_strides) and traces the
backward again on them, each node's metadata computed by running its op on
fake tensors of the real strides: the strides eager would give the same ops
on channels-last activations, which wick's kernels and extern calls then
produce. Which forward outputs are saved activations comes from
AOTAutograd's metadata (backends._saved_activations); mutated inputs and
the user's outputs keep eager's strides; without a tracing context (wick's
own capture) every output does.

Values are unchanged: only operand order and strides move (the same ops on
the same logical elements). Graphs with stride-dependent ops (as_strided)
are left alone, and so is any graph where a step fails (a view the new
strides do not allow): the caller then imports the graph as it was. A
backward cannot be left as it was when its inputs have other strides than
traced: its pass falls back to tracing it again with no layout changes of
its own, where an op refuses the new strides reading its operands copied
back to the traced ones, and last to copying those inputs back first.

Knob: WICK_CHANNELS_LAST: unset or "auto": CUDA graphs with convolutions;
"1": also CPU graphs (tests: strided layouts through the C and the
interpreted Triton backends); "0": never (a backward still takes the
strides its forward reported).
"""

import operator
import os

# node.meta key: the node's value is promised contiguous where torch's own
# kernel would keep its operand's permuted layout (see rewrite's emit)
FORCE_CONTIGUOUS = "wick_force_contiguous"
TO_NHWC = [0, 2, 3, 1]
TO_NCHW = [0, 3, 1, 2]


class _Abandon(Exception):
    pass


def wanted(torch, gm, example_inputs, which):
    """Whether the pass should run on this graph: a reason string when not."""
    knob = os.environ.get("WICK_CHANNELS_LAST", "auto").strip().lower()
    if knob in ("0", "off", "no", "false"):
        return "WICK_CHANNELS_LAST=0"
    if which not in ("inference", "forward", "backward"):
        return f"a {which} graph"
    convs = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in _conv_targets(torch)
             and _dim(torch, n.args[0]) == 4]
    if not convs:
        return "no 2-d convolution"
    devices = {t.device.type for t in example_inputs if isinstance(t, torch.Tensor) and
               not (t.dim() == 0 and t.device.type == "cpu")}  # eager mixes 0-d CPU tensors in
    if knob not in ("1", "on", "yes", "true") and devices != {"cuda"}:
        return "not a CUDA graph"
    return None


def _conv_targets(torch):
    aten = torch.ops.aten
    return (aten.convolution.default, aten.convolution_backward.default)


def _val(node):
    return node.meta.get("val") if hasattr(node, "meta") else None


def _dim(torch, node):
    v = _val(node)
    return v.dim() if isinstance(v, torch.Tensor) else -1


def _is_cl(torch, t):
    """Channels-last strides that are not also contiguous ones."""
    return (isinstance(t, torch.Tensor) and t.dim() == 4 and not t.is_contiguous()
            and t.is_contiguous(memory_format=torch.channels_last))


def _dense(t):
    """t's elements fill its span: its strides are those of a contiguous
    tensor of its sizes in some dim order."""
    step = 1
    for stride, size in sorted((s, n) for s, n in zip(t.stride(), t.shape) if n != 1):
        if stride != step:
            return False
        step *= size
    return True


def rewrite(torch, gm, native_kinds, free_outputs=(), given_inputs=None, nhwc_work=True, copy_inputs_back=False):
    """A new GraphModule computing what gm computes, with channels-last
    convolutions (see the module docstring), or raises _Abandon.

    free_outputs: positions of graph outputs that may keep a new layout
    (activations a forward saves for its backward); every other output keeps
    its traced strides. given_inputs: placeholder -> the fake value it really
    has where its strides differ from the traced ones (a backward's saved
    activations); the nodes reading them are traced again on those values.
    nhwc_work=False: only that re-tracing, no layout changes of the pass's
    own; copy_inputs_back: those placeholders are first copied to their
    traced strides, the rest of the graph as traced."""
    import torch.fx
    from torch._guards import detect_fake_mode

    aten = torch.ops.aten
    graph = gm.graph
    given_inputs = given_inputs or {}
    stride_dependent = {aten.as_strided.default, aten.as_strided_scatter.default}
    for n in graph.nodes if not copy_inputs_back else ():
        if n.op == "call_function" and n.target in stride_dependent:
            raise _Abandon(f"{n.target} depends on strides")
        if n.op == "call_function" and not isinstance(n.target, torch._ops.OpOverload) and n.target is not operator.getitem:
            raise _Abandon(f"a call of {n.target}")
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    fake_mode = detect_fake_mode([_val(n) for n in placeholders if _val(n) is not None])
    if fake_mode is None:
        raise _Abandon("no fake-tensor mode on the placeholders")

    convs = _conv_targets(torch) if nhwc_work else ()
    # ops whose kernels take their operands only in the traced layout: CUDA's
    # group norm and its backward view them as (N, groups, -1), which a
    # channels-last tensor does not allow (a 16-bit group norm stays a call
    # into torch): their operands are copied back to the traced strides
    traced_operands = {aten.native_group_norm.default, aten.native_group_norm_backward.default}
    pointwise_kinds = {"binary", "alpha", "ternary", "unary", "convert", "clone", "to_copy", "params", "clamp",
                       "gelu"}

    def pointwise(n):
        kind = native_kinds.get(n.target)
        return kind in pointwise_kinds and _dim(torch, n) == 4

    # producers of a convolution's input or weight (of a convolution
    # backward's grad_output, input or weight) that are wick's own kernels:
    # computed in NHWC order from the start
    seeds = set()
    for n in graph.nodes:
        if n.op == "call_function" and n.target in convs and _dim(torch, n.args[0]) == 4:
            for a in n.args[:2 if n.target is aten.convolution.default else 3]:
                if isinstance(a, torch.fx.Node) and a.op == "call_function" and pointwise(a):
                    seeds.add(a)

    new = torch.fx.Graph()
    env = {}    # old node -> new node, in the old node's logical (NCHW) order
    nhwc = {}   # old node -> new node holding it permuted to NHWC, contiguous
    bcast = {}  # old node of rank < 4 -> new node: unsqueezed to 4-d, permuted to NHWC
    as_traced = {}  # old node -> new node holding its value with the traced strides

    def fake_of(x):
        return torch.fx.node.map_arg(x, lambda m: m.meta["val"])

    def emit(target, args, kwargs=None, contiguous=False):
        """A new node and its fake value. contiguous: the value is promised
        contiguous (wick's kernels write their outputs so; should the op stay
        a call into torch, the importer makes that call's result contiguous)."""
        kwargs = kwargs or {}
        node = new.call_function(target, tuple(args), dict(kwargs))
        try:
            with fake_mode:
                val = target(*fake_of(tuple(args)), **fake_of(dict(kwargs)))
                if contiguous and isinstance(val, torch.Tensor) and not val.is_contiguous():
                    val = val.contiguous()
                    node.meta[FORCE_CONTIGUOUS] = True
        except Exception as exc:  # noqa: BLE001 - e.g. a view the new strides do not allow
            new.erase_node(node)
            raise _Abandon(f"{getattr(target, '__name__', target)} on the new layout: {type(exc).__name__}: {exc}")
        node.meta["val"] = val
        return node

    def restrided(x, like):
        """New node x copied into the strides of fake value `like` (a
        contiguous clone, or one of x permuted into like's dense order and
        viewed back), whose value then stands for x's."""
        sizes, strides = list(like.shape), list(like.stride())
        if like.is_contiguous():
            out = emit(aten.clone.default, [x], {"memory_format": torch.contiguous_format})
        else:
            order = sorted(range(len(sizes)), key=lambda d: (-strides[d] if sizes[d] != 1 else 0, d))
            back = [order.index(d) for d in range(len(sizes))]
            dense = emit(aten.clone.default, [emit(aten.permute.default, [x, order])],
                         {"memory_format": torch.contiguous_format})
            out = emit(aten.permute.default, [dense, back])
        if [s for s, n in zip(_val(out).stride(), sizes) if n != 1] != [s for s, n in zip(strides, sizes) if n != 1]:
            raise _Abandon(f"no copy with strides {tuple(strides)} (gaps or overlaps)")
        if tuple(_val(out).stride()) == tuple(strides):
            out.meta["val"] = like  # so what reads it is as traced, with no fake run
        return out

    def orig(n):
        if not isinstance(n, torch.fx.Node):
            return n
        if n not in env:
            env[n] = emit(aten.permute.default, [nhwc[n], TO_NCHW])
        return env[n]

    def traced(n):
        """n's value with its traced strides."""
        if not isinstance(n, torch.fx.Node) or not isinstance(_val(n), torch.Tensor):
            return orig(n)
        if _val(orig(n)) is _val(n) or tuple(_val(orig(n)).stride()) == tuple(_val(n).stride()):
            return orig(n)
        if n not in as_traced:
            as_traced[n] = restrided(orig(n), _val(n))
        return as_traced[n]

    def rep(n):
        """n's value as an NHWC-ordered operand (n: a tensor node of rank <= 4)."""
        r = _dim(torch, n)
        if r == 4:
            if n not in nhwc:
                nhwc[n] = emit(aten.permute.default, [env[n], TO_NHWC])
            return nhwc[n]
        if r <= 0:
            return orig(n)
        if n not in bcast:
            x = orig(n)
            for _ in range(4 - r):
                x = emit(aten.unsqueeze.default, [x, 0])
            bcast[n] = emit(aten.permute.default, [x, TO_NHWC])
        return bcast[n]

    def follows_cl(a):
        """a (an old node) is held channels-last because of this pass (or of
        the strides its backward's inputs really have)."""
        if a in nhwc:
            return True
        if a in env and _dim(torch, a) == 4:
            old, now = _val(a), _val(env[a])
            return _is_cl(torch, now) and tuple(old.stride()) != tuple(now.stride())
        return False

    def tensor_args(n):
        return [a for a in list(n.args) + list(n.kwargs.values())
                if isinstance(a, torch.fx.Node) and isinstance(_val(a), torch.Tensor)]

    def map_tensor_args(x):
        return torch.fx.node.map_arg(x, lambda a: rep(a) if isinstance(_val(a), torch.Tensor) else orig(a))

    reductions = {aten.mean.dim, aten.sum.dim_IntList, aten.amax.default} if nhwc_work else set()
    # training batch norm's statistics: (var, mean), read only through getitem
    var_mean = aten.var_mean.correction if nhwc_work else None
    nhwc_items = {}  # old node -> new node of a tuple whose items are NHWC-ordered
    out_position = 0
    for n in graph.nodes:
        if n.op == "placeholder":
            env[n] = new.placeholder(n.target)
            env[n].meta = dict(n.meta)
            if n in given_inputs:
                t = given_inputs[n]
                with fake_mode:  # a value of this graph's fake mode whatever t is
                    env[n].meta["val"] = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
                if copy_inputs_back:
                    env[n] = restrided(env[n], _val(n))
            continue
        if n.op == "get_attr":
            env[n] = new.get_attr(n.target)
            env[n].meta = dict(n.meta)
            if "val" not in env[n].meta:
                obj = gm
                for part in str(n.target).split("."):
                    obj = getattr(obj, part)
                if isinstance(obj, torch.Tensor):
                    env[n].meta["val"] = fake_mode.from_tensor(obj)
                    n.meta["val"] = env[n].meta["val"]
            continue
        if n.op == "output":
            outs = []
            for a in (n.args[0] if isinstance(n.args[0], (list, tuple)) else [n.args[0]]):
                out_position += 1
                if not isinstance(a, torch.fx.Node):
                    outs.append(a)
                    continue
                o = orig(a)
                old, now = _val(a), _val(o)
                if (isinstance(old, torch.Tensor) and tuple(old.stride()) != tuple(now.stride())
                        and (out_position - 1 not in free_outputs or not _dense(now))):
                    # AOTAutograd gives the backward a saved activation as the
                    # traced value re-strided: with gaps it might not fit
                    o = traced(a)
                outs.append(o)
            new.output(type(n.args[0])(outs) if isinstance(n.args[0], (list, tuple)) else outs[0])
            continue
        if n.target is operator.getitem and n.args[0] in nhwc_items:
            nhwc[n] = emit(operator.getitem, [nhwc_items[n.args[0]], n.args[1]])
            continue
        if n.target is var_mean and _dim(torch, n.args[0]) == 4 and follows_cl(n.args[0]) and \
                n.kwargs.get("keepdim") is True and len(n.args) == 2 and isinstance(n.args[1], (list, tuple)) and \
                n.args[1] and all(u.target is operator.getitem for u in n.users):
            pdims = [TO_NHWC.index(d) for d in sorted({d % 4 for d in n.args[1]})]
            nhwc_items[n] = emit(n.target, [rep(n.args[0]), pdims], dict(n.kwargs))
            continue
        targs = tensor_args(n)
        if pointwise(n) and (n in seeds or any(follows_cl(a) for a in targs if _dim(torch, a) == 4)) and \
                all(0 <= _dim(torch, a) <= 4 for a in targs) and nhwc_work:
            nhwc[n] = emit(n.target, map_tensor_args(n.args), map_tensor_args(n.kwargs), contiguous=True)
            continue
        if n.target in reductions and _dim(torch, n) >= 0 and _dim(torch, n.args[0]) == 4 and \
                follows_cl(n.args[0]) and len(n.args) >= 2 and isinstance(n.args[1], (list, tuple)) and n.args[1]:
            dims = sorted({d % 4 for d in n.args[1]})
            keepdim = bool(n.args[2]) if len(n.args) > 2 else bool(n.kwargs.get("keepdim", False))
            pdims = [TO_NHWC.index(d) for d in dims]
            args = [rep(n.args[0]), pdims] + list(n.args[2:])
            out = emit(n.target, args, dict(n.kwargs), contiguous=True)
            if keepdim:
                nhwc[n] = out
                continue
            kept = [TO_NHWC[p] for p in range(4) if p not in pdims]  # old dims, in the result's order
            if kept == sorted(kept):
                env[n] = out
                continue
            new.erase_node(out)
        weight_at = {aten.convolution.default: 1, aten.convolution_backward.default: 2}.get(n.target)
        if n.target in convs and _dim(torch, n.args[0]) == 4 and isinstance(n.args[weight_at], torch.fx.Node):
            w = n.args[weight_at]
            if w not in nhwc and not _val(env[w]).is_contiguous(memory_format=torch.channels_last):
                # a weight no kernel of the graph produces (a parameter
                # outside autocast): one NHWC-ordered copy per call, so cuDNN
                # answers channels-last and the activations follow
                nhwc[w] = emit(aten.clone.default, [rep(w)], contiguous=True)
                env[w] = emit(aten.permute.default, [nhwc[w], TO_NCHW])
        if n.target in traced_operands:
            args, kwargs = torch.fx.node.map_arg(n.args, traced), torch.fx.node.map_arg(n.kwargs, traced)
            env[n] = new.call_function(n.target, args, kwargs)
            env[n].meta["val"] = _val(n)
            continue
        # anything else (convolutions, pooling, views, externs): the same op on
        # the operands in their logical order, whatever strides they now have
        args, kwargs = torch.fx.node.map_arg(n.args, orig), torch.fx.node.map_arg(n.kwargs, orig)
        if all(_val(orig(a)) is _val(a) for a in n.all_input_nodes):
            # operands as traced: so is the value (no fake run: most nodes of
            # a graph far from its convolutions)
            env[n] = new.call_function(n.target, args, kwargs)
            env[n].meta["val"] = _val(n)
            continue
        try:
            env[n] = emit(n.target, args, kwargs)
        except _Abandon:
            if not given_inputs:
                raise
            # a backward must take its inputs as they come: what a new layout
            # does not allow (a view) reads its operands with the traced strides
            args, kwargs = torch.fx.node.map_arg(n.args, traced), torch.fx.node.map_arg(n.kwargs, traced)
            env[n] = new.call_function(n.target, args, kwargs)
            env[n].meta["val"] = _val(n)
    new.lint()
    return _Rewritten(gm, new)


class _Rewritten:
    """The rewritten graph with gm's attributes (its constants): what the
    ATen importer reads. Not a GraphModule, whose Python code generation
    would cost more than the whole rewrite; nothing calls it (a fallback
    runs the original gm)."""

    def __init__(self, gm, graph):
        self._gm = gm
        self.graph = graph

    def __getattr__(self, name):
        return getattr(self._gm, name)


def given_strides(torch, gm, example_inputs):
    """placeholder -> example input, for the tensor inputs whose strides
    differ from the traced ones (a backward's activations saved in the
    layout its forward's compiled graph gave them)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    given = {}
    for n, t in zip(placeholders, example_inputs):
        v = _val(n)
        if isinstance(t, torch.Tensor) and isinstance(v, torch.Tensor) and t.dim() == v.dim() and \
                tuple(t.stride()) != tuple(v.stride()):
            given[n] = t
    return given


def apply(torch, gm, example_inputs, which, native_kinds, free_outputs=()):
    """(graph module to import, note): the rewritten graph, or gm itself with
    the reason the pass did not run. Raises _Abandon when gm's traced
    strides are wrong for its example inputs and no rewrite could fix that
    (the graph then runs eagerly)."""
    if any(isinstance(v, torch.Tensor) and any(isinstance(x, torch.SymInt) for x in (*v.shape, *v.stride()))
           for v in map(_val, gm.graph.nodes)):
        return gm, "symbolic shapes"  # compiled again per shape, as traced
    given = given_strides(torch, gm, example_inputs)
    why = wanted(torch, gm, example_inputs, which)
    if not why:
        try:
            return rewrite(torch, gm, native_kinds, free_outputs, given), None
        except _Abandon as exc:
            why = f"channels-last abandoned: {exc}"
    if not given:
        return gm, why
    # the saved activations' strides are not the traced ones: the graph is
    # traced again on them, or else they are copied back to the traced ones
    names = ", ".join(n.name for n in list(given)[:4]) + (", ..." if len(given) > 4 else "")
    try:
        return rewrite(torch, gm, native_kinds, (), given, nhwc_work=False), f"{why}; inputs as given ({names})"
    except _Abandon as exc:
        note = f"{why}; inputs copied to their traced strides ({names}: {exc})"
    return rewrite(torch, gm, native_kinds, (), given, nhwc_work=False, copy_inputs_back=True), note
