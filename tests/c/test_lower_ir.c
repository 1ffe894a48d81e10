/* test_lower_ir.c — the loop IR and the schedule without a C compiler:
 * hash-consing, constant folding, lowering with broadcasting, inlining by
 * substitution, the verifiers, materialisation decisions, kernel grouping,
 * dimension collapsing, and the dynamic-shape refusal. */
#include "test_codegen_util.h"

static void test_hash_consing(void) {
    WkGraph *g = wk_graph_new();
    int64_t sz[2] = {3, 4};
    int x = input_contig(g, WK_F32, 2, sz);
    int y = op_node(g, WK_OP_NEG, x, -1);
    wk_graph_output(g, y);
    WkLoopIR *L = wk_lower_graph(g);
    CHECK(L != NULL);
    if (!L) goto done;
    const WkSym *idx[2] = {L->ivar[0], L->ivar[1]};
    const WkLExpr *a = wk_lower_load(L, x, 2, idx), *a2 = wk_lower_load(L, x, 2, idx);
    CHECK(a == a2);
    const WkLExpr *one = wk_lower_const_f(L, WK_F32, 1.0);
    CHECK(wk_lower_binary(L, WK_LX_ADD, a, one) == wk_lower_binary(L, WK_LX_ADD, one, a));
    CHECK(wk_lower_binary(L, WK_LX_SUB, a, one) != wk_lower_binary(L, WK_LX_SUB, one, a));
    /* casts of constants fold; floats round to the target dtype */
    const WkLExpr *c = wk_lower_cast(L, WK_F32, wk_lower_const_f(L, WK_F64, 0.1));
    CHECK(c->op == WK_LX_CONST && c->f == (double)0.1f);
    CHECK(wk_lower_cast(L, WK_BOOL, wk_lower_const_f(L, WK_F64, NAN))->i == 1);
    CHECK(wk_lower_cast(L, WK_I8, wk_lower_const_i(L, WK_I64, 300))->i == 44);
    CHECK(wk_lower_const_f(L, WK_F32, NAN) == wk_lower_const_f(L, WK_F32, -NAN));
    CHECK(wk_lower_const_f(L, WK_F32, 0.0) != wk_lower_const_f(L, WK_F32, -0.0));
    /* the node's body is NEG(LOAD x[i0, i1]) */
    const WkLExpr *body = L->bufs[L->value_buf[y]].body;
    CHECK(body->op == WK_LX_NEG && body->a[0] == a);
    CHECK(wk_lower_check(L) == 0);
    wk_lower_free(L);
done:
    wk_graph_free(g);
}

static void test_broadcast_and_inline(void) {
    WkGraph *g = wk_graph_new();
    int64_t xs[2] = {5, 1}, ys[1] = {7};
    int x = input_contig(g, WK_F32, 2, xs), y = input_contig(g, WK_F32, 1, ys);
    int e = op_node(g, WK_OP_EXP, x, -1);
    int s = op_node(g, WK_OP_ADD, e, y);
    wk_graph_output(g, s);
    WkLoopIR *L = wk_lower_graph(g);
    CHECK(L != NULL);
    if (!L) goto done;
    CHECK(wk_lower_check(L) == 0);
    const WkLExpr *body = L->bufs[L->value_buf[s]].body;
    CHECK_EQ_INT(body->op, WK_LX_ADD);
    /* e is [5, 1]: its load from the [5, 7] add reads index (i0, 0) */
    const WkLExpr *le = body->a[0]->buf == e ? body->a[0] : body->a[1];
    int64_t v;
    CHECK(le->op == WK_LX_LOAD && le->idx[0] == L->ivar[0] && wk_sym_is_const(le->idx[1], &v) && v == 0);
    /* y is [7]: aligned to the last dim */
    const WkLExpr *ly = le == body->a[0] ? body->a[1] : body->a[0];
    CHECK(ly->op == WK_LX_LOAD && ly->nidx == 1 && ly->idx[0] == L->ivar[1]);
    /* calling e's definition at the load: EXP(LOAD x[i0, 0]) */
    const WkLExpr *inl = wk_lower_subst(L, body, NULL, 0, NULL, 0, NULL, NULL);
    CHECK(inl == body); /* nothing to inline: identity */
    WkStr out = {0};
    char *txt = wk_lower_print(L);
    CHECK_STR_CONTAINS(txt, "EXP.float32");
    CHECK_STR_CONTAINS(txt, "LOAD.float32 v0[i0, 0]");
    free(txt);
    wk_str_free(&out);
    wk_lower_free(L);
done:
    wk_graph_free(g);
}

