"""Builds wick and its C core (wick._C) like any Python package with a C extension.

The extension is built against the running interpreter's own headers (3.11 or
3.12); it never links libtorch, so it needs no torch at build time.
"""
import glob
import os
import sysconfig

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def c_sources():
    files = sorted(glob.glob(os.path.join("csrc", "**", "*.c"), recursive=True))
    return [f for f in files if "/tests/" not in f]


WARNINGS = ["-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers"]
extra = os.environ.get("WICK_BUILD_CFLAGS", "").split()

setup(
    ext_modules=[
        Extension(
            "wick._C",
            sources=c_sources(),
            include_dirs=[os.path.join(HERE, "csrc")],
            extra_compile_args=["-std=gnu11", "-O2", "-fvisibility=hidden", *WARNINGS, *extra],
            extra_link_args=["-ldl", *extra],
            depends=glob.glob(os.path.join("csrc", "**", "*.h"), recursive=True)
            + glob.glob(os.path.join("csrc", "**", "*.def"), recursive=True),
        )
    ],
)
