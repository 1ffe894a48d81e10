/* symbolic.c — the symbolic interpreter.
 *
 * wk_cap_compile_frame runs a frame's bytecode (3.11/3.12, from
 * wk_bc_decode) on symbolic values: tensors become graph values, Python
 * numbers, tuples of numbers, modules and torch callables are constants
 * known at compile time, and everything the frame reads from outside (its
 * arguments, its globals) is guarded. Calls of torch functions and tensor
 * methods are bound against the op table's signatures and added to one
 * WkGraph. The result is a cache entry whose code calls the compiled graph
 * (transform.c) and whose guards say when it applies (guards.c).
 *
 * Tensors come from the frame's arguments, from attributes of arguments
 * (an nn.Module's parameters and buffers: source L['self'].weight) and from
 * globals (G['w']); the transformed code reads each afresh on every call,
 * so guards check what is read (type, dtype, device, sizes, strides,
 * requires_grad), never pin the tensor itself.
 *
 * Today's slice is straight-line code with one graph per frame. Anything
 * else (a jump, a call wick does not model, an unsupported op or dtype) is a
 * whole-frame fallback: an entry with code == NULL and the reason
 * "<what> at <file>:<line>", guarded like a compiled entry so other input
 * signatures can still compile. Python exceptions met while interpreting
 * become the reason, except BaseExceptions that are not Exceptions
 * (KeyboardInterrupt, SystemExit), which propagate.
 *
 * Values alias like Python objects: a local, a stack slot and a tuple item
 * that hold one tensor hold one Sv, so an in-place update of an
 * intermediate (y += 1) is seen through every alias. */
#include <ctype.h>
#include <math.h>
#include <opcode.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "symbolic.h"
#include "../runtime/runtime.h"

#if PY_VERSION_HEX >= 0x030C0000
#define PY312 1
#else
#define PY312 0
#endif
#if PY_VERSION_HEX >= 0x030D0000
#define PY313 1
#else
#define PY313 0
#endif

static PyObject *unsupported_error;

/* ---- torch tables, resolved once torch is imported ---------------------- */

static int torch_ready;
static PyObject *torch_mod;            /* strong */
static PyObject *fn_to_op;             /* dict: torch callable -> op number */
static PyObject *dtype_objs[WK_NDTYPES];
static PyTypeObject *tensor_type, *param_type, *module_type;
static PyObject *size_type, *device_type, *dtype_type, *strided_layout;
static PyObject *no_grad_type, *enable_grad_type;
static PyObject *s_layout, *s_shape, *s_stride, *s_dtype, *s_device, *s_requires_grad;

typedef struct {
    char *name;
    int op;
} MethodOp;
static WkVec(MethodOp) method_ops;

/* One parsed signature per op: "input, other, *, alpha=1". */
#define MAX_PARAMS 8
typedef struct {
    char name[32];
    int has_default;
    char dflt[16];
    int kwonly;
} Param;
typedef struct {
    int n;
    Param p[MAX_PARAMS];
} Sig;
static Sig sigs[WK_NOPS];

static void parse_sig(const char *s, Sig *sig) {
    int kwonly = 0;
    sig->n = 0;
    while (*s) {
        while (*s == ' ' || *s == ',') s++;
        if (!*s) break;
        const char *e = s;
        while (*e && *e != ',') e++;
        /* "()" defaults hold no comma, so a comma always ends a parameter */
        char buf[64];
        size_t len = (size_t)(e - s);
        if (len >= sizeof buf) len = sizeof buf - 1;
        memcpy(buf, s, len);
        buf[len] = 0;
        while (len && buf[len - 1] == ' ') buf[--len] = 0;
        if (strcmp(buf, "*") == 0) {
            kwonly = 1;
        } else if (sig->n < MAX_PARAMS) {
            Param *p = &sig->p[sig->n++];
            memset(p, 0, sizeof *p);
            char *eq = strchr(buf, '=');
            if (eq) {
                *eq = 0;
                p->has_default = 1;
                snprintf(p->dflt, sizeof p->dflt, "%s", eq + 1);
            }
            snprintf(p->name, sizeof p->name, "%s", buf);
            p->kwonly = kwonly;
        }
        s = e;
    }
}

static PyObject *default_value_Ref(const char *d) {
    if (strcmp(d, "None") == 0) Py_RETURN_NONE;
    if (strcmp(d, "False") == 0) Py_RETURN_FALSE;
    if (strcmp(d, "True") == 0) Py_RETURN_TRUE;
    if (strcmp(d, "()") == 0) return PyTuple_New(0);
    if (strchr(d, '.') || strchr(d, 'e')) return PyFloat_FromDouble(atof(d));
    return PyLong_FromLongLong(atoll(d));
}

static PyObject *resolve_path_Ref(PyObject *root, const char *path) {
    PyObject *cur = Py_NewRef(root);
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *tok = strtok(buf, "."); tok; tok = strtok(NULL, ".")) {
        PyObject *next = PyObject_GetAttrString(cur, tok);
        Py_DECREF(cur);
        if (!next) return NULL;
        cur = next;
    }
    return cur;
}

/* 0 when torch is ready, 1 when torch is not imported (no tensors can
 * exist), -1 with a Python exception. */
static int init_torch(void) {
    if (torch_ready) return 0;
    PyObject *name = PyUnicode_FromString("torch");
    if (!name) return -1;
    PyObject *mod = PyImport_GetModule(name);
    Py_DECREF(name);
    if (!mod) return PyErr_Occurred() ? -1 : 1;
    torch_mod = mod;
    fn_to_op = PyDict_New();
    if (!fn_to_op) return -1;
    s_layout = PyUnicode_InternFromString("layout");
    s_shape = PyUnicode_InternFromString("shape");
    s_stride = PyUnicode_InternFromString("stride");
    s_dtype = PyUnicode_InternFromString("dtype");
    s_device = PyUnicode_InternFromString("device");
    s_requires_grad = PyUnicode_InternFromString("requires_grad");
    if (!s_layout || !s_shape || !s_stride || !s_dtype || !s_device || !s_requires_grad) return -1;
    PyObject *tt = PyObject_GetAttrString(mod, "Tensor");
    PyObject *nn = tt ? resolve_path_Ref(mod, "nn.Parameter") : NULL;
    size_type = nn ? PyObject_GetAttrString(mod, "Size") : NULL;
    device_type = size_type ? PyObject_GetAttrString(mod, "device") : NULL;
    dtype_type = device_type ? PyObject_GetAttrString(mod, "dtype") : NULL;
    strided_layout = dtype_type ? PyObject_GetAttrString(mod, "strided") : NULL;
    if (!strided_layout || !PyType_Check(tt) || !PyType_Check(nn)) {
        Py_XDECREF(tt);
        Py_XDECREF(nn);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "wick: torch.Tensor is not a type");
        return -1;
    }
    tensor_type = (PyTypeObject *)tt;
    param_type = (PyTypeObject *)nn;
    no_grad_type = PyObject_GetAttrString(mod, "no_grad");
    enable_grad_type = PyObject_GetAttrString(mod, "enable_grad");
    PyErr_Clear();
    PyObject *mt = resolve_path_Ref(mod, "nn.Module");
    if (mt && PyType_Check(mt)) module_type = (PyTypeObject *)mt;
    else Py_XDECREF(mt);
    PyErr_Clear();
    for (int d = 0; d < WK_NDTYPES; d++) {
        dtype_objs[d] = PyObject_GetAttrString(mod, wk_dtype_name((WkDType)d));
        if (!dtype_objs[d]) PyErr_Clear();
    }
    for (int op = 0; op < WK_NOPS; op++) {
        const WkOpInfo *info = wk_op_info((WkOp)op);
        parse_sig(info->signature, &sigs[op]);
        char buf[256];
        snprintf(buf, sizeof buf, "%s", info->torch);
        char *save = NULL;
        for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
            PyObject *obj = NULL;
            if (strncmp(tok, "torch.", 6) == 0) {
                obj = resolve_path_Ref(mod, tok + 6);
            } else if (strncmp(tok, "Tensor.", 7) == 0) {
                MethodOp m = {wk_xstrdup(tok + 7), op};
                wk_vec_push(&method_ops, m);
                obj = PyObject_GetAttrString(tt, tok + 7);
            }
            if (!obj) { /* an op this torch lacks: leave it unmapped */
                PyErr_Clear();
                continue;
            }
            PyObject *num = PyLong_FromLong(op);
            int rc = num ? PyDict_SetItem(fn_to_op, obj, num) : -1;
            Py_XDECREF(num);
            Py_DECREF(obj);
            if (rc < 0) PyErr_Clear();
        }
    }
    torch_ready = 1;
    return 0;
}

static int dtype_of_obj(PyObject *o) {
    for (int d = 0; d < WK_NDTYPES; d++)
        if (dtype_objs[d] && dtype_objs[d] == o) return d;
    return -1;
}

static int is_tensor_obj(PyObject *o) {
    return tensor_type && (Py_TYPE(o) == tensor_type || Py_TYPE(o) == param_type);
}

static int method_op(const char *name) {
    for (int i = 0; i < method_ops.len; i++)
        if (strcmp(method_ops.data[i].name, name) == 0) return method_ops.data[i].op;
    return -1;
}

/* ---- symbolic values ---------------------------------------------------- */

typedef enum {
    SV_NULL, SV_CONST, SV_TENSOR, SV_TUPLE, SV_LIST, SV_METHOD, SV_OPAQUE,
    SV_GRAD_CTX,  /* torch.no_grad() / torch.enable_grad(): value = the grad mode it sets */
    SV_GRAD_EXIT, /* its __exit__ after BEFORE_WITH: value = the grad mode it restores */
} SvKind;

typedef struct Sv Sv;
struct Sv {
    SvKind kind;
    PyObject *obj; /* CONST: value; OPAQUE: object; TENSOR from an argument: the tensor (owned) */
    int arg;       /* the frame argument this is (or getattr(arg, *path)), unchanged; -1 otherwise */
    PyObject *path; /* owned tuple of attribute names from the argument, or NULL */
    PyObject *gname; /* owned: the global this is, unchanged (a tensor read afresh per call) */
    int value;     /* TENSOR: graph value id; -1 for an argument not yet a graph input */
    char *name;    /* METHOD: tensor method name (owned) */
    Sv *self;      /* METHOD bound by a plain attribute load, else NULL */
    WkVec(Sv *) items; /* TUPLE, LIST */
};

typedef struct {
    PyFunctionObject *fn;
    PyCodeObject *code;
    PyObject *const *args;
    int nargs;
    PyObject *argnames; /* tuple */
    WkGraph *g;
    WkGuards *guards;
    WkVec(Sv *) all;
    Sv **locals;
    int nlocals;
    Sv **stack;
    int sp, stackcap;
    Sv *null_sv;
    PyObject *kwnames; /* borrowed from co_consts, for the next CALL */
    int line;
    int backend_wick;
    int entry_grad;                  /* grad mode when the frame starts: what guards check */
    int grad_enabled;                /* grad mode now: changed by no_grad blocks */
    WkVec(char) value_rg;            /* per graph value: requires grad */
    WkVec(int) input_args;           /* frame argument of each graph input */
    WkVec(PyObject *) input_paths;   /* and the attribute path from it (borrowed from its Sv) */
    WkVec(PyObject *) input_tensors; /* borrowed example tensors */
    PyObject *top_globals;           /* the frame's globals: what global guards check */
    int depth;                       /* inlined calls in progress */
    char *reason;                    /* set on fallback */
    int propagate;                   /* a BaseException must propagate */
} Interp;

static Sv *sv_new(Interp *I, SvKind kind) {
    Sv *s = wk_xcalloc(1, sizeof(Sv));
    s->kind = kind;
    s->arg = -1;
    s->value = -1;
    wk_vec_push(&I->all, s);
    return s;
}

static Sv *sv_const_Steal(Interp *I, PyObject *o) {
    Sv *s = sv_new(I, SV_CONST);
    s->obj = o;
    return s;
}

static Sv *sv_const(Interp *I, PyObject *o) { return sv_const_Steal(I, Py_NewRef(o)); }

static Sv *sv_tensor(Interp *I, int value) {
    Sv *s = sv_new(I, SV_TENSOR);
    s->value = value;
    return s;
}

static void sv_free(Sv *s) {
    Py_XDECREF(s->obj);
    Py_XDECREF(s->path);
    Py_XDECREF(s->gname);
    free(s->name);
    wk_vec_free(&s->items);
    free(s);
}

/* ---- failure ------------------------------------------------------------ */

static const char *code_filename(Interp *I) {
    const char *f = PyUnicode_AsUTF8(I->code->co_filename);
    if (!f) {
        PyErr_Clear();
        f = "?";
    }
    return f;
}

/* Records the fallback reason (first one wins) and returns -1. */
static int unsupported(Interp *I, const char *fmt, ...) WK_PRINTF(2, 3);
static int unsupported(Interp *I, const char *fmt, ...) {
    if (I->reason) return -1;
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    WkStr s = {0};
    wk_str_printf(&s, "%s at %s:%d", what, code_filename(I), I->line);
    I->reason = s.data;
    return -1;
}

