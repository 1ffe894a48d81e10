/* vals/newmodule.c — nn.Module objects constructed inside the captured
 * frame: a loss built in forward (`CrossEntropyLoss()` in BERT's and T5's
 * heads), nn.Identity(), nn.ReLU(), nn.Dropout(p).eval(), a user Module
 * subclass made and called in forward.
 *
 * Such a module is an SV_OBJECT (vals/userobj.c) with value
 * CAP_OBJ_NEW_MODULE: obj is its class, self (an SV_DICT) its instance
 * dict. Its __init__ chain is inlined; nn.Module's own methods that only do
 * bookkeeping are modelled here instead of inlined (cap_newmodule_method):
 *   Module.__init__    sets training=True and empty _parameters, _buffers,
 *                      _modules (SV_DICTs); the other bookkeeping it sets (the
 *                      hook dicts, _non_persistent_buffers_set) is known
 *                      empty and reading it is unsupported;
 *   register_buffer, add_module/register_module, train, eval;
 * and attribute assignment follows Module.__setattr__ (a module value goes
 * to _modules, a registered buffer's name to _buffers), attribute reads
 * Module.__getattr__ (parameters, buffers, submodules after the instance
 * dict and the class). Calling it is nn.Module.__call__ without hooks: its
 * forward inlined (the class keeps Module's __call__, no global hooks,
 * guarded; a fresh module has no hooks of its own).
 *
 * Not modelled (the construction is unsupported, so the frame breaks
 * before the instruction that builds the module and that instruction runs
 * eagerly, never wrong): a Parameter made in __init__ (nn.Linear(...):
 * a new leaf tensor with fresh random values on every call, which a graph
 * input cannot stand for), register_parameter, non-persistent buffers,
 * classes with their own __new__/__setattr__/__getattr__/__delattr__ or
 * call_super_init, hooks registered on the new module, and construction
 * while global module/buffer/parameter registration hooks exist (guarded
 * absent).
 *
 * A new module that leaves the frame (returned, live at a graph break,
 * stored on an outside object) is rebuilt after the graph by
 * wick._capture_meta.rebuild_module(cls, names, *values): object.__new__,
 * the real Module.__init__, then the instance dict capture computed (the
 * _parameters/_buffers/_modules entries merged into the real dicts).
 *
 * Owns: the cached nn.Module functions it compares against (process-wide,
 * never freed). Everything else is owned by the Interp. */
#include <string.h>

#include "../interp.h"

enum { M_INIT, M_REGISTER_BUFFER, M_ADD_MODULE, M_REGISTER_MODULE, M_REGISTER_PARAMETER, M_TRAIN, M_EVAL, M_NFUNCS };
static const char *const module_fn_names[M_NFUNCS] = {"__init__",       "register_buffer", "add_module",
                                                       "register_module", "register_parameter", "train",
                                                       "eval"};
static PyObject *module_fns[M_NFUNCS];       /* nn.Module's own functions, by identity */
static PyObject *bookkeeping;                /* frozenset: what Module.__init__ sets that capture does not model */
static PyObject *s_training, *s_parameters, *s_buffers, *s_modules, *s_forward, *s_call;
static PyObject *no_registration_hooks_fn;   /* wick._capture_meta.no_module_registration_hooks */
static PyObject *rebuild_module_fn;

/* Once Dynamo has run, nn.Module.__init__ is its patched_init (in
 * torch._dynamo.mutation_guard), which calls the original and then tags the
 * module for Dynamo's own bookkeeping: the original __init__ it wraps, or
 * f itself. The tag only concerns Dynamo (an untagged module is one it saw
 * before), so a patched __init__ is modelled as the original. Borrowed. */
static PyObject *unwrap_dynamo_init(PyObject *f) {
    if (!PyFunction_Check(f)) return f;
    PyFunctionObject *fn = (PyFunctionObject *)f;
    if (!fn->func_closure || !fn->func_module || !PyUnicode_Check(fn->func_module) ||
        PyUnicode_CompareWithASCIIString(fn->func_module, "torch._dynamo.mutation_guard") != 0)
        return f;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fn->func_closure); i++) {
        PyObject *c = PyCell_GET(PyTuple_GET_ITEM(fn->func_closure, i));
        if (c && PyFunction_Check(c) && ((PyFunctionObject *)c)->func_qualname &&
            PyUnicode_CompareWithASCIIString(((PyFunctionObject *)c)->func_qualname, "Module.__init__") == 0)
            return c;
    }
    return f;
}

