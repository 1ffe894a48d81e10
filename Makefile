# wick — `make demo` and `make test` work from a fresh clone: they create a
# virtual environment in .venv, install PyTorch 2.13.0 (CPU) into it, build
# wick's C core, and run.
#
# On a machine with torch already installed (the H200 box, no network):
#   make test VENV= PYTHON=python3      uses that interpreter as it is.

PYTHON ?= python3
VENV ?= .venv
ifeq ($(VENV),)
PY := $(PYTHON)
STAMP := .system-deps.stamp
else
PY := $(VENV)/bin/python
STAMP := $(VENV)/.deps.stamp
endif

CC ?= cc
WARN := -Wall -Wextra -Werror -Wno-missing-field-initializers
SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# Python-free layers: these build into C unit tests with no interpreter.
CORE_SRC := $(wildcard csrc/common/*.c csrc/graph/*.c csrc/lower/*.c csrc/schedule/*.c csrc/codegen/*.c) csrc/runtime/cc.c
CORE_HDR := $(wildcard csrc/*/*.h csrc/*/*.def)
CTESTS := $(patsubst tests/c/%.c,build/ctest/%,$(wildcard tests/c/test_*.c))

.PHONY: all build demo test ctest pytest test-pyversions bench clean

all: build

$(STAMP):
ifneq ($(VENV),)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0 numpy pytest pytest-xdist setuptools wheel transformers==5.24.0 kernels==0.18.3 expecttest triton==3.9.0
endif
	$(PY) -c "import torch, pytest, setuptools; print('torch', torch.__version__)"
	touch $@

build: $(STAMP)
	$(PY) setup.py -q build_ext --inplace

demo: build
	$(PY) examples/demo.py

# C unit tests of the Python-free layers, under AddressSanitizer and UBSan.
build/ctest/%: tests/c/%.c $(CORE_SRC) $(CORE_HDR) $(wildcard tests/c/*.h)
	@mkdir -p build/ctest
	$(CC) -std=gnu11 -g -O1 $(WARN) $(SAN) -Icsrc -o $@ $< $(CORE_SRC) -ldl -lm

ctest: $(CTESTS)
	@set -e; for t in $(CTESTS); do echo "== $$t"; ASAN_OPTIONS=detect_leaks=1 $$t; done

# Two workers where pytest-xdist is installed (the venv make creates has it):
# the suite is CPU-bound, and one worker leaves a core idle while it waits on
# the C compiler. PYTEST_WORKERS=0 runs it in one process. The slowest tests
# are listed at the end (--durations), to keep the suite's time in view.
PYTEST_WORKERS ?= 2
pytest: build
	$(PY) -m pytest tests --durations=25 $$($(PY) -c "import xdist" 2>/dev/null && echo "-n $(PYTEST_WORKERS)")

# The torch-free bytecode layer on every CPython that pyenv has (3.11+).
test-pyversions:
	@bash tests/run_pyversions.sh

test: build ctest pytest test-pyversions

bench: build
	$(PY) bench/micro.py

clean:
	rm -rf build wick/_C*.so .system-deps.stamp
