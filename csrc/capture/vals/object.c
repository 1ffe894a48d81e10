/* vals/object.c — the object kind: objects reached from the frame's
 * arguments (an nn.Module and its submodules, plain instances). Each keeps
 * its source (argument + attribute path); the transformed code reads what
 * the graph needs afresh on every call and guards check what was read.
 * Containers of modules (ModuleList, Sequential, ModuleDict) index and
 * iterate over their children. Attributes holding lists of plain instances
 * are read item by item, functools.partial and classes are pinned by
 * identity, and nn.LSTM/GRU/RNN's flat weights are read as the parameters
 * they name. */
#include <string.h>

#include "../interp.h"

static int tensor_cache(PyObject *d);

/* path + (step,): a new tuple, NULL with an error set. */
static PyObject *path_then(PyObject *path, const char *step) {
    PyObject *s = PyUnicode_InternFromString(step);
    PyObject *r = s ? cap_path_then_Ref(path, s) : NULL;
    Py_XDECREF(s);
    return r;
}

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
/* transformers' configs rename attributes in __getattribute__ through the
 * class's attribute_map and do nothing else: read like plain objects. */
int cap_renaming_getattribute(PyTypeObject *tp) {
    PyObject *n = PyUnicode_InternFromString("__getattribute__");
    PyObject *f = n ? _PyType_Lookup(tp, n) : NULL;
    Py_XDECREF(n);
    if (!f || !PyFunction_Check(f)) return 0;
    PyObject *q = ((PyFunctionObject *)f)->func_qualname;
    const char *s = q && PyUnicode_Check(q) ? PyUnicode_AsUTF8(q) : NULL;
    return s && (strcmp(s, "PreTrainedConfig.__getattribute__") == 0 ||
                 strcmp(s, "PretrainedConfig.__getattribute__") == 0);
}

/* Attribute writes to objects reached from arguments are kept in an
 * overlay while capture runs (reads see them); a write that is not undone
 * by the end of the frame is a side effect capture does not replay yet. */
static int overlay_find(Interp *I, PyObject *obj, PyObject *name) {
    for (int i = I->overlay.len - 1; i >= 0; i--)
        if (I->overlay.data[i].obj == obj && PyUnicode_Compare(I->overlay.data[i].name, name) == 0) return i;
    PyErr_Clear();
    return -1;
}

/* An instance pinned by identity (a global object, a registry): a constant
 * that is not a class, module, function or plain value. */
static int pinned_instance(PyObject *o) {
    return !PyType_Check(o) && !PyModule_Check(o) && !PyFunction_Check(o) && !PyCFunction_Check(o) &&
           !PyMethod_Check(o) && !cap_is_plain(o) && !cap_is_tensor_obj(o);
}

int cap_overlay_lookup(Interp *I, PyObject *obj, PyObject *name, Sv **out) {
    int i = I->overlay.len ? overlay_find(I, obj, name) : -1;
    if (i < 0) return 0;
    *out = I->overlay.data[i].value;
    return 1;
}

/* Is v read from o.name itself (o.w += x stores back the tensor it wrote in place)? */
static int is_own_attr(const Sv *o, PyObject *name, const Sv *v) {
    if (!v || v->arg < 0 || v->arg != o->arg || !v->path || v->gname || o->gname) return 0;
    Py_ssize_t n = o->path ? PyTuple_GET_SIZE(o->path) : 0;
    if (PyTuple_GET_SIZE(v->path) != n + 1) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(v->path, i), PyTuple_GET_ITEM(o->path, i), Py_EQ);
        if (eq != 1) {
            PyErr_Clear();
            return 0;
        }
    }
    int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(v->path, n), name, Py_EQ);
    if (eq < 0) PyErr_Clear();
    return eq == 1;
}

/* Names a fresh nn.Module keeps in its instance __dict__ (training, the
 * registries, hook dicts): capture reads them itself, so a write to one is
 * not modelled. New reference to a set, or NULL with an exception. */
static PyObject *module_internal_names_Ref(void) {
    static PyObject *names;
    if (!names) {
        PyObject *m = PyObject_CallNoArgs((PyObject *)cap_module_type);
        PyObject **dp = m ? _PyObject_GetDictPtr(m) : NULL;
        names = dp && *dp ? PySet_New(*dp) : NULL;
        Py_XDECREF(m);
        if (!names) return NULL;
    }
    return Py_NewRef(names);
}

/* o.name = v on an nn.Module argument, checked to be what Module.__setattr__
 * does for a plain value: the class keeps nn.Module's __setattr__, name is
 * no parameter, buffer or submodule of o (guarded: the replay's setattr then
 * stores into the instance __dict__ as eager does), and v is no Parameter,
 * Buffer or Module (those register it). 0, or -1 with a reason. */
static int module_setattr_check(Interp *I, Sv *o, PyObject *name, Sv *v) {
    PyTypeObject *tp = Py_TYPE(o->obj);
    const char *nm = PyUnicode_AsUTF8(name);
    if (!nm) return cap_py_failed(I, "attribute name");
    if (o->kind != SV_OPAQUE || o->arg < 0)
        return cap_unsupported(I, "attribute assignment on an nn.Module capture cannot replay it to");
    static PyObject *s_setattr, *s_delattr;
    if (!s_setattr && !(s_setattr = PyUnicode_InternFromString("__setattr__"))) return cap_py_failed(I, nm);
    if (!s_delattr && !(s_delattr = PyUnicode_InternFromString("__delattr__"))) return cap_py_failed(I, nm);
    PyObject *own = _PyType_Lookup(tp, v ? s_setattr : s_delattr);
    if (!own || own != _PyType_Lookup(cap_module_type, v ? s_setattr : s_delattr))
        return cap_unsupported(I, "attribute assignment on a %s (its own %s)", tp->tp_name,
                               v ? "__setattr__" : "__delattr__");
    PyObject *internal = module_internal_names_Ref();
    if (!internal) return cap_py_failed(I, nm);
    int is_internal = PySet_Contains(internal, name);
    Py_DECREF(internal);
    if (is_internal != 0) {
        PyErr_Clear();
        return cap_unsupported(I, "assignment to nn.Module bookkeeping attribute .%s", nm);
    }
    if (!wk_guards_module_plain_attr(o->obj, name))
        return cap_unsupported(I, "assignment to .%s, a parameter, buffer or submodule of a %s", nm, tp->tp_name);
    PyObject *vo = v ? v->obj : NULL;
    int registers = v && (cap_is_new_module(v) || v->kind == SV_SCRATCH ||
                          (vo && v->kind != SV_CONST && PyObject_TypeCheck(vo, cap_module_type)) ||
                          (vo && v->kind != SV_CONST && PyObject_TypeCheck(vo, cap_tensor_type) &&
                           Py_TYPE(vo) != cap_tensor_type) ||
                          (vo && v->kind == SV_CONST && (PyObject_TypeCheck(vo, cap_module_type) ||
                                                         PyObject_TypeCheck(vo, cap_tensor_type))));
    if (registers)
        return cap_unsupported(I, "assignment of a %s to an nn.Module attribute (it registers it)", sv_desc(v));
    wk_guard_type_attr_is(I->guards, tp, v ? s_setattr : s_delattr, own);
    wk_guard_type_attr_is(I->guards, tp, name, _PyType_Lookup(tp, name));
    wk_guard_module_plain_attr_at(I->guards, o->arg, o->path, name);
    return 0;
}

