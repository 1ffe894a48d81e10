/* vals/torchfn.c — calls of torch functions and tensor methods that map to
 * a row of the op table: arguments bound against the row's signature
 * ("input, other, *, alpha=1"), attributes read from constants, one graph
 * node (or a few: alpha, dtype=) added. */
#include <string.h>

#include "../interp.h"

static int bind(Interp *I, WkOp op, const Args *a, Sv **out, unsigned *given, const char *fname) {
    const CapSig *sig = &cap_sigs[op];
    int np = 0;
    for (int i = 0; i < sig->n; i++) out[i] = NULL;
    for (int i = 0; i < sig->n && !sig->p[i].kwonly; i++) np++;
    if (a->npos > np) return cap_unsupported(I, "%s() takes %d positional arguments but %d were given", fname, np, a->npos);
    for (int i = 0; i < a->npos; i++) out[i] = a->pos[i];
    for (int k = 0; k < a->nkw; k++) {
        const char *kn = PyUnicode_AsUTF8(PyTuple_GET_ITEM(a->kwnames, k));
        if (!kn) return cap_py_failed(I, "keyword name");
        int found = -1;
        for (int i = 0; i < sig->n; i++)
            if (strcmp(sig->p[i].name, kn) == 0) found = i;
        /* the NumPy spellings torch's argument parser also takes */
        static const char *const aliases[][2] = {{"axis", "dim"}, {"keepdims", "keepdim"}, {"x", "input"},
                                                  {"a", "input"}, {"x1", "input"}, {"x2", "other"}};
        for (size_t j = 0; found < 0 && j < sizeof aliases / sizeof aliases[0]; j++)
            if (strcmp(kn, aliases[j][0]) == 0)
                for (int i = 0; i < sig->n; i++)
                    if (strcmp(sig->p[i].name, aliases[j][1]) == 0) found = i;
        if (found < 0) {
            /* F.relu(x, inplace=False) computes what relu(x) does */
            if (strcmp(kn, "inplace") == 0 && a->kw[k]->kind == SV_CONST && a->kw[k]->obj == Py_False)
                continue;
            return cap_unsupported(I, "%s() got an unexpected keyword argument '%s'", fname, kn);
        }
        if (out[found]) return cap_unsupported(I, "%s() got multiple values for argument '%s'", fname, kn);
        out[found] = a->kw[k];
    }
    *given = 0;
    for (int i = 0; i < sig->n; i++) {
        if (out[i]) {
            *given |= 1u << i;
            continue;
        }
        if (!sig->p[i].has_default)
            return cap_unsupported(I, "%s() missing required argument '%s'", fname, sig->p[i].name);
        PyObject *d = cap_default_value_Ref(sig->p[i].dflt);
        if (!d) return cap_py_failed(I, "default value");
        out[i] = sv_const_Steal(I, d);
    }
    return 0;
}

/* dim argument: None / int / tuple or list of ints. */
static int read_dims(Interp *I, Sv *s, WkAttrs *at, const char *fname) {
    at->ndims = 0;
    if (s->kind == SV_CONST && s->obj == Py_None) return 0;
    if (s->kind == SV_CONST && PyLong_CheckExact(s->obj)) {
        at->dims[0] = (int)PyLong_AsLong(s->obj);
        at->ndims = 1;
        return PyErr_Occurred() ? cap_py_failed(I, "dim") : 0;
    }
    Py_ssize_t n;
    if (s->kind == SV_CONST && PyTuple_Check(s->obj)) n = PyTuple_GET_SIZE(s->obj);
    else if (s->kind == SV_TUPLE || s->kind == SV_LIST) n = s->items.len;
    else return cap_unsupported(I, "%s(): dim of type %s", fname, sv_desc(s));
    if (n > WK_MAX_DIMS) return cap_unsupported(I, "%s(): too many dims", fname);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o;
        if (s->kind == SV_CONST) o = PyTuple_GET_ITEM(s->obj, i);
        else if (s->items.data[i]->kind == SV_CONST) o = s->items.data[i]->obj;
        else return cap_unsupported(I, "%s(): dim entries must be ints", fname);
        if (!PyLong_CheckExact(o)) return cap_unsupported(I, "%s(): dim entries must be ints", fname);
        at->dims[i] = (int)PyLong_AsLong(o);
        if (PyErr_Occurred()) return cap_py_failed(I, "dim");
    }
    at->ndims = (int)n;
    return 0;
}

