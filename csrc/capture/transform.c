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
 * A frame that breaks (WkBreak, planned by breaks.c) continues after the
 * graph: it rebuilds the live values, runs the one instruction capture
 * could not model in Python and returns what a generated resume function
 * returns (a branch picks one of two):
 *
 *   PUSH_NULL; LOAD_CONST <resume>; <live locals, stack below the operands>
 *   <operands>; <the instruction>; CALL n; RETURN_VALUE
 *
 * Arguments that the frame returns unchanged (and attributes of arguments,
 * such as a module's parameters) are loaded from their own local, so the
 * caller gets the very same object. Every instruction carries
 * the line of the original return, so a traceback through the compiled
 * graph points at the user's source. */
#include <opcode.h>

#include "frame.h"
#include "symbolic.h"

/* the locals holding the cells a graph break makes (WK_RET_CELL index ->
 * local), set by the break's emitter for the code being assembled */
static int *cell_locals;
static int ncell_locals;

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

/* the temps of the loader's written inputs: out_locals after the graph's
 * outputs (set by emit_graph_call for the code being assembled) */
static int written_base;

/* A plan names one WkRet in several places when the frame made one mutable
 * object that reaches Python through several references (returned and
 * stored, twice in a result): eager has one object there, so its first
 * emission keeps the new object in a temp and later ones load that temp.
 * Valid along one path of the code being assembled: reset per code object,
 * cut back at the start of each branch. */
typedef struct {
    const WkRet *ret;
    int local;
} SharedRet;
static WkVec(SharedRet) shared_rets;

static int emit_ret_once(WkAsm *a, const WkRet *r, const int *out_locals);

static int emit_ret(WkAsm *a, const WkRet *r, const int *out_locals) {
    if (r->kind != WK_RET_LIST && r->kind != WK_RET_DICT && r->kind != WK_RET_CALL)
        return emit_ret_once(a, r, out_locals);
    for (int i = 0; i < shared_rets.len; i++)
        if (shared_rets.data[i].ret == r) {
            wk_asm_load_fast(a, shared_rets.data[i].local);
            return 0;
        }
    if (emit_ret_once(a, r, out_locals) < 0) return -1;
    char name[48];
    snprintf(name, sizeof name, "___wick_shared%d", shared_rets.len);
    SharedRet e = {r, wk_asm_local(a, name)};
    wk_asm_op(a, COPY, 1);
    wk_asm_store_fast(a, e.local);
    wk_vec_push(&shared_rets, e);
    return 0;
}

static int emit_ret_once(WkAsm *a, const WkRet *r, const int *out_locals) {
    switch ((int)r->kind) {
    case WK_RET_OUTPUT:
        wk_asm_load_fast(a, out_locals[r->index]);
        return 0;
    case WK_RET_WRITTEN:
        wk_asm_load_fast(a, out_locals[written_base + r->index]);
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
    case WK_RET_NULL:
        wk_asm_op(a, PUSH_NULL, 0);
        return 0;
    case WK_RET_CELL:
        if (r->index < 0 || r->index >= ncell_locals) break;
        wk_asm_load_fast(a, cell_locals[r->index]);
        return 0;
    case WK_RET_FREEVAR:
#if PY_VERSION_HEX >= 0x030D0000
        wk_asm_deref(a, LOAD_FAST, r->index);
#else
        wk_asm_deref(a, LOAD_CLOSURE, r->index);
#endif
        return 0;
    case WK_RET_ENTER: /* set_grad_enabled(mode) sets the mode now; its __exit__ restores it */
        wk_asm_push_null(a);
        wk_asm_load_const(a, r->value);
        if (r->index >= 0) wk_asm_load_const(a, r->index ? Py_True : Py_False);
        wk_asm_call(a, r->index >= 0 ? 1 : 0);
        wk_asm_op(a, BEFORE_WITH, 0);
        wk_asm_op(a, POP_TOP, 0); /* __enter__'s result; __exit__ stays */
        return 0;
    case WK_RET_ATTR: {
        const char *name = r->value && PyUnicode_Check(r->value) ? PyUnicode_AsUTF8(r->value) : NULL;
        if (!name || r->nitems != 1) break;
        if (emit_ret(a, r->items[0], out_locals) < 0) return -1;
        wk_asm_load_attr(a, name);
        return 0;
    }
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
static int emit_loader_call(WkAsm *a, PyObject *compiled, const int *input_args, PyObject *const *input_paths,
                            int ninputs, const WkEffects *fx) {
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
    if (fx && fx->nwritten && wk_loader_set_written(loader, fx->written, fx->nwritten) < 0) {
        Py_DECREF(loader);
        goto done;
    }
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

/* A frame with free variables: the transformed code has the same ones
 * (the hook runs it with the original function, whose closure fills them)
 * so that it can pass their cells on. Before RESUME. */
static int setup_free_vars(WkAsm *a, PyCodeObject *code) {
    if (!code->co_nfreevars) return 0;
    PyObject *fv = PyCode_GetFreevars(code);
    if (!fv) return -1;
    wk_asm_set_freevars(a, fv);
    Py_DECREF(fv);
    wk_asm_copy_free_vars(a);
    return 0;
}

/* RESUME, then the graph call: its outputs end in temps (out_locals).
 * guarded_handler >= 0: the call is protected; the handler (emit_graph_failed)
 * goes at that label. */
static int emit_graph_call(WkAsm *a, PyObject *compiled, const int *input_args, PyObject *const *input_paths,
                           int ninputs, int noutputs, int *out_locals, int guarded_handler, const WkEffects *fx) {
    wk_asm_resume(a);
    if (!compiled) return 0;
    int start = -1, end = -1;
    if (guarded_handler >= 0) {
        start = wk_asm_new_label(a);
        end = wk_asm_new_label(a);
        wk_asm_bind_label(a, start);
        wk_asm_try(a, start, end, guarded_handler, 0, 0);
    }
    if (emit_loader_call(a, compiled, input_args, input_paths, ninputs, fx) < 0) return -1;
    written_base = noutputs;
    noutputs += fx ? fx->nwritten : 0; /* the loader returns the written inputs after the outputs */
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
    if (end >= 0) wk_asm_bind_label(a, end);
    return 0;
}

/* A value read for an effect, kept in a temp (phase 1 of emit_effects). */
static int read_into_temp(WkAsm *a, const WkRet *r, const int *out_locals, int i, char which) {
    char name[48];
    snprintf(name, sizeof name, "___wick_fx%d%c", i, which);
    int local = wk_asm_local(a, name);
    if (emit_ret(a, r, out_locals) < 0) return -1;
    wk_asm_store_fast(a, local);
    return local;
}

/* Side effects after the graph: statements, the stack as before. Two
 * phases, as eager's reads all came before these writes: every target,
 * index and value is read into a temp first (a source such as
 * L['d']['b'] or L['o'].sub read after an earlier write of the replay
 * would see it), then the writes run in program order. */
/* The real __exit__ calls of blocks the frame left (WK_EFFECT_EXIT), right
 * after the graph: the state they restore is the one the rest runs in. */
static int emit_exit_effects(WkAsm *a, const WkEffects *fx, const int *out_locals) {
    for (int i = 0; fx && i < fx->n; i++) {
        const WkEffect *e = &fx->items[i];
        if (e->kind != WK_EFFECT_EXIT) continue;
        wk_asm_push_null(a);
        if (emit_ret(a, e->target, out_locals) < 0) return -1;
        for (int k = 0; k < 3; k++) wk_asm_load_const(a, Py_None);
        wk_asm_call(a, 3);
        wk_asm_op(a, POP_TOP, 0);
    }
    return 0;
}

static int emit_effects(WkAsm *a, const WkEffects *fx, const int *out_locals) {
    int n = fx ? fx->n : 0;
    int *tv = wk_xcalloc((size_t)n * 3 + 1, sizeof(int)); /* per effect: target, index, value temps */
    int rc = -1;
    for (int i = 0; i < n; i++) {
        const WkEffect *e = &fx->items[i];
        if (e->kind == WK_EFFECT_EXIT) { /* emit_exit_effects' */
            tv[3 * i] = tv[3 * i + 1] = tv[3 * i + 2] = -1;
            continue;
        }
        tv[3 * i] = e->target ? read_into_temp(a, e->target, out_locals, i, 't') : -1;
        tv[3 * i + 1] = e->index ? read_into_temp(a, e->index, out_locals, i, 'i') : -1;
        tv[3 * i + 2] = e->value ? read_into_temp(a, e->value, out_locals, i, 'v') : -1;
        if ((e->target && tv[3 * i] < 0) || (e->index && tv[3 * i + 1] < 0) || (e->value && tv[3 * i + 2] < 0))
            goto done;
    }
    for (int i = 0; i < n; i++) {
        const WkEffect *e = &fx->items[i];
        int target = tv[3 * i], index = tv[3 * i + 1], value = tv[3 * i + 2];
        if (e->kind == WK_EFFECT_EXIT) continue;
        if (e->kind == WK_EFFECT_APPEND || e->kind == WK_EFFECT_COPY) {
            /* a graph that updated the input in place returns the input itself
             * (a batch norm's statistics, backends.to_fx): nothing to copy */
            int skip = e->kind == WK_EFFECT_COPY ? wk_asm_new_label(a) : -1;
            if (skip >= 0) {
                wk_asm_load_fast(a, target);
                wk_asm_load_fast(a, value);
                wk_asm_op(a, IS_OP, 0);
                wk_asm_pop_jump_if(a, 1, skip);
            }
            wk_asm_load_fast(a, target);
            wk_asm_load_method(a, e->kind == WK_EFFECT_COPY ? "copy_" : "append");
            wk_asm_load_fast(a, value);
            wk_asm_call(a, 1);
            wk_asm_op(a, POP_TOP, 0);
            if (skip >= 0) wk_asm_bind_label(a, skip);
            continue;
        }
        if (e->kind == WK_EFFECT_CALL) { /* name(target[, index][, value]) */
            wk_asm_push_null(a);
            wk_asm_load_const(a, e->name);
            wk_asm_load_fast(a, target);
            if (index >= 0) wk_asm_load_fast(a, index);
            if (value >= 0) wk_asm_load_fast(a, value);
            wk_asm_call(a, 1 + (index >= 0) + (value >= 0));
            wk_asm_op(a, POP_TOP, 0);
            continue;
        }
        const char *name = e->kind != WK_EFFECT_SETITEM && e->name ? PyUnicode_AsUTF8(e->name) : NULL;
        if (e->kind != WK_EFFECT_SETITEM && e->kind != WK_EFFECT_CLEAR && !name) goto done;
        if (value >= 0) wk_asm_load_fast(a, value);
        if (target >= 0) wk_asm_load_fast(a, target);
        switch (e->kind) {
        case WK_EFFECT_SETATTR: wk_asm_op(a, STORE_ATTR, wk_asm_name(a, name)); break;
        case WK_EFFECT_DELATTR: wk_asm_op(a, DELETE_ATTR, wk_asm_name(a, name)); break;
        case WK_EFFECT_SETITEM:
            wk_asm_load_const(a, e->name);
            wk_asm_op(a, STORE_SUBSCR, 0);
            break;
        case WK_EFFECT_CLEAR:
            wk_asm_load_method(a, "clear");
            wk_asm_call(a, 0);
            wk_asm_op(a, POP_TOP, 0);
            break;
        case WK_EFFECT_GLOBAL: wk_asm_op(a, STORE_GLOBAL, wk_asm_name(a, name)); break;
        case WK_EFFECT_APPEND:
        case WK_EFFECT_COPY:
        case WK_EFFECT_EXIT:
        case WK_EFFECT_CALL: break; /* above */
        }
    }
    rc = 0;
done:
    free(tv);
    return rc;
}

/* The handler of a protected graph call: raise wk_graph_failed_type while
 * handling the graph's exception (so that it becomes the __context__), and
 * restore the handled-exception state on the way out, as CPython's own
 * cleanup handlers do. */
static void emit_graph_failed(WkAsm *a, int handler) {
    int raise_start = wk_asm_new_label(a), raise_end = wk_asm_new_label(a), cleanup = wk_asm_new_label(a);
    wk_asm_bind_label(a, handler);
    wk_asm_op(a, PUSH_EXC_INFO, 0); /* [exc] -> [previous, exc] */
    wk_asm_bind_label(a, raise_start);
    wk_asm_load_const(a, wk_graph_failed_type);
    wk_asm_op(a, RAISE_VARARGS, 1);
    wk_asm_bind_label(a, raise_end);
    wk_asm_try(a, raise_start, raise_end, cleanup, 1, 1);
    wk_asm_bind_label(a, cleanup); /* [previous, lasti, raised] */
    wk_asm_op(a, COPY, 3);
    wk_asm_op(a, POP_EXCEPT, 0);
    wk_asm_op(a, RERAISE, 1);
}

PyObject *wk_cap_transform_Ref(PyCodeObject *code, PyObject *compiled, const int *input_args,
                               PyObject *const *input_paths, int ninputs, int noutputs, const WkRet *ret,
                               int line, const WkEffects *effects) {
    PyObject *res = NULL;
    int *out_locals = wk_xcalloc((size_t)noutputs + (effects ? effects->nwritten : 0) + 1, sizeof(int));
    shared_rets.len = 0;
    WkAsm *a = wk_asm_new(code);
    if (!a) goto done;
    if (line < 0) line = code->co_firstlineno;
    wk_asm_set_line(a, line);
    int impure = effects && effects->n > 0;
    if (impure && compiled && wk_graph_failed_type_ready() < 0) goto done;
    int handler = impure && compiled && wk_graph_failed_type ? wk_asm_new_label(a) : -1;
    if (setup_free_vars(a, code) < 0) goto done;
    if (emit_graph_call(a, compiled, input_args, input_paths, ninputs, noutputs, out_locals, handler, effects) < 0)
        goto done;
    if (emit_exit_effects(a, effects, out_locals) < 0) goto done;
    if (emit_ret(a, ret, out_locals) < 0) goto done; /* read before the effects change its sources */
    if (emit_effects(a, effects, out_locals) < 0) goto done;
    wk_asm_return_value(a);
    if (handler >= 0) emit_graph_failed(a, handler);
    res = wk_asm_finish_Ref(a);
done:
    if (a) wk_asm_free(a);
    free(out_locals);
    return res;
}

/* The one instruction a break runs in Python, with its operands on the stack. */
static int emit_break_instruction(WkAsm *a, const WkBreak *b) {
    if (b->split) return 0;
    if (b->col >= 0) wk_asm_set_position(a, b->line, b->endline, b->col, b->endcol);
    if (b->opcode == CALL) {
        if (b->kwnames) wk_asm_call_kw(a, b->oparg, b->kwnames);
        else wk_asm_call(a, b->oparg);
        return 0;
    }
    if (b->name) {
        const char *name = PyUnicode_AsUTF8(b->name);
        if (!name) return -1;
        if (b->opcode == LOAD_ATTR) wk_asm_load_attr(a, name); /* the 3.12 oparg carries a flag */
        else if (b->opcode == LOAD_GLOBAL) wk_asm_load_global(a, name, 0);
        else wk_asm_op(a, b->opcode, wk_asm_name(a, name));
        return 0;
    }
    wk_asm_op(a, b->opcode, b->oparg);
    return 0;
}

/* Lifetimes across a break. Eager keeps a value while a local or the stack
 * holds it; the transformed code must not keep it longer. So, once the
 * values for the resume call are on the stack: the original frame drops
 * its arguments (release_args), every local of the transformed code is
 * set to None (the live values a protected break's handler needs stay
 * until the instruction has run), and the resume function is called
 * through call_resume(resume, [values...]), which hands the values over to
 * its frame (frame.c): a call through the eval hook is not inlined, so the
 * stack of a plain CALL would hold them until the resume function returns. */
static PyObject *release_args(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    wk_frame_release_args();
    Py_RETURN_NONE;
}

static PyObject *call_resume(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "wick: call_resume(resume, values)");
        return NULL;
    }
    return wk_frame_call_handing_over(args[0], args[1]);
}

static PyMethodDef release_args_def = {"release_args", release_args, METH_NOARGS, NULL};
static PyMethodDef call_resume_def = {"call_resume", (PyCFunction)(void (*)(void))call_resume, METH_FASTCALL, NULL};
static PyObject *release_args_fn, *call_resume_fn; /* made once, kept for the process */

static int lifetime_fns_ready(void) {
    if (!release_args_fn && !(release_args_fn = PyCFunction_New(&release_args_def, NULL))) return -1;
    if (!call_resume_fn && !(call_resume_fn = PyCFunction_New(&call_resume_def, NULL))) return -1;
    return 0;
}

/* release_args(); every local but `keep` (n of them) = None */
/* the local holding autocast_save()'s state (the error handler reads it
 * after the resume call), or -1; set by the break's emitter */
static int autocast_saved_local = -1;

static void emit_drop_locals(WkAsm *a, const int *keep, int nkeep) {
    wk_asm_push_null(a);
    wk_asm_load_const(a, release_args_fn);
    wk_asm_call(a, 0);
    wk_asm_op(a, POP_TOP, 0);
    for (int i = 0, n = wk_asm_nlocals(a); i < n; i++) {
        int kept = i == autocast_saved_local;
        for (int k = 0; k < ncell_locals; k++) kept |= cell_locals[k] == i;
        for (int k = 0; k < nkeep; k++) kept |= keep[k] == i;
        if (kept) continue;
        wk_asm_load_const(a, Py_None);
        wk_asm_store_fast(a, i);
    }
}

/* the locals in `temps` = None */
static void emit_clear_temps(WkAsm *a, const int *temps, int n) {
    for (int i = 0; temps && i < n; i++) {
        wk_asm_load_const(a, Py_None);
        wk_asm_store_fast(a, temps[i]);
    }
}

/* PUSH_NULL; LOAD_CONST call_resume; LOAD_CONST resume; args... (from their
 * temps when the break is protected: the handler passes the same objects).
 * The call: BUILD_LIST n; CALL 2. */
static int emit_resume_head(WkAsm *a, const WkBreak *b, PyObject *resume, const int *out_locals,
                            const int *arg_temps, int nargs) {
    wk_asm_op(a, PUSH_NULL, 0);
    wk_asm_load_const(a, call_resume_fn);
    if (b->ncells) { /* over the cells made at the break, then this call's */
        for (int i = 0; i < b->ncells; i++)
            if (emit_ret(a, b->cells[i], out_locals) < 0) return -1;
        for (int i = 0; i < b->nfree; i++)
#if PY_VERSION_HEX >= 0x030D0000
            wk_asm_deref(a, LOAD_FAST, i);
#else
            wk_asm_deref(a, LOAD_CLOSURE, i);
#endif
        wk_asm_build_tuple(a, b->ncells + b->nfree);
        wk_asm_load_const(a, PyFunction_GetCode(resume));
#if PY_VERSION_HEX >= 0x030D0000
        wk_asm_op(a, MAKE_FUNCTION, 0);
        wk_asm_op(a, SET_FUNCTION_ATTRIBUTE, 8);
#else
        wk_asm_op(a, MAKE_FUNCTION, 8);
#endif
    } else if (b->nfree) wk_asm_make_closure(a, PyFunction_GetCode(resume)); /* over this call's cells */
    else wk_asm_load_const(a, resume);
    for (int i = 0; i < nargs; i++) {
        if (arg_temps) wk_asm_load_fast(a, arg_temps[i]);
        else if (emit_ret(a, b->args[i], out_locals) < 0) return -1;
    }
    return 0;
}

/* tb_drop_repeat(exc): when the two newest entries of exc's traceback are
 * one frame's, drop the newer one. An exception that leaves the handler's
 * resume function passes this frame a second time (its first entry was
 * made where the instruction raised); in the original frame it would have
 * passed once. */
static PyObject *tb_drop_repeat(PyObject *self, PyObject *exc) {
    (void)self;
    PyObject *tb = PyExceptionInstance_Check(exc) ? PyException_GetTraceback(exc) : NULL;
    if (tb && PyTraceBack_Check(tb)) {
        PyTracebackObject *t = (PyTracebackObject *)tb;
        if (t->tb_next && t->tb_next->tb_frame == t->tb_frame &&
            PyException_SetTraceback(exc, (PyObject *)t->tb_next) < 0) {
            Py_DECREF(tb);
            return NULL;
        }
    }
    Py_XDECREF(tb);
    Py_RETURN_NONE;
}

static PyMethodDef tb_drop_repeat_def = {"tb_drop_repeat", tb_drop_repeat, METH_O, NULL};
static PyObject *tb_drop_repeat_fn; /* made once, kept for the process */

/* The handler of a protected break: [exc] -> return handler(locals, stack
 * below the block, lasti?, exc). An exception leaving that call gets its
 * repeated traceback entry dropped (tb_drop_repeat) and goes on. */
static int emit_break_handler(WkAsm *a, const WkBreak *b, const int *arg_temps, int label) {
    if (!tb_drop_repeat_fn && !(tb_drop_repeat_fn = PyCFunction_New(&tb_drop_repeat_def, NULL))) return -1;
    int start = wk_asm_new_label(a), end = wk_asm_new_label(a), again = wk_asm_new_label(a);
    wk_asm_bind_label(a, label);
    int n = b->nlocals + b->handler_nstack;
    if (emit_resume_head(a, b, b->handler, NULL, arg_temps, n) < 0) return -1;
    if (b->handler_lasti) wk_asm_load_const(a, b->handler_lasti);
    int nargs = n + (b->handler_lasti != NULL) + 1;
    wk_asm_op(a, COPY, nargs + 3); /* the exception, kept below so that no local holds it */
    emit_clear_temps(a, arg_temps, n);
    wk_asm_op(a, BUILD_LIST, nargs);
    wk_asm_bind_label(a, start);
    wk_asm_call(a, 2); /* call_resume(resume, [values]) */
    wk_asm_bind_label(a, end);
    wk_asm_try(a, start, end, again, 0, 0);
    wk_asm_op(a, SWAP, 2);
    wk_asm_op(a, POP_TOP, 0);
    wk_asm_return_value(a);
    wk_asm_bind_label(a, again); /* [exc] */
    wk_asm_push_null(a);
    wk_asm_load_const(a, tb_drop_repeat_fn);
    wk_asm_op(a, COPY, 3);
    wk_asm_call(a, 1);
    wk_asm_op(a, POP_TOP, 0);
    wk_asm_op(a, RERAISE, 0);
    return 0;
}

PyObject *wk_cap_transform_break_Ref(PyCodeObject *code, PyObject *compiled, const int *input_args,
                                     PyObject *const *input_paths, int ninputs, int noutputs, const WkBreak *b,
                                     const WkEffects *effects) {
    PyObject *res = NULL;
    int *out_locals = wk_xcalloc((size_t)noutputs + (effects ? effects->nwritten : 0) + 1, sizeof(int));
    shared_rets.len = 0;
    int *arg_temps = NULL;
    WkAsm *a = wk_asm_new(code);
    if (!a) goto done;
    wk_asm_set_line(a, b->line >= 0 ? b->line : code->co_firstlineno);
    if (compiled && wk_graph_failed_type_ready() < 0) goto done;
    if (lifetime_fns_ready() < 0) goto done;
    int handler = compiled && wk_graph_failed_type ? wk_asm_new_label(a) : -1;
    if (setup_free_vars(a, code) < 0) goto done;
    if (emit_graph_call(a, compiled, input_args, input_paths, ninputs, noutputs, out_locals, handler, effects) < 0)
        goto done;
    if (emit_exit_effects(a, effects, out_locals) < 0) goto done;
    /* the cells the break makes, all before anything reads one (a cell can
     * hold a closure over itself), each filled once all exist */
    ncell_locals = b->ncell_table;
    cell_locals = wk_xcalloc((size_t)b->ncell_table + 1, sizeof(int));
    for (int i = 0; i < b->ncell_table; i++) {
        char name[64];
        snprintf(name, sizeof name, "___wick_cell%d", i);
        cell_locals[i] = wk_asm_local(a, name);
        wk_asm_push_null(a);
        wk_asm_load_const(a, (PyObject *)&PyCell_Type);
        wk_asm_call(a, 0);
        wk_asm_store_fast(a, cell_locals[i]);
    }
    for (int i = 0; i < b->ncell_table; i++) {
        const WkRet *c = b->cell_table[i];
        if (c->kind != WK_RET_CELL || c->index != i) {
            PyErr_SetString(PyExc_SystemError, "wick: a graph break's cells out of order");
            goto done;
        }
        if (!c->nitems) continue;
        if (emit_ret(a, c->items[0], out_locals) < 0) goto done;
        wk_asm_load_fast(a, cell_locals[i]);
        wk_asm_op(a, STORE_ATTR, wk_asm_name(a, "cell_contents"));
    }
    int grad_start = -1, grad_end = -1, grad_handler = -1, autocast_saved = -1;
    if (b->autocast_save && b->autocast_restore) { /* the state the blocks re-entered below change */
        autocast_saved = wk_asm_local(a, "___wick_autocast_saved");
        wk_asm_push_null(a);
        wk_asm_load_const(a, b->autocast_save);
        wk_asm_call(a, 0);
        wk_asm_store_fast(a, autocast_saved);
    }
    autocast_saved_local = autocast_saved;
    if ((b->restore_grad >= 0 && b->set_grad) || autocast_saved >= 0) { /* blocks re-entered below: restore the mode on errors */
        grad_start = wk_asm_new_label(a);
        grad_end = wk_asm_new_label(a);
        grad_handler = wk_asm_new_label(a);
        wk_asm_bind_label(a, grad_start);
        wk_asm_try(a, grad_start, grad_end, grad_handler, 0, 0);
    }
    /* a break inside a try or with block: the live values go to temps, read
     * by the resume call and by the handler alike */
    int prot_start = -1, prot_end = -1, prot_handler = -1;
    if (b->handler) {
        arg_temps = wk_xcalloc((size_t)b->nargs + 1, sizeof(int));
        for (int i = 0; i < b->nargs; i++) {
            char name[64];
            snprintf(name, sizeof name, "___wick_live%d", i);
            arg_temps[i] = wk_asm_local(a, name);
            if (emit_ret(a, b->args[i], out_locals) < 0) goto done;
            wk_asm_store_fast(a, arg_temps[i]);
        }
        prot_start = wk_asm_new_label(a);
        prot_end = wk_asm_new_label(a);
        prot_handler = wk_asm_new_label(a);
        wk_asm_try(a, prot_start, prot_end, prot_handler, 0, 0);
    }
    switch (b->kind) {
    case WK_BREAK_INSTR:
        if (!b->resume[0]) break;
        if (emit_resume_head(a, b, b->resume[0], out_locals, arg_temps, b->nargs) < 0) goto done;
        for (int i = 0; i < b->nin; i++)
            if (emit_ret(a, b->in[i], out_locals) < 0) goto done;
        if (emit_effects(a, effects, out_locals) < 0) goto done;
        emit_drop_locals(a, arg_temps, arg_temps ? b->nargs : 0);
        if (prot_start >= 0) wk_asm_bind_label(a, prot_start);
        if (emit_break_instruction(a, b) < 0) goto done;
        if (prot_end >= 0) wk_asm_bind_label(a, prot_end);
        emit_clear_temps(a, arg_temps, b->nargs);
        wk_asm_op(a, BUILD_LIST, b->nargs + b->nout);
        wk_asm_call(a, 2);
        wk_asm_return_value(a);
        break;
    case WK_BREAK_RAISE:
        for (int i = 0; i < b->nin; i++)
            if (emit_ret(a, b->in[i], out_locals) < 0) goto done;
        if (emit_effects(a, effects, out_locals) < 0) goto done;
        if (arg_temps) emit_drop_locals(a, arg_temps, b->nargs); /* the handler's resume holds them */
        if (prot_start >= 0) wk_asm_bind_label(a, prot_start);
        if (b->col >= 0) wk_asm_set_position(a, b->line, b->endline, b->col, b->endcol);
        wk_asm_op(a, RAISE_VARARGS, b->oparg);
        if (prot_end >= 0) wk_asm_bind_label(a, prot_end);
        break;
    case WK_BREAK_BRANCH: {
        if (!b->resume[0] || !b->resume[1] || b->nin != 1) break;
        int jumped = wk_asm_new_label(a);
        if (prot_start >= 0) wk_asm_bind_label(a, prot_start);
        if (emit_ret(a, b->in[0], out_locals) < 0) goto done;
        wk_asm_pop_jump_if(a, b->jump_if_true, jumped);
        int shared_before = shared_rets.len;
        for (int k = 0; k < 2; k++) {
            shared_rets.len = shared_before; /* temps stored on the other path are unset on this one */
            if (k == 1) wk_asm_bind_label(a, jumped);
            if (k == 0 && prot_end >= 0) wk_asm_bind_label(a, prot_end);
            if (emit_resume_head(a, b, b->resume[k], out_locals, arg_temps, b->nargs) < 0) goto done;
            if (emit_effects(a, effects, out_locals) < 0) goto done;
            emit_drop_locals(a, NULL, 0);
            wk_asm_op(a, BUILD_LIST, b->nargs);
            wk_asm_call(a, 2);
            wk_asm_return_value(a);
        }
        break;
    }
    }
    if (prot_handler >= 0 && emit_break_handler(a, b, arg_temps, prot_handler) < 0) goto done;
    if (grad_start >= 0) {
        wk_asm_bind_label(a, grad_end);
        wk_asm_bind_label(a, grad_handler); /* [exc] */
        if (b->restore_grad >= 0 && b->set_grad) {
            wk_asm_push_null(a);
            wk_asm_load_const(a, b->set_grad);
            wk_asm_load_const(a, b->restore_grad ? Py_True : Py_False);
            wk_asm_call(a, 1);
            wk_asm_op(a, POP_TOP, 0);
        }
        if (autocast_saved >= 0) {
            wk_asm_push_null(a);
            wk_asm_load_const(a, b->autocast_restore);
            wk_asm_load_fast(a, autocast_saved);
            wk_asm_call(a, 1);
            wk_asm_op(a, POP_TOP, 0);
        }
        wk_asm_op(a, RERAISE, 0);
    }
    if (handler >= 0) emit_graph_failed(a, handler);
    res = wk_asm_finish_Ref(a);
done:
    autocast_saved_local = -1;
    free(cell_locals);
    cell_locals = NULL;
    ncell_locals = 0;
    if (a) wk_asm_free(a);
    free(out_locals);
    free(arg_temps);
    return res;
}
