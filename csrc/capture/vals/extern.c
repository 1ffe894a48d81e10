/* vals/extern.c — torch calls outside the op table as EXTERN graph nodes.
 *
 * Any torch function, tensor method, torch.nn.functional function, tensor
 * operator or tensor subscript that capture does not lower natively enters
 * the graph as an extern node: the runtime calls PyTorch with a call
 * template (wick._C.ExternInput(i) where tensor input i goes, constants
 * as they are), and the output metadata is computed now by running the
 * call on fake tensors (wick/_capture_meta.py). An unknown op therefore
 * never ends a graph; what ends it is a call whose result is not tensors
 * (a data-dependent Python value) or whose arguments capture cannot
 * express (an opaque object). A call that writes into its tensor inputs
 * (found on the fake run) runs on clones of them that it returns as extra
 * outputs (wick._capture_meta.Functional), and each written value is
 * rebound (cap_inplace_update), so the graph stays functional.
 *
 * Owns: Interp.externs (the extern table handed to the runtime). */
#include <stdlib.h>
#include <string.h>

#include "../interp.h"

static PyObject *extern_input_type; /* wick._C.ExternInput */
static PyObject *meta_outputs;      /* wick._capture_meta.outputs */
static PyObject *frozen_arg_dict;   /* wick._capture_meta.FrozenArgDict */

static int init_extern(Interp *I) {
    if (extern_input_type && meta_outputs) return 0;
    PyObject *c = PyImport_ImportModule("wick._C");
    if (c) {
        extern_input_type = PyObject_GetAttrString(c, "ExternInput");
        Py_DECREF(c);
    }
    PyObject *m = extern_input_type ? PyImport_ImportModule("wick._capture_meta") : NULL;
    if (m) {
        meta_outputs = PyObject_GetAttrString(m, "outputs");
        frozen_arg_dict = meta_outputs ? PyObject_GetAttrString(m, "FrozenArgDict") : NULL;
        Py_DECREF(m);
    }
    if (!meta_outputs || !frozen_arg_dict) return cap_py_failed(I, "loading wick._capture_meta");
    return 0;
}

typedef struct {
    WkVec(int) values; /* graph value of each extern input */
    WkVec(Sv *) svs;   /* and the first value that named it (what a write rebinds) */
    PyObject *metas;   /* list of (dtype, device, sizes, strides, requires_grad) */
} Inputs;

static PyObject *input_meta_Ref(Interp *I, const WkValue *m) {
    PyObject *sizes = PyTuple_New(m->ndim), *strides = PyTuple_New(m->ndim);
    if (!sizes || !strides) goto fail;
    int64_t contiguous = 1;
    for (int d = m->ndim - 1; d >= 0; d--) {
        int64_t n = cap_const_size(m, d), st = contiguous;
        if (m->strides[d]) wk_sym_is_const(m->strides[d], &st);
        PyTuple_SET_ITEM(sizes, d, PyLong_FromLongLong(n));
        PyTuple_SET_ITEM(strides, d, PyLong_FromLongLong(st));
        contiguous *= n > 1 ? n : 1;
    }
    PyObject *dev = m->device.type == WK_DEV_CPU ? PyObject_CallFunction(cap_device_type, "s", "cpu")
                                                 : PyObject_CallFunction(cap_device_type, "si", "cuda", m->device.index);
    if (!dev) goto fail;
    int rg = cap_get_rg(I, m->id);
    return Py_BuildValue("(ONNNO)", cap_dtype_objs[m->dtype], dev, sizes, strides, rg ? Py_True : Py_False);
fail:
    Py_XDECREF(sizes);
    Py_XDECREF(strides);
    return NULL;
}

/* The call template of one argument: ExternInput(k) for tensors (one per
 * distinct graph value), the constant itself, or containers of those. */
