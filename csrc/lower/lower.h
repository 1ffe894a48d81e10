/* lower.h — the loop IR: every graph value becomes a buffer defined by a
 * function from symbolic indices to an expression DAG (define-by-run).
 *
 * Types and functions, grouped by the file that implements them:
 *   expr.c   hash-consed expressions (constructors fold constants), the
 *            pointer map, substitution (calling a buffer's definition at
 *            index expressions: this is how fusion happens), printing
 *   lower.c  graph -> loop IR: one lowering per op, table-driven from ops.def
 *   check.c  the loop-IR verifier (run between passes when WICK_DEBUG_DIR or
 *            WICK_LOG=code is set)
 *
 * Buffers and graph values. Loop-IR buffers are not graph values: a
 * lowering may define internal buffers (a softmax's row max and row sum, a
 * layer norm's mean and variance) before the buffer of its node's output,
 * through wk_lower_add_buffer or the decomposition helper
 * wk_lower_reduce_dims. Buffers are numbered in definition order, which is
 * topological; value_buf maps a graph value to its buffer. LOADs name
 * buffers. The decomposition mechanism lives here, once, so every backend
 * that consumes the loop IR (C today, Triton next) gets it.
 *
 * Index variables. A buffer's body is written over the canonical index
 * variables i0..i{ndim-1} of the buffer's own shape; a REDUCE body also uses
 * r0..r{nred-1}. Dimensions of size 1 are indexed by the constant 0, never by
 * their variable, so that equal accesses hash-cons to the same node. All
 * index expressions are WkSym from the loop IR's own pool (not the graph's):
 * the graph is read-only to the compiler.
 *
 * Invariants (checked by wk_lower_check):
 *   - expressions are hash-consed: structurally equal => same pointer;
 *   - a REDUCE node appears only as the root of a REDUCTION buffer's body;
 *   - LOAD reads a loop-IR buffer (not a graph value id) with one index per dimension;
 *     READ (built by the schedule) reads a plan buffer at one element offset;
 *   - binary operands carry the node's computation dtype (casts are explicit),
 *     comparisons produce BOOL, WHERE's condition is BOOL;
 *   - BOOL values are 0/1.
 *
 * Indirect loads (gather, embedding, advanced indexing). An index
 * expression may name a loaded value: wk_lower_indirect(L, e) returns an
 * *indirect variable*, a pool variable named "t<id>" after e's id (C code
 * declares e as `t<id>`, so index expressions print as they are) and bound
 * to e in L->xbind. A LOAD or READ whose index uses indirect variables has
 * their bound expressions as its operands a[0..nargs) (sorted by id; at most
 * WK_MAX_DIMS, else xoverflow is set): the DAG keeps them as dependencies, so fusion, substitution and
 * code generation order them like any operand. Bound expressions are int64
 * BOUND nodes (or, like SCATTER's last hit, in range by construction): a
 * kernel never reads outside a buffer. BOUND yields its
 * operand when it lies in [0, i) and 0 otherwise, and makes the kernel
 * report "index out of range": the C entry returns nonzero and the runtime
 * raises IndexError (eager raises there too); Triton kernels clamp and
 * tl.device_assert, compiled in (see cgen_triton.c): a device-side
 * assertion, as eager's CUDA kernels give.
 *
 * Ownership: a WkLoopIR owns its arena (all expressions), its symbol pool
 * and its buffers. It borrows nothing from the graph after wk_lower_graph
 * returns. Free with wk_lower_free.
 */
#ifndef WICK_LOWER_H
#define WICK_LOWER_H

#include "../graph/graph.h"

