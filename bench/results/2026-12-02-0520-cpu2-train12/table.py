import re, sys, statistics
rows = {}
for path in sys.argv[1:]:
    for line in open(path):
        m = re.match(r"(\S+) training (\S+)\s+median\s+([\d.]+) ms\s+min\s+([\d.]+)\s+cpu\s+([\d.]+) ms\s+cpu min\s+([\d.]+)", line)
        if m:
            model, comp, wmed, wmin, cmed, cmin = m.groups()
            rows.setdefault((path, model), {})[comp] = (float(cmed), float(cmin))
print("| run | model | eager | inductor | wick | wick vs inductor (median) | min: inductor / wick |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for (path, model), d in rows.items():
    e, i, w = d["eager"], d["inductor"], d["wick"]
    pct = (i[0] - w[0]) / i[0] * 100
    print(f"| {path.split('/')[-1][:-4]} | {model} | {e[0]:.2f} | {i[0]:.2f} | {w[0]:.2f} | "
          f"{abs(pct):.1f} % {'ahead' if pct > 0 else 'behind'} | {i[1]:.2f} / {w[1]:.2f} |")
