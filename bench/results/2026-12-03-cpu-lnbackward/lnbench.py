"""The layer norm backward of tests/codegen/test_row_group_hoist.py on the C target, rows x cols, bf16 gy:
median ms of 20 calls after 3 warm-ups, 2 threads; then eager's. python lnbench.py <repo with wick built> rows cols <repo
with the test>."""
import sys, time, statistics
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[4] + "/tests/codegen")
import torch
import wick._C as C
from test_row_group_hoist import eager, inputs, layer_norm_backward
torch.set_num_threads(2)
rows, cols = int(sys.argv[2]), int(sys.argv[3])
t = inputs(rows, cols, torch.bfloat16, "contig")
g = C.Graph(); ids = [g.input_like(x) for x in t]
for o in layer_norm_backward(g, cols, torch.bfloat16, *ids): g.output(o)
cg = g.compile()
for _ in range(3): cg(*t)
ts = []
for _ in range(20):
    s = time.perf_counter(); cg(*t); ts.append(time.perf_counter() - s)
print(sys.argv[1], rows, cols, "median ms %.3f" % (1e3 * statistics.median(ts)), "kernels", cg.nkernels)
ts = []
for _ in range(20):
    s = time.perf_counter(); eager(*t); ts.append(time.perf_counter() - s)
print("  eager median ms %.3f" % (1e3 * statistics.median(ts)))