/* ---- expressions (expr.c) ---------------------------------------------- */
/*    name     nargs   meaning */
#define WK_LX_TABLE(X)                                                         \
    X(CONST, 0)   /* dtype constant: f (floating) or i (integral, bool) */     \
    X(LOAD, 0)    /* loop-IR buffer `buf` at idx[0..nidx) */                    \
    X(INDEX, 0)   /* the int64 value of index expression idx[0] (argmax) */   \
    X(READ, 0)    /* plan buffer `buf` at element offset idx[0] (schedule) */  \
    X(CAST, 1)    /* convert a[0] to dtype; to BOOL means != 0 */              \
    X(NEG, 1)                                                                  \
    X(ABS, 1)                                                                  \
    X(EXP, 1)                                                                  \
    X(LOG, 1)                                                                  \
    X(SQRT, 1)                                                                 \
    X(TANH, 1)                                                                 \
    X(SIN, 1) X(COS, 1) X(TAN, 1) X(ASIN, 1) X(ACOS, 1) X(ATAN, 1)             \
    X(SINH, 1) X(COSH, 1) X(ASINH, 1) X(ACOSH, 1) X(ATANH, 1)                  \
    X(ERF, 1) X(ERFC, 1) X(ERFINV, 1) X(LOG1P, 1) X(EXPM1, 1)                  \
    X(LOG2, 1) X(LOG10, 1) X(EXP2, 1)                                          \
    X(FLOOR, 1) X(CEIL, 1) X(TRUNC, 1)                                         \
    X(ROUND, 1)   /* half to even (nearbyint), like torch.round */            \
    X(ISNAN, 1)   /* floating only; result BOOL */                             \
    X(NOT, 1)     /* integral: ~a; BOOL: !a */                                 \
    X(ADD, 2)                                                                  \
    X(SUB, 2)                                                                  \
    X(MUL, 2)                                                                  \
    X(DIV, 2)     /* floating only */                                          \
    X(POW, 2)     /* floating: pow(); integral: repeated squaring */           \
    X(MAX, 2)     /* NaN-propagating, like torch.maximum */                    \
    X(MIN, 2)     /* NaN-propagating, like torch.minimum */                    \
    X(AND, 2)     /* bitwise, integral or BOOL */                              \
    X(OR, 2)      /* bitwise, integral or BOOL */                              \
    X(XOR, 2)     /* bitwise, integral or BOOL */                              \
    X(ATAN2, 2)   /* floating only */                                          \
    X(FMOD, 2)    /* C fmod (floating); integral: C %, divisor != 0 */          \
    X(FLOORDIV, 2) /* floor(a / b) as torch computes it; integral: divisor != 0 */ \
    X(REM, 2)     /* a - floor(a / b) * b, sign of b (torch.remainder) */      \
    X(EQ, 2)      /* comparisons: operands share a dtype, result BOOL */       \
    X(NE, 2)                                                                   \
    X(LT, 2)                                                                   \
    X(LE, 2)                                                                   \
    X(GT, 2)                                                                   \
    X(GE, 2)                                                                   \
    X(WHERE, 3)   /* a[0] BOOL ? a[1] : a[2] */                                \
    X(BOUND, 1)   /* a[0] (int64) if 0 <= a[0] < i, else 0 and an index error */ \
    X(REDUCE, 1)  /* rop over r0..r{nred-1} of a[0]; a[0]'s dtype accumulates */

typedef enum {
#define WK_LX_ENUM(name, nargs) WK_LX_##name,
    WK_LX_TABLE(WK_LX_ENUM)
#undef WK_LX_ENUM
    WK_NLX
} WkLxOp;

/* MAX/MIN propagate NaN; over BOOL they are any/all. */
typedef enum { WK_RED_SUM, WK_RED_MEAN, WK_RED_MAX, WK_RED_MIN, WK_RED_PROD } WkRedOp;

typedef struct WkLExpr WkLExpr;
struct WkLExpr {
    WkLxOp op;
    WkDType dtype;                    /* result dtype */
    int nargs;
    const WkLExpr *a[WK_MAX_DIMS];    /* operands (3 at most, but a LOAD's/READ's indirect ones) */
    int buf;                          /* LOAD: loop-IR buffer; READ: plan buffer */
    int nidx;                         /* LOAD: buffer rank; READ, INDEX: 1 */
    const WkSym *idx[WK_MAX_DIMS];    /* LOAD: per-dim index; READ: element offset; INDEX: value */
    double f;                         /* CONST floating value (already rounded to dtype) */
    int64_t i;                        /* CONST integral/bool value */
    WkRedOp rop;                      /* REDUCE */
                                      /* (BOUND: i is the exclusive upper bound) */
    int nred;                         /* REDUCE: reduction dims */
    int64_t red_sizes[WK_MAX_DIMS];   /* REDUCE: extent of r0.. */
    int id;                           /* dense, creation order: a[k]->id < id */
    uint64_t hash;
};

typedef enum { WK_LBUF_INPUT, WK_LBUF_POINTWISE, WK_LBUF_REDUCTION } WkLBufKind;

