/* vals/set.c — sets built during capture (BUILD_SET, SET_ADD in set
 * comprehensions, SET_UPDATE for {*xs}, set(iterable), results of set
 * operators and methods). A set is modelled only when every element is a
 * hashable value capture knows exactly (numbers, str, bytes, None, bool,
 * types, dtypes, and tuples/frozensets of those): such a set is a real
 * Python set object (SV_SET, obj owned, seen by capture only) that each
 * operation updates as the frame would. Iteration walks that real set, so
 * its order is the one eager Python gives for the same additions. A tensor
 * or an unknown object put in a set is not modelled (the reason is
 * recorded: a break or an eager run). A set that escapes the frame is
 * rebuilt after the graph as set(<its final elements>).
 *
 * One more kind of element: an object reached from an argument (a module)
 * whose type keeps object's identity hash and equality, as in
 * Module.named_children()'s `memo` of the modules seen. It is held as an
 * identity token (Ellipsis, its address), its path guarded to still hold
 * that object; `x in s`, add/discard/remove and len() work on such a set,
 * what would hand its elements back (iteration, pop, escaping the frame)
 * is refused. */
#include <limits.h>
#include <string.h>

#include "../interp.h"

/* Hashing and equality of o run no user code and do not change between calls. */
static int exact_hashable(PyObject *o, int depth) {
    if (depth > 16) return 0;
    if (o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) ||
        PyComplex_CheckExact(o) || PyUnicode_CheckExact(o) || PyBytes_CheckExact(o))
        return 1;
    if (PyType_Check(o) && Py_TYPE(o) == &PyType_Type) return 1; /* identity hash and == */
    if (cap_dtype_type && Py_TYPE(o) == (PyTypeObject *)cap_dtype_type) return 1;
    if (PyTuple_CheckExact(o)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); i++)
            if (!exact_hashable(PyTuple_GET_ITEM(o, i), depth + 1)) return 0;
        return 1;
    }
    if (PyFrozenSet_CheckExact(o)) {
        PyObject *it = PyObject_GetIter(o), *k;
        int ok = it != NULL;
        while (ok && (k = PyIter_Next(it)) != NULL) {
            ok = exact_hashable(k, depth + 1);
            Py_DECREF(k);
        }
        Py_XDECREF(it);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            ok = 0;
        }
        return ok;
    }
    return 0;
}

/* The real object an element Sv stands for (new reference), or NULL
 * without a reason when it is not one a set can be modelled with. */
static PyObject *element_obj(Sv *v, int depth) {
    if (depth > 16) return NULL;
    if (v->kind == SV_CONST) return exact_hashable(v->obj, 0) ? Py_NewRef(v->obj) : NULL;
    if (v->kind == SV_TUPLE && !v->obj && v->arg < 0 && !v->gname) { /* built here, not a namedtuple */
        PyObject *t = PyTuple_New(v->items.len);
        if (!t) {
            PyErr_Clear();
            return NULL;
        }
        for (int i = 0; i < v->items.len; i++) {
            PyObject *e = element_obj(v->items.data[i], depth + 1);
            if (!e) {
                Py_DECREF(t);
                return NULL;
            }
            PyTuple_SET_ITEM(t, i, e);
        }
        return t;
    }
    return NULL;
}

/* The identity token of an object element (see the top of the file), new
 * reference; NULL without a reason where v is not such an object. Ellipsis
 * marks it: no exactly known element is or holds Ellipsis. */
static PyObject *identity_element(Interp *I, Sv *v) {
    /* a tensor read from the frame's arguments (a parameter: nn.Module.
     * _named_members keeps a set of them) hashes by identity (Tensor.
     * __hash__ is id()), so its == is never asked */
    int tensor = v->kind == SV_TENSOR && v->obj && cap_is_tensor_obj(v->obj);
    if ((v->kind != SV_OPAQUE && !tensor) || !v->obj || v->arg < 0) return NULL;
    PyTypeObject *t = Py_TYPE(v->obj);
    if (!tensor && (t->tp_hash != PyBaseObject_Type.tp_hash || t->tp_richcompare != PyBaseObject_Type.tp_richcompare))
        return NULL;
    PyObject *address = PyLong_FromVoidPtr(v->obj);
    PyObject *token = address ? PyTuple_Pack(2, Py_Ellipsis, address) : NULL;
    Py_XDECREF(address);
    if (!token) {
        PyErr_Clear();
        return NULL;
    }
    wk_guard_id_at(I->guards, v->arg, v->path, v->obj);
    return token;
}

static PyObject *element_of(Interp *I, Sv *v) {
    PyObject *e = element_obj(v, 0);
    return e ? e : identity_element(I, v);
}

