/* guards.c — the flat list of C checks that decides whether a cache entry
 * fits a call.
 *
 * Checks are kept sorted by cost as they are added (stable), so a call that
 * misses usually fails on a pointer compare: exact types and identities
 * first, then Python values, then grad mode, then tensor metadata (dtype,
 * requires_grad, sizes, strides, device), which costs attribute lookups.
 * Tensor metadata is read through interned attribute names; a tensor whose
 * metadata cannot be read (sparse layouts have no strides) fails the check
 * rather than raising, so the caller recompiles and falls back. */
#include <string.h>

#include "symbolic.h"

typedef enum {
    CK_TYPE,       /* Py_TYPE(arg) is type */
    CK_ID,         /* arg is value */
    CK_EQUALS,     /* type(arg) is type and arg == value (floats bitwise) */
    CK_GLOBAL_IS,  /* globals/builtins lookup of name is value */
    CK_ATTR_IS,    /* getattr(owner, name) is value */
    CK_DICT_IS,    /* LOAD_GLOBAL-style lookup of name in globals dict `owner` is value */
    CK_GRAD_MODE,  /* torch.is_grad_enabled() == enabled */
    CK_TENSOR,     /* dtype, requires_grad, sizes, strides, device */
    CK_FUNC,       /* function `owner` still has __code__ value, __defaults__, __kwdefaults__ */
    CK_CELL_IS,    /* cell `owner` holds value (identity; NULL: empty) */
    CK_FREEVAR_IS, /* closure cell `arg` of the called function holds value */
    CK_TYPE_ATTR_IS, /* type `owner` (pinned) resolves name to value (_PyType_Lookup; NULL: absent) */
    CK_DICT_LACKS, /* name is not in the instance __dict__ of getattr(arg, *path) */
    CK_NO_HOOKS,   /* the nn.Module getattr(arg, *path) has no forward/backward hooks */
    CK_NO_GLOBAL_HOOKS, /* torch.nn.modules.module has no global module hooks */
    CK_SHAPE,      /* exact tuple of len value (an int), or exact dict with keys value (a tuple), in order */
    CK_DICT_ITEM_IS, /* dict `owner` (pinned) maps name (any key) to value (identity; NULL: absent) */
    CK_PINNED_EQUALS, /* object `owner` (pinned) == value (a snapshot) */
    CK_CALL_IS,    /* owner() (a pinned torch query, no arguments) returns value (identity: a bool or None) */
    CK_MODULE_PLAIN_ATTR, /* name is in none of the _parameters, _buffers, _modules of the nn.Module
                           * getattr(arg, *path): Module.__setattr__ stores it in the instance __dict__ */
    CK_ARG_DISTINCT, /* argument arg is no other argument (identity) */
    CK_SAME_AS,      /* getattr(arg, *path) is (enabled) or is not (!enabled) the object at a second
                      * source, value = (arg2, path2 or None): `x is y` between two tensors read from
                      * the arguments */
} CheckKind;

/* cheapest first */
static const int check_cost[] = {0, 0, 1, 2, 3, 2, 4, 5, 0, 0, 0, 0, 1, 1, 1, 1, 1, 3, 4, 2, 1, 2};

typedef struct {
    CheckKind kind;
    int arg;
    PyObject *path;     /* owned tuple of attribute names, or NULL: checks getattr(arg, ...) */
    PyTypeObject *type; /* owned: TYPE, EQUALS */
    PyObject *value;    /* owned: ID, EQUALS, GLOBAL_IS, ATTR_IS; TYPE_ATTR_IS: NULL when value_ref is set */
    PyObject *value_ref; /* owned weakref instead of value, TYPE_ATTR_IS (a method) and ID (a function, module,
                          * class or other object that takes weakrefs): the guard does not keep it alive */
    PyObject *name;     /* owned: GLOBAL_IS, ATTR_IS; TYPE/TENSOR of a global (arg -1) */
    PyObject *owner;    /* owned: ATTR_IS, DICT_IS, FUNC, CELL_IS */
    PyObject *defaults, *kwdefaults; /* owned (may be NULL): FUNC */
    PyObject *example;  /* TENSOR: the example tensor until wk_guards_finalize (owned) */
    int batched;        /* TENSOR: checked by the batched TensorGuards call */
    int repeated;       /* TENSOR: its example tensor was seen by an earlier check (finalize) */
    int slot;           /* checks with a path: index of its distinct (arg, path), -1 before finalize */
    int enabled;        /* GRAD_MODE */
    /* TENSOR */
    PyObject *dtype;  /* owned */
    PyObject *device; /* owned */
    int requires_grad;
    int ndim;
    int64_t *sizes, *strides; /* malloc'd, ndim each */
} Check;

struct WkGuards {
    WkVec(Check) checks;
    PyObject *names; /* tuple of arg names, or NULL */
    /* All tensor metadata checks in one call: torch's own TensorGuards
     * (dtype, device, dispatch keys, requires_grad, sizes, strides), built
     * by wk_guards_finalize from the example tensors; NULL before, or when
     * unavailable (then CK_TENSOR checks run one by one). */
    PyObject *tensor_guards;
    WkVec(int) batched; /* indices of the CK_TENSOR checks it covers, in its order */
    WkSrcTree sources;  /* the paths of argument-sourced checks, as a tree (finalize) */
    int nslots;         /* its nodes: each resolved at most once per check call */
    uint64_t token;     /* names these guards in the hand-over to a GraphLoader (0: none) */
    /* per check (finalize): what its last pass read, so an unchanged
     * module answers from version tags; written during checks */
    struct CheckMemo *memos;
    int nmemos;
};

/* NO_HOOKS and DICT_LACKS of a module: its instance __dict__ and that
 * dict's version when the check last passed, and (NO_HOOKS) the four hook
 * dicts found in it. While that __dict__ keeps its version it holds the
 * same hook dicts (alive, borrowed here), and still lacks the name. */
typedef struct CheckMemo {
    PyObject *dict;
    uint64_t version;
    PyObject *hooks[4];
} CheckMemo;

/* The hand-over: a passing check leaves the objects it resolved for the
 * GraphLoader that the transformed code calls next, so graph inputs are
 * not looked up twice. Per thread; owned values; cleared by every check. */
static _Thread_local struct {
    uint64_t token;
    int nargs;
    PyObject *args[WK_HANDOVER_MAX_ARGS]; /* borrowed: compared by identity only */
    PyObject **values;                    /* owned, nvalues slots (NULL where not resolved) */
    int nvalues;
} handover;

static void handover_clear(void) {
    for (int i = 0; i < handover.nvalues; i++) Py_XDECREF(handover.values[i]);
    free(handover.values);
    handover.values = NULL;
    handover.nvalues = 0;
    handover.token = 0;
}

uint64_t wk_guards_token(const WkGuards *g) { return g->token; }

int wk_guards_input_node(WkGuards *g, int arg, PyObject *path) {
    static uint64_t next_token;
    if (!g->token) g->token = ++next_token;
    int node = wk_srctree_node(&g->sources, arg, path);
    g->nslots = g->sources.nodes.len;
    return node;
}

PyObject **wk_guards_take_handover(uint64_t token, PyObject *const *frame_args, const int *arg_of_root, int nroots,
                                   int *nvalues) {
    if (!token || handover.token != token || !handover.values) return NULL;
    for (int r = 0; r < nroots; r++) {
        int a = arg_of_root[r];
        if (a >= 0 && (a >= handover.nargs || handover.args[a] != frame_args[r])) return NULL;
    }
    PyObject **v = handover.values;
    *nvalues = handover.nvalues;
    handover.values = NULL;
    handover.nvalues = 0;
    handover.token = 0;
    return v;
}

static PyObject *s_dtype, *s_device, *s_requires_grad, *s_shape, *s_stride, *s_builtins;
static PyObject *grad_fn; /* torch.is_grad_enabled, cached */

static int init_names(void) {
    if (s_dtype) return 0;
    s_dtype = PyUnicode_InternFromString("dtype");
    s_device = PyUnicode_InternFromString("device");
    s_requires_grad = PyUnicode_InternFromString("requires_grad");
    s_shape = PyUnicode_InternFromString("shape");
    s_stride = PyUnicode_InternFromString("stride");
    s_builtins = PyUnicode_InternFromString("__builtins__");
    if (!s_dtype || !s_device || !s_requires_grad || !s_shape || !s_stride || !s_builtins) {
        PyErr_Clear();
        s_dtype = NULL;
        return -1;
    }
    return 0;
}

WkGuards *wk_guards_new(void) {
    init_names();
    return wk_xcalloc(1, sizeof(WkGuards));
}

/* The target of a weakref, borrowed (compared and printed only), or NULL
 * once it died. 3.13 deprecates the borrowing accessor. */
static PyObject *weak_target(PyObject *ref) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *o = NULL;
    if (PyWeakref_GetRef(ref, &o) <= 0) {
        PyErr_Clear();
        return NULL;
    }
    Py_DECREF(o); /* others hold it: the class dict or whoever keeps it alive */
    return o;
#else
    PyObject *o = PyWeakref_GET_OBJECT(ref);
    return o == Py_None ? NULL : o;
#endif
}

/* TYPE_ATTR_IS, ID: the value guarded (borrowed); a dead weakly held one
 * is a value no lookup returns (the guard fails) */
static PyObject *guarded_value(const Check *c) {
    static char dead;
    if (!c->value_ref) return c->value;
    PyObject *v = weak_target(c->value_ref);
    return v ? v : (PyObject *)&dead;
}

static void check_clear(Check *c) {
    Py_XDECREF(c->path);
    Py_XDECREF(c->type);
    Py_XDECREF(c->value);
    Py_XDECREF(c->value_ref);
    Py_XDECREF(c->name);
    Py_XDECREF(c->owner);
    Py_XDECREF(c->defaults);
    Py_XDECREF(c->kwdefaults);
    Py_XDECREF(c->example);
    Py_XDECREF(c->dtype);
    Py_XDECREF(c->device);
    free(c->sizes);
    free(c->strides);
}

void wk_guards_free(WkGuards *g) {
    if (!g) return;
    for (int i = 0; i < g->checks.len; i++) check_clear(&g->checks.data[i]);
    wk_vec_free(&g->checks);
    Py_XDECREF(g->names);
    Py_XDECREF(g->tensor_guards);
    wk_vec_free(&g->batched);
    wk_srctree_clear(&g->sources);
    free(g->memos);
    free(g);
}

void wk_guards_set_arg_names(WkGuards *g, PyObject *names) {
    Py_XINCREF(names);
    Py_XSETREF(g->names, names);
}

int wk_guards_count(const WkGuards *g) { return g->checks.len; }

/* Checks through attribute paths run Python getattr: after all others. */
static int cost_of(const Check *c) { return check_cost[c->kind] + (c->path ? 10 : 0); }

static int same_path(PyObject *a, PyObject *b);

