"""Fixtures shared by the test directories."""
import pytest

import wick._C as C


@pytest.fixture
def host_profile_on(monkeypatch):
    """Graphs compiled in the test time their host work per phase
    (WICK_HOST_PROFILE=1; read with wick._C.host_profile), the counts reset
    at the start; the knob is restored afterwards."""
    monkeypatch.setenv("WICK_HOST_PROFILE", "1")
    C.env_reload()
    C.host_profile(True)
    yield
    monkeypatch.undo()
    C.env_reload()
