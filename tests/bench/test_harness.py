"""Tests of the benchmark harness itself (wick/bench), with tiny torch-only models and fake compilers.

The harness is loaded by path (as the package ``wick_bench``), so these tests do not depend on
wick's C core being built: the harness must report a broken wick, not break with it.
"""
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "wick" / "bench"


def _load():
    if "wick_bench" in sys.modules:
        return sys.modules["wick_bench"]
    spec = importlib.util.spec_from_file_location("wick_bench", BENCH / "__init__.py",
                                                  submodule_search_locations=[str(BENCH)])
    pkg = importlib.util.module_from_spec(spec)
    sys.modules["wick_bench"] = pkg
    spec.loader.exec_module(pkg)
    return pkg


_load()
from wick_bench import accuracy, compilers, models, report  # noqa: E402


# ----------------------------------------------------------------------------- accuracy rules
def test_accuracy_identical_and_perturbed():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(64, 33, generator=g)
    ref = {"logits": a, "ids": torch.arange(5)}
    ok, info = accuracy.compare(ref, {"logits": a.clone(), "ids": torch.arange(5)}, accuracy.to_float64(ref))
    assert ok and info["error"] is None and info["leaves"] == 2
    ok, info = accuracy.compare(ref, {"logits": a * 1.1 + 0.1, "ids": torch.arange(5)}, accuracy.to_float64(ref))
    assert not ok and "logits" in info["error"] and "RMSE" in info["error"]


def test_accuracy_rmse_fallback_passes_when_closer_to_fp64_than_eager():
    g = torch.Generator().manual_seed(2)
    exact = torch.randn(4096, generator=g, dtype=torch.float64)
    eager = (exact + 0.01 * torch.randn(4096, generator=g, dtype=torch.float64)).float()
    compiled = (exact + 0.015 * torch.randn(4096, generator=g, dtype=torch.float64)).float()
    # not allclose at 1e-3 ...
    assert not torch.allclose(eager, compiled, atol=1e-3, rtol=1e-3)
    # ... but its RMSE vs fp64 is within 2x eager's: passes, by the RMSE rule
    ok, info = accuracy.compare(eager, compiled, exact, tol=1e-3)
    assert ok and info["method"] == "rmse"
    assert info["rmse_compiled"] <= 2 * info["rmse_eager"] + 1e-4
    # 5x eager's error: fails
    worse = (exact + 0.05 * torch.randn(4096, generator=g, dtype=torch.float64)).float()
    ok, info = accuracy.compare(eager, worse, exact, tol=1e-3)
    assert not ok and "RMSE" in info["error"]
    # without an fp64 reference the same pair fails (no RMSE rule to fall back on)
    ok, _ = accuracy.compare(eager, compiled, None, tol=1e-3)
    assert not ok


def test_accuracy_dtype_shape_int_and_structure():
    x = torch.randn(3, 4)
    assert not accuracy.compare(x, x.double())[0]
    assert not accuracy.compare(x, x.t().contiguous())[0]
    assert not accuracy.compare(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]))[0]
    assert accuracy.compare(torch.tensor([True, False]), torch.tensor([True, False]))[0]
    assert not accuracy.compare([x, x], [x])[0]
    assert not accuracy.compare({"a": x}, {"b": x})[0]
    # exact agreement of two eager runs: tolerance 0
    assert accuracy.same_exact(x, x.clone())[0]
    assert not accuracy.same_exact(x, x + 1e-7)[0]
    # training tolerance 1e-2 accepts a 0.5% error that inference's 1e-3 rejects (no fp64 ref)
    y = x * 1.005
    assert accuracy.compare(x, y, None, tol=1e-2)[0]
    assert not accuracy.compare(x, y, None, tol=1e-3)[0]


def test_normalize_drops_non_numeric_and_clones():
    t = torch.ones(2)
    out = accuracy.normalize({"a": t, "cache": object(), "b": (t, None)})
    assert set(out) == {"a", "b"} and out["b"][1] is None
    t.add_(1)
    assert out["a"][0].item() == 1.0  # cloned, unaffected by later in-place writes


# ----------------------------------------------------------------------------- suites and registry
def test_parse_suite_text_options():
    specs = models.parse_suite_text("x", """
        # comment
        BertForMaskedLM   2  cuda_batch=16 size=small seq=32  # trailing
        foo  4 modes=inference tol=4e-3 gpu_only
    """)
    assert [s.name for s in specs] == ["BertForMaskedLM", "foo"]
    assert specs[0].batch_for("cpu") == 2 and specs[0].batch_for("cuda") == 16
    assert specs[0].options == {"size": "small", "seq": "32"}
    assert specs[1].modes == ("inference",) and specs[1].gpu_only and specs[1].tol["training"] == 4e-3
    with pytest.raises(ValueError):
        models.parse_suite_text("x", "lonely")


