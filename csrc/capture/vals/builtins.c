/* vals/builtins.c — builtins and pure library functions called during
 * capture. On constants they are folded (the call runs now, its result is a
 * constant); on symbolic values the ones that only look at structure are
 * answered from it: len, isinstance, callable, getattr, enumerate, zip,
 * reversed, list, tuple, iter, sum, any, all, min, max. */
#include <string.h>

#include "../interp.h"

const char *cap_callable_name(PyObject *o, char *buf, size_t n) {
    PyObject *mod = PyObject_GetAttrString(o, "__module__");
    if (!mod) PyErr_Clear();
    /* torch's builtins have qualnames like _VariableFunctionsClass.matmul */
    PyObject *nm = PyObject_GetAttrString(o, PyCFunction_Check(o) ? "__name__" : "__qualname__");
    if (!nm) {
        PyErr_Clear();
        nm = PyObject_GetAttrString(o, "__name__");
        if (!nm) PyErr_Clear();
    }
    const char *ms = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    const char *ns = nm && PyUnicode_Check(nm) ? PyUnicode_AsUTF8(nm) : NULL;
    if (ns && ms && strcmp(ms, "builtins") != 0) snprintf(buf, n, "%s.%s", ms, ns);
    else if (ns) snprintf(buf, n, "%s", ns);
    else snprintf(buf, n, "<%s object>", cap_type_name(o));
    PyErr_Clear();
    Py_XDECREF(mod);
    Py_XDECREF(nm);
    return buf;
}

static const char *module_of(PyObject *self) {
    const char *m = self && PyModule_Check(self) ? PyModule_GetName(self) : NULL;
    if (!m) PyErr_Clear();
    return m;
}

/* Callables that are pure on plain data: folded when every argument is a
 * plain constant. */
static int foldable(PyObject *o) {
    static const char *const names[] = {"len", "abs", "min", "max", "round", "divmod", "pow", "sum", "sorted",
                                        "any", "all", "repr", "chr", "ord", "isinstance", "issubclass",
                                        "callable", "hash", "format"};
    if (o == (PyObject *)&PyFloat_Type || o == (PyObject *)&PyLong_Type || o == (PyObject *)&PyBool_Type ||
        o == (PyObject *)&PyTuple_Type || o == (PyObject *)&PyUnicode_Type || o == (PyObject *)&PyRange_Type ||
        o == (PyObject *)&PySlice_Type || o == (PyObject *)&PyComplex_Type)
        return 1;
    if (!PyCFunction_Check(o)) return 0;
    PyObject *self = PyCFunction_GET_SELF(o);
    const char *mod = module_of(self);
    if (mod && (strcmp(mod, "math") == 0 || strcmp(mod, "operator") == 0 || strcmp(mod, "_operator") == 0))
        return 1;
    if (mod && strcmp(mod, "builtins") == 0) {
        const char *n = ((PyCFunctionObject *)o)->m_ml->ml_name;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strcmp(n, names[i]) == 0) return 1;
        return 0;
    }
    /* methods of immutable plain values: "a,b".split, (1, 2).index, 1.5.is_integer;
     * class methods of builtin types: dict.fromkeys, int.from_bytes */
    if (self && (self == (PyObject *)&PyDict_Type || self == (PyObject *)&PyLong_Type ||
                 self == (PyObject *)&PyFloat_Type || self == (PyObject *)&PyUnicode_Type))
        return 1;
    return self && !PyModule_Check(self) && cap_is_plain(self);
}

/* A folded result as an Sv: plain data, ranges and slices stay constants; a
 * list of plain data (sorted(), str.split()) becomes a list of constants. */
static Sv *fold_result(Interp *I, PyObject *r, const char *what) {
    if (cap_is_plain(r) || PyRange_Check(r) || PySlice_Check(r)) return sv_const_Steal(I, r);
    if (PyDict_CheckExact(r)) {
        Sv *d = cap_dict_new(I);
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (d && PyDict_Next(r, &pos, &k, &v)) {
            if (!cap_is_plain(k) || !cap_is_plain(v) || cap_dict_set(I, d, sv_const(I, k), sv_const(I, v)) < 0) d = NULL;
        }
        Py_DECREF(r);
        if (!d && !I->reason) cap_unsupported(I, "%s() gave a non-constant dict", what);
        return d;
    }
    if (PyList_CheckExact(r)) {
        Sv *l = sv_new(I, SV_LIST);
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(r); i++) {
            PyObject *x = PyList_GET_ITEM(r, i);
            if (!cap_is_plain(x)) {
                Py_DECREF(r);
                return cap_unsupported(I, "%s() gave a non-constant", what), NULL;
            }
            wk_vec_push(&l->items, sv_const(I, x));
        }
        Py_DECREF(r);
        return l;
    }
    Py_DECREF(r);
    return cap_unsupported(I, "%s() gave a non-constant", what), NULL;
}

/* A constant, or a fresh tuple/list of constants, as a Python object (new
 * reference); NULL without an exception when s is not that. */
static PyObject *materialize_Ref(Sv *s, int depth) {
    /* a range is immutable too: dict.fromkeys(range(n)) folds */
    if (s->kind == SV_CONST) return cap_is_plain(s->obj) || PyRange_Check(s->obj) ? Py_NewRef(s->obj) : NULL;
    if ((s->kind != SV_TUPLE && s->kind != SV_LIST) || depth > 4) return NULL;
    PyObject *r = s->kind == SV_TUPLE ? PyTuple_New(s->items.len) : PyList_New(s->items.len);
    for (int i = 0; r && i < s->items.len; i++) {
        PyObject *x = materialize_Ref(s->items.data[i], depth + 1);
        if (!x) {
            Py_CLEAR(r);
            break;
        }
        if (s->kind == SV_TUPLE) PyTuple_SET_ITEM(r, i, x);
        else PyList_SET_ITEM(r, i, x);
    }
    PyErr_Clear();
    return r;
}

static int materializable(Sv *s) {
    PyObject *o = materialize_Ref(s, 0);
    Py_XDECREF(o);
    return o != NULL;
}

static Sv *fold_call(Interp *I, PyObject *fn, const Args *a) {
    char buf[200];
    const char *name = cap_callable_name(fn, buf, sizeof buf); /* before the call: it may clear an error */
    PyObject *t = PyTuple_New(a->npos);
    PyObject *kw = a->nkw ? PyDict_New() : NULL;
    if (!t || (a->nkw && !kw)) {
        Py_XDECREF(t);
        Py_XDECREF(kw);
        return cap_py_failed(I, "call"), NULL;
    }
    for (int i = 0; i < a->npos; i++) PyTuple_SET_ITEM(t, i, materialize_Ref(a->pos[i], 0));
    for (int i = 0; i < a->nkw; i++) {
        PyObject *v = materialize_Ref(a->kw[i], 0);
        if (v) PyDict_SetItem(kw, PyTuple_GET_ITEM(a->kwnames, i), v);
        Py_XDECREF(v);
    }
    PyObject *r = PyObject_Call(fn, t, kw);
    Py_DECREF(t);
    Py_XDECREF(kw);
    if (!r) return cap_raise_current(I, name), NULL; /* folded on plain values: Python raises the same */
    return fold_result(I, r, name);
}

