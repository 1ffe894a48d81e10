/* symbolic.h — private to csrc/capture/ (symbolic.c, guards.c,
 * transform.c): the extra guard kinds and the return plan that symbolic.c
 * hands to transform.c. Nothing outside csrc/capture/ includes this. */
#ifndef WICK_CAPTURE_SYMBOLIC_H
#define WICK_CAPTURE_SYMBOLIC_H

#include "capture.h"

/* ---- guards.c extras ---------------------------------------------------- */
/* Names used in `why` messages and describe(): arg i prints as L['<name>'].
 * `names` is a tuple of str (borrowed; the guards keep a reference). */
void wk_guards_set_arg_names(WkGuards *g, PyObject *names);
/* A global of another module's globals dict (an inlined callee's), looked
 * up like LOAD_GLOBAL, is value (identity). All borrowed. */
void wk_guard_globals_is(WkGuards *g, PyObject *globals, PyObject *name, PyObject *value);
/* getattr(module, name) is value (identity); module, name, value borrowed. */
void wk_guard_attr_is(WkGuards *g, PyObject *module, PyObject *name, PyObject *value);
/* The value of arg is `value` (identity): for opaque objects used by identity. */
void wk_guard_id(WkGuards *g, int arg, PyObject *value_Borrow);
int wk_guards_count(const WkGuards *g);
/* The same guards on getattr(arg, *path) (path: tuple of str, borrowed;
 * NULL means the argument itself), read afresh on every check. */
void wk_guard_type_at(WkGuards *g, int arg, PyObject *path, PyTypeObject *type);
void wk_guard_id_at(WkGuards *g, int arg, PyObject *path, PyObject *value_Borrow);
void wk_guard_equals_at(WkGuards *g, int arg, PyObject *path, PyObject *value_Borrow);
void wk_guard_tensor_at(WkGuards *g, int arg, PyObject *path, PyObject *tensor_Borrow);
/* Type and tensor metadata of the global `name` (looked up like
 * LOAD_GLOBAL: globals, then builtins), which the transformed code reads
 * afresh on every call. */
void wk_guard_global_tensor(WkGuards *g, PyObject *name_Borrow, PyObject *tensor_Borrow);
/* fn (a function object, pinned by the entry) still has the __code__,
 * __defaults__ and __kwdefaults__ it has now. */
void wk_guard_function(WkGuards *g, PyObject *fn);
/* cell (pinned) still holds value (identity; NULL: still empty). */
void wk_guard_cell_is(WkGuards *g, PyObject *cell, PyObject *value);
/* Closure cell i of the function being called (the compiled frame's own)
 * holds value (identity; NULL: empty). */
void wk_guard_freevar_is(WkGuards *g, int i, PyObject *value);
/* _PyType_Lookup(type, name) is value (NULL: absent); type pinned. */
void wk_guard_type_attr_is(WkGuards *g, PyTypeObject *type, PyObject *name, PyObject *value);
/* name is not in the instance __dict__ of getattr(arg, *path). */
void wk_guard_dict_lacks_at(WkGuards *g, int arg, PyObject *path, PyObject *name);
/* name is in none of the _parameters/_buffers/_modules of the nn.Module
 * getattr(arg, *path) (so Module.__setattr__ keeps it in its __dict__);
 * wk_guards_module_plain_attr tests that on a module now (borrowed). */
void wk_guard_module_plain_attr_at(WkGuards *g, int arg, PyObject *path, PyObject *name);
int wk_guards_module_plain_attr(PyObject *module, PyObject *name);
/* argument arg is not the same object as any other argument of the call */
void wk_guard_arg_distinct(WkGuards *g, int arg);
/* getattr(arg, *path) is (same) or is not (!same) getattr(arg2, *path2); paths borrowed, NULL: the argument */
void wk_guard_same_as_at(WkGuards *g, int arg, PyObject *path, int arg2, PyObject *path2, int same);
/* the nn.Module getattr(arg, *path) has no hooks; no global module hooks. */
void wk_guard_no_hooks_at(WkGuards *g, int arg, PyObject *path);
/* getattr/getitem(arg, *path) is an exact tuple of length `shape` (an int)
 * or an exact dict with keys `shape` (a tuple), in order. */
