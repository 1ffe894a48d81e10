"""Generates tests/c/promotion_table.h: the output dtype (or the error) torch
gives for every op of csrc/graph/ops.def on every combination of argument
kinds, so test_graph_rules.c checks wick's dtype rules against torch itself;
also torch.promote_types over all dtypes, and torch's result shapes (or
errors) for random broadcasts and reductions.

Argument kinds: a tensor with dims ("T:<dtype>"), a 0-d tensor ("Z:<dtype>")
and a Python scalar ("S:bool", "S:int", "S:float"), dtypes bool, int32,
int64, float32, float64. Values are positive, so no row depends on them
(integer powers of negative exponents are tested separately).

Run: .venv/bin/python tests/graph/gen_promotion_table.py [--check]
--check exits 1 if the checked-in table differs from what torch gives now.
"""
import os
import re
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OPS_DEF = os.path.join(ROOT, "csrc", "graph", "ops.def")
OUT = os.path.join(ROOT, "tests", "c", "promotion_table.h")

DTYPES = ["bool", "int32", "int64", "float32", "float64"]
ALL_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
              "complex32", "complex64", "complex128"]
SCALARS = {"bool": True, "int": 2, "float": 2.5}

BINARY = {  # ops.def name -> how Python code spells it (operators take scalars on either side)
    "ADD": lambda a, b: a + b,
    "SUB": lambda a, b: a - b,
    "MUL": lambda a, b: a * b,
    "DIV": lambda a, b: a / b,
    "POW": lambda a, b: a**b,
    "MAXIMUM": torch.maximum,
    "MINIMUM": torch.minimum,
    "EQ": lambda a, b: a == b,
    "NE": lambda a, b: a != b,
    "LT": lambda a, b: a < b,
    "LE": lambda a, b: a <= b,
    "GT": lambda a, b: a > b,
    "GE": lambda a, b: a >= b,
}
F = torch.nn.functional
BINARY.update({
    "ATAN2": torch.atan2, "FMOD": torch.fmod, "REMAINDER": torch.remainder,
    "FLOOR_DIVIDE": torch.floor_divide, "BITWISE_AND": torch.bitwise_and, "BITWISE_OR": torch.bitwise_or,
    "BITWISE_XOR": torch.bitwise_xor, "LOGICAL_AND": torch.logical_and, "LOGICAL_OR": torch.logical_or,
    "LOGICAL_XOR": torch.logical_xor, "CLAMP_MIN": torch.clamp_min, "CLAMP_MAX": torch.clamp_max,
    "LEAKY_RELU": F.leaky_relu, "ELU": F.elu,
})
UNARY = {
    "NEG": torch.neg, "ABS": torch.abs, "RELU": torch.relu, "EXP": torch.exp, "LOG": torch.log,
    "SQRT": torch.sqrt, "SIGMOID": torch.sigmoid, "TANH": torch.tanh,
}
for _name in ["sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf",
              "erfc", "erfinv", "log1p", "expm1", "log2", "log10", "exp2", "rsqrt", "reciprocal", "square",
              "floor", "ceil", "round", "trunc", "frac", "sign", "bitwise_not", "logical_not", "isnan",
              "isinf", "isfinite", "isposinf", "isneginf", "nan_to_num"]:
    UNARY[_name.upper()] = getattr(torch, _name)
UNARY.update({"GELU": F.gelu, "GELU_TANH": lambda x: F.gelu(x, approximate="tanh"), "SILU": F.silu,
              "MISH": F.mish, "RELU6": F.relu6, "HARDSWISH": F.hardswish, "HARDSIGMOID": F.hardsigmoid})
TERNARY = {  # third-and-later arguments from a smaller set of kinds
    "CLAMP": torch.clamp, "MASKED_FILL": lambda x, m, v: torch.masked_fill(x, m, v),
    "SOFTPLUS": F.softplus, "HARDTANH": F.hardtanh, "LERP": torch.lerp, "ADDCMUL": torch.addcmul,
    "ADDCDIV": torch.addcdiv,
}
# the shape rows below draw from this set (a fixed seed: adding ops must not reshuffle them)
SHAPE_REDUCE = {"SUM": torch.sum, "MEAN": torch.mean, "AMAX": torch.amax}
REDUCE = dict(SHAPE_REDUCE)
REDUCE.update({
    "PROD": torch.prod, "AMIN": torch.amin, "ANY": torch.any, "ALL": torch.all, "ARGMAX": torch.argmax,
    "ARGMIN": torch.argmin, "VAR": torch.var, "STD": torch.std,
    "LOGSUMEXP": lambda x: torch.logsumexp(x, 0),
    "SOFTMAX": lambda x, dtype=None: torch.softmax(x, 0, dtype=dtype),
    "LOG_SOFTMAX": lambda x, dtype=None: torch.log_softmax(x, 0, dtype=dtype),
})
TAKES_DTYPE = {"SUM", "MEAN", "PROD", "SOFTMAX", "LOG_SOFTMAX"}
SKIPPED = {"SCALAR", "CONVERT",  # no promotion: their dtype is the attribute
           "LAYER_NORM",  # needs its normalized dims; tests/lower/test_ops_breadth.py checks it
           "VIEW",  # the input's dtype by construction; tests/lower/test_views.py checks views
           "CAT", "PAD",  # need their int attributes; tests/lower/test_cat_pad.py checks them
           # indexing and creation: the data input's dtype, or the attribute's;
           # tests/lower/test_indexing.py checks them against torch
           "INDEX", "GATHER", "ONE_HOT", "SCATTER", "ARANGE", "FULL", "TRIL", "TRIU"}


