/* cgen_triton.c — the Triton backend: the schedule's kernels as @triton.jit
 * functions in one Python module per graph (the C backend's sibling: same
 * loop IR, same schedule, same buffer plan).
 *
 * Kernel shapes. Every kernel is a grid of programs over its flattened
 * output space ("x", XBLOCK elements per program, masked at the ragged end):
 *   - a pointwise kernel is one-dimensional: each x element computes its
 *     expression DAG and stores;
 *   - a reduction kernel is two-dimensional, [XBLOCK, RBLOCK]: the reduced
 *     dims flattened on the r axis. Persistent (one block holds the whole
 *     reduced extent, RBLOCK >= it) when that extent is small, looped
 *     (an [XBLOCK, RBLOCK] accumulator over chunks, reduced at the end) when
 *     large. Its epilogue stores are computed on [XBLOCK, 1] after it;
 *   - a row group of the schedule (kernels sharing loop i0: softmax,
 *     layer_norm) is one kernel whose programs own XBLOCK rows and run the
 *     group's kernels as phases; a phase reads what an earlier phase stored
 *     from registers where the address of each lane is the same (the same
 *     offset, or offsets over different loop variables bound to the same
 *     block index: a layer norm's reduction over r0 reading the residual sum
 *     its first phase stored over i1), so a softmax row or a residual sum is
 *     read from memory once when the group is persistent. Any other read of
 *     what the function stored (a looped group's earlier phase, rows.c
 *     guarantees the same row) goes through memory after tl.debug_barrier(),
 *     which makes the program's stores visible to all its threads.
 * Index variables are never materialised: each is printed as its
 * definition over xindex/rindex, so identical loads have identical text and
 * are shared between the phases of a persistent group.
 * Values follow the C backend: 16-bit floats are loaded and stored as 16
 * bits and computed in float32; float32 sums accumulate in float32 (tree
 * reductions per block, as PyTorch's CUDA kernels do) even where the loop IR
 * asks for a float64 accumulator for the CPU's sequential loops.
 * Static shapes: every size is a literal. Offsets use int32 unless some
 * buffer or iteration space reaches 2^31 elements.
 *
 * Requires: a checked schedule (READs only, kernels in order).
 * Provides: the kernels' source and their launch descriptions (program.h).
 */
#include "cgen.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Largest reduced extent (or row, for a row group) held in one block. */
enum { PERSIST_MAX = 4096 };

/* Most reductions sharing one function (reduction_siblings). */
enum { MAX_SIBLINGS = 4 };

typedef struct {
    int buf;
    const WkSym *offset;
    const char *offset_text; /* the offset as emitted (interned): the address per lane */
    char var[48];       /* the stored value, in memory dtype */
    WkDType dtype;      /* the buffer's dtype */
} StoreRec;

typedef struct {
    const WkSchedule *S;
    WkStr *o;
    int indent;
    int nexprs;
    char **xname;       /* [nexprs] function-scope names (nodes not on the r axis) */
    char **rname;       /* [nexprs] r-axis names, valid in the current phase/loop */
    signed char *raxis; /* [nexprs] the axes a node's value varies along (expr_axes), -1 unknown */
    const char **vtext; /* by pool var: the variable's definition text, NULL if not bound */
    signed char *vaxis; /* by pool var: 1 x axis, 2 r axis, 0 neither (unbound, or one value per kernel) */
    int nvars;
    int phase;
    const char *rindex; /* current phase's r index and mask text */
    const char *rmask;
    int in_loop;
    int loop_loads_shared; /* siblings' loop: one load per address text in each iteration */
    int barrier;        /* current phase reads earlier stores through memory */
    int wide;           /* int64 offsets */
    int two_d;          /* the function is [XBLOCK, RBLOCK] */
    WkVec(StoreRec) stores;
    WkVec(char *) load_keys; /* persistent groups: load text -> name (load_names) */
    WkVec(char *) load_names;
    WkVec(char *) interned;
    unsigned char *stored_here; /* [nbufs] buffer stored by this function */
    unsigned char *unsynced;    /* [nbufs] stored since the function's last tl.debug_barrier() */
    int64_t split_chunk;        /* split reduction, partials kernel: r elements per program */
    int split_n;                /* programs per output (partials per output) */
    int split_column;           /* the partials kernel of a split column reduction: [XBLOCK, 1] partials */
    char maskbuf[160];
} TGen;

static void emit(TGen *g, const char *fmt, ...) WK_PRINTF(2, 3);
static void emit(TGen *g, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *line = wk_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(line, (size_t)n + 1, fmt, ap);
    va_end(ap);
    for (int k = 0; k < g->indent; k++) wk_str_append(g->o, "    ");
    wk_str_append(g->o, line);
    wk_str_append(g->o, "\n");
    free(line);
}

/* float64 that only the loop IR's CPU-minded decompositions introduced
 * (layer_norm's and var's statistics, float32 sums) is computed in float32
 * on the GPU, as PyTorch's CUDA kernels do: set per graph when no graph value
 * is float64 (a program that asks for float64 gets it). */
static __thread int demote_f64;

/* The Triton type values of dt are computed in (16-bit floats: float32). */
static const char *tl_compute(WkDType dt) {
    switch (dt) {
    case WK_BOOL: return "tl.int1";
    case WK_U8: return "tl.uint8";
    case WK_I8: return "tl.int8";
    case WK_I16: return "tl.int16";
    case WK_I32: return "tl.int32";
    case WK_I64: return "tl.int64";
    case WK_F16: case WK_BF16: case WK_F32: return "tl.float32";
    case WK_F64: return demote_f64 ? "tl.float32" : "tl.float64";
    default: return NULL;
    }
}

static const char *tl_memory(WkDType dt) {
    return dt == WK_F16 ? "tl.float16" : dt == WK_BF16 ? "tl.bfloat16" : tl_compute(dt);
}

static int is16(WkDType dt) { return dt == WK_F16 || dt == WK_BF16; }

/* ---- index expressions, in Python syntax -------------------------------- */

static int sym_nonneg(const WkSym *s) {
    switch (s->kind) {
    case WK_SYM_CONST: return s->value >= 0;
    case WK_SYM_VAR: return 1; /* loop indices */
    case WK_SYM_ADD: case WK_SYM_MUL: case WK_SYM_MIN: return sym_nonneg(s->a) && sym_nonneg(s->b);
    case WK_SYM_MAX: return sym_nonneg(s->a) || sym_nonneg(s->b);
    case WK_SYM_FLOORDIV: case WK_SYM_MOD: return sym_nonneg(s->a);
    }
    return 0;
}

static int sym_py(TGen *g, const WkSym *s, WkStr *o) {
    WkStr a = {0}, b = {0};
    int rc = 0;
    switch (s->kind) {
    case WK_SYM_CONST:
        if (s->value < 0) wk_str_printf(o, "(%lld)", (long long)s->value);
        else wk_str_printf(o, "%lld", (long long)s->value);
        return 0;
    case WK_SYM_VAR:
        if (s->var >= g->nvars || !g->vtext[s->var]) {
            wk_error_set("Triton codegen: index variable %s is not bound", wk_sym_var_name(g->S->L->syms, s->var));
            return -1;
        }
        wk_str_append(o, g->vtext[s->var]);
        return 0;
    default: break;
    }
    wk_str_append(&a, "");
    wk_str_append(&b, "");
    if (sym_py(g, s->a, &a) < 0 || sym_py(g, s->b, &b) < 0) {
        rc = -1;
        goto done;
    }
    switch (s->kind) {
    case WK_SYM_ADD: wk_str_printf(o, "(%s + %s)", a.data, b.data); break;
    case WK_SYM_MUL: wk_str_printf(o, "(%s * %s)", a.data, b.data); break;
    /* Triton's integer // and % truncate like C; floor them for negatives */
    case WK_SYM_FLOORDIV:
        if (sym_nonneg(s->a)) wk_str_printf(o, "(%s // %s)", a.data, b.data);
        else wk_str_printf(o, "tl.where(%s %% %s < 0, %s // %s - 1, %s // %s)", a.data, b.data, a.data, b.data,
                           a.data, b.data);
        break;
    case WK_SYM_MOD:
        if (sym_nonneg(s->a)) wk_str_printf(o, "(%s %% %s)", a.data, b.data);
        else wk_str_printf(o, "tl.where(%s %% %s < 0, %s %% %s + %s, %s %% %s)", a.data, b.data, a.data, b.data,
                           b.data, a.data, b.data);
        break;
    case WK_SYM_MIN: wk_str_printf(o, "tl.minimum(%s, %s)", a.data, b.data); break;
    case WK_SYM_MAX: wk_str_printf(o, "tl.maximum(%s, %s)", a.data, b.data); break;
    default: break;
    }
done:
    wk_str_free(&a);
    wk_str_free(&b);
    return rc;
}

/* Bit 1: the sym uses an x-axis variable; bit 2: an r-axis one. */
static int sym_axes(const TGen *g, const WkSym *s) {
    if (s->kind == WK_SYM_CONST) return 0;
    if (s->kind == WK_SYM_VAR) return s->var < g->nvars ? g->vaxis[s->var] : 0;
    return sym_axes(g, s->a) | sym_axes(g, s->b);
}