static Sv *fold_isinstance(Interp *I, Sv *v, PyObject *cls) {
    PyObject *example = NULL;
    if (v->kind == SV_TENSOR || v->kind == SV_CONST || v->kind == SV_OPAQUE || v->kind == SV_SCRATCH) example = v->obj;
    int r;
    if (example) {
        r = PyObject_IsInstance(example, cls);
    } else {
        PyTypeObject *t = v->kind == SV_TENSOR ? cap_tensor_type
                          : v->kind == SV_TUPLE ? &PyTuple_Type
                          : v->kind == SV_LIST  ? &PyList_Type
                          : v->kind == SV_DICT  ? &PyDict_Type
                          : v->kind == SV_SET   ? &PySet_Type
                          : v->kind == SV_FUNC  ? &PyFunction_Type
                          : v->kind == SV_OBJECT ? (PyTypeObject *)v->obj
                                                : NULL;
        if ((v->kind == SV_TUPLE || v->kind == SV_LIST) && v->obj && PyType_Check(v->obj)) t = (PyTypeObject *)v->obj;
        if (!t) return cap_unsupported(I, "isinstance() of a %s", sv_desc(v)), NULL;
        r = PyObject_IsSubclass((PyObject *)t, cls);
    }
    if (r < 0) return cap_py_failed(I, "isinstance()"), NULL;
    return sv_const(I, r ? Py_True : Py_False);
}

static Sv *call_isinstance(Interp *I, const Args *a) {
    Sv *v = a->pos[0], *c = a->pos[1];
    PyObject *cls = NULL;
    if (c->kind == SV_CONST && (PyType_Check(c->obj) || PyTuple_CheckExact(c->obj))) {
        cls = Py_NewRef(c->obj);
    } else if (c->kind == SV_TUPLE) { /* isinstance(x, (int, float)): a tuple built from globals */
        cls = PyTuple_New(c->items.len);
        if (!cls) return cap_py_failed(I, "isinstance()"), NULL;
        for (int i = 0; i < c->items.len; i++) {
            Sv *it = c->items.data[i];
            if (it->kind != SV_CONST || !PyType_Check(it->obj)) {
                Py_DECREF(cls);
                return cap_unsupported(I, "isinstance() with a %s", sv_desc(it)), NULL;
            }
            PyTuple_SET_ITEM(cls, i, Py_NewRef(it->obj));
        }
    } else {
        return cap_unsupported(I, "isinstance() with a %s", sv_desc(c)), NULL;
    }
    Sv *res = fold_isinstance(I, v, cls);
    Py_DECREF(cls);
    return res;
}

static Sv *items_sv(Interp *I, SvKind kind, SvList *items) {
    Sv *s = sv_seq(I, kind, items->data, items->len);
    wk_vec_free(items);
    return s;
}

/* enumerate / zip / reversed / list / tuple / iter over symbolic values */
static Sv *call_iterating(Interp *I, const char *n, const Args *a) {
    SvList items = {0};
    if (strcmp(n, "enumerate") == 0) {
        long start = 0;
        if (a->nkw || a->npos < 1 || a->npos > 2) return NULL;
        if (a->npos == 2) {
            if (a->pos[1]->kind != SV_CONST || !PyLong_CheckExact(a->pos[1]->obj)) return NULL;
            start = PyLong_AsLong(a->pos[1]->obj);
        }
        SvList src = {0};
        if (cap_iterate(I, a->pos[0], &src) < 0) return wk_vec_free(&src), NULL;
        for (int i = 0; i < src.len; i++) {
            Sv *pair[2] = {sv_const_Steal(I, PyLong_FromLong(start + i)), src.data[i]};
            wk_vec_push(&items, sv_seq(I, SV_TUPLE, pair, 2));
        }
        wk_vec_free(&src);
        Sv *it = items_sv(I, SV_ITER, &items);
        cap_list_link_iter(it, a->pos, 1);
        return cap_set_link_iter(I, it, a->pos, 1) < 0 ? NULL : it;
    }
    if (strcmp(n, "zip") == 0) {
        if (a->nkw || a->npos > 8) return NULL;
        /* zip stops at the first iterable that ends, before asking the
         * others: only a first set is asked for its next item every step */
        for (int k = 1; k < a->npos; k++)
            if (a->pos[k]->kind == SV_SET) return cap_unsupported(I, "zip() over a set after another iterable"), NULL;
        SvList src[8] = {{0}};
        int len = -1;
        for (int k = 0; k < a->npos; k++) {
            if (cap_iterate(I, a->pos[k], &src[k]) < 0) {
                for (int j = 0; j <= k; j++) wk_vec_free(&src[j]);
                return NULL;
            }
            if (len < 0 || src[k].len < len) len = src[k].len;
        }
        for (int i = 0; i < len; i++) {
            Sv *t[8];
            for (int k = 0; k < a->npos; k++) t[k] = src[k].data[i];
            wk_vec_push(&items, sv_seq(I, SV_TUPLE, t, a->npos));
        }
        for (int k = 0; k < a->npos; k++) wk_vec_free(&src[k]);
        Sv *it = items_sv(I, SV_ITER, &items);
        cap_list_link_iter(it, a->pos, a->npos);
        return a->npos && cap_set_link_iter(I, it, a->pos, 1) < 0 ? NULL : it;
    }
    SvKind kind = strcmp(n, "list") == 0 ? SV_LIST : strcmp(n, "tuple") == 0 ? SV_TUPLE : SV_ITER;
    if (strcmp(n, "reversed") != 0 && strcmp(n, "list") != 0 && strcmp(n, "tuple") != 0 && strcmp(n, "iter") != 0)
        return NULL;
    if (a->nkw || a->npos > 1) return NULL;
    if (a->npos == 0) return kind == SV_ITER ? NULL : sv_seq(I, kind, NULL, 0);
    if (a->pos[0]->kind == SV_SET && strcmp(n, "reversed") == 0)
        return cap_unsupported(I, "reversed() of a set (Python raises TypeError)"), NULL;
    if (kind == SV_ITER && a->pos[0]->kind == SV_ITER && strcmp(n, "iter") == 0) return a->pos[0];
    if (cap_iterate(I, a->pos[0], &items) < 0) return wk_vec_free(&items), NULL;
    if (strcmp(n, "reversed") == 0)
        for (int i = 0, j = items.len - 1; i < j; i++, j--) {
            Sv *t = items.data[i];
            items.data[i] = items.data[j];
            items.data[j] = t;
        }
    Sv *r = items_sv(I, kind, &items);
    if (kind == SV_ITER) cap_list_link_iter(r, a->pos, 1);
    return kind == SV_ITER && cap_set_link_iter(I, r, a->pos, 1) < 0 ? NULL : r;
}

/* next(it[, default]) on an iterator over known items (iter() of a list,
 * tuple, dict view or set): the step a for loop over it takes, with the
 * same checks that the container did not change under it. An exhausted
 * iterator without a default raises StopIteration eagerly. NULL without a
 * reason for other iterators. */
static Sv *call_next(Interp *I, const Args *a) {
    if (a->nkw || a->npos < 1 || a->npos > 2 || a->pos[0]->kind != SV_ITER || a->pos[0]->gen) return NULL;
    Sv *it = a->pos[0];
    if (cap_set_iter_check(I, it) < 0 || cap_list_iter_check(I, it) < 0) return NULL;
    if (it->value < 0) it->value = 0;
    if (it->value < it->items.len) return it->items.data[it->value++];
    if (a->npos == 2) return a->pos[1];
    return cap_unsupported(I, "next() of an exhausted iterator (raises StopIteration)"), NULL;
}

/* sorted/min/max with key=, reverse= or default=: the items may be any
 * values (tensors, modules) as long as their keys are plain constants at
 * capture time. Python itself orders the positions by those keys, so ties,
 * stability and reverse= behave exactly as eager; the key is called once per
 * item, in order, as eager calls it. NULL without a reason for keywords this
 * does not model. */
