/* vals/structural.c — torch calls that move or create data rather than
 * compute elementwise: torch.cat (CAT), F.pad (PAD), F.embedding and
 * x[index tensors] (INDEX), torch.arange (ARANGE), torch.zeros/ones/full
 * and Tensor.new_* (FULL); and the calls the runtime can make through
 * PyTorch's C shim (runtime/shim_ops.c) rather than through Python when
 * they name the ATen op: F.linear (views around aten.mm/aten.addmm),
 * torch.mm/addmm/bmm/baddbmm, torch.cumsum, and F.scaled_dot_product_attention on
 * the CPU; torch.zeros_like & co., torch.min/max of two tensors, gather and
 * diff become the nodes they are made of. The ATen importer (wick/backends.py try_cat_pad,
 * try_indexing) builds the same nodes from aten ops; the nodes' meaning is
 * the op table's (graph/ops.def notes 9, 11, 12).
 *
 * Each rule checks what eager would do with the arguments it is given and
 * models only the calls whose result the node gives exactly: anything else
 * (an out= or a keyword the rule does not read, a symbolic size, a dtype or
 * device it does not cover, arguments eager rejects) stays an extern call
 * of the torch callable, which computes (or raises) as eager does. No rule
 * records a fallback reason. */
#include <string.h>

#include "../interp.h"

/* ---- argument reading ---------------------------------------------------- */

/* Positional `pos` or keyword `name`; NULL when absent. */
static Sv *arg_of(const Args *a, int pos, const char *name) {
    if (pos >= 0 && pos < a->npos) return a->pos[pos];
    for (int k = 0; k < a->nkw; k++) {
        PyObject *kn = PyTuple_GET_ITEM(a->kwnames, k);
        if (PyUnicode_Check(kn) && PyUnicode_CompareWithASCIIString(kn, name) == 0) return a->kw[k];
    }
    return NULL;
}

/* At most `npos` positional arguments; every keyword one of `names` (of
 * which the first `npos` are also positional) and not given twice. */
static int arguments_known(const Args *a, int npos, const char *const *names) {
    if (a->npos > npos) return 0;
    for (int k = 0; k < a->nkw; k++) {
        PyObject *kn = PyTuple_GET_ITEM(a->kwnames, k);
        int at = -1;
        for (int i = 0; names[i] && at < 0; i++)
            if (PyUnicode_Check(kn) && PyUnicode_CompareWithASCIIString(kn, names[i]) == 0) at = i;
        if (at < 0 || at < a->npos) return 0;
    }
    return 1;
}

static int is_none(const Sv *s) { return !s || (s->kind == SV_CONST && s->obj == Py_None); }

