/* fuse.c — kernels. Groups materialised values into loop nests (every
 * pointwise value of one shape whose inputs are ready goes into one nest;
 * each reduction gets its own, with its pointwise prologue inlined and
 * pointwise values of its output shape as an epilogue), calls
 * the inlined buffers' definitions at each kernel's index, turns LOADs into
 * READs at element offsets, and collapses dimensions that every access walks
 * contiguously so that inner loops are long.
 */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

typedef WkVec(int) IntVec;

typedef struct {
    WkSchedule *S;
    int *kernel_of;       /* [nvalues] kernel storing a value, -1 if none */
    IntVec *members;      /* [nkernels] values each kernel stores */
    int nkernels;
    int cur;              /* kernel being built, for the inline callback */
    IntVec inlined;       /* values inlined into the kernel being built */
} Fuse;

/* ---- grouping ---------------------------------------------------------- */
static int inline_unmaterialised(void *ctx, int value) {
    const Fuse *f = ctx;
    return f->S->value_buf[value] < 0;
}

/* Inside kernel f->cur, values it stores itself are recomputed (and hash-
 * consing shares them with the store's own expression). */
static int inline_in_kernel(void *ctx, int value) {
    Fuse *f = ctx;
    if (f->S->value_buf[value] >= 0 && f->kernel_of[value] != f->cur) return 0;
    int seen = 0;
    for (int k = 0; k < f->inlined.len; k++) seen |= f->inlined.data[k] == value;
    if (!seen) wk_vec_push(&f->inlined, value);
    return 1;
}

typedef WkVec(const WkLExpr *) ExprVec;

static void collect(const WkLExpr *e, WkLowerMap *seen, WkLxOp op, IntVec *out_ids, ExprVec *out) {
    if (wk_lower_map_get(seen, e)) return;
    wk_lower_map_put(seen, e, e);
    for (int k = 0; k < e->nargs; k++) collect(e->a[k], seen, op, out_ids, out);
    if (e->op == op) {
        if (out) wk_vec_push(out, e);
        if (out_ids) wk_vec_push(out_ids, e->buf);
    }
}

static int same_sizes(const WkLBuf *a, const WkLBuf *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d]) return 0;
    return 1;
}

/* Whether value v (pointwise) may be stored by existing kernel k: every
 * materialised value it reads is stored by an earlier kernel, or by k
 * itself at the very element v's iteration writes. A reduction kernel takes
 * pointwise values of its output shape as an epilogue: they run once per
 * output element, after the reduction's own store. */
static int can_join(Fuse *f, int k, int v, const ExprVec *loads) {
    WkLoopIR *L = f->S->L;
    const WkLBuf *b = &L->bufs[v];
    const WkLBuf *rep = &L->bufs[f->members[k].data[0]];
    if (!same_sizes(rep, b)) return 0;
    for (int j = 0; j < loads->len; j++) {
        const WkLExpr *ld = loads->data[j];
        int kd = f->kernel_of[ld->buf];
        if (kd < 0 || kd < k) continue;
        if (kd > k) return 0;
        for (int d = 0; d < b->ndim; d++) {
            const WkSym *canon = b->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : L->ivar[d];
            if (ld->idx[d] != canon) return 0;
        }
    }
    return 1;
}

static void fill_groups(Fuse *f) {
    WkSchedule *S = f->S;
    WkLoopIR *L = S->L;
    for (int v = 0; v < L->nbufs; v++) {
        const WkLBuf *b = &L->bufs[v];
        if (b->kind == WK_LBUF_INPUT || S->value_buf[v] < 0) continue;
        int k = -1;
        if (b->kind == WK_LBUF_POINTWISE) {
            const WkLExpr *e = wk_lower_subst(L, b->body, NULL, 0, NULL, 0, inline_unmaterialised, f);
            ExprVec loads = {0};
            WkLowerMap seen = {0};
            collect(e, &seen, WK_LX_LOAD, NULL, &loads);
            wk_lower_map_free(&seen);
            for (int j = 0; j < f->nkernels && k < 0; j++)
                if (can_join(f, j, v, &loads)) k = j;
            wk_vec_free(&loads);
        }
        if (k < 0) {
            k = f->nkernels++;
            f->members = wk_xrealloc(f->members, sizeof *f->members * (size_t)f->nkernels);
            memset(&f->members[k], 0, sizeof f->members[k]);
        }
        wk_vec_push(&f->members[k], v);
        f->kernel_of[v] = k;
    }
}

