"""bench/cold_compile_table.py --ratio on a tiny synthetic jsonl (no model, no wick core)."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _table():
    spec = importlib.util.spec_from_file_location("cold_compile_table", ROOT / "bench" / "cold_compile_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(model, mode, compiler, cold, cpu=1.0, cc=0.5, ok=True):
    r = {"model": model, "mode": mode, "compiler": compiler, "cold_s": cold, "cpu_s": cpu, "children_cpu_s": cc}
    if ok is not None:
        r["pass"] = ok
    return r


def test_ratio_table(tmp_path, capsys):
    rows = [
        _row("A", "inference", "wick-own", 1.0), _row("A", "inference", "wick", 2.0), _row("A", "inference", "inductor", 20.0),
        _row("A", "inference", "inductor", 40.0),  # two inductor rows: their median, 30
        _row("B", "inference", "wick-own", 3.0), _row("B", "inference", "wick", 5.0, ok=False),
        _row("B", "inference", "inductor", 10.0),
        _row("A", "training", "wick-own", 4.0, ok=None), _row("A", "training", "inductor", 8.0),
    ]
    p = tmp_path / "cold.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _table().main(["--ratio", str(p)])
    out = capsys.readouterr().out.splitlines()
    cells = {tuple(c.strip() for c in ln.strip("|").split("|")[:2]): [c.strip() for c in ln.strip("|").split("|")]
             for ln in out[2:]}
    a = cells[("A", "inference")]
    assert a[2:7] == ["1.00", "2.00", "30.00", "0.033", "0.067"]
    assert a[9] == "1/1/2" and a[10] == "yes"
    b = cells[("B", "inference")]
    assert b[5:7] == ["0.300", "0.500"] and b[10] == "NO (dynamo+wick)"
    t = cells[("A", "training")]
    assert t[3] == "-" and t[5] == "0.500" and t[6] == "-" and t[10] == "?"
    med = cells[("median", "inference")]
    assert med[2:5] == ["2.00", "3.50", "20.00"]
    assert med[5:7] == ["0.167", "0.283"]  # medians of the per-model ratios


def test_column_table(tmp_path, capsys):
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps(_row("A", "inference", "wick", 2.0, cpu=1.5, cc=0.25)) + "\n")
    _table().main([str(p)])
    out = capsys.readouterr().out
    assert "| A | inference | 2.00 (1.75; cc 0.25) |" in out
    assert "| median | training | - |" in out