static Sv *call_ordering_by_key(Interp *I, PyObject *fn, const char *n, const Args *a) {
    int is_sorted = strcmp(n, "sorted") == 0;
    Sv *key = NULL, *dflt = NULL;
    PyObject *reverse = Py_False;
    for (int i = 0; i < a->nkw; i++) {
        const char *kn = PyUnicode_AsUTF8(PyTuple_GET_ITEM(a->kwnames, i));
        Sv *v = a->kw[i];
        if (!kn) return cap_py_failed(I, n), NULL;
        if (strcmp(kn, "key") == 0) key = v->kind == SV_CONST && v->obj == Py_None ? NULL : v;
        else if (is_sorted && strcmp(kn, "reverse") == 0 && v->kind == SV_CONST && cap_is_plain(v->obj))
            reverse = v->obj;
        else if (!is_sorted && strcmp(kn, "default") == 0) dflt = v;
        else return NULL;
    }
    SvList items = {0};
    if (cap_iterate(I, a->pos[0], &items) < 0) return wk_vec_free(&items), NULL;
    if (!items.len && !is_sorted) {
        wk_vec_free(&items);
        if (dflt) return dflt;
        return cap_unsupported(I, "%s() of an empty sequence (raises)", n), NULL;
    }
    PyObject *keys = PyList_New(items.len);
    for (int i = 0; keys && i < items.len; i++) {
        Sv *k = items.data[i];
        if (key) {
            Args one = {&items.data[i], 1, NULL, NULL, 0};
            if (!(k = cap_call(I, key, &one))) break;
        }
        if (k->kind != SV_CONST || !cap_is_plain(k->obj)) {
            cap_unsupported(I, "%s() with keys that are not constants at capture time", n);
            break;
        }
        PyList_SET_ITEM(keys, i, Py_NewRef(k->obj));
    }
    if (!keys || CAP_FAILED(I)) {
        Py_XDECREF(keys);
        wk_vec_free(&items);
        return keys ? NULL : (cap_py_failed(I, n), NULL);
    }
    /* order positions 0..n-1 by keys[i] with the builtin itself */
    PyObject *count = PyLong_FromLong(items.len);
    PyObject *positions = count ? PyObject_CallOneArg((PyObject *)&PyRange_Type, count) : NULL;
    Py_XDECREF(count);
    PyObject *getter = PyObject_GetAttrString(keys, "__getitem__");
    PyObject *kw = Py_BuildValue("{s:O}", "key", getter ? getter : Py_None);
    if (kw && is_sorted) PyDict_SetItemString(kw, "reverse", reverse);
    PyObject *t = positions ? PyTuple_Pack(1, positions) : NULL;
    PyObject *r = t && kw && getter ? PyObject_Call(fn, t, kw) : NULL;
    Py_XDECREF(t);
    Py_XDECREF(kw);
    Py_XDECREF(getter);
    Py_XDECREF(positions);
    Py_DECREF(keys);
    Sv *res = NULL;
    if (!r) {
        cap_py_failed(I, n);
    } else if (is_sorted) {
        SvList out = {0};
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(r); i++)
            wk_vec_push(&out, items.data[PyLong_AsLong(PyList_GET_ITEM(r, i))]);
        res = items_sv(I, SV_LIST, &out);
    } else {
        res = items.data[PyLong_AsLong(r)];
    }
    Py_XDECREF(r);
    wk_vec_free(&items);
    return res;
}

/* sum/any/all/min/max over a symbolic sequence: constants fold, tensors sum */
static Sv *call_reducing(Interp *I, PyObject *fn, const char *n, const Args *a) {
    if (strcmp(n, "sum") && strcmp(n, "any") && strcmp(n, "all") && strcmp(n, "min") && strcmp(n, "max") &&
        strcmp(n, "sorted"))
        return NULL;
    if (a->nkw && a->npos == 1 && (!strcmp(n, "sorted") || !strcmp(n, "min") || !strcmp(n, "max")))
        return call_ordering_by_key(I, fn, n, a);
    if (a->nkw || a->npos < 1) return NULL;
    if (a->npos > 1 && strcmp(n, "sum") != 0) return NULL; /* min(a, b): handled by plain folding */
    SvList items = {0};
    if (cap_iterate(I, a->pos[0], &items) < 0) return wk_vec_free(&items), NULL;
    int all_const = 1;
    for (int i = 0; i < items.len; i++) all_const &= items.data[i]->kind == SV_CONST && cap_is_plain(items.data[i]->obj);
    if (a->npos > 1) all_const &= a->pos[1]->kind == SV_CONST;
    Sv *res = NULL;
    if (all_const) {
        PyObject *t = PyTuple_New(items.len);
        if (!t) {
            wk_vec_free(&items);
            return cap_py_failed(I, n), NULL;
        }
        for (int i = 0; i < items.len; i++) PyTuple_SET_ITEM(t, i, Py_NewRef(items.data[i]->obj));
        PyObject *r = a->npos > 1 ? PyObject_CallFunctionObjArgs(fn, t, a->pos[1]->obj, NULL)
                                  : PyObject_CallOneArg(fn, t);
        Py_DECREF(t);
        res = r ? fold_result(I, r, n) : (cap_py_failed(I, n), NULL);
    } else if (strcmp(n, "sum") == 0) {
        /* sum(tensors, start=0): start + t0 + t1 + ..., as Python adds them */
        Sv *acc = a->npos > 1 ? a->pos[1] : sv_const_Steal(I, PyLong_FromLong(0));
        for (int i = 0; acc && i < items.len; i++) acc = cap_binary(I, NB_ADD, acc, items.data[i]);
        res = acc;
    } else {
        cap_unsupported(I, "%s() over symbolic values", n);
    }
    wk_vec_free(&items);
    return res;
}

static Sv *call_len(Interp *I, Sv *v) {
    switch (v->kind) {
    case SV_TUPLE:
    case SV_LIST:
    case SV_DICT: return sv_const_Steal(I, PyLong_FromLong(v->items.len));
    case SV_SET: return sv_const_Steal(I, PyLong_FromSsize_t(PySet_GET_SIZE(v->obj)));
    case SV_TENSOR: {
        const WkValue *m = cap_sv_meta(I, v);
        if (!m) return NULL;
        if (m->ndim == 0) return cap_unsupported(I, "len() of a 0-d tensor"), NULL;
        return sv_const_Steal(I, PyLong_FromLongLong(cap_const_size(m, 0)));
    }
    case SV_OBJECT: return cap_userobj_len(I, v);
    case SV_SCRATCH: return cap_scratch_len(I, v);
    default: {
        SvList items = {0};
        PyObject *pinned = cap_pinned_list_Ref(I, v);
        if (pinned) {
            Py_ssize_t n = PyList_GET_SIZE(pinned);
            Py_DECREF(pinned);
            return sv_const_Steal(I, PyLong_FromSsize_t(n));
        }
        if (CAP_FAILED(I)) return NULL;
        /* a list argument's length is not read (cap_arg_list_expose says why) */
        if (v->kind == SV_OPAQUE && v->obj && PyList_CheckExact(v->obj))
            return cap_unsupported(I, "len() of a list argument"), NULL;
        if (v->kind == SV_OPAQUE && v->obj) { /* ModuleList, Sequential, ModuleDict */
            if (cap_iterate(I, v, &items) < 0) return wk_vec_free(&items), NULL;
            /* the count stands for the class's __len__: torch's own, guarded */
            PyObject *n = PyUnicode_InternFromString("__len__");
            if (!n) return wk_vec_free(&items), cap_py_failed(I, "len"), NULL;
            PyObject *f = _PyType_Lookup(Py_TYPE(v->obj), n);
            PyObject *mod = f && PyFunction_Check(f) ? ((PyFunctionObject *)f)->func_module : NULL;
            int torchs = mod && PyUnicode_Check(mod) &&
                         PyUnicode_CompareWithASCIIString(mod, "torch.nn.modules.container") == 0;
            if (torchs) wk_guard_type_attr_is(I->guards, Py_TYPE(v->obj), n, f);
            Py_DECREF(n);
            if (!torchs) return wk_vec_free(&items), cap_unsupported(I, "len() of a container whose __len__ is not torch's"), NULL;
            Sv *r = sv_const_Steal(I, PyLong_FromLong(items.len));
            wk_vec_free(&items);
            return r;
        }
        return NULL;
    }
    }
}