/* ---- accesses and collapsing ------------------------------------------- */
/* An access offset c0 + ci.i + cr.r + rest, where rest sums indirect
 * variables (values the kernel loads: they move with no loop, so collapsing
 * loops leaves them alone). */
typedef struct {
    int64_t ci[WK_MAX_DIMS], cr[WK_MAX_DIMS], c0;
    const WkSym *rest; /* NULL: 0 */
} Affine;

static int affine_of(WkLoopIR *L, const WkSym *s, int64_t mult, Affine *a) {
    int64_t v;
    switch (s->kind) {
    case WK_SYM_CONST: a->c0 += mult * s->value; return 0;
    case WK_SYM_VAR:
        for (int k = 0; k < WK_MAX_DIMS; k++) {
            if (s->var == L->ivar_id[k]) { a->ci[k] += mult; return 0; }
            if (s->var == L->rvar_id[k]) { a->cr[k] += mult; return 0; }
        }
        if (wk_lower_xvar(L, s->var)) {
            const WkSym *t = wk_sym_mul(L->syms, s, wk_sym_const(L->syms, mult));
            a->rest = a->rest ? wk_sym_add(L->syms, a->rest, t) : t;
            return 0;
        }
        return -1;
    case WK_SYM_ADD:
        return affine_of(L, s->a, mult, a) < 0 ? -1 : affine_of(L, s->b, mult, a);
    case WK_SYM_MUL:
        if (wk_sym_is_const(s->a, &v)) return affine_of(L, s->b, mult * v, a);
        if (wk_sym_is_const(s->b, &v)) return affine_of(L, s->a, mult * v, a);
        return -1;
    default: return -1;
    }
}

/* Element offset of reading value `value` at per-dim index idx. */
static const WkSym *linear_offset(WkSchedule *S, int value, const WkSym *const *idx) {
    WkLoopIR *L = S->L;
    const WkBufferPlan *p = &S->bufs[S->value_buf[value]];
    const WkSym *off = wk_sym_const(L->syms, 0);
    for (int d = 0; d < p->ndim; d++)
        off = wk_sym_add(L->syms, off, wk_sym_mul(L->syms, idx[d], wk_sym_const(L->syms, p->strides[d])));
    return off;
}

typedef struct {
    int n;                    /* loops after collapsing */
    int64_t size[WK_MAX_DIMS];
    int inner[WK_MAX_DIMS];   /* innermost original dim of each loop */
} Collapse;

/* Merges adjacent dims (outer d into the group inside it) when every access
 * agrees: coef[d] == coef[group inner] * size(group). Size-1 dims vanish. */
static void fill_collapse(Collapse *c, int ndim, const int64_t *sizes, const Affine *acc, int nacc,
                          int reduction, int allowed) {
    int rev_n = 0;
    int64_t rsize[WK_MAX_DIMS];
    int rinner[WK_MAX_DIMS];
    for (int d = ndim - 1; d >= 0; d--) {
        if (allowed && sizes[d] == 1) continue;
        int merge = allowed && rev_n > 0;
        for (int a = 0; a < nacc && merge; a++) {
            const int64_t *co = reduction ? acc[a].cr : acc[a].ci;
            merge = co[d] == co[rinner[rev_n - 1]] * rsize[rev_n - 1];
        }
        if (merge) {
            rsize[rev_n - 1] *= sizes[d];
        } else {
            rsize[rev_n] = sizes[d];
            rinner[rev_n] = d;
            rev_n++;
        }
    }
    c->n = rev_n;
    for (int j = 0; j < rev_n; j++) {
        c->size[j] = rsize[rev_n - 1 - j];
        c->inner[j] = rinner[rev_n - 1 - j];
    }
}

