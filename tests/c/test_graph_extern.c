/* test_graph_extern.c — open-ended node inputs and int-list attributes,
 * multi-output EXTERN nodes and graph copies that give an extern node more
 * outputs (graph.c), and plans: a graph cut into kernel
 * stages and extern steps, with slots between them (pipeline.c). */
#include "codegen/program.h"
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

static const WkDevice CPU = {WK_DEV_CPU, 0};

static WkTensorMeta meta2(WkDType dt, int64_t a, int64_t b, int64_t sa, int64_t sb) {
    WkTensorMeta m = {0};
    m.dtype = dt;
    m.device = CPU;
    m.ndim = 2;
    m.sizes[0] = a, m.sizes[1] = b;
    m.strides[0] = sa, m.strides[1] = sb;
    return m;
}

static void test_builder(void) {
    WkGraph *g = wk_graph_new();
    int64_t sz[2] = {3, 4};
    int x = wk_graph_input(g, WK_F32, CPU, 2, sz, NULL, 0, "L['x']");
    WkTensorMeta outs[2] = {meta2(WK_F32, 4, 3, 1, 4), meta2(WK_I64, 4, 3, 3, 1)};
    int e = wk_graph_extern(g, 7, "aten.foo", &x, 1, outs, 2);
    CHECK(e > x);
    const WkValue *v0 = wk_graph_value(g, e), *v1 = wk_graph_value(g, e + 1);
    CHECK(v0 && v1);
    CHECK_EQ_INT(v0->node, v1->node);
    CHECK_EQ_INT(v1->node_output, 1);
    int64_t st;
    CHECK(wk_sym_is_const(v0->strides[1], &st) && st == 4); /* strides as given */
    const WkNode *n = wk_graph_node(g, v0->node);
    CHECK_EQ_INT(n->op, WK_OP_EXTERN);
    CHECK_EQ_INT(n->noutputs, 2);
    CHECK_EQ_INT(n->outputs[1], e + 1);
    CHECK_EQ_INT(n->extern_index, 7);
    CHECK_EQ_INT(wk_graph_nexterns(g), 1);
    CHECK_EQ_INT(wk_graph_extern_table_size(g), 8);
    CHECK_EQ_INT(wk_graph_nusers(g, x), 1);

    /* an int list is copied into the graph */
    int64_t *ints = malloc(3 * sizeof *ints);
    ints[0] = 2, ints[1] = -1, ints[2] = 9;
    WkAttrs at = {0};
    at.nints = 3;
    at.ints = ints;
    int r = wk_graph_op(g, WK_OP_RELU, &e, 1, &at);
    free(ints);
    const WkNode *rn = wk_graph_node(g, wk_graph_value(g, r)->node);
    CHECK_EQ_INT(rn->attrs.nints, 3);
    CHECK_EQ_INT(rn->attrs.ints[1], -1);

    /* an int64 extern output can feed EXP (promotes to float); a float16
     * one feeds kernels too (loaded as float32, stored rounded) */
    WkTensorMeta h = meta2(WK_F16, 3, 4, 4, 1);
    int hv = wk_graph_extern(g, 0, "half", &x, 1, &h, 1);
    CHECK(hv >= 0);
    int hn = wk_graph_op(g, WK_OP_NEG, &hv, 1, NULL);
    CHECK(hn >= 0 && wk_graph_value(g, hn)->dtype == WK_F16);

    /* refusals */
    int s = wk_graph_scalar(g, WK_F64, 1.5, 0);
    CHECK_EQ_INT(wk_graph_extern(g, 0, "bad", &s, 1, outs, 1), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "Python scalar");
    CHECK_EQ_INT(wk_graph_extern(g, -1, "bad", &x, 1, outs, 1), -1);
    CHECK_EQ_INT(wk_graph_extern(g, 0, "bad", &x, 1, outs, 0), -1);
    WkTensorMeta neg = meta2(WK_F32, -1, 3, 3, 1);
    CHECK_EQ_INT(wk_graph_extern(g, 0, "bad", &x, 1, &neg, 1), -1);
    int four[4] = {x, x, x, x};
    CHECK_EQ_INT(wk_graph_op(g, WK_OP_ADD, four, 4, NULL), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "ADD takes 2 inputs, got 4");

    wk_graph_output(g, r);
    char *text = wk_graph_print(g);
    CHECK_STR_CONTAINS(text, "%1, %2 = EXTERN[7 aten.foo](%0) : float32[4, 3] strides=[1, 4], int64[4, 3]");
    CHECK_STR_CONTAINS(text, "RELU(%1, ints=[2, -1, 9])");
    free(text);
    /* the plain pipeline refuses externs */
    CHECK(wk_compile_graph(g) == NULL);
    wk_graph_free(g);
}

