"""Markdown table of bench/cold_compile.py result files (one column per file): cold s, CPU+cc CPU, cc CPU, and medians.

    python bench/cold_compile_table.py A.jsonl B.jsonl ...
"""
import json, sys, statistics
def load(p):
    d = {}
    for l in open(p):
        r = json.loads(l); d[(r["model"], r["mode"])] = r
    return d
names = sys.argv[1:]
sets = [load(p) for p in names]
print("| model | mode | " + " | ".join(f"{n.split('/')[-1].replace('.jsonl','')} cold s (CPU+cc s)" for n in names) + " |")
print("|---|---|" + "---|" * len(names))
keys = [k for k in sets[0]]
for k in keys:
    cells = []
    for s in sets:
        r = s.get(k)
        cells.append("-" if r is None else f'{r["cold_s"]:.2f} ({r["cpu_s"] + r["children_cpu_s"]:.2f}; cc {r["children_cpu_s"]:.2f})')
    print(f"| {k[0]} | {k[1]} | " + " | ".join(cells) + " |")
for mode in ("inference", "training"):
    row = []
    for s in sets:
        v = [r for (m, md), r in s.items() if md == mode]
        row.append(f'{statistics.median([r["cold_s"] for r in v]):.2f} ({statistics.median([r["cpu_s"] + r["children_cpu_s"] for r in v]):.2f}; cc {statistics.median([r["children_cpu_s"] for r in v]):.2f})')
    print(f"| median | {mode} | " + " | ".join(row) + " |")
