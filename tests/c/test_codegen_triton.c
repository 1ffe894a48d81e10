/* test_codegen_triton.c — the Triton target of wk_compile_plan_for, under
 * ASan/UBSan: the plan's source is one module (prelude once, one
 * @triton.jit function per kernel or row group), each KERNELS step lists
 * its launches (names found in the source, parameters that are plan
 * buffers, grids over the output space, configs), a softmax over enough rows
 * is one row-group kernel with three phases, a long reduction loops,
 * float64 temporaries of decompositions become float32 while a graph that
 * asks for float64 keeps it, and graphs with extern nodes cut into stages.
 * Running the kernels is tested from Python (tests/codegen/
 * test_triton_interpret.py under Triton's interpreter, tests/gpu on a GPU). */
#include "test_codegen_util.h"

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static WkPlan *plan_of(WkGraph *g) {
    WkPlan *P = wk_compile_plan_for(g, WK_TARGET_TRITON);
    if (!P) fprintf(stderr, "compile failed: %s\n", wk_error_get());
    return P;
}

static void check_launches(const WkPlan *P) {
    for (int s = 0; s < P->nsteps; s++) {
        const WkStep *st = &P->steps[s];
        if (st->kind != WK_STEP_KERNELS) continue;
        const WkProgram *p = st->program;
        CHECK_EQ_INT(p->target, WK_TARGET_TRITON);
        CHECK(p->ntriton >= 1);
        for (int k = 0; k < p->ntriton; k++) {
            const WkTritonKernel *tk = &p->triton[k];
            char def[200];
            snprintf(def, sizeof def, "def %s(", tk->name);
            CHECK_EQ_INT(count(P->source, def), 1);
            CHECK(tk->nconfigs >= 1 && tk->nconfigs <= WK_TRITON_MAX_CONFIGS);
            for (int c = 0; c < tk->nconfigs; c++) {
                const WkTritonConfig *cf = &tk->configs[c];
                CHECK(cf->xblock >= 1 && (cf->xblock & (cf->xblock - 1)) == 0);
                CHECK(cf->rblock >= 1 && (cf->rblock & (cf->rblock - 1)) == 0);
                CHECK(cf->num_warps >= 1 && cf->num_warps <= 16);
            }
            for (int i = 0; i < tk->nparams; i++)
                CHECK((tk->params[i] >= 0 && tk->params[i] < p->nbufs) || (tk->params[i] == -1 && tk->scratch));
        }
    }
}

static void test_pointwise_module(void) {
    WkGraph *g = wk_graph_new();
    int64_t sz[2] = {33, 70};
    int x = input_contig(g, WK_BF16, 2, sz);
    int y = input_contig(g, WK_BF16, 2, sz);
    int s = op_node(g, WK_OP_ADD, x, y);
    int e = wk_graph_op(g, WK_OP_TANH, &s, 1, &(WkAttrs){0});
    wk_graph_output(g, e);
    WkPlan *P = plan_of(g);
    CHECK(P != NULL);
    if (P) {
        CHECK_EQ_INT(P->target, WK_TARGET_TRITON);
        CHECK_EQ_INT(count(P->source, "import triton.language as tl"), 1);
        CHECK_EQ_INT(count(P->source, "@triton.jit"), 9); /* 8 helpers + 1 kernel */
        CHECK(strstr(P->source, ".to(tl.float32)") != NULL);  /* 16-bit loads widen */
        CHECK(strstr(P->source, ".to(tl.bfloat16)") != NULL); /* and stores narrow */
        check_launches(P);
        const WkTritonKernel *tk = &P->steps[0].program->triton[0];
        CHECK_EQ_INT(tk->has_r, 0);
        CHECK(tk->xnumel == 33 * 70);
        CHECK_EQ_INT(tk->nparams, 3);
        wk_plan_free(P);
    }
    wk_graph_free(g);
}

static void test_softmax_is_one_row_group_kernel(void) {
    WkGraph *g = wk_graph_new();
    int64_t sz[2] = {64, 1000};
    int x = input_contig(g, WK_F32, 2, sz);
    WkAttrs at = {0};
    at.ndims = 1;
    at.dims[0] = 1;
    int y = wk_graph_op(g, WK_OP_SOFTMAX, &x, 1, &at);
    wk_graph_output(g, y);
    WkPlan *P = plan_of(g);
    CHECK(P != NULL);
    if (P) {
        check_launches(P);
        const WkProgram *p = P->steps[0].program;
        CHECK_EQ_INT(p->ntriton, 1);
        CHECK_EQ_INT(p->triton[0].has_r, 1);
        CHECK(p->triton[0].xnumel == 64);
        CHECK(p->triton[0].configs[0].rblock == 1024); /* persistent: the whole row */
        CHECK(strstr(P->source, "# phase 2") != NULL);
        /* the row is loaded once and shared by the phases */
        CHECK_EQ_INT(count(P->source, "tl.load(b0 "), 1);
        wk_plan_free(P);
    }
    wk_graph_free(g);
}

