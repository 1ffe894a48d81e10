"""Attributes of arguments: an nn.Module's parameters, buffers and Python
numbers (forward(self, x), as wick.compile(module) calls it), and instance
attributes of plain objects. They become graph inputs read afresh by the
transformed code on every call, guarded by type, tensor metadata or value."""
import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403  (fixtures and helpers)
from test_capture_util import assert_same, compiled, entries, reasons


class Affine(torch.nn.Module):
    def __init__(self, n=5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n))
        self.register_buffer("shift", torch.randn(n))
        self.scale = 0.5
        self.act = torch.nn.ReLU()

    def forward(self, x):
        return torch.tanh(x * self.weight + self.shift) * self.scale, self.weight

    def uses_submodule(self, x):
        return self.act(x) + 1

    @property
    def doubled(self):
        return self.weight * 2

    def uses_property(self, x):
        return x + self.doubled


@pytest.mark.parametrize("backend", ["ref", "wick"])
def test_module_parameters_buffers_and_numbers(backend):
    m = Affine()
    x = torch.randn(3, 5)
    f = compiled(Affine.forward, backend)
    with torch.no_grad():
        r = f(m, x)
        assert_same(r, Affine.forward(m, x))
        assert r[1] is m.weight  # returned unchanged: the very same Parameter
        (e,) = entries(Affine.forward)
        assert not e["eager"] and e["graph_count"] == 1
        assert "L['self'].weight" in e["graph"] and "L['self'].shift" in e["graph"]
        assert any("EQUALS_MATCH L['self'].scale == 0.5" in g for g in e["guards"])
        # updated parameter values are read afresh: no recompile
        m.weight.mul_(3)
        assert_same(f(m, x), Affine.forward(m, x))
        assert len(entries(Affine.forward)) == 1
        # a changed Python number recompiles
        m.scale = 2.0
        assert_same(f(m, x), Affine.forward(m, x))
        assert len(entries(Affine.forward)) == 2
        # another instance with equal metadata reuses an entry
        m2 = Affine()
        assert_same(f(m2, x), Affine.forward(m2, x))
        assert len(entries(Affine.forward)) == 2
        # a replaced parameter of another shape recompiles
        m2.weight = torch.nn.Parameter(torch.randn(3, 1))
        assert_same(f(m2, x), Affine.forward(m2, x))
        assert len(entries(Affine.forward)) == 3
    # grad mode with a parameter that requires grad: compiled with autograd,
    # gradients equal eager's
    r = f(m, x)
    e = Affine.forward(m, x)
    assert_same(r, e)
    assert r[0].requires_grad
    got = torch.autograd.grad(sum(t.sum() for t in r), [m.weight])
    want = torch.autograd.grad(sum(t.sum() for t in e), [m.weight])
    assert_same(got, want)
    es = entries(Affine.forward)
    assert not es[0]["eager"] and es[0]["graph_count"] == 1 and es[0]["via_fx"]


def test_submodule_call_and_property_are_inlined():
    m = Affine()
    x = torch.randn(3, 5)
    assert_same(compiled(Affine.uses_submodule)(m, x), m.uses_submodule(x))
    (e,) = entries(Affine.uses_submodule)
    assert not e["eager"] and e["graph_count"] == 1 and "RELU" in e["graph"]
    assert any("NO_MODULE_HOOKS L['self'].act" in g for g in e["guards"])
    with torch.no_grad():
        assert_same(compiled(Affine.uses_property)(m, x), m.uses_property(x))
    (e,) = entries(Affine.uses_property)
    assert not e["eager"] and e["graph_count"] == 1


def test_submodule_with_hooks_runs_its_hooks():
    m = Affine()
    x = torch.randn(3, 5)
    f = compiled(Affine.uses_submodule)
    assert_same(f(m, x), m.uses_submodule(x))
    calls = []
    h = m.act.register_forward_hook(lambda mod, inp, out: calls.append(1) or out * 2)
    try:
        expected = torch.relu(x) * 2 + 1
        assert_same(f(m, x), expected)
        assert calls == [1]
        es = entries(Affine.uses_submodule)
        # the hook is inlined, its append to the test's list replayed after the graph
        assert len(es) == 2 and not reasons(Affine.uses_submodule), reasons(Affine.uses_submodule)
    finally:
        h.remove()
    assert_same(f(m, x), m.uses_submodule(x))


