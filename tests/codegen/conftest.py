"""The compiler tests' shared session setup lives in tests/compiler_session.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from compiler_session import _wick_cache_dir  # noqa: E402,F401  (autouse session fixture)
