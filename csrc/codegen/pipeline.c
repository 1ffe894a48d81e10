/* pipeline.c — wk_compile_graph, the flat driver of the compiler: the whole
 * pass order is visible in one function, with a verifier after each pass
 * and a named dump of its result when debugging output is on
 * (WICK_DEBUG_DIR, or WICK_LOG=code). Also wk_compile_plan, which cuts a
 * graph with EXTERN nodes into kernel stages and extern steps (program.h).
 * Owns the lifetimes of WkProgram and WkPlan. */
#include "cgen.h"

#include <limits.h>
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

static WkProgram *make_program(const WkSchedule *S, char *source, const char *entry, WkTarget target) {
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
    P->temps_bytes = S->temps_bytes;
    P->summary = summarise(S);
    P->target = target;
    return P;
}

/* lower -> check -> schedule (materialise, fuse) -> check -> C codegen */
static WkProgram *compile_graph_named(const WkGraph *g, const char *entry, WkTarget target) {
    WkLoopIR *L = NULL;
    WkSchedule *S = NULL;
    WkProgram *P = NULL;
    WkStr src = {0};
    int debug = wk_log_on(WK_LOG_CODE) || *wk_env_str(WK_ENV_DEBUG_DIR);
    uint64_t h = wk_graph_hash(g);
    if (wk_graph_nexterns(g) > 0) {
        wk_error_set("wk_compile_graph: the graph has EXTERN nodes (use wk_compile_plan)");
        return NULL;
    }
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

    S = wk_sched_build_for(L, target == WK_TARGET_TRITON);
    if (!S) goto error;
    if (L->xoverflow) { /* lower.h: some LOAD/READ's operands did not fit */
        wk_error_set("a load with more than %d indirect indices", WK_MAX_DIMS);
        goto error;
    }
    if (debug) {
        char *t = wk_sched_print(S);
        dump("schedule", h, "txt", t);
        free(t);
        if (wk_sched_check(S) < 0) goto error;
    }

    wk_str_append(&src, "");
    WkTritonKernel *tks = NULL;
    int ntk = 0;
    if (target == WK_TARGET_TRITON ? wk_cgen_triton(S, entry, &src, &tks, &ntk) < 0 : wk_cgen_c(S, entry, &src) < 0)
        goto error;
    dump("kernel", h, target == WK_TARGET_TRITON ? "py" : "c", src.data);
    wk_log(WK_LOG_CODE, "graph %016llx: %d kernels\n%s", (unsigned long long)h, S->nkernels, src.data);

    P = make_program(S, src.data, entry, target);
    P->triton = tks;
    P->ntriton = ntk;
    src.data = NULL;
error:
    wk_str_free(&src);
    wk_sched_free(S);
    wk_lower_free(L);
    return P;
}

WkProgram *wk_compile_graph(const WkGraph *g) {
    char entry[64];
    snprintf(entry, sizeof entry, "wick_graph_%016llx", (unsigned long long)wk_graph_hash(g));
    return compile_graph_named(g, entry, WK_TARGET_C);
}

void wk_program_free(WkProgram *p) {
    if (!p) return;
    free(p->source);
    free(p->entry);
    free(p->bufs);
    free(p->output_buf);
    free(p->summary);
    for (int k = 0; k < p->ntriton; k++) {
        free(p->triton[k].name);
        free(p->triton[k].params);
    }
    free(p->triton);
    free(p);
}

/* ---- plans ------------------------------------------------------------------ */

void wk_plan_free(WkPlan *p) {
    if (!p) return;
    for (int i = 0; i < p->nsteps; i++) {
        WkStep *st = &p->steps[i];
        free(st->in_slots);
        free(st->out_slots);
        wk_program_free(st->program);
        free(st->extern_name);
    }
    free(p->steps);
    free(p->slots);
    free(p->output_slot);
    free(p->source);
    free(p->summary);
    free(p);
}

typedef WkVec(int) IntVec;

typedef struct {
    const WkGraph *g;
    WkPlan *P;
    int *stage;       /* by node: KERNELS stage or extern group; -1 for SCALAR; VIEW: the
                         extern group after which its VIEW step may run */
    int *slot;        /* by value: slot id or -1 */
    int *needs_slot;  /* by value */
    WkVec(WkStep) steps;
    WkVec(WkSlot) slots;
    WkStr src;
    WkStr summary;
    uint64_t hash;
    WkTarget target;
    /* C stages already in src: their source with the entry's name blanked,
     * and that entry (a stage whose code is the same runs that function) */
    WkVec(char *) stage_code;
    WkVec(char *) stage_entry;
} PlanBuilder;

