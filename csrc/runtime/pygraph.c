/* pygraph.c — wick._C.Graph: a Python handle on a WkGraph under
 * construction. Used by the torch.compile adapter (FX import), by tests of
 * the compiler alone, and by exporters that hand a wick graph to another
 * backend (introspection: inputs(), nodes(), outputs(), value()).
 *
 * Also owns module init for the runtime (wk_rt_init) and the exception type
 * wick._C.CompileError. Everything here runs with the GIL held. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "runtime.h"

typedef struct {
    PyObject_HEAD
    WkGraph *g;
} GraphObject;

static PyTypeObject Graph_Type;
static PyObject *CompileError; /* wick._C.CompileError, owned by the module too */

/* ---- helpers ----------------------------------------------------------- */

/* dtype given as "float32", "torch.float32" or a torch.dtype (whose str() is
 * "torch.float32"). Returns the WkDType or -1 with ValueError/TypeError. */
static int parse_dtype(PyObject *obj) {
    PyObject *s = PyUnicode_Check(obj) ? Py_NewRef(obj) : PyObject_Str(obj);
    if (!s) return -1;
    const char *name = PyUnicode_AsUTF8(s);
    int dt = -1;
    if (name) {
        if (!strncmp(name, "torch.", 6)) name += 6;
        dt = wk_dtype_from_name(name);
        if (dt < 0) PyErr_Format(PyExc_ValueError, "wick: unknown dtype '%s'", name);
    }
    Py_DECREF(s);
    return dt;
}

/* device given as "cpu", "cuda", "cuda:1" or a torch.device. */
static int parse_device(PyObject *obj, WkDevice *out) {
    PyObject *s = PyUnicode_Check(obj) ? Py_NewRef(obj) : PyObject_Str(obj);
    if (!s) return -1;
    const char *name = PyUnicode_AsUTF8(s);
    int rc = -1;
    if (name) {
        out->index = 0;
        if (!strcmp(name, "cpu")) {
            out->type = WK_DEV_CPU;
            rc = 0;
        } else if (!strncmp(name, "cuda", 4) && (name[4] == '\0' || name[4] == ':')) {
            out->type = WK_DEV_CUDA;
            out->index = name[4] == ':' ? atoi(name + 5) : 0;
            rc = 0;
        } else {
            PyErr_Format(PyExc_ValueError, "wick: unsupported device '%s'", name);
        }
    }
    Py_DECREF(s);
    return rc;
}

/* Reads a sequence of at most WK_MAX_DIMS ints. Returns its length or -1. */
static int parse_int_seq(PyObject *obj, int64_t *out, const char *what) {
    PyObject *seq = PySequence_Fast(obj, "wick: expected a sequence of ints");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > WK_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "wick: %s has %zd dims; at most %d are supported", what, n,
                     WK_MAX_DIMS);
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) goto error;
        out[i] = v;
    }
    Py_DECREF(seq);
    return (int)n;
error:
    Py_DECREF(seq);
    return -1;
}

static int check_value_id(const WkGraph *g, long id);

/* A sequence of value ids of g into a PyMem array (*out, caller frees).
 * Returns the count or -1. */
static int parse_value_ids(const WkGraph *g, PyObject *obj, int **out) {
    PyObject *seq = PySequence_Fast(obj, "wick: expected a sequence of value ids");
    *out = NULL;
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int *ids = PyMem_Calloc((size_t)n + 1, sizeof(int));
    if (!ids) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if ((v == -1 && PyErr_Occurred()) || check_value_id(g, v) < 0) {
            Py_DECREF(seq);
            PyMem_Free(ids);
            return -1;
        }
        ids[i] = (int)v;
    }
    Py_DECREF(seq);
    *out = ids;
    return (int)n;
}

/* Any number of ints into a PyMem array (*out, caller frees). */
static int parse_int_list(PyObject *obj, int64_t **out) {
    PyObject *seq = PySequence_Fast(obj, "wick: ints must be a sequence of ints");
    *out = NULL;
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int64_t *v = PyMem_Calloc((size_t)n + 1, sizeof *v);
    if (!v) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        v[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            PyMem_Free(v);
            return -1;
        }
    }
    Py_DECREF(seq);
    *out = v;
    return (int)n;
}

/* An int for a constant expression, else its C spelling as str. */
static PyObject *sym_to_py_Ref(const WkGraph *g, const WkSym *s) {
    int64_t v;
    if (wk_sym_is_const(s, &v)) return PyLong_FromLongLong(v);
    WkStr str = {0};
    wk_sym_to_c(wk_graph_syms((WkGraph *)g), s, &str, NULL, NULL);
    PyObject *r = PyUnicode_FromString(str.data ? str.data : "");
    wk_str_free(&str);
    return r;
}