static int read_dtype(Interp *I, Sv *s, int *dt, const char *fname) {
    if (s->kind == SV_CONST && s->obj == Py_None) {
        *dt = -1;
        return 0;
    }
    int d = s->kind == SV_CONST ? cap_dtype_of_obj(s->obj) : -1;
    if (d < 0) return cap_unsupported(I, "%s(): unsupported dtype argument (%s)", fname, sv_desc(s));
    *dt = d;
    return 0;
}

static int is_one(PyObject *o) {
    if (PyLong_CheckExact(o)) return PyLong_AsLong(o) == 1 && !PyErr_Occurred();
    if (PyFloat_CheckExact(o)) return PyFloat_AS_DOUBLE(o) == 1.0;
    return 0;
}

/* ATen's fp32_set_opt_dtype policy on CUDA (sum, softmax, log_softmax,
 * prod without dtype=): inside autocast, a 16-bit or float32 floating first
 * argument on CUDA runs with dtype=torch.float32. 1 when that applies to x,
 * 0 when not, -1 on failure. */
static int autocast_opt_dtype_fp32(Interp *I, Sv *x) {
    if (x->kind != SV_TENSOR) return 0;
    const WkValue *m = cap_sv_meta(I, x);
    if (!m) return -1;
    if (m->device.type != WK_DEV_CUDA || !wk_dtype_is_float(m->dtype) || m->dtype == WK_F64) return 0;
    int dt = cap_autocast_dtype(I, WK_DEV_CUDA);
    if (dt == -2) return cap_py_failed(I, "autocast state");
    return dt >= 0;
}

static Sv *extern_of(Interp *I, PyObject *fn, const char *fname, const Args *a, const char *what) {
    if (fn) return cap_extern_call(I, fn, fname, a->pos, a->npos, a->kwnames, a->kw, a->nkw);
    return cap_unsupported(I, "%s(): %s is not supported", fname, what), NULL;
}

/* F.layer_norm(input, normalized_shape, weight, bias, eps): a LAYER_NORM
 * node when the shapes are the ones eager accepts and weight/bias (when
 * given) are tensors of input's dtype and device, or (eager's mixed-dtype
 * CPU kernel, BERT's head under CPU autocast) a 16-bit input with float32
 * weight/bias on the CPU: that kernel normalises the input widened to
 * float32 and rounds its float32 result once to the input's dtype, as the
 * node's lowering does (16-bit nodes compute in float32; the float32
 * parameters are read as they are). Else an extern. */
