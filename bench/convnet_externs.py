#!/usr/bin/env python3
"""Extern calls per training step of a small ResNet through
torch.compile(backend="wick") on the CPU: how many go through Python and how
many through the C shim (csrc/runtime/shim_ops.c), their host time, and the
step's wall time. One process per variant, variants interleaved by rounds.

    python bench/convnet_externs.py [--root DIR ...] [--batch N] [--size S] [--rounds R] [--steps K] [--autocast]

--root (repeatable) picks the wick checkouts to compare (default: this one);
each root also runs with WICK_NATIVE_EXTERNS=0 (every extern through Python).
The model is tests/runtime/test_native_externs.py's SmallResNet (float32,
batch norm in train mode), defined again here so that any root can run it;
--autocast runs it under bfloat16 autocast.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.environ["WICK_ROOT"])
import torch, torch.nn as nn, torch.nn.functional as F
import wick._C as C
from wick import backends
torch.set_num_threads(1)

class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, groups=2, bias=False), nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())
    def forward(self, x):
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.down(x))

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.bn, self.pool = nn.Conv2d(3, 8, 5, 2, 2), nn.BatchNorm2d(8), nn.MaxPool2d(3, 2, 1)
        self.blocks = nn.Sequential(Block(8, 8, 1), Block(8, 16, 2))
        self.avg, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(16, 10)
    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.stem(x))))
        return self.fc(torch.flatten(self.avg(self.blocks(x)), 1))

batch, size, steps, autocast = (int(v) for v in sys.argv[1:5])
torch.manual_seed(0)
model = Net()
x, y = torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,))
compiled = torch.compile(model, backend="wick")
def step():
    with torch.autocast("cpu", torch.bfloat16, enabled=bool(autocast)):
        loss = F.cross_entropy(compiled(x), y)
    loss.backward()
    model.zero_grad(set_to_none=True)
for _ in range(3):
    step()
C.host_profile(True)
times = []
for _ in range(steps):
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
prof = C.host_profile(True)
out = {"step_ms": sorted(times)[len(times) // 2] * 1e3,
       "phases": {k: [v[0] / steps, v[1] * 1e3 / steps] for k, v in prof.items()},
       "externs": [g["externs"] for g in backends.compiled_graphs], "fallbacks": backends.fallback_reasons}
print(json.dumps(out))
"""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", action="append")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--autocast", action="store_true", help="bfloat16 autocast (16-bit batch norm stays extern)")
    a = p.parse_args()
    roots = a.root or [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    variants = [(r, knob) for r in roots for knob in ("1", "0")]
    results = {v: [] for v in variants}
    for _ in range(a.rounds):
        for root, knob in variants:
            env = dict(os.environ, WICK_ROOT=root, WICK_HOST_PROFILE="1", WICK_NATIVE_EXTERNS=knob,
                       OMP_NUM_THREADS="1")
            r = subprocess.run([sys.executable, "-c", CHILD, str(a.batch), str(a.size), str(a.steps), str(int(a.autocast))],
                               capture_output=True, text=True, env=env, timeout=900)
            if r.returncode:
                sys.exit(r.stderr[-3000:])
            results[(root, knob)].append(json.loads(r.stdout.strip().splitlines()[-1]))
    print(f"small ResNet training step, {'bf16 autocast' if a.autocast else 'float32'}, batch {a.batch}, {a.size}x{a.size}, 1 thread; "
          f"medians over {a.rounds} processes of {a.steps} steps")
    print("| root | WICK_NATIVE_EXTERNS | step ms | Python externs/step (ms) | native externs/step (ms) |")
    print("| --- | --- | --- | --- | --- |")
    for (root, knob), runs in results.items():
        med = lambda f: statistics.median(f(r) for r in runs)  # noqa: E731
        ph = lambda name, i: med(lambda r: r["phases"].get(name, [0, 0])[i])  # noqa: E731
        print(f"| {root} | {knob} | {med(lambda r: r['step_ms']):.3f} | {ph('extern', 0):.0f} "
              f"({ph('extern', 1):.3f}) | {ph('extern_native', 0):.0f} ({ph('extern_native', 1):.3f}) |")
    for (root, knob), runs in results.items():
        if runs[0]["fallbacks"]:
            print(f"{root} {knob}: fallbacks {runs[0]['fallbacks']}")
        print(f"{root} {knob}: graphs' externs {runs[0]['externs']}")


if __name__ == "__main__":
    main()
