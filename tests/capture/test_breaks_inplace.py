"""In-place writes into input tensors and module buffers (issue 8, side
effects): x.add_(1), buf.copy_(y), x[idx] = v, x.zero_(), F.relu(x,
inplace=True), x += y, torch.add(..., out=x), BatchNorm's running statistics
in train mode. Capture keeps the graph functional (the written value is a new
graph value, an extern call that writes its inputs runs on clones of them)
and the transformed code copies each written value into its input after the
graph. Each function runs eagerly and through wick on identical copies of
its inputs: results, every input tensor afterwards, the identity of a
returned input, and the exception raised (also midway, after a write) must
be eager's; graph and break counts are pinned, and never more graphs than
PyTorch's capture (torch.compile(backend="eager") with a CompileCounter)."""
import copy

import sys

import pytest
import torch
import torch.nn.functional as F

import wick
import wick._C as C
from test_capture_util import *  # noqa: F401,F403  (fixtures and helpers)
from test_capture_util import break_counts as counts, entry_tree as _tree

OPTS = {"backend": "wick", "fullgraph": False, "dynamic": None, "mode": "default"}
GT = torch.zeros(3)  # a global tensor a function writes


def dynamo_graphs(fn, args):
    import torch._dynamo
    from torch._dynamo.testing import CompileCounter

    cnt = CompileCounter()
    torch._dynamo.reset()
    try:
        torch.compile(fn, backend=cnt)(*args)
    except Exception:
        pass
    torch._dynamo.reset()
    return cnt.frame_count


def _copy(args):
    """Fresh copies with the same strides and the same aliasing between them."""
    memo = {}
    return [copy.deepcopy(a, memo) for a in args]


def _same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, (a, b)
        torch.testing.assert_close(b, a, equal_nan=True, rtol=1e-5, atol=1e-5)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for p, q in zip(a, b):
            _same(p, q)
    elif isinstance(a, dict):
        assert list(a) == list(b), (a, b)  # the same keys in the same order
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, set):
        assert a == b, (a, b)
    elif isinstance(a, torch.nn.Module):
        for (n, p), (m, q) in zip(a.state_dict().items(), b.state_dict().items()):
            assert n == m
            _same(p, q)
    else:
        assert a == b, (a, b)


def _call(fn, args, seed):
    torch.manual_seed(seed)
    try:
        return fn(*args), None
    except Exception as e:  # the same exception, eager or compiled
        return None, type(e)


def check(fn, make_args, expect, calls=2, dynamo=True):
    """Runs fn eagerly and compiled on `calls` fresh argument sets; pins the
    (graphs, breaks, eager entries) of the first call."""
    C.reset()
    cf = C.CompiledFunction(fn, OPTS)
    first = None
    for i in range(calls):
        args = make_args()
        ea, ca = _copy(args), _copy(args)
        exp, exp_err = _call(fn, ea, i)
        got, got_err = _call(cf, ca, i)
        assert got_err is exp_err, (got_err, exp_err)
        if exp_err is None:
            _same(exp, got)
            for k, a in enumerate(ea):  # a returned input is that input itself
                if exp is a:
                    assert got is ca[k]
        for a, b in zip(ea, ca):
            _same(a, b)
        if first is None:
            first = counts(fn)
    assert first == expect, first
    if dynamo:
        dyn = dynamo_graphs(fn, _copy(make_args()))
        if dyn:
            assert first[0] <= dyn, (first, dyn)
    return cf


def t(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + len(shape) * 7 + sum(shape))
    return torch.randn(shape, generator=g).to(dtype)


SHAPES = [(4, 3), (5,), (0, 3), ()]


# ---- writes into argument tensors --------------------------------------------


def add_then_use(x, y):
    x.add_(y)
    return x * 2 + y


def zero_fill(x, y):
    z = x + y
    x.zero_()
    x.fill_(2.5)
    return z, x + 1


def copy_broadcast(buf, y):
    buf.copy_(y.sum(0, keepdim=True).double() if y.dim() else y)
    return buf.sum()


def chained(x, y):
    r = x.mul_(y).add_(1).clamp_(-1.0, 1.0)
    return r is x, x.sum()


def returns_input(x, y):
    x.sub_(y)
    return x


def op_assign(x, y):
    x += y
    x *= 2
    return x.cos()


def relu_inplace(x, y):
    F.relu(x, inplace=True)
    torch.sigmoid_(y)
    return x + y


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("fn", [add_then_use, zero_fill, copy_broadcast, chained, returns_input, op_assign,
                                relu_inplace], ids=lambda f: f.__name__)
def test_write_into_argument(fn, shape):
    check(fn, lambda: [t(*shape), t(*shape, seed=1)], (1, 0, 0), dynamo=shape == (4, 3))


