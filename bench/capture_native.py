#!/usr/bin/env python3
"""wick.compile (wick's own capture) vs torch.compile(backend="wick") vs
inductor vs eager on blocks whose torch calls capture now maps to native
nodes (softmax, layer_norm, gelu, views), one process, CPU.

    python bench/capture_native.py [--root DIR] [--repeats N] [--out DIR]

--root picks the wick checkout to import (default: this one), so the same
script measures a branch before and after. For wick.compile it also reports
how many EXTERN nodes the captured graph holds (calls left to PyTorch).

Blocks (float32):
  softmax      torch.softmax(x, -1) on 2048 x 2048
  layer_norm   F.layer_norm(x, (C,), w, b) on 2048 x 2048
  gelu_mlp     x + fc2(gelu(fc1(layer_norm(x)), 'tanh')) on 512 x 512 (matmuls are externs everywhere)
  attn_scores  softmax(q.view(B,T,H,D).transpose(1,2) @ k...transpose(-2,-1) * D**-0.5 + mask) on B=4,T=256,H=8,D=64
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--out")
    a = p.parse_args()
    sys.path.insert(0, a.root)
    import torch
    import torch.nn.functional as F

    import wick
    import wick._C as C

    torch.manual_seed(0)
    N = 2048
    x = torch.randn(N, N)
    w, b = torch.randn(N), torch.randn(N)
    xm = torch.randn(512, 512)
    ln_w, ln_b = torch.randn(512), torch.randn(512)
    w1, b1, w2, b2 = torch.randn(2048, 512) * 0.02, torch.randn(2048), torch.randn(512, 2048) * 0.02, torch.randn(512)
    B, T, H, D = 4, 256, 8, 64
    q, k = torch.randn(B, T, H * D), torch.randn(B, T, H * D)
    mask = torch.zeros(T, T).masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))

    def softmax(x):
        return torch.softmax(x, -1)

    def layer_norm(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b)

    def gelu_mlp(x, ln_w, ln_b, w1, b1, w2, b2):
        h = F.layer_norm(x, (x.shape[-1],), ln_w, ln_b)
        return x + F.linear(F.gelu(F.linear(h, w1, b1), approximate="tanh"), w2, b2)

    def attn_scores(q, k, mask):
        b, t, c = q.shape
        qh = q.view(b, t, 8, c // 8).transpose(1, 2)
        kh = k.view(b, t, 8, c // 8).transpose(1, 2)
        s = qh @ kh.transpose(-2, -1) * (c // 8) ** -0.5 + mask
        return F.softmax(s, dim=-1)

    blocks = {
        "softmax": (softmax, (x,)),
        "layer_norm": (layer_norm, (x, w, b)),
        "gelu_mlp": (gelu_mlp, (xm, ln_w, ln_b, w1, b1, w2, b2)),
        "attn_scores": (attn_scores, (q, k, mask)),
    }

    def timeit(fn, args):
        for _ in range(3):
            fn(*args)
        ts = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            fn(*args)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    results = {}
    for name, (fn, args) in blocks.items():
        want = fn(*args)
        row = {}
        variants = {
            "eager": fn,
            "wick.compile": wick.compile(fn),
            "torch.compile(wick)": torch.compile(fn, backend="wick"),
            "inductor": torch.compile(fn, backend="inductor"),
        }
        for vname, f in variants.items():
            got = f(*args)
            torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
            row[vname] = timeit(f, args) * 1e3
        es = C.code_entries(fn.__code__)
        graph = "".join(e.get("graph") or "" for e in es if not e.get("eager"))
        row["wick.compile externs"] = graph.count("EXTERN")
        row["wick.compile fell back"] = [e.get("reason") for e in es if e.get("eager")]
        results[name] = row
        print(name, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)

    meta = {"torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
            "threads": torch.get_num_threads(), "root": a.root, "repeats": a.repeats,
            "command": " ".join(sys.argv)}
    out = a.out
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)
        cols = ["eager", "wick.compile", "torch.compile(wick)", "inductor"]
        lines = [f"# capture_native ({meta['root']})", "", f"torch {meta['torch']}, Python {meta['python']}, "
                 f"{meta['threads']} threads, median of {a.repeats}, ms", "",
                 "| block | " + " | ".join(cols) + " | externs in wick.compile graph |",
                 "|---" * (len(cols) + 2) + "|"]
        for name, row in results.items():
            lines.append(f"| {name} | " + " | ".join(f"{row[c]:.3f}" for c in cols) +
                         f" | {row['wick.compile externs']}{' (fell back)' if row['wick.compile fell back'] else ''} |")
        with open(os.path.join(out, "report.md"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
