"""Fixtures shared by the test directories."""
import os

import pytest

# Under pytest-xdist each test process would start one Triton compile process
# per CPU but one at its first GPU graph (wick/_triton.py): two each instead.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("WICK_TRITON_COMPILE_PROCS", "2")

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


@pytest.fixture
def record_results(monkeypatch):
    """record_results(owner, name, attr) replaces owner.name for the test with
    a wrapper that calls the real one and appends getattr(result, attr) to
    the list it returns (the plans compile_training makes, the FX modules
    compile_graph_with exports)."""

    def install(owner, name, attr):
        seen, real = [], getattr(owner, name)

        def recording(*args, **kwargs):
            result = real(*args, **kwargs)
            seen.append(getattr(result, attr))
            return result

        monkeypatch.setattr(owner, name, recording)
        return seen

    return install


def _global_torch_state(torch):
    nesting = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return {"autocast cpu": (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")),
            "autocast cuda": (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")),
            "autocast nesting": nesting, "grad mode": torch.is_grad_enabled(),
            "default dtype": torch.get_default_dtype(),
            "float32 matmul precision": torch.get_float32_matmul_precision()}


def _set_global_torch_state(torch, state):
    for d in ("cpu", "cuda"):
        on, dt = state[f"autocast {d}"]
        torch.set_autocast_enabled(d, on)
        torch.set_autocast_dtype(d, dt)
    while torch.autocast_decrement_nesting() > state["autocast nesting"]:
        pass
    torch.set_grad_enabled(state["grad mode"])
    torch.set_default_dtype(state["default dtype"])
    torch.set_float32_matmul_precision(state["float32 matmul precision"])


@pytest.fixture(autouse=True)
def random_state_from_the_test_name(request):
    """torch's and Python's global generators start each test from a seed
    made of the test's id, so a test draws the same values whichever worker
    runs it and whatever ran there before (under xdist's worksteal the order
    changes from run to run, and a failure seen once could not be repeated)."""
    import random
    import sys
    import zlib

    seed = zlib.crc32(request.node.nodeid.encode())
    random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


@pytest.fixture(autouse=True)
def torch_state_is_left_as_found():
    """A test (or wick under it) that leaves autocast, grad mode, the default
    dtype or the matmul precision changed fails here, and the state is put
    back: otherwise later tests in the same worker compute in the leaked state
    (on the H200, CPU float32 matmuls came back in bfloat16 in four tests of
    one worker)."""
    import sys

    torch = sys.modules.get("torch")
    before = _global_torch_state(torch) if torch is not None else None
    yield
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if before is None:  # the test imported torch: compare with torch's defaults
        before = {"autocast cpu": (False, torch.bfloat16), "autocast cuda": (False, torch.float16),
                  "autocast nesting": 0, "grad mode": True, "default dtype": torch.float32,
                  "float32 matmul precision": "highest"}
    after = _global_torch_state(torch)
    if after != before:
        _set_global_torch_state(torch, before)
        changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
        pytest.fail(f"the test left torch's global state changed (before, after): {changed}", pytrace=False)


def pytest_runtest_logreport(report):
    """WICK_TEST_FAILURES=<file>: each failure's report is appended to the
    file as it happens (under xdist this runs in the controller, which gets
    every worker's reports), so a run stopped by a time limit before
    pytest's summary (the device machine's calls are limited to 10 minutes)
    still names its failures with their messages."""
    path = os.environ.get("WICK_TEST_FAILURES")
    if path and report.failed:
        with open(path, "a") as f:
            f.write(f"== {report.nodeid} ({report.when})\n{report.longreprtext[-8000:]}\n\n")


def pytest_collection_modifyitems(config, items):
    """WICK_TEST_SLOW_FIRST=<file> (tests/gpu/slow_tests.txt): tests whose
    ids start with one of the file's lines are each put at the front of a
    different worker's share, so that every slow test starts at once on a
    worker of its own instead of one of them beginning near the end of a
    time-limited run. `--dist worksteal` hands each of the N workers a
    contiguous share (the first len//N tests, then a (N-1)th of the rest,
    ...), which this order follows; every worker collects the same order."""
    path = os.environ.get("WICK_TEST_SLOW_FIRST")
    if not path:
        return
    with open(path) as f:
        prefixes = [line.strip() for line in f if line.strip() and not line.startswith("#")]

    def rank(item):
        for k, p in enumerate(prefixes):
            if item.nodeid == p or item.nodeid.startswith(p + "[") or item.nodeid.startswith(p + "::"):
                return k
        return len(prefixes)

    ranks = {id(item): rank(item) for item in items}
    slow = sorted((it for it in items if ranks[id(it)] < len(prefixes)), key=lambda it: ranks[id(it)])
    rest = iter([it for it in items if ranks[id(it)] == len(prefixes)])
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    order, left = [], len(items)
    for w in range(workers):
        share = left // (workers - w)
        left -= share
        mine = slow[w::workers]
        order += mine + [it for _, it in zip(range(share - len(mine)), rest)]
    items[:] = order + list(rest)
