/* vals/scratch.c — scratch objects: real Python objects made at capture
 * time that nothing outside the capture can reach.
 *
 * copy.deepcopy(x) / copy.copy(x) of an object reached from the frame's
 * arguments (a model's config: transformers' T5 and Whisper deep-copy it to
 * set up their decoder's cache) is made for real now, and x is guarded
 * equal (==) to a snapshot taken now, so the copy is what the frame would
 * make on a later call. Only objects whose == compares values are copied
 * (the snapshot must equal x). The copy, and everything reached through its
 * instance state (its __dict__, the items of its containers, what their
 * builtin methods return), is a scratch value: reads, attribute and item
 * writes, iteration and builtin-method calls on it run for real at capture
 * time, and only touch the scratch objects. Methods its class defines in
 * Python are inlined with the scratch object as self, like any call.
 * Attributes found on the class are shared with the program: read-only
 * constants. Atomic values (numbers, strings, types, functions) are
 * constants; a tensor inside one is unsupported.
 *
 * A scratch value never leaves the capture: returning it, or storing it in
 * an object the program sees, is unsupported (no reconstruct), so nothing
 * made here is ever observed. */
#include <string.h>

#include "../interp.h"

static PyObject *deepcopy_fn, *copy_fn; /* copy.deepcopy, copy.copy */

static int init_copy(void) {
    if (deepcopy_fn) return 0;
    PyObject *m = PyImport_ImportModule("copy");
    if (!m) return -1;
    deepcopy_fn = PyObject_GetAttrString(m, "deepcopy");
    copy_fn = PyObject_GetAttrString(m, "copy");
    Py_DECREF(m);
    return deepcopy_fn && copy_fn ? 0 : -1;
}

static int is_atomic(PyObject *v) {
    return cap_is_plain(v) || PyType_Check(v) || PyFunction_Check(v) || PyModule_Check(v) ||
           (PyCFunction_Check(v) && (!PyCFunction_GET_SELF(v) || PyModule_Check(PyCFunction_GET_SELF(v)))) ||
           v == Py_NotImplemented || PyCode_Check(v);
}

static Sv *scratch_new(Interp *I, PyObject *o_Steal) {
    Sv *s = sv_new(I, SV_SCRATCH);
    s->obj = o_Steal;
    return s;
}

/* A value read from a scratch object's own state (instance_level) or from
 * its class (shared: a constant). Steals v. */
static Sv *wrap(Interp *I, PyObject *v, int instance_level) {
    if (!v) return NULL;
    if (cap_tensor_type && PyObject_TypeCheck(v, cap_tensor_type)) {
        Py_DECREF(v);
        return cap_unsupported(I, "a tensor inside a copied object"), NULL;
    }
    if (is_atomic(v) || !instance_level) return sv_const_Steal(I, v);
    return scratch_new(I, v);
}

/* The object an argument of a real call stands for: a plain constant or a
 * scratch value (borrowed), else NULL. A tuple or list built during
 * capture from such values becomes a scratch value itself, in place (every
 * alias of it then sees the real object, and its later changes are the
 * real object's). */
static PyObject *as_object(Sv *s) {
    return s->kind == SV_TUPLE || s->kind == SV_LIST ? NULL : (s->kind == SV_SCRATCH ? s->obj
           : s->kind == SV_CONST && (cap_is_plain(s->obj) || is_atomic(s->obj)) ? s->obj : NULL);
}

static PyObject *adopt(Sv *s, int depth) {
    PyObject *o = as_object(s);
    if (o || depth > 8 || (s->kind != SV_TUPLE && s->kind != SV_LIST) || s->obj) return o;
    int n = s->items.len;
    PyObject *r = s->kind == SV_TUPLE ? PyTuple_New(n) : PyList_New(n);
    for (int i = 0; r && i < n; i++) {
        PyObject *x = adopt(s->items.data[i], depth + 1);
        if (!x) {
            Py_CLEAR(r);
            break;
        }
        if (s->kind == SV_TUPLE) PyTuple_SET_ITEM(r, i, Py_NewRef(x));
        else PyList_SET_ITEM(r, i, Py_NewRef(x));
    }
    if (!r) {
        PyErr_Clear();
        return NULL;
    }
    wk_vec_free(&s->items);
    s->kind = SV_SCRATCH;
    s->obj = r;
    return r;
}

/* attribute reads and writes are the generic ones (or transformers' config
 * renaming): what runs for real on a copy is CPython's own code */