static PyObject *syms_to_tuple_Ref(const WkGraph *g, const WkSym *const *syms, int n) {
    PyObject *t = PyTuple_New(n);
    if (!t) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *v = sym_to_py_Ref(g, syms[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *device_str_Ref(WkDevice d) {
    if (d.type == WK_DEV_CPU) return PyUnicode_FromString("cpu");
    return PyUnicode_FromFormat("cuda:%d", d.index);
}

/* dict(id, dtype, device, sizes, strides, requires_grad) for a value. */
static PyObject *value_dict_Ref(const WkGraph *g, const WkValue *v) {
    PyObject *sizes = syms_to_tuple_Ref(g, v->sizes, v->ndim);
    PyObject *strides = sizes ? syms_to_tuple_Ref(g, v->strides, v->ndim) : NULL;
    PyObject *dev = strides ? device_str_Ref(v->device) : NULL;
    PyObject *d = NULL;
    if (dev)
        d = Py_BuildValue("{s:i,s:s,s:O,s:O,s:O,s:O,s:O}", "id", v->id, "dtype",
                          wk_dtype_name(v->dtype), "device", dev, "sizes", sizes, "strides",
                          strides, "requires_grad", v->requires_grad ? Py_True : Py_False,
                          "is_wrapped_number", v->is_wrapped_number ? Py_True : Py_False);
    Py_XDECREF(sizes);
    Py_XDECREF(strides);
    Py_XDECREF(dev);
    return d;
}

static int check_value_id(const WkGraph *g, long id) {
    if (id < 0 || id >= wk_graph_nvalues(g)) {
        PyErr_Format(PyExc_ValueError, "wick: no value with id %ld in this graph", id);
        return -1;
    }
    return 0;
}

/* ---- the type ---------------------------------------------------------- */

static PyObject *Graph_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":Graph", kwlist)) return NULL;
    GraphObject *self = (GraphObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->g = wk_graph_new();
    return (PyObject *)self;
}

static void Graph_dealloc(GraphObject *self) {
    if (self->g) wk_graph_free(self->g);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Graph_input(GraphObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"dtype", "sizes", "strides", "requires_grad", "source", "device", "any_dtype", NULL};
    PyObject *dtype_obj, *sizes_obj, *strides_obj, *device_obj = NULL;
    int requires_grad = 0, any_dtype = 0;
    const char *source = "";
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|psOp:input", kwlist, &dtype_obj, &sizes_obj,
                                     &strides_obj, &requires_grad, &source, &device_obj, &any_dtype))
        return NULL;
    int dt = parse_dtype(dtype_obj);
    if (dt < 0) return NULL;
    WkDevice dev = {WK_DEV_CPU, 0};
    if (device_obj && parse_device(device_obj, &dev) < 0) return NULL;
    int64_t sizes[WK_MAX_DIMS], strides[WK_MAX_DIMS];
    int nd = parse_int_seq(sizes_obj, sizes, "sizes");
    if (nd < 0) return NULL;
    int ns = parse_int_seq(strides_obj, strides, "strides");
    if (ns < 0) return NULL;
    if (nd != ns) {
        PyErr_Format(PyExc_ValueError, "wick: %d sizes but %d strides", nd, ns);
        return NULL;
    }
    for (int i = 0; i < nd; i++)
        if (sizes[i] < 0) {
            PyErr_Format(PyExc_ValueError, "wick: negative size %lld", (long long)sizes[i]);
            return NULL;
        }
    wk_error_clear();
    int id = (any_dtype ? wk_graph_input_any : wk_graph_input)(self->g, (WkDType)dt, dev, nd, sizes, strides,
                                                                requires_grad, source);
    if (id < 0) return PyErr_Format(PyExc_ValueError, "%s", wk_error_get());
    return PyLong_FromLong(id);
}

