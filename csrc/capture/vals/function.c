/* vals/function.c — user functions, closures and cells.
 *
 * A call of a plain Python function is inlined: a Frame is pushed (parent =
 * the caller's), the arguments are bound to its parameters as CPython does
 * (positional, keyword, defaults, keyword-only, *args, **kwargs), and its
 * bytecode runs on the same graph and guards. The function object itself
 * is pinned by how it was found (a global's identity, a type's attribute),
 * and a guard checks that its __code__, __defaults__ and __kwdefaults__
 * are still the objects capture read.
 *
 * Cells: MAKE_CELL turns a local slot into an SV_CELL; free variables are
 * the function's closure cells (COPY_FREE_VARS). For a function that exists
 * before capture, each closure cell's contents is read now and guarded (the
 * cell object is pinned with the function); for a function made during
 * capture (MAKE_FUNCTION, the func kind) the cells are the creating frame's
 * SV_CELLs, so stores are seen by both frames. */
#include <string.h>

#include "../interp.h"

/* Binds a's arguments into fr->locals like CPython's calling convention.
 * defaults: the positional defaults (items), kwdefault(name) their keyword
 * twin. 0, or -1 with a reason. */
typedef Sv *(*KwDefault)(Interp *I, void *ctx, PyObject *name);

static int bind_args(Interp *I, Frame *fr, const char *name, Sv *const *defaults, int ndef, KwDefault kwdefault,
                     void *kwctx, const Args *a) {
    PyCodeObject *co = fr->code;
    int npos = co->co_argcount, nkwonly = co->co_kwonlyargcount, nparams = npos + nkwonly;
    int varargs = (co->co_flags & CO_VARARGS) != 0, varkw = (co->co_flags & CO_VARKEYWORDS) != 0;
    int va_slot = nparams, kw_slot = nparams + varargs;
    PyObject *varnames = PyCode_GetVarnames(co);
    if (!varnames) return cap_py_failed(I, "co_varnames");
    int rc = -1;
    Sv **L = fr->locals;
    int take = a->npos < npos ? a->npos : npos;
    for (int i = 0; i < take; i++) L[i] = a->pos[i];
    if (a->npos > npos) {
        if (!varargs) {
            cap_unsupported(I, "call to %s(): takes %d positional arguments but %d were given", name, npos, a->npos);
            goto done;
        }
        L[va_slot] = sv_seq(I, SV_TUPLE, a->pos + npos, a->npos - npos);
    } else if (varargs) {
        L[va_slot] = sv_seq(I, SV_TUPLE, NULL, 0);
    }
    if (varkw) L[kw_slot] = cap_dict_new(I);
    for (int k = 0; k < a->nkw; k++) {
        PyObject *kn = PyTuple_GET_ITEM(a->kwnames, k);
        int found = -1;
        for (int i = co->co_posonlyargcount; i < nparams && found < 0; i++)
            if (PyUnicode_Compare(PyTuple_GET_ITEM(varnames, i), kn) == 0) found = i;
        if (found >= 0 && L[found]) {
            cap_unsupported(I, "call to %s(): multiple values for argument %s", name, PyUnicode_AsUTF8(kn));
            goto done;
        }
        if (found >= 0) {
            L[found] = a->kw[k];
        } else if (varkw) {
            if (cap_dict_set(I, L[kw_slot], sv_const(I, kn), a->kw[k]) < 0) goto done;
        } else {
            cap_unsupported(I, "call to %s(): unexpected keyword argument %s", name, PyUnicode_AsUTF8(kn));
            goto done;
        }
    }
    for (int i = 0; i < nparams; i++) {
        if (L[i]) continue;
        Sv *d = NULL;
        if (i < npos && i >= npos - ndef) d = defaults[i - (npos - ndef)];
        else if (i >= npos && kwdefault) d = kwdefault(I, kwctx, PyTuple_GET_ITEM(varnames, i));
        if (I->reason) goto done;
        if (!d) {
            cap_unsupported(I, "call to %s(): missing argument %s", name, PyUnicode_AsUTF8(PyTuple_GET_ITEM(varnames, i)));
            goto done;
        }
        L[i] = d;
    }
    rc = 0;
done:
    Py_DECREF(varnames);
    return rc;
}

