/* rows.c — row fusion: consecutive kernels that share their outermost loop
 * (a softmax's max, sum and normalisation over the same rows) run as phases
 * of one outer loop, so each row is read from memory once and stays in
 * cache for the later phases. Kernels keep their own inner loop nests.
 *
 * A pointwise kernel whose values a row reduction reads may be the group's
 * first phase: a residual sum h = x + y that a layer norm normalises and a
 * later kernel reads again is computed, stored and normalised in one pass
 * over each row, instead of stored by one kernel and read back by the next.
 * fuse.c collapses such a sum into one loop when its accesses are
 * contiguous; it is split back into rows x cols here, only when it joins.
 *
 * A kernel that could join a group but was created after unrelated kernels
 * (a layer norm's backward: its per-row gradient comes after the weight's
 * column sums in graph order) moves up to the group when nothing between
 * them stores what it reads or reads what it stores: otherwise it reads
 * the rows from memory a second time in a kernel of its own.
 *
 * Requires: wk_sched_fuse has run (kernels in order, READ offsets final).
 * Provides: WkSchedKernel.group: the first kernel of the row group each
 *           kernel belongs to (itself when it runs alone).
 */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

/* Fewer rows than this leave threads idle when only rows are parallel: such
 * kernels keep their own parallel reductions. */
enum { ROWS_MIN = 32 };

typedef WkVec(const WkLExpr *) ExprVec;

static void collect_reads(const WkLExpr *e, WkLowerMap *seen, ExprVec *out) {
    if (wk_lower_map_get(seen, e)) return;
    wk_lower_map_put(seen, e, e);
    if (e->op == WK_LX_READ) wk_vec_push(out, e);
    for (int k = 0; k < e->nargs; k++) collect_reads(e->a[k], seen, out);
}

static int uses_only_i0(const WkLoopIR *L, const WkSym *s) {
    if (s->kind == WK_SYM_CONST) return 1;
    if (s->kind == WK_SYM_VAR) return s->var == L->ivar_id[0];
    return uses_only_i0(L, s->a) && uses_only_i0(L, s->b);
}

/* An offset c0 + sum coef[k] * var[k] over at most 2 * WK_MAX_DIMS loop variables. */
typedef struct {
    int n;
    int var[2 * WK_MAX_DIMS];
    int64_t coef[2 * WK_MAX_DIMS];
    int64_t c0;
} RowAffine;

static int row_affine(const WkSym *s, int64_t mult, RowAffine *a) {
    int64_t v;
    switch (s->kind) {
    case WK_SYM_CONST: a->c0 += mult * s->value; return 0;
    case WK_SYM_VAR:
        for (int k = 0; k < a->n; k++)
            if (a->var[k] == s->var) {
                a->coef[k] += mult;
                return 0;
            }
        if (a->n == 2 * WK_MAX_DIMS) return -1;
        a->var[a->n] = s->var;
        a->coef[a->n++] = mult;
        return 0;
    case WK_SYM_ADD: return row_affine(s->a, mult, a) < 0 ? -1 : row_affine(s->b, mult, a);
    case WK_SYM_MUL:
        if (wk_sym_is_const(s->a, &v)) return row_affine(s->b, mult * v, a);
        if (wk_sym_is_const(s->b, &v)) return row_affine(s->a, mult * v, a);
        return -1;
    default: return -1;
    }
}

static int64_t coef_of(const RowAffine *a, int var) {
    for (int k = 0; k < a->n; k++)
        if (a->var[k] == var) return a->coef[k];
    return 0;
}

/* The extent of loop variable var in kernel K: its i1.. or r0.., else 0
 * (i0, or a variable that is no loop of K). */
static int64_t inner_extent(const WkLoopIR *L, const WkSchedKernel *K, int var) {
    for (int d = 1; d < K->nloops; d++)
        if (L->ivar_id[d] == var) return K->sizes[d];
    for (int d = 0; d < K->nred; d++)
        if (L->rvar_id[d] == var) return K->red_sizes[d];
    return 0;
}

int wk_sched_row_read_ok(const WkSchedule *S, const WkSchedKernel *Ks, const WkSchedStore *st,
                         const WkSchedKernel *Kr, const WkSym *read) {
    const WkLoopIR *L = S->L;
    if (read == st->offset && uses_only_i0(L, st->offset)) return 1;
    /* the store covers its row densely: offset = R*i0 + u*i1 + c0 over a
     * [rows, cols] pointwise nest */
    RowAffine sa = {0}, ra = {0};
    if (Ks->kind != WK_SCHED_POINTWISE || Ks->nloops != 2 || row_affine(st->offset, 1, &sa) < 0 ||
        row_affine(read, 1, &ra) < 0)
        return 0;
    int i0 = L->ivar_id[0], i1 = L->ivar_id[1];
    int64_t row_stride = coef_of(&sa, i0), unit = coef_of(&sa, i1);
    for (int k = 0; k < sa.n; k++)
        if (sa.coef[k] != 0 && sa.var[k] != i0 && sa.var[k] != i1) return 0;
    if (unit == 0 || coef_of(&ra, i0) != row_stride || (ra.c0 - sa.c0) % unit != 0) return 0;
    /* the read: R*i0 + u*t + c0 where t, a constant plus a non-negative
     * combination of the reading kernel's inner loops, stays within
     * [0, cols): an element this row's store wrote (a slice of the row) */
    int64_t tmax = (ra.c0 - sa.c0) / unit;
    if (tmax < 0 || tmax >= Ks->sizes[1]) return 0;
    for (int k = 0; k < ra.n; k++) {
        if (ra.var[k] == i0 || ra.coef[k] == 0) continue;
        int64_t ext = inner_extent(L, Kr, ra.var[k]);
        if (ext <= 0 || ra.coef[k] % unit != 0 || ra.coef[k] / unit < 0) return 0;
        tmax += ra.coef[k] / unit * (ext - 1);
        if (tmax >= Ks->sizes[1]) return 0;
    }
    return 1;
}

