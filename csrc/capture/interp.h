/* interp.h — private to the symbolic interpreter (symbolic.c and the value
 * families under csrc/capture/vals/). Nothing else includes it.
 *
 * Values on the symbolic stack (Sv) belong to a kind; each kind implements
 * one operations table (SvOps) in its own file:
 *
 *   vals/const.c     Python constants known at capture time (numbers, str,
 *                    None, tuples of constants, dtypes, modules, callables):
 *                    folding of operators, truth, subscripts, iteration,
 *                    and calls of callables (dispatched to the families
 *                    below by what the callable is).
 *   vals/tensor.c    tensors (graph values) and their attributes/methods.
 *   vals/torchfn.c   torch functions bound against the op table.
 *   vals/seq.c       tuples and lists built or unpacked during capture,
 *                    and iterators over unrolled items.
 *   vals/dict.c      dicts built during capture.
 *   vals/object.c    objects reached from the frame's arguments (modules,
 *                    plain instances): attributes and bound methods.
 *   vals/function.c  user functions, closures and cells: inlining pushes a
 *                    Frame.
 *   vals/builtins.c  builtins folded at capture time (len, isinstance, ...).
 *   vals/newmodule.c nn.Module objects constructed during capture (an
 *                    SV_OBJECT whose Module bookkeeping is modelled).
 *   vals/ctx.c       context managers (torch.no_grad / enable_grad).
 *   vals/scratch.c   copies made at capture time that only capture sees
 *                    (copy.deepcopy of a guarded config object).
 *   vals/set.c       sets built during capture (BUILD_SET, set()): a real
 *                    set of exactly known elements.
 *   vals/exc.c       exceptions raised inside captured code: a propagating
 *                    exception (I->exc) unwinds through each inlined frame's
 *                    exception table, as CPython does.
 *   vals/logcall.c   logging calls on a pinned logger (logger.warning,
 *                    transformers' warning_once): kept as side effects made
 *                    for real after the graph.
 *
 * The interpreter loop (symbolic.c) only dispatches through the tables:
 * adding a kind adds an enum entry, a table, and one line in sv_ops[];
 * no switch elsewhere changes.
 *
 * Memory: every Sv and Frame is owned by the Interp (freed when the
 * compile ends); pointers between them are borrowed. */
#ifndef WICK_CAPTURE_INTERP_H
#define WICK_CAPTURE_INTERP_H

#include <opcode.h>

#include "symbolic.h"
#include "../runtime/runtime.h"

#if PY_VERSION_HEX >= 0x030C0000
#define PY312 1
#else
#define PY312 0
#endif
#if PY_VERSION_HEX >= 0x030D0000
#define PY313 1
#else
#define PY313 0
#endif

/* ---- torch tables (torchinfo.c), resolved once torch is imported -------- */
extern PyObject *cap_torch_mod;
extern PyObject *cap_fn_to_op; /* dict: torch callable -> op number */
extern PyObject *cap_dtype_objs[WK_NDTYPES];
extern PyTypeObject *cap_tensor_type, *cap_param_type, *cap_module_type;
extern PyObject *cap_size_type, *cap_device_type, *cap_dtype_type, *cap_strided_layout;
extern PyObject *cap_no_grad_type, *cap_enable_grad_type;
extern PyObject *cap_operator_mod, *cap_finfo_type, *cap_iinfo_type;
extern PyObject *cap_enum_type; /* enum.EnumType: its instances (enum members) are constants */
extern PyObject *cap_s_layout, *cap_s_shape, *cap_s_stride, *cap_s_dtype, *cap_s_device, *cap_s_requires_grad;

#define CAP_MAX_PARAMS 8
typedef struct {
    char name[32];
    int has_default;
    char dflt[16];
    int kwonly;
} CapParam;
typedef struct {
    int n;
    CapParam p[CAP_MAX_PARAMS];
} CapSig;
extern CapSig cap_sigs[WK_NOPS];

/* 0 when torch is ready, 1 when torch is not imported, -1 with a Python exception. */
int cap_init_torch(void);
int cap_dtype_of_obj(PyObject *o);   /* WkDType or -1 */
/* also a complex dtype: what an extern's result or a graph input may hold */
int cap_dtype_of_obj_any(PyObject *o);
int cap_is_tensor_obj(PyObject *o);  /* exact torch.Tensor or nn.Parameter */
int cap_method_op(const char *name); /* the op of a tensor method, or -1 */
PyObject *cap_default_value_Ref(const char *d);

/* ---- values -------------------------------------------------------------- */

typedef enum {
    SV_NULL,
    SV_CONST,
    SV_TENSOR,
    SV_TUPLE,
    SV_LIST,
    SV_METHOD,    /* a tensor method: name, maybe bound to self */
    SV_OPAQUE,    /* an object reached from an argument (module, instance) */
    SV_GRAD_CTX,  /* torch.no_grad() / torch.enable_grad(): value = the grad mode it sets */
    SV_GRAD_EXIT, /* its __exit__ after BEFORE_WITH: value = the grad mode it restores */
    SV_AUTOCAST_EXIT, /* a torch.autocast block's __exit__ after BEFORE_WITH (vals/ctx.c):
                       * obj = the (device, enabled, dtype, cache_enabled) it entered,
                       * value/version = the device's modelled state it restores */
    SV_ITER,      /* an iterator over unrolled items: items, pos */
    SV_DICT,      /* a dict built during capture: keys (constants) and items */
    SV_CELL,      /* a closure cell of an inlined frame: cell = contents (NULL if empty) */
    SV_FUNC,      /* a function made during capture (MAKE_FUNCTION): code, defaults, closure */
    SV_PARTIAL,   /* a bound method or functools.partial: cell = callable, items = leading
                   * arguments, self = keyword arguments (SV_DICT) or NULL */
    SV_OBJECT,    /* an instance of a user class made during capture: obj = the class,
                   * self = its attributes (SV_DICT) */
    SV_SUPER,     /* super(): obj = the class it starts after, self = the bound self */
    SV_CTX_TOKEN, /* a ContextVar.set token: obj = the variable, cell = the value before,
                   * value = 1 if it was set before (| 2 once reset used it) */
    SV_SCRATCH,   /* a real object made at capture time that only capture sees
                   * (a deep copy of a guarded argument object, vals/scratch.c): obj */
    SV_SET,       /* a set built during capture of exactly known elements: obj = a real
                   * set (owned) only capture sees (vals/set.c) */
    SV_NKINDS
} SvKind;

typedef struct Sv Sv;
typedef WkVec(Sv *) SvList;