static int init_tables(Interp *I) {
    if (rebuild_module_fn) return 0;
    for (int i = 0; i < M_NFUNCS; i++) {
        if (module_fns[i]) continue;
        PyObject *f = PyObject_GetAttrString((PyObject *)cap_module_type, module_fn_names[i]);
        if (!f) return cap_py_failed(I, "nn.Module methods");
        PyObject *g = unwrap_dynamo_init(f);
        /* only torch's own function is what the model stands for: one a
         * program patched in before (not Dynamo's) is inlined as it is */
        PyObject *mod = PyFunction_Check(g) ? ((PyFunctionObject *)g)->func_module : NULL;
        int torchs = mod && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "torch.nn.modules.module") == 0;
        module_fns[i] = torchs ? Py_NewRef(g) : Py_NewRef(Py_None);
        Py_DECREF(f);
    }
    if (!s_training && !(s_training = PyUnicode_InternFromString("training"))) return cap_py_failed(I, "names");
    if (!s_parameters && !(s_parameters = PyUnicode_InternFromString("_parameters"))) return cap_py_failed(I, "names");
    if (!s_buffers && !(s_buffers = PyUnicode_InternFromString("_buffers"))) return cap_py_failed(I, "names");
    if (!s_modules && !(s_modules = PyUnicode_InternFromString("_modules"))) return cap_py_failed(I, "names");
    if (!s_forward && !(s_forward = PyUnicode_InternFromString("forward"))) return cap_py_failed(I, "names");
    if (!s_call && !(s_call = PyUnicode_InternFromString("__call__"))) return cap_py_failed(I, "names");
    if (!bookkeeping) {
        /* the names a real Module.__init__ sets, read off one: what this
         * torch version keeps, less the four capture models */
        PyObject *m = PyObject_CallNoArgs((PyObject *)cap_module_type);
        PyObject *d = m ? PyObject_GenericGetDict(m, NULL) : NULL;
        PyObject *keys = d ? PySet_New(d) : NULL;
        Py_XDECREF(m);
        Py_XDECREF(d);
        if (!keys) return cap_py_failed(I, "nn.Module bookkeeping");
        PyObject *modelled[4] = {s_training, s_parameters, s_buffers, s_modules};
        for (int i = 0; i < 4; i++)
            if (PySet_Discard(keys, modelled[i]) < 0) {
                Py_DECREF(keys);
                return cap_py_failed(I, "nn.Module bookkeeping");
            }
        bookkeeping = PyFrozenSet_New(keys);
        Py_DECREF(keys);
        if (!bookkeeping) return cap_py_failed(I, "nn.Module bookkeeping");
    }
    PyObject *meta = PyImport_ImportModule("wick._capture_meta");
    if (!meta) return cap_py_failed(I, "wick._capture_meta");
    no_registration_hooks_fn = PyObject_GetAttrString(meta, "no_module_registration_hooks");
    rebuild_module_fn = no_registration_hooks_fn ? PyObject_GetAttrString(meta, "rebuild_module") : NULL;
    Py_DECREF(meta);
    if (!rebuild_module_fn) return cap_py_failed(I, "rebuild_module");
    return 0;
}

int cap_is_new_module(const Sv *s) { return s && s->kind == SV_OBJECT && s->value == CAP_OBJ_NEW_MODULE; }

/* A module value as Module.__setattr__ sees one: made here, or a real module. */
static int is_module_value(const Sv *v) {
    if (cap_is_new_module(v)) return 1;
    return (v->kind == SV_OPAQUE || v->kind == SV_CONST) && v->obj && cap_module_type &&
           PyObject_TypeCheck(v->obj, cap_module_type);
}

