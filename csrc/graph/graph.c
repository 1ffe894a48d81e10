/* graph.c — dtypes, values, nodes and graphs. The builder runs each op's
 * shape rule and dtype rule (ops.def) as a node is added, with torch's
 * semantics and torch's error messages, so a graph that builds has exactly
 * the dtypes and shapes eager PyTorch would produce; anything it refuses
 * makes capture fall back with the message as the reason. */
#include "graph.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- dtypes ---------------------------------------------------------------- */
static const struct {
    const char *name; /* torch spelling */
    int size, category;
} dtype_info[WK_NDTYPES] = {
#define WK_DT_INFO(name, ctype, tname, bytes, cat) {tname, bytes, cat},
    WK_DTYPE_TABLE(WK_DT_INFO)
#undef WK_DT_INFO
};

/* c10::ScalarType names, as torch's messages spell dtypes */
static const char *const scalar_type_names[WK_NDTYPES] = {
    [WK_BOOL] = "Bool", [WK_U8] = "Byte",  [WK_I8] = "Char",      [WK_I16] = "Short", [WK_I32] = "Int",
    [WK_I64] = "Long",  [WK_F16] = "Half", [WK_BF16] = "BFloat16", [WK_F32] = "Float", [WK_F64] = "Double",
    [WK_C32] = "ComplexHalf", [WK_C64] = "ComplexFloat", [WK_C128] = "ComplexDouble",
};

static int dt_valid(int dt) { return dt >= 0 && dt < WK_NDTYPES; }
static int category(WkDType dt) { return dtype_info[dt].category; }
static const char *scalar_type_name(WkDType dt) { return dt_valid((int)dt) ? scalar_type_names[dt] : "?"; }

const char *wk_dtype_name(WkDType dt) { return dt_valid((int)dt) ? dtype_info[dt].name : "?"; }
int wk_dtype_size(WkDType dt) { return dt_valid((int)dt) ? dtype_info[dt].size : 0; }
int wk_dtype_is_float(WkDType dt) { return dt_valid((int)dt) && category(dt) == 2; }
int wk_dtype_is_integral(WkDType dt) { return dt_valid((int)dt) && category(dt) == 1; }

int wk_dtype_is_complex(WkDType dt) { return dt_valid((int)dt) && category(dt) == 3; }

/* float16 and bfloat16 are stored as 16 bits and computed in float32;
 * complex values only pass through (graph.h) */
int wk_dtype_supported(WkDType dt) { return dt_valid((int)dt) && category(dt) != 3; }

/* Accepts torch spellings ("float32", "torch.float32") and torch's aliases
 * ("float", "double", "half", "long", "int", "short"). */
int wk_dtype_from_name(const char *name) {
    static const struct { const char *alias; WkDType dt; } aliases[] = {
        {"float", WK_F32}, {"double", WK_F64}, {"half", WK_F16}, {"long", WK_I64},
        {"int", WK_I32},   {"short", WK_I16},  {"byte", WK_U8},  {"char", WK_I8},
    };
    if (!name) return -1;
    if (strncmp(name, "torch.", 6) == 0) name += 6;
    for (int i = 0; i < WK_NDTYPES; i++)
        if (strcmp(dtype_info[i].name, name) == 0) return i;
    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
        if (strcmp(aliases[i].alias, name) == 0) return (int)aliases[i].dt;
    return -1;
}

/* The real dtype of a complex one's parts, and back. */
static WkDType complex_part(WkDType dt) { return dt == WK_C32 ? WK_F16 : dt == WK_C64 ? WK_F32 : WK_F64; }
static WkDType complex_of(WkDType part) { return part == WK_F16 ? WK_C32 : part == WK_F64 ? WK_C128 : WK_C64; }

/* torch.promote_types: bool < integral < floating < complex; within a
 * category the wider wins, except uint8 with int8 -> int16 and float16 with
 * bfloat16 -> float32 (neither holds the other). With a complex operand the
 * parts' dtype is the promotion of its parts with the other's floating dtype
 * (complex32 and bfloat16: complex64); integers and bool add nothing. */
WkDType wk_dtype_promote(WkDType a, WkDType b) {
    if (a == b) return a;
    int ca = category(a), cb = category(b);
    if (ca == 3 || cb == 3) {
        WkDType pa = ca == 3 ? complex_part(a) : a, pb = cb == 3 ? complex_part(b) : b;
        if (ca < 2) pa = pb;
        if (cb < 2) pb = pa;
        return complex_of(wk_dtype_promote(pa, pb));
    }
    if (ca != cb) return ca > cb ? a : b;
    if ((a == WK_F16 && b == WK_BF16) || (a == WK_BF16 && b == WK_F16)) return WK_F32;
    if (a == WK_U8 || b == WK_U8) {
        WkDType other = a == WK_U8 ? b : a;
        return other == WK_I8 ? WK_I16 : other;
    }
    return dtype_info[a].size >= dtype_info[b].size ? a : b;
}

/* ---- graph storage --------------------------------------------------------- */
struct WkGraph {
    WkArena *arena;           /* values, nodes, source strings */
    WkSymPool *syms;
    WkVec(WkValue *) values;  /* by id; pointers stay valid as the graph grows */
    WkVec(WkNode *) nodes;
    WkVec(int) nusers;        /* by value id */
    WkVec(int) inputs, outputs;
};

WkGraph *wk_graph_new(void) {
    WkGraph *g = wk_xcalloc(1, sizeof *g);
    g->arena = wk_arena_new();
    g->syms = wk_sympool_new();
    return g;
}

void wk_graph_free(WkGraph *g) {
    if (!g) return;
    wk_vec_free(&g->values);
    wk_vec_free(&g->nodes);
    wk_vec_free(&g->nusers);
    wk_vec_free(&g->inputs);
    wk_vec_free(&g->outputs);
    wk_sympool_free(g->syms);
    wk_arena_free(g->arena);
    free(g);
}

WkSymPool *wk_graph_syms(WkGraph *g) { return g->syms; }
int wk_graph_nvalues(const WkGraph *g) { return g->values.len; }
int wk_graph_nnodes(const WkGraph *g) { return g->nodes.len; }
int wk_graph_ninputs(const WkGraph *g) { return g->inputs.len; }
int wk_graph_noutputs(const WkGraph *g) { return g->outputs.len; }

const WkValue *wk_graph_value(const WkGraph *g, int id) {
    return id >= 0 && id < g->values.len ? g->values.data[id] : NULL;
}
const WkNode *wk_graph_node(const WkGraph *g, int index) {
    return index >= 0 && index < g->nodes.len ? g->nodes.data[index] : NULL;
}
int wk_graph_input_value(const WkGraph *g, int i) {
    return i >= 0 && i < g->inputs.len ? g->inputs.data[i] : -1;
}
int wk_graph_output_value(const WkGraph *g, int i) {
    return i >= 0 && i < g->outputs.len ? g->outputs.data[i] : -1;
}
int wk_graph_replace_input(WkGraph *g, int node, int k, int value) {
    WkNode *n = node >= 0 && node < g->nodes.len ? g->nodes.data[node] : NULL;
    if (!n || k < 0 || k >= n->ninputs || value < 0 || value >= n->output || n->op == WK_OP_VIEW ||
        n->op == WK_OP_EXTERN) {
        wk_error_set("wk_graph_replace_input: no such input, or a node that reads by layout");
        return -1;
    }
    const WkValue *a = g->values.data[n->inputs[k]], *b = g->values.data[value];
    int same = a->dtype == b->dtype && a->device.type == b->device.type && a->device.index == b->device.index &&
               a->ndim == b->ndim && a->is_wrapped_number == b->is_wrapped_number;
    for (int d = 0; same && d < a->ndim; d++) same = a->sizes[d] == b->sizes[d];
    if (!same) {
        wk_error_set("wk_graph_replace_input: the new input is another tensor");
        return -1;
    }
    g->nusers.data[n->inputs[k]]--;
    g->nusers.data[value]++;
    n->inputs[k] = value;
    return 0;
}

int wk_graph_nusers(const WkGraph *g, int value) {
    return value >= 0 && value < g->nusers.len ? g->nusers.data[value] : 0;
}

/* Copies *v into the graph under the next id. */
static int add_value(WkGraph *g, const WkValue *v) {
    WkValue *nv = wk_arena_alloc(g->arena, sizeof *nv);
    *nv = *v;
    nv->id = g->values.len;
    wk_vec_push(&g->values, nv);
    wk_vec_push(&g->nusers, 0);
    return nv->id;
}

/* Contiguous strides as torch computes them: an empty dimension counts as
 * size 1, so empty tensors keep non-zero strides. Symbolic sizes are taken
 * as they are (capture specialises sizes 0 and 1). */
static void contiguous_strides(WkSymPool *p, WkValue *v) {
    const WkSym *stride = wk_sym_const(p, 1);
    for (int d = v->ndim - 1; d >= 0; d--) {
        v->strides[d] = stride;
        int64_t n;
        const WkSym *size = v->sizes[d];
        if (wk_sym_is_const(size, &n) && n == 0) size = wk_sym_const(p, 1);
        stride = wk_sym_mul(p, stride, size);
    }
}

static int check_dtype_supported(WkDType dt, const char *what) {
    if (!dt_valid((int)dt)) {
        wk_error_set("%s: invalid dtype %d", what, (int)dt);
        return -1;
    }
    if (!wk_dtype_supported(dt)) {
        wk_error_set("%s: dtype %s is not computed by wick's kernels (complex values go through extern calls "
                     "only)", what, wk_dtype_name(dt));
        return -1;
    }
    return 0;
}