struct Sv {
    SvKind kind;
    PyObject *obj;   /* CONST: value; OPAQUE: object; TENSOR from an argument: the tensor (owned);
                      * FUNC: the code object; DICT: list of constant keys */
    int arg;         /* the frame argument this is (or getattr(arg, *path)), unchanged; -1 otherwise */
    PyObject *path;  /* owned tuple of attribute names from the argument, or NULL */
    PyObject *gname; /* owned: the global this is, unchanged (a tensor read afresh per call) */
    int value;       /* TENSOR: graph value id; GRAD_*: grad mode; ITER: position */
    char *name;      /* METHOD: tensor method name (owned) */
    Sv *self;        /* METHOD bound by a plain attribute load; FUNC: defaults tuple Sv; else NULL */
    Sv *cell;        /* CELL: contents; FUNC: closure tuple Sv */
    SvList items;    /* TUPLE, LIST, ITER; DICT: values in key order */
    /* SET, LIST: its mutations so far. ITER over a set (cell = that SET): the
     * set's mutations and size when iteration started (vals/set.c) */
    long version;
    Py_ssize_t set_size;
    /* ITER: the lists it walks (borrowed) and the sum of their versions when
     * it was made: an ITER's items are a snapshot, so a list changed while a
     * loop walks it must end capture there (cap_list_iter_check) */
    SvList lists;
    long lists_version;
    PyObject *globals; /* FUNC: the globals of the frame that made it (borrowed from that function) */
    /* ITER made by a generator function (vals/function.c), run ahead when
     * made: gen 1 when next() may take its items one at a time (its body
     * read only its tensor and constant arguments), with what that run
     * depended on: the side effects pending, the grad mode, and the graph
     * value of each tensor argument (gen_args) then */
    int gen;
    unsigned long long gen_effects;
    int gen_grad;
    long gen_step;   /* I->steps when its run ended */
    void *gen_frame; /* the Frame that made it (compared, never read) */
    SvList gen_args;
    WkVec(int) gen_values;
};

typedef struct {
    Sv **pos;
    int npos;
    PyObject *kwnames; /* tuple or NULL */
    Sv **kw;
    int nkw;
} Args;

typedef struct Interp Interp;
typedef struct RetPlan RetPlan;

/* One operations table per kind. Every entry may be NULL (unsupported for
 * that kind: the interpreter names the kind in the fallback reason).
 * Handlers return -1 / NULL after recording a reason (cap_unsupported or
 * cap_py_failed). binary/compare are tried on the left operand's kind, then
 * the right's; they return NULL *without* a reason when they do not handle
 * that pair. */
typedef struct SvOps {
    const char *name; /* for messages: "tuple", "Tensor"; NULL: use the object's type name */
    int (*truth)(Interp *I, Sv *s, int *out);
    /* pushes the attribute; with `method` pushes the call-ready pair (NULL, attr)
     * or (function, self) as LOAD_METHOD does */
    int (*getattr)(Interp *I, Sv *s, PyObject *name, int method);
    Sv *(*call)(Interp *I, Sv *callable, const Args *a);
    Sv *(*subscript)(Interp *I, Sv *s, Sv *key);
    /* appends the items iteration would produce (iteration is unrolled) */
    int (*iterate)(Interp *I, Sv *s, SvList *out);
    Sv *(*binary)(Interp *I, int nb, Sv *x, Sv *y);
    Sv *(*compare)(Interp *I, int cmp, Sv *x, Sv *y); /* cmp 0..5 = < <= == != > >= */
    Sv *(*unary)(Interp *I, int opcode, Sv *x);
    /* how the transformed code rebuilds this value when it is returned */
    WkRet *(*reconstruct)(Interp *I, RetPlan *p, Sv *s, int depth);
} SvOps;

extern const SvOps cap_null_kind, cap_const_kind, cap_tensor_kind, cap_tuple_kind, cap_list_kind, cap_method_kind,
    cap_opaque_kind, cap_grad_ctx_kind, cap_grad_exit_kind, cap_autocast_exit_kind, cap_iter_kind, cap_dict_kind, cap_cell_kind, cap_func_kind, cap_partial_kind, cap_object_kind, cap_super_kind,
    cap_ctx_token_kind, cap_scratch_kind, cap_set_kind;
extern const SvOps *const cap_sv_ops[SV_NKINDS];
#define SV_OPS(s) (cap_sv_ops[(s)->kind])

/* ---- frames and the interpreter ------------------------------------------ */

/* One Python frame being interpreted. Inlining a call pushes a Frame whose
 * parent is the caller's; it is popped when the callee returns. */
typedef struct Frame {
    struct Frame *parent;
    PyFunctionObject *fn; /* NULL for a function made during capture (SV_FUNC) */
    PyCodeObject *code;
    PyObject *globals, *builtins; /* borrowed from fn (or the parent) */
    Sv *closure;                  /* SV_TUPLE of SV_CELLs for a captured SV_FUNC, else NULL */
    Sv **locals;                  /* co_nlocalsplus slots: locals, cells, free variables */
    int nlocals;
    Sv **stack;
    int sp, stackcap;
    PyObject *kwnames; /* borrowed from co_consts, for the next CALL */
    int line;
    int depth; /* 0 for the compiled frame */
    int is_generator; /* run to the end, values collected in yields */
    SvList yields;
    int pc;                   /* the instruction running now (where an exception is raised) */
    long back_jumps;          /* backward jumps taken: loop iterations unrolled */
    WkExcRange *exc;          /* the code's exception table (wk_bc_exc_ranges), owned */
    int nexc;
} Frame;

/* A dict read from an argument's attribute: its Sv and the dict (owned). */
typedef struct {
    Sv *dict;
    PyObject *real;
} CapAttrDict;

typedef struct {
    PyObject *obj;  /* borrowed: kept alive by `owner`'s Sv */
    PyObject *name; /* owned */
    Sv *value;      /* NULL: deleted */
    Sv *owner;
} CapOverlay;

/* An input tensor (an argument's, a module buffer, a global) the frame
 * writes in place: its values take `value` from then on, and the
 * transformed code copies that graph value into it after the graph. */
typedef struct {
    Sv *source; /* the first value read from it (arg/path or gname): where the copy goes */
    int input;  /* the graph input it was read as */
    int value;  /* the graph value it holds now */
    int no_grad; /* it requires grad, written inside a no_grad block: copied back under no_grad */
} CapWrite;

typedef struct {
    PyObject *var; /* owned: a contextvars.ContextVar the frame set */
    Sv *value;     /* what it holds in the overlay */
    int set;       /* 0: back at its entry state */
} CapCtxVar;

