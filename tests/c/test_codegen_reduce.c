/* test_codegen_reduce.c — reductions through wk_compile_graph: softmax-like
 * graphs (two reductions + one pointwise kernel), sums of bool/int into
 * int64, mean of empty -> NaN, amax with NaN, column and multi-dim
 * reductions, a large full reduction (the parallel path). Generated C is
 * compiled, run and compared with plain C references. */
#include "test_codegen_util.h"

/* The SOFTMAX op decomposes in the lower layer: two internal reduction
 * buffers (row max, row sum) before the node's own pointwise buffer; the
 * same three kernels as the hand-written graph. */
static void test_softmax_op_decomposes(void) {
    enum { R = 17, C = 300 };
    WkGraph *g = wk_graph_new();
    int64_t sz[2] = {R, C};
    int x = input_contig(g, WK_F32, 2, sz);
    WkAttrs at = {0};
    at.ndims = 1;
    at.dims[0] = -1;
    int y = wk_graph_op(g, WK_OP_SOFTMAX, &x, 1, &at);
    CHECK(y >= 0);
    at.dims[0] = 1;
    int a = wk_graph_op(g, WK_OP_ARGMAX, &x, 1, &at);
    CHECK(a >= 0);
    wk_graph_output(g, y);
    wk_graph_output(g, a);
    WkLoopIR *L = wk_lower_graph(g);
    CHECK(L != NULL);
    if (L) {
        CHECK_EQ_INT(L->nvalues, 3);
        CHECK_EQ_INT(L->nbufs, 3 + 2 + 2); /* + max, sum; + max, first index */
        CHECK_EQ_INT(L->bufs[1].kind, WK_LBUF_REDUCTION);
        CHECK_EQ_INT(L->bufs[1].value, -1);
        CHECK_EQ_INT(L->bufs[L->value_buf[y]].kind, WK_LBUF_POINTWISE);
        CHECK(wk_lower_check(L) == 0);
        wk_lower_free(L);
    }
    WkProgram *p = compile_or_report(g);
    CHECK(p != NULL);
    if (!p) goto done;
    float *xd = malloc(sizeof(float) * R * C);
    fill_f32(xd, R * C, -20, 20);
    xd[2 * C + 5] = NAN; /* argmax of a row with NaN: the NaN's index */
    xd[4 * C + 9] = 50.0f;
    xd[4 * C + 200] = 50.0f; /* ties: the first */
    Built b;
    CHECK(build_program(p, &b) == 0);
    if (b.fn) {
        void *ins[1] = {xd};
        Bufs bufs;
        bufs_alloc(p, &bufs, ins);
        b.fn(bufs.ptr);
        const float *o = out_ptr(p, &bufs, 0);
        const int64_t *ai = out_ptr(p, &bufs, 1);
        int bad = 0;
        for (int i = 0; i < R; i++) {
            double m = -INFINITY, sum = 0;
            int64_t am = 0;
            int nan = 0;
            for (int j = 0; j < C; j++) {
                float v = xd[i * C + j];
                if (v != v && !nan) nan = 1, am = j;
                if (!nan && v > m) m = v, am = j;
            }
            for (int j = 0; j < C; j++) sum += exp((double)xd[i * C + j] - m);
            bad += ai[i] != am;
            for (int j = 0; j < C && !nan; j++)
                bad += !close_enough(o[i * C + j], exp((double)xd[i * C + j] - m) / sum, 1e-5, 1e-7);
        }
        CHECK_EQ_INT(bad, 0);
        CHECK_EQ_INT(ai[4], 9);
        CHECK_EQ_INT(ai[2], 5);
        bufs_free(&bufs);
        unbuild(&b);
    }
    free(xd);
    wk_program_free(p);
done:
    wk_graph_free(g);
}

