"""Graph breaks: a function with one break in the middle of tensor work.

    python bench/breaks_bench.py [--sizes 16,256,1024] [--repeat 15]

The break is `.item()` (a Python number from tensor data), which both wick
and PyTorch's capture (torch.compile) split the function at: tensor work
before it, the .item() in Python, tensor work after it in a resume function.
Each side keeps its graphs (warmed up before timing). Reports the time per
call for eager PyTorch, wick, torch.compile(backend="inductor") and
torch.compile(backend="eager") (capture only, ops run eagerly: its per-call
overhead is PyTorch's capture and guard cost), and the graphs/breaks each
compiler made. Per-call overhead = compiled time - eager time at the
smallest size, where the tensor work is negligible.
"""
import argparse
import json
import platform
import sys
import time

import torch

import wick


def one_break(x, w):
    y = torch.tanh(x * w + 1.0) * 0.5
    z = y.exp() - y
    s = z.mean().item()  # the break
    out = torch.relu(z * s - y) + x
    return out * 2.0 - w


def one_break_in_try(x, w):
    """The same break inside a try block: wick protects it (an exception of
    the .item() would reach the except clause through a resume function)."""
    y = torch.tanh(x * w + 1.0) * 0.5
    z = y.exp() - y
    try:
        s = z.mean().item()  # the break
        out = torch.relu(z * s - y) + x
    except RuntimeError:
        out = x
    return out * 2.0 - w


def loop_while(x, w):
    """A while loop on a tensor's value (a trip count capture cannot know):
    wick compiles the body as a function of its own, called per iteration
    (csrc/capture/loops.c); PyTorch's capture runs a frame with a graph
    break in a loop eagerly."""
    y = torch.tanh(x * w) * 0.5
    while y.abs().mean() > 0.01:
        y = torch.tanh(y) * torch.sigmoid(w) * 0.6  # |y| shrinks: a few iterations
    return y + x


FUNCTIONS = {"one_break": one_break, "one_break_in_try": one_break_in_try, "loop_while": loop_while}


def no_break(x, w):
    """The same work with the break's value fixed: one graph, for the cost of the break itself."""
    y = torch.tanh(x * w + 1.0) * 0.5
    z = y.exp() - y
    s = 0.25
    out = torch.relu(z * s - y) + x
    return out * 2.0 - w


def bench(fn, args, repeat, number):
    for _ in range(3):
        fn(*args)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn(*args)
        best = min(best, (time.perf_counter() - t) / number)
    return best


def dynamo_counts(fn, args):
    import torch._dynamo

    torch._dynamo.reset()
    e = torch._dynamo.explain(fn)(*args)
    torch._dynamo.reset()
    return e.graph_count, e.graph_break_count


def wick_counts():
    s = wick.stats()
    return s["graphs"], len([r for r in s["break_reasons"]])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="16,256,1024")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--json", default=None)
    ap.add_argument("--fn", default="one_break", choices=sorted(FUNCTIONS))
    a = ap.parse_args()
    fn = FUNCTIONS[a.fn]
    torch.set_num_threads(1)
    rows = []
    for n in [int(v) for v in a.sizes.split(",")]:
        x, w = torch.randn(n, n), torch.randn(n, n)
        args = (x, w)
        number = max(5, int(2e6 / (n * n + 1000)))
        ref = fn(*args)
        wick.reset()
        fw = wick.compile(fn)
        torch.testing.assert_close(fw(*args), ref, rtol=1e-4, atol=1e-4)
        wg, wb = wick_counts()
        torch._dynamo.reset()
        fi = torch.compile(fn, backend="inductor")
        torch.testing.assert_close(fi(*args), ref, rtol=1e-4, atol=1e-4)
        fe = torch.compile(fn, backend="eager")
        fe(*args)
        dg, db = dynamo_counts(fn, args)
        t_eager = bench(fn, args, a.repeat, number)
        t_wick = bench(fw, args, a.repeat, number)
        t_ind = bench(fi, args, a.repeat, number)
        t_dyn_eager = bench(fe, args, a.repeat, number)
        t_wick_nobreak = float("nan")  # loop_while has no break-free twin
        if fn is not loop_while:
            fnb = wick.compile(no_break)
            fnb(*args)
            t_wick_nobreak = bench(fnb, args, a.repeat, number)
        rows.append({"n": n, "eager_us": t_eager * 1e6, "wick_us": t_wick * 1e6, "inductor_us": t_ind * 1e6,
                     "dynamo_eager_us": t_dyn_eager * 1e6, "wick_no_break_us": t_wick_nobreak * 1e6, "wick_graphs": wg, "wick_breaks": wb,
                     "torch_graphs": dg, "torch_breaks": db})
        r = rows[-1]
        print(f"n={n:5d}  eager {r['eager_us']:9.1f} us  wick {r['wick_us']:9.1f} us  inductor {r['inductor_us']:9.1f} us"
              f"  torch.compile(eager) {r['dynamo_eager_us']:9.1f} us  wick without the break {r['wick_no_break_us']:9.1f} us"
              f"  graphs/breaks wick {wg}/{wb} torch {dg}/{db}",
              flush=True)
    small = rows[0]
    print(f"per-call overhead at n={small['n']}: wick {small['wick_us'] - small['eager_us']:.1f} us, "
          f"inductor {small['inductor_us'] - small['eager_us']:.1f} us, "
          f"torch.compile(eager) {small['dynamo_eager_us'] - small['eager_us']:.1f} us; "
          f"the break itself costs wick {small['wick_us'] - small['wick_no_break_us']:.1f} us "
          f"(the same function with the value fixed: {small['wick_no_break_us']:.1f} us)")
    meta = {"python": sys.version.split()[0], "torch": torch.__version__, "machine": platform.machine(),
            "threads": torch.get_num_threads(), "function": a.fn, "command": " ".join(sys.argv)}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
