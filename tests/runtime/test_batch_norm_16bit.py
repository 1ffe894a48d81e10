"""16-bit batch norm in training through torch.compile(backend="wick"): the
functional batch-norm ops' fake kernels give the updated running statistics
as float32 where the kernels return them in the running buffers' dtype; the
importer widens the kernel's results (exact), so the graph compiles and runs
instead of falling back at run time. Compared with eager: outputs, running
statistics (values and dtypes), gradients."""
import pytest
import torch

from wick import backends

aten = torch.ops.aten


def fresh():
    torch._dynamo.reset()
    backends.fallback_reasons.clear()
    backends.compiled_graphs.clear()


def rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 6, 3, 3), (5, 2)])
@pytest.mark.parametrize("op", ["native_batch_norm", "_native_batch_norm_legit", "_batch_norm_with_update",
                                "functional"])
def test_training_batch_norm_16bit_compiles_and_matches_eager(op, shape, dtype):
    c = shape[1]
    x = rand(shape, dtype, 0)
    w, b = rand((c,), dtype, 1), rand((c,), dtype, 2)
    rm, rv = rand((c,), dtype, 3), rand((c,), dtype, 4).abs() + 0.5

    def f(x, w, b, rm, rv):
        if op == "native_batch_norm":
            return aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
        if op == "_native_batch_norm_legit":
            return aten._native_batch_norm_legit(x, w, b, rm, rv, True, 0.1, 1e-5)
        if op == "_batch_norm_with_update":
            return aten._batch_norm_with_update(x, w, b, rm, rv, 0.1, 1e-5)[:3]
        return torch.nn.functional.batch_norm(x, rm, rv, w, b, training=True, momentum=0.2) * 2 + 1

    fresh()
    rm_e, rv_e = rm.clone(), rv.clone()
    want = f(x, w, b, rm_e, rv_e)
    rm_c, rv_c = rm.clone(), rv.clone()
    got = torch.compile(f, backend="wick")(x, w, b, rm_c, rv_c)
    assert not backends.fallback_reasons, backends.fallback_reasons
    assert backends.compiled_graphs
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    for g_, w_ in zip(got, want):
        assert g_.dtype == w_.dtype and g_.shape == w_.shape
        torch.testing.assert_close(g_, w_, rtol=0, atol=0)
    for g_, w_ in ((rm_c, rm_e), (rv_c, rv_e)):
        assert g_.dtype == dtype
        torch.testing.assert_close(g_, w_, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_batch_norm_module_training_step_16bit(dtype):
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).to(dtype)
    twin = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).to(dtype)
    twin.load_state_dict(eager.state_dict())
    x = rand((2, 3, 6, 6), dtype, 5)
    fresh()
    compiled = torch.compile(twin, backend="wick")
    for _ in range(2):
        want = eager(x)
        got = compiled(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        want.float().square().sum().backward()
        got.float().square().sum().backward()
    assert not backends.fallback_reasons, backends.fallback_reasons
    bn_e, bn_c = eager[1], twin[1]
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        a, b = getattr(bn_c, name), getattr(bn_e, name)
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for (n, p), q in zip(twin.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-2, atol=1e-2, msg=n)


def test_mixed_dtype_batch_norm_stays_correct():
    """bfloat16 input, float32 parameters and statistics: the fake kernel
    says bfloat16 for the saved mean where the kernel gives float32 (a
    narrowing the importer does not make up): the result is still eager's."""
    x = rand((3, 4, 5), torch.bfloat16, 0)
    w, b = rand((4,), torch.float32, 1), rand((4,), torch.float32, 2)
    rm, rv = rand((4,), torch.float32, 3), rand((4,), torch.float32, 4).abs() + 0.5

    def f(x, w, b, rm, rv):
        return torch.nn.functional.batch_norm(x, rm, rv, w, b, training=True) + 1

    fresh()
    rm_e, rv_e, rm_c, rv_c = rm.clone(), rv.clone(), rm.clone(), rv.clone()
    want = f(x, w, b, rm_e, rv_e)
    got = torch.compile(f, backend="wick")(x, w, b, rm_c, rv_c)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(rm_c, rm_e, rtol=0, atol=0)
    torch.testing.assert_close(rv_c, rv_e, rtol=0, atol=0)