static void test_softmax(void) {
    enum { R = 33, C = 257 };
    WkGraph *g = wk_graph_new();
    int64_t sz[2] = {R, C};
    int x = input_contig(g, WK_F32, 2, sz);
    int d1[1] = {1};
    int m = reduce_node(g, WK_OP_AMAX, x, 1, d1, 1);
    int e = op_node(g, WK_OP_EXP, op_node(g, WK_OP_SUB, x, m), -1);
    int s = reduce_node(g, WK_OP_SUM, e, 1, d1, 1);
    int y = op_node(g, WK_OP_DIV, e, s);
    wk_graph_output(g, y);
    WkProgram *p = compile_or_report(g);
    CHECK(p != NULL);
    if (!p) goto done;
    CHECK_EQ_INT(p->nkernels, 3);
    CHECK_EQ_INT(p->nbufs, 4); /* x, y, and the two row results */
    CHECK_STR_CONTAINS(p->summary, "reduction {AMAX}");
    CHECK_STR_CONTAINS(p->summary, "reduction {SUB EXP SUM}");
    CHECK_STR_CONTAINS(p->summary, "pointwise {SUB EXP DIV}");
    float *xd = malloc(sizeof(float) * R * C);
    fill_f32(xd, R * C, -20, 20);
    for (int j = 0; j < C; j++) xd[3 * C + j] = -INFINITY; /* a row of -inf -> NaN, as torch */
    xd[5 * C + 7] = NAN;
    Built b;
    CHECK(build_program(p, &b) == 0);
    if (b.fn) {
        void *ins[1] = {xd};
        Bufs bufs;
        bufs_alloc(p, &bufs, ins);
        b.fn(bufs.ptr);
        const float *o = out_ptr(p, &bufs, 0);
        int bad = 0;
        for (int i = 0; i < R; i++) {
            double mx = -INFINITY, sum = 0;
            int nan = 0;
            for (int j = 0; j < C; j++) {
                float v = xd[i * C + j];
                nan |= v != v;
                if (v > mx) mx = v;
            }
            if (nan) mx = NAN;
            for (int j = 0; j < C; j++) sum += expf(xd[i * C + j] - (float)mx);
            for (int j = 0; j < C; j++)
                bad += !close_enough(o[i * C + j], expf(xd[i * C + j] - (float)mx) / (float)sum, 1e-5, 1e-7);
        }
        CHECK_EQ_INT(bad, 0);
        CHECK(isnan(o[3 * C]) && isnan(o[5 * C]));
        bufs_free(&bufs);
    }
    unbuild(&b);
    free(xd);
done:
    wk_program_free(p);
    wk_graph_free(g);
}

/* sum(bool, dim 0) -> int64; mean over an empty dim -> NaN; sum of an
 * empty tensor -> 0; sum over dims (0, 2) keepdim of int64 */
static void test_dtypes_and_empty(void) {
    WkGraph *g = wk_graph_new();
    int64_t bs[2] = {1000, 7}, es[2] = {4, 0}, is[3] = {5, 6, 7};
    int bx = input_contig(g, WK_BOOL, 2, bs);
    int ex = input_contig(g, WK_F32, 2, es);
    int ix = input_contig(g, WK_I64, 3, is);
    int d0[1] = {0}, d1[1] = {1}, d02[2] = {0, 2};
    int s1 = reduce_node(g, WK_OP_SUM, bx, 1, d0, 0);
    int m1 = reduce_node(g, WK_OP_MEAN, ex, 1, d1, 0);
    int s2 = reduce_node(g, WK_OP_SUM, ex, 0, NULL, 0);
    int s3 = reduce_node(g, WK_OP_SUM, ix, 2, d02, 1);
    int a3 = reduce_node(g, WK_OP_AMAX, ix, 1, d1, 0);
    CHECK(s1 >= 0 && m1 >= 0 && s2 >= 0 && s3 >= 0 && a3 >= 0);
    wk_graph_output(g, s1);
    wk_graph_output(g, m1);
    wk_graph_output(g, s2);
    wk_graph_output(g, s3);
    wk_graph_output(g, a3);
    WkProgram *p = compile_or_report(g);
    CHECK(p != NULL);
    if (!p) goto done;
    CHECK_EQ_INT(p->nkernels, 5);
    CHECK_EQ_INT(p->bufs[p->output_buf[0]].dtype, WK_I64);
    CHECK_EQ_INT(p->bufs[p->output_buf[3]].ndim, 3);
    uint8_t *bd = malloc(1000 * 7);
    for (int i = 0; i < 7000; i++) bd[i] = rnd() < 0.3;
    float ed = 0;
    int64_t *id = malloc(sizeof(int64_t) * 210);
    fill_i64(id, 210, -1000, 1000);
    Built b;
    CHECK(build_program(p, &b) == 0);
    if (b.fn) {
        void *ins[3] = {bd, &ed, id};
        Bufs bufs;
        bufs_alloc(p, &bufs, ins);
        b.fn(bufs.ptr);
        const int64_t *o1 = out_ptr(p, &bufs, 0), *o4 = out_ptr(p, &bufs, 3), *o5 = out_ptr(p, &bufs, 4);
        const float *o2 = out_ptr(p, &bufs, 1), *o3 = out_ptr(p, &bufs, 2);
        int bad = 0;
        for (int j = 0; j < 7; j++) {
            int64_t want = 0;
            for (int i = 0; i < 1000; i++) want += bd[i * 7 + j];
            bad += o1[j] != want;
        }
        for (int i = 0; i < 4; i++) bad += !isnan(o2[i]);
        bad += o3[0] != 0;
        for (int j = 0; j < 6; j++) {
            int64_t want = 0;
            for (int i = 0; i < 5; i++)
                for (int k = 0; k < 7; k++) want += id[i * 42 + j * 7 + k];
            bad += o4[j] != want;
        }
        for (int i = 0; i < 5; i++)
            for (int k = 0; k < 7; k++) {
                int64_t want = INT64_MIN;
                for (int j = 0; j < 6; j++)
                    if (id[i * 42 + j * 7 + k] > want) want = id[i * 42 + j * 7 + k];
                bad += o5[i * 7 + k] != want;
            }
        CHECK_EQ_INT(bad, 0);
        bufs_free(&bufs);
    }
    unbuild(&b);
    free(bd);
    free(id);
done:
    wk_program_free(p);
    wk_graph_free(g);
}