int cap_object_setattr(Interp *I, Sv *o, PyObject *name, Sv *v) {
    /* argument objects and pinned global instances (transformers' output
     * collector flips its `compiling` flag while torch.compiler.is_compiling()
     * answers True): written in the overlay, replayed after the graph */
    int pinned = o->kind == SV_CONST && o->obj && pinned_instance(o->obj);
    if (!pinned && (o->kind != SV_OPAQUE || !o->obj || o->arg < 0))
        return cap_unsupported(I, "attribute assignment on a %s", sv_desc(o));
    /* storing back what the attribute holds (unchanged by an overlay write):
     * nothing changes, for modules too (their __setattr__ would re-register it) */
    if (is_own_attr(o, name, v) && overlay_find(I, o->obj, name) < 0) return 0;
    PyTypeObject *tp = Py_TYPE(o->obj);
    int module = cap_module_type && PyObject_TypeCheck(o->obj, cap_module_type);
    if (module && module_setattr_check(I, o, name, v) < 0) return -1;
    if (!module && tp->tp_setattro != PyObject_GenericSetAttr && !cap_renaming_getattribute(tp))
        return cap_unsupported(I, "attribute assignment on a %s (custom __setattr__)", tp->tp_name);
    PyObject *descr = _PyType_Lookup(tp, name);
    if (!_PyObject_GetDictPtr(o->obj) || (descr && Py_TYPE(descr)->tp_descr_set)) /* Python raises, or runs code */
        return cap_unsupported(I, "attribute assignment on a %s without an instance dict entry", tp->tp_name);
    int i = overlay_find(I, o->obj, name);
    /* del of an attribute this frame did not set: whether it exists (or
     * raises AttributeError) depends on the object, which no guard pins */
    if (!v && (i < 0 || !I->overlay.data[i].value))
        return cap_unsupported(I, "deleting attribute .%s the frame did not set", PyUnicode_AsUTF8(name));
    if (i < 0) {
        CapOverlay e = {o->obj, Py_NewRef(name), v, o};
        wk_vec_push(&I->overlay, e);
    } else {
        I->overlay.data[i].value = v;
    }
    return 0;
}

/* 0 when every overlay entry matches the object as it is (no net effect) */
int cap_overlay_check(Interp *I) {
    for (int i = 0; i < I->overlay.len; i++) {
        CapOverlay *e = &I->overlay.data[i];
        if (overlay_find(I, e->obj, e->name) != i) continue; /* a later write wins */
        PyObject **dp = _PyObject_GetDictPtr(e->obj);
        PyObject *cur = dp && *dp ? PyDict_GetItemWithError(*dp, e->name) : NULL;
        PyErr_Clear();
        int same = e->value ? (cur && e->value->kind == SV_CONST && e->value->obj == cur) ||
                                  (cur && e->value->obj == cur && e->value->arg >= 0)
                            : cur == NULL;
        if (!same)
            return cap_unsupported(I, "the frame changes attribute .%s of a %s (side effects are not replayed yet)",
                                   PyUnicode_AsUTF8(e->name), Py_TYPE(e->obj)->tp_name);
    }
    return 0;
}

static int plain_list(PyObject *l) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(l); i++)
        if (!cap_is_plain(PyList_GET_ITEM(l, i))) return 0;
    return 1;
}

/* an object an attribute read takes as SV_OPAQUE (cap_object_attr), alone
 * or as a list's item: a plain instance (plain attribute lookup, an
 * instance dict), not a class, module, callable, tensor or nn.Module (a
 * module attribute is read as SV_OPAQUE on its own terms) */
static int plain_instance(PyObject *x) {
    PyTypeObject *tp = Py_TYPE(x);
    return (tp->tp_getattro == PyObject_GenericGetAttr || cap_renaming_getattribute(tp)) && tp->tp_dictoffset != 0 &&
           !PyType_Check(x) && !PyModule_Check(x) && !PyCallable_Check(x) && !cap_is_tensor_obj(x) &&
           !(cap_module_type && PyObject_TypeCheck(x, cap_module_type));
}

static int object_list(PyObject *l) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(l); i++)
        if (!plain_instance(PyList_GET_ITEM(l, i))) return 0;
    return 1;
}

/* item, found at argument arg + sub (its path, which the Sv takes): an
 * object of the guarded type, read through that path */
static Sv *opaque_item_Steal(Interp *I, PyObject *item, int arg, PyObject *sub) {
    wk_guard_type_at(I->guards, arg, sub, Py_TYPE(item));
    Sv *it = sv_new(I, SV_OPAQUE);
    it->obj = Py_NewRef(item);
    it->arg = arg;
    it->path = sub;
    return it;
}

/* a dict of str keys holding nn.Modules (kernels' per-instance
 * _kernel_funcs wrappers) */
static int module_dict(PyObject *d) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &k, &v))
        if (!PyUnicode_CheckExact(k) || !cap_module_type || !PyObject_TypeCheck(v, cap_module_type)) return 0;
    return 1;
}

static int plain_dict(PyObject *d) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &k, &v))
        if (!cap_is_plain(k) || !cap_is_plain(v)) return 0;
    return 1;
}

/* 1 when p is exactly a functools.partial of a torch callable or a Python
 * function whose bound arguments and keywords are plain values */
static int plain_partial(PyObject *p) {
    static PyTypeObject *partial_type; /* functools.partial (owned for the process) */
    if (!partial_type) {
        PyObject *ft = PyImport_ImportModule("functools");
        PyObject *t = ft ? PyObject_GetAttrString(ft, "partial") : NULL;
        Py_XDECREF(ft);
        PyErr_Clear();
        if (!t || !PyType_Check(t)) return Py_XDECREF(t), 0;
        partial_type = (PyTypeObject *)t;
    }
    if (Py_TYPE(p) != partial_type) return 0;
    PyObject *fn = PyObject_GetAttrString(p, "func"), *args = PyObject_GetAttrString(p, "args"),
             *kw = PyObject_GetAttrString(p, "keywords");
    int ok = fn && args && kw && PyTuple_CheckExact(args) && PyDict_CheckExact(kw) &&
             (PyFunction_Check(fn) || (PyCFunction_Check(fn) && cap_is_torch_callable(fn))) && cap_is_plain(args);
    PyObject *k, *x;
    Py_ssize_t pos = 0;
    while (ok && PyDict_Next(kw, &pos, &k, &x)) ok = PyUnicode_CheckExact(k) && cap_is_plain(x);
    Py_XDECREF(fn);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    PyErr_Clear();
    return ok;
}

