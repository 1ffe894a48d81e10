/* torchinfo.c — owns the torch objects capture compares against
 * (torch.Tensor, nn.Module, dtypes, torch.no_grad, ...), the map from torch
 * callables to op-table ops and each op's parsed signature. Resolved once,
 * the first time a frame is captured after torch is imported; the
 * references live as long as the process. */
#include <string.h>

#include "interp.h"

static int torch_ready;
PyObject *cap_torch_mod; /* strong */
PyObject *cap_fn_to_op;
PyObject *cap_dtype_objs[WK_NDTYPES];
PyTypeObject *cap_tensor_type, *cap_param_type, *cap_module_type;
PyObject *cap_size_type, *cap_device_type, *cap_dtype_type, *cap_strided_layout;
PyObject *cap_no_grad_type, *cap_enable_grad_type;
PyObject *cap_operator_mod, *cap_finfo_type, *cap_iinfo_type;
PyObject *cap_enum_type;
PyObject *cap_s_layout, *cap_s_shape, *cap_s_stride, *cap_s_dtype, *cap_s_device, *cap_s_requires_grad;

typedef struct {
    char *name;
    int op;
} MethodOp;
static WkVec(MethodOp) method_table;

CapSig cap_sigs[WK_NOPS]; /* one parsed signature per op: "input, other, *, alpha=1" */

static void parse_sig(const char *s, CapSig *sig) {
    int kwonly = 0;
    sig->n = 0;
    while (*s) {
        while (*s == ' ' || *s == ',') s++;
        if (!*s) break;
        const char *e = s;
        while (*e && *e != ',') e++;
        /* "()" defaults hold no comma, so a comma always ends a parameter */
        char buf[64];
        size_t len = (size_t)(e - s);
        if (len >= sizeof buf) len = sizeof buf - 1;
        memcpy(buf, s, len);
        buf[len] = 0;
        while (len && buf[len - 1] == ' ') buf[--len] = 0;
        if (strcmp(buf, "*") == 0) {
            kwonly = 1;
        } else if (sig->n < CAP_MAX_PARAMS) {
            CapParam *p = &sig->p[sig->n++];
            memset(p, 0, sizeof *p);
            char *eq = strchr(buf, '=');
            if (eq) {
                *eq = 0;
                p->has_default = 1;
                snprintf(p->dflt, sizeof p->dflt, "%s", eq + 1);
            }
            snprintf(p->name, sizeof p->name, "%s", buf);
            p->kwonly = kwonly;
        }
        s = e;
    }
}

PyObject *cap_default_value_Ref(const char *d) {
    if (strcmp(d, "None") == 0) Py_RETURN_NONE;
    if (strcmp(d, "False") == 0) Py_RETURN_FALSE;
    if (strcmp(d, "True") == 0) Py_RETURN_TRUE;
    if (strcmp(d, "()") == 0) return PyTuple_New(0);
    size_t len = strlen(d);
    if (len >= 2 && d[0] == '\'' && d[len - 1] == '\'') return PyUnicode_FromStringAndSize(d + 1, (Py_ssize_t)len - 2);
    if (strchr(d, '.') || strchr(d, 'e')) return PyFloat_FromDouble(atof(d));
    return PyLong_FromLongLong(atoll(d));
}

static PyObject *resolve_path_Ref(PyObject *root, const char *path) {
    PyObject *cur = Py_NewRef(root);
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *tok = strtok(buf, "."); tok; tok = strtok(NULL, ".")) {
        PyObject *next = PyObject_GetAttrString(cur, tok);
        Py_DECREF(cur);
        if (!next) return NULL;
        cur = next;
    }
    return cur;
}

/* 0 when torch is ready, 1 when torch is not imported (no tensors can
 * exist), -1 with a Python exception. */