struct Interp {
    Frame *f; /* the innermost frame; on a fallback it stays at the failing frame */
    WkVec(Frame *) frames; /* all frames, owned */
    PyObject *const *args;
    int nargs;
    PyObject *argnames; /* tuple */
    WkGraph *g;
    WkGuards *guards;
    SvList all;
    Sv *null_sv;
    int backend_wick;
    int entry_grad;                  /* grad mode when the frame starts: what guards check */
    int grad_enabled;                /* grad mode now: changed by no_grad blocks */
    WkVec(char) value_rg;            /* per graph value: requires grad, computed under no_grad (vals/tensor.c) */
    WkVec(int) relaid;               /* (value laid out as eager, the node output under it) pairs (vals/views.c) */
    WkVec(int) input_args;           /* frame argument of each graph input */
    WkVec(PyObject *) input_paths;   /* and the attribute path from it (borrowed from its Sv) */
    WkVec(PyObject *) input_tensors; /* borrowed example tensors */
    PyObject *top_globals;           /* the frame's globals: what global guards check */
    unsigned long long lazy_args;    /* constant arguments guarded by value only if read */
    unsigned long long loaded_args;  /* arguments the compiled frame loaded */
    PyObject *externs;               /* list: the extern table (vals/extern.c), or NULL */
    WkVec(int) autocast_casts;       /* (value, dtype, grad mode, its cast) per autocast cast made (vals/extern.c) */
    /* autocast inside the frame (a torch.autocast block, vals/ctx.c), per
     * device type (0 cpu, 1 cuda): autocast_dt is the autocast dtype there
     * (-1: off); CAP_AUTOCAST_ENTRY: torch's state at entry, unchanged */
    int autocast_dt[2];
    int autocast_fast[2];            /* the autocast dtype setting (kept when off) */
    /* the state after the real __exit__ of blocks entered before the frame
     * (a resume function's), which the transformed code calls right after
     * the graph: -1 / CAP_AUTOCAST_ENTRY where none ran */
    int grad_base, autocast_base_dt[2], autocast_base_fast[2];
    WkVec(CapOverlay) overlay;       /* attribute writes to argument objects (vals/object.c) */
    WkVec(CapCtxVar) ctxvars;        /* ContextVar values the frame set (vals/contextvar.c) */
    WkVec(CapWrite) writes;          /* input tensors written in place (vals/tensor.c) */
    WkVec(PyObject *) keep;          /* owned objects the return plan borrows */
    char *reason;                    /* set on fallback */
    Sv *exc;                         /* an exception propagating (vals/exc.c), or NULL */
    Sv *handled;                     /* the exception a handler is handling, or NULL */
    char *exc_where;                 /* owned: what the last raise was and where */
    int propagate;                   /* a BaseException must propagate */
    /* graph breaks (breaks.c): the compiled frame's instructions are counted
     * so that a second capture can stop right before the one that failed */
    long top_steps;                  /* instructions of the compiled frame started */
    long compiling_step;             /* the top-level instruction (top_steps) during which
                                      * torch.compiler.is_compiling() first answered True; 0: never */
    long none_step;                  /* the top-level instruction during which an attribute or
                                      * item of None was last asked for (vals/const.c) */
    long steps;                      /* instructions started in every frame (the step limit's count) */
    long stop_step;                  /* > 0: stop once this many have run (the break) */
    int split;                       /* the stop is a split before a loop: nothing runs there */
    int top_pc;                      /* index of the compiled frame's current instruction */
    int next_op;                     /* the opcode after the innermost frame's current one (-1: none) */
    int stopped;                     /* run() stopped there */
    int no_break;                    /* a failure no break gets around (internal, step limit) */
    WkVec(PyObject *) raised;        /* owned: exceptions capture raised itself (vals/exc.c) */
    WkVec(PyObject *) lists_read;    /* pinned lists whose items capture read (borrowed: guards hold them) */
    /* dicts read from arguments' attributes (vals/object.c), first read
     * first: each one's Sv and the real dict (owned) */
    WkVec(CapAttrDict) attr_dicts;
    long effect_step;                /* the top-level instruction that first wrote to an outside */
    int effect_pc;                   /* object (cap_break_effect_seen), or 0 */
    struct CapBreakState *brk;       /* owned, NULL when breaks are not considered */
};

struct RetPlan {
    WkVec(WkRet *) all;
    WkVec(int) outputs; /* graph value id of each graph output */
    /* cells made during capture (MAKE_CELL), rebuilt once each by the
     * transformed code of a graph break (WK_RET_CELL): every closure made
     * before the break and the resume function share it. cells_ok: the
     * plan makes them (a break); else such a cell cannot be rebuilt */
    int cells_ok;
    SvList cell_svs;
    WkVec(WkRet *) cell_rets;
    SvList rebuilt;            /* the mutable values the frame made, rebuilt so far (borrowed) */
    WkVec(WkRet *) rebuilt_as; /* their plans (NULL while one is made): named again, not remade */
};

/* A handler failed: a reason is recorded, or an exception propagates
 * (vals/exc.c). Dispatch chains that try one family after another stop on it. */
#define CAP_FAILED(I) ((I)->reason != NULL || (I)->exc != NULL)

/* symbolic.c: values, failure, stack */
Sv *sv_new(Interp *I, SvKind kind);
Sv *sv_const_Steal(Interp *I, PyObject *o);
Sv *sv_const(Interp *I, PyObject *o);
/* 1 when s is the constant None */
static inline int sv_is_none(const Sv *s) { return s->kind == SV_CONST && s->obj == Py_None; }
Sv *sv_tensor(Interp *I, int value);
Sv *sv_seq(Interp *I, SvKind kind, Sv *const *items, int n); /* TUPLE/LIST/ITER */
const char *sv_desc(const Sv *s);
int sv_push(Interp *I, Sv *s);
Sv *sv_pop(Interp *I);
Sv *sv_peek(Interp *I, int n); /* n = 1 is the top */
/* Records the fallback reason "<what> at <file>:<line>" (first one wins); returns -1. */
int cap_unsupported(Interp *I, const char *fmt, ...) WK_PRINTF(2, 3);
/* A Python exception raised while interpreting: Exceptions become the
 * reason; other BaseExceptions propagate. Returns -1. */
int cap_py_failed(Interp *I, const char *during);
int cap_graph_failed(Interp *I, const char *what);
const char *cap_code_filename(Interp *I);
/* Runs frame f (already pushed) to its return; the returned value, or NULL. */
Sv *cap_run_frame(Interp *I, Frame *f, int *ret_line);
Frame *cap_frame_new(Interp *I, PyFunctionObject *fn, PyCodeObject *code);
/* dispatch through the tables (used by families that combine values) */
int cap_truth(Interp *I, Sv *s, int *out);
int cap_iterate(Interp *I, Sv *s, SvList *out);
Sv *cap_call(Interp *I, Sv *callable, const Args *a);
/* self.name for a method the kind models by name (an SV_METHOD): pushes the
 * [method, self] pair when `method`, else the bound method. 0 or -1. */
int cap_push_method(Interp *I, Sv *self, const char *name, int method);
/* A property read: calls the getter (a function value) on self and pushes
 * the result (after a NULL when `method`). 0 or -1. */
int cap_push_property(Interp *I, Sv *self, Sv *getter, int method);
WkRet *cap_reconstruct(Interp *I, RetPlan *p, Sv *s, int depth);
/* fn(o.obj, names, *values) after the graph, for an object made in the frame
 * whose instance dict is o->self (vals/userobj.c); fn is borrowed and kept
 * alive by its module */