def test_write_into_non_contiguous_argument():
    check(add_then_use, lambda: [t(3, 4).t(), t(4, 3, seed=1)], (1, 0, 0))


def setitems(x, v):
    x[1:3] = v
    x[0] = 7.0
    x[:, -1] = x[:, 0] * 2
    return x.sum(), x


def setitem_mask(x):
    x[x > 0] = 0.0
    return x.abs()


def setitem_index(x, idx, v):
    x[idx] = v
    return x


def test_item_writes():
    check(setitems, lambda: [t(5, 3), t(2, 3, seed=2)], (1, 0, 0))
    check(setitem_mask, lambda: [t(4, 3)], (1, 0, 0))
    check(setitem_index, lambda: [t(6, 2), torch.tensor([0, 4, 2]), t(3, 2, seed=3)], (1, 0, 0))


def extern_writes(x, i, s, m):
    x.index_add_(0, i, s)
    x.masked_fill_(m, -1.0)
    x.scatter_(1, torch.zeros_like(i).unsqueeze(1).expand(-1, x.shape[1]), 3.0)
    return x * 2


def out_kwarg(x, y, out):
    torch.mul(x, y, out=out)
    return out + 1


def random_inplace(x):
    x.uniform_()
    x.bernoulli_(0.5)
    return x * 2


def test_extern_calls_that_write():
    check(extern_writes, lambda: [t(4, 3), torch.tensor([0, 2]), t(2, 3, seed=5), t(4, 3, seed=6) > 0],
          (1, 0, 0))
    check(random_inplace, lambda: [t(4, 3)], (1, 0, 0))


def out_kwarg_extern(x, i, out):
    torch.index_select(x, 0, i, out=out)
    return out + 1


def test_out_keyword():
    # an extern call with out=: out is written (on a clone, written back)
    check(out_kwarg_extern, lambda: [t(4, 3), torch.tensor([3, 1]), torch.empty(2, 3)], (1, 0, 0))
    # an op of the table takes no out=: a break there, the call eager
    check(out_kwarg, lambda: [t(4, 3), t(4, 3, seed=1), torch.empty(4, 3)], (1, 1, 0))


def write_then_raise(x, y):
    x.add_(y)
    if x.shape[0] > 3:
        raise ValueError("too long")
    return x * 2


def write_in_helper(x, y):
    def helper(a):
        a.mul_(3)
        return a - 1
    return helper(x) + y


def write_in_try(x, y):
    try:
        x.add_(1)
        if x.shape[0] > 3:
            raise KeyError("k")
    except KeyError:
        x.mul_(2)
    return x + y


def test_write_then_raise_midway():
    # an exception that leaves the frame: a break at the raise (the graph and
    # its write first, then the raise in Python), the write kept
    check(write_then_raise, lambda: [t(5, 3), t(5, 3, seed=1)], (1, 1, 0), dynamo=False)
    check(write_then_raise, lambda: [t(2, 3), t(2, 3, seed=1)], (1, 0, 0))
    check(write_in_helper, lambda: [t(4, 3), t(4, 3, seed=1)], (1, 0, 0))
    check(write_in_try, lambda: [t(5, 3), t(5, 3, seed=1)], (1, 0, 0), dynamo=False)


def write_across_break(x, y):
    x.add_(y)
    print("wick-inplace-break")
    x.mul_(3)
    return x + 1


def write_before_item(x):
    x.mul_(2)
    s = x.sum().item() if x.numel() else 0.0
    x.sub_(s)
    return x


def test_write_across_a_break(capsys):
    check(write_across_break, lambda: [t(4, 3), t(4, 3, seed=1)], (2, 1, 0))
    assert capsys.readouterr().out.count("wick-inplace-break") == 4 + 1
    check(write_before_item, lambda: [t(4, 3)], (2, 1, 0))


def global_write(y):
    GT.add_(y)
    return GT * 2


def test_write_into_a_global_tensor():
    global GT
    GT = torch.zeros(3)
    exp = [global_write(torch.ones(3)) for _ in range(2)]
    eager_gt = GT.clone()
    GT = torch.zeros(3)
    cf = C.CompiledFunction(global_write, OPTS)
    got = [cf(torch.ones(3)) for _ in range(2)]
    _same(exp, got)
    _same(eager_gt, GT)
    assert counts(global_write) == (1, 0, 0)


# ---- what capture refuses: eager runs the write, with the same result ----------


def view_then_write(x):
    v = x[0]
    x.mul_(2)
    return v + 1


def write_then_view(x):
    x.mul_(2)
    v = x[0]
    v.add_(1)
    return x


