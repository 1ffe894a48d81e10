/* vals/ctx.c — context managers whose effect capture models: torch.no_grad()
 * and torch.enable_grad() set the grad mode of the graph's ops inside the
 * block; contextlib.nullcontext() and a with-statement's
 * torch.profiler.record_function(name) do nothing; torch.autocast (and
 * torch.amp.autocast, torch.cpu.amp.autocast, torch.cuda.amp.autocast, an
 * autocast instance a decorator holds) sets the frame's modelled autocast
 * state of its device type, which vals/extern.c reads for its casts and
 * sets around the externs called inside the block. BEFORE_WITH pushes the
 * __exit__ that the block's normal exit calls, and that WITH_EXCEPT_START
 * calls when an exception modelled by vals/exc.c leaves the block (it
 * restores the state and returns None: the exception propagates). An
 * autocast that eager would refuse, warn about or disable (an unknown
 * device type, an unsupported dtype, CUDA missing) is not modelled: the
 * call or the with-statement becomes a graph break. */
#include <string.h>

#include "../interp.h"

static Sv *autocast_call(Interp *I, PyObject *fn, const Args *a);

static PyObject *nullcontext_type; /* contextlib.nullcontext, looked up once */
static PyObject *set_grad_type;     /* torch.set_grad_enabled, looked up once */

static int set_grad_enabled_type(PyObject *fn) {
    if (!set_grad_type && cap_torch_mod) {
        set_grad_type = PyObject_GetAttrString(cap_torch_mod, "set_grad_enabled");
        PyErr_Clear();
    }
    return set_grad_type && fn == set_grad_type;
}

/* fn is attribute `attr` of the already imported module `module`, looked
 * up into *slot once it is there (owned for the process) */
static int is_module_attr(PyObject *fn, PyObject **slot, const char *module, const char *attr) {
    if (!*slot) {
        PyObject *name = PyUnicode_FromString(module);
        PyObject *mod = name ? PyImport_GetModule(name) : NULL;
        Py_XDECREF(name);
        if (mod) *slot = PyObject_GetAttrString(mod, attr);
        Py_XDECREF(mod);
        PyErr_Clear();
    }
    return *slot && fn == *slot;
}

static int is_nullcontext(PyObject *fn) { return is_module_attr(fn, &nullcontext_type, "contextlib", "nullcontext"); }

/* torch.profiler.record_function (torch.autograd.profiler's class) */
static int is_record_function(PyObject *fn) {
    static PyObject *record_function_type;
    return is_module_attr(fn, &record_function_type, "torch.autograd.profiler", "record_function");
}

/* torch.no_grad() / torch.enable_grad() / contextlib.nullcontext():
 * NULL without a reason when fn is none of them. */
