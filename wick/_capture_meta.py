"""Output metadata of an extern call, computed at capture time on fake
tensors (torch's FakeTensorMode: no data is allocated, devices are kept).

capture (csrc/capture/vals/extern.c) calls `outputs(fn, args, kwargs,
inputs, grad_enabled)` once per torch call it puts in a graph as an EXTERN node: `args`
and `kwargs` are the call's templates, holding wick._C.ExternInput(i) where
tensor input i goes, and `inputs` describes each input as (dtype, device,
sizes, strides, requires_grad). It returns (structure, metas, aliased_inputs,
aliased_outputs): structure is "tensor", or "tuple"/"list" (or
"return_types.NAME": a torch.return_types named tuple) with one meta per
item, each meta is (dtype, device, sizes, strides, requires_grad), computed
in the grad mode the captured frame has at the call, and the two lists give
the inputs and outputs that share storage (views). Anything else (a Python number, None, a
data-dependent shape) raises, and capture records the reason.

A call that writes into some of its inputs (an in-place method, out=, a
functional like batch_norm that updates running statistics) is seen by the
version counters of the fakes. Then the structure is "functional:KIND" and
the call becomes Functional(fn, ...): the written inputs are cloned first
and returned after the call's own outputs, so the graph stays functional and
capture rebinds each written value (and writes it back to an input after the
graph). KIND is "none" (the call returns None), "self:K" (it returns written
input K itself), or the structure of its own outputs; the fifth item lists
the written inputs."""
import functools
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import wick._C as C

_mode = None


def _fake_mode():
    global _mode
    if _mode is None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        _mode = FakeTensorMode(allow_non_fake_inputs=False)
    return _mode


def _fill(t, fakes):
    if isinstance(t, C.ExternInput):
        return fakes[t.index]
    if type(t) is tuple:
        return tuple(_fill(x, fakes) for x in t)
    if type(t) is list:
        return [_fill(x, fakes) for x in t]
    if type(t) is dict:
        return {k: _fill(v, fakes) for k, v in t.items()}
    return t


def _meta(t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"returns a {type(t).__name__}, not a tensor")
    if t.layout != torch.strided:
        raise TypeError(f"returns a tensor with layout {t.layout}")
    # a lazily conjugated or negated view (z.conj(), z.conj().imag): its
    # memory holds other values than it stands for, which kernels (and the
    # fake inputs of later calls) would read as they are
    if t.is_conj():
        raise TypeError("returns a tensor with the conjugate bit set")
    if t.is_neg():
        raise TypeError("returns a tensor with the negation bit set")
    return (t.dtype, t.device, tuple(t.shape), tuple(t.stride()), t.requires_grad)


# outputs() answers memoised: the same call on inputs of the same metadata
# has the same answer (each layer of a model repeats its calls; a model
# captured again repeats all of them). Keyed by the function, the call
# templates with every constant tagged by its exact type (True and 1 give
# different dtypes), the inputs' metadata, and the state that decides output
# dtypes and requires_grad: grad mode, inference mode, the default dtype,
# autocast. Calls whose templates hold anything else are not memoised.
_memo = {}
_MEMO_MAX = 4096
_ATOMS = (int, float, bool, complex, str, bytes, type(None), type(Ellipsis), torch.dtype, torch.device,
          torch.layout, torch.memory_format)


class _NoKey(Exception):
    pass


def _freeze(t):
    tp = type(t)
    if tp is C.ExternInput:
        return ("in", t.index)
    if tp in _ATOMS:
        return (tp, t)
    if tp is tuple or tp is list:
        return (tp, tuple(_freeze(x) for x in t))
    if tp is dict:
        return (dict, tuple((k, _freeze(v)) for k, v in t.items()))
    if tp is slice:
        return (slice, _freeze(t.start), _freeze(t.stop), _freeze(t.step))
    raise _NoKey


