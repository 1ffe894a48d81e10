"""Seeded random graphs of pointwise ops and reductions with broadcasting,
built through wick._C.Graph next to the same computation in eager torch:
exercises materialisation, inlining, grouping, epilogues, row fusion and
dimension collapsing together on shapes and layouts nobody picked by hand."""
import random

import pytest
import torch

import wick._C as C

UNARY = {
    "exp": lambda g, a: g.op("exp", [g.op("neg", [g.op("abs", [a])])]),
    "tanh": lambda g, a: g.op("tanh", [a]),
    "neg": lambda g, a: g.op("neg", [a]),
    "relu": lambda g, a: g.op("relu", [a]),
    "sigmoid": lambda g, a: g.op("sigmoid", [a]),
    "sqrtabs": lambda g, a: g.op("sqrt", [g.op("abs", [a])]),
    "log1abs": lambda g, a: g.op("log", [g.op("add", [g.op("abs", [a]), g.scalar(1.0)])]),
    "square": lambda g, a: g.op("pow", [a, g.scalar(2)]),
}
UNARY_T = {
    "exp": lambda a: torch.exp(-a.abs()), "tanh": torch.tanh, "neg": torch.neg, "relu": torch.relu,
    "sigmoid": torch.sigmoid, "sqrtabs": lambda a: a.abs().sqrt(), "log1abs": lambda a: torch.log(a.abs() + 1.0),
    "square": lambda a: a ** 2,
}
BINARY = {
    "add": lambda g, a, b: g.op("add", [a, b]),
    "sub": lambda g, a, b: g.op("sub", [a, b]),
    "mul": lambda g, a, b: g.op("mul", [a, b]),
    "div": lambda g, a, b: g.op("div", [a, g.op("add", [g.op("abs", [b]), g.scalar(1.0)])]),
    "maximum": lambda g, a, b: g.op("maximum", [a, b]),
    "minimum": lambda g, a, b: g.op("minimum", [a, b]),
}
BINARY_T = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": lambda a, b: a / (b.abs() + 1.0),
    "maximum": torch.maximum, "minimum": torch.minimum,
}


def random_input(rng, A, B):
    shape = rng.choice([(A, B), (A, B), (B,), (A, 1), (1, B), ()])
    layout = rng.choice(["contig", "transposed", "expanded"])
    dtype = rng.choice([torch.float32, torch.float32, torch.float32, torch.float64])
    gen = torch.Generator().manual_seed(rng.randrange(1 << 30))
    if layout == "transposed" and len(shape) == 2:
        t = torch.randn(shape[::-1], generator=gen, dtype=dtype).t()
    elif layout == "expanded" and len(shape) == 2 and shape[0] > 1:
        t = torch.randn((1, shape[1]), generator=gen, dtype=dtype).expand(shape)
    else:
        t = torch.randn(shape, generator=gen, dtype=dtype)
    return t


@pytest.mark.parametrize("seed", range(40))
def test_random_graph(seed):
    rng = random.Random(seed)
    A, B = rng.randint(1, 70), rng.randint(1, 300)
    if seed % 10 == 0:
        A, B = rng.randint(200, 400), rng.randint(300, 600)  # big enough for the parallel paths
    inputs = [random_input(rng, A, B) for _ in range(rng.randint(1, 3))]
    g = C.Graph()
    pool = [(g.input_like(t), t) for t in inputs]
    for _ in range(rng.randint(2, 12)):
        kind = rng.random()
        if kind < 0.35:
            name = rng.choice(list(UNARY))
            v, t = rng.choice(pool)
            pool.append((UNARY[name](g, v), UNARY_T[name](t)))
        elif kind < 0.75:
            name = rng.choice(list(BINARY))
            (v1, t1), (v2, t2) = rng.choice(pool), rng.choice(pool)
            try:
                want = BINARY_T[name](t1, t2)
            except RuntimeError:  # shapes that do not broadcast: torch refuses, skip
                continue
            pool.append((BINARY[name](g, v1, v2), want))
        else:
            v, t = rng.choice(pool)
            if t.dim() == 0:
                continue
            op = rng.choice(["sum", "mean", "amax"])
            dim = rng.randrange(t.dim())
            keep = rng.random() < 0.7
            if op == "amax" and t.shape[dim] == 0:
                continue
            pool.append((g.op(op, [v], dims=[dim], keepdim=keep), getattr(torch, op)(t, dim=dim, keepdim=keep)))
    outs = [pool[-1]] + rng.sample(pool, min(len(pool), rng.randint(1, 3)))
    for v, _ in outs:
        g.output(v)
    cg = g.compile()
    got = cg(*inputs)
    assert len(got) == len(outs)
    for r, (_, want) in zip(got, outs):
        assert r.dtype == want.dtype and r.shape == want.shape
        torch.testing.assert_close(r, want, rtol=1e-4, atol=1e-5, equal_nan=True)
