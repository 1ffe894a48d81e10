"""Versions, machine and command line, recorded with every result."""
from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run(cmd, cwd=None):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=cwd)
        return r.stdout.strip() if r.returncode == 0 else ""
    except Exception:
        return ""


def _version(pkg):
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def wick_git_rev() -> str:
    if os.environ.get("WICK_GIT_REV"):
        return os.environ["WICK_GIT_REV"]
    rev = _run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO_ROOT)
    if not rev:
        return "unknown"
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT)
    return rev + ("-dirty" if dirty else "")


def cpu_model() -> str:
    out = _run(["lscpu"])
    m = re.search(r"^Model name:\s*(.+)$", out, re.M)
    if m:
        return m.group(1).strip()
    return platform.processor() or platform.machine()


def versions() -> dict:
    import torch

    v = {"python": platform.python_version(), "torch": torch.__version__,
         "cuda": getattr(torch.version, "cuda", None), "wick_git": wick_git_rev(),
         "gcc": (_run([os.environ.get("CC", "cc"), "--version"]).splitlines() or [""])[0]}
    for pkg in ("transformers", "timm", "torchvision", "triton", "numpy", "matplotlib"):
        v[pkg] = _version(pkg)
    return v


def machine(device: str) -> dict:
    m = {"hostname": platform.node(), "platform": platform.platform(), "cpu": cpu_model(),
         "cores": os.cpu_count(), "device": device}
    try:
        with open("/proc/meminfo") as f:
            kb = int(re.search(r"MemTotal:\s*(\d+)", f.read()).group(1))
        m["mem_gib"] = round(kb / 2**20, 1)
    except Exception:
        pass
    if device == "cuda":
        import torch

        m["gpu"] = torch.cuda.get_device_name(0)
        m["gpu_count"] = torch.cuda.device_count()
        m["gpu_mem_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return m


def machine_tag(device: str, info: dict) -> str:
    if device == "cuda" and info.get("gpu"):
        tag = info["gpu"].replace("NVIDIA", "").strip()
    else:
        tag = f"cpu{info.get('cores')}"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", tag).strip("-").lower() or "machine"


def command_line(module: str | None = None) -> str:
    """The command as typed: ``python -m wick.bench ...`` when run as a module, else the script path."""
    head = [os.path.basename(sys.executable)] + (["-m", module] if module else [sys.argv[0]])
    return " ".join(shlex.quote(a) for a in head + sys.argv[1:])


def stamp() -> str:
    return datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