void wk_guard_shape_at(WkGuards *g, int arg, PyObject *path, PyObject *container, PyObject *shape);
void wk_guard_no_global_hooks(WkGuards *g);
int wk_guards_module_has_no_hooks(PyObject *m); /* 1 none, 0 some */
int wk_guards_no_global_hooks(void);             /* 1 none, 0 some, -1 error */
/* Ends building: the tensor checks become one batched check (torch's
 * TensorGuards) and the example tensors are released. */
void wk_guards_finalize(WkGuards *g);
/* dict (pinned) maps key to value (identity; NULL: absent). */
void wk_guard_dict_item_is(WkGuards *g, PyObject *dict, PyObject *key, PyObject *value);
/* fn() (a no-argument torch query, pinned) returns value (a bool or None: identity). */
void wk_guard_call_is(WkGuards *g, PyObject *fn, PyObject *value);
/* obj (pinned) == snapshot on every call. */
void wk_guard_pinned_equals(WkGuards *g, PyObject *obj, PyObject *snapshot);
/* torch.is_grad_enabled() now: 1/0, or -1 with a Python exception. */
int wk_guards_grad_enabled(void);
/* One step of a source path from x: elem a str is getattr(x, elem), elem a
 * 1-tuple (key,) is x[key]; what LOAD_ATTR/BINARY_SUBSCR give, found without
 * running nn.Module.__getattr__ or nn.ModuleList.__getitem__ in Python when
 * the classes keep them. New reference, or NULL with the exception eager
 * code would raise. */
PyObject *wk_source_step_Ref(PyObject *x, PyObject *elem);

/* Sources as a tree: node k is one step (elem: attribute name or (key,))
 * from its parent node, or from root argument `root` when parent is -1;
 * equal prefixes share a node. Used by the guards and the GraphLoader so
 * that self.layers is read once per call however many parameters hang
 * below it. */
typedef struct {
    int parent;
    int root;
    PyObject *elem; /* owned */
} WkSrcNode;
/* What one resolved step read, so the next call can reuse its answer
 * without the lookups: the base object and its type (with the type's
 * version tag), then the dicts the nn.Module/ModuleList fast path read, in
 * order (the base's instance __dict__ first), with their version tags.
 * While the same base has the same type version and every dict the same
 * version, the step gives the same object. All pointers borrowed and only
 * compared, except value, which is alive while dicts[ndicts-1] is
 * unchanged (that dict holds it). ndicts 0: nothing remembered. */
#define WK_SRC_MEMO_DICTS 4
typedef struct {
    PyObject *base;
    PyTypeObject *type;
    unsigned int type_version;
    int ndicts;
    PyObject *dicts[WK_SRC_MEMO_DICTS];
    uint64_t versions[WK_SRC_MEMO_DICTS];
    PyObject *value;
} WkSrcMemo;
typedef struct {
    WkVec(WkSrcNode) nodes;
    WkVec(WkSrcMemo) memo; /* one per node, written while resolving */
} WkSrcTree;
/* The node of getattr(roots[root], *path), adding missing prefixes; -1 for
 * an empty path. */
int wk_srctree_node(WkSrcTree *t, int root, PyObject *path);
/* The object at `node` (borrowed from cache, which holds one owned
 * reference per resolved node, NULL where not resolved yet: the caller
 * zeroes it before and releases it after), or NULL with the exception. */
PyObject *wk_srctree_get(const WkSrcTree *t, int node, PyObject *const *roots, int nroots, PyObject **cache);
void wk_srctree_clear(WkSrcTree *t);

/* The hand-over from guards to the GraphLoader. wk_guards_input_node
 * (after wk_guards_finalize) adds getattr(arg, *path) to the guards' source
 * tree and returns its node (-1: the argument itself). After a passing
 * check, the objects it resolved wait for the loader whose token matches:
 * wk_guards_take_handover returns them (owned array of nvalues slots, NULL
 * where not resolved; the caller releases them) when frame_args[r] is the
 * very argument arg_of_root[r] the check saw, for every root with an
 * argument (-1: a global); otherwise NULL and the loader resolves. */
#define WK_HANDOVER_MAX_ARGS 32
int wk_guards_input_node(WkGuards *g, int arg, PyObject *path);
uint64_t wk_guards_token(const WkGuards *g);
PyObject **wk_guards_take_handover(uint64_t token, PyObject *const *frame_args, const int *arg_of_root, int nroots,
                                   int *nvalues);

