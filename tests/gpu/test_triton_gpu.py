"""The Triton backend on a CUDA device (skipped without one): kernels
compiled by Triton and launched from wick's C runtime through the driver API,
compared with eager PyTorch; both front ends; autotuning; reduce-overhead
(CUDA graphs); streams. On this project's CPU machine the same generated code
is covered by tests/codegen/test_triton_interpret.py."""
import os

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("triton")

import wick  # noqa: E402
import wick._C as C  # noqa: E402
from wick import backends  # noqa: E402

DEV = "cuda"


def rand(shape, dtype=torch.float32, seed=0):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen, device=DEV) < 0.5
    if not dtype.is_floating_point:
        return torch.randint(-50, 50, shape, generator=gen, device=DEV, dtype=dtype)
    return torch.randn(shape, generator=gen, device=DEV, dtype=torch.float32).to(dtype)


def run(build, *tensors):
    g = C.Graph()
    ids = [g.input_like(t) for t in tensors]
    for o in build(g, *ids):
        g.output(o)
    cg = g.compile()
    return cg, cg(*tensors)


def close(got, want, rtol=1e-5, atol=1e-5):
    assert got.device == want.device, (got.device, want.device)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if want.is_floating_point():
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        assert torch.equal(got, want)


@pytest.mark.parametrize("shape", [(1000, 300), (7,), (), (0, 5), (3, 4, 5, 6)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_pointwise(shape, dtype):
    x, y = rand(shape, dtype), rand(shape[-1:] if shape else (), dtype, seed=1)
    cg, got = run(lambda g, a, b: [g.op("sin", [g.op("relu", [g.op("add", [g.op("mul", [a, g.scalar(2.0)]), b])])]),
                                   g.op("gt", [a, b])], x, y)
    tol = 1e-5 if dtype == torch.float32 else 3e-2  # one 16-bit rounding of the inputs to sin
    close(got[0], torch.relu(x * 2.0 + y).sin(), tol, tol)
    close(got[1], x > y)
    assert "@triton.jit" in cg.describe()["source"]


def test_views_and_unaligned_inputs():
    base = rand((65, 130))
    x = base.t()[1:, 3:]           # transposed, offset by 3 elements: not 16-byte aligned
    y = rand((129,), seed=2)
    _, got = run(lambda g, a, b: [g.op("mul", [a, g.op("exp", [b])])], x, y[:, None].expand(129, 62).contiguous())
    close(got[0], x * y[:, None].expand(129, 62).exp(), 1e-5, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("dims", [(0,), (1,), (2,), (0, 2), (0, 1, 2)])
def test_reductions(dtype, dims):
    x = rand((37, 19, 45), dtype)
    if dtype == torch.bool:
        ops = ["any", "all"]
    elif dtype.is_floating_point:
        ops = ["sum", "mean", "amax", "amin", "var"]
    else:
        ops = ["sum", "amax", "amin"]
    _, got = run(lambda g, a: [g.op(op, [a], dims=dims) for op in ops], x)
    tol = 1e-4 if dtype != torch.bfloat16 else 2e-2
    for op, r in zip(ops, got):
        close(r, getattr(torch, op)(x, dim=dims), tol, tol)


@pytest.mark.parametrize("shape,dim", [((8, 100000), 1), ((100000, 8), 0), ((3000000,), 0), ((64, 64, 64), 1)])
def test_large_and_column_reductions(shape, dim):
    x = rand(shape)
    _, got = run(lambda g, a: [g.op("sum", [a], dims=(dim,)), g.op("amax", [a], dims=(dim,)),
                               g.op("argmax", [a], dims=dim)], x)
    close(got[0], x.sum(dim), 1e-4, 1e-2)
    close(got[1], x.amax(dim))
    close(got[2], x.argmax(dim))


@pytest.mark.parametrize("cols", [64, 1000, 4096, 30000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_log_softmax_layer_norm(cols, dtype):
    x, w, b = rand((300, cols), dtype), rand((cols,), dtype, seed=3), rand((cols,), dtype, seed=4)
    _, got = run(lambda g, a, ww, bb: [g.op("softmax", [a], dims=1), g.op("log_softmax", [a], dims=1),
                                       g.op("layer_norm", [a, ww, bb], dims=(1,), eps=1e-5)], x, w, b)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    close(got[0], torch.softmax(x, 1), tol, 1e-5 if dtype == torch.float32 else 1e-2)
    close(got[1], torch.log_softmax(x, 1), tol, tol)
    close(got[2], torch.nn.functional.layer_norm(x, (cols,), w, b, 1e-5), tol, 5e-2 if dtype != torch.float32 else 1e-4)


@pytest.mark.parametrize("cols", [768, 5000])  # persistent, looped (> 4096): through registers / a barrier
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_residual_sum_and_norm_in_one_kernel(norm, dtype, cols):
    """h = x + y returned and normalised (a transformer block): one Triton
    function stores h and normalises it; the norm reads h rounded to the
    stored dtype, as eager does."""
    x, y = rand((300, cols), dtype), rand((300, cols), dtype, seed=2)
    w, b = rand((cols,), dtype, seed=3) * 0.5 + 1, rand((cols,), dtype, seed=4)

    def build(g, a, c, ww, bb):
        h = g.op("add", [a, c])
        if norm == "layer_norm":
            return [h, g.op("layer_norm", [h, ww, bb], dims=(1,), eps=1e-5)]
        hf = g.op("convert", [h], dtype="float32")
        ms = g.op("mean", [g.op("mul", [hf, hf])], dims=[1], keepdim=True)
        n = g.op("mul", [hf, g.op("rsqrt", [g.op("add", [ms, g.scalar(1e-5)])])])
        return [h, g.op("mul", [ww, g.op("convert", [n], dtype=g.value(a)["dtype"])])]

    cg, (h, out) = run(build, x, y, w, b)
    assert cg.describe()["source"].count("@triton.jit\ndef wick_") == 1
    close(h, x + y, 0, 0)
    hh = x + y
    if norm == "layer_norm":
        want = torch.nn.functional.layer_norm(hh, (cols,), w, b, 1e-5)
    else:
        want = w * (hh.float() * torch.rsqrt(hh.float().pow(2).mean(1, keepdim=True) + 1e-5)).to(dtype)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    close(out, want, tol, tol)


def _tune_files():
    d = os.path.join(C.cache_dir(), "triton")
    return {f for f in os.listdir(d) if f.startswith("tune-")} if os.path.isdir(d) else set()


def test_side_stream_and_autotune_cache():
    from wick import _triton

    x = rand((4096, 1024))
    cg, _ = run(lambda g, a: [g.op("softmax", [a], dims=1)], x)
    _triton.wait_background()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = x * 1.0
        (out,) = cg(y)  # the first call after the background compiles: tuned here, on the side stream
    torch.cuda.current_stream().wait_stream(s)
    close(out, torch.softmax(x, 1), 1e-5, 1e-6)
    assert _tune_files()


@pytest.mark.parametrize("when", ["later", "first"])
def test_autotuning_after_the_first_call(when, monkeypatch, tmp_path):
    """WICK_TRITON_TUNE=later (the default): the first call runs each
    kernel in its first config while the other candidates compile in the
    background, and the first call after they are in times them (a tuning
    choice per kernel on disk); =first tunes during the first call. Results
    equal eager's on every call."""
    from wick import _triton

    monkeypatch.setenv("WICK_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("WICK_TRITON_TUNE", when)
    C.env_reload()
    try:
        x = rand((3000, 700), seed=3)
        cg, got = run(lambda g, a: [g.op("softmax", [a], dims=1), g.op("sum", [a], dims=0)], x)
        want = [torch.softmax(x, 1), x.sum(0)]
        close(got[0], want[0], 1e-5, 1e-6)
        close(got[1], want[1], 1e-4, 1e-3)
        tuned_first = _tune_files()
        assert _triton.wait_background()
        got = cg(x)
        close(got[0], want[0], 1e-5, 1e-6)
        close(got[1], want[1], 1e-4, 1e-3)
        if when == "later":
            assert not tuned_first and _tune_files(), (tuned_first, _tune_files())
        else:
            assert tuned_first and _tune_files() == tuned_first
    finally:
        monkeypatch.undo()
        C.env_reload()


def test_kernels_of_one_identity_tune_once(monkeypatch, tmp_path):
    """Two kernels of one text under two names (a softmax before and after a
    matmul: a model's repeated layers in small) share one tuning record: the
    second finds the first's choice instead of timing its candidates again."""
    from wick import _triton

    monkeypatch.setenv("WICK_CACHE_DIR", str(tmp_path))
    C.env_reload()
    try:
        x, w = rand((3000, 700), seed=3), rand((700, 700), seed=4) * 0.05
        g = C.Graph()
        a, b = g.input_like(x), g.input_like(w)
        t = g.op("softmax", [a], dims=1)
        (u,) = g.extern(0, [t, b], [{"dtype": torch.float32, "sizes": (3000, 700), "strides": (700, 1),
                                     "device": x.device}], name="aten.mm.default")
        g.output(g.op("softmax", [u], dims=1))
        cg = g.compile(externs=[(torch.ops.aten.mm.default, (C.ExternInput(0), C.ExternInput(1)))])
        names = [k["name"] for k in cg.triton_kernels]
        path = _triton.write_module(str(tmp_path), cg.describe()["source"])
        assert len(names) == 2 and len({str(_triton.kernel_identity(path, "h", n)) for n in names}) == 1
        want = torch.softmax(torch.softmax(x, 1) @ w, 1)
        close(cg(x, w)[0], want, 1e-5, 1e-6)
        assert _triton.wait_background()
        close(cg(x, w)[0], want, 1e-5, 1e-6)  # tuned here
        assert len(_tune_files()) == 1
    finally:
        monkeypatch.undo()
        C.env_reload()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="one GPU")
def test_second_device():
    x = torch.randn(1000, device="cuda:1")
    _, got = run(lambda g, a: [g.op("exp", [a]), g.op("sum", [a], dims=0)], x)
    close(got[0], x.exp())
    close(got[1], x.sum(0), 1e-4, 1e-4)


def mlp(x, w1, b1, w2):
    h = torch.nn.functional.gelu(x @ w1 + b1)
    return torch.softmax(h @ w2, dim=-1)


def test_capture_front_end_on_cuda():
    wick.reset()
    x, w1, b1, w2 = rand((64, 256)), rand((256, 512), seed=5) * 0.05, rand((512,), seed=6), rand((512, 128), seed=7)
    f = wick.compile(mlp)
    for _ in range(2):
        close(f(x, w1, b1, w2), mlp(x, w1, b1, w2), 1e-4, 1e-4)
    st = wick.stats()
    assert st["graphs"] >= 1 and not st["fallbacks"], st


def test_torch_compile_inference_and_training_on_cuda():
    torch._dynamo.reset()
    backends.compiled_graphs.clear()
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.LayerNorm(256),
                                torch.nn.Linear(256, 10)).to(DEV)
    x = rand((32, 128))
    c = torch.compile(model, backend="wick")
    with torch.no_grad():
        close(c(x), model(x), 1e-4, 1e-4)
    ref = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    loss = c(x).square().mean()
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().mean().backward()
    for g1, p in zip(grads, model.parameters()):
        close(g1, p.grad, 1e-3, 1e-4)
    del ref
    assert backends.compiled_graphs, "nothing was compiled by wick"
    assert not [r for r in backends.fallback_reasons if "cuda" in r.lower()]


def test_reduce_overhead_capture_front_end():
    wick.reset()
    w1, b1, w2 = rand((256, 512), seed=5) * 0.05, rand((512,), seed=6), rand((512, 128), seed=7)
    f = wick.compile(mlp, mode="reduce-overhead")
    outs = []
    for i in range(4):
        x = rand((64, 256), seed=10 + i)
        outs.append((f(x, w1, b1, w2), mlp(x, w1, b1, w2)))
    for got, want in outs:  # outputs kept across replays stay correct
        close(got, want, 1e-4, 1e-4)
    from wick import _cudagraphs

    assert not [r for r in _cudagraphs.reasons if "capture failed" in r], _cudagraphs.reasons


def test_reduce_overhead_torch_compile():
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)).to(DEV)
    c = torch.compile(model, backend="wick", mode="reduce-overhead")
    with torch.no_grad():
        res = [(c(x), model(x)) for x in (rand((16, 128), seed=s) for s in range(4))]
    for got, want in res:
        close(got, want, 1e-4, 1e-4)


def test_autocast_bf16_matches_eager():
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 256)).to(DEV)
    x = rand((64, 256))
    c = torch.compile(model, backend="wick")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        got, want = c(x), model(x)
    close(got, want, 2e-2, 2e-2)


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("WICK_CACHE_DIR", str(tmp_path_factory.mktemp("wick-cache")))
    C.env_reload()
    yield
    mp.undo()
    C.env_reload()


