/* frame.c — the version-specific frame handling of the PEP 523 hook: which
 * frames the hook may touch, and running a different code object in place of
 * a frame (the "shadow frame"). This is the only file that includes CPython's
 * internal frame header; every difference between 3.11 and 3.12 lives here.
 *
 * Pinned to CPython 3.11.7, 3.12.1 and 3.13.0 (Python/frame.c,
 * Python/pystate.c, Python/ceval.c of those branches); re-audit on every
 * patch release. See /work/shared/notes/cpython-frames.md sections 2.4 and 4
 * for the recipe. 3.13 keeps the 3.12 ownership rules (the eval loop clears
 * and pops the frame it runs) and renames f_code/prev_instr to
 * f_executable/instr_ptr (which points AT the next instruction, not before
 * it); it exports _PyEval_FrameClearAndPop, which we use there.
 *
 * 3.14 and later: not handled; the hook passes every frame through.
 */
#include "frame.h"

#if WK_FRAME_CAN_TRANSFORM

#include <string.h>
#if PY_VERSION_HEX >= 0x030C0000
#undef _PyGC_FINALIZED
#endif
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#if PY_VERSION_HEX >= 0x030D0000
#define FRAME_CODE(f) ((PyCodeObject *)(f)->f_executable)
#define FRAME_IS_FRESH(f, co) ((f)->instr_ptr == _PyCode_CODE(co))
#define IS_FINALIZING() Py_IsFinalizing()
#else
#define FRAME_CODE(f) ((f)->f_code)
#define FRAME_IS_FRESH(f, co) ((f)->prev_instr == _PyCode_CODE(co) - 1)
#define IS_FINALIZING() _Py_IsFinalizing()
#endif
#if PY_VERSION_HEX >= 0x030C0000
#define FRAME_FUNC(f) ((f)->f_funcobj)
#define FRAME_WORDS(co) ((co)->co_framesize)
#else
#define FRAME_FUNC(f) ((PyObject *)(f)->f_func)
#define FRAME_WORDS(co) ((co)->co_nlocalsplus + (co)->co_stacksize + (int)FRAME_SPECIALS_SIZE)
#endif

#define DATA_STACK_CHUNK_BYTES (16 * 1024) /* pystate.c DATA_STACK_CHUNK_SIZE */
#define DATA_STACK_MIN_OVERHEAD 1000       /* pystate.c MINIMUM_OVERHEAD */

PyCodeObject *wk_frame_code_if_eligible(PyThreadState *ts, struct _PyInterpreterFrame *f,
                                        int throwflag) {
    if (throwflag || f->owner != FRAME_OWNED_BY_THREAD || f->f_locals != NULL) return NULL;
    PyCodeObject *co = FRAME_CODE(f);
#if PY_VERSION_HEX >= 0x030D0000
    if (!PyCode_Check((PyObject *)co)) return NULL;
#endif
    if (!(co->co_flags & CO_OPTIMIZED) ||
        (co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)))
        return NULL;
    /* Only fresh frames: nothing of the code has run, argument slots hold
     * raw values, cell and free slots are empty. */
    if (!FRAME_IS_FRESH(f, co) || f->stacktop != co->co_nlocalsplus || f->frame_obj != NULL)
        return NULL;
    if (ts->tracing > 0 || IS_FINALIZING()) return NULL;
    return co;
}

PyFunctionObject *wk_frame_func_Borrow(struct _PyInterpreterFrame *f) {
    return (PyFunctionObject *)FRAME_FUNC(f);
}

PyObject *wk_frame_globals_Borrow(struct _PyInterpreterFrame *f) { return f->f_globals; }

PyObject *const *wk_frame_args(struct _PyInterpreterFrame *f) { return f->localsplus; }

void *wk_frame_datastack_top(PyThreadState *ts) { return ts->datastack_top; }

/* Data stack push/pop: the semantics of pystate.c's _PyThreadState_PushFrame
 * (3.12) / _PyThreadState_BumpFramePointerSlow (3.11) and
 * _PyThreadState_PopFrame, which libpython does not export. The 3.12 eval
 * loop pops our shadow with its own pop, so the layout must be identical. */
