/* test_graph_sym.c — symbolic integers (csrc/graph/sym.c): hash-consing,
 * canonical forms, simplifications, evaluation and the C they print. */
#include "graph/graph.h"

#include <stdlib.h>
#include <unistd.h>

#include "check.h"

static WkSymPool *P;

static WkStr printed;
static const char *c_of(const WkSym *s) {
    printed.len = 0;
    wk_str_append(&printed, "");
    wk_sym_to_c(P, s, &printed, NULL, NULL);
    return printed.data;
}

#define CHECK_C(sym, text)                                                        \
    do {                                                                          \
        const char *got_ = c_of(sym);                                             \
        check_count++;                                                            \
        if (strcmp(got_, text) != 0) {                                            \
            fprintf(stderr, "%s:%d: C of %s: got \"%s\", want \"%s\"\n", __FILE__, \
                    __LINE__, #sym, got_, text);                                  \
            check_failures++;                                                     \
        }                                                                         \
    } while (0)

static const WkSym *K(int64_t v) { return wk_sym_const(P, v); }
static const WkSym *ADD(const WkSym *a, const WkSym *b) { return wk_sym_add(P, a, b); }
static const WkSym *MUL(const WkSym *a, const WkSym *b) { return wk_sym_mul(P, a, b); }
static const WkSym *DIV(const WkSym *a, const WkSym *b) { return wk_sym_floordiv(P, a, b); }
static const WkSym *MOD(const WkSym *a, const WkSym *b) { return wk_sym_mod(P, a, b); }
static const WkSym *MIN(const WkSym *a, const WkSym *b) { return wk_sym_min(P, a, b); }
static const WkSym *MAX(const WkSym *a, const WkSym *b) { return wk_sym_max(P, a, b); }

static int64_t pyfloordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static int64_t pymod(int64_t a, int64_t b) { return a - pyfloordiv(a, b) * b; }

static void test_consing(void) {
    const WkSym *x = wk_sym_var(P, "x"), *y = wk_sym_var(P, "y");
    CHECK(x == wk_sym_var(P, "x"));
    CHECK(x != y);
    CHECK(K(5) == K(5));
    CHECK(K(5) != K(6));
    CHECK(x->kind == WK_SYM_VAR);
    CHECK(strcmp(wk_sym_var_name(P, x->var), "x") == 0);
    CHECK(strcmp(wk_sym_var_name(P, y->var), "y") == 0);
    /* the name is copied */
    char name[8] = "zz";
    const WkSym *z = wk_sym_var(P, name);
    name[0] = 'q';
    CHECK(wk_sym_var(P, "zz") == z);
    CHECK(strcmp(wk_sym_var_name(P, z->var), "zz") == 0);
    CHECK(ADD(x, y) == ADD(x, y));
    CHECK(ADD(x, y) == ADD(y, x)); /* commutative ops are canonical */
    CHECK(MUL(x, y) == MUL(y, x));
    CHECK(MIN(x, y) == MIN(y, x));
    CHECK(MAX(x, K(3)) == MAX(K(3), x));
    CHECK(ADD(ADD(x, y), z) == ADD(x, ADD(z, y)));
    CHECK(MUL(MUL(x, y), z) == MUL(z, MUL(y, x)));
    CHECK(DIV(x, y) != DIV(y, x));
    int64_t v;
    CHECK(wk_sym_is_const(K(-7), &v) && v == -7);
    CHECK(!wk_sym_is_const(x, &v));
    CHECK(!wk_sym_is_const(NULL, &v));
    /* many distinct nodes: the table grows and keeps identity */
    const WkSym *first[2000];
    for (int i = 0; i < 2000; i++) first[i] = ADD(MUL(x, K(i + 2)), K(i));
    int same = 1;
    for (int i = 0; i < 2000; i++) same &= first[i] == ADD(K(i), MUL(K(i + 2), x));
    CHECK(same);
}

static void test_simplify(void) {
    const WkSym *x = wk_sym_var(P, "x"), *y = wk_sym_var(P, "y");
    CHECK(ADD(K(2), K(3)) == K(5));
    CHECK(MUL(K(4), K(-3)) == K(-12));
    CHECK(ADD(x, K(0)) == x);
    CHECK(ADD(K(0), x) == x);
    CHECK(MUL(x, K(1)) == x);
    CHECK(MUL(K(1), x) == x);
    CHECK(MUL(x, K(0)) == K(0));
    CHECK(MUL(K(0), MUL(x, y)) == K(0));
    CHECK(ADD(ADD(x, K(2)), K(3)) == ADD(x, K(5)));     /* a+c1+c2 */
    CHECK(ADD(ADD(K(2), x), ADD(y, K(-2))) == ADD(x, y));
    CHECK(MUL(MUL(x, K(3)), K(4)) == MUL(x, K(12)));   /* (a*c1)*c2 */
    CHECK(MUL(K(4), MUL(K(3), x)) == MUL(x, K(12)));
    CHECK(MUL(MUL(x, K(3)), MUL(y, K(2))) == MUL(MUL(x, y), K(6)));
    CHECK(ADD(x, x) == MUL(x, K(2)));                   /* like terms */
    CHECK(ADD(MUL(x, K(3)), MUL(x, K(-3))) == K(0));
    CHECK(ADD(ADD(MUL(x, K(4)), y), MUL(x, K(-4))) == y);
    CHECK(MUL(ADD(x, K(3)), K(4)) == ADD(MUL(x, K(4)), K(12))); /* distributed */
    CHECK(MUL(ADD(x, y), K(0)) == K(0));
    /* floordiv / mod */
    CHECK(DIV(K(7), K(2)) == K(3));
    CHECK(DIV(K(-7), K(2)) == K(-4));  /* Python floor semantics */
    CHECK(DIV(K(7), K(-2)) == K(-4));
    CHECK(MOD(K(7), K(3)) == K(1));
    CHECK(MOD(K(-7), K(3)) == K(2));
    CHECK(MOD(K(7), K(-3)) == K(-2));
    CHECK(DIV(x, K(1)) == x);
    CHECK(MOD(x, K(1)) == K(0));
    CHECK(DIV(MUL(x, K(12)), K(4)) == MUL(x, K(3)));
    CHECK(DIV(MUL(x, K(4)), K(4)) == x);
    CHECK(MOD(MUL(x, K(12)), K(4)) == K(0));
    CHECK(DIV(MUL(x, K(6)), K(4)) != MUL(x, K(1)));     /* 6 is not a multiple of 4 */
    CHECK(DIV(DIV(x, K(3)), K(5)) == DIV(x, K(15)));
    CHECK(DIV(x, K(-1)) == MUL(x, K(-1)));
    /* terms the divisor divides split off */
    const WkSym *i0 = wk_sym_var(P, "i0"), *i1 = wk_sym_var(P, "i1"), *i2 = wk_sym_var(P, "i2");
    const WkSym *flat = ADD(ADD(MUL(i0, K(20)), MUL(i1, K(5))), i2);
    CHECK(DIV(flat, K(5)) == ADD(ADD(MUL(i0, K(4)), i1), DIV(i2, K(5))));
    CHECK(MOD(flat, K(5)) == MOD(i2, K(5)));
    CHECK(DIV(ADD(MUL(x, K(4)), K(3)), K(4)) == x);
    CHECK(DIV(ADD(MUL(x, K(4)), K(7)), K(4)) == ADD(x, K(1)));
    CHECK(MOD(ADD(MUL(x, K(4)), K(7)), K(4)) == K(3));
    CHECK(DIV(ADD(x, K(-1)), K(4)) == ADD(DIV(ADD(x, K(3)), K(4)), K(-1)));
    CHECK(MOD(ADD(x, K(9)), K(4)) == MOD(ADD(x, K(1)), K(4)));
    CHECK(DIV(ADD(x, K(3)), K(4))->kind == WK_SYM_FLOORDIV);
    CHECK(MOD(x, y)->kind == WK_SYM_MOD);
    /* min / max */
    CHECK(MIN(K(3), K(5)) == K(3));
    CHECK(MAX(K(3), K(5)) == K(5));
    CHECK(MIN(K(-3), K(-5)) == K(-5));
    CHECK(MIN(x, x) == x);
    CHECK(MIN(MIN(x, K(7)), K(4)) == MIN(x, K(4)));
    CHECK(MAX(MAX(x, K(7)), K(4)) == MAX(x, K(7)));
    CHECK(MIN(MIN(x, y), y) == MIN(x, y));
    /* the constant is last */
    const WkSym *s = ADD(K(3), x);
    CHECK(s->kind == WK_SYM_ADD && s->b == K(3) && s->a == x);
    const WkSym *m = MUL(K(3), x);
    CHECK(m->kind == WK_SYM_MUL && m->b == K(3) && m->a == x);
    const WkSym *mn = MIN(K(3), x);
    CHECK(mn->kind == WK_SYM_MIN && mn->b == K(3));
    /* wrapping constant arithmetic, no UB */
    CHECK(ADD(K(INT64_MAX), K(1)) == K(INT64_MIN));
    CHECK(DIV(K(INT64_MIN), K(-1)) == K(INT64_MIN));
    CHECK(MOD(K(INT64_MIN), K(-1)) == K(0));
}

static void test_eval(void) {
    const WkSym *x = wk_sym_var(P, "x"), *y = wk_sym_var(P, "y");
    int64_t vals[16] = {0};
    int xi = x->var, yi = y->var;
    const WkSym *e = ADD(MUL(DIV(x, K(3)), y), MOD(ADD(x, K(-10)), K(4)));
    const WkSym *f = MAX(MIN(x, y), K(2));
    const WkSym *h = DIV(ADD(x, K(-10)), K(4));
    int ok = 1;
    for (int64_t a = -20; a <= 20; a++)
        for (int64_t b = -5; b <= 5; b++) {
            vals[xi] = a;
            vals[yi] = b;
            int64_t want = pyfloordiv(a, 3) * b + pymod(a - 10, 4);
            ok &= wk_sym_eval(e, vals) == want;
            int64_t mn = a < b ? a : b;
            ok &= wk_sym_eval(f, vals) == (mn > 2 ? mn : 2);
            ok &= wk_sym_eval(h, vals) == pyfloordiv(a - 10, 4);
        }
    CHECK(ok);
    CHECK(wk_sym_eval(K(42), NULL) == 42);
    vals[xi] = 9;
    vals[yi] = 7;
    CHECK(wk_sym_eval(MOD(x, y), vals) == 2);
    CHECK(wk_sym_eval(DIV(x, y), vals) == 1);
}

static const char *rename_var(void *ctx, int var) {
    (void)ctx;
    static const char *names[] = {"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"};
    return var < 8 ? names[var] : "iN";
}

static void test_to_c(void) {
    const WkSym *x = wk_sym_var(P, "x"), *y = wk_sym_var(P, "y");
    CHECK_C(K(5), "5");
    CHECK_C(K(-5), "-5");
    CHECK_C(K(INT64_MIN), "(-9223372036854775807L - 1)");
    CHECK_C(x, "x");
    CHECK_C(ADD(x, K(3)), "(x + 3)");
    CHECK_C(ADD(x, K(-3)), "(x - 3)");
    CHECK_C(MUL(K(4), x), "(x * 4)");
    CHECK_C(MUL(x, K(-4)), "(x * -4)");
    /* non-negative dividend: plain C division and remainder */
    CHECK_C(DIV(x, K(4)), "(x / 4)");
    CHECK_C(MOD(ADD(x, K(1)), K(4)), "((x + 1) % 4)");
    CHECK_C(DIV(x, y), "(x / y)");
    /* possibly negative dividend: floor semantics spelled out */
    const WkSym *neg = ADD(MUL(x, K(-1)), y); /* y - x may be negative */
    CHECK_C(DIV(neg, K(4)), "({ int64_t _wk0a = ((x * -1) + y); (_wk0a / 4 - (_wk0a % 4 < 0)); })");
    CHECK_C(MOD(neg, K(4)), "({ int64_t _wk0a = ((x * -1) + y); (_wk0a % 4 + (_wk0a % 4 < 0 ? 4 : 0)); })");
    CHECK_C(MIN(neg, ADD(x, y)),
            "({ int64_t _wk0a = (x + y), _wk0b = ((x * -1) + y); (_wk0a < _wk0b ? _wk0a : _wk0b); })");
    CHECK_C(MAX(MIN(ADD(x, y), K(3)), x),
            "({ int64_t _wk0b = ({ int64_t _wk1a = (x + y); (_wk1a < 3 ? _wk1a : 3); }); (x > _wk0b ? x : _wk0b); })");
    CHECK_C(MUL(MIN(x, y), K(3)), "((x < y ? x : y) * 3)");
    CHECK_C(DIV(MOD(neg, K(5)), K(2)), "(({ int64_t _wk0a = ((x * -1) + y); (_wk0a % 5 + (_wk0a % 5 < 0 ? 5 : 0)); }) / 2)");
    /* a negative constant in the dividend is split off, so the rest is non-negative */
    CHECK_C(DIV(ADD(x, K(-1)), K(4)), "(((x + 3) / 4) - 1)");
    CHECK_C(MOD(ADD(x, K(-1)), K(4)), "((x + 3) % 4)");
    CHECK_C(MIN(x, K(3)), "(x < 3 ? x : 3)");
    CHECK_C(MAX(x, K(3)), "(x > 3 ? x : 3)");
    WkStr out = {0};
    wk_sym_to_c(P, ADD(MUL(x, K(8)), y), &out, rename_var, NULL);
    CHECK(out.data && strcmp(out.data, "((i0 * 8) + i1)") == 0);
    wk_str_free(&out);
    /* terms follow their leading variable in natural name order */
    const WkSym *i0 = wk_sym_var(P, "i0"), *i2 = wk_sym_var(P, "i2"), *i10 = wk_sym_var(P, "i10");
    CHECK_C(ADD(i2, ADD(MUL(i10, K(3)), MUL(K(20), i0))), "(((i0 * 20) + i2) + (i10 * 3))");
    CHECK_C(ADD(ADD(K(7), i10), MUL(ADD(i2, K(1)), K(5))), "(((i2 * 5) + i10) + 12)");
    CHECK_C(MUL(i10, MUL(i2, K(3))), "((i2 * i10) * 3)");
    CHECK_C(ADD(DIV(i2, K(4)), MOD(i0, K(4))), "((i0 % 4) + (i2 / 4))");
    CHECK_C(MIN(i2, i0), "(i0 < i2 ? i0 : i2)");
    /* a sum prints its constant last, whatever order it was built in */
    char first[128];
    snprintf(first, sizeof first, "%s", c_of(ADD(K(2), ADD(y, x))));
    CHECK(strcmp(first, c_of(ADD(ADD(x, K(2)), y))) == 0);
    CHECK(strstr(first, " + 2)") != NULL);
}

/* Canonical order depends on structure, not on the order a pool saw names. */
static void test_pool_independent(void) {
    WkSymPool *p1 = wk_sympool_new(), *p2 = wk_sympool_new();
    const WkSym *a1 = wk_sym_var(p1, "a"), *b1 = wk_sym_var(p1, "b");
    const WkSym *b2 = wk_sym_var(p2, "b"), *a2 = wk_sym_var(p2, "a");
    const WkSym *e1 = wk_sym_add(p1, wk_sym_mul(p1, a1, wk_sym_const(p1, 3)), b1);
    const WkSym *e2 = wk_sym_add(p2, b2, wk_sym_mul(p2, wk_sym_const(p2, 3), a2));
    CHECK(e1->hash == e2->hash);
    WkStr s1 = {0}, s2 = {0};
    wk_sym_to_c(p1, e1, &s1, NULL, NULL);
    wk_sym_to_c(p2, e2, &s2, NULL, NULL);
    CHECK(strcmp(s1.data, s2.data) == 0);
    wk_str_free(&s1);
    wk_str_free(&s2);
    wk_sympool_free(p1);
    wk_sympool_free(p2);
    wk_sympool_free(NULL);
}

/* ---- random expressions: simplification is sound, printed C agrees -------- */
enum { NVARS = 4, NASSIGN = 64 };
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static int64_t rnd(int64_t lo, int64_t hi) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (int64_t)(rng % (uint64_t)(hi - lo + 1));
}

