/* vals/const.c — the constant kind: Python values known at capture time
 * (numbers, str, None, tuples of constants, dtypes, torch.Size, modules,
 * functions, types and builtins). Guards made each constant what it is, so
 * operators, truth, subscripts and iteration fold at capture time; calls
 * are dispatched by what the callable is (torch function, user function,
 * builtin, context manager). */
#include <string.h>

#include "../interp.h"

int cap_is_number(PyObject *o) {
    return PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o);
}

/* Values whose operations run no user code and whose results are again
 * plain data: safe to fold at compile time. */
int cap_is_plain(PyObject *o) {
    if (o == Py_None || cap_is_number(o) || PyUnicode_CheckExact(o) || PyComplex_CheckExact(o)) return 1;
    /* torch.dtype: compared by identity in C, no arithmetic (that raises);
     * torch.device, finfo, iinfo: immutable descriptions */
    if (cap_dtype_type && Py_TYPE(o) == (PyTypeObject *)cap_dtype_type) return 1;
    if (cap_strided_layout && Py_TYPE(o) == Py_TYPE(cap_strided_layout)) return 1; /* torch.layout */
    if (PyCode_Check(o) || o == Py_Ellipsis || PySlice_Check(o)) return 1;
    if (PyFrozenSet_CheckExact(o)) return 1;
    if (cap_enum_type && PyObject_TypeCheck((PyObject *)Py_TYPE(o), (PyTypeObject *)cap_enum_type)) return 1;
    if (cap_device_type && Py_TYPE(o) == (PyTypeObject *)cap_device_type) return 1;
    if ((cap_finfo_type && Py_TYPE(o) == (PyTypeObject *)cap_finfo_type) ||
        (cap_iinfo_type && Py_TYPE(o) == (PyTypeObject *)cap_iinfo_type))
        return 1;
    if (PyTuple_CheckExact(o) || (cap_size_type && Py_TYPE(o) == (PyTypeObject *)cap_size_type)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); i++)
            if (!cap_is_plain(PyTuple_GET_ITEM(o, i))) return 0;
        return 1;
    }
    return 0;
}

const char *cap_type_name(PyObject *o) { return Py_TYPE(o)->tp_name; }

/* Builds the Sv items of a tuple, range or str constant (immutable: what
 * guards pinned stays what was read). 1 when o is such a constant, 0 when
 * not, -1 on failure. */
int cap_const_items(Interp *I, PyObject *o, SvList *out) {
    if (!(PyTuple_Check(o) || PyRange_Check(o) || PyUnicode_CheckExact(o))) return 0;
    if (PyRange_Check(o)) {
        Py_ssize_t n = PyObject_Length(o);
        if (n < 0) return cap_py_failed(I, "len(range)");
        if (n > 100000) return cap_unsupported(I, "iterating a range of %zd items", n);
    }
    PyObject *it = PyObject_GetIter(o);
    if (!it) return cap_py_failed(I, "iter()");
    PyObject *x;
    while ((x = PyIter_Next(it)) != NULL) wk_vec_push(out, sv_const_Steal(I, x));
    Py_DECREF(it);
    if (PyErr_Occurred()) return cap_py_failed(I, "iteration");
    return 1;
}

PyObject *cap_pinned_list_Ref(Interp *I, Sv *c) {
    if (c->kind != SV_CONST || !PyList_CheckExact(c->obj) || PyList_GET_SIZE(c->obj) > 64) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(c->obj); i++)
        if (!cap_is_plain(PyList_GET_ITEM(c->obj, i))) return NULL;
    if (cap_list_appended(I, c->obj))
        return cap_unsupported(I, "reading a list the frame appended to"), NULL;
    PyObject *snapshot = PyList_GetSlice(c->obj, 0, PyList_GET_SIZE(c->obj));
    if (!snapshot) return cap_py_failed(I, "list"), NULL;
    int seen = 0;
    for (int i = 0; i < I->lists_read.len && !seen; i++) seen = I->lists_read.data[i] == c->obj;
    if (!seen) {
        wk_guard_pinned_equals(I->guards, c->obj, snapshot);
        wk_vec_push(&I->lists_read, c->obj);
    }
    return snapshot;
}

static int const_truth(Interp *I, Sv *s, int *out) {
    PyObject *o = s->obj;
    if (cap_is_plain(o) || PyModule_Check(o) || PyFunction_Check(o) || PyCFunction_Check(o) || PyType_Check(o) ||
        PyRange_Check(o)) {
        int t = PyObject_IsTrue(o);
        if (t < 0) return cap_py_failed(I, "truth value");
        *out = t;
        return 0;
    }
    PyObject *items = cap_pinned_list_Ref(I, s);
    if (items) {
        *out = PyList_GET_SIZE(items) > 0;
        Py_DECREF(items);
        return 0;
    }
    if (CAP_FAILED(I)) return -1;
    return cap_unsupported(I, "branch on a %s", cap_type_name(o));
}

static PyObject *stateless_module_dict(PyObject *m);

/* Pushes an attribute's value v (stolen) as a constant, after the NULL a
 * method load puts below it. */
static int push_const_Steal(Interp *I, PyObject *v, int method) {
    if (method && sv_push(I, I->null_sv) < 0) {
        Py_DECREF(v);
        return -1;
    }
    return sv_push(I, sv_const_Steal(I, v));
}

