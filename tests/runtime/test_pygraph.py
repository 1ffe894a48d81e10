"""wick._C.Graph: building graphs from Python, argument errors, introspection."""
import pytest
import torch

import wick._C as C


def test_build_and_introspect():
    g = C.Graph()
    a = g.input("float32", (3, 4), (4, 1), source="L['a']")
    b = g.input(torch.float64, [4], [1], requires_grad=True, source="L['b']")
    s = g.scalar(2)
    f = g.scalar(0.5)
    t = g.scalar(True)
    c = g.op("ADD", [a, b])
    d = g.op("mul", [c, s])
    r = g.op("sum", [d], dims=-1, keepdim=True, dtype=torch.float64)
    m = g.op("amax", [d], dims=(0, 1))
    v = g.op("convert", [a], dtype="int64")
    g.output(r)
    g.output(a)
    g.output(r)
    assert len({a, b, s, f, t, c, d, r, m, v}) == 10

    ins = g.inputs()
    assert [i["id"] for i in ins] == [a, b]
    assert ins[0]["dtype"] == "float32" and ins[0]["sizes"] == (3, 4) and ins[0]["strides"] == (4, 1)
    assert ins[0]["source"] == "L['a']" and ins[0]["requires_grad"] is False
    assert ins[1]["dtype"] == "float64" and ins[1]["requires_grad"] is True and ins[1]["device"] == "cpu"

    nodes = g.nodes()
    by_out = {n["output"]: n for n in nodes}
    assert by_out[s]["op"] == "SCALAR" and by_out[s]["value"] == 2 and by_out[s]["dtype"] == "int64"
    assert by_out[f]["value"] == 0.5 and by_out[f]["dtype"] == "float64"
    assert by_out[t]["value"] is True and by_out[t]["dtype"] == "bool"
    assert by_out[c]["op"] == "ADD" and by_out[c]["inputs"] == [a, b]
    assert by_out[r]["op"] == "SUM" and by_out[r]["dims"] == (1,) and by_out[r]["keepdim"] is True
    assert by_out[r]["dtype"] == "float64"
    assert by_out[m]["dims"] == (0, 1) and by_out[m]["keepdim"] is False
    assert by_out[v]["op"] == "CONVERT" and by_out[v]["dtype"] == "int64"
    assert g.outputs() == [r, a, r]

    assert g.value(c)["dtype"] == "float64" and g.value(c)["sizes"] == (3, 4)
    assert g.value(c)["strides"] == (4, 1)
    assert g.value(r)["sizes"] == (3, 1)
    assert g.value(m)["sizes"] == ()
    text = g.print()
    assert "ADD" in text and "SUM" in text and "L['a']" in text
    assert "3 outputs" in repr(g)


def test_input_like_reads_the_tensor():
    g = C.Graph()
    t = torch.randn(5, 6, dtype=torch.float64).t()[1:]
    i = g.input_like(t, source="x")
    d = g.inputs()[0]
    assert d["id"] == i
    assert d["sizes"] == tuple(t.shape) and d["strides"] == t.stride()
    assert d["dtype"] == "float64" and d["source"] == "x"
    p = torch.nn.Parameter(torch.randn(3))
    g.input_like(p)
    assert g.inputs()[1]["requires_grad"] is True
    e = torch.randn(1, 4).expand(3, 4)
    g.input_like(e)
    assert g.inputs()[2]["strides"] == (0, 1)
    g.input_like(torch.tensor(3))
    assert g.inputs()[3]["sizes"] == () and g.inputs()[3]["dtype"] == "int64"


def test_argument_errors():
    g = C.Graph()
    a = g.input("float32", (2,), (1,))
    with pytest.raises(ValueError, match="unknown dtype"):
        g.input("float33", (2,), (1,))
    with pytest.raises(ValueError, match="2 sizes but 1 strides"):
        g.input("float32", (2, 3), (1,))
    with pytest.raises(ValueError, match="negative size"):
        g.input("float32", (-2,), (1,))
    with pytest.raises(ValueError, match="at most"):
        g.input("float32", (1,) * 9, (1,) * 9)
    with pytest.raises(ValueError, match="unsupported device"):
        g.input("float32", (2,), (1,), device="tpu")
    with pytest.raises(TypeError):
        g.input("float32", (2.5,), (1,))
    with pytest.raises(ValueError, match="unknown op 'frobnicate'"):
        g.op("frobnicate", [a])
    with pytest.raises(ValueError, match="no value with id 42"):
        g.op("add", [a, 42])
    with pytest.raises(ValueError, match="no value with id -1"):
        g.output(-1)
    with pytest.raises(ValueError, match="ADD takes 2 inputs, got 4"):
        g.op("add", [a, a, a, a])
    with pytest.raises(ValueError, match="scalar"):
        g.op("scalar", [])
    with pytest.raises(ValueError, match="CONVERT needs a dtype"):  # never a silent bool
        g.op("convert", [a])
    g2 = C.Graph()
    assert g2.value(g2.op("convert", [g2.input("float32", (2,), (1,))], dtype="bool"))["dtype"] == "bool"
    with pytest.raises(TypeError, match="bool, int or float"):
        g.scalar("1")
    with pytest.raises(OverflowError):
        g.scalar(2 ** 70)
    # The graph builder's own rules surface as ValueError with its message.
    with pytest.raises(ValueError, match="bool"):
        g.op("where", [a, a, a])
    with pytest.raises(ValueError):
        g.op("sum", [a], dims=3)
    with pytest.raises(ValueError):
        g.op("add", [a])
    # The graph is still usable after errors.
    g.output(g.op("neg", [a]))
    assert len(g.nodes()) == 1


def test_compile_error_type():
    assert issubclass(C.CompileError, Exception)
    g = C.Graph()
    x = g.input("float32", (3,), (1,), device="cuda:0")
    y = g.input("float32", (3,), (1,), device="cpu")
    assert g.inputs()[0]["device"] == "cuda:0"
    g.output(g.op("exp", [x]))
    g.output(g.op("exp", [y]))
    with pytest.raises(C.CompileError):  # values on two devices: on every machine
        g.compile()
