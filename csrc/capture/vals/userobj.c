/* vals/userobj.c — instances of user classes created during capture: plain
 * classes, classes of abc.ABCMeta (collections.abc.Sequence subclasses,
 * transformers' DynamicLayer) and dataclasses (object.__new__, then
 * __init__ inlined; the attributes are kept symbolically; the class's own
 * Python __iter__/__len__/__getitem__/__bool__ inlined for iteration, len,
 * subscripts and truth; a missing attribute raises AttributeError through
 * vals/exc.c) and namedtuples (a tuple whose class names its fields). A returned instance is rebuilt by the transformed
 * code: namedtuples by calling the class with the items, other objects by
 * wick._capture_meta.rebuild_object(cls, names, *values), which sets the
 * attributes without running __init__ again. transformers' ModelOutputs made
 * here (their stores and views) and torch.return_types' named tuples (fields
 * read like a namedtuple's) live here too. A custom torch.autograd.Function
 * called where no backward is recorded is inlined here: its forward with a
 * ctx object made as above; one that records a backward becomes an extern
 * call. */
#include <string.h>

#include "../interp.h"

/* 1 when cls is a namedtuple class */
static int is_namedtuple(PyObject *cls) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) return 0;
    PyObject *f = PyObject_GetAttrString(cls, "_fields");
    int ok = f && PyTuple_Check(f);
    Py_XDECREF(f);
    PyErr_Clear();
    return ok;
}

int cap_is_return_type(PyObject *cls) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) return 0;
    PyObject *m = PyObject_GetAttrString(cls, "__module__");
    int ok = m && PyUnicode_Check(m) && PyUnicode_CompareWithASCIIString(m, "torch.return_types") == 0;
    Py_XDECREF(m);
    PyErr_Clear();
    return ok;
}

/* type, or abc.ABCMeta: its instances are made by object.__new__ like
 * any class's once no abstract method is left (checked by the caller);
 * isinstance against it asks ABCMeta's registry, as Python does. */
static PyObject *abcmeta_type;

static int plain_metaclass(PyObject *cls) {
    if (Py_TYPE(cls) == &PyType_Type) return 1;
    if (!abcmeta_type) {
        PyObject *m = PyImport_ImportModule("abc");
        abcmeta_type = m ? PyObject_GetAttrString(m, "ABCMeta") : NULL;
        Py_XDECREF(m);
        PyErr_Clear();
    }
    return abcmeta_type && (PyObject *)Py_TYPE(cls) == abcmeta_type;
}

/* Python classes whose instances capture can model: a plain __new__
 * (object's), instances with a __dict__, no metaclass magic. */
static int modelable_class(PyObject *cls) {
    if (!PyType_Check(cls)) return 0;
    PyTypeObject *tp = (PyTypeObject *)cls;
    if (!(tp->tp_flags & Py_TPFLAGS_HEAPTYPE) || !plain_metaclass(cls)) return 0;
    if (tp->tp_flags & Py_TPFLAGS_IS_ABSTRACT) return 0; /* object.__new__ raises TypeError */
    if (tp->tp_new != PyBaseObject_Type.tp_new || tp->tp_dictoffset == 0) return 0;
    if (tp->tp_setattro != PyObject_GenericSetAttr || tp->tp_getattro != PyObject_GenericGetAttr) return 0;
    if (cap_module_type && PyType_IsSubtype(tp, cap_module_type)) return 0;
    return 1;
}

/* transformers' ModelOutput when cls derives from it (an OrderedDict
 * dataclass whose __post_init__ fills the dict from the non-None fields;
 * borrowed from cls's MRO), else NULL */
static PyTypeObject *model_output_base(PyObject *cls) {
    if (!PyType_Check(cls)) return NULL;
    PyObject *mro = ((PyTypeObject *)cls)->tp_mro;
    for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *b = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (strcmp(b->tp_name, "ModelOutput") != 0) continue;
        PyObject *m = PyObject_GetAttrString((PyObject *)b, "__module__");
        int ok = m && PyUnicode_Check(m) && PyUnicode_CompareWithASCIIString(m, "transformers.utils.generic") == 0;
        Py_XDECREF(m);
        PyErr_Clear();
        if (ok) return b;
    }
    return NULL;
}

static int is_model_output(PyObject *cls) { return model_output_base(cls) != NULL; }

/* 1 when o's fields after `name` (field order) are all None */
static int later_fields_none(Sv *o, PyObject *name) {
    int i = 0, n = (int)PyList_GET_SIZE(o->self->obj);
    while (i < n && PyUnicode_Compare(PyList_GET_ITEM(o->self->obj, i), name) != 0) i++;
    for (i++; i < n; i++) {
        Sv *f = o->self->items.data[i];
        if (!sv_is_none(f)) return 0;
    }
    return 1;
}

