# Diagnostic of call 2: why a backward replay is skipped with extern cuDNN norms
import copy, os, sys
sys.path.insert(0, os.getcwd())
os.environ["WICK_CUDA_NORM_TRAINING"] = "extern"
import torch
import wick
from wick import _cudagraphs
sys.path.insert(0, "tests/autodiff")
from test_autodiff_cudagraphs import ConvNet

torch.manual_seed(0)
eager = ConvNet().cuda().to(torch.bfloat16).train()
mine = copy.deepcopy(eager)
wick.reset()
compiled = wick.compile(mine, mode="reduce-overhead")
runners = []
for step in range(6):
    x = torch.randn(4, 3, 12, 12, device="cuda", dtype=torch.bfloat16)
    for run in (eager, compiled):
        run(x).float().square().mean().backward()
    for (name, p), q in zip(eager.named_buffers(), mine.buffers()):
        if not name.endswith("num_batches_tracked"):
            torch.testing.assert_close(q, p, rtol=2e-2, atol=2e-2)
    import gc
    if not runners:
        runners = [o for o in gc.get_objects() if isinstance(o, _cudagraphs.CudaGraphRunner)]
    for r in runners:
        print(step, r.name, "calls", r.calls, "replays", r.replays, "rerecords", r.rerecords, "copied", sorted(r.copied),
              "slots", [s[0][0] for s in (r.slots or [])], "failed", r.failed)
from wick import _autodiff
for o in gc.get_objects():
    if isinstance(o, _autodiff._Runner):
        print("restride", o.restride)
print("recorded", dict(_cudagraphs.recorded), "replayed", dict(_cudagraphs.replayed))
print("skipped", dict(_cudagraphs.skipped), "reasons", _cudagraphs.reasons)
print("stats", wick.stats())