static int const_getattr(Interp *I, Sv *o, PyObject *name, int method) {
    Sv *written;
    if (o->obj == Py_None) I->none_step = I->top_steps; /* breaks.c graph_may_end_at */
    if (PyList_CheckExact(o->obj) && PyUnicode_CompareWithASCIIString(name, "append") == 0)
        return cap_push_method(I, o, "append", method); /* replayed after the graph (cap_list_append_effect) */
    if (I->overlay.len && cap_overlay_lookup(I, o->obj, name, &written)) {
        /* the frame set this attribute of a pinned instance (vals/object.c) */
        if (!written) return cap_unsupported(I, "read of deleted attribute .%s", PyUnicode_AsUTF8(name));
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, written);
    }
    if (PyModule_Check(o->obj) || o->obj == (PyObject *)cap_tensor_type) {
        PyObject *v = PyObject_GetAttr(o->obj, name);
        if (!v) return cap_py_failed(I, PyUnicode_AsUTF8(name));
        if (PyModule_Check(o->obj) && !cap_is_torch_module(o->obj)) wk_guard_attr_is(I->guards, o->obj, name, v);
        if (cap_tensor_type && PyObject_TypeCheck(v, cap_tensor_type)) {
            Py_DECREF(v);
            return cap_unsupported(I, "module attribute tensor .%s", PyUnicode_AsUTF8(name));
        }
        return push_const_Steal(I, v, method);
    }
    /* x.dtype.is_floating_point, .itemsize; (1, 2).count, "a".upper: attributes
     * and methods of plain immutable values run no user code */
    if (cap_is_plain(o->obj)) {
        PyObject *v = PyObject_GetAttr(o->obj, name);
        if (!v) return cap_py_failed(I, PyUnicode_AsUTF8(name));
        if (!cap_is_plain(v) && !PyCFunction_Check(v)) {
            Py_DECREF(v);
            return cap_unsupported(I, "attribute .%s of a %s", PyUnicode_AsUTF8(name), cap_type_name(o->obj));
        }
        return push_const_Steal(I, v, method);
    }
    if (cap_is_exc_instance(o->obj) && Py_TYPE(o->obj)->tp_getattro == PyObject_GenericGetAttr) {
        /* e.args, e.__cause__ of an exception made during capture (it has no
         * traceback: Python's would) */
        if (PyUnicode_CompareWithASCIIString(name, "__traceback__") == 0 ||
            PyUnicode_CompareWithASCIIString(name, "with_traceback") == 0)
            return cap_unsupported(I, "the traceback of an exception raised during capture");
        PyObject *v = PyObject_GetAttr(o->obj, name);
        if (!v) return cap_raise_current(I, PyUnicode_AsUTF8(name));
        if (!cap_is_plain(v) && !cap_is_exc_instance(v)) {
            Py_DECREF(v);
            return cap_unsupported(I, "attribute .%s of a %s", PyUnicode_AsUTF8(name), cap_type_name(o->obj));
        }
        return push_const_Steal(I, v, method);
    }
    if (o->obj == (PyObject *)&PyDict_Type || o->obj == (PyObject *)&PyLong_Type ||
        o->obj == (PyObject *)&PyFloat_Type || o->obj == (PyObject *)&PyUnicode_Type) {
        /* dict.fromkeys, int.from_bytes, str.join: builtin methods, folded on constants */
        PyObject *v = PyObject_GetAttr(o->obj, name);
        if (!v) return cap_py_failed(I, PyUnicode_AsUTF8(name));
        return push_const_Steal(I, v, method);
    }
    if (PyUnicode_CompareWithASCIIString(name, "apply") == 0 && cap_is_autograd_function_class(o->obj)) {
        /* Fn.apply of a custom autograd.Function (vals/userobj.c) */
        PyObject *bound = cap_autograd_function_apply_Ref(I, o->obj);
        if (bound) return push_const_Steal(I, bound, method);
    }
    if (PyType_Check(o->obj) && !PyModule_Check(o->obj)) {
        /* a class attribute found in the class's own namespace chain: a
         * constant while the class keeps it (guarded) */
        PyObject *d = _PyType_Lookup((PyTypeObject *)o->obj, name);
        if (d && (cap_is_plain(d) || PyFunction_Check(d) || PyType_Check(d))) {
            wk_guard_type_attr_is(I->guards, (PyTypeObject *)o->obj, name, d);
            if (method && sv_push(I, I->null_sv) < 0) return -1;
            return sv_push(I, sv_const(I, d));
        }
    }
    if (PyType_Check(o->obj)) {
        /* names of a class: immutable in practice, read now */
        static const char *const ok[] = {"__name__", "__qualname__", "__module__"};
        const char *n = PyUnicode_AsUTF8(name);
        for (size_t i = 0; n && i < sizeof ok / sizeof ok[0]; i++)
            if (strcmp(n, ok[i]) == 0) {
                PyObject *v = PyObject_GetAttr(o->obj, name);
                if (!v) return cap_py_failed(I, n);
                return push_const_Steal(I, v, method);
            }
    }
    PyObject *mdict = stateless_module_dict(o->obj);
    if (mdict) {
        /* an attribute a stateless pinned module holds (GELUActivation.act):
         * that item of its dict, guarded by identity */
        PyObject *v = PyDict_GetItemWithError(mdict, name);
        PyObject *d = _PyType_Lookup(Py_TYPE(o->obj), name);
        if (v && !(d && Py_TYPE(d)->tp_descr_set)) {
            wk_guard_dict_item_is(I->guards, mdict, name, v);
            return push_const_Steal(I, Py_NewRef(v), method);
        }
        PyErr_Clear();
    }
    if (!PyType_Check(o->obj) && !PyModule_Check(o->obj) && !cap_is_plain(o->obj)) {
        /* a method of an object pinned by identity (a global instance): the
         * function its class has now, bound to it */
        PyObject *d = _PyType_Lookup(Py_TYPE(o->obj), name);
        PyObject **dp = _PyObject_GetDictPtr(o->obj);
        int shadowed = dp && *dp && PyDict_GetItemWithError(*dp, name);
        PyErr_Clear();
        /* transformers' logger.warning_once: an lru_cache wrapper, whose
         * call vals/logcall.c defers */
        if (d && (PyFunction_Check(d) || cap_log_method(o->obj, d)) && !shadowed) {
            wk_guard_type_attr_is(I->guards, Py_TYPE(o->obj), name, d);
            Sv *fn = sv_const(I, d);
            if (method) {
                if (sv_push(I, fn) < 0) return -1;
                return sv_push(I, o);
            }
            return sv_push(I, cap_partial_new(I, fn, &o, 1, NULL));
        }
    }
    if (strcmp(Py_TYPE(o->obj)->tp_name, "Signature") == 0 && PyUnicode_CompareWithASCIIString(name, "parameters") == 0) {
        /* a folded inspect.Signature's parameters: a dict of name -> Parameter
         * (read-only in eager; capture only reads it) */
        PyObject *params = PyObject_GetAttr(o->obj, name);
        PyObject *items = params ? PyMapping_Items(params) : NULL;
        Py_XDECREF(params);
        if (!items) return cap_py_failed(I, "Signature.parameters");
        Sv *d = cap_dict_new(I);
        for (Py_ssize_t i = 0; d && i < PyList_GET_SIZE(items); i++) {
            PyObject *kv = PyList_GET_ITEM(items, i);
            if (cap_dict_set(I, d, sv_const(I, PyTuple_GET_ITEM(kv, 0)), sv_const(I, PyTuple_GET_ITEM(kv, 1))) < 0)
                d = NULL;
        }
        Py_DECREF(items);
        if (!d) return -1;
        if (method && sv_push(I, I->null_sv) < 0) return -1;
        return sv_push(I, d);
    }
    if (PyDict_CheckExact(o->obj) && PyUnicode_CompareWithASCIIString(name, "get") == 0) {
        /* registry.get on a dict pinned by identity (a module-level registry):
         * the bound method, whose call vals/builtins.c reads with a guard on
         * the item */
        PyObject *bound = PyObject_GetAttr(o->obj, name);
        if (!bound) return cap_py_failed(I, "dict.get");
        if (method && sv_push(I, I->null_sv) < 0) {
            Py_DECREF(bound);
            return -1;
        }
        return sv_push(I, sv_const_Steal(I, bound));
    }
    if (cap_ctxvar_is(o->obj)) {
        /* var.get / var.set / var.reset: modelled by vals/contextvar.c */
        const char *n = PyUnicode_AsUTF8(name);
        if (n && (strcmp(n, "get") == 0 || strcmp(n, "set") == 0 || strcmp(n, "reset") == 0)) {
            PyObject *v = PyObject_GetAttr(o->obj, name);
            if (!v) return cap_py_failed(I, n);
            return push_const_Steal(I, v, method);
        }
    }
    if (!PyType_Check(o->obj) && !PyModule_Check(o->obj) && !cap_is_plain(o->obj) &&
        Py_TYPE(o->obj)->tp_getattro == PyObject_GenericGetAttr) {
        /* an instance attribute of an object pinned by identity (a global
         * instance) holding None, a number, a string or a ContextVar: read
         * now, guarded by identity */
        PyObject *d = _PyType_Lookup(Py_TYPE(o->obj), name);
        PyObject **dp = _PyObject_GetDictPtr(o->obj);
        PyObject *v = dp && *dp && !(d && Py_TYPE(d)->tp_descr_set) ? PyDict_GetItemWithError(*dp, name) : NULL;
        PyErr_Clear();
        if (!v && d && PyDict_CheckExact(d)) v = d; /* a class-level registry dict, not shadowed */
        if (v && (v == Py_None || PyBool_Check(v) || PyUnicode_CheckExact(v) || cap_ctxvar_is(v) ||
                  PyDict_CheckExact(v))) {
            /* a dict is pinned by identity; what capture reads of it is guarded
             * item by item (cap_contains, const_subscript) */
            wk_guard_attr_is(I->guards, o->obj, name, v);
            if (method && sv_push(I, I->null_sv) < 0) return -1;
            return sv_push(I, sv_const(I, v));
        }
    }
    if (PyFunction_Check(o->obj)) {
        /* what a function is made of: its code, defaults and names, pinned by
         * the function guard */
        static const char *const ok[] = {"__code__", "__name__",     "__qualname__", "__module__", "__defaults__",
                                         "__kwdefaults__", "__doc__", "__class__"};
        const char *n = PyUnicode_AsUTF8(name);
        for (size_t i = 0; n && i < sizeof ok / sizeof ok[0]; i++)
            if (strcmp(n, ok[i]) == 0) {
                PyObject *v = PyObject_GetAttr(o->obj, name);
                if (!v) return cap_py_failed(I, n);
                wk_guard_function(I->guards, o->obj);
                return push_const_Steal(I, v, method);
            }
    }
    if (!PyType_Check(o->obj) && !PyModule_Check(o->obj) && Py_TYPE(o->obj)->tp_getattro == PyObject_GenericGetAttr &&
        !_PyType_Lookup(Py_TYPE(o->obj), name)) {
        /* obj.log of a pinned instance holding a logger in its __dict__
         * (plain attribute lookup and no class attribute of that name, so
         * nothing else is read): the
         * logger, while the instance keeps it there (vals/logcall.c) */
        PyObject **dp = _PyObject_GetDictPtr(o->obj);
        PyObject *v = dp && *dp ? PyDict_GetItemWithError(*dp, name) : NULL;
        PyErr_Clear();
        if (v && cap_is_logger(v)) {
            wk_guard_type_attr_is(I->guards, Py_TYPE(o->obj), name, NULL);
            wk_guard_dict_item_is(I->guards, *dp, name, v);
            if (method && sv_push(I, I->null_sv) < 0) return -1;
            return sv_push(I, sv_const(I, v));
        }
    }
    if (cap_module_type && PyObject_TypeCheck(o->obj, cap_module_type)) {
        /* a plain class attribute of a pinned nn.Module (a hub kernel's
         * module-level Func, read as getattr(fn, "kernel_layer_name")):
         * normal lookup finds it before Module.__getattr__, while the
         * instance __dict__ does not shadow it */
        PyObject *d = _PyType_Lookup(Py_TYPE(o->obj), name);
        PyObject **dp = _PyObject_GetDictPtr(o->obj);
        int shadowed = dp && *dp && PyDict_GetItemWithError(*dp, name);
        PyErr_Clear();
        if (d && !shadowed && dp && *dp &&
            (d == Py_None || PyBool_Check(d) || PyLong_CheckExact(d) || PyFloat_CheckExact(d) ||
             PyUnicode_CheckExact(d))) {
            wk_guard_type_attr_is(I->guards, Py_TYPE(o->obj), name, d);
            wk_guard_dict_item_is(I->guards, *dp, name, NULL);
            if (method && sv_push(I, I->null_sv) < 0) return -1;
            return sv_push(I, sv_const(I, d));
        }
    }
    return cap_unsupported(I, "attribute .%s of %s", PyUnicode_AsUTF8(name), cap_type_name(o->obj));
}

