/* lower.c — graph -> loop IR. One lowering per op, in a table indexed by
 * WkOp that is generated from ops.def (a missing lowering is a compile
 * error). A lowering is called with the node's output index (the canonical
 * index variables of its shape) and pulls its inputs through load_arg(),
 * which applies broadcasting; it returns the expression of one element.
 *
 * Requires: a graph whose sizes and strides are constants.
 * Provides: one WkLBuf per graph value; POINTWISE bodies read their inputs
 *           through LOADs of the producing values (nothing is inlined yet:
 *           the schedule decides what to materialise and inlines the rest
 *           with wk_lower_subst).
 */
#include "lower.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    WkLoopIR *L;
    const WkGraph *g;
    const WkNode *node;
    const WkValue *out;
    const WkSym *canon[WK_MAX_DIMS]; /* the output's index: i_k, or 0 for size-1 dims */
} Lower;

typedef const WkLExpr *(*LowerFn)(Lower *c);

/* ---- helpers ----------------------------------------------------------- */
static int const_dims(const WkValue *v, int64_t *sizes, int64_t *strides) {
    for (int d = 0; d < v->ndim; d++) {
        if (!wk_sym_is_const(v->sizes[d], &sizes[d]) ||
            (strides && !wk_sym_is_const(v->strides[d], &strides[d]))) {
            wk_error_set("dynamic shapes not supported yet");
            return -1;
        }
    }
    return 0;
}

/* Input k of the current node, loaded at the output index with broadcasting
 * (trailing dims align; a size-1 input dim reads index 0). */
static const WkLExpr *load_arg(Lower *c, int k) {
    int vid = c->node->inputs[k];
    const WkLBuf *b = &c->L->bufs[vid];
    const WkSym *idx[WK_MAX_DIMS];
    /* constants (SCALAR nodes) are called right away, so lowerings see
     * their values (pow's exponent specialisation, cast folding) */
    if (b->body && b->body->op == WK_LX_CONST) return b->body;
    int shift = c->out->ndim - b->ndim;
    for (int d = 0; d < b->ndim; d++)
        idx[d] = b->sizes[d] == 1 ? wk_sym_const(c->L->syms, 0) : c->canon[d + shift];
    return wk_lower_load(c->L, vid, b->ndim, idx);
}

static const WkLExpr *arg_as(Lower *c, int k, WkDType dt) {
    return wk_lower_cast(c->L, dt, load_arg(c, k));
}

/* torch.result_type over the node's inputs from `first` on: dimensioned
 * tensors outrank 0-d tensors, which outrank wrapped Python numbers, unless
 * the lower-ranked group is of a higher category (bool < integral < float). */
static WkDType combine_categories(int hh, WkDType h, int hl, WkDType l) {
    if (!hh) return l;
    if (!hl) return h;
    if (wk_dtype_is_float(h)) return h;
    if (h == WK_BOOL || wk_dtype_is_float(l)) return wk_dtype_promote(h, l);
    return h;
}

static WkDType result_type(Lower *c, int first) {
    int have[3] = {0, 0, 0};
    WkDType r[3] = {WK_BOOL, WK_BOOL, WK_BOOL};
    for (int k = first; k < c->node->ninputs; k++) {
        const WkValue *v = wk_graph_value(c->g, c->node->inputs[k]);
        WkDType cur = v->dtype;
        int slot = v->is_wrapped_number ? 2 : v->ndim > 0 ? 0 : 1;
        if (v->is_wrapped_number && wk_dtype_is_float(cur)) cur = WK_F32; /* default dtype */
        r[slot] = have[slot] ? wk_dtype_promote(r[slot], cur) : cur;
        have[slot] = 1;
    }
    WkDType low = combine_categories(have[1], r[1], have[2], r[2]);
    return combine_categories(have[0], r[0], have[1] || have[2], low);
}

static const WkLExpr *fail(const char *what, WkDType dt) {
    wk_error_set("%s: no lowering for dtype %s", what, wk_dtype_name(dt));
    return NULL;
}

/* ---- pointwise lowerings ----------------------------------------------- */
static const WkLExpr *lower_SCALAR(Lower *c) {
    WkDType dt = c->out->dtype;
    const WkAttrs *a = &c->node->attrs;
    return wk_dtype_is_float(dt) ? wk_lower_const_f(c->L, dt, a->fvalue)
                                 : wk_lower_const_i(c->L, dt, a->ivalue);
}

static const WkLExpr *lower_CONVERT(Lower *c) { return arg_as(c, 0, c->out->dtype); }

