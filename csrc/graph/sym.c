/* sym.c — symbolic integer expressions: sizes, strides and loop indices.
 *
 * Every expression lives in a WkSymPool and is hash-consed there (an
 * open-addressing table keyed by kind, value, variable and operand
 * pointers), so structural equality is pointer equality.
 *
 * Canonical form, established by the constructors:
 *   - sums are flattened into terms `base * coeff` (coeff a constant); equal
 *     bases are merged, zero terms dropped, the terms sorted by structure and
 *     rebuilt left-deep, with the constant last:  ((a + b*4) + 3)
 *   - products are flattened the same way, their constant factor last:
 *     ((a * b) * 4); a constant times a sum is distributed over the sum
 *   - MIN/MAX put a constant operand last and fold nested constants
 *   - FLOORDIV/MOD fold constants (Python semantics), x//1 = x, x%1 = 0,
 *     split off the terms the divisor divides: (x*20 + y*5 + z + 7)//5 =
 *     x*4 + y + 1 + (z + 2)//5 and (x*20 + y*5 + z + 7)%5 = (z + 2)%5,
 *     (x//c1)//c2 = x//(c1*c2)
 * The order of operands depends only on structure and variable names (see
 * sym_cmp), so two graphs built in different orders print and hash the same.
 *
 * Every rewrite holds for all integer values of the variables; only the C
 * printer assumes variables are non-negative (they are sizes or loop
 * indices). Constant arithmetic wraps modulo 2^64 instead of overflowing. */
#include "graph.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct WkSymPool {
    WkArena *arena;
    const WkSym **slots; /* open addressing, linear probing; NULL = empty */
    size_t cap, count;   /* cap is a power of two */
    WkVec(const char *) names; /* interned variable names (arena strings) */
    WkVec(const WkSym *) vars; /* VAR node of each name */
};

/* ---- wrapping arithmetic on constants ---------------------------------- */
static int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