Sv *cap_grad_ctx_call(Interp *I, PyObject *fn, const Args *a) {
    Sv *ac = autocast_call(I, fn, a);
    if (ac || CAP_FAILED(I)) return ac;
    if (is_record_function(fn) && I->next_op == BEFORE_WITH) {
        /* `with torch.profiler.record_function(name):` labels a region for
         * the profiler: inside a graph there is no such region, so, as in
         * PyTorch's capture, the block is captured as if the label were not
         * there (a profile of the compiled code does not show it) */
        for (int i = 0; i < a->npos + a->nkw; i++) {
            Sv *x = i < a->npos ? a->pos[i] : a->kw[i - a->npos];
            if (x->kind != SV_CONST || !cap_is_plain(x->obj))
                return cap_unsupported(I, "record_function() of a %s", sv_desc(x)), NULL;
        }
        Sv *res = sv_new(I, SV_GRAD_CTX);
        res->value = -1; /* as nullcontext: the grad mode stays */
        return res;
    }
    /* the ctx.clone bound method that @torch.no_grad() decorators call for
     * each call (torch.utils._contextlib): torch's own clone makes
     * type(ctx)() for these classes, which take no arguments */
    if (PyMethod_Check(fn) && !a->npos && !a->nkw) {
        PyObject *self = PyMethod_GET_SELF(fn), *func = PyMethod_GET_FUNCTION(fn);
        PyObject *cls = (PyObject *)Py_TYPE(self);
        PyObject *mod = PyFunction_Check(func) ? ((PyFunctionObject *)func)->func_module : NULL;
        PyObject *fname = PyFunction_Check(func) ? ((PyFunctionObject *)func)->func_name : NULL;
        if (((cap_no_grad_type && cls == cap_no_grad_type) || (cap_enable_grad_type && cls == cap_enable_grad_type)) &&
            mod && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "torch.utils._contextlib") == 0 &&
            fname && PyUnicode_CompareWithASCIIString(fname, "clone") == 0)
            fn = cls;
    }
    if (set_grad_enabled_type(fn)) {
        /* torch.set_grad_enabled(mode) sets the mode when it is made and
         * restores the one before on __exit__: as the with statement's own
         * expression (nothing runs between the call and BEFORE_WITH) that is
         * a block that sets `mode`; alone, it changes the frame's mode */
        Sv *mode = a->npos == 1 && !a->nkw ? a->pos[0] : a->nkw == 1 && !a->npos ? a->kw[0] : NULL;
        if (a->nkw && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(a->kwnames, 0), "mode") != 0) mode = NULL;
        if (!mode || mode->kind != SV_CONST || !PyBool_Check(mode->obj))
            return cap_unsupported(I, "torch.set_grad_enabled() of a %s", mode ? sv_desc(mode) : "call"), NULL;
        if (I->next_op != BEFORE_WITH) return cap_unsupported(I, "torch.set_grad_enabled() outside a with statement"), NULL;
        Sv *res = sv_new(I, SV_GRAD_CTX);
        res->value = mode->obj == Py_True;
        return res;
    }
    int grad = (cap_no_grad_type && fn == cap_no_grad_type) ? 0 : (cap_enable_grad_type && fn == cap_enable_grad_type) ? 1
               : is_nullcontext(fn)                        ? -1
                                                            : -2;
    if (grad == -2) return NULL;
    if (a->npos || a->nkw) return cap_unsupported(I, "context manager with arguments"), NULL;
    Sv *res = sv_new(I, SV_GRAD_CTX);
    res->value = grad; /* -1: nullcontext, the grad mode stays */
    return res;
}

/* ---- torch.autocast ------------------------------------------------------- */

#define AUTOCAST_CTX (-3) /* SV_GRAD_CTX value of an autocast: obj = its state tuple */

static PyObject *autocast_types[3]; /* torch.autocast, torch.cpu.amp.autocast, torch.cuda.amp.autocast */

static void autocast_types_ready(void) {
    static const char *const mods[3] = {"torch.amp.autocast_mode", "torch.cpu.amp.autocast_mode",
                                        "torch.cuda.amp.autocast_mode"};
    for (int i = 0; i < 3; i++) {
        if (autocast_types[i]) continue;
        PyObject *name = PyUnicode_FromString(mods[i]);
        PyObject *mod = name ? PyImport_GetModule(name) : NULL;
        Py_XDECREF(name);
        if (mod) autocast_types[i] = PyObject_GetAttrString(mod, "autocast");
        Py_XDECREF(mod);
        PyErr_Clear();
    }
}

static int autocast_kind(PyObject *fn) {
    autocast_types_ready();
    for (int i = 0; i < 3; i++)
        if (autocast_types[i] && fn == autocast_types[i]) return i;
    return -1;
}

static PyObject *torch_call_Ref(const char *path, const char *attr, PyObject *arg) {
    PyObject *mod = PyImport_ImportModule(path);
    PyObject *fn = mod ? PyObject_GetAttrString(mod, attr) : NULL;
    Py_XDECREF(mod);
    PyObject *r = fn ? (arg ? PyObject_CallOneArg(fn, arg) : PyObject_CallNoArgs(fn)) : NULL;
    Py_XDECREF(fn);
    return r;
}

/* The autocast dtype setting of device index k where the frame is now
 * (torch.autocast's default dtype): the caller's is read through a guarded
 * query, so a call under another outer autocast dtype captures again. */