static const WkLExpr *arith(Lower *c, WkLxOp op, WkLxOp bool_op, const char *name) {
    WkDType dt = c->out->dtype;
    if (dt == WK_BOOL && bool_op == WK_NLX) return fail(name, dt);
    return wk_lower_binary(c->L, dt == WK_BOOL ? bool_op : op, arg_as(c, 0, dt), arg_as(c, 1, dt));
}
static const WkLExpr *lower_ADD(Lower *c) { return arith(c, WK_LX_ADD, WK_LX_OR, "add"); }
static const WkLExpr *lower_SUB(Lower *c) { return arith(c, WK_LX_SUB, WK_NLX, "sub"); }
static const WkLExpr *lower_MUL(Lower *c) { return arith(c, WK_LX_MUL, WK_LX_AND, "mul"); }
static const WkLExpr *lower_MAXIMUM(Lower *c) { return arith(c, WK_LX_MAX, WK_LX_MAX, "maximum"); }
static const WkLExpr *lower_MINIMUM(Lower *c) { return arith(c, WK_LX_MIN, WK_LX_MIN, "minimum"); }

static const WkLExpr *lower_DIV(Lower *c) {
    WkDType dt = c->out->dtype;
    if (!wk_dtype_is_float(dt)) return fail("div", dt);
    return wk_lower_binary(c->L, WK_LX_DIV, arg_as(c, 0, dt), arg_as(c, 1, dt));
}

/* torch specialises scalar exponents the same way (x*x for 2, sqrt for 0.5),
 * so these are both faster and closer to eager than pow(). */
static const WkLExpr *pow_expr(WkLoopIR *L, const WkLExpr *x, const WkLExpr *e);
static const WkLExpr *lower_POW(Lower *c) {
    WkLoopIR *L = c->L;
    WkDType dt = c->out->dtype;
    /* bool ** (Python bool) is legal in torch: compute in int64, 0/1 stays 0/1 */
    WkDType ct = dt == WK_BOOL ? WK_I64 : dt;
    const WkLExpr *r = pow_expr(L, arg_as(c, 0, ct), arg_as(c, 1, ct));
    return wk_lower_cast(L, dt, r);
}

static const WkLExpr *pow_expr(WkLoopIR *L, const WkLExpr *x, const WkLExpr *e) {
    WkDType dt = x->dtype;
    double ev;
    if (wk_lower_is_const(e, &ev)) {
        int fl = wk_dtype_is_float(dt);
        const WkLExpr *one = wk_lower_const_i(L, dt, 1);
        if (ev == 0) return one;
        if (ev == 1) return x;
        if (ev == 2) return wk_lower_binary(L, WK_LX_MUL, x, x);
        if (ev == 3) return wk_lower_binary(L, WK_LX_MUL, wk_lower_binary(L, WK_LX_MUL, x, x), x);
        if (fl && ev == 0.5) return wk_lower_unary(L, WK_LX_SQRT, x);
        if (fl && ev == -1) return wk_lower_binary(L, WK_LX_DIV, one, x);
        if (fl && ev == -2) return wk_lower_binary(L, WK_LX_DIV, one, wk_lower_binary(L, WK_LX_MUL, x, x));
        if (fl && ev == -0.5) return wk_lower_binary(L, WK_LX_DIV, one, wk_lower_unary(L, WK_LX_SQRT, x));
    }
    return wk_lower_binary(L, WK_LX_POW, x, e);
}

static const WkLExpr *compare(Lower *c, WkLxOp op) {
    WkDType dt = result_type(c, 0);
    return wk_lower_binary(c->L, op, arg_as(c, 0, dt), arg_as(c, 1, dt));
}
static const WkLExpr *lower_EQ(Lower *c) { return compare(c, WK_LX_EQ); }
static const WkLExpr *lower_NE(Lower *c) { return compare(c, WK_LX_NE); }
static const WkLExpr *lower_LT(Lower *c) { return compare(c, WK_LX_LT); }
static const WkLExpr *lower_LE(Lower *c) { return compare(c, WK_LX_LE); }
static const WkLExpr *lower_GT(Lower *c) { return compare(c, WK_LX_GT); }
static const WkLExpr *lower_GE(Lower *c) { return compare(c, WK_LX_GE); }

static const WkLExpr *lower_WHERE(Lower *c) {
    WkDType dt = c->out->dtype;
    return wk_lower_where(c->L, arg_as(c, 0, WK_BOOL), arg_as(c, 1, dt), arg_as(c, 2, dt));
}

static const WkLExpr *lower_NEG(Lower *c) {
    WkDType dt = c->out->dtype;
    if (dt == WK_BOOL) return fail("neg", dt);
    return wk_lower_unary(c->L, WK_LX_NEG, arg_as(c, 0, dt));
}

