"""The CUDA graph runner's bookkeeping through host_ab's training steps, on the CPU: the runner's CUDA parts
replaced by the test double of tests/autodiff/test_autodiff_cudagraphs.py (a "graph" replays by running the
function on the inputs its call bound), six steps, then the recordings, replays and skipped calls per runner.

    .venv/bin/python bench/results/2026-12-05-1310-h200/cpu_double_host_ab.py huggingface:BertForMaskedLM
"""
import os
import sys

sys.path[:0] = [".", "bench", "tests/autodiff"]
import torch  # noqa: E402

import wick  # noqa: E402
from wick import _cudagraphs  # noqa: E402
import test_autodiff_cudagraphs as T  # noqa: E402
from wick.bench import models as M  # noqa: E402

T.install_cpu_double(on_misfit=lambda runner: print(f"{runner.name}: {runner.misfit}", file=sys.stderr))
suite, name = sys.argv[1].split(":")
spec = next(s for s in M.load_suite(suite) if s.name == name)
torch.manual_seed(0)
built = M.build(spec, 2, "cpu")
model = built.model.train(True)
fn = wick.compile(model, mode="reduce-overhead")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(6):
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = built.loss(M.call(fn, built.inputs))
    loss.backward()
    opt.step()
print("recorded", dict(_cudagraphs.recorded), "replayed", dict(_cudagraphs.replayed),
      "skipped", dict(_cudagraphs.skipped), "reasons", _cudagraphs.reasons)
print("stats", {k: v for k, v in wick.stats().items() if k in ("graphs", "breaks", "fallbacks")})
os._exit(0)