/* Python's floor division and modulo; b != 0. INT64_MIN // -1 wraps. */
static int64_t floordiv64(int64_t a, int64_t b) {
    if (b == -1) return (int64_t)(0 - (uint64_t)a);
    int64_t q = a / b, r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
static int64_t mod64(int64_t a, int64_t b) {
    if (b == -1) return 0;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

/* ---- pool and hash-consing --------------------------------------------- */
WkSymPool *wk_sympool_new(void) {
    WkSymPool *p = wk_xcalloc(1, sizeof *p);
    p->arena = wk_arena_new();
    p->cap = 64;
    p->slots = wk_xcalloc(p->cap, sizeof *p->slots);
    return p;
}

void wk_sympool_free(WkSymPool *p) {
    if (!p) return;
    free(p->slots);
    wk_vec_free(&p->names);
    wk_vec_free(&p->vars);
    wk_arena_free(p->arena);
    free(p);
}

static uint64_t sym_hash(WkSymKind kind, int64_t value, uint64_t name_hash, const WkSym *a,
                         const WkSym *b) {
    uint64_t h = wk_hash_mix(0x5ca1ab1e, (uint64_t)kind);
    h = wk_hash_mix(h, (uint64_t)value);
    h = wk_hash_mix(h, name_hash);
    h = wk_hash_mix(h, a ? a->hash : 0);
    return wk_hash_mix(h, b ? b->hash : 0);
}

static void pool_grow(WkSymPool *p) {
    size_t cap = p->cap * 2;
    const WkSym **slots = wk_xcalloc(cap, sizeof *slots);
    for (size_t i = 0; i < p->cap; i++) {
        const WkSym *s = p->slots[i];
        if (!s) continue;
        size_t j = (size_t)s->hash & (cap - 1);
        while (slots[j]) j = (j + 1) & (cap - 1);
        slots[j] = s;
    }
    free(p->slots);
    p->slots = slots;
    p->cap = cap;
}

/* The one place nodes are made: returns the existing equal node if any. */
static const WkSym *intern(WkSymPool *p, WkSymKind kind, int64_t value, int var, uint64_t name_hash,
                           const WkSym *a, const WkSym *b) {
    uint64_t h = sym_hash(kind, value, name_hash, a, b);
    size_t i = (size_t)h & (p->cap - 1);
    for (const WkSym *s; (s = p->slots[i]); i = (i + 1) & (p->cap - 1))
        if (s->hash == h && s->kind == kind && s->value == value && s->var == var && s->a == a &&
            s->b == b)
            return s;
    WkSym *s = wk_arena_alloc(p->arena, sizeof *s);
    s->kind = kind;
    s->value = value;
    s->var = var;
    s->a = a;
    s->b = b;
    s->hash = h;
    p->slots[i] = s;
    if (++p->count * 10 > p->cap * 7) pool_grow(p);
    return s;
}

const WkSym *wk_sym_const(WkSymPool *p, int64_t v) { return intern(p, WK_SYM_CONST, v, -1, 0, NULL, NULL); }

const WkSym *wk_sym_var(WkSymPool *p, const char *name) {
    for (int i = 0; i < p->names.len; i++)
        if (strcmp(p->names.data[i], name) == 0) return p->vars.data[i];
    int var = p->names.len;
    wk_vec_push(&p->names, wk_arena_strdup(p->arena, name));
    const WkSym *s = intern(p, WK_SYM_VAR, 0, var, wk_hash_bytes(name, strlen(name), 0), NULL, NULL);
    wk_vec_push(&p->vars, s);
    return s;
}

const char *wk_sym_var_name(const WkSymPool *p, int var) {
    return var >= 0 && var < p->names.len ? p->names.data[var] : "?";
}

int wk_sym_is_const(const WkSym *s, int64_t *out) {
    if (!s || s->kind != WK_SYM_CONST) return 0;
    if (out) *out = s->value;
    return 1;
}

/* The order of operands of commutative ops. It depends only on structure
 * and variable names, never on pool order or pointers, and reads well in
 * generated code: terms follow their leading variable in natural name order
 * (i0, i1, ..., i10), so a contiguous index prints (((i0 * 20) + (i1 * 5)) + i2). */
static int natcmp(const char *a, const char *b) {
    while (*a && *b) {
        if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
            const char *ea = a, *eb = b;
            while (isdigit((unsigned char)*ea)) ea++;
            while (isdigit((unsigned char)*eb)) eb++;
            if (ea - a != eb - b) return ea - a < eb - b ? -1 : 1;
            int c = strncmp(a, b, (size_t)(ea - a));
            if (c) return c;
            a = ea;
            b = eb;
        } else {
            if (*a != *b) return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
            a++;
            b++;
        }
    }
    return *a ? 1 : *b ? -1 : 0;
}

static const WkSym *lead_var(const WkSym *s) {
    if (!s || s->kind == WK_SYM_CONST) return NULL;
    if (s->kind == WK_SYM_VAR) return s;
    const WkSym *v = lead_var(s->a);
    return v ? v : lead_var(s->b);
}

static int sym_cmp(const WkSymPool *p, const WkSym *x, const WkSym *y) {
    if (x == y) return 0;
    if (!x || !y) return x ? 1 : -1;
    const WkSym *vx = lead_var(x), *vy = lead_var(y);
    if (vx != vy) {
        if (!vx || !vy) return vx ? 1 : -1;
        int c = natcmp(p->names.data[vx->var], p->names.data[vy->var]);
        if (c) return c;
    }
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->kind == WK_SYM_CONST) return x->value < y->value ? -1 : 1;
    int c = sym_cmp(p, x->a, y->a);
    return c ? c : sym_cmp(p, x->b, y->b);
}

/* Insertion sort: operand lists are short, and qsort has no context. */
#define SORT_BY(arr, n, T, KEY)                                               \
    for (int i_ = 1; i_ < (n); i_++) {                                        \
        T t_ = (arr)[i_];                                                     \
        int j_ = i_;                                                          \
        for (; j_ > 0 && sym_cmp(p, KEY((arr)[j_ - 1]), KEY(t_)) > 0; j_--)   \
            (arr)[j_] = (arr)[j_ - 1];                                        \
        (arr)[j_] = t_;                                                       \
    }
