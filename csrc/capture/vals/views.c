/* vals/views.c — torch calls that only re-describe a tensor's memory (view,
 * reshape, permute, transpose, expand, squeeze, unsqueeze, flatten,
 * unflatten, narrow, select, split, chunk, as_strided, getitem) become VIEW
 * nodes (ops.def note 8): the view's sizes and strides are computed here from
 * the base's layout exactly as eager computes them, and the graph builder
 * checks that an index map reads them. The op table's VIEW row lists the
 * callables that land here; this file also owns the layout-only calls that
 * row lists (clone, contiguous, dropout in eval: eager's identity).
 *
 * Anything a rule does not model (a symbolic size, an argument that is not a
 * constant, a layout the builder refuses, an argument eager rejects) becomes
 * an extern call of the torch callable, so eager computes it (and raises
 * what eager raises). No function here records a fallback reason before it
 * decides to extern, except for view/as_strided of a value whose layout in
 * wick differs from eager's (a node whose layout rule capture does not
 * model, on a permuted input): those fall back, since even an extern would
 * read other strides.
 *
 * It also owns the layout of native results (cap_eager_laid): a pointwise
 * result, a cast, a clone, a cat, a constant pad or an advanced index gets
 * the strides eager gives it (torch's rule asked on meta tensors), a
 * permuted dense copy where those are not contiguous, so that the calls
 * above see eager's strides; results eager allocates contiguous whatever
 * their operands (reductions, softmax, layer_norm, gather) are eager's
 * layout as they are (result_is_contiguous_in_eager). */
#include <string.h>

#include "../interp.h"

/* A tensor's layout in elements, relative to its first element. */
typedef struct {
    int nd;
    int64_t sizes[WK_MAX_DIMS];
    int64_t strides[WK_MAX_DIMS];
    int64_t offset;
} Layout;

/* The layout of a graph value: its given strides, or contiguous for node
 * outputs (graph.h). -1 when a size or stride is symbolic. */
static int layout_of(const WkValue *m, Layout *L) {
    L->nd = m->ndim;
    L->offset = 0;
    int64_t expect = 1;
    for (int d = m->ndim - 1; d >= 0; d--) {
        if (!wk_sym_is_const(m->sizes[d], &L->sizes[d])) return -1;
        if (!m->strides[d]) L->strides[d] = expect;
        else if (!wk_sym_is_const(m->strides[d], &L->strides[d])) return -1;
        expect *= L->sizes[d] > 1 ? L->sizes[d] : 1;
    }
    return 0;
}

static void contiguous_strides(Layout *L) {
    int64_t expect = 1;
    for (int d = L->nd - 1; d >= 0; d--) {
        L->strides[d] = expect;
        expect *= L->sizes[d] > 1 ? L->sizes[d] : 1;
    }
}

static int is_contiguous(const Layout *L) {
    int64_t expect = 1;
    for (int d = L->nd - 1; d >= 0; d--) {
        if (L->sizes[d] == 0) return 1;
        if (L->sizes[d] != 1 && L->strides[d] != expect) return 0;
        expect *= L->sizes[d];
    }
    return 1;
}

/* Is the value's layout in wick the one eager gives it? Inputs, views and
 * extern outputs carry eager's strides, and so do results laid out by
 * eager's rule for their call (cap_eager_laid); other node outputs are
 * contiguous in wick, and in eager when every tensor they read is laid out
 * contiguously. Calls whose result depends on the strides (view, reshape,
 * as_strided, clone, contiguous, stride()) are native only on values this
 * answers yes for. */
static int layout_is_eagers_uncached(Interp *I, int value, int depth);

/* A yes is remembered on the value (the walk below would otherwise be
 * repeated for every operand of every node laid out); a no may come from
 * the depth bound, so it is asked again. */
static int layout_is_eagers(Interp *I, int value, int depth) {
    if (cap_has_eager_layout(I, value)) return 1;
    if (!layout_is_eagers_uncached(I, value, depth)) return 0;
    cap_mark_eager_layout(I, value);
    return 1;
}

/* Ops whose result eager allocates contiguous whatever its operands'
 * strides (their meta functions give it no strides: a reduction's
 * resize_reduction, softmax's and gather's set_output_raw_strided,
 * native_layer_norm's and index_select's contiguous empty): wick's
 * contiguous output is eager's layout, on every device. Advanced indexing
 * (INDEX) is not among them: its TensorIterator follows the source's
 * strides, and embedding's index_select shares the row. */
static int result_is_contiguous_in_eager(WkOp op) {
    if (wk_op_info(op)->shape == WK_SHAPE_REDUCE) return 1;
    return op == WK_OP_SOFTMAX || op == WK_OP_LOG_SOFTMAX || op == WK_OP_LAYER_NORM || op == WK_OP_GATHER;
}

static int layout_is_eagers_uncached(Interp *I, int value, int depth) {
    const WkGraph *g = I->g;
    const WkValue *m = wk_graph_value(g, value);
    if (m->node < 0) return 1;
    const WkNode *n = wk_graph_node(g, m->node);
    if (n->op == WK_OP_EXTERN || n->op == WK_OP_SCALAR) return 1;
    /* a view's strides are its base's, remapped: eager's only where the
     * base's are (a slice of a result wick keeps contiguous where eager
     * permutes it has wick's contiguous base under it) */
    if (n->op == WK_OP_VIEW) return depth <= 12 && layout_is_eagers(I, n->inputs[0], depth + 1);
    /* a CONVERT to its own dtype is capture's contiguous copy (contiguous(),
     * reshape's copy, clone of a contiguous tensor): contiguous in eager too */
    if (n->op == WK_OP_CONVERT && wk_graph_value(g, n->inputs[0])->dtype == m->dtype) return 1;
    if (result_is_contiguous_in_eager(n->op)) return 1;
    if (depth > 12) return 0;
    for (int i = 0; i < n->ninputs; i++) {
        const WkValue *in = wk_graph_value(g, n->inputs[i]);
        if (in->is_wrapped_number || in->ndim == 0) continue;
        Layout L;
        if (layout_of(in, &L) < 0 || !is_contiguous(&L) || !layout_is_eagers(I, n->inputs[i], depth + 1)) return 0;
    }
    return 1;
}

int cap_layout_is_eagers(Interp *I, Sv *t) {
    int v = cap_tensor_value(I, t);
    return v >= 0 && layout_is_eagers(I, v, 0);
}