/* ---- inputs ---------------------------------------------------------------- */
static int input_sym(WkGraph *g, WkDType dt, WkDevice dev, int ndim, const WkSym *const *sizes,
                     const WkSym *const *strides, int requires_grad, const char *source, int any_dtype) {
    if (any_dtype ? !dt_valid((int)dt) : check_dtype_supported(dt, "graph input") < 0) {
        if (any_dtype) wk_error_set("graph input: invalid dtype %d", (int)dt);
        return -1;
    }
    if (ndim < 0 || ndim > WK_MAX_DIMS) {
        wk_error_set("graph input: tensors of rank %d are not supported (at most %d dims)", ndim, WK_MAX_DIMS);
        return -1;
    }
    if (ndim > 0 && !sizes) {
        wk_error_set("graph input: sizes missing");
        return -1;
    }
    WkValue v = {0};
    v.dtype = dt;
    v.device = dev;
    v.ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        int64_t n;
        if (!sizes[d] || (wk_sym_is_const(sizes[d], &n) && n < 0)) {
            wk_error_set("graph input: invalid size at dimension %d", d);
            return -1;
        }
        v.sizes[d] = sizes[d];
    }
    if (strides) {
        for (int d = 0; d < ndim; d++) {
            if (!strides[d]) {
                wk_error_set("graph input: stride missing at dimension %d", d);
                return -1;
            }
            v.strides[d] = strides[d];
        }
    } else {
        contiguous_strides(g->syms, &v);
    }
    v.requires_grad = requires_grad != 0;
    v.node = -1;
    v.input_index = g->inputs.len;
    v.source = wk_arena_strdup(g->arena, source ? source : "");
    int id = add_value(g, &v);
    wk_vec_push(&g->inputs, id);
    return id;
}

int wk_graph_input_sym(WkGraph *g, WkDType dt, WkDevice dev, int ndim, const WkSym *const *sizes,
                       const WkSym *const *strides, int requires_grad, const char *source) {
    return input_sym(g, dt, dev, ndim, sizes, strides, requires_grad, source, 0);
}

static int input_concrete(WkGraph *g, WkDType dt, WkDevice dev, int ndim, const int64_t *sizes,
                          const int64_t *strides, int requires_grad, const char *source, int any_dtype) {
    const WkSym *ss[WK_MAX_DIMS], *st[WK_MAX_DIMS];
    if (ndim < 0 || ndim > WK_MAX_DIMS) {
        wk_error_set("graph input: tensors of rank %d are not supported (at most %d dims)", ndim, WK_MAX_DIMS);
        return -1;
    }
    if (ndim > 0 && !sizes) {
        wk_error_set("graph input: sizes missing");
        return -1;
    }
    for (int d = 0; d < ndim; d++) {
        ss[d] = wk_sym_const(g->syms, sizes[d]);
        if (strides) st[d] = wk_sym_const(g->syms, strides[d]);
    }
    return input_sym(g, dt, dev, ndim, ss, strides ? st : NULL, requires_grad, source, any_dtype);
}

int wk_graph_input(WkGraph *g, WkDType dt, WkDevice dev, int ndim, const int64_t *sizes,
                   const int64_t *strides, int requires_grad, const char *source) {
    return input_concrete(g, dt, dev, ndim, sizes, strides, requires_grad, source, 0);
}

int wk_graph_input_any(WkGraph *g, WkDType dt, WkDevice dev, int ndim, const int64_t *sizes,
                       const int64_t *strides, int requires_grad, const char *source) {
    return input_concrete(g, dt, dev, ndim, sizes, strides, requires_grad, source, 1);
}

/* ---- nodes ------------------------------------------------------------------ */
static void canonical_attrs(WkOp op, WkAttrs *at);

/* Appends a node defining nout values (metadata in out[]); copies inputs
 * and attrs->ints into the arena. Returns the first output's id. */
static int add_node(WkGraph *g, WkOp op, const int *inputs, int ninputs, const WkAttrs *attrs,
                    WkValue *out, int nout) {
    WkNode *n = wk_arena_alloc(g->arena, sizeof *n);
    n->op = op;
    n->ninputs = ninputs;
    n->inputs = wk_arena_alloc(g->arena, sizeof(int) * (size_t)(ninputs ? ninputs : 1));
    for (int i = 0; i < ninputs; i++) {
        n->inputs[i] = inputs[i];
        g->nusers.data[inputs[i]]++;
    }
    n->attrs = *attrs;
    if (attrs->nints > 0 && attrs->ints) {
        int64_t *ints = wk_arena_alloc(g->arena, sizeof(int64_t) * (size_t)attrs->nints);
        memcpy(ints, attrs->ints, sizeof(int64_t) * (size_t)attrs->nints);
        n->attrs.ints = ints;
    } else {
        n->attrs.nints = 0;
        n->attrs.ints = NULL;
    }
    n->extern_index = -1;
    n->noutputs = nout;
    n->outputs = wk_arena_alloc(g->arena, sizeof(int) * (size_t)(nout ? nout : 1));
    for (int k = 0; k < nout; k++) {
        out[k].node = g->nodes.len;
        out[k].node_output = k;
        out[k].input_index = -1;
        out[k].source = NULL;
        n->outputs[k] = add_value(g, &out[k]);
    }
    n->output = n->outputs[0];
    wk_vec_push(&g->nodes, n);
    return n->output;
}

int wk_graph_scalar(WkGraph *g, WkDType dt, double fvalue, int64_t ivalue) {
    if (dt != WK_BOOL && dt != WK_I64 && dt != WK_F64) {
        wk_error_set("graph scalar: a Python scalar is bool, int64 or float64, not %s", wk_dtype_name(dt));
        return -1;
    }
    WkAttrs at = {0};
    at.dtype = dt;
    at.fvalue = fvalue;
    at.ivalue = ivalue;
    canonical_attrs(WK_OP_SCALAR, &at);
    WkValue v = {0};
    v.dtype = dt;
    v.device.type = WK_DEV_CPU;
    v.is_wrapped_number = 1;
    return add_node(g, WK_OP_SCALAR, NULL, 0, &at, &v, 1);
}

/* Broadcasts all inputs, numpy-style, into out->sizes. */
static int broadcast_shapes(WkGraph *g, const WkValue *const *in, int n, WkValue *out) {
    out->ndim = 0;
    for (int i = 0; i < n; i++) {
        const WkValue *b = in[i];
        int nd = b->ndim > out->ndim ? b->ndim : out->ndim;
        const WkSym *res[WK_MAX_DIMS];
        for (int k = nd - 1; k >= 0; k--) {
            int da = out->ndim - nd + k, db = b->ndim - nd + k;
            const WkSym *one = wk_sym_const(g->syms, 1);
            const WkSym *sa = da >= 0 ? out->sizes[da] : one, *sb = db >= 0 ? b->sizes[db] : one;
            int64_t ca, cb;
            int ka = wk_sym_is_const(sa, &ca), kb = wk_sym_is_const(sb, &cb);
            if (sa == sb || (kb && cb == 1)) {
                res[k] = sa;
            } else if (ka && ca == 1) {
                res[k] = sb;
            } else if (ka && kb) {
                wk_error_set("The size of tensor a (%" PRId64 ") must match the size of tensor b (%" PRId64
                             ") at non-singleton dimension %d", ca, cb, k);
                return -1;
            } else {
                WkStr s = {0};
                wk_str_append(&s, "cannot broadcast symbolic sizes ");
                wk_sym_to_c(g->syms, sa, &s, NULL, NULL);
                wk_str_append(&s, " and ");
                wk_sym_to_c(g->syms, sb, &s, NULL, NULL);
                wk_error_set("%s at dimension %d", s.data, k);
                wk_str_free(&s);
                return -1;
            }
        }
        out->ndim = nd;
        memcpy(out->sizes, res, sizeof(res[0]) * (size_t)nd);
    }
    return 0;
}

/* Normalises attrs->dims in place (negative dims wrapped, sorted, explicit
 * list of every dim when ndims == 0) and computes the reduced shape. */
