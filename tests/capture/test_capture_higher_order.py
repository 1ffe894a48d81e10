"""torch._higher_order_ops.associative_scan, the higher-order op transformers'
Mamba and FalconMamba call under compilation: capture inlines wick's plain-
torch polyfill (wick/_inlined.py, a log-depth scan of slices, stacks and
cats), so the scan is one graph of table ops that wick's own autodiff
differentiates. Compared with a left-to-right loop and with torch's own
generic associative_scan, for several lengths (odd, even, 1), dims,
reverse, layouts and dtypes; gradients with eager's. What eager refuses
(an empty scan dimension, pointwise on the CPU) raises the same error; an
xs pytree other than a tensor, tuple or list breaks and runs eagerly. Also a cache layer's
`dict.fromkeys(range(n))` (Mamba's cache), folded at capture."""
import pytest
import torch
from torch._higher_order_ops.associative_scan import associative_scan

import wick
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, one_graph, reasons, text_model_is_one_graph


def combine_linear(left, right):
    a_left, b_left = left
    a_right, b_right = right
    return a_left * a_right, a_right * b_left + b_right


def loop_scan(combine, xs, dim, reverse=False):
    """The inclusive scan as a loop, for reference."""
    single = isinstance(xs, torch.Tensor)
    leaves = [x.movedim(dim, 0) for x in ([xs] if single else xs)]
    if reverse:
        leaves = [x.flip(0) for x in leaves]
    outs, acc = [[] for _ in leaves], None
    for i in range(leaves[0].shape[0]):
        cur = [x[i] for x in leaves]
        if acc is None:
            acc = cur
        else:
            acc = [combine(acc[0], cur[0])] if single else list(combine(tuple(acc), tuple(cur)))
        for o, v in zip(outs, acc):
            o.append(v)
    res = [torch.stack(o) if o else x for o, x in zip(outs, leaves)]
    if reverse:
        res = [r.flip(0) for r in res]
    res = [r.movedim(0, dim) for r in res]
    return res[0] if single else tuple(res)


def linear_recurrence(a, b, dim: int, reverse: bool):
    _, states = associative_scan(combine_linear, (a, b), dim=dim, reverse=reverse, combine_mode="generic")
    return states * 2


def running_sum(x):
    return associative_scan(lambda l, r: l + r, x, dim=0, combine_mode="generic") + 1


@pytest.mark.parametrize("length", [1, 2, 5, 8, 13])
@pytest.mark.parametrize("dim,reverse", [(2, False), (2, True), (0, False), (-1, True)])
def test_linear_recurrence_scan(length, dim, reverse):
    gen = torch.Generator().manual_seed(length)
    shape = [2, 3, 4]
    shape.insert(dim % 4 if dim >= 0 else 3, length)
    a = torch.rand(shape, generator=gen, dtype=torch.float64)
    b = torch.randn(shape, generator=gen, dtype=torch.float64)
    got = compiled(linear_recurrence)(a, b, dim, reverse)
    assert_same(got, linear_recurrence(a, b, dim, reverse))
    assert_same(got, loop_scan(combine_linear, (a, b), dim, reverse)[1] * 2)
    one_graph(linear_recurrence)