static _PyInterpreterFrame *push_frame(PyThreadState *ts, int words) {
    if (ts->datastack_top != NULL && words < ts->datastack_limit - ts->datastack_top) {
        _PyInterpreterFrame *res = (_PyInterpreterFrame *)ts->datastack_top;
        ts->datastack_top += words;
        return res;
    }
    size_t bytes = DATA_STACK_CHUNK_BYTES;
    while (bytes < sizeof(PyObject *) * (size_t)(words + DATA_STACK_MIN_OVERHEAD)) bytes *= 2;
    PyObjectArenaAllocator arena;
    PyObject_GetArenaAllocator(&arena);
    _PyStackChunk *chunk = arena.alloc(arena.ctx, bytes);
    if (chunk == NULL) return NULL;
    chunk->previous = ts->datastack_chunk;
    chunk->size = bytes;
    chunk->top = 0;
    if (ts->datastack_chunk)
        ts->datastack_chunk->top = (size_t)(ts->datastack_top - &ts->datastack_chunk->data[0]);
    ts->datastack_chunk = chunk;
    ts->datastack_limit = (PyObject **)((char *)chunk + bytes);
    /* the root chunk skips one slot so that a pop never frees it */
    PyObject **res = &chunk->data[chunk->previous == NULL];
    ts->datastack_top = res + words;
    return (_PyInterpreterFrame *)res;
}

#if PY_VERSION_HEX < 0x030D0000 /* 3.13: _PyEval_FrameClearAndPop pops */
static void pop_frame(PyThreadState *ts, _PyInterpreterFrame *frame) {
    PyObject **base = (PyObject **)frame;
    _PyStackChunk *chunk = ts->datastack_chunk;
    if (base == &chunk->data[0]) {
        _PyStackChunk *prev = chunk->previous;
        ts->datastack_top = &prev->data[prev->top];
        ts->datastack_chunk = prev;
        ts->datastack_limit = (PyObject **)((char *)prev + prev->size);
        PyObjectArenaAllocator arena;
        PyObject_GetArenaAllocator(&arena);
        arena.free(arena.ctx, chunk, chunk->size);
    } else {
        ts->datastack_top = base;
    }
}
#endif

int wk_frame_nargs(PyCodeObject *co) {
    return co->co_argcount + co->co_kwonlyargcount + !!(co->co_flags & CO_VARARGS) +
           !!(co->co_flags & CO_VARKEYWORDS);
}

const char *wk_frame_incompatible(PyCodeObject *orig, PyCodeObject *nc) {
    const int argflags = CO_VARARGS | CO_VARKEYWORDS;
    if (nc->co_argcount != orig->co_argcount || nc->co_posonlyargcount != orig->co_posonlyargcount ||
        nc->co_kwonlyargcount != orig->co_kwonlyargcount ||
        (nc->co_flags & argflags) != (orig->co_flags & argflags))
        return "transformed code has a different argument layout";
    if (nc->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR))
        return "transformed code is a generator or coroutine";
    if (!(nc->co_flags & CO_OPTIMIZED)) return "transformed code is not optimized";
    if (nc->co_nfreevars != 0) {
        /* the shadow runs with the original function, whose closure feeds
         * COPY_FREE_VARS: only the very same free variables work */
        if (nc->co_nfreevars != orig->co_nfreevars) return "transformed code has other free variables";
        PyObject *a = PyCode_GetFreevars(orig), *b = PyCode_GetFreevars(nc);
        int same = a && b ? PyObject_RichCompareBool(a, b, Py_EQ) : -1;
        Py_XDECREF(a);
        Py_XDECREF(b);
        if (same < 0) PyErr_Clear();
        if (same != 1) return "transformed code has other free variables";
    }
    return NULL;
}

#if PY_VERSION_HEX < 0x030C0000
/* 3.11: the eval loop leaves an entry frame on the stack; we clear the
 * shadow like Python/frame.c's _PyFrame_Clear. A frame object that outlives
 * the frame (held by a traceback) takes a copy of it, linked to the caller. */
