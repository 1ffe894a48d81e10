"""Differential fuzzer for wick: random straight-line torch programs, run eagerly
and through wick.compile, compared value by value.

Programs are generated as Python source (exec'd into a namespace whose only
global is `torch`, so they have real code objects and line numbers). The
generator executes each candidate statement eagerly on sample inputs while it
builds the program, so it knows every intermediate's dtype and rank, keeps
integer values small (no overflow UB differences), and lets a small share of
programs end in a statement that raises in eager (the error path).

    prog = generate(seed)            # Program: source, arg specs
    outcome = check_program(prog)    # Outcome: status 'ok' | 'fallback' | 'fail', detail
    minimize(prog, outcome.kind)     # smaller Program that fails the same way

Campaign (crash-safe: each worker is a subprocess):
    python tests/e2e/fuzzlib.py campaign --start 0 --count 2000 --out /tmp/fuzz.jsonl
"""
from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import traceback

import torch

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}
FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
SIZES = (0, 1, 1, 2, 3, 4, 5, 7, 8, 13, 17, 31, 33, 64, 69)
MAX_NUMEL = 6000
INT_LIMIT = 10_000  # generation keeps integer intermediates below this magnitude


# ---------------------------------------------------------------- arguments


class ArgSpec:
    """One argument: a tensor (dtype, shape pattern, layout) or a Python scalar."""

    def __init__(self, name, kind, dtype=None, pattern=None, layout=None, value=None):
        self.name = name
        self.kind = kind  # "tensor" | "scalar"
        self.dtype = dtype
        self.pattern = pattern  # per dim: index into the base shape, or -1 for size 1
        self.layout = layout  # ("contig",) ("perm", p) ("slice", steps, offs) ("expand", dims)
        self.value = value

    def to_json(self):
        return dict(self.__dict__)

    @staticmethod
    def from_json(d):
        a = ArgSpec(d["name"], d["kind"])
        a.__dict__.update(d)
        if a.layout is not None:
            a.layout = [tuple(x) if isinstance(x, list) else x for x in a.layout]
        return a


def _values(rng, dtype, shape, gen):
    n = 1
    for s in shape:
        n *= s
    if dtype == "bool":
        return torch.rand(shape, generator=gen) < rng.uniform(0.2, 0.8)
    if dtype in INTS:
        lo = rng.choice((-5, -3, 0, 1))
        hi = rng.choice((3, 6, 9))
        return torch.randint(lo, hi, shape, generator=gen, dtype=DTYPES[dtype])
    t = torch.randn(shape, generator=gen, dtype=torch.float64)
    mode = rng.random()
    if mode < 0.3:
        t = torch.rand(shape, generator=gen, dtype=torch.float64) * rng.choice((1.0, 4.0)) - rng.choice((0.0, 1.0, 2.0))
    elif mode < 0.4:
        t = t * rng.choice((1e3, 1e5))
    elif mode < 0.5:
        t = t.abs() + 0.1  # positive: log/sqrt/pow see valid values
    if n and rng.random() < 0.25:  # sprinkle specials
        flat = t.reshape(-1)
        for _ in range(rng.randint(1, 3)):
            flat[rng.randrange(n)] = rng.choice((float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e6))
    return t.to(DTYPES[dtype])


def make_tensor(spec, base, rng, gen):
    shape = [1 if p < 0 else base[p] for p in spec.pattern]
    kind = spec.layout[0]
    if kind == "perm" and len(shape) >= 2:
        p = spec.layout[1]
        t = _values(rng, spec.dtype, [shape[i] for i in p], gen)
        inv = [0] * len(p)
        for i, pi in enumerate(p):
            inv[pi] = i
        return t.permute(inv)
    if kind == "slice":
        steps, offs = spec.layout[1], spec.layout[2]
        big = [s * st + o for s, st, o in zip(shape, steps, offs)]
        t = _values(rng, spec.dtype, big, gen)
        idx = tuple(slice(o, o + s * st, st) for s, st, o in zip(shape, steps, offs))
        return t[idx]
    if kind == "expand":
        small = [1 if i in spec.layout[1] else s for i, s in enumerate(shape)]
        return _values(rng, spec.dtype, small, gen).expand(shape)
    return _values(rng, spec.dtype, shape, gen)


