"""The op_db sweep (tests/ops/opdb_sweep.py) in its CUDA form, and the same
Triton code path under Triton's interpreter on the CPU.

* test_quick_slice_cuda (skipped without CUDA): the CPU test's QUICK_OPS,
  first 2 samples each, made on the GPU and compared with eager on the GPU:
  no wrong result; against tests/ops/opdb_baseline_cuda.json where it
  exists, no sample that passed there (native, equal to eager) does worse;
  without it, most samples pass natively.
* test_cuda_baseline_has_no_wrong_results (skipped while the file is absent).
* test_triton_interpret_slice (runs without a GPU): a few ops through wick's
  Triton backend, kernels run by Triton's interpreter on CPU tensors (the
  sweep's --triton-interpret, in a child process: triton reads
  TRITON_INTERPRET when imported): no wrong result, most samples native.

The CUDA baseline is written on the GPU host by the command in
opdb_sweep.py's docstring (--device cuda ... --write
tests/ops/opdb_baseline_cuda.json).
"""
import json
import os
import subprocess
import sys

import pytest
import torch

OPS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ops")
ROOT = os.path.dirname(os.path.dirname(OPS_DIR))
if OPS_DIR not in sys.path:
    sys.path.insert(0, OPS_DIR)

import opdb_sweep as sweep  # noqa: E402
from test_opdb_sweep import QUICK_OPS, QUICK_SAMPLES, regressions  # noqa: E402

CUDA_BASELINE = os.path.join(OPS_DIR, "opdb_baseline_cuda.json")
# a few ops of each kind (pointwise, 16-bit and integer math, reductions,
# row groups, an indirect load, creation) for the interpreter, which is slow
INTERPRET_OPS = ["add", "where", "erf", "clamp", "remainder", "sum", "amax", "var", "softmax",
                 "log_softmax", "gather", "tril", "nn.functional.gelu"]
# most samples of the slices compile to native kernels only (no extern call,
# no eager fallback): the indexing ops are extern calls on Triton, so not all
MIN_NATIVE_SHARE = 0.6

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def counted(results):
    """(samples counted, native passes, wrong-result messages) over results."""
    total = native = 0
    wrong = []
    for key, per_op in results.items():
        for dt, c in per_op.items():
            if not isinstance(c, dict) or "samples" not in c:
                continue
            total += sum(c[k] for k in sweep.OUTCOMES)
            native += c["pass"]
            if c["wrong"]:
                wrong.append(f"{key} {dt}: {c['wrong']} wrong: {c['details']}")
    return total, native, wrong


@needs_cuda
def test_quick_slice_cuda():
    pytest.importorskip("triton")
    import wick  # noqa: F401  (registers the backend)

    index = {sweep.op_key(op): op for op in sweep.all_ops()}
    base = {}
    if os.path.exists(CUDA_BASELINE):
        with open(CUDA_BASELINE) as f:
            base = json.load(f)["results"]
    results, problems = {}, []
    for key in QUICK_OPS:
        assert key in index, f"{key} is not in op_db"
        results[key] = sweep.sweep_op(index[key], QUICK_SAMPLES, device="cuda", seed=sweep.sample_seed("cuda"))
        problems += regressions(key, results[key], base.get(key, {}))
    assert not problems, "\n".join(problems)
    total, native, wrong = counted(results)
    assert not wrong
    assert total > 100 and native >= MIN_NATIVE_SHARE * total, (native, total)


@needs_cuda
@pytest.mark.skipif(not os.path.exists(CUDA_BASELINE), reason="no CUDA baseline yet (opdb_sweep.py --device cuda)")
def test_cuda_baseline_has_no_wrong_results():
    with open(CUDA_BASELINE) as f:
        doc = json.load(f)
    assert doc.get("device") == "cuda" and doc.get("mode") == "native", (doc.get("device"), doc.get("mode"))
    assert doc["totals"]["wrong"] == 0
    _, _, wrong = counted(doc["results"])
    assert not wrong, "\n".join(wrong)


def test_triton_interpret_slice(tmp_path):
    pytest.importorskip("triton")
    out = tmp_path / "interpret.json"
    env = dict(os.environ, WICK_CACHE_DIR=str(tmp_path / "cache"))
    for k in ("TRITON_INTERPRET", "WICK_TRITON"):  # the sweep sets them itself, before triton's import
        env.pop(k, None)
    r = subprocess.run([sys.executable, os.path.join(OPS_DIR, "opdb_sweep.py"), "--triton-interpret",
                        "--max-samples", str(QUICK_SAMPLES), "--ops", ",".join(INTERPRET_OPS), "--write", str(out)],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    with open(out) as f:
        doc = json.load(f)
    assert doc["mode"] == "triton-interpret" and doc["device"] == "cpu"
    assert doc["triton"] and doc["torch"] == torch.__version__
    missing = [n for n in INTERPRET_OPS if not any(k == n or k.startswith(n + ".") for k in doc["results"])]
    assert not missing, missing
    for key, per_op in doc["results"].items():
        assert "sweep_error" not in per_op, (key, per_op)
    total, native, wrong = counted(doc["results"])
    assert not wrong, "\n".join(wrong)
    assert total >= 40 and native >= MIN_NATIVE_SHARE * total, (native, total)
    # the kernels were Triton's (generated modules in the cache), not C
    modules = os.listdir(tmp_path / "cache" / "triton")
    assert any(m.endswith(".py") for m in modules), modules