static const WkLExpr *lower_ABS(Lower *c) {
    WkDType dt = c->out->dtype;
    const WkLExpr *x = arg_as(c, 0, dt);
    if (dt == WK_BOOL || dt == WK_U8) return x;
    return wk_lower_unary(c->L, WK_LX_ABS, x);
}

/* relu(x) = x < 0 ? 0 : x: like torch.relu it keeps NaN and -0.0 (a max
 * against 0 would turn -0.0 into +0.0, and 1/relu(x) into +inf) */
static const WkLExpr *lower_RELU(Lower *c) {
    WkDType dt = c->out->dtype;
    if (dt == WK_BOOL) return fail("relu", dt);
    const WkLExpr *x = arg_as(c, 0, dt), *zero = wk_lower_const_i(c->L, dt, 0);
    return wk_lower_where(c->L, wk_lower_binary(c->L, WK_LX_LT, x, zero), zero, x);
}

static const WkLExpr *transcendental(Lower *c, WkLxOp op, const char *name) {
    WkDType dt = c->out->dtype;
    if (!wk_dtype_is_float(dt)) return fail(name, dt);
    return wk_lower_unary(c->L, op, arg_as(c, 0, dt));
}
static const WkLExpr *lower_EXP(Lower *c) { return transcendental(c, WK_LX_EXP, "exp"); }
static const WkLExpr *lower_LOG(Lower *c) { return transcendental(c, WK_LX_LOG, "log"); }
static const WkLExpr *lower_SQRT(Lower *c) { return transcendental(c, WK_LX_SQRT, "sqrt"); }
static const WkLExpr *lower_TANH(Lower *c) { return transcendental(c, WK_LX_TANH, "tanh"); }

/* sigmoid(x) = 1 / (1 + exp(-x)), as torch's CPU kernel computes it */
static const WkLExpr *lower_SIGMOID(Lower *c) {
    WkLoopIR *L = c->L;
    WkDType dt = c->out->dtype;
    if (!wk_dtype_is_float(dt)) return fail("sigmoid", dt);
    const WkLExpr *one = wk_lower_const_f(L, dt, 1.0);
    const WkLExpr *e = wk_lower_unary(L, WK_LX_EXP, wk_lower_unary(L, WK_LX_NEG, arg_as(c, 0, dt)));
    return wk_lower_binary(L, WK_LX_DIV, one, wk_lower_binary(L, WK_LX_ADD, one, e));
}

/* ---- reductions -------------------------------------------------------- */
/* The output index uses i vars over the output shape; reduced input dims
 * read r vars, numbered in dim order. */
static const WkLExpr *reduce(Lower *c, WkRedOp rop) {
    WkLoopIR *L = c->L;
    const WkAttrs *at = &c->node->attrs;
    int vid = c->node->inputs[0];
    const WkLBuf *in = &L->bufs[vid];
    WkDType out = c->out->dtype;
    int reduced[WK_MAX_DIMS] = {0};
    if (at->ndims == 0)
        for (int d = 0; d < in->ndim; d++) reduced[d] = 1;
    for (int k = 0; k < at->ndims; k++)
        if (at->dims[k] >= 0 && at->dims[k] < in->ndim) reduced[at->dims[k]] = 1;
    const WkSym *idx[WK_MAX_DIMS];
    int64_t red_sizes[WK_MAX_DIMS];
    int nred = 0, o = 0;
    for (int d = 0; d < in->ndim; d++) {
        if (reduced[d]) {
            red_sizes[nred] = in->sizes[d];
            idx[d] = in->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : L->rvar[nred];
            nred++;
            if (at->keepdim) o++;
        } else {
            idx[d] = in->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : c->canon[o];
            o++;
        }
    }
    if (o != c->out->ndim) {
        wk_error_set("reduction: output rank %d does not match the graph's %d", o, c->out->ndim);
        return NULL;
    }
    const WkLExpr *x = wk_lower_load(L, vid, in->ndim, idx);
    WkDType acc = out;
    if (rop != WK_RED_MAX) {
        if (out == WK_F16 || out == WK_BF16) return fail("sum", out);
        x = wk_lower_cast(L, out, x); /* sum(x, dtype=d) converts first, as torch does */
        acc = wk_dtype_is_float(out) ? WK_F64 : WK_I64;
        x = wk_lower_cast(L, acc, x);
    }
    if (rop == WK_RED_MEAN && !wk_dtype_is_float(out)) return fail("mean", out);
    return wk_lower_reduce(L, rop, out, x, nred, red_sizes);
}
static const WkLExpr *lower_SUM(Lower *c) { return reduce(c, WK_RED_SUM); }
static const WkLExpr *lower_MEAN(Lower *c) { return reduce(c, WK_RED_MEAN); }
static const WkLExpr *lower_AMAX(Lower *c) { return reduce(c, WK_RED_MAX); }