/* out.field = v or out["field"] = v on a ModelOutput made here (CLIP's
 * get_text_features replaces pooler_output with its projection;
 * transformers' output capturing sets hidden_states on the result):
 * ModelOutput.__setattr__/__setitem__ (guarded to be the class's own)
 * set both the attribute and the dict item. Modelled where the rebuilt
 * object, made in field order, gets eager's key order: a field holding a
 * value given another value (its key stays in place), or a None field
 * given a value when every later field is None (eager appends its key at
 * the end, which is its place in field order). Setting None would leave
 * eager's dict item as it was. */
static int model_output_store(Interp *I, Sv *o, PyObject *name, Sv *v, const char *dunder) {
    PyTypeObject *tp = (PyTypeObject *)o->obj, *base = model_output_base(o->obj);
    PyObject *n = PyUnicode_InternFromString(dunder);
    PyObject *own = n && base ? _PyType_Lookup(tp, n) : NULL;
    int same = own && own == _PyType_Lookup(base, n);
    if (same) wk_guard_type_attr_is(I->guards, tp, n, own);
    Py_XDECREF(n);
    Sv *old = cap_dict_lookup(o->self, name);
    int old_none = old && sv_is_none(old);
    if (!same || !v || !old || (old_none && !later_fields_none(o, name)) || sv_is_none(v))
        return cap_unsupported(I, "assignment to field %s of a %s made during capture other than a value replacing a "
                                  "value or filling the last fields",
                               PyUnicode_AsUTF8(name), tp->tp_name);
    return cap_dict_set(I, o->self, sv_const(I, name), v);
}

static int model_output_setattr(Interp *I, Sv *o, PyObject *name, Sv *v) {
    return model_output_store(I, o, name, v, "__setattr__");
}

/* out.keys(), .values(), .items() of a ModelOutput made here: its
 * non-None fields in field order, which is its dict's order (the stores
 * above keep it so), as a list (eager gives a view of the dict) */
Sv *cap_userobj_method_call(Interp *I, const char *name, const Args *a) {
    Sv *o = a->pos[0];
    if (o->value != 1 || a->npos != 1 || a->nkw)
        return cap_unsupported(I, "method %s() of a %s", name, sv_desc(o)), NULL;
    int keys = strcmp(name, "keys") == 0, items = strcmp(name, "items") == 0;
    Sv *r = sv_new(I, SV_LIST);
    for (int i = 0; i < o->self->items.len; i++) {
        Sv *f = o->self->items.data[i];
        if (sv_is_none(f)) continue;
        Sv *k = sv_const(I, PyList_GET_ITEM(o->self->obj, i));
        Sv *pair[2] = {k, f};
        wk_vec_push(&r->items, items ? sv_seq(I, SV_TUPLE, pair, 2) : keys ? k : f);
    }
    return r;
}

int cap_userobj_setitem(Interp *I, Sv *o, Sv *k, Sv *v) {
    if (o->kind != SV_OBJECT || o->value != 1 || k->kind != SV_CONST || !PyUnicode_CheckExact(k->obj))
        return cap_unsupported(I, "item assignment on a %s", sv_desc(o));
    return model_output_store(I, o, k->obj, v, "__setitem__");
}

/* A ModelOutput made during capture: its fields (every one, None where not
 * given) kept as an SV_OBJECT with value 1; reading a field, the stores
 * model_output_store models, keys()/values()/items() and an int subscript
 * are supported, anything else (truth, other stores) is not; returned, it
 * is rebuilt by calling the class with the fields. */