/* The axes (1 x, 2 r) e's value varies along; 0: one value for the whole
 * kernel (a load at a constant offset, a constant). */
static int expr_axes(TGen *g, const WkLExpr *e) {
    if (g->raxis[e->id] >= 0) return g->raxis[e->id];
    int d = 0;
    if (e->op == WK_LX_READ || e->op == WK_LX_INDEX) d = sym_axes(g, e->idx[0]);
    for (int k = 0; k < e->nargs && d != 3; k++) d |= expr_axes(g, e->a[k]);
    g->raxis[e->id] = (signed char)d;
    return d;
}

static int on_r(TGen *g, const WkLExpr *e) { return (expr_axes(g, e) & 2) != 0; }

/* ---- expressions ------------------------------------------------------- */

static const char *intern(TGen *g, const char *text) {
    char *c = wk_xstrdup(text);
    wk_vec_push(&g->interned, c);
    return c;
}

/* The store made earlier in this function whose value (a variable in
 * registers) is what `read` loads in every lane, or NULL: the same offset,
 * or one whose text under the current bindings is the same address. */
static const StoreRec *held_store(TGen *g, const WkLExpr *read) {
    const StoreRec *same = NULL;
    for (int k = 0; k < g->stores.len && !same; k++)
        if (g->stores.data[k].buf == read->buf && g->stores.data[k].offset == read->idx[0]) same = &g->stores.data[k];
    if (same || read->nargs) return same;
    WkStr off = {0};
    wk_str_append(&off, "");
    if (sym_py(g, read->idx[0], &off) == 0)
        for (int k = 0; k < g->stores.len && !same; k++)
            if (g->stores.data[k].buf == read->buf && !strcmp(g->stores.data[k].offset_text, off.data))
                same = &g->stores.data[k];
    wk_str_free(&off);
    return same;
}

static const char *load_mask(TGen *g, int axes) {
    if (!g->two_d) return axes ? "xmask" : NULL;
    if (axes == 1) return "xmask";
    if (axes == 2) return g->rmask;
    if (axes == 3) {
        snprintf(g->maskbuf, sizeof g->maskbuf, "xmask & %s", g->rmask);
        return g->maskbuf;
    }
    return NULL;
}

static const char *ref(TGen *g, const WkLExpr *e);

static const char *libm(WkLxOp op) {
    switch (op) {
    case WK_LX_EXP: return "tl.exp";
    case WK_LX_LOG: return "tl.log";
    case WK_LX_TANH: return "libdevice.tanh";
    case WK_LX_SIN: return "libdevice.sin";
    case WK_LX_COS: return "libdevice.cos";
    case WK_LX_TAN: return "libdevice.tan";
    case WK_LX_ASIN: return "libdevice.asin";
    case WK_LX_ACOS: return "libdevice.acos";
    case WK_LX_ATAN: return "libdevice.atan";
    case WK_LX_SINH: return "libdevice.sinh";
    case WK_LX_COSH: return "libdevice.cosh";
    case WK_LX_ASINH: return "libdevice.asinh";
    case WK_LX_ACOSH: return "libdevice.acosh";
    case WK_LX_ATANH: return "libdevice.atanh";
    case WK_LX_ERF: return "libdevice.erf";
    case WK_LX_ERFC: return "libdevice.erfc";
    case WK_LX_ERFINV: return "libdevice.erfinv";
    case WK_LX_LOG1P: return "libdevice.log1p";
    case WK_LX_EXPM1: return "libdevice.expm1";
    case WK_LX_LOG2: return "libdevice.log2";
    case WK_LX_LOG10: return "libdevice.log10";
    case WK_LX_EXP2: return "libdevice.exp2";
    case WK_LX_FLOOR: return "tl.floor";
    case WK_LX_CEIL: return "tl.ceil";
    case WK_LX_TRUNC: return "libdevice.trunc";
    case WK_LX_ROUND: return "libdevice.nearbyint";
    default: return NULL;
    }
}

/* The indirect variables (lower.h) of a READ's or INDEX's index, named
 * after the values of their expressions (its operands) here. */
static int bind_indirect(TGen *g, const WkLExpr *e) {
    for (int k = 0; k < e->nargs; k++) {
        int var = wk_lower_indirect(g->S->L, e->a[k])->var;
        if (var >= g->nvars) {
            wk_error_set("Triton codegen: indirect variable out of the table");
            return -1;
        }
        g->vtext[var] = ref(g, e->a[k]);
        if (!g->vtext[var]) return -1;
        /* an index that is one value for the whole kernel (x[i[0]]) makes a
         * scalar address: a block mask on it is an error in Triton, so its
         * load takes none (the index is clamped into bounds already) */
        int axes = expr_axes(g, e->a[k]);
        g->vaxis[var] = (signed char)(axes & 2 ? 3 : axes ? 1 : 0);
    }
    return 0;
}

/* The text of e's value (operands already named). -1 with wk_error set. */
static int expr_text(TGen *g, const WkLExpr *e, WkStr *s) {
    const char *a = e->nargs > 0 ? ref(g, e->a[0]) : NULL;
    const char *b = e->nargs > 1 ? ref(g, e->a[1]) : NULL;
    const char *c = e->nargs > 2 ? ref(g, e->a[2]) : NULL;
    if ((e->nargs > 0 && !a) || (e->nargs > 1 && !b) || (e->nargs > 2 && !c)) return -1;
    int fl = wk_dtype_is_float(e->dtype);
    int f32 = e->dtype != WK_F64 || demote_f64;
    const char *T = tl_compute(e->dtype);
    switch (e->op) {
    case WK_LX_READ: {
        /* a 16-bit store's variable holds the rounded value, as memory would */
        const StoreRec *r = held_store(g, e);
        if (r) {
            wk_str_printf(s, is16(r->dtype) ? "%s.to(tl.float32)" : "%s", r->var);
            return 0;
        }
        if (g->stored_here[e->buf] && !g->barrier) {
            wk_error_set("Triton codegen: a kernel reads buffer b%d, which it stores, at another offset", e->buf);
            return -1;
        }
        if (bind_indirect(g, e) < 0) return -1;
        WkStr off = {0};
        wk_str_append(&off, "");
        if (sym_py(g, e->idx[0], &off) < 0) {
            wk_str_free(&off);
            return -1;
        }
        const char *mask = load_mask(g, sym_axes(g, e->idx[0]));
        if (mask) wk_str_printf(s, "tl.load(b%d + %s, mask=%s, other=0)", e->buf, off.data, mask);
        else wk_str_printf(s, "tl.load(b%d + %s)", e->buf, off.data);
        if (is16(e->dtype)) wk_str_append(s, ".to(tl.float32)");
        wk_str_free(&off);
        return 0;
    }
    case WK_LX_INDEX: {
        if (bind_indirect(g, e) < 0) return -1;
        WkStr v = {0};
        wk_str_append(&v, "");
        if (sym_py(g, e->idx[0], &v) < 0) {
            wk_str_free(&v);
            return -1;
        }
        if (sym_axes(g, e->idx[0])) wk_str_printf(s, "(%s).to(tl.int64)", v.data);
        else wk_str_printf(s, "tl.full([], %s, tl.int64)", v.data);
        wk_str_free(&v);
        return 0;
    }
    case WK_LX_CAST:
        if (e->dtype == WK_BOOL) wk_str_printf(s, "(%s != 0)", a);
        /* a cast to a 16-bit float rounds, so .to(bfloat16).float() is not the identity.
         * From an integer, bool or float64 it rounds to float32 first, as PyTorch
         * does (its 16-bit types are built from a float): one rounding straight to
         * 16 bits can differ above 2^24, and Triton's interpreter turns anything
         * but a 16/32-bit float into bfloat16 bits unconverted */
        else if (is16(e->dtype) && e->a[0]->dtype != WK_F32 && !is16(e->a[0]->dtype))
            wk_str_printf(s, "%s.to(tl.float32).to(%s).to(tl.float32)", a, tl_memory(e->dtype));
        else if (is16(e->dtype)) wk_str_printf(s, "%s.to(%s).to(tl.float32)", a, tl_memory(e->dtype));
        else wk_str_printf(s, "%s.to(%s)", a, T);
        return 0;
    case WK_LX_NEG: wk_str_printf(s, "-%s", a); return 0;
    case WK_LX_ABS: wk_str_printf(s, "tl.abs(%s)", a); return 0;
    case WK_LX_SQRT:
        if (!fl) break;
        wk_str_printf(s, f32 ? "tl.sqrt_rn(%s)" : "tl.sqrt(%s)", a);
        return 0;
    case WK_LX_ISNAN: wk_str_printf(s, "(%s != %s)", a, a); return 0;
    case WK_LX_NOT:
        if (fl) break;
        if (e->dtype == WK_BOOL) wk_str_printf(s, "(%s == 0)", a);
        else wk_str_printf(s, "~%s", a);
        return 0;
    case WK_LX_ADD: wk_str_printf(s, "%s + %s", a, b); return 0;
    case WK_LX_SUB: wk_str_printf(s, "%s - %s", a, b); return 0;
    case WK_LX_MUL: wk_str_printf(s, "%s * %s", a, b); return 0;
    case WK_LX_DIV:
        if (!fl) break;
        /* IEEE division, as eager computes it (Triton's / is approximate in float32) */
        wk_str_printf(s, f32 ? "tl.div_rn(%s, %s)" : "%s / %s", a, b);
        return 0;
    case WK_LX_POW:
        if (fl) wk_str_printf(s, "libdevice.pow(%s, %s)", a, b);
        else wk_str_printf(s, "wk_ipow(%s, %s)", a, b);
        return 0;
    case WK_LX_MAX: case WK_LX_MIN:
        if (fl) wk_str_printf(s, "wk_%s_nan(%s, %s)", e->op == WK_LX_MAX ? "max" : "min", a, b);
        else wk_str_printf(s, "tl.%s(%s, %s)", e->op == WK_LX_MAX ? "maximum" : "minimum", a, b);
        return 0;
    case WK_LX_AND: case WK_LX_OR: case WK_LX_XOR:
        if (fl) break;
        wk_str_printf(s, "%s %s %s", a, e->op == WK_LX_AND ? "&" : e->op == WK_LX_OR ? "|" : "^", b);
        return 0;
    case WK_LX_ATAN2:
        if (!fl) break;
        wk_str_printf(s, "libdevice.atan2(%s, %s)", a, b);
        return 0;
    case WK_LX_FMOD:
        if (fl) wk_str_printf(s, "libdevice.fmod(%s, %s)", a, b);
        else wk_str_printf(s, "%s %% %s", a, b); /* truncating, like C */
        return 0;
    case WK_LX_FLOORDIV:
        wk_str_printf(s, "wk_%sfloordiv(%s, %s)", fl ? "" : "i", a, b);
        return 0;
    case WK_LX_REM:
        wk_str_printf(s, "wk_%srem(%s, %s)", fl ? "" : "i", a, b);
        return 0;
    case WK_LX_EQ: case WK_LX_NE: case WK_LX_LT: case WK_LX_LE: case WK_LX_GT: case WK_LX_GE: {
        static const char *const cmp[] = {"==", "!=", "<", "<=", ">", ">="};
        wk_str_printf(s, "(%s %s %s)", a, cmp[e->op - WK_LX_EQ], b);
        return 0;
    }
    case WK_LX_WHERE: wk_str_printf(s, "tl.where(%s, %s, %s)", a, b, c); return 0;
    case WK_LX_BOUND: {
        /* never read outside the buffer: out-of-range lanes read element 0;
         * device_assert reports them (wick/_triton.py compiles kernels that
         * hold one with Triton's asserts on: a device-side assertion, as
         * eager's CUDA indexing kernels give) */
        const char *mask = load_mask(g, 1 | (on_r(g, e) ? 2 : 0));
        char inb[200];
        snprintf(inb, sizeof inb, "((%s >= 0) & (%s < %lld))", a, a, (long long)e->i);
        if (mask) emit(g, "tl.device_assert(%s | ~(%s), \"index out of range\")", inb, mask);
        else emit(g, "tl.device_assert(%s, \"index out of range\")", inb);
        wk_str_printf(s, "tl.where(%s, %s, 0)", inb, a);
        return 0;
    }
    default:
        if (libm(e->op) && fl) {
            wk_str_printf(s, "%s(%s)", libm(e->op), a);
            return 0;
        }
        break;
    }
    wk_error_set("Triton codegen: cannot emit %s of %s", wk_lower_op_name(e->op), wk_dtype_name(e->dtype));
    return -1;
}