def _memo_key(fn, args, kwargs, inputs, grad_enabled, first_only):
    try:
        hash(fn)
        key = (fn, _freeze(args), _freeze(kwargs), tuple(inputs), bool(grad_enabled), bool(first_only),
               torch.is_inference_mode_enabled(), torch.get_default_dtype(),
               torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda"))
        hash(key)
        return key
    except (_NoKey, TypeError):
        return None


def outputs(fn, args, kwargs, inputs, grad_enabled=False, first_only=False):
    """(structure, metas, aliased inputs, aliased outputs); shared between
    equal calls: the caller only reads it. first_only: the call returns a
    tuple whose first item is the one tensor the graph reads (the fused
    attention ops, whose other items include ints): structure "first", the
    metas of that item alone."""
    key = _memo_key(fn, args, kwargs, inputs, grad_enabled, first_only)
    if key is not None:
        hit = _memo.get(key)
        if hit is not None:
            return hit
    out = _cpu_kernel_layout(fn, args, inputs, _outputs(fn, args, kwargs, inputs, grad_enabled, first_only))
    if first_only and out[0] != "first":
        raise TypeError(f"returns a {out[0]}, not a tuple whose first item is a tensor")
    if key is not None:
        if len(_memo) >= _MEMO_MAX:
            _memo.clear()
        _memo[key] = out
    return out


def _batch_norm_callables():
    aten = torch.ops.aten
    return {torch.nn.functional.batch_norm, torch.batch_norm, torch.native_batch_norm,
            aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
            aten._native_batch_norm_legit.no_stats, aten._native_batch_norm_legit_no_training.default}


_batch_norms = None


def _cpu_kernel_layout(fn, args, inputs, out):
    """out with its first result's strides those of eager's CPU kernel where
    they differ from the meta rule fake tensors follow: CPU batch norm writes
    a tensor contiguous in its input's suggested memory format (a permuted
    3-D input gives a contiguous result) where the meta rule keeps the
    input's strides. (Checked on the CPU only; CUDA keeps the meta rule.)"""
    global _batch_norms
    if _batch_norms is None:
        _batch_norms = _batch_norm_callables()
    target = getattr(fn, "fn", fn)  # through UnderAutocast
    try:
        if target not in _batch_norms:
            return out
    except TypeError:  # an unhashable callable
        return out
    metas = out[1]
    first = args[0] if args else None
    if not metas or not isinstance(first, C.ExternInput):
        return out
    dtype, device, sizes, strides, requires_grad = metas[0]
    in_sizes, in_strides = inputs[first.index][2], inputs[first.index][3]
    if torch.device(device).type != "cpu" or tuple(in_sizes) != tuple(sizes):
        return out
    from torch._prims_common import suggest_memory_format

    probe = torch.empty_strided(in_sizes, in_strides, device="meta")
    kernel_strides = torch.empty(in_sizes, device="meta", memory_format=suggest_memory_format(probe)).stride()
    if tuple(kernel_strides) == tuple(strides):
        return out
    return (out[0], [(dtype, device, sizes, tuple(kernel_strides), requires_grad)] + list(metas[1:])) + tuple(out[2:])


def _outputs(fn, args, kwargs, inputs, grad_enabled=False, first_only=False):
    try:
        return _outputs_on(fn, args, kwargs, inputs, grad_enabled, leaves=True, first_only=first_only)
    except RuntimeError as e:
        if "leaf Variable" not in str(e):
            raise
    # an in-place call on an input that requires grad: graph values are
    # not leaves, so run it on non-leaf fakes as eager would
    return _outputs_on(fn, args, kwargs, inputs, grad_enabled, leaves=False, first_only=first_only)


def _outputs_on(fn, args, kwargs, inputs, grad_enabled, leaves, first_only=False):
    mode = _fake_mode()
    with mode, torch.set_grad_enabled(grad_enabled):
        fakes = [_fake_input(*meta, leaf=leaves) for meta in inputs]
        versions = [f._version for f in fakes]
        with _Writes(fakes) as seen:
            out = fn(*_fill(args, fakes), **_fill(kwargs, fakes))
        written = sorted(seen.written | {i for i, f in enumerate(fakes) if f._version != versions[i]})
    if written:
        return _functional_outputs(fn, args, kwargs, inputs, grad_enabled, written)
    if first_only and isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
        if any(out[0] is f for f in fakes):
            raise TypeError("returns one of its inputs itself")
        return ("first", [_meta(out[0])]) + _aliasing([out[0]], fakes) + ([],)
    if isinstance(out, torch.Tensor):
        if any(out is f for f in fakes):
            raise TypeError("returns its input itself (an in-place or identity op)")
        return ("tensor", [_meta(out)]) + _aliasing([out], fakes) + ([],)
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        if any(o is f for o in out for f in fakes):
            raise TypeError("returns one of its inputs itself")
        return (_sequence_kind(out), [_meta(o) for o in out]) + _aliasing(out, fakes) + ([],)
    raise TypeError(f"returns a {type(out).__name__}, not tensors")


def _sequence_kind(out):
    """"list", "tuple", or "return_types.NAME" for the named tuples
    (structseqs) torch.return_types holds: x.max(dim) returns one, and code
    reads its .values and .indices."""
    if isinstance(out, list):
        return "list"
    t = type(out)
    if t is not tuple and t.__module__ == "torch.return_types" and getattr(torch.return_types, t.__name__, None) is t:
        return "return_types." + t.__name__
    return "tuple"


def _fake_input(dtype, device, sizes, strides, requires_grad, leaf=False):
    """A fake tensor standing for one graph value. One that requires grad is
    made a non-leaf (a strided view of a computed tensor), as graph values
    are: an in-place call on it is then what eager allows on an
    intermediate, not refused as on a leaf. (Capture refuses writes into
    inputs that require grad itself.) With `leaf`, a leaf that requires grad
    instead: two fake ops fewer per input, the same output metadata for any
    call but an in-place one, which refuses it (_outputs then retries)."""
    if not requires_grad or leaf:
        t = torch.empty_strided(sizes, strides, dtype=dtype, device=device)
        return t.requires_grad_() if requires_grad else t
    span = 1 + sum((n - 1) * st for n, st in zip(sizes, strides)) if all(n > 0 for n in sizes) else 0
    with torch.enable_grad():
        base = torch.empty(span, dtype=dtype, device=device).requires_grad_() * 1
        return base.as_strided(sizes, strides)


class _Writes(TorchDispatchMode):
    """Which inputs the ATen ops of a call write, by their schemas: a
    write the version counter does not see (batch_norm updates its running
    statistics without bumping it) is found here. A write into a view of
    an input is a write into that input."""

    def __init__(self, fakes):
        super().__init__()
        self.by_storage = {}
        for i, f in enumerate(fakes):
            self.by_storage.setdefault(f.untyped_storage()._cdata, []).append(i)
        self.written = set()

    def _note(self, v):
        if isinstance(v, torch.Tensor):
            self.written.update(self.by_storage.get(v.untyped_storage()._cdata, ()))
        elif isinstance(v, (list, tuple)):
            for x in v:
                self._note(x)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        schema = getattr(func, "_schema", None)
        if schema is not None:
            def arg(i, a):
                return args[i] if i < len(args) and not a.kwarg_only else kwargs.get(a.name)

            names = [a.name for a in schema.arguments]
            # native_batch_norm and its kin update running_mean/var in
            # training without marking them written in their schemas
            stats_written = "running_mean" in names and "training" in names and \
                arg(names.index("training"), schema.arguments[names.index("training")]) is True
            for i, a in enumerate(schema.arguments):
                if (a.alias_info is not None and a.alias_info.is_write) or \
                        (stats_written and a.name in ("running_mean", "running_var")):
                    self._note(arg(i, a))
        return func(*args, **kwargs)


def _clone_written(template, value, written, clones):
    """value (the filled template) with each written input replaced by its
    clone, one clone per input however often it appears."""
    if isinstance(template, C.ExternInput):
        if template.index not in written:
            return value
        c = clones.get(template.index)
        if c is None:
            c = clones[template.index] = value.clone()
        return c
    if type(template) is tuple:
        return tuple(_clone_written(t, v, written, clones) for t, v in zip(template, value))
    if type(template) is list:
        return [_clone_written(t, v, written, clones) for t, v in zip(template, value)]
    if type(template) is dict:
        return {k: _clone_written(template[k], v, written, clones) for k, v in value.items()}
    return value


class Functional:
    """fn with the inputs it writes cloned first: returns its own tensor
    outputs (none when it returns None or a written input itself), then the
    written clones in the order of `written`. The graph's extern nodes call
    it with the template filled as for fn."""

    def __init__(self, fn, args, kwargs, written, kind):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.written, self.kind = tuple(written), kind
        self.__name__ = getattr(fn, "__name__", "call")
        self.__qualname__ = "Functional(" + getattr(fn, "__qualname__", self.__name__) + ")"
        # where the written inputs are: positions and keywords of the call
        # itself (the common case, cloned without walking the templates)
        ws = set(self.written)
        self.flat = not any(type(t) in (tuple, list, dict) for t in list(args) + list(kwargs.values()))
        self.pos = [(i, t.index) for i, t in enumerate(args) if isinstance(t, C.ExternInput) and t.index in ws]
        self.kw = [(k, t.index) for k, t in kwargs.items() if isinstance(t, C.ExternInput) and t.index in ws]

    def __call__(self, *args, **kwargs):
        clones = {}
        if self.flat:
            a = list(args)
            for i, k in self.pos:
                c = clones.get(k)
                a[i] = c if c is not None else clones.setdefault(k, args[i].clone())
            for name, k in self.kw:
                c = clones.get(k)
                kwargs[name] = c if c is not None else clones.setdefault(k, kwargs[name].clone())
            out = self.fn(*a, **kwargs)
        else:
            written = set(self.written)
            a = _clone_written(self.args, args, written, clones)
            kw = {k: _clone_written(self.kwargs[k], v, written, clones) for k, v in kwargs.items()}
            out = self.fn(*a, **kw)
        return self.result(out, tuple(clones[k] for k in self.written))

    def result(self, out, written):
        """What a call returns given fn's result and the written tensors
        (the clones, or the inputs themselves where the call runs in place:
        backends.to_fx)."""
        if self.kind == "none" or self.kind.startswith("self:"):
            return written
        if self.kind == "tensor":
            return (out,) + written
        return tuple(out) + written

    def __repr__(self):
        return f"<wick Functional {self.__qualname__} writes inputs {list(self.written)}>"


def _functional_outputs(fn, args, kwargs, inputs, grad_enabled, written):
    mode = _fake_mode()
    with mode, torch.set_grad_enabled(grad_enabled):
        fakes = [_fake_input(*meta) for meta in inputs]
        clones = {}
        a = _clone_written(args, _fill(args, fakes), set(written), clones)
        kw = {k: _clone_written(kwargs[k], v, set(written), clones) for k, v in _fill(kwargs, fakes).items()}
        before = {k: (tuple(c.shape), tuple(c.stride()), c.dtype) for k, c in clones.items()}
        out = fn(*a, **kw)
    if set(clones) != set(written):
        raise TypeError("writes an input it does not take directly")
    for k, c in clones.items():
        if (tuple(c.shape), tuple(c.stride()), c.dtype) != before[k]:
            raise TypeError("changes the shape or strides of an input in place")
    tail = [clones[k] for k in written]
    if out is None:
        kind, own = "none", []
    elif isinstance(out, torch.Tensor) and any(out is c for c in tail):
        kind, own = "self:%d" % next(k for k in written if clones[k] is out), []
    elif isinstance(out, torch.Tensor):
        kind, own = "tensor", [out]
    elif isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        kind, own = _sequence_kind(out), list(out)
    else:
        raise TypeError(f"writes its inputs and returns a {type(out).__name__}")
    if any(o is c for o in own for c in tail) or any(o is f for o in own for f in fakes):
        raise TypeError("returns one of its inputs itself")
    # the own outputs may view the inputs it does not write (or its clones: refused)
    ins, outs = _aliasing(own, fakes) if own else ([], [])
    if own and set(_aliasing(own, tail)[1]):
        raise TypeError("returns a view of an input it writes")
    return ("functional:" + kind, [_meta(o) for o in own + tail], ins, outs, written,
            Functional(fn, args, kwargs, written, kind))


def _aliasing(outs, fakes):
    """([input indices], [output indices]) of the tensors that share storage
    with one on the other side (views): capture refuses in-place updates of
    those, which it models by rebinding a single value."""
    def storage(t):
        return t.untyped_storage()._cdata

    ins = [storage(f) for f in fakes]
    outs_s = [storage(o) for o in outs]
    shared = set(ins) & set(outs_s)
    return [i for i, s in enumerate(ins) if s in shared], [k for k, s in enumerate(outs_s) if s in shared]


class FrozenArgDict(dict):
    """A dict of plain items read from an argument's attribute (YOSO's
    lsh_config), handed to a torch call inside a graph: its items as the
    frame read them, guarded on every call. A callee that changes it would
    change the real dict in eager, so every change raises; the graph then
    fails and the frame runs eagerly (hook.c)."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("wick: a dict read from an argument's attribute was passed to a torch call, "
                        "which tried to change it")

    __setitem__ = __delitem__ = __ior__ = _refuse
    update = pop = popitem = setdefault = clear = _refuse

    def __reduce__(self):
        return (dict, (dict(self),))


def copy_no_grad(target, value):
    """The write-back of an input that requires grad, which the frame wrote
    in place inside a no_grad block (as eager allows there): copied under
    no_grad too, so the tensor stays a leaf and its version counter moves."""
    with torch.no_grad():
        target.copy_(value)


def rebuild_model_output(cls, names, *values):
    """A transformers ModelOutput the captured frame made: the class called
    with the same fields, as the frame called it."""
    return cls(**dict(zip(names, values)))


def rebuild_object(cls, names, *values):
    """An instance of cls with these attributes, made without running
    __init__ again: how the transformed code returns an object that the
    captured frame created."""
    obj = object.__new__(cls)
    for name, value in zip(names, values):
        object.__setattr__(obj, name, value)
    return obj


def rebuild_module(cls, names, *values):
    """An nn.Module made inside a captured frame, rebuilt after the graph:
    object.__new__, the real nn.Module.__init__ (its bookkeeping and empty
    hook dicts), then the instance dict capture computed, the parameters,
    buffers and submodules merged into the dicts Module.__init__ made."""
    import torch

    obj = object.__new__(cls)
    torch.nn.Module.__init__(obj)
    own = obj.__dict__
    for name, value in zip(names, values):
        if name in ("_parameters", "_buffers", "_modules"):
            own[name].update(value)
        else:
            object.__setattr__(obj, name, value)
    return obj


def no_module_registration_hooks():
    """True while no global module, buffer or parameter registration hook
    exists: capture models the construction of a Module (which would call
    them) only then, and guards that it stays so."""
    from torch.nn.modules import module as m

    return not (m._global_module_registration_hooks or m._global_buffer_registration_hooks
                or m._global_parameter_registration_hooks)


_raising_checks = {}


def raises_check(fn):
    """A no-argument callable that answers True while fn() raises an
    Exception (a torch query that raises on this build, which captured code
    catches): the guard of a capture that relied on it raising. One per fn,
    so guards that share it are one check."""
    check = _raising_checks.get(fn)
    if check is None:
        def check():
            try:
                fn()
            except Exception:
                return True
            return False
        _raising_checks[fn] = check
    return check


_bound_queries = {}


def default_device_name():
    """torch.get_default_device() as an interned str: the guard of a factory
    call capture placed on the default device compares it by identity. The
    same answer as torch's own (a DeviceContext mode, then the global device
    context, then the CPU), without its lookups when neither is set."""
    if not torch._C._len_torch_function_stack() and \
            getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None) is None:
        return "cpu"
    return sys.intern(str(torch.get_default_device()))


def bound_query(fn, *args):
    """fn with plain constant arguments bound, one object per (fn, args):
    the guard of a torch query that capture answered for those arguments
    (torch.is_autocast_enabled("cpu"))."""
    key = (fn, args)
    q = _bound_queries.get(key)
    if q is None:
        q = _bound_queries[key] = functools.partial(fn, *args)
    return q


class UnderAutocast:
    """An extern called inside a `with torch.autocast(...)` block of the
    captured frame. The graph runs in the caller's autocast state, so the
    call sets the block's state (per device type: (device, enabled, dtype),
    or None where the block left it) around itself, as eager ran it inside
    the block. Equal wrappers hash equal: outputs() memoises on them."""

    __slots__ = ("fn", "states", "__name__", "__qualname__")

    def __init__(self, fn, states):
        self.fn = fn
        self.states = tuple(s for s in states if s is not None)
        self.__name__ = getattr(fn, "__name__", "extern")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)

    def __call__(self, *args, **kwargs):
        prev = [(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d, _, _ in self.states]
        try:
            for d, on, dt in self.states:
                torch.set_autocast_enabled(d, on)
                torch.set_autocast_dtype(d, dt)
            return self.fn(*args, **kwargs)
        finally:
            for d, on, dt in prev:
                torch.set_autocast_enabled(d, on)
                torch.set_autocast_dtype(d, dt)

    def __eq__(self, other):
        return type(other) is UnderAutocast and self.fn == other.fn and self.states == other.states

    def __hash__(self):
        return hash((UnderAutocast, self.fn, self.states))

    def __repr__(self):
        return f"UnderAutocast({self.fn!r}, {self.states!r})"


def autocast_save():
    """The autocast state a frame that re-enters autocast blocks after a
    graph break starts from (autocast_restore puts it back on an error
    raised before the resume function's own with blocks take over)."""
    nesting = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return (nesting, torch.is_autocast_cache_enabled(),
            tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")))


def autocast_restore(saved):
    nesting, cache, states = saved
    while True:
        now = torch.autocast_decrement_nesting()
        if now < nesting:
            torch.autocast_increment_nesting()
            break
        if now == nesting:
            break
    if nesting == 0:
        torch.clear_autocast_cache()
    for d, on, dt in states:
        torch.set_autocast_enabled(d, on)
        torch.set_autocast_dtype(d, dt)
    torch.set_autocast_cache_enabled(cache)


def make_function(code, globals, defaults, kwdefaults, closure):
    """A function the captured frame made before a graph break, made again
    after the graph (its closure's cells are the ones the resume function
    shares)."""
    fn = type(make_function)(code, globals, None, defaults, closure)
    if kwdefaults:
        fn.__kwdefaults__ = kwdefaults
    return fn


def sdpa_backend(tensors, device, dropout_p, is_causal, scale, enable_gqa):
    """The kernel eager's F.scaled_dot_product_attention would run on tensors
    of these (sizes, strides, dtype, requires_grad) on `device`
    (torch._fused_sdp_choice, asked of empty tensors there: on CUDA the
    answer depends on the GPU): "flash", "efficient", "cudnn" or "math".
    tensors: query, key, value, then the mask or None. Capture calls that
    kernel's aten op itself (csrc/capture/vals/structural.c)."""
    from torch.nn.attention import SDPBackend

    made = [None if t is None else
            torch.empty_strided(t[0], t[1], dtype=t[2], device=device).requires_grad_(t[3])
            for t in tensors]
    choice = torch._fused_sdp_choice(*made, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    return {SDPBackend.FLASH_ATTENTION.value: "flash", SDPBackend.EFFICIENT_ATTENTION.value: "efficient",
            SDPBackend.CUDNN_ATTENTION.value: "cudnn"}.get(choice, "math")


# logging.Logger's own methods whose call capture defers (csrc/capture/vals/logcall.c):
# they log a record and return None. Logger.exception (exc_info of the
# exception being handled then) and warn (a DeprecationWarning at its caller's
# caller) are not among them.
_LOGGER_METHODS = frozenset(f"Logger.{n}" for n in ("debug", "info", "warning", "error", "critical", "log"))
# transformers.utils.logging's additions to logging.Logger: warning_advice
# reads an environment variable and calls self.warning; the *_once ones are
# functools.lru_cache wrappers, so a message is logged once per process.
_TRANSFORMERS_ONCE = frozenset(("warning_once", "info_once"))
_TRANSFORMERS_PLAIN = frozenset(("warning_advice",))
# logging.LoggerAdapter's: process() adds its `extra`, then its logger logs;
# findCaller skips logging's own frames, so the record's location is still
# the call's.
_ADAPTER_METHODS = frozenset(f"LoggerAdapter.{n}" for n in ("debug", "info", "warning", "error", "critical", "log"))
# logging's module functions, on the root logger (basicConfig first when it
# has no handler, as eager does at the call); exception and warn are not.
_ROOT_FUNCTIONS = frozenset(("debug", "info", "warning", "error", "critical", "log"))
# What a logger answers about its own state: the answer is a constant of
# the graph, guarded by asking again on every call (log_query_guard).
_LOGGER_QUERIES = frozenset(f"{c}.{n}" for c in ("Logger", "LoggerAdapter")
                            for n in ("isEnabledFor", "getEffectiveLevel"))


def is_log_method(fn):
    """fn is one of the logging methods above as their modules define them
    (not a replacement patched in): calling it with a logger and plain
    arguments does nothing but log, and returns None."""
    once = type(fn) is functools._lru_cache_wrapper
    if once:
        fn = getattr(fn, "__wrapped__", None)
    if type(fn) is not type(is_log_method):
        return False
    logging = sys.modules.get("logging")
    if logging is not None and fn.__globals__ is vars(logging):
        return not once and (fn.__qualname__ in _LOGGER_METHODS or fn.__qualname__ in _ADAPTER_METHODS)
    tlog = sys.modules.get("transformers.utils.logging")
    if tlog is not None and fn.__globals__ is vars(tlog) and fn.__qualname__ == fn.__name__:
        return fn.__name__ in (_TRANSFORMERS_ONCE if once else _TRANSFORMERS_PLAIN)
    return False


def log_call_kind(fn):
    """How capture models a call of fn (csrc/capture/vals/logcall.c): 1 a
    logging method (is_log_method), 2 one of logging's module functions on
    the root logger, 3 a logger's isEnabledFor or getEffectiveLevel, 4
    warnings.warn, 0 none."""
    if is_log_method(fn):
        return 1
    warnings = sys.modules.get("warnings")
    if warnings is not None and fn is getattr(warnings, "warn", None):
        return 4
    logging = sys.modules.get("logging")
    if logging is None or type(fn) is not type(is_log_method) or fn.__globals__ is not vars(logging):
        return 0
    if fn.__qualname__ in _ROOT_FUNCTIONS and getattr(logging, fn.__name__, None) is fn:
        return 2
    return 3 if fn.__qualname__ in _LOGGER_QUERIES else 0


def log_query_guard(query, logger, args, answer):
    """A check, made on every call of the compiled frame, that query(logger,
    *args) still gives `answer`: the logger's level, its parents', logging's
    disable() and the logger's disabled flag are all read again."""
    def same_answer():
        return query(logger, *args) == answer
    return same_answer


def _warn_action(text, category, module, lineno):
    # the action warnings' filters give a warning of this text and category
    # raised from that module and line, as warnings.warn looks it up
    import warnings

    for action, msg, cat, mod, ln in warnings.filters:
        if ((msg is None or msg.match(text)) and issubclass(category, cat) and (mod is None or mod.match(module))
                and (ln == 0 or ln == lineno)):
            return action
    return warnings.defaultaction


def is_logging_internal(filename):
    """A frame of this file is one logging's findCaller steps over (logging's
    own source, importlib's bootstrap): a deferred record is made at the
    nearest capture frame that is not one (csrc/capture/vals/logcall.c)."""
    import os

    logging = sys.modules.get("logging")
    name = os.path.normcase(filename)
    return (logging is not None and name == getattr(logging, "_srcfile", None)) or (
        "importlib" in name and "_bootstrap" in name)


def warn_action_guard(text, category, globals, lineno):
    """A check, made on every call of the compiled frame, that a deferred
    warnings.warn(text, category) at lineno of the module whose globals
    these are is not turned into an exception by the filters then: raised
    after the graph, it would come later than eager's, so capture defers
    the call only while this holds (csrc/capture/vals/logcall.c)."""
    module = globals.get("__name__", "<string>")

    def not_an_error():
        return _warn_action(text, category, module, lineno) != "error"
    return not_an_error


_log_sites = {}


def log_call_site(filename, line, name, qualname, globals=None):
    """A function whose frame stands where the captured frame made a logging
    call (filename, line, the function's name): the transformed code makes the
    deferred call through it, site(fn, args, kwargs_pairs), so the record's
    pathname, lineno and funcName (logging's findCaller) are eager's, and so is
    a traceback through it. With `globals` (warnings.warn's sites) the site
    runs in them (the function keeps them, so their id in the key stays
    theirs)."""
    key = (filename, line, name, qualname, id(globals))
    site = _log_sites.get(key)
    if site is None:
        import builtins
        import types

        src = "\n" * max(line - 1, 0) + "def site(fn, args, kwargs): return fn(*args, **dict(kwargs))\n"
        module = compile(src, filename, "exec", dont_inherit=True)
        code = next(c for c in module.co_consts if isinstance(c, types.CodeType))
        code = code.replace(co_name=name, co_qualname=qualname)
        # warnings.warn reads the calling frame's globals: its module's
        # __name__ (the filters' module) and __warningregistry__ (once and
        # default), so a warning's site runs in the frame's own
        site = types.FunctionType(code, {"__builtins__": builtins} if globals is None else globals)
        _log_sites[key] = site
    return site


def preserved_strides(sizes, strides):
    """The strides eager's torch.empty_like (so zeros_like, ones_like,
    full_like) gives a tensor of these sizes and strides in preserve_format:
    its own for a dense one, else dense strides in its dims' order. Asked on
    a meta tensor, so the answer is torch's own rule (capture lays out
    *_like of a non-contiguous tensor with it: structural.c like_node)."""
    made = torch.empty_strided(tuple(sizes), tuple(strides), device="meta")
    return tuple(torch.empty_like(made).stride())


_eager_strides_memo = {}


def _pointwise_result(operands):
    # torch's TensorIterator lays out a pointwise result by its operands'
    # strides (all of them, 0-d ones included: those keep its fast path
    # off); neg, add and addcmul are TensorIterator ops of one, two and
    # three operands, in the order the node reads them
    fn = {1: torch.neg, 2: torch.add, 3: torch.addcmul}[len(operands)]
    return fn(*operands)


def _cat_result(operands, extra):
    # torch.cat lays its result out in the memory format all its inputs
    # suggest (channels-last ones), else contiguously
    return torch.cat(operands, extra[0])


def _pad_result(operands, extra):
    # capture's PAD widths are (lo, hi) per dim in dim order; constant_pad_nd
    # lists them from the last dim backwards, and lays its result out in the
    # format its input suggests (a crop alone clones the cropped view)
    widths = []
    for d in reversed(range(len(extra) // 2)):
        widths += [extra[2 * d], extra[2 * d + 1]]
    return torch.constant_pad_nd(operands[0], widths, 0.0)


def _index_result(operands, extra):
    # x[..., i, ...] with index tensors (capture's INDEX: operands[1:] index
    # the dims extra[1:]): torch's index TensorIterator follows the
    # source's and the indices' strides
    key = [slice(None)] * operands[0].dim()
    for index, dim in zip(operands[1:], extra[1:]):
        key[dim] = index
    return operands[0][tuple(key)]


# each rule: (operand tensors, the call's extra ints) -> eager's result
_EAGER_LAYOUT_RULES = {
    "pointwise": lambda operands, extra: _pointwise_result(operands),
    # Tensor.to(dtype) (_to_copy in preserve_format): a dense input's
    # strides, else the memory format torch suggests for it
    "convert": lambda operands, extra: operands[0].to(torch.float64),
    # clone(memory_format=preserve_format): empty_like's strides
    "clone": lambda operands, extra: operands[0].clone(),
    "cat": _cat_result,
    "pad": _pad_result,
    "index": _index_result,
}


def eager_strides(kind, operands, device="meta", extra=()):
    """The strides eager gives the result of a `kind` call ("pointwise",
    "convert", "clone", "cat", "pad", "index") on operands given as (sizes, strides)
    pairs (a wrapped Python number as ((), ())); `extra`: the ints of the
    call besides them (cat's dim, pad's (lo, hi) per dim, the indexed dims).
    Asked on float32 tensors (int64 indices) of
    `device` (meta; "cpu" for an empty result, whose strides the CPU kernels
    choose otherwise than meta ones), once per distinct signature: the
    layout rules of these calls do not depend on the dtypes (capture lays
    out its native results with the answer: views.c cap_eager_laid)."""
    key = (kind, operands, device, extra)
    got = _eager_strides_memo.get(key)
    if got is None:
        made = [
            torch.empty_strided(sizes, strides, device=device,
                                dtype=torch.int64 if kind == "index" and i > 0 else torch.float32)
            for i, (sizes, strides) in enumerate(operands)
        ]
        got = tuple(_EAGER_LAYOUT_RULES[kind](made, extra).stride())
        _eager_strides_memo[key] = got
    return got