static Sv *model_output_new(Interp *I, PyObject *cls, const Args *a) {
    const char *cn = ((PyTypeObject *)cls)->tp_name;
    PyObject *fields = PyObject_GetAttrString(cls, "__dataclass_fields__");
    if (!fields || !PyDict_Check(fields)) {
        Py_XDECREF(fields);
        PyErr_Clear();
        return cap_unsupported(I, "%s() without dataclass fields", cn), NULL;
    }
    PyObject *init_name = PyUnicode_InternFromString("__init__");
    if (!init_name) {
        Py_DECREF(fields);
        return cap_py_failed(I, cn), NULL;
    }
    wk_guard_type_attr_is(I->guards, (PyTypeObject *)cls, init_name, _PyType_Lookup((PyTypeObject *)cls, init_name));
    Py_DECREF(init_name);
    Sv *o = sv_new(I, SV_OBJECT);
    o->obj = Py_NewRef(cls);
    o->value = 1;
    o->self = cap_dict_new(I);
    PyObject *key, *field;
    Py_ssize_t pos = 0;
    int i = 0, used = 0;
    while (PyDict_Next(fields, &pos, &key, &field)) {
        PyObject *dflt = PyObject_GetAttrString(field, "default");
        int none_default = dflt == Py_None;
        Py_XDECREF(dflt);
        PyErr_Clear();
        Sv *v = NULL;
        if (i < a->npos) v = a->pos[i];
        for (int k = 0; k < a->nkw; k++)
            if (PyUnicode_Compare(PyTuple_GET_ITEM(a->kwnames, k), key) == 0) v = a->kw[k];
        if (v) used++;
        if (!v && !none_default) {
            Py_DECREF(fields);
            return cap_unsupported(I, "%s() field %s without a None default", cn, PyUnicode_AsUTF8(key)), NULL;
        }
        if (!v) v = sv_const(I, Py_None);
        if (cap_dict_set(I, o->self, sv_const(I, key), v) < 0) {
            Py_DECREF(fields);
            return NULL;
        }
        i++;
    }
    Py_DECREF(fields);
    if (used != a->npos + a->nkw || a->npos > i) return cap_unsupported(I, "%s() with unknown arguments", cn), NULL;
    return o;
}

/* cls(*args): NULL without a reason when cls is not a class handled here */
Sv *cap_userobj_new(Interp *I, PyObject *cls, const Args *a) {
    if (is_namedtuple(cls)) {
        PyObject *fields = PyObject_GetAttrString(cls, "_fields");
        if (!fields) return cap_py_failed(I, "namedtuple"), NULL;
        Py_ssize_t n = PyTuple_GET_SIZE(fields);
        if (a->npos > n || a->npos + a->nkw != n) {
            Py_DECREF(fields);
            return cap_unsupported(I, "namedtuple %s() with defaults or wrong arguments", ((PyTypeObject *)cls)->tp_name),
                   NULL;
        }
        Sv *t = sv_new(I, SV_TUPLE);
        for (Py_ssize_t i = 0; i < n; i++) wk_vec_push(&t->items, NULL);
        for (int i = 0; i < a->npos; i++) t->items.data[i] = a->pos[i];
        for (int k = 0; k < a->nkw; k++) {
            Py_ssize_t at = -1;
            for (Py_ssize_t i = 0; i < n; i++)
                if (PyUnicode_Compare(PyTuple_GET_ITEM(fields, i), PyTuple_GET_ITEM(a->kwnames, k)) == 0) at = i;
            if (at < 0 || t->items.data[at]) {
                Py_DECREF(fields);
                return cap_unsupported(I, "namedtuple with a bad keyword"), NULL;
            }
            t->items.data[at] = a->kw[k];
        }
        Py_DECREF(fields);
        t->obj = Py_NewRef(cls); /* a tuple Sv with obj: the namedtuple class */
        return t;
    }
    if (is_model_output(cls)) return model_output_new(I, cls, a);
    if (cap_module_type && PyType_Check(cls) && PyType_IsSubtype((PyTypeObject *)cls, cap_module_type))
        return cap_newmodule_new(I, cls, a);
    if (!modelable_class(cls)) return NULL;
    Sv *o = sv_new(I, SV_OBJECT);
    o->obj = Py_NewRef(cls);
    o->self = cap_dict_new(I);
    if (!o->self) return NULL;
    int ran = cap_run_init(I, o, (PyTypeObject *)cls, a);
    if (ran < 0) return NULL;
    if (!ran && (a->npos || a->nkw))
        return cap_unsupported(I, "%s() with arguments and no Python __init__", ((PyTypeObject *)cls)->tp_name), NULL;
    return o;
}

int cap_run_init(Interp *I, Sv *o, PyTypeObject *tp, const Args *a) {
    PyObject *init_name = PyUnicode_InternFromString("__init__");
    if (!init_name) return cap_py_failed(I, "__init__");
    PyObject *init = _PyType_Lookup(tp, init_name);
    wk_guard_type_attr_is(I->guards, tp, init_name, init); /* also that none appears */
    Py_DECREF(init_name);
    if (!init || !PyFunction_Check(init)) return 0;
    Sv *pos[72];
    if (a->npos > 64) return cap_unsupported(I, "call with too many arguments");
    pos[0] = o;
    for (int i = 0; i < a->npos; i++) pos[i + 1] = a->pos[i];
    Args b = {pos, a->npos + 1, a->kwnames, a->kw, a->nkw};
    return cap_inline_call(I, (PyFunctionObject *)init, &b) ? 1 : -1;
}

