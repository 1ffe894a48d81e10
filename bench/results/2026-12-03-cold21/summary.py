"""Medians per model of cold.jsonl (this branch's wick.compile and inductor) and cold_main.jsonl (main's
wick.compile), wall and CPU (process + C compiler children), and their ratios to inductor's medians."""
import json
import statistics as st
import sys

D = sys.argv[1] if len(sys.argv) > 1 else "."
rows = [(json.loads(l), "branch") for l in open(f"{D}/cold.jsonl")] + [(json.loads(l), "main") for l in open(f"{D}/cold_main.jsonl")]
cells = {}
for r, src in rows:
    name = r["compiler"] if r["compiler"] == "inductor" else f"wick-own ({src})"
    cells.setdefault((r["model"], name), []).append(r)
print("| model | compiler | rows cold s | median cold s | median CPU s (proc + cc) | wall ratio | CPU ratio | all pass |")
print("|---|---|---|---|---|---|---|---|")
for model in ("GPT2LMHeadModel", "LlamaForCausalLM"):
    ind = cells[(model, "inductor")]
    ind_wall = st.median(r["cold_s"] for r in ind)
    ind_cpu = st.median(r["cpu_s"] + r["children_cpu_s"] for r in ind)
    for name in ("wick-own (main)", "wick-own (branch)", "inductor"):
        rs = cells.get((model, name), [])
        if not rs:
            continue
        wall = st.median(r["cold_s"] for r in rs)
        cpu = st.median(r["cpu_s"] + r["children_cpu_s"] for r in rs)
        print(f"| {model} | {name} | {', '.join('%.2f' % r['cold_s'] for r in rs)} | {wall:.2f} | {cpu:.2f} | "
              f"{wall / ind_wall:.3f} | {cpu / ind_cpu:.3f} | {all(r['pass'] for r in rs)} |")