/* the SV_PARTIAL of a plain_partial p */
static Sv *partial_of(Interp *I, PyObject *p) {
    PyObject *fn = PyObject_GetAttrString(p, "func"), *args = PyObject_GetAttrString(p, "args"),
             *kw = PyObject_GetAttrString(p, "keywords");
    Sv *r = NULL, *kwd = NULL;
    if (fn && args && kw && (!PyDict_GET_SIZE(kw) || (kwd = cap_dict_new(I)))) {
        PyObject *k, *x;
        Py_ssize_t pos = 0;
        int ok = 1;
        while (ok && PyDict_Next(kw, &pos, &k, &x)) ok = cap_dict_set(I, kwd, sv_const(I, k), sv_const(I, x)) == 0;
        Sv *items[64];
        Py_ssize_t n = PyTuple_GET_SIZE(args);
        if (n > 64) {
            cap_unsupported(I, "a partial with more than 64 bound arguments");
            ok = 0;
        }
        for (Py_ssize_t i = 0; ok && i < n; i++) items[i] = sv_const(I, PyTuple_GET_ITEM(args, i));
        if (ok) r = cap_partial_new(I, sv_const(I, fn), items, (int)n, kwd);
    } else if (!CAP_FAILED(I)) {
        cap_py_failed(I, "functools.partial");
    }
    Py_XDECREF(fn);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return r;
}

static Sv *child(Interp *I, Sv *o, PyObject *key);

/* A module's _modules dict (nn.ModuleDict.items(), named_children(),
 * DenseNet's and RegNet's loops over their blocks): a dict Sv of its
 * children, each read as the attribute it is (so guarded and used like
 * self.<name>), keys guarded in order (they decide what capture unrolls).
 * Its source is this path: capture refuses to change it (vals/dict.c).
 * NULL with no error set where the dict holds anything but modules and
 * None under str keys; NULL with an error where capture failed. */
static Sv *modules_dict(Interp *I, Sv *o, PyObject *mods, PyObject *path, int *failed) {
    *failed = 0;
    PyObject *k, *val;
    Py_ssize_t pos = 0;
    if (o->arg < 0 || PyDict_GET_SIZE(mods) > 4096) return NULL;
    while (PyDict_Next(mods, &pos, &k, &val))
        if (!PyUnicode_CheckExact(k) || (val != Py_None && !PyObject_TypeCheck(val, cap_module_type))) return NULL;
    PyObject *keys = PyDict_Keys(mods), *kt = keys ? PyList_AsTuple(keys) : NULL;
    Py_XDECREF(keys);
    if (!kt) {
        *failed = 1;
        cap_py_failed(I, "_modules keys");
        return NULL;
    }
    wk_guard_shape_at(I->guards, o->arg, path, mods, kt);
    Py_DECREF(kt);
    Sv *s = cap_dict_new(I);
    pos = 0;
    while (s && PyDict_Next(mods, &pos, &k, &val)) {
        Sv *c = val == Py_None ? sv_const(I, Py_None) : child(I, o, k);
        if (!c || PyList_Append(s->obj, k) < 0) {
            if (c) cap_py_failed(I, "_modules");
            *failed = 1;
            return NULL;
        }
        wk_vec_push(&s->items, c);
    }
    if (!s) *failed = 1;
    return s;
}

/* nn.LSTM, nn.GRU, nn.RNN (torch's RNNBase): forward first calls
 * self._update_flat_weights(), which rebuilds self._flat_weights from the
 * parameters named in self._flat_weights_names when one was replaced (it
 * compares weak references). Capture reads self._flat_weights as those
 * parameters, each through its own attribute path (guarded like
 * self.weight_ih_l0), which is the list that call leaves, so the call itself
 * is wick._inlined.rnn_update_flat_weights, which does nothing. */
static PyObject *rnn_base, *rnn_update_func, *rnn_update_noop; /* owned for the process */

static int rnn_init(void) {
    if (rnn_update_noop) return 1;
    PyObject *m = PyImport_ImportModule("torch.nn.modules.rnn");
    PyObject *base = m ? PyObject_GetAttrString(m, "RNNBase") : NULL;
    PyObject *upd = base && PyType_Check(base) ? PyObject_GetAttrString(base, "_update_flat_weights") : NULL;
    PyObject *inl = upd && PyFunction_Check(upd) ? PyImport_ImportModule("wick._inlined") : NULL;
    PyObject *noop = inl ? PyObject_GetAttrString(inl, "rnn_update_flat_weights") : NULL;
    Py_XDECREF(m);
    Py_XDECREF(inl);
    if (!noop) {
        Py_XDECREF(base);
        Py_XDECREF(upd);
        PyErr_Clear();
        return 0;
    }
    rnn_base = base;
    rnn_update_func = upd;
    rnn_update_noop = noop;
    return 1;
}

static PyObject *rnn_update_stand_in(PyObject *func) {
    return rnn_init() && func == rnn_update_func ? rnn_update_noop : NULL;
}

/* 1 when o is an RNNBase whose class keeps torch's _update_flat_weights (guarded) */
static int rnn_module(Interp *I, PyObject *o) {
    if (!rnn_init() || !PyObject_TypeCheck(o, (PyTypeObject *)rnn_base)) return 0;
    PyObject *name = PyUnicode_InternFromString("_update_flat_weights");
    PyObject *d = name ? _PyType_Lookup(Py_TYPE(o), name) : NULL;
    int ok = d == rnn_update_func;
    if (ok) wk_guard_type_attr_is(I->guards, Py_TYPE(o), name, d);
    Py_XDECREF(name);
    PyErr_Clear();
    return ok;
}

static Sv *rnn_flat_weights(Interp *I, Sv *o) {
    PyObject *names_attr = PyUnicode_InternFromString("_flat_weights_names");
    Sv *names = names_attr ? child(I, o, names_attr) : NULL;
    Py_XDECREF(names_attr);
    if (!names) return CAP_FAILED(I) ? NULL : (cap_py_failed(I, "_flat_weights_names"), NULL);
    if (names->kind != SV_LIST) return cap_unsupported(I, "an RNN's _flat_weights_names that is no list of names"), NULL;
    Sv *s = sv_new(I, SV_LIST);
    for (int i = 0; i < names->items.len; i++) {
        Sv *n = names->items.data[i];
        if (n->kind != SV_CONST || !PyUnicode_CheckExact(n->obj))
            return cap_unsupported(I, "an RNN's _flat_weights_names that is no list of names"), NULL;
        Sv *w = child(I, o, n->obj);
        if (!w) return NULL;
        if (w->kind != SV_TENSOR)
            return cap_unsupported(I, "an RNN's flat weight .%s that is no tensor", PyUnicode_AsUTF8(n->obj)), NULL;
        wk_vec_push(&s->items, w);
    }
    return s;
}

/* nn.Module's hook registries: OrderedDicts of hook id -> hook (or -> True) */
static int is_hook_registry(const char *nm) {
    static const char *const names[] = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                        "_backward_pre_hooks", "_forward_hooks_with_kwargs",
                                        "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(nm, names[i]) == 0) return 1;
    return 0;
}

/* A module's hook registry d, read through path: a dict Sv of its hooks
 * as they are now, its keys guarded in order (registering or removing a
 * hook recompiles) and each hook guarded by identity (plain values by
 * value), so len(), truth, membership and iteration answer from it;
 * capture refuses to change it (vals/dict.c). */