/* namedtuple field access: t.name */
int cap_namedtuple_attr(Interp *I, Sv *t, PyObject *name, int method, int *handled) {
    *handled = 0;
    int structseq = t->obj && cap_is_return_type(t->obj); /* its fields: __match_args__ */
    if (!t->obj || !(structseq || is_namedtuple(t->obj))) return 0;
    PyObject *fields = PyObject_GetAttrString(t->obj, structseq ? "__match_args__" : "_fields");
    if (!fields) return cap_py_failed(I, "namedtuple");
    if (!PyTuple_Check(fields)) {
        Py_DECREF(fields);
        return cap_unsupported(I, "a %s without field names", ((PyTypeObject *)t->obj)->tp_name);
    }
    Py_ssize_t at = -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); i++)
        if (PyUnicode_Compare(PyTuple_GET_ITEM(fields, i), name) == 0) at = i;
    Py_DECREF(fields);
    if (at < 0 || at >= t->items.len) return 0;
    *handled = 1;
    if (method && sv_push(I, I->null_sv) < 0) return -1;
    return sv_push(I, t->items.data[at]);
}

static int object_getattr(Interp *I, Sv *o, PyObject *name, int method) {
    if (o->value == CAP_OBJ_NEW_MODULE) return cap_newmodule_getattr(I, o, name, method);
    const char *n = PyUnicode_AsUTF8(name);
    if (!n) return cap_py_failed(I, "attribute");
    PyTypeObject *tp = (PyTypeObject *)o->obj;
    PyObject *d = _PyType_Lookup(tp, name);
    if (d && Py_TYPE(d) == &PyProperty_Type) {
        PyObject *fget = PyObject_GetAttrString(d, "fget");
        if (!fget) return cap_py_failed(I, n);
        Sv *getter = sv_const_Steal(I, fget);
        wk_guard_type_attr_is(I->guards, tp, name, d);
        return cap_push_property(I, o, getter, method);
    }
    if (strcmp(n, "__class__") == 0) {
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, sv_const(I, o->obj));
    }
    Sv *v = cap_dict_lookup(o->self, name);
    if (v) {
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, v);
    }
    if (o->value == 1 && d && (strcmp(n, "keys") == 0 || strcmp(n, "values") == 0 || strcmp(n, "items") == 0) &&
        d == _PyType_Lookup(&PyODict_Type, name)) {
        /* OrderedDict's own keys/values/items of a ModelOutput: cap_userobj_method_call */
        wk_guard_type_attr_is(I->guards, tp, name, d);
        return cap_push_method(I, o, n, method);
    }
    if (d) {
        wk_guard_type_attr_is(I->guards, tp, name, d);
        if (PyFunction_Check(d)) {
            Sv *fn = sv_const(I, d);
            if (method) {
                if (sv_push(I, fn) < 0) return -1;
                return sv_push(I, o);
            }
            return sv_push(I, cap_partial_new(I, fn, &o, 1, NULL));
        }
        if (cap_is_plain(d) || PyType_Check(d)) {
            if (method && sv_push(I, I->null_sv) < 0) return -1;
            return sv_push(I, sv_const(I, d));
        }
    }
    int missing = !d && o->value != 1; /* every attribute is known */
    if (!d && o->value == 1) {
        /* a ModelOutput's attributes are its fields, which o holds, unless
         * the class answers others through a __getattr__ */
        PyObject *ga = PyUnicode_InternFromString("__getattr__");
        if (!ga) return cap_py_failed(I, n);
        missing = _PyType_Lookup(tp, ga) == NULL;
        if (missing) wk_guard_type_attr_is(I->guards, tp, ga, NULL);
        Py_DECREF(ga);
    }
    if (missing) { /* Python raises */
        PyErr_Format(PyExc_AttributeError, "'%s' object has no attribute '%s'", tp->tp_name, n);
        return cap_raise_current(I, n);
    }
    return cap_unsupported(I, "attribute .%s of a %s made during capture", n, tp->tp_name);
}

int cap_userobj_setattr(Interp *I, Sv *o, PyObject *name, Sv *v) {
    if (o->value == CAP_OBJ_NEW_MODULE) return cap_newmodule_setattr(I, o, name, v);
    if (o->value == 1) return model_output_setattr(I, o, name, v);
    if (!v) return cap_unsupported(I, "del of an attribute of a %s", ((PyTypeObject *)o->obj)->tp_name);
    PyObject *d = _PyType_Lookup((PyTypeObject *)o->obj, name);
    if (d && Py_TYPE(d)->tp_descr_set)
        return cap_unsupported(I, "assignment to descriptor .%s", PyUnicode_AsUTF8(name));
    if (((PyTypeObject *)o->obj)->tp_dictoffset == 0) /* object(), __slots__: Python raises */
        return cap_unsupported(I, "attribute assignment on a %s without __dict__", ((PyTypeObject *)o->obj)->tp_name);
    return cap_dict_set(I, o->self, sv_const(I, name), v);
}

