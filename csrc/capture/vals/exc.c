/* vals/exc.c — exceptions raised inside captured code.
 *
 * An exception raised while interpreting (a `raise`, an IndexError from an
 * inlined __getitem__ that ends a Sequence's iteration, a KeyError from a
 * lookup folded at capture time, a torch query that raises on this build)
 * is an exception instance made at capture time (a constant Sv), held in
 * I->exc while it propagates. Like CPython, the interpreter looks the
 * raising instruction up in the frame's exception table (read by the bytecode layer once
 * per inlined frame): a handler found there gets the stack cut to its depth,
 * lasti and the exception pushed; none found, the frame is left and its
 * caller looks up the CALL it was inlined from. An exception that leaves the
 * compiled frame, or an inlined generator, ends capture with the reason
 * (the frame then runs eagerly, or breaks, and raises for real): nothing is
 * ever caught at capture time that Python would not catch.
 *
 * Exceptions are made only where the outcome is what Python computes for
 * the guarded inputs: classes whose __init__/__new__ are the builtin
 * exceptions' own (no user code runs), plain constant arguments. An
 * exception object never leaves capture: returning or storing it is
 * unsupported (const.c). Handled-exception state (PUSH_EXC_INFO /
 * POP_EXCEPT) is modelled for `raise` without arguments inside a handler;
 * sys.exc_info() is not. */
#include <string.h>

#include "../interp.h"

int cap_exc_table(Interp *I, Frame *f, const WkInstr *raw, int n) {
    WkExcRange *ranges = NULL;
    int len = wk_bc_exc_ranges(f->code, raw, n, &ranges);
    if (len < 0) return cap_unsupported(I, "exception table not understood");
    f->exc = ranges;
    f->nexc = len;
    return 0;
}

/* ---- raising ---------------------------------------------------------------- */

int cap_is_exc_instance(PyObject *o) { return o && PyExceptionInstance_Check(o); }

int cap_raise(Interp *I, PyObject *exc) {
    if (I->reason) return -1;
    if (!PyExceptionInstance_Check(exc)) return cap_unsupported(I, "raise of a %s", cap_type_name(exc));
    /* raised inside a handler: the handled exception is its context, as in Python */
    if (I->handled && I->handled->obj != exc && PyExceptionInstance_Check(I->handled->obj))
        PyException_SetContext(exc, Py_NewRef(I->handled->obj));
    I->exc = sv_const(I, exc);
    /* the object is capture's own, without the traceback and context Python
     * would give it: a break must not hand it to real code (breaks.c
     * refuses one where a value it rebuilds holds it; a handler open at the
     * break is refused there too) */
    wk_vec_push(&I->raised, Py_NewRef(exc));
    free(I->exc_where);
    WkStr s = {0};
    PyObject *msg = PyObject_Str(exc);
    const char *m = msg ? PyUnicode_AsUTF8(msg) : NULL;
    if (!m) PyErr_Clear();
    wk_str_printf(&s, "%s(%s) raised at %s:%d", Py_TYPE(exc)->tp_name, m ? m : "?", cap_code_filename(I), I->f->line);
    Py_XDECREF(msg);
    I->exc_where = s.data;
    return -1;
}

int cap_raise_current(Interp *I, const char *during) {
    if (!PyErr_Occurred() || !PyErr_ExceptionMatches(PyExc_Exception)) return cap_py_failed(I, during);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    int rc = value ? cap_raise(I, value) : cap_unsupported(I, "%s failed", during);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return rc;
}

int cap_exc_matches(Interp *I, PyObject *type) {
    return I->exc && !I->reason && PyErr_GivenExceptionMatches(I->exc->obj, type);
}

void cap_exc_clear(Interp *I) { I->exc = NULL; }

/* 1 when cls's instances are made by the builtin exceptions' own __new__
 * and __init__: no Python code runs when one is made. */