class Config:
    def __init__(self, k, bias):
        self.k = k
        self.bias = bias
        self.inner = None


def with_config(x, cfg):
    return x * cfg.k + cfg.bias, cfg.inner


def test_plain_object_attributes():
    x = torch.randn(4)
    cfg = Config(3, torch.randn(4))
    f = compiled(with_config, "ref")
    assert_same(f(x, cfg), with_config(x, cfg))
    cfg.bias = torch.randn(4)
    assert_same(f(x, cfg), with_config(x, cfg))
    assert len(entries(with_config)) == 1
    cfg.k = 4
    assert_same(f(x, cfg), with_config(x, cfg))
    assert len(entries(with_config)) == 2
    del cfg.bias  # a missing attribute fails the guard; eager raises
    with pytest.raises(AttributeError):
        f(x, cfg)


def inplace_param(self, x):
    self.weight += x
    return self.weight


def test_inplace_on_attribute_is_written_back():
    m = Affine()
    x = torch.randn(5)
    with torch.no_grad():
        w0 = m.weight.clone()
        r = compiled(inplace_param)(m, x)
        assert r is m.weight and torch.allclose(m.weight, w0 + x)
    assert m.weight.is_leaf and m.weight.requires_grad
    # the parameter is written in no_grad (copied back after the graph), and
    # the store of the same tensor back into the attribute changes nothing
    assert not reasons(inplace_param) and graphs(inplace_param)
    # with grad on, eager raises (a leaf that requires grad): so does the call
    with pytest.raises(RuntimeError):
        compiled(inplace_param)(m, x)


def test_transposed_convolution_is_one_graph():
    # ConvTranspose2d's forward builds its output padding through
    # torch.nn.modules.utils._pair, which calls itertools.repeat
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.ConvTranspose2d(4, 2, 2, stride=2)).eval()
    x = torch.randn(2, 3, 5, 6)
    fn = compiled(m.forward)
    with torch.no_grad():
        want = m(x)
        got = fn(x)
    assert_same(got, want, rtol=1e-4, atol=1e-4)
    assert reasons(m.forward) == [] and len([e for e in entries(m.forward) if e.get("graph_count")]) == 1


class DenseBlock(torch.nn.ModuleDict):
    """timm's DenseNet block: a ModuleDict whose forward walks self.items()
    (its _modules dict), each layer reading the concatenation so far."""

    def __init__(self, n=3, c=4):
        super().__init__()
        for i in range(n):
            self.add_module(f"layer{i}", torch.nn.Linear(c * (i + 1), c))

    def forward(self, x):
        feats = [x]
        for _, layer in self.items():
            feats.append(torch.relu(layer(torch.cat(feats, 1))))
        return torch.cat(feats, 1)


def test_module_dict_items_is_one_graph_and_guarded():
    torch.manual_seed(0)
    m = DenseBlock().eval()
    x = torch.randn(5, 4)
    fn = compiled(m.forward)
    with torch.no_grad():
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        assert reasons(m.forward) == []
        n0 = len(entries(m.forward))
        # another layer: the _modules keys no longer match, so the frame
        # compiles again, and unrolls four layers
        m.add_module("layer3", torch.nn.Linear(16, 4))
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        assert len(entries(m.forward)) == n0 + 1


class Stage(torch.nn.Module):
    """timm's RegStage: `for block in self.children()`, which walks
    named_children(), a generator keeping a set of the modules it yielded
    (`module not in memo`, `memo.add(module)`); one block shared twice."""

    def __init__(self, shared=False):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = self.a if shared else torch.nn.Linear(4, 4)
        self.c = torch.nn.Linear(4, 4)

    def forward(self, x):
        for block in self.children():
            x = torch.tanh(block(x))
        return x


@pytest.mark.parametrize("shared", [False, True])
def test_children_is_one_graph_and_guarded(shared):
    torch.manual_seed(0)
    m = Stage(shared).eval()
    x = torch.randn(3, 4)
    fn = compiled(m.forward)
    with torch.no_grad():
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        assert reasons(m.forward) == []
        n0 = len(entries(m.forward))
        assert n0 == 1
        # the modules are set elements by identity, their paths guarded: a
        # block swapped for another (or made the same as its neighbour)
        # compiles again, and eager's deduplication follows
        m.b = m.c if not shared else torch.nn.Linear(4, 4)
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        assert len(entries(m.forward)) == n0 + 1
        assert reasons(m.forward) == []


