"""A corpus of small functions over the Python constructs real model code
uses, each run eagerly and through wick, results compared, and the number
of graphs asserted: every function here is one graph for PyTorch's own
capture (torch.compile(backend="eager"): checked with WICK_CORPUS_DYNAMO=1),
and must be exactly one graph, not a fallback, for wick.

The functions are generated from construct templates crossed with unary
ops (natively lowered ones and ones that become extern nodes), each compiled
from its own source text, so every function has its own code object."""
import collections
import dataclasses
import functools
import itertools
import math
import operator
import os
import contextlib

import pytest
import torch
import torch.nn.functional as F

from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries

OPS = ["torch.relu", "torch.tanh", "torch.sigmoid", "torch.abs", "torch.neg", "torch.exp", "torch.sin",
       "torch.cos", "F.silu", "F.gelu"]

# name -> body; OP is the unary op; the function is def f(x, y): <body>
CONSTRUCTS = {
    "straight": "return OP(x) + y",
    "for_range": "acc = x\nfor i in range(3):\n    acc = OP(acc) * 0.5 + i\nreturn acc",
    "for_range_step": "acc = y\nfor i in range(1, 7, 2):\n    acc = acc + OP(x) * i\nreturn acc",
    "for_list_consts": "for w in [1.0, 2.0, 3.0]:\n    x = x + OP(y) * w\nreturn x",
    "for_tuple_tensors": "acc = 0\nfor t in (x, y):\n    acc = acc + OP(t)\nreturn acc",
    "enumerate": "acc = x * 0\nfor i, t in enumerate([x, y]):\n    acc = acc + OP(t) * (i + 1)\nreturn acc",
    "enumerate_start": "acc = x\nfor i, t in enumerate((y, y), 2):\n    acc = acc - OP(t) / i\nreturn acc",
    "zip": "acc = []\nfor a, b in zip([x, y], [2.0, 3.0]):\n    acc.append(OP(a) * b)\nreturn acc[0] + acc[1]",
    "reversed": "out = []\nfor t in reversed([x, y]):\n    out.append(OP(t))\nreturn out[0] - out[1]",
    "dict_items": "d = {'a': x, 'b': y}\nacc = 0\nfor k, v in d.items():\n    acc = acc + OP(v) * len(k)\nreturn acc",
    "dict_keys_values": "d = dict(a=x, b=y)\nks = list(d.keys())\nvs = list(d.values())\nreturn OP(vs[0]) + d[ks[1]]",
    "while_const": "i = 0\nwhile i < 3:\n    x = OP(x) + 1\n    i += 1\nreturn x",
    "while_break": "i = 0\nwhile True:\n    x = OP(x) * 0.9\n    i += 1\n    if i >= 2:\n        break\nreturn x + y",
    "for_continue": "acc = x\nfor i in range(4):\n    if i % 2:\n        continue\n    acc = OP(acc) + i\nreturn acc",
    "closure": "k = 2.5\ndef inner(t):\n    return OP(t) + k\nreturn inner(x) + inner(y)",
    "nonlocal": "c = 0\ndef bump(t):\n    nonlocal c\n    c += 1\n    return OP(t) * c\nreturn bump(x) + bump(y)",
    "lambda": "g = lambda t, s=2: OP(t) * s\nreturn g(x) + g(y, 3)",
    "listcomp": "ts = [OP(t) for t in (x, y)]\nreturn ts[0] + ts[1]",
    "listcomp_if": "ts = [OP(t) * i for i, t in enumerate((x, y, x)) if i != 1]\nreturn sum(ts)",
    "dictcomp": "d = {n: OP(t) for n, t in zip('ab', (x, y))}\nreturn d['a'] * d['b']",
    "varargs_callee": "def h(*ts):\n    s = 0\n    for t in ts:\n        s = s + OP(t)\n    return s\nreturn h(x, y, x)",
    "kwargs_callee": "def h(**kw):\n    return OP(kw['a']) + kw['b']\nreturn h(a=x, b=y)",
    "star_call": "def h(a, b):\n    return OP(a) - b\nargs = (x, y)\nreturn h(*args)",
    "double_star_call": "def h(a, b=None):\n    return OP(a) * b\nkw = {'a': x, 'b': y}\nreturn h(**kw)",
    "kwonly_default": "def h(t, *, scale=2.0):\n    return OP(t) * scale\nreturn h(x) + h(y, scale=-1.0)",
    "defaults": "def h(t, s=3, u=1):\n    return OP(t) * s + u\nreturn h(x) + h(y, 2)",
    "fstring": "name = f'layer{2}_{\"x\"}'\nif name == 'layer2_x':\n    return OP(x)\nreturn y",
    "isinstance": "if isinstance(x, torch.Tensor) and not isinstance(y, (int, float)):\n    return OP(x) + y\nreturn x",
    "getattr_torch": "fn = getattr(torch, 'mul')\nreturn fn(OP(x), y)",
    "hasattr": "if hasattr(x, 'shape') and not hasattr(x, 'no_such_attr'):\n    return OP(x)\nreturn y",
    "len_list": "ts = [x, y, x]\nreturn OP(x) * len(ts)",
    "min_max_consts": "n = max(2, 3) - min(1, 5)\nfor _ in range(n):\n    x = OP(x)\nreturn x",
    "sum_tensors": "return sum([OP(x), y, x])",
    "any_all": "if all(s > 0 for s in x.shape) and any([False, True]):\n    return OP(x) + 1\nreturn y",
    "sorted_keys": "d = {'b': y, 'a': x}\nacc = 0\nfor k in sorted(d):\n    acc = acc * 2 + OP(d[k])\nreturn acc",
    "math_consts": "return OP(x) * math.sqrt(4.0) + math.pi * math.floor(2.5)",
    "operator_fns": "return operator.add(OP(x), operator.mul(y, 2))",
    "partial": "def h(t, s):\n    return OP(t) * s\np = functools.partial(h, s=3.0)\nreturn p(x) + p(y)",
    "reduce": "return functools.reduce(operator.add, [OP(x), y, x])",
    "chain": "acc = 0\nfor t in itertools.chain([x], (y,)):\n    acc = acc + OP(t)\nreturn acc",
    "product": "acc = x * 0\nfor a, b in itertools.product([1, 2], [3]):\n    acc = acc + OP(x) * a * b\nreturn acc",
    "combinations": "acc = x * 0\nfor a, b in itertools.combinations([1, 2, 3], 2):\n    acc = acc + OP(x) * (a - b)\nreturn acc",
    "repeat": "acc = x * 0\nfor s in itertools.repeat(2.0, 3):\n    acc = acc + OP(x) * s\nreturn acc + len(tuple(itertools.repeat(y, 2)))",
    "slice_build": "sl = slice(1, None)\nreturn OP(x[sl]) + y[1:]",
    "callable": "if callable(torch.relu) and not callable(3):\n    return OP(x)\nreturn y",
    "enable_grad": "with torch.no_grad():\n    with torch.enable_grad():\n        z = OP(x) * 2\nreturn z + y",
    "try_finally": "try:\n    z = OP(x)\nexcept ValueError:\n    z = y\nfinally:\n    w = y * 2\nreturn z + w",
    "no_grad": "with torch.no_grad():\n    z = OP(x)\nreturn z + y",
    "nullcontext": "with contextlib.nullcontext():\n    z = OP(x) * 2\nreturn z",
    "assert": "assert x.dim() == 2, 'need a matrix'\nreturn OP(x)",
    "shape_branch": "if x.shape[0] == 4 and x.size(1) > 1:\n    return OP(x) + y\nreturn y",
    "dtype_device": "if x.dtype == torch.float32 and x.device.type == 'cpu' and not x.requires_grad:\n    return OP(x)\nreturn y",
    "is_contiguous": "if x.is_contiguous() and y.dim() == 2:\n    return OP(x) * y.numel()\nreturn y",
    "unpack_ex": "a, *rest = [x, y, x]\nreturn OP(a) + rest[0] + rest[-1]",
    "tuple_concat": "t = (x,) + (y,)\nreturn OP(t[0]) + t[1]",
    "slice_list": "ts = [x, y, x, y][1:3]\nreturn OP(ts[0]) + ts[1]",
    "in_list": "mode = 'b'\nif mode in ('a', 'b'):\n    return OP(x)\nreturn y",
    "tuple_return": "return OP(x), (y, [x + 1])",
    "dict_return": "return {'out': OP(x), 'aux': y * 2}",
    "dict_fromkeys": "d = dict.fromkeys(['a', 'b'], 2.0)\nreturn OP(x) * d['a'] + d['b']",
    "namedtuple": "p = Pair(OP(x), b=y)\nreturn p.a + p[1] * len(p)",
    "namedtuple_return": "return Pair(OP(x), y + 1)",
    "dataclass": "b = Box(OP(x))\nreturn b.value() + b.total",
    "dataclass_return": "return Box(OP(x), scale=3.0)",
    "user_object": "acc = Acc(x).add(OP(y)).add(y)\nreturn acc.last + acc.items[1]",
    "super": "c = Child(2.0)\nreturn c.f(OP(x)) + c.s",
    # sets built in the frame (BUILD_SET / SET_ADD / SET_UPDATE, set(), methods, operators)
    "set_display": "k = x.dim()\ns = {k, 3, 'a'}\nif 2 in s and 5 not in s:\n    return OP(x) * len(s)\nreturn y",
    "set_comp": "s = {i % 3 for i in range(7)}\nacc = x\nfor v in sorted(s):\n    acc = acc + OP(y) * v\nreturn acc",
    "set_update_star": "xs = [1, 2, 2, x.size(0)]\ns = {*xs, 9}\nreturn OP(x) * len(s) + sum(s)",
    "set_builtin": "s = set([x.size(1), 6, 1])\nt = set()\nif not t and s:\n    return OP(x) + len(s)\nreturn y",
    "set_add_discard": "s = {1}\ns.add(x.dim())\ns.add(1)\ns.discard(7)\ns.remove(1)\nreturn OP(x) * len(s) + min(s)",
    "set_ops": "a = {1, 2, x.dim()}\nb = {2, 3}\nn = len(a | b) * 100 + len(a & b) * 10 + len(a - b)\nreturn OP(x) + n + len(a ^ b)",
    "set_inplace_ops": "a = {1, 2, 3}\na |= {4}\na -= {1}\na &= {2, 3, 4, 5}\nreturn OP(y) * sum(a)",
    "set_methods": "a = {1, 2, 3}\nu = a.union([4], (5,))\ni = a.intersection({2, 3, 9})\nd = a.difference({1})\nreturn OP(x) * len(u) + sum(i) - sum(d)",
    "set_update_method": "s = set()\nfor name in ('w', 'b', 'w'):\n    s.update([name])\nacc = x\nfor n in sorted(s):\n    acc = acc + OP(y) * len(n)\nreturn acc",
    "set_subset": "a = {1, 2}\nb = {1, 2, 3}\nif a <= b and a < b and b >= a and a.issubset(b) and a != b and a == {2, 1}:\n    return OP(x)\nreturn y",
    "set_iterate_order": "s = {'q', 'w', 'e', 'r', 7, 3.5, None}\nacc = x\nfor i, v in enumerate(s):\n    acc = acc + OP(y) * (i + 1) * len(str(v))\nreturn acc",
    "set_list_tuple": "s = {3, 1, 2}\nl = list(s)\nt = tuple(s)\nreturn OP(x) * l[0] + t[-1] + len(l)",
    "set_tuple_elems": "s = {(1, 'a'), (2, 'b'), (1, 'a')}\nif (2, 'b') in s and (x.dim(), 'b') in s:\n    return OP(x) * len(s)\nreturn y",
    "set_dtypes": "s = {x.dtype, torch.float64}\nif torch.float32 in s:\n    return OP(x).to(torch.float64 if len(s) > 2 else x.dtype)\nreturn y",
    "set_return": "s = {1, 2}\ns.add(x.dim() + 10)\nreturn OP(x), s",
    "set_in_list_return": "s = set()\ns.add('k')\nreturn [OP(x), s, frozenset(s)]",
    "set_any_all": "s = {1, 2, 3}\nif all(v > 0 for v in s) and any(v == 3 for v in s) and max(s) == 3:\n    return OP(x) + y\nreturn y",
    "set_dedupe_keys": "d = {'a': x, 'b': y}\nseen = set()\nacc = 0\nfor k in ['a', 'b', 'a']:\n    if k in seen:\n        continue\n    seen.add(k)\n    acc = acc + OP(d[k])\nreturn acc",
    "set_pop_copy": "s = {5}\nc = s.copy()\nv = s.pop()\nc.clear()\nreturn OP(x) * v + len(s) + len(c)",
    "set_isinstance_truth": "s = {0}\nif isinstance(s, set) and s and not set():\n    return OP(x)\nreturn y",
}

