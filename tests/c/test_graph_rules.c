/* test_graph_rules.c — the graph builder (csrc/graph/graph.c, ops.c): dtype
 * table, torch's type promotion for every op (rows generated from torch by
 * tests/graph/gen_promotion_table.py), broadcasting, reductions, errors,
 * printing, hashing and the op table. */
#include "graph/graph.h"

#include <stdlib.h>

#include "check.h"
#include "promotion_table.h"

static const WkDevice CPU = {WK_DEV_CPU, 0};

/* A contiguous input of the given shape. */
static int input(WkGraph *g, WkDType dt, int ndim, const int64_t *sizes) {
    return wk_graph_input(g, dt, CPU, ndim, sizes, NULL, 0, "L['x']");
}

static int op1(WkGraph *g, WkOp op, int a, const WkAttrs *at) { return wk_graph_op(g, op, &a, 1, at); }
static int op2(WkGraph *g, WkOp op, int a, int b) {
    int in[2] = {a, b};
    return wk_graph_op(g, op, in, 2, NULL);
}

/* Checks a value's shape against a list, e.g. SHAPE(v, 2, 4, 5). */
static int shape_is(const WkValue *v, int ndim, const int64_t *want) {
    if (!v || v->ndim != ndim) return 0;
    for (int d = 0; d < ndim; d++) {
        int64_t n;
        if (!wk_sym_is_const(v->sizes[d], &n) || n != want[d]) return 0;
    }
    return 1;
}
#define SHAPE(v, ...)                                                                \
    shape_is((v), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),         \
             (int64_t[]){__VA_ARGS__})

static int strides_are(const WkValue *v, const int64_t *want) {
    for (int d = 0; d < v->ndim; d++) {
        int64_t n;
        if (!wk_sym_is_const(v->strides[d], &n) || n != want[d]) return 0;
    }
    return 1;
}

static WkAttrs dims_attr(int keepdim, int ndims, const int *dims) {
    WkAttrs at = {0};
    at.keepdim = keepdim;
    at.ndims = ndims;
    for (int i = 0; i < ndims; i++) at.dims[i] = dims[i];
    return at;
}

/* ---- dtypes ------------------------------------------------------------------ */
static void test_dtypes(void) {
    CHECK(strcmp(wk_dtype_name(WK_F32), "float32") == 0);
    CHECK(strcmp(wk_dtype_name(WK_BF16), "bfloat16") == 0);
    CHECK_EQ_INT(wk_dtype_from_name("int64"), WK_I64);
    CHECK_EQ_INT(wk_dtype_from_name("torch.float64"), WK_F64);
    CHECK_EQ_INT(wk_dtype_from_name("float"), WK_F32);
    CHECK_EQ_INT(wk_dtype_from_name("long"), WK_I64);
    CHECK_EQ_INT(wk_dtype_from_name("complex64"), WK_C64);
    CHECK_EQ_INT(wk_dtype_from_name("torch.complex32"), WK_C32);
    CHECK_EQ_INT(wk_dtype_from_name("cfloat"), -1);
    CHECK(wk_dtype_is_complex(WK_C128) && !wk_dtype_is_float(WK_C64) && !wk_dtype_is_complex(WK_F64));
    CHECK(!wk_dtype_supported(WK_C32) && !wk_dtype_supported(WK_C64) && !wk_dtype_supported(WK_C128));
    CHECK_EQ_INT(wk_dtype_size(WK_C128), 16);
    CHECK_EQ_INT(wk_dtype_from_name(NULL), -1);
    CHECK_EQ_INT(wk_dtype_size(WK_BOOL), 1);
    CHECK_EQ_INT(wk_dtype_size(WK_I16), 2);
    CHECK_EQ_INT(wk_dtype_size(WK_F64), 8);
    CHECK(wk_dtype_is_float(WK_BF16) && !wk_dtype_is_float(WK_I64));
    CHECK(wk_dtype_is_integral(WK_U8) && !wk_dtype_is_integral(WK_BOOL) && !wk_dtype_is_integral(WK_F16));
    CHECK(wk_dtype_supported(WK_BOOL) && wk_dtype_supported(WK_I32) && wk_dtype_supported(WK_I64) &&
          wk_dtype_supported(WK_F32) && wk_dtype_supported(WK_F64));
    CHECK(wk_dtype_supported(WK_F16) && wk_dtype_supported(WK_BF16) && wk_dtype_supported(WK_U8) && !wk_dtype_supported((WkDType)77));
    int bad = 0, n = (int)(sizeof promote_types_rows / sizeof *promote_types_rows);
    for (int i = 0; i < n; i++) {
        const PromoteTypesRow *r = &promote_types_rows[i];
        WkDType got = wk_dtype_promote((WkDType)wk_dtype_from_name(r->a), (WkDType)wk_dtype_from_name(r->b));
        if (strcmp(wk_dtype_name(got), r->result) != 0) {
            fprintf(stderr, "promote_types(%s, %s): got %s, torch %s\n", r->a, r->b, wk_dtype_name(got), r->result);
            bad++;
        }
    }
    CHECK_EQ_INT(n, WK_NDTYPES * WK_NDTYPES);
    CHECK_EQ_INT(bad, 0);
    /* torch.result_type of a tensor with dims and a complex 0-d tensor: the
     * tensor's width decides (float32 with complex128 gives complex64) */
    static const struct { WkDType dim, zero, want; } rt[] = {
        {WK_F32, WK_C128, WK_C64}, {WK_F64, WK_C32, WK_C128}, {WK_F16, WK_C64, WK_C32},
        {WK_BF16, WK_C32, WK_C64}, {WK_I32, WK_C128, WK_C128}, {WK_BOOL, WK_C32, WK_C32},
        {WK_C32, WK_F64, WK_C32},  {WK_C64, WK_C128, WK_C64},
    };
    for (size_t i = 0; i < sizeof rt / sizeof *rt; i++) {
        WkValue a = {0}, b = {0};
        a.dtype = rt[i].dim, a.ndim = 1;
        b.dtype = rt[i].zero;
        const WkValue *both[2] = {&a, &b};
        CHECK_EQ_INT(wk_result_type(both, 2), rt[i].want);
    }
}

