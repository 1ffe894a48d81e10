import json, statistics as st, sys
D = sys.argv[1]
print("| model | wick.compile | rows CPU s (process + cc) | median CPU s | median wall cold s | all pass |")
print("|---|---|---|---|---|---|")
for m in ("GPT2LMHeadModel", "LlamaForCausalLM"):
    for name, f in (("main", "ab_main.jsonl"), ("branch", "ab_branch.jsonl")):
        rs = [json.loads(l) for l in open(f"{D}/{f}")]
        rs = [r for r in rs if r["model"] == m]
        cpu = [r["cpu_s"] + r["children_cpu_s"] for r in rs]
        print(f"| {m} | {name} | {', '.join('%.2f' % c for c in cpu)} | {st.median(cpu):.2f} | "
              f"{st.median(r['cold_s'] for r in rs):.2f} | {all(r['pass'] for r in rs)} |")
