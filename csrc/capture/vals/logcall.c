/* vals/logcall.c — calls of Python logging methods on a logger pinned by
 * identity (a module's `logger = logging.getLogger(__name__)`):
 * logging.Logger's debug/info/warning/error/critical/log and transformers'
 * warning_advice, warning_once and info_once (functools.lru_cache wrappers),
 * as their modules define them (wick._capture_meta.is_log_method). Owns
 * which attributes of a logger are such methods and the model of their call.
 *
 * Nothing runs at capture time: such a call only logs and returns None, so
 * capture keeps it, with its plain arguments, as a side effect that the
 * transformed code makes for real after the graph, in program order with the
 * frame's other replayed effects (breaks.c, cap_log_effect). Made for real on
 * every call, it sees the logger's level, filters and handlers as they are
 * then, and warning_once's cache keeps a message to one record. The call goes
 * through a function made at the call's file, line and function name
 * (wick._capture_meta.log_call_site), so the record's location is eager's.
 *
 * The logger may also be a logging.LoggerAdapter whose process() is
 * logging's own, be reached through an argument's attribute
 * (`self.logger.info(...)`: pinned by an identity guard on that path), or be
 * the root logger of logging's module functions (`logging.warning(...)`).
 * A logger's isEnabledFor(level) and getEffectiveLevel() are answered at
 * capture time and become constants, guarded by asking again on every call
 * (wick._capture_meta.log_query_guard): `if logger.isEnabledFor(DEBUG):`
 * takes eager's branch while the logger's level, its parents', its
 * disabled flag and logging.disable() give the same answer.
 *
 * Not modelled (the call is captured as before, which breaks the graph): a
 * tensor or any other non-plain argument, exc_info, stack_info or stacklevel
 * other than their defaults (they read the exception being handled or the
 * Python stack at the call), and a call while a global write is pending
 * (replayed after the appends, a handler would not see it). */
#include "../interp.h"

/* wick._capture_meta's */
static PyObject *is_log_method_fn, *log_call_kind_fn, *log_call_site_fn, *log_query_guard_fn, *warn_guard_fn,
    *is_logging_internal_fn;
/* logging.Logger and logging.LoggerAdapter, once logging is imported (kept:
 * logging is never unloaded), and LoggerAdapter.process */
static PyTypeObject *logger_type, *adapter_type;
static PyObject *adapter_process;

static int load_logging_types(void) {
    if (logger_type) return 1;
    PyObject *name = PyUnicode_FromString("logging");
    PyObject *m = name ? PyImport_GetModule(name) : NULL;
    Py_XDECREF(name);
    PyObject *t = m ? PyObject_GetAttrString(m, "Logger") : NULL;
    PyObject *a = m ? PyObject_GetAttrString(m, "LoggerAdapter") : NULL;
    PyObject *p = a ? PyObject_GetAttrString(a, "process") : NULL;
    Py_XDECREF(m);
    PyErr_Clear();
    if (!t || !PyType_Check(t) || !a || !PyType_Check(a) || !p) {
        Py_XDECREF(t);
        Py_XDECREF(a);
        Py_XDECREF(p);
        return 0;
    }
    logger_type = (PyTypeObject *)t;
    adapter_type = (PyTypeObject *)a;
    adapter_process = p;
    return 1;
}

/* 1 when o is a logging.Logger or logging.LoggerAdapter (logging
 * imported), else 0. */
int cap_is_logger(PyObject *o) {
    return load_logging_types() && (PyObject_TypeCheck(o, logger_type) || PyObject_TypeCheck(o, adapter_type));
}

