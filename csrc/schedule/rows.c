/* rows.c — row fusion: consecutive kernels that share their outermost loop
 * (a softmax's max, sum and normalisation over the same rows) run as phases
 * of one outer loop, so each row is read from memory once and stays in
 * cache for the later phases. Kernels keep their own inner loop nests.
 *
 * Requires: wk_sched_fuse has run (kernels in order, READ offsets final).
 * Provides: WkSchedKernel.group: the first kernel of the row group each
 *           kernel belongs to (itself when it runs alone).
 */
#include "schedule.h"

#include <stdlib.h>

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

static int rowable(const WkSchedKernel *K) {
    if (K->reduce_outer || K->nloops < 1 || K->numel == 0) return 0;
    return K->kind == WK_SCHED_POINTWISE || K->nloops == 1;
}

/* Whether kernel k may run as a phase of the row group starting at g: same
 * outer loop, and whatever it reads from the group's earlier phases was
 * stored at the very row it reads (the same offset, over i0 alone). */
static int can_join(const WkSchedule *S, int g, int k) {
    const WkSchedKernel *F = &S->kernels[g], *K = &S->kernels[k];
    if (!rowable(K) || K->sizes[0] != F->sizes[0] || F->sizes[0] < ROWS_MIN) return 0;
    ExprVec reads = {0};
    WkLowerMap seen = {0};
    for (int j = 0; j < K->nstores; j++) collect_reads(K->stores[j].expr, &seen, &reads);
    wk_lower_map_free(&seen);
    int ok = 1;
    for (int a = 0; a < reads.len && ok; a++) {
        const WkLExpr *rd = reads.data[a];
        for (int m = g; m < k && ok; m++)
            for (int j = 0; j < S->kernels[m].nstores; j++) {
                const WkSchedStore *st = &S->kernels[m].stores[j];
                if (st->buf == rd->buf)
                    ok = st->offset == rd->idx[0] && uses_only_i0(S->L, st->offset);
            }
    }
    wk_vec_free(&reads);
    return ok;
}

/* Requires: kernels from wk_sched_fuse. Provides: K->group for every kernel. */
int wk_sched_fuse_rows(WkSchedule *S) {
    for (int k = 0; k < S->nkernels; k++) {
        WkSchedKernel *K = &S->kernels[k];
        K->group = k;
        if (k == 0 || !rowable(&S->kernels[k - 1])) continue;
        int g = S->kernels[k - 1].group;
        if (can_join(S, g, k)) K->group = g;
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
