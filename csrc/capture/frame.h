/* frame.h — private interface between hook.c and frame.c (transform.c
 * uses the two break lifetime helpers).
 *
 * frame.c is the one translation unit that includes CPython's internal
 * frame headers; hook.c only sees the opaque struct _PyInterpreterFrame.
 * WK_FRAME_CAN_TRANSFORM is 0 where frame.c does not know the frame layout
 * (3.14+): the hook then passes every frame through and never compiles.
 */
#ifndef WICK_CAPTURE_FRAME_H
#define WICK_CAPTURE_FRAME_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#define WK_FRAME_CAN_TRANSFORM 1
#else
#define WK_FRAME_CAN_TRANSFORM 0
#endif

struct _PyInterpreterFrame;
typedef PyObject *(*WkEvalFn)(PyThreadState *, struct _PyInterpreterFrame *, int);

/* The frame's code when the hook may consider the frame: a fresh,
 * thread-owned frame of an optimized, non-generator function, outside
 * tracer callbacks and finalization. NULL (no exception) = pass through. */
PyCodeObject *wk_frame_code_if_eligible(PyThreadState *ts, struct _PyInterpreterFrame *f,
                                        int throwflag);
PyFunctionObject *wk_frame_func_Borrow(struct _PyInterpreterFrame *f);
PyObject *wk_frame_globals_Borrow(struct _PyInterpreterFrame *f);
/* The argument slots (code order). Valid until the frame runs or dies. */
PyObject *const *wk_frame_args(struct _PyInterpreterFrame *f);
/* Number of argument slots of co: positional, kw-only, *args, **kwargs. */
int wk_frame_nargs(PyCodeObject *co);
/* Why `nc` cannot run in place of a frame of `orig` (NULL = it can). */
const char *wk_frame_incompatible(PyCodeObject *orig, PyCodeObject *nc);
/* Runs `nc` in place of frame f (same arguments) and disposes of f as the
 * running version requires. Returns the result (new ref) or NULL with an
 * exception. After this call f is gone (3.12) or owned by the caller (3.11).
 * With `kept` non-NULL, an Exception raised by nc (not a BaseException
 * only) leaves f untouched instead: *kept = 1, NULL returned with the
 * exception set, and the caller must either run f with the evaluator or
 * dispose of it with wk_frame_fail. */
PyObject *wk_frame_run_code(PyThreadState *ts, struct _PyInterpreterFrame *f, PyCodeObject *nc,
                            int *kept);
/* Error return without running f: disposes of f where the version requires
 * it (3.12) and returns NULL. The exception must be set. */
PyObject *wk_frame_fail(PyThreadState *ts, struct _PyInterpreterFrame *f);
/* Lifetimes across a graph break. The transformed code, past its graph,
 * lets the original frame (run by wk_frame_run_code) drop its arguments:
 * from then on it cannot run instead, and the values live as long as the
 * transformed code and the resume function hold them, as in eager.
 * Returns 1 when a frame released them, 0 when none runs. */
int wk_frame_release_args(void);
/* fn(*box) with the list `box` emptied first and the values handed over:
 * the frame of fn, on entering the hook (wk_frame_take_handover), becomes
 * their only holder, so a value the resume function drops dies then (a
 * call through the eval hook is not inlined: the caller's stack would
 * hold its arguments until the call returns). New reference or NULL. */
PyObject *wk_frame_call_handing_over(PyObject *fn, PyObject *box);
void wk_frame_take_handover(struct _PyInterpreterFrame *f);
/* Data-stack top, for balance checks in tests. */
void *wk_frame_datastack_top(PyThreadState *ts);

/* bytecode.c: test-only entries (_bc_decode, _asm_demo) and the opcode
 * tables, added to wick._C by wk_hook_init. */
int wk_bc_init(PyObject *module);

#endif /* WICK_CAPTURE_FRAME_H */