static int plain_exception_class(PyObject *cls) {
    PyObject *mro = ((PyTypeObject *)cls)->tp_mro;
    for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *b = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (!(b->tp_flags & Py_TPFLAGS_HEAPTYPE)) continue;
        PyObject *d = b->tp_dict;
        if (!d) return 0;
        static const char *const hooks[] = {"__init__", "__new__", "__setattr__", "__getattribute__", "__getattr__"};
        for (size_t k = 0; k < sizeof hooks / sizeof hooks[0]; k++)
            if (PyDict_GetItemString(d, hooks[k])) return 0;
    }
    return 1;
}

Sv *cap_exc_new(Interp *I, PyObject *cls, const Args *a) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, (PyTypeObject *)PyExc_BaseException))
        return NULL;
    const char *cn = ((PyTypeObject *)cls)->tp_name;
    if (!plain_exception_class(cls)) return cap_unsupported(I, "%s() with a Python __init__ or __new__", cn), NULL;
    PyObject *t = PyTuple_New(a->npos), *kw = a->nkw ? PyDict_New() : NULL;
    if (!t || (a->nkw && !kw)) goto failed;
    for (int i = 0; i < a->npos; i++) {
        Sv *x = a->pos[i];
        if (x->kind != SV_CONST || !cap_is_plain(x->obj)) {
            Py_DECREF(t);
            Py_XDECREF(kw);
            return cap_unsupported(I, "%s() of a %s", cn, sv_desc(x)), NULL;
        }
        PyTuple_SET_ITEM(t, i, Py_NewRef(x->obj));
    }
    for (int i = 0; i < a->nkw; i++) {
        Sv *x = a->kw[i];
        if (x->kind != SV_CONST || !cap_is_plain(x->obj)) {
            Py_DECREF(t);
            Py_XDECREF(kw);
            return cap_unsupported(I, "%s() with a %s keyword", cn, sv_desc(x)), NULL;
        }
        if (PyDict_SetItem(kw, PyTuple_GET_ITEM(a->kwnames, i), x->obj) < 0) goto failed;
    }
    PyObject *e = PyObject_Call(cls, t, kw);
    Py_DECREF(t);
    Py_XDECREF(kw);
    if (!e) return cap_raise_current(I, cn), NULL; /* a bad call raises TypeError in Python too */
    return sv_const_Steal(I, e);
failed:
    Py_XDECREF(t);
    Py_XDECREF(kw);
    return cap_py_failed(I, cn), NULL;
}

/* An exception class (made with no arguments, as `raise Cls` does) or instance. */
static PyObject *exc_of_Ref(Interp *I, Sv *v) {
    if (v->kind != SV_CONST) return cap_unsupported(I, "raise of a %s", sv_desc(v)), NULL;
    if (PyExceptionInstance_Check(v->obj)) return Py_NewRef(v->obj);
    if (PyExceptionClass_Check(v->obj)) {
        Args none = {NULL, 0, NULL, NULL, 0};
        Sv *e = cap_exc_new(I, v->obj, &none);
        return e ? Py_NewRef(e->obj) : NULL;
    }
    return cap_unsupported(I, "raise of a %s (exceptions must derive from BaseException)", sv_desc(v)), NULL;
}

int cap_raise_varargs(Interp *I, int n) {
    if (n == 0) {
        if (!I->handled || !PyExceptionInstance_Check(I->handled->obj))
            return cap_unsupported(I, "bare raise outside a handler");
        return cap_raise(I, I->handled->obj);
    }
    Sv *cause = n == 2 ? sv_pop(I) : NULL, *v = sv_pop(I);
    if (!v || (n == 2 && !cause)) return -1;
    PyObject *exc = exc_of_Ref(I, v);
    if (!exc) return -1;
    if (cause) {
        PyObject *c = NULL;
        if (cause->kind == SV_CONST && cause->obj == Py_None) {
            c = NULL;
        } else if (!(c = exc_of_Ref(I, cause))) {
            Py_DECREF(exc);
            return -1;
        }
        PyException_SetCause(exc, c); /* steals c; sets __suppress_context__ */
    }
    int rc = cap_raise(I, exc);
    Py_DECREF(exc);
    return rc;
}

/* ---- handlers ---------------------------------------------------------------- */

