/* vals/seq.c — tuples and lists built during capture (BUILD_TUPLE,
 * BUILD_LIST, *args, unpacking, list(x)), and iterators over unrolled items
 * (iter(), enumerate, zip, for loops). Items are Svs, so a list that holds
 * a tensor aliases it; mutations (append, extend, item stores) change the
 * symbolic list in place, as Python would. */
#include <string.h>

#include "../interp.h"

static int seq_truth(Interp *I, Sv *s, int *out) {
    (void)I;
    *out = s->items.len > 0;
    return 0;
}

/* msg: what Python's IndexError says when the index is out of range */
static int normalise_index(Interp *I, Sv *k, int len, int *out, const char *msg) {
    if (k->kind != SV_CONST || !(PyLong_CheckExact(k->obj) || PyBool_Check(k->obj)))
        return cap_unsupported(I, "index of type %s", sv_desc(k));
    long i = PyLong_AsLong(k->obj);
    if (i < 0) i += len;
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return cap_unsupported(I, "index out of range");
    }
    if (i < 0 || i >= len) { /* the length is known (built here, or guarded): Python raises */
        PyErr_SetString(PyExc_IndexError, msg);
        return cap_raise_current(I, "index");
    }
    *out = (int)i;
    return 0;
}

static Sv *seq_subscript(Interp *I, Sv *s, Sv *k) {
    if (k->kind == SV_CONST && PySlice_Check(k->obj)) {
        Py_ssize_t start, stop, step, n;
        if (PySlice_Unpack(k->obj, &start, &stop, &step) < 0) return cap_py_failed(I, "slice"), NULL;
        n = PySlice_AdjustIndices(s->items.len, &start, &stop, step);
        Sv *r = sv_new(I, s->kind);
        for (Py_ssize_t i = 0, j = start; i < n; i++, j += step) wk_vec_push(&r->items, s->items.data[j]);
        if (s->kind == SV_LIST) r->obj = Py_XNewRef(s->obj); /* a ModuleList slice's slice is one too */
        return r;
    }
    int i;
    if (normalise_index(I, k, s->items.len, &i, s->kind == SV_TUPLE ? "tuple index out of range" : "list index out of range") < 0)
        return NULL;
    return s->items.data[i];
}

static int seq_iterate(Interp *I, Sv *s, SvList *out) {
    if (s->kind == SV_ITER && cap_generator_check(I, s) < 0) return -1;
    int from = s->kind == SV_ITER ? s->value : 0;
    for (int i = from < 0 ? 0 : from; i < s->items.len; i++) wk_vec_push(out, s->items.data[i]);
    if (s->kind == SV_ITER) s->value = s->items.len; /* consumed */
    return 0;
}

