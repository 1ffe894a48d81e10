/* vals/contextvar.c — contextvars.ContextVar set/get/reset during capture.
 * Capture never touches the real variable: a per-capture overlay (Interp
 * ctxvars) holds what the frame has set. set() records the new value and
 * returns a symbolic token (SV_CTX_TOKEN) that remembers the overlay state
 * before it; get() reads the overlay; reset(token) restores that state.
 * A frame whose overlay is not back at its entry state when it returns
 * (a net change of a ContextVar) falls back: the compiled code would not
 * reproduce it. get() of a variable the frame did not set would read
 * state the guards do not check: unsupported. Owns: the overlay entries'
 * references to the variables. */
#include <string.h>

#include "../interp.h"

static int find(Interp *I, PyObject *var) {
    for (int i = 0; i < I->ctxvars.len; i++)
        if (I->ctxvars.data[i].var == var) return i;
    return -1;
}

/* 0 when every ContextVar the frame set is reset to its entry state */
int cap_ctxvar_check(Interp *I) {
    for (int i = 0; i < I->ctxvars.len; i++)
        if (I->ctxvars.data[i].set) {
            PyObject *n = PyObject_GetAttrString(I->ctxvars.data[i].var, "name");
            const char *s = n && PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : "?";
            PyErr_Clear();
            cap_unsupported(I, "the frame leaves ContextVar '%s' set (a side effect capture does not replay)",
                            s ? s : "?");
            Py_XDECREF(n);
            return -1;
        }
    return 0;
}

void cap_ctxvar_free(Interp *I) {
    for (int i = 0; i < I->ctxvars.len; i++) Py_DECREF(I->ctxvars.data[i].var);
    wk_vec_free(&I->ctxvars);
}

/* var.get / var.set / var.reset read on a ContextVar constant: the bound
 * builtin method, handled by cap_ctxvar_call. 0 when not handled. */
int cap_ctxvar_is(PyObject *o) { return o && PyContextVar_CheckExact(o); }

Sv *cap_ctxvar_call(Interp *I, PyObject *fn, const Args *a) {
    if (!PyCFunction_Check(fn)) return NULL;
    PyObject *var = PyCFunction_GET_SELF(fn);
    if (!cap_ctxvar_is(var)) return NULL;
    const char *n = ((PyCFunctionObject *)fn)->m_ml->ml_name;
    if (a->nkw) return cap_unsupported(I, "ContextVar.%s with keyword arguments", n), NULL;
    int i = find(I, var);
    if (strcmp(n, "get") == 0 && a->npos <= 1) {
        if (i < 0 || !I->ctxvars.data[i].set)
            return cap_unsupported(I, "ContextVar.get of a variable the frame did not set"), NULL;
        return I->ctxvars.data[i].value;
    }
    if (strcmp(n, "set") == 0 && a->npos == 1) {
        if (i < 0) {
            CapCtxVar e = {Py_NewRef(var), NULL, 0};
            wk_vec_push(&I->ctxvars, e);
            i = I->ctxvars.len - 1;
        }
        Sv *tok = sv_new(I, SV_CTX_TOKEN);
        tok->obj = Py_NewRef(var);
        tok->cell = I->ctxvars.data[i].value; /* the state before: restored by reset */
        tok->value = I->ctxvars.data[i].set;
        I->ctxvars.data[i].value = a->pos[0];
        I->ctxvars.data[i].set = 1;
        return tok;
    }
    if (strcmp(n, "reset") == 0 && a->npos == 1) {
        Sv *tok = a->pos[0];
        if (tok->kind != SV_CTX_TOKEN || tok->obj != var || i < 0)
            return cap_unsupported(I, "ContextVar.reset with a token capture did not make"), NULL;
        if (tok->value & 2) return cap_unsupported(I, "ContextVar.reset with a token used before"), NULL;
        I->ctxvars.data[i].value = tok->cell;
        I->ctxvars.data[i].set = tok->value & 1;
        tok->value |= 2;
        return sv_const(I, Py_None);
    }
    return cap_unsupported(I, "ContextVar.%s with %d arguments", n, a->npos), NULL;
}

static int token_truth(Interp *I, Sv *s, int *out) {
    (void)I;
    (void)s;
    *out = 1;
    return 0;
}

static Sv *token_compare(Interp *I, int cmp, Sv *x, Sv *y) {
    if (cmp != 2 && cmp != 3) return NULL;
    if (x->kind == SV_CTX_TOKEN && y->kind == SV_CTX_TOKEN) return sv_const(I, (x == y) == (cmp == 2) ? Py_True : Py_False);
    Sv *other = x->kind == SV_CTX_TOKEN ? y : x;
    if (other->kind == SV_CONST && other->obj == Py_None) return sv_const(I, cmp == 3 ? Py_True : Py_False);
    return NULL;
}

const SvOps cap_ctx_token_kind = {
    .name = "ContextVar token",
    .truth = token_truth,
    .compare = token_compare,
};