static PyObject *template_Ref(Interp *I, Inputs *in, Sv *s, int depth) {
    if (depth > 8) return cap_unsupported(I, "extern argument nested too deeply"), NULL;
    switch (s->kind) {
    case SV_TENSOR: {
        int v = cap_tensor_value(I, s);
        if (v < 0) return NULL;
        int k = -1;
        for (int i = 0; i < in->values.len; i++)
            if (in->values.data[i] == v) k = i;
        if (k < 0) {
            const WkValue *m = wk_graph_value(I->g, v);
            PyObject *meta = input_meta_Ref(I, m);
            if (!meta || PyList_Append(in->metas, meta) < 0) {
                Py_XDECREF(meta);
                return cap_py_failed(I, "extern input"), NULL;
            }
            Py_DECREF(meta);
            k = in->values.len;
            wk_vec_push(&in->values, v);
            wk_vec_push(&in->svs, s);
        }
        return PyObject_CallFunction(extern_input_type, "i", k);
    }
    case SV_CONST:
        if (PyList_Check(s->obj) || PyDict_Check(s->obj) || PySet_Check(s->obj))
            return cap_unsupported(I, "a mutable %s as a torch call argument", cap_type_name(s->obj)), NULL;
        return Py_NewRef(s->obj);
    case SV_TUPLE:
    case SV_LIST: {
        PyObject *t = s->kind == SV_TUPLE ? PyTuple_New(s->items.len) : PyList_New(s->items.len);
        if (!t) return cap_py_failed(I, "extern"), NULL;
        for (int i = 0; i < s->items.len; i++) {
            PyObject *x = template_Ref(I, in, s->items.data[i], depth + 1);
            if (!x) {
                Py_DECREF(t);
                return NULL;
            }
            if (s->kind == SV_TUPLE) PyTuple_SET_ITEM(t, i, x);
            else PyList_SET_ITEM(t, i, x);
        }
        return t;
    }
    case SV_DICT: {
        /* a dict read from an argument's attribute: a copy the callee cannot
         * change (it would change the real one), of the items the frame read
         * and did not change (its changes are written back only after the
         * graph) */
        int frozen = s->arg >= 0;
        if (s->gname || (frozen && cap_attr_dict_changed(I, s)))
            return cap_unsupported(I, "a dict read from an argument's attribute and changed, as a torch call argument"),
                   NULL;
        PyObject *d = frozen ? PyObject_CallNoArgs(frozen_arg_dict) : PyDict_New();
        if (!d) return cap_py_failed(I, "extern"), NULL;
        for (int i = 0; i < s->items.len; i++) {
            PyObject *x = template_Ref(I, in, s->items.data[i], depth + 1);
            /* dict's own store: FrozenArgDict refuses __setitem__ */
            if (!x || PyDict_SetItem(d, PyList_GET_ITEM(s->obj, i), x) < 0) {
                Py_XDECREF(x);
                Py_DECREF(d);
                return x ? cap_py_failed(I, "extern"), NULL : NULL;
            }
            Py_DECREF(x);
        }
        return d;
    }
    case SV_OPAQUE: {
        /* a list argument: its items, exposed (breaks.c cap_arg_list_expose) */
        int exposed = cap_arg_list_expose(I, s);
        if (exposed) return exposed < 0 ? NULL : template_Ref(I, in, s, depth + 1);
        return cap_unsupported(I, "a %s as a torch call argument", sv_desc(s)), NULL;
    }
    default:
        return cap_unsupported(I, "a %s as a torch call argument", sv_desc(s)), NULL;
    }
}

