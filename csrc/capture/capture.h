/* capture.h — the Python-facing half: PEP 523 frame hook, bytecode layer,
 * symbolic interpreter, guards and transformed code.
 *
 *   hook.c       PEP 523 hook, per-thread enabling, the per-code-object cache
 *                in co_extra, running transformed code in place of a frame,
 *                and wick._C.CompiledFunction (what wick.compile returns).
 *   frame.c      the version-specific frame handling (3.11 vs 3.12): the few
 *                named places where CPython internals are touched.
 *   bytecode.c   reading code objects (decode, deoptimised opcodes, lines)
 *                and assembling new ones (caches, EXTENDED_ARG, stack depth,
 *                line table). Needs no torch.
 *   symbolic.c   the symbolic interpreter: runs a frame's bytecode on
 *                symbolic values, builds a WkGraph, records guards and the
 *                reasons for falling back.
 *   guards.c     the flat list of C checks that decides whether a cache
 *                entry fits a call.
 *   breaks.c     graph breaks: the plan at a break (live values, the
 *                instruction run in Python), resume functions and their
 *                cache, side effects replayed after a graph.
 *   transform.c  the code object that replaces the frame: load the graph's
 *                inputs, call the compiled graph, rebuild the return value
 *                (or the live values at a break and call a resume function).
 *
 * All functions run with the GIL held. Ownership is in names (_Ref, _Borrow,
 * _Steal) or in the comment above a declaration.
 */
#ifndef WICK_CAPTURE_H
#define WICK_CAPTURE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "../common/common.h"
#include "../graph/graph.h"

/* ---- bytecode.c -------------------------------------------------------- */
typedef struct {
    int offset;   /* code-unit index of the instruction itself */
    int start;    /* code-unit index of its first EXTENDED_ARG prefix (== offset if none) */
    int opcode;   /* base (deoptimised) opcode of the running interpreter */
    int oparg;    /* with EXTENDED_ARG folded in */
    int line;     /* source line, -1 if none */
} WkInstr;

/* Decodes co's bytecode (PyCode_GetCode, never the adaptive copy). Returns a
 * malloc'd array (caller frees) and its length in *n, or NULL with a Python
 * exception set. */
WkInstr *wk_bc_decode(PyCodeObject *co, int *n);
const char *wk_bc_opname(int opcode); /* "LOAD_FAST"; "<N>" for unknown */
/* Index of the WkInstr whose offset is `offset`, or -1. */
int wk_bc_find(const WkInstr *instrs, int n, int offset);
/* Inline cache entries that follow `opcode` in the running interpreter. */
int wk_bc_ncaches(int opcode);
/* The index of the instruction that instruction i of ins (n decoded
 * instructions) jumps to: -1 when it is not a relative jump, -2 when the
 * target is not an instruction start. The 3.12 FOR_ITER target is its END_FOR. */
int wk_bc_jump_target(const WkInstr *ins, int n, int i);
/* 0 for instructions after which control never reaches the next one
 * (returns, raises, unconditional jumps). */
int wk_bc_falls_through(int opcode);
/* The running interpreter's opcode named `name` ("JUMP_FORWARD"), or -1. */
int wk_bc_opcode(const char *name);
/* One entry of co_exceptiontable, as indexes into the decoded instructions. */
typedef struct {
    int start, end, handler; /* instruction indexes (end exclusive) */
    int depth, lasti;        /* stack depth at the handler; push the offset first */
} WkExcRange;
/* co's exception table over its n decoded instructions raw: a malloc'd
 * array (caller frees; NULL when the table is empty) in *out and its length,
 * or -1 for a table this decoder does not understand (nothing allocated). */
int wk_bc_exc_ranges(PyCodeObject *co, const WkInstr *raw, int n, WkExcRange **out);

/* Assembler. Emits instructions of the running interpreter's version;
 * version differences are inside the named helpers below. */
typedef struct WkAsm WkAsm;
/* The new code keeps `like`'s argument layout, flags, filename, name,
 * qualname and first line, so tracebacks point at the user's source.
 * `like` is borrowed. */
