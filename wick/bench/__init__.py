"""wick's benchmark instrument: ``python -m wick.bench`` (also ``wick-bench``).

Every row (one model, mode, precision and compiler) runs in its own
subprocess with a time limit, is checked for accuracy against a float64
reference by the rules of PyTorch's own compiler benchmarks, and is timed
against eager PyTorch with interleaved repeats. See ``__main__.py`` for the
command line and ``worker.py`` for what one row does.

The modules here use relative imports only and never import ``wick`` (the C
extension) at module level: the harness must keep working, and report it,
when wick itself cannot be imported. Run as ``python wick/bench/__main__.py``
it loads itself by path, without the ``wick`` package.
"""

STATUSES = (
    "pass",           # ran compiled, accurate; the only status that gets a speedup
    "fail_accuracy",  # ran, but results differ from eager beyond tolerance
    "fallback",       # wick ran (part of) the model eagerly; reasons listed
    "not_supported",  # the compiler cannot run this row here (wick missing, no GPU ...)
    "compile_error",  # the compiler raised while compiling / on its first call
    "crash",          # the row's process died or raised after compiling
    "timeout",        # the row's process ran past its time limit and was killed
    "eager_fail",     # eager PyTorch itself failed or two eager runs differ: nothing to judge
    "skipped",        # never started: the run's time budget was spent
)