static Sv *hook_registry(Interp *I, PyObject *d, int arg, PyObject *path) {
    PyObject *keys = PySequence_Tuple(d); /* an OrderedDict's own order */
    if (!keys) return cap_py_failed(I, "hook registry"), NULL;
    if (PyTuple_GET_SIZE(keys) > 64) {
        Py_DECREF(keys);
        return cap_unsupported(I, "a module with more than 64 hooks of one kind"), NULL;
    }
    wk_guard_shape_at(I->guards, arg, path, d, keys);
    Sv *s = cap_dict_new(I);
    for (Py_ssize_t i = 0; s && i < PyTuple_GET_SIZE(keys); i++) {
        PyObject *k = PyTuple_GET_ITEM(keys, i);
        PyObject *hook = PyObject_GetItem(d, k), *sub = hook ? cap_path_item_Ref(path, k) : NULL;
        if (!sub || PyList_Append(s->obj, k) < 0) {
            Py_XDECREF(hook);
            Py_XDECREF(sub);
            Py_DECREF(keys);
            return cap_py_failed(I, "hook registry"), NULL;
        }
        if (cap_is_plain(hook)) wk_guard_equals_at(I->guards, arg, sub, hook);
        else wk_guard_id_at(I->guards, arg, sub, hook);
        Py_DECREF(sub);
        wk_vec_push(&s->items, sv_const_Steal(I, hook));
    }
    Py_DECREF(keys);
    if (!s) return NULL;
    s->arg = arg;
    s->path = Py_NewRef(path);
    return s;
}

/* fn bound to self: the [fn, self] pair a method load pushes, or a bound
 * method (a partial) for a plain attribute load */
static int push_bound(Interp *I, Sv *fn, Sv *self, int method) {
    if (method) {
        if (sv_push(I, fn) < 0) return -1;
        return sv_push(I, self);
    }
    return sv_push(I, cap_partial_new(I, fn, &self, 1, NULL));
}

