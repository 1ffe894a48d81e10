"""Complex tensors in wick's own capture. No generated kernel computes a
complex value, so every torch call, tensor method, operator, subscript or
attribute that reads or makes one is an extern call (PyTorch runs it), while
the real work around it stays table ops: FNet's `fftn(x).real`, the LLaMA
reference code's rotary embedding (`view_as_complex`, a complex `freqs_cis`
buffer, `view_as_real`), `torch.polar`. Compared with eager on random
inputs: values, dtypes, strides and the conjugate bit, one graph with no
break. A call whose result is a lazily conjugated or negated view
(`z.conj()`, `z.conj().imag`) breaks: kernels would read its memory as it
lies. Training differentiates such a graph through AOTAutograd (wick's own
autodiff has no rules for complex gradients) and the gradients are eager's.
A complex input with its conjugate bit set is not captured (a recorded
reason; eager's result)."""
import pytest
import torch

import wick
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import compiled, one_graph, reasons, text_model_is_one_graph


def randn(shape, dtype=torch.float32, seed=0, layout="contig"):
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    if layout == "transposed" and len(shape) >= 2:
        return randn(shape[::-1], dtype, seed).transpose(0, -1)
    if layout == "sliced" and shape:
        return randn(shape[:-1] + (shape[-1] * 2,), dtype, seed)[..., 1::2]
    if dtype.is_complex:
        part = torch.float64 if dtype == torch.complex128 else torch.float32
        return torch.complex(torch.randn(shape, generator=gen, dtype=part), torch.randn(shape, generator=gen, dtype=part))
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)


def check(got, want, strides=True):
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            check(g, w, strides)
        return
    if not isinstance(want, torch.Tensor):
        assert got == want
        return
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    assert not strides or got.stride() == want.stride() or want.numel() <= 1, (got.stride(), want.stride())
    assert got.is_conj() == want.is_conj()
    if want.dtype.is_floating_point or want.dtype.is_complex:
        tol = 1e-12 if want.dtype in (torch.float64, torch.complex128) else 1e-5
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    else:
        assert torch.equal(got, want)


def run_once(fn, *args, strides=True):
    f = compiled(fn)
    check(f(*args), fn(*args), strides)
    one_graph(fn)
    return f