static int meta_of(Interp *I, PyObject *t, WkTensorMeta *m, char *requires_grad) {
    PyObject *dt, *dev, *sizes, *strides, *rg;
    if (!PyArg_ParseTuple(t, "OOOOO", &dt, &dev, &sizes, &strides, &rg)) return cap_py_failed(I, "extern metadata");
    *requires_grad = rg == Py_True;
    int d = cap_dtype_of_obj_any(dt);
    if (d < 0) return cap_unsupported(I, "a torch call returns an unsupported dtype");
    memset(m, 0, sizeof *m);
    m->dtype = (WkDType)d;
    int ok = 0;
    if (cap_device_of(dev, &m->device, &ok) < 0) return cap_py_failed(I, "extern device");
    if (!ok) return cap_unsupported(I, "a torch call returns a tensor on an unsupported device");
    m->ndim = (int)PyTuple_GET_SIZE(sizes);
    if (m->ndim > WK_MAX_DIMS) return cap_unsupported(I, "a torch call returns a tensor of rank %d", m->ndim);
    for (int i = 0; i < m->ndim; i++) {
        m->sizes[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(sizes, i));
        m->strides[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
    }
    return PyErr_Occurred() ? cap_py_failed(I, "extern metadata") : 0;
}

/* F.dropout / alpha_dropout / feature_alpha_dropout / dropout1d..3d with
 * training=False (a constant: nn.Dropout in eval mode), and the first three
 * with p=0 (a constant), return their input itself: the input value, no
 * node. NULL when fn is not such a call. */
static Sv *dropout_identity(PyObject *fn, Sv *const *pos, int npos, PyObject *kwnames, Sv *const *kw, int nkw) {
    static const char *const names[] = {"dropout", "alpha_dropout", "feature_alpha_dropout", "dropout1d",
                                        "dropout2d", "dropout3d"};
    if (!PyFunction_Check(fn) || npos < 1 || pos[0]->kind != SV_TENSOR) return NULL;
    PyObject *mod = ((PyFunctionObject *)fn)->func_module, *nm = ((PyFunctionObject *)fn)->func_name;
    const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    const char *n = nm && PyUnicode_Check(nm) ? PyUnicode_AsUTF8(nm) : NULL;
    if (!m || !n || strcmp(m, "torch.nn.functional") != 0) {
        PyErr_Clear();
        return NULL;
    }
    int known = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) known |= strcmp(n, names[i]) == 0;
    if (!known) return NULL;
    /* signature (input, p=0.5, training=True, inplace=False) */
    Sv *training = npos > 2 ? pos[2] : NULL, *p = npos > 1 ? pos[1] : NULL;
    for (int i = 0; i < nkw; i++) {
        const char *k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));
        if (!k) {
            PyErr_Clear();
            return NULL;
        }
        if (strcmp(k, "training") == 0) training = kw[i];
        else if (strcmp(k, "p") == 0) p = kw[i];
        else if (strcmp(k, "inplace") != 0) return NULL;
    }
    if (training && training->kind == SV_CONST && training->obj == Py_False) return pos[0];
    /* p == 0 in training: ATen's dropout, alpha_dropout and feature_alpha_dropout
     * return the input itself too (dropout1d..3d reshape unbatched inputs: not these) */
    int p_zero = p && p->kind == SV_CONST && (PyFloat_CheckExact(p->obj) || PyLong_CheckExact(p->obj)) &&
                 PyFloat_AsDouble(p->obj) == 0.0;
    PyErr_Clear();
    if (p_zero && (strcmp(n, "dropout") == 0 || strcmp(n, "alpha_dropout") == 0 ||
                   strcmp(n, "feature_alpha_dropout") == 0))
        return pos[0];
    return NULL;
}

/* ---- autocast's casts as graph nodes ----------------------------------------
 * Inside torch.autocast, the ops of autocast's lower-precision list cast each
 * floating input (float64 excepted) on the autocast device to the autocast
 * dtype before they run. Called as externs, they would do those casts at run
 * time, each an eager kernel of its own (three per linear: input, weight,
 * bias) that nothing fuses with. Capture makes them CONVERT nodes instead:
 * they fuse into the kernels that produce the inputs (a layer norm writes
 * its bfloat16 copy in the same pass), and the extern, still run inside
 * autocast, finds its inputs in the autocast dtype and casts nothing. The
 * values are eager's (the same rounding, once). Autocast on or off is in
 * the tensor guards' dispatch keys; another autocast dtype at run time makes
 * the extern's output dtype differ from its metadata, which the runtime
 * reports before any kernel reads it. Only top-level tensor arguments are
 * cast here; autocast still casts whatever else at run time. */
static const char *const autocast_lower_ops[] = {
    "linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "conv1d", "conv2d", "conv3d",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu", "scaled_dot_product_attention",
};

