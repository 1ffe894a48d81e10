/* hook.c — the PEP 523 frame hook and everything around it: per-thread
 * enabling, the per-code-object cache of compiled entries in co_extra, the
 * cache-miss path into the frame compiler, and wick._C.CompiledFunction
 * (what wick.compile returns). Running a different code object in place of a
 * frame is version-specific and lives in frame.c.
 *
 * Invariants:
 *   - the hook is installed only while some thread has wick enabled, and it
 *     chains to the evaluator that was installed before it;
 *   - only code objects marked in co_extra (by CompiledFunction or
 *     wk_hook_mark_code) are looked at; every other frame costs one flag test,
 *     a few field reads and one co_extra lookup;
 *   - guards and the compiler run with the hook suspended on this thread, and
 *     cache entries stay alive while any hook invocation walks them (reset()
 *     during a guard check defers the frees).
 */
#include "capture.h"
#include "frame.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <structmember.h>

#if PY_VERSION_HEX >= 0x030C0000
#define REQUEST_EXTRA_INDEX PyUnstable_Eval_RequestCodeExtraIndex
#define CODE_GET_EXTRA PyUnstable_Code_GetExtra
#define CODE_SET_EXTRA PyUnstable_Code_SetExtra
#else
#define REQUEST_EXTRA_INDEX _PyEval_RequestCodeExtraIndex
#define CODE_GET_EXTRA _PyCode_GetExtra
#define CODE_SET_EXTRA _PyCode_SetExtra
#endif

/* Per-code-object state, owned by the code object's co_extra slot. */
typedef struct CodeState {
    PyObject *options;       /* the dict given to wick.compile (strong) */
    WkCacheEntry *entries;   /* newest first; a cache-limit entry, if any, is last */
    int n_entries;           /* entries made by the compiler (limit entry not counted) */
    int busy;                /* hook invocations currently walking `entries` */
    WkCacheEntry *graveyard; /* entries dropped by reset() while busy */
    struct CodeState *prev, *next; /* every live state, for reset() */
} CodeState;

static Py_ssize_t extra_index = -1;
static CodeState *all_states;
/* Per-thread state, one struct so each function pays for one TLS address
 * lookup (a call in a shared object). */
typedef struct {
    int enabled;    /* set_enabled / CompiledFunction */
    int suspended;  /* inside our own guard checks and compiles */
    int registered; /* exit_key holds &tls for this thread */
} ThreadFlags;
static _Thread_local ThreadFlags tls;
static PyInterpreterState *hook_interp; /* the interpreter wick._C was loaded in */
static int n_enabled;                   /* threads with tls.enabled set (GIL-protected) */
static int installed, shutting_down;
static WkEvalFn prev_eval;
static WkFrameCompiler real_compiler;
static PyObject *test_compiler; /* strong, or NULL */
static struct {
    unsigned long long calls, hits, misses, compiles, eager_runs;
} stats;

/* ---- cache entries ------------------------------------------------------ */

void wk_cache_entry_free(WkCacheEntry *e) {
    if (!e) return;
    if (e->free_guards && e->guard_state) e->free_guards(e->guard_state);
    Py_XDECREF(e->code);
    Py_XDECREF(e->info);
    free(e);
}

static void free_entry_list(WkCacheEntry *e) {
    while (e) {
        WkCacheEntry *next = e->next;
        wk_cache_entry_free(e);
        e = next;
    }
}

/* An entry that always passes and runs the frame eagerly; reason goes to info. */
static WkCacheEntry *eager_entry(const char *reason) {
    WkCacheEntry *e = wk_xcalloc(1, sizeof(WkCacheEntry));
    e->info = Py_BuildValue("{ss}", "reason", reason);
    if (!e->info) PyErr_Clear(); /* the reason is a nicety; the entry still works */
    return e;
}

static void set_reason(WkCacheEntry *e, const char *reason) {
    if (!e->info || !PyDict_Check(e->info)) {
        Py_XDECREF(e->info);
        e->info = PyDict_New();
    }
    PyObject *s = PyUnicode_FromString(reason);
    if (!e->info || !s || PyDict_SetItemString(e->info, "reason", s) < 0) PyErr_Clear();
    Py_XDECREF(s);
}