/* src with every occurrence of name replaced by '@' (never in C code). */
static char *blank_name(const char *src, const char *name) {
    WkStr out = {0};
    size_t n = strlen(name);
    wk_str_append(&out, "");
    for (const char *p = src, *q; *p; p = q + n) {
        q = strstr(p, name);
        if (!q) {
            wk_str_append(&out, p);
            break;
        }
        wk_str_printf(&out, "%.*s@", (int)(q - p), p);
    }
    return out.data;
}

static int value_is_scalar(const WkGraph *g, const WkValue *v) {
    return v->node >= 0 && wk_graph_node(g, v->node)->op == WK_OP_SCALAR;
}

static int is_view_value(const WkGraph *g, int value) {
    const WkValue *v = wk_graph_value(g, value);
    return v->node >= 0 && wk_graph_node(g, v->node)->op == WK_OP_VIEW;
}

static int new_slot(PlanBuilder *B, int value) {
    const WkValue *v = wk_graph_value(B->g, value);
    WkSlot s = {0};
    s.dtype = v->dtype;
    s.ndim = v->ndim;
    s.numel = 1;
    for (int d = 0; d < v->ndim; d++) {
        if (!wk_sym_is_const(v->sizes[d], &s.sizes[d]) || !wk_sym_is_const(v->strides[d], &s.strides[d])) {
            wk_error_set("value %%%d has symbolic sizes; the CPU runtime needs static shapes", value);
            return -1;
        }
        s.numel *= s.sizes[d];
    }
    s.input_index = v->input_index;
    s.value = value;
    s.producer = -1;
    s.last_step = -1;
    B->slot[value] = B->slots.len;
    wk_vec_push(&B->slots, s);
    return B->slot[value];
}

static void note_read(PlanBuilder *B, int slot, int step, int kernels) {
    WkSlot *s = &B->slots.data[slot];
    if (step > s->last_step) s->last_step = step;
    if (kernels) s->read_by_kernels = 1;
}

/* A graph without externs is one stage: the graph itself, compiled as
 * wk_compile_graph would (same buffers, same output order). */
static int build_whole(PlanBuilder *B) {
    const WkGraph *g = B->g;
    int ninputs = wk_graph_ninputs(g), noutputs = wk_graph_noutputs(g);
    char entry[64];
    snprintf(entry, sizeof entry, "wick_graph_%016llx", (unsigned long long)B->hash);
    WkProgram *prog = compile_graph_named(g, entry, B->target);
    if (!prog) return -1;
    wk_str_append(&B->src, prog->source);
    B->P->nkernels = prog->nkernels;
    for (int n = 0; n < wk_graph_nnodes(g); n++) B->P->nnative += wk_graph_node(g, n)->op != WK_OP_SCALAR;
    WkStep st = {0};
    st.kind = WK_STEP_KERNELS;
    st.program = prog;
    st.extern_index = -1;
    st.nin = ninputs;
    st.in_slots = wk_xcalloc((size_t)ninputs + 1, sizeof(int));
    st.nout = noutputs;
    st.out_slots = wk_xcalloc((size_t)noutputs + 1, sizeof(int));
    for (int i = 0; i < ninputs; i++) {
        st.in_slots[i] = B->slot[wk_graph_input_value(g, i)];
        note_read(B, st.in_slots[i], 0, 1);
    }
    for (int j = 0; j < noutputs; j++) {
        st.out_slots[j] = B->slot[wk_graph_output_value(g, j)];
        if (B->slots.data[st.out_slots[j]].input_index < 0) B->slots.data[st.out_slots[j]].producer = 0;
    }
    wk_str_printf(&B->summary, "step 0: kernels (%d nodes, %d kernels, entry %s)\n", B->P->nnative,
                  prog->nkernels, entry);
    wk_str_append(&B->summary, prog->summary ? prog->summary : "");
    wk_vec_push(&B->steps, st);
    return 0;
}

/* Value u inside stage subgraph `sub` (map[u] afterwards): a copy of a
 * SCALAR, a stage input read from u's slot, or, for a VIEW that this stage
 * reads, the view again over its base (kernels remap indices, no tensor). */
static int map_value(PlanBuilder *B, WkGraph *sub, int u, int *map, IntVec *ins) {
    const WkGraph *g = B->g;
    if (map[u] >= 0) return 0;
    const WkValue *uv = wk_graph_value(g, u);
    if (value_is_scalar(g, uv)) {
        const WkAttrs *a = &wk_graph_node(g, uv->node)->attrs;
        map[u] = wk_graph_scalar(sub, uv->dtype, a->fvalue, a->ivalue);
    } else if (is_view_value(g, u)) {
        const WkNode *vn = wk_graph_node(g, uv->node);
        if (map_value(B, sub, vn->inputs[0], map, ins) < 0) return -1;
        map[u] = wk_graph_op(sub, WK_OP_VIEW, &map[vn->inputs[0]], 1, &vn->attrs);
    } else {
        int sl = B->slot[u];
        if (sl < 0) {
            wk_error_set("plan: value %%%d crosses a stage without a slot", u);
            return -1;
        }
        const WkSlot *s = &B->slots.data[sl];
        map[u] = wk_graph_input_any(sub, s->dtype, uv->device, s->ndim, s->sizes, s->strides,
                                    uv->requires_grad, uv->source);
        if (map[u] >= 0) wk_vec_push(ins, sl);
    }
    return map[u] < 0 ? -1 : 0;
}