static int autocast_fast_dtype(Interp *I, int k) {
    if (I->autocast_dt[k] != CAP_AUTOCAST_ENTRY) return I->autocast_fast[k];
    PyObject *m = PyImport_ImportModule("wick._capture_meta");
    PyObject *get = m && cap_torch_mod ? PyObject_GetAttrString(cap_torch_mod, "get_autocast_dtype") : NULL;
    PyObject *query = get ? PyObject_CallMethod(m, "bound_query", "Os", get, k ? "cuda" : "cpu") : NULL;
    PyObject *dt = query ? PyObject_CallNoArgs(query) : NULL;
    int d = dt ? cap_dtype_of_obj(dt) : -2;
    if (dt) wk_guard_call_is(I->guards, query, dt);
    Py_XDECREF(m);
    Py_XDECREF(get);
    Py_XDECREF(query);
    Py_XDECREF(dt);
    return d;
}

/* The state an autocast made from (device, dtype, enabled, cache_enabled)
 * enters, as the tuple (device, enabled, dtype, cache_enabled) of an
 * SV_GRAD_CTX; NULL with the capture failure set. */
static Sv *autocast_state(Interp *I, PyObject *device, PyObject *dtype, PyObject *enabled, PyObject *cache) {
    if (!PyUnicode_Check(device)) return cap_unsupported(I, "torch.autocast with a device_type that is not a str"), NULL;
    int k = PyUnicode_CompareWithASCIIString(device, "cpu") == 0 ? 0
            : PyUnicode_CompareWithASCIIString(device, "cuda") == 0 ? 1 : -1;
    if (k < 0) return cap_unsupported(I, "torch.autocast on device type '%s'", PyUnicode_AsUTF8(device)), NULL;
    if (!PyBool_Check(enabled)) return cap_unsupported(I, "torch.autocast with enabled= not a bool"), NULL;
    if (cache != Py_None && !PyBool_Check(cache))
        return cap_unsupported(I, "torch.autocast with cache_enabled= not a bool"), NULL;
    int dt = dtype == Py_None ? autocast_fast_dtype(I, k) : cap_dtype_of_obj(dtype);
    if (dt == -2) return cap_py_failed(I, "torch.get_autocast_dtype"), NULL;
    if (dt != WK_BF16 && dt != WK_F16) return cap_unsupported(I, "torch.autocast to a dtype it does not support"), NULL;
    if (k == 1 && enabled == Py_True) {
        /* eager disables autocast with a warning where CUDA is missing */
        PyObject *na = torch_call_Ref("torch.cuda.amp.common", "amp_definitely_not_available", NULL);
        int missing = na ? PyObject_IsTrue(na) : -1;
        Py_XDECREF(na);
        if (missing < 0) return cap_py_failed(I, "torch.autocast"), NULL;
        if (missing) return cap_unsupported(I, "torch.autocast('cuda') where CUDA is not available"), NULL;
        if (dt == WK_BF16) {
            PyObject *ok = torch_call_Ref("torch.cuda", "is_bf16_supported", NULL);
            int bf16 = ok ? PyObject_IsTrue(ok) : -1;
            Py_XDECREF(ok);
            if (bf16 <= 0) return cap_unsupported(I, "torch.autocast('cuda', dtype=torch.bfloat16) unsupported here"), NULL;
        }
    }
    Sv *res = sv_new(I, SV_GRAD_CTX);
    res->value = AUTOCAST_CTX;
    res->obj = Py_BuildValue("(OOOO)", device, enabled, cap_dtype_objs[dt], cache);
    if (!res->obj) return cap_py_failed(I, "torch.autocast"), NULL;
    return res;
}

/* torch.autocast(...) and its CPU/CUDA subclasses: NULL without a reason
 * when fn is none of them. */