WkRet *cap_rebuild_call(Interp *I, RetPlan *p, PyObject *fn, Sv *o, int depth);
/* type(o).__init__(o, *a) inlined for an object o made in the frame, the
 * __init__ found (or its absence) guarded on tp (vals/userobj.c): 1 when a
 * Python __init__ ran, 0 when tp has none, -1 on fallback */
int cap_run_init(Interp *I, Sv *o, PyTypeObject *tp, const Args *a);
Sv *cap_binary(Interp *I, int nb, Sv *x, Sv *y);
Sv *cap_compare(Interp *I, int cmp, Sv *x, Sv *y); /* cmp 0..5 = < <= == != > >= */
const char *cap_nb_symbol(int nb);
WkRet *cap_ret_new(RetPlan *p, WkRetKind kind);

/* vals/const.c */
int cap_is_number(PyObject *o);
int cap_is_plain(PyObject *o); /* operations run no user code and give plain data again */
const char *cap_type_name(PyObject *o);
/* a plain constant -> the Sv items of a tuple/list/range/str (NULL: not iterable that way) */
int cap_const_items(Interp *I, PyObject *o, SvList *out);
/* The items of a pinned list of at most 64 plain values (a global table of
 * primes), as a new list: guarded equal to this copy on every call, and the
 * frame may not append to it afterwards. NULL without a reason when c is not
 * such a list; NULL with one when the frame appended to it. */
PyObject *cap_pinned_list_Ref(Interp *I, Sv *c);
/* Source paths (symbolic.c): path + (step,), an attribute name step, and
 * path + ((key,),), an item step; path may be NULL (the argument itself).
 * New tuples, NULL with a Python error set. */
PyObject *cap_path_then_Ref(PyObject *path, PyObject *step);
PyObject *cap_path_item_Ref(PyObject *path, PyObject *key);
/* A dict d of str keys found at argument arg + path (a module's cache of
 * tensors): its keys guarded in order, each item an Sv with a source of its
 * own (tensors read afresh per call), the dict Sv sourced at path (capture
 * refuses to change it). New Sv (owned by I), NULL with the reason. (symbolic.c) */
Sv *cap_source_dict(Interp *I, PyObject *d, int arg, PyObject *path);
/* o, found at argument arg + path, as a frame argument is read: a tensor
 * (guarded, an input read through the path), a plain value (guarded equal),
 * a tuple or str-keyed dict of those, else an opaque object of a guarded type */
Sv *cap_source_item(Interp *I, PyObject *o, int arg, PyObject *path);
/* o is a member of an enum.Enum subclass whose == is not Python code of its own (vals/const.c) */
int cap_is_plain_enum_member(PyObject *o);

/* vals/tensor.c */
int cap_tensor_value(Interp *I, Sv *s); /* graph value id, adding an argument as a graph input */
int cap_scalar_value(Interp *I, PyObject *o);
int cap_operand_value(Interp *I, Sv *s, const char *what);
const WkValue *cap_sv_meta(Interp *I, Sv *s);
Sv *cap_graph_op(Interp *I, WkOp op, const int *in, int n, const WkAttrs *attrs);
/* cap_graph_op for a node whose rule the caller checked only in part (no
 * autocast casts): NULL with wick's error still set and no reason recorded
 * when the builder refuses it, so that the caller can make the call an
 * extern instead (the caller clears the error). */
Sv *cap_graph_op_try(Interp *I, WkOp op, const int *in, int n, const WkAttrs *attrs);
Sv *cap_convert(Interp *I, Sv *t, int dtype);
/* torch.autocast (vals/extern.c): the autocast dtype of device type dev
 * where the frame is now (its own autocast blocks, else torch's state at
 * entry), -1 when autocast is off there, -2 with a Python error. */
int cap_autocast_dtype(Interp *I, WkDeviceType dev);
#define CAP_AUTOCAST_ENTRY (-100)
/* args[i] cast as autocast casts the operands of a lower-precision op (a
 * CONVERT node per floating tensor, once per value), for an extern the
 * runtime may call outside autocast; the caller's autocast dtype is guarded.
 * 0, or -1 with the capture failure set. */
int cap_autocast_cast_operands(Interp *I, Sv **args, int n);
/* fn wrapped so that it runs under the autocast state the frame has now
 * when a block of the frame changed it (new reference; fn itself, new,
 * when not); NULL with the capture failure set. */
PyObject *cap_autocast_wrap_Ref(Interp *I, PyObject *fn);
/* a block of the frame set the autocast state: its externs run under it */
int cap_autocast_changed(Interp *I);
/* Ops autocast runs in float32 on dev (ATen's fp32 policy, and ops whose
 * eager form reaches one: square is pow): 1 or 0. */
int cap_autocast_fp32_op(WkOp op, WkDeviceType dev);
/* t cast to float32 as autocast's fp32 policy casts it (a floating tensor
 * other than float64 on a device where autocast is on), else t itself;
 * NULL on failure. */
Sv *cap_autocast_to_fp32(Interp *I, Sv *t);
/* t.to(dtype) as the program wrote it: cap_convert, the result laid out as
 * eager's _to_copy lays it out (preserve_format) */
Sv *cap_user_convert(Interp *I, Sv *t, int dtype);
PyObject *cap_torch_size_Ref(const WkValue *m);
int64_t cap_const_size(const WkValue *m, int d);
void cap_set_rg(Interp *I, int value, int rg);
int cap_get_rg(const Interp *I, int value);
/* A node output: requires grad or not, computed in the grad mode now. */
void cap_set_node_output_rg(Interp *I, int value, int rg);
int cap_get_no_grad(const Interp *I, int value); /* computed with grad mode off */
int cap_graph_needs_autograd(const Interp *I);
void cap_mark_aliased(Interp *I, int value); /* shares storage with another graph value */
int cap_is_aliased(const Interp *I, int value);
/* value is the buffer under one VIEW that gives a *_like eager's strides,
 * named by no Python value (vals/tensor.c private_like_view) */
void cap_mark_private_base(Interp *I, int value);
/* value has the strides eager's tensor would have: a native result laid out
 * by eager's rule for its call (vals/views.c cap_eager_laid) */
void cap_mark_eager_layout(Interp *I, int value);
int cap_has_eager_layout(const Interp *I, int value);
/* x (a tensor Sv, borrowed) takes r's value in place; returns x, or NULL with the reason recorded.
 * An input tensor (x read from an argument or global) is written back after the graph (I->writes). */
Sv *cap_inplace_update(Interp *I, Sv *x, Sv *r, const char *what);
/* `x is y` between two tensor Svs that are not the same Sv: 1 or 0, or -1
 * with the reason recorded (vals/tensor.c) */