/* cheap shared intermediates are recomputed; expensive ones feeding a
 * broadcast are materialised; pointwise outputs of one shape share a nest */
static void test_schedule_decisions(void) {
    WkGraph *g = wk_graph_new();
    int64_t xs[2] = {64, 1}, ys[2] = {64, 50};
    int x = input_contig(g, WK_F32, 2, xs), y = input_contig(g, WK_F32, 2, ys);
    /* t = tanh(exp(x) * 2) + log(x): [64, 1], 11+ weighted ops, read 50x by [64, 50] */
    int t = op_node(g, WK_OP_ADD, op_node(g, WK_OP_TANH, op_node(g, WK_OP_EXP, x, -1), -1),
                    op_node(g, WK_OP_LOG, x, -1));
    int a = op_node(g, WK_OP_MUL, y, t);
    int cheap = op_node(g, WK_OP_NEG, y, -1);                  /* used by two outputs */
    int b = op_node(g, WK_OP_ADD, cheap, y);
    int c = op_node(g, WK_OP_MUL, cheap, cheap);
    wk_graph_output(g, a);
    wk_graph_output(g, b);
    wk_graph_output(g, c);
    WkLoopIR *L = wk_lower_graph(g);
    CHECK(L != NULL);
    if (!L) goto done;
    WkSchedule *S = wk_sched_build(L);
    CHECK(S != NULL);
    if (!S) goto free_l;
    CHECK(wk_sched_check(S) == 0);
    CHECK(S->value_buf[t] >= 0);             /* materialised (TEMP) */
    CHECK_EQ_INT(S->bufs[S->value_buf[t]].kind, WK_BUF_TEMP);
    CHECK(S->value_buf[cheap] < 0);          /* inlined */
    CHECK_EQ_INT(S->nkernels, 2);            /* t's nest, then a, b, c in one nest */
    CHECK_EQ_INT(S->kernels[1].nstores, 3);
    CHECK_EQ_INT(S->kernels[1].nloops, 2);   /* t broadcasts along dim 1: no collapse */
    CHECK_EQ_INT(S->kernels[0].nloops, 1);
    char *txt = wk_sched_print(S);
    CHECK_STR_CONTAINS(txt, "kernel 1: pointwise {MUL NEG ADD MUL}");
    free(txt);
    wk_sched_free(S);
free_l:
    wk_lower_free(L);
done:
    wk_graph_free(g);
}

/* contiguous accesses collapse to one loop; a transposed input keeps two;
 * a reduction over the last two of three contiguous dims collapses to [a] x [b*c] */
static void test_collapse(void) {
    WkGraph *g = wk_graph_new();
    int64_t s3[3] = {4, 5, 6}, s2[2] = {8, 9}, tr[2] = {1, 8};
    int x = input_contig(g, WK_F64, 3, s3);
    int y = wk_graph_input(g, WK_F64, cpu, 2, s2, tr, 0, "L['y']");
    int d12[2] = {1, 2};
    int a = op_node(g, WK_OP_ABS, x, -1);
    int b = op_node(g, WK_OP_ABS, y, -1);
    int r = reduce_node(g, WK_OP_SUM, x, 2, d12, 0);
    wk_graph_output(g, a);
    wk_graph_output(g, b);
    wk_graph_output(g, r);
    WkLoopIR *L = wk_lower_graph(g);
    WkSchedule *S = L ? wk_sched_build(L) : NULL;
    CHECK(S != NULL);
    if (S) {
        CHECK(wk_sched_check(S) == 0);
        CHECK_EQ_INT(S->nkernels, 3);
        CHECK_EQ_INT(S->kernels[0].nloops, 1);
        CHECK_EQ_INT(S->kernels[0].sizes[0], 120);
        CHECK_EQ_INT(S->kernels[1].nloops, 2);
        CHECK_EQ_INT(S->kernels[2].kind, WK_SCHED_REDUCTION);
        CHECK_EQ_INT(S->kernels[2].nloops, 1);
        CHECK_EQ_INT(S->kernels[2].nred, 1);
        CHECK_EQ_INT(S->kernels[2].red_sizes[0], 30);
        CHECK_EQ_INT(S->kernels[2].reduce_outer, 0);
    }
    wk_sched_free(S);
    wk_lower_free(L);
    wk_graph_free(g);
}

