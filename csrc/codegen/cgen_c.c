/* cgen_c.c — the C backend: one self-contained translation unit per graph.
 * Each kernel becomes a static function with one loop nest: OpenMP threads
 * on the outer loop when the work is large enough, `omp simd` on the
 * innermost loop, and reductions with per-thread/per-lane partials. exp, log
 * and tanh vectorise through glibc's libmvec (declared `omp declare simd`).
 * Static shapes only: every size and offset is a literal.
 */
#include "cgen.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Below this many element-iterations a kernel runs on one thread: starting
 * a parallel region costs more than it saves. */
enum { PAR_MIN_WORK = 32768, PAR_MIN_ROWS = 32, PAR_MIN_REDUCE = 4096 };

typedef struct {
    const WkSchedule *S;
    WkStr *o;
    int indent;
    int *dep_r;       /* [nexprs] 1 if the node depends on a reduction var, -1 unknown */
    int nexprs;
} Gen;

static void emit(Gen *g, const char *fmt, ...) WK_PRINTF(2, 3);
static void emit(Gen *g, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    for (int k = 0; k < g->indent; k++) wk_str_append(g->o, "    ");
    if (n >= 0 && (size_t)n < sizeof small) {
        wk_str_append(g->o, small);
    } else if (n >= 0) {
        char *big = wk_xmalloc((size_t)n + 1);
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        wk_str_append(g->o, big);
        free(big);
    }
    wk_str_append(g->o, "\n");
}

static const char *ctype(WkDType dt) {
    switch (dt) {
    case WK_BOOL: case WK_U8: return "uint8_t";
    case WK_I8: return "int8_t";
    case WK_I16: return "int16_t";
    case WK_I32: return "int32_t";
    case WK_I64: return "int64_t";
    case WK_F32: return "float";
    case WK_F64: return "double";
    default: return NULL;
    }
}

/* A literal of the constant's dtype, exact (hex floats). */
static void const_text(const WkLExpr *e, WkStr *s) {
    if (wk_dtype_is_float(e->dtype)) {
        const char *cast = e->dtype == WK_F32 ? "(float)" : "(double)";
        if (isnan(e->f)) wk_str_printf(s, "(%sNAN)", cast);
        else if (isinf(e->f)) wk_str_printf(s, "(%s%sINFINITY)", cast, e->f < 0 ? "-" : "");
        else wk_str_printf(s, "(%a%s)", e->f, e->dtype == WK_F32 ? "f" : "");
    } else if (e->dtype == WK_I64) {
        if (e->i == INT64_MIN) wk_str_append(s, "(-INT64_C(9223372036854775807) - 1)");
        else wk_str_printf(s, "INT64_C(%lld)", (long long)e->i);
    } else {
        wk_str_printf(s, "((%s)%lld)", ctype(e->dtype), (long long)e->i);
    }
}

static void ref(const WkLExpr *e, WkStr *s) {
    if (e->op == WK_LX_CONST) const_text(e, s);
    else wk_str_printf(s, "t%d", e->id);
}

static const char *mathfn(WkLxOp op, WkDType dt) {
    int f = dt == WK_F32;
    switch (op) {
    case WK_LX_EXP: return f ? "expf" : "exp";
    case WK_LX_LOG: return f ? "logf" : "log";
    case WK_LX_SQRT: return f ? "sqrtf" : "sqrt";
    case WK_LX_TANH: return f ? "tanhf" : "tanh";
    case WK_LX_ABS: return f ? "fabsf" : "fabs";
    case WK_LX_POW: return f ? "powf" : "pow";
    default: return "?";
    }
}

/* Signed 32/64-bit arithmetic goes through uint64_t so that overflow wraps
 * (as in torch) instead of being undefined. */
static int wide_signed(WkDType dt) { return dt == WK_I32 || dt == WK_I64; }

