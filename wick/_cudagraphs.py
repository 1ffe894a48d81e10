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
    def __init__(self, fn, boxed=False, name="graph", mutated=(), warmup=1):
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
        self.slots = None          # per input: ("static", ptr) / ("copy", buffer) / ("const", value)
        self.static_outputs = None
        self.handed = []           # per output: (alias handed out, the static tensor, baseline use counts)
        self.replays = 0
        # input positions always copied: fresh tensors each call (the caller
        # says so, or one moved after it had stayed put)
        self.copied = set()
        self.moved_once = set()
        self.rerecords = 0

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
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if not any(t.device.type == "cuda" for t in tensors):
                self.failed = "CPU"  # CUDA graphs do not apply: nothing to record
                return self._run(args)
            if any(t.device.type != "cuda" for t in tensors):
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
            return self._skip(args, "inputs changed shape, strides, dtype or kind")
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
            alias.data = alias.clone()
        self.handed = []
        return True

    def _record(self, args):
        import torch

        slots, inputs = [], []
        for k, (a, p) in enumerate(zip(args, self.warm_ptrs)):
            if not isinstance(a, torch.Tensor):
                slots.append(("const", a))
                inputs.append(a)
            elif a.data_ptr() == p and k not in self.copied:
                slots.append(("static", a.data_ptr(), a))
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
        # the warm-up run below executes, the capture does not: inputs written
        # in place get their values back after it, so a call updates them once
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
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self._run(inputs)
        self.graph, self.slots, self.static_outputs = graph, slots, out
        recorded[self.name] += 1

    def _bind(self, args):
        """Copies args into the graph's input buffers. Returns [] when the
        graph can replay, the positions of inputs taken in place that moved,
        or None when the graph does not fit these args at all."""
        import torch

        if len(args) != len(self.slots):
            return None
        moved = []
        for k, (a, s) in enumerate(zip(args, self.slots)):
            if s[0] == "const":
                if isinstance(a, torch.Tensor) or a != s[1]:
                    return None
            elif not isinstance(a, torch.Tensor):
                return None
            elif s[0] == "static":
                if a.shape != s[2].shape or a.stride() != s[2].stride() or a.dtype != s[2].dtype:
                    return None
                if a.data_ptr() != s[1]:
                    moved.append(k)
            elif a.shape != s[1].shape or a.stride() != s[1].stride() or a.dtype != s[1].dtype:
                return None
        if moved:
            return moved
        for a, s in zip(args, self.slots):
            if s[0] == "copy":
                s[1].copy_(a)
        return moved


def _impl_uses(t):
    """References to the tensor itself (one per Python object of it, and
    every C++ holder), where torch tells."""
    return t._use_count() if hasattr(t, "_use_count") else 1


def wrap(compiled, name="graph", mutated=(), warmup=1):
    """A callable that replays `compiled` (a wick CompiledGraph) as a CUDA
    graph. mutated: positions of the inputs it writes in place. warmup:
    uncaptured calls before recording; a backward takes 2, since its
    first call reads the saved values of a forward that ran uncaptured and
    its second those in the forward's graph memory, where they stay."""
    return CudaGraphRunner(compiled, boxed=False, name=name, mutated=mutated, warmup=warmup)


def wrap_boxed(fn, name="graph", warmup=1):
    """The same for AOTAutograd's boxed calling convention (fn(list_of_args))."""
    runner = CudaGraphRunner(fn, boxed=True, name=name, warmup=warmup)

    def boxed(args):
        return runner(args)

    boxed._boxed_call = True
    boxed.runner = runner
    return boxed


def _log(msg):
    print(f"[wick:perf] {msg}", file=sys.stderr)