def stale_view(x):
    a = x * 2
    v = a[0]
    a.add_(1)  # eager's v sees the write: the graph's would not, refused
    return v.sum()


def view_read_before_write(x):
    a = x * 2
    s = a[0] * 3  # read through the view before the write: fine
    a.add_(1)
    x[:, 0] = s.sum()
    return a, x


def int_add_float(x):
    x.add_(1.5)
    return x


def expanded_write(x):
    x.add_(1)
    return x


def leaf_write(w):
    w.add_(1)
    return w * 2


def test_refused_writes():
    # a view taken before the write would not see it: the frame runs eagerly
    check(view_then_write, lambda: [t(4, 3)], (0, 0, 1))
    # a write into a view of a written input: the view of the graph's value
    # would not reach the input's memory, the frame runs eagerly
    check(write_then_view, lambda: [t(4, 3)], (0, 0, 1))
    check(stale_view, lambda: [t(4, 3)], (0, 0, 1))
    check(view_read_before_write, lambda: [t(4, 3)], (1, 0, 0))
    # eager raises: the same RuntimeError (from the call run at a break, or
    # from the frame run eagerly)
    check(int_add_float, lambda: [torch.arange(4)], (0, 1, 0))
    check(expanded_write, lambda: [torch.randn(3).expand(4, 3)], (0, 1, 0), dynamo=False)
    check(leaf_write, lambda: [torch.randn(3, requires_grad=True)], (0, 1, 0), dynamo=False)


# ---- writes into a view of a tensor the frame computed --------------------------
# eager writes into the base's memory; capture makes the write a new value for
# the view and marks the base (and its other views) stale: reading them again
# is refused, so the frame runs eagerly or breaks there, never a wrong value


def slice_of_cat_written(x, y):
    out = torch.cat([x, x * 2], 0)
    v = out[: x.shape[0]]  # timm's GhostNet: a slice of a concatenation, then +=
    v += y
    return v * 3


def sliced_twice_written(x, y):
    out = x.exp()
    v = out[1:][:, :2]
    v.mul_(y[1:, :2])
    return v.sum(), y


def base_read_after(x, y):
    out = torch.cat([x, x * 2], 0)
    v = out[: x.shape[0]]
    v += y
    return out  # eager's holds the write


def other_view_read_after(x, y):
    out = torch.cat([x, x * 2], 0)
    w = out[1:]
    v = out[: x.shape[0]]
    v += y  # overlaps w's rows
    return w * 1


def base_written_again(x, y):
    out = x * 2
    v = out[0]
    v.add_(1)
    out.mul_(y)
    return out


def test_writes_into_views_of_computed_tensors():
    make = lambda: [t(4, 3), t(4, 3, seed=1)]  # noqa: E731
    check(slice_of_cat_written, make, (1, 0, 0))
    check(sliced_twice_written, make, (1, 0, 0))
    check(base_read_after, make, (0, 0, 1))
    check(other_view_read_after, make, (0, 0, 1))
    check(base_written_again, make, (0, 0, 1))


def test_write_into_a_view_differentiates_as_eager():
    """The write as a new value: gradients reach the base's inputs and the
    written operand as through eager's CopySlices."""
    C.reset()
    cf = C.CompiledFunction(slice_of_cat_written, OPTS)
    for seed in range(2):
        args = [t(4, 3, seed=seed).requires_grad_(), t(4, 3, seed=seed + 5).requires_grad_()]
        twin = [a.detach().clone().requires_grad_() for a in args]
        got, want = cf(*args), slice_of_cat_written(*twin)
        _same(want, got)
        got.square().sum().backward()
        want.square().sum().backward()
        for a, b in zip(args, twin):
            _same(b.grad, a.grad)
    assert counts(slice_of_cat_written) == (1, 0, 0)


def two_args(x, y):
    x.add_(1)
    return y * 2


def test_written_input_aliased_by_another_runs_eagerly():
    base = t(4, 3)
    cf = C.CompiledFunction(two_args, OPTS)
    # no aliasing: compiled
    a, b = base.clone(), base.clone()
    _same(two_args(a.clone(), b.clone()), cf(a, b))
    errors = C.hook_stats()["graph_errors"]
    # the same tensor twice, a view of it, and one storage cut in two rows:
    # eager semantics (y sees the write), the frame rerun eagerly
    for make in (lambda x: (x, x), lambda x: (x, x[0]), lambda x: (x[:2], x[1:3])):
        e, c = base.clone(), base.clone()
        exp = two_args(*make(e))
        got = cf(*make(c))
        _same(exp, got)
        _same(e, c)
    assert C.hook_stats()["graph_errors"] == errors + 3