static Sv *autocast_call(Interp *I, PyObject *fn, const Args *a) {
    int kind = autocast_kind(fn);
    if (kind < 0) return NULL;
    /* the parameters of each signature, in order, and their defaults */
    static const char *const base_names[] = {"device_type", "dtype", "enabled", "cache_enabled"};
    static const char *const amp_names[] = {"enabled", "dtype", "cache_enabled"};
    const char *const *names = kind == 0 ? base_names : amp_names;
    int nparams = kind == 0 ? 4 : 3;
    PyObject *vals[4] = {NULL, Py_None, Py_True, Py_None};
    if (kind) {
        vals[0] = Py_True;
        vals[1] = cap_dtype_objs[kind == 1 ? WK_BF16 : WK_F16];
        vals[2] = Py_True;
    }
    if (a->npos > nparams) return cap_unsupported(I, "torch.autocast with too many arguments"), NULL;
    for (int i = 0; i < a->npos; i++) {
        if (a->pos[i]->kind != SV_CONST) return cap_unsupported(I, "torch.autocast with a %s argument", sv_desc(a->pos[i])), NULL;
        vals[i] = a->pos[i]->obj;
    }
    for (int i = 0; i < a->nkw; i++) {
        const char *kn = PyUnicode_AsUTF8(PyTuple_GET_ITEM(a->kwnames, i));
        int j = -1;
        for (int p = 0; kn && p < nparams; p++)
            if (!strcmp(kn, names[p])) j = p;
        if (j < 0 || j < a->npos) return cap_unsupported(I, "torch.autocast with keyword %s", kn ? kn : "?"), NULL;
        if (a->kw[i]->kind != SV_CONST) return cap_unsupported(I, "torch.autocast with a %s argument", sv_desc(a->kw[i])), NULL;
        vals[j] = a->kw[i]->obj;
    }
    if (!vals[0]) return cap_unsupported(I, "torch.autocast without device_type"), NULL;
    if (kind == 0) return autocast_state(I, vals[0], vals[1], vals[2], vals[3]);
    PyObject *device = PyUnicode_FromString(kind == 1 ? "cpu" : "cuda");
    if (!device) return cap_py_failed(I, "torch.autocast"), NULL;
    Sv *res = autocast_state(I, device, vals[1], vals[0], vals[2]);
    Py_DECREF(device);
    return res;
}

/* An autocast instance made outside the frame (the one @torch.autocast(...)
 * keeps in its wrapper's closure, guarded by identity there): its settings
 * as a modelled context; read from an argument, each is guarded equal. */
static Sv *autocast_instance(Interp *I, Sv *src) {
    PyObject *o = src->obj;
    autocast_types_ready();
    if (!autocast_types[0] || PyObject_IsInstance(o, autocast_types[0]) != 1) {
        PyErr_Clear();
        return NULL;
    }
    if (autocast_kind((PyObject *)Py_TYPE(o)) < 0) return NULL; /* a subclass of the user's */
    PyObject *device = PyObject_GetAttrString(o, "device");
    PyObject *dtype = device ? PyObject_GetAttrString(o, "fast_dtype") : NULL;
    PyObject *enabled = dtype ? PyObject_GetAttrString(o, "_enabled") : NULL;
    PyObject *cache = enabled ? PyObject_GetAttrString(o, "_cache_enabled") : NULL;
    Sv *res = NULL;
    if (cache && src->arg >= 0) {
        static const char *const attrs[4] = {"device", "fast_dtype", "_enabled", "_cache_enabled"};
        PyObject *vals[4] = {device, dtype, enabled, cache};
        for (int i = 0; i < 4; i++) {
            PyObject *step = Py_BuildValue("(s)", attrs[i]);
            PyObject *path = step && src->path ? PySequence_Concat(src->path, step) : Py_XNewRef(step);
            if (path) wk_guard_equals_at(I->guards, src->arg, path, vals[i]);
            Py_XDECREF(path);
            Py_XDECREF(step);
        }
    }
    if (cache) res = autocast_state(I, device, dtype, enabled, cache);
    else PyErr_Clear();
    Py_XDECREF(device);
    Py_XDECREF(dtype);
    Py_XDECREF(enabled);
    Py_XDECREF(cache);
    return res;
}