/* ---- every generated promotion row -------------------------------------------- */
static int make_arg(WkGraph *g, const char *kind) {
    if (kind[0] == 'S') {
        if (strcmp(kind, "S:bool") == 0) return wk_graph_scalar(g, WK_BOOL, 0, 1);
        if (strcmp(kind, "S:int") == 0) return wk_graph_scalar(g, WK_I64, 0, 2);
        return wk_graph_scalar(g, WK_F64, 2.5, 0);
    }
    int dt = wk_dtype_from_name(kind + 2);
    int64_t three = 3;
    return kind[0] == 'T' ? input(g, (WkDType)dt, 1, &three) : input(g, (WkDType)dt, 0, NULL);
}

static void test_promotion_table(void) {
    int n = (int)(sizeof promo_rows / sizeof *promo_rows), bad = 0, errors = 0;
    for (int i = 0; i < n; i++) {
        const PromoRow *r = &promo_rows[i];
        WkGraph *g = wk_graph_new();
        int in[3], nin = 0;
        for (; nin < 3 && r->args[nin]; nin++) in[nin] = make_arg(g, r->args[nin]);
        WkAttrs at = {0};
        if (r->attr_dtype) {
            at.has_dtype = 1;
            at.dtype = (WkDType)wk_dtype_from_name(r->attr_dtype);
        }
        int op = wk_op_from_name(r->op);
        wk_error_clear();
        int out = op < 0 ? -1 : wk_graph_op(g, (WkOp)op, in, nin, &at);
        const char *got = out < 0 ? "error" : wk_dtype_name(wk_graph_value(g, out)->dtype);
        /* integer fmod/remainder/floor_divide by a tensor: refused on purpose
         * (torch raises per element on zero divisors), the op runs in torch */
        int refused = out < 0 && strstr(wk_error_get(), "integer division by a tensor") != NULL;
        if (strcmp(got, r->result) != 0 && !refused) {
            fprintf(stderr, "%s(%s, %s, %s; dtype=%s): wick %s (%s), torch %s\n", r->op, r->args[0],
                    r->args[1] ? r->args[1] : "-", r->args[2] ? r->args[2] : "-",
                    r->attr_dtype ? r->attr_dtype : "-", got, wk_error_get(), r->result);
            bad++;
        }
        if (out < 0 && wk_error_get()[0] == '\0') bad++; /* every error carries a message */
        errors += out < 0;
        wk_graph_free(g);
    }
    CHECK(n > 2000);
    CHECK(errors > 100);
    CHECK_EQ_INT(bad, 0);
}

/* ---- broadcasting --------------------------------------------------------------- */
static void test_broadcast(void) {
    WkGraph *g = wk_graph_new();
    int64_t s45[2] = {4, 5}, s5[1] = {5}, s15[2] = {1, 5}, s41[2] = {4, 1}, s3145[4] = {3, 1, 4, 5};
    int64_t s34[2] = {3, 4}, s23[2] = {2, 3}, s43[2] = {4, 3}, s0[1] = {0}, s10[2] = {1, 0};
    int a = input(g, WK_F32, 2, s45), b = input(g, WK_F32, 1, s5);
    int v = op2(g, WK_OP_ADD, a, b);
    CHECK(SHAPE(wk_graph_value(g, v), 4, 5));
    v = op2(g, WK_OP_MUL, input(g, WK_F32, 2, s41), input(g, WK_F32, 2, s15));
    CHECK(SHAPE(wk_graph_value(g, v), 4, 5));
    v = op2(g, WK_OP_SUB, input(g, WK_F32, 4, s3145), input(g, WK_F32, 2, s41));
    CHECK(SHAPE(wk_graph_value(g, v), 3, 1, 4, 5));
    v = op2(g, WK_OP_ADD, input(g, WK_F32, 0, NULL), a); /* 0-d with anything */
    CHECK(SHAPE(wk_graph_value(g, v), 4, 5));
    v = op2(g, WK_OP_ADD, input(g, WK_F32, 1, s0), input(g, WK_F32, 2, s10)); /* empty stays empty */
    CHECK(SHAPE(wk_graph_value(g, v), 1, 0));
    int nvalues = wk_graph_nvalues(g), nnodes = wk_graph_nnodes(g);
    CHECK_EQ_INT(op2(g, WK_OP_ADD, input(g, WK_F32, 2, s34), input(g, WK_F32, 1, (int64_t[]){4})) >= 0, 1);
    CHECK_EQ_INT(op2(g, WK_OP_ADD, input(g, WK_F32, 2, s34), b), -1);
    CHECK(strcmp(wk_error_get(),
                 "The size of tensor a (4) must match the size of tensor b (5) at non-singleton dimension 1") == 0);
    CHECK_EQ_INT(op2(g, WK_OP_ADD, input(g, WK_F32, 2, s23), input(g, WK_F32, 2, s43)), -1);
    CHECK(strcmp(wk_error_get(),
                 "The size of tensor a (2) must match the size of tensor b (4) at non-singleton dimension 0") == 0);
    CHECK_EQ_INT(op2(g, WK_OP_ADD, input(g, WK_F32, 1, (int64_t[]){3}), input(g, WK_F32, 1, s0)), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "tensor a (3) must match the size of tensor b (0)");
    /* a failed op adds no node */
    CHECK_EQ_INT(wk_graph_nnodes(g), nnodes + 1);
    CHECK(wk_graph_nvalues(g) > nvalues);
    /* three-way broadcast of where */
    int c = input(g, WK_BOOL, 2, s41);
    int in3[3] = {c, input(g, WK_F64, 1, s5), input(g, WK_F64, 0, NULL)};
    v = wk_graph_op(g, WK_OP_WHERE, in3, 3, NULL);
    CHECK(SHAPE(wk_graph_value(g, v), 4, 5));
    CHECK_EQ_INT(wk_graph_value(g, v)->dtype, WK_F64);
    in3[1] = input(g, WK_F64, 2, s23);
    CHECK_EQ_INT(wk_graph_op(g, WK_OP_WHERE, in3, 3, NULL), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "must match the size of tensor b (2) at non-singleton dimension 0");
    in3[0] = input(g, WK_F32, 2, s41);
    in3[1] = a;
    CHECK_EQ_INT(wk_graph_op(g, WK_OP_WHERE, in3, 3, NULL), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "where expected condition to be a boolean tensor, but got a tensor with dtype Float");
    /* arity and bad ids */
    CHECK_EQ_INT(wk_graph_op(g, WK_OP_ADD, &a, 1, NULL), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "ADD takes 2 inputs, got 1");
    CHECK_EQ_INT(op2(g, WK_OP_ADD, a, 9999), -1);
    CHECK_EQ_INT(op2(g, WK_OP_ADD, a, -1), -1);
    CHECK_EQ_INT(wk_graph_op(g, (WkOp)WK_NOPS, &a, 1, NULL), -1);
    wk_graph_free(g);
}

