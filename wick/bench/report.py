"""The outputs of a run: the terminal table, results.json, report.md and PNG plots."""
from __future__ import annotations

import json
import math
import os
import statistics
from collections import OrderedDict

STATUS_ORDER = ("pass", "fail_accuracy", "fallback", "not_supported", "compile_error", "crash", "timeout",
                "eager_fail", "skipped")


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _fmt(v, spec="{:.2f}", none="-"):
    if v is None:
        return none
    try:
        return spec.format(v)
    except (TypeError, ValueError):
        return str(v)


def summarize(rows):
    """Per (compiler, mode, precision): counts by status and the geomean speedup over passing rows."""
    groups = OrderedDict()
    for r in rows:
        key = (r["compiler"], r["mode"], r["precision"])
        groups.setdefault(key, []).append(r)
    # Models that every compiler of a (mode, precision) passes: the fair set to compare geomeans on.
    common = {}
    for (comp, mode, prec), rs in groups.items():
        ok = {r["model"] for r in rs if r["status"] == "pass" and r.get("speedup")}
        common[(mode, prec)] = ok if (mode, prec) not in common else common[(mode, prec)] & ok
    out = []
    for (comp, mode, prec), rs in groups.items():
        counts = {s: sum(1 for r in rs if r["status"] == s) for s in STATUS_ORDER}
        passing = [r for r in rs if r["status"] == "pass" and r.get("speedup")]
        colds = [r["compile_cold_s"] for r in rs if r.get("compile_cold_s") is not None and r["status"] == "pass"]
        out.append({
            "compiler": comp, "mode": mode, "precision": prec, "rows": len(rs), "pass": counts["pass"],
            "counts": {k: v for k, v in counts.items() if v},
            "geomean_speedup": geomean([r["speedup"] for r in passing]),
            "geomean_common": geomean([r["speedup"] for r in passing if r["model"] in common[(mode, prec)]]),
            "common_models": len(common[(mode, prec)]),
            "median_compile_cold_s": statistics.median(colds) if colds else None,
            "models_passed": [r["model"] for r in passing],
        })
    return out


def _note(r):
    st = r["status"]
    if st == "pass":
        acc = r.get("accuracy") or {}
        note = f"acc {acc.get('method', '')}, max err {_fmt(acc.get('max_abs_err'), '{:.1e}')}"
        if r.get("wick_compile_time_s"):
            note += f"; wick says compile {r['wick_compile_time_s']:.2f} s"
        return note
    d = r.get("detail") or ""
    return d.replace("\n", " ")


ROW_COLS = [("model", 26), ("mode", 9), ("prec", 7), ("compiler", 13), ("status", 13), ("speedup", 7),
            ("eager ms", 9), ("comp ms", 9), ("cold s", 7), ("warm s", 7), ("graphs", 6), ("breaks", 6),
            ("mem MB", 7), ("note", 0)]


def _row_cells(r):
    mem = r.get("peak_mem_compiled_mb") or r.get("rss_peak_mb")
    compiled = r["status"] in ("pass", "fail_accuracy")  # fallback rows ran eagerly: no compile time
    return [r["model"], r["mode"], r["precision"], r["compiler"], r["status"],
            _fmt(r.get("speedup"), "{:.2f}x") if r["status"] == "pass" else "-",
            _fmt(r.get("eager_ms"), "{:.3f}"), _fmt(r.get("compiled_ms"), "{:.3f}"),
            _fmt(r.get("compile_cold_s") if compiled else None, "{:.1f}"),
            _fmt(r.get("compile_warm_s") if compiled else None, "{:.1f}"),
            _fmt(r.get("graphs"), "{}"), _fmt(r.get("breaks"), "{}"), _fmt(mem, "{:.0f}"), _note(r)]


def terminal_table(rows, summary, width=200) -> str:
    lines = []
    head = " ".join(name.ljust(w) if w else name for name, w in ROW_COLS)
    lines.append(head)
    lines.append("-" * min(len(head) + 20, width))
    for r in rows:
        cells = _row_cells(r)
        text = " ".join((str(c)[: w] if w else str(c)).ljust(w) if w else str(c) for c, (_, w) in zip(cells, ROW_COLS))
        lines.append(text[:width])
    lines.append("")
    lines.append("Summary (speedup = eager median / compiled median; geomean over passing rows only)")
    lines.append("  'common': geomean over the models that every compiler of that mode and precision passes")
    lines.append(f"{'compiler':14} {'mode':10} {'prec':8} {'pass':>9}  {'geomean':>8}  {'common':>12}  {'cold s':>7}  statuses")
    for s in summary:
        counts = ", ".join(f"{k} {v}" for k, v in s["counts"].items())
        common = f"{_fmt(s.get('geomean_common'), '{:.2f}x')} ({s.get('common_models', 0)})"
        lines.append(f"{s['compiler']:14} {s['mode']:10} {s['precision']:8} {s['pass']:>4}/{s['rows']:<4}  "
                     f"{_fmt(s['geomean_speedup'], '{:.2f}x'):>8}  {common:>12}  "
                     f"{_fmt(s['median_compile_cold_s'], '{:.1f}'):>7}  {counts}")
    return "\n".join(lines)


