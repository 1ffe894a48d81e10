"""F.scaled_dot_product_attention on CUDA through wick's own capture (skipped
without a GPU): the graph calls the fused kernel eager picks (flash,
efficient or cudnn attention, torch._fused_sdp_choice asked at capture time)
as an extern node the runtime makes through the C shim, with no Python call,
or where eager picks the math kernel, that kernel's own ops (two float32 bmm
kernels, also made through the shim, and native softmax work);
what eager does around the kernel that capture does not reproduce (padding a
head size, padding or copying a mask) keeps the torch call. Results are
compared with eager bit for bit (the same kernel on the same inputs)."""
import re

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("triton")

import wick  # noqa: E402
import wick._C as C  # noqa: E402

DEV = "cuda"
SDPA = "torch._C._nn.scaled_dot_product_attention"
BMM = "aten.bmm.default"
FUSED = {"flash": "aten._scaled_dot_product_flash_attention.default",
         "efficient": "aten._scaled_dot_product_efficient_attention.default",
         "cudnn": "aten._scaled_dot_product_cudnn_attention.default"}

# graphs compiled with the host profile on count their native calls (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("host_profile_on")


def rand(shape, dtype, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return torch.randn(shape, generator=g, device=DEV).to(dtype)


def eager_kernel(q, k, v, mask=None, causal=False):
    from torch.nn.attention import SDPBackend

    choice = torch._fused_sdp_choice(q, k, v, mask, 0.0, causal)
    return {SDPBackend.FLASH_ATTENTION.value: "flash", SDPBackend.EFFICIENT_ATTENTION.value: "efficient",
            SDPBackend.CUDNN_ATTENTION.value: "cudnn"}.get(choice, "math")


def externs_of(fn):
    es = C.code_entries(fn.__code__)
    assert es and all(not e["eager"] and e["graph_count"] == 1 for e in es), [e.get("reason") for e in es]
    return re.findall(r"EXTERN\[\d+ ([^\]]+)\]", es[-1]["graph"])


def native_calls():
    return C.host_profile(True).get("extern_native", (0, 0.0))[0]


def plain(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v) * 2


def causal(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True) + 1


def scaled(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, scale=0.3)


def float_mask(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def bool_mask(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m > 0)


def bert_layout(q, k, v, m):
    # transformers' (B, S, H*D) -> (B, H, S, D) views: strided, last stride 1
    b, h, s, d = q.shape
    qq, kk, vv = (t.transpose(1, 2).reshape(b, s, h * d).view(b, s, h, d).transpose(1, 2) for t in (q, k, v))
    return F.scaled_dot_product_attention(qq, kk, vv).transpose(1, 2).reshape(b, s, h * d)


def mask_for(fn, b, h, s, dtype, seed):
    if fn in (float_mask, bool_mask):
        m = rand((b, 1, s, s), torch.float32, seed)
        m[..., 0] = 1.0  # no fully masked row for the bool form
        return m.to(dtype) if fn is float_mask else m
    return None


CASES = [plain, causal, scaled, float_mask, bool_mask, bert_layout]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("shape", [(2, 4, 64, 64), (3, 2, 48, 32), (1, 2, 40, 40)], ids=str)
def test_attention_calls_the_kernel_eager_picks(fn, dtype, shape):
    b, h, s, d = shape
    q, k, v = (rand(shape, dtype, seed) for seed in range(3))
    m = mask_for(fn, b, h, s, dtype, 3)
    with torch.no_grad():
        want = fn(q, k, v, m)
        wick.reset()
        f = wick.compile(fn)
        native_calls()
        got = f(q, k, v, m)
        torch.cuda.synchronize()
        calls = native_calls()
    assert got.dtype == want.dtype and got.shape == want.shape
    if fn not in (plain, causal):  # the kernel's own output (plain's and causal's are pointwise results of it)
        assert got.stride() == want.stride()
    externs = externs_of(fn)
    mask = None if m is None else (m > 0 if fn is bool_mask else m)
    kernel = eager_kernel(q, k, v, mask, fn is causal)
    # what capture reproduces of eager's preparation around the kernel
    modelled = (kernel == "flash" and d % 8 == 0 and m is None) or \
               (kernel == "efficient" and (m is None or s % 16 == 0)) or kernel == "cudnn"
    if kernel == "math":  # its ops inlined (wick/_inlined.py): float32 bmm kernels and native softmax
        assert externs == [BMM, BMM], (kernel, externs)
        assert calls >= 2
        torch.testing.assert_close(got, want)
    elif modelled:
        assert externs == [FUSED[kernel]], (kernel, externs)
        assert calls >= 1
        torch.testing.assert_close(got, want, rtol=0, atol=0)  # the same kernel on the same inputs
    else:
        assert externs == [SDPA], (kernel, externs)
        torch.testing.assert_close(got, want)


def test_attention_in_training_gives_eagers_gradients():
    # grad mode: the graph goes through AOTAutograd, which differentiates the
    # fused op (its backward is torch's); the logsumexp eager asks for then
    def fn(q, k, v):
        return (F.scaled_dot_product_attention(q, k, v, is_causal=True) * 3).sum()

    shape = (2, 4, 64, 64)
    base = [rand(shape, torch.bfloat16, seed) for seed in range(3)]
    want_in = [t.clone().requires_grad_() for t in base]
    got_in = [t.clone().requires_grad_() for t in base]
    wick.reset()
    want = fn(*want_in)
    want.backward()
    got = wick.compile(fn)(*got_in)
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    for g, w in zip(got_in, want_in):
        torch.testing.assert_close(g.grad, w.grad, rtol=2e-2, atol=2e-2)
    assert set(externs_of(fn)) <= set(FUSED.values()) | {SDPA}


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
def test_cudnn_cudnn_plans_are_built_before_the_first_run(training, monkeypatch):
    # each cuDNN attention call of a graph is made once on scratch tensors
    # while the graph's kernels compile (wick/_cudnn_plans.py: a training
    # graph's forward on this thread and its backward on autograd's, through
    # wick's autodiff; an inference graph's forward, from capture): results
    # and gradients stay eager's, and the random state is untouched
    from wick import _cudnn_plans

    def fn(q, k, v, m):
        return (F.scaled_dot_product_attention(q, k, v, attn_mask=m > 0) * 3).sum()

    shape = (2, 4, 64, 64)
    base = [rand(shape, torch.bfloat16, seed) for seed in range(3)]
    m = mask_for(bool_mask, 2, 4, 64, torch.bfloat16, 3)
    if eager_kernel(*base, m > 0) != "cudnn":
        pytest.skip("eager does not pick cuDNN attention here")
    warmed = []
    real = _cudnn_plans.warm
    monkeypatch.setattr(_cudnn_plans, "warm", lambda g, e: warmed.append(real(g, e)) or warmed[-1])
    want_in = [t.clone().requires_grad_(training) for t in base]
    got_in = [t.clone().requires_grad_(training) for t in base]
    wick.reset()
    want = fn(*want_in, m)
    rng = torch.cuda.get_rng_state()
    got = wick.compile(fn)(*got_in, m)
    if training:
        want.backward()
        got.backward()
    for t in _cudnn_plans.warming:
        t.join()
    assert warmed == [1]
    assert torch.equal(torch.cuda.get_rng_state(), rng)
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    if training:
        for g, w in zip(got_in, want_in):
            torch.testing.assert_close(g.grad, w.grad, rtol=2e-2, atol=2e-2)
    assert FUSED["cudnn"] in externs_of(fn)
    # off: no call is made
    monkeypatch.setenv("WICK_WARM_CUDNN", "0")
    wick.reset()
    warmed.clear()
    again = wick.compile(fn)(*[t.detach().clone().requires_grad_(training) for t in base], m)
    torch.testing.assert_close(again, want, rtol=1e-2, atol=1e-2)
    assert warmed in ([], [0])


@pytest.mark.parametrize("fn", [plain, causal, scaled, float_mask, bool_mask, bert_layout], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_math_path_is_inlined_under_autocast(fn, dtype):
    # eager's math kernel (forced here; BERT's broadcast bool mask gets it by
    # itself): its ops in the graph, 16-bit inputs computed in float32 with
    # the caller's autocast off around the two bmm kernels, which the C shim
    # runs (no Python call)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    # inputs already of the autocast dtype: autocast's casts of permuted views
    # (bert_layout) do not get eager's layout in the graph yet, and the
    # choice of kernel is asked only where the graph's layouts are eager's
    shape = (2, 4, 48, 32)
    q, k, v = (rand(shape, dtype, seed) for seed in range(3))
    m = mask_for(fn, 2, 4, 48, dtype, 3)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
        want = fn(q, k, v, m)
        wick.reset()
        f = wick.compile(fn)
        f(q, k, v, m)
        native_calls()
        got = f(q, k, v, m)
        torch.cuda.synchronize()
        calls = native_calls()
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)
    assert externs_of(fn) == [BMM, BMM]
    assert calls == 2


def test_bert_inference_under_autocast_is_one_graph_equal_to_eager():
    # BertForMaskedLM under bf16 autocast through the attention rule. With
    # transformers 5.17 the model makes a bool mask while compiling (broadcast
    # from a (1, 1, S, 1) comparison, strides (0, S, 1, 0)); for that mask
    # eager picks the math path (H200, torch 2.11), whose ops the graph
    # inlines: no torch F.scaled_dot_product_attention call is left
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=256, vocab_size=1000)
    model = transformers.BertForMaskedLM(cfg).to(DEV).eval()
    ids = torch.randint(0, 1000, (4, 64), device=DEV)
    wick.reset()
    f = wick.compile(model)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        want = model(input_ids=ids).logits
        got = f(input_ids=ids).logits
    torch.testing.assert_close(got.float(), want.float(), rtol=5e-2, atol=5e-2)
    st = wick.stats()
    assert st["graphs"] == 1 and not st["fallbacks"] and not st["breaks"], st
    graphs = [e.get("graph", "") for e in wick._entries(wick._compiled_codes) if not e.get("eager")]
    assert len(graphs) == 1 and SDPA not in graphs[0] and BMM in graphs[0]
