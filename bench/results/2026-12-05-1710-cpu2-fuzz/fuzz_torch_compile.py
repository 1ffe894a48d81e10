"""fuzzlib's check_program (tests/e2e/fuzzlib.py) with torch.compile(fn, backend=BACKEND, dynamic=False) in place of
wick.compile: the counts per outcome and each failing seed.

    PYTHONPATH=. .venv/bin/python bench/results/2026-12-05-1710-cpu2-fuzz/fuzz_torch_compile.py 920000 300 wick
"""
import sys, json, collections
sys.path.insert(0, "tests/e2e")
import torch, torch._dynamo, wick, fuzzlib
import wick.backends as B
B.register()
BACKEND = sys.argv[3]
wick.compile = lambda fn, **kw: torch.compile(fn, backend=BACKEND, dynamic=False)
start, count = int(sys.argv[1]), int(sys.argv[2])
c = collections.Counter(); fails = []
for seed in range(start, start + count):
    torch._dynamo.reset(); B.fallback_reasons.clear()
    prog = fuzzlib.generate(seed)
    try:
        out = fuzzlib.check_program(prog)
    except Exception as exc:
        c["harness-error"] += 1; continue
    st = out.status
    if st == "ok" and B.fallback_reasons: st = "backend-fallback"
    c[st] += 1
    if out.status == "fail":
        fails.append((seed, out.kind, out.detail[:300]))
print(dict(c))
for f in fails: print(f)