/* ---- loader.c ----------------------------------------------------------- */
/* A callable that the transformed code calls with its roots (the frame
 * arguments and globals that graph inputs come from): resolves graph input
 * i = getattr(roots[input_roots[i]], *input_paths[i]) in C and calls
 * `compiled` with the inputs. input_paths[i] may be NULL (the root itself).
 * Borrows nothing after it returns. New reference, or NULL with a Python
 * exception. */
PyObject *wk_loader_new_Ref(PyObject *compiled, const int *input_roots, PyObject *const *input_paths, int ninputs,
                            const int *arg_of_root, int nroots);
/* Inputs the graph's caller writes back into (WK_EFFECT_COPY): a call where
 * one of them shares memory with another input (from another source) raises
 * before the graph runs, so the frame runs eagerly. 0, or -1 with an exception. */
int wk_loader_set_written(PyObject *loader, const int *inputs, int n);
/* Links the GraphLoader among code's constants to the entry's guards (after
 * wk_guards_finalize): its inputs become nodes of their source tree, so a
 * passing check hands the resolved inputs over. 0, or -1 with an exception. */
int wk_loader_share(PyObject *code, WkGuards *g);

/* ---- transform.c -------------------------------------------------------- */
/* How the transformed code rebuilds the frame's return value. */
typedef enum {
    WK_RET_OUTPUT, /* graph output `index` (a temp local) */
    WK_RET_ARG,    /* getattr(frame argument `index`, *path), unchanged (identity kept) */
    WK_RET_CONST,  /* `value` (an immutable constant) */
    WK_RET_GLOBAL, /* the global `value` (a str: its name), unchanged */
    WK_RET_TUPLE,  /* items */
    WK_RET_LIST,   /* items */
    WK_RET_DICT,   /* keys: `value` (a list of constants), values: items */
    WK_RET_CALL,   /* `value`(*items): a namedtuple or a rebuilt object */
    WK_RET_NULL,   /* a NULL stack slot (below a callable): graph breaks only */
    WK_RET_ATTR,   /* getattr(items[0], `value`) (a str): a bound method at a graph break */
    WK_RET_ENTER,  /* the __exit__ of `value`(index) entered with BEFORE_WITH: a grad-mode block
                    * open across a graph break, re-entered (value: torch.set_grad_enabled);
                    * index -1: value() (an autocast block: a partial of torch.autocast) */
    WK_RET_FREEVAR, /* the cell of the frame's free variable `index` (its closure's, per call) */
    WK_RET_CELL,    /* a new cell, made once (number `index`) before anything reads it, holding
                     * items[0] (nitems 0: empty); read again it is the same cell */
    WK_RET_WRITTEN, /* written input `index` as the GraphLoader resolved it (returned after the
                     * graph's outputs, WkEffects.written): the target of a COPY effect */
} WkRetKind;

typedef struct WkRet {
    WkRetKind kind;
    int index;
    PyObject *value; /* borrowed */
    PyObject *path;  /* WK_RET_ARG: tuple of attribute names, or NULL (borrowed) */
    int nitems;
    struct WkRet **items;
} WkRet;

/* Side effects on objects from outside the frame, replayed by the
 * transformed code after its graph, in program order (breaks.c plans them). */
typedef enum {
    WK_EFFECT_SETATTR, /* target.name = value */
    WK_EFFECT_DELATTR, /* del target.name */
    WK_EFFECT_SETITEM, /* target[key] = value */
    WK_EFFECT_CLEAR,   /* target.clear() */
    WK_EFFECT_GLOBAL,  /* global name = value */
    WK_EFFECT_APPEND,  /* target.append(value) */
    WK_EFFECT_COPY,    /* target.copy_(value): an input tensor the frame wrote in place */
    WK_EFFECT_CALL,    /* name(target[, index][, value]), its result dropped: name is an unbound
                        * list or set method (list.insert, set.add, ...), or the call site of a
                        * logging call, site(method, args, kwargs) (vals/logcall.c) */
    WK_EFFECT_EXIT,    /* target(None, None, None): the real __exit__ of a grad-mode or autocast
                        * block the frame left (vals/ctx.c); run right after the graph */
} WkEffectKind;

typedef struct {
    WkEffectKind kind;
    WkRet *target, *value;
    WkRet *index;   /* CALL: list.insert's index, or NULL */
    PyObject *name; /* borrowed: attribute or global name (str), the item key, or CALL's method */
} WkEffect;

typedef struct {
    int n;
    WkEffect *items; /* owned by the plan's maker */
    /* graph inputs the COPY effects write (owned by the plan's maker): the
     * loader refuses a call where one shares memory with another input */
    int nwritten;
    const int *written;
} WkEffects;