/* Inserts after every check of cost <= c's cost (stable). Equal paths
 * share one tuple, so a check resolves each source once per call. */
static void add_check(WkGuards *g, Check c) {
    c.slot = -1;
    for (int i = 0; c.path && i < g->checks.len; i++) {
        Check *o = &g->checks.data[i];
        if (o->path && o->path != c.path && o->arg == c.arg && same_path(o->path, c.path)) {
            Py_SETREF(c.path, Py_NewRef(o->path));
            break;
        }
    }
    wk_vec_push(&g->checks, c);
    int i = g->checks.len - 1;
    while (i > 0 && cost_of(&g->checks.data[i - 1]) > cost_of(&c)) {
        g->checks.data[i] = g->checks.data[i - 1];
        i--;
    }
    g->checks.data[i] = c;
    if (g->memos) { /* indices moved: what was remembered is forgotten */
        free(g->memos);
        g->nmemos = g->checks.len;
        g->memos = wk_xcalloc((size_t)g->nmemos + 1, sizeof(CheckMemo));
    }
}

static int same_path(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    if (!a || !b) return 0;
    int eq = PyObject_RichCompareBool(a, b, Py_EQ);
    if (eq < 0) PyErr_Clear();
    return eq > 0;
}

static int has_check_at(const WkGuards *g, CheckKind kind, int arg, PyObject *path) {
    for (int i = 0; i < g->checks.len; i++) {
        const Check *c = &g->checks.data[i];
        if (c->kind == kind && c->arg == arg && same_path(c->path, path)) return 1;
    }
    return 0;
}

static int has_check(const WkGuards *g, CheckKind kind, int arg) { return has_check_at(g, kind, arg, NULL); }

void wk_guard_type_at(WkGuards *g, int arg, PyObject *path, PyTypeObject *type) {
    if (has_check_at(g, CK_TYPE, arg, path)) return;
    Check c = {.kind = CK_TYPE, .arg = arg, .path = Py_XNewRef(path)};
    Py_INCREF(type);
    c.type = type;
    add_check(g, c);
}

void wk_guard_type(WkGuards *g, int arg, PyTypeObject *type) { wk_guard_type_at(g, arg, NULL, type); }

void wk_guard_id(WkGuards *g, int arg, PyObject *value) { wk_guard_id_at(g, arg, NULL, value); }

void wk_guard_id_at(WkGuards *g, int arg, PyObject *path, PyObject *value) {
    if (has_check_at(g, CK_ID, arg, path)) return;
    Check c = {.kind = CK_ID, .arg = arg, .path = Py_XNewRef(path)};
    /* a hook, a module or a function pinned by a guard must not outlive
     * its last user: held weakly where it can be */
    if (PyType_SUPPORTS_WEAKREFS(Py_TYPE(value)) && (c.value_ref = PyWeakref_NewRef(value, NULL)) == NULL)
        PyErr_Clear();
    if (!c.value_ref) c.value = Py_NewRef(value);
    add_check(g, c);
}

void wk_guard_equals(WkGuards *g, int arg, PyObject *value) { wk_guard_equals_at(g, arg, NULL, value); }

void wk_guard_equals_at(WkGuards *g, int arg, PyObject *path, PyObject *value) {
    if (has_check_at(g, CK_EQUALS, arg, path)) return;
    Check c = {.kind = CK_EQUALS, .arg = arg, .path = Py_XNewRef(path)};
    Py_INCREF(Py_TYPE(value));
    c.type = Py_TYPE(value);
    c.value = Py_NewRef(value);
    add_check(g, c);
}

/* Reads dtype, device, requires_grad, sizes and strides. 0 or -1 (Python
 * exception set). */
static int read_tensor(PyObject *t, PyObject **dtype, PyObject **device, int *requires_grad,
                       int *ndim, int64_t **sizes, int64_t **strides) {
    PyObject *shape = NULL, *stride = NULL, *rg = NULL;
    *dtype = *device = NULL;
    *sizes = *strides = NULL;
    if (init_names() < 0) goto error;
    *dtype = PyObject_GetAttr(t, s_dtype);
    if (!*dtype) goto error;
    *device = PyObject_GetAttr(t, s_device);
    if (!*device) goto error;
    rg = PyObject_GetAttr(t, s_requires_grad);
    if (!rg) goto error;
    *requires_grad = PyObject_IsTrue(rg);
    if (*requires_grad < 0) goto error;
    shape = PyObject_GetAttr(t, s_shape);
    if (!shape) goto error;
    stride = PyObject_CallMethodNoArgs(t, s_stride);
    if (!stride) goto error;
    if (!PyTuple_Check(shape) || !PyTuple_Check(stride) ||
        PyTuple_GET_SIZE(shape) != PyTuple_GET_SIZE(stride)) {
        PyErr_SetString(PyExc_TypeError, "tensor shape/stride are not tuples of one length");
        goto error;
    }
    *ndim = (int)PyTuple_GET_SIZE(shape);
    *sizes = wk_xcalloc((size_t)*ndim + 1, sizeof(int64_t));
    *strides = wk_xcalloc((size_t)*ndim + 1, sizeof(int64_t));
    for (int i = 0; i < *ndim; i++) {
        (*sizes)[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        (*strides)[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride, i));
    }
    if (PyErr_Occurred()) goto error;
    Py_DECREF(shape);
    Py_DECREF(stride);
    Py_DECREF(rg);
    return 0;
error:
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    Py_XDECREF(rg);
    Py_CLEAR(*dtype);
    Py_CLEAR(*device);
    free(*sizes);
    free(*strides);
    *sizes = *strides = NULL;
    return -1;
}

void wk_guard_tensor(WkGuards *g, int arg, PyObject *tensor) { wk_guard_tensor_at(g, arg, NULL, tensor); }

void wk_guard_tensor_at(WkGuards *g, int arg, PyObject *path, PyObject *tensor) {
    wk_guard_type_at(g, arg, path, Py_TYPE(tensor));
    if (has_check_at(g, CK_TENSOR, arg, path)) return;
    Check c = {.kind = CK_TENSOR, .arg = arg};
    if (read_tensor(tensor, &c.dtype, &c.device, &c.requires_grad, &c.ndim, &c.sizes, &c.strides) < 0) {
        /* Unreadable metadata: the type guard alone describes this call. */
        PyErr_Clear();
        return;
    }
    c.path = Py_XNewRef(path);
    c.example = Py_NewRef(tensor);
    add_check(g, c);
}

void wk_guard_global_tensor(WkGuards *g, PyObject *name, PyObject *tensor) {
    for (int i = 0; i < g->checks.len; i++) {
        Check *o = &g->checks.data[i];
        if (o->kind == CK_TENSOR && o->arg < 0 && o->name && PyUnicode_Compare(o->name, name) == 0) return;
    }
    Check t = {.kind = CK_TYPE, .arg = -1, .name = Py_NewRef(name)};
    Py_INCREF(Py_TYPE(tensor));
    t.type = Py_TYPE(tensor);
    add_check(g, t);
    Check c = {.kind = CK_TENSOR, .arg = -1};
    if (read_tensor(tensor, &c.dtype, &c.device, &c.requires_grad, &c.ndim, &c.sizes, &c.strides) < 0) {
        PyErr_Clear();
        return;
    }
    c.name = Py_NewRef(name);
    c.example = Py_NewRef(tensor);
    add_check(g, c);
}

/* Builds the batched tensor check and drops the example tensors (guards
 * never pin a tensor). Without torch's TensorGuards the checks stay one by
 * one. */
void wk_guards_finalize(WkGuards *g) {
    /* every path of an argument becomes a node of the source tree: each
     * prefix (self.layers, self.layers.0, ...) is resolved once per check */
    wk_srctree_clear(&g->sources);
    for (int i = 0; i < g->checks.len; i++) {
        Check *c = &g->checks.data[i];
        c->slot = c->path && c->arg >= 0 && PyTuple_GET_SIZE(c->path) ? wk_srctree_node(&g->sources, c->arg, c->path)
                                                                        : -1;
    }
    g->nslots = g->sources.nodes.len;
    free(g->memos);
    g->nmemos = g->checks.len;
    g->memos = wk_xcalloc((size_t)g->nmemos + 1, sizeof(CheckMemo));
    /* TensorGuards refuses one tensor passed twice (f(e, e)) on every call:
     * a repeated example is checked on its own, outside the batch */
    for (int i = 0; i < g->checks.len; i++) {
        Check *c = &g->checks.data[i];
        c->repeated = 0;
        for (int j = 0; c->kind == CK_TENSOR && c->example && j < i; j++)
            if (g->checks.data[j].kind == CK_TENSOR && g->checks.data[j].example == c->example) c->repeated = 1;
    }
    int n = 0;
    for (int i = 0; i < g->checks.len; i++) {
        const Check *c = &g->checks.data[i];
        n += c->kind == CK_TENSOR && c->example && !c->repeated;
    }
    PyObject *cls = NULL, *mod = n ? PyImport_ImportModule("torch._C._dynamo.guards") : NULL;
    if (mod) cls = PyObject_GetAttrString(mod, "TensorGuards");
    Py_XDECREF(mod);
    PyObject *args = cls ? PyTuple_New(n) : NULL, *sizes = args ? PyList_New(n) : NULL;
    PyObject *strides = sizes ? PyList_New(n) : NULL;
    if (strides) {
        int k = 0;
        for (int i = 0; i < g->checks.len; i++) {
            Check *c = &g->checks.data[i];
            if (c->kind != CK_TENSOR || !c->example || c->repeated) continue;
            PyObject *sz = PyList_New(c->ndim), *st = PyList_New(c->ndim);
            for (int d = 0; sz && st && d < c->ndim; d++) {
                PyList_SET_ITEM(sz, d, PyLong_FromLongLong(c->sizes[d]));
                PyList_SET_ITEM(st, d, PyLong_FromLongLong(c->strides[d]));
            }
            PyTuple_SET_ITEM(args, k, Py_NewRef(c->example));
            PyList_SET_ITEM(sizes, k, sz ? sz : Py_NewRef(Py_None));
            PyList_SET_ITEM(strides, k, st ? st : Py_NewRef(Py_None));
            k++;
        }
        PyObject *kw = Py_BuildValue("{s:O,s:O}", "dynamic_dims_sizes", sizes, "dynamic_dims_strides", strides);
        PyObject *tg = kw ? PyObject_Call(cls, args, kw) : NULL;
        Py_XDECREF(kw);
        if (tg) {
            g->tensor_guards = tg;
            for (int i = 0; i < g->checks.len; i++) {
                Check *c = &g->checks.data[i];
                if (c->kind != CK_TENSOR || !c->example || c->repeated) continue;
                c->batched = 1;
                wk_vec_push(&g->batched, i);
            }
        }
    }
    PyErr_Clear(); /* no batched check: the per-tensor checks remain */
    Py_XDECREF(cls);
    Py_XDECREF(args);
    Py_XDECREF(sizes);
    Py_XDECREF(strides);
    for (int i = 0; i < g->checks.len; i++) Py_CLEAR(g->checks.data[i].example);
}

