import sys, os, copy, torch
R=os.environ.get("WREPO","/work/wt-train12"); sys.path.insert(0, R); sys.path.insert(0, R+"/bench")
import train_step as TS
from wick.bench import models as M
torch.set_num_threads(1)
name, comp, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
import wick.backends
spec = [s for s in M.load_suite("huggingface") if s.name == name][0]
built = M.build_huggingface(spec, spec.batch, "cpu")
module = copy.deepcopy(built.model)
st = TS.make_step(torch.compile(module, backend=comp), module, built.inputs, built.loss)
for _ in range(n): st()