/* Builds a random expression through the simplifying constructors and, next
 * to it, its value under each assignment by plain (Python-semantics) math. */
static const WkSym *gen(int depth, int64_t assign[NASSIGN][NVARS], int64_t *ref) {
    static const char *names[NVARS] = {"v0", "v1", "v2", "v10"};
    int kind = depth <= 0 ? (int)rnd(0, 1) : (int)rnd(0, 8);
    if (kind == 0) {
        int64_t c = rnd(-6, 9);
        for (int n = 0; n < NASSIGN; n++) ref[n] = c;
        return K(c);
    }
    if (kind == 1) {
        int v = (int)rnd(0, NVARS - 1);
        for (int n = 0; n < NASSIGN; n++) ref[n] = assign[n][v];
        return wk_sym_var(P, names[v]);
    }
    int64_t ra[NASSIGN], rb[NASSIGN];
    const WkSym *a = gen(depth - 1, assign, ra), *b;
    if (kind == 5 || kind == 6) { /* divisors are positive constants */
        int64_t c = rnd(1, 7);
        if (rnd(0, 1)) { /* often make the dividend negative, to exercise floor semantics */
            int v = (int)rnd(0, NVARS - 1);
            int64_t k = -rnd(1, 4);
            a = ADD(a, MUL(wk_sym_var(P, names[v]), K(k)));
            for (int n = 0; n < NASSIGN; n++) ra[n] += k * assign[n][v];
        }
        for (int n = 0; n < NASSIGN; n++) ref[n] = kind == 5 ? pyfloordiv(ra[n], c) : pymod(ra[n], c);
        return kind == 5 ? DIV(a, K(c)) : MOD(a, K(c));
    }
    b = gen(kind == 4 ? 0 : depth - 1, assign, rb); /* products stay small */
    for (int n = 0; n < NASSIGN; n++) {
        int64_t x = ra[n], y = rb[n];
        ref[n] = kind == 2 || kind == 3 ? x + y : kind == 4 ? x * y : kind == 7 ? (x < y ? x : y) : (x > y ? x : y);
    }
    switch (kind) {
    case 2: case 3: return ADD(a, b);
    case 4: return MUL(a, b);
    case 7: return MIN(a, b);
    default: return MAX(a, b);
    }
}

