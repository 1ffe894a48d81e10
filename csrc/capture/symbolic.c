/* symbolic.c — the symbolic interpreter's core: frames, the instruction
 * loop, dispatch through the value kinds' operations tables, the return
 * plan, and wk_cap_compile_frame (a cache entry from a frame).
 *
 * wk_cap_compile_frame runs a frame's bytecode (3.11/3.12, from
 * wk_bc_decode, normalised once per code object by normalise() so that
 * handlers never test the version) on symbolic values: tensors become graph
 * values, Python values known at capture time are constants, and
 * everything the frame reads from outside (its arguments, globals, closure
 * cells, the functions it inlines) is guarded. The kinds of values and what
 * each operation does on them live under vals/ (see interp.h). Calls of
 * user functions push a Frame; conditions known at capture time specialise
 * branches and unroll loops.
 *
 * What capture cannot model (a data-dependent branch, an unknown callable,
 * .item(), print) is a graph break where one can be made (breaks.c: the
 * frame is captured again up to that instruction, which then runs in Python
 * before a resume function continues the frame); otherwise, and for limits
 * of the compiler (dtype, autodiff), a whole-frame fallback: an entry with
 * code == NULL and the reason "<what> at <file>:<line>", guarded like a
 * compiled entry so other input signatures can still compile. Python exceptions met
 * while interpreting become the reason, except BaseExceptions that are not
 * Exceptions (KeyboardInterrupt, SystemExit), which propagate.
 *
 * Values alias like Python objects: a local, a stack slot and a list item
 * that hold one tensor hold one Sv, so an in-place update of an
 * intermediate (y += 1) is seen through every alias. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "interp.h"

static PyObject *unsupported_error;

/* ---- the kinds ------------------------------------------------------------ */

const SvOps cap_null_kind = {.name = "NULL"};

const SvOps *const cap_sv_ops[SV_NKINDS] = {
    [SV_NULL] = &cap_null_kind,         [SV_CONST] = &cap_const_kind,       [SV_TENSOR] = &cap_tensor_kind,
    [SV_TUPLE] = &cap_tuple_kind,       [SV_LIST] = &cap_list_kind,         [SV_METHOD] = &cap_method_kind,
    [SV_OPAQUE] = &cap_opaque_kind,     [SV_GRAD_CTX] = &cap_grad_ctx_kind, [SV_GRAD_EXIT] = &cap_grad_exit_kind,
    [SV_AUTOCAST_EXIT] = &cap_autocast_exit_kind,
    [SV_ITER] = &cap_iter_kind,         [SV_DICT] = &cap_dict_kind,         [SV_CELL] = &cap_cell_kind,
    [SV_FUNC] = &cap_func_kind,         [SV_PARTIAL] = &cap_partial_kind,   [SV_OBJECT] = &cap_object_kind,
    [SV_SUPER] = &cap_super_kind,       [SV_CTX_TOKEN] = &cap_ctx_token_kind,
    [SV_SCRATCH] = &cap_scratch_kind,   [SV_SET] = &cap_set_kind,
};

Sv *sv_new(Interp *I, SvKind kind) {
    Sv *s = wk_xcalloc(1, sizeof(Sv));
    s->kind = kind;
    s->arg = -1;
    s->value = -1;
    wk_vec_push(&I->all, s);
    return s;
}

Sv *sv_const_Steal(Interp *I, PyObject *o) {
    Sv *s = sv_new(I, SV_CONST);
    s->obj = o;
    return s;
}

Sv *sv_const(Interp *I, PyObject *o) { return sv_const_Steal(I, Py_NewRef(o)); }

Sv *sv_tensor(Interp *I, int value) {
    Sv *s = sv_new(I, SV_TENSOR);
    s->value = value;
    return s;
}

Sv *sv_seq(Interp *I, SvKind kind, Sv *const *items, int n) {
    Sv *s = sv_new(I, kind);
    for (int i = 0; i < n; i++) wk_vec_push(&s->items, items[i]);
    if (kind == SV_ITER) s->value = 0;
    return s;
}

static void sv_free(Sv *s) {
    Py_XDECREF(s->obj);
    Py_XDECREF(s->path);
    Py_XDECREF(s->gname);
    free(s->name);
    wk_vec_free(&s->items);
    wk_vec_free(&s->lists);
    wk_vec_free(&s->gen_args);
    wk_vec_free(&s->gen_values);
    free(s);
}

const char *sv_desc(const Sv *s) {
    const char *n = SV_OPS(s)->name;
    if (n) return n;
    return s->obj ? cap_type_name(s->obj) : "object";
}

/* ---- failure ------------------------------------------------------------ */

const char *cap_code_filename(Interp *I) {
    const char *f = PyUnicode_AsUTF8(I->f->code->co_filename);
    if (!f) {
        PyErr_Clear();
        f = "?";
    }
    return f;
}

/* Records the fallback reason (first one wins) and returns -1. */
int cap_unsupported(Interp *I, const char *fmt, ...) WK_PRINTF(2, 3);
int cap_unsupported(Interp *I, const char *fmt, ...) {
    if (I->reason) return -1;
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    WkStr s = {0};
    wk_str_printf(&s, "%s at %s:%d", what, cap_code_filename(I), I->f->line);
    I->reason = s.data;
    return -1;
}

/* A Python exception raised while interpreting: Exceptions become the
 * reason; other BaseExceptions propagate. Returns -1. */
int cap_py_failed(Interp *I, const char *during) {
    if (!PyErr_Occurred()) return cap_unsupported(I, "%s failed", during);
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
    cap_unsupported(I, "%s raised %s: %s", during, type ? ((PyTypeObject *)type)->tp_name : "?", m ? m : "?");
    Py_XDECREF(msg);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return -1;
}

int cap_graph_failed(Interp *I, const char *what) {
    return cap_unsupported(I, "%s: %s", what, wk_error_get());
}

/* ---- stack -------------------------------------------------------------- */

int sv_push(Interp *I, Sv *s) {
    if (I->f->sp >= I->f->stackcap) return cap_unsupported(I, "symbolic stack overflow");
    I->f->stack[I->f->sp++] = s;
    return 0;
}

Sv *sv_pop(Interp *I) {
    if (I->f->sp <= 0) {
        cap_unsupported(I, "symbolic stack underflow");
        return NULL;
    }
    return I->f->stack[--I->f->sp];
}

Sv *sv_peek(Interp *I, int n) { /* n = 1 is the top */
    if (n < 1 || n > I->f->sp) {
        cap_unsupported(I, "symbolic stack underflow");
        return NULL;
    }
    return I->f->stack[I->f->sp - n];
}

/* ---- constants ---------------------------------------------------------- */

/* ---- dispatch through the tables ------------------------------------------ */

int cap_truth(Interp *I, Sv *s, int *out) {
    const SvOps *ops = SV_OPS(s);
    if (!ops->truth) return cap_unsupported(I, "branch on a %s", sv_desc(s));
    return ops->truth(I, s, out);
}

int cap_iterate(Interp *I, Sv *s, SvList *out) {
    const SvOps *ops = SV_OPS(s);
    if (!ops->iterate) return cap_unsupported(I, "iterating a %s", sv_desc(s));
    return ops->iterate(I, s, out);
}

Sv *cap_binary(Interp *I, int nb, Sv *x, Sv *y) {
    const SvOps *xo = SV_OPS(x), *yo = SV_OPS(y);
    Sv *r = xo->binary ? xo->binary(I, nb, x, y) : NULL;
    if (!r && !CAP_FAILED(I) && yo != xo && yo->binary) r = yo->binary(I, nb, x, y);
    if (!r && !CAP_FAILED(I)) cap_unsupported(I, "operator %s on %s and %s", cap_nb_symbol(nb), sv_desc(x), sv_desc(y));
    return r;
}

static Sv *compare(Interp *I, int cmp, Sv *x, Sv *y);

Sv *cap_compare(Interp *I, int cmp, Sv *x, Sv *y) { return compare(I, cmp, x, y); }

/* a constant whose == is a builtin type's: never equal to a value of another kind */
static int builtin_eq_const(const Sv *s) {
    if (s->kind != SV_CONST) return 1;
    PyObject *o = s->obj;
    return cap_is_plain(o) || PyDict_CheckExact(o) || PyList_CheckExact(o) || PyTuple_CheckExact(o) ||
           PySet_CheckExact(o) || PyType_Check(o) || PyModule_Check(o) || PyFunction_Check(o);
}

/* c is a constant list, dict, set or tuple, s a symbolic one of that type */
static int same_container_type(const Sv *c, const Sv *s) {
    if (c->kind != SV_CONST) return 0;
    PyObject *o = c->obj;
    return (PyList_CheckExact(o) && s->kind == SV_LIST) || (PyDict_CheckExact(o) && s->kind == SV_DICT) ||
           (PyTuple_CheckExact(o) && s->kind == SV_TUPLE) || (PySet_CheckExact(o) && s->kind == SV_SET);
}

static Sv *compare(Interp *I, int cmp, Sv *x, Sv *y) {
    static const char *const syms[] = {"<", "<=", "==", "!=", ">", ">="};
    if (cmp < 0 || cmp > 5) return cap_unsupported(I, "COMPARE_OP %d", cmp), NULL;
    const SvOps *xo = SV_OPS(x), *yo = SV_OPS(y);
    Sv *r = xo->compare ? xo->compare(I, cmp, x, y) : NULL;
    if (!r && !CAP_FAILED(I) && yo != xo && yo->compare) r = yo->compare(I, cmp, x, y);
    if (!r && !CAP_FAILED(I) && (cmp == 2 || cmp == 3) && x->kind != SV_TENSOR && y->kind != SV_TENSOR &&
        (x->kind != SV_CONST || y->kind != SV_CONST) && x->kind != SV_OPAQUE && y->kind != SV_OPAQUE &&
        x->kind != SV_SCRATCH && y->kind != SV_SCRATCH && builtin_eq_const(x) && builtin_eq_const(y)) {
        /* a symbolic container against a value of another kind: never equal
         * (a constant list or dict against a symbolic one of its type may
         * be: a constant one is pinned by identity, its items not read) */
        if (x->kind != y->kind && !same_container_type(x, y) && !same_container_type(y, x))
            r = sv_const(I, (cmp == 3) ? Py_True : Py_False);
    }
    if (!r && !CAP_FAILED(I)) cap_unsupported(I, "comparison %s on %s and %s", syms[cmp], sv_desc(x), sv_desc(y));
    return r;
}

Sv *cap_call(Interp *I, Sv *callable, const Args *a) {
    const SvOps *ops = SV_OPS(callable);
    if (!ops->call) return cap_unsupported(I, "call of a %s", sv_desc(callable)), NULL;
    return ops->call(I, callable, a);
}

int cap_push_method(Interp *I, Sv *self, const char *name, int method) {
    Sv *m = sv_new(I, SV_METHOD);
    m->name = wk_xstrdup(name);
    if (method) {
        if (sv_push(I, m) < 0) return -1;
        return sv_push(I, self);
    }
    m->self = self;
    return sv_push(I, m);
}

int cap_push_property(Interp *I, Sv *self, Sv *getter, int method) {
    Args a = {&self, 1, NULL, NULL, 0};
    Sv *r = cap_call(I, getter, &a);
    if (!r) return -1;
    if (method && sv_push(I, I->null_sv) < 0) return -1;
    return sv_push(I, r);
}

WkRet *cap_ret_new(RetPlan *p, WkRetKind kind) {
    WkRet *r = wk_xcalloc(1, sizeof(WkRet));
    r->kind = kind;
    wk_vec_push(&p->all, r);
    return r;
}

/* How the transformed code rebuilds a returned value: values read unchanged
 * from a source are reloaded from it (identity kept); others by kind. */