/* A Python exception raised while interpreting: Exceptions become the
 * reason; other BaseExceptions propagate. Returns -1. */
static int py_failed(Interp *I, const char *during) {
    if (!PyErr_Occurred()) return unsupported(I, "%s failed", during);
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        I->propagate = 1;
        return -1;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *msg = value ? PyObject_Str(value) : NULL;
    const char *m = msg ? PyUnicode_AsUTF8(msg) : NULL;
    if (!m) PyErr_Clear();
    unsupported(I, "%s raised %s: %s", during, type ? ((PyTypeObject *)type)->tp_name : "?", m ? m : "?");
    Py_XDECREF(msg);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return -1;
}

static int graph_failed(Interp *I, const char *what) {
    return unsupported(I, "%s: %s", what, wk_error_get());
}

/* ---- stack -------------------------------------------------------------- */

static int push(Interp *I, Sv *s) {
    if (I->sp >= I->stackcap) return unsupported(I, "symbolic stack overflow");
    I->stack[I->sp++] = s;
    return 0;
}

static Sv *pop(Interp *I) {
    if (I->sp <= 0) {
        unsupported(I, "symbolic stack underflow");
        return NULL;
    }
    return I->stack[--I->sp];
}

static Sv *peek(Interp *I, int n) { /* n = 1 is the top */
    if (n < 1 || n > I->sp) {
        unsupported(I, "symbolic stack underflow");
        return NULL;
    }
    return I->stack[I->sp - n];
}

/* ---- constants ---------------------------------------------------------- */

static int is_number(PyObject *o) {
    return PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o);
}

/* Values whose operations run no user code and whose results are again
 * plain data: safe to fold at compile time. */
static int is_plain(PyObject *o) {
    if (o == Py_None || is_number(o) || PyUnicode_CheckExact(o) || PyComplex_CheckExact(o)) return 1;
    /* torch.dtype: compared by identity in C, no arithmetic (that raises) */
    if (dtype_type && Py_TYPE(o) == (PyTypeObject *)dtype_type) return 1;
    if (PyTuple_CheckExact(o) || (size_type && Py_TYPE(o) == (PyTypeObject *)size_type)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); i++)
            if (!is_plain(PyTuple_GET_ITEM(o, i))) return 0;
        return 1;
    }
    return 0;
}

static const char *type_name(PyObject *o) { return Py_TYPE(o)->tp_name; }

static const char *sv_desc(const Sv *s) {
    switch (s->kind) {
    case SV_NULL: return "NULL";
    case SV_CONST: return type_name(s->obj);
    case SV_TENSOR: return "Tensor";
    case SV_TUPLE: return "tuple";
    case SV_LIST: return "list";
    case SV_METHOD: return "method";
    case SV_OPAQUE: return s->obj ? type_name(s->obj) : "object";
    case SV_GRAD_CTX: return "grad-mode context manager";
    case SV_GRAD_EXIT: return "grad-mode __exit__";
    }
    return "?";
}

/* ---- tensors ------------------------------------------------------------ */

static int device_of(PyObject *t, WkDevice *dev, int *ok) {
    PyObject *d = PyObject_GetAttr(t, s_device);
    if (!d) return -1;
    PyObject *type = PyObject_GetAttrString(d, "type");
    PyObject *index = type ? PyObject_GetAttrString(d, "index") : NULL;
    Py_DECREF(d);
    if (!index) {
        Py_XDECREF(type);
        return -1;
    }
    const char *ts = PyUnicode_Check(type) ? PyUnicode_AsUTF8(type) : NULL;
    *ok = 1;
    dev->index = index == Py_None ? 0 : (int)PyLong_AsLong(index);
    if (ts && strcmp(ts, "cpu") == 0) dev->type = WK_DEV_CPU;
    else if (ts && strcmp(ts, "cuda") == 0) dev->type = WK_DEV_CUDA;
    else *ok = 0;
    Py_DECREF(type);
    Py_DECREF(index);
    return PyErr_Occurred() ? -1 : 0;
}

static void set_rg(Interp *I, int value, int rg) {
    while (I->value_rg.len <= value) wk_vec_push(&I->value_rg, 0);
    I->value_rg.data[value] = (char)rg;
}

static int get_rg(const Interp *I, int value) { return value < I->value_rg.len && I->value_rg.data[value]; }

/* "L['self'].weight": where an argument-derived value comes from. */
static int sv_source(Interp *I, const Sv *s, char *buf, size_t n) {
    if (s->gname) {
        const char *g = PyUnicode_AsUTF8(s->gname);
        if (!g) return py_failed(I, "reading a global name");
        snprintf(buf, n, "G['%s']", g);
        return 0;
    }
    const char *an = PyUnicode_AsUTF8(PyTuple_GET_ITEM(I->argnames, s->arg));
    if (!an) return py_failed(I, "reading an argument name");
    size_t k = (size_t)snprintf(buf, n, "L['%s']", an);
    for (Py_ssize_t i = 0; s->path && i < PyTuple_GET_SIZE(s->path) && k < n; i++) {
        const char *a = PyUnicode_AsUTF8(PyTuple_GET_ITEM(s->path, i));
        if (!a) return py_failed(I, "reading an attribute name");
        k += (size_t)snprintf(buf + k, n - k, ".%s", a);
    }
    return 0;
}

/* The graph value of a tensor Sv, adding the argument as a graph input on
 * first use. -1 on fallback. */
static int tensor_value(Interp *I, Sv *s) {
    if (s->value >= 0) return s->value;
    PyObject *t = s->obj;
    char src[256];
    if (sv_source(I, s, src, sizeof src) < 0) return -1;
    PyObject *dt = NULL, *shape = NULL, *stride = NULL, *rg = NULL;
    int64_t sizes[WK_MAX_DIMS], strides[WK_MAX_DIMS];
    int rc = -1;
    if (!(dt = PyObject_GetAttr(t, s_dtype))) goto pyerr;
    int d = dtype_of_obj(dt);
    if (d < 0) {
        PyObject *str = PyObject_Str(dt);
        unsupported(I, "%s: unsupported dtype %s", src, str ? PyUnicode_AsUTF8(str) : "?");
        Py_XDECREF(str);
        PyErr_Clear();
        goto done;
    }
    WkDevice dev;
    int dev_ok;
    if (device_of(t, &dev, &dev_ok) < 0) goto pyerr;
    if (!dev_ok) {
        unsupported(I, "%s: unsupported device", src);
        goto done;
    }
    if (dev.type != WK_DEV_CPU && I->backend_wick) {
        unsupported(I, "%s is on a GPU: no GPU (Triton) backend yet", src);
        goto done;
    }
    if (!(rg = PyObject_GetAttr(t, s_requires_grad))) goto pyerr;
    int requires_grad = rg == Py_True;
    if (!(shape = PyObject_GetAttr(t, s_shape))) goto pyerr;
    if (!(stride = PyObject_CallMethodNoArgs(t, s_stride))) goto pyerr;
    Py_ssize_t nd = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : -1;
    if (nd < 0 || !PyTuple_Check(stride) || PyTuple_GET_SIZE(stride) != nd) {
        unsupported(I, "%s: unreadable shape", src);
        goto done;
    }
    if (nd > WK_MAX_DIMS) {
        unsupported(I, "%s: tensors of rank %d are not supported (at most %d dims)", src, (int)nd,
                    WK_MAX_DIMS);
        goto done;
    }
    for (Py_ssize_t i = 0; i < nd; i++) {
        sizes[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        strides[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride, i));
    }
    if (PyErr_Occurred()) goto pyerr;
    int v = wk_graph_input(I->g, (WkDType)d, dev, (int)nd, sizes, strides, 0, src);
    if (v < 0) {
        graph_failed(I, src);
        goto done;
    }
    s->value = v;
    set_rg(I, v, requires_grad);
    wk_vec_push(&I->input_args, s->arg);
    wk_vec_push(&I->input_paths, s->gname ? s->gname : s->path);
    wk_vec_push(&I->input_tensors, t);
    rc = v;
    goto done;
pyerr:
    py_failed(I, src);
done:
    Py_XDECREF(dt);
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    Py_XDECREF(rg);
    return rc;
}

/* A Python number as a wrapped 0-d graph value. */
static int scalar_value(Interp *I, PyObject *o) {
    int v;
    if (PyBool_Check(o)) {
        v = wk_graph_scalar(I->g, WK_BOOL, 0, o == Py_True);
    } else if (PyLong_CheckExact(o)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow) return unsupported(I, "integer constant out of int64 range");
        v = wk_graph_scalar(I->g, WK_I64, (double)x, x);
    } else if (PyFloat_CheckExact(o)) {
        v = wk_graph_scalar(I->g, WK_F64, PyFloat_AS_DOUBLE(o), 0);
    } else {
        return unsupported(I, "%s as a tensor operand", type_name(o));
    }
    if (v < 0) return graph_failed(I, "scalar");
    return v;
}

/* Tensor or Python-number operand -> graph value id. */
static int operand_value(Interp *I, Sv *s, const char *what) {
    if (s->kind == SV_TENSOR) return tensor_value(I, s);
    if (s->kind == SV_CONST && is_number(s->obj)) return scalar_value(I, s->obj);
    return unsupported(I, "%s of type %s", what, sv_desc(s));
}

static const WkValue *sv_meta(Interp *I, Sv *s) {
    int v = tensor_value(I, s);
    return v < 0 ? NULL : wk_graph_value(I->g, v);
}

/* Result Sv of a graph op, or NULL (reason set). An op on a tensor that
 * requires grad, in grad mode, would need autodiff. */
static Sv *graph_op(Interp *I, WkOp op, const int *in, int n, const WkAttrs *attrs) {
    for (int i = 0; I->grad_enabled && i < n; i++)
        if (get_rg(I, in[i])) {
            const WkValue *m = wk_graph_value(I->g, in[i]);
            unsupported(I, "%s requires grad: autodiff not implemented yet", m && m->source ? m->source : "a tensor");
            return NULL;
        }
    int v = wk_graph_op(I->g, op, in, n, attrs);
    if (v < 0) {
        graph_failed(I, wk_op_info(op)->name);
        return NULL;
    }
    return sv_tensor(I, v);
}

static Sv *convert(Interp *I, Sv *t, int dtype) {
    const WkValue *m = sv_meta(I, t);
    if (!m) return NULL;
    if ((int)m->dtype == dtype) return t; /* torch returns self */
    WkAttrs at = {0};
    at.dtype = (WkDType)dtype;
    at.has_dtype = 1;
    int in = m->id;
    return graph_op(I, WK_OP_CONVERT, &in, 1, &at);
}

static PyObject *torch_size_Ref(const WkValue *m) {
    PyObject *t = PyTuple_New(m->ndim);
    if (!t) return NULL;
    for (int i = 0; i < m->ndim; i++) {
        int64_t n = 0;
        wk_sym_is_const(m->sizes[i], &n);
        PyObject *x = PyLong_FromLongLong(n);
        if (!x) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    PyObject *r = PyObject_CallOneArg(size_type, t);
    Py_DECREF(t);
    return r;
}

/* ---- binding calls against op signatures -------------------------------- */

typedef struct {
    Sv **pos;
    int npos;
    PyObject *kwnames; /* tuple or NULL */
    Sv **kw;
    int nkw;
} Args;

/* Binds a call's arguments to op's signature; *given has bit i set when
 * parameter i was passed explicitly. */
static int bind(Interp *I, WkOp op, const Args *a, Sv **out, unsigned *given, const char *fname) {
    const Sig *sig = &sigs[op];
    int np = 0;
    for (int i = 0; i < sig->n; i++) out[i] = NULL;
    for (int i = 0; i < sig->n && !sig->p[i].kwonly; i++) np++;
    if (a->npos > np) return unsupported(I, "%s() takes %d positional arguments but %d were given", fname, np, a->npos);
    for (int i = 0; i < a->npos; i++) out[i] = a->pos[i];
    for (int k = 0; k < a->nkw; k++) {
        const char *kn = PyUnicode_AsUTF8(PyTuple_GET_ITEM(a->kwnames, k));
        if (!kn) return py_failed(I, "keyword name");
        int found = -1;
        for (int i = 0; i < sig->n; i++)
            if (strcmp(sig->p[i].name, kn) == 0) found = i;
        if (found < 0) {
            /* F.relu(x, inplace=False) computes what relu(x) does */
            if (strcmp(kn, "inplace") == 0 && a->kw[k]->kind == SV_CONST && a->kw[k]->obj == Py_False)
                continue;
            return unsupported(I, "%s() got an unexpected keyword argument '%s'", fname, kn);
        }
        if (out[found]) return unsupported(I, "%s() got multiple values for argument '%s'", fname, kn);
        out[found] = a->kw[k];
    }
    *given = 0;
    for (int i = 0; i < sig->n; i++) {
        if (out[i]) {
            *given |= 1u << i;
            continue;
        }
        if (!sig->p[i].has_default)
            return unsupported(I, "%s() missing required argument '%s'", fname, sig->p[i].name);
        PyObject *d = default_value_Ref(sig->p[i].dflt);
        if (!d) return py_failed(I, "default value");
        out[i] = sv_const_Steal(I, d);
    }
    return 0;
}

/* dim argument: None / int / tuple or list of ints. */
static int read_dims(Interp *I, Sv *s, WkAttrs *at, const char *fname) {
    at->ndims = 0;
    if (s->kind == SV_CONST && s->obj == Py_None) return 0;
    if (s->kind == SV_CONST && PyLong_CheckExact(s->obj)) {
        at->dims[0] = (int)PyLong_AsLong(s->obj);
        at->ndims = 1;
        return PyErr_Occurred() ? py_failed(I, "dim") : 0;
    }
    Py_ssize_t n;
    if (s->kind == SV_CONST && PyTuple_Check(s->obj)) n = PyTuple_GET_SIZE(s->obj);
    else if (s->kind == SV_TUPLE || s->kind == SV_LIST) n = s->items.len;
    else return unsupported(I, "%s(): dim of type %s", fname, sv_desc(s));
    if (n > WK_MAX_DIMS) return unsupported(I, "%s(): too many dims", fname);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o;
        if (s->kind == SV_CONST) o = PyTuple_GET_ITEM(s->obj, i);
        else if (s->items.data[i]->kind == SV_CONST) o = s->items.data[i]->obj;
        else return unsupported(I, "%s(): dim entries must be ints", fname);
        if (!PyLong_CheckExact(o)) return unsupported(I, "%s(): dim entries must be ints", fname);
        at->dims[i] = (int)PyLong_AsLong(o);
        if (PyErr_Occurred()) return py_failed(I, "dim");
    }
    at->ndims = (int)n;
    return 0;
}

