"""cuDNN's execution plans for a graph's attention and convolution calls,
built while its kernels compile instead of in its first run.

cuDNN builds an execution plan for every distinct call (its sizes, strides,
dtypes and flags) and PyTorch caches the plans per thread
(aten/src/ATen/native/cudnn/MHA.cpp for attention, Conv_v8.cpp's
thread-local benchmark caches for convolutions):
  * attention: 0.3-0.5 s for a forward and up to 1 s for a backward on the
    H200. GPT-2's first training call spent 1.6 s so, after its kernels had
    compiled;
  * convolutions: a channels-last network's convolutions are new to cuDNN
    even after eager NCHW runs (mobilenetv3's first inference call: 3.3 s
    after its last kernel compiled).

So each distinct call of a graph is made once here:
  * on this thread (the one about to run the graph), on scratch tensors of
    the call's layouts, without grad;
  * for an attention call that returns the logsumexp a backward needs, its
    backward too, through autograd, from a thread of its own: autograd runs
    it on the device's thread, where it runs the graph's backward.
Meanwhile the graph's kernels compile in the compile processes
(CompiledGraph.compile_kernels_soon). No call touches the random state
(capture passes attention dropout_p 0, checked here), and a call that fails
here is left to the graph's own run to report. WICK_WARM_CUDNN=0 turns it
off.

Callers: wick's autodiff (a training graph's forward) and capture (an
inference graph, csrc/capture/symbolic.c).
"""
import os
import threading

from . import _C

CUDNN_ATTENTION = "aten._scaled_dot_product_cudnn_attention.default"
CONVOLUTION = "aten.convolution.default"
# the threads running warm-up backwards (daemon threads; tests join them)
warming = []


def _enabled():
    return os.environ.get("WICK_WARM_CUDNN", "1").strip() != "0"


def warm(graph, externs):
    """Makes each distinct cuDNN attention and CUDA convolution call of graph
    (a wick Graph; its extern nodes index externs, the capture's (fn, args,
    kwargs, picks) entries) once. Returns how many calls were made; never
    raises (a head start only)."""
    try:
        return _warm(graph, externs)
    except Exception:  # noqa: BLE001 - the graph's own run reports what is wrong
        return 0


def _warm(graph, externs):
    import torch

    if not _enabled() or not any(str(d["device"]).startswith("cuda") for d in graph.inputs()):
        return 0
    try:
        if torch.cuda.is_current_stream_capturing():
            return 0
    except RuntimeError:
        return 0
    seen, grads = set(), []
    for nd in graph.nodes():
        if nd["op"] != "EXTERN" or nd["name"] not in (CUDNN_ATTENTION, CONVOLUTION):
            continue
        entry = externs[nd["extern_index"]]
        if callable(entry) or len(entry) < 2:
            continue
        metas = [graph.value(v) for v in nd["inputs"]]
        if not metas or not str(metas[0]["device"]).startswith("cuda"):
            continue
        args = list(entry[1])
        kwargs = dict(entry[2] or {}) if len(entry) > 2 else {}
        attention = nd["name"] == CUDNN_ATTENTION
        if attention and (len(args) < 8 or args[5] != 0.0):
            continue  # dropout would draw random numbers
        key = (nd["name"], repr([(m["dtype"], m["sizes"], m["strides"], m["device"]) for m in metas]),
               repr([a for a in args if not isinstance(a, _C.ExternInput)]), repr(sorted(kwargs.items())))
        if key in seen:
            continue
        seen.add(key)
        train = attention and args[4] is True

        def scratch(a):
            if not isinstance(a, _C.ExternInput):
                return a
            m = metas[a.index]
            t = torch.empty_strided(m["sizes"], m["strides"], dtype=getattr(torch, m["dtype"]), device=m["device"])
            return t.requires_grad_() if train and a.index < 3 else t

        # a convolution through torch.convolution, the same op: its Python
        # binding releases the GIL while cuDNN builds the plan (tens of ms a
        # call), so the threads feeding Triton's compile processes go on
        fn = torch.convolution if not attention and len(args) == 9 and not kwargs else entry[0]
        try:
            with torch.autocast("cuda", enabled=False), torch.set_grad_enabled(train):
                res = fn(*[scratch(a) for a in args], **{k: scratch(v) for k, v in kwargs.items()})
        except Exception:  # noqa: BLE001 - the graph's own call reports it
            continue
        if train and res[0].requires_grad:
            grads.append(res[0])
    if grads:
        def backward():
            try:
                torch.autograd.backward(grads, [torch.empty_like(g) for g in grads])
            except Exception:  # noqa: BLE001 - the graph's backward reports it
                pass

        t = threading.Thread(target=backward, name="wick-warm-cudnn", daemon=True)
        t.start()
        warming[:] = [w for w in warming if w.is_alive()] + [t]
    return len(seen)


def warm_graph(compiled, graph, externs):
    """An inference graph just compiled (a CompiledGraph of graph), which
    its caller found calling cuDNN attention or convolutions: its kernels
    start compiling, and its cuDNN plans are built meanwhile; its first run
    waits for the kernels. Returns warm's count."""
    if not _enabled():
        return 0
    try:
        compiled.compile_kernels_soon()
    except Exception:  # noqa: BLE001 - the first run compiles the kernels itself
        return 0
    return warm(graph, externs)