#define TERM_BASE(t) ((t).base)
#define SELF(x) (x)

/* ---- sums ---------------------------------------------------------------- */
typedef struct { const WkSym *base; int64_t coeff; } Term;
typedef WkVec(Term) TermVec;

static void split_term(const WkSym *s, const WkSym **base, int64_t *coeff) {
    if (s->kind == WK_SYM_MUL && s->b->kind == WK_SYM_CONST) {
        *base = s->a;
        *coeff = s->b->value;
    } else {
        *base = s;
        *coeff = 1;
    }
}

/* Appends s*scale to the term list; constants go to *k. */
static void collect_terms(const WkSym *s, int64_t scale, TermVec *terms, int64_t *k) {
    if (s->kind == WK_SYM_CONST) {
        *k = wadd(*k, wmul(s->value, scale));
    } else if (s->kind == WK_SYM_ADD) {
        collect_terms(s->a, scale, terms, k);
        collect_terms(s->b, scale, terms, k);
    } else {
        Term t;
        split_term(s, &t.base, &t.coeff);
        t.coeff = wmul(t.coeff, scale);
        wk_vec_push(terms, t);
    }
}

static const WkSym *build_sum(WkSymPool *p, TermVec *terms, int64_t k) {
    SORT_BY(terms->data, terms->len, Term, TERM_BASE);
    const WkSym *acc = NULL;
    for (int i = 0; i < terms->len;) {
        const WkSym *base = terms->data[i].base;
        int64_t c = 0;
        for (; i < terms->len && terms->data[i].base == base; i++) c = wadd(c, terms->data[i].coeff);
        if (c == 0) continue;
        const WkSym *t = c == 1 ? base : intern(p, WK_SYM_MUL, 0, -1, 0, base, wk_sym_const(p, c));
        acc = acc ? intern(p, WK_SYM_ADD, 0, -1, 0, acc, t) : t;
    }
    if (!acc) return wk_sym_const(p, k);
    if (k == 0) return acc;
    return intern(p, WK_SYM_ADD, 0, -1, 0, acc, wk_sym_const(p, k));
}

const WkSym *wk_sym_add(WkSymPool *p, const WkSym *a, const WkSym *b) {
    if (a->kind == WK_SYM_CONST && b->kind == WK_SYM_CONST) return wk_sym_const(p, wadd(a->value, b->value));
    if (b->kind == WK_SYM_CONST && b->value == 0) return a;
    if (a->kind == WK_SYM_CONST && a->value == 0) return b;
    TermVec terms = {0};
    int64_t k = 0;
    collect_terms(a, 1, &terms, &k);
    collect_terms(b, 1, &terms, &k);
    const WkSym *r = build_sum(p, &terms, k);
    wk_vec_free(&terms);
    return r;
}

/* ---- products ------------------------------------------------------------ */
static const WkSym *mul_const(WkSymPool *p, const WkSym *a, int64_t c) {
    if (c == 0) return wk_sym_const(p, 0);
    if (c == 1) return a;
    if (a->kind == WK_SYM_CONST) return wk_sym_const(p, wmul(a->value, c));
    if (a->kind == WK_SYM_ADD) { /* distribute, so index sums stay flat */
        TermVec terms = {0};
        int64_t k = 0;
        collect_terms(a, c, &terms, &k);
        const WkSym *r = build_sum(p, &terms, k);
        wk_vec_free(&terms);
        return r;
    }
    const WkSym *base;
    int64_t coeff;
    split_term(a, &base, &coeff);
    coeff = wmul(coeff, c);
    if (coeff == 0) return wk_sym_const(p, 0);
    if (coeff == 1) return base;
    return intern(p, WK_SYM_MUL, 0, -1, 0, base, wk_sym_const(p, coeff));
}

typedef WkVec(const WkSym *) SymVec;

static void collect_factors(const WkSym *s, SymVec *fs, int64_t *k) {
    if (s->kind == WK_SYM_CONST) {
        *k = wmul(*k, s->value);
    } else if (s->kind == WK_SYM_MUL) {
        collect_factors(s->a, fs, k);
        collect_factors(s->b, fs, k);
    } else {
        wk_vec_push(fs, s);
    }
}