static int reduce_shape(WkGraph *g, WkOp op, const WkValue *in, WkAttrs *at, WkValue *out) {
    const char *name = wk_op_info(op)->name;
    int nd = in->ndim, wrap = nd ? nd : 1, all = at->ndims == 0;
    int mark[WK_MAX_DIMS] = {0};
    if (at->ndims < 0 || at->ndims > WK_MAX_DIMS) {
        wk_error_set("%s: invalid number of reduction dims %d", name, at->ndims);
        return -1;
    }
    for (int i = 0; i < at->ndims; i++) {
        int d = at->dims[i];
        if (d < -wrap || d >= wrap) {
            wk_error_set("Dimension out of range (expected to be in range of [%d, %d], but got %d)", -wrap,
                         wrap - 1, d);
            return -1;
        }
        if (d < 0) d += wrap;
        if (mark[d]) {
            wk_error_set("dim %d appears multiple times in the list of dims", d);
            return -1;
        }
        mark[d] = 1;
    }
    at->ndims = 0;
    for (int d = 0; d < nd; d++)
        if (all || mark[d]) at->dims[at->ndims++] = d;
    for (int i = at->ndims; i < WK_MAX_DIMS; i++) at->dims[i] = 0;
    at->keepdim = at->keepdim != 0;

    if (op == WK_OP_AMAX || op == WK_OP_AMIN || op == WK_OP_ARGMAX || op == WK_OP_ARGMIN) {
        /* a max over nothing has no identity: torch refuses */
        const char *fn = op == WK_OP_AMAX ? "amax" : op == WK_OP_AMIN ? "amin" : op == WK_OP_ARGMAX ? "argmax" : "argmin";
        for (int i = 0; i < at->ndims; i++) {
            int64_t n;
            if (!wk_sym_is_const(in->sizes[at->dims[i]], &n) || n != 0) continue;
            if (all)
                wk_error_set("%s(): Expected reduction dim to be specified for input.numel() == 0. "
                             "Specify the reduction dim with the 'dim' argument.", fn);
            else
                wk_error_set("%s(): Expected reduction dim %d to have non-zero size.", fn, at->dims[i]);
            return -1;
        }
    }
    if (wk_op_info(op)->shape == WK_SHAPE_SAME_DIM) { /* softmax: one dim, the input's shape */
        if (at->ndims != 1 && !(nd == 0 && at->ndims == 0)) {
            wk_error_set("%s: expects exactly one dim", name);
            return -1;
        }
        out->ndim = nd;
        for (int d = 0; d < nd; d++) out->sizes[d] = in->sizes[d];
        return 0;
    }
    out->ndim = 0;
    for (int d = 0; d < nd; d++) {
        int reduced = 0;
        for (int i = 0; i < at->ndims; i++) reduced |= at->dims[i] == d;
        if (!reduced) out->sizes[out->ndim++] = in->sizes[d];
        else if (at->keepdim) out->sizes[out->ndim++] = wk_sym_const(g->syms, 1);
    }
    return 0;
}

/* torch.result_type: tensors with dims, 0-d tensors and wrapped numbers are
 * promoted within their group; a weaker group changes the result only when
 * its category is higher. A wrapped float counts as the default dtype
 * (float32). -1 stands for "no member". */
static int combine_categories(int higher, int lower) {
    if (higher < 0) return lower;
    if (lower < 0) return higher;
    int ch = category((WkDType)higher), cl = category((WkDType)lower);
    if (cl <= ch && higher != WK_BOOL) return higher;
    /* a floating tensor with a complex 0-d one: complex of the tensor's width */
    if (ch == 2 && cl == 3) return complex_of((WkDType)higher);
    return wk_dtype_promote((WkDType)higher, (WkDType)lower);
}

WkDType wk_result_type(const WkValue *const *in, int n) {
    int dim = -1, zero = -1, wrapped = -1;
    for (int i = 0; i < n; i++) {
        int *slot = in[i]->is_wrapped_number ? &wrapped : in[i]->ndim > 0 ? &dim : &zero;
        WkDType dt = in[i]->dtype;
        if (in[i]->is_wrapped_number && category(dt) == 2) dt = WK_F32;
        *slot = *slot < 0 ? (int)dt : (int)wk_dtype_promote((WkDType)*slot, dt);
    }
    return (WkDType)combine_categories(dim, combine_categories(zero, wrapped));
}

/* The value of a SCALAR node's output, for checks torch makes on scalars. */
static const WkAttrs *scalar_attrs(const WkGraph *g, const WkValue *v) {
    if (v->node < 0) return NULL;
    const WkNode *n = g->nodes.data[v->node];
    return n->op == WK_OP_SCALAR && v->is_wrapped_number ? &n->attrs : NULL;
}