static const LowerFn lowerings[WK_NOPS] = {
#undef WK_OP
#define WK_OP(name, kind, arity, shape, dtype, sig, torch) [WK_OP_##name] = lower_##name,
#include "../graph/ops.def"
#undef WK_OP
};

/* ---- driver ------------------------------------------------------------ */
static int fill_buf(WkLoopIR *L, const WkGraph *g, int v) {
    const WkValue *val = wk_graph_value(g, v);
    WkLBuf *b = &L->bufs[v];
    b->value = v;
    b->node = val->node;
    b->op = (WkOp)-1;
    b->dtype = val->dtype;
    b->ndim = val->ndim;
    b->input_index = val->input_index;
    if (val->dtype == WK_F16 || val->dtype == WK_BF16) {
        wk_error_set("dtype %s not supported by the C code generator", wk_dtype_name(val->dtype));
        return -1;
    }
    if (const_dims(val, b->sizes, val->node < 0 ? b->strides : NULL) < 0) return -1;
    b->numel = 1;
    for (int d = 0; d < b->ndim; d++) b->numel *= b->sizes[d];
    if (val->node >= 0) { /* node outputs are contiguous */
        int64_t st = 1;
        for (int d = b->ndim - 1; d >= 0; d--) {
            b->strides[d] = st;
            st *= b->sizes[d] > 1 ? b->sizes[d] : 1;
        }
    }
    b->nusers = wk_graph_nusers(g, v);
    return 0;
}

WkLoopIR *wk_lower_graph(const WkGraph *g) {
    WkLoopIR *L = wk_xcalloc(1, sizeof *L);
    L->arena = wk_arena_new();
    L->syms = wk_sympool_new();
    for (int k = 0; k < WK_MAX_DIMS; k++) {
        char name[16];
        snprintf(name, sizeof name, "i%d", k);
        L->ivar[k] = wk_sym_var(L->syms, name);
        L->ivar_id[k] = L->ivar[k]->var;
        snprintf(name, sizeof name, "r%d", k);
        L->rvar[k] = wk_sym_var(L->syms, name);
        L->rvar_id[k] = L->rvar[k]->var;
    }
    L->nbufs = wk_graph_nvalues(g);
    L->bufs = wk_xcalloc((size_t)L->nbufs, sizeof *L->bufs);
    L->ninputs = wk_graph_ninputs(g);
    L->noutputs = wk_graph_noutputs(g);
    L->input_values = wk_xcalloc((size_t)L->ninputs, sizeof(int));
    L->output_values = wk_xcalloc((size_t)L->noutputs, sizeof(int));
    for (int v = 0; v < L->nbufs; v++)
        if (fill_buf(L, g, v) < 0) goto error;
    for (int k = 0; k < L->ninputs; k++) L->input_values[k] = wk_graph_input_value(g, k);
    for (int k = 0; k < L->noutputs; k++) {
        L->output_values[k] = wk_graph_output_value(g, k);
        L->bufs[L->output_values[k]].is_output = 1;
    }
    for (int n = 0; n < wk_graph_nnodes(g); n++) {
        const WkNode *node = wk_graph_node(g, n);
        WkLBuf *b = &L->bufs[node->output];
        const WkOpInfo *info = wk_op_info(node->op);
        Lower c = {L, g, node, wk_graph_value(g, node->output), {0}};
        for (int d = 0; d < b->ndim; d++)
            c.canon[d] = b->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : L->ivar[d];
        b->op = node->op;
        b->kind = info && info->kind == WK_KIND_REDUCTION ? WK_LBUF_REDUCTION : WK_LBUF_POINTWISE;
        b->body = lowerings[node->op](&c);
        if (!b->body) goto error;
        if (b->body->dtype != b->dtype && b->kind == WK_LBUF_POINTWISE)
            b->body = wk_lower_cast(L, b->dtype, b->body);
    }
    for (int v = 0; v < L->nbufs; v++)
        if (L->bufs[v].node < 0 && L->bufs[v].input_index < 0) {
            wk_error_set("value %d is neither a graph input nor a node output", v);
            goto error;
        }
    return L;
error:
    wk_lower_free(L);
    return NULL;
}

void wk_lower_free(WkLoopIR *L) {
    if (!L) return;
    wk_arena_free(L->arena);
    wk_sympool_free(L->syms);
    free(L->table);
    free(L->bufs);
    free(L->input_values);
    free(L->output_values);
    free(L);
}
