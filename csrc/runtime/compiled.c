/* compiled.c — wick._C.CompiledGraph: a compiled graph Python can call.
 *
 * Built by wk_rt_compile_externs_Ref (wk_compile_plan, then wk_cc_load).
 * Holds the loaded library, one entry point per KERNELS step, the plan of
 * slots and steps, and the extern table (one preprocessed call per entry).
 * A call validates the input tensors (unless capture or torch.compile turned
 * that off because their guards already did), then runs the steps in order
 * in C: a KERNELS step allocates its outputs through PyTorch's C shim
 * (shim.c; torch.empty_strided where the shim is missing) and its
 * temporaries with aligned malloc and runs its entry with the GIL released;
 * on a CUDA device (the TRITON target) outputs and temporaries come from
 * PyTorch's caching allocator and triton_rt.c launches the kernels;
 * an EXTERN step calls PyTorch (the only Python that runs between steps) and
 * checks what came back against the slot's metadata; a VIEW step makes a
 * view of its base slot with one as_strided call (sizes, strides and offset
 * known at compile time). Slots are dropped after
 * their last reader. Returns a tuple of outputs in graph output order.
 *
 * The torch objects used on the hot path (torch.Tensor, the dtypes,
 * torch.empty_strided, interned method names) are looked up once. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "runtime.h"
#include "../codegen/cgen.h"
#include "../lower/lower.h"

typedef int (*EntryFn)(void **buffers); /* nonzero: an index out of range */

typedef struct {
    WkDType dtype;
    int ndim;
    int64_t sizes[WK_MAX_DIMS];
    int64_t strides[WK_MAX_DIMS];
    int64_t numel;
} InputSpec;

/* One entry of the extern table, preprocessed (see runtime.h). */
typedef struct {
    PyObject *fn;
    PyObject *args;       /* tuple template, or NULL: fn(*inputs) */
    PyObject *kwargs;     /* dict template, or NULL */
    int args_dynamic;     /* the templates hold ExternInput placeholders */
    int kwargs_dynamic;
    /* the call as a vectorcall, prepared at load (kwargs keys all str):
     * items[i] for positional i < nargs, then the keyword values in kwnames'
     * order; kind[i] >= 0 is the node's tensor input kind[i], ITEM_CONST the
     * item itself, ITEM_NESTED a container holding placeholders (built per
     * call by substitute_Ref). NULL items: the generic PyObject_Call path. */
    PyObject **items;     /* borrowed from args/kwargs */
    int *kind;
    Py_ssize_t nargs, nitems;
    PyObject *kwnames;    /* tuple of str, or NULL */
    Py_ssize_t npicks;    /* > 0: output k is result[pick[k]] */
    Py_ssize_t *pick;
    WkNativeCall *native; /* the call through PyTorch's C shim (shim_ops.c), or NULL */
} ExternEntry;

typedef struct {
    EntryFn entry;        /* KERNELS */
    void *temps;          /* KERNELS: one block for all TEMP buffers, allocated at the first
                             call and reused (a concurrent call, with the GIL released, gets
                             its own: see temps_busy) */
    int64_t *temp_offset; /* KERNELS: per program buffer, its offset in the block */
    size_t temps_bytes;
    int temps_busy;
    PyObject **out_args;  /* KERNELS: per program buffer, (sizes, strides) for OUTPUT buffers */
    PyObject *view_sizes, *view_strides; /* VIEW: the view slot's, as tuples */
    int nrelease;
    int *release;         /* slots dropped after this step */
} StepRt;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    WkPlan *plan;
    const WkProgram *prog; /* the first KERNELS step's program, for attributes; may be NULL */
    StepRt *steps;
    ExternEntry *externs;
    int nexterns;
    PyObject **slot_args; /* per slot: (sizes, strides) for extern outputs kernels read, else NULL */
    int *input_slot;      /* slot of graph input i */
    WkLib *lib;
    void (*set_num_threads)(int); /* omp_set_num_threads of the kernels' OpenMP, if any */
    int check_inputs;
    int profile;           /* WICK_HOST_PROFILE at compile time: time the phases of each call */
    int alias_views;       /* VIEW steps through the C shim's reinterpret (no autograd view) */
    int cache_hit;
    double compile_time_s;
    int ninputs;
    InputSpec *inputs;
    WkTriton *triton;      /* TRITON target: the kernels' runtime */
    PyObject *device_obj;  /* where outputs are allocated: "cpu" or torch.device("cuda", i) */
    int cuda_device;       /* -1: CPU */
} CompiledObject;

/* wick._C.ExternInput(i): in an extern's call template, stands for the
 * extern node's tensor input i. */
typedef struct {
    PyObject_HEAD
    Py_ssize_t index;
} ExternInputObject;

static PyTypeObject ExternInput_Type;

static PyTypeObject Compiled_Type;

/* ---- torch handles (looked up once) ------------------------------------ */
static struct {
    int ready;
    PyObject *tensor_type;     /* torch.Tensor */
    PyObject *parameter_type;  /* torch.nn.Parameter */
    PyObject *empty_strided;   /* torch.empty_strided */
    PyObject *dtypes[WK_NDTYPES];
    PyObject *s_data_ptr, *s_stride, *s_dtype, *s_shape, *s_is_cpu, *s_copy_, *s_as_strided, *s_storage_offset;
    PyObject *s_data;
    PyObject *alloc_kwnames;   /* ("dtype", "device") */
    PyObject *cpu;             /* "cpu" */
} T;

static int torch_ready(void) {
    if (T.ready) return 0;
    PyObject *torch = PyImport_ImportModule("torch");
    if (!torch) return -1;
    int rc = -1;
    if (!(T.tensor_type = PyObject_GetAttrString(torch, "Tensor"))) goto done;
    PyObject *nn = PyObject_GetAttrString(torch, "nn");
    if (!nn) goto done;
    T.parameter_type = PyObject_GetAttrString(nn, "Parameter");
    Py_DECREF(nn);
    if (!T.parameter_type) goto done;
    if (!(T.empty_strided = PyObject_GetAttrString(torch, "empty_strided"))) goto done;
    for (int dt = 0; dt < WK_NDTYPES; dt++)
        if (!(T.dtypes[dt] = PyObject_GetAttrString(torch, wk_dtype_name((WkDType)dt)))) goto done;
    if (!(T.s_data_ptr = PyUnicode_InternFromString("data_ptr"))) goto done;
    if (!(T.s_stride = PyUnicode_InternFromString("stride"))) goto done;
    if (!(T.s_dtype = PyUnicode_InternFromString("dtype"))) goto done;
    if (!(T.s_shape = PyUnicode_InternFromString("shape"))) goto done;
    if (!(T.s_is_cpu = PyUnicode_InternFromString("is_cpu"))) goto done;
    if (!(T.s_copy_ = PyUnicode_InternFromString("copy_"))) goto done;
    if (!(T.s_as_strided = PyUnicode_InternFromString("as_strided"))) goto done;
    if (!(T.s_data = PyUnicode_InternFromString("data"))) goto done;
    if (!(T.s_storage_offset = PyUnicode_InternFromString("storage_offset"))) goto done;
    if (!(T.alloc_kwnames = Py_BuildValue("(ss)", "dtype", "device"))) goto done;
    if (!(T.cpu = PyUnicode_InternFromString("cpu"))) goto done;
    T.ready = 1;
    rc = 0;
done:
    Py_DECREF(torch);
    return rc;
}

/* GNU OpenMP is not fork-safe: a child forked after a parallel region ran
 * would wait forever on the parent's thread pool, which it does not have.
 * Such a child runs kernels on one thread (as PyTorch does after fork). */
static volatile int ran_kernels, forked_after_kernels;
/* OpenMP's thread count before wick set any (OMP_NUM_THREADS or all cores):
 * what a call uses when WICK_NUM_THREADS is unset. */
static int default_threads;
static void on_fork_child(void) {
    if (ran_kernels) forked_after_kernels = 1;
}

/* The threads a graph compiled now will run its kernels with, for the code
 * generator (one thread: no parallel regions, wk_cgen_c_set_threads):
 * WICK_NUM_THREADS, else OpenMP's count in this process (PyTorch's libgomp,
 * which torch.set_num_threads sets and the kernels share), 0 if unknown. A
 * later change of either runs serial code on one thread still (correct, as
 * inductor's code for the thread count it was compiled with). */
static int kernel_threads(void) {
    long n = wk_env_int(WK_ENV_NUM_THREADS);
    if (n > 0) return (int)n;
    if (default_threads <= 0) {
        int (*max_threads)(void);
        *(void **)&max_threads = dlsym(RTLD_DEFAULT, "omp_get_max_threads");
        if (max_threads) default_threads = max_threads();
    }
    return default_threads > 0 ? default_threads : 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- input validation --------------------------------------------------- */

static PyObject *int_tuple_Ref(const int64_t *v, int n) {
    PyObject *t = PyTuple_New(n);
    if (!t) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (!x) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

/* Reads a tuple of ints into out[]; returns its length, -1 on error, or
 * WK_MAX_DIMS + 1 when it is too long to match anything. */
static int read_ints(PyObject *seq, int64_t *out) {
    if (!PyTuple_Check(seq)) {
        PyErr_SetString(PyExc_TypeError, "wick: expected a tuple of ints");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    if (n > WK_MAX_DIMS) return WK_MAX_DIMS + 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) return -1;
        out[i] = v;
    }
    return (int)n;
}

static void format_ints(char *buf, size_t cap, const int64_t *v, int n) {
    size_t k = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, i ? ", %lld" : "%lld", (long long)v[i]);
    if (k < cap) snprintf(buf + k, cap - k, n == 1 ? ",)" : ")");
}