int cap_tensor_is(Interp *I, Sv *x, Sv *y);
/* The write entry of input tensor s (same source), or NULL */
CapWrite *cap_write_of(Interp *I, const Sv *s);
/* a VIEW of value v would see a later write into an input through the
 * graph value, not the input's memory: -1 with a reason when v is written */
int cap_check_view_of(Interp *I, int v, const char *what);
Sv *cap_tensor_method_call(Interp *I, const char *name, const Args *a);
int cap_tensor_attr(Interp *I, Sv *t, PyObject *name_obj, int method);
/* operator.<name>(x[, y]) as an extern node (y may be NULL) */
Sv *cap_tensor_operator(Interp *I, const char *name, Sv *x, Sv *y);

/* vals/views.c: view calls as VIEW nodes (extern calls where not modelled) */
Sv *cap_view_call(Interp *I, const Args *a, const char *fname, PyObject *fn);
Sv *cap_tensor_getitem(Interp *I, Sv *self, Sv *key);
Sv *cap_tensor_transpose_attr(Interp *I, Sv *self, const char *name); /* .T/.mT; NULL without a reason: not modelled */
Sv *cap_tensor_contiguous(Interp *I, Sv *self);                        /* NULL without a reason: not modelled */
/* self seen as `shape` in wick's layout of it, without a copy (eager's view
 * rule); NULL without a reason when no view expresses it */
Sv *cap_view_as_shape(Interp *I, Sv *self, int nd, const int64_t *shape);
/* 1 when the graph value of tensor t has the strides eager's tensor would
 * have (an input, an extern's result, a contiguous chain, a view of one of
 * these), 0 when wick lays it out its own way (a pointwise result of a
 * permuted input, a view of one). */
int cap_layout_is_eagers(Interp *I, Sv *t);
/* self's memory seen with these sizes and strides (elements, from its first
 * element): a VIEW node, or NULL without a reason when the builder refuses it */
Sv *cap_view_with_layout(Interp *I, Sv *self, int nd, const int64_t *sizes, const int64_t *strides);
/* m's strides in elements (contiguous for a node output without given
 * strides, graph.h) into strides; -1 when a size or stride is symbolic */
int cap_value_strides(const WkValue *m, int64_t *strides);
/* the strides of self.expand(sizes) (eager's expand rule: new leading dims
 * and size-1 dims broadcast with stride 0) into strides; -1 when the expand
 * is not valid or self's layout is symbolic (no Python error) */
int cap_expanded_strides(Interp *I, Sv *self, int nd, const int64_t *sizes, int64_t *strides);
/* r (a value of x's shape) copied into a fresh buffer laid out as x, a
 * dense view (a *_like's layout), and seen through a VIEW with x's strides;
 * NULL without a reason when not expressible */
Sv *cap_relaid_like(Interp *I, Sv *r, Sv *x);
/* order[k]: the dim with the k-th largest stride (ties in dim order), the
 * order a dense layout with these strides stores its dims in */
void cap_dims_by_stride(int nd, const int64_t *strides, int64_t *order);
/* How eager lays out the result of the call a native node stands for. */
typedef enum {
    CAP_LAID_POINTWISE, /* torch's TensorIterator over the node's inputs, in their order */
    CAP_LAID_POINTWISE_UNARY, /* the same, the node's wrapped Python numbers being the call's
                                 Scalar arguments, not operands (clamp(x, 0, 1), pow(x, 2)) */
    CAP_LAID_CONVERT,   /* Tensor.to(dtype) in preserve_format, of the node's input */
    CAP_LAID_CLONE,     /* clone() in preserve_format (empty_like's strides) of the node's input */
    CAP_LAID_CONTIGUOUS, /* contiguous whatever the inputs' layouts (masked_fill) */
    CAP_LAID_CAT,        /* torch.cat(node's inputs, attrs.ints[0]): their common suggested memory format */
    CAP_LAID_PAD,        /* constant_pad_nd(node's input 0, attrs.ints per dim): its suggested memory format */
    CAP_LAID_INDEX       /* x[..., i, ...]: torch's index iterator over the node's inputs (source, indices) */
} CapLaid;
/* r (a node output, contiguous in the graph) with the strides eager gives
 * that call's result: r itself when those are contiguous, else r's values
 * copied in that layout and seen through a VIEW, which the kernel producing
 * r writes directly (its work is inlined into the copy). Marked as eager's
 * layout (cap_layout_is_eagers). NULL without a reason where not modelled
 * (an operand whose layout wick does not know to be eager's, symbolic sizes,
 * a layout that is not dense): r keeps wick's own layout then. */
Sv *cap_eager_laid(Interp *I, Sv *r, CapLaid how);
/* cap_eager_laid(r, CAP_LAID_POINTWISE) where eager's iterator reads the
 * values `operands` (n, 1 to 3) rather than r's node inputs: x + y * alpha
 * is one add of x and y in eager */
Sv *cap_eager_laid_pointwise_of(Interp *I, Sv *r, const int *operands, int n);
/* cap_eager_laid(r), or r itself where that is not modelled; NULL only on a failure */
Sv *cap_laid_or_raw(Interp *I, Sv *r, CapLaid how);
/* Once the graph is whole: every node that reads a value laid out by
 * cap_eager_laid by logical index (any but VIEW and EXTERN) reads the node
 * output under it instead, so a result that only feeds kernels is computed
 * and read in wick's own layout (no copy, no strided reads of one); the copy
 * in eager's layout stays where its strides are seen: a graph output, an
 * extern's argument, a view. */
void cap_read_unlaid(Interp *I);
/* the node output a value laid out by cap_eager_laid stands for (contiguous
 * in the graph), or -1 when v is not such a value */
int cap_relaid_raw(const Interp *I, int v);

/* vals/structural.c: torch calls whose op-table rows (CAT, PAD, INDEX,
 * ARANGE) need a rule of their own, advanced indexing, and F.linear as a
 * matmul extern the runtime calls through PyTorch's C shim. Each answers
 * an extern call of fn where its rule does not model the arguments. */
Sv *cap_structural_call(Interp *I, WkOp op, const Args *a, const char *fname, PyObject *fn);
/* x[key] with integer index tensors as an INDEX node; NULL without a reason when not modelled */
Sv *cap_index_getitem(Interp *I, Sv *self, Sv *key);
/* F.linear(x, w, b) as views around aten.mm/addmm, and torch.mm/addmm/bmm
 * as the aten op's extern (native through the C shim); NULL without a
 * reason when fn is none of these or the call is not modelled */
Sv *cap_matmul_call(Interp *I, PyObject *fn, const Args *a);
/* F.scaled_dot_product_attention on the CPU as the flash op eager would
 * call (native through the C shim); NULL without a reason when fn is not
 * it or the call is not modelled */