class SetOfModules(torch.nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x):
        seen = {self.a}
        if self.how == "iterate":
            for m in seen:  # handing a module back out of the set: refused
                x = m(x)
            return x
        if self.how == "pop":
            return seen.pop()(x)
        if self.how == "escape":
            return x * 2, seen
        seen.add(self.b)
        return x * (2 if self.b in seen else 3) * (5 if self.a in seen else 7) * len(seen)


@pytest.mark.parametrize("how", ["in", "iterate", "pop", "escape"])
def test_set_of_modules(how):
    torch.manual_seed(0)
    m = SetOfModules(how).eval()
    x = torch.randn(3, 4)
    fn = compiled(m.forward)
    with torch.no_grad():
        got, want = fn(x), m(x)
        if how == "escape":
            assert_same(got[0], want[0])
            assert got[1] == want[1] and got[1] is not want[1]
        else:
            assert_same(got, want, rtol=1e-5, atol=1e-5)
    if how == "in":
        assert reasons(m.forward) == []
    else:
        assert any("set of modules or objects" in r for r in reasons(m.forward)), reasons(m.forward)


def nested(depth):
    """depth Sequentials inside each other around a Linear: the Linear's
    weight sits at a path of two steps per level (_modules, then the key)."""
    m = torch.nn.Linear(4, 4)
    for _ in range(depth):
        m = torch.nn.Sequential(torch.nn.Identity(), m)
    return m


def test_deeply_nested_modules_are_one_graph_and_guarded():
    """timm's fastvit and efficientvit reach parameters ten or more
    attribute steps from self (capture refused paths of 8 and more)."""
    torch.manual_seed(0)
    m = nested(9).eval()
    x = torch.randn(3, 4)
    fn = compiled(m.forward)
    with torch.no_grad():
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        assert reasons(m.forward) == [] and len(entries(m.forward)) == 1
        inner = m
        while isinstance(inner, torch.nn.Sequential):
            inner = inner[1]
        inner.weight.mul_(2)  # the parameter read afresh through its path
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        inner.weight = torch.nn.Parameter(torch.randn(4, 4))  # another tensor there
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)


def scaled_gelu(x, inplace=False):
    return torch.nn.functional.gelu(x) * 1.7


def scaled_tanh(x, inplace=False):
    return torch.tanh(x) * 0.5


class GammaAct(torch.nn.Module):
    """timm's nfnet GammaAct: a Python function kept as an instance
    attribute, called with a keyword, its result scaled in place."""

    def __init__(self, fn, gamma=2.0):
        super().__init__()
        self.act_fn, self.gamma, self.inplace = fn, gamma, False

    def forward(self, x):
        return self.act_fn(x, inplace=self.inplace).mul_(self.gamma)


def test_function_attribute_is_inlined_and_guarded():
    m = GammaAct(scaled_gelu)
    x = torch.randn(3, 5)
    fn = compiled(m.forward)
    with torch.no_grad():
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        assert reasons(m.forward) == [] and len(entries(m.forward)) == 1
        m.act_fn = scaled_tanh  # another function there: compiled again
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        assert len(entries(m.forward)) == 2
        scale = 3.0
        m.act_fn = lambda x, inplace=False: x * scale  # a closure: its cell guarded
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        scale = 4.0
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        assert reasons(m.forward) == []


class PartialConv(torch.nn.Module):
    """timm's FasterNet Partial_conv3: the forward picked in __init__ and
    kept in the instance dict (self.forward = self.forward_slicing)."""

    def __init__(self, how):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 2, 3, padding=1, bias=False)
        self.forward = self.forward_slicing if how == "slicing" else self.forward_split

    def forward_slicing(self, x):
        x = x.clone()
        x[:, :2] = self.conv(x[:, :2])
        return x

    def forward_split(self, x):
        a, b = torch.split(x, [2, x.shape[1] - 2], dim=1)
        return torch.cat((self.conv(a), b), 1)


class Block(torch.nn.Module):
    def __init__(self, how):
        super().__init__()
        self.mix = PartialConv(how)

    def forward(self, x):
        return x + self.mix(x)


