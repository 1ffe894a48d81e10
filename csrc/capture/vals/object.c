/* vals/object.c — the object kind: objects reached from the frame's
 * arguments (an nn.Module and its submodules, plain instances). Each keeps
 * its source (argument + attribute path); the transformed code reads what
 * the graph needs afresh on every call and guards check what was read.
 * Containers of modules (ModuleList, Sequential, ModuleDict) index and
 * iterate over their children. */
#include <string.h>

#include "../interp.h"

int cap_is_torch_module(PyObject *m) {
    const char *n = PyModule_GetName(m);
    if (!n) {
        PyErr_Clear();
        return 0;
    }
    return strcmp(n, "torch") == 0 || strncmp(n, "torch.", 6) == 0 || strcmp(n, "math") == 0 ||
           strcmp(n, "operator") == 0;
}

/* A plain data attribute of an argument object (an nn.Module's parameter,
 * buffer, submodule or number; an instance attribute of a plain object).
 * The transformed code reads it afresh on each call, and guards check what
 * it reads: its type, tensor metadata or value. Properties and other data
 * descriptors would run user code on every read: unsupported. */
int cap_object_attr(Interp *I, Sv *o, PyObject *name, int method) {
    const char *nm = PyUnicode_AsUTF8(name);
    if (!nm) return cap_py_failed(I, "attribute name");
    PyTypeObject *tp = Py_TYPE(o->obj);
    int is_module = cap_module_type && PyObject_TypeCheck(o->obj, cap_module_type);
    if (!is_module && tp->tp_getattro != PyObject_GenericGetAttr)
        return cap_unsupported(I, "attribute .%s of %s (custom __getattr__)", nm, tp->tp_name);
    PyObject *d = _PyType_Lookup(tp, name);
    if (d && Py_TYPE(d)->tp_descr_set)
        return cap_unsupported(I, "attribute .%s of %s is a property or descriptor", nm, tp->tp_name);
    if (o->path && PyTuple_GET_SIZE(o->path) >= 8) return cap_unsupported(I, "attribute path too long");
    PyObject *v = PyObject_GetAttr(o->obj, name);
    if (!v) return cap_py_failed(I, nm);
    Py_ssize_t np = o->path ? PyTuple_GET_SIZE(o->path) : 0;
    PyObject *path = PyTuple_New(np + 1);
    if (!path) {
        Py_DECREF(v);
        return cap_py_failed(I, nm);
    }
    for (Py_ssize_t i = 0; i < np; i++) PyTuple_SET_ITEM(path, i, Py_NewRef(PyTuple_GET_ITEM(o->path, i)));
    PyTuple_SET_ITEM(path, np, Py_NewRef(name));
    Sv *s = NULL;
    if (method && PyMethod_Check(v) && PyMethod_GET_SELF(v) == o->obj &&
        PyFunction_Check(PyMethod_GET_FUNCTION(v))) {
        /* self.helper(...): the function from o's (guarded, exact) type, inlined with self */
        Sv *fn = sv_const(I, PyMethod_GET_FUNCTION(v));
        Py_DECREF(v);
        Py_DECREF(path);
        if (sv_push(I, fn) < 0) return -1;
        return sv_push(I, o);
    }
    if (cap_is_tensor_obj(v)) {
        PyObject *layout = PyObject_GetAttr(v, cap_s_layout);
        int strided = layout == cap_strided_layout;
        Py_XDECREF(layout);
        PyErr_Clear();
        wk_guard_tensor_at(I->guards, o->arg, path, v);
        if (strided) {
            PyObject *rg = PyObject_GetAttr(v, cap_s_requires_grad);
            if (rg == Py_True) wk_guard_grad_mode(I->guards, I->entry_grad);
            Py_XDECREF(rg);
            PyErr_Clear();
            s = sv_new(I, SV_TENSOR);
        } else {
            s = sv_new(I, SV_OPAQUE);
        }
    } else if (v == Py_None || cap_is_number(v) || PyUnicode_CheckExact(v) ||
               (cap_dtype_type && Py_TYPE(v) == (PyTypeObject *)cap_dtype_type) || (PyTuple_CheckExact(v) && cap_is_plain(v))) {
        wk_guard_equals_at(I->guards, o->arg, path, v);
        s = sv_new(I, SV_CONST);
    } else if ((cap_module_type && PyObject_TypeCheck(v, cap_module_type)) ||
               (Py_TYPE(v)->tp_getattro == PyObject_GenericGetAttr && Py_TYPE(v)->tp_dictoffset != 0 &&
                !PyType_Check(v) && !PyModule_Check(v) && !PyCallable_Check(v))) {
        wk_guard_type_at(I->guards, o->arg, path, Py_TYPE(v));
        s = sv_new(I, SV_OPAQUE);
    } else {
        Py_DECREF(v);
        Py_DECREF(path);
        return cap_unsupported(I, "attribute .%s of %s (a %s)", nm, tp->tp_name, Py_TYPE(v)->tp_name);
    }
    s->obj = v;
    s->arg = o->arg;
    s->path = path;
    if (method && sv_push(I, I->null_sv) < 0) return -1;
    return sv_push(I, s);
}

