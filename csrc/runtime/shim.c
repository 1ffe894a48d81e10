/* shim.c — output tensors allocated from C through PyTorch's stable C shim
 * (torch/csrc/inductor/aoti_torch/c/shim.h, the ABI AOTInductor's compiled
 * models use), found with dlsym in the libtorch this process already loaded.
 * The tensor handle it returns is handed to Python through libtorch_python's
 * THPVariable_Wrap, so a compiled call allocates without building Python
 * argument tuples or parsing keyword arguments. On CUDA (the Triton target)
 * the same call allocates from PyTorch's caching allocator on the device
 * (aoti_torch_device_type_cuda), as torch.empty_strided(device=) would.
 * Extern outputs' dtype, sizes and strides are read through the shim too
 * (wk_shim_meta), from the tensor's handle as below.
 *
 * Views (wk_shim_alias_Ref): aoti_torch__reinterpret_tensor makes a tensor
 * over the base's storage with the given sizes, strides and offset, as
 * inductor's generated code does for its views. Such a tensor is no autograd
 * view of its base (no shared version counter), so the runtime uses it only
 * where the caller said so (CompiledGraph.alias_views: AOTAutograd's graphs,
 * whose aliasing AOTAutograd itself restores). The handle of a Python tensor
 * is its THPVariable's at::Tensor member (torch/csrc/autograd/
 * python_variable.h: right after PyObject_HEAD), also read for input data
 * pointers (wk_shim_data_ptr); the first use checks that
 * against the tensor's data pointer and dims, and a mismatch turns views back
 * to the Python path for the process.
 *
 * The output pool (wk_shim_pooled_Ref): a large output (>= 4 MiB) is made
 * with torch_from_blob over a block whose deleter gives it back to a small
 * process-wide pool instead of the C library, and the next output of that
 * size (rounded to 2 MiB) takes it. A fresh block from the allocator is a
 * new mapping: every 4 KiB page faults on first write and the OS zeroes it,
 * a write pass over the output before the kernel's own (a quarter of a
 * softmax's time at 64 MiB). A reused block is already mapped and warm. The
 * pool keeps the most recently freed blocks, at most WICK_OUTPUT_POOL MiB
 * (oldest given back to the C library first); such a tensor's storage is
 * not resizable (resize_ past its size raises, as for torch.from_numpy's).
 * The deleter runs wherever torch frees the storage (any thread, GIL or
 * not): the pool has its own mutex and never calls into Python.
 *
 * Owns: the resolved symbols (process-wide, resolved once) and the pool's
 * cached blocks. Every function
 * here returns the Python path's answer when a symbol is missing: callers
 * fall back to torch.empty_strided. Set WICK_SHIM=0 to force that path.
 *
 * Why THPVariable_Wrap is safe to call from C: an AtenTensorHandle is an
 * at::Tensor* (the shim's own definition), and at::Tensor derives from
 * at::TensorBase without adding members, so the handle is a valid
 * `const at::TensorBase&` (a reference is passed as a pointer). The wrap
 * takes its own reference; ours is dropped right after.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "runtime.h"

typedef void *AtenTensorHandle;
typedef int32_t AOTITorchError;

static struct {
    int state; /* 0 unresolved, 1 usable, -1 unusable */
    uint64_t abi_version;
    AOTITorchError (*empty_strided)(int64_t, const int64_t *, const int64_t *, int32_t, int32_t, int32_t,
                                    AtenTensorHandle *);
    AOTITorchError (*get_data_ptr)(AtenTensorHandle, void **);
    AOTITorchError (*delete_tensor)(AtenTensorHandle);
    PyObject *(*wrap)(const void *tensor_base);
    AOTITorchError (*reinterpret)(AtenTensorHandle, int64_t, const int64_t *, const int64_t *, int64_t,
                                  AtenTensorHandle *);
    AOTITorchError (*get_dim)(AtenTensorHandle, int64_t *);
    /* metadata readers (optional: wk_shim_meta answers 0 without them) */
    AOTITorchError (*get_sizes)(AtenTensorHandle, int64_t **);
    AOTITorchError (*get_strides)(AtenTensorHandle, int64_t **);
    AOTITorchError (*get_dtype)(AtenTensorHandle, int32_t *);
    int views; /* 0 unchecked, 1 usable, -1 Python path */
    /* torch_from_blob (stable C shim, torch >= 2.11): NULL turns the pool off */
    AOTITorchError (*from_blob)(void *, int64_t, const int64_t *, const int64_t *, int64_t, int32_t, int32_t,
                                int32_t, AtenTensorHandle *, int32_t, const uint8_t *, int64_t,
                                void (*)(void *, void *), void *);
    int32_t layout_strided;
    int32_t cpu;
    int32_t cuda; /* -1: no CUDA device type in this libtorch */
    int32_t dtype[WK_NDTYPES];
} S;