const WkSym *wk_sym_mul(WkSymPool *p, const WkSym *a, const WkSym *b) {
    if (a->kind == WK_SYM_CONST) return mul_const(p, b, a->value);
    if (b->kind == WK_SYM_CONST) return mul_const(p, a, b->value);
    SymVec fs = {0};
    int64_t k = 1;
    collect_factors(a, &fs, &k);
    collect_factors(b, &fs, &k);
    SORT_BY(fs.data, fs.len, const WkSym *, SELF);
    const WkSym *acc = fs.data[0];
    for (int i = 1; i < fs.len; i++) acc = intern(p, WK_SYM_MUL, 0, -1, 0, acc, fs.data[i]);
    wk_vec_free(&fs);
    return mul_const(p, acc, k);
}

/* ---- division ------------------------------------------------------------ */
/* Splits a = c*Q + R, Q taking the terms whose coefficient c divides and the
 * floor quotient of the constant, so R's constant lies in [0, c). Then
 * a // c = Q + R // c and a % c = R % c for every value of the variables.
 * Returns 0 when nothing splits off. |c| >= 2. */
static int split_by(WkSymPool *p, const WkSym *a, int64_t c, const WkSym **q, const WkSym **r) {
    TermVec terms = {0}, qt = {0}, rt = {0};
    int64_t k = 0;
    collect_terms(a, 1, &terms, &k);
    for (int i = 0; i < terms.len; i++) {
        Term t = terms.data[i];
        if (t.coeff % c == 0) {
            t.coeff /= c;
            wk_vec_push(&qt, t);
        } else {
            wk_vec_push(&rt, t);
        }
    }
    int64_t kq = floordiv64(k, c), kr = mod64(k, c);
    int split = qt.len > 0 || kq != 0;
    if (split) {
        *q = build_sum(p, &qt, kq);
        *r = build_sum(p, &rt, kr);
    }
    wk_vec_free(&terms);
    wk_vec_free(&qt);
    wk_vec_free(&rt);
    return split;
}

const WkSym *wk_sym_floordiv(WkSymPool *p, const WkSym *a, const WkSym *b) {
    int64_t c, c1;
    const WkSym *q, *r;
    if (wk_sym_is_const(b, &c) && c != 0) {
        if (c == 1) return a;
        if (c == -1) return mul_const(p, a, -1);
        if (a->kind == WK_SYM_CONST) return wk_sym_const(p, floordiv64(a->value, c));
        if (split_by(p, a, c, &q, &r)) return wk_sym_add(p, q, wk_sym_floordiv(p, r, b));
        if (a->kind == WK_SYM_FLOORDIV && wk_sym_is_const(a->b, &c1) && c1 > 0 && c > 0 &&
            c1 <= INT64_MAX / c) /* (x // c1) // c = x // (c1 * c) */
            return intern(p, WK_SYM_FLOORDIV, 0, -1, 0, a->a, wk_sym_const(p, c1 * c));
    }
    return intern(p, WK_SYM_FLOORDIV, 0, -1, 0, a, b);
}

const WkSym *wk_sym_mod(WkSymPool *p, const WkSym *a, const WkSym *b) {
    int64_t c;
    const WkSym *q, *r;
    if (wk_sym_is_const(b, &c) && c != 0) {
        if (c == 1 || c == -1) return wk_sym_const(p, 0);
        if (a->kind == WK_SYM_CONST) return wk_sym_const(p, mod64(a->value, c));
        if (split_by(p, a, c, &q, &r)) return wk_sym_mod(p, r, b);
    }
    return intern(p, WK_SYM_MOD, 0, -1, 0, a, b);
}