static void test_dynamic_shapes_refused(void) {
    WkGraph *g = wk_graph_new();
    WkSymPool *p = wk_graph_syms(g);
    const WkSym *sizes[1] = {wk_sym_var(p, "s0")}, *strides[1] = {wk_sym_const(p, 1)};
    int x = wk_graph_input_sym(g, WK_F32, cpu, 1, sizes, strides, 0, "L['x']");
    CHECK(x >= 0);
    int y = op_node(g, WK_OP_EXP, x, -1);
    wk_graph_output(g, y);
    wk_error_clear();
    WkProgram *prog = wk_compile_graph(g);
    CHECK(prog == NULL);
    CHECK_STR_CONTAINS(wk_error_get(), "dynamic shapes not supported yet");
    wk_program_free(prog);
    wk_graph_free(g);
}

/* a graph with no nodes: outputs are inputs; no kernels */
static void test_identity_graph(void) {
    WkGraph *g = wk_graph_new();
    int64_t sz[1] = {3};
    int x = input_contig(g, WK_I64, 1, sz);
    wk_graph_output(g, x);
    wk_graph_output(g, x);
    WkProgram *p = wk_compile_graph(g);
    CHECK(p != NULL);
    if (p) {
        CHECK_EQ_INT(p->nkernels, 0);
        CHECK_EQ_INT(p->nbufs, 1);
        CHECK_EQ_INT(p->output_buf[0], 0);
        CHECK_EQ_INT(p->output_buf[1], 0);
        CHECK_STR_CONTAINS(p->source, p->entry);
    }
    wk_program_free(p);
    wk_graph_free(g);
}

/* softmax rows: max, sum(exp) and the normalisation share the row loop */
static void test_row_groups(void) {
    WkGraph *g = wk_graph_new();
    int64_t sz[2] = {64, 300};
    int x = input_contig(g, WK_F32, 2, sz);
    int d1[1] = {1};
    int m = reduce_node(g, WK_OP_AMAX, x, 1, d1, 1);
    int e = op_node(g, WK_OP_EXP, op_node(g, WK_OP_SUB, x, m), -1);
    int s = reduce_node(g, WK_OP_SUM, e, 1, d1, 1);
    wk_graph_output(g, op_node(g, WK_OP_DIV, e, s));
    /* a column sum cannot join rows */
    int d0[1] = {0};
    wk_graph_output(g, reduce_node(g, WK_OP_SUM, x, 1, d0, 0));
    WkLoopIR *L = wk_lower_graph(g);
    WkSchedule *S = L ? wk_sched_build(L) : NULL;
    CHECK(S != NULL);
    if (S) {
        CHECK(wk_sched_check(S) == 0);
        CHECK_EQ_INT(S->nkernels, 4);
        CHECK_EQ_INT(S->kernels[0].group, 0);
        CHECK_EQ_INT(S->kernels[1].group, 0);
        CHECK_EQ_INT(S->kernels[2].group, 0);
        CHECK_EQ_INT(S->kernels[3].group, 3);
        CHECK_EQ_INT(S->kernels[3].reduce_outer, 1);
        /* the verifier catches a phase reading another row */
        S->kernels[3].group = 0;
        CHECK(wk_sched_check(S) < 0);
    }
    wk_sched_free(S);
    wk_lower_free(L);
    wk_graph_free(g);
}

/* A residual sum h = x + y that an RMS norm normalises and the graph
 * returns: fuse.c collapses the sum into one loop, rows.c splits it back
 * into [rows, cols] as the first phase of the norm's row group, and the
 * norm's phases read h in the row the first phase stored. The verifier
 * refuses reads outside that row. */