static Sv *layer_norm_call(Interp *I, Sv **b, const char *fname, const Args *a, PyObject *fn) {
    if (b[0]->kind != SV_TENSOR) return extern_of(I, fn, fname, a, "a non-tensor input");
    const WkValue *x = cap_sv_meta(I, b[0]);
    if (!x) return NULL;
    /* inside autocast on CUDA, layer_norm runs in float32 on float32 copies
     * of input, weight and bias (fp32 policy): so does the native node */
    if (cap_autocast_fp32_op(WK_OP_LAYER_NORM, x->device.type)) {
        static const int tensors[] = {0, 2, 3};
        for (int i = 0; i < 3; i++)
            if (!(b[tensors[i]] = cap_autocast_to_fp32(I, b[tensors[i]]))) return NULL;
        if (!(x = cap_sv_meta(I, b[0]))) return NULL;
    }
    WkAttrs at = {0};
    /* normalized_shape: an int or a constant sequence of ints (held in at.dims for now) */
    PyObject *shape = b[1]->kind == SV_CONST ? b[1]->obj : NULL;
    int ok = 1;
    if (shape && PyLong_CheckExact(shape)) {
        at.dims[at.ndims++] = (int)PyLong_AsLong(shape);
    } else if (shape && (PyTuple_Check(shape) || PyList_Check(shape)) && PySequence_Fast_GET_SIZE(shape) <= WK_MAX_DIMS) {
        for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(shape); i++) {
            PyObject *o = PySequence_Fast_GET_ITEM(shape, i);
            ok = PyLong_CheckExact(o);
            if (ok) at.dims[at.ndims++] = (int)PyLong_AsLong(o);
        }
    } else if ((b[1]->kind == SV_TUPLE || b[1]->kind == SV_LIST) && b[1]->items.len <= WK_MAX_DIMS) {
        for (int i = 0; ok && i < b[1]->items.len; i++) {
            Sv *o = b[1]->items.data[i];
            ok = o->kind == SV_CONST && PyLong_CheckExact(o->obj);
            if (ok) at.dims[at.ndims++] = (int)PyLong_AsLong(o->obj);
        }
    } else {
        ok = 0;
    }
    if (PyErr_Occurred()) return cap_py_failed(I, "normalized_shape"), NULL;
    int k = at.ndims;
    ok = ok && k >= 1 && k <= x->ndim && b[4]->kind == SV_CONST &&
             (PyFloat_CheckExact(b[4]->obj) || PyLong_CheckExact(b[4]->obj));
    for (int i = 0; ok && i < k; i++) ok = at.dims[i] == cap_const_size(x, x->ndim - k + i) &&
                                           wk_sym_is_const(x->sizes[x->ndim - k + i], NULL);
    int in[3];
    in[0] = x->id;
    /* the given parameters' dtype: input's, or float32 for the mixed CPU
     * kernel, which takes only float32 parameters (eager raises for a mix
     * of the two; so does the extern) */
    int param_dt = x->dtype;
    for (int p = 0; p < 2; p++) {
        const WkValue *w = b[2 + p]->kind == SV_TENSOR ? cap_sv_meta(I, b[2 + p]) : NULL;
        if (w && w->dtype == WK_F32 && (x->dtype == WK_BF16 || x->dtype == WK_F16) && x->device.type == WK_DEV_CPU)
            param_dt = WK_F32;
    }
    for (int p = 0; ok && p < 2; p++) {
        Sv *s = b[2 + p];
        if (s->kind == SV_CONST && s->obj == Py_None) {
            /* absent: a Python 1 (weight) or 0 (bias), as ops.def note 7 says */
            in[1 + p] = wk_graph_scalar(I->g, WK_F64, p ? 0.0 : 1.0, 0);
            if (in[1 + p] < 0) return cap_graph_failed(I, "scalar"), NULL;
            continue;
        }
        const WkValue *w = s->kind == SV_TENSOR ? cap_sv_meta(I, s) : NULL;
        ok = w && w->ndim == k && (int)w->dtype == param_dt && w->device.type == x->device.type &&
             w->device.index == x->device.index;
        for (int i = 0; ok && i < k; i++) ok = wk_sym_is_const(w->sizes[i], NULL) && cap_const_size(w, i) == at.dims[i];
        if (ok) in[1 + p] = w->id;
    }
    if (!ok) return extern_of(I, fn, fname, a, "these arguments");
    for (int i = 0; i < k; i++) at.dims[i] = x->ndim - k + i;
    at.fvalue = PyFloat_Check(b[4]->obj) ? PyFloat_AS_DOUBLE(b[4]->obj) : (double)PyLong_AsLongLong(b[4]->obj);
    return cap_graph_op(I, WK_OP_LAYER_NORM, in, 3, &at);
}

/* How eager lays out the result of a call of a pointwise row's torch
 * callables (checked against eager: tests/capture/test_capture_layouts.py) */
static CapLaid eager_layout_rule(WkOp op) {
    switch (op) {
    case WK_OP_MASKED_FILL: return CAP_LAID_CONTIGUOUS; /* a contiguous clone, filled */
    /* the numbers these take are Scalar arguments, not iterator operands */
    case WK_OP_POW:
    case WK_OP_CLAMP:
    case WK_OP_CLAMP_MIN:
    case WK_OP_CLAMP_MAX:
    case WK_OP_LERP:
    case WK_OP_SOFTPLUS:
    case WK_OP_HARDTANH:
    case WK_OP_LEAKY_RELU:
    case WK_OP_ELU: return CAP_LAID_POINTWISE_UNARY;
    default: return CAP_LAID_POINTWISE;
    }
}

