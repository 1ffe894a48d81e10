import sys, os, copy, time, torch
R=os.environ.get("WREPO","/work/wt-train12"); sys.path.insert(0, R); sys.path.insert(0, R+"/bench")
import train_step as TS
from wick.bench import models as M
torch.set_num_threads(1)
import torch._inductor.config as icfg
icfg.fallback_random = True
name, comp = sys.argv[1], sys.argv[2]
if comp == "wick": import wick.backends
spec = [s for s in M.load_suite("huggingface") if s.name == name][0]
built = M.build_huggingface(spec, spec.batch, "cpu")
module = copy.deepcopy(built.model)
fwd = torch.compile(module, backend=comp)
st = TS.make_step(fwd, module, built.inputs, built.loss)
for _ in range(3): st()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
    for _ in range(10): st()
print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=45, max_name_column_width=40, max_shapes_column_width=90))