HEADER = """import torch, math, operator, functools, itertools, contextlib, collections, dataclasses
import torch.nn.functional as F
Pair = collections.namedtuple('Pair', ['a', 'b'])

@dataclasses.dataclass
class Box:
    a: torch.Tensor
    scale: float = 2.0

    def __post_init__(self):
        self.total = self.scale + 1

    def value(self):
        return self.a * self.scale

class Acc:
    def __init__(self, start):
        self.items = [start]

    def add(self, t):
        self.items.append(t)
        return self

    @property
    def last(self):
        return self.items[-1]

class Base:
    def __init__(self, s):
        self.s = s

    def f(self, t):
        return t * self.s

class Child(Base):
    def __init__(self, s):
        super().__init__(s + 1)

    def f(self, t):
        return super().f(t) + 1
"""


def _make(construct, op):
    body = CONSTRUCTS[construct].replace("OP", op)
    name = f"c_{construct}_{op.replace('.', '_')}"
    src = HEADER + f"def {name}(x, y):\n" + "".join("    " + line + "\n" for line in body.splitlines())
    ns = {}
    exec(compile(src, f"<corpus {name}>", "exec"), ns)
    return ns[name]


CASES = [(c, op) for c in CONSTRUCTS for op in OPS]


def _inputs(shape=(4, 6)):
    g = torch.Generator().manual_seed(hash(shape) % 1000)
    return torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)


@pytest.mark.parametrize("construct,op", CASES, ids=[f"{c}-{o}" for c, o in CASES])
def test_corpus(construct, op):
    fn = _make(construct, op)
    x, y = _inputs()
    expected = fn(x, y)
    got = compiled(fn)(x, y)
    if dataclasses.is_dataclass(expected):
        assert type(got) is type(expected)
        got, expected = vars(got), vars(expected)
    assert_same(got, expected)
    es = entries(fn)
    assert len(es) == 1, es
    e = es[0]
    assert not e["eager"], e["reason"]
    assert e["graph_count"] == 1


@pytest.mark.skipif(not os.environ.get("WICK_CORPUS_DYNAMO"), reason="set WICK_CORPUS_DYNAMO=1 to compare with Dynamo")
@pytest.mark.parametrize("construct", list(CONSTRUCTS))
def test_corpus_is_one_graph_for_dynamo(construct):
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    fn = _make(construct, "torch.relu")
    cnt = CompileCounter()
    x, y = _inputs()
    torch.compile(fn, backend=cnt)(x, y)
    assert cnt.frame_count == 1
