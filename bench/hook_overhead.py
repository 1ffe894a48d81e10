"""Per-call overhead of CompiledFunction + hook + cache hit vs a direct call."""
import sys, timeit
from wick import _C

def f(a, b):
    return a

def f_new(a, b):
    return a

_C._set_test_compiler(lambda code, args: (f_new.__code__, None) if code is f.__code__ else None)
cf = _C.CompiledFunction(f, {})
cf(1, 2)
_C._set_test_compiler(lambda code, args: None)
def g(a, b):
    return a
cg = _C.CompiledFunction(g, {})   # eager entry (cache hit, run original frame)
cg(1, 2)

N = 300_000
def best(stmt):
    return min(timeit.repeat(stmt, globals=globals(), number=N, repeat=21)) / N * 1e9

direct = best("f(1, 2)")
hit_new = best("cf(1, 2)")
hit_eager = best("cg(1, 2)")
_C.set_enabled(True)
enabled_direct = best("f(1, 2)")      # hook on: one marked-code lookup + shadow
unmarked = best("len(())")
def h(a, b): return a
unmarked_py = best("h(1, 2)")         # unmarked Python frame with the hook installed
_C.set_enabled(False)
unmarked_py_off = best("h(1, 2)")
print(f"python {sys.version.split()[0]}")
print(f"direct call f(1,2):                     {direct:7.1f} ns")
print(f"CompiledFunction, hit, transformed code: {hit_new:7.1f} ns  (+{hit_new-direct:.1f})")
print(f"CompiledFunction, hit, eager entry:      {hit_eager:7.1f} ns  (+{hit_eager-direct:.1f})")
print(f"hook enabled, f(1,2) hit, no wrapper:    {enabled_direct:7.1f} ns  (+{enabled_direct-direct:.1f})")
print(f"unmarked py frame, hook installed:       {unmarked_py:7.1f} ns  vs {unmarked_py_off:.1f} ns without")
print(_C.hook_stats())