static int plain_access(PyTypeObject *tp) {
    if (cap_module_type && PyType_IsSubtype(tp, cap_module_type)) return 0;
    return (tp->tp_getattro == PyObject_GenericGetAttr && tp->tp_setattro == PyObject_GenericSetAttr) ||
           cap_renaming_getattribute(tp);
}

/* copy.deepcopy(x) / copy.copy(x): NULL without a reason when fn is
 * neither, or x is not something copied here. */
Sv *cap_scratch_copy_call(Interp *I, PyObject *fn, const Args *a) {
    if (!PyFunction_Check(fn) || init_copy() < 0) {
        PyErr_Clear();
        return NULL;
    }
    if ((fn != deepcopy_fn && fn != copy_fn) || a->npos != 1 || a->nkw) return NULL;
    Sv *x = a->pos[0];
    if (x->kind == SV_CONST && is_atomic(x->obj)) return x; /* copies of atomic values are themselves */
    if (x->kind == SV_SCRATCH) {
        PyObject *c = PyObject_CallOneArg(fn, x->obj);
        if (!c) return cap_raise_current(I, "copy"), NULL;
        return scratch_new(I, c);
    }
    if (x->kind != SV_OPAQUE || x->arg < 0 || !x->obj || cap_is_tensor_obj(x->obj)) return NULL;
    if (cap_tensor_type && PyObject_TypeCheck(x->obj, cap_tensor_type)) return NULL;
    if (!plain_access(Py_TYPE(x->obj)))
        return cap_unsupported(I, "copy of a %s with custom attribute access", cap_type_name(x->obj)), NULL;
    for (int i = 0; i < I->overlay.len; i++) /* the frame wrote to it: the real object is stale */
        if (I->overlay.data[i].obj == x->obj)
            return cap_unsupported(I, "copy of an object the frame changed"), NULL;
    PyObject *snapshot = PyObject_CallOneArg(deepcopy_fn, x->obj);
    if (!snapshot) return cap_py_failed(I, "copy.deepcopy"), NULL;
    int eq = PyObject_RichCompareBool(snapshot, x->obj, Py_EQ);
    if (eq <= 0) {
        Py_DECREF(snapshot);
        if (eq < 0) return cap_py_failed(I, "== of a copy"), NULL;
        return cap_unsupported(I, "copy of a %s that == does not compare by value", cap_type_name(x->obj)), NULL;
    }
    wk_guard_equals_at(I->guards, x->arg, x->path, snapshot);
    Py_DECREF(snapshot);
    PyObject *c = PyObject_CallOneArg(fn, x->obj);
    if (!c) return cap_py_failed(I, "copy"), NULL;
    if (fn == copy_fn) { /* a shallow copy shares the argument's parts: those are not scratch */
        Py_DECREF(c);
        return cap_unsupported(I, "copy.copy of an argument object"), NULL;
    }
    return scratch_new(I, c);
}

/* setattr(o, name, v) / delattr(o, name) on a scratch object: NULL without
 * a reason when fn is neither or o is not scratch */
Sv *cap_scratch_builtin_call(Interp *I, PyObject *fn, const Args *a) {
    if (!PyCFunction_Check(fn) || PyCFunction_GET_SELF(fn) == NULL || !PyModule_Check(PyCFunction_GET_SELF(fn)))
        return NULL;
    const char *n = ((PyCFunctionObject *)fn)->m_ml->ml_name;
    int set = strcmp(n, "setattr") == 0, del = strcmp(n, "delattr") == 0;
    if ((!set && !del) || a->nkw || a->npos != (set ? 3 : 2) || a->pos[0]->kind != SV_SCRATCH) return NULL;
    PyObject *mod = PyModule_GetNameObject(PyCFunction_GET_SELF(fn));
    int builtin = mod && PyUnicode_CompareWithASCIIString(mod, "builtins") == 0;
    Py_XDECREF(mod);
    PyErr_Clear();
    if (!builtin) return NULL;
    Sv *name = a->pos[1];
    if (name->kind != SV_CONST || !PyUnicode_CheckExact(name->obj))
        return cap_unsupported(I, "%s() with a %s name", n, sv_desc(name)), NULL;
    if (cap_scratch_setattr(I, a->pos[0], name->obj, set ? a->pos[2] : NULL) < 0) return NULL;
    return sv_const(I, Py_None);
}

