#!/usr/bin/env bash
# Builds wick._C for every CPython 3.11 / 3.12 / 3.13 that pyenv has, and runs
# the torch-free tests of the bytecode layer and the frame hook on each.
#
#   bash tests/run_pyversions.sh            all interpreters found
#   PYVERSIONS="3.12" bash tests/run_pyversions.sh    only those minors
#
# Each interpreter gets a venv .venv-3.X (pytest + setuptools) and a build in
# build/py3.X/{lib,tmp}; the tests import wick from build/py3.X/lib, which holds
# a copy of the wick package plus that interpreter's _C extension.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
PYENV_ROOT=${PYENV_ROOT:-/root/.pyenv}
WANT=${PYVERSIONS:-"3.11 3.12 3.13"}
TESTS=("$ROOT/tests/capture/test_bytecode.py" "$ROOT/tests/capture/test_hook.py")

declare -a SUMMARY
STATUS=0
FOUND=0
for minor in $WANT; do
    # newest patch release of this minor
    pydir=$(ls -d "$PYENV_ROOT"/versions/"$minor".* 2>/dev/null | sort -V | tail -n 1)
    [ -n "$pydir" ] && [ -x "$pydir/bin/python" ] || continue
    FOUND=$((FOUND + 1))
    ver=$(basename "$pydir")
    echo "=== CPython $ver ($pydir)"
    venv="$ROOT/.venv-$minor"
    build="$ROOT/build/py$minor"
    log="$build/pyversions.log"
    mkdir -p "$build"
    if [ ! -x "$venv/bin/python" ]; then
        "$pydir/bin/python" -m venv "$venv" || { SUMMARY+=("$ver: FAIL (venv)"); STATUS=1; continue; }
    fi
    if ! "$venv/bin/python" -c "import pytest, setuptools" 2>/dev/null; then
        "$venv/bin/python" -m pip install -q pytest setuptools ||
            { SUMMARY+=("$ver: FAIL (pip install pytest setuptools)"); STATUS=1; continue; }
    fi
    rm -rf "$build/lib"
    if ! "$venv/bin/python" setup.py -q build_ext --build-lib "$build/lib" --build-temp "$build/tmp" \
        >"$log" 2>&1; then
        tail -n 30 "$log"
        SUMMARY+=("$ver: FAIL (build, see $log)")
        STATUS=1
        continue
    fi
    # the package's Python files next to the freshly built extension
    (cd "$ROOT" && find wick -name '*.py' -not -path '*/__pycache__/*' -print0 |
        while IFS= read -r -d '' f; do mkdir -p "$build/lib/$(dirname "$f")"; cp "$f" "$build/lib/$f"; done)
    # run from the build dir so that the source checkout's wick/ (which has no
    # _C for this interpreter) is not on sys.path
    if (cd "$build" && PYTHONPATH="$build/lib" "$venv/bin/python" -m pytest -p no:cacheprovider -q \
        --rootdir "$ROOT" "${TESTS[@]}"); then
        SUMMARY+=("$ver: ok")
    else
        SUMMARY+=("$ver: FAIL (tests)")
        STATUS=1
    fi
done

echo
echo "=== summary"
if [ "$FOUND" -eq 0 ]; then
    echo "no CPython among: $WANT"
    exit 1
fi
for line in "${SUMMARY[@]}"; do echo "  $line"; done
exit $STATUS