static void const_text(const WkLExpr *e, WkStr *s) {
    const char *T = tl_compute(e->dtype);
    if (wk_dtype_is_float(e->dtype)) {
        double v = e->dtype == WK_F64 && !demote_f64 ? e->f : (double)(float)e->f;
        if (isnan(v)) wk_str_printf(s, "tl.full([], float(\"nan\"), %s)", T);
        else if (isinf(v)) wk_str_printf(s, "tl.full([], float(\"%sinf\"), %s)", v < 0 ? "-" : "", T);
        else wk_str_printf(s, "tl.full([], %.17g, %s)", v, T);
    } else if (e->dtype == WK_BOOL) {
        wk_str_printf(s, "tl.full([], %d, tl.int1)", e->i != 0);
    } else {
        wk_str_printf(s, "tl.full([], %lld, %s)", (long long)e->i, T);
    }
}

/* Emits e (and what it needs) unless already in scope; returns its name
 * (owned by the tables), or NULL with wk_error set. */
static const char *ref(TGen *g, const WkLExpr *e) {
    int r = on_r(g, e);
    char **slot = r ? &g->rname[e->id] : &g->xname[e->id];
    if (*slot) return *slot;
    if (e->op == WK_LX_REDUCE) {
        wk_error_set("Triton codegen: a reduction inside an expression");
        return NULL;
    }
    WkStr s = {0};
    wk_str_append(&s, "");
    if (e->op == WK_LX_CONST) const_text(e, &s);
    else if (expr_text(g, e, &s) < 0) {
        wk_str_free(&s);
        return NULL;
    }
    char name[48];
    if (r) snprintf(name, sizeof name, "t%d_p%d", e->id, g->phase);
    else snprintf(name, sizeof name, "t%d", e->id);
    /* a persistent group reads a row once, siblings' loop each address once
     * an iteration: the same load text is one value */
    if (r && (!g->in_loop || g->loop_loads_shared) && e->op == WK_LX_READ && !g->stored_here[e->buf] && !strncmp(s.data, "tl.load(", 8)) {
        for (int k = 0; k < g->load_keys.len; k++)
            if (!strcmp(g->load_keys.data[k], s.data)) {
                *slot = wk_xstrdup(g->load_names.data[k]);
                wk_str_free(&s);
                return *slot;
            }
        wk_vec_push(&g->load_keys, wk_xstrdup(s.data));
        wk_vec_push(&g->load_names, wk_xstrdup(name));
    }
    *slot = wk_xstrdup(name);
    emit(g, "%s = %s", name, s.data);
    wk_str_free(&s);
    return *slot;
}

/* ---- kernels ----------------------------------------------------------- */

static void clear_names(TGen *g, char **names) {
    for (int k = 0; k < g->nexprs; k++) {
        free(names[k]);
        names[k] = NULL;
    }
}

/* Binds the variables vars[0..n) (extents sizes[]) to the flattened index
 * `index`, row-major, on axis `axis`. */
static void bind_vars(TGen *g, const int *vars, const int64_t *sizes, int n, const char *index, int axis) {
    int64_t stride = 1;
    for (int d = n - 1; d >= 0; d--) {
        int v = vars[d];
        if (v >= g->nvars) continue;
        char buf[128];
        if (sizes[d] <= 1) {
            g->vtext[v] = intern(g, "0");
        } else {
            int first = 1;
            for (int k = 0; k < d; k++) first &= sizes[k] <= 1;
            if (stride == 1 && first) snprintf(buf, sizeof buf, "%s", index);
            else if (stride == 1) snprintf(buf, sizeof buf, "(%s %% %lld)", index, (long long)sizes[d]);
            else if (first) snprintf(buf, sizeof buf, "(%s // %lld)", index, (long long)stride);
            else snprintf(buf, sizeof buf, "(%s // %lld %% %lld)", index, (long long)stride, (long long)sizes[d]);
            g->vtext[v] = intern(g, buf);
        }
        g->vaxis[v] = (signed char)axis;
        stride *= sizes[d];
    }
}

static void unbind_all(TGen *g) {
    for (int v = 0; v < g->nvars; v++) {
        g->vtext[v] = NULL;
        g->vaxis[v] = 0;
    }
}

static int64_t pow2_at_least(int64_t n) {
    int64_t p = 1;
    while (p < n) p <<= 1;
    return p;
}

/* Stores value `v` (compute dtype) into st's buffer. shape: 0 the 1-d
 * pointwise block, 1 [XBLOCK, 1], 2 [XBLOCK, RBLOCK]. */
static int emit_store(TGen *g, const WkSchedStore *st, const char *v, int shape, int remember) {
    WkDType dt = g->S->bufs[st->buf].dtype;
    StoreRec r = {0};
    r.buf = st->buf;
    r.offset = st->offset;
    r.dtype = dt;
    snprintf(r.var, sizeof r.var, "s%d_p%d", st->buf, g->phase);
    if (dt == WK_BOOL) emit(g, "%s = %s != 0", r.var, v);
    else emit(g, "%s = %s.to(%s)", r.var, v, tl_memory(dt));
    WkStr off = {0};
    wk_str_append(&off, "");
    if (sym_py(g, st->offset, &off) < 0) {
        wk_str_free(&off);
        return -1;
    }
    const char *zero = shape == 0 ? "xzero" : shape == 1 ? "xzero" : "xrzero";
    char mask[160];
    if (shape == 2) snprintf(mask, sizeof mask, "xmask & %s", g->rmask);
    else snprintf(mask, sizeof mask, "xmask");
    emit(g, "tl.store(b%d + %s + %s, %s, mask=%s)", st->buf, off.data, zero, r.var, mask);
    g->unsynced[st->buf] = 1;
    r.offset_text = intern(g, off.data);
    wk_str_free(&off);
    if (remember) wk_vec_push(&g->stores, r);
    return 0;
}