/* tuple + tuple, list + list, seq * n (constant tuples join symbolic ones) */
static Sv *seq_binary(Interp *I, int nb, Sv *x, Sv *y) {
    int base = nb >= NB_INPLACE_ADD ? nb - NB_INPLACE_ADD : nb;
    int xs = x->kind == SV_TUPLE || x->kind == SV_LIST, ys = y->kind == SV_TUPLE || y->kind == SV_LIST;
    if ((x->kind == SV_LIST && x->obj) || (y->kind == SV_LIST && y->obj)) return NULL; /* ModuleList slices */
    if (base == NB_ADD && (x->kind == SV_TUPLE || y->kind == SV_TUPLE)) {
        /* torch.Size + a tuple of constants: torch.Size's own + on the values */
        Sv *c = x->kind == SV_TUPLE ? y : x, *t = x->kind == SV_TUPLE ? x : y;
        if (c->kind == SV_CONST && cap_size_type && Py_TYPE(c->obj) == (PyTypeObject *)cap_size_type && !t->obj) {
            PyObject *tup = PyTuple_New(t->items.len);
            if (!tup) return cap_py_failed(I, "+"), NULL;
            for (int i = 0; i < t->items.len; i++) {
                Sv *it = t->items.data[i];
                if (it->kind != SV_CONST || !cap_is_plain(it->obj)) {
                    Py_DECREF(tup);
                    return NULL;
                }
                PyTuple_SET_ITEM(tup, i, Py_NewRef(it->obj));
            }
            PyObject *r = c == x ? PyNumber_Add(c->obj, tup) : PyNumber_Add(tup, c->obj);
            Py_DECREF(tup);
            return r ? sv_const_Steal(I, r) : (cap_py_failed(I, "+"), NULL);
        }
    }
    if (base == NB_ADD) {
        SvKind kind = xs ? x->kind : y->kind;
        int xc = x->kind == SV_CONST && (kind == SV_TUPLE ? PyTuple_CheckExact(x->obj) : PyList_CheckExact(x->obj));
        int yc = y->kind == SV_CONST && (kind == SV_TUPLE ? PyTuple_CheckExact(y->obj) : PyList_CheckExact(y->obj));
        if (!((xs || xc) && (ys || yc)) || (xs && ys && x->kind != y->kind)) return NULL;
        SvList items = {0};
        if (cap_iterate(I, x, &items) < 0 || cap_iterate(I, y, &items) < 0) return wk_vec_free(&items), NULL;
        if (nb >= NB_INPLACE_ADD && x->kind == SV_LIST) { /* l += [...] extends l */
            if ((x->arg >= 0 || x->gname) && !cap_is_arg_list(I, x)) {
                wk_vec_free(&items);
                return cap_unsupported(I, "extending a list read from an argument or global"), NULL;
            }
            cap_list_changed(x);
            wk_vec_free(&x->items);
            x->items = items;
            return x;
        }
        Sv *r = sv_seq(I, kind, items.data, items.len);
        wk_vec_free(&items);
        return r;
    }
    if (base == NB_MULTIPLY) {
        Sv *s = xs ? x : y, *n = xs ? y : x;
        if (!(xs || ys) || n->kind != SV_CONST || !PyLong_CheckExact(n->obj)) return NULL;
        long k = PyLong_AsLong(n->obj);
        if (k < 0) k = 0;
        if (k * (long)s->items.len > 100000) return cap_unsupported(I, "repeating a sequence into a huge one"), NULL;
        Sv *r = sv_new(I, s->kind);
        for (long j = 0; j < k; j++)
            for (int i = 0; i < s->items.len; i++) wk_vec_push(&r->items, s->items.data[i]);
        return r;
    }
    return NULL;
}

/* The items of a tuple or list, symbolic or constant (tuple subclasses
 * such as torch.Size and namedtuples compare as tuples): its kind, or 0. A
 * constant list is pinned by identity only (a global's, a closure cell's),
 * its items free to change between calls (or pending appends,
 * cap_list_append_effect): not read. */
static int seq_items(Interp *I, Sv *s, SvList *out) {
    if (s->kind == SV_TUPLE || s->kind == SV_LIST) {
        for (int i = 0; i < s->items.len; i++) wk_vec_push(out, s->items.data[i]);
        return s->kind;
    }
    if (s->kind == SV_CONST && PyTuple_Check(s->obj)) {
        PyObject *seq = s->obj;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); i++) wk_vec_push(out, sv_const(I, PyTuple_GET_ITEM(seq, i)));
        return SV_TUPLE;
    }
    return 0;
}

/* == and != between tuples or lists, one of them built during capture: as
 * Python compares them, item by item (identity first), each item's answer
 * known now. NULL without a reason for other operators or operands. */
static Sv *seq_compare(Interp *I, int cmp, Sv *x, Sv *y) {
    if (cmp != 2 && cmp != 3) return NULL;
    SvList a = {0}, b = {0};
    int xk = seq_items(I, x, &a), yk = seq_items(I, y, &b), eq = -1;
    Sv *res = NULL;
    if (!xk || !yk) goto done;
    if ((x->kind == SV_LIST && x->obj) || (y->kind == SV_LIST && y->obj)) eq = x == y; /* a ModuleList: identity */
    else if (xk != yk || a.len != b.len) eq = 0;
    else {
        eq = 1;
        for (int i = 0; i < a.len && eq; i++) {
            if (a.data[i] == b.data[i]) continue;
            Sv *r = cap_compare(I, 2, a.data[i], b.data[i]);
            int t;
            if (!r || r->kind != SV_CONST) {
                if (r) cap_unsupported(I, "== of sequences holding a %s", sv_desc(a.data[i]));
                eq = -1;
                break;
            }
            if (cap_truth(I, r, &t) < 0) {
                eq = -1;
                break;
            }
            eq = t;
        }
    }
    if (eq >= 0) res = sv_const(I, (eq == (cmp == 2)) ? Py_True : Py_False);
done:
    wk_vec_free(&a);
    wk_vec_free(&b);
    return res;
}

