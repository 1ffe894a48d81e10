/* vals/dict.c — dicts built during capture (BUILD_MAP, BUILD_CONST_KEY_MAP,
 * dict(), **kwargs). Keys are constants (obj: a list of them, in insertion
 * order), values are Svs (items, same order). Returned dicts are rebuilt by
 * the transformed code. A dict of constants read from an argument's
 * attribute (vals/object.c) is one too, read-only, with that source. */
#include <string.h>

#include "../interp.h"

Sv *cap_dict_new(Interp *I) {
    Sv *d = sv_new(I, SV_DICT);
    d->obj = PyList_New(0);
    if (!d->obj) return cap_py_failed(I, "dict"), NULL;
    return d;
}

static int key_index(Sv *d, PyObject *key) {
    if (!key) return -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(d->obj); i++) {
        PyObject *k = PyList_GET_ITEM(d->obj, i);
        if (k == key) return (int)i;
        int e = PyObject_RichCompareBool(k, key, Py_EQ);
        if (e < 0) PyErr_Clear();
        if (e > 0) return (int)i;
    }
    return -1;
}

Sv *cap_dict_lookup(Sv *d, PyObject *key) {
    int i = key_index(d, key);
    return i < 0 ? NULL : d->items.data[i];
}

/* A dict read from an argument's attribute (vals/object.c) is the real
 * one, guarded equal to what capture saw: the frame changes it only where
 * the change is written back to it after the graph (breaks.c). 0, or -1
 * with a reason. */
static int make_writable(Interp *I, Sv *d) {
    if (d->gname) return cap_unsupported(I, "changing a dict read from a global");
    return d->arg >= 0 ? cap_attr_dict_writable(I, d) : 0;
}

int cap_dict_set(Interp *I, Sv *d, Sv *key, Sv *value) {
    if (d->kind != SV_DICT) return cap_unsupported(I, "item assignment on a %s", sv_desc(d));
    if (make_writable(I, d) < 0) return -1;
    if (key->kind != SV_CONST || !cap_is_plain(key->obj))
        return cap_unsupported(I, "dict key of type %s", sv_desc(key));
    if (PyObject_Hash(key->obj) == -1) return cap_py_failed(I, "dict key");
    int i = key_index(d, key->obj);
    if (i >= 0) {
        d->items.data[i] = value;
        return 0;
    }
    if (PyList_Append(d->obj, key->obj) < 0) return cap_py_failed(I, "dict");
    wk_vec_push(&d->items, value);
    return 0;
}

/* d.update(other) / {**other}: other is a dict Sv or a constant dict */
int cap_dict_update(Interp *I, Sv *d, Sv *other) {
    if (other->kind == SV_DICT) {
        for (int i = 0; i < other->items.len; i++)
            if (cap_dict_set(I, d, sv_const(I, PyList_GET_ITEM(other->obj, i)), other->items.data[i]) < 0) return -1;
        return 0;
    }
    if (other->kind == SV_CONST && PyDict_CheckExact(other->obj)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(other->obj, &pos, &k, &v))
            if (cap_dict_set(I, d, sv_const(I, k), sv_const(I, v)) < 0) return -1;
        return 0;
    }
    return cap_unsupported(I, "dict update from a %s", sv_desc(other));
}

static int raise_key_error(Interp *I, PyObject *key) {
    PyObject *e = PyObject_CallOneArg(PyExc_KeyError, key);
    if (!e) return cap_py_failed(I, "KeyError");
    cap_raise(I, e);
    Py_DECREF(e);
    return -1;
}

/* d | other (a new dict) and d |= other (d updated in place, d the result) */
static Sv *dict_binary(Interp *I, int nb, Sv *x, Sv *y) {
    if ((nb != NB_OR && nb != NB_INPLACE_OR) || x->kind != SV_DICT ||
        !(y->kind == SV_DICT || (y->kind == SV_CONST && PyDict_CheckExact(y->obj))))
        return NULL;
    if (nb == NB_INPLACE_OR && make_writable(I, x) < 0) return NULL;
    Sv *r = x;
    if (nb == NB_OR && (!(r = cap_dict_new(I)) || cap_dict_update(I, r, x) < 0)) return NULL;
    return cap_dict_update(I, r, y) < 0 ? NULL : r;
}

static int dict_truth(Interp *I, Sv *s, int *out) {
    (void)I;
    *out = s->items.len > 0;
    return 0;
}

static Sv *dict_subscript(Interp *I, Sv *d, Sv *k) {
    if (k->kind != SV_CONST) return cap_unsupported(I, "dict key of type %s", sv_desc(k)), NULL;
    Sv *v = cap_dict_lookup(d, k->obj);
    if (!v) { /* the keys are known (built here, or guarded): Python raises */
        PyObject *e = PyObject_CallOneArg(PyExc_KeyError, k->obj);
        if (!e) return cap_py_failed(I, "KeyError"), NULL;
        cap_raise(I, e);
        Py_DECREF(e);
        return NULL;
    }
    return v;
}

static int dict_iterate(Interp *I, Sv *d, SvList *out) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(d->obj); i++) wk_vec_push(out, sv_const(I, PyList_GET_ITEM(d->obj, i)));
    return 0;
}

static int dict_getattr(Interp *I, Sv *s, PyObject *name, int method) {
    static const char *const methods[] = {"items", "keys",  "values", "get",  "update",
                                           "pop",   "setdefault", "copy", "clear", "popitem"};
    const char *n = PyUnicode_AsUTF8(name);
    if (!n) return cap_py_failed(I, "attribute name");
    int ok = 0;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) ok |= strcmp(n, methods[i]) == 0;
    if (!ok) return cap_unsupported(I, "attribute .%s of a dict", n);
    return cap_push_method(I, s, n, method);
}