/* o.<dunder>(args...) with the class's own Python function (guarded on
 * the class), inlined. NULL without a reason when the class has none or a
 * builtin one (*found = 0). */
static Sv *call_dunder(Interp *I, Sv *o, const char *dunder, Sv *const *args, int nargs, int *found) {
    *found = 0;
    PyObject *n = PyUnicode_InternFromString(dunder);
    if (!n) return cap_py_failed(I, dunder), NULL;
    PyObject *f = _PyType_Lookup((PyTypeObject *)o->obj, n);
    wk_guard_type_attr_is(I->guards, (PyTypeObject *)o->obj, n, f);
    Py_DECREF(n);
    if (!f || !PyFunction_Check(f)) return NULL;
    *found = 1;
    Sv *pos[4] = {o};
    for (int i = 0; i < nargs && i < 3; i++) pos[i + 1] = args[i];
    Args a = {pos, nargs + 1, NULL, NULL, 0};
    return cap_inline_call(I, (PyFunctionObject *)f, &a);
}

static int object_truth(Interp *I, Sv *o, int *out) {
    PyTypeObject *tp = (PyTypeObject *)o->obj;
    if (o->value != 1) {
        int found;
        Sv *r = call_dunder(I, o, "__bool__", NULL, 0, &found);
        if (!found && !I->reason) r = call_dunder(I, o, "__len__", NULL, 0, &found);
        if (found) return r ? cap_truth(I, r, out) : -1;
        if (I->reason) return -1;
    }
    if ((tp->tp_as_number && tp->tp_as_number->nb_bool) || (tp->tp_as_mapping && tp->tp_as_mapping->mp_length) ||
        (tp->tp_as_sequence && tp->tp_as_sequence->sq_length))
        return cap_unsupported(I, "truth value of a %s", tp->tp_name);
    *out = 1;
    return 0;
}

/* for x in o: the class's __iter__ (a generator function, collections.abc's
 * Sequence.__iter__ included, which indexes until IndexError) inlined */
static int object_iterate(Interp *I, Sv *o, SvList *out) {
    int found;
    Sv *it = o->value == 1 ? NULL : call_dunder(I, o, "__iter__", NULL, 0, &found);
    if (o->value == 1 || (!found && !I->reason))
        return cap_unsupported(I, "iterating a %s", ((PyTypeObject *)o->obj)->tp_name);
    if (!it) return -1;
    return cap_iterate(I, it, out);
}

/* len(o) through the class's __len__ */
Sv *cap_userobj_len(Interp *I, Sv *o) {
    int found;
    if (o->kind != SV_OBJECT || o->value == 1) return NULL;
    Sv *r = call_dunder(I, o, "__len__", NULL, 0, &found);
    if (!found && !I->reason) return cap_unsupported(I, "len() of a %s", ((PyTypeObject *)o->obj)->tp_name), NULL;
    if (r && (r->kind != SV_CONST || !PyLong_CheckExact(r->obj)))
        return cap_unsupported(I, "__len__ returned a %s", sv_desc(r)), NULL;
    return r;
}

static PyObject *rebuild_fn, *rebuild_output_fn;

static WkRet *object_reconstruct(Interp *I, RetPlan *p, Sv *o, int depth) {
    if (o->value == CAP_OBJ_NEW_MODULE) return cap_newmodule_reconstruct(I, p, o, depth);
    if (!rebuild_fn) {
        PyObject *m = PyImport_ImportModule("wick._capture_meta");
        rebuild_fn = m ? PyObject_GetAttrString(m, "rebuild_object") : NULL;
        Py_XDECREF(m);
        if (!rebuild_fn) return cap_py_failed(I, "rebuild_object"), NULL;
    }
    if (o->value == 1 && !rebuild_output_fn) {
        PyObject *m = PyImport_ImportModule("wick._capture_meta");
        rebuild_output_fn = m ? PyObject_GetAttrString(m, "rebuild_model_output") : NULL;
        Py_XDECREF(m);
        if (!rebuild_output_fn) return cap_py_failed(I, "rebuild_model_output"), NULL;
    }
    /* rebuild_object(cls, names, *values); a ModelOutput: rebuild_model_output */
    return cap_rebuild_call(I, p, o->value == 1 ? rebuild_output_fn : rebuild_fn, o, depth);
}