static WkRet *seq_reconstruct(Interp *I, RetPlan *p, Sv *s, int depth) {
    if (s->kind == SV_LIST && s->obj) return cap_unsupported(I, "returning a slice of a ModuleList"), NULL;
    int named = s->kind == SV_TUPLE && s->obj && PyType_Check(s->obj); /* a namedtuple: cls(*items) */
    if (named && cap_is_return_type(s->obj)) {
        /* a torch.return_types structseq: cls((items...)) */
        WkRet *r = cap_ret_new(p, WK_RET_CALL);
        r->value = s->obj;
        r->nitems = 1;
        r->items = wk_xcalloc(2, sizeof(WkRet *));
        Sv copy = *s;
        copy.obj = NULL;
        return (r->items[0] = seq_reconstruct(I, p, &copy, depth)) ? r : NULL;
    }
    WkRet *r = cap_ret_new(p, named ? WK_RET_CALL : s->kind == SV_TUPLE ? WK_RET_TUPLE : WK_RET_LIST);
    if (named) r->value = s->obj;
    r->nitems = s->items.len;
    r->items = wk_xcalloc((size_t)r->nitems + 1, sizeof(WkRet *));
    for (int i = 0; i < r->nitems; i++)
        if (!(r->items[i] = cap_reconstruct(I, p, s->items.data[i], depth + 1))) return NULL;
    return r;
}

static int seq_getattr(Interp *I, Sv *s, PyObject *name, int method) {
    int handled = 0;
    int r = cap_namedtuple_attr(I, s, name, method, &handled);
    if (handled || r < 0) return r;
    static const char *const list_methods[] = {"append", "extend",  "insert", "pop",  "index", "count",
                                               "reverse", "copy", "clear", "remove", "sort"};
    const char *n = PyUnicode_AsUTF8(name);
    if (!n) return cap_py_failed(I, "attribute name");
    int ok = 0;
    for (size_t i = 0; i < sizeof list_methods / sizeof list_methods[0]; i++)
        ok |= strcmp(n, list_methods[i]) == 0 && (s->kind == SV_LIST || i == 4 || i == 5);
    if (s->kind == SV_LIST && s->obj) ok = 0; /* a ModuleList slice: its methods are ModuleList's */
    /* a list read from an argument (object.c) is the real one: not changed here */
    if (s->kind == SV_LIST && (s->arg >= 0 || s->gname) && !cap_is_arg_list(I, s) && strcmp(n, "index") != 0 &&
        strcmp(n, "count") != 0 && strcmp(n, "copy") != 0)
        ok = 0;
    if (!ok) return cap_unsupported(I, "attribute .%s of a %s", n, sv_desc(s));
    return cap_push_method(I, s, n, method);
}

static int eq_const(Sv *a, Sv *b) {
    if (a == b) return 1;
    if (a->kind != SV_CONST || b->kind != SV_CONST) return -1;
    int r = PyObject_RichCompareBool(a->obj, b->obj, Py_EQ);
    if (r < 0) PyErr_Clear();
    return r;
}

