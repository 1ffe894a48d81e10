/* compiled.c — wick._C.CompiledGraph: a compiled graph Python can call.
 *
 * Built by wk_rt_compile_Ref (wk_compile_graph, then wk_cc_load). Holds the
 * loaded library, the entry point and the buffer plan. A call validates the
 * input tensors against the plan (unless capture turned that off because its
 * guards already did), allocates outputs with torch.empty_strided and
 * temporaries with aligned malloc, runs the entry with the GIL released, and
 * returns a tuple of outputs in graph output order. No Python code runs on
 * that path: only C-level calls into torch's tensor methods.
 *
 * The torch objects used on the hot path (torch.Tensor, the dtypes,
 * torch.empty_strided, interned method names) are looked up once. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime.h"

typedef void (*EntryFn)(void **buffers);

typedef struct {
    WkDType dtype;
    int ndim;
    int64_t sizes[WK_MAX_DIMS];
    int64_t strides[WK_MAX_DIMS];
    int64_t numel;
} InputSpec;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    WkProgram *prog;
    WkLib *lib;
    EntryFn entry;
    void (*set_num_threads)(int); /* omp_set_num_threads of the kernels' OpenMP, if any */
    int check_inputs;
    int cache_hit;
    double compile_time_s;
    int ninputs;
    InputSpec *inputs;
    PyObject **out_args; /* per buffer: (sizes, strides) tuple for OUTPUT buffers, else NULL */
    int ntemps;
} CompiledObject;

static PyTypeObject Compiled_Type;

/* ---- torch handles (looked up once) ------------------------------------ */
static struct {
    int ready;
    PyObject *tensor_type;     /* torch.Tensor */
    PyObject *empty_strided;   /* torch.empty_strided */
    PyObject *dtypes[WK_NDTYPES];
    PyObject *s_data_ptr, *s_stride, *s_dtype, *s_shape, *s_is_cpu;
    PyObject *alloc_kwnames;   /* ("dtype", "device") */
    PyObject *cpu;             /* "cpu" */
} T;