/* A private Python helper of torch.nn.functional (_none_or_dtype,
 * _canonical_mask, _mha_shape_check, ...): argument plumbing around ops,
 * inlined like user code rather than run as one opaque extern call (they
 * return None, dtypes and tuples, which an extern cannot). */
static int functional_private_helper(PyObject *fn) {
    if (!PyFunction_Check(fn)) return 0;
    PyObject *mod = ((PyFunctionObject *)fn)->func_module, *name = ((PyFunctionObject *)fn)->func_name;
    if (!mod || !PyUnicode_Check(mod) || PyUnicode_CompareWithASCIIString(mod, "torch.nn.functional") != 0 || !name ||
        !PyUnicode_Check(name))
        return 0;
    /* F.multi_head_attention_forward returns (output, None) without weights,
     * which one extern node cannot: its ops are captured one by one */
    if (PyUnicode_CompareWithASCIIString(name, "multi_head_attention_forward") == 0) return 1;
    return PyUnicode_GET_LENGTH(name) > 1 && PyUnicode_READ_CHAR(name, 0) == '_' && PyUnicode_READ_CHAR(name, 1) != '_';
}

/* A value a stateless module may hold and capture may read as a constant:
 * plain data, functions, classes, or an empty dict (its parameters,
 * buffers, submodules and hooks). */
