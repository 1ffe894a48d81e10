#!/usr/bin/env python3
"""Indexing and creation ops (indirect loads, ops.def notes 11-12): eager vs
torch.compile(backend="inductor") vs torch.compile(backend="wick") on CPU, in
one run, each the median of --reps timed calls after warm-up:

  embedding_block  BERT's embeddings: word + position (arange) + token type
                   embeddings, added, then layer_norm
  gather_exp       torch.gather along the last dim, then exp
  index_rows       x[idx] * w + b (advanced indexing, rows of a table)
  causal_softmax   scores.masked_fill(~ones(T, T).tril(), -inf).softmax(-1)

Also checks every result against eager (within 1e-5), and that wick compiled
each graph with no extern call and no fallback.

    python bench/indexing.py [--reps N] [--out DIR]
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import wick  # noqa: E402,F401
from wick import backends as B  # noqa: E402


def cases():
    g = torch.Generator().manual_seed(0)
    vocab, hidden, batch, seq = 30522, 768, 8, 128
    word = torch.randn(vocab, hidden, generator=g)
    pos = torch.randn(512, hidden, generator=g)
    tok = torch.randn(2, hidden, generator=g)
    lw, lb = torch.randn(hidden, generator=g), torch.randn(hidden, generator=g)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    tt = torch.randint(0, 2, (batch, seq), generator=g)

    def embedding_block(ids, tt):
        p = torch.arange(ids.shape[1]).unsqueeze(0)
        e = F.embedding(ids, word) + F.embedding(p, pos) + F.embedding(tt, tok)
        return F.layer_norm(e, (hidden,), lw, lb, 1e-12)

    x = torch.randn(4096, 512, generator=g)
    gi = torch.randint(0, 512, (4096, 256), generator=g)

    def gather_exp(x, i):
        return torch.gather(x, 1, i).exp()

    table = torch.randn(100000, 256, generator=g)
    rows = torch.randint(0, 100000, (16384,), generator=g)
    w, b = torch.randn(256, generator=g), torch.randn(256, generator=g)

    def index_rows(t, i):
        return t[i] * w + b

    scores = torch.randn(16, 12, 128, 128, generator=g)

    def causal_softmax(s):
        t = s.shape[-1]
        keep = torch.ones(t, t, dtype=torch.bool).tril()
        return s.masked_fill(~keep, float("-inf")).softmax(-1)

    return {
        "embedding_block": (embedding_block, (ids, tt)),
        "gather_exp": (gather_exp, (x, gi)),
        "index_rows": (index_rows, (table, rows)),
        "causal_softmax": (causal_softmax, (scores,)),
    }


def timed(fn, args, reps):
    for _ in range(3):
        fn(*args)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    rows = []
    with torch.no_grad():
        for name, (fn, args) in cases().items():
            want = fn(*args)
            row = {"case": name, "eager_ms": timed(fn, args, a.reps) * 1e3}
            for backend in ("inductor", "wick"):
                torch._dynamo.reset()
                n0, f0 = len(B.compiled_graphs), len(B.fallback_reasons)
                c = torch.compile(fn, backend=backend)
                t0 = time.perf_counter()
                got = c(*args)
                row[f"{backend}_compile_s"] = time.perf_counter() - t0
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
                row[f"{backend}_ms"] = timed(c, args, a.reps) * 1e3
                if backend == "wick":
                    infos = B.compiled_graphs[n0:]
                    row["wick_native"] = sum(i["native"] for i in infos)
                    row["wick_extern"] = sum(i["extern"] for i in infos)
                    row["wick_kernels"] = sum(i["kernels"] for i in infos)
                    row["wick_fallbacks"] = len(B.fallback_reasons) - f0
            row["wick_speedup"] = row["eager_ms"] / row["wick_ms"]
            row["inductor_speedup"] = row["eager_ms"] / row["inductor_ms"]
            rows.append(row)
            print(f"{name:16s} eager {row['eager_ms']:8.3f} ms  inductor {row['inductor_ms']:8.3f} ms "
                  f"({row['inductor_speedup']:.2f}x)  wick {row['wick_ms']:8.3f} ms ({row['wick_speedup']:.2f}x)  "
                  f"wick: {row['wick_kernels']} kernels, {row['wick_extern']} externs, "
                  f"{row['wick_fallbacks']} fallbacks", flush=True)
    meta = {"torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
            "threads": torch.get_num_threads(), "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])}
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "indexing.json"), "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