/* x -> mul -> [mm] -> add b -> relu -> [mm] -> exp; tanh(x) independent */
static void test_plan(void) {
    WkGraph *g = wk_graph_new();
    int64_t sx[2] = {4, 4}, sb[1] = {4};
    int x = wk_graph_input(g, WK_F32, CPU, 2, sx, NULL, 0, "x");
    int b = wk_graph_input(g, WK_F32, CPU, 1, sb, NULL, 0, "b");
    int two = wk_graph_scalar(g, WK_F64, 2.0, 0);
    int mul_in[2] = {x, two};
    int m = wk_graph_op(g, WK_OP_MUL, mul_in, 2, NULL);
    int side = wk_graph_op(g, WK_OP_TANH, &x, 1, NULL);
    WkTensorMeta mm = meta2(WK_F32, 4, 4, 4, 1);
    int mm_in[2] = {m, x};
    int e1 = wk_graph_extern(g, 0, "mm", mm_in, 2, &mm, 1);
    int add_in[2] = {e1, b};
    int a = wk_graph_op(g, WK_OP_ADD, add_in, 2, NULL);
    int add2_in[2] = {a, two}; /* the scalar is read in a later stage too */
    int a2 = wk_graph_op(g, WK_OP_ADD, add2_in, 2, NULL);
    int r = wk_graph_op(g, WK_OP_RELU, &a2, 1, NULL);
    int mm2_in[2] = {r, side};
    int e2 = wk_graph_extern(g, 0, "mm", mm2_in, 2, &mm, 1);
    int ex = wk_graph_op(g, WK_OP_EXP, &e2, 1, NULL);
    wk_graph_output(g, ex);
    wk_graph_output(g, e1);
    wk_graph_output(g, x);
    WkPlan *P = wk_compile_plan(g);
    CHECK(P != NULL);
    if (P) {
        CHECK_EQ_INT(P->nsteps, 5);
        CHECK_EQ_INT(P->steps[0].kind, WK_STEP_KERNELS);
        CHECK_EQ_INT(P->steps[1].kind, WK_STEP_EXTERN);
        CHECK_EQ_INT(P->steps[2].kind, WK_STEP_KERNELS);
        CHECK_EQ_INT(P->steps[3].kind, WK_STEP_EXTERN);
        CHECK_EQ_INT(P->steps[4].kind, WK_STEP_KERNELS);
        CHECK_EQ_INT(P->nextern, 2);
        CHECK_EQ_INT(P->nnative, 6);
        /* stage 0 computes mul, which the first extern reads; tanh, read
         * only by the second, runs in the stage before that one
         * (sink_to_readers), beside add, add, relu, which fuse into one
         * kernel whose only output is relu's */
        CHECK_EQ_INT(P->steps[0].nout, 1);
        CHECK_EQ_INT(P->slots[P->steps[0].out_slots[0]].value, m);
        CHECK_EQ_INT(P->steps[2].nout, 2);
        if (P->steps[2].nout == 2) {
            int v0 = P->slots[P->steps[2].out_slots[0]].value, v1 = P->slots[P->steps[2].out_slots[1]].value;
            CHECK((v0 == r && v1 == side) || (v0 == side && v1 == r));
        }
        /* graph output 2 is input 0's slot, output 1 the first extern's */
        CHECK_EQ_INT(P->slots[P->output_slot[2]].input_index, 0);
        CHECK_EQ_INT(P->output_slot[1], P->steps[1].out_slots[0]);
        CHECK(P->slots[P->output_slot[1]].is_output);
        CHECK(P->slots[P->steps[1].out_slots[0]].read_by_kernels);
        /* the mul result dies after the first extern */
        CHECK_EQ_INT(P->slots[P->steps[1].in_slots[0]].last_step, 1);
        CHECK_STR_CONTAINS(P->source, "wick_s2_kernel0");
        CHECK_STR_CONTAINS(P->summary, "step 3: extern 0 mm(");
    }
    wk_plan_free(P);

    /* no externs: one stage, the graph itself */
    WkGraph *h = wk_graph_new();
    x = wk_graph_input(h, WK_F32, CPU, 2, sx, NULL, 0, "x");
    int y = wk_graph_op(h, WK_OP_EXP, &x, 1, NULL);
    wk_graph_output(h, y);
    wk_graph_output(h, y);
    P = wk_compile_plan(h);
    CHECK(P && P->nsteps == 1 && P->steps[0].nout == 2);
    if (P) CHECK_EQ_INT(P->output_slot[0], P->output_slot[1]);
    wk_plan_free(P);
    wk_graph_free(h);
    wk_graph_free(g);
}