WkAsm *wk_asm_new(PyCodeObject *like);
void wk_asm_free(WkAsm *a);
int wk_asm_const(WkAsm *a, PyObject *value); /* co_consts index; borrows value, the code keeps a ref */
int wk_asm_name(WkAsm *a, const char *name); /* co_names index */
int wk_asm_local(WkAsm *a, const char *name);/* localsplus index of an argument, or a new local */
int wk_asm_nlocals(WkAsm *a);                 /* locals so far: arguments and new ones */
/* The code is a new function's: its arguments are `argnames` (a sequence
 * of str, plain positional; they become the first locals), its co_qualname
 * `name` (str; co_name stays the original's, which tracebacks show). Both
 * borrowed. Call before any wk_asm_local. */
void wk_asm_set_signature(WkAsm *a, PyObject *argnames, PyObject *name);
void wk_asm_set_line(WkAsm *a, int line);    /* line of the instructions emitted next */
/* Line and columns (0-based, end exclusive, as co_positions gives them) of
 * the instructions emitted next, until the next set_line/set_position. */
void wk_asm_set_position(WkAsm *a, int line, int endline, int col, int endcol);
void wk_asm_op(WkAsm *a, int opcode, int oparg); /* raw emit: prefixes and zeroed caches added */
/* version-neutral helpers */
void wk_asm_resume(WkAsm *a);
void wk_asm_push_null(WkAsm *a);
void wk_asm_load_const(WkAsm *a, PyObject *value);
void wk_asm_load_fast(WkAsm *a, int local);      /* checked load: safe for maybe-unbound locals */
void wk_asm_store_fast(WkAsm *a, int local);
void wk_asm_load_global(WkAsm *a, const char *name, int push_null);
void wk_asm_load_attr(WkAsm *a, const char *name);
void wk_asm_call(WkAsm *a, int nargs);           /* stack: NULL, callable, args... -> result */
void wk_asm_build_tuple(WkAsm *a, int n);
void wk_asm_unpack_sequence(WkAsm *a, int n);
void wk_asm_return_value(WkAsm *a);
/* Free variables: the code's co_freevars become `names` (tuple of str,
 * borrowed); its free variable i is used with wk_asm_deref (LOAD_DEREF,
 * LOAD_CLOSURE, ... with the index among the free variables), copied in by
 * wk_asm_copy_free_vars (before RESUME), and wk_asm_make_closure(code)
 * pushes a new function of `code` (borrowed; its freevars the same) over
 * these cells. No cell variables. */
void wk_asm_set_freevars(WkAsm *a, PyObject *names);
void wk_asm_deref(WkAsm *a, int opcode, int free_index);
void wk_asm_copy_free_vars(WkAsm *a);
void wk_asm_make_closure(WkAsm *a, PyObject *code);
/* Finishes: stack size (handlers included), line table, exception table.
 * New reference, or NULL with a Python exception. The assembler stays
 * valid (free it). */
PyObject *wk_asm_finish_Ref(WkAsm *a);
/* bytecode.c: jumps by label, so callers need
 * not know EXTENDED_ARG sizes (finish resolves them to a fixed point), and
 * COMPARE_OP with the per-version oparg encoding (3.12 mask bits). */
int wk_asm_new_label(WkAsm *a);
void wk_asm_bind_label(WkAsm *a, int label);         /* label = next emitted instruction */
void wk_asm_jump(WkAsm *a, int opcode, int label);   /* any relative jump opcode */
void wk_asm_pop_jump_if(WkAsm *a, int if_true, int label); /* pops; jumps forward when truth == if_true */
void wk_asm_compare_op(WkAsm *a, int cmp);           /* 0..5 = < <= == != > >= */
/* obj -> the call-ready pair [method, self] or [NULL, attr] (3.13: reversed),
 * so that args... + wk_asm_call(n) calls obj.name(args...). */
