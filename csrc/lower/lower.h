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
 *   - LOAD reads a buffer by graph value id with one index per dimension;
 *     READ (built by the schedule) reads a plan buffer at one element offset;
 *   - binary operands carry the node's computation dtype (casts are explicit),
 *     comparisons produce BOOL, WHERE's condition is BOOL;
 *   - BOOL values are 0/1.
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
    X(LOAD, 0)    /* buffer `buf` (graph value id) at idx[0..nidx) */           \
    X(READ, 0)    /* plan buffer `buf` at element offset idx[0] (schedule) */  \
    X(CAST, 1)    /* convert a[0] to dtype; to BOOL means != 0 */              \
    X(NEG, 1)                                                                  \
    X(ABS, 1)                                                                  \
    X(EXP, 1)                                                                  \
    X(LOG, 1)                                                                  \
    X(SQRT, 1)                                                                 \
    X(TANH, 1)                                                                 \
    X(ADD, 2)                                                                  \
    X(SUB, 2)                                                                  \
    X(MUL, 2)                                                                  \
    X(DIV, 2)     /* floating only */                                          \
    X(POW, 2)     /* floating: pow(); integral: repeated squaring */           \
    X(MAX, 2)     /* NaN-propagating, like torch.maximum */                    \
    X(MIN, 2)     /* NaN-propagating, like torch.minimum */                    \
    X(AND, 2)     /* BOOL only */                                              \
    X(OR, 2)      /* BOOL only */                                              \
    X(EQ, 2)      /* comparisons: operands share a dtype, result BOOL */       \
    X(NE, 2)                                                                   \
    X(LT, 2)                                                                   \
    X(LE, 2)                                                                   \
    X(GT, 2)                                                                   \
    X(GE, 2)                                                                   \
    X(WHERE, 3)   /* a[0] BOOL ? a[1] : a[2] */                                \
    X(REDUCE, 1)  /* rop over r0..r{nred-1} of a[0]; a[0]'s dtype accumulates */

typedef enum {
#define WK_LX_ENUM(name, nargs) WK_LX_##name,
    WK_LX_TABLE(WK_LX_ENUM)
#undef WK_LX_ENUM
    WK_NLX
} WkLxOp;

typedef enum { WK_RED_SUM, WK_RED_MEAN, WK_RED_MAX } WkRedOp;

typedef struct WkLExpr WkLExpr;
struct WkLExpr {
    WkLxOp op;
    WkDType dtype;                    /* result dtype */
    int nargs;
    const WkLExpr *a[3];              /* operands */
    int buf;                          /* LOAD: graph value id; READ: plan buffer */
    int nidx;                         /* LOAD: buffer rank; READ: 1 */
    const WkSym *idx[WK_MAX_DIMS];    /* LOAD: per-dim index; READ: element offset */
    double f;                         /* CONST floating value (already rounded to dtype) */
    int64_t i;                        /* CONST integral/bool value */
    WkRedOp rop;                      /* REDUCE */
    int nred;                         /* REDUCE: reduction dims */
    int64_t red_sizes[WK_MAX_DIMS];   /* REDUCE: extent of r0.. */
    int id;                           /* dense, creation order: a[k]->id < id */
    uint64_t hash;
};

typedef enum { WK_LBUF_INPUT, WK_LBUF_POINTWISE, WK_LBUF_REDUCTION } WkLBufKind;

/* One per graph value (indexed by value id). */
typedef struct {
    WkLBufKind kind;
    int value;                        /* graph value id (== index) */
    int node;                         /* producing node, -1 for inputs */
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
    int nbufs;
    WkLBuf *bufs;                     /* [nbufs], by graph value id */
    int ninputs, noutputs;
    int *input_values;                /* [ninputs] value ids */
    int *output_values;               /* [noutputs] value ids (may repeat) */
    const WkSym *ivar[WK_MAX_DIMS];   /* i0.. */
    const WkSym *rvar[WK_MAX_DIMS];   /* r0.. */
    int ivar_id[WK_MAX_DIMS], rvar_id[WK_MAX_DIMS]; /* their pool var numbers */
    int nexprs;                       /* next expression id */
    void *table;                      /* hash-cons table (expr.c) */
    int table_cap, table_len;
} WkLoopIR;

/* Constructors. All return the canonical node; CAST of a CONST folds. */
const WkLExpr *wk_lower_const_f(WkLoopIR *L, WkDType dt, double v);
const WkLExpr *wk_lower_const_i(WkLoopIR *L, WkDType dt, int64_t v);
const WkLExpr *wk_lower_load(WkLoopIR *L, int value, int nidx, const WkSym *const *idx);
const WkLExpr *wk_lower_read(WkLoopIR *L, WkDType dt, int planbuf, const WkSym *offset);
const WkLExpr *wk_lower_cast(WkLoopIR *L, WkDType dt, const WkLExpr *a);
const WkLExpr *wk_lower_unary(WkLoopIR *L, WkLxOp op, const WkLExpr *a);
/* Binary arithmetic and comparisons; operands must share a dtype. */
const WkLExpr *wk_lower_binary(WkLoopIR *L, WkLxOp op, const WkLExpr *a, const WkLExpr *b);
const WkLExpr *wk_lower_where(WkLoopIR *L, const WkLExpr *c, const WkLExpr *a, const WkLExpr *b);
const WkLExpr *wk_lower_reduce(WkLoopIR *L, WkRedOp rop, WkDType out, const WkLExpr *body,
                               int nred, const int64_t *red_sizes);
int wk_lower_is_const(const WkLExpr *e, double *value); /* 1 if CONST; value as double */
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
 * rvals[k] (k < nr); other variables stay. */
const WkSym *wk_lower_subst_sym(WkLoopIR *L, const WkSym *s, const WkSym *const *ivals, int ni,
                                const WkSym *const *rvals, int nr);

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
/* Returns NULL with wk_error set when a value has a non-constant size
 * ("dynamic shapes not supported yet") or an op/dtype has no lowering. */
WkLoopIR *wk_lower_graph(const WkGraph *g);
void wk_lower_free(WkLoopIR *L);

/* ---- verifier (check.c) ------------------------------------------------ */
int wk_lower_check(const WkLoopIR *L); /* 0, or -1 with wk_error set */

#endif /* WICK_LOWER_H */