/* A call of op with bound arguments. `method` is set when called as a
 * tensor method (input is self). `fn` (borrowed) is the torch callable the
 * call names: arguments this op's capture rule does not model make the call
 * an extern node of fn instead of a native node. */
static Sv *call_op(Interp *I, WkOp op, const Args *a, const char *fname, int method, PyObject *fn);

/* The number of positional parameters of op's signature. */
static int positional_params(WkOp op) {
    const CapSig *sig = &cap_sigs[op];
    int np = 0;
    for (int i = 0; i < sig->n && !sig->p[i].kwonly; i++) np++;
    return np;
}

/* nn.Hardswish and its kin pass inplace positionally, F.hardswish(x,
 * self.inplace): when fn's own next positional parameter is `inplace`,
 * the one extra positional argument is that keyword. 1 when *out was made
 * (out_kw/out_names hold its keywords; names owned by the caller). */
static int inplace_by_position(WkOp op, const Args *a, PyObject *fn, Args *out, Sv **out_kw, PyObject **out_names) {
    int np = positional_params(op);
    if (!fn || !PyFunction_Check(fn) || a->npos != np + 1 || a->nkw + 1 > CAP_MAX_PARAMS) return 0;
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fn);
    PyObject *names = co->co_argcount > np ? PyObject_GetAttrString((PyObject *)co, "co_varnames") : NULL;
    int is_inplace = names && PyTuple_Check(names) && PyTuple_GET_SIZE(names) > np &&
                     PyUnicode_Check(PyTuple_GET_ITEM(names, np)) &&
                     PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(names, np), "inplace") == 0;
    Py_XDECREF(names);
    PyErr_Clear();
    if (!is_inplace) return 0;
    PyObject *kwn = PyTuple_New(a->nkw + 1);
    PyObject *s_inplace = kwn ? PyUnicode_InternFromString("inplace") : NULL;
    if (!s_inplace) {
        Py_XDECREF(kwn);
        PyErr_Clear();
        return 0;
    }
    for (int k = 0; k < a->nkw; k++) {
        out_kw[k] = a->kw[k];
        PyTuple_SET_ITEM(kwn, k, Py_NewRef(PyTuple_GET_ITEM(a->kwnames, k)));
    }
    out_kw[a->nkw] = a->pos[np];
    PyTuple_SET_ITEM(kwn, a->nkw, s_inplace);
    *out = (Args){a->pos, np, kwn, out_kw, a->nkw + 1};
    *out_names = kwn;
    return 1;
}

static Sv *cap_call_op_kw(Interp *I, WkOp op, const Args *a, const char *fname, int method, PyObject *fn);

Sv *cap_call_op(Interp *I, WkOp op, const Args *a, const char *fname, int method, PyObject *fn) {
    Args moved;
    Sv *kw[CAP_MAX_PARAMS];
    PyObject *names = NULL;
    if (method || !inplace_by_position(op, a, fn, &moved, kw, &names)) return cap_call_op_kw(I, op, a, fname, method, fn);
    Sv *r = cap_call_op_kw(I, op, &moved, fname, method, fn);
    Py_DECREF(names);
    return r;
}

/* *out: a without its keyword k. rounding_mode and inplace=True choose
 * what is computed but are no parameter of the row that computes it, so
 * the row is bound without them. The Svs are borrowed (the Interp owns
 * them) into kw (CAP_MAX_PARAMS entries); out->kwnames is a new tuple the
 * caller releases once done with *out. 0, or -1 with the reason recorded. */
static int args_without_kw(Interp *I, const Args *a, int k, const char *fname, Sv **kw, Args *out) {
    if (a->nkw > CAP_MAX_PARAMS) return cap_unsupported(I, "%s(): too many keyword arguments", fname);
    PyObject *names = PyTuple_New(a->nkw - 1);
    if (!names) return cap_py_failed(I, "keyword names");
    for (int i = 0, j = 0; i < a->nkw; i++)
        if (i != k) {
            kw[j] = a->kw[i];
            PyTuple_SET_ITEM(names, j++, Py_NewRef(PyTuple_GET_ITEM(a->kwnames, i)));
        }
    *out = (Args){a->pos, a->npos, names, kw, a->nkw - 1};
    return 0;
}