/* Builds and compiles KERNELS stage `k`; appends its step unless empty. */
static int build_stage(PlanBuilder *B, int k, int *map) {
    const WkGraph *g = B->g;
    int nvalues = wk_graph_nvalues(g), nnodes = wk_graph_nnodes(g);
    WkGraph *sub = wk_graph_new();
    IntVec ins = {0};
    WkVec(int) outs = {0};
    int rc = -1, nops = 0;
    for (int v = 0; v < nvalues; v++) map[v] = -1;
    for (int n = 0; n < nnodes; n++) {
        const WkNode *node = wk_graph_node(g, n);
        int scalar_output = node->op == WK_OP_SCALAR && k == 0 && B->slot[node->output] >= 0;
        /* VIEWs come in through map_value, where a node of this stage reads one */
        if (node->op == WK_OP_EXTERN || node->op == WK_OP_VIEW || (B->stage[n] != k && !scalar_output)) continue;
        int small[8], *mapped = node->ninputs > 8 ? wk_xcalloc((size_t)node->ninputs, sizeof(int)) : small;
        for (int i = 0; i < node->ninputs; i++) {
            int u = node->inputs[i];
            if (map_value(B, sub, u, map, &ins) < 0) {
                if (mapped != small) free(mapped);
                goto done;
            }
            mapped[i] = map[u];
        }
        const WkValue *ov = wk_graph_value(g, node->output);
        if (node->op == WK_OP_SCALAR)
            map[node->output] = wk_graph_scalar(sub, ov->dtype, node->attrs.fvalue, node->attrs.ivalue);
        else
            map[node->output] = wk_graph_op(sub, node->op, mapped, node->ninputs, &node->attrs);
        if (mapped != small) free(mapped);
        if (map[node->output] < 0) goto done;
        nops += node->op != WK_OP_SCALAR;
    }
    for (int v = 0; v < nvalues; v++) {
        const WkValue *vv = wk_graph_value(g, v);
        if (map[v] < 0 || B->slot[v] < 0 || vv->node < 0) continue;
        if (value_is_scalar(g, vv) ? k != 0 : B->stage[vv->node] != k) continue;
        if (wk_graph_node(g, vv->node)->op == WK_OP_EXTERN || is_view_value(g, v)) continue;
        if (wk_graph_output(sub, map[v]) < 0) goto done;
        wk_vec_push(&outs, B->slot[v]);
    }
    if (outs.len == 0) { /* nothing anyone reads */
        rc = 0;
        goto done;
    }
    char entry[80];
    snprintf(entry, sizeof entry, "wick_plan_%016llx_s%d", (unsigned long long)B->hash, k);
    WkProgram *prog = compile_graph_named(sub, entry, B->target);
    if (!prog) goto done;
    /* each stage's static kernel<i> functions get a stage prefix (Triton
     * kernels are named after the entry already) */
    int c = B->target == WK_TARGET_C;
    /* A C stage whose code is an earlier stage's but for the entry's name
     * (the same layer of a model again: its buffers are the step's own, in
     * the same layout) runs that stage's function: the C compiler, most of a
     * cold compile's own time, sees each distinct stage once. */
    char *code = c ? blank_name(prog->source, entry) : NULL;
    int same = -1;
    for (int i = 0; code && i < B->stage_code.len && same < 0; i++)
        if (strcmp(B->stage_code.data[i], code) == 0) same = i;
    if (same >= 0) {
        free(code);
        free(prog->entry);
        prog->entry = wk_xstrdup(B->stage_entry.data[same]);
    } else {
        if (code) {
            wk_vec_push(&B->stage_code, code);
            wk_vec_push(&B->stage_entry, wk_xstrdup(entry));
        }
        /* a stage is self-contained (its prelude is guarded), so the unit may be
         * cut here and its parts compiled in parallel (runtime/cc.c) */
        if (c) wk_str_append(&B->src, WK_CC_PART_MARK);
        for (int i = 0; c && i < prog->nkernels; i++)
            wk_str_printf(&B->src, "#define kernel%d wick_s%d_kernel%d\n", i, k, i);
        wk_str_append(&B->src, prog->source);
        for (int i = 0; c && i < prog->nkernels; i++) wk_str_printf(&B->src, "#undef kernel%d\n", i);
    }
    B->P->nkernels += prog->nkernels;
    B->P->nnative += nops;

    WkStep st = {0};
    st.kind = WK_STEP_KERNELS;
    st.program = prog;
    st.nin = ins.len;
    st.in_slots = wk_xcalloc((size_t)ins.len + 1, sizeof(int));
    memcpy(st.in_slots, ins.data, sizeof(int) * (size_t)ins.len);
    st.nout = outs.len;
    st.out_slots = wk_xcalloc((size_t)outs.len + 1, sizeof(int));
    memcpy(st.out_slots, outs.data, sizeof(int) * (size_t)outs.len);
    st.extern_index = -1;
    int step = B->steps.len;
    for (int i = 0; i < st.nin; i++) note_read(B, st.in_slots[i], step, 1);
    for (int j = 0; j < st.nout; j++) B->slots.data[st.out_slots[j]].producer = step;
    wk_str_printf(&B->summary, "step %d: kernels (%d nodes, %d kernels, entry %s%s)\n", step, nops, prog->nkernels,
                  prog->entry, same >= 0 ? ", the code of an earlier stage" : "");
    wk_str_append(&B->summary, prog->summary ? prog->summary : "");
    wk_vec_push(&B->steps, st);
    rc = 0;
done:
    wk_vec_free(&ins);
    wk_vec_free(&outs);
    wk_graph_free(sub);
    return rc;
}