/* getattr(obj, "name"[, default]) and hasattr(obj, "name"): the attribute
 * load of obj's kind, run on a scratch stack slot. */
static Sv *call_getattr(Interp *I, const Args *a, int has) {
    if (a->nkw || a->npos < 2 || a->npos > (has ? 2 : 3)) return NULL;
    Sv *o = a->pos[0], *name = a->pos[1];
    if (name->kind != SV_CONST || !PyUnicode_CheckExact(name->obj)) return NULL;
    const SvOps *ops = SV_OPS(o);
    if (!ops->getattr) return cap_unsupported(I, "getattr() of a %s", sv_desc(o)), NULL;
    if (o->kind == SV_TENSOR && !_PyType_Lookup(cap_tensor_type, name->obj)) {
        /* tensors carry no instance attributes capture would see */
        if (has) return sv_const(I, Py_False);
        if (a->npos == 3) return a->pos[2];
        return cap_unsupported(I, "getattr() of a missing tensor attribute"), NULL;
    }
    if (o->kind == SV_CONST || o->kind == SV_OPAQUE) {
        /* a missing attribute: answer from the object itself (its type is guarded) */
        int ok = o->kind == SV_OPAQUE ? cap_object_hasattr(I, o, name->obj) : PyObject_HasAttr(o->obj, name->obj);
        if (!ok) {
            if (has) return sv_const(I, Py_False);
            if (a->npos == 3) return a->pos[2];
            return cap_unsupported(I, "getattr() of a missing attribute"), NULL;
        }
    }
    int sp = I->f->sp;
    Frame *f = I->f;
    if (ops->getattr(I, o, name->obj, 0) < 0) {
        /* an AttributeError raised reading it (a property's getter): the answer */
        if (I->f != f || !cap_exc_matches(I, PyExc_AttributeError) || (!has && a->npos < 3)) return NULL;
        cap_exc_clear(I);
        I->f->sp = sp;
        return has ? sv_const(I, Py_False) : a->pos[2];
    }
    Sv *r = sv_pop(I);
    I->f->sp = sp;
    return has ? sv_const(I, Py_True) : r;
}

/* operator.<name> on symbolic values: the operator itself */
static Sv *call_operator(Interp *I, const char *n, const Args *a) {
    static const struct {
        const char *name;
        int nb;
    } bin[] = {{"add", NB_ADD}, {"sub", NB_SUBTRACT}, {"mul", NB_MULTIPLY}, {"truediv", NB_TRUE_DIVIDE},
               {"floordiv", NB_FLOOR_DIVIDE}, {"mod", NB_REMAINDER}, {"pow", NB_POWER},
               {"matmul", NB_MATRIX_MULTIPLY}, {"and_", NB_AND}, {"or_", NB_OR}, {"xor", NB_XOR},
               {"iadd", NB_INPLACE_ADD}, {"imul", NB_INPLACE_MULTIPLY}};
    if (a->nkw) return NULL;
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++)
        if (strcmp(n, bin[i].name) == 0 && a->npos == 2) return cap_binary(I, bin[i].nb, a->pos[0], a->pos[1]);
    if (strcmp(n, "getitem") == 0 && a->npos == 2) {
        const SvOps *ops = SV_OPS(a->pos[0]);
        if (!ops->subscript) return cap_unsupported(I, "subscript of a %s", sv_desc(a->pos[0])), NULL;
        return ops->subscript(I, a->pos[0], a->pos[1]);
    }
    if (strcmp(n, "neg") == 0 && a->npos == 1) {
        const SvOps *ops = SV_OPS(a->pos[0]);
        return ops->unary ? ops->unary(I, UNARY_NEGATIVE, a->pos[0]) : NULL;
    }
    return NULL;
}

/* functools.partial / functools.reduce / itertools.chain, repeat, product,
 * combinations over symbolic values */
static Sv *call_functools(Interp *I, const char *mod, const char *n, const Args *a) {
    if (strcmp(mod, "functools") == 0 && strcmp(n, "reduce") == 0 && !a->nkw && (a->npos == 2 || a->npos == 3)) {
        SvList items = {0};
        if (cap_iterate(I, a->pos[1], &items) < 0) return wk_vec_free(&items), NULL;
        Sv *acc = a->npos == 3 ? a->pos[2] : NULL;
        int i = 0;
        if (!acc && items.len) acc = items.data[i++];
        if (!acc) {
            wk_vec_free(&items);
            return cap_unsupported(I, "reduce() of an empty sequence"), NULL;
        }
        for (; acc && i < items.len; i++) {
            Sv *pair[2] = {acc, items.data[i]};
            Args b = {pair, 2, NULL, NULL, 0};
            acc = cap_call(I, a->pos[0], &b);
        }
        wk_vec_free(&items);
        return acc;
    }
    if (strcmp(mod, "itertools") != 0) return NULL;
    if (strcmp(n, "chain") == 0 && !a->nkw) {
        SvList items = {0};
        for (int k = 0; k < a->npos; k++)
            if (cap_iterate(I, a->pos[k], &items) < 0) return wk_vec_free(&items), NULL;
        Sv *r = sv_seq(I, SV_ITER, items.data, items.len);
        wk_vec_free(&items);
        cap_list_link_iter(r, a->pos, a->npos);
        return r;
    }
    if (strcmp(n, "repeat") == 0 && !a->nkw && a->npos == 2) {
        /* repeat(x, n) with a constant count: torch.nn.modules.utils._ntuple
         * (ConvTranspose2d's output padding, pooling's kernel sizes) */
        Sv *count = a->pos[1];
        if (count->kind != SV_CONST || !PyLong_CheckExact(count->obj))
            return cap_unsupported(I, "repeat() with a count that is not a constant int"), NULL;
        long times = PyLong_AsLong(count->obj);
        if (times == -1 && PyErr_Occurred()) return cap_py_failed(I, n), NULL;
        if (times > 4096) return cap_unsupported(I, "repeat() of more than 4096 items"), NULL;
        Sv *res = sv_new(I, SV_ITER);
        res->value = 0;
        for (long i = 0; i < times; i++) wk_vec_push(&res->items, a->pos[0]);
        return res;
    }
    if ((strcmp(n, "product") == 0 || strcmp(n, "combinations") == 0) && !a->nkw) {
        /* the index tuples come from itertools itself, on ranges */
        int comb = n[0] == 'c';
        int nseq = comb ? 1 : a->npos;
        if (nseq < 1 || nseq > 8 || (comb && a->npos != 2)) return NULL;
        SvList seqs[8] = {{0}};
        PyObject *ranges = PyTuple_New(comb ? 2 : nseq);
        Sv *res = NULL;
        if (!ranges) return cap_py_failed(I, n), NULL;
        for (int k = 0; k < nseq; k++) {
            if (cap_iterate(I, a->pos[k], &seqs[k]) < 0) goto out;
            PyTuple_SET_ITEM(ranges, k, PyObject_CallFunction((PyObject *)&PyRange_Type, "i", seqs[k].len));
        }
        if (comb) {
            if (a->pos[1]->kind != SV_CONST || !PyLong_CheckExact(a->pos[1]->obj)) {
                cap_unsupported(I, "combinations() with a symbolic r");
                goto out;
            }
            PyTuple_SET_ITEM(ranges, 1, Py_NewRef(a->pos[1]->obj));
        }
        PyObject *itm = PyImport_ImportModule("itertools");
        PyObject *f = itm ? PyObject_GetAttrString(itm, n) : NULL;
        PyObject *idx = f ? PyObject_Call(f, ranges, NULL) : NULL;
        PyObject *lst = idx ? PySequence_List(idx) : NULL;
        Py_XDECREF(itm);
        Py_XDECREF(f);
        Py_XDECREF(idx);
        if (!lst) {
            cap_py_failed(I, n);
            goto out;
        }
        if (PyList_GET_SIZE(lst) > 4096) {
            Py_DECREF(lst);
            cap_unsupported(I, "%s() of more than 4096 items", n);
            goto out;
        }
        res = sv_new(I, SV_ITER);
        res->value = 0;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lst); i++) {
            PyObject *tup = PyList_GET_ITEM(lst, i);
            Sv *t[8];
            Py_ssize_t m = PyTuple_GET_SIZE(tup);
            for (Py_ssize_t j = 0; j < m && j < 8; j++)
                t[j] = seqs[comb ? 0 : j].data[PyLong_AsLong(PyTuple_GET_ITEM(tup, j))];
            wk_vec_push(&res->items, sv_seq(I, SV_TUPLE, t, (int)(m < 8 ? m : 8)));
        }
        Py_DECREF(lst);
    out:
        Py_DECREF(ranges);
        for (int k = 0; k < nseq; k++) wk_vec_free(&seqs[k]);
        return res;
    }
    return NULL;
}

