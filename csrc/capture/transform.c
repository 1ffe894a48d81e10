/* transform.c — the code object that replaces a captured frame.
 *
 *   RESUME
 *   PUSH_NULL; LOAD_CONST <GraphLoader>; LOAD_FAST/LOAD_GLOBAL <roots...>; CALL n
 *     (the loader resolves each graph input's path from its root in C,
 *     loader.c, and calls the compiled graph)
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

/* PUSH_NULL; LOAD_CONST <GraphLoader>; <each distinct root>; CALL nroots:
 * the loader (loader.c) resolves the inputs' attribute paths in C. */
static int emit_graph_call(WkAsm *a, PyObject *compiled, const int *input_args, PyObject *const *input_paths,
                           int ninputs) {
    int *roots = wk_xcalloc((size_t)ninputs + 1, sizeof(int));
    int *root_arg = wk_xcalloc((size_t)ninputs + 1, sizeof(int)); /* per root: frame argument, or -1 */
    PyObject **root_global = wk_xcalloc((size_t)ninputs + 1, sizeof(PyObject *)); /* its name when a global */
    PyObject **paths = wk_xcalloc((size_t)ninputs + 1, sizeof(PyObject *));
    int nroots = 0, rc = -1;
    for (int i = 0; i < ninputs; i++) {
        int arg = input_args[i];
        PyObject *p = input_paths ? input_paths[i] : NULL;
        PyObject *gname = arg < 0 ? p : NULL;
        int r = -1;
        for (int k = 0; k < nroots && r < 0; k++) {
            if (arg >= 0 && root_arg[k] == arg) r = k;
            if (arg < 0 && root_arg[k] < 0 && PyUnicode_Compare(root_global[k], gname) == 0) r = k;
        }
        if (PyErr_Occurred()) goto done;
        if (r < 0) {
            r = nroots++;
            root_arg[r] = arg;
            root_global[r] = gname;
        }
        roots[i] = r;
        paths[i] = arg >= 0 ? p : NULL;
    }
    PyObject *loader = wk_loader_new_Ref(compiled, roots, paths, ninputs, root_arg, nroots);
    if (!loader) goto done;
    wk_asm_push_null(a);
    wk_asm_load_const(a, loader);
    Py_DECREF(loader); /* the code's constants keep it */
    for (int k = 0; k < nroots; k++)
        if (load_arg_path(a, root_arg[k], root_arg[k] < 0 ? root_global[k] : NULL) < 0) goto done;
    wk_asm_call(a, nroots);
    rc = 0;
done:
    free(roots);
    free(root_arg);
    free(root_global);
    free(paths);
    return rc;
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
        if (emit_graph_call(a, compiled, input_args, input_paths, ninputs) < 0) goto done;
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
