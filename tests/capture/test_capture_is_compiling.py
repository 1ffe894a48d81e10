"""torch.compiler.is_compiling() during wick's capture answers True, as it
does while Dynamo traces (vals/builtins.c says why): library code uses it to
leave data-dependent shortcuts out of graphs. Compared here with
torch.compile(backend="eager"), which takes the same path, and, where the
library promises the same values either way (transformers' packed-sequence
check), with eager.

Attribute writes to pinned global instances (transformers'
CompileableContextVar flips its `compiling` flag under is_compiling) are kept
in the capture's overlay and replayed after the graph."""
import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries, one_graph, reasons


def gated(x):
    if torch.compiler.is_compiling():
        return x + 1
    return x - 1


def gated_dynamo_and_utils(x):
    a = torch._dynamo.is_compiling()
    b = torch._utils.is_compiling()
    c = torch.compiler.is_dynamo_compiling()  # wick is not Dynamo: False
    d = torch.compiler.is_exporting()
    return x * (1 + a + 2 * b + 4 * c + 8 * d)


def skips_data_dependent_check(x):
    # the pattern of transformers' find_packed_sequence_indices
    m = (x > 0).cumsum(-1)
    if not torch.compiler.is_compiling() and (m[:, -1] == 0).all():
        return None
    return m


def test_which_queries_answer_true():
    x = torch.randn(3)
    # is_compiling in its three spellings: True; is_dynamo_compiling and
    # is_exporting: False (code behind them calls Dynamo's or export's APIs)
    assert_same(compiled(gated_dynamo_and_utils)(x), x * 4)
    assert_same(gated_dynamo_and_utils(x), x)
    one_graph(gated_dynamo_and_utils)


@pytest.mark.parametrize("fn", [gated, skips_data_dependent_check])
def test_is_compiling_answers_as_dynamo_does(fn):
    x = torch.randn(3, 4)
    torch._dynamo.reset()
    want = torch.compile(fn, backend="eager")(x)
    got = compiled(fn)(x)
    assert_same(got, want)
    one_graph(fn)
    # eager Python still sees False
    assert torch.compiler.is_compiling() is False


class Collector:
    """transformers' CompileableContextVar, reduced: under compile it keeps
    the value in a plain attribute and remembers that it did."""

    def __init__(self):
        self.compiling = False
        self.value = None

    def set(self, v):
        if torch.compiler.is_compiling():
            self.value = v
            self.compiling = True

    def get(self):
        return self.value if self.compiling else None


COLLECTOR = Collector()


def uses_collector(x):
    COLLECTOR.set(x * 2)
    got = COLLECTOR.get()
    out = x + (got if got is not None else 0)
    COLLECTOR.value = None
    return out


def test_attribute_writes_to_a_global_instance_are_replayed():
    COLLECTOR.compiling = False
    x = torch.randn(5)
    with torch.no_grad():
        got = compiled(uses_collector)(x)
    assert_same(got, x * 3)  # what torch.compile computes
    # replayed after the graph: the flag stays set, the value was cleared
    assert COLLECTOR.compiling is True and COLLECTOR.value is None
    es = entries(uses_collector)
    assert not es[0]["eager"] and es[0]["graph_count"] == 1, reasons(uses_collector)
    # capture read only its own write of the flag: the entry is reused
    with torch.no_grad():
        assert_same(compiled(uses_collector)(x), x * 3)
    assert len(entries(uses_collector)) == 1
    assert COLLECTOR.compiling is True and COLLECTOR.value is None


def holds_tensor(x):
    y = x.sin()
    COLLECTOR.value = y
    return y * 2


def test_a_tensor_written_to_a_global_instance():
    x = torch.randn(4)
    with torch.no_grad():
        got = compiled(holds_tensor)(x)
    assert_same(got, x.sin() * 2)
    assert_same(COLLECTOR.value, x.sin())
    COLLECTOR.value = None


transformers = pytest.importorskip("transformers")


def test_gpt2_without_cache_is_one_graph():
    """No attention mask, no cache: transformers checks the position ids for
    packed sequences, a data-dependent early exit it skips while compiling
    (masking_utils.find_packed_sequence_indices); the mask built instead
    gives the same values."""
    T = transformers
    cfg = T.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    torch.manual_seed(0)
    model = T.GPT2Model(cfg).eval()
    kw = dict(input_ids=torch.randint(0, 100, (2, 8)), use_cache=False)
    C.reset()
    with torch.no_grad():
        want = model(**kw)
        for _ in range(2):
            got = compiled(type(model).forward)(model, **kw)
            torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state, rtol=1e-4, atol=1e-5)
    es = entries(type(model).forward)
    assert not es[0]["eager"] and es[0]["graph_count"] == 1, reasons(type(model).forward)