static int stateless_value(PyObject *v) {
    if (PyDict_Check(v)) return PyDict_GET_SIZE(v) == 0;
    if (PyAnySet_Check(v)) return PySet_GET_SIZE(v) == 0;
    return cap_is_plain(v) || PyFunction_Check(v) || PyCFunction_Check(v) || PyType_Check(v);
}

/* The instance dict of an nn.Module pinned by identity (a module-level
 * global: transformers' `gelu = get_activation("gelu")`) with no
 * parameters, buffers, submodules or hooks and only stateless_value()s, or
 * NULL (borrowed). */
static PyObject *stateless_module_dict(PyObject *m) {
    if (!cap_module_type || !PyObject_TypeCheck(m, cap_module_type)) return NULL;
    PyObject **dp = _PyObject_GetDictPtr(m);
    if (!dp || !*dp || !PyDict_Check(*dp)) return NULL;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(*dp, &pos, &k, &v))
        if (!PyUnicode_Check(k) || !stateless_value(v)) return NULL;
    return *dp;
}

/* Calling such a module: its forward inlined with the module as self,
 * while its dict equals a copy of it as it is now (a parameter, hook or
 * attribute added or changed fails the guard) and its class keeps
 * nn.Module's __call__ and this forward. NULL without a reason when m is
 * not such a module. */
static Sv *stateless_module_call(Interp *I, Sv *callable, const Args *a) {
    PyObject *m = callable->obj;
    PyObject *dict = stateless_module_dict(m);
    if (!dict) return NULL;
    PyTypeObject *tp = Py_TYPE(m);
    PyObject *s_call = PyUnicode_InternFromString("__call__"), *s_forward = PyUnicode_InternFromString("forward");
    PyObject *call = s_call ? _PyType_Lookup(tp, s_call) : NULL;
    PyObject *base_call = s_call ? _PyType_Lookup(cap_module_type, s_call) : NULL;
    PyObject *forward = s_forward ? _PyType_Lookup(tp, s_forward) : NULL;
    int global_free = wk_guards_no_global_hooks();
    Sv *r = NULL;
    if (global_free < 0) {
        cap_py_failed(I, "module hooks");
    } else if (call && call == base_call && forward && PyFunction_Check(forward) && global_free &&
               !PyDict_GetItemWithError(dict, s_forward) && !PyErr_Occurred() && a->npos < 64) {
        /* the snapshot holds new empty dicts and sets for the module's own:
         * its hook dicts change in place */
        PyObject *snapshot = PyDict_New();
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (snapshot && PyDict_Next(dict, &pos, &k, &v)) {
            PyObject *c = PyDict_Check(v) ? PyDict_New() : PyAnySet_Check(v) ? PySet_New(NULL) : Py_NewRef(v);
            if (!c || PyDict_SetItem(snapshot, k, c) < 0) Py_CLEAR(snapshot);
            Py_XDECREF(c);
        }
        if (!snapshot) {
            cap_py_failed(I, "module dict");
        } else {
            wk_guard_pinned_equals(I->guards, dict, snapshot);
            Py_DECREF(snapshot);
            wk_guard_type_attr_is(I->guards, tp, s_call, call);
            wk_guard_type_attr_is(I->guards, tp, s_forward, forward);
            wk_guard_no_global_hooks(I->guards);
            Sv *pos_args[65];
            pos_args[0] = callable;
            for (int i = 0; i < a->npos; i++) pos_args[i + 1] = a->pos[i];
            Args b = {pos_args, a->npos + 1, a->kwnames, a->kw, a->nkw};
            r = cap_inline_call(I, (PyFunctionObject *)forward, &b);
        }
    }
    PyErr_Clear();
    Py_XDECREF(s_call);
    Py_XDECREF(s_forward);
    return r;
}

/* A function marked a trace-time constant (torch._dynamo.assume_constant_result
 * sets fn._dynamo_marked_constant; transformers marks its install and
 * capability probes so, under their lru_cache): called now on constant
 * arguments, its plain result a constant of the graph. A call without
 * arguments answering a bool or None is also guarded on its answer (the
 * guard calls it again: a cache hit for the probes). NULL without a reason
 * when fn is not marked. */
/* o's own attribute `name` read from its instance dict (borrowed), or NULL:
 * no lookup that raises, for the functions every call checks */
static PyObject *instance_dict_item(PyObject *o, const char *name) {
    PyObject **dp = _PyObject_GetDictPtr(o);
    return dp && *dp ? PyDict_GetItemString(*dp, name) : NULL;
}

static int marked_constant(PyObject *fn) {
    /* plain functions and lru_cache wrappers only: reading an attribute of
     * another callable could run its __getattr__ */
    if (!PyFunction_Check(fn) && strcmp(Py_TYPE(fn)->tp_name, "functools._lru_cache_wrapper") != 0) return 0;
    if (instance_dict_item(fn, "_dynamo_marked_constant") == Py_True) return 1;
    PyObject *w = instance_dict_item(fn, "__wrapped__");
    return w && PyFunction_Check(w) && instance_dict_item(w, "_dynamo_marked_constant") == Py_True;
}

