/* materialise.c — which values get memory: graph inputs (they have it),
 * graph outputs, reduction results, and pointwise intermediates whose
 * recomputation in every consuming kernel would cost more than a bound.
 * Everything else is inlined into its consumers. Also builds the buffer plan
 * (INPUT per graph input, OUTPUT per distinct output value, TEMP for the
 * rest) and maps graph outputs to plan buffers.
 */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

/* Recomputing more than this many weighted ops per element of a value
 * (summed over the extra kernels or broadcast copies that would recompute
 * it) costs more than a store and reloads: materialise it instead. */
enum { RECOMPUTE_BOUND = 16 };

enum { MAT_INLINED = -1, MAT_YES = -2 };

static int op_cost(const WkLExpr *e) {
    switch (e->op) {
    case WK_LX_CONST: return 0;
    case WK_LX_EXP: case WK_LX_LOG: case WK_LX_TANH: case WK_LX_POW:
    case WK_LX_SIN: case WK_LX_COS: case WK_LX_TAN: case WK_LX_ASIN: case WK_LX_ACOS: case WK_LX_ATAN:
    case WK_LX_SINH: case WK_LX_COSH: case WK_LX_ASINH: case WK_LX_ACOSH: case WK_LX_ATANH:
    case WK_LX_ERF: case WK_LX_ERFC: case WK_LX_ERFINV: case WK_LX_LOG1P: case WK_LX_EXPM1:
    case WK_LX_LOG2: case WK_LX_LOG10: case WK_LX_EXP2: case WK_LX_ATAN2: case WK_LX_FMOD:
    case WK_LX_FLOORDIV: case WK_LX_REM: return 4;
    case WK_LX_DIV: case WK_LX_SQRT: return 2;
    case WK_LX_REDUCE: return 0;
    default: return 1;
    }
}

static int count_cost(const WkLExpr *e, WkLowerMap *seen) {
    if (wk_lower_map_get(seen, e)) return 0;
    wk_lower_map_put(seen, e, e);
    int c = op_cost(e);
    for (int k = 0; k < e->nargs; k++) c += count_cost(e->a[k], seen);
    return c;
}

static int is_inlined(void *ctx, int value) {
    const WkSchedule *S = ctx;
    return S->value_buf[value] == MAT_INLINED;
}

int wk_sched_inline_cost(WkSchedule *S, int value) {
    const WkLBuf *b = &S->L->bufs[value];
    if (!b->body) return 0;
    const WkLExpr *e = wk_lower_subst(S->L, b->body, NULL, 0, NULL, 0, is_inlined, S);
    WkLowerMap seen = {0};
    int c = count_cost(e, &seen);
    wk_lower_map_free(&seen);
    return c;
}

static void collect_loads(const WkLExpr *e, WkLowerMap *seen, int *out, int *nout) {
    if (wk_lower_map_get(seen, e)) return;
    wk_lower_map_put(seen, e, e);
    if (e->op == WK_LX_LOAD) {
        for (int k = 0; k < *nout; k++)
            if (out[k] == e->buf) return;
        out[(*nout)++] = e->buf;
    }
    for (int k = 0; k < e->nargs; k++) collect_loads(e->a[k], seen, out, nout);
}

typedef WkVec(int) IntVec;

static void add_unique(IntVec *v, int x) {
    for (int k = 0; k < v->len; k++)
        if (v->data[k] == x) return;
    wk_vec_push(v, x);
}

static int same_sizes(const WkLBuf *a, const WkLBuf *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d]) return 0;
    return 1;
}

static int64_t work_of(const WkLBuf *u) {
    int64_t w = u->numel;
    if (u->kind == WK_LBUF_REDUCTION)
        for (int k = 0; k < u->body->nred; k++) w *= u->body->red_sizes[k];
    return w;
}

/* Decides, consumers first, whether each pointwise intermediate is inlined.
 * Loop invariant: cons[u] holds, for every value u after v, the
 * materialised values whose kernels would recompute u. */
