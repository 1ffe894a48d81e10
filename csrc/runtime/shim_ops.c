/* shim_ops.c — extern calls made from C, with no Python between steps.
 *
 * The extern calls that real models make most (matmuls, convolutions and
 * their backward, pooling and its backward, attention) go through PyTorch's
 * C shim instead of a Python call of the OpOverload: the per-device
 * functions AOTInductor's compiled models call
 * (torch/csrc/inductor/aoti_torch/generated/c_shim_{cpu,cuda}.h:
 * aoti_torch_cpu_mm_out, aoti_torch_cuda_convolution, ...), found with dlsym
 * in the libtorch_cpu / libtorch_cuda this process loaded. A Python call
 * parses its arguments, enters the dispatcher and walks its keys on every
 * call; here the arguments were read once, when the graph was compiled, and
 * the call goes straight to the device's kernel. Out-variant ops (mm, addmm,
 * bmm, baddbmm) write into an output allocated from the slot's planned
 * layout, on the graph's device (PyTorch's caching allocator on CUDA).
 *
 * Those functions call the device's kernel directly: no autograd, no
 * Python dispatch modes, no tensor subclasses. So a call is made natively
 * only when none of that could apply, checked at each call: grad mode off
 * (as in AOTAutograd's compiled forward and backward and under no_grad), the
 * tensors exact torch.Tensor or Parameter, no TorchDispatchMode and no
 * functorch transform active. Otherwise, or when the shim reports an error,
 * wk_native_call_run answers 0 before anything ran and the runtime makes the
 * Python call, which gives eager's behaviour (and eager's error). Only
 * floating-point results go native (integer matmuls keep the Python call),
 * max pooling's int64 indices and cumsum's prefix sums apart (integers
 * whatever the input, or the input's integers: models sum masks). Attention
 * goes native without dropout only (dropout_p == 0). convolution_backward
 * goes native when every result the graph reads is one its output_mask asks
 * for (the others are undefined tensors). Each op has its CPU and CUDA
 * symbol (same signatures); the CUDA entries of convolution_backward and the
 * pooling ops follow c_shim_cuda.h and have not run on a GPU yet. Batch norm
 * has no shim function: 16-bit batch norm, which wick/backends.py keeps
 * extern, stays a Python call. Profiler traces show these calls' device
 * kernels but not their aten:: CPU events.
 *
 * WICK_NATIVE_EXTERNS=0 (read when a graph is compiled) turns it off.
 *
 * Owns: the WkNativeCall records (one per extern step that has a native
 * form) and the process-wide resolved torch callables used for the checks.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

typedef void *AtenTensorHandle;
typedef int32_t AOTITorchError;

typedef enum {
    OP_MM,
    OP_ADDMM,
    OP_BMM,
    OP_BADDBMM,
    OP_CONVOLUTION,
    OP_FLASH_ATTENTION,     /* CUDA: 9 results (4 tensors, 2 ints, 3 tensors) */
    OP_EFFICIENT_ATTENTION, /* CUDA: 4 tensors */
    OP_CUDNN_ATTENTION,     /* CUDA: as flash */
    OP_FLASH_ATTENTION_CPU, /* CPU: 2 tensors */
    OP_CONVOLUTION_BACKWARD, /* grad_input, grad_weight, grad_bias: undefined where output_mask is false */
    OP_MAX_POOL2D,          /* values and int64 indices */
    OP_MAX_POOL2D_BACKWARD,
    OP_AVG_POOL2D,
    OP_AVG_POOL2D_BACKWARD,
    OP_ADAPTIVE_AVG_POOL2D,
    OP_ADAPTIVE_AVG_POOL2D_BACKWARD,
    OP_CUMSUM,
    OP_COUNT
} NativeOp;