static int is_identity_token(PyObject *e) {
    return PyTuple_CheckExact(e) && PyTuple_GET_SIZE(e) == 2 && PyTuple_GET_ITEM(e, 0) == Py_Ellipsis;
}

/* The set holds identity tokens: its elements cannot be handed back. (An
 * error while walking it counts as holding them: refused, not mistaken.) */
static int holds_objects(PyObject *set) {
    PyObject *it = PyObject_GetIter(set), *e;
    int found = it == NULL;
    while (!found && it && (e = PyIter_Next(it)) != NULL) {
        found = is_identity_token(e);
        Py_DECREF(e);
    }
    Py_XDECREF(it);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        found = 1;
    }
    return found;
}

/* value: the compiled frame's instruction count when the set was made, so
 * that a break the set would be shared across can move before it (breaks.c) */
static Sv *set_sv_Steal(Interp *I, PyObject *o) {
    Sv *r = sv_new(I, SV_SET);
    r->obj = o;
    r->value = I->top_steps < INT_MAX ? (int)I->top_steps : -1;
    return r;
}

Sv *cap_set_new(Interp *I) {
    PyObject *s = PySet_New(NULL);
    if (!s) return cap_py_failed(I, "set()"), NULL;
    return set_sv_Steal(I, s);
}

static Sv *set_wrap_Steal(Interp *I, PyObject *o) {
    if (!o) return NULL;
    if (PySet_CheckExact(o)) return set_sv_Steal(I, o);
    return sv_const_Steal(I, o);
}

int cap_set_add(Interp *I, Sv *s, Sv *v) {
    PyObject *e = element_of(I, v);
    if (!e) return cap_unsupported(I, "a %s put in a set", sv_desc(v));
    int r = PySet_Add(s->obj, e);
    s->version++;
    Py_DECREF(e);
    return r < 0 ? cap_py_failed(I, "set.add") : 0;
}

/* A real object holding what `v` iterates to, for the set methods and
 * operators: a set built here, a frozenset constant, or any iterable
 * whose items are exactly known (new reference); NULL with a reason. */
static PyObject *operand_obj(Interp *I, Sv *v) {
    if (v->kind == SV_SET) return Py_NewRef(v->obj);
    if (v->kind == SV_CONST && PyFrozenSet_CheckExact(v->obj) && exact_hashable(v->obj, 0)) return Py_NewRef(v->obj);
    if (v->kind == SV_CONST && PySet_Check(v->obj))
        return cap_unsupported(I, "a set constant read from outside the frame used with a set"), NULL;
    SvList items = {0};
    if (cap_iterate(I, v, &items) < 0) return wk_vec_free(&items), NULL;
    PyObject *t = PyTuple_New(items.len);
    if (!t) {
        wk_vec_free(&items);
        return cap_py_failed(I, "set operand"), NULL;
    }
    for (int i = 0; i < items.len; i++) {
        PyObject *e = element_of(I, items.data[i]);
        if (!e) {
            cap_unsupported(I, "a %s put in a set", sv_desc(items.data[i]));
            Py_DECREF(t);
            wk_vec_free(&items);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, e);
    }
    wk_vec_free(&items);
    return t;
}

int cap_set_update(Interp *I, Sv *s, Sv *other) {
    PyObject *o = operand_obj(I, other);
    if (!o) return -1;
    s->version++;
    PyObject *name = PyUnicode_InternFromString("update");
    PyObject *r = name ? PyObject_CallMethodOneArg(s->obj, name, o) : NULL;
    Py_XDECREF(name);
    Py_DECREF(o);
    if (!r) return cap_py_failed(I, "set.update");
    Py_DECREF(r);
    return 0;
}

/* set(), set(iterable), frozenset(a set built here) */
Sv *cap_set_call(Interp *I, PyObject *fn, const Args *a) {
    if (fn == (PyObject *)&PyFrozenSet_Type) {
        if (a->nkw || a->npos != 1 || a->pos[0]->kind != SV_SET) return NULL;
        PyObject *f = PyFrozenSet_New(a->pos[0]->obj);
        return f ? sv_const_Steal(I, f) : (cap_py_failed(I, "frozenset()"), NULL);
    }
    if (fn != (PyObject *)&PySet_Type) return NULL;
    if (a->nkw || a->npos > 1) return cap_unsupported(I, "set() with these arguments"), NULL;
    Sv *s = cap_set_new(I);
    if (s && a->npos == 1 && cap_set_update(I, s, a->pos[0]) < 0) return NULL;
    return s;
}