static int read_dtype(Interp *I, Sv *s, int *dt, const char *fname) {
    if (s->kind == SV_CONST && s->obj == Py_None) {
        *dt = -1;
        return 0;
    }
    int d = s->kind == SV_CONST ? dtype_of_obj(s->obj) : -1;
    if (d < 0) return unsupported(I, "%s(): unsupported dtype argument (%s)", fname, sv_desc(s));
    *dt = d;
    return 0;
}

static int is_one(PyObject *o) {
    if (PyLong_CheckExact(o)) return PyLong_AsLong(o) == 1 && !PyErr_Occurred();
    if (PyFloat_CheckExact(o)) return PyFloat_AS_DOUBLE(o) == 1.0;
    return 0;
}

/* A call of op with bound arguments. `method` is set when called as a
 * tensor method (input is self). */
static Sv *call_op(Interp *I, WkOp op, const Args *a, const char *fname, int method) {
    const WkOpInfo *info = wk_op_info(op);
    Sv *b[MAX_PARAMS];
    unsigned given = 0;
    if (bind(I, op, a, b, &given, fname) < 0) return NULL;
    const Sig *sig = &sigs[op];
    int in[3];
    int any_tensor = 0;
    for (int i = 0; i < info->arity; i++) {
        Sv *s = b[i];
        /* torch functions take Python numbers only where a Scalar overload exists */
        int may_be_number = !(i == 0 && op != WK_OP_POW && !method && strcmp(sig->p[i].name, "input") == 0) &&
                            strcmp(sig->p[i].name, "condition") != 0 && op != WK_OP_MAXIMUM &&
                            op != WK_OP_MINIMUM;
        if (s->kind != SV_TENSOR && !may_be_number)
            return unsupported(I, "%s(): argument '%s' must be a Tensor, not %s", fname, sig->p[i].name,
                               sv_desc(s)),
                   NULL;
        any_tensor |= s->kind == SV_TENSOR;
        in[i] = operand_value(I, s, sig->p[i].name);
        if (in[i] < 0) return NULL;
    }
    if (!any_tensor) return unsupported(I, "%s() without a tensor argument", fname), NULL;
    WkAttrs at = {0};
    switch (op) {
    case WK_OP_ADD:
    case WK_OP_SUB: {
        Sv *alpha = b[2];
        if (alpha->kind != SV_CONST || !(PyLong_CheckExact(alpha->obj) || PyFloat_CheckExact(alpha->obj)))
            return unsupported(I, "%s(): alpha of type %s", fname, sv_desc(alpha)), NULL;
        if (!is_one(alpha->obj)) {
            const WkValue *x = wk_graph_value(I->g, in[0]), *y = wk_graph_value(I->g, in[1]);
            if (PyFloat_CheckExact(alpha->obj) && !wk_dtype_is_float(x->dtype) && !wk_dtype_is_float(y->dtype))
                return unsupported(I, "%s(): float alpha with integral inputs", fname), NULL;
            /* torch computes other*alpha in the result dtype of (input, other):
             * the plain op gives that dtype and torch's errors (bool - bool);
             * the node itself is dead and gets no kernel. */
            Sv *plain = graph_op(I, op, in, 2, NULL);
            if (!plain) return NULL;
            WkDType result = wk_graph_value(I->g, plain->value)->dtype;
            int sc = scalar_value(I, alpha->obj);
            if (sc < 0) return NULL;
            int mi[2] = {in[1], sc};
            Sv *scaled = graph_op(I, WK_OP_MUL, mi, 2, NULL);
            if (!scaled) return NULL;
            if (wk_graph_value(I->g, scaled->value)->dtype != result) {
                scaled = convert(I, scaled, (int)result);
                if (!scaled) return NULL;
            }
            in[1] = scaled->value;
        }
        return graph_op(I, op, in, 2, NULL);
    }
    case WK_OP_CONVERT: {
        int dt;
        if (read_dtype(I, b[1], &dt, fname) < 0) return NULL;
        if (dt < 0) return unsupported(I, "%s(): dtype=None", fname), NULL;
        return convert(I, b[0], dt);
    }
    case WK_OP_SUM:
    case WK_OP_MEAN:
    case WK_OP_AMAX: {
        if (b[0]->kind != SV_TENSOR) return unsupported(I, "%s() of a %s", fname, sv_desc(b[0])), NULL;
        /* torch has no sum(keepdim=) overload without dim: it raises */
        if ((given & 4u) && !(given & 2u) && op != WK_OP_AMAX)
            return unsupported(I, "%s(): keepdim without dim", fname), NULL;
        if (read_dims(I, b[1], &at, fname) < 0) return NULL;
        if (b[2]->kind != SV_CONST || !PyBool_Check(b[2]->obj))
            return unsupported(I, "%s(): keepdim must be a bool", fname), NULL;
        at.keepdim = b[2]->obj == Py_True;
        if (op != WK_OP_AMAX) {
            int dt;
            if (read_dtype(I, b[3], &dt, fname) < 0) return NULL;
            if (dt >= 0) {
                at.dtype = (WkDType)dt;
                at.has_dtype = 1;
            }
        }
        /* sum/mean(dtype=...) cast their input first, as torch does */
        if (at.has_dtype) {
            Sv *c = convert(I, b[0], at.dtype);
            if (!c) return NULL;
            in[0] = c->value;
        }
        return graph_op(I, op, in, 1, &at);
    }
    default:
        /* parameters past the tensor operands carry attributes this op
         * table row has no capture rule for: refuse rather than drop them */
        for (int i = info->arity; i < sig->n; i++)
            if (given & (1u << i))
                return unsupported(I, "%s(): argument '%s' is not supported", fname, sig->p[i].name), NULL;
        return graph_op(I, op, in, info->arity, NULL);
    }
}

/* ---- tensor methods and attributes -------------------------------------- */

static const struct {
    const char *name;
    WkDType dtype;
} convert_methods[] = {
    {"float", WK_F32}, {"double", WK_F64}, {"half", WK_F16},  {"bfloat16", WK_BF16},
    {"long", WK_I64},  {"int", WK_I32},    {"short", WK_I16}, {"char", WK_I8},
    {"byte", WK_U8},   {"bool", WK_BOOL},
};

static int is_special_method(const char *name) {
    static const char *const names[] = {"size", "dim", "ndimension", "numel", "nelement", "to", "type_as",
                                        "is_floating_point", "is_contiguous"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i], name) == 0) return 1;
    for (size_t i = 0; i < sizeof convert_methods / sizeof convert_methods[0]; i++)
        if (strcmp(convert_methods[i].name, name) == 0) return 1;
    return 0;
}

static int64_t const_size(const WkValue *m, int d) {
    int64_t n = 0;
    wk_sym_is_const(m->sizes[d], &n);
    return n;
}

/* self.name(*args) */
static Sv *call_method(Interp *I, const char *name, const Args *a) {
    Sv *self = a->pos[0];
    char fname[80];
    snprintf(fname, sizeof fname, "Tensor.%s", name);
    const WkValue *m = sv_meta(I, self);
    if (!m) return NULL;
    int nargs = a->npos - 1 + a->nkw;
    if (strcmp(name, "size") == 0) {
        Sv *dim = a->npos > 1 ? a->pos[1] : NULL;
        if (a->nkw == 1 && !dim && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(a->kwnames, 0), "dim") == 0)
            dim = a->kw[0];
        if (nargs > 1 || (nargs == 1 && !dim)) return unsupported(I, "%s() arguments", fname), NULL;
        if (!dim || (dim->kind == SV_CONST && dim->obj == Py_None)) {
            PyObject *sz = torch_size_Ref(m);
            if (!sz) return py_failed(I, "size()"), NULL;
            return sv_const_Steal(I, sz);
        }
        if (dim->kind != SV_CONST || !PyLong_CheckExact(dim->obj))
            return unsupported(I, "%s(): dim of type %s", fname, sv_desc(dim)), NULL;
        long d = PyLong_AsLong(dim->obj);
        int wrap = m->ndim ? m->ndim : 1;
        if (d < -wrap || d >= wrap) return unsupported(I, "%s(): dimension out of range", fname), NULL;
        if (d < 0) d += wrap;
        return sv_const_Steal(I, PyLong_FromLongLong(m->ndim ? const_size(m, (int)d) : 1));
    }
    if (strcmp(name, "dim") == 0 || strcmp(name, "ndimension") == 0) {
        if (nargs) return unsupported(I, "%s() arguments", fname), NULL;
        return sv_const_Steal(I, PyLong_FromLong(m->ndim));
    }
    if (strcmp(name, "is_floating_point") == 0) {
        if (nargs) return unsupported(I, "%s() arguments", fname), NULL;
        return sv_const(I, wk_dtype_is_float(m->dtype) ? Py_True : Py_False);
    }
    if (strcmp(name, "is_contiguous") == 0) {
        if (nargs) return unsupported(I, "%s() arguments", fname), NULL;
        /* inputs answer from guarded strides; eager's node outputs follow
         * their inputs' layouts, which the graph does not model */
        if (!self->obj) return unsupported(I, "%s() of a computed tensor", fname), NULL;
        PyObject *r = PyObject_CallMethod(self->obj, "is_contiguous", NULL);
        if (!r) return py_failed(I, fname), NULL;
        return sv_const_Steal(I, r);
    }
    if (strcmp(name, "numel") == 0 || strcmp(name, "nelement") == 0) {
        if (nargs) return unsupported(I, "%s() arguments", fname), NULL;
        int64_t n = 1;
        for (int d = 0; d < m->ndim; d++) n *= const_size(m, d);
        return sv_const_Steal(I, PyLong_FromLongLong(n));
    }
    for (size_t i = 0; i < sizeof convert_methods / sizeof convert_methods[0]; i++) {
        if (strcmp(convert_methods[i].name, name) != 0) continue;
        if (nargs) return unsupported(I, "%s() arguments", fname), NULL;
        return convert(I, self, convert_methods[i].dtype);
    }
    if (strcmp(name, "type_as") == 0) {
        if (a->npos != 2 || a->nkw || a->pos[1]->kind != SV_TENSOR)
            return unsupported(I, "%s() arguments", fname), NULL;
        const WkValue *o = sv_meta(I, a->pos[1]);
        if (!o) return NULL;
        return convert(I, self, o->dtype);
    }
    if (strcmp(name, "to") == 0) {
        Sv *dt = NULL;
        if (a->npos == 2 && a->nkw == 0) dt = a->pos[1];
        else if (a->npos == 1 && a->nkw == 1 &&
                 PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(a->kwnames, 0), "dtype") == 0)
            dt = a->kw[0];
        int d = dt && dt->kind == SV_CONST ? dtype_of_obj(dt->obj) : -1;
        if (d < 0) return unsupported(I, "%s() with arguments other than a dtype", fname), NULL;
        return convert(I, self, d);
    }
    int op = method_op(name);
    if (op < 0) return unsupported(I, "unsupported tensor method %s()", fname), NULL;
    return call_op(I, (WkOp)op, a, fname, 1);
}