int cap_object_attr(Interp *I, Sv *o, PyObject *name, int method) {
    const char *nm = PyUnicode_AsUTF8(name);
    if (!nm) return cap_py_failed(I, "attribute name");
    PyTypeObject *tp = Py_TYPE(o->obj);
    int is_module = cap_module_type && PyObject_TypeCheck(o->obj, cap_module_type);
    if (!is_module && tp->tp_getattro != PyObject_GenericGetAttr && !cap_renaming_getattribute(tp))
        return cap_unsupported(I, "attribute .%s of %s (custom __getattr__)", nm, tp->tp_name);
    if (strcmp(nm, "__class__") == 0) { /* the exact type, which guards pin */
        wk_guard_type_at(I->guards, o->arg, o->path, tp);
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, sv_const(I, (PyObject *)tp));
    }
    int ov = overlay_find(I, o->obj, name);
    if (ov >= 0) {
        Sv *v = I->overlay.data[ov].value;
        if (!v) return cap_unsupported(I, "read of deleted attribute .%s", nm);
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, v);
    }
    PyObject *d = _PyType_Lookup(tp, name);
    if (d && Py_TYPE(d) == &PyProperty_Type) {
        /* a property: its getter inlined with self; the class keeps this property */
        PyObject *fget = PyObject_GetAttrString(d, "fget");
        if (!fget) return cap_py_failed(I, nm);
        int ok = PyFunction_Check(fget);
        Sv *getter = sv_const_Steal(I, fget);
        if (!ok) return cap_unsupported(I, "property .%s of %s with a builtin getter", nm, tp->tp_name);
        wk_guard_type_attr_is(I->guards, tp, name, d);
        return cap_push_property(I, o, getter, method);
    }
    if (d && Py_TYPE(d)->tp_descr_set)
        return cap_unsupported(I, "attribute .%s of %s is a data descriptor", nm, tp->tp_name);
    if (o->path && PyTuple_GET_SIZE(o->path) >= 32) return cap_unsupported(I, "attribute path too long");
    PyObject *v = PyObject_GetAttr(o->obj, name);
    if (!v) return cap_py_failed(I, nm);
    PyObject *path = cap_path_then_Ref(o->path, name);
    if (!path) {
        Py_DECREF(v);
        return cap_py_failed(I, nm);
    }
    Sv *s = NULL;
    if (is_module && o->arg >= 0 && (PyODict_CheckExact(v) || PyDict_CheckExact(v)) && is_hook_registry(nm)) {
        s = hook_registry(I, v, o->arg, path);
        Py_DECREF(v);
        Py_DECREF(path);
        if (!s) return -1;
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, s);
    }
    if (is_module && PyDict_CheckExact(v) && strcmp(nm, "_modules") == 0) {
        int failed;
        s = modules_dict(I, o, v, path, &failed);
        if (failed) {
            Py_DECREF(v);
            Py_DECREF(path);
            return -1;
        }
        if (s) {
            Py_DECREF(v);
            s->arg = o->arg;
            s->path = path;
            if (method && sv_push(I, I->null_sv) < 0) return -1;
            return sv_push(I, s);
        }
    }
    if (is_module && PyList_CheckExact(v) && strcmp(nm, "_flat_weights") == 0 && rnn_module(I, o->obj)) {
        Py_DECREF(v);
        s = rnn_flat_weights(I, o);
        if (!s) {
            Py_DECREF(path);
            return -1;
        }
        s->arg = o->arg;
        s->path = path;
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, s);
    }
    if (PyMethod_Check(v) && PyMethod_GET_SELF(v) == o->obj && PyFunction_Check(PyMethod_GET_FUNCTION(v))) {
        PyObject *func = PyMethod_GET_FUNCTION(v);
        if (d == func) {
            /* self.helper(...): the function from o's (guarded, exact) type,
             * inlined with self, as long as the class keeps it and the
             * instance does not shadow it */
            wk_guard_type_attr_is(I->guards, tp, name, d);
            wk_guard_dict_lacks_at(I->guards, o->arg, o->path, name);
        } else {
            /* a method of o held in o's own dict (timm's FasterNet picks its
             * forward in __init__: self.forward = self.forward_slicing): its
             * function and its self guarded by identity through the path (a
             * guard holding the method would keep o alive) */
            PyObject *func_path = path_then(path, "__func__"), *self_path = path_then(path, "__self__");
            if (!func_path || !self_path) {
                Py_XDECREF(func_path);
                Py_XDECREF(self_path);
                Py_DECREF(v);
                Py_DECREF(path);
                return cap_py_failed(I, nm);
            }
            wk_guard_type_at(I->guards, o->arg, path, &PyMethod_Type);
            wk_guard_id_at(I->guards, o->arg, func_path, func);
            wk_guard_id_at(I->guards, o->arg, self_path, o->obj);
            Py_DECREF(func_path);
            Py_DECREF(self_path);
        }
        PyObject *stand_in = rnn_update_stand_in(func);
        Sv *fn = sv_const(I, stand_in ? stand_in : func);
        Py_DECREF(v);
        Py_DECREF(path);
        return push_bound(I, fn, o, method);
    }
    if (d && Py_TYPE(d) == &PyClassMethod_Type && PyMethod_Check(v) && PyMethod_GET_SELF(v) == (PyObject *)tp &&
        PyFunction_Check(PyMethod_GET_FUNCTION(v))) {
        /* a classmethod read through the instance: its function with the
         * (guarded, exact) class bound, while the class holds it and the
         * instance does not shadow it */
        wk_guard_type_attr_is(I->guards, tp, name, d);
        wk_guard_dict_lacks_at(I->guards, o->arg, o->path, name);
        Sv *fn = sv_const(I, PyMethod_GET_FUNCTION(v)), *cls = sv_const(I, (PyObject *)tp);
        Py_DECREF(v);
        Py_DECREF(path);
        return push_bound(I, fn, cls, method);
    }
    if (d && Py_TYPE(d) == &PyStaticMethod_Type && PyFunction_Check(v)) {
        /* a staticmethod: the function the class holds, while it holds it and
         * the instance does not shadow it */
        wk_guard_type_attr_is(I->guards, tp, name, d);
        wk_guard_dict_lacks_at(I->guards, o->arg, o->path, name);
        Py_DECREF(path);
        if (method && sv_push(I, I->null_sv) < 0) {
            Py_DECREF(v);
            return -1;
        }
        return sv_push(I, sv_const_Steal(I, v));
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
               (cap_dtype_type && Py_TYPE(v) == (PyTypeObject *)cap_dtype_type) ||
               (cap_device_type && Py_TYPE(v) == (PyTypeObject *)cap_device_type) || /* a StaticLayer's device */
               (PyTuple_CheckExact(v) && cap_is_plain(v))) {
        wk_guard_equals_at(I->guards, o->arg, path, v);
        s = sv_new(I, SV_CONST);
    } else if (PyList_CheckExact(v) && PyList_GET_SIZE(v) <= 64 && plain_list(v)) {
        /* a list of plain values (torchvision's Permute keeps its dims in
         * one): guarded equal to a copy of it as it is now, read as a list
         * Sv whose source is this path (returned, it is the same list);
         * capture refuses to change it (vals/seq.c) */
        PyObject *snapshot = PyList_GetSlice(v, 0, PyList_GET_SIZE(v));
        if (!snapshot) {
            Py_DECREF(v);
            Py_DECREF(path);
            return cap_py_failed(I, nm);
        }
        wk_guard_equals_at(I->guards, o->arg, path, snapshot);
        s = sv_new(I, SV_LIST);
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(snapshot); i++)
            wk_vec_push(&s->items, sv_const(I, PyList_GET_ITEM(snapshot, i)));
        Py_DECREF(snapshot);
        Py_DECREF(v);
        s->arg = o->arg;
        s->path = path;
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, s);
    } else if (PyList_CheckExact(v) && PyList_GET_SIZE(v) > 0 && PyList_GET_SIZE(v) <= 64 && object_list(v)) {
        /* a list of plain instances (transformers' DynamicCache.layers, a
         * list of DynamicLayer): its length guarded, each item an object
         * read through path[i] (its type guarded there), read as a list Sv
         * whose source is this path (capture refuses to change the list
         * itself; the items' attribute writes are replayed as any
         * argument object's) */
        Py_ssize_t n = PyList_GET_SIZE(v);
        PyObject *len = PyLong_FromSsize_t(n);
        if (!len) {
            Py_DECREF(v);
            Py_DECREF(path);
            return cap_py_failed(I, nm);
        }
        wk_guard_type_at(I->guards, o->arg, path, &PyList_Type);
        wk_guard_shape_at(I->guards, o->arg, path, v, len);
        Py_DECREF(len);
        s = sv_new(I, SV_LIST);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PyList_GET_ITEM(v, i), *idx = PyLong_FromSsize_t(i);
            PyObject *sub = idx ? cap_path_item_Ref(path, idx) : NULL;
            Py_XDECREF(idx);
            if (!sub) {
                Py_DECREF(v);
                Py_DECREF(path);
                return cap_py_failed(I, nm);
            }
            wk_vec_push(&s->items, opaque_item_Steal(I, item, o->arg, sub));
        }
        Py_DECREF(v);
        s->arg = o->arg;
        s->path = path;
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, s);
    } else if (PyDict_CheckExact(v) && PyDict_GET_SIZE(v) <= 4096 && plain_dict(v)) {
        /* a dict of plain keys and values (a config's id2label, an
         * EncoderDecoderCache's is_updated): guarded equal to a copy of it
         * as it is now, keys in order and every key and value of the same
         * type (guards.c), read as a dict Sv whose source is this path
         * (returned, it is the same dict); a change is written back to it
         * after the graph (vals/dict.c), and a later read of that dict is
         * the changed Sv */
        Sv *changed = cap_attr_dict_read(I, v, o->arg, path);
        if (changed) {
            Py_DECREF(v);
            Py_DECREF(path);
            if (method && sv_push(I, I->null_sv) < 0) return -1;
            return sv_push(I, changed);
        }
        PyObject *snapshot = PyDict_Copy(v);
        if (!snapshot) {
            Py_DECREF(v);
            Py_DECREF(path);
            return cap_py_failed(I, nm);
        }
        wk_guard_equals_at(I->guards, o->arg, path, snapshot);
        s = cap_dict_new(I);
        PyObject *k, *item;
        Py_ssize_t pos = 0;
        int appended = s != NULL;
        while (appended && PyDict_Next(snapshot, &pos, &k, &item))
            if ((appended = PyList_Append(s->obj, k) == 0)) wk_vec_push(&s->items, sv_const(I, item));
        Py_DECREF(snapshot);
        if (appended) cap_attr_dict_note(I, s, v);
        Py_DECREF(v);
        if (!appended) {
            Py_DECREF(path);
            return s ? cap_py_failed(I, nm) : -1;
        }
        s->arg = o->arg;
        s->path = path;
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, s);
    } else if (PyDict_CheckExact(v) && PyDict_GET_SIZE(v) > 0 && PyDict_GET_SIZE(v) <= 64 && module_dict(v)) {
        /* a plain dict of modules held outside _modules (kernels'
         * `_kernel_funcs`, one wrapper per layer name): its keys guarded in
         * order, each module an object read through path[key] (its type
         * guarded there), read as a dict Sv capture does not let the frame
         * change (it is not noted as a changeable attribute dict) */
        PyObject *keys = PyDict_Keys(v), *key_tuple = keys ? PyList_AsTuple(keys) : NULL;
        Py_XDECREF(keys);
        if (!key_tuple) {
            Py_DECREF(v);
            Py_DECREF(path);
            return cap_py_failed(I, nm);
        }
        wk_guard_type_at(I->guards, o->arg, path, &PyDict_Type);
        wk_guard_shape_at(I->guards, o->arg, path, v, key_tuple);
        s = cap_dict_new(I);
        for (Py_ssize_t i = 0; s && i < PyTuple_GET_SIZE(key_tuple); i++) {
            PyObject *k = PyTuple_GET_ITEM(key_tuple, i), *item = PyDict_GetItemWithError(v, k);
            PyObject *sub = item ? cap_path_item_Ref(path, k) : NULL;
            if (!sub || PyList_Append(s->obj, k) < 0) {
                Py_XDECREF(sub);
                s = NULL;
                break;
            }
            wk_vec_push(&s->items, opaque_item_Steal(I, item, o->arg, sub));
        }
        Py_DECREF(key_tuple);
        Py_DECREF(v);
        if (!s) {
            Py_DECREF(path);
            return CAP_FAILED(I) ? -1 : cap_py_failed(I, nm);
        }
        s->arg = o->arg;
        s->path = path;
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, s);
    } else if (PyDict_CheckExact(v) && PyDict_GET_SIZE(v) > 0 && PyDict_GET_SIZE(v) <= 64 && tensor_cache(v)) {
        /* a dict of str keys holding tensors (timm's attention_bias_cache,
         * filled by the first eager call): its keys guarded in order, each
         * tensor an input read through the path, the dict unchangeable */
        s = cap_source_dict(I, v, o->arg, path);
        Py_DECREF(v);
        Py_DECREF(path);
        if (!s) return -1;
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, s);
    } else if (PyCFunction_Check(v) && cap_is_torch_callable(v)) {
        /* a torch builtin held as an attribute (an activation's function):
         * compared by identity, called as a constant */
        wk_guard_equals_at(I->guards, o->arg, path, v);
        s = sv_new(I, SV_CONST);
    } else if (plain_partial(v)) {
        /* a functools.partial held as an attribute (transformers' GELUTanh.act
         * = partial(F.gelu, approximate="tanh")): pinned by identity, its
         * func, args and keywords (read-only on a partial) read as they
         * are, called as a partial made here would be */
        wk_guard_id_at(I->guards, o->arg, path, v);
        s = partial_of(I, v);
        Py_DECREF(v);
        Py_DECREF(path);
        if (!s) return -1;
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, s);
    } else if (PyType_Check(v)) {
        /* a class held as an attribute (a module's autograd.Function or norm
         * layer class): this very class, guarded by identity, a constant */
        wk_guard_id_at(I->guards, o->arg, path, v);
        s = sv_new(I, SV_CONST);
    } else if (PyFunction_Check(v)) {
        /* a Python function held as an attribute (timm's GammaAct.act_fn):
         * this very function, guarded by identity, called as a constant
         * (inlined as a global function is, its code and defaults guarded) */
        wk_guard_id_at(I->guards, o->arg, path, v);
        s = sv_new(I, SV_CONST);
    } else if ((cap_module_type && PyObject_TypeCheck(v, cap_module_type)) || plain_instance(v)) {
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

/* Which of torch's containers (ModuleList, Sequential, ModuleDict) o's
 * class is or derives from (torchvision's Conv2dNormActivation is a
 * Sequential): "ModuleList", ... or NULL. The dunders capture models for
 * it are guarded to be torch's own (guard_protocol). */
static const char *container_base(PyObject *o) {
    if (!is_module(o)) return NULL;
    PyObject *mro = Py_TYPE(o)->tp_mro;
    for (Py_ssize_t i = 0; mro && PyTuple_Check(mro) && i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *t = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        const char *tn = t->tp_name;
        if (strcmp(tn, "ModuleList") != 0 && strcmp(tn, "Sequential") != 0 && strcmp(tn, "ModuleDict") != 0) continue;
        PyObject *m = PyDict_GetItemString(t->tp_dict, "__module__"); /* torch's, not a namesake */
        if (m && PyUnicode_Check(m) && PyUnicode_CompareWithASCIIString(m, "torch.nn.modules.container") == 0)
            return tn;
    }
    return NULL;
}

/* The children of a module container, in order: (key, module) pairs from
 * its _modules dict. 0 when o is no such container. */
static int module_children(PyObject *o, PyObject **mods_Borrow) {
    if (!container_base(o)) return 0;
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

/* 1 when o (an object from the arguments) has attribute name now, as the
 * overlay sees it; an absent attribute is guarded absent. */
int cap_object_hasattr(Interp *I, Sv *o, PyObject *name) {
    int ov = overlay_find(I, o->obj, name);
    if (ov >= 0) return I->overlay.data[ov].value != NULL;
    int r = PyObject_HasAttr(o->obj, name);
    if (!r && o->arg >= 0) {
        wk_guard_type_attr_is(I->guards, Py_TYPE(o->obj), name, NULL);
        wk_guard_dict_lacks_at(I->guards, o->arg, o->path, name);
    }
    return r;
}

/* What capture models for a container (items from _modules, in order)
 * stands for the class's own `dunder`: guarded unchanged on the class. */
static int guard_protocol(Interp *I, Sv *o, const char *dunder) {
    PyObject *n = PyUnicode_InternFromString(dunder);
    if (!n) return cap_py_failed(I, dunder);
    PyObject *f = _PyType_Lookup(Py_TYPE(o->obj), n);
    /* only torch's own method is what the modelling stands for (a class
     * patched after import would compute something else) */
    PyObject *mod = f && PyFunction_Check(f) ? ((PyFunctionObject *)f)->func_module : NULL;
    int torchs = !f || (mod && PyUnicode_Check(mod) &&
                        PyUnicode_CompareWithASCIIString(mod, "torch.nn.modules.container") == 0);
    if (torchs) wk_guard_type_attr_is(I->guards, Py_TYPE(o->obj), n, f);
    Py_DECREF(n);
    if (!torchs) return cap_unsupported(I, "%s.%s replaced", Py_TYPE(o->obj)->tp_name, dunder);
    return 0;
}

static Sv *child(Interp *I, Sv *o, PyObject *key) {
    int sp = I->f->sp;
    if (cap_object_attr(I, o, key, 0) < 0) return NULL;
    Sv *r = sv_pop(I);
    I->f->sp = sp;
    return r;
}

/* The container's _modules keys, in order, guarded as they are now: the
 * number and order of the children decide what capture unrolls (each
 * child's own type is guarded where it is read). */
static int guard_children(Interp *I, Sv *o, PyObject *mods) {
    if (o->arg < 0) return cap_unsupported(I, "iterating a module container not reached from the arguments");
    PyObject *keys = PyDict_Keys(mods), *kt = keys ? PyList_AsTuple(keys) : NULL;
    PyObject *path = kt ? path_then(o->path, "_modules") : NULL;
    Py_XDECREF(keys);
    if (!path) {
        Py_XDECREF(kt);
        return cap_py_failed(I, "module container keys");
    }
    wk_guard_shape_at(I->guards, o->arg, path, mods, kt);
    Py_DECREF(path);
    Py_DECREF(kt);
    return 0;
}

static int object_iterate(Interp *I, Sv *o, SvList *out) {
    PyObject *mods;
    int exposed = cap_arg_list_expose(I, o);
    if (exposed) return exposed < 0 ? -1 : cap_iterate(I, o, out);
    if (!module_children(o->obj, &mods)) return cap_unsupported(I, "iterating a %s", cap_type_name(o->obj));
    if (guard_protocol(I, o, "__iter__") < 0) return -1;
    if (guard_children(I, o, mods) < 0) return -1;
    int dict = strcmp(container_base(o->obj), "ModuleDict") == 0;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(mods, &pos, &k, &v)) {
        /* torch's __iter__ yields None entries too (calling one raises) */
        Sv *c = dict ? sv_const(I, k) : child(I, o, k);
        if (!c) return -1;
        wk_vec_push(out, c);
    }
    return 0;
}

static Sv *object_subscript(Interp *I, Sv *o, Sv *k) {
    PyObject *mods;
    int exposed = cap_arg_list_expose(I, o);
    if (exposed) return exposed < 0 ? NULL : SV_OPS(o)->subscript(I, o, k);
    if (!module_children(o->obj, &mods) || k->kind != SV_CONST)
        return cap_unsupported(I, "subscript of a %s by a %s", cap_type_name(o->obj), sv_desc(k)), NULL;
    if (guard_protocol(I, o, "__getitem__") < 0) return NULL;
    if (PyUnicode_CheckExact(k->obj)) return child(I, o, k->obj);
    if (PySlice_Check(k->obj) && strcmp(Py_TYPE(o->obj)->tp_name, "ModuleList") == 0) {
        /* layers[:n]: a ModuleList of those children; a list of them whose
         * obj names the class (isinstance answers ModuleList; it is not
         * returned: seq.c refuses to rebuild it) */
        SvList items = {0};
        Py_ssize_t start, stop, step;
        if (object_iterate(I, o, &items) < 0) return wk_vec_free(&items), NULL;
        if (PySlice_Unpack(k->obj, &start, &stop, &step) < 0) return wk_vec_free(&items), cap_py_failed(I, "slice"), NULL;
        Py_ssize_t n = PySlice_AdjustIndices(items.len, &start, &stop, step);
        Sv *r = sv_new(I, SV_LIST);
        for (Py_ssize_t i = 0, j = start; i < n; i++, j += step) wk_vec_push(&r->items, items.data[j]);
        wk_vec_free(&items);
        r->obj = Py_NewRef((PyObject *)Py_TYPE(o->obj));
        return r;
    }
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
        if (guard_protocol(I, o, "__len__") < 0 || guard_protocol(I, o, "__bool__") < 0) return -1;
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

Sv *cap_module_base_call(Interp *I, Sv *self) {
    if (self->kind != SV_OPAQUE || !is_module(self->obj) || self->arg < 0) return NULL;
    Sv *v = sv_new(I, SV_OPAQUE);
    v->obj = Py_NewRef(self->obj);
    v->arg = self->arg;
    v->path = Py_XNewRef(self->path);
    v->value = CAP_MODULE_BASE_CALL;
    return v;
}

static int object_getattr(Interp *I, Sv *o, PyObject *name, int method) {
    /* list.append/extend/insert/clear and set.add/discard/clear on a list or
     * set argument (its exact type is guarded): replayed after the graph
     * (breaks.c); capture never reads the container itself */
    if (o->arg >= 0 && !o->path && o->obj && I->brk && cap_container_effect_method(o->obj, name)) {
        const char *nm = PyUnicode_AsUTF8(name);
        return nm ? cap_push_method(I, o, nm, method) : cap_py_failed(I, "attribute name");
    }
    /* other list methods read the items: the list is exposed (breaks.c) */
    int exposed = cap_arg_list_expose(I, o);
    if (exposed) return exposed < 0 ? -1 : SV_OPS(o)->getattr(I, o, name, method);
    if (o->arg < 0) return cap_unsupported(I, "attribute .%s of %s", PyUnicode_AsUTF8(name), cap_type_name(o->obj));
    return cap_object_attr(I, o, name, method);
}

/* a's arguments with self before them, in out (pos: room for 72):
 * 0, or -1 with the reason recorded */
static int with_self(Interp *I, Sv *self, const Args *a, Sv **pos, Args *out) {
    if (a->npos > 64) return cap_unsupported(I, "call with too many arguments");
    pos[0] = self;
    for (int i = 0; i < a->npos; i++) pos[i + 1] = a->pos[i];
    *out = (Args){pos, a->npos + 1, a->kwnames, a->kw, a->nkw};
    return 0;
}

/* Calls hook(self, *rest): its result (NULL: failed) */
static Sv *call_hook(Interp *I, Sv *hook, Sv *self, Sv *const *rest, int nrest) {
    Sv *pos[4] = {self};
    for (int i = 0; i < nrest; i++) pos[i + 1] = rest[i];
    Args b = {pos, nrest + 1, NULL, NULL, 0};
    return cap_call(I, hook, &b);
}

/* A hook registry of module o read through its path (hook_registry) */
static Sv *registry(Interp *I, Sv *o, const char *nm) {
    PyObject *name = PyUnicode_InternFromString(nm);
    Sv *r = name ? child(I, o, name) : NULL;
    Py_XDECREF(name);
    if (!r && !CAP_FAILED(I)) cap_py_failed(I, nm);
    if (r && r->kind != SV_DICT) return cap_unsupported(I, "a module whose .%s is no hook registry", nm), NULL;
    return r;
}

/* module(*args, **kwargs) for a module with forward pre-hooks or forward
 * hooks, as nn.Module._call_impl runs it: each pre-hook in order may
 * replace the positional arguments (one registered with_kwargs: the
 * arguments and the keywords), then forward runs, then each forward hook
 * in order may replace the result. The hooks are inlined as any call is.
 * The registries are read through the module's path (hook_registry
 * guards their keys and hooks); backward hooks, which need autograd hook
 * nodes around the call, are refused. */
static Sv *call_with_hooks(Interp *I, Sv *o, Sv *forward, Sv *self, const Args *a) {
    Sv *pre = registry(I, o, "_forward_pre_hooks");
    Sv *pre_kw = pre ? registry(I, o, "_forward_pre_hooks_with_kwargs") : NULL;
    Sv *post = pre_kw ? registry(I, o, "_forward_hooks") : NULL;
    Sv *post_kw = post ? registry(I, o, "_forward_hooks_with_kwargs") : NULL;
    Sv *bw = post_kw ? registry(I, o, "_backward_hooks") : NULL;
    Sv *bw_pre = bw ? registry(I, o, "_backward_pre_hooks") : NULL;
    if (!bw_pre) return NULL;
    if (bw->items.len || bw_pre->items.len)
        return cap_unsupported(I, "call of %s: the module has backward hooks", Py_TYPE(o->obj)->tp_name), NULL;
    Sv *args = sv_seq(I, SV_TUPLE, a->pos, a->npos), *kwargs = cap_dict_new(I);
    if (!kwargs) return NULL;
    for (int i = 0; i < a->nkw; i++)
        if (cap_dict_set(I, kwargs, sv_const(I, PyTuple_GET_ITEM(a->kwnames, i)), a->kw[i]) < 0) return NULL;
    for (int i = 0; i < pre->items.len; i++) {
        Sv *hook = pre->items.data[i];
        if (cap_dict_lookup(pre_kw, PyList_GET_ITEM(pre->obj, i))) {
            Sv *rest[2] = {args, kwargs}, *r = call_hook(I, hook, self, rest, 2);
            if (!r) return NULL;
            if (sv_is_none(r)) continue;
            if (r->kind != SV_TUPLE || r->items.len != 2 || r->items.data[0]->kind != SV_TUPLE ||
                r->items.data[1]->kind != SV_DICT)
                return cap_unsupported(I, "a forward pre-hook with kwargs that returns no (args, kwargs) pair"), NULL;
            args = r->items.data[0];
            kwargs = r->items.data[1];
        } else {
            Sv *r = call_hook(I, hook, self, &args, 1);
            if (!r) return NULL;
            if (sv_is_none(r)) continue;
            args = r->kind == SV_TUPLE ? r : sv_seq(I, SV_TUPLE, &r, 1);
        }
    }
    int npos = args->items.len, nkw = kwargs->items.len;
    if (npos + nkw > 64) return cap_unsupported(I, "call with too many arguments"), NULL;
    PyObject *names = NULL;
    if (nkw) {
        names = PyList_AsTuple(kwargs->obj);
        if (!names) return cap_py_failed(I, "keyword arguments"), NULL;
        sv_const_Steal(I, names); /* alive while capture runs */
        for (int i = 0; i < nkw; i++)
            if (!PyUnicode_Check(PyTuple_GET_ITEM(names, i)))
                return cap_unsupported(I, "a keyword argument whose name is no str"), NULL;
    }
    Args given = {args->items.data, npos, names, kwargs->items.data, nkw}, b;
    Sv *pos[72];
    if (with_self(I, self, &given, pos, &b) < 0) return NULL;
    Sv *result = cap_call(I, forward, &b);
    for (int i = 0; result && i < post->items.len; i++) {
        Sv *hook = post->items.data[i];
        Sv *r;
        if (cap_dict_lookup(post_kw, PyList_GET_ITEM(post->obj, i))) {
            Sv *rest[3] = {args, kwargs, result};
            r = call_hook(I, hook, self, rest, 3);
        } else {
            Sv *rest[2] = {args, result};
            r = call_hook(I, hook, self, rest, 2);
        }
        if (!r) return NULL;
        if (!sv_is_none(r)) result = r;
    }
    return result;
}

/* module(x): nn.Module.__call__ is forward(x), with the module's forward
 * pre-hooks and hooks around it (call_with_hooks). Other callable
 * objects: their type's __call__ inlined. */
static Sv *object_call(Interp *I, Sv *o, const Args *a) {
    PyTypeObject *tp = Py_TYPE(o->obj);
    Sv *exited = cap_real_exit_call(I, o, a);
    if (exited || CAP_FAILED(I)) return exited;
    if (o->arg < 0) return cap_unsupported(I, "call of a %s", tp->tp_name), NULL;
    PyObject *name = PyUnicode_InternFromString(is_module(o->obj) ? "forward" : "__call__");
    if (!name) return cap_py_failed(I, "call"), NULL;
    if (is_module(o->obj)) {
        PyObject *call_name = PyUnicode_InternFromString("__call__");
        PyObject *call = call_name ? _PyType_Lookup(tp, call_name) : NULL;
        PyObject *base_call = call_name ? _PyType_Lookup(cap_module_type, call_name) : NULL;
        int hooks_free = wk_guards_module_has_no_hooks(o->obj), global_free = wk_guards_no_global_hooks();
        if (global_free < 0) {
            Py_XDECREF(call_name);
            Py_DECREF(name);
            return cap_py_failed(I, "module hooks"), NULL;
        }
        if (call && call != base_call && PyFunction_Check(call) && o->value != CAP_MODULE_BASE_CALL) {
            /* a subclass's own __call__ (transformers' GradientCheckpointingLayer):
             * inlined; its super().__call__ comes back here as the base call */
            wk_guard_type_attr_is(I->guards, tp, call_name, call);
            Py_DECREF(call_name);
            Py_DECREF(name);
            Sv *pos[72];
            Args b;
            return with_self(I, o, a, pos, &b) < 0 ? NULL : cap_inline_call(I, (PyFunctionObject *)call, &b);
        }
        if (o->value == CAP_MODULE_BASE_CALL) {
            /* super().__call__ from that __call__: nn.Module's own, hooks checked below */
            call = base_call;
            if (call_name) {
                PyObject *own = _PyType_Lookup(tp, call_name);
                wk_guard_type_attr_is(I->guards, tp, call_name, own);
            }
        }
        if (!call || call != base_call || !global_free || hooks_free < 0) {
            Py_XDECREF(call_name);
            Py_DECREF(name);
            if (hooks_free < 0) return cap_py_failed(I, "module hooks"), NULL;
            return cap_unsupported(I, "call of %s: %s", tp->tp_name,
                                   !call || call != base_call ? "a custom __call__" : "torch has global module hooks"),
                   NULL;
        }
        if (o->value != CAP_MODULE_BASE_CALL) wk_guard_type_attr_is(I->guards, tp, call_name, call);
        if (hooks_free) wk_guard_no_hooks_at(I->guards, o->arg, o->path);
        wk_guard_no_global_hooks(I->guards);
        Py_DECREF(call_name);
        /* forward is read as self.forward is: an instance attribute would win */
        int sp = I->f->sp;
        int rc = cap_object_attr(I, o, name, 1);
        Py_DECREF(name);
        if (rc < 0) return NULL;
        if (I->f->sp != sp + 2) return cap_unsupported(I, "%s.forward is not a method", tp->tp_name), NULL;
        Sv *fn = I->f->stack[sp], *self = I->f->stack[sp + 1];
        I->f->sp = sp;
        if (!hooks_free) return call_with_hooks(I, o, fn, self, a);
        Sv *pos[72];
        Args b;
        return with_self(I, self, a, pos, &b) < 0 ? NULL : cap_call(I, fn, &b);
    }
    Py_DECREF(name);
    return cap_unsupported(I, "call of a %s object", tp->tp_name), NULL;
}

/* lst += items on a list argument: lst.extend(items) replayed (breaks.c),
 * the list itself the result. NULL without a reason: not this case. */
static Sv *object_binary(Interp *I, int nb, Sv *x, Sv *y) {
    if (nb != NB_INPLACE_ADD || x->kind != SV_OPAQUE || x->arg < 0 || x->path || !x->obj || !PyList_CheckExact(x->obj))
        return NULL;
    Sv *pos[2] = {x, y};
    Args a = {pos, 2, NULL, NULL, 0};
    return cap_container_effect(I, "extend", &a) ? x : NULL;
}

/* A dict of str keys and values that are tensors or plain values, at least
 * one a tensor. */
static int tensor_cache(PyObject *d) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    int tensors = 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k)) return 0;
        if (cap_is_tensor_obj(v)) tensors++;
        else if (!cap_is_plain(v)) return 0;
    }
    return tensors > 0;
}