/* Layout equality where it matters: strides of size-1 dims are never used,
 * and an empty tensor has no elements to address. */
static int same_layout(const InputSpec *s, const int64_t *strides) {
    if (s->numel == 0) return 1;
    for (int d = 0; d < s->ndim; d++)
        if (s->sizes[d] != 1 && s->strides[d] != strides[d]) return 0;
    return 1;
}

static int check_input(const CompiledObject *self, int i, PyObject *t) {
    const InputSpec *s = &self->inputs[i];
    if (!PyObject_TypeCheck(t, (PyTypeObject *)T.tensor_type)) {
        PyErr_Format(PyExc_TypeError, "wick: compiled graph input %d must be a torch.Tensor, not %.100s",
                     i, Py_TYPE(t)->tp_name);
        return -1;
    }
    PyObject *v = PyObject_GetAttr(t, T.s_is_cpu);
    if (!v) return -1;
    int cpu = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (cpu < 0) return -1;
    if (self->cuda_device >= 0) {
        PyObject *dev = cpu ? NULL : PyObject_GetAttrString(t, "device");
        int same = dev ? PyObject_RichCompareBool(dev, self->device_obj, Py_EQ) : 0;
        Py_XDECREF(dev);
        if (same < 0) return -1;
        if (!same) {
            PyErr_Format(PyExc_ValueError, "wick: compiled graph input %d must be on %S", i, self->device_obj);
            return -1;
        }
    } else if (!cpu) {
        PyErr_Format(PyExc_ValueError, "wick: compiled graph input %d must be a CPU tensor", i);
        return -1;
    }
    if (!(v = PyObject_GetAttr(t, T.s_dtype))) return -1;
    int dtype_ok = v == T.dtypes[s->dtype];
    if (!dtype_ok) {
        PyErr_Format(PyExc_ValueError, "wick: compiled graph input %d has dtype %S, expected torch.%s",
                     i, v, wk_dtype_name(s->dtype));
        Py_DECREF(v);
        return -1;
    }
    Py_DECREF(v);
    int64_t sizes[WK_MAX_DIMS], strides[WK_MAX_DIMS];
    char want[256], got[256];
    if (!(v = PyObject_GetAttr(t, T.s_shape))) return -1;
    int n = read_ints(v, sizes);
    Py_DECREF(v);
    if (n < 0) return -1;
    if (n != s->ndim || memcmp(sizes, s->sizes, sizeof(int64_t) * (size_t)n) != 0) {
        format_ints(want, sizeof want, s->sizes, s->ndim);
        format_ints(got, sizeof got, sizes, n > WK_MAX_DIMS ? 0 : n);
        PyErr_Format(PyExc_ValueError, "wick: compiled graph input %d has shape %s, expected %s", i,
                     n > WK_MAX_DIMS ? "(too many dims)" : got, want);
        return -1;
    }
    if (!(v = PyObject_CallMethodNoArgs(t, T.s_stride))) return -1;
    n = read_ints(v, strides);
    Py_DECREF(v);
    if (n < 0) return -1;
    if (n != s->ndim || !same_layout(s, strides)) {
        format_ints(want, sizeof want, s->strides, s->ndim);
        format_ints(got, sizeof got, strides, n > WK_MAX_DIMS ? 0 : n);
        PyErr_Format(PyExc_ValueError, "wick: compiled graph input %d has strides %s, expected %s", i,
                     got, want);
        return -1;
    }
    return 0;
}

static int data_ptr(PyObject *t, void **out) {
    if ((Py_IS_TYPE(t, (PyTypeObject *)T.tensor_type) || Py_IS_TYPE(t, (PyTypeObject *)T.parameter_type)) &&
        wk_shim_data_ptr(t, out))
        return 0; /* no Python call */
    PyObject *p = PyObject_CallMethodNoArgs(t, T.s_data_ptr);
    if (!p) return -1;
    *out = PyLong_AsVoidPtr(p);
    Py_DECREF(p);
    return *out == NULL && PyErr_Occurred() ? -1 : 0;
}

/* ---- the call ----------------------------------------------------------- */

/* A large output is fresh memory from the allocator (glibc maps blocks
 * above its mmap threshold anew on every call), and a kernel's first write
 * to each 4 KiB page faults: for a 64 MiB output that costs more than the
 * kernel's own memory traffic. Asking for transparent huge pages before the
 * first touch (the kernel's stores) makes it 512 times fewer faults. Advice
 * only: where THP is off or the range is not ours to advise, nothing
 * changes. */