def test_shipped_suites_parse_and_missing_libs_are_reported():
    for suite in ("micro", "huggingface", "timm", "torchvision", "toy"):
        assert models.load_suite(suite), suite
    assert models.suite_missing_reason("toy") is None
    assert "not installed" in (models.suite_missing_reason("timm") or "not installed")  # absent here, present on GPU
    assert models.suite_missing_reason("nonsense") is not None


def test_registry_fakes_only_when_asked(monkeypatch):
    monkeypatch.delenv("WICK_BENCH_FAKES", raising=False)
    assert "fake_wrong" not in compilers.registry()
    monkeypatch.setenv("WICK_BENCH_FAKES", "1")
    assert {"fake_wrong", "fake_hang", "fake_crash"} <= set(compilers.registry())
    for name in ("eager", "inductor", "wick", "wick-ro", "wick+inductor", "dynamo+wick"):
        assert name in compilers.registry()
    assert compilers.get("wick-ro").unavailable("cpu")
    assert compilers.get("wick").unavailable("cpu") is None


def test_wick_not_importable_is_not_supported(monkeypatch):
    monkeypatch.setitem(sys.modules, "wick", None)  # import wick -> ImportError
    with pytest.raises(compilers.NotSupported, match="wick not importable"):
        compilers.get("wick").setup()


def test_geomean_and_summary_count_only_passing_rows():
    rows = [dict(model="a", mode="inference", precision="float32", compiler="c", status="pass", speedup=2.0),
            dict(model="b", mode="inference", precision="float32", compiler="c", status="pass", speedup=0.5),
            dict(model="c", mode="inference", precision="float32", compiler="c", status="fail_accuracy",
                 speedup=None),
            dict(model="d", mode="inference", precision="float32", compiler="c", status="fallback", speedup=None)]
    (s,) = report.summarize(rows)
    assert s["rows"] == 4 and s["pass"] == 2
    assert math.isclose(s["geomean_speedup"], 1.0)
    assert s["counts"] == {"pass": 2, "fail_accuracy": 1, "fallback": 1}


# ----------------------------------------------------------------------------- end to end
def _cli(args):
    return [sys.executable, str(BENCH / "__main__.py"), *args]


def _env():
    return dict(os.environ, WICK_BENCH_FAKES="1")


def _run_cli(args, timeout=120):
    return subprocess.run(_cli(args), capture_output=True, text=True, timeout=timeout, env=_env(), cwd=str(ROOT))


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    """Every fake in inference (the hanging one with a short limit), two in training; three runs side by side."""
    out_i, out_h, out_t = (tmp_path_factory.mktemp(n) for n in ("bench_inf", "bench_hang", "bench_train"))
    # The harness is under test, not a GPU: pin the device, so a machine with CUDA
    # (where the default would be cuda and wick-ro a real row) gives the same rows.
    common = ["--suites", "toy,timm", "--models", "toy_mlp", "--repeats", "3", "--sample-s", "0.002", "--quiet",
              "--device", "cpu"]
    runs = [
        (out_i, ["--modes", "inference", "--timeout", "90", "--compilers",
                 "fake_ok,fake_wrong,fake_crash,fake_raise,fake_fallback,wick-ro"]),
        (out_h, ["--modes", "inference", "--timeout", "45", "--compilers", "fake_hang", "--no-plots"]),
        (out_t, ["--modes", "training", "--timeout", "90", "--compilers", "fake_ok,fake_wrong", "--no-plots"]),
    ]
    procs = [subprocess.Popen(_cli(common + extra + ["--out", str(out)]), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env(), cwd=str(ROOT)) for out, extra in runs]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (so, se) in zip(procs, outs):
        assert p.returncode == 0, so + se
    res = {"rows": [], "summary": []}
    for out, _ in runs:
        with open(out / "results.json") as f:
            r = json.load(f)
        res["rows"] += r["rows"]
        res["summary"] += r["summary"]
        res.setdefault("meta", r["meta"])
        res.setdefault("skipped_suites", r["skipped_suites"])
    return out_i, res, outs[0][0]


def _status(res, compiler, mode="inference"):
    (row,) = [r for r in res["rows"] if r["compiler"] == compiler and r["mode"] == mode]
    return row


