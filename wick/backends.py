"""The two pairings of wick's halves with PyTorch's.

* ``wick_backend`` is ``torch.compile(model, backend="wick")``: PyTorch's own
  capture (TorchDynamo) hands over an FX graph, which is imported into a wick
  graph, compiled by wick's C pipeline and run by wick's runtime. Anything the
  importer or the compiler cannot handle runs eagerly (``gm.forward``) and the
  reason is appended to ``fallback_reasons``.
* ``compile_graph_with`` goes the other way: a wick graph (from wick's own
  capture, or built by hand) is exported to an FX GraphModule of torch calls
  and handed to any torch.compile backend ("inductor", "eager", a callable).

torch is imported inside functions only: ``import wick`` must not need it.
"""
from __future__ import annotations

import os
import sys

from . import _C

__all__ = ["wick_backend", "register", "compile_graph_with", "fallback_reasons"]

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
        operator.and_: "BITWISE_AND", operator.or_: "BITWISE_OR", operator.xor: "BITWISE_XOR",
        operator.invert: "BITWISE_NOT", operator.floordiv: "FLOOR_DIVIDE", operator.mod: "REMAINDER",
    }
    for fn, name in ops.items():
        if name in by_name:
            by_fn[fn] = by_name[name]
    _tables = (by_fn, by_method, by_name)
    return _tables


# Tensor methods that are conversions: x.float() is CONVERT(x, float32).
_CONVERT_METHODS = {
    "float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16",
    "long": "int64", "int": "int32", "short": "int16", "char": "int8", "byte": "uint8", "bool": "bool",
}


# ---- FX -> wick -----------------------------------------------------------

def _target_name(node):
    t = node.target
    if isinstance(t, str):
        return f"Tensor.{t}" if node.op == "call_method" else t
    mod = getattr(t, "__module__", None) or ""
    return f"{mod}.{getattr(t, '__name__', repr(t))}".lstrip(".")


def _bind(row, args, kwargs, what):
    positional, kwonly, defaults = row["params"]
    bound = dict(defaults)
    if len(args) > len(positional):
        raise _Unsupported(f"{what}: too many positional arguments")
    for name, value in zip(positional, args):
        bound[name] = value
    for name, value in kwargs.items():
        if name in ("out",):
            raise _Unsupported(f"{what}: out= is not supported")
        if name == "inplace" and value is False:
            continue
        if name not in positional and name not in kwonly:
            raise _Unsupported(f"{what}: keyword argument {name}= is not supported")
        bound[name] = value
    for name in positional[: row["arity"]]:
        if name not in bound:
            raise _Unsupported(f"{what}: missing argument {name}")
    return bound