void wk_asm_load_method(WkAsm *a, const char *name);
/* Protects the instructions bound from label start_label up to (not
 * including) end_label: an exception raised there pops the value stack to
 * `depth`, pushes the raising instruction's offset if `lasti`, pushes the
 * exception and jumps to handler_label (CPython 3.11+ zero-cost exception
 * handling; the handler code uses PUSH_EXC_INFO/POP_EXCEPT/RERAISE as
 * CPython's compiler emits them). Regions may nest: for an instruction in
 * several, the one given last wins, so give outer regions first. Labels may
 * be bound before or after this call; finish checks them. */
void wk_asm_try(WkAsm *a, int start_label, int end_label, int handler_label, int depth, int lasti);
/* Like wk_asm_call with keyword arguments: the last len(kwnames) of the
 * nargs values are passed by the names in kwnames (tuple of str, borrowed). */
void wk_asm_call_kw(WkAsm *a, int nargs, PyObject *kwnames);

/* ---- guards.c ---------------------------------------------------------- */
typedef struct WkGuards WkGuards;
WkGuards *wk_guards_new(void);
void wk_guards_free(WkGuards *g);
/* Guards on frame argument `arg` (index among the code's arguments). */
void wk_guard_tensor(WkGuards *g, int arg, PyObject *tensor_Borrow); /* dtype, device, sizes, strides, requires_grad, exact type */
void wk_guard_type(WkGuards *g, int arg, PyTypeObject *type);
void wk_guard_equals(WkGuards *g, int arg, PyObject *value_Borrow); /* type + ==, for ints, floats, bools, None, strings */
/* Guards on frame globals: the value bound to `name` is `value` (identity). */
void wk_guard_global_is(WkGuards *g, PyObject *name_Borrow, PyObject *value_Borrow);
void wk_guard_grad_mode(WkGuards *g, int enabled);
/* 1 pass, 0 fail, -1 error (Python exception set). `args` are the frame's
 * argument values in code order; globals the frame's globals dict. Cheapest
 * checks first. On failure *why (may be NULL) names the first failing check
 * for WICK_LOG=recompiles. */
int wk_guards_check(const WkGuards *g, PyObject *const *args, int nargs, PyObject *globals,
                    const char **why);
/* 1 when `why` (a failure wk_guards_check gave) is a tensor's size or
 * strides, else 0 (NULL too). */
int wk_guards_why_is_shape(const char *why);
/* Human-readable list of checks (new reference: list of str). */
PyObject *wk_guards_describe_Ref(const WkGuards *g);
/* 1 when calling nn.Module m calls forward(m, ...) and nothing else (no
 * hooks, nn.Module's call path, or `call` as its class's __call__ when not
 * NULL; forward not shadowed on the instance), 0 when not, -1 with an
 * exception. All borrowed. */
int wk_module_call_is_forward(PyObject *m, PyObject *forward, PyObject *call);

/* ---- hook.c: the cache and the compile callback ------------------------ */
/* One compiled (or deliberately eager) variant of a code object. */
typedef struct WkCacheEntry {
    struct WkCacheEntry *next;
    /* Guard check: 1 pass, 0 fail, -1 error. The hook owns guard_state and
     * calls free_guards on it when the entry dies. */
    int (*check)(void *guard_state, PyObject *const *args, int nargs, PyObject *globals,
                 const char **why);
    void (*free_guards)(void *guard_state);
    void *guard_state;
    PyObject *code;   /* owned: the transformed code to run, or NULL to run the frame eagerly */
    PyObject *info;   /* owned dict for explain(): graph, source, guards, reason, ...; may be NULL */
    unsigned flags;   /* WK_ENTRY_*: set by the frame compiler */
    /* Set by the hook: the compile options (the dict given to wick.compile)
     * this entry was made under (strong). A call under other options never
     * uses it: wick.compile(f, fullgraph=True) after wick.compile(f) does
     * not reuse the earlier entries. */
    PyObject *options;
} WkCacheEntry;

