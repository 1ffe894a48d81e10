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
 *     a few field reads and one co_extra lookup. The exception: while a frame
 *     that fell back (or passed the cache limit on Python values) runs
 *     eagerly, the frames it calls are marked as they start (those of
 *     Python's and torch's own code are marked as skipped),
 *     so that a model whose top frame cannot be captured still has its
 *     layers compiled, as PyTorch's capture does;
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
    /* The options of the last wick.compile / wk_hook_mark_code of this code
     * (strong): used for frames that run outside any CompiledFunction call
     * (resume functions, set_enabled). Inside a call, the options of the
     * innermost CompiledFunction being called apply (ThreadFlags.options). */
    PyObject *options;
    /* Newest first, except entries the hook appends at the tail: weakened
     * eager entries and cache-limit entries (see compile_entry). Each entry
     * belongs to the options it was made under (WkCacheEntry.options). */
    WkCacheEntry *entries;
    int busy;                /* hook invocations currently walking `entries` */
    int skip;                /* library code met under callee_options: never looked at */
    int adopted;             /* marked as the callee of a fallback frame, not by the user */
    int disable_wrapper;     /* skipped, and the code of torch.compiler.disable's wrapper */
    WkCacheEntry *graveyard; /* entries dropped by reset() while busy */
    struct CodeState *prev, *next; /* every live state, for reset() */
} CodeState;

static Py_ssize_t extra_index = -1;
/* Set while the frame compiler runs on an adopted code: the resume
 * functions and callees it marks are adopted too (the GIL guards it). */
static int compiling_adopted;
static CodeState *all_states;
/* Per-thread state, one struct so each function pays for one TLS address
 * lookup (a call in a shared object). */
typedef struct {
    int enabled;    /* set_enabled / CompiledFunction */
    int suspended;  /* inside our own guard checks and compiles */
    int registered; /* exit_key holds &tls for this thread */
    /* The options of the innermost CompiledFunction being called on this
     * thread (the call holds a reference), or NULL outside any. */
    PyObject *options;
    /* While a frame that fell back runs eagerly: the options it fell back
     * under, for the unmarked frames it calls (borrowed: the running hook
     * invocation holds it). NULL otherwise, and while compiled code runs:
     * what a graph calls out to is not captured again. */
    PyObject *callee_options;
    /* With callee_options: the info dict of the entry that fell back, whose
     * "callees" dict (code -> None) lists the frames its eager runs compiled,
     * for wick.stats() and explain(). Borrowed like callee_options. */
    PyObject *callee_sink;
} ThreadFlags;
static _Thread_local ThreadFlags tls;
static PyInterpreterState *hook_interp; /* the interpreter wick._C was loaded in */
static int n_enabled;                   /* threads with tls.enabled set (GIL-protected) */
static int installed, shutting_down;
static WkEvalFn prev_eval;
static WkFrameCompiler real_compiler;
static PyObject *test_compiler; /* strong, or NULL */
static struct {
    unsigned long long calls, hits, misses, compiles, eager_runs, graph_errors, weakened;
} stats;

/* Hook-private WkCacheEntry.flags bits, above the compiler's WK_ENTRY_*. */
enum {
    ENTRY_CACHE_LIMIT = 1u << 16, /* the always-passing eager entry of a full cache */
    ENTRY_WEAKENED = 1u << 17,    /* eager, guards replaced by argument types */
    ENTRY_FALLBACK = 1u << 18,    /* eager because the frame compiler fell back */
};

/* ---- cache entries ------------------------------------------------------ */