static Sv *kwdefault_of_dict_obj(Interp *I, void *ctx, PyObject *name) {
    PyObject *d = ctx ? PyDict_GetItemWithError((PyObject *)ctx, name) : NULL;
    if (!d && PyErr_Occurred()) return cap_py_failed(I, "keyword defaults"), NULL;
    return d ? sv_const(I, d) : NULL;
}

static Sv *kwdefault_of_sv(Interp *I, void *ctx, PyObject *name) {
    Sv *d = ctx;
    if (!d) return NULL;
    if (d->kind == SV_CONST) return kwdefault_of_dict_obj(I, PyDict_Check(d->obj) ? d->obj : NULL, name);
    return cap_dict_lookup(d, name);
}

static int check_code(Interp *I, PyCodeObject *co, const char *name, int depth) {
    /* real model code nests deep (T5: about 20 frames to its attention lookup); the
     * limit keeps the C stack bounded well inside its default size */
    if (depth >= 48) return cap_unsupported(I, "call to %s(): inlining too deep", name);
    if (co->co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR))
        return cap_unsupported(I, "call to %s(): a coroutine", name);
    return 0;
}

/* A generator is run to its end now and its values collected: what
 * consumers of generator expressions (sum, any, tuple, for) see, in order.
 * Its consumer may stop early (a for loop's break, zip with a shorter
 * iterable), and Python then never runs the rest of its body: a generator
 * that writes to anything outside the frame (side effects capture replays)
 * is not modelled. */
static Sv *run_callee(Interp *I, Frame *fr) {
    int ret_line;
    fr->is_generator = (fr->code->co_flags & CO_GENERATOR) != 0;
    unsigned long long before = fr->is_generator ? cap_effects_fingerprint(I) : 0;
    Sv *r = cap_run_frame(I, fr, &ret_line);
    if (!r || !fr->is_generator) return r;
    if (cap_effects_fingerprint(I) != before)
        return cap_unsupported(I, "a generator with side effects (capture would run it ahead of its consumer)"), NULL;
    Sv *it = sv_seq(I, SV_ITER, fr->yields.data, fr->yields.len);
    /* next() may take the items one at a time when nothing but the
     * arguments fed the run: no closure, arguments tensors or constants */
    PyCodeObject *co = fr->code;
    int nparams = co->co_argcount + co->co_kwonlyargcount + !!(co->co_flags & CO_VARARGS) +
                  !!(co->co_flags & CO_VARKEYWORDS);
    it->gen = co->co_nfreevars == 0 && co->co_ncellvars == 0 ? 1 : 2;
    for (int i = 0; i < nparams && i < fr->nlocals; i++) {
        Sv *p = fr->locals[i];
        if (p && p->kind == SV_TENSOR) {
            wk_vec_push(&it->gen_args, p);
            wk_vec_push(&it->gen_values, p->value);
        } else if (!p || p->kind != SV_CONST || !cap_is_plain(p->obj)) {
            it->gen = 2;
        }
    }
    it->gen_effects = before;
    it->gen_grad = I->grad_enabled;
    it->gen_step = I->steps;
    it->gen_frame = I->f;
    return it;
}

int cap_generator_check(Interp *I, Sv *it) {
    if (!it->gen) return 0;
    /* its body ran when it was made: exact only while nothing it could
     * read has changed since (eager runs it as it is consumed) */
    int same = cap_effects_fingerprint(I) == it->gen_effects && I->grad_enabled == it->gen_grad;
    for (int i = 0; same && i < it->gen_args.len; i++) same = it->gen_args.data[i]->value == it->gen_values.data[i];
    return same ? 0 : cap_unsupported(I, "a generator consumed after a change it could see (it ran when made)");
}

Sv *cap_generator_next(Interp *I, const Args *a) {
    if (a->nkw || a->npos < 1 || a->npos > 2 || a->pos[0]->kind != SV_ITER || !a->pos[0]->gen) return NULL;
    Sv *it = a->pos[0];
    /* a generator that read more (an iterator over self.parameters(), a
     * closure): its first item, when next() is what the frame does right
     * after making it (next(p.dtype for p in self.parameters()), at most a
     * constant load and the call in between), so nothing it read can have
     * changed; later items are refused */
    int fresh = it->value <= 0 && I->f == it->gen_frame && I->steps - it->gen_step <= 3;
    if (it->gen != 1 && !fresh)
        return cap_unsupported(I, "next() of a generator that reads more than its arguments, not right after it is made"),
               NULL;
    if (cap_generator_check(I, it) < 0) return NULL;
    if (it->value < 0) it->value = 0;
    if (it->value >= it->items.len) {
        if (a->npos == 2) return a->pos[1];
        return cap_unsupported(I, "next() of an exhausted generator"), NULL;
    }
    return it->items.data[it->value++];
}