/* ---- min / max ----------------------------------------------------------- */
static const WkSym *minmax(WkSymPool *p, WkSymKind kind, const WkSym *a, const WkSym *b) {
    int is_min = kind == WK_SYM_MIN;
    if (a == b) return a;
    if (a->kind == kind && (a->a == b || a->b == b)) return a; /* min(min(x, y), y) */
    if (b->kind == kind && (b->a == a || b->b == a)) return b;
    if (a->kind == WK_SYM_CONST && b->kind == WK_SYM_CONST)
        return (a->value < b->value) == is_min ? a : b;
    if (a->kind == WK_SYM_CONST || (b->kind != WK_SYM_CONST && sym_cmp(p, a, b) > 0)) {
        const WkSym *t = a;
        a = b;
        b = t;
    }
    /* min(min(x, c1), c2) = min(x, min(c1, c2)) */
    if (b->kind == WK_SYM_CONST && a->kind == kind && a->b->kind == WK_SYM_CONST)
        return minmax(p, kind, a->a, minmax(p, kind, a->b, b));
    return intern(p, kind, 0, -1, 0, a, b);
}

const WkSym *wk_sym_min(WkSymPool *p, const WkSym *a, const WkSym *b) { return minmax(p, WK_SYM_MIN, a, b); }
const WkSym *wk_sym_max(WkSymPool *p, const WkSym *a, const WkSym *b) { return minmax(p, WK_SYM_MAX, a, b); }

/* ---- simplification within loop bounds ---------------------------------
 * The constructors' rewrites hold for every integer value; these need the
 * ranges of the loop variables, which only the caller knows. A view chain
 * (reshape of a permute of a reshape ...) composes into divisions and
 * remainders of loop indices that cancel once ranges are known:
 *   (i + r*1024) // 65536 = r // 64          when 0 <= i < 1024
 *   (r // 64)*65536 + (r % 64)*1024 = r*1024 (always)
 * and so become affine again, which fusion needs to collapse loops and pick
 * the loop order of a reduction. */
typedef struct { int known; int64_t lo, hi; } Range;
typedef struct {
    WkSymPool *p;
    const int *vars;
    const int64_t *extents;
    int n;
} Bounds;

static Range range_unknown(void) { Range r = {0, 0, 0}; return r; }
static Range range_of(const Bounds *B, const WkSym *s);

static Range range_mul(Range x, Range y) {
    if (!x.known || !y.known) return range_unknown();
    int64_t c[4];
    if (__builtin_mul_overflow(x.lo, y.lo, &c[0]) || __builtin_mul_overflow(x.lo, y.hi, &c[1]) ||
        __builtin_mul_overflow(x.hi, y.lo, &c[2]) || __builtin_mul_overflow(x.hi, y.hi, &c[3]))
        return range_unknown();
    Range r = {1, c[0], c[0]};
    for (int k = 1; k < 4; k++) {
        if (c[k] < r.lo) r.lo = c[k];
        if (c[k] > r.hi) r.hi = c[k];
    }
    return r;
}

static Range range_of(const Bounds *B, const WkSym *s) {
    Range r = range_unknown(), x, y;
    int64_t c;
    switch (s->kind) {
    case WK_SYM_CONST: r.known = 1; r.lo = r.hi = s->value; return r;
    case WK_SYM_VAR:
        for (int k = 0; k < B->n; k++)
            if (B->vars[k] == s->var) {
                r.known = 1;
                r.hi = B->extents[k] > 0 ? B->extents[k] - 1 : 0;
                return r;
            }
        return r;
    default: break;
    }
    x = range_of(B, s->a);
    y = range_of(B, s->b);
    switch (s->kind) {
    case WK_SYM_ADD:
        if (x.known && y.known && !__builtin_add_overflow(x.lo, y.lo, &r.lo) && !__builtin_add_overflow(x.hi, y.hi, &r.hi))
            r.known = 1;
        return r;
    case WK_SYM_MUL: return range_mul(x, y);
    case WK_SYM_FLOORDIV:
        if (x.known && wk_sym_is_const(s->b, &c) && c > 0) {
            r.known = 1;
            r.lo = floordiv64(x.lo, c);
            r.hi = floordiv64(x.hi, c);
        }
        return r;
    case WK_SYM_MOD:
        if (wk_sym_is_const(s->b, &c) && c > 0) {
            if (x.known && x.lo >= 0 && x.hi < c) return x;
            r.known = 1;
            r.hi = c - 1;
        }
        return r;
    case WK_SYM_MIN:
    case WK_SYM_MAX:
        if (x.known && y.known) {
            int mn = s->kind == WK_SYM_MIN;
            r.known = 1;
            r.lo = (x.lo < y.lo) == mn ? x.lo : y.lo;
            r.hi = (x.hi < y.hi) == mn ? x.hi : y.hi;
        }
        return r;
    default: return r;
    }
}