WkRet *cap_reconstruct(Interp *I, RetPlan *p, Sv *s, int depth) {
    if (depth > 32) return cap_unsupported(I, "return value nested too deeply"), NULL;
    if (s->gname) {
        WkRet *r = cap_ret_new(p, WK_RET_GLOBAL);
        r->value = s->gname;
        return r;
    }
    if (s->arg >= 0) {
        WkRet *r = cap_ret_new(p, WK_RET_ARG);
        r->index = s->arg;
        r->path = s->path;
        return r;
    }
    const SvOps *ops = SV_OPS(s);
    if (!ops->reconstruct) return cap_unsupported(I, "returning a %s", sv_desc(s)), NULL;
    if (s->kind != SV_LIST && s->kind != SV_DICT && s->kind != SV_SET && s->kind != SV_OBJECT)
        return ops->reconstruct(I, p, s, depth);
    /* a mutable value the frame made is one object however many references
     * reach Python: its plan is made once and named again (transform.c
     * emits it once and reloads it) */
    for (int i = 0; i < p->rebuilt.len; i++) {
        if (p->rebuilt.data[i] != s) continue;
        if (!p->rebuilt_as.data[i]) return cap_unsupported(I, "a %s that contains itself", sv_desc(s)), NULL;
        return p->rebuilt_as.data[i];
    }
    int at = p->rebuilt.len;
    wk_vec_push(&p->rebuilt, s);
    wk_vec_push(&p->rebuilt_as, (WkRet *)NULL);
    WkRet *r = ops->reconstruct(I, p, s, depth);
    p->rebuilt_as.data[at] = r;
    return r;
}

static void plan_free(RetPlan *p) {
    for (int i = 0; i < p->all.len; i++) {
        free(p->all.data[i]->items);
        free(p->all.data[i]);
    }
    wk_vec_free(&p->all);
    wk_vec_free(&p->cell_svs);
    wk_vec_free(&p->cell_rets);
    wk_vec_free(&p->outputs);
    wk_vec_free(&p->rebuilt);
    wk_vec_free(&p->rebuilt_as);
}

/* ---- globals ---------------------------------------------------------------- */

static Sv *global_sv(Interp *I, PyObject *name) {
    PyObject *v = PyDict_GetItemWithError(I->f->globals, name);
    if (!v && !PyErr_Occurred() && PyDict_Check(I->f->builtins))
        v = PyDict_GetItemWithError(I->f->builtins, name);
    if (!v) {
        if (PyErr_Occurred()) cap_py_failed(I, "global lookup");
        else cap_unsupported(I, "name '%s' is not defined", PyUnicode_AsUTF8(name));
        return NULL;
    }
    int own_module = I->f->globals == I->top_globals;
    if (cap_is_tensor_obj(v) && !own_module) {
        cap_unsupported(I, "global tensor %s of another module", PyUnicode_AsUTF8(name));
        return NULL;
    }
    if (cap_is_tensor_obj(v)) {
        /* read afresh per call: guard what is read, never pin the tensor */
        PyObject *layout = PyObject_GetAttr(v, cap_s_layout);
        int strided = layout == cap_strided_layout;
        Py_XDECREF(layout);
        PyErr_Clear();
        wk_guard_global_tensor(I->guards, name, v);
        if (!strided) {
            cap_unsupported(I, "global tensor %s with a non-strided layout", PyUnicode_AsUTF8(name));
            return NULL;
        }
        PyObject *rg = PyObject_GetAttr(v, cap_s_requires_grad);
        if (rg == Py_True) wk_guard_grad_mode(I->guards, I->entry_grad);
        Py_XDECREF(rg);
        PyErr_Clear();
        Sv *s = sv_new(I, SV_TENSOR);
        s->obj = Py_NewRef(v);
        s->gname = Py_NewRef(name);
        return s;
    }
    if (own_module) wk_guard_global_is(I->guards, name, v);
    else wk_guard_globals_is(I->guards, I->f->globals, name, v);
    if (cap_tensor_type && PyObject_TypeCheck(v, cap_tensor_type)) {
        cap_unsupported(I, "global tensor %s of type %s", PyUnicode_AsUTF8(name), cap_type_name(v));
        return NULL;
    }
    return sv_const(I, v);
}

/* ---- instructions, normalised once ------------------------------------------ */

/* Version differences are resolved here, once per decoded code object:
 * every jump gets the index of its target, LOAD_GLOBAL / LOAD_ATTR /
 * LOAD_METHOD / COMPARE_OP get their plain operands, and 3.11's and 3.12's
 * spellings of one operation become one internal opcode (>= 256). */
enum {
    N_JUMP = 256,         /* JUMP_FORWARD, JUMP_BACKWARD(_NO_INTERRUPT) */
    N_POP_JUMP_IF_FALSE,  /* forward and backward spellings alike */
    N_POP_JUMP_IF_TRUE,
    N_POP_JUMP_IF_NONE,
    N_POP_JUMP_IF_NOT_NONE,
    N_JUMP_IF_FALSE_OR_POP,
    N_JUMP_IF_TRUE_OR_POP,
    N_FOR_ITER,           /* target: where to continue once the iterator is exhausted and popped */
    N_LOAD_GLOBAL,        /* arg: name index; flag: push NULL */
    N_LOAD_ATTR,          /* arg: name index; flag: as a method (LOAD_METHOD) */
    N_COMPARE,            /* arg: 0..5 = < <= == != > >= */
    N_LIST_TO_TUPLE,      /* LIST_TO_TUPLE (3.11), CALL_INTRINSIC_1 INTRINSIC_LIST_TO_TUPLE (3.12) */
};

typedef struct {
    int op, arg, flag, target, line;
} Ins;

static int find_start(const WkInstr *ins, int n, int start) {
    for (int i = 0; i < n; i++)
        if (ins[i].start == start) return i;
    return -1;
}

static Ins *normalise(Interp *I, const WkInstr *raw, int n) {
    Ins *out = wk_xcalloc((size_t)n + 1, sizeof(Ins));
    for (int i = 0; i < n; i++) {
        const WkInstr *in = &raw[i];
        Ins *o = &out[i];
        o->op = in->opcode;
        o->arg = in->oparg;
        o->line = in->line;
        o->target = -1;
        /* the last instruction (a loop's closing JUMP_BACKWARD) is followed by its caches only */
        int next_start = i + 1 < n ? raw[i + 1].start : in->offset + 1 + wk_bc_ncaches(in->opcode);
        int fwd = 0, back = 0;
        switch (in->opcode) {
        case JUMP_FORWARD: o->op = N_JUMP; fwd = 1; break;
        case JUMP_BACKWARD:
        case JUMP_BACKWARD_NO_INTERRUPT: o->op = N_JUMP; back = 1; break;
#if PY312
        case POP_JUMP_IF_FALSE: o->op = N_POP_JUMP_IF_FALSE; fwd = 1; break;
        case POP_JUMP_IF_TRUE: o->op = N_POP_JUMP_IF_TRUE; fwd = 1; break;
        case POP_JUMP_IF_NONE: o->op = N_POP_JUMP_IF_NONE; fwd = 1; break;
        case POP_JUMP_IF_NOT_NONE: o->op = N_POP_JUMP_IF_NOT_NONE; fwd = 1; break;
        case LOAD_GLOBAL: o->op = N_LOAD_GLOBAL; o->arg = in->oparg >> 1; o->flag = in->oparg & 1; break;
        case LOAD_ATTR: o->op = N_LOAD_ATTR; o->arg = in->oparg >> 1; o->flag = in->oparg & 1; break;
        case COMPARE_OP: o->op = N_COMPARE; o->arg = in->oparg >> 4; break;
        case CALL_INTRINSIC_1:
            if (in->oparg == 6) o->op = N_LIST_TO_TUPLE; /* INTRINSIC_LIST_TO_TUPLE */
            break;
#else
        case POP_JUMP_FORWARD_IF_FALSE: o->op = N_POP_JUMP_IF_FALSE; fwd = 1; break;
        case POP_JUMP_FORWARD_IF_TRUE: o->op = N_POP_JUMP_IF_TRUE; fwd = 1; break;
        case POP_JUMP_FORWARD_IF_NONE: o->op = N_POP_JUMP_IF_NONE; fwd = 1; break;
        case POP_JUMP_FORWARD_IF_NOT_NONE: o->op = N_POP_JUMP_IF_NOT_NONE; fwd = 1; break;
        case POP_JUMP_BACKWARD_IF_FALSE: o->op = N_POP_JUMP_IF_FALSE; back = 1; break;
        case POP_JUMP_BACKWARD_IF_TRUE: o->op = N_POP_JUMP_IF_TRUE; back = 1; break;
        case POP_JUMP_BACKWARD_IF_NONE: o->op = N_POP_JUMP_IF_NONE; back = 1; break;
        case POP_JUMP_BACKWARD_IF_NOT_NONE: o->op = N_POP_JUMP_IF_NOT_NONE; back = 1; break;
        case JUMP_IF_FALSE_OR_POP: o->op = N_JUMP_IF_FALSE_OR_POP; fwd = 1; break;
        case JUMP_IF_TRUE_OR_POP: o->op = N_JUMP_IF_TRUE_OR_POP; fwd = 1; break;
        case LOAD_GLOBAL: o->op = N_LOAD_GLOBAL; o->arg = in->oparg >> 1; o->flag = in->oparg & 1; break;
        case LOAD_ATTR: o->op = N_LOAD_ATTR; break;
        case LOAD_METHOD: o->op = N_LOAD_ATTR; o->flag = 1; break;
        case COMPARE_OP: o->op = N_COMPARE; break;
        case LIST_TO_TUPLE: o->op = N_LIST_TO_TUPLE; break;
#endif
        case FOR_ITER: o->op = N_FOR_ITER; fwd = 1; break;
        case SEND: fwd = 1; break; /* yield from's loop: its end (GET_YIELD_FROM_ITER) */
        default: break;
        }
        if (fwd || back) {
            int t = find_start(raw, n, fwd ? next_start + in->oparg : next_start - in->oparg);
            if (t < 0) {
                free(out);
                return cap_unsupported(I, "jump to offset %d not found", next_start + in->oparg), NULL;
            }
#if PY312
            if (in->opcode == FOR_ITER) t++; /* 3.12: an exhausted FOR_ITER skips the END_FOR at its target */
#endif
            o->target = t;
        }
    }
    return out;
}

/* ---- frames ------------------------------------------------------------------- */

Frame *cap_frame_new(Interp *I, PyFunctionObject *fn, PyCodeObject *code) {
    Frame *f = wk_xcalloc(1, sizeof(Frame));
    f->parent = I->f;
    f->fn = fn;
    f->code = code;
    f->globals = fn ? fn->func_globals : I->f ? I->f->globals : NULL;
    f->builtins = fn ? fn->func_builtins : I->f ? I->f->builtins : NULL;
    f->nlocals = code->co_nlocalsplus;
    f->locals = wk_xcalloc((size_t)f->nlocals + 1, sizeof(Sv *));
    f->stackcap = code->co_stacksize + 8;
    f->stack = wk_xcalloc((size_t)f->stackcap, sizeof(Sv *));
    f->line = code->co_firstlineno;
    f->depth = I->f ? I->f->depth + 1 : 0;
    wk_vec_push(&I->frames, f);
    return f;
}

static void frame_free(Frame *f) {
    free(f->exc);
    wk_vec_free(&f->yields);
    free(f->locals);
    free(f->stack);
    free(f);
}

/* ---- small operations ------------------------------------------------------------ */

PyObject *cap_path_then_Ref(PyObject *path, PyObject *step) {
    Py_ssize_t n = path ? PyTuple_GET_SIZE(path) : 0;
    PyObject *r = PyTuple_New(n + 1);
    if (!r) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(r, i, Py_NewRef(PyTuple_GET_ITEM(path, i)));
    PyTuple_SET_ITEM(r, n, Py_NewRef(step));
    return r;
}

PyObject *cap_path_item_Ref(PyObject *path, PyObject *key) {
    PyObject *elem = PyTuple_Pack(1, key);
    PyObject *r = elem ? cap_path_then_Ref(path, elem) : NULL;
    Py_XDECREF(elem);
    return r;
}

/* Only None, True and False are compared by identity: guards check values,
 * and for these singletons value and identity agree. */
static int is_singleton(PyObject *o) { return o == Py_None || o == Py_True || o == Py_False; }