static void test_residual_sum_joins_the_norm_rows(void) {
    WkGraph *g = wk_graph_new();
    int64_t sz[3] = {4, 16, 96};
    int x = input_contig(g, WK_F32, 3, sz), y = input_contig(g, WK_F32, 3, sz);
    int d2[1] = {2};
    int h = op_node(g, WK_OP_ADD, x, y);
    int ms = reduce_node(g, WK_OP_MEAN, op_node(g, WK_OP_MUL, h, h), 1, d2, 1);
    int r = op_node(g, WK_OP_RSQRT, op_node(g, WK_OP_ADD, ms, wk_graph_scalar(g, WK_F64, 1e-6, 0)), -1);
    wk_graph_output(g, h);
    wk_graph_output(g, op_node(g, WK_OP_MUL, h, r));
    WkLoopIR *L = wk_lower_graph(g);
    WkSchedule *S = L ? wk_sched_build(L) : NULL;
    CHECK(S != NULL);
    if (S) {
        CHECK(wk_sched_check(S) == 0);
        CHECK_EQ_INT(S->nkernels, 3);
        for (int k = 0; k < S->nkernels; k++) CHECK_EQ_INT(S->kernels[k].group, 0);
        const WkSchedKernel *P = &S->kernels[0], *R = &S->kernels[1];
        CHECK_EQ_INT(P->kind, WK_SCHED_POINTWISE);
        CHECK_EQ_INT(P->nloops, 2);
        CHECK_EQ_INT((int)P->sizes[0], 64);
        CHECK_EQ_INT((int)P->sizes[1], 96);
        CHECK_EQ_INT(R->kind, WK_SCHED_REDUCTION);
        /* h's row as the norm reads it, and reads off that row */
        const WkSym *i0 = L->ivar[0], *r0 = L->rvar[0];
        const WkSym *row = wk_sym_mul(L->syms, i0, wk_sym_const(L->syms, 96));
        const WkSchedStore *st = &P->stores[0];
        CHECK(wk_sched_row_read_ok(S, P, st, R, wk_sym_add(L->syms, row, r0)));
        const WkSym *one = wk_sym_const(L->syms, 1), *two = wk_sym_const(L->syms, 2);
        CHECK(!wk_sched_row_read_ok(S, P, st, R, wk_sym_add(L->syms, wk_sym_add(L->syms, row, r0), one)));
        CHECK(wk_sched_row_read_ok(S, P, st, R, wk_sym_add(L->syms, row, wk_sym_const(L->syms, 95))));
        CHECK(!wk_sched_row_read_ok(S, P, st, R, wk_sym_add(L->syms, row, wk_sym_const(L->syms, 96))));
        CHECK(!wk_sched_row_read_ok(S, P, st, R, wk_sym_add(L->syms, row, wk_sym_const(L->syms, -1))));
        CHECK(!wk_sched_row_read_ok(S, P, st, R, wk_sym_add(L->syms, row, wk_sym_mul(L->syms, r0, two))));
        CHECK(!wk_sched_row_read_ok(S, P, st, R, r0));
        /* the verifier catches a phase reading h one element along */
        const WkSchedStore saved = R->stores[0];
        WkSchedStore *rs = &S->kernels[1].stores[0];
        const WkSym *shifted[1] = {wk_sym_add(L->syms, r0, wk_sym_const(L->syms, 1))};
        const WkLExpr *moved = wk_lower_subst(L, rs->expr->a[0], NULL, 0, shifted, 1, NULL, NULL);
        rs->expr = wk_lower_reduce(L, rs->expr->rop, rs->expr->dtype, moved, R->nred, R->red_sizes);
        CHECK(wk_sched_check(S) < 0);
        *rs = saved;
        CHECK(wk_sched_check(S) == 0);
    }
    wk_sched_free(S);
    wk_lower_free(L);
    wk_graph_free(g);
}

/* work nobody reads (an unused reduction, an unused exp) gets no kernel */
static void test_dead_values(void) {
    WkGraph *g = wk_graph_new();
    int64_t sz[2] = {6, 7};
    int x = input_contig(g, WK_F32, 2, sz);
    int d1[1] = {1};
    int dead_r = reduce_node(g, WK_OP_SUM, x, 1, d1, 1);
    int dead_p = op_node(g, WK_OP_EXP, dead_r, -1);
    int y = op_node(g, WK_OP_NEG, x, -1);
    CHECK(dead_p >= 0);
    wk_graph_output(g, y);
    WkProgram *p = wk_compile_graph(g);
    CHECK(p != NULL);
    if (p) {
        CHECK_EQ_INT(p->nkernels, 1);
        CHECK_EQ_INT(p->nbufs, 2);
    }
    wk_program_free(p);
    wk_graph_free(g);
}