enum { HUGE_PAGE = 1 << 21, ADVISE_MIN_BYTES = 4 << 20 };
static void advise_huge_pages(void *ptr, int64_t nbytes) {
#ifdef MADV_HUGEPAGE
    if (nbytes < ADVISE_MIN_BYTES) return;
    uintptr_t lo = ((uintptr_t)ptr + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    uintptr_t hi = ((uintptr_t)ptr + (uintptr_t)nbytes) & ~(uintptr_t)(HUGE_PAGE - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)ptr;
    (void)nbytes;
#endif
}

enum { STACK_BUFS = 16, STACK_SLOTS = 32 };

/* ---- host-time profile (WICK_HOST_PROFILE=1) -----------------------------
 * Where a call's host time goes, summed over the process: the whole call,
 * buffer allocation of kernel steps, kernel launches (C entry or Triton
 * launches), extern calls through Python and through the C shim
 * (shim_ops.c), the check of their outputs, and view steps.
 * Read (and reset) with wick._C.host_profile(). A graph reads the knob when
 * it is compiled; off, each phase costs one branch. */
enum { PH_CALL, PH_ALLOC, PH_LAUNCH, PH_EXTERN, PH_EXTERN_NATIVE, PH_EXTERN_OUT, PH_VIEW, PH_COUNT };
static const char *const phase_names[PH_COUNT] = {"call", "alloc", "launch", "extern", "extern_native", "extern_out",
                                                  "view"};
static struct {
    double seconds[PH_COUNT];
    long long count[PH_COUNT];
} prof;

static void prof_add(int on, int phase, double t0) {
    if (!on) return;
    prof.seconds[phase] += now_s() - t0;
    prof.count[phase]++;
}

/* A new tensor for a kernel step's buffer (new reference), its data pointer
 * in *ptr: through the C shim where it can (no Python call), else
 * torch.empty_strided with the prebuilt (sizes, strides) pair `args` (NULL:
 * built here). */
static PyObject *new_buffer_Ref(const CompiledObject *self, int ndim, const int64_t *sizes,
                                const int64_t *strides, WkDType dtype, PyObject *args, void **ptr) {
    if (wk_shim_available() && (self->cuda_device < 0 || wk_shim_cuda_available()))
        return wk_shim_empty_strided_Ref(ndim, sizes, strides, dtype, self->cuda_device, ptr);
    PyObject *sz = args ? Py_NewRef(PyTuple_GET_ITEM(args, 0)) : int_tuple_Ref(sizes, ndim);
    PyObject *st = !sz ? NULL : args ? Py_NewRef(PyTuple_GET_ITEM(args, 1)) : int_tuple_Ref(strides, ndim);
    PyObject *t = NULL;
    if (st) {
        PyObject *call_args[4] = {sz, st, T.dtypes[dtype], self->device_obj};
        t = PyObject_Vectorcall(T.empty_strided, call_args, 2, T.alloc_kwnames);
    }
    Py_XDECREF(sz);
    Py_XDECREF(st);
    if (t && data_ptr(t, ptr) < 0) Py_CLEAR(t);
    return t;
}

/* Triton under the interpreter takes tensors, not pointers: temporary b as
 * a tensor over its bytes of the step's block (new reference). */
static PyObject *temp_view_Ref(PyObject *block, const WkBufferPlan *bp) {
    PyObject *part = PyObject_CallMethod(block, "narrow", "iLL", 0, (long long)bp->offset, (long long)bp->nbytes);
    PyObject *typed = part ? PyObject_CallMethod(part, "view", "O", T.dtypes[bp->dtype]) : NULL;
    Py_XDECREF(part);
    return typed;
}

static int run_kernels(CompiledObject *self, int step, PyObject **slots) {
    const WkStep *st = &self->plan->steps[step];
    StepRt *rt = &self->steps[step];
    const WkProgram *p = st->program;
    void *stack_ptrs[STACK_BUFS];
    PyObject *stack_objs[STACK_BUFS];
    void **ptrs = stack_ptrs;
    PyObject **objs = stack_objs; /* OUTPUT buffers' tensors (owned) */
    PyObject *temp_block = NULL;  /* Triton: the step's temporaries, one tensor */
    double t0 = self->profile ? now_s() : 0;
    if (p->nbufs > STACK_BUFS) {
        ptrs = PyMem_Calloc((size_t)p->nbufs, sizeof *ptrs);
        objs = PyMem_Calloc((size_t)p->nbufs, sizeof *objs);
        if (!ptrs || !objs) {
            PyMem_Free(ptrs);
            PyMem_Free(objs);
            PyErr_NoMemory();
            return -1;
        }
    } else {
        memset(stack_ptrs, 0, sizeof stack_ptrs);
        memset(stack_objs, 0, sizeof stack_objs);
    }
    int rc = -1, b;
    /* temporaries: the step's reusable block, or a private one if another
     * call of this graph is running it right now (GIL released in kernels);
     * Triton kernels get one block from PyTorch's allocator per call (its
     * reuse is ordered after the kernels queued on the stream), each
     * temporary at the schedule's offset, as on the CPU */
    char *temps = NULL;
    int own_block = 0;
    if (rt->temps_bytes && self->triton) {
        int64_t nbytes = (int64_t)rt->temps_bytes, one = 1;
        void *base = NULL;
        if (!(temp_block = new_buffer_Ref(self, 1, &nbytes, &one, WK_U8, NULL, &base))) goto cleanup;
        temps = base;
    } else if (rt->temps_bytes) {
        if (!rt->temps_busy) {
            if (!rt->temps && (rt->temps = aligned_alloc(64, rt->temps_bytes)))
                advise_huge_pages(rt->temps, (int64_t)rt->temps_bytes);
            temps = rt->temps;
            rt->temps_busy = 1;
            own_block = 1;
        } else {
            temps = aligned_alloc(64, rt->temps_bytes);
        }
        if (!temps) {
            if (own_block) rt->temps_busy = 0;
            PyErr_NoMemory();
            goto cleanup;
        }
    }
    for (b = 0; b < p->nbufs; b++) {
        const WkBufferPlan *bp = &p->bufs[b];
        if (bp->kind == WK_BUF_INPUT) {
            if (data_ptr(slots[st->in_slots[bp->index]], &ptrs[b]) < 0) goto done;
        } else if (bp->kind == WK_BUF_OUTPUT) {
            /* large CPU outputs over the pool's warm blocks (shim.c) */
            if (!self->triton && wk_shim_available()) {
                objs[b] = wk_shim_pooled_Ref(bp->ndim, bp->sizes, bp->strides, bp->dtype, bp->nbytes, &ptrs[b]);
                if (objs[b]) continue; /* pool blocks are advised when first made */
                if (PyErr_Occurred()) goto done;
            }
            objs[b] = new_buffer_Ref(self, bp->ndim, bp->sizes, bp->strides, bp->dtype, rt->out_args[b], &ptrs[b]);
            if (!objs[b]) goto done;
            if (!self->triton) advise_huge_pages(ptrs[b], bp->nbytes);
        } else {
            ptrs[b] = temps + rt->temp_offset[b];
            if (self->triton && self->cuda_device < 0 && !(objs[b] = temp_view_Ref(temp_block, bp))) goto done;
        }
    }
    prof_add(self->profile, PH_ALLOC, t0);
    if (self->profile) t0 = now_s();

    if (self->triton) {
        PyObject *stack_views[STACK_BUFS], **views = stack_views;
        if (p->nbufs > STACK_BUFS && !(views = PyMem_Calloc((size_t)p->nbufs, sizeof *views))) {
            PyErr_NoMemory();
            goto done;
        }
        for (int k = 0; k < p->nbufs; k++)
            views[k] = p->bufs[k].kind == WK_BUF_INPUT ? slots[st->in_slots[p->bufs[k].index]] : objs[k];
        int trc = wk_triton_run(self->triton, step, p, views, ptrs);
        if (views != stack_views) PyMem_Free(views);
        if (trc < 0) goto done;
        prof_add(self->profile, PH_LAUNCH, t0);
        goto outputs;
    }

/* The thread count is per calling thread in OpenMP: set it where we run. */
    long nthreads = 0;
    if (self->set_num_threads) {
        nthreads = wk_env_int(WK_ENV_NUM_THREADS);
        if (nthreads <= 0) nthreads = default_threads;
        if (forked_after_kernels) nthreads = 1;
    }
    ran_kernels = 1;
    EntryFn entry = rt->entry;
    int erc;
    Py_BEGIN_ALLOW_THREADS
    if (nthreads > 0) self->set_num_threads((int)nthreads);
    erc = entry(ptrs);
    Py_END_ALLOW_THREADS
    if (erc) { /* a BOUND check failed (lower.h, "Indirect loads"): eager raises here too */
        PyErr_SetString(PyExc_IndexError, "wick: index out of range in a compiled kernel");
        goto done;
    }
    prof_add(self->profile, PH_LAUNCH, t0);

outputs:
    for (int j = 0; j < st->nout; j++) {
        const WkBufferPlan *bp = &p->bufs[p->output_buf[j]];
        PyObject *o = bp->kind == WK_BUF_INPUT ? slots[st->in_slots[bp->index]] : objs[p->output_buf[j]];
        Py_XSETREF(slots[st->out_slots[j]], Py_NewRef(o));
    }
    rc = 0;
done:
    for (int k = 0; k <= b && k < p->nbufs; k++) Py_XDECREF(objs[k]);
    if (own_block) rt->temps_busy = 0;
    else if (!temp_block) free(temps);
cleanup:
    Py_XDECREF(temp_block);
    if (ptrs != stack_ptrs) {
        PyMem_Free(ptrs);
        PyMem_Free(objs);
    }
    return rc;
}

/* A copy of template `t` with every ExternInput(i) replaced by inputs[i]
 * (tuples, lists and dict values are walked). New reference. */
static PyObject *substitute_Ref(PyObject *t, PyObject *const *inputs, int nin) {
    if (Py_IS_TYPE(t, &ExternInput_Type)) {
        Py_ssize_t i = ((ExternInputObject *)t)->index;
        if (i < 0 || i >= nin) {
            PyErr_Format(PyExc_IndexError, "wick: ExternInput(%zd) but the extern node has %d inputs", i, nin);
            return NULL;
        }
        return Py_NewRef(inputs[i]);
    }
    if (PyTuple_CheckExact(t) || PyList_CheckExact(t)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(t);
        PyObject *r = PyTuple_CheckExact(t) ? PyTuple_New(n) : PyList_New(n);
        if (!r) return NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = substitute_Ref(PySequence_Fast_GET_ITEM(t, i), inputs, nin);
            if (!x) {
                Py_DECREF(r);
                return NULL;
            }
            if (PyTuple_CheckExact(r)) PyTuple_SET_ITEM(r, i, x);
            else PyList_SET_ITEM(r, i, x);
        }
        return r;
    }
    if (PyDict_CheckExact(t)) {
        PyObject *r = PyDict_New(), *k, *v;
        Py_ssize_t pos = 0;
        if (!r) return NULL;
        while (PyDict_Next(t, &pos, &k, &v)) {
            PyObject *x = substitute_Ref(v, inputs, nin);
            if (!x || PyDict_SetItem(r, k, x) < 0) {
                Py_XDECREF(x);
                Py_DECREF(r);
                return NULL;
            }
            Py_DECREF(x);
        }
        return r;
    }
    return Py_NewRef(t);
}

static int read_shape(PyObject *t, int64_t *sizes, int64_t *strides, int *ndim) {
    PyObject *v = PyObject_GetAttr(t, T.s_shape);
    if (!v) return -1;
    int n = read_ints(v, sizes);
    Py_DECREF(v);
    if (n < 0) return -1;
    *ndim = n;
    if (n > WK_MAX_DIMS) return 0;
    if (!(v = PyObject_CallMethodNoArgs(t, T.s_stride))) return -1;
    int m = read_ints(v, strides);
    Py_DECREF(v);
    return m < 0 ? -1 : 0;
}

/* Puts extern output `o` (borrowed) into slot `sl`, checked against the
 * slot's metadata when kernels read it: a dtype or size mismatch raises (the
 * builder's metadata was wrong); other strides are copied into the promised
 * layout. */
static int store_extern_output(CompiledObject *self, const WkStep *st, int k, PyObject *o, PyObject **slots) {
    int sl = st->out_slots[k];
    const WkSlot *s = &self->plan->slots[sl];
    if (!PyObject_TypeCheck(o, (PyTypeObject *)T.tensor_type)) {
        PyErr_Format(PyExc_TypeError, "wick: extern %s returned %.100s for output %d, not a tensor",
                     st->extern_name, Py_TYPE(o)->tp_name, k);
        return -1;
    }
    if (!self->slot_args[sl]) {
        Py_XSETREF(slots[sl], Py_NewRef(o));
        return 0;
    }
    int64_t sizes_store[WK_MAX_DIMS + 1], strides_store[WK_MAX_DIMS + 1];
    const int64_t *sizes = sizes_store, *strides = strides_store;
    int ndim = 0, dtype_ok;
    WkDType dtype;
    if ((Py_IS_TYPE(o, (PyTypeObject *)T.tensor_type) || Py_IS_TYPE(o, (PyTypeObject *)T.parameter_type)) &&
        wk_shim_meta(o, &dtype, &ndim, &sizes, &strides)) { /* no Python call */
        dtype_ok = dtype == s->dtype;
    } else {
        PyObject *dt = PyObject_GetAttr(o, T.s_dtype);
        if (!dt) return -1;
        dtype_ok = dt == T.dtypes[s->dtype];
        Py_DECREF(dt);
        if (dtype_ok && read_shape(o, sizes_store, strides_store, &ndim) < 0) return -1;
    }
    if (!dtype_ok || ndim != s->ndim || memcmp(sizes, s->sizes, sizeof(int64_t) * (size_t)ndim) != 0) {
        char want[256];
        format_ints(want, sizeof want, s->sizes, s->ndim);
        PyErr_Format(PyExc_RuntimeError,
                     "wick: extern %s returned a tensor whose dtype or shape differs from its metadata "
                     "(expected torch.%s%s)", st->extern_name, wk_dtype_name(s->dtype), want);
        return -1;
    }
    int same = 1;
    if (s->numel > 0)
        for (int d = 0; d < ndim; d++)
            if (s->sizes[d] != 1 && s->strides[d] != strides[d]) same = 0;
    if (same) {
        Py_XSETREF(slots[sl], Py_NewRef(o));
        return 0;
    }
    PyObject *call_args[4] = {PyTuple_GET_ITEM(self->slot_args[sl], 0), PyTuple_GET_ITEM(self->slot_args[sl], 1),
                              T.dtypes[s->dtype], self->device_obj};
    PyObject *copy = PyObject_Vectorcall(T.empty_strided, call_args, 2, T.alloc_kwnames);
    if (!copy) return -1;
    PyObject *r = PyObject_CallMethodOneArg(copy, T.s_copy_, o);
    if (!r) {
        Py_DECREF(copy);
        return -1;
    }
    Py_DECREF(r);
    Py_XSETREF(slots[sl], copy);
    return 0;
}