/* The _parameters/_buffers/_modules SV_DICT of o, or NULL before Module.__init__ ran. */
static Sv *own_dict(Sv *o, PyObject *which) {
    Sv *d = cap_dict_lookup(o->self, which);
    return d && d->kind == SV_DICT ? d : NULL;
}

static void dict_remove(Sv *d, PyObject *key) {
    if (!d) return;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(d->obj); i++) {
        int e = PyObject_RichCompareBool(PyList_GET_ITEM(d->obj, i), key, Py_EQ);
        if (e < 0) PyErr_Clear();
        if (e <= 0) continue;
        if (PySequence_DelItem(d->obj, i) < 0) PyErr_Clear();
        memmove(&d->items.data[i], &d->items.data[i + 1], (size_t)(d->items.len - 1 - i) * sizeof(Sv *));
        d->items.len--;
        return;
    }
}

/* The class keeps `name` as found now (guarded); 1 when that is nn.Module's own. */
static int keeps_module_attr(Interp *I, PyTypeObject *cls, PyObject *name) {
    PyObject *mine = _PyType_Lookup(cls, name), *base = _PyType_Lookup(cap_module_type, name);
    wk_guard_type_attr_is(I->guards, cls, name, mine);
    return mine == base;
}

/* cls(*args) for an nn.Module subclass: NULL without a reason when cls is not one. */
Sv *cap_newmodule_new(Interp *I, PyObject *cls, const Args *a) {
    if (!cap_module_type || !PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, cap_module_type)) return NULL;
    PyTypeObject *tp = (PyTypeObject *)cls;
    if (init_tables(I) < 0) return NULL;
    if (Py_TYPE(cls) != &PyType_Type || tp->tp_new != PyBaseObject_Type.tp_new || tp->tp_dictoffset == 0)
        return cap_unsupported(I, "%s() made in the frame: a metaclass or its own __new__", tp->tp_name), NULL;
    static const char *const kept[] = {"__setattr__", "__getattr__", "__delattr__", "__getattribute__",
                                       "call_super_init"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        PyObject *n = PyUnicode_InternFromString(kept[i]);
        if (!n) return cap_py_failed(I, kept[i]), NULL;
        int ok = keeps_module_attr(I, tp, n);
        Py_DECREF(n);
        if (!ok) return cap_unsupported(I, "%s() made in the frame: its own %s", tp->tp_name, kept[i]), NULL;
    }
    PyObject *no_hooks = PyObject_CallNoArgs(no_registration_hooks_fn);
    if (!no_hooks) return cap_py_failed(I, "registration hooks"), NULL;
    wk_guard_call_is(I->guards, no_registration_hooks_fn, no_hooks);
    Py_DECREF(no_hooks);
    if (no_hooks != Py_True)
        return cap_unsupported(I, "%s() made in the frame while global registration hooks exist", tp->tp_name), NULL;
    Sv *o = sv_new(I, SV_OBJECT);
    o->obj = Py_NewRef(cls);
    o->value = CAP_OBJ_NEW_MODULE;
    if (!(o->self = cap_dict_new(I))) return NULL;
    int ran = cap_run_init(I, o, tp, a);
    if (ran < 0) return NULL;
    if (!ran) return cap_unsupported(I, "%s() without a Python __init__", tp->tp_name), NULL;
    if (!own_dict(o, s_parameters))
        return cap_unsupported(I, "%s() made in the frame without nn.Module.__init__", tp->tp_name), NULL;
    return o;
}

/* The argument `name` (position k after self) of a modelled call, or dflt. */
static Sv *arg_of(const Args *a, int k, const char *name, Sv *dflt) {
    if (k + 1 < a->npos) return a->pos[k + 1];
    for (int i = 0; i < a->nkw; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(a->kwnames, i), name) == 0) return a->kw[i];
    return dflt;
}

/* A modelled call may only use the arguments it names. */
static int args_fit(Interp *I, const Args *a, const char *fname, int npos, const char *const *names) {
    if (a->npos - 1 > npos) return cap_unsupported(I, "Module.%s() with %d arguments", fname, a->npos - 1);
    for (int i = 0; i < a->nkw; i++) {
        int known = 0;
        for (int k = 0; k < npos; k++)
            known |= PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(a->kwnames, i), names[k]) == 0;
        if (!known) return cap_unsupported(I, "Module.%s() with keyword %s", fname, PyUnicode_AsUTF8(PyTuple_GET_ITEM(a->kwnames, i)));
    }
    return 0;
}