static int autocast_enter(Interp *I, Sv *ctx, int result_unused) {
    /* __enter__ returns the autocast object, which capture does not make */
    if (!result_unused) return cap_unsupported(I, "with torch.autocast(...) as a name");
    PyObject *device = PyTuple_GET_ITEM(ctx->obj, 0);
    int k = PyUnicode_CompareWithASCIIString(device, "cuda") == 0;
    Sv *exit = sv_new(I, SV_AUTOCAST_EXIT);
    exit->obj = Py_NewRef(ctx->obj);
    exit->value = I->autocast_dt[k];
    exit->version = I->autocast_fast[k];
    int dt = cap_dtype_of_obj(PyTuple_GET_ITEM(ctx->obj, 2));
    I->autocast_fast[k] = dt;
    I->autocast_dt[k] = PyTuple_GET_ITEM(ctx->obj, 1) == Py_True ? dt : -1;
    if (sv_push(I, exit) < 0) return -1;
    return sv_push(I, sv_const(I, Py_None));
}

static Sv *autocast_exit_call(Interp *I, Sv *exit, const Args *a) {
    (void)a;
    int k = PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(exit->obj, 0), "cuda") == 0;
    I->autocast_dt[k] = exit->value;
    I->autocast_fast[k] = (int)exit->version;
    return sv_const(I, Py_False);
}

int cap_before_with(Interp *I, int result_unused) {
    Sv *ctx = sv_pop(I);
    if (!ctx) return -1;
    if ((ctx->kind == SV_OPAQUE || ctx->kind == SV_CONST) && ctx->obj) {
        Sv *ac = autocast_instance(I, ctx);
        if (!ac && CAP_FAILED(I)) return -1;
        if (ac) ctx = ac;
    }
    if (ctx->kind == SV_GRAD_CTX && ctx->value == AUTOCAST_CTX) return autocast_enter(I, ctx, result_unused);
    if (ctx->kind != SV_GRAD_CTX) return cap_unsupported(I, "with-statement on a %s", sv_desc(ctx));
    Sv *exit = sv_new(I, SV_GRAD_EXIT);
    exit->value = I->grad_enabled;
    if (ctx->value >= 0) I->grad_enabled = ctx->value;
    if (sv_push(I, exit) < 0) return -1;
    return sv_push(I, sv_const(I, Py_None));
}

/* __exit__(None, None, None) of a with block: restores the grad mode */
static Sv *exit_call(Interp *I, Sv *exit, const Args *a) {
    (void)a;
    I->grad_enabled = exit->value;
    return sv_const(I, Py_None);
}

const SvOps cap_grad_ctx_kind = {.name = "grad-mode context manager"};
const SvOps cap_grad_exit_kind = {.name = "grad-mode __exit__", .call = exit_call};
const SvOps cap_autocast_exit_kind = {.name = "autocast __exit__", .call = autocast_exit_call};

Sv *cap_autocast_query(Interp *I, const char *name, const Args *a) {
    int dtype_query = !strcmp(name, "get_autocast_dtype");
    if (!dtype_query && strcmp(name, "is_autocast_enabled")) return NULL;
    if (a->nkw || a->npos > 1 || (dtype_query && a->npos != 1)) return NULL;
    int k = 1; /* is_autocast_enabled() with no argument asks about CUDA */
    if (a->npos) {
        Sv *d = a->pos[0];
        if (d->kind != SV_CONST || !PyUnicode_Check(d->obj)) return NULL;
        if (PyUnicode_CompareWithASCIIString(d->obj, "cpu") == 0) k = 0;
        else if (PyUnicode_CompareWithASCIIString(d->obj, "cuda") != 0) return NULL;
    }
    /* outside the frame's own blocks the state is torch's: a guarded query */
    if (I->autocast_dt[k] == CAP_AUTOCAST_ENTRY) return NULL;
    if (dtype_query) return sv_const(I, cap_dtype_objs[I->autocast_fast[k]]);
    return sv_const(I, I->autocast_dt[k] >= 0 ? Py_True : Py_False);
}