/* Random shapes, against torch's own results (generated rows). */
static void test_shape_tables(void) {
    int bad = 0, n = (int)(sizeof broadcast_rows / sizeof *broadcast_rows), errors = 0;
    for (int i = 0; i < n; i++) {
        const BroadcastRow *r = &broadcast_rows[i];
        WkGraph *g = wk_graph_new();
        int v = op2(g, WK_OP_ADD, input(g, WK_F32, r->na, r->a), input(g, WK_F32, r->nb, r->b));
        int ok = r->nout < 0 ? v < 0 : v >= 0 && shape_is(wk_graph_value(g, v), r->nout, r->out);
        if (!ok && bad++ < 5) fprintf(stderr, "broadcast row %d: wick %s\n", i, v < 0 ? wk_error_get() : "ok");
        errors += v < 0;
        wk_graph_free(g);
    }
    CHECK(errors > 10 && errors < n - 10);
    n = (int)(sizeof reduce_rows / sizeof *reduce_rows);
    errors = 0;
    for (int i = 0; i < n; i++) {
        const ReduceRow *r = &reduce_rows[i];
        WkGraph *g = wk_graph_new();
        WkAttrs at = dims_attr(r->keepdim, r->ndims, r->dims);
        int v = op1(g, (WkOp)wk_op_from_name(r->op), input(g, WK_F32, r->nin, r->in), &at);
        int ok = r->nout < 0 ? v < 0 : v >= 0 && shape_is(wk_graph_value(g, v), r->nout, r->out);
        if (!ok && bad++ < 5) fprintf(stderr, "reduce row %d: wick %s\n", i, v < 0 ? wk_error_get() : "ok");
        errors += v < 0;
        wk_graph_free(g);
    }
    CHECK(errors > 10 && errors < n - 10);
    CHECK_EQ_INT(bad, 0);
}

/* Outputs are contiguous, torch-style: an empty dim counts as 1. */
static void test_strides(void) {
    WkGraph *g = wk_graph_new();
    int64_t s[3] = {2, 3, 4}, t[3] = {1, 2, 6}, e[3] = {0, 3, 0};
    int a = wk_graph_input(g, WK_F32, CPU, 3, s, t, 0, "L['a']"); /* permuted input */
    CHECK(strides_are(wk_graph_value(g, a), t));
    int v = op1(g, WK_OP_EXP, a, NULL);
    CHECK(strides_are(wk_graph_value(g, v), (int64_t[]){12, 4, 1}));
    v = op1(g, WK_OP_NEG, input(g, WK_F32, 3, e), NULL);
    CHECK(SHAPE(wk_graph_value(g, v), 0, 3, 0));
    CHECK(strides_are(wk_graph_value(g, v), (int64_t[]){3, 1, 1}));
    v = input(g, WK_I64, 3, e); /* inputs without strides get contiguous ones */
    CHECK(strides_are(wk_graph_value(g, v), (int64_t[]){3, 1, 1}));
    wk_graph_free(g);
}