static int is_op(Interp *I, int invert) {
    Sv *y = sv_pop(I), *x = y ? sv_pop(I) : NULL;
    if (!x) return -1;
    int same;
    if (x == y)
        same = 1;
    else if (x->kind == SV_CONST && y->kind == SV_CONST && (is_singleton(x->obj) || is_singleton(y->obj) ||
                                                             PyType_Check(x->obj) || PyType_Check(y->obj) ||
                                                             PyFunction_Check(x->obj) || PyFunction_Check(y->obj)))
        same = x->obj == y->obj;
    else if ((x->kind == SV_CONST && is_singleton(x->obj) && y->kind != SV_CONST && y->kind != SV_NULL) ||
             (y->kind == SV_CONST && is_singleton(y->obj) && x->kind != SV_CONST && x->kind != SV_NULL))
        same = 0; /* a tensor, tuple or guarded object is never None, True or False */
    else if (x->kind == SV_TENSOR && y->kind == SV_TENSOR) {
        if ((same = cap_tensor_is(I, x, y)) < 0) return -1;
    } else if (x->kind == SV_OPAQUE && y->kind == SV_OPAQUE && x->obj && y->obj && x->obj != y->obj)
        return cap_unsupported(I, "'is' between two objects");
    else
        return cap_unsupported(I, "'is' between a %s and a %s", sv_desc(x), sv_desc(y));
    return sv_push(I, sv_const(I, (same != invert) ? Py_True : Py_False));
}

static int load_attr(Interp *I, PyObject *name, int method) {
    Sv *o = sv_pop(I);
    if (!o) return -1;
    const SvOps *ops = SV_OPS(o);
    if (!ops->getattr) return cap_unsupported(I, "attribute .%s of %s", PyUnicode_AsUTF8(name), sv_desc(o));
    return ops->getattr(I, o, name, method);
}

/* CALL n: stack [NULL or self-callable pair, args..., kwnames from KW_NAMES] */
static int do_call(Interp *I, int n) {
    int nkw = I->f->kwnames ? (int)PyTuple_GET_SIZE(I->f->kwnames) : 0;
    PyObject *kwnames = I->f->kwnames;
    I->f->kwnames = NULL;
    if (I->f->sp < n + 2) return cap_unsupported(I, "symbolic stack underflow");
    Sv **argv = &I->f->stack[I->f->sp - n];
    Sv *callable, *self = NULL;
    if (I->f->stack[I->f->sp - n - 2]->kind == SV_NULL) {
        callable = I->f->stack[I->f->sp - n - 1];
    } else {
        callable = I->f->stack[I->f->sp - n - 2];
        self = I->f->stack[I->f->sp - n - 1];
    }
    Sv *pos[72];
    int npos = 0;
    if (n - nkw + 2 > 64) return cap_unsupported(I, "call with too many arguments");
    if (callable->kind == SV_METHOD && callable->self) pos[npos++] = callable->self;
    if (self) pos[npos++] = self;
    for (int i = 0; i < n - nkw; i++) pos[npos++] = argv[i];
    Args a = {pos, npos, kwnames, argv + (n - nkw), nkw};
    Sv *res = cap_call(I, callable, &a);
    if (!res) return -1;
    I->f->sp -= n + 2;
    return sv_push(I, res);
}

/* CALL_FUNCTION_EX: [NULL, callable, args tuple, kwargs dict if flags & 1] */
static int call_ex(Interp *I, int flags) {
    Sv *kw = (flags & 1) ? sv_pop(I) : NULL;
    Sv *args = sv_pop(I), *callable = args ? sv_pop(I) : NULL, *null = callable ? sv_pop(I) : NULL;
    if (!null || ((flags & 1) && !kw)) return -1;
    SvList pos = {0}, kwv = {0};
    PyObject *kwnames = NULL;
    int rc = -1;
    if (null->kind != SV_NULL) wk_vec_push(&pos, null); /* 3.11: a self slot is never here; be safe */
    if (callable->kind == SV_METHOD && callable->self) wk_vec_push(&pos, callable->self);
    if (cap_iterate(I, args, &pos) < 0) goto done;
    if (kw) {
        SvList keys = {0};
        if (kw->kind == SV_CONST && PyDict_CheckExact(kw->obj)) {
            Sv *d = cap_dict_new(I);
            if (!d || cap_dict_update(I, d, kw) < 0) goto done;
            kw = d;
        }
        if (kw->kind != SV_DICT) {
            cap_unsupported(I, "**kwargs of a %s", sv_desc(kw));
            goto done;
        }
        kwnames = PyList_AsTuple(kw->obj);
        if (!kwnames) {
            cap_py_failed(I, "kwargs");
            goto done;
        }
        for (int i = 0; i < kw->items.len; i++) wk_vec_push(&kwv, kw->items.data[i]);
        wk_vec_free(&keys);
    }
    Args a = {pos.data, pos.len, kwnames, kwv.data, kwv.len};
    Sv *res = cap_call(I, callable, &a);
    if (res) rc = sv_push(I, res);
done:
    Py_XDECREF(kwnames);
    wk_vec_free(&pos);
    wk_vec_free(&kwv);
    return rc;
}

static int subscript(Interp *I) {
    Sv *k = sv_pop(I), *c = k ? sv_pop(I) : NULL;
    if (!c) return -1;
    const SvOps *ops = SV_OPS(c);
    if (!ops->subscript) return cap_unsupported(I, "subscript of a %s", sv_desc(c));
    Sv *r = ops->subscript(I, c, k);
    return r ? sv_push(I, r) : -1;
}

static int unpack(Interp *I, Sv *s, int before, int after, int star) {
    SvList items = {0};
    if (s->kind == SV_CONST && PyTuple_Check(s->obj) && !cap_is_plain(s->obj) && !star) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(s->obj); i++) wk_vec_push(&items, sv_const(I, PyTuple_GET_ITEM(s->obj, i)));
    } else if (cap_iterate(I, s, &items) < 0) {
        wk_vec_free(&items);
        return -1;
    }
    int rc = 0;
    if ((!star && items.len != before) || (star && items.len < before + after)) {
        rc = cap_unsupported(I, "unpacking %d values into %d names", items.len, before + after);
    } else if (!star) {
        for (int i = before - 1; i >= 0 && !rc; i--) rc = sv_push(I, items.data[i]);
    } else {
        for (int i = items.len - 1; i >= items.len - after && !rc; i--) rc = sv_push(I, items.data[i]);
        if (!rc) rc = sv_push(I, sv_seq(I, SV_LIST, items.data + before, items.len - before - after));
        for (int i = before - 1; i >= 0 && !rc; i--) rc = sv_push(I, items.data[i]);
    }
    wk_vec_free(&items);
    return rc;
}

/* FORMAT_VALUE on a constant: str/repr/ascii, then format() with the spec (unused on 3.13) */
__attribute__((unused)) static int format_value(Interp *I, int flags) {
    Sv *spec = (flags & 0x04) ? sv_pop(I) : NULL;
    Sv *v = sv_pop(I);
    if (!v || ((flags & 0x04) && !spec)) return -1;
    if (v->kind != SV_CONST || !cap_is_plain(v->obj) || (spec && spec->kind != SV_CONST))
        return cap_unsupported(I, "f-string of a %s", sv_desc(v));
    PyObject *x = Py_NewRef(v->obj), *t;
    switch (flags & 3) {
    case 1: t = PyObject_Str(x); Py_DECREF(x); x = t; break;
    case 2: t = PyObject_Repr(x); Py_DECREF(x); x = t; break;
    case 3: t = PyObject_ASCII(x); Py_DECREF(x); x = t; break;
    }
    if (!x) return cap_py_failed(I, "f-string");
    PyObject *r = PyObject_Format(x, spec ? spec->obj : NULL);
    Py_DECREF(x);
    if (!r) return cap_py_failed(I, "f-string");
    return sv_push(I, sv_const_Steal(I, r));
}

static int build_string(Interp *I, int n) {
    if (n > I->f->sp) return cap_unsupported(I, "symbolic stack underflow");
    PyObject *parts = PyTuple_New(n);
    if (!parts) return cap_py_failed(I, "f-string");
    for (int i = 0; i < n; i++) {
        Sv *s = I->f->stack[I->f->sp - n + i];
        if (s->kind != SV_CONST || !PyUnicode_Check(s->obj)) {
            Py_DECREF(parts);
            return cap_unsupported(I, "building a string from a %s", sv_desc(s));
        }
        PyTuple_SET_ITEM(parts, i, Py_NewRef(s->obj));
    }
    PyObject *empty = PyUnicode_FromString("");
    PyObject *r = empty ? PyUnicode_Join(empty, parts) : NULL;
    Py_XDECREF(empty);
    Py_DECREF(parts);
    if (!r) return cap_py_failed(I, "f-string");
    I->f->sp -= n;
    return sv_push(I, sv_const_Steal(I, r));
}

/* import of a module that is already imported: the import system is not
 * run again, so nothing happens that capture would need to replay */
static int import_name(Interp *I, PyObject *name) {
    Sv *fromlist = sv_pop(I), *level = fromlist ? sv_pop(I) : NULL;
    if (!level) return -1;
    if (level->kind != SV_CONST || !PyLong_CheckExact(level->obj) || PyLong_AsLong(level->obj) != 0)
        return cap_unsupported(I, "relative import");
    PyObject *full = PyImport_GetModule(name);
    if (!full) return PyErr_Occurred() ? cap_py_failed(I, "import") : cap_unsupported(I, "import of a module not yet imported");
    int from = fromlist->kind == SV_CONST && fromlist->obj != Py_None;
    if (from) return sv_push(I, sv_const_Steal(I, full));
    Py_DECREF(full);
    PyObject *top = PyUnicode_Split(name, NULL, 1);
    (void)top;
    Py_XDECREF(top);
    Py_ssize_t dot = PyUnicode_FindChar(name, '.', 0, PyUnicode_GET_LENGTH(name), 1);
    PyObject *head = dot >= 0 ? PyUnicode_Substring(name, 0, dot) : Py_NewRef(name);
    PyObject *m = head ? PyImport_GetModule(head) : NULL;
    Py_XDECREF(head);
    if (!m) return cap_py_failed(I, "import");
    return sv_push(I, sv_const_Steal(I, m));
}

static int contains(Interp *I, int invert) {
    Sv *seq = sv_pop(I), *x = seq ? sv_pop(I) : NULL;
    if (!x) return -1;
    int found;
    if (cap_contains(I, seq, x, &found) < 0) return -1;
    return sv_push(I, sv_const(I, (found != invert) ? Py_True : Py_False));
}

#ifdef BINARY_SLICE
/* 3.12's BINARY_SLICE and STORE_SLICE take start and stop from the stack:
 * they become one slice constant on it, as 3.11's BUILD_SLICE gave. */
static int push_stack_slice(Interp *I) {
    Sv *stop = sv_pop(I), *start = stop ? sv_pop(I) : NULL;
    if (!start) return -1;
    if (start->kind != SV_CONST || stop->kind != SV_CONST) return cap_unsupported(I, "slice of symbolic values");
    PyObject *sl = PySlice_New(start->obj, stop->obj, NULL);
    return sl ? sv_push(I, sv_const_Steal(I, sl)) : cap_py_failed(I, "slice");
}
#endif

static int store_subscr(Interp *I) {
    Sv *k = sv_pop(I), *c = k ? sv_pop(I) : NULL, *v = c ? sv_pop(I) : NULL;
    if (!v) return -1;
    if (c->kind == SV_OPAQUE && cap_arg_list_expose(I, c) < 0) return -1;
    if (c->kind == SV_DICT) return cap_dict_set(I, c, k, v);
    if (c->kind == SV_LIST) return cap_seq_store(I, c, k, v);
    if (c->kind == SV_SCRATCH) return cap_scratch_setitem(I, c, k, v);
    if (c->kind == SV_OBJECT) return cap_userobj_setitem(I, c, k, v);
    if (c->kind == SV_TENSOR) { /* x[k] = v: operator.setitem, functional on a clone (vals/extern.c) */
        static PyObject *setitem;
        if (!setitem && !(setitem = PyObject_GetAttrString(cap_operator_mod, "setitem")))
            return cap_py_failed(I, "operator.setitem");
        Sv *ops[3] = {c, k, v};
        return cap_extern_call(I, setitem, "Tensor.__setitem__", ops, 3, NULL, NULL, 0) ? 0 : -1;
    }
    return cap_unsupported(I, "item assignment on a %s", sv_desc(c));
}

