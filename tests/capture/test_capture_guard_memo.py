"""The guards' and the GraphLoader's remembered lookups stay sound.

A passing check remembers, per source step (self.layers, .0, .lin,
.weight), the objects it read and the version tags of the dicts and types
it read them from, and per NO_HOOKS / NO_INSTANCE_ATTR check the module's
__dict__ version; the next call reuses those answers while the tags are
unchanged. Each test compiles a small module stack, calls it twice (the
second call runs on remembered answers), changes one thing those answers
depend on, and checks that the next call computes what eager computes and
that wick noticed (a new entry, or the same entry with the new object)."""
import pytest
import torch

import wick._C as C
from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.lin = torch.nn.Linear(d, d)

    def forward(self, x):
        return x + torch.relu(self.lin(self.ln(x)))


class Stack(torch.nn.Module):
    def __init__(self, d=8, n=3):
        super().__init__()
        self.layers = torch.nn.ModuleList([Block(d) for _ in range(n)])
        self.scale = torch.nn.Parameter(torch.randn(d))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x * self.scale


def _setup():
    C.reset()
    torch.manual_seed(0)
    m = Stack().eval().requires_grad_(False)
    x = torch.randn(4, 8)
    f = compiled(Stack.forward)
    with torch.no_grad():
        for _ in range(3):  # the later calls run on remembered lookups
            assert_same(f(m, x), m(x))
    assert len(entries(Stack.forward)) == 1 and not entries(Stack.forward)[0]["eager"]
    return m, x, f


def _same_as_eager(m, x, f):
    with torch.no_grad():
        want = m(x)
        for _ in range(2):
            assert_same(f(m, x), want)


def test_parameter_replaced_in_an_inner_module():
    m, x, f = _setup()
    m.layers[1].lin.weight = torch.nn.Parameter(torch.randn(8, 8), requires_grad=False)
    _same_as_eager(m, x, f)


def test_top_level_parameter_replaced():
    m, x, f = _setup()
    m.scale = torch.nn.Parameter(torch.full((8,), 3.0), requires_grad=False)
    _same_as_eager(m, x, f)


def test_parameter_data_swapped_in_place():
    m, x, f = _setup()
    with torch.no_grad():
        m.layers[2].lin.bias.copy_(torch.randn(8))
    m.layers[0].ln.weight.data = torch.randn(8)
    _same_as_eager(m, x, f)


def test_module_replaced_in_the_module_list():
    m, x, f = _setup()
    new = Block(8).eval().requires_grad_(False)
    with torch.no_grad():
        new.lin.weight.mul_(-2)
    m.layers[1] = new
    _same_as_eager(m, x, f)


def test_module_list_grows_and_shrinks():
    m, x, f = _setup()
    m.layers.append(Block(8).eval().requires_grad_(False))
    _same_as_eager(m, x, f)
    del m.layers[0]
    del m.layers[0]
    _same_as_eager(m, x, f)


def test_submodule_replaced_by_attribute_assignment():
    m, x, f = _setup()
    m.layers[0].lin = torch.nn.Linear(8, 8).requires_grad_(False)
    _same_as_eager(m, x, f)


def test_buffer_registered_under_a_submodule_name_takes_no_effect_until_deleted():
    # nn.Module.__getattr__ reads _parameters, then _buffers, then _modules:
    # a parameter of the same name registered later would shadow the module
    m, x, f = _setup()
    lin = m.layers[2].lin
    del m.layers[2]._modules["lin"]
    m.layers[2]._parameters["lin"] = None  # getattr now gives None: eager raises
    with torch.no_grad(), pytest.raises(TypeError):
        m(x)
    with torch.no_grad(), pytest.raises(TypeError):
        f(m, x)
    del m.layers[2]._parameters["lin"]
    m.layers[2]._modules["lin"] = lin
    _same_as_eager(m, x, f)


def test_instance_attribute_shadows_a_submodule():
    m, x, f = _setup()
    other = torch.nn.Linear(8, 8).requires_grad_(False)
    m.layers[1].__dict__["lin"] = other  # found before _modules by __getattr__'s caller
    _same_as_eager(m, x, f)