/* o.__self__.<name> guarded equal to what it is now; new reference or NULL */
static PyObject *guarded_self_attr(Interp *I, Sv *o, const char *name) {
    PyObject *v = PyObject_GetAttrString(PyMethod_GET_SELF(o->obj), name);
    PyObject *path = v ? Py_BuildValue("(ss)", "__self__", name) : NULL;
    if (path) {
        PyObject *full = o->path ? PySequence_Concat(o->path, path) : Py_NewRef(path);
        if (full) wk_guard_equals_at(I->guards, o->arg, full, v);
        Py_XDECREF(full);
    }
    Py_XDECREF(path);
    if (!v || PyErr_Occurred()) {
        Py_CLEAR(v);
        cap_py_failed(I, "__exit__");
    }
    return v;
}

Sv *cap_real_exit_call(Interp *I, Sv *o, const Args *a) {
    if (!o->obj || !PyMethod_Check(o->obj) || o->arg < 0) return NULL;
    PyObject *func = PyMethod_GET_FUNCTION(o->obj), *self = PyMethod_GET_SELF(o->obj);
    PyObject *cls = (PyObject *)Py_TYPE(self);
    autocast_types_ready();
    int grad = set_grad_enabled_type(cls), autocast = !grad && autocast_types[0] && cls == autocast_types[0];
    if (!grad && !autocast) return NULL;
    PyObject *own = PyObject_GetAttrString(cls, "__exit__");
    int is_exit = own == func;
    Py_XDECREF(own);
    PyErr_Clear();
    if (!is_exit) return NULL;
    if (a->npos != 3 || a->nkw) return NULL;
    for (int i = 0; i < 3; i++)
        if (a->pos[i]->kind != SV_CONST) return NULL;
    /* (None, None, None), or an exception leaving the block (WITH_EXCEPT_START):
     * neither exit swallows it, and the replay after the graph comes first
     * as eager's call did */
    int raising = PyExceptionInstance_Check(a->pos[1]->obj) && a->pos[2]->obj == Py_None;
    if (!raising && (a->pos[0]->obj != Py_None || a->pos[1]->obj != Py_None || a->pos[2]->obj != Py_None))
        return NULL;
    PyObject *fpath = Py_BuildValue("(s)", "__func__");
    PyObject *full = fpath && o->path ? PySequence_Concat(o->path, fpath) : Py_XNewRef(fpath);
    if (full) wk_guard_equals_at(I->guards, o->arg, full, func);
    Py_XDECREF(full);
    Py_XDECREF(fpath);
    if (grad) {
        PyObject *prev = guarded_self_attr(I, o, "prev");
        if (!prev) return NULL;
        int mode = PyObject_IsTrue(prev);
        Py_DECREF(prev);
        if (mode < 0) return cap_py_failed(I, "__exit__"), NULL;
        if (cap_break_note_exit(I, o) < 0) return NULL;
        I->grad_enabled = I->grad_base = mode;
        return sv_const(I, Py_None);
    }
    PyObject *device = guarded_self_attr(I, o, "device");
    PyObject *prev = device ? guarded_self_attr(I, o, "prev") : NULL;
    PyObject *fast = prev ? guarded_self_attr(I, o, "prev_fastdtype") : NULL;
    Sv *res = NULL;
    if (fast) {
        int k = PyUnicode_Check(device) ? (PyUnicode_CompareWithASCIIString(device, "cpu") == 0 ? 0
                                           : PyUnicode_CompareWithASCIIString(device, "cuda") == 0 ? 1 : -1)
                                        : -1;
        int dt = cap_dtype_of_obj(fast);
        if (k < 0 || (dt != WK_BF16 && dt != WK_F16 && dt != WK_F32) || !PyBool_Check(prev)) {
            cap_unsupported(I, "__exit__ of an autocast capture does not model");
        } else if (cap_break_note_exit(I, o) == 0) {
            I->autocast_fast[k] = I->autocast_base_fast[k] = dt;
            I->autocast_dt[k] = I->autocast_base_dt[k] = prev == Py_True ? dt : -1;
            res = sv_const(I, Py_False);
        }
    }
    Py_XDECREF(device);
    Py_XDECREF(prev);
    Py_XDECREF(fast);
    return res;
}