Sv *cap_inline_call(Interp *I, PyFunctionObject *f, const Args *a) {
    char buf[200];
    Sv *modelled = cap_newmodule_method(I, f, a); /* nn.Module bookkeeping on a module made here */
    if (modelled || CAP_FAILED(I)) return modelled;
    PyCodeObject *co = (PyCodeObject *)f->func_code;
    const char *name = cap_callable_name((PyObject *)f, buf, sizeof buf);
    if (check_code(I, co, name, I->f->depth + 1) < 0) return NULL;
    /* the function may be found again later with other code or defaults */
    wk_guard_function(I->guards, (PyObject *)f);
    Frame *fr = cap_frame_new(I, f, co);
    SvList defaults = {0};
    if (f->func_defaults && PyTuple_Check(f->func_defaults))
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(f->func_defaults); i++)
            wk_vec_push(&defaults, sv_const(I, PyTuple_GET_ITEM(f->func_defaults, i)));
    int rc = bind_args(I, fr, name, defaults.data, defaults.len, kwdefault_of_dict_obj,
                       f->func_kwdefaults && PyDict_Check(f->func_kwdefaults) ? f->func_kwdefaults : NULL, a);
    wk_vec_free(&defaults);
    if (rc < 0) return NULL;
    return run_callee(I, fr);
}

/* A function made during capture: code (obj), defaults (self), kwdefaults
 * (items[0] when present), closure (cell). */
Sv *cap_inline_made_func(Interp *I, Sv *func, const Args *a) {
    PyCodeObject *co = (PyCodeObject *)func->obj;
    const char *name = PyUnicode_AsUTF8(co->co_qualname);
    if (!name) return cap_py_failed(I, "qualname"), NULL;
    if (check_code(I, co, name, I->f->depth + 1) < 0) return NULL;
    Frame *fr = cap_frame_new(I, NULL, co);
    fr->closure = func->cell;
    SvList defaults = {0};
    if (func->self && cap_iterate(I, func->self, &defaults) < 0) return wk_vec_free(&defaults), NULL;
    Sv *kwd = func->items.len ? func->items.data[0] : NULL;
    int rc = bind_args(I, fr, name, defaults.data, defaults.len, kwdefault_of_sv, kwd, a);
    wk_vec_free(&defaults);
    if (rc < 0) return NULL;
    return run_callee(I, fr);
}

/* MAKE_FUNCTION flags: code on top; below it, by flag, closure (0x08),
 * annotations (0x04), kwdefaults (0x02), defaults (0x01). */
int cap_make_function(Interp *I, int flags) {
    Sv *code = sv_pop(I);
    if (!code) return -1;
    if (code->kind != SV_CONST || !PyCode_Check(code->obj)) return cap_unsupported(I, "MAKE_FUNCTION of a %s", sv_desc(code));
    Sv *closure = NULL, *kwd = NULL, *defaults = NULL;
    if ((flags & 0x08) && !(closure = sv_pop(I))) return -1;
    if ((flags & 0x04) && !sv_pop(I)) return -1;
    if ((flags & 0x02) && !(kwd = sv_pop(I))) return -1;
    if ((flags & 0x01) && !(defaults = sv_pop(I))) return -1;
    Sv *fn = sv_new(I, SV_FUNC);
    fn->obj = Py_NewRef(code->obj);
    fn->self = defaults;
    fn->cell = closure;
    fn->globals = I->f->globals;
    fn->version = (flags & 0x04) != 0; /* annotations: dropped here, so not rebuilt */
    if (kwd) wk_vec_push(&fn->items, kwd);
    return sv_push(I, fn);
}

/* The cell in local slot `index`: a frame's own cell (MAKE_CELL) or a free
 * variable (COPY_FREE_VARS). */
static Sv *cell_at(Interp *I, int index) {
    if (index < 0 || index >= I->f->nlocals) return cap_unsupported(I, "cell index out of range"), NULL;
    Sv *c = I->f->locals[index];
    if (!c || c->kind != SV_CELL) return cap_unsupported(I, "cell %d is not set up", index), NULL;
    return c;
}

