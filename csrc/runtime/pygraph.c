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
    static char *kwlist[] = {"dtype", "sizes", "strides", "requires_grad", "source", "device", NULL};
    PyObject *dtype_obj, *sizes_obj, *strides_obj, *device_obj = NULL;
    int requires_grad = 0;
    const char *source = "";
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|psO:input", kwlist, &dtype_obj, &sizes_obj,
                                     &strides_obj, &requires_grad, &source, &device_obj))
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
    int id = wk_graph_input(self->g, (WkDType)dt, dev, nd, sizes, strides, requires_grad, source);
    if (id < 0) return PyErr_Format(PyExc_ValueError, "%s", wk_error_get());
    return PyLong_FromLong(id);
}

static PyObject *Graph_input_like(GraphObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"tensor", "source", NULL};
    PyObject *t;
    const char *source = "";
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|s:input_like", kwlist, &t, &source))
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
    call_kw = Py_BuildValue("{s:O,s:s,s:O}", "requires_grad", PyObject_IsTrue(rg) ? Py_True : Py_False,
                            "source", source, "device", device);
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
    static char *kwlist[] = {"name", "inputs", "dims", "keepdim", "dtype", "correction", NULL};
    const char *name;
    PyObject *inputs_obj, *dims_obj = Py_None, *dtype_obj = Py_None, *corr_obj = Py_None;
    int keepdim = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "sO|OpOO:op", kwlist, &name, &inputs_obj, &dims_obj,
                                     &keepdim, &dtype_obj, &corr_obj))
        return NULL;
    int op = wk_op_from_name(name);
    if (op < 0) return PyErr_Format(PyExc_ValueError, "wick: unknown op '%s'", name);
    if (op == WK_OP_SCALAR)
        return PyErr_Format(PyExc_ValueError, "wick: use Graph.scalar() to make a scalar");
    int64_t inputs64[WK_MAX_DIMS];
    int ninputs = parse_int_seq(inputs_obj, inputs64, "inputs");
    if (ninputs < 0) return NULL;
    if (ninputs > 3)
        return PyErr_Format(PyExc_ValueError, "wick: op '%s' takes at most 3 inputs, got %d", name,
                            ninputs);
    int inputs[3] = {0, 0, 0};
    for (int i = 0; i < ninputs; i++) {
        if (check_value_id(self->g, (long)inputs64[i]) < 0) return NULL;
        inputs[i] = (int)inputs64[i];
    }
    WkAttrs attrs;
    memset(&attrs, 0, sizeof attrs);
    attrs.keepdim = keepdim;
    if (dims_obj != Py_None) {
        int64_t dims[WK_MAX_DIMS];
        int nd;
        if (PyLong_Check(dims_obj)) {
            dims[0] = PyLong_AsLongLong(dims_obj);
            if (dims[0] == -1 && PyErr_Occurred()) return NULL;
            nd = 1;
        } else {
            nd = parse_int_seq(dims_obj, dims, "dims");
            if (nd < 0) return NULL;
        }
        attrs.ndims = nd;
        for (int i = 0; i < nd; i++) attrs.dims[i] = (int)dims[i];
    }
    if (corr_obj != Py_None) { /* var/std's correction */
        double corr = PyFloat_AsDouble(corr_obj);
        if (corr == -1.0 && PyErr_Occurred()) return NULL;
        attrs.fvalue = corr;
        attrs.ivalue = 1;
    }
    if (dtype_obj != Py_None) {
        int dt = parse_dtype(dtype_obj);
        if (dt < 0) return NULL;
        attrs.dtype = (WkDType)dt;
        attrs.has_dtype = 1;
    }
    wk_error_clear();
    int id = wk_graph_op(self->g, (WkOp)op, inputs, ninputs, &attrs);
    if (id < 0) return PyErr_Format(PyExc_ValueError, "%s", wk_error_get());
    return PyLong_FromLong(id);
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

static PyObject *Graph_compile(GraphObject *self, PyObject *unused) {
    (void)unused;
    wk_error_clear();
    PyObject *c = wk_rt_compile_Ref(self->g);
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
    if (info->kind == WK_KIND_REDUCTION) {
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
     "op(name, inputs, dims=None, keepdim=False, dtype=None) -> value id"},
    {"output", (PyCFunction)Graph_output, METH_O, "output(value id): append a graph output"},
    {"print", (PyCFunction)Graph_print, METH_NOARGS, "The graph as text."},
    {"compile", (PyCFunction)Graph_compile, METH_NOARGS,
     "Compile with wick's pipeline -> CompiledGraph (raises CompileError)."},
    {"inputs", (PyCFunction)Graph_inputs, METH_NOARGS, "Graph inputs as a list of dicts."},
    {"nodes", (PyCFunction)Graph_nodes, METH_NOARGS, "Nodes as a list of dicts, in order."},
    {"outputs", (PyCFunction)Graph_outputs, METH_NOARGS, "Output value ids, in order."},
    {"value", (PyCFunction)Graph_value, METH_O, "value(id) -> dict(dtype, sizes, strides, ...)"},
    {"hash", (PyCFunction)Graph_hash, METH_NOARGS, "Structural hash (not sources)."},
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
