"""wick's own capture inside CUDA autocast (skipped without a GPU): every op
gives eager's dtype and values, including the ops autocast runs in float32
(exp, log, pow, softmax, sum, layer_norm, ...: ATen's fp32 and
fp32_set_opt_dtype policies) and those whose eager form reaches such an op
(square is pow; 2 / x is reciprocal), and the lower-precision ops whose
input casts capture makes graph nodes (linear, matmul, attention)."""
import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytest.importorskip("triton")

import wick  # noqa: E402

DEV = "cuda"

CASES = {
    "exp": lambda x, w: torch.exp(x) * 2,
    "log_method": lambda x, w: (x.abs() + 1).log() + 1,
    "pow_scalar": lambda x, w: x ** 2 + 1,
    "square": lambda x, w: x.square() + 1,
    "rdiv": lambda x, w: 2 / (x.abs() + 1),
    "rsqrt": lambda x, w: torch.rsqrt(x.abs() + 1),
    "softmax": lambda x, w: torch.softmax(x, -1) * 3,
    "log_softmax_f": lambda x, w: F.log_softmax(x, dim=-1),
    "sum": lambda x, w: x.sum() + x.sum(-1, keepdim=True),
    "sum_dtype": lambda x, w: x.sum(-1, dtype=torch.bfloat16),
    "mean": lambda x, w: x.mean(-1),
    "layer_norm": lambda x, w: F.layer_norm(x, (x.shape[-1],), w[0], None),
    "logsumexp": lambda x, w: torch.logsumexp(x, -1),
    "softplus": lambda x, w: F.softplus(x),
    "gelu_linear": lambda x, w: F.gelu(F.linear(x, w)),
    "linear_softmax": lambda x, w: torch.softmax(F.linear(x, w), -1),
    "matmul_exp": lambda x, w: (x @ w.t()).exp(),
    "relu_add": lambda x, w: torch.relu(x) + x,
    "prod": lambda x, w: (x[:2, :4] * 0.1 + 1).prod() + 1,
    "sum_f64": lambda x, w: x.double().sum(-1),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("in_dtype", [torch.bfloat16, torch.float32])
def test_autocast_dtypes_match_eager(name, in_dtype):
    fn = CASES[name]
    wick.reset()
    g = torch.Generator(device=DEV).manual_seed(0)
    x = torch.randn(16, 32, generator=g, device=DEV).to(in_dtype)
    w = (torch.randn(32, 32, generator=g, device=DEV) / 4).to(in_dtype)
    f = wick.compile(fn)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        want = fn(x, w)
        got = f(x, w)
        got = f(x, w)
    assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