typedef struct {
    WkRedOp rop;
    const WkLExpr *body;  /* what is accumulated */
    WkDType acc, out;
    const char *acc_t;
    int fl, boolacc;
    char init[64];
} Red;

static Red red_of(const WkLExpr *red) {
    Red r;
    memset(&r, 0, sizeof r);
    r.rop = red->rop;
    r.body = red->a[0];
    r.out = red->dtype;
    /* float32 data summed into a float64 accumulator (the CPU's sequential
     * loop needs it): block tree sums in float32 are as accurate */
    if ((r.rop == WK_RED_SUM || r.rop == WK_RED_MEAN) && r.body->op == WK_LX_CAST && r.body->dtype == WK_F64 &&
        r.out != WK_F64 && r.body->a[0]->dtype == WK_F32)
        r.body = r.body->a[0];
    r.acc = r.body->dtype;
    r.fl = wk_dtype_is_float(r.acc);
    r.boolacc = r.acc == WK_BOOL;
    r.acc_t = r.boolacc ? "tl.int32" : tl_compute(r.acc);
    int is_max = r.rop == WK_RED_MAX, is_min = r.rop == WK_RED_MIN;
    if (r.rop == WK_RED_PROD) snprintf(r.init, sizeof r.init, "1");
    else if (!is_max && !is_min) snprintf(r.init, sizeof r.init, "0");
    else if (r.fl) snprintf(r.init, sizeof r.init, "float(\"%sinf\")", is_max ? "-" : "");
    else if (r.boolacc) snprintf(r.init, sizeof r.init, "%d", is_min);
    else {
        static const struct { WkDType dt; const char *lo, *hi; } lim[] = {
            {WK_U8, "0", "255"}, {WK_I8, "-128", "127"}, {WK_I16, "-32768", "32767"},
            {WK_I32, "-2147483648", "2147483647"}, {WK_I64, "-9223372036854775808", "9223372036854775807"}};
        for (size_t k = 0; k < sizeof lim / sizeof *lim; k++)
            if (lim[k].dt == r.acc) snprintf(r.init, sizeof r.init, "%s", is_max ? lim[k].lo : lim[k].hi);
    }
    return r;
}

/* The type a split reduction's partials are kept in: 16-bit data's in
 * float32, the type they are computed in. */
static WkDType partial_dtype(const WkSchedKernel *K) {
    Red r = red_of(K->stores[0].expr);
    return r.boolacc ? WK_I32 : (r.acc == WK_F64 && demote_f64) || r.acc == WK_F16 || r.acc == WK_BF16 ? WK_F32 : r.acc;
}

/* text of reducing `x` ([XBLOCK, RBLOCK]) along axis 1, kept as [XBLOCK, 1] */
static void reduce_text(const Red *r, const char *x, char *out, size_t n) {
    switch (r->rop) {
    case WK_RED_SUM: case WK_RED_MEAN: snprintf(out, n, "tl.sum(%s, 1)[:, None].to(%s)", x, r->acc_t); break;
    case WK_RED_PROD: snprintf(out, n, "tl.reduce(%s, 1, wk_mul)[:, None]", x); break;
    case WK_RED_MAX:
        snprintf(out, n, r->fl ? "tl.reduce(%s, 1, wk_max_nan)[:, None]" : "tl.max(%s, 1)[:, None]", x);
        break;
    case WK_RED_MIN:
        snprintf(out, n, r->fl ? "tl.reduce(%s, 1, wk_min_nan)[:, None]" : "tl.min(%s, 1)[:, None]", x);
        break;
    }
}

static void combine_text(const Red *r, const char *acc, const char *v, char *out, size_t n) {
    switch (r->rop) {
    case WK_RED_SUM: case WK_RED_MEAN: snprintf(out, n, "%s + %s", acc, v); break;
    case WK_RED_PROD: snprintf(out, n, "%s * %s", acc, v); break;
    case WK_RED_MAX: snprintf(out, n, r->fl ? "wk_max_nan(%s, %s)" : "tl.maximum(%s, %s)", acc, v); break;
    case WK_RED_MIN: snprintf(out, n, r->fl ? "wk_min_nan(%s, %s)" : "tl.minimum(%s, %s)", acc, v); break;
    }
}

/* Emits every node of e's DAG that is not on the r axis (function scope). */
static int emit_x_nodes(TGen *g, const WkLExpr *e, WkLowerMap *seen) {
    if (wk_lower_map_get(seen, e)) return 0;
    wk_lower_map_put(seen, e, e);
    if (!on_r(g, e)) return ref(g, e) ? 0 : -1;
    for (int k = 0; k < e->nargs; k++)
        if (emit_x_nodes(g, e->a[k], seen) < 0) return -1;
    return 0;
}

/* Does e read a buffer stored earlier in this function other than from
 * registers (held_store)? 1 if so, 2 if one of those was stored since the
 * last barrier (the phase needs one). Its phase's variables must be bound.
 * Kernels are in order, so what the function stores and the phase reads was
 * stored by an earlier phase (or is the phase's own store, held). */
static int reads_stored_elsewhere(TGen *g, const WkLExpr *e, WkLowerMap *seen) {
    if (wk_lower_map_get(seen, e)) return 0;
    wk_lower_map_put(seen, e, e);
    int far = 0;
    if (e->op == WK_LX_READ && g->stored_here[e->buf] && !held_store(g, e)) far = g->unsynced[e->buf] ? 2 : 1;
    for (int k = 0; k < e->nargs && far < 2; k++) {
        int f = reads_stored_elsewhere(g, e->a[k], seen);
        if (f > far) far = f;
    }
    return far;
}

static int finish_reduction(TGen *g, const WkSchedKernel *K, const Red *rp, const char *v, int64_t ext);

/* The r index and mask a phase uses: the persistent block's own (its
 * extent masked), or the phase's loop variables. */
static void set_phase_rindex(TGen *g, int persistent, int64_t ext) {
    char rindex[48], rmask[96];
    if (persistent) {
        snprintf(rindex, sizeof rindex, "rbase");
        snprintf(rmask, sizeof rmask, "(rbase < %lld)", (long long)ext);
    } else {
        snprintf(rindex, sizeof rindex, "rindex_p%d", g->phase);
        snprintf(rmask, sizeof rmask, "rmask_p%d", g->phase);
    }
    g->rindex = intern(g, rindex);
    g->rmask = intern(g, rmask);
}

/* A phase's r index, mask and r-axis variables: a reduction's reduced
 * dims, a row group's pointwise phase's i1... Returns the r extent. */
static int64_t bind_phase_rvars(TGen *g, const WkSchedKernel *K, int persistent) {
    int vars[WK_MAX_DIMS];
    if (K->kind == WK_SCHED_REDUCTION) {
        set_phase_rindex(g, persistent, K->red_numel);
        for (int d = 0; d < K->nred; d++) vars[d] = g->S->L->rvar_id[d];
        bind_vars(g, vars, K->red_sizes, K->nred, g->rindex, 2);
        return K->red_numel;
    }
    int64_t ext = K->sizes[0] > 0 ? K->numel / K->sizes[0] : 0;
    set_phase_rindex(g, persistent, ext);
    for (int d = 1; d < K->nloops; d++) vars[d - 1] = g->S->L->ivar_id[d];
    bind_vars(g, vars, K->sizes + 1, K->nloops - 1, g->rindex, 2);
    return ext;
}

/* The names of sibling j's accumulator and reduced value (j 0: the phase's). */
static void sibling_names(const TGen *g, int j, char *acc, char *red, size_t n) {
    if (j == 0) {
        snprintf(acc, n, "acc_p%d", g->phase);
        snprintf(red, n, "red_p%d", g->phase);
    } else {
        snprintf(acc, n, "acc_p%d_%d", g->phase, j);
        snprintf(red, n, "red_p%d_%d", g->phase, j);
    }
}

static void forget_loads(TGen *g) {
    for (int k = 0; k < g->load_keys.len; k++) {
        free(g->load_keys.data[k]);
        free(g->load_names.data[k]);
    }
    g->load_keys.len = g->load_names.len = 0;
}

/* One reduction phase ([XBLOCK, 1] outputs) of a two-dimensional function:
 * kernel K, or K and the n - 1 kernels after it, its siblings (reductions
 * over the same loops: reduction_siblings()), whose accumulators share one
 * block or loop over r, so that what they read is loaded once (batch
 * norm's two sums of the backward, a layer norm's weight and bias
 * gradients). */