static int torch_ready(void) {
    if (T.ready) return 0;
    PyObject *torch = PyImport_ImportModule("torch");
    if (!torch) return -1;
    int rc = -1;
    if (!(T.tensor_type = PyObject_GetAttrString(torch, "Tensor"))) goto done;
    if (!(T.empty_strided = PyObject_GetAttrString(torch, "empty_strided"))) goto done;
    for (int dt = 0; dt < WK_NDTYPES; dt++)
        if (!(T.dtypes[dt] = PyObject_GetAttrString(torch, wk_dtype_name((WkDType)dt)))) goto done;
    if (!(T.s_data_ptr = PyUnicode_InternFromString("data_ptr"))) goto done;
    if (!(T.s_stride = PyUnicode_InternFromString("stride"))) goto done;
    if (!(T.s_dtype = PyUnicode_InternFromString("dtype"))) goto done;
    if (!(T.s_shape = PyUnicode_InternFromString("shape"))) goto done;
    if (!(T.s_is_cpu = PyUnicode_InternFromString("is_cpu"))) goto done;
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
    if (!cpu) {
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
    PyObject *p = PyObject_CallMethodNoArgs(t, T.s_data_ptr);
    if (!p) return -1;
    *out = PyLong_AsVoidPtr(p);
    Py_DECREF(p);
    return *out == NULL && PyErr_Occurred() ? -1 : 0;
}

/* ---- the call ----------------------------------------------------------- */

enum { STACK_BUFS = 16 };

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

    const WkProgram *p = self->prog;
    void *stack_ptrs[STACK_BUFS];
    PyObject *stack_objs[STACK_BUFS];
    void **ptrs = stack_ptrs;
    PyObject **objs = stack_objs; /* OUTPUT buffers' tensors (owned) */
    if (p->nbufs > STACK_BUFS) {
        ptrs = PyMem_Calloc((size_t)p->nbufs, sizeof *ptrs);
        objs = PyMem_Calloc((size_t)p->nbufs, sizeof *objs);
        if (!ptrs || !objs) {
            PyMem_Free(ptrs);
            PyMem_Free(objs);
            return PyErr_NoMemory();
        }
    } else {
        memset(stack_ptrs, 0, sizeof stack_ptrs);
        memset(stack_objs, 0, sizeof stack_objs);
    }
    PyObject *result = NULL;
    int b;
    for (b = 0; b < p->nbufs; b++) {
        const WkBufferPlan *bp = &p->bufs[b];
        if (bp->kind == WK_BUF_INPUT) {
            if (data_ptr(args[bp->index], &ptrs[b]) < 0) goto done;
        } else if (bp->kind == WK_BUF_OUTPUT) {
            PyObject *call_args[4] = {PyTuple_GET_ITEM(self->out_args[b], 0),
                                      PyTuple_GET_ITEM(self->out_args[b], 1), T.dtypes[bp->dtype],
                                      T.cpu};
            objs[b] = PyObject_Vectorcall(T.empty_strided, call_args, 2, T.alloc_kwnames);
            if (!objs[b] || data_ptr(objs[b], &ptrs[b]) < 0) goto done;
        } else {
            size_t n = ((size_t)(bp->nbytes > 0 ? bp->nbytes : 1) + 63) & ~(size_t)63;
            ptrs[b] = aligned_alloc(64, n);
            if (!ptrs[b]) {
                PyErr_NoMemory();
                goto done;
            }
        }
    }

    /* The thread count is per calling thread in OpenMP: set it where we run. */
    long nthreads = 0;
    if (self->set_num_threads) {
        nthreads = wk_env_int(WK_ENV_NUM_THREADS);
        if (nthreads <= 0) nthreads = default_threads;
        if (forked_after_kernels) nthreads = 1;
    }
    ran_kernels = 1;
    Py_BEGIN_ALLOW_THREADS
    if (nthreads > 0) self->set_num_threads((int)nthreads);
    self->entry(ptrs);
    Py_END_ALLOW_THREADS

    result = PyTuple_New(p->noutputs);
    if (!result) goto done;
    for (int i = 0; i < p->noutputs; i++) {
        const WkBufferPlan *bp = &p->bufs[p->output_buf[i]];
        PyObject *o = bp->kind == WK_BUF_INPUT ? args[bp->index] : objs[p->output_buf[i]];
        PyTuple_SET_ITEM(result, i, Py_NewRef(o));
    }
done:
    for (int k = 0; k <= b && k < p->nbufs; k++) {
        if (p->bufs[k].kind == WK_BUF_TEMP) free(ptrs[k]);
        Py_XDECREF(objs[k]);
    }
    if (ptrs != stack_ptrs) {
        PyMem_Free(ptrs);
        PyMem_Free(objs);
    }
    return result;
}

/* ---- construction ------------------------------------------------------- */

