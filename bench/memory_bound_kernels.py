#!/usr/bin/env python3
"""Kernel benchmark, one process: eager vs inductor vs torch.compile(backend="wick")
on memory-bound kernels, with this machine's copy bandwidth measured in the
same run (so "% of bandwidth" compares like with like).

    python bench/memory_bound_kernels.py [--rows R --cols C] [--repeats N] [--threads T] [--out DIR]

Kernels (float32, R x C, default 4096 x 4096):
  pointwise  ((x * 1.5 + 0.5).relu() - y).sigmoid() * y    reads 2, writes 1 tensor
  softmax    torch.softmax(x, -1)                          reads 1, writes 1 (+ row stats)
  layer_norm F.layer_norm(x, (C,), w, b)                   reads 1, writes 1 (+ row stats)
  sum_rows   x.sum(-1) (reduce the contiguous axis)        reads 1
  sum_cols   x.sum(0)  (reduce the strided axis)           reads 1
  mm_epilogue (a @ w + b).relu() on 1024 x 1024 (extern matmul, fused epilogue; not memory-bound)
  copy       out.copy_(x) into a preallocated tensor: the bandwidth reference (eager)
  clone      x.clone(): the same copy into a freshly allocated output

Bandwidth figures count the bytes each kernel must move at least once (its
inputs read once, its output written once), over the median time. Both
references are measured in the same run, same threads and sizes; the copy
probe is also timed alternately with every compiler's kernel samples, and
% of copy bandwidth is against that adjacent probe (on a shared machine the
load changes within a run). `copy` is
what the memory system sustains; `clone` adds what every op that returns a
new large tensor pays in eager (a fresh mapping from the allocator, one page
fault per 4 KiB page on first write). The kernels allocate their outputs, so
`clone` is the like-for-like reference; % of `copy` is the strict one.
Writes results.json and report.md to DIR (default bench/results/<date>-cpu<N>-kernels).
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=0, help="torch and wick threads (default: torch's)")
    p.add_argument("--out")
    p.add_argument("--clock", choices=("wall", "thread"), default="wall",
                   help="thread: time samples in the calling thread's CPU time (only with --threads 1, where "
                        "eager, inductor and wick all run on that thread); on a shared machine it leaves out the "
                        "time other processes hold the core, which wall time counts against whichever kernel ran")
    a = p.parse_args()
    if a.clock == "thread" and a.threads != 1:
        p.error("--clock thread needs --threads 1")
    clock = time.thread_time if a.clock == "thread" else time.perf_counter
    if a.threads:
        os.environ["WICK_NUM_THREADS"] = str(a.threads)  # read when wick loads
    import torch
    if a.threads:
        torch.set_num_threads(a.threads)
    import torch.nn.functional as F

    import wick  # noqa: F401  (registers backend="wick")
    from wick import backends

    R, C = a.rows, a.cols
    torch.manual_seed(0)
    x, y = torch.randn(R, C), torch.randn(R, C)
    w, b = torch.randn(C), torch.randn(C)
    a_mm, w_mm, b_mm = torch.randn(1024, 1024), torch.randn(1024, 1024), torch.randn(1024)
    nb = R * C * 4
    kernels = {
        "pointwise": (lambda x, y: ((x * 1.5 + 0.5).relu() - y).sigmoid() * y, (x, y), 3 * nb),
        "softmax": (lambda x: torch.softmax(x, -1), (x,), 2 * nb),
        "layer_norm": (lambda x, w, b: F.layer_norm(x, (C,), w, b), (x, w, b), 2 * nb),
        "sum_rows": (lambda x: x.sum(-1), (x,), nb),
        "sum_cols": (lambda x: x.sum(0), (x,), nb),
        "mm_epilogue": (lambda a, w, b: torch.relu(a @ w + b), (a_mm, w_mm, b_mm), 3 * 1024 * 1024 * 4),
    }

    def timeit(fn, args):
        fn(*args)
        n = max(1, int(0.05 / max(1e-6, _once(fn, args))))
        samples = []
        for _ in range(a.repeats):
            t0 = clock()
            for _ in range(n):
                fn(*args)
            samples.append((clock() - t0) / n)
        return statistics.median(samples)

    def timeit_beside_copy(fn, args):
        """(median time of fn, median time of the copy probe): the two
        alternate sample by sample, so a load change on the shared machine
        hits both; % of copy bandwidth is taken against the adjacent copy."""
        fn(*args)
        n = max(1, int(0.05 / max(1e-6, _once(fn, args))))
        nc = max(1, int(0.05 / max(1e-6, _once(copy_fn, (x, dst)))))
        ks, cs = [], []
        for _ in range(a.repeats):
            t0 = clock()
            for _ in range(nc):
                copy_fn(x, dst)
            cs.append((clock() - t0) / nc)
            t0 = clock()
            for _ in range(n):
                fn(*args)
            ks.append((clock() - t0) / n)
        return statistics.median(ks), statistics.median(cs)

    def _once(fn, args):
        t0 = clock()
        fn(*args)
        return clock() - t0

    dst = torch.empty_like(x)

    def copy_fn(t, o):
        return o.copy_(t)

    copy_s = timeit(copy_fn, (x, dst))  # no allocation: the memory system alone
    copy_gbs = 2 * nb / copy_s / 1e9
    clone_s = timeit(lambda t: t.clone(), (x,))
    clone_gbs = 2 * nb / clone_s / 1e9
    rows = []
    with torch.no_grad():
        for name, (fn, args, nbytes) in kernels.items():
            want = fn(*args)
            row = {"kernel": name, "bytes": nbytes}
            row["eager_s"], row["eager_copy_s"] = timeit_beside_copy(fn, args)
            for comp in ("inductor", "wick"):
                torch._dynamo.reset()
                n0 = len(backends.fallback_reasons)
                g0 = len(backends.compiled_graphs)
                t0 = time.perf_counter()
                cf = torch.compile(fn, backend=comp)
                got = cf(*args)
                row[f"{comp}_compile_s"] = round(time.perf_counter() - t0, 3)
                ok = torch.allclose(got, want, rtol=1e-4, atol=1e-4)
                fell = comp == "wick" and len(backends.fallback_reasons) > n0
                ext = {k: v for i in backends.compiled_graphs[g0:] for k, v in i["externs"].items()} if comp == "wick" else {}
                row[f"{comp}_s"], row[f"{comp}_copy_s"] = timeit_beside_copy(cf, args) if ok and not fell else (None, None)
                row[f"{comp}_note"] = "fallback" if fell else "wrong" if not ok else ("externs " + str(ext)) if ext else ""
            for comp in ("eager", "inductor", "wick"):
                t = row[f"{comp}_s"]
                row[f"{comp}_gbs"] = round(nbytes / t / 1e9, 2) if t else None
                adj = row[f"{comp}_copy_s"]  # the copy probe timed beside this compiler's samples
                row[f"{comp}_copy_gbs"] = round(2 * nb / adj / 1e9, 2) if adj else None
                row[f"{comp}_pct_copy_bw"] = round(100 * (nbytes / t) / (2 * nb / adj), 1) if t else None
                row[f"{comp}_pct_clone_bw"] = round(100 * nbytes / t / 1e9 / clone_gbs, 1) if t else None
            rows.append(row)
    doc = {"torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
           "cpus": os.cpu_count(), "threads": torch.get_num_threads(), "clock": a.clock, "rows": R, "cols": C,
           "copy_gbs": round(copy_gbs, 2), "clone_gbs": round(clone_gbs, 2), "command": " ".join(["python", "bench/memory_bound_kernels.py"] + sys.argv[1:]),
           "kernels": rows}
    out = a.out or os.path.join(ROOT, "bench", "results", time.strftime("%Y-%m-%d") + f"-cpu{os.cpu_count()}-kernels")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
    lines = [f"# Kernels, {R} x {C} float32, {doc['threads']} threads, torch {doc['torch']}",
             "", f"Command: `{doc['command']}`. Measured in the same run: copy bandwidth (out.copy_(x) into a "
             f"preallocated tensor, eager) {doc['copy_gbs']} GB/s; clone bandwidth (x.clone(): fresh output, "
             f"as every kernel here allocates one) {doc['clone_gbs']} GB/s. Times are medians ({a.clock} clock); % bw is of "
             "the copy bandwidth measured beside each compiler's samples (copy and kernel samples "
             "alternate; the copy GB/s columns give that probe), % clone of the clone bandwidth "
             "(mm_epilogue is compute-bound: its % are not meaningful).", "",
             "| kernel | eager ms | inductor ms | wick ms | wick % bw | inductor % bw | wick % clone | "
             "inductor % clone | wick/inductor | copy GB/s beside wick | beside inductor | wick compile s | "
             "inductor compile s | note |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        def ms(v):
            return f"{v * 1e3:.2f}" if v else "-"
        ratio = f"{r['wick_s'] / r['inductor_s']:.2f}" if r["wick_s"] and r["inductor_s"] else "-"
        lines.append(f"| {r['kernel']} | {ms(r['eager_s'])} | {ms(r['inductor_s'])} | {ms(r['wick_s'])} | "
                     f"{r['wick_pct_copy_bw']} | {r['inductor_pct_copy_bw']} | {r['wick_pct_clone_bw']} | "
                     f"{r['inductor_pct_clone_bw']} | {ratio} | {r['wick_copy_gbs']} | {r['inductor_copy_gbs']} | "
                     f"{r['wick_compile_s']} | "
                     f"{r['inductor_compile_s']} | {r['wick_note']} |")
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
