#!/usr/bin/env python3
"""Medians of wick's % of copy bandwidth per kernel over raw/<tree>-t<threads>-r<round>/results.json."""
import glob, json, os, statistics, sys
here = os.path.dirname(os.path.abspath(__file__))
runs = {}
for f in sorted(glob.glob(os.path.join(here, "raw", "*", "results.json"))):
    tree, t, r = os.path.basename(os.path.dirname(f)).split("-")
    d = json.load(open(f))
    for k in d["kernels"]:
        runs.setdefault((t, k["kernel"], tree), []).append((int(r[1:]), k["wick_pct_copy_bw"], k["wick_copy_gbs"]))
print("| threads | kernel | main f094aad: median (runs in order) | sm21: median (runs in order) | sm21 / main, same round: median | copy GB/s beside wick, main / sm21 (medians) |")
print("| --- | --- | --- | --- | --- | --- |")
for t in ("t1", "t2"):
    for kern in ("pointwise", "softmax", "layer_norm", "sum_rows", "sum_cols"):
        cells, gbs = [], []
        for tree in ("main", "sm21"):
            v = sorted(runs.get((t, kern, tree), []))
            pcts = [p for _, p, _ in v if p is not None]
            cells.append(f"**{statistics.median(pcts):.1f}** ({', '.join(f'{p:.1f}' for p in pcts)})" if pcts else "-")
            g = [c for _, _, c in v if c]
            gbs.append(f"{statistics.median(g):.1f}" if g else "-")
        a = {r: p for r, p, _ in runs.get((t, kern, "main"), []) if p}
        b = {r: p for r, p, _ in runs.get((t, kern, "sm21"), []) if p}
        ratios = [b[r] / a[r] for r in a if r in b]
        ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
        print(f"| {t[1:]} | {kern} | {cells[0]} | {cells[1]} | {ratio} | {' / '.join(gbs)} |")