static int autocast_lower_op(const char *name) {
    const char *base = strrchr(name, '.');
    base = base ? base + 1 : name;
    char op[64];
    size_t n = strlen(base);
    if (n >= sizeof op) return 0;
    memcpy(op, base, n + 1);
    if (n > 4 && !strncmp(op, "__", 2) && !strcmp(op + n - 2, "__")) { /* __matmul__, __rmatmul__ */
        op[n - 2] = '\0';
        size_t skip = op[2] == 'r' ? 3 : 2;
        memmove(op, op + skip, strlen(op + skip) + 1);
    }
    for (size_t i = 0; i < sizeof autocast_lower_ops / sizeof *autocast_lower_ops; i++)
        if (!strcmp(op, autocast_lower_ops[i])) return 1;
    return 0;
}

/* The autocast dtype of device type dev (WkDType) in torch's state now, or
 * -1 when autocast is off there; -2 with a Python error. */
static int torch_autocast_dtype(WkDeviceType dev) {
    static PyObject *is_enabled, *get_dtype;
    if (!is_enabled) {
        PyObject *torch = PyImport_ImportModule("torch");
        if (!torch) return -2;
        is_enabled = PyObject_GetAttrString(torch, "is_autocast_enabled");
        get_dtype = is_enabled ? PyObject_GetAttrString(torch, "get_autocast_dtype") : NULL;
        Py_DECREF(torch);
        if (!get_dtype) {
            Py_CLEAR(is_enabled);
            return -2;
        }
    }
    const char *type = dev == WK_DEV_CUDA ? "cuda" : "cpu";
    PyObject *on = PyObject_CallFunction(is_enabled, "s", type);
    if (!on) return -2;
    int enabled = PyObject_IsTrue(on);
    Py_DECREF(on);
    if (enabled <= 0) return enabled < 0 ? -2 : -1;
    PyObject *dt = PyObject_CallFunction(get_dtype, "s", type);
    if (!dt) return -2;
    int d = cap_dtype_of_obj(dt);
    Py_DECREF(dt);
    return d >= 0 && wk_dtype_is_float((WkDType)d) ? d : -1;
}

int cap_autocast_dtype(Interp *I, WkDeviceType dev) {
    int k = dev == WK_DEV_CUDA ? 1 : 0;
    if (I && I->autocast_dt[k] != CAP_AUTOCAST_ENTRY) return I->autocast_dt[k];
    return torch_autocast_dtype(dev);
}

int cap_autocast_changed(Interp *I) {
    /* even a block that sets the state the caller has now: the graph may
     * run later under another dtype that the tensor guards do not tell */
    return I->autocast_dt[0] != CAP_AUTOCAST_ENTRY || I->autocast_dt[1] != CAP_AUTOCAST_ENTRY;
}

PyObject *cap_autocast_wrap_Ref(Interp *I, PyObject *fn) {
    int changed = cap_autocast_changed(I);
    if (changed < 0) return cap_py_failed(I, "autocast state"), NULL;
    if (!changed) return Py_NewRef(fn);
    /* the graph runs in the caller's state: an extern inside the frame's
     * own autocast block sets the block's state around its call */
    PyObject *states = PyTuple_New(2);
    if (!states) return cap_py_failed(I, "autocast state"), NULL;
    for (int k = 0; k < 2; k++) {
        int dt = I->autocast_dt[k];
        PyObject *st;
        if (dt == CAP_AUTOCAST_ENTRY)
            st = Py_NewRef(Py_None);
        else
            st = Py_BuildValue("(sOO)", k ? "cuda" : "cpu", dt >= 0 ? Py_True : Py_False,
                               cap_dtype_objs[dt >= 0 ? dt : I->autocast_fast[k]]);
        if (!st) {
            Py_DECREF(states);
            return cap_py_failed(I, "autocast state"), NULL;
        }
        PyTuple_SET_ITEM(states, k, st);
    }
    PyObject *m = PyImport_ImportModule("wick._capture_meta");
    PyObject *w = m ? PyObject_CallMethod(m, "UnderAutocast", "OO", fn, states) : NULL;
    Py_XDECREF(m);
    Py_DECREF(states);
    if (!w) cap_py_failed(I, "autocast wrapper");
    return w;
}