static int gen_reduction_phase(TGen *g, const WkSchedKernel *K, int n, int persistent) {
    Red r[MAX_SIBLINGS];
    char buf[512], acc[MAX_SIBLINGS][32], v[MAX_SIBLINGS][32];
    int64_t ext = bind_phase_rvars(g, K, persistent);
    for (int j = 0; j < n; j++) {
        r[j] = red_of(K[j].stores[0].expr);
        sibling_names(g, j, acc[j], v[j], sizeof acc[j]);
        WkLowerMap seen = {0};
        int rc = emit_x_nodes(g, r[j].body, &seen);
        wk_lower_map_free(&seen);
        if (rc < 0) return -1;
    }
    if (!persistent) {
        for (int j = 0; j < n; j++) emit(g, "%s = tl.full([XBLOCK, RBLOCK], %s, %s)", acc[j], r[j].init, r[j].acc_t);
        /* a split reduction's program loops over its chunk of the reduced extent */
        emit(g, "for roff_p%d in range(0, %lld, RBLOCK):", g->phase,
             (long long)(g->split_chunk ? g->split_chunk : ext));
        g->indent++;
        g->in_loop = 1;
        g->loop_loads_shared = n > 1;
        if (g->split_chunk) {
            emit(g, "%s = rstart + roff_p%d + rbase", g->rindex, g->phase);
            emit(g, "%s = (roff_p%d + rbase < %lld) & (%s < %lld)", g->rmask, g->phase, (long long)g->split_chunk,
                 g->rindex, (long long)ext);
        } else {
            emit(g, "%s = roff_p%d + rbase", g->rindex, g->phase);
            emit(g, "%s = %s < %lld", g->rmask, g->rindex, (long long)ext);
        }
    }
    for (int j = 0; j < n; j++) {
        const char *body = ref(g, r[j].body);
        if (!body) return -1;
        char masked[256];
        snprintf(masked, sizeof masked, "tl.where(xmask & %s, %s%s, %s)", g->rmask, body,
                 r[j].boolacc ? ".to(tl.int32)" : "", r[j].init);
        if (persistent) {
            emit(g, "%s = %s", acc[j], masked);
        } else {
            char comb[512];
            combine_text(&r[j], acc[j], masked, comb, sizeof comb);
            emit(g, "%s = %s", acc[j], comb);
        }
    }
    if (!persistent) {
        g->indent--;
        g->in_loop = 0;
        clear_names(g, g->rname);
        if (g->loop_loads_shared) forget_loads(g);
        g->loop_loads_shared = 0;
    }
    for (int j = 0; j < n; j++) {
        reduce_text(&r[j], acc[j], buf, sizeof buf);
        emit(g, "%s = %s", v[j], buf);
    }
    if (g->split_chunk) { /* partial results; the final kernel reduces the partials */
        for (int j = 0; j < n; j++) {
            if (g->split_column)
                emit(g, "tl.store(ws + %lld + xindex * %d + sidx + xzero, %s, mask=xmask)",
                     (long long)j * K->numel * g->split_n, g->split_n, v[j]);
            else emit(g, "tl.store(ws + %lld + tl.program_id(0) + xzero, %s)", (long long)j * K->numel * g->split_n, v[j]);
        }
        return 0;
    }
    for (int j = 0; j < n; j++)
        if (finish_reduction(g, &K[j], &r[j], v[j], ext) < 0) return -1;
    return 0;
}

/* After a reduction: its final value (value v, [XBLOCK, 1]), its store and
 * the epilogue's stores. */
static int finish_reduction(TGen *g, const WkSchedKernel *K, const Red *rp, const char *v, int64_t ext) {
    Red r = *rp;
    /* the final value, in the REDUCE's dtype */
    char fin[256];
    if (r.rop == WK_RED_MEAN) snprintf(fin, sizeof fin, "(%s / %lld)", v, (long long)(ext ? ext : 0));
    else if (r.out == WK_BOOL) snprintf(fin, sizeof fin, "(%s != 0)", v);
    else snprintf(fin, sizeof fin, "%s.to(%s)", v, tl_compute(r.out));
    if (r.rop == WK_RED_MEAN && ext == 0) snprintf(fin, sizeof fin, "(%s * float(\"nan\"))", v);
    if (r.rop == WK_RED_MEAN && !wk_dtype_is_float(r.out)) {
        wk_error_set("Triton codegen: an integral mean");
        return -1;
    }
    char fv[48];
    snprintf(fv, sizeof fv, "fin_p%d", g->phase);
    emit(g, "%s = %s", fv, fin);
    if (emit_store(g, &K->stores[0], fv, 1, 1) < 0) return -1;
    for (int j = 1; j < K->nstores; j++) {
        const char *e = ref(g, K->stores[j].expr);
        if (!e || emit_store(g, &K->stores[j], e, 1, 1) < 0) return -1;
    }
    return 0;
}

/* One pointwise phase of a row group: i0 on x, the rest (extent ext) on r. */
static int gen_row_pointwise_phase(TGen *g, const WkSchedKernel *K, int persistent) {
    int64_t ext = bind_phase_rvars(g, K, persistent);
    int shape = ext > 1 ? 2 : 1;
    WkLowerMap seen = {0};
    int rc = 0;
    for (int j = 0; j < K->nstores && rc == 0; j++) rc = emit_x_nodes(g, K->stores[j].expr, &seen);
    wk_lower_map_free(&seen);
    if (rc < 0) return -1;
    if (!persistent && shape == 2) {
        emit(g, "for roff_p%d in range(0, %lld, RBLOCK):", g->phase, (long long)ext);
        g->indent++;
        g->in_loop = 1;
        emit(g, "%s = roff_p%d + rbase", g->rindex, g->phase);
        emit(g, "%s = %s < %lld", g->rmask, g->rindex, (long long)ext);
    }
    for (int j = 0; j < K->nstores; j++) {
        const char *e = ref(g, K->stores[j].expr);
        /* a looped phase's stores of the r axis are read back by later
         * phases through memory (after a barrier), persistent ones from
         * registers */
        if (!e || emit_store(g, &K->stores[j], e, shape, shape == 1 || !g->in_loop) < 0) return -1;
    }
    if (g->in_loop) {
        g->indent--;
        g->in_loop = 0;
        clear_names(g, g->rname);
    }
    return 0;
}

/* Marks read[buf] for every buffer e's DAG reads. */
static void mark_reads(const WkLExpr *e, unsigned char *read, WkLowerMap *seen) {
    if (wk_lower_map_get(seen, e)) return;
    wk_lower_map_put(seen, e, e);
    if (e->op == WK_LX_READ) read[e->buf] = 1;
    for (int k = 0; k < e->nargs; k++) mark_reads(e->a[k], read, seen);
}

static int64_t span_elems(const WkBufferPlan *b) {
    int sz = wk_dtype_size(b->dtype);
    return sz > 0 ? b->nbytes / sz : b->nbytes;
}

static void add_config(WkTritonKernel *tk, int x, int r, int w) {
    for (int k = 0; k < tk->nconfigs; k++)
        if (tk->configs[k].xblock == x && tk->configs[k].rblock == r && tk->configs[k].num_warps == w) return;
    if (tk->nconfigs >= WK_TRITON_MAX_CONFIGS) return;
    tk->configs[tk->nconfigs++] = (WkTritonConfig){x, r, w};
}

/* A column reduction's configurations (reads are contiguous along x): x
 * blocks of xc and narrower, each with a longer r block; x128: also 128 x
 * blocks of 16 rows (many outputs). Every XBLOCK is a power of two <= xc. */
static void add_column_configs(WkTritonKernel *tk, int64_t xc, int x128) {
    add_config(tk, (int)xc, 64, 8);
    add_config(tk, (int)(xc / 2 > 0 ? xc / 2 : 1), 128, 8);
    add_config(tk, (int)(xc / 4 > 0 ? xc / 4 : 1), 256, 8);
    if (x128) add_config(tk, 128, 16, 4);
    add_config(tk, (int)(xc / 8 > 0 ? xc / 8 : 1), 512, 8);
}

/* Kernels first..last as one @triton.jit function: a lone pointwise kernel
 * (1-d), or a reduction / row group (2-d). */
static void reset_function(TGen *g) {
    unbind_all(g);
    clear_names(g, g->xname);
    clear_names(g, g->rname);
    g->stores.len = 0;
    forget_loads(g);
    g->split_chunk = 0;
    g->split_n = 0;
    g->split_column = 0;
    memset(g->raxis, -1, (size_t)g->nexprs);
}

/* The split reduction's second launch: reduces each output's n partials
 * (persistent) of kernel K and of its nsib - 1 siblings, and finishes as a
 * one-phase reduction would. */