/* Splits a's terms into k*U (coefficients k divides) and T (the rest, with
 * the constant) when 0 <= T < k, for the largest such k among the terms'
 * coefficients that divides c (1 < k < c). Then
 *   a // c = U // (c/k)   and   a % c = k*(U % (c/k)) + T. */
static int split_small(const Bounds *B, const WkSym *a, int64_t c, int64_t *k_out, const WkSym **u,
                       const WkSym **t) {
    TermVec terms = {0}, ut = {0}, tt = {0};
    int64_t k0 = 0, best = 0;
    collect_terms(a, 1, &terms, &k0);
    for (int i = 0; i < terms.len; i++) {
        int64_t k = terms.data[i].coeff;
        if (k <= best || k <= 1 || k >= c || c % k != 0) continue;
        ut.len = tt.len = 0;
        for (int j = 0; j < terms.len; j++) {
            Term tm = terms.data[j];
            if (tm.coeff % k == 0) {
                tm.coeff /= k;
                wk_vec_push(&ut, tm);
            } else {
                wk_vec_push(&tt, tm);
            }
        }
        Range rt = range_of(B, build_sum(B->p, &tt, k0));
        if (rt.known && rt.lo >= 0 && rt.hi < k) best = k;
    }
    if (best) {
        ut.len = tt.len = 0;
        for (int j = 0; j < terms.len; j++) {
            Term tm = terms.data[j];
            if (tm.coeff % best == 0) {
                tm.coeff /= best;
                wk_vec_push(&ut, tm);
            } else {
                wk_vec_push(&tt, tm);
            }
        }
        *k_out = best;
        *u = build_sum(B->p, &ut, 0);
        *t = build_sum(B->p, &tt, k0);
    }
    wk_vec_free(&terms);
    wk_vec_free(&ut);
    wk_vec_free(&tt);
    return best != 0;
}

/* (x // m)*(c*m) + (x % m)*c = x*c, for every x (m > 0). */
static const WkSym *recombine_sum(WkSymPool *p, const WkSym *s) {
    TermVec terms = {0};
    int64_t k = 0, m;
    collect_terms(s, 1, &terms, &k);
    int changed = 0;
    for (int i = 0; i < terms.len; i++) {
        const WkSym *q = terms.data[i].base;
        if (q->kind != WK_SYM_FLOORDIV || !wk_sym_is_const(q->b, &m) || m <= 0) continue;
        for (int j = 0; j < terms.len; j++) {
            const WkSym *r = terms.data[j].base;
            int64_t prod;
            if (j == i || r->kind != WK_SYM_MOD || r->a != q->a || r->b != q->b) continue;
            if (__builtin_mul_overflow(terms.data[j].coeff, m, &prod) || prod != terms.data[i].coeff) continue;
            terms.data[i].base = q->a; /* x * c, and the remainder term goes */
            terms.data[i].coeff = terms.data[j].coeff;
            terms.data[j] = terms.data[--terms.len];
            changed = 1;
            i = -1; /* the new term may pair again: (x//m2)... */
            break;
        }
    }
    const WkSym *out = changed ? build_sum(p, &terms, k) : s;
    wk_vec_free(&terms);
    return out;
}