static void test_long_reduction_loops(void) {
    WkGraph *g = wk_graph_new();
    int64_t sz[2] = {200, 10000};
    int x = input_contig(g, WK_F32, 2, sz);
    int dims[1] = {1};
    int r = reduce_node(g, WK_OP_SUM, x, 1, dims, 0);
    wk_graph_output(g, r);
    WkPlan *P = plan_of(g);
    CHECK(P != NULL);
    if (P) {
        check_launches(P);
        CHECK(strstr(P->source, "for roff_p0 in range(0, 10000, RBLOCK):") != NULL);
        CHECK(P->steps[0].program->triton[0].nconfigs > 1); /* the autotuner's candidates */
        wk_plan_free(P);
    }
    wk_graph_free(g);
}

static void test_split_reduction(void) {
    /* two outputs of 200000 elements each: partials across programs, then
     * a second launch reducing them */
    WkGraph *g = wk_graph_new();
    int64_t sz[2] = {2, 200000};
    int x = input_contig(g, WK_F32, 2, sz);
    int dims[1] = {1};
    int r = reduce_node(g, WK_OP_AMAX, x, 1, dims, 0);
    wk_graph_output(g, r);
    WkPlan *P = plan_of(g);
    CHECK(P != NULL);
    if (P) {
        check_launches(P);
        const WkProgram *p = P->steps[0].program;
        CHECK_EQ_INT(p->ntriton, 2);
        if (p->ntriton == 2) {
            CHECK_EQ_INT(p->triton[0].scratch, 1);
            CHECK_EQ_INT(p->triton[1].scratch, 2);
            CHECK(p->triton[0].xnumel == 2 * p->triton[0].scratch_elems / 2);
            CHECK(p->triton[1].xnumel == 2);
            CHECK_EQ_INT(p->triton[0].scratch_dtype, WK_F32);
        }
        wk_plan_free(P);
    }
    wk_graph_free(g);
}

static void test_float64_temporaries(void) {
    /* layer_norm's statistics are float64 in the loop IR: float32 on the GPU */
    WkGraph *g = wk_graph_new();
    int64_t sz[2] = {40, 64}, wsz[1] = {64};
    int x = input_contig(g, WK_F32, 2, sz);
    int w = input_contig(g, WK_F32, 1, wsz);
    int b = input_contig(g, WK_F32, 1, wsz);
    WkAttrs at = {0};
    at.ndims = 1;
    at.dims[0] = 1;
    at.fvalue = 1e-5;
    int ins[3] = {x, w, b};
    int y = wk_graph_op(g, WK_OP_LAYER_NORM, ins, 3, &at);
    CHECK(y >= 0);
    wk_graph_output(g, y);
    WkPlan *P = plan_of(g);
    CHECK(P != NULL);
    if (P) {
        check_launches(P);
        CHECK(strstr(P->source, "float64") == NULL);
        const WkProgram *p = P->steps[0].program;
        for (int k = 0; k < p->nbufs; k++) CHECK(p->bufs[k].dtype != WK_F64);
        wk_plan_free(P);
    }
    wk_graph_free(g);
    /* a graph that computes in float64 keeps it */
    g = wk_graph_new();
    x = input_contig(g, WK_F64, 2, sz);
    int dims[1] = {1};
    int r = reduce_node(g, WK_OP_SUM, x, 1, dims, 0);
    wk_graph_output(g, r);
    P = plan_of(g);
    CHECK(P != NULL);
    if (P) {
        CHECK(strstr(P->source, "tl.float64") != NULL);
        wk_plan_free(P);
    }
    wk_graph_free(g);
}

static void test_extern_cuts_stages(void) {
    WkGraph *g = wk_graph_new();
    int64_t sz[2] = {8, 16};
    int x = input_contig(g, WK_F32, 2, sz);
    int e = op_node(g, WK_OP_EXP, x, -1);
    WkTensorMeta m = {0};
    m.dtype = WK_F32;
    m.ndim = 2;
    m.sizes[0] = 8, m.sizes[1] = 16;
    m.strides[0] = 16, m.strides[1] = 1;
    int mm = wk_graph_extern(g, 0, "mm", &e, 1, &m, 1);
    CHECK(mm >= 0);
    int r = op_node(g, WK_OP_RELU, mm, -1);
    wk_graph_output(g, r);
    WkPlan *P = plan_of(g);
    CHECK(P != NULL);
    if (P) {
        CHECK_EQ_INT(P->nsteps, 3);
        check_launches(P);
        CHECK_EQ_INT(count(P->source, "import triton\n"), 1); /* one module for all stages */
        wk_plan_free(P);
    }
    wk_graph_free(g);
}

int main(void) {
    test_pointwise_module();
    test_softmax_is_one_row_group_kernel();
    test_long_reduction_loops();
    test_split_reduction();
    test_float64_temporaries();
    test_extern_cuts_stages();
    return CHECK_DONE();
}