/* ---- reductions ------------------------------------------------------------------ */
static void test_reduce(void) {
    WkGraph *g = wk_graph_new();
    int64_t s234[3] = {2, 3, 4}, s03[2] = {0, 3};
    int x = input(g, WK_F32, 3, s234);
    WkAttrs at = dims_attr(0, 1, (int[]){1});
    int v = op1(g, WK_OP_SUM, x, &at);
    CHECK(SHAPE(wk_graph_value(g, v), 2, 4));
    at = dims_attr(1, 1, (int[]){-1});
    v = op1(g, WK_OP_MEAN, x, &at);
    CHECK(SHAPE(wk_graph_value(g, v), 2, 3, 1));
    CHECK(strides_are(wk_graph_value(g, v), (int64_t[]){3, 1, 1}));
    CHECK_EQ_INT(wk_graph_node(g, wk_graph_value(g, v)->node)->attrs.dims[0], 2); /* normalised */
    at = dims_attr(0, 2, (int[]){-1, 0}); /* sorted */
    v = op1(g, WK_OP_AMAX, x, &at);
    CHECK(SHAPE(wk_graph_value(g, v), 3));
    const WkAttrs *na = &wk_graph_node(g, wk_graph_value(g, v)->node)->attrs;
    CHECK(na->ndims == 2 && na->dims[0] == 0 && na->dims[1] == 2 && na->keepdim == 0);
    at = dims_attr(0, 0, NULL); /* all dims */
    v = op1(g, WK_OP_SUM, x, &at);
    CHECK(SHAPE(wk_graph_value(g, v)));
    CHECK_EQ_INT(wk_graph_value(g, v)->ndim, 0);
    na = &wk_graph_node(g, wk_graph_value(g, v)->node)->attrs;
    CHECK(na->ndims == 3 && na->dims[0] == 0 && na->dims[1] == 1 && na->dims[2] == 2);
    at = dims_attr(1, 0, NULL);
    v = op1(g, WK_OP_SUM, x, &at);
    CHECK(SHAPE(wk_graph_value(g, v), 1, 1, 1));
    v = op1(g, WK_OP_SUM, x, NULL); /* no attrs: all dims */
    CHECK_EQ_INT(wk_graph_value(g, v)->ndim, 0);
    /* errors, with torch's messages */
    at = dims_attr(0, 1, (int[]){3});
    CHECK_EQ_INT(op1(g, WK_OP_SUM, x, &at), -1);
    CHECK(strcmp(wk_error_get(), "Dimension out of range (expected to be in range of [-3, 2], but got 3)") == 0);
    at = dims_attr(0, 1, (int[]){-4});
    CHECK_EQ_INT(op1(g, WK_OP_SUM, x, &at), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "but got -4)");
    at = dims_attr(0, 2, (int[]){1, -2});
    CHECK_EQ_INT(op1(g, WK_OP_SUM, x, &at), -1);
    CHECK(strcmp(wk_error_get(), "dim 1 appears multiple times in the list of dims") == 0);
    int m = input(g, WK_F32, 2, (int64_t[]){3, 4});
    at = dims_attr(0, 1, (int[]){2});
    CHECK_EQ_INT(op1(g, WK_OP_SUM, m, &at), -1);
    CHECK(strcmp(wk_error_get(), "Dimension out of range (expected to be in range of [-2, 1], but got 2)") == 0);
    /* 0-d input: dim 0 or -1, result 0-d */
    int z = input(g, WK_F64, 0, NULL);
    at = dims_attr(0, 1, (int[]){0});
    v = op1(g, WK_OP_SUM, z, &at);
    CHECK(v >= 0 && wk_graph_value(g, v)->ndim == 0);
    at = dims_attr(1, 1, (int[]){-1});
    v = op1(g, WK_OP_AMAX, z, &at);
    CHECK(v >= 0 && wk_graph_value(g, v)->ndim == 0);
    at = dims_attr(0, 1, (int[]){1});
    CHECK_EQ_INT(op1(g, WK_OP_SUM, z, &at), -1);
    CHECK(strcmp(wk_error_get(), "Dimension out of range (expected to be in range of [-1, 0], but got 1)") == 0);
    /* empty inputs: sum and mean are fine, amax over an empty dim is not */
    int e = input(g, WK_F32, 2, s03);
    at = dims_attr(0, 1, (int[]){0});
    v = op1(g, WK_OP_SUM, e, &at);
    CHECK(SHAPE(wk_graph_value(g, v), 3));
    v = op1(g, WK_OP_MEAN, e, &at);
    CHECK(SHAPE(wk_graph_value(g, v), 3));
    CHECK_EQ_INT(op1(g, WK_OP_AMAX, e, &at), -1);
    CHECK(strcmp(wk_error_get(), "amax(): Expected reduction dim 0 to have non-zero size.") == 0);
    at = dims_attr(0, 1, (int[]){1});
    v = op1(g, WK_OP_AMAX, e, &at); /* reduces the non-empty dim */
    CHECK(SHAPE(wk_graph_value(g, v), 0));
    at = dims_attr(0, 0, NULL);
    CHECK_EQ_INT(op1(g, WK_OP_AMAX, e, &at), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "amax(): Expected reduction dim to be specified for input.numel() == 0");
    v = op1(g, WK_OP_SUM, e, &at);
    CHECK(v >= 0 && wk_graph_value(g, v)->ndim == 0);
    /* dtype=: sum casts, mean needs a float, unsupported dtypes refuse */
    int xi = input(g, WK_I32, 3, s234);
    at = dims_attr(0, 1, (int[]){0});
    CHECK_EQ_INT(wk_graph_value(g, op1(g, WK_OP_SUM, xi, &at))->dtype, WK_I64);
    at.has_dtype = 1;
    at.dtype = WK_F64;
    CHECK_EQ_INT(wk_graph_value(g, op1(g, WK_OP_SUM, xi, &at))->dtype, WK_F64);
    CHECK_EQ_INT(wk_graph_value(g, op1(g, WK_OP_MEAN, xi, &at))->dtype, WK_F64);
    at.dtype = WK_I64;
    CHECK_EQ_INT(op1(g, WK_OP_MEAN, x, &at), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "Optional dtype must be either a floating point or complex dtype. Got: Long");
    at.has_dtype = 0;
    CHECK_EQ_INT(op1(g, WK_OP_MEAN, xi, &at), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "Input dtype must be either a floating point or complex dtype. Got: Int");
    at.has_dtype = 1;
    at.dtype = WK_F16; /* 16-bit floats are stored as such and computed in float32 */
    CHECK_EQ_INT(wk_graph_value(g, op1(g, WK_OP_SUM, x, &at))->dtype, WK_F16);
    wk_graph_free(g);
}