enum { ITEM_CONST = -1, ITEM_NESTED = -2, STACK_ITEMS = 24 };

/* e's call with its prepared items (see ExternEntry): no argument tuple or
 * keyword dict is built, constant items (stride lists and the like) are
 * passed as they are. New reference, NULL with an exception. */
static PyObject *call_prepared(const ExternEntry *e, PyObject *const *in, int nin) {
    PyObject *stack[STACK_ITEMS], **argv = stack;
    char owned_stack[STACK_ITEMS], *owned = owned_stack;
    if (e->nitems > STACK_ITEMS) {
        argv = PyMem_Calloc((size_t)e->nitems, sizeof *argv);
        owned = PyMem_Calloc((size_t)e->nitems, 1);
        if (!argv || !owned) {
            PyMem_Free(argv);
            PyMem_Free(owned);
            return PyErr_NoMemory();
        }
    }
    PyObject *result = NULL;
    Py_ssize_t i;
    for (i = 0; i < e->nitems; i++) {
        int k = e->kind[i];
        owned[i] = 0;
        if (k >= 0) {
            if (k >= nin) {
                PyErr_Format(PyExc_IndexError, "wick: ExternInput(%d) but the extern node has %d inputs", k, nin);
                goto done;
            }
            argv[i] = in[k];
        } else if (k == ITEM_CONST) {
            argv[i] = e->items[i];
        } else {
            if (!(argv[i] = substitute_Ref(e->items[i], in, nin))) goto done;
            owned[i] = 1;
        }
    }
    result = PyObject_Vectorcall(e->fn, argv, (size_t)e->nargs, e->kwnames);
done:
    for (Py_ssize_t j = 0; j < i; j++)
        if (owned[j]) Py_DECREF(argv[j]);
    if (argv != stack) {
        PyMem_Free(argv);
        PyMem_Free(owned);
    }
    return result;
}

static int run_extern(CompiledObject *self, int step, PyObject **slots) {
    const WkStep *st = &self->plan->steps[step];
    const ExternEntry *e = &self->externs[st->extern_index];
    PyObject *stack_in[STACK_BUFS], **in = stack_in;
    double t0 = self->profile ? now_s() : 0;
    if (st->nin > STACK_BUFS && !(in = PyMem_Calloc((size_t)st->nin, sizeof *in))) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < st->nin; i++) in[i] = slots[st->in_slots[i]];
    PyObject *result = NULL, *args = NULL, *kwargs = NULL;
    int rc = -1;
    if (e->native && st->nout <= WK_NATIVE_MAX_OUTPUTS) {
        int ndim[WK_NATIVE_MAX_OUTPUTS];
        const int64_t *sizes[WK_NATIVE_MAX_OUTPUTS], *strides[WK_NATIVE_MAX_OUTPUTS];
        WkDType dtype[WK_NATIVE_MAX_OUTPUTS];
        PyObject *outs[WK_NATIVE_MAX_OUTPUTS];
        for (int k = 0; k < st->nout; k++) {
            const WkSlot *s = &self->plan->slots[st->out_slots[k]];
            ndim[k] = s->ndim;
            sizes[k] = s->sizes;
            strides[k] = s->strides;
            dtype[k] = s->dtype;
        }
        int r = wk_native_call_run(e->native, in, st->nin, ndim, sizes, strides, dtype, outs);
        if (r < 0) goto done;
        if (r > 0) {
            prof_add(self->profile, PH_EXTERN_NATIVE, t0);
            if (self->profile) t0 = now_s();
            int k = 0;
            while (k < st->nout && store_extern_output(self, st, k, outs[k], slots) == 0) k++;
            for (int j = 0; j < st->nout; j++) Py_DECREF(outs[j]);
            if (k < st->nout) goto done;
            prof_add(self->profile, PH_EXTERN_OUT, t0);
            rc = 0;
            goto done;
        }
    }
    if (!e->args) {
        result = PyObject_Vectorcall(e->fn, in, (size_t)st->nin, NULL);
    } else if (e->items) {
        result = call_prepared(e, in, st->nin);
    } else {
        args = e->args_dynamic ? substitute_Ref(e->args, in, st->nin) : Py_NewRef(e->args);
        if (args && e->kwargs) kwargs = e->kwargs_dynamic ? substitute_Ref(e->kwargs, in, st->nin) : Py_NewRef(e->kwargs);
        if (args && (kwargs || !e->kwargs)) result = PyObject_Call(e->fn, args, kwargs);
    }
    if (!result) goto done;
    prof_add(self->profile, PH_EXTERN, t0);
    if (self->profile) t0 = now_s();
    if (e->npicks) {
        for (int k = 0; k < st->nout; k++) {
            PyObject *o = PySequence_GetItem(result, e->pick[k]);
            if (!o) goto done;
            int r = store_extern_output(self, st, k, o, slots);
            Py_DECREF(o);
            if (r < 0) goto done;
        }
    } else if (PyTuple_Check(result) || PyList_Check(result)) {
        if (PySequence_Fast_GET_SIZE(result) < st->nout) {
            PyErr_Format(PyExc_RuntimeError, "wick: extern %s returned %zd items, its node has %d outputs",
                         st->extern_name, PySequence_Fast_GET_SIZE(result), st->nout);
            goto done;
        }
        for (int k = 0; k < st->nout; k++)
            if (store_extern_output(self, st, k, PySequence_Fast_GET_ITEM(result, k), slots) < 0) goto done;
    } else {
        if (st->nout != 1) {
            PyErr_Format(PyExc_RuntimeError, "wick: extern %s returned one value, its node has %d outputs",
                         st->extern_name, st->nout);
            goto done;
        }
        if (store_extern_output(self, st, 0, result, slots) < 0) goto done;
    }
    prof_add(self->profile, PH_EXTERN_OUT, t0);
    rc = 0;
done:
    Py_XDECREF(result);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    if (in != stack_in) PyMem_Free(in);
    return rc;
}

/* base.as_strided(sizes, strides, base.storage_offset() + view_offset):
 * the base slot's layout is the plan's (checked when an extern made it), so
 * the view is the one eager makes. */
static int run_view(CompiledObject *self, int step, PyObject **slots) {
    const WkStep *st = &self->plan->steps[step];
    const StepRt *rt = &self->steps[step];
    PyObject *base = slots[st->in_slots[0]];
    if (self->alias_views && (Py_IS_TYPE(base, (PyTypeObject *)T.tensor_type) ||
                              Py_IS_TYPE(base, (PyTypeObject *)T.parameter_type))) {
        const WkSlot *vs = &self->plan->slots[st->out_slots[0]];
        PyObject *view = wk_shim_alias_Ref(base, vs->ndim, vs->sizes, vs->strides, st->view_offset);
        if (view) {
            Py_XSETREF(slots[st->out_slots[0]], view);
            return 0;
        }
        if (PyErr_Occurred()) return -1;
    }
    /* Without the shim, a plain alias is a view of base.data: a tensor over
     * the same memory with a version counter of its own, as the shim's (a
     * running buffer saved for the backward relies on it, backends.py
     * _StatsInPlace). */
    PyObject *source = self->alias_views ? PyObject_GetAttr(base, T.s_data) : Py_NewRef(base);
    if (!source) return -1;
    PyObject *off = PyObject_CallMethodNoArgs(base, T.s_storage_offset);
    if (!off) {
        Py_DECREF(source);
        return -1;
    }
    long long base_off = PyLong_AsLongLong(off);
    Py_DECREF(off);
    off = (base_off == -1 && PyErr_Occurred()) ? NULL : PyLong_FromLongLong(base_off + st->view_offset);
    if (!off) {
        Py_DECREF(source);
        return -1;
    }
    PyObject *call_args[4] = {source, rt->view_sizes, rt->view_strides, off};
    PyObject *view = PyObject_VectorcallMethod(T.s_as_strided, call_args, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(off);
    Py_DECREF(source);
    if (!view) return -1;
    Py_XSETREF(slots[st->out_slots[0]], view);
    return 0;
}

static PyObject *Compiled_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames) {
    CompiledObject *self = (CompiledObject *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames && PyTuple_GET_SIZE(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "wick: a compiled graph takes its inputs positionally");
        return NULL;
    }
    if (nargs != self->ninputs) {
        PyErr_Format(PyExc_TypeError, "wick: compiled graph takes %d input tensors, got %zd",
                     self->ninputs, nargs);
        return NULL;
    }
    if (self->check_inputs)
        for (int i = 0; i < self->ninputs; i++)
            if (check_input(self, i, args[i]) < 0) return NULL;

    const WkPlan *plan = self->plan;
    double t_call = self->profile ? now_s() : 0;
    PyObject *stack_slots[STACK_SLOTS], **slots = stack_slots;
    if (plan->nslots > STACK_SLOTS) {
        if (!(slots = PyMem_Calloc((size_t)plan->nslots, sizeof *slots))) return PyErr_NoMemory();
    } else {
        memset(stack_slots, 0, sizeof stack_slots);
    }
    PyObject *result = NULL;
    for (int i = 0; i < self->ninputs; i++) Py_XSETREF(slots[self->input_slot[i]], Py_NewRef(args[i]));
    for (int s = 0; s < plan->nsteps; s++) {
        WkStepKind kind = plan->steps[s].kind;
        double tv = self->profile && kind == WK_STEP_VIEW ? now_s() : 0;
        int rc = kind == WK_STEP_KERNELS ? run_kernels(self, s, slots)
                 : kind == WK_STEP_VIEW  ? run_view(self, s, slots)
                                         : run_extern(self, s, slots);
        if (kind == WK_STEP_VIEW) prof_add(self->profile, PH_VIEW, tv);
        if (rc < 0) goto done;
        for (int r = 0; r < self->steps[s].nrelease; r++) Py_CLEAR(slots[self->steps[s].release[r]]);
    }
    result = PyTuple_New(plan->noutputs);
    if (!result) goto done;
    for (int i = 0; i < plan->noutputs; i++) {
        PyObject *o = slots[plan->output_slot[i]];
        if (!o) {
            Py_CLEAR(result);
            PyErr_Format(PyExc_SystemError, "wick: graph output %d was never computed", i);
            goto done;
        }
        PyTuple_SET_ITEM(result, i, Py_NewRef(o));
    }
done:
    for (int k = 0; k < plan->nslots; k++) Py_XDECREF(slots[k]);
    if (slots != stack_slots) PyMem_Free(slots);
    prof_add(self->profile, PH_CALL, t_call);
    return result;
}