static int tensor_attr(Interp *I, Sv *t, PyObject *name_obj, int method) {
    const char *name = PyUnicode_AsUTF8(name_obj);
    if (!name) return py_failed(I, "attribute name");
    const WkValue *m = sv_meta(I, t);
    if (!m) return -1;
    PyObject *c = NULL;
    if (strcmp(name, "shape") == 0) {
        c = torch_size_Ref(m);
    } else if (strcmp(name, "ndim") == 0) {
        c = PyLong_FromLong(m->ndim);
    } else if (strcmp(name, "dtype") == 0) {
        c = Py_NewRef(dtype_objs[m->dtype]);
    } else if (strcmp(name, "device") == 0) {
        c = m->device.type == WK_DEV_CPU ? PyObject_CallFunction(device_type, "s", "cpu")
                                         : PyObject_CallFunction(device_type, "si", "cuda", m->device.index);
    } else if (strcmp(name, "is_cuda") == 0) {
        c = PyBool_FromLong(m->device.type == WK_DEV_CUDA);
    } else if (strcmp(name, "requires_grad") == 0) {
        /* node outputs never require grad: inputs that do, with grad mode
         * on, fell back already */
        c = (t->arg >= 0 || t->gname) && t->obj ? PyObject_GetAttr(t->obj, s_requires_grad) : Py_NewRef(Py_False);
    }
    if (c || PyErr_Occurred()) {
        if (!c) return py_failed(I, name);
        if (method && push(I, I->null_sv) < 0) {
            Py_DECREF(c);
            return -1;
        }
        return push(I, sv_const_Steal(I, c));
    }
    if (method_op(name) < 0 && !is_special_method(name))
        return unsupported(I, "unsupported tensor attribute .%s", name);
    Sv *meth = sv_new(I, SV_METHOD);
    meth->name = wk_xstrdup(name);
    if (method) {
        if (push(I, meth) < 0) return -1;
        return push(I, t);
    }
    meth->self = t;
    return push(I, meth);
}

/* ---- calls -------------------------------------------------------------- */

static const char *callable_name(PyObject *o, char *buf, size_t n) {
    PyObject *mod = PyObject_GetAttrString(o, "__module__");
    if (!mod) PyErr_Clear();
    /* torch's builtins have qualnames like _VariableFunctionsClass.matmul */
    PyObject *nm = PyObject_GetAttrString(o, PyCFunction_Check(o) ? "__name__" : "__qualname__");
    if (!nm) {
        PyErr_Clear();
        nm = PyObject_GetAttrString(o, "__name__");
        if (!nm) PyErr_Clear();
    }
    const char *ms = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    const char *ns = nm && PyUnicode_Check(nm) ? PyUnicode_AsUTF8(nm) : NULL;
    if (ns && ms && strcmp(ms, "builtins") != 0) snprintf(buf, n, "%s.%s", ms, ns);
    else if (ns) snprintf(buf, n, "%s", ns);
    else snprintf(buf, n, "<%s object>", type_name(o));
    PyErr_Clear();
    Py_XDECREF(mod);
    Py_XDECREF(nm);
    return buf;
}

/* Builtins that are pure on plain data, folded at compile time. */
static int foldable_builtin(PyObject *o) {
    if (!PyCFunction_Check(o)) return 0;
    PyObject *self = PyCFunction_GET_SELF(o);
    if (!self || !PyModule_Check(self) || strcmp(PyModule_GetName(self) ? PyModule_GetName(self) : "", "builtins"))
        return 0;
    static const char *const names[] = {"len", "abs", "min", "max", "round", "divmod", "pow"};
    const char *n = ((PyCFunctionObject *)o)->m_ml->ml_name;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(n, names[i]) == 0) return 1;
    return 0;
}

static int pure_type_call(PyObject *o) {
    return o == (PyObject *)&PyFloat_Type || o == (PyObject *)&PyLong_Type || o == (PyObject *)&PyBool_Type ||
           o == (PyObject *)&PyTuple_Type;
}

static Sv *call_builtin_on_tensor(Interp *I, PyObject *fn, const Args *a) {
    const char *n = ((PyCFunctionObject *)fn)->m_ml->ml_name;
    if (a->npos != 1 || a->nkw) return NULL;
    const WkValue *m = sv_meta(I, a->pos[0]);
    if (!m) return NULL;
    if (strcmp(n, "len") == 0) {
        if (m->ndim == 0) return unsupported(I, "len() of a 0-d tensor"), NULL;
        return sv_const_Steal(I, PyLong_FromLongLong(const_size(m, 0)));
    }
    if (strcmp(n, "abs") == 0) {
        int in = m->id;
        return graph_op(I, WK_OP_ABS, &in, 1, NULL);
    }
    return NULL;
}

static int is_builtin_named(PyObject *o, const char *name) {
    if (!PyCFunction_Check(o)) return 0;
    PyObject *self = PyCFunction_GET_SELF(o);
    const char *mod = self && PyModule_Check(self) ? PyModule_GetName(self) : NULL;
    if (!mod) PyErr_Clear();
    return mod && strcmp(mod, "builtins") == 0 && strcmp(((PyCFunctionObject *)o)->m_ml->ml_name, name) == 0;
}

/* isinstance(v, cls) and len(v) on values whose type is fixed by guards
 * (tensors are exact torch.Tensor or Parameter; arguments have exact-type
 * guards; tuples and lists have a known length). NULL without a reason
 * when not applicable. */
static Sv *fold_isinstance(Interp *I, Sv *v, PyObject *cls);

static Sv *fold_type_builtin(Interp *I, PyObject *fn, const Args *a) {
    if (a->nkw) return NULL;
    if (is_builtin_named(fn, "len") && a->npos == 1 && (a->pos[0]->kind == SV_TUPLE || a->pos[0]->kind == SV_LIST))
        return sv_const_Steal(I, PyLong_FromLong(a->pos[0]->items.len));
    if (!is_builtin_named(fn, "isinstance") || a->npos != 2) return NULL;
    Sv *v = a->pos[0], *c = a->pos[1];
    PyObject *cls = NULL;
    if (c->kind == SV_CONST && (PyType_Check(c->obj) || PyTuple_CheckExact(c->obj))) {
        cls = Py_NewRef(c->obj);
    } else if (c->kind == SV_TUPLE) { /* isinstance(x, (int, float)): a tuple built from globals */
        cls = PyTuple_New(c->items.len);
        if (!cls) return py_failed(I, "isinstance()"), NULL;
        for (int i = 0; i < c->items.len; i++) {
            Sv *it = c->items.data[i];
            if (it->kind != SV_CONST || !PyType_Check(it->obj)) {
                Py_DECREF(cls);
                return unsupported(I, "isinstance() with a %s", sv_desc(it)), NULL;
            }
            PyTuple_SET_ITEM(cls, i, Py_NewRef(it->obj));
        }
    } else {
        return unsupported(I, "isinstance() with a %s", sv_desc(c)), NULL;
    }
    Sv *res = fold_isinstance(I, v, cls);
    Py_DECREF(cls);
    return res;
}

static Sv *fold_isinstance(Interp *I, Sv *v, PyObject *cls) {
    PyObject *example = NULL;
    switch (v->kind) {
    case SV_TENSOR: example = v->obj ? v->obj : NULL; break;
    case SV_CONST:
    case SV_OPAQUE: example = v->obj; break;
    default: break;
    }
    int r;
    if (example) {
        r = PyObject_IsInstance(example, cls);
    } else {
        PyTypeObject *t = v->kind == SV_TENSOR ? tensor_type : v->kind == SV_TUPLE ? &PyTuple_Type
                          : v->kind == SV_LIST ? &PyList_Type : NULL;
        if (!t) return unsupported(I, "isinstance() of a %s", sv_desc(v)), NULL;
        r = PyObject_IsSubclass((PyObject *)t, cls);
    }
    if (r < 0) return py_failed(I, "isinstance()"), NULL;
    return sv_const(I, r ? Py_True : Py_False);
}

static Sv *run(Interp *I, const WkInstr *ins, int n, int *ret_line);

/* Inlines a call of a plain Python function: its bytecode runs on the same
 * graph and guards, with the bound arguments as its locals; its globals
 * (maybe another module's) are guarded in their own dict. The function
 * itself is guarded by how it was found (a global's identity, or the exact
 * type of the object whose method it is). */
static Sv *inline_call(Interp *I, PyFunctionObject *f, const Args *a) {
    char buf[200];
    PyCodeObject *co = (PyCodeObject *)f->func_code;
    const char *name = callable_name((PyObject *)f, buf, sizeof buf);
    if (I->depth >= 8) return unsupported(I, "call to %s(): inlining too deep", name), NULL;
    if (f->func_closure || co->co_nfreevars || co->co_ncellvars)
        return unsupported(I, "call to %s(): closures are not inlined yet", name), NULL;
    if (co->co_flags & (CO_VARARGS | CO_VARKEYWORDS | CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR))
        return unsupported(I, "call to %s(): *args, **kwargs or a generator", name), NULL;
    int npos = co->co_argcount, nkwonly = co->co_kwonlyargcount, nparams = npos + nkwonly;
    if (a->npos > npos) return unsupported(I, "call to %s(): too many positional arguments", name), NULL;
    PyObject *varnames = PyCode_GetVarnames(co);
    if (!varnames) return py_failed(I, "co_varnames"), NULL;
    Sv **locals = wk_xcalloc((size_t)co->co_nlocalsplus + 1, sizeof(Sv *));
    Sv **stack = NULL;
    WkInstr *ins = NULL;
    Sv *res = NULL;
    for (int i = 0; i < a->npos; i++) locals[i] = a->pos[i];
    for (int k = 0; k < a->nkw; k++) {
        PyObject *kn = PyTuple_GET_ITEM(a->kwnames, k);
        int found = -1;
        for (int i = co->co_posonlyargcount; i < nparams; i++)
            if (PyUnicode_Compare(PyTuple_GET_ITEM(varnames, i), kn) == 0) found = i;
        if (found < 0 || locals[found]) {
            unsupported(I, "call to %s(): bad keyword argument %s", name, PyUnicode_AsUTF8(kn));
            goto done;
        }
        locals[found] = a->kw[k];
    }
    PyObject *defaults = f->func_defaults, *kwdefaults = f->func_kwdefaults;
    Py_ssize_t ndef = defaults ? PyTuple_GET_SIZE(defaults) : 0;
    for (int i = 0; i < nparams; i++) {
        if (locals[i]) continue;
        PyObject *d = NULL;
        if (i < npos && i >= npos - ndef) d = PyTuple_GET_ITEM(defaults, i - (npos - ndef));
        else if (i >= npos && kwdefaults) d = PyDict_GetItemWithError(kwdefaults, PyTuple_GET_ITEM(varnames, i));
        if (!d) {
            if (PyErr_Occurred()) py_failed(I, "keyword defaults");
            else unsupported(I, "call to %s(): missing argument %s", name, PyUnicode_AsUTF8(PyTuple_GET_ITEM(varnames, i)));
            goto done;
        }
        if (!(is_plain(d) || (dtype_type && Py_TYPE(d) == (PyTypeObject *)dtype_type))) {
            unsupported(I, "call to %s(): default value of type %s", name, type_name(d));
            goto done;
        }
        locals[i] = sv_const(I, d);
    }
    int nins = 0;
    ins = wk_bc_decode(co, &nins);
    if (!ins) {
        py_failed(I, "decoding bytecode");
        goto done;
    }
    /* the caller's interpreter state, restored after the call */
    PyFunctionObject *s_fn = I->fn;
    PyCodeObject *s_code = I->code;
    Sv **s_locals = I->locals, **s_stack = I->stack;
    int s_nlocals = I->nlocals, s_sp = I->sp, s_cap = I->stackcap, s_line = I->line;
    PyObject *s_kw = I->kwnames;
    stack = wk_xcalloc((size_t)co->co_stacksize + 8, sizeof(Sv *));
    I->fn = f;
    I->code = co;
    I->locals = locals;
    I->nlocals = co->co_nlocalsplus;
    I->stack = stack;
    I->sp = 0;
    I->stackcap = co->co_stacksize + 8;
    I->kwnames = NULL;
    I->depth++;
    int ret_line;
    res = run(I, ins, nins, &ret_line);
    I->depth--;
    I->locals = s_locals;
    I->nlocals = s_nlocals;
    I->stack = s_stack;
    I->sp = s_sp;
    I->stackcap = s_cap;
    I->kwnames = s_kw;
    if (res) { /* on failure keep the callee's code and line: the reason is there */
        I->fn = s_fn;
        I->code = s_code;
        I->line = s_line;
    }
done:
    free(ins);
    free(stack);
    free(locals);
    Py_DECREF(varnames);
    return res;
}

/* CALL n (3.11 after PRECALL; 3.12). Unused on 3.13, whose call sequences
 * capture does not model yet (every call there is a fallback). */
