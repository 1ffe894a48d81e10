/* cgen_c.c — the C backend: one self-contained translation unit per graph.
 * Each kernel (or row group of kernels sharing their outer loop) becomes a
 * static function with one loop nest: OpenMP threads on the outer loop when
 * the work is large enough, `omp simd` on the innermost loop with the values
 * that do not vary along it computed before it, and reductions with
 * per-thread/per-lane partials (large row reductions several rows per
 * pass, see MULTI_ROWS). exp, log and tanh vectorise through glibc's
 * libmvec (declared `omp declare simd`). A row group's function is compiled
 * with its loops unrolled (WK_ROW_GROUP). Static shapes only: every size and
 * offset is a literal.
 *
 * Requires: a checked schedule (READs only, kernels in order).
 * Provides: the source text; its entry runs every kernel in order.
 */
#include "cgen.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Below this many element-iterations a kernel runs on one thread: starting
 * a parallel region costs more than it saves. */
enum { PAR_MIN_WORK = 32768, PAR_MIN_ROWS = 32, PAR_MIN_REDUCE = 4096 };
/* Largest row streamed through a stack row (non-temporal stores): 64 KiB
 * keeps it in L2 beside the row scratch. (A flat kernel of one loop streams
 * its chunks whatever its length.) */
enum { NT_ROW_MAX_BYTES = 64 * 1024 };
/* Elements a streamed row is computed in at a time: the staging array
 * (4 KiB) stays in L1 beside the row's inputs; a whole-row staging array
 * measured slower than plain stores on a layer norm (its 4 rows of 16 KiB
 * overflowed L1). */
enum { NT_CHUNK = 1024 };
/* The same for a flat kernel (one loop): 128 elements (512 B), so each
 * chunk's burst of non-temporal stores is short and the next chunk's
 * compute follows it sooner. 4096 x 4096 float32
 * ((x * 1.5 + 0.5).relu() - y).sigmoid() * y on one thread: 21.2 -> 18.2 ms,
 * medians of 5 alternating rounds, and a median paired ratio of 0.92 over 8
 * more on a loaded machine (bench/results/2026-12-02-kern16-softmax-
 * prototypes, pw0.c against pw_c128.c; 256 to 2048 were alike at 1024). */
enum { FLAT_NT_CHUNK = 128 };

