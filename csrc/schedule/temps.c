/* temps.c — where each TEMP buffer lives inside the program's one block of
 * temporaries. A TEMP is live from the first kernel that stores it to the
 * last kernel that reads it; kernels of one row group run interleaved (row
 * by row), so liveness is counted in whole groups. Buffers whose lifetimes
 * do not overlap share bytes: a chain of large intermediates needs two
 * buffers' worth of memory, not one per intermediate, and the block stays
 * warm in cache. Placement is greedy, largest first, at the lowest offset
 * that overlaps no live neighbour (64-byte aligned, for vector loads).
 */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

enum { TEMP_ALIGN = 64 };

static void note_reads(const WkLExpr *e, WkLowerMap *seen, int kernel_end, int *last_read) {
    if (wk_lower_map_get(seen, e)) return;
    wk_lower_map_put(seen, e, e);
    if (e->op == WK_LX_READ && kernel_end > last_read[e->buf]) last_read[e->buf] = kernel_end;
    for (int k = 0; k < e->nargs; k++) note_reads(e->a[k], seen, kernel_end, last_read);
}

static int64_t aligned(int64_t n) { return (n + TEMP_ALIGN - 1) / TEMP_ALIGN * TEMP_ALIGN; }

void wk_sched_place_temps(WkSchedule *S) {
    int n = S->nbufs;
    int *first = wk_xcalloc((size_t)n + 1, sizeof(int));
    int *last = wk_xcalloc((size_t)n + 1, sizeof(int));
    int *order = wk_xcalloc((size_t)n + 1, sizeof(int));
    int *placed = wk_xcalloc((size_t)n + 1, sizeof(int));
    for (int b = 0; b < n; b++) {
        first[b] = S->nkernels;
        last[b] = -1;
    }
    for (int k = 0; k < S->nkernels; k++) {
        const WkSchedKernel *K = &S->kernels[k];
        int start = K->group, end = k;
        while (end + 1 < S->nkernels && S->kernels[end + 1].group == start) end++;
        WkLowerMap seen = {0};
        for (int j = 0; j < K->nstores; j++) {
            int b = K->stores[j].buf;
            if (start < first[b]) first[b] = start;
            if (end > last[b]) last[b] = end;
            note_reads(K->stores[j].expr, &seen, end, last);
            /* a store's offset reads no memory; its value may */
        }
        wk_lower_map_free(&seen);
    }
    int ntemps = 0;
    for (int b = 0; b < n; b++)
        if (S->bufs[b].kind == WK_BUF_TEMP) order[ntemps++] = b;
    for (int a = 1; a < ntemps; a++) /* largest first (insertion sort: few buffers) */
        for (int j = a; j > 0 && S->bufs[order[j]].nbytes > S->bufs[order[j - 1]].nbytes; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int64_t total = 0;
    for (int a = 0; a < ntemps; a++) {
        int b = order[a];
        int64_t size = aligned(S->bufs[b].nbytes > 0 ? S->bufs[b].nbytes : 1), at = 0;
        /* an unread or unstored TEMP (should not exist) keeps bytes of its own */
        int lo = last[b] < 0 ? 0 : first[b], hi = last[b] < 0 ? S->nkernels : last[b];
        for (int moved = 1; moved;) { /* first fit among the placed neighbours it overlaps in time */
            moved = 0;
            for (int j = 0; j < a; j++) {
                int c = placed[j];
                int clo = last[c] < 0 ? 0 : first[c], chi = last[c] < 0 ? S->nkernels : last[c];
                if (chi < lo || hi < clo) continue;
                int64_t cat = S->bufs[c].offset, cend = cat + aligned(S->bufs[c].nbytes > 0 ? S->bufs[c].nbytes : 1);
                if (at < cend && cat < at + size) {
                    at = cend;
                    moved = 1;
                }
            }
        }
        S->bufs[b].offset = at;
        placed[a] = b;
        if (at + size > total) total = at + size;
    }
    S->temps_bytes = total;
    free(first);
    free(last);
    free(order);
    free(placed);
}
