/* vals/ctx.c — context managers whose effect capture models: torch.no_grad()
 * and torch.enable_grad() set the grad mode of the graph's ops inside the
 * block; contextlib.nullcontext() does nothing. BEFORE_WITH pushes the
 * __exit__ that the block's normal exit calls, and that WITH_EXCEPT_START
 * calls when an exception modelled by vals/exc.c leaves the block (it
 * restores the grad mode and returns None: the exception propagates). */
#include <string.h>

#include "../interp.h"

static PyObject *nullcontext_type; /* contextlib.nullcontext, looked up once */

static int is_nullcontext(PyObject *fn) {
    if (!nullcontext_type) {
        PyObject *name = PyUnicode_FromString("contextlib");
        PyObject *mod = name ? PyImport_GetModule(name) : NULL;
        Py_XDECREF(name);
        if (mod) nullcontext_type = PyObject_GetAttrString(mod, "nullcontext");
        Py_XDECREF(mod);
        PyErr_Clear();
    }
    return nullcontext_type && fn == nullcontext_type;
}

/* torch.no_grad() / torch.enable_grad() / contextlib.nullcontext():
 * NULL without a reason when fn is none of them. */
Sv *cap_grad_ctx_call(Interp *I, PyObject *fn, const Args *a) {
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
    int grad = (cap_no_grad_type && fn == cap_no_grad_type) ? 0 : (cap_enable_grad_type && fn == cap_enable_grad_type) ? 1
               : is_nullcontext(fn)                        ? -1
                                                            : -2;
    if (grad == -2) return NULL;
    if (a->npos || a->nkw) return cap_unsupported(I, "context manager with arguments"), NULL;
    Sv *res = sv_new(I, SV_GRAD_CTX);
    res->value = grad; /* -1: nullcontext, the grad mode stays */
    return res;
}

int cap_before_with(Interp *I) {
    Sv *ctx = sv_pop(I);
    if (!ctx) return -1;
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