static const struct {
    const char *aten, *cpu, *cuda;
    int nresults;           /* results of the op (1 for the out variants) */
    unsigned int_results;   /* bit r: result r may be an integer tensor (max pooling's indices, cumsum's sums) */
} OPS[OP_COUNT] = {
    [OP_MM] = {"aten.mm.default", "aoti_torch_cpu_mm_out", "aoti_torch_cuda_mm_out", 1},
    [OP_ADDMM] = {"aten.addmm.default", "aoti_torch_cpu_addmm_out", "aoti_torch_cuda_addmm_out", 1},
    [OP_BMM] = {"aten.bmm.default", "aoti_torch_cpu_bmm_out", "aoti_torch_cuda_bmm_out", 1},
    [OP_BADDBMM] = {"aten.baddbmm.default", "aoti_torch_cpu_baddbmm_out", "aoti_torch_cuda_baddbmm_out", 1},
    [OP_CONVOLUTION] = {"aten.convolution.default", "aoti_torch_cpu_convolution", "aoti_torch_cuda_convolution", 1},
    [OP_FLASH_ATTENTION] = {"aten._scaled_dot_product_flash_attention.default", NULL,
                            "aoti_torch_cuda__scaled_dot_product_flash_attention", 9},
    [OP_EFFICIENT_ATTENTION] = {"aten._scaled_dot_product_efficient_attention.default", NULL,
                                "aoti_torch_cuda__scaled_dot_product_efficient_attention", 4},
    [OP_CUDNN_ATTENTION] = {"aten._scaled_dot_product_cudnn_attention.default", NULL,
                            "aoti_torch_cuda__scaled_dot_product_cudnn_attention", 9},
    [OP_FLASH_ATTENTION_CPU] = {"aten._scaled_dot_product_flash_attention_for_cpu.default",
                                "aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu", NULL, 2},
    [OP_CONVOLUTION_BACKWARD] = {"aten.convolution_backward.default", "aoti_torch_cpu_convolution_backward",
                                 "aoti_torch_cuda_convolution_backward", 3},
    [OP_MAX_POOL2D] = {"aten.max_pool2d_with_indices.default", "aoti_torch_cpu_max_pool2d_with_indices",
                       "aoti_torch_cuda_max_pool2d_with_indices", 2, 1u << 1},
    [OP_MAX_POOL2D_BACKWARD] = {"aten.max_pool2d_with_indices_backward.default",
                                "aoti_torch_cpu_max_pool2d_with_indices_backward",
                                "aoti_torch_cuda_max_pool2d_with_indices_backward", 1},
    [OP_AVG_POOL2D] = {"aten.avg_pool2d.default", "aoti_torch_cpu_avg_pool2d", "aoti_torch_cuda_avg_pool2d", 1},
    [OP_AVG_POOL2D_BACKWARD] = {"aten.avg_pool2d_backward.default", "aoti_torch_cpu_avg_pool2d_backward",
                                "aoti_torch_cuda_avg_pool2d_backward", 1},
    [OP_ADAPTIVE_AVG_POOL2D] = {"aten._adaptive_avg_pool2d.default", "aoti_torch_cpu__adaptive_avg_pool2d",
                                "aoti_torch_cuda__adaptive_avg_pool2d", 1},
    [OP_ADAPTIVE_AVG_POOL2D_BACKWARD] = {"aten._adaptive_avg_pool2d_backward.default",
                                         "aoti_torch_cpu__adaptive_avg_pool2d_backward",
                                         "aoti_torch_cuda__adaptive_avg_pool2d_backward", 1},
    [OP_CUMSUM] = {"aten.cumsum.default", "aoti_torch_cpu_cumsum", "aoti_torch_cuda_cumsum", 1, 1u << 0},
};

enum { MAX_TENSORS = 4, MAX_RESULTS = WK_NATIVE_MAX_OUTPUTS, MAX_SPATIAL = 3 };

struct WkNativeCall {
    NativeOp op;
    void *fn;                   /* the shim function */
    int tensor[MAX_TENSORS];    /* extern input index of each tensor operand, -1: None */
    int ntensors;
    double beta, alpha;         /* addmm, baddbmm */
    int64_t stride[MAX_SPATIAL], padding[MAX_SPATIAL], dilation[MAX_SPATIAL], output_padding[MAX_SPATIAL];
    int64_t nstride, npadding, ndilation, noutput_padding, groups;
    int transposed;
    int64_t bias_sizes[MAX_SPATIAL], nbias_sizes; /* convolution_backward; has_bias_sizes 0: None */
    int has_bias_sizes;
    int32_t output_mask[3];     /* convolution_backward */
    int64_t kernel_size[MAX_SPATIAL], nkernel_size; /* pooling; also output_size (adaptive) */
    int ceil_mode, count_include_pad;
    int has_divisor;            /* avg_pool2d's divisor_override */
    int64_t divisor;
    int is_causal, compute_log_sumexp; /* attention */
    int has_scale;
    double scale;
    int64_t dim;                /* cumsum */
    int nout;
    int pick[MAX_RESULTS];      /* result position of output k */
    int cuda_device;            /* -1: CPU */
};

/* ---- process-wide checks (resolved once) ------------------------------- */

static struct {
    int state; /* 0 unresolved, 1 usable, -1 not */
    PyObject *tensor_type, *parameter_type;
    PyObject *dispatch_stack_len; /* torch._C._len_torch_dispatch_stack */
    PyObject *functorch_peek;     /* torch._C._functorch.peek_interpreter_stack, or NULL */
    bool (*grad_enabled)(void);   /* aoti_torch_grad_mode_is_enabled */
} K;

static int checks_ready(void) {
    if (K.state) return K.state == 1;
    if (K.tensor_type) goto symbol; /* only the shim was missing last time (WICK_SHIM=0 then) */
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *nn = torch ? PyImport_ImportModule("torch.nn") : NULL;
    PyObject *tc = torch ? PyObject_GetAttrString(torch, "_C") : NULL;
    PyObject *fc = tc ? PyObject_GetAttrString(tc, "_functorch") : NULL;
    if (torch && nn && tc) {
        K.tensor_type = PyObject_GetAttrString(torch, "Tensor");
        K.parameter_type = PyObject_GetAttrString(nn, "Parameter");
        K.dispatch_stack_len = PyObject_GetAttrString(tc, "_len_torch_dispatch_stack");
        if (!fc) PyErr_Clear();
        K.functorch_peek = fc ? PyObject_GetAttrString(fc, "peek_interpreter_stack") : NULL;
        if (fc && !K.functorch_peek) PyErr_Clear();
    }
    PyErr_Clear();
    Py_XDECREF(fc);
    Py_XDECREF(tc);
    Py_XDECREF(nn);
    Py_XDECREF(torch);
    if (!K.tensor_type || !K.parameter_type || !K.dispatch_stack_len) {
        K.state = -1;
        return 0;
    }
symbol:
    /* NULL while the shim is turned off: asked again at the next graph */
    *(void **)&K.grad_enabled = wk_shim_op_symbol("aoti_torch_grad_mode_is_enabled", 0);
    if (K.grad_enabled) K.state = 1;
    return K.state == 1;
}

