/* expr.c — loop-IR expressions: hash-consed construction (with the little
 * constant folding that keeps casts of literals literal), the pointer map,
 * substitution (calling buffer definitions at index expressions, which is
 * how fusion happens), and printing. */
#include "lower.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const lx_names[WK_NLX] = {
#define WK_LX_NAME(name, nargs) #name,
    WK_LX_TABLE(WK_LX_NAME)
#undef WK_LX_NAME
};
static const int lx_nargs[WK_NLX] = {
#define WK_LX_NARGS(name, nargs) nargs,
    WK_LX_TABLE(WK_LX_NARGS)
#undef WK_LX_NARGS
};

const char *wk_lower_op_name(WkLxOp op) {
    return (unsigned)op < (unsigned)WK_NLX ? lx_names[op] : "?";
}
int wk_lower_op_nargs(WkLxOp op) { return (unsigned)op < (unsigned)WK_NLX ? lx_nargs[op] : 0; }

/* ---- hash-consing ------------------------------------------------------ */
static uint64_t expr_hash(const WkLExpr *e) {
    uint64_t h = wk_hash_mix((uint64_t)e->op, (uint64_t)e->dtype);
    for (int k = 0; k < e->nargs; k++) h = wk_hash_mix(h, e->a[k]->hash);
    h = wk_hash_mix(h, (uint64_t)(int64_t)e->buf);
    h = wk_hash_mix(h, (uint64_t)e->nidx);
    for (int k = 0; k < e->nidx; k++) h = wk_hash_mix(h, (uint64_t)(uintptr_t)e->idx[k]);
    uint64_t fb;
    memcpy(&fb, &e->f, sizeof fb);
    h = wk_hash_mix(h, fb);
    h = wk_hash_mix(h, (uint64_t)e->i);
    h = wk_hash_mix(h, (uint64_t)e->rop);
    h = wk_hash_mix(h, (uint64_t)e->nred);
    for (int k = 0; k < e->nred; k++) h = wk_hash_mix(h, (uint64_t)e->red_sizes[k]);
    return h;
}

static int expr_equal(const WkLExpr *x, const WkLExpr *y) {
    if (x->hash != y->hash || x->op != y->op || x->dtype != y->dtype || x->nargs != y->nargs ||
        x->buf != y->buf || x->nidx != y->nidx || x->i != y->i || x->rop != y->rop ||
        x->nred != y->nred)
        return 0;
    if (memcmp(&x->f, &y->f, sizeof x->f) != 0) return 0; /* NaN equals NaN, -0 != +0 */
    for (int k = 0; k < x->nargs; k++)
        if (x->a[k] != y->a[k]) return 0;
    for (int k = 0; k < x->nidx; k++)
        if (x->idx[k] != y->idx[k]) return 0;
    for (int k = 0; k < x->nred; k++)
        if (x->red_sizes[k] != y->red_sizes[k]) return 0;
    return 1;
}

/* Interns a filled-in template: returns the existing equal node or a copy. */
static const WkLExpr *intern(WkLoopIR *L, WkLExpr *t) {
    t->hash = expr_hash(t);
    if (2 * (L->table_len + 1) > L->table_cap) {
        int cap = L->table_cap ? 2 * L->table_cap : 1024;
        const WkLExpr **nt = wk_xcalloc((size_t)cap, sizeof *nt);
        const WkLExpr **old = L->table;
        for (int k = 0; k < L->table_cap; k++) {
            if (!old[k]) continue;
            size_t j = (size_t)(old[k]->hash & (uint64_t)(cap - 1));
            while (nt[j]) j = (j + 1) & (size_t)(cap - 1);
            nt[j] = old[k];
        }
        free(L->table);
        L->table = nt;
        L->table_cap = cap;
    }
    const WkLExpr **tab = L->table;
    size_t j = (size_t)(t->hash & (uint64_t)(L->table_cap - 1));
    for (; tab[j]; j = (j + 1) & (size_t)(L->table_cap - 1))
        if (expr_equal(tab[j], t)) return tab[j];
    WkLExpr *e = wk_arena_alloc(L->arena, sizeof *e);
    *e = *t;
    e->id = L->nexprs++;
    tab[j] = e;
    L->table_len++;
    return e;
}

static WkLExpr blank(WkLxOp op, WkDType dt) {
    WkLExpr t;
    memset(&t, 0, sizeof t);
    t.op = op;
    t.dtype = dt;
    t.buf = -1;
    return t;
}