Sv *cap_attention_call(Interp *I, PyObject *fn, const Args *a);
/* torch.zeros_like/ones_like/full_like/empty_like (FULL), torch.min/max of
 * two tensors (MINIMUM/MAXIMUM), torch.gather (GATHER), torch.diff (CAT,
 * views, SUB), torch.cumsum (aten.cumsum's extern, native through the C
 * shim); as functions (fn) or tensor methods (name, self at pos[0]). NULL
 * without a reason when not one of these or not modelled. */
Sv *cap_more_torch_call(Interp *I, PyObject *fn, const Args *a);
Sv *cap_more_tensor_method(Interp *I, const char *name, const Args *a);

/* vals/torchfn.c */
Sv *cap_call_op(Interp *I, WkOp op, const Args *a, const char *fname, int method, PyObject *fn);

/* vals/builtins.c: NULL without a reason when fn is not a builtin handled here */
const char *cap_callable_name(PyObject *o, char *buf, size_t n);
Sv *cap_builtin_call(Interp *I, PyObject *fn, const Args *a);
Sv *cap_torch_query_call(Interp *I, PyObject *fn, const Args *a);
Sv *cap_signature_call(Interp *I, PyObject *fn, const Args *a); /* inspect.signature(f) folded */

/* vals/function.c */
Sv *cap_inline_call(Interp *I, PyFunctionObject *f, const Args *a);
/* next(it[, default]) on an iterator a generator made (see Sv.gen); NULL
 * without a reason when it is no such iterator */
Sv *cap_generator_next(Interp *I, const Args *a);
/* -1 with a reason when something a generator's iterator `it` could have
 * read changed since it ran (Sv.gen); 0 otherwise, or for other iterators */
int cap_generator_check(Interp *I, Sv *it);
Sv *cap_inline_made_func(Interp *I, Sv *func, const Args *a);
int cap_make_function(Interp *I, int flags);
int cap_deref_load(Interp *I, int index);
int cap_deref_store(Interp *I, int index);
int cap_make_cell(Interp *I, int index);
int cap_copy_free_vars(Interp *I, int n);
Sv *cap_partial_new(Interp *I, Sv *callable, Sv *const *args, int nargs, Sv *kwargs);

/* vals/object.c */
int cap_is_torch_module(PyObject *m);
int cap_object_attr(Interp *I, Sv *o, PyObject *name, int method);
int cap_object_setattr(Interp *I, Sv *o, PyObject *name, Sv *v); /* v NULL: delete */
int cap_object_hasattr(Interp *I, Sv *o, PyObject *name);
int cap_overlay_check(Interp *I);
/* 1 when the frame wrote obj.name (*out: the value, NULL when deleted), else 0 */
int cap_overlay_lookup(Interp *I, PyObject *obj, PyObject *name, Sv **out);
int cap_renaming_getattribute(PyTypeObject *tp); /* transformers' config __getattribute__ (renames only) */
/* super().__call__ of a module whose class has its own __call__: a view of
 * self (value CAP_MODULE_BASE_CALL) that, called, is nn.Module.__call__
 * (hooks checked, forward inlined). NULL when self is not such a module. */
#define CAP_MODULE_BASE_CALL 2
Sv *cap_module_base_call(Interp *I, Sv *self);

/* vals/newmodule.c: nn.Module objects made during capture (SV_OBJECT with
 * value CAP_OBJ_NEW_MODULE; a transformers ModelOutput is value 1) */
#define CAP_OBJ_NEW_MODULE 2
int cap_is_new_module(const Sv *s);
Sv *cap_newmodule_new(Interp *I, PyObject *cls, const Args *a); /* NULL without a reason: not a Module class */
/* nn.Module's bookkeeping functions (__init__, register_buffer, add_module,
 * train, eval, ...) called on a module made here: modelled; NULL without a
 * reason when f is none of them or self is not such a module */
Sv *cap_newmodule_method(Interp *I, PyFunctionObject *f, const Args *a);
int cap_newmodule_getattr(Interp *I, Sv *o, PyObject *name, int method);
int cap_newmodule_setattr(Interp *I, Sv *o, PyObject *name, Sv *v); /* v NULL: delete */
Sv *cap_newmodule_call(Interp *I, Sv *o, const Args *a);
WkRet *cap_newmodule_reconstruct(Interp *I, RetPlan *p, Sv *o, int depth);

/* vals/userobj.c */
Sv *cap_userobj_new(Interp *I, PyObject *cls, const Args *a);
/* custom torch.autograd.Function classes (vals/userobj.c): cls.apply while
 * it is Function's own (new reference, guarded; NULL with no error when
 * not), and its call where no backward is recorded (forward inlined; NULL
 * without a reason when fn is no Function's apply) */
int cap_is_autograd_function_class(PyObject *cls);
PyObject *cap_autograd_function_apply_Ref(Interp *I, PyObject *cls);
Sv *cap_autograd_function_call(Interp *I, PyObject *fn, const Args *a);
int cap_userobj_setattr(Interp *I, Sv *o, PyObject *name, Sv *v);
Sv *cap_userobj_len(Interp *I, Sv *o); /* NULL without a reason when o is not such an object */
int cap_namedtuple_attr(Interp *I, Sv *t, PyObject *name, int method, int *handled);

/* vals/exc.c: exceptions raised inside captured code. Each returns -1
 * after setting I->exc (a propagating exception, not a reason): the
 * interpreter unwinds to a handler of the frame's exception table, or out
 * of the frame. */
int cap_exc_table(Interp *I, Frame *f, const WkInstr *raw, int n); /* 0 or -1 with a reason */
int cap_raise(Interp *I, PyObject *exc_Borrow);
/* The Python Exception now set becomes the propagating one (BaseExceptions
 * other than Exceptions: cap_py_failed). Only where the failed operation is
 * the user's own on guarded values, so Python raises the same. */
int cap_raise_current(Interp *I, const char *during);
int cap_exc_matches(Interp *I, PyObject *type); /* an exception propagates and is a `type` */
void cap_exc_clear(Interp *I);                  /* it is caught (by a C-level handler) */
int cap_is_exc_instance(PyObject *o);
Sv *cap_exc_new(Interp *I, PyObject *cls, const Args *a); /* NULL without a reason: not an exception class */
/* 1 when frame I->f has a handler for its instruction pc: stack set up, *next its index; 0 when not */
int cap_exc_unwind(Interp *I, int *next);
int cap_raise_varargs(Interp *I, int n);
int cap_push_exc_info(Interp *I);
int cap_pop_except(Interp *I);
int cap_check_exc_match(Interp *I);
int cap_reraise(Interp *I);
int cap_with_except_start(Interp *I);