int cap_deref_load(Interp *I, int index) {
    Sv *c = cell_at(I, index);
    if (!c) return -1;
    if (!c->cell) return cap_unsupported(I, "read of an empty cell");
    return sv_push(I, c->cell);
}

int cap_deref_store(Interp *I, int index) {
    Sv *v = sv_pop(I), *c = v ? cell_at(I, index) : NULL;
    if (!c) return -1;
    c->cell = v;
    return 0;
}

int cap_make_cell(Interp *I, int index) {
    if (index < 0 || index >= I->f->nlocals) return cap_unsupported(I, "MAKE_CELL out of range");
    Sv *c = sv_new(I, SV_CELL);
    c->cell = I->f->locals[index]; /* an argument that is also a cell keeps its value */
    I->f->locals[index] = c;
    return 0;
}

/* The frame's closure into its last n slots. A real function's cells are
 * read now: their contents become constants (or what their kind makes of
 * them), guarded by identity. */
int cap_copy_free_vars(Interp *I, int n) {
    Frame *f = I->f;
    int first = f->code->co_nlocalsplus - n;
    if (first < 0) return cap_unsupported(I, "COPY_FREE_VARS out of range");
    if (f->closure) {
        SvList cells = {0};
        if (cap_iterate(I, f->closure, &cells) < 0) return wk_vec_free(&cells), -1;
        int ok = cells.len == n;
        for (int i = 0; ok && i < n; i++) f->locals[first + i] = cells.data[i];
        wk_vec_free(&cells);
        return ok ? 0 : cap_unsupported(I, "closure of the wrong size");
    }
    PyObject *closure = f->fn ? f->fn->func_closure : NULL;
    if (!closure || !PyTuple_Check(closure) || PyTuple_GET_SIZE(closure) != n)
        return cap_unsupported(I, "closure of the wrong size");
    for (int i = 0; i < n; i++) {
        PyObject *cell = PyTuple_GET_ITEM(closure, i);
        Sv *known = cap_cell_lookup(I, cell); /* one Sv per cell: writes are shared and replayed */
        if (known) {
            f->locals[first + i] = known;
            continue;
        }
        PyObject *v = PyCell_GET(cell);
        Sv *c = sv_new(I, SV_CELL);
        if (v) {
            if (cap_is_tensor_obj(v)) return cap_unsupported(I, "a tensor in a closure cell");
            c->cell = sv_const(I, v);
        }
        /* the compiled frame's own closure differs per function object of one
         * code: checked through the called function; an inlined function is
         * pinned, and so are its cells */
        if (f->depth == 0) wk_guard_freevar_is(I->guards, i, v);
        else wk_guard_cell_is(I->guards, cell, v);
        cap_cell_register(I, cell, c);
        f->locals[first + i] = c;
    }
    return 0;
}

static Sv *func_call(Interp *I, Sv *fn, const Args *a) { return cap_inline_made_func(I, fn, a); }
static int func_truth(Interp *I, Sv *s, int *out) {
    (void)I;
    (void)s;
    *out = 1;
    return 0;
}

/* A function made during capture that a graph break's resume function (or
 * the closure it returns) needs: made again after the graph from its code,
 * globals, defaults and closure, whose cells are the ones the resume
 * function shares (WK_RET_CELL). */
static WkRet *func_reconstruct(Interp *I, RetPlan *p, Sv *s, int depth) {
    if (!p->cells_ok) return cap_unsupported(I, "returning a function made in the frame"), NULL;
    if (s->version || !s->globals) return cap_unsupported(I, "a function with annotations made in the frame"), NULL;
    static PyObject *make_fn;
    if (!make_fn) {
        PyObject *m = PyImport_ImportModule("wick._capture_meta");
        make_fn = m ? PyObject_GetAttrString(m, "make_function") : NULL;
        Py_XDECREF(m);
        if (!make_fn) return cap_py_failed(I, "make_function"), NULL;
    }
    WkRet *r = cap_ret_new(p, WK_RET_CALL);
    r->value = make_fn;
    r->nitems = 5;
    r->items = wk_xcalloc(6, sizeof(WkRet *));
    r->items[0] = cap_ret_new(p, WK_RET_CONST);
    r->items[0]->value = s->obj;
    r->items[1] = cap_ret_new(p, WK_RET_CONST);
    r->items[1]->value = s->globals;
    Sv *parts[3] = {s->self, s->items.len ? s->items.data[0] : NULL, s->cell};
    for (int i = 0; i < 3; i++) {
        if (!parts[i]) {
            r->items[2 + i] = cap_ret_new(p, WK_RET_CONST);
            r->items[2 + i]->value = Py_None;
        } else if (!(r->items[2 + i] = cap_reconstruct(I, p, parts[i], depth + 1))) {
            return NULL;
        }
    }
    return r;
}