static int apply_dtype_rule(const WkGraph *g, WkOp op, const WkValue *const *in, int n,
                            const WkAttrs *at, WkDType *out) {
    const WkOpInfo *info = wk_op_info(op);
    WkValue as_scalar[3];
    const WkValue *bound[3];
    if (op == WK_OP_CLAMP && (in[1]->is_wrapped_number || in[2]->is_wrapped_number)) {
        /* torch picks clamp's Scalar overload when a bound is a Python
         * number: a 0-d tensor bound then converts to a number too */
        for (int i = 0; i < n; i++) {
            bound[i] = in[i];
            if (i > 0 && in[i]->ndim == 0 && !in[i]->is_wrapped_number) {
                as_scalar[i] = *in[i];
                as_scalar[i].is_wrapped_number = 1;
                as_scalar[i].dtype = category(in[i]->dtype) == 2 ? WK_F64 : in[i]->dtype == WK_BOOL ? WK_BOOL : WK_I64;
                bound[i] = &as_scalar[i];
            }
        }
        in = bound;
    }
    switch (info->dtype) {
    case WK_DTR_PROMOTE:
        *out = wk_result_type(in, n);
        if (op == WK_OP_SUB && (in[0]->dtype == WK_BOOL || in[1]->dtype == WK_BOOL)) {
            wk_error_set(in[0]->dtype == in[1]->dtype
                             ? "Subtraction, the `-` operator, with two bool tensors is not supported. "
                               "Use the `^` or `logical_xor()` operator instead."
                             : "Subtraction, the `-` operator, with a bool tensor is not supported. "
                               "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
            return -1;
        }
        /* torch has no bool pow kernel; a Python-scalar exponent takes its 0/1 fast path */
        if (op == WK_OP_POW && *out == WK_BOOL && !in[1]->is_wrapped_number) {
            wk_error_set("\"pow\" not implemented for 'Bool'");
            return -1;
        }
        if ((op == WK_OP_FMOD || op == WK_OP_REMAINDER || op == WK_OP_FLOOR_DIVIDE || op == WK_OP_CLAMP) &&
            *out == WK_BOOL) {
            wk_error_set("\"%s_cpu\" not implemented for 'Bool'", info->name);
            return -1;
        }
        if ((op == WK_OP_FMOD || op == WK_OP_REMAINDER || op == WK_OP_FLOOR_DIVIDE) && category(*out) != 2) {
            /* torch raises on an integer zero divisor, element by element; a
             * kernel cannot raise: only a known non-zero divisor builds */
            const WkAttrs *d = scalar_attrs(g, in[1]);
            if (!d || category(d->dtype) == 2 || d->ivalue == 0) {
                wk_error_set("%s: integer division by a tensor or by zero (torch raises on zero divisors)",
                             info->name);
                return -1;
            }
        }
        if ((op == WK_OP_CLAMP_MIN || op == WK_OP_CLAMP_MAX) && *out == WK_BOOL && in[1]->is_wrapped_number) {
            wk_error_set("\"clamp_scalar_cpu\" not implemented for 'Bool'");
            return -1;
        }
        if (op == WK_OP_ADDCDIV && category(in[1]->dtype) != 2 && category(in[2]->dtype) != 2) {
            wk_error_set("Integer division with addcdiv is no longer supported, and in a future release addcdiv "
                         "will perform a true division of tensor1 and tensor2.");
            return -1;
        }
        if (op == WK_OP_POW && category(in[0]->dtype) != 2) {
            const WkAttrs *e = scalar_attrs(g, in[1]);
            if (e && e->dtype == WK_I64 && e->ivalue < 0 && !in[0]->is_wrapped_number) {
                wk_error_set("Integers to negative integer powers are not allowed.");
                return -1;
            }
        }
        return 0;
    case WK_DTR_PROMOTE_FLOAT:
        *out = wk_result_type(in, n);
        if (category(*out) != 2) *out = WK_F32;
        return 0;
    case WK_DTR_COMPARE:
        *out = WK_BOOL;
        return 0;
    case WK_DTR_WHERE:
        if (in[0]->dtype != WK_BOOL) {
            wk_error_set("where expected condition to be a boolean tensor, but got a tensor with dtype %s",
                         scalar_type_name(in[0]->dtype));
            return -1;
        }
        *out = wk_result_type(in + 1, n - 1);
        return 0;
    case WK_DTR_SUM:
        if (at->has_dtype) *out = at->dtype;
        else *out = category(in[0]->dtype) == 2 ? in[0]->dtype : WK_I64;
        return 0;
    case WK_DTR_SAME:
        if (op == WK_OP_ABS && in[0]->dtype == WK_BOOL) { /* torch has no bool kernel */
            wk_error_set("\"abs_cpu\" not implemented for 'Bool'");
            return -1;
        }
        *out = in[0]->dtype;
        return 0;
    case WK_DTR_SAME_NOBOOL:
        if (in[0]->dtype == WK_BOOL) {
            if (op == WK_OP_NEG)
                wk_error_set("Negation, the `-` operator, on a bool tensor is not supported. "
                             "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
            else
                wk_error_set("Boolean inputs not supported for %s", op == WK_OP_RELU ? "relu" : info->name);
            return -1;
        }
        *out = in[0]->dtype;
        return 0;
    case WK_DTR_FLOAT_FIRST:
        if (op == WK_OP_LERP) {
            if (in[1]->dtype != in[0]->dtype) {
                wk_error_set("expected dtype %s for `end` but got dtype %s", scalar_type_name(in[0]->dtype),
                             scalar_type_name(in[1]->dtype));
                return -1;
            }
            if (!in[2]->is_wrapped_number && category(in[2]->dtype) != 2) {
                wk_error_set("lerp: weight must be floating");
                return -1;
            }
            *out = wk_result_type(in, n);
            /* integral inputs work only through a 0-d floating weight tensor */
            if (category(*out) != 2 || (category(in[0]->dtype) != 2 &&
                                        (in[2]->ndim != 0 || in[2]->is_wrapped_number))) {
                wk_error_set("\"lerp_kernel_scalar\" not implemented for '%s'", scalar_type_name(in[0]->dtype));
                return -1;
            }
            return 0;
        }
        for (int i = 1; i < n && op != WK_OP_LAYER_NORM; i++) /* parameters are numbers (a 0-d tensor converts) */
            if (in[i]->ndim != 0) {
                wk_error_set("%s: argument %d must be a number, not a tensor", info->name, i);
                return -1;
            }
        if ((op == WK_OP_HARDTANH || op == WK_OP_RELU6) && category(in[0]->dtype) == 1) {
            *out = in[0]->dtype;
            return 0;
        }
        if (category(in[0]->dtype) != 2) {
            wk_error_set("%s: not implemented for '%s' (floating inputs only)", info->name,
                         scalar_type_name(in[0]->dtype));
            return -1;
        }
        *out = in[0]->dtype;
        return 0;
    case WK_DTR_INTEGRAL:
        *out = wk_result_type(in, n);
        if (category(*out) == 2) {
            wk_error_set("\"%s_cpu\" not implemented for '%s'", info->name, scalar_type_name(*out));
            return -1;
        }
        return 0;
    case WK_DTR_SQUARE:
        *out = in[0]->dtype == WK_BOOL ? WK_I64 : in[0]->dtype;
        return 0;
    case WK_DTR_MASKED:
        if (in[1]->dtype != WK_BOOL) {
            wk_error_set("masked_fill_ only supports boolean masks, but got mask with dtype %s",
                         scalar_type_name(in[1]->dtype));
            return -1;
        }
        if (in[2]->ndim != 0) {
            wk_error_set("masked_fill_ only supports a 0-dimensional value tensor, but got tensor with %d "
                         "dimension(s).", in[2]->ndim);
            return -1;
        }
        *out = in[0]->dtype;
        return 0;
    case WK_DTR_ANY:
        *out = in[0]->dtype == WK_U8 ? WK_U8 : WK_BOOL;
        return 0;
    case WK_DTR_INDEX:
        if (in[0]->dtype == WK_BOOL) {
            wk_error_set("\"%s_cpu\" not implemented for 'Bool'", op == WK_OP_ARGMAX ? "argmax" : "argmin");
            return -1;
        }
        *out = WK_I64;
        return 0;
    case WK_DTR_VAR:
        if (category(in[0]->dtype) != 2) {
            wk_error_set("std and var only support floating point and complex dtypes");
            return -1;
        }
        *out = in[0]->dtype;
        return 0;
    case WK_DTR_FLOAT_ONLY:
        if (op != WK_OP_MEAN) { /* softmax, log_softmax: dtype= converts the input first */
            *out = at->has_dtype ? at->dtype : in[0]->dtype;
            if (category(*out) != 2) {
                wk_error_set("%s: not implemented for '%s' (floating dtypes only)", info->name,
                             scalar_type_name(*out));
                return -1;
            }
            return 0;
        }
        if (at->has_dtype) {
            if (!dt_valid((int)at->dtype) || category(at->dtype) != 2) {
                wk_error_set("mean(): could not infer output dtype. Optional dtype must be either a floating "
                             "point or complex dtype. Got: %s", scalar_type_name(at->dtype));
                return -1;
            }
            *out = at->dtype;
        } else if (category(in[0]->dtype) != 2) {
            wk_error_set("mean(): could not infer output dtype. Input dtype must be either a floating point "
                         "or complex dtype. Got: %s", scalar_type_name(in[0]->dtype));
            return -1;
        } else {
            *out = in[0]->dtype;
        }
        return 0;
    case WK_DTR_ATTR:
        *out = at->dtype;
        return 0;
    }
    wk_error_set("%s: unknown dtype rule", info->name);
    return -1;
}

/* Keeps only the attrs the op reads, so stray fields never reach hashes,
 * printing or the code generator. */
static void canonical_attrs(WkOp op, WkAttrs *at) {
    const WkOpInfo *info = wk_op_info(op);
    WkAttrs c = {0};
    if (info->shape == WK_SHAPE_REDUCE || info->shape == WK_SHAPE_SAME_DIM) {
        c.ndims = at->ndims;
        memcpy(c.dims, at->dims, sizeof c.dims);
        c.keepdim = info->shape == WK_SHAPE_REDUCE && at->keepdim;
        c.has_dtype = at->has_dtype != 0;
        if (c.has_dtype) c.dtype = at->dtype;
        if ((op == WK_OP_VAR || op == WK_OP_STD) && at->ivalue) {
            c.ivalue = 1;
            c.fvalue = at->fvalue;
        }
    } else if (op == WK_OP_LAYER_NORM) {
        c.ndims = at->ndims;
        memcpy(c.dims, at->dims, sizeof c.dims);
        c.fvalue = at->fvalue;
    } else if (op == WK_OP_INDEX) {
        c.ivalue = at->ivalue > 0 ? at->ivalue : 0; /* an embedding's padding_idx + 1 (ops.def note 11) */
    } else if (info->dtype == WK_DTR_ATTR) {
        c.dtype = at->dtype;
        c.has_dtype = 1;
        if (op == WK_OP_SCALAR) {
            if (category(c.dtype) == 2) c.fvalue = at->fvalue;
            else c.ivalue = c.dtype == WK_BOOL ? at->ivalue != 0 : at->ivalue;
        }
    }
    c.nints = at->nints > 0 && at->ints ? at->nints : 0;
    c.ints = c.nints ? at->ints : NULL;
    /* kept on the node: a creation op's device is in nothing else (its inputs
     * are Python scalars), and the pipeline copies nodes into stage graphs */
    if (at->has_device) {
        c.has_device = 1;
        c.device = at->device;
    }
    *at = c;
}

/* layer_norm: attrs.dims must be the input's trailing dims (normalised here),
 * and weight/bias must not widen the output beyond the input's shape. */
static int layer_norm_dims(const WkValue *in, WkAttrs *at, const WkValue *out) {
    int nd = in->ndim, k = at->ndims;
    if (k < 1 || k > nd) {
        wk_error_set("layer_norm: normalized_shape of %d dims for an input of %d", k, nd);
        return -1;
    }
    for (int i = 0; i < k; i++) {
        int d = at->dims[i] < 0 ? at->dims[i] + nd : at->dims[i];
        if (d != nd - k + i) {
            wk_error_set("layer_norm: normalises the trailing dims only");
            return -1;
        }
        at->dims[i] = d;
    }
    if (out->ndim != nd) goto widened;
    for (int d = 0; d < nd; d++)
        if (out->sizes[d] != in->sizes[d]) goto widened;
    return 0;
widened:
    wk_error_set("layer_norm: weight and bias must have the normalized shape");
    return -1;
}

/* Tensors on one device; 0-d CPU tensors (and Python scalars) go with any. */
static int common_device(const char *op, const WkValue *const *in, int n, WkDevice *out) {
    int found = 0;
    out->type = WK_DEV_CPU;
    out->index = 0;
    for (int i = 0; i < n; i++) {
        const WkValue *v = in[i];
        if (v->is_wrapped_number || (v->ndim == 0 && v->device.type == WK_DEV_CPU)) continue;
        if (found && (v->device.type != out->type || v->device.index != out->index)) {
            wk_error_set("%s: expected all tensors to be on the same device, found %s:%d (input %d) and %s:%d",
                         op, v->device.type == WK_DEV_CUDA ? "cuda" : "cpu", v->device.index, i,
                         out->type == WK_DEV_CUDA ? "cuda" : "cpu", out->index);
            return -1;
        }
        *out = v->device;
        found = 1;
    }
    if (!found) /* only 0-d CPU values: a CUDA 0-d tensor would have counted */
        for (int i = 0; i < n; i++)
            if (!in[i]->is_wrapped_number) *out = in[i]->device;
    return 0;
}

/* ---- views ------------------------------------------------------------------ */

int wk_view_attrs(const WkAttrs *at, int *ndim, const int64_t **sizes, const int64_t **strides, int64_t *offset) {
    if (!at->ints || at->nints < 2 || at->ints[0] < 0 || at->ints[0] > WK_MAX_DIMS ||
        at->nints != 2 * at->ints[0] + 2) {
        wk_error_set("VIEW: attrs.ints must be [ndim, sizes..., strides..., offset]");
        return -1;
    }
    *ndim = (int)at->ints[0];
    *sizes = at->ints + 1;
    *strides = at->ints + 1 + *ndim;
    *offset = at->ints[1 + 2 * *ndim];
    return 0;
}

static int64_t span_of(int nd, const int64_t *sizes, const int64_t *strides) {
    int64_t hi = 0;
    for (int d = 0; d < nd; d++)
        if (sizes[d] > 1) hi += (sizes[d] - 1) * strides[d];
    return hi;
}

int wk_view_map(int bnd, const int64_t *bsizes, const int64_t *bstrides, int vnd, const int64_t *vsizes,
                const int64_t *vstrides, int64_t offset, WkViewMap *m) {
    memset(m, 0, sizeof *m);
    int64_t vnumel = 1, bnumel = 1;
    for (int d = 0; d < vnd; d++) {
        if (vsizes[d] < 0 || vstrides[d] < 0) {
            wk_error_set("VIEW: negative size or stride");
            return -1;
        }
        vnumel *= vsizes[d];
        m->dim_of[d] = -1;
    }
    for (int k = 0; k < bnd; k++) {
        if (bstrides[k] < 0) {
            wk_error_set("VIEW: a base with negative strides");
            return -1;
        }
        bnumel *= bsizes[k];
    }
    m->affine = 1;
    if (vnumel == 0) return 0; /* nothing is read */
    /* memory safety first: every element the view reads is one the base spans */
    if (bnumel == 0 || offset < 0 || offset + span_of(vnd, vsizes, vstrides) > span_of(bnd, bsizes, bstrides)) {
        wk_error_set("VIEW: reads outside its base's memory");
        return -1;
    }
    /* affine: each moving view dim walks one base dim, the one with the
     * largest stride dividing its own; the offset splits greedily over the
     * base dims from the largest stride down */
    int order[WK_MAX_DIMS], n = 0;
    for (int k = 0; k < bnd; k++)
        if (bsizes[k] > 1 && bstrides[k] > 0) order[n++] = k;
    for (int a = 1; a < n; a++) /* insertion sort, largest stride first */
        for (int b = a; b > 0 && bstrides[order[b]] > bstrides[order[b - 1]]; b--) {
            int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    int ok = 1;
    int64_t rem = offset;
    for (int j = 0; j < n; j++) {
        int k = order[j];
        m->base_off[k] = rem / bstrides[k];
        rem -= m->base_off[k] * bstrides[k];
    }
    if (rem != 0) ok = 0;
    for (int d = 0; d < vnd && ok; d++) {
        if (vsizes[d] <= 1 || vstrides[d] == 0) continue;
        int pick = -1;
        for (int j = 0; j < n && pick < 0; j++)
            if (bstrides[order[j]] <= vstrides[d] && vstrides[d] % bstrides[order[j]] == 0) pick = order[j];
        if (pick < 0) ok = 0;
        else {
            m->dim_of[d] = pick;
            m->mult[d] = vstrides[d] / bstrides[pick];
        }
    }
    for (int k = 0; k < bnd && ok; k++) { /* no carries: each base index stays in range */
        int64_t hi = m->base_off[k];
        for (int d = 0; d < vnd; d++)
            if (m->dim_of[d] == k) hi += m->mult[d] * (vsizes[d] - 1);
        if (hi >= bsizes[k] && !(bsizes[k] <= 1 && hi == 0)) ok = 0;
    }
    if (ok) return 0;
    /* linear: the base must be dense, its dims in some order a contiguous
     * tensor's (a transposed result qualifies); size-1 dims never matter */
    memset(m, 0, sizeof *m);
    int64_t expect = 1;
    for (int j = n - 1; j >= 0; j--) {
        if (bstrides[order[j]] != expect) {
            wk_error_set("VIEW: no index map over a base with gaps or overlaps");
            return -1;
        }
        expect *= bsizes[order[j]];
    }
    for (int d = 0; d < vnd; d++) m->dim_of[d] = -1;
    return 0;
}

/* CAT: same rank, equal sizes but along the dim; PAD: sizes grown by the
 * pads (the result may not be negative). Static sizes only. */
static int cat_shape(WkGraph *g, const WkValue *const *in, int n, WkAttrs *at, WkValue *out) {
    if (n < 1 || at->nints != 1 || !at->ints) {
        wk_error_set("cat: needs at least one tensor and attrs.ints = [dim]");
        return -1;
    }
    int nd = in[0]->ndim;
    int64_t dim = at->ints[0] < 0 ? at->ints[0] + nd : at->ints[0], total = 0;
    if (nd == 0 || dim < 0 || dim >= nd) {
        wk_error_set("cat: dim %lld out of range for %d-d tensors", (long long)at->ints[0], nd);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (in[i]->ndim != nd || in[i]->is_wrapped_number) {
            wk_error_set("cat: tensors must have the same number of dimensions");
            return -1;
        }
        for (int d = 0; d < nd; d++) {
            int64_t a, b;
            if (!wk_sym_is_const(in[i]->sizes[d], &a) || !wk_sym_is_const(in[0]->sizes[d], &b)) {
                wk_error_set("cat: symbolic sizes");
                return -1;
            }
            if (d == dim) total += a;
            else if (a != b) {
                wk_error_set("cat: sizes of tensors must match except in dimension %lld", (long long)dim);
                return -1;
            }
        }
    }
    out->ndim = nd;
    for (int d = 0; d < nd; d++) out->sizes[d] = d == dim ? wk_sym_const(g->syms, total) : in[0]->sizes[d];
    return 0; /* a negative dim stays as given: lowerings normalise it */
}

static int pad_shape(WkGraph *g, const WkValue *const *in, WkAttrs *at, WkValue *out) {
    int nd = in[0]->ndim;
    if (at->nints != 2 * nd || (nd && !at->ints) || !in[1]->is_wrapped_number || in[0]->is_wrapped_number) {
        wk_error_set("pad: attrs.ints must hold a (lo, hi) pair per dim, and the value a Python scalar");
        return -1;
    }
    out->ndim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t s;
        if (!wk_sym_is_const(in[0]->sizes[d], &s)) {
            wk_error_set("pad: symbolic sizes");
            return -1;
        }
        s += at->ints[2 * d] + at->ints[2 * d + 1];
        if (s < 0) {
            wk_error_set("pad: the padded size of dim %d would be negative", d);
            return -1;
        }
        out->sizes[d] = wk_sym_const(g->syms, s);
    }
    return 0;
}

static int const_size(const WkValue *v, int d, int64_t *out, const char *what) {
    if (!wk_sym_is_const(v->sizes[d], out)) {
        wk_error_set("%s: symbolic sizes", what);
        return -1;
    }
    return 0;
}

static int index_dtype_ok(const WkValue *v, int int64_only, const char *what) {
    if (v->is_wrapped_number || !(v->dtype == WK_I64 || (!int64_only && v->dtype == WK_I32))) {
        wk_error_set("%s: index tensors must be %s (got %s)", what, int64_only ? "int64" : "int32 or int64",
                     v->is_wrapped_number ? "a Python number" : scalar_type_name(v->dtype));
        return -1;
    }
    return 0;
}

/* INDEX (ops.def note 11): x[..., idx1, ..., idxk, ...] with index tensors
 * at dims ints[1..]; their broadcast shape B replaces the indexed dims where
 * they are adjacent, else leads, as numpy and torch place it. */
static int index_shape(WkGraph *g, const WkValue *const *in, int n, const WkAttrs *at, WkValue *out) {
    const WkValue *x = in[0];
    int k = n - 1;
    if (k < 1 || at->nints != n || !at->ints || x->is_wrapped_number || x->ndim == 0) {
        wk_error_set("INDEX: an indexed tensor, index tensors and attrs.ints = [wrap, dims...]");
        return -1;
    }
    int prev = -1;
    for (int j = 0; j < k; j++) {
        int64_t d = at->ints[1 + j];
        if (d <= prev || d >= x->ndim) {
            wk_error_set("INDEX: indexed dims must increase within the tensor's %d dims", x->ndim);
            return -1;
        }
        prev = (int)d;
        if (index_dtype_ok(in[1 + j], 0, "index") < 0) return -1;
    }
    WkValue b = {0};
    if (broadcast_shapes(g, in + 1, k, &b) < 0) return -1;
    int adjacent = at->ints[k] - at->ints[1] == k - 1;
    int nd = x->ndim - k + b.ndim;
    if (nd > WK_MAX_DIMS) {
        wk_error_set("INDEX: the result would have %d dims (at most %d)", nd, WK_MAX_DIMS);
        return -1;
    }
    int o = 0, first = (int)at->ints[1];
    if (!adjacent)
        for (int j = 0; j < b.ndim; j++) out->sizes[o++] = b.sizes[j];
    for (int d = 0; d < x->ndim; d++) {
        int indexed = 0;
        for (int j = 0; j < k; j++) indexed |= at->ints[1 + j] == d;
        if (adjacent && d == first)
            for (int j = 0; j < b.ndim; j++) out->sizes[o++] = b.sizes[j];
        if (!indexed) out->sizes[o++] = x->sizes[d];
    }
    out->ndim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t s;
        if (!wk_sym_is_const(out->sizes[d], &s)) {
            wk_error_set("INDEX: symbolic sizes");
            return -1;
        }
    }
    return 0;
}

/* GATHER: torch.gather's rules: index int64 of the input's rank, no larger
 * than the input outside the gathered dim. */
static int gather_shape(const WkValue *const *in, const WkAttrs *at, WkValue *out) {
    const WkValue *x = in[0], *idx = in[1];
    if (at->nints != 1 || !at->ints || x->is_wrapped_number || x->ndim == 0) {
        wk_error_set("GATHER: a tensor of rank >= 1 and attrs.ints = [dim]");
        return -1;
    }
    if (index_dtype_ok(idx, 1, "gather()") < 0) return -1;
    int64_t dim = at->ints[0];
    if (dim < 0) dim += x->ndim;
    if (dim < 0 || dim >= x->ndim || idx->ndim != x->ndim) {
        wk_error_set("Index tensor must have the same number of dimensions as input tensor");
        return -1;
    }
    for (int d = 0; d < x->ndim; d++) {
        int64_t a, b;
        if (const_size(x, d, &a, "gather") < 0 || const_size(idx, d, &b, "gather") < 0) return -1;
        if (d != dim && b > a) {
            wk_error_set("Size does not match at dimension %d expected index to be smaller than self apart from "
                         "dimension %lld", d, (long long)dim);
            return -1;
        }
    }
    out->ndim = idx->ndim;
    for (int d = 0; d < idx->ndim; d++) out->sizes[d] = idx->sizes[d];
    return 0;
}

/* SCATTER (ops.def note 13): torch.scatter's rules on the index and source. */
static int scatter_shape(const WkValue *const *in, const WkAttrs *at, WkValue *out) {
    const WkValue *x = in[0], *idx = in[1], *src = in[2];
    if (at->nints != 3 || !at->ints || (at->ints[1] != 0 && at->ints[1] != 1) || x->is_wrapped_number ||
        x->ndim == 0 || x->ndim >= WK_MAX_DIMS) {
        wk_error_set("SCATTER: a tensor of rank 1..%d and attrs.ints = [dim, add, wrap]", WK_MAX_DIMS - 1);
        return -1;
    }
    if (index_dtype_ok(idx, 1, "scatter()") < 0) return -1;
    int64_t dim = at->ints[0];
    if (dim < 0) dim += x->ndim;
    if (dim < 0 || dim >= x->ndim || idx->ndim != x->ndim || (!src->is_wrapped_number && src->ndim != x->ndim)) {
        wk_error_set("Index tensor must have the same number of dimensions as self tensor");
        return -1;
    }
    if (!src->is_wrapped_number && src->dtype != x->dtype) {
        wk_error_set("scatter(): Expected self.dtype to be equal to src.dtype");
        return -1;
    }
    if (at->ints[1] && src->is_wrapped_number) {
        wk_error_set("scatter_add: the source must be a tensor");
        return -1;
    }
    for (int d = 0; d < x->ndim; d++) {
        int64_t a, b, s = INT64_MAX;
        if (const_size(x, d, &a, "scatter") < 0 || const_size(idx, d, &b, "scatter") < 0) return -1;
        if (!src->is_wrapped_number && const_size(src, d, &s, "scatter") < 0) return -1;
        if ((d != dim && b > a) || b > s) {
            wk_error_set("Expected index to be smaller than self apart from dimension %lld and to be smaller size "
                         "than src", (long long)dim);
            return -1;
        }
    }
    out->ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) out->sizes[d] = x->sizes[d];
    return 0;
}

