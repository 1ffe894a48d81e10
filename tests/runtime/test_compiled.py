"""wick._C.CompiledGraph: graphs built by hand, compiled by wick's pipeline,
run by the runtime, compared with eager PyTorch on real inputs."""
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import wick._C as C

# ---- inputs ----------------------------------------------------------------


def rand(shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen, dtype=dtype)
    return torch.randint(-5, 6, shape, generator=gen, dtype=dtype)


def layout(t, kind):
    """The same values in another memory layout (the runtime must honour strides)."""
    if kind == "contiguous" or t.dim() == 0:
        return t
    if kind == "transposed":
        return t.transpose(0, -1).contiguous().transpose(0, -1)
    if kind == "sliced":  # every other element of a wider buffer, with a storage offset
        wide = torch.empty(*t.shape[:-1], 2 * t.shape[-1] + 1, dtype=t.dtype)
        wide[..., 1::2] = t
        return wide[..., 1::2]
    if kind == "expanded":  # stride 0 along dim 0
        row = t[:1].clone()
        return row.expand(t.shape)
    raise ValueError(kind)


def check_close(got, want):
    assert isinstance(got, tuple)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, torch.Tensor)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.dtype.is_floating_point:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, equal_nan=True)
        else:
            assert torch.equal(g, w)


def compile_graph(build, inputs):
    g = C.Graph()
    ids = [g.input_like(t, source=f"L['a{i}']") for i, t in enumerate(inputs)]
    outs = build(g, *ids)
    for o in outs:
        g.output(o)
    return g, g.compile()


def run_case(build, ref, inputs):
    _, cg = compile_graph(build, inputs)
    got = cg(*inputs)
    check_close(got, ref(*inputs))
    return cg


# ---- cases: (graph builder, eager reference, dtypes) -----------------------

def b_arith(g, a, b):
    s = g.op("add", [a, b])
    t = g.op("mul", [s, g.scalar(2)])
    return [g.op("sub", [t, g.op("div", [b, g.scalar(3)])])]


def r_arith(a, b):
    return [(a + b) * 2 - b / 3]


def b_unary(g, a, b):
    e = g.op("exp", [g.op("neg", [g.op("abs", [a])])])
    q = g.op("sqrt", [g.op("abs", [b])])
    st = g.op("mul", [g.op("sigmoid", [a]), g.op("tanh", [b])])
    lg = g.op("log", [g.op("add", [g.op("abs", [b]), g.scalar(1.0)])])
    return [g.op("add", [g.op("add", [e, q]), g.op("add", [st, lg])]), g.op("relu", [a])]


def r_unary(a, b):
    return [(torch.exp(-torch.abs(a)) + torch.sqrt(torch.abs(b))) + (torch.sigmoid(a) * torch.tanh(b) + torch.log(torch.abs(b) + 1.0)),
            torch.relu(a)]


def b_select(g, a, b):
    gt = g.op("gt", [a, b])
    return [g.op("where", [gt, a, b]), gt, g.op("maximum", [a, b]), g.op("minimum", [a, b]),
            g.op("eq", [a, b]), g.op("le", [a, g.scalar(0)])]


def r_select(a, b):
    return [torch.where(a > b, a, b), a > b, torch.maximum(a, b), torch.minimum(a, b), a == b, a <= 0]


def b_reduce(g, a, b):
    s = g.op("add", [a, b])
    return [g.op("sum", [s], dims=-1, keepdim=True), g.op("sum", [s]), g.op("amax", [s], dims=(0,)),
            g.op("mean", [s], dims=(0, 1))]


def r_reduce(a, b):
    s = a + b
    return [s.sum(-1, keepdim=True), s.sum(), s.amax((0,)), s.mean((0, 1))]


def b_int_reduce(g, a, b):
    s = g.op("mul", [a, b])
    return [g.op("sum", [s], dims=(1,)), g.op("sum", [s], dtype="float64"), g.op("amax", [s], dims=1, keepdim=True)]


def r_int_reduce(a, b):
    s = a * b
    return [s.sum((1,)), s.sum(dtype=torch.float64), s.amax(1, keepdim=True)]


def b_convert(g, a, b):
    return [g.op("add", [g.op("convert", [a], dtype="float64"), b]), g.op("convert", [b], dtype=torch.int64)]


