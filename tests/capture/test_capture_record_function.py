"""`with torch.profiler.record_function(name):` inside a frame labels a
region for the profiler. Inside a graph there is no such region: as in
PyTorch's capture, the block is captured as if the label were not there, one
graph with the code around it; a label capture cannot read as a constant
(an object) stays a graph break, where eager's own error is raised. Results against eager, on several shapes, a
non-contiguous input and under autograd."""
import pytest
import torch

from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, one_graph, reasons


def labelled(x, w):
    with torch.profiler.record_function("block"):
        y = x.sin() * w
    with torch.autograd.profiler.record_function("tail", "extra"):
        y = y + 1
        with torch.no_grad():
            z = y.detach() * 0 + 2
    return y * z


@pytest.mark.parametrize("shape", [(4, 5), (0, 5), (5,)])
def test_record_function_blocks_are_one_graph(shape):
    torch.manual_seed(0)
    x, w = torch.randn(shape), torch.randn(shape[-1])
    assert_same(compiled(labelled)(x, w), labelled(x, w))
    one_graph(labelled)


def test_non_contiguous_and_autograd():
    torch.manual_seed(1)
    x = torch.randn(5, 4).t()
    w = torch.randn(5, requires_grad=True)
    w2 = w.detach().clone().requires_grad_()
    labelled(x, w).sum().backward()
    compiled(labelled)(x, w2).sum().backward()
    assert_same(w2.grad, w.grad)


def labelled_by_tensor_name(x, names):
    with torch.profiler.record_function(names[0]):
        return x * 2


def test_label_read_from_a_list_argument():
    x = torch.randn(3)
    f = compiled(labelled_by_tensor_name)
    assert_same(f(x, ["a"]), x * 2)
    assert_same(f(x, ["b"]), x * 2)
    assert not reasons(labelled_by_tensor_name)


class Label:
    def __str__(self):
        return "made by user code"


def labelled_by_object(x, label):
    with torch.profiler.record_function(label):
        return x + 1


def test_label_capture_cannot_read_is_exact():
    x = torch.randn(3)
    with pytest.raises(RuntimeError):  # eager refuses a non-str label too
        labelled_by_object(x, Label())
    with pytest.raises(RuntimeError):
        compiled(labelled_by_object)(x, Label())
    assert reasons(labelled_by_object)


def test_profiler_sees_eager_code_still():
    # outside wick the label works as before
    x, w = torch.randn(3), torch.randn(3)
    with torch.profiler.profile() as prof:
        labelled(x, w)
    assert any(e.name == "block" for e in prof.events())