static int one_hot_shape(WkGraph *g, const WkValue *const *in, const WkAttrs *at, WkValue *out) {
    const WkValue *x = in[0];
    if (at->nints != 1 || !at->ints || at->ints[0] < 1 || x->ndim >= WK_MAX_DIMS) {
        wk_error_set("ONE_HOT: attrs.ints = [num_classes >= 1] and an input of rank < %d", WK_MAX_DIMS);
        return -1;
    }
    if (x->is_wrapped_number || x->dtype != WK_I64) {
        wk_error_set("one_hot is only applicable to index tensor of type LongTensor.");
        return -1;
    }
    out->ndim = x->ndim + 1;
    for (int d = 0; d < x->ndim; d++) out->sizes[d] = x->sizes[d];
    out->sizes[x->ndim] = wk_sym_const(g->syms, at->ints[0]);
    return 0;
}

/* SIZES (creation ops): the sizes are attrs.ints; every input is a Python scalar. */
static int sizes_shape(WkGraph *g, const WkValue *const *in, int n, const WkAttrs *at, WkValue *out) {
    if (at->nints < 0 || at->nints > WK_MAX_DIMS || (at->nints && !at->ints)) {
        wk_error_set("creation op: attrs.ints must hold at most %d sizes", WK_MAX_DIMS);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (!in[i]->is_wrapped_number) {
            wk_error_set("creation op: input %d must be a Python scalar", i);
            return -1;
        }
    out->ndim = at->nints;
    for (int d = 0; d < at->nints; d++) {
        if (at->ints[d] < 0) {
            wk_error_set("Trying to create tensor with negative dimension %lld", (long long)at->ints[d]);
            return -1;
        }
        out->sizes[d] = wk_sym_const(g->syms, at->ints[d]);
    }
    return 0;
}

/* A VIEW node over in (value id `input`): output metadata from attrs; a
 * view of a VIEW becomes a view of the first base. */
static int add_view(WkGraph *g, int input, const WkAttrs *attrs) {
    int nd;
    const int64_t *vsizes, *vstrides;
    int64_t offset;
    if (wk_view_attrs(attrs, &nd, &vsizes, &vstrides, &offset) < 0) return -1;
    const WkValue *base = wk_graph_value(g, input);
    if (base->is_wrapped_number) {
        wk_error_set("VIEW: the base is a Python scalar");
        return -1;
    }
    if (base->node >= 0 && wk_graph_node(g, base->node)->op == WK_OP_VIEW) {
        const WkNode *inner = wk_graph_node(g, base->node);
        int ind;
        const int64_t *isz, *ist;
        int64_t ioff;
        if (wk_view_attrs(&inner->attrs, &ind, &isz, &ist, &ioff) < 0) return -1;
        input = inner->inputs[0];
        offset += ioff;
        base = wk_graph_value(g, input);
    }
    int64_t bsizes[WK_MAX_DIMS], bstrides[WK_MAX_DIMS];
    for (int k = 0; k < base->ndim; k++)
        if (!wk_sym_is_const(base->sizes[k], &bsizes[k]) || !wk_sym_is_const(base->strides[k], &bstrides[k])) {
            wk_error_set("VIEW: the base has symbolic sizes");
            return -1;
        }
    WkViewMap map;
    if (wk_view_map(base->ndim, bsizes, bstrides, nd, vsizes, vstrides, offset, &map) < 0) return -1;
    int64_t ints[2 * WK_MAX_DIMS + 2];
    ints[0] = nd;
    for (int d = 0; d < nd; d++) {
        ints[1 + d] = vsizes[d];
        ints[1 + nd + d] = vstrides[d];
    }
    ints[1 + 2 * nd] = offset;
    WkAttrs at = {0};
    at.nints = 2 * nd + 2;
    at.ints = ints;
    WkValue out = {0};
    out.dtype = base->dtype;
    out.device = base->device;
    out.ndim = nd;
    out.requires_grad = base->requires_grad;
    for (int d = 0; d < nd; d++) {
        out.sizes[d] = wk_sym_const(g->syms, vsizes[d]);
        out.strides[d] = wk_sym_const(g->syms, vstrides[d]);
    }
    return add_node(g, WK_OP_VIEW, &input, 1, &at, &out, 1);
}

enum { SMALL_INPUTS = 8 };

int wk_graph_op(WkGraph *g, WkOp op, const int *inputs, int ninputs, const WkAttrs *attrs) {
    const WkOpInfo *info = op == WK_OP_EXTERN ? NULL : wk_op_info(op);
    const WkValue *in_small[SMALL_INPUTS] = {NULL};
    const WkValue **in = in_small;
    WkAttrs at = {0};
    WkValue out = {0};
    int rc = -1;
    if (!info) {
        wk_error_set(op == WK_OP_EXTERN ? "EXTERN nodes are added with wk_graph_extern" : "unknown op %d",
                     (int)op);
        return -1;
    }
    if (ninputs < 0 || (info->arity >= 0 && ninputs != info->arity) || (ninputs && !inputs)) {
        wk_error_set("%s takes %d inputs, got %d", info->name, info->arity, ninputs);
        return -1;
    }
    if (ninputs > SMALL_INPUTS) in = wk_xcalloc((size_t)ninputs, sizeof *in);
    for (int i = 0; i < ninputs; i++) {
        in[i] = wk_graph_value(g, inputs[i]);
        if (!in[i]) {
            wk_error_set("%s: input %d is not a value of this graph (%d)", info->name, i, inputs[i]);
            goto done;
        }
        /* extern outputs and wk_graph_input_any inputs may hold any dtype */
        if (check_dtype_supported(in[i]->dtype, info->name) < 0) goto done;
    }
    if (attrs) at = *attrs;
    /* A zeroed WkAttrs has dtype 0, which is bool: without has_dtype, a
     * conversion to bool is taken as "no dtype given" and refused (callers
     * that predate has_dtype still get the other dtypes they set). */
    if (info->dtype == WK_DTR_ATTR && (!attrs || (!attrs->has_dtype && attrs->dtype == WK_BOOL))) {
        wk_error_set("%s needs a dtype (attrs.dtype with attrs.has_dtype)", info->name);
        goto done;
    }
    if (common_device(info->name, in, ninputs, &out.device) < 0) goto done;
    if (at.has_device) {
        int scalars_only = 1;
        for (int i = 0; i < ninputs; i++) scalars_only &= in[i]->is_wrapped_number;
        if (scalars_only) out.device = at.device;
    }
    if (op == WK_OP_VIEW) {
        rc = add_view(g, inputs[0], &at);
        goto done;
    }

    switch (info->shape) {
    case WK_SHAPE_SCALAR: out.ndim = 0; break;
    case WK_SHAPE_VIEW: break; /* add_view above */
    case WK_SHAPE_CAT:
        if (cat_shape(g, in, ninputs, &at, &out) < 0) goto done;
        break;
    case WK_SHAPE_PAD:
        if (pad_shape(g, in, &at, &out) < 0) goto done;
        break;
    case WK_SHAPE_INDEX:
        if (index_shape(g, in, ninputs, &at, &out) < 0) goto done;
        break;
    case WK_SHAPE_GATHER:
        if (gather_shape(in, &at, &out) < 0) goto done;
        break;
    case WK_SHAPE_ONE_HOT:
        if (one_hot_shape(g, in, &at, &out) < 0) goto done;
        break;
    case WK_SHAPE_SIZES:
        if (sizes_shape(g, in, ninputs, &at, &out) < 0) goto done;
        break;
    case WK_SHAPE_SCATTER:
        if (scatter_shape(in, &at, &out) < 0) goto done;
        break;
    case WK_SHAPE_BROADCAST:
        if (broadcast_shapes(g, in, ninputs, &out) < 0) goto done;
        if (op == WK_OP_LAYER_NORM && layer_norm_dims(in[0], &at, &out) < 0) goto done;
        if ((op == WK_OP_TRIL || op == WK_OP_TRIU) && (in[0]->ndim < 2 || at.nints != 1 || !at.ints)) {
            wk_error_set("%s: a tensor of rank >= 2 and attrs.ints = [diagonal]", op == WK_OP_TRIL ? "tril" : "triu");
            goto done;
        }
        break;
    case WK_SHAPE_REDUCE:
    case WK_SHAPE_SAME_DIM:
        if (reduce_shape(g, op, in[0], &at, &out) < 0) goto done;
        break;
    }
    if (apply_dtype_rule(g, op, in, ninputs, &at, &out.dtype) < 0) goto done;
    if (check_dtype_supported(out.dtype, info->name) < 0) goto done;
    canonical_attrs(op, &at);
    contiguous_strides(g->syms, &out);
    if (category(out.dtype) == 2)
        for (int i = 0; i < ninputs; i++) out.requires_grad |= in[i]->requires_grad;
    rc = add_node(g, op, inputs, ninputs, &at, &out, 1);
done:
    if (in != in_small) free(in);
    return rc;
}

/* ---- extern nodes ----------------------------------------------------------- */
int wk_graph_extern(WkGraph *g, int extern_index, const char *name, const int *inputs, int ninputs,
                    const WkTensorMeta *outputs, int noutputs) {
    return wk_graph_extern_ints(g, extern_index, name, inputs, ninputs, outputs, noutputs, NULL, 0);
}

int wk_graph_extern_ints(WkGraph *g, int extern_index, const char *name, const int *inputs, int ninputs,
                         const WkTensorMeta *outputs, int noutputs, const int64_t *ints, int nints) {
    const char *what = name && *name ? name : "extern";
    if (extern_index < 0) {
        wk_error_set("%s: invalid extern index %d", what, extern_index);
        return -1;
    }
    if (ninputs < 0 || (ninputs && !inputs) || noutputs <= 0 || !outputs) {
        wk_error_set("%s: needs inputs >= 0 and outputs >= 1 (got %d, %d)", what, ninputs, noutputs);
        return -1;
    }
    for (int i = 0; i < ninputs; i++) {
        const WkValue *v = wk_graph_value(g, inputs[i]);
        if (!v) {
            wk_error_set("%s: input %d is not a value of this graph (%d)", what, i, inputs[i]);
            return -1;
        }
        if (v->is_wrapped_number) {
            wk_error_set("%s: input %d is a Python scalar; put constants in the extern's call template", what, i);
            return -1;
        }
    }
    WkValue *outs = wk_xcalloc((size_t)noutputs, sizeof *outs);
    int rc = -1;
    for (int k = 0; k < noutputs; k++) {
        const WkTensorMeta *m = &outputs[k];
        WkValue *v = &outs[k];
        if (!dt_valid((int)m->dtype)) {
            wk_error_set("%s: output %d has an invalid dtype %d", what, k, (int)m->dtype);
            goto done;
        }
        if (m->ndim < 0 || m->ndim > WK_MAX_DIMS) {
            wk_error_set("%s: output %d has rank %d (at most %d dims)", what, k, m->ndim, WK_MAX_DIMS);
            goto done;
        }
        v->dtype = m->dtype;
        v->device = m->device;
        v->ndim = m->ndim;
        for (int d = 0; d < m->ndim; d++) {
            if (m->sizes[d] < 0) {
                wk_error_set("%s: output %d has a negative size at dimension %d", what, k, d);
                goto done;
            }
            v->sizes[d] = wk_sym_const(g->syms, m->sizes[d]);
            v->strides[d] = wk_sym_const(g->syms, m->strides[d]);
        }
        v->requires_grad = m->requires_grad != 0;
    }
    WkAttrs at = {0};
    at.nints = nints > 0 && ints ? nints : 0;
    at.ints = at.nints ? ints : NULL;
    rc = add_node(g, WK_OP_EXTERN, inputs, ninputs, &at, outs, noutputs);
    WkNode *n = g->nodes.data[g->nodes.len - 1];
    n->extern_index = extern_index;
    n->extern_name = wk_arena_strdup(g->arena, name && *name ? name : "extern");
done:
    free(outs);
    return rc;
}

int wk_graph_nexterns(const WkGraph *g) {
    int n = 0;
    for (int i = 0; i < g->nodes.len; i++) n += g->nodes.data[i]->op == WK_OP_EXTERN;
    return n;
}

int wk_graph_extern_table_size(const WkGraph *g) {
    int n = 0;
    for (int i = 0; i < g->nodes.len; i++)
        if (g->nodes.data[i]->op == WK_OP_EXTERN && g->nodes.data[i]->extern_index >= n)
            n = g->nodes.data[i]->extern_index + 1;
    return n;
}

int wk_graph_output(WkGraph *g, int value) {
    if (!wk_graph_value(g, value)) {
        wk_error_set("graph output: %d is not a value of this graph", value);
        return -1;
    }
    wk_vec_push(&g->outputs, value);
    return 0;
}

/* ---- printing and hashing --------------------------------------------------- */
static void print_syms(const WkGraph *g, WkStr *s, const WkSym *const *syms, int n) {
    wk_str_append(s, "[");
    for (int d = 0; d < n; d++) {
        if (d) wk_str_append(s, ", ");
        wk_sym_to_c(g->syms, syms[d], s, NULL, NULL);
    }
    wk_str_append(s, "]");
}

static void print_type(const WkGraph *g, WkStr *s, const WkValue *v) {
    wk_str_printf(s, " : %s", wk_dtype_name(v->dtype));
    print_syms(g, s, v->sizes, v->ndim);
}

static void print_device(WkStr *s, WkDevice d) {
    if (d.type == WK_DEV_CUDA) wk_str_printf(s, " cuda:%d", d.index);
    else wk_str_append(s, " cpu");
}

/* The shortest %g spelling that reads back as the same double. */
static void print_double(WkStr *s, double v) {
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v || v != v) break;
    }
    wk_str_append(s, buf);
}

