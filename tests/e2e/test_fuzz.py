"""Differential fuzzing of wick against eager PyTorch on a fixed-seed corpus.

Each program (tests/e2e/fuzzlib.py) is random straight-line torch code from
the supported slice; it runs eagerly and through wick.compile on three calls
(first inputs, new values of the same signature, a new shape, and
contiguous copies when an input was strided) and must give
the same results, raise the same exception type as eager, or fall back with a
recorded reason. A failure prints a minimized repro of the program.

Bigger campaigns: python tests/e2e/fuzzlib.py campaign --start 0 --count 5000
"""
import collections
import os
import sys

import pytest
import torch

import wick

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzzlib  # noqa: E402

CHUNK = 25
CHUNKS = 12  # 300 programs; about a minute on two cores

# Corpus seeds that hit a known wick bug. They are left out of the corpus (not
# xfailed) so it stays green; each bug has its own minimal test below that
# fails until the bug is fixed. Put a seed back once its bug is fixed.
KNOWN_BUG_SEEDS = {}

_stats = collections.Counter()
_reasons = collections.Counter()


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WICK_CACHE_DIR", str(tmp_path / "cache"))
    wick._C.env_reload()
    wick.reset()
    yield
    wick.reset()
    monkeypatch.undo()
    wick._C.env_reload()


def _check_seeds(seeds):
    failures = []
    for seed in seeds:
        if seed in KNOWN_BUG_SEEDS:
            continue
        prog = fuzzlib.generate(seed)
        out = fuzzlib.check_program(prog)
        wick.reset()
        _stats[out.status] += 1
        _stats["graphs>0"] += out.graphs > 0
        for r in out.reasons:
            _reasons[r] += 1
        if out.status == "fail":
            small = fuzzlib.minimize(prog, out.kind, budget=60)
            failures.append(f"seed {seed}: {out.kind}: {out.detail}\n--- minimized ---\n{small.repro()}\n"
                            f"--- original ---\n{prog.source()}")
    return failures


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_fuzz_corpus_matches_eager(chunk):
    failures = _check_seeds(range(chunk * CHUNK, (chunk + 1) * CHUNK))
    assert not failures, "\n\n".join(failures)


def test_fuzz_corpus_mostly_compiles():
    """Runs after the corpus: the supported slice must compile, not fall back."""
    if _stats["ok"] + _stats["fallback"] < CHUNK * CHUNKS // 2:
        _check_seeds(range(CHUNK))  # run alone: use one chunk
    total = _stats["ok"] + _stats["fallback"]
    assert total > 0
    assert _stats["graphs>0"] >= 0.8 * total, f"{_stats}"
    assert _stats["fallback"] <= 0.05 * total, f"fallbacks: {dict(_reasons)}"


def test_generator_covers_the_slice():
    """The corpus exercises what it claims: layouts, dtypes, reductions, eager errors."""
    srcs = [fuzzlib.generate(s) for s in range(CHUNK * CHUNKS)]
    text = "\n".join(p.source() for p in srcs)
    for needle in ("torch.where", "alpha=", "keepdim=True", "dtype=torch.", ".amax(", "torch.mean(", "**", "-v",
                   "torch.sigmoid", ".tanh()", "torch.log", "sqrt", ">=", "=="):
        assert needle in text, needle
    layouts = collections.Counter(a.layout[0] for p in srcs for a in p.args if a.kind == "tensor")
    assert all(layouts[k] > 20 for k in ("contig", "perm", "slice", "expand")), layouts
    dtypes = collections.Counter(a.dtype for p in srcs for a in p.args if a.kind == "tensor")
    assert all(dtypes[k] > 20 for k in fuzzlib.DTYPES), dtypes
    assert sum(p.ret == "None" for p in srcs) >= 3  # programs that raise in eager
    assert sum(0 in p.base for p in srcs) >= 10 and sum(len(p.base) == 0 for p in srcs) >= 10
    assert any(a.kind == "scalar" for p in srcs for a in p.args)


