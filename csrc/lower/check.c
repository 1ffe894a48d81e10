/* check.c — the loop-IR verifier: the invariants written in lower.h,
 * checked on every buffer body. Run by the pipeline between passes when
 * debugging output is on, and by the unit tests always. */
#include "lower.h"

#include <string.h>

typedef struct {
    const WkLoopIR *L;
    int value;      /* buffer being checked */
    int ni, nr;     /* index variables in scope */
    WkLowerMap seen;
} Check;

static int sym_vars_ok(const Check *c, const WkSym *s) {
    if (s->kind == WK_SYM_CONST) return 1;
    if (s->kind == WK_SYM_VAR) {
        for (int k = 0; k < c->ni; k++)
            if (s->var == c->L->ivar_id[k]) return 1;
        for (int k = 0; k < c->nr; k++)
            if (s->var == c->L->rvar_id[k]) return 1;
        return wk_lower_xvar(c->L, s->var) != NULL; /* an indirect variable */
    }
    return sym_vars_ok(c, s->a) && sym_vars_ok(c, s->b);
}

static int check_expr(Check *c, const WkLExpr *e, int root) {
    if (wk_lower_map_get(&c->seen, e)) return 0;
    wk_lower_map_put(&c->seen, e, e);
    const WkLoopIR *L = c->L;
    int indirect = e->op == WK_LX_LOAD || e->op == WK_LX_READ;
    if (!indirect && e->nargs != wk_lower_op_nargs(e->op)) goto bad;
    if (indirect) { /* operands: exactly the index's indirect variables' expressions */
        const WkLExpr *xs[WK_MAX_DIMS];
        int n = 0;
        for (int k = 0; k < e->nidx; k++) n = wk_lower_sym_xvars(L, e->idx[k], xs, n, WK_MAX_DIMS);
        if (n != e->nargs) goto bad;
        for (int k = 0; k < n; k++)
            if (xs[k] != e->a[k] || e->a[k]->dtype != WK_I64) goto bad;
    }
    if (!wk_dtype_supported(e->dtype)) goto bad; /* complex never reaches the loop IR */
    for (int k = 0; k < e->nargs; k++) {
        if (!e->a[k] || e->a[k]->id >= e->id) goto bad;
        if (check_expr(c, e->a[k], 0) < 0) return -1;
    }
    switch (e->op) {
    case WK_LX_LOAD:
        if (e->buf < 0 || e->buf >= L->nbufs || e->nidx != L->bufs[e->buf].ndim ||
            e->dtype != L->bufs[e->buf].dtype)
            goto bad;
        for (int k = 0; k < e->nidx; k++)
            if (!sym_vars_ok(c, e->idx[k])) goto bad;
        break;
    case WK_LX_READ:
        if (e->nidx != 1) goto bad;
        break;
    case WK_LX_REDUCE:
        if (!root || L->bufs[c->value].kind != WK_LBUF_REDUCTION) goto bad;
        break;
    case WK_LX_EQ: case WK_LX_NE: case WK_LX_LT: case WK_LX_LE: case WK_LX_GT: case WK_LX_GE:
        if (e->dtype != WK_BOOL || e->a[0]->dtype != e->a[1]->dtype) goto bad;
        break;
    case WK_LX_INDEX:
        if (e->nidx != 1 || e->dtype != WK_I64 || !sym_vars_ok(c, e->idx[0])) goto bad;
        break;
    case WK_LX_ISNAN:
        if (e->dtype != WK_BOOL || !wk_dtype_is_float(e->a[0]->dtype)) goto bad;
        break;
    case WK_LX_AND: case WK_LX_OR: case WK_LX_XOR: case WK_LX_NOT:
        if (wk_dtype_is_float(e->dtype)) goto bad;
        for (int k = 0; k < e->nargs; k++)
            if (e->a[k]->dtype != e->dtype) goto bad;
        break;
    case WK_LX_DIV: case WK_LX_EXP: case WK_LX_LOG: case WK_LX_SQRT: case WK_LX_TANH:
    case WK_LX_SIN: case WK_LX_COS: case WK_LX_TAN: case WK_LX_ASIN: case WK_LX_ACOS: case WK_LX_ATAN:
    case WK_LX_SINH: case WK_LX_COSH: case WK_LX_ASINH: case WK_LX_ACOSH: case WK_LX_ATANH:
    case WK_LX_ERF: case WK_LX_ERFC: case WK_LX_ERFINV: case WK_LX_LOG1P: case WK_LX_EXPM1:
    case WK_LX_LOG2: case WK_LX_LOG10: case WK_LX_EXP2: case WK_LX_FLOOR: case WK_LX_CEIL:
    case WK_LX_TRUNC: case WK_LX_ROUND: case WK_LX_ATAN2:
        if (!wk_dtype_is_float(e->dtype)) goto bad;
        /* fall through */
    case WK_LX_ADD: case WK_LX_SUB: case WK_LX_MUL: case WK_LX_POW: case WK_LX_MAX:
    case WK_LX_MIN: case WK_LX_NEG: case WK_LX_ABS: case WK_LX_FMOD: case WK_LX_FLOORDIV:
    case WK_LX_REM:
        for (int k = 0; k < e->nargs; k++)
            if (e->a[k]->dtype != e->dtype) goto bad;
        break;
    case WK_LX_BOUND:
        if (e->dtype != WK_I64 || e->a[0]->dtype != WK_I64 || e->i < 0) goto bad;
        break;
    case WK_LX_WHERE:
        if (e->a[0]->dtype != WK_BOOL || e->a[1]->dtype != e->dtype || e->a[2]->dtype != e->dtype)
            goto bad;
        break;
    default: break;
    }
    return 0;
bad:
    wk_error_set("loop IR check: buffer v%d: bad %s node %%%d", c->value, wk_lower_op_name(e->op),
                 e->id);
    return -1;
}

int wk_lower_check(const WkLoopIR *L) {
    int rc = 0;
    for (int v = 0; v < L->nbufs && rc == 0; v++) {
        const WkLBuf *b = &L->bufs[v];
        Check c = {L, v, b->ndim, 0, {0}};
        if (!wk_dtype_supported(b->dtype)) {
            wk_error_set("loop IR check: v%d has dtype %s, which no kernel computes", v, wk_dtype_name(b->dtype));
            rc = -1;
            continue;
        }
        if (b->kind == WK_LBUF_INPUT) {
            if (b->body) {
                wk_error_set("loop IR check: input v%d has a body", v);
                rc = -1;
            }
            continue;
        }
        if (!b->body || (b->kind == WK_LBUF_REDUCTION) != (b->body->op == WK_LX_REDUCE) ||
            (b->kind == WK_LBUF_POINTWISE && b->body->dtype != b->dtype)) {
            wk_error_set("loop IR check: v%d: body does not match its kind", v);
            rc = -1;
            continue;
        }
        if (b->kind == WK_LBUF_REDUCTION) c.nr = b->body->nred;
        rc = check_expr(&c, b->body, 1);
        wk_lower_map_free(&c.seen);
    }
    return rc;
}