/* One per graph value, plus the internal buffers of decompositions. */
typedef struct {
    WkLBufKind kind;
    int value;                        /* graph value id, or -1 for an internal buffer */
    int node;                         /* producing node (internal: the node decomposed), -1 for inputs */
    WkOp op;                          /* producing op (inputs: -1 cast) */
    WkDType dtype;
    int ndim;
    int64_t sizes[WK_MAX_DIMS];
    int64_t strides[WK_MAX_DIMS];     /* inputs: as observed; others: contiguous */
    int64_t numel;
    const WkLExpr *body;              /* POINTWISE: over i*; REDUCTION: a REDUCE; INPUT: NULL */
    int nusers;                       /* nodes reading it */
    int is_output;                    /* some graph output is this value */
    int input_index;                  /* graph input position or -1 */
} WkLBuf;

typedef struct WkLoopIR {
    WkArena *arena;                   /* every WkLExpr */
    WkSymPool *syms;                  /* index expressions */
    int nbufs, bufs_cap;
    WkLBuf *bufs;                     /* [nbufs], in definition (topological) order */
    int nvalues;
    int *value_buf;                   /* [nvalues] buffer of each graph value */
    int ninputs, noutputs;
    int *input_bufs;                  /* [ninputs] buffer of graph input k */
    int *output_bufs;                 /* [noutputs] buffer of graph output k (may repeat) */
    const WkSym *ivar[WK_MAX_DIMS];   /* i0.. */
    const WkSym *rvar[WK_MAX_DIMS];   /* r0.. */
    int ivar_id[WK_MAX_DIMS], rvar_id[WK_MAX_DIMS]; /* their pool var numbers */
    int nexprs;                       /* next expression id */
    void *table;                      /* hash-cons table (expr.c) */
    int table_cap, table_len;
    const WkLExpr **xbind;            /* [xbind_cap] by pool var: an indirect variable's expression */
    int xbind_cap;
    int xoverflow;                    /* some LOAD/READ needed more than WK_MAX_DIMS indirect
                                         operands: its DAG is wrong, the pipeline refuses the graph */
} WkLoopIR;

/* gelu(+inf) in float32/bfloat16: PyTorch's vectorised CPU kernel gives NaN
 * where it is built for AVX-512 and inf with AVX2 (its scalar kernel and
 * float64 give inf everywhere). Process-wide, set once from torch's own
 * answer on this machine (wick/backends.py); NaN until then. */
void wk_lower_set_gelu_inf_is_nan(int is_nan);

/* Constructors. All return the canonical node; CAST of a CONST folds. */
const WkLExpr *wk_lower_const_f(WkLoopIR *L, WkDType dt, double v);
const WkLExpr *wk_lower_const_i(WkLoopIR *L, WkDType dt, int64_t v);
const WkLExpr *wk_lower_load(WkLoopIR *L, int value, int nidx, const WkSym *const *idx);
const WkLExpr *wk_lower_read(WkLoopIR *L, WkDType dt, int planbuf, const WkSym *offset);
const WkLExpr *wk_lower_index(WkLoopIR *L, const WkSym *value);
const WkLExpr *wk_lower_cast(WkLoopIR *L, WkDType dt, const WkLExpr *a);
const WkLExpr *wk_lower_unary(WkLoopIR *L, WkLxOp op, const WkLExpr *a);
/* Binary arithmetic and comparisons; operands must share a dtype. */
const WkLExpr *wk_lower_binary(WkLoopIR *L, WkLxOp op, const WkLExpr *a, const WkLExpr *b);
const WkLExpr *wk_lower_where(WkLoopIR *L, const WkLExpr *c, const WkLExpr *a, const WkLExpr *b);
const WkLExpr *wk_lower_reduce(WkLoopIR *L, WkRedOp rop, WkDType out, const WkLExpr *body,
                               int nred, const int64_t *red_sizes);
int wk_lower_is_const(const WkLExpr *e, double *value); /* 1 if CONST; value as double */
/* Indirect loads (see above). wk_lower_indirect: the index sym standing for
 * int64 expression e (a constant sym when e is CONST). wk_lower_xvar: the
 * expression bound to pool variable var, NULL when var is not indirect.
 * wk_lower_checked_index: idx (any integral dtype) as int64, negative values
 * wrapped by `size` when wrap_negative (Python-style, as aten.index), then
 * BOUND by size. */
