/* test_codegen_pointwise.c — pointwise graphs through wk_compile_graph:
 * fusion into one kernel, broadcasting, strided inputs, type promotion,
 * NaN semantics; the generated C is compiled, run, and compared with a
 * plain C reference. */
#include "test_codegen_util.h"

/* 8 chained pointwise ops over a broadcast add -> one kernel */
static void test_chain(void) {
    WkGraph *g = wk_graph_new();
    int64_t xs[2] = {37, 101}, ys[1] = {101};
    int x = input_contig(g, WK_F32, 2, xs), y = input_contig(g, WK_F32, 1, ys);
    int s = wk_graph_scalar(g, WK_F64, 2.0, 0);
    int t = op_node(g, WK_OP_ADD, x, y);
    t = op_node(g, WK_OP_MUL, t, s);
    t = op_node(g, WK_OP_SUB, t, x);
    t = op_node(g, WK_OP_RELU, t, -1);
    t = op_node(g, WK_OP_NEG, t, -1);
    t = op_node(g, WK_OP_EXP, t, -1);
    t = op_node(g, WK_OP_SIGMOID, t, -1);
    t = op_node(g, WK_OP_TANH, t, -1);
    CHECK(t >= 0);
    wk_graph_output(g, t);
    WkProgram *p = compile_or_report(g);
    CHECK(p != NULL);
    if (!p) {
        wk_graph_free(g);
        return;
    }
    CHECK_EQ_INT(p->nkernels, 1);
    CHECK_EQ_INT(p->nbufs, 3);
    CHECK_EQ_INT(p->bufs[p->output_buf[0]].kind, WK_BUF_OUTPUT);
    CHECK_STR_CONTAINS(p->summary, "pointwise");
    float *xd = malloc(sizeof(float) * 37 * 101), *yd = malloc(sizeof(float) * 101);
    fill_f32(xd, 37 * 101, -3, 3);
    fill_f32(yd, 101, -3, 3);
    xd[5] = NAN;
    Built b;
    CHECK(build_program(p, &b) == 0);
    if (b.fn) {
        void *ins[2] = {xd, yd};
        Bufs bufs;
        bufs_alloc(p, &bufs, ins);
        b.fn(bufs.ptr);
        const float *o = out_ptr(p, &bufs, 0);
        int bad = 0;
        for (int i = 0; i < 37; i++)
            for (int j = 0; j < 101; j++) {
                float v = xd[i * 101 + j];
                float a = (v + yd[j]) * 2.0f - v;
                a = (a > 0 || a != a) ? a : 0;
                a = -a;
                a = expf(a);
                a = 1.0f / (1.0f + expf(-a));
                a = tanhf(a);
                bad += !close_enough(o[i * 101 + j], a, 1e-5, 1e-6);
            }
        CHECK_EQ_INT(bad, 0);
        CHECK(isnan(o[5]));
        bufs_free(&bufs);
    }
    unbuild(&b);
    free(xd);
    free(yd);
    wk_program_free(p);
    wk_graph_free(g);
}

/* maximum of a transposed and an expanded (stride 0) input, NaN propagating;
 * the graph also returns an input unchanged and one value twice */
static void test_strided(void) {
    WkGraph *g = wk_graph_new();
    int64_t sz[2] = {64, 48}, tr[2] = {1, 64}, ex[2] = {0, 1};
    int x = wk_graph_input(g, WK_F32, cpu, 2, sz, tr, 0, "L['x']");
    int y = wk_graph_input(g, WK_F32, cpu, 2, sz, ex, 0, "L['y']");
    int m = op_node(g, WK_OP_MAXIMUM, x, y);
    int n = op_node(g, WK_OP_MINIMUM, x, y);
    wk_graph_output(g, m);
    wk_graph_output(g, x);
    wk_graph_output(g, m);
    wk_graph_output(g, n);
    WkProgram *p = compile_or_report(g);
    CHECK(p != NULL);
    if (!p) {
        wk_graph_free(g);
        return;
    }
    CHECK_EQ_INT(p->nkernels, 1);
    CHECK_EQ_INT(p->noutputs, 4);
    CHECK_EQ_INT(p->output_buf[0], p->output_buf[2]);
    CHECK_EQ_INT(p->bufs[p->output_buf[1]].kind, WK_BUF_INPUT);
    CHECK_EQ_INT(p->bufs[p->output_buf[1]].index, 0);
    CHECK_EQ_INT(p->bufs[1].nbytes, 48 * 4);
    float *xd = malloc(sizeof(float) * 64 * 48), *yd = malloc(sizeof(float) * 48);
    fill_f32(xd, 64 * 48, -1, 1);
    fill_f32(yd, 48, -1, 1);
    xd[7] = NAN;
    yd[3] = NAN;
    Built b;
    CHECK(build_program(p, &b) == 0);
    if (b.fn) {
        void *ins[2] = {xd, yd};
        Bufs bufs;
        bufs_alloc(p, &bufs, ins);
        b.fn(bufs.ptr);
        const float *o = out_ptr(p, &bufs, 0), *mn = out_ptr(p, &bufs, 3);
        int bad = 0;
        for (int i = 0; i < 64; i++)
            for (int j = 0; j < 48; j++) {
                float a = xd[i + 64 * j], c = yd[j];
                float want = (a != a || c != c) ? NAN : a > c ? a : c;
                float wmin = (a != a || c != c) ? NAN : a < c ? a : c;
                bad += !close_enough(o[i * 48 + j], want, 0, 0);
                bad += !close_enough(mn[i * 48 + j], wmin, 0, 0);
            }
        CHECK_EQ_INT(bad, 0);
        bufs_free(&bufs);
    }
    unbuild(&b);
    free(xd);
    free(yd);
    wk_program_free(p);
    wk_graph_free(g);
}