/* del c[k]: a dict (its key removed; an absent key is dict.pop's KeyError,
 * not modelled) or a list built during capture */
static int delete_subscr(Interp *I) {
    Sv *k = sv_pop(I), *c = k ? sv_pop(I) : NULL;
    if (!c) return -1;
    if (c->kind == SV_OPAQUE && cap_arg_list_expose(I, c) < 0) return -1;
    if (c->kind == SV_DICT) {
        Sv *pos[2] = {c, k};
        Args a = {pos, 2, NULL, NULL, 0};
        return cap_dict_method_call(I, "pop", &a) ? 0 : -1;
    }
    if (c->kind == SV_LIST) return cap_seq_delete(I, c, k);
    return cap_unsupported(I, "item deletion on a %s", sv_desc(c));
}

/* ---- the interpreter loop ------------------------------------------------------ */

#define MAX_STEPS 2000000 /* instructions interpreted per compile: unrolled loops end here */
/* loop iterations unrolled per frame: a longer loop (a huge range, a while
 * loop that goes on) is a failure a graph break gets around, at the loop
 * (its body compiled as a function of its own, loops.c) */
#define MAX_UNROLL 1024

/* Tests force internal errors: the n-th instruction interpreted by the next
 * compile raises (wick._C._inject_capture_error(n)). */
static long inject_at;

