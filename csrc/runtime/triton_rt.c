/* triton_rt.c — running the kernels of a TRITON plan (program.h): compile
 * each kernel once through wick/_triton.py (Triton's compiler, the only
 * Python in the path, cached on disk), load the cubin with the CUDA driver
 * API, and launch it from C on PyTorch's current stream of the tensors'
 * device. libcuda.so.1 is opened with dlopen at first use, so wick has no
 * link-time CUDA dependency and imports on machines without a GPU.
 *
 * Owns: the driver-API function table (process-wide, never unloaded), and
 * per WkTriton the loaded modules, the chosen configs and the Python module
 * / functions it compiled from (strong references).
 *
 * Autotuning: a kernel with several candidate configs (block sizes, warps)
 * is timed in each on the real buffers with CUDA events (kernels write only
 * their outputs and temporaries, so re-running one is harmless), and the
 * fastest is kept; the choice is cached on disk per kernel source and device
 * name, so a later process compiles only the chosen config. When: by
 * default (WICK_TRITON_TUNE=later) a graph's first call compiles and runs
 * each kernel in its first config only, while the other candidates compile
 * in the background (wick/_triton.py compile_later, on the compile processes
 * when the foreground leaves them idle); the first call of the graph after
 * that batch is done times them. A first call then waits for one compile
 * per kernel instead of one per candidate (a third of the jobs). No tuning
 * happens while the stream is being captured into a CUDA graph: the
 * reduce-overhead runner waits for the background batches before it
 * records. WICK_TRITON_TUNE=first compiles and times every candidate at the
 * first launch. A graph known to run later (a training graph's backward)
 * sends its first-call batch at compile time (wk_triton_prepare_soon;
 * compile_soon), behind any graph about to run, and its first run waits
 * for it.
 *
 * Interpreter mode (device -1, TRITON_INTERPRET=1, CPU tensors): kernels are
 * launched through Triton's Python launcher, which runs them in numpy; this
 * is how the generated code is tested on machines without a GPU. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime.h"

/* ---- the driver API, loaded at run time ---------------------------------- */
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUevent;

enum {
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
    CU_EVENT_DEFAULT = 0,
};

static struct {
    int tried, ok;
    char why[256];
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*FuncSetAttribute)(CUfunction, int, int);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*StreamIsCapturing)(CUstream, int *);
    CUresult (*GetErrorString)(CUresult, const char **);
    /* PyTorch's current stream without a Python call (the AOTInductor shim) */
    int (*current_stream)(int32_t, void **);
} cu;

static void *sym_any(void *lib, const char *a, const char *b) {
    void *p = dlsym(lib, a);
    return p || !b ? p : dlsym(lib, b);
}

static int cu_load(void) {
    if (cu.tried) return cu.ok ? 0 : -1;
    cu.tried = 1;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(cu.why, sizeof cu.why, "libcuda.so.1 not found (%s)", dlerror());
        return -1;
    }
#define L(field, a, b)                                                                   \
    do {                                                                                 \
        *(void **)&cu.field = sym_any(lib, a, b);                                        \
        if (!cu.field) {                                                                 \
            snprintf(cu.why, sizeof cu.why, "libcuda.so.1 lacks %s", a);                 \
            return -1;                                                                   \
        }                                                                                \
    } while (0)
    L(Init, "cuInit", NULL);
    L(DeviceGet, "cuDeviceGet", NULL);
    L(DeviceGetAttribute, "cuDeviceGetAttribute", NULL);
    L(DeviceGetName, "cuDeviceGetName", NULL);
    L(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL);
    L(CtxGetCurrent, "cuCtxGetCurrent", NULL);
    L(CtxSetCurrent, "cuCtxSetCurrent", NULL);
    L(ModuleLoadData, "cuModuleLoadData", NULL);
    L(ModuleGetFunction, "cuModuleGetFunction", NULL);
    L(FuncSetAttribute, "cuFuncSetAttribute", NULL);
    L(LaunchKernel, "cuLaunchKernel", NULL);
    L(EventCreate, "cuEventCreate", NULL);
    L(EventRecord, "cuEventRecord", NULL);
    L(EventSynchronize, "cuEventSynchronize", NULL);
    L(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
    L(EventDestroy, "cuEventDestroy_v2", "cuEventDestroy");
    L(StreamIsCapturing, "cuStreamIsCapturing", NULL);
    L(GetErrorString, "cuGetErrorString", NULL);
#undef L
    if (cu.Init(0) != 0) {
        snprintf(cu.why, sizeof cu.why, "cuInit failed");
        return -1;
    }
    void *tc = dlopen("libtorch_cuda.so", RTLD_LAZY | RTLD_NOLOAD);
    if (tc) *(void **)&cu.current_stream = dlsym(tc, "aoti_torch_get_current_cuda_stream");
    cu.ok = 1;
    return 0;
}