static const WkSym *collapsed_offset(WkLoopIR *L, const Affine *a, const Collapse *ci,
                                     const Collapse *cr) {
    const WkSym *off = wk_sym_const(L->syms, a->c0);
    if (a->rest) off = wk_sym_add(L->syms, a->rest, off);
    for (int j = 0; j < ci->n; j++)
        off = wk_sym_add(L->syms, off,
                         wk_sym_mul(L->syms, L->ivar[j], wk_sym_const(L->syms, a->ci[ci->inner[j]])));
    for (int j = 0; j < cr->n; j++)
        off = wk_sym_add(L->syms, off,
                         wk_sym_mul(L->syms, L->rvar[j], wk_sym_const(L->syms, a->cr[cr->inner[j]])));
    return off;
}

static const WkLExpr *to_reads(WkSchedule *S, const WkLExpr *e, WkLowerMap *reads, WkLowerMap *memo) {
    const WkLExpr *done = wk_lower_map_get(memo, e);
    if (done) return done;
    const WkLExpr *r = e;
    if (e->op == WK_LX_LOAD || e->op == WK_LX_INDEX) {
        r = wk_lower_map_get(reads, e);
        if (r->op == WK_LX_READ && r->nargs) { /* indirect: its operands as READs too, renamed */
            const WkSym *xfrom[WK_MAX_DIMS], *xto[WK_MAX_DIMS];
            for (int k = 0; k < r->nargs; k++) {
                xfrom[k] = wk_lower_indirect(S->L, r->a[k]);
                xto[k] = wk_lower_indirect(S->L, to_reads(S, r->a[k], reads, memo));
            }
            r = wk_lower_read(S->L, r->dtype, r->buf, wk_lower_rename_xvars(S->L, r->idx[0], xfrom, xto, r->nargs));
        } else if (r->op == WK_LX_INDEX && r->nargs) { /* an index value at loaded positions: likewise */
            const WkSym *xfrom[WK_MAX_DIMS], *xto[WK_MAX_DIMS];
            for (int k = 0; k < r->nargs; k++) {
                xfrom[k] = wk_lower_indirect(S->L, r->a[k]);
                xto[k] = wk_lower_indirect(S->L, to_reads(S, r->a[k], reads, memo));
            }
            r = wk_lower_index(S->L, wk_lower_rename_xvars(S->L, r->idx[0], xfrom, xto, r->nargs));
        }
    } else if (e->nargs) {
        const WkLExpr *a[3] = {NULL, NULL, NULL};
        for (int k = 0; k < e->nargs; k++) a[k] = to_reads(S, e->a[k], reads, memo);
        r = wk_lower_with_args(S->L, e, a);
    }
    wk_lower_map_put(memo, e, r);
    return r;
}

static char *describe(WkSchedule *S, Fuse *f, int k) {
    WkLoopIR *L = S->L;
    IntVec vals = {0};
    for (int j = 0; j < f->inlined.len; j++) wk_vec_push(&vals, f->inlined.data[j]);
    for (int j = 0; j < f->members[k].len; j++) {
        int v = f->members[k].data[j], dup = 0;
        for (int i = 0; i < vals.len; i++) dup |= vals.data[i] == v;
        if (!dup) wk_vec_push(&vals, v);
    }
    for (int i = 1; i < vals.len; i++) /* insertion sort: graph order */
        for (int j = i; j > 0 && vals.data[j - 1] > vals.data[j]; j--) {
            int t = vals.data[j];
            vals.data[j] = vals.data[j - 1];
            vals.data[j - 1] = t;
        }
    WkStr s = {0};
    wk_str_append(&s, "");
    for (int i = 0; i < vals.len; i++) {
        const WkOpInfo *info = wk_op_info(L->bufs[vals.data[i]].op);
        wk_str_printf(&s, "%s%s", i ? " " : "", info ? info->name : "?");
    }
    wk_vec_free(&vals);
    return s.data;
}