/* Format (one line each):
 *   %0 = input 0 L['x'] : float32[4, 5] strides=[5, 1] cpu requires_grad
 *   %1 = SCALAR(2.5) : float64[] wrapped
 *   %2 = ADD(%0, %1) : float32[4, 5]
 *   %3 = SUM(%2, dims=[1], keepdim=False) : float32[4]
 *   %4 = CONVERT(%3, dtype=int64) : int64[4]
 *   %5, %6 = EXTERN[0 aten.foo](%0) : float32[5, 4] strides=[1, 5], int64[4] strides=[1]
 *   return (%3, %4)
 */
char *wk_graph_print(const WkGraph *g) {
    WkStr s = {0};
    wk_str_append(&s, "");
    for (int id = 0; id < g->values.len; id++) {
        const WkValue *v = g->values.data[id];
        if (v->node < 0) {
            wk_str_printf(&s, "%%%d = input %d %s", id, v->input_index, v->source ? v->source : "");
            print_type(g, &s, v);
            wk_str_append(&s, " strides=");
            print_syms(g, &s, v->strides, v->ndim);
            print_device(&s, v->device);
            if (v->requires_grad) wk_str_append(&s, " requires_grad");
            wk_str_append(&s, "\n");
            continue;
        }
        const WkNode *n = g->nodes.data[v->node];
        if (v->node_output > 0) continue; /* printed with output 0 */
        const WkAttrs *at = &n->attrs;
        const WkOpInfo *info = wk_op_info(n->op);
        if (n->op == WK_OP_EXTERN) {
            for (int k = 0; k < n->noutputs; k++) wk_str_printf(&s, "%s%%%d", k ? ", " : "", n->outputs[k]);
            wk_str_printf(&s, " = EXTERN[%d %s](", n->extern_index, n->extern_name);
            for (int i = 0; i < n->ninputs; i++) wk_str_printf(&s, "%s%%%d", i ? ", " : "", n->inputs[i]);
            wk_str_append(&s, ")");
            for (int k = 0; k < n->noutputs; k++) {
                const WkValue *o = g->values.data[n->outputs[k]];
                wk_str_printf(&s, "%s%s", k ? ", " : " : ", wk_dtype_name(o->dtype));
                print_syms(g, &s, o->sizes, o->ndim);
                wk_str_append(&s, " strides=");
                print_syms(g, &s, o->strides, o->ndim);
                if (o->device.type != WK_DEV_CPU) print_device(&s, o->device);
            }
            wk_str_append(&s, "\n");
            continue;
        }
        wk_str_printf(&s, "%%%d = %s(", id, info->name);
        for (int i = 0; i < n->ninputs; i++) wk_str_printf(&s, "%s%%%d", i ? ", " : "", n->inputs[i]);
        const char *sep = n->ninputs ? ", " : "";
        if (n->op == WK_OP_SCALAR) {
            if (category(at->dtype) == 2) print_double(&s, at->fvalue);
            else if (at->dtype == WK_BOOL) wk_str_append(&s, at->ivalue ? "True" : "False");
            else wk_str_printf(&s, "%" PRId64, at->ivalue);
        } else if (info->shape == WK_SHAPE_REDUCE || info->shape == WK_SHAPE_SAME_DIM) {
            wk_str_printf(&s, "%sdims=[", sep);
            for (int i = 0; i < at->ndims; i++) wk_str_printf(&s, "%s%d", i ? ", " : "", at->dims[i]);
            if (info->shape == WK_SHAPE_REDUCE) wk_str_printf(&s, "], keepdim=%s", at->keepdim ? "True" : "False");
            else wk_str_append(&s, "]");
            if (at->has_dtype) wk_str_printf(&s, ", dtype=%s", wk_dtype_name(at->dtype));
            if (at->ivalue && (n->op == WK_OP_VAR || n->op == WK_OP_STD)) {
                wk_str_append(&s, ", correction=");
                print_double(&s, at->fvalue);
            }
        } else if (info->dtype == WK_DTR_ATTR) {
            wk_str_printf(&s, "%sdtype=%s", sep, wk_dtype_name(at->dtype));
        } else if (n->op == WK_OP_INDEX && at->ivalue) {
            wk_str_printf(&s, "%spadding_idx=%" PRId64, sep, at->ivalue - 1);
        }
        if (at->nints) {
            wk_str_printf(&s, "%sints=[", n->ninputs || n->op == WK_OP_SCALAR ? ", " : "");
            for (int i = 0; i < at->nints; i++) wk_str_printf(&s, "%s%" PRId64, i ? ", " : "", at->ints[i]);
            wk_str_append(&s, "]");
        }
        wk_str_append(&s, ")");
        print_type(g, &s, v);
        if (v->device.type != WK_DEV_CPU) print_device(&s, v->device);
        if (v->is_wrapped_number) wk_str_append(&s, " wrapped");
        wk_str_append(&s, "\n");
    }
    wk_str_append(&s, "return (");
    for (int i = 0; i < g->outputs.len; i++) wk_str_printf(&s, "%s%%%d", i ? ", " : "", g->outputs.data[i]);
    wk_str_append(&s, g->outputs.len == 1 ? ",)\n" : ")\n");
    return s.data;
}