static void fill_materialised(WkSchedule *S) {
    WkLoopIR *L = S->L;
    int n = L->nbufs;
    IntVec *users = wk_xcalloc((size_t)n, sizeof *users);
    IntVec *cons = wk_xcalloc((size_t)n, sizeof *cons);
    int *loads = wk_xmalloc(sizeof(int) * (size_t)(n + 1));
    char *live = wk_xcalloc((size_t)n + 1, 1);
    for (int k = 0; k < L->noutputs; k++) live[L->output_bufs[k]] = 1;
    /* values come in topological order: walking back, a live value's
     * loads become live; dead work (an unused reduction) gets no kernel */
    for (int v = n - 1; v >= 0; v--) {
        const WkLBuf *b = &L->bufs[v];
        if (!b->body || !live[v]) continue;
        WkLowerMap seen = {0};
        int nl = 0;
        collect_loads(b->body, &seen, loads, &nl);
        wk_lower_map_free(&seen);
        for (int k = 0; k < nl; k++) {
            live[loads[k]] = 1;
            add_unique(&users[loads[k]], v);
        }
    }
    for (int v = 0; v < n; v++) {
        const WkLBuf *b = &L->bufs[v];
        S->value_buf[v] = b->kind == WK_LBUF_INPUT || (live[v] && (b->kind == WK_LBUF_REDUCTION || b->is_output))
                              ? MAT_YES
                              : MAT_INLINED;
    }
    free(live);
    for (int v = n - 1; v >= 0; v--) {
        const WkLBuf *b = &L->bufs[v];
        if (b->kind == WK_LBUF_INPUT) continue;
        if (S->value_buf[v] == MAT_INLINED) {
            for (int k = 0; k < users[v].len; k++) {
                int u = users[v].data[k];
                if (S->value_buf[u] == MAT_YES) add_unique(&cons[v], u);
                else
                    for (int j = 0; j < cons[u].len; j++) add_unique(&cons[v], cons[u].data[j]);
            }
            /* work per kernel: pointwise consumers of one shape share a loop nest */
            int64_t total = 0, nkernels = 0;
            for (int k = 0; k < cons[v].len; k++) {
                const WkLBuf *u = &L->bufs[cons[v].data[k]];
                int dup = 0;
                for (int j = 0; j < k && u->kind == WK_LBUF_POINTWISE; j++) {
                    const WkLBuf *w = &L->bufs[cons[v].data[j]];
                    dup |= w->kind == WK_LBUF_POINTWISE && same_sizes(u, w);
                }
                if (!dup) {
                    total += work_of(u);
                    nkernels++;
                }
            }
            if (b->numel > 0 && total > b->numel) {
                int cost = wk_sched_inline_cost(S, v);
                double copies = (double)total / (double)b->numel - 1.0;
                /* GPU: what matters is the arithmetic each consuming kernel adds per element
                 * (a broadcast vector recomputed per element is cheap beside the memory
                 * traffic), not the sum over the broadcast copies */
                if (S->gpu && copies > (double)nkernels) copies = (double)nkernels;
                double extra = (double)cost * copies;
                if (extra > RECOMPUTE_BOUND) S->value_buf[v] = MAT_YES;
            }
        }
        if (S->value_buf[v] == MAT_YES) {
            cons[v].len = 0;
            add_unique(&cons[v], v);
        }
    }
    for (int v = 0; v < n; v++) {
        wk_vec_free(&users[v]);
        wk_vec_free(&cons[v]);
    }
    free(users);
    free(cons);
    free(loads);
}

static int add_plan(WkSchedule *S, int value, WkBufKind kind, int index) {
    const WkLBuf *b = &S->L->bufs[value];
    WkBufferPlan *p = &S->bufs[S->nbufs];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->index = index;
    p->dtype = b->dtype;
    p->ndim = b->ndim;
    for (int d = 0; d < b->ndim; d++) {
        p->sizes[d] = b->sizes[d];
        p->strides[d] = b->strides[d];
    }
    p->nbytes = wk_buffer_span_bytes(b->dtype, b->ndim, b->sizes, b->strides, b->numel);
    S->buf_value[S->nbufs] = value;
    S->value_buf[value] = S->nbufs;
    return S->nbufs++;
}

/* Requires: a loop IR whose bodies read values through LOADs.
 * Provides: S->value_buf (plan buffer or -1 per value), S->bufs,
 *           S->buf_value, S->output_buf. */
int wk_sched_materialise(WkSchedule *S) {
    WkLoopIR *L = S->L;
    fill_materialised(S);
    S->bufs = wk_xcalloc((size_t)L->nbufs, sizeof *S->bufs);
    S->buf_value = wk_xcalloc((size_t)L->nbufs, sizeof(int));
    S->noutputs = L->noutputs;
    S->output_buf = wk_xcalloc((size_t)L->noutputs, sizeof(int));
    for (int k = 0; k < L->ninputs; k++) {
        int v = L->input_bufs[k];
        if (S->value_buf[v] >= 0) { /* the same value listed twice as an input */
            wk_error_set("graph input %d repeats value %d", k, v);
            return -1;
        }
        add_plan(S, v, WK_BUF_INPUT, k);
    }
    for (int k = 0; k < L->noutputs; k++) {
        int v = L->output_bufs[k];
        S->output_buf[k] = S->value_buf[v] >= 0 ? S->value_buf[v] : add_plan(S, v, WK_BUF_OUTPUT, k);
    }
    for (int v = 0; v < L->nbufs; v++)
        if (S->value_buf[v] == MAT_YES) add_plan(S, v, WK_BUF_TEMP, -1);
    return 0;
}