void wk_cache_entry_free(WkCacheEntry *e) {
    if (!e) return;
    if (e->free_guards && e->guard_state) e->free_guards(e->guard_state);
    Py_XDECREF(e->code);
    Py_XDECREF(e->info);
    Py_XDECREF(e->options);
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

/* Cache entries belong to an options object, compared by identity in the
 * hook (a pointer test per entry). So that equal options given to separate
 * wick.compile calls share their entries, every CompiledFunction uses the
 * first options object equal to the one it is given. Interned objects live
 * until reset() (there are a handful). Returns a borrowed
 * reference, or NULL with an exception. */
static PyObject *interned_options;

static PyObject *intern_options(PyObject *options) {
    if (!interned_options && !(interned_options = PyList_New(0))) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(interned_options); i++) {
        PyObject *o = PyList_GET_ITEM(interned_options, i);
        if (o == options) return o;
        if (Py_TYPE(o) != Py_TYPE(options)) continue;
        int eq = PyObject_RichCompareBool(o, options, Py_EQ);
        if (eq < 0) {
            PyErr_Clear(); /* options that cannot be compared stay on their own */
            continue;
        }
        if (eq) return o;
    }
    if (PyList_Append(interned_options, options) < 0) return NULL;
    return options;
}

int wk_hook_mark_code(PyCodeObject *code, PyObject *options) {
    if (extra_index < 0) {
        PyErr_SetString(PyExc_RuntimeError, "wick: the frame hook is not initialised");
        return -1;
    }
    if (!options) options = Py_None;
    options = intern_options(options);
    if (!options) return -1;
    CodeState *st = state_get(code);
    if (st) {
        Py_SETREF(st->options, Py_NewRef(options));
        st->adopted = st->adopted && compiling_adopted;
        st->skip = 0;
        return 0;
    }
    st = wk_xcalloc(1, sizeof(CodeState));
    st->adopted = compiling_adopted;
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

static PyObject *disable_target(PyObject *fn);

/* The state of an unmarked code object that a fallback frame's eager run
 * calls: marked under `options`, or skipped: Python's and torch's own code,
 * and comprehensions, generator expressions and module bodies (code named
 * <...> other than <lambda>), which capture would only meet half-run.
 * Borrowed, or NULL (no exception) when co_extra cannot hold it. */
static CodeState *adopt_callee(PyCodeObject *co, PyObject *options, PyObject *fn) {
    const char *name = PyUnicode_AsUTF8(co->co_name);
    if (!name) PyErr_Clear();
    int skip = !name || (name[0] == '<' && strcmp(name, "<lambda>") != 0) || wk_code_is_library(co);
    if (wk_hook_mark_code(co, skip ? Py_None : options) < 0) {
        PyErr_Clear();
        return NULL;
    }
    CodeState *st = state_get(co);
    if (st) {
        st->skip = skip;
        st->adopted = !skip;
        st->disable_wrapper = skip && disable_target(fn) != NULL;
    }
    return st;
}

/* The function torch.compiler.disable (torch._dynamo.disable) wraps, when
 * fn is its wrapper (which says so in its __dict__), borrowed; else NULL. */
static PyObject *disable_target(PyObject *fn) {
    PyObject **dp = fn ? _PyObject_GetDictPtr(fn) : NULL;
    if (!dp || !*dp || PyDict_GetItemString(*dp, "_torchdynamo_disable") != Py_True) return NULL;
    return PyDict_GetItemString(*dp, "_torchdynamo_orig_callable");
}

/* A disabled function called from a fallback frame's eager run stays
 * eager, as the user asked: its code is marked skipped before it starts
 * (unless the user compiled it). */
static void skip_disabled(PyObject *wrapper) {
    PyObject *target = disable_target(wrapper);
    if (target && PyMethod_Check(target)) target = PyMethod_GET_FUNCTION(target);
    if (!target || !PyFunction_Check(target)) return;
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(target);
    CodeState *st = state_get(co);
    if (st) {
        if (st->adopted) st->skip = 1, st->adopted = 0;
        return;
    }
    if (wk_hook_mark_code(co, Py_None) < 0) {
        PyErr_Clear();
        return;
    }
    if ((st = state_get(co)) != NULL) st->skip = 1;
}

/* Notes `co` in the "callees" of the fallback entry whose eager run called
 * it. Failures only lose the note. */
static void note_callee(PyObject *info, PyCodeObject *co) {
    PyObject *callees = PyDict_GetItemString(info, "callees");
    if (!callees) {
        callees = PyDict_New();
        if (!callees || PyDict_SetItemString(info, "callees", callees) < 0) {
            Py_XDECREF(callees);
            PyErr_Clear();
            return;
        }
        Py_DECREF(callees); /* the info dict holds it */
    }
    if (PyDict_Check(callees) && PyDict_SetDefault(callees, (PyObject *)co, Py_None) == NULL) PyErr_Clear();
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

/* ---- weak guards for eager entries -------------------------------------- */

/* The guard of a weakened eager entry: each argument has exactly the type
 * it had (strong references to the types). */
typedef struct {
    int n;
    PyObject *types[];
} TypeGuard;

static _Thread_local char type_why[160];

static int type_guard_check(void *state, PyObject *const *args, int nargs, PyObject *globals,
                            const char **why) {
    (void)globals;
    const TypeGuard *tg = state;
    if (nargs != tg->n) return 0;
    for (int i = 0; i < nargs; i++) {
        PyObject *want = tg->types[i];
        PyObject *got = args[i] ? (PyObject *)Py_TYPE(args[i]) : Py_None;
        if (got != want) {
            if (why) {
                snprintf(type_why, sizeof type_why, "argument %d type mismatch: expected %s, got %s", i,
                         want == Py_None ? "unbound" : ((PyTypeObject *)want)->tp_name,
                         got == Py_None ? "unbound" : ((PyTypeObject *)got)->tp_name);
                *why = type_why;
            }
            return 0;
        }
    }
    return 1;
}

static void type_guard_free(void *state) {
    TypeGuard *tg = state;
    for (int i = 0; i < tg->n; i++) Py_XDECREF(tg->types[i]);
    free(tg);
}

/* Replaces e's guards by the argument types of this call. */
static void weaken(WkCacheEntry *e, PyObject *const *args, int nargs) {
    TypeGuard *tg = wk_xcalloc(1, sizeof(TypeGuard) + (size_t)nargs * sizeof(PyObject *));
    tg->n = nargs;
    for (int i = 0; i < nargs; i++) tg->types[i] = Py_NewRef(args[i] ? (PyObject *)Py_TYPE(args[i]) : Py_None);
    if (e->free_guards && e->guard_state) e->free_guards(e->guard_state);
    e->check = type_guard_check;
    e->free_guards = type_guard_free;
    e->guard_state = tg;
    e->flags |= ENTRY_WEAKENED;
    stats.weakened++;
    if (e->info && PyDict_Check(e->info)) {
        PyObject *g = Py_BuildValue("[s]", "argument types only: the reason does not depend on shapes or values");
        if (!g || PyDict_SetItemString(e->info, "guards", g) < 0) PyErr_Clear();
        Py_XDECREF(g);
    }
}

/* Same fallback reason (and line) in two eager entries: the reason did not
 * depend on what differs between their calls. */
static int same_reason(WkCacheEntry *a, WkCacheEntry *b) {
    if (!a->info || !b->info || !PyDict_Check(a->info) || !PyDict_Check(b->info)) return 0;
    static const char *const keys[] = {"reason", "file", "line"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        PyObject *x = PyDict_GetItemString(a->info, keys[i]);
        PyObject *y = PyDict_GetItemString(b->info, keys[i]);
        if (!x && !y && i > 0) continue;
        if (!x || !y) return 0;
        int eq = PyObject_RichCompareBool(x, y, Py_EQ);
        if (eq < 0) PyErr_Clear();
        if (eq != 1) return 0;
    }
    return 1;
}

/* An entry whose info gives a reason (a str): a fallback, not a frame
 * the compiler chose to leave as it is. */
static int has_reason(WkCacheEntry *e) {
    PyObject *r = e->info && PyDict_Check(e->info) ? PyDict_GetItemString(e->info, "reason") : NULL;
    return r && PyUnicode_Check(r);
}

/* A compiled entry whose (first) graph holds ops, or a fallback that had
 * captured ops when it failed. */
static int has_ops(WkCacheEntry *e) {
    PyObject *n = e->info && PyDict_Check(e->info)
                      ? PyDict_GetItemString(e->info, e->code ? "op_count" : "ops_seen")
                      : NULL;
    return !n || !PyLong_Check(n) || PyLong_AsLong(n) != 0;
}

/* ---- the cache miss ----------------------------------------------------- */

static int is_eager_compiled(const WkCacheEntry *e) {
    return !e->code && !(e->flags & (ENTRY_CACHE_LIMIT | ENTRY_WEAKENED));
}

/* Cache miss: makes an entry for this call under `opts` and links it into
 * st's list, or returns NULL with an exception. `why` is the first failing
 * guard of the entries tried (NULL if there were none). */
static WkCacheEntry *compile_entry(CodeState *st, struct _PyInterpreterFrame *f, PyCodeObject *co,
                                   PyObject *const *args, int nargs, PyObject *opts, const char *why) {
    long limit = wk_env_int(WK_ENV_CACHE_LIMIT);
    if (limit < 1) limit = 8;
    int have = 0;
    for (WkCacheEntry *x = st->entries; x; x = x->next) have += x->options == opts;
    if (have >= limit) {
        const char *name = PyUnicode_AsUTF8(co->co_qualname);
        const char *file = PyUnicode_AsUTF8(co->co_filename);
        if (!name || !file) PyErr_Clear();
        char reason[1024];
        snprintf(reason, sizeof reason,
                 "cache limit reached (%ld entries): %s (%s:%d) has %d compiled variants for these "
                 "options and runs eagerly from now on; the newest entry failed on: %s",
                 limit, name ? name : "?", file ? file : "?", co->co_firstlineno, have,
                 why ? why : "(no reason given)");
        WkCacheEntry *e = eager_entry(reason);
        /* Its callees are still captured, as after a fallback, where the
         * recompiles came from Python values (a step counter, an object):
         * those need not change below. Where tensor shapes kept changing
         * (a growing cache), they change in the callees too, and capturing
         * them would only compile each of them up to the limit in turn. */
        e->flags |= ENTRY_CACHE_LIMIT | (wk_guards_why_is_shape(why) ? 0 : ENTRY_FALLBACK);
        e->options = Py_NewRef(opts);
        WkCacheEntry **tail = &st->entries;
        while (*tail) tail = &(*tail)->next;
        *tail = e;
        wk_log(WK_LOG_RECOMPILES, "%s", reason);
        return e;
    }
    if (have && wk_log_on(WK_LOG_RECOMPILES)) log_frame("recompiling", co, why ? why : "guards failed");
    stats.compiles++;
    WkCacheEntry *e;
    int from_real = 0;
    if (test_compiler) {
        e = call_test_compiler(co, args, nargs);
    } else if (real_compiler) {
        int outer = compiling_adopted;
        compiling_adopted = st->adopted;
        e = real_compiler(wk_frame_func_Borrow(f), co, args, nargs, opts);
        compiling_adopted = outer;
        from_real = 1;
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
    e->flags &= ~(unsigned)(ENTRY_CACHE_LIMIT | ENTRY_WEAKENED | ENTRY_FALLBACK);
    Py_XSETREF(e->options, Py_NewRef(opts));
    if (e->code) {
        const char *bad = PyCode_Check(e->code) ? wk_frame_incompatible(co, (PyCodeObject *)e->code)
                                                : "transformed code is not a code object";
        if (bad) {
            Py_CLEAR(e->code);
            set_reason(e, bad);
            if (wk_log_on(WK_LOG_RECOMPILES)) log_frame("running eagerly", co, bad);
        }
    }
    if (!e->code && from_real && has_reason(e)) e->flags |= ENTRY_FALLBACK;
    if (st->adopted && (e->code || (e->flags & ENTRY_FALLBACK)) && !has_ops(e)) {
        /* a callee of a fallback frame with nothing of its own for a graph
         * (a config's __getattribute__, a helper that breaks or fails
         * before any op): it runs as written, not counted as a fallback,
         * and what it calls is adopted in turn */
        PyObject *why = e->code ? NULL : PyDict_GetItemString(e->info, "reason");
        PyObject *info = Py_BuildValue("{s:O,s:s,s:O}", "reason", Py_None, "skipped",
                                       "no graph ops in this callee of a fallback frame: runs as written",
                                       "failed_on", why ? why : Py_None);
        if (!info) PyErr_Clear();
        Py_XSETREF(e->info, info);
        Py_CLEAR(e->code);
        e->flags = ENTRY_FALLBACK;
    }
    if (!e->code) {
        /* A frame that keeps falling back for the same reason must not be
         * interpreted again for every new shape: weaken the entry to type
         * guards and drop the eager entries it makes redundant. The weak
         * entry goes last, so compiled entries for other shapes still win. */
        int weak = (e->flags & WK_ENTRY_ARGS_INDEPENDENT) != 0;
        for (WkCacheEntry **pp = &st->entries; *pp;) {
            WkCacheEntry *x = *pp;
            if (x->options == opts && is_eager_compiled(x) && same_reason(x, e)) {
                weak = 1;
                *pp = x->next; /* the hook walking this list is busy: free later */
                x->next = st->graveyard;
                st->graveyard = x;
                continue;
            }
            pp = &x->next;
        }
        if (weak) {
            weaken(e, args, nargs);
            if (wk_log_on(WK_LOG_RECOMPILES))
                log_frame("running eagerly for any shape", co, "the fallback reason does not depend on them");
            WkCacheEntry **tail = &st->entries;
            while (*tail) tail = &(*tail)->next;
            *tail = e;
            return e;
        }
    }
    e->next = st->entries;
    st->entries = e;
    return e;
}

static void state_release(CodeState *st) {
    if (--st->busy == 0 && st->graveyard) {
        WkCacheEntry *g = st->graveyard;
        st->graveyard = NULL;
        free_entry_list(g);
    }
}

/* The transformed code raised: say so where asked; the caller runs the
 * original frame eagerly. */
static void log_graph_error(PyCodeObject *co) {
    if (!wk_log_on(WK_LOG_RECOMPILES) && !wk_log_on(WK_LOG_BREAKS)) return;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    PyObject *msg = ev ? PyObject_Repr(ev) : NULL;
    const char *m = msg ? PyUnicode_AsUTF8(msg) : NULL;
    if (!m) PyErr_Clear();
    char detail[512];
    snprintf(detail, sizeof detail, "the compiled code raised %s; running the original eagerly",
             m ? m : "an exception");
    log_frame("graph error in", co, detail);
    Py_XDECREF(msg);
    PyErr_Restore(et, ev, tb);
}

/* An impure entry that guards its graph (WK_ENTRY_GRAPH_FIRST) raised: 0
 * when its graph raised an Exception, which is then the current exception
 * (the frame may run eagerly as for a pure entry); -1 otherwise, with the
 * exception to propagate set (a BaseException of the graph is restored). */
static int graph_failed_first(PyCodeObject *co) {
    if (!PyErr_ExceptionMatches(wk_graph_failed_type)) return -1;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    PyObject *ctx = ev ? PyException_GetContext(ev) : NULL; /* new reference */
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    if (!ctx) {
        PyErr_SetString(PyExc_SystemError, "wick: a graph failed without an exception");
        return -1;
    }
    PyErr_SetObject((PyObject *)Py_TYPE(ctx), ctx);
    Py_DECREF(ctx);
    (void)co;
    return PyErr_ExceptionMatches(PyExc_Exception) ? 0 : -1;
}

static PyObject *wk_eval(PyThreadState *ts, struct _PyInterpreterFrame *f, int throwflag) {
    WkEvalFn prev = prev_eval ? prev_eval : (WkEvalFn)_PyEval_EvalFrameDefault;
    ThreadFlags *t = &tls;
    wk_frame_take_handover(f); /* a resume function's frame: its arguments are its own now */
    if (!t->enabled || t->suspended || shutting_down) return prev(ts, f, throwflag);
    PyCodeObject *co = wk_frame_code_if_eligible(ts, f, throwflag);
    if (!co) return prev(ts, f, throwflag);
    CodeState *st = state_get(co);
    if (!st && t->callee_options) {
        t->suspended++; /* the first library test runs Python (sysconfig) */
        st = adopt_callee(co, t->callee_options, (PyObject *)wk_frame_func_Borrow(f));
        t->suspended--;
    }
    if (st && st->disable_wrapper && t->callee_options) skip_disabled((PyObject *)wk_frame_func_Borrow(f));
    if (!st || st->skip) return prev(ts, f, throwflag);
    if (t->callee_sink) note_callee(t->callee_sink, co);

    stats.calls++;
    PyObject *const *args = wk_frame_args(f);
    int nargs = wk_frame_nargs(co);
    PyObject *globals = wk_frame_globals_Borrow(f);
    PyObject *opts = t->options ? t->options : st->options;
    PyObject *code = NULL;
    char why[512]; /* the first failing guard, copied: guards reuse one buffer */
    why[0] = '\0';
    WkCacheEntry *hit = NULL;
    unsigned hit_flags = 0;
    st->busy++;
    t->suspended++;
    wk_hook_checking_fn = wk_frame_func_Borrow(f); /* for guards on the function's closure */
    Py_INCREF(opts); /* a guard or the compiler may run code that drops it */
    WkCacheEntry **link = &st->entries; /* the pointer to e, for the move to the front */
    for (WkCacheEntry *e = st->entries; e; link = &e->next, e = e->next) {
        if (e->options != opts) continue;
        const char *w = NULL;
        int r = e->check ? e->check(e->guard_state, args, nargs, globals, &w) : 1;
        if (r < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_SystemError, "wick: guard check failed without an exception");
            goto error;
        }
        if (r > 0) {
            hit = e;
            /* most recently used first, as a call pattern tends to repeat;
             * only when no other hook invocation walks the list (guards may
             * run Python), and never for the tail entries (weak, limit) */
            if (e != st->entries && st->busy == 1 && *link == e &&
                !(e->flags & (ENTRY_CACHE_LIMIT | ENTRY_WEAKENED))) {
                *link = e->next;
                e->next = st->entries;
                st->entries = e;
            }
            break;
        }
        if (!why[0] && w) snprintf(why, sizeof why, "%s", w);
    }
    if (hit) {
        stats.hits++;
    } else {
        stats.misses++;
        hit = compile_entry(st, f, co, args, nargs, opts, why[0] ? why : NULL);
        if (!hit) goto error;
    }
    code = Py_XNewRef(hit->code);
    hit_flags = hit->flags;
    /* a fallback's info, which notes the callees its eager run captures
     * (held: a reset() while the frame runs may free the entry) */
    PyObject *sink = !hit->code && (hit_flags & ENTRY_FALLBACK) && hit->info && PyDict_Check(hit->info)
                         ? Py_NewRef(hit->info)
                         : NULL;
    t->suspended--;
    state_release(st);
    PyObject *outer_callee_options = t->callee_options, *outer_callee_sink = t->callee_sink;
    if (code) {
        Py_DECREF(opts);
        int kept = 0;
        int guarded = (hit_flags & WK_ENTRY_GRAPH_FIRST) && wk_graph_failed_type;
        t->callee_options = t->callee_sink = NULL;
        PyObject *res = wk_frame_run_code(ts, f, (PyCodeObject *)code,
                                          (hit_flags & WK_ENTRY_IMPURE) && !guarded ? NULL : &kept);
        t->callee_options = outer_callee_options;
        t->callee_sink = outer_callee_sink;
        if (!res && kept && guarded && graph_failed_first(co) < 0) {
            /* raised after the graph (or a BaseException in it): propagate */
            Py_DECREF(code);
            return wk_frame_fail(ts, f);
        }
        if (!res && kept) {
            /* nothing the compiled code did is visible: run the original
             * frame, which handles or raises the exception as Python would */
            stats.graph_errors++;
            log_graph_error((PyCodeObject *)code);
            PyErr_Clear();
            Py_DECREF(code);
            stats.eager_runs++;
            return prev(ts, f, 0);
        }
        Py_DECREF(code);
        return res;
    }
    stats.eager_runs++;
    if (!(hit_flags & ENTRY_FALLBACK)) {
        Py_DECREF(opts);
        return prev(ts, f, 0);
    }
    t->callee_options = opts;
    t->callee_sink = sink;
    PyObject *res = prev(ts, f, 0);
    t->callee_options = outer_callee_options;
    t->callee_sink = outer_callee_sink;
    Py_DECREF(opts);
    Py_XDECREF(sink);
    return res;
error:
    Py_DECREF(opts);
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
    if (PyUnicode_Check(r)) { /* a str is a failure, and its text the reason */
        static _Thread_local char buf[256];
        const char *u = PyUnicode_AsUTF8(r);
        snprintf(buf, sizeof buf, "%s", u ? u : "?");
        PyErr_Clear();
        Py_DECREF(r);
        if (why) *why = buf;
        return 0;
    }
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
    Py_ssize_t len = PyTuple_Check(r) ? PyTuple_GET_SIZE(r) : 0;
    if (len < 2 || len > 4) {
        PyErr_SetString(PyExc_TypeError,
                        "test compiler must return None or (code_or_None, guard_or_None[, flags[, reason]])");
        goto done;
    }
    PyObject *nc = PyTuple_GET_ITEM(r, 0), *guard = PyTuple_GET_ITEM(r, 1);
    if (nc != Py_None && !PyCode_Check(nc)) {
        PyErr_SetString(PyExc_TypeError, "test compiler: first item must be a code object or None");
        goto done;
    }
    /* without explicit flags, test code is impure: its exceptions propagate */
    unsigned long flags = WK_ENTRY_IMPURE;
    if (len > 2) {
        flags = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(r, 2));
        if (PyErr_Occurred()) goto done;
    }
    e = wk_xcalloc(1, sizeof(WkCacheEntry));
    e->flags = (unsigned)flags;
    if (len > 3) e->info = Py_BuildValue("{sO}", "reason", PyTuple_GET_ITEM(r, 3));
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

static PyTypeObject CompiledFunction_Type;

static PyObject *cf_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
    CompiledFunction *cf = (CompiledFunction *)self;
    ThreadFlags *t = &tls;
    PyObject *outer = t->options;
    PyObject *opts = Py_NewRef(cf->options);
    t->options = opts;
    int was = set_enabled(1);
    PyObject *res = PyObject_Vectorcall(cf->fn, args, nargsf, kwnames);
    set_enabled(was);
    t->options = outer;
    Py_DECREF(opts);
    return res;
}

/* The code object whose frames a CompiledFunction of fn compiles: that of a
 * function, of a bound method's function, of functools.partial's func, or of
 * a callable object's __call__. NULL (no exception) when there is none
 * (builtins): the call then simply runs. */
static PyCodeObject *code_of(PyObject *fn) {
    for (int depth = 0; depth < 8; depth++) {
        if (PyMethod_Check(fn)) {
            fn = PyMethod_GET_FUNCTION(fn);
        } else if (PyFunction_Check(fn)) {
            return (PyCodeObject *)PyFunction_GET_CODE(fn);
        } else if (Py_IS_TYPE(fn, &CompiledFunction_Type)) {
            fn = ((CompiledFunction *)fn)->fn;
        } else if (PyType_Check(fn)) {
            return NULL;
        } else {
            /* functools.partial (func) or an object with a Python __call__ */
            int partial = strcmp(Py_TYPE(fn)->tp_name, "functools.partial") == 0;
            PyObject *inner = partial ? PyObject_GetAttrString(fn, "func")
                                      : PyObject_GetAttrString((PyObject *)Py_TYPE(fn), "__call__");
            if (!inner) {
                PyErr_Clear();
                return NULL;
            }
            /* borrowed from here on: fn keeps it alive (a partial's func, a type's attribute) */
            Py_DECREF(inner);
            if (inner == fn || !PyCallable_Check(inner)) return NULL;
            fn = inner;
        }
    }
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
    options = intern_options(options);
    if (!options) return NULL;
    /* compiling a compiled function compiles the original with the new
     * options, as torch.compile does */
    while (Py_IS_TYPE(fn, &CompiledFunction_Type)) fn = ((CompiledFunction *)fn)->fn;
    CompiledFunction *cf = (CompiledFunction *)type->tp_alloc(type, 0);
    if (!cf) return NULL;
    cf->fn = Py_NewRef(fn);
    cf->options = Py_NewRef(options); /* strong before anything can run Python */
    cf->vectorcall = cf_vectorcall;
    PyCodeObject *co = code_of(fn);
    if (co && wk_hook_mark_code(co, cf->options) < 0) goto fail;
    /* what functools.wraps does, as torch.compile's wrapper does: the
     * attributes that name and describe fn, then fn.__dict__ (decorator
     * markers such as unittest's __unittest_expecting_failure__ live there),
     * then __wrapped__ */
    cf->dict = PyDict_New();
    if (!cf->dict) goto fail;
    static const char *const copied[] = {"__module__", "__name__", "__qualname__", "__doc__",
                                         "__annotations__", "__type_params__"};
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
    PyObject *fdict = PyObject_GetAttrString(fn, "__dict__");
    if (!fdict) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) goto fail;
        PyErr_Clear();
    } else {
        int rc = PyDict_Check(fdict) ? PyDict_Update(cf->dict, fdict) : 0;
        Py_DECREF(fdict);
        if (rc < 0) goto fail;
    }
    if (PyDict_SetItemString(cf->dict, "__wrapped__", fn) < 0) goto fail;
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