class _Importer:
    def __init__(self, torch, gm, example_inputs):
        self.torch = torch
        self.gm = gm
        self.example_inputs = example_inputs
        self.g = _C.Graph()
        self.env = {}  # fx node -> wick value id
        self.by_fn, self.by_method, self.by_name = _op_tables()

    def operand(self, value, what):
        """An FX argument as a wick value id: a node's value or a Python scalar."""
        import torch.fx

        if isinstance(value, torch.fx.Node):
            if value not in self.env:
                raise _Unsupported(f"{what}: operand {value.name} is not a tensor wick tracks")
            return self.env[value]
        if isinstance(value, (bool, int, float)):
            return self.g.scalar(value)
        raise _Unsupported(f"{what}: operand of type {type(value).__name__} is not supported")

    def dtype_of(self, vid):
        return self.g.value(vid)["dtype"]

    def run(self):
        import torch.fx

        torch = self.torch
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(self.example_inputs):
            raise _Unsupported("example inputs do not match the graph's placeholders")
        for node, example in zip(placeholders, self.example_inputs):
            if not isinstance(example, torch.Tensor):
                raise _Unsupported(f"input {node.name} is a {type(example).__name__}, not a tensor "
                                   "(dynamic shapes are not supported yet)")
            if example.device.type != "cpu":
                raise _Unsupported(f"input {node.name} is on {example.device}: wick has no GPU backend yet")
            if example.requires_grad and torch.is_grad_enabled():
                raise _Unsupported(f"input {node.name} requires grad: training needs autodiff, "
                                   "which wick does not have yet")
            meta = node.meta.get("example_value", node.meta.get("val"))
            if isinstance(meta, torch.Tensor) and not all(
                    isinstance(d, int) for d in (*meta.shape, *meta.stride())):
                raise _Unsupported(f"input {node.name} has dynamic sizes (not supported yet)")
            if example.layout != torch.strided:
                raise _Unsupported(f"input {node.name} has layout {example.layout}")
            if type(example) is not torch.Tensor and not isinstance(example, torch.nn.Parameter):
                raise _Unsupported(f"input {node.name} is a tensor subclass {type(example).__name__}")
            try:
                self.env[node] = self.g.input_like(example, source=str(node.target))
            except ValueError as exc:
                raise _Unsupported(str(exc)) from None
        output = None
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                output = node.args[0]
                continue
            if node.op not in ("call_function", "call_method"):
                raise _Unsupported(f"FX node {node.op} {node.target}")
            self.env[node] = self.call(node)
        return self.outputs(output)

    def call(self, node):
        name = _target_name(node)
        args, kwargs = list(node.args), dict(node.kwargs)
        if node.op == "call_method":
            row = self.by_method.get(node.target)
            if node.target in _CONVERT_METHODS and not args[1:] and not kwargs:
                return self.convert(args[0], _CONVERT_METHODS[node.target], name)
        else:
            try:
                row = self.by_fn.get(node.target)
            except TypeError:  # unhashable target
                row = None
        if row is None:
            raise _Unsupported(f"unsupported op {name}")
        op = row["name"]
        if op == "CONVERT":
            return self.to(args, kwargs, name)
        if op == "GELU" and kwargs.get("approximate", "none") == "tanh":
            row, op = self.by_name["GELU_TANH"], "GELU_TANH"
            kwargs.pop("approximate")
        elif op == "GELU" and kwargs.get("approximate") == "none":
            kwargs.pop("approximate")
        if op in ("VAR", "STD") and "unbiased" in kwargs:
            unbiased = kwargs.pop("unbiased")
            if not isinstance(unbiased, bool) or "correction" in kwargs:
                raise _Unsupported(f"{name}: unbiased of type {type(unbiased).__name__}")
            kwargs["correction"] = 1 if unbiased else 0
        bound = _bind(row, args, kwargs, name)
        positional, kwonly, defaults = row["params"]
        # parameters past the tensor operands that no rule below reads must
        # keep their defaults: a dropped attribute would compute a wrong result
        handled = {"alpha"} if op in ("ADD", "SUB") else set()
        if row["kind"] == "reduction" or "dim" in positional[1:2]:
            handled |= {"dim", "keepdim", "dtype"}
        if op in ("VAR", "STD"):
            handled.add("correction")
        for pname in positional[row["arity"]:] + kwonly:
            if pname in handled or pname not in bound:
                continue
            if pname not in defaults or bound[pname] != defaults[pname] or \
                    type(bound[pname]) is not type(defaults[pname]):
                raise _Unsupported(f"{name}: argument {pname}={bound[pname]!r} is not supported")
        tensor_args = [bound[p] for p in positional[: row["arity"]]]
        import torch.fx

        if not any(isinstance(a, torch.fx.Node) for a in tensor_args):
            raise _Unsupported(f"{name} without tensor operands")
        try:
            inputs = [self.operand(a, name) for a in tensor_args]
            if row["kind"] == "reduction" or "dim" in positional[1:2]:
                return self.reduction(row, bound, inputs[0], name)
            if op in ("ADD", "SUB") and bound.get("alpha", 1) != 1:
                alpha = bound["alpha"]
                if not isinstance(alpha, (bool, int, float)):
                    raise _Unsupported(f"{name}: alpha of type {type(alpha).__name__}")
                floating = any(self.dtype_of(i).startswith(("float", "bfloat")) for i in inputs)
                if isinstance(alpha, float) and not floating:
                    raise _Unsupported(f"{name}: float alpha with integral inputs")
                # torch scales `other` in the result dtype of (input, other); the
                # plain op gives that dtype and torch's errors, and is left dead
                result = self.dtype_of(self.g.op(op, inputs))
                scaled = self.g.op("MUL", [inputs[1], self.g.scalar(alpha)])
                if self.dtype_of(scaled) != result:
                    scaled = self.g.op("CONVERT", [scaled], dtype=result)
                inputs[1] = scaled
            return self.g.op(op, inputs)
        except ValueError as exc:
            raise _Unsupported(f"{name}: {exc}") from None

    def reduction(self, row, bound, vid, name):
        dims = bound.get("dim")
        if isinstance(dims, bool) and row["name"] in ("VAR", "STD") and bound.get("correction", 1) == 1:
            bound["correction"], dims = int(dims), None  # var(x, unbiased)
        elif isinstance(dims, bool):
            raise _Unsupported(f"{name}: dim of type bool")
        if isinstance(dims, list):
            dims = tuple(dims)
        if dims is not None and not isinstance(dims, (int, tuple)):
            raise _Unsupported(f"{name}: dim of type {type(dims).__name__}")
        if dims == ():
            dims = None  # torch reduces over every dim for an empty dim list
        keepdim = bound.get("keepdim", False)
        if not isinstance(keepdim, bool):
            raise _Unsupported(f"{name}: keepdim must be a bool")
        dtype = bound.get("dtype")
        if dtype is not None and not isinstance(dtype, self.torch.dtype):
            raise _Unsupported(f"{name}: dtype of type {type(dtype).__name__}")
        extra = {}
        if row["name"] in ("VAR", "STD"):
            correction = bound.get("correction", 1)
            if correction is None:
                correction = 1
            if isinstance(correction, bool) or not isinstance(correction, (int, float)):
                raise _Unsupported(f"{name}: correction of type {type(correction).__name__}")
            extra["correction"] = float(correction)
        return self.g.op(row["name"], [vid], dims=dims, keepdim=keepdim, dtype=dtype, **extra)

    def convert(self, src, dtype_name, name):
        vid = self.operand(src, name)
        if self.dtype_of(vid) == dtype_name:
            return vid  # torch returns the tensor itself
        try:
            return self.g.op("CONVERT", [vid], dtype=dtype_name)
        except ValueError as exc:
            raise _Unsupported(f"{name}: {exc}") from None

    def to(self, args, kwargs, name):
        torch = self.torch
        src, rest = args[0], args[1:]
        dtype = kwargs.pop("dtype", None)
        for flag in ("non_blocking", "copy"):
            if kwargs.pop(flag, False):
                raise _Unsupported(f"{name}: {flag}=True")
        if kwargs:
            raise _Unsupported(f"{name}: keyword arguments {sorted(kwargs)}")
        if len(rest) == 1 and isinstance(rest[0], torch.dtype) and dtype is None:
            dtype = rest[0]
        elif rest:
            raise _Unsupported(f"{name}: only .to(dtype) is supported")
        if not isinstance(dtype, torch.dtype):
            raise _Unsupported(f"{name}: only .to(dtype) is supported")
        return self.convert(src, str(dtype).replace("torch.", ""), name)

    def outputs(self, output):
        import torch.fx

        if isinstance(output, torch.fx.Node):
            items, kind = [output], "single"
        elif isinstance(output, (tuple, list)):
            items, kind = list(output), type(output)
        else:
            raise _Unsupported(f"graph output of type {type(output).__name__}")
        for item in items:
            if not isinstance(item, torch.fx.Node) or item not in self.env:
                raise _Unsupported(f"graph output {item!r} is not a tensor")
            self.g.output(self.env[item])
        return kind


