"""The user's contract (DESIGN.md): wick.compile / explain / reset / stats,
fullgraph, nn.Module, WICK_LOG and WICK_DEBUG_DIR, torch.compile(backend="wick"),
all compared with eager PyTorch."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import wick

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("WICK_CACHE_DIR", str(tmp_path / "cache"))
    wick._C.env_reload()
    wick.reset()
    yield
    wick.reset()


def block(x, bias, scale: float):
    h = (x + bias) * scale
    g = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))
    m = g.amax(dim=-1, keepdim=True)
    e = torch.exp(g - m)
    return e / e.sum(dim=-1, keepdim=True)


def test_compile_matches_eager_and_makes_one_graph():
    x, b = torch.randn(33, 17), torch.randn(17)
    fast = wick.compile(block)
    torch.testing.assert_close(fast(x, b, 0.5), block(x, b, 0.5))
    report = wick.explain(fast)(x, b, 0.5)
    assert report.graph_count == 1
    assert report.break_reasons == []
    assert "AMAX" in report.graphs[0] and "SUM" in report.graphs[0]
    assert any("float32" in g for g in report.guards[0])
    torch.testing.assert_close(report.result, block(x, b, 0.5))


def test_explain_names_the_fallback_reason_and_line():
    def uses_item(x, w):
        y = x * 2.0
        return torch.matmul(y, w) * y.sum().item()  # a Python number from tensor data

    x, w = torch.randn(4, 5), torch.randn(5, 3)
    report = wick.explain(uses_item)(x, w)
    torch.testing.assert_close(report.result, uses_item(x, w))
    # a graph break: the tensor work before .item() and the product after it
    assert report.graph_count == 2
    assert len(report.break_reasons) == 1 and len(report.breaks) == 1
    reason = report.break_reasons[0]
    assert "test_public_api.py" in reason and "item" in reason
    assert report.breaks[0]["line"] == uses_item.__code__.co_firstlineno + 2


def test_fullgraph_raises_with_reason():
    def prints(x):
        print("side effect")
        return x + 1

    with pytest.raises(wick.UnsupportedError, match="test_public_api.py"):
        wick.compile(prints, fullgraph=True)(torch.randn(3))


def test_reset_forgets_entries():
    def f(x):
        return x.exp() + 1

    fast = wick.compile(f)
    fast(torch.randn(8))
    assert wick.stats()["graphs"] == 1
    wick.reset()
    assert wick.stats()["graphs"] == 0
    x = torch.randn(8)
    torch.testing.assert_close(fast(x), f(x))  # recompiles after the reset
    assert len(wick._C.code_entries(f.__code__)) == 1


def test_module_forward_is_compiled_or_falls_back_correctly():
    class Act(torch.nn.Module):
        def forward(self, x):
            return torch.sigmoid(x) * x

    mod = Act()
    fast = wick.compile(mod)
    x = torch.randn(6, 7)
    torch.testing.assert_close(fast(x), mod(x))
    report = wick.explain(fast)(x)
    assert report.graph_count == 1, report.break_reasons
    report = wick.explain(mod)(x)  # a plain module works too
    torch.testing.assert_close(report.result, mod(x))


def test_bad_arguments_give_clear_errors():
    with pytest.raises(ValueError, match="mode"):
        wick.compile(block, mode="fastest")
    with pytest.raises(TypeError):
        wick.compile(42)


def test_torch_compile_backend_wick():
    def f(x, y):
        return (x * y + 1.0).relu().sum(-1)

    x, y = torch.randn(5, 9), torch.randn(9)
    torch._dynamo.reset()
    out = torch.compile(f, backend="wick")(x, y)
    torch.testing.assert_close(out, f(x, y))


def test_wick_capture_with_eager_backend():
    def f(x):
        return torch.tanh(x) * 3 - x

    x = torch.randn(10, 3)
    torch.testing.assert_close(wick.compile(f, backend="eager")(x), f(x))


def test_log_and_debug_dir(tmp_path):
    script = textwrap.dedent(
        """
        import torch, wick
        def f(x):
            return (x + 1).exp().sum()
        wick.compile(f)(torch.randn(16))
        """
    )
    env = dict(os.environ, WICK_LOG="graphs,code", WICK_DEBUG_DIR=str(tmp_path / "dbg"),
               WICK_CACHE_DIR=str(tmp_path / "c"), PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "[wick:graphs]" in proc.stderr
    dumped = os.listdir(tmp_path / "dbg")
    assert any(name.endswith(".c") for name in dumped), dumped