def r_convert(a, b):
    return [a.to(torch.float64) + b, b.to(torch.int64)]


def b_pow(g, a, b):
    return [g.op("pow", [g.op("add", [g.op("abs", [a]), g.scalar(1)]), g.scalar(2)]), g.op("pow", [a, g.scalar(3)])]


def r_pow(a, b):
    return [torch.pow(torch.abs(a) + 1, 2), a ** 3]


FLOATS = [torch.float32, torch.float64]
CASES = {
    "arith": (b_arith, r_arith, FLOATS + [torch.int64]),
    "unary": (b_unary, r_unary, FLOATS),
    "select": (b_select, r_select, FLOATS + [torch.int64]),
    "reduce": (b_reduce, r_reduce, FLOATS),
    "int_reduce": (b_int_reduce, r_int_reduce, [torch.int64]),
    "convert": (b_convert, r_convert, [torch.float32]),
    "pow": (b_pow, r_pow, FLOATS + [torch.int64]),
}
SHAPES = [((5, 7), (5, 7)), ((6, 7), (7,)), ((1, 13), (9, 1)), ((33, 65), (33, 65)), ((4, 0), (4, 0))]
LAYOUTS = ["contiguous", "transposed", "sliced", "expanded"]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: "x".join(map(str, s[0])) + "_" + "x".join(map(str, s[1])))
def test_matches_eager(case, shapes):
    build, ref, dtypes = CASES[case]
    needs_2d = case in ("reduce", "int_reduce")
    for dtype in dtypes:
        for i, lay in enumerate(LAYOUTS):
            a = rand(shapes[0], dtype, seed=1 + i)
            b = rand(shapes[1] if not needs_2d else shapes[0], dtype, seed=100 + i)
            if case == "reduce" and a.numel() == 0:
                continue  # amax over zero elements is an error in torch too
            if case == "int_reduce" and a.numel() == 0:
                continue
            a, b = layout(a, lay), layout(b, "contiguous" if lay == "expanded" else lay)
            run_case(build, ref, [a, b])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_zero_dim_and_bool(dtype):
    a, b = rand((), dtype, 3), rand((4, 3), dtype, 4)
    run_case(lambda g, x, y: [g.op("eq", [x, y]), g.op("where", [g.op("ne", [x, y]), x, y])],
             lambda x, y: [x == y, torch.where(x != y, x, y)], [a, b])


def test_output_aliases_input_and_repeats():
    a, b = rand((3, 4), torch.float32, 1), rand((4,), torch.float32, 2)

    def build(g, x, y):
        s = g.op("add", [x, y])
        return [s, x, s, y, x]

    _, cg = compile_graph(build, [a, b])
    out = cg(a, b)
    assert len(out) == 5
    assert out[1] is a and out[4] is a and out[3] is b
    assert out[0] is out[2]
    assert out[0] is not a
    torch.testing.assert_close(out[0], a + b)
    out2 = cg(a, b)
    assert out2[0] is not out[0]  # fresh outputs per call


def test_only_inputs_returned():
    a = rand((2, 3), torch.float64, 5)
    _, cg = compile_graph(lambda g, x: [x], [a])
    out = cg(a)
    assert out == (a,) and out[0] is a


def test_many_buffers():
    """More buffers than the call keeps on its stack."""
    a = rand((8,), torch.float32, 7)

    def build(g, x):
        outs, v = [], x
        for i in range(24):
            v = g.op("add", [v, g.scalar(float(i))])
            outs.append(v)
        return outs

    _, cg = compile_graph(build, [a])
    out = cg(a)
    want, v = [], a
    for i in range(24):
        v = v + float(i)
        want.append(v)
    check_close(out, want)