static int set_truth(Interp *I, Sv *s, int *out) {
    (void)I;
    *out = PySet_GET_SIZE(s->obj) > 0;
    return 0;
}

static int set_iterate(Interp *I, Sv *s, SvList *out) {
    if (holds_objects(s->obj)) return cap_unsupported(I, "iterating a set of modules or objects");
    PyObject *it = PyObject_GetIter(s->obj), *e;
    if (!it) return cap_py_failed(I, "iter(set)");
    while ((e = PyIter_Next(it)) != NULL) wk_vec_push(out, sv_const_Steal(I, e));
    Py_DECREF(it);
    return PyErr_Occurred() ? cap_py_failed(I, "iter(set)") : 0;
}

/* |, &, -, ^ (and their in-place forms, which change the left set) between
 * a set built here and another set or frozenset constant: as Python
 * computes them on the real objects. NULL without a reason otherwise. */
static Sv *set_binary(Interp *I, int nb, Sv *x, Sv *y) {
    int inplace = nb >= NB_INPLACE_ADD, base = inplace ? nb - NB_INPLACE_ADD : nb;
    if (base != NB_OR && base != NB_AND && base != NB_SUBTRACT && base != NB_XOR) return NULL;
    int xok = x->kind == SV_SET || (x->kind == SV_CONST && PyFrozenSet_CheckExact(x->obj) && exact_hashable(x->obj, 0));
    int yok = y->kind == SV_SET || (y->kind == SV_CONST && PyFrozenSet_CheckExact(y->obj) && exact_hashable(y->obj, 0));
    if (!xok || !yok) return NULL;
    PyObject *r;
    if (inplace && x->kind == SV_SET) {
        x->version++;
        r = base == NB_OR ? PyNumber_InPlaceOr(x->obj, y->obj)
            : base == NB_AND ? PyNumber_InPlaceAnd(x->obj, y->obj)
            : base == NB_SUBTRACT ? PyNumber_InPlaceSubtract(x->obj, y->obj)
                                  : PyNumber_InPlaceXor(x->obj, y->obj);
        if (!r) return cap_py_failed(I, cap_nb_symbol(nb)), NULL;
        Py_DECREF(r); /* x->obj itself, changed */
        return x;
    }
    r = base == NB_OR ? PyNumber_Or(x->obj, y->obj)
        : base == NB_AND ? PyNumber_And(x->obj, y->obj)
        : base == NB_SUBTRACT ? PyNumber_Subtract(x->obj, y->obj)
                              : PyNumber_Xor(x->obj, y->obj);
    if (!r) return cap_py_failed(I, cap_nb_symbol(nb)), NULL;
    return set_wrap_Steal(I, r);
}

/* comparisons with another set or frozenset (subset order, equality);
 * == / != with any other known value are False / True, as Python says */
static Sv *set_compare(Interp *I, int cmp, Sv *x, Sv *y) {
    static const int ops[] = {Py_LT, Py_LE, Py_EQ, Py_NE, Py_GT, Py_GE};
    Sv *other = x->kind == SV_SET ? y : x;
    int other_set = other->kind == SV_SET ||
                    (other->kind == SV_CONST && PyFrozenSet_CheckExact(other->obj) && exact_hashable(other->obj, 0));
    if (!other_set) {
        int known_other = other->kind == SV_TUPLE || other->kind == SV_LIST || other->kind == SV_DICT ||
                          (other->kind == SV_CONST && exact_hashable(other->obj, 0));
        if ((cmp == 2 || cmp == 3) && known_other) return sv_const(I, cmp == 3 ? Py_True : Py_False);
        return NULL;
    }
    PyObject *r = PyObject_RichCompare(x->obj, y->obj, ops[cmp]);
    return r ? sv_const_Steal(I, r) : (cap_py_failed(I, "set comparison"), NULL);
}

static WkRet *set_reconstruct(Interp *I, RetPlan *p, Sv *s, int depth) {
    (void)depth;
    if (holds_objects(s->obj)) return cap_unsupported(I, "a set of modules or objects leaving the frame"), NULL;
    PyObject *elems = PySequence_Tuple(s->obj);
    if (!elems) return cap_py_failed(I, "set"), NULL;
    wk_vec_push(&I->keep, elems);
    WkRet *c = cap_ret_new(p, WK_RET_CONST);
    c->value = elems;
    WkRet *r = cap_ret_new(p, WK_RET_CALL); /* set(<elements>): a new set per call */
    r->value = (PyObject *)&PySet_Type;
    r->nitems = 1;
    r->items = wk_xcalloc(2, sizeof(WkRet *));
    r->items[0] = c;
    return r;
}