/* name is a plain attribute name Module's register_* accept, not taken by
 * anything but `which` (the dict it goes to): Python raises KeyError otherwise. */
static int check_register_name(Interp *I, Sv *o, Sv *name, PyObject *which, const char *what) {
    if (name->kind != SV_CONST || !PyUnicode_CheckExact(name->obj))
        return cap_unsupported(I, "%s name that is a %s", what, sv_desc(name));
    if (PyUnicode_GET_LENGTH(name->obj) == 0 || PyUnicode_FindChar(name->obj, '.', 0, PyUnicode_GET_LENGTH(name->obj), 1) != -1)
        return cap_unsupported(I, "%s name \"%s\" (Python raises)", what, PyUnicode_AsUTF8(name->obj));
    PyObject *dicts[3] = {s_parameters, s_buffers, s_modules};
    int taken = cap_dict_lookup(o->self, name->obj) != NULL ||
                _PyType_Lookup((PyTypeObject *)o->obj, name->obj) != NULL;
    for (int i = 0; i < 3; i++)
        if (dicts[i] != which && own_dict(o, dicts[i]) && cap_dict_lookup(own_dict(o, dicts[i]), name->obj)) taken = 1;
    wk_guard_type_attr_is(I->guards, (PyTypeObject *)o->obj, name->obj,
                          _PyType_Lookup((PyTypeObject *)o->obj, name->obj));
    if (taken) return cap_unsupported(I, "%s \"%s\": the attribute exists (Python raises)", what, PyUnicode_AsUTF8(name->obj));
    return 0;
}

/* train(mode) on o and the modules below it that were made here */
static int set_training(Interp *I, Sv *o, PyObject *mode, int depth) {
    if (depth > 32) return cap_unsupported(I, "train(): modules nested too deep");
    if (cap_dict_set(I, o->self, sv_const(I, s_training), sv_const(I, mode)) < 0) return -1;
    Sv *mods = own_dict(o, s_modules);
    for (int i = 0; mods && i < mods->items.len; i++) {
        Sv *c = mods->items.data[i];
        if (sv_is_none(c)) continue;
        if (!cap_is_new_module(c))
            return cap_unsupported(I, "train()/eval() reaching a module from outside the frame (changes it)");
        PyObject *tn = PyUnicode_InternFromString("train");
        int own = tn && keeps_module_attr(I, (PyTypeObject *)c->obj, tn);
        Py_XDECREF(tn);
        if (!own) return cap_unsupported(I, "train() of a %s: its own train()", ((PyTypeObject *)c->obj)->tp_name);
        if (set_training(I, c, mode, depth + 1) < 0) return -1;
    }
    return 0;
}

/* f(self, ...) where f is one of nn.Module's bookkeeping functions and self
 * a module made here: modelled. NULL without a reason otherwise. */