def make_args(prog, base, seed, vary_scalars=False, contiguous=False):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    out = []
    for a in prog.args:
        if a.kind == "tensor":
            t = make_tensor(a, base, rng, gen)
            out.append(t.contiguous() if contiguous else t)
        elif vary_scalars:
            out.append(type(a.value)(eval(_const(rng, {bool: "bool", int: "int", float: "float"}[type(a.value)]))))
        else:
            out.append(a.value)
    return out


# ---------------------------------------------------------------- programs


class Program:
    def __init__(self, seed, args, body, ret, base, base2):
        self.seed = seed
        self.args = args
        self.body = body  # list of source lines (without indentation)
        self.ret = ret  # return expression
        self.base = base  # base shape of the first call
        self.base2 = base2  # same rank, other sizes: the recompile call

    def source(self, name="fz"):
        lines = [f"def {name}({', '.join(a.name for a in self.args)}):"]
        lines += ["    " + s for s in self.body]
        lines.append(f"    return {self.ret}")
        return "\n".join(lines) + "\n"

    def function(self, name="fz"):
        ns = {"torch": torch, "__name__": "wick_fuzz"}
        code = compile(self.source(name), f"<fuzz-{self.seed}>", "exec")
        exec(code, ns)
        return ns[name]

    def repro(self):
        """A self-contained script: the program and the inputs of the first call."""
        lines = ["import torch, wick", self.source(), "# inputs (seed-driven):"]
        for a in self.args:
            if a.kind == "tensor":
                shape = [1 if p < 0 else self.base[p] for p in a.pattern]
                lines.append(f"#   {a.name}: {a.dtype}{shape} layout={a.layout}")
            else:
                lines.append(f"#   {a.name} = {a.value!r}")
        return "\n".join(lines)

    def to_json(self):
        return {"seed": self.seed, "args": [a.to_json() for a in self.args], "body": self.body,
                "ret": self.ret, "base": self.base, "base2": self.base2}

    @staticmethod
    def from_json(d):
        return Program(d["seed"], [ArgSpec.from_json(a) for a in d["args"]], list(d["body"]),
                       d["ret"], list(d["base"]), list(d["base2"]))

    def copy(self, **kw):
        p = Program.from_json(self.to_json())
        p.__dict__.update(kw)
        return p


def _base_shape(rng, rank):
    for _ in range(50):
        shape = [rng.choice(SIZES) for _ in range(rank)]
        n = 1
        for s in shape:
            n *= s
        if n <= MAX_NUMEL:
            return shape
    return [rng.choice((1, 2, 3)) for _ in range(rank)]


def _layout(rng, shape):
    r = rng.random()
    nd = len(shape)
    if r < 0.45 or nd == 0:
        return ("contig",)
    if r < 0.65 and nd >= 2:
        p = list(range(nd))
        while p == list(range(nd)):
            rng.shuffle(p)
        return ("perm", p)
    if r < 0.85:
        return ("slice", [rng.choice((1, 1, 2, 3)) for _ in range(nd)], [rng.choice((0, 0, 1, 2)) for _ in range(nd)])
    dims = [i for i in range(nd) if rng.random() < 0.5]
    return ("expand", dims) if dims else ("contig",)


def _const(rng, want=None):
    k = want or rng.choice(("int", "int", "float", "float", "bool"))
    if k == "int":
        return repr(rng.choice((0, 1, 2, 3, -1, -2, 5)))
    if k == "float":
        return repr(rng.choice((0.5, 1.5, -2.25, 3.0, 0.0, -0.75, 1e-3, 100.0)))
    return repr(rng.choice((True, False)))


BINOPS = ("+", "-", "*", "/", "**")
CMPS = ("==", "!=", "<", "<=", ">", ">=")
TORCH_BIN = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge")
UNARY = ("neg", "abs", "relu", "sigmoid", "tanh", "exp", "log", "sqrt")
REDUCE = ("sum", "mean", "amax")


