"""Sources read in C: the guards and the GraphLoader (the call from the
transformed code into the graph) resolve each attribute path of the frame's
arguments once per call, reading nn.Module's __dict__/_parameters/_buffers/
_modules and nn.ModuleList items directly while the classes keep
nn.Module.__getattr__ and ModuleList.__getitem__. These tests change what
those fast reads stand for and compare with eager every time."""
import torch

from test_capture_util import *  # noqa: F401,F403
from test_capture_util import assert_same, compiled, entries
import wick._C as C


class Block(torch.nn.Module):
    def __init__(self, d=6):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.lin = torch.nn.Linear(d, d)
        self.register_buffer("shift", torch.randn(d))

    def forward(self, x):
        return x + torch.relu(self.lin(self.ln(x))) + self.shift


class Stack(torch.nn.Module):
    def __init__(self, n=3, d=6):
        super().__init__()
        self.layers = torch.nn.ModuleList([Block(d) for _ in range(n)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Indexed(torch.nn.Module):
    def __init__(self, n=3, d=6):
        super().__init__()
        self.layers = torch.nn.ModuleList([Block(d) for _ in range(n)])

    def forward(self, x):
        return self.layers[2](self.layers[0](x)) * self.layers[1].lin.weight.sum()


def _loader(fn):
    codes = [c for c in C._entry_codes(fn.__code__) if c is not None]
    return [k for c in codes for k in c.co_consts if type(k).__name__ == "GraphLoader"]


def test_shared_prefixes_one_graph_and_values_read_afresh():
    torch.manual_seed(0)
    for cls in (Stack, Indexed):
        C.reset()
        m, x = cls(), torch.randn(4, 6)
        f = compiled(cls.forward)
        with torch.no_grad():
            assert_same(f(m, x), cls.forward(m, x))
            (e,) = entries(cls.forward)
            assert not e["eager"] and e["graph_count"] == 1
            assert _loader(cls.forward)
            m.layers[1].lin.weight.mul_(2)  # in place: same tensor, new values
            m.layers[2].shift.add_(1)
            assert_same(f(m, x), cls.forward(m, x))
            assert len(entries(cls.forward)) == 1


def test_replaced_parameter_submodule_and_buffer():
    torch.manual_seed(1)
    m, x = Stack(), torch.randn(4, 6)
    f = compiled(Stack.forward)
    with torch.no_grad():
        f(m, x)
        m.layers[0].lin.weight = torch.nn.Parameter(torch.randn(6, 6))  # same metadata: reused entry
        assert_same(f(m, x), Stack.forward(m, x))
        m.layers[2].lin = torch.nn.Linear(6, 6)  # a new submodule
        assert_same(f(m, x), Stack.forward(m, x))
        m.layers[1].shift = torch.randn(6)  # a buffer replaced
        assert_same(f(m, x), Stack.forward(m, x))
        m.layers[1] = Block()  # a ModuleList item replaced
        assert_same(f(m, x), Stack.forward(m, x))
        assert all(not e["eager"] for e in entries(Stack.forward))


class Renaming(torch.nn.Module):
    """__getattr__ of its own: the fast module read must not stand for it."""

    def __init__(self):
        super().__init__()
        self.inner = Block()
        self.flip = False

    def __getattr__(self, name):
        if name == "inner" and self.__dict__.get("flip"):
            return torch.nn.Module.__getattr__(self, "other")
        return super().__getattr__(name)

    def forward(self, x):
        return self.inner(x)


def test_module_with_its_own_getattr_is_read_through_it():
    torch.manual_seed(2)
    m, x = Renaming(), torch.randn(2, 6)
    m.other = Block()
    f = compiled(Renaming.forward)
    with torch.no_grad():
        assert_same(f(m, x), Renaming.forward(m, x))
        m.flip = True  # now self.inner is self.other: eager and wick agree
        assert_same(f(m, x), Renaming.forward(m, x))


class MyList(torch.nn.ModuleList):
    def __getitem__(self, i):
        return super().__getitem__(len(self) - 1 - i)  # reversed indexing


class UsesMyList(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = MyList([Block() for _ in range(3)])

    def forward(self, x):
        return self.layers[0](x) - self.layers[2](x)


def test_module_list_subclass_and_patched_getitem():
    torch.manual_seed(3)
    m, x = UsesMyList(), torch.randn(2, 6)
    with torch.no_grad():
        assert_same(compiled(UsesMyList.forward)(m, x), UsesMyList.forward(m, x))
        m2, x2 = Indexed(), torch.randn(2, 6)
        f = compiled(Indexed.forward)
        assert_same(f(m2, x2), Indexed.forward(m2, x2))
        orig = torch.nn.ModuleList.__getitem__
        try:
            torch.nn.ModuleList.__getitem__ = lambda self, i: orig(self, (i + 1) % len(self))
            assert_same(f(m2, x2), Indexed.forward(m2, x2))
        finally:
            torch.nn.ModuleList.__getitem__ = orig
        assert_same(f(m2, x2), Indexed.forward(m2, x2))


def test_attribute_removed_after_compile_recompiles_or_raises_like_eager():
    torch.manual_seed(4)
    m, x = Stack(), torch.randn(2, 6)
    f = compiled(Stack.forward)
    with torch.no_grad():
        f(m, x)
        del m.layers[0].lin  # eager raises AttributeError: so must wick
        try:
            Stack.forward(m, x)
        except AttributeError as e:
            want = type(e)
        try:
            f(m, x)
        except AttributeError as e:
            assert type(e) is want
        else:
            raise AssertionError("wick did not raise")


def test_instances_alternating_on_one_entry_get_their_own_parameters():
    """A passing guard check hands the objects it resolved to the graph
    call; alternating instances must never see each other's."""
    torch.manual_seed(5)
    ms = [Stack() for _ in range(3)]
    x = torch.randn(2, 6)
    f = compiled(Stack.forward)
    with torch.no_grad():
        for _ in range(3):
            for m in ms:
                assert_same(f(m, x), Stack.forward(m, x))
    assert len(entries(Stack.forward)) == 1


def test_graph_called_from_inside_another_compiled_frame():
    torch.manual_seed(6)
    inner, outer_m = Stack(), Block()
    fi = compiled(Stack.forward)

    class Outer(torch.nn.Module):
        def forward(self, x):
            return fi(inner, outer_m(x)) * 2

    o, x = Outer(), torch.randn(2, 6)
    with torch.no_grad():
        want = Stack.forward(inner, Block.forward(outer_m, x)) * 2
        for _ in range(3):
            assert_same(compiled(Outer.forward)(o, x), want)
            assert_same(fi(inner, x), Stack.forward(inner, x))