def test_class_attribute_shadows_a_submodule():
    class B2(Block):
        pass

    m, x, f = _setup()
    m.layers[0].__class__ = B2
    _same_as_eager(m, x, f)
    other = torch.nn.Linear(8, 8).requires_grad_(False)
    B2.lin = property(lambda self: other)  # a data descriptor wins over __getattr__
    _same_as_eager(m, x, f)
    del B2.lin
    _same_as_eager(m, x, f)


def test_getattr_overridden_on_a_subclass_after_compiling():
    class B3(Block):
        pass

    m, x, f = _setup()
    m.layers[2].__class__ = B3
    _same_as_eager(m, x, f)
    real = torch.nn.Module.__getattr__
    other = torch.nn.Linear(8, 8).requires_grad_(False)
    B3.__getattr__ = lambda self, name: other if name == "lin" else real(self, name)
    del m.layers[2]._modules["lin"]  # now only the new __getattr__ can answer
    _same_as_eager(m, x, f)


def test_forward_hook_added_to_an_inner_module():
    m, x, f = _setup()
    h = m.layers[1].ln.register_forward_hook(lambda mod, args, out: out * 0.5)
    _same_as_eager(m, x, f)
    h.remove()
    _same_as_eager(m, x, f)


def test_forward_pre_hook_added_to_the_module_list_item():
    m, x, f = _setup()
    h = m.layers[0].register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    _same_as_eager(m, x, f)
    h.remove()
    _same_as_eager(m, x, f)


def test_forward_shadowed_on_an_inner_instance():
    m, x, f = _setup()
    m.layers[2].lin.forward = lambda t: t * 7
    _same_as_eager(m, x, f)
    del m.layers[2].lin.forward
    _same_as_eager(m, x, f)


def test_layer_norm_eps_changed():
    m, x, f = _setup()
    m.layers[0].ln.eps = 0.5
    _same_as_eager(m, x, f)


def test_another_instance_of_the_same_class():
    m, x, f = _setup()
    torch.manual_seed(1)
    m2 = Stack().eval().requires_grad_(False)
    _same_as_eager(m2, x, f)
    _same_as_eager(m, x, f)
    assert len(entries(Stack.forward)) == 1  # same structure: the entry serves both


def test_fresh_modules_reusing_freed_memory():
    # modules freed and new ones made: a remembered object's address may be
    # reused by a new object; version tags of new dicts never repeat
    m, x, f = _setup()
    for seed in range(4):
        del m
        torch.manual_seed(seed)
        m = Stack().eval().requires_grad_(False)
        _same_as_eager(m, x, f)


def test_module_list_entry_set_to_none_and_back():
    m, x, f = _setup()
    keep = m.layers[1]
    m.layers[1] = None  # ModuleList.__iter__ yields it: calling None raises, as in eager
    with torch.no_grad(), pytest.raises(TypeError):
        m(x)
    with torch.no_grad(), pytest.raises(TypeError):
        f(m, x)
    m.layers[1] = keep
    _same_as_eager(m, x, f)


class Seq(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8))
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(8, 2), "b": torch.nn.Linear(8, 3)})

    def forward(self, x):
        h = self.body(x)
        return [head(h) for head in self.heads.values()]


def test_sequential_and_module_dict_change_after_compiling():
    C.reset()
    torch.manual_seed(0)
    m = Seq().eval().requires_grad_(False)
    x = torch.randn(4, 8)
    f = compiled(Seq.forward)

    def same():
        with torch.no_grad():
            want = m(x)
            for _ in range(2):
                got = f(m, x)
                assert len(got) == len(want)
                for a, b in zip(got, want):
                    assert_same(a, b)

    same()
    m.body.append(torch.nn.Tanh())
    same()
    m.heads["c"] = torch.nn.Linear(8, 4)
    same()
    del m.heads["a"]
    same()
    m.body[0] = torch.nn.Linear(8, 8)
    same()
