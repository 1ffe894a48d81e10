/* module.c — wick._C: joins the layers into one extension module. Each
 * Python-facing layer adds its own types and functions through its init
 * function; this file only owns the module object and the small functions
 * that expose Python-free layers (the op table, the knob registry). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "capture/capture.h"
#include "graph/graph.h"
#include "runtime/runtime.h"

static PyObject *py_op_table(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    static const char *const kinds[] = {"pointwise", "reduction", "constant", "extern"};
    static const char *const shapes[] = {"broadcast", "reduce", "same_dim", "scalar", "view", "cat",
                                         "pad", "index", "gather", "one_hot", "sizes", "scatter"};
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    for (int op = 0; op < WK_NOPS; op++) {
        const WkOpInfo *info = wk_op_info((WkOp)op);
        PyObject *row = Py_BuildValue("{s:s,s:s,s:s,s:i,s:s,s:s}", "name", info->name, "kind",
                                      kinds[info->kind], "shape", shapes[info->shape], "arity", info->arity,
                                      "signature", info->signature, "torch", info->torch);
        if (!row || PyList_Append(list, row) < 0) {
            Py_XDECREF(row);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(row);
    }
    return list;
}

static PyObject *py_env_reload(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    wk_env_reload();
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"op_table", py_op_table, METH_NOARGS, "The op table as a list of dicts (name, kind, shape, arity, signature, torch)."},
    {"env_reload", py_env_reload, METH_NOARGS, "Re-read every WICK_* environment variable."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef wick_module = {
    PyModuleDef_HEAD_INIT, "wick._C", "wick's C core.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__C(void) {
    PyObject *m = PyModule_Create(&wick_module);
    if (!m) return NULL;
    if (wk_hook_init(m) < 0 || wk_cap_init(m) < 0 || wk_rt_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    wk_hook_set_compiler(wk_cap_compile_frame);
    return m;
}
