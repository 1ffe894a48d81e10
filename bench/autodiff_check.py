"""One training step of each model through wick.compile (wick's own autodiff) against eager: the loss and every
parameter's gradient (largest difference relative to the largest gradient), whether every graph took wick's
autodiff, and the first call's time. A check, not a benchmark (the H200 calls run it before timing rows).

    python bench/autodiff_check.py [--device cuda] [--autocast] [--depth N] timm:vit_base_patch16_224 GPT2LMHeadModel ...

timm:<name> builds a timm model (its depth cut to --depth when given) at --batch 224x224 images, cross-entropy on
random labels; other names are transformers models from wick/bench (size small, seq 64), their own loss.
"""
import argparse
import copy
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

ap = argparse.ArgumentParser()
ap.add_argument("models", nargs="+")
ap.add_argument("--device", default="cpu")
ap.add_argument("--autocast", action="store_true", help="bf16 autocast")
ap.add_argument("--depth", type=int, default=0)
ap.add_argument("--batch", type=int, default=2)
args = ap.parse_args()

import torch  # noqa: E402

import wick  # noqa: E402
from wick.bench import models as M  # noqa: E402


def build(name):
    torch.manual_seed(0)
    if name.startswith("timm:"):
        import timm

        kw = {"depth": args.depth} if args.depth else {}
        model = timm.create_model(name[5:], num_classes=1000, **kw).to(args.device)
        x = torch.randn(args.batch, 3, 224, 224, device=args.device)
        y = torch.randint(0, 1000, (args.batch,), device=args.device)
        return model, (lambda fn: torch.nn.functional.cross_entropy(fn(x).float(), y))
    spec = M.ModelSpec(suite="huggingface", name=name, batch=args.batch, options={"size": "small", "seq": "64"})
    built = M.build(spec, args.batch, args.device)
    return built.model, (lambda fn: built.loss(M.call(fn, built.inputs)))


def step(fn, loss_of):
    with torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.autocast):
        loss = loss_of(fn)
    loss.backward()
    if args.device == "cuda":
        torch.cuda.synchronize()
    return loss.detach().float()


for name in args.models:
    wick.reset()
    model, loss_of = build(name)
    ref = copy.deepcopy(model)
    compiled = wick.compile(model)
    t = time.perf_counter()
    try:
        got = step(compiled, loss_of)
    except Exception as exc:  # noqa: BLE001 - reported, the next model runs
        print(f"{name}: ERROR {type(exc).__name__}: {str(exc)[:400]}", flush=True)
        continue
    first = time.perf_counter() - t
    want = step(ref, loss_of)
    scale = max(q.grad.abs().max().item() for q in ref.parameters() if q.grad is not None)
    worst, where = 0.0, ""
    for (pname, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        if (p.grad is None) != (q.grad is None):
            worst, where = float("inf"), f"{pname}: a gradient missing"
            break
        if q.grad is not None:
            err = (p.grad.float() - q.grad.float()).abs().max().item() / scale
            if err > worst:
                worst, where = err, pname
    st = wick.stats()
    print(f"{name}: first call {first:.2f} s, loss {got.item():.5f} / eager {want.item():.5f}, worst gradient "
          f"{worst:.2e} of the largest ({where}); graphs {st['graphs']}, breaks {st['breaks']}, fallbacks "
          f"{len(st['fallbacks'])}; wick autodiff {st['autodiff']['graphs']} graphs, AOTAutograd "
          f"{st['autodiff']['fallbacks']} {st['autodiff']['reasons']}", flush=True)