static PyObject *Graph_input_like(GraphObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"tensor", "source", "any_dtype", NULL};
    PyObject *t;
    const char *source = "";
    int any_dtype = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|sp:input_like", kwlist, &t, &source, &any_dtype))
        return NULL;
    PyObject *dtype = NULL, *shape = NULL, *stride = NULL, *rg = NULL, *device = NULL;
    PyObject *result = NULL, *call_args = NULL, *call_kw = NULL;
    if (!(dtype = PyObject_GetAttrString(t, "dtype"))) goto done;
    if (!(shape = PyObject_GetAttrString(t, "shape"))) goto done;
    if (!(stride = PyObject_CallMethod(t, "stride", NULL))) goto done;
    if (!(rg = PyObject_GetAttrString(t, "requires_grad"))) goto done;
    if (!(device = PyObject_GetAttrString(t, "device"))) goto done;
    call_args = PyTuple_Pack(3, dtype, shape, stride);
    if (!call_args) goto done;
    call_kw = Py_BuildValue("{s:O,s:s,s:O,s:O}", "requires_grad", PyObject_IsTrue(rg) ? Py_True : Py_False,
                            "source", source, "device", device, "any_dtype", any_dtype ? Py_True : Py_False);
    if (!call_kw) goto done;
    result = Graph_input(self, call_args, call_kw);
done:
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    Py_XDECREF(rg);
    Py_XDECREF(device);
    Py_XDECREF(call_args);
    Py_XDECREF(call_kw);
    return result;
}

static PyObject *Graph_scalar(GraphObject *self, PyObject *value) {
    int id;
    wk_error_clear();
    if (PyBool_Check(value)) {
        id = wk_graph_scalar(self->g, WK_BOOL, 0.0, value == Py_True);
    } else if (PyLong_Check(value)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow) {
            PyErr_SetString(PyExc_OverflowError, "wick: integer scalar does not fit in int64");
            return NULL;
        }
        if (v == -1 && PyErr_Occurred()) return NULL;
        id = wk_graph_scalar(self->g, WK_I64, (double)v, v);
    } else if (PyFloat_Check(value)) {
        double v = PyFloat_AS_DOUBLE(value);
        id = wk_graph_scalar(self->g, WK_F64, v, (int64_t)0);
    } else {
        return PyErr_Format(PyExc_TypeError, "wick: scalar() takes bool, int or float, not %.100s",
                            Py_TYPE(value)->tp_name);
    }
    if (id < 0) return PyErr_Format(PyExc_ValueError, "%s", wk_error_get());
    return PyLong_FromLong(id);
}

static PyObject *Graph_op(GraphObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"name", "inputs", "dims", "keepdim", "dtype", "ints", "correction", "eps", "device",
                             NULL};
    const char *name;
    PyObject *inputs_obj, *dims_obj = Py_None, *dtype_obj = Py_None, *ints_obj = Py_None, *corr_obj = Py_None;
    PyObject *eps_obj = Py_None, *device_obj = Py_None;
    int keepdim = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "sO|OpOOOOO:op", kwlist, &name, &inputs_obj, &dims_obj,
                                     &keepdim, &dtype_obj, &ints_obj, &corr_obj, &eps_obj, &device_obj))
        return NULL;
    WkDevice device = {WK_DEV_CPU, 0};
    if (device_obj != Py_None && parse_device(device_obj, &device) < 0) return NULL;
    int op = wk_op_from_name(name);
    if (op < 0) return PyErr_Format(PyExc_ValueError, "wick: unknown op '%s'", name);
    if (op == WK_OP_SCALAR)
        return PyErr_Format(PyExc_ValueError, "wick: use Graph.scalar() to make a scalar");
    int *inputs = NULL, ninputs = parse_value_ids(self->g, inputs_obj, &inputs);
    if (ninputs < 0) return NULL;
    int64_t *ints = NULL;
    int nints = 0;
    if (ints_obj != Py_None && (nints = parse_int_list(ints_obj, &ints)) < 0) {
        PyMem_Free(inputs);
        return NULL;
    }
    PyObject *result = NULL;
    WkAttrs attrs;
    memset(&attrs, 0, sizeof attrs);
    attrs.nints = nints;
    attrs.ints = ints;
    attrs.keepdim = keepdim;
    attrs.has_device = device_obj != Py_None;
    attrs.device = device;
    if (dims_obj != Py_None) {
        int64_t dims[WK_MAX_DIMS];
        int nd;
        if (PyLong_Check(dims_obj)) {
            dims[0] = PyLong_AsLongLong(dims_obj);
            if (dims[0] == -1 && PyErr_Occurred()) goto done;
            nd = 1;
        } else {
            nd = parse_int_seq(dims_obj, dims, "dims");
            if (nd < 0) goto done;
        }
        attrs.ndims = nd;
        for (int i = 0; i < nd; i++) attrs.dims[i] = (int)dims[i];
    }
    if (corr_obj != Py_None) { /* var/std's correction */
        double corr = PyFloat_AsDouble(corr_obj);
        if (corr == -1.0 && PyErr_Occurred()) goto done;
        attrs.fvalue = corr;
        attrs.ivalue = 1;
    }
    if (eps_obj != Py_None) { /* layer_norm's eps */
        attrs.fvalue = PyFloat_AsDouble(eps_obj);
        if (attrs.fvalue == -1.0 && PyErr_Occurred()) goto done;
    }
    if (dtype_obj != Py_None) {
        int dt = parse_dtype(dtype_obj);
        if (dt < 0) goto done;
        attrs.dtype = (WkDType)dt;
        attrs.has_dtype = 1;
    }
    wk_error_clear();
    int id = wk_graph_op(self->g, (WkOp)op, inputs, ninputs, &attrs);
    if (id < 0) PyErr_Format(PyExc_ValueError, "%s", wk_error_get());
    else result = PyLong_FromLong(id);