def op_rows():
    """(name, arity) of each ops.def row, so a new op cannot go unnoticed;
    checks on the way that every callable of the torch column exists."""
    rows = []
    for lineno, line in enumerate(open(OPS_DEF), 1):
        m = re.match(r'WK_OP\((\w+),\s*\w+,\s*(\d+),.*"([^"]*)"\)\s*$', line)
        if not m:
            continue
        rows.append((m.group(1), int(m.group(2))))
        for name in m.group(3).split():
            obj = {"torch": torch, "Tensor": torch.Tensor}.get(name.split(".")[0])
            for part in name.split(".")[1:]:
                obj = getattr(obj, part, None)
            if not callable(obj):
                sys.exit(f"{OPS_DEF}:{lineno}: {name} is not a torch callable")
    if not rows:
        sys.exit(f"{OPS_DEF}: no WK_OP rows found")
    return rows


def kinds(with_scalars=True):
    out = [f"T:{d}" for d in DTYPES] + [f"Z:{d}" for d in DTYPES]
    return out + [f"S:{s}" for s in SCALARS] if with_scalars else out


def make(kind):
    k, name = kind.split(":")
    if k == "S":
        return SCALARS[name]
    dt = getattr(torch, name)
    shape = (3,) if k == "T" else ()
    if dt == torch.bool:
        return torch.ones(shape, dtype=dt)
    return (torch.arange(3 if k == "T" else 1, dtype=torch.float64).reshape(shape) + 1.5).to(dt)


def outcome(fn, *args, **kw):
    """(dtype name or "error", torch's message), or None where torch refuses
    the call itself (torch.maximum(t, 2): a binding error, not a dtype rule;
    the graph keeps such nodes for decompositions)."""
    try:
        r = fn(*args, **kw)
    except (TypeError, ValueError):  # ValueError: Python-side argument checks (hardtanh)
        return None
    except (RuntimeError, IndexError) as e:
        return "error", str(e).splitlines()[0][:100]
    assert isinstance(r, torch.Tensor), (fn, args)
    return str(r.dtype).replace("torch.", ""), ""


def generate():
    rows = []  # (op, args, attr_dtype, result, note)

    def add(name, args, dt, got):
        if got is not None:
            rows.append((name, args, dt, *got))

    for name, arity in op_rows():
        if name in SKIPPED:
            continue
        if name in BINARY:
            for a in kinds():
                for b in kinds():
                    if a[0] == "S" and b[0] == "S":
                        continue
                    add(name, [a, b], None, outcome(BINARY[name], make(a), make(b)))
        elif name in UNARY:
            for a in kinds(with_scalars=False):
                add(name, [a], None, outcome(UNARY[name], make(a)))
        elif name in REDUCE:
            for a in kinds(with_scalars=False):
                for dt in [None] + (DTYPES if name in TAKES_DTYPE else []):
                    kw = {"dtype": getattr(torch, dt)} if dt else {}
                    add(name, [a], dt, outcome(REDUCE[name], make(a), **kw))
        elif name in TERNARY:
            second = ["T:bool"] if name == "MASKED_FILL" else ["T:float32", "T:int64", "Z:int32", "S:float", "S:int"]
            third = ["Z:float64", "Z:int64", "S:float", "S:int", "S:bool"] if name == "MASKED_FILL" else \
                ["T:float32", "T:int32", "Z:float64", "S:float", "S:int"]
            for a in kinds(with_scalars=False):
                for b in second:
                    for c in third:
                        add(name, [a, b, c], None, outcome(TERNARY[name], make(a), make(b), make(c)))
        elif name == "WHERE":
            for c in ["T:bool", "Z:bool", "T:float32", "T:int64"]:
                for a in kinds():
                    for b in kinds():
                        add(name, [c, a, b], None, outcome(torch.where, make(c), make(a), make(b)))
        else:
            sys.exit(f"{OPS_DEF}: op {name} (arity {arity}) has no promotion recipe in {__file__}")
    return rows