static const char *const set_methods[] = {"add", "discard", "remove", "update", "union", "intersection",
                                          "difference", "symmetric_difference", "issubset", "issuperset",
                                          "isdisjoint", "copy", "clear", "pop", "intersection_update",
                                          "difference_update", "symmetric_difference_update"};

static int set_getattr(Interp *I, Sv *s, PyObject *name, int method) {
    const char *n = PyUnicode_AsUTF8(name);
    if (!n) return cap_py_failed(I, "attribute name");
    for (size_t i = 0; i < sizeof set_methods / sizeof set_methods[0]; i++)
        if (strcmp(n, set_methods[i]) == 0) return cap_push_method(I, s, n, method);
    return cap_unsupported(I, "attribute .%s of a set", n);
}

/* s.<name>(...) on a set built here: the real method on the real set, its
 * arguments made real first (elements for add/discard/remove, iterables
 * for the others). KeyError from remove/pop propagates as Python's would. */
Sv *cap_set_method_call(Interp *I, const char *name, const Args *a) {
    Sv *s = a->pos[0];
    int nargs = a->npos - 1, takes_element = !strcmp(name, "add") || !strcmp(name, "discard") || !strcmp(name, "remove");
    if (a->nkw) return cap_unsupported(I, "set.%s() with keywords", name), NULL;
    if (takes_element && nargs != 1) return cap_unsupported(I, "set.%s() with %d arguments", name, nargs), NULL;
    PyObject *args = PyTuple_New(nargs);
    if (!args) return cap_py_failed(I, name), NULL;
    for (int i = 0; i < nargs; i++) {
        PyObject *o = takes_element ? element_of(I, a->pos[1 + i]) : operand_obj(I, a->pos[1 + i]);
        if (!o) {
            Py_DECREF(args);
            if (takes_element) cap_unsupported(I, "a %s as a set element", sv_desc(a->pos[1 + i]));
            return NULL;
        }
        PyTuple_SET_ITEM(args, i, o);
    }
    if (!strcmp(name, "pop") && holds_objects(s->obj)) {
        Py_DECREF(args);
        return cap_unsupported(I, "set.pop() on a set of modules or objects"), NULL;
    }
    if (takes_element || !strcmp(name, "update") || !strcmp(name, "clear") || !strcmp(name, "pop") ||
        strstr(name, "_update"))
        s->version++;
    PyObject *m = PyObject_GetAttrString(s->obj, name);
    PyObject *r = m ? PyObject_Call(m, args, NULL) : NULL;
    Py_XDECREF(m);
    Py_DECREF(args);
    if (!r) {
        if (PyErr_ExceptionMatches(PyExc_KeyError)) return cap_raise_current(I, name), NULL;
        return cap_py_failed(I, name), NULL;
    }
    return set_wrap_Steal(I, r);
}

/* x in s: exact elements and identity tokens only (a tensor's hash is its
 * identity too, but tensors are graph values: not modelled) */
int cap_set_contains(Interp *I, Sv *s, Sv *x, int *out) {
    PyObject *e = element_of(I, x);
    if (!e) return cap_unsupported(I, "'in' on a set with a %s", sv_desc(x));
    int r = PySet_Contains(s->obj, e);
    Py_DECREF(e);
    if (r < 0) return cap_py_failed(I, "in");
    *out = r;
    return 0;
}

int cap_set_link_iter(Interp *I, Sv *it, Sv *const *srcs, int n) {
    for (int i = 0; i < n; i++) {
        if (srcs[i]->kind != SV_SET) continue;
        if (it->cell) return cap_unsupported(I, "iterating two sets at once");
        it->cell = srcs[i];
        it->version = srcs[i]->version;
        it->set_size = PySet_GET_SIZE(srcs[i]->obj);
    }
    return 0;
}

int cap_set_iter_check(Interp *I, Sv *it) {
    Sv *s = it->cell;
    if (!s || s->kind != SV_SET || s->version == it->version) return 0;
    if (PySet_GET_SIZE(s->obj) != it->set_size) {
        PyObject *exc = PyObject_CallFunction(PyExc_RuntimeError, "s", "Set changed size during iteration");
        if (!exc) return cap_py_failed(I, "for");
        int r = cap_raise(I, exc);
        Py_DECREF(exc);
        return r;
    }
    return cap_unsupported(I, "a set changed while a for loop walks it");
}

const SvOps cap_set_kind = {
    .name = "set",
    .truth = set_truth,
    .getattr = set_getattr,
    .iterate = set_iterate,
    .binary = set_binary,
    .compare = set_compare,
    .reconstruct = set_reconstruct,
};