/* ATen's autocast lists (autocast_mode.h for CUDA, autocast_mode.cpp for
 * the CPU), the rows of the op table among them: the fp32 policy, and on
 * CUDA the fp32_set_opt_dtype ops without a dtype (prod here; sum and
 * softmax are handled where their dtype= is read, vals/torchfn.c). */
int cap_autocast_fp32_op(WkOp op, WkDeviceType dev) {
    if (dev != WK_DEV_CUDA) return op == WK_OP_PROD;
    switch (op) {
    case WK_OP_EXP: case WK_OP_EXPM1: case WK_OP_LOG: case WK_OP_LOG10: case WK_OP_LOG2: case WK_OP_LOG1P:
    case WK_OP_TAN: case WK_OP_ASIN: case WK_OP_ACOS: case WK_OP_SINH: case WK_OP_COSH: case WK_OP_ERFINV:
    case WK_OP_RSQRT: case WK_OP_RECIPROCAL: case WK_OP_POW: case WK_OP_SQUARE: case WK_OP_SOFTPLUS:
    case WK_OP_LAYER_NORM: case WK_OP_LOGSUMEXP: case WK_OP_PROD:
        return 1;
    default:
        return 0;
    }
}

Sv *cap_autocast_to_fp32(Interp *I, Sv *t) {
    if (t->kind != SV_TENSOR) return t;
    const WkValue *m = cap_sv_meta(I, t);
    if (!m) return NULL;
    if (!wk_dtype_is_float(m->dtype) || m->dtype == WK_F64 || m->dtype == WK_F32) return t;
    int dt = cap_autocast_dtype(I, m->device.type);
    if (dt == -2) return cap_py_failed(I, "autocast state"), NULL;
    /* autocast's cast is Tensor.to(dtype): eager's copy keeps a dense input's layout */
    return dt < 0 ? t : cap_laid_or_raw(I, cap_convert(I, t, WK_F32), CAP_LAID_CONVERT);
}

/* args[i] cast as autocast would cast it (itself when autocast leaves it);
 * 0, or -1 with the capture failure set. */
static int autocast_args(Interp *I, Sv **args, int n) {
    for (int i = 0; i < n; i++) {
        if (args[i]->kind != SV_TENSOR) continue;
        const WkValue *m = cap_sv_meta(I, args[i]);
        if (!m) return -1;
        if (!wk_dtype_is_float(m->dtype) || m->dtype == WK_F64) continue;
        int dt = cap_autocast_dtype(I, m->device.type);
        if (dt == -2) return cap_py_failed(I, "autocast state"), -1;
        if (dt < 0 || dt == (int)m->dtype) continue;
        /* one cast per value: q, k and v projections read the same input */
        Sv *c = NULL;
        for (int k = 0; !c && k + 3 < I->autocast_casts.len; k += 4) {
            const int *e = &I->autocast_casts.data[k];
            if (e[0] == m->id && e[1] == dt && e[2] == I->grad_enabled) c = sv_tensor(I, e[3]);
        }
        if (!c) {
            if (!(c = cap_laid_or_raw(I, cap_convert(I, args[i], dt), CAP_LAID_CONVERT))) return -1;
            int cast = cap_tensor_value(I, c);
            if (cast < 0) return -1;
            wk_vec_push(&I->autocast_casts, m->id);
            wk_vec_push(&I->autocast_casts, dt);
            wk_vec_push(&I->autocast_casts, I->grad_enabled);
            wk_vec_push(&I->autocast_casts, cast);
        }
        args[i] = c;
    }
    return 0;
}

/* torch.get_autocast_dtype bound to a device type: the guard's query */
static PyObject *autocast_dtype_query(WkDeviceType dev) {
    static PyObject *queries[2];
    int k = dev == WK_DEV_CUDA;
    if (!queries[k]) {
        PyObject *torch = PyImport_ImportModule("torch"), *functools = PyImport_ImportModule("functools");
        PyObject *get = torch ? PyObject_GetAttrString(torch, "get_autocast_dtype") : NULL;
        queries[k] = get && functools ? PyObject_CallMethod(functools, "partial", "Os", get, k ? "cuda" : "cpu") : NULL;
        Py_XDECREF(torch);
        Py_XDECREF(functools);
        Py_XDECREF(get);
    }
    return queries[k];
}