/* ---- code states -------------------------------------------------------- */

/* Detaches st's entries: to its graveyard while a hook walks them, else
 * onto *to_free. Touches no Python, so callers can walk all_states safely and
 * free afterwards (freeing runs destructors that may free code states). */
static void detach_entries(CodeState *st, WkCacheEntry **to_free) {
    WkCacheEntry *e = st->entries;
    st->entries = NULL;
    st->n_entries = 0;
    if (!e) return;
    WkCacheEntry **tail = st->busy ? &st->graveyard : to_free;
    while (*tail) tail = &(*tail)->next;
    *tail = e;
}

/* co_extra free function: runs at code deallocation, also for empty slots. */
static void state_free(void *p) {
    CodeState *st = p;
    if (!st) return;
    if (st->prev) st->prev->next = st->next;
    else all_states = st->next;
    if (st->next) st->next->prev = st->prev;
    free_entry_list(st->entries);
    free_entry_list(st->graveyard);
    Py_XDECREF(st->options);
    free(st);
}

static CodeState *state_get(PyCodeObject *co) {
    void *p = NULL;
    if (extra_index < 0 || CODE_GET_EXTRA((PyObject *)co, extra_index, &p) < 0) {
        PyErr_Clear();
        return NULL;
    }
    return p;
}

int wk_hook_mark_code(PyCodeObject *code, PyObject *options) {
    if (extra_index < 0) {
        PyErr_SetString(PyExc_RuntimeError, "wick: the frame hook is not initialised");
        return -1;
    }
    if (!options) options = Py_None;
    CodeState *st = state_get(code);
    if (st) {
        Py_SETREF(st->options, Py_NewRef(options));
        return 0;
    }
    st = wk_xcalloc(1, sizeof(CodeState));
    st->options = Py_NewRef(options);
    if (CODE_SET_EXTRA((PyObject *)code, extra_index, st) < 0) {
        Py_DECREF(st->options);
        free(st);
        return -1;
    }
    st->next = all_states;
    if (all_states) all_states->prev = st;
    all_states = st;
    return 0;
}

/* ---- enabling ----------------------------------------------------------- */

_Thread_local PyFunctionObject *wk_hook_checking_fn;

static PyObject *wk_eval(PyThreadState *ts, struct _PyInterpreterFrame *f, int throwflag);

static void update_install(void) {
    if (!WK_FRAME_CAN_TRANSFORM) return; /* 3.13+: nothing to do in a hook */
    PyInterpreterState *interp = hook_interp;
    if (n_enabled > 0 && !installed && !shutting_down) {
        WkEvalFn cur = (WkEvalFn)_PyInterpreterState_GetEvalFrameFunc(interp);
        prev_eval = cur == wk_eval ? (WkEvalFn)_PyEval_EvalFrameDefault : cur;
        _PyInterpreterState_SetEvalFrameFunc(interp, (_PyFrameEvalFunction)wk_eval);
        installed = 1;
    } else if ((n_enabled == 0 || shutting_down) && installed) {
        /* someone may have installed their own hook over ours: leave theirs */
        if ((WkEvalFn)_PyInterpreterState_GetEvalFrameFunc(interp) == wk_eval)
            _PyInterpreterState_SetEvalFrameFunc(interp, (_PyFrameEvalFunction)prev_eval);
        installed = 0;
    }
}

/* A thread that exits with wick enabled must not keep the hook installed
 * for everyone: a pthread key destructor (no GIL there) counts it, and the
 * next set_enabled under the GIL takes it off n_enabled. */
static pthread_key_t exit_key;
static int exit_key_ok;
static atomic_int exited_enabled;

static void thread_exit(void *p) {
    ThreadFlags *t = p;
    if (t && t->enabled) atomic_fetch_add(&exited_enabled, 1);
}