/* ---- op-specific dtype rules not covered by the table ------------------------------ */
static void test_special_rules(void) {
    WkGraph *g = wk_graph_new();
    int64_t s3[1] = {3};
    int xi = input(g, WK_I64, 1, s3), xf = input(g, WK_F32, 1, s3), xb = input(g, WK_BOOL, 1, s3);
    /* integer tensor ** negative Python int: torch refuses */
    CHECK_EQ_INT(op2(g, WK_OP_POW, xi, wk_graph_scalar(g, WK_I64, 0, -1)), -1);
    CHECK(strcmp(wk_error_get(), "Integers to negative integer powers are not allowed.") == 0);
    CHECK_EQ_INT(op2(g, WK_OP_POW, xb, wk_graph_scalar(g, WK_I64, 0, -2)), -1);
    CHECK(op2(g, WK_OP_POW, xf, wk_graph_scalar(g, WK_I64, 0, -1)) >= 0);
    CHECK(op2(g, WK_OP_POW, xi, wk_graph_scalar(g, WK_F64, -1.0, 0)) >= 0);
    CHECK(op2(g, WK_OP_POW, xi, input(g, WK_I64, 0, NULL)) >= 0); /* value unknown: torch checks per element */
    CHECK(op2(g, WK_OP_POW, wk_graph_scalar(g, WK_I64, 0, -2), xi) >= 0);
    /* bool tensors */
    CHECK_EQ_INT(op1(g, WK_OP_NEG, xb, NULL), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "Negation, the `-` operator, on a bool tensor is not supported.");
    CHECK_EQ_INT(op1(g, WK_OP_RELU, xb, NULL), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "Boolean inputs not supported for relu");
    CHECK_EQ_INT(op2(g, WK_OP_SUB, xb, xb), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "with two bool tensors is not supported");
    /* CONVERT and SCALAR take their dtype from the attrs; invalid dtypes refuse */
    WkAttrs at = {0};
    at.dtype = WK_I32;
    int v = op1(g, WK_OP_CONVERT, xf, &at);
    CHECK(v >= 0 && wk_graph_value(g, v)->dtype == WK_I32 && SHAPE(wk_graph_value(g, v), 3));
    at.dtype = WK_F16;
    CHECK_EQ_INT(wk_graph_value(g, op1(g, WK_OP_CONVERT, xf, &at))->dtype, WK_F16);
    at.dtype = WK_BF16;
    CHECK_EQ_INT(wk_graph_value(g, op1(g, WK_OP_CONVERT, xf, &at))->dtype, WK_BF16);
    at.dtype = (WkDType)77;
    CHECK_EQ_INT(op1(g, WK_OP_CONVERT, xf, &at), -1);
    CHECK_EQ_INT(op1(g, WK_OP_CONVERT, xf, NULL), -1);
    at.dtype = WK_BOOL; /* zeroed attrs: no dtype given, never a silent bool */
    CHECK_EQ_INT(op1(g, WK_OP_CONVERT, xf, &at), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "CONVERT needs a dtype");
    at.has_dtype = 1;
    v = op1(g, WK_OP_CONVERT, xf, &at);
    CHECK(v >= 0 && wk_graph_value(g, v)->dtype == WK_BOOL);
    at.has_dtype = 0;
    at.dtype = WK_F64;
    at.fvalue = 0.5;
    v = wk_graph_op(g, WK_OP_SCALAR, NULL, 0, &at);
    CHECK(v >= 0 && wk_graph_value(g, v)->ndim == 0 && !wk_graph_value(g, v)->is_wrapped_number);
    /* wrapped scalars */
    v = wk_graph_scalar(g, WK_BOOL, 0, 7);
    CHECK(wk_graph_value(g, v)->is_wrapped_number);
    CHECK_EQ_INT(wk_graph_node(g, wk_graph_value(g, v)->node)->attrs.ivalue, 1);
    CHECK_EQ_INT(wk_graph_scalar(g, WK_F32, 1.0, 0), -1);
    CHECK_EQ_INT(wk_graph_scalar(g, WK_I32, 0, 1), -1);
    wk_graph_free(g);
}

/* ---- inputs ------------------------------------------------------------------------- */
static void test_inputs(void) {
    WkGraph *g = wk_graph_new();
    int64_t s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, s3[1] = {3};
    CHECK_EQ_INT(wk_graph_input(g, WK_F32, CPU, 9, s9, NULL, 0, "L['x']"), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "rank 9");
    CHECK(wk_graph_input(g, WK_F32, CPU, 8, s9, NULL, 0, "L['x']") >= 0);
    CHECK_EQ_INT(wk_graph_input(g, (WkDType)77, CPU, 1, s3, NULL, 0, "L['h']"), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "invalid dtype");
    CHECK_EQ_INT(wk_graph_input(g, WK_F32, CPU, 1, (int64_t[]){-1}, NULL, 0, "L['n']"), -1);
    CHECK_EQ_INT(wk_graph_input(g, WK_F32, CPU, -1, NULL, NULL, 0, "L['n']"), -1);
    CHECK_EQ_INT(wk_graph_ninputs(g), 1);
    int x = wk_graph_input(g, WK_F32, CPU, 1, s3, NULL, 1, "self.weight");
    CHECK_EQ_INT(wk_graph_ninputs(g), 2);
    CHECK_EQ_INT(wk_graph_input_value(g, 1), x);
    const WkValue *v = wk_graph_value(g, x);
    CHECK(v->input_index == 1 && v->node == -1 && v->requires_grad && strcmp(v->source, "self.weight") == 0);
    /* requires_grad flows to float results, not to comparisons */
    int y = op2(g, WK_OP_MUL, x, wk_graph_scalar(g, WK_F64, 2.0, 0));
    CHECK(wk_graph_value(g, y)->requires_grad);
    CHECK(!wk_graph_value(g, op2(g, WK_OP_LT, x, y))->requires_grad);
    CHECK_EQ_INT(wk_graph_value(g, y)->input_index, -1);
    /* devices: a CPU 0-d tensor goes with a CUDA tensor, two devices do not */
    WkDevice cuda = {WK_DEV_CUDA, 0}, cuda1 = {WK_DEV_CUDA, 1};
    int c = wk_graph_input(g, WK_F32, cuda, 1, s3, NULL, 0, "L['c']");
    int z = wk_graph_input(g, WK_F32, CPU, 0, NULL, NULL, 0, "L['z']");
    int r = op2(g, WK_OP_ADD, z, c);
    CHECK(r >= 0 && wk_graph_value(g, r)->device.type == WK_DEV_CUDA);
    CHECK_EQ_INT(op2(g, WK_OP_ADD, x, c), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "same device");
    CHECK_EQ_INT(op2(g, WK_OP_ADD, c, wk_graph_input(g, WK_F32, cuda1, 1, s3, NULL, 0, "L['d']")), -1);
    /* a creation op (scalar inputs only) on the device its attrs name; the
     * node keeps that device, as the pipeline copies nodes into stage graphs */
    int64_t len3 = 3;
    WkAttrs at = {0};
    at.dtype = WK_I64;
    at.has_dtype = 1;
    at.nints = 1;
    at.ints = &len3;
    at.has_device = 1;
    at.device = cuda;
    int start = wk_graph_scalar(g, WK_I64, 0, 0), step = wk_graph_scalar(g, WK_I64, 0, 1);
    int ar = wk_graph_op(g, WK_OP_ARANGE, (int[]){start, step}, 2, &at);
    CHECK(ar >= 0 && wk_graph_value(g, ar)->device.type == WK_DEV_CUDA);
    const WkNode *an = wk_graph_node(g, wk_graph_value(g, ar)->node);
    CHECK(an->attrs.has_device && an->attrs.device.type == WK_DEV_CUDA);
    int again = wk_graph_op(g, WK_OP_ARANGE, (int[]){start, step}, 2, &an->attrs);
    CHECK(again >= 0 && wk_graph_value(g, again)->device.type == WK_DEV_CUDA);
    CHECK(op2(g, WK_OP_ADD, again, c) >= 0);
    wk_graph_free(g);
}