static WkRet *cell_reconstruct(Interp *I, RetPlan *p, Sv *s, int depth) {
    int own = -1;
    PyObject *real = cap_cell_real(I, s, &own);
    if (real) { /* a real function's cell: its writes are replayed as effects */
        WkRet *r = cap_ret_new(p, own >= 0 ? WK_RET_FREEVAR : WK_RET_CONST);
        r->value = real;
        r->index = own;
        return r;
    }
    if (!p->cells_ok) return cap_unsupported(I, "returning a cell made in the frame"), NULL;
    for (int i = 0; i < p->cell_svs.len; i++)
        if (p->cell_svs.data[i] == s) return p->cell_rets.data[i];
    WkRet *r = cap_ret_new(p, WK_RET_CELL);
    r->index = p->cell_rets.len;
    wk_vec_push(&p->cell_svs, s);
    wk_vec_push(&p->cell_rets, r); /* before its contents: they may hold a closure over it */
    if (s->cell) {
        WkRet *c = cap_reconstruct(I, p, s->cell, depth + 1);
        if (!c) return NULL;
        r->items = wk_xcalloc(2, sizeof(WkRet *));
        r->items[0] = c;
        r->nitems = 1;
    }
    return r;
}

const SvOps cap_func_kind = {.name = "function", .call = func_call, .truth = func_truth, .reconstruct = func_reconstruct};
const SvOps cap_cell_kind = {.name = "cell", .reconstruct = cell_reconstruct};

/* ---- bound methods and functools.partial --------------------------------- */

Sv *cap_partial_new(Interp *I, Sv *callable, Sv *const *args, int nargs, Sv *kwargs) {
    Sv *p = sv_seq(I, SV_PARTIAL, args, nargs);
    p->cell = callable;
    p->self = kwargs;
    return p;
}

static Sv *partial_call(Interp *I, Sv *p, const Args *a) {
    int nkw0 = p->self ? p->self->items.len : 0;
    if (p->items.len + a->npos > 64 || nkw0 + a->nkw > 64) return cap_unsupported(I, "call with too many arguments"), NULL;
    Sv *pos[130], *kw[130];
    int npos = 0, nkw = 0;
    for (int i = 0; i < p->items.len; i++) pos[npos++] = p->items.data[i];
    for (int i = 0; i < a->npos; i++) pos[npos++] = a->pos[i];
    PyObject *names = PyList_New(0);
    if (!names) return cap_py_failed(I, "partial"), NULL;
    /* the call's keywords override the partial's */
    for (int i = 0; i < nkw0; i++) {
        PyObject *k = PyList_GET_ITEM(p->self->obj, i);
        int overridden = 0;
        for (int j = 0; j < a->nkw; j++)
            overridden |= PyUnicode_Compare(k, PyTuple_GET_ITEM(a->kwnames, j)) == 0;
        if (overridden) continue;
        PyList_Append(names, k);
        kw[nkw++] = p->self->items.data[i];
    }
    for (int j = 0; j < a->nkw; j++) {
        PyList_Append(names, PyTuple_GET_ITEM(a->kwnames, j));
        kw[nkw++] = a->kw[j];
    }
    PyObject *kwnames = PyList_AsTuple(names);
    Py_DECREF(names);
    if (!kwnames) return cap_py_failed(I, "partial"), NULL;
    Args b = {pos, npos, nkw ? kwnames : NULL, kw, nkw};
    Sv *r = cap_call(I, p->cell, &b);
    Py_DECREF(kwnames);
    return r;
}