/* Is operand s floating (a float tensor, or a Python float)? */
static int floating_operand(Interp *I, Sv *s) {
    if (s->kind == SV_CONST) return PyFloat_Check(s->obj);
    const WkValue *m = s->kind == SV_TENSOR ? cap_sv_meta(I, s) : NULL;
    return m && wk_dtype_is_float(m->dtype);
}

/* torch.div / Tensor.div with rounding_mode (keyword `at` of a): None is
 * plain division, "floor" the floor_divide row (what torch.floor_divide
 * computes), "trunc" division then trunc where an operand is floating (an
 * integer one would need integer division: refused, as is any other mode,
 * which eager then reports). No extern fallback: it would drop the mode. */
static Sv *div_rounding(Interp *I, const Args *a, int at, const char *fname, int method) {
    Sv *mode = a->kw[at];
    const char *m = NULL;
    if (mode->kind == SV_CONST && PyUnicode_Check(mode->obj)) m = PyUnicode_AsUTF8(mode->obj);
    else if (!(mode->kind == SV_CONST && mode->obj == Py_None)) return cap_unsupported(I, "%s(): rounding_mode of type %s", fname, sv_desc(mode)), NULL;
    if (m && strcmp(m, "floor") != 0 && strcmp(m, "trunc") != 0) return cap_unsupported(I, "%s(): rounding_mode '%s'", fname, m), NULL;
    Sv *kw[CAP_MAX_PARAMS];
    Args plain;
    if (args_without_kw(I, a, at, fname, kw, &plain) < 0) return NULL;
    int floating = 0;
    for (int i = 0; i < plain.npos; i++) floating |= floating_operand(I, plain.pos[i]);
    for (int k = 0; k < plain.nkw; k++) floating |= floating_operand(I, plain.kw[k]);
    Sv *r = NULL;
    if (!m) r = call_op(I, WK_OP_DIV, &plain, fname, method, NULL);
    else if (!strcmp(m, "floor")) r = call_op(I, WK_OP_FLOOR_DIVIDE, &plain, fname, method, NULL);
    else if (!floating) cap_unsupported(I, "%s(): rounding_mode 'trunc' on integers", fname);
    else if ((r = call_op(I, WK_OP_DIV, &plain, fname, method, NULL)) != NULL) {
        Sv *one[1] = {r};
        Args t = {one, 1, NULL, NULL, 0};
        r = call_op(I, WK_OP_TRUNC, &t, fname, 0, NULL);
    }
    Py_DECREF(plain.kwnames);
    return r;
}

/* F.relu(x, inplace=True) and the like: the op without the keyword, then x
 * takes the result in place (cap_inplace_update's rules). */
/* torch.clamp(x, max=m) and the like, one bound given (the other absent or
 * None): the clamp_min or clamp_max row. NULL without a reason otherwise. */
static Sv *clamp_one_bound(Interp *I, const Args *a, const char *fname, int method) {
    Sv *bound[2] = {a->npos > 1 ? a->pos[1] : NULL, a->npos > 2 ? a->pos[2] : NULL};
    if (a->npos < 1 || a->npos > 3) return NULL;
    for (int k = 0; k < a->nkw; k++) {
        const char *kn = PyUnicode_AsUTF8(PyTuple_GET_ITEM(a->kwnames, k));
        if (!kn) return cap_py_failed(I, "keyword name"), NULL;
        int which = strcmp(kn, "min") == 0 ? 0 : strcmp(kn, "max") == 0 ? 1 : -1;
        if (which < 0 || bound[which]) return NULL;
        bound[which] = a->kw[k];
    }
    for (int k = 0; k < 2; k++)
        if (bound[k] && bound[k]->kind == SV_CONST && bound[k]->obj == Py_None) bound[k] = NULL;
    if (!bound[0] == !bound[1]) return NULL; /* both (the clamp row) or neither (eager raises) */
    Sv *pos[2] = {a->pos[0], bound[0] ? bound[0] : bound[1]};
    Args one = {pos, 2, NULL, NULL, 0};
    /* no extern of the clamp_min/clamp_max row: fn is torch.clamp, whose
     * second positional argument is always min */
    return call_op(I, bound[0] ? WK_OP_CLAMP_MIN : WK_OP_CLAMP_MAX, &one, fname, method, NULL);
}