static int expr_text(const WkSchedule *S, const WkLExpr *e, WkStr *s) {
    const char *T = ctype(e->dtype);
    WkStr a = {0}, b = {0}, c = {0};
    int rc = 0;
    wk_str_append(&a, "");
    wk_str_append(&b, "");
    wk_str_append(&c, "");
    if (e->nargs > 0) ref(e->a[0], &a);
    if (e->nargs > 1) ref(e->a[1], &b);
    if (e->nargs > 2) ref(e->a[2], &c);
    int fl = wk_dtype_is_float(e->dtype);
    switch (e->op) {
    case WK_LX_READ:
        wk_str_printf(s, "b%d[", e->buf);
        wk_sym_to_c(S->L->syms, e->idx[0], s, NULL, NULL);
        wk_str_append(s, "]");
        break;
    case WK_LX_CAST:
        if (e->dtype == WK_BOOL) wk_str_printf(s, "(uint8_t)(%s != 0)", a.data);
        else wk_str_printf(s, "(%s)%s", T, a.data);
        break;
    case WK_LX_NEG:
        if (fl) wk_str_printf(s, "-%s", a.data);
        else if (wide_signed(e->dtype)) wk_str_printf(s, "(%s)(0 - (uint64_t)%s)", T, a.data);
        else wk_str_printf(s, "(%s)(-%s)", T, a.data);
        break;
    case WK_LX_ABS:
        if (fl) wk_str_printf(s, "%s(%s)", mathfn(e->op, e->dtype), a.data);
        else if (wide_signed(e->dtype))
            wk_str_printf(s, "(%s)(%s < 0 ? 0 - (uint64_t)%s : (uint64_t)%s)", T, a.data, a.data, a.data);
        else wk_str_printf(s, "(%s)(%s < 0 ? -%s : %s)", T, a.data, a.data, a.data);
        break;
    case WK_LX_EXP: case WK_LX_LOG: case WK_LX_SQRT: case WK_LX_TANH:
        wk_str_printf(s, "%s(%s)", mathfn(e->op, e->dtype), a.data);
        break;
    case WK_LX_ADD: case WK_LX_SUB: case WK_LX_MUL: {
        const char *op = e->op == WK_LX_ADD ? "+" : e->op == WK_LX_SUB ? "-" : "*";
        if (fl) wk_str_printf(s, "%s %s %s", a.data, op, b.data);
        else if (wide_signed(e->dtype))
            wk_str_printf(s, "(%s)((uint64_t)%s %s (uint64_t)%s)", T, a.data, op, b.data);
        else wk_str_printf(s, "(%s)(%s %s %s)", T, a.data, op, b.data);
        break;
    }
    case WK_LX_DIV:
        if (!fl) goto bad;
        wk_str_printf(s, "%s / %s", a.data, b.data);
        break;
    case WK_LX_POW:
        if (fl) wk_str_printf(s, "%s(%s, %s)", mathfn(e->op, e->dtype), a.data, b.data);
        else wk_str_printf(s, "(%s)wk_ipow((int64_t)%s, (int64_t)%s)", T, a.data, b.data);
        break;
    case WK_LX_MAX: case WK_LX_MIN: {
        const char *cmp = e->op == WK_LX_MAX ? ">" : "<";
        if (fl) wk_str_printf(s, "(%s %s %s || %s != %s) ? %s : %s", a.data, cmp, b.data, a.data, a.data, a.data, b.data);
        else wk_str_printf(s, "%s %s %s ? %s : %s", a.data, cmp, b.data, a.data, b.data);
        break;
    }
    case WK_LX_AND: wk_str_printf(s, "(uint8_t)(%s & %s)", a.data, b.data); break;
    case WK_LX_OR: wk_str_printf(s, "(uint8_t)(%s | %s)", a.data, b.data); break;
    case WK_LX_EQ: case WK_LX_NE: case WK_LX_LT: case WK_LX_LE: case WK_LX_GT: case WK_LX_GE: {
        static const char *const cmp[] = {"==", "!=", "<", "<=", ">", ">="};
        wk_str_printf(s, "(uint8_t)(%s %s %s)", a.data, cmp[e->op - WK_LX_EQ], b.data);
        break;
    }
    case WK_LX_WHERE: wk_str_printf(s, "%s ? %s : %s", a.data, b.data, c.data); break;
    default: goto bad;
    }
    goto done;
bad:
    wk_error_set("C codegen: cannot emit %s of %s", wk_lower_op_name(e->op), wk_dtype_name(e->dtype));
    rc = -1;
done:
    wk_str_free(&a);
    wk_str_free(&b);
    wk_str_free(&c);
    return rc;
}