/* dict(...) as CPython builds it: from keywords, a mapping, or pairs */
static Sv *call_dict(Interp *I, const Args *a) {
    Sv *d = cap_dict_new(I);
    if (!d) return NULL;
    if (a->npos > 1) return cap_unsupported(I, "dict() with %d positional arguments", a->npos), NULL;
    if (a->npos == 1) {
        Sv *src = a->pos[0];
        if (src->kind == SV_DICT || (src->kind == SV_CONST && PyDict_CheckExact(src->obj))) {
            if (cap_dict_update(I, d, src) < 0) return NULL;
        } else {
            SvList pairs = {0};
            if (cap_iterate(I, src, &pairs) < 0) return wk_vec_free(&pairs), NULL;
            for (int i = 0; i < pairs.len; i++) {
                SvList kv = {0};
                if (cap_iterate(I, pairs.data[i], &kv) < 0 || kv.len != 2 ||
                    cap_dict_set(I, d, kv.data[0], kv.data[1]) < 0) {
                    wk_vec_free(&kv);
                    wk_vec_free(&pairs);
                    return I->reason ? NULL : (cap_unsupported(I, "dict() from items that are not pairs"), NULL);
                }
                wk_vec_free(&kv);
            }
            wk_vec_free(&pairs);
        }
    }
    for (int k = 0; k < a->nkw; k++)
        if (cap_dict_set(I, d, sv_const(I, PyTuple_GET_ITEM(a->kwnames, k)), a->kw[k]) < 0) return NULL;
    return d;
}

/* super() with no arguments: the frame's __class__ cell and first argument.
 * Attribute lookups on it (vals/function.c: super kind) find the next
 * class's function in the MRO and bind it to the same self. */
static Sv *call_super(Interp *I, const Args *a) {
    Frame *f = I->f;
    if (a->npos || a->nkw) return cap_unsupported(I, "super() with arguments"), NULL;
    PyObject *free = PyCode_GetFreevars(f->code);
    if (!free) return cap_py_failed(I, "super()"), NULL;
    Py_ssize_t nfree = PyTuple_GET_SIZE(free), at = -1;
    for (Py_ssize_t i = 0; i < nfree; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(free, i), "__class__") == 0) at = i;
    Py_DECREF(free);
    if (at < 0 || f->code->co_argcount < 1) return cap_unsupported(I, "super() outside a method"), NULL;
    Sv *cell = f->locals[f->code->co_nlocalsplus - nfree + at];
    Sv *self = f->locals[0];
    if (self && self->kind == SV_CELL) self = self->cell;
    if (!cell || cell->kind != SV_CELL || !cell->cell || cell->cell->kind != SV_CONST || !PyType_Check(cell->cell->obj) ||
        !self)
        return cap_unsupported(I, "super(): no __class__ cell"), NULL;
    Sv *s = sv_new(I, SV_SUPER);
    s->obj = Py_NewRef(cell->cell->obj);
    s->self = self;
    return s;
}

/* A mutable dict's content read at capture time becomes symbolic data: a
 * copy, guarded equal to the dict on every call. */
static Sv *snapshot_value(Interp *I, PyObject *owner, PyObject *key, PyObject *v) {
    wk_guard_dict_item_is(I->guards, owner, key, v);
    if (!v) return sv_const(I, Py_None);
    if (PyDict_CheckExact(v)) {
        PyObject *copy = PyDict_Copy(v);
        if (!copy) return cap_py_failed(I, "dict"), NULL;
        wk_guard_pinned_equals(I->guards, v, copy);
        Sv *d = cap_dict_new(I);
        PyObject *k, *x;
        Py_ssize_t pos = 0;
        while (d && PyDict_Next(copy, &pos, &k, &x))
            if (cap_dict_set(I, d, sv_const(I, k), sv_const(I, x)) < 0) d = NULL;
        Py_DECREF(copy);
        return d;
    }
    return sv_const(I, v);
}

/* inspect.signature(f) of a function, or of a method bound during
 * capture: folded (the function guard pins its code and defaults); a
 * bound method's signature drops its first parameter, as eager's does.
 * NULL without a reason when fn is not inspect.signature. */
Sv *cap_signature_call(Interp *I, PyObject *fn, const Args *a) {
    static PyObject *sig_fn; /* inspect.signature, looked up once (owned for the process) */
    if (!sig_fn) {
        PyObject *name = PyUnicode_FromString("inspect");
        PyObject *mod = name ? PyImport_GetModule(name) : NULL;
        Py_XDECREF(name);
        sig_fn = mod ? PyObject_GetAttrString(mod, "signature") : NULL;
        Py_XDECREF(mod);
        PyErr_Clear();
    }
    if (!sig_fn || sig_fn != fn) return NULL;
    if (a->npos != 1 || a->nkw) return cap_unsupported(I, "inspect.signature() with options"), NULL;
    Sv *f = a->pos[0];
    PyObject *target = NULL;
    if (f->kind == SV_CONST && PyFunction_Check(f->obj)) {
        wk_guard_function(I->guards, f->obj);
        target = Py_NewRef(f->obj);
    } else if (f->kind == SV_PARTIAL && f->cell && f->cell->kind == SV_CONST && PyFunction_Check(f->cell->obj) &&
               f->items.len == 1 && !f->self) {
        wk_guard_function(I->guards, f->cell->obj);
        target = PyMethod_New(f->cell->obj, Py_None);
    }
    if (!target) return cap_unsupported(I, "inspect.signature() of a %s", sv_desc(f)), NULL;
    PyObject *sig = PyObject_CallOneArg(fn, target);
    Py_DECREF(target);
    if (!sig) return cap_py_failed(I, "inspect.signature()"), NULL;
    return sv_const_Steal(I, sig);
}