/* The VIEW node of self with layout L, or NULL without a reason when the
 * builder refuses it (the caller makes the call an extern). */
static Sv *emit_view(Interp *I, Sv *self, const Layout *L) {
    int in = cap_tensor_value(I, self);
    if (in < 0) return NULL;
    int64_t ints[2 * WK_MAX_DIMS + 2];
    ints[0] = L->nd;
    for (int d = 0; d < L->nd; d++) {
        ints[1 + d] = L->sizes[d];
        ints[1 + L->nd + d] = L->strides[d];
    }
    ints[1 + 2 * L->nd] = L->offset;
    WkAttrs at = {0};
    at.nints = 2 * L->nd + 2;
    at.ints = ints;
    int v = wk_graph_op(I->g, WK_OP_VIEW, &in, 1, &at);
    if (v < 0) {
        wk_error_clear();
        return NULL;
    }
    int rg = I->grad_enabled && cap_get_rg(I, in) && wk_dtype_is_float(wk_graph_value(I->g, v)->dtype);
    cap_set_node_output_rg(I, v, rg);
    return sv_tensor(I, v);
}

/* A fresh contiguous copy (CONVERT to its own dtype is a new buffer). */
static Sv *contiguous_copy(Interp *I, Sv *self) {
    int in = cap_tensor_value(I, self);
    if (in < 0) return NULL;
    WkAttrs at = {0};
    at.dtype = wk_graph_value(I->g, in)->dtype;
    at.has_dtype = 1;
    return cap_graph_op(I, WK_OP_CONVERT, &in, 1, &at);
}

/* ---- argument reading: 0 when read, -1 when not a constant of that kind ---- */

static int const_int(const Sv *s, int64_t *out) {
    if (!s || s->kind != SV_CONST || !PyLong_CheckExact(s->obj)) return -1;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(s->obj, &overflow);
    if (overflow || PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

static int const_bool(const Sv *s, int *out) {
    if (!s || s->kind != SV_CONST || !PyBool_Check(s->obj)) return -1;
    *out = s->obj == Py_True;
    return 0;
}

static int const_number(const Sv *s, double *out) {
    if (!s || s->kind != SV_CONST) return -1;
    if (PyFloat_CheckExact(s->obj)) *out = PyFloat_AS_DOUBLE(s->obj);
    else if (PyLong_CheckExact(s->obj)) *out = (double)PyLong_AsLongLong(s->obj);
    else return -1;
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* Ints given as varargs (x.view(2, 3)) or as one sequence (x.view((2, 3)),
 * torch.Size, a list): at most WK_MAX_DIMS of them. */
static int int_list(Sv *const *items, int n, int64_t *out, int *nout) {
    if (n == 1 && items[0]->kind == SV_CONST && (PyTuple_Check(items[0]->obj) || PyList_Check(items[0]->obj))) {
        PyObject *seq = items[0]->obj;
        Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
        if (k > WK_MAX_DIMS) return -1;
        for (Py_ssize_t i = 0; i < k; i++) {
            Sv tmp = {.kind = SV_CONST, .obj = PySequence_Fast_GET_ITEM(seq, i)};
            if (const_int(&tmp, &out[i]) < 0) return -1;
        }
        *nout = (int)k;
        return 0;
    }
    if (n == 1 && (items[0]->kind == SV_TUPLE || items[0]->kind == SV_LIST)) {
        const SvList *seq = &items[0]->items;
        if (seq->len > WK_MAX_DIMS) return -1;
        for (int i = 0; i < seq->len; i++)
            if (const_int(seq->data[i], &out[i]) < 0) return -1;
        *nout = seq->len;
        return 0;
    }
    if (n > WK_MAX_DIMS) return -1;
    for (int i = 0; i < n; i++)
        if (const_int(items[i], &out[i]) < 0) return -1;
    *nout = n;
    return 0;
}

/* Binds the arguments after self against `names` (positional in order, or
 * by keyword); 0, or -1 for an unknown keyword or too many arguments. */
static int take(const Args *a, const char *const *names, int n, Sv **out) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    if (a->npos - 1 > n) return -1;
    for (int i = 1; i < a->npos; i++) out[i - 1] = a->pos[i];
    for (int k = 0; k < a->nkw; k++) {
        int found = -1;
        for (int i = 0; i < n; i++)
            if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(a->kwnames, k), names[i]) == 0) found = i;
        if (found < 0 || out[found]) return -1;
        out[found] = a->kw[k];
    }
    return 0;
}

static int wrap_dim(int64_t d, int nd, int *out) {
    int w = nd > 0 ? nd : 1;
    if (d < -w || d >= w) return -1;
    *out = (int)(d < 0 ? d + w : d);
    return 0;
}

/* ---- the view rules: 0 with *out filled, -1 when not modelled ---- */

/* Strides of `shape` over L's memory without a copy (eager's view rule:
 * each run of base dims that is contiguous in memory splits freely), or -1
 * when a view cannot express it. */
static int view_strides(const Layout *L, int nd, const int64_t *shape, int64_t *strides) {
    int64_t numel = 1;
    for (int d = 0; d < L->nd; d++) numel *= L->sizes[d];
    Layout out = {.nd = nd};
    memcpy(out.sizes, shape, sizeof(int64_t) * (size_t)nd);
    int same = nd == L->nd;
    for (int d = 0; same && d < nd; d++) same = shape[d] == L->sizes[d];
    if (same && numel == 0) { /* eager keeps an empty tensor's strides */
        memcpy(strides, L->strides, sizeof(int64_t) * (size_t)nd);
        return 0;
    }
    if (numel == 0 || L->nd == 0) {
        contiguous_strides(&out);
        memcpy(strides, out.strides, sizeof(int64_t) * (size_t)nd);
        return 0;
    }
    int vd = nd - 1;
    int64_t run_stride = L->strides[L->nd - 1], base_numel = 1, view_numel = 1;
    for (int bd = L->nd - 1; bd >= 0; bd--) {
        base_numel *= L->sizes[bd];
        /* a run of base dims ends where the next outer dim does not continue it */
        int run_ends = bd == 0 || (L->sizes[bd - 1] != 1 && L->strides[bd - 1] != base_numel * run_stride);
        if (!run_ends) continue;
        while (vd >= 0 && (view_numel < base_numel || shape[vd] == 1)) {
            strides[vd] = view_numel * run_stride;
            view_numel *= shape[vd];
            vd--;
        }
        if (view_numel != base_numel) return -1;
        if (bd > 0) {
            run_stride = L->strides[bd - 1];
            base_numel = view_numel = 1;
        }
    }
    return vd == -1 ? 0 : -1;
}