static void fill_assign(int64_t assign[NASSIGN][NVARS], int64_t lo, int64_t hi) {
    for (int n = 0; n < NASSIGN; n++)
        for (int v = 0; v < NVARS; v++) assign[n][v] = rnd(lo, hi);
}

static int64_t eval_assign(const WkSym *e, const int64_t *assign) {
    static const char *names[NVARS] = {"v0", "v1", "v2", "v10"};
    int64_t vals[64] = {0};
    for (int v = 0; v < NVARS; v++) vals[wk_sym_var(P, names[v])->var] = assign[v];
    return wk_sym_eval(e, vals);
}

static void test_fuzz_eval(void) {
    int64_t assign[NASSIGN][NVARS], ref[NASSIGN];
    int bad = 0;
    fill_assign(assign, -25, 25); /* the rewrites hold for negative values too */
    for (int i = 0; i < 3000; i++) {
        const WkSym *e = gen((int)rnd(1, 5), assign, ref);
        for (int n = 0; n < NASSIGN; n++)
            if (eval_assign(e, assign[n]) != ref[n]) {
                if (bad++ < 5) fprintf(stderr, "fuzz: %s = %lld, want %lld\n", c_of(e),
                                       (long long)eval_assign(e, assign[n]), (long long)ref[n]);
                break;
            }
    }
    CHECK_EQ_INT(bad, 0);
}