Sv *cap_seq_method_call(Interp *I, const char *name, const Args *a) {
    Sv *s = a->pos[0];
    int nargs = a->npos - 1;
    if (a->nkw) return cap_unsupported(I, "%s() with keywords", name), NULL;
    if (strcmp(name, "append") == 0 && nargs == 1) {
        cap_list_changed(s);
        wk_vec_push(&s->items, a->pos[1]);
        return sv_const(I, Py_None);
    }
    if (strcmp(name, "extend") == 0 && nargs == 1) {
        cap_list_changed(s);
        if (cap_iterate(I, a->pos[1], &s->items) < 0) return NULL;
        return sv_const(I, Py_None);
    }
    if (strcmp(name, "insert") == 0 && nargs == 2) {
        Sv *k = a->pos[1];
        if (k->kind != SV_CONST || !PyLong_CheckExact(k->obj)) return cap_unsupported(I, "insert() index"), NULL;
        long i = PyLong_AsLong(k->obj);
        if (i < 0) i += s->items.len;
        if (i < 0) i = 0;
        if (i > s->items.len) i = s->items.len;
        cap_list_changed(s);
        wk_vec_push(&s->items, NULL);
        memmove(&s->items.data[i + 1], &s->items.data[i], (size_t)(s->items.len - 1 - i) * sizeof(Sv *));
        s->items.data[i] = a->pos[2];
        return sv_const(I, Py_None);
    }
    if (strcmp(name, "pop") == 0 && nargs <= 1) {
        int i = s->items.len - 1;
        if (nargs == 1 && normalise_index(I, a->pos[1], s->items.len, &i, "pop index out of range") < 0) return NULL;
        if (i < 0) return cap_unsupported(I, "pop from an empty list"), NULL;
        Sv *r = s->items.data[i];
        cap_list_changed(s);
        memmove(&s->items.data[i], &s->items.data[i + 1], (size_t)(s->items.len - 1 - i) * sizeof(Sv *));
        s->items.len--;
        return r;
    }
    if (strcmp(name, "reverse") == 0 && nargs == 0) {
        cap_list_changed(s);
        for (int i = 0, j = s->items.len - 1; i < j; i++, j--) {
            Sv *t = s->items.data[i];
            s->items.data[i] = s->items.data[j];
            s->items.data[j] = t;
        }
        return sv_const(I, Py_None);
    }
    if (strcmp(name, "remove") == 0 && nargs == 1) {
        for (int i = 0; i < s->items.len; i++) {
            int e = eq_const(s->items.data[i], a->pos[1]);
            if (e < 0) return cap_unsupported(I, "remove() on symbolic items"), NULL;
            if (!e) continue;
            cap_list_changed(s);
            memmove(&s->items.data[i], &s->items.data[i + 1], (size_t)(s->items.len - 1 - i) * sizeof(Sv *));
            s->items.len--;
            return sv_const(I, Py_None);
        }
        PyErr_SetString(PyExc_ValueError, "list.remove(x): x not in list");
        return cap_raise_current(I, "remove"), NULL;
    }
    if (strcmp(name, "sort") == 0 && nargs == 0) {
        /* constants sorted by Python itself (stable, its comparisons); a
         * comparison that raises is Python's to raise, at the call */
        PyObject *vals = PyList_New(s->items.len);
        if (!vals) return cap_py_failed(I, "sort"), NULL;
        for (int i = 0; i < s->items.len; i++) {
            Sv *v = s->items.data[i];
            if (v->kind != SV_CONST || !cap_is_plain(v->obj)) {
                Py_DECREF(vals);
                return cap_unsupported(I, "sort() of a list holding a %s", sv_desc(v)), NULL;
            }
            PyList_SET_ITEM(vals, i, Py_NewRef(v->obj));
        }
        if (PyList_Sort(vals) < 0) {
            Py_DECREF(vals);
            PyErr_Clear();
            return cap_unsupported(I, "sort() whose comparisons raise"), NULL;
        }
        cap_list_changed(s);
        for (int i = 0; i < s->items.len; i++) s->items.data[i] = sv_const(I, PyList_GET_ITEM(vals, i));
        Py_DECREF(vals);
        return sv_const(I, Py_None);
    }
    if (strcmp(name, "copy") == 0 && nargs == 0) return sv_seq(I, SV_LIST, s->items.data, s->items.len);
    if (strcmp(name, "clear") == 0 && nargs == 0) {
        cap_list_changed(s);
        s->items.len = 0;
        return sv_const(I, Py_None);
    }
    if ((strcmp(name, "index") == 0 || strcmp(name, "count") == 0) && nargs == 1) {
        long count = 0, first = -1;
        for (int i = 0; i < s->items.len; i++) {
            int e = eq_const(s->items.data[i], a->pos[1]);
            if (e < 0) return cap_unsupported(I, "%s() on symbolic items", name), NULL;
            if (e) {
                count++;
                if (first < 0) first = i;
            }
        }
        if (name[0] == 'c') return sv_const_Steal(I, PyLong_FromLong(count));
        if (first < 0) return cap_unsupported(I, "index(): value not in the sequence"), NULL;
        return sv_const_Steal(I, PyLong_FromLong(first));
    }
    return cap_unsupported(I, "method %s() of a %s", name, sv_desc(s)), NULL;
}

