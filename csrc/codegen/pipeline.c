/* pipeline.c — wk_compile_graph, the flat driver of the compiler: the whole
 * pass order is visible in one function, with a verifier after each pass
 * and a named dump of its result when debugging output is on
 * (WICK_DEBUG_DIR, or WICK_LOG=code). Also owns WkProgram's lifetime. */
#include "cgen.h"

#include <stdlib.h>
#include <string.h>

static void dump(const char *what, uint64_t h, const char *ext, const char *text) {
    char name[96];
    snprintf(name, sizeof name, "%s-%016llx.%s", what, (unsigned long long)h, ext);
    wk_debug_dump(name, text);
}

static char *summarise(const WkSchedule *S) {
    WkStr s = {0};
    wk_str_append(&s, "");
    for (int k = 0; k < S->nkernels; k++) {
        const WkSchedKernel *K = &S->kernels[k];
        wk_str_printf(&s, "kernel %d: %s {%s} [", k, K->kind == WK_SCHED_REDUCTION ? "reduction" : "pointwise",
                      K->desc);
        for (int d = 0; d < K->nloops; d++) wk_str_printf(&s, "%s%lld", d ? ", " : "", (long long)K->sizes[d]);
        wk_str_append(&s, "]");
        if (K->kind == WK_SCHED_REDUCTION) {
            wk_str_append(&s, " over [");
            for (int d = 0; d < K->nred; d++) wk_str_printf(&s, "%s%lld", d ? ", " : "", (long long)K->red_sizes[d]);
            wk_str_append(&s, "]");
        }
        if (K->group != k) wk_str_printf(&s, " (row-fused into kernel %d)", K->group);
        wk_str_append(&s, " ->");
        for (int j = 0; j < K->nstores; j++) wk_str_printf(&s, " b%d", K->stores[j].buf);
        wk_str_append(&s, "\n");
    }
    return s.data;
}

static WkProgram *make_program(const WkSchedule *S, char *source, const char *entry) {
    WkProgram *P = wk_xcalloc(1, sizeof *P);
    P->source = source;
    P->entry = wk_xstrdup(entry);
    P->nbufs = S->nbufs;
    P->bufs = wk_xcalloc((size_t)S->nbufs + 1, sizeof *P->bufs);
    memcpy(P->bufs, S->bufs, sizeof *P->bufs * (size_t)S->nbufs);
    P->noutputs = S->noutputs;
    P->output_buf = wk_xcalloc((size_t)S->noutputs + 1, sizeof(int));
    memcpy(P->output_buf, S->output_buf, sizeof(int) * (size_t)S->noutputs);
    P->nkernels = S->nkernels;
    P->summary = summarise(S);
    return P;
}

/* lower -> check -> schedule (materialise, fuse) -> check -> C codegen */
WkProgram *wk_compile_graph(const WkGraph *g) {
    WkLoopIR *L = NULL;
    WkSchedule *S = NULL;
    WkProgram *P = NULL;
    WkStr src = {0};
    int debug = wk_log_on(WK_LOG_CODE) || *wk_env_str(WK_ENV_DEBUG_DIR);
    uint64_t h = wk_graph_hash(g);
    char entry[64];
    snprintf(entry, sizeof entry, "wick_graph_%016llx", (unsigned long long)h);
    if (debug) {
        char *t = wk_graph_print(g);
        if (t) dump("graph", h, "txt", t);
        free(t);
    }

    L = wk_lower_graph(g);
    if (!L) goto error;
    if (debug) {
        char *t = wk_lower_print(L);
        dump("loopir", h, "txt", t);
        free(t);
        if (wk_lower_check(L) < 0) goto error;
    }

    S = wk_sched_build(L);
    if (!S) goto error;
    if (debug) {
        char *t = wk_sched_print(S);
        dump("schedule", h, "txt", t);
        free(t);
        if (wk_sched_check(S) < 0) goto error;
    }

    wk_str_append(&src, "");
    if (wk_cgen_c(S, entry, &src) < 0) goto error;
    dump("kernel", h, "c", src.data);
    wk_log(WK_LOG_CODE, "graph %016llx: %d kernels\n%s", (unsigned long long)h, S->nkernels, src.data);

    P = make_program(S, src.data, entry);
    src.data = NULL;
error:
    wk_str_free(&src);
    wk_sched_free(S);
    wk_lower_free(L);
    return P;
}

void wk_program_free(WkProgram *p) {
    if (!p) return;
    free(p->source);
    free(p->entry);
    free(p->bufs);
    free(p->output_buf);
    free(p->summary);
    free(p);
}