static uint64_t hash_value_meta(uint64_t h, const WkValue *v) {
    h = wk_hash_mix(h, (uint64_t)v->dtype);
    h = wk_hash_mix(h, (uint64_t)v->device.type * 1000003u + (uint64_t)v->device.index);
    h = wk_hash_mix(h, (uint64_t)v->ndim);
    for (int d = 0; d < v->ndim; d++) {
        h = wk_hash_mix(h, v->sizes[d]->hash);
        h = wk_hash_mix(h, v->strides[d]->hash);
    }
    h = wk_hash_mix(h, (uint64_t)v->requires_grad);
    return wk_hash_mix(h, (uint64_t)v->is_wrapped_number);
}

uint64_t wk_graph_hash(const WkGraph *g) {
    uint64_t h = wk_hash_mix(0x77696b6bu, (uint64_t)g->values.len);
    for (int id = 0; id < g->values.len; id++) {
        const WkValue *v = g->values.data[id];
        h = hash_value_meta(h, v);
        if (v->node < 0 || v->node_output > 0) continue;
        const WkNode *n = g->nodes.data[v->node];
        const WkAttrs *at = &n->attrs;
        h = wk_hash_mix(h, (uint64_t)n->op);
        for (int i = 0; i < n->ninputs; i++) h = wk_hash_mix(h, (uint64_t)n->inputs[i]);
        h = wk_hash_mix(h, (uint64_t)at->dtype);
        h = wk_hash_mix(h, (uint64_t)at->has_dtype);
        h = wk_hash_mix(h, (uint64_t)at->ndims);
        for (int i = 0; i < at->ndims; i++) h = wk_hash_mix(h, (uint64_t)at->dims[i]);
        h = wk_hash_mix(h, (uint64_t)at->keepdim);
        uint64_t bits;
        memcpy(&bits, &at->fvalue, sizeof bits);
        h = wk_hash_mix(h, bits);
        h = wk_hash_mix(h, (uint64_t)at->ivalue);
        h = wk_hash_mix(h, (uint64_t)at->nints);
        for (int i = 0; i < at->nints; i++) h = wk_hash_mix(h, (uint64_t)at->ints[i]);
        h = wk_hash_mix(h, (uint64_t)(n->extern_index + 1));
        /* an extern with ints may become generated code chosen by its name */
        if (n->op == WK_OP_EXTERN && at->nints > 0)
            h = wk_hash_bytes(n->extern_name, strlen(n->extern_name), h);
    }
    for (int i = 0; i < g->outputs.len; i++) h = wk_hash_mix(h, (uint64_t)g->outputs.data[i]);
    return h;
}