WkRet *cap_rebuild_call(Interp *I, RetPlan *p, PyObject *fn, Sv *o, int depth) {
    Sv *d = o->self;
    WkRet *r = cap_ret_new(p, WK_RET_CALL);
    r->value = fn;
    r->nitems = d->items.len + 2;
    r->items = wk_xcalloc((size_t)r->nitems + 1, sizeof(WkRet *));
    r->items[0] = cap_ret_new(p, WK_RET_CONST);
    r->items[0]->value = o->obj;
    PyObject *names = PyList_AsTuple(d->obj);
    if (!names) return cap_py_failed(I, "rebuild"), NULL;
    wk_vec_push(&I->keep, names);
    r->items[1] = cap_ret_new(p, WK_RET_CONST);
    r->items[1]->value = names;
    for (int i = 0; i < d->items.len; i++)
        if (!(r->items[i + 2] = cap_reconstruct(I, p, d->items.data[i], depth + 1))) return NULL;
    return r;
}

/* out[k] of a ModelOutput made during capture: a str key is a field that
 * is not None; an int key indexes its non-None fields in order (to_tuple) */
static Sv *object_subscript(Interp *I, Sv *o, Sv *k) {
    if (o->value != 1) {
        int found;
        Sv *r = call_dunder(I, o, "__getitem__", &k, 1, &found);
        if (!found && !I->reason) return cap_unsupported(I, "subscript of a %s", ((PyTypeObject *)o->obj)->tp_name), NULL;
        return r;
    }
    if (k->kind != SV_CONST)
        return cap_unsupported(I, "subscript of a %s", ((PyTypeObject *)o->obj)->tp_name), NULL;
    Sv *d = o->self;
    if (PyUnicode_CheckExact(k->obj)) {
        Sv *v = cap_dict_lookup(d, k->obj);
        if (!v || sv_is_none(v))
            return cap_unsupported(I, "missing key of a ModelOutput (KeyError)"), NULL;
        return v;
    }
    if (!PyLong_CheckExact(k->obj)) return cap_unsupported(I, "subscript of a ModelOutput by a %s", sv_desc(k)), NULL;
    long at = PyLong_AsLong(k->obj);
    int n = 0;
    for (int i = 0; i < d->items.len; i++) n += !(d->items.data[i]->kind == SV_CONST && d->items.data[i]->obj == Py_None);
    if (at < 0) at += n;
    if (at < 0 || at >= n) return cap_unsupported(I, "index out of range of a ModelOutput (IndexError)"), NULL;
    for (int i = 0; i < d->items.len; i++) {
        Sv *v = d->items.data[i];
        if (sv_is_none(v)) continue;
        if (at-- == 0) return v;
    }
    return cap_unsupported(I, "ModelOutput index"), NULL;
}

/* x <op> y with x an object made here whose class defines the operator in
 * Python (ModuleList's `self += modules`): the in-place dunder for an
 * in-place operator, else the plain one, inlined; NotImplemented (Python
 * would try the other operand) is unsupported. NULL without a reason when
 * the class has no such Python dunder. */
static Sv *object_binary(Interp *I, int nb, Sv *x, Sv *y) {
    static const char *const names[] = {"add", "and", "floordiv", "lshift", "matmul", "mul", "mod",
                                        "or",  "pow", "rshift",   "sub",    "truediv", "xor"};
    if (x->kind != SV_OBJECT || x->value == 1) return NULL;
    int inplace = nb >= NB_INPLACE_ADD, base = inplace ? nb - NB_INPLACE_ADD : nb;
    if (base < 0 || base >= (int)(sizeof names / sizeof names[0])) return NULL;
    char dunder[32];
    int found = 0;
    Sv *r = NULL;
    if (inplace) {
        snprintf(dunder, sizeof dunder, "__i%s__", names[base]);
        r = call_dunder(I, x, dunder, &y, 1, &found);
    }
    if (!found && !CAP_FAILED(I)) {
        snprintf(dunder, sizeof dunder, "__%s__", names[base]);
        r = call_dunder(I, x, dunder, &y, 1, &found);
    }
    if (!found || !r) return r;
    if (r->kind == SV_CONST && r->obj == Py_NotImplemented)
        return cap_unsupported(I, "%s of a %s returned NotImplemented", dunder, ((PyTypeObject *)x->obj)->tp_name), NULL;
    return r;
}

/* o(*args): a module made here is called as nn.Module.__call__ does */
static Sv *object_call(Interp *I, Sv *o, const Args *a) {
    if (o->value == CAP_OBJ_NEW_MODULE) return cap_newmodule_call(I, o, a);
    return cap_unsupported(I, "call of a %s made during capture", ((PyTypeObject *)o->obj)->tp_name), NULL;
}

const SvOps cap_object_kind = {
    .call = object_call,
    .binary = object_binary,
    .subscript = object_subscript,
    .name = NULL,
    .truth = object_truth,
    .getattr = object_getattr,
    .iterate = object_iterate,
    .reconstruct = object_reconstruct,
};