static int partial_getattr(Interp *I, Sv *p, PyObject *name, int method) {
    const char *n = PyUnicode_AsUTF8(name);
    if (!n) return cap_py_failed(I, "attribute");
    Sv *r = NULL;
    if (strcmp(n, "__self__") == 0 && p->items.len == 1 && !p->self) r = p->items.data[0];
    else if (strcmp(n, "func") == 0 || strcmp(n, "__func__") == 0) r = p->cell;
    if (!r) return cap_unsupported(I, "attribute .%s of a bound method or partial", n);
    if (method && sv_push(I, I->null_sv) < 0) return -1;
    return sv_push(I, r);
}

const SvOps cap_partial_kind = {.name = "bound method", .call = partial_call, .truth = func_truth,
                                .getattr = partial_getattr};

/* ---- super() ---------------------------------------------------------------- */

/* The class of a symbolic self, when capture knows it exactly. */
static PyTypeObject *self_type(Sv *self) {
    if (self->kind == SV_OBJECT) return (PyTypeObject *)self->obj;
    if ((self->kind == SV_OPAQUE || self->kind == SV_CONST) && self->obj) return Py_TYPE(self->obj);
    return NULL;
}

/* A name in a class's own dict, borrowed, or NULL (an error set when the
 * lookup failed). 3.12 keeps the dict of a static builtin type (object,
 * dict, ...) per interpreter, tp_dict NULL: PyType_GetDict finds it. The
 * dict outlives the reference dropped here (the type or the interpreter
 * holds it), so the item stays valid. */
static PyObject *type_dict_lookup(PyTypeObject *tp, PyObject *name) {
#if PY312
    PyObject *dict = PyType_GetDict(tp);
    if (!dict) return NULL;
    PyObject *d = PyDict_GetItemWithError(dict, name);
    Py_DECREF(dict);
    return d;
#else
    return tp->tp_dict ? PyDict_GetItemWithError(tp->tp_dict, name) : NULL;
#endif
}

static int super_getattr(Interp *I, Sv *s, PyObject *name, int method) {
    PyTypeObject *tp = self_type(s->self);
    const char *n = PyUnicode_AsUTF8(name);
    if (!tp || !n) return cap_unsupported(I, "super() of a %s", sv_desc(s->self));
    /* the MRO of self's (guarded) type, after __class__ */
    PyObject *mro = tp->tp_mro;
    Py_ssize_t i = 0, len = mro ? PyTuple_GET_SIZE(mro) : 0;
    while (i < len && PyTuple_GET_ITEM(mro, i) != s->obj) i++;
    for (i++; i < len; i++) {
        PyObject *cls = PyTuple_GET_ITEM(mro, i);
        PyObject *d = type_dict_lookup((PyTypeObject *)cls, name);
        if (!d) {
            if (PyErr_Occurred()) return cap_py_failed(I, n);
            continue;
        }
        if (!PyFunction_Check(d)) {
            /* dict.get and friends on a pinned constant self: bound now */
            if (s->self->kind == SV_CONST && (PyObject_TypeCheck(d, &PyMethodDescr_Type))) {
                PyObject *bound = PyObject_CallMethod(d, "__get__", "O", s->self->obj);
                if (!bound) return cap_py_failed(I, n);
                if (method && sv_push(I, I->null_sv) < 0) {
                    Py_DECREF(bound);
                    return -1;
                }
                return sv_push(I, sv_const_Steal(I, bound));
            }
            return cap_unsupported(I, "super().%s is not a Python function", n);
        }
        wk_guard_type_attr_is(I->guards, (PyTypeObject *)cls, name, d);
        if (cap_module_type && cls == (PyObject *)cap_module_type && strcmp(n, "__call__") == 0) {
            /* super().__call__ reaching nn.Module's: the module call capture models */
            Sv *bc = cap_module_base_call(I, s->self);
            if (!bc) return cap_unsupported(I, "super().__call__ of a %s", sv_desc(s->self));
            if (method && sv_push(I, I->null_sv) < 0) return -1;
            return sv_push(I, bc);
        }
        Sv *fn = sv_const(I, d);
        if (method) {
            if (sv_push(I, fn) < 0) return -1;
            return sv_push(I, s->self);
        }
        return sv_push(I, cap_partial_new(I, fn, &s->self, 1, NULL));
    }
    return cap_unsupported(I, "super() has no attribute %s", n);
}

const SvOps cap_super_kind = {.name = "super", .getattr = super_getattr};