/* shape with one -1 inferred; -1 when the sizes do not match the numel */
static int infer_shape(const Layout *L, int nd, int64_t *shape) {
    int64_t numel = 1, known = 1;
    int infer = -1;
    for (int d = 0; d < L->nd; d++) numel *= L->sizes[d];
    for (int d = 0; d < nd; d++) {
        if (shape[d] == -1) {
            if (infer >= 0) return -1;
            infer = d;
        } else if (shape[d] < 0) {
            return -1;
        } else {
            known *= shape[d];
        }
    }
    if (infer >= 0) {
        if (known == 0) return -1;
        shape[infer] = numel / known;
        known *= shape[infer];
    }
    return known == numel ? 0 : -1;
}

typedef enum { RESHAPE_VIEW_ONLY, RESHAPE_MAY_COPY } ReshapeKind;

/* view/reshape of self to shape: a VIEW, or (reshape of a layout no view
 * expresses) a contiguous copy viewed, as eager copies. */
static Sv *reshape_to(Interp *I, Sv *self, const Layout *L, int nd, int64_t *shape, ReshapeKind kind) {
    if (infer_shape(L, nd, shape) < 0) return NULL;
    Layout out = {.nd = nd};
    memcpy(out.sizes, shape, sizeof(int64_t) * (size_t)nd);
    if (view_strides(L, nd, shape, out.strides) == 0) return emit_view(I, self, &out);
    if (kind == RESHAPE_VIEW_ONLY) return NULL;
    Sv *copy = contiguous_copy(I, self);
    if (!copy) return NULL;
    contiguous_strides(&out);
    return emit_view(I, copy, &out);
}

static int permute_layout(const Layout *L, const int64_t *dims, int n, Layout *out) {
    if (n != L->nd) return -1;
    int seen[WK_MAX_DIMS] = {0};
    out->nd = n;
    out->offset = L->offset;
    for (int i = 0; i < n; i++) {
        int d;
        if (wrap_dim(dims[i], L->nd, &d) < 0 || L->nd == 0 || seen[d]) return -1;
        seen[d] = 1;
        out->sizes[i] = L->sizes[d];
        out->strides[i] = L->strides[d];
    }
    return 0;
}

static void swap_dims(Layout *L, int a, int b) {
    int64_t s = L->sizes[a], t = L->strides[a];
    L->sizes[a] = L->sizes[b];
    L->strides[a] = L->strides[b];
    L->sizes[b] = s;
    L->strides[b] = t;
}

static int expand_layout(const Layout *L, const int64_t *sizes, int n, Layout *out) {
    if (n < L->nd || n > WK_MAX_DIMS) return -1;
    out->nd = n;
    out->offset = L->offset;
    int lead = n - L->nd;
    for (int i = 0; i < n; i++) {
        if (i < lead) {
            if (sizes[i] < 0) return -1;
            out->sizes[i] = sizes[i];
            out->strides[i] = 0;
            continue;
        }
        int64_t have = L->sizes[i - lead], want = sizes[i];
        if (want == -1 || want == have) {
            out->sizes[i] = have;
            out->strides[i] = L->strides[i - lead];
        } else if (have == 1 && want >= 0) {
            out->sizes[i] = want;
            out->strides[i] = 0;
        } else {
            return -1;
        }
    }
    return 0;
}

static void drop_dim(Layout *L, int d) {
    for (int k = d; k + 1 < L->nd; k++) {
        L->sizes[k] = L->sizes[k + 1];
        L->strides[k] = L->strides[k + 1];
    }
    L->nd--;
}

static int insert_dim(Layout *L, int d) {
    if (L->nd >= WK_MAX_DIMS) return -1;
    int64_t stride = d >= L->nd ? 1 : L->sizes[d] * L->strides[d]; /* eager's stride for the new dim */
    for (int k = L->nd; k > d; k--) {
        L->sizes[k] = L->sizes[k - 1];
        L->strides[k] = L->strides[k - 1];
    }
    L->sizes[d] = 1;
    L->strides[d] = stride;
    L->nd++;
    return 0;
}

/* narrow(dim, start, length) in place; -1 when out of range (eager raises) */
static int narrow_layout(Layout *L, int d, int64_t start, int64_t length) {
    if (L->nd == 0) return -1;
    if (start < 0) start += L->sizes[d];
    if (start < 0 || length < 0 || start > L->sizes[d] || start + length > L->sizes[d]) return -1;
    if (length > 0) L->offset += start * L->strides[d];
    L->sizes[d] = length;
    return 0;
}

static int select_layout(Layout *L, int d, int64_t index) {
    if (L->nd == 0) return -1;
    if (index < -L->sizes[d] || index >= L->sizes[d]) return -1;
    if (index < 0) index += L->sizes[d];
    L->offset += index * L->strides[d];
    drop_dim(L, d);
    return 0;
}

/* split/chunk: the tuple of narrows along d with these lengths */
static Sv *split_into(Interp *I, Sv *self, const Layout *L, int d, const int64_t *lengths, int n) {
    Sv **items = PyMem_Malloc(sizeof(Sv *) * (size_t)(n > 0 ? n : 1));
    if (!items) return cap_py_failed(I, "split"), NULL;
    Sv *r = NULL;
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        Layout part = *L;
        if (narrow_layout(&part, d, start, lengths[i]) < 0 || !(items[i] = emit_view(I, self, &part))) goto done;
        start += lengths[i];
    }
    r = sv_seq(I, SV_TUPLE, items, n);
done:
    PyMem_Free(items);
    return r;
}

enum { MAX_SPLITS = 1024 };