static int push_result(Interp *I, Sv *v, int method) {
    if (!v) return -1;
    if (method && sv_push(I, I->null_sv) < 0) return -1;
    return sv_push(I, v);
}

/* 1 when name is in o's own __dict__ */
static int in_instance_dict(PyObject *o, PyObject *name) {
    PyObject **dp = _PyObject_GetDictPtr(o);
    if (!dp || !*dp) {
        /* 3.11+/3.12 may keep instance attributes inline: ask for the dict */
        PyObject *d = PyObject_GenericGetDict(o, NULL);
        if (!d) {
            PyErr_Clear();
            return 0;
        }
        int r = PyDict_Contains(d, name) == 1;
        Py_DECREF(d);
        PyErr_Clear();
        return r;
    }
    int r = PyDict_Contains(*dp, name) == 1;
    PyErr_Clear();
    return r;
}

static int scratch_getattr(Interp *I, Sv *s, PyObject *name, int method) {
    const char *n = PyUnicode_AsUTF8(name);
    if (!n) return cap_py_failed(I, "attribute name");
    PyTypeObject *tp = Py_TYPE(s->obj);
    PyObject *d = _PyType_Lookup(tp, name);
    int own = in_instance_dict(s->obj, name);
    if (d && Py_TYPE(d) == &PyProperty_Type) { /* its getter inlined with self, as for any object */
        PyObject *fget = PyObject_GetAttrString(d, "fget");
        if (!fget) return cap_py_failed(I, n);
        int ok = PyFunction_Check(fget);
        Sv *getter = sv_const_Steal(I, fget);
        if (!ok) return cap_unsupported(I, "property .%s of a copied %s with a builtin getter", n, tp->tp_name);
        wk_guard_type_attr_is(I->guards, tp, name, d);
        return cap_push_property(I, s, getter, method);
    }
    if (d && PyFunction_Check(d) && !own) { /* a method its class defines in Python: inlined */
        wk_guard_type_attr_is(I->guards, tp, name, d);
        Sv *fn = sv_const(I, d);
        if (method) {
            if (sv_push(I, fn) < 0) return -1;
            return sv_push(I, s);
        }
        return sv_push(I, cap_partial_new(I, fn, &s, 1, NULL));
    }
    PyObject *v = PyObject_GetAttr(s->obj, name);
    if (!v) return cap_raise_current(I, n);
    if (PyMethod_Check(v) && PyFunction_Check(PyMethod_GET_FUNCTION(v))) { /* a classmethod, or such */
        PyObject *self = PyMethod_GET_SELF(v), *func = PyMethod_GET_FUNCTION(v);
        Sv *self_sv = self == s->obj ? s : sv_const(I, self);
        Sv *fn = sv_const(I, func);
        Py_DECREF(v);
        if (method) {
            if (sv_push(I, fn) < 0) return -1;
            return sv_push(I, self_sv);
        }
        return sv_push(I, cap_partial_new(I, fn, &self_sv, 1, NULL));
    }
    /* builtin methods bound to it, its __dict__, its own attributes: its state;
     * what the class holds (and properties computed from it) is shared */
    int instance_level = own || strcmp(n, "__dict__") == 0;
    if (PyCFunction_Check(v) && PyCFunction_GET_SELF(v) == s->obj) return push_result(I, scratch_new(I, v), method);
    return push_result(I, wrap(I, v, instance_level), method);
}

/* a builtin method of a scratch object (dict.items, list.append, ...), run for real */
static Sv *scratch_call(Interp *I, Sv *c, const Args *a) {
    if (!PyCFunction_Check(c->obj)) return cap_unsupported(I, "call of a copied %s", cap_type_name(c->obj)), NULL;
    PyObject *t = PyTuple_New(a->npos), *kw = a->nkw ? PyDict_New() : NULL;
    if (!t || (a->nkw && !kw)) goto failed;
    for (int i = 0; i < a->npos; i++) {
        PyObject *o = adopt(a->pos[i], 0);
        if (!o) {
            Py_DECREF(t);
            Py_XDECREF(kw);
            return cap_unsupported(I, "a %s passed to a copied object's method", sv_desc(a->pos[i])), NULL;
        }
        PyTuple_SET_ITEM(t, i, Py_NewRef(o));
    }
    for (int i = 0; i < a->nkw; i++) {
        PyObject *o = adopt(a->kw[i], 0);
        if (!o || PyDict_SetItem(kw, PyTuple_GET_ITEM(a->kwnames, i), o) < 0) {
            Py_DECREF(t);
            Py_XDECREF(kw);
            return o ? cap_py_failed(I, "call"), NULL
                     : (cap_unsupported(I, "a %s passed to a copied object's method", sv_desc(a->kw[i])), NULL);
        }
    }
    PyObject *r = PyObject_Call(c->obj, t, kw);
    Py_DECREF(t);
    Py_XDECREF(kw);
    if (!r) return cap_raise_current(I, "call"), NULL;
    return wrap(I, r, 1);
failed:
    Py_XDECREF(t);
    Py_XDECREF(kw);
    return cap_py_failed(I, "call"), NULL;
}