def shape_rows():
    """Random broadcasts and reductions (fixed seed), with torch's output
    shape or None where torch raises."""
    import random

    rnd = random.Random(1234)

    def shape():
        return tuple(rnd.choice([0, 1, 1, 2, 3]) for _ in range(rnd.randint(0, 4)))

    def run(fn):
        try:
            return tuple(fn().shape)
        except (RuntimeError, IndexError):
            return None

    bcast = []
    for _ in range(300):
        a, b = shape(), shape()
        if rnd.random() < 0.3:  # suffix-compatible pairs, so not nearly every row is an error
            b = a[rnd.randint(0, len(a)):]
        bcast.append((a, b, run(lambda: torch.zeros(a) + torch.zeros(b))))
    reduce = []
    for _ in range(400):
        name = rnd.choice(sorted(SHAPE_REDUCE))
        a = shape()
        r = max(len(a), 1)
        dims = tuple(rnd.randint(-r - 1, r) for _ in range(rnd.randint(0, min(len(a), 3))))
        keepdim = rnd.random() < 0.5
        reduce.append((name, a, dims, keepdim, run(lambda: REDUCE[name](torch.zeros(a), dims, keepdim))))
    return bcast, reduce


def c_list(xs):
    return "{" + ", ".join(str(int(x)) for x in xs) + "}" if xs else "{0}"


def render(rows):
    out = [
        "/* promotion_table.h — GENERATED by tests/graph/gen_promotion_table.py from",
        f" * torch {torch.__version__.split('+')[0]}; do not edit. Each row: op, argument kinds",
        " * (T: tensor with dims, Z: 0-d tensor, S: Python scalar), the dtype= argument,",
        " * and the dtype torch returns or \"error\" (torch's message in the comment). */",
        "typedef struct { const char *op; const char *args[3]; const char *attr_dtype; const char *result; } PromoRow;",
        "static const PromoRow promo_rows[] = {",
    ]
    for op, args, dt, res, note in rows:
        a = ", ".join(f'"{x}"' for x in args) + ", NULL" * (3 - len(args))
        d = f'"{dt}"' if dt else "NULL"
        comment = f"  /* {note.replace('*/', '* /')} */" if note else ""
        out.append(f'    {{"{op}", {{{a}}}, {d}, "{res}"}},{comment}')
    out.append("};")
    out.append("/* torch.promote_types over every dtype of graph.h's WK_DTYPE_TABLE */")
    out.append("typedef struct { const char *a, *b, *result; } PromoteTypesRow;")
    out.append("static const PromoteTypesRow promote_types_rows[] = {")
    for a in ALL_DTYPES:
        for b in ALL_DTYPES:
            r = torch.promote_types(getattr(torch, a), getattr(torch, b))
            out.append(f'    {{"{a}", "{b}", "{str(r).replace("torch.", "")}"}},')
    out.append("};")
    bcast, reduce = shape_rows()
    out.append("/* broadcasting: shapes a, b and torch's result of a + b (nout -1: torch raises) */")
    out.append("typedef struct { int na; int64_t a[4]; int nb; int64_t b[4]; int nout; int64_t out[4]; } BroadcastRow;")
    out.append("static const BroadcastRow broadcast_rows[] = {")
    for a, b, r in bcast:
        out.append(f"    {{{len(a)}, {c_list(a)}, {len(b)}, {c_list(b)}, {-1 if r is None else len(r)}, {c_list(r or ())}}},")
    out.append("};")
    out.append("/* reductions of a float32 input: op(x, dims, keepdim) and torch's result shape */")
    out.append("typedef struct { const char *op; int nin; int64_t in[4]; int ndims; int dims[4]; int keepdim; int nout; int64_t out[4]; } ReduceRow;")
    out.append("static const ReduceRow reduce_rows[] = {")
    for name, a, dims, keepdim, r in reduce:
        out.append(f'    {{"{name}", {len(a)}, {c_list(a)}, {len(dims)}, {c_list(dims)}, {int(keepdim)}, '
                   f"{-1 if r is None else len(r)}, {c_list(r or ())}}},")
    out.append("};")
    return "\n".join(out) + "\n"


def main():
    text = render(generate())
    if "--check" in sys.argv:
        import difflib

        old = open(OUT).read() if os.path.exists(OUT) else ""
        # the header names the torch that generated the table; rows must agree
        rows_old = [line for line in old.splitlines() if not line.startswith(" * torch ")]
        rows_new = [line for line in text.splitlines() if not line.startswith(" * torch ")]
        if rows_old != rows_new:
            diff = list(difflib.unified_diff(rows_old, rows_new, "checked-in", "this torch", lineterm="", n=0))
            print(f"{OUT}: out of date for torch {torch.__version__}; rerun {__file__}")
            print("\n".join(diff[:80]))
            sys.exit(1)
        return
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {OUT}: {text.count(chr(10))} lines")


if __name__ == "__main__":
    main()