static void take_ownership(PyFrameObject *fo, _PyInterpreterFrame *fr) {
    size_t size = (size_t)((char *)&fr->localsplus[fr->stacktop] - (char *)fr);
    _PyInterpreterFrame *copy = (_PyInterpreterFrame *)fo->_f_frame_data;
    memcpy(copy, fr, size);
    fo->f_frame = copy;
    copy->owner = FRAME_OWNED_BY_FRAME_OBJECT;
    if (_PyFrame_IsIncomplete(copy))
        copy->prev_instr = _PyCode_CODE(copy->f_code) + copy->f_code->_co_firsttraceable;
    copy->previous = NULL;
    if (fo->f_back == NULL) {
        /* the shadow has returned, so the thread's current frame is the
         * caller the shadow was linked to */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyFrameObject *back = PyEval_GetFrame();
        if (back) fo->f_back = (PyFrameObject *)Py_NewRef(back);
        PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
    if (!PyObject_GC_IsTracked((PyObject *)fo)) PyObject_GC_Track((PyObject *)fo);
}

static void clear_frame(_PyInterpreterFrame *fr) {
    if (fr->frame_obj) {
        PyFrameObject *fo = fr->frame_obj;
        fr->frame_obj = NULL;
        if (Py_REFCNT(fo) > 1) {
            take_ownership(fo, fr);
            Py_DECREF(fo);
            return;
        }
        Py_DECREF(fo);
    }
    for (int i = 0; i < fr->stacktop; i++) Py_XDECREF(fr->localsplus[i]);
    Py_XDECREF(fr->f_locals);
    Py_DECREF(fr->f_func);
    Py_DECREF(fr->f_code);
}
#elif PY_VERSION_HEX >= 0x030D0000
/* 3.13 exports the eval loop's own clear-and-pop. */
PyAPI_FUNC(void) _PyEval_FrameClearAndPop(PyThreadState *tstate, _PyInterpreterFrame *frame);
#else
/* 3.12: the frame we were handed has never run and was never linked, so it
 * has no frame object; clearing it is dropping its references (the
 * _PyFrame_ClearExceptCode + Py_DECREF(f_code) pair of ceval.c). */
static void clear_unrun_frame(_PyInterpreterFrame *fr) {
    if (fr->frame_obj) { /* cannot happen (eligibility checks it); never leak */
        PyFrameObject *fo = fr->frame_obj;
        fr->frame_obj = NULL;
        Py_DECREF(fo);
    }
    for (int i = 0; i < fr->stacktop; i++) Py_XDECREF(fr->localsplus[i]);
    Py_XDECREF(fr->f_locals);
    Py_DECREF(fr->f_funcobj);
    Py_DECREF(fr->f_code);
}
#endif

PyObject *wk_frame_fail(PyThreadState *ts, struct _PyInterpreterFrame *f) {
#if PY_VERSION_HEX >= 0x030D0000
    _PyEval_FrameClearAndPop(ts, f);
#elif PY_VERSION_HEX >= 0x030C0000
    clear_unrun_frame(f);
    pop_frame(ts, f);
#else
    (void)ts, (void)f; /* _PyEval_Vector clears and pops it */
#endif
    return NULL;
}

/* The original frame whose code wk_frame_run_code runs now on this thread
 * (innermost), so that the transformed code can let go of its arguments. */
typedef struct {
    _PyInterpreterFrame *frame;
    int released;
} RunningFrame;
static _Thread_local RunningFrame running;

int wk_frame_release_args(void) {
    _PyInterpreterFrame *f = running.frame;
    if (!f) return 0;
    int nargs = wk_frame_nargs(FRAME_CODE(f));
    for (int i = 0; i < nargs; i++) Py_CLEAR(f->localsplus[i]);
    running.released = 1;
    return 1;
}

/* The values of a call made by wk_frame_call_handing_over, until the frame
 * of `code` takes them (wk_frame_take_handover). */
typedef struct {
    PyObject **items;
    Py_ssize_t n;
    PyObject *code;
} Handover;
static _Thread_local Handover handover;

PyObject *wk_frame_call_handing_over(PyObject *fn, PyObject *box) {
    if (!PyList_CheckExact(box)) {
        PyErr_SetString(PyExc_SystemError, "wick: handover without a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(box);
    PyObject **items = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n + 1));
    if (!items) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) items[i] = Py_NewRef(PyList_GET_ITEM(box, i));
    if (PyList_SetSlice(box, 0, n, NULL) < 0) {
        for (Py_ssize_t i = 0; i < n; i++) Py_DECREF(items[i]);
        PyMem_Free(items);
        return NULL;
    }
    Handover outer = handover; /* a handover not taken (hook off): the next call's */
    handover.items = items;
    handover.n = n;
    handover.code = PyFunction_Check(fn) ? PyFunction_GET_CODE(fn) : NULL;
    PyObject *res = PyObject_Vectorcall(fn, items, (size_t)n, NULL);
    handover = outer;
    for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(items[i]); /* NULL where the frame took them */
    PyMem_Free(items);
    return res;
}

void wk_frame_take_handover(struct _PyInterpreterFrame *f) {
    if (!handover.items || (PyObject *)FRAME_CODE(f) != handover.code) return;
    /* the frame holds its own references to its arguments (_PyEval_Vector
     * took them before evaluating it); ours go */
    for (Py_ssize_t i = 0; i < handover.n; i++) Py_CLEAR(handover.items[i]);
    handover.items = NULL;
}