static Sv *marked_constant_call(Interp *I, PyObject *fn, const Args *a) {
    if (PyType_Check(fn) || !marked_constant(fn)) return NULL;
    for (int i = 0; i < a->npos + a->nkw; i++) {
        Sv *x = i < a->npos ? a->pos[i] : a->kw[i - a->npos];
        if (x->kind != SV_CONST || !cap_is_plain(x->obj))
            return cap_unsupported(I, "a constant-marked function called on a %s", sv_desc(x)), NULL;
    }
    PyObject *args = PyTuple_New(a->npos), *kw = a->nkw ? PyDict_New() : NULL;
    for (int i = 0; args && i < a->npos; i++) PyTuple_SET_ITEM(args, i, Py_NewRef(a->pos[i]->obj));
    for (int k = 0; kw && k < a->nkw; k++)
        if (PyDict_SetItem(kw, PyTuple_GET_ITEM(a->kwnames, k), a->kw[k]->obj) < 0) Py_CLEAR(kw);
    PyObject *r = args && (kw || !a->nkw) ? PyObject_Call(fn, args, kw) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(kw);
    if (!r) return cap_raise_current(I, "a constant-marked function"), NULL; /* it raises in eager too */
    if (!cap_is_plain(r)) {
        Py_DECREF(r);
        return cap_unsupported(I, "a constant-marked function returning a non-constant"), NULL;
    }
    if (!a->npos && !a->nkw && (PyBool_Check(r) || r == Py_None)) wk_guard_call_is(I->guards, fn, r);
    return sv_const_Steal(I, r);
}

/* A NumPy ufunc (numpy.sqrt, numpy.log, ...) on constant Python numbers:
 * deterministic, so called now (CTRL's `x *= np.sqrt(d_model)`). Its NumPy
 * scalar result becomes the Python number of the same value, which torch
 * reads the same way (numpy.float64 is a float). NULL without a reason when
 * fn is not a ufunc or an argument is not a constant number. */
static Sv *numpy_ufunc_call(Interp *I, PyObject *fn, const Args *a) {
    if (strcmp(Py_TYPE(fn)->tp_name, "numpy.ufunc") != 0 || a->nkw || a->npos < 1) return NULL;
    PyObject *args = PyTuple_New(a->npos);
    if (!args) return cap_py_failed(I, "numpy ufunc"), NULL;
    for (int i = 0; i < a->npos; i++) {
        if (a->pos[i]->kind != SV_CONST || !cap_is_number(a->pos[i]->obj)) {
            Py_DECREF(args);
            return NULL;
        }
        PyTuple_SET_ITEM(args, i, Py_NewRef(a->pos[i]->obj));
    }
    PyObject *r = PyObject_Call(fn, args, NULL);
    Py_DECREF(args);
    if (!r) return cap_raise_current(I, "a numpy ufunc"), NULL; /* it raises in eager too */
    PyObject *item = PyObject_HasAttrString(r, "item") ? PyObject_CallMethod(r, "item", NULL) : NULL;
    Py_DECREF(r);
    if (!item || !cap_is_number(item)) {
        Py_XDECREF(item);
        PyErr_Clear();
        return cap_unsupported(I, "a numpy ufunc returning other than a number"), NULL;
    }
    return sv_const_Steal(I, item);
}

/* torch's higher-order functions that take a Python function, which an
 * extern call cannot carry: each is a polyfill of wick._inlined that capture
 * inlines, so the function's ops join the graph. Looked up in sys.modules
 * (never imported here), each found object kept for the process. NULL
 * without a reason when fn is none of them. */
static Sv *higher_order_call(Interp *I, PyObject *fn, const Args *a) {
    static const struct {
        const char *module, *name, *polyfill;
    } table[] = {{"torch._higher_order_ops.associative_scan", "associative_scan", "associative_scan"}};
    enum { N = sizeof table / sizeof table[0] };
    static PyObject *found[N]; /* strong, for the process */
    if (!PyFunction_Check(fn)) return NULL;
    for (int i = 0; i < N; i++) {
        if (!found[i]) {
            PyObject *mod = PyDict_GetItemString(PySys_GetObject("modules"), table[i].module); /* borrowed */
            if (!mod) continue;
            if (!(found[i] = PyObject_GetAttrString(mod, table[i].name))) {
                PyErr_Clear();
                continue;
            }
        }
        if (fn != found[i]) continue;
        /* xs: a tensor, or a plain tuple or list of them (other pytrees stay torch's) */
        Sv *xs = a->npos > 1 ? a->pos[1] : NULL;
        for (int k = 0; !xs && k < a->nkw; k++)
            if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(a->kwnames, k), "xs") == 0) xs = a->kw[k];
        int plain = xs && (xs->kind == SV_TENSOR || (xs->kind == SV_TUPLE || xs->kind == SV_LIST));
        for (int k = 0; plain && xs->kind != SV_TENSOR && k < xs->items.len; k++)
            plain = xs->items.data[k]->kind == SV_TENSOR;
        if (!plain) return cap_unsupported(I, "%s() of other than a tensor or a tuple or list of tensors", table[i].name), NULL;
        PyObject *inlined = PyImport_ImportModule("wick._inlined");
        PyObject *poly = inlined ? PyObject_GetAttrString(inlined, table[i].polyfill) : NULL;
        Py_XDECREF(inlined);
        if (!poly || !PyFunction_Check(poly)) {
            Py_XDECREF(poly);
            return cap_py_failed(I, "wick._inlined"), NULL;
        }
        Sv *r = cap_inline_call(I, (PyFunctionObject *)poly, a);
        Py_DECREF(poly); /* the module keeps it alive */
        return r;
    }
    return NULL;
}

