"""The Triton backend's one piece of Python: Triton's compiler is Python.

wick's C runtime (csrc/runtime/triton_rt.c) calls these functions to
  * write a generated module into the cache (``write_module``),
  * compile one kernel of it in one config to a cubin (``compile_kernel``),
    cached on disk with the same integrity rules as the CPU kernels' shared
    objects: content-addressed names, written to a temporary file and renamed
    into place, each artifact checked against a SHA-256 recorded beside it
    (a mismatch is recompiled, never loaded);
  * compile the autotuning candidates a first call does not need in the
    background (``compile_later``; the runtime tunes once they are in, one
    timing per kernel identity: ``tune_key``), and
  * launch a kernel through Triton's own Python launcher under
    TRITON_INTERPRET=1 (``launch_interpret``: CPU tensors, tests).
The C runtime loads cubins and launches them itself through the CUDA driver
API; no Python runs per kernel launch on a GPU.

``libdevice`` is what generated kernels call for libm-like functions: Triton's
own libdevice when compiling, and numpy implementations under the
interpreter (which cannot call external device functions).
"""
import collections
import hashlib
import importlib.util
import json
import os
import re
import sys
import threading
import time

_modules = {}


def _atomic_write(path, data):
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        f = open(tmp, "wb")
    except FileNotFoundError:  # the cache folder was removed while the process ran (_dir made it once)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        f = open(tmp, "wb")
    with f:
        f.write(data)
    os.replace(tmp, path)


def _sha(data):
    return hashlib.sha256(data).hexdigest()


_made_dirs = set()


def _dir(cache_dir):
    d = os.path.join(cache_dir, "triton")
    if d not in _made_dirs:  # a stat per kernel load adds up over thousands of kernels
        os.makedirs(d, exist_ok=True)
        _made_dirs.add(d)
    return d


def write_module(cache_dir, source):
    """The path of the module file holding `source` (written if absent or corrupt)."""
    data = source.encode()
    h = _sha(data)
    path = os.path.join(_dir(cache_dir), f"wick_{h[:32]}.py")
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return path
    except OSError:
        pass
    _atomic_write(path, data)
    return path


def _interpreting():
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def load_module(path):
    """Imports the module at `path` (once per process and mode: interpreted
    kernels and compiled ones see different ``libdevice``)."""
    key = (path, _interpreting())
    mod = _modules.get(key)
    if mod is None:
        name = "wick_triton_" + os.path.basename(path)[:-3] + ("_interp" if key[1] else "")
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # triton.jit reads the source through the module
        spec.loader.exec_module(mod)
        _modules[key] = mod
    return mod


# a graph's kernel in a generated module (the helpers before it are named wk_*)
_KERNEL_DEF = re.compile(r"^@triton\.jit\ndef (\w+_k\d+(?:_final)?)\(", re.M)
_MODULE_COMMENT = re.compile(r"^#", re.M)  # module-level comment lines: no kernel's text
# per module path: {kernel name: (identity, asserts)}, or None when the module
# cannot be read. A module's name is its text's hash, so an entry never goes
# stale; one scan of the text serves every kernel of it (a model's backward
# module holds hundreds, and each is asked for by every config of it).
_kernel_index = {}


def _index_module(path):
    index = _kernel_index.get(path, False)
    if index is not False:
        return index
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None  # not remembered: the file may appear (a failed write is redone)
    index = {}
    defs = list(_KERNEL_DEF.finditer(text))
    head = text[:defs[0].start()] if defs else ""
    for i, m in enumerate(defs):
        name = m.group(1)
        body = text[m.start():defs[i + 1].start() if i + 1 < len(defs) else len(text)]
        tail = _MODULE_COMMENT.search(body)  # a step's summary, after its last kernel
        if tail:
            body = body[:tail.start()]
        identity = ["kernel", _sha((head + body.replace(name, "WK_KERNEL")).encode())]
        index[name] = (identity, "tl.device_assert(" in body)
    _kernel_index[path] = index
    return index


