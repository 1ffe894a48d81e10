/* schedule.c — the schedule's lifetime, its flat pass order (materialise,
 * fuse, fuse_rows), its printed form and its verifier. */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

WkSchedule *wk_sched_build(WkLoopIR *L) { return wk_sched_build_for(L, 0); }

WkSchedule *wk_sched_build_for(WkLoopIR *L, int gpu) {
    WkSchedule *S = wk_xcalloc(1, sizeof *S);
    S->L = L;
    S->gpu = gpu;
    S->value_buf = wk_xcalloc((size_t)L->nbufs + 1, sizeof(int));
    if (wk_sched_materialise(S) < 0) goto error;
    if (wk_sched_fuse(S) < 0) goto error;
    if (wk_sched_fuse_rows(S) < 0) goto error;
    wk_sched_place_temps(S);
    return S;
error:
    wk_sched_free(S);
    return NULL;
}

void wk_sched_free(WkSchedule *S) {
    if (!S) return;
    for (int k = 0; k < S->nkernels; k++) {
        free(S->kernels[k].stores);
        free(S->kernels[k].desc);
    }
    free(S->kernels);
    free(S->bufs);
    free(S->buf_value);
    free(S->value_buf);
    free(S->output_buf);
    free(S);
}

static void print_sizes(WkStr *s, const int64_t *sizes, int n) {
    wk_str_append(s, "[");
    for (int d = 0; d < n; d++) wk_str_printf(s, "%s%lld", d ? ", " : "", (long long)sizes[d]);
    wk_str_append(s, "]");
}

char *wk_sched_print(const WkSchedule *S) {
    static const char *const kinds[] = {"input", "output", "temp"};
    WkStr s = {0};
    wk_str_append(&s, "");
    for (int b = 0; b < S->nbufs; b++) {
        const WkBufferPlan *p = &S->bufs[b];
        wk_str_printf(&s, "b%d: %s %s v%d ", b, kinds[p->kind], wk_dtype_name(p->dtype), S->buf_value[b]);
        print_sizes(&s, p->sizes, p->ndim);
        wk_str_append(&s, " strides ");
        print_sizes(&s, p->strides, p->ndim);
        wk_str_append(&s, "\n");
    }
    for (int k = 0; k < S->nkernels; k++) {
        const WkSchedKernel *K = &S->kernels[k];
        wk_str_printf(&s, "kernel %d: %s {%s} ", k, K->kind == WK_SCHED_REDUCTION ? "reduction" : "pointwise",
                      K->desc);
        if (K->group != k) wk_str_printf(&s, "(rows of kernel %d) ", K->group);
        print_sizes(&s, K->sizes, K->nloops);
        if (K->kind == WK_SCHED_REDUCTION) {
            wk_str_append(&s, " over ");
            print_sizes(&s, K->red_sizes, K->nred);
        }
        wk_str_append(&s, "\n");
        for (int j = 0; j < K->nstores; j++) {
            const WkSchedStore *st = &K->stores[j];
            wk_lower_print_expr(S->L, st->expr, &s);
            wk_str_printf(&s, "  b%d[", st->buf);
            wk_sym_to_c(S->L->syms, st->offset, &s, NULL, NULL);
            wk_str_printf(&s, "] = %%%d\n", st->expr->id);
        }
    }
    return s.data;
}

static int check_expr(const WkSchedule *S, const WkSchedKernel *K, int k, const WkLExpr *e,
                      const int *ready_kernel, int root, WkLowerMap *seen) {
    if (wk_lower_map_get(seen, e)) return 0;
    wk_lower_map_put(seen, e, e);
    if (e->op == WK_LX_LOAD) {
        wk_error_set("schedule check: kernel %d still LOADs v%d", k, e->buf);
        return -1;
    }
    if (e->op == WK_LX_REDUCE && !(root && K->kind == WK_SCHED_REDUCTION)) {
        wk_error_set("schedule check: kernel %d: misplaced REDUCE", k);
        return -1;
    }
    if (e->op == WK_LX_READ) {
        int rk = ready_kernel[e->buf];
        int ok = rk == -1 || (rk >= 0 && rk < k); /* -1: an input */
        for (int j = 0; j < K->nstores && rk == k; j++)
            ok |= K->stores[j].buf == e->buf && K->stores[j].offset == e->idx[0];
        if (!ok) {
            wk_error_set("schedule check: kernel %d reads b%d before it is written", k, e->buf);
            return -1;
        }
    }
    for (int a = 0; a < e->nargs; a++)
        if (check_expr(S, K, k, e->a[a], ready_kernel, 0, seen) < 0) return -1;
    return 0;
}