static void add_extern_step(PlanBuilder *B, const WkNode *node) {
    WkStep st = {0};
    int step = B->steps.len;
    st.kind = WK_STEP_EXTERN;
    st.extern_index = node->extern_index;
    st.extern_name = wk_xstrdup(node->extern_name ? node->extern_name : "extern");
    st.nin = node->ninputs;
    st.in_slots = wk_xcalloc((size_t)node->ninputs + 1, sizeof(int));
    for (int i = 0; i < node->ninputs; i++) {
        st.in_slots[i] = B->slot[node->inputs[i]];
        note_read(B, st.in_slots[i], step, 0);
    }
    st.nout = node->noutputs;
    st.out_slots = wk_xcalloc((size_t)node->noutputs + 1, sizeof(int));
    for (int k = 0; k < node->noutputs; k++) {
        st.out_slots[k] = B->slot[node->outputs[k]];
        B->slots.data[st.out_slots[k]].producer = step;
    }
    wk_str_printf(&B->summary, "step %d: extern %d %s(", step, st.extern_index, st.extern_name);
    for (int i = 0; i < st.nin; i++) wk_str_printf(&B->summary, "%s$%d", i ? ", " : "", st.in_slots[i]);
    wk_str_append(&B->summary, ") ->");
    for (int k = 0; k < st.nout; k++) wk_str_printf(&B->summary, " $%d", st.out_slots[k]);
    wk_str_append(&B->summary, "\n");
    B->P->nextern++;
    wk_vec_push(&B->steps, st);
}

/* aten.embedding_dense_backward(grad, indices, num_weights, padding_idx,
 * scale_grad_by_freq) as generated C instead of the extern call (the
 * importer passes [padding_idx, scale_grad_by_freq] as the node's ints):
 * the gradient is zeroed, then each row of grad is added into the row its
 * index names, in index order, as eager's CPU kernel does (an index equal to
 * padding_idx or outside [0, num_weights) adds nothing, as there; float32
 * and float64 accumulate in their own type, bfloat16 rounds after each add;
 * with scale_grad_by_freq each add is scaled by 1 / the index's count; not
 * in bfloat16, where eager's vectorised and scalar adds round that scale
 * differently, so which one a column gets depends on the row length and
 * PyTorch's vector width: the extern call then). The
 * loop IR has no stores at computed offsets, so this is one hand-written loop
 * nest, serial, over grad's and the indices' own strides. Returns 1 when the
 * node became a KERNELS step, 0 when it stays an extern. */