done:
    PyMem_Free(inputs);
    PyMem_Free(ints);
    return result;
}

/* Output metadata from a tensor-like (dtype, shape, stride(), device,
 * requires_grad: a real or fake tensor) or a dict with keys dtype, sizes,
 * strides and optionally device, requires_grad. */
static int parse_meta(PyObject *obj, WkTensorMeta *m) {
    PyObject *dtype = NULL, *sizes = NULL, *strides = NULL, *device = NULL, *rg = NULL;
    int rc = -1;
    memset(m, 0, sizeof *m);
    if (PyDict_Check(obj)) {
        dtype = Py_XNewRef(PyDict_GetItemString(obj, "dtype"));
        sizes = Py_XNewRef(PyDict_GetItemString(obj, "sizes"));
        strides = Py_XNewRef(PyDict_GetItemString(obj, "strides"));
        device = Py_XNewRef(PyDict_GetItemString(obj, "device"));
        rg = Py_XNewRef(PyDict_GetItemString(obj, "requires_grad"));
        if (!dtype || !sizes || !strides) {
            PyErr_SetString(PyExc_ValueError, "wick: extern output metadata needs dtype, sizes and strides");
            goto done;
        }
    } else {
        if (!(dtype = PyObject_GetAttrString(obj, "dtype"))) goto done;
        if (!(sizes = PyObject_GetAttrString(obj, "shape"))) goto done;
        if (!(strides = PyObject_CallMethod(obj, "stride", NULL))) goto done;
        if (!(device = PyObject_GetAttrString(obj, "device"))) goto done;
        if (!(rg = PyObject_GetAttrString(obj, "requires_grad"))) goto done;
    }
    int dt = parse_dtype(dtype);
    if (dt < 0) goto done;
    m->dtype = (WkDType)dt;
    m->device.type = WK_DEV_CPU;
    if (device && device != Py_None && parse_device(device, &m->device) < 0) goto done;
    int nd = parse_int_seq(sizes, m->sizes, "sizes");
    if (nd < 0) goto done;
    int ns = parse_int_seq(strides, m->strides, "strides");
    if (ns < 0) goto done;
    if (nd != ns) {
        PyErr_Format(PyExc_ValueError, "wick: %d sizes but %d strides", nd, ns);
        goto done;
    }
    m->ndim = nd;
    if (rg && rg != Py_None) {
        int t = PyObject_IsTrue(rg);
        if (t < 0) goto done;
        m->requires_grad = t;
    }
    rc = 0;
done:
    Py_XDECREF(dtype);
    Py_XDECREF(sizes);
    Py_XDECREF(strides);
    Py_XDECREF(device);
    Py_XDECREF(rg);
    return rc;
}