/* id(x) of an object pinned by identity: a module, function, class or
 * instance that is a constant of the graph (a global's, a closure cell's),
 * or one reached from an argument, then guarded to be that very object.
 * Not of values capture makes or folds (their id changes every call). */
static Sv *call_id(Interp *I, Sv *x) {
    PyObject *o = x->obj;
    int pinned_kind = o && !cap_is_plain(o) && !PyTuple_Check(o) && !PyRange_Check(o) && !PySlice_Check(o) &&
                      (PyType_Check(o) || PyFunction_Check(o) || PyMethod_Check(o) || PyCFunction_Check(o) ||
                       (cap_module_type && PyObject_TypeCheck(o, cap_module_type)) ||
                       Py_TYPE(o)->tp_getattro == PyObject_GenericGetAttr);
    if (x->kind == SV_OPAQUE && pinned_kind && x->arg >= 0) {
        wk_guard_id_at(I->guards, x->arg, x->path, o);
    } else if (x->kind != SV_CONST || !pinned_kind) {
        return cap_unsupported(I, "id() of a %s", sv_desc(x)), NULL;
    }
    PyObject *r = PyLong_FromVoidPtr(o);
    return r ? sv_const_Steal(I, r) : (cap_py_failed(I, "id()"), NULL);
}

Sv *cap_builtin_call(Interp *I, PyObject *fn, const Args *a) {
    if (fn == (PyObject *)&PyDict_Type) return call_dict(I, a);
    if ((fn == (PyObject *)&PyUnicode_Type) && a->npos == 1 && !a->nkw && a->pos[0]->kind == SV_CONST &&
        PyType_Check(a->pos[0]->obj)) { /* str(cls): its name, fixed for a class */
        PyObject *r = PyObject_Str(a->pos[0]->obj);
        return r ? sv_const_Steal(I, r) : (cap_py_failed(I, "str()"), NULL);
    }
    const char *ml = PyCFunction_Check(fn) ? ((PyCFunctionObject *)fn)->m_ml->ml_name : "";
    int getitem = strcmp(ml, "__getitem__") == 0;
    if (PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) && PyDict_Check(PyCFunction_GET_SELF(fn)) &&
        (strcmp(ml, "get") == 0 || getitem) && !a->nkw && (a->npos == 1 || (a->npos == 2 && !getitem)) &&
        a->pos[0]->kind == SV_CONST && cap_is_plain(a->pos[0]->obj)) {
        /* d.get(key[, default]) on a dict pinned by identity (a global
         * registry), and dict.__getitem__ bound to one (transformers'
         * ClassInstantier: super().__getitem__(key) of its ACT2FN) */
        PyObject *owner = PyCFunction_GET_SELF(fn);
        PyObject *v = PyDict_GetItemWithError(owner, a->pos[0]->obj);
        if (!v && PyErr_Occurred()) return cap_py_failed(I, "dict.get"), NULL;
        if (!v && (a->npos == 2 || getitem)) {
            wk_guard_dict_item_is(I->guards, owner, a->pos[0]->obj, NULL);
            if (!getitem) return a->pos[1];
            PyErr_SetObject(PyExc_KeyError, a->pos[0]->obj); /* raised as in eager, while the key stays absent */
            return cap_raise_current(I, "dict.__getitem__"), NULL;
        }
        return snapshot_value(I, owner, a->pos[0]->obj, v);
    }
    if (fn == (PyObject *)&PySuper_Type) return call_super(I, a);
    if (fn == (PyObject *)&PyType_Type && a->npos == 1 && !a->nkw) {
        /* type(x): fixed for a constant; the guarded exact type of an object
         * reached from an argument */
        Sv *x = a->pos[0];
        if (x->kind == SV_CONST || x->kind == SV_SCRATCH) return sv_const(I, (PyObject *)Py_TYPE(x->obj));
        if (x->kind == SV_OBJECT) return sv_const(I, x->obj); /* made here: its class */
        if ((x->kind == SV_TUPLE || x->kind == SV_LIST) && x->arg < 0 && !x->gname) {
            /* made here: a tuple (a namedtuple's or torch.return_types' class when it keeps one) or a list */
            if (x->kind == SV_TUPLE && x->obj && PyType_Check(x->obj)) return sv_const(I, x->obj);
            if (!x->obj) return sv_const(I, x->kind == SV_TUPLE ? (PyObject *)&PyTuple_Type : (PyObject *)&PyList_Type);
        }
        if (x->kind == SV_OPAQUE && x->obj && x->arg >= 0) {
            wk_guard_type_at(I->guards, x->arg, x->path, Py_TYPE(x->obj));
            return sv_const(I, (PyObject *)Py_TYPE(x->obj));
        }
        return cap_unsupported(I, "type() of a %s", sv_desc(x)), NULL;
    }
    if (PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) == (PyObject *)&PyDict_Type) {
        int ok = 1;
        for (int i = 0; i < a->npos; i++) ok &= materializable(a->pos[i]);
        if (ok && !a->nkw) return fold_call(I, fn, a);
    }
    {
        /* functools / itertools / operator helpers */
        PyObject *m = PyObject_GetAttrString(fn, "__module__");
        const char *ms = m && PyUnicode_Check(m) ? PyUnicode_AsUTF8(m) : NULL;
        if (!m) PyErr_Clear();
        if (ms && (PyCFunction_Check(fn) || PyType_Check(fn))) {
            const char *n = PyCFunction_Check(fn) ? ((PyCFunctionObject *)fn)->m_ml->ml_name : ((PyTypeObject *)fn)->tp_name;
            const char *base = strrchr(n, '.') ? strrchr(n, '.') + 1 : n;
            Sv *r = NULL;
            if (strcmp(ms, "functools") == 0 && strcmp(base, "partial") == 0 && a->npos >= 1) {
                Sv *kw = NULL;
                if (a->nkw) {
                    kw = cap_dict_new(I);
                    for (int k = 0; kw && k < a->nkw; k++)
                        if (cap_dict_set(I, kw, sv_const(I, PyTuple_GET_ITEM(a->kwnames, k)), a->kw[k]) < 0) kw = NULL;
                    if (!kw) {
                        Py_DECREF(m);
                        return NULL;
                    }
                }
                r = cap_partial_new(I, a->pos[0], a->pos + 1, a->npos - 1, kw);
            } else if (strcmp(ms, "_operator") == 0 || strcmp(ms, "operator") == 0) {
                int all_plain = 1;
                for (int i = 0; i < a->npos; i++) all_plain &= a->pos[i]->kind == SV_CONST && cap_is_plain(a->pos[i]->obj);
                if (!all_plain) r = call_operator(I, base, a);
            } else if (strcmp(ms, "_functools") == 0 || strcmp(ms, "functools") == 0) {
                r = call_functools(I, "functools", base, a);
            } else if (strcmp(ms, "itertools") == 0) {
                r = call_functools(I, "itertools", base, a);
            }
            Py_DECREF(m);
            if (r || CAP_FAILED(I)) return r;
        } else {
            Py_XDECREF(m);
        }
    }
    if (fn == (PyObject *)&PySet_Type || fn == (PyObject *)&PyFrozenSet_Type) {
        Sv *r = cap_set_call(I, fn, a);
        if (r || CAP_FAILED(I)) return r;
    }
    int all_plain = 1;
    for (int i = 0; i < a->npos; i++) all_plain &= a->pos[i]->kind == SV_CONST && cap_is_plain(a->pos[i]->obj);
    for (int i = 0; i < a->nkw; i++) all_plain &= a->kw[i]->kind == SV_CONST && cap_is_plain(a->kw[i]->obj);
    if (!all_plain && PyCFunction_Check(fn)) {
        /* math.prod(strides) of a list capture holds item by item (timm's
         * Hiera): its items as they are now, folded */
        const char *mod = module_of(PyCFunction_GET_SELF(fn));
        int data = mod && strcmp(mod, "math") == 0;
        for (int i = 0; data && i < a->npos; i++) data = materializable(a->pos[i]);
        for (int i = 0; data && i < a->nkw; i++) data = materializable(a->kw[i]);
        if (data) return fold_call(I, fn, a);
    }
    const char *n = NULL;
    if (PyCFunction_Check(fn)) {
        const char *mod = module_of(PyCFunction_GET_SELF(fn));
        if (mod && strcmp(mod, "builtins") == 0) n = ((PyCFunctionObject *)fn)->m_ml->ml_name;
    } else if (fn == (PyObject *)&PyList_Type) {
        n = "list";
    } else if (fn == (PyObject *)&PyTuple_Type) {
        n = "tuple";
    } else if (fn == (PyObject *)&PyEnum_Type) {
        n = "enumerate";
    } else if (fn == (PyObject *)&PyZip_Type) {
        n = "zip";
    } else if (fn == (PyObject *)&PyReversed_Type) {
        n = "reversed";
    }
    /* plain constants too: hasattr(None, "is_sliding") (transformers' masks) */
    if (n && strcmp(n, "getattr") == 0) return call_getattr(I, a, 0);
    if (n && strcmp(n, "hasattr") == 0) return call_getattr(I, a, 1);
    if (n && !all_plain) {
        Sv *r;
        if (strcmp(n, "next") == 0 && (r = cap_generator_next(I, a)) != NULL) return r;
        if (CAP_FAILED(I)) return NULL;
        if (strcmp(n, "next") == 0) return call_next(I, a);
        if (strcmp(n, "len") == 0 && a->npos == 1 && !a->nkw) return call_len(I, a->pos[0]);
        if (strcmp(n, "id") == 0 && a->npos == 1 && !a->nkw) return call_id(I, a->pos[0]);
        if (strcmp(n, "isinstance") == 0 && a->npos == 2 && !a->nkw) return call_isinstance(I, a);
        if (strcmp(n, "callable") == 0 && a->npos == 1 && !a->nkw) {
            Sv *v = a->pos[0];
            int c = v->kind == SV_FUNC || v->kind == SV_METHOD || (v->obj && v->kind != SV_TENSOR && PyCallable_Check(v->obj));
            return sv_const(I, c ? Py_True : Py_False);
        }
        if ((r = call_iterating(I, n, a)) != NULL || CAP_FAILED(I)) return r;
        if ((r = call_reducing(I, fn, n, a)) != NULL || CAP_FAILED(I)) return r;
        if (strcmp(n, "abs") == 0 && a->npos == 1 && a->pos[0]->kind == SV_TENSOR) {
            int complex_arg = cap_sv_complex(I, a->pos[0]);
            if (complex_arg) return complex_arg < 0 ? NULL : cap_tensor_operator(I, "abs", a->pos[0], NULL);
            int in = cap_tensor_value(I, a->pos[0]);
            return in < 0 ? NULL : cap_laid_or_raw(I, cap_graph_op(I, WK_OP_ABS, &in, 1, NULL), CAP_LAID_POINTWISE);
        }
        return NULL;
    }
    if (all_plain && (foldable(fn) || (n && (strcmp(n, "list") == 0 || strcmp(n, "enumerate") == 0 ||
                                             strcmp(n, "zip") == 0 || strcmp(n, "reversed") == 0)))) {
        if (n && (strcmp(n, "enumerate") == 0 || strcmp(n, "zip") == 0 || strcmp(n, "reversed") == 0 ||
                  strcmp(n, "list") == 0))
            return call_iterating(I, n, a);
        return fold_call(I, fn, a);
    }
    return NULL;
}