class Permute(torch.nn.Module):
    """torchvision's Permute: the dims in a list attribute."""

    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return torch.permute(x, self.dims) * 2


def test_list_attribute_of_an_argument_is_guarded_by_value():
    m = Permute([2, 0, 1])
    x = torch.randn(2, 3, 4)
    f = compiled(Permute.forward)
    with torch.no_grad():
        assert_same(f(m, x), Permute.forward(m, x))
        one_graph(Permute.forward)
        m.dims[0], m.dims[2] = 1, 2  # changed in place: the guard sees it
        assert_same(f(m, x), Permute.forward(m, x))
    assert len(entries(Permute.forward)) == 2


class Appender(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = [1, 2]

    def forward(self, x):
        self.seen.append(3)  # changes the real list: not done by capture
        return x * len(self.seen)


def test_list_attribute_is_not_changed_by_capture():
    m, m2 = Appender(), Appender()
    x = torch.randn(3)
    with torch.no_grad():
        assert_same(compiled(Appender.forward)(m, x), Appender.forward(m2, x))
    assert m.seen == m2.seen == [1, 2, 3]


def mha_fast_path_checks(x, w, b):
    if torch.overrides.has_torch_function((x, w, b)):
        return x
    if x.is_nested or x.is_sparse or not x.is_cpu or x.layout != torch.strided:
        return x
    if torch.utils._python_dispatch._get_current_dispatch_mode_stack():
        return x
    return torch.nn.functional.linear(x, w, b)


def test_fast_path_queries_are_answered():
    x, w, b = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5)
    with torch.no_grad():
        assert_same(compiled(mha_fast_path_checks)(x, w, b), mha_fast_path_checks(x, w, b))
    one_graph(mha_fast_path_checks)


def test_multihead_attention_module_one_graph():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 8)

    def attend(m, x):
        return m(x, x, x, need_weights=False)[0]

    with torch.no_grad():
        assert_same(compiled(attend)(mha, x), attend(mha, x))
    one_graph(attend)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    want = torch.autograd.grad(attend(mha, xa).sum(), xa)
    got = torch.autograd.grad(compiled(attend)(mha, xb).sum(), xb)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def mask_only_when_eager(x, mask=None):
    # transformers' SwitchTransformers and LongT5: the mask is made only when
    # not compiling, then subscripted: capture cannot subscript None, and a
    # graph break there would run the subscript eagerly on the None the
    # graph hands over; the frame falls back instead.
    n = x.shape[-1]
    if mask is None and not torch.compiler.is_compiling():
        mask = torch.ones(x.shape[0], n)
    y = x.sin()
    return y * mask[:, None, :]


def test_no_break_after_is_compiling_answered():
    x = torch.randn(2, 3, 4)
    got = compiled(mask_only_when_eager)(x)
    assert_same(got, mask_only_when_eager(x))
    es = entries(mask_only_when_eager)
    assert es and es[0]["eager"], es
    assert "is_compiling() answered True before it" in es[0]["reason"], es[0]["reason"]


def other_break_after_the_query(x):
    # a break after the query on anything but None stays a break: the
    # values of the compiling branch are the same values
    y = x.sin() if torch.compiler.is_compiling() else torch.sin(x)
    print("", end="")
    return y * 2


def test_other_breaks_after_the_query_stay_breaks():
    x = torch.randn(4)
    assert_same(compiled(other_break_after_the_query)(x), x.sin() * 2)
    es = entries(other_break_after_the_query)
    assert es and not es[0]["eager"] and es[0].get("breaks"), es


def asks_after_the_break(x):
    y = x.cos()
    print("", end="")  # a graph break before the query: allowed
    if torch.compiler.is_compiling():
        return y + 1
    return y - 1


def test_a_break_before_the_query_stays_a_break():
    x = torch.randn(5)
    got = compiled(asks_after_the_break)(x)
    assert_same(got, x.cos() + 1)  # the resume function's graph answers True, as Dynamo's does
    es = entries(asks_after_the_break)
    assert es and not es[0]["eager"] and es[0].get("breaks"), es