def kernel_identity(path, src_hash, name):
    """What kernel `name`'s machine code depends on: the module's helpers and
    the kernel's own text with its name taken out. Kernels that differ only by
    name (a model's repeated layers: the same block in every layer) then share
    one compile and one cubin, whose symbol is the first one's name. A module
    whose layout is not the generator's falls back to (module, name)."""
    entry = (_index_module(path) or {}).get(name)
    return list(entry[0]) if entry is not None else [src_hash, name]


def _has_asserts(path, name):
    """Whether kernel `name` asserts its indices (indirect loads); unknown
    text counts as yes (asserts on cost little, off would drop a check)."""
    entry = (_index_module(path) or {}).get(name)
    return entry is None or entry[1]


def tune_key(path, src_hash, name, param_types, device_name):
    """What names kernel `name`'s autotuning choice (csrc/runtime/triton_rt.c
    tune_path): its identity, parameter types and device. The candidate
    configs follow from the kernel's text (its sizes are in it), so kernels
    of one identity share one timing: a model's twelve layers tune once."""
    import triton

    return json.dumps([*kernel_identity(path, src_hash, name), param_types, device_name, triton.__version__])


def _cache_key(path, src_hash, name, param_types, has_r, xblock, rblock, num_warps, arch, aligned):
    """What a compiled kernel's cache entry is named by and must record."""
    import triton

    return json.dumps([*kernel_identity(path, src_hash, name), param_types, has_r, xblock, rblock, num_warps, arch,
                       aligned, _has_asserts(path, name), triton.__version__])


def compile_kernel(cache_dir, path, src_hash, name, param_types, has_r, xblock, rblock, num_warps, arch, aligned):
    """Compiles kernel `name` of the module at `path` for sm_<arch>.

    Returns (cubin bytes, kernel symbol, shared memory bytes, warps, number of
    kernel parameters in the cubin: the buffers plus Triton's scratch
    pointers)."""
    import triton

    key = _cache_key(path, src_hash, name, param_types, has_r, xblock, rblock, num_warps, arch, aligned)
    asserts = _has_asserts(path, name)
    h = _sha(key.encode())
    d = _dir(cache_dir)
    bin_path, meta_path = os.path.join(d, f"{h}.cubin"), os.path.join(d, f"{h}.json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        with open(bin_path, "rb") as f:
            cubin = f.read()
        if meta.get("key") == key and _sha(cubin) == meta.get("sha256"):
            return cubin, meta["name"], meta["shared"], meta["num_warps"], meta["nparams"]
    except (OSError, ValueError, KeyError):
        pass

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(load_module(path), name)
    arg_names = list(fn.arg_names)
    signature = {arg_names[i]: t for i, t in enumerate(param_types)}
    # constexprs keyed by argument position: accepted by every Triton 3.x
    constexprs = {(arg_names.index("XBLOCK"),): xblock}
    signature["XBLOCK"] = "constexpr"
    if has_r:
        signature["RBLOCK"] = "constexpr"
        constexprs[(arg_names.index("RBLOCK"),)] = rblock
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(param_types))} if aligned else {}
    src = ASTSource(fn, signature, constexprs, attrs)
    # a kernel with indirect loads asserts its indices in range (cgen_triton.c,
    # WK_LX_BOUND): Triton compiles device_assert in only with debug on, and
    # then, as eager's own indexing kernels, an out-of-range index is a
    # device-side assertion. Without overflow sanitising, which debug would
    # also add to every integer operation (inductor compiles its kernels the
    # same way).
    options = {"num_warps": num_warps, "debug": asserts, "sanitize_overflow": False}
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    md = compiled.metadata
    if getattr(md, "global_scratch_size", 0) or getattr(md, "profile_scratch_size", 0):
        raise RuntimeError(f"wick: Triton kernel {name} needs scratch memory, which wick does not provide")
    ptx = compiled.asm["ptx"]
    entry = ptx[ptx.index(".entry"):]
    nparams = entry[:entry.index(")")].count(".param")
    cubin = compiled.asm["cubin"]
    meta = {"key": key, "sha256": _sha(cubin), "name": md.name, "shared": md.shared, "num_warps": md.num_warps,
            "nparams": nparams}
    _atomic_write(bin_path, cubin)
    _atomic_write(meta_path, json.dumps(meta).encode())
    return cubin, md.name, md.shared, md.num_warps, nparams