static int add_embedding_backward_step(PlanBuilder *B, const WkNode *node) {
    if (B->target != WK_TARGET_C || !node->extern_name ||
        strcmp(node->extern_name, "aten.embedding_dense_backward.default") != 0 || node->attrs.nints != 2 ||
        node->ninputs != 2 || node->noutputs != 1)
        return 0;
    int gslot = B->slot[node->inputs[0]], islot = B->slot[node->inputs[1]], oslot = B->slot[node->outputs[0]];
    if (gslot < 0 || islot < 0 || oslot < 0) return 0;
    const WkSlot *gs = &B->slots.data[gslot], *is = &B->slots.data[islot], *os = &B->slots.data[oslot];
    WkDType dt = gs->dtype;
    if ((dt != WK_F32 && dt != WK_F64 && dt != WK_BF16) || os->dtype != dt ||
        (is->dtype != WK_I64 && is->dtype != WK_I32))
        return 0;
    if (gs->ndim != is->ndim + 1 || os->ndim != 2) return 0;
    int64_t V = os->sizes[0], H = os->sizes[1];
    if (gs->sizes[gs->ndim - 1] != H || (H > 1 && os->strides[1] != 1) || (V > 1 && os->strides[0] != H)) return 0;
    for (int d = 0; d < is->ndim; d++)
        if (gs->sizes[d] != is->sizes[d]) return 0;
    int64_t pad = node->attrs.ints[0], scale = node->attrs.ints[1] != 0;
    if (scale && dt == WK_BF16) return 0;

    int step = B->steps.len;
    char entry[96];
    snprintf(entry, sizeof entry, "wick_plan_%016llx_e%d", (unsigned long long)B->hash, step);
    const char *ct = dt == WK_F32 ? "float" : dt == WK_F64 ? "double" : "uint16_t";
    const char *acc = dt == WK_F64 ? "double" : "float";
    const char *it = is->dtype == WK_I64 ? "int64_t" : "int32_t";
    int es = wk_dtype_size(dt);
    WkStr c = {0};
    wk_str_append(&c, "");
    wk_str_append(&c, WK_CC_PART_MARK);
    wk_str_append(&c, "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n");
    if (dt == WK_BF16) wk_str_append(&c, WK_CGEN_C_BF16_TEXT);
    wk_str_printf(&c, "/* embedding backward: [%lld, %lld] from %d-d indices, padding_idx %lld%s */\n", (long long)V,
                  (long long)H, is->ndim, (long long)pad, scale ? ", scale_grad_by_freq" : "");
    wk_str_printf(&c, "int %s(void **buffers) {\n", entry);
    wk_str_printf(&c, "    const %s *restrict g = (const %s *)buffers[0];\n", ct, ct);
    wk_str_printf(&c, "    const %s *restrict ix = (const %s *)buffers[1];\n", it, it);
    wk_str_printf(&c, "    %s *restrict o = (%s *)buffers[2];\n", ct, ct);
    wk_str_printf(&c, "    if (%lldLL > 0) memset(o, 0, (size_t)%lldLL);\n", (long long)(V * H), (long long)(V * H * es));
    if (scale) {
        wk_str_printf(&c, "    int64_t *cnt = calloc((size_t)%lldLL + 1, sizeof(int64_t));\n", (long long)V);
        wk_str_append(&c, "    if (!cnt) return 1;\n");
    }
    /* pass 0 counts (scale only), pass 1 adds */
    for (int pass = scale ? 0 : 1; pass < 2; pass++) {
        wk_str_append(&c, "    {\n");
        for (int d = 0; d < is->ndim; d++)
            wk_str_printf(&c, "%*sfor (int64_t n%d = 0; n%d < %lldLL; n%d++) {\n", 4 + 4 * d, "", d, d,
                          (long long)is->sizes[d], d);
        int ind = 4 + 4 * is->ndim;
        wk_str_printf(&c, "%*sconst int64_t k = (int64_t)ix[0", ind, "");
        for (int d = 0; d < is->ndim; d++) wk_str_printf(&c, " + n%d * %lldLL", d, (long long)is->strides[d]);
        wk_str_append(&c, "];\n");
        wk_str_printf(&c, "%*sif (k == %lldLL || k < 0 || k >= %lldLL) continue;\n", ind, "", (long long)pad,
                      (long long)V);
        if (pass == 0) {
            wk_str_printf(&c, "%*scnt[k]++;\n", ind, "");
        } else {
            wk_str_printf(&c, "%*s%s *restrict row = o + k * %lldLL;\n", ind, "", ct, (long long)H);
            wk_str_printf(&c, "%*sconst %s *restrict gr = g", ind, "", ct);
            for (int d = 0; d < is->ndim; d++) wk_str_printf(&c, " + n%d * %lldLL", d, (long long)gs->strides[d]);
            wk_str_append(&c, ";\n");
            /* eager: scale = 1.0 / count (double), the add's alpha in the tensor's type */
            if (scale)
                wk_str_printf(&c, "%*sconst %s alpha = (%s)(1.0 / (double)cnt[k]);\n", ind, "", acc, acc);
            long long gh = (long long)gs->strides[gs->ndim - 1];
            wk_str_printf(&c, "%*sfor (int64_t h = 0; h < %lldLL; h++)", ind, "", (long long)H);
            const char *mul = scale ? " * alpha" : "";
            if (dt == WK_BF16)
                wk_str_printf(&c, " row[h] = wk_f32_to_bf16(wk_bf16_to_f32(row[h]) + wk_bf16_to_f32(gr[h * %lldLL])%s);\n",
                              gh, mul);
            else
                wk_str_printf(&c, " row[h] = row[h] + gr[h * %lldLL]%s;\n", gh, mul);
        }
        for (int d = is->ndim - 1; d >= 0; d--) wk_str_printf(&c, "%*s}\n", 4 + 4 * d, "");
        wk_str_append(&c, "    }\n");
    }
    if (scale) wk_str_append(&c, "    free(cnt);\n");
    wk_str_append(&c, "    return 0;\n}\n");
    wk_str_append(&B->src, c.data);

    WkProgram *P = wk_xcalloc(1, sizeof *P);
    P->source = c.data;
    P->entry = wk_xstrdup(entry);
    P->nbufs = 3;
    P->bufs = wk_xcalloc(4, sizeof *P->bufs);
    const WkSlot *from[3] = {gs, is, os};
    for (int b = 0; b < 3; b++) {
        WkBufferPlan *bp = &P->bufs[b];
        const WkSlot *sl = from[b];
        bp->kind = b < 2 ? WK_BUF_INPUT : WK_BUF_OUTPUT;
        bp->index = b < 2 ? b : 0;
        bp->dtype = sl->dtype;
        bp->ndim = sl->ndim;
        for (int d = 0; d < sl->ndim; d++) {
            bp->sizes[d] = sl->sizes[d];
            bp->strides[d] = sl->strides[d];
        }
        bp->nbytes = wk_buffer_span_bytes(sl->dtype, sl->ndim, sl->sizes, sl->strides, sl->numel);
        bp->offset = 0;
    }
    P->noutputs = 1;
    P->output_buf = wk_xcalloc(2, sizeof(int));
    P->output_buf[0] = 2;
    P->nkernels = 1;
    WkStr sum = {0};
    wk_str_printf(&sum, "kernel 0: embedding backward [%lld, %lld] (scatter-add, serial)\n", (long long)V, (long long)H);
    P->summary = sum.data;
    P->temps_bytes = 0;
    P->target = WK_TARGET_C;

    WkStep st = {0};
    st.kind = WK_STEP_KERNELS;
    st.program = P;
    st.extern_index = -1;
    st.nin = 2;
    st.in_slots = wk_xcalloc(3, sizeof(int));
    st.in_slots[0] = gslot;
    st.in_slots[1] = islot;
    note_read(B, gslot, step, 1);
    note_read(B, islot, step, 1);
    st.nout = 1;
    st.out_slots = wk_xcalloc(2, sizeof(int));
    st.out_slots[0] = oslot;
    B->slots.data[oslot].producer = step;
    wk_str_printf(&B->summary, "step %d: kernels (embedding backward, entry %s)\n", step, entry);
    wk_str_append(&B->summary, P->summary);
    B->P->nkernels += 1;
    B->P->nnative += 1;
    wk_vec_push(&B->steps, st);
    return 1;
}