void wk_guard_global_is(WkGuards *g, PyObject *name, PyObject *value) {
    for (int i = 0; i < g->checks.len; i++) {
        Check *o = &g->checks.data[i];
        if (o->kind == CK_GLOBAL_IS && PyUnicode_Compare(o->name, name) == 0) return;
    }
    Check c = {.kind = CK_GLOBAL_IS, .arg = -1};
    c.name = Py_NewRef(name);
    c.value = Py_NewRef(value);
    add_check(g, c);
}

void wk_guard_globals_is(WkGuards *g, PyObject *globals, PyObject *name, PyObject *value) {
    for (int i = 0; i < g->checks.len; i++) {
        Check *o = &g->checks.data[i];
        if (o->kind == CK_DICT_IS && o->owner == globals && PyUnicode_Compare(o->name, name) == 0) return;
    }
    Check c = {.kind = CK_DICT_IS, .arg = -1};
    c.owner = Py_NewRef(globals);
    c.name = Py_NewRef(name);
    c.value = Py_NewRef(value);
    add_check(g, c);
}

void wk_guard_attr_is(WkGuards *g, PyObject *module, PyObject *name, PyObject *value) {
    for (int i = 0; i < g->checks.len; i++) {
        Check *o = &g->checks.data[i];
        if (o->kind == CK_ATTR_IS && o->owner == module && PyUnicode_Compare(o->name, name) == 0)
            return;
    }
    Check c = {.kind = CK_ATTR_IS, .arg = -1};
    c.owner = Py_NewRef(module);
    c.name = Py_NewRef(name);
    c.value = Py_NewRef(value);
    add_check(g, c);
}

void wk_guard_function(WkGuards *g, PyObject *fn) {
    if (!PyFunction_Check(fn)) return;
    for (int i = 0; i < g->checks.len; i++) {
        Check *o = &g->checks.data[i];
        if (o->kind == CK_FUNC && o->owner == fn) return;
    }
    PyFunctionObject *f = (PyFunctionObject *)fn;
    Check c = {.kind = CK_FUNC, .arg = -1};
    c.owner = Py_NewRef(fn);
    c.value = Py_NewRef(f->func_code);
    c.defaults = Py_XNewRef(f->func_defaults);
    c.kwdefaults = Py_XNewRef(f->func_kwdefaults);
    add_check(g, c);
}

void wk_guard_cell_is(WkGuards *g, PyObject *cell, PyObject *value) {
    for (int i = 0; i < g->checks.len; i++) {
        Check *o = &g->checks.data[i];
        if (o->kind == CK_CELL_IS && o->owner == cell) return;
    }
    Check c = {.kind = CK_CELL_IS, .arg = -1};
    c.owner = Py_NewRef(cell);
    c.value = Py_XNewRef(value);
    add_check(g, c);
}

void wk_guard_freevar_is(WkGuards *g, int i, PyObject *value) {
    for (int k = 0; k < g->checks.len; k++) {
        Check *o = &g->checks.data[k];
        if (o->kind == CK_FREEVAR_IS && o->enabled == i) return;
    }
    Check c = {.kind = CK_FREEVAR_IS, .arg = -1, .enabled = i};
    c.value = Py_XNewRef(value);
    add_check(g, c);
}

void wk_guard_type_attr_is(WkGuards *g, PyTypeObject *type, PyObject *name, PyObject *value) {
    for (int k = 0; k < g->checks.len; k++) {
        Check *o = &g->checks.data[k];
        if (o->kind == CK_TYPE_ATTR_IS && o->owner == (PyObject *)type && PyUnicode_Compare(o->name, name) == 0)
            return;
    }
    Check c = {.kind = CK_TYPE_ATTR_IS, .arg = -1};
    c.owner = Py_NewRef((PyObject *)type);
    c.name = Py_NewRef(name);
    /* a function deleted from its class dies as in eager (CPython's
     * test_weakref WeakMethod tests): held weakly where it can be */
    if (value && PyFunction_Check(value) && (c.value_ref = PyWeakref_NewRef(value, NULL)) == NULL) PyErr_Clear();
    if (!c.value_ref) c.value = Py_XNewRef(value);
    add_check(g, c);
}

void wk_guard_dict_lacks_at(WkGuards *g, int arg, PyObject *path, PyObject *name) {
    for (int k = 0; k < g->checks.len; k++) {
        Check *o = &g->checks.data[k];
        if (o->kind == CK_DICT_LACKS && o->arg == arg && same_path(o->path, path) &&
            PyUnicode_Compare(o->name, name) == 0)
            return;
    }
    Check c = {.kind = CK_DICT_LACKS, .arg = arg, .path = Py_XNewRef(path)};
    c.name = Py_NewRef(name);
    add_check(g, c);
}

void wk_guard_module_plain_attr_at(WkGuards *g, int arg, PyObject *path, PyObject *name) {
    for (int k = 0; k < g->checks.len; k++) {
        Check *o = &g->checks.data[k];
        if (o->kind == CK_MODULE_PLAIN_ATTR && o->arg == arg && same_path(o->path, path) &&
            PyUnicode_Compare(o->name, name) == 0)
            return;
    }
    Check c = {.kind = CK_MODULE_PLAIN_ATTR, .arg = arg, .path = Py_XNewRef(path)};
    c.name = Py_NewRef(name);
    add_check(g, c);
}

void wk_guard_arg_distinct(WkGuards *g, int arg) {
    if (has_check_at(g, CK_ARG_DISTINCT, arg, NULL)) return;
    Check c = {.kind = CK_ARG_DISTINCT, .arg = arg};
    add_check(g, c);
}

void wk_guard_same_as_at(WkGuards *g, int arg, PyObject *path, int arg2, PyObject *path2, int same) {
    PyObject *other = Py_BuildValue("(iO)", arg2, path2 ? path2 : Py_None);
    if (!other) {
        PyErr_Clear();
        return;
    }
    for (int i = 0; i < g->checks.len; i++) {
        const Check *o = &g->checks.data[i];
        if (o->kind == CK_SAME_AS && o->arg == arg && same_path(o->path, path) &&
            PyObject_RichCompareBool(o->value, other, Py_EQ) == 1) {
            Py_DECREF(other);
            return;
        }
    }
    PyErr_Clear();
    Check c = {.kind = CK_SAME_AS, .arg = arg, .path = Py_XNewRef(path), .enabled = same};
    c.value = other;
    add_check(g, c);
}

/* 1 when name is in none of module x's registries (read from its instance
 * __dict__, as Module.__setattr__ reads them), 0 otherwise. */