/* Compiles the printed C of random expressions with the system compiler and
 * checks that it computes what wk_sym_eval does (variables >= 0, as sizes
 * and loop indices are). Skipped when no compiler runs. */
static void test_fuzz_c(void) {
    enum { NEXPR = 300 };
    int64_t assign[NASSIGN][NVARS], ref[NASSIGN];
    const WkSym *exprs[NEXPR];
    fill_assign(assign, 0, 30);
    char dir[] = "/tmp/wick_sym_XXXXXX";
    if (!mkdtemp(dir)) return;
    char src[64], exe[64], cmd[512], outp[64];
    snprintf(src, sizeof src, "%s/t.c", dir);
    snprintf(exe, sizeof exe, "%s/t", dir);
    snprintf(outp, sizeof outp, "%s/out", dir);
    FILE *f = fopen(src, "w");
    if (!f) return;
    fprintf(f, "#include <stdint.h>\n#include <stdio.h>\nstatic const int64_t A[%d][%d] = {", NASSIGN, NVARS);
    for (int n = 0; n < NASSIGN; n++)
        fprintf(f, "{%lld, %lld, %lld, %lld},", (long long)assign[n][0], (long long)assign[n][1],
                (long long)assign[n][2], (long long)assign[n][3]);
    fprintf(f, "};\nint main(void) {\n  for (int n = 0; n < %d; n++) {\n", NASSIGN);
    fprintf(f, "    int64_t v0 = A[n][0], v1 = A[n][1], v2 = A[n][2], v10 = A[n][3];\n");
    fprintf(f, "    (void)v0; (void)v1; (void)v2; (void)v10;\n");
    for (int i = 0; i < NEXPR; i++) {
        exprs[i] = gen((int)rnd(1, 5), assign, ref);
        fprintf(f, "    printf(\"%%lld\\n\", (long long)(%s));\n", c_of(exprs[i]));
    }
    fprintf(f, "  }\n  return 0;\n}\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "cc -std=gnu11 -O1 -Wall -Wextra -Werror -o %s %s && %s > %s", exe, src, exe, outp);
    if (system("cc --version > /dev/null 2>&1") != 0) {
        fprintf(stderr, "test_fuzz_c: no C compiler, skipped\n");
    } else if (system(cmd) != 0) {
        CHECK(!"printed C compiles and runs");
    } else {
        FILE *o = fopen(outp, "r");
        int bad = 0, lines = 0;
        for (int n = 0; o && n < NASSIGN; n++)
            for (int i = 0; i < NEXPR; i++) {
                long long got;
                if (fscanf(o, "%lld", &got) != 1) { bad++; continue; }
                lines++;
                if (got != eval_assign(exprs[i], assign[n]) && bad++ < 5)
                    fprintf(stderr, "C of %s gives %lld, eval %lld\n", c_of(exprs[i]), got,
                            (long long)eval_assign(exprs[i], assign[n]));
            }
        if (o) fclose(o);
        CHECK_EQ_INT(lines, NASSIGN * NEXPR);
        CHECK_EQ_INT(bad, 0);
    }
    remove(src);
    remove(exe);
    remove(outp);
    rmdir(dir);
}

/* ---- simplification within loop bounds ------------------------------------ */
static void test_bounded_view_chain(void) {
    /* a [128, 1024] buffer read as [2, 64, 1024] and summed over the first two
     * dims (i: the column, r: the flattened row): the composed view index */
    const WkSym *i = wk_sym_var(P, "bi"), *r = wk_sym_var(P, "br");
    int vars[2] = {i->var, r->var};
    int64_t ext[2] = {1024, 128};
    const WkSym *e = ADD(ADD(MUL(DIV(ADD(i, MUL(r, K(1024))), K(65536)), K(65536)), MOD(i, K(1024))),
                         MUL(MOD(ADD(DIV(i, K(1024)), r), K(64)), K(1024)));
    CHECK(wk_sym_simplify_bounded(P, e, vars, ext, 2) == ADD(i, MUL(r, K(1024))));
    /* one period: i // 1024 = 0 and i % 1024 = i within [0, 1024) */
    CHECK(wk_sym_simplify_bounded(P, DIV(i, K(1024)), vars, ext, 2) == K(0));
    CHECK(wk_sym_simplify_bounded(P, MOD(i, K(1024)), vars, ext, 2) == i);
    CHECK(wk_sym_simplify_bounded(P, MOD(i, K(512)), vars, ext, 2) == MOD(i, K(512)));
    /* (r*4 + s) % 8 with s < 4: 4*(r % 2) + s */
    const WkSym *s4 = wk_sym_var(P, "bs");
    int vars3[3] = {i->var, r->var, s4->var};
    int64_t ext3[3] = {1024, 128, 4};
    CHECK(wk_sym_simplify_bounded(P, MOD(ADD(MUL(r, K(4)), s4), K(8)), vars3, ext3, 3) ==
          ADD(MUL(MOD(r, K(2)), K(4)), s4));
    /* a variable without a range stays as it is */
    const WkSym *u = wk_sym_var(P, "bu");
    CHECK(wk_sym_simplify_bounded(P, DIV(ADD(u, MUL(r, K(4))), K(8)), vars, ext, 2) == DIV(ADD(u, MUL(r, K(4))), K(8)));
    /* min / max decided by ranges */
    CHECK(wk_sym_simplify_bounded(P, MIN(i, K(5000)), vars, ext, 2) == i);
}

/* Random expressions over variables with ranges: the bounded rewrite gives
 * the same value at every point of the box (checked at every point of small
 * boxes). */
static void test_fuzz_bounded(void) {
    static const char *names[NVARS] = {"v0", "v1", "v2", "v10"};
    int vars[NVARS];
    int64_t ext[NVARS];
    int bad = 0, changed = 0;
    for (int v = 0; v < NVARS; v++) vars[v] = wk_sym_var(P, names[v])->var;
    for (int round = 0; round < 40; round++) {
        for (int v = 0; v < NVARS; v++) ext[v] = rnd(1, 4) * (rnd(0, 1) ? 4 : 1);
        int64_t assign[NASSIGN][NVARS], ref[NASSIGN];
        for (int n = 0; n < NASSIGN; n++)
            for (int v = 0; v < NVARS; v++) assign[n][v] = rnd(0, ext[v] - 1);
        for (int k = 0; k < 100; k++) {
            const WkSym *e = gen((int)rnd(1, 5), assign, ref);
            const WkSym *f = wk_sym_simplify_bounded(P, e, vars, ext, NVARS);
            changed += f != e;
            for (int n = 0; n < NASSIGN; n++)
                if (eval_assign(f, assign[n]) != ref[n]) {
                    if (bad++ < 5) fprintf(stderr, "bounded: %s", c_of(e)), fprintf(stderr, " -> %s = %lld, want %lld\n",
                                           c_of(f), (long long)eval_assign(f, assign[n]), (long long)ref[n]);
                    break;
                }
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(changed > 100); /* the rewrites fire, not just pass through */
}

int main(void) {
    P = wk_sympool_new();
    test_consing();
    test_simplify();
    test_eval();
    test_to_c();
    test_pool_independent();
    test_fuzz_eval();
    test_fuzz_c();
    test_bounded_view_chain();
    test_fuzz_bounded();
    wk_sympool_free(P);
    wk_str_free(&printed);
    return CHECK_DONE();
}