static PyObject *Graph_extern(GraphObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"index", "inputs", "outputs", "name", "ints", NULL};
    int index;
    PyObject *inputs_obj, *outputs_obj, *ints_obj = Py_None;
    const char *name = "extern";
    int64_t ints[WK_MAX_DIMS];
    int nints = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iOO|sO:extern", kwlist, &index, &inputs_obj, &outputs_obj,
                                     &name, &ints_obj))
        return NULL;
    /* constant arguments the compiler may use (graph.h) */
    if (ints_obj != Py_None && (nints = parse_int_seq(ints_obj, ints, "extern ints")) < 0) return NULL;
    int *inputs = NULL, ninputs = parse_value_ids(self->g, inputs_obj, &inputs);
    if (ninputs < 0) return NULL;
    PyObject *result = NULL;
    WkTensorMeta *metas = NULL;
    PyObject *seq = PySequence_Fast(outputs_obj, "wick: extern outputs must be a sequence of metadata");
    if (!seq) goto done;
    Py_ssize_t nout = PySequence_Fast_GET_SIZE(seq);
    metas = PyMem_Calloc((size_t)nout + 1, sizeof *metas);
    if (!metas) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < nout; k++)
        if (parse_meta(PySequence_Fast_GET_ITEM(seq, k), &metas[k]) < 0) goto done;
    wk_error_clear();
    int id = wk_graph_extern_ints(self->g, index, name, inputs, ninputs, metas, (int)nout, ints, nints);
    if (id < 0) {
        PyErr_Format(PyExc_ValueError, "%s", wk_error_get());
        goto done;
    }
    result = PyList_New(nout);
    for (Py_ssize_t k = 0; result && k < nout; k++) PyList_SET_ITEM(result, k, PyLong_FromLong(id + (long)k));
done:
    Py_XDECREF(seq);
    PyMem_Free(metas);
    PyMem_Free(inputs);
    return result;
}

static PyObject *Graph_output(GraphObject *self, PyObject *value) {
    long id = PyLong_AsLong(value);
    if (id == -1 && PyErr_Occurred()) return NULL;
    if (check_value_id(self->g, id) < 0) return NULL;
    wk_error_clear();
    if (wk_graph_output(self->g, (int)id) < 0)
        return PyErr_Format(PyExc_ValueError, "%s", wk_error_get());
    Py_RETURN_NONE;
}

static PyObject *Graph_print(GraphObject *self, PyObject *unused) {
    (void)unused;
    char *text = wk_graph_print(self->g);
    PyObject *r = PyUnicode_FromString(text ? text : "");
    free(text);
    return r;
}

static PyObject *Graph_compile(GraphObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"externs", NULL};
    PyObject *externs = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:compile", kwlist, &externs)) return NULL;
    wk_error_clear();
    PyObject *c = wk_rt_compile_externs_Ref(self->g, externs);
    if (!c && !PyErr_Occurred()) PyErr_SetString(CompileError, wk_error_get());
    return c;
}