static int load_helpers(void) {
    if (is_log_method_fn) return 0;
    PyObject *m = PyImport_ImportModule("wick._capture_meta");
    PyObject *is = m ? PyObject_GetAttrString(m, "is_log_method") : NULL;
    PyObject *kind = m ? PyObject_GetAttrString(m, "log_call_kind") : NULL;
    PyObject *site = m ? PyObject_GetAttrString(m, "log_call_site") : NULL;
    PyObject *query = m ? PyObject_GetAttrString(m, "log_query_guard") : NULL;
    PyObject *warn = m ? PyObject_GetAttrString(m, "warn_action_guard") : NULL;
    PyObject *internal = m ? PyObject_GetAttrString(m, "is_logging_internal") : NULL;
    Py_XDECREF(m);
    if (!is || !kind || !site || !query || !warn || !internal) {
        Py_XDECREF(warn);
        Py_XDECREF(internal);
        Py_XDECREF(is);
        Py_XDECREF(kind);
        Py_XDECREF(site);
        Py_XDECREF(query);
        return -1;
    }
    is_log_method_fn = is;
    log_call_kind_fn = kind;
    log_call_site_fn = site;
    log_query_guard_fn = query;
    warn_guard_fn = warn;
    is_logging_internal_fn = internal;
    return 0;
}

static PyObject *process_name(void) {
    static PyObject *name;
    if (!name) name = PyUnicode_InternFromString("process");
    return name;
}

enum { NOT_LOGGING, LOG_METHOD, ROOT_FUNCTION, LOGGER_QUERY, WARN };

/* Which of the enum above a call of fn is (wick._capture_meta.log_call_kind). */
static int log_call_kind(PyObject *fn) {
    if (!fn || load_helpers() < 0) {
        PyErr_Clear();
        return NOT_LOGGING;
    }
    PyObject *r = PyObject_CallOneArg(log_call_kind_fn, fn);
    long kind = r ? PyLong_AsLong(r) : NOT_LOGGING;
    Py_XDECREF(r);
    if (kind < 0 || PyErr_Occurred()) {
        PyErr_Clear();
        return NOT_LOGGING;
    }
    return (int)kind;
}

int cap_log_method(PyObject *self, PyObject *fn) {
    if (!fn || !cap_is_logger(self) || load_helpers() < 0) {
        PyErr_Clear();
        return 0;
    }
    PyObject *r = PyObject_CallOneArg(is_log_method_fn, fn);
    int yes = r ? PyObject_IsTrue(r) : 0;
    Py_XDECREF(r);
    if (yes < 0 || !r) {
        PyErr_Clear();
        return 0;
    }
    return yes;
}

/* A keyword argument logging reads beyond the record's own data: allowed
 * only with its default value. 1 when `value` is that, 0 when not. */
static int keyword_default(PyObject *name, PyObject *value) {
    if (PyUnicode_CompareWithASCIIString(name, "exc_info") == 0) return value == Py_None || value == Py_False;
    if (PyUnicode_CompareWithASCIIString(name, "stack_info") == 0) return value == Py_False;
    if (PyUnicode_CompareWithASCIIString(name, "stacklevel") == 0)
        return PyLong_CheckExact(value) && PyLong_AsLong(value) == 1;
    return 1;
}

/* A plain constant the replayed call receives as it is; hashable when the
 * method is lru_cache'd (an unhashable argument raises there). */