WK_UNUSED static int do_call(Interp *I, int n) {
    int nkw = I->kwnames ? (int)PyTuple_GET_SIZE(I->kwnames) : 0;
    PyObject *kwnames = I->kwnames;
    I->kwnames = NULL;
    if (I->sp < n + 2) return unsupported(I, "symbolic stack underflow");
    Sv **argv = &I->stack[I->sp - n];
#if PY313
    Sv *callable = I->stack[I->sp - n - 2], *self = I->stack[I->sp - n - 1];
    if (self->kind == SV_NULL) self = NULL;
#else
    Sv *callable, *self = NULL;
    if (I->stack[I->sp - n - 2]->kind == SV_NULL) {
        callable = I->stack[I->sp - n - 1];
    } else {
        callable = I->stack[I->sp - n - 2];
        self = I->stack[I->sp - n - 1];
    }
#endif
    Sv *pos[64];
    int npos = 0;
    if (n - nkw + 2 > 64) return unsupported(I, "call with too many arguments");
    if (callable->kind == SV_METHOD && callable->self) pos[npos++] = callable->self;
    if (self) pos[npos++] = self;
    for (int i = 0; i < n - nkw; i++) pos[npos++] = argv[i];
    Args a = {pos, npos, kwnames, argv + (n - nkw), nkw};
    Sv *res = NULL;
    char buf[200];

    if (callable->kind == SV_METHOD) {
        if (npos < 1 || pos[0]->kind != SV_TENSOR) return unsupported(I, "method call without a tensor");
        res = call_method(I, callable->name, &a);
    } else if (callable->kind == SV_GRAD_EXIT) { /* __exit__(None, None, None) of a with block */
        I->grad_enabled = callable->value;
        res = sv_const(I, Py_None);
    } else if (callable->kind == SV_CONST && n == 0 && !self &&
               ((no_grad_type && callable->obj == no_grad_type) ||
                (enable_grad_type && callable->obj == enable_grad_type))) {
        res = sv_new(I, SV_GRAD_CTX);
        res->value = callable->obj == enable_grad_type;
    } else if (callable->kind == SV_CONST) {
        PyObject *fn = callable->obj;
        PyObject *num = fn_to_op ? PyDict_GetItemWithError(fn_to_op, fn) : NULL;
        if (!num && PyErr_Occurred()) PyErr_Clear(); /* unhashable callables are simply unknown */
        if (num) {
            res = call_op(I, (WkOp)PyLong_AsLong(num), &a, callable_name(fn, buf, sizeof buf), 0);
        } else if (PyFunction_Check(fn)) {
            res = inline_call(I, (PyFunctionObject *)fn, &a);
        } else if ((res = fold_type_builtin(I, fn, &a)) != NULL || I->reason) {
            /* folded (or refused) */
        } else if (foldable_builtin(fn) || pure_type_call(fn)) {
            int all_plain = 1, has_tensor = 0;
            for (int i = 0; i < npos; i++) {
                all_plain &= pos[i]->kind == SV_CONST && is_plain(pos[i]->obj);
                has_tensor |= pos[i]->kind == SV_TENSOR;
            }
            for (int i = 0; i < nkw; i++) all_plain &= a.kw[i]->kind == SV_CONST && is_plain(a.kw[i]->obj);
            if (has_tensor && PyCFunction_Check(fn)) res = call_builtin_on_tensor(I, fn, &a);
            if (!res && !I->reason && all_plain) {
                PyObject *t = PyTuple_New(npos);
                PyObject *kw = nkw ? PyDict_New() : NULL;
                if (!t || (nkw && !kw)) {
                    Py_XDECREF(t);
                    Py_XDECREF(kw);
                    return py_failed(I, "call");
                }
                for (int i = 0; i < npos; i++) PyTuple_SET_ITEM(t, i, Py_NewRef(pos[i]->obj));
                for (int i = 0; i < nkw; i++)
                    PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i), a.kw[i]->obj);
                PyObject *r = PyObject_Call(fn, t, kw);
                Py_DECREF(t);
                Py_XDECREF(kw);
                if (!r) return py_failed(I, callable_name(fn, buf, sizeof buf));
                if (!is_plain(r)) {
                    Py_DECREF(r);
                    return unsupported(I, "call to %s() gave a non-constant", callable_name(fn, buf, sizeof buf));
                }
                res = sv_const_Steal(I, r);
            }
            if (!res && !I->reason)
                return unsupported(I, "call to %s() with these arguments", callable_name(fn, buf, sizeof buf));
        } else {
            return unsupported(I, "call to %s()", callable_name(fn, buf, sizeof buf));
        }
    } else {
        return unsupported(I, "call of a %s", sv_desc(callable));
    }
    if (!res) return -1;
    I->sp -= n + 2;
    return push(I, res);
}

/* ---- operators ---------------------------------------------------------- */

static PyObject *fold_binary_Ref(int nb, PyObject *x, PyObject *y) {
    switch (nb) {
    case NB_ADD: case NB_INPLACE_ADD: return PyNumber_Add(x, y);
    case NB_SUBTRACT: case NB_INPLACE_SUBTRACT: return PyNumber_Subtract(x, y);
    case NB_MULTIPLY: case NB_INPLACE_MULTIPLY: return PyNumber_Multiply(x, y);
    case NB_TRUE_DIVIDE: case NB_INPLACE_TRUE_DIVIDE: return PyNumber_TrueDivide(x, y);
    case NB_FLOOR_DIVIDE: case NB_INPLACE_FLOOR_DIVIDE: return PyNumber_FloorDivide(x, y);
    case NB_REMAINDER: case NB_INPLACE_REMAINDER: return PyNumber_Remainder(x, y);
    case NB_POWER: case NB_INPLACE_POWER: return PyNumber_Power(x, y, Py_None);
    case NB_AND: case NB_INPLACE_AND: return PyNumber_And(x, y);
    case NB_OR: case NB_INPLACE_OR: return PyNumber_Or(x, y);
    case NB_XOR: case NB_INPLACE_XOR: return PyNumber_Xor(x, y);
    case NB_LSHIFT: case NB_INPLACE_LSHIFT: return PyNumber_Lshift(x, y);
    case NB_RSHIFT: case NB_INPLACE_RSHIFT: return PyNumber_Rshift(x, y);
    }
    PyErr_SetString(PyExc_NotImplementedError, "operator");
    return NULL;
}

static const char *nb_symbol(int nb) {
    static const char *const s[] = {"+", "&", "//", "<<", "@", "*", "%", "|", "**", ">>", "-", "/", "^"};
    if (nb >= NB_INPLACE_ADD) nb -= NB_INPLACE_ADD;
    return nb >= 0 && nb < (int)(sizeof s / sizeof s[0]) ? s[nb] : "?";
}

static int binary_op(Interp *I, int nb) {
    Sv *y = pop(I), *x = y ? pop(I) : NULL;
    if (!x) return -1;
    int inplace = nb >= NB_INPLACE_ADD;
    int base = inplace ? nb - NB_INPLACE_ADD : nb;
    if (x->kind == SV_CONST && y->kind == SV_CONST && is_plain(x->obj) && is_plain(y->obj)) {
        /* never fold into huge values: 10 ** 10 ** 9, (0,) * 10 ** 9 */
        int numbers = is_number(x->obj) && is_number(y->obj);
        Sv *big = NULL;
        if ((base == NB_POWER || base == NB_LSHIFT) && PyLong_CheckExact(y->obj)) big = y;
        if (base == NB_MULTIPLY && !numbers) big = PyLong_CheckExact(x->obj) ? x : y;
        if (big && PyLong_CheckExact(big->obj)) {
            int ov = 0;
            long long e = PyLong_AsLongLongAndOverflow(big->obj, &ov);
            if (ov || e > 4096) return unsupported(I, "folding a huge constant");
        }
        PyObject *r = fold_binary_Ref(nb, x->obj, y->obj);
        if (!r) return py_failed(I, nb_symbol(nb));
        if (!is_plain(r)) {
            Py_DECREF(r);
            return unsupported(I, "operator %s gave a non-constant", nb_symbol(nb));
        }
        return push(I, sv_const_Steal(I, r));
    }
    if (x->kind != SV_TENSOR && y->kind != SV_TENSOR)
        return unsupported(I, "operator %s on %s and %s", nb_symbol(nb), sv_desc(x), sv_desc(y));
    WkOp op;
    switch (base) {
    case NB_ADD: op = WK_OP_ADD; break;
    case NB_SUBTRACT: op = WK_OP_SUB; break;
    case NB_MULTIPLY: op = WK_OP_MUL; break;
    case NB_TRUE_DIVIDE: op = WK_OP_DIV; break;
    case NB_POWER: op = WK_OP_POW; break;
    default: return unsupported(I, "operator %s on tensors", nb_symbol(nb));
    }
    int in[2];
    if ((in[0] = operand_value(I, x, "left operand")) < 0) return -1;
    if ((in[1] = operand_value(I, y, "right operand")) < 0) return -1;
    Sv *r = graph_op(I, op, in, 2, NULL);
    if (!r) return -1;
    if (inplace && x->kind == SV_TENSOR) {
        /* x op= y writes into x: only intermediates, with x's dtype and shape */
        if (x->arg >= 0 || x->gname)
            return unsupported(I, "in-place operator %s on an input tensor", nb_symbol(nb));
        const WkValue *xm = wk_graph_value(I->g, in[0]), *rm = wk_graph_value(I->g, r->value);
        int same_shape = xm->ndim == rm->ndim;
        for (int d = 0; same_shape && d < xm->ndim; d++) same_shape = xm->sizes[d] == rm->sizes[d];
        if (!same_shape) return unsupported(I, "in-place operator %s would change the shape", nb_symbol(nb));
        if (rm->dtype != xm->dtype) {
            if (!(wk_dtype_is_float(rm->dtype) && wk_dtype_is_float(xm->dtype)))
                return unsupported(I, "in-place operator %s would change the dtype", nb_symbol(nb));
            Sv *c = convert(I, r, xm->dtype);
            if (!c) return -1;
            r = c;
        }
        x->value = r->value;
        return push(I, x);
    }
    return push(I, r);
}

static int compare_op(Interp *I, int cmp) {
    static const int py_ops[] = {Py_LT, Py_LE, Py_EQ, Py_NE, Py_GT, Py_GE};
    static const WkOp ops[] = {WK_OP_LT, WK_OP_LE, WK_OP_EQ, WK_OP_NE, WK_OP_GT, WK_OP_GE};
    static const char *const syms[] = {"<", "<=", "==", "!=", ">", ">="};
    if (cmp < 0 || cmp > 5) return unsupported(I, "COMPARE_OP %d", cmp);
    Sv *y = pop(I), *x = y ? pop(I) : NULL;
    if (!x) return -1;
    if (x->kind == SV_CONST && y->kind == SV_CONST && is_plain(x->obj) && is_plain(y->obj)) {
        PyObject *r = PyObject_RichCompare(x->obj, y->obj, py_ops[cmp]);
        if (!r) return py_failed(I, syms[cmp]);
        return push(I, sv_const_Steal(I, r));
    }
    if ((x->kind != SV_TENSOR && y->kind != SV_TENSOR))
        return unsupported(I, "comparison %s on %s and %s", syms[cmp], sv_desc(x), sv_desc(y));
    int in[2];
    if ((in[0] = operand_value(I, x, "left operand")) < 0) return -1;
    if ((in[1] = operand_value(I, y, "right operand")) < 0) return -1;
    Sv *r = graph_op(I, ops[cmp], in, 2, NULL);
    return r ? push(I, r) : -1;
}

static int sv_truth(Interp *I, Sv *s, int *out);

static int unary_op(Interp *I, int opcode) {
    Sv *x = pop(I);
    if (!x) return -1;
    if (opcode == UNARY_NOT && x->kind != SV_TENSOR) {
        int t;
        if (sv_truth(I, x, &t) < 0) return -1;
        return push(I, sv_const(I, t ? Py_False : Py_True));
    }
    if (x->kind == SV_CONST && is_number(x->obj)) {
        PyObject *r = NULL;
        if (opcode == UNARY_NEGATIVE) r = PyNumber_Negative(x->obj);
        else if (opcode == UNARY_NOT) r = PyBool_FromLong(!PyObject_IsTrue(x->obj));
#ifdef UNARY_POSITIVE
        else if (opcode == UNARY_POSITIVE) r = PyNumber_Positive(x->obj);
#endif
        else if (opcode == UNARY_INVERT && !PyFloat_CheckExact(x->obj)) r = PyNumber_Invert(x->obj);
        if (!r) return PyErr_Occurred() ? py_failed(I, "unary operator") : unsupported(I, "unary operator");
        return push(I, sv_const_Steal(I, r));
    }
    if (x->kind == SV_TENSOR && opcode == UNARY_NEGATIVE) {
        int in = tensor_value(I, x);
        if (in < 0) return -1;
        Sv *r = graph_op(I, WK_OP_NEG, &in, 1, NULL);
        return r ? push(I, r) : -1;
    }
    return unsupported(I, "%s on %s", wk_bc_opname(opcode), sv_desc(x));
}

