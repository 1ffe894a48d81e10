#!/usr/bin/env python3
"""Kernel micro-benchmark (issue 2): wick vs eager vs torch.compile on a pointwise chain,
a row-wise softmax and tiny inputs (per-call overhead). The code is wick/bench/micro.py;
this script loads it by path, so it runs even when wick's C core does not import
(wick's rows then say "wick not importable").

    python bench/micro.py [--device cpu|cuda] [--numel N] [--rows R --cols C] [--out DIR]
"""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BENCH = os.path.join(ROOT, "wick", "bench")

if __name__ == "__main__":
    sys.path.insert(0, ROOT)  # so that `import wick` finds this checkout
    spec = importlib.util.spec_from_file_location("wick_bench", os.path.join(BENCH, "__init__.py"),
                                                  submodule_search_locations=[BENCH])
    pkg = importlib.util.module_from_spec(spec)
    sys.modules["wick_bench"] = pkg
    spec.loader.exec_module(pkg)
    from wick_bench.micro import main

    sys.exit(main())