static int replayable(const Sv *s, int hashed) {
    if (!s || s->kind != SV_CONST || !cap_is_plain(s->obj)) return 0;
    if (hashed && PyObject_Hash(s->obj) == -1) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* The logger a method is called on (a->pos[0]): a pinned constant or an
 * object reached from an argument; an adapter only with logging's own
 * process(). Borrowed, or NULL when it is neither. */
static PyObject *called_logger(const Args *a) {
    if (a->npos < 1) return NULL;
    Sv *s = a->pos[0];
    if (!s->obj || !(s->kind == SV_CONST || (s->kind == SV_OPAQUE && s->arg >= 0)) || !cap_is_logger(s->obj))
        return NULL;
    if (PyObject_TypeCheck(s->obj, adapter_type) && _PyType_Lookup(Py_TYPE(s->obj), process_name()) != adapter_process)
        return NULL;
    return s->obj;
}

/* Keeps the logger found by called_logger as it is now: an object reached
 * from an argument by an identity guard on its path (a constant is pinned
 * already), an adapter's process() by a guard on its class. */
static void pin_logger(Interp *I, const Args *a) {
    Sv *s = a->pos[0];
    if (s->kind == SV_OPAQUE) wk_guard_id_at(I->guards, s->arg, s->path, s->obj);
    if (PyObject_TypeCheck(s->obj, adapter_type))
        wk_guard_type_attr_is(I->guards, Py_TYPE(s->obj), process_name(), adapter_process);
}

/* logger.isEnabledFor(level) / getEffectiveLevel() with plain arguments:
 * the answer now, a constant guarded by asking again on every call. NULL
 * without a reason when not answerable here. */
static Sv *logger_query(Interp *I, PyObject *fn, const Args *a) {
    if (!called_logger(a) || a->nkw) return NULL;
    for (int i = 1; i < a->npos; i++)
        if (!replayable(a->pos[i], 0)) return NULL;
    PyObject *args = PyTuple_New(a->npos - 1);
    for (int i = 1; args && i < a->npos; i++) PyTuple_SET_ITEM(args, i - 1, Py_NewRef(a->pos[i]->obj));
    PyObject *call = args ? PyTuple_New(a->npos) : NULL;
    for (int i = 0; call && i < a->npos; i++) PyTuple_SET_ITEM(call, i, Py_NewRef(a->pos[i]->obj));
    PyObject *answer = call ? PyObject_Call(fn, call, NULL) : NULL;
    Py_XDECREF(call);
    if (!answer || !cap_is_plain(answer)) {
        /* a level that is no int raises where the frame asks: captured as before */
        PyErr_Clear();
        Py_XDECREF(args);
        Py_XDECREF(answer);
        return NULL;
    }
    PyObject *check = PyObject_CallFunctionObjArgs(log_query_guard_fn, fn, a->pos[0]->obj, args, answer, NULL);
    Py_DECREF(args);
    if (!check) {
        Py_DECREF(answer);
        return cap_py_failed(I, "a logger query"), NULL;
    }
    pin_logger(I, a);
    wk_guard_call_is(I->guards, check, Py_True);
    Py_DECREF(check);
    return sv_const_Steal(I, answer);
}

/* warnings.warn(message, category=None, stacklevel=1, source=None) with a
 * str message, a Warning subclass (or None) and the defaults otherwise (a
 * stacklevel above 1 names a frame the replay does not stand in): the
 * no-argument check that the filters do not make it an exception, new, or
 * NULL (with no Python error) when not such a call or when they do now. */
static PyObject *warn_check(Interp *I, const Args *a, int line) {
    static const char *const names[] = {"message", "category", "stacklevel", "source"};
    Sv *given[4] = {0};
    if (a->npos > 4) return NULL;
    for (int i = 0; i < a->npos; i++) given[i] = a->pos[i];
    for (int k = 0; k < a->nkw; k++) {
        int found = -1;
        for (int i = 0; i < 4; i++)
            if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(a->kwnames, k), names[i]) == 0) found = i;
        if (found < 0 || given[found]) return NULL;
        given[found] = a->kw[k];
    }
    for (int i = 0; i < 4; i++)
        if (given[i] && (given[i]->kind != SV_CONST || !given[i]->obj)) return NULL;
    PyObject *message = given[0] ? given[0]->obj : NULL;
    PyObject *category = given[1] ? given[1]->obj : Py_None;
    if (!message || !PyUnicode_CheckExact(message)) return NULL;
    if (category == Py_None) category = PyExc_UserWarning;
    if (!PyType_Check(category) || !PyType_IsSubtype((PyTypeObject *)category, (PyTypeObject *)PyExc_Warning))
        return NULL;
    if (given[2] && !(PyLong_CheckExact(given[2]->obj) && PyLong_AsLong(given[2]->obj) == 1)) return NULL;
    if (given[3] && given[3]->obj != Py_None) return NULL;
    PyObject *check = PyObject_CallFunction(warn_guard_fn, "OOOi", message, category, I->f->globals, line);
    PyObject *ok = check ? PyObject_CallNoArgs(check) : NULL;
    if (ok != Py_True) {
        PyErr_Clear();
        Py_XDECREF(check);
        check = NULL;
    }
    Py_XDECREF(ok);
    return check;
}