static void Compiled_dealloc(CompiledObject *self) {
    if (self->out_args) {
        for (int b = 0; b < self->prog->nbufs; b++) Py_XDECREF(self->out_args[b]);
        free(self->out_args);
    }
    free(self->inputs);
    if (self->prog) wk_program_free(self->prog);
    wk_cc_close(self->lib);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The plan must agree with the graph before any kernel touches memory. */
static int check_plan(const WkProgram *p, const WkGraph *g, const InputSpec *inputs) {
    int ninputs = wk_graph_ninputs(g);
    if (!p->source || !p->entry || p->nbufs < 0 || (p->nbufs && !p->bufs)) {
        wk_error_set("wick: compiler returned an incomplete program");
        return -1;
    }
    if (p->noutputs != wk_graph_noutputs(g)) {
        wk_error_set("wick: program has %d outputs, graph has %d", p->noutputs, wk_graph_noutputs(g));
        return -1;
    }
    for (int b = 0; b < p->nbufs; b++) {
        const WkBufferPlan *bp = &p->bufs[b];
        if (bp->ndim < 0 || bp->ndim > WK_MAX_DIMS || (int)bp->dtype < 0 || bp->dtype >= WK_NDTYPES) {
            wk_error_set("wick: buffer %d has a bad plan", b);
            return -1;
        }
        if (bp->kind == WK_BUF_INPUT) {
            if (bp->index < 0 || bp->index >= ninputs) {
                wk_error_set("wick: buffer %d reads graph input %d of %d", b, bp->index, ninputs);
                return -1;
            }
            const InputSpec *s = &inputs[bp->index];
            if (bp->dtype != s->dtype || bp->ndim != s->ndim ||
                memcmp(bp->sizes, s->sizes, sizeof(int64_t) * (size_t)s->ndim) != 0 ||
                !same_layout(s, bp->strides)) {
                wk_error_set("wick: buffer %d disagrees with graph input %d's dtype or layout", b,
                             bp->index);
                return -1;
            }
        } else if (bp->kind == WK_BUF_OUTPUT) {
            for (int d = 0; d < bp->ndim; d++)
                if (bp->sizes[d] < 0) {
                    wk_error_set("wick: buffer %d has a negative size", b);
                    return -1;
                }
        } else if (bp->kind != WK_BUF_TEMP || bp->nbytes < 0) {
            wk_error_set("wick: buffer %d has a bad kind or size", b);
            return -1;
        }
    }
    for (int i = 0; i < p->noutputs; i++) {
        int b = p->output_buf ? p->output_buf[i] : -1;
        if (b < 0 || b >= p->nbufs || p->bufs[b].kind == WK_BUF_TEMP) {
            wk_error_set("wick: graph output %d maps to no input or output buffer", i);
            return -1;
        }
    }
    return 0;
}

PyObject *wk_rt_compile_Ref(const WkGraph *g) {
    if (torch_ready() < 0) return NULL;
    double t0 = now_s();
    int ninputs = wk_graph_ninputs(g);
    InputSpec *inputs = wk_xcalloc((size_t)(ninputs ? ninputs : 1), sizeof *inputs);
    WkProgram *prog = NULL;
    WkLib *lib = NULL;
    CompiledObject *self = NULL;
    for (int i = 0; i < ninputs; i++) {
        const WkValue *v = wk_graph_value(g, wk_graph_input_value(g, i));
        InputSpec *s = &inputs[i];
        if (v->device.type != WK_DEV_CPU) {
            wk_error_set("wick: input %d is on a CUDA device; wick has no GPU backend yet", i);
            goto fail;
        }
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
    prog = wk_compile_graph(g);
    if (!prog) goto fail;
    if (check_plan(prog, g, inputs) < 0) goto fail;

    int hit = 0;
    Py_BEGIN_ALLOW_THREADS
    lib = wk_cc_load(prog->source, &hit);
    Py_END_ALLOW_THREADS
    if (!lib) goto fail;
    EntryFn entry;
    *(void **)&entry = wk_cc_symbol(lib, prog->entry);
    if (!entry) goto fail;

    self = PyObject_New(CompiledObject, &Compiled_Type);
    if (!self) goto fail;
    self->vectorcall = Compiled_vectorcall;
    self->prog = prog;
    self->lib = lib;
    self->entry = entry;
    *(void **)&self->set_num_threads = wk_cc_symbol(lib, "omp_set_num_threads");
    if (self->set_num_threads && default_threads <= 0) {
        int (*max_threads)(void);
        *(void **)&max_threads = wk_cc_symbol(lib, "omp_get_max_threads");
        default_threads = max_threads ? max_threads() : 0;
        if (default_threads <= 0) self->set_num_threads = NULL;
    }
    wk_error_clear();
    self->check_inputs = 1;
    self->cache_hit = hit;
    self->ninputs = ninputs;
    self->inputs = inputs;
    self->ntemps = 0;
    self->out_args = wk_xcalloc((size_t)(prog->nbufs ? prog->nbufs : 1), sizeof(PyObject *));
    prog = NULL, lib = NULL, inputs = NULL; /* owned by self now */
    for (int b = 0; b < self->prog->nbufs; b++) {
        const WkBufferPlan *bp = &self->prog->bufs[b];
        if (bp->kind == WK_BUF_TEMP) self->ntemps++;
        if (bp->kind != WK_BUF_OUTPUT) continue;
        PyObject *sz = int_tuple_Ref(bp->sizes, bp->ndim);
        PyObject *st = sz ? int_tuple_Ref(bp->strides, bp->ndim) : NULL;
        self->out_args[b] = st ? PyTuple_Pack(2, sz, st) : NULL;
        Py_XDECREF(sz);
        Py_XDECREF(st);
        if (!self->out_args[b]) {
            Py_DECREF(self);
            return NULL;
        }
    }
    self->compile_time_s = now_s() - t0;
    wk_log(WK_LOG_PERF, "compiled graph: %d kernels, %.3fs%s", self->prog->nkernels,
           self->compile_time_s, self->cache_hit ? " (cached .so)" : "");
    return (PyObject *)self;

fail:
    free(inputs);
    if (prog) wk_program_free(prog);
    wk_cc_close(lib);
    return NULL;
}

void wk_rt_set_check_inputs(PyObject *compiled, int on) {
    if (compiled && PyObject_TypeCheck(compiled, &Compiled_Type))
        ((CompiledObject *)compiled)->check_inputs = on != 0;
}

/* ---- attributes ---------------------------------------------------------- */

static PyObject *Compiled_get_source(CompiledObject *self, void *c) {
    (void)c;
    return PyUnicode_FromString(self->prog->source);
}
static PyObject *Compiled_get_summary(CompiledObject *self, void *c) {
    (void)c;
    return PyUnicode_FromString(self->prog->summary ? self->prog->summary : "");
}
static PyObject *Compiled_get_nkernels(CompiledObject *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->prog->nkernels);
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
    return PyUnicode_FromString(wk_cc_path(self->lib));
}
static PyObject *Compiled_get_entry(CompiledObject *self, void *c) {
    (void)c;
    return PyUnicode_FromString(self->prog->entry);
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

static const char *const buf_kinds[] = {"input", "output", "temp"};

static PyObject *Compiled_get_buffers(CompiledObject *self, void *c) {
    (void)c;
    const WkProgram *p = self->prog;
    PyObject *list = PyList_New(p->nbufs);
    if (!list) return NULL;
    for (int b = 0; b < p->nbufs; b++) {
        const WkBufferPlan *bp = &p->bufs[b];
        PyObject *sz = int_tuple_Ref(bp->sizes, bp->ndim);
        PyObject *st = sz ? int_tuple_Ref(bp->strides, bp->ndim) : NULL;
        PyObject *d = st ? Py_BuildValue("{s:s,s:i,s:s,s:O,s:O,s:L}", "kind", buf_kinds[bp->kind],
                                         "index", bp->index, "dtype", wk_dtype_name(bp->dtype),
                                         "sizes", sz, "strides", st, "nbytes", (long long)bp->nbytes)
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
    PyObject *list = PyList_New(self->prog->noutputs);
    if (!list) return NULL;
    for (int i = 0; i < self->prog->noutputs; i++)
        PyList_SET_ITEM(list, i, PyLong_FromLong(self->prog->output_buf[i]));
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
    {"check_inputs", (getter)Compiled_get_check_inputs, (setter)Compiled_set_check_inputs,
     "Whether calls validate their input tensors.", NULL},
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
                                       "cache_hit", "library_path", "entry", "buffers"};
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

static PyObject *Compiled_repr(CompiledObject *self) {
    return PyUnicode_FromFormat("<wick._C.CompiledGraph: %d inputs, %d outputs, %d kernels>",
                                self->ninputs, self->prog->noutputs, self->prog->nkernels);
}

static PyMethodDef Compiled_methods[] = {
    {"describe", Compiled_describe, METH_NOARGS, "Source, summary and timings as a dict."},
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

static PyObject *py_cache_dir(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyUnicode_FromString(wk_cc_cache_dir());
}

static PyMethodDef rt_functions[] = {
    {"cache_dir", py_cache_dir, METH_NOARGS, "The compiled-artifact cache directory in use."},
    {NULL, NULL, 0, NULL},
};

/* Called by wk_rt_init (pygraph.c). */
int wk_rt_compiled_init(PyObject *module);
int wk_rt_compiled_init(PyObject *module) {
    static int atfork_done;
    if (!atfork_done && pthread_atfork(NULL, NULL, on_fork_child) == 0) atfork_done = 1;
    if (PyType_Ready(&Compiled_Type) < 0) return -1;
    if (PyModule_AddObjectRef(module, "CompiledGraph", (PyObject *)&Compiled_Type) < 0) return -1;
    return PyModule_AddFunctions(module, rt_functions);
}