static int set_enabled(int on) {
    ThreadFlags *t = &tls;
    int was = t->enabled;
    on = !!on;
    if (on == was) return was;
    if (on && !t->registered && exit_key_ok) {
        t->registered = 1;
        pthread_setspecific(exit_key, t);
    }
    t->enabled = on;
    n_enabled += on ? 1 : -1;
    if (atomic_load_explicit(&exited_enabled, memory_order_relaxed))
        n_enabled -= atomic_exchange(&exited_enabled, 0);
    if (n_enabled < 0) n_enabled = 0;
    update_install();
    return was;
}

/* ---- the hook ----------------------------------------------------------- */

static void log_frame(const char *what, PyCodeObject *co, const char *detail) {
    const char *name = PyUnicode_AsUTF8(co->co_qualname);
    const char *file = PyUnicode_AsUTF8(co->co_filename);
    if (!name || !file) PyErr_Clear();
    wk_log(WK_LOG_RECOMPILES, "%s %s (%s:%d): %s", what, name ? name : "?", file ? file : "?",
           co->co_firstlineno, detail);
}

static WkCacheEntry *call_test_compiler(PyCodeObject *co, PyObject *const *args, int nargs);

/* Cache miss: makes and prepends an entry, or NULL with an exception. */
static WkCacheEntry *compile_entry(CodeState *st, struct _PyInterpreterFrame *f, PyCodeObject *co,
                                   PyObject *const *args, int nargs, const char *why) {
    long limit = wk_env_int(WK_ENV_CACHE_LIMIT);
    if (limit < 1) limit = 8;
    if (st->n_entries >= limit) {
        char reason[64];
        snprintf(reason, sizeof reason, "cache limit reached (%ld entries)", limit);
        WkCacheEntry *e = eager_entry(reason);
        WkCacheEntry **tail = &st->entries;
        while (*tail) tail = &(*tail)->next;
        *tail = e;
        if (wk_log_on(WK_LOG_RECOMPILES)) log_frame("running eagerly", co, reason);
        return e;
    }
    if (st->entries && wk_log_on(WK_LOG_RECOMPILES))
        log_frame("recompiling", co, why ? why : "guards failed");
    stats.compiles++;
    WkCacheEntry *e;
    if (test_compiler) {
        e = call_test_compiler(co, args, nargs);
    } else if (real_compiler) {
        e = real_compiler(wk_frame_func_Borrow(f), co, args, nargs, st->options);
    } else {
        e = eager_entry("no frame compiler installed");
    }
    if (!e) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_SystemError, "wick: frame compiler failed without an exception");
        return NULL;
    }
    if (PyErr_Occurred()) {
        /* an entry and a pending exception: the entry wins, the stray exception
         * must not leak into the user's frame */
        PyErr_Clear();
    }
    e->next = NULL;
    if (e->code) {
        const char *bad = PyCode_Check(e->code) ? wk_frame_incompatible(co, (PyCodeObject *)e->code)
                                                : "transformed code is not a code object";
        if (bad) {
            Py_CLEAR(e->code);
            set_reason(e, bad);
            if (wk_log_on(WK_LOG_RECOMPILES)) log_frame("running eagerly", co, bad);
        }
    }
    e->next = st->entries;
    st->entries = e;
    st->n_entries++;
    return e;
}

static void state_release(CodeState *st) {
    if (--st->busy == 0 && st->graveyard) {
        WkCacheEntry *g = st->graveyard;
        st->graveyard = NULL;
        free_entry_list(g);
    }
}

