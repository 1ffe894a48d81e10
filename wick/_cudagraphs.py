"""mode="reduce-overhead": a compiled graph recorded once as a CUDA graph and
replayed, so a call costs one graph launch instead of one launch per kernel
plus wick's per-call work.

Semantics follow PyTorch's own reduce-overhead mode where it matters to a
program: inputs whose storage stays put between calls (parameters, buffers)
are used in place; every other input is copied into a static buffer before
each replay. Outputs live in the graph's static memory, handed out as new
tensor objects aliasing it; unlike PyTorch's (which makes reading an output
of an earlier replay an error), a caller may keep them across calls: before
the next replay overwrites that memory, an output the caller still holds is
moved to a copy of its own (copy-on-replay: no copy when outputs are dropped,
as in a loop that consumes them), and a call during which the caller holds a
view into it runs without the graph, so no value a program can see ever
changes under it. The first call runs
the compiled graph normally (Triton compiles then); the second (a
backward's third) waits for the kernels' autotuning candidates to compile,
runs once more uncaptured (tuning them), and records. Whatever cannot be recorded (inputs not on CUDA, a capture error such
as an extern that synchronises) runs the compiled graph as it is, with the
reason recorded in wick's fallback reasons. An input taken in place (its
address was the same on the last uncaptured call and the recording one) that
later arrives elsewhere makes the graph be recorded again, taking it in place
at its new address the first time and copying it from the second on (at
most MAX_RERECORDS recordings a runner). A call whose
in-place-written inputs moved, whose inputs changed shape, or during which a
view of an output is held runs without the graph; `skipped` counts those
calls per runner and cause.
"""
import collections
import sys

reasons = []
# per runner name: graphs recorded, and calls served by a replay
recorded = collections.Counter()
replayed = collections.Counter()
# per (runner name, cause): calls that ran without the graph after it was recorded
skipped = collections.Counter()
MAX_RERECORDS = 4