static const WkSym *simplify_bounded(const Bounds *B, const WkSym *s) {
    WkSymPool *p = B->p;
    int64_t c, k;
    const WkSym *a, *b, *u, *t;
    if (s->kind == WK_SYM_CONST || s->kind == WK_SYM_VAR) return s;
    a = simplify_bounded(B, s->a);
    b = simplify_bounded(B, s->b);
    switch (s->kind) {
    case WK_SYM_ADD: {
        const WkSym *sum = wk_sym_add(p, a, b);
        const WkSym *re = recombine_sum(p, sum);
        return re == sum ? sum : simplify_bounded(B, re);
    }
    case WK_SYM_MUL: return wk_sym_mul(p, a, b);
    case WK_SYM_FLOORDIV:
    case WK_SYM_MOD: {
        int div = s->kind == WK_SYM_FLOORDIV;
        const WkSym *plain = div ? wk_sym_floordiv(p, a, b) : wk_sym_mod(p, a, b);
        if (!wk_sym_is_const(b, &c) || c <= 0 || plain->kind != s->kind) return plain;
        a = plain->a; /* the constructor may have split terms off */
        Range ra = range_of(B, a);
        if (ra.known && floordiv64(ra.lo, c) == floordiv64(ra.hi, c)) { /* one period */
            int64_t q = floordiv64(ra.lo, c);
            return div ? wk_sym_const(p, q) : wk_sym_add(p, a, wk_sym_const(p, -q * c));
        }
        if (!split_small(B, a, c, &k, &u, &t)) return plain;
        const WkSym *m = wk_sym_const(p, c / k);
        if (div) return simplify_bounded(B, wk_sym_floordiv(p, u, m));
        return simplify_bounded(B, wk_sym_add(p, wk_sym_mul(p, wk_sym_mod(p, u, m), wk_sym_const(p, k)), t));
    }
    case WK_SYM_MIN:
    case WK_SYM_MAX: {
        Range x = range_of(B, a), y = range_of(B, b);
        int mn = s->kind == WK_SYM_MIN;
        if (x.known && y.known && x.hi <= y.lo) return mn ? a : b;
        if (x.known && y.known && y.hi <= x.lo) return mn ? b : a;
        return mn ? wk_sym_min(p, a, b) : wk_sym_max(p, a, b);
    }
    default: return s;
    }
}

const WkSym *wk_sym_simplify_bounded(WkSymPool *p, const WkSym *s, const int *vars, const int64_t *extents,
                                     int n) {
    Bounds B = {p, vars, extents, n};
    return simplify_bounded(&B, s);
}

/* ---- evaluation ---------------------------------------------------------- */
int64_t wk_sym_eval(const WkSym *s, const int64_t *values) {
    int64_t x, y;
    switch (s->kind) {
    case WK_SYM_CONST: return s->value;
    case WK_SYM_VAR: return values ? values[s->var] : 0;
    default: break;
    }
    x = wk_sym_eval(s->a, values);
    y = wk_sym_eval(s->b, values);
    switch (s->kind) {
    case WK_SYM_ADD: return wadd(x, y);
    case WK_SYM_MUL: return wmul(x, y);
    case WK_SYM_FLOORDIV: return y ? floordiv64(x, y) : 0; /* b > 0 by contract */
    case WK_SYM_MOD: return y ? mod64(x, y) : 0;
    case WK_SYM_MIN: return x < y ? x : y;
    case WK_SYM_MAX: return x > y ? x : y;
    default: return 0;
    }
}

/* ---- C printing -----------------------------------------------------------
 * Every binary node is parenthesised; integer arithmetic is int64_t (the code
 * generator declares its variables int64_t; literals beyond int range get
 * type long on LP64 targets by C's rules). Divisors are > 0 (the contract).
 *   a + b        (a + b)        and (a - c) for a negative constant c
 *   a * b        (a * b)
 *   a // b       (a / b)        when a is provably >= 0 (variables are sizes
 *                               or loop indices, so they are; so are sums,
 *                               products, //, min, max of non-negatives, and
 *                               any % by a positive divisor)
 *                (a / b - (a % b < 0))          otherwise: floor division
 *   a % b        (a % b)        when a is provably >= 0
 *                (a % b + (a % b < 0 ? b : 0))  otherwise: Python's modulo
 *   min(a, b)    (a < b ? a : b)   max likewise with >
 * An operand that appears twice above and is not a variable or a constant is
 * bound once, in a GNU statement expression (gcc and clang, -std=gnu11):
 *   ({ int64_t _wk0a = (x + y); (_wk0a < 3 ? _wk0a : 3); })
 * so the text stays linear in the size of the expression. */