void cap_list_changed(Sv *list) {
    list->version++;
}

static long lists_version(const Sv *it) {
    long v = 0;
    for (int i = 0; i < it->lists.len; i++) v += it->lists.data[i]->version;
    return v;
}

void cap_list_link_iter(Sv *it, Sv *const *srcs, int n) {
    for (int i = 0; i < n; i++)
        if (srcs[i]->kind == SV_LIST) wk_vec_push(&it->lists, srcs[i]);
    it->lists_version = lists_version(it);
}

/* Versions only grow, so their sum is unchanged exactly when no list is */
int cap_list_iter_check(Interp *I, Sv *it) {
    if (!it->lists.len || lists_version(it) == it->lists_version) return 0;
    return cap_unsupported(I, "a list changed while a for loop walks it");
}

/* STORE_SUBSCR on a list: l[i] = v */
int cap_seq_store(Interp *I, Sv *s, Sv *k, Sv *v) {
    if (s->kind != SV_LIST) return cap_unsupported(I, "item assignment on a %s", sv_desc(s));
    if ((s->arg >= 0 || s->gname) && !cap_is_arg_list(I, s))
        return cap_unsupported(I, "item assignment on a list read from an argument");
    if (s->obj) return cap_unsupported(I, "item assignment on a ModuleList slice");
    if (k->kind == SV_CONST && PySlice_Check(k->obj)) {
        /* l[a:b] = items (step 1), or an extended slice of as many items */
        Py_ssize_t start, stop, step;
        SvList items = {0};
        if (PySlice_Unpack(k->obj, &start, &stop, &step) < 0) return cap_py_failed(I, "slice");
        Py_ssize_t n = PySlice_AdjustIndices(s->items.len, &start, &stop, step);
        if (v->kind != SV_LIST && v->kind != SV_TUPLE &&
            !(v->kind == SV_CONST && (PyTuple_CheckExact(v->obj) || PyList_CheckExact(v->obj))))
            return cap_unsupported(I, "slice assignment of a %s", sv_desc(v));
        if (cap_iterate(I, v, &items) < 0) return wk_vec_free(&items), -1;
        if (step != 1) {
            if (items.len != n) {
                wk_vec_free(&items);
                return cap_unsupported(I, "extended slice assignment of another length");
            }
            for (Py_ssize_t i = 0, j = start; i < n; i++, j += step) s->items.data[j] = items.data[i];
        } else {
            if (stop < start) stop = start;
            SvList out = {0};
            for (Py_ssize_t i = 0; i < start; i++) wk_vec_push(&out, s->items.data[i]);
            for (int i = 0; i < items.len; i++) wk_vec_push(&out, items.data[i]);
            for (Py_ssize_t i = stop; i < s->items.len; i++) wk_vec_push(&out, s->items.data[i]);
            wk_vec_free(&s->items);
            s->items = out;
        }
        wk_vec_free(&items);
        cap_list_changed(s);
        return 0;
    }
    int i;
    if (normalise_index(I, k, s->items.len, &i, "list assignment index out of range") < 0) return -1;
    cap_list_changed(s);
    s->items.data[i] = v;
    return 0;
}

int cap_seq_delete(Interp *I, Sv *s, Sv *k) {
    if (s->kind != SV_LIST || s->name || s->obj) return cap_unsupported(I, "item deletion on a %s", sv_desc(s));
    /* a list read from an argument or global is the real one: only an exposed argument list's changes are replayed */
    if ((s->arg >= 0 || s->gname) && !cap_is_arg_list(I, s))
        return cap_unsupported(I, "item deletion on a list read from an argument");
    if (k->kind == SV_CONST && PySlice_Check(k->obj)) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(k->obj, &start, &stop, &step) < 0) return cap_py_failed(I, "slice");
        Py_ssize_t n = PySlice_AdjustIndices(s->items.len, &start, &stop, step);
        unsigned char *drop = wk_xcalloc((size_t)s->items.len + 1, 1);
        for (Py_ssize_t i = 0, j = start; i < n; i++, j += step) drop[j] = 1;
        int w = 0;
        for (int i = 0; i < s->items.len; i++)
            if (!drop[i]) s->items.data[w++] = s->items.data[i];
        free(drop);
        s->items.len = w;
        cap_list_changed(s);
        return 0;
    }
    int i;
    if (normalise_index(I, k, s->items.len, &i, "list assignment index out of range") < 0) return -1;
    cap_list_changed(s);
    memmove(&s->items.data[i], &s->items.data[i + 1], (size_t)(s->items.len - 1 - i) * sizeof(Sv *));
    s->items.len--;
    return 0;
}