def meta_strides_are_eagers(fn, x):
    """Whether torch's meta function of fn gives eager's strides for x: an
    extern's result is laid out as its meta function says (torch 2.11's
    fftn meta differs from its CPU kernel on a transposed input; 2.13 agrees)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = fn(torch.empty_strided(x.shape, x.stride(), dtype=x.dtype))
    return fake.stride() == fn(x).stride()


def fourier_mix(x):
    return torch.fft.fftn(x, dim=(1, 2)).real * 0.5 + x.tanh()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["contig", "transposed", "sliced"])
@pytest.mark.parametrize("shape", [(2, 8, 16), (1, 3, 5), (2, 1, 1)])
def test_fft_real_part_between_kernels(shape, layout, dtype):
    x = randn(shape, dtype, layout=layout)
    run_once(fourier_mix, x, strides=meta_strides_are_eagers(lambda t: torch.fft.fftn(t, dim=(1, 2)), x))


def test_an_fft_eager_refuses_raises_the_same():
    x = randn((2, 0, 4))
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        fourier_mix(x)
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        compiled(fourier_mix)(x)


def rotary(xq, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    freqs_cis = freqs_cis[None, :, None, :]
    out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    return out.type_as(xq) * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_embedding_of_the_reference_llama(dtype):
    seq, half = 5, 4
    freqs = torch.outer(torch.arange(seq, dtype=torch.float32), 1.0 / 10000 ** (torch.arange(half) / half))
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    run_once(rotary, randn((2, seq, 3, 2 * half), dtype, seed=1), freqs_cis)


def polar_parts(t, x):
    freqs = torch.outer(t, x)
    cis = torch.polar(torch.ones_like(freqs), freqs)
    return (cis * cis.conj_physical()).real, cis.abs(), cis.angle() - 1, cis[1:, ::2].imag, -cis, cis.T.real


def test_polar_and_complex_views():
    run_once(polar_parts, randn((6,)), randn((4,), seed=1))


def conjugate_views(z):
    return z.conj().imag * 2 + 1, (z * z.conj()).real


def test_lazily_conjugated_values_break_and_stay_eagers():
    # z.conj() is a view whose memory holds z's values; its .imag one whose
    # memory holds the negation of what it stands for: a kernel reading
    # either would compute with the wrong values, so such a call breaks
    z = randn((5,), torch.complex64)
    f = compiled(conjugate_views)
    check(f(z), conjugate_views(z))
    assert any("conjugate bit" in r for r in reasons(conjugate_views)), reasons(conjugate_views)


def complex_ops(z, x):
    y = z * 2 + 1j
    y = y.to(torch.complex128)
    w = y.sum(0) / (z.abs() + 1)[0]
    z2 = z.clone()
    z2 += x[:, None]
    z2[0] = 3
    z2.mul_(1 - 1j)
    return w, z2, (z == z2).any(), torch.cat([z, z]).reshape(-1), z.is_complex(), x.sin(), z.contiguous()


@pytest.mark.parametrize("layout", ["contig", "transposed"])
def test_complex_input_arithmetic_writes_and_views(layout):
    z = randn((3, 4), torch.complex64, layout=layout)
    z_before = z.clone()
    run_once(complex_ops, z, randn((3,), seed=1))
    assert torch.equal(z, z_before)


def empty_and_scalar(z, s):
    return (z * s).abs() + 1, torch.view_as_real(z).sum(-1), s.real + 1, (s * 1j).conj_physical().imag, torch.fft.fft(s[None])


def test_empty_and_0d_complex():
    run_once(empty_and_scalar, randn((0, 4), torch.complex64), randn((), torch.complex64, seed=2))


def writes_complex_input(z):
    z.mul_(2)
    return z.real + 1


def test_writing_a_complex_input_is_eagers():
    z = randn((4,), torch.complex64)
    ze = z.clone()
    out = compiled(writes_complex_input)(z)
    check(out, writes_complex_input(ze))
    assert torch.equal(z, ze)  # the input written in place, as eager writes it


def test_conjugated_input_is_not_captured():
    z = randn((3,), torch.complex64).conj()
    assert z.is_conj()
    f = compiled(fourier_mix_1d)
    check(f(z), fourier_mix_1d(z))
    assert any("conjugate bit" in r for r in reasons(fourier_mix_1d)), reasons(fourier_mix_1d)


def fourier_mix_1d(z):
    return torch.fft.fft(z).real + 1


class FourierBlock(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.lin = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(torch.fft.fftn(self.lin(x), dim=(1, 2)).real + x)


def test_training_through_a_complex_value_gives_eagers_gradients():
    torch.manual_seed(0)
    m = FourierBlock(16)
    x = torch.randn(2, 8, 16, requires_grad=True)
    params = [x] + list(m.parameters())
    out = m(x)
    grad_out = torch.randn_like(out)
    want = torch.autograd.grad(out, params, grad_out)
    wick.reset()
    got_out = wick.compile(m)(x)
    got = torch.autograd.grad(got_out, params, grad_out)
    torch.testing.assert_close(got_out, out, rtol=1e-5, atol=1e-5)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5 * w.abs().max().item())
    st = wick.stats()
    assert st["graphs"] == 1 and st["breaks"] == 0 and not st["fallbacks"], st
    # wick's own autodiff refuses a complex gradient; AOTAutograd differentiates the graph
    assert any("complex" in r for r in st["autodiff"]["reasons"]), st["autodiff"]


def test_fnet_from_transformers_is_one_graph():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.FNetConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, intermediate_size=64,
                                  max_position_embeddings=64, hidden_dropout_prob=0.0)
    torch.manual_seed(0)
    text_model_is_one_graph(transformers.FNetForMaskedLM(cfg).eval(), 96)