int cap_autocast_cast_operands(Interp *I, Sv **args, int n) {
    if (autocast_args(I, args, n) < 0) return -1;
    /* a kernel called through the C shim (runtime/shim_ops.c) runs outside
     * autocast: the casts above are all there is, so the autocast dtype the
     * caller had at entry is guarded (a block of the frame's own sets it) */
    for (int k = 0; k < 2; k++) {
        WkDeviceType dev = k ? WK_DEV_CUDA : WK_DEV_CPU;
        int on_dev = 0;
        for (int i = 0; i < n; i++) {
            const WkValue *m = args[i]->kind == SV_TENSOR ? cap_sv_meta(I, args[i]) : NULL;
            on_dev |= m && m->device.type == dev;
        }
        if (!on_dev || I->autocast_dt[k] != CAP_AUTOCAST_ENTRY) continue;
        int dt = torch_autocast_dtype(dev);
        if (dt == -2) return cap_py_failed(I, "autocast state"), -1;
        if (dt < 0) continue;
        PyObject *query = autocast_dtype_query(dev);
        if (!query) return cap_py_failed(I, "autocast state"), -1;
        wk_guard_call_is(I->guards, query, cap_dtype_objs[dt]);
    }
    return 0;
}

static Sv *extern_call(Interp *I, PyObject *fn, const char *name, Sv *const *pos, int npos, PyObject *kwnames,
                       Sv *const *kw, int nkw, int first_only) {
    Sv *same = first_only ? NULL : dropout_identity(fn, pos, npos, kwnames, kw, nkw);
    if (same) return same;
    Sv *cast_pos[16], *cast_kw[16];
    if (npos <= 16 && nkw <= 16 && autocast_lower_op(name)) {
        for (int i = 0; i < npos; i++) cast_pos[i] = pos[i];
        for (int i = 0; i < nkw; i++) cast_kw[i] = kw[i];
        if (autocast_args(I, cast_pos, npos) < 0 || autocast_args(I, cast_kw, nkw) < 0) return NULL;
        pos = cast_pos;
        kw = cast_kw;
    }
    if (init_extern(I) < 0) return NULL;
    if (!I->externs && !(I->externs = PyList_New(0))) return cap_py_failed(I, "extern"), NULL;
    PyObject *under_autocast = cap_autocast_wrap_Ref(I, fn);
    if (!under_autocast) return NULL;
    fn = under_autocast;
    Inputs in = {0};
    Sv *res = NULL;
    PyObject *args = PyTuple_New(npos), *kwargs = PyDict_New(), *out = NULL, *entry = NULL;
    in.metas = PyList_New(0);
    if (!args || !kwargs || !in.metas) {
        cap_py_failed(I, "extern");
        goto done;
    }
    for (int i = 0; i < npos; i++) {
        PyObject *x = template_Ref(I, &in, pos[i], 0);
        if (!x) goto done;
        PyTuple_SET_ITEM(args, i, x);
    }
    for (int i = 0; i < nkw; i++) {
        PyObject *x = template_Ref(I, &in, kw[i], 0);
        if (!x) goto done;
        int rc = PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), x);
        Py_DECREF(x);
        if (rc < 0) {
            cap_py_failed(I, "extern");
            goto done;
        }
    }
    /* run on fake tensors in the grad mode the frame has here, so that the
     * outputs' requires_grad is eager's */
    out = PyObject_CallFunctionObjArgs(meta_outputs, fn, args, kwargs, in.metas,
                                       I->grad_enabled ? Py_True : Py_False, first_only ? Py_True : Py_False, NULL);
    if (!out) {
        char what[160];
        snprintf(what, sizeof what, "%s() on fake tensors", name);
        cap_py_failed(I, what);
        goto done;
    }
    const char *structure;
    PyObject *metas;
    PyObject *aliased_inputs = NULL, *aliased_outputs = NULL, *written = NULL, *functional = NULL;
    if (!PyArg_ParseTuple(out, "sOOOO|O", &structure, &metas, &aliased_inputs, &aliased_outputs, &written,
                          &functional) ||
        !PyList_Check(metas) || !PyList_Check(aliased_inputs) || !PyList_Check(aliased_outputs) ||
        !PyList_Check(written) || (PyList_GET_SIZE(written) > 0) != (functional != NULL)) {
        cap_py_failed(I, "extern metadata");
        goto done;
    }
    /* a call that writes into its inputs runs as Functional (clones written,
     * returned after its own outputs): the written values are rebound below */
    int nwritten = (int)PyList_GET_SIZE(written);
    if (nwritten) {
        structure += strlen("functional:");
        fn = functional;
    }
    int nout = (int)PyList_GET_SIZE(metas);
    if (nout < 1 || nout > 64 || nout < nwritten) {
        cap_unsupported(I, "%s() returns %d tensors", name, nout);
        goto done;
    }
    WkTensorMeta tm[64];
    char out_rg[64];
    for (int i = 0; i < nout; i++)
        if (meta_of(I, PyList_GET_ITEM(metas, i), &tm[i], &out_rg[i]) < 0) goto done;
    int index = (int)PyList_GET_SIZE(I->externs);
    /* "first": the node's one output is item 0 of the call's result */
    int first = strcmp(structure, "first") == 0;
    PyObject *picks = first ? Py_BuildValue("(i)", 0) : NULL;
    entry = first ? (picks ? PyTuple_Pack(4, fn, args, kwargs, picks) : NULL) : PyTuple_Pack(3, fn, args, kwargs);
    Py_XDECREF(picks);
    if (!entry || PyList_Append(I->externs, entry) < 0) {
        cap_py_failed(I, "extern");
        goto done;
    }
    int v = wk_graph_extern(I->g, index, name, in.values.data, in.values.len, tm, nout);
    if (v < 0) {
        cap_graph_failed(I, name);
        goto done;
    }
    for (int i = 0; i < nout; i++) cap_set_node_output_rg(I, v + i, out_rg[i]);
    /* views: the outputs and the inputs whose storage they share */
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(aliased_outputs); k++) {
        long o = PyLong_AsLong(PyList_GET_ITEM(aliased_outputs, k));
        if (o >= 0 && o < nout) cap_mark_aliased(I, v + (int)o);
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(aliased_inputs); k++) {
        long i = PyLong_AsLong(PyList_GET_ITEM(aliased_inputs, k));
        if (i >= 0 && i < in.values.len) {
            cap_mark_aliased(I, in.values.data[i]);
            if (cap_check_view_of(I, in.values.data[i], name) < 0) goto done;
        }
    }
    if (PyErr_Occurred()) {
        cap_py_failed(I, "extern aliasing");
        res = NULL;
        goto done;
    }
    int nown = nout - nwritten;
    for (int j = 0; j < nwritten; j++) {
        long k = PyLong_AsLong(PyList_GET_ITEM(written, j));
        if (k < 0 || k >= in.values.len) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "wick: a written extern input out of range");
            cap_py_failed(I, "extern writes");
            goto done;
        }
        char what[160];
        snprintf(what, sizeof what, "%s()", name);
        if (!cap_inplace_update(I, in.svs.data[k], sv_tensor(I, v + nown + j), what)) goto done;
    }
    if (strncmp(structure, "self:", 5) == 0) {
        int k = atoi(structure + 5);
        res = k >= 0 && k < in.svs.len ? in.svs.data[k] : NULL;
        if (!res) cap_unsupported(I, "%s() returns an input it writes", name);
    } else if (strcmp(structure, "none") == 0) {
        res = sv_const(I, Py_None);
    } else if (strcmp(structure, "tensor") == 0 || first) {
        res = sv_tensor(I, v);
    } else {
        res = sv_new(I, strcmp(structure, "list") == 0 ? SV_LIST : SV_TUPLE);
        for (int i = 0; i < nown; i++) wk_vec_push(&res->items, sv_tensor(I, v + i));
        if (strncmp(structure, "return_types.", 13) == 0) {
            /* x.max(dim) & co.: a torch.return_types named tuple, its class
             * kept as a namedtuple's is (.values reads an item; returned,
             * it is rebuilt as that class) */
            PyObject *rt = PyImport_ImportModule("torch.return_types");
            res->obj = rt ? PyObject_GetAttrString(rt, structure + 13) : NULL;
            Py_XDECREF(rt);
            if (!res->obj || !PyType_Check(res->obj)) {
                Py_CLEAR(res->obj);
                PyErr_Clear();
                cap_unsupported(I, "%s() returns a %s capture does not know", name, structure);
                res = NULL;
            }
        }
    }