/* vals/scratch.c: copies made at capture time (SV_SCRATCH) */
Sv *cap_scratch_copy_call(Interp *I, PyObject *fn, const Args *a); /* NULL without a reason: not copy.(deep)copy */
int cap_scratch_setattr(Interp *I, Sv *o, PyObject *name, Sv *v); /* v NULL: delete */
Sv *cap_scratch_builtin_call(Interp *I, PyObject *fn, const Args *a); /* setattr/delattr; NULL without a reason: not */
int cap_scratch_setitem(Interp *I, Sv *o, Sv *k, Sv *v);
/* out["field"] = v on a ModelOutput made during capture (vals/userobj.c); 0, or -1 with the reason recorded */
int cap_userobj_setitem(Interp *I, Sv *o, Sv *k, Sv *v);
/* 1 when cls is one of torch.return_types' named tuples (a structseq: x.max(dim)'s) */
int cap_is_return_type(PyObject *cls);
/* keys(), values(), items() of a ModelOutput made during capture: a new list Sv, or NULL with the reason recorded */
Sv *cap_userobj_method_call(Interp *I, const char *name, const Args *a);
int cap_scratch_contains(Interp *I, Sv *seq, Sv *x, int *out);
Sv *cap_scratch_len(Interp *I, Sv *s);

/* loops.c: a loop compiled one iteration at a time (see there) */
typedef struct {
    int at;             /* where the frame splits: a for loop's GET_ITER, a while loop's head */
    int head;           /* what the back edges jump to (a for loop's FOR_ITER) */
    int start, back;    /* the body's first instruction; the last back edge */
    int is_for, line;   /* line: the loop's, for the driver's call */
    int base;           /* stack depth at the body's statements (a for loop's iterator included) */
    int nstack;         /* stack items the body function takes (and the item FOR_ITER pushed) */
    int item_local;     /* a for loop's item stored by its first instruction: that local, else -1 */
    unsigned char *in;  /* per instruction: in the body */
    int exc;            /* the exception-table entry around the whole loop, or -1 */
    WkExcRange exc_range;
    int nin_locals, *in_locals;  /* the original's locals the body takes, in order */
    int nexits, *exit_target;    /* exit 0 is back to the head */
    int **exit_locals, *exit_nlocals; /* the locals each exit hands back */
} CapLoop;
/* The loop that starts at instruction `at` of orig (a split point), or -1
 * with *why set when it cannot be compiled one iteration at a time. */
int cap_loop_find(PyCodeObject *orig, const WkInstr *raw, int n, int at, CapLoop *lo, const char **why);
void cap_loop_free(CapLoop *lo);
/* The body function (borrowed from a cache; its code marked for the hook), or NULL with an exception. */
PyObject *cap_loop_body_function(PyCodeObject *orig, const WkInstr *raw, int n, const CapLoop *lo, PyObject *globals,
                                 PyObject *options);
/* The driver's call of the body and its dispatch to the exits, emitted at
 * call_label (bound here) into the resume code being assembled from orig
 * (labels: its instructions' labels; local_map: orig local -> new local). */
void cap_loop_emit_call(WkAsm *a, const CapLoop *lo, const int *labels, const int *local_map, PyObject *body,
                        int call_label);
void cap_loops_reset(void);

/* vals/ctx.c */
/* BEFORE_WITH; `result_unused`: the next instruction drops __enter__'s result */
int cap_before_with(Interp *I, int result_unused);
Sv *cap_grad_ctx_call(Interp *I, PyObject *fn, const Args *a);
/* torch.is_autocast_enabled / get_autocast_dtype(name) inside the frame's
 * own autocast block: the modelled answer; NULL (no reason) otherwise. */
Sv *cap_autocast_query(Interp *I, const char *name, const Args *a);
/* exit(None, None, None) of a bound __exit__ of a real torch.set_grad_enabled
 * or torch.autocast object (a block a resume function got open): the state
 * it restores is modelled, the call replayed after the graph; NULL without
 * a reason when o is no such method. */
Sv *cap_real_exit_call(Interp *I, Sv *o, const Args *a);
/* breaks.c: records such a call for cap_effects_plan; -1 with a reason. */
int cap_break_note_exit(Interp *I, Sv *exit_method);

/* vals/logcall.c */
/* fn, found on self, is a logging method capture defers (self a logging.Logger): 1 or 0 */
int cap_log_method(PyObject *self, PyObject *fn);
/* o is a logging.Logger or logging.LoggerAdapter (borrowed): 1 or 0 */
int cap_is_logger(PyObject *o);
/* fn(*a) when fn is such a method, self a pinned logger (or one reached
 * from an argument) and every argument a plain constant, one of logging's
 * root functions, or warnings.warn: kept as a side effect, None; a logger's
 * isEnabledFor/getEffectiveLevel: a guarded constant. NULL without a reason
 * when it is not one (capture goes on as before), NULL with a reason on
 * failure. */
Sv *cap_log_call(Interp *I, PyObject *fn, const Args *a);

/* vals/contextvar.c */
int cap_ctxvar_is(PyObject *o);
Sv *cap_ctxvar_call(Interp *I, PyObject *fn, const Args *a); /* NULL without a reason: not a ContextVar method */
int cap_ctxvar_check(Interp *I);
void cap_ctxvar_free(Interp *I);

/* vals/extern.c */
Sv *cap_extern_call(Interp *I, PyObject *fn, const char *name, Sv *const *pos, int npos, PyObject *kwnames,
                    Sv *const *kw, int nkw);
/* the same for a call returning a tuple (ints among its items) of which the
 * graph reads item 0 alone: the new tensor value standing for it */
Sv *cap_extern_call_first(Interp *I, PyObject *fn, const char *name, Sv *const *pos, int npos, PyObject *kwnames,
                          Sv *const *kw, int nkw);
int cap_is_torch_callable(PyObject *fn);
/* 1 when a tensor among a's arguments (inside lists and tuples too), a
 * Python complex number or a dtype among them is complex, 0 when none is,
 * -1 on failure. No table op computes complex values: such a call goes to
 * PyTorch whole, as an extern, so a complex value only passes between
 * externs (FFTs, view_as_complex, torch.polar and the arithmetic on them). */
int cap_args_complex(Interp *I, const Args *a);
int cap_sv_complex(Interp *I, Sv *s);
int cap_device_of(PyObject *dev, WkDevice *out, int *ok); /* a torch.device -> WkDevice */

/* vals/seq.c */
Sv *cap_seq_method_call(Interp *I, const char *name, const Args *a);
int cap_seq_store(Interp *I, Sv *s, Sv *k, Sv *v);
int cap_seq_delete(Interp *I, Sv *s, Sv *k); /* del s[k] on a list built during capture */
int cap_contains(Interp *I, Sv *seq, Sv *x, int *out);

/* vals/set.c: sets built during capture (SV_SET) */
Sv *cap_set_new(Interp *I);
int cap_set_add(Interp *I, Sv *s, Sv *v);      /* 0, or -1 with a reason (an element not known exactly) */
int cap_set_update(Interp *I, Sv *s, Sv *other);
Sv *cap_set_call(Interp *I, PyObject *fn, const Args *a); /* set()/frozenset(); NULL without a reason: not those */
Sv *cap_set_method_call(Interp *I, const char *name, const Args *a);
int cap_set_contains(Interp *I, Sv *s, Sv *x, int *out);
/* it (an SV_ITER) walks the first set among srcs: FOR_ITER checks that set
 * (cap_set_iter_check). 0, or -1 with a reason when two sets are walked at once. */