static void add_view_step(PlanBuilder *B, const WkNode *node) {
    WkStep st = {0};
    int step = B->steps.len;
    int nd;
    const int64_t *sizes, *strides;
    st.kind = WK_STEP_VIEW;
    st.extern_index = -1;
    if (wk_view_attrs(&node->attrs, &nd, &sizes, &strides, &st.view_offset) < 0) st.view_offset = 0;
    st.nin = 1;
    st.in_slots = wk_xcalloc(2, sizeof(int));
    st.in_slots[0] = B->slot[node->inputs[0]];
    /* as_strided trusts the base's layout: checked like a slot kernels read */
    note_read(B, st.in_slots[0], step, 1);
    st.nout = 1;
    st.out_slots = wk_xcalloc(2, sizeof(int));
    st.out_slots[0] = B->slot[node->output];
    B->slots.data[st.out_slots[0]].producer = step;
    wk_str_printf(&B->summary, "step %d: view $%d -> $%d (offset %lld)\n", step, st.in_slots[0], st.out_slots[0],
                  (long long)st.view_offset);
    wk_vec_push(&B->steps, st);
}

/* Bytes of value v's elements, or -1 when a size is symbolic. */
static double value_bytes(const WkGraph *g, int v) {
    const WkValue *val = wk_graph_value(g, v);
    double n = wk_dtype_size(val->dtype);
    for (int d = 0; d < val->ndim; d++) {
        int64_t size;
        if (!wk_sym_is_const(val->sizes[d], &size)) return -1;
        n *= (double)size;
    }
    return n;
}

/* Pointwise work that the first stages could run but only a later stage
 * reads moves to that stage (the latest its readers allow), so it fuses
 * with its readers there instead of being written out and read back across
 * the stages. A backward graph shows why: its recomputations (a layer norm's
 * (x - mean) * rstd from the saved inputs) depend only on graph inputs, so
 * the stages "as early as the inputs allow" put every layer's in stage 0,
 * each a full-size tensor written there and read again by that layer's
 * backward stage after the matmuls between. A node moves only where its
 * inputs cost no more to read there than its output costs to write and read
 * back (2x its bytes); not a graph output, not read by a VIEW (a VIEW's
 * stage is its base's), not a reduction (whose inputs would live longer). */
