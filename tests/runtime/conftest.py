"""Fixtures of the runtime tests: every test gets its own empty artifact cache."""
import pytest

import wick._C as C


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "wick-cache"
    monkeypatch.setenv("WICK_CACHE_DIR", str(d))
    C.env_reload()
    yield d
    monkeypatch.undo()
    C.env_reload()