static int cu_check(CUresult r, const char *what) {
    if (r == 0) return 0;
    const char *s = NULL;
    if (cu.GetErrorString) cu.GetErrorString(r, &s);
    PyErr_Format(PyExc_RuntimeError, "wick: %s failed: CUDA error %d (%s)", what, r, s ? s : "?");
    return -1;
}

int wk_triton_gpu_available(char *why, size_t n) {
    if (cu_load() == 0) return 1;
    if (why) snprintf(why, n, "%s", cu.why);
    return 0;
}

/* ---- per-plan state ---------------------------------------------------- */

typedef struct {
    int ready;            /* 1 loaded, -1 failed */
    CUmodule mod;
    CUfunction fn;
    unsigned shared;
    int num_warps;
    int nextra;           /* trailing parameters Triton adds (scratch pointers), passed NULL */
} Loaded;

typedef struct {
    const WkTritonKernel *k;
    int chosen;           /* config index; -1 until chosen */
    int provisional;      /* chosen is the first config, run until the background batch lets it be tuned */
    Loaded aligned[WK_TRITON_MAX_CONFIGS];
    Loaded unaligned;     /* chosen config, no 16-byte alignment assumed */
    char tune[65];        /* its tuning record's name (tune_path), "" until needed */
    PyObject *jit_fn;     /* interpreter mode */
} KernelRt;

struct WkTriton {
    int device;           /* CUDA index, or -1: interpreter */
    const WkPlan *plan;   /* borrowed: the CompiledGraph owns both */
    PyObject *helper;     /* wick._triton */
    PyObject *path;       /* the module file */
    PyObject *module;     /* imported on first need */
    char src_hash[65];
    char devname[128];
    int arch;             /* compute capability, e.g. 90 */
    CUcontext ctx;
    PyObject *empty;      /* torch.empty, for split reductions' scratch buffers */
    PyObject *dtypes[WK_NDTYPES];
    PyObject *device_obj; /* "cpu" (interpreter) or torch.device("cuda", i) */
    int prepared;         /* every kernel's configs compiled in one parallel batch */
    int tune_later;       /* WICK_TRITON_TUNE=later (read when the plan is made) */
    int untuned;          /* kernels still provisional */
    PyObject *later;      /* the background batch of their other configs (wick._triton._Pending), NULL when done */
    PyObject *soon;       /* the first-call batch started ahead of the first run (compile_soon), NULL once waited */
    int nsteps;
    KernelRt **steps;     /* per plan step: its kernels (NULL for extern steps) */
    PyObject *stream_fn;  /* torch.cuda.current_stream when the shim is absent */
};

static const char *ptr_type(WkDType dt) {
    switch (dt) {
    case WK_BOOL: return "*i1";
    case WK_U8: return "*u8";
    case WK_I8: return "*i8";
    case WK_I16: return "*i16";
    case WK_I32: return "*i32";
    case WK_I64: return "*i64";
    case WK_F16: return "*fp16";
    case WK_BF16: return "*bf16";
    case WK_F32: return "*fp32";
    case WK_F64: return "*fp64";
    default: return "*i8";
    }
}