/* 1 when nothing a Python call would honour is in effect now. */
static int plain_context(void) {
    if (K.grad_enabled()) return 0;
    PyObject *n = PyObject_CallNoArgs(K.dispatch_stack_len);
    long len = n ? PyLong_AsLong(n) : -1;
    Py_XDECREF(n);
    if (len != 0) {
        PyErr_Clear();
        return 0;
    }
    if (K.functorch_peek) {
        PyObject *top = PyObject_CallNoArgs(K.functorch_peek);
        int none = top == Py_None;
        Py_XDECREF(top);
        if (!none) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* ---- reading the prepared call (items, kind, kwnames) ------------------ */

typedef struct {
    PyObject *const *items;
    const int *kind;
    Py_ssize_t nargs, nitems;
    PyObject *kwnames;
} Args;

enum { ITEM_ABSENT = -100, KEYWORD_ONLY = 99 /* a position no call reaches: look up by name */ };

/* Item of positional i or keyword `name`: its kind (>= 0 an extern input,
 * negative a constant) and the item in *item; ITEM_ABSENT when not given. */
static int arg_at(const Args *a, Py_ssize_t i, const char *name, PyObject **item) {
    if (i < a->nargs) {
        *item = a->items[i];
        return a->kind[i];
    }
    for (Py_ssize_t k = a->nargs; k < a->nitems; k++) {
        PyObject *kn = a->kwnames ? PyTuple_GET_ITEM(a->kwnames, k - a->nargs) : NULL;
        if (kn && PyUnicode_CompareWithASCIIString(kn, name) == 0) {
            *item = a->items[k];
            return a->kind[k];
        }
    }
    *item = NULL;
    return ITEM_ABSENT;
}

/* Every keyword is one of `names` (NULL-terminated). */
static int only_keywords(const Args *a, const char *const *names) {
    for (Py_ssize_t k = a->nargs; k < a->nitems; k++) {
        PyObject *kn = PyTuple_GET_ITEM(a->kwnames, k - a->nargs);
        int known = 0;
        for (const char *const *n = names; *n && !known; n++) known = PyUnicode_CompareWithASCIIString(kn, *n) == 0;
        if (!known) return 0;
    }
    return 1;
}

static int const_double(const Args *a, Py_ssize_t i, const char *name, double dflt, double *out) {
    PyObject *v;
    int k = arg_at(a, i, name, &v);
    if (k == ITEM_ABSENT) {
        *out = dflt;
        return 1;
    }
    if (k >= 0 || !(PyFloat_CheckExact(v) || PyLong_CheckExact(v))) return 0;
    *out = PyFloat_AsDouble(v);
    if (*out == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static int const_bool(const Args *a, Py_ssize_t i, const char *name, int dflt, int *out) {
    PyObject *v;
    int k = arg_at(a, i, name, &v);
    if (k == ITEM_ABSENT) {
        *out = dflt;
        return 1;
    }
    if (k >= 0 || !(PyBool_Check(v) || PyLong_CheckExact(v))) return 0;
    *out = PyObject_IsTrue(v);
    return *out >= 0 || (PyErr_Clear(), 0);
}

static int const_int(const Args *a, Py_ssize_t i, const char *name, int64_t *out) {
    PyObject *v;
    int k = arg_at(a, i, name, &v);
    if (k < 0 && k != ITEM_ABSENT && PyLong_CheckExact(v)) {
        *out = PyLong_AsLongLong(v);
        if (*out == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return 1;
    }
    return 0;
}

static int const_ints(const Args *a, Py_ssize_t i, const char *name, int64_t *out, int64_t *n) {
    PyObject *v;
    int k = arg_at(a, i, name, &v);
    if (k >= 0 || k == ITEM_ABSENT || !(PyList_CheckExact(v) || PyTuple_CheckExact(v))) return 0;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(v);
    if (len > MAX_SPATIAL) return 0;
    for (Py_ssize_t j = 0; j < len; j++) {
        PyObject *x = PySequence_Fast_GET_ITEM(v, j);
        if (!PyLong_CheckExact(x)) return 0;
        out[j] = PyLong_AsLongLong(x);
        if (out[j] == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
    }
    *n = len;
    return 1;
}

/* An int list that may be left out (the schema's default, dflt[0..ndflt)). */
static int const_ints_or(const Args *a, Py_ssize_t i, const char *name, const int64_t *dflt, int64_t ndflt,
                         int64_t *out, int64_t *n) {
    PyObject *v;
    if (arg_at(a, i, name, &v) != ITEM_ABSENT) return const_ints(a, i, name, out, n);
    memcpy(out, dflt, (size_t)ndflt * sizeof *out);
    *n = ndflt;
    return 1;
}

/* An optional int list (SymInt[]?): *has 0 for None. */
static int const_ints_optional(const Args *a, Py_ssize_t i, const char *name, int64_t *out, int64_t *n, int *has) {
    PyObject *v;
    int k = arg_at(a, i, name, &v);
    *has = !(k == ITEM_ABSENT || (k < 0 && v == Py_None));
    *n = 0;
    return !*has || const_ints(a, i, name, out, n);
}

/* An optional int (int?): *has 0 for None. */
static int const_int_optional(const Args *a, Py_ssize_t i, const char *name, int64_t *out, int *has) {
    PyObject *v;
    int k = arg_at(a, i, name, &v);
    *has = !(k == ITEM_ABSENT || (k < 0 && v == Py_None));
    return !*has || const_int(a, i, name, out);
}

/* A bool list of exactly n items (bool[3]). */
static int const_bools(const Args *a, Py_ssize_t i, const char *name, int32_t *out, Py_ssize_t n) {
    PyObject *v;
    int k = arg_at(a, i, name, &v);
    if (k >= 0 || k == ITEM_ABSENT || !(PyList_CheckExact(v) || PyTuple_CheckExact(v))) return 0;
    if (PySequence_Fast_GET_SIZE(v) != n) return 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *x = PySequence_Fast_GET_ITEM(v, j);
        if (!PyBool_Check(x)) return 0;
        out[j] = x == Py_True;
    }
    return 1;
}

/* A tensor operand (optional: None gives -1). */
static int tensor_arg(const Args *a, Py_ssize_t i, const char *name, int optional, int *out) {
    PyObject *v;
    int k = arg_at(a, i, name, &v);
    if (k >= 0) {
        *out = k;
        return 1;
    }
    if (optional && (k == ITEM_ABSENT || v == Py_None)) {
        *out = -1;
        return 1;
    }
    return 0;
}

/* fn wrapped in wick._capture_meta.UnderAutocast with autocast off on every
 * device it names (capture's extern inside a `torch.autocast(...,
 * enabled=False)` block, e.g. the float32 matmuls of the math attention it
 * inlines): the wrapped op, else fn. The shim's kernels run below autocast's
 * dispatch, so they compute what the wrapper's call does. Borrowed. */
static PyObject *unwrap_autocast_off(PyObject *fn) {
    if (strcmp(Py_TYPE(fn)->tp_name, "UnderAutocast") != 0) return fn;
    PyObject *states = PyObject_GetAttrString(fn, "states"), *inner = PyObject_GetAttrString(fn, "fn");
    int off = states && inner && PyTuple_Check(states);
    for (Py_ssize_t i = 0; off && i < PyTuple_GET_SIZE(states); i++) {
        PyObject *st = PyTuple_GET_ITEM(states, i);
        off = PyTuple_Check(st) && PyTuple_GET_SIZE(st) == 3 && PyTuple_GET_ITEM(st, 1) == Py_False;
    }
    PyErr_Clear();
    Py_XDECREF(states);
    Py_XDECREF(inner); /* the wrapper keeps it alive */
    return off ? inner : fn;
}

/* fn is the op's own callable (torch.ops.<ns>.<op>.<overload> or its
 * _op), not a wrapper around it (but for autocast off: unwrap_autocast_off). */
static int is_the_op(const char *name, PyObject *fn) {
    fn = unwrap_autocast_off(fn);
    char buf[160];
    if (strlen(name) >= sizeof buf) return 0;
    strcpy(buf, name);
    PyObject *obj = PyImport_ImportModule("torch");
    PyObject *ops = obj ? PyObject_GetAttrString(obj, "ops") : NULL;
    Py_XDECREF(obj);
    obj = ops;
    for (char *part = strtok(buf, "."); obj && part; part = strtok(NULL, ".")) {
        PyObject *next = PyObject_GetAttrString(obj, part);
        Py_DECREF(obj);
        obj = next;
    }
    int same = 0;
    if (obj) {
        PyObject *inner = PyObject_GetAttrString(obj, "_op");
        same = fn == obj || (inner && fn == inner);
        Py_XDECREF(inner);
        Py_DECREF(obj);
    }
    PyErr_Clear();
    return same;
}

/* Attention's query, key and value: tensor operands 0, 1, 2. */
static int qkv_args(const Args *a, WkNativeCall *c) {
    return tensor_arg(a, 0, "query", 0, &c->tensor[0]) && tensor_arg(a, 1, "key", 0, &c->tensor[1]) &&
           tensor_arg(a, 2, "value", 0, &c->tensor[2]);
}

/* Attention's dropout_p (positional i) is absent or 0: no random numbers. */
static int no_dropout(const Args *a, Py_ssize_t i) {
    double dropout;
    return const_double(a, i, "dropout_p", 0.0, &dropout) && dropout == 0.0;
}

/* Attention's keyword-only scale: absent or None (the kernel's default), or a number. */
static int scale_arg(const Args *a, WkNativeCall *c) {
    PyObject *scale;
    int k = arg_at(a, KEYWORD_ONLY, "scale", &scale);
    c->has_scale = k != ITEM_ABSENT && scale != Py_None;
    return !c->has_scale || const_double(a, KEYWORD_ONLY, "scale", 0.0, &c->scale);
}

/* Pooling's window: kernel_size, stride, padding at positions i..i+2, with
 * the schema's defaults where the forward op may leave them out (stride []
 * means the kernel's size; padding 0). */
static int pool_window(const Args *a, Py_ssize_t i, int defaults, WkNativeCall *c) {
    static const int64_t zero[1] = {0};
    if (!const_ints(a, i, "kernel_size", c->kernel_size, &c->nkernel_size)) return 0;
    if (!defaults)
        return const_ints(a, i + 1, "stride", c->stride, &c->nstride) &&
               const_ints(a, i + 2, "padding", c->padding, &c->npadding);
    return const_ints_or(a, i + 1, "stride", zero, 0, c->stride, &c->nstride) &&
           const_ints_or(a, i + 2, "padding", zero, 1, c->padding, &c->npadding);
}

static int parse(WkNativeCall *c, const Args *a, int npicks) {
    static const char *const matmul_kw[] = {"beta", "alpha", NULL};
    static const char *const flash_kw[] = {"scale", NULL};
    static const char *const cpu_flash_kw[] = {"attn_mask", "scale", NULL};
    static const char *const none_kw[] = {NULL};
    static const char *const max_pool_kw[] = {"stride", "padding", "dilation", "ceil_mode", NULL};
    static const char *const avg_pool_kw[] = {"stride", "padding", "ceil_mode", "count_include_pad",
                                              "divisor_override", NULL};
    static const int64_t one[1] = {1};
    /* a multi-result op without picks (capture's extern node) has its
     * results as outputs in order */
    if (OPS[c->op].nresults == 1 && npicks) return 0;
    switch (c->op) {
    case OP_MM:
    case OP_BMM:
        c->ntensors = 2;
        return a->nargs == 2 && only_keywords(a, none_kw) && tensor_arg(a, 0, "self", 0, &c->tensor[0]) &&
               tensor_arg(a, 1, "mat2", 0, &c->tensor[1]);
    case OP_ADDMM:
    case OP_BADDBMM:
        c->ntensors = 3;
        return a->nargs == 3 && only_keywords(a, matmul_kw) && tensor_arg(a, 0, "self", 0, &c->tensor[0]) &&
               tensor_arg(a, 1, "", 0, &c->tensor[1]) && tensor_arg(a, 2, "", 0, &c->tensor[2]) &&
               const_double(a, KEYWORD_ONLY, "beta", 1.0, &c->beta) &&
               const_double(a, KEYWORD_ONLY, "alpha", 1.0, &c->alpha);
    case OP_CONVOLUTION:
        c->ntensors = 3;
        return a->nargs == 9 && only_keywords(a, none_kw) && tensor_arg(a, 0, "input", 0, &c->tensor[0]) &&
               tensor_arg(a, 1, "weight", 0, &c->tensor[1]) && tensor_arg(a, 2, "bias", 1, &c->tensor[2]) &&
               const_ints(a, 3, "stride", c->stride, &c->nstride) &&
               const_ints(a, 4, "padding", c->padding, &c->npadding) &&
               const_ints(a, 5, "dilation", c->dilation, &c->ndilation) &&
               const_bool(a, 6, "transposed", 0, &c->transposed) &&
               const_ints(a, 7, "output_padding", c->output_padding, &c->noutput_padding) &&
               const_int(a, 8, "groups", &c->groups);
    case OP_FLASH_ATTENTION: {
        int debug_mask;
        c->ntensors = 3;
        return a->nargs <= 6 && only_keywords(a, flash_kw) && qkv_args(a, c) && no_dropout(a, 3) &&
               const_bool(a, 4, "is_causal", 0, &c->is_causal) &&
               const_bool(a, 5, "return_debug_mask", 0, &debug_mask) && !debug_mask && scale_arg(a, c);
    }
    case OP_EFFICIENT_ATTENTION:
    case OP_CUDNN_ATTENTION: {
        int debug_mask = 0;
        c->ntensors = 4;
        int cudnn = c->op == OP_CUDNN_ATTENTION;
        return a->nargs <= (cudnn ? 8 : 7) && only_keywords(a, flash_kw) && qkv_args(a, c) &&
               tensor_arg(a, 3, "attn_bias", 1, &c->tensor[3]) &&
               const_bool(a, 4, "compute_log_sumexp", -1, &c->compute_log_sumexp) && c->compute_log_sumexp >= 0 &&
               no_dropout(a, 5) && const_bool(a, 6, "is_causal", 0, &c->is_causal) &&
               (!cudnn || (const_bool(a, 7, "return_debug_mask", 0, &debug_mask) && !debug_mask)) &&
               scale_arg(a, c);
    }
    case OP_FLASH_ATTENTION_CPU:
        c->ntensors = 4;
        return a->nargs <= 5 && only_keywords(a, cpu_flash_kw) && qkv_args(a, c) &&
               tensor_arg(a, KEYWORD_ONLY, "attn_mask", 1, &c->tensor[3]) && no_dropout(a, 3) &&
               const_bool(a, 4, "is_causal", 0, &c->is_causal) && scale_arg(a, c);
    case OP_CONVOLUTION_BACKWARD:
        c->ntensors = 3;
        return a->nargs == 11 && only_keywords(a, none_kw) && tensor_arg(a, 0, "grad_output", 0, &c->tensor[0]) &&
               tensor_arg(a, 1, "input", 0, &c->tensor[1]) && tensor_arg(a, 2, "weight", 0, &c->tensor[2]) &&
               const_ints_optional(a, 3, "bias_sizes", c->bias_sizes, &c->nbias_sizes, &c->has_bias_sizes) &&
               const_ints(a, 4, "stride", c->stride, &c->nstride) &&
               const_ints(a, 5, "padding", c->padding, &c->npadding) &&
               const_ints(a, 6, "dilation", c->dilation, &c->ndilation) &&
               const_bool(a, 7, "transposed", 0, &c->transposed) &&
               const_ints(a, 8, "output_padding", c->output_padding, &c->noutput_padding) &&
               const_int(a, 9, "groups", &c->groups) && const_bools(a, 10, "output_mask", c->output_mask, 3);
    case OP_MAX_POOL2D:
        c->ntensors = 1;
        return a->nargs >= 2 && a->nargs <= 6 && only_keywords(a, max_pool_kw) &&
               tensor_arg(a, 0, "self", 0, &c->tensor[0]) && pool_window(a, 1, 1, c) &&
               const_ints_or(a, 4, "dilation", one, 1, c->dilation, &c->ndilation) &&
               const_bool(a, 5, "ceil_mode", 0, &c->ceil_mode);
    case OP_MAX_POOL2D_BACKWARD:
        c->ntensors = 3;
        return a->nargs == 8 && only_keywords(a, none_kw) && tensor_arg(a, 0, "grad_output", 0, &c->tensor[0]) &&
               tensor_arg(a, 1, "self", 0, &c->tensor[1]) && pool_window(a, 2, 0, c) &&
               const_ints(a, 5, "dilation", c->dilation, &c->ndilation) &&
               const_bool(a, 6, "ceil_mode", -1, &c->ceil_mode) && c->ceil_mode >= 0 &&
               tensor_arg(a, 7, "indices", 0, &c->tensor[2]);
    case OP_AVG_POOL2D:
        c->ntensors = 1;
        return a->nargs >= 2 && a->nargs <= 7 && only_keywords(a, avg_pool_kw) &&
               tensor_arg(a, 0, "self", 0, &c->tensor[0]) && pool_window(a, 1, 1, c) &&
               const_bool(a, 4, "ceil_mode", 0, &c->ceil_mode) &&
               const_bool(a, 5, "count_include_pad", 1, &c->count_include_pad) &&
               const_int_optional(a, 6, "divisor_override", &c->divisor, &c->has_divisor);
    case OP_AVG_POOL2D_BACKWARD:
        c->ntensors = 2;
        return a->nargs == 8 && only_keywords(a, none_kw) && tensor_arg(a, 0, "grad_output", 0, &c->tensor[0]) &&
               tensor_arg(a, 1, "self", 0, &c->tensor[1]) && pool_window(a, 2, 0, c) &&
               const_bool(a, 5, "ceil_mode", -1, &c->ceil_mode) && c->ceil_mode >= 0 &&
               const_bool(a, 6, "count_include_pad", -1, &c->count_include_pad) && c->count_include_pad >= 0 &&
               const_int_optional(a, 7, "divisor_override", &c->divisor, &c->has_divisor);
    case OP_ADAPTIVE_AVG_POOL2D:
        c->ntensors = 1;
        return a->nargs == 2 && only_keywords(a, none_kw) && tensor_arg(a, 0, "self", 0, &c->tensor[0]) &&
               const_ints(a, 1, "output_size", c->kernel_size, &c->nkernel_size);
    case OP_ADAPTIVE_AVG_POOL2D_BACKWARD:
        c->ntensors = 2;
        return a->nargs == 2 && only_keywords(a, none_kw) && tensor_arg(a, 0, "grad_output", 0, &c->tensor[0]) &&
               tensor_arg(a, 1, "self", 0, &c->tensor[1]);
    case OP_CUMSUM: /* no dtype=: the kernel's own result dtype (int64 for integers and bool) */
        c->ntensors = 1;
        return a->nargs == 2 && only_keywords(a, none_kw) && tensor_arg(a, 0, "self", 0, &c->tensor[0]) &&
               const_int(a, 1, "dim", &c->dim);
    default: return 0;
    }
}

WkNativeCall *wk_native_call_prepare(const char *name, PyObject *fn, PyObject *const *items, const int *kind,
                                     Py_ssize_t nargs, Py_ssize_t nitems, PyObject *kwnames,
                                     const Py_ssize_t *pick, Py_ssize_t npicks, int nout, int cuda_device) {
    if (!name || !fn || !items || wk_env_int(WK_ENV_NATIVE_EXTERNS) == 0 || !checks_ready()) return NULL;
    int op = 0;
    while (op < OP_COUNT && strcmp(OPS[op].aten, name) != 0) op++;
    if (op == OP_COUNT || nout < 1 || nout > MAX_RESULTS) return NULL;
    const char *symbol = cuda_device >= 0 ? OPS[op].cuda : OPS[op].cpu;
    if (!symbol || !is_the_op(name, fn)) return NULL;
    void *f = wk_shim_op_symbol(symbol, cuda_device >= 0);
    if (!f) return NULL;
    WkNativeCall *c = wk_xcalloc(1, sizeof *c);
    c->op = (NativeOp)op;
    c->fn = f;
    c->nout = nout;
    c->cuda_device = cuda_device;
    for (int t = 0; t < MAX_TENSORS; t++) c->tensor[t] = -1;
    Args a = {items, kind, nargs, nitems, kwnames};
    int ok = parse(c, &a, (int)npicks);
    for (int k = 0; ok && k < nout; k++) {
        c->pick[k] = npicks ? (int)pick[k] : k;
        int p = c->pick[k];
        /* only tensor results can be picked (flash and cudnn: 4 and 5 are ints) */
        ok = p >= 0 && p < OPS[op].nresults && !((op == OP_FLASH_ATTENTION || op == OP_CUDNN_ATTENTION) && (p == 4 || p == 5));
        /* a result output_mask leaves out is undefined: only asked-for ones */
        if (ok && op == OP_CONVOLUTION_BACKWARD) ok = c->output_mask[p];
    }
    if (ok && npicks && npicks != nout) ok = 0;
    PyErr_Clear();
    if (!ok) {
        free(c);
        return NULL;
    }
    wk_log(WK_LOG_PERF, "native extern: %s through %s", name, symbol);
    return c;
}

void wk_native_call_free(WkNativeCall *c) { free(c); }

typedef AOTITorchError (*MmOut)(AtenTensorHandle, AtenTensorHandle, AtenTensorHandle);
typedef AOTITorchError (*AddmmOut)(AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, double,
                                   double);
typedef AOTITorchError (*Convolution)(AtenTensorHandle, AtenTensorHandle, AtenTensorHandle *, const int64_t *,
                                      int64_t, const int64_t *, int64_t, const int64_t *, int64_t, int32_t,
                                      const int64_t *, int64_t, int64_t, AtenTensorHandle *);
typedef AOTITorchError (*FlashAttention)(AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, double, int32_t,
                                         int32_t, double *, AtenTensorHandle *, AtenTensorHandle *,
                                         AtenTensorHandle *, AtenTensorHandle *, int64_t *, int64_t *,
                                         AtenTensorHandle *, AtenTensorHandle *, AtenTensorHandle *);
typedef AOTITorchError (*EfficientAttention)(AtenTensorHandle, AtenTensorHandle, AtenTensorHandle,
                                             AtenTensorHandle *, int32_t, double, int32_t, double *,
                                             AtenTensorHandle *, AtenTensorHandle *, AtenTensorHandle *,
                                             AtenTensorHandle *);
typedef AOTITorchError (*CudnnAttention)(AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, AtenTensorHandle *,
                                         int32_t, double, int32_t, int32_t, double *, AtenTensorHandle *,
                                         AtenTensorHandle *, AtenTensorHandle *, AtenTensorHandle *, int64_t *,
                                         int64_t *, AtenTensorHandle *, AtenTensorHandle *, AtenTensorHandle *);
typedef AOTITorchError (*Cumsum)(AtenTensorHandle, int64_t, int32_t *, AtenTensorHandle *);
typedef AOTITorchError (*CpuFlashAttention)(AtenTensorHandle, AtenTensorHandle, AtenTensorHandle, double, int32_t,
                                            AtenTensorHandle *, double *, AtenTensorHandle *, AtenTensorHandle *);

typedef AOTITorchError (*ConvolutionBackward)(AtenTensorHandle, AtenTensorHandle, AtenTensorHandle,
                                              const int64_t **, int64_t, const int64_t *, int64_t, const int64_t *,
                                              int64_t, const int64_t *, int64_t, int32_t, const int64_t *, int64_t,
                                              int64_t, const int32_t *, int64_t, AtenTensorHandle *,
                                              AtenTensorHandle *, AtenTensorHandle *);
typedef AOTITorchError (*MaxPool2d)(AtenTensorHandle, const int64_t *, int64_t, const int64_t *, int64_t,
                                    const int64_t *, int64_t, const int64_t *, int64_t, int32_t, AtenTensorHandle *,
                                    AtenTensorHandle *);
typedef AOTITorchError (*MaxPool2dBackward)(AtenTensorHandle, AtenTensorHandle, const int64_t *, int64_t,
                                            const int64_t *, int64_t, const int64_t *, int64_t, const int64_t *,
                                            int64_t, int32_t, AtenTensorHandle, AtenTensorHandle *);
typedef AOTITorchError (*AvgPool2d)(AtenTensorHandle, const int64_t *, int64_t, const int64_t *, int64_t,
                                    const int64_t *, int64_t, int32_t, int32_t, int64_t *, AtenTensorHandle *);
typedef AOTITorchError (*AvgPool2dBackward)(AtenTensorHandle, AtenTensorHandle, const int64_t *, int64_t,
                                            const int64_t *, int64_t, const int64_t *, int64_t, int32_t, int32_t,
                                            int64_t *, AtenTensorHandle *);
typedef AOTITorchError (*AdaptiveAvgPool2d)(AtenTensorHandle, const int64_t *, int64_t, AtenTensorHandle *);
typedef AOTITorchError (*AdaptiveAvgPool2dBackward)(AtenTensorHandle, AtenTensorHandle, AtenTensorHandle *);

int wk_native_call_run(const WkNativeCall *c, PyObject *const *in, int nin, const int *out_ndim,
                       const int64_t *const *out_sizes, const int64_t *const *out_strides,
                       const WkDType *out_dtype, PyObject **out) {
    AtenTensorHandle h[MAX_TENSORS] = {0};
    for (int t = 0; t < c->ntensors; t++) {
        int k = c->tensor[t];
        if (k < 0) continue;
        if (k >= nin) return 0;
        PyObject *x = in[k];
        if (!Py_IS_TYPE(x, (PyTypeObject *)K.tensor_type) && !Py_IS_TYPE(x, (PyTypeObject *)K.parameter_type))
            return 0;
        if (!(h[t] = wk_shim_handle(x))) return 0;
    }
    /* complex never: these symbols reach the kernel past the dispatcher's
     * conjugate and negative-view fallbacks, which resolve a lazy conj bit */
    for (int k = 0; k < c->nout; k++)
        if ((!(OPS[c->op].int_results >> c->pick[k] & 1) && !wk_dtype_is_float(out_dtype[k])) ||
            wk_dtype_is_complex(out_dtype[k]))
            return 0;
    if (!plain_context() || !wk_shim_available() || (c->cuda_device >= 0 && !wk_shim_cuda_available())) return 0;
    double scale_store = c->scale, *scale = c->has_scale ? &scale_store : NULL;
    AtenTensorHandle *opt = c->tensor[3] >= 0 ? &h[3] : NULL; /* attention's bias or mask */
    AtenTensorHandle res[MAX_RESULTS] = {0};
    int64_t ints[2];
    int64_t divisor = c->divisor;
    const int64_t *bias_sizes = c->bias_sizes;
    AOTITorchError err = 0;
    if (c->op <= OP_BADDBMM) {
        void *data;
        PyObject *o = wk_shim_empty_strided_Ref(out_ndim[0], out_sizes[0], out_strides[0], out_dtype[0],
                                                c->cuda_device, &data);
        AtenTensorHandle oh = o ? wk_shim_handle(o) : NULL;
        if (!oh) {
            Py_XDECREF(o);
            return o ? 0 : -1;
        }
        if (c->op == OP_MM || c->op == OP_BMM) err = ((MmOut)c->fn)(oh, h[0], h[1]);
        else err = ((AddmmOut)c->fn)(oh, h[0], h[1], h[2], c->beta, c->alpha);
        if (err) {
            Py_DECREF(o);
            return 0;
        }
        out[0] = o;
        return 1;
    }
    switch (c->op) {
    case OP_CONVOLUTION:
        err = ((Convolution)c->fn)(h[0], h[1], c->tensor[2] >= 0 ? &h[2] : NULL, c->stride, c->nstride, c->padding,
                                   c->npadding, c->dilation, c->ndilation, c->transposed, c->output_padding,
                                   c->noutput_padding, c->groups, &res[0]);
        break;
    case OP_FLASH_ATTENTION:
        err = ((FlashAttention)c->fn)(h[0], h[1], h[2], 0.0, c->is_causal, 0, scale, &res[0], &res[1], &res[2],
                                      &res[3], &ints[0], &ints[1], &res[6], &res[7], &res[8]);
        break;
    case OP_EFFICIENT_ATTENTION:
        err = ((EfficientAttention)c->fn)(h[0], h[1], h[2], opt, c->compute_log_sumexp, 0.0, c->is_causal, scale,
                                          &res[0], &res[1], &res[2], &res[3]);
        break;
    case OP_CUDNN_ATTENTION:
        err = ((CudnnAttention)c->fn)(h[0], h[1], h[2], opt, c->compute_log_sumexp, 0.0, c->is_causal, 0, scale,
                                      &res[0], &res[1], &res[2], &res[3], &ints[0], &ints[1], &res[6], &res[7],
                                      &res[8]);
        break;
    case OP_FLASH_ATTENTION_CPU:
        err = ((CpuFlashAttention)c->fn)(h[0], h[1], h[2], 0.0, c->is_causal, opt, scale, &res[0], &res[1]);
        break;
    case OP_CONVOLUTION_BACKWARD:
        err = ((ConvolutionBackward)c->fn)(h[0], h[1], h[2], c->has_bias_sizes ? &bias_sizes : NULL, c->nbias_sizes,
                                           c->stride, c->nstride, c->padding, c->npadding, c->dilation,
                                           c->ndilation, c->transposed, c->output_padding, c->noutput_padding,
                                           c->groups, c->output_mask, 3, &res[0], &res[1], &res[2]);
        break;
    case OP_MAX_POOL2D:
        err = ((MaxPool2d)c->fn)(h[0], c->kernel_size, c->nkernel_size, c->stride, c->nstride, c->padding,
                                 c->npadding, c->dilation, c->ndilation, c->ceil_mode, &res[0], &res[1]);
        break;
    case OP_MAX_POOL2D_BACKWARD:
        err = ((MaxPool2dBackward)c->fn)(h[0], h[1], c->kernel_size, c->nkernel_size, c->stride, c->nstride,
                                         c->padding, c->npadding, c->dilation, c->ndilation, c->ceil_mode, h[2],
                                         &res[0]);
        break;
    case OP_AVG_POOL2D:
        err = ((AvgPool2d)c->fn)(h[0], c->kernel_size, c->nkernel_size, c->stride, c->nstride, c->padding,
                                 c->npadding, c->ceil_mode, c->count_include_pad, c->has_divisor ? &divisor : NULL,
                                 &res[0]);
        break;
    case OP_AVG_POOL2D_BACKWARD:
        err = ((AvgPool2dBackward)c->fn)(h[0], h[1], c->kernel_size, c->nkernel_size, c->stride, c->nstride,
                                         c->padding, c->npadding, c->ceil_mode, c->count_include_pad,
                                         c->has_divisor ? &divisor : NULL, &res[0]);
        break;
    case OP_ADAPTIVE_AVG_POOL2D:
        err = ((AdaptiveAvgPool2d)c->fn)(h[0], c->kernel_size, c->nkernel_size, &res[0]);
        break;
    case OP_ADAPTIVE_AVG_POOL2D_BACKWARD:
        err = ((AdaptiveAvgPool2dBackward)c->fn)(h[0], h[1], &res[0]);
        break;
    case OP_CUMSUM: err = ((Cumsum)c->fn)(h[0], c->dim, NULL, &res[0]); break;
    default: return 0;
    }
    if (err) {
        for (int r = 0; r < MAX_RESULTS; r++) wk_shim_delete_handle(res[r]);
        return 0;
    }
    /* wrap the picked results (each handle once), drop the others */
    int status = 1;
    for (int k = 0; k < c->nout; k++) out[k] = NULL;
    for (int k = 0; k < c->nout && status == 1; k++) {
        int p = c->pick[k];
        for (int j = 0; j < k && !out[k]; j++)
            if (c->pick[j] == p) out[k] = Py_NewRef(out[j]);
        if (out[k]) continue;
        if (!res[p]) {
            status = 0;
            break;
        }
        out[k] = wk_shim_wrap_handle_Ref(res[p]);
        res[p] = NULL;
        if (!out[k]) status = -1;
        else if (out[k] == Py_None) status = 0; /* an undefined tensor: let the Python call say what it says */
    }
    for (int r = 0; r < MAX_RESULTS; r++) wk_shim_delete_handle(res[r]);
    if (status != 1)
        for (int k = 0; k < c->nout; k++) Py_CLEAR(out[k]);
    return status;
}
