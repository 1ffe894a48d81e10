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
 * Not modelled (the call is captured as before, which breaks the graph): a
 * tensor or any other non-plain argument, exc_info, stack_info or stacklevel
 * other than their defaults (they read the exception being handled or the
 * Python stack at the call), and a call while a global write is pending
 * (replayed after the appends, a handler would not see it). */
#include "../interp.h"

static PyObject *is_log_method_fn, *log_call_site_fn; /* wick._capture_meta's */
static PyTypeObject *logger_type;                     /* logging.Logger, once logging is imported */

/* 1 when o is a logging.Logger (logging imported), else 0. */
static int is_logger(PyObject *o) {
    if (!logger_type) {
        PyObject *name = PyUnicode_FromString("logging");
        PyObject *m = name ? PyImport_GetModule(name) : NULL;
        Py_XDECREF(name);
        PyObject *t = m ? PyObject_GetAttrString(m, "Logger") : NULL;
        Py_XDECREF(m);
        PyErr_Clear();
        if (!t || !PyType_Check(t)) {
            Py_XDECREF(t);
            return 0;
        }
        logger_type = (PyTypeObject *)t; /* kept: logging is never unloaded */
    }
    return PyObject_TypeCheck(o, logger_type);
}

static int load_helpers(void) {
    if (is_log_method_fn) return 0;
    PyObject *m = PyImport_ImportModule("wick._capture_meta");
    PyObject *is = m ? PyObject_GetAttrString(m, "is_log_method") : NULL;
    PyObject *site = m ? PyObject_GetAttrString(m, "log_call_site") : NULL;
    Py_XDECREF(m);
    if (!is || !site) {
        Py_XDECREF(is);
        Py_XDECREF(site);
        return -1;
    }
    is_log_method_fn = is;
    log_call_site_fn = site;
    return 0;
}

int cap_log_method(PyObject *self, PyObject *fn) {
    if (!fn || !is_logger(self) || load_helpers() < 0) {
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

Sv *cap_log_call(Interp *I, PyObject *fn, const Args *a) {
    if (a->npos < 1 || a->pos[0]->kind != SV_CONST || !cap_log_method(a->pos[0]->obj, fn)) return NULL;
    int hashed = !PyFunction_Check(fn); /* the lru_cache wrappers */
    /* Logger.log raises on a level that is no int: where the frame calls it */
    if (!hashed && PyUnicode_CompareWithASCIIString(((PyFunctionObject *)fn)->func_name, "log") == 0 &&
        (a->npos < 2 || a->pos[1]->kind != SV_CONST || !PyLong_Check(a->pos[1]->obj)))
        return NULL;
    for (int i = 1; i < a->npos; i++)
        if (!replayable(a->pos[i], hashed)) return NULL;
    for (int i = 0; i < a->nkw; i++) {
        if (!replayable(a->kw[i], hashed)) return NULL;
        if (!keyword_default(PyTuple_GET_ITEM(a->kwnames, i), a->kw[i]->obj)) return NULL;
    }
    Frame *F = I->f;
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
    int line = F->line > 0 ? F->line : F->code->co_firstlineno;
    PyObject *site = kwargs ? PyObject_CallFunction(log_call_site_fn, "OiOO", F->code->co_filename, line,
                                                    F->code->co_name, F->code->co_qualname)
                            : NULL;
    if (!site) {
        Py_XDECREF(args);
        Py_XDECREF(kwargs);
        return cap_py_failed(I, "a logging call"), NULL;
    }
    int rc = cap_log_effect(I, site, Py_NewRef(fn), args, kwargs);
    if (rc < 0) return NULL;
    if (rc == 0) return NULL; /* not deferred: captured as before */
    return sv_const(I, Py_None);
}