/* The wrapped function's own attributes, read through (a test that reads
 * self.test_x.__code__.co_consts sees the code it wrote). */
static PyObject *cf_forward(PyObject *self, void *name) {
    return PyObject_GetAttrString(((CompiledFunction *)self)->fn, (const char *)name);
}

static PyGetSetDef cf_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"__code__", cf_forward, NULL, "the wrapped function's code", "__code__"},
    {"__defaults__", cf_forward, NULL, "the wrapped function's defaults", "__defaults__"},
    {"__kwdefaults__", cf_forward, NULL, "the wrapped function's keyword defaults", "__kwdefaults__"},
    {"__globals__", cf_forward, NULL, "the wrapped function's globals", "__globals__"},
    {"__closure__", cf_forward, NULL, "the wrapped function's closure", "__closure__"},
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
    /* entries hold their options, so no address is reused while one lives */
    Py_CLEAR(interned_options);
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

static PyObject *py_entry_codes(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyCode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "_entry_codes() expects a code object");
        return NULL;
    }
    PyObject *list = PyList_New(0);
    CodeState *st = state_get((PyCodeObject *)arg);
    if (!list || !st) return list;
    st->busy++;
    for (WkCacheEntry *e = st->entries; e; e = e->next)
        if (PyList_Append(list, e->code ? e->code : Py_None) < 0) {
            Py_CLEAR(list);
            break;
        }
    state_release(st);
    return list;
}