static void *sym(void *lib, const char *name) { return lib ? dlsym(lib, name) : NULL; }

static int resolve(void) {
    if (S.state) return S.state == 1 && wk_env_int(WK_ENV_SHIM) != 0 ? 1 : S.state == 1 ? -1 : S.state;
    if (wk_env_int(WK_ENV_SHIM) == 0) { /* not resolved: turning it on later resolves it then */
        wk_log(WK_LOG_PERF, "C shim allocation: off (WICK_SHIM=0), Python path");
        return -1;
    }
    S.state = -1;
    /* RTLD_NOLOAD: only the copies torch already loaded, never another one */
    void *cpu = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
    void *py = dlopen("libtorch_python.so", RTLD_NOW | RTLD_NOLOAD);
    uint64_t (*abi)(void);
    int32_t (*device_cpu)(void);
    *(void **)&abi = sym(cpu, "aoti_torch_abi_version");
    *(void **)&device_cpu = sym(cpu, "aoti_torch_device_type_cpu");
    *(void **)&S.empty_strided = sym(cpu, "aoti_torch_empty_strided");
    *(void **)&S.get_data_ptr = sym(cpu, "aoti_torch_get_data_ptr");
    *(void **)&S.delete_tensor = sym(cpu, "aoti_torch_delete_tensor_object");
    /* PyObject* THPVariable_Wrap(const at::TensorBase&) */
    *(void **)&S.wrap = sym(py, "_Z16THPVariable_WrapRKN2at10TensorBaseE");
    *(void **)&S.reinterpret = sym(cpu, "aoti_torch__reinterpret_tensor");
    *(void **)&S.get_dim = sym(cpu, "aoti_torch_get_dim");
    if (!S.reinterpret || !S.get_dim) S.views = -1;
    *(void **)&S.get_sizes = sym(cpu, "aoti_torch_get_sizes");
    *(void **)&S.get_strides = sym(cpu, "aoti_torch_get_strides");
    *(void **)&S.get_dtype = sym(cpu, "aoti_torch_get_dtype");
    int32_t (*device_cuda)(void);
    *(void **)&device_cuda = sym(cpu, "aoti_torch_device_type_cuda");
    S.cuda = device_cuda ? device_cuda() : -1;
    *(void **)&S.from_blob = sym(cpu, "torch_from_blob");
    int32_t (*layout_strided)(void);
    *(void **)&layout_strided = sym(cpu, "aoti_torch_layout_strided");
    if (layout_strided) S.layout_strided = layout_strided();
    else S.from_blob = NULL;
    int ok = abi && device_cpu && S.empty_strided && S.get_data_ptr && S.delete_tensor && S.wrap;
    for (int dt = 0; ok && dt < WK_NDTYPES; dt++) {
        char name[64];
        snprintf(name, sizeof name, "aoti_torch_dtype_%s", wk_dtype_name((WkDType)dt));
        int32_t (*code)(void);
        *(void **)&code = sym(cpu, name);
        if (!code) ok = 0;
        else S.dtype[dt] = code();
    }
    if (ok) {
        S.abi_version = abi();
        S.cpu = device_cpu();
        S.state = 1;
    }
    /* the libraries stay loaded (torch holds them); drop our extra references */
    if (cpu) dlclose(cpu);
    if (py) dlclose(py);
    wk_log(WK_LOG_PERF, "C shim allocation: %s (abi version %llx)", S.state == 1 ? "on" : "off, Python path",
           (unsigned long long)S.abi_version);
    return S.state;
}

int wk_shim_available(void) { return resolve() == 1; }

int wk_shim_cuda_available(void) { return resolve() == 1 && S.cuda >= 0; }

PyObject *wk_shim_empty_strided_Ref(int ndim, const int64_t *sizes, const int64_t *strides, WkDType dt,
                                    int cuda_device, void **data) {
    if (resolve() != 1 || (cuda_device >= 0 && S.cuda < 0)) {
        PyErr_SetString(PyExc_RuntimeError, "wick: the C shim is not available");
        return NULL;
    }
    AtenTensorHandle h = NULL;
    /* on CUDA: PyTorch's caching allocator, on the current stream, as
     * torch.empty_strided(..., device="cuda:i") would */
    if (S.empty_strided(ndim, sizes, strides, S.dtype[dt], cuda_device >= 0 ? S.cuda : S.cpu,
                        cuda_device >= 0 ? cuda_device : 0, &h) != 0 || !h) {
        PyErr_Format(PyExc_MemoryError, "wick: aoti_torch_empty_strided failed for a %s tensor of %d dims",
                     wk_dtype_name(dt), ndim);
        return NULL;
    }
    PyObject *t = NULL;
    if (S.get_data_ptr(h, data) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "wick: aoti_torch_get_data_ptr failed");
    } else {
        t = S.wrap(h);
    }
    S.delete_tensor(h);
    return t;
}

