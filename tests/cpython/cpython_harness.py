"""Runs one of CPython's own test modules (test.<name> from the interpreter's
Lib/test) and prints, as JSON, the outcome of every test: plainly, or with
every test method wrapped by wick.compile (the frame hook then captures each
test method's frame, and whatever it cannot capture runs eagerly).

    python tests/cpython/cpython_harness.py plain test_descr
    python tests/cpython/cpython_harness.py compiled test_descr

Output: {"module", "mode", "outcomes": {test_id: outcome}, "seconds",
"wrapped": methods wrapped, "stats": wick's counters (compiled mode)}.
Outcomes: pass, fail, error, skip, xfail, xpass. test_cpython_suite.py runs
both modes in separate processes and compares them.
"""
import importlib
import io
import json
import sys
import time
import unittest


class Recorder(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}

    def _set(self, test, outcome):
        tid = test.id()
        # a subtest failure marks its test failed; a pass never overrides it
        if self.outcomes.get(tid) in ("fail", "error") and outcome == "pass":
            return
        self.outcomes[tid] = outcome

    def addSuccess(self, test):
        super().addSuccess(test)
        self._set(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._set(test, "fail")

    def addError(self, test, err):
        super().addError(test, err)
        self._set(test, "error")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._set(test, "skip")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._set(test, "xfail")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._set(test, "xpass")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self._set(test, "fail" if failed else "error")


def iter_tests(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from iter_tests(t)
        else:
            yield t


def wrap_test_methods(suite, compile_fn, compiled_type):
    """Replaces every test method on its class by compile_fn(method); returns how many."""
    n = 0
    for t in iter_tests(suite):
        name = getattr(t, "_testMethodName", "")
        if not name.startswith("test"):
            continue
        cls = type(t)
        for klass in cls.__mro__:  # wrap where it is defined, once
            if name in vars(klass):
                fn = vars(klass)[name]
                if callable(fn) and not isinstance(fn, (compiled_type, staticmethod, classmethod)):
                    setattr(klass, name, compile_fn(fn))
                    n += 1
                break
    return n


def main(mode, module_name):
    # both modes import wick (and so torch, which patches a few stdlib
    # functions such as inspect.getfile): only the compiling differs
    import wick

    mod = importlib.import_module(f"test.{module_name}")
    suite = unittest.TestLoader().loadTestsFromModule(mod)
    wrapped = 0
    if mode == "compiled":
        wrapped = wrap_test_methods(suite, wick.compile, wick._C.CompiledFunction)
    stream = io.StringIO()
    runner = unittest.TextTestRunner(stream=stream, resultclass=Recorder, verbosity=0)
    t0 = time.perf_counter()
    result = runner.run(suite)
    seconds = time.perf_counter() - t0
    out = {"module": module_name, "mode": mode, "outcomes": result.outcomes, "seconds": seconds,
           "wrapped": wrapped}
    problems = {}
    for test, tb in result.failures + result.errors:
        problems[test.id()] = tb[-2000:]
    out["problems"] = problems
    if mode == "compiled":
        st = wick.stats()
        entries = wick._entries(wick._compiled_codes)
        out["stats"] = {
            "graphs": st["graphs"],
            "entries": st["entries"],
            "compiled_entries": sum(1 for e in entries if not e.get("eager")),
            "eager_entries": sum(1 for e in entries if e.get("eager")),
            # frames compiled in parts: entries that made a graph break
            "break_entries": sum(1 for e in entries if e.get("breaks")),
            "breaks": sum(len(e.get("breaks") or ()) for e in entries),
            "hook": st["hook"],
        }
    sys.stdout.flush()
    print("\n@@WICK-CPYTHON@@" + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