/* ---- custom torch.autograd.Function, called where no backward is recorded */

static PyObject *function_base;       /* torch.autograd.Function (owned for the process) */
static PyObject *function_apply_func; /* the function under its classmethod apply */

static int init_function_base(void) {
    if (function_base) return 1;
    if (!cap_torch_mod) return 0;
    PyObject *ag = PyObject_GetAttrString(cap_torch_mod, "autograd");
    PyObject *base = ag ? PyObject_GetAttrString(ag, "Function") : NULL;
    PyObject *apply = base ? PyObject_GetAttrString(base, "apply") : NULL;
    Py_XDECREF(ag);
    if (!apply || !PyMethod_Check(apply) || !PyType_Check(base)) {
        Py_XDECREF(base);
        Py_XDECREF(apply);
        PyErr_Clear();
        return 0;
    }
    function_apply_func = Py_NewRef(PyMethod_GET_FUNCTION(apply));
    Py_DECREF(apply);
    function_base = base;
    return 1;
}

int cap_is_autograd_function_class(PyObject *cls) {
    return PyType_Check(cls) && init_function_base() && cls != function_base &&
           PyType_IsSubtype((PyTypeObject *)cls, (PyTypeObject *)function_base);
}

/* cls.apply: the bound classmethod while it is torch.autograd.Function's
 * own (guarded), else NULL with no error */
PyObject *cap_autograd_function_apply_Ref(Interp *I, PyObject *cls) {
    PyObject *name = PyUnicode_InternFromString("apply");
    PyObject *own = name ? _PyType_Lookup((PyTypeObject *)cls, name) : NULL;
    PyObject *base = name ? _PyType_Lookup((PyTypeObject *)function_base, name) : NULL;
    PyObject *r = NULL;
    if (own && own == base) {
        wk_guard_type_attr_is(I->guards, (PyTypeObject *)cls, name, own);
        r = PyObject_GetAttr(cls, name);
    }
    Py_XDECREF(name);
    if (!r) PyErr_Clear();
    return r;
}

/* 1 when cls is one of torch's own Functions (defined in a torch module) */
static int torch_own_class(PyObject *cls) {
    PyObject *m = PyObject_GetAttrString(cls, "__module__");
    const char *ms = m && PyUnicode_Check(m) ? PyUnicode_AsUTF8(m) : NULL;
    int own = ms && (strcmp(ms, "torch") == 0 || strncmp(ms, "torch.", 6) == 0);
    Py_XDECREF(m);
    PyErr_Clear();
    return own;
}

/* Fn.apply(*args) where no backward is recorded (grad mode off, or no
 * tensor argument requires grad): eager runs forward(ctx, *args) (or
 * forward(*args), then setup_context(ctx, args, output)) and marks the
 * outputs, which then need no gradient; capture inlines the same calls,
 * ctx a wick._inlined.NoBackwardCtx made here (its save_for_backward and
 * mark_* keep nothing a forward reads). A call whose forward returns an
 * argument itself (eager returns a view of it) is refused. NULL without a
 * reason when fn is no Function's apply or one of torch's own Functions
 * (extern calls, vals/extern.c). A call that records a backward is an
 * extern call too, of a wrapper that gives the forward eager's grad mode;
 * autodiff gets its gradient by calling it again under autograd. */