/* ---- the output pool (see the top) ------------------------------------- */

enum { POOL_ALIGN = 1 << 21, POOL_SLOTS = 32 };

static struct {
    pthread_mutex_t lock;
    int64_t cap;              /* bytes; 0 off (WICK_OUTPUT_POOL, read at each take) */
    int n;                    /* cached blocks, oldest first */
    void *ptr[POOL_SLOTS];
    size_t bytes[POOL_SLOTS];
    size_t cached;            /* sum of bytes[] */
} P = {PTHREAD_MUTEX_INITIALIZER, 0, 0, {0}, {0}, 0};

static void pool_drop_oldest_locked(void **freed) {
    *freed = P.ptr[0];
    P.cached -= P.bytes[0];
    P.n--;
    memmove(P.ptr, P.ptr + 1, (size_t)P.n * sizeof *P.ptr);
    memmove(P.bytes, P.bytes + 1, (size_t)P.n * sizeof *P.bytes);
}

/* torch_from_blob's deleter: the block back to the pool, or to the C
 * library when it does not fit; ctx carries the block's size */
static void pool_release(void *data, void *ctx) {
    size_t bytes = (size_t)(uintptr_t)ctx;
    void *evicted[POOL_SLOTS + 1];
    int nevicted = 0;
    pthread_mutex_lock(&P.lock);
    if (P.cap > 0 && bytes <= (size_t)P.cap) {
        while (P.n && (P.n == POOL_SLOTS || P.cached + bytes > (size_t)P.cap))
            pool_drop_oldest_locked(&evicted[nevicted++]);
        P.ptr[P.n] = data;
        P.bytes[P.n++] = bytes;
        P.cached += bytes;
        data = NULL;
    }
    pthread_mutex_unlock(&P.lock);
    free(data);
    for (int i = 0; i < nevicted; i++) free(evicted[i]);
}

/* A block of exactly `bytes` (a POOL_ALIGN multiple): the newest cached one
 * of that size, else a new one (huge pages asked for before first touch).
 * cap: the pool's size now; blocks past it go back to the C library. */