/* x in seq, for constant x and items (tensors compare by identity first, as Python does) */
int cap_contains(Interp *I, Sv *seq, Sv *x, int *out) {
    SvList items = {0};
    if (seq->kind == SV_OPAQUE && cap_arg_list_expose(I, seq) < 0) return -1;
    if (seq->kind == SV_SCRATCH) return cap_scratch_contains(I, seq, x, out);
    if (seq->kind == SV_SET) return cap_set_contains(I, seq, x, out);
    if (seq->kind == SV_DICT) {
        *out = cap_dict_lookup(seq, x->kind == SV_CONST ? x->obj : NULL) != NULL;
        return x->kind == SV_CONST ? 0 : cap_unsupported(I, "'in' on a dict with a %s key", sv_desc(x));
    }
    if (seq->kind == SV_CONST && (PyUnicode_CheckExact(seq->obj) || PyDict_CheckExact(seq->obj) ||
                                  PyFrozenSet_CheckExact(seq->obj) || PySet_CheckExact(seq->obj)) &&
        x->kind == SV_CONST) {
        int r = PySequence_Contains(seq->obj, x->obj);
        if (r < 0) return cap_py_failed(I, "in");
        if (PyDict_CheckExact(seq->obj)) { /* a pinned, mutable dict: guard the answer */
            PyObject *v = PyDict_GetItemWithError(seq->obj, x->obj);
            if (!v && PyErr_Occurred()) return cap_py_failed(I, "in");
            wk_guard_dict_item_is(I->guards, seq->obj, x->obj, v);
        } else if (PySet_CheckExact(seq->obj)) {
            return cap_unsupported(I, "'in' on a mutable set constant");
        }
        *out = r;
        return 0;
    }
    if (seq->kind == SV_CONST && !PyType_Check(seq->obj) && !PyModule_Check(seq->obj) && !cap_is_plain(seq->obj) &&
        !PyDict_Check(seq->obj) && !PySet_Check(seq->obj) && !PyList_Check(seq->obj)) {
        /* a pinned instance whose class defines __contains__ in Python (a
         * Mapping registry): inlined */
        PyObject *n = PyUnicode_InternFromString("__contains__");
        PyObject *c = n ? _PyType_Lookup(Py_TYPE(seq->obj), n) : NULL;
        if (c && PyFunction_Check(c)) {
            wk_guard_type_attr_is(I->guards, Py_TYPE(seq->obj), n, c);
            Py_DECREF(n);
            Sv *args[2] = {seq, x};
            Args a = {args, 2, NULL, NULL, 0};
            Sv *r = cap_call(I, sv_const(I, c), &a);
            return r ? cap_truth(I, r, out) : -1;
        }
        Py_XDECREF(n);
        PyErr_Clear();
    }
    if (cap_iterate(I, seq, &items) < 0) return wk_vec_free(&items), -1;
    int found = 0, unknown = 0;
    for (int i = 0; i < items.len && !found; i++) {
        int e = eq_const(items.data[i], x);
        if (e < 0) unknown = 1;
        else if (e) found = 1;
    }
    wk_vec_free(&items);
    if (!found && unknown) return cap_unsupported(I, "'in' over symbolic items");
    *out = found;
    return 0;
}

const SvOps cap_tuple_kind = {
    .name = "tuple",
    .truth = seq_truth,
    .getattr = seq_getattr,
    .subscript = seq_subscript,
    .iterate = seq_iterate,
    .binary = seq_binary,
    .compare = seq_compare,
    .reconstruct = seq_reconstruct,
};

const SvOps cap_list_kind = {
    .name = "list",
    .truth = seq_truth,
    .getattr = seq_getattr,
    .subscript = seq_subscript,
    .iterate = seq_iterate,
    .binary = seq_binary,
    .compare = seq_compare,
    .reconstruct = seq_reconstruct,
};

const SvOps cap_iter_kind = {.name = "iterator", .iterate = seq_iterate};