/* Dynamic sizes broadcast when equal or against 1; anything else refuses. */
static void test_symbolic(void) {
    WkGraph *g = wk_graph_new();
    WkSymPool *p = wk_graph_syms(g);
    const WkSym *s0 = wk_sym_var(p, "s0"), *s1 = wk_sym_var(p, "s1"), *one = wk_sym_const(p, 1);
    const WkSym *sz[2] = {s0, s1}, *st[2] = {s1, one}, *row[2] = {one, s1};
    int a = wk_graph_input_sym(g, WK_F32, CPU, 2, sz, st, 0, "L['a']");
    int b = wk_graph_input_sym(g, WK_F32, CPU, 2, row, NULL, 0, "L['b']");
    int v = op2(g, WK_OP_ADD, a, b);
    const WkValue *out = wk_graph_value(g, v);
    CHECK(out->sizes[0] == s0 && out->sizes[1] == s1);
    CHECK(out->strides[0] == s1 && out->strides[1] == one);
    WkAttrs at = dims_attr(0, 1, (int[]){1});
    v = op1(g, WK_OP_SUM, v, &at);
    CHECK(wk_graph_value(g, v)->ndim == 1 && wk_graph_value(g, v)->sizes[0] == s0);
    const WkSym *col[1] = {s0};
    CHECK_EQ_INT(op2(g, WK_OP_ADD, a, wk_graph_input_sym(g, WK_F32, CPU, 1, col, NULL, 0, "L['c']")), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "cannot broadcast symbolic sizes s1 and s0 at dimension 1");
    char *text = wk_graph_print(g);
    CHECK_STR_CONTAINS(text, "%0 = input 0 L['a'] : float32[s0, s1] strides=[s1, 1] cpu");
    CHECK_STR_CONTAINS(text, "%1 = input 1 L['b'] : float32[1, s1] strides=[s1, 1] cpu");
    free(text);
    wk_graph_free(g);
}

/* ---- printing, hashing, users ---------------------------------------------------------- */
static WkGraph *sample(double scalar, int keepdim) {
    WkGraph *g = wk_graph_new();
    int64_t s[2] = {4, 5}, t[2] = {1, 4};
    int x = wk_graph_input(g, WK_F32, CPU, 2, s, t, 1, "L['x']");
    int k = wk_graph_scalar(g, WK_F64, scalar, 0);
    int y = op2(g, WK_OP_ADD, x, k);
    WkAttrs at = dims_attr(keepdim, 1, (int[]){-1});
    int r = op1(g, WK_OP_SUM, y, &at);
    WkAttrs cv = {0};
    cv.dtype = WK_I64;
    int c = op1(g, WK_OP_CONVERT, r, &cv);
    wk_graph_output(g, r);
    wk_graph_output(g, c);
    return g;
}