typedef struct {
    const WkSchedule *S;
    WkStr *o;
    int indent;
    int *dep_r;       /* [nexprs] 1 if the node depends on a reduction var, -1 unknown */
    int nexprs;
    const WkLowerMap *rcp; /* divisors hoisted as reciprocals (r<id>), or NULL */
    /* row scratch (see "row scratch" below), for the kernel being generated */
    const WkLowerMap *keep;   /* reduction node -> scratch number + 1: store it in wk_row<n>[r0] */
    const WkLowerMap *reuse;  /* pointwise node -> scratch number + 1: read wk_row<n>[i1] */
    int64_t prefetch_rows;    /* row group phase after the first: rows of i0 (prefetch row i0 + 1), else 0 */
    const WkLowerMap *vexp;   /* float32 EXP node -> block number + 1: read wk_ex<n>[vexp_idx] */
    const char *vexp_idx;
    int64_t par_min_work;     /* PAR_MIN_WORK, or INT64_MAX for one thread (wk_cgen_c_set_threads) */
    const struct LagPhase *lag; /* run one row late in this reduction's blocks (gen_group), or NULL */
    int group_last;           /* the last kernel of the row group being generated */
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

/* The C type of a value (what expressions compute in): 16-bit floats are
 * float32 in registers, 16 bits in memory (mtype). */
static const char *ctype(WkDType dt) {
    switch (dt) {
    case WK_F16: case WK_BF16: return "float";
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

/* The C type of a buffer's elements in memory. */
static const char *mtype(WkDType dt) {
    return dt == WK_F16 ? "_Float16" : dt == WK_BF16 ? "uint16_t" : ctype(dt);
}

/* A literal of the constant's dtype, exact (hex floats). */
static void const_text(const WkLExpr *e, WkStr *s) {
    if (wk_dtype_is_float(e->dtype)) {
        int f = e->dtype != WK_F64;
        const char *cast = f ? "(float)" : "(double)";
        if (isnan(e->f)) wk_str_printf(s, "(%sNAN)", cast);
        else if (isinf(e->f)) wk_str_printf(s, "(%s%sINFINITY)", cast, e->f < 0 ? "-" : "");
        else wk_str_printf(s, "(%a%s)", f ? (double)(float)e->f : e->f, f ? "f" : "");
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

/* The libm function of a floating op: float32 uses the f-suffixed one. */
static const char *mathfn(WkLxOp op, WkDType dt) {
    int f = dt != WK_F64;
#define M(lx, name) case WK_LX_##lx: return f ? name "f" : name;
    switch (op) {
    M(EXP, "exp") M(LOG, "log") M(SQRT, "sqrt") M(TANH, "tanh") M(ABS, "fabs") M(POW, "pow")
    M(SIN, "sin") M(COS, "cos") M(TAN, "tan") M(ASIN, "asin") M(ACOS, "acos") M(ATAN, "atan")
    M(SINH, "sinh") M(COSH, "cosh") M(ASINH, "asinh") M(ACOSH, "acosh") M(ATANH, "atanh")
    M(ERF, "erf") M(ERFC, "erfc") M(ERFINV, "wk_erfinv") M(LOG1P, "log1p") M(EXPM1, "expm1")
    M(LOG2, "log2") M(LOG10, "log10") M(EXP2, "exp2") M(FLOOR, "floor") M(CEIL, "ceil")
    M(TRUNC, "trunc") M(ROUND, "nearbyint") M(ATAN2, "atan2") M(FMOD, "fmod")
    M(FLOORDIV, "wk_floordiv") M(REM, "wk_rem")
    default: return "?";
    }
#undef M
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
        wk_str_printf(s, "%sb%d[", e->dtype == WK_BF16 ? "wk_bf16_to_f32(" : e->dtype == WK_F16 ? "(float)" : "", e->buf);
        wk_sym_to_c(S->L->syms, e->idx[0], s, NULL, NULL);
        wk_str_append(s, e->dtype == WK_BF16 ? "])" : "]");
        break;
    case WK_LX_CAST:
        if (e->dtype == WK_BOOL) wk_str_printf(s, "(uint8_t)(%s != 0)", a.data);
        /* a cast to a 16-bit float rounds, so .to(bfloat16).float() is not the identity */
        else if (e->dtype == WK_BF16) wk_str_printf(s, "wk_bf16_to_f32(wk_f32_to_bf16((float)%s))", a.data);
        else if (e->dtype == WK_F16) wk_str_printf(s, "(float)(_Float16)%s", a.data);
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
    case WK_LX_INDEX:
        wk_str_append(s, "(int64_t)(");
        wk_sym_to_c(S->L->syms, e->idx[0], s, NULL, NULL);
        wk_str_append(s, ")");
        break;
    case WK_LX_EXP: case WK_LX_LOG: case WK_LX_SQRT: case WK_LX_TANH:
    case WK_LX_SIN: case WK_LX_COS: case WK_LX_TAN: case WK_LX_ASIN: case WK_LX_ACOS: case WK_LX_ATAN:
    case WK_LX_SINH: case WK_LX_COSH: case WK_LX_ASINH: case WK_LX_ACOSH: case WK_LX_ATANH:
    case WK_LX_ERF: case WK_LX_ERFC: case WK_LX_ERFINV: case WK_LX_LOG1P: case WK_LX_EXPM1:
    case WK_LX_LOG2: case WK_LX_LOG10: case WK_LX_EXP2: case WK_LX_FLOOR: case WK_LX_CEIL:
    case WK_LX_TRUNC: case WK_LX_ROUND:
        if (!fl) goto bad;
        wk_str_printf(s, "%s(%s)", mathfn(e->op, e->dtype), a.data);
        break;
    case WK_LX_ISNAN: wk_str_printf(s, "(uint8_t)(%s != %s)", a.data, a.data); break;
    case WK_LX_NOT:
        if (fl) goto bad;
        if (e->dtype == WK_BOOL) wk_str_printf(s, "(uint8_t)!%s", a.data);
        else wk_str_printf(s, "(%s)~%s", T, a.data);
        break;
    case WK_LX_ATAN2:
        if (!fl) goto bad;
        wk_str_printf(s, "%s(%s, %s)", mathfn(e->op, e->dtype), a.data, b.data);
        break;
    case WK_LX_FMOD: case WK_LX_FLOORDIV: case WK_LX_REM:
        if (fl) wk_str_printf(s, "%s(%s, %s)", mathfn(e->op, e->dtype), a.data, b.data);
        else wk_str_printf(s, "(%s)wk_i%s((int64_t)%s, (int64_t)%s)", T,
                           e->op == WK_LX_FMOD ? "fmod" : e->op == WK_LX_FLOORDIV ? "floordiv" : "rem", a.data, b.data);
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
    case WK_LX_AND: case WK_LX_OR: case WK_LX_XOR:
        if (fl) goto bad;
        wk_str_printf(s, "(%s)(%s %s %s)", T, a.data, e->op == WK_LX_AND ? "&" : e->op == WK_LX_OR ? "|" : "^", b.data);
        break;
    case WK_LX_EQ: case WK_LX_NE: case WK_LX_LT: case WK_LX_LE: case WK_LX_GT: case WK_LX_GE: {
        static const char *const cmp[] = {"==", "!=", "<", "<=", ">", ">="};
        wk_str_printf(s, "(uint8_t)(%s %s %s)", a.data, cmp[e->op - WK_LX_EQ], b.data);
        break;
    }
    case WK_LX_WHERE: wk_str_printf(s, "%s ? %s : %s", a.data, b.data, c.data); break;
    case WK_LX_BOUND: /* out of range reads element 0; emit_nodes raises the kernel's flag */
        wk_str_printf(s, "(uint64_t)%s < UINT64_C(%lld) ? %s : 0", a.data, (long long)e->i, a.data);
        break;
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

/* A row group's last phase run one row late (lag_plan, gen_group): a
 * float32 output streamed as scratch row src_row times a per-row factor
 * (a softmax's exp(x - max) * (1 / sum)). */
typedef struct LagPhase {
    const WkSchedKernel *K;
    const WkLowerMap *reuse; /* its scratch reads */
    ExprVec outer;           /* its per-row nodes (not depending on i1) */
    int src_row;
    const WkLExpr *scale;    /* the factor, or the divisor when div */
    int div;
} LagPhase;

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
    if (e->op == WK_LX_READ || e->op == WK_LX_INDEX) d = sym_has_rvar(g->S->L, e->idx[0]);
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
        const void *row = g->reuse ? wk_lower_map_get(g->reuse, e) : NULL;
        if (row) { /* kept by an earlier phase of the row group (row scratch) */
            emit(g, "const %s t%d = wk_row%d[i1];", ctype(e->dtype), e->id, (int)(uintptr_t)row - 1);
            continue;
        }
        const void *vx = g->vexp ? wk_lower_map_get(g->vexp, e) : NULL;
        if (vx) { /* computed before the loop by wk_expf_block (emit_exp_blocks) */
            emit(g, "const float t%d = wk_ex%d[%s];", e->id, (int)(uintptr_t)vx - 1, g->vexp_idx);
            continue;
        }
        WkStr s = {0};
        wk_str_append(&s, "");
        if (g->rcp && e->op == WK_LX_DIV && wk_lower_map_get(g->rcp, e->a[1])) {
            ref(e->a[0], &s);
            emit(g, "const %s t%d = %s * r%d;", ctype(e->dtype), e->id, s.data, e->a[1]->id);
            wk_str_free(&s);
            continue;
        }
        if (expr_text(g->S, e, &s) < 0) {
            wk_str_free(&s);
            return -1;
        }
        emit(g, "const %s t%d = %s;", ctype(e->dtype), e->id, s.data);
        wk_str_free(&s);
        if (e->op == WK_LX_BOUND) { /* an index out of range: the kernel returns 1 (IndexError) */
            wk_str_append(&s, "");
            ref(e->a[0], &s);
            emit(g, "if ((uint64_t)%s >= UINT64_C(%lld)) __atomic_store_n(&wk_oob, 1, __ATOMIC_RELAXED);", s.data,
                 (long long)e->i);
            wk_str_free(&s);
        }
    }
    return 0;
}

static void emit_store(Gen *g, const WkSchedStore *st, const char *value) {
    WkStr off = {0};
    wk_str_append(&off, "");
    wk_sym_to_c(g->S->L->syms, st->offset, &off, NULL, NULL);
    WkDType dt = g->S->bufs[st->buf].dtype;
    if (dt == WK_BF16) emit(g, "b%d[%s] = wk_f32_to_bf16(%s);", st->buf, off.data, value);
    else if (dt == WK_F16) emit(g, "b%d[%s] = (_Float16)(%s);", st->buf, off.data, value);
    else emit(g, "b%d[%s] = %s;", st->buf, off.data, value);
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

static void declare_buffers(Gen *g, int first, int last, const ExprVec *order) {
    const WkSchedule *S = g->S;
    char *used = wk_xcalloc((size_t)S->nbufs + 1, 1);
    for (int k = first; k <= last; k++)
        for (int j = 0; j < S->kernels[k].nstores; j++) used[S->kernels[k].stores[j].buf] = 2;
    for (int k = 0; k < order->len; k++)
        if (order->data[k]->op == WK_LX_READ && !used[order->data[k]->buf]) used[order->data[k]->buf] = 1;
    for (int b = 0; b < S->nbufs; b++) {
        const char *T = mtype(S->bufs[b].dtype);
        if (used[b] == 1) emit(g, "const %s *restrict b%d = (const %s *)bufs[%d];", T, b, T, b);
        if (used[b] == 2) emit(g, "%s *restrict b%d = (%s *)bufs[%d];", T, b, T, b);
    }
    free(used);
}

/* ---- kernels ----------------------------------------------------------- */
static int sym_has_var(const WkSym *s, int var) {
    if (s->kind == WK_SYM_CONST) return 0;
    if (s->kind == WK_SYM_VAR) return s->var == var;
    return sym_has_var(s->a, var) || sym_has_var(s->b, var);
}

/* memo maps a node to (void *)1 (independent) or (void *)2 (dependent) */
static int depends_on_var(const WkLExpr *e, int var, WkLowerMap *memo) {
    const void *m = wk_lower_map_get(memo, e);
    if (m) return m == (const void *)2;
    int d = (e->op == WK_LX_READ || e->op == WK_LX_INDEX) && sym_has_var(e->idx[0], var);
    for (int k = 0; k < e->nargs && !d; k++) d = depends_on_var(e->a[k], var, memo);
    wk_lower_map_put(memo, e, (const void *)(uintptr_t)(d ? 2 : 1));
    return d;
}

/* s is `var + terms without var`: consecutive values of var address
 * consecutive elements (a contiguous row). */
static int unit_in(const WkSym *s, int var) {
    if (s->kind == WK_SYM_VAR) return s->var == var;
    if (s->kind != WK_SYM_ADD) return 0;
    return (unit_in(s->a, var) && !sym_has_var(s->b, var)) || (unit_in(s->b, var) && !sym_has_var(s->a, var));
}

/* The last-level cache one core sees (outputs above it are streamed, see
 * gen_pointwise). The kernel's sysfs entry first: on a multi-die CPU the C
 * library may report the whole package's L3 (256 MiB where one core's
 * share is 32 MiB); then the C library; 32 MiB where neither says. */
static int64_t llc_bytes(void) {
    static int64_t cached;
    if (!cached) {
        int64_t v = 0;
        FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
        if (f) {
            long long n = 0;
            char unit = 0;
            if (fscanf(f, "%lld%c", &n, &unit) >= 1)
                v = (int64_t)n * (unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1);
            fclose(f);
        }
        if (v <= 0) v = sysconf(_SC_LEVEL3_CACHE_SIZE);
        cached = v > 0 ? v : (int64_t)32 << 20;
    }
    return cached;
}

/* C text of an offset with loop variables respelled (for prefetch addresses) */
typedef struct {
    const WkSymPool *pool;
    int iv, rv;
    const char *iv_text, *rv_text;
} Respell;

static const char *respell_var(void *ctx, int var) {
    const Respell *r = ctx;
    if (var == r->iv) return r->iv_text;
    if (var == r->rv) return r->rv_text;
    return wk_sym_var_name(r->pool, var);
}

static void emit_reciprocals(Gen *g, const ExprVec *outer, const WkLowerMap *rcp) {
    for (int k = 0; k < outer->len; k++) {
        const WkLExpr *d = outer->data[k];
        if (!wk_lower_map_get(rcp, d)) continue;
        emit(g, "const %s r%d = (%s)1 / t%d;", ctype(d->dtype), d->id, ctype(d->dtype), d->id);
    }
}

/* In a row group's later phases, the first phase has already pulled row i0
 * into cache and these compute on it (a softmax's exps, a layer norm's
 * variance and scaling) while memory idles: each block of a reduction
 * (RED_BLOCK) or of a streamed pointwise row (NT_CHUNK) prefetches the same
 * block of row i0 + 1 of the inputs it reads, so the next row's first phase
 * finds it cached. Spread over the blocks, not issued at once: a burst of a
 * whole row's prefetches measured no faster than none. (Both later phases
 * of a layer norm prefetching measured faster than either alone.) */
static void emit_prefetch_next_row(Gen *g, const ExprVec *order, int var, const char *lo, const char *hi) {
    const WkLoopIR *L = g->S->L;
    for (int k = 0; k < order->len; k++) {
        const WkLExpr *e = order->data[k];
        if (e->op != WK_LX_READ || !unit_in(e->idx[0], var) || !sym_has_var(e->idx[0], L->ivar_id[0]))
            continue;
        int dup = 0; /* the same read twice (hash-consing makes that rare) */
        for (int q = 0; q < k && !dup; q++) dup = order->data[q]->op == WK_LX_READ && order->data[q]->buf == e->buf;
        if (dup) continue;
        Respell rs = {L->syms, L->ivar_id[0], var, "(i0 + 1)", "wk_p"};
        WkStr off = {0};
        wk_str_append(&off, "");
        wk_sym_to_c(L->syms, e->idx[0], &off, respell_var, &rs);
        size_t esz = wk_dtype_size(g->S->bufs[e->buf].dtype);
        emit(g, "if (i0 + 1 < %lld)", (long long)g->prefetch_rows);
        emit(g, "    for (int64_t wk_p = %s; wk_p < %s; wk_p += %d) __builtin_prefetch(&b%d[%s], 0, 3);", lo, hi,
             (int)(64 / (esz ? esz : 1)), e->buf, off.data);
        wk_str_free(&off);
    }
}

/* The most exps of one loop body computed ahead in blocks or chunks
 * (emit_exp_chunk, emit_exp_blocks); any more stay inline. */
enum { EXP_BLOCKS_MAX = 4 };

/* The nodes under e that depend on loop var `var`, stopping at exps
 * already computed in a chunk (vexp). */
static void mark_var_closure(const WkLExpr *e, int var, WkLowerMap *dep, WkLowerMap *need, const WkLowerMap *vexp) {
    if (!depends_on_var(e, var, dep) || wk_lower_map_get(need, e)) return;
    wk_lower_map_put(need, e, (const void *)1);
    if (wk_lower_map_get(vexp, e)) return;
    for (int k = 0; k < e->nargs; k++) mark_var_closure(e->a[k], var, dep, need, vexp);
}

/* A streamed flat kernel's chunk (wk_c .. wk_ce of loop var `var`, at most
 * FLAT_NT_CHUNK elements): each float32 exp of the loop body (a sigmoid's
 * exp(-x)) is computed before the chunk's main loop, as a reduction block's
 * are (emit_exp_blocks): one loop stores its argument into wk_ex<n>, the
 * prelude's wk_expf_block replaces it by its exp, and the main loop reads it
 * (g->vexp). gcc calls libmvec's expf once per vector. 4096 x 4096 float32
 * ((x * 1.5 + 0.5).relu() - y).sigmoid() * y on one thread: median paired
 * time ratio 0.87 against the libmvec kernel (bench/results/2026-12-02-
 * kern16-softmax-prototypes, pw1_c128.c; at 1024-element chunks it was
 * slower). Within 1 ulp of exp, as libmvec's (other bits). Returns how many
 * exps, mapped in vexp (node -> number + 1). */
static int emit_exp_chunk(Gen *g, const ExprVec *inner, int var_id, const char *var, int64_t chunk,
                          WkLowerMap *vexp, const char *vexp_idx, int *rc) {
    int n = 0;
    WkLowerMap dep = {0};
    for (int k = 0; k < inner->len && n < EXP_BLOCKS_MAX; k++) {
        const WkLExpr *e = inner->data[k];
        if (e->op != WK_LX_EXP || e->dtype != WK_F32 || e->a[0]->dtype != WK_F32 || !depends_on_var(e, var_id, &dep))
            continue;
        WkLowerMap need = {0};
        mark_var_closure(e->a[0], var_id, &dep, &need, vexp);
        ExprVec sub = {0};
        for (int q = 0; q < k; q++)
            if (wk_lower_map_get(&need, inner->data[q])) wk_vec_push(&sub, inner->data[q]);
        wk_lower_map_free(&need);
        emit(g, "float wk_ex%d[%lld];", n, (long long)chunk);
        emit(g, "#pragma omp simd");
        emit(g, "for (int64_t %s = wk_c; %s < wk_ce; %s++) {", var, var, var);
        g->indent++;
        g->vexp = vexp; /* an exp of an earlier exp reads that one's chunk */
        g->vexp_idx = vexp_idx;
        if (emit_nodes(g, &sub, -1) < 0) *rc = -1;
        g->vexp = NULL;
        WkStr a = {0};
        wk_str_append(&a, "");
        ref(e->a[0], &a);
        emit(g, "wk_ex%d[%s - wk_c] = %s;", n, var, a.data);
        wk_str_free(&a);
        close_loops(g, 1);
        emit(g, "wk_expf_block(wk_ex%d, wk_ce - wk_c);", n);
        wk_vec_free(&sub);
        wk_lower_map_put(vexp, e, (const void *)(uintptr_t)(n + 1));
        n++;
    }
    wk_lower_map_free(&dep);
    return n;
}

static int reads_buf(const WkLExpr *e, int buf, WkLowerMap *seen) {
    if (wk_lower_map_get(seen, e)) return 0;
    wk_lower_map_put(seen, e, e);
    if (e->op == WK_LX_READ && e->buf == buf) return 1;
    for (int k = 0; k < e->nargs; k++)
        if (reads_buf(e->a[k], buf, seen)) return 1;
    return 0;
}

/* Whether a later phase of K's row group reads buffer buf (a residual sum
 * that the layer norm after it normalises): it must stay in cache. */
static int read_later_in_group(const Gen *g, const WkSchedKernel *K, int buf) {
    int found = 0;
    for (int m = (int)(K - g->S->kernels) + 1; m <= g->group_last && !found; m++) {
        WkLowerMap seen = {0};
        for (int j = 0; j < g->S->kernels[m].nstores && !found; j++)
            found = reads_buf(g->S->kernels[m].stores[j].expr, buf, &seen);
        wk_lower_map_free(&seen);
    }
    return found;
}

/* skip: leading loops already opened by a row group (which owns threads).
 * Nodes that do not depend on the innermost loop variable are computed
 * before that loop: besides saving work, gcc's vectoriser gives up on a
 * simd loop that re-reads a value stored earlier in the enclosing loop. */
static int gen_pointwise(Gen *g, const WkSchedKernel *K, const ExprVec *order, int skip) {
    int n = K->nloops;
    int par = !skip && K->numel >= g->par_min_work;
    WkLowerMap memo = {0};
    ExprVec outer = {0}, inner = {0};
    int inner_var = n > skip ? g->S->L->ivar_id[n - 1] : -1;
    for (int k = 0; k < order->len; k++) {
        const WkLExpr *e = order->data[k];
        if (inner_var >= 0 && depends_on_var(e, inner_var, &memo)) wk_vec_push(&inner, e);
        else wk_vec_push(&outer, e);
    }
    wk_lower_map_free(&memo);
    /* A float division whose divisor is the same along the vector loop (a
     * softmax's row sum) multiplies by its reciprocal, computed once before
     * the loop: one division per row instead of per element, as eager's
     * softmax does. Constant divisors (not nodes of `outer`) stay divisions:
     * gcc already turns the exact ones into multiplications. */
    WkLowerMap rcp = {0}, in_outer = {0};
    int nrcp = 0;
    for (int k = 0; k < outer.len; k++) wk_lower_map_put(&in_outer, outer.data[k], (const void *)1);
    for (int k = 0; k < inner.len; k++) {
        const WkLExpr *e = inner.data[k], *d = e->nargs > 1 ? e->a[1] : NULL;
        if (e->op != WK_LX_DIV || !wk_dtype_is_float(e->dtype) || !wk_lower_map_get(&in_outer, d) ||
            wk_lower_map_get(&rcp, d))
            continue;
        wk_lower_map_put(&rcp, d, (const void *)1);
        nrcp++;
    }
    wk_lower_map_free(&in_outer);
    /* A row phase whose float32 output is larger than the last-level cache
     * (it cannot stay cached for a later reader anyway) computes each row
     * into a stack row and streams it out with non-temporal stores: no read
     * for ownership of the output's lines, a third less memory traffic than
     * plain stores, and the input rows the next phases read stay cached
     * (a store that a later phase reads back, a residual sum, is not
     * streamed: it would come back from memory). A kernel of one loop (a
     * flat elementwise kernel) does the same chunk by chunk, each thread
     * over its range of chunks (4096 x 4096 float32
     * ((x * 1.5 + 0.5).relu() - y).sigmoid() * y on one thread measured
     * ~20 % faster by its fastest samples). */
    int *nt = wk_xcalloc((size_t)K->nstores + 1, sizeof *nt);
    int64_t row = n > 0 ? K->sizes[n - 1] : 0;
    int any_nt = 0, flat_nt = skip == 0 && n == 1, nvexp = 0;
    WkLowerMap vexp = {0};
    char vexp_idx[32];
    snprintf(vexp_idx, sizeof vexp_idx, "i%d - wk_c", n - 1);
    if (((skip == 1 && n == 2 && row * 4 <= NT_ROW_MAX_BYTES) || flat_nt) && K->numel * 4 >= llc_bytes())
        for (int j = 0; j < K->nstores; j++) {
            nt[j] = g->S->bufs[K->stores[j].buf].dtype == WK_F32 && unit_in(K->stores[j].offset, inner_var) &&
                    !read_later_in_group(g, K, K->stores[j].buf);
            any_nt |= nt[j];
        }
    int rc = 0;
    for (int j = skip; j < n; j++) {
        char var[16];
        snprintf(var, sizeof var, "i%d", j);
        const char *pragma = NULL;
        if (j == 0 && par) pragma = n == 1 ? "#pragma omp parallel for simd schedule(static)"
                                           : n >= 3 && K->sizes[0] < 16 ? "#pragma omp parallel for collapse(2) schedule(static)"
                                                                          : "#pragma omp parallel for schedule(static)";
        else if (j == n - 1) pragma = "#pragma omp simd";
        /* (collapse(2) is only used with 3+ loops: loops 0 and 1 stay perfectly nested) */
        if (j == n - 1 && emit_nodes(g, &outer, -1) < 0) rc = -1;
        if (j == n - 1 && nrcp) emit_reciprocals(g, &outer, &rcp);
        if (j == n - 1 && any_nt) {
            int64_t most = flat_nt ? FLAT_NT_CHUNK : NT_CHUNK, chunk = row < most ? row : most;
            if (flat_nt) { /* the staging chunks and the fence, per thread */
                if (par) emit(g, "#pragma omp parallel");
                emit(g, "{");
                g->indent++;
            }
            for (int q = 0; q < K->nstores; q++)
                if (nt[q]) emit(g, "float wk_nt%d[%lld];", q, (long long)chunk);
            if (flat_nt && par) emit(g, "#pragma omp for schedule(static) nowait");
            emit(g, "for (int64_t wk_c = 0; wk_c < %lld; wk_c += %lld) {", (long long)row, (long long)chunk);
            g->indent++;
            emit(g, "const int64_t wk_ce = wk_c + %lld < %lld ? wk_c + %lld : %lld;", (long long)chunk,
                 (long long)row, (long long)chunk, (long long)row);
            if (g->prefetch_rows) emit_prefetch_next_row(g, &inner, inner_var, "wk_c", "wk_ce");
            if (flat_nt) nvexp = emit_exp_chunk(g, &inner, inner_var, var, chunk, &vexp, vexp_idx, &rc);
            emit(g, "%s", "#pragma omp simd");
            emit(g, "for (int64_t %s = wk_c; %s < wk_ce; %s++) {", var, var, var);
            g->indent++;
            continue;
        }
        open_loop(g, var, K->sizes[j], pragma);
    }
    if (inner_var < 0 && emit_nodes(g, &outer, -1) < 0) rc = -1;
    if (nrcp) g->rcp = &rcp;
    if (nvexp) {
        g->vexp = &vexp;
        g->vexp_idx = vexp_idx;
    }
    if (rc == 0 && emit_nodes(g, &inner, -1) < 0) rc = -1;
    g->rcp = NULL;
    g->vexp = NULL;
    wk_lower_map_free(&vexp);
    wk_lower_map_free(&rcp);
    for (int j = 0; j < K->nstores && rc == 0; j++) {
        WkStr v = {0};
        wk_str_append(&v, "");
        ref(K->stores[j].expr, &v);
        if (nt[j]) emit(g, "wk_nt%d[i%d - wk_c] = %s;", j, n - 1, v.data);
        else emit_store(g, &K->stores[j], v.data);
        wk_str_free(&v);
    }
    if (any_nt) {
        close_loops(g, 1); /* the vector loop; then stream the chunk */
        for (int j = 0; j < K->nstores; j++) {
            if (!nt[j]) continue;
            WkStr off = {0};
            wk_str_append(&off, "");
            wk_sym_to_c(g->S->L->syms, K->stores[j].offset, &off, NULL, NULL);
            emit(g, "{ const int64_t i%d = wk_c; wk_stream_f32(&b%d[%s], wk_nt%d, wk_ce - wk_c); }", n - 1,
                 K->stores[j].buf, off.data, j);
            wk_str_free(&off);
        }
        close_loops(g, 1);
        emit(g, "wk_stream_fence();");
        if (flat_nt) close_loops(g, 1); /* the chunks' scope (parallel region) */
    } else {
        close_loops(g, n - skip);
    }
    free(nt);
    wk_vec_free(&outer);
    wk_vec_free(&inner);
    return rc;
}

/* ---- reductions --------------------------------------------------------
 * Row mode: outer loops over outputs, a scalar accumulator, reduction loops
 * inside with `omp simd reduction`; float32 sums accumulate 256-element
 * blocks in float lanes, then the blocks in double (as accurate as torch's
 * cascade sum, at full vector width). Contiguous rows go MULTI_ROWS at a
 * time through one loop (emit_multi_rows). Small outputs with a long
 * reduction parallelise the reduction itself (per-thread partials).
 * Outer mode (K->reduce_outer: a column sum): outputs of the innermost loop
 * are processed 64..1024 at a time with an accumulator array, so the vector loop
 * runs along contiguous memory and the reduction loops go outside it. */
enum { RED_BLOCK = 256, OUT_BLOCK = 64, OUT_BLOCK_MAX = 1024 };

typedef struct {
    const WkLExpr *red, *body;
    WkDType acc_t, out_t;
    int fl, is_max;                  /* is_max: MAX or MIN (compare-select, NaN flag) */
    int is_min, is_prod;
    int64_t count;
} RedInfo;

static RedInfo red_info(const WkSchedKernel *K) {
    RedInfo r;
    r.red = K->stores[0].expr;
    r.body = r.red->a[0];
    r.acc_t = r.body->dtype;
    r.out_t = r.red->dtype;
    r.fl = wk_dtype_is_float(r.acc_t);
    r.is_min = r.red->rop == WK_RED_MIN;
    r.is_max = r.red->rop == WK_RED_MAX || r.is_min;
    r.is_prod = r.red->rop == WK_RED_PROD;
    r.count = 1;
    for (int k = 0; k < r.red->nred; k++) r.count *= r.red->red_sizes[k];
    return r;
}

/* float32 sums: float lanes per block, double across blocks; only when the
 * result is float32 too: sum(x, dtype=float64) must add in double */
static int red_blocked(const WkSchedKernel *K, const RedInfo *r) {
    return !r->is_max && !r->is_prod && r->out_t == WK_F32 && r->acc_t == WK_F64 && r->body->op == WK_LX_CAST &&
           r->body->a[0]->dtype == WK_F32 && K->nred >= 1 && K->red_sizes[K->nred - 1] > 16;
}

static const char *acc_init(const RedInfo *r) {
    if (r->is_prod) return "1";
    if (!r->is_max) return "0";
    if (r->is_min) {
        if (r->fl) return "INFINITY";
        switch (r->acc_t) {
        case WK_I64: return "INT64_MAX";
        case WK_I32: return "INT32_MAX";
        case WK_I16: return "INT16_MAX";
        case WK_I8: return "INT8_MAX";
        case WK_BOOL: return "1";
        default: return "UINT8_MAX";
        }
    }
    if (r->fl) return "-INFINITY";
    switch (r->acc_t) {
    case WK_I64: return "INT64_MIN";
    case WK_I32: return "INT32_MIN";
    case WK_I16: return "INT16_MIN";
    case WK_I8: return "INT8_MIN";
    default: return "0";
    }
}

static void emit_update(Gen *g, const RedInfo *r, const char *acc, const char *nanf, const char *t) {
    if (!r->is_max) {
        emit(g, "%s %s= %s;", acc, r->is_prod ? "*" : "+", t);
        return;
    }
    emit(g, "%s = %s %s %s ? %s : %s;", acc, t, r->is_min ? "<" : ">", acc, t, acc);
    if (r->fl) emit(g, "%s |= %s != %s;", nanf, t, t);
}

static void final_value(const RedInfo *r, const char *acc, const char *nanf, char *out, size_t n) {
    const char *T = ctype(r->out_t);
    if (r->red->rop == WK_RED_MEAN) snprintf(out, n, "(%s)(%s / (double)%lld)", T, acc, (long long)r->count);
    else if (r->is_max && r->fl) snprintf(out, n, "(%s)(%s ? NAN : %s)", T, nanf, acc);
    else if (r->out_t == WK_BOOL && !r->is_max) snprintf(out, n, "(uint8_t)(%s != 0)", acc);
    else if (r->acc_t == WK_BOOL && r->out_t == WK_U8) snprintf(out, n, "(uint8_t)%s", acc);
    else snprintf(out, n, "(%s)%s", T, acc);
}

static int emit_epilogue(Gen *g, const WkSchedKernel *K, const ExprVec *epi) {
    if (emit_nodes(g, epi, -1) < 0) return -1;
    for (int j = 1; j < K->nstores; j++) { /* epilogue stores read only i vars */
        WkStr v = {0};
        wk_str_append(&v, "");
        ref(K->stores[j].expr, &v);
        emit_store(g, &K->stores[j], v.data);
        wk_str_free(&v);
    }
    return 0;
}

/* An output row block of accumulators (and NaN flags for max/min) over
 * ib..ie, each set to the reduction's initial value. */
static void emit_acc_row(Gen *g, const char *T, const char *acc, const char *nan, int64_t ob, const char *init) {
    emit(g, "%s %s[%lld];", T, acc, (long long)ob);
    if (nan) emit(g, "uint8_t %s[%lld];", nan, (long long)ob);
    emit(g, "for (int64_t i0 = ib; i0 < ie; i0++) {");
    g->indent++;
    emit(g, "%s[i0 - ib] = %s;", acc, init);
    if (nan) emit(g, "%s[i0 - ib] = 0;", nan);
    close_loops(g, 1);
}

/* A column sum with one output loop: the rows stream through in memory
 * order, each thread summing a range of rows into its own accumulator row
 * (at most OUT_ROW_MAX outputs at a time), then the threads' rows merge.
 * Reading whole rows keeps the hardware prefetchers and the TLB on one
 * sequential stream; walking a narrow column block down 16 KiB-strided rows
 * restarts both on every row. */
enum { OUT_ROW_MAX = 4096 };
/* A large float32 column sum adds COL_BLOCK rows in float lanes (full
 * vector width) and folds each block into the double row: as accurate as
 * the row sums' RED_BLOCK blocking.
 * Only from COL_BLOCK_MIN_WORK elements: on small ones (a training step's
 * bias gradients, 128 x 512) the blocked loop measured slower, not faster.
 * 8 rows, not 16: 16 row streams at once measured ~30 % slower on a
 * 4096 x 4096 sum(0) on one thread (more streams than the core's
 * prefetchers follow); 4 and 8 were alike. */
enum { COL_BLOCK = 8, COL_BLOCK_MIN_WORK = 1 << 20 };

static int gen_reduction_rows(Gen *g, const WkSchedKernel *K, const ExprVec *order, const ExprVec *epi) {
    RedInfo r = red_info(K);
    int64_t S = K->sizes[0];
    int par = K->numel * K->red_numel >= g->par_min_work && K->red_sizes[0] >= 2;
    int64_t ob = S < OUT_ROW_MAX ? S : OUT_ROW_MAX;
    int nanflag = r.is_max && r.fl;
    const char *T = ctype(r.acc_t);
    char value[200];
    int blocked = !r.is_max && !r.is_prod && r.out_t == WK_F32 && r.acc_t == WK_F64 && r.body->op == WK_LX_CAST &&
                  r.body->a[0]->dtype == WK_F32 && K->nred == 1 && K->red_sizes[0] > COL_BLOCK &&
                  K->numel * K->red_numel >= COL_BLOCK_MIN_WORK;
    emit(g, "for (int64_t ib = 0; ib < %lld; ib += %lld) {", (long long)S, (long long)ob);
    g->indent++;
    emit(g, "const int64_t ie = ib + %lld < %lld ? ib + %lld : %lld;", (long long)ob, (long long)S, (long long)ob,
         (long long)S);
    emit_acc_row(g, T, "tot", nanflag ? "totn" : NULL, ob, acc_init(&r));
    if (par) emit(g, "#pragma omp parallel");
    emit(g, "{");
    g->indent++;
    emit_acc_row(g, T, "acc", nanflag ? "nanf" : NULL, ob, acc_init(&r));
    if (blocked) {
        /* COL_BLOCK rows at a time, each lane adding its column down them in
         * a register: the rows stream in order, COL_BLOCK streams at once,
         * and the accumulator row is touched once per block instead of once
         * per row. A full block's trip count is a literal, which lets gcc
         * vectorise the column loop around it. */
        int64_t N = K->red_sizes[0];
        if (par) emit(g, "#pragma omp for schedule(static) nowait");
        emit(g, "for (int64_t rb = 0; rb < %lld; rb += %d) {", (long long)N, COL_BLOCK);
        g->indent++;
        for (int full = 1; full >= 0; full--) {
            if (full) emit(g, "if (rb + %d <= %lld) {", COL_BLOCK, (long long)N);
            else emit(g, "} else {");
            g->indent++;
            emit(g, "#pragma omp simd");
            emit(g, "for (int64_t i0 = ib; i0 < ie; i0++) {");
            g->indent++;
            emit(g, "float facc = 0;");
            if (full) emit(g, "for (int64_t r0 = rb; r0 < rb + %d; r0++) {", COL_BLOCK);
            else emit(g, "for (int64_t r0 = rb; r0 < %lld; r0++) {", (long long)N);
            g->indent++;
            if (emit_nodes(g, order, -1) < 0) return -1;
            WkStr t = {0};
            wk_str_append(&t, "");
            ref(r.body->a[0], &t);
            emit(g, "facc += %s;", t.data);
            wk_str_free(&t);
            close_loops(g, 1);
            emit(g, "acc[i0 - ib] += (double)facc;");
            close_loops(g, 1);
            g->indent--;
        }
        emit(g, "}");
        close_loops(g, 1);
    } else {
        for (int j = 0; j < K->nred; j++) {
            char var[16];
            snprintf(var, sizeof var, "r%d", j);
            open_loop(g, var, K->red_sizes[j], j == 0 && par ? "#pragma omp for schedule(static) nowait" : NULL);
        }
        emit(g, "#pragma omp simd");
        emit(g, "for (int64_t i0 = ib; i0 < ie; i0++) {");
        g->indent++;
        if (emit_nodes(g, order, -1) < 0) return -1;
        WkStr t = {0};
        wk_str_append(&t, "");
        ref(r.body, &t);
        emit_update(g, &r, "acc[i0 - ib]", "nanf[i0 - ib]", t.data);
        wk_str_free(&t);
        close_loops(g, 1 + K->nred);
    }
    if (par) emit(g, "#pragma omp critical");
    emit(g, "for (int64_t i0 = ib; i0 < ie; i0++) {"); /* merge this thread's row */
    g->indent++;
    if (!r.is_max) emit(g, "tot[i0 - ib] %s= acc[i0 - ib];", r.is_prod ? "*" : "+");
    else emit(g, "tot[i0 - ib] = acc[i0 - ib] %s tot[i0 - ib] ? acc[i0 - ib] : tot[i0 - ib];", r.is_min ? "<" : ">");
    if (nanflag) emit(g, "totn[i0 - ib] |= nanf[i0 - ib];");
    close_loops(g, 2); /* the merge loop, the thread's block */
    emit(g, "for (int64_t i0 = ib; i0 < ie; i0++) {");
    g->indent++;
    final_value(&r, "tot[i0 - ib]", "totn[i0 - ib]", value, sizeof value);
    emit_store(g, &K->stores[0], value);
    if (K->nstores > 1 && emit_nodes(g, order, 0) < 0) return -1;
    if (emit_epilogue(g, K, epi) < 0) return -1;
    close_loops(g, 2);
    return 0;
}

static int gen_reduction_outer(Gen *g, const WkSchedKernel *K, const ExprVec *order, const ExprVec *epi) {
    RedInfo r = red_info(K);
    int n = K->nloops;
    if (n == 1) return gen_reduction_rows(g, K, order, epi);
    int64_t S = K->sizes[n - 1];
    int par = K->numel * K->red_numel >= g->par_min_work;
    int par_outer = par && n >= 2 && K->sizes[0] >= 4;
    /* wide blocks stream whole cache lines of each row; when the blocks are
     * the parallel loop, keep at least ~8 of them */
    int64_t ob = par_outer ? S : S / 8;
    ob = ob > OUT_BLOCK_MAX ? OUT_BLOCK_MAX : ob < OUT_BLOCK ? OUT_BLOCK : ob & ~(int64_t)15;
    char iv[16], acc[48], nanf[48], value[200];
    snprintf(iv, sizeof iv, "i%d", n - 1);
    snprintf(acc, sizeof acc, "acc[%s - ib]", iv);
    snprintf(nanf, sizeof nanf, "nanf[%s - ib]", iv);
    for (int j = 0; j < n - 1; j++) {
        char var[16];
        snprintf(var, sizeof var, "i%d", j);
        open_loop(g, var, K->sizes[j], j == 0 && par_outer ? "#pragma omp parallel for schedule(static)" : NULL);
    }
    if (par && !par_outer) emit(g, "#pragma omp parallel for schedule(static)");
    emit(g, "for (int64_t ib = 0; ib < %lld; ib += %lld) {", (long long)S, (long long)ob);
    g->indent++;
    emit(g, "const int64_t ie = ib + %lld < %lld ? ib + %lld : %lld;", (long long)ob, (long long)S, (long long)ob,
         (long long)S);
    emit(g, "%s acc[%lld];", ctype(r.acc_t), (long long)ob);
    if (r.is_max && r.fl) emit(g, "uint8_t nanf[%lld];", (long long)ob);
    emit(g, "for (int64_t %s = ib; %s < ie; %s++) {", iv, iv, iv);
    g->indent++;
    emit(g, "%s = %s;", acc, acc_init(&r));
    if (r.is_max && r.fl) emit(g, "%s = 0;", nanf);
    close_loops(g, 1);
    for (int j = 0; j < K->nred; j++) {
        char var[16];
        snprintf(var, sizeof var, "r%d", j);
        open_loop(g, var, K->red_sizes[j], NULL);
    }
    emit(g, "#pragma omp simd");
    emit(g, "for (int64_t %s = ib; %s < ie; %s++) {", iv, iv, iv);
    g->indent++;
    if (emit_nodes(g, order, -1) < 0) return -1;
    WkStr t = {0};
    wk_str_append(&t, "");
    ref(r.body, &t);
    emit_update(g, &r, acc, nanf, t.data);
    wk_str_free(&t);
    close_loops(g, 1 + K->nred);
    emit(g, "for (int64_t %s = ib; %s < ie; %s++) {", iv, iv, iv);
    g->indent++;
    final_value(&r, acc, nanf, value, sizeof value);
    emit_store(g, &K->stores[0], value);
    /* the reduction's nodes were declared inside the simd loop's scope; the
     * epilogue may share the ones that do not read r vars, so declare those
     * again in this scope */
    if (K->nstores > 1 && emit_nodes(g, order, 0) < 0) return -1;
    if (emit_epilogue(g, K, epi) < 0) return -1;
    close_loops(g, 2 + (n - 1));
    return 0;
}

/* Marks the nodes under e that depend on r vars (what a block's loop must
 * compute to get e), stopping at exps already computed in blocks and at
 * values read from the row scratch. */
static void mark_r_closure(Gen *g, const WkLExpr *e, WkLowerMap *need, const WkLowerMap *vexp) {
    if (!depends_on_r(g, e) || wk_lower_map_get(need, e)) return;
    wk_lower_map_put(need, e, (const void *)1);
    if (wk_lower_map_get(vexp, e) || (g->reuse && wk_lower_map_get(g->reuse, e))) return;
    for (int k = 0; k < e->nargs; k++) mark_r_closure(g, e->a[k], need, vexp);
}

/* A reduction's block (RED_BLOCK elements of reduction var `var`, rb..re)
 * whose body takes exp of a float32 (a softmax's or log-softmax's
 * exp(x - max)): before the block's main loop, one loop computes each exp's
 * argument into a stack block, and wk_expf_block (the prelude's AVX2/FMA
 * exp, inlined) replaces it by its exp; the main loop reads the block
 * (emit_nodes, through g->vexp). gcc vectorises `expf` in a simd loop as a
 * call to libmvec per vector, which made exp the bound of a softmax on one
 * thread. At most EXP_BLOCKS_MAX exps; returns how many, mapped in vexp
 * (node -> number + 1). */
static int emit_exp_blocks(Gen *g, const ExprVec *order, const char *var, WkLowerMap *vexp, int *rc) {
    int n = 0;
    char idx[32];
    snprintf(idx, sizeof idx, "%s - rb", var);
    for (int k = 0; k < order->len && n < EXP_BLOCKS_MAX; k++) {
        const WkLExpr *e = order->data[k];
        if (e->op != WK_LX_EXP || e->dtype != WK_F32 || e->a[0]->dtype != WK_F32 || !depends_on_r(g, e) ||
            (g->reuse && wk_lower_map_get(g->reuse, e)))
            continue; /* (a reused exp is read from its row scratch, not computed) */
        WkLowerMap need = {0};
        mark_r_closure(g, e->a[0], &need, vexp);
        ExprVec sub = {0};
        for (int q = 0; q < k; q++)
            if (wk_lower_map_get(&need, order->data[q])) wk_vec_push(&sub, order->data[q]);
        wk_lower_map_free(&need);
        emit(g, "float wk_ex%d[%d];", n, RED_BLOCK);
        emit(g, "#pragma omp simd");
        emit(g, "for (int64_t %s = rb; %s < re; %s++) {", var, var, var);
        g->indent++;
        g->vexp = vexp; /* an exp of an earlier exp reads that one's block */
        g->vexp_idx = idx;
        if (emit_nodes(g, &sub, 1) < 0) *rc = -1;
        g->vexp = NULL;
        WkStr a = {0};
        wk_str_append(&a, "");
        ref(e->a[0], &a);
        emit(g, "wk_ex%d[%s - rb] = %s;", n, var, a.data);
        wk_str_free(&a);
        close_loops(g, 1);
        emit(g, "wk_expf_block(wk_ex%d, re - rb);", n);
        wk_vec_free(&sub);
        wk_lower_map_put(vexp, e, (const void *)(uintptr_t)(n + 1));
        n++;
    }
    return n;
}

/* A blocked float32 sum of exp(x - c) (a softmax's or log-softmax's
 * exp-sum: x a float32 row read along the reduction var, c the same along
 * it), each block through wk_expsum_f32: the exp in registers, summed
 * straight from them, and stored into the row scratch when a later phase
 * reads it (wk_row<n>), with no stack block of arguments and exps between
 * loops as emit_exp_blocks has. 4096 x 4096 float32 softmax: 5.2 -> 4.5 ms
 * on two threads, 10.7 -> 9.0 ms on one (bench/results/2026-12-03-bw20-
 * kernels). The block's sum adds in the helper's order (8 lanes, then the
 * lanes in turn), the same for every row and thread count; within float32
 * rounding of the simd loop's. Fills es (the read, c, the scratch row or
 * -1) and returns 1 when the kernel's body is that and nothing else. */
typedef struct {
    const WkLExpr *read, *c, *exp;
    int row; /* scratch row the exps go to, or -1 */
} ExpSum;

static int expsum_plan(Gen *g, const WkSchedKernel *K, const RedInfo *r, const ExprVec *order, ExpSum *es) {
    const WkLoopIR *L = g->S->L;
    if (K->nred != 1 || g->vexp) return 0;
    const WkLExpr *e = r->body->a[0], *d = e->nargs == 1 ? e->a[0] : NULL;
    if (e->op != WK_LX_EXP || e->dtype != WK_F32 || !d || d->op != WK_LX_SUB || d->dtype != WK_F32) return 0;
    const WkLExpr *x = d->a[0], *c = d->a[1];
    if (x->op != WK_LX_READ || x->dtype != WK_F32 || g->S->bufs[x->buf].dtype != WK_F32 ||
        !unit_in(x->idx[0], L->rvar_id[0]) || c->dtype != WK_F32 || depends_on_r(g, c))
        return 0;
    es->read = x;
    es->c = c;
    es->exp = e;
    es->row = -1;
    for (int k = 0; k < order->len; k++) {
        const WkLExpr *n = order->data[k];
        if (!depends_on_r(g, n)) continue;
        if (n != x && n != d && n != e && n != r->body) return 0;
        const void *row = g->keep ? wk_lower_map_get(g->keep, n) : NULL;
        if (row && n != e) return 0;
        if (row) es->row = (int)(uintptr_t)row - 1;
    }
    return 1;
}

static void emit_expsum(Gen *g, const ExpSum *es) {
    const WkLoopIR *L = g->S->L;
    Respell rs = {L->syms, -1, L->rvar_id[0], NULL, "rb"};
    WkStr off = {0}, c = {0}, dst = {0};
    wk_str_append(&off, "");
    wk_sym_to_c(L->syms, es->read->idx[0], &off, respell_var, &rs);
    wk_str_append(&c, "");
    ref(es->c, &c);
    wk_str_append(&dst, "");
    if (es->row >= 0) wk_str_printf(&dst, "&wk_row%d[rb]", es->row);
    else wk_str_append(&dst, "NULL");
    emit(g, "accb = wk_expsum_f32(%s, &b%d[%s], %s, re - rb);", dst.data, es->read->buf, off.data, c.data);
    wk_str_free(&off);
    wk_str_free(&c);
    wk_str_free(&dst);
}

/* Row sums of a large input read MULTI_ROWS rows per pass: one loop adds
 * row i, i + 1, ... each into its own accumulators, so the core has that
 * many independent sequential streams in flight (and as many add chains)
 * instead of one; 4096 x 4096 x.sum(-1) on one thread measured ~1.5x
 * faster with 4 rows than with 1 (8: as 4; 2: between). Each row's sum is
 * the same computation, in the same order, as the one-row loop's. Only for
 * a kernel's own loops (not a row group's phase), one reduction loop along
 * a contiguous row, no exp blocks and no index checks in the body. */
enum { MULTI_ROWS = 4, MULTI_ROWS_MIN_RED = 16 };

static int multi_row_ok(Gen *g, const WkSchedKernel *K, const ExprVec *order, const ExprVec *epi, int skip,
                        int inner_par) {
    const WkLoopIR *L = g->S->L;
    if (skip || inner_par || K->nloops < 1 || K->nred != 1 || K->sizes[K->nloops - 1] < MULTI_ROWS ||
        K->red_sizes[0] < MULTI_ROWS_MIN_RED)
        return 0;
    int contiguous = 0;
    for (int k = 0; k < order->len; k++) {
        const WkLExpr *e = order->data[k];
        if (e->op == WK_LX_BOUND || (e->op == WK_LX_EXP && e->dtype == WK_F32)) return 0;
        if (e->op == WK_LX_READ && unit_in(e->idx[0], L->rvar_id[0])) contiguous = 1;
    }
    for (int k = 0; k < epi->len; k++)
        if (epi->data[k]->op == WK_LX_BOUND) return 0;
    return contiguous;
}

/* The MULTI_ROWS rows wk_m .. wk_m + MULTI_ROWS - 1 of the innermost output
 * loop (variable iv) at once: each row's nodes in their own scope with iv
 * bound to its row, accumulators acc<k> (and accb<k>, nanf<k>). */
static int emit_multi_rows(Gen *g, const WkSchedKernel *K, const ExprVec *order, const ExprVec *epi,
                           const RedInfo *r, int blocked, const char *iv) {
    const int M = MULTI_ROWS;
    char list[256], clause[600], name[32], value[200];
    int64_t N = K->red_sizes[0];
    for (int k = 0; k < M; k++) {
        emit(g, "%s acc%d = %s;", ctype(r->acc_t), k, acc_init(r));
        if (r->is_max && r->fl) emit(g, "int nanf%d = 0;", k);
    }
    if (blocked) {
        emit(g, "for (int64_t rb = 0; rb < %lld; rb += %d) {", (long long)N, RED_BLOCK);
        g->indent++;
        emit(g, "const int64_t re = rb + %d < %lld ? rb + %d : %lld;", RED_BLOCK, (long long)N, RED_BLOCK, (long long)N);
        list[0] = '\0';
        for (int k = 0; k < M; k++) {
            emit(g, "float accb%d = 0;", k);
            snprintf(list + strlen(list), sizeof list - strlen(list), "%saccb%d", k ? ", " : "", k);
        }
        emit(g, "#pragma omp simd reduction(+:%s)", list);
        emit(g, "for (int64_t r0 = rb; r0 < re; r0++) {");
    } else {
        const char *op = r->is_prod ? "*" : !r->is_max ? "+" : r->is_min ? "min" : "max";
        list[0] = '\0';
        for (int k = 0; k < M; k++) snprintf(list + strlen(list), sizeof list - strlen(list), "%sacc%d", k ? ", " : "", k);
        snprintf(clause, sizeof clause, "reduction(%s:%s)", op, list);
        if (r->is_max && r->fl) {
            snprintf(clause + strlen(clause), sizeof clause - strlen(clause), " reduction(|:");
            for (int k = 0; k < M; k++)
                snprintf(clause + strlen(clause), sizeof clause - strlen(clause), "%snanf%d", k ? ", " : "", k);
            snprintf(clause + strlen(clause), sizeof clause - strlen(clause), ")");
        }
        emit(g, "#pragma omp simd %s", clause);
        emit(g, "for (int64_t r0 = 0; r0 < %lld; r0++) {", (long long)N);
    }
    g->indent++;
    for (int k = 0; k < M; k++) {
        emit(g, "{");
        g->indent++;
        emit(g, "const int64_t %s = wk_m + %d;", iv, k);
        if (emit_nodes(g, order, -1) < 0) return -1;
        WkStr t = {0};
        wk_str_append(&t, "");
        ref(blocked ? r->body->a[0] : r->body, &t);
        if (blocked) {
            emit(g, "accb%d += %s;", k, t.data);
        } else {
            char nanf[32];
            snprintf(name, sizeof name, "acc%d", k);
            snprintf(nanf, sizeof nanf, "nanf%d", k);
            emit_update(g, r, name, nanf, t.data);
        }
        wk_str_free(&t);
        close_loops(g, 1);
    }
    close_loops(g, 1);
    if (blocked) {
        for (int k = 0; k < M; k++) emit(g, "acc%d += accb%d;", k, k);
        close_loops(g, 1);
    }
    for (int k = 0; k < M; k++) {
        emit(g, "{");
        g->indent++;
        emit(g, "const int64_t %s = wk_m + %d;", iv, k);
        char acc[32], nanf[32];
        snprintf(acc, sizeof acc, "acc%d", k);
        snprintf(nanf, sizeof nanf, "nanf%d", k);
        final_value(r, acc, nanf, value, sizeof value);
        emit_store(g, &K->stores[0], value);
        if (K->nstores > 1 && emit_nodes(g, order, 0) < 0) return -1;
        if (emit_epilogue(g, K, epi) < 0) return -1;
        close_loops(g, 1);
    }
    return 0;
}

/* Row wk_lag of a lagged last phase (LagPhase), elements lo .. lo + n - 1 of
 * its row: in its own scope, i0 bound to wk_lag and the scratch row to that
 * row's half of wk_rowbuf<n>. */
static int emit_lag_phase(Gen *g, const LagPhase *lp, const char *lo, const char *n) {
    const WkLowerMap *keep = g->keep, *reuse = g->reuse;
    emit(g, "if (wk_lag >= 0) { /* kernel %d, one row late */", (int)(lp->K - g->S->kernels));
    g->indent++;
    emit(g, "const int64_t i0 = wk_lag;");
    emit(g, "const float *const wk_row%d = wk_rowbuf%d[i0 & 1];", lp->src_row, lp->src_row);
    g->keep = NULL;
    g->reuse = lp->reuse;
    int rc = emit_nodes(g, &lp->outer, -1);
    g->keep = keep;
    g->reuse = reuse;
    WkStr scale = {0}, off = {0};
    wk_str_append(&scale, "");
    if (lp->div) wk_str_printf(&scale, "((float)1 / t%d)", lp->scale->id);
    else ref(lp->scale, &scale);
    wk_str_append(&off, "");
    wk_sym_to_c(g->S->L->syms, lp->K->stores[0].offset, &off, NULL, NULL);
    emit(g, "{ const int64_t i1 = %s; wk_stream_scaled_f32(&b%d[%s], &wk_row%d[i1], %s, %s); }", lo,
         lp->K->stores[0].buf, off.data, lp->src_row, scale.data, n);
    wk_str_free(&scale);
    wk_str_free(&off);
    g->indent--;
    emit(g, "}");
    return rc;
}

/* order: the nodes of the reduction's own store; epi: the epilogue's others */
static int gen_reduction(Gen *g, const WkSchedKernel *K, const ExprVec *order, const ExprVec *epi, int skip) {
    if (K->reduce_outer && !skip) return gen_reduction_outer(g, K, order, epi);
    RedInfo r = red_info(K);
    int64_t work = K->numel * K->red_numel;
    int outer_par = !skip && work >= g->par_min_work && K->numel >= PAR_MIN_ROWS;
    int inner_par = !skip && work >= g->par_min_work && !outer_par && K->red_numel >= PAR_MIN_REDUCE;
    const char *clause = r.is_prod ? "reduction(*:acc)"
                         : !r.is_max ? "reduction(+:acc)"
                         : r.is_min ? (r.fl ? "reduction(min:acc) reduction(|:nanf)" : "reduction(min:acc)")
                         : r.fl ? "reduction(max:acc) reduction(|:nanf)" : "reduction(max:acc)";
    int blocked = red_blocked(K, &r);
    char value[200];
    int pf_blocks = g->prefetch_rows && !blocked && !inner_par && K->nred == 1;
    WkLowerMap vexp = {0};
    char vexp_idx[32];
    int nvexp = 0, rc = 0;

    ExpSum es = {0};
    int expsum = blocked && expsum_plan(g, K, &r, order, &es);
    int multi = multi_row_ok(g, K, order, epi, skip, inner_par);
    for (int j = skip; j < K->nloops; j++) {
        char var[16];
        snprintf(var, sizeof var, "i%d", j);
        const char *pragma = j == 0 && outer_par ? "#pragma omp parallel for schedule(static)" : NULL;
        if (multi && j == K->nloops - 1) { /* MULTI_ROWS rows at a time, then the rows left over one by one */
            int64_t S = K->sizes[j], S4 = S / MULTI_ROWS * MULTI_ROWS;
            if (pragma) emit(g, "%s", pragma);
            emit(g, "for (int64_t wk_m = 0; wk_m < %lld; wk_m += %d) {", (long long)S4, MULTI_ROWS);
            g->indent++;
            if (emit_multi_rows(g, K, order, epi, &r, blocked, var) < 0) return -1;
            close_loops(g, 1);
            emit(g, "for (int64_t %s = %lld; %s < %lld; %s++) {", var, (long long)S4, var, (long long)S, var);
            g->indent++;
            continue;
        }
        open_loop(g, var, K->sizes[j], pragma);
    }
    if (emit_nodes(g, order, 0) < 0) return -1;
    emit(g, "%s acc = %s;", ctype(r.acc_t), acc_init(&r));
    if (r.is_max && r.fl) emit(g, "int nanf = 0;");
    for (int j = 0; j < K->nred; j++) {
        char var[16], pragma[160];
        snprintf(var, sizeof var, "r%d", j);
        pragma[0] = '\0';
        int last = j == K->nred - 1;
        if (j == 0 && inner_par)
            snprintf(pragma, sizeof pragma, "#pragma omp parallel for%s schedule(static) %s",
                     last && !blocked ? " simd" : "", clause);
        else if (last && !blocked)
            snprintf(pragma, sizeof pragma, "#pragma omp simd %s", clause);
        if (last && blocked) {
            int64_t S = K->red_sizes[j];
            if (*pragma) emit(g, "%s", pragma);
            emit(g, "for (int64_t rb = 0; rb < %lld; rb += %d) {", (long long)S, RED_BLOCK);
            g->indent++;
            emit(g, "const int64_t re = rb + %d < %lld ? rb + %d : %lld;", RED_BLOCK, (long long)S, RED_BLOCK, (long long)S);
            emit(g, "float accb = 0;");
            if (g->prefetch_rows) emit_prefetch_next_row(g, order, g->S->L->rvar_id[j], "rb", "re");
            if (expsum) {
                emit_expsum(g, &es);
                break;
            }
            nvexp = emit_exp_blocks(g, order, var, &vexp, &rc);
            snprintf(vexp_idx, sizeof vexp_idx, "%s - rb", var);
            emit(g, "#pragma omp simd reduction(+:accb)");
            emit(g, "for (int64_t %s = rb; %s < re; %s++) {", var, var, var);
            g->indent++;
        } else if (last && pf_blocks) { /* blocks only to spread the prefetches */
            int64_t S = K->red_sizes[j];
            emit(g, "for (int64_t rb = 0; rb < %lld; rb += %d) {", (long long)S, RED_BLOCK);
            g->indent++;
            emit(g, "const int64_t re = rb + %d < %lld ? rb + %d : %lld;", RED_BLOCK, (long long)S, RED_BLOCK, (long long)S);
            emit_prefetch_next_row(g, order, g->S->L->rvar_id[j], "rb", "re");
            nvexp = emit_exp_blocks(g, order, var, &vexp, &rc);
            snprintf(vexp_idx, sizeof vexp_idx, "%s - rb", var);
            emit(g, "%s", pragma);
            emit(g, "for (int64_t %s = rb; %s < re; %s++) {", var, var, var);
            g->indent++;
        } else {
            open_loop(g, var, K->red_sizes[j], pragma);
        }
    }
    if (nvexp) {
        g->vexp = &vexp;
        g->vexp_idx = vexp_idx;
    }
    if (!expsum && emit_nodes(g, order, 1) < 0) rc = -1;
    g->vexp = NULL;
    wk_lower_map_free(&vexp);
    if (rc < 0) return -1;
    for (int k = 0; g->keep && k < order->len && !expsum; k++) {
        const void *row = wk_lower_map_get(g->keep, order->data[k]);
        if (row) emit(g, "wk_row%d[r0] = t%d;", (int)(uintptr_t)row - 1, order->data[k]->id);
    }
    WkStr t = {0};
    wk_str_append(&t, "");
    ref(blocked ? r.body->a[0] : r.body, &t);
    if (blocked) {
        if (!expsum) {
            emit(g, "accb += %s;", t.data);
            close_loops(g, 1);
        }
        emit(g, "acc += accb;");
        if (g->lag && emit_lag_phase(g, g->lag, "rb", "re - rb") < 0) rc = -1;
    } else {
        emit_update(g, &r, "acc", "nanf", t.data);
    }
    wk_str_free(&t);
    if (rc < 0) return -1;
    close_loops(g, K->nred + pf_blocks);
    final_value(&r, "acc", "nanf", value, sizeof value);
    emit_store(g, &K->stores[0], value);
    if (emit_epilogue(g, K, epi) < 0) return -1;
    close_loops(g, K->nloops - skip);
    return 0;
}

static void kernel_orders(const WkSchedKernel *K, ExprVec *order, ExprVec *epi) {
    WkLowerMap seen = {0};
    topo(K->stores[0].expr, &seen, order);
    for (int j = 1; j < K->nstores; j++) topo(K->stores[j].expr, &seen, K->kind == WK_SCHED_REDUCTION ? epi : order);
    wk_lower_map_free(&seen);
}

/* ---- row scratch ---------------------------------------------------------
 * In a row group, a costly value that a reduction phase computes for each
 * element of the row (a softmax's exp(x - max), summed) is often needed
 * again by a later pointwise phase over the same row (exp(x - max) / sum).
 * The reduction phase keeps it in a per-thread row array on the stack, in
 * cache, and the later phase reads it there: one exp per element, not two.
 * The two nodes are the same computation with r0 renamed i1 (the schedule
 * gives them different variables, so hash-consing does not unify them). */
enum { SCRATCH_MAX = 4, SCRATCH_MAX_BYTES = 64 * 1024 };

static int sym_same_renamed(const WkSym *a, const WkSym *b, int rv, int iv) {
    if (a->kind != b->kind) return 0;
    if (a->kind == WK_SYM_CONST) return a->value == b->value;
    if (a->kind == WK_SYM_VAR) return (a->var == rv && b->var == iv) || (a->var == b->var && a->var != rv && a->var != iv);
    return sym_same_renamed(a->a, b->a, rv, iv) && sym_same_renamed(a->b, b->b, rv, iv);
}

/* a (reduction phase, over r0) computes b (pointwise phase, over i1) with r0 = i1 */
static int same_renamed(const WkLExpr *a, const WkLExpr *b, int rv, int iv) {
    if (a->op != b->op || a->dtype != b->dtype || a->nargs != b->nargs) return 0;
    switch (a->op) {
    case WK_LX_CONST:
        return a->i == b->i && (a->f == b->f || (a->f != a->f && b->f != b->f));
    case WK_LX_READ:
    case WK_LX_INDEX:
        if ((a->op == WK_LX_READ && a->buf != b->buf) || !sym_same_renamed(a->idx[0], b->idx[0], rv, iv)) return 0;
        break;
    case WK_LX_BOUND:
        if (a->i != b->i) return 0;
        break;
    case WK_LX_LOAD:
    case WK_LX_REDUCE:
        return 0;
    default:
        break;
    }
    for (int k = 0; k < a->nargs; k++)
        if (!same_renamed(a->a[k], b->a[k], rv, iv)) return 0;
    return 1;
}

/* Whether e calls a math function (what is worth keeping instead of redoing). */
static int costly(const WkLExpr *e, WkLowerMap *memo) {
    const void *m = wk_lower_map_get(memo, e);
    if (m) return m == (const void *)2;
    int c = 0;
    switch (e->op) {
    case WK_LX_EXP: case WK_LX_LOG: case WK_LX_TANH: case WK_LX_SIN: case WK_LX_COS: case WK_LX_TAN:
    case WK_LX_ASIN: case WK_LX_ACOS: case WK_LX_ATAN: case WK_LX_SINH: case WK_LX_COSH: case WK_LX_ASINH:
    case WK_LX_ACOSH: case WK_LX_ATANH: case WK_LX_ERF: case WK_LX_ERFC: case WK_LX_ERFINV: case WK_LX_LOG1P:
    case WK_LX_EXPM1: case WK_LX_LOG2: case WK_LX_LOG10: case WK_LX_EXP2: case WK_LX_POW: case WK_LX_ATAN2:
        c = 1;
        break;
    default:
        for (int k = 0; k < e->nargs && !c; k++) c = costly(e->a[k], memo);
    }
    wk_lower_map_put(memo, e, (const void *)(uintptr_t)(c ? 2 : 1));
    return c;
}

static void mark_subtree(const WkLExpr *e, WkLowerMap *covered) {
    if (wk_lower_map_get(covered, e)) return;
    wk_lower_map_put(covered, e, (const void *)1);
    for (int k = 0; k < e->nargs; k++) mark_subtree(e->a[k], covered);
}

/* topo order of a kernel's stores that stops at reused nodes (read from a
 * row, so their operands are not computed again) */
static void topo_stop(const WkLExpr *e, WkLowerMap *seen, const WkLowerMap *stop, ExprVec *out) {
    if (wk_lower_map_get(seen, e)) return;
    wk_lower_map_put(seen, e, e);
    if (!wk_lower_map_get(stop, e))
        for (int k = 0; k < e->nargs; k++) topo_stop(e->a[k], seen, stop, out);
    if (e->op != WK_LX_CONST && e->op != WK_LX_REDUCE) wk_vec_push(out, e);
}

/* Finds the scratch rows of group first..last: fills keep[k - first] and
 * reuse[k - first], rebuilds the orders of the phases that reuse, and
 * returns how many rows (declared as wk_row<n>[sizes[n]] of types[n]). */
static int plan_scratch(Gen *g, int first, int last, ExprVec *orders, WkLowerMap *keep, WkLowerMap *reuse,
                        int64_t *sizes, WkDType *types) {
    const WkSchedule *S = g->S;
    const WkLoopIR *L = S->L;
    int n = 0;
    int64_t bytes = 0;
    const WkLExpr *kept[SCRATCH_MAX];
    WkLowerMap memo = {0};
    for (int m = first + 1; m <= last; m++) {
        const WkSchedKernel *P = &S->kernels[m];
        if (P->kind != WK_SCHED_POINTWISE || P->nloops != 2) continue;
        int iv = L->ivar_id[1], rv = L->rvar_id[0];
        WkLowerMap covered = {0}, dep = {0};
        ExprVec *po = &orders[m - first];
        int found = 0;
        for (int j = po->len - 1; j >= 0 && n < SCRATCH_MAX; j--) {
            const WkLExpr *b = po->data[j];
            if (wk_lower_map_get(&covered, b) || !depends_on_var(b, iv, &dep) || !costly(b, &memo)) continue;
            for (int k = first; k < m; k++) {
                const WkSchedKernel *R = &S->kernels[k];
                if (R->kind != WK_SCHED_REDUCTION || R->nloops != 1 || R->nred != 1 || R->reduce_outer ||
                    R->red_sizes[0] != P->sizes[1])
                    continue;
                const ExprVec *ro = &orders[k - first];
                const WkLExpr *a = NULL;
                for (int q = 0; q < ro->len && !a; q++)
                    if (depends_on_r(g, ro->data[q]) && same_renamed(ro->data[q], b, rv, iv)) a = ro->data[q];
                if (!a) continue;
                int row = -1;
                for (int q = 0; q < n; q++)
                    if (kept[q] == a) row = q;
                int64_t nb = P->sizes[1] * (int64_t)(wk_dtype_size(a->dtype) < 4 ? 4 : wk_dtype_size(a->dtype));
                if (row < 0 && bytes + nb > SCRATCH_MAX_BYTES) continue;
                if (row < 0) {
                    row = n++;
                    kept[row] = a;
                    sizes[row] = P->sizes[1];
                    types[row] = a->dtype;
                    bytes += nb;
                    wk_lower_map_put(&keep[k - first], a, (const void *)(uintptr_t)(row + 1));
                }
                wk_lower_map_put(&reuse[m - first], b, (const void *)(uintptr_t)(row + 1));
                mark_subtree(b, &covered);
                found = 1;
                break;
            }
        }
        wk_lower_map_free(&covered);
        wk_lower_map_free(&dep);
        if (!found) continue;
        ExprVec redo = {0};
        WkLowerMap seen = {0};
        for (int j = 0; j < P->nstores; j++) topo_stop(P->stores[j].expr, &seen, &reuse[m - first], &redo);
        wk_lower_map_free(&seen);
        wk_vec_free(po);
        *po = redo;
    }
    wk_lower_map_free(&memo);
    return n;
}

/* Whether a row group's last phase runs one row late (LagPhase, filled in
 * lp): row i0 - 1's output goes out block by block inside row i0's blocked
 * sum, through wk_stream_scaled_f32, instead of as one burst after it. At
 * one thread a softmax computes its exps on cached rows while memory
 * idles, and the burst of one row's non-temporal stores stalls the core
 * until DRAM drains it; spread over the next row's blocks, the stores drain
 * while the exps compute. 4096 x 4096 float32 softmax, one thread, same
 * values bit for bit: bench/kernels.py 66-71 -> 87-94 % of copy bandwidth
 * (bench/results/2026-12-02-kern16-softmax-prototypes). The same lag
 * through the staging chunk (wk_stream_f32) gained less than half of that
 * (sm_lag.c there), so only the shape
 * the helper covers lags: the last phase's one store is float32, streamed
 * (as gen_pointwise would), and is scratch row * per-row factor or / per-row
 * divisor; the phase before it is a blocked float32 sum over the same row
 * length. With a parallel row loop each thread lags within its own range of
 * rows and flushes its own last row (gen_group). */
static int lag_plan(Gen *g, int first, int last, const ExprVec *orders, const WkLowerMap *reuse,
                    int nrows, const WkDType *row_types, LagPhase *lp) {
    const WkSchedule *S = g->S;
    if (first == last || nrows == 0) return 0;
    const WkSchedKernel *P = &S->kernels[last], *R = &S->kernels[last - 1];
    if (P->kind != WK_SCHED_POINTWISE || P->nloops != 2 || P->nstores != 1 || R->kind != WK_SCHED_REDUCTION ||
        R->reduce_outer || R->nloops != 1 || R->nred != 1 || R->red_sizes[0] != P->sizes[1] ||
        R->sizes[0] != P->sizes[0])
        return 0;
    RedInfo r = red_info(R);
    const WkSchedStore *st = &P->stores[0];
    int iv = S->L->ivar_id[1];
    if (!red_blocked(R, &r) || S->bufs[st->buf].dtype != WK_F32 || !unit_in(st->offset, iv) ||
        P->sizes[1] * 4 > NT_ROW_MAX_BYTES || P->numel * 4 < llc_bytes())
        return 0;
    const WkLExpr *e = st->expr, *src = NULL;
    if (e->dtype != WK_F32 || (e->op != WK_LX_MUL && e->op != WK_LX_DIV)) return 0;
    const WkLowerMap *ru = &reuse[last - first];
    WkLowerMap memo = {0};
    for (int side = 0; side < (e->op == WK_LX_MUL ? 2 : 1) && !src; side++) {
        const WkLExpr *a = e->a[side], *b = e->a[1 - side];
        const void *row = wk_lower_map_get(ru, a);
        if (!row || row_types[(uintptr_t)row - 1] != WK_F32 || b->op == WK_LX_CONST || b->dtype != WK_F32 ||
            depends_on_var(b, iv, &memo))
            continue;
        src = a;
        lp->src_row = (int)(uintptr_t)row - 1;
        lp->scale = b;
    }
    int ok = src != NULL;
    ExprVec outer = {0};
    const ExprVec *po = &orders[last - first];
    for (int k = 0; k < po->len && ok; k++) { /* all else: the factor's per-row operands */
        const WkLExpr *n = po->data[k];
        if (n == e || n == src) continue;
        if (depends_on_var(n, iv, &memo) || n->op == WK_LX_LOAD) ok = 0;
        else wk_vec_push(&outer, n);
        /* a value an earlier phase stores must sit at a place of its own per
         * row: read one row late, row i0's store must not have replaced it */
        for (int q = first; q < last && ok && n->op == WK_LX_READ; q++)
            for (int j = 0; j < S->kernels[q].nstores && ok; j++)
                if (S->kernels[q].stores[j].buf == n->buf &&
                    (!sym_has_var(S->kernels[q].stores[j].offset, S->L->ivar_id[0]) ||
                     !sym_has_var(n->idx[0], S->L->ivar_id[0])))
                    ok = 0;
    }
    wk_lower_map_free(&memo);
    if (!ok) {
        wk_vec_free(&outer);
        return 0;
    }
    lp->K = P;
    lp->reuse = ru;
    lp->outer = outer;
    lp->div = e->op == WK_LX_DIV;
    return 1;
}

/* Kernels first..last (a row group, or one kernel) as one function. A row
 * group opens the shared loop i0 once, threads over it, and runs each
 * kernel's inner nest as a phase in its own scope. */
static int gen_group(Gen *g, int first, int last) {
    const WkSchedule *S = g->S;
    int rc = 0;
    for (int k = first; k <= last; k++) {
        const WkSchedKernel *K = &S->kernels[k];
        emit(g, "/* kernel %d: %s {%s}, %lld x %lld iterations%s */", k,
             K->kind == WK_SCHED_REDUCTION ? "reduction" : "pointwise", K->desc, (long long)K->numel,
             (long long)K->red_numel, first < last ? ", row-fused" : "");
    }
    /* A row group's function is compiled with its loops unrolled (WK_ROW_GROUP,
     * the prelude): a 4096 x 4096 float32 softmax and layer norm on one
     * thread, compute-bound here (their exps, max, copies and staging),
     * measured 5-20 % faster so; the other benchmark kernels did not change,
     * so only these functions pay the compile time. */
    emit(g, "%sstatic int kernel%d(void **bufs) {", first < last ? "WK_ROW_GROUP " : "", first);
    g->indent++;
    emit(g, "int wk_oob = 0; /* set by index checks (BOUND): an index out of range */");
    g->group_last = last;
    ExprVec *orders = wk_xcalloc((size_t)(last - first + 1), sizeof *orders);
    ExprVec *epis = wk_xcalloc((size_t)(last - first + 1), sizeof *epis);
    ExprVec all = {0};
    int64_t work = 0, numel = 0;
    for (int k = first; k <= last; k++) {
        const WkSchedKernel *K = &S->kernels[k];
        kernel_orders(K, &orders[k - first], &epis[k - first]);
        for (int j = 0; j < orders[k - first].len; j++) wk_vec_push(&all, orders[k - first].data[j]);
        for (int j = 0; j < epis[k - first].len; j++) wk_vec_push(&all, epis[k - first].data[j]);
        work += K->numel * (K->red_numel ? K->red_numel : 1);
        numel += K->numel;
    }
    if (numel == 0) {
        emit(g, "(void)bufs; /* empty output */");
    } else if (first == last) {
        const WkSchedKernel *K = &S->kernels[first];
        declare_buffers(g, first, last, &all);
        rc = K->kind == WK_SCHED_REDUCTION ? gen_reduction(g, K, &orders[0], &epis[0], 0)
                                           : gen_pointwise(g, K, &orders[0], 0);
    } else {
        declare_buffers(g, first, last, &all);
        int ng = last - first + 1;
        WkLowerMap *keep = wk_xcalloc((size_t)ng, sizeof *keep), *reuse = wk_xcalloc((size_t)ng, sizeof *reuse);
        int64_t row_sizes[SCRATCH_MAX];
        WkDType row_types[SCRATCH_MAX];
        int nrows = plan_scratch(g, first, last, orders, keep, reuse, row_sizes, row_types);
        LagPhase lag;
        int lagged = lag_plan(g, first, last, orders, reuse, nrows, row_types, &lag);
        int par = work >= g->par_min_work;
        if (lagged) {
            /* Per thread (declared in the parallel region): two of each
             * scratch row, row i0's and row i0 - 1's for the lagged phase,
             * and the thread's own row still to run. Each thread runs a
             * contiguous range of rows (schedule(static)), lagging within
             * it, and flushes its own last row after its range. */
            if (par) emit(g, "#pragma omp parallel");
            emit(g, "{");
            g->indent++;
            for (int q = 0; q < nrows; q++)
                emit(g, "%s wk_rowbuf%d[2][%lld];", ctype(row_types[q]), q, (long long)row_sizes[q]);
            emit(g, "int64_t wk_lag = -1; /* the row whose last phase is still to run */");
        }
        open_loop(g, "i0", S->kernels[first].sizes[0],
                  !par ? NULL : lagged ? "#pragma omp for schedule(static) nowait" : "#pragma omp parallel for schedule(static)");
        for (int q = 0; q < nrows; q++) /* per thread: declared in the parallel loop's body (lagged: in the region) */
            if (lagged) emit(g, "%s *const wk_row%d = wk_rowbuf%d[i0 & 1];", ctype(row_types[q]), q, q);
            else emit(g, "%s wk_row%d[%lld];", ctype(row_types[q]), q, (long long)row_sizes[q]);
        for (int k = first; k <= last - lagged && rc == 0; k++) {
            const WkSchedKernel *K = &S->kernels[k];
            emit(g, "{ /* kernel %d */", k);
            g->indent++;
            g->keep = nrows ? &keep[k - first] : NULL;
            g->reuse = nrows ? &reuse[k - first] : NULL;
            g->prefetch_rows = k > first && work * 4 >= llc_bytes() ? S->kernels[first].sizes[0] : 0;
            g->lag = lagged && k == last - 1 ? &lag : NULL;
            rc = K->kind == WK_SCHED_REDUCTION ? gen_reduction(g, K, &orders[k - first], &epis[k - first], 1)
                                               : gen_pointwise(g, K, &orders[k - first], 1);
            g->keep = g->reuse = NULL;
            g->prefetch_rows = 0;
            g->lag = NULL;
            close_loops(g, 1);
        }
        if (lagged) emit(g, "wk_lag = i0;");
        close_loops(g, 1);
        if (lagged) { /* the last row's */
            char n[32];
            snprintf(n, sizeof n, "%lld", (long long)lag.K->sizes[1]);
            if (rc == 0 && emit_lag_phase(g, &lag, "0", n) < 0) rc = -1;
            emit(g, "wk_stream_fence(); /* this thread's streamed rows, before the region's end */");
            close_loops(g, 1);
            wk_vec_free(&lag.outer);
        }
        for (int k = 0; k < ng; k++) {
            wk_lower_map_free(&keep[k]);
            wk_lower_map_free(&reuse[k]);
        }
        free(keep);
        free(reuse);
    }
    emit(g, "return wk_oob;");
    g->indent--;
    emit(g, "}");
    emit(g, "%s", "");
    for (int k = 0; k <= last - first; k++) {
        wk_vec_free(&orders[k]);
        wk_vec_free(&epis[k]);
    }
    free(orders);
    free(epis);
    wk_vec_free(&all);
    return rc;
}

/* exp over a block of float32 values in place (a float32 reduction's
 * exp(x - max), computed for a RED_BLOCK block before the loop that sums
 * it). With AVX2 and FMA: n = round(x / ln 2), r = x - n ln 2 (ln 2 in two
 * parts, Cody-Waite; the first product is exact under FMA), e^r by a degree-6
 * polynomial fitted here for relative error < 4e-9 on |r| <= ln 2 / 2, times
 * 2^n made in the exponent bits: within 0.89 ulp of exp over all floats
 * (libmvec's expf: 2.6). The polynomial runs in Horner form down to its
 * constant term (6 FMAs; q r^2 + r + 1 took 5, a multiply and an add) and the
 * constants are negated in the text (gcc negated n with an xor per vector):
 * the exp is bound by Zen 3's two FMA/multiply pipes, and this form has one
 * operation less there and two less in all; softmax at one thread gained
 * ~8 % (bench/results/2026-12-03-sm21-softmax). Vectors whose lanes are all in |x| <= 87 (n in
 * -126..126) take the short path; others clamp x to [-110, 100] and scale by
 * 2^(n/2) twice (denormal results round once, large ones overflow to inf),
 * NaN lanes return x + x. Inlined vector code, not a `declare simd` clone: a
 * call per vector (clone or libmvec) measured ~0.48 ns per element here,
 * this loop ~0.3. Without AVX2/FMA: expf, through libmvec when vectorised. */
#define EXPF_BLOCK_TEXT \
    "#if defined(__AVX2__) && defined(__FMA__) && (defined(__GNUC__) || defined(__clang__))\n" \
    "/* vector types and the compilers' builtins, not <immintrin.h> (see wk_stream_f32) */\n" \
    "typedef float wk_v8f __attribute__((vector_size(32)));\n" \
    "typedef int wk_v8i __attribute__((vector_size(32)));\n" \
    "typedef float wk_v8f_u __attribute__((vector_size(32), aligned(4), may_alias));\n" \
    "#define WK_V8(c) ((wk_v8f){c, c, c, c, c, c, c, c})\n" \
    "#define WK_FMA(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))\n" \
    "static inline wk_v8f wk_expf_poly8(wk_v8f r) {\n" \
    "    wk_v8f q = WK_FMA(WK_V8(0x1.6a244cp-10f), r, WK_V8(0x1.1239d4p-7f));\n" \
    "    q = WK_FMA(q, r, WK_V8(0x1.5558f2p-5f));\n" \
    "    q = WK_FMA(q, r, WK_V8(0x1.555492p-3f));\n" \
    "    q = WK_FMA(q, r, WK_V8(0x1.fffffcp-2f));\n" \
    "    q = WK_FMA(q, r, WK_V8(1.0f));\n" \
    "    return WK_FMA(q, r, WK_V8(1.0f));\n" \
    "}\n" \
    "static inline wk_v8f wk_expf8(wk_v8f x) {\n" \
    "    const wk_v8f ln2hi = WK_V8(0x1.62e43p-1f), ln2lo = WK_V8(-0x1.05c61p-29f), log2e = WK_V8(0x1.715476p+0f);\n" \
    "    wk_v8f ax = (wk_v8f)((wk_v8i)x & 0x7fffffff);\n" \
    "    if (__builtin_ia32_movmskps256((wk_v8f)(ax <= WK_V8(87.0f))) == 0xff) {\n" \
    "        /* 1.5 * 2^23: t's low bits hold n; (t << 23) is n in the exponent field, and\n" \
    "           e^r (0.7..1.42) times 2^n stays normal here (n = -126 only with r > 0),\n" \
    "           so an integer add scales it: exact, off the multiply pipes */\n" \
    "        const wk_v8f sh = WK_V8(0x1.8p23f);\n" \
    "        wk_v8f t = WK_FMA(x, log2e, sh), n = t - sh;\n" \
    "        wk_v8f r = WK_FMA(n, -ln2lo, WK_FMA(n, -ln2hi, x));\n" \
    "        return (wk_v8f)((wk_v8i)wk_expf_poly8(r) + ((wk_v8i)t << 23));\n" \
    "    }\n" \
    "    /* max, then min, with x first: a NaN lane clamps to a number (replaced below) */\n" \
    "    wk_v8f xc = __builtin_ia32_minps256(__builtin_ia32_maxps256(x, WK_V8(-110.0f)), WK_V8(100.0f));\n" \
    "    wk_v8f n = __builtin_ia32_roundps256(xc * log2e, 8); /* to nearest, no exceptions */\n" \
    "    wk_v8f r = WK_FMA(n, -ln2lo, WK_FMA(n, -ln2hi, xc));\n" \
    "    wk_v8i ni = __builtin_convertvector(n, wk_v8i), n1 = ni >> 1, n2 = ni - n1;\n" \
    "    wk_v8f s1 = (wk_v8f)((n1 + 127) << 23), s2 = (wk_v8f)((n2 + 127) << 23);\n" \
    "    wk_v8f y = wk_expf_poly8(r) * s1 * s2;\n" \
    "    wk_v8i nan = x != x;\n" \
    "    return (wk_v8f)(((wk_v8i)(x + x) & nan) | ((wk_v8i)y & ~nan));\n" \
    "}\n" \
    "/* exp(src - c) over n elements, into dst unless NULL, and their sum: 8\n" \
    "   lanes, then the lanes in turn (gen_reduction, expsum_plan); the tail\n" \
    "   through a padded vector, its padding left out of the sum */\n" \
    "static inline float wk_expsum_f32(float *dst, const float *src, float c, int64_t n) {\n" \
    "    const wk_v8f c8 = WK_V8(c);\n" \
    "    wk_v8f s8 = WK_V8(0.0f);\n" \
    "    int64_t k = 0;\n" \
    "    for (; k + 8 <= n; k += 8) {\n" \
    "        wk_v8f v = wk_expf8(*(const wk_v8f_u *)(src + k) - c8);\n" \
    "        if (dst) *(wk_v8f_u *)(dst + k) = v;\n" \
    "        s8 += v;\n" \
    "    }\n" \
    "    if (k < n) {\n" \
    "        wk_v8f v = WK_V8(0.0f);\n" \
    "        for (int64_t q = k; q < n; q++) v[q - k] = src[q] - c;\n" \
    "        v = wk_expf8(v);\n" \
    "        for (int64_t q = k; q < n; q++) {\n" \
    "            if (dst) dst[q] = v[q - k];\n" \
    "            s8[q - k] += v[q - k];\n" \
    "        }\n" \
    "    }\n" \
    "    float s = 0;\n" \
    "    for (int q = 0; q < 8; q++) s += s8[q];\n" \
    "    return s;\n" \
    "}\n" \
    "/* the tail goes through a padded vector too: every element of a row gets\n" \
    "   the same function, whatever its position */\n" \
    "static inline void wk_expf_block(float *a, int64_t n) {\n" \
    "    int64_t k = 0;\n" \
    "    for (; k + 8 <= n; k += 8) *(wk_v8f_u *)(a + k) = wk_expf8(*(const wk_v8f_u *)(a + k));\n" \
    "    if (k < n) {\n" \
    "        wk_v8f v = WK_V8(0.0f);\n" \
    "        for (int64_t q = k; q < n; q++) v[q - k] = a[q];\n" \
    "        v = wk_expf8(v);\n" \
    "        for (int64_t q = k; q < n; q++) a[q] = v[q - k];\n" \
    "    }\n" \
    "}\n" \
    "#else\n" \
    "static inline void wk_expf_block(float *a, int64_t n) {\n" \
    "    _Pragma(\"omp simd\")\n" \
    "    for (int64_t k = 0; k < n; k++) a[k] = expf(a[k]);\n" \
    "}\n" \
    "static inline float wk_expsum_f32(float *dst, const float *src, float c, int64_t n) {\n" \
    "    float s = 0;\n" \
    "    if (dst) {\n" \
    "        _Pragma(\"omp simd reduction(+:s)\")\n" \
    "        for (int64_t k = 0; k < n; k++) s += dst[k] = expf(src[k] - c);\n" \
    "    } else {\n" \
    "        _Pragma(\"omp simd reduction(+:s)\")\n" \
    "        for (int64_t k = 0; k < n; k++) s += expf(src[k] - c);\n" \
    "    }\n" \
    "    return s;\n" \
    "}\n" \
    "#endif\n"

/* Guarded: a plan (pipeline.c) puts several graphs' code in one unit. */
static const char prelude[] =
    "#ifndef WICK_PRELUDE\n"
    "#define WICK_PRELUDE\n"
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
    "#pragma omp declare simd notinbranch\n"
    "float sinf(float);\n"
    "#pragma omp declare simd notinbranch\n"
    "float cosf(float);\n"
    "#pragma omp declare simd notinbranch\n"
    "double sin(double);\n"
    "#pragma omp declare simd notinbranch\n"
    "double cos(double);\n"
    "#if __GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35)\n"
    "/* libmvec from glibc 2.35 on */\n"
    "/* (the parameter is not called f: f##f would paste two arguments, erferf) */\n"
    "#define WK_SIMD2(name) _Pragma(\"omp declare simd notinbranch\") float name##f(float); \\\n"
    "    _Pragma(\"omp declare simd notinbranch\") double name(double);\n"
    "WK_SIMD2(tan) WK_SIMD2(asin) WK_SIMD2(acos) WK_SIMD2(atan) WK_SIMD2(sinh) WK_SIMD2(cosh)\n"
    "WK_SIMD2(asinh) WK_SIMD2(acosh) WK_SIMD2(atanh) WK_SIMD2(erf) WK_SIMD2(erfc) WK_SIMD2(log1p)\n"
    "WK_SIMD2(expm1) WK_SIMD2(log2) WK_SIMD2(log10) WK_SIMD2(exp2)\n"
    "#endif\n"
    "#endif\n"
    "\n"
    "#include <string.h>\n"
    "/* a row group's function: loops unrolled (gcc; see gen_group) */\n"
    "#if defined(__GNUC__) && !defined(__clang__)\n"
    "#define WK_ROW_GROUP __attribute__((optimize(\"unroll-loops\")))\n"
    "#else\n"
    "#define WK_ROW_GROUP\n"
    "#endif\n"
    WK_CGEN_C_BF16_TEXT
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
    "\n"
    "/* integer division with a non-zero divisor (the lowering guarantees it);\n"
    "   -1 is special-cased so INT64_MIN / -1 wraps instead of trapping */\n"
    "static inline int64_t wk_ifmod(int64_t a, int64_t b) { return b == -1 ? 0 : a % b; }\n"
    "static inline int64_t wk_irem(int64_t a, int64_t b) {\n"
    "    int64_t r = b == -1 ? 0 : a % b;\n"
    "    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;\n"
    "}\n"
    "static inline int64_t wk_ifloordiv(int64_t a, int64_t b) {\n"
    "    if (b == -1) return (int64_t)(0 - (uint64_t)a);\n"
    "    int64_t q = a / b;\n"
    "    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n"
    "}\n"
    "/* torch's floating floor division and remainder (div_floor, remainder) */\n"
    "#define WK_FLOORDIV(T, S) \\\n"
    "static inline T wk_floordiv##S(T a, T b) { \\\n"
    "    if (b == 0) return a / b; \\\n"
    "    T mod = fmod##S(a, b); \\\n"
    "    T div = (a - mod) / b; \\\n"
    "    if (mod != 0 && (b < 0) != (mod < 0)) div -= 1; \\\n"
    "    if (div == 0) return copysign##S(0, a / b); \\\n"
    "    T fl = floor##S(div); \\\n"
    "    if (div - fl > (T)0.5) fl += 1; \\\n"
    "    return fl; \\\n"
    "} \\\n"
    "static inline T wk_rem##S(T a, T b) { \\\n"
    "    T mod = fmod##S(a, b); \\\n"
    "    if (mod != 0 && (b < 0) != (mod < 0)) mod += b; \\\n"
    "    return mod; \\\n"
    "}\n"
    "WK_FLOORDIV(float, f)\n"
    "WK_FLOORDIV(double, )\n"
    "/* erfinv: a rational first guess refined by Newton steps on erf */\n"
    "static inline double wk_erfinv(double y) {\n"
    "    if (!(y > -1 && y < 1)) return y == 1 ? INFINITY : y == -1 ? -INFINITY : NAN;\n"
    "    double w = -log((1 - y) * (1 + y)), x;\n"
    "    if (w < 5) {\n"
    "        w -= 2.5;\n"
    "        x = 2.81022636e-08; x = 3.43273939e-07 + x * w; x = -3.5233877e-06 + x * w;\n"
    "        x = -4.39150654e-06 + x * w; x = 0.00021858087 + x * w; x = -0.00125372503 + x * w;\n"
    "        x = -0.00417768164 + x * w; x = 0.246640727 + x * w; x = 1.50140941 + x * w;\n"
    "    } else {\n"
    "        w = sqrt(w) - 3;\n"
    "        x = -0.000200214257; x = 0.000100950558 + x * w; x = 0.00134934322 + x * w;\n"
    "        x = -0.00367342844 + x * w; x = 0.00573950773 + x * w; x = -0.0076224613 + x * w;\n"
    "        x = 0.00943887047 + x * w; x = 1.00167406 + x * w; x = 2.83297682 + x * w;\n"
    "    }\n"
    "    x *= y;\n"
    "    for (int k = 0; k < 2; k++)\n"
    "        x -= (erf(x) - y) / (1.1283791670955126 * exp(-x * x));\n"
    "    return x;\n"
    "}\n"
    "static inline float wk_erfinvf(float y) { return (float)wk_erfinv((double)y); }\n"
    "/* a finished piece of a large output, written around the caches (no read\n"
    "   for ownership, no eviction of the rows being read); the fence orders\n"
    "   the weakly ordered stores before other threads read them */\n"
    "#if defined(__AVX__) && (defined(__GNUC__) || defined(__clang__))\n"
    "/* the compilers' builtins, not <immintrin.h>: parsing that header costs\n"
    "   ~0.4 s of CPU per compiled part, more than a typical graph's kernels */\n"
    "typedef float wk_v8sf __attribute__((vector_size(32)));\n"
    "typedef float wk_v8sf_u __attribute__((vector_size(32), aligned(4), may_alias));\n"
    "static inline void wk_nt_store8(float *dst, wk_v8sf v) {\n"
    "#if defined(__clang__)\n"
    "    __builtin_nontemporal_store(v, (wk_v8sf *)dst);\n"
    "#else\n"
    "    __builtin_ia32_movntps256(dst, v);\n"
    "#endif\n"
    "}\n"
    "static inline void wk_stream_f32(float *dst, const float *src, int64_t n) {\n"
    "    int64_t k = 0;\n"
    "    for (; k < n && ((uintptr_t)(dst + k) & 31); k++) dst[k] = src[k];\n"
    "    for (; k + 8 <= n; k += 8) {\n"
    "        wk_v8sf v = *(const wk_v8sf_u *)(src + k);\n"
    "        wk_nt_store8(dst + k, v);\n"
    "    }\n"
    "    for (; k < n; k++) dst[k] = src[k];\n"
    "}\n"
    "/* src * scale streamed straight from the vector loop, with no staging\n"
    "   chunk (a lagged softmax row, gen_group); the same product as a\n"
    "   scalar loop's */\n"
    "static inline void wk_stream_scaled_f32(float *dst, const float *src, float scale, int64_t n) {\n"
    "    int64_t k = 0;\n"
    "    for (; k < n && ((uintptr_t)(dst + k) & 31); k++) dst[k] = src[k] * scale;\n"
    "    const wk_v8sf s8 = {scale, scale, scale, scale, scale, scale, scale, scale};\n"
    "    for (; k + 8 <= n; k += 8) {\n"
    "        wk_v8sf v = *(const wk_v8sf_u *)(src + k) * s8;\n"
    "        wk_nt_store8(dst + k, v);\n"
    "    }\n"
    "    for (; k < n; k++) dst[k] = src[k] * scale;\n"
    "}\n"
    "static inline void wk_stream_fence(void) { __builtin_ia32_sfence(); }\n"
    "#else\n"
    "static inline void wk_stream_f32(float *dst, const float *src, int64_t n) { memcpy(dst, src, (size_t)n * sizeof *dst); }\n"
    "static inline void wk_stream_scaled_f32(float *dst, const float *src, float scale, int64_t n) {\n"
    "    for (int64_t k = 0; k < n; k++) dst[k] = src[k] * scale;\n"
    "}\n"
    "static inline void wk_stream_fence(void) {}\n"
    "#endif\n"
    EXPF_BLOCK_TEXT
    "#endif\n"
    "\n";

/* Set before the graphs of a process compile, read while generating; the
 * runtime sets it once, from the thread count it runs kernels with. */
static int cgen_threads;

void wk_cgen_c_set_threads(int n) { __atomic_store_n(&cgen_threads, n, __ATOMIC_RELAXED); }

int wk_cgen_c(const WkSchedule *S, const char *entry, WkStr *out) {
    /* ctype() has no answer for complex: refused here, never printed as NULL */
    for (int b = 0; b < S->L->nbufs; b++)
        if (!ctype(S->L->bufs[b].dtype)) {
            wk_error_set("C codegen: buffer v%d has dtype %s, which no kernel computes", b,
                         wk_dtype_name(S->L->bufs[b].dtype));
            return -1;
        }
    Gen g = {S, out, 0, NULL, S->L->nexprs};
    /* One thread: no parallel regions at all. libgomp makes a team and ends
     * it at a barrier whose release is a futex wake (a system call) even for
     * a team of one: ~20 such regions in a small training step. */
    g.par_min_work = __atomic_load_n(&cgen_threads, __ATOMIC_RELAXED) == 1 ? INT64_MAX : PAR_MIN_WORK;
    g.dep_r = wk_xmalloc(sizeof(int) * (size_t)(g.nexprs + 1));
    for (int k = 0; k < g.nexprs; k++) g.dep_r[k] = -1;
    int rc = 0;
    wk_str_printf(out, "/* wick: generated C for one graph (%d kernels).\n", S->nkernels);
    wk_str_append(out, " * Build: cc " WK_CGEN_C_CFLAGS " src.c -o lib.so " WK_CGEN_C_LIBS "\n");
    wk_str_append(out, " * (correct without -fopenmp too: serial, no libmvec)\n");
    wk_str_append(out, " * wick-cflags: " WK_CGEN_C_EXTRA "\n */\n");
    wk_str_append(out, prelude);
    for (int k = 0; k < S->nkernels && rc == 0;) {
        int last = k;
        while (last + 1 < S->nkernels && S->kernels[last + 1].group == k) last++;
        rc = gen_group(&g, k, last);
        k = last + 1;
    }
    if (rc == 0) {
        /* nonzero: a kernel met an index out of range (its outputs are partial) */
        emit(&g, "__attribute__((visibility(\"default\"))) int %s(void **buffers) {", entry);
        g.indent++;
        if (S->nkernels == 0) emit(&g, "(void)buffers;");
        for (int k = 0; k < S->nkernels; k++)
            if (S->kernels[k].group == k) emit(&g, "if (kernel%d(buffers)) return 1;", k);
        emit(&g, "return 0;");
        g.indent--;
        emit(&g, "}");
    }
    free(g.dep_r);
    return rc;
}