/* The frame a record made now would name (logging's findCaller steps
 * over logging's own frames: a call inlined from LoggerAdapter.log is the
 * adapter's caller's), or NULL when none of the capture's frames is one. */
static Frame *record_frame(Interp *I) {
    for (Frame *F = I->f; F; F = F->parent) {
        PyObject *r = PyObject_CallOneArg(is_logging_internal_fn, F->code->co_filename);
        int internal = r ? PyObject_IsTrue(r) : -1;
        Py_XDECREF(r);
        if (internal < 0) {
            PyErr_Clear();
            return NULL;
        }
        if (!internal) return F;
    }
    return NULL;
}

Sv *cap_log_call(Interp *I, PyObject *fn, const Args *a) {
    int kind = log_call_kind(fn);
    if (kind == NOT_LOGGING) return NULL;
    if (kind == LOGGER_QUERY) return logger_query(I, fn, a);
    /* warnings.warn at stacklevel 1 names the calling frame, whatever its file */
    Frame *F = kind == WARN ? I->f : record_frame(I);
    if (!F) return NULL;
    int line = F->line > 0 ? F->line : F->code->co_firstlineno;
    PyObject *warn_ok = NULL; /* WARN: the check the deferred call needs on every call */
    if (kind == WARN && !(warn_ok = warn_check(I, a, line))) return NULL;
    if (kind == LOG_METHOD && !called_logger(a)) return NULL;
    int first = kind == LOG_METHOD; /* the record's arguments start after the logger */
    int hashed = kind != WARN && !PyFunction_Check(fn); /* the lru_cache wrappers */
    /* Logger.log raises on a level that is no int: where the frame calls it */
    if (!hashed && PyUnicode_CompareWithASCIIString(((PyFunctionObject *)fn)->func_name, "log") == 0 &&
        (a->npos < first + 1 || a->pos[first]->kind != SV_CONST || !PyLong_Check(a->pos[first]->obj)))
        return NULL;
    for (int i = first; kind != WARN && i < a->npos; i++)
        if (!replayable(a->pos[i], hashed)) return NULL;
    for (int i = 0; kind != WARN && i < a->nkw; i++) {
        if (!replayable(a->kw[i], hashed)) return NULL;
        if (!keyword_default(PyTuple_GET_ITEM(a->kwnames, i), a->kw[i]->obj)) return NULL;
    }
    PyObject *args = PyTuple_New(a->npos);
    PyObject *kwargs = args ? PyTuple_New(a->nkw) : NULL;
    for (int i = 0; kwargs && i < a->npos; i++) PyTuple_SET_ITEM(args, i, Py_NewRef(a->pos[i]->obj));
    for (int i = 0; kwargs && i < a->nkw; i++) {
        PyObject *pair = PyTuple_Pack(2, PyTuple_GET_ITEM(a->kwnames, i), a->kw[i]->obj);
        if (!pair) {
            Py_CLEAR(kwargs);
            break;
        }
        PyTuple_SET_ITEM(kwargs, i, pair);
    }
    PyObject *site = kwargs ? PyObject_CallFunction(log_call_site_fn, "OiOOO", F->code->co_filename, line,
                                                    F->code->co_name, F->code->co_qualname,
                                                    kind == WARN ? F->globals : Py_None)
                            : NULL;
    if (!site) {
        Py_XDECREF(args);
        Py_XDECREF(kwargs);
        Py_XDECREF(warn_ok);
        return cap_py_failed(I, "a logging call"), NULL;
    }
    int rc = cap_log_effect(I, site, Py_NewRef(fn), args, kwargs);
    if (rc <= 0) { /* rc 0: not deferred, captured as before */
        Py_XDECREF(warn_ok);
        return NULL;
    }
    if (first) pin_logger(I, a);
    if (warn_ok) wk_guard_call_is(I->guards, warn_ok, Py_True);
    Py_XDECREF(warn_ok);
    return sv_const(I, Py_None);
}