static Sv *split_call(Interp *I, Sv *self, const Layout *L, const char *name, Sv **b) {
    int64_t dim = 0, lengths[MAX_SPLITS];
    int d, n = 0;
    if (!b[0] || (b[1] && const_int(b[1], &dim) < 0) || wrap_dim(dim, L->nd, &d) < 0 || L->nd == 0) return NULL;
    int64_t size = L->sizes[d], k;
    if (strcmp(name, "chunk") == 0) {
        if (const_int(b[0], &k) < 0 || k <= 0) return NULL;
        int64_t each = (size + k - 1) / k;
        if (each == 0) { /* an empty dim: `chunks` empty pieces */
            if (k > MAX_SPLITS) return NULL;
            for (n = 0; n < k; n++) lengths[n] = 0;
        } else {
            for (int64_t s = 0; s < size; s += each) {
                if (n >= MAX_SPLITS) return NULL;
                lengths[n++] = size - s < each ? size - s : each;
            }
        }
    } else if (const_int(b[0], &k) == 0) { /* split(split_size) */
        if (k < 0 || (k == 0 && size != 0)) return NULL;
        if (k == 0 || size == 0) lengths[n++] = size;
        else
            for (int64_t s = 0; s < size; s += k) {
                if (n >= MAX_SPLITS) return NULL;
                lengths[n++] = size - s < k ? size - s : k;
            }
    } else { /* split(sections) */
        int nl = 0;
        Sv *seq = b[0];
        int64_t total = 0;
        if (seq->kind == SV_CONST && (PyTuple_Check(seq->obj) || PyList_Check(seq->obj))) {
            Py_ssize_t m = PySequence_Fast_GET_SIZE(seq->obj);
            if (m > MAX_SPLITS) return NULL;
            for (Py_ssize_t i = 0; i < m; i++) {
                Sv tmp = {.kind = SV_CONST, .obj = PySequence_Fast_GET_ITEM(seq->obj, i)};
                if (const_int(&tmp, &lengths[nl]) < 0 || lengths[nl] < 0) return NULL;
                total += lengths[nl++];
            }
        } else if (seq->kind == SV_TUPLE || seq->kind == SV_LIST) {
            if (seq->items.len > MAX_SPLITS) return NULL;
            for (int i = 0; i < seq->items.len; i++) {
                if (const_int(seq->items.data[i], &lengths[nl]) < 0 || lengths[nl] < 0) return NULL;
                total += lengths[nl++];
            }
        } else {
            return NULL;
        }
        if (total != size) return NULL;
        n = nl;
    }
    return split_into(I, self, L, d, lengths, n);
}

/* getitem with ints, slices (positive steps), None and Ellipsis */
static Sv *getitem_view(Interp *I, Sv *self, Sv *key, const Layout *L) {
    PyObject *keys[WK_MAX_DIMS * 2];
    int nk = 0;
    if (key->kind == SV_CONST && PyTuple_CheckExact(key->obj)) {
        if (PyTuple_GET_SIZE(key->obj) > WK_MAX_DIMS * 2) return NULL;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(key->obj); i++) keys[nk++] = PyTuple_GET_ITEM(key->obj, i);
    } else if (key->kind == SV_TUPLE) {
        if (key->items.len > WK_MAX_DIMS * 2) return NULL;
        for (int i = 0; i < key->items.len; i++) {
            if (key->items.data[i]->kind != SV_CONST) return NULL;
            keys[nk++] = key->items.data[i]->obj;
        }
    } else if (key->kind == SV_CONST) {
        keys[nk++] = key->obj;
    } else {
        return NULL;
    }
    int consumed = 0, ellipsis = -1;
    for (int i = 0; i < nk; i++) {
        PyObject *k = keys[i];
        if (k == Py_Ellipsis) {
            if (ellipsis >= 0) return NULL;
            ellipsis = i;
        } else if (PyLong_CheckExact(k) || PySlice_Check(k)) {
            consumed++;
        } else if (k != Py_None) {
            return NULL; /* bools, tensors, lists: advanced indexing */
        }
    }
    if (consumed > L->nd) return NULL;
    Layout out = *L;
    int d = 0; /* the dim of `out` the next key applies to */
    for (int i = 0; i < nk; i++) {
        PyObject *k = keys[i];
        if (k == Py_Ellipsis) {
            d += L->nd - consumed;
        } else if (k == Py_None) {
            if (insert_dim(&out, d) < 0) return NULL;
            d++;
        } else if (PyLong_CheckExact(k)) {
            Sv tmp = {.kind = SV_CONST, .obj = k};
            int64_t index;
            if (const_int(&tmp, &index) < 0 || select_layout(&out, d, index) < 0) return NULL;
        } else {
            Py_ssize_t start, stop, step;
            if (PySlice_Unpack(k, &start, &stop, &step) < 0) {
                PyErr_Clear();
                return NULL;
            }
            if (step <= 0) return NULL;
            Py_ssize_t len = PySlice_AdjustIndices((Py_ssize_t)out.sizes[d], &start, &stop, step);
            if (len > 0) out.offset += start * out.strides[d];
            out.sizes[d] = len;
            out.strides[d] *= step;
            d++;
        }
    }
    return emit_view(I, self, &out);
}

/* self[key] as a VIEW, or an extern getitem */
Sv *cap_tensor_getitem(Interp *I, Sv *self, Sv *key) {
    const WkValue *m = cap_sv_meta(I, self);
    if (!m) return NULL;
    if (wk_dtype_is_complex(m->dtype)) return cap_tensor_operator(I, "getitem", self, key); /* PyTorch's view */
    Layout L;
    Sv *r = layout_of(m, &L) == 0 ? getitem_view(I, self, key, &L) : NULL;
    if (r || CAP_FAILED(I)) return r;
    if ((r = cap_index_getitem(I, self, key)) != NULL || CAP_FAILED(I)) return r;
    return cap_tensor_operator(I, "getitem", self, key);
}

/* x.T, x.mT as VIEWs; NULL without a reason when not modelled */
Sv *cap_tensor_transpose_attr(Interp *I, Sv *self, const char *name) {
    const WkValue *m = cap_sv_meta(I, self);
    Layout L;
    if (!m || layout_of(m, &L) < 0) return NULL;
    if (strcmp(name, "T") == 0) {
        for (int i = 0; i < L.nd / 2; i++) swap_dims(&L, i, L.nd - 1 - i);
    } else if (strcmp(name, "mT") == 0 && L.nd >= 2) {
        swap_dims(&L, L.nd - 2, L.nd - 1);
    } else {
        return NULL;
    }
    return emit_view(I, self, &L);
}

/* x.contiguous(): x itself when contiguous, else a contiguous copy */
Sv *cap_tensor_contiguous(Interp *I, Sv *self) {
    const WkValue *m = cap_sv_meta(I, self);
    Layout L;
    if (!m || layout_of(m, &L) < 0 || !layout_is_eagers(I, m->id, 0)) return NULL;
    return is_contiguous(&L) ? self : contiguous_copy(I, self);
}