done:
    Py_DECREF(under_autocast);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_XDECREF(in.metas);
    Py_XDECREF(out);
    Py_XDECREF(entry);
    wk_vec_free(&in.values);
    wk_vec_free(&in.svs);
    return res;
}

Sv *cap_extern_call(Interp *I, PyObject *fn, const char *name, Sv *const *pos, int npos, PyObject *kwnames,
                    Sv *const *kw, int nkw) {
    return extern_call(I, fn, name, pos, npos, kwnames, kw, nkw, 0);
}

Sv *cap_extern_call_first(Interp *I, PyObject *fn, const char *name, Sv *const *pos, int npos, PyObject *kwnames,
                          Sv *const *kw, int nkw) {
    return extern_call(I, fn, name, pos, npos, kwnames, kw, nkw, 1);
}

static int const_complex(PyObject *o, int depth) {
    if (PyComplex_Check(o)) return 1;
    int d = cap_dtype_of_obj_any(o);
    if (d >= 0) return wk_dtype_is_complex((WkDType)d);
    if (PyTuple_CheckExact(o) && depth < 4)
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); i++)
            if (const_complex(PyTuple_GET_ITEM(o, i), depth + 1)) return 1;
    return 0;
}

static int sv_complex(Interp *I, Sv *s, int depth) {
    switch (s->kind) {
    case SV_TENSOR: {
        const WkValue *m = cap_sv_meta(I, s);
        return m ? wk_dtype_is_complex(m->dtype) : -1;
    }
    case SV_CONST: return const_complex(s->obj, 0);
    case SV_TUPLE:
    case SV_LIST:
        for (int i = 0; depth < 4 && i < s->items.len; i++) {
            int c = sv_complex(I, s->items.data[i], depth + 1);
            if (c) return c;
        }
        return 0;
    default: return 0;
    }
}