@pytest.mark.parametrize("layout", ["contig", "transposed"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_single_tensor_scan_is_cumsum(layout, dtype):
    x = torch.randint(-9, 9, (11, 6)).to(dtype)
    if layout == "transposed":
        x = x.t().contiguous().t()
    got = compiled(running_sum)(x)
    assert_same(got, x.cumsum(0).to(dtype) + 1)
    one_graph(running_sum)


def scan_with(x, dim, reverse, mode):
    return associative_scan(torch.add, x, dim, reverse=reverse, combine_mode=mode)


@pytest.mark.parametrize("shape,dim,reverse,mode,error", [
    ((3, 0), 1, False, "generic", ValueError),       # an empty scan dimension
    ((3, 4), 0, False, "pointwise", ValueError),     # pointwise needs CUDA
    ((3, 4), 0, 1, "generic", RuntimeError),         # reverse not a bool
    ((3, 4), 0, False, "other", ValueError),
])
def test_what_eager_refuses_raises_the_same(shape, dim, reverse, mode, error):
    x = torch.randn(shape)
    with pytest.raises(error):
        scan_with(x, dim, reverse, mode)
    with pytest.raises(error):
        compiled(scan_with)(x, dim, reverse, mode)


def scan_of_dict(x, y):
    return associative_scan(lambda l, r: {"a": l["a"] + r["a"]}, {"a": x + y}, 0, combine_mode="generic")["a"]


def test_other_pytrees_break_and_run_eagerly():
    x, y = torch.randn(5, 2), torch.randn(5, 2)
    assert_same(compiled(scan_of_dict)(x, y), (x + y).cumsum(0))
    assert any("associative_scan() of other than" in r for r in reasons(scan_of_dict)), reasons(scan_of_dict)


class SelectiveScan(torch.nn.Module):
    """Mamba's discretised recurrence in the shape transformers computes it."""

    def __init__(self, channels=6, state=4):
        super().__init__()
        self.log_a = torch.nn.Parameter(torch.randn(channels, state) * 0.1)
        self.b = torch.nn.Parameter(torch.randn(channels, state))
        self.proj = torch.nn.Linear(channels, channels)

    def forward(self, x, c):
        dt = torch.nn.functional.softplus(self.proj(x.transpose(1, 2))).transpose(1, 2)  # [B, C, L]
        discrete_a = torch.exp(-torch.exp(self.log_a)[None, :, None, :] * dt[:, :, :, None])
        delta_b_u = dt[:, :, :, None] * self.b[None, :, None, :] * x[:, :, :, None]
        _, states = associative_scan(combine_linear, (discrete_a, delta_b_u), dim=2, combine_mode="generic")
        return (states.transpose(1, 2) @ c.unsqueeze(-1)).squeeze(-1)


def test_scan_training_matches_the_loop_with_wicks_autodiff():
    torch.manual_seed(0)
    m = SelectiveScan().double()
    x = torch.randn(2, 6, 7, dtype=torch.float64, requires_grad=True)
    c = torch.randn(2, 7, 4, dtype=torch.float64)

    def by_loop(x):
        dt = torch.nn.functional.softplus(m.proj(x.transpose(1, 2))).transpose(1, 2)
        discrete_a = torch.exp(-torch.exp(m.log_a)[None, :, None, :] * dt[:, :, :, None])
        delta_b_u = dt[:, :, :, None] * m.b[None, :, None, :] * x[:, :, :, None]
        _, states = loop_scan(combine_linear, (discrete_a, delta_b_u), 2)
        return (states.transpose(1, 2) @ c.unsqueeze(-1)).squeeze(-1)

    params = [x] + list(m.parameters())
    want = by_loop(x)
    grad_out = torch.randn_like(want)
    want_grads = torch.autograd.grad(want, params, grad_out)
    wick.reset()
    got = wick.compile(m)(x, c)
    got_grads = torch.autograd.grad(got, params, grad_out)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    st = wick.stats()
    assert st["graphs"] == 1 and st["breaks"] == 0 and not st["fallbacks"], st
    assert st["autodiff"]["graphs"] == 1 and not st["autodiff"]["fallbacks"], st["autodiff"]


class StatesLayer:
    def __init__(self, number_of_states=2):
        self.conv_states = dict.fromkeys(range(number_of_states))
        self.initialised = dict.fromkeys(range(number_of_states), False)


def uses_fromkeys(x):
    layer = StatesLayer()
    layer.conv_states[0] = x * 2
    return layer.conv_states[0] + len(layer.initialised) + (1 if layer.initialised[1] else 0)


def test_dict_fromkeys_of_a_range_folds():
    x = torch.randn(3)
    assert_same(compiled(uses_fromkeys)(x), uses_fromkeys(x))
    one_graph(uses_fromkeys)


@pytest.mark.parametrize("name", ["MambaForCausalLM", "FalconMambaForCausalLM"])
def test_mamba_models_are_one_graph(name):
    transformers = pytest.importorskip("transformers")
    config_cls = {"MambaForCausalLM": transformers.MambaConfig,
                  "FalconMambaForCausalLM": transformers.FalconMambaConfig}[name]
    cfg = config_cls(vocab_size=96, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4,
                     time_step_rank=4)
    torch.manual_seed(0)
    # eager runs the sequential loop; the compiled frame takes the associative_scan branch
    text_model_is_one_graph(getattr(transformers, name)(cfg).eval(), 96)
