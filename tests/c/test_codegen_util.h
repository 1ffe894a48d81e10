/* test_codegen_util.h — helpers shared by the compiler's C tests
 * (test_lower_*.c, test_codegen_*.c): build a .so from a WkProgram's source
 * with the system compiler, run it on buffers filled in C, free everything.
 * Header-only so each test stays one self-contained main(). */
#ifndef WICK_TEST_CODEGEN_UTIL_H
#define WICK_TEST_CODEGEN_UTIL_H

#include "lower/lower.h"
#include "schedule/schedule.h"
#include "codegen/cgen.h"
#include "codegen/program.h"

#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

typedef int (*EntryFn)(void **);

typedef struct {
    void *handle;
    EntryFn fn;
    char dir[64];
} Built;

/* Compiles p->source into a shared object in a fresh temp dir and loads it
 * (RTLD_NODELETE: unmapping libgomp under its parked worker threads crashes).
 * Returns 0 on success. */
static WK_UNUSED int build_program(const WkProgram *p, Built *b) {
    memset(b, 0, sizeof *b);
    /* LeakSanitizer's exit-time scan crashes on libgomp's parked worker
     * threads; one thread keeps the parallel code paths but no workers.
     * Run with OMP_NUM_THREADS=2 (detect_leaks=0) to exercise them. */
    setenv("OMP_NUM_THREADS", "1", 0);
    strcpy(b->dir, "/tmp/wick-ctest-XXXXXX");
    if (!mkdtemp(b->dir)) return -1;
    char src[128], so[128], cmd[512];
    snprintf(src, sizeof src, "%s/k.c", b->dir);
    snprintf(so, sizeof so, "%s/k.so", b->dir);
    FILE *f = fopen(src, "w");
    if (!f) return -1;
    fputs(p->source, f);
    fclose(f);
    const char *cc = getenv("CC");
    snprintf(cmd, sizeof cmd, "%s " WK_CGEN_C_CFLAGS " " WK_CGEN_C_EXTRA " -Werror=implicit-function-declaration %s -o %s " WK_CGEN_C_LIBS,
             cc && *cc ? cc : "cc", src, so);
    if (system(cmd) != 0) {
        fprintf(stderr, "compile failed:\n%s\n", p->source);
        return -1;
    }
    b->handle = dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!b->handle) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return -1;
    }
    b->fn = (EntryFn)dlsym(b->handle, p->entry);
    return b->fn ? 0 : -1;
}

static WK_UNUSED void unbuild(Built *b) {
    char path[160];
    if (b->handle) dlclose(b->handle);
    snprintf(path, sizeof path, "%s/k.c", b->dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/k.so", b->dir);
    unlink(path);
    rmdir(b->dir);
}

/* Buffers for a program: inputs point at caller data, the rest are
 * allocated (poisoned with 0xAB bytes so unwritten elements show). */
typedef struct {
    int n;
    void **ptr;
    char *owned;
} Bufs;

static WK_UNUSED void bufs_alloc(const WkProgram *p, Bufs *b, void *const *inputs) {
    b->n = p->nbufs;
    b->ptr = calloc((size_t)p->nbufs + 1, sizeof(void *));
    b->owned = calloc((size_t)p->nbufs + 1, 1);
    for (int i = 0; i < p->nbufs; i++) {
        const WkBufferPlan *bp = &p->bufs[i];
        if (bp->kind == WK_BUF_INPUT) {
            b->ptr[i] = inputs[bp->index];
        } else {
            b->ptr[i] = malloc((size_t)bp->nbytes + 16);
            memset(b->ptr[i], 0xAB, (size_t)bp->nbytes + 16);
            b->owned[i] = 1;
        }
    }
}

static WK_UNUSED void bufs_free(Bufs *b) {
    for (int i = 0; i < b->n; i++)
        if (b->owned[i]) free(b->ptr[i]);
    free(b->ptr);
    free(b->owned);
}

static WK_UNUSED void *out_ptr(const WkProgram *p, const Bufs *b, int output) {
    return b->ptr[p->output_buf[output]];
}

/* deterministic pseudo-random values */
static uint64_t rng_state = 88172645463325252ULL;
static WK_UNUSED double rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static WK_UNUSED void fill_f32(float *x, int64_t n, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * rnd());
}
static WK_UNUSED void fill_f64(double *x, int64_t n, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rnd();
}
static WK_UNUSED void fill_i64(int64_t *x, int64_t n, int64_t lo, int64_t hi) {
    for (int64_t i = 0; i < n; i++) x[i] = lo + (int64_t)(rnd() * (double)(hi - lo + 1));
}

static WK_UNUSED int close_enough(double got, double want, double rtol, double atol) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= atol + rtol * fabs(want);
}

static WK_UNUSED const WkDevice cpu = {WK_DEV_CPU, 0};

/* wk_compile_graph, printing the compiler's message when it fails */
static WK_UNUSED WkProgram *compile_or_report(WkGraph *g) {
    wk_error_clear();
    WkProgram *p = wk_compile_graph(g);
    if (!p) fprintf(stderr, "compile error: %s\n", wk_error_get());
    return p;
}

static WK_UNUSED int op_node(WkGraph *g, WkOp op, int a, int b) {
    int in[2] = {a, b};
    WkAttrs at;
    memset(&at, 0, sizeof at);
    return wk_graph_op(g, op, in, b < 0 ? 1 : 2, &at);
}

static WK_UNUSED int reduce_node(WkGraph *g, WkOp op, int a, int ndims, const int *dims, int keepdim) {
    WkAttrs at;
    memset(&at, 0, sizeof at);
    at.ndims = ndims;
    for (int i = 0; i < ndims; i++) at.dims[i] = dims[i];
    at.keepdim = keepdim;
    return wk_graph_op(g, op, &a, 1, &at);
}

static WK_UNUSED int input_contig(WkGraph *g, WkDType dt, int ndim, const int64_t *sizes) {
    int64_t strides[WK_MAX_DIMS];
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = st;
        st *= sizes[d] > 1 ? sizes[d] : 1;
    }
    return wk_graph_input(g, dt, cpu, ndim, sizes, strides, 0, "L['x']");
}

#endif