/* embedding_dense_backward with its [padding_idx, scale] ints: a KERNELS
 * step of generated C instead of an extern step; the code compiles and adds
 * rows as eager does (indices read through their strides: every other
 * element of a wider buffer; padding and out-of-range indices add nothing). */
static void test_plan_embedding_backward(void) {
    for (int scale = 0; scale < 2; scale++) {
        WkGraph *g = wk_graph_new();
        int64_t sg[3] = {2, 3, 4}, si[2] = {2, 3}, sti[2] = {6, 2};
        int grad = wk_graph_input(g, WK_F32, CPU, 3, sg, NULL, 0, "grad");
        int idx = wk_graph_input(g, WK_I64, CPU, 2, si, sti, 0, "idx");
        WkTensorMeta om = meta2(WK_F32, 5, 4, 4, 1);
        int in[2] = {grad, idx};
        int64_t ints[2] = {1, scale};
        int e = wk_graph_extern_ints(g, 0, "aten.embedding_dense_backward.default", in, 2, &om, 1, ints, 2);
        CHECK(e >= 0);
        wk_graph_output(g, e);
        /* the ints are hashed: another padding_idx is another graph */
        WkGraph *h = wk_graph_new();
        grad = wk_graph_input(h, WK_F32, CPU, 3, sg, NULL, 0, "grad");
        idx = wk_graph_input(h, WK_I64, CPU, 2, si, sti, 0, "idx");
        int in2[2] = {grad, idx};
        int64_t ints2[2] = {2, scale};
        wk_graph_output(h, wk_graph_extern_ints(h, 0, "aten.embedding_dense_backward.default", in2, 2, &om, 1,
                                                ints2, 2));
        CHECK(wk_graph_hash(g) != wk_graph_hash(h));
        wk_graph_free(h);

        WkPlan *P = wk_compile_plan(g);
        CHECK(P != NULL);
        if (!P) {
            wk_graph_free(g);
            continue;
        }
        CHECK_EQ_INT(P->nsteps, 1);
        CHECK_EQ_INT(P->steps[0].kind, WK_STEP_KERNELS);
        CHECK_EQ_INT(P->nextern, 0);
        CHECK(P->slots[P->steps[0].in_slots[1]].read_by_kernels);
        CHECK_STR_CONTAINS(P->source, "embedding backward");
        int hit = 0;
        WkLib *lib = wk_cc_load(P->source, &hit);
        CHECK(lib != NULL);
        int (*entry)(void **) = NULL;
        if (lib) *(void **)&entry = wk_cc_symbol(lib, P->steps[0].program->entry);
        CHECK(entry != NULL);
        if (entry) {
            float gd[24], out[20], want[20] = {0};
            /* indices at even positions: 3 1 3 / 1 9 -2 (1 is padding, 9 and -2 out of range) */
            int64_t ix[12] = {3, 77, 1, 77, 3, 77, 1, 77, 9, 77, -2, 77};
            for (int k = 0; k < 24; k++) gd[k] = (float)k * 0.5f - 3.0f;
            for (int k = 0; k < 20; k++) out[k] = 123.0f; /* the step zeroes its output */
            for (int c = 0; c < 4; c++) /* rows 0 and 2 (index 3, count 2) are all that count */
                want[3 * 4 + c] = (scale ? 0.5f : 1.0f) * gd[c] + (scale ? 0.5f : 1.0f) * gd[2 * 4 + c];
            void *bufs[3] = {gd, ix, out};
            CHECK_EQ_INT(entry(bufs), 0);
            for (int k = 0; k < 20; k++) CHECK(out[k] == want[k]);
        }
        if (lib) wk_cc_close(lib);
        wk_plan_free(P);
        wk_graph_free(g);
    }
}