/* torch functions that answer questions about the program state or about
 * dtypes rather than compute tensors: folded now. torch.is_grad_enabled
 * answers the grad mode capture tracks (the entry guards the mode it
 * started in). torch.compiler.is_compiling() (and torch._dynamo's and
 * torch._utils' is_compiling, which transformers' is_torchdynamo_compiling
 * and is_tracing reach) answers True, as it does while Dynamo traces: wick
 * is capturing a graph for a compiler, and library code asks it to leave
 * out what a graph cannot hold (data-dependent early exits such as
 * transformers' packed-sequence check, one-time registrations, warnings);
 * the path it picks computes the same values, only without the shortcut.
 * It needs no guard: every capture answers the same, and a frame that runs
 * eagerly (a fallback, the instruction at a break) asks the real function.
 * The instruction at a graph break runs eagerly too, on values the graph
 * made on the True branch: where it fails reading None after a query (a
 * value only eager's branch makes), the frame falls back instead (breaks.c
 * graph_may_end_at).
 * torch.compiler.is_dynamo_compiling() and is_exporting() stay False (wick
 * is neither Dynamo nor export, and code behind them calls Dynamo's own
 * APIs), and so do the jit tracing/scripting queries.
 * NULL without a reason when fn is none of them. */
/* A torch query that raised (torch.cuda.is_current_stream_capturing on a
 * build without CUDA): the exception propagates in captured code, guarded
 * by a check that the query still raises. */
static void query_raised(Interp *I, PyObject *fn, const char *n) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        cap_py_failed(I, n);
        return;
    }
    PyObject *exc, *tb, *type;
    PyErr_Fetch(&type, &exc, &tb);
    PyObject *m = PyImport_ImportModule("wick._capture_meta");
    PyObject *check = m ? PyObject_CallMethod(m, "raises_check", "O", fn) : NULL;
    Py_XDECREF(m);
    if (!check) {
        Py_XDECREF(type);
        Py_XDECREF(exc);
        Py_XDECREF(tb);
        cap_py_failed(I, n);
        return;
    }
    wk_guard_call_is(I->guards, check, Py_True);
    Py_DECREF(check);
    PyErr_Restore(type, exc, tb);
    cap_raise_current(I, n);
}

/* 1 when v, as an argument of torch's has_torch_function checks, has no
 * __torch_function__ of its own: graph tensors (exact Tensor or Parameter,
 * which the checks skip), plain constants, and tuples/lists of those. */
static int no_torch_function(const Sv *v, int depth) {
    if (v->kind == SV_TENSOR) return !v->obj || cap_is_tensor_obj(v->obj);
    if (v->kind == SV_CONST) return cap_is_plain(v->obj);
    if ((v->kind == SV_TUPLE || v->kind == SV_LIST) && depth < 2) {
        for (int i = 0; i < v->items.len; i++)
            if (!no_torch_function(v->items.data[i], depth + 1)) return 0;
        return 1;
    }
    return 0;
}

/* torch's own plumbing met when module code is inlined (nn.MultiheadAttention's
 * fast-path checks, torchvision's API-usage logging): folded now.
 * NULL without a reason when fn is none of them, or its arguments are not
 * ones the answer is known for. */