class CudaGraphRunner:
    DEVICE = "cuda"  # a test double records "graphs" of CPU tensors (tests/autodiff/test_autodiff_cudagraphs.py)

    def __init__(self, fn, boxed=False, name="graph", mutated=(), warmup=1, fresh=()):
        self.fn = fn
        self.boxed = boxed
        self.name = name
        self.mutated = tuple(mutated)  # positions of inputs fn writes in place
        # uncaptured calls before recording; the inputs' addresses in the
        # last of them tell which stay put (see wrap)
        self.warmup = warmup
        self.calls = 0
        self.graph = None
        self.failed = None
        self.warm_ptrs = None
        # per input: ("static", ptr, meta tensor of its shape, strides and dtype)
        # / ("copy", buffer) / ("const", value)
        self.slots = None
        self.static_outputs = None
        self.handed = []           # per output: (alias handed out, the static tensor, baseline use counts)
        self.replays = 0
        # input positions always copied: fresh tensors each call (the caller
        # says so, or one moved after it had stayed put)
        self.copied = set(fresh)
        self.moved_once = set()
        self.rerecords = 0
        self.misfit = None         # (cause, values): why the last call's inputs did not fit the graph

    def _run(self, args):
        return self.fn(list(args)) if self.boxed else self.fn(*args)

    def _fail(self, why):
        self.failed = why
        reason = f"reduce-overhead ({self.name}): {why}; running without a CUDA graph"
        reasons.append(reason)
        try:
            from . import backends

            backends.fallback_reasons.append(reason)
        except Exception:  # noqa: BLE001 - bookkeeping only
            pass

    def __call__(self, *args):
        if self.boxed:
            (args,) = args
        import torch

        if self.failed is not None:
            return self._run(args)
        if self.graph is None:
            devices = {a.device.type for a in args if isinstance(a, torch.Tensor)}
            if self.DEVICE not in devices:
                self.failed = "CPU"  # CUDA graphs do not apply: nothing to record
                return self._run(args)
            if devices != {self.DEVICE}:
                self._fail("inputs are not all CUDA tensors")
                return self._run(args)
            if self.calls < self.warmup:
                out = self._run(args)  # a call that raises (inputs the graph refuses) is no warm-up
                self.calls += 1
                self.warm_ptrs = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
                return out
            self.calls += 1
            if not self._try_record(args):
                return self._run(args)
        moved = self._bind(args)
        if moved and not any(k in self.mutated for k in moved):
            if not self._rerecord(args, moved):
                return self._run(args)
            moved = self._bind(args)
        if moved is None:
            return self._skip(args, self.misfit[0])
        if moved:
            return self._skip(args, "an input written in place moved")
        if not self._release_outputs():
            return self._skip(args, "a view of an output of the previous replay is held")
        self.graph.replay()
        self.replays += 1
        replayed[self.name] += 1
        return self._hand_out()

    def _skip(self, args, cause):
        skipped[self.name, cause] += 1
        return self._run(args)

    def _rerecord(self, args, moved):
        """Inputs once at one address arrived elsewhere: a fresh copy the
        caller makes each call that the allocator happened to place where the
        last one was, or the saved values of a forward whose graph was
        recorded again. Records again. False when that was done too often
        (reason recorded)."""
        if self.rerecords >= MAX_RERECORDS:
            self._fail(f"inputs {sorted(self.copied | set(moved))} keep moving after {self.rerecords} recordings")
            return False
        # outputs handed out by the old graph keep its memory alive; the new
        # graph records into memory of its own, so they need no move
        self.handed = []
        # an input that moves for the first time is taken in place at its new
        # address (the saved values of a forward recorded again stay put
        # there); one that moves again is copied from then on
        for k in moved:
            if k in self.moved_once:
                self.copied.add(k)
            else:
                self.moved_once.add(k)
                self.warm_ptrs[k] = args[k].data_ptr()
        self.rerecords += 1
        return self._try_record(args)

    def _try_record(self, args):
        try:
            self._record(args)
        except Exception as exc:  # noqa: BLE001 - an unrecordable graph still runs
            self.graph = None
            self._fail(f"capture failed: {type(exc).__name__}: {exc}")
            return False
        return True

    @staticmethod
    def _uses(t):
        import torch

        return torch._C._storage_Use_Count(t.untyped_storage()._cdata)

    def _hand_out(self):
        import torch

        out = self.static_outputs
        if not hasattr(torch._C, "_storage_Use_Count"):  # no way to tell what the caller holds: copy
            if isinstance(out, (list, tuple)):
                return type(out)(o.clone() if isinstance(o, torch.Tensor) else o for o in out)
            return out.clone() if isinstance(out, torch.Tensor) else out
        items = list(out) if isinstance(out, (list, tuple)) else [out]
        handed, result = [], []
        for o in items:
            if isinstance(o, torch.Tensor):
                alias = o.detach()
                handed.append((alias, o))
                result.append(alias)
            else:
                result.append(o)
        self.handed = [(a, o, self._uses(o), _impl_uses(a)) for a, o in handed]
        return type(out)(result) if isinstance(out, (list, tuple)) else result[0]

    def _release_outputs(self):
        """Before a replay: outputs the caller still holds get storage of
        their own; False when some output memory is shared in a way that
        cannot be moved (a view the caller made), so this call must not
        replay."""
        import sys

        moves = []
        for alias, static, base, impl_base in self.handed:
            # held from Python (beyond this list, the loop variable and
            # getrefcount's argument), or from C++: autograd's saved values of
            # a forward hold the very tensor, which not every torch version
            # shows in the Python object's count
            held = sys.getrefcount(alias) > 3 or _impl_uses(alias) > impl_base
            extra = self._uses(static) - base  # tensors sharing the storage beyond those at hand-out
            if extra > 0:
                return False
            if held:
                moves.append(alias)
        for alias in moves:
            alias.data = _copy_keeping_strides(alias)
        self.handed = []
        return True

    def _record(self, args):
        slots, inputs = self._slots(args)
        self._warm_up(args, inputs)
        self.graph, self.static_outputs = self._capture(inputs)
        self.slots = slots
        recorded[self.name] += 1

    def _slots(self, args):
        """Per input: taken in place (the same address as on the last
        warm-up call), copied into a buffer of the graph's, or a constant."""
        import torch

        slots, inputs = [], []
        for k, (a, p) in enumerate(zip(args, self.warm_ptrs)):
            if not isinstance(a, torch.Tensor):
                slots.append(("const", a))
                inputs.append(a)
            elif a.data_ptr() == p and k not in self.copied:
                # no reference to a itself: one would keep a saved value of
                # the forward's (the backward's inputs) alive as a copy once
                # the forward moves it, and count as a holder of its memory
                meta = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
                slots.append(("static", a.data_ptr(), meta))
                inputs.append(a)
            else:
                buf = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
                buf.copy_(a)
                slots.append(("copy", buf))
                inputs.append(buf)
        moved = [k for k in self.mutated if slots[k][0] != "static"]
        if moved:
            # the graph would write its own copy, not the caller's tensor
            raise RuntimeError(f"inputs {moved}, written in place, are not at the same address on every call")
        return slots, inputs

    def _warm_up(self, args, inputs):
        """One uncaptured run on a side stream, as capture wants. It
        executes, the capture does not: inputs written in place get their
        values back after it, so a call updates them once."""
        import torch

        before = [(args[k], args[k].clone()) for k in self.mutated]
        side = torch.cuda.Stream(device=inputs[0].device if isinstance(inputs[0], torch.Tensor) else None)
        side.wait_stream(torch.cuda.current_stream())
        triton = sys.modules.get("wick._triton")
        if triton is not None:
            # the kernels' autotuning candidates compiled, so that the run
            # below (not captured) tunes them and the graph records the tuned
            # configs: nothing is tuned while a stream is captured
            triton.wait_background()
        with torch.cuda.stream(side):
            self._run(inputs)
        torch.cuda.current_stream().wait_stream(side)
        for t, value in before:
            t.copy_(value)

    def _capture(self, inputs):
        """(the recorded graph, its static outputs)"""
        import torch

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self._run(inputs)
        return graph, out

    def _bind(self, args):
        """Copies args into the graph's input buffers. Returns [] when the
        graph can replay, the positions of inputs taken in place that moved,
        or None when the graph does not fit these args at all."""
        import torch

        self.misfit = None
        if len(args) != len(self.slots):
            self.misfit = (f"{len(args)} inputs, not {len(self.slots)}", "")
            return None
        moved = []
        for k, (a, s) in enumerate(zip(args, self.slots)):
            if s[0] == "const":
                if isinstance(a, torch.Tensor) or a != s[1]:
                    self.misfit = (f"input {k} is not the constant it was", f"{s[1]!r} -> {a!r}")
                    return None
                continue
            if not isinstance(a, torch.Tensor):
                self.misfit = (f"input {k} is not a tensor", type(a).__name__)
                return None
            want = s[2] if s[0] == "static" else s[1]
            if a.shape != want.shape or a.stride() != want.stride() or a.dtype != want.dtype:
                for what, was, now in (("shape", tuple(want.shape), tuple(a.shape)),
                                       ("strides", want.stride(), a.stride()), ("dtype", want.dtype, a.dtype)):
                    if was != now:
                        self.misfit = (f"input {k} changed {what}", f"{was} -> {now}")
                        return None
            if s[0] == "static" and a.data_ptr() != s[1]:
                moved.append(k)
        if moved:
            return moved
        for a, s in zip(args, self.slots):
            if s[0] == "copy":
                s[1].copy_(a)
        return moved