/* == and != of an enum member read from the frame's arguments (timm's
 * self.output_fmt != Format.NCHW) against a constant or another such
 * member: folded, the member guarded by identity (members are singletons). */
static Sv *object_compare(Interp *I, int cmp, Sv *x, Sv *y) {
    if (cmp != 2 && cmp != 3) return NULL;
    Sv *sides[2] = {x, y};
    int members = 0;
    for (int k = 0; k < 2; k++) {
        Sv *s = sides[k];
        if (s->kind == SV_OPAQUE) {
            if (!s->obj || s->arg < 0 || !cap_is_plain_enum_member(s->obj)) return NULL;
            members++;
        } else if (s->kind == SV_CONST) {
            if (cap_is_plain_enum_member(s->obj)) members++;
            else if (!cap_is_plain(s->obj)) return NULL;
        } else {
            return NULL;
        }
    }
    if (!members) return NULL;
    PyObject *r = PyObject_RichCompare(x->obj, y->obj, cmp == 2 ? Py_EQ : Py_NE);
    if (!r) return cap_py_failed(I, "comparison"), NULL;
    for (int k = 0; k < 2; k++)
        if (sides[k]->kind == SV_OPAQUE) wk_guard_id_at(I->guards, sides[k]->arg, sides[k]->path, sides[k]->obj);
    return sv_const_Steal(I, r);
}

const SvOps cap_opaque_kind = {
    .call = object_call,
    .compare = object_compare,
    .binary = object_binary,
    .name = NULL,
    .truth = object_truth,
    .getattr = object_getattr,
    .subscript = object_subscript,
    .iterate = object_iterate,
};