static int scratch_truth(Interp *I, Sv *s, int *out) {
    int t = PyObject_IsTrue(s->obj);
    if (t < 0) return cap_raise_current(I, "truth value");
    *out = t;
    return 0;
}

static Sv *scratch_subscript(Interp *I, Sv *s, Sv *k) {
    PyObject *key = as_object(k);
    if (!key) return cap_unsupported(I, "subscript of a copied object by a %s", sv_desc(k)), NULL;
    PyObject *v = PyObject_GetItem(s->obj, key);
    if (!v) return cap_raise_current(I, "subscript"), NULL;
    return wrap(I, v, 1);
}

static int scratch_iterate(Interp *I, Sv *s, SvList *out) {
    PyObject *it = PyObject_GetIter(s->obj);
    if (!it) return cap_raise_current(I, "iter()");
    PyObject *x;
    int n = 0;
    while ((x = PyIter_Next(it)) != NULL) {
        if (++n > 100000) {
            Py_DECREF(x);
            Py_DECREF(it);
            return cap_unsupported(I, "iterating a copied object of more than 100000 items");
        }
        Sv *v = wrap(I, x, 1);
        if (!v) {
            Py_DECREF(it);
            return -1;
        }
        wk_vec_push(out, v);
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return cap_raise_current(I, "iteration");
    return 0;
}

static Sv *scratch_compare(Interp *I, int cmp, Sv *x, Sv *y) {
    static const int ops[] = {Py_LT, Py_LE, Py_EQ, Py_NE, Py_GT, Py_GE};
    PyObject *a = as_object(x), *b = as_object(y);
    if (!a || !b) return NULL;
    PyObject *r = PyObject_RichCompare(a, b, ops[cmp]);
    if (!r) return cap_raise_current(I, "comparison"), NULL;
    return wrap(I, r, 1);
}

int cap_scratch_setattr(Interp *I, Sv *o, PyObject *name, Sv *v) {
    PyObject *val = v ? adopt(v, 0) : NULL;
    if (!plain_access(Py_TYPE(o->obj)))
        return cap_unsupported(I, "attribute assignment on a copied %s", cap_type_name(o->obj));
    if (v && !val) return cap_unsupported(I, "storing a %s in a copied object", sv_desc(v));
    if (PyObject_SetAttr(o->obj, name, val) < 0) return cap_raise_current(I, "attribute assignment");
    return 0;
}

int cap_scratch_setitem(Interp *I, Sv *o, Sv *k, Sv *v) {
    PyObject *key = as_object(k), *val = adopt(v, 0);
    if (!key || !val) return cap_unsupported(I, "storing a %s in a copied object", sv_desc(key ? v : k));
    if (PyObject_SetItem(o->obj, key, val) < 0) return cap_raise_current(I, "item assignment");
    return 0;
}

int cap_scratch_contains(Interp *I, Sv *seq, Sv *x, int *out) {
    PyObject *o = as_object(x);
    if (!o) return cap_unsupported(I, "'in' a copied object with a %s", sv_desc(x));
    int r = PySequence_Contains(seq->obj, o);
    if (r < 0) return cap_raise_current(I, "in");
    *out = r;
    return 0;
}

Sv *cap_scratch_len(Interp *I, Sv *s) {
    Py_ssize_t n = PyObject_Length(s->obj);
    if (n < 0) return cap_raise_current(I, "len"), NULL;
    return sv_const_Steal(I, PyLong_FromSsize_t(n));
}

const SvOps cap_scratch_kind = {
    .name = NULL,
    .truth = scratch_truth,
    .getattr = scratch_getattr,
    .call = scratch_call,
    .subscript = scratch_subscript,
    .iterate = scratch_iterate,
    .compare = scratch_compare,
};