/* ---- construction ------------------------------------------------------- */

static void clear_externs(CompiledObject *self) {
    for (int i = 0; i < self->nexterns; i++) {
        ExternEntry *e = &self->externs[i];
        Py_XDECREF(e->fn);
        Py_XDECREF(e->args);
        Py_XDECREF(e->kwargs);
        Py_XDECREF(e->kwnames);
        free(e->items);
        free(e->kind);
        free(e->pick);
        wk_native_call_free(e->native);
    }
    free(self->externs);
    self->externs = NULL;
    self->nexterns = 0;
}

static void Compiled_dealloc(CompiledObject *self) {
    if (self->plan) {
        for (int s = 0; self->steps && s < self->plan->nsteps; s++) {
            StepRt *rt = &self->steps[s];
            const WkProgram *p = self->plan->steps[s].program;
            for (int b = 0; rt->out_args && p && b < p->nbufs; b++) Py_XDECREF(rt->out_args[b]);
            Py_XDECREF(rt->view_sizes);
            Py_XDECREF(rt->view_strides);
            free(rt->out_args);
            free(rt->release);
            free(rt->temps);
            free(rt->temp_offset);
        }
        for (int sl = 0; self->slot_args && sl < self->plan->nslots; sl++) Py_XDECREF(self->slot_args[sl]);
    }
    free(self->steps);
    free(self->slot_args);
    free(self->input_slot);
    clear_externs(self);
    free(self->inputs);
    wk_triton_free(self->triton);
    Py_XDECREF(self->device_obj);
    wk_plan_free(self->plan);
    wk_cc_close(self->lib);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A stage's plan must agree with its slots before any kernel touches memory. */
static int check_program(const WkProgram *p, const WkStep *st, const WkPlan *plan) {
    if (!p->entry || p->nbufs < 0 || (p->nbufs && !p->bufs)) {
        wk_error_set("wick: compiler returned an incomplete program");
        return -1;
    }
    if (p->noutputs != st->nout) {
        wk_error_set("wick: program has %d outputs, its step %d", p->noutputs, st->nout);
        return -1;
    }
    for (int b = 0; b < p->nbufs; b++) {
        const WkBufferPlan *bp = &p->bufs[b];
        if (bp->ndim < 0 || bp->ndim > WK_MAX_DIMS || (int)bp->dtype < 0 || bp->dtype >= WK_NDTYPES) {
            wk_error_set("wick: buffer %d has a bad plan", b);
            return -1;
        }
        if (bp->kind == WK_BUF_INPUT) {
            if (bp->index < 0 || bp->index >= st->nin) {
                wk_error_set("wick: buffer %d reads stage input %d of %d", b, bp->index, st->nin);
                return -1;
            }
            const WkSlot *s = &plan->slots[st->in_slots[bp->index]];
            InputSpec spec = {s->dtype, s->ndim, {0}, {0}, s->numel};
            memcpy(spec.sizes, s->sizes, sizeof spec.sizes);
            memcpy(spec.strides, s->strides, sizeof spec.strides);
            if (bp->dtype != s->dtype || bp->ndim != s->ndim ||
                memcmp(bp->sizes, s->sizes, sizeof(int64_t) * (size_t)s->ndim) != 0 ||
                !same_layout(&spec, bp->strides)) {
                wk_error_set("wick: buffer %d disagrees with its slot's dtype or layout", b);
                return -1;
            }
        } else if (bp->kind == WK_BUF_OUTPUT) {
            for (int d = 0; d < bp->ndim; d++)
                if (bp->sizes[d] < 0) {
                    wk_error_set("wick: buffer %d has a negative size", b);
                    return -1;
                }
        } else if (bp->kind != WK_BUF_TEMP || bp->nbytes < 0 || bp->offset < 0 || bp->offset % 64 ||
                   bp->offset + bp->nbytes > p->temps_bytes) {
            wk_error_set("wick: buffer %d has a bad kind, size or place in the temporaries", b);
            return -1;
        }
    }
    for (int i = 0; i < p->noutputs; i++) {
        int b = p->output_buf ? p->output_buf[i] : -1;
        if (b < 0 || b >= p->nbufs || p->bufs[b].kind == WK_BUF_TEMP) {
            wk_error_set("wick: stage output %d maps to no input or output buffer", i);
            return -1;
        }
    }
    return 0;
}

/* Reads the extern table (see runtime.h) into self->externs. -1 with a
 * Python exception (TypeError/ValueError) on a malformed entry. */
static int scan_placeholders(PyObject *t) {
    if (Py_IS_TYPE(t, &ExternInput_Type)) return 1;
    if (PyTuple_CheckExact(t) || PyList_CheckExact(t)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(t); i++)
            if (scan_placeholders(PySequence_Fast_GET_ITEM(t, i))) return 1;
    } else if (PyDict_CheckExact(t)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(t, &pos, &k, &v))
            if (scan_placeholders(v)) return 1;
    }
    return 0;
}

/* The vectorcall form of e's templates (see ExternEntry); leaves e->items
 * NULL (the generic path) when a keyword is not a str. */
static int prepare_call(ExternEntry *e) {
    Py_ssize_t nargs = PyTuple_GET_SIZE(e->args), nkw = e->kwargs ? PyDict_GET_SIZE(e->kwargs) : 0;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (e->kwargs && PyDict_Next(e->kwargs, &pos, &k, &v))
        if (!PyUnicode_CheckExact(k)) return 0;
    PyObject *names = nkw ? PyTuple_New(nkw) : NULL;
    if (nkw && !names) return -1;
    e->items = wk_xcalloc((size_t)(nargs + nkw) + 1, sizeof *e->items);
    e->kind = wk_xcalloc((size_t)(nargs + nkw) + 1, sizeof *e->kind);
    for (Py_ssize_t i = 0; i < nargs; i++) e->items[i] = PyTuple_GET_ITEM(e->args, i);
    pos = 0;
    for (Py_ssize_t i = 0; e->kwargs && PyDict_Next(e->kwargs, &pos, &k, &v); i++) {
        e->items[nargs + i] = v;
        PyTuple_SET_ITEM(names, i, Py_NewRef(k));
    }
    for (Py_ssize_t i = 0; i < nargs + nkw; i++) {
        PyObject *t = e->items[i];
        e->kind[i] = Py_IS_TYPE(t, &ExternInput_Type) ? (int)((ExternInputObject *)t)->index
                     : scan_placeholders(t)           ? ITEM_NESTED
                                                      : ITEM_CONST;
    }
    e->nargs = nargs;
    e->nitems = nargs + nkw;
    e->kwnames = names;
    return 0;
}