/* large: full sum and amax of 2**20 floats (parallel partials), column sum,
 * mean over a transposed input */
static void test_large(void) {
    enum { N = 1 << 20, R = 512, C = 384 };
    WkGraph *g = wk_graph_new();
    int64_t n[1] = {N}, rc[2] = {R, C}, tr[2] = {1, R};
    int x = input_contig(g, WK_F32, 1, n);
    int y = wk_graph_input(g, WK_F32, cpu, 2, rc, tr, 0, "L['y']");
    int d0[1] = {0}, d1[1] = {1};
    int s = reduce_node(g, WK_OP_SUM, x, 0, NULL, 0);
    int a = reduce_node(g, WK_OP_AMAX, x, 0, NULL, 0);
    int cs = reduce_node(g, WK_OP_SUM, y, 1, d0, 0);
    int rm = reduce_node(g, WK_OP_MEAN, y, 1, d1, 0);
    wk_graph_output(g, s);
    wk_graph_output(g, a);
    wk_graph_output(g, cs);
    wk_graph_output(g, rm);
    WkProgram *p = compile_or_report(g);
    CHECK(p != NULL);
    if (!p) goto done;
    /* the full sums split the reduction across threads (float blocks, double
     * partials); the column sum vectorises across outputs */
    CHECK_STR_CONTAINS(p->source, "#pragma omp parallel for schedule(static) reduction(+:acc)");
    CHECK_STR_CONTAINS(p->source, "#pragma omp parallel for simd schedule(static) reduction(max:acc) reduction(|:nanf)");
    CHECK_STR_CONTAINS(p->source, "float accb = 0;");
    /* 512 outputs: each thread sums a range of whole rows into its own
     * accumulator row, then the rows merge */
    CHECK_STR_CONTAINS(p->source, "double acc[512];");
    CHECK_STR_CONTAINS(p->source, "#pragma omp for schedule(static) nowait");
    CHECK_STR_CONTAINS(p->source, "#pragma omp critical");
    float *xd = malloc(sizeof(float) * N), *yd = malloc(sizeof(float) * R * C);
    fill_f32(xd, N, -1, 1.5);
    fill_f32(yd, R * C, -2, 2);
    Built b;
    CHECK(build_program(p, &b) == 0);
    if (b.fn) {
        void *ins[2] = {xd, yd};
        Bufs bufs;
        bufs_alloc(p, &bufs, ins);
        b.fn(bufs.ptr);
        double sum = 0, mx = -INFINITY;
        for (int i = 0; i < N; i++) {
            sum += xd[i];
            if (xd[i] > mx) mx = xd[i];
        }
        CHECK(close_enough(*(float *)out_ptr(p, &bufs, 0), sum, 1e-5, 1e-3));
        CHECK(*(float *)out_ptr(p, &bufs, 1) == (float)mx);
        const float *ocs = out_ptr(p, &bufs, 2), *orm = out_ptr(p, &bufs, 3);
        int bad = 0;
        for (int j = 0; j < C; j++) {
            double w = 0;
            for (int i = 0; i < R; i++) w += yd[i + R * j];
            bad += !close_enough(ocs[j], w, 1e-5, 1e-4);
        }
        for (int i = 0; i < R; i++) {
            double w = 0;
            for (int j = 0; j < C; j++) w += yd[i + R * j];
            bad += !close_enough(orm[i], w / C, 1e-5, 1e-6);
        }
        CHECK_EQ_INT(bad, 0);
        bufs_free(&bufs);
    }
    unbuild(&b);
    free(xd);
    free(yd);
done:
    wk_program_free(p);
    wk_graph_free(g);
}

int main(void) {
    test_softmax_op_decomposes();
    test_softmax();
    test_dtypes_and_empty();
    test_large();
    return CHECK_DONE();
}