@pytest.mark.parametrize("how", ["slicing", "split"])
def test_instance_forward_method_is_inlined_and_guarded(how):
    torch.manual_seed(0)
    m = Block(how).eval()
    x = torch.randn(2, 5, 6, 7)
    fn = compiled(m.forward)
    with torch.no_grad():
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        assert reasons(m.forward) == [] and len(entries(m.forward)) == 1
        other = "split" if how == "slicing" else "slicing"
        m.mix.forward = getattr(m.mix, "forward_" + other)  # another method there: compiled again
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        assert reasons(m.forward) == [] and len(entries(m.forward)) == 2
        twin = PartialConv(how)  # a method of another module: not the one guarded
        m.mix.forward = twin.forward
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)


class Activation(torch.nn.Module):
    """transformers' GELUActivation: no parameters, its function an attribute."""

    def __init__(self, fn):
        super().__init__()
        self.act = fn

    def forward(self, x):
        return self.act(x) * 2


GLOBAL_ACT = Activation(torch.nn.functional.gelu)
GLOBAL_SCALE = torch.nn.Linear(4, 4)  # a module with parameters held as a global


def head(x):
    return GLOBAL_ACT(x + 1) - 1


def head_with_parameters(x):
    return GLOBAL_SCALE(x)


def test_stateless_global_module_is_inlined_and_guarded():
    """A module held as a module-level global (RoBERTa's head calls
    `gelu = get_activation("gelu")`) with no parameters, buffers or hooks
    is inlined; a hook, a parameter or another function there compiles
    again (its dict is guarded) and computes what eager does."""
    x = torch.randn(3, 4)
    fn = compiled(head)
    try:
        assert_same(fn(x), head(x), rtol=1e-6, atol=1e-6)
        assert reasons(head) == [] and len(entries(head)) == 1
        GLOBAL_ACT.act = torch.tanh
        assert_same(fn(x), head(x), rtol=1e-6, atol=1e-6)
        assert len(entries(head)) == 2
        seen = []
        handle = GLOBAL_ACT.register_forward_hook(lambda m, i, o: seen.append(1))
        assert_same(fn(x), head(x), rtol=1e-6, atol=1e-6)
        handle.remove()
        assert len(seen) == 2  # the hook ran in the compiled call too
        GLOBAL_ACT.register_buffer("offset", torch.ones(4))  # state: no longer inlined as stateless
        assert_same(fn(x), head(x), rtol=1e-6, atol=1e-6)
    finally:
        GLOBAL_ACT.act = torch.nn.functional.gelu
        del GLOBAL_ACT._buffers["offset"]


def test_global_module_with_parameters_is_not_inlined():
    x = torch.randn(3, 4)
    fn = compiled(head_with_parameters)
    assert_same(fn(x), head_with_parameters(x), rtol=1e-6, atol=1e-6)
    assert reasons(head_with_parameters) != []  # a break, recorded: its parameters have no source


class Regularised(torch.nn.Module):
    """A forward that walks its own parameters (nn.Module._named_members
    keeps them in a set to yield a shared one once)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        self.c = self.a  # shared

    def forward(self, x):
        reg = sum(p.square().sum() for p in self.parameters())
        return self.b(self.a(x)) * len(list(self.named_parameters())) + reg


def test_parameters_walked_in_forward_is_one_graph():
    torch.manual_seed(0)
    m = Regularised()
    x = torch.randn(3, 4)
    fn = compiled(m.forward)
    with torch.no_grad():
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        assert reasons(m.forward) == [] and len(entries(m.forward)) == 1
        m.b.weight = torch.nn.Parameter(torch.randn(4, 4))  # another parameter object: its identity was guarded
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        m.c = m.b  # now b is the shared one
        assert_same(fn(x), m(x), rtol=1e-5, atol=1e-5)
        assert reasons(m.forward) == []


class MergesHeads(torch.nn.Module):
    """GPT-NeoX-Japanese's attention: a classmethod called through self."""

    heads = 2

    @classmethod
    def merge(cls, x, n):
        return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], n * x.shape[-1]) * cls.heads

    def forward(self, x):
        return self.merge(x, self.heads)


def test_classmethod_through_the_instance():
    m = MergesHeads()
    x = torch.randn(3, 2, 5, 4)
    f = compiled(MergesHeads.forward)
    assert_same(f(m, x), m(x))
    one_graph(MergesHeads.forward)