int wk_guards_module_plain_attr(PyObject *x, PyObject *name) {
    static const char *const registries[] = {"_parameters", "_buffers", "_modules"};
    PyObject **dp = _PyObject_GetDictPtr(x);
    if (!dp || !*dp) return 0;
    for (size_t i = 0; i < sizeof registries / sizeof *registries; i++) {
        PyObject *reg = PyDict_GetItemString(*dp, registries[i]);
        if (!reg) continue;
        if (!PyDict_Check(reg)) return 0;
        PyObject *v = PyDict_GetItemWithError(reg, name);
        if (v || PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

void wk_guard_shape_at(WkGuards *g, int arg, PyObject *path, PyObject *container, PyObject *shape) {
    wk_guard_type_at(g, arg, path, Py_TYPE(container));
    if (has_check_at(g, CK_SHAPE, arg, path)) return;
    Check c = {.kind = CK_SHAPE, .arg = arg, .path = Py_XNewRef(path)};
    c.value = Py_NewRef(shape);
    add_check(g, c);
}

void wk_guard_dict_item_is(WkGuards *g, PyObject *dict, PyObject *key, PyObject *value) {
    Check c = {.kind = CK_DICT_ITEM_IS, .arg = -1};
    c.owner = Py_NewRef(dict);
    c.name = Py_NewRef(key);
    c.value = Py_XNewRef(value);
    add_check(g, c);
}

void wk_guard_pinned_equals(WkGuards *g, PyObject *obj, PyObject *snapshot) {
    Check c = {.kind = CK_PINNED_EQUALS, .arg = -1};
    c.owner = Py_NewRef(obj);
    c.value = Py_NewRef(snapshot);
    add_check(g, c);
}

void wk_guard_call_is(WkGuards *g, PyObject *fn, PyObject *value) {
    for (int i = 0; i < g->checks.len; i++)
        if (g->checks.data[i].kind == CK_CALL_IS && g->checks.data[i].owner == fn) return;
    Check c = {.kind = CK_CALL_IS, .arg = -1};
    c.owner = Py_NewRef(fn);
    c.value = Py_NewRef(value);
    add_check(g, c);
}

void wk_guard_no_hooks_at(WkGuards *g, int arg, PyObject *path) {
    if (has_check_at(g, CK_NO_HOOKS, arg, path)) return;
    Check c = {.kind = CK_NO_HOOKS, .arg = arg, .path = Py_XNewRef(path)};
    add_check(g, c);
}

static PyObject *global_hook_dicts[4]; /* torch.nn.modules.module._global_*_hooks, looked up once */

static int init_global_hooks(void) {
    static const char *const names[] = {"_global_backward_pre_hooks", "_global_backward_hooks",
                                        "_global_forward_hooks", "_global_forward_pre_hooks"};
    if (global_hook_dicts[0]) return 0;
    PyObject *m = PyImport_ImportModule("torch.nn.modules.module");
    if (!m) return -1;
    for (int i = 0; i < 4; i++) {
        global_hook_dicts[i] = PyObject_GetAttrString(m, names[i]);
        if (!global_hook_dicts[i] || !PyDict_Check(global_hook_dicts[i])) {
            for (int k = 0; k <= i; k++) Py_CLEAR(global_hook_dicts[k]);
            Py_DECREF(m);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "module hook registries are not dicts");
            return -1;
        }
    }
    Py_DECREF(m);
    return 0;
}

/* 1 when no global module hook is registered, 0 when one is, -1 on error */
int wk_guards_no_global_hooks(void) {
    if (init_global_hooks() < 0) return -1;
    for (int i = 0; i < 4; i++)
        if (PyDict_GET_SIZE(global_hook_dicts[i])) return 0;
    return 1;
}

void wk_guard_no_global_hooks(WkGuards *g) {
    if (has_check(g, CK_NO_GLOBAL_HOOKS, -1)) return;
    Check c = {.kind = CK_NO_GLOBAL_HOOKS, .arg = -1};
    add_check(g, c);
}

/* 1 when module m has no hooks of its own, 0 when it has, -1 on error.
 * Reads the instance __dict__ directly (no __getattr__). */
/* The four hook dicts of module m, read from its instance __dict__ (no
 * __getattr__): 1 when all four are dicts (hooks[] borrowed), 0 when one is
 * missing or not a dict, -1 on error. */
static int module_hook_dicts(PyObject *m, PyObject *hooks[4]) {
    static const char *const names[] = {"_backward_hooks", "_backward_pre_hooks", "_forward_hooks",
                                        "_forward_pre_hooks"};
    static PyObject *interned[4]; /* looked up by interned str: no string made per check */
    if (!interned[3])
        for (int i = 0; i < 4; i++)
            if (!interned[i] && !(interned[i] = PyUnicode_InternFromString(names[i]))) return -1;
    PyObject **dp = _PyObject_GetDictPtr(m);
    if (!dp || !*dp) return 0;
    for (int i = 0; i < 4; i++) {
        PyObject *d = PyDict_GetItemWithError(*dp, interned[i]);
        if (!d || !PyDict_Check(d)) return PyErr_Occurred() ? -1 : 0;
        hooks[i] = d;
    }
    return 1;
}

int wk_guards_module_has_no_hooks(PyObject *m) {
    PyObject *hooks[4];
    int r = module_hook_dicts(m, hooks);
    if (r <= 0) return r;
    for (int i = 0; i < 4; i++)
        if (PyDict_GET_SIZE(hooks[i])) return 0;
    return 1;
}

static int init_grad_fn(void) {
    if (grad_fn) return 0;
    PyObject *torch = PyImport_ImportModule("torch");
    if (!torch) return -1;
    grad_fn = PyObject_GetAttrString(torch, "is_grad_enabled");
    Py_DECREF(torch);
    return grad_fn ? 0 : -1;
}

int wk_guards_grad_enabled(void) {
    if (init_grad_fn() < 0) return -1;
    PyObject *r = PyObject_CallNoArgs(grad_fn);
    if (!r) return -1;
    int on = (r == Py_True);
    Py_DECREF(r);
    return on;
}

void wk_guard_grad_mode(WkGuards *g, int enabled) {
    if (has_check(g, CK_GRAD_MODE, -1)) return;
    Check c = {.kind = CK_GRAD_MODE, .arg = -1, .enabled = enabled};
    add_check(g, c);
}

/* ---- evaluation --------------------------------------------------------- */

static uint64_t dict_version(PyObject *d);

static CheckMemo *memo_of(const WkGuards *g, const Check *c) {
    ptrdiff_t i = c - g->checks.data;
    return i >= 0 && i < g->nmemos ? &g->memos[i] : NULL;
}

/* x's instance __dict__ is the one memo saw, at the same version. */
static int dict_unchanged(const CheckMemo *mm, PyObject *x, PyObject **dict) {
    PyObject **dp = _PyObject_GetDictPtr(x);
    *dict = dp ? *dp : NULL;
    return mm && *dict && mm->dict == *dict && mm->version && dict_version(*dict) == mm->version;
}

static void memo_dict(CheckMemo *mm, PyObject *dict) {
    if (!mm) return;
    mm->dict = dict;
    mm->version = dict ? dict_version(dict) : 0;
}

/* A guarded dict key: the same object, or an equal str or int (a hook
 * id past the small-int cache is a new int object on every read). */
static int same_key(PyObject *k, PyObject *e) {
    if (k == e) return 1;
    if (PyUnicode_CheckExact(k) && PyUnicode_CheckExact(e)) return PyUnicode_Compare(k, e) == 0;
    if (PyLong_CheckExact(k) && PyLong_CheckExact(e)) return PyObject_RichCompareBool(k, e, Py_EQ) == 1;
    return 0;
}

/* NO_HOOKS: 1 when module x has no hooks of its own, 0 when it has or
 * they cannot be read (a module without the dicts is not one torch made). */
static int no_hooks_memo(CheckMemo *mm, PyObject *x) {
    PyObject *dict;
    if (dict_unchanged(mm, x, &dict)) {
        for (int i = 0; i < 4; i++)
            if (PyDict_GET_SIZE(mm->hooks[i])) return 0;
        return 1;
    }
    PyObject *hooks[4];
    if (module_hook_dicts(x, hooks) != 1) {
        PyErr_Clear();
        return 0;
    }
    for (int i = 0; i < 4; i++)
        if (PyDict_GET_SIZE(hooks[i])) return 0;
    if (mm) {
        memo_dict(mm, dict);
        for (int i = 0; i < 4; i++) mm->hooks[i] = hooks[i];
    }
    return 1;
}

/* DICT_LACKS: 1 when name is not in x's instance __dict__, 0 otherwise. */
static int dict_lacks_memo(CheckMemo *mm, PyObject *x, PyObject *name) {
    PyObject *dict;
    if (dict_unchanged(mm, x, &dict)) return 1;
    PyObject *v = dict ? PyDict_GetItemWithError(dict, name) : NULL;
    if (v || PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    memo_dict(mm, dict);
    return 1;
}

static _Thread_local char why_buf[512];

static const char *arg_name_path(const WkGuards *g, int arg, PyObject *path, char *buf, size_t n) {
    const char *s = NULL;
    if (arg < 0) { /* only global-sourced checks name no argument */
        snprintf(buf, n, "a global");
        return buf;
    }
    if (g->names && arg >= 0 && arg < PyTuple_GET_SIZE(g->names)) {
        s = PyUnicode_AsUTF8(PyTuple_GET_ITEM(g->names, arg));
        if (!s) PyErr_Clear();
    }
    size_t k;
    if (s) k = (size_t)snprintf(buf, n, "L['%s']", s);
    else k = (size_t)snprintf(buf, n, "arg%d", arg);
    for (Py_ssize_t i = 0; path && i < PyTuple_GET_SIZE(path) && k < n; i++) {
        PyObject *elem = PyTuple_GET_ITEM(path, i);
        if (PyTuple_Check(elem)) {
            PyObject *r = PyObject_Repr(PyTuple_GET_ITEM(elem, 0));
            const char *rs = r ? PyUnicode_AsUTF8(r) : NULL;
            if (!rs) PyErr_Clear();
            k += (size_t)snprintf(buf + k, n - k, "[%s]", rs ? rs : "?");
            Py_XDECREF(r);
            continue;
        }
        const char *a = PyUnicode_AsUTF8(elem);
        if (!a) {
            PyErr_Clear();
            a = "?";
        }
        k += (size_t)snprintf(buf + k, n - k, ".%s", a);
    }
    return buf;
}

static const char *arg_name(const WkGuards *g, int arg, char *buf, size_t n) {
    return arg_name_path(g, arg, NULL, buf, n);
}

static const char *who_of(const WkGuards *g, const Check *c, char *buf, size_t n) {
    if (c->arg < 0 && c->name) {
        const char *s = PyUnicode_AsUTF8(c->name);
        if (!s) PyErr_Clear();
        snprintf(buf, n, "G['%s']", s ? s : "?");
        return buf;
    }
    return arg_name_path(g, c->arg, c->path, buf, n);
}

static void fmt_ints(WkStr *s, const int64_t *v, int n) {
    wk_str_append(s, "[");
    for (int i = 0; i < n; i++) wk_str_printf(s, "%s%lld", i ? ", " : "", (long long)v[i]);
    wk_str_append(s, "]");
}

static void fmt_tuple_ints(WkStr *s, PyObject *t) {
    wk_str_append(s, "[");
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++)
        wk_str_printf(s, "%s%lld", i ? ", " : "", PyLong_AsLongLong(PyTuple_GET_ITEM(t, i)));
    wk_str_append(s, "]");
    PyErr_Clear();
}

/* The words of a tensor's size or stride failure, which
 * wk_guards_why_is_shape recognises */
#define WHY_SIZE "size"
#define WHY_STRIDE "stride"
#define WHY_TENSOR_META "tensor metadata mismatch"

int wk_guards_why_is_shape(const char *why) {
    return why && (strstr(why, " " WHY_SIZE " mismatch") || strstr(why, " " WHY_STRIDE " mismatch") ||
                   strstr(why, WHY_TENSOR_META));
}

/* Sets why_buf to "<who> <what> mismatch: expected <e>, got <g>". */
static void set_why_tuple(const char *who, const char *what, const int64_t *exp, int n, PyObject *got) {
    WkStr s = {0};
    wk_str_printf(&s, "%s %s mismatch: expected ", who, what);
    fmt_ints(&s, exp, n);
    wk_str_append(&s, ", got ");
    if (PyTuple_Check(got))
        fmt_tuple_ints(&s, got);
    else
        wk_str_append(&s, "?");
    snprintf(why_buf, sizeof why_buf, "%s", s.data);
    wk_str_free(&s);
}

static int same_ints(PyObject *t, const int64_t *v, int n) {
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != n) return 0;
    for (int i = 0; i < n; i++) {
        PyObject *o = PyTuple_GET_ITEM(t, i);
        int overflow = 0;
        long long x = PyLong_Check(o) ? PyLong_AsLongLongAndOverflow(o, &overflow) : -1;
        if (!PyLong_Check(o) || overflow || x != v[i]) return 0;
    }
    return 1;
}

/* A failure to read metadata is a mismatch (the caller recompiles and falls
 * back), except for BaseExceptions such as KeyboardInterrupt. */
static int read_failed(const char *who, const char *what) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyErr_Clear();
    snprintf(why_buf, sizeof why_buf, "%s %s could not be read", who, what);
    return 0;
}