int cap_exc_unwind(Interp *I, int *next) {
    Frame *F = I->f;
    if (!I->exc || I->reason || I->propagate) return 0;
    for (int i = 0; i < F->nexc; i++) {
        const WkExcRange *r = &F->exc[i];
        if (F->pc < r->start || F->pc >= r->end) continue;
        if (F->sp < r->depth) return cap_unsupported(I, "exception handler deeper than the stack");
        F->sp = r->depth;
        F->kwnames = NULL;
        Sv *e = I->exc;
        I->exc = NULL;
        if (r->lasti && sv_push(I, sv_const_Steal(I, PyLong_FromLong(F->pc))) < 0) return -1;
        if (sv_push(I, e) < 0) return -1;
        *next = r->handler;
        return 1;
    }
    return 0;
}

int cap_push_exc_info(Interp *I) {
    Sv *v = sv_pop(I);
    if (!v) return -1;
    if (sv_push(I, I->handled ? I->handled : sv_const(I, Py_None)) < 0) return -1;
    I->handled = v;
    return sv_push(I, v);
}

int cap_pop_except(Interp *I) {
    Sv *prev = sv_pop(I);
    if (!prev) return -1;
    I->handled = (prev->kind == SV_CONST && prev->obj == Py_None) ? NULL : prev;
    return 0;
}

int cap_check_exc_match(Interp *I) {
    Sv *type = sv_pop(I), *exc = type ? sv_peek(I, 1) : NULL;
    if (!exc) return -1;
    PyObject *t = NULL;
    if (type->kind == SV_CONST) {
        t = Py_NewRef(type->obj);
    } else if (type->kind == SV_TUPLE) {
        t = PyTuple_New(type->items.len);
        if (!t) return cap_py_failed(I, "except");
        for (int i = 0; i < type->items.len; i++) {
            Sv *x = type->items.data[i];
            if (x->kind != SV_CONST) {
                Py_DECREF(t);
                return cap_unsupported(I, "except with a %s", sv_desc(x));
            }
            PyTuple_SET_ITEM(t, i, Py_NewRef(x->obj));
        }
    } else {
        return cap_unsupported(I, "except with a %s", sv_desc(type));
    }
    int ok = PyTuple_Check(t) || PyExceptionClass_Check(t);
    for (Py_ssize_t i = 0; ok && PyTuple_Check(t) && i < PyTuple_GET_SIZE(t); i++)
        ok = PyExceptionClass_Check(PyTuple_GET_ITEM(t, i));
    if (!ok || exc->kind != SV_CONST || !PyExceptionInstance_Check(exc->obj)) {
        Py_DECREF(t);
        return cap_unsupported(I, "except clause on a %s", sv_desc(type));
    }
    int m = PyErr_GivenExceptionMatches(exc->obj, t);
    Py_DECREF(t);
    return sv_push(I, sv_const(I, m ? Py_True : Py_False));
}

int cap_reraise(Interp *I) {
    Sv *e = sv_pop(I);
    if (!e) return -1;
    if (e->kind != SV_CONST || !PyExceptionInstance_Check(e->obj)) return cap_unsupported(I, "re-raise of a %s", sv_desc(e));
    I->exc = e; /* the same object again: no new context, no new location */
    return -1;
}

/* WITH_EXCEPT_START: stack [exit, lasti, prev_exc, exc]; calls
 * exit(type(exc), exc, None) and pushes what it returns. */
int cap_with_except_start(Interp *I) {
    Sv *exc = sv_peek(I, 1), *exit = exc ? sv_peek(I, 4) : NULL;
    if (!exit) return -1;
    if (exc->kind != SV_CONST || !PyExceptionInstance_Check(exc->obj))
        return cap_unsupported(I, "with-statement exit on a %s", sv_desc(exc));
    Sv *args[3] = {sv_const(I, (PyObject *)Py_TYPE(exc->obj)), exc, sv_const(I, Py_None)};
    Args a = {args, 3, NULL, NULL, 0};
    Sv *r = cap_call(I, exit, &a);
    return r ? sv_push(I, r) : -1;
}