/* Indirect loads: an INDEX of an INDEX (the inner one inlined into the
 * outer one's kernel) gives one load of the table whose index names a
 * BOUND-checked load, which itself reads the first index at an indirect
 * index; substitution renames the indirect variables; the schedule turns
 * every load into a READ whose operands are READs. */
static void test_indirect_loads(void) {
    WkGraph *g = wk_graph_new();
    int64_t ws[2] = {12, 7}, as[1] = {9}, bs[2] = {4, 3};
    int w = input_contig(g, WK_F32, 2, ws);
    int a = wk_graph_input(g, WK_I64, (WkDevice){WK_DEV_CPU, 0}, 1, as, (int64_t[]){1}, 0, "a");
    int b = wk_graph_input(g, WK_I32, (WkDevice){WK_DEV_CPU, 0}, 2, bs, (int64_t[]){3, 1}, 0, "b");
    int64_t ints[2] = {0, 0};
    WkAttrs at = {0};
    at.nints = 2;
    at.ints = ints;
    int inner = wk_graph_op(g, WK_OP_INDEX, (int[]){w, a}, 2, &at);
    int outer = wk_graph_op(g, WK_OP_INDEX, (int[]){inner, b}, 2, &at);
    CHECK(inner >= 0 && outer >= 0);
    const WkValue *ov = wk_graph_value(g, outer);
    CHECK_EQ_INT(ov->ndim, 3);
    wk_graph_output(g, op_node(g, WK_OP_EXP, outer, -1));
    WkLoopIR *L = wk_lower_graph(g);
    CHECK(L != NULL);
    if (!L) goto done;
    CHECK(wk_lower_check(L) == 0);
    const WkLExpr *ld = L->bufs[L->value_buf[inner]].body;
    CHECK(ld->op == WK_LX_LOAD && ld->nargs == 1 && ld->a[0]->op == WK_LX_BOUND && ld->a[0]->i == 12);
    CHECK(wk_lower_xvar(L, ld->idx[0]->var) == ld->a[0]);
    /* inlining the inner INDEX into the outer: the table load's index names
     * a check of a's load, whose own index names a check of b's load */
    const WkLExpr *body = L->bufs[L->value_buf[outer]].body;
    const WkLExpr *inl = wk_lower_subst(L, body, NULL, 0, NULL, 0, NULL, NULL);
    CHECK(inl == body);
    WkSchedule *S = wk_sched_build(L);
    CHECK(S != NULL);
    if (S) {
        CHECK(wk_sched_check(S) == 0);
        CHECK_EQ_INT(S->nkernels, 1); /* both INDEXes and the EXP in one kernel */
        const WkLExpr *e = S->kernels[0].stores[0].expr; /* EXP(READ w[...]) */
        CHECK(e->op == WK_LX_EXP && e->a[0]->op == WK_LX_READ && e->a[0]->nargs == 1);
        const WkLExpr *chk = e->a[0]->a[0];
        CHECK(chk->op == WK_LX_BOUND && chk->i == 12);
        const WkLExpr *ra = chk->a[0]->op == WK_LX_READ ? chk->a[0] : NULL; /* a[j], j = checked b */
        CHECK(ra && ra->nargs == 1 && ra->a[0]->op == WK_LX_BOUND && ra->a[0]->i == 9);
        char *txt = wk_sched_print(S);
        CHECK_STR_CONTAINS(txt, "BOUND.int64");
        free(txt);
        wk_sched_free(S);
    }
    WkProgram *p = wk_compile_graph(g);
    CHECK(p != NULL);
    if (p) CHECK_STR_CONTAINS(p->source, "__atomic_store_n(&wk_oob, 1");
    wk_program_free(p);
    wk_lower_free(L);
done:
    wk_graph_free(g);
}

int main(void) {
    test_indirect_loads();
    test_dead_values();
    test_row_groups();
    test_residual_sum_joins_the_norm_rows();
    test_hash_consing();
    test_broadcast_and_inline();
    test_schedule_decisions();
    test_collapse();
    test_dynamic_shapes_refused();
    test_identity_graph();
    return CHECK_DONE();
}
