"""The op_db sweep as a regression test (tests/ops/opdb_sweep.py does the
work; see its docstring for the outcomes and the full-sweep command).

* test_quick_slice: a few dozen ops, the first samples of each, against the
  baseline kept in tests/ops/opdb_baseline.json: no wrong result anywhere,
  and no sample that passed (native, equal to eager) in the baseline may do
  worse now.
* test_baseline_has_no_wrong_results: the checked-in baseline itself.
* test_full_sweep: every op and sample the baseline covers, only with
  WICK_OPDB_FULL=1 (about half an hour on two cores).
"""
import json
import os

import pytest

import opdb_sweep as sweep

BASELINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "opdb_baseline.json")
QUICK_SAMPLES = 2
QUICK_OPS = [
    "add", "mul", "where", "sum", "mean", "sin", "erf", "erfinv", "log1p", "rsqrt", "round", "frac",
    "sign", "atan2", "fmod", "remainder", "floor_divide", "clamp", "masked_fill", "bitwise_and",
    "logical_xor", "isnan", "nan_to_num", "nn.functional.gelu", "nn.functional.mish",
    "nn.functional.softplus", "nn.functional.leaky_relu", "nn.functional.hardswish", "lerp", "addcdiv",
    "softmax", "log_softmax", "prod", "amin", "any", "argmax", "var", "std", "logsumexp",
    # indirect loads and creation ops (ops.def notes 11, 12)
    "gather", "index_select", "nn.functional.embedding", "take_along_dim", "tril", "triu", "arange", "full",
    "zeros_like",
]


def load_baseline():
    if not os.path.exists(BASELINE):
        pytest.fail(f"{BASELINE} is missing: run the full sweep (tests/ops/opdb_sweep.py --write ...)")
    with open(BASELINE) as f:
        return json.load(f)


def regressions(key, now, base):
    """Messages for every wrong result in `now`, and every sample that passed
    in the baseline and does not now (per dtype, sample by sample)."""
    out = []
    for dt, c in now.items():
        if not isinstance(c, dict) or "samples" not in c:
            continue
        if c.get("wrong"):
            out.append(f"{key} {dt}: {c['wrong']} wrong: {c.get('details')}")
        was = base.get(dt, {}).get("samples", "") if isinstance(base.get(dt), dict) else ""
        for i, (b, n) in enumerate(zip(was, c["samples"])):
            if b == "P" and n != "P":
                out.append(f"{key} {dt} sample {i}: passed in the baseline, now {n}: {c.get('details')}")
    return out


@pytest.fixture(scope="module")
def op_index():
    import wick  # noqa: F401  (registers the backend)

    return {sweep.op_key(op): op for op in sweep.all_ops()}


def test_quick_slice(op_index):
    base = load_baseline()["results"]
    problems = []
    for key in QUICK_OPS:
        assert key in op_index, f"{key} is not in op_db"
        now = sweep.sweep_op(op_index[key], max_samples=QUICK_SAMPLES)
        problems += regressions(key, now, base.get(key, {}))
    assert not problems, "\n".join(problems)


def test_baseline_has_no_wrong_results():
    doc = load_baseline()
    assert doc["totals"]["wrong"] == 0
    assert doc["ops"] > 500  # the whole op database, not a slice
    for key, per_op in doc["results"].items():
        for dt, c in per_op.items():
            if isinstance(c, dict):
                assert c.get("wrong", 0) == 0, (key, dt, c.get("details"))


@pytest.mark.skipif(not os.environ.get("WICK_OPDB_FULL"), reason="set WICK_OPDB_FULL=1 for the full sweep")
def test_full_sweep(op_index):
    doc = load_baseline()
    problems = []
    for key, base in doc["results"].items():
        if key in op_index:
            problems += regressions(key, sweep.sweep_op(op_index[key], doc["max_samples"]), base)
    assert not problems, "\n".join(problems[:50])