static int check_tensor(const WkGuards *g, const Check *c, PyObject *x) {
    char nb[160];
    const char *who = who_of(g, c, nb, sizeof nb);
    PyObject *o = PyObject_GetAttr(x, s_dtype);
    if (!o) return read_failed(who, "dtype");
    int ok = (o == c->dtype);
    if (!ok) {
        PyObject *e = PyObject_Str(c->dtype), *got = PyObject_Str(o);
        snprintf(why_buf, sizeof why_buf, "%s dtype mismatch: expected %s, got %s", who,
                 e ? PyUnicode_AsUTF8(e) : "?", got ? PyUnicode_AsUTF8(got) : "?");
        Py_XDECREF(e);
        Py_XDECREF(got);
        PyErr_Clear();
    }
    Py_DECREF(o);
    if (!ok) return 0;

    o = PyObject_GetAttr(x, s_requires_grad);
    if (!o) return read_failed(who, "requires_grad");
    ok = ((o == Py_True) == (c->requires_grad != 0));
    Py_DECREF(o);
    if (!ok) {
        snprintf(why_buf, sizeof why_buf, "%s requires_grad mismatch: expected %s", who,
                 c->requires_grad ? "True" : "False");
        return 0;
    }

    o = PyObject_GetAttr(x, s_shape);
    if (!o) return read_failed(who, "shape");
    ok = same_ints(o, c->sizes, c->ndim);
    if (!ok) set_why_tuple(who, WHY_SIZE, c->sizes, c->ndim, o);
    Py_DECREF(o);
    if (!ok) return 0;

    o = PyObject_CallMethodNoArgs(x, s_stride);
    if (!o) return read_failed(who, "stride");
    ok = same_ints(o, c->strides, c->ndim);
    if (!ok) set_why_tuple(who, WHY_STRIDE, c->strides, c->ndim, o);
    Py_DECREF(o);
    if (!ok) return 0;

    o = PyObject_GetAttr(x, s_device);
    if (!o) return read_failed(who, "device");
    int eq = PyObject_RichCompareBool(o, c->device, Py_EQ);
    Py_DECREF(o);
    if (eq < 0) return read_failed(who, "device");
    if (!eq) {
        PyObject *e = PyObject_Str(c->device);
        snprintf(why_buf, sizeof why_buf, "%s device mismatch: expected %s", who,
                 e ? PyUnicode_AsUTF8(e) : "?");
        Py_XDECREF(e);
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static int values_equal(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    if (PyFloat_CheckExact(a) && PyFloat_CheckExact(b)) {
        /* bitwise: NaN matches NaN, 0.0 does not match -0.0 */
        double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
        return memcmp(&x, &y, sizeof x) == 0;
    }
    /* the items of a tuple or list of constants one by one, each of the
     * same exact type: [1, 2] == [1.0, True] for Python, not for capture
     * (range(), str(), isinstance see the difference) */
    if ((PyTuple_CheckExact(a) || PyList_CheckExact(a)) && Py_TYPE(a) == Py_TYPE(b)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(a);
        if (n != PySequence_Fast_GET_SIZE(b)) return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = PySequence_Fast_GET_ITEM(a, i), *y = PySequence_Fast_GET_ITEM(b, i);
            if (Py_TYPE(x) != Py_TYPE(y)) return 0;
            int eq = values_equal(x, y);
            if (eq != 1) return eq;
        }
        return 1;
    }
    /* a dict of constants (a config's id2label): Python's == ignores the
     * order of the keys and the exact types of keys and values, but
     * iteration order and those types are what capture unrolled and folded */
    if (PyDict_CheckExact(a) && PyDict_CheckExact(b)) {
        if (PyDict_GET_SIZE(a) != PyDict_GET_SIZE(b)) return 0;
        Py_ssize_t pa = 0, pb = 0;
        PyObject *ka, *va, *kb, *vb;
        while (PyDict_Next(a, &pa, &ka, &va)) {
            if (!PyDict_Next(b, &pb, &kb, &vb)) return 0;
            if (Py_TYPE(ka) != Py_TYPE(kb) || Py_TYPE(va) != Py_TYPE(vb)) return 0;
            int eq = values_equal(ka, kb);
            if (eq == 1) eq = values_equal(va, vb);
            if (eq != 1) return eq;
        }
        return 1;
    }
    return PyObject_RichCompareBool(a, b, Py_EQ);
}

static PyObject *lookup_global(PyObject *globals, PyObject *name) {
    PyObject *v = PyDict_GetItemWithError(globals, name);
    if (v || PyErr_Occurred()) return v;
    PyObject *b = PyDict_GetItemWithError(globals, s_builtins);
    if (!b) return NULL;
    if (PyModule_Check(b)) b = PyModule_GetDict(b);
    if (!b || !PyDict_Check(b)) return NULL;
    return PyDict_GetItemWithError(b, name);
}

/* One check on x (the argument, or the object at the end of its path):
 * 1 pass, 0 fail (why_buf set), -1 error. */
static int check_one(const WkGuards *g, const Check *c, PyObject *x, PyObject *globals) {
    char nb[160];
    switch (c->kind) {
    case CK_TYPE:
        if (Py_TYPE(x) != c->type) {
            snprintf(why_buf, sizeof why_buf, "%s type mismatch: expected %s, got %s",
                     who_of(g, c, nb, sizeof nb), c->type->tp_name, Py_TYPE(x)->tp_name);
            return 0;
        }
        break;
    case CK_ID:
        if (x != guarded_value(c)) {
            snprintf(why_buf, sizeof why_buf, "%s is not the same object",
                     who_of(g, c, nb, sizeof nb));
            return 0;
        }
        break;
    case CK_EQUALS: {
        int eq = Py_TYPE(x) == c->type ? values_equal(x, c->value) : 0;
        if (eq < 0) {
            if (read_failed(who_of(g, c, nb, sizeof nb), "value") < 0) return -1;
            return 0;
        }
        if (!eq) {
            PyObject *e = PyObject_Repr(c->value), *got = PyObject_Repr(x);
            snprintf(why_buf, sizeof why_buf, "%s value mismatch: expected %s, got %s",
                     who_of(g, c, nb, sizeof nb), e ? PyUnicode_AsUTF8(e) : "?",
                     got ? PyUnicode_AsUTF8(got) : "?");
            Py_XDECREF(e);
            Py_XDECREF(got);
            PyErr_Clear();
            return 0;
        }
        break;
    }
    case CK_GLOBAL_IS: {
        PyObject *v = globals ? lookup_global(globals, c->name) : NULL;
        if (!v && PyErr_Occurred()) {
            if (read_failed("global", PyUnicode_AsUTF8(c->name)) < 0) return -1;
            return 0;
        }
        if (v != c->value) {
            snprintf(why_buf, sizeof why_buf, "G['%s'] changed", PyUnicode_AsUTF8(c->name));
            return 0;
        }
        break;
    }
    case CK_ATTR_IS: {
        PyObject *v = PyObject_GetAttr(c->owner, c->name);
        if (!v) {
            if (read_failed("attribute", PyUnicode_AsUTF8(c->name)) < 0) return -1;
            return 0;
        }
        Py_DECREF(v);
        if (v != c->value) {
            snprintf(why_buf, sizeof why_buf, "attribute %s changed", PyUnicode_AsUTF8(c->name));
            return 0;
        }
        break;
    }
    case CK_DICT_IS: {
        PyObject *v = lookup_global(c->owner, c->name);
        if (!v && PyErr_Occurred()) {
            if (read_failed("global", PyUnicode_AsUTF8(c->name)) < 0) return -1;
            return 0;
        }
        if (v != c->value) {
            snprintf(why_buf, sizeof why_buf, "global %s of another module changed", PyUnicode_AsUTF8(c->name));
            return 0;
        }
        break;
    }
    case CK_GRAD_MODE: {
        int on = wk_guards_grad_enabled();
        if (on < 0) return -1;
        if (on != c->enabled) {
            snprintf(why_buf, sizeof why_buf, "grad mode mismatch: expected %s",
                     c->enabled ? "enabled" : "disabled");
            return 0;
        }
        break;
    }
    case CK_FUNC: {
        PyFunctionObject *f = (PyFunctionObject *)c->owner;
        if (f->func_code != c->value || f->func_defaults != c->defaults || f->func_kwdefaults != c->kwdefaults) {
            PyObject *q = f->func_qualname;
            snprintf(why_buf, sizeof why_buf, "%s.__code__, __defaults__ or __kwdefaults__ changed",
                     q && PyUnicode_Check(q) ? PyUnicode_AsUTF8(q) : "a function");
            return 0;
        }
        break;
    }
    case CK_CELL_IS:
        if (PyCell_GET(c->owner) != c->value) {
            snprintf(why_buf, sizeof why_buf, "a closure cell changed");
            return 0;
        }
        break;
    case CK_FREEVAR_IS: {
        PyFunctionObject *f = wk_hook_checking_fn;
        PyObject *cl = f ? f->func_closure : NULL;
        if (!cl || !PyTuple_Check(cl) || c->enabled >= PyTuple_GET_SIZE(cl) ||
            PyCell_GET(PyTuple_GET_ITEM(cl, c->enabled)) != c->value) {
            snprintf(why_buf, sizeof why_buf, "closure variable %d changed", c->enabled);
            return 0;
        }
        break;
    }
    case CK_TYPE_ATTR_IS:
        if (_PyType_Lookup((PyTypeObject *)c->owner, c->name) != guarded_value(c)) {
            snprintf(why_buf, sizeof why_buf, "%s.%s changed", ((PyTypeObject *)c->owner)->tp_name,
                     PyUnicode_AsUTF8(c->name));
            return 0;
        }
        break;
    case CK_DICT_LACKS: {
        if (!dict_lacks_memo(memo_of(g, c), x, c->name)) {
            snprintf(why_buf, sizeof why_buf, "%s has an instance attribute %s", who_of(g, c, nb, sizeof nb),
                     PyUnicode_AsUTF8(c->name));
            return 0;
        }
        break;
    }
    case CK_SHAPE: {
        int ok;
        if (PyLong_Check(c->value)) {
            /* a tuple argument's or a list attribute's length (its type guarded apart) */
            Py_ssize_t n = PyTuple_CheckExact(x) ? PyTuple_GET_SIZE(x) : PyList_CheckExact(x) ? PyList_GET_SIZE(x) : -1;
            ok = n == PyLong_AsSsize_t(c->value);
        } else {
            ok = (PyDict_CheckExact(x) || PyODict_CheckExact(x)) && PyDict_GET_SIZE(x) == PyTuple_GET_SIZE(c->value);
            if (ok && PyODict_CheckExact(x)) {
                /* an OrderedDict (a module's hook registry) keeps its own
                 * order, which move_to_end changes: its keys as it iterates */
                PyObject *keys = PySequence_Tuple(x);
                if (!keys) return -1;
                for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(keys); i++)
                    ok = same_key(PyTuple_GET_ITEM(keys, i), PyTuple_GET_ITEM(c->value, i));
                Py_DECREF(keys);
            } else {
                Py_ssize_t pos = 0, i = 0;
                PyObject *k, *v;
                while (ok && PyDict_Next(x, &pos, &k, &v)) ok = same_key(k, PyTuple_GET_ITEM(c->value, i++));
            }
        }
        if (!ok) {
            snprintf(why_buf, sizeof why_buf, "%s length or keys changed", who_of(g, c, nb, sizeof nb));
            return 0;
        }
        break;
    }
    case CK_DICT_ITEM_IS: {
        PyObject *v = PyDict_GetItemWithError(c->owner, c->name);
        if (v != c->value) {
            PyErr_Clear();
            snprintf(why_buf, sizeof why_buf, "an item of a %s changed", Py_TYPE(c->owner)->tp_name);
            return 0;
        }
        break;
    }
    case CK_PINNED_EQUALS: {
        int eq = PyObject_RichCompareBool(c->owner, c->value, Py_EQ);
        if (eq < 0 && read_failed("a pinned object", "value") < 0) return -1;
        if (eq <= 0) {
            snprintf(why_buf, sizeof why_buf, "a %s read at capture time changed", Py_TYPE(c->owner)->tp_name);
            return 0;
        }
        break;
    }
    case CK_CALL_IS: {
        PyObject *v = PyObject_CallNoArgs(c->owner);
        if (!v) return read_failed("a torch query's", "result");
        Py_DECREF(v);
        if (v != c->value) {
            snprintf(why_buf, sizeof why_buf, "a torch query read at capture time changed its answer");
            return 0;
        }
        break;
    }
    case CK_ARG_DISTINCT: /* needs every argument: wk_guards_check_memo */
    case CK_SAME_AS:
        break;
    case CK_MODULE_PLAIN_ATTR:
        if (!wk_guards_module_plain_attr(x, c->name)) {
            snprintf(why_buf, sizeof why_buf, "%s registers %s as a parameter, buffer or submodule",
                     who_of(g, c, nb, sizeof nb), PyUnicode_AsUTF8(c->name));
            return 0;
        }
        break;
    case CK_NO_HOOKS:
        if (!no_hooks_memo(memo_of(g, c), x)) {
            snprintf(why_buf, sizeof why_buf, "%s has module hooks", who_of(g, c, nb, sizeof nb));
            return 0;
        }
        break;
    case CK_NO_GLOBAL_HOOKS: {
        int r = wk_guards_no_global_hooks();
        if (r < 0) return -1;
        if (!r) {
            snprintf(why_buf, sizeof why_buf, "global module hooks are registered");
            return 0;
        }
        break;
    }
    case CK_TENSOR: {
        int r = check_tensor(g, c, x);
        if (r < 0) return -1;
        if (r == 0) return 0;
        break;
    }
    }
    return 1;
}

