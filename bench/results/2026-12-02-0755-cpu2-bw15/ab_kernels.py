"""A/B: alternate the copy probe and several compiled variants of one kernel, same process, thread clock."""
import ctypes, mmap, os, re, statistics, subprocess, sys, time
import torch
torch.set_num_threads(1)
R = C = 4096
kind = sys.argv[1]
files = sys.argv[2:]
rounds = int(os.environ.get("ROUNDS", "11"))
FL = "-O2 -march=native -fopenmp -fPIC -shared -fno-math-errno -ffp-contract=fast -mprefer-vector-width=512".split() + os.environ.get("EXTRA", "").split()
libc = ctypes.CDLL(None)
def aligned(n, dtype=torch.float32):
    # 2 MiB aligned, huge pages asked for before first touch (as wick's output pool)
    nb = n * 4 + (2 << 20)
    base = torch.empty(nb // 4, dtype=dtype)
    off = (-base.data_ptr()) % (2 << 20)
    t = base[off // 4: off // 4 + n]
    libc.madvise(ctypes.c_void_p(t.data_ptr()), ctypes.c_size_t(n * 4 - (n * 4) % (2 << 20)), 14)
    t.fill_(0)
    return t, base
torch.manual_seed(0)
x, y = torch.randn(R, C), torch.randn(R, C)
w, b = torch.randn(C), torch.randn(C)
out, _keep = aligned(R * C)
s1, s2 = torch.empty(R), torch.empty(R)
scol = torch.empty(C)
bufs = {"pointwise": ([x, y, out], 3), "softmax": ([x, out, s1, s2], 2), "layer_norm": ([x, w, b, out, s1, s2], 2),
        "sum_rows": ([x, s1], 1), "sum_cols": ([x, scol], 1), "bias": ([x, w, b, out], 2)}[kind]
tensors, mult = bufs
nb = R * C * 4
ptrs = (ctypes.c_void_p * len(tensors))(*[t.data_ptr() for t in tensors])
fns = []
eager_fn = {"pointwise": lambda: ((x * 1.5 + 0.5).relu() - y).sigmoid() * y, "softmax": lambda: torch.softmax(x, -1),
       "layer_norm": lambda: torch.nn.functional.layer_norm(x, (C,), w, b), "sum_rows": lambda: x.sum(-1),
       "sum_cols": lambda: x.sum(0), "bias": lambda: x * w + b}[kind]
for f in files:
    if f == "eager":
        fns.append(None); continue
    src = open(f).read()
    entry = re.search(r"int (wick_graph_\w+)\(void \*\*buffers\)", src).group(1)
    so = os.path.abspath(f) + ".%d.so" % len(fns)
    subprocess.check_call(["gcc", *FL, f, "-o", so, "-lmvec", "-lm"])
    lib = ctypes.CDLL(so)
    fn = getattr(lib, entry); fn.argtypes = [ctypes.c_void_p]; fn.restype = ctypes.c_int
    fns.append(fn)
# correctness vs first variant and eager
ref = {"pointwise": lambda: ((x * 1.5 + 0.5).relu() - y).sigmoid() * y, "softmax": lambda: torch.softmax(x, -1),
       "layer_norm": lambda: torch.nn.functional.layer_norm(x, (C,), w, b), "sum_rows": lambda: x.sum(-1),
       "sum_cols": lambda: x.sum(0), "bias": lambda: x * w + b}[kind]()
resT = {"pointwise": out, "softmax": out, "layer_norm": out, "sum_rows": s1, "sum_cols": scol, "bias": out}[kind]
for f, fn in zip(files, fns):
    if fn is None: continue
    resT.zero_(); fn(ptrs)
    got = resT.view_as(ref)
    print(f, "max abs err", (got - ref).abs().max().item(), "allclose", torch.allclose(got, ref, rtol=1e-4, atol=1e-4))
dst = torch.empty_like(x)
def copy():
    dst.copy_(x)
def nrep(g):
    g(); t0 = time.thread_time(); g(); return max(1, int(float(os.environ.get("SAMPLE", "0.08")) / max(1e-6, time.thread_time() - t0)))
calls = [copy] + [(lambda fn=fn: fn(ptrs)) if fn else eager_fn for fn in fns]
ns = [nrep(g) for g in calls]
samples = [[] for _ in calls]
for r in range(rounds):
    order = list(range(len(calls)))
    if r % 2: order = [0] + order[1:][::-1]
    for i in order:
        g, n = calls[i], ns[i]
        t0 = time.thread_time()
        for _ in range(n): g()
        samples[i].append((time.thread_time() - t0) / n)
cm = statistics.median(samples[0])
copy_bw = 2 * nb / cm
print(f"load {open('/proc/loadavg').read().split()[:3]} copy {copy_bw/1e9:.2f} GB/s ({cm*1e3:.2f} ms)")
for f, s in zip(files, samples[1:]):
    m = statistics.median(s)
    print(f"{os.path.basename(f):30s} median {m*1e3:7.3f} ms  min {min(s)*1e3:7.3f}  %copy {100*mult*nb/m/copy_bw:5.1f}")
