"""Compiler tests share one temporary artifact cache per session: graphs that
repeat across parametrisations compile once, and ~/.cache/wick stays clean.
WICK_DEBUG_DIR is set too, which makes wk_compile_graph run the loop-IR and
schedule verifiers between passes on every graph these tests compile."""
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