static int nonneg(const WkSym *s) {
    switch (s->kind) {
    case WK_SYM_CONST: return s->value >= 0;
    case WK_SYM_VAR: return 1;
    case WK_SYM_MOD: return nonneg(s->b);
    case WK_SYM_MAX: return nonneg(s->a) || nonneg(s->b);
    default: return nonneg(s->a) && nonneg(s->b);
    }
}

typedef struct {
    const WkSymPool *p;
    WkStr *out;
    const char *(*var_name)(void *ctx, int var);
    void *ctx;
    int temps; /* statement-expression temporaries named so far */
} CPrint;

static void print_c(CPrint *cp, const WkSym *s);

static int is_leaf(const WkSym *s) { return s->kind == WK_SYM_CONST || s->kind == WK_SYM_VAR; }

/* Prints `tmpl` with '@' standing for a and '#' for b. */
static void print_template(CPrint *cp, const char *tmpl, const WkSym *a, const WkSym *b) {
    WkStr *o = cp->out;
    int uses_a = 0, uses_b = 0, n = cp->temps;
    for (const char *t = tmpl; *t; t++) {
        uses_a += *t == '@';
        uses_b += *t == '#';
    }
    int bind_a = uses_a > 1 && !is_leaf(a), bind_b = uses_b > 1 && !is_leaf(b);
    if (bind_a || bind_b) {
        cp->temps++;
        wk_str_append(o, "({ int64_t ");
        if (bind_a) {
            wk_str_printf(o, "_wk%da = ", n);
            print_c(cp, a);
        }
        if (bind_b) {
            wk_str_printf(o, "%s_wk%db = ", bind_a ? ", " : "", n);
            print_c(cp, b);
        }
        wk_str_append(o, "; ");
    }
    for (const char *t = tmpl; *t; t++) {
        if (*t == '@' && bind_a) wk_str_printf(o, "_wk%da", n);
        else if (*t == '@') print_c(cp, a);
        else if (*t == '#' && bind_b) wk_str_printf(o, "_wk%db", n);
        else if (*t == '#') print_c(cp, b);
        else wk_str_printf(o, "%c", *t);
    }
    if (bind_a || bind_b) wk_str_append(o, "; })");
}

static void print_c(CPrint *cp, const WkSym *s) {
    WkStr *o = cp->out;
    switch (s->kind) {
    case WK_SYM_CONST:
        if (s->value == INT64_MIN) wk_str_append(o, "(-9223372036854775807L - 1)");
        else wk_str_printf(o, "%" PRId64, s->value);
        return;
    case WK_SYM_VAR:
        wk_str_append(o, cp->var_name ? cp->var_name(cp->ctx, s->var) : wk_sym_var_name(cp->p, s->var));
        return;
    case WK_SYM_ADD:
        if (s->b->kind == WK_SYM_CONST && s->b->value < 0 && s->b->value != INT64_MIN) {
            wk_str_append(o, "(");
            print_c(cp, s->a);
            wk_str_printf(o, " - %" PRId64 ")", -s->b->value);
            return;
        }
        print_template(cp, "(@ + #)", s->a, s->b);
        return;
    case WK_SYM_MUL: print_template(cp, "(@ * #)", s->a, s->b); return;
    case WK_SYM_FLOORDIV:
        print_template(cp, nonneg(s->a) ? "(@ / #)" : "(@ / # - (@ % # < 0))", s->a, s->b);
        return;
    case WK_SYM_MOD:
        print_template(cp, nonneg(s->a) ? "(@ % #)" : "(@ % # + (@ % # < 0 ? # : 0))", s->a, s->b);
        return;
    case WK_SYM_MIN: print_template(cp, "(@ < # ? @ : #)", s->a, s->b); return;
    case WK_SYM_MAX: print_template(cp, "(@ > # ? @ : #)", s->a, s->b); return;
    }
}

void wk_sym_to_c(const WkSymPool *p, const WkSym *s, WkStr *out,
                 const char *(*var_name)(void *ctx, int var), void *ctx) {
    CPrint cp = {p, out, var_name, ctx, 0};
    print_c(&cp, s);
}
