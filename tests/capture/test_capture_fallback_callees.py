"""A frame that falls back runs eagerly, and the Python functions it calls are
captured as frames of their own, as PyTorch's capture does: a model whose top
forward cannot be captured (transformers' LongT5 and SwitchTransformers
stacks, which leave a mask None under is_compiling()) still has its layers
compiled. Torch's and Python's own code is left alone, a callee with no graph
op of its own runs as written (its callees are captured in turn), a callee
that reads is_compiling() and has nothing for a graph keeps eager's answer,
what a compiled graph calls out to is not captured again, and a function
torch.compiler.disable wraps stays eager (a graph break where a compiled
frame calls it). A frame past the cache limit because of Python values has
its callees captured too; one whose shapes kept changing does not. wick.stats()
counts the callees' graphs; results and gradients are eager's."""
import os

import torch
import torch.nn.functional as F

import wick
import wick._C as C
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, break_counts, compiled, entries, stats_counts


def compiling():
    return torch.compiler.is_compiling()


class Block(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = torch.nn.Linear(n, n)

    def forward(self, x, mask):
        return F.gelu(self.lin(x)) * mask + x


class Stack(torch.nn.Module):
    """LongT5's pattern: the mask is made only outside a compile, then
    indexed: capture reads None there and the frame falls back."""

    def __init__(self, n=8, depth=3):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(n) for _ in range(depth))

    def forward(self, x, mask=None):
        if mask is None and not compiling():
            mask = torch.ones(x.shape[0], device=x.device)
        mask = mask[:, None]
        for b in self.blocks:
            x = b(x, mask)
        return x


def compiled_blocks():
    return [e for e in entries(Block.forward) if not e["eager"]]


def check_twice(m, x):
    """wick.compile(m) after wick.reset(), called twice under no_grad: each result eager's."""
    wick.reset()
    f = wick.compile(m)
    with torch.no_grad():
        want = m(x)
        assert_same(f(x), want)
        assert_same(f(x), want)


def test_fallback_frame_compiles_its_layers():
    torch.manual_seed(0)
    check_twice(Stack(), torch.randn(4, 8))
    graphs, breaks, fallbacks = stats_counts()
    assert fallbacks == 1 and graphs >= 1
    (reason,) = wick.stats()["fallbacks"]
    assert "subscript of a NoneType" in reason
    assert compiled_blocks(), entries(Block.forward)
    # the fallback's entry lists the code it compiled
    (fb,) = [e for e in entries(Stack.forward) if e["eager"]]
    assert Block.forward.__code__ in fb["callees"]


def test_helper_reading_is_compiling_keeps_eagers_answer():
    # compiling() is called from the eager run of the fallback frame: compiled
    # as a root frame it would answer True and leave the mask None
    check_twice(Stack(), torch.randn(3, 8))
    (e,) = entries(compiling)
    assert e["eager"] and not e.get("reason") and "is_compiling" in e["skipped"]
    assert compiling() is False


def test_root_frame_without_graph_answers_is_compiling_as_eager():
    assert compiled(compiling)() is False
    (e,) = entries(compiling)
    assert e["eager"] and not e.get("reason")


def test_library_code_is_left_alone():
    check_twice(Stack(), torch.randn(2, 8))
    # torch's Module.__call__ machinery and F.gelu's Python wrapper ran
    # inside the eager frame: no entries
    assert C.code_entries(torch.nn.Module._call_impl.__code__) == []
    assert C.code_entries(torch.nn.Linear.forward.__code__) == []


class Cfg:
    def __init__(self):
        self.scale = 2.0


def read_scale(cfg):
    return cfg.scale  # nothing for a graph


def scaled(x, cfg):
    return x * read_scale(cfg)


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Stack(8, 2)
        self.cfg = Cfg()

    def forward(self, x, mask=None):
        if mask is None and not compiling():
            mask = torch.ones(x.shape[0])
        y = mask[:, None] * 0  # falls back here
        return scaled(self.inner(x), self.cfg) + y


def test_callee_without_ops_runs_as_written_and_nested_fallbacks_adopt_in_turn():
    torch.manual_seed(1)
    check_twice(Outer(), torch.randn(5, 8))
    # Outer falls back, and so does Stack (its callee) for the same reason;
    # Stack's blocks and `scaled` are compiled
    assert len(wick.stats()["fallbacks"]) == 2
    assert [e for e in entries(scaled) if not e["eager"] and e["graph_count"] == 1]
    assert compiled_blocks()
    # read_scale was inlined into `scaled`'s graph: never a frame of its own
    assert entries(read_scale) == []


def breaks_before_any_op(blocks, x, mask):
    os.getpid()  # a call capture does not model, before any op: nothing of its own for a graph
    return run_blocks(blocks, x, mask)


def test_callee_of_no_op_helper_is_adopted():
    # a helper with nothing for a graph runs as written, and its own
    # callees are still compiled
    class M(Stack):
        def forward(self, x, mask=None):
            if mask is None and not compiling():
                mask = torch.ones(x.shape[0])
            mask = mask[:, None]
            return breaks_before_any_op(self.blocks, x, mask)

    torch.manual_seed(2)
    check_twice(M(), torch.randn(3, 8))
    (e,) = entries(breaks_before_any_op)
    assert e["eager"] and not e.get("reason") and "no graph ops" in e["skipped"], e
    assert [e for e in entries(run_blocks) if not e["eager"] and e["graph_count"] == 1]
    assert len(wick.stats()["fallbacks"]) == 1 and stats_counts()[0] >= 1