static PyObject *py_hook_stats(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return Py_BuildValue("{sKsKsKsKsKsKsKsisO}", "calls", stats.calls, "hits", stats.hits, "misses",
                         stats.misses, "compiles", stats.compiles, "eager_runs", stats.eager_runs,
                         "graph_errors", stats.graph_errors, "weakened", stats.weakened,
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

/* _module_call_is_forward(module, forward[, call]) -> bool */
static PyObject *py_module_call_is_forward(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 && nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_module_call_is_forward(module, forward[, call])");
        return NULL;
    }
    int r = wk_module_call_is_forward(args[0], args[1], nargs == 3 ? args[2] : NULL);
    if (r < 0) return NULL;
    return Py_NewRef(r ? Py_True : Py_False);
}

static PyMethodDef hook_methods[] = {
    {"_module_call_is_forward", (PyCFunction)(void (*)(void))py_module_call_is_forward, METH_FASTCALL,
     "True when calling the module calls forward(module, ...) and nothing else (no hooks, nn.Module's call path)."},
    {"set_enabled", py_set_enabled, METH_O, "Enable wick's frame hook on this thread; returns the previous state."},
    {"reset", py_reset, METH_NOARGS, "Forget every cache entry of every marked code object."},
    {"code_entries", py_code_entries, METH_O, "Info dicts of a code object's cache entries (plus 'eager')."},
    {"_entry_codes", py_entry_codes, METH_O, "Test only: the transformed code of each cache entry (None: eager), in code_entries order."},
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
    if (PyModule_AddIntConstant(module, "ENTRY_ARGS_INDEPENDENT", WK_ENTRY_ARGS_INDEPENDENT) < 0 ||
        PyModule_AddIntConstant(module, "ENTRY_IMPURE", WK_ENTRY_IMPURE) < 0)
        return -1;
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
