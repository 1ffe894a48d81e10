/* lower.c — graph -> loop IR. One lowering per op, in a table indexed by
 * WkOp that is generated from ops.def (a missing lowering is a compile
 * error). A lowering is called with the node's output index (the canonical
 * index variables of its shape) and pulls its inputs through load_arg(),
 * which applies broadcasting; it returns the expression of one element.
 *
 * Decompositions. A lowering may define internal buffers before its
 * node's own (wk_lower_add_buffer; wk_lower_reduce_dims for the common
 * case of a reduction broadcast back over its input's index space), so
 * softmax is max + sum + pointwise, var is mean + sum of squares. The
 * schedule sees ordinary buffers and fuses them like any other.
 *
 * Requires: a graph whose sizes and strides are constants.
 * Provides: one WkLBuf per graph value plus internal ones, in topological
 *           order; POINTWISE bodies read their inputs through LOADs of the
 *           producing buffers (nothing is inlined yet: the schedule decides
 *           what to materialise and inlines the rest with wk_lower_subst).
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
    int node_index;
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
    int vid = c->L->value_buf[c->node->inputs[k]];
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

/* torch.result_type over the node's inputs from `first` on (graph.c has the
 * one implementation). */
static WkDType result_type(Lower *c, int first) {
    const WkValue *in[8];
    int n = 0;
    for (int k = first; k < c->node->ninputs && n < 8; k++) in[n++] = wk_graph_value(c->g, c->node->inputs[k]);
    return wk_result_type(in, n);
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

/* ---- more pointwise ----------------------------------------------------- */
static const WkLExpr *cf(Lower *c, WkDType dt, double v) { return wk_lower_const_f(c->L, dt, v); }
static const WkLExpr *bin(Lower *c, WkLxOp op, const WkLExpr *a, const WkLExpr *b) {
    return wk_lower_binary(c->L, op, a, b);
}
static const WkLExpr *un(Lower *c, WkLxOp op, const WkLExpr *a) { return wk_lower_unary(c->L, op, a); }

static const WkLExpr *lower_SIN(Lower *c) { return transcendental(c, WK_LX_SIN, "sin"); }
static const WkLExpr *lower_COS(Lower *c) { return transcendental(c, WK_LX_COS, "cos"); }
static const WkLExpr *lower_TAN(Lower *c) { return transcendental(c, WK_LX_TAN, "tan"); }
static const WkLExpr *lower_ASIN(Lower *c) { return transcendental(c, WK_LX_ASIN, "asin"); }
static const WkLExpr *lower_ACOS(Lower *c) { return transcendental(c, WK_LX_ACOS, "acos"); }
static const WkLExpr *lower_ATAN(Lower *c) { return transcendental(c, WK_LX_ATAN, "atan"); }
static const WkLExpr *lower_SINH(Lower *c) { return transcendental(c, WK_LX_SINH, "sinh"); }
static const WkLExpr *lower_COSH(Lower *c) { return transcendental(c, WK_LX_COSH, "cosh"); }
static const WkLExpr *lower_ASINH(Lower *c) { return transcendental(c, WK_LX_ASINH, "asinh"); }
static const WkLExpr *lower_ACOSH(Lower *c) { return transcendental(c, WK_LX_ACOSH, "acosh"); }
static const WkLExpr *lower_ATANH(Lower *c) { return transcendental(c, WK_LX_ATANH, "atanh"); }
static const WkLExpr *lower_ERF(Lower *c) { return transcendental(c, WK_LX_ERF, "erf"); }
static const WkLExpr *lower_ERFC(Lower *c) { return transcendental(c, WK_LX_ERFC, "erfc"); }
static const WkLExpr *lower_ERFINV(Lower *c) { return transcendental(c, WK_LX_ERFINV, "erfinv"); }
static const WkLExpr *lower_LOG1P(Lower *c) { return transcendental(c, WK_LX_LOG1P, "log1p"); }
static const WkLExpr *lower_EXPM1(Lower *c) { return transcendental(c, WK_LX_EXPM1, "expm1"); }
static const WkLExpr *lower_LOG2(Lower *c) { return transcendental(c, WK_LX_LOG2, "log2"); }
static const WkLExpr *lower_LOG10(Lower *c) { return transcendental(c, WK_LX_LOG10, "log10"); }
static const WkLExpr *lower_EXP2(Lower *c) { return transcendental(c, WK_LX_EXP2, "exp2"); }

static const WkLExpr *lower_RSQRT(Lower *c) {
    WkDType dt = c->out->dtype;
    if (!wk_dtype_is_float(dt)) return fail("rsqrt", dt);
    return bin(c, WK_LX_DIV, cf(c, dt, 1.0), un(c, WK_LX_SQRT, arg_as(c, 0, dt)));
}
static const WkLExpr *lower_RECIPROCAL(Lower *c) {
    WkDType dt = c->out->dtype;
    if (!wk_dtype_is_float(dt)) return fail("reciprocal", dt);
    return bin(c, WK_LX_DIV, cf(c, dt, 1.0), arg_as(c, 0, dt));
}
static const WkLExpr *lower_SQUARE(Lower *c) {
    const WkLExpr *x = arg_as(c, 0, c->out->dtype);
    return bin(c, WK_LX_MUL, x, x);
}

/* floor/ceil/round/trunc of an integer is the integer */
static const WkLExpr *rounding(Lower *c, WkLxOp op) {
    WkDType dt = c->out->dtype;
    const WkLExpr *x = arg_as(c, 0, dt);
    return wk_dtype_is_float(dt) ? un(c, op, x) : x;
}
static const WkLExpr *lower_FLOOR(Lower *c) { return rounding(c, WK_LX_FLOOR); }
static const WkLExpr *lower_CEIL(Lower *c) { return rounding(c, WK_LX_CEIL); }
static const WkLExpr *lower_ROUND(Lower *c) { return rounding(c, WK_LX_ROUND); }
static const WkLExpr *lower_TRUNC(Lower *c) { return rounding(c, WK_LX_TRUNC); }
static const WkLExpr *lower_FRAC(Lower *c) {
    const WkLExpr *x = arg_as(c, 0, c->out->dtype);
    return bin(c, WK_LX_SUB, x, un(c, WK_LX_TRUNC, x));
}

/* sign: (0 < x) - (x < 0); NaN gives 0 like torch's CPU kernel; bool is itself */
static const WkLExpr *lower_SIGN(Lower *c) {
    WkDType dt = c->out->dtype;
    const WkLExpr *x = arg_as(c, 0, dt);
    if (dt == WK_BOOL) return x;
    const WkLExpr *zero = wk_lower_const_i(c->L, dt, 0);
    const WkLExpr *pos = wk_lower_cast(c->L, dt, bin(c, WK_LX_LT, zero, x));
    const WkLExpr *neg = wk_lower_cast(c->L, dt, bin(c, WK_LX_LT, x, zero));
    return bin(c, WK_LX_SUB, pos, neg);
}

static const WkLExpr *lower_ATAN2(Lower *c) {
    WkDType dt = c->out->dtype;
    if (!wk_dtype_is_float(dt)) return fail("atan2", dt);
    return bin(c, WK_LX_ATAN2, arg_as(c, 0, dt), arg_as(c, 1, dt));
}

/* Integer division by zero raises in torch; a kernel cannot raise, so the
 * integral forms lower only for a constant non-zero divisor. */
static const WkLExpr *division(Lower *c, WkLxOp op, const char *name) {
    WkDType dt = c->out->dtype;
    if (dt == WK_BOOL) return fail(name, dt);
    const WkLExpr *a = arg_as(c, 0, dt), *b = arg_as(c, 1, dt);
    double bv;
    if (!wk_dtype_is_float(dt) && (!wk_lower_is_const(b, &bv) || bv == 0)) {
        wk_error_set("%s: integer division by a tensor (torch raises on zero divisors)", name);
        return NULL;
    }
    return bin(c, op, a, b);
}
static const WkLExpr *lower_FMOD(Lower *c) { return division(c, WK_LX_FMOD, "fmod"); }
static const WkLExpr *lower_REMAINDER(Lower *c) { return division(c, WK_LX_REM, "remainder"); }
static const WkLExpr *lower_FLOOR_DIVIDE(Lower *c) { return division(c, WK_LX_FLOORDIV, "floor_divide"); }

/* clamp is maximum then minimum, NaN-propagating like torch's kernel */
static const WkLExpr *lower_CLAMP(Lower *c) {
    WkDType dt = c->out->dtype;
    if (dt == WK_BOOL) return fail("clamp", dt);
    return bin(c, WK_LX_MIN, bin(c, WK_LX_MAX, arg_as(c, 0, dt), arg_as(c, 1, dt)), arg_as(c, 2, dt));
}
static const WkLExpr *lower_CLAMP_MIN(Lower *c) {
    WkDType dt = c->out->dtype;
    return bin(c, WK_LX_MAX, arg_as(c, 0, dt), arg_as(c, 1, dt));
}
static const WkLExpr *lower_CLAMP_MAX(Lower *c) {
    WkDType dt = c->out->dtype;
    return bin(c, WK_LX_MIN, arg_as(c, 0, dt), arg_as(c, 1, dt));
}

static const WkLExpr *lower_MASKED_FILL(Lower *c) {
    WkDType dt = c->out->dtype;
    return wk_lower_where(c->L, arg_as(c, 1, WK_BOOL), arg_as(c, 2, dt), arg_as(c, 0, dt));
}

static const WkLExpr *bitwise(Lower *c, WkLxOp op) {
    WkDType dt = c->out->dtype;
    if (c->node->ninputs == 1) return un(c, op, arg_as(c, 0, dt));
    return bin(c, op, arg_as(c, 0, dt), arg_as(c, 1, dt));
}
static const WkLExpr *lower_BITWISE_AND(Lower *c) { return bitwise(c, WK_LX_AND); }
static const WkLExpr *lower_BITWISE_OR(Lower *c) { return bitwise(c, WK_LX_OR); }
static const WkLExpr *lower_BITWISE_XOR(Lower *c) { return bitwise(c, WK_LX_XOR); }
static const WkLExpr *lower_BITWISE_NOT(Lower *c) { return bitwise(c, WK_LX_NOT); }

static const WkLExpr *logical(Lower *c, WkLxOp op) {
    if (c->node->ninputs == 1) return un(c, op, arg_as(c, 0, WK_BOOL));
    return bin(c, op, arg_as(c, 0, WK_BOOL), arg_as(c, 1, WK_BOOL));
}
static const WkLExpr *lower_LOGICAL_AND(Lower *c) { return logical(c, WK_LX_AND); }
static const WkLExpr *lower_LOGICAL_OR(Lower *c) { return logical(c, WK_LX_OR); }
static const WkLExpr *lower_LOGICAL_XOR(Lower *c) { return logical(c, WK_LX_XOR); }
static const WkLExpr *lower_LOGICAL_NOT(Lower *c) { return logical(c, WK_LX_NOT); }

static const WkLExpr *float_test(Lower *c, int nan, int pinf, int ninf) {
    const WkLExpr *x = load_arg(c, 0);
    WkLoopIR *L = c->L;
    if (!wk_dtype_is_float(x->dtype)) return wk_lower_const_i(L, WK_BOOL, 0);
    const WkLExpr *r = nan ? un(c, WK_LX_ISNAN, x) : NULL;
    if (pinf) {
        const WkLExpr *t = bin(c, WK_LX_EQ, x, cf(c, x->dtype, INFINITY));
        r = r ? bin(c, WK_LX_OR, r, t) : t;
    }
    if (ninf) {
        const WkLExpr *t = bin(c, WK_LX_EQ, x, cf(c, x->dtype, -INFINITY));
        r = r ? bin(c, WK_LX_OR, r, t) : t;
    }
    return r;
}
static const WkLExpr *lower_ISNAN(Lower *c) { return float_test(c, 1, 0, 0); }
static const WkLExpr *lower_ISINF(Lower *c) { return float_test(c, 0, 1, 1); }
static const WkLExpr *lower_ISPOSINF(Lower *c) { return float_test(c, 0, 1, 0); }
static const WkLExpr *lower_ISNEGINF(Lower *c) { return float_test(c, 0, 0, 1); }
static const WkLExpr *lower_ISFINITE(Lower *c) {
    return un(c, WK_LX_NOT, float_test(c, 1, 1, 1));
}

/* nan -> 0, +-inf -> the dtype's largest finite values */
static const WkLExpr *lower_NAN_TO_NUM(Lower *c) {
    WkDType dt = c->out->dtype;
    const WkLExpr *x = arg_as(c, 0, dt);
    if (!wk_dtype_is_float(dt)) return x;
    double big = dt == WK_F32 ? 3.4028234663852886e38 : dt == WK_F16 ? 65504.0 : dt == WK_BF16 ? 3.3895313892515355e38 : 1.7976931348623157e308;
    WkLoopIR *L = c->L;
    const WkLExpr *r = wk_lower_where(L, bin(c, WK_LX_EQ, x, cf(c, dt, INFINITY)), cf(c, dt, big), x);
    r = wk_lower_where(L, bin(c, WK_LX_EQ, x, cf(c, dt, -INFINITY)), cf(c, dt, -big), r);
    return wk_lower_where(L, un(c, WK_LX_ISNAN, x), cf(c, dt, 0.0), r);
}

/* ---- activations (floating inputs; parameters are scalar inputs) ------- */
static int gelu_inf_is_nan = 1;
void wk_lower_set_gelu_inf_is_nan(int is_nan) { gelu_inf_is_nan = is_nan != 0; }

/* 0.5 x (1 + erf(x / sqrt 2)); -inf gives NaN (inf * 0) as in torch. At
 * +inf the formula gives inf; torch's float32/bfloat16 vector kernel
 * (contiguous inputs, the usual case) gives NaN on AVX-512 builds, and we
 * follow the vector kernel of the machine (wk_lower_set_gelu_inf_is_nan). */
static const WkLExpr *lower_GELU(Lower *c) {
    WkDType dt = c->out->dtype;
    const WkLExpr *x = arg_as(c, 0, dt);
    const WkLExpr *e = un(c, WK_LX_ERF, bin(c, WK_LX_MUL, x, cf(c, dt, 0.70710678118654752440)));
    const WkLExpr *r = bin(c, WK_LX_MUL, bin(c, WK_LX_MUL, x, cf(c, dt, 0.5)), bin(c, WK_LX_ADD, cf(c, dt, 1.0), e));
    if ((dt != WK_F32 && dt != WK_BF16) || !gelu_inf_is_nan) return r;
    return wk_lower_where(c->L, bin(c, WK_LX_EQ, x, cf(c, dt, INFINITY)), cf(c, dt, NAN), r);
}
static const WkLExpr *lower_GELU_TANH(Lower *c) { /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    WkDType dt = c->out->dtype;
    const WkLExpr *x = arg_as(c, 0, dt);
    const WkLExpr *x3 = bin(c, WK_LX_MUL, bin(c, WK_LX_MUL, x, x), x);
    const WkLExpr *inner = bin(c, WK_LX_MUL, cf(c, dt, 0.79788456080286535588),
                               bin(c, WK_LX_ADD, x, bin(c, WK_LX_MUL, cf(c, dt, 0.044715), x3)));
    return bin(c, WK_LX_MUL, bin(c, WK_LX_MUL, x, cf(c, dt, 0.5)),
               bin(c, WK_LX_ADD, cf(c, dt, 1.0), un(c, WK_LX_TANH, inner)));
}
static const WkLExpr *lower_SILU(Lower *c) { /* x / (1 + exp(-x)) */
    WkDType dt = c->out->dtype;
    const WkLExpr *x = arg_as(c, 0, dt);
    return bin(c, WK_LX_DIV, x, bin(c, WK_LX_ADD, cf(c, dt, 1.0), un(c, WK_LX_EXP, un(c, WK_LX_NEG, x))));
}
static const WkLExpr *softplus_expr(Lower *c, const WkLExpr *x, const WkLExpr *beta, const WkLExpr *threshold) {
    WkDType dt = x->dtype;
    const WkLExpr *bx = bin(c, WK_LX_MUL, x, beta);
    const WkLExpr *soft = bin(c, WK_LX_DIV, un(c, WK_LX_LOG1P, un(c, WK_LX_EXP, bx)), beta);
    (void)dt;
    return wk_lower_where(c->L, bin(c, WK_LX_GT, bx, threshold), x, soft);
}
static const WkLExpr *lower_MISH(Lower *c) { /* x tanh(softplus(x)) */
    WkDType dt = c->out->dtype;
    const WkLExpr *x = arg_as(c, 0, dt);
    return bin(c, WK_LX_MUL, x, un(c, WK_LX_TANH, softplus_expr(c, x, cf(c, dt, 1.0), cf(c, dt, 20.0))));
}
static const WkLExpr *lower_SOFTPLUS(Lower *c) {
    WkDType dt = c->out->dtype;
    return softplus_expr(c, arg_as(c, 0, dt), arg_as(c, 1, dt), arg_as(c, 2, dt));
}
static const WkLExpr *lower_HARDTANH(Lower *c) {
    WkDType dt = c->out->dtype;
    return bin(c, WK_LX_MIN, bin(c, WK_LX_MAX, arg_as(c, 0, dt), arg_as(c, 1, dt)), arg_as(c, 2, dt));
}
static const WkLExpr *lower_RELU6(Lower *c) {
    WkDType dt = c->out->dtype;
    return bin(c, WK_LX_MIN, bin(c, WK_LX_MAX, arg_as(c, 0, dt), cf(c, dt, 0.0)), cf(c, dt, 6.0));
}
static const WkLExpr *lower_LEAKY_RELU(Lower *c) { /* x > 0 ? x : x * slope */
    WkDType dt = c->out->dtype;
    const WkLExpr *x = arg_as(c, 0, dt);
    return wk_lower_where(c->L, bin(c, WK_LX_GT, x, cf(c, dt, 0.0)), x, bin(c, WK_LX_MUL, x, arg_as(c, 1, dt)));
}
static const WkLExpr *lower_ELU(Lower *c) { /* x > 0 ? x : alpha * expm1(x) */
    WkDType dt = c->out->dtype;
    const WkLExpr *x = arg_as(c, 0, dt);
    return wk_lower_where(c->L, bin(c, WK_LX_GT, x, cf(c, dt, 0.0)), x,
                          bin(c, WK_LX_MUL, un(c, WK_LX_EXPM1, x), arg_as(c, 1, dt)));
}
static const WkLExpr *relu6_of(Lower *c, const WkLExpr *x) { /* min(max(x + 3, 0), 6) */
    WkDType dt = x->dtype;
    return bin(c, WK_LX_MIN, bin(c, WK_LX_MAX, bin(c, WK_LX_ADD, x, cf(c, dt, 3.0)), cf(c, dt, 0.0)), cf(c, dt, 6.0));
}
static const WkLExpr *lower_HARDSWISH(Lower *c) {
    WkDType dt = c->out->dtype;
    const WkLExpr *x = arg_as(c, 0, dt);
    return bin(c, WK_LX_DIV, bin(c, WK_LX_MUL, x, relu6_of(c, x)), cf(c, dt, 6.0));
}
static const WkLExpr *lower_HARDSIGMOID(Lower *c) {
    WkDType dt = c->out->dtype;
    return bin(c, WK_LX_DIV, relu6_of(c, arg_as(c, 0, dt)), cf(c, dt, 6.0));
}
/* torch: weight < 0.5 ? x + w (y - x) : y - (y - x)(1 - w) */
static const WkLExpr *lower_LERP(Lower *c) {
    WkDType dt = c->out->dtype;
    const WkLExpr *x = arg_as(c, 0, dt), *y = arg_as(c, 1, dt), *w = arg_as(c, 2, dt);
    const WkLExpr *d = bin(c, WK_LX_SUB, y, x);
    const WkLExpr *lo = bin(c, WK_LX_ADD, x, bin(c, WK_LX_MUL, w, d));
    const WkLExpr *hi = bin(c, WK_LX_SUB, y, bin(c, WK_LX_MUL, d, bin(c, WK_LX_SUB, cf(c, dt, 1.0), w)));
    return wk_lower_where(c->L, bin(c, WK_LX_LT, un(c, WK_LX_ABS, w), cf(c, dt, 0.5)), lo, hi);
}
static const WkLExpr *lower_ADDCMUL(Lower *c) {
    WkDType dt = c->out->dtype;
    if (dt == WK_BOOL) return fail("addcmul", dt);
    return bin(c, WK_LX_ADD, arg_as(c, 0, dt), bin(c, WK_LX_MUL, arg_as(c, 1, dt), arg_as(c, 2, dt)));
}
static const WkLExpr *lower_ADDCDIV(Lower *c) {
    WkDType dt = c->out->dtype;
    if (!wk_dtype_is_float(dt)) return fail("addcdiv", dt);
    return bin(c, WK_LX_ADD, arg_as(c, 0, dt), bin(c, WK_LX_DIV, arg_as(c, 1, dt), arg_as(c, 2, dt)));
}

/* ---- reductions -------------------------------------------------------- */
/* The reduced dims of the node's input (attrs.dims; none listed = all). */
static void reduced_dims(Lower *c, int ndim, int *reduced) {
    const WkAttrs *at = &c->node->attrs;
    for (int d = 0; d < ndim; d++) reduced[d] = at->ndims == 0;
    for (int k = 0; k < at->ndims; k++)
        if (at->dims[k] >= 0 && at->dims[k] < ndim) reduced[at->dims[k]] = 1;
}

/* The input's index with reduced dims read through r vars (numbered in dim
 * order) and kept dims through the output's i vars. */
static int reduce_index(Lower *c, const WkLBuf *in, const int *reduced, const WkSym **idx,
                        int64_t *red_sizes, int *nred) {
    WkLoopIR *L = c->L;
    int o = 0;
    *nred = 0;
    for (int d = 0; d < in->ndim; d++) {
        if (reduced[d]) {
            red_sizes[*nred] = in->sizes[d];
            idx[d] = in->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : L->rvar[*nred];
            (*nred)++;
            if (c->node->attrs.keepdim) o++;
        } else {
            idx[d] = in->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : c->canon[o];
            o++;
        }
    }
    if (o != c->out->ndim) {
        wk_error_set("reduction: output rank %d does not match the graph's %d", o, c->out->ndim);
        return -1;
    }
    return 0;
}

static const WkLExpr *reduce(Lower *c, WkRedOp rop) {
    WkLoopIR *L = c->L;
    int vid = L->value_buf[c->node->inputs[0]];
    const WkLBuf *in = &L->bufs[vid];
    WkDType out = c->out->dtype;
    int reduced[WK_MAX_DIMS];
    const WkSym *idx[WK_MAX_DIMS];
    int64_t red_sizes[WK_MAX_DIMS];
    int nred;
    reduced_dims(c, in->ndim, reduced);
    if (reduce_index(c, in, reduced, idx, red_sizes, &nred) < 0) return NULL;
    const WkLExpr *x = wk_lower_load(L, vid, in->ndim, idx);
    WkDType acc = out;
    if (rop == WK_RED_SUM || rop == WK_RED_MEAN || rop == WK_RED_PROD) {
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
static const WkLExpr *lower_AMIN(Lower *c) { return reduce(c, WK_RED_MIN); }
static const WkLExpr *lower_PROD(Lower *c) { return reduce(c, WK_RED_PROD); }

/* any/all: max/min of x != 0 as bool (uint8 inputs give uint8 0/1) */
static const WkLExpr *any_all(Lower *c, WkRedOp rop) {
    WkLoopIR *L = c->L;
    int vid = L->value_buf[c->node->inputs[0]];
    const WkLBuf *in = &L->bufs[vid];
    int reduced[WK_MAX_DIMS], nred;
    const WkSym *idx[WK_MAX_DIMS];
    int64_t red_sizes[WK_MAX_DIMS];
    reduced_dims(c, in->ndim, reduced);
    if (reduce_index(c, in, reduced, idx, red_sizes, &nred) < 0) return NULL;
    const WkLExpr *x = wk_lower_cast(L, WK_BOOL, wk_lower_load(L, vid, in->ndim, idx));
    return wk_lower_reduce(L, rop, c->out->dtype, x, nred, red_sizes);
}
static const WkLExpr *lower_ANY(Lower *c) { return any_all(c, WK_RED_MAX); }
static const WkLExpr *lower_ALL(Lower *c) { return any_all(c, WK_RED_MIN); }

/* Statistics as decompositions: the reduction runs into an internal buffer
 * over the input's index space (keepdim), and the node's own buffer reads
 * it back at its output index. `x` is the input loaded at the full
 * (keepdim) index `full` over i vars; the returned expression of the
 * statistic is over the same index. */
typedef struct {
    int ndim;
    int64_t sizes[WK_MAX_DIMS];
    int reduced[WK_MAX_DIMS];
    const WkLExpr *x;              /* input at the full index */
    int64_t count;                 /* elements per reduction */
} Stat;

static int stat_init(Lower *c, Stat *st) {
    WkLoopIR *L = c->L;
    int vid = L->value_buf[c->node->inputs[0]];
    const WkLBuf *in = &L->bufs[vid];
    const WkSym *idx[WK_MAX_DIMS];
    st->ndim = in->ndim;
    reduced_dims(c, in->ndim, st->reduced);
    st->count = 1;
    for (int d = 0; d < in->ndim; d++) {
        st->sizes[d] = in->sizes[d];
        idx[d] = in->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : L->ivar[d];
        if (st->reduced[d]) st->count *= in->sizes[d];
    }
    st->x = wk_lower_load(L, vid, in->ndim, idx);
    return 0;
}

static const WkLExpr *stat_reduce(Lower *c, const Stat *st, const WkLExpr *e, WkRedOp rop, WkDType out) {
    return wk_lower_reduce_dims(c->L, c->node_index, e, st->ndim, st->sizes, st->reduced, rop, out);
}

/* The node's result: a statistic expression over the full index, read at
 * the output index (reduced dims -> 0; dropped unless keepdim). */
static const WkLExpr *stat_result(Lower *c, const Stat *st, const WkLExpr *e) {
    WkLoopIR *L = c->L;
    const WkSym *iv[WK_MAX_DIMS];
    int o = 0;
    for (int d = 0; d < st->ndim; d++) {
        if (st->reduced[d]) {
            iv[d] = wk_sym_const(L->syms, 0);
            if (c->node->attrs.keepdim) o++;
        } else {
            iv[d] = c->canon[o++];
        }
    }
    return wk_lower_subst(L, e, iv, st->ndim, NULL, 0, NULL, NULL);
}

/* var = sum((x - mean)^2) / (N - correction), two passes in float64 */
static const WkLExpr *variance(Lower *c, int take_sqrt) {
    Stat st;
    if (stat_init(c, &st) < 0) return NULL;
    WkDType dt = c->out->dtype, acc = WK_F64;
    const WkAttrs *at = &c->node->attrs;
    double corr = at->ivalue ? at->fvalue : 1.0;
    const WkLExpr *x = wk_lower_cast(c->L, acc, st.x);
    const WkLExpr *mean = stat_reduce(c, &st, x, WK_RED_MEAN, acc);
    const WkLExpr *d = bin(c, WK_LX_SUB, x, mean);
    const WkLExpr *ss = stat_reduce(c, &st, bin(c, WK_LX_MUL, d, d), WK_RED_SUM, acc);
    double denom = (double)st.count - corr;
    if (denom < 0) denom = 0;
    const WkLExpr *v = bin(c, WK_LX_DIV, ss, cf(c, acc, denom));
    if (take_sqrt) v = un(c, WK_LX_SQRT, v);
    return stat_result(c, &st, wk_lower_cast(c->L, dt, v));
}
static const WkLExpr *lower_VAR(Lower *c) { return variance(c, 0); }
static const WkLExpr *lower_STD(Lower *c) { return variance(c, 1); }

/* argmax = the first index where x equals the max (or is NaN, which the
 * NaN-propagating max then is): min over r of (hit ? flat r : count) */
static const WkLExpr *arg_extreme(Lower *c, WkRedOp rop) {
    Stat st;
    if (stat_init(c, &st) < 0) return NULL;
    WkLoopIR *L = c->L;
    const WkLExpr *x = st.x;
    const WkLExpr *m = stat_reduce(c, &st, x, rop, x->dtype);
    const WkLExpr *hit = bin(c, WK_LX_EQ, x, m);
    if (wk_dtype_is_float(x->dtype)) hit = bin(c, WK_LX_OR, hit, un(c, WK_LX_ISNAN, x));
    /* the flat position within the reduced dims, row-major */
    const WkSym *pos = wk_sym_const(L->syms, 0);
    for (int d = 0; d < st.ndim; d++)
        if (st.reduced[d])
            pos = wk_sym_add(L->syms, wk_sym_mul(L->syms, pos, wk_sym_const(L->syms, st.sizes[d])),
                             st.sizes[d] == 1 ? wk_sym_const(L->syms, 0) : L->ivar[d]);
    const WkLExpr *cand = wk_lower_where(L, hit, wk_lower_index(L, pos), wk_lower_const_i(L, WK_I64, st.count));
    const WkLExpr *first = stat_reduce(c, &st, cand, WK_RED_MIN, WK_I64);
    return stat_result(c, &st, first);
}
static const WkLExpr *lower_ARGMAX(Lower *c) { return arg_extreme(c, WK_RED_MAX); }
static const WkLExpr *lower_ARGMIN(Lower *c) { return arg_extreme(c, WK_RED_MIN); }

/* Internal buffers of 16-bit float results are float32 (as torch's
 * kernels accumulate), so only the node's own result is rounded. */
static WkDType compute_dtype(WkDType dt) { return dt == WK_F16 || dt == WK_BF16 ? WK_F32 : dt; }

/* logsumexp = m + log(sum(exp(x - m))), m = max with infinities taken as 0 */
static const WkLExpr *lower_LOGSUMEXP(Lower *c) {
    Stat st;
    if (stat_init(c, &st) < 0) return NULL;
    WkDType dt = compute_dtype(c->out->dtype);
    const WkLExpr *x = wk_lower_cast(c->L, dt, st.x);
    const WkLExpr *m = stat_reduce(c, &st, x, WK_RED_MAX, dt);
    const WkLExpr *inf = bin(c, WK_LX_EQ, un(c, WK_LX_ABS, m), cf(c, dt, INFINITY));
    m = wk_lower_where(c->L, inf, cf(c, dt, 0.0), m);
    const WkLExpr *s = stat_reduce(c, &st, un(c, WK_LX_EXP, bin(c, WK_LX_SUB, x, m)), WK_RED_SUM, dt);
    return stat_result(c, &st, wk_lower_cast(c->L, c->out->dtype, bin(c, WK_LX_ADD, un(c, WK_LX_LOG, s), m)));
}

/* softmax over attrs.dims[0]: exp(x - max) / sum(exp(x - max)) */
static const WkLExpr *softmax(Lower *c, int log) {
    Stat st;
    if (stat_init(c, &st) < 0) return NULL;
    WkDType dt = compute_dtype(c->out->dtype);
    /* dtype= converts first */
    const WkLExpr *x = wk_lower_cast(c->L, dt, wk_lower_cast(c->L, c->out->dtype, st.x));
    const WkLExpr *m = stat_reduce(c, &st, x, WK_RED_MAX, dt);
    /* a row of -inf has max -inf: torch gives NaN (exp(nan)) there, as do we */
    const WkLExpr *sh = bin(c, WK_LX_SUB, x, m);
    const WkLExpr *e = un(c, WK_LX_EXP, sh);
    const WkLExpr *s = stat_reduce(c, &st, e, WK_RED_SUM, dt);
    /* the output has the input's shape: the full index is the output's */
    return log ? bin(c, WK_LX_SUB, sh, un(c, WK_LX_LOG, s)) : bin(c, WK_LX_DIV, e, s);
}
static const WkLExpr *lower_SOFTMAX(Lower *c) { return softmax(c, 0); }
static const WkLExpr *lower_LOG_SOFTMAX(Lower *c) { return softmax(c, 1); }

/* layer_norm over attrs.dims: (x - mean) / sqrt(var + eps) * weight + bias,
 * two passes (the mean, then the mean square of x - mean). float64 keeps
 * its statistics in float64. float32 (and the 16-bit floats, computed in
 * float32) compute in float32 as torch's CPU kernel does (float moments):
 * each mean is a float32 reduction of float32 values widened to float64,
 * which the C backend sums in float lanes per 256-element block and adds
 * the blocks in double (as accurate as a cascade sum, at 8 lanes); the
 * normalisation is float32 arithmetic too. (The statistics in float64
 * throughout, at 4 lanes, made the kernel compute-bound on one thread.) */
static const WkLExpr *lower_LAYER_NORM(Lower *c) {
    Stat st;
    if (stat_init(c, &st) < 0) return NULL;
    WkDType dt = compute_dtype(c->out->dtype);
    WkDType acc = dt == WK_F32 ? WK_F32 : WK_F64; /* the statistics' dtype */
    const WkLExpr *x = wk_lower_cast(c->L, acc, st.x);
    const WkLExpr *mean = stat_reduce(c, &st, wk_lower_cast(c->L, WK_F64, x), WK_RED_MEAN, acc);
    const WkLExpr *d = bin(c, WK_LX_SUB, x, mean);
    const WkLExpr *var = stat_reduce(c, &st, wk_lower_cast(c->L, WK_F64, bin(c, WK_LX_MUL, d, d)), WK_RED_MEAN, acc);
    const WkLExpr *rstd = bin(c, WK_LX_DIV, cf(c, acc, 1.0),
                              un(c, WK_LX_SQRT, bin(c, WK_LX_ADD, var, cf(c, acc, c->node->attrs.fvalue))));
    const WkLExpr *y = wk_lower_cast(c->L, dt, bin(c, WK_LX_MUL, d, rstd));
    return bin(c, WK_LX_ADD, bin(c, WK_LX_MUL, y, arg_as(c, 1, dt)), arg_as(c, 2, dt));
}

/* The index expression of dim d clamped into [0, size - 1]: loads that
 * WHERE discards still read inside their buffer. */
static const WkSym *clamped(WkLoopIR *L, const WkSym *i, int64_t shift, int64_t size) {
    const WkSym *j = wk_sym_add(L->syms, i, wk_sym_const(L->syms, -shift));
    return wk_sym_max(L->syms, wk_sym_const(L->syms, 0), wk_sym_min(L->syms, j, wk_sym_const(L->syms, size - 1)));
}

static const WkLExpr *index_lt(WkLoopIR *L, const WkSym *i, int64_t bound) {
    return wk_lower_binary(L, WK_LX_LT, wk_lower_index(L, i), wk_lower_const_i(L, WK_I64, bound));
}

/* CAT along dim: WHERE(i_dim < end of input 0, input 0, WHERE(... input 1 ...)) */
static const WkLExpr *lower_CAT(Lower *c) {
    WkLoopIR *L = c->L;
    int nd = c->out->ndim;
    int dim = (int)(c->node->attrs.ints[0] < 0 ? c->node->attrs.ints[0] + nd : c->node->attrs.ints[0]);
    WkDType dt = c->out->dtype;
    const WkLExpr *e = NULL;
    int64_t start[64], *starts = c->node->ninputs <= 64 ? start : wk_xcalloc((size_t)c->node->ninputs, sizeof *starts);
    int64_t at = 0;
    for (int k = 0; k < c->node->ninputs; k++) {
        starts[k] = at;
        at += L->bufs[L->value_buf[c->node->inputs[k]]].sizes[dim];
    }
    for (int k = c->node->ninputs - 1; k >= 0; k--) {
        int bid = L->value_buf[c->node->inputs[k]];
        const WkLBuf *b = &L->bufs[bid];
        if (b->sizes[dim] == 0) continue; /* contributes nothing */
        const WkSym *idx[WK_MAX_DIMS];
        for (int d = 0; d < nd; d++)
            idx[d] = b->sizes[d] == 1 ? wk_sym_const(L->syms, 0)
                     : d == dim       ? clamped(L, c->canon[d], starts[k], b->sizes[d])
                                      : c->canon[d];
        const WkLExpr *v = wk_lower_cast(L, dt, wk_lower_load(L, bid, b->ndim, idx));
        e = e ? wk_lower_where(L, index_lt(L, c->canon[dim], starts[k] + b->sizes[dim]), v, e) : v;
    }
    if (starts != start) free(starts);
    return e ? e : wk_lower_const_i(L, dt, 0); /* every input empty: nothing is read */
}

/* PAD: input 0 where every dim's index falls inside it, else the value */
static const WkLExpr *lower_PAD(Lower *c) {
    WkLoopIR *L = c->L;
    int bid = L->value_buf[c->node->inputs[0]];
    const WkLBuf *b = &L->bufs[bid];
    WkDType dt = c->out->dtype;
    const WkLExpr *value = arg_as(c, 1, dt);
    if (b->numel == 0) return value;
    const WkSym *idx[WK_MAX_DIMS];
    const WkLExpr *inside = NULL;
    for (int d = 0; d < b->ndim; d++) {
        int64_t lo = c->node->attrs.ints[2 * d], hi = c->node->attrs.ints[2 * d + 1];
        idx[d] = b->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : clamped(L, c->canon[d], lo, b->sizes[d]);
        if (lo == 0 && hi == 0) continue; /* this dim is never outside */
        /* lo <= i < lo + size, as two comparisons of the output index */
        const WkLExpr *ge = wk_lower_unary(L, WK_LX_NOT, index_lt(L, c->canon[d], lo));
        const WkLExpr *lt = index_lt(L, c->canon[d], lo + b->sizes[d]);
        const WkLExpr *in_d = wk_lower_binary(L, WK_LX_AND, ge, lt);
        inside = inside ? wk_lower_binary(L, WK_LX_AND, inside, in_d) : in_d;
    }
    const WkLExpr *v = wk_lower_cast(L, dt, wk_lower_load(L, bid, b->ndim, idx));
    return inside ? wk_lower_where(L, inside, v, value) : v;
}

/* VIEW: a load of the base at the remapped index (graph.h, WkViewMap): no
 * copy; the schedule inlines it into its readers like any pointwise body. */
static const WkLExpr *lower_VIEW(Lower *c) {
    WkLoopIR *L = c->L;
    int bid = L->value_buf[c->node->inputs[0]];
    const WkLBuf *b = &L->bufs[bid];
    int nd;
    const int64_t *vsizes, *vstrides;
    int64_t offset;
    if (wk_view_attrs(&c->node->attrs, &nd, &vsizes, &vstrides, &offset) < 0) return NULL;
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) numel *= vsizes[d];
    if (numel == 0) return wk_lower_const_i(L, c->out->dtype, 0); /* never read */
    WkViewMap m;
    if (wk_view_map(b->ndim, b->sizes, b->strides, nd, vsizes, vstrides, offset, &m) < 0) return NULL;
    const WkSym *idx[WK_MAX_DIMS], *zero = wk_sym_const(L->syms, 0);
    if (m.affine) {
        for (int k = 0; k < b->ndim; k++) idx[k] = wk_sym_const(L->syms, b->sizes[k] == 1 ? 0 : m.base_off[k]);
        for (int d = 0; d < nd; d++)
            if (m.dim_of[d] >= 0) {
                int k = m.dim_of[d];
                idx[k] = wk_sym_add(L->syms, idx[k], wk_sym_mul(L->syms, c->canon[d], wk_sym_const(L->syms, m.mult[d])));
            }
    } else {
        const WkSym *lin = wk_sym_const(L->syms, offset);
        for (int d = 0; d < nd; d++)
            if (vsizes[d] > 1)
                lin = wk_sym_add(L->syms, lin, wk_sym_mul(L->syms, c->canon[d], wk_sym_const(L->syms, vstrides[d])));
        int outer = -1; /* the dim of the largest stride needs no modulo */
        for (int k = 0; k < b->ndim; k++)
            if (b->sizes[k] > 1 && (outer < 0 || b->strides[k] > b->strides[outer])) outer = k;
        for (int k = 0; k < b->ndim; k++) {
            if (b->sizes[k] == 1) {
                idx[k] = zero;
                continue;
            }
            const WkSym *q = wk_sym_floordiv(L->syms, lin, wk_sym_const(L->syms, b->strides[k]));
            idx[k] = k == outer ? q : wk_sym_mod(L->syms, q, wk_sym_const(L->syms, b->sizes[k]));
        }
    }
    return wk_lower_load(L, bid, b->ndim, idx);
}

/* ---- indexing (ops.def note 11): indirect loads ----------------------- */
static int64_t out_numel(const Lower *c) {
    int64_t n = 1;
    for (int d = 0; d < c->out->ndim; d++) {
        int64_t s = 0;
        wk_sym_is_const(c->out->sizes[d], &s);
        n *= s;
    }
    return n;
}

/* Index tensor `k` of the node loaded at output dims first.. (right-aligned
 * broadcast over nb dims), as a checked int64 index into a dim of `size`. */
static const WkSym *index_var(Lower *c, int k, int first, int nb, int64_t size, int wrap) {
    WkLoopIR *L = c->L;
    int ib = L->value_buf[c->node->inputs[k]];
    const WkLBuf *b = &L->bufs[ib];
    const WkSym *idx[WK_MAX_DIMS];
    for (int d = 0; d < b->ndim; d++)
        idx[d] = b->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : c->canon[first + nb - b->ndim + d];
    const WkLExpr *v = b->body && b->body->op == WK_LX_CONST ? b->body : wk_lower_load(L, ib, b->ndim, idx);
    return wk_lower_indirect(L, wk_lower_checked_index(L, v, size, wrap));
}

/* Indexing an empty tensor into a non-empty result: BOUND against 0 fails
 * for every element (the kernel reports it), and no load is made, since a
 * clamped index would still read outside an empty buffer. */
static const WkLExpr *empty_table(Lower *c, const WkSym *checked) {
    return wk_lower_cast(c->L, c->out->dtype, wk_lower_xvar(c->L, checked->var));
}

static const WkLExpr *lower_INDEX(Lower *c) {
    WkLoopIR *L = c->L;
    const WkNode *n = c->node;
    int k = n->ninputs - 1;
    const int64_t *dims = n->attrs.ints + 1;
    if (out_numel(c) == 0) return wk_lower_const_i(L, c->out->dtype, 0); /* never read */
    int xb = L->value_buf[n->inputs[0]];
    const WkLBuf *x = &L->bufs[xb];
    int nb = 0;
    for (int j = 1; j <= k; j++) {
        int r = L->bufs[L->value_buf[n->inputs[j]]].ndim;
        nb = r > nb ? r : nb;
    }
    int adjacent = dims[k - 1] - dims[0] == k - 1;
    int first = adjacent ? (int)dims[0] : 0; /* where B sits in the output */
    const WkSym *xidx[WK_MAX_DIMS];
    char indexed[WK_MAX_DIMS] = {0};
    if (x->numel == 0) /* an indexed dim of size 0: every index is out of range; load nothing */
        return empty_table(c, index_var(c, 1, first, nb, 0, 0));
    for (int j = 0; j < k; j++) {
        xidx[dims[j]] = index_var(c, 1 + j, first, nb, x->sizes[dims[j]], n->attrs.ints[0] != 0);
        indexed[dims[j]] = 1;
    }
    int o = adjacent ? 0 : nb;
    for (int d = 0; d < x->ndim; d++) {
        if (adjacent && d == first) o += nb;
        if (indexed[d]) continue;
        xidx[d] = x->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : c->canon[o];
        o++;
    }
    return wk_lower_load(L, xb, x->ndim, xidx);
}

static const WkLExpr *lower_GATHER(Lower *c) {
    WkLoopIR *L = c->L;
    if (out_numel(c) == 0) return wk_lower_const_i(L, c->out->dtype, 0);
    int xb = L->value_buf[c->node->inputs[0]];
    const WkLBuf *x = &L->bufs[xb];
    int dim = (int)(c->node->attrs.ints[0] < 0 ? c->node->attrs.ints[0] + x->ndim : c->node->attrs.ints[0]);
    if (x->numel == 0) return empty_table(c, index_var(c, 1, 0, c->out->ndim, 0, 0));
    const WkSym *xidx[WK_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        xidx[d] = d == dim ? index_var(c, 1, 0, c->out->ndim, x->sizes[dim], 0)
                  : x->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : c->canon[d];
    return wk_lower_load(L, xb, x->ndim, xidx);
}

/* one_hot: (index == class) as int64; the index is checked like a load's */
static const WkLExpr *lower_ONE_HOT(Lower *c) {
    WkLoopIR *L = c->L;
    int nd = c->out->ndim;
    int64_t nc = c->node->attrs.ints[0];
    if (out_numel(c) == 0) return wk_lower_const_i(L, WK_I64, 0);
    int ib = L->value_buf[c->node->inputs[0]];
    const WkLBuf *b = &L->bufs[ib];
    const WkSym *idx[WK_MAX_DIMS];
    for (int d = 0; d < b->ndim; d++) idx[d] = b->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : c->canon[d];
    const WkLExpr *v = wk_lower_checked_index(L, wk_lower_load(L, ib, b->ndim, idx), nc, 0);
    return wk_lower_cast(L, WK_I64, bin(c, WK_LX_EQ, v, wk_lower_index(L, c->canon[nd - 1])));
}

/* SCATTER (ops.def note 13): output element o reduces over j < n =
 * index.size(dim) with p = o but p[dim] = j (valid where o fits the index's
 * extent outside dim): hit(j) = index[p] == o[dim]. scatter_add adds the
 * sources of the hits to x[o]; scatter takes the source of the last hit
 * (the largest j, as eager's sequential loop leaves it), else x[o]. Every
 * index element is loaded, BOUND-checked, by some output element. */
static const WkLExpr *lower_SCATTER(Lower *c) {
    WkLoopIR *L = c->L;
    const WkNode *n = c->node;
    WkDType dt = c->out->dtype;
    int nd = c->out->ndim;
    int dim = (int)(n->attrs.ints[0] < 0 ? n->attrs.ints[0] + nd : n->attrs.ints[0]);
    int add = n->attrs.ints[1] != 0, wrap = n->attrs.ints[2] != 0;
    if (out_numel(c) == 0) return wk_lower_const_i(L, dt, 0);
    const WkLExpr *xv = arg_as(c, 0, dt);
    int ib = L->value_buf[n->inputs[1]], sb = L->value_buf[n->inputs[2]];
    const WkLBuf *ix = &L->bufs[ib], *sr = &L->bufs[sb];
    int scalar_src = sr->body && sr->body->op == WK_LX_CONST;
    if (ix->numel == 0) return xv;
    int64_t count = ix->sizes[dim], sizes[WK_MAX_DIMS];
    int reduced[WK_MAX_DIMS] = {0};
    const WkSym *p[WK_MAX_DIMS], *j = count == 1 ? wk_sym_const(L->syms, 0) : L->ivar[nd];
    const WkLExpr *valid = NULL;
    for (int d = 0; d < nd; d++) {
        int64_t od = 0;
        wk_sym_is_const(c->out->sizes[d], &od);
        sizes[d] = od;
        if (d == dim) {
            p[d] = j;
        } else if (ix->sizes[d] < od) { /* outside the index's extent: no update */
            p[d] = ix->sizes[d] == 1 ? wk_sym_const(L->syms, 0)
                                      : wk_sym_min(L->syms, c->canon[d], wk_sym_const(L->syms, ix->sizes[d] - 1));
            const WkLExpr *in_d = index_lt(L, c->canon[d], ix->sizes[d]);
            valid = valid ? bin(c, WK_LX_AND, valid, in_d) : in_d;
        } else {
            p[d] = c->canon[d];
        }
    }
    sizes[nd] = count;
    reduced[nd] = 1;
    const WkSym *pi[WK_MAX_DIMS];
    for (int d = 0; d < nd; d++) pi[d] = ix->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : p[d];
    const WkLExpr *target = wk_lower_checked_index(L, wk_lower_load(L, ib, nd, pi), sizes[dim], wrap);
    const WkLExpr *hit = bin(c, WK_LX_EQ, target, wk_lower_index(L, c->canon[dim]));
    if (valid) hit = bin(c, WK_LX_AND, hit, valid);
    if (count == 1) { /* one candidate per output element (a loss's one-hot gradient):
                         pointwise, so it inlines into its consumers instead of
                         materialising a reduction over one element */
        const WkSym *ps[WK_MAX_DIMS];
        for (int d = 0; d < nd; d++) ps[d] = sr->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : p[d];
        const WkLExpr *v = scalar_src ? wk_lower_cast(L, dt, sr->body)
                                      : wk_lower_cast(L, dt, wk_lower_load(L, sb, nd, ps));
        if (!add) return wk_lower_where(L, hit, v, xv);
        WkDType acc = wk_dtype_is_float(dt) ? WK_F64 : WK_I64;
        const WkLExpr *contrib = wk_lower_where(L, hit, wk_lower_cast(L, acc, v), wk_lower_const_i(L, acc, 0));
        return wk_lower_cast(L, dt, bin(c, WK_LX_ADD, wk_lower_cast(L, acc, xv), contrib));
    }
    if (add) {
        WkDType acc = wk_dtype_is_float(dt) ? WK_F64 : WK_I64;
        const WkSym *ps[WK_MAX_DIMS];
        for (int d = 0; d < nd; d++) ps[d] = sr->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : p[d];
        const WkLExpr *v = wk_lower_cast(L, acc, wk_lower_cast(L, dt, wk_lower_load(L, sb, nd, ps)));
        const WkLExpr *contrib = wk_lower_where(L, hit, v, wk_lower_const_i(L, acc, 0));
        const WkLExpr *sum = wk_lower_reduce_dims(L, c->node_index, contrib, nd + 1, sizes, reduced, WK_RED_SUM, acc);
        return wk_lower_cast(L, dt, bin(c, WK_LX_ADD, wk_lower_cast(L, acc, xv), sum));
    }
    const WkLExpr *cand = wk_lower_where(L, hit, wk_lower_index(L, j), wk_lower_const_i(L, WK_I64, -1));
    const WkLExpr *last = wk_lower_reduce_dims(L, c->node_index, cand, nd + 1, sizes, reduced, WK_RED_MAX, WK_I64);
    const WkLExpr *found = bin(c, WK_LX_GE, last, wk_lower_const_i(L, WK_I64, 0));
    const WkLExpr *v;
    if (scalar_src) {
        v = wk_lower_cast(L, dt, sr->body);
    } else { /* the source at p with p[dim] = the last hit (0 when none: then unused) */
        const WkLExpr *at = wk_lower_where(L, found, last, wk_lower_const_i(L, WK_I64, 0));
        const WkSym *ps[WK_MAX_DIMS];
        for (int d = 0; d < nd; d++)
            ps[d] = d == dim ? wk_lower_indirect(L, at) : sr->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : p[d];
        v = wk_lower_cast(L, dt, wk_lower_load(L, sb, nd, ps));
    }
    return wk_lower_where(L, found, v, xv);
}

/* ---- creation ops (ops.def note 12) ------------------------------------ */
/* arange: start + step * i in eager's accumulate type (float64 for float32
 * and float64, float32 for 16-bit floats, int64 for integers) */
static const WkLExpr *lower_ARANGE(Lower *c) {
    WkDType dt = c->out->dtype;
    WkDType acc = wk_dtype_is_float(dt) ? (dt == WK_F16 || dt == WK_BF16 ? WK_F32 : WK_F64) : WK_I64;
    const WkLExpr *i = wk_lower_cast(c->L, acc, wk_lower_index(c->L, c->canon[0]));
    const WkLExpr *start = arg_as(c, 0, acc), *step = arg_as(c, 1, acc);
    return wk_lower_cast(c->L, dt, bin(c, WK_LX_ADD, start, bin(c, WK_LX_MUL, step, i)));
}

static const WkLExpr *lower_FULL(Lower *c) {
    const WkLExpr *v = arg_as(c, 0, c->out->dtype);
    if (v->op != WK_LX_CONST) { /* a float out of the integer range: C's conversion is undefined */
        wk_error_set("full: value cannot be converted to type %s without overflow", wk_dtype_name(c->out->dtype));
        return NULL;
    }
    return v;
}

/* tril/triu: keep element (i, j) of the last two dims when j - i <= k (tril)
 * or j - i >= k (triu), else 0 */
static const WkLExpr *triangle(Lower *c, WkLxOp keep) {
    WkLoopIR *L = c->L;
    int nd = c->out->ndim;
    const WkLExpr *x = arg_as(c, 0, c->out->dtype);
    const WkLExpr *row = wk_lower_index(L, c->canon[nd - 2]), *col = wk_lower_index(L, c->canon[nd - 1]);
    /* a diagonal beyond the matrix keeps all or nothing: clamped, so that
     * row + k cannot overflow */
    int64_t k = c->node->attrs.ints[0], span = 1;
    for (int d = nd - 2; d < nd; d++) {
        int64_t s = 0;
        wk_sym_is_const(c->out->sizes[d], &s);
        span += s;
    }
    k = k > span ? span : k < -span ? -span : k;
    const WkLExpr *lim = bin(c, WK_LX_ADD, row, wk_lower_const_i(L, WK_I64, k));
    return wk_lower_where(L, bin(c, keep, col, lim), x, wk_lower_const_i(L, c->out->dtype, 0));
}
static const WkLExpr *lower_TRIL(Lower *c) { return triangle(c, WK_LX_LE); }
static const WkLExpr *lower_TRIU(Lower *c) { return triangle(c, WK_LX_GE); }

static const LowerFn lowerings[WK_NOPS] = {
#undef WK_OP
#define WK_OP(name, kind, arity, shape, dtype, sig, torch) [WK_OP_##name] = lower_##name,
#include "../graph/ops.def"
#undef WK_OP
};

/* ---- buffers ----------------------------------------------------------- */
static int new_buf(WkLoopIR *L) {
    if (L->nbufs == L->bufs_cap) {
        L->bufs_cap = L->bufs_cap ? 2 * L->bufs_cap : 16;
        L->bufs = wk_xrealloc(L->bufs, sizeof *L->bufs * (size_t)L->bufs_cap);
    }
    memset(&L->bufs[L->nbufs], 0, sizeof *L->bufs);
    return L->nbufs++;
}

static void contiguous(WkLBuf *b) {
    int64_t st = 1;
    b->numel = 1;
    for (int d = b->ndim - 1; d >= 0; d--) {
        b->strides[d] = st;
        st *= b->sizes[d] > 1 ? b->sizes[d] : 1;
        b->numel *= b->sizes[d];
    }
}

int wk_lower_add_buffer(WkLoopIR *L, int node, WkLBufKind kind, WkDType dt, int ndim,
                        const int64_t *sizes, const WkLExpr *body) {
    int id = new_buf(L);
    WkLBuf *b = &L->bufs[id];
    b->kind = kind;
    b->value = -1;
    b->node = node;
    b->op = (WkOp)-1;
    b->dtype = dt;
    b->ndim = ndim;
    for (int d = 0; d < ndim; d++) b->sizes[d] = sizes[d];
    contiguous(b);
    b->body = body;
    b->input_index = -1;
    return id;
}

const WkLExpr *wk_lower_reduce_dims(WkLoopIR *L, int node, const WkLExpr *e, int ndim,
                                    const int64_t *sizes, const int *reduced, WkRedOp rop,
                                    WkDType out) {
    const WkSym *iv[WK_MAX_DIMS], *at[WK_MAX_DIMS];
    int64_t red_sizes[WK_MAX_DIMS], ksizes[WK_MAX_DIMS];
    int nred = 0;
    for (int d = 0; d < ndim; d++) {
        if (reduced[d]) {
            iv[d] = sizes[d] == 1 ? wk_sym_const(L->syms, 0) : L->rvar[nred];
            red_sizes[nred++] = sizes[d];
            ksizes[d] = 1;
            at[d] = wk_sym_const(L->syms, 0);
        } else {
            iv[d] = L->ivar[d];
            ksizes[d] = sizes[d];
            at[d] = sizes[d] == 1 ? wk_sym_const(L->syms, 0) : L->ivar[d];
        }
    }
    const WkLExpr *body = wk_lower_subst(L, e, iv, ndim, NULL, 0, NULL, NULL);
    const WkLExpr *red = wk_lower_reduce(L, rop, out, body, nred, red_sizes);
    int id = wk_lower_add_buffer(L, node, WK_LBUF_REDUCTION, out, ndim, ksizes, red);
    return wk_lower_load(L, id, ndim, at);
}

/* ---- driver ------------------------------------------------------------ */
static int fill_value_buf(WkLoopIR *L, const WkGraph *g, int v, WkLBufKind kind) {
    const WkValue *val = wk_graph_value(g, v);
    int id = new_buf(L);
    WkLBuf *b = &L->bufs[id];
    L->value_buf[v] = id;
    b->kind = kind;
    b->value = v;
    b->node = val->node;
    b->op = (WkOp)-1;
    b->dtype = val->dtype;
    b->ndim = val->ndim;
    b->input_index = val->input_index;
    if (const_dims(val, b->sizes, val->node < 0 ? b->strides : NULL) < 0) return -1;
    if (val->node >= 0) { /* node outputs are contiguous */
        contiguous(b);
    } else {
        b->numel = 1;
        for (int d = 0; d < b->ndim; d++) b->numel *= b->sizes[d];
    }
    b->nusers = wk_graph_nusers(g, v);
    return id;
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
    L->nvalues = wk_graph_nvalues(g);
    L->value_buf = wk_xcalloc((size_t)L->nvalues + 1, sizeof(int));
    for (int v = 0; v < L->nvalues; v++) L->value_buf[v] = -1;
    L->ninputs = wk_graph_ninputs(g);
    L->noutputs = wk_graph_noutputs(g);
    L->input_bufs = wk_xcalloc((size_t)L->ninputs + 1, sizeof(int));
    L->output_bufs = wk_xcalloc((size_t)L->noutputs + 1, sizeof(int));
    /* values in id order: inputs and node outputs interleave as the graph
     * defined them, so buffers come out in topological order */
    for (int v = 0; v < L->nvalues; v++) {
        const WkValue *val = wk_graph_value(g, v);
        if (!wk_dtype_supported(val->dtype)) { /* complex: the builder lets it reach externs only */
            wk_error_set("lower: value %d is %s, which no kernel computes (an extern call must take it)", v,
                         wk_dtype_name(val->dtype));
            goto error;
        }
        if (val->node < 0) {
            if (val->input_index < 0) {
                wk_error_set("value %d is neither a graph input nor a node output", v);
                goto error;
            }
            if (fill_value_buf(L, g, v, WK_LBUF_INPUT) < 0) goto error;
            continue;
        }
        const WkNode *node = wk_graph_node(g, val->node);
        const WkOpInfo *info = wk_op_info(node->op);
        int64_t sizes[WK_MAX_DIMS];
        if (const_dims(val, sizes, NULL) < 0) goto error;
        Lower c = {L, g, node, val, val->node, {0}};
        for (int d = 0; d < val->ndim; d++)
            c.canon[d] = sizes[d] == 1 ? wk_sym_const(L->syms, 0) : L->ivar[d];
        int first_internal = L->nbufs;
        const WkLExpr *body = lowerings[node->op](&c);
        if (!body) goto error;
        for (int k = first_internal; k < L->nbufs; k++) L->bufs[k].op = node->op;
        /* a decomposed reduction's own buffer is pointwise over the internal ones */
        WkLBufKind kind = info && info->kind == WK_KIND_REDUCTION && body->op == WK_LX_REDUCE
                              ? WK_LBUF_REDUCTION : WK_LBUF_POINTWISE;
        int id = fill_value_buf(L, g, v, kind);
        if (id < 0) goto error;
        WkLBuf *b = &L->bufs[id];
        b->op = node->op;
        b->body = body;
        if (b->body->dtype != b->dtype && b->kind == WK_LBUF_POINTWISE)
            b->body = wk_lower_cast(L, b->dtype, b->body);
    }
    for (int k = 0; k < L->ninputs; k++) L->input_bufs[k] = L->value_buf[wk_graph_input_value(g, k)];
    for (int k = 0; k < L->noutputs; k++) {
        L->output_bufs[k] = L->value_buf[wk_graph_output_value(g, k)];
        L->bufs[L->output_bufs[k]].is_output = 1;
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
    free(L->value_buf);
    free(L->input_bufs);
    free(L->output_bufs);
    free(L->xbind);
    free(L);
}