def _copy_keeping_strides(t):
    """A copy of t in storage of its own with t's very strides: clone()
    makes an expanded (stride 0) or otherwise non-dense tensor contiguous,
    and a graph that takes it later (the backward reading a saved value)
    would then see other strides than it was recorded with."""
    if t.numel() == 0:
        return t.clone()
    return storage_window(t).clone().as_strided(t.shape, t.stride(), 0)


def storage_window(t):
    """The 1-D run of t's storage from its first element to its last, every
    element t reads once (t non-empty, strides not negative)."""
    span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    return t.as_strided((span,), (1,), t.storage_offset())


def _impl_uses(t):
    """References to the tensor itself (one per Python object of it, and
    every C++ holder), where torch tells."""
    return t._use_count() if hasattr(t, "_use_count") else 1


def wrap(compiled, name="graph", mutated=(), warmup=1, fresh=()):
    """A callable that replays `compiled` (a wick CompiledGraph) as a CUDA
    graph. mutated: positions of the inputs it writes in place; fresh:
    positions of inputs that are new tensors every call (always copied in,
    even where two calls' tensors share an address by chance). warmup:
    uncaptured calls before recording; a backward takes 2, since its
    first call reads the saved values of a forward that ran uncaptured and
    its second those in the forward's graph memory, where they stay."""
    return CudaGraphRunner(compiled, boxed=False, name=name, mutated=mutated, warmup=warmup, fresh=fresh)


def wrap_boxed(fn, name="graph", warmup=1, fresh=()):
    """The same for AOTAutograd's boxed calling convention (fn(list_of_args))."""
    runner = CudaGraphRunner(fn, boxed=True, name=name, warmup=warmup, fresh=fresh)

    def boxed(args):
        return runner(args)

    boxed._boxed_call = True
    boxed.runner = runner
    return boxed


def _log(msg):
    print(f"[wick:perf] {msg}", file=sys.stderr)