def test_harness_detects_differences():
    """The comparison is not vacuous: it sees wrong values, dtypes, identity and NaN."""
    x = torch.randn(6)
    assert fuzzlib.compare(x, x.clone(), [], 1) is None
    assert fuzzlib.compare(x, x.clone(), [x], 1)  # an input must come back as itself
    assert fuzzlib.compare(x, x + 1e-3, [], 1)
    assert fuzzlib.compare(x, x.double(), [], 1)
    assert fuzzlib.compare((x, 1), (x.clone(), 1), [x], 1)  # input must come back as itself
    assert fuzzlib.compare((x, 1), (x, 1.0), [x], 1)
    nan = torch.tensor([1.0, float("nan")])
    assert fuzzlib.compare(nan, nan.clone(), [], 1) is None
    assert fuzzlib.compare(nan, torch.tensor([1.0, float("inf")]), [], 1)


# ---------------------------------------------------------------- bugs the fuzzer found
# Minimal repros, compared with eager. test_bug_* fail until the bug is fixed;
# the others are regressions for bugs that were fixed.


def test_float64_reduction_of_float32_values_accumulates_in_float64():
    """Regression (found by the fuzzer, fixed): sum/mean(dtype=torch.float64) and
    .to(torch.float64).sum() of float32 data accumulated the float32 value in a
    float block accumulator, so the float64 result carried float32 rounding."""


    x = (torch.randn(33, generator=torch.Generator().manual_seed(0)) * 1e3).float()
    for fn in (lambda t: t.mean(dtype=torch.float64), lambda t: torch.sum(t, dtype=torch.float64),
               lambda t: t.to(torch.float64).sum()):
        fast = wick.compile(fn)
        torch.testing.assert_close(fast(x), fn(x), rtol=1e-12, atol=1e-9)


def test_sub_alpha_with_bool_operand_raises():
    """Regression (found by the fuzzer, fixed): torch.sub(x, mask, alpha=3) raises
    in eager (subtraction with a bool tensor); wick computed x - 3*mask."""


    x, m = torch.randn(3), torch.tensor([True, False, True])

    def f(x, m):
        return torch.sub(x, m, alpha=3)

    with pytest.raises(RuntimeError):
        f(x, m)
    with pytest.raises(RuntimeError):
        wick.compile(f)(x, m)


def test_bool_add_with_alpha_keeps_bool_dtype():
    """Regression (found by the fuzzer, fixed): m.add(n, alpha=2) on bool tensors is
    bool in eager; wick returned int64 (alpha became MUL(other, int scalar))."""


    m = torch.tensor([True, False, True, False])
    n = torch.tensor([True, True, False, False])

    def f(m, n):
        return m.add(n, alpha=2)

    expected = f(m, n)
    got = wick.compile(f)(m, n)
    assert got.dtype == expected.dtype == torch.bool
    assert torch.equal(got, expected)


def test_int32_add_bool_with_alpha_keeps_int32():
    """Regression (found by the fuzzer, fixed): torch.add(int32, bool, alpha=2) is
    int32 in eager; wick gave int64 (same root cause as above)."""
    i = torch.arange(-3, 4, dtype=torch.int32)
    m = torch.tensor([True, False, True, True, False, False, True])

    def f(i, m):
        return torch.add(i, m, alpha=2)

    expected = f(i, m)
    got = wick.compile(f)(i, m)
    assert got.dtype == expected.dtype == torch.int32
    assert torch.equal(got, expected)


def test_bug_outer_reduction_epilogue_reusing_a_load_compiles():
    """An input read inside a reduction over a non-innermost dim and again in its
    pointwise epilogue: the generated C uses a temporary declared only inside
    the reduction loop ('tNN undeclared'), cc fails, and the graph falls back."""
    x, w = torch.randn(8, 2, 3), torch.randn(2, 3)

    def f(x, w):
        return w + (x * w).sum(0)

    report = wick.explain(f)(x, w)
    torch.testing.assert_close(report.result, f(x, w))
    assert report.break_reasons == []
    assert report.graph_count == 1


def test_bug_relu_keeps_negative_zero():
    """torch.relu(-0.0) is -0.0 (clamp_min keeps x when it is not below 0), so
    1 / relu(x) is -inf there; wick's relu gives +0.0 and so +inf."""
    x = torch.tensor([-0.0, 0.0, -1.0, 2.0] * 5)

    def f(x):
        return 1 / x.relu()

    torch.testing.assert_close(wick.compile(f)(x), f(x))