static Sv *const_call(Interp *I, Sv *callable, const Args *a) {
    PyObject *fn = callable->obj;
    char buf[200];
    Sv *res;
    if ((res = higher_order_call(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    int torch_callable = cap_is_torch_callable(fn);
    if (torch_callable) {
        /* a list argument handed to torch (torch.cat(features)): its items
         * exposed first, so the native rules see them (breaks.c) */
        for (int i = 0; i < a->npos + a->nkw; i++) {
            Sv *x = i < a->npos ? a->pos[i] : a->kw[i - a->npos];
            if (x->kind == SV_OPAQUE && cap_arg_list_expose(I, x) < 0) return NULL;
        }
        /* no kernel computes complex values: a torch call on one runs in PyTorch */
        int complex_args = cap_args_complex(I, a);
        if (complex_args < 0) return NULL;
        if (complex_args && ((res = cap_torch_query_call(I, fn, a)) != NULL || CAP_FAILED(I))) return res;
        if (complex_args)
            return cap_extern_call(I, fn, cap_callable_name(fn, buf, sizeof buf), a->pos, a->npos, a->kwnames, a->kw,
                                   a->nkw);
    }
    PyObject *num = cap_fn_to_op ? PyDict_GetItemWithError(cap_fn_to_op, fn) : NULL;
    if (!num && PyErr_Occurred()) PyErr_Clear(); /* unhashable callables are simply unknown */
    if (num) return cap_call_op(I, (WkOp)PyLong_AsLong(num), a, cap_callable_name(fn, buf, sizeof buf), 0, fn);
    if ((res = cap_log_call(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    if ((res = marked_constant_call(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    if ((res = cap_grad_ctx_call(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    if ((res = cap_torch_query_call(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    /* Module.__init__ & co. on a module made here (Dynamo's patched __init__ too) */
    if (PyFunction_Check(fn) && ((res = cap_newmodule_method(I, (PyFunctionObject *)fn, a)) != NULL || CAP_FAILED(I)))
        return res;
    if ((res = cap_matmul_call(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    if ((res = cap_attention_call(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    if ((res = cap_more_torch_call(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    /* before torch's callables: Function.apply is one of them */
    if ((res = cap_autograd_function_call(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    if (torch_callable && !functional_private_helper(fn)) /* torch's own functions run as they are, inside the graph */
        return cap_extern_call(I, fn, cap_callable_name(fn, buf, sizeof buf), a->pos, a->npos, a->kwnames, a->kw,
                               a->nkw);
    if (PyFunction_Check(fn) && ((res = cap_signature_call(I, fn, a)) != NULL || CAP_FAILED(I))) return res;
    if ((res = cap_scratch_copy_call(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    PyObject *plain_fn = PyMethod_Check(fn) ? PyMethod_GET_FUNCTION(fn) : fn;
    if (PyFunction_Check(plain_fn) && instance_dict_item(plain_fn, "_torchdynamo_disable") == Py_True)
        /* torch.compiler.disable's wrapper: the user keeps it eager (a graph break) */
        return cap_unsupported(I, "call to %s(), which torch.compiler.disable keeps eager",
                               cap_callable_name(fn, buf, sizeof buf)), NULL;
    if (PyFunction_Check(fn)) return cap_inline_call(I, (PyFunctionObject *)fn, a);
    if (PyMethod_Check(fn) && PyFunction_Check(PyMethod_GET_FUNCTION(fn)) && a->npos < 64) {
        /* a bound method held as a constant (a hook registered as
         * `collector.hook`): its function inlined, self the very object
         * (the method is pinned by identity wherever it was read, and holds it) */
        Sv *pos[65];
        pos[0] = sv_const(I, PyMethod_GET_SELF(fn));
        for (int i = 0; i < a->npos; i++) pos[i + 1] = a->pos[i];
        Args b = {pos, a->npos + 1, a->kwnames, a->kw, a->nkw};
        return cap_inline_call(I, (PyFunctionObject *)PyMethod_GET_FUNCTION(fn), &b);
    }
    if ((res = cap_exc_new(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    if ((res = stateless_module_call(I, callable, a)) != NULL || CAP_FAILED(I)) return res;
    if ((res = cap_ctxvar_call(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    if ((res = cap_scratch_builtin_call(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    if ((res = cap_builtin_call(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    if ((res = numpy_ufunc_call(I, fn, a)) != NULL || CAP_FAILED(I)) return res;
    if (PyType_Check(fn) && ((res = cap_userobj_new(I, fn, a)) != NULL || CAP_FAILED(I))) return res;
    return cap_unsupported(I, "call to %s()", cap_callable_name(fn, buf, sizeof buf)), NULL;
}

/* List[torch.Tensor], Optional[int], Tuple[int, ...], list[int]: a typing
 * form (an object of the typing module's classes, a types.GenericAlias, or
 * a builtin container class) whose subscript by constants is a constant.
 * Models evaluate such annotations at run time (torch.jit.annotate(List[
 * Tensor], [])); typing's own __getitem__ goes through functools caches,
 * which capture would not inline. */
static int is_typing_form(PyObject *o) {
    if (o == (PyObject *)&PyList_Type || o == (PyObject *)&PyTuple_Type || o == (PyObject *)&PyDict_Type ||
        o == (PyObject *)&PySet_Type || o == (PyObject *)&PyFrozenSet_Type || o == (PyObject *)&PyType_Type ||
        Py_IS_TYPE(o, &Py_GenericAliasType))
        return 1;
    if (PyType_Check(o) || PyModule_Check(o)) return 0;
    PyObject *mod = PyObject_GetAttrString((PyObject *)Py_TYPE(o), "__module__");
    int typing = mod && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "typing") == 0;
    Py_XDECREF(mod);
    PyErr_Clear();
    return typing;
}

/* A member of an enum.Enum subclass whose equality is not Python code of
 * its own (object's identity, or str's and int's for their mixins). */
int cap_is_plain_enum_member(PyObject *o) {
    static PyObject *enum_type;
    if (!enum_type) {
        PyObject *m = PyImport_ImportModule("enum");
        enum_type = m ? PyObject_GetAttrString(m, "Enum") : NULL;
        Py_XDECREF(m);
        if (!enum_type) {
            PyErr_Clear();
            return 0;
        }
    }
    if (PyType_Check(o)) return 0;
    int is = PyObject_IsInstance(o, enum_type);
    if (is <= 0) {
        PyErr_Clear();
        return 0;
    }
    PyObject *name = PyUnicode_InternFromString("__eq__");
    PyObject *eq = name ? _PyType_Lookup(Py_TYPE(o), name) : NULL;
    Py_XDECREF(name);
    PyErr_Clear();
    return eq && !PyFunction_Check(eq);
}

/* k's value when it is a constant or a tuple of constants (a new
 * reference), else NULL with no error. */
static PyObject *constant_key_Ref(Sv *k) {
    if (k->kind == SV_CONST) return Py_NewRef(k->obj);
    if (k->kind != SV_TUPLE) return NULL;
    for (Py_ssize_t i = 0; i < k->items.len; i++)
        if (k->items.data[i]->kind != SV_CONST) return NULL;
    PyObject *t = PyTuple_New(k->items.len);
    for (Py_ssize_t i = 0; t && i < k->items.len; i++) PyTuple_SET_ITEM(t, i, Py_NewRef(k->items.data[i]->obj));
    if (!t) PyErr_Clear();
    return t;
}

/* os.environ: the process's environment as os keeps it (a dict of
 * encoded keys and values, os.environ._data). A read by a str key is a
 * constant, guarded by identity on that item of _data (absent included),
 * so setting the variable later recompiles. os's Mapping methods (get,
 * __contains__, os.getenv) are inlined and land here; its own __getitem__
 * would call encodekey, a closure capture does not model. 1 when o is
 * os.environ. */
static int is_os_environ(PyObject *o) {
    static PyObject *environ; /* os.environ as os made it (owned for the process) */
    if (!environ) {
        PyObject *os = PyImport_ImportModule("os");
        environ = os ? PyObject_GetAttrString(os, "environ") : NULL;
        Py_XDECREF(os);
        PyErr_Clear();
    }
    return environ && o == environ && strcmp(Py_TYPE(o)->tp_name, "_Environ") == 0;
}

static Sv *environ_item(Interp *I, PyObject *environ, PyObject *key) {
    PyObject *data = PyObject_GetAttrString(environ, "_data");
    PyObject *encoded = data && PyDict_CheckExact(data) ? PyObject_CallMethod(environ, "encodekey", "O", key) : NULL;
    if (!encoded) {
        Py_XDECREF(data);
        return cap_raise_current(I, "os.environ"), NULL; /* a non-str key raises TypeError in Python too */
    }
    PyObject *v = PyDict_GetItemWithError(data, encoded);
    Sv *r = NULL;
    if (v || !PyErr_Occurred()) {
        wk_guard_dict_item_is(I->guards, data, encoded, v);
        PyObject *decoded = v ? PyObject_CallMethod(environ, "decodevalue", "O", v) : NULL;
        if (decoded) r = sv_const_Steal(I, decoded);
        else if (!v) PyErr_SetObject(PyExc_KeyError, key);
    }
    Py_DECREF(encoded);
    Py_DECREF(data);
    if (!r) cap_raise_current(I, "os.environ");
    return r;
}

static Sv *const_subscript(Interp *I, Sv *c, Sv *k) {
    if (c->obj == Py_None) I->none_step = I->top_steps; /* breaks.c graph_may_end_at */
    if (k->kind == SV_CONST && is_os_environ(c->obj)) return environ_item(I, c->obj, k->obj);
    if (k->kind == SV_CONST && PyDict_CheckExact(c->obj) && PyUnicode_CheckExact(k->obj)) {
        /* an item of a pinned dict (a registry): guarded by identity */
        PyObject *v = PyDict_GetItemWithError(c->obj, k->obj);
        if (!v) {
            if (PyErr_Occurred()) return cap_py_failed(I, "subscript"), NULL;
            /* KeyError, caught or not by the frame as in eager (Mapping.get
             * over a registry), while the key stays absent */
            wk_guard_dict_item_is(I->guards, c->obj, k->obj, NULL);
            PyErr_SetObject(PyExc_KeyError, k->obj);
            return cap_raise_current(I, "subscript"), NULL;
        }
        if (cap_tensor_type && PyObject_TypeCheck(v, cap_tensor_type))
            return cap_unsupported(I, "a tensor held in a dict constant"), NULL;
        wk_guard_dict_item_is(I->guards, c->obj, k->obj, v);
        return sv_const(I, v);
    }
    if (k->kind == SV_CONST && (PyTuple_Check(c->obj) || PyUnicode_CheckExact(c->obj)) &&
        (PyLong_CheckExact(k->obj) || PySlice_Check(k->obj))) {
        PyObject *r = PyObject_GetItem(c->obj, k->obj);
        if (!r) return cap_raise_current(I, "subscript"), NULL; /* IndexError of a constant: Python raises too */
        return sv_const_Steal(I, r);
    }
    if (k->kind == SV_CONST && (PyLong_CheckExact(k->obj) || PySlice_Check(k->obj))) {
        PyObject *items = cap_pinned_list_Ref(I, c);
        if (items) {
            PyObject *r = PyObject_GetItem(items, k->obj);
            Py_DECREF(items);
            if (!r) return cap_raise_current(I, "subscript"), NULL; /* IndexError: Python raises too */
            if (!PyList_CheckExact(r)) return sv_const_Steal(I, r);
            Sv *l = sv_new(I, SV_LIST); /* a slice is a new list each call */
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(r); i++) wk_vec_push(&l->items, sv_const(I, PyList_GET_ITEM(r, i)));
            Py_DECREF(r);
            return l;
        }
        if (CAP_FAILED(I)) return NULL;
    }
    if (is_typing_form(c->obj)) {
        PyObject *key = constant_key_Ref(k);
        if (key) {
            PyObject *r = PyObject_GetItem(c->obj, key);
            Py_DECREF(key);
            if (!r) return cap_raise_current(I, "subscript"), NULL; /* Python raises the same TypeError */
            return sv_const_Steal(I, r);
        }
    }
    if (!PyType_Check(c->obj) && !PyModule_Check(c->obj) && !cap_is_plain(c->obj)) {
        /* a pinned instance whose class defines __getitem__ in Python: inlined */
        PyObject *n = PyUnicode_InternFromString("__getitem__");
        PyObject *gi = n ? _PyType_Lookup(Py_TYPE(c->obj), n) : NULL;
        if (gi && PyFunction_Check(gi)) {
            wk_guard_type_attr_is(I->guards, Py_TYPE(c->obj), n, gi);
            Py_DECREF(n);
            Sv *args[2] = {c, k};
            Args a = {args, 2, NULL, NULL, 0};
            return cap_call(I, sv_const(I, gi), &a);
        }
        Py_XDECREF(n);
        PyErr_Clear();
    }
    return cap_unsupported(I, "subscript of a %s by a %s", sv_desc(c), sv_desc(k)), NULL;
}

static int const_iterate(Interp *I, Sv *s, SvList *out) {
    PyObject *items = cap_pinned_list_Ref(I, s);
    if (items) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) wk_vec_push(out, sv_const(I, PyList_GET_ITEM(items, i)));
        Py_DECREF(items);
        return 0;
    }
    if (CAP_FAILED(I)) return -1;
    int r = cap_const_items(I, s->obj, out);
    if (r == 0) return cap_unsupported(I, "iterating a %s", cap_type_name(s->obj));
    return r < 0 ? -1 : 0;
}

static PyObject *fold_binary_Ref(int nb, PyObject *x, PyObject *y) {
    switch (nb) {
    case NB_ADD: case NB_INPLACE_ADD: return PyNumber_Add(x, y);
    case NB_SUBTRACT: case NB_INPLACE_SUBTRACT: return PyNumber_Subtract(x, y);
    case NB_MULTIPLY: case NB_INPLACE_MULTIPLY: return PyNumber_Multiply(x, y);
    case NB_TRUE_DIVIDE: case NB_INPLACE_TRUE_DIVIDE: return PyNumber_TrueDivide(x, y);
    case NB_FLOOR_DIVIDE: case NB_INPLACE_FLOOR_DIVIDE: return PyNumber_FloorDivide(x, y);
    case NB_REMAINDER: case NB_INPLACE_REMAINDER: return PyNumber_Remainder(x, y);
    case NB_POWER: case NB_INPLACE_POWER: return PyNumber_Power(x, y, Py_None);
    case NB_AND: case NB_INPLACE_AND: return PyNumber_And(x, y);
    case NB_OR: case NB_INPLACE_OR: return PyNumber_Or(x, y);
    case NB_XOR: case NB_INPLACE_XOR: return PyNumber_Xor(x, y);
    case NB_LSHIFT: case NB_INPLACE_LSHIFT: return PyNumber_Lshift(x, y);
    case NB_RSHIFT: case NB_INPLACE_RSHIFT: return PyNumber_Rshift(x, y);
    }
    PyErr_SetString(PyExc_NotImplementedError, "operator");
    return NULL;
}

const char *cap_nb_symbol(int nb) {
    static const char *const s[] = {"+", "&", "//", "<<", "@", "*", "%", "|", "**", ">>", "-", "/", "^"};
    if (nb >= NB_INPLACE_ADD) nb -= NB_INPLACE_ADD;
    return nb >= 0 && nb < (int)(sizeof s / sizeof s[0]) ? s[nb] : "?";
}

static Sv *const_binary(Interp *I, int nb, Sv *x, Sv *y) {
    if (x->kind != SV_CONST || y->kind != SV_CONST) return NULL;
    if (!cap_is_plain(x->obj) || !cap_is_plain(y->obj))
        return cap_unsupported(I, "operator %s on %s and %s", cap_nb_symbol(nb), sv_desc(x), sv_desc(y)), NULL;
    int base = nb >= NB_INPLACE_ADD ? nb - NB_INPLACE_ADD : nb;
    /* never fold into huge values: 10 ** 10 ** 9, (0,) * 10 ** 9 */
    int numbers = cap_is_number(x->obj) && cap_is_number(y->obj);
    Sv *big = NULL;
    if ((base == NB_POWER || base == NB_LSHIFT) && PyLong_CheckExact(y->obj)) big = y;
    if (base == NB_MULTIPLY && !numbers) big = PyLong_CheckExact(x->obj) ? x : y;
    if (big && PyLong_CheckExact(big->obj)) {
        int ov = 0;
        long long e = PyLong_AsLongLongAndOverflow(big->obj, &ov);
        if (ov || e > 4096) return cap_unsupported(I, "folding a huge constant"), NULL;
    }
    PyObject *r = fold_binary_Ref(nb, x->obj, y->obj);
    if (!r) return cap_py_failed(I, cap_nb_symbol(nb)), NULL;
    if (!cap_is_plain(r)) {
        Py_DECREF(r);
        return cap_unsupported(I, "operator %s gave a non-constant", cap_nb_symbol(nb)), NULL;
    }
    return sv_const_Steal(I, r);
}

static Sv *const_compare(Interp *I, int cmp, Sv *x, Sv *y) {
    static const int py_ops[] = {Py_LT, Py_LE, Py_EQ, Py_NE, Py_GT, Py_GE};
    if (x->kind != SV_CONST || y->kind != SV_CONST) return NULL;
    /* typing forms compare by value (their __eq__ is typing's Python code);
     * enum members (timm's Format, a str Enum) by their C __eq__ */
    int forms = (cmp == 2 || cmp == 3) &&
                ((is_typing_form(x->obj) && is_typing_form(y->obj)) ||
                 (cap_is_plain_enum_member(x->obj) && (cap_is_plain_enum_member(y->obj) || cap_is_plain(y->obj))) ||
                 (cap_is_plain_enum_member(y->obj) && cap_is_plain(x->obj)));
    if (!forms && (!(cap_is_plain(x->obj) || PyType_Check(x->obj)) || !(cap_is_plain(y->obj) || PyType_Check(y->obj))))
        return NULL;
    PyObject *r = PyObject_RichCompare(x->obj, y->obj, py_ops[cmp]);
    if (!r) return cap_py_failed(I, "comparison"), NULL;
    return sv_const_Steal(I, r);
}

static Sv *const_unary(Interp *I, int opcode, Sv *x) {
    if (!cap_is_number(x->obj))
        return cap_unsupported(I, "%s on %s", wk_bc_opname(opcode), sv_desc(x)), NULL;
    PyObject *r = NULL;
    if (opcode == UNARY_NEGATIVE) r = PyNumber_Negative(x->obj);
#ifdef UNARY_POSITIVE
    else if (opcode == UNARY_POSITIVE) r = PyNumber_Positive(x->obj);
#endif
    else if (opcode == UNARY_INVERT && !PyFloat_CheckExact(x->obj)) r = PyNumber_Invert(x->obj);
    if (!r) return (PyErr_Occurred() ? cap_py_failed(I, "unary operator") : cap_unsupported(I, "unary operator")), NULL;
    return sv_const_Steal(I, r);
}

static WkRet *const_reconstruct(Interp *I, RetPlan *p, Sv *s, int depth) {
    (void)depth;
    /* made at capture time: each call must see its own, with its traceback */
    if (cap_is_exc_instance(s->obj)) return cap_unsupported(I, "an exception object leaving the frame"), NULL;
    WkRet *r = cap_ret_new(p, WK_RET_CONST);
    r->value = s->obj;
    return r;
}

const SvOps cap_const_kind = {
    .name = NULL,
    .truth = const_truth,
    .getattr = const_getattr,
    .call = const_call,
    .subscript = const_subscript,
    .iterate = const_iterate,
    .binary = const_binary,
    .compare = const_compare,
    .unary = const_unary,
    .reconstruct = const_reconstruct,
};