def test_bf16_layer_norm_module_is_native():
    torch._dynamo.reset()
    backends.compiled_graphs.clear()
    m = torch.nn.LayerNorm(1024).to(DEV, torch.bfloat16)
    x = rand((512, 1024), torch.bfloat16)
    c = torch.compile(m, backend="wick")
    with torch.no_grad():
        close(c(x), m(x), 2e-2, 5e-2)
    assert backends.compiled_graphs and backends.compiled_graphs[-1]["extern"] == 0, backends.compiled_graphs


def test_cpu_scalar_constant_in_a_cuda_graph():
    # torch.tensor(...) inside the function becomes a 0-d CPU constant of
    # the ATen graph; eager mixes it with CUDA tensors, so must wick
    torch._dynamo.reset()
    backends.fallback_reasons.clear()

    def f(x):
        return torch.where(x > 0, x, torch.tensor(-3.0)) * 2

    x = rand((64, 33))
    close(torch.compile(f, backend="wick")(x), f(x))
    assert not backends.fallback_reasons, backends.fallback_reasons


def test_attention_returning_int_items():
    # cudnn/flash attention return (out, logsumexp, ..., int, int, ...):
    # the int items are unused, the graph still compiles
    torch._dynamo.reset()
    backends.fallback_reasons.clear()

    def f(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sin()

    q, k, v = (rand((2, 4, 128, 64), torch.bfloat16, seed=s) for s in range(3))
    with torch.no_grad():
        close(torch.compile(f, backend="wick")(q, k, v), f(q, k, v), 2e-2, 2e-2)
    assert not backends.fallback_reasons, backends.fallback_reasons


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_transformers_bf16_through_torch_compile(name):
    transformers = pytest.importorskip("transformers")
    torch._dynamo.reset()
    backends.fallback_reasons.clear()
    backends.compiled_graphs.clear()
    torch.manual_seed(0)
    if name == "bert":
        cfg = transformers.BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=256, vocab_size=1000)
        model = transformers.BertForMaskedLM(cfg)
    else:
        cfg = transformers.GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=1000, n_positions=128)
        model = transformers.GPT2LMHeadModel(cfg)
    model = model.to(DEV).eval()
    ids = torch.randint(0, 1000, (4, 64), device=DEV)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        want = model(input_ids=ids).logits
        got = torch.compile(model, backend="wick")(input_ids=ids).logits
    close(got.float(), want.float(), 5e-2, 5e-2)
    assert backends.compiled_graphs and not backends.fallback_reasons, backends.fallback_reasons
    # GPT-2's mask indexes with aranges: its indexing compiles as kernels,
    # without the retry that makes it extern calls
    assert not [i["retried"] for i in backends.compiled_graphs if i.get("retried")]
    externs = {k for info in backends.compiled_graphs for k in info["externs"]}
    assert not externs & {"aten.embedding.default", "aten.index.Tensor"}, externs


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_transformers_bf16_through_wick_capture(name):
    # wick's own capture inside CUDA autocast: the casts of linear/matmul/
    # attention inputs are graph nodes (vals/extern.c), results eager's
    transformers = pytest.importorskip("transformers")
    wick.reset()
    torch.manual_seed(0)
    if name == "bert":
        cfg = transformers.BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=256, vocab_size=1000)
        model = transformers.BertForMaskedLM(cfg)
    else:
        cfg = transformers.GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=1000, n_positions=128)
        model = transformers.GPT2LMHeadModel(cfg)
    model = model.to(DEV).eval()
    ids = torch.randint(0, 1000, (4, 64), device=DEV)
    f = wick.compile(model)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        want = model(input_ids=ids).logits
        for _ in range(2):
            got = f(input_ids=ids).logits
    assert got.dtype == want.dtype
    close(got.float(), want.float(), 5e-2, 5e-2)
    with torch.no_grad():  # autocast off afterwards: eager's float32 result
        close(f(input_ids=ids).logits, model(input_ids=ids).logits, 1e-3, 1e-3)
    st = wick.stats()
    assert st["graphs"] >= 1 and not st["fallbacks"], st