/* A Python int (not a bool), read into *out; 0 when s is none. */
static int const_int(const Sv *s, int64_t *out) {
    if (!s || s->kind != SV_CONST || !PyLong_CheckExact(s->obj)) return 0;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(s->obj, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static int const_bool(const Sv *s, int *out) {
    if (!s || s->kind != SV_CONST || !PyBool_Check(s->obj)) return 0;
    *out = s->obj == Py_True;
    return 1;
}

/* A sequence of Python ints: a constant tuple/list or a captured one. */
static int const_ints(const Sv *s, int64_t *out, int max, int *n) {
    if (!s) return 0;
    if (s->kind == SV_CONST && (PyTuple_Check(s->obj) || PyList_CheckExact(s->obj))) { /* torch.Size is a tuple */
        Py_ssize_t len = PySequence_Fast_GET_SIZE(s->obj);
        if (len > max) return 0;
        for (Py_ssize_t i = 0; i < len; i++) {
            Sv item = {.kind = SV_CONST, .obj = PySequence_Fast_GET_ITEM(s->obj, i)};
            if (!const_int(&item, &out[i])) return 0;
        }
        *n = (int)len;
        return 1;
    }
    if ((s->kind == SV_TUPLE || s->kind == SV_LIST) && s->items.len <= max) {
        for (int i = 0; i < s->items.len; i++)
            if (!const_int(s->items.data[i], &out[i])) return 0;
        *n = s->items.len;
        return 1;
    }
    return 0;
}

/* Every size of m known at capture time. */
static int static_sizes(const WkValue *m) {
    for (int d = 0; d < m->ndim; d++)
        if (!wk_sym_is_const(m->sizes[d], NULL)) return 0;
    return 1;
}

static int same_device(const WkValue *a, const WkValue *b) {
    return a->device.type == b->device.type && (a->device.type == WK_DEV_CPU || a->device.index == b->device.index);
}

/* Indirect loads (INDEX) run natively outside Triton's interpreter (which
 * cannot raise a device assertion), on the CPU, and on CUDA when the
 * WICK_CUDA_INDEXING knob is not 0 (its default is 1, as for the ATen
 * importer, backends.py try_indexing). The importer compiles a graph again
 * with indexing as extern calls when its indexing kernels fail; capture has
 * no such retry: that frame runs eagerly, with the reason recorded. */
static int indexing_native_on(const WkValue *m) {
    if (strcmp(wk_env_str(WK_ENV_TRITON), "interpret") == 0) return 0;
    return m->device.type == WK_DEV_CPU || wk_env_int(WK_ENV_CUDA_INDEXING) != 0;
}

/* The node, or NULL with nothing recorded when the builder refuses it. */
static Sv *try_node(Interp *I, WkOp op, const int *in, int n, const WkAttrs *at) {
    Sv *r = cap_graph_op_try(I, op, in, n, at);
    if (!r) wk_error_clear();
    return r;
}

static Sv *extern_call(Interp *I, PyObject *fn, const char *fname, const Args *a) {
    if (!fn) return cap_unsupported(I, "%s(): arguments wick does not model", fname), NULL;
    return cap_extern_call(I, fn, fname, a->pos, a->npos, a->kwnames, a->kw, a->nkw);
}

/* ---- torch.cat(tensors, dim=0) -> CAT ----------------------------------- */

static Sv *cat_node(Interp *I, const Args *a) {
    static const char *const names[] = {"tensors", "dim", NULL};
    if (!arguments_known(a, 2, names)) return NULL;
    Sv *seq = arg_of(a, 0, "tensors"), *dim_sv = arg_of(a, 1, "dim");
    int64_t dim = 0;
    if (!seq || (seq->kind != SV_TUPLE && seq->kind != SV_LIST) || seq->items.len < 1 || seq->items.len > 64 ||
        (dim_sv && !const_int(dim_sv, &dim)))
        return NULL;
    int in[64];
    const WkValue *first = NULL;
    for (int i = 0; i < seq->items.len; i++) {
        Sv *t = seq->items.data[i];
        if (t->kind != SV_TENSOR) return NULL;
        const WkValue *m = cap_sv_meta(I, t);
        if (!m) return NULL;
        if (!first) first = m;
        /* the same rank everywhere (eager skips legacy 1-d empty tensors
         * among others: not modelled), one device, known sizes */
        if (m->ndim != first->ndim || m->ndim == 0 || !same_device(m, first) || !static_sizes(m)) return NULL;
        in[i] = m->id;
    }
    int nd = first->ndim;
    if (dim < -nd || dim >= nd) return NULL;
    if (dim < 0) dim += nd;
    for (int i = 0; i < seq->items.len; i++) {
        const WkValue *m = wk_graph_value(I->g, in[i]);
        for (int d = 0; d < nd; d++)
            if (d != dim && cap_const_size(m, d) != cap_const_size(first, d)) return NULL;
    }
    WkAttrs at = {0};
    at.nints = 1;
    at.ints = &dim;
    return try_node(I, WK_OP_CAT, in, seq->items.len, &at);
}

/* ---- F.pad(input, pad, mode="constant", value=None) -> PAD --------------- */

static Sv *pad_node(Interp *I, const Args *a) {
    static const char *const names[] = {"input", "pad", "mode", "value", NULL};
    if (!arguments_known(a, 4, names)) return NULL;
    Sv *x = arg_of(a, 0, "input"), *pad_sv = arg_of(a, 1, "pad"), *mode = arg_of(a, 2, "mode"),
       *value = arg_of(a, 3, "value");
    if (!x || x->kind != SV_TENSOR) return NULL;
    if (mode && !(mode->kind == SV_CONST && PyUnicode_Check(mode->obj) &&
                  PyUnicode_CompareWithASCIIString(mode->obj, "constant") == 0))
        return NULL;
    const WkValue *m = cap_sv_meta(I, x);
    if (!m || !static_sizes(m)) return NULL;
    int64_t pads[2 * WK_MAX_DIMS];
    int npad = 0;
    if (!const_ints(pad_sv, pads, 2 * WK_MAX_DIMS, &npad) || npad % 2 || npad / 2 > m->ndim) return NULL;
    /* the fill: None is 0; a value eager would convert with a change of
     * kind (a float into an integer tensor) is not modelled */
    PyObject *fill;
    if (is_none(value)) fill = m->dtype == WK_BOOL ? Py_NewRef(Py_False) : PyLong_FromLong(0);
    else if (value->kind == SV_CONST) fill = Py_NewRef(value->obj);
    else return NULL;
    if (!fill) return PyErr_Clear(), NULL;
    int fill_ok = m->dtype == WK_BOOL                ? PyBool_Check(fill)
                  : wk_dtype_is_integral(m->dtype) ? PyLong_CheckExact(fill) || PyBool_Check(fill)
                                                   : PyLong_CheckExact(fill) || PyBool_Check(fill) || PyFloat_CheckExact(fill);
    int64_t per[2 * WK_MAX_DIMS];
    for (int d = 0; fill_ok && d < m->ndim; d++) {
        int k = m->ndim - 1 - d; /* torch lists (lo, hi) from the last dim backwards */
        per[2 * d] = 2 * k + 1 < npad ? pads[2 * k] : 0;
        per[2 * d + 1] = 2 * k + 1 < npad ? pads[2 * k + 1] : 0;
        int64_t size = cap_const_size(m, d), grown = size + per[2 * d] + per[2 * d + 1];
        /* eager refuses a dim cropped below one element */
        fill_ok = (per[2 * d] == 0 && per[2 * d + 1] == 0) || grown > 0;
    }
    int in[2] = {m->id, fill_ok ? cap_scalar_value(I, fill) : -1};
    Py_DECREF(fill);
    if (!fill_ok) return NULL;
    if (in[1] < 0) return NULL;
    WkAttrs at = {0};
    at.nints = 2 * m->ndim;
    at.ints = per;
    return try_node(I, WK_OP_PAD, in, 2, &at);
}

/* ---- F.embedding(input, weight, ...) -> INDEX ------------------------------ */

static int is_index_dtype(WkDType dt) { return dt == WK_I64 || dt == WK_I32; }

static Sv *embedding_node(Interp *I, const Args *a) {
    static const char *const names[] = {"input",      "weight", "padding_idx", "max_norm", "norm_type",
                                        "scale_grad_by_freq", "sparse", NULL};
    if (!arguments_known(a, 7, names)) return NULL;
    Sv *idx = arg_of(a, 0, "input"), *w = arg_of(a, 1, "weight"), *padding = arg_of(a, 2, "padding_idx"),
       *max_norm = arg_of(a, 3, "max_norm"), *norm_type = arg_of(a, 4, "norm_type"),
       *by_freq = arg_of(a, 5, "scale_grad_by_freq"), *sparse = arg_of(a, 6, "sparse");
    /* max_norm renormalises weight rows in place: not modelled */
    if (!idx || !w || idx->kind != SV_TENSOR || w->kind != SV_TENSOR || !is_none(max_norm)) return NULL;
    if (norm_type && !(norm_type->kind == SV_CONST && cap_is_number(norm_type->obj))) return NULL;
    const WkValue *wm = cap_sv_meta(I, w), *im = wm ? cap_sv_meta(I, idx) : NULL;
    if (!im || wm->ndim != 2 || !is_index_dtype(im->dtype) || !same_device(wm, im) || !indexing_native_on(wm) ||
        !static_sizes(wm))
        return NULL;
    int64_t pad_idx = 0;
    int freq = 0, sp = 0;
    if ((!is_none(padding) && !const_int(padding, &pad_idx)) || (by_freq && !const_bool(by_freq, &freq)) ||
        (sparse && !const_bool(sparse, &sp)))
        return NULL;
    int64_t rows = cap_const_size(wm, 0);
    if (!is_none(padding) && (pad_idx < -rows || pad_idx >= rows)) return NULL; /* eager asserts */
    /* padding_idx, scale_grad_by_freq and sparse change only the gradient
     * (AOTAutograd's, of the torch call the node exports as): padding_idx
     * rides on the node (ops.def note 11), the other two are not modelled */
    int needs_grad = I->grad_enabled && cap_get_rg(I, wm->id);
    if ((freq || sp) && needs_grad) return NULL;
    int in[2] = {wm->id, im->id};
    int64_t ints[2] = {0, 0}; /* no wrap: eager raises on a negative index, so does the kernel */
    WkAttrs at = {0};
    if (!is_none(padding) && needs_grad) at.ivalue = (pad_idx < 0 ? pad_idx + rows : pad_idx) + 1;
    at.nints = 2;
    at.ints = ints;
    return try_node(I, WK_OP_INDEX, in, 2, &at);
}

/* ---- x[i0, i1, ...] with integer index tensors -> INDEX -------------------- */

Sv *cap_index_getitem(Interp *I, Sv *self, Sv *key) {
    Sv *keys[WK_MAX_DIMS];
    int nk = 0;
    if (key->kind == SV_TENSOR) {
        keys[nk++] = key;
    } else if (key->kind == SV_TUPLE && key->items.len >= 1 && key->items.len <= WK_MAX_DIMS) {
        for (int i = 0; i < key->items.len; i++) keys[nk++] = key->items.data[i];
    } else {
        return NULL;
    }
    const WkValue *m = cap_sv_meta(I, self);
    if (!m || nk > m->ndim || !static_sizes(m) || !indexing_native_on(m)) return NULL;
    int in[WK_MAX_DIMS + 1];
    int64_t ints[WK_MAX_DIMS + 1];
    int n = 1;
    in[0] = m->id;
    ints[0] = 1; /* negative indices count from the end, as in Python */
    for (int d = 0; d < nk; d++) {
        Sv *k = keys[d];
        if (k->kind == SV_CONST && PySlice_Check(k->obj)) {
            /* only `:` (the whole dim); other slices, ints, None, Ellipsis
             * and bool masks are not modelled together with tensors */
            PySliceObject *sl = (PySliceObject *)k->obj;
            if (sl->start != Py_None || sl->stop != Py_None || sl->step != Py_None) return NULL;
            continue;
        }
        if (k->kind != SV_TENSOR) return NULL;
        const WkValue *km = cap_sv_meta(I, k);
        /* a 0-d index tensor is an int to eager: x[t] is then a view of x */
        if (!km || km->ndim == 0 || !is_index_dtype(km->dtype) || !same_device(km, m) || !static_sizes(km)) return NULL;
        in[n] = km->id;
        ints[n++] = d;
    }
    if (n == 1) return NULL;
    WkAttrs at = {0};
    at.nints = n;
    at.ints = ints;
    return cap_laid_or_raw(I, try_node(I, WK_OP_INDEX, in, n, &at), CAP_LAID_INDEX);
}

/* ---- torch.arange(start, end, step, *, dtype, device, ...) -> ARANGE ------- */

/* A Python int (not a bool) or float constant. */
static int arange_bound(const Sv *s, PyObject **out) {
    if (!s || s->kind != SV_CONST || !(PyLong_CheckExact(s->obj) || PyFloat_CheckExact(s->obj))) return 0;
    *out = s->obj;
    return 1;
}

/* The device argument: an explicit torch.device or device string naming
 * the CPU or an indexed CUDA device (a bare "cuda", the current one, is
 * state capture does not guard; a missing one is the default device,
 * default_device below). */
static int explicit_device(const Sv *s, WkDevice *dev) {
    if (!s || s->kind != SV_CONST || !cap_device_type) return 0;
    PyObject *d = PyUnicode_Check(s->obj) ? PyObject_CallOneArg(cap_device_type, s->obj) : Py_NewRef(s->obj);
    if (!d) {
        PyErr_Clear();
        return 0;
    }
    int ok = 0;
    PyObject *index = Py_TYPE(d) == (PyTypeObject *)cap_device_type ? PyObject_GetAttrString(d, "index") : NULL;
    if (index && cap_device_of(d, dev, &ok) < 0) ok = 0;
    if (ok && dev->type == WK_DEV_CUDA && index == Py_None) ok = 0;
    Py_XDECREF(index);
    Py_DECREF(d);
    PyErr_Clear();
    return ok;
}

/* torch.get_default_device() now, for a factory call without device=:
 * read at capture and guarded (wick/_capture_meta.py default_device_name
 * answers an interned str, compared by identity), so a call after
 * torch.set_default_device or inside `with torch.device(...)` captures
 * again. 1 with *dev set, 0 when not modelled. */
static int default_device(Interp *I, WkDevice *dev) {
    static PyObject *query; /* strong, for the process */
    if (!query) {
        PyObject *m = PyImport_ImportModule("wick._capture_meta");
        query = m ? PyObject_GetAttrString(m, "default_device_name") : NULL;
        Py_XDECREF(m);
        if (!query) return PyErr_Clear(), 0;
    }
    PyObject *name = PyObject_CallNoArgs(query);
    if (!name) return PyErr_Clear(), 0;
    Sv tmp = {.kind = SV_CONST, .obj = name};
    int ok = PyUnicode_CheckExact(name) && explicit_device(&tmp, dev);
    if (ok) wk_guard_call_is(I->guards, query, name);
    Py_DECREF(name);
    return ok;
}

/* torch.get_default_dtype() now (a factory's float dtype when none is
 * given), guarded: torch.set_default_dtype after capture captures again.
 * The WkDType, or -1 when not modelled. */
static int default_float_dtype(Interp *I) {
    static PyObject *query;
    if (!query && (!cap_torch_mod || !(query = PyObject_GetAttrString(cap_torch_mod, "get_default_dtype"))))
        return PyErr_Clear(), -1;
    PyObject *dt = PyObject_CallNoArgs(query);
    if (!dt) return PyErr_Clear(), -1;
    int d = cap_dtype_of_obj(dt);
    if (d >= 0 && wk_dtype_is_float((WkDType)d)) wk_guard_call_is(I->guards, query, dt);
    else d = -1;
    Py_DECREF(dt);
    return d;
}

static Sv *arange_node(Interp *I, const Args *a) {
    static const char *const names[] = {"start",  "end",        "step",       "out",           "dtype",
                                        "layout", "device",     "pin_memory", "requires_grad", NULL};
    if (!arguments_known(a, 3, names)) return NULL;
    Sv *start_sv, *end_sv, *step_sv = arg_of(a, 2, "step");
    if (a->npos == 1) { /* arange(end) */
        if (arg_of(a, -1, "start") || arg_of(a, -1, "end")) return NULL;
        start_sv = NULL;
        end_sv = a->pos[0];
    } else {
        start_sv = arg_of(a, 0, "start");
        end_sv = arg_of(a, 1, "end");
    }
    PyObject *start = NULL, *end = NULL, *step = NULL;
    if (!arange_bound(end_sv, &end) || (start_sv && !arange_bound(start_sv, &start)) ||
        (step_sv && !arange_bound(step_sv, &step)))
        return NULL;
    Sv *out = arg_of(a, -1, "out"), *layout = arg_of(a, -1, "layout"), *pin = arg_of(a, -1, "pin_memory"),
       *rg = arg_of(a, -1, "requires_grad"), *dtype_sv = arg_of(a, -1, "dtype");
    int pinned = 0, wants_grad = 0;
    if (!is_none(out) || (!is_none(layout) && !(layout->kind == SV_CONST && layout->obj == cap_strided_layout)) ||
        (pin && (!const_bool(pin, &pinned) || pinned)) || (rg && (!const_bool(rg, &wants_grad) || wants_grad)))
        return NULL;
    WkDevice dev;
    Sv *dev_sv = arg_of(a, -1, "device");
    if (!(is_none(dev_sv) ? default_device(I, &dev) : explicit_device(dev_sv, &dev))) return NULL;
    int all_ints = PyLong_CheckExact(end) && (!start || PyLong_CheckExact(start)) && (!step || PyLong_CheckExact(step));
    int dt;
    if (is_none(dtype_sv)) {
        /* eager's default dtypes: int64 for integer bounds, else the default float dtype */
        dt = all_ints ? WK_I64 : default_float_dtype(I);
        if (dt < 0) return NULL;
    } else {
        dt = dtype_sv->kind == SV_CONST ? cap_dtype_of_obj(dtype_sv->obj) : -1;
        if (!(dt == WK_F32 || dt == WK_F64 || dt == WK_F16 || dt == WK_BF16 || dt == WK_I32 || dt == WK_I64)) return NULL;
    }
    int64_t n;
    if (wk_dtype_is_integral((WkDType)dt)) {
        int64_t s = 0, e, st = 1;
        Sv tmp = {.kind = SV_CONST};
        if (!all_ints) return NULL; /* float bounds into an integer dtype: eager's own rounding */
        tmp.obj = end;
        if (!const_int(&tmp, &e)) return NULL;
        if (start && (tmp.obj = start, !const_int(&tmp, &s))) return NULL;
        if (step && (tmp.obj = step, !const_int(&tmp, &st))) return NULL;
        int64_t span;
        if (st == 0 || __builtin_sub_overflow(e, s, &span) || (st > 0 && span < 0) || (st < 0 && span > 0)) return NULL;
        n = span / st + (span % st != 0); /* ceil: span and st have one sign */
        int64_t last;
        if (__builtin_mul_overflow(n > 0 ? n - 1 : 0, st, &span) || __builtin_add_overflow(s, span, &last)) return NULL;
        if (dt == WK_I32 && (s < INT32_MIN || s > INT32_MAX || last < INT32_MIN || last > INT32_MAX)) return NULL;
    } else {
        double s = start ? PyFloat_AsDouble(start) : 0.0, e = PyFloat_AsDouble(end), st = step ? PyFloat_AsDouble(step) : 1.0;
        if (PyErr_Occurred()) return PyErr_Clear(), NULL;
        double size = (e - s) / st;
        if (st == 0 || size != size || size < 0 || size > 1e12) return NULL;
        n = (int64_t)__builtin_ceil(size);
    }
    PyObject *zero = start ? NULL : PyLong_FromLong(0), *one = step ? NULL : PyLong_FromLong(1);
    int in[2] = {-1, -1};
    if ((start || zero) && (step || one)) {
        in[0] = cap_scalar_value(I, start ? start : zero);
        in[1] = in[0] < 0 ? -1 : cap_scalar_value(I, step ? step : one);
    }
    Py_XDECREF(zero);
    Py_XDECREF(one);
    PyErr_Clear();
    if (in[0] < 0 || in[1] < 0) return NULL;
    WkAttrs at = {0};
    at.dtype = (WkDType)dt;
    at.has_dtype = 1;
    at.nints = 1;
    at.ints = &n;
    at.has_device = 1;
    at.device = dev;
    return try_node(I, WK_OP_ARANGE, in, 2, &at);
}

/* ---- torch.zeros/ones/full, Tensor.new_zeros/new_ones/new_full -> FULL -------- */

/* A size given as ints (x.new_ones(2, 3)) or one sequence of ints; into sizes. */
static int read_sizes(Sv *const *items, int n, int64_t *sizes, int *nd) {
    if (n == 1 && items[0]->kind != SV_CONST) return const_ints(items[0], sizes, WK_MAX_DIMS, nd);
    if (n == 1 && items[0]->kind == SV_CONST && !PyLong_CheckExact(items[0]->obj))
        return const_ints(items[0], sizes, WK_MAX_DIMS, nd);
    if (n > WK_MAX_DIMS) return 0;
    for (int i = 0; i < n; i++)
        if (!const_int(items[i], &sizes[i])) return 0;
    *nd = n;
    return 1;
}

/* The fill converts to dtype as eager's would, without a change of kind
 * (an integer tensor takes an int in its range, a bool tensor a bool or 0/1). */
static int fill_fits(PyObject *fill, WkDType dt) {
    if (dt == WK_BOOL) /* zeros/ones fill with 0 and 1 */
        return PyBool_Check(fill) || (PyLong_CheckExact(fill) && (PyLong_AsLong(fill) == 0 || PyLong_AsLong(fill) == 1));
    if (wk_dtype_is_float(dt)) {
        /* a finite fill beyond the dtype's range raises in eager (an overflowing conversion) */
        if (PyBool_Check(fill)) return 1;
        if (!PyLong_CheckExact(fill) && !PyFloat_CheckExact(fill)) return 0;
        double v = PyLong_CheckExact(fill) ? PyLong_AsDouble(fill) : PyFloat_AS_DOUBLE(fill);
        if (v == -1.0 && PyErr_Occurred()) return PyErr_Clear(), 0;
        double max = dt == WK_F16 ? 65504.0 : dt == WK_BF16 ? 3.3895313892515355e38 : dt == WK_F32 ? 3.4028234663852886e38
                   : dt == WK_F64 ? __DBL_MAX__ : 0.0;
        return v != v || v == Py_HUGE_VAL || v == -Py_HUGE_VAL || (v <= max && v >= -max);
    }
    if (PyBool_Check(fill)) return 1;
    if (!PyLong_CheckExact(fill)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(fill, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) return PyErr_Clear(), 0;
    int bits = 8 * wk_dtype_size(dt);
    if (dt == WK_U8) return v >= 0 && v <= 255;
    return bits >= 64 || (v >= -(1LL << (bits - 1)) && v < (1LL << (bits - 1)));
}

static Sv *full_node(Interp *I, const char *fname, const Args *a) {
    const char *name = strrchr(fname, '.');
    name = name ? name + 1 : fname;
    int method = strncmp(name, "new_", 4) == 0;
    const char *kind = method ? name + 4 : name; /* zeros, ones, full */
    int is_full = strcmp(kind, "full") == 0;
    if (!is_full && strcmp(kind, "zeros") != 0 && strcmp(kind, "ones") != 0) return NULL;
    static const char *const kws[] = {"size", "fill_value", "dtype", "device", "layout", "pin_memory", "requires_grad",
                                      "out", NULL};
    /* keywords only past the size (and fill_value for full): no `names=`, `out=` */
    for (int k = 0; k < a->nkw; k++) {
        PyObject *kn = PyTuple_GET_ITEM(a->kwnames, k);
        int known = 0;
        for (int i = 2; kws[i] && !known; i++) known = PyUnicode_CompareWithASCIIString(kn, kws[i]) == 0;
        if (!known) return NULL;
    }
    Sv *const *pos = a->pos + method;
    int npos = a->npos - method, nsize = is_full ? npos - 1 : npos;
    if (nsize < 1 || (is_full && nsize != 1)) return NULL;
    int64_t sizes[WK_MAX_DIMS];
    int nd = 0;
    if (!read_sizes(pos, nsize, sizes, &nd)) return NULL;
    for (int d = 0; d < nd; d++)
        if (sizes[d] < 0) return NULL; /* eager raises */
    Sv *dtype_sv = arg_of(a, -1, "dtype"), *layout = arg_of(a, -1, "layout"), *pin = arg_of(a, -1, "pin_memory"),
       *rg = arg_of(a, -1, "requires_grad"), *dev_sv = arg_of(a, -1, "device"), *out = arg_of(a, -1, "out");
    int pinned = 0, wants_grad = 0;
    if (!is_none(out) || (!is_none(layout) && !(layout->kind == SV_CONST && layout->obj == cap_strided_layout)) ||
        (pin && (!const_bool(pin, &pinned) || pinned)) || (rg && (!const_bool(rg, &wants_grad) || wants_grad)))
        return NULL;
    PyObject *fill = NULL;
    if (is_full) {
        Sv *f = pos[nsize];
        if (f->kind != SV_CONST || !(PyBool_Check(f->obj) || PyLong_CheckExact(f->obj) || PyFloat_CheckExact(f->obj)))
            return NULL;
        fill = Py_NewRef(f->obj);
    } else {
        fill = PyLong_FromLong(strcmp(kind, "ones") == 0);
        if (!fill) return PyErr_Clear(), NULL;
    }
    const WkValue *self = method && a->pos[0]->kind == SV_TENSOR ? cap_sv_meta(I, a->pos[0]) : NULL;
    WkDevice dev;
    int dt = -1, ok = 1;
    if (method && !self) ok = 0;
    else if (is_none(dev_sv) && self) dev = self->device; /* new_*: self's device */
    else if (is_none(dev_sv)) ok = default_device(I, &dev);
    else ok = explicit_device(dev_sv, &dev);
    if (ok && !is_none(dtype_sv)) dt = dtype_sv->kind == SV_CONST ? cap_dtype_of_obj(dtype_sv->obj) : -1, ok = dt >= 0;
    else if (ok && self) dt = self->dtype;
    else if (ok) /* eager's defaults: full infers from the fill, else the default float dtype */
        dt = !is_full || PyFloat_CheckExact(fill) ? default_float_dtype(I) : PyBool_Check(fill) ? WK_BOOL : WK_I64,
        ok = dt >= 0;
    int in = ok && fill_fits(fill, (WkDType)dt) ? cap_scalar_value(I, fill) : -1;
    Py_DECREF(fill);
    PyErr_Clear();
    if (in < 0 || CAP_FAILED(I)) return NULL;
    WkAttrs at = {0};
    at.dtype = (WkDType)dt;
    at.has_dtype = 1;
    at.nints = nd;
    at.ints = sizes;
    at.has_device = 1;
    at.device = dev;
    return try_node(I, WK_OP_FULL, &in, 1, &at);
}

Sv *cap_structural_call(Interp *I, WkOp op, const Args *a, const char *fname, PyObject *fn) {
    Sv *r = NULL;
    switch (op) {
    case WK_OP_CAT: r = cap_laid_or_raw(I, cat_node(I, a), CAP_LAID_CAT); break;
    case WK_OP_PAD: r = cap_laid_or_raw(I, pad_node(I, a), CAP_LAID_PAD); break;
    /* embedding is index_select's rows, viewed: contiguous in eager */
    case WK_OP_INDEX: r = cap_laid_or_raw(I, embedding_node(I, a), CAP_LAID_CONTIGUOUS); break;
    case WK_OP_ARANGE: r = arange_node(I, a); break;
    case WK_OP_FULL: r = full_node(I, fname, a); break;
    default: break;
    }
    if (r || CAP_FAILED(I)) return r;
    return extern_call(I, fn, fname, a);
}

/* ---- *_like, min/max of two tensors, gather, diff, cumsum ------------------ */

enum { ZEROS_LIKE, ONES_LIKE, FULL_LIKE, EMPTY_LIKE, MIN2, MAX2, GATHER, DIFF, CUMSUM, CONV2D, NMORE };
static const char *const more_names[NMORE] = {"zeros_like", "ones_like", "full_like", "empty_like", "min",
                                              "max",        "gather",    "diff",      "cumsum",     "conv2d"};
static PyObject *more_fns[NMORE]; /* strong, for the process: torch.<name> */
static PyObject *minimum_fn, *maximum_fn, *narrow_fn, *aten_cumsum, *aten_convolution, *preserve_format,
    *contiguous_format, *cross_entropy_fn;

/* torch.ops.aten.<name>.default, new reference or NULL */
static PyObject *aten_default_Ref(const char *name) {
    PyObject *ops = PyObject_GetAttrString(cap_torch_mod, "ops");
    PyObject *aten = ops ? PyObject_GetAttrString(ops, "aten") : NULL;
    PyObject *packet = aten ? PyObject_GetAttrString(aten, name) : NULL;
    PyObject *r = packet ? PyObject_GetAttrString(packet, "default") : NULL;
    Py_XDECREF(ops);
    Py_XDECREF(aten);
    Py_XDECREF(packet);
    return r;
}

static int more_ready(void) {
    static int state; /* 0 unresolved, 1 resolved, -1 not available */
    if (state || !cap_torch_mod) return state == 1;
    state = -1;
    int ok = 1;
    for (int k = 0; ok && k < NMORE; k++) ok = (more_fns[k] = PyObject_GetAttrString(cap_torch_mod, more_names[k])) != NULL;
    ok = ok && (aten_cumsum = aten_default_Ref("cumsum")) && (aten_convolution = aten_default_Ref("convolution")) &&
         (minimum_fn = PyObject_GetAttrString(cap_torch_mod, "minimum")) &&
         (maximum_fn = PyObject_GetAttrString(cap_torch_mod, "maximum")) &&
         (narrow_fn = PyObject_GetAttrString(cap_torch_mod, "narrow")) &&
         (preserve_format = PyObject_GetAttrString(cap_torch_mod, "preserve_format")) &&
         (contiguous_format = PyObject_GetAttrString(cap_torch_mod, "contiguous_format"));
    PyObject *functional = ok ? PyImport_ImportModule("torch.nn.functional") : NULL;
    ok = functional && (cross_entropy_fn = PyObject_GetAttrString(functional, "cross_entropy"));
    Py_XDECREF(functional);
    PyErr_Clear();
    if (ok) state = 1;
    return state == 1;
}

/* m's strides are the contiguous ones eager gives a fresh tensor of its
 * sizes (a graph node without strides has them, graph.h): a *_like of it
 * in preserve_format is laid out as FULL's output is. */
static int fresh_contiguous(const WkValue *m) {
    int64_t expect = 1;
    for (int d = m->ndim - 1; d >= 0; d--) {
        int64_t size = cap_const_size(m, d), stride = expect;
        if (m->strides[d] && !wk_sym_is_const(m->strides[d], &stride)) return 0;
        if (stride != expect) return 0;
        expect *= size > 1 ? size : 1;
    }
    return 1;
}

/* The strides eager's preserve_format gives a *_like of m, in wick's layout
 * of m (an input's, a view's or an extern's: eager's own): torch's rule
 * asked on a meta tensor (wick/_capture_meta.py preserved_strides). 1 with
 * out set, 0 when not known. */
static int preserved_strides(const WkValue *m, int64_t *out) {
    static PyObject *query; /* strong, for the process */
    if (!query) {
        PyObject *meta = PyImport_ImportModule("wick._capture_meta");
        query = meta ? PyObject_GetAttrString(meta, "preserved_strides") : NULL;
        Py_XDECREF(meta);
        if (!query) return PyErr_Clear(), 0;
    }
    PyObject *sizes = PyTuple_New(m->ndim), *strides = PyTuple_New(m->ndim);
    int ok = sizes && strides;
    int64_t expect = 1;
    for (int d = m->ndim - 1; ok && d >= 0; d--) {
        int64_t size = cap_const_size(m, d), stride = expect;
        if (m->strides[d] && !wk_sym_is_const(m->strides[d], &stride)) ok = 0;
        expect *= size > 1 ? size : 1;
        PyObject *a = ok ? PyLong_FromLongLong(size) : NULL, *b = a ? PyLong_FromLongLong(stride) : NULL;
        if (!b) {
            Py_XDECREF(a);
            ok = 0;
            break;
        }
        PyTuple_SET_ITEM(sizes, d, a);
        PyTuple_SET_ITEM(strides, d, b);
    }
    PyObject *r = ok ? PyObject_CallFunctionObjArgs(query, sizes, strides, NULL) : NULL;
    Py_XDECREF(sizes);
    Py_XDECREF(strides);
    ok = r && PyTuple_Check(r) && PyTuple_GET_SIZE(r) == m->ndim;
    for (int d = 0; ok && d < m->ndim; d++) {
        Sv item = {.kind = SV_CONST, .obj = PyTuple_GET_ITEM(r, d)};
        ok = const_int(&item, &out[d]);
    }
    Py_XDECREF(r);
    PyErr_Clear();
    return ok;
}

/* A FULL node (input `fill`, attrs `at` less its sizes) of `sizes` laid out
 * with `strides`, a dense layout (contiguous strides of the dims taken in
 * some order; a dim of size 1 may have any): FULL of the sizes in that order,
 * seen through a VIEW with these strides. NULL when the layout is not dense
 * or the builder refuses a node. */
static Sv *full_with_strides(Interp *I, int fill, WkAttrs *at, int nd, const int64_t *sizes, const int64_t *strides) {
    int64_t order[WK_MAX_DIMS];
    cap_dims_by_stride(nd, strides, order);
    int64_t base_sizes[WK_MAX_DIMS], expect = 1;
    for (int k = nd - 1; k >= 0; k--) {
        int64_t d = order[k];
        base_sizes[k] = sizes[d];
        if (sizes[d] == 0) return NULL; /* nothing to lay out: eager's strides are its own business */
        if (sizes[d] != 1 && strides[d] != expect) return NULL;
        expect *= sizes[d];
    }
    at->nints = nd;
    at->ints = base_sizes;
    Sv *base = try_node(I, WK_OP_FULL, &fill, 1, at);
    if (!base) return NULL;
    cap_mark_private_base(I, base->value);
    return cap_view_with_layout(I, base, nd, sizes, strides);
}

/* torch.zeros_like(input, *, dtype, layout, device, requires_grad,
 * memory_format) & co. -> FULL: input's sizes, dtype and device (or the
 * ones given); empty_like's contents are unspecified, zeros are some. In
 * preserve_format (the default) the result has eager's strides: a FULL
 * node where those are contiguous, else FULL seen through a VIEW. */
static Sv *like_node(Interp *I, int which, const Args *a) {
    static const char *const names[] = {"input", "dtype", "layout", "device", "requires_grad", "memory_format", NULL};
    static const char *const full_names[] = {"input", "fill_value", "dtype", "layout", "device", "requires_grad",
                                             "memory_format", NULL};
    int is_full = which == FULL_LIKE;
    if (!arguments_known(a, is_full ? 2 : 1, is_full ? full_names : names)) return NULL;
    Sv *x = arg_of(a, 0, "input"), *fill_sv = is_full ? arg_of(a, 1, "fill_value") : NULL;
    Sv *dtype_sv = arg_of(a, -1, "dtype"), *layout = arg_of(a, -1, "layout"), *dev_sv = arg_of(a, -1, "device"),
       *rg = arg_of(a, -1, "requires_grad"), *fmt = arg_of(a, -1, "memory_format");
    if (!x || x->kind != SV_TENSOR || (is_full && !fill_sv)) return NULL;
    const WkValue *m = cap_sv_meta(I, x);
    if (!m || !static_sizes(m)) return NULL;
    int wants_grad = 0;
    if ((!is_none(layout) && !(layout->kind == SV_CONST && layout->obj == cap_strided_layout)) ||
        (rg && (!const_bool(rg, &wants_grad) || wants_grad)))
        return NULL;
    /* preserve_format keeps input's layout: FULL's own only for a freshly
     * contiguous input; for another one, the strides eager picks */
    int contiguous = fmt && fmt->kind == SV_CONST && fmt->obj == contiguous_format;
    if (!contiguous && !(is_none(fmt) || (fmt->kind == SV_CONST && fmt->obj == preserve_format))) return NULL;
    int64_t strides[WK_MAX_DIMS];
    int strided = !contiguous && !fresh_contiguous(m);
    for (int d = 0; strided && d < m->ndim; d++)
        if (cap_const_size(m, d) == 0) return NULL; /* no elements: the strides are eager's own business */
    if (strided && !preserved_strides(m, strides)) return NULL;
    if (strided) { /* eager's strides contiguous after all (an expanded or stepped input): FULL's own */
        int64_t expect = 1;
        strided = 0;
        for (int d = m->ndim - 1; d >= 0; d--) {
            int64_t size = cap_const_size(m, d);
            strided |= size != 1 && strides[d] != expect;
            expect *= size > 1 ? size : 1;
        }
    }
    WkDevice dev = m->device;
    if (!is_none(dev_sv) && (!explicit_device(dev_sv, &dev) || !same_device(&(WkValue){.device = dev}, m))) return NULL;
    int dt = m->dtype;
    if (!is_none(dtype_sv) && (dtype_sv->kind != SV_CONST || (dt = cap_dtype_of_obj(dtype_sv->obj)) < 0)) return NULL;
    PyObject *fill;
    if (is_full) {
        if (fill_sv->kind != SV_CONST ||
            !(PyBool_Check(fill_sv->obj) || PyLong_CheckExact(fill_sv->obj) || PyFloat_CheckExact(fill_sv->obj)))
            return NULL;
        fill = Py_NewRef(fill_sv->obj);
    } else {
        fill = PyLong_FromLong(which == ONES_LIKE);
        if (!fill) return PyErr_Clear(), NULL;
    }
    int in = fill_fits(fill, (WkDType)dt) ? cap_scalar_value(I, fill) : -1;
    Py_DECREF(fill);
    PyErr_Clear();
    if (in < 0 || CAP_FAILED(I)) return NULL;
    int64_t sizes[WK_MAX_DIMS];
    for (int d = 0; d < m->ndim; d++) sizes[d] = cap_const_size(m, d);
    WkAttrs at = {0};
    at.dtype = (WkDType)dt;
    at.has_dtype = 1;
    at.nints = m->ndim;
    at.ints = sizes;
    at.has_device = 1;
    at.device = dev;
    if (strided) return full_with_strides(I, in, &at, m->ndim, sizes, strides);
    return try_node(I, WK_OP_FULL, &in, 1, &at);
}

/* torch.min(input, other) and max with a tensor `other` are minimum and
 * maximum (other forms reduce: not these) */
static Sv *min_max_call(Interp *I, int which, const Args *a) {
    if (a->npos != 2 || a->nkw || a->pos[0]->kind != SV_TENSOR || a->pos[1]->kind != SV_TENSOR) return NULL;
    return cap_call_op(I, which == MIN2 ? WK_OP_MINIMUM : WK_OP_MAXIMUM, a,
                       which == MIN2 ? "torch.minimum" : "torch.maximum", 0, which == MIN2 ? minimum_fn : maximum_fn);
}

/* torch.gather(input, dim, index, *, sparse_grad=False) -> GATHER (the
 * builder checks eager's rules on the shapes; sparse_grad changes only the
 * gradient's layout) */
static Sv *gather_node(Interp *I, const Args *a) {
    static const char *const names[] = {"input", "dim", "index", "sparse_grad", NULL};
    if (!arguments_known(a, 3, names)) return NULL;
    Sv *x = arg_of(a, 0, "input"), *dim_sv = arg_of(a, 1, "dim"), *idx = arg_of(a, 2, "index"),
       *sparse = arg_of(a, -1, "sparse_grad");
    int64_t dim;
    int sp = 0;
    if (!x || !idx || x->kind != SV_TENSOR || idx->kind != SV_TENSOR || !const_int(dim_sv, &dim) ||
        (sparse && (!const_bool(sparse, &sp) || sp)))
        return NULL;
    const WkValue *m = cap_sv_meta(I, x), *im = m ? cap_sv_meta(I, idx) : NULL;
    if (!im || m->ndim < 1 || im->dtype != WK_I64 || !same_device(m, im) || !indexing_native_on(m) ||
        !static_sizes(m) || !static_sizes(im))
        return NULL;
    if (dim < -m->ndim || dim >= m->ndim) return NULL;
    if (dim < 0) dim += m->ndim;
    int in[2] = {m->id, im->id};
    WkAttrs at = {0};
    at.nints = 1;
    at.ints = &dim;
    return try_node(I, WK_OP_GATHER, in, 2, &at);
}

static Sv *narrow(Interp *I, Sv *x, int64_t dim, int64_t start, int64_t length) {
    Sv *pos[4] = {x, sv_const_Steal(I, PyLong_FromLongLong(dim)), sv_const_Steal(I, PyLong_FromLongLong(start)),
                  sv_const_Steal(I, PyLong_FromLongLong(length))};
    Args na = {pos, 4, NULL, NULL, 0};
    return cap_view_call(I, &na, "torch.narrow", narrow_fn);
}

/* torch.diff(input, n=1, dim=-1, prepend=None, append=None) with n 1:
 * prepend and append joined on (CAT), then the later elements minus the
 * earlier ones (SUB of two narrowed views; NE for bool, eager's xor) */
static Sv *diff_nodes(Interp *I, const Args *a) {
    static const char *const names[] = {"input", "n", "dim", "prepend", "append", NULL};
    if (!arguments_known(a, 5, names)) return NULL;
    Sv *x = arg_of(a, 0, "input"), *n_sv = arg_of(a, 1, "n"), *dim_sv = arg_of(a, 2, "dim"),
       *pre = arg_of(a, 3, "prepend"), *app = arg_of(a, 4, "append");
    int64_t n = 1, dim = -1;
    if (!x || x->kind != SV_TENSOR || (n_sv && !const_int(n_sv, &n)) || n != 1 || (dim_sv && !const_int(dim_sv, &dim)))
        return NULL;
    const WkValue *m = cap_sv_meta(I, x);
    if (!m || m->ndim < 1 || !static_sizes(m) || dim < -m->ndim || dim >= m->ndim) return NULL;
    if (dim < 0) dim += m->ndim;
    Sv *parts[3];
    int nparts = 0, in[3];
    int64_t total = 0;
    if (!is_none(pre)) parts[nparts++] = pre;
    parts[nparts++] = x;
    if (!is_none(app)) parts[nparts++] = app;
    for (int i = 0; i < nparts; i++) {
        /* prepend/append of input's dtype, rank and other sizes (eager's
         * cat would promote or broadcast a scalar: not modelled) */
        const WkValue *p = parts[i]->kind == SV_TENSOR ? cap_sv_meta(I, parts[i]) : NULL;
        if (!p || p->dtype != m->dtype || p->ndim != m->ndim || !same_device(p, m) || !static_sizes(p)) return NULL;
        for (int d = 0; d < m->ndim; d++)
            if (d != dim && cap_const_size(p, d) != cap_const_size(m, d)) return NULL;
        total += cap_const_size(p, (int)dim);
        in[i] = p->id;
    }
    if (total < 2) return NULL;
    Sv *joined = x;
    if (nparts > 1) {
        WkAttrs at = {0};
        at.nints = 1;
        at.ints = &dim;
        if (!(joined = try_node(I, WK_OP_CAT, in, nparts, &at))) return NULL;
    }
    Sv *later = narrow(I, joined, dim, 1, total - 1);
    Sv *earlier = later ? narrow(I, joined, dim, 0, total - 1) : NULL;
    if (!earlier) return NULL;
    int ops[2] = {later->value, earlier->value};
    return try_node(I, m->dtype == WK_BOOL ? WK_OP_NE : WK_OP_SUB, ops, 2, NULL);
}

/* torch.cumsum(input, dim, *, dtype=None) -> aten.cumsum's extern (the
 * runtime calls it through the C shim, which passes no dtype). dtype=
 * converts input first, as eager's cumsum does, then sums in that dtype: a
 * CONVERT node before the extern, for a floating dtype or int64 (the dtype
 * aten.cumsum keeps). A narrower integer dtype (aten.cumsum without dtype
 * would widen it to int64) and bool (eager raises) stay the torch call. */
static Sv *cumsum_call(Interp *I, const Args *a) {
    static const char *const names[] = {"input", "dim", "dtype", NULL};
    if (!arguments_known(a, 2, names)) return NULL; /* dtype is keyword-only */
    Sv *x = arg_of(a, 0, "input"), *dim_sv = arg_of(a, 1, "dim"), *dtype_sv = arg_of(a, -1, "dtype");
    int64_t dim;
    if (!x || x->kind != SV_TENSOR || !const_int(dim_sv, &dim)) return NULL;
    if (!is_none(dtype_sv)) {
        int dt = dtype_sv->kind == SV_CONST ? cap_dtype_of_obj(dtype_sv->obj) : -1;
        const WkValue *m = cap_sv_meta(I, x);
        if (!m || dt < 0 || !(wk_dtype_is_float((WkDType)dt) || dt == WK_I64)) return NULL;
        /* inside autocast, aten.cumsum of a 16-bit tensor without dtype= would
         * sum in float32 (ATen's fp32_set_opt_dtype policy on CUDA), where
         * eager's dtype= keeps the 16-bit dtype: the torch call */
        if ((dt == WK_F16 || dt == WK_BF16) && cap_autocast_dtype(I, m->device.type) != -1) return PyErr_Clear(), NULL;
        if (dt != (int)m->dtype && !(x = cap_convert(I, x, dt))) return NULL;
    }
    Sv *pos[2] = {x, dim_sv};
    return cap_extern_call(I, aten_cumsum, "aten.cumsum.default", pos, 2, NULL, NULL, 0);
}

static int plain_matmul_operands(Interp *I, Sv **ts, int n);

/* One or two ints (conv2d's stride, padding, dilation) as a pair. */
static int int_pair(const Sv *s, int64_t dflt, int64_t *out) {
    int n = 0;
    if (!s) {
        out[0] = out[1] = dflt;
        return 1;
    }
    if (const_int(s, &out[0])) {
        out[1] = out[0];
        return 1;
    }
    if (!const_ints(s, out, 2, &n)) return 0;
    if (n == 1) out[1] = out[0];
    return n == 1 || n == 2;
}

/* torch.conv2d (F.conv2d) of a batched input with int paddings: eager's
 * aten.convolution call (transposed False, no output padding), which the
 * runtime makes through the C shim */
static Sv *conv2d_call(Interp *I, const Args *a) {
    static const char *const names[] = {"input", "weight", "bias", "stride", "padding", "dilation", "groups", NULL};
    if (!arguments_known(a, 7, names)) return NULL;
    Sv *x = arg_of(a, 0, "input"), *w = arg_of(a, 1, "weight"), *b = arg_of(a, 2, "bias");
    int64_t stride[2], padding[2], dilation[2], groups = 1;
    Sv *groups_sv = arg_of(a, 6, "groups");
    if (!int_pair(arg_of(a, 3, "stride"), 1, stride) || !int_pair(arg_of(a, 4, "padding"), 0, padding) ||
        !int_pair(arg_of(a, 5, "dilation"), 1, dilation) || (groups_sv && !const_int(groups_sv, &groups)))
        return NULL;
    Sv *operands[3] = {x, w, b};
    int has_bias = !is_none(b);
    if (!x || !w || !plain_matmul_operands(I, operands, has_bias ? 3 : 2) || CAP_FAILED(I)) return NULL;
    x = operands[0], w = operands[1], b = has_bias ? operands[2] : b;
    const WkValue *xm = cap_sv_meta(I, x), *wm = cap_sv_meta(I, w);
    if (xm->ndim != 4 || wm->ndim != 4) return NULL; /* unbatched input: conv2d unsqueezes first */
    PyObject *st = Py_BuildValue("(LL)", (long long)stride[0], (long long)stride[1]);
    PyObject *pd = Py_BuildValue("(LL)", (long long)padding[0], (long long)padding[1]);
    PyObject *dl = Py_BuildValue("(LL)", (long long)dilation[0], (long long)dilation[1]);
    PyObject *op = Py_BuildValue("(ii)", 0, 0), *gr = PyLong_FromLongLong(groups);
    if (!st || !pd || !dl || !op || !gr) {
        Py_XDECREF(st);
        Py_XDECREF(pd);
        Py_XDECREF(dl);
        Py_XDECREF(op);
        Py_XDECREF(gr);
        return PyErr_Clear(), NULL;
    }
    Sv *pos[9] = {x, w, has_bias ? b : sv_const(I, Py_None), sv_const_Steal(I, st), sv_const_Steal(I, pd),
                  sv_const_Steal(I, dl), sv_const(I, Py_False), sv_const_Steal(I, op), sv_const_Steal(I, gr)};
    return cap_extern_call(I, aten_convolution, "aten.convolution.default", pos, 9, NULL, NULL, 0);
}

/* F.cross_entropy(input [N, C] floating, target [N] int64 class indices,
 * no weight, no label smoothing) -> eager's log_softmax and nll_loss as
 * nodes: LOG_SOFTMAX over classes, the target's entry of each row (GATHER;
 * an ignored row reads class 0 and is zeroed after), negated; summed for
 * 'sum', divided by the count of rows not ignored for 'mean' (0/0 is NaN,
 * as eager's). A target out of range makes the kernel raise, and the frame
 * runs again eagerly for eager's own error. */

static Sv *cross_entropy_nodes(Interp *I, const Args *a) {
    static const char *const names[] = {"input",  "target",    "weight",          "size_average", "ignore_index",
                                        "reduce", "reduction", "label_smoothing", NULL};
    if (!arguments_known(a, 8, names)) return NULL;
    Sv *x = arg_of(a, 0, "input"), *t = arg_of(a, 1, "target"), *ig_sv = arg_of(a, 4, "ignore_index"),
       *red_sv = arg_of(a, 6, "reduction"), *ls = arg_of(a, 7, "label_smoothing");
    int64_t ignore = -100;
    if (!x || !t || x->kind != SV_TENSOR || t->kind != SV_TENSOR || !is_none(arg_of(a, 2, "weight")) ||
        !is_none(arg_of(a, 3, "size_average")) || !is_none(arg_of(a, 5, "reduce")) ||
        (ig_sv && !const_int(ig_sv, &ignore)))
        return NULL;
    if (ls && !(ls->kind == SV_CONST && (PyFloat_CheckExact(ls->obj) || PyLong_CheckExact(ls->obj)) &&
                PyFloat_AsDouble(ls->obj) == 0.0))
        return PyErr_Clear(), NULL;
    const char *red = "mean";
    if (red_sv && !(red_sv->kind == SV_CONST && PyUnicode_Check(red_sv->obj) && (red = PyUnicode_AsUTF8(red_sv->obj))))
        return PyErr_Clear(), NULL;
    int mean = strcmp(red, "mean") == 0, sum = strcmp(red, "sum") == 0, none = strcmp(red, "none") == 0;
    if (!mean && !sum && !none) return NULL;
    const WkValue *xm = cap_sv_meta(I, x), *tm = xm ? cap_sv_meta(I, t) : NULL;
    /* autocast runs cross_entropy in float32 on both devices (ATen's fp32
     * lists): a 16-bit input is cast first, and the loss is float32 */
    if (xm && (x = cap_autocast_to_fp32(I, x)) == NULL) return NULL;
    xm = xm ? cap_sv_meta(I, x) : NULL;
    /* float32/float64 (16-bit inputs outside autocast sum in eager's own precision) */
    if (!xm || !tm || xm->ndim != 2 || tm->ndim != 1 || (xm->dtype != WK_F32 && xm->dtype != WK_F64) ||
        tm->dtype != WK_I64 || !same_device(xm, tm) || !static_sizes(xm) || !static_sizes(tm) ||
        !indexing_native_on(xm))
        return NULL;
    int64_t n = cap_const_size(xm, 0), classes = cap_const_size(xm, 1);
    if (cap_const_size(tm, 0) != n || classes < 1) return NULL;
    PyObject *ig = PyLong_FromLongLong(ignore), *zero = PyLong_FromLong(0), *fzero = PyFloat_FromDouble(0.0);
    int ig_v = ig ? cap_scalar_value(I, ig) : -1, zero_v = zero ? cap_scalar_value(I, zero) : -1,
        fzero_v = fzero ? cap_scalar_value(I, fzero) : -1;
    Py_XDECREF(ig);
    Py_XDECREF(zero);
    Py_XDECREF(fzero);
    PyErr_Clear();
    if (ig_v < 0 || zero_v < 0 || fzero_v < 0 || CAP_FAILED(I)) return NULL;
    WkAttrs rows = {0};
    rows.ndims = 1;
    rows.dims[0] = 1;
    Sv *lsm = try_node(I, WK_OP_LOG_SOFTMAX, &xm->id, 1, &rows);
    int ne_in[2] = {tm->id, ig_v};
    Sv *valid = lsm ? try_node(I, WK_OP_NE, ne_in, 2, NULL) : NULL;
    int where_in[3] = {valid ? valid->value : -1, tm->id, zero_v};
    Sv *safe = valid ? try_node(I, WK_OP_WHERE, where_in, 3, NULL) : NULL;
    int64_t col[2] = {n, 1}, flat[1] = {n};
    Sv *safe_col = safe ? cap_view_as_shape(I, safe, 2, col) : NULL;
    if (!safe_col) return NULL;
    int64_t class_dim = 1;
    WkAttrs g = {0};
    g.nints = 1;
    g.ints = &class_dim;
    int gather_in[2] = {lsm->value, safe_col->value};
    Sv *picked = try_node(I, WK_OP_GATHER, gather_in, 2, &g);
    Sv *picked_row = picked ? cap_view_as_shape(I, picked, 1, flat) : NULL;
    Sv *neg = picked_row ? try_node(I, WK_OP_NEG, &picked_row->value, 1, NULL) : NULL;
    int zeroed_in[3] = {valid->value, neg ? neg->value : -1, fzero_v};
    Sv *loss = neg ? try_node(I, WK_OP_WHERE, zeroed_in, 3, NULL) : NULL;
    if (!loss || none) return loss;
    WkAttrs all = {0};
    Sv *total = try_node(I, WK_OP_SUM, &loss->value, 1, &all);
    if (!total || sum) return total;
    Sv *count = try_node(I, WK_OP_SUM, &valid->value, 1, &all);
    int div_in[2] = {total->value, count ? count->value : -1};
    return count ? try_node(I, WK_OP_DIV, div_in, 2, NULL) : NULL;
}

static Sv *more_call(Interp *I, int which, const Args *a) {
    switch (which) {
    case ZEROS_LIKE:
    case ONES_LIKE:
    case FULL_LIKE:
    case EMPTY_LIKE: return like_node(I, which, a);
    case MIN2:
    case MAX2: return min_max_call(I, which, a);
    case GATHER: return gather_node(I, a);
    case DIFF: return diff_nodes(I, a);
    case CUMSUM: return cumsum_call(I, a);
    case CONV2D: return conv2d_call(I, a);
    default: return NULL;
    }
}

Sv *cap_more_torch_call(Interp *I, PyObject *fn, const Args *a) {
    if (!fn || !more_ready()) return NULL;
    if (fn == cross_entropy_fn) return cross_entropy_nodes(I, a);
    for (int k = 0; k < NMORE; k++)
        if (fn == more_fns[k]) return more_call(I, k, a);
    return NULL;
}

Sv *cap_more_tensor_method(Interp *I, const char *name, const Args *a) {
    static const int methods[] = {MIN2, MAX2, GATHER, DIFF, CUMSUM};
    if (!more_ready() || a->npos < 1) return NULL;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (strcmp(name, more_names[methods[i]]) == 0) return more_call(I, methods[i], a);
    return NULL;
}

/* ---- matmuls: F.linear as views around aten.mm/addmm; torch.mm, addmm, bmm, baddbmm */

/* The torch-level callables and the ATen overloads the runtime calls
 * through the C shim (runtime/shim_ops.c matches these by name and identity). */
enum { MM, ADDMM, BMM, BADDBMM, NMATMUL };
static const struct {
    const char *torch_name, *aten_name, *aten_attr;
    int ntensors;
} matmuls[NMATMUL] = {
    [MM] = {"mm", "aten.mm.default", "mm", 2},
    [ADDMM] = {"addmm", "aten.addmm.default", "addmm", 3},
    [BMM] = {"bmm", "aten.bmm.default", "bmm", 2},
    [BADDBMM] = {"baddbmm", "aten.baddbmm.default", "baddbmm", 3},
};
static PyObject *linear_fn, *torch_fns[NMATMUL], *aten_fns[NMATMUL]; /* strong, for the process */

static int matmuls_ready(void) {
    static int state; /* 0 unresolved, 1 resolved, -1 not available */
    if (state || !cap_torch_mod) return state == 1;
    state = -1;
    PyObject *nn = PyImport_ImportModule("torch._C._nn");
    PyObject *torch_ops = nn ? PyObject_GetAttrString(cap_torch_mod, "ops") : NULL;
    PyObject *aten = torch_ops ? PyObject_GetAttrString(torch_ops, "aten") : NULL;
    int ok = aten && (linear_fn = PyObject_GetAttrString(nn, "linear")) != NULL;
    for (int k = 0; ok && k < NMATMUL; k++) {
        PyObject *packet = PyObject_GetAttrString(aten, matmuls[k].aten_attr);
        aten_fns[k] = packet ? PyObject_GetAttrString(packet, "default") : NULL;
        torch_fns[k] = PyObject_GetAttrString(cap_torch_mod, matmuls[k].torch_name);
        Py_XDECREF(packet);
        ok = aten_fns[k] && torch_fns[k];
    }
    if (ok) state = 1;
    Py_XDECREF(nn);
    Py_XDECREF(torch_ops);
    Py_XDECREF(aten);
    PyErr_Clear();
    return state == 1;
}

/* Operands a matmul kernel takes as eager's call would: tensors of one
 * floating dtype on one device with known sizes. Inside autocast, ts[i]
 * become autocast's casts of them (CONVERT nodes, the autocast dtype
 * guarded), so the kernel, called outside autocast through the C shim,
 * computes what eager's autocast call does. */
static int plain_matmul_operands(Interp *I, Sv **ts, int n) {
    for (int i = 0; i < n; i++)
        if (!ts[i] || ts[i]->kind != SV_TENSOR || !cap_sv_meta(I, ts[i])) return 0;
    if (cap_autocast_cast_operands(I, ts, n) < 0) return 0;
    const WkValue *first = NULL;
    for (int i = 0; i < n; i++) {
        const WkValue *m = cap_sv_meta(I, ts[i]);
        if (!m) return 0;
        if (!first) first = m;
        if (!wk_dtype_is_float(m->dtype) || m->dtype != first->dtype || !same_device(m, first) || !static_sizes(m))
            return 0;
    }
    return 1;
}

/* eager's F.linear of an input of rank >= 2 with a bias is addmm on the
 * input's rows (when they are viewable as a matrix), without one a matmul
 * that folds to mm the same way: the same kernels, called here on matrix
 * views made in the graph. */
static Sv *linear_call(Interp *I, const Args *a) {
    static const char *const names[] = {"input", "weight", "bias", NULL};
    if (!arguments_known(a, 3, names)) return NULL;
    Sv *x = arg_of(a, 0, "input"), *w = arg_of(a, 1, "weight"), *b = arg_of(a, 2, "bias");
    int has_bias = !is_none(b);
    Sv *operands[3] = {x, w, b};
    if (!plain_matmul_operands(I, operands, has_bias ? 3 : 2) || CAP_FAILED(I)) return NULL;
    x = operands[0], w = operands[1], b = has_bias ? operands[2] : b;
    const WkValue *xm = cap_sv_meta(I, x), *wm = cap_sv_meta(I, w), *bm = has_bias ? cap_sv_meta(I, b) : NULL;
    if (xm->ndim < 2 || wm->ndim != 2 || (bm && (bm->ndim != 1 || cap_const_size(bm, 0) != cap_const_size(wm, 0))))
        return NULL;
    int64_t k = cap_const_size(wm, 1), n_out = cap_const_size(wm, 0), rows = 1;
    if (cap_const_size(xm, xm->ndim - 1) != k) return NULL;
    int64_t shape[WK_MAX_DIMS];
    for (int d = 0; d < xm->ndim - 1; d++) {
        shape[d] = cap_const_size(xm, d);
        rows *= shape[d];
    }
    shape[xm->ndim - 1] = n_out;
    int64_t mat[2] = {rows, k};
    int nd = xm->ndim;
    Sv *x2 = nd == 2 ? x : cap_view_as_shape(I, x, 2, mat);
    if (!x2 || CAP_FAILED(I)) return NULL;
    Sv *wt = cap_tensor_transpose_attr(I, w, "T");
    if (!wt || CAP_FAILED(I)) return NULL;
    Sv *ops[3] = {b, x2, wt};
    Sv *r = bm ? cap_extern_call(I, aten_fns[ADDMM], matmuls[ADDMM].aten_name, ops, 3, NULL, NULL, 0)
               : cap_extern_call(I, aten_fns[MM], matmuls[MM].aten_name, ops + 1, 2, NULL, NULL, 0);
    if (!r || nd == 2) return r;
    Sv *out = cap_view_as_shape(I, r, nd, shape);
    if (!out && !CAP_FAILED(I)) cap_unsupported(I, "F.linear(): the matmul's result as %d dims", nd);
    return out;
}

Sv *cap_matmul_call(Interp *I, PyObject *fn, const Args *a) {
    if (!fn || !matmuls_ready()) return NULL;
    if (fn == linear_fn) return linear_call(I, a);
    int k = 0;
    while (k < NMATMUL && fn != torch_fns[k]) k++;
    if (k == NMATMUL || a->npos != matmuls[k].ntensors) return NULL;
    /* torch.addmm's and baddbmm's beta and alpha are the aten op's; out= is not modelled */
    for (int i = 0; i < a->nkw; i++) {
        PyObject *kn = PyTuple_GET_ITEM(a->kwnames, i);
        int scale = (k == ADDMM || k == BADDBMM) && (PyUnicode_CompareWithASCIIString(kn, "beta") == 0 ||
                                   PyUnicode_CompareWithASCIIString(kn, "alpha") == 0);
        if (!scale || a->kw[i]->kind != SV_CONST || !cap_is_number(a->kw[i]->obj)) return NULL;
    }
    Sv *operands[3];
    for (int i = 0; i < a->npos; i++) operands[i] = a->pos[i];
    if (!plain_matmul_operands(I, operands, a->npos) || CAP_FAILED(I)) return NULL;
    return cap_extern_call(I, aten_fns[k], matmuls[k].aten_name, operands, a->npos, a->kwnames, a->kw, a->nkw);
}

/* ---- F.scaled_dot_product_attention -> the fused kernel eager picks ----- */

/* eager's F.scaled_dot_product_attention asks torch._fused_sdp_choice
 * which kernel to run, then calls that kernel's aten op and keeps its first
 * result. So does the graph: the same choice is asked at capture time for
 * the layouts, dtypes and requires_grad the graph's tensors have (on empty
 * tensors of their device: on CUDA the answer depends on the GPU), and the
 * runtime calls the op through the C shim. What eager does around the op is
 * reproduced where it is a no-op or a view, and refused otherwise (the call
 * stays torch's own):
 *   CPU flash: a bool mask becomes 0/-inf of the query's dtype (a WHERE);
 *   CUDA flash: no mask; eager pads a head size that is not a multiple of 8
 *     (refused);
 *   CUDA efficient: a bool mask becomes 0/-inf as on the CPU; the mask is
 *     expanded to (B, H, L, S); eager pads a last size that is not a
 *     multiple of 16 and copies a mask whose leading strides are not
 *     multiples of 16 (both refused); the logsumexp is asked for when
 *     autograd will need it, as eager does;
 *   CUDA cudnn: a mask of the query's dtype as it is, a bool mask made
 *     additive with -65504 where it is False (eager's cudnn form).
 * The choice also reads torch's global backend flags (torch.backends.cuda.
 * enable_*_sdp, sdpa_kernel contexts), which are not guarded: a change of
 * them after capture picks another kernel in eager, which differs by
 * rounding. */
static PyObject *sdpa_fn, *sdpa_choice_fn;                                        /* strong, for the process */
static PyObject *flash_cpu_fn, *flash_cuda_fn, *efficient_fn, *cudnn_attention_fn; /* the aten overloads */
static PyObject *attention_math_fn; /* wick._inlined.attention_math, strong */

static PyObject *aten_overload_New(PyObject *aten, const char *name) {
    PyObject *packet = aten ? PyObject_GetAttrString(aten, name) : NULL;
    PyObject *overload = packet ? PyObject_GetAttrString(packet, "default") : NULL;
    Py_XDECREF(packet);
    PyErr_Clear();
    return overload;
}

static int sdpa_ready(void) {
    static int state;
    if (state || !cap_torch_mod) return state == 1;
    state = -1;
    PyObject *nn = PyImport_ImportModule("torch._C._nn");
    PyObject *meta = nn ? PyImport_ImportModule("wick._capture_meta") : NULL;
    PyObject *torch_ops = meta ? PyObject_GetAttrString(cap_torch_mod, "ops") : NULL;
    PyObject *aten = torch_ops ? PyObject_GetAttrString(torch_ops, "aten") : NULL;
    flash_cpu_fn = aten_overload_New(aten, "_scaled_dot_product_flash_attention_for_cpu");
    flash_cuda_fn = aten_overload_New(aten, "_scaled_dot_product_flash_attention");
    efficient_fn = aten_overload_New(aten, "_scaled_dot_product_efficient_attention");
    cudnn_attention_fn = aten_overload_New(aten, "_scaled_dot_product_cudnn_attention");
    sdpa_fn = flash_cpu_fn && nn ? PyObject_GetAttrString(nn, "scaled_dot_product_attention") : NULL;
    sdpa_choice_fn = sdpa_fn ? PyObject_GetAttrString(meta, "sdpa_backend") : NULL;
    PyObject *inlined = sdpa_choice_fn ? PyImport_ImportModule("wick._inlined") : NULL;
    attention_math_fn = inlined ? PyObject_GetAttrString(inlined, "attention_math") : NULL;
    if (attention_math_fn && PyFunction_Check(attention_math_fn)) state = 1;
    Py_XDECREF(inlined);
    Py_XDECREF(nn);
    Py_XDECREF(meta);
    Py_XDECREF(torch_ops);
    Py_XDECREF(aten);
    PyErr_Clear();
    return state == 1;
}

/* (sizes, strides, dtype, requires_grad) of m in the graph's layout of it;
 * NULL with a Python error */
static PyObject *layout_tuple_Ref(Interp *I, const WkValue *m) {
    PyObject *sizes = PyTuple_New(m->ndim), *strides = PyTuple_New(m->ndim);
    if (!sizes || !strides) {
        Py_XDECREF(sizes);
        Py_XDECREF(strides);
        return NULL;
    }
    int64_t expect = 1;
    for (int d = m->ndim - 1; d >= 0; d--) {
        int64_t size = cap_const_size(m, d), stride = expect;
        if (m->strides[d]) wk_sym_is_const(m->strides[d], &stride);
        expect *= size > 1 ? size : 1;
        PyTuple_SET_ITEM(sizes, d, PyLong_FromLongLong(size));
        PyTuple_SET_ITEM(strides, d, PyLong_FromLongLong(stride));
    }
    int rg = I->grad_enabled && cap_get_rg(I, m->id);
    return Py_BuildValue("(NNOO)", sizes, strides, cap_dtype_objs[m->dtype], rg ? Py_True : Py_False);
}

typedef enum { SDPA_UNKNOWN, SDPA_MATH, SDPA_FLASH, SDPA_EFFICIENT, SDPA_CUDNN } SdpaKernel;

/* the kernel eager's F.scaled_dot_product_attention would run on tensors of
 * these metas (query, key, value, mask or NULL); SDPA_UNKNOWN when the
 * question fails */
static SdpaKernel sdpa_kernel(Interp *I, const WkValue *const *ms, double dropout, int causal, PyObject *scale) {
    PyObject *ts = PyTuple_New(4);
    if (!ts) return PyErr_Clear(), SDPA_UNKNOWN;
    for (int i = 0; i < 4; i++) {
        PyObject *t = ms[i] ? layout_tuple_Ref(I, ms[i]) : Py_NewRef(Py_None);
        if (!t) {
            Py_DECREF(ts);
            PyErr_Clear();
            return SDPA_UNKNOWN;
        }
        PyTuple_SET_ITEM(ts, i, t);
    }
    char device[32] = "cpu";
    if (ms[0]->device.type == WK_DEV_CUDA) snprintf(device, sizeof device, "cuda:%d", ms[0]->device.index);
    PyObject *r = PyObject_CallFunction(sdpa_choice_fn, "NsdOOO", ts, device, dropout, causal ? Py_True : Py_False,
                                        scale, Py_False);
    SdpaKernel k = SDPA_UNKNOWN;
    if (r && PyUnicode_Check(r)) {
        if (PyUnicode_CompareWithASCIIString(r, "math") == 0) k = SDPA_MATH;
        else if (PyUnicode_CompareWithASCIIString(r, "flash") == 0) k = SDPA_FLASH;
        else if (PyUnicode_CompareWithASCIIString(r, "efficient") == 0) k = SDPA_EFFICIENT;
        else if (PyUnicode_CompareWithASCIIString(r, "cudnn") == 0) k = SDPA_CUDNN;
    }
    Py_XDECREF(r);
    PyErr_Clear();
    return k;
}

/* eager's bool mask as an additive one: 0 where True, `masked` where False,
 * in float32 and then the query's dtype (one rounding, as eager's where in
 * that dtype) */
static Sv *additive_mask(Interp *I, const WkValue *mask, WkDType dtype, double masked) {
    PyObject *zero = PyFloat_FromDouble(0.0), *fill = PyFloat_FromDouble(masked);
    int in[3] = {mask->id, zero ? cap_scalar_value(I, zero) : -1, fill ? cap_scalar_value(I, fill) : -1};
    Py_XDECREF(zero);
    Py_XDECREF(fill);
    PyErr_Clear();
    if (in[1] < 0 || in[2] < 0) return NULL;
    Sv *w = try_node(I, WK_OP_WHERE, in, 3, NULL);
    return w ? cap_convert(I, w, dtype) : NULL;
}

/* CUDA efficient attention's bias as eager prepares it: the mask expanded to
 * (B, H, L, S) when that view is what eager passes (a last size that is a
 * multiple of 16, leading strides that are), else NULL (eager pads or
 * copies it: not reproduced) */
static Sv *efficient_bias(Interp *I, Sv *mask, const WkValue *q, const WkValue *k) {
    const WkValue *m = cap_sv_meta(I, mask);
    if (!m || m->ndim < 1 || q->ndim != 4 || k->ndim != 4) return NULL;
    int64_t sizes[4] = {cap_const_size(q, 0), cap_const_size(q, 1), cap_const_size(q, 2), cap_const_size(k, 2)};
    int64_t strides[4];
    if (cap_expanded_strides(I, mask, 4, sizes, strides) < 0) return NULL;
    if (sizes[3] % 16 != 0 || strides[0] % 16 != 0 || strides[1] % 16 != 0 || strides[2] % 16 != 0) return NULL;
    return cap_view_with_layout(I, mask, 4, sizes, strides);
}

static Sv *sdpa_call(Interp *I, const Args *a) {
    static const char *const names[] = {"query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                                        "enable_gqa", NULL};
    if (!arguments_known(a, 8, names)) return NULL;
    Sv *qkv[3] = {arg_of(a, 0, "query"), arg_of(a, 1, "key"), arg_of(a, 2, "value")};
    Sv *mask = arg_of(a, 3, "attn_mask"), *dropout = arg_of(a, 4, "dropout_p"), *causal_sv = arg_of(a, 5, "is_causal"),
       *scale = arg_of(a, 6, "scale"), *gqa = arg_of(a, 7, "enable_gqa");
    int causal = 0, enable_gqa = 0;
    double p = 0.0;
    if (dropout) {
        if (dropout->kind != SV_CONST || !cap_is_number(dropout->obj)) return NULL;
        p = PyFloat_AsDouble(dropout->obj);
        if (PyErr_Occurred()) return PyErr_Clear(), NULL;
    }
    /* dropout draws random numbers, grouped queries are reshaped first: eager's own call */
    if (p != 0.0 || (causal_sv && !const_bool(causal_sv, &causal)) || (gqa && (!const_bool(gqa, &enable_gqa) || enable_gqa)) ||
        (!is_none(scale) && !(scale->kind == SV_CONST && cap_is_number(scale->obj))))
        return NULL;
    if (!plain_matmul_operands(I, qkv, 3) || CAP_FAILED(I)) return NULL;
    const WkValue *ms[4] = {cap_sv_meta(I, qkv[0]), cap_sv_meta(I, qkv[1]), cap_sv_meta(I, qkv[2]), NULL};
    int cuda = ms[0]->device.type == WK_DEV_CUDA;
    if (!is_none(mask)) {
        if (mask->kind == SV_TENSOR && cap_autocast_cast_operands(I, &mask, 1) < 0) return NULL;
        if (mask->kind != SV_TENSOR || !(ms[3] = cap_sv_meta(I, mask)) || !same_device(ms[3], ms[0]) ||
            !static_sizes(ms[3]) || (ms[3]->dtype != WK_BOOL && ms[3]->dtype != ms[0]->dtype))
            return NULL;
    }
    /* the choice reads strides: only where the graph's are eager's */
    for (int i = 0; i < 4; i++)
        if (ms[i] && !cap_layout_is_eagers(I, i < 3 ? qkv[i] : mask)) return NULL;
    SdpaKernel kernel = sdpa_kernel(I, ms, p, causal, is_none(scale) ? Py_None : scale->obj);
    if (kernel == SDPA_MATH) {
        /* eager's math kernel is a composite: its ops, inlined (wick/_inlined.py) */
        Sv *pos[7] = {qkv[0], qkv[1], qkv[2], ms[3] ? mask : sv_const(I, Py_None), sv_const(I, causal ? Py_True : Py_False),
                      is_none(scale) ? sv_const(I, Py_None) : scale,
                      sv_const_Steal(I, PyUnicode_FromString(cuda ? "cuda" : "cpu"))};
        if (!pos[6]) return cap_py_failed(I, "attention"), NULL;
        Args math = {pos, 7, NULL, NULL, 0};
        return cap_inline_call(I, (PyFunctionObject *)attention_math_fn, &math);
    }
    Sv *bias = NULL;
    /* CUDA flash takes no mask */
    if ((!cuda && kernel != SDPA_FLASH) || (cuda && ms[3] && kernel == SDPA_FLASH)) return NULL;
    if (ms[3] && ms[3]->dtype == WK_BOOL) {
        /* eager's cudnn path fills with -65504, not -inf (a cuDNN workaround) */
        if (!(bias = additive_mask(I, ms[3], ms[0]->dtype, kernel == SDPA_CUDNN ? -65504.0 : -Py_HUGE_VAL)))
            return NULL;
    } else if (ms[3]) {
        bias = mask;
    }
    PyObject *fn;
    const char *aten;
    Sv *pos[8], *kw[2];
    const char *kwname[2];
    int npos = 0, nkw = 0;
    pos[npos++] = qkv[0];
    pos[npos++] = qkv[1];
    pos[npos++] = qkv[2];
    if (!cuda) {
        fn = flash_cpu_fn, aten = "aten._scaled_dot_product_flash_attention_for_cpu.default";
        pos[npos++] = sv_const_Steal(I, PyFloat_FromDouble(0.0));
        pos[npos++] = sv_const(I, causal ? Py_True : Py_False);
        if (bias) kw[nkw] = bias, kwname[nkw++] = "attn_mask";
    } else if (kernel == SDPA_FLASH) {
        /* eager pads a head size that is not a multiple of 8 */
        if (cap_const_size(ms[0], ms[0]->ndim - 1) % 8 || cap_const_size(ms[2], ms[2]->ndim - 1) % 8) return NULL;
        fn = flash_cuda_fn, aten = "aten._scaled_dot_product_flash_attention.default";
        pos[npos++] = sv_const_Steal(I, PyFloat_FromDouble(0.0));
        pos[npos++] = sv_const(I, causal ? Py_True : Py_False);
        pos[npos++] = sv_const(I, Py_False); /* return_debug_mask */
    } else if (kernel == SDPA_EFFICIENT || kernel == SDPA_CUDNN) {
        if (bias && kernel == SDPA_EFFICIENT && !(bias = efficient_bias(I, bias, ms[0], ms[1]))) return NULL;
        /* eager asks for the logsumexp when autograd will need it */
        int lse = 0;
        for (int i = 0; i < 3; i++) lse |= I->grad_enabled && cap_get_rg(I, ms[i]->id);
        int cudnn = kernel == SDPA_CUDNN;
        fn = cudnn ? cudnn_attention_fn : efficient_fn;
        aten = cudnn ? "aten._scaled_dot_product_cudnn_attention.default"
                     : "aten._scaled_dot_product_efficient_attention.default";
        pos[npos++] = bias ? bias : sv_const(I, Py_None);
        pos[npos++] = sv_const(I, lse ? Py_True : Py_False);
        pos[npos++] = sv_const_Steal(I, PyFloat_FromDouble(0.0));
        pos[npos++] = sv_const(I, causal ? Py_True : Py_False);
        if (cudnn) pos[npos++] = sv_const(I, Py_False); /* return_debug_mask */
    } else {
        return NULL;
    }
    if (!fn) return NULL;
    for (int i = 3; i < npos; i++)
        if (!pos[i]) return NULL;
    if (!is_none(scale)) kw[nkw] = scale, kwname[nkw++] = "scale";
    PyObject *kwnames = nkw ? PyTuple_New(nkw) : NULL;
    if (nkw && !kwnames) return cap_py_failed(I, "attention"), NULL;
    for (int i = 0; i < nkw; i++) {
        PyObject *n = PyUnicode_FromString(kwname[i]);
        if (!n) {
            Py_DECREF(kwnames);
            return cap_py_failed(I, "attention"), NULL;
        }
        PyTuple_SET_ITEM(kwnames, i, n);
    }
    /* these ops return ints or unused tensors beside the output: the node is item 0 alone */
    Sv *r = cap_extern_call_first(I, fn, aten, pos, npos, kwnames, kw, nkw);
    Py_XDECREF(kwnames);
    return r;
}

Sv *cap_attention_call(Interp *I, PyObject *fn, const Args *a) {
    if (!fn || !sdpa_ready() || fn != sdpa_fn) return NULL;
    return sdpa_call(I, a);
}