static int build_kernel(Fuse *f, int k) {
    WkSchedule *S = f->S;
    WkLoopIR *L = S->L;
    WkSchedKernel *K = &S->kernels[k];
    const IntVec *m = &f->members[k];
    const WkLBuf *rep = &L->bufs[m->data[0]];
    int nst = m->len;
    f->cur = k;
    f->inlined.len = 0;
    K->kind = rep->kind == WK_LBUF_REDUCTION ? WK_SCHED_REDUCTION : WK_SCHED_POINTWISE;
    K->nstores = nst;
    K->stores = wk_xcalloc((size_t)nst, sizeof *K->stores);

    /* call each stored value's definition (with inlining) at the canonical index */
    const WkLExpr **exprs = wk_xcalloc((size_t)nst, sizeof *exprs);
    const WkSym *canon[WK_MAX_DIMS];
    for (int d = 0; d < rep->ndim; d++) canon[d] = rep->sizes[d] == 1 ? wk_sym_const(L->syms, 0) : L->ivar[d];
    int nred = 0;
    int64_t red_sizes[WK_MAX_DIMS];
    for (int j = 0; j < nst; j++) {
        const WkLBuf *b = &L->bufs[m->data[j]];
        exprs[j] = wk_lower_subst(L, b->body, NULL, 0, NULL, 0, inline_in_kernel, f);
    }
    if (K->kind == WK_SCHED_REDUCTION) {
        nred = exprs[0]->nred;
        memcpy(red_sizes, exprs[0]->red_sizes, sizeof red_sizes);
    }

    /* every access: the reads, the index values (argmax positions, which
     * collapse with the loops they name), then the stores */
    ExprVec loads = {0}, idxs = {0};
    WkLowerMap seen = {0};
    for (int j = 0; j < nst; j++) collect(exprs[j], &seen, WK_LX_LOAD, NULL, &loads);
    wk_lower_map_free(&seen);
    for (int j = 0; j < nst; j++) collect(exprs[j], &seen, WK_LX_INDEX, NULL, &idxs);
    wk_lower_map_free(&seen);
    int nl = loads.len, nx = idxs.len;
    int nacc = nl + nx + nst;
    Affine *acc = wk_xcalloc((size_t)nacc, sizeof *acc);
    const WkSym **raw = wk_xcalloc((size_t)nacc, sizeof *raw);
    int affine = 1;
    /* the loop variables' ranges: view chains' divisions and remainders
     * cancel within them, so more accesses are affine */
    int bvars[2 * WK_MAX_DIMS], nb = 0;
    int64_t bext[2 * WK_MAX_DIMS];
    for (int d = 0; d < rep->ndim; d++, nb++) bvars[nb] = L->ivar_id[d], bext[nb] = rep->sizes[d];
    for (int d = 0; d < nred; d++, nb++) bvars[nb] = L->rvar_id[d], bext[nb] = red_sizes[d];
    for (int a = 0; a < nacc; a++) {
        if (a >= nl && a < nl + nx) {
            raw[a] = idxs.data[a - nl]->idx[0];
        } else {
            int value = a < nl ? loads.data[a]->buf : m->data[a - nl - nx];
            const WkSym *const *idx = a < nl ? loads.data[a]->idx : canon;
            raw[a] = linear_offset(S, value, idx);
        }
        raw[a] = wk_sym_simplify_bounded(L->syms, raw[a], bvars, bext, nb);
        if (affine_of(L, raw[a], 1, &acc[a]) < 0) affine = 0;
    }
    Collapse ci, cr;
    fill_collapse(&ci, rep->ndim, rep->sizes, acc, nacc, 0, affine);
    fill_collapse(&cr, nred, red_sizes, acc, nacc, 1, affine);

    WkLowerMap reads = {0}, memo = {0};
    for (int a = 0; a < nacc; a++) {
        const WkSym *off = affine ? collapsed_offset(L, &acc[a], &ci, &cr) : raw[a];
        if (a < nl) {
            const WkLExpr *ld = loads.data[a];
            wk_lower_map_put(&reads, ld, wk_lower_read(L, ld->dtype, S->value_buf[ld->buf], off));
        } else if (a < nl + nx) {
            wk_lower_map_put(&reads, idxs.data[a - nl], wk_lower_index(L, off));
        } else {
            WkSchedStore *st = &K->stores[a - nl - nx];
            st->value = m->data[a - nl - nx];
            st->buf = S->value_buf[st->value];
            st->offset = off;
        }
    }
    for (int j = 0; j < nst; j++) {
        const WkLExpr *e = exprs[j];
        if (e->op == WK_LX_REDUCE)
            e = wk_lower_reduce(L, e->rop, e->dtype, to_reads(S, e->a[0], &reads, &memo), cr.n, cr.size);
        else
            e = to_reads(S, e, &reads, &memo);
        K->stores[j].expr = e;
    }
    if (K->kind == WK_SCHED_REDUCTION && affine && ci.n > 0 && cr.n > 0) {
        /* loads of one element per reduced index (a layer norm's per-row
         * mean and rstd in its weight's gradient) are broadcast along the
         * outputs: small, they do not decide how the big ones are walked */
        int unit_i = 0, unit_r = 0;
        for (int a = 0; a < nl; a++) {
            int uses_r = 0, uses_i = 0;
            for (int d = 0; d < nred; d++) uses_r |= acc[a].cr[d] != 0;
            for (int d = 0; d < WK_MAX_DIMS; d++) uses_i |= acc[a].ci[d] != 0;
            if (!uses_r || !uses_i) continue;
            unit_i |= acc[a].ci[ci.inner[ci.n - 1]] == 1;
            unit_r |= acc[a].cr[cr.inner[cr.n - 1]] == 1;
        }
        K->reduce_outer = unit_i && !unit_r;
    }
    K->nloops = ci.n;
    K->numel = 1;
    for (int j = 0; j < ci.n; j++) K->numel *= (K->sizes[j] = ci.size[j]);
    K->nred = cr.n;
    K->red_numel = 1;
    for (int j = 0; j < cr.n; j++) K->red_numel *= (K->red_sizes[j] = cr.size[j]);
    K->desc = describe(S, f, k);

    wk_lower_map_free(&reads);
    wk_lower_map_free(&memo);
    wk_vec_free(&loads);
    wk_vec_free(&idxs);
    free(acc);
    free(raw);
    free(exprs);
    return 0;
}

/* Requires: wk_sched_materialise has run (S->value_buf, S->bufs).
 * Provides: S->kernels in execution order, each store's expression reading
 *           memory through READs over the kernel's (collapsed) loop vars. */
int wk_sched_fuse(WkSchedule *S) {
    int rc = 0;
    Fuse f = {S, NULL, NULL, 0, -1, {0}};
    f.kernel_of = wk_xmalloc(sizeof(int) * (size_t)(S->L->nbufs + 1));
    for (int v = 0; v < S->L->nbufs; v++) f.kernel_of[v] = -1;
    fill_groups(&f);
    S->nkernels = f.nkernels;
    S->kernels = wk_xcalloc((size_t)(f.nkernels + 1), sizeof *S->kernels);
    for (int k = 0; k < f.nkernels && rc == 0; k++) rc = build_kernel(&f, k);
    for (int k = 0; k < f.nkernels; k++) wk_vec_free(&f.members[k]);
    free(f.members);
    free(f.kernel_of);
    wk_vec_free(&f.inlined);
    return rc;
}