/* ---- DAG walks --------------------------------------------------------- */
typedef WkVec(const WkLExpr *) ExprVec;

static void topo(const WkLExpr *e, WkLowerMap *seen, ExprVec *out) {
    if (wk_lower_map_get(seen, e)) return;
    wk_lower_map_put(seen, e, e);
    for (int k = 0; k < e->nargs; k++) topo(e->a[k], seen, out);
    if (e->op != WK_LX_CONST && e->op != WK_LX_REDUCE) wk_vec_push(out, e);
}

static int sym_has_rvar(const WkLoopIR *L, const WkSym *s) {
    if (s->kind == WK_SYM_CONST) return 0;
    if (s->kind == WK_SYM_VAR) {
        for (int k = 0; k < WK_MAX_DIMS; k++)
            if (s->var == L->rvar_id[k]) return 1;
        return 0;
    }
    return sym_has_rvar(L, s->a) || sym_has_rvar(L, s->b);
}

static int depends_on_r(Gen *g, const WkLExpr *e) {
    if (e->id < g->nexprs && g->dep_r[e->id] >= 0) return g->dep_r[e->id];
    int d = 0;
    if (e->op == WK_LX_READ) d = sym_has_rvar(g->S->L, e->idx[0]);
    for (int k = 0; k < e->nargs && !d; k++) d = depends_on_r(g, e->a[k]);
    if (e->id < g->nexprs) g->dep_r[e->id] = d;
    return d;
}

/* Emits `const T tN = ...;` for the nodes of `order` in phase: 0 those not
 * depending on r vars, 1 those that do, -1 all. */
static int emit_nodes(Gen *g, const ExprVec *order, int phase) {
    for (int k = 0; k < order->len; k++) {
        const WkLExpr *e = order->data[k];
        if (phase >= 0 && depends_on_r(g, e) != phase) continue;
        WkStr s = {0};
        wk_str_append(&s, "");
        if (expr_text(g->S, e, &s) < 0) {
            wk_str_free(&s);
            return -1;
        }
        emit(g, "const %s t%d = %s;", ctype(e->dtype), e->id, s.data);
        wk_str_free(&s);
    }
    return 0;
}

static void emit_store(Gen *g, const WkSchedStore *st, const char *value) {
    WkStr off = {0};
    wk_str_append(&off, "");
    wk_sym_to_c(g->S->L->syms, st->offset, &off, NULL, NULL);
    emit(g, "b%d[%s] = %s;", st->buf, off.data, value);
    wk_str_free(&off);
}

static void open_loop(Gen *g, const char *var, int64_t size, const char *pragma) {
    if (pragma && *pragma) emit(g, "%s", pragma);
    emit(g, "for (int64_t %s = 0; %s < %lld; %s++) {", var, var, (long long)size, var);
    g->indent++;
}

static void close_loops(Gen *g, int n) {
    for (int k = 0; k < n; k++) {
        g->indent--;
        emit(g, "}");
    }
}

static void declare_buffers(Gen *g, const WkSchedKernel *K, const ExprVec *order) {
    const WkSchedule *S = g->S;
    char *used = wk_xcalloc((size_t)S->nbufs + 1, 1);
    for (int j = 0; j < K->nstores; j++) used[K->stores[j].buf] = 2;
    for (int k = 0; k < order->len; k++)
        if (order->data[k]->op == WK_LX_READ && !used[order->data[k]->buf]) used[order->data[k]->buf] = 1;
    for (int b = 0; b < S->nbufs; b++) {
        const char *T = ctype(S->bufs[b].dtype);
        if (used[b] == 1) emit(g, "const %s *restrict b%d = (const %s *)bufs[%d];", T, b, T, b);
        if (used[b] == 2) emit(g, "%s *restrict b%d = (%s *)bufs[%d];", T, b, T, b);
    }
    free(used);
}