/* ---- sources: one step of an attribute path, fast for nn.Modules -------- */

static PyTypeObject *module_type_cache, *module_list_type;
static PyObject *s_parameters, *s_buffers, *s_modules, *s_getattr, *s_getattribute, *s_getitem;
static PyObject *module_getattr_fn, *object_getattribute, *module_list_getitem_fn;

static int init_module_fast(void) {
    if (module_type_cache) return 0;
    PyObject *mod = PyImport_ImportModule("torch.nn");
    PyObject *mt = mod ? PyObject_GetAttrString(mod, "Module") : NULL;
    PyObject *ml = mod ? PyObject_GetAttrString(mod, "ModuleList") : NULL;
    Py_XDECREF(mod);
    if (!mt || !ml || !PyType_Check(mt) || !PyType_Check(ml)) {
        Py_XDECREF(mt);
        Py_XDECREF(ml);
        PyErr_Clear();
        return -1;
    }
    s_parameters = PyUnicode_InternFromString("_parameters");
    s_buffers = PyUnicode_InternFromString("_buffers");
    s_modules = PyUnicode_InternFromString("_modules");
    s_getattr = PyUnicode_InternFromString("__getattr__");
    s_getattribute = PyUnicode_InternFromString("__getattribute__");
    s_getitem = PyUnicode_InternFromString("__getitem__");
    if (!s_parameters || !s_buffers || !s_modules || !s_getattr || !s_getattribute || !s_getitem) {
        PyErr_Clear();
        Py_DECREF(mt);
        Py_DECREF(ml);
        return -1;
    }
    /* what an unchanged class resolves: the fast paths below stand for these */
    module_getattr_fn = _PyType_Lookup((PyTypeObject *)mt, s_getattr);
    object_getattribute = _PyType_Lookup(&PyBaseObject_Type, s_getattribute);
    module_list_getitem_fn = _PyType_Lookup((PyTypeObject *)ml, s_getitem);
    if (!module_getattr_fn || !object_getattribute || !module_list_getitem_fn) {
        Py_DECREF(mt);
        Py_DECREF(ml);
        return -1;
    }
    Py_INCREF(module_getattr_fn);
    Py_INCREF(object_getattribute);
    Py_INCREF(module_list_getitem_fn);
    module_list_type = (PyTypeObject *)ml;
    module_type_cache = (PyTypeObject *)mt;
    return 0;
}

/* ---- version tags: the one place that knows them ------------------------
 * A dict's ma_version_tag changes on every mutation and is unique across
 * dicts (PEP 509; deprecated in 3.12 but kept, with watcher bits in its low
 * bits, which change only with a mutation too). A type's tp_version_tag is
 * reset to 0 when the type or a base changes and later given a fresh value.
 * 3.14 drops dict versions: there nothing is remembered (0 = unknown). */
#if PY_VERSION_HEX < 0x030E0000
static uint64_t dict_version(PyObject *d) {
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    return ((PyDictObject *)d)->ma_version_tag;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
}
#else
static uint64_t dict_version(PyObject *d) {
    (void)d;
    return 0;
}
#endif

static unsigned int type_version(PyTypeObject *tp) {
#if PY_VERSION_HEX < 0x030C0000
    if (!PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG)) return 0;
#endif
    return tp->tp_version_tag;
}

/* Starts a memo of one step from base (reset when anything is unknown). */
static void memo_begin(WkSrcMemo *m, PyObject *base) {
    if (!m) return;
    m->ndicts = 0;
    m->value = NULL;
    m->base = base;
    m->type = Py_TYPE(base);
    m->type_version = type_version(Py_TYPE(base));
}

static void memo_read(WkSrcMemo *m, PyObject *dict) {
    if (!m || m->ndicts < 0) return;
    uint64_t v = dict_version(dict);
    if (!v || !m->type_version || m->ndicts == WK_SRC_MEMO_DICTS) {
        m->ndicts = -1; /* cannot be remembered */
        return;
    }
    m->dicts[m->ndicts] = dict;
    m->versions[m->ndicts++] = v;
}

static void memo_end(WkSrcMemo *m, PyObject *value) {
    if (!m) return;
    if (m->ndicts <= 0) {
        m->ndicts = 0;
        return;
    }
    m->value = value;
}

/* The remembered answer of a step from base (borrowed), or NULL. */
static PyObject *memo_hit(const WkSrcMemo *m, PyObject *base) {
    if (!m || m->ndicts <= 0 || m->base != base || Py_TYPE(base) != m->type ||
        type_version(m->type) != m->type_version)
        return NULL;
    PyObject **dp = _PyObject_GetDictPtr(base);
    if (!dp || *dp != m->dicts[0]) return NULL;
    /* dicts[0] is the live __dict__; unchanged, it still holds dicts[1..]
     * (each found in the one before), so reading their versions is safe */
    for (int i = 0; i < m->ndicts; i++)
        if (dict_version(m->dicts[i]) != m->versions[i]) return NULL;
    return m->value;
}

/* getattr(m, name) for an nn.Module without running nn.Module.__getattr__
 * in Python: the instance __dict__, then _parameters, _buffers, _modules,
 * exactly where __getattr__ would look; only when the class keeps
 * object.__getattribute__ and nn.Module.__getattr__ and defines no
 * attribute of that name (which would take precedence). New reference, or
 * NULL without an exception to take the general path. memo (may be NULL)
 * records the dicts read. */
static PyObject *module_attr_fast(PyObject *m, PyObject *name, WkSrcMemo *memo) {
    if (init_module_fast() < 0) return NULL;
    PyTypeObject *tp = Py_TYPE(m);
    if (!PyType_IsSubtype(tp, module_type_cache) || tp->tp_getattro != module_type_cache->tp_getattro) return NULL;
    if (_PyType_Lookup(tp, s_getattr) != module_getattr_fn ||
        _PyType_Lookup(tp, s_getattribute) != object_getattribute || _PyType_Lookup(tp, name))
        return NULL;
    PyObject **dp = _PyObject_GetDictPtr(m);
    if (!dp || !*dp) return NULL;
    PyObject *d0 = *dp;
    memo_begin(memo, m); /* after the lookups above gave the type a version */
    memo_read(memo, d0);
    PyObject *v = PyDict_GetItemWithError(d0, name);
    if (v) {
        memo_end(memo, v);
        return Py_NewRef(v);
    }
    PyObject *const sub[3] = {s_parameters, s_buffers, s_modules};
    for (int i = 0; i < 3 && !PyErr_Occurred(); i++) {
        PyObject *d = PyDict_GetItemWithError(d0, sub[i]);
        if (!d || !PyDict_Check(d)) continue;
        memo_read(memo, d);
        if ((v = PyDict_GetItemWithError(d, name)) != NULL) {
            memo_end(memo, v);
            return Py_NewRef(v);
        }
    }
    PyErr_Clear();
    memo_begin(memo, m);
    memo_end(memo, NULL);
    return NULL;
}

/* ml[k] for an exact nn.ModuleList whose class keeps its __getitem__ and
 * an int 0 <= k < len: _modules[str(k)], which is what that __getitem__
 * returns. New reference, or NULL without an exception: general path.
 * memo (may be NULL) records the dicts read. */
static PyObject *module_list_item_fast(PyObject *ml, PyObject *key, WkSrcMemo *memo) {
    if (init_module_fast() < 0 || Py_TYPE(ml) != module_list_type || !PyLong_CheckExact(key)) return NULL;
    if (_PyType_Lookup(module_list_type, s_getitem) != module_list_getitem_fn) return NULL;
    PyObject **dp = _PyObject_GetDictPtr(ml);
    PyObject *mods = dp && *dp ? PyDict_GetItemWithError(*dp, s_modules) : NULL;
    int overflow = 0;
    long k = PyLong_AsLongAndOverflow(key, &overflow);
    if (!mods || !PyDict_Check(mods) || overflow || k < 0 || k >= PyDict_GET_SIZE(mods)) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *ks = PyUnicode_FromFormat("%ld", k);
    PyObject *v = ks ? PyDict_GetItemWithError(mods, ks) : NULL;
    Py_XDECREF(ks);
    if (v) {
        memo_begin(memo, ml);
        memo_read(memo, *dp);
        memo_read(memo, mods); /* its length and the key's item: its version */
        memo_end(memo, v);
        return Py_NewRef(v);
    }
    PyErr_Clear();
    return NULL;
}

/* One step, reusing memo's answer while what it read is unchanged (memo
 * may be NULL). */
static PyObject *source_step_memo_Ref(PyObject *x, PyObject *elem, WkSrcMemo *memo) {
    PyObject *next = memo_hit(memo, x);
    if (next) return Py_NewRef(next);
    if (memo) memo->ndicts = 0;
    if (PyTuple_Check(elem)) {
        PyObject *key = PyTuple_GET_ITEM(elem, 0);
        if ((next = module_list_item_fast(x, key, memo)) != NULL) return next;
        return PyObject_GetItem(x, key);
    }
    if ((next = module_attr_fast(x, elem, memo)) != NULL) return next;
    return PyObject_GetAttr(x, elem);
}

PyObject *wk_source_step_Ref(PyObject *x, PyObject *elem) { return source_step_memo_Ref(x, elem, NULL); }

/* ---- calling a module: when m(*a) is just forward(m, *a) ------------------- */

