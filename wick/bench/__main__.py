"""``python -m wick.bench`` / ``wick-bench``: compare eager, inductor and wick on model suites.

Examples:
    python -m wick.bench                                  # default: micro + huggingface, CPU
    python -m wick.bench --suites timm --device cuda --chunk 1/3
    python -m wick.bench --suites toy --compilers fake_wrong,fake_hang --fake-compilers

Each row (model x mode x precision x compiler) runs in its own process with a
time limit (worker.py). Results go to bench/results/<date>-<machine>/ (or
--out): results.json, report.md, speedup.png, compile_time.png.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):  # run by path (python wick/bench/__main__.py): works even if wick's C core does not import
    import importlib.util

    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]  # no sibling shadows a library
    _spec = importlib.util.spec_from_file_location("wick_bench", os.path.join(_here, "__init__.py"),
                                                   submodule_search_locations=[_here])
    _pkg = importlib.util.module_from_spec(_spec)
    sys.modules["wick_bench"] = _pkg
    _spec.loader.exec_module(_pkg)
    __package__ = "wick_bench"

from . import compilers as C  # noqa: E402
from . import models as M  # noqa: E402
from . import report, sysinfo  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_TOL = {"inference": 1e-3, "training": 1e-2}
PRECISION_ALIASES = {"fp32": "float32", "float32": "float32", "bf16": "bf16", "bfloat16": "bf16",
                     "fp16": "fp16", "float16": "fp16", "amp": "bf16"}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="wick-bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suites", help="comma list: micro, huggingface, timm, torchvision, toy "
                   "(default: micro,huggingface on CPU; micro,huggingface,timm,torchvision on CUDA)")
    p.add_argument("--compilers", help="comma list of: " + ", ".join(C.COMPILERS)
                   + f" (default CPU: {','.join(C.DEFAULT_CPU)}; CUDA: {','.join(C.DEFAULT_CUDA)})")
    p.add_argument("--modes", default="inference,training", help="inference,training")
    p.add_argument("--precisions", default="float32", help="float32,bf16,fp16 (autocast); amp = bf16")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if available")
    p.add_argument("--models", help="comma list of model names (or substrings) to keep")
    p.add_argument("--batch-size", type=int, help="override every model's batch size")
    p.add_argument("--chunk", help="i/n: run the i-th of n parts of the model list (1-based)")
    p.add_argument("--timeout", type=float, help="per-row time limit in seconds (default 240)")
    p.add_argument("--budget", type=float, help="total seconds; rows not started in time are 'skipped' "
                   "(default on CPU: 840, so the default run ends within 15 minutes; 0 or less: none)")
    p.add_argument("--repeats", type=int, default=10, help="interleaved timing repeats (default 10)")
    p.add_argument("--sample-s", type=float, default=0.05, help="target seconds per timing sample")
    p.add_argument("--threads", type=int, help="torch.set_num_threads in each row")
    p.add_argument("--out", help="output folder (default bench/results/<date>-<machine>[-chunk])")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--keep-tmp", action="store_true", help="keep each row's temp dir (caches, log)")
    p.add_argument("--fake-compilers", action="store_true", help="register the test-only fake compilers")
    p.add_argument("--list", action="store_true", help="print the rows that would run, then exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def _split(s):
    return [x.strip() for x in s.split(",") if x.strip()] if s else []


def plan(args, device):
    """The list of rows to run, and the suites skipped with their reasons."""
    suites = _split(args.suites) or (["micro", "huggingface"] if device == "cpu"
                                     else ["micro", "huggingface", "timm", "torchvision"])
    comps = _split(args.compilers) or list(C.DEFAULT_CUDA if device == "cuda" else C.DEFAULT_CPU)
    reg = C.registry()
    for c in comps:
        if c not in reg:
            raise SystemExit(f"wick-bench: unknown compiler {c!r}; known: {', '.join(sorted(reg))}")
    modes = _split(args.modes)
    for m in modes:
        if m not in DEFAULT_TOL:
            raise SystemExit(f"wick-bench: unknown mode {m!r} (inference, training)")
    precs = []
    for p in _split(args.precisions):
        if p not in PRECISION_ALIASES:
            raise SystemExit(f"wick-bench: unknown precision {p!r} (float32, bf16, fp16)")
        if PRECISION_ALIASES[p] not in precs:
            precs.append(PRECISION_ALIASES[p])
    keep = _split(args.models)
    skipped, specs = [], []
    for s in suites:
        why = M.suite_missing_reason(s)
        if why is None and not (M.SUITES_DIR / f"{s}.txt").exists():
            why = f"no model list {M.SUITES_DIR / (s + '.txt')}"
        if why:
            skipped.append({"suite": s, "reason": why})
            continue
        for spec in M.load_suite(s):
            if keep:  # named models run even where they are gpu_only by default
                if not any(k == spec.name or k in spec.name for k in keep):
                    continue
            elif spec.gpu_only and device != "cuda":
                continue
            specs.append(spec)
    if args.chunk:
        i, n = (int(x) for x in args.chunk.split("/"))
        if not 1 <= i <= n:
            raise SystemExit("wick-bench: --chunk i/n needs 1 <= i <= n")
        specs = specs[i - 1::n]
    jobs = []
    for spec in specs:
        for mode in modes:
            if mode not in spec.modes:
                continue
            for prec in precs:
                for comp in comps:
                    jobs.append({"spec": spec, "mode": mode, "precision": prec, "compiler": comp})
    return jobs, skipped, {"suites": suites, "compilers": comps, "modes": modes, "precisions": precs}


def _base_row(job, device, args):
    spec = job["spec"]
    return {"suite": spec.suite, "model": spec.name,
            "batch": args.batch_size or spec.batch_for(device), "device": device, "mode": job["mode"],
            "precision": job["precision"], "compiler": job["compiler"],
            "tol": spec.tol.get(job["mode"], DEFAULT_TOL[job["mode"]])}


def _signame(rc):
    try:
        return signal.Signals(-rc).name
    except (ValueError, AttributeError):
        return f"signal {-rc}"


def run_row(job, device, args, timeout):
    """Run one row in a fresh process with fresh cache dirs; return its row dict."""
    row = _base_row(job, device, args)
    comp = C.get(job["compiler"])
    why = comp.unavailable(device)
    if why:
        row.update(status="not_supported", detail=why)
        return row
    tmp = tempfile.mkdtemp(prefix="wick-bench-")
    spec = job["spec"]
    wspec = dict(row, model={"suite": spec.suite, "name": spec.name, "batch": spec.batch,
                             "cuda_batch": spec.cuda_batch, "modes": list(spec.modes), "tol": spec.tol,
                             "gpu_only": spec.gpu_only, "options": spec.options},
                 result_path=os.path.join(tmp, "result.json"), repeats=args.repeats, sample_s=args.sample_s,
                 threads=args.threads)
    spec_path = os.path.join(tmp, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(wspec, f)
    env = dict(os.environ)
    for var, sub in (("WICK_CACHE_DIR", "wick-cache"), ("TORCHINDUCTOR_CACHE_DIR", "inductor-cache"),
                     ("TRITON_CACHE_DIR", "triton-cache")):
        env[var] = os.path.join(tmp, sub)
    env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    if device == "cuda":
        env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS for the accuracy phases
    log_path = os.path.join(tmp, "log.txt")
    t0 = time.perf_counter()
    timed_out = False
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, WORKER, spec_path], stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the row's own process group: the worker and its children
            except ProcessLookupError:
                pass
            rc = proc.wait()
    wall = time.perf_counter() - t0
    res = {}
    try:
        with open(wspec["result_path"]) as f:
            res = json.load(f)
    except (OSError, ValueError):
        pass
    try:
        with open(log_path, errors="replace") as f:
            log_tail = f.read()[-3000:]
    except OSError:
        log_tail = ""
    row.update({k: v for k, v in res.items() if k not in ("final",)})
    phase = row["phase"] = res.get("phase", "startup")
    if timed_out:
        row.update(status="timeout", detail=f"killed after {timeout:.0f} s limit, in phase '{phase}'",
                   speedup=None)
    elif not res.get("final"):
        how = f"killed by {_signame(rc)}" if rc < 0 else f"exited with code {rc}"
        last = [ln for ln in log_tail.strip().splitlines() if ln.strip()][-1:] or [""]
        row.update(status="crash", detail=f"process {how} in phase '{phase}'" + (f": {last[0][:200]}" if last[0] else ""),
                   speedup=None)
    if row.get("status") != "pass":
        row["speedup"] = None
        row["log_tail"] = log_tail[-1500:]
    row["wall_s"] = round(wall, 2)
    if args.keep_tmp:
        row["tmp_dir"] = tmp
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return row


class Progress:
    def __init__(self, total, quiet=False):
        self.total, self.done, self.t0 = total, 0, time.time()
        self.quiet = quiet
        self.tty = sys.stderr.isatty()

    def _bar(self):
        w = 24
        k = int(w * self.done / max(1, self.total))
        el = time.time() - self.t0
        return f"[{'#' * k}{'.' * (w - k)}] {self.done}/{self.total} {int(el // 60):02d}:{int(el % 60):02d}"

    def start(self, row):
        if self.quiet:
            return
        msg = f"{self._bar()} {row['model']} {row['mode']} {row['precision']} {row['compiler']} ..."
        if self.tty:
            sys.stderr.write("\r\033[K" + msg)
        else:
            sys.stderr.write(msg + "\n")
        sys.stderr.flush()

    def finish(self, row):
        self.done += 1
        if self.quiet:
            return
        st = row["status"]
        extra = f" {row['speedup']:.2f}x" if st == "pass" and row.get("speedup") else ""
        if st != "pass" and row.get("detail"):
            extra = f" ({row['detail'][:110]})"
        msg = (f"{self._bar()} {row['model']} {row['mode']} {row['precision']} {row['compiler']}: "
               f"{st}{extra} [{row.get('wall_s', 0):.0f}s]")
        sys.stderr.write(("\r\033[K" if self.tty else "") + msg + "\n")
        sys.stderr.flush()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.fake_compilers:
        os.environ["WICK_BENCH_FAKES"] = "1"
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("wick-bench: --device cuda but torch sees no GPU")
    timeout = args.timeout or (240.0 if device == "cuda" else 240.0)
    if args.budget is None and device == "cpu":
        args.budget = 840.0
    elif args.budget is not None and args.budget < 0:
        args.budget = None
    jobs, skipped, cfg = plan(args, device)
    if args.list:
        for j in jobs:
            r = _base_row(j, device, args)
            print(f"{r['suite']:12} {r['model']:30} b={r['batch']:<4} {r['mode']:9} {r['precision']:7} {r['compiler']}")
        for s in skipped:
            print(f"skipped suite {s['suite']}: {s['reason']}")
        return 0
    info = sysinfo.machine(device)
    tag = sysinfo.machine_tag(device, info)
    stamp = sysinfo.stamp()
    chunk_tag = ("-chunk" + args.chunk.replace("/", "of")) if args.chunk else ""
    outdir = args.out or os.path.join(REPO_ROOT, "bench", "results", f"{stamp}-{tag}{chunk_tag}")
    meta = {"stamp": stamp, "machine_tag": tag, "command": sysinfo.command_line("wick.bench" if __package__ == "wick.bench" else None), "argv": sys.argv,
            "machine": info, "versions": sysinfo.versions(), "outdir": outdir}
    for s in skipped:
        print(f"wick-bench: skipping suite {s['suite']}: {s['reason']}", file=sys.stderr)
    print(f"wick-bench: {len(jobs)} rows on {device} ({info.get('gpu') or info.get('cpu')}), "
          f"limit {timeout:.0f} s a row -> {outdir}", file=sys.stderr)
    rows = []
    prog = Progress(len(jobs), args.quiet)
    t0 = time.time()
    for job in jobs:
        base = _base_row(job, device, args)
        elapsed = time.time() - t0
        if args.budget is not None and elapsed >= args.budget:
            base.update(status="skipped", detail=f"run budget of {args.budget:.0f} s spent before this row")
            rows.append(base)
            prog.finish(base)
            continue
        limit = timeout if args.budget is None else max(5.0, min(timeout, args.budget - elapsed))
        prog.start(base)
        row = run_row(job, device, args, limit)
        rows.append(row)
        prog.finish(row)
    meta["wall_s"] = time.time() - t0
    summary = report.summarize(rows)
    cfg.update(chunk=args.chunk, timeout_s=timeout, repeats=args.repeats, device=device)
    result = {"meta": meta, "config": cfg, "skipped_suites": skipped, "rows": rows, "summary": summary}
    files = report.write_outputs(result, outdir, make_plots=not args.no_plots)
    print()
    print(report.terminal_table(rows, summary))
    print()
    for s in skipped:
        print(f"skipped suite {s['suite']}: {s['reason']}")
    print(f"results: {outdir}/ ({', '.join([files['json'], files['markdown'], *files['plots']])})"
          + (f"; {result['plot_note']}" if result.get("plot_note") else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