/* int64 tensor with Python scalars: add 2.5 -> float32, lt 3.5 -> bool,
 * where(cond, int tensor, float scalar), int64 true division, int pow */
static void test_promotion(void) {
    WkGraph *g = wk_graph_new();
    int64_t sz[1] = {1000};
    int x = input_contig(g, WK_I64, 1, sz);
    int y = input_contig(g, WK_I64, 1, sz);
    int f = wk_graph_scalar(g, WK_F64, 2.5, 0);
    int h = wk_graph_scalar(g, WK_F64, 3.5, 0);
    int two = wk_graph_scalar(g, WK_I64, 0, 3);
    int a = op_node(g, WK_OP_ADD, x, f);
    int c = op_node(g, WK_OP_LT, x, h);
    int wv;
    {
        int in[3] = {c, x, f};
        WkAttrs at;
        memset(&at, 0, sizeof at);
        wv = wk_graph_op(g, WK_OP_WHERE, in, 3, &at);
    }
    int d = op_node(g, WK_OP_DIV, x, y);
    int pw = op_node(g, WK_OP_POW, x, two);
    int ng = op_node(g, WK_OP_NEG, x, -1);
    int ab = op_node(g, WK_OP_ABS, ng, -1);
    CHECK(a >= 0 && c >= 0 && wv >= 0 && d >= 0 && pw >= 0 && ab >= 0);
    wk_graph_output(g, a);
    wk_graph_output(g, c);
    wk_graph_output(g, wv);
    wk_graph_output(g, d);
    wk_graph_output(g, pw);
    wk_graph_output(g, ab);
    wk_error_clear();
    WkProgram *p = compile_or_report(g);
    CHECK(p != NULL);
    if (!p) {
        wk_graph_free(g);
        return;
    }
    CHECK_EQ_INT(p->nkernels, 1);
    CHECK_EQ_INT(p->bufs[p->output_buf[0]].dtype, WK_F32);
    CHECK_EQ_INT(p->bufs[p->output_buf[1]].dtype, WK_BOOL);
    CHECK_EQ_INT(p->bufs[p->output_buf[2]].dtype, WK_F32);
    CHECK_EQ_INT(p->bufs[p->output_buf[3]].dtype, WK_F32);
    CHECK_EQ_INT(p->bufs[p->output_buf[4]].dtype, WK_I64);
    int64_t *xd = malloc(sizeof(int64_t) * 1000), *yd = malloc(sizeof(int64_t) * 1000);
    fill_i64(xd, 1000, -50, 50);
    fill_i64(yd, 1000, -5, 5);
    xd[0] = INT64_MIN;
    Built b;
    CHECK(build_program(p, &b) == 0);
    if (b.fn) {
        void *ins[2] = {xd, yd};
        Bufs bufs;
        bufs_alloc(p, &bufs, ins);
        b.fn(bufs.ptr);
        const float *oa = out_ptr(p, &bufs, 0), *ow = out_ptr(p, &bufs, 2), *od = out_ptr(p, &bufs, 3);
        const uint8_t *oc = out_ptr(p, &bufs, 1);
        const int64_t *op = out_ptr(p, &bufs, 4), *oab = out_ptr(p, &bufs, 5);
        int bad = 0;
        for (int i = 0; i < 1000; i++) {
            float xf = (float)xd[i];
            bad += !close_enough(oa[i], xf + 2.5f, 0, 0);
            bad += oc[i] != (xf < 3.5f);
            bad += !close_enough(ow[i], xf < 3.5f ? xf : 2.5f, 0, 0);
            bad += !close_enough(od[i], xf / (float)yd[i], 1e-6, 0);
            bad += op[i] != (int64_t)((uint64_t)xd[i] * (uint64_t)xd[i] * (uint64_t)xd[i]);
            bad += oab[i] != (xd[i] == INT64_MIN ? INT64_MIN : llabs(xd[i]));
        }
        CHECK_EQ_INT(bad, 0);
        bufs_free(&bufs);
    }
    unbuild(&b);
    free(xd);
    free(yd);
    wk_program_free(p);
    wk_graph_free(g);
}

/* 0-d and empty tensors */
static void test_edge_shapes(void) {
    WkGraph *g = wk_graph_new();
    int64_t e[2] = {0, 5};
    int x = input_contig(g, WK_F64, 0, NULL);
    int y = input_contig(g, WK_F64, 2, e);
    int a = op_node(g, WK_OP_EXP, x, -1);
    int c = op_node(g, WK_OP_ADD, y, x);
    wk_graph_output(g, a);
    wk_graph_output(g, c);
    WkProgram *p = compile_or_report(g);
    CHECK(p != NULL);
    if (!p) {
        wk_graph_free(g);
        return;
    }
    CHECK_EQ_INT(p->bufs[p->output_buf[1]].nbytes, 0);
    double xd = 0.75, yd = 1;
    Built b;
    CHECK(build_program(p, &b) == 0);
    if (b.fn) {
        void *ins[2] = {&xd, &yd};
        Bufs bufs;
        bufs_alloc(p, &bufs, ins);
        b.fn(bufs.ptr);
        CHECK(close_enough(*(double *)out_ptr(p, &bufs, 0), exp(0.75), 1e-15, 0));
        bufs_free(&bufs);
    }
    unbuild(&b);
    wk_program_free(p);
    wk_graph_free(g);
}

int main(void) {
    test_chain();
    test_strided();
    test_promotion();
    test_edge_shapes();
    return CHECK_DONE();
}