static void sink_to_readers(const WkGraph *g, int *stage) {
    int nnodes = wk_graph_nnodes(g), nvalues = wk_graph_nvalues(g);
    int *latest = wk_xcalloc((size_t)nvalues + 1, sizeof(int)); /* by value: its readers' earliest stage */
    char *pinned = wk_xcalloc((size_t)nvalues + 1, 1);           /* a graph output or a VIEW's base */
    for (int v = 0; v < nvalues; v++) latest[v] = INT_MAX;
    for (int i = 0; i < wk_graph_noutputs(g); i++) pinned[wk_graph_output_value(g, i)] = 1;
    for (int n = nnodes - 1; n >= 0; n--) {
        const WkNode *node = wk_graph_node(g, n);
        const WkOpInfo *info = wk_op_info(node->op);
        int out = node->noutputs == 1 ? node->outputs[0] : -1;
        if (node->op != WK_OP_EXTERN && node->op != WK_OP_VIEW && node->op != WK_OP_SCALAR && info &&
            info->kind == WK_KIND_POINTWISE && out >= 0 && !pinned[out] && latest[out] != INT_MAX &&
            latest[out] > stage[n]) {
            double in_bytes = 0, out_bytes = value_bytes(g, out);
            for (int i = 0; i < node->ninputs && in_bytes >= 0; i++) {
                const WkValue *u = wk_graph_value(g, node->inputs[i]);
                int dup = 0;
                for (int j = 0; j < i; j++) dup |= node->inputs[j] == node->inputs[i];
                if (dup || value_is_scalar(g, u)) continue;
                double b = value_bytes(g, u->id);
                in_bytes = b < 0 ? -1 : in_bytes + b;
            }
            if (out_bytes >= 0 && in_bytes >= 0 && in_bytes <= 2 * out_bytes) stage[n] = latest[out];
        }
        if (node->op == WK_OP_SCALAR) continue;
        for (int i = 0; i < node->ninputs; i++) {
            int u = node->inputs[i];
            if (node->op == WK_OP_VIEW) pinned[u] = 1;
            else if (stage[n] < latest[u]) latest[u] = stage[n];
        }
    }
    free(latest);
    free(pinned);
}

WkPlan *wk_compile_plan(const WkGraph *g) { return wk_compile_plan_for(g, WK_TARGET_C); }

