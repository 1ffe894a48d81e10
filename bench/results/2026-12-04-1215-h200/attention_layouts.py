"""Which layouts an attention kernel's first call sees, in eager and in wick's compiled training step: every call of
an aten attention op (forward and backward) with its tensors' sizes, strides and dtypes and its flags, logged by a
TorchDispatchMode around one eager step and one compiled step. cuDNN attention builds a plan per distinct key
(sizes, strides, flags; aten/src/ATen/native/cudnn/MHA.cpp), so a call whose layout eager never used costs a plan
build in the compiled first call. Usage: python attention_layouts.py <suite> <model> [cpu|cuda]"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from wick.bench import models as M  # noqa: E402

suite, name = sys.argv[1], sys.argv[2]
device = sys.argv[3] if len(sys.argv) > 3 else "cuda"


def describe(x):
    if isinstance(x, torch.Tensor):
        return f"T{tuple(x.shape)}/{tuple(x.stride())}/{str(x.dtype)[6:]}"
    if isinstance(x, (list, tuple)):
        return "[" + ",".join(describe(y) for y in x) + "]"
    return repr(x)


class Log(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if "attention" in str(func):
            self.calls.append(f"{func}: " + " ".join(describe(a) for a in args) +
                              "".join(f" {k}={describe(v)}" for k, v in kwargs.items()))
        return func(*args, **kwargs)


spec = next(s for s in M.load_suite(suite) if s.name == name)
torch.manual_seed(0)
built = M.build(spec, spec.batch_for(device), device)
model, inputs = built.model, built.inputs
model.train(True)


def step(fwd, module):
    opt = torch.optim.SGD(module.parameters(), lr=0.01)
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device, torch.bfloat16):
        out = M.call(fwd, {k: v.clone() for k, v in inputs.items()} if isinstance(inputs, dict) else inputs)
        loss = built.loss(out)
    loss.backward()
    opt.step()


import copy  # noqa: E402

import wick  # noqa: E402

for label, make in (("eager", lambda m: m), ("wick", wick.compile)):
    m = copy.deepcopy(model)
    fwd = make(m)
    step(fwd, m)  # the compile happens here, outside the log
    log = Log()
    with log:
        step(fwd, m)
    seen = {}
    for c in log.calls:
        seen[c] = seen.get(c, 0) + 1
    print(f"== {name} {label}: {len(log.calls)} attention calls, {len(seen)} distinct")
    for c, n in seen.items():
        print(f"  {n}x {c}")