static PyObject *Graph_inputs(GraphObject *self, PyObject *unused) {
    (void)unused;
    int n = wk_graph_ninputs(self->g);
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (int i = 0; i < n; i++) {
        const WkValue *v = wk_graph_value(self->g, wk_graph_input_value(self->g, i));
        PyObject *d = value_dict_Ref(self->g, v);
        PyObject *src = d ? PyUnicode_FromString(v->source ? v->source : "") : NULL;
        if (!src || PyDict_SetItemString(d, "source", src) < 0) {
            Py_XDECREF(src);
            Py_XDECREF(d);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(src);
        PyList_SET_ITEM(list, i, d);
    }
    return list;
}

static PyObject *node_dict_Ref(const WkGraph *g, const WkNode *nd) {
    const WkOpInfo *info = wk_op_info(nd->op);
    PyObject *inputs = PyList_New(nd->ninputs);
    if (!inputs) return NULL;
    for (int i = 0; i < nd->ninputs; i++) PyList_SET_ITEM(inputs, i, PyLong_FromLong(nd->inputs[i]));
    PyObject *dims = Py_None, *dtype = Py_None, *value = Py_None;
    Py_INCREF(Py_None), Py_INCREF(Py_None), Py_INCREF(Py_None);
    PyObject *d = NULL;
    /* reductions, softmax's one dim, layer_norm's normalised dims */
    if (info->kind == WK_KIND_REDUCTION || info->shape == WK_SHAPE_SAME_DIM || nd->op == WK_OP_LAYER_NORM) {
        Py_DECREF(dims);
        if (nd->attrs.ndims == 0) {
            dims = Py_NewRef(Py_None);
        } else {
            dims = PyTuple_New(nd->attrs.ndims);
            if (!dims) goto done;
            for (int i = 0; i < nd->attrs.ndims; i++)
                PyTuple_SET_ITEM(dims, i, PyLong_FromLong(nd->attrs.dims[i]));
        }
    }
    if (nd->attrs.has_dtype || nd->op == WK_OP_CONVERT || nd->op == WK_OP_SCALAR) {
        Py_DECREF(dtype);
        dtype = PyUnicode_FromString(wk_dtype_name(nd->attrs.dtype));
        if (!dtype) goto done;
    }
    if (nd->op == WK_OP_SCALAR) {
        Py_DECREF(value);
        WkDType dt = wk_graph_value(g, nd->output)->dtype;
        if (dt == WK_BOOL)
            value = PyBool_FromLong(nd->attrs.ivalue != 0);
        else if (wk_dtype_is_float(dt))
            value = PyFloat_FromDouble(nd->attrs.fvalue);
        else
            value = PyLong_FromLongLong(nd->attrs.ivalue);
        if (!value) goto done;
    }
    d = Py_BuildValue("{s:s,s:O,s:i,s:O,s:O,s:O,s:O}", "op", info->name, "inputs", inputs, "output",
                      nd->output, "dims", dims, "keepdim", nd->attrs.keepdim ? Py_True : Py_False,
                      "dtype", dtype, "value", value);
    if (d) {
        PyObject *outs = PyList_New(nd->noutputs), *ints = outs ? PyTuple_New(nd->attrs.nints) : NULL;
        PyObject *xi = ints ? (nd->op == WK_OP_EXTERN ? PyLong_FromLong(nd->extern_index) : Py_NewRef(Py_None)) : NULL;
        PyObject *xn = xi ? (nd->op == WK_OP_EXTERN ? PyUnicode_FromString(nd->extern_name) : Py_NewRef(Py_None)) : NULL;
        PyObject *fv = xn ? PyFloat_FromDouble(nd->attrs.fvalue) : NULL; /* layer_norm's eps, var's correction */
        PyObject *iv = fv ? PyLong_FromLongLong(nd->attrs.ivalue) : NULL; /* INDEX: padding_idx + 1 */
        if (!iv || PyDict_SetItemString(d, "fvalue", fv) < 0 || PyDict_SetItemString(d, "ivalue", iv) < 0 ||
            PyDict_SetItemString(d, "correction_given", nd->attrs.ivalue ? Py_True : Py_False) < 0)
            Py_CLEAR(xn);
        Py_XDECREF(fv);
        Py_XDECREF(iv);
        if (xn) {
            for (int k = 0; k < nd->noutputs; k++) PyList_SET_ITEM(outs, k, PyLong_FromLong(nd->outputs[k]));
            for (int k = 0; k < nd->attrs.nints; k++) PyTuple_SET_ITEM(ints, k, PyLong_FromLongLong(nd->attrs.ints[k]));
        }
        if (!xn || PyDict_SetItemString(d, "outputs", outs) < 0 || PyDict_SetItemString(d, "ints", ints) < 0 ||
            PyDict_SetItemString(d, "extern_index", xi) < 0 || PyDict_SetItemString(d, "name", xn) < 0)
            Py_CLEAR(d);
        Py_XDECREF(outs);
        Py_XDECREF(ints);
        Py_XDECREF(xi);
        Py_XDECREF(xn);
    }
done:
    Py_DECREF(inputs);
    Py_XDECREF(dims);
    Py_XDECREF(dtype);
    Py_XDECREF(value);
    return d;
}

static PyObject *Graph_nodes(GraphObject *self, PyObject *unused) {
    (void)unused;
    int n = wk_graph_nnodes(self->g);
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *d = node_dict_Ref(self->g, wk_graph_node(self->g, i));
        if (!d) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, d);
    }
    return list;
}

static PyObject *Graph_outputs(GraphObject *self, PyObject *unused) {
    (void)unused;
    int n = wk_graph_noutputs(self->g);
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (int i = 0; i < n; i++) PyList_SET_ITEM(list, i, PyLong_FromLong(wk_graph_output_value(self->g, i)));
    return list;
}

static PyObject *Graph_value(GraphObject *self, PyObject *arg) {
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    if (check_value_id(self->g, id) < 0) return NULL;
    return value_dict_Ref(self->g, wk_graph_value(self->g, (int)id));
}

/* copy(extra=None) -> (Graph, value_map): a copy of this graph; extra maps a
 * node index to a list of output metadata that extern node gains after its
 * own outputs (autodiff keeps what an extern's backward reads: attention's
 * logsumexp). value_map[i] is value i's id in the copy. */