/* Runs frame I->f from instruction `start` (0, or an exception handler). */
static Sv *run(Interp *I, const Ins *ins, int n, int *ret_line, int start) {
    Frame *F = I->f;
    PyObject *consts = F->code->co_consts, *names = F->code->co_names;
    if (F->depth == 0 && start == 0) I->steps = 0;
    int next = start, prev = -1;
    for (int pc = start; pc < n; prev = pc, pc = next) {
        const Ins *in = &ins[pc];
        if (pc <= prev && ++F->back_jumps > MAX_UNROLL) {
            cap_unsupported(I, "a loop of more than %d iterations (not unrolled)", MAX_UNROLL);
            return NULL;
        }
        next = pc + 1;
        F->pc = pc;
        I->next_op = pc + 1 < n ? ins[pc + 1].op : -1;
        int arg = in->arg;
        if (in->line >= 0) F->line = in->line;
        if (F->depth == 0) { /* graph breaks count the compiled frame's instructions */
            if (!I->effect_step && cap_break_effect_seen(I)) {
                I->effect_step = I->top_steps;
                I->effect_pc = I->top_pc;
            }
            if (I->stop_step && I->top_steps == I->stop_step) {
                I->stopped = 1;
                I->top_pc = pc;
                return NULL;
            }
            I->top_steps++;
            I->top_pc = pc;
            cap_break_note_step(I, pc);
        }
        if (++I->steps > MAX_STEPS) {
            I->no_break = 1;
            cap_unsupported(I, "more than %d instructions interpreted (a long unrolled loop)", MAX_STEPS);
            return NULL;
        }
        if (inject_at && I->steps == inject_at) {
            inject_at = 0;
            I->no_break = 1;
            PyErr_SetString(PyExc_SystemError, "wick: injected internal capture error");
            cap_py_failed(I, "capture");
            return NULL;
        }
        if ((I->steps & 1023) == 0 && PyErr_CheckSignals() < 0) {
            cap_py_failed(I, "signal");
            return NULL;
        }
        int rc = 0;
        switch (in->op) {
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
            if (arg >= F->nlocals || !F->locals[arg]) {
                rc = cap_unsupported(I, "read of an unbound local");
                break;
            }
            if (F->depth == 0 && arg < 64) I->loaded_args |= 1ull << arg;
            rc = sv_push(I, F->locals[arg]);
            break;
#ifdef LOAD_FAST_AND_CLEAR
        case LOAD_FAST_AND_CLEAR: /* 3.12 inlined comprehensions save the outer binding */
            rc = sv_push(I, F->locals[arg] ? F->locals[arg] : I->null_sv);
            F->locals[arg] = NULL;
            break;
#endif
        case STORE_FAST: {
            Sv *v = sv_pop(I);
            if (!v) return NULL;
            if (arg >= F->nlocals) {
                rc = cap_unsupported(I, "STORE_FAST out of range");
                break;
            }
            F->locals[arg] = v->kind == SV_NULL ? NULL : v;
            break;
        }
        case DELETE_FAST:
            F->locals[arg] = NULL;
            break;
        case LOAD_CONST:
            rc = sv_push(I, sv_const(I, PyTuple_GET_ITEM(consts, arg)));
            break;
        case RETURN_VALUE:
            *ret_line = F->line;
            return sv_pop(I);
#ifdef RETURN_CONST
        case RETURN_CONST:
            *ret_line = F->line;
            return sv_const(I, PyTuple_GET_ITEM(consts, arg));
#endif
        case POP_TOP:
            rc = sv_pop(I) ? 0 : -1;
            break;
#ifdef END_FOR
        case END_FOR:
            rc = sv_pop(I) && sv_pop(I) ? 0 : -1;
            break;
#endif
        case PUSH_NULL:
            rc = sv_push(I, I->null_sv);
            break;
        case COPY: {
            Sv *v = sv_peek(I, arg);
            rc = v ? sv_push(I, v) : -1;
            break;
        }
        case SWAP: {
            if (arg < 1 || arg > F->sp) {
                rc = cap_unsupported(I, "SWAP underflow");
                break;
            }
            Sv *t = F->stack[F->sp - 1];
            F->stack[F->sp - 1] = F->stack[F->sp - arg];
            F->stack[F->sp - arg] = t;
            break;
        }
        case N_LOAD_GLOBAL: {
            Sv *g = cap_load_written_global(I, PyTuple_GET_ITEM(names, arg));
            if (!g) g = global_sv(I, PyTuple_GET_ITEM(names, arg));
            if (!g) return NULL;
            if (in->flag) rc = sv_push(I, I->null_sv);
            if (!rc) rc = sv_push(I, g);
            break;
        }
        case N_LOAD_ATTR:
            rc = load_attr(I, PyTuple_GET_ITEM(names, arg), in->flag);
            break;
#ifdef KW_NAMES
        case KW_NAMES:
            F->kwnames = PyTuple_GET_ITEM(consts, arg);
            break;
#endif
        case CALL:
            rc = do_call(I, arg);
            break;
        case CALL_FUNCTION_EX:
            rc = call_ex(I, arg);
            break;
        case BINARY_OP: {
            Sv *y = sv_pop(I), *x = y ? sv_pop(I) : NULL;
            if (!x) return NULL;
            Sv *r = cap_binary(I, arg, x, y);
            rc = r ? sv_push(I, r) : -1;
            break;
        }
        case N_COMPARE: {
            Sv *y = sv_pop(I), *x = y ? sv_pop(I) : NULL;
            if (!x) return NULL;
            Sv *r = compare(I, arg, x, y);
            rc = r ? sv_push(I, r) : -1;
            break;
        }
        case UNARY_NOT: {
            Sv *x = sv_pop(I);
            int t;
            if (!x) return NULL;
            if ((rc = cap_truth(I, x, &t)) < 0) break;
            rc = sv_push(I, sv_const(I, t ? Py_False : Py_True));
            break;
        }
        case UNARY_NEGATIVE:
        case UNARY_INVERT:
#ifdef UNARY_POSITIVE
        case UNARY_POSITIVE:
#endif
        {
            Sv *x = sv_pop(I);
            if (!x) return NULL;
            const SvOps *ops = SV_OPS(x);
            Sv *r = ops->unary ? ops->unary(I, in->op, x) : NULL;
            if (!r && !CAP_FAILED(I)) cap_unsupported(I, "%s on %s", wk_bc_opname(in->op), sv_desc(x));
            rc = r ? sv_push(I, r) : -1;
            break;
        }
        case IS_OP:
            rc = is_op(I, arg & 1);
            break;
        case CONTAINS_OP:
            rc = contains(I, arg & 1);
            break;
        case BEFORE_WITH:
            rc = cap_before_with(I, pc + 1 < n && ins[pc + 1].op == POP_TOP);
            break;
        case N_JUMP:
            next = in->target;
            break;
        case N_POP_JUMP_IF_FALSE:
        case N_POP_JUMP_IF_TRUE:
        case N_POP_JUMP_IF_NONE:
        case N_POP_JUMP_IF_NOT_NONE: {
            Sv *c = sv_pop(I);
            if (!c) return NULL;
            int take;
            if (in->op == N_POP_JUMP_IF_NONE || in->op == N_POP_JUMP_IF_NOT_NONE) {
                if (c->kind == SV_NULL) {
                    rc = cap_unsupported(I, "branch on NULL");
                    break;
                }
                int none = c->kind == SV_CONST && c->obj == Py_None;
                take = (in->op == N_POP_JUMP_IF_NONE) == none;
            } else {
                int t;
                if ((rc = cap_truth(I, c, &t)) < 0) break;
                take = (in->op == N_POP_JUMP_IF_TRUE) == t;
            }
            if (take) next = in->target;
            break;
        }
        case N_JUMP_IF_FALSE_OR_POP:
        case N_JUMP_IF_TRUE_OR_POP: {
            Sv *c = sv_peek(I, 1);
            int t;
            if (!c) return NULL;
            if ((rc = cap_truth(I, c, &t)) < 0) break;
            if ((in->op == N_JUMP_IF_TRUE_OR_POP) == t) next = in->target;
            else F->sp--;
            break;
        }
        case GET_ITER: {
            Sv *s = sv_pop(I);
            if (!s) return NULL;
            if (s->kind == SV_ITER) {
                rc = sv_push(I, s);
                break;
            }
            SvList items = {0};
            if ((rc = cap_iterate(I, s, &items)) < 0) {
                wk_vec_free(&items);
                break;
            }
            Sv *it = sv_seq(I, SV_ITER, items.data, items.len);
            wk_vec_free(&items);
            rc = cap_set_link_iter(I, it, &s, 1);
            cap_list_link_iter(it, &s, 1);
            if (rc == 0) rc = sv_push(I, it);
            break;
        }
        case GET_YIELD_FROM_ITER: {
            /* `yield from x` as a statement in an inlined generator (nn.Module.
             * named_modules): x's items are yielded now, in order, as the
             * generator runs to its end; the loop CPython compiles after it
             * (LOAD_CONST None; SEND end; YIELD_VALUE ...; end: [END_SEND]
             * POP_TOP) is skipped with its value, None for anything capture
             * iterates, discarded */
            Sv *s = sv_pop(I);
            if (!s) return NULL;
            int end = pc + 2 < n && ins[pc + 1].op == LOAD_CONST && ins[pc + 2].op == SEND ? ins[pc + 2].target : -1;
#if PY312
            if (end >= 0 && end < n && ins[end].op == END_SEND) end++;
#endif
            if (!F->is_generator) {
                rc = cap_unsupported(I, "yield from in a frame that is not an inlined generator");
                break;
            }
            if (end < 0 || end >= n || ins[end].op != POP_TOP) {
                rc = cap_unsupported(I, "yield from whose value is used");
                break;
            }
            if (s->kind == SV_ITER) {
                if ((rc = cap_set_iter_check(I, s)) < 0 || (rc = cap_list_iter_check(I, s)) < 0) break;
                for (Py_ssize_t i = s->value; i < s->items.len; i++) wk_vec_push(&F->yields, s->items.data[i]);
                s->value = (int)s->items.len; /* consumed, as the real iterator would be */
            } else {
                SvList items = {0};
                if ((rc = cap_iterate(I, s, &items)) == 0)
                    for (Py_ssize_t i = 0; i < items.len; i++) wk_vec_push(&F->yields, items.data[i]);
                wk_vec_free(&items);
                if (rc < 0) break;
            }
            next = end + 1;
            break;
        }
        case N_FOR_ITER: {
            Sv *it = sv_peek(I, 1);
            if (!it) return NULL;
            if (it->kind != SV_ITER) {
                rc = cap_unsupported(I, "for over a %s", sv_desc(it));
                break;
            }
            if ((rc = cap_set_iter_check(I, it)) < 0 || (rc = cap_list_iter_check(I, it)) < 0) break;
            if (it->value < it->items.len) {
                rc = sv_push(I, it->items.data[it->value++]);
            } else {
                F->sp--;
                next = in->target;
            }
            break;
        }
        case BUILD_TUPLE:
        case BUILD_LIST: {
            if (arg > F->sp) {
                rc = cap_unsupported(I, "symbolic stack underflow");
                break;
            }
            Sv *t = sv_seq(I, in->op == BUILD_TUPLE ? SV_TUPLE : SV_LIST, &F->stack[F->sp - arg], arg);
            F->sp -= arg;
            rc = sv_push(I, t);
            break;
        }
        case N_LIST_TO_TUPLE: {
            Sv *l = sv_pop(I);
            if (!l) return NULL;
            SvList items = {0};
            if ((rc = cap_iterate(I, l, &items)) == 0) rc = sv_push(I, sv_seq(I, SV_TUPLE, items.data, items.len));
            wk_vec_free(&items);
            break;
        }
        case LIST_EXTEND:
        case LIST_APPEND: {
            Sv *v = sv_pop(I), *list = v ? sv_peek(I, arg) : NULL;
            if (!list) return NULL;
            if (list->kind != SV_LIST) {
                rc = cap_unsupported(I, "list.extend of a %s", sv_desc(list));
                break;
            }
            cap_list_changed(list);
            if (in->op == LIST_APPEND) wk_vec_push(&list->items, v);
            else rc = cap_iterate(I, v, &list->items);
            break;
        }
        case BUILD_SET: {
            if (arg > F->sp) {
                rc = cap_unsupported(I, "symbolic stack underflow");
                break;
            }
            Sv *set = cap_set_new(I);
            for (int i = F->sp - arg; set && i < F->sp; i++) /* added bottom first, as CPython does */
                if (cap_set_add(I, set, F->stack[i]) < 0) set = NULL;
            F->sp -= arg;
            rc = set ? sv_push(I, set) : -1;
            break;
        }
        case SET_ADD:
        case SET_UPDATE: {
            Sv *v = sv_pop(I), *set = v ? sv_peek(I, arg) : NULL;
            if (!set) return NULL;
            if (set->kind != SV_SET) {
                rc = cap_unsupported(I, "%s on a %s", wk_bc_opname(in->op), sv_desc(set));
                break;
            }
            rc = in->op == SET_ADD ? cap_set_add(I, set, v) : cap_set_update(I, set, v);
            break;
        }
        case BUILD_MAP: {
            if (2 * arg > F->sp) {
                rc = cap_unsupported(I, "symbolic stack underflow");
                break;
            }
            Sv *d = cap_dict_new(I);
            for (int i = 0; d && i < arg && !rc; i++)
                rc = cap_dict_set(I, d, F->stack[F->sp - 2 * arg + 2 * i], F->stack[F->sp - 2 * arg + 2 * i + 1]);
            if (!d || rc) break;
            F->sp -= 2 * arg;
            rc = sv_push(I, d);
            break;
        }
        case BUILD_CONST_KEY_MAP: {
            Sv *keys = sv_pop(I);
            if (!keys) return NULL;
            if (keys->kind != SV_CONST || !PyTuple_Check(keys->obj) || PyTuple_GET_SIZE(keys->obj) != arg ||
                arg > F->sp) {
                rc = cap_unsupported(I, "BUILD_CONST_KEY_MAP keys");
                break;
            }
            Sv *d = cap_dict_new(I);
            for (int i = 0; d && i < arg && !rc; i++)
                rc = cap_dict_set(I, d, sv_const(I, PyTuple_GET_ITEM(keys->obj, i)), F->stack[F->sp - arg + i]);
            if (!d || rc) break;
            F->sp -= arg;
            rc = sv_push(I, d);
            break;
        }
        case MAP_ADD: {
            Sv *v = sv_pop(I), *k = v ? sv_pop(I) : NULL, *d = k ? sv_peek(I, arg) : NULL;
            if (!d) return NULL;
            rc = cap_dict_set(I, d, k, v);
            break;
        }
        case DICT_MERGE:
        case DICT_UPDATE: {
            Sv *u = sv_pop(I), *d = u ? sv_peek(I, arg) : NULL;
            if (!d) return NULL;
            if (d->kind != SV_DICT) {
                rc = cap_unsupported(I, "dict update of a %s", sv_desc(d));
                break;
            }
            rc = cap_dict_update(I, d, u);
            break;
        }
        case BUILD_SLICE: {
            Sv *step = arg == 3 ? sv_pop(I) : NULL, *stop = sv_pop(I), *start = stop ? sv_pop(I) : NULL;
            if (!start) return NULL;
            if (start->kind != SV_CONST || stop->kind != SV_CONST || (step && step->kind != SV_CONST)) {
                rc = cap_unsupported(I, "slice of symbolic values");
                break;
            }
            PyObject *sl = PySlice_New(start->obj, stop->obj, step ? step->obj : NULL);
            rc = sl ? sv_push(I, sv_const_Steal(I, sl)) : cap_py_failed(I, "slice");
            break;
        }
        case UNPACK_SEQUENCE: {
            Sv *s = sv_pop(I);
            rc = s ? unpack(I, s, arg, 0, 0) : -1;
            break;
        }
        case UNPACK_EX: {
            Sv *s = sv_pop(I);
            rc = s ? unpack(I, s, arg & 0xFF, arg >> 8, 1) : -1;
            break;
        }
        case BINARY_SUBSCR:
            rc = subscript(I);
            break;
#ifdef BINARY_SLICE
        case BINARY_SLICE: /* 3.12: container[start:stop] */
            rc = push_stack_slice(I);
            if (rc == 0) rc = subscript(I);
            break;
        case STORE_SLICE: /* 3.12: container[start:stop] = value */
            rc = push_stack_slice(I);
            if (rc == 0) rc = store_subscr(I);
            break;
#endif
#ifdef LOAD_SUPER_ATTR
        case LOAD_SUPER_ATTR: { /* 3.12: super().name with the stack [super, __class__, self] */
            Sv *self = sv_pop(I), *cls = self ? sv_pop(I) : NULL, *sup = cls ? sv_pop(I) : NULL;
            if (!sup) return NULL;
            if (sup->kind != SV_CONST || sup->obj != (PyObject *)&PySuper_Type || cls->kind != SV_CONST ||
                !PyType_Check(cls->obj)) {
                rc = cap_unsupported(I, "super() that is not the builtin or without a class");
                break;
            }
            Sv *sv = sv_new(I, SV_SUPER);
            sv->obj = Py_NewRef(cls->obj);
            sv->self = self;
            if ((rc = sv_push(I, sv)) == 0) rc = load_attr(I, PyTuple_GET_ITEM(names, arg >> 2), arg & 1);
            break;
        }
#endif
        case STORE_SUBSCR:
            rc = store_subscr(I);
            break;
        case DELETE_SUBSCR:
            rc = delete_subscr(I);
            break;
        case STORE_GLOBAL: { /* replayed after the graph (breaks.c) */
            Sv *v = sv_pop(I);
            rc = v ? cap_store_global(I, PyTuple_GET_ITEM(names, arg), v) : -1;
            break;
        }
#ifdef FORMAT_VALUE /* 3.13 spells f-strings differently; capture supports 3.11 and 3.12 */
        case FORMAT_VALUE:
            rc = format_value(I, arg);
            break;
#endif
        case BUILD_STRING:
            rc = build_string(I, arg);
            break;
        case MAKE_FUNCTION:
            rc = cap_make_function(I, arg);
            break;
        case MAKE_CELL:
            if (F->depth == 0 && arg < 64) I->loaded_args |= 1ull << arg;
            rc = cap_make_cell(I, arg);
            break;
        case COPY_FREE_VARS:
            rc = cap_copy_free_vars(I, arg);
            break;
        case LOAD_DEREF:
            rc = cap_deref_load(I, arg);
            break;
        case STORE_DEREF:
            rc = cap_deref_store(I, arg);
            break;
#if PY_VERSION_HEX < 0x030D0000 /* 3.13: LOAD_CLOSURE is a pseudo-op assembled as LOAD_FAST */
        case LOAD_CLOSURE:
            if (arg >= F->nlocals || !F->locals[arg] || F->locals[arg]->kind != SV_CELL) {
                rc = cap_unsupported(I, "LOAD_CLOSURE of a cell not set up");
                break;
            }
            rc = sv_push(I, F->locals[arg]);
            break;
#endif
        case IMPORT_NAME:
            rc = import_name(I, PyTuple_GET_ITEM(names, arg));
            break;
        case IMPORT_FROM: {
            Sv *m = sv_peek(I, 1);
            if (!m) return NULL;
            if (m->kind != SV_CONST || !PyModule_Check(m->obj)) {
                rc = cap_unsupported(I, "import from a %s", sv_desc(m));
                break;
            }
            PyObject *v = PyObject_GetAttr(m->obj, PyTuple_GET_ITEM(names, arg));
            rc = v ? sv_push(I, sv_const_Steal(I, v)) : cap_py_failed(I, "import");
            break;
        }
        case STORE_ATTR:
        case DELETE_ATTR: {
            Sv *o = sv_pop(I), *v = NULL;
            if (!o) return NULL;
            if (in->op == STORE_ATTR && !(v = sv_pop(I))) return NULL;
            if (o->kind == SV_OBJECT) rc = cap_userobj_setattr(I, o, PyTuple_GET_ITEM(names, arg), v);
            else if (o->kind == SV_SCRATCH) rc = cap_scratch_setattr(I, o, PyTuple_GET_ITEM(names, arg), v);
            else rc = cap_object_setattr(I, o, PyTuple_GET_ITEM(names, arg), v);
            break;
        }
        case RETURN_GENERATOR: /* the generator starts: the first send() value */
            if (!F->is_generator) {
                rc = cap_unsupported(I, "a generator frame compiled directly");
                break;
            }
            rc = sv_push(I, sv_const(I, Py_None));
            break;
        case YIELD_VALUE: {
            Sv *v = sv_pop(I);
            if (!v) return NULL;
            if (!F->is_generator) {
                rc = cap_unsupported(I, "yield in a frame that is not an inlined generator");
                break;
            }
            wk_vec_push(&F->yields, v);
            rc = sv_push(I, sv_const(I, Py_None)); /* what next() sends */
            break;
        }
        case LOAD_ASSERTION_ERROR:
            rc = sv_push(I, sv_const(I, PyExc_AssertionError));
            break;
        case RAISE_VARARGS:
            rc = cap_raise_varargs(I, arg);
            break;
        case PUSH_EXC_INFO:
            rc = cap_push_exc_info(I);
            break;
        case POP_EXCEPT:
            rc = cap_pop_except(I);
            break;
        case CHECK_EXC_MATCH:
            rc = cap_check_exc_match(I);
            break;
        case RERAISE:
            rc = cap_reraise(I);
            break;
        case WITH_EXCEPT_START:
            rc = cap_with_except_start(I);
            break;
        default:
            rc = cap_unsupported(I, "unsupported opcode %s", wk_bc_opname(in->op));
            break;
        }
        if (rc == 0 && I->exc && !I->reason) /* a handler went on past a raise: never guess */
            cap_unsupported(I, "internal: an exception raised inside %s was dropped", wk_bc_opname(in->op));
        if (rc < 0 || I->reason || I->propagate) return NULL;
    }
    cap_unsupported(I, "frame ends without a return");
    return NULL;
}