/* Complex values are carried, never computed: an input (wk_graph_input_any)
 * and an extern's complex output reach other externs and graph outputs; a
 * table op reading or making one, a VIEW of one and a complex input of the
 * plain builder are refused; lowering and both code generators refuse them
 * again, should a graph reach them some other way. */
static void test_complex_carried(void) {
    int64_t sz[2] = {3, 4};
    WkGraph *g = wk_graph_new();
    CHECK_EQ_INT(wk_graph_input(g, WK_C64, CPU, 2, sz, NULL, 0, "z"), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "complex64");
    int z = wk_graph_input_any(g, WK_C64, CPU, 2, sz, NULL, 0, "z");
    int x = wk_graph_input(g, WK_F32, CPU, 2, sz, NULL, 0, "x");
    CHECK(z >= 0 && x >= 0);
    int y = wk_graph_op(g, WK_OP_RELU, &x, 1, NULL);
    WkTensorMeta c = meta2(WK_C64, 3, 4, 4, 1);
    int in2[2] = {y, z};
    int e = wk_graph_extern(g, 0, "aten.mul.Tensor", in2, 2, &c, 1); /* complex out */
    CHECK(e >= 0 && wk_graph_value(g, e)->dtype == WK_C64);
    WkTensorMeta r = meta2(WK_F32, 3, 4, 4, 1);
    int a = wk_graph_extern(g, 1, "aten.abs.default", &e, 1, &r, 1); /* back to real */
    int back = wk_graph_op(g, WK_OP_EXP, &a, 1, NULL);
    CHECK(a >= 0 && back >= 0);
    /* refusals: a native op on a complex value, a conversion to complex, a view */
    CHECK_EQ_INT(wk_graph_op(g, WK_OP_NEG, &e, 1, NULL), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "complex");
    int add_in[2] = {x, z};
    CHECK_EQ_INT(wk_graph_op(g, WK_OP_ADD, add_in, 2, NULL), -1);
    WkAttrs at = {0};
    at.dtype = WK_C64;
    at.has_dtype = 1;
    CHECK_EQ_INT(wk_graph_op(g, WK_OP_CONVERT, &x, 1, &at), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "complex64");
    int64_t vints[] = {2, 4, 3, 1, 4, 0};
    WkAttrs vat = {0};
    vat.nints = 6;
    vat.ints = vints;
    CHECK_EQ_INT(wk_graph_op(g, WK_OP_VIEW, &z, 1, &vat), -1);
    wk_graph_output(g, back);
    wk_graph_output(g, e);
    wk_graph_output(g, z);
    WkPlan *P = wk_compile_plan(g);
    CHECK(P != NULL);
    if (P) {
        CHECK_EQ_INT(P->nextern, 2);
        CHECK_EQ_INT(P->slots[P->output_slot[1]].dtype, WK_C64);
        CHECK_EQ_INT(P->slots[P->output_slot[2]].input_index, 0);
    }
    wk_plan_free(P);
    wk_graph_free(g);

    /* a graph whose complex value is lowered (no op could make one: an
     * input read by nothing is enough to reach the lowering) */
    WkGraph *h = wk_graph_new();
    int hz = wk_graph_input_any(h, WK_C128, CPU, 2, sz, NULL, 0, "z");
    int hx = wk_graph_input(h, WK_F64, CPU, 2, sz, NULL, 0, "x");
    int hy = wk_graph_op(h, WK_OP_EXP, &hx, 1, NULL);
    wk_graph_output(h, hy);
    (void)hz;
    CHECK(wk_compile_graph(h) == NULL);
    CHECK_STR_CONTAINS(wk_error_get(), "complex128");
    wk_graph_free(h);
}


