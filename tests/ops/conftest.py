"""The compiler tests' shared session setup lives in tests/compiler_session.py;
opdb_sweep.py (the sweep itself) sits beside these tests."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from compiler_session import _wick_cache_dir  # noqa: E402,F401  (autouse session fixture)