def wick_backend(gm, example_inputs):
    """torch.compile(model, backend="wick"): compile an FX graph with wick.

    Returns a callable with gm.forward's calling convention, or gm.forward itself
    (eager) when the graph has something wick does not compile yet."""
    import torch

    try:
        importer = _Importer(torch, gm, list(example_inputs))
        kind = importer.run()
        compiled = importer.g.compile()
    except _Unsupported as exc:
        return _fallback(gm, str(exc))
    except _C.CompileError as exc:
        return _fallback(gm, f"wick could not compile the graph: {exc}")
    if kind is tuple:
        return compiled  # already returns a tuple: no Python between dynamo and the kernels
    if kind is list:
        return lambda *args: list(compiled(*args))
    return lambda *args: compiled(*args)[0]


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


def to_fx(graph):
    """Exports a wick Graph to a torch.fx.GraphModule of torch calls whose
    forward takes the graph inputs positionally and returns a tuple of outputs."""
    import operator

    import torch
    import torch.fx

    _, _, by_name = _op_tables()
    fx = torch.fx.Graph()
    env = {}  # wick value id -> fx node, or a Python scalar for SCALAR values
    for i, inp in enumerate(graph.inputs()):
        env[inp["id"]] = fx.placeholder(f"in{i}")
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
        row = by_name[op]
        if op == "SCALAR":
            env[out] = nd["value"]
            continue
        if op == "CONVERT":
            env[out] = fx.call_method("to", (as_tensor(ins[0]), getattr(torch, nd["dtype"])))
            continue
        if row["kind"] == "reduction":
            fn = _torch_function(torch, row)
            kwargs = {"keepdim": nd["keepdim"]}
            dims = nd["dims"]
            if op == "AMAX":
                kwargs["dim"] = tuple(dims or ())
            else:
                kwargs["dim"] = tuple(dims) if dims else None
                if nd["dtype"] is not None:
                    kwargs["dtype"] = getattr(torch, nd["dtype"])
            env[out] = fx.call_function(fn, (as_tensor(ins[0]),), kwargs)
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
            env[out] = fx.call_function(fn, tuple(as_tensor(x) for x in ins))
    outs = []
    for vid in graph.outputs():
        outs.append(as_tensor(env[vid]))
    fx.output(tuple(outs))
    return torch.fx.GraphModule(torch.nn.Module(), fx)


def compile_graph_with(backend, graph, example_inputs):
    """Compiles a wick Graph with another torch.compile backend (a name such as
    "inductor" or "eager", or a callable taking (GraphModule, example_inputs)).
    Returns a callable taking the graph inputs and returning a tuple of outputs."""
    import torch

    gm = to_fx(graph)
    if isinstance(backend, str):
        import torch._dynamo

        backend = torch._dynamo.lookup_backend(backend)
    compiled = backend(gm, list(example_inputs))

    def run(*args):
        out = compiled(*args)
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)

    run.graph_module = gm
    return run