def _compile_job(args):
    """One compile_batch job in a worker process: True when it compiled."""
    try:
        compile_kernel(*args)
        return True
    except Exception:  # noqa: BLE001 - reported by the sequential retry
        return False


# One record per job a compile process ran in this process's life: (kernel
# name, module path, worker pid, its batch's level when a process took it
# (FOREGROUND, SOON, BACKGROUND), the wall-clock times (time.time()) of the
# batch's start, of the job's taking (this process's clock, which orders the
# takes) and of its start and end in the compile process, whether it
# compiled, and the job's (param types, has_r, xblock, rblock, num_warps)).
# With each process's start and ready times (_workers.started, .ready) it
# tells what a cold first call waited for: the
# processes' start or one long kernel (bench/cold_compile.py reads it). The
# newest 10000 are kept.
job_log = collections.deque(maxlen=10000)


# A worker's first lines: this file loaded as wick._triton under a bare
# "wick" package, so that neither the worker nor the generated modules it
# imports (`from wick._triton import libdevice`) import wick's package, and
# with it torch: two seconds of each worker's start on the H200.
_WORKER_BOOT = """\
import importlib.util, sys, types
pkg = types.ModuleType("wick")
pkg.__path__ = []
sys.modules["wick"] = pkg
spec = importlib.util.spec_from_file_location("wick._triton", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
sys.modules["wick._triton"] = pkg._triton = mod
spec.loader.exec_module(mod)
mod._worker_main()
"""


# How urgently a batch's jobs are needed: a graph about to run waits on its
# FOREGROUND batch; a SOON batch holds the kernels of a graph that will run
# shortly (a training graph's backward, compiled while the forward runs); a
# BACKGROUND batch holds autotuning candidates. A compile process takes a
# job of a level only while no job of a more urgent level is waiting.
FOREGROUND, SOON, BACKGROUND = 0, 1, 2