Sv *cap_newmodule_method(Interp *I, PyFunctionObject *f, const Args *a) {
    if (a->npos < 1 || !cap_is_new_module(a->pos[0]) || !module_fns[0]) return NULL;
    int which = -1;
    PyObject *g = unwrap_dynamo_init((PyObject *)f);
    for (int i = 0; i < M_NFUNCS; i++)
        if (g == module_fns[i]) which = i;
    if (which < 0) return NULL;
    Sv *o = a->pos[0], *none = sv_const(I, Py_None);
    const char *cn = ((PyTypeObject *)o->obj)->tp_name;
    switch (which) {
    case M_INIT: {
        if (a->npos > 1 || a->nkw) return cap_unsupported(I, "nn.Module.__init__() of a %s with arguments", cn), NULL;
        if (own_dict(o, s_parameters)) return cap_unsupported(I, "nn.Module.__init__() of a %s run twice", cn), NULL;
        /* object.__setattr__ of what Module.__init__ sets (the hook dicts
         * stay empty and are not modelled: reading them is unsupported) */
        PyObject *names[3] = {s_parameters, s_buffers, s_modules};
        if (cap_dict_set(I, o->self, sv_const(I, s_training), sv_const(I, Py_True)) < 0) return NULL;
        for (int i = 0; i < 3; i++) {
            Sv *d = cap_dict_new(I);
            if (!d || cap_dict_set(I, o->self, sv_const(I, names[i]), d) < 0) return NULL;
        }
        return none;
    }
    case M_REGISTER_BUFFER: {
        static const char *const names[] = {"name", "tensor", "persistent"};
        if (args_fit(I, a, "register_buffer", 3, names) < 0) return NULL;
        Sv *name = arg_of(a, 0, "name", NULL), *t = arg_of(a, 1, "tensor", NULL);
        Sv *persistent = arg_of(a, 2, "persistent", sv_const(I, Py_True));
        Sv *buffers = own_dict(o, s_buffers);
        if (!name || !t) return cap_unsupported(I, "register_buffer() with missing arguments"), NULL;
        if (!buffers) return cap_unsupported(I, "register_buffer() before nn.Module.__init__() (Python raises)"), NULL;
        if (persistent->kind != SV_CONST || persistent->obj != Py_True)
            return cap_unsupported(I, "register_buffer(persistent=False) on a module made in the frame"), NULL;
        if (t->kind != SV_TENSOR && !sv_is_none(t))
            return cap_unsupported(I, "register_buffer() of a %s (Python raises)", sv_desc(t)), NULL;
        if (cap_dict_lookup(buffers, name->kind == SV_CONST ? name->obj : NULL) == NULL &&
            check_register_name(I, o, name, s_buffers, "register_buffer") < 0)
            return NULL;
        if (cap_dict_set(I, buffers, name, t) < 0) return NULL;
        return none;
    }
    case M_ADD_MODULE:
    case M_REGISTER_MODULE: {
        static const char *const names[] = {"name", "module"};
        if (args_fit(I, a, module_fn_names[which], 2, names) < 0) return NULL;
        Sv *name = arg_of(a, 0, "name", NULL), *m = arg_of(a, 1, "module", NULL);
        Sv *mods = own_dict(o, s_modules);
        if (!name || !m) return cap_unsupported(I, "%s() with missing arguments", module_fn_names[which]), NULL;
        if (!mods) return cap_unsupported(I, "%s() before nn.Module.__init__()", module_fn_names[which]), NULL;
        if (!is_module_value(m) && !sv_is_none(m))
            return cap_unsupported(I, "%s() of a %s (Python raises)", module_fn_names[which], sv_desc(m)), NULL;
        if (cap_dict_lookup(mods, name->kind == SV_CONST ? name->obj : NULL) == NULL &&
            check_register_name(I, o, name, s_modules, module_fn_names[which]) < 0)
            return NULL;
        if (cap_dict_set(I, mods, name, m) < 0) return NULL;
        return none;
    }
    case M_REGISTER_PARAMETER:
        return cap_unsupported(I, "register_parameter() on a %s made in the frame (a new leaf every call)", cn), NULL;
    case M_TRAIN:
    case M_EVAL: {
        Sv *mode = sv_const(I, Py_False);
        if (which == M_TRAIN) {
            static const char *const names[] = {"mode"};
            if (args_fit(I, a, "train", 1, names) < 0) return NULL;
            mode = arg_of(a, 0, "mode", sv_const(I, Py_True));
            if (mode->kind != SV_CONST || !PyBool_Check(mode->obj))
                return cap_unsupported(I, "train() with a mode that is a %s (Python raises)", sv_desc(mode)), NULL;
        } else if (a->npos > 1 || a->nkw) {
            return cap_unsupported(I, "eval() with arguments"), NULL;
        }
        if (which == M_EVAL) { /* eval() is self.train(False): the class's train */
            PyObject *tn = PyUnicode_InternFromString("train");
            int own = tn && keeps_module_attr(I, (PyTypeObject *)o->obj, tn);
            Py_XDECREF(tn);
            if (!own) return cap_unsupported(I, "eval() of a %s: its own train()", cn), NULL;
        }
        if (set_training(I, o, mode->obj, 0) < 0) return NULL;
        return o;
    }
    }
    return NULL;
}