def test_input_validation():
    a, b = rand((3, 4), torch.float32, 1), rand((4,), torch.float32, 2)
    _, cg = compile_graph(lambda g, x, y: [g.op("add", [x, y])], [a, b])
    with pytest.raises(TypeError, match="takes 2 input tensors, got 1"):
        cg(a)
    with pytest.raises(TypeError, match="takes 2 input tensors, got 3"):
        cg(a, b, b)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        cg(a, [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="dtype torch.float64, expected torch.float32"):
        cg(a, b.double())
    with pytest.raises(ValueError, match=r"shape \(5,\), expected \(4,\)"):
        cg(a, rand((5,), torch.float32, 3))
    with pytest.raises(ValueError, match=r"shape \(3, 4, 1\)"):
        cg(a.unsqueeze(-1), b)
    with pytest.raises(ValueError, match=r"strides \(1, 3\), expected \(4, 1\)"):
        cg(layout(a, "transposed"), b)
    with pytest.raises(ValueError, match="CPU tensor"):
        cg(torch.empty(3, 4, device="meta"), b)
    with pytest.raises(TypeError, match="positionally"):
        cg(a, b=b)
    # Strides of size-1 dims never address memory: not a mismatch.
    one = rand((1, 4), torch.float32, 9)
    _, cg1 = compile_graph(lambda g, x: [g.op("neg", [x])], [one])
    torch.testing.assert_close(cg1(one.as_strided((1, 4), (99, 1)))[0], -one)
    # Still correct after all those errors.
    torch.testing.assert_close(cg(a, b)[0], a + b)


def test_check_inputs_off_keeps_count_check():
    a = rand((3,), torch.float32, 1)
    _, cg = compile_graph(lambda g, x: [g.op("mul", [x, x])], [a])
    assert cg.check_inputs is True
    cg.check_inputs = False
    torch.testing.assert_close(cg(a)[0], a * a)
    with pytest.raises(TypeError):
        cg()


def test_refcounts_stable():
    a, b = rand((16,), torch.float32, 1), rand((16,), torch.float32, 2)
    _, cg = compile_graph(lambda g, x, y: [g.op("add", [x, y]), x], [a, b])
    before = sys.getrefcount(a), sys.getrefcount(b)
    for _ in range(100):
        cg(a, b)
    assert (sys.getrefcount(a), sys.getrefcount(b)) == before


def test_attributes_and_cache_hit(cache_dir):
    a = rand((10,), torch.float32, 1)
    build = lambda g, x: [g.op("mul", [g.op("add", [x, g.scalar(1.0)]), x])]  # noqa: E731
    _, cg = compile_graph(build, [a])
    assert cg.cache_hit is False
    assert cg.nkernels >= 1
    assert cg.compile_time_s > 0
    assert cg.entry in cg.source
    assert isinstance(cg.summary, str)
    assert cg.library_path.startswith(str(cache_dir))
    assert os.path.exists(cg.library_path) and os.path.exists(cg.library_path + ".sha256")
    assert C.cache_dir() == str(cache_dir)
    d = cg.describe()
    assert {"source", "summary", "nkernels", "compile_time_s", "cache_hit", "library_path"} <= set(d)
    assert d["source"] == cg.source and d["library_path"] == cg.library_path
    kinds = [buf["kind"] for buf in cg.buffers]
    assert "input" in kinds and "output" in kinds
    _, cg2 = compile_graph(build, [a])
    assert cg2.cache_hit is True
    assert cg2.library_path == cg.library_path
    torch.testing.assert_close(cg2(a)[0], (a + 1.0) * a)


def test_corrupt_cache_file_is_rebuilt(cache_dir):
    a = rand((50,), torch.float64, 1)
    build = lambda g, x: [g.op("sub", [g.op("mul", [x, g.scalar(3.0)]), x])]  # noqa: E731
    _, cg = compile_graph(build, [a])
    path = cg.library_path
    data = bytearray(open(path, "rb").read())
    for k in range(len(data) // 3, len(data) // 3 + 64):
        data[k] ^= 0xA5
    tmp = path + ".corrupt"
    with open(tmp, "wb") as f:  # a new inode: never rewrite a mapped library in place
        f.write(data)
    os.replace(tmp, path)
    _, cg2 = compile_graph(build, [a])
    assert cg2.cache_hit is False
    torch.testing.assert_close(cg2(a)[0], a * 3.0 - a)
    assert open(path, "rb").read() != bytes(data)
    # Truncated file and missing checksum: rebuilt as well.
    with open(tmp, "wb") as f:
        f.write(open(path, "rb").read()[:100])
    os.replace(tmp, path)
    _, cg3 = compile_graph(build, [a])
    assert cg3.cache_hit is False
    os.unlink(path + ".sha256")
    _, cg4 = compile_graph(build, [a])
    assert cg4.cache_hit is False
    torch.testing.assert_close(cg4(a)[0], a * 3.0 - a)
    _, cg5 = compile_graph(build, [a])
    assert cg5.cache_hit is True


def test_missing_compiler(monkeypatch):
    monkeypatch.setenv("WICK_CC", "wick-no-such-cc")
    C.env_reload()
    a = rand((3,), torch.float32, 1)
    with pytest.raises(C.CompileError, match="C compiler 'wick-no-such-cc' not found"):
        compile_graph(lambda g, x: [g.op("neg", [x])], [a])


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine compiles it (tests/gpu)")
def test_cuda_input_without_a_driver_is_a_compile_error():
    g = C.Graph()
    x = g.input("float32", (4,), (1,), device="cuda")
    g.output(g.op("neg", [x]))
    with pytest.raises(C.CompileError, match="CUDA driver"):
        g.compile()


def test_creation_ops_take_the_device_they_are_given():
    # FULL and ARANGE have only scalar inputs: without device= they are CPU
    # values, which a CUDA graph cannot combine with its tensors
    g = C.Graph()
    x = g.input("float32", (4, 4), (4, 1), device="cuda")
    mask = g.op("FULL", [g.scalar(1.0)], ints=[4, 4], dtype=torch.float32, device="cuda")
    pos = g.op("ARANGE", [g.scalar(0), g.scalar(1)], ints=[4], dtype=torch.int64, device="cuda:0")
    assert g.value(mask)["device"] == g.value(pos)["device"] == "cuda:0"
    assert g.value(g.op("add", [g.op("add", [x, mask]), pos]))["device"] == "cuda:0"
    cpu_mask = g.op("FULL", [g.scalar(1.0)], ints=[4, 4], dtype=torch.float32)
    assert g.value(cpu_mask)["device"] == "cpu"
    with pytest.raises(ValueError, match="same device"):
        g.op("add", [x, cpu_mask])
    # a Python number made a 0-d tensor (aten.scalar_tensor) on the graph's device
    zero = g.op("CONVERT", [g.scalar(0.0)], dtype=torch.float32, device="cuda")
    assert g.value(g.op("where", [g.op("gt", [x, mask]), zero, x]))["device"] == "cuda:0"
    assert g.value(zero)["device"] == "cuda:0"
    # a node with a tensor input goes with its input, whatever device= says
    assert g.value(g.op("TRIL", [x], ints=[0], device="cpu"))["device"] == "cuda:0"


def test_threads_share_a_compiled_graph():
    a = rand((1000,), torch.float32, 1)
    _, cg = compile_graph(lambda g, x: [g.op("mul", [g.op("add", [x, g.scalar(1.0)]), x])], [a])
    want = (a + 1.0) * a
    errors = []

    def work():
        try:
            for _ in range(50):
                torch.testing.assert_close(cg(a)[0], want)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


CHILD = textwrap.dedent("""
    import sys, torch
    import wick._C as C
    g = C.Graph()
    x = g.input("float32", (64, 33), (33, 1))
    y = g.op("add", [g.op("mul", [x, g.scalar(2.5)]), g.scalar(1.0)])
    g.output(y)
    cg = g.compile()
    a = torch.arange(64 * 33, dtype=torch.float32).reshape(64, 33)
    out = cg(a)[0]
    assert torch.equal(out, a * 2.5 + 1.0)
    print(cg.library_path)
""")


def test_two_processes_share_an_empty_cache(cache_dir):
    env = dict(os.environ, WICK_CACHE_DIR=str(cache_dir))
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
    paths = {out.strip() for out, _ in results}
    assert len(paths) == 1
    path = paths.pop()
    assert os.path.exists(path)
    leftovers = [f for f in os.listdir(cache_dir) if "tmp" in f]
    assert leftovers == []
    # The artifact verifies and is reused.
    g = C.Graph()
    x = g.input("float32", (64, 33), (33, 1))
    g.output(g.op("add", [g.op("mul", [x, g.scalar(2.5)]), g.scalar(1.0)]))
    cg = g.compile()
    assert cg.cache_hit is True and cg.library_path == path


def _fork_child(cg, x, q):
    q.put(bool(torch.allclose(cg(x)[0], x * x + x, rtol=1e-5, atol=1e-6)))


def test_forked_child_runs_kernels():
    """GNU OpenMP hangs in a child forked after a parallel region; the runtime
    runs such a child's kernels on one thread."""
    import multiprocessing as mp

    x = rand((1 << 20,), torch.float32, 1)
    _, cg = compile_graph(lambda g, a: [g.op("add", [g.op("mul", [a, a]), a])], [x])
    torch.testing.assert_close(cg(x)[0], x * x + x)  # a parallel region has run in this process
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_fork_child, args=(cg, x, q))
    p.start()
    try:
        assert q.get(timeout=120) is True
    finally:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()


def test_num_threads_knob(monkeypatch):
    x = rand((1 << 18,), torch.float64, 2)
    _, cg = compile_graph(lambda g, a: [g.op("sum", [g.op("mul", [a, a])]), g.op("exp", [a])], [x])
    for n in ("1", "2", ""):
        monkeypatch.setenv("WICK_NUM_THREADS", n)
        C.env_reload()
        s, e = cg(x)
        torch.testing.assert_close(s, (x * x).sum())
        torch.testing.assert_close(e, torch.exp(x))


# ---- output allocation through PyTorch's C shim (csrc/runtime/shim.c) ----------

_SHIM_SCRIPT = r"""
import torch
from wick import _C
dts = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int8, torch.uint8, torch.bool]
g = _C.Graph()
x = g.input(torch.float32, (3, 5), (1, 3))  # a transposed input
for dt in dts:
    g.output(g.op("CONVERT", [g.op("MUL", [x, g.scalar(3.0)])], dtype=dt))
g.output(g.op("SUM", [x], dims=[0]))
empty = g.input(torch.float32, (0, 4), (4, 1))
g.output(g.op("EXP", [empty]))
c = g.compile()
torch.manual_seed(0)  # a child process: the same values every run (a sum of 3 near 0 rounds otherwise than eager's)
t = torch.randn(5, 3).t()
outs = c(t, torch.empty(0, 4))
for o, dt in zip(outs, dts):
    assert o.dtype == dt and o.device.type == "cpu" and not o.requires_grad
    assert torch.equal(o, (t * 3.0).to(dt)), dt
assert torch.allclose(outs[-2], t.sum(0)) and outs[-1].shape == (0, 4)
outs[0].add_(1)  # a tensor Python owns, writable, freed normally
print("OK")
"""


@pytest.mark.parametrize("shim", ["1", "0"])
def test_outputs_allocated_through_the_c_shim_or_python(shim, tmp_path):
    import subprocess
    import sys

    env = dict(os.environ, WICK_SHIM=shim, WICK_LOG="perf", WICK_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", _SHIM_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    # the allocation log line repeats per output: left out, so a failure shows its cause
    cause = "\n".join(line for line in r.stderr.splitlines() if "C shim allocation" not in line)
    assert r.returncode == 0 and "OK" in r.stdout, (r.returncode, r.stdout[-500:], cause[-3000:])
    want = "C shim allocation: on" if shim == "1" else "C shim allocation: off"
    assert want in r.stderr


# ---- the output pool: freed large outputs reused warm (csrc/runtime/shim.c) ----

def _pool_graph():
    g = C.Graph()
    x = g.input(torch.float32, (1100, 1024), (1024, 1))  # 4.3 MiB outputs: pooled
    s = g.input(torch.float32, (3, 5), (5, 1))            # small: never pooled
    g.output(g.op("EXP", [g.op("MUL", [x, g.scalar(0.5)])]))
    g.output(g.op("ADD", [x, g.scalar(1.0)]))
    g.output(g.op("NEG", [s]))
    return g.compile()


def test_output_pool_reuses_freed_large_outputs(monkeypatch):
    c = _pool_graph()
    x = torch.randn(1100, 1024, generator=torch.Generator().manual_seed(3))
    s = torch.randn(3, 5)
    # earlier tests in this process may have left blocks in the pool: a take
    # under a cap of 0 gives them back, so the counts below start from empty
    monkeypatch.setenv("WICK_OUTPUT_POOL", "0")
    C.env_reload()
    c(x, s)  # its outputs die here, not kept under a cap of 0
    assert C.output_pool_bytes() == 0
    monkeypatch.setenv("WICK_OUTPUT_POOL", "64")
    C.env_reload()
    e, a, n = c(x, s)
    torch.testing.assert_close(e, (x * 0.5).exp())
    torch.testing.assert_close(a, x + 1)
    assert torch.equal(n, -s) and n.untyped_storage().resizable()  # small: torch's allocator
    if e.untyped_storage().resizable():
        pytest.skip("this torch has no torch_from_blob: outputs come from its allocator")
    ptrs = {e.data_ptr(), a.data_ptr()}
    assert all(p % (1 << 21) == 0 for p in ptrs)  # whole 2 MiB blocks
    before = C.output_pool_bytes()
    del e, a
    assert C.output_pool_bytes() == before + 2 * (6 << 20)  # 4.3 MiB rounded up to 6
    # the next call takes the freed blocks: same memory, values rewritten
    x2 = x * -2
    e, a, n = c(x2, s)
    assert {e.data_ptr(), a.data_ptr()} == ptrs and C.output_pool_bytes() == before
    torch.testing.assert_close(e, (x2 * 0.5).exp())
    torch.testing.assert_close(a, x2 + 1)
    # an output lives on as a normal tensor: autograd, views, in-place ops,
    # freed from another thread without the GIL's help
    v = a.view(-1)[7:9].mul_(0)
    assert torch.equal(a.view(-1)[7:9], v) and a.view(-1)[6] == x2.view(-1)[6] + 1
    box = [e]
    del e
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    assert C.output_pool_bytes() == before + (6 << 20)
    # the cap: a smaller pool gives the blocks past it back at the next take
    monkeypatch.setenv("WICK_OUTPUT_POOL", "0")
    C.env_reload()
    e2, a2, _ = c(x, s)
    assert C.output_pool_bytes() == 0 and e2.untyped_storage().resizable()
    torch.testing.assert_close(e2, (x * 0.5).exp())
    del a
    assert C.output_pool_bytes() == 0  # pool off: a freed block goes back to the C library


def test_output_pool_under_torch_compile_keeps_values(monkeypatch):
    monkeypatch.setenv("WICK_OUTPUT_POOL", "64")
    C.env_reload()
    import wick.backends  # noqa: F401

    torch._dynamo.reset()
    f = torch.compile(lambda x: torch.softmax(x * 2, -1), backend="wick")
    outs = []
    for k in range(4):  # some outputs kept alive, some freed and reused
        x = torch.randn(1030, 1030, generator=torch.Generator().manual_seed(k))
        y = f(x)
        torch.testing.assert_close(y, torch.softmax(x * 2, -1))
        if k % 2:
            outs.append((x, y))
    for x, y in outs:
        torch.testing.assert_close(y, torch.softmax(x * 2, -1))
    torch._dynamo.reset()


# ---- temporaries share bytes by liveness (csrc/schedule/temps.c) -------------

@pytest.mark.parametrize("shape", [(64, 48), (3, 5), (0, 4)])
def test_temporaries_share_memory_when_lifetimes_do_not_overlap(shape):
    g = C.Graph()
    x = g.input(torch.float32, shape, (shape[1], 1))
    y = x
    for _ in range(6):  # column normalisations: each step's exp is a large TEMP read by the next step only
        e = g.op("EXP", [g.op("MUL", [y, g.scalar(0.5)])])
        y = g.op("DIV", [e, g.op("SUM", [e], dims=[0], keepdim=True)])
    g.output(y)
    c = g.compile()
    t = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    want = t
    for _ in range(6):
        e = (want * 0.5).exp()
        want = e / e.sum(0, keepdim=True)
    torch.testing.assert_close(c(t)[0], want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(c(t)[0], want, rtol=1e-5, atol=1e-6)  # the block is reused across calls
    temps = [b for b in c.describe()["buffers"] if b["kind"] == "temp"]
    assert all(b["offset"] % 64 == 0 for b in temps)
    big = [b for b in temps if b["nbytes"] >= 4 * shape[0] * shape[1] > 0]
    if len(big) >= 3:
        assert len({b["offset"] for b in big}) < len(big)  # some share bytes