Sv *cap_run_frame(Interp *I, Frame *f, int *ret_line) {
    int nraw = 0;
    WkInstr *raw = wk_bc_decode(f->code, &nraw);
    if (!raw) return cap_py_failed(I, "decoding bytecode"), NULL;
    Frame *caller = I->f;
    I->f = f;
    Ins *ins = normalise(I, raw, nraw);
    if (!ins || cap_exc_table(I, f, raw, nraw) < 0) {
        free(raw);
        free(ins);
        return NULL;
    }
    free(raw);
    Sv *res;
    int start = 0;
    /* an exception raised inside: run again from its handler (vals/exc.c) */
    while (!(res = run(I, ins, nraw, ret_line, start)) && !I->stopped && cap_exc_unwind(I, &start) > 0) {}
    free(ins);
    if (!res && I->exc && !I->reason && !I->propagate) {
        if (f->is_generator || f->depth == 0) /* the generator ran ahead of its consumer; or uncaught */
            cap_unsupported(I, "%s%s", I->exc_where ? I->exc_where : "an exception",
                            f->depth ? " inside an inlined generator" : ", not caught inside the frame");
        else
            I->f = caller; /* the caller looks up its handler for the call */
    }
    if (res) I->f = caller; /* on failure stay at the failing frame: the reason is there */
    return res;
}

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

/* An Sv for `o`, found at argument arg + path (path: attribute names and
 * (key,) items), with the guards that make it what capture sees. Tuples
 * and dicts of str keys become symbolic containers whose items have their
 * own sources. *any_grad is set for tensors that require grad. */
static Sv *source_sv(Interp *I, PyObject *o, int arg, PyObject *path, int lazy_const, int *any_grad, int depth) {
    Sv *s;
    if (cap_is_tensor_obj(o)) {
        PyObject *layout = PyObject_GetAttr(o, cap_s_layout);
        int strided = layout == cap_strided_layout;
        Py_XDECREF(layout);
        if (!layout) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) return cap_py_failed(I, "argument"), NULL;
            PyErr_Clear();
        }
        wk_guard_tensor_at(I->guards, arg, path, o);
        if (strided) {
            s = sv_new(I, SV_TENSOR);
            PyObject *rg = PyObject_GetAttr(o, cap_s_requires_grad);
            if (!rg) return cap_py_failed(I, "requires_grad"), NULL;
            *any_grad |= rg == Py_True;
            Py_DECREF(rg);
        } else {
            s = sv_new(I, SV_OPAQUE);
        }
    } else if (o == Py_None || cap_is_number(o) || PyUnicode_CheckExact(o) ||
               (cap_dtype_type && Py_TYPE(o) == (PyTypeObject *)cap_dtype_type) ||
               ((PyTuple_CheckExact(o) || (cap_size_type && Py_TYPE(o) == (PyTypeObject *)cap_size_type)) &&
                cap_is_plain(o))) {
        /* guarded by value only if the frame reads it (finish_arg_guards);
         * a torch.Size (x.shape[:-1] handed to a helper, or live across a
         * graph break into the resume function) is a tuple of ints too */
        wk_guard_type_at(I->guards, arg, path, Py_TYPE(o));
        if (lazy_const && arg < 64) I->lazy_args |= 1ull << arg;
        else wk_guard_equals_at(I->guards, arg, path, o);
        s = sv_new(I, SV_CONST);
    } else if ((PyTuple_CheckExact(o) || PyDict_CheckExact(o)) && depth < 4 && PyObject_Length(o) <= 64) {
        /* the container's shape is guarded; each item is a source of its own */
        int dict = PyDict_CheckExact(o);
        PyObject *keys = dict ? PyDict_Keys(o) : NULL;
        if (dict && !keys) return cap_py_failed(I, "argument"), NULL;
        PyObject *shape = dict ? PyList_AsTuple(keys) : PyLong_FromSsize_t(PyTuple_GET_SIZE(o));
        if (!shape) {
            Py_XDECREF(keys);
            return cap_py_failed(I, "argument"), NULL;
        }
        wk_guard_shape_at(I->guards, arg, path, o, shape);
        s = dict ? cap_dict_new(I) : sv_new(I, SV_TUPLE);
        Py_ssize_t n = dict ? PyList_GET_SIZE(keys) : PyTuple_GET_SIZE(o);
        for (Py_ssize_t i = 0; s && i < n; i++) {
            PyObject *key = dict ? PyList_GET_ITEM(keys, i) : NULL;
            if (dict && !PyUnicode_CheckExact(key)) {
                cap_unsupported(I, "a dict argument with non-str keys");
                s = NULL;
                break;
            }
            PyObject *item = dict ? PyDict_GetItem(o, key) : PyTuple_GET_ITEM(o, i);
            PyObject *k = dict ? Py_NewRef(key) : PyLong_FromSsize_t(i);
            PyObject *sub = k ? cap_path_item_Ref(path, k) : NULL;
            Py_XDECREF(k);
            if (!sub) {
                cap_py_failed(I, "argument");
                s = NULL;
                break;
            }
            Sv *is = source_sv(I, item, arg, sub, 0, any_grad, depth + 1);
            if (is && is->kind != SV_DICT) {
                is->obj = Py_NewRef(item);
                is->arg = arg;
                is->path = Py_NewRef(sub);
            }
            Py_DECREF(sub);
            if (!is) {
                s = NULL;
                break;
            }
            if (dict) {
                if (PyList_Append(s->obj, key) < 0) {
                    cap_py_failed(I, "argument");
                    s = NULL;
                    break;
                }
                wk_vec_push(&s->items, is);
            } else {
                wk_vec_push(&s->items, is);
            }
        }
        Py_XDECREF(keys);
        Py_DECREF(shape);
        if (!s) return NULL;
        /* a dict Sv keeps its key list in obj: the object itself is not kept */
        if (dict) {
            s->arg = -1;
            return s;
        }
    } else {
        wk_guard_type_at(I->guards, arg, path, Py_TYPE(o));
        s = sv_new(I, SV_OPAQUE);
    }
    return s;
}

Sv *cap_source_item(Interp *I, PyObject *o, int arg, PyObject *path) {
    int any_grad = 0;
    Sv *s = source_sv(I, o, arg, path, 0, &any_grad, 1);
    if (!s) return NULL;
    if (any_grad) wk_guard_grad_mode(I->guards, I->entry_grad);
    if (s->kind != SV_DICT) {
        s->obj = Py_NewRef(o);
        s->arg = arg;
        s->path = Py_XNewRef(path);
    }
    return s;
}

Sv *cap_source_dict(Interp *I, PyObject *d, int arg, PyObject *path) {
    int any_grad = 0;
    Sv *s = source_sv(I, d, arg, path, 0, &any_grad, 1);
    if (!s) return NULL;
    if (any_grad) wk_guard_grad_mode(I->guards, I->entry_grad);
    s->arg = arg;
    s->path = Py_XNewRef(path);
    return s;
}

/* Guards every argument so the entry applies to calls with this input
 * signature; classifies arguments into Svs. */
static int setup_args(Interp *I) {
    int any_grad = 0;
    wk_guards_set_arg_names(I->guards, I->argnames);
    for (int i = 0; i < I->nargs; i++) {
        PyObject *o = I->args[i];
        if (!o) continue;
        Sv *s = source_sv(I, o, i, NULL, 1, &any_grad, 0);
        if (!s) return -1;
        if (s->kind != SV_DICT) {
            s->obj = Py_NewRef(o);
            s->arg = i;
        }
        if (i < I->f->nlocals) I->f->locals[i] = s;
    }
    if (any_grad) wk_guard_grad_mode(I->guards, I->entry_grad);
    return 0;
}

/* Value guards on the constant arguments the frame read: an argument it
 * never loads (an unused int) does not pin its value. */
static void finish_arg_guards(Interp *I) {
    for (int i = 0; i < I->nargs && i < 64; i++)
        if ((I->lazy_args & (1ull << i)) && (I->loaded_args & (1ull << i)) && I->args[i])
            wk_guard_equals(I->guards, i, I->args[i]);
}

static PyObject *fallback_info_Ref(Interp *I) {
    PyObject *guards = I->guards ? wk_guards_describe_Ref(I->guards) : NULL;
    if (!guards) PyErr_Clear();
    int ops = 0; /* captured before the failure: "ops_seen" */
    for (int i = 0; I->g && i < wk_graph_nnodes(I->g); i++) ops += wk_graph_node(I->g, i)->op != WK_OP_SCALAR;
    PyObject *r = Py_BuildValue("{s:s,s:O,s:i,s:i,s:O,s:O,s:O,s:i,s:i}", "reason", I->reason, "file",
                                I->f->code->co_filename, "line", I->f->line, "graph_count", 0, "graph", Py_None,
                                "source", Py_None, "guards", guards ? guards : Py_None, "op_count", 0,
                                "ops_seen", ops);
    Py_XDECREF(guards);
    return r;
}

/* The graph as an FX GraphModule compiled by `backend` (a torch.compile
 * backend; None: wick's own through AOTAutograd, for graphs that need
 * autograd). Extern nodes and the grad mode of nodes inside no_grad blocks
 * travel with it. */
/* A graph wick compiles whose convolutions should run channels-last
 * (WICK_CHANNELS_LAST: "auto" for graphs on CUDA, "1" on any device, "0"
 * never): wick/_graph_layout.py rewrites it and it compiles natively
 * (graph_layout_Ref); where that pass gives it up, or WICK_LAYOUT_PASS=fx,
 * it goes through AOTAutograd and the ATen importer like a torch.compile
 * graph, where wick/_layout.py rewrites the layout and batch norm
 * decomposes into kernels that fuse with their neighbours. */
static int conv_graph_for_layout(const WkGraph *g) {
    const char *knob = wk_env_str(WK_ENV_CHANNELS_LAST);
    if (!strcmp(knob, "0")) return 0;
    int any_device = !strcmp(knob, "1"), cuda = 0, conv = 0;
    for (int i = 0; i < wk_graph_ninputs(g); i++)
        cuda |= wk_graph_value(g, wk_graph_input_value(g, i))->device.type == WK_DEV_CUDA;
    for (int n = 0; n < wk_graph_nnodes(g); n++) {
        const WkNode *node = wk_graph_node(g, n);
        /* torch.conv2d, or aten.convolution where capture models conv2d's arguments */
        if (node->op == WK_OP_EXTERN && node->extern_name &&
            (strstr(node->extern_name, "conv2d") || strstr(node->extern_name, "convolution")) &&
            node->ninputs > 0 && wk_graph_value(g, node->inputs[0])->ndim == 4)
            conv = 1;
    }
    return conv && (cuda || any_device);
}

/* The inputs the transformed code copies a graph output into after the
 * graph (COPY effects): a list of (input position, output position), which
 * wick's backend uses to make such writes mutations of the graph's inputs
 * (backends.to_fx, written). New reference, or NULL with an exception. */
static PyObject *written_outputs_Ref(const WkEffects *effects) {
    PyObject *pairs = PyList_New(0);
    for (int i = 0; pairs && effects && i < effects->n; i++) {
        const WkEffect *e = &effects->items[i];
        if (e->kind != WK_EFFECT_COPY || !e->target || e->target->kind != WK_RET_WRITTEN || !e->value ||
            e->value->kind != WK_RET_OUTPUT || e->target->index < 0 || e->target->index >= effects->nwritten)
            continue;
        PyObject *pair = Py_BuildValue("(ii)", effects->written[e->target->index], e->value->index);
        if (!pair || PyList_Append(pairs, pair) < 0) Py_CLEAR(pairs);
        Py_XDECREF(pair);
    }
    return pairs;
}

/* options (the compile options, or NULL): mode="reduce-overhead" is passed on
 * to wick's backend (CUDA graphs of an inference graph, or of a training
 * graph's forward and backward). effects: the writes the transformed code makes after
 * the graph. */