static void test_print_hash(void) {
    WkGraph *g = sample(2.5, 0);
    char *text = wk_graph_print(g);
    const char *want =
        "%0 = input 0 L['x'] : float32[4, 5] strides=[1, 4] cpu requires_grad\n"
        "%1 = SCALAR(2.5) : float64[] wrapped\n"
        "%2 = ADD(%0, %1) : float32[4, 5]\n"
        "%3 = SUM(%2, dims=[1], keepdim=False) : float32[4]\n"
        "%4 = CONVERT(%3, dtype=int64) : int64[4]\n"
        "return (%3, %4)\n";
    CHECK(text && strcmp(text, want) == 0);
    if (text && strcmp(text, want) != 0) fprintf(stderr, "got:\n%s", text);
    free(text);
    CHECK_EQ_INT(wk_graph_nusers(g, 0), 1);
    CHECK_EQ_INT(wk_graph_nusers(g, 2), 1);
    CHECK_EQ_INT(wk_graph_nusers(g, 3), 1);
    CHECK_EQ_INT(wk_graph_nusers(g, 4), 0);
    CHECK_EQ_INT(wk_graph_nusers(g, 99), 0);
    CHECK_EQ_INT(wk_graph_noutputs(g), 2);
    CHECK_EQ_INT(wk_graph_output_value(g, 1), 4);
    CHECK_EQ_INT(wk_graph_output_value(g, 2), -1);
    CHECK_EQ_INT(wk_graph_output(g, 42), -1);
    CHECK_EQ_INT(wk_graph_nnodes(g), 4);
    const WkNode *n = wk_graph_node(g, 1);
    CHECK(n->op == WK_OP_ADD && n->ninputs == 2 && n->inputs[0] == 0 && n->inputs[1] == 1 && n->output == 2);
    CHECK(wk_graph_node(g, 4) == NULL);
    CHECK(wk_graph_value(g, -1) == NULL);

    WkGraph *same = sample(2.5, 0), *other_scalar = sample(3.5, 0), *other_keep = sample(2.5, 1);
    CHECK(wk_graph_hash(g) == wk_graph_hash(same));
    CHECK(wk_graph_hash(g) != wk_graph_hash(other_scalar));
    CHECK(wk_graph_hash(g) != wk_graph_hash(other_keep));
    wk_graph_free(same);
    wk_graph_free(other_scalar);
    wk_graph_free(other_keep);
    wk_graph_free(g);

    /* one output prints as a tuple; sources do not change the hash */
    WkGraph *a = wk_graph_new(), *b = wk_graph_new();
    int64_t s1[1] = {7};
    int xa = wk_graph_input(a, WK_BOOL, CPU, 1, s1, NULL, 0, "L['a']");
    int xb = wk_graph_input(b, WK_BOOL, CPU, 1, s1, NULL, 0, "G['b']");
    int wa = op2(a, WK_OP_EQ, xa, wk_graph_scalar(a, WK_BOOL, 0, 1));
    int wb = op2(b, WK_OP_EQ, xb, wk_graph_scalar(b, WK_BOOL, 0, 1));
    wk_graph_output(a, wa);
    wk_graph_output(b, wb);
    CHECK(wk_graph_hash(a) == wk_graph_hash(b));
    text = wk_graph_print(a);
    CHECK_STR_CONTAINS(text, "%1 = SCALAR(True) : bool[] wrapped\n%2 = EQ(%0, %1) : bool[7]\nreturn (%2,)\n");
    free(text);
    wk_graph_free(a);
    wk_graph_free(b);
    wk_graph_free(NULL);

    /* attrs an op does not read are dropped: they change neither hash nor print */
    a = wk_graph_new();
    b = wk_graph_new();
    WkAttrs junk = {0};
    junk.ndims = 3;
    junk.keepdim = 1;
    junk.fvalue = 9.0;
    junk.dtype = WK_F16;
    xa = wk_graph_input(a, WK_F32, CPU, 1, s1, NULL, 0, "L['a']");
    xb = wk_graph_input(b, WK_F32, CPU, 1, s1, NULL, 0, "L['a']");
    int ka = wk_graph_scalar(a, WK_F64, 0.1, 5), kb = wk_graph_scalar(b, WK_F64, 0.1, 0);
    int in_a[2] = {xa, ka};
    wa = wk_graph_op(a, WK_OP_ADD, in_a, 2, &junk);
    wb = op2(b, WK_OP_ADD, xb, kb);
    CHECK(wa >= 0 && wb >= 0);
    CHECK(wk_graph_hash(a) == wk_graph_hash(b));
    CHECK_EQ_INT(wk_graph_node(a, 1)->attrs.ndims, 0);
    text = wk_graph_print(a);
    CHECK_STR_CONTAINS(text, "%1 = SCALAR(0.1) : float64[] wrapped\n%2 = ADD(%0, %1) : float32[7]\n");
    free(text);
    wk_graph_free(a);
    wk_graph_free(b);
}

/* ---- the op table --------------------------------------------------------------------- */
static void test_ops(void) {
    CHECK_EQ_INT(wk_op_from_name("ADD"), WK_OP_ADD);
    CHECK_EQ_INT(wk_op_from_name("add"), WK_OP_ADD);
    CHECK_EQ_INT(wk_op_from_name("Sigmoid"), WK_OP_SIGMOID);
    CHECK_EQ_INT(wk_op_from_name("nope"), -1);
    CHECK_EQ_INT(wk_op_from_name(NULL), -1);
    const WkOpInfo *i = wk_op_info(WK_OP_SUM);
    CHECK(i && strcmp(i->name, "SUM") == 0 && i->kind == WK_KIND_REDUCTION && i->arity == 1 &&
          i->shape == WK_SHAPE_REDUCE && i->dtype == WK_DTR_SUM);
    CHECK_STR_CONTAINS(i->signature, "keepdim=False");
    CHECK_STR_CONTAINS(i->torch, "Tensor.sum");
    i = wk_op_info(WK_OP_WHERE);
    CHECK(i->arity == 3 && i->dtype == WK_DTR_WHERE);
    CHECK(wk_op_info(WK_OP_SCALAR)->kind == WK_KIND_CONSTANT);
    CHECK(wk_op_info((WkOp)(WK_NOPS + 1)) == NULL);
    CHECK(wk_op_info(WK_OP_EXTERN)->kind == WK_KIND_EXTERN); /* the pseudo-row past the table */
    CHECK(wk_op_info((WkOp)-1) == NULL);
    for (int op = 0; op < WK_NOPS; op++) CHECK_EQ_INT(wk_op_from_name(wk_op_info((WkOp)op)->name), op);
}

/* wk_view_map: the index maps of VIEW (graph.h), checked element by element
 * against the storage offsets they must reproduce. */