const WkSym *wk_lower_indirect(WkLoopIR *L, const WkLExpr *e);
const WkLExpr *wk_lower_xvar(const WkLoopIR *L, int var);
const WkLExpr *wk_lower_checked_index(WkLoopIR *L, const WkLExpr *idx, int64_t size, int wrap_negative);
/* The indirect variables of s, their expressions appended to out (unique,
 * sorted by id); returns their count (may exceed cap: then out is full). */
int wk_lower_sym_xvars(const WkLoopIR *L, const WkSym *s, const WkLExpr **out, int n, int cap);
/* The node of e's op and attributes with operands a[0..e->nargs) instead. */
const WkLExpr *wk_lower_with_args(WkLoopIR *L, const WkLExpr *e, const WkLExpr *const *a);

const char *wk_lower_op_name(WkLxOp op);
int wk_lower_op_nargs(WkLxOp op);

/* A map from pointers to pointers (open addressing), for memo tables. */
typedef struct { const void **keys; const void **vals; int cap, len; } WkLowerMap;
const void *wk_lower_map_get(const WkLowerMap *m, const void *key);
void wk_lower_map_put(WkLowerMap *m, const void *key, const void *val);
void wk_lower_map_free(WkLowerMap *m);

/* Substitutes index variables into sym s: i_k -> ivals[k] (k < ni), r_k ->
 * rvals[k] (k < nr); other variables stay (indirect ones too: wk_lower_subst
 * renames those after substituting their expressions). */
const WkSym *wk_lower_subst_sym(WkLoopIR *L, const WkSym *s, const WkSym *const *ivals, int ni,
                                const WkSym *const *rvals, int nr);

/* s with indirect variables renamed: xfrom[k] -> xto[k] (syms of
 * wk_lower_indirect; xto may be any sym). */
const WkSym *wk_lower_rename_xvars(WkLoopIR *L, const WkSym *s, const WkSym *const *xfrom,
                                   const WkSym *const *xto, int n);

/* Calls buffer definitions. Rebuilds e with i_k -> ivals[k], r_k -> rvals[k];
 * a LOAD of a POINTWISE buffer for which inline_fn(ctx, value) returns 1 is
 * replaced by that buffer's body called at the load's (substituted) index,
 * recursively. inline_fn NULL inlines nothing. Shared sub-DAGs stay shared. */
typedef int (*WkLowerInlineFn)(void *ctx, int value);
const WkLExpr *wk_lower_subst(WkLoopIR *L, const WkLExpr *e, const WkSym *const *ivals, int ni,
                              const WkSym *const *rvals, int nr, WkLowerInlineFn inline_fn,
                              void *ctx);

/* Appends a readable rendering of e (shared nodes printed once as %id). */
void wk_lower_print_expr(const WkLoopIR *L, const WkLExpr *e, WkStr *out);
/* The whole loop IR, one buffer per line; caller frees. */
char *wk_lower_print(const WkLoopIR *L);

/* ---- graph -> loop IR (lower.c) ---------------------------------------- */
/* Defines an internal buffer of node `node` (contiguous) with body `body`
 * over i0.. of `sizes` (a REDUCTION body is a REDUCE); returns its id. */
int wk_lower_add_buffer(WkLoopIR *L, int node, WkLBufKind kind, WkDType dt, int ndim,
                        const int64_t *sizes, const WkLExpr *body);
/* The decomposition helper: e is an expression over the index space
 * `sizes` (i0..i{ndim-1}, size-1 dims indexed by 0); reduces it with rop
 * over the dims flagged in reduced[] into an internal keepdim buffer (the
 * body accumulates in e's dtype; the buffer has dtype out), and returns the
 * load of that buffer at the same index (a broadcast over the reduced dims). */
const WkLExpr *wk_lower_reduce_dims(WkLoopIR *L, int node, const WkLExpr *e, int ndim,
                                    const int64_t *sizes, const int *reduced, WkRedOp rop,
                                    WkDType out);
/* Returns NULL with wk_error set when a value has a non-constant size
 * ("dynamic shapes not supported yet") or an op/dtype has no lowering. */
WkLoopIR *wk_lower_graph(const WkGraph *g);
void wk_lower_free(WkLoopIR *L);

/* ---- verifier (check.c) ------------------------------------------------ */
int wk_lower_check(const WkLoopIR *L); /* 0, or -1 with wk_error set */

#endif /* WICK_LOWER_H */