int cap_sv_complex(Interp *I, Sv *s) { return sv_complex(I, s, 0); }

int cap_args_complex(Interp *I, const Args *a) {
    for (int i = 0; i < a->npos + a->nkw; i++) {
        int c = sv_complex(I, i < a->npos ? a->pos[i] : a->kw[i - a->npos], 0);
        if (c) return c;
    }
    return 0;
}

/* A callable defined by torch (torch.*, torch.nn.functional.*, Tensor
 * methods, torch._C builtins): called as an extern rather than inlined. */
int cap_is_torch_callable(PyObject *fn) {
    if (PyType_Check(fn)) return 0;
    PyObject *mod = PyObject_GetAttrString(fn, "__module__");
    if (!mod) {
        PyErr_Clear();
        /* method descriptors of torch.Tensor carry no __module__ */
        if (PyObject_TypeCheck(fn, &PyMethodDescr_Type) || Py_TYPE(fn) == &PyWrapperDescr_Type) {
            PyObject *cls = PyObject_GetAttrString(fn, "__objclass__");
            int r = cls && cap_tensor_type && PyType_Check(cls) &&
                    PyType_IsSubtype(cap_tensor_type, (PyTypeObject *)cls);
            Py_XDECREF(cls);
            PyErr_Clear();
            return r;
        }
        return 0;
    }
    const char *m = PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    /* torch.nn.modules and torch.nn.utils.parametrize/parametrizations (a
     * parametrized module's property getter, its ParametrizationList, the
     * weight-norm module) are module plumbing, inlined as user code is */
    int r = m && (strcmp(m, "torch") == 0 || strncmp(m, "torch.", 6) == 0) &&
            strncmp(m, "torch.nn.modules", 16) != 0 && strncmp(m, "torch.nn.utils.parametriz", 25) != 0;
    if (!m) PyErr_Clear();
    Py_DECREF(mod);
    return r;
}