static Sv *torch_plumbing_call(Interp *I, PyObject *fn, const char *n, const Args *a) {
    if (!strcmp(n, "_has_torch_function") || !strcmp(n, "_has_torch_function_unary") ||
        !strcmp(n, "_has_torch_function_variadic")) {
        /* torch.overrides.has_torch_function(args) and kin: False for graph
         * tensors and constants (their types are guarded exact) */
        if (a->nkw) return NULL;
        for (int i = 0; i < a->npos; i++)
            if (!no_torch_function(a->pos[i], 0)) return NULL;
        return sv_const(I, Py_False);
    }
    int mode_stack = !strcmp(n, "_get_current_dispatch_mode_stack");
    if ((mode_stack || !strcmp(n, "_len_torch_dispatch_stack")) && !a->npos && !a->nkw) {
        /* the dispatch modes active now (none outside make_fx and fake
         * tensor tracing): guarded, as the other state queries are; the
         * stack itself (torch.utils._python_dispatch) is then empty */
        if (mode_stack) {
            PyObject *c = PyImport_ImportModule("torch._C");
            fn = c ? PyObject_GetAttrString(c, "_len_torch_dispatch_stack") : NULL;
            Py_XDECREF(c);
            if (!fn) return cap_py_failed(I, n), NULL;
            Py_DECREF(fn); /* torch._C keeps it alive */
        }
        PyObject *v = PyObject_CallNoArgs(fn);
        if (!v) return cap_py_failed(I, n), NULL;
        long k = PyLong_Check(v) ? PyLong_AsLong(v) : -1;
        if (k != 0) { /* a mode is active: what it does is not modelled */
            Py_DECREF(v);
            PyErr_Clear();
            return cap_unsupported(I, "torch dispatch modes are active"), NULL;
        }
        wk_guard_call_is(I->guards, fn, v); /* 0: a cached small int, compared by identity */
        if (mode_stack) {
            Py_DECREF(v);
            return sv_seq(I, SV_LIST, NULL, 0);
        }
        return sv_const_Steal(I, v);
    }
    if (!strcmp(n, "_log_api_usage_once") && a->npos == 1 && !a->nkw && a->pos[0]->kind == SV_CONST &&
        PyUnicode_CheckExact(a->pos[0]->obj)) {
        /* once per process per key, and a no-op unless a C++ logger is
         * subscribed: done now, at capture */
        PyObject *v = PyObject_CallOneArg(fn, a->pos[0]->obj);
        if (!v) return cap_py_failed(I, n), NULL;
        Py_DECREF(v);
        return sv_const(I, Py_None);
    }
    return NULL;
}

static int is_jit_function(PyObject *fn) {
    PyObject *mod = PyObject_GetAttrString(fn, "__module__");
    const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    int jit = m && strncmp(m, "torch.jit", 9) == 0 && (m[9] == '\0' || m[9] == '.');
    Py_XDECREF(mod);
    PyErr_Clear();
    return jit;
}

Sv *cap_torch_query_call(Interp *I, PyObject *fn, const Args *a) {
    static const char *const queries[] = {"is_tracing", "is_scripting", "is_compiling", "_get_tracing_state",
                                          "is_autocast_enabled", "is_dynamo_compiling", "is_exporting",
                                          "is_current_stream_capturing", "get_fastpath_enabled"};
    if (!PyCallable_Check(fn) || !cap_is_torch_callable(fn)) {
        if (!(cap_finfo_type && fn == cap_finfo_type) && !(cap_iinfo_type && fn == cap_iinfo_type)) return NULL;
    }
    if ((cap_finfo_type && fn == cap_finfo_type) || (cap_iinfo_type && fn == cap_iinfo_type)) {
        for (int i = 0; i < a->npos; i++)
            if (a->pos[i]->kind != SV_CONST) return NULL;
        if (a->nkw) return NULL;
        return fold_call(I, fn, a);
    }
    PyObject *nm = PyObject_GetAttrString(fn, "__name__");
    const char *n = nm && PyUnicode_Check(nm) ? PyUnicode_AsUTF8(nm) : NULL;
    if (!n) {
        PyErr_Clear();
        Py_XDECREF(nm);
        return NULL;
    }
    Sv *r = NULL;
    if ((r = torch_plumbing_call(I, fn, n, a)) != NULL || CAP_FAILED(I)) {
        Py_DECREF(nm);
        return r;
    }
    if ((r = cap_autocast_query(I, n, a)) != NULL) {
        Py_DECREF(nm);
        return r;
    }
    if (strcmp(n, "is_grad_enabled") == 0 && !a->npos && !a->nkw) {
        r = sv_const(I, I->grad_enabled ? Py_True : Py_False);
    } else if (strcmp(n, "annotate") == 0 && a->npos == 2 && !a->nkw && is_jit_function(fn)) {
        /* torch.jit.annotate(type, value): value, the type being TorchScript's */
        r = a->pos[1];
    } else if (strcmp(n, "_assert") == 0 && a->npos == 2 && !a->nkw && a->pos[0]->kind == SV_CONST) {
        /* torch._assert(condition known now, message): None when it holds
         * (the condition's sources are guarded where it was computed);
         * when it fails, eager raises: that call runs eagerly */
        int ok = PyObject_IsTrue(a->pos[0]->obj);
        if (ok < 0) {
            cap_py_failed(I, n);
        } else if (ok) {
            r = sv_const(I, Py_None);
        } else {
            cap_unsupported(I, "torch._assert() of a false condition (raises)");
        }
    } else if (!a->nkw && (!a->npos || (a->npos == 1 && strcmp(n, "is_autocast_enabled") == 0 &&
                                         a->pos[0]->kind == SV_CONST && PyUnicode_CheckExact(a->pos[0]->obj)))) {
        /* is_autocast_enabled("cpu"): the query with its argument bound, one
         * object per argument (wick._capture_meta.bound_query), is what guards call */
        PyObject *query = Py_NewRef(fn);
        if (a->npos) {
            PyObject *m = PyImport_ImportModule("wick._capture_meta");
            Py_SETREF(query, m ? PyObject_CallMethod(m, "bound_query", "OO", fn, a->pos[0]->obj) : NULL);
            Py_XDECREF(m);
            if (!query) {
                Py_DECREF(nm);
                return cap_py_failed(I, n), NULL;
            }
        }
        fn = query;
        if (strcmp(n, "is_compiling") == 0) {
            Py_DECREF(query);
            Py_DECREF(nm);
            if (!I->compiling_step) I->compiling_step = I->top_steps; /* breaks.c: no break after it */
            return sv_const(I, Py_True);
        }
        for (size_t i = 0; i < sizeof queries / sizeof queries[0]; i++)
            if (strcmp(n, queries[i]) == 0) {
                PyObject *v = PyObject_CallNoArgs(fn);
                if (!v) {
                    query_raised(I, fn, n);
                    break;
                }
                /* the answer is state that can change between calls (a CUDA
                 * graph capture, autocast): guarded */
                if (v == Py_None || PyBool_Check(v)) {
                    wk_guard_call_is(I->guards, fn, v);
                    r = sv_const_Steal(I, v);
                } else {
                    Py_DECREF(v);
                }
                break;
            }
        Py_DECREF(query);
    } else if ((strcmp(n, "is_tensor") == 0 || strcmp(n, "is_floating_point") == 0 || strcmp(n, "numel") == 0 ||
                strcmp(n, "is_complex") == 0) && a->npos == 1 && !a->nkw) {
        Sv *v = a->pos[0];
        if (n[3] == 't') {
            r = sv_const(I, v->kind == SV_TENSOR ? Py_True : Py_False);
        } else if (v->kind == SV_TENSOR) {
            const WkValue *m = cap_sv_meta(I, v);
            if (m && n[0] == 'n') {
                int64_t k = 1;
                for (int d = 0; d < m->ndim; d++) k *= cap_const_size(m, d);
                r = sv_const_Steal(I, PyLong_FromLongLong(k));
            } else if (m && n[3] == 'f') {
                r = sv_const(I, wk_dtype_is_float(m->dtype) ? Py_True : Py_False);
            } else if (m) {
                r = sv_const(I, Py_False);
            }
        }
    }
    Py_DECREF(nm);
    return r;
}