class _Workers:
    """Compile worker processes: plain `python -c` children that import
    Triton once and compile jobs sent one JSON line at a time (no fork of a
    process holding CUDA state and threads, and no re-import of the user's
    main module, as multiprocessing's spawn would do). Started by the first
    graph compile for a GPU in a process (``start_workers``), so that their
    start overlaps the capture and AOTAutograd, and kept for the next
    batches.

    Triton names the entries of its own cache by a hash of its installation
    that reads all of libtriton (half a second of each process's start, and
    fifteen processes reading it at once take longer): this process computes
    it once, on a thread, and sends it to every process as its first line
    (Triton's own compile pool does the same)."""

    def __init__(self, n, arch=None):
        import subprocess

        cmd = [sys.executable, "-c", _WORKER_BOOT, os.path.abspath(__file__)]
        # this process's import path (Triton may have been found through an
        # entry added at run time), and the GPU the warm-up compiles for
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
                   WICK_TRITON_WARM_ARCH=str(arch or ""))
        self.started = time.time()
        self.procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                       env=env) for _ in range(n)]
        self.ready = {}  # pid -> when the process had imported Triton and warmed up (its first answer says)
        # a process serves one job at a time (its lock); jobs waiting, per level
        self.locks = {p.pid: threading.Lock() for p in self.procs}
        self.turn = threading.Condition()
        self.waiting = [0, 0, 0]
        self.key_sent = threading.Event()
        self.triton_key = None
        threading.Thread(target=self._send_triton_key, daemon=True, name="wick-triton-key").start()

    def _send_triton_key(self):
        try:
            self.triton_key = _installation_key()
        except Exception:  # noqa: BLE001 - each process then computes its own
            self.triton_key = None
        line = json.dumps({"triton_key": self.triton_key}) + "\n"
        for p in list(self.procs):
            try:
                with self.locks[p.pid]:
                    p.stdin.write(line)
                    p.stdin.flush()
            except OSError:
                pass  # a dead process: its first job finds it broken
        self.key_sent.set()

    def _may_take(self, level):
        return not any(self.waiting[:level])

    def map(self, args, batch):
        """Compiles args' jobs on the processes at batch's level (a _Batch,
        which may raise it while they run); one answer per job (True:
        compiled)."""
        import queue

        todo = queue.Queue()
        for i in range(len(args)):
            todo.put(i)
        results = [False] * len(args)
        broken = []
        t_batch = time.time()
        batch.attach(self, len(args))

        def take(proc):
            """The next job's index for proc, or None when none is left; waits
            while more urgent jobs are waiting (without holding the process)."""
            while True:
                with self.turn:
                    self.turn.wait_for(lambda: todo.empty() or self._may_take(batch.level))
                    if todo.empty():
                        return None
                with self.locks[proc.pid]:
                    with self.turn:
                        if todo.empty():
                            return None
                        if not self._may_take(batch.level):
                            continue  # a more urgent batch came meanwhile
                        i = todo.get_nowait()
                        self.waiting[batch.level] -= 1
                        batch.left -= 1
                        self.turn.notify_all()
                        level, t_take = batch.level, time.time()
                    run(proc, i, level, t_take)
                    if broken and broken[-1] is proc:
                        return None

        def run(proc, i, level, t_take):
            try:
                proc.stdin.write(json.dumps(args[i]) + "\n")
                ok, t0, t1, ready = json.loads(proc.stdout.readline())
                results[i] = ok is True
                self.ready.setdefault(proc.pid, ready)
                job_log.append((args[i][3], args[i][1], proc.pid, level, t_batch, t_take, t0, t1, results[i],
                                args[i][4:9]))
            except (OSError, ValueError, TypeError):
                broken.append(proc)  # this job is left to compile_kernel's retry

        def feed(proc):
            self.key_sent.wait()
            while take(proc) is not None:
                pass

        try:
            threads = [threading.Thread(target=feed, args=(p,), daemon=True) for p in list(self.procs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            with self.turn:  # jobs no process took (every one broke) wait no more
                self.waiting[batch.level] -= batch.left
                batch.left = 0
                self.turn.notify_all()
        for p in broken:
            if p in self.procs:
                self.procs.remove(p)
            p.kill()
        return results


class _Batch:
    """The level of a batch in flight on the compile processes, which
    raise_to() makes more urgent (a graph whose kernels were compiling soon
    is about to run)."""

    def __init__(self, level):
        self.level = level
        self.left = 0  # jobs no process has taken yet (changed under workers.turn)
        self.workers = None
        self.lock = threading.Lock()  # taken before workers.turn

    def attach(self, workers, njobs):
        with self.lock, workers.turn:
            self.workers = workers
            self.left = njobs
            workers.waiting[self.level] += njobs

    def raise_to(self, level):
        with self.lock:
            w = self.workers
            if w is None:
                self.level = min(self.level, level)
                return
            with w.turn:
                if level < self.level:
                    w.waiting[self.level] -= self.left
                    w.waiting[level] += self.left
                    self.level = level
                    w.turn.notify_all()


def _installation_key():
    """Triton's hash of its own installation (its cache entries' names)."""
    fn = _triton_key_fn()
    return fn() if fn is not None else None


# where Triton's installation hash function lives (it moved between releases)
_TRITON_KEY_MODULES = ("triton.runtime.cache", "triton.compiler.compiler")


def _triton_key_fn():
    import importlib

    for mod in _TRITON_KEY_MODULES:
        try:
            fn = getattr(importlib.import_module(mod), "triton_key", None)
        except ImportError:
            fn = None
        if callable(fn):
            return fn
    return None


def _use_triton_key(key, fn=None):
    """Makes this process's Triton use key as its installation hash instead
    of hashing the installation again (where it names the function), or
    puts fn (Triton's own function) back."""
    import importlib

    for mod in _TRITON_KEY_MODULES:
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        if callable(getattr(m, "triton_key", None)):
            m.triton_key = fn or (lambda: key)


def _worker_main():
    """A _Workers child: its first stdin line carries Triton's installation
    hash; then one JSON job per line, one JSON answer per line. Triton's
    compiler is imported and run once on a small kernel before the first
    job (its first compile in a process costs most of a second of set-up),
    while the parent is still capturing and hashing."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever Triton prints goes to stderr, not into the answers
    import importlib

    for mod in ("triton.compiler.compiler", "triton.compiler.code_generator"):  # while the parent hashes
        try:
            importlib.import_module(mod)
        except Exception:  # noqa: BLE001 - a real job reports what is wrong
            pass
    # the warm-up's artifacts are thrown away, so it needs no real hash and
    # runs while the parent computes it
    own = _triton_key_fn()
    try:
        _use_triton_key("wick-warm-up")
        _warm_up()
    except Exception:  # noqa: BLE001 - a real job reports what is wrong
        pass
    key = None
    try:
        key = json.loads(sys.stdin.readline() or "{}").get("triton_key")
    except (ValueError, AttributeError):
        pass
    if isinstance(key, str) and key:
        _use_triton_key(key)
    elif own is not None:
        _use_triton_key(None, own)  # Triton hashes its installation itself
    ready = time.time()
    for line in sys.stdin:
        t0 = time.time()
        ok = _compile_job(json.loads(line))
        print(json.dumps([ok, t0, time.time(), ready]), file=out)


def _warm_up():
    import tempfile

    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    arch = os.environ.get("WICK_TRITON_WARM_ARCH", "")
    if not arch.isdigit():
        return
    with tempfile.TemporaryDirectory() as d:
        prev = os.environ.get("TRITON_CACHE_DIR")
        os.environ["TRITON_CACHE_DIR"] = d  # the warm-up's artifacts are not kept
        try:
            @triton.jit
            def wk_warm(x, n, XBLOCK: tl.constexpr):
                i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
                tl.store(x + i, tl.exp(tl.load(x + i, mask=i < n)), mask=i < n)

            src = ASTSource(wk_warm, {"x": "*fp32", "n": "i32", "XBLOCK": "constexpr"}, {(2,): 128})
            triton.compile(src, target=GPUTarget("cuda", int(arch), 32), options={"num_warps": 4})
        finally:
            if prev is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = prev


_workers = None  # None: not started; False: could not start


_workers_lock = threading.Lock()  # batches on several threads start one set of processes


def _process_workers(n, arch=None):
    global _workers
    with _workers_lock:
        if _workers is None:
            try:
                _workers = _Workers(n, arch)
            except OSError:
                _workers = False
        return _workers if _workers and _workers.procs else None


def _usable_cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _worker_count():
    """How many compile processes a large batch gets: one per usable CPU
    but one (left to this process, which captures while they start), none
    (threads) on a machine of two CPUs or fewer or where
    WICK_TRITON_COMPILE_PROCS says 0 or 1."""
    ncpu = _usable_cpus()
    procs = os.environ.get("WICK_TRITON_COMPILE_PROCS", "")
    procs = int(procs) if procs.strip().isdigit() else min(ncpu - 1, 32)
    return procs if procs > 1 and ncpu > 2 else 0


def start_workers(arch):
    """Starts the compile processes in the background (a no-op once
    started, or where there would be none): called when a graph for a GPU
    begins compiling, before its kernels exist."""
    n = _worker_count()
    if n:
        _process_workers(n, arch)


def _cached(cache_dir, key):
    """Whether the kernel of this _cache_key is in the cache (its metadata
    is on disk under the key; the load still checks the cubin's hash)."""
    try:
        with open(os.path.join(cache_dir, "triton", f"{_sha(key.encode())}.json")) as f:
            return json.load(f).get("key") == key
    except (OSError, ValueError):
        return False


def compile_batch(cache_dir, path, src_hash, jobs, arch, background=False, batch=None):
    """Compiles many (name, param_types, has_r, xblock, rblock, num_warps)
    jobs at once into the cache: a graph's kernels and their autotuning
    candidates compile in parallel instead of one by one. Triton's front end
    is Python and holds the GIL, so a large batch goes to worker processes
    (_worker_count; WICK_TRITON_COMPILE_PROCS=0: threads only),
    a small one to threads (its passes and ptxas run without the GIL). A job
    that fails is left for compile_kernel to redo (and report) when its
    kernel is loaded. One answer per job: True where it is compiled (or
    was already). background: autotuning candidates (BACKGROUND); batch: a
    _Batch giving the level (FOREGROUND where neither is given)."""
    # one job per distinct kernel and config not yet in the disk cache: a
    # repeat is a cache hit once its first is compiled, and a run whose
    # kernels are all cached starts no worker
    first = {}  # a job's cache key -> its first occurrence's position in args
    args = []
    index = []  # each job's position in args, or -1: cached
    for job in jobs:
        a = (cache_dir, path, src_hash, *job, arch, 1)
        key = _cache_key(*a[1:])
        if key not in first:
            first[key] = -1 if _cached(cache_dir, key) else len(args)
            if first[key] >= 0:
                args.append(a)
        index.append(first[key])
    done = _compile_all(args, batch or _Batch(BACKGROUND if background else FOREGROUND))
    return [True if i < 0 else done[i] for i in index]


class _Pending:
    """A batch compiling on a thread of its own; done() says whether it has
    finished (successfully or not: a job that failed is redone, and
    reported, when its kernel is loaded), wait() makes it as urgent as a
    graph about to run and waits for it."""

    def __init__(self, args, level):
        self.batch = _Batch(level)
        self.thread = threading.Thread(target=self._run, args=args, daemon=True, name="wick-triton-pending")
        self.thread.start()

    def _run(self, *args):
        try:
            compile_batch(*args, batch=self.batch)
        except Exception:  # noqa: BLE001 - the loads redo and report
            pass

    def done(self):
        return not self.thread.is_alive()

    def wait(self):
        self.batch.raise_to(FOREGROUND)
        self.thread.join()


_later = []


def compile_later(cache_dir, path, src_hash, jobs, arch):
    """Starts compiling the autotuning candidates that a graph's first call
    does not need (it runs each kernel in its first config): the runtime
    times them once this handle says done(). Jobs share the compile
    processes with foreground batches, which go first."""
    _later[:] = [h for h in _later if not h.done()]
    handle = _Pending((cache_dir, path, src_hash, jobs, arch), BACKGROUND)
    _later.append(handle)
    return handle


def compile_soon(cache_dir, path, src_hash, jobs, arch):
    """Starts compiling the first-call kernels of a graph that is not about
    to run yet (a training graph's backward, while the forward compiles and
    runs): they go after any foreground batch's jobs and before autotuning
    candidates. The runtime calls the handle's wait() before the graph's
    first launch."""
    return _Pending((cache_dir, path, src_hash, jobs, arch), SOON)


def wait_background(timeout=None):
    """Waits until every background batch has finished (at most timeout
    seconds each): the next call of each graph then tunes its kernels.
    Benchmarks call it before timing; reduce-overhead before recording."""
    for h in list(_later):
        h.thread.join(timeout)
    return all(h.done() for h in _later)


def _compile_all(args, batch):
    from concurrent.futures import ThreadPoolExecutor

    if not args:
        return []
    procs = _worker_count()
    if procs and (len(args) >= 8 or _workers):  # a small batch goes to threads unless the processes are up
        workers = _process_workers(procs, args[0][-2])
        if workers is not None:
            return workers.map(args, batch)
    if batch.level == BACKGROUND:  # one at a time, beside the program's own threads
        return [_compile_job(a) for a in args]
    ncpu = _usable_cpus()
    limit = int(os.environ.get("WICK_TRITON_COMPILE_THREADS", "0") or 0)  # 1: one at a time
    workers = max(1, min(len(args), limit if limit > 0 else ncpu, 32))
    if workers == 1:
        return [_compile_job(a) for a in args]
    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(_compile_job, args))


def launch_interpret(fn, args, xnumel, has_r, xblock, rblock):
    """Runs a kernel with Triton's interpreter (TRITON_INTERPRET=1, CPU tensors)."""
    grid = ((xnumel + xblock - 1) // xblock,)
    if has_r:
        fn[grid](*args, XBLOCK=xblock, RBLOCK=rblock)
    else:
        fn[grid](*args, XBLOCK=xblock)


# ---- libdevice ----------------------------------------------------------------

class _InterpretedLibdevice:
    """libdevice's functions for Triton's interpreter, in numpy."""

    def __getattr__(self, name):
        import numpy as np
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        def erfinv(y):
            from math import erf as _erf

            return np.vectorize(_erfinv_scalar(_erf))(y)

        unary = {
            "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin,
            "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
            "acosh": np.arccosh, "atanh": np.arctanh, "log1p": np.log1p, "expm1": np.expm1,
            "log2": np.log2, "log10": np.log10, "exp2": np.exp2, "trunc": np.trunc, "nearbyint": np.rint,
            "erf": np.vectorize(_math("erf")), "erfc": np.vectorize(_math("erfc")), "erfinv": erfinv,
        }
        binary = {"pow": np.power, "atan2": np.arctan2, "fmod": np.fmod}
        if name in unary:
            f = unary[name]

            def call1(x, _builder=None, _semantic=None):
                d = x.handle.data
                with np.errstate(all="ignore"):
                    r = np.asarray(f(d)).astype(d.dtype)
                return tl.core.tensor(TensorHandle(r, x.handle.dtype.scalar), x.type)

            return call1
        if name in binary:
            f = binary[name]

            def call2(a, b, _builder=None, _semantic=None):
                da, db = np.broadcast_arrays(a.handle.data, b.handle.data)
                with np.errstate(all="ignore"):
                    r = np.asarray(f(da, db)).astype(da.dtype)
                ty = tl.block_type(a.type.scalar, list(r.shape)) if r.shape else a.type.scalar
                return tl.core.tensor(TensorHandle(r, a.handle.dtype.scalar), ty)

            return call2
        raise AttributeError(name)


def _math(name):
    import math

    return getattr(math, name)


def _erfinv_scalar(erf):
    import math

    def inv(y):
        if not (-1 < y < 1):
            return math.inf if y == 1 else -math.inf if y == -1 else math.nan
        x = math.copysign(math.sqrt(-math.log((1 - abs(y)) / 2)), y) if abs(y) > 0.7 else y * math.sqrt(math.pi) / 2
        for _ in range(60):
            x -= (erf(x) - y) / (2 / math.sqrt(math.pi) * math.exp(-x * x))
        return x

    return inv


def __getattr__(name):
    if name == "libdevice":  # not cached: the mode may change within a process
        if _interpreting():
            return _InterpretedLibdevice()
        from triton.language.extra import libdevice as value

        return value
    raise AttributeError(name)