static Sv *cap_call_op_kw(Interp *I, WkOp op, const Args *a, const char *fname, int method, PyObject *fn) {
    if (op == WK_OP_CLAMP) {
        Sv *r = clamp_one_bound(I, a, fname, method);
        if (r || CAP_FAILED(I)) return r;
    }
    if (op == WK_OP_DIV)
        for (int k = 0; k < a->nkw; k++) {
            const char *kn = PyUnicode_AsUTF8(PyTuple_GET_ITEM(a->kwnames, k));
            if (!kn) return cap_py_failed(I, "keyword name"), NULL;
            if (strcmp(kn, "rounding_mode") == 0) return div_rounding(I, a, k, fname, method);
        }
    int at = -1;
    for (int k = 0; k < a->nkw && at < 0; k++) {
        const char *kn = PyUnicode_AsUTF8(PyTuple_GET_ITEM(a->kwnames, k));
        if (!kn) return cap_py_failed(I, "keyword name"), NULL;
        if (strcmp(kn, "inplace") == 0 && a->kw[k]->kind == SV_CONST && a->kw[k]->obj == Py_True) at = k;
    }
    if (at < 0 || method || a->npos < 1) return call_op(I, op, a, fname, method, fn);
    Sv *kw[CAP_MAX_PARAMS];
    Args plain;
    if (args_without_kw(I, a, at, fname, kw, &plain) < 0) return NULL;
    Sv *r = call_op(I, op, &plain, fname, method, NULL); /* no extern: the in-place form would be lost */
    Py_DECREF(plain.kwnames);
    if (!r) return NULL;
    char what[80];
    snprintf(what, sizeof what, "%s(inplace=True)", fname);
    return cap_inplace_update(I, a->pos[0], r, what);
}