static PyObject *wk_eval(PyThreadState *ts, struct _PyInterpreterFrame *f, int throwflag) {
    WkEvalFn prev = prev_eval ? prev_eval : (WkEvalFn)_PyEval_EvalFrameDefault;
    ThreadFlags *t = &tls;
    if (!t->enabled || t->suspended || shutting_down) return prev(ts, f, throwflag);
    PyCodeObject *co = wk_frame_code_if_eligible(ts, f, throwflag);
    if (!co) return prev(ts, f, throwflag);
    CodeState *st = state_get(co);
    if (!st) return prev(ts, f, throwflag);

    stats.calls++;
    PyObject *const *args = wk_frame_args(f);
    int nargs = wk_frame_nargs(co);
    PyObject *globals = wk_frame_globals_Borrow(f);
    PyObject *code = NULL;
    const char *why = NULL;
    WkCacheEntry *hit = NULL;
    st->busy++;
    t->suspended++;
    wk_hook_checking_fn = wk_frame_func_Borrow(f); /* for guards on the function's closure */
    for (WkCacheEntry *e = st->entries; e; e = e->next) {
        const char *w = NULL;
        int r = e->check ? e->check(e->guard_state, args, nargs, globals, &w) : 1;
        if (r < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_SystemError, "wick: guard check failed without an exception");
            goto error;
        }
        if (r > 0) {
            hit = e;
            break;
        }
        if (!why) why = w;
    }
    if (hit) {
        stats.hits++;
    } else {
        stats.misses++;
        hit = compile_entry(st, f, co, args, nargs, why);
        if (!hit) goto error;
    }
    code = Py_XNewRef(hit->code);
    t->suspended--;
    state_release(st);
    if (code) {
        PyObject *res = wk_frame_run_code(ts, f, (PyCodeObject *)code);
        Py_DECREF(code);
        return res;
    }
    stats.eager_runs++;
    return prev(ts, f, 0);
error:
    t->suspended--;
    state_release(st);
    return wk_frame_fail(ts, f);
}

void wk_hook_set_compiler(WkFrameCompiler compiler) { real_compiler = compiler; }

/* ---- the test compiler -------------------------------------------------- */

static int test_check(void *guard_state, PyObject *const *args, int nargs, PyObject *globals,
                      const char **why) {
    (void)globals;
    PyObject *guard = guard_state;
    PyObject *t = PyTuple_New(nargs);
    if (!t) return -1;
    for (int i = 0; i < nargs; i++) PyTuple_SET_ITEM(t, i, Py_NewRef(args[i] ? args[i] : Py_None));
    PyObject *r = PyObject_CallOneArg(guard, t);
    Py_DECREF(t);
    if (!r) return -1;
    int ok = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (ok == 0 && why) *why = "test guard returned false";
    return ok;
}

static void test_free_guard(void *guard_state) { Py_XDECREF((PyObject *)guard_state); }

static WkCacheEntry *call_test_compiler(PyCodeObject *co, PyObject *const *args, int nargs) {
    PyObject *t = PyTuple_New(nargs), *r = NULL;
    WkCacheEntry *e = NULL;
    if (!t) return NULL;
    for (int i = 0; i < nargs; i++) PyTuple_SET_ITEM(t, i, Py_NewRef(args[i] ? args[i] : Py_None));
    PyObject *compiler = Py_NewRef(test_compiler); /* it may reset itself */
    r = PyObject_CallFunctionObjArgs(compiler, (PyObject *)co, t, NULL);
    Py_DECREF(compiler);
    if (!r) goto done;
    if (r == Py_None) {
        e = eager_entry("test compiler declined");
        goto done;
    }
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2) {
        PyErr_SetString(PyExc_TypeError, "test compiler must return None or (code_or_None, guard_or_None)");
        goto done;
    }
    PyObject *nc = PyTuple_GET_ITEM(r, 0), *guard = PyTuple_GET_ITEM(r, 1);
    if (nc != Py_None && !PyCode_Check(nc)) {
        PyErr_SetString(PyExc_TypeError, "test compiler: first item must be a code object or None");
        goto done;
    }
    e = wk_xcalloc(1, sizeof(WkCacheEntry));
    if (nc != Py_None) e->code = Py_NewRef(nc);
    if (guard != Py_None) {
        e->check = test_check;
        e->free_guards = test_free_guard;
        e->guard_state = Py_NewRef(guard);
    }
done:
    Py_DECREF(t);
    Py_XDECREF(r);
    return e;
}