static PyObject *compile_with_backend_Ref(Interp *I, PyObject *backend, WkGraph **g, PyObject *options,
                                          const WkEffects *effects) {
    PyObject *mod = PyImport_ImportModule("wick.backends");
    if (!mod) return NULL;
    PyObject *no_grad = PyList_New(0);
    for (int v = 0; no_grad && v < wk_graph_nvalues(*g); v++) {
        if (!cap_get_no_grad(I, v)) continue;
        PyObject *x = PyLong_FromLong(v);
        if (!x || PyList_Append(no_grad, x) < 0) Py_CLEAR(no_grad);
        Py_XDECREF(x);
    }
    PyObject *written = no_grad ? written_outputs_Ref(effects) : NULL;
    PyObject *graph_obj = written ? wk_rt_graph_wrap_Steal(*g) : NULL;
    if (graph_obj) *g = NULL;
    PyObject *examples = graph_obj ? PyList_New(I->input_tensors.len) : NULL;
    PyObject *fn = examples ? PyObject_GetAttrString(mod, "compile_graph_with") : NULL;
    PyObject *res = NULL;
    if (fn) {
        for (int i = 0; i < I->input_tensors.len; i++)
            PyList_SET_ITEM(examples, i, Py_NewRef(I->input_tensors.data[i]));
        PyObject *mode = options && PyDict_Check(options) ? PyDict_GetItemString(options, "mode") : NULL;
        PyObject *externs = I->externs ? I->externs : Py_None, *entry_grad = I->entry_grad ? Py_True : Py_False;
        PyObject *args = PyTuple_Pack(6, backend ? backend : Py_None, graph_obj, examples, externs, no_grad,
                                      entry_grad);
        PyObject *kwargs = args ? Py_BuildValue("{s:O}", "written", written) : NULL;
        if (kwargs && mode && mode != Py_None && PyDict_SetItemString(kwargs, "mode", mode) < 0) Py_CLEAR(kwargs);
        if (kwargs) res = PyObject_Call(fn, args, kwargs);
        Py_XDECREF(args);
        Py_XDECREF(kwargs);
    }
    Py_XDECREF(fn);
    Py_XDECREF(written);
    Py_XDECREF(no_grad);
    Py_XDECREF(examples);
    Py_XDECREF(graph_obj);
    Py_DECREF(mod);
    return res;
}

/* A convolutional inference graph rewritten for channels-last on the graph
 * itself (wick/_graph_layout.py: eval batch norms as kernels, NHWC-ordered
 * pointwise work), to compile natively: a new reference to the tuple
 * (Graph, extern table) to compile, or NULL (no exception set) where the
 * pass is off or gives the graph up, and the ATen path takes it (the reason
 * logged). */
static PyObject *graph_layout_Ref(const WkGraph *g, PyObject *externs, const char *where) {
    if (!strcmp(wk_env_str(WK_ENV_LAYOUT_PASS), "fx") || !externs || externs == Py_None) return NULL;
    int nvalues = wk_graph_nvalues(g);
    int *map = PyMem_Calloc((size_t)nvalues + 1, sizeof *map);
    WkGraph *copy = map ? wk_graph_copy(g, NULL, NULL, map) : NULL;
    PyMem_Free(map);
    if (!copy) {
        wk_log(WK_LOG_GRAPHS, "channels-last pass of %s not run: %s", where, wk_error_get());
        PyErr_Clear();
        return NULL;
    }
    PyObject *graph_obj = wk_rt_graph_wrap_Steal(copy);
    PyObject *mod = graph_obj ? PyImport_ImportModule("wick._graph_layout") : NULL;
    PyObject *res = mod ? PyObject_CallMethod(mod, "apply", "OO", graph_obj, externs) : NULL;
    PyObject *out = NULL;
    if (res && PyTuple_Check(res) && PyTuple_GET_SIZE(res) == 3 && wk_rt_graph_unwrap_Borrow(PyTuple_GET_ITEM(res, 0)) &&
        PyList_Check(PyTuple_GET_ITEM(res, 1))) {
        out = PyTuple_Pack(2, PyTuple_GET_ITEM(res, 0), PyTuple_GET_ITEM(res, 1));
        if (wk_log_on(WK_LOG_GRAPHS)) {
            PyObject *why = PyTuple_GET_ITEM(res, 2);
            const char *note = PyUnicode_Check(why) ? PyUnicode_AsUTF8(why) : NULL;
            wk_log(WK_LOG_GRAPHS, "graph of %s compiled natively, %s", where, note ? note : "channels-last");
        }
    } else if (wk_log_on(WK_LOG_GRAPHS) || wk_log_on(WK_LOG_BREAKS)) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyObject *text = value ? PyObject_Str(value) : NULL;
        const char *msg = text ? PyUnicode_AsUTF8(text) : NULL;
        wk_log(wk_log_on(WK_LOG_GRAPHS) ? WK_LOG_GRAPHS : WK_LOG_BREAKS,
               "channels-last pass gave up the graph of %s (ATen path instead): %s", where, msg ? msg : "?");
        Py_XDECREF(text);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    PyErr_Clear();
    Py_XDECREF(res);
    Py_XDECREF(mod);
    Py_XDECREF(graph_obj);
    return out;
}

/* An inference graph on CUDA calling cuDNN attention or convolutions: its
 * kernels start compiling now and cuDNN's plans for those calls are built
 * meanwhile, on this thread (wick/_cudnn_plans.py: 0.3-0.5 s an attention
 * call, tens of ms a convolution, that the first run would otherwise spend
 * after its kernels compiled). Only a head start: what fails is cleared.
 * graph_obj: g's Python Graph where the caller has one (borrowed; the
 * channels-last pass's), else NULL and a copy of g is wrapped. */
static void warm_cudnn_plans(PyObject *compiled, const WkGraph *g, PyObject *graph_obj, PyObject *externs) {
    int any = 0;
    for (int n = 0; n < wk_graph_nnodes(g) && !any; n++) {
        const WkNode *node = wk_graph_node(g, n);
        any = node->op == WK_OP_EXTERN && node->extern_name && node->ninputs > 0 &&
              wk_graph_value(g, node->inputs[0])->device.type == WK_DEV_CUDA &&
              (!strcmp(node->extern_name, "aten._scaled_dot_product_cudnn_attention.default") ||
               !strcmp(node->extern_name, "aten.convolution.default"));
    }
    if (!any || !externs) return;
    if (graph_obj) {
        Py_INCREF(graph_obj);
    } else { /* capture's graph, which it keeps: a copy for Python */
        int *map = wk_xcalloc((size_t)wk_graph_nvalues(g) + 1, sizeof *map);
        WkGraph *copy = wk_graph_copy(g, NULL, NULL, map);
        free(map);
        if (!copy) wk_error_clear(); /* a symbolic size: no warm-up */
        graph_obj = copy ? wk_rt_graph_wrap_Steal(copy) : NULL;
    }
    PyObject *mod = graph_obj ? PyImport_ImportModule("wick._cudnn_plans") : NULL;
    PyObject *r = mod ? PyObject_CallMethod(mod, "warm_graph", "OOO", compiled, graph_obj, externs) : NULL;
    Py_XDECREF(r);
    Py_XDECREF(mod);
    Py_XDECREF(graph_obj);
    PyErr_Clear();
}

/* stop_step > 0: the second capture of a graph break (see breaks.c), which
 * stops before that top-level instruction; it returns NULL (no fallback
 * entry) when the break cannot be made. break_reason: why the first failed. */