/* ---- globals and attributes --------------------------------------------- */

static Sv *global_sv(Interp *I, PyObject *name) {
    PyObject *v = PyDict_GetItemWithError(I->fn->func_globals, name);
    if (!v && !PyErr_Occurred() && PyDict_Check(I->fn->func_builtins))
        v = PyDict_GetItemWithError(I->fn->func_builtins, name);
    if (!v) {
        if (PyErr_Occurred()) py_failed(I, "global lookup");
        else unsupported(I, "name '%s' is not defined", PyUnicode_AsUTF8(name));
        return NULL;
    }
    int own_module = I->fn->func_globals == I->top_globals;
    if (is_tensor_obj(v) && !own_module) {
        unsupported(I, "global tensor %s of another module", PyUnicode_AsUTF8(name));
        return NULL;
    }
    if (is_tensor_obj(v)) {
        /* read afresh per call: guard what is read, never pin the tensor */
        PyObject *layout = PyObject_GetAttr(v, s_layout);
        int strided = layout == strided_layout;
        Py_XDECREF(layout);
        PyErr_Clear();
        wk_guard_global_tensor(I->guards, name, v);
        if (!strided) {
            unsupported(I, "global tensor %s with a non-strided layout", PyUnicode_AsUTF8(name));
            return NULL;
        }
        PyObject *rg = PyObject_GetAttr(v, s_requires_grad);
        if (rg == Py_True) wk_guard_grad_mode(I->guards, I->entry_grad);
        Py_XDECREF(rg);
        PyErr_Clear();
        Sv *s = sv_new(I, SV_TENSOR);
        s->obj = Py_NewRef(v);
        s->gname = Py_NewRef(name);
        return s;
    }
    if (own_module) wk_guard_global_is(I->guards, name, v);
    else wk_guard_globals_is(I->guards, I->fn->func_globals, name, v);
    if (tensor_type && PyObject_TypeCheck(v, tensor_type)) {
        unsupported(I, "global tensor %s of type %s", PyUnicode_AsUTF8(name), type_name(v));
        return NULL;
    }
    return sv_const(I, v);
}

static int is_torch_module(PyObject *m) {
    const char *n = PyModule_GetName(m);
    if (!n) {
        PyErr_Clear();
        return 0;
    }
    return strcmp(n, "torch") == 0 || strncmp(n, "torch.", 6) == 0 || strcmp(n, "math") == 0 ||
           strcmp(n, "operator") == 0;
}

/* A plain data attribute of an argument object (an nn.Module's parameter,
 * buffer, submodule or number; an instance attribute of a plain object).
 * The transformed code reads it afresh on each call, and guards check what
 * it reads: its type, tensor metadata or value. Properties and other data
 * descriptors would run user code on every read: unsupported. */
static int arg_attr(Interp *I, Sv *o, PyObject *name, int method) {
    const char *nm = PyUnicode_AsUTF8(name);
    if (!nm) return py_failed(I, "attribute name");
    PyTypeObject *tp = Py_TYPE(o->obj);
    int is_module = module_type && PyObject_TypeCheck(o->obj, module_type);
    if (!is_module && tp->tp_getattro != PyObject_GenericGetAttr)
        return unsupported(I, "attribute .%s of %s (custom __getattr__)", nm, tp->tp_name);
    PyObject *d = _PyType_Lookup(tp, name);
    if (d && Py_TYPE(d)->tp_descr_set)
        return unsupported(I, "attribute .%s of %s is a property or descriptor", nm, tp->tp_name);
    if (o->path && PyTuple_GET_SIZE(o->path) >= 8) return unsupported(I, "attribute path too long");
    PyObject *v = PyObject_GetAttr(o->obj, name);
    if (!v) return py_failed(I, nm);
    Py_ssize_t np = o->path ? PyTuple_GET_SIZE(o->path) : 0;
    PyObject *path = PyTuple_New(np + 1);
    if (!path) {
        Py_DECREF(v);
        return py_failed(I, nm);
    }
    for (Py_ssize_t i = 0; i < np; i++) PyTuple_SET_ITEM(path, i, Py_NewRef(PyTuple_GET_ITEM(o->path, i)));
    PyTuple_SET_ITEM(path, np, Py_NewRef(name));
    Sv *s = NULL;
    if (method && PyMethod_Check(v) && PyMethod_GET_SELF(v) == o->obj &&
        PyFunction_Check(PyMethod_GET_FUNCTION(v))) {
        /* self.helper(...): the function from o's (guarded, exact) type, inlined with self */
        Sv *fn = sv_const(I, PyMethod_GET_FUNCTION(v));
        Py_DECREF(v);
        Py_DECREF(path);
        if (push(I, fn) < 0) return -1;
        return push(I, o);
    }
    if (is_tensor_obj(v)) {
        PyObject *layout = PyObject_GetAttr(v, s_layout);
        int strided = layout == strided_layout;
        Py_XDECREF(layout);
        PyErr_Clear();
        wk_guard_tensor_at(I->guards, o->arg, path, v);
        if (strided) {
            PyObject *rg = PyObject_GetAttr(v, s_requires_grad);
            if (rg == Py_True) wk_guard_grad_mode(I->guards, I->entry_grad);
            Py_XDECREF(rg);
            PyErr_Clear();
            s = sv_new(I, SV_TENSOR);
        } else {
            s = sv_new(I, SV_OPAQUE);
        }
    } else if (v == Py_None || is_number(v) || PyUnicode_CheckExact(v) ||
               (dtype_type && Py_TYPE(v) == (PyTypeObject *)dtype_type) || (PyTuple_CheckExact(v) && is_plain(v))) {
        wk_guard_equals_at(I->guards, o->arg, path, v);
        s = sv_new(I, SV_CONST);
    } else if ((module_type && PyObject_TypeCheck(v, module_type)) ||
               (Py_TYPE(v)->tp_getattro == PyObject_GenericGetAttr && Py_TYPE(v)->tp_dictoffset != 0 &&
                !PyType_Check(v) && !PyModule_Check(v) && !PyCallable_Check(v))) {
        wk_guard_type_at(I->guards, o->arg, path, Py_TYPE(v));
        s = sv_new(I, SV_OPAQUE);
    } else {
        Py_DECREF(v);
        Py_DECREF(path);
        return unsupported(I, "attribute .%s of %s (a %s)", nm, tp->tp_name, Py_TYPE(v)->tp_name);
    }
    s->obj = v;
    s->arg = o->arg;
    s->path = path;
    if (method && push(I, I->null_sv) < 0) return -1;
    return push(I, s);
}

static int load_attr(Interp *I, PyObject *name, int method) {
    Sv *o = pop(I);
    if (!o) return -1;
    if (o->kind == SV_TENSOR) return tensor_attr(I, o, name, method);
    if (o->kind == SV_CONST && (PyModule_Check(o->obj) || o->obj == (PyObject *)tensor_type)) {
        PyObject *v = PyObject_GetAttr(o->obj, name);
        if (!v) return py_failed(I, PyUnicode_AsUTF8(name));
        if (PyModule_Check(o->obj) && !is_torch_module(o->obj)) wk_guard_attr_is(I->guards, o->obj, name, v);
        if (tensor_type && PyObject_TypeCheck(v, tensor_type)) {
            Py_DECREF(v);
            return unsupported(I, "module attribute tensor .%s", PyUnicode_AsUTF8(name));
        }
        if (method && push(I, I->null_sv) < 0) {
            Py_DECREF(v);
            return -1;
        }
        return push(I, sv_const_Steal(I, v));
    }
    if (o->kind == SV_CONST && dtype_type && Py_TYPE(o->obj) == (PyTypeObject *)dtype_type && !method) {
        /* x.dtype.is_floating_point, .itemsize, .is_signed: plain C attributes */
        PyObject *v = PyObject_GetAttr(o->obj, name);
        if (!v) return py_failed(I, PyUnicode_AsUTF8(name));
        if (!is_plain(v)) {
            Py_DECREF(v);
            return unsupported(I, "attribute .%s of a dtype", PyUnicode_AsUTF8(name));
        }
        return push(I, sv_const_Steal(I, v));
    }
    if (o->kind == SV_OPAQUE && o->arg >= 0) return arg_attr(I, o, name, method);
    return unsupported(I, "attribute .%s of %s", PyUnicode_AsUTF8(name), sv_desc(o));
}

/* ---- branches on values known at compile time ---------------------------- */

#ifdef POP_JUMP_FORWARD_IF_FALSE /* 3.11 names its forward jumps */
#define OP_JUMP_IF_FALSE POP_JUMP_FORWARD_IF_FALSE
#define OP_JUMP_IF_TRUE POP_JUMP_FORWARD_IF_TRUE
#define OP_JUMP_IF_NONE POP_JUMP_FORWARD_IF_NONE
#define OP_JUMP_IF_NOT_NONE POP_JUMP_FORWARD_IF_NOT_NONE
#else
#define OP_JUMP_IF_FALSE POP_JUMP_IF_FALSE
#define OP_JUMP_IF_TRUE POP_JUMP_IF_TRUE
#define OP_JUMP_IF_NONE POP_JUMP_IF_NONE
#define OP_JUMP_IF_NOT_NONE POP_JUMP_IF_NOT_NONE
#endif

/* Index of the instruction a forward jump at pc lands on. Offsets count
 * code units from the end of the jump and its caches, which is where the
 * next instruction starts. */
static int jump_target(Interp *I, const WkInstr *ins, int n, int pc, int *out) {
    if (pc + 1 >= n) return unsupported(I, "jump past the end of the code");
    int target = ins[pc + 1].start + ins[pc].oparg;
    for (int i = pc + 1; i < n; i++)
        if (ins[i].start == target) {
            *out = i;
            return 0;
        }
    return unsupported(I, "jump to offset %d not found", target);
}

/* Truth of a value known at compile time. Guards made it a constant, so a
 * branch on it is specialised soundly; tensors would be data-dependent. */
static int sv_truth(Interp *I, Sv *s, int *out) {
    switch (s->kind) {
    case SV_CONST:
        if (is_plain(s->obj) || PyModule_Check(s->obj) || PyFunction_Check(s->obj) ||
            PyCFunction_Check(s->obj) || (dtype_type && Py_TYPE(s->obj) == (PyTypeObject *)dtype_type)) {
            int t = PyObject_IsTrue(s->obj);
            if (t < 0) return py_failed(I, "truth value");
            *out = t;
            return 0;
        }
        return unsupported(I, "branch on a %s", type_name(s->obj));
    case SV_TUPLE:
    case SV_LIST:
        *out = s->items.len > 0;
        return 0;
    case SV_TENSOR:
        return unsupported(I, "data-dependent branch on a tensor");
    default:
        return unsupported(I, "branch on a %s", sv_desc(s));
    }
}

/* Only None, True and False are compared by identity: guards check values,
 * and for these singletons value and identity agree. */
static int is_singleton(PyObject *o) { return o == Py_None || o == Py_True || o == Py_False; }

static int is_op(Interp *I, int invert) {
    Sv *y = pop(I), *x = y ? pop(I) : NULL;
    if (!x) return -1;
    int same;
    if (x->kind == SV_CONST && y->kind == SV_CONST && (is_singleton(x->obj) || is_singleton(y->obj)))
        same = x->obj == y->obj;
    else if ((x->kind == SV_CONST && is_singleton(x->obj) && y->kind != SV_CONST && y->kind != SV_NULL) ||
             (y->kind == SV_CONST && is_singleton(y->obj) && x->kind != SV_CONST && x->kind != SV_NULL))
        same = 0; /* a tensor, tuple or guarded object is never None, True or False */
    else
        return unsupported(I, "'is' between a %s and a %s", sv_desc(x), sv_desc(y));
    return push(I, sv_const(I, (same != invert) ? Py_True : Py_False));
}

/* ---- the interpreter loop ------------------------------------------------ */