static int gen_split_final(TGen *g, const WkSchedKernel *K, int nsib, const char *name, const char *sig, int n,
                           WkTritonKernel *tk) {
    int64_t xnumel = K->numel;
    emit(g, "@triton.jit");
    emit(g, "def %s(%sws, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):", name, sig);
    g->indent++;
    emit(g, "xoffset = tl.program_id(0)%s * XBLOCK", g->wide ? ".to(tl.int64)" : "");
    emit(g, "xindex = xoffset + tl.arange(0, XBLOCK)[:, None]");
    emit(g, "xmask = xindex < %lld", (long long)xnumel);
    emit(g, "xzero = tl.zeros([XBLOCK, 1], tl.int32)");
    emit(g, "rbase = tl.arange(0, RBLOCK)[None, :]");
    g->phase = 0;
    g->two_d = 1;
    bind_vars(g, g->S->L->ivar_id, K->sizes, K->nloops, "xindex", 1);
    int rc = 0;
    for (int j = 0; j < nsib && rc == 0; j++) {
        Red r = red_of(K[j].stores[0].expr);
        char acc[32], v[32], buf[512];
        sibling_names(g, j, acc, v, sizeof acc);
        emit(g, "part = tl.load(ws + %lld + xindex * %d + rbase, mask=xmask & (rbase < %d), other=%s).to(%s)",
             (long long)j * xnumel * n, n, n, r.init, r.acc_t);
        reduce_text(&r, "part", buf, sizeof buf);
        emit(g, "%s = %s", v, buf);
        rc = finish_reduction(g, &K[j], &r, v, K->red_numel);
    }
    g->indent--;
    emit(g, "%s", "");
    int64_t cap_x = pow2_at_least(xnumel > 0 ? xnumel : 1);
    int rb = (int)pow2_at_least(n);
    add_config(tk, (int)(cap_x < 8 ? cap_x : 8), rb, 4);
    tk->xnumel = xnumel;
    tk->has_r = 1;
    tk->scratch = 2;
    return rc;
}

/* Kernels first..last as one function: a row group's phases, or (nsib > 1)
 * reductions sharing one block or loop over r (reduction_siblings). */
static int gen_function(TGen *g, int first, int last, int nsib, const char *name, WkTritonKernel *tk,
                        WkTritonKernel *tk2, int *used2) {
    const WkSchedule *S = g->S;
    const WkSchedKernel *K0 = &S->kernels[first];
    int two_d = first < last || K0->kind == WK_SCHED_REDUCTION;
    int grouped = first < last && nsib == 1;
    int64_t xnumel = grouped ? K0->sizes[0] : K0->numel;
    /* the widest r extent of any phase */
    int64_t rext = 1;
    for (int k = first; k <= last; k++) {
        const WkSchedKernel *K = &S->kernels[k];
        int64_t e = K->kind == WK_SCHED_REDUCTION ? K->red_numel : grouped && K->sizes[0] ? K->numel / K->sizes[0] : 1;
        if (e > rext) rext = e;
    }
    /* a lone column reduction (reads contiguous along x) always loops: its
     * blocks are wide in x and short in r whatever the reduced extent */
    int column = !grouped && K0->kind == WK_SCHED_REDUCTION && K0->reduce_outer;
    int persistent = two_d && rext <= PERSIST_MAX && !column;
    /* few outputs and a long reduction cannot fill the GPU one program per
     * output: each output's reduction is split across programs */
    int split_n = 0;
    int64_t chunk = 0;
    if (two_d && !grouped && K0->kind == WK_SCHED_REDUCTION && !column && !persistent && xnumel < 128 &&
        rext >= 32768) {
        int64_t n = pow2_at_least((1024 + xnumel - 1) / (xnumel > 0 ? xnumel : 1));
        if (n > 1024) n = 1024;
        while (n > 2 && rext / n < 4096) n /= 2;
        chunk = (rext + n - 1) / n;
        chunk = (chunk + 1023) / 1024 * 1024;
        split_n = (int)((rext + chunk - 1) / chunk);
    }
    /* A column reduction (batch norm's per-channel statistics over a
     * channels-last tensor: few outputs, contiguous along x, a long reduced
     * extent) has few x blocks to give programs: each block's reduction is
     * split across programs as well. x is padded to a multiple of the widest
     * x block (xpad), which every configuration's XBLOCK (a power of two no
     * wider) divides, so the grid is xpad / XBLOCK blocks times split_n.
     * Chunks of 1024 rows or more keep the partials small against the data;
     * a transformer's bias and norm-weight gradients (768 columns, 12608
     * rows at batch 64) are split, or only 12 programs would run. */
    int64_t xpad = 0, col_xc = 0;
    if (column && rext >= 4096) {
        int64_t cap = pow2_at_least(xnumel > 0 ? xnumel : 1), xc = cap < 64 ? cap : 64;
        int64_t nxb = (xnumel + xc - 1) / xc;
        if (nxb < 128) {
            int64_t n = pow2_at_least((512 + nxb - 1) / nxb);
            if (n > 1024) n = 1024;
            while (n > 2 && rext / n < 1024) n /= 2;
            if (n >= 2) {
                chunk = (rext + n - 1) / n;
                chunk = (chunk + 511) / 512 * 512; /* the widest column RBLOCK divides it */
                split_n = (int)((rext + chunk - 1) / chunk);
                xpad = nxb * xc;
                col_xc = xc;
            }
        }
    }
    *used2 = 0;

    unsigned char *used = wk_xcalloc((size_t)S->nbufs + 1, 1);
    memset(g->stored_here, 0, (size_t)S->nbufs + 1);
    memset(g->unsynced, 0, (size_t)S->nbufs + 1);
    WkLowerMap seen = {0};
    for (int k = first; k <= last; k++)
        for (int j = 0; j < S->kernels[k].nstores; j++) {
            used[S->kernels[k].stores[j].buf] = 1;
            g->stored_here[S->kernels[k].stores[j].buf] = 1;
            mark_reads(S->kernels[k].stores[j].expr, used, &seen);
        }
    wk_lower_map_free(&seen);
    int64_t maxspan = xnumel * (rext > 0 ? rext : 1);
    tk->name = wk_xstrdup(name);
    tk->params = wk_xcalloc((size_t)S->nbufs + 1, sizeof(int));
    WkStr sig = {0};
    wk_str_append(&sig, "");
    for (int b = 0; b < S->nbufs; b++) {
        if (!used[b]) continue;
        tk->params[tk->nparams++] = b;
        wk_str_printf(&sig, "b%d, ", b);
        if (span_elems(&S->bufs[b]) > maxspan) maxspan = span_elems(&S->bufs[b]);
    }
    free(used);
    g->wide = maxspan >= ((int64_t)1 << 31) - 4096;
    if (split_n) {
        tk->params[tk->nparams++] = -1;
        tk->scratch = 1;
        tk->scratch_elems = xnumel * split_n * nsib;
        tk->scratch_dtype = partial_dtype(K0);
        tk->xnumel = (xpad ? xpad : xnumel) * split_n;
        tk->has_r = 1;
        for (int j = 0; j < nsib; j++)
            emit(g, "# kernel %d: %sreduction {%s}, %lld x %lld iterations, split in %d: partials%s", first + j,
                 xpad ? "column " : "", K0[j].desc, (long long)K0->numel, (long long)K0->red_numel, split_n,
                 nsib > 1 ? " (siblings: one loop)" : "");
        emit(g, "@triton.jit");
        emit(g, "def %s(%sws, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):", name, sig.data);
        g->indent++;
        emit(g, "pid = tl.program_id(0)%s", g->wide ? ".to(tl.int64)" : "");
        if (xpad) {
            /* consecutive programs: neighbouring x blocks of one r chunk */
            emit(g, "nxb = %lld // XBLOCK", (long long)xpad);
            emit(g, "sidx = pid // nxb");
            emit(g, "xindex = (pid %% nxb) * XBLOCK + tl.arange(0, XBLOCK)[:, None]");
        } else {
            emit(g, "sidx = pid %% %d", split_n);
            emit(g, "xindex = pid // %d + tl.zeros([XBLOCK, 1], tl.int32)  # XBLOCK is 1", split_n);
        }
        emit(g, "xmask = xindex < %lld", (long long)xnumel);
        emit(g, "xzero = tl.zeros([XBLOCK, 1], tl.int32)");
        emit(g, "rbase = tl.arange(0, RBLOCK)[None, :]%s", g->wide ? ".to(tl.int64)" : "");
        emit(g, "xrzero = tl.zeros([XBLOCK, RBLOCK], tl.int32)");
        emit(g, "rstart = sidx * %lld", (long long)chunk);
        g->two_d = 1;
        g->phase = 0;
        g->split_chunk = chunk;
        g->split_n = split_n;
        g->split_column = xpad > 0;
        bind_vars(g, S->L->ivar_id, K0->sizes, K0->nloops, "xindex", 1);
        int rc = gen_reduction_phase(g, K0, nsib, 0);
        g->indent--;
        emit(g, "%s", "");
        if (xpad) {
            add_column_configs(tk, col_xc, 0); /* no block wider than xpad's unit */
        } else {
            add_config(tk, 1, 1024, 4);
            add_config(tk, 1, 2048, 8);
            add_config(tk, 1, 512, 4);
        }
        reset_function(g);
        if (rc == 0) {
            char name2[160];
            snprintf(name2, sizeof name2, "%s_final", name);
            tk2->name = wk_xstrdup(name2);
            tk2->params = wk_xcalloc((size_t)tk->nparams + 1, sizeof(int));
            memcpy(tk2->params, tk->params, sizeof(int) * (size_t)tk->nparams);
            tk2->nparams = tk->nparams;
            tk2->scratch_elems = tk->scratch_elems;
            tk2->scratch_dtype = tk->scratch_dtype;
            *used2 = 1;
            rc = gen_split_final(g, K0, nsib, name2, sig.data, split_n, tk2);
            reset_function(g);
        }
        wk_str_free(&sig);
        return rc;
    }
    g->two_d = two_d;
    tk->xnumel = xnumel;
    tk->has_r = two_d;

    for (int k = first; k <= last; k++) {
        const WkSchedKernel *K = &S->kernels[k];
        emit(g, "# kernel %d: %s {%s}, %lld x %lld iterations%s", k,
             K->kind == WK_SCHED_REDUCTION ? "reduction" : "pointwise", K->desc, (long long)K->numel,
             (long long)K->red_numel, grouped ? ", row group" : nsib > 1 ? ", siblings: one loop" : "");
    }
    emit(g, "@triton.jit");
    emit(g, "def %s(%sXBLOCK: tl.constexpr%s):", name, sig.data, two_d ? ", RBLOCK: tl.constexpr" : "");
    wk_str_free(&sig);
    g->indent++;
    emit(g, "xoffset = tl.program_id(0)%s * XBLOCK", g->wide ? ".to(tl.int64)" : "");
    int rc = 0;
    if (!two_d) {
        emit(g, "xindex = xoffset + tl.arange(0, XBLOCK)");
        emit(g, "xmask = xindex < %lld", (long long)xnumel);
        emit(g, "xzero = tl.zeros([XBLOCK], tl.int32)");
        g->phase = 0;
        bind_vars(g, S->L->ivar_id, K0->sizes, K0->nloops, "xindex", 1);
        for (int j = 0; j < K0->nstores && rc == 0; j++) {
            const char *e = ref(g, K0->stores[j].expr);
            rc = e ? emit_store(g, &K0->stores[j], e, 0, 1) : -1;
        }
        /* pointwise: 1024 elements a program is the usual best; the autotuner
         * also times wider and narrower blocks on large tensors */
        int64_t cap = pow2_at_least(xnumel > 0 ? xnumel : 1);
        int x0 = cap < 1024 ? (int)(cap < 128 ? 128 : cap) : 1024;
        add_config(tk, x0, 1, x0 >= 512 ? 4 : x0 >= 256 ? 2 : 1);
        if (xnumel >= 65536) {
            add_config(tk, 2048, 1, 8);
            add_config(tk, 512, 1, 4);
            add_config(tk, 4096, 1, 8);
        }
    } else {
        emit(g, "xindex = xoffset + tl.arange(0, XBLOCK)[:, None]");
        emit(g, "xmask = xindex < %lld", (long long)xnumel);
        emit(g, "xzero = tl.zeros([XBLOCK, 1], tl.int32)");
        emit(g, "rbase = tl.arange(0, RBLOCK)[None, :]%s", g->wide ? ".to(tl.int64)" : "");
        emit(g, "xrzero = tl.zeros([XBLOCK, RBLOCK], tl.int32)");
        for (int k = first; k <= last && rc == 0; k += nsib) {
            const WkSchedKernel *K = &S->kernels[k];
            g->phase = k - first;
            unbind_all(g);
            clear_names(g, g->rname);
            memset(g->raxis, -1, (size_t)g->nexprs);
            if (grouped) bind_vars(g, S->L->ivar_id, K->sizes, 1, "xindex", 1);
            else bind_vars(g, S->L->ivar_id, K->sizes, K->nloops, "xindex", 1);
            if (grouped) {
                /* r-axis names do not survive phases; x-axis ones do as long as
                 * their meaning (i0 on x) does, which a group guarantees. The
                 * phase's r variables bound as the phase binds them, so that
                 * a read's address can be compared with the stores' */
                bind_phase_rvars(g, K, persistent);
                WkLowerMap seen2 = {0};
                int far = 0;
                for (int j = 0; j < K->nstores && far < 2; j++) {
                    int f = reads_stored_elsewhere(g, K->stores[j].expr, &seen2);
                    if (f > far) far = f;
                }
                wk_lower_map_free(&seen2);
                g->barrier = far > 0;
                if (far == 2) { /* (stores made before an earlier phase's barrier are visible already) */
                    emit(g, "tl.debug_barrier()");
                    memset(g->unsynced, 0, (size_t)S->nbufs + 1);
                }
            }
            if (grouped && k > first) emit(g, "# phase %d", g->phase);
            rc = K->kind == WK_SCHED_REDUCTION ? gen_reduction_phase(g, K, nsib, persistent)
                                               : gen_row_pointwise_phase(g, K, persistent);
            g->barrier = 0;
        }
        int64_t cap_x = pow2_at_least(xnumel > 0 ? xnumel : 1);
        if (persistent) {
            int rb = (int)pow2_at_least(rext);
            int w = rb >= 4096 ? 16 : rb >= 2048 ? 8 : rb >= 512 ? 4 : 2;
            int64_t x = 4096 / rb > 0 ? 4096 / rb : 1;
            if (x > 64) x = 64;
            if (x > cap_x) x = cap_x;
            add_config(tk, (int)x, rb, rb * x >= 2048 ? (w > 4 ? w : 4) : w);
            if (x > 1 && rb >= 64) add_config(tk, (int)(x / 2 > 0 ? x / 2 : 1), rb, w);
            if (rb <= 1024 && x * 2 <= cap_x) add_config(tk, (int)(x * 2), rb, 8);
            if (rb >= 1024) add_config(tk, 1, rb, w * 2 > 16 ? 16 : w * 2);
        } else {
            int64_t x1 = cap_x < 8 ? cap_x : 8;
            add_config(tk, 1, 2048, 8);
            add_config(tk, (int)x1, 512, 8);
            add_config(tk, 1, 4096, 16);
            if (column) {
                /* x blocks of 8..128 keep loads coalesced; narrower ones make
                 * more programs when there are few outputs */
                tk->nconfigs = 0;
                add_column_configs(tk, cap_x < 64 ? cap_x : 64, cap_x >= 128);
            }
        }
    }
    g->indent--;
    emit(g, "%s", "");
    reset_function(g);
    return rc;
}