def run_blocks(blocks, x, mask):
    for b in blocks:
        x = b(x, mask)
    return x


def test_training_through_adopted_layers():
    torch.manual_seed(3)
    m = Stack()
    m2 = Stack()
    m2.load_state_dict(m.state_dict())
    x = torch.randn(4, 8)
    wick.reset()
    f = wick.compile(m2)
    for _ in range(2):
        m.zero_grad()
        m2.zero_grad()
        m(x).square().sum().backward()
        f(x).square().sum().backward()
        for p, q in zip(m.parameters(), m2.parameters()):
            assert_same(q.grad, p.grad)
    assert stats_counts()[0] >= 1


def test_non_contiguous_and_empty_inputs():
    torch.manual_seed(4)
    m = Stack()
    wick.reset()
    f = wick.compile(m)
    with torch.no_grad():
        x = torch.randn(6, 16)[:, ::2]  # strided columns
        xt = torch.randn(8, 6).t()  # transposed
        assert not x.is_contiguous() and not xt.is_contiguous()
        assert_same(f(xt), m(xt))
        e = torch.randn(0, 8)
        assert_same(f(e), m(e))
        assert_same(f(x), m(x))


def test_a_callee_that_raises_raises_as_in_eager():
    class Bad(torch.nn.Module):
        def forward(self, x, mask):
            raise ValueError("from the block")

    m = Stack()
    m.blocks[1] = Bad()
    wick.reset()
    f = wick.compile(m)
    x = torch.randn(2, 8)
    for _ in range(2):
        try:
            f(x)
        except ValueError as err:
            assert str(err) == "from the block"
        else:
            raise AssertionError("no exception")


def test_counts_survive_reset():
    # adopted codes stay marked across wick.reset(); the next fallback run
    # lists them again, so stats() counts their new graphs
    m = Stack()
    x = torch.randn(2, 8)
    for _ in range(2):
        wick.reset()
        f = wick.compile(m)
        with torch.no_grad():
            f(x)
        graphs, _, fallbacks = stats_counts()
        assert fallbacks == 1 and graphs >= 1
    assert break_counts(m.forward.__func__)[0] >= 1


class Counted(torch.nn.Module):
    """A forward specialised on an int that changes every call (a step
    counter): past the cache limit it runs eagerly, its blocks compiled."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(8) for _ in range(2))

    def forward(self, x, step: int):
        mask = torch.ones(x.shape[0]) * (step % 3 + 1)
        for b in self.blocks:
            x = b(x, mask[:, None])
        return x


def test_cache_limit_from_python_values_still_compiles_the_callees():
    torch.manual_seed(5)
    m = Counted()
    x = torch.randn(4, 8)
    wick.reset()
    f = wick.compile(m)
    with torch.no_grad():
        for step in range(12):
            assert_same(f(x, step), m(x, step))
    reasons_ = wick.stats()["fallbacks"]
    assert len(reasons_) == 1 and "cache limit" in reasons_[0]
    compiled_blocks = [e for e in entries(Block.forward) if not e["eager"]]
    assert len(compiled_blocks) == 1, entries(Block.forward)  # one graph for every step after the limit


class GrowBlock(Block):
    def forward(self, x, mask):  # a code object no other test has captured (captured codes stay marked)
        return F.gelu(self.lin(x)) * mask - x


class Growing(Counted):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(GrowBlock(8) for _ in range(2))

    def forward(self, x, step: int):
        return super().forward(x, step)


def test_cache_limit_from_growing_shapes_leaves_the_callees_alone():
    # the callees' shapes grow too: capturing them would only recompile them in turn
    torch.manual_seed(6)
    m = Growing()
    wick.reset()
    f = wick.compile(m)
    with torch.no_grad():
        for n in range(1, 12):
            x = torch.randn(n, 8)
            assert_same(f(x, 0), m(x, 0))
    (reason,) = wick.stats()["fallbacks"]
    assert "size mismatch" in reason
    assert entries(GrowBlock.forward) == []


@torch.compiler.disable
def kept_eager(x):
    return x.cos() + 1


def plain_helper(x):
    return x.sin() * 2


class UsesDisabled(Stack):
    def forward(self, x, mask=None):
        if mask is None and not compiling():
            mask = torch.ones(x.shape[0])
        mask = mask[:, None]  # falls back here
        return kept_eager(x) * mask + plain_helper(x)


def calls_disabled(x):
    return kept_eager(x * 2) - 1


def test_torch_compiler_disable_is_respected():
    x = torch.randn(3, 8)
    m = UsesDisabled()
    wick.reset()
    f = wick.compile(m)
    with torch.no_grad():
        for _ in range(2):
            assert_same(f(x), m(x))
    # the fallback's eager run compiled the plain helper, not the disabled function
    assert [e for e in entries(plain_helper) if not e["eager"]]
    assert C.code_entries(kept_eager.__wrapped__.__code__) == []
    # called from a compiled frame: a graph break with that reason, the function eager
    g = compiled(calls_disabled)
    assert_same(g(x), calls_disabled(x))
    assert C.code_entries(kept_eager.__wrapped__.__code__) == []
    (e,) = entries(calls_disabled)
    assert "torch.compiler.disable" in e["breaks"][0]["reason"]