static int64_t wrap_int(WkDType dt, int64_t v) {
    switch (dt) {
    case WK_BOOL: return v != 0;
    case WK_U8: return (uint8_t)v;
    case WK_I8: return (int8_t)v;
    case WK_I16: return (int16_t)v;
    case WK_I32: return (int32_t)v;
    default: return v;
    }
}

const WkLExpr *wk_lower_const_f(WkLoopIR *L, WkDType dt, double v) {
    if (!wk_dtype_is_float(dt)) {
        if (dt == WK_BOOL) return wk_lower_const_i(L, dt, v != 0);
        return wk_lower_const_i(L, dt, (int64_t)v); /* callers pass in-range values */
    }
    WkLExpr t = blank(WK_LX_CONST, dt);
    t.f = dt == WK_F32 ? (double)(float)v : v;
    if (isnan(t.f)) t.f = NAN; /* one NaN, whatever its payload */
    return intern(L, &t);
}

const WkLExpr *wk_lower_const_i(WkLoopIR *L, WkDType dt, int64_t v) {
    if (wk_dtype_is_float(dt)) return wk_lower_const_f(L, dt, (double)v);
    WkLExpr t = blank(WK_LX_CONST, dt);
    t.i = wrap_int(dt, v);
    return intern(L, &t);
}

int wk_lower_is_const(const WkLExpr *e, double *value) {
    if (e->op != WK_LX_CONST) return 0;
    if (value) *value = wk_dtype_is_float(e->dtype) ? e->f : (double)e->i;
    return 1;
}

/* ---- indirect variables ------------------------------------------------ */
const WkLExpr *wk_lower_xvar(const WkLoopIR *L, int var) {
    return var >= 0 && var < L->xbind_cap ? L->xbind[var] : NULL;
}

const WkSym *wk_lower_indirect(WkLoopIR *L, const WkLExpr *e) {
    e = wk_lower_cast(L, WK_I64, e);
    if (e->op == WK_LX_CONST) return wk_sym_const(L->syms, e->i);
    char name[32];
    snprintf(name, sizeof name, "t%d", e->id);
    const WkSym *v = wk_sym_var(L->syms, name);
    if (v->var >= L->xbind_cap) {
        int cap = L->xbind_cap ? 2 * L->xbind_cap : 64;
        while (cap <= v->var) cap *= 2;
        L->xbind = wk_xrealloc(L->xbind, sizeof *L->xbind * (size_t)cap);
        memset(L->xbind + L->xbind_cap, 0, sizeof *L->xbind * (size_t)(cap - L->xbind_cap));
        L->xbind_cap = cap;
    }
    L->xbind[v->var] = e;
    return v;
}

int wk_lower_sym_xvars(const WkLoopIR *L, const WkSym *s, const WkLExpr **out, int n, int cap) {
    switch (s->kind) {
    case WK_SYM_CONST: return n;
    case WK_SYM_VAR: {
        const WkLExpr *e = wk_lower_xvar(L, s->var);
        if (!e) return n;
        int at = 0;
        for (; at < n && at < cap && out[at]->id < e->id; at++) {}
        if (at < n && at < cap && out[at] == e) return n;
        if (n < cap) { /* keep out sorted by id */
            memmove(out + at + 1, out + at, sizeof *out * (size_t)(n - at));
            out[at] = e;
        }
        return n + 1;
    }
    default: return wk_lower_sym_xvars(L, s->b, out, wk_lower_sym_xvars(L, s->a, out, n, cap), cap);
    }
}

const WkLExpr *wk_lower_checked_index(WkLoopIR *L, const WkLExpr *idx, int64_t size, int wrap_negative) {
    idx = wk_lower_cast(L, WK_I64, idx);
    if (wrap_negative) {
        const WkLExpr *zero = wk_lower_const_i(L, WK_I64, 0);
        const WkLExpr *neg = wk_lower_binary(L, WK_LX_LT, idx, zero);
        idx = wk_lower_where(L, neg, wk_lower_binary(L, WK_LX_ADD, idx, wk_lower_const_i(L, WK_I64, size)), idx);
    }
    WkLExpr t = blank(WK_LX_BOUND, WK_I64);
    t.nargs = 1;
    t.a[0] = idx;
    t.i = size;
    return intern(L, &t);
}

/* LOAD, READ and INDEX take the expressions of their index's indirect
 * variables as operands (more than fit: xoverflow, see lower.h). */