int cap_set_link_iter(Interp *I, Sv *it, Sv *const *srcs, int n);
/* Before each step of an iterator over a set: RuntimeError (propagating,
 * as Python raises it) once the set changed size, a reason when it changed
 * otherwise (the order Python would go on in is not modelled). 0 / -1. */
int cap_set_iter_check(Interp *I, Sv *it);
/* Lists an ITER walks: cap_list_link_iter records the SV_LIST ones among srcs
 * (any number), cap_list_iter_check refuses (-1, reason recorded) a step of a
 * loop after one of them changed; cap_list_changed counts a list's mutation. */
void cap_list_link_iter(Sv *it, Sv *const *srcs, int n);
int cap_list_iter_check(Interp *I, Sv *it);
void cap_list_changed(Sv *list);

/* vals/dict.c */
Sv *cap_dict_new(Interp *I);
int cap_dict_set(Interp *I, Sv *d, Sv *key, Sv *value);
int cap_dict_update(Interp *I, Sv *d, Sv *other);
Sv *cap_dict_lookup(Sv *d, PyObject *key); /* borrowed; NULL when absent */
Sv *cap_dict_method_call(Interp *I, const char *name, const Args *a);

/* breaks.c */
/* live[i * nloc + j]: local j may be read at or after instruction i before it
 * is written (the original bytecode raw, n instructions, its exception
 * table ex). Malloc'd. */
unsigned char *cap_liveness(const WkInstr *raw, int n, int nloc, const WkExcRange *ex, int nex);
typedef struct CapBreakState CapBreakState;
void cap_break_setup(Interp *I); /* after the arguments are set up */
/* After a failed capture of `code`: the number of top-level instructions
 * to run before stopping for a break, or 0 when no break can help;
 * negative: a split before the loop the failure is in (its magnitude). */
long cap_break_step(Interp *I, PyCodeObject *code);
/* run() at each top-level instruction: the step pc first ran at */
void cap_break_note_step(Interp *I, int pc);
/* At the stop: the break (*out, free with cap_break_free) and the graph
 * outputs it needs in p. 0, or -1 with a reason. */
int cap_break_plan(Interp *I, PyCodeObject *code, RetPlan *p, WkBreak **out, PyObject *options);
void cap_break_free(Interp *I, WkBreak *b); /* frees I's break state too; b may be NULL */
/* After a break's capture failed on a set made in the frame shared by two
 * live values: the earlier step to try the break at (before the set was
 * made), or 0. Reading it clears it. */
long cap_break_take_retry(void);
/* 1 once the frame wrote to an outside object (attribute overlay, a dict argument). */
int cap_break_effect_seen(Interp *I);
/* all side effects pending, as one number (equal while nothing is written outside the frame) */
unsigned long long cap_effects_fingerprint(Interp *I);
/* A list argument of at most 64 plain values (no attribute path) the frame
 * reads or changes: s (an SV_OPAQUE) becomes an SV_LIST of its items in
 * place, guarded equal to them and distinct from the other arguments; the
 * items it ends with are replayed into the real list after the graph.
 * 1 exposed, 0 not eligible (s unchanged), -1 with a reason. */
int cap_arg_list_expose(Interp *I, Sv *s);
int cap_is_arg_list(Interp *I, const Sv *s); /* an exposed list argument, which capture may change */
/* -1 with a reason when a dict argument was changed (not replayed), else 0. */
int cap_break_check_args(Interp *I);
/* STORE_GLOBAL to the compiled frame's module: kept until replayed. 0 / -1. */
int cap_store_global(Interp *I, PyObject *name, Sv *v);
Sv *cap_load_written_global(Interp *I, PyObject *name); /* what the frame wrote there, or NULL */
/* list.append(value) on a list argument (an opaque object capture never
 * reads): kept in order and replayed after the graph. None, or NULL with a
 * reason. */
Sv *cap_list_append_effect(Interp *I, Sv *list, Sv *value);
/* A dict of plain items read from an argument's attribute (vals/object.c):
 * cap_attr_dict_read gives the Sv an earlier read of that very dict made,
 * so that every read sees the frame's changes (NULL: read it afresh; guards
 * keep which paths reach one dict as they were), and cap_attr_dict_note
 * records a fresh read (real: the dict). cap_attr_dict_writable makes one changeable: its
 * items as the frame leaves them are written back through its path after
 * the graph (breaks.c). 0, or -1 with a reason. */
Sv *cap_attr_dict_read(Interp *I, PyObject *real, int arg, PyObject *path);
void cap_attr_dict_note(Interp *I, Sv *d, PyObject *real);
int cap_attr_dict_writable(Interp *I, Sv *d);
int cap_attr_dict_changed(Interp *I, const Sv *d); /* made writable by the frame: 1, else 0 */
/* 1 when the frame appended to `list` (a pinned list) so far, else 0. */
int cap_list_appended(Interp *I, PyObject *list);
/* 1 when obj (an exact list or set argument) has method `name` replayed by cap_container_effect */
int cap_container_effect_method(PyObject *obj, PyObject *name);
/* list.extend/insert/clear, set.add/discard/clear on an argument (a->pos[0]): kept in
 * program order with the appends. None, or NULL with a reason. */
Sv *cap_container_effect(Interp *I, const char *method, const Args *a);
/* A logging call (vals/logcall.c), kept in program order with the appends
 * and replayed as site(fn, args, kwargs); the four references are stolen.
 * 1 kept, 0 not (no break state, or a global write pending: the caller
 * captures the call as before). */
int cap_log_effect(Interp *I, PyObject *site, PyObject *fn, PyObject *args, PyObject *kwargs);
/* The side effects to replay after the graph (attribute writes, dict
 * arguments, globals), rebuilt through p. 0, or -1 with a reason. */
int cap_effects_plan(Interp *I, RetPlan *p, WkEffects *out);
int cap_effects_failed(Interp *I); /* the last plan failed on a side effect */
/* Closure cells of real functions: one SV_CELL per cell object in a capture
 * (so writes are seen by every inlined call), its writes replayed as effects. */
Sv *cap_cell_lookup(Interp *I, PyObject *cell); /* NULL: not seen yet */
void cap_cell_register(Interp *I, PyObject *cell, Sv *c);
/* The real cell (borrowed) an SV_CELL stands for, or NULL for a cell made
 * during capture; *own: its index in the compiled frame's closure, or -1. */
PyObject *cap_cell_real(Interp *I, Sv *c, int *own);
void cap_breaks_reset(void);                /* forget the resume functions */

#endif /* WICK_CAPTURE_INTERP_H */