Sv *cap_dict_method_call(Interp *I, const char *name, const Args *a) {
    Sv *d = a->pos[0];
    int nargs = a->npos - 1;
    if (a->nkw && strcmp(name, "update") != 0) return cap_unsupported(I, "dict.%s() with keywords", name), NULL;
    if (strcmp(name, "keys") != 0 && strcmp(name, "values") != 0 && strcmp(name, "items") != 0 &&
        strcmp(name, "get") != 0 && strcmp(name, "copy") != 0 && make_writable(I, d) < 0)
        return NULL;
    if (strcmp(name, "keys") == 0 && !nargs) {
        SvList items = {0};
        dict_iterate(I, d, &items);
        Sv *r = sv_seq(I, SV_LIST, items.data, items.len);
        r->name = wk_xstrdup("dict view"); /* not a list for Python: never rebuilt as one (breaks.c) */
        wk_vec_free(&items);
        return r;
    }
    if (strcmp(name, "values") == 0 && !nargs) {
        Sv *r = sv_seq(I, SV_LIST, d->items.data, d->items.len);
        r->name = wk_xstrdup("dict view");
        return r;
    }
    if (strcmp(name, "items") == 0 && !nargs) {
        Sv *r = sv_new(I, SV_LIST);
        r->name = wk_xstrdup("dict view");
        for (int i = 0; i < d->items.len; i++) {
            Sv *pair[2] = {sv_const(I, PyList_GET_ITEM(d->obj, i)), d->items.data[i]};
            wk_vec_push(&r->items, sv_seq(I, SV_TUPLE, pair, 2));
        }
        return r;
    }
    if ((strcmp(name, "get") == 0 || strcmp(name, "pop") == 0 || strcmp(name, "setdefault") == 0) &&
        (nargs == 1 || nargs == 2)) {
        Sv *k = a->pos[1];
        if (k->kind != SV_CONST) return cap_unsupported(I, "dict key of type %s", sv_desc(k)), NULL;
        int i = key_index(d, k->obj);
        Sv *dflt = nargs == 2 ? a->pos[2] : NULL;
        if (i < 0) {
            if (!dflt && name[0] != 'g') {
                if (name[0] == 'p') return raise_key_error(I, k->obj), NULL;
                dflt = sv_const(I, Py_None);
            }
            if (!dflt) dflt = sv_const(I, Py_None);
            if (name[0] == 's' && cap_dict_set(I, d, k, dflt) < 0) return NULL;
            return dflt;
        }
        Sv *v = d->items.data[i];
        if (name[0] == 'p') {
            if (PySequence_DelItem(d->obj, i) < 0) return cap_py_failed(I, "dict.pop"), NULL;
            memmove(&d->items.data[i], &d->items.data[i + 1], (size_t)(d->items.len - 1 - i) * sizeof(Sv *));
            d->items.len--;
        }
        return v;
    }
    if (strcmp(name, "update") == 0 && nargs <= 1) {
        if (nargs == 1 && cap_dict_update(I, d, a->pos[1]) < 0) return NULL;
        for (int k = 0; k < a->nkw; k++)
            if (cap_dict_set(I, d, sv_const(I, PyTuple_GET_ITEM(a->kwnames, k)), a->kw[k]) < 0) return NULL;
        return sv_const(I, Py_None);
    }
    if (strcmp(name, "clear") == 0 && !nargs) {
        if (PyList_SetSlice(d->obj, 0, PyList_GET_SIZE(d->obj), NULL) < 0) return cap_py_failed(I, "dict.clear"), NULL;
        d->items.len = 0;
        return sv_const(I, Py_None);
    }
    if (strcmp(name, "popitem") == 0 && !nargs) { /* the last key inserted, as a (key, value) pair */
        Py_ssize_t last = PyList_GET_SIZE(d->obj) - 1;
        if (last < 0) {
            PyErr_SetString(PyExc_KeyError, "popitem(): dictionary is empty");
            return cap_raise_current(I, "popitem"), NULL;
        }
        Sv *pair[2] = {sv_const(I, PyList_GET_ITEM(d->obj, last)), d->items.data[last]};
        if (PySequence_DelItem(d->obj, last) < 0) return cap_py_failed(I, "dict.popitem"), NULL;
        d->items.len--;
        return sv_seq(I, SV_TUPLE, pair, 2);
    }
    if (strcmp(name, "copy") == 0 && !nargs) {
        Sv *r = cap_dict_new(I);
        if (!r || cap_dict_update(I, r, d) < 0) return NULL;
        return r;
    }
    return cap_unsupported(I, "dict.%s() with these arguments", name), NULL;
}

static WkRet *dict_reconstruct(Interp *I, RetPlan *p, Sv *s, int depth) {
    WkRet *r = cap_ret_new(p, WK_RET_DICT);
    r->value = s->obj; /* the keys */
    r->nitems = s->items.len;
    r->items = wk_xcalloc((size_t)r->nitems + 1, sizeof(WkRet *));
    for (int i = 0; i < r->nitems; i++)
        if (!(r->items[i] = cap_reconstruct(I, p, s->items.data[i], depth + 1))) return NULL;
    return r;
}

const SvOps cap_dict_kind = {
    .name = "dict",
    .truth = dict_truth,
    .getattr = dict_getattr,
    .subscript = dict_subscript,
    .iterate = dict_iterate,
    .binary = dict_binary,
    .reconstruct = dict_reconstruct,
};