static void set_xoperands(WkLoopIR *L, WkLExpr *t, const WkSym *const *idx, int nidx) {
    const WkLExpr *xs[WK_MAX_DIMS];
    int n = 0;
    for (int k = 0; k < nidx; k++) n = wk_lower_sym_xvars(L, idx[k], xs, n, WK_MAX_DIMS);
    if (n > WK_MAX_DIMS) {
        L->xoverflow = 1;
        n = WK_MAX_DIMS;
    }
    t->nargs = n;
    for (int k = 0; k < n; k++) t->a[k] = xs[k];
}

const WkLExpr *wk_lower_load(WkLoopIR *L, int value, int nidx, const WkSym *const *idx) {
    const WkLBuf *b = &L->bufs[value];
    WkLExpr t = blank(WK_LX_LOAD, b->dtype);
    t.buf = value;
    t.nidx = nidx;
    for (int k = 0; k < nidx; k++) t.idx[k] = idx[k];
    set_xoperands(L, &t, idx, nidx);
    return intern(L, &t);
}

const WkLExpr *wk_lower_read(WkLoopIR *L, WkDType dt, int planbuf, const WkSym *offset) {
    WkLExpr t = blank(WK_LX_READ, dt);
    t.buf = planbuf;
    t.nidx = 1;
    t.idx[0] = offset;
    set_xoperands(L, &t, &offset, 1);
    return intern(L, &t);
}

const WkLExpr *wk_lower_index(WkLoopIR *L, const WkSym *value) {
    int64_t v;
    if (wk_sym_is_const(value, &v)) return wk_lower_const_i(L, WK_I64, v);
    WkLExpr t = blank(WK_LX_INDEX, WK_I64);
    t.nidx = 1;
    t.idx[0] = value;
    set_xoperands(L, &t, &value, 1); /* an index into arange's values at a loaded position */
    return intern(L, &t);
}

const WkLExpr *wk_lower_cast(WkLoopIR *L, WkDType dt, const WkLExpr *a) {
    if (a->dtype == dt) return a;
    if (a->op == WK_LX_CONST) {
        if (wk_dtype_is_float(a->dtype)) {
            if (wk_dtype_is_float(dt)) return wk_lower_const_f(L, dt, a->f);
            if (dt == WK_BOOL) return wk_lower_const_i(L, dt, a->f != 0);
            /* float -> int folds only when exactly representable in range */
            if (isfinite(a->f) && fabs(a->f) < 9.0e18) return wk_lower_const_i(L, dt, (int64_t)a->f);
        } else {
            return wk_dtype_is_float(dt) ? wk_lower_const_f(L, dt, (double)a->i)
                                         : wk_lower_const_i(L, dt, a->i);
        }
    }
    WkLExpr t = blank(WK_LX_CAST, dt);
    t.nargs = 1;
    t.a[0] = a;
    return intern(L, &t);
}

const WkLExpr *wk_lower_unary(WkLoopIR *L, WkLxOp op, const WkLExpr *a) {
    WkLExpr t = blank(op, op == WK_LX_ISNAN ? WK_BOOL : a->dtype);
    t.nargs = 1;
    t.a[0] = a;
    return intern(L, &t);
}

static int is_compare(WkLxOp op) {
    return op == WK_LX_EQ || op == WK_LX_NE || op == WK_LX_LT || op == WK_LX_LE ||
           op == WK_LX_GT || op == WK_LX_GE;
}

const WkLExpr *wk_lower_binary(WkLoopIR *L, WkLxOp op, const WkLExpr *a, const WkLExpr *b) {
    WkLExpr t = blank(op, is_compare(op) ? WK_BOOL : a->dtype);
    /* commutative ops get a canonical operand order so a+b and b+a share */
    if ((op == WK_LX_ADD || op == WK_LX_MUL || op == WK_LX_EQ || op == WK_LX_NE ||
         op == WK_LX_AND || op == WK_LX_OR || op == WK_LX_XOR) &&
        a->id > b->id) {
        const WkLExpr *s = a;
        a = b;
        b = s;
    }
    t.nargs = 2;
    t.a[0] = a;
    t.a[1] = b;
    return intern(L, &t);
}

const WkLExpr *wk_lower_where(WkLoopIR *L, const WkLExpr *c, const WkLExpr *a, const WkLExpr *b) {
    if (c->op == WK_LX_CONST) return c->i ? a : b;
    if (a == b) return a;
    WkLExpr t = blank(WK_LX_WHERE, a->dtype);
    t.nargs = 3;
    t.a[0] = c;
    t.a[1] = a;
    t.a[2] = b;
    return intern(L, &t);
}