/* ---- copies ----------------------------------------------------------------- */

static int const_shape(const WkValue *v, int64_t *sizes, int64_t *strides) {
    for (int d = 0; d < v->ndim; d++)
        if (!wk_sym_is_const(v->sizes[d], &sizes[d]) || !wk_sym_is_const(v->strides[d], &strides[d])) {
            wk_error_set("graph copy: value %%%d has a symbolic size or stride", v->id);
            return -1;
        }
    return 0;
}

/* g's inputs added to c in input order (their positions are part of the
 * graph's contract); value_map gets their ids, -1 for every other value. */
static int copy_inputs(WkGraph *c, const WkGraph *g, int *value_map) {
    for (int id = 0; id < g->values.len; id++) value_map[id] = -1;
    for (int i = 0; i < g->inputs.len; i++) {
        const WkValue *v = g->values.data[g->inputs.data[i]];
        int64_t sizes[WK_MAX_DIMS], strides[WK_MAX_DIMS];
        if (const_shape(v, sizes, strides) < 0) return -1;
        int id = wk_graph_input_any(c, v->dtype, v->device, v->ndim, sizes, strides, v->requires_grad, v->source);
        if (id < 0) return -1;
        value_map[v->id] = id;
    }
    return 0;
}

WkGraph *wk_graph_copy_inputs(const WkGraph *g, int *value_map) {
    WkGraph *c = wk_graph_new();
    if (copy_inputs(c, g, value_map) == 0) return c;
    wk_graph_free(c);
    return NULL;
}

int wk_graph_replay(WkGraph *dst, const WkGraph *src, int node, const int *inputs, int ninputs, const int *dims,
                    int ndims) {
    if (node < 0 || node >= src->nodes.len) {
        wk_error_set("graph replay: no node %d", node);
        return -1;
    }
    const WkNode *nd = src->nodes.data[node];
    if (nd->op == WK_OP_EXTERN) {
        wk_error_set("graph replay: node %d is an extern call (its outputs need new metadata)", node);
        return -1;
    }
    if (nd->op == WK_OP_SCALAR && src->values.data[nd->output]->is_wrapped_number)
        return wk_graph_scalar(dst, nd->attrs.dtype, nd->attrs.fvalue, nd->attrs.ivalue);
    if (ndims > WK_MAX_DIMS) {
        wk_error_set("graph replay: %d dims", ndims);
        return -1;
    }
    WkAttrs attrs = nd->attrs;
    if (ndims >= 0) {
        attrs.ndims = ndims;
        for (int i = 0; i < ndims; i++) attrs.dims[i] = dims[i];
    }
    return wk_graph_op(dst, nd->op, inputs, ninputs, &attrs);
}

WkGraph *wk_graph_copy(const WkGraph *g, const int *extra_outputs, const WkTensorMeta *extra_metas, int *value_map) {
    WkGraph *c = wk_graph_new();
    int nextra_used = 0;
    if (copy_inputs(c, g, value_map) < 0) goto fail;
    for (int n = 0; n < g->nodes.len; n++) {
        const WkNode *nd = g->nodes.data[n];
        int *inputs = wk_arena_alloc(c->arena, sizeof(int) * (size_t)(nd->ninputs ? nd->ninputs : 1));
        for (int i = 0; i < nd->ninputs; i++) {
            inputs[i] = value_map[nd->inputs[i]];
            if (inputs[i] < 0) {
                wk_error_set("graph copy: node %d reads a value defined after it", n);
                goto fail;
            }
        }
        int id, nout = nd->noutputs, extra = extra_outputs ? extra_outputs[n] : 0;
        if (nd->op == WK_OP_EXTERN) {
            WkTensorMeta *metas = wk_xcalloc((size_t)(nout + extra), sizeof *metas);
            int bad = 0;
            for (int k = 0; k < nout && !bad; k++) {
                const WkValue *v = g->values.data[nd->outputs[k]];
                metas[k].dtype = v->dtype;
                metas[k].device = v->device;
                metas[k].ndim = v->ndim;
                metas[k].requires_grad = v->requires_grad;
                bad = const_shape(v, metas[k].sizes, metas[k].strides) < 0;
            }
            for (int k = 0; k < extra; k++) metas[nout + k] = extra_metas[nextra_used + k];
            id = bad ? -1
                     : wk_graph_extern_ints(c, nd->extern_index, nd->extern_name, inputs, nd->ninputs, metas,
                                            nout + extra, nd->attrs.ints, nd->attrs.nints);
            free(metas);
            nextra_used += extra;
        } else if (extra) {
            wk_error_set("graph copy: only an extern node can gain outputs (node %d)", n);
            goto fail;
        } else if (nd->op == WK_OP_SCALAR && g->values.data[nd->output]->is_wrapped_number) {
            id = wk_graph_scalar(c, nd->attrs.dtype, nd->attrs.fvalue, nd->attrs.ivalue);
        } else {
            id = wk_graph_op(c, nd->op, inputs, nd->ninputs, &nd->attrs);
        }
        if (id < 0) goto fail;
        for (int k = 0; k < nout; k++) value_map[nd->outputs[k]] = id + k;
    }
    for (int i = 0; i < g->outputs.len; i++)
        if (wk_graph_output(c, value_map[g->outputs.data[i]]) < 0) goto fail;
    return c;
fail:
    wk_graph_free(c);
    return NULL;
}