static Sv *run(Interp *I, const WkInstr *ins, int n, int *ret_line) {
    PyObject *consts = I->code->co_consts, *names = I->code->co_names;
    int next = 0;
    for (int pc = 0; pc < n; pc = next) {
        const WkInstr *in = &ins[pc];
        next = pc + 1;
        int arg = in->oparg;
        if (in->line >= 0) I->line = in->line;
        if (PyErr_CheckSignals() < 0) {
            py_failed(I, "signal");
            return NULL;
        }
        int rc = 0;
        switch (in->opcode) {
        case RESUME:
        case NOP:
#ifdef PRECALL
        case PRECALL:
#endif
            break;
        case LOAD_FAST:
#ifdef LOAD_FAST_CHECK
        case LOAD_FAST_CHECK:
#endif
            if (arg >= I->nlocals || !I->locals[arg]) {
                rc = unsupported(I, "read of an unbound local");
                break;
            }
            rc = push(I, I->locals[arg]);
            break;
        case STORE_FAST: {
            Sv *v = pop(I);
            if (!v) return NULL;
            if (v->kind == SV_NULL || arg >= I->nlocals) {
                rc = unsupported(I, "STORE_FAST of NULL");
                break;
            }
            I->locals[arg] = v;
            break;
        }
        case LOAD_CONST:
            rc = push(I, sv_const(I, PyTuple_GET_ITEM(consts, arg)));
            break;
        case RETURN_VALUE:
            *ret_line = I->line;
            return pop(I);
#ifdef RETURN_CONST
        case RETURN_CONST:
            *ret_line = I->line;
            return sv_const(I, PyTuple_GET_ITEM(consts, arg));
#endif
        case POP_TOP:
            rc = pop(I) ? 0 : -1;
            break;
        case PUSH_NULL:
            rc = push(I, I->null_sv);
            break;
        case COPY: {
            Sv *v = peek(I, arg);
            rc = v ? push(I, v) : -1;
            break;
        }
        case SWAP: {
            if (arg < 1 || arg > I->sp) {
                rc = unsupported(I, "SWAP underflow");
                break;
            }
            Sv *t = I->stack[I->sp - 1];
            I->stack[I->sp - 1] = I->stack[I->sp - arg];
            I->stack[I->sp - arg] = t;
            break;
        }
        case LOAD_GLOBAL: {
            Sv *g = global_sv(I, PyTuple_GET_ITEM(names, arg >> 1));
            if (!g) return NULL;
#if PY313
            rc = push(I, g);
            if (!rc && (arg & 1)) rc = push(I, I->null_sv);
#else
            if (arg & 1) rc = push(I, I->null_sv);
            if (!rc) rc = push(I, g);
#endif
            break;
        }
        case LOAD_ATTR:
#if PY312
            rc = load_attr(I, PyTuple_GET_ITEM(names, arg >> 1), arg & 1);
#else
            rc = load_attr(I, PyTuple_GET_ITEM(names, arg), 0);
#endif
            break;
#if !PY312
        case LOAD_METHOD:
            rc = load_attr(I, PyTuple_GET_ITEM(names, arg), 1);
            break;
#endif
#ifdef KW_NAMES
        case KW_NAMES:
            I->kwnames = PyTuple_GET_ITEM(consts, arg);
            break;
#endif
        case CALL:
#if PY313
            rc = unsupported(I, "calls on Python 3.13");
#else
            rc = do_call(I, arg);
#endif
            break;
        case BINARY_OP:
            rc = binary_op(I, arg);
            break;
        case IS_OP:
            rc = is_op(I, arg & 1);
            break;
        case BEFORE_WITH: {
            /* with torch.no_grad(): the body runs in that grad mode; the
             * normal exit calls the GRAD_EXIT pushed here. Exception paths
             * are never interpreted: a captured body raises nothing. */
            Sv *ctx = pop(I);
            if (!ctx) return NULL;
            if (ctx->kind != SV_GRAD_CTX) {
                rc = unsupported(I, "with-statement on a %s", sv_desc(ctx));
                break;
            }
            Sv *exit = sv_new(I, SV_GRAD_EXIT);
            exit->value = I->grad_enabled;
            I->grad_enabled = ctx->value;
            rc = push(I, exit);
            if (!rc) rc = push(I, sv_const(I, Py_None));
            break;
        }
        case JUMP_FORWARD:
            rc = jump_target(I, ins, n, pc, &next);
            break;
        case OP_JUMP_IF_FALSE:
        case OP_JUMP_IF_TRUE:
        case OP_JUMP_IF_NONE:
        case OP_JUMP_IF_NOT_NONE: {
            Sv *c = pop(I);
            if (!c) return NULL;
            int take;
            if (in->opcode == OP_JUMP_IF_NONE || in->opcode == OP_JUMP_IF_NOT_NONE) {
                int none = c->kind == SV_CONST && c->obj == Py_None;
                if (c->kind == SV_NULL) {
                    rc = unsupported(I, "branch on NULL");
                    break;
                }
                take = (in->opcode == OP_JUMP_IF_NONE) == none;
            } else {
                int t;
                if ((rc = sv_truth(I, c, &t)) < 0) break;
                take = (in->opcode == OP_JUMP_IF_TRUE) == t;
            }
            if (take) rc = jump_target(I, ins, n, pc, &next);
            break;
        }
#ifdef JUMP_IF_FALSE_OR_POP
        case JUMP_IF_FALSE_OR_POP:
        case JUMP_IF_TRUE_OR_POP: {
            Sv *c = peek(I, 1);
            int t;
            if (!c) return NULL;
            if ((rc = sv_truth(I, c, &t)) < 0) break;
            if ((in->opcode == JUMP_IF_TRUE_OR_POP) == t) rc = jump_target(I, ins, n, pc, &next);
            else I->sp--;
            break;
        }
#endif
        case UNARY_NEGATIVE:
        case UNARY_NOT:
        case UNARY_INVERT:
#ifdef UNARY_POSITIVE
        case UNARY_POSITIVE:
#endif
            rc = unary_op(I, in->opcode);
            break;
        case COMPARE_OP:
#if PY312
            rc = compare_op(I, arg >> 4);
#else
            rc = compare_op(I, arg);
#endif
            break;
        case BUILD_TUPLE:
        case BUILD_LIST: {
            if (arg > I->sp) {
                rc = unsupported(I, "symbolic stack underflow");
                break;
            }
            Sv *t = sv_new(I, in->opcode == BUILD_TUPLE ? SV_TUPLE : SV_LIST);
            for (int i = 0; i < arg; i++) wk_vec_push(&t->items, I->stack[I->sp - arg + i]);
            I->sp -= arg;
            rc = push(I, t);
            break;
        }
        case LIST_EXTEND: {
            Sv *seq = pop(I), *list = seq ? peek(I, arg) : NULL;
            if (!list) return NULL;
            if (list->kind != SV_LIST) {
                rc = unsupported(I, "LIST_EXTEND of a %s", sv_desc(list));
                break;
            }
            if (seq->kind == SV_CONST && PyTuple_CheckExact(seq->obj)) {
                for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq->obj); i++)
                    wk_vec_push(&list->items, sv_const(I, PyTuple_GET_ITEM(seq->obj, i)));
            } else if (seq->kind == SV_TUPLE || seq->kind == SV_LIST) {
                int len = seq->items.len;
                for (int i = 0; i < len; i++) wk_vec_push(&list->items, seq->items.data[i]);
            } else {
                rc = unsupported(I, "list.extend of a %s", sv_desc(seq));
            }
            break;
        }
        case UNPACK_SEQUENCE: {
            Sv *s = pop(I);
            if (!s) return NULL;
            if (s->kind == SV_CONST && PyTuple_Check(s->obj) && is_plain(s->obj)) {
                if (PyTuple_GET_SIZE(s->obj) != arg) {
                    rc = unsupported(I, "unpacking %d values into %d names", (int)PyTuple_GET_SIZE(s->obj), arg);
                    break;
                }
                for (int i = arg - 1; i >= 0 && !rc; i--) rc = push(I, sv_const(I, PyTuple_GET_ITEM(s->obj, i)));
            } else if (s->kind == SV_TUPLE || s->kind == SV_LIST) {
                if (s->items.len != arg) {
                    rc = unsupported(I, "unpacking %d values into %d names", s->items.len, arg);
                    break;
                }
                for (int i = arg - 1; i >= 0 && !rc; i--) rc = push(I, s->items.data[i]);
            } else {
                rc = unsupported(I, "unpacking a %s", sv_desc(s));
            }
            break;
        }
        case BINARY_SUBSCR: {
            Sv *k = pop(I), *c = k ? pop(I) : NULL;
            if (!c) return NULL;
            if (c->kind == SV_CONST && k->kind == SV_CONST && is_plain(c->obj) &&
                (PyTuple_Check(c->obj) || PyUnicode_CheckExact(c->obj)) &&
                (PyLong_CheckExact(k->obj) || PySlice_Check(k->obj))) {
                PyObject *r = PyObject_GetItem(c->obj, k->obj);
                if (!r) {
                    rc = py_failed(I, "subscript");
                    break;
                }
                rc = push(I, sv_const_Steal(I, r));
            } else if ((c->kind == SV_TUPLE || c->kind == SV_LIST) && k->kind == SV_CONST &&
                       PyLong_CheckExact(k->obj)) {
                long i = PyLong_AsLong(k->obj);
                if (i < 0) i += c->items.len;
                if (PyErr_Occurred() || i < 0 || i >= c->items.len) {
                    PyErr_Clear();
                    rc = unsupported(I, "index out of range");
                    break;
                }
                rc = push(I, c->items.data[i]);
            } else {
                rc = unsupported(I, "subscript of a %s by a %s", sv_desc(c), sv_desc(k));
            }
            break;
        }
        default:
            rc = unsupported(I, "unsupported opcode %s", wk_bc_opname(in->opcode));
            break;
        }
        if (rc < 0 || I->reason || I->propagate) return NULL;
    }
    unsupported(I, "frame ends without a return");
    return NULL;
}

/* ---- the return value --------------------------------------------------- */

typedef struct {
    WkVec(WkRet *) all;
    WkVec(int) outputs; /* graph value id of each graph output */
} RetPlan;

static WkRet *ret_new(RetPlan *p, WkRetKind kind) {
    WkRet *r = wk_xcalloc(1, sizeof(WkRet));
    r->kind = kind;
    wk_vec_push(&p->all, r);
    return r;
}

static WkRet *plan_return(Interp *I, RetPlan *p, Sv *s, int depth) {
    if (depth > 32) return unsupported(I, "return value nested too deeply"), NULL;
    if (s->gname) {
        WkRet *r = ret_new(p, WK_RET_GLOBAL);
        r->value = s->gname;
        return r;
    }
    if (s->arg >= 0) {
        WkRet *r = ret_new(p, WK_RET_ARG);
        r->index = s->arg;
        r->path = s->path;
        return r;
    }
    switch (s->kind) {
    case SV_CONST: {
        WkRet *r = ret_new(p, WK_RET_CONST);
        r->value = s->obj;
        return r;
    }
    case SV_TENSOR: {
        WkRet *r = ret_new(p, WK_RET_OUTPUT);
        r->index = -1;
        for (int i = 0; i < p->outputs.len; i++)
            if (p->outputs.data[i] == s->value) r->index = i;
        if (r->index < 0) {
            r->index = p->outputs.len;
            wk_vec_push(&p->outputs, s->value);
        }
        return r;
    }
    case SV_TUPLE:
    case SV_LIST: {
        WkRet *r = ret_new(p, s->kind == SV_TUPLE ? WK_RET_TUPLE : WK_RET_LIST);
        r->nitems = s->items.len;
        r->items = wk_xcalloc((size_t)r->nitems + 1, sizeof(WkRet *));
        for (int i = 0; i < r->nitems; i++)
            if (!(r->items[i] = plan_return(I, p, s->items.data[i], depth + 1))) return NULL;
        return r;
    }
    default:
        return unsupported(I, "returning a %s", sv_desc(s)), NULL;
    }
}

static void plan_free(RetPlan *p) {
    for (int i = 0; i < p->all.len; i++) {
        free(p->all.data[i]->items);
        free(p->all.data[i]);
    }
    wk_vec_free(&p->all);
    wk_vec_free(&p->outputs);
}

/* ---- logs and debug dumps ------------------------------------------------ */

static int dump_counter;

/* "<n>-<qualname>": a file-name-safe stem for this compile's dumps. */
static void dump_stem(PyCodeObject *code, char *out, size_t n) {
    const char *q = PyUnicode_AsUTF8(code->co_qualname);
    if (!q) {
        PyErr_Clear();
        q = "frame";
    }
    int k = snprintf(out, n, "capture-%03d-", ++dump_counter);
    for (const char *c = q; *c && k + 1 < (int)n; c++)
        out[k++] = (isalnum((unsigned char)*c) || *c == '_' || *c == '.') ? *c : '_';
    out[k] = 0;
}

static void dump_text(const char *stem, const char *suffix, const char *text) {
    char name[320];
    snprintf(name, sizeof name, "%s.%s", stem, suffix);
    wk_debug_dump(name, text);
}

/* dis of the transformed code, for WICK_LOG=code and WICK_DEBUG_DIR. */
static void dump_code(const char *stem, PyCodeObject *orig, PyObject *newcode) {
    int log = wk_log_on(WK_LOG_CODE), dump = *wk_env_str(WK_ENV_DEBUG_DIR) != 0;
    if (!log && !dump) return;
    PyObject *dis = PyImport_ImportModule("dis");
    PyObject *bc = dis ? PyObject_CallMethod(dis, "Bytecode", "O", newcode) : NULL;
    PyObject *text = bc ? PyObject_CallMethod(bc, "dis", NULL) : NULL;
    const char *t = text ? PyUnicode_AsUTF8(text) : NULL;
    if (t) {
        const char *q = PyUnicode_AsUTF8(orig->co_qualname);
        if (log) wk_log(WK_LOG_CODE, "transformed code of %s:\n%s", q ? q : "?", t);
        if (dump) dump_text(stem, "code.txt", t);
    }
    PyErr_Clear(); /* a log is a nicety: never fail a compile for it */
    Py_XDECREF(text);
    Py_XDECREF(bc);
    Py_XDECREF(dis);
}

