"""CPython's own test package with every test method compiled by wick: a
test that passes plainly must still pass (and an expected failure must still
be an expected failure, a skip a skip).

Each module runs twice in fresh processes (cpython_harness.py): plainly,
then with every test method wrapped by wick.compile. The default run takes
DEFAULT_MODULES (well under two minutes on two cores); WICK_CPYTHON_FULL=1
runs FULL_MODULES, and WICK_CPYTHON_MODULES="test_a test_b" any list.
Skipped when the interpreter has no test package (`import test.test_descr`).
"""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HARNESS = os.path.join(HERE, "cpython_harness.py")

DEFAULT_MODULES = ["test_descr", "test_scope", "test_with", "test_keywordonlyarg", "test_raise"]
FULL_MODULES = DEFAULT_MODULES + [
    "test_class", "test_contextlib", "test_exceptions", "test_opcodes", "test_dict", "test_list",
    "test_tuple", "test_set", "test_functools", "test_itertools", "test_operator", "test_math",
    "test_bool", "test_int", "test_float", "test_enum", "test_dataclasses", "test_property",
    "test_super", "test_collections", "test_iter", "test_types", "test_inspect", "test_sys_settrace",
    "test_traceback", "test_frame", "test_call", "test_named_expressions", "test_patma",
    "test_weakref", "test_copy", "test_json", "test_sort", "test_decorators", "test_augassign",
    "test_positional_only_arg", "test_fstring", "test_generators",
    "test_coroutines", "test_exception_group", "test_except_star", "test_richcmp", "test_abc",
    "test_userdict", "test_userlist", "test_heapq", "test_bisect", "test_fractions", "test_struct",
    "test_deque", "test_ordered_dict", "test_defaultdict", "test_builtin", "test_slice",
    "test_range", "test_enumerate", "test_funcattrs", "test_dynamicclassattribute",
    "test_global", "test_string", "test_compile", "test_typing", "test_statistics",
]


def has_test_package():
    try:
        import test.test_descr  # noqa: F401
    except Exception:
        return False
    return True


pytestmark = pytest.mark.skipif(not has_test_package(), reason="this Python ships no Lib/test")


def modules():
    if os.environ.get("WICK_CPYTHON_MODULES"):
        return os.environ["WICK_CPYTHON_MODULES"].split()
    return FULL_MODULES if os.environ.get("WICK_CPYTHON_FULL") == "1" else DEFAULT_MODULES


def run(mode, module, timeout=600):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in sys.path if p])
    env.pop("WICK_LOG", None)
    r = subprocess.run([sys.executable, HARNESS, mode, module], capture_output=True, text=True,
                       env=env, timeout=timeout, cwd=ROOT)
    marker = "@@WICK-CPYTHON@@"
    if marker not in r.stdout:
        return None, (r.stdout[-3000:] + r.stderr[-3000:])
    return json.loads(r.stdout.rsplit(marker, 1)[1]), None


def compare(plain, compiled):
    """Tests whose outcome changed, for tests that passed, xfailed or skipped plainly."""
    changed = {}
    for tid, outcome in plain["outcomes"].items():
        if outcome not in ("pass", "xfail", "skip"):
            continue
        got = compiled["outcomes"].get(tid, "missing")
        if got != outcome:
            changed[tid] = (outcome, got, compiled["problems"].get(tid, "")[-800:])
    return changed


@pytest.mark.parametrize("module", modules())
def test_module_still_passes_with_every_test_method_compiled(module):
    plain, err = run("plain", module)
    if plain is None:
        pytest.skip(f"test.{module} does not run plainly here: {err[-300:]}")
    compiled, err = run("compiled", module)
    assert compiled is not None, err
    changed = compare(plain, compiled)
    assert not changed, "\n".join(f"{t}: {a} -> {b}\n{tb}" for t, (a, b, tb) in changed.items())
    if compiled["wrapped"] == 0:
        pytest.skip(f"test.{module} has no test methods to compile (doctests only)")
    st = compiled["stats"]
    n_pass = sum(o == "pass" for o in plain["outcomes"].values())
    # one line per module for the report (pytest -s shows it)
    print(f"\n[cpython] {module}: {len(plain['outcomes'])} tests, {n_pass} pass plainly and compiled; "
          f"{compiled['wrapped']} methods wrapped, entries {st['entries']} "
          f"({st['compiled_entries']} compiled, {st['eager_entries']} eager, {st.get('break_entries', 0)} "
          f"in parts with {st.get('breaks', 0)} graph breaks), graphs {st['graphs']}; "
          f"{plain['seconds']:.1f}s plain, {compiled['seconds']:.1f}s compiled")