static int rowable(const WkSchedKernel *K) {
    if (K->reduce_outer || K->nloops < 1 || K->numel == 0) return 0;
    return K->kind == WK_SCHED_POINTWISE || K->nloops == 1;
}

/* Whether kernel K may run as a phase of the row group of kernels g..k-1
 * (F: its first, which may stand in for kernels[g]): same outer loop, and
 * whatever it reads from the group's earlier phases was stored in the very
 * row iteration it reads (wk_sched_row_read_ok). *reads_first: whether it
 * reads something F stores. */
static int can_join(const WkSchedule *S, const WkSchedKernel *F, int g, int k, const WkSchedKernel *K,
                    int *reads_first) {
    *reads_first = 0;
    if (!rowable(K) || K->sizes[0] != F->sizes[0] || F->sizes[0] < ROWS_MIN) return 0;
    ExprVec reads = {0};
    WkLowerMap seen = {0};
    for (int j = 0; j < K->nstores; j++) collect_reads(K->stores[j].expr, &seen, &reads);
    wk_lower_map_free(&seen);
    int ok = 1;
    for (int a = 0; a < reads.len && ok; a++) {
        const WkLExpr *rd = reads.data[a];
        for (int m = g; m < k && ok; m++) {
            const WkSchedKernel *M = m == g ? F : &S->kernels[m];
            for (int j = 0; j < M->nstores && ok; j++) {
                const WkSchedStore *st = &M->stores[j];
                if (st->buf != rd->buf) continue;
                ok = wk_sched_row_read_ok(S, M, st, K, rd->idx[0]);
                *reads_first |= m == g;
            }
        }
    }
    wk_vec_free(&reads);
    return ok;
}

/* P (one loop of rows * cols iterations) as a [rows, cols] nest: i0 becomes
 * i0 * cols + i1 in every offset. Fills *out and its stores (caller frees). */
static void split_into_rows(WkSchedule *S, const WkSchedKernel *P, int64_t rows, WkSchedKernel *out) {
    WkLoopIR *L = S->L;
    int64_t cols = P->numel / rows;
    *out = *P;
    out->nloops = 2;
    out->sizes[0] = rows;
    out->sizes[1] = cols;
    out->stores = wk_xcalloc((size_t)P->nstores + 1, sizeof *out->stores);
    const WkSym *flat = wk_sym_add(L->syms, wk_sym_mul(L->syms, L->ivar[0], wk_sym_const(L->syms, cols)), L->ivar[1]);
    int vars[2] = {L->ivar_id[0], L->ivar_id[1]};
    int64_t ext[2] = {rows, cols};
    for (int j = 0; j < P->nstores; j++) {
        out->stores[j] = P->stores[j];
        out->stores[j].offset = wk_sym_simplify_bounded(
            L->syms, wk_lower_subst_sym(L, P->stores[j].offset, &flat, 1, NULL, 0), vars, ext, 2);
        out->stores[j].expr = wk_lower_subst(L, P->stores[j].expr, &flat, 1, NULL, 0, NULL, NULL);
    }
}

/* Whether kernel K reads plan buffer buf. */
static int kernel_reads(const WkSchedKernel *K, int buf) {
    ExprVec reads = {0};
    WkLowerMap seen = {0};
    for (int j = 0; j < K->nstores; j++) collect_reads(K->stores[j].expr, &seen, &reads);
    wk_lower_map_free(&seen);
    int found = 0;
    for (int a = 0; a < reads.len && !found; a++) found = reads.data[a]->buf == buf;
    wk_vec_free(&reads);
    return found;
}

static int kernel_stores(const WkSchedKernel *K, int buf) {
    for (int j = 0; j < K->nstores; j++)
        if (K->stores[j].buf == buf) return 1;
    return 0;
}

/* Whether A and B may run in either order: neither reads or stores what the
 * other stores. */
static int independent(const WkSchedKernel *A, const WkSchedKernel *B) {
    for (int j = 0; j < A->nstores; j++)
        if (kernel_reads(B, A->stores[j].buf) || kernel_stores(B, A->stores[j].buf)) return 0;
    for (int j = 0; j < B->nstores; j++)
        if (kernel_reads(A, B->stores[j].buf)) return 0;
    return 1;
}