def _md_escape(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def markdown(result: dict, plots: list[str], plot_note: str | None) -> str:
    meta, rows, summary = result["meta"], result["rows"], result["summary"]
    L = [f"# wick benchmark: {meta['stamp']} on {meta['machine_tag']}", ""]
    L.append(f"* command: `{meta['command']}`")
    m = meta["machine"]
    L.append(f"* machine: {m.get('cpu')} ({m.get('cores')} cores, {m.get('mem_gib')} GiB)"
             + (f", GPU {m.get('gpu')} x{m.get('gpu_count')}" if m.get("gpu") else "") + f", device `{m['device']}`")
    v = meta["versions"]
    L.append("* versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val))
    cfg = result["config"]
    L.append(f"* suites: {', '.join(cfg['suites'])}; compilers: {', '.join(cfg['compilers'])}; "
             f"modes: {', '.join(cfg['modes'])}; precisions: {', '.join(cfg['precisions'])}"
             + (f"; chunk {cfg['chunk']}" if cfg.get("chunk") else ""))
    L.append(f"* per-row time limit {cfg['timeout_s']} s; {cfg['repeats']} interleaved repeats; "
             f"total wall time {meta.get('wall_s', 0):.0f} s")
    L.append("")
    L.append("Rules: each row runs in its own process. Accuracy as in PyTorch's compiler benchmarks: a float64 "
             "reference, two eager runs that must agree, compiled vs eager allclose at 1e-3 (inference) or 1e-2 "
             "(training), else RMSE vs the float64 reference within 2-3x eager's. Speedup = median eager time / "
             "median compiled time over interleaved repeats, reported only for rows that pass; geomean over "
             "passing rows. Rows where wick ran any part eagerly are `fallback`, never speedups. Compile time = "
             "first call - steady call; cold with empty WICK_CACHE_DIR / TORCHINDUCTOR_CACHE_DIR, warm after a "
             "reset with those caches filled. Memory: CUDA peak allocated (compiled run) or the row process's "
             "peak RSS on CPU.")
    L.append("")
    if result.get("skipped_suites"):
        L.append("## Skipped suites")
        for s in result["skipped_suites"]:
            L.append(f"* `{s['suite']}`: {s['reason']}")
        L.append("")
    L.append("## Summary")
    L.append("")
    L.append("Geomean is over each compiler's own passing rows; 'common' is over the models that every compiler "
             "of that mode and precision passes (their number in brackets), the fair comparison.")
    L.append("")
    L.append("| compiler | mode | precision | pass | geomean speedup | common geomean | median cold compile s | statuses |")
    L.append("|---|---|---|---|---|---|---|---|")
    for s in summary:
        counts = ", ".join(f"{k} {v}" for k, v in s["counts"].items())
        L.append(f"| {s['compiler']} | {s['mode']} | {s['precision']} | {s['pass']}/{s['rows']} | "
                 f"{_fmt(s['geomean_speedup'], '{:.2f}x')} | {_fmt(s.get('geomean_common'), '{:.2f}x')} "
                 f"({s.get('common_models', 0)}) | {_fmt(s['median_compile_cold_s'], '{:.2f}')} | {counts} |")
    L.append("")
    L.append("## Rows")
    L.append("")
    L.append("| suite | model | batch | mode | precision | compiler | status | speedup | eager ms | compiled ms | "
             "cold s | warm s | graphs | breaks | peak MB | detail |")
    L.append("|" + "---|" * 16)
    for r in rows:
        c = _row_cells(r)
        L.append("| " + " | ".join(_md_escape(x) for x in [r["suite"], r["model"], r.get("batch"), *c[1:]]) + " |")
    L.append("")
    notpass = [r for r in rows if r["status"] != "pass"]
    if notpass:
        L.append("## Rows that did not pass")
        L.append("")
        for r in notpass:
            L.append(f"* **{r['model']}** {r['mode']} {r['precision']} `{r['compiler']}`: **{r['status']}** "
                     f"{_md_escape(r.get('detail') or '')}")
            fbs = r.get("fallbacks") or []
            for fb in (fbs[:8] if len(fbs) > 1 else []):  # one reason is already the detail
                L.append(f"  * fallback: {_md_escape(fb)}")
        L.append("")
    noted = [r for r in rows if r.get("eager_note") or r.get("fp64_note")]
    if noted:
        L.append("## Notes on the references")
        L.append("")
        for r in noted:
            L.append(f"* {r['model']} {r['mode']} {r['precision']} `{r['compiler']}`: "
                     + "; ".join(_md_escape(r[k]) for k in ("eager_note", "fp64_note") if r.get(k)))
        L.append("")
    breaks = [r for r in rows if r.get("break_reasons")]
    if breaks:
        L.append("## Graph breaks")
        L.append("")
        for r in breaks:
            L.append(f"* {r['model']} {r['mode']} `{r['compiler']}`: " + "; ".join(
                _md_escape(x)[:200] for x in r["break_reasons"][:5]))
        L.append("")
    L.append("## Plots")
    L.append("")
    for p in plots:
        L.append(f"![{p}]({p})")
    if plot_note:
        L.append(plot_note)
    L.append("")
    return "\n".join(L)


def plots(rows, summary, outdir) -> tuple[list[str], str | None]:
    """speedup.png and compile_time.png; matplotlib is imported here, lazily."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        return [], f"No plots: matplotlib is not available ({type(e).__name__}: {e})."
    groups = OrderedDict()
    for r in rows:
        groups.setdefault((r["mode"], r["precision"]), []).append(r)
    if not groups:
        return [], "No plots: no rows."
    made = []
    comps = list(OrderedDict.fromkeys(r["compiler"] for r in rows))
    colors = {c: plt.cm.tab10(i % 10) for i, c in enumerate(comps)}

    def grouped(fname, title, value, ylabel, log=False, geo=False, second=None):
        fig, axes = plt.subplots(len(groups), 1, figsize=(max(8, 1.2 * len({r['model'] for r in rows}) + 4),
                                                           4.2 * len(groups)), squeeze=False)
        for ax, ((mode, prec), rs) in zip(axes[:, 0], groups.items()):
            models = list(OrderedDict.fromkeys(r["model"] for r in rs))
            width = 0.8 / max(1, len(comps))
            for j, c in enumerate(comps):
                for i, m in enumerate(models):
                    r = next((x for x in rs if x["model"] == m and x["compiler"] == c), None)
                    if r is None:
                        continue
                    x = i + (j - (len(comps) - 1) / 2) * width
                    v = value(r)
                    if v is None:
                        ax.text(x, 0.02, r["status"], rotation=90, fontsize=6, ha="center", va="bottom",
                                transform=ax.get_xaxis_transform(), color=colors[c])
                        continue
                    ax.bar(x, v, width, color=colors[c])
                    if second is not None and second(r) is not None:
                        ax.bar(x, second(r), width * 0.5, color="black", alpha=0.5,
                               label="warm" if (i == 0 and j == 0) else None)
                if geo:
                    s = next((s for s in summary if s["compiler"] == c and s["mode"] == mode
                              and s["precision"] == prec), None)
                    if s and s["geomean_speedup"]:
                        ax.axhline(s["geomean_speedup"], color=colors[c], ls="--", lw=1,
                                   label=f"{c} geomean {s['geomean_speedup']:.2f}x")
            if geo:
                ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_xticks(range(len(models)))
            ax.set_xticklabels(models, rotation=20, ha="right", fontsize=8)
            ax.set_ylabel(ylabel)
            if log:
                ax.set_yscale("log")
            ax.set_title(f"{title}: {mode}, {prec}")
            from matplotlib.patches import Patch

            handles, labels = ax.get_legend_handles_labels()  # geomean lines, the warm overlay
            handles = [Patch(color=colors[c], label=c) for c in comps] + handles
            ax.legend(handles=handles, fontsize=7, loc="best")
        fig.tight_layout()
        fig.savefig(os.path.join(outdir, fname), dpi=110)
        plt.close(fig)
        made.append(fname)

    def sp(r):
        return r.get("speedup") if r["status"] == "pass" else None

    grouped("speedup.png", "Speedup vs eager (passing rows; others labelled by status)", sp, "speedup (x)", geo=True)
    def compiled(r):  # a row that ran eagerly has no compile time worth a bar
        return r.get("compile_cold_s") if r["status"] in ("pass", "fail_accuracy") else None

    grouped("compile_time.png", "Compile time (cold bar, warm overlay; rows that did not compile: status)", compiled,
            "seconds", log=True, second=lambda r: r.get("compile_warm_s"))
    return made, None


def write_outputs(result: dict, outdir: str, make_plots=True) -> dict:
    os.makedirs(outdir, exist_ok=True)
    made, note = (plots(result["rows"], result["summary"], outdir) if make_plots
                  else ([], "No plots: disabled by --no-plots."))
    result["plots"] = made
    result["plot_note"] = note
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    with open(os.path.join(outdir, "report.md"), "w") as f:
        f.write(markdown(result, made, note))
    return {"json": "results.json", "markdown": "report.md", "plots": made}