static PyObject *Graph_copy(GraphObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"extra", "inputs_only", NULL};
    PyObject *extra = Py_None;
    int inputs_only = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|Op:copy", kwlist, &extra, &inputs_only)) return NULL;
    if (inputs_only && extra != Py_None)
        return PyErr_Format(PyExc_TypeError, "wick: copy(inputs_only=True) takes no extra outputs");
    int nnodes = wk_graph_nnodes(self->g), nvalues = wk_graph_nvalues(self->g), nmetas = 0;
    int *counts = PyMem_Calloc((size_t)nnodes + 1, sizeof *counts);
    int *map = PyMem_Calloc((size_t)nvalues + 1, sizeof *map);
    WkTensorMeta *metas = NULL;
    PyObject *result = NULL, *items = NULL;
    if (!counts || !map) {
        PyErr_NoMemory();
        goto done;
    }
    if (extra != Py_None) {
        if (!PyDict_Check(extra)) {
            PyErr_SetString(PyExc_TypeError, "wick: copy(extra=) takes a dict {node index: [metadata]}");
            goto done;
        }
        Py_ssize_t pos = 0;
        PyObject *key, *val;
        while (PyDict_Next(extra, &pos, &key, &val)) {
            long n = PyLong_AsLong(key);
            if (n == -1 && PyErr_Occurred()) goto done;
            Py_ssize_t len = PySequence_Length(val);
            if (len < 0) goto done;
            if (n < 0 || n >= nnodes) {
                PyErr_Format(PyExc_IndexError, "wick: no node %ld", n);
                goto done;
            }
            counts[n] = (int)len;
            nmetas += (int)len;
        }
        metas = PyMem_Calloc((size_t)nmetas + 1, sizeof *metas);
        if (!metas) {
            PyErr_NoMemory();
            goto done;
        }
        for (int n = 0, k = 0; n < nnodes; n++) {
            if (!counts[n]) continue;
            PyObject *key2 = PyLong_FromLong(n);
            PyObject *seq = key2 ? PySequence_Fast(PyDict_GetItemWithError(extra, key2), "metadata list") : NULL;
            Py_XDECREF(key2);
            if (!seq) goto done;
            for (int j = 0; j < counts[n]; j++)
                if (parse_meta(PySequence_Fast_GET_ITEM(seq, j), &metas[k++]) < 0) {
                    Py_DECREF(seq);
                    goto done;
                }
            Py_DECREF(seq);
        }
    }
    wk_error_clear();
    WkGraph *c = inputs_only ? wk_graph_copy_inputs(self->g, map) : wk_graph_copy(self->g, counts, metas, map);
    if (!c) {
        PyErr_Format(PyExc_ValueError, "%s", wk_error_get());
        goto done;
    }
    GraphObject *copy = (GraphObject *)Graph_Type.tp_alloc(&Graph_Type, 0);
    if (!copy) {
        wk_graph_free(c);
        goto done;
    }
    copy->g = c;
    items = PyList_New(nvalues);
    for (int i = 0; items && i < nvalues; i++) PyList_SET_ITEM(items, i, PyLong_FromLong(map[i]));
    if (items) result = PyTuple_Pack(2, (PyObject *)copy, items);
    Py_DECREF(copy);
done:
    Py_XDECREF(items);
    PyMem_Free(counts);
    PyMem_Free(map);
    PyMem_Free(metas);
    return result;
}

/* replay(src, node, inputs, dims=None) -> first output id: table node
 * `node` of Graph src appended to this graph reading `inputs`, with src's
 * attributes (dims replaces a reduction's dims). */
static PyObject *Graph_replay(GraphObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"src", "node", "inputs", "dims", NULL};
    PyObject *src, *inputs_obj, *dims_obj = Py_None;
    int node;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!iO|O:replay", kwlist, &Graph_Type, &src, &node, &inputs_obj,
                                     &dims_obj))
        return NULL;
    int64_t dims64[WK_MAX_DIMS];
    int dims[WK_MAX_DIMS], ndims = -1;
    if (dims_obj != Py_None) {
        ndims = parse_int_seq(dims_obj, dims64, "dims");
        if (ndims < 0) return NULL;
        for (int i = 0; i < ndims; i++) dims[i] = (int)dims64[i];
    }
    int *inputs = NULL, ninputs = parse_value_ids(self->g, inputs_obj, &inputs);
    if (ninputs < 0) return NULL;
    wk_error_clear();
    int id = wk_graph_replay(self->g, ((GraphObject *)src)->g, node, inputs, ninputs, dims, ndims);
    PyMem_Free(inputs);
    if (id < 0) return PyErr_Format(PyExc_ValueError, "%s", wk_error_get());
    return PyLong_FromLong(id);
}

static PyObject *Graph_hash(GraphObject *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromUnsignedLongLong(wk_graph_hash(self->g));
}

static PyObject *Graph_repr(GraphObject *self) {
    return PyUnicode_FromFormat("<wick._C.Graph: %d inputs, %d nodes, %d outputs>",
                                wk_graph_ninputs(self->g), wk_graph_nnodes(self->g),
                                wk_graph_noutputs(self->g));
}