PyObject *wk_frame_run_code(PyThreadState *ts, struct _PyInterpreterFrame *f, PyCodeObject *nc,
                            int *kept) {
    if (kept) *kept = 0;
    _PyInterpreterFrame *sh = push_frame(ts, FRAME_WORDS(nc));
    if (sh == NULL) {
        PyErr_NoMemory();
        return wk_frame_fail(ts, f);
    }
#if PY_VERSION_HEX >= 0x030D0000
    sh->f_executable = Py_NewRef(nc);
    sh->instr_ptr = _PyCode_CODE(nc);
#else
    sh->f_code = (PyCodeObject *)Py_NewRef(nc);
    sh->prev_instr = _PyCode_CODE(nc) - 1;
#endif
#if PY_VERSION_HEX >= 0x030C0000
    sh->f_funcobj = Py_NewRef(f->f_funcobj);
    sh->return_offset = 0;
#else
    sh->f_func = (PyFunctionObject *)Py_NewRef(f->f_func);
    sh->is_entry = false;
#endif
    sh->f_globals = f->f_globals;
    sh->f_builtins = f->f_builtins;
    sh->f_locals = NULL;
    sh->frame_obj = NULL;
    sh->previous = NULL;
    sh->stacktop = nc->co_nlocalsplus;
    sh->owner = FRAME_OWNED_BY_THREAD;
    /* Only argument slots: the new code's own MAKE_CELL wraps cell arguments
     * and COPY_FREE_VARS reads the closure from the function. */
    int nargs = wk_frame_nargs(FRAME_CODE(f));
    for (int i = 0; i < nargs; i++) sh->localsplus[i] = Py_XNewRef(f->localsplus[i]);
    for (int i = nargs; i < nc->co_nlocalsplus; i++) sh->localsplus[i] = NULL;

    RunningFrame outer = running;
    running.frame = f;
    running.released = 0;
    PyObject *res = _PyEval_EvalFrameDefault(ts, sh, 0);
    int released = running.released;
    running = outer;
    /* The shadow copied the arguments, so the original frame is still
     * fresh and can run instead (the caller's choice, for Exceptions only:
     * KeyboardInterrupt and friends always propagate), unless the
     * transformed code let go of them (past its graph, at a break). */
    int keep = kept && !res && !released && PyErr_ExceptionMatches(PyExc_Exception);
    if (kept) *kept = keep;

#if PY_VERSION_HEX >= 0x030D0000
    /* the loop cleared and popped the shadow; the original is ours */
    if (!keep) _PyEval_FrameClearAndPop(ts, f);
#elif PY_VERSION_HEX >= 0x030C0000
    /* the loop cleared and popped the shadow; the original is ours */
    if (!keep) {
        clear_unrun_frame(f);
        pop_frame(ts, f);
    }
#else
    /* the shadow is an entry frame the loop left in place; _PyEval_Vector
     * clears the original */
    clear_frame(sh);
    pop_frame(ts, sh);
#endif
    return res;
}

#else /* !WK_FRAME_CAN_TRANSFORM */

PyCodeObject *wk_frame_code_if_eligible(PyThreadState *ts, struct _PyInterpreterFrame *f,
                                        int throwflag) {
    (void)ts, (void)f, (void)throwflag;
    return NULL;
}
PyFunctionObject *wk_frame_func_Borrow(struct _PyInterpreterFrame *f) {
    (void)f;
    return NULL;
}
PyObject *wk_frame_globals_Borrow(struct _PyInterpreterFrame *f) {
    (void)f;
    return NULL;
}
PyObject *const *wk_frame_args(struct _PyInterpreterFrame *f) {
    (void)f;
    return NULL;
}
int wk_frame_nargs(PyCodeObject *co) {
    return co->co_argcount + co->co_kwonlyargcount + !!(co->co_flags & CO_VARARGS) +
           !!(co->co_flags & CO_VARKEYWORDS);
}
const char *wk_frame_incompatible(PyCodeObject *orig, PyCodeObject *nc) {
    (void)orig, (void)nc;
    return "this Python version cannot run transformed frames";
}
PyObject *wk_frame_run_code(PyThreadState *ts, struct _PyInterpreterFrame *f, PyCodeObject *nc,
                            int *kept) {
    (void)ts, (void)f, (void)nc;
    if (kept) *kept = 0;
    PyErr_SetString(PyExc_SystemError, "wick: frame transform unsupported on this Python");
    return NULL;
}
PyObject *wk_frame_fail(PyThreadState *ts, struct _PyInterpreterFrame *f) {
    (void)ts, (void)f;
    return NULL;
}
int wk_frame_release_args(void) { return 0; }
PyObject *wk_frame_call_handing_over(PyObject *fn, PyObject *box) {
    PyObject *args = PySequence_Tuple(box);
    PyObject *res = args ? PyObject_Call(fn, args, NULL) : NULL;
    Py_XDECREF(args);
    return res;
}
void wk_frame_take_handover(struct _PyInterpreterFrame *f) { (void)f; }
void *wk_frame_datastack_top(PyThreadState *ts) {
    (void)ts;
    return NULL;
}
#endif