Sv *cap_autograd_function_call(Interp *I, PyObject *fn, const Args *a) {
    if (!PyMethod_Check(fn) || !init_function_base() || PyMethod_GET_FUNCTION(fn) != function_apply_func) return NULL;
    PyObject *cls = PyMethod_GET_SELF(fn);
    const char *cn = PyType_Check(cls) ? ((PyTypeObject *)cls)->tp_name : "?";
    if (!cap_is_autograd_function_class(cls)) return cap_unsupported(I, "%s.apply()", cn), NULL;
    /* torch's own Functions stay extern calls, differentiated by autograd (vals/extern.c) */
    if (torch_own_class(cls)) return NULL;
    /* ctx.needs_input_grad: each positional argument's requires_grad, as
     * eager reports it (under no_grad too) */
    PyObject *needs = PyTuple_New(a->npos);
    if (!needs) return cap_py_failed(I, cn), NULL;
    int records = 0;
    for (int i = 0; i < a->npos + a->nkw; i++) {
        Sv *x = i < a->npos ? a->pos[i] : a->kw[i - a->npos];
        int rg = 0;
        if (x->kind == SV_TENSOR) {
            int v = cap_tensor_value(I, x);
            if (v < 0) return Py_DECREF(needs), NULL;
            rg = cap_get_rg(I, v);
        }
        if (i < a->npos) PyTuple_SET_ITEM(needs, i, PyBool_FromLong(rg));
        records |= I->grad_enabled && rg;
    }
    if (records) {
        /* a call that records the user's backward: an extern call of
         * wick._inlined.RecordedFunctionCall (eager's grad mode and
         * needs_input_grad for the forward), its gradient the call again
         * under autograd (wick/_autodiff.py _recompute_rule) */
        PyObject *inl = PyImport_ImportModule("wick._inlined");
        PyObject *wrap = inl ? PyObject_CallMethod(inl, "RecordedFunctionCall", "OO", fn, needs) : NULL;
        Py_XDECREF(inl);
        Py_DECREF(needs);
        if (!wrap) return cap_py_failed(I, cn), NULL;
        char name[200];
        snprintf(name, sizeof name, "%s.apply", cn);
        Sv *r = cap_extern_call(I, wrap, name, a->pos, a->npos, a->kwnames, a->kw, a->nkw);
        Py_DECREF(wrap);
        return r;
    }
    Sv *needs_sv = sv_const_Steal(I, needs);
    PyObject *n_forward = PyUnicode_InternFromString("forward"), *n_setup = PyUnicode_InternFromString("setup_context");
    PyObject *forward_d = n_forward ? _PyType_Lookup((PyTypeObject *)cls, n_forward) : NULL;
    PyObject *setup_d = n_setup ? _PyType_Lookup((PyTypeObject *)cls, n_setup) : NULL;
    PyObject *base_setup = n_setup ? _PyType_Lookup((PyTypeObject *)function_base, n_setup) : NULL;
    PyObject *forward = forward_d ? PyObject_GetAttr(cls, n_forward) : NULL;
    PyObject *setup = setup_d && setup_d != base_setup ? PyObject_GetAttr(cls, n_setup) : NULL;
    Sv *r = NULL;
    if (!forward || !PyFunction_Check(forward) || (setup_d != base_setup && (!setup || !PyFunction_Check(setup)))) {
        PyErr_Clear();
        cap_unsupported(I, "%s.apply() with a forward or setup_context that is no static function", cn);
        goto done;
    }
    wk_guard_type_attr_is(I->guards, (PyTypeObject *)cls, n_forward, forward_d);
    wk_guard_type_attr_is(I->guards, (PyTypeObject *)cls, n_setup, setup_d);
    static PyObject *ctx_cls; /* wick._inlined.NoBackwardCtx (owned for the process) */
    if (!ctx_cls) {
        PyObject *m = PyImport_ImportModule("wick._inlined");
        ctx_cls = m ? PyObject_GetAttrString(m, "NoBackwardCtx") : NULL;
        Py_XDECREF(m);
        if (!ctx_cls) {
            cap_py_failed(I, "wick._inlined.NoBackwardCtx");
            goto done;
        }
    }
    Args ca = {&needs_sv, 1, NULL, NULL, 0};
    Sv *ctx = cap_userobj_new(I, ctx_cls, &ca);
    if (!ctx) {
        if (!CAP_FAILED(I)) cap_unsupported(I, "%s.apply(): its ctx", cn);
        goto done;
    }
    if (a->npos > 63) {
        cap_unsupported(I, "%s.apply() with more than 63 arguments", cn);
        goto done;
    }
    Sv *pos[64];
    int np = 0;
    if (!setup) pos[np++] = ctx;
    for (int i = 0; i < a->npos; i++) pos[np++] = a->pos[i];
    Args fa = {pos, np, a->kwnames, a->kw, a->nkw};
    r = cap_call(I, sv_const(I, forward), &fa);
    if (r && setup) {
        Sv *inputs = sv_seq(I, SV_TUPLE, a->pos, a->npos);
        Sv *sargs[3] = {ctx, inputs, r};
        Args sa = {sargs, 3, NULL, NULL, 0};
        if (!cap_call(I, sv_const(I, setup), &sa)) r = NULL;
    }
    if (r) {
        int n = r->kind == SV_TUPLE ? r->items.len : 1;
        for (int k = 0; k < n && r; k++) {
            Sv *out = r->kind == SV_TUPLE ? r->items.data[k] : r;
            for (int i = 0; i < a->npos + a->nkw && r; i++)
                if (out->kind == SV_TENSOR && out == (i < a->npos ? a->pos[i] : a->kw[i - a->npos]))
                    r = (cap_unsupported(I, "%s.apply() returning an argument (eager returns a view)", cn), NULL);
        }
    }
done:
    Py_XDECREF(n_forward);
    Py_XDECREF(n_setup);
    Py_XDECREF(forward);
    Py_XDECREF(setup);
    return r;
}