def test_every_row_is_reported(fake_run):
    _, res, _ = fake_run
    # 7 compilers in inference + 2 in training; toy_mlp only; nothing dropped
    assert len(res["rows"]) == 9
    assert {r["compiler"] for r in res["rows"]} == {"fake_ok", "fake_wrong", "fake_hang", "fake_crash",
                                                    "fake_raise", "fake_fallback", "wick-ro"}


def test_fake_ok_passes_with_speedup(fake_run):
    _, res, _ = fake_run
    for mode in ("inference", "training"):
        row = _status(res, "fake_ok", mode)
        assert row["status"] == "pass", row
        assert row["speedup"] > 0 and row["eager_ms"] > 0 and row["compiled_ms"] > 0
        assert row["accuracy"]["error"] is None and row["compile_warm_s"] is not None
        assert len(row["timing"]["eager_ms"]) == 3
    # training compares loss, gradients and updated parameters, not just outputs
    assert _status(res, "fake_ok", "training")["accuracy"]["leaves"] > 10


def test_wrong_results_fail_accuracy(fake_run):
    _, res, _ = fake_run
    for mode in ("inference", "training"):
        row = _status(res, "fake_wrong", mode)
        assert row["status"] == "fail_accuracy", row
        assert row["speedup"] is None
        assert row["accuracy"]["error"]


def test_hang_is_timed_out(fake_run):
    _, res, _ = fake_run
    row = _status(res, "fake_hang")
    assert row["status"] == "timeout", row
    # 45 s leaves room for importing a CUDA build of torch before the hang
    # starts, also with 16 test workers importing it at once (the H200 run)
    assert row["phase"] == "compile" and row["wall_s"] < 75
    assert row["speedup"] is None


def test_crash_is_one_failed_row(fake_run):
    _, res, _ = fake_run
    row = _status(res, "fake_crash")
    assert row["status"] == "crash" and "SIGSEGV" in row["detail"], row
    # the rows after it still ran
    assert _status(res, "fake_raise")["status"] == "compile_error"
    assert "fake compiler failed" in _status(res, "fake_raise")["detail"]


def test_fallback_and_not_supported_are_not_speedups(fake_run):
    _, res, _ = fake_run
    row = _status(res, "fake_fallback")
    assert row["status"] == "fallback" and row["speedup"] is None
    assert any("aten.foo" in f for f in row["fallbacks"])
    row = _status(res, "wick-ro")
    assert row["status"] == "not_supported" and "GPU" in row["detail"]


def test_outputs_written(fake_run):
    out, res, stdout = fake_run
    assert res["skipped_suites"] == [] or res["skipped_suites"][0]["suite"] == "timm"
    md = (out / "report.md").read_text()
    for word in ("fail_accuracy", "crash", "compile_error", "fallback", "not_supported", "toy_mlp"):
        assert word in md and word in stdout
    assert res["meta"]["versions"]["torch"] == torch.__version__
    assert res["meta"]["machine"]["cores"] == os.cpu_count()
    summ = {(s["compiler"], s["mode"]): s for s in res["summary"]}
    assert summ[("fake_ok", "inference")]["geomean_speedup"] > 0
    assert summ[("fake_wrong", "inference")]["geomean_speedup"] is None
    if importlib.util.find_spec("matplotlib"):
        assert (out / "speedup.png").stat().st_size > 1000
        assert (out / "compile_time.png").stat().st_size > 1000
    else:
        assert "No plots" in md


def test_list_chunk_and_budget(tmp_path):
    r = _run_cli(["--suites", "toy", "--compilers", "fake_ok", "--modes", "inference", "--list"])
    names = [ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("toy")]
    assert names == ["toy_mlp", "toy_pointwise", "toy_conv"]
    parts = []
    for i in (1, 2):
        r = _run_cli(["--suites", "toy", "--compilers", "fake_ok", "--modes", "inference", "--chunk", f"{i}/2",
                      "--list"])
        parts.append([ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("toy")])
    assert sorted(parts[0] + parts[1]) == sorted(names) and parts[0] and parts[1]
    # a spent budget: rows are reported as skipped, not dropped
    r = _run_cli(["--suites", "toy", "--models", "toy_mlp", "--compilers", "fake_ok,fake_wrong", "--modes",
                  "inference", "--budget", "0", "--out", str(tmp_path), "--no-plots", "--quiet"])
    assert r.returncode == 0, r.stderr
    res = json.loads((tmp_path / "results.json").read_text())
    assert [row["status"] for row in res["rows"]] == ["skipped", "skipped"]