/* ---- CompiledFunction --------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *fn;
    PyObject *options;
    PyObject *dict;
    vectorcallfunc vectorcall;
} CompiledFunction;

static PyObject *cf_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
    CompiledFunction *cf = (CompiledFunction *)self;
    int was = set_enabled(1);
    PyObject *res = PyObject_Vectorcall(cf->fn, args, nargsf, kwnames);
    set_enabled(was);
    return res;
}

static PyCodeObject *code_of(PyObject *fn) {
    if (PyMethod_Check(fn)) fn = PyMethod_GET_FUNCTION(fn);
    if (PyFunction_Check(fn)) return (PyCodeObject *)PyFunction_GET_CODE(fn);
    return NULL;
}

static PyObject *cf_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"fn", "options", NULL};
    PyObject *fn, *options = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:CompiledFunction", kwlist, &fn, &options))
        return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "CompiledFunction: %R is not callable", fn);
        return NULL;
    }
    PyCodeObject *co = code_of(fn);
    if (co && wk_hook_mark_code(co, options) < 0) return NULL;
    CompiledFunction *cf = (CompiledFunction *)type->tp_alloc(type, 0);
    if (!cf) return NULL;
    cf->fn = Py_NewRef(fn);
    cf->options = Py_NewRef(options);
    cf->vectorcall = cf_vectorcall;
    cf->dict = PyDict_New();
    if (!cf->dict || PyDict_SetItemString(cf->dict, "__wrapped__", fn) < 0) goto fail;
    static const char *const copied[] = {"__module__", "__name__", "__qualname__", "__doc__"};
    for (size_t i = 0; i < sizeof(copied) / sizeof(copied[0]); i++) {
        PyObject *v = PyObject_GetAttrString(fn, copied[i]);
        if (!v) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) goto fail;
            PyErr_Clear();
            continue;
        }
        int rc = PyDict_SetItemString(cf->dict, copied[i], v);
        Py_DECREF(v);
        if (rc < 0) goto fail;
    }
    return (PyObject *)cf;
fail:
    Py_DECREF(cf);
    return NULL;
}

static int cf_traverse(CompiledFunction *cf, visitproc visit, void *arg) {
    Py_VISIT(cf->fn);
    Py_VISIT(cf->options);
    Py_VISIT(cf->dict);
    return 0;
}

static int cf_clear(CompiledFunction *cf) {
    Py_CLEAR(cf->fn);
    Py_CLEAR(cf->options);
    Py_CLEAR(cf->dict);
    return 0;
}

static void cf_dealloc(CompiledFunction *cf) {
    PyObject_GC_UnTrack(cf);
    cf_clear(cf);
    Py_TYPE(cf)->tp_free((PyObject *)cf);
}

static PyObject *cf_descr_get(PyObject *self, PyObject *obj, PyObject *type) {
    (void)type;
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *cf_repr(CompiledFunction *cf) {
    return PyUnicode_FromFormat("<wick.CompiledFunction of %R>", cf->fn);
}

static PyMemberDef cf_members[] = {
    {"_fn", T_OBJECT, offsetof(CompiledFunction, fn), READONLY, "the wrapped callable"},
    {"options", T_OBJECT, offsetof(CompiledFunction, options), READONLY, "options given to wick.compile"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef cf_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CompiledFunction_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wick._C.CompiledFunction",
    .tp_basicsize = sizeof(CompiledFunction),
    .tp_dealloc = (destructor)cf_dealloc,
    .tp_vectorcall_offset = offsetof(CompiledFunction, vectorcall),
    .tp_repr = (reprfunc)cf_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "CompiledFunction(fn, options): calls fn with wick's frame hook enabled on this thread.",
    .tp_traverse = (traverseproc)cf_traverse,
    .tp_clear = (inquiry)cf_clear,
    .tp_members = cf_members,
    .tp_getset = cf_getset,
    .tp_descr_get = cf_descr_get,
    .tp_dictoffset = offsetof(CompiledFunction, dict),
    .tp_new = cf_new,
};

/* ---- module functions --------------------------------------------------- */

static PyObject *py_set_enabled(PyObject *self, PyObject *arg) {
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    return PyBool_FromLong(set_enabled(on));
}

static PyObject *py_reset(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    WkCacheEntry *to_free = NULL;
    for (CodeState *st = all_states; st; st = st->next) detach_entries(st, &to_free);
    free_entry_list(to_free);
    Py_RETURN_NONE;
}