/* The code object that replaces `code`: calls `compiled` (may be NULL when
 * there is no graph) with graph input i = getattr(frame argument
 * input_args[i], *input_paths[i]) (paths may be NULL), or the global named
 * input_paths[i] (a str) when input_args[i] is -1; unpacks its
 * `noutputs` results and returns `ret`. Instructions carry line `line`.
 * New reference, or NULL with a Python exception. */
PyObject *wk_cap_transform_Ref(PyCodeObject *code, PyObject *compiled, const int *input_args,
                               PyObject *const *input_paths, int ninputs, int noutputs, const WkRet *ret,
                               int line, const WkEffects *effects);

/* ---- graph breaks (breaks.c plans them, transform.c emits them) -------- */
typedef enum {
    WK_BREAK_INSTR,  /* run one instruction in Python, then resume[0] */
    WK_BREAK_BRANCH, /* a conditional jump on a value the graph computed: resume[0] when it
                      * falls through, resume[1] when it jumps */
    WK_BREAK_RAISE,  /* RAISE_VARARGS in Python: nothing follows */
} WkBreakKind;

/* What the transformed code does after the graph of a frame that breaks:
 *   PUSH_NULL; LOAD_CONST resume; <args>; <operands>; <the instruction>;
 *   CALL; RETURN_VALUE
 * `args` are the live locals and the stack items below the operands (no
 * NULLs), rebuilt before the instruction runs; the instruction's results
 * are the resume function's last arguments. */
typedef struct {
    WkBreakKind kind;
    int opcode, oparg;   /* raw, of the running interpreter */
    PyObject *name;      /* borrowed: the name an attribute, global or import instruction uses, or NULL */
    PyObject *kwnames;   /* borrowed: CALL's keyword names, or NULL */
    int jump_if_true;    /* BRANCH: the original jumps when the value is true */
    int line;            /* the instruction's line */
    int endline, col, endcol; /* and columns (col -1: none), for tracebacks */
    int nargs, nin, nout;
    int nfree;           /* free variables: each resume function is made at the break over the frame's cells */
    int ncells;          /* the frame's own cell variables, in localsplus order: the resume
                          * function's first free variables, made at the break (WK_RET_CELL) */
    WkRet **cells;       /* ncells (owned array); cell_table: every WK_RET_CELL of the plan */
    int ncell_table;
    WkRet **cell_table;
    int split;           /* no instruction: the resume function starts where the frame stopped */
    int nlocals;         /* the first nlocals args are locals, the others the stack below the operands */
    WkRet **args;        /* nargs values */
    WkRet **in;          /* nin operands, bottom first (WK_RET_NULL allowed) */
    PyObject *resume[2]; /* borrowed: the resume functions (NULL where none) */
    PyObject *callee;    /* borrowed: the code of the Python function the CALL runs as its own frame, or NULL */
    PyObject *loop_body; /* borrowed: a split's loop body function (breaks.c, loops.c): resume[0] is its driver */
    /* grad-mode blocks re-entered (WK_RET_ENTER): until the resume function
     * returns, an exception restores grad mode `restore_grad` by calling
     * set_grad (borrowed); restore_grad -1: none re-entered */
    int restore_grad;
    PyObject *set_grad;
    /* autocast blocks re-entered: the state at entry is saved by calling
     * autocast_save() and, on an exception before the resume function
     * returns, put back by autocast_restore(saved) (both borrowed, or NULL) */
    PyObject *autocast_save, *autocast_restore;
    /* A break inside a try or with block: the instruction is protected, and
     * an exception it raises is handed to `handler` (borrowed: a resume
     * function that starts at the block's handler) with the locals, the
     * first handler_nstack stack args, handler_lasti (borrowed int, or NULL
     * when the handler takes none) and the exception. NULL: no block open. */
    PyObject *handler;
    int handler_nstack;
    PyObject *handler_lasti;
} WkBreak;

/* Like wk_cap_transform_Ref, but after the graph the code does what `b`
 * says instead of returning a rebuilt value. */
PyObject *wk_cap_transform_break_Ref(PyCodeObject *code, PyObject *compiled, const int *input_args,
                                     PyObject *const *input_paths, int ninputs, int noutputs, const WkBreak *b,
                                     const WkEffects *effects);

#endif /* WICK_CAPTURE_SYMBOLIC_H */