static int load_externs(CompiledObject *self, PyObject *table, int needed) {
    if (!table || table == Py_None) {
        if (needed > 0) {
            PyErr_Format(PyExc_ValueError, "wick: the graph has extern nodes (indices up to %d) but no extern "
                         "table was given", needed - 1);
            return -1;
        }
        return 0;
    }
    PyObject *seq = PySequence_Fast(table, "wick: the extern table must be a list");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < needed) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "wick: the extern table has %zd entries, the graph uses %d", n, needed);
        return -1;
    }
    self->externs = wk_xcalloc((size_t)n + 1, sizeof *self->externs);
    self->nexterns = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        ExternEntry *e = &self->externs[i];
        if (item == Py_None) continue; /* an index no node uses */
        if (!PyTuple_Check(item)) {
            if (!PyCallable_Check(item)) goto bad;
            e->fn = Py_NewRef(item);
            continue;
        }
        Py_ssize_t len = PyTuple_GET_SIZE(item);
        if (len < 2 || len > 4 || !PyCallable_Check(PyTuple_GET_ITEM(item, 0))) goto bad;
        e->fn = Py_NewRef(PyTuple_GET_ITEM(item, 0));
        PyObject *a = PyTuple_GET_ITEM(item, 1);
        if (!(e->args = PySequence_Tuple(a))) goto error;
        e->args_dynamic = scan_placeholders(e->args);
        PyObject *kw = len > 2 ? PyTuple_GET_ITEM(item, 2) : Py_None;
        if (kw != Py_None) {
            if (!PyDict_Check(kw)) goto bad;
            if (!(e->kwargs = PyDict_Copy(kw))) goto error;
            e->kwargs_dynamic = scan_placeholders(e->kwargs);
        }
        if (prepare_call(e) < 0) goto error;
        PyObject *picks = len > 3 ? PyTuple_GET_ITEM(item, 3) : Py_None;
        if (picks != Py_None) {
            PyObject *ps = PySequence_Fast(picks, "wick: an extern's picks must be a sequence of ints");
            if (!ps) goto error;
            e->npicks = PySequence_Fast_GET_SIZE(ps);
            e->pick = wk_xcalloc((size_t)e->npicks + 1, sizeof *e->pick);
            for (Py_ssize_t k = 0; k < e->npicks; k++) {
                e->pick[k] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(ps, k));
                if (e->pick[k] == -1 && PyErr_Occurred()) {
                    Py_DECREF(ps);
                    goto error;
                }
            }
            Py_DECREF(ps);
        }
        continue;
    bad:
        PyErr_Format(PyExc_TypeError, "wick: extern table entry %zd must be a callable, a tuple "
                     "(fn, args[, kwargs[, picks]]) or None (unused)", i);
    error:
        Py_DECREF(seq);
        return -1;
    }
    Py_DECREF(seq);
    /* every node that uses an entry with picks must have as many outputs */
    for (int s = 0; s < self->plan->nsteps; s++) {
        const WkStep *st = &self->plan->steps[s];
        if (st->kind != WK_STEP_EXTERN) continue;
        ExternEntry *e = &self->externs[st->extern_index];
        if (!e->fn) {
            PyErr_Format(PyExc_ValueError, "wick: extern table entry %d (%s) is None but a node uses it",
                         st->extern_index, st->extern_name);
            return -1;
        }
        if (e->npicks && e->npicks != st->nout) {
            PyErr_Format(PyExc_ValueError, "wick: extern %d (%s) picks %zd outputs, its node has %d",
                         st->extern_index, st->extern_name, e->npicks, st->nout);
            return -1;
        }
        if (e->items && !e->native)
            e->native = wk_native_call_prepare(st->extern_name, e->fn, e->items, e->kind, e->nargs, e->nitems,
                                               e->kwnames, e->pick, e->npicks, st->nout, self->cuda_device);
    }
    return 0;
}

/* Per-step runtime data: entries, output allocation arguments, and the
 * slots to drop after each step. */
static int prepare_steps(CompiledObject *self) {
    const WkPlan *plan = self->plan;
    self->steps = wk_xcalloc((size_t)plan->nsteps + 1, sizeof *self->steps);
    self->slot_args = wk_xcalloc((size_t)plan->nslots + 1, sizeof *self->slot_args);
    self->input_slot = wk_xcalloc((size_t)self->ninputs + 1, sizeof(int));
    for (int i = 0; i < self->ninputs; i++) self->input_slot[i] = -1;
    for (int sl = 0; sl < plan->nslots; sl++) {
        const WkSlot *s = &plan->slots[sl];
        if (s->input_index >= 0 && s->input_index < self->ninputs) self->input_slot[s->input_index] = sl;
        int by_extern = s->producer >= 0 && plan->steps[s->producer].kind == WK_STEP_EXTERN;
        if (by_extern && s->read_by_kernels) {
            PyObject *sz = int_tuple_Ref(s->sizes, s->ndim);
            PyObject *st = sz ? int_tuple_Ref(s->strides, s->ndim) : NULL;
            self->slot_args[sl] = st ? PyTuple_Pack(2, sz, st) : NULL;
            Py_XDECREF(sz);
            Py_XDECREF(st);
            if (!self->slot_args[sl]) return -1;
        }
        if (!s->is_output) {
            int at = s->last_step > s->producer ? s->last_step : s->producer;
            if (at < 0) continue; /* an unread input: dropped at the end */
            StepRt *rt = &self->steps[at];
            rt->release = wk_xrealloc(rt->release, sizeof(int) * (size_t)(rt->nrelease + 1));
            rt->release[rt->nrelease++] = sl;
        }
    }
    for (int i = 0; i < self->ninputs; i++)
        if (self->input_slot[i] < 0) {
            PyErr_Format(PyExc_SystemError, "wick: graph input %d has no slot", i);
            return -1;
        }
    for (int s = 0; s < plan->nsteps; s++) {
        const WkStep *st = &plan->steps[s];
        StepRt *rt = &self->steps[s];
        if (st->kind == WK_STEP_VIEW) {
            const WkSlot *vs = &plan->slots[st->out_slots[0]];
            if (!(rt->view_sizes = int_tuple_Ref(vs->sizes, vs->ndim))) return -1;
            if (!(rt->view_strides = int_tuple_Ref(vs->strides, vs->ndim))) return -1;
        }
        if (st->kind != WK_STEP_KERNELS) continue;
        const WkProgram *p = st->program;
        if (!self->triton) *(void **)&rt->entry = wk_cc_symbol(self->lib, p->entry);
        if (!self->triton && !rt->entry) {
            PyErr_Format(PyExc_RuntimeError, "wick: %s", wk_error_get());
            return -1;
        }
        rt->out_args = wk_xcalloc((size_t)p->nbufs + 1, sizeof(PyObject *));
        rt->temp_offset = wk_xcalloc((size_t)p->nbufs + 1, sizeof(int64_t));
        rt->temps_bytes = (size_t)p->temps_bytes;
        for (int b = 0; b < p->nbufs; b++) {
            const WkBufferPlan *bp = &p->bufs[b];
            if (bp->kind == WK_BUF_TEMP) rt->temp_offset[b] = bp->offset; /* the schedule's placement (C) */
            if (bp->kind != WK_BUF_OUTPUT) continue; /* temporaries live in the step's block */
            PyObject *sz = int_tuple_Ref(bp->sizes, bp->ndim);
            PyObject *stt = sz ? int_tuple_Ref(bp->strides, bp->ndim) : NULL;
            rt->out_args[b] = stt ? PyTuple_Pack(2, sz, stt) : NULL;
            Py_XDECREF(sz);
            Py_XDECREF(stt);
            if (!rt->out_args[b]) return -1;
        }
    }
    return 0;
}