/* 1 when calling module m would call `forward` with m and the same
 * arguments and nothing else: its class keeps nn.Module's __call__,
 * _wrapped_call_impl, _call_impl and __getattribute__ (its __call__ is
 * `call` instead when that is not NULL) and resolves forward to `forward`; the instance shadows neither forward nor
 * _compiled_call_impl (Module.compile()); no hooks of its own, no global
 * module hooks, no TorchScript tracing. 0 otherwise, -1 on error. The
 * compiled module wrapper (wick.compile(module)) asks this on every call
 * and otherwise takes nn.Module's own path. */
int wk_module_call_is_forward(PyObject *m, PyObject *forward, PyObject *call) {
    static PyObject *names[5], *module_fns[5], *tracing_state;
    static const char *const snames[5] = {"__call__", "_wrapped_call_impl", "_call_impl", "forward",
                                          "_compiled_call_impl"};
    if (init_module_fast() < 0) return 0;
    if (!names[4]) {
        for (int i = 0; i < 5; i++)
            if (!(names[i] = PyUnicode_InternFromString(snames[i]))) return -1;
        for (int i = 0; i < 3; i++)
            if (!(module_fns[i] = Py_XNewRef(_PyType_Lookup(module_type_cache, names[i])))) return 0;
        PyObject *c = PyImport_ImportModule("torch._C");
        tracing_state = c ? PyObject_GetAttrString(c, "_get_tracing_state") : NULL;
        Py_XDECREF(c);
        if (!tracing_state) return -1;
    }
    PyTypeObject *tp = Py_TYPE(m);
    if (!PyType_IsSubtype(tp, module_type_cache) || tp->tp_getattro != module_type_cache->tp_getattro ||
        _PyType_Lookup(tp, s_getattribute) != object_getattribute)
        return 0;
    if (_PyType_Lookup(tp, names[0]) != (call ? call : module_fns[0])) return 0;
    for (int i = 1; i < 3; i++)
        if (_PyType_Lookup(tp, names[i]) != module_fns[i]) return 0;
    if (_PyType_Lookup(tp, names[3]) != forward) return 0;
    PyObject *cci = _PyType_Lookup(tp, names[4]);
    if (cci && cci != Py_None) return 0;
    PyObject **dp = _PyObject_GetDictPtr(m);
    if (!dp || !*dp) return 0;
    PyObject *v = PyDict_GetItemWithError(*dp, names[3]);
    if (v || PyErr_Occurred()) return PyErr_Occurred() ? -1 : 0;
    v = PyDict_GetItemWithError(*dp, names[4]);
    if ((v && v != Py_None) || PyErr_Occurred()) return PyErr_Occurred() ? -1 : 0;
    int r = wk_guards_module_has_no_hooks(m);
    if (r != 1) return r;
    if ((r = wk_guards_no_global_hooks()) != 1) return r;
    PyObject *t = PyObject_CallNoArgs(tracing_state);
    if (!t) return -1;
    Py_DECREF(t);
    return t == Py_None;
}

/* ---- the source tree: each distinct prefix of each path is one node -------- */

void wk_srctree_clear(WkSrcTree *t) {
    for (int i = 0; i < t->nodes.len; i++) Py_DECREF(t->nodes.data[i].elem);
    wk_vec_free(&t->nodes);
    wk_vec_free(&t->memo);
}

static int same_elem(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    if (PyTuple_Check(a) != PyTuple_Check(b)) return 0;
    if (PyTuple_Check(a)) {
        PyObject *x = PyTuple_GET_ITEM(a, 0), *y = PyTuple_GET_ITEM(b, 0);
        if (Py_TYPE(x) != Py_TYPE(y)) return 0; /* 1 and True are different keys here */
        int eq = PyObject_RichCompareBool(x, y, Py_EQ);
        if (eq < 0) PyErr_Clear();
        return eq > 0;
    }
    return PyUnicode_Check(a) && PyUnicode_Check(b) && PyUnicode_Compare(a, b) == 0;
}

int wk_srctree_node(WkSrcTree *t, int root, PyObject *path) {
    int node = -1;
    for (Py_ssize_t i = 0; path && i < PyTuple_GET_SIZE(path); i++) {
        PyObject *elem = PyTuple_GET_ITEM(path, i);
        int found = -1;
        for (int k = 0; k < t->nodes.len && found < 0; k++) {
            const WkSrcNode *n = &t->nodes.data[k];
            if (n->parent == node && n->root == root && same_elem(n->elem, elem)) found = k;
        }
        if (found < 0) {
            WkSrcNode n = {node, root, Py_NewRef(elem)};
            wk_vec_push(&t->nodes, n);
            WkSrcMemo none = {0};
            wk_vec_push(&t->memo, none);
            found = t->nodes.len - 1;
        }
        node = found;
    }
    return node;
}

PyObject *wk_srctree_get(const WkSrcTree *t, int node, PyObject *const *roots, int nroots, PyObject **cache) {
    if (cache[node]) return cache[node];
    const WkSrcNode *n = &t->nodes.data[node];
    PyObject *base;
    if (n->parent >= 0) {
        base = wk_srctree_get(t, n->parent, roots, nroots, cache);
    } else if (n->root >= 0 && n->root < nroots && roots[n->root]) {
        base = roots[n->root];
    } else {
        PyErr_SetString(PyExc_SystemError, "wick: a source's root is missing");
        return NULL;
    }
    if (!base) return NULL;
    cache[node] = source_step_memo_Ref(base, n->elem, node < t->memo.len ? &t->memo.data[node] : NULL);
    return cache[node];
}

/* Sources resolved during one wk_guards_check call: slot k holds the
 * object at node k of the guards' source tree (wk_guards_finalize). */
#define SLOTS_ON_STACK 128
static _Thread_local PyObject **slot_values;
static _Thread_local int slot_count;

/* getattr(x, path...) (new reference); NULL with why_buf set when some
 * attribute is missing (then 0 is the answer), or NULL and *err for a
 * BaseException that must propagate. */
static PyObject *resolve_path_Ref(const WkGuards *g, const Check *c, PyObject *const *args, int nargs,
                                  PyObject *x, int *err) {
    char nb[160];
    if (c->slot >= 0 && c->slot < slot_count) {
        PyObject *v = wk_srctree_get(&g->sources, c->slot, args, nargs, slot_values);
        if (v) return Py_NewRef(v);
        *err = read_failed(who_of(g, c, nb, sizeof nb), "attribute") < 0;
        return NULL;
    }
    Py_INCREF(x);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(c->path); i++) {
        PyObject *next = wk_source_step_Ref(x, PyTuple_GET_ITEM(c->path, i));
        Py_DECREF(x);
        if (!next) {
            *err = read_failed(who_of(g, c, nb, sizeof nb), "attribute") < 0;
            return NULL;
        }
        x = next;
    }
    return x;
}

/* SAME_AS's second object (new reference), or NULL with why_buf set (0)
 * or an error to propagate (*err) */
static PyObject *second_source_Ref(const WkGuards *g, const Check *c, PyObject *const *args, int nargs, int *err) {
    char nb[160];
    long arg2 = PyLong_AsLong(PyTuple_GET_ITEM(c->value, 0));
    PyObject *path2 = PyTuple_GET_ITEM(c->value, 1);
    if (arg2 < 0 || arg2 >= nargs || !args[arg2]) {
        snprintf(why_buf, sizeof why_buf, "%s is missing", arg_name(g, (int)arg2, nb, sizeof nb));
        return NULL;
    }
    PyObject *x = Py_NewRef(args[arg2]);
    for (Py_ssize_t i = 0; path2 != Py_None && i < PyTuple_GET_SIZE(path2); i++) {
        PyObject *next = wk_source_step_Ref(x, PyTuple_GET_ITEM(path2, i));
        Py_DECREF(x);
        if (!next) {
            *err = read_failed(who_of(g, c, nb, sizeof nb), "second source") < 0;
            return NULL;
        }
        x = next;
    }
    return x;
}

/* The object a check looks at (new reference), or NULL with why_buf set
 * (0) or an error to propagate (*err). */
static PyObject *subject_Ref(const WkGuards *g, const Check *c, PyObject *const *args, int nargs,
                             PyObject *globals, int *err) {
    char nb[160];
    PyObject *x = NULL;
    if (c->arg >= 0) {
        if (c->arg >= nargs || !args[c->arg]) {
            snprintf(why_buf, sizeof why_buf, "%s is missing", arg_name(g, c->arg, nb, sizeof nb));
            return NULL;
        }
        x = args[c->arg];
    } else if (c->name) {
        x = globals ? lookup_global(globals, c->name) : NULL;
        if (!x) {
            if (PyErr_Occurred() && read_failed("global", PyUnicode_AsUTF8(c->name)) < 0) *err = 1;
            snprintf(why_buf, sizeof why_buf, "G['%s'] is missing", PyUnicode_AsUTF8(c->name));
            return NULL;
        }
    }
    if (c->path && x) return resolve_path_Ref(g, c, args, nargs, x, err);
    return Py_NewRef(x);
}

/* The batched tensor check: 1 pass, 0 fail (why_buf names the first
 * failing tensor, formatted only now), -1 error. */