Sv *cap_view_with_layout(Interp *I, Sv *self, int nd, const int64_t *sizes, const int64_t *strides) {
    if (nd > WK_MAX_DIMS) return NULL;
    Layout L = {.nd = nd, .offset = 0};
    memcpy(L.sizes, sizes, sizeof(int64_t) * (size_t)nd);
    memcpy(L.strides, strides, sizeof(int64_t) * (size_t)nd);
    return emit_view(I, self, &L);
}

void cap_dims_by_stride(int nd, const int64_t *strides, int64_t *order) {
    for (int d = 0; d < nd; d++) order[d] = d;
    for (int i = 1; i < nd; i++) /* insertion sort: stable, so equal strides keep their dims' order */
        for (int j = i; j > 0 && strides[order[j - 1]] < strides[order[j]]; j--) {
            int64_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
}

Sv *cap_relaid_like(Interp *I, Sv *r, Sv *x) {
    const WkValue *xm = cap_sv_meta(I, x), *rm = cap_sv_meta(I, r);
    Layout want, got, permuted;
    if (!xm || !rm || layout_of(xm, &want) < 0 || layout_of(rm, &got) < 0 || want.nd != got.nd) return NULL;
    /* x's dims in the order the FULL under a *_like view was laid out */
    int64_t order[WK_MAX_DIMS];
    cap_dims_by_stride(want.nd, want.strides, order);
    if (permute_layout(&got, order, got.nd, &permuted) < 0) return NULL;
    Sv *in_order = emit_view(I, r, &permuted);
    Sv *copy = in_order ? contiguous_copy(I, in_order) : NULL;
    if (!copy) return NULL;
    cap_mark_private_base(I, copy->value);
    return emit_view(I, copy, &want);
}

/* ---- eager's layout of a native result ---- */

static int is_standard_contiguous(const Layout *L) {
    Layout c = *L;
    contiguous_strides(&c);
    for (int d = 0; d < L->nd; d++)
        if (c.strides[d] != L->strides[d]) return 0;
    return 1;
}

static PyObject *int_tuple(int n, const int64_t *v) {
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (!x) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

/* wick._capture_meta.eager_strides(kind, operands, device) into out (nd of
 * them); 0 when answered, -1 (no Python error left) when not */
static int ask_eager_strides(const char *kind, int n, const Layout *ops, int nextra, const int64_t *extra,
                             const char *device, int nd, int64_t *out) {
    static PyObject *query; /* strong, for the process */
    if (!query) {
        PyObject *meta = PyImport_ImportModule("wick._capture_meta");
        query = meta ? PyObject_GetAttrString(meta, "eager_strides") : NULL;
        Py_XDECREF(meta);
        if (!query) return PyErr_Clear(), -1;
    }
    PyObject *operands = PyTuple_New(n);
    for (int i = 0; operands && i < n; i++) {
        PyObject *sizes = int_tuple(ops[i].nd, ops[i].sizes), *strides = sizes ? int_tuple(ops[i].nd, ops[i].strides) : NULL;
        PyObject *pair = strides ? PyTuple_Pack(2, sizes, strides) : NULL;
        Py_XDECREF(sizes);
        Py_XDECREF(strides);
        if (!pair) {
            Py_CLEAR(operands);
            break;
        }
        PyTuple_SET_ITEM(operands, i, pair);
    }
    PyObject *args = operands ? int_tuple(nextra, extra) : NULL;
    PyObject *r = args ? PyObject_CallFunction(query, "sOsO", kind, operands, device, args) : NULL;
    Py_XDECREF(operands);
    Py_XDECREF(args);
    int ok = r && PyTuple_Check(r) && PyTuple_GET_SIZE(r) == nd;
    for (int d = 0; ok && d < nd; d++) {
        Sv item = {.kind = SV_CONST, .obj = PyTuple_GET_ITEM(r, d)};
        ok = const_int(&item, &out[d]) == 0;
    }
    Py_XDECREF(r);
    PyErr_Clear();
    return ok ? 0 : -1;
}

static void record_relaid(Interp *I, int laid, int raw) {
    cap_mark_eager_layout(I, laid);
    if (laid == raw) return;
    wk_vec_push(&I->relaid, laid);
    wk_vec_push(&I->relaid, raw);
}

int cap_relaid_raw(const Interp *I, int v) {
    for (int i = 0; i + 1 < I->relaid.len; i += 2)
        if (I->relaid.data[i] == v) return I->relaid.data[i + 1];
    return -1;
}

/* r (a node output, contiguous: `got`) laid out with strides `want`; NULL
 * without a reason when not expressible (a layout that is not dense) */
static Sv *laid_out_as(Interp *I, Sv *r, const Layout *got, const int64_t *want) {
    Layout wl = *got;
    memcpy(wl.strides, want, sizeof(int64_t) * (size_t)got->nd);
    int same = 1, only_size_one = 1;
    int64_t numel = 1;
    for (int d = 0; d < got->nd; d++) {
        numel *= got->sizes[d];
        if (want[d] == got->strides[d]) continue;
        same = 0;
        only_size_one &= got->sizes[d] == 1;
    }
    Sv *laid;
    if (same) {
        laid = r;
    } else if (numel == 0 || only_size_one) {
        /* no element moves: the same buffer seen with eager's strides; no
         * Python value names it (an in-place update may rebind the view) */
        laid = emit_view(I, r, &wl);
        if (laid) cap_mark_private_base(I, r->value);
    } else {
        int64_t order[WK_MAX_DIMS], expect = 1;
        cap_dims_by_stride(got->nd, want, order);
        for (int k = got->nd - 1; k >= 0; k--) {
            int64_t d = order[k];
            if (got->sizes[d] != 1 && want[d] != expect) return NULL; /* not dense */
            expect *= got->sizes[d];
        }
        Layout permuted;
        if (permute_layout(got, order, got->nd, &permuted) < 0) return NULL;
        /* the copy runs over the dims in memory order and writes its buffer
         * in order; the kernel producing r is inlined into it */
        Sv *in_order = emit_view(I, r, &permuted);
        Sv *copy = in_order ? contiguous_copy(I, in_order) : NULL;
        if (!copy) return NULL;
        cap_mark_private_base(I, copy->value);
        laid = emit_view(I, copy, &wl);
    }
    if (laid) record_relaid(I, laid->value, r->value);
    return laid;
}

/* The rule's name in wick._capture_meta.eager_strides, and the node's
 * attribute ints the call takes besides its operands (cat's dim, pad's
 * per-dim widths) */
static const char *rule_name(CapLaid how) {
    switch (how) {
    case CAP_LAID_POINTWISE: case CAP_LAID_POINTWISE_UNARY: return "pointwise";
    case CAP_LAID_CONVERT: return "convert";
    case CAP_LAID_CLONE: return "clone";
    case CAP_LAID_CAT: return "cat";
    case CAP_LAID_PAD: return "pad";
    case CAP_LAID_INDEX: return "index";
    default: return NULL;
    }
}

enum { MAX_LAID_OPERANDS = 64 }; /* cat's inputs: structural.c takes at most 64 */

/* r laid out as eager lays out the `how` call of the values `operands`
 * (n of them); NULL without a reason where not modelled */
static Sv *eager_laid_of(Interp *I, Sv *r, CapLaid how, const int *operands, int n) {
    if (!r || r->kind != SV_TENSOR || r->value < 0) return NULL;
    const WkValue *rm = wk_graph_value(I->g, r->value);
    if (rm->node < 0) return NULL;
    const WkNode *node = wk_graph_node(I->g, rm->node);
    Layout got;
    if (node->op == WK_OP_VIEW || node->op == WK_OP_EXTERN || node->noutputs != 1 || layout_of(rm, &got) < 0)
        return NULL;
    if (how == CAP_LAID_CONTIGUOUS) {
        record_relaid(I, r->value, r->value);
        return r;
    }
    if (n < 1 || n > MAX_LAID_OPERANDS) return NULL;
    int nops = 0, standard = 1;
    Layout ops[MAX_LAID_OPERANDS];
    for (int i = 0; i < n; i++) {
        const WkValue *in = wk_graph_value(I->g, operands[i]);
        if (how == CAP_LAID_POINTWISE_UNARY && in->is_wrapped_number) continue;
        /* an operand whose strides in wick are not eager's: eager's result
         * layout is not known from them */
        if (!layout_is_eagers(I, operands[i], 0) || layout_of(in, &ops[nops]) < 0) return NULL;
        standard &= is_standard_contiguous(&ops[nops]);
        nops++;
    }
    if (nops == 0) return NULL;
    int64_t want[WK_MAX_DIMS];
    if (standard) {
        /* operands with contiguous strides (size-1 dims included) order
         * every dim as contiguous: eager's result is contiguous too, as
         * wick's is; no question to ask */
        memcpy(want, got.strides, sizeof(int64_t) * (size_t)got.nd);
    } else {
        const char *kind = rule_name(how);
        if (!kind) return NULL;
        int nextra = how == CAP_LAID_CAT || how == CAP_LAID_PAD || how == CAP_LAID_INDEX ? node->attrs.nints : 0;
        /* an empty result's strides are the CPU kernels' own (meta tensors
         * answer otherwise): asked on small CPU tensors, and not modelled on
         * other devices */
        int64_t numel = 1;
        for (int d = 0; d < got.nd; d++) numel *= got.sizes[d];
        const char *device = "meta";
        if (numel == 0) {
            if (rm->device.type != WK_DEV_CPU) return NULL;
            for (int i = 0; i < nops; i++) {
                int64_t span = 1;
                for (int d = 0; d < ops[i].nd; d++) span += (ops[i].sizes[d] - 1) * ops[i].strides[d];
                if (span > 4096) return NULL;
            }
            device = "cpu";
        }
        if (ask_eager_strides(kind, nops, ops, nextra, node->attrs.ints, device, got.nd, want) < 0) return NULL;
    }
    return laid_out_as(I, r, &got, want);
}

Sv *cap_eager_laid(Interp *I, Sv *r, CapLaid how) {
    if (!r || r->kind != SV_TENSOR || r->value < 0) return NULL;
    const WkValue *rm = wk_graph_value(I->g, r->value);
    if (rm->node < 0) return NULL;
    const WkNode *node = wk_graph_node(I->g, rm->node);
    /* the operands eager's call reads: a pointwise node's and a cat's
     * inputs, pad's input (its fill is a Scalar), a cast's or clone's one */
    int all = how == CAP_LAID_POINTWISE || how == CAP_LAID_POINTWISE_UNARY || how == CAP_LAID_CAT ||
              how == CAP_LAID_INDEX;
    int n = all ? node->ninputs : 1;
    if (how == CAP_LAID_POINTWISE || how == CAP_LAID_POINTWISE_UNARY) {
        if (n > 3) return NULL; /* TensorIterator ops of one to three operands (_capture_meta) */
    }
    return eager_laid_of(I, r, how, node->inputs, n);
}

Sv *cap_eager_laid_pointwise_of(Interp *I, Sv *r, const int *operands, int n) {
    if (n < 1 || n > 3) return NULL;
    return eager_laid_of(I, r, CAP_LAID_POINTWISE, operands, n);
}

void cap_read_unlaid(Interp *I) {
    int nvalues = wk_graph_nvalues(I->g);
    if (!I->relaid.len || nvalues <= 0) return;
    int *raw_of = PyMem_Malloc(sizeof(int) * (size_t)nvalues);
    if (!raw_of) return; /* the graph stays as it is: correct, with more copies */
    for (int v = 0; v < nvalues; v++) raw_of[v] = -1;
    for (int i = 0; i + 1 < I->relaid.len; i += 2) raw_of[I->relaid.data[i]] = I->relaid.data[i + 1];
    for (int n = 0; n < wk_graph_nnodes(I->g); n++) {
        const WkNode *node = wk_graph_node(I->g, n);
        if (node->op == WK_OP_VIEW || node->op == WK_OP_EXTERN) continue; /* these read the strides */
        for (int k = 0; k < node->ninputs; k++) {
            int raw = raw_of[node->inputs[k]];
            if (raw >= 0 && wk_graph_replace_input(I->g, n, k, raw) < 0) wk_error_clear();
        }
    }
    PyMem_Free(raw_of);
}

Sv *cap_laid_or_raw(Interp *I, Sv *r, CapLaid how) {
    if (!r) return NULL;
    Sv *laid = cap_eager_laid(I, r, how);
    if (laid || CAP_FAILED(I)) return laid;
    return r;
}

int cap_value_strides(const WkValue *m, int64_t *strides) {
    Layout L;
    if (layout_of(m, &L) < 0) return -1;
    memcpy(strides, L.strides, sizeof(int64_t) * (size_t)L.nd);
    return 0;
}

int cap_expanded_strides(Interp *I, Sv *self, int nd, const int64_t *sizes, int64_t *strides) {
    const WkValue *m = cap_sv_meta(I, self);
    Layout L, out;
    if (!m || layout_of(m, &L) < 0 || expand_layout(&L, sizes, nd, &out) < 0) return -1;
    memcpy(strides, out.strides, sizeof(int64_t) * (size_t)nd);
    return 0;
}

Sv *cap_view_as_shape(Interp *I, Sv *self, int nd, const int64_t *shape) {
    const WkValue *m = cap_sv_meta(I, self);
    Layout L;
    if (!m || nd > WK_MAX_DIMS || layout_of(m, &L) < 0) return NULL;
    int64_t sizes[WK_MAX_DIMS];
    memcpy(sizes, shape, sizeof(int64_t) * (size_t)nd);
    return reshape_to(I, self, &L, nd, sizes, RESHAPE_VIEW_ONLY);
}

static Sv *view_rule(Interp *I, const char *name, const Args *a, Sv *self, const Layout *L) {
    int64_t ints[WK_MAX_DIMS];
    int n;
    Sv *b[4];
    Layout out = *L;
    int eagers = layout_is_eagers(I, cap_tensor_value(I, self), 0);
    /* view and as_strided read the strides eager has, which wick's buffer
     * does not have: an extern would compute something else than eager */
    if (!eagers && (strcmp(name, "view") == 0 || strcmp(name, "view_as") == 0 || strcmp(name, "unflatten") == 0 ||
                    strcmp(name, "as_strided") == 0)) {
        /* nor may Python run it after a graph break: the graph's output has
         * wick's layout too, so the whole frame runs eagerly */
        I->no_break = 1;
        return cap_unsupported(I, "Tensor.%s() of a result whose eager layout wick does not keep", name), NULL;
    }
    if (strcmp(name, "view") == 0 || strcmp(name, "reshape") == 0) {
        if (a->nkw || !eagers || int_list(a->pos + 1, a->npos - 1, ints, &n) < 0) return NULL;
        return reshape_to(I, self, L, n, ints, name[0] == 'v' ? RESHAPE_VIEW_ONLY : RESHAPE_MAY_COPY);
    }
    if (strcmp(name, "view_as") == 0 || strcmp(name, "reshape_as") == 0) {
        static const char *const names[] = {"other"};
        if (take(a, names, 1, b) < 0 || !b[0] || b[0]->kind != SV_TENSOR || !eagers) return NULL;
        const WkValue *o = cap_sv_meta(I, b[0]);
        Layout OL;
        if (!o || layout_of(o, &OL) < 0) return NULL;
        return reshape_to(I, self, L, OL.nd, OL.sizes, name[0] == 'v' ? RESHAPE_VIEW_ONLY : RESHAPE_MAY_COPY);
    }
    if (strcmp(name, "flatten") == 0) {
        static const char *const names[] = {"start_dim", "end_dim"};
        int64_t s = 0, e = -1;
        int sd, ed;
        if (take(a, names, 2, b) < 0 || (b[0] && const_int(b[0], &s) < 0) || (b[1] && const_int(b[1], &e) < 0))
            return NULL;
        if (wrap_dim(s, L->nd, &sd) < 0 || wrap_dim(e, L->nd, &ed) < 0 || sd > ed || !eagers) return NULL;
        if (L->nd == 0) {
            int64_t one = 1;
            return reshape_to(I, self, L, 1, &one, RESHAPE_MAY_COPY);
        }
        if (sd == ed) return self; /* eager returns the tensor itself */
        n = 0;
        for (int d = 0; d < L->nd; d++) {
            if (d <= sd || d > ed) ints[n++] = L->sizes[d];
            else ints[n - 1] *= L->sizes[d];
        }
        return reshape_to(I, self, L, n, ints, RESHAPE_MAY_COPY);
    }
    if (strcmp(name, "unflatten") == 0) {
        static const char *const names[] = {"dim", "sizes"};
        int64_t dim, sizes[WK_MAX_DIMS];
        int d, ns;
        if (take(a, names, 2, b) < 0 || !b[0] || !b[1] || const_int(b[0], &dim) < 0 || !eagers ||
            wrap_dim(dim, L->nd, &d) < 0 || L->nd == 0 || int_list(&b[1], 1, sizes, &ns) < 0 || ns == 0 ||
            L->nd - 1 + ns > WK_MAX_DIMS)
            return NULL;
        Layout part = {.nd = 1, .sizes = {L->sizes[d]}};
        if (infer_shape(&part, ns, sizes) < 0) return NULL;
        n = 0;
        for (int k = 0; k < L->nd; k++) {
            if (k != d) ints[n++] = L->sizes[k];
            else
                for (int j = 0; j < ns; j++) ints[n++] = sizes[j];
        }
        return reshape_to(I, self, L, n, ints, RESHAPE_VIEW_ONLY);
    }
    if (strcmp(name, "permute") == 0) {
        if (a->nkw || int_list(a->pos + 1, a->npos - 1, ints, &n) < 0 || permute_layout(L, ints, n, &out) < 0)
            return NULL;
        return emit_view(I, self, &out);
    }
    if (strcmp(name, "transpose") == 0) {
        static const char *const names[] = {"dim0", "dim1"};
        int64_t d0, d1;
        int x, y;
        if (take(a, names, 2, b) < 0 || const_int(b[0], &d0) < 0 || const_int(b[1], &d1) < 0 ||
            wrap_dim(d0, L->nd, &x) < 0 || wrap_dim(d1, L->nd, &y) < 0)
            return NULL;
        if (L->nd > 0) swap_dims(&out, x, y);
        return emit_view(I, self, &out);
    }
    if (strcmp(name, "t") == 0) {
        if (a->npos != 1 || a->nkw || L->nd > 2) return NULL;
        if (L->nd == 2) swap_dims(&out, 0, 1);
        return emit_view(I, self, &out);
    }
    if (strcmp(name, "expand") == 0) {
        if (a->nkw || int_list(a->pos + 1, a->npos - 1, ints, &n) < 0 || expand_layout(L, ints, n, &out) < 0)
            return NULL;
        return emit_view(I, self, &out);
    }
    if (strcmp(name, "expand_as") == 0) {
        static const char *const names[] = {"other"};
        if (take(a, names, 1, b) < 0 || !b[0] || b[0]->kind != SV_TENSOR) return NULL;
        const WkValue *o = cap_sv_meta(I, b[0]);
        Layout OL;
        if (!o || layout_of(o, &OL) < 0 || expand_layout(L, OL.sizes, OL.nd, &out) < 0) return NULL;
        return emit_view(I, self, &out);
    }
    if (strcmp(name, "squeeze") == 0) {
        static const char *const names[] = {"dim"};
        if (take(a, names, 1, b) < 0) return NULL;
        int drop[WK_MAX_DIMS] = {0};
        if (!b[0]) {
            for (int d = 0; d < L->nd; d++) drop[d] = L->sizes[d] == 1;
        } else {
            if (int_list(&b[0], 1, ints, &n) < 0) return NULL;
            for (int i = 0; i < n; i++) {
                int d;
                if (wrap_dim(ints[i], L->nd, &d) < 0) return NULL;
                if (L->nd > 0) drop[d] = L->sizes[d] == 1;
            }
        }
        for (int d = L->nd - 1; d >= 0; d--)
            if (drop[d]) drop_dim(&out, d);
        return emit_view(I, self, &out);
    }
    if (strcmp(name, "unsqueeze") == 0) {
        static const char *const names[] = {"dim"};
        int64_t dim;
        int d;
        if (take(a, names, 1, b) < 0 || const_int(b[0], &dim) < 0 || wrap_dim(dim, L->nd + 1, &d) < 0 ||
            insert_dim(&out, d) < 0)
            return NULL;
        return emit_view(I, self, &out);
    }
    if (strcmp(name, "narrow") == 0 || strcmp(name, "select") == 0) {
        static const char *const nnames[] = {"dim", "start", "length"}, *const snames[] = {"dim", "index"};
        int sel = name[0] == 's';
        int64_t dim, x, len = 0;
        int d;
        if (take(a, sel ? snames : nnames, sel ? 2 : 3, b) < 0 || const_int(b[0], &dim) < 0 ||
            const_int(b[1], &x) < 0 || (!sel && const_int(b[2], &len) < 0) || wrap_dim(dim, L->nd, &d) < 0)
            return NULL;
        if ((sel ? select_layout(&out, d, x) : narrow_layout(&out, d, x, len)) < 0) return NULL;
        return emit_view(I, self, &out);
    }
    if (strcmp(name, "split") == 0 || strcmp(name, "chunk") == 0) {
        static const char *const snames[] = {"split_size", "dim"}, *const cnames[] = {"chunks", "dim"};
        if (take(a, name[0] == 's' ? snames : cnames, 2, b) < 0) {
            /* torch.split calls its first parameter split_size_or_sections */
            static const char *const fnames[] = {"split_size_or_sections", "dim"};
            if (name[0] != 's' || take(a, fnames, 2, b) < 0) return NULL;
        }
        return split_call(I, self, L, name, b);
    }
    if (strcmp(name, "as_strided") == 0) {
        static const char *const names[] = {"size", "stride", "storage_offset"};
        int ns;
        int64_t off = 0;
        if (take(a, names, 3, b) < 0 || !b[0] || !b[1] || !eagers || int_list(&b[0], 1, out.sizes, &n) < 0 ||
            int_list(&b[1], 1, out.strides, &ns) < 0 || n != ns)
            return NULL;
        out.nd = n;
        out.offset = 0;
        if (b[2] && !(b[2]->kind == SV_CONST && b[2]->obj == Py_None)) {
            /* an absolute storage offset: known only for a fresh node output,
             * whose storage starts at its first element */
            const WkValue *m = wk_graph_value(I->g, cap_tensor_value(I, self));
            if (const_int(b[2], &off) < 0 || m->node < 0 ||
                wk_graph_node(I->g, m->node)->op == WK_OP_VIEW || wk_graph_node(I->g, m->node)->op == WK_OP_EXTERN)
                return NULL;
            out.offset = off;
        }
        return emit_view(I, self, &out);
    }
    if (strcmp(name, "clone") == 0) {
        static const char *const names[] = {"memory_format"};
        if (take(a, names, 1, b) < 0) return NULL;
        int contiguous_format = 0;
        if (b[0] && !(b[0]->kind == SV_CONST && b[0]->obj == Py_None)) {
            PyObject *cf = PyObject_GetAttrString(cap_torch_mod, "contiguous_format");
            PyObject *pf = cf ? PyObject_GetAttrString(cap_torch_mod, "preserve_format") : NULL;
            PyErr_Clear();
            contiguous_format = b[0]->kind == SV_CONST && cf && b[0]->obj == cf;
            int preserve = b[0]->kind == SV_CONST && pf && b[0]->obj == pf;
            Py_XDECREF(cf);
            Py_XDECREF(pf);
            if (!contiguous_format && !preserve) return NULL;
        }
        if (contiguous_format) return contiguous_copy(I, self);
        /* preserve_format keeps self's layout (dense strides in its dims'
         * order): a copy laid out so, or an extern where that is not known */
        if (!eagers) return NULL;
        Sv *copy = contiguous_copy(I, self);
        return copy ? cap_eager_laid(I, copy, CAP_LAID_CLONE) : NULL;
    }
    if (strcmp(name, "dropout") == 0) {
        static const char *const names[] = {"p", "training", "inplace"};
        static const char *const tnames[] = {"p", "train"};
        double p = 0.5;
        int training = 1, inplace = 0;
        if (take(a, names, 3, b) < 0 && take(a, tnames, 2, b) < 0) return NULL;
        if ((b[0] && const_number(b[0], &p) < 0) || (b[1] && const_bool(b[1], &training) < 0) ||
            (b[2] && const_bool(b[2], &inplace) < 0))
            return NULL;
        if (p < 0 || p > 1) return NULL; /* eager raises */
        /* eager returns its input itself in eval or with p == 0 */
        if (!training || p == 0) return self;
        return NULL;
    }
    return NULL;
}

/* A call of a callable listed in the VIEW row of the op table. */
Sv *cap_view_call(Interp *I, const Args *a, const char *fname, PyObject *fn) {
    const char *name = strrchr(fname, '.');
    name = name ? name + 1 : fname;
    Sv *self = a->npos > 0 ? a->pos[0] : NULL;
    Sv *r = NULL;
    if (self && self->kind == SV_TENSOR) {
        const WkValue *m = cap_sv_meta(I, self);
        if (!m) return NULL;
        Layout L;
        if (layout_of(m, &L) == 0) r = view_rule(I, name, a, self, &L);
    }
    if (r || CAP_FAILED(I)) return r;
    if (!fn) return cap_unsupported(I, "%s(): arguments wick does not model", fname), NULL;
    return cap_extern_call(I, fn, fname, a->pos, a->npos, a->kwnames, a->kw, a->nkw);
}