class _Gen:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.seed = seed
        self.depth = 0

    def run(self):
        rng = self.rng
        rank = rng.choice((0, 1, 1, 2, 2, 2, 3, 3, 4))
        base = _base_shape(rng, rank)
        base2 = list(base)
        for _ in range(20):
            base2 = _base_shape(rng, rank)
            if base2 != base:
                break
        args = []
        nargs = rng.choice((1, 2, 2, 3, 3, 4))
        for i in range(nargs):
            dtype = rng.choice(("float32", "float32", "float32", "float64", "int32", "int64", "bool"))
            sub_rank = rng.randint(0, rank) if rng.random() < 0.3 else rank
            pattern = []
            for d in range(rank - sub_rank, rank):
                pattern.append(-1 if rng.random() < 0.15 else d)
            shape = [1 if p < 0 else base[p] for p in pattern]
            args.append(ArgSpec(f"a{i}", "tensor", dtype, pattern, _layout(rng, shape)))
        if rng.random() < 0.2:
            args.append(ArgSpec(f"s{len(args)}", "scalar", value=eval(_const(rng))))
        self.args = args
        self.base = base
        self.env = {"torch": torch}
        for a, v in zip(args, make_args(Program(self.seed, args, [], "None", base, base2), base, self.seed)):
            self.env[a.name] = v
        self.vars = [a.name for a in args]
        body = []
        nstmt = rng.randint(1, int(os.environ.get("WICK_FUZZ_MAX_STMTS", "14")))
        raised = False
        tries = 0
        while len(body) < nstmt and tries < nstmt * 12:
            tries += 1
            expr = self.expr()
            name = f"v{len(body)}"
            try:
                val = eval(expr, self.env)
            except SyntaxError:
                continue
            except Exception:
                if rng.random() < 0.04:  # keep a few programs that raise in eager
                    body.append(f"{name} = {expr}")
                    raised = True
                    break
                continue
            if not self.acceptable(val):
                continue
            self.env[name] = val
            self.vars.append(name)
            body.append(f"{name} = {expr}")
        ret = "None" if raised else self.ret()
        return Program(self.seed, args, body, ret, base, base2)

    def acceptable(self, val):
        if isinstance(val, torch.Tensor):
            if val.numel() > 4 * MAX_NUMEL:
                return False
            if val.dtype in (torch.int32, torch.int64) and val.numel():
                return int(val.abs().max()) < INT_LIMIT
            return val.dtype in DTYPES.values()
        return isinstance(val, (int, float, bool))

    def tensors(self):
        return [v for v in self.vars if isinstance(self.env[v], torch.Tensor)]

    def pick(self, tensor=True):
        ts = self.tensors() if tensor else self.vars
        if not ts:
            return _const(self.rng)
        if self.rng.random() < 0.5:  # bias to recent values: chains reuse intermediates
            return ts[-1 - min(len(ts) - 1, int(self.rng.expovariate(1.0)))]
        return self.rng.choice(ts)

    def operand(self):
        if self.depth < 2 and self.rng.random() < 0.2:
            self.depth += 1
            try:
                return "(" + self.expr() + ")"
            finally:
                self.depth -= 1
        return self.pick() if self.rng.random() < 0.75 else self.rng.choice((_const(self.rng), self.pick(False)))

    def is_int(self, name):
        v = self.env.get(name)
        return isinstance(v, torch.Tensor) and v.dtype in (torch.int32, torch.int64, torch.bool) or isinstance(v, (int, bool))

    def pow_exponent(self, base):
        if self.is_int(base):
            return self.rng.choice(("0", "1", "2", "3", "True"))
        return self.rng.choice(("2", "3", "0.5", "-1", "2.0", "-0.5", self.pick()))

    def expr(self):
        rng = self.rng
        r = rng.random()
        if r < 0.22:
            op = rng.choice(BINOPS)
            a = self.operand()
            if op == "**":
                return f"{a} ** {self.pow_exponent(a)}"
            b = self.operand()
            if rng.random() < 0.5:
                a, b = b, a
            return f"{a} {op} {b}"
        if r < 0.3:
            return f"{self.operand()} {rng.choice(CMPS)} {self.operand()}"
        if r < 0.34:
            return f"-{self.pick()}"
        if r < 0.5:
            fn = rng.choice(TORCH_BIN)
            a = self.pick()
            b = self.pow_exponent(a) if fn == "pow" else self.operand()
            extra = ""
            if fn in ("add", "sub") and rng.random() < 0.4:
                extra = f", alpha={rng.choice(('2', '-1', '0.5', '3'))}"
            q = rng.random()
            if q < 0.4:
                return f"torch.{fn}({a}, {b}{extra})"
            if q < 0.5 and fn != "pow":
                return f"torch.{fn}(input={a}, other={b}{extra})"
            if q < 0.55 and fn != "pow":
                return f"torch.{fn}({a}, other={b}{extra})"
            return f"{a}.{fn}({b}{extra})"
        if r < 0.56:
            c = self.pick()
            if self.env.get(c) is None or not (isinstance(self.env[c], torch.Tensor) and self.env[c].dtype == torch.bool):
                c = f"{self.pick()} {rng.choice(CMPS)} {self.operand()}"
            return f"torch.where({c}, {self.operand()}, {self.operand()})"
        if r < 0.75:
            fn = rng.choice(UNARY)
            a = self.pick()
            return f"torch.{fn}({a})" if rng.random() < 0.5 else f"{a}.{fn}()"
        if r < 0.95:
            return self.reduction()
        if r < 0.98:
            return self.to_int_safe(self.pick(), f".to(torch.{rng.choice(list(DTYPES))})")
        a, b = _const(rng), _const(rng)
        return f"{a} {rng.choice(('+', '*', '-'))} {b}"

    def to_int_safe(self, a, conv):
        """Float -> int conversion of NaN/inf/out-of-range values is undefined in C
        and platform-defined in torch: clip such values away first."""
        v = self.env.get(a)
        if "int" in conv and isinstance(v, torch.Tensor) and v.dtype.is_floating_point:
            a = f"torch.where({a}.abs() < 1000.0, {a}, 0.0)"
        return f"{a}{conv}"

    def reduction(self):
        rng = self.rng
        fn = rng.choice(REDUCE)
        a = self.pick()
        v = self.env.get(a)
        nd = v.dim() if isinstance(v, torch.Tensor) else 0
        parts = []
        r = rng.random()
        if nd and r < 0.4:
            d = rng.randrange(nd)
            parts.append(str(d - nd if rng.random() < 0.4 else d))
        elif nd and r < 0.7:
            k = rng.randint(1, nd)
            ds = rng.sample(range(nd), k)
            parts.append("(" + ", ".join(str(d - nd if rng.random() < 0.3 else d) for d in ds) + ("," if k == 1 else "") + ")")
        elif fn == "amax" and nd:
            parts.append("dim=" + str(rng.randrange(nd)))
        if parts and rng.random() < 0.4:
            parts.append(rng.choice(("keepdim=True", "keepdim=True", "keepdim=False", "True")))
        if parts and not parts[0].startswith("dim=") and parts[-1] != "True" and rng.random() < 0.2:
            parts[0] = "dim=" + parts[0]
        if fn in ("sum", "mean") and rng.random() < 0.25:
            dts = FLOATS if fn == "mean" or rng.random() < 0.5 else list(DTYPES)
            parts.append(f"dtype=torch.{rng.choice(dts)}")
        if fn == "mean" and isinstance(v, torch.Tensor) and v.dtype not in (torch.float32, torch.float64) and not any("dtype" in p for p in parts):
            if rng.random() < 0.8:
                a = f"{a}.to(torch.float32)" if rng.random() < 0.5 else a
                parts.append("dtype=torch.float64")
        v = self.env.get(a)
        if any("dtype=torch.int" in q for q in parts) and isinstance(v, torch.Tensor) and v.dtype.is_floating_point:
            a = f"torch.where({a}.abs() < 1000.0, {a}, 0.0)"
        if rng.random() < 0.5:
            return f"torch.{fn}({', '.join([a] + parts)})"
        return f"{a}.{fn}({', '.join(parts)})"

    def ret(self):
        rng = self.rng
        last = self.vars[-1]
        r = rng.random()
        if r < 0.45:
            return last
        items = [last]
        for _ in range(rng.randint(1, 3)):
            q = rng.random()
            if q < 0.4:
                items.append(self.pick(False))
            elif q < 0.7:
                items.append(rng.choice(self.args).name)
            else:
                items.append(_const(rng))
        rng.shuffle(items)
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def generate(seed):
    return _Gen(seed).run()