const WkLExpr *wk_lower_reduce(WkLoopIR *L, WkRedOp rop, WkDType out, const WkLExpr *body,
                               int nred, const int64_t *red_sizes) {
    WkLExpr t = blank(WK_LX_REDUCE, out);
    t.nargs = 1;
    t.a[0] = body;
    t.rop = rop;
    t.nred = nred;
    for (int k = 0; k < nred; k++) t.red_sizes[k] = red_sizes[k];
    return intern(L, &t);
}

const WkLExpr *wk_lower_with_args(WkLoopIR *L, const WkLExpr *e, const WkLExpr *const *a) {
    switch (e->op) {
    case WK_LX_CONST: case WK_LX_LOAD: case WK_LX_READ: case WK_LX_INDEX: return e;
    case WK_LX_CAST: return wk_lower_cast(L, e->dtype, a[0]);
    case WK_LX_BOUND: {
        WkLExpr t = blank(WK_LX_BOUND, WK_I64);
        t.nargs = 1;
        t.a[0] = a[0];
        t.i = e->i;
        return intern(L, &t);
    }
    case WK_LX_WHERE: return wk_lower_where(L, a[0], a[1], a[2]);
    case WK_LX_REDUCE: return wk_lower_reduce(L, e->rop, e->dtype, a[0], e->nred, e->red_sizes);
    default:
        return e->nargs == 1 ? wk_lower_unary(L, e->op, a[0]) : wk_lower_binary(L, e->op, a[0], a[1]);
    }
}

/* ---- pointer map ------------------------------------------------------- */
static size_t ptr_slot(const void *p, int cap) {
    return (size_t)(wk_hash_mix(0, (uint64_t)(uintptr_t)p) & (uint64_t)(cap - 1));
}

const void *wk_lower_map_get(const WkLowerMap *m, const void *key) {
    if (!m->cap) return NULL;
    for (size_t j = ptr_slot(key, m->cap); m->keys[j]; j = (j + 1) & (size_t)(m->cap - 1))
        if (m->keys[j] == key) return m->vals[j];
    return NULL;
}

void wk_lower_map_put(WkLowerMap *m, const void *key, const void *val) {
    if (2 * (m->len + 1) > m->cap) {
        WkLowerMap n = {0};
        n.cap = m->cap ? 2 * m->cap : 64;
        n.keys = wk_xcalloc((size_t)n.cap, sizeof *n.keys);
        n.vals = wk_xcalloc((size_t)n.cap, sizeof *n.vals);
        for (int k = 0; k < m->cap; k++)
            if (m->keys[k]) wk_lower_map_put(&n, m->keys[k], m->vals[k]);
        free(m->keys);
        free(m->vals);
        *m = n;
    }
    size_t j = ptr_slot(key, m->cap);
    for (; m->keys[j]; j = (j + 1) & (size_t)(m->cap - 1))
        if (m->keys[j] == key) {
            m->vals[j] = val;
            return;
        }
    m->keys[j] = key;
    m->vals[j] = val;
    m->len++;
}