/* o.name, as Python finds it on a Module: data descriptors of the class,
 * the instance dict, the class, then Module.__getattr__ (parameters,
 * buffers, submodules); AttributeError when none has it. */
int cap_newmodule_getattr(Interp *I, Sv *o, PyObject *name, int method) {
    const char *n = PyUnicode_AsUTF8(name);
    if (!n) return cap_py_failed(I, "attribute");
    if (init_tables(I) < 0) return -1;
    PyTypeObject *tp = (PyTypeObject *)o->obj;
    if (strcmp(n, "__class__") == 0) {
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, sv_const(I, o->obj));
    }
    if (strcmp(n, "__dict__") == 0) return cap_unsupported(I, "__dict__ of a module made in the frame");
    PyObject *d = _PyType_Lookup(tp, name);
    wk_guard_type_attr_is(I->guards, tp, name, d);
    if (d && Py_TYPE(d) == &PyProperty_Type) {
        PyObject *fget = PyObject_GetAttrString(d, "fget");
        if (!fget) return cap_py_failed(I, n);
        int ok = PyFunction_Check(fget);
        Sv *getter = sv_const_Steal(I, fget);
        if (!ok) return cap_unsupported(I, "property .%s of %s with a builtin getter", n, tp->tp_name);
        return cap_push_property(I, o, getter, method);
    }
    if (d && Py_TYPE(d)->tp_descr_set) return cap_unsupported(I, "attribute .%s of %s is a data descriptor", n, tp->tp_name);
    Sv *v = cap_dict_lookup(o->self, name);
    if (v) {
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, v);
    }
    int r = PySet_Contains(bookkeeping, name);
    if (r < 0) return cap_py_failed(I, n);
    if (r) return cap_unsupported(I, "nn.Module bookkeeping .%s of a module made in the frame", n);
    if (d) {
        if (PyFunction_Check(d)) {
            Sv *fn = sv_const(I, d);
            if (method) {
                if (sv_push(I, fn) < 0) return -1;
                return sv_push(I, o);
            }
            return sv_push(I, cap_partial_new(I, fn, &o, 1, NULL));
        }
        if (Py_TYPE(d) == &PyStaticMethod_Type) {
            PyObject *fn = PyObject_GetAttrString(d, "__func__");
            if (!fn) return cap_py_failed(I, n);
            if (method && sv_push(I, I->null_sv) < 0) {
                Py_DECREF(fn);
                return -1;
            }
            return sv_push(I, sv_const_Steal(I, fn));
        }
        if (cap_is_plain(d) || PyType_Check(d)) {
            if (method && sv_push(I, I->null_sv) < 0) return -1;
            return sv_push(I, sv_const(I, d));
        }
        return cap_unsupported(I, "class attribute .%s of %s (a %s)", n, tp->tp_name, Py_TYPE(d)->tp_name);
    }
    PyObject *dicts[3] = {s_parameters, s_buffers, s_modules};
    for (int i = 0; i < 3; i++) {
        Sv *dd = own_dict(o, dicts[i]);
        if (!dd) return cap_unsupported(I, "attribute .%s of a %s before nn.Module.__init__()", n, tp->tp_name);
        if ((v = cap_dict_lookup(dd, name))) {
            if (method && sv_push(I, I->null_sv) < 0) return -1;
            return sv_push(I, v);
        }
    }
    /* every place Module.__getattr__ looks is known: Python raises */
    PyErr_Format(PyExc_AttributeError, "'%s' object has no attribute '%s'", tp->tp_name, n);
    return cap_raise_current(I, n);
}