@pytest.mark.parametrize("n", [63, 64, 65, 150])
def test_kernel_with_many_buffers(n):
    # convnext_base fused its 36+ layer-scale parameters into kernels with over 64 buffers, which the
    # launcher refused at the first run (the whole graph then ran eagerly)
    xs = [rand((257,), seed=i) for i in range(n)]

    def build(g, *ids):
        acc = ids[0]
        for i in ids[1:]:
            acc = g.op("add", [acc, i])
        return [acc]

    cg, got = run(build, *xs)
    want = xs[0].clone()
    for x in xs[1:]:
        want = want + x
    close(got[0], want, 1e-4, 1e-4)
    assert cg.describe()["nkernels"] == 1  # one kernel taking all n inputs and the output


@pytest.mark.parametrize("n", [1, 7, 40])
def test_creation_ops_are_kernels_on_cuda(n):
    """arange, full, ones/zeros(_like), tril/triu inside a CUDA graph are
    Triton kernels (a causal mask and positions as decoders build them), and
    so is the embedding (an indirect load) unless WICK_CUDA_INDEXING=0."""
    torch._dynamo.reset()
    backends.fallback_reasons.clear()
    backends.compiled_graphs.clear()

    def f(x, ids):
        pos = torch.arange(x.shape[1], device=x.device)
        mask = torch.full((x.shape[1], x.shape[1]), float("-inf"), device=x.device).triu(1)
        keep = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).tril()
        scores = x.unsqueeze(-1) * x.unsqueeze(-2) + mask
        return (scores.masked_fill(~keep, 0.0).sum(-1) + pos + torch.zeros_like(x), torch.ones_like(ids) * 3,
                torch.embedding(x, ids))

    x = rand((n, n))
    ids = torch.randint(0, n, (3, 2), device=DEV)
    want = f(x, ids)
    got = torch.compile(f, backend="wick")(x, ids)
    assert not backends.fallback_reasons, backends.fallback_reasons
    for g_, w_ in zip(got, want):
        close(g_, w_)
    externs = {}
    for info in backends.compiled_graphs:
        for k, v in info["externs"].items():
            externs[k] = externs.get(k, 0) + v
    assert not externs, externs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_indexing_is_native_on_cuda(dtype, monkeypatch):
    """Embedding, index_select, gather and advanced indexing (negative
    indices wrapped) are Triton kernels, fused with their pointwise users;
    WICK_CUDA_INDEXING=0 keeps them extern calls."""
    torch._dynamo.reset()
    backends.fallback_reasons.clear()
    backends.compiled_graphs.clear()

    def f(w, ids, rows, g):
        return (torch.embedding(w, ids).relu() * 2, w.index_select(0, rows).sum(-1),
                torch.gather(w, 1, g) + 1, w[rows.flip(0) - w.shape[0], 1:3].exp())

    w = rand((50, 24), dtype)
    ids = torch.randint(0, 50, (4, 7), device=DEV)
    rows = torch.randint(0, 50, (9,), device=DEV)
    g = torch.randint(0, 24, (50, 5), device=DEV)
    want = f(w, ids, rows, g)
    with torch.no_grad():
        got = torch.compile(f, backend="wick")(w, ids, rows, g)
    assert not backends.fallback_reasons, backends.fallback_reasons
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for g_, w_ in zip(got, want):
        close(g_, w_, tol, tol)
    externs = {k for info in backends.compiled_graphs for k in info["externs"]}
    assert not externs & {"aten.embedding.default", "aten.index_select.default", "aten.gather.default",
                          "aten.index.Tensor"}, externs

    monkeypatch.setenv("WICK_CUDA_INDEXING", "0")
    torch._dynamo.reset()
    backends.compiled_graphs.clear()
    with torch.no_grad():
        got = torch.compile(f, backend="wick")(w, ids, rows, g)
    assert not backends.fallback_reasons, backends.fallback_reasons
    for g_, w_ in zip(got, want):
        close(g_, w_, tol, tol)
    externs = {k for info in backends.compiled_graphs for k in info["externs"]}
    assert {"aten.embedding.default", "aten.gather.default"} <= externs, externs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_index_that_is_one_value_for_the_whole_kernel(dtype):
    """An index read at a constant offset (a one-element index tensor) is one
    value for the whole kernel: its load has a scalar address, which Triton
    refuses to mask with a block (the op_db sweep's index_select and
    multi_margin_loss samples failed to compile on the H200)."""
    torch._dynamo.reset()
    backends.fallback_reasons.clear()

    def f(w, one, target):
        return (w.index_select(0, one) * 2, w[one].sum(), torch.gather(w, 1, one.view(1, 1).expand(w.shape[0], 1)),
                torch.nn.functional.multi_margin_loss(w[:1].float(), target))

    w = rand((5, 3), dtype)
    one = torch.tensor([2], device=DEV)
    target = torch.tensor([1], device=DEV)
    want = f(w, one, target)
    with torch.no_grad():
        got = torch.compile(f, backend="wick")(w, one, target)
    assert not backends.fallback_reasons, backends.fallback_reasons
    for g_, w_ in zip(got, want):
        close(g_, w_, 2e-2, 2e-2)