static int check_batched(const WkGuards *g, PyObject *const *args, int nargs, PyObject *globals) {
    int n = g->batched.len, rc = -1;
    if (!n) return 1;
    PyObject *stack[257];
    PyObject **objs = n + 1 <= 257 ? stack : wk_xcalloc((size_t)n + 1, sizeof(PyObject *));
    int got = 0;
    for (int k = 0; k < n; k++) {
        int err = 0;
        PyObject *x = subject_Ref(g, &g->checks.data[g->batched.data[k]], args, nargs, globals, &err);
        if (!x) {
            rc = err ? -1 : 0;
            goto done;
        }
        objs[1 + got++] = x;
    }
    static PyObject *s_check;
    if (!s_check && !(s_check = PyUnicode_InternFromString("check"))) goto done;
    objs[0] = g->tensor_guards;
    PyObject *r = PyObject_VectorcallMethod(s_check, objs, (size_t)(n + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (!r) {
        rc = read_failed("tensor", "metadata");
        goto done;
    }
    rc = r == Py_True;
    Py_DECREF(r);
    if (!rc) { /* find which, for the message: the per-tensor check says it */
        snprintf(why_buf, sizeof why_buf, WHY_TENSOR_META);
        for (int k = 0; k < n; k++) {
            const Check *c = &g->checks.data[g->batched.data[k]];
            PyObject *tt = (PyObject *)Py_TYPE(objs[1 + k]);
            (void)tt;
            int one = check_tensor(g, c, objs[1 + k]);
            if (one < 0) {
                rc = -1;
                break;
            }
            if (one == 0) break;
        }
    }
done:
    for (int k = 0; k < got; k++) Py_DECREF(objs[1 + k]);
    if (objs != stack) free(objs);
    return rc;
}

static int wk_guards_check_memo(const WkGuards *g, PyObject *const *args, int nargs, PyObject *globals,
                                const char **why);

int wk_guards_check(const WkGuards *g, PyObject *const *args, int nargs, PyObject *globals,
                    const char **why) {
    /* a check may run Python code that checks another entry (re-entrancy):
     * each call keeps its own slots and restores the caller's */
    PyObject *stack[SLOTS_ON_STACK];
    PyObject **saved = slot_values;
    int saved_count = slot_count;
    handover_clear();
    slot_count = g->nslots;
    /* with a hand-over the slots outlive this call: on the heap */
    int hand = g->token && nargs <= WK_HANDOVER_MAX_ARGS && g->nslots;
    slot_values = g->nslots <= SLOTS_ON_STACK && !hand ? stack : wk_xcalloc((size_t)g->nslots + 1, sizeof(PyObject *));
    for (int i = 0; i < g->nslots && slot_values == stack; i++) stack[i] = NULL;
    int rc = wk_guards_check_memo(g, args, nargs, globals, why);
    if (rc == 1 && hand) {
        handover_clear(); /* a nested check may have left one */
        handover.token = g->token;
        handover.nargs = nargs;
        for (int i = 0; i < nargs; i++) handover.args[i] = args[i];
        handover.values = slot_values;
        handover.nvalues = g->nslots;
        slot_values = NULL;
    } else {
        for (int i = 0; i < g->nslots; i++) Py_XDECREF(slot_values[i]);
        if (slot_values != stack) free(slot_values);
    }
    slot_values = saved;
    slot_count = saved_count;
    return rc;
}

static int wk_guards_check_memo(const WkGuards *g, PyObject *const *args, int nargs, PyObject *globals,
                                const char **why) {
    char nb[160];
    if (why) *why = NULL;
    if (init_names() < 0) return -1;
    for (int i = 0; i < g->checks.len; i++) {
        const Check *c = &g->checks.data[i];
        PyObject *x = NULL;
        int r;
        if (c->batched) continue;
        if (c->arg >= 0) {
            if (c->arg >= nargs || !args[c->arg]) {
                snprintf(why_buf, sizeof why_buf, "%s is missing", arg_name(g, c->arg, nb, sizeof nb));
                goto fail;
            }
            x = args[c->arg];
        } else if (c->name && (c->kind == CK_TYPE || c->kind == CK_TENSOR)) {
            x = globals ? lookup_global(globals, c->name) : NULL;
            if (!x) {
                if (PyErr_Occurred() && read_failed("global", PyUnicode_AsUTF8(c->name)) < 0) return -1;
                snprintf(why_buf, sizeof why_buf, "G['%s'] is missing", PyUnicode_AsUTF8(c->name));
                goto fail;
            }
        }
        if (c->kind == CK_ARG_DISTINCT) {
            for (int k = 0; k < nargs; k++)
                if (k != c->arg && args[k] == x) {
                    snprintf(why_buf, sizeof why_buf, "%s is also another argument", arg_name(g, c->arg, nb, sizeof nb));
                    goto fail;
                }
            continue;
        }
        if (c->kind == CK_SAME_AS) {
            int err = 0;
            PyObject *v = c->path ? resolve_path_Ref(g, c, args, nargs, x, &err) : Py_NewRef(x);
            PyObject *w = v ? second_source_Ref(g, c, args, nargs, &err) : NULL;
            int same = v && w && v == w;
            Py_XDECREF(v);
            Py_XDECREF(w);
            if (err) return -1;
            if (!v || !w) goto fail;
            if (same != c->enabled) {
                char nb2[160];
                PyObject *path2 = PyTuple_GET_ITEM(c->value, 1);
                snprintf(why_buf, sizeof why_buf, "%s %s %s", who_of(g, c, nb, sizeof nb),
                         same ? "is now" : "is no longer",
                         arg_name_path(g, (int)PyLong_AsLong(PyTuple_GET_ITEM(c->value, 0)),
                                       path2 == Py_None ? NULL : path2, nb2, sizeof nb2));
                goto fail;
            }
            continue;
        }
        if (c->path && x) {
            int err = 0;
            PyObject *v = resolve_path_Ref(g, c, args, nargs, x, &err);
            if (!v) {
                if (err) return -1;
                goto fail;
            }
            r = check_one(g, c, v, globals);
            Py_DECREF(v);
        } else {
            r = check_one(g, c, x, globals);
        }
        if (r < 0) return -1;
        if (r == 0) goto fail;
    }
    {
        int r = check_batched(g, args, nargs, globals);
        if (r < 0) return -1;
        if (r == 0) goto fail;
    }
    return 1;
fail:
    if (why) *why = why_buf;
    return 0;
}

PyObject *wk_guards_describe_Ref(const WkGuards *g) {
    char nb[160];
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    for (int i = 0; i < g->checks.len; i++) {
        const Check *c = &g->checks.data[i];
        const char *who = c->arg >= 0 || c->name ? who_of(g, c, nb, sizeof nb) : "";
        PyObject *line = NULL;
        switch (c->kind) {
        case CK_TYPE:
            line = PyUnicode_FromFormat("TYPE_MATCH %s %s", who, c->type->tp_name);
            break;
        case CK_ID: {
            PyObject *v = c->value_ref ? weak_target(c->value_ref) : c->value;
            line = PyUnicode_FromFormat("ID_MATCH %s is <%s at %p>", who, v ? Py_TYPE(v)->tp_name : "dead object",
                                        (void *)v);
            break;
        }
        case CK_EQUALS:
            line = PyUnicode_FromFormat("EQUALS_MATCH %s == %R (%s)", who, c->value, c->type->tp_name);
            break;
        case CK_GLOBAL_IS:
            line = PyUnicode_FromFormat("GLOBAL_MATCH G['%U'] is <%s at %p>", c->name,
                                        Py_TYPE(c->value)->tp_name, (void *)c->value);
            break;
        case CK_ATTR_IS:
            line = PyUnicode_FromFormat("ATTR_MATCH <%s at %p>.%U is <%s at %p>",
                                        Py_TYPE(c->owner)->tp_name, (void *)c->owner, c->name,
                                        Py_TYPE(c->value)->tp_name, (void *)c->value);
            break;
        case CK_DICT_IS: {
            PyObject *mod = PyDict_GetItemString(c->owner, "__name__");
            line = PyUnicode_FromFormat("GLOBAL_MATCH %S.%U is <%s at %p>", mod ? mod : Py_None, c->name,
                                        Py_TYPE(c->value)->tp_name, (void *)c->value);
            break;
        }
        case CK_GRAD_MODE:
            line = PyUnicode_FromFormat("GRAD_MODE %s", c->enabled ? "enabled" : "disabled");
            break;
        case CK_FUNC:
            line = PyUnicode_FromFormat("FUNCTION_MATCH %S has its __code__, __defaults__, __kwdefaults__",
                                        ((PyFunctionObject *)c->owner)->func_qualname);
            break;
        case CK_TYPE_ATTR_IS: {
            PyObject *v = c->value_ref ? weak_target(c->value_ref) : c->value;
            const char *what = c->value_ref && !v ? "a dead function" : !v ? "nothing" : Py_TYPE(v)->tp_name;
            line = PyUnicode_FromFormat("TYPE_ATTR_MATCH %s.%U is <%s at %p>", ((PyTypeObject *)c->owner)->tp_name,
                                        c->name, what, (void *)v);
            break;
        }
        case CK_DICT_LACKS:
            line = PyUnicode_FromFormat("NO_INSTANCE_ATTR %s.%U", who, c->name);
            break;
        case CK_ARG_DISTINCT:
            line = PyUnicode_FromFormat("ARG_DISTINCT %s", who);
            break;
        case CK_SAME_AS: {
            char nb2[160];
            PyObject *path2 = PyTuple_GET_ITEM(c->value, 1);
            const char *other = arg_name_path(g, (int)PyLong_AsLong(PyTuple_GET_ITEM(c->value, 0)),
                                              path2 == Py_None ? NULL : path2, nb2, sizeof nb2);
            line = PyUnicode_FromFormat("%s %s %s", c->enabled ? "IS" : "IS_NOT", who, other);
            break;
        }
        case CK_MODULE_PLAIN_ATTR:
            line = PyUnicode_FromFormat("MODULE_PLAIN_ATTR %s.%U", who, c->name);
            break;
        case CK_NO_HOOKS:
            line = PyUnicode_FromFormat("NO_MODULE_HOOKS %s", who);
            break;
        case CK_SHAPE:
            line = PyUnicode_FromFormat("%s %s %R", PyLong_Check(c->value) ? "LENGTH_MATCH" : "KEYS_MATCH", who,
                                        c->value);
            break;
        case CK_NO_GLOBAL_HOOKS:
            line = PyUnicode_FromString("NO_GLOBAL_MODULE_HOOKS");
            break;
        case CK_DICT_ITEM_IS:
            line = PyUnicode_FromFormat("DICT_ITEM_MATCH <%s at %p>[%R] is <%s at %p>", Py_TYPE(c->owner)->tp_name,
                                        (void *)c->owner, c->name, c->value ? Py_TYPE(c->value)->tp_name : "nothing",
                                        (void *)c->value);
            break;
        case CK_CALL_IS:
            line = PyUnicode_FromFormat("CALL_MATCH %R() is %R", c->owner, c->value);
            break;
        case CK_PINNED_EQUALS:
            line = PyUnicode_FromFormat("PINNED_EQUALS <%s at %p> == %R", Py_TYPE(c->owner)->tp_name,
                                        (void *)c->owner, c->value);
            break;
        case CK_FREEVAR_IS:
            line = PyUnicode_FromFormat("FREEVAR_MATCH closure[%d] holds <%s at %p>", c->enabled,
                                        c->value ? Py_TYPE(c->value)->tp_name : "nothing", (void *)c->value);
            break;
        case CK_CELL_IS:
            line = PyUnicode_FromFormat("CELL_MATCH <cell at %p> holds <%s at %p>", (void *)c->owner,
                                        c->value ? Py_TYPE(c->value)->tp_name : "nothing", (void *)c->value);
            break;
        case CK_TENSOR: {
            WkStr s = {0};
            PyObject *dt = PyObject_Str(c->dtype), *dev = PyObject_Str(c->device);
            wk_str_printf(&s, "TENSOR_MATCH %s dtype=%s device=%s requires_grad=%s sizes=", who,
                          dt ? PyUnicode_AsUTF8(dt) : "?", dev ? PyUnicode_AsUTF8(dev) : "?",
                          c->requires_grad ? "True" : "False");
            fmt_ints(&s, c->sizes, c->ndim);
            wk_str_append(&s, " strides=");
            fmt_ints(&s, c->strides, c->ndim);
            Py_XDECREF(dt);
            Py_XDECREF(dev);
            PyErr_Clear();
            line = PyUnicode_FromString(s.data);
            wk_str_free(&s);
            break;
        }
        }
        if (!line || PyList_Append(list, line) < 0) {
            Py_XDECREF(line);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(line);
    }
    return list;
}
