"""Accuracy of the generated C's math (libmvec's vector exp/log/tanh through
`omp declare simd`, sqrt, sigmoid = 1/(1+exp(-x))) over a wide range:
tiny, denormal, large, negative, +-0, +-inf, NaN. Checked against a float64
reference in ulps of the float32 result, and against eager torch."""
import math

import pytest
import torch

import wick._C as C


def wide_values(dtype):
    mags = torch.logspace(-45 if dtype == torch.float32 else -300, 38 if dtype == torch.float32 else 300,
                          20001, dtype=torch.float64)
    specials = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 88.72, 88.73, -87.3, -103.9,
                             -104.0, 709.7, -745.1, 1e-30, 9.0, -9.0, 20.0, -20.0], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    dense = torch.randn(20001, generator=gen, dtype=torch.float64) * 30
    return torch.cat([mags, -mags, specials, dense]).to(dtype)


def ulp_error(got, ref64, dtype):
    """|got - ref| in units of the spacing of the result dtype at ref."""
    finfo = torch.finfo(dtype)
    ref = ref64.to(dtype).to(torch.float64)
    spacing = torch.nextafter(ref.abs().to(dtype), torch.tensor(math.inf, dtype=dtype)).to(torch.float64) - \
        ref.abs()
    spacing = torch.where(spacing > 0, spacing, torch.tensor(finfo.tiny * finfo.eps, dtype=torch.float64))
    err = (got.to(torch.float64) - ref64).abs() / spacing
    both_nan = got.isnan() & ref64.isnan()
    same_inf = got.isinf() & (got == ref64.to(dtype))  # overflow to inf in the result dtype
    return torch.where(both_nan | same_inf, torch.zeros_like(err), err)


OPS = {"exp": torch.exp, "log": torch.log, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "sqrt": torch.sqrt}
# ulps allowed vs the exact float64 result: libmvec documents <= 4 ulp;
# sigmoid composes exp, an add and a division
MAX_ULP = {"exp": 4, "log": 4, "tanh": 4, "sigmoid": 6, "sqrt": 0.5}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_transcendentals_wide_range(dtype):
    x = wide_values(dtype)
    g = C.Graph()
    a = g.input_like(x)
    names = list(OPS)
    for n in names:
        g.output(g.op(n, [a]))
    outs = g.compile()(x)
    x64 = x.to(torch.float64)
    for n, got in zip(names, outs):
        ref64 = OPS[n](x64)
        if n == "sigmoid" and dtype == torch.float32:
            # torch computes float32 sigmoid in float32: underflow below ~-88 gives 0 like us
            ref64 = torch.where(x64 < -88.7, torch.sigmoid(x).to(torch.float64), ref64)
        err = ulp_error(got, ref64, dtype)
        # the result must be NaN exactly where the reference is
        assert torch.equal(got.isnan(), ref64.to(dtype).isnan()), n
        worst = err.max().item()
        # subnormal results lose relative precision in every libm; compare absolutely there
        tiny = ref64.abs() < torch.finfo(dtype).tiny
        # a float64 reference is itself rounded: one more ulp of slack there
        allowed = MAX_ULP[n] + (1 if dtype == torch.float64 else 0)
        assert err[~tiny].max().item() <= allowed, (n, worst, x[err.argmax()].item())
        assert ((got.to(torch.float64) - ref64).abs()[tiny] <= torch.finfo(dtype).tiny).all(), n
        # and agrees with eager torch at the tolerances torch's own compiler tests use
        torch.testing.assert_close(got, OPS[n](x), rtol=1e-5 if dtype == torch.float32 else 1e-12,
                                   atol=1e-30, equal_nan=True)