/* ---- kernels ----------------------------------------------------------- */
static int gen_pointwise(Gen *g, const WkSchedKernel *K, const ExprVec *order) {
    int n = K->nloops;
    int par = K->numel >= PAR_MIN_WORK;
    for (int j = 0; j < n; j++) {
        char var[8];
        snprintf(var, sizeof var, "i%d", j);
        const char *pragma = NULL;
        if (j == 0 && par) pragma = n == 1 ? "#pragma omp parallel for simd schedule(static)"
                                           : n >= 3 && K->sizes[0] < 16 ? "#pragma omp parallel for collapse(2) schedule(static)"
                                                                          : "#pragma omp parallel for schedule(static)";
        else if (j == n - 1) pragma = "#pragma omp simd";
        open_loop(g, var, K->sizes[j], pragma);
    }
    if (emit_nodes(g, order, -1) < 0) return -1;
    for (int j = 0; j < K->nstores; j++) {
        WkStr v = {0};
        wk_str_append(&v, "");
        ref(K->stores[j].expr, &v);
        emit_store(g, &K->stores[j], v.data);
        wk_str_free(&v);
    }
    close_loops(g, n);
    return 0;
}

static int gen_reduction(Gen *g, const WkSchedKernel *K, const ExprVec *order) {
    const WkSchedStore *st = &K->stores[0];
    const WkLExpr *red = st->expr;
    const WkLExpr *body = red->a[0];
    WkDType acc_t = body->dtype, out_t = red->dtype;
    int fl = wk_dtype_is_float(acc_t);
    int is_max = red->rop == WK_RED_MAX;
    int64_t count = 1;
    for (int k = 0; k < red->nred; k++) count *= red->red_sizes[k];
    int64_t work = K->numel * (K->red_numel ? K->red_numel : 1);
    int outer_par = work >= PAR_MIN_WORK && K->numel >= PAR_MIN_ROWS;
    int inner_par = work >= PAR_MIN_WORK && !outer_par && K->red_numel >= PAR_MIN_REDUCE;
    const char *clause = !is_max ? "reduction(+:acc)" : fl ? "reduction(max:acc) reduction(|:nanf)" : "reduction(max:acc)";

    for (int j = 0; j < K->nloops; j++) {
        char var[8];
        snprintf(var, sizeof var, "i%d", j);
        open_loop(g, var, K->sizes[j], j == 0 && outer_par ? "#pragma omp parallel for schedule(static)" : NULL);
    }
    if (emit_nodes(g, order, 0) < 0) return -1;
    WkStr init = {0};
    wk_str_append(&init, "");
    if (!is_max) wk_str_append(&init, "0");
    else if (fl) wk_str_append(&init, "-INFINITY");
    else if (acc_t == WK_I64) wk_str_append(&init, "INT64_MIN");
    else if (acc_t == WK_I32) wk_str_append(&init, "INT32_MIN");
    else if (acc_t == WK_I16) wk_str_append(&init, "INT16_MIN");
    else if (acc_t == WK_I8) wk_str_append(&init, "INT8_MIN");
    else wk_str_append(&init, "0");
    emit(g, "%s acc = %s;", ctype(acc_t), init.data);
    wk_str_free(&init);
    if (is_max && fl) emit(g, "int nanf = 0;");
    for (int j = 0; j < K->nred; j++) {
        char var[8], pragma[160];
        snprintf(var, sizeof var, "r%d", j);
        pragma[0] = '\0';
        int last = j == K->nred - 1;
        if (j == 0 && inner_par)
            snprintf(pragma, sizeof pragma, "#pragma omp parallel for%s schedule(static) %s", last ? " simd" : "", clause);
        else if (last)
            snprintf(pragma, sizeof pragma, "#pragma omp simd %s", clause);
        open_loop(g, var, K->red_sizes[j], pragma);
    }
    if (emit_nodes(g, order, 1) < 0) return -1;
    WkStr t = {0};
    wk_str_append(&t, "");
    ref(body, &t);
    if (!is_max) {
        emit(g, "acc += %s;", t.data);
    } else {
        emit(g, "acc = %s > acc ? %s : acc;", t.data, t.data);
        if (fl) emit(g, "nanf |= %s != %s;", t.data, t.data);
    }
    wk_str_free(&t);
    close_loops(g, K->nred);
    char value[200];
    if (red->rop == WK_RED_MEAN) snprintf(value, sizeof value, "(%s)(acc / (double)%lld)", ctype(out_t), (long long)count);
    else if (is_max && fl) snprintf(value, sizeof value, "(%s)(nanf ? NAN : acc)", ctype(out_t));
    else if (out_t == WK_BOOL && !is_max) snprintf(value, sizeof value, "(uint8_t)(acc != 0)");
    else snprintf(value, sizeof value, "(%s)acc", ctype(out_t));
    emit_store(g, st, value);
    for (int j = 1; j < K->nstores; j++) { /* epilogue stores read only i vars */
        WkStr v = {0};
        wk_str_append(&v, "");
        ref(K->stores[j].expr, &v);
        emit_store(g, &K->stores[j], v.data);
        wk_str_free(&v);
    }
    close_loops(g, K->nloops);
    return 0;
}