/* ---- entries ------------------------------------------------------------ */

static int entry_check(void *state, PyObject *const *args, int nargs, PyObject *globals, const char **why) {
    return wk_guards_check((const WkGuards *)state, args, nargs, globals, why);
}

static void entry_free_guards(void *state) { wk_guards_free((WkGuards *)state); }

static WkCacheEntry *entry_new(WkGuards *g, PyObject *code_Steal, PyObject *info_Steal) {
    WkCacheEntry *e = wk_xcalloc(1, sizeof(WkCacheEntry));
    e->check = entry_check;
    e->free_guards = entry_free_guards;
    e->guard_state = g;
    e->code = code_Steal;
    e->info = info_Steal;
    return e;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int option_flag(PyObject *options, const char *key) {
    PyObject *v = options && PyDict_Check(options) ? PyDict_GetItemString(options, key) : NULL;
    return v ? PyObject_IsTrue(v) > 0 : 0;
}

/* Guards every argument so the entry applies to calls with this input
 * signature; classifies arguments into Svs. */
static int setup_args(Interp *I) {
    int any_grad = 0;
    wk_guards_set_arg_names(I->guards, I->argnames);
    for (int i = 0; i < I->nargs; i++) {
        PyObject *o = I->args[i];
        if (!o) continue;
        Sv *s;
        if (is_tensor_obj(o)) {
            PyObject *layout = PyObject_GetAttr(o, s_layout);
            int strided = layout == strided_layout;
            Py_XDECREF(layout);
            if (!layout) {
                if (!PyErr_ExceptionMatches(PyExc_Exception)) return py_failed(I, "argument");
                PyErr_Clear();
            }
            wk_guard_tensor(I->guards, i, o);
            if (strided) {
                s = sv_new(I, SV_TENSOR);
                PyObject *rg = PyObject_GetAttr(o, s_requires_grad);
                if (!rg) return py_failed(I, "requires_grad");
                any_grad |= rg == Py_True;
                Py_DECREF(rg);
            } else {
                s = sv_new(I, SV_OPAQUE);
            }
        } else if (o == Py_None || is_number(o) || PyUnicode_CheckExact(o) ||
                   (dtype_type && Py_TYPE(o) == (PyTypeObject *)dtype_type) ||
                   (PyTuple_CheckExact(o) && is_plain(o))) {
            wk_guard_equals(I->guards, i, o);
            s = sv_new(I, SV_CONST);
        } else {
            wk_guard_type(I->guards, i, Py_TYPE(o));
            s = sv_new(I, SV_OPAQUE);
        }
        s->obj = Py_NewRef(o);
        s->arg = i;
        if (i < I->nlocals) I->locals[i] = s;
    }
    if (any_grad) wk_guard_grad_mode(I->guards, I->entry_grad);
    return 0;
}

static PyObject *fallback_info_Ref(Interp *I) {
    PyObject *guards = I->guards ? wk_guards_describe_Ref(I->guards) : NULL;
    if (!guards) PyErr_Clear();
    PyObject *r = Py_BuildValue("{s:s,s:O,s:i,s:i,s:O,s:O,s:O,s:i}", "reason", I->reason, "file",
                                I->code->co_filename, "line", I->line, "graph_count", 0, "graph", Py_None,
                                "source", Py_None, "guards", guards ? guards : Py_None, "op_count", 0);
    Py_XDECREF(guards);
    return r;
}

static PyObject *compile_with_backend_Ref(Interp *I, PyObject *backend, WkGraph **g) {
    PyObject *mod = PyImport_ImportModule("wick.backends");
    if (!mod) return NULL;
    PyObject *graph_obj = wk_rt_graph_wrap_Steal(*g);
    *g = NULL;
    PyObject *examples = graph_obj ? PyList_New(I->input_tensors.len) : NULL;
    PyObject *res = NULL;
    if (examples) {
        for (int i = 0; i < I->input_tensors.len; i++)
            PyList_SET_ITEM(examples, i, Py_NewRef(I->input_tensors.data[i]));
        res = PyObject_CallMethod(mod, "compile_graph_with", "OOO", backend, graph_obj, examples);
    }
    Py_XDECREF(examples);
    Py_XDECREF(graph_obj);
    Py_DECREF(mod);
    return res;
}

WkCacheEntry *wk_cap_compile_frame(PyFunctionObject *fn, PyCodeObject *code, PyObject *const *args, int nargs,
                                   PyObject *options) {
    double t0 = now_s();
    Interp I_ = {0}, *I = &I_;
    WkInstr *ins = NULL;
    int nins = 0;
    RetPlan plan = {0};
    PyObject *compiled = NULL, *newcode = NULL, *info = NULL, *guard_list = NULL;
    char *graph_text = NULL;
    WkCacheEntry *entry = NULL;
    int ret_line = code->co_firstlineno;

    I->fn = fn;
    I->code = code;
    I->top_globals = fn->func_globals;
    I->args = args;
    I->nargs = nargs;
    I->line = code->co_firstlineno;
    I->guards = wk_guards_new();
    I->g = wk_graph_new();
    I->nlocals = code->co_nlocalsplus;
    I->locals = wk_xcalloc((size_t)I->nlocals + 1, sizeof(Sv *));
    I->stackcap = code->co_stacksize + 8;
    I->stack = wk_xcalloc((size_t)I->stackcap, sizeof(Sv *));
    I->null_sv = sv_new(I, SV_NULL);
    wk_error_clear();

    PyObject *backend = options && PyDict_Check(options) ? PyDict_GetItemString(options, "backend") : NULL;
    I->backend_wick = !backend || backend == Py_None ||
                      (PyUnicode_Check(backend) && PyUnicode_CompareWithASCIIString(backend, "wick") == 0);
    int fullgraph = option_flag(options, "fullgraph");

    int tr = init_torch();
    if (tr < 0) {
        py_failed(I, "importing torch");
        goto finish;
    }
    if (tr == 0) {
        int ge = wk_guards_grad_enabled();
        if (ge < 0) {
            py_failed(I, "torch.is_grad_enabled");
            goto finish;
        }
        I->grad_enabled = I->entry_grad = ge;
    }
    I->argnames = PyCode_GetVarnames(code);
    if (!I->argnames) {
        py_failed(I, "co_varnames");
        goto finish;
    }
    if (PyTuple_GET_SIZE(I->argnames) < nargs) {
        unsupported(I, "arguments without names");
        goto finish;
    }
    if (setup_args(I) < 0) goto finish;

    ins = wk_bc_decode(code, &nins);
    if (!ins) {
        py_failed(I, "decoding bytecode");
        goto finish;
    }
    Sv *ret = run(I, ins, nins, &ret_line);
    if (!ret) goto finish;
    WkRet *rp = plan_return(I, &plan, ret, 0);
    if (!rp) goto finish;
    for (int i = 0; i < plan.outputs.len; i++)
        if (wk_graph_output(I->g, plan.outputs.data[i]) < 0) {
            graph_failed(I, "graph output");
            goto finish;
        }
    int graph_count = plan.outputs.len > 0;
    char stem[256];
    dump_stem(code, stem, sizeof stem);
    int op_count = 0; /* scalar constants are not ops */
    for (int i = 0; graph_count && i < wk_graph_nnodes(I->g); i++)
        op_count += wk_graph_node(I->g, i)->op != WK_OP_SCALAR;
    graph_text = wk_graph_print(I->g);
    PyObject *source = NULL;
    if (graph_count) {
        dump_text(stem, "graph.txt", graph_text);
        if (wk_log_on(WK_LOG_GRAPHS)) {
            const char *nm = PyUnicode_AsUTF8(code->co_qualname);
            wk_log(WK_LOG_GRAPHS, "graph for %s (%s:%d):\n%s", nm ? nm : "?", code_filename(I),
                   code->co_firstlineno, graph_text);
            PyErr_Clear();
        }
        if (I->backend_wick) {
            compiled = wk_rt_compile_Ref(I->g);
            if (!compiled) {
                if (PyErr_Occurred()) py_failed(I, "compiling the graph");
                else unsupported(I, "wick could not compile the graph: %s", wk_error_get());
                goto finish;
            }
            wk_rt_set_check_inputs(compiled, 0);
            PyObject *desc = wk_rt_describe_Ref(compiled);
            if (desc && PyDict_Check(desc)) source = Py_XNewRef(PyDict_GetItemString(desc, "source"));
            if (source && PyUnicode_Check(source)) {
                const char *src = PyUnicode_AsUTF8(source);
                if (src) dump_text(stem, "kernel.c", src);
            }
            Py_XDECREF(desc);
            PyErr_Clear();
        } else {
            /* a torch backend runs the graph with autograd on: inputs that
             * require grad, used only under no_grad, would get a grad_fn */
            for (int i = 0; I->entry_grad && i < wk_graph_ninputs(I->g); i++)
                if (get_rg(I, wk_graph_input_value(I->g, i))) {
                    unsupported(I, "a no_grad block over tensors that require grad with backend %s",
                                PyUnicode_Check(backend) ? PyUnicode_AsUTF8(backend) : "(callable)");
                    goto finish;
                }
            compiled = compile_with_backend_Ref(I, backend, &I->g);
            if (!compiled) {
                py_failed(I, "backend");
                goto finish;
            }
        }
    }
    newcode = wk_cap_transform_Ref(code, compiled, I->input_args.data, I->input_paths.data, I->input_args.len,
                                   plan.outputs.len, rp, ret_line);
    if (!newcode) {
        Py_XDECREF(source);
        py_failed(I, "assembling the transformed code");
        goto finish;
    }
    dump_code(stem, code, newcode);
    guard_list = wk_guards_describe_Ref(I->guards);
    if (!guard_list) PyErr_Clear();
    info = Py_BuildValue("{s:s,s:O,s:O,s:O,s:i,s:d,s:i,s:O,s:i}", "graph", graph_text ? graph_text : "",
                         "source", source ? source : Py_None, "guards", guard_list ? guard_list : Py_None,
                         "reason", Py_None, "graph_count", graph_count, "compile_time_s", now_s() - t0,
                         "op_count", op_count,
                         "file", code->co_filename, "line", ret_line);
    Py_XDECREF(source);
    if (!info) {
        py_failed(I, "info");
        goto finish;
    }
    if (wk_log_on(WK_LOG_GUARDS) && guard_list) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(guard_list); i++)
            wk_log(WK_LOG_GUARDS, "%s", PyUnicode_AsUTF8(PyList_GET_ITEM(guard_list, i)));
        PyErr_Clear();
    }
    entry = entry_new(I->guards, newcode, info);
    I->guards = NULL;
    newcode = info = NULL;

finish:
    if (!entry && !I->propagate) {
        if (!I->reason) unsupported(I, "capture failed");
        if (PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) I->propagate = 1;
            else PyErr_Clear();
        }
    }
    if (!entry && !I->propagate) {
        if (wk_log_on(WK_LOG_BREAKS)) {
            const char *q = PyUnicode_AsUTF8(code->co_qualname);
            if (!q) PyErr_Clear();
            wk_log(WK_LOG_BREAKS, "%s runs eagerly: %s", q ? q : "?", I->reason);
        }
        if (fullgraph) {
            PyErr_SetString(unsupported_error, I->reason);
        } else {
            info = fallback_info_Ref(I);
            if (!info) PyErr_Clear();
            entry = entry_new(I->guards, NULL, info);
            I->guards = NULL;
            info = NULL;
        }
    }
    Py_XDECREF(compiled);
    Py_XDECREF(newcode);
    Py_XDECREF(info);
    Py_XDECREF(guard_list);
    Py_XDECREF(I->argnames);
    free(graph_text);
    free(ins);
    plan_free(&plan);
    for (int i = 0; i < I->all.len; i++) sv_free(I->all.data[i]);
    wk_vec_free(&I->all);
    wk_vec_free(&I->input_args);
    wk_vec_free(&I->input_paths);
    wk_vec_free(&I->value_rg);
    wk_vec_free(&I->input_tensors);
    free(I->locals);
    free(I->stack);
    free(I->reason);
    if (I->g) wk_graph_free(I->g);
    if (I->guards) wk_guards_free(I->guards);
    return entry;
}

int wk_cap_init(PyObject *module) {
    unsupported_error = PyErr_NewException("wick._C.UnsupportedError", PyExc_RuntimeError, NULL);
    if (!unsupported_error) return -1;
    Py_INCREF(unsupported_error);
    if (PyModule_AddObject(module, "UnsupportedError", unsupported_error) < 0) {
        Py_DECREF(unsupported_error);
        return -1;
    }
    return 0;
}