# ---------------------------------------------------------------- checking


class Outcome:
    def __init__(self, status, kind="", detail="", reasons=()):
        self.status = status  # "ok" | "fallback" | "fail"
        self.kind = kind  # for failures: mismatch | exception | wick-raised | no-reason
        self.detail = detail
        self.reasons = list(reasons)
        self.graphs = 0

    def to_json(self):
        return dict(self.__dict__)


def _tol(dtype, reduced):
    if dtype == torch.float32:
        s = 1.0 + math.sqrt(reduced) / 8.0
        return 1.3e-5 * s, 1e-5 * s
    if dtype == torch.float64:
        return 1e-7, 1e-7
    return 0.0, 0.0


def _close(e, w, reduced, ref64=None, mixed32=True):
    """Return None when w matches e, else a message."""
    if e.dtype != w.dtype:
        return f"dtype {w.dtype} != eager {e.dtype}"
    if e.shape != w.shape:
        return f"shape {tuple(w.shape)} != eager {tuple(e.shape)}"
    rtol, atol = _tol(e.dtype, reduced)
    try:
        torch.testing.assert_close(w, e, rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
        return None
    except AssertionError as exc:
        msg = str(exc)
    if ref64 is not None and ref64.shape == e.shape:
        r = ref64
        if e.dtype.is_floating_point:
            # Like torch._dynamo.utils.same(fp64_ref=...): accept wick if it is no
            # further from a float64 computation than eager is (float64 outputs can
            # come from float32 intermediates, whose rounding differs by order).
            r = r.double()
            ed, wd = e.double(), w.double()
            same_special = bool((ed.isnan() == wd.isnan()).all()) and bool(((ed.isinf() & (ed == wd)) | ~ed.isinf()).all())
            if same_special:
                fin = torch.isfinite(ed) & torch.isfinite(wd) & torch.isfinite(r)
                ee = (ed - r).abs()[fin]
                we = (wd - r).abs()[fin]
                # float64 results computed from float32 values carry float32 rounding
                ra, aa = _tol(torch.float32 if mixed32 else e.dtype, reduced)
                if int(fin.sum()) == int(torch.isfinite(ed).sum()):
                    if bool((we <= 2 * ee + aa + ra * r.abs()[fin]).all()):
                        return None
                    if we.numel():  # RMSE form, as dynamo's same(): robust to one unlucky element
                        rmse_w = float(we.pow(2).mean().sqrt())
                        rmse_e = float(ee.pow(2).mean().sqrt())
                        if rmse_w <= 3 * rmse_e + aa:
                            return None
        elif r.dtype == e.dtype:
            # bool/int results of comparisons or conversions of computed floats:
            # where wick and eager disagree, wick must agree with the float64 run
            # (otherwise eager and wick round a near-tie differently: kind 'flip').
            diff = w != e
            if bool((w[diff] == r[diff]).all()):
                return None
            return "FLIP " + msg.strip().splitlines()[0] + f" ({int(diff.sum())} of {e.numel()} elements)"
    return msg.strip().splitlines()[0] + " | " + " ".join(msg.split())[:400]


def _as_tuple(r):
    return r if isinstance(r, tuple) else (r,)


def compare(eager, wres, args, reduced, ref64=None, mixed32=True):
    if type(eager) is not type(wres):
        return f"result type {type(wres).__name__} != eager {type(eager).__name__}"
    es, ws = _as_tuple(eager), _as_tuple(wres)
    rs = _as_tuple(ref64) if ref64 is not None else (None,) * len(es)
    if len(es) != len(ws):
        return f"tuple length {len(ws)} != eager {len(es)}"
    for i, (e, w, r) in enumerate(zip(es, ws, rs)):
        if any(e is a for a in args):
            if w is not e:
                return f"output {i}: eager returns an input unchanged, wick returns a different object"
            continue
        if isinstance(e, torch.Tensor):
            if not isinstance(w, torch.Tensor):
                return f"output {i}: {type(w).__name__} != Tensor"
            m = _close(e, w, reduced, r if isinstance(r, torch.Tensor) else None, mixed32)
            if m:
                return f"output {i}: {m}"
        else:
            if type(e) is not type(w) or not (e == w or (e != e and w != w)):
                return f"output {i}: {w!r} != eager {e!r}"
    return None


def _reduced_elems(prog, base):
    n = 1
    for s in base:
        n *= max(s, 1)
    return n if any(k in s for s in prog.body for k in ("sum", "mean", "amax")) else 1


def _ref64(prog, args):
    """The program in float64: float32 inputs upcast, float32 dtype= requests too."""
    up = [a.double() if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a for a in args]
    try:
        fn64 = prog.copy(body=[b.replace("torch.float32", "torch.float64") for b in prog.body]).function()
        return fn64(*up)
    except Exception:
        return None


def _call(fn, args):
    try:
        return fn(*args), None
    except Exception as exc:  # noqa: BLE001 - comparing exception types
        return None, exc


def check_program(prog, extra_calls=True):
    """Run prog eagerly and through wick on three calls: first inputs, new values of
    the same signature (cache hit), and a different shape (recompile)."""
    import wick

    fn = prog.function()
    fast = wick.compile(fn)
    calls = [("first", prog.base, prog.seed * 7 + 1)]
    if extra_calls:
        calls += [("same-signature", prog.base, prog.seed * 7 + 2), ("new-shape", prog.base2, prog.seed * 7 + 3)]
        if any(a.kind == "tensor" and a.layout[0] != "contig" for a in prog.args):
            calls.append(("contiguous-copies", prog.base, prog.seed * 7 + 4))  # same sizes, new strides
    status = "ok"
    reasons = []
    graphs = 0
    expected_reasons = set()  # fallbacks of calls that raise in eager are expected
    for label, base, vseed in calls:
        args = make_args(prog, base, vseed, vary_scalars=label != "first", contiguous=label == "contiguous-copies")
        eager, eexc = _call(fn, args)
        wres, wexc = _call(fast, args)
        if eexc is not None:
            expected_reasons.update(e.get("reason") for e in wick._C.code_entries(fn.__code__) if e.get("reason"))
            if wexc is None:
                return Outcome("fail", "exception", f"{label}: eager raised {type(eexc).__name__}: {eexc} but wick returned")
            if type(wexc) is not type(eexc):
                return Outcome("fail", "exception", f"{label}: eager raised {type(eexc).__name__}: {eexc}; wick raised "
                               f"{type(wexc).__name__}: {wexc}")
            continue
        if wexc is not None:
            tb = "".join(traceback.format_exception_only(type(wexc), wexc)).strip()
            return Outcome("fail", "wick-raised", f"{label}: eager ok, wick raised {tb}")
        ref = _ref64(prog, args)
        mixed32 = any(a.kind == "tensor" and a.dtype != "float64" for a in prog.args) or "float32" in prog.source()
        msg = compare(eager, wres, args, _reduced_elems(prog, base), ref, mixed32)
        if msg:
            kind = "flip" if "FLIP " in msg else "mismatch"
            return Outcome("fail", kind, f"{label}: {msg}")
        if label == "same-signature":  # the cache-hit path must not leak references to inputs
            del eager, wres, ref
            before = [sys.getrefcount(a) for a in args if isinstance(a, torch.Tensor)]
            for _ in range(3):
                fast(*args)
            after = [sys.getrefcount(a) for a in args if isinstance(a, torch.Tensor)]
            if after != before:
                return Outcome("fail", "leak", f"{label}: input refcounts {before} -> {after} after 3 calls")
        entries = wick._C.code_entries(fn.__code__)
        graphs = max(graphs, sum(int(e.get("graph_count") or 0) for e in entries if not e.get("eager")))
        for e in entries:
            if e.get("eager") and e.get("reason") not in expected_reasons:
                if not e.get("reason"):
                    return Outcome("fail", "no-reason", f"{label}: eager entry without a reason: {e}")
                reasons.append(e["reason"])
                status = "fallback"
    out = Outcome(status, reasons=sorted(set(reasons)))
    out.graphs = graphs
    return out


# ---------------------------------------------------------------- minimizing


def _fails_same(prog, kind):
    import wick

    try:
        out = check_program(prog)
    except Exception:
        return False
    finally:
        wick.reset()
    if kind == "fallback":
        return out.status == "fallback"
    return out.status == "fail" and out.kind == kind


def minimize(prog, kind, budget=150):
    """Greedy statement-level reduction keeping the failure kind."""
    best = prog
    steps = 0

    def attempt(cand):
        nonlocal steps, best
        steps += 1
        if steps > budget:
            return False
        if _fails_same(cand, kind):
            best = cand
            return True
        return False

    # the return: each single item, then the last variable
    ret = best.ret
    if ret.startswith("("):
        for item in [x.strip() for x in ret.strip("()").split(",") if x.strip()]:
            if attempt(best.copy(ret=item)):
                break
    changed = True
    while changed and steps < budget:
        changed = False
        for i in range(len(best.body) - 1, -1, -1):
            cand = best.copy(body=best.body[:i] + best.body[i + 1:])
            if attempt(cand):
                changed = True
        # return an earlier variable instead of the last one
        for i in range(len(best.body)):
            name = best.body[i].split("=")[0].strip()
            if name != best.ret and attempt(best.copy(ret=name, body=best.body[: i + 1])):
                changed = True
                break
    # simpler layouts and dtypes of arguments
    for i, a in enumerate(best.args):
        if a.kind == "tensor" and a.layout[0] != "contig":
            cand = best.copy()
            cand.args[i].layout = ("contig",)
            attempt(cand)
    return best


# ---------------------------------------------------------------- campaign


def run_range(start, count, out_path, minimize_failures=True):
    """Worker: check seeds [start, start+count) and append JSON lines to out_path.
    Before each program it writes a 'start' line, so the parent can spot a crash."""
    import wick

    with open(out_path, "a") as out:
        for seed in range(start, start + count):
            out.write(json.dumps({"start": seed}) + "\n")
            out.flush()
            prog = generate(seed)
            try:
                res = check_program(prog)
            except Exception as exc:  # a harness problem, report as such
                res = Outcome("fail", "harness", repr(exc))
            wick.reset()
            rec = {"seed": seed, "status": res.status, "kind": res.kind, "detail": res.detail,
                   "reasons": res.reasons, "graphs": res.graphs}
            if res.status != "ok":
                rec["program"] = prog.to_json()
                rec["source"] = prog.source()
            if res.status == "fail" and minimize_failures:
                small = minimize(prog, res.kind)
                rec["min_source"] = small.repro()
                rec["min_program"] = small.to_json()
            out.write(json.dumps(rec) + "\n")
            out.flush()


def campaign(start, count, out_path, chunk=200):
    """Parent: run workers in subprocesses; a crashed program is recorded and skipped."""
    seed = start
    end = start + count
    while seed < end:
        n = min(chunk, end - seed)
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "worker", str(seed), str(n), out_path],
                           capture_output=True, text=True)
        if p.returncode == 0:
            seed += n
            continue
        last = None
        with open(out_path) as f:
            for line in f:
                d = json.loads(line)
                if "start" in d:
                    last = d["start"]
        prog = generate(last)
        with open(out_path, "a") as f:
            f.write(json.dumps({"seed": last, "status": "fail", "kind": "crash",
                                "detail": f"worker died rc={p.returncode}: {p.stderr[-1500:]}",
                                "program": prog.to_json(), "source": prog.source()}) + "\n")
        seed = last + 1


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    cmd = sys.argv[1]
    if cmd == "worker":
        run_range(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif cmd == "campaign":
        import argparse

        ap = argparse.ArgumentParser()
        ap.add_argument("cmd")
        ap.add_argument("--start", type=int, default=0)
        ap.add_argument("--count", type=int, default=1000)
        ap.add_argument("--out", default="/tmp/wick-fuzz.jsonl")
        ns = ap.parse_args()
        campaign(ns.start, ns.count, ns.out)
    elif cmd == "show":
        for s in sys.argv[2:]:
            print(generate(int(s)).source())