WkPlan *wk_compile_plan_for(const WkGraph *g, WkTarget target) {
    int nvalues = wk_graph_nvalues(g), nnodes = wk_graph_nnodes(g), ninputs = wk_graph_ninputs(g);
    int noutputs = wk_graph_noutputs(g);
    PlanBuilder B = {0};
    B.g = g;
    B.hash = wk_graph_hash(g);
    B.target = target;
    B.P = wk_xcalloc(1, sizeof *B.P);
    B.P->target = target;
    B.stage = wk_xcalloc((size_t)nnodes + 1, sizeof(int));
    B.slot = wk_xcalloc((size_t)nvalues + 1, sizeof(int));
    B.needs_slot = wk_xcalloc((size_t)nvalues + 1, sizeof(int));
    int *avail_k = wk_xcalloc((size_t)nvalues + 1, sizeof(int)); /* first KERNELS stage that may read v */
    int *avail_j = wk_xcalloc((size_t)nvalues + 1, sizeof(int)); /* first extern group that may read v */
    int *map = wk_xcalloc((size_t)nvalues + 1, sizeof(int));
    int ok = 0, maxstage = 0;
    wk_str_append(&B.src, target == WK_TARGET_TRITON ? wk_cgen_triton_prelude() : "");
    wk_str_append(&B.summary, "");
    for (int v = 0; v < nvalues; v++) B.slot[v] = -1;

    /* stages, as early as the inputs allow */
    for (int n = 0; n < nnodes; n++) {
        const WkNode *node = wk_graph_node(g, n);
        int s = 0;
        if (node->op == WK_OP_SCALAR) {
            B.stage[n] = -1;
            continue;
        }
        if (node->op == WK_OP_VIEW) { /* readable wherever its base is */
            int base = node->inputs[0];
            B.stage[n] = avail_j[base];
            avail_j[node->output] = avail_j[base];
            avail_k[node->output] = avail_k[base];
            B.P->nviews++;
            continue;
        }
        for (int i = 0; i < node->ninputs; i++) {
            int a = node->op == WK_OP_EXTERN ? avail_j[node->inputs[i]] : avail_k[node->inputs[i]];
            if (a > s) s = a;
        }
        B.stage[n] = s;
        if (s > maxstage) maxstage = s;
        for (int k = 0; k < node->noutputs; k++) {
            int o = node->outputs[k];
            avail_j[o] = s;
            avail_k[o] = node->op == WK_OP_EXTERN ? s + 1 : s;
        }
    }

    if (maxstage > 0) sink_to_readers(g, B.stage);

    /* slots: inputs, extern outputs, values crossing stages, graph outputs */
    for (int i = 0; i < ninputs; i++) B.needs_slot[wk_graph_input_value(g, i)] = 1;
    for (int i = 0; i < noutputs; i++) B.needs_slot[wk_graph_output_value(g, i)] = 1;
    for (int n = 0; n < nnodes; n++) {
        const WkNode *node = wk_graph_node(g, n);
        if (node->op == WK_OP_EXTERN)
            for (int k = 0; k < node->noutputs; k++) B.needs_slot[node->outputs[k]] = 1;
        if (node->op == WK_OP_VIEW) continue; /* its base: below */
        for (int i = 0; i < node->ninputs; i++) {
            const WkValue *u = wk_graph_value(g, node->inputs[i]);
            if (u->node < 0 || value_is_scalar(g, u)) continue;
            const WkNode *p = wk_graph_node(g, u->node);
            if (p->op == WK_OP_VIEW && node->op != WK_OP_EXTERN) {
                /* a kernel reads the view: the stage lowers it again over
                 * its base, which must reach that stage */
                const WkValue *b = wk_graph_value(g, p->inputs[0]);
                if (b->node >= 0 && (wk_graph_node(g, b->node)->op == WK_OP_EXTERN ||
                                     B.stage[b->node] != B.stage[n]))
                    B.needs_slot[b->id] = 1;
                continue;
            }
            if (node->op == WK_OP_EXTERN || p->op == WK_OP_EXTERN || B.stage[u->node] != B.stage[n])
                B.needs_slot[u->id] = 1;
        }
    }
    int view_steps = 0; /* a VIEW made into a tensor reads its base's slot */
    for (int n = 0; n < nnodes; n++) {
        const WkNode *node = wk_graph_node(g, n);
        if (node->op == WK_OP_VIEW && B.needs_slot[node->output]) {
            B.needs_slot[node->inputs[0]] = 1;
            view_steps++;
        }
    }
    for (int v = 0; v < nvalues; v++)
        if (B.needs_slot[v] && new_slot(&B, v) < 0) goto done;
    for (int i = 0; i < noutputs; i++) B.slots.data[B.slot[wk_graph_output_value(g, i)]].is_output = 1;

    /* steps: KERNELS 0, externs of group 0, KERNELS 1, ... */
    if (wk_graph_nexterns(g) == 0 && view_steps == 0) {
        if (nnodes > 0 && build_whole(&B) < 0) goto done;
        maxstage = -1;
    }
    for (int k = 0; k <= maxstage; k++) {
        if (build_stage(&B, k, map) < 0) goto done;
        for (int n = 0; n < nnodes; n++) { /* graph order: a view may read an extern's output */
            const WkNode *node = wk_graph_node(g, n);
            if (node->op == WK_OP_EXTERN && B.stage[n] == k && !add_embedding_backward_step(&B, node))
                add_extern_step(&B, node);
            if (node->op == WK_OP_VIEW && B.stage[n] == k && B.slot[node->output] >= 0) add_view_step(&B, node);
        }
    }
    for (int sl = 0; sl < B.slots.len; sl++) {
        const WkSlot *s = &B.slots.data[sl];
        if (s->input_index < 0 && s->producer < 0) {
            wk_error_set("plan: value %%%d is never computed", s->value);
            goto done;
        }
    }
    ok = 1;
done:
    free(avail_k);
    free(avail_j);
    free(map);
    WkPlan *P = B.P;
    P->nslots = B.slots.len;
    P->slots = B.slots.data;
    P->nsteps = B.steps.len;
    P->steps = B.steps.data;
    P->noutputs = noutputs;
    P->output_slot = wk_xcalloc((size_t)noutputs + 1, sizeof(int));
    for (int i = 0; i < noutputs; i++) P->output_slot[i] = B.slot[wk_graph_output_value(g, i)];
    P->source = B.src.data;
    P->summary = B.summary.data;
    free(B.stage);
    free(B.slot);
    free(B.needs_slot);
    for (int i = 0; i < B.stage_code.len; i++) {
        free(B.stage_code.data[i]);
        free(B.stage_entry.data[i]);
    }
    wk_vec_free(&B.stage_code);
    wk_vec_free(&B.stage_entry);
    if (!ok) {
        wk_plan_free(P);
        return NULL;
    }
    return P;
}