static WkCacheEntry *compile_frame(PyFunctionObject *fn, PyCodeObject *code, PyObject *const *args, int nargs,
                                   PyObject *options, long stop_step, const char *break_reason) {
    double t0 = now_s();
    WkBreak *brk = NULL;
    Interp I_ = {0}, *I = &I_;
    RetPlan plan = {0};
    PyObject *compiled = NULL, *newcode = NULL, *info = NULL, *guard_list = NULL;
    char *graph_text = NULL;
    int via_fx = 0; /* compiled as an FX GraphModule (a torch backend, or wick with autograd) */
    WkCacheEntry *entry = NULL;
    int ret_line = code->co_firstlineno;

    I->f = cap_frame_new(I, fn, code);
    Frame *top = I->f;
    I->top_globals = fn->func_globals;
    I->args = args;
    I->nargs = nargs;
    I->guards = wk_guards_new();
    I->g = wk_graph_new();
    I->null_sv = sv_new(I, SV_NULL);
    wk_error_clear();

    PyObject *backend = options && PyDict_Check(options) ? PyDict_GetItemString(options, "backend") : NULL;
    I->backend_wick = !backend || backend == Py_None ||
                      (PyUnicode_Check(backend) && PyUnicode_CompareWithASCIIString(backend, "wick") == 0);
    int fullgraph = option_flag(options, "fullgraph");
    I->stop_step = stop_step < 0 ? -stop_step : stop_step; /* negative: a split (breaks.c) */
    I->split = stop_step < 0;

    I->autocast_dt[0] = I->autocast_dt[1] = CAP_AUTOCAST_ENTRY;
    I->autocast_base_dt[0] = I->autocast_base_dt[1] = CAP_AUTOCAST_ENTRY;
    I->grad_base = -1;
    int tr = cap_init_torch();
    if (tr < 0) {
        cap_py_failed(I, "importing torch");
        goto finish;
    }
    if (tr == 0) {
        int ge = wk_guards_grad_enabled();
        if (ge < 0) {
            cap_py_failed(I, "torch.is_grad_enabled");
            goto finish;
        }
        I->grad_enabled = I->entry_grad = ge;
    }
    I->argnames = PyCode_GetVarnames(code);
    if (!I->argnames) {
        cap_py_failed(I, "co_varnames");
        goto finish;
    }
    if (PyTuple_GET_SIZE(I->argnames) < nargs) {
        cap_unsupported(I, "arguments without names");
        goto finish;
    }
    if (setup_args(I) < 0) goto finish;
    cap_break_setup(I);

    Sv *ret = cap_run_frame(I, top, &ret_line);
    WkRet *rp = NULL;
    WkEffects effects = {0};
    if (!ret && I->stopped && !I->reason && !I->propagate) {
        if (cap_break_plan(I, code, &plan, &brk, options) < 0 || cap_effects_plan(I, &plan, &effects) < 0)
            goto finish;
        /* every cell the plan makes, the effects' too: made once, up front */
        free(brk->cell_table);
        brk->ncell_table = plan.cell_rets.len;
        brk->cell_table = wk_xcalloc((size_t)plan.cell_rets.len + 1, sizeof(WkRet *));
        memcpy(brk->cell_table, plan.cell_rets.data, sizeof(WkRet *) * (size_t)plan.cell_rets.len);
        ret_line = brk->line >= 0 ? brk->line : ret_line;
    } else {
        if (!ret || cap_ctxvar_check(I) < 0) goto finish;
        if (!(rp = cap_reconstruct(I, &plan, ret, 0))) goto finish;
        if (cap_effects_plan(I, &plan, &effects) < 0) goto finish;
    }
    cap_read_unlaid(I);
    for (int i = 0; i < plan.outputs.len; i++)
        if (wk_graph_output(I->g, plan.outputs.data[i]) < 0) {
            cap_graph_failed(I, "graph output");
            goto finish;
        }
    int graph_count = plan.outputs.len > 0;
    char stem[256];
    dump_stem(code, stem, sizeof stem);
    int op_count = 0; /* scalar constants are not ops */
    for (int i = 0; graph_count && i < wk_graph_nnodes(I->g); i++)
        op_count += wk_graph_node(I->g, i)->op != WK_OP_SCALAR;
    if (!graph_count && !brk && I->compiling_step) {
        /* torch.compiler.is_compiling() answered True and nothing is left
         * for a graph: transformed code would keep that answer for a frame
         * that runs outside any graph (transformers' is_torchdynamo_compiling
         * called from a frame that fell back). Run it as it is, as PyTorch's
         * capture skips frames without a graph. Not a fallback: no reason. */
        finish_arg_guards(I);
        wk_guards_finalize(I->guards);
        info = Py_BuildValue("{s:O,s:i,s:i,s:O,s:O,s:s}", "reason", Py_None, "graph_count", 0, "op_count", 0,
                             "file", code->co_filename, "graph", Py_None, "skipped",
                             "no graph, and is_compiling() answered True: runs as written");
        if (!info) {
            cap_py_failed(I, "info");
            goto finish;
        }
        entry = entry_new(I->guards, NULL, info);
        I->guards = NULL;
        info = NULL;
        goto finish;
    }
    graph_text = wk_graph_print(I->g);
    PyObject *source = NULL;
    if (graph_count) {
        dump_text(stem, "graph.txt", graph_text);
        if (wk_log_on(WK_LOG_GRAPHS)) {
            const char *nm = PyUnicode_AsUTF8(code->co_qualname);
            wk_log(WK_LOG_GRAPHS, "graph for %s (%s:%d):\n%s", nm ? nm : "?", cap_code_filename(I),
                   code->co_firstlineno, graph_text);
            PyErr_Clear();
        }
        int autograd = cap_graph_needs_autograd(I);
        int layout = I->backend_wick && !autograd && conv_graph_for_layout(I->g);
        PyObject *laid = NULL; /* (the graph the channels-last pass rewrote, its extern table) */
        if (layout) {
            const char *nm = PyUnicode_AsUTF8(code->co_qualname);
            PyErr_Clear();
            laid = graph_layout_Ref(I->g, I->externs, nm ? nm : "?");
            layout = laid == NULL;
        }
        via_fx = !I->backend_wick || autograd || layout;
        if (!via_fx) {
            const WkGraph *g = laid ? wk_rt_graph_unwrap_Borrow(PyTuple_GET_ITEM(laid, 0)) : I->g;
            PyObject *externs = laid ? PyTuple_GET_ITEM(laid, 1) : I->externs;
            compiled = externs && wk_graph_nexterns(g) ? wk_rt_compile_externs_Ref(g, externs) : wk_rt_compile_Ref(g);
            if (compiled) {
                wk_rt_set_check_inputs(compiled, 0);
                warm_cudnn_plans(compiled, g, laid ? PyTuple_GET_ITEM(laid, 0) : NULL, externs);
            }
            Py_XDECREF(laid);
            if (!compiled) {
                if (PyErr_Occurred()) cap_py_failed(I, "compiling the graph");
                else cap_unsupported(I, "wick could not compile the graph: %s", wk_error_get());
                goto finish;
            }
            PyObject *desc = wk_rt_describe_Ref(compiled);
            if (desc && PyDict_Check(desc)) source = Py_XNewRef(PyDict_GetItemString(desc, "source"));
            if (source && PyUnicode_Check(source)) {
                const char *src = PyUnicode_AsUTF8(source);
                if (src) dump_text(stem, "kernel.c", src);
            }
            Py_XDECREF(desc);
            PyErr_Clear();
            /* mode="reduce-overhead": replayed as a CUDA graph (wick/_cudagraphs.py) */
            PyObject *mode = options && PyDict_Check(options) ? PyDict_GetItemString(options, "mode") : NULL;
            if (mode && PyUnicode_Check(mode) && PyUnicode_CompareWithASCIIString(mode, "reduce-overhead") == 0) {
                PyObject *cg = PyImport_ImportModule("wick._cudagraphs");
                PyObject *wrapped = cg ? PyObject_CallMethod(cg, "wrap", "O", compiled) : NULL;
                Py_XDECREF(cg);
                if (!wrapped) {
                    cap_py_failed(I, "wrapping the graph for reduce-overhead");
                    goto finish;
                }
                Py_SETREF(compiled, wrapped);
            }
        } else {
            /* a torch backend, or wick's through AOTAutograd (forward and
             * backward compiled by wick) when node outputs require grad */
            compiled = compile_with_backend_Ref(I, I->backend_wick ? NULL : backend, &I->g,
                                                layout || autograd ? options : NULL, &effects);
            if (!compiled) {
                cap_py_failed(I, "backend");
                goto finish;
            }
        }
    }
    newcode = brk ? wk_cap_transform_break_Ref(code, compiled, I->input_args.data, I->input_paths.data,
                                               I->input_args.len, plan.outputs.len, brk, &effects)
                  : wk_cap_transform_Ref(code, compiled, I->input_args.data, I->input_paths.data,
                                         I->input_args.len, plan.outputs.len, rp, ret_line, &effects);
    if (!newcode) {
        Py_XDECREF(source);
        cap_py_failed(I, "assembling the transformed code");
        goto finish;
    }
    dump_code(stem, code, newcode);
    finish_arg_guards(I);
    wk_guards_finalize(I->guards);
    if (wk_loader_share(newcode, I->guards) < 0) PyErr_Clear(); /* then the loader resolves on its own */
    guard_list = wk_guards_describe_Ref(I->guards);
    if (!guard_list) PyErr_Clear();
    info = Py_BuildValue("{s:s,s:O,s:O,s:O,s:i,s:d,s:i,s:O,s:O,s:i}", "graph", graph_text ? graph_text : "",
                         "source", source ? source : Py_None, "guards", guard_list ? guard_list : Py_None,
                         "reason", Py_None, "graph_count", graph_count, "compile_time_s", now_s() - t0,
                         "op_count", op_count, "via_fx", via_fx ? Py_True : Py_False,
                         "file", code->co_filename, "line", ret_line);
    Py_XDECREF(source);
    if (info && brk && break_reason) {
        /* the break: where, why, and what continues after it */
        PyObject *resumes = PyList_New(0);
        PyObject *const fns[4] = {brk->resume[0], brk->resume[1], brk->handler, brk->loop_body};
        for (int k = 0; resumes && k < 4; k++)
            if (fns[k] && PyList_Append(resumes, PyFunction_GetCode(fns[k])) < 0) Py_CLEAR(resumes);
        PyObject *bd = resumes ? Py_BuildValue("{s:s,s:O,s:i,s:O,s:O}", "reason", break_reason, "file",
                                               code->co_filename, "line", brk->line, "resume", resumes, "callee",
                                               brk->callee ? brk->callee : Py_None)
                               : NULL;
        PyObject *bl = bd ? PyList_New(1) : NULL;
        if (bl) PyList_SET_ITEM(bl, 0, Py_NewRef(bd));
        if (!bl || PyDict_SetItemString(info, "breaks", bl) < 0) Py_CLEAR(info);
        Py_XDECREF(bl);
        Py_XDECREF(bd);
        Py_XDECREF(resumes);
        if (info && wk_log_on(WK_LOG_BREAKS)) {
            const char *q = PyUnicode_AsUTF8(code->co_qualname);
            if (!q) PyErr_Clear();
            wk_log(WK_LOG_BREAKS, "graph break in %s at %s:%d: %s (%d op(s) in the graph before it)", q ? q : "?",
                   cap_code_filename(I), brk->line, break_reason, op_count);
        }
    }
    if (!info) {
        cap_py_failed(I, "info");
        goto finish;
    }
    if (wk_log_on(WK_LOG_GUARDS) && guard_list) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(guard_list); i++)
            wk_log(WK_LOG_GUARDS, "%s", PyUnicode_AsUTF8(PyList_GET_ITEM(guard_list, i)));
        PyErr_Clear();
    }
    entry = entry_new(I->guards, newcode, info);
    /* the instruction and the resume run Python; the graph before them is
     * protected (transform.c) so that its errors still run the frame eagerly */
    if (brk || effects.n) entry->flags |= WK_ENTRY_IMPURE | (compiled ? WK_ENTRY_GRAPH_FIRST : 0);
    I->guards = NULL;
    newcode = info = NULL;

finish:
    if (!entry && stop_step) { /* no break after all: the caller falls back */
        if (!I->propagate) {
            PyErr_Clear();
            if (wk_log_on(WK_LOG_BREAKS)) {
                const char *q = PyUnicode_AsUTF8(code->co_qualname);
                if (!q) PyErr_Clear();
                wk_log(WK_LOG_BREAKS, "no graph break in %s: %s", q ? q : "?", I->reason ? I->reason : "?");
            }
        }
        goto cleanup;
    }
    if (!entry && !I->propagate && !fullgraph && I->reason) {
        /* a graph break instead of running the whole frame eagerly */
        /* attribute writes that would be fine at a return need no break before them */
        if (!cap_effects_failed(I)) I->effect_step = 0;
        long step = cap_break_step(I, code);
        if (step != 0) {
            cap_break_take_retry();
            entry = compile_frame(fn, code, args, nargs, options, step, I->reason);
            long retry = cap_break_take_retry();
            if (!entry && !PyErr_Occurred() && step > 0 && retry > 0 && retry < step)
                entry = compile_frame(fn, code, args, nargs, options, retry, I->reason);
            if (!entry && PyErr_Occurred()) I->propagate = 1;
            if (entry || I->propagate) goto cleanup;
        }
    }
    if (!entry && !I->propagate) {
        if (!I->reason) cap_unsupported(I, "capture failed");
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
            /* a fallback may have stopped before reading an argument: pin all */
            I->loaded_args = ~0ull;
            finish_arg_guards(I);
            wk_guards_finalize(I->guards);
            info = fallback_info_Ref(I);
            if (!info) PyErr_Clear();
            entry = entry_new(I->guards, NULL, info);
            I->guards = NULL;
            info = NULL;
        }
    }
cleanup:
    cap_break_free(I, brk);
    Py_XDECREF(compiled);
    Py_XDECREF(newcode);
    Py_XDECREF(info);
    Py_XDECREF(guard_list);
    Py_XDECREF(I->argnames);
    free(graph_text);
    plan_free(&plan);
    for (int i = 0; i < I->all.len; i++) sv_free(I->all.data[i]);
    wk_vec_free(&I->all);
    wk_vec_free(&I->input_args);
    wk_vec_free(&I->input_paths);
    wk_vec_free(&I->value_rg);
    wk_vec_free(&I->relaid);
    wk_vec_free(&I->autocast_casts);
    wk_vec_free(&I->input_tensors);
    for (int i = 0; i < I->frames.len; i++) frame_free(I->frames.data[i]);
    wk_vec_free(&I->frames);
    Py_XDECREF(I->externs);
    for (int i = 0; i < I->overlay.len; i++) Py_DECREF(I->overlay.data[i].name);
    for (int i = 0; i < I->keep.len; i++) Py_DECREF(I->keep.data[i]);
    wk_vec_free(&I->keep);
    for (int i = 0; i < I->raised.len; i++) Py_DECREF(I->raised.data[i]);
    wk_vec_free(&I->raised);
    wk_vec_free(&I->lists_read);
    for (int i = 0; i < I->attr_dicts.len; i++) Py_DECREF(I->attr_dicts.data[i].real);
    wk_vec_free(&I->attr_dicts);
    wk_vec_free(&I->overlay);
    wk_vec_free(&I->writes);
    cap_ctxvar_free(I);
    free(I->reason);
    free(I->exc_where);
    if (I->g) wk_graph_free(I->g);
    if (I->guards) wk_guards_free(I->guards);
    return entry;
}

WkCacheEntry *wk_cap_compile_frame(PyFunctionObject *fn, PyCodeObject *code, PyObject *const *args, int nargs,
                                   PyObject *options) {
    return compile_frame(fn, code, args, nargs, options, 0, NULL);
}

static PyObject *reset_breaks(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    cap_breaks_reset();
    Py_RETURN_NONE;
}

static PyObject *inject_error(PyObject *self, PyObject *arg) {
    (void)self;
    inject_at = PyLong_AsLong(arg);
    if (inject_at == -1 && PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef cap_methods[] = {
    {"_reset_breaks", reset_breaks, METH_NOARGS, "_reset_breaks(): forget the cached resume functions."},
    {"_inject_capture_error", inject_error, METH_O,
     "_inject_capture_error(n): the n-th instruction the next capture interprets raises (tests)."},
    {NULL, NULL, 0, NULL},
};

int wk_cap_init(PyObject *module) {
    if (PyModule_AddFunctions(module, cap_methods) < 0) return -1;
    unsupported_error = PyErr_NewException("wick._C.UnsupportedError", PyExc_RuntimeError, NULL);
    if (!unsupported_error) return -1;
    Py_INCREF(unsupported_error);
    if (PyModule_AddObject(module, "UnsupportedError", unsupported_error) < 0) {
        Py_DECREF(unsupported_error);
        return -1;
    }
    return 0;
}