# ---- module buffers and BatchNorm ----------------------------------------------


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("ema", torch.zeros(3))
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        self.steps.add_(1)
        with torch.no_grad():
            self.ema.mul_(0.9).add_(x.mean(0) * 0.1)
        return self.lin(x) + self.ema


class ConvBN(torch.nn.Module):
    def __init__(self, momentum=0.1, affine=True):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4, momentum=momentum, affine=affine)
        self.bn1 = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.bn1(y.mean((2, 3))) * 2


def _module_check(mod, make_x, train, calls=3, grad=False, expect=None):
    C.reset()
    torch.manual_seed(0)
    eager = mod
    comp = copy.deepcopy(mod)
    eager.train(train)
    comp.train(train)
    cm = wick.compile(comp)
    for i in range(calls):
        x = make_x(i)
        with torch.set_grad_enabled(grad):
            exp = eager(x.clone())
            got = cm(x.clone())
        _same(exp, got)
        _same(eager, comp)  # every buffer: running_mean/var, num_batches_tracked, steps
    if expect is not None:
        assert counts(type(comp).forward) == expect, counts(type(comp).forward)
    return comp


def test_module_buffer_writes():
    _module_check(Counter(), lambda i: t(5, 3, seed=i), True, expect=(1, 0, 0))


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_batchnorm_train_running_statistics(grad):
    _module_check(ConvBN(), lambda i: t(2, 3, 5, 5, seed=i), True, grad=grad)
    fwd = ConvBN.forward
    graphs, breaks, eager = counts(fwd)
    assert breaks == 0 and eager == 0 and graphs >= 1, (graphs, breaks, eager)


def test_batchnorm_eval_and_no_affine():
    _module_check(ConvBN(), lambda i: t(2, 3, 4, 4, seed=i), False, expect=(1, 0, 0))
    _module_check(ConvBN(affine=False), lambda i: t(2, 3, 4, 4, seed=i), True, expect=(1, 0, 0))


def test_batchnorm_cumulative_average():
    # momentum=None divides by float(num_batches_tracked): a break, the
    # statistics still eager's
    _module_check(ConvBN(momentum=None), lambda i: t(2, 3, 4, 4, seed=i), True)


def test_batchnorm_functional_with_reads_after():
    def f(x, rm, rv):
        y = F.batch_norm(x, rm, rv, training=True, momentum=0.3)
        return y * 2 + rm.sum() + rv.mean()

    check(f, lambda: [t(6, 4), torch.zeros(4), torch.ones(4)], (1, 0, 0))


class NormedUpdate(torch.nn.Module):
    """Writes its own parameter inside no_grad, as weight normalisation or an
    EMA of a codebook does (eager allows in-place on a leaf there)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        with torch.no_grad():
            self.lin.weight.mul_(0.5).add_(x.mean() * 0.01)
        return x * 2


class NormedFlag(NormedUpdate):
    def forward(self, x):
        with torch.no_grad():
            self.lin.weight.mul_(0.5)
            flag = self.lin.weight.requires_grad  # still a leaf that requires grad
        return x * 2 if flag else x - 1


class NormedThenUsed(NormedUpdate):
    def forward(self, x):
        with torch.no_grad():
            self.lin.weight.div_(self.lin.weight.norm())
        return self.lin(x)  # reads the leaf with grad on: eager's is a leaf, the graph's value is not


def test_parameter_written_under_no_grad():
    for grad in (False, True):
        C.reset()
        m = NormedUpdate()
        _module_check(m, lambda i: t(4, 3, seed=i), True, grad=grad, expect=(1, 0, 0))
        assert m.lin.weight.is_leaf and m.lin.weight.requires_grad
    C.reset()
    _module_check(NormedFlag(), lambda i: t(4, 3, seed=i), True, expect=(1, 0, 0))
    # read again with grad on after the write: a break before the read, the
    # result and its gradient as eager's
    C.reset()
    torch.manual_seed(0)
    m = NormedThenUsed()
    m2 = copy.deepcopy(m)
    cm = wick.compile(m2)
    for i in range(2):
        x = t(4, 3, seed=i)
        e, c = m(x), cm(x)
        _same(e, c)
        ge = torch.autograd.grad(e.sum(), m.lin.weight)
        gc = torch.autograd.grad(c.sum(), m2.lin.weight)
        _same(ge, gc)
        _same(m, m2)
    graphs, breaks, eager = counts(NormedThenUsed.forward)
    if sys.version_info >= (3, 12):
        # not yet compiled in parts on 3.12 (the frame runs in Python, as
        # recorded; the results above are eager's): a known gap
        assert (graphs, eager) in ((0, 1),) or (graphs >= 1 and eager == 0), (graphs, breaks, eager)
    else:
        assert graphs >= 1 and eager == 0, (graphs, breaks, eager)
