"""What the compiler tests (tests/lower, tests/codegen) share: one temporary
artifact cache per session, so graphs that repeat across parametrisations
compile once and ~/.cache/wick stays clean, and WICK_DEBUG_DIR set, which
makes wk_compile_graph run the loop-IR and schedule verifiers between passes
on every graph these tests compile; and `compile_run`, which builds, compiles
and runs a graph on eager tensors."""
import pytest

import wick._C as C


@pytest.fixture(autouse=True, scope="session")
def _wick_cache_dir(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("WICK_CACHE_DIR", str(tmp_path_factory.mktemp("wick-cache")))
    mp.setenv("WICK_DEBUG_DIR", str(tmp_path_factory.mktemp("wick-debug")))
    C.env_reload()
    yield
    mp.undo()
    C.env_reload()


def compile_run(build, *tensors):
    """build(g, *input_ids) returns the output ids; returns (CompiledGraph, outputs)."""
    g = C.Graph()
    ids = [g.input_like(t) for t in tensors]
    outs = build(g, *ids)
    for o in outs:
        g.output(o)
    cg = g.compile()
    return cg, cg(*tensors)