/* Whether K reads a buffer that one of kernels g..e reads or stores: what
 * makes it worth running as a phase of their group. */
static int shares_rows(const WkSchedule *S, int g, int e, const WkSchedKernel *K) {
    ExprVec reads = {0};
    WkLowerMap seen = {0};
    for (int j = 0; j < K->nstores; j++) collect_reads(K->stores[j].expr, &seen, &reads);
    wk_lower_map_free(&seen);
    int found = 0;
    for (int a = 0; a < reads.len && !found; a++)
        for (int m = g; m <= e && !found; m++)
            found = kernel_stores(&S->kernels[m], reads.data[a]->buf) || kernel_reads(&S->kernels[m], reads.data[a]->buf);
    wk_vec_free(&reads);
    return found;
}

/* Moves kernel `from` to position `to` (< from), shifting the kernels between
 * one place on; group indices of the shifted kernels follow them. */
static void move_kernel_up(WkSchedule *S, int from, int to) {
    WkSchedKernel K = S->kernels[from];
    memmove(&S->kernels[to + 1], &S->kernels[to], sizeof K * (size_t)(from - to));
    S->kernels[to] = K;
    for (int m = to + 1; m <= from; m++)
        if (S->kernels[m].group >= to) S->kernels[m].group++;
}

/* The inverse: kernel `from` back to position `to` (> from). */
static void move_kernel_down(WkSchedule *S, int from, int to) {
    WkSchedKernel K = S->kernels[from];
    for (int m = from + 1; m <= to; m++)
        if (S->kernels[m].group > from) S->kernels[m].group--;
    memmove(&S->kernels[from], &S->kernels[from + 1], sizeof K * (size_t)(to - from));
    S->kernels[to] = K;
}

/* Kernels an out-of-place kernel may move past to reach its group: a bound
 * on the search, which is quadratic in it. */
enum { HOIST_MAX = 8 };

/* Kernel k has no group: moves it up behind the nearest earlier row group
 * it can join, past kernels independent of it. Returns whether it moved
 * (it is then at the returned group's end, with its group set). */
static int hoist_into_group(WkSchedule *S, int k) {
    const WkSchedKernel *K = &S->kernels[k];
    if (!rowable(K) || K->sizes[0] < ROWS_MIN) return 0;
    for (int p = k - 1; p >= 0 && p >= k - HOIST_MAX; p--) {
        const WkSchedKernel *P = &S->kernels[p];
        /* p must end its group: K joins behind the group's last phase */
        if (p < k - 1 && rowable(P) && P->sizes[0] == K->sizes[0] && S->kernels[p + 1].group != P->group) {
            int g = P->group, reads_first;
            const WkSchedKernel *F = &S->kernels[g];
            int grouped_reduction = 0;
            for (int m = g; m <= p; m++) grouped_reduction |= S->kernels[m].kind == WK_SCHED_REDUCTION;
            if (F->sizes[0] == K->sizes[0] && grouped_reduction && shares_rows(S, g, p, K)) {
                move_kernel_up(S, k, p + 1);
                if (can_join(S, &S->kernels[g], g, p + 1, &S->kernels[p + 1], &reads_first)) {
                    S->kernels[p + 1].group = g;
                    return 1;
                }
                move_kernel_down(S, p + 1, k);
            }
        }
        if (!independent(P, K)) return 0;
    }
    return 0;
}

/* Requires: kernels from wk_sched_fuse. Provides: K->group for every kernel. */
int wk_sched_fuse_rows(WkSchedule *S) {
    for (int k = 0; k < S->nkernels; k++) {
        WkSchedKernel *K = &S->kernels[k], *prev = k ? &S->kernels[k - 1] : NULL;
        K->group = k;
        if (!prev) continue;
        int g = prev->group, reads_first;
        /* a lone one-loop pointwise kernel that this row kernel reads: its
         * first phase, as rows */
        if (g == k - 1 && prev->kind == WK_SCHED_POINTWISE && prev->nloops == 1 &&
            K->kind == WK_SCHED_REDUCTION && rowable(K) && K->sizes[0] >= ROWS_MIN && prev->numel > K->sizes[0] && prev->numel % K->sizes[0] == 0) {
            WkSchedKernel split;
            split_into_rows(S, prev, K->sizes[0], &split);
            if (can_join(S, &split, g, k, K, &reads_first) && reads_first) {
                free(prev->stores);
                *prev = split;
                K->group = g;
                continue;
            }
            free(split.stores);
        }
        if (rowable(prev) && can_join(S, &S->kernels[g], g, k, K, &reads_first)) K->group = g;
        else hoist_into_group(S, k);
    }
    /* a group of pointwise phases alone gains nothing: fusion already put
     * same-shaped pointwise work into one nest */
    for (int k = 0; k < S->nkernels;) {
        int e = k + 1, red = S->kernels[k].kind == WK_SCHED_REDUCTION;
        while (e < S->nkernels && S->kernels[e].group == k) red |= S->kernels[e++].kind == WK_SCHED_REDUCTION;
        if (!red)
            for (int j = k; j < e; j++) S->kernels[j].group = j;
        k = e;
    }
    return 0;
}