/* WkCacheEntry.flags */
enum {
    /* An eager entry (code == NULL) whose reason does not depend on the
     * arguments' metadata (shapes, strides, values): an unsupported opcode
     * or construct reached whatever the shapes. The hook then replaces its
     * guards by the arguments' exact types, so new shapes run eagerly at
     * once instead of being interpreted again. The hook also infers this
     * when two eager entries of one code give the same reason. */
    WK_ENTRY_ARGS_INDEPENDENT = 1u << 0,
    /* The transformed code does things before it returns that cannot be
     * undone (Python side effects, calls between graphs after a graph
     * break). Without this flag an exception (an Exception, not a
     * BaseException such as KeyboardInterrupt) raised by the transformed
     * code makes the hook run the original frame eagerly instead, from its
     * untouched arguments: exact for code that only calls a graph (graphs
     * mutate nothing before they return), and it gives try/except/finally
     * around graph code its real semantics. A compiler that emits impure
     * code must set this flag and handle exceptions itself (exception
     * tables). */
    WK_ENTRY_IMPURE = 1u << 1,
    /* With WK_ENTRY_IMPURE: the graph runs first, before anything impure,
     * and the transformed code turns an exception raised there into
     * wk_graph_failed_type with the original as its __context__. The hook
     * then runs the original frame eagerly, as for a pure entry (an
     * Exception), or raises the original (a BaseException); any other
     * exception propagates. */
    WK_ENTRY_GRAPH_FIRST = 1u << 2,
};
/* breaks.c: the exception class of WK_ENTRY_GRAPH_FIRST (an Exception), or
 * NULL until wk_graph_failed_type_ready() or the first graph break made it. */
extern PyObject *wk_graph_failed_type;
/* Creates wk_graph_failed_type on first use: transformed code that protects
 * its graph call needs it before any break was compiled. 0 or -1. */
int wk_graph_failed_type_ready(void);

/* Called by the hook on a cache miss, with the hook disabled on this thread.
 * fn/code are the frame's function and code, args its argument values
 * (borrowed), options the dict given to wick.compile (borrowed): that of
 * the innermost CompiledFunction being called on this thread, else that of
 * the code's last mark. The entry is kept for these options only.
 * Returns a new entry (the hook takes ownership), or NULL with a Python
 * exception set: the hook then propagates that exception (fullgraph=True
 * errors, KeyboardInterrupt). Falling back to eager is expressed as an entry
 * with code == NULL and a reason in info, never as NULL. */
typedef WkCacheEntry *(*WkFrameCompiler)(PyFunctionObject *fn, PyCodeObject *code,
                                         PyObject *const *args, int nargs, PyObject *options);
void wk_hook_set_compiler(WkFrameCompiler compiler);
/* The function whose frame the hook is checking guards for (borrowed; set
 * just before the entries' checks run), for guards on its closure cells. */
extern _Thread_local PyFunctionObject *wk_hook_checking_fn;
/* Frees an entry and everything it owns (not ->next). */
void wk_cache_entry_free(WkCacheEntry *e);

/* hook.c: marks `code` so the hook considers its frames
 * (CompiledFunction does this for fn.__code__; capture uses it for resume
 * functions). options is kept (new reference); a second mark replaces it.
 * 0 or -1 with a Python exception. */
int wk_hook_mark_code(PyCodeObject *code, PyObject *options);

/* breaks.c: 1 for code of Python's standard library or of torch's own
 * Python package (frames the hook leaves alone), else 0. No exception. */
int wk_code_is_library(PyCodeObject *co);

/* Adds CompiledFunction, set_enabled, reset, code_entries, ... to wick._C. */
int wk_hook_init(PyObject *module);

/* ---- symbolic.c -------------------------------------------------------- */
/* The WkFrameCompiler wick installs. */
WkCacheEntry *wk_cap_compile_frame(PyFunctionObject *fn, PyCodeObject *code, PyObject *const *args,
                                   int nargs, PyObject *options);
int wk_cap_init(PyObject *module);

#endif /* WICK_CAPTURE_H */