static void *pool_take(size_t bytes, int64_t cap) {
    void *p = NULL, *evicted[POOL_SLOTS];
    int nevicted = 0;
    pthread_mutex_lock(&P.lock);
    P.cap = cap;
    while (P.n && P.cached > (size_t)cap) pool_drop_oldest_locked(&evicted[nevicted++]);
    for (int i = P.n - 1; i >= 0; i--) {
        if (P.bytes[i] != bytes) continue;
        p = P.ptr[i];
        P.cached -= bytes;
        P.n--;
        memmove(P.ptr + i, P.ptr + i + 1, (size_t)(P.n - i) * sizeof *P.ptr);
        memmove(P.bytes + i, P.bytes + i + 1, (size_t)(P.n - i) * sizeof *P.bytes);
        break;
    }
    pthread_mutex_unlock(&P.lock);
    for (int i = 0; i < nevicted; i++) free(evicted[i]);
    if (p || !cap) return p;
    p = aligned_alloc(POOL_ALIGN, bytes);
#ifdef MADV_HUGEPAGE
    if (p) (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

PyObject *wk_shim_pooled_Ref(int ndim, const int64_t *sizes, const int64_t *strides, WkDType dt, int64_t nbytes,
                             void **data) {
    if (nbytes < WK_POOL_MIN_BYTES || resolve() != 1 || !S.from_blob) return NULL;
    long mib = wk_env_int(WK_ENV_OUTPUT_POOL);
    size_t bytes = ((size_t)nbytes + POOL_ALIGN - 1) & ~(size_t)(POOL_ALIGN - 1);
    void *block = pool_take(bytes, mib > 0 ? (int64_t)mib << 20 : 0);
    if (!block) return NULL; /* pool off, or the plain path reports the shortage */
    AtenTensorHandle h = NULL;
    /* device index -1: "cpu", as torch's own CPU tensors (0 is refused) */
    if (S.from_blob(block, ndim, sizes, strides, 0, S.dtype[dt], S.cpu, -1, &h, S.layout_strided, NULL, 0,
                    pool_release, (void *)(uintptr_t)bytes) != 0 || !h) {
        pool_release(block, (void *)(uintptr_t)bytes);
        return NULL;
    }
    PyObject *t = S.wrap(h); /* the storage now owns the block: its deleter gives it back */
    S.delete_tensor(h);
    if (t) *data = block;
    return t;
}

int64_t wk_shim_pool_cached_bytes(void) {
    pthread_mutex_lock(&P.lock);
    int64_t n = (int64_t)P.cached;
    pthread_mutex_unlock(&P.lock);
    return n;
}

uint64_t wk_shim_abi_version(void) { return resolve() == 1 ? S.abi_version : 0; }

/* The at::Tensor inside a torch.Tensor object (borrowed), see the top. */
static AtenTensorHandle handle_of(PyObject *tensor) { return (char *)tensor + sizeof(PyObject); }

/* One-time check that handle_of reads what Python sees. 1 usable, else -1. */
static int check_views(PyObject *tensor) {
    S.views = -1;
    void *data = NULL;
    int64_t dim = -1;
    PyObject *ptr = PyObject_CallMethod(tensor, "data_ptr", NULL);
    PyObject *nd = ptr ? PyObject_CallMethod(tensor, "dim", NULL) : NULL;
    if (ptr && nd && S.get_data_ptr(handle_of(tensor), &data) == 0 && S.get_dim(handle_of(tensor), &dim) == 0 &&
        PyLong_AsVoidPtr(ptr) == data && PyLong_AsLongLong(nd) == dim)
        S.views = 1;
    Py_XDECREF(ptr);
    Py_XDECREF(nd);
    PyErr_Clear();
    wk_log(WK_LOG_PERF, "C shim views: %s", S.views == 1 ? "on" : "off, Python path");
    return S.views;
}

int wk_shim_meta(PyObject *tensor, WkDType *dtype, int *ndim, const int64_t **sizes, const int64_t **strides) {
    if (resolve() != 1 || S.views < 0 || !S.get_sizes || !S.get_strides || !S.get_dtype ||
        (S.views == 0 && check_views(tensor) != 1))
        return 0;
    AtenTensorHandle h = handle_of(tensor);
    int64_t dim;
    int32_t code;
    int64_t *sz, *st;
    if (S.get_dim(h, &dim) != 0 || S.get_dtype(h, &code) != 0 || S.get_sizes(h, &sz) != 0 ||
        S.get_strides(h, &st) != 0)
        return 0;
    int dt = 0;
    while (dt < WK_NDTYPES && S.dtype[dt] != code) dt++;
    if (dt == WK_NDTYPES) {
        *dtype = WK_NDTYPES; /* a dtype wick has no name for: matches no slot */
    } else {
        *dtype = (WkDType)dt;
    }
    *ndim = (int)dim;
    *sizes = sz;
    *strides = st;
    return 1;
}

int wk_shim_data_ptr(PyObject *tensor, void **data) {
    if (resolve() != 1 || S.views < 0 || (S.views == 0 && check_views(tensor) != 1)) return 0;
    return S.get_data_ptr(handle_of(tensor), data) == 0;
}

PyObject *wk_shim_alias_Ref(PyObject *base, int ndim, const int64_t *sizes, const int64_t *strides,
                            int64_t offset_increment) {
    if (resolve() != 1 || S.views < 0 || (S.views == 0 && check_views(base) != 1)) return NULL;
    AtenTensorHandle h = NULL;
    if (S.reinterpret(handle_of(base), ndim, sizes, strides, offset_increment, &h) != 0 || !h) {
        PyErr_SetString(PyExc_RuntimeError, "wick: aoti_torch__reinterpret_tensor failed");
        return NULL;
    }
    PyObject *t = S.wrap(h);
    S.delete_tensor(h);
    return t;
}

/* ---- for the native extern calls (shim_ops.c) -------------------------- */

void *wk_shim_handle(PyObject *tensor) {
    if (resolve() != 1 || S.views < 0 || (S.views == 0 && check_views(tensor) != 1)) return NULL;
    return handle_of(tensor);
}

PyObject *wk_shim_wrap_handle_Ref(void *handle) {
    PyObject *t = S.wrap(handle);
    S.delete_tensor(handle);
    return t;
}

void wk_shim_delete_handle(void *handle) {
    if (handle) S.delete_tensor(handle);
}

void *wk_shim_op_symbol(const char *name, int cuda) {
    if (resolve() != 1) return NULL;
    void *lib = dlopen(cuda ? "libtorch_cuda.so" : "libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
    void *f = sym(lib, name);
    if (lib) dlclose(lib); /* torch holds the library: the symbol stays valid */
    return f;
}