/* Does e read a buffer an earlier sibling stores (stored_at[buf] its
 * store's offset) other than where it stored it, or at all when held is 0?
 * An epilogue's read where the store was made is the value in registers
 * (held_store): the variance's epilogue reading the mean. */
static int reads_stored(const WkLExpr *e, const WkSym *const *stored_at, int held, WkLowerMap *seen) {
    if (wk_lower_map_get(seen, e)) return 0;
    wk_lower_map_put(seen, e, e);
    if (e->op == WK_LX_READ && stored_at[e->buf] && !(held && !e->nargs && e->idx[0] == stored_at[e->buf]))
        return 1;
    for (int k = 0; k < e->nargs; k++)
        if (reads_stored(e->a[k], stored_at, held, seen)) return 1;
    return 0;
}

static int temps_overlap(const WkBufferPlan *a, const WkBufferPlan *b) {
    return a->kind == WK_BUF_TEMP && b->kind == WK_BUF_TEMP && a->offset < b->offset + b->nbytes &&
           b->offset < a->offset + a->nbytes;
}

/* How many kernels from k on form one function of reductions sharing a
 * block or loop over r (1: k alone). Siblings: reductions emitted alone
 * (alone[]: their row group is themselves, or not one function) over the
 * same loops (both column reductions or neither), each reading nothing an
 * earlier one stores, whose stores overwrite no bytes an earlier one reads
 * (they run after the loop, while other programs may still be reading),
 * with partials of one type (a split reduction keeps all of them in one
 * scratch buffer). Their reads of the same addresses are then one load:
 * batch norm's two backward sums over a channels-last gradient, a layer
 * norm's weight and bias gradients. */
static int reduction_siblings(const WkSchedule *S, int k, const unsigned char *alone) {
    const WkSchedKernel *K = &S->kernels[k];
    if (K->kind != WK_SCHED_REDUCTION || !alone[k]) return 1;
    const WkSym **stored_at = wk_xcalloc((size_t)S->nbufs + 1, sizeof *stored_at);
    unsigned char *read = wk_xcalloc((size_t)S->nbufs + 1, 1);
    int n = 1;
    for (;; n++) {
        const WkSchedKernel *P = &S->kernels[k + n - 1];
        WkLowerMap seen = {0};
        for (int j = 0; j < P->nstores; j++) {
            stored_at[P->stores[j].buf] = P->stores[j].offset;
            mark_reads(P->stores[j].expr, read, &seen);
        }
        wk_lower_map_free(&seen);
        if (n == MAX_SIBLINGS || k + n >= S->nkernels) break;
        const WkSchedKernel *J = &S->kernels[k + n];
        if (J->kind != WK_SCHED_REDUCTION || J->reduce_outer != K->reduce_outer || !alone[k + n] ||
            J->nloops != K->nloops ||
            J->nred != K->nred || memcmp(J->sizes, K->sizes, sizeof(int64_t) * (size_t)K->nloops) ||
            memcmp(J->red_sizes, K->red_sizes, sizeof(int64_t) * (size_t)K->nred) ||
            partial_dtype(J) != partial_dtype(K))
            break;
        int clash = 0;
        WkLowerMap body_seen = {0}, epilogue_seen = {0};
        clash = reads_stored(J->stores[0].expr->a[0], stored_at, 0, &body_seen);
        for (int j = 1; j < J->nstores && !clash; j++)
            clash = reads_stored(J->stores[j].expr, stored_at, 1, &epilogue_seen);
        wk_lower_map_free(&body_seen);
        wk_lower_map_free(&epilogue_seen);
        for (int j = 0; j < J->nstores && !clash; j++)
            for (int b = 0; b < S->nbufs && !clash; b++)
                clash = read[b] && (b == J->stores[j].buf || temps_overlap(&S->bufs[b], &S->bufs[J->stores[j].buf]));
        if (clash) break;
    }
    free(stored_at);
    free(read);
    return n;
}