WkTriton *wk_triton_new(const WkPlan *plan, int device) {
    WkTriton *t = wk_xcalloc(1, sizeof *t);
    t->device = device;
    t->plan = plan;
    t->nsteps = plan->nsteps;
    t->tune_later = strcmp(wk_env_str(WK_ENV_TRITON_TUNE), "first") != 0;
    t->steps = wk_xcalloc((size_t)plan->nsteps + 1, sizeof *t->steps);
    for (int s = 0; s < plan->nsteps; s++) {
        const WkProgram *p = plan->steps[s].program;
        if (plan->steps[s].kind != WK_STEP_KERNELS || !p) continue;
        t->steps[s] = wk_xcalloc((size_t)p->ntriton + 1, sizeof(KernelRt));
        for (int k = 0; k < p->ntriton; k++) {
            t->steps[s][k].k = &p->triton[k];
            t->steps[s][k].chosen = p->triton[k].nconfigs > 1 ? -1 : 0;
        }
    }
    wk_sha256_hex(plan->source, strlen(plan->source), t->src_hash);
    if (!(t->helper = PyImport_ImportModule("wick._triton"))) goto error;
    PyObject *torch = PyImport_ImportModule("torch");
    if (!torch) goto error;
    t->empty = PyObject_GetAttrString(torch, "empty");
    for (int d = 0; t->empty && d < WK_NDTYPES; d++)
        if (!(t->dtypes[d] = PyObject_GetAttrString(torch, wk_dtype_name((WkDType)d)))) Py_CLEAR(t->empty);
    t->device_obj = device >= 0 ? PyObject_CallMethod(torch, "device", "si", "cuda", device)
                                : PyUnicode_FromString("cpu");
    Py_DECREF(torch);
    if (!t->empty || !t->device_obj) goto error;
    t->path = PyObject_CallMethod(t->helper, "write_module", "ss", wk_cc_cache_dir(), plan->source);
    if (!t->path) goto error;
    if (device >= 0) {
        if (cu_load() < 0) {
            PyErr_Format(PyExc_RuntimeError, "wick: the CUDA driver is unavailable: %s", cu.why);
            goto error;
        }
        CUdevice dev;
        int major = 0, minor = 0;
        if (cu_check(cu.DeviceGet(&dev, device), "cuDeviceGet") < 0 ||
            cu_check(cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute") < 0 ||
            cu_check(cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute") < 0 ||
            cu_check(cu.DeviceGetName(t->devname, sizeof t->devname - 1, dev), "cuDeviceGetName") < 0 ||
            cu_check(cu.DevicePrimaryCtxRetain(&t->ctx, dev), "cuDevicePrimaryCtxRetain") < 0)
            goto error;
        t->arch = major * 10 + minor;
        if (!cu.current_stream) {
            PyObject *cuda = PyImport_ImportModule("torch.cuda");
            if (!cuda) goto error;
            t->stream_fn = PyObject_GetAttrString(cuda, "current_stream");
            Py_DECREF(cuda);
            if (!t->stream_fn) goto error;
        }
    }
    return t;
error:
    wk_triton_free(t);
    return NULL;
}

void wk_triton_free(WkTriton *t) {
    if (!t) return;
    for (int s = 0; s < t->nsteps; s++) {
        if (!t->steps[s]) continue;
        const WkProgram *p = t->plan->steps[s].program;
        for (int k = 0; k < p->ntriton; k++) Py_XDECREF(t->steps[s][k].jit_fn);
        free(t->steps[s]);
    }
    /* loaded modules live as long as the process: unloading needs the
     * device's context current, which a finaliser cannot assume */
    free(t->steps);
    Py_XDECREF(t->helper);
    Py_XDECREF(t->path);
    Py_XDECREF(t->later);
    Py_XDECREF(t->soon);
    Py_XDECREF(t->module);
    Py_XDECREF(t->stream_fn);
    Py_XDECREF(t->empty);
    for (int d = 0; d < WK_NDTYPES; d++) Py_XDECREF(t->dtypes[d]);
    Py_XDECREF(t->device_obj);
    free(t);
}

static int ensure_module(WkTriton *t) {
    if (t->module) return 0;
    t->module = PyObject_CallMethod(t->helper, "load_module", "O", t->path);
    return t->module ? 0 : -1;
}

/* Makes the device's primary context current; *prev gets what was. */
static int enter_ctx(WkTriton *t, CUcontext *prev) {
    if (cu_check(cu.CtxGetCurrent(prev), "cuCtxGetCurrent") < 0) return -1;
    if (*prev != t->ctx && cu_check(cu.CtxSetCurrent(t->ctx), "cuCtxSetCurrent") < 0) return -1;
    return 0;
}

static void leave_ctx(WkTriton *t, CUcontext prev) {
    if (prev != t->ctx && prev) cu.CtxSetCurrent(prev);
}

/* Triton's pointer types of kernel k's parameters: a new list, NULL with a
 * Python error. */
static PyObject *param_types(const WkProgram *p, const WkTritonKernel *k) {
    PyObject *types = PyList_New(k->nparams);
    for (int i = 0; types && i < k->nparams; i++) {
        PyObject *s = PyUnicode_FromString(ptr_type(k->params[i] >= 0 ? p->bufs[k->params[i]].dtype : k->scratch_dtype));
        if (!s) Py_CLEAR(types);
        else PyList_SET_ITEM(types, i, s);
    }
    return types;
}

/* Compiles kernel k in config c (aligned or not) and loads it. */
static int load_kernel(WkTriton *t, const WkProgram *p, KernelRt *kr, int c, int aligned, Loaded *out) {
    if (out->ready) return out->ready > 0 ? 0 : -1;
    const WkTritonKernel *k = kr->k;
    const WkTritonConfig *cfg = &k->configs[c];
    PyObject *types = param_types(p, k);
    if (!types) return -1;
    PyObject *r = PyObject_CallMethod(t->helper, "compile_kernel", "sOssOiiiiii", wk_cc_cache_dir(), t->path,
                                      t->src_hash, k->name, types, k->has_r, cfg->xblock, cfg->rblock,
                                      cfg->num_warps, t->arch, aligned);
    Py_DECREF(types);
    if (!r) return -1;
    const char *cubin, *name;
    Py_ssize_t ncubin;
    int shared, warps, nparams;
    if (!PyArg_ParseTuple(r, "y#siii", &cubin, &ncubin, &name, &shared, &warps, &nparams)) {
        Py_DECREF(r);
        return -1;
    }
    CUcontext prev;
    int rc = -1;
    if (enter_ctx(t, &prev) < 0) goto done;
    if (cu_check(cu.ModuleLoadData(&out->mod, cubin), "cuModuleLoadData") < 0 ||
        cu_check(cu.ModuleGetFunction(&out->fn, out->mod, name), "cuModuleGetFunction") < 0) {
        leave_ctx(t, prev);
        goto done;
    }
    if (shared > 49152 &&
        cu_check(cu.FuncSetAttribute(out->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared),
                 "cuFuncSetAttribute") < 0) {
        leave_ctx(t, prev);
        goto done;
    }
    leave_ctx(t, prev);
    out->shared = (unsigned)shared;
    out->num_warps = warps;
    out->nextra = nparams - k->nparams;
    if (out->nextra < 0 || out->nextra > 4) {
        PyErr_Format(PyExc_RuntimeError, "wick: Triton kernel %s has %d parameters, expected %d and scratch",
                     name, nparams, k->nparams);
        goto done;
    }
    out->ready = 1;
    rc = 0;
done:
    if (rc < 0) out->ready = -1;
    Py_DECREF(r);
    return rc;
}

static int launch(const KernelRt *kr, const Loaded *l, const WkTritonConfig *cfg, void *const *ptrs,
                  void *scratch, CUstream stream) {
    const WkTritonKernel *k = kr->k;
    /* Most kernels take a few buffers; a kernel fed by many weights (a model's layer-scale parameters
     * gathered into one fused kernel) can take hundreds, so the argument arrays go to the heap past 64. */
    enum { ON_STACK = 64 };
    void *argv_stack[ON_STACK];
    void *params_stack[ON_STACK + 8];
    void **argv_store = argv_stack, **params = params_stack;
    void *null_ptr = NULL;
    if (k->nparams > ON_STACK) {
        argv_store = PyMem_Malloc(sizeof(void *) * (size_t)k->nparams);
        params = PyMem_Malloc(sizeof(void *) * (size_t)(k->nparams + l->nextra));
        if (!argv_store || !params) {
            PyMem_Free(argv_store);
            PyMem_Free(params);
            PyErr_NoMemory();
            return -1;
        }
    }
    for (int i = 0; i < k->nparams; i++) {
        argv_store[i] = k->params[i] >= 0 ? ptrs[k->params[i]] : scratch;
        params[i] = &argv_store[i];
    }
    for (int i = 0; i < l->nextra; i++) params[k->nparams + i] = &null_ptr;
    int64_t grid = (k->xnumel + cfg->xblock - 1) / cfg->xblock;
    int rc = cu_check(cu.LaunchKernel(l->fn, (unsigned)grid, 1, 1, 32u * (unsigned)l->num_warps, 1, 1, l->shared,
                                      stream, params, NULL),
                      "cuLaunchKernel");
    if (argv_store != argv_stack) {
        PyMem_Free(argv_store);
        PyMem_Free(params);
    }
    return rc;
}

/* ---- autotuning ---------------------------------------------------------- */

/* The file of kernel kr's tuning choice. Kernels of one identity (the same
 * text under other names: a model's repeated layers, wick/_triton.py
 * tune_key) with the same parameter types share it on one device, so one
 * layer's timing serves every layer; the kernel's own name where the
 * identity cannot be had. */
static void tune_path(WkTriton *t, const WkProgram *p, KernelRt *kr, char *out, size_t n) {
    if (!kr->tune[0]) {
        const WkTritonKernel *k = kr->k;
        PyObject *types = param_types(p, k);
        PyObject *key = types ? PyObject_CallMethod(t->helper, "tune_key", "OssOs", t->path, t->src_hash, k->name,
                                                    types, t->devname)
                              : NULL;
        Py_XDECREF(types);
        const char *s = key && PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        if (s) {
            wk_sha256_hex(s, strlen(s), kr->tune);
        } else {
            PyErr_Clear();
            char own[512];
            snprintf(own, sizeof own, "%s/%s/%s", t->src_hash, k->name, t->devname);
            wk_sha256_hex(own, strlen(own), kr->tune);
        }
        Py_XDECREF(key);
    }
    snprintf(out, n, "%s/triton/tune-%s.txt", wk_cc_cache_dir(), kr->tune);
}

/* The cached choice: "x r w" of a config that is still a candidate. */
static int tune_read(WkTriton *t, const WkProgram *p, KernelRt *kr) {
    const WkTritonKernel *k = kr->k;
    char path[1024];
    tune_path(t, p, kr, path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int x, r, w, found = -1;
    if (fscanf(f, "%d %d %d", &x, &r, &w) == 3)
        for (int c = 0; c < k->nconfigs; c++)
            if (k->configs[c].xblock == x && k->configs[c].rblock == r && k->configs[c].num_warps == w) found = c;
    fclose(f);
    return found;
}

static void tune_write(WkTriton *t, const WkProgram *p, KernelRt *kr, int c) {
    const WkTritonKernel *k = kr->k;
    char path[1024], tmp[1100];
    tune_path(t, p, kr, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%d %d %d\n", k->configs[c].xblock, k->configs[c].rblock, k->configs[c].num_warps);
    if (fclose(f) == 0) rename(tmp, path);
    else unlink(tmp);
}

/* Times each config on the real buffers; keeps the fastest. */
static int autotune(WkTriton *t, const WkProgram *p, KernelRt *kr, void *const *ptrs, void *scratch,
                    CUstream stream) {
    const WkTritonKernel *k = kr->k;
    int cached = tune_read(t, p, kr);
    if (cached >= 0) {
        kr->chosen = cached;
        return 0;
    }
    int best = -1;
    float best_ms = 0;
    CUevent e0 = NULL, e1 = NULL;
    CUcontext prev;
    for (int c = 0; c < k->nconfigs; c++) {
        if (load_kernel(t, p, kr, c, 1, &kr->aligned[c]) < 0) {
            /* a config Triton cannot compile (too many registers, shared
             * memory) is skipped */
            PyErr_Clear();
            continue;
        }
    }
    if (enter_ctx(t, &prev) < 0) return -1;
    int rc = -1;
    if (cu_check(cu.EventCreate(&e0, CU_EVENT_DEFAULT), "cuEventCreate") < 0 ||
        cu_check(cu.EventCreate(&e1, CU_EVENT_DEFAULT), "cuEventCreate") < 0)
        goto done;
    for (int c = 0; c < k->nconfigs; c++) {
        if (kr->aligned[c].ready <= 0) continue;
        const WkTritonConfig *cfg = &k->configs[c];
        if (launch(kr, &kr->aligned[c], cfg, ptrs, scratch, stream) < 0) goto done; /* warm */
        int reps = 10;
        if (cu_check(cu.EventRecord(e0, stream), "cuEventRecord") < 0) goto done;
        for (int i = 0; i < reps; i++)
            if (launch(kr, &kr->aligned[c], cfg, ptrs, scratch, stream) < 0) goto done;
        float ms = 0;
        if (cu_check(cu.EventRecord(e1, stream), "cuEventRecord") < 0 ||
            cu_check(cu.EventSynchronize(e1), "cuEventSynchronize") < 0 ||
            cu_check(cu.EventElapsedTime(&ms, e0, e1), "cuEventElapsedTime") < 0)
            goto done;
        wk_log(WK_LOG_PERF, "autotune %s: XBLOCK=%d RBLOCK=%d warps=%d: %.2f us", k->name, cfg->xblock,
               cfg->rblock, cfg->num_warps, 1000.0 * ms / reps);
        if (best < 0 || ms < best_ms) {
            best = c;
            best_ms = ms;
        }
    }
    if (best < 0) {
        PyErr_Format(PyExc_RuntimeError, "wick: no config of Triton kernel %s compiled", k->name);
        goto done;
    }
    kr->chosen = best;
    tune_write(t, p, kr, best);
    rc = 0;
done:
    if (e0) cu.EventDestroy(e0);
    if (e1) cu.EventDestroy(e1);
    leave_ctx(t, prev);
    return rc;
}

/* Appends kernel k's compile job in config c to jobs (cleared on error). */
static void add_job(PyObject **jobs, const WkTritonKernel *k, PyObject *types, int c) {
    PyObject *job = Py_BuildValue("(sOiiii)", k->name, types, k->has_r, k->configs[c].xblock, k->configs[c].rblock,
                                  k->configs[c].num_warps);
    if (!job || PyList_Append(*jobs, job) < 0) Py_CLEAR(*jobs);
    Py_XDECREF(job);
}

/* Before the first launch: every kernel of the plan, in the configs it may
 * run first (the cached tuning choice, else every candidate, or under
 * tune_later its first), compiled in one parallel batch into the disk cache,
 * so that the loads that follow are cache hits; under tune_later, the other
 * candidates then start compiling in the background. soon: the batch is
 * started on a thread (compile_soon) and the first run waits for it (a
 * backward's kernels compile while its forward runs). Failures here are not
 * errors: the loads redo and report. */
static void prepare_all(WkTriton *t, int soon) {
    t->prepared = 1;
    PyObject *jobs = PyList_New(0), *later = PyList_New(0);
    if (!later) Py_CLEAR(jobs);
    for (int s = 0; jobs && s < t->nsteps; s++) {
        if (!t->steps[s]) continue;
        const WkProgram *p = t->plan->steps[s].program;
        for (int ki = 0; jobs && ki < p->ntriton; ki++) {
            KernelRt *kr = &t->steps[s][ki];
            const WkTritonKernel *k = kr->k;
            if (k->xnumel == 0) continue;
            if (kr->chosen < 0) {
                int c = tune_read(t, p, kr);
                if (c >= 0) {
                    kr->chosen = c;
                } else if (t->tune_later) {
                    kr->chosen = 0;
                    kr->provisional = 1;
                    t->untuned++;
                }
            }
            PyObject *types = param_types(p, k);
            for (int c = 0; types && jobs && c < k->nconfigs; c++) {
                if (kr->chosen < 0 || c == kr->chosen) add_job(&jobs, k, types, c);
                else if (kr->provisional) add_job(&later, k, types, c);
                if (!later) Py_CLEAR(jobs);
            }
            Py_XDECREF(types);
        }
    }
    if (jobs && PyList_GET_SIZE(jobs) > 1) {
        PyObject *r = PyObject_CallMethod(t->helper, soon ? "compile_soon" : "compile_batch", "sOsOi",
                                          wk_cc_cache_dir(), t->path, t->src_hash, jobs, t->arch);
        if (soon) t->soon = r;
        else Py_XDECREF(r);
    }
    PyErr_Clear();
    if (jobs && later && PyList_GET_SIZE(later) > 0)
        t->later = PyObject_CallMethod(t->helper, "compile_later", "sOsOi", wk_cc_cache_dir(), t->path, t->src_hash,
                                       later, t->arch);
    Py_XDECREF(jobs);
    Py_XDECREF(later);
    PyErr_Clear(); /* without a background batch, the provisional kernels are tuned at the next run */
}

/* Whether this run may time the provisional kernels: their background batch
 * is done (or there is none) and the stream is not being captured. */
static int may_tune_now(WkTriton *t, CUstream stream) {
    if (t->later) {
        PyObject *r = PyObject_CallMethod(t->later, "done", NULL);
        int done = r ? PyObject_IsTrue(r) : -1;
        Py_XDECREF(r);
        if (done < 0) PyErr_Clear();
        if (done <= 0) return 0;
        Py_CLEAR(t->later);
    }
    int capturing = 1;
    return cu.StreamIsCapturing(stream, &capturing) == 0 && capturing == 0;
}

/* The loaded kernel kr runs as this time: tuned first where it is due
 * (tune_now, or a provisional first config that did not compile). */
static Loaded *chosen_kernel(WkTriton *t, const WkProgram *p, KernelRt *kr, void *const *ptrs, void *scratch,
                             CUstream stream, int aligned, int tune_now) {
    if (kr->provisional && tune_now) {
        kr->provisional = 0;
        t->untuned--;
        kr->chosen = -1;
        kr->unaligned = (Loaded){0}; /* it was the first config's */
    }
    if (kr->chosen < 0 && autotune(t, p, kr, ptrs, scratch, stream) < 0) return NULL;
    Loaded *l = aligned ? &kr->aligned[kr->chosen] : &kr->unaligned;
    if (!l->ready && load_kernel(t, p, kr, kr->chosen, aligned, l) < 0) {
        if (!kr->provisional) return NULL;
        PyErr_Clear(); /* the first config does not compile (registers, shared memory): tune among the others */
        return chosen_kernel(t, p, kr, ptrs, scratch, stream, aligned, 1);
    }
    if (l->ready < 0) {
        PyErr_Format(PyExc_RuntimeError, "wick: Triton kernel %s failed to compile earlier", kr->k->name);
        return NULL;
    }
    return l;
}

/* ---- running a step ------------------------------------------------------ */

static int current_stream(WkTriton *t, CUstream *out) {
    if (cu.current_stream) {
        void *s = NULL;
        if (cu.current_stream(t->device, &s) == 0) {
            *out = s;
            return 0;
        }
    }
    if (!t->stream_fn) {
        PyObject *cuda = PyImport_ImportModule("torch.cuda");
        if (!cuda) return -1;
        t->stream_fn = PyObject_GetAttrString(cuda, "current_stream");
        Py_DECREF(cuda);
        if (!t->stream_fn) return -1;
    }
    PyObject *dev = PyLong_FromLong(t->device);
    if (!dev) return -1;
    PyObject *st = PyObject_CallOneArg(t->stream_fn, dev);
    Py_DECREF(dev);
    if (!st) return -1;
    PyObject *h = PyObject_GetAttrString(st, "cuda_stream");
    Py_DECREF(st);
    if (!h) return -1;
    *out = PyLong_AsVoidPtr(h);
    Py_DECREF(h);
    return PyErr_Occurred() ? -1 : 0;
}

static int run_interpret(WkTriton *t, KernelRt *kr, PyObject *const *bufs, PyObject *scratch) {
    const WkTritonKernel *k = kr->k;
    if (!kr->jit_fn) {
        if (ensure_module(t) < 0) return -1;
        if (!(kr->jit_fn = PyObject_GetAttrString(t->module, k->name))) return -1;
    }
    PyObject *args = PyTuple_New(k->nparams);
    if (!args) return -1;
    for (int i = 0; i < k->nparams; i++)
        PyTuple_SET_ITEM(args, i, Py_NewRef(k->params[i] >= 0 ? bufs[k->params[i]] : scratch ? scratch : Py_None));
    const WkTritonConfig *cfg = &k->configs[0];
    PyObject *r = PyObject_CallMethod(t->helper, "launch_interpret", "OOLiii", kr->jit_fn, args,
                                      (long long)k->xnumel, k->has_r, cfg->xblock, cfg->rblock);
    Py_DECREF(args);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* A new scratch tensor for kernel k (split reductions' partials). */
static int new_scratch(WkTriton *t, const WkTritonKernel *k, PyObject **scratch, void **ptr) {
    Py_CLEAR(*scratch);
    if (t->device >= 0 && wk_shim_available() && wk_shim_cuda_available()) { /* no Python call */
        int64_t elems = k->scratch_elems > 0 ? k->scratch_elems : 1, one = 1;
        *scratch = wk_shim_empty_strided_Ref(1, &elems, &one, k->scratch_dtype, t->device, ptr);
        return *scratch ? 0 : -1;
    }
    PyObject *n = PyLong_FromLongLong(k->scratch_elems > 0 ? k->scratch_elems : 1);
    PyObject *kw = n ? Py_BuildValue("{s:O,s:O}", "dtype", t->dtypes[k->scratch_dtype], "device", t->device_obj)
                     : NULL;
    PyObject *args = kw ? PyTuple_Pack(1, n) : NULL;
    *scratch = args ? PyObject_Call(t->empty, args, kw) : NULL;
    Py_XDECREF(n);
    Py_XDECREF(kw);
    Py_XDECREF(args);
    if (!*scratch) return -1;
    PyObject *p = PyObject_CallMethod(*scratch, "data_ptr", NULL);
    if (!p) return -1;
    *ptr = PyLong_AsVoidPtr(p);
    Py_DECREF(p);
    return PyErr_Occurred() ? -1 : 0;
}

void wk_triton_prepare_soon(WkTriton *t) {
    if (t->device >= 0 && !t->prepared) prepare_all(t, 1);
}

int wk_triton_run(WkTriton *t, int step, const WkProgram *p, PyObject *const *bufs, void *const *ptrs) {
    KernelRt *krs = t->steps[step];
    if (!krs) return 0;
    PyObject *scratch = NULL;
    void *scratch_ptr = NULL;
    int rc = -1, entered = 0;
    CUcontext prev = NULL;
    if (t->device < 0) {
        for (int k = 0; k < p->ntriton; k++) {
            if (p->triton[k].xnumel == 0) continue;
            if (p->triton[k].scratch == 1 && new_scratch(t, &p->triton[k], &scratch, &scratch_ptr) < 0) goto done;
            if (run_interpret(t, &krs[k], bufs, scratch) < 0) goto done;
        }
        rc = 0;
        goto done;
    }
    if (!t->prepared) prepare_all(t, 0);
    if (t->soon) {
        PyObject *r = PyObject_CallMethod(t->soon, "wait", NULL);
        Py_XDECREF(r);
        PyErr_Clear(); /* the loads redo what did not compile, and report */
        Py_CLEAR(t->soon);
    }
    CUstream stream;
    if (current_stream(t, &stream) < 0) goto done;
    int tune_now = t->untuned > 0 && may_tune_now(t, stream);
    /* the device's context, once for the step's launches */
    if (enter_ctx(t, &prev) < 0) goto done;
    entered = 1;
    for (int ki = 0; ki < p->ntriton; ki++) {
        KernelRt *kr = &krs[ki];
        const WkTritonKernel *k = kr->k;
        if (k->xnumel == 0) continue;
        if (k->scratch == 1 && new_scratch(t, k, &scratch, &scratch_ptr) < 0) goto done;
        int aligned = 1;
        for (int i = 0; i < k->nparams; i++) aligned &= k->params[i] < 0 || ((uintptr_t)ptrs[k->params[i]] & 15) == 0;
        Loaded *l = chosen_kernel(t, p, kr, ptrs, scratch_ptr, stream, aligned, tune_now);
        if (!l) goto done;
        if (launch(kr, l, &k->configs[kr->chosen], ptrs, scratch_ptr, stream) < 0) goto done;
    }
    rc = 0;
done:
    if (entered) leave_ctx(t, prev);
    /* the caching allocator orders the scratch's reuse after the kernels
     * queued on this stream */
    Py_XDECREF(scratch);
    return rc;
}