static int map_reproduces(int bnd, const int64_t *bs, const int64_t *bst, int vnd, const int64_t *vs,
                          const int64_t *vst, int64_t off, const WkViewMap *m) {
    int64_t numel = 1, idx[WK_MAX_DIMS] = {0};
    for (int d = 0; d < vnd; d++) numel *= vs[d];
    for (int64_t e = 0; e < numel; e++) {
        int64_t rem = e, want = off, got = 0, lin = off;
        for (int d = vnd - 1; d >= 0; d--) {
            idx[d] = rem % vs[d];
            rem /= vs[d];
            want += idx[d] * vst[d];
        }
        for (int d = 0; d < vnd; d++) lin += idx[d] * vst[d];
        for (int k = 0; k < bnd; k++) {
            int64_t bi;
            if (m->affine) {
                bi = bs[k] == 1 ? 0 : m->base_off[k];
                for (int d = 0; d < vnd; d++)
                    if (m->dim_of[d] == k) bi += m->mult[d] * idx[d];
            } else {
                bi = bs[k] == 1 ? 0 : (lin / bst[k]) % bs[k];
            }
            if (bi < 0 || bi >= bs[k]) return 0;
            got += bi * bst[k];
        }
        if (got != want) return 0;
    }
    return 1;
}

static void test_view_maps(void) {
    WkViewMap m;
    int64_t b46[2] = {4, 6}, c46[2] = {6, 1}, t46[2] = {1, 4};
    /* transpose of a contiguous base: affine */
    int64_t v64[2] = {6, 4}, vt[2] = {1, 6};
    CHECK_EQ_INT(wk_view_map(2, b46, c46, 2, v64, vt, 0, &m), 0);
    CHECK(m.affine && map_reproduces(2, b46, c46, 2, v64, vt, 0, &m));
    /* split of a dim and a slice with a step and an offset: affine */
    int64_t b24[1] = {24}, c1[1] = {1}, v234[3] = {2, 3, 2}, s234[3] = {12, 4, 2};
    CHECK_EQ_INT(wk_view_map(1, b24, c1, 3, v234, s234, 1, &m), 0);
    CHECK(m.affine && map_reproduces(1, b24, c1, 3, v234, s234, 1, &m));
    /* merge of a contiguous base: linear */
    int64_t v24[1] = {24};
    CHECK_EQ_INT(wk_view_map(2, b46, c46, 1, v24, c1, 0, &m), 0);
    CHECK(!m.affine && map_reproduces(2, b46, c46, 1, v24, c1, 0, &m));
    /* merge of a transposed (dense) base in memory order: linear over sorted strides */
    int64_t b64[2] = {6, 4}, c64[2] = {1, 6}, v83[2] = {8, 3}, s83[2] = {3, 1};
    CHECK_EQ_INT(wk_view_map(2, b64, c64, 2, v83, s83, 0, &m), 0);
    CHECK(map_reproduces(2, b64, c64, 2, v83, s83, 0, &m));
    /* expand (stride 0), select (offset only), 0-d */
    int64_t v346[3] = {3, 4, 6}, s346[3] = {0, 6, 1}, none[1] = {0};
    CHECK_EQ_INT(wk_view_map(2, b46, c46, 3, v346, s346, 0, &m), 0);
    CHECK(m.affine && map_reproduces(2, b46, c46, 3, v346, s346, 0, &m));
    CHECK_EQ_INT(wk_view_map(2, b46, c46, 0, none, none, 17, &m), 0);
    CHECK(m.affine && map_reproduces(2, b46, c46, 0, none, none, 17, &m));
    /* a base with gaps (a slice of a wider tensor) and a merge across the gap: refused */
    int64_t gap[2] = {8, 1};
    CHECK_EQ_INT(wk_view_map(2, b46, gap, 1, v24, c1, 0, &m), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "gaps");
    /* outside the base's memory: refused, also by one element */
    int64_t v47[2] = {4, 7};
    CHECK_EQ_INT(wk_view_map(2, b46, c46, 2, v47, c46, 0, &m), -1);
    CHECK_STR_CONTAINS(wk_error_get(), "outside");
    int64_t v3[1] = {3};
    CHECK_EQ_INT(wk_view_map(2, b46, c46, 1, v3, c1, 22, &m), -1);
    CHECK_EQ_INT(wk_view_map(2, b46, t46, 1, v3, c1, -1, &m), -1);
    /* an empty view reads nothing: always fine */
    int64_t v40[2] = {4, 0};
    CHECK_EQ_INT(wk_view_map(2, b46, c46, 2, v40, c46, 100, &m), 0);

    /* the builder: a view of a view folds into one view of the first base */
    WkGraph *g = wk_graph_new();
    WkDevice cpu = {WK_DEV_CPU, 0};
    int x = wk_graph_input(g, WK_F32, cpu, 2, b46, c46, 0, "x");
    int64_t a1[] = {2, 6, 4, 1, 6, 0}, a2[] = {1, 4, 6, 2};
    WkAttrs at = {0};
    at.nints = 6;
    at.ints = a1;
    int v1 = wk_graph_op(g, WK_OP_VIEW, &x, 1, &at);
    at.nints = 4;
    at.ints = a2;
    int v2 = wk_graph_op(g, WK_OP_VIEW, &v1, 1, &at);
    CHECK(v1 >= 0 && v2 >= 0);
    const WkNode *n2 = wk_graph_node(g, wk_graph_value(g, v2)->node);
    CHECK_EQ_INT(n2->inputs[0], x);
    CHECK_EQ_INT(n2->attrs.ints[3], 2); /* offsets add */
    int64_t bad[] = {1, 4, 6};
    at.nints = 3;
    at.ints = bad;
    CHECK_EQ_INT(wk_graph_op(g, WK_OP_VIEW, &x, 1, &at), -1);
    wk_graph_free(g);
}

int main(void) {
    test_dtypes();
    test_promotion_table();
    test_broadcast();
    test_shape_tables();
    test_strides();
    test_reduce();
    test_special_rules();
    test_inputs();
    test_symbolic();
    test_print_hash();
    test_ops();
    test_view_maps();
    return CHECK_DONE();
}