static PyMethodDef Graph_methods[] = {
    {"input", (PyCFunction)(void (*)(void))Graph_input, METH_VARARGS | METH_KEYWORDS,
     "input(dtype, sizes, strides, requires_grad=False, source='', device='cpu') -> value id"},
    {"input_like", (PyCFunction)(void (*)(void))Graph_input_like, METH_VARARGS | METH_KEYWORDS,
     "input_like(tensor, source='') -> value id, with the tensor's dtype/shape/strides/device"},
    {"scalar", (PyCFunction)Graph_scalar, METH_O, "scalar(bool|int|float) -> value id"},
    {"op", (PyCFunction)(void (*)(void))Graph_op, METH_VARARGS | METH_KEYWORDS,
     "op(name, inputs, dims=None, keepdim=False, dtype=None, ints=None) -> value id"},
    {"output", (PyCFunction)Graph_output, METH_O, "output(value id): append a graph output"},
    {"print", (PyCFunction)Graph_print, METH_NOARGS, "The graph as text."},
    {"extern", (PyCFunction)(void (*)(void))Graph_extern, METH_VARARGS | METH_KEYWORDS,
     "extern(index, inputs, outputs, name='extern') -> list of output value ids. outputs: one metadata per "
     "output, a (fake) tensor or a dict(dtype, sizes, strides[, device, requires_grad])."},
    {"compile", (PyCFunction)(void (*)(void))Graph_compile, METH_VARARGS | METH_KEYWORDS,
     "compile(externs=None): compile with wick's pipeline -> CompiledGraph (raises CompileError). "
     "externs: the extern table (see runtime.h), entry i for extern index i."},
    {"inputs", (PyCFunction)Graph_inputs, METH_NOARGS, "Graph inputs as a list of dicts."},
    {"nodes", (PyCFunction)Graph_nodes, METH_NOARGS, "Nodes as a list of dicts, in order."},
    {"outputs", (PyCFunction)Graph_outputs, METH_NOARGS, "Output value ids, in order."},
    {"value", (PyCFunction)Graph_value, METH_O, "value(id) -> dict(dtype, sizes, strides, ...)"},
    {"hash", (PyCFunction)Graph_hash, METH_NOARGS, "Structural hash (not sources)."},
    {"copy", (PyCFunction)(void (*)(void))Graph_copy, METH_VARARGS | METH_KEYWORDS,
     "copy(extra=None, inputs_only=False) -> (Graph, value_map): extra = {extern node index: [output metadata]}; "
     "inputs_only: the inputs alone (value_map -1 for the rest)"},
    {"replay", (PyCFunction)(void (*)(void))Graph_replay, METH_VARARGS | METH_KEYWORDS,
     "replay(src, node, inputs, dims=None) -> value id: src's table node appended, reading inputs"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject Graph_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wick._C.Graph",
    .tp_basicsize = sizeof(GraphObject),
    .tp_dealloc = (destructor)Graph_dealloc,
    .tp_repr = (reprfunc)Graph_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A wick graph under construction (wick's graph IR).",
    .tp_methods = Graph_methods,
    .tp_new = Graph_new,
};

/* ---- contract ---------------------------------------------------------- */

PyObject *wk_rt_graph_wrap_Steal(WkGraph *g) {
    GraphObject *self = PyObject_New(GraphObject, &Graph_Type);
    if (!self) {
        wk_graph_free(g);
        return NULL;
    }
    self->g = g;
    return (PyObject *)self;
}

WkGraph *wk_rt_graph_unwrap_Borrow(PyObject *obj) {
    if (!obj || !PyObject_TypeCheck(obj, &Graph_Type)) return NULL;
    return ((GraphObject *)obj)->g;
}

/* compiled.c's half of module init. */
int wk_rt_compiled_init(PyObject *module);

int wk_rt_init(PyObject *module) {
    if (PyType_Ready(&Graph_Type) < 0) return -1;
    if (PyModule_AddObjectRef(module, "Graph", (PyObject *)&Graph_Type) < 0) return -1;
    if (!CompileError) {
        CompileError = PyErr_NewExceptionWithDoc(
            "wick._C.CompileError", "wick's compiler could not compile a graph.", NULL, NULL);
        if (!CompileError) return -1;
    }
    if (PyModule_AddObjectRef(module, "CompileError", CompileError) < 0) return -1;
    return wk_rt_compiled_init(module);
}