void wk_lower_map_free(WkLowerMap *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- substitution ------------------------------------------------------ */
/* i_k -> ivals[k], r_k -> rvals[k], indirect xfrom[k] -> xto[k], at once */
static const WkSym *subst_sym_x(WkLoopIR *L, const WkSym *s, const WkSym *const *ivals, int ni,
                                const WkSym *const *rvals, int nr, const WkSym *const *xfrom,
                                const WkSym *const *xto, int nx) {
    switch (s->kind) {
    case WK_SYM_CONST: return s;
    case WK_SYM_VAR:
        for (int k = 0; k < ni; k++)
            if (s->var == L->ivar_id[k]) return ivals[k];
        for (int k = 0; k < nr; k++)
            if (s->var == L->rvar_id[k]) return rvals[k];
        for (int k = 0; k < nx; k++)
            if (s == xfrom[k]) return xto[k];
        return s;
    default: break;
    }
    const WkSym *a = subst_sym_x(L, s->a, ivals, ni, rvals, nr, xfrom, xto, nx);
    const WkSym *b = subst_sym_x(L, s->b, ivals, ni, rvals, nr, xfrom, xto, nx);
    if (a == s->a && b == s->b) return s;
    switch (s->kind) {
    case WK_SYM_ADD: return wk_sym_add(L->syms, a, b);
    case WK_SYM_MUL: return wk_sym_mul(L->syms, a, b);
    case WK_SYM_FLOORDIV: return wk_sym_floordiv(L->syms, a, b);
    case WK_SYM_MOD: return wk_sym_mod(L->syms, a, b);
    case WK_SYM_MIN: return wk_sym_min(L->syms, a, b);
    case WK_SYM_MAX: return wk_sym_max(L->syms, a, b);
    default: return s;
    }
}

const WkSym *wk_lower_subst_sym(WkLoopIR *L, const WkSym *s, const WkSym *const *ivals, int ni,
                                const WkSym *const *rvals, int nr) {
    return subst_sym_x(L, s, ivals, ni, rvals, nr, NULL, NULL, 0);
}

const WkSym *wk_lower_rename_xvars(WkLoopIR *L, const WkSym *s, const WkSym *const *xfrom,
                                   const WkSym *const *xto, int n) {
    return n ? subst_sym_x(L, s, NULL, 0, NULL, 0, xfrom, xto, n) : s;
}

typedef struct {
    WkLoopIR *L;
    WkLowerInlineFn fn;
    void *ctx;
    WkLowerMap inlined; /* substituted LOAD node -> the body called there */
} SubstCtx;

typedef struct {
    const WkSym *const *ivals;
    int ni;
    const WkSym *const *rvals;
    int nr;
    WkLowerMap memo; /* node -> node, for this environment */
} Env;

static const WkLExpr *subst_rec(SubstCtx *c, Env *env, const WkLExpr *e);

/* A LOAD's, READ's or INDEX's indirect operands substituted first: each one that
 * changes renames its index variable (xfrom[i] -> xto[i]) in the index
 * expressions. Returns how many were renamed. */
static int subst_indirect(SubstCtx *c, Env *env, const WkLExpr *e, const WkSym **xfrom, const WkSym **xto) {
    int nx = 0;
    for (int k = 0; k < e->nargs; k++) {
        const WkLExpr *ak = subst_rec(c, env, e->a[k]);
        if (ak == e->a[k]) continue;
        xfrom[nx] = wk_lower_indirect(c->L, e->a[k]);
        xto[nx++] = wk_lower_indirect(c->L, ak);
    }
    return nx;
}

static const WkLExpr *subst_rec(SubstCtx *c, Env *env, const WkLExpr *e) {
    const WkLExpr *done = wk_lower_map_get(&env->memo, e);
    if (done) return done;
    WkLoopIR *L = c->L;
    const WkLExpr *r = e;
    switch (e->op) {
    case WK_LX_CONST: break;
    case WK_LX_LOAD: {
        /* indirect operands first: their variables are renamed after them */
        const WkSym *xfrom[WK_MAX_DIMS], *xto[WK_MAX_DIMS];
        int nx = subst_indirect(c, env, e, xfrom, xto);
        const WkSym *idx[WK_MAX_DIMS];
        for (int k = 0; k < e->nidx; k++)
            idx[k] = subst_sym_x(L, e->idx[k], env->ivals, env->ni, env->rvals, env->nr, xfrom, xto, nx);
        r = wk_lower_load(L, e->buf, e->nidx, idx);
        const WkLBuf *b = &L->bufs[e->buf];
        if (c->fn && b->kind == WK_LBUF_POINTWISE && c->fn(c->ctx, e->buf)) {
            const WkLExpr *body = wk_lower_map_get(&c->inlined, r);
            if (!body) {
                Env inner = {r->idx, r->nidx, NULL, 0, {0}};
                body = subst_rec(c, &inner, b->body);
                wk_lower_map_free(&inner.memo);
                wk_lower_map_put(&c->inlined, r, body);
            }
            r = body;
        }
        break;
    }
    case WK_LX_INDEX: {
        const WkSym *xfrom[WK_MAX_DIMS], *xto[WK_MAX_DIMS];
        int nx = subst_indirect(c, env, e, xfrom, xto);
        r = wk_lower_index(L, subst_sym_x(L, e->idx[0], env->ivals, env->ni, env->rvals, env->nr, xfrom, xto, nx));
        break;
    }
    case WK_LX_READ: {
        const WkSym *xfrom[WK_MAX_DIMS], *xto[WK_MAX_DIMS];
        int nx = subst_indirect(c, env, e, xfrom, xto);
        r = wk_lower_read(L, e->dtype, e->buf,
                          subst_sym_x(L, e->idx[0], env->ivals, env->ni, env->rvals, env->nr, xfrom, xto, nx));
        break;
    }
    default: {
        const WkLExpr *a[3] = {NULL, NULL, NULL}; /* LOAD/READ, the only wider nodes, are above */
        int same = 1;
        for (int k = 0; k < e->nargs; k++) {
            a[k] = subst_rec(c, env, e->a[k]);
            same &= a[k] == e->a[k];
        }
        if (!same) r = wk_lower_with_args(L, e, a);
    }
    }
    wk_lower_map_put(&env->memo, e, r);
    return r;
}

const WkLExpr *wk_lower_subst(WkLoopIR *L, const WkLExpr *e, const WkSym *const *ivals, int ni,
                              const WkSym *const *rvals, int nr, WkLowerInlineFn inline_fn,
                              void *ctx) {
    SubstCtx c = {L, inline_fn, ctx, {0}};
    Env env = {ivals, ni, rvals, nr, {0}};
    const WkLExpr *r = subst_rec(&c, &env, e);
    wk_lower_map_free(&env.memo);
    wk_lower_map_free(&c.inlined);
    return r;
}

/* ---- printing ---------------------------------------------------------- */
static void print_rec(const WkLoopIR *L, const WkLExpr *e, WkStr *out, WkLowerMap *seen) {
    if (wk_lower_map_get(seen, e)) return;
    wk_lower_map_put(seen, e, e);
    for (int k = 0; k < e->nargs; k++) print_rec(L, e->a[k], out, seen);
    wk_str_printf(out, "  %%%d = %s.%s", e->id, wk_lower_op_name(e->op), wk_dtype_name(e->dtype));
    switch (e->op) {
    case WK_LX_CONST:
        if (wk_dtype_is_float(e->dtype)) wk_str_printf(out, " %.17g", e->f);
        else wk_str_printf(out, " %lld", (long long)e->i);
        break;
    case WK_LX_LOAD:
    case WK_LX_READ:
    case WK_LX_INDEX:
        if (e->op == WK_LX_INDEX) wk_str_append(out, " index[");
        else wk_str_printf(out, " %s%d[", e->op == WK_LX_LOAD ? "v" : "b", e->buf);
        for (int k = 0; k < e->nidx; k++) {
            if (k) wk_str_append(out, ", ");
            wk_sym_to_c(L->syms, e->idx[k], out, NULL, NULL);
        }
        wk_str_append(out, "]");
        break;
    case WK_LX_BOUND:
        wk_str_printf(out, " %%%d < %lld\n", e->a[0]->id, (long long)e->i);
        return;
    case WK_LX_REDUCE: {
        static const char *const rn[] = {"sum", "mean", "max", "min", "prod"};
        wk_str_printf(out, " %s over [", rn[e->rop]);
        for (int k = 0; k < e->nred; k++) wk_str_printf(out, "%s%lld", k ? ", " : "", (long long)e->red_sizes[k]);
        wk_str_append(out, "]");
    }
        /* fall through */
    default:
        for (int k = 0; k < e->nargs; k++) wk_str_printf(out, " %%%d", e->a[k]->id);
        break;
    }
    wk_str_append(out, "\n");
}

void wk_lower_print_expr(const WkLoopIR *L, const WkLExpr *e, WkStr *out) {
    WkLowerMap seen = {0};
    print_rec(L, e, out, &seen);
    wk_lower_map_free(&seen);
}

char *wk_lower_print(const WkLoopIR *L) {
    static const char *const kinds[] = {"input", "pointwise", "reduction"};
    WkStr out = {0};
    wk_str_append(&out, "");
    for (int v = 0; v < L->nbufs; v++) {
        const WkLBuf *b = &L->bufs[v];
        if (b->value >= 0 && b->value != v) wk_str_printf(&out, "v%d (value %d): %s %s [", v, b->value, kinds[b->kind], wk_dtype_name(b->dtype));
        else if (b->value < 0) wk_str_printf(&out, "v%d (internal): %s %s [", v, kinds[b->kind], wk_dtype_name(b->dtype));
        else wk_str_printf(&out, "v%d: %s %s [", v, kinds[b->kind], wk_dtype_name(b->dtype));
        for (int d = 0; d < b->ndim; d++) wk_str_printf(&out, "%s%lld", d ? ", " : "", (long long)b->sizes[d]);
        wk_str_printf(&out, "]%s\n", b->is_output ? " output" : "");
        if (b->body) {
            wk_lower_print_expr(L, b->body, &out);
            wk_str_printf(&out, "  -> %%%d\n", b->body->id);
        }
    }
    return out.data;
}