int cap_init_torch(void) {
    if (torch_ready) return 0;
    PyObject *name = PyUnicode_FromString("torch");
    if (!name) return -1;
    PyObject *mod = PyImport_GetModule(name);
    Py_DECREF(name);
    if (!mod) return PyErr_Occurred() ? -1 : 1;
    cap_torch_mod = mod;
    cap_fn_to_op = PyDict_New();
    if (!cap_fn_to_op) return -1;
    cap_s_layout = PyUnicode_InternFromString("layout");
    cap_s_shape = PyUnicode_InternFromString("shape");
    cap_s_stride = PyUnicode_InternFromString("stride");
    cap_s_dtype = PyUnicode_InternFromString("dtype");
    cap_s_device = PyUnicode_InternFromString("device");
    cap_s_requires_grad = PyUnicode_InternFromString("requires_grad");
    if (!cap_s_layout || !cap_s_shape || !cap_s_stride || !cap_s_dtype || !cap_s_device || !cap_s_requires_grad) return -1;
    PyObject *tt = PyObject_GetAttrString(mod, "Tensor");
    PyObject *nn = tt ? resolve_path_Ref(mod, "nn.Parameter") : NULL;
    cap_size_type = nn ? PyObject_GetAttrString(mod, "Size") : NULL;
    cap_device_type = cap_size_type ? PyObject_GetAttrString(mod, "device") : NULL;
    cap_dtype_type = cap_device_type ? PyObject_GetAttrString(mod, "dtype") : NULL;
    cap_strided_layout = cap_dtype_type ? PyObject_GetAttrString(mod, "strided") : NULL;
    if (!cap_strided_layout || !PyType_Check(tt) || !PyType_Check(nn)) {
        Py_XDECREF(tt);
        Py_XDECREF(nn);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "wick: torch.Tensor is not a type");
        return -1;
    }
    cap_tensor_type = (PyTypeObject *)tt;
    cap_param_type = (PyTypeObject *)nn;
    cap_operator_mod = PyImport_ImportModule("operator");
    if (!cap_operator_mod) return -1;
    PyObject *enum_mod = PyImport_ImportModule("enum");
    cap_enum_type = enum_mod ? PyObject_GetAttrString(enum_mod, "EnumMeta") : NULL;
    Py_XDECREF(enum_mod);
    PyErr_Clear();
    cap_finfo_type = PyObject_GetAttrString(mod, "finfo");
    cap_iinfo_type = PyObject_GetAttrString(mod, "iinfo");
    PyErr_Clear();
    cap_no_grad_type = PyObject_GetAttrString(mod, "no_grad");
    cap_enable_grad_type = PyObject_GetAttrString(mod, "enable_grad");
    PyErr_Clear();
    PyObject *mt = resolve_path_Ref(mod, "nn.Module");
    if (mt && PyType_Check(mt)) cap_module_type = (PyTypeObject *)mt;
    else Py_XDECREF(mt);
    PyErr_Clear();
    for (int d = 0; d < WK_NDTYPES; d++) {
        cap_dtype_objs[d] = PyObject_GetAttrString(mod, wk_dtype_name((WkDType)d));
        if (!cap_dtype_objs[d]) PyErr_Clear();
    }
    for (int op = 0; op < WK_NOPS; op++) {
        const WkOpInfo *info = wk_op_info((WkOp)op);
        parse_sig(info->signature, &cap_sigs[op]);
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", info->torch);
        char *save = NULL;
        for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
            PyObject *obj = NULL;
            if (strncmp(tok, "torch.", 6) == 0) {
                obj = resolve_path_Ref(mod, tok + 6);
            } else if (strncmp(tok, "Tensor.", 7) == 0) {
                MethodOp m = {wk_xstrdup(tok + 7), op};
                wk_vec_push(&method_table, m);
                obj = PyObject_GetAttrString(tt, tok + 7);
            }
            if (!obj) { /* an op this torch lacks: leave it unmapped */
                PyErr_Clear();
                continue;
            }
            PyObject *num = PyLong_FromLong(op);
            int rc = num ? PyDict_SetItem(cap_fn_to_op, obj, num) : -1;
            Py_XDECREF(num);
            Py_DECREF(obj);
            if (rc < 0) PyErr_Clear();
        }
    }
    torch_ready = 1;
    return 0;
}

/* Only the dtypes kernels compute: what table ops read and make. A complex
 * dtype is cap_dtype_of_obj_any's: values that pass between externs. */
int cap_dtype_of_obj(PyObject *o) {
    int d = cap_dtype_of_obj_any(o);
    return d >= 0 && wk_dtype_supported((WkDType)d) ? d : -1;
}

int cap_dtype_of_obj_any(PyObject *o) {
    for (int d = 0; d < WK_NDTYPES; d++)
        if (cap_dtype_objs[d] && cap_dtype_objs[d] == o) return d;
    return -1;
}

int cap_is_tensor_obj(PyObject *o) {
    return cap_tensor_type && (Py_TYPE(o) == cap_tensor_type || Py_TYPE(o) == cap_param_type);
}

int cap_method_op(const char *name) {
    for (int i = 0; i < method_table.len; i++)
        if (strcmp(method_table.data[i].name, name) == 0) return method_table.data[i].op;
    return -1;
}