static int gen_kernel(Gen *g, int k) {
    const WkSchedKernel *K = &g->S->kernels[k];
    ExprVec order = {0};
    WkLowerMap seen = {0};
    for (int j = 0; j < K->nstores; j++) topo(K->stores[j].expr, &seen, &order);
    wk_lower_map_free(&seen);
    emit(g, "/* kernel %d: %s {%s}, %lld x %lld iterations */", k,
         K->kind == WK_SCHED_REDUCTION ? "reduction" : "pointwise", K->desc, (long long)K->numel,
         (long long)K->red_numel);
    emit(g, "static void kernel%d(void **bufs) {", k);
    g->indent++;
    int rc = 0;
    if (K->numel == 0) {
        emit(g, "(void)bufs; /* empty output */");
    } else {
        declare_buffers(g, K, &order);
        rc = K->kind == WK_SCHED_REDUCTION ? gen_reduction(g, K, &order) : gen_pointwise(g, K, &order);
    }
    g->indent--;
    emit(g, "}");
    emit(g, "%s", "");
    wk_vec_free(&order);
    return rc;
}

static const char prelude[] =
    "#include <stdint.h>\n"
    "#include <math.h>\n"
    "#include <stdbool.h>\n"
    "\n"
    "#if defined(_OPENMP)\n"
    "/* vector variants from glibc's libmvec (link with -lmvec) */\n"
    "#pragma omp declare simd notinbranch\n"
    "float expf(float);\n"
    "#pragma omp declare simd notinbranch\n"
    "float logf(float);\n"
    "#pragma omp declare simd notinbranch\n"
    "float tanhf(float);\n"
    "#pragma omp declare simd notinbranch\n"
    "double exp(double);\n"
    "#pragma omp declare simd notinbranch\n"
    "double log(double);\n"
    "#pragma omp declare simd notinbranch\n"
    "double tanh(double);\n"
    "#endif\n"
    "\n"
    "/* torch's integer pow: repeated squaring, wrapping; negative exponents\n"
    "   give 0 except for bases 1 and -1 */\n"
    "static inline int64_t wk_ipow(int64_t b, int64_t e) {\n"
    "    if (e < 0) return b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0;\n"
    "    uint64_t r = 1, x = (uint64_t)b;\n"
    "    while (e) {\n"
    "        if (e & 1) r *= x;\n"
    "        x *= x;\n"
    "        e >>= 1;\n"
    "    }\n"
    "    return (int64_t)r;\n"
    "}\n"
    "\n";

int wk_cgen_c(const WkSchedule *S, const char *entry, WkStr *out) {
    Gen g = {S, out, 0, NULL, S->L->nexprs};
    g.dep_r = wk_xmalloc(sizeof(int) * (size_t)(g.nexprs + 1));
    for (int k = 0; k < g.nexprs; k++) g.dep_r[k] = -1;
    int rc = 0;
    wk_str_printf(out, "/* wick: generated C for one graph (%d kernels).\n", S->nkernels);
    wk_str_append(out, " * Build: cc " WK_CGEN_C_CFLAGS " src.c -o lib.so " WK_CGEN_C_LIBS "\n");
    wk_str_append(out, " * (correct without -fopenmp too: serial, no libmvec) */\n");
    wk_str_append(out, prelude);
    for (int k = 0; k < S->nkernels && rc == 0; k++) rc = gen_kernel(&g, k);
    if (rc == 0) {
        emit(&g, "__attribute__((visibility(\"default\"))) void %s(void **buffers) {", entry);
        g.indent++;
        if (S->nkernels == 0) emit(&g, "(void)buffers;");
        for (int k = 0; k < S->nkernels; k++) emit(&g, "kernel%d(buffers);", k);
        g.indent--;
        emit(&g, "}");
    }
    free(g.dep_r);
    return rc;
}