PyObject *wk_rt_compile_externs_Ref(const WkGraph *g, PyObject *externs) {
    if (torch_ready() < 0) return NULL;
    double t0 = now_s();
    int ninputs = wk_graph_ninputs(g);
    InputSpec *inputs = wk_xcalloc((size_t)(ninputs ? ninputs : 1), sizeof *inputs);
    WkPlan *plan = NULL;
    WkLib *lib = NULL;
    CompiledObject *self = NULL;
    /* the device: CPU graphs get C kernels (or Triton's interpreter with
     * WICK_TRITON=interpret), graphs on one CUDA device Triton kernels */
    int cuda = -1, several = 0, cpu_node = -2; /* cpu_node: first CPU value's node (-1: an input) */
    /* only nodes the outputs need: a builder may leave dead nodes behind (a
     * native attempt it then replaced by an extern), and the plan drops them */
    char *live = wk_xcalloc((size_t)wk_graph_nnodes(g) + 1, 1);
    for (int i = 0; i < wk_graph_noutputs(g); i++) {
        int node = wk_graph_value(g, wk_graph_output_value(g, i))->node;
        if (node >= 0) live[node] = 1;
    }
    for (int n = wk_graph_nnodes(g) - 1; n >= 0; n--) { /* nodes are in topological order */
        if (!live[n]) continue;
        const WkNode *node = wk_graph_node(g, n);
        for (int i = 0; i < node->ninputs; i++) {
            int producer = wk_graph_value(g, node->inputs[i])->node;
            if (producer >= 0) live[producer] = 1;
        }
    }
    for (int n = -1; n < wk_graph_nnodes(g); n++) {
        if (n >= 0 && !live[n]) continue;
        int count = n < 0 ? ninputs : wk_graph_node(g, n)->noutputs;
        for (int k = 0; k < count; k++) {
            const WkValue *v = n < 0 ? wk_graph_value(g, wk_graph_input_value(g, k))
                                     : wk_graph_value(g, wk_graph_node(g, n)->outputs[k]);
            if (n >= 0 && wk_graph_node(g, n)->op == WK_OP_SCALAR) continue;
            if (v->device.type == WK_DEV_CPU) { if (cpu_node == -2) cpu_node = n; }
            else if (cuda >= 0 && v->device.index != cuda) several = 1;
            else cuda = v->device.index;
        }
    }
    if (several || (cuda >= 0 && cpu_node != -2)) {
        /* name the first CPU value: the message is what a user (and we) debug from */
        const WkNode *cn = cpu_node >= 0 ? wk_graph_node(g, cpu_node) : NULL;
        wk_error_set("wick: the graph has values on several devices (%s%s on the CPU)",
                     several ? "several CUDA devices; " : "",
                     cpu_node == -1 ? "an input" : !cn ? "nothing" :
                     cn->extern_name ? cn->extern_name : wk_op_info(cn->op)->name);
        free(live);
        goto fail;
    }
    free(live);
    int interpret = cuda < 0 && !strcmp(wk_env_str(WK_ENV_TRITON), "interpret");
    WkTarget target = cuda >= 0 || interpret ? WK_TARGET_TRITON : WK_TARGET_C;
    char why[300];
    if (cuda >= 0 && !wk_triton_gpu_available(why, sizeof why)) {
        wk_error_set("wick: CUDA tensors need the CUDA driver: %s", why);
        goto fail;
    }
    for (int i = 0; i < ninputs; i++) {
        const WkValue *v = wk_graph_value(g, wk_graph_input_value(g, i));
        InputSpec *s = &inputs[i];
        s->dtype = v->dtype;
        s->ndim = v->ndim;
        s->numel = 1;
        for (int d = 0; d < v->ndim; d++) {
            if (!wk_sym_is_const(v->sizes[d], &s->sizes[d]) ||
                !wk_sym_is_const(v->strides[d], &s->strides[d])) {
                wk_error_set("wick: input %d has symbolic sizes; the CPU runtime needs static shapes", i);
                goto fail;
            }
            s->numel *= s->sizes[d];
        }
    }
    wk_cgen_c_set_threads(forked_after_kernels ? 1 : kernel_threads());
    plan = wk_compile_plan_for(g, target);
    if (!plan) goto fail;
    for (int s = 0; s < plan->nsteps; s++)
        if (plan->steps[s].kind == WK_STEP_KERNELS && check_program(plan->steps[s].program, &plan->steps[s], plan) < 0)
            goto fail;

    int hit = 0;
    if (target == WK_TARGET_C && plan->source && *plan->source) {
        Py_BEGIN_ALLOW_THREADS
        lib = wk_cc_load(plan->source, &hit);
        Py_END_ALLOW_THREADS
        if (!lib) goto fail;
    }

    self = PyObject_New(CompiledObject, &Compiled_Type);
    if (!self) goto fail;
    memset((char *)self + sizeof(PyObject), 0, sizeof *self - sizeof(PyObject));
    self->vectorcall = Compiled_vectorcall;
    self->plan = plan;
    self->lib = lib;
    self->inputs = inputs;
    self->ninputs = ninputs;
    self->cuda_device = cuda;
    plan = NULL, lib = NULL, inputs = NULL; /* owned by self now */
    if (cuda >= 0) {
        PyObject *torch = PyImport_ImportModule("torch");
        self->device_obj = torch ? PyObject_CallMethod(torch, "device", "si", "cuda", cuda) : NULL;
        Py_XDECREF(torch);
    } else {
        self->device_obj = Py_NewRef(T.cpu);
    }
    if (self->device_obj && target == WK_TARGET_TRITON) self->triton = wk_triton_new(self->plan, cuda);
    if (!self->device_obj || (target == WK_TARGET_TRITON && !self->triton)) {
        /* Triton missing or failing to import is a reason to run eagerly */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyObject *msg = value ? PyObject_Str(value) : NULL;
        const char *text = msg ? PyUnicode_AsUTF8(msg) : NULL;
        wk_error_set("wick: the Triton backend is unavailable: %s", text ? text : "?");
        PyErr_Clear();
        Py_XDECREF(msg);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        Py_DECREF(self);
        return NULL;
    }
    for (int s = 0; s < self->plan->nsteps && !self->prog; s++)
        if (self->plan->steps[s].kind == WK_STEP_KERNELS) self->prog = self->plan->steps[s].program;
    if (self->lib) {
        *(void **)&self->set_num_threads = wk_cc_symbol(self->lib, "omp_set_num_threads");
        if (self->set_num_threads && default_threads <= 0) {
            int (*max_threads)(void);
            *(void **)&max_threads = wk_cc_symbol(self->lib, "omp_get_max_threads");
            default_threads = max_threads ? max_threads() : 0;
            if (default_threads <= 0) self->set_num_threads = NULL;
        }
    }
    wk_error_clear();
    self->check_inputs = 1;
    self->profile = wk_env_int(WK_ENV_HOST_PROFILE) > 0;
    self->cache_hit = hit;
    if (prepare_steps(self) < 0 || load_externs(self, externs, wk_graph_extern_table_size(g)) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->compile_time_s = now_s() - t0;
    wk_log(WK_LOG_PERF, "compiled graph: %d steps, %d kernels, %d native nodes, %d externs, %.3fs%s",
           self->plan->nsteps, self->plan->nkernels, self->plan->nnative, self->plan->nextern,
           self->compile_time_s, self->cache_hit ? " (cached .so)" : "");
    return (PyObject *)self;

fail:
    free(inputs);
    wk_plan_free(plan);
    wk_cc_close(lib);
    return NULL;
}

PyObject *wk_rt_compile_Ref(const WkGraph *g) {
    if (wk_graph_nexterns(g) > 0) {
        wk_error_set("wick: the graph has extern nodes; compile it with its extern table");
        return NULL;
    }
    return wk_rt_compile_externs_Ref(g, NULL);
}

void wk_rt_set_check_inputs(PyObject *compiled, int on) {
    if (compiled && PyObject_TypeCheck(compiled, &Compiled_Type))
        ((CompiledObject *)compiled)->check_inputs = on != 0;
}

/* ---- attributes ---------------------------------------------------------- */

static PyObject *Compiled_get_source(CompiledObject *self, void *c) {
    (void)c;
    return PyUnicode_FromString(self->plan->source ? self->plan->source : "");
}
static PyObject *Compiled_get_summary(CompiledObject *self, void *c) {
    (void)c;
    return PyUnicode_FromString(self->plan->summary ? self->plan->summary : "");
}
static PyObject *Compiled_get_nkernels(CompiledObject *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->plan->nkernels);
}
static PyObject *Compiled_get_compile_time(CompiledObject *self, void *c) {
    (void)c;
    return PyFloat_FromDouble(self->compile_time_s);
}
static PyObject *Compiled_get_cache_hit(CompiledObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->cache_hit);
}
static PyObject *Compiled_get_library_path(CompiledObject *self, void *c) {
    (void)c;
    return PyUnicode_FromString(self->lib ? wk_cc_path(self->lib) : "");
}
static PyObject *Compiled_get_entry(CompiledObject *self, void *c) {
    (void)c;
    return PyUnicode_FromString(self->prog ? self->prog->entry : "");
}
static PyObject *Compiled_get_check_inputs(CompiledObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->check_inputs);
}
static int Compiled_set_check_inputs(CompiledObject *self, PyObject *v, void *c) {
    (void)c;
    int on = v ? PyObject_IsTrue(v) : 1;
    if (on < 0) return -1;
    self->check_inputs = on;
    return 0;
}

static PyObject *Compiled_get_alias_views(CompiledObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->alias_views);
}
static int Compiled_set_alias_views(CompiledObject *self, PyObject *v, void *c) {
    (void)c;
    int on = v ? PyObject_IsTrue(v) : 0;
    if (on < 0) return -1;
    self->alias_views = on;
    return 0;
}

static const char *const buf_kinds[] = {"input", "output", "temp"};

static PyObject *Compiled_get_buffers(CompiledObject *self, void *c) {
    (void)c;
    const WkProgram *p = self->prog;
    if (!p) return PyList_New(0);
    PyObject *list = PyList_New(p->nbufs);
    if (!list) return NULL;
    for (int b = 0; b < p->nbufs; b++) {
        const WkBufferPlan *bp = &p->bufs[b];
        PyObject *sz = int_tuple_Ref(bp->sizes, bp->ndim);
        PyObject *st = sz ? int_tuple_Ref(bp->strides, bp->ndim) : NULL;
        PyObject *d = st ? Py_BuildValue("{s:s,s:i,s:s,s:O,s:O,s:L,s:L}", "kind", buf_kinds[bp->kind],
                                         "index", bp->index, "dtype", wk_dtype_name(bp->dtype),
                                         "sizes", sz, "strides", st, "nbytes", (long long)bp->nbytes,
                                         "offset", (long long)bp->offset)
                         : NULL;
        Py_XDECREF(sz);
        Py_XDECREF(st);
        if (!d) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, b, d);
    }
    return list;
}

static PyObject *Compiled_get_output_buffers(CompiledObject *self, void *c) {
    (void)c;
    if (!self->prog) return PyList_New(0);
    PyObject *list = PyList_New(self->prog->noutputs);
    if (!list) return NULL;
    for (int i = 0; i < self->prog->noutputs; i++)
        PyList_SET_ITEM(list, i, PyLong_FromLong(self->prog->output_buf[i]));
    return list;
}

static PyObject *Compiled_get_steps(CompiledObject *self, void *c) {
    (void)c;
    const WkPlan *plan = self->plan;
    PyObject *list = PyList_New(plan->nsteps);
    if (!list) return NULL;
    for (int s = 0; s < plan->nsteps; s++) {
        const WkStep *st = &plan->steps[s];
        PyObject *ins = PyList_New(st->nin), *outs = ins ? PyList_New(st->nout) : NULL, *d = NULL;
        if (outs) {
            for (int i = 0; i < st->nin; i++) PyList_SET_ITEM(ins, i, PyLong_FromLong(st->in_slots[i]));
            for (int i = 0; i < st->nout; i++) PyList_SET_ITEM(outs, i, PyLong_FromLong(st->out_slots[i]));
            if (st->kind == WK_STEP_KERNELS)
                d = Py_BuildValue("{s:s,s:O,s:O,s:s,s:i}", "kind", "kernels", "inputs", ins, "outputs", outs,
                                  "entry", st->program->entry, "nkernels", st->program->nkernels);
            else if (st->kind == WK_STEP_VIEW)
                d = Py_BuildValue("{s:s,s:O,s:O,s:L}", "kind", "view", "inputs", ins, "outputs", outs,
                                  "offset", (long long)st->view_offset);
            else
                d = Py_BuildValue("{s:s,s:O,s:O,s:i,s:s}", "kind", "extern", "inputs", ins, "outputs", outs,
                                  "extern_index", st->extern_index, "name", st->extern_name);
        }
        Py_XDECREF(ins);
        Py_XDECREF(outs);
        if (!d) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, s, d);
    }
    return list;
}
static PyObject *Compiled_get_nnative(CompiledObject *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->plan->nnative);
}
static PyObject *Compiled_get_nextern(CompiledObject *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->plan->nextern);
}

