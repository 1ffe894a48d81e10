"""Markdown tables of bench/cold_compile.py result files.

    python bench/cold_compile_table.py A.jsonl B.jsonl ...          one column per file (cold s, CPU+cc CPU, cc CPU)
    python bench/cold_compile_table.py --ratio run.jsonl [...]      wick-own and dynamo+wick against inductor

--ratio reads every row of the given files together (one run's rows: compiler "wick-own", "wick" =
dynamo+wick, "inductor"); a (model, mode, compiler) with several rows gives its median. Per model and mode:
cold s of each, wick-own / inductor and dynamo+wick / inductor (cold s, and CPU s = process + C compiler
children), and whether every row of the wick compilers passed (ran compiled: graphs, no fallback, result as
eager's; rows written before "pass" existed show "?"). The median rows per mode give the median of each
column (the ratio columns: median of the per-model ratios).
"""
from __future__ import annotations

import json
import statistics
import sys

OWN, DYN, IND = "wick-own", "wick", "inductor"


def load_rows(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            rows += [json.loads(ln) for ln in f if ln.strip()]
    return rows


def cpu_total(r):
    return r["cpu_s"] + r["children_cpu_s"]


def ratio_table(rows):
    """The --ratio table's lines (markdown)."""
    cells = {}
    for r in rows:
        cells.setdefault((r["model"], r["mode"], r["compiler"]), []).append(r)
    keys = []
    for r in rows:
        if (r["model"], r["mode"]) not in keys:
            keys.append((r["model"], r["mode"]))
    med = statistics.median

    def get(model, mode, comp, fn):
        rs = cells.get((model, mode, comp))
        return med([fn(r) for r in rs]) if rs else None

    def passed(model, mode):
        flags = [r.get("pass") for c in (OWN, DYN) for r in cells.get((model, mode, c), [])]
        if not flags:
            return "-"
        if any(f is False for f in flags):
            bad = sorted({c for c in (OWN, DYN) for r in cells.get((model, mode, c), []) if r.get("pass") is False})
            return "NO (" + ", ".join("dynamo+wick" if c == DYN else c for c in bad) + ")"
        return "yes" if all(f is True for f in flags) else "?"

    def fmt(x, spec=".2f"):
        return "-" if x is None else format(x, spec)

    def div(a, b):
        return None if a is None or not b else a / b

    out = ["| model | mode | wick-own cold s | dynamo+wick cold s | inductor cold s | wick-own / inductor | "
           "dynamo+wick / inductor | CPU s: wick-own / dynamo+wick / inductor | CPU ratio own / dyn | "
           "n (own/dyn/ind) | all wick rows ran compiled |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    per_mode = {}
    for model, mode in keys:
        c = {comp: get(model, mode, comp, lambda r: r["cold_s"]) for comp in (OWN, DYN, IND)}
        u = {comp: get(model, mode, comp, cpu_total) for comp in (OWN, DYN, IND)}
        ro, rd = div(c[OWN], c[IND]), div(c[DYN], c[IND])
        uo, ud = div(u[OWN], u[IND]), div(u[DYN], u[IND])
        n = "/".join(str(len(cells.get((model, mode, comp), []))) for comp in (OWN, DYN, IND))
        out.append(f"| {model} | {mode} | {fmt(c[OWN])} | {fmt(c[DYN])} | {fmt(c[IND])} | {fmt(ro, '.3f')} | "
                   f"{fmt(rd, '.3f')} | {fmt(u[OWN])} / {fmt(u[DYN])} / {fmt(u[IND])} | {fmt(uo, '.3f')} / "
                   f"{fmt(ud, '.3f')} | {n} | {passed(model, mode)} |")
        per_mode.setdefault(mode, []).append((c, ro, rd, uo, ud))
    for mode, vals in per_mode.items():
        def m(xs):
            xs = [x for x in xs if x is not None]
            return med(xs) if xs else None

        c = {comp: m([v[0][comp] for v in vals]) for comp in (OWN, DYN, IND)}
        out.append(f"| median | {mode} | {fmt(c[OWN])} | {fmt(c[DYN])} | {fmt(c[IND])} | "
                   f"{fmt(m([v[1] for v in vals]), '.3f')} | {fmt(m([v[2] for v in vals]), '.3f')} | | "
                   f"{fmt(m([v[3] for v in vals]), '.3f')} / {fmt(m([v[4] for v in vals]), '.3f')} | | |")
    return out


def column_table(paths):
    """One column per file, keyed by (model, mode) (a file of one compiler's rows)."""
    sets = []
    for p in paths:
        d = {}
        for r in load_rows([p]):
            d[(r["model"], r["mode"])] = r
        sets.append(d)
    out = ["| model | mode | " + " | ".join(f"{n.split('/')[-1].replace('.jsonl', '')} cold s (CPU+cc s)"
                                           for n in paths) + " |",
           "|---|---|" + "---|" * len(paths)]
    for k in sets[0]:
        cells = []
        for s in sets:
            r = s.get(k)
            cells.append("-" if r is None else f'{r["cold_s"]:.2f} ({cpu_total(r):.2f}; cc {r["children_cpu_s"]:.2f})')
        out.append(f"| {k[0]} | {k[1]} | " + " | ".join(cells) + " |")
    for mode in ("inference", "training"):
        row = []
        for s in sets:
            v = [r for (m, md), r in s.items() if md == mode]
            if not v:
                row.append("-")
                continue
            row.append(f'{statistics.median([r["cold_s"] for r in v]):.2f} '
                       f'({statistics.median([cpu_total(r) for r in v]):.2f}; '
                       f'cc {statistics.median([r["children_cpu_s"] for r in v]):.2f})')
        out.append(f"| median | {mode} | " + " | ".join(row) + " |")
    return out


def main(argv):
    if argv and argv[0] == "--ratio":
        lines = ratio_table(load_rows(argv[1:]))
    else:
        lines = column_table(argv)
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
