"""What the compiler tests (tests/lower, tests/codegen) share: one temporary
artifact cache per session, so graphs that repeat across parametrisations
compile once and ~/.cache/wick stays clean, and WICK_DEBUG_DIR set, which
makes wk_compile_graph run the loop-IR and schedule verifiers between passes
on every graph these tests compile; `compile_run`, which builds, compiles
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


def llc_bytes():
    """The last-level cache size the C code generator reads (cgen_c.c
    llc_bytes): the outputs that streamed stores and row lags apply to."""
    import os

    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as f:
            text = f.read().strip()
        scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1], 1)
        return int(text.rstrip("KM")) * scale
    except (OSError, ValueError, IndexError):
        pass
    try:
        v = os.sysconf("SC_LEVEL3_CACHE_SIZE")
    except (ValueError, OSError):
        v = 0
    return v if v > 0 else 32 << 20


def kernel_source(cg):
    """The generated C of a compiled graph's kernels (its cached source)."""
    with open(cg.library_path[:-3] + ".c") as f:
        src = f.read()
    return src[src.index("/* kernel 0"):]