static PyObject *py_code_entries(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyCode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "code_entries() expects a code object");
        return NULL;
    }
    PyObject *list = PyList_New(0);
    CodeState *st = state_get((PyCodeObject *)arg);
    if (!list || !st) return list;
    st->busy++; /* allocation may run finalizers that call reset() */
    for (WkCacheEntry *e = st->entries; e; e = e->next) {
        PyObject *d = e->info && PyDict_Check(e->info) ? PyDict_Copy(e->info) : PyDict_New();
        if (!d || PyDict_SetItemString(d, "eager", e->code ? Py_False : Py_True) < 0 ||
            PyList_Append(list, d) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(list);
            break;
        }
        Py_DECREF(d);
    }
    state_release(st);
    return list;
}

static PyObject *py_hook_stats(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return Py_BuildValue("{sKsKsKsKsKsisO}", "calls", stats.calls, "hits", stats.hits, "misses",
                         stats.misses, "compiles", stats.compiles, "eager_runs", stats.eager_runs,
                         "enabled_threads", n_enabled, "installed", installed ? Py_True : Py_False);
}

static PyObject *py_set_test_compiler(PyObject *self, PyObject *arg) {
    (void)self;
    if (arg != Py_None && !PyCallable_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "_set_test_compiler expects a callable or None");
        return NULL;
    }
    Py_XSETREF(test_compiler, arg == Py_None ? NULL : Py_NewRef(arg));
    Py_RETURN_NONE;
}

static PyObject *py_shutdown(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    shutting_down = 1;
    update_install();
    Py_CLEAR(test_compiler);
    Py_RETURN_NONE;
}

static PyObject *py_datastack_top(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyLong_FromVoidPtr(wk_frame_datastack_top(PyThreadState_Get()));
}

static PyMethodDef hook_methods[] = {
    {"set_enabled", py_set_enabled, METH_O, "Enable wick's frame hook on this thread; returns the previous state."},
    {"reset", py_reset, METH_NOARGS, "Forget every cache entry of every marked code object."},
    {"code_entries", py_code_entries, METH_O, "Info dicts of a code object's cache entries (plus 'eager')."},
    {"hook_stats", py_hook_stats, METH_NOARGS, "Counters: calls, hits, misses, compiles, eager_runs."},
    {"_set_test_compiler", py_set_test_compiler, METH_O, "Test only: compile cache misses with a Python callable."},
    {"_shutdown", py_shutdown, METH_NOARGS, "Uninstall the frame hook for good (atexit)."},
    {"_datastack_top", py_datastack_top, METH_NOARGS, "Test only: this thread's data-stack top address."},
    {NULL, NULL, 0, NULL},
};

int wk_hook_init(PyObject *module) {
    PyInterpreterState *interp = PyInterpreterState_Get();
    if (hook_interp && hook_interp != interp) {
        PyErr_SetString(PyExc_ImportError, "wick._C cannot be loaded in a second interpreter");
        return -1;
    }
    hook_interp = interp;
    if (!exit_key_ok) exit_key_ok = pthread_key_create(&exit_key, thread_exit) == 0;
    if (extra_index < 0) {
        extra_index = REQUEST_EXTRA_INDEX(state_free);
        if (extra_index < 0) {
            PyErr_SetString(PyExc_RuntimeError, "wick: no free co_extra index");
            return -1;
        }
    }
    if (PyType_Ready(&CompiledFunction_Type) < 0) return -1;
    if (PyModule_AddObjectRef(module, "CompiledFunction", (PyObject *)&CompiledFunction_Type) < 0)
        return -1;
    if (PyModule_AddFunctions(module, hook_methods) < 0) return -1;
    if (PyModule_AddIntConstant(module, "HOOK_CAN_TRANSFORM", WK_FRAME_CAN_TRANSFORM) < 0) return -1;
    if (wk_bc_init(module) < 0) return -1;
    /* uninstall before interpreter teardown: atexit runs while modules live */
    PyObject *atexit = PyImport_ImportModule("atexit");
    PyObject *fn = atexit ? PyObject_GetAttrString(module, "_shutdown") : NULL;
    PyObject *r = fn ? PyObject_CallMethod(atexit, "register", "O", fn) : NULL;
    Py_XDECREF(atexit);
    Py_XDECREF(fn);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}