/* wk_graph_copy: the same inputs, nodes, attributes and outputs (the hash
 * equal); an extern node gains the extra outputs asked for, after its own,
 * and later values move up by as many ids. */
static void test_copy(void) {
    WkGraph *g = wk_graph_new();
    int64_t sz[2] = {3, 4};
    int x = wk_graph_input(g, WK_F32, CPU, 2, sz, NULL, 1, "L['x']");
    int s = wk_graph_scalar(g, WK_F64, 0.5, 0);
    int in2[2] = {x, s};
    int m = wk_graph_op(g, WK_OP_MUL, in2, 2, &(WkAttrs){0});
    WkTensorMeta out = meta2(WK_F32, 4, 3, 1, 4);
    int e = wk_graph_extern(g, 3, "aten.t", &m, 1, &out, 1);
    int64_t ints[] = {2, 4, 3, 3, 1, 0};
    WkAttrs va = {0};
    va.nints = 6;
    va.ints = ints;
    int v = wk_graph_op(g, WK_OP_VIEW, &e, 1, &va);
    WkAttrs ra = {0};
    ra.ndims = 1;
    ra.dims[0] = 1;
    int r = wk_graph_op(g, WK_OP_SUM, &v, 1, &ra);
    wk_graph_output(g, r);
    wk_graph_output(g, e);

    int map[16];
    WkGraph *c = wk_graph_copy(g, NULL, NULL, map);
    CHECK(c != NULL);
    CHECK_EQ_INT(wk_graph_hash(c), wk_graph_hash(g));
    CHECK_EQ_INT(wk_graph_nvalues(c), wk_graph_nvalues(g));
    CHECK(wk_graph_value(c, map[x])->requires_grad);
    CHECK(!strcmp(wk_graph_value(c, map[x])->source, "L['x']"));
    CHECK(wk_graph_value(c, map[s])->is_wrapped_number);
    wk_graph_free(c);

    /* node 2 (the extern) gains an int64 output */
    int extra[5] = {0, 0, 1, 0, 0};
    WkTensorMeta more = meta2(WK_I64, 4, 1, 1, 1);
    c = wk_graph_copy(g, extra, &more, map);
    CHECK(c != NULL);
    CHECK_EQ_INT(wk_graph_nvalues(c), wk_graph_nvalues(g) + 1);
    CHECK_EQ_INT(map[e], e);
    CHECK_EQ_INT(map[v], v + 1);
    CHECK_EQ_INT(map[r], r + 1);
    const WkNode *en = wk_graph_node(c, wk_graph_value(c, map[e])->node);
    CHECK_EQ_INT(en->noutputs, 2);
    CHECK_EQ_INT(wk_graph_value(c, map[e] + 1)->dtype, WK_I64);
    CHECK_EQ_INT(wk_graph_output_value(c, 0), map[r]);
    CHECK_EQ_INT(wk_graph_output_value(c, 1), map[e]);
    wk_graph_free(c);

    /* only an extern node may gain outputs */
    int bad[5] = {0, 1, 0, 0, 0};
    CHECK(wk_graph_copy(g, bad, &more, map) == NULL);
    CHECK(strstr(wk_error_get(), "only an extern node") != NULL);
    wk_graph_free(g);
}

int main(void) {
    test_builder();
    test_copy();
    test_complex_carried();
    test_plan();
    test_plan_embedding_backward();
    return CHECK_DONE();
}
