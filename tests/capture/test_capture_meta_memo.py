"""wick._capture_meta.outputs memoises the fake-tensor metadata of extern
calls: equal calls (same function, constants of the same exact types, inputs
of the same metadata, same grad/inference mode, default dtype and autocast
state) share one answer; anything else is computed afresh."""
import torch

import wick._C as C
import wick._capture_meta as M
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled


def test_equal_calls_share_the_answer_and_types_of_constants_count():
    X = C.ExternInput(0)
    inp = [(torch.float32, torch.device("cpu"), (2, 3), (3, 1), False)]
    a = M.outputs(torch.Tensor.new_full, (X, (2,), 1), {}, inp)
    b = M.outputs(torch.Tensor.new_full, (C.ExternInput(0), (2,), 1), {}, inp)
    assert a is b
    c = M.outputs(torch.Tensor.new_full, (X, (2,), True), {}, inp)  # True == 1, but a bool fill
    d = M.outputs(torch.Tensor.new_full, (X, (2,), 1.0), {}, inp)
    assert c is not a and d is not a
    assert M.outputs(torch.Tensor.sum, (X,), {}, inp, True)[1][0][4] is False  # input needs no grad
    inp_rg = [inp[0][:4] + (True,)]
    assert M.outputs(torch.Tensor.sum, (X,), {}, inp_rg, True)[1][0][4] is True
    assert M.outputs(torch.Tensor.sum, (X,), {}, inp_rg, False)[1][0][4] is False


def arange_scaled(x):
    return torch.arange(4.0) * x.sum()


def test_default_dtype_is_part_of_the_key():
    x = torch.randn(3)
    with torch.no_grad():
        assert_same(compiled(arange_scaled)(x), arange_scaled(x))
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            C.reset()
            x64 = x.double()
            assert_same(compiled(arange_scaled)(x64), arange_scaled(x64))
        finally:
            torch.set_default_dtype(old)
