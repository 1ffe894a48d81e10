/* transform.c — the code object that replaces a captured frame.
 *
 *   RESUME
 *   PUSH_NULL; LOAD_CONST <compiled graph>; LOAD_FAST <input args...>; CALL n
 *   UNPACK_SEQUENCE k; STORE_FAST ___wick_out<k-1> ... ___wick_out0
 *   <rebuild the return value from temps, arguments and constants>
 *   RETURN_VALUE
 *
 * Arguments that the frame returns unchanged (and attributes of arguments,
 * such as a module's parameters) are loaded from their own local, so the
 * caller gets the very same object. Every instruction carries
 * the line of the original return, so a traceback through the compiled
 * graph points at the user's source. */
#include <opcode.h>

#include "symbolic.h"

/* LOAD_FAST arg; LOAD_ATTR name...  (or LOAD_GLOBAL path when arg is -1) */
static int load_arg_path(WkAsm *a, int arg, PyObject *path) {
    if (arg < 0) {
        const char *name = path && PyUnicode_Check(path) ? PyUnicode_AsUTF8(path) : NULL;
        if (!name) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "wick: global input without a name");
            return -1;
        }
        wk_asm_load_global(a, name, 0);
        return 0;
    }
    wk_asm_load_fast(a, arg);
    for (Py_ssize_t i = 0; path && i < PyTuple_GET_SIZE(path); i++) {
        PyObject *elem = PyTuple_GET_ITEM(path, i);
        if (PyTuple_Check(elem)) { /* (key,): an item */
            wk_asm_load_const(a, PyTuple_GET_ITEM(elem, 0));
            wk_asm_op(a, BINARY_SUBSCR, 0);
            continue;
        }
        const char *name = PyUnicode_AsUTF8(elem);
        if (!name) return -1;
        wk_asm_load_attr(a, name);
    }
    return 0;
}

static int emit_ret(WkAsm *a, const WkRet *r, const int *out_locals) {
    switch (r->kind) {
    case WK_RET_OUTPUT:
        wk_asm_load_fast(a, out_locals[r->index]);
        return 0;
    case WK_RET_ARG:
        return load_arg_path(a, r->index, r->path);
    case WK_RET_CONST:
        wk_asm_load_const(a, r->value);
        return 0;
    case WK_RET_GLOBAL:
        return load_arg_path(a, -1, r->value);
    case WK_RET_TUPLE:
    case WK_RET_LIST:
        for (int i = 0; i < r->nitems; i++)
            if (emit_ret(a, r->items[i], out_locals) < 0) return -1;
        if (r->kind == WK_RET_TUPLE)
            wk_asm_build_tuple(a, r->nitems);
        else
            wk_asm_op(a, BUILD_LIST, r->nitems);
        return 0;
    case WK_RET_CALL:
        wk_asm_push_null(a);
        wk_asm_load_const(a, r->value);
        for (int i = 0; i < r->nitems; i++)
            if (emit_ret(a, r->items[i], out_locals) < 0) return -1;
        wk_asm_call(a, r->nitems);
        return 0;
    case WK_RET_DICT: {
        /* values..., keys tuple -> BUILD_CONST_KEY_MAP */
        for (int i = 0; i < r->nitems; i++)
            if (emit_ret(a, r->items[i], out_locals) < 0) return -1;
        PyObject *keys = PyList_AsTuple(r->value);
        if (!keys) return -1;
        wk_asm_load_const(a, keys);
        Py_DECREF(keys);
        wk_asm_op(a, BUILD_CONST_KEY_MAP, r->nitems);
        return 0;
    }
    }
    PyErr_SetString(PyExc_SystemError, "wick: bad return plan");
    return -1;
}

PyObject *wk_cap_transform_Ref(PyCodeObject *code, PyObject *compiled, const int *input_args,
                               PyObject *const *input_paths, int ninputs, int noutputs, const WkRet *ret,
                               int line) {
    PyObject *res = NULL;
    int *out_locals = wk_xcalloc((size_t)noutputs + 1, sizeof(int));
    WkAsm *a = wk_asm_new(code);
    if (!a) goto done;
    if (line < 0) line = code->co_firstlineno;
    wk_asm_set_line(a, line);
    wk_asm_resume(a);
    if (compiled) {
        wk_asm_push_null(a);
        wk_asm_load_const(a, compiled);
        for (int i = 0; i < ninputs; i++)
            if (load_arg_path(a, input_args[i], input_paths ? input_paths[i] : NULL) < 0) goto done;
        wk_asm_call(a, ninputs);
        if (noutputs > 0) {
            char name[64];
            for (int i = 0; i < noutputs; i++) {
                snprintf(name, sizeof name, "___wick_out%d", i);
                out_locals[i] = wk_asm_local(a, name);
            }
            wk_asm_unpack_sequence(a, noutputs);
            /* UNPACK_SEQUENCE leaves item 0 on top */
            for (int i = 0; i < noutputs; i++) wk_asm_store_fast(a, out_locals[i]);
        } else {
            wk_asm_op(a, POP_TOP, 0);
        }
    }
    if (emit_ret(a, ret, out_locals) < 0) goto done;
    wk_asm_return_value(a);
    res = wk_asm_finish_Ref(a);
done:
    if (a) wk_asm_free(a);
    free(out_locals);
    return res;
}