def test_graph_without_tensor_inputs_is_compiled_for_the_device_of_its_tensors():
    """A graph whose tensors are all made inside it (factory calls with
    device="cuda", a window function) is a CUDA graph, not a CPU one that
    refuses its own tensors (the op_db sweep's zeros, full, arange, linspace,
    eye, bartlett samples fell back)."""
    torch._dynamo.reset()
    backends.fallback_reasons.clear()

    def f():
        x = torch.linspace(0.0, 1.0, 7, device=DEV).sin() + torch.ones(7, device=DEV)
        return x, torch.arange(3, 11, 2, device=DEV) * 2, torch.eye(3, device=DEV) + torch.full((3, 3), 0.5, device=DEV)

    want = f()
    got = torch.compile(f, backend="wick")()
    assert not backends.fallback_reasons, backends.fallback_reasons
    for g_, w_ in zip(got, want):
        assert g_.device == w_.device
        close(g_, w_)


class _ConvNeXtBlock(torch.nn.Module):
    def __init__(self, c=32):
        super().__init__()
        self.dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = torch.nn.LayerNorm(c)
        self.fc1, self.fc2 = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)
        self.down = torch.nn.Conv2d(c, c, 2, stride=2)

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(y)))).permute(0, 3, 1, 2)
        return self.down(x + y)


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("autocast", [False, True])
def test_convolution_bias_is_added_in_the_next_kernel(train, autocast, monkeypatch):
    """On CUDA a convolution's bias is split off (backends._conv_bias_as_add)
    and added in the Triton kernel after it, as inductor does, instead of
    cuDNN's extra pass over the output: a ConvNeXt block, float32 and bf16
    autocast, inference and a training step (gradients as eager's). float32
    convolutions without TF32: cuDNN picks other algorithms for a convolution
    with and without a bias, whose TF32 roundings differ (6.7e-4 on the H200)."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    torch._dynamo.reset()
    backends.fallback_reasons.clear()
    backends.compiled_graphs.clear()
    torch.manual_seed(0)
    m = _ConvNeXtBlock().to(DEV)
    m2 = _ConvNeXtBlock().to(DEV)
    m2.load_state_dict(m.state_dict())
    x = rand((4, 32, 14, 14))
    cm = torch.compile(m2, backend="wick")
    tol = 3e-2 if autocast else 1e-4
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast), torch.set_grad_enabled(train):
        want, got = m(x), cm(x)
    close(got, want, tol, tol)
    if train:
        want.float().square().sum().backward()
        got.float().square().sum().backward()
        for (name, p), p2 in zip(m.named_parameters(), m2.parameters()):
            torch.testing.assert_close(p2.grad, p.grad, rtol=tol, atol=tol * 10, msg=name)
    assert not backends.fallback_reasons, backends.fallback_reasons
    for info in backends.compiled_graphs:
        assert "aten.add.Tensor" not in info["externs"], info["externs"]
    assert any(info["externs"].get("aten.convolution.default") for info in backends.compiled_graphs)


@pytest.fixture
def norm_training(request, monkeypatch):
    """WICK_CUDA_NORM_TRAINING set to the parameter, with the cached
    decomposition tables rebuilt for it (and again after the test)."""
    monkeypatch.setenv("WICK_CUDA_NORM_TRAINING", request.param)
    backends._decomposition_table = None
    backends._aot_backends.clear()
    yield request.param
    monkeypatch.undo()
    backends._decomposition_table = None
    backends._aot_backends.clear()
    torch._dynamo.reset()


@pytest.mark.parametrize("norm_training", ["decompose", "extern"], indirect=True)
@pytest.mark.parametrize("mode", ["bf16-weights", "autocast"])
@pytest.mark.parametrize("norm", ["batch", "group"])
def test_16bit_norm_training_on_cuda(mode, norm, norm_training):
    """Batch norm (training: the statistics, the running-statistics update,
    the backward) and group norm with 16-bit inputs on CUDA: with
    WICK_CUDA_NORM_TRAINING=decompose native reductions (column reductions
    split across programs) and pointwise work that fuse with the convolution
    epilogues, as inductor does; by default cuDNN's extern calls, whose
    float32 running statistics the graph widens as their metadata says."""
    torch._dynamo.reset()
    backends.fallback_reasons.clear()
    backends.compiled_graphs.clear()
    torch.manual_seed(0)

    def make():
        n = torch.nn.BatchNorm2d(16) if norm == "batch" else torch.nn.GroupNorm(4, 16)
        return torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1, bias=False), n, torch.nn.ReLU()).to(DEV)

    m, m2 = make(), make()
    m2.load_state_dict(m.state_dict())
    if mode == "bf16-weights":
        m, m2 = m.bfloat16(), m2.bfloat16()
    x = rand((4, 8, 10, 10), torch.bfloat16 if mode == "bf16-weights" else torch.float32)
    cm = torch.compile(m2, backend="wick")
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "autocast"):
        want, got = m(x), cm(x)
    close(got, want, 3e-2, 3e-2)
    want.float().square().mean().backward()
    got.float().square().mean().backward()
    for (name, p), p2 in zip(m.named_parameters(), m2.parameters()):
        torch.testing.assert_close(p2.grad.float(), p.grad.float(), rtol=5e-2, atol=5e-2, msg=name)
    for b, b2 in zip(m.buffers(), m2.buffers()):
        torch.testing.assert_close(b2.float(), b.float(), rtol=2e-2, atol=2e-2)
    assert not backends.fallback_reasons, backends.fallback_reasons
    externs = {k for info in backends.compiled_graphs for k in info["externs"]}
    # under autocast group norm runs in float32 (autocast's fp32 list): decomposed either way
    extern = norm_training == "extern" and not (norm == "group" and mode == "autocast")
    assert any("norm" in k for k in externs) == extern, externs
    assert len(backends.compiled_graphs) == 2  # forward and backward


def test_index_out_of_range_is_a_device_assert_as_in_eager():
    """An index out of range in a native CUDA indexing kernel triggers a device-side assertion, as eager's embedding
    does (it poisons the CUDA context: each case runs in a process of its
    own)."""
    import subprocess
    import sys

    code = """
import sys, torch, wick
f = lambda w, ids: torch.embedding(w, ids) * 2
if sys.argv[1] == "wick":
    f = torch.compile(f, backend="wick")
w = torch.randn(10, 4, device="cuda")
f(w, torch.randint(0, 10, (3,), device="cuda"))
try:
    f(w, torch.tensor([1, 10, 2], device="cuda"))
    torch.cuda.synchronize()
except Exception as exc:
    print("raised:", type(exc).__name__, str(exc).splitlines()[0])
    sys.exit(0)
print("no error")
sys.exit(1)
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for variant in ("eager", "wick"):
        r = subprocess.run([sys.executable, "-c", code, variant], capture_output=True, text=True, timeout=300,
                           cwd=root, env=dict(os.environ, PYTHONPATH=root, WICK_CUDA_INDEXING="1"))
        assert r.returncode == 0 and "raised:" in r.stdout, (variant, r.stdout[-2000:], r.stderr[-3000:])
        assert "assert" in r.stdout.lower() or "assert" in r.stderr.lower(), (variant, r.stdout, r.stderr[-3000:])
