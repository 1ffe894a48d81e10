"""tests/ops/opdb_sweep.py (samples as functions of their tensors) and the
compiler tests' session cache, for the autodiff tests."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "ops"))
from compiler_session import _wick_cache_dir  # noqa: E402,F401  (autouse session fixture)