static int check_row_reads(const WkSchedule *S, int g, int k, const WkLExpr *e, WkLowerMap *seen) {
    if (wk_lower_map_get(seen, e)) return 0;
    wk_lower_map_put(seen, e, e);
    if (e->op == WK_LX_READ)
        for (int m = g; m < k; m++)
            for (int j = 0; j < S->kernels[m].nstores; j++)
                if (S->kernels[m].stores[j].buf == e->buf &&
                    !wk_sched_row_read_ok(S, &S->kernels[m], &S->kernels[m].stores[j], &S->kernels[k], e->idx[0])) {
                    wk_error_set("schedule check: row phase %d reads b%d off the row phase %d stored", k, e->buf, m);
                    return -1;
                }
    for (int a = 0; a < e->nargs; a++)
        if (check_row_reads(S, g, k, e->a[a], seen) < 0) return -1;
    return 0;
}

int wk_sched_check(const WkSchedule *S) {
    int rc = 0;
    int *ready = wk_xmalloc(sizeof(int) * (size_t)(S->nbufs + 1));
    /* ready[b]: -1 an input, -2 not written yet, else the kernel writing it */
    for (int b = 0; b < S->nbufs; b++) ready[b] = S->bufs[b].kind == WK_BUF_INPUT ? -1 : -2;
    for (int k = 0; k < S->nkernels && rc == 0; k++) {
        const WkSchedKernel *K = &S->kernels[k];
        for (int j = 0; j < K->nstores && rc == 0; j++) {
            int b = K->stores[j].buf;
            if (b < 0 || b >= S->nbufs || S->bufs[b].kind == WK_BUF_INPUT || ready[b] != -2) {
                wk_error_set("schedule check: kernel %d stores b%d twice or into an input", k, b);
                rc = -1;
            } else {
                ready[b] = k;
            }
        }
    }
    for (int k = 0; k < S->nkernels && rc == 0; k++) {
        const WkSchedKernel *K = &S->kernels[k];
        WkLowerMap seen = {0};
        for (int j = 0; j < K->nstores && rc == 0; j++) {
            rc = check_expr(S, K, k, K->stores[j].expr, ready, 1, &seen);
            if (rc == 0 && j > 0 && K->stores[j].expr->op == WK_LX_REDUCE) {
                wk_error_set("schedule check: kernel %d: REDUCE in an epilogue store", k);
                rc = -1;
            }
        }
        wk_lower_map_free(&seen);
    }
    /* row groups: consecutive, one outer loop, phase reads at the stored row */
    for (int k = 0; k < S->nkernels && rc == 0; k++) {
        const WkSchedKernel *K = &S->kernels[k];
        int g = K->group;
        if (g == k) continue;
        if (g < 0 || g > k || S->kernels[k - 1].group != g || K->nloops < 1 ||
            K->sizes[0] != S->kernels[g].sizes[0]) {
            wk_error_set("schedule check: kernel %d: bad row group %d", k, g);
            rc = -1;
            break;
        }
        WkLowerMap seen = {0};
        for (int j = 0; j < K->nstores && rc == 0; j++)
            rc = check_row_reads(S, g, k, K->stores[j].expr, &seen);
        wk_lower_map_free(&seen);
    }
    for (int b = 0; b < S->nbufs && rc == 0; b++)
        if (S->bufs[b].kind != WK_BUF_INPUT && ready[b] == -2) {
            wk_error_set("schedule check: b%d is never written", b);
            rc = -1;
        }
    free(ready);
    return rc;
}