static int is_module(PyObject *o) { return cap_module_type && PyObject_TypeCheck(o, cap_module_type); }

/* The children of a module container, in order: (key, module) pairs from
 * its _modules dict. 0 when o is no such container. */
static int module_children(PyObject *o, PyObject **mods_Borrow) {
    if (!is_module(o)) return 0;
    const char *tn = Py_TYPE(o)->tp_name;
    if (strcmp(tn, "ModuleList") != 0 && strcmp(tn, "Sequential") != 0 && strcmp(tn, "ModuleDict") != 0) return 0;
    PyObject *d = PyObject_GenericGetDict(o, NULL);
    if (!d) {
        PyErr_Clear();
        return 0;
    }
    PyObject *mods = PyDict_GetItemString(d, "_modules");
    Py_DECREF(d);
    if (!mods || !PyDict_Check(mods)) return 0;
    *mods_Borrow = mods;
    return 1;
}

static Sv *child(Interp *I, Sv *o, PyObject *key) {
    int sp = I->f->sp;
    if (cap_object_attr(I, o, key, 0) < 0) return NULL;
    Sv *r = sv_pop(I);
    I->f->sp = sp;
    return r;
}

static int object_iterate(Interp *I, Sv *o, SvList *out) {
    PyObject *mods;
    if (!module_children(o->obj, &mods)) return cap_unsupported(I, "iterating a %s", cap_type_name(o->obj));
    int dict = strcmp(Py_TYPE(o->obj)->tp_name, "ModuleDict") == 0;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(mods, &pos, &k, &v)) {
        if (v == Py_None) continue;
        Sv *c = dict ? sv_const(I, k) : child(I, o, k);
        if (!c) return -1;
        wk_vec_push(out, c);
    }
    return 0;
}

static Sv *object_subscript(Interp *I, Sv *o, Sv *k) {
    PyObject *mods;
    if (!module_children(o->obj, &mods) || k->kind != SV_CONST)
        return cap_unsupported(I, "subscript of a %s by a %s", cap_type_name(o->obj), sv_desc(k)), NULL;
    if (PyUnicode_CheckExact(k->obj)) return child(I, o, k->obj);
    if (!PyLong_CheckExact(k->obj)) return cap_unsupported(I, "subscript of a module container by a %s", sv_desc(k)), NULL;
    SvList items = {0};
    if (object_iterate(I, o, &items) < 0) return wk_vec_free(&items), NULL;
    long i = PyLong_AsLong(k->obj);
    if (i < 0) i += items.len;
    Sv *r = i >= 0 && i < items.len ? items.data[i] : NULL;
    wk_vec_free(&items);
    if (!r) return cap_unsupported(I, "module index out of range"), NULL;
    return r;
}

static int object_truth(Interp *I, Sv *o, int *out) {
    PyTypeObject *tp = Py_TYPE(o->obj);
    PyObject *mods;
    if (module_children(o->obj, &mods)) {
        SvList items = {0};
        if (object_iterate(I, o, &items) < 0) return wk_vec_free(&items), -1;
        *out = items.len > 0;
        wk_vec_free(&items);
        return 0;
    }
    /* an object without __bool__ / __len__ is true; its type is guarded */
    if (!(tp->tp_as_number && tp->tp_as_number->nb_bool) && !(tp->tp_as_mapping && tp->tp_as_mapping->mp_length) &&
        !(tp->tp_as_sequence && tp->tp_as_sequence->sq_length)) {
        *out = 1;
        return 0;
    }
    return cap_unsupported(I, "truth value of a %s", tp->tp_name);
}

static int object_getattr(Interp *I, Sv *o, PyObject *name, int method) {
    if (o->arg < 0) return cap_unsupported(I, "attribute .%s of %s", PyUnicode_AsUTF8(name), cap_type_name(o->obj));
    return cap_object_attr(I, o, name, method);
}

const SvOps cap_opaque_kind = {
    .name = NULL,
    .truth = object_truth,
    .getattr = object_getattr,
    .subscript = object_subscript,
    .iterate = object_iterate,
};