/* o.name = v, as Module.__setattr__ does it. v NULL: del. */
int cap_newmodule_setattr(Interp *I, Sv *o, PyObject *name, Sv *v) {
    const char *n = PyUnicode_AsUTF8(name);
    if (!n) return cap_py_failed(I, "attribute");
    if (init_tables(I) < 0) return -1;
    PyTypeObject *tp = (PyTypeObject *)o->obj;
    if (!v) return cap_unsupported(I, "del of an attribute of a module made in the frame");
    PyObject *d = _PyType_Lookup(tp, name);
    wk_guard_type_attr_is(I->guards, tp, name, d);
    if (d && Py_TYPE(d)->tp_descr_set) return cap_unsupported(I, "assignment to descriptor .%s of %s", n, tp->tp_name);
    Sv *params = own_dict(o, s_parameters), *bufs = own_dict(o, s_buffers), *mods = own_dict(o, s_modules);
    if (v->obj && cap_param_type && PyObject_TypeCheck(v->obj, cap_param_type))
        return cap_unsupported(I, "a Parameter assigned to .%s of a %s made in the frame", n, tp->tp_name);
    if (params && cap_dict_lookup(params, name))
        return cap_unsupported(I, "assignment to parameter .%s of a %s made in the frame", n, tp->tp_name);
    if (is_module_value(v)) {
        if (!mods) return cap_unsupported(I, "a module assigned before nn.Module.__init__() (Python raises)");
        dict_remove(o->self, name);
        dict_remove(params, name);
        dict_remove(bufs, name);
        return cap_dict_set(I, mods, sv_const(I, name), v);
    }
    if (mods && cap_dict_lookup(mods, name)) {
        if (!sv_is_none(v)) return cap_unsupported(I, "a %s assigned to submodule .%s (Python raises)", sv_desc(v), n);
        return cap_dict_set(I, mods, sv_const(I, name), v);
    }
    if (bufs && cap_dict_lookup(bufs, name)) {
        if (!sv_is_none(v) && v->kind != SV_TENSOR)
            return cap_unsupported(I, "a %s assigned to buffer .%s (Python raises)", sv_desc(v), n);
        return cap_dict_set(I, bufs, sv_const(I, name), v);
    }
    if (v->kind == SV_TENSOR && v->obj && !cap_is_tensor_obj(v->obj))
        return cap_unsupported(I, "a tensor subclass assigned to .%s", n); /* nn.Buffer and friends */
    return cap_dict_set(I, o->self, sv_const(I, name), v);
}

/* m(*args): nn.Module.__call__ of a module without hooks, its forward inlined. */
Sv *cap_newmodule_call(Interp *I, Sv *o, const Args *a) {
    PyTypeObject *tp = (PyTypeObject *)o->obj;
    if (init_tables(I) < 0) return NULL;
    if (!keeps_module_attr(I, tp, s_call)) return cap_unsupported(I, "call of a %s made in the frame: its own __call__", tp->tp_name), NULL;
    int global_free = wk_guards_no_global_hooks();
    if (global_free < 0) return cap_py_failed(I, "module hooks"), NULL;
    if (!global_free) return cap_unsupported(I, "call of %s: global module hooks are registered", tp->tp_name), NULL;
    wk_guard_no_global_hooks(I->guards);
    if (!own_dict(o, s_parameters)) return cap_unsupported(I, "call of a %s before nn.Module.__init__()", tp->tp_name), NULL;
    int sp = I->f->sp;
    if (cap_newmodule_getattr(I, o, s_forward, 1) < 0) return NULL;
    if (I->f->sp != sp + 2) return cap_unsupported(I, "%s.forward is not a method", tp->tp_name), NULL;
    /* (function, self) for a method, (NULL, value) for an instance attribute */
    Sv *fn = I->f->stack[sp], *self = I->f->stack[sp + 1];
    I->f->sp = sp;
    if (fn == I->null_sv) {
        fn = self;
        self = NULL;
    }
    Sv *pos[72];
    if (a->npos > 64) return cap_unsupported(I, "call with too many arguments"), NULL;
    int k = 0;
    if (self) pos[k++] = self;
    for (int i = 0; i < a->npos; i++) pos[k++] = a->pos[i];
    Args b = {pos, k, a->kwnames, a->kw, a->nkw};
    return cap_call(I, fn, &b);
}

WkRet *cap_newmodule_reconstruct(Interp *I, RetPlan *p, Sv *o, int depth) {
    if (init_tables(I) < 0) return NULL;
    return cap_rebuild_call(I, p, rebuild_module_fn, o, depth);
}