static Sv *call_op(Interp *I, WkOp op, const Args *a, const char *fname, int method, PyObject *fn) {
    const WkOpInfo *info = wk_op_info(op);
    Sv *b[CAP_MAX_PARAMS];
    unsigned given = 0;
    if (op == WK_OP_VIEW) return cap_view_call(I, a, fname, fn); /* each view op binds its own arguments */
    if (op == WK_OP_CAT || op == WK_OP_PAD || op == WK_OP_INDEX || op == WK_OP_ARANGE || op == WK_OP_FULL)
        return cap_structural_call(I, op, a, fname, fn); /* so do these */
    if (bind(I, op, a, b, &given, fname) < 0) return NULL;
    if (op == WK_OP_LAYER_NORM) return layer_norm_call(I, b, fname, a, fn);
    const CapSig *sig = &cap_sigs[op];
    int in[CAP_MAX_PARAMS];
    int any_tensor = 0;
    for (int i = 0; i < info->arity; i++) {
        Sv *s = b[i];
        /* torch functions take Python numbers only where a Scalar overload exists */
        int may_be_number = !(i == 0 && op != WK_OP_POW && !method && strcmp(sig->p[i].name, "input") == 0) &&
                            strcmp(sig->p[i].name, "condition") != 0 && op != WK_OP_MAXIMUM &&
                            op != WK_OP_MINIMUM;
        if (s->kind != SV_TENSOR && !may_be_number)
            return cap_unsupported(I, "%s(): argument '%s' must be a Tensor, not %s", fname, sig->p[i].name,
                               sv_desc(s)),
                   NULL;
        any_tensor |= s->kind == SV_TENSOR;
        in[i] = cap_operand_value(I, s, sig->p[i].name);
        if (in[i] < 0) return NULL;
    }
    if (!any_tensor) return cap_unsupported(I, "%s() without a tensor argument", fname), NULL;
    WkAttrs at = {0};
    switch (op) {
    case WK_OP_ADD:
    case WK_OP_SUB: {
        Sv *alpha = b[2];
        if (alpha->kind != SV_CONST || !(PyLong_CheckExact(alpha->obj) || PyFloat_CheckExact(alpha->obj)))
            return cap_unsupported(I, "%s(): alpha of type %s", fname, sv_desc(alpha)), NULL;
        if (!is_one(alpha->obj)) {
            const WkValue *x = wk_graph_value(I->g, in[0]), *y = wk_graph_value(I->g, in[1]);
            if (PyFloat_CheckExact(alpha->obj) && !wk_dtype_is_float(x->dtype) && !wk_dtype_is_float(y->dtype))
                return cap_unsupported(I, "%s(): float alpha with integral inputs", fname), NULL;
            /* torch computes other*alpha in the result dtype of (input, other):
             * the plain op gives that dtype and torch's errors (bool - bool);
             * the node itself is dead and gets no kernel. */
            Sv *plain = cap_graph_op(I, op, in, 2, NULL);
            if (!plain) return NULL;
            WkDType result = wk_graph_value(I->g, plain->value)->dtype;
            int sc = cap_scalar_value(I, alpha->obj);
            if (sc < 0) return NULL;
            int mi[2] = {in[1], sc};
            Sv *scaled = cap_graph_op(I, WK_OP_MUL, mi, 2, NULL);
            if (!scaled) return NULL;
            if (wk_graph_value(I->g, scaled->value)->dtype != result) {
                scaled = cap_convert(I, scaled, (int)result);
                if (!scaled) return NULL;
            }
            int read[2] = {in[0], in[1]}; /* x + y * alpha: eager's iterator reads x and y */
            in[1] = scaled->value;
            Sv *r = cap_graph_op(I, op, in, 2, NULL);
            if (!r) return NULL;
            Sv *laid = cap_eager_laid_pointwise_of(I, r, read, 2);
            return laid || CAP_FAILED(I) ? laid : r;
        }
        return cap_laid_or_raw(I, cap_graph_op(I, op, in, 2, NULL), CAP_LAID_POINTWISE);
    }
    case WK_OP_CONVERT: {
        int dt;
        if (read_dtype(I, b[1], &dt, fname) < 0) return NULL;
        if (dt < 0) return cap_unsupported(I, "%s(): dtype=None", fname), NULL;
        return cap_user_convert(I, b[0], dt);
    }
    case WK_OP_SUM:
    case WK_OP_MEAN:
    case WK_OP_AMAX: {
        if (b[0]->kind != SV_TENSOR) return cap_unsupported(I, "%s() of a %s", fname, sv_desc(b[0])), NULL;
        /* torch has no sum(keepdim=) overload without dim: it raises */
        if ((given & 4u) && !(given & 2u) && op != WK_OP_AMAX)
            return cap_unsupported(I, "%s(): keepdim without dim", fname), NULL;
        if (read_dims(I, b[1], &at, fname) < 0) return NULL;
        if (b[2]->kind != SV_CONST || !PyBool_Check(b[2]->obj))
            return cap_unsupported(I, "%s(): keepdim must be a bool", fname), NULL;
        at.keepdim = b[2]->obj == Py_True;
        if (op != WK_OP_AMAX) {
            int dt;
            if (read_dtype(I, b[3], &dt, fname) < 0) return NULL;
            if (dt < 0 && op == WK_OP_SUM) {
                int f = autocast_opt_dtype_fp32(I, b[0]);
                if (f < 0) return NULL;
                if (f) dt = WK_F32;
            }
            if (dt >= 0) {
                at.dtype = (WkDType)dt;
                at.has_dtype = 1;
            }
        }
        /* sum/mean(dtype=...) cast their input first, as torch does */
        if (at.has_dtype) {
            Sv *c = cap_convert(I, b[0], at.dtype);
            if (!c) return NULL;
            in[0] = c->value;
        }
        return cap_graph_op(I, op, in, 1, &at);
    }
    case WK_OP_SOFTMAX:
    case WK_OP_LOG_SOFTMAX: {
        /* dim: one int; dtype=: the input is cast first, as eager does */
        int dt = -1;
        if (b[0]->kind != SV_TENSOR || b[1]->kind != SV_CONST || !PyLong_CheckExact(b[1]->obj) ||
            b[2]->kind != SV_CONST || (b[2]->obj != Py_None && cap_dtype_of_obj(b[2]->obj) < 0))
            return extern_of(I, fn, fname, a, "dim or dtype");
        if (read_dims(I, b[1], &at, fname) < 0 || read_dtype(I, b[2], &dt, fname) < 0) return NULL;
        if (dt < 0) {
            int f = autocast_opt_dtype_fp32(I, b[0]);
            if (f < 0) return NULL;
            if (f) dt = WK_F32;
        }
        if (dt >= 0) {
            Sv *c = cap_convert(I, b[0], dt);
            if (!c) return NULL;
            in[0] = c->value;
        }
        return cap_graph_op(I, op, in, 1, &at);
    }
    case WK_OP_VAR:
    case WK_OP_STD: {
        /* dim, correction (a number), keepdim; torch.var_mean adds the MEAN
         * over the same dims and returns (var, mean) */
        PyObject *corr = b[2]->kind == SV_CONST ? b[2]->obj : NULL;
        if (b[0]->kind != SV_TENSOR || !corr || !(PyLong_CheckExact(corr) || PyFloat_CheckExact(corr)) ||
            b[3]->kind != SV_CONST || !PyBool_Check(b[3]->obj))
            return extern_of(I, fn, fname, a, "correction or keepdim");
        if (read_dims(I, b[1], &at, fname) < 0) return NULL;
        at.keepdim = b[3]->obj == Py_True;
        at.fvalue = PyFloat_Check(corr) ? PyFloat_AS_DOUBLE(corr) : (double)PyLong_AsLongLong(corr);
        at.ivalue = 1; /* the correction is given (graph.h) */
        if (PyErr_Occurred()) return cap_py_failed(I, "correction"), NULL;
        Sv *var = cap_graph_op(I, op, in, 1, &at);
        const char *tail = strrchr(fname, '.');
        if (!var || !tail || strcmp(tail, ".var_mean") != 0) return var;
        WkAttrs mat = {0};
        mat.ndims = at.ndims;
        memcpy(mat.dims, at.dims, sizeof mat.dims);
        mat.keepdim = at.keepdim;
        Sv *mean = cap_graph_op(I, WK_OP_MEAN, in, 1, &mat);
        if (!mean) return NULL;
        Sv *pair[2] = {var, mean};
        return sv_seq(I, SV_TUPLE, pair, 2);
    }
    case WK_OP_GELU: {
        const char *approx = b[1]->kind == SV_CONST && PyUnicode_Check(b[1]->obj) ? PyUnicode_AsUTF8(b[1]->obj) : NULL;
        if (approx && strcmp(approx, "none") == 0)
            return cap_laid_or_raw(I, cap_graph_op(I, WK_OP_GELU, in, 1, NULL), CAP_LAID_POINTWISE);
        if (approx && strcmp(approx, "tanh") == 0)
            return cap_laid_or_raw(I, cap_graph_op(I, WK_OP_GELU_TANH, in, 1, NULL), CAP_LAID_POINTWISE);
        PyErr_Clear();
        return extern_of(I, fn, fname, a, "approximate");
    }
    default:
        /* parameters past the tensor operands carry attributes this op
         * table row has no capture rule for: refuse rather than drop them */
        for (int i = info->arity; i < sig->n; i++)
            if (given & (1u << i)) {
                if (fn) return cap_extern_call(I, fn, fname, a->pos, a->npos, a->kwnames, a->kw, a->nkw);
                return cap_unsupported(I, "%s(): argument '%s' is not supported", fname, sig->p[i].name), NULL;
            }
        Sv *r = cap_graph_op(I, op, in, info->arity, NULL);
        if (info->kind != WK_KIND_POINTWISE || info->shape != WK_SHAPE_BROADCAST) return r;
        return cap_laid_or_raw(I, r, eager_layout_rule(op));
    }
}