/* A schedule row group becomes one Triton function when each of its
 * reductions reduces into rows only (x = i0): the r axis of a phase is then
 * its reduced dims, or a pointwise phase's i1.. */
static int group_fits(const WkSchedule *S, int first, int last) {
    for (int k = first; k <= last; k++) {
        const WkSchedKernel *K = &S->kernels[k];
        if (K->sizes[0] != S->kernels[first].sizes[0]) return 0;
        if (K->kind == WK_SCHED_REDUCTION && K->numel != K->sizes[0]) return 0;
        /* few rows, each a long reduction (batch norm's backward sums per
         * channel: 64 channels of 802816 values in resnet50's stem at batch
         * 64) would loop in a handful of programs, one per block of rows;
         * alone such a reduction is split across programs (gen_function),
         * its siblings still sharing a loop */
        if (K->kind == WK_SCHED_REDUCTION && K->red_numel > PERSIST_MAX &&
            (K->reduce_outer ? K->numel < 128 * 64 : K->numel < 128 && K->red_numel >= 32768))
            return 0;
    }
    return 1;
}

static const char prelude[] =
    "# wick: generated Triton kernels (loop IR -> schedule -> Triton).\n"
    "import triton\n"
    "import triton.language as tl\n"
    "from wick._triton import libdevice\n"
    "\n"
    "\n"
    "# NaN-propagating max/min, as torch.maximum and amax (one max.NaN instruction)\n"
    "@triton.jit\n"
    "def wk_max_nan(a, b):\n"
    "    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)\n"
    "\n"
    "\n"
    "@triton.jit\n"
    "def wk_min_nan(a, b):\n"
    "    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)\n"
    "\n"
    "\n"
    "@triton.jit\n"
    "def wk_mul(a, b):\n"
    "    return a * b\n"
    "\n"
    "\n"
    "# integer floor division and remainder (divisor != 0); // and % truncate\n"
    "@triton.jit\n"
    "def wk_ifloordiv(a, b):\n"
    "    q = a // b\n"
    "    r = a - q * b\n"
    "    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)\n"
    "\n"
    "\n"
    "@triton.jit\n"
    "def wk_irem(a, b):\n"
    "    r = a % b\n"
    "    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)\n"
    "\n"
    "\n"
    "# torch's floating floor division and remainder (div_floor, remainder)\n"
    "@triton.jit\n"
    "def wk_floordiv(a, b):\n"
    "    mod = libdevice.fmod(a, b)\n"
    "    div = (a - mod) / b\n"
    "    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)\n"
    "    fl = tl.floor(div)\n"
    "    fl = tl.where(div - fl > 0.5, fl + 1, fl)\n"
    "    fl = tl.where(div == 0, (a / b) * 0.0, fl)\n"
    "    return tl.where(b == 0, a / b, fl)\n"
    "\n"
    "\n"
    "@triton.jit\n"
    "def wk_rem(a, b):\n"
    "    mod = libdevice.fmod(a, b)\n"
    "    return tl.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)\n"
    "\n"
    "\n"
    "# torch's integer pow: repeated squaring, wrapping; negative exponents give\n"
    "# 0 except for bases 1 and -1\n"
    "@triton.jit\n"
    "def wk_ipow(b, e):\n"
    "    r = b * 0 + 1\n"
    "    x = b\n"
    "    k = e\n"
    "    for _ in tl.static_range(63):\n"
    "        r = tl.where((k & 1) != 0, r * x, r)\n"
    "        x = x * x\n"
    "        k = k >> 1\n"
    "    neg = tl.where(b == 1, b * 0 + 1, tl.where(b == -1, tl.where((e & 1) != 0, b, b * 0 + 1), b * 0))\n"
    "    return tl.where(e < 0, neg, r)\n"
    "\n"
    "\n";

const char *wk_cgen_triton_prelude(void) { return prelude; }

int wk_cgen_triton(const WkSchedule *S, const char *prefix, WkStr *out, WkTritonKernel **kernels, int *nkernels) {
    /* tl_compute() has no answer for complex: refused before any text */
    for (int b = 0; b < S->L->nbufs; b++)
        if (!tl_compute(S->L->bufs[b].dtype)) {
            wk_error_set("Triton codegen: buffer v%d has dtype %s, which no kernel computes", b,
                         wk_dtype_name(S->L->bufs[b].dtype));
            return -1;
        }
    TGen g;
    memset(&g, 0, sizeof g);
    g.S = S;
    demote_f64 = 1;
    for (int b = 0; b < S->L->nbufs; b++)
        if (S->L->bufs[b].value >= 0 && S->L->bufs[b].dtype == WK_F64 && S->L->bufs[b].op != WK_OP_SCALAR)
            demote_f64 = 0; /* (wrapped Python numbers are float64 scalars) */
    /* the plan's float64 temporaries then hold float32 (the runtime types
     * its pointers from the plan) */
    for (int b = 0; demote_f64 && b < S->nbufs; b++)
        if (S->bufs[b].kind == WK_BUF_TEMP && S->bufs[b].dtype == WK_F64) S->bufs[b].dtype = WK_F32;
    g.o = out;
    g.nexprs = S->L->nexprs + 1;
    g.xname = wk_xcalloc((size_t)g.nexprs, sizeof(char *));
    g.rname = wk_xcalloc((size_t)g.nexprs, sizeof(char *));
    g.raxis = wk_xmalloc((size_t)g.nexprs);
    memset(g.raxis, -1, (size_t)g.nexprs);
    int maxvar = 0;
    for (int k = 0; k < WK_MAX_DIMS; k++) {
        if (S->L->ivar_id[k] > maxvar) maxvar = S->L->ivar_id[k];
        if (S->L->rvar_id[k] > maxvar) maxvar = S->L->rvar_id[k];
    }
    g.nvars = maxvar + 1;
    if (g.nvars < S->L->xbind_cap) g.nvars = S->L->xbind_cap; /* indirect variables */
    g.vtext = wk_xcalloc((size_t)g.nvars, sizeof(char *));
    g.vaxis = wk_xcalloc((size_t)g.nvars, 1);
    g.stored_here = wk_xcalloc((size_t)S->nbufs + 1, 1);
    g.unsynced = wk_xcalloc((size_t)S->nbufs + 1, 1);
    WkTritonKernel *tks = wk_xcalloc((size_t)S->nkernels * 2 + 1, sizeof *tks); /* a split is two */
    int ntk = 0, rc = 0;
    /* alone[k]: kernel k is a function of its own (or of siblings): its
     * group is itself, or a group that is not one function */
    unsigned char *alone = wk_xcalloc((size_t)S->nkernels + 1, 1);
    for (int k = 0; k < S->nkernels;) {
        int last = k;
        while (last + 1 < S->nkernels && S->kernels[last + 1].group == k) last++;
        int fits = last > k && group_fits(S, k, last);
        for (int f = k; f <= last; f++) alone[f] = !fits;
        k = last + 1;
    }
    for (int k = 0; k < S->nkernels && rc == 0;) {
        int last = k;
        while (!alone[k] && last + 1 < S->nkernels && S->kernels[last + 1].group == k) last++;
        int nsib = alone[k] ? reduction_siblings(S, k, alone) : 1;
        if (alone[k]) last = k + nsib - 1;
        char name[128];
        snprintf(name, sizeof name, "%s_k%d", prefix, k);
        memset(g.raxis, -1, (size_t)g.nexprs);
        int two = 0;
        rc = gen_function(&g, k, last, nsib, name, &tks[ntk], &tks[ntk + 1], &two);
        ntk += 1 + two;
        k = last + 1;
    }
    free(alone);
    for (int i = 0; i < g.interned.len; i++) free(g.interned.data[i]);
    wk_vec_free(&g.interned);
    wk_vec_free(&g.stores);
    wk_vec_free(&g.load_keys);
    wk_vec_free(&g.load_names);
    clear_names(&g, g.xname);
    clear_names(&g, g.rname);
    free(g.xname);
    free(g.rname);
    free(g.raxis);
    free(g.vtext);
    free(g.vaxis);
    free(g.stored_here);
    free(g.unsynced);
    if (rc < 0) {
        for (int i = 0; i < ntk; i++) {
            free(tks[i].name);
            free(tks[i].params);
        }
        free(tks);
        *kernels = NULL;
        *nkernels = 0;
        return -1;
    }
    *kernels = tks;
    *nkernels = ntk;
    return 0;
}
