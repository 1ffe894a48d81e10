"""Reduce-overhead training steps of both front ends on the CPU, the CUDA graph runner's CUDA parts replaced by the
test double of tests/autodiff/test_autodiff_cudagraphs.py (a "graph" replays by running the function on the inputs
its call bound): six bf16-autocast SGD steps of a model and of an eager copy (same dropout seed per step), the
losses, the largest parameter difference (relative to that parameter's largest value; BERT's attention key biases,
whose gradient is zero but for rounding, left out), and the recordings, replays and skipped calls per runner.

    .venv/bin/python bench/results/2026-12-05-1630-cpu2-cudagraph-double/training_double.py huggingface:BertForMaskedLM aot

front: wick (wick.compile, wick's own autodiff), aot (torch.compile(backend="wick"), AOTAutograd's backward),
aot_plain (no reduce-overhead), ind (inductor).
"""
import copy, os, sys
sys.path[:0] = [".", "bench", "tests/autodiff"]
import torch
import wick
from wick import _cudagraphs
import test_autodiff_cudagraphs as T
from wick.bench import models as M
T.install_cpu_double(on_misfit=lambda runner: print(f"{runner.name}: {runner.misfit}", file=sys.stderr))
suite, name = sys.argv[1].split(":")
front = sys.argv[2]
spec = next(s for s in M.load_suite(suite) if s.name == name)
torch.manual_seed(0)
built = M.build(spec, 2, "cpu")
model = built.model.train(True)
ref = copy.deepcopy(model)
fn = {"wick": lambda: wick.compile(model, mode="reduce-overhead"), "aot": lambda: torch.compile(model, backend="wick", mode="reduce-overhead"), "aot_plain": lambda: torch.compile(model, backend="wick"), "ind": lambda: torch.compile(model)}[front]()
opts = [torch.optim.SGD(m.parameters(), lr=0.01) for m in (model, ref)]
worst = 0
for step in range(6):
    losses = []
    for f, opt in ((fn, opts[0]), (ref, opts[1])):
        opt.zero_grad(set_to_none=True)
        torch.manual_seed(step)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = built.loss(M.call(f, built.inputs))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    d, dn = max(((p - q).abs().max().item() / (q.abs().max().item() + 1e-12), n) for (n, p), q in zip(model.named_parameters(), ref.parameters()) if not n.endswith('key.bias'))
    worst = max(worst, d)
    print(step, losses, f"param rel diff {d:.2e} {dn}")
print("recorded", dict(_cudagraphs.recorded), "replayed", dict(_cudagraphs.replayed),
      "skipped", dict(_cudagraphs.skipped), "reasons", _cudagraphs.reasons)
os._exit(0)