/* The Triton launches of every KERNELS step (empty for the C target). */
static PyObject *Compiled_get_triton_kernels(CompiledObject *self, void *c) {
    (void)c;
    PyObject *list = PyList_New(0);
    for (int s = 0; list && s < self->plan->nsteps; s++) {
        const WkProgram *p = self->plan->steps[s].program;
        for (int k = 0; p && k < p->ntriton; k++) {
            const WkTritonKernel *tk = &p->triton[k];
            PyObject *params = PyList_New(tk->nparams), *configs = PyList_New(tk->nconfigs), *d = NULL;
            for (int i = 0; params && i < tk->nparams; i++)
                PyList_SET_ITEM(params, i, PyUnicode_FromString(wk_dtype_name(
                                               tk->params[i] >= 0 ? p->bufs[tk->params[i]].dtype : tk->scratch_dtype)));
            for (int i = 0; configs && i < tk->nconfigs; i++)
                PyList_SET_ITEM(configs, i, Py_BuildValue("(iii)", tk->configs[i].xblock, tk->configs[i].rblock,
                                                          tk->configs[i].num_warps));
            if (params && configs)
                d = Py_BuildValue("{s:i,s:s,s:O,s:O,s:L,s:O}", "step", s, "name", tk->name, "params", params,
                                  "configs", configs, "xnumel", (long long)tk->xnumel, "has_r",
                                  tk->has_r ? Py_True : Py_False);
            Py_XDECREF(params);
            Py_XDECREF(configs);
            if (!d || PyList_Append(list, d) < 0) Py_CLEAR(list);
            Py_XDECREF(d);
        }
    }
    return list;
}

static PyGetSetDef Compiled_getset[] = {
    {"source", (getter)Compiled_get_source, NULL, "The generated C source.", NULL},
    {"summary", (getter)Compiled_get_summary, NULL, "One line per kernel.", NULL},
    {"nkernels", (getter)Compiled_get_nkernels, NULL, "Number of loop nests.", NULL},
    {"compile_time_s", (getter)Compiled_get_compile_time, NULL, "lower+codegen+cc seconds.", NULL},
    {"cache_hit", (getter)Compiled_get_cache_hit, NULL, "Whether the .so came from the cache.", NULL},
    {"library_path", (getter)Compiled_get_library_path, NULL, "The loaded shared object.", NULL},
    {"entry", (getter)Compiled_get_entry, NULL, "Name of the entry function.", NULL},
    {"buffers", (getter)Compiled_get_buffers, NULL, "The buffer plan as a list of dicts.", NULL},
    {"output_buffers", (getter)Compiled_get_output_buffers, NULL, "Buffer index of each output.", NULL},
    {"nnative", (getter)Compiled_get_nnative, NULL, "Graph nodes compiled into kernels.", NULL},
    {"nextern", (getter)Compiled_get_nextern, NULL, "Extern nodes (calls into PyTorch).", NULL},
    {"steps", (getter)Compiled_get_steps, NULL, "The steps a call runs, in order, as dicts.", NULL},
    {"check_inputs", (getter)Compiled_get_check_inputs, (setter)Compiled_set_check_inputs,
     "Whether calls validate their input tensors.", NULL},
    {"alias_views", (getter)Compiled_get_alias_views, (setter)Compiled_set_alias_views,
     "Whether view steps make plain aliases through the C shim (no autograd view of the base, "
     "as inductor's views; for AOTAutograd's graphs), not Tensor.as_strided.", NULL},
    {"triton_kernels", (getter)Compiled_get_triton_kernels, NULL,
     "Triton launches: step, name, param dtypes, configs (XBLOCK, RBLOCK, warps), xnumel, has_r.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyObject *wk_rt_describe_Ref(PyObject *compiled) {
    if (!compiled || !PyObject_TypeCheck(compiled, &Compiled_Type)) {
        PyErr_SetString(PyExc_TypeError, "wick: describe() expects a CompiledGraph");
        return NULL;
    }
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    static const char *const keys[] = {"source", "summary", "nkernels", "compile_time_s",
                                       "cache_hit", "library_path", "entry", "buffers",
                                       "output_buffers", "nnative", "nextern", "steps"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        PyObject *v = Compiled_getset[k].get(compiled, NULL);
        if (!v || PyDict_SetItemString(d, keys[k], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

static PyObject *Compiled_describe(PyObject *self, PyObject *unused) {
    (void)unused;
    return wk_rt_describe_Ref(self);
}

static PyObject *Compiled_compile_kernels_soon(PyObject *self, PyObject *unused) {
    (void)unused;
    CompiledObject *c = (CompiledObject *)self;
    if (c->triton) wk_triton_prepare_soon(c->triton);
    Py_RETURN_NONE;
}

static PyObject *Compiled_repr(CompiledObject *self) {
    return PyUnicode_FromFormat("<wick._C.CompiledGraph: %d inputs, %d outputs, %d kernels, %d externs>",
                                self->ninputs, self->plan->noutputs, self->plan->nkernels, self->plan->nextern);
}

static PyMethodDef Compiled_methods[] = {
    {"describe", Compiled_describe, METH_NOARGS, "Source, summary and timings as a dict."},
    {"compile_kernels_soon", Compiled_compile_kernels_soon, METH_NOARGS,
     "Starts compiling the GPU kernels its first call needs, without waiting (a graph that runs later: a "
     "training graph's backward); the first call waits for them. A no-op on the CPU or once started."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject Compiled_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wick._C.CompiledGraph",
    .tp_basicsize = sizeof(CompiledObject),
    .tp_dealloc = (destructor)Compiled_dealloc,
    .tp_vectorcall_offset = offsetof(CompiledObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = (reprfunc)Compiled_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A graph compiled by wick: call it with the graph's input tensors.",
    .tp_methods = Compiled_methods,
    .tp_getset = Compiled_getset,
};

/* ---- ExternInput ---------------------------------------------------------- */

static PyObject *ExternInput_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"index", NULL};
    Py_ssize_t index;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n:ExternInput", kwlist, &index)) return NULL;
    if (index < 0) {
        PyErr_SetString(PyExc_ValueError, "wick: ExternInput index must be >= 0");
        return NULL;
    }
    ExternInputObject *self = (ExternInputObject *)type->tp_alloc(type, 0);
    if (self) self->index = index;
    return (PyObject *)self;
}

static PyObject *ExternInput_repr(ExternInputObject *self) {
    return PyUnicode_FromFormat("ExternInput(%zd)", self->index);
}

static PyObject *ExternInput_get_index(ExternInputObject *self, void *c) {
    (void)c;
    return PyLong_FromSsize_t(self->index);
}

static PyGetSetDef ExternInput_getset[] = {
    {"index", (getter)ExternInput_get_index, NULL, "Which tensor input of the extern node.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ExternInput_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wick._C.ExternInput",
    .tp_basicsize = sizeof(ExternInputObject),
    .tp_repr = (reprfunc)ExternInput_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ExternInput(i): the extern node's tensor input i, in a call template.",
    .tp_new = ExternInput_new,
    .tp_getset = ExternInput_getset,
};

static PyObject *py_cache_dir(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyUnicode_FromString(wk_cc_cache_dir());
}

/* host_profile(reset=False): {phase: (count, seconds)} of the graphs
 * compiled with WICK_HOST_PROFILE=1, summed since the last reset. */
static PyObject *py_host_profile(PyObject *self, PyObject *args) {
    (void)self;
    int reset = 0;
    if (!PyArg_ParseTuple(args, "|p:host_profile", &reset)) return NULL;
    PyObject *d = PyDict_New();
    for (int ph = 0; d && ph < PH_COUNT; ph++) {
        PyObject *v = Py_BuildValue("(Ld)", prof.count[ph], prof.seconds[ph]);
        if (!v || PyDict_SetItemString(d, phase_names[ph], v) < 0) Py_CLEAR(d);
        Py_XDECREF(v);
    }
    if (d && reset) memset(&prof, 0, sizeof prof);
    return d;
}

static PyObject *py_output_pool_bytes(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyLong_FromLongLong((long long)wk_shim_pool_cached_bytes());
}

static PyObject *py_set_gelu_inf_is_nan(PyObject *self, PyObject *flag) {
    (void)self;
    int v = PyObject_IsTrue(flag);
    if (v < 0) return NULL;
    wk_lower_set_gelu_inf_is_nan(v);
    Py_RETURN_NONE;
}

static PyMethodDef rt_functions[] = {
    {"cache_dir", py_cache_dir, METH_NOARGS, "The compiled-artifact cache directory in use."},
    {"host_profile", py_host_profile, METH_VARARGS,
     "host_profile(reset=False): {phase: (count, seconds)} of graphs compiled with WICK_HOST_PROFILE=1."},
    {"set_gelu_inf_is_nan", py_set_gelu_inf_is_nan, METH_O,
     "set_gelu_inf_is_nan(flag): lowered gelu(+inf) in float32/bfloat16 gives NaN (torch's AVX-512 kernel) or inf."},
    {"output_pool_bytes", py_output_pool_bytes, METH_NOARGS,
     "Bytes of freed large outputs the output pool holds for reuse (runtime/shim.c)."},
    {NULL, NULL, 0, NULL},
};

/* Called by wk_rt_init (pygraph.c). */
int wk_rt_compiled_init(PyObject *module);
int wk_rt_compiled_init(PyObject *module) {
    static int atfork_done;
    if (!atfork_done && pthread_atfork(NULL, NULL, on_fork_child) == 0) atfork_done = 1;
    if (PyType_Ready(&Compiled_Type) < 0) return -1;
    if (PyModule_AddObjectRef(module, "CompiledGraph", (PyObject *)&Compiled_Type) < 0) return -1;
    if (PyType_Ready(&ExternInput_Type) < 0) return -1;
    if (PyModule_AddObjectRef(module, "ExternInput", (PyObject *)&ExternInput_Type) < 0) return -1;
    return PyModule_AddFunctions(module, rt_functions);
}
