/* breaks.c — graph breaks: partial capture of a frame that capture cannot
 * model whole. Owns the break plan (which instruction runs in Python, which
 * values are live there and how each is rebuilt), the resume functions
 * (their code objects and the cache that reuses them), and the registry
 * that maps a resume code back to the original code it continues.
 *
 * How a break is made (symbolic.c drives it, see wk_cap_compile_frame):
 *   1. a capture fails at instruction k of the compiled frame (or inside a
 *      call inlined from there): cap_break_step() says whether a break can
 *      help and before which top-level instruction to stop;
 *   2. the frame is interpreted again from scratch and stops right before
 *      that instruction, so nothing of it (nor of a callee inlined by it)
 *      has touched the symbolic state;
 *   3. cap_break_plan() turns the stopped state into a WkBreak: the live
 *      locals (by liveness on the original bytecode) and the stack, rebuilt
 *      from graph outputs, constants and sources; the instruction; and the
 *      resume function(s) that continue the frame after it;
 *   4. transform.c emits: graph, rebuild, the instruction, call resume.
 *
 * A resume function is a real Python function: its code is the original
 * code, whole, after a prologue that pushes the stack items (its
 * arguments, NULLs re-pushed) and jumps to the instruction after the break;
 * its locals that were live are its other arguments. It is marked for the
 * hook, so it is captured in its turn with its own cache entries. Resume
 * functions are cached by (original code, target, stack layout, live
 * locals, globals) and always built from the original code, so a loop that
 * breaks in every iteration reuses one function instead of nesting copies.
 *
 * A break inside an open try or with block is protected: the transformed
 * code runs the instruction under a handler of its own that hands the
 * exception, the live locals and the stack below the block to a second
 * resume function, which starts at the block's handler in the original
 * code (PUSH_EXC_INFO...), so except, finally and __exit__ run once, in
 * program order, as in the original frame. In a frame with free variables
 * (a closure) the resume code has the same ones and the transformed code
 * makes the resume function over the call's cells (MAKE_FUNCTION), so
 * nonlocal reads and writes reach the caller's closure. BEFORE_WITH of a context
 * manager capture does not model is itself a break: __exit__ reaches the
 * resume function as a real value.
 *
 * A failure inside a loop (a break in the body, a while loop on a tensor's
 * value, more iterations than capture unrolls) splits the frame before the
 * outermost loop around it (at its GET_ITER for a for loop): the tensor
 * work before the loop is a graph, and the resume function there is the
 * loop's driver (loops.c), which calls the body as a function of its own,
 * captured and cached like any frame, once per iteration (a break inside
 * the loop would otherwise nest one resume call per iteration). A loop
 * loops.c refuses runs in a plain resume function, eagerly; with no tensor
 * work before it, the frame runs eagerly.
 *
 * Side effects (cap_effects_plan) are replayed by the transformed code after
 * its graph: first the input tensors the frame wrote in place (copy_ of the
 * written graph value; the GraphLoader refuses a call where one shares
 * memory with another input), then attribute writes, dict arguments, closure
 * cells, list appends (with logging calls among them, vals/logcall.c) and
 * globals.
 *
 * Where a break would not be exact, there is none and the frame runs
 * eagerly as before: with a grad mode changed, with
 * attribute writes or ContextVar changes pending, with a
 * mutable value shared by two live values, or with a live value that
 * cannot be rebuilt.
 *
 * A frame with cell variables breaks too: the resume code's free variables
 * are the original's cells (localsplus order), then its free variables;
 * the transformed code makes each cell once (WK_RET_CELL), fills it from
 * the graph, and makes the resume function over them, so a closure made
 * before the break (made again over the same cells) and the resume
 * function see each other's writes. Open grad-mode and autocast blocks are
 * entered again by the transformed code; the resume function's call of
 * such a block's real __exit__ is modelled (vals/ctx.c) and replayed right
 * after its graph. */
#include <stdint.h>
#include <string.h>

#include "interp.h"

#define RESUME_PREFIX "wick_resume_in_"

PyObject *wk_graph_failed_type;

static PyObject *resume_funcs;  /* dict: key tuple -> resume function */
static PyObject *resume_origin; /* dict: resume code -> (original code, prologue length) */

static int ensure_registry(void) {
    if (!wk_graph_failed_type &&
        !(wk_graph_failed_type = PyErr_NewException("wick._C.GraphFailed", PyExc_Exception, NULL)))
        return -1;
    if (!resume_funcs && !(resume_funcs = PyDict_New())) return -1;
    if (!resume_origin && !(resume_origin = PyDict_New())) return -1;
    return 0;
}

int wk_graph_failed_type_ready(void) { return ensure_registry(); }

void cap_breaks_reset(void) {
    if (resume_funcs) PyDict_Clear(resume_funcs);
    if (resume_origin) PyDict_Clear(resume_origin);
    cap_loops_reset();
}

/* ---- the original code's exception table ------------------------------------ */

typedef WkExcRange ExcRange;
typedef WkVec(ExcRange) ExcRanges;

/* co_exceptiontable as ranges of instruction indexes; -1 on a table we do not understand. */
static int exc_ranges(PyCodeObject *co, const WkInstr *raw, int n, ExcRanges *out) {
    int len = wk_bc_exc_ranges(co, raw, n, &out->data);
    out->len = out->cap = len > 0 ? len : 0;
    return len < 0 ? -1 : 0;
}

/* ---- liveness of locals on the original bytecode ------------------------------ */

static int local_use(const WkInstr *in, int *def) {
    *def = -1;
    switch (in->opcode) {
    case LOAD_FAST:
#ifdef LOAD_FAST_CHECK
    case LOAD_FAST_CHECK:
#endif
#ifdef LOAD_FAST_AND_CLEAR
    case LOAD_FAST_AND_CLEAR:
#endif
    case DELETE_FAST: /* deleting an unbound local raises: a use */
        return in->oparg;
    case STORE_FAST:
        *def = in->oparg;
        return -1;
    default:
        return -1;
    }
}

/* live[i * nloc + j]: local j may be read at or after instruction i before
 * it is written. Malloc'd. */
static unsigned char *liveness(const WkInstr *raw, int n, int nloc, const ExcRanges *ex) {
    unsigned char *live = wk_xcalloc((size_t)(n + 1) * (size_t)(nloc + 1), 1);
    int *jt = wk_xmalloc(sizeof(int) * (size_t)(n + 1)), *handler = wk_xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        jt[i] = wk_bc_jump_target(raw, n, i);
        handler[i] = -1;
        for (int e = 0; e < ex->len; e++)
            if (i >= ex->data[e].start && i < ex->data[e].end) handler[i] = ex->data[e].handler;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = n - 1; i >= 0; i--) {
            unsigned char *row = &live[(size_t)i * (size_t)nloc];
            int succ[3] = {wk_bc_falls_through(raw[i].opcode) && i + 1 < n ? i + 1 : -1, jt[i], handler[i]};
            int def, use = local_use(&raw[i], &def);
            for (int j = 0; j < nloc; j++) {
                unsigned char v = 0;
                for (int s = 0; s < 3; s++)
                    if (succ[s] >= 0) v |= live[(size_t)succ[s] * (size_t)nloc + (size_t)j];
                if (j == def) v = 0;
                if (j == use) v = 1;
                if (v && !row[j]) {
                    row[j] = 1;
                    changed = 1;
                }
            }
        }
    }
    free(jt);
    free(handler);
    return live;
}

unsigned char *cap_liveness(const WkInstr *raw, int n, int nloc, const WkExcRange *ex, int nex) {
    ExcRanges r = {0};
    r.data = (ExcRange *)ex;
    r.len = r.cap = nex;
    return liveness(raw, n, nloc, &r);
}

/* ---- resume functions ------------------------------------------------------- */

/* The original code a frame's code continues, and the number of prologue
 * instructions in front of it (0 for an original). Borrowed. */
static PyCodeObject *origin_of(PyCodeObject *code, int *prologue) {
    *prologue = 0;
    PyObject *o = resume_origin ? PyDict_GetItemWithError(resume_origin, (PyObject *)code) : NULL;
    if (!o) {
        PyErr_Clear();
        return code;
    }
    *prologue = (int)PyLong_AsLong(PyTuple_GET_ITEM(o, 1));
    return (PyCodeObject *)PyTuple_GET_ITEM(o, 0);
}

static PyObject *resume_name_Ref(PyCodeObject *orig, int line) {
    const char *base = PyUnicode_AsUTF8(orig->co_name);
    if (!base) return NULL;
    return PyUnicode_FromFormat(RESUME_PREFIX "%s_at_%d", base, line);
}

/* co_localspluskinds: a slot captured by a closure (an argument too, when
 * it is one); free variables carry a flag of their own */
#define LOCALSPLUS_CELL 0x40
#define LOCALSPLUS_FREE 0x80

/* Whether localsplus slot i of co is a cell variable of its own. */
static int is_cell_slot(PyCodeObject *co, int i) {
    if (i < 0 || i >= co->co_nlocalsplus) return 0;
    unsigned char k = (unsigned char)PyBytes_AS_STRING(co->co_localspluskinds)[i];
    return (k & LOCALSPLUS_CELL) && !(k & LOCALSPLUS_FREE);
}

/* The resume function's free variables: the original's own cells (which
 * the transformed code makes at the break, or passes on from its own
 * closure), then the original's free variables. New reference. */
static PyObject *resume_freevars_Ref(PyCodeObject *orig) {
    PyObject *names = PyList_New(0), *fv = PyCode_GetFreevars(orig), *res = NULL;
    if (!names || !fv) goto done;
    for (int i = 0; i < orig->co_nlocalsplus; i++)
        if (is_cell_slot(orig, i) && PyList_Append(names, PyTuple_GET_ITEM(orig->co_localsplusnames, i)) < 0) goto done;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fv); i++)
        if (PyList_Append(names, PyTuple_GET_ITEM(fv, i)) < 0) goto done;
    res = PyList_AsTuple(names);
done:
    Py_XDECREF(names);
    Py_XDECREF(fv);
    return res;
}

/* The resume code's free-variable index of original localsplus slot i. */
static int resume_free_index(PyCodeObject *orig, int i) {
    int first_free = orig->co_nlocalsplus - orig->co_nfreevars, k = 0;
    for (int j = 0; j < orig->co_nlocalsplus && j < first_free; j++) {
        if (!is_cell_slot(orig, j)) continue;
        if (j == i) return k;
        k++;
    }
    return i >= first_free ? k + (i - first_free) : -1;
}

/* Instructions whose oparg is a cell or free variable's localsplus index */
static int is_deref_op(int op) {
    switch (op) {
    case LOAD_DEREF: case STORE_DEREF: case DELETE_DEREF: case MAKE_CELL:
#ifdef LOAD_CLOSURE
    case LOAD_CLOSURE:
#endif
#ifdef LOAD_CLASSDEREF
    case LOAD_CLASSDEREF:
#endif
#ifdef LOAD_FROM_DICT_OR_DEREF
    case LOAD_FROM_DICT_OR_DEREF:
#endif
        return 1;
    default:
        return 0;
    }
}

/* The code of a resume function of `orig` that continues at instruction
 * `target` with the stack `layout` ('N': a NULL, 'V': a value, bottom
 * first) and the locals named in `local_names` as its first arguments. */
static PyObject *resume_code_Ref(PyCodeObject *orig, const WkInstr *raw, int n, const ExcRanges *ex, int target,
                                 const char *layout, PyObject *local_names, PyObject *name, const CapLoop *loop,
                                 PyObject *body) {
    PyObject *res = NULL, *argnames = NULL, *varnames = NULL;
    int *labels = NULL;
    int nstack = (int)strlen(layout), nvals = 0;
    for (int i = 0; i < nstack; i++) nvals += layout[i] == 'V';
    Py_ssize_t nlocal = PyTuple_GET_SIZE(local_names);
    WkAsm *a = wk_asm_new(orig);
    if (!a) return NULL;
    argnames = PyTuple_New(nlocal + nvals);
    varnames = PyCode_GetVarnames(orig);
    if (!argnames || !varnames) goto done;
    for (Py_ssize_t i = 0; i < nlocal; i++) PyTuple_SET_ITEM(argnames, i, Py_NewRef(PyTuple_GET_ITEM(local_names, i)));
    for (int i = 0, v = 0; i < nstack; i++) {
        if (layout[i] != 'V') continue;
        PyObject *s = PyUnicode_FromFormat("___stack%d", i);
        if (!s) goto done;
        PyTuple_SET_ITEM(argnames, nlocal + v++, s);
    }
    wk_asm_set_signature(a, argnames, name);
    if (orig->co_nfreevars || orig->co_ncellvars) { /* the transformed code passes the cells */
        PyObject *fv = resume_freevars_Ref(orig);
        if (!fv) goto done;
        wk_asm_set_freevars(a, fv);
        Py_DECREF(fv);
    }
    /* the copy keeps co_names and co_consts indexes: only locals move */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(orig->co_names); i++) {
        const char *s = PyUnicode_AsUTF8(PyTuple_GET_ITEM(orig->co_names, i));
        if (!s || wk_asm_name(a, s) != i) goto layout_changed;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(orig->co_consts); i++)
        if (wk_asm_const(a, PyTuple_GET_ITEM(orig->co_consts, i)) != i) goto layout_changed;
    int nv = (int)PyTuple_GET_SIZE(varnames);
    int *local_map = wk_xcalloc((size_t)nv + 1, sizeof(int));
    for (int j = 0; j < nv; j++) {
        if (is_cell_slot(orig, j)) continue; /* an argument that is a cell: a free variable here */
        const char *s = PyUnicode_AsUTF8(PyTuple_GET_ITEM(varnames, j));
        local_map[j] = s ? wk_asm_local(a, s) : 0;
    }
    labels = wk_xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i <= n; i++) labels[i] = wk_asm_new_label(a);

    /* prologue: the stack as it was before the instruction at `target` */
    wk_asm_set_line(a, raw[target].line >= 0 ? raw[target].line : orig->co_firstlineno);
    wk_asm_copy_free_vars(a);
    wk_asm_resume(a);
    for (int i = 0, v = 0; i < nstack; i++) {
        if (layout[i] == 'N') {
            wk_asm_op(a, PUSH_NULL, 0);
            continue;
        }
        /* the stack alone holds it, as in the original frame */
        wk_asm_op(a, LOAD_FAST, (int)nlocal + v);
        wk_asm_op(a, DELETE_FAST, (int)nlocal + v++);
    }
    wk_asm_jump(a, JUMP_FORWARD, labels[target]);

    /* the original, instruction for instruction (a loop driver's body is
     * never reached: its start jumps to the body function's call) */
    int call_label = loop ? wk_asm_new_label(a) : -1;
    for (int i = 0; i < n; i++) {
        const WkInstr *in = &raw[i];
        wk_asm_bind_label(a, labels[i]);
        if (loop && i == loop->start) wk_asm_jump(a, JUMP_FORWARD, call_label);
        int ln, col, eln, ecol; /* the original's columns: tracebacks show the same carets */
        if (PyCode_Addr2Location(orig, in->offset * 2, &ln, &col, &eln, &ecol) && ln == in->line)
            wk_asm_set_position(a, ln, eln, col, ecol);
        else
            wk_asm_set_line(a, in->line);
        int def, use = local_use(in, &def), t = wk_bc_jump_target(raw, n, i);
        if (t == -2) goto layout_changed_map;
        if (in->opcode == RESUME || in->opcode == COPY_FREE_VARS || in->opcode == MAKE_CELL)
            wk_asm_op(a, NOP, 0); /* the prologue's */
        else if (is_deref_op(in->opcode)) {
            int fi = resume_free_index(orig, in->oparg);
            if (fi < 0) goto layout_changed_map;
            wk_asm_deref(a, in->opcode, fi);
        } else if (t >= 0) wk_asm_jump(a, in->opcode, labels[t]);
        else if (use >= 0 || def >= 0) wk_asm_op(a, in->opcode, local_map[use >= 0 ? use : def]);
        else wk_asm_op(a, in->opcode, in->oparg);
    }
    wk_asm_bind_label(a, labels[n]);
    for (int e = 0; e < ex->len; e++) {
        const ExcRange *r = &ex->data[e];
        wk_asm_try(a, labels[r->start], labels[r->end], labels[r->handler], r->depth, r->lasti);
    }
    if (loop) cap_loop_emit_call(a, loop, labels, local_map, body, call_label);
    free(local_map);
    res = wk_asm_finish_Ref(a);
    goto done;
layout_changed_map:
    free(local_map);
layout_changed:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "wick: the resume code cannot keep the original's tables");
done:
    free(labels);
    Py_XDECREF(argnames);
    Py_XDECREF(varnames);
    wk_asm_free(a);
    return res;
}

/* The resume function (borrowed from the cache), or NULL with an exception. */
static PyObject *resume_function(PyCodeObject *orig, const WkInstr *raw, int n, const ExcRanges *ex, int target,
                                 const char *layout, PyObject *local_names, PyObject *globals, PyObject *options,
                                 const CapLoop *loop, PyObject *body) {
    if (ensure_registry() < 0) return NULL;
    /* a loop driver is keyed apart from the plain resume function at its split */
    PyObject *key = Py_BuildValue("(OiyOnO)", (PyObject *)orig, raw[target].offset, layout, local_names,
                                  (Py_ssize_t)(uintptr_t)globals, body ? body : Py_None);
    if (!key) return NULL;
    PyObject *fn = PyDict_GetItemWithError(resume_funcs, key);
    if (!fn && !PyErr_Occurred()) {
        int line = raw[target].line >= 0 ? raw[target].line : orig->co_firstlineno;
        PyObject *name = resume_name_Ref(orig, line);
        PyObject *code = name ? resume_code_Ref(orig, raw, n, ex, target, layout, local_names, name, loop, body) : NULL;
        PyObject *f = code ? PyFunction_New(code, globals) : NULL;
        int nnew = -1;
        if (code) {
            WkInstr *dec = wk_bc_decode((PyCodeObject *)code, &nnew);
            free(dec);
            if (!dec) nnew = -1;
        }
        PyObject *origin = nnew >= n ? Py_BuildValue("(Oi)", (PyObject *)orig, nnew - n) : NULL;
        if (f && origin && PyDict_SetItem(resume_origin, code, origin) == 0 &&
            PyDict_SetItem(resume_funcs, key, f) == 0)
            fn = f;
        Py_XDECREF(origin);
        Py_XDECREF(f);
        Py_XDECREF(code);
        Py_XDECREF(name);
    }
    Py_DECREF(key);
    if (!fn) return NULL;
    if (loop) return fn; /* the driver runs in Python: its body function is what is captured */
    PyObject *fcode = PyFunction_GetCode(fn);
    if (wk_hook_mark_code((PyCodeObject *)fcode, options ? options : Py_None) < 0) return NULL;
    return fn;
}

/* Python's own library (logging, ...) and torch's own Python code are not
 * worth capturing: like PyTorch's capture, leave their frames alone. */
int wk_code_is_library(PyCodeObject *co) {
    static PyObject *stdlib, *torch_dir;
    if (!stdlib) {
        PyObject *sc = PyImport_ImportModule("sysconfig");
        PyObject *paths = sc ? PyObject_CallMethod(sc, "get_paths", NULL) : NULL;
        PyObject *p = paths && PyDict_Check(paths) ? PyDict_GetItemString(paths, "stdlib") : NULL;
        stdlib = p ? Py_NewRef(p) : PyUnicode_FromString("");
        Py_XDECREF(paths);
        Py_XDECREF(sc);
        PyErr_Clear();
        if (!stdlib) return 0;
    }
    if (!cap_torch_mod && cap_init_torch() < 0) PyErr_Clear();
    if (!torch_dir && cap_torch_mod) {
        PyObject *f = PyObject_GetAttrString(cap_torch_mod, "__file__");
        PyObject *os = PyImport_ImportModule("os.path");
        torch_dir = f && os ? PyObject_CallMethod(os, "dirname", "O", f) : NULL;
        Py_XDECREF(f);
        Py_XDECREF(os);
        PyErr_Clear();
    }
    const char *root = PyUnicode_AsUTF8(stdlib), *file = PyUnicode_AsUTF8(co->co_filename);
    const char *tdir = torch_dir ? PyUnicode_AsUTF8(torch_dir) : NULL;
    if (!root || !file) {
        PyErr_Clear();
        return 0;
    }
    size_t n = strlen(root);
    if (n > 0 && strncmp(file, root, n) == 0 && !strstr(file + n, "site-packages")) return 1;
    return tdir && *tdir && strncmp(file, tdir, strlen(tdir)) == 0 && file[strlen(tdir)] == '/';
}

/* A Python function the frame calls at the break runs as its own frame:
 * mark its code so that the hook captures it (an nn.Module: its forward). */
static PyObject *mark_callee(Sv *callable, PyObject *options) {
    if (callable && callable->kind == SV_FUNC && callable->obj && PyCode_Check(callable->obj) && options) {
        if (wk_hook_mark_code((PyCodeObject *)callable->obj, options) < 0) PyErr_Clear();
        return callable->obj;
    }
    if (!callable || (callable->kind != SV_CONST && callable->kind != SV_OPAQUE) || !callable->obj || !options)
        return NULL;
    PyObject *marked = NULL;
    PyObject *f = callable->obj;
    if (PyMethod_Check(f)) f = PyMethod_GET_FUNCTION(f);
    PyObject *fwd = NULL;
    if (!PyFunction_Check(f) && cap_module_type && PyObject_TypeCheck(f, cap_module_type)) {
        fwd = PyObject_GetAttrString((PyObject *)Py_TYPE(f), "forward");
        if (!fwd) PyErr_Clear();
        f = fwd;
    }
    if (f && PyFunction_Check(f)) {
        PyCodeObject *co = (PyCodeObject *)PyFunction_GetCode(f);
        if (!(co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) && !wk_code_is_library(co)) {
            if (wk_hook_mark_code(co, options) < 0) PyErr_Clear();
            else marked = (PyObject *)co; /* kept alive by the function, held by a guard or constant */
        }
    }
    Py_XDECREF(fwd);
    return marked;
}

/* The offset (code units) of original instruction `pc` in the code of
 * resume function `fn`: the lasti a handler's resume gets, as the original
 * frame would have pushed it. New reference. */
static PyObject *resume_instr_offset_Ref(PyObject *fn, int pc) {
    int prologue, n = 0;
    PyCodeObject *co = (PyCodeObject *)PyFunction_GetCode(fn);
    origin_of(co, &prologue);
    WkInstr *dec = wk_bc_decode(co, &n);
    if (!dec) return NULL;
    PyObject *r = prologue + pc < n ? PyLong_FromLong(dec[prologue + pc].offset) : NULL;
    if (!r && !PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "wick: resume code shorter than its original");
    free(dec);
    return r;
}

/* ---- what a break needs of the interpreter ----------------------------------- */

typedef struct {
    Sv *dict;
    int arg; /* the argument it is (or holds it at `path`), or -1 when nested in one */
    int nkeys;
    Sv **items;     /* as set up */
    PyObject *keys; /* owned tuple: the keys as set up */
    PyObject *path; /* borrowed from dict: an argument's attribute dict, or NULL */
} ArgDict;

/* A list argument capture reads (cap_arg_list_expose): an SV_LIST of its
 * items, guarded equal to them; its final items replace the real list's
 * after the graph when the frame changed it. */
typedef struct {
    Sv *list;
    PyObject *obj; /* owned: the argument list itself */
    int n;
    Sv **items; /* as exposed */
} ArgList;

typedef struct {
    PyObject *name; /* owned */
    Sv *value;
} GlobalWrite;

/* A method call on a list or set argument, replayed in program order:
 * list.append / extend (an argument list) / insert / clear, set.add /
 * discard / clear. The call never raises and returns nothing capture reads.
 * Logging calls (vals/logcall.c) are kept among them, method "log", list
 * NULL: site(fn, args, kwargs) with the objects in `log` (borrowed from
 * I->keep); `others` is the fingerprint of the other effects then. */
typedef struct {
    Sv *list;       /* the container argument */
    const char *method;
    Sv *value;      /* its last argument, or NULL */
    Sv *index;      /* insert's index, or NULL */
    PyObject *log[4]; /* site, fn, args tuple, kwargs (name, value) pairs */
    unsigned long long others;
} ListAppend;

typedef struct {
    PyObject *cell; /* borrowed: pinned by the guards of the function it belongs to */
    Sv *sv;         /* its one SV_CELL in this capture */
    Sv *initial;    /* its contents when capture first read it */
} RealCell;

struct CapBreakState {
    WkVec(ArgDict) arg_dicts;
    WkVec(ArgList) arg_lists;   /* list arguments exposed as SV_LISTs, first exposed first */
    WkVec(RealCell) cells;      /* closure cells of real functions (vals/function.c) */
    WkVec(GlobalWrite) globals; /* writes to the compiled frame's module globals, first write first */
    WkVec(ListAppend) appends;  /* list and set methods on arguments, in program order */
    WkVec(WkEffect) effects;    /* the last plan (cap_effects_plan) */
    WkVec(int) written;         /* and the graph inputs its COPY effects write */
    int effects_failed;         /* a side effect the plan cannot replay */
    WkVec(long) first_step;     /* per top-level instruction: the step it first ran at (0: never) */
    SvList exits;               /* real __exit__ methods the frame called (vals/ctx.c), in order */
};

int cap_break_note_exit(Interp *I, Sv *exit_method) {
    if (!I->brk) return cap_unsupported(I, "__exit__ of a block entered before the frame");
    wk_vec_push(&I->brk->exits, exit_method);
    return 0;
}

void cap_break_note_step(Interp *I, int pc) {
    CapBreakState *st = I->brk;
    if (!st || pc < 0) return;
    while (st->first_step.len <= pc) wk_vec_push(&st->first_step, 0L);
    if (!st->first_step.data[pc]) st->first_step.data[pc] = I->top_steps;
}

static void note_arg_dicts(CapBreakState *st, Sv *s, int arg, int depth) {
    if (!s || depth > 8) return;
    if (s->kind == SV_DICT) {
        ArgDict d = {s, arg, s->obj ? (int)PyList_GET_SIZE(s->obj) : 0, NULL,
                     s->obj ? PyList_AsTuple(s->obj) : PyTuple_New(0), NULL};
        if (!d.keys) {
            PyErr_Clear();
            return;
        }
        d.items = wk_xcalloc((size_t)s->items.len + 1, sizeof(Sv *));
        memcpy(d.items, s->items.data, sizeof(Sv *) * (size_t)s->items.len);
        wk_vec_push(&st->arg_dicts, d);
    }
    if (s->kind == SV_DICT || s->kind == SV_TUPLE)
        for (int i = 0; i < s->items.len; i++) note_arg_dicts(st, s->items.data[i], -1, depth + 1);
}

void cap_break_setup(Interp *I) {
    CapBreakState *st = wk_xcalloc(1, sizeof(CapBreakState));
    I->brk = st;
    for (int i = 0; i < I->nargs && i < I->f->nlocals; i++) note_arg_dicts(st, I->f->locals[i], i, 0);
}

static int tracked_dict(CapBreakState *st, const Sv *d) {
    for (int i = 0; st && i < st->arg_dicts.len; i++)
        if (st->arg_dicts.data[i].dict == d) return 1;
    return 0;
}

Sv *cap_attr_dict_read(Interp *I, PyObject *real, int arg, PyObject *path) {
    for (int i = 0; i < I->attr_dicts.len; i++) {
        Sv *d = I->attr_dicts.data[i].dict;
        int is = I->attr_dicts.data[i].real == real;
        int same_path = d->arg == arg && d->path && path && PyObject_RichCompareBool(d->path, path, Py_EQ) == 1;
        PyErr_Clear();
        /* on other calls this path must reach that dict again, or not a
         * dict the frame changes */
        if ((is && !same_path) || (!is && tracked_dict(I->brk, d)))
            wk_guard_same_as_at(I->guards, arg, path, d->arg, d->path, is);
        if (is) return d; /* one Sv per dict: a change is seen by every read */
    }
    return NULL;
}

void cap_attr_dict_note(Interp *I, Sv *d, PyObject *real) {
    CapAttrDict a = {d, Py_NewRef(real)};
    wk_vec_push(&I->attr_dicts, a);
}

int cap_attr_dict_changed(Interp *I, const Sv *d) { return tracked_dict(I->brk, d); }

int cap_attr_dict_writable(Interp *I, Sv *d) {
    if (tracked_dict(I->brk, d)) return 0;
    int noted = 0;
    for (int i = 0; i < I->attr_dicts.len && !noted; i++) noted = I->attr_dicts.data[i].dict == d;
    if (!noted || !I->brk || !d->path) return cap_unsupported(I, "changing a dict read from an argument's attribute");
    for (int i = 0; i < I->attr_dicts.len; i++) { /* other dicts read so far stay other dicts */
        const Sv *o = I->attr_dicts.data[i].dict;
        if (o != d) wk_guard_same_as_at(I->guards, d->arg, d->path, o->arg, o->path, 0);
    }
    ArgDict a = {d, d->arg, (int)PyList_GET_SIZE(d->obj), NULL, PyList_AsTuple(d->obj), d->path};
    if (!a.keys) return cap_py_failed(I, "dict keys");
    a.items = wk_xcalloc((size_t)d->items.len + 1, sizeof(Sv *));
    memcpy(a.items, d->items.data, sizeof(Sv *) * (size_t)d->items.len);
    wk_vec_push(&I->brk->arg_dicts, a);
    return 0;
}

static int arg_dict_changed(const ArgDict *d) {
    const Sv *s = d->dict;
    if (!s->obj || PyList_GET_SIZE(s->obj) != d->nkeys || s->items.len != d->nkeys) return 1;
    for (int k = 0; k < s->items.len; k++)
        if (s->items.data[k] != d->items[k]) return 1;
    return 0;
}

static int arg_list_changed(const ArgList *l) {
    const Sv *s = l->list;
    if (s->items.len != l->n) return 1;
    for (int k = 0; k < l->n; k++)
        if (s->items.data[k] != l->items[k]) return 1;
    return 0;
}

int cap_is_arg_list(Interp *I, const Sv *s) {
    for (int i = 0; I->brk && i < I->brk->arg_lists.len; i++)
        if (I->brk->arg_lists.data[i].list == s) return 1;
    return 0;
}

/* len() and truth of a list argument do not expose it: a loop that grows
 * a list its body function checks (if len(out) > k) would make one entry
 * per length; they stay breaks. */
int cap_arg_list_expose(Interp *I, Sv *s) {
    if (!I->brk || s->kind != SV_OPAQUE || s->arg < 0 || s->path || s->gname || !s->obj || !PyList_CheckExact(s->obj))
        return 0;
    PyObject *l = s->obj;
    if (PyList_GET_SIZE(l) > 64) return 0;
    /* plain values (guarded equal as one snapshot), or tensors among them
     * (a forward taking a list of feature maps: each an input read through
     * its index, the list's length guarded) */
    int tensors = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(l); i++) {
        PyObject *x = PyList_GET_ITEM(l, i);
        if (cap_is_tensor_obj(x)) tensors = 1;
        else if (!cap_is_plain(x)) return 0;
    }
    /* methods already kept for replay on it (append, insert, clear) are
     * applied to the items instead (below); an extend by another list
     * argument, whose items capture does not know, keeps it as it was */
    for (int i = 0; i < I->brk->appends.len; i++)
        if (I->brk->appends.data[i].list == s && strcmp(I->brk->appends.data[i].method, "extend") == 0) return 0;
    /* the same list passed twice: one set of changes per object */
    for (int i = 0; i < I->nargs; i++)
        if (i != s->arg && I->args[i] == l) return 0;
    PyObject *snapshot = PyList_GetSlice(l, 0, PyList_GET_SIZE(l));
    if (!snapshot) return cap_py_failed(I, "a list argument");
    SvList items = {0};
    if (tensors) {
        PyObject *len = PyLong_FromSsize_t(PyList_GET_SIZE(snapshot));
        if (!len) {
            Py_DECREF(snapshot);
            return cap_py_failed(I, "a list argument");
        }
        wk_guard_type_at(I->guards, s->arg, NULL, &PyList_Type);
        wk_guard_shape_at(I->guards, s->arg, NULL, l, len);
        Py_DECREF(len);
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(snapshot); i++) {
            PyObject *idx = PyLong_FromSsize_t(i), *sub = idx ? cap_path_item_Ref(NULL, idx) : NULL;
            Py_XDECREF(idx);
            Sv *item = sub ? cap_source_item(I, PyList_GET_ITEM(snapshot, i), s->arg, sub) : NULL;
            Py_XDECREF(sub);
            if (!item) {
                Py_DECREF(snapshot);
                wk_vec_free(&items);
                return CAP_FAILED(I) ? -1 : cap_py_failed(I, "a list argument");
            }
            wk_vec_push(&items, item);
        }
    } else {
        wk_guard_equals_at(I->guards, s->arg, NULL, snapshot);
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(snapshot); i++) wk_vec_push(&items, sv_const(I, PyList_GET_ITEM(snapshot, i)));
    }
    Py_DECREF(snapshot);
    wk_guard_arg_distinct(I->guards, s->arg);
    s->kind = SV_LIST;
    s->obj = NULL; /* an SV_LIST with obj is a ModuleList slice: the reference moves to the record */
    for (int i = 0; i < items.len; i++) wk_vec_push(&s->items, items.data[i]);
    wk_vec_free(&items);
    ArgList rec = {s, l, s->items.len, wk_xcalloc((size_t)s->items.len + 1, sizeof(Sv *))};
    memcpy(rec.items, s->items.data, sizeof(Sv *) * (size_t)s->items.len);
    wk_vec_push(&I->brk->arg_lists, rec);
    int kept = 0;
    for (int i = 0; i < I->brk->appends.len; i++) {
        ListAppend *e = &I->brk->appends.data[i];
        if (e->list != s) {
            I->brk->appends.data[kept++] = *e;
            continue;
        }
        if (strcmp(e->method, "clear") == 0) {
            s->items.len = 0;
        } else if (strcmp(e->method, "append") == 0) {
            wk_vec_push(&s->items, e->value);
        } else { /* insert at a constant index, clamped as list.insert does */
            long at = PyLong_AsLong(e->index->obj);
            if (at == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                return cap_unsupported(I, "list.insert index");
            }
            if (at < 0) at += s->items.len;
            if (at < 0) at = 0;
            if (at > s->items.len) at = s->items.len;
            wk_vec_push(&s->items, NULL);
            memmove(&s->items.data[at + 1], &s->items.data[at], (size_t)(s->items.len - 1 - at) * sizeof(Sv *));
            s->items.data[at] = e->value;
        }
    }
    I->brk->appends.len = kept;
    return 1;
}

Sv *cap_cell_lookup(Interp *I, PyObject *cell) {
    for (int i = 0; I->brk && i < I->brk->cells.len; i++)
        if (I->brk->cells.data[i].cell == cell) return I->brk->cells.data[i].sv;
    return NULL;
}

PyObject *cap_cell_real(Interp *I, Sv *c, int *own) {
    *own = -1;
    PyObject *cell = NULL;
    for (int i = 0; I->brk && i < I->brk->cells.len; i++)
        if (I->brk->cells.data[i].sv == c) cell = I->brk->cells.data[i].cell;
    if (!cell) return NULL;
    Frame *top = I->f;
    while (top->parent) top = top->parent;
    PyObject *closure = top->fn ? top->fn->func_closure : NULL;
    for (Py_ssize_t k = 0; closure && PyTuple_Check(closure) && k < PyTuple_GET_SIZE(closure); k++)
        if (PyTuple_GET_ITEM(closure, k) == cell) *own = (int)k;
    return cell;
}

void cap_cell_register(Interp *I, PyObject *cell, Sv *c) {
    if (!I->brk) return;
    RealCell rc = {cell, c, c->cell};
    wk_vec_push(&I->brk->cells, rc);
}

int cap_break_effect_seen(Interp *I) {
    if (I->overlay.len > 0 || I->writes.len > 0 || (I->brk && (I->brk->globals.len > 0 || I->brk->appends.len > 0)))
        return 1;
    for (int i = 0; I->brk && i < I->brk->cells.len; i++)
        if (I->brk->cells.data[i].sv->cell != I->brk->cells.data[i].initial) return 1;
    for (int i = 0; I->brk && i < I->brk->arg_dicts.len; i++)
        if (arg_dict_changed(&I->brk->arg_dicts.data[i])) return 1;
    for (int i = 0; I->brk && i < I->brk->arg_lists.len; i++)
        if (arg_list_changed(&I->brk->arg_lists.data[i])) return 1;
    return 0;
}

/* Mixes every pending side effect into one number: unchanged while nothing
 * outside the frame is written (a generator's run is checked with it).
 * Without the appends (with_appends 0): the effects the plan replays apart
 * from them, whose order relative to a logging call it does not keep. */
static unsigned long long effects_fingerprint(Interp *I, int with_appends) {
    unsigned long long h = 1469598103934665603ull;
#define MIX(x) (h = (h ^ (unsigned long long)(uintptr_t)(x)) * 1099511628211ull)
    for (int i = 0; i < I->overlay.len; i++) {
        MIX(I->overlay.data[i].obj);
        MIX(I->overlay.data[i].value);
    }
    for (int i = 0; i < I->writes.len; i++) MIX(I->writes.data[i].value);
    for (int i = 0; i < I->ctxvars.len; i++) MIX(I->ctxvars.data[i].value);
    if (I->brk) {
        for (int i = 0; i < I->brk->globals.len; i++) MIX(I->brk->globals.data[i].value);
        if (with_appends) MIX(I->brk->appends.len);
        for (int i = 0; i < I->brk->cells.len; i++) MIX(I->brk->cells.data[i].sv->cell);
        for (int i = 0; i < I->brk->arg_dicts.len; i++) {
            Sv *d = I->brk->arg_dicts.data[i].dict;
            MIX(d->items.len);
            for (int k = 0; k < d->items.len; k++) MIX(d->items.data[k]);
        }
        for (int i = 0; i < I->brk->arg_lists.len; i++) {
            Sv *l = I->brk->arg_lists.data[i].list;
            MIX(l->items.len);
            for (int k = 0; k < l->items.len; k++) MIX(l->items.data[k]);
        }
    }
#undef MIX
    return h;
}

unsigned long long cap_effects_fingerprint(Interp *I) { return effects_fingerprint(I, 1); }

int cap_log_effect(Interp *I, PyObject *site, PyObject *fn, PyObject *args, PyObject *kwargs) {
    PyObject *objs[4] = {site, fn, args, kwargs};
    for (int i = 0; i < 4; i++) wk_vec_push(&I->keep, objs[i]);
    /* global writes are replayed after the appends: a handler would run
     * before one the frame made earlier */
    if (!I->brk || I->brk->globals.len > 0) return 0;
    ListAppend e = {.method = "log", .log = {site, fn, args, kwargs}, .others = effects_fingerprint(I, 0)};
    wk_vec_push(&I->brk->appends, e);
    return 1;
}

/* ---- global writes ------------------------------------------------------------ */

int cap_store_global(Interp *I, PyObject *name, Sv *v) {
    if (!I->brk || I->f->globals != I->top_globals)
        return cap_unsupported(I, "write to a global of another module");
    if (v->kind == SV_NULL) return cap_unsupported(I, "global write of NULL");
    for (int i = 0; i < I->brk->globals.len; i++)
        if (PyUnicode_Compare(I->brk->globals.data[i].name, name) == 0) {
            I->brk->globals.data[i].value = v;
            return 0;
        }
    PyErr_Clear();
    GlobalWrite w = {Py_NewRef(name), v};
    wk_vec_push(&I->brk->globals, w);
    return 0;
}

Sv *cap_load_written_global(Interp *I, PyObject *name) {
    if (!I->brk || I->f->globals != I->top_globals) return NULL;
    for (int i = 0; i < I->brk->globals.len; i++)
        if (PyUnicode_Compare(I->brk->globals.data[i].name, name) == 0) return I->brk->globals.data[i].value;
    PyErr_Clear();
    return NULL;
}

int cap_list_appended(Interp *I, PyObject *list) {
    for (int i = 0; I->brk && i < I->brk->appends.len; i++)
        if (I->brk->appends.data[i].list->obj == list) return 1;
    return 0;
}

Sv *cap_list_append_effect(Interp *I, Sv *list, Sv *value) {
    /* a direct argument: the replay reads it from the argument's own slot,
     * which no attribute or item write replayed before it can rebind; or a
     * list pinned by identity (a global's or a closure cell's: a forward
     * hook collecting features), the replay's target that very object.
     * Capture reads a pinned list's items only where they are plain values
     * and only if the frame does not append to it (cap_pinned_list_Ref),
     * so nothing in the frame sees the list without the appends. */
    int pinned = list->kind == SV_CONST && PyList_CheckExact(list->obj);
    if (!I->brk || (!pinned && (list->arg < 0 || list->path || !list->obj || !PyList_CheckExact(list->obj))))
        return cap_unsupported(I, "list.append on a list capture cannot replay it to"), NULL;
    for (int i = 0; pinned && i < I->lists_read.len; i++)
        if (I->lists_read.data[i] == list->obj)
            return cap_unsupported(I, "list.append on a list whose items the frame read"), NULL;
    if (value->kind == SV_NULL) return cap_unsupported(I, "list.append of NULL"), NULL;
    ListAppend e = {.list = list, .method = "append", .value = value};
    wk_vec_push(&I->brk->appends, e);
    return sv_const(I, Py_None);
}

int cap_container_effect_method(PyObject *obj, PyObject *name) {
    static const char *const list_methods[] = {"append", "extend", "insert", "clear"};
    static const char *const set_methods[] = {"add", "discard", "clear"};
    if (PyList_CheckExact(obj)) {
        for (size_t i = 0; i < sizeof list_methods / sizeof *list_methods; i++)
            if (PyUnicode_CompareWithASCIIString(name, list_methods[i]) == 0) return 1;
    } else if (PySet_CheckExact(obj)) {
        for (size_t i = 0; i < sizeof set_methods / sizeof *set_methods; i++)
            if (PyUnicode_CompareWithASCIIString(name, set_methods[i]) == 0) return 1;
    }
    return 0;
}

Sv *cap_container_effect(Interp *I, const char *method, const Args *a) {
    Sv *c = a->pos[0];
    int nargs = a->npos - 1;
    int is_list = c->obj && PyList_CheckExact(c->obj), is_set = c->obj && PySet_CheckExact(c->obj);
    if (!I->brk || c->arg < 0 || c->path || !(is_list || is_set) || a->nkw)
        return cap_unsupported(I, "method %s() of a %s", method, sv_desc(c)), NULL;
    int list_only = strcmp(method, "append") == 0 || strcmp(method, "extend") == 0 || strcmp(method, "insert") == 0;
    int set_only = strcmp(method, "add") == 0 || strcmp(method, "discard") == 0;
    if ((list_only && !is_list) || (set_only && !is_set))
        return cap_unsupported(I, "method %s() of a %s", method, sv_desc(c)), NULL;
    if (strcmp(method, "append") == 0 && nargs == 1) return cap_list_append_effect(I, c, a->pos[1]);
    ListAppend e = {.list = c};
    if (strcmp(method, "clear") == 0 && nargs == 0) {
        e.method = "clear";
    } else if (strcmp(method, "insert") == 0 && nargs == 2 && a->pos[1]->kind == SV_CONST &&
               PyLong_CheckExact(a->pos[1]->obj) && a->pos[2]->kind != SV_NULL) {
        e = (ListAppend){.list = c, .method = "insert", .value = a->pos[2], .index = a->pos[1]};
    } else if ((strcmp(method, "add") == 0 || strcmp(method, "discard") == 0) && nargs == 1) {
        /* an unhashable value raises in Python: only constants that hash, and tensors */
        Sv *v = a->pos[1];
        if (!(v->kind == SV_TENSOR || (v->kind == SV_CONST && PyObject_Hash(v->obj) != -1))) {
            PyErr_Clear();
            return cap_unsupported(I, "set.%s() of a %s", method, sv_desc(v)), NULL;
        }
        e = (ListAppend){.list = c, .method = strcmp(method, "add") == 0 ? "add" : "discard", .value = v};
    } else if (strcmp(method, "extend") == 0 && nargs == 1) {
        /* the items one by one when capture knows them; a list argument as it is then */
        Sv *it = a->pos[1];
        SvList items = {0};
        if (it->kind == SV_TUPLE || it->kind == SV_LIST ||
            (it->kind == SV_CONST && (PyTuple_CheckExact(it->obj) || PyList_CheckExact(it->obj)))) {
            if (cap_iterate(I, it, &items) < 0) {
                wk_vec_free(&items);
                return NULL;
            }
            for (int i = 0; i < items.len; i++)
                if (!cap_list_append_effect(I, c, items.data[i])) {
                    wk_vec_free(&items);
                    return NULL;
                }
            wk_vec_free(&items);
            return sv_const(I, Py_None);
        }
        if (it->kind != SV_OPAQUE || it->arg < 0 || !it->obj || !PyList_CheckExact(it->obj))
            return cap_unsupported(I, "list.extend() of a %s", sv_desc(it)), NULL;
        e = (ListAppend){.list = c, .method = "extend", .value = it};
    } else {
        return cap_unsupported(I, "%s.%s() with these arguments", cap_type_name(c->obj), method), NULL;
    }
    wk_vec_push(&I->brk->appends, e);
    return sv_const(I, Py_None);
}

int cap_break_check_args(Interp *I) {
    for (int i = 0; I->brk && i < I->brk->arg_dicts.len; i++)
        if (arg_dict_changed(&I->brk->arg_dicts.data[i]))
            return cap_unsupported(I, "the frame changes a dict argument (side effects are not replayed yet)");
    return 0;
}

void cap_break_free(Interp *I, WkBreak *b) {
    if (I->brk) {
        for (int i = 0; i < I->brk->arg_dicts.len; i++) {
            free(I->brk->arg_dicts.data[i].items);
            Py_XDECREF(I->brk->arg_dicts.data[i].keys);
        }
        wk_vec_free(&I->brk->arg_dicts);
        for (int i = 0; i < I->brk->arg_lists.len; i++) {
            free(I->brk->arg_lists.data[i].items);
            Py_XDECREF(I->brk->arg_lists.data[i].obj);
        }
        wk_vec_free(&I->brk->arg_lists);
        for (int i = 0; i < I->brk->globals.len; i++) Py_DECREF(I->brk->globals.data[i].name);
        wk_vec_free(&I->brk->globals);
        wk_vec_free(&I->brk->effects);
        wk_vec_free(&I->brk->written);
        wk_vec_free(&I->brk->cells);
        wk_vec_free(&I->brk->exits);
        wk_vec_free(&I->brk->first_step);
        wk_vec_free(&I->brk->appends);
        free(I->brk);
        I->brk = NULL;
    }
    if (b) {
        free(b->args);
        free(b->in);
        free(b->cells);
        free(b->cell_table);
        free(b);
    }
}

/* How the instruction at a break behaves: operands it pops (nin), values
 * it pushes (nout); kind and name. *null_first: the original pushes a NULL
 * below its one result, which the instruction run in Python does not (a
 * method load runs as a plain attribute load: [NULL, bound method] calls
 * alike). -1: a break cannot be made there. */
static int classify(PyCodeObject *orig, const WkInstr *in, WkBreak *b, int *null_first) {
    int op = in->opcode, arg = in->oparg;
    b->opcode = op;
    b->oparg = arg;
    b->kind = WK_BREAK_INSTR;
    *null_first = 0;
    PyObject *names = orig->co_names;
    switch (op) {
    case CALL: b->nin = arg + 2; b->nout = 1; return 0;
    case CALL_FUNCTION_EX: b->nin = 3 + (arg & 1); b->nout = 1; return 0;
    case BINARY_OP: case BINARY_SUBSCR: case COMPARE_OP: case CONTAINS_OP: case IS_OP:
        b->nin = 2; b->nout = 1; return 0;
    case STORE_SUBSCR: b->nin = 3; b->nout = 0; return 0;
    case DELETE_SUBSCR: b->nin = 2; b->nout = 0; return 0;
    case UNARY_NEGATIVE: case UNARY_NOT: case UNARY_INVERT: case GET_ITER:
#ifdef UNARY_POSITIVE
    case UNARY_POSITIVE:
#endif
        b->nin = 1; b->nout = 1; return 0;
    case BUILD_STRING: case BUILD_SLICE: b->nin = arg; b->nout = 1; return 0;
#ifdef FORMAT_VALUE
    case FORMAT_VALUE: b->nin = (arg & 4) ? 2 : 1; b->nout = 1; return 0;
#endif
    case UNPACK_SEQUENCE: b->nin = 1; b->nout = arg; return 0;
#ifdef BINARY_SLICE
    case BINARY_SLICE: b->nin = 3; b->nout = 1; return 0;
    case STORE_SLICE: b->nin = 4; b->nout = 0; return 0;
#endif
    case STORE_ATTR: b->nin = 2; b->nout = 0; b->name = PyTuple_GET_ITEM(names, arg); return 0;
    case DELETE_ATTR: b->nin = 1; b->nout = 0; b->name = PyTuple_GET_ITEM(names, arg); return 0;
    case STORE_GLOBAL: b->nin = 1; b->nout = 0; b->name = PyTuple_GET_ITEM(names, arg); return 0;
    case DELETE_GLOBAL: b->nin = 0; b->nout = 0; b->name = PyTuple_GET_ITEM(names, arg); return 0;
    case IMPORT_NAME: b->nin = 2; b->nout = 1; b->name = PyTuple_GET_ITEM(names, arg); return 0;
    case LOAD_ATTR:
#if PY_VERSION_HEX >= 0x030C0000
        *null_first = arg & 1; /* the method form */
        b->name = PyTuple_GET_ITEM(names, arg >> 1);
#else
        b->name = PyTuple_GET_ITEM(names, arg);
#endif
        b->opcode = LOAD_ATTR;
        b->nin = 1; b->nout = 1; return 0;
#ifdef LOAD_METHOD
    case LOAD_METHOD:
        *null_first = 1;
        b->name = PyTuple_GET_ITEM(names, arg);
        b->opcode = LOAD_ATTR;
        b->nin = 1; b->nout = 1; return 0;
#endif
    case LOAD_GLOBAL: /* 3.11 and 3.12 alike: name index << 1 | push NULL */
        *null_first = arg & 1;
        b->name = PyTuple_GET_ITEM(names, arg >> 1);
        b->nin = 0; b->nout = 1; return 0;
    case BEFORE_WITH: b->nin = 1; b->nout = 2; return 0; /* a context manager capture does not model */
    case RAISE_VARARGS: b->kind = WK_BREAK_RAISE; b->nin = arg; b->nout = 0; return 0;
#if PY_VERSION_HEX >= 0x030C0000
    case POP_JUMP_IF_TRUE: case POP_JUMP_IF_FALSE:
        b->jump_if_true = op == POP_JUMP_IF_TRUE;
#else
    case POP_JUMP_FORWARD_IF_TRUE: case POP_JUMP_FORWARD_IF_FALSE:
    case POP_JUMP_BACKWARD_IF_TRUE: case POP_JUMP_BACKWARD_IF_FALSE:
        b->jump_if_true = op == POP_JUMP_FORWARD_IF_TRUE || op == POP_JUMP_BACKWARD_IF_TRUE;
#endif
        b->kind = WK_BREAK_BRANCH; b->nin = 1; b->nout = 0; return 0;
    default:
        return -1;
    }
}

/* Reasons that are limits of the compiler, not of capture: every op on
 * such a tensor would break again, so the frame runs eagerly whole. */
static int backend_limit(const char *reason) {
    static const char *const limits[] = {"autodiff not implemented", "unsupported dtype", "no GPU",
                                         "non-strided layout", "with backend", "wick could not compile",
                                         /* the graph's outputs are laid out contiguously, not as
                                          * eager's would be: Python must not look at them */
                                         "of a computed tensor",
                                         /* aliasing capture does not model: Python must not see
                                          * the graph's outputs as separate tensors */
                                         "is a view or has views"};
    for (size_t i = 0; reason && i < sizeof limits / sizeof limits[0]; i++)
        if (strstr(reason, limits[i])) return 1;
    return 0;
}

/* Which instructions normal flow reaches (not only exception handling): a
 * back edge from code only a handler reaches is no loop. 3.12 places a with
 * block's exceptional exit at the end of the code, whence it jumps back to
 * the code after the block. Owned by the caller. */
static unsigned char *normal_flow(const WkInstr *raw, int n) {
    unsigned char *normal = wk_xcalloc((size_t)n + 1, 1);
    int *todo = wk_xmalloc(sizeof(int) * (size_t)(n + 1)), ntodo = 0;
    if (n > 0) normal[0] = 1, todo[ntodo++] = 0;
    while (ntodo > 0) {
        int i = todo[--ntodo];
        int succ[2] = {wk_bc_falls_through(raw[i].opcode) && i + 1 < n ? i + 1 : -1, wk_bc_jump_target(raw, n, i)};
        for (int k = 0; k < 2; k++)
            if (succ[k] >= 0 && succ[k] < n && !normal[succ[k]]) normal[succ[k]] = 1, todo[ntodo++] = succ[k];
    }
    free(todo);
    return normal;
}

/* Whether a graph of the frame's first `step` instructions may hand over
 * to eager code. Not when torch.compiler.is_compiling() answered True
 * during one of them (builtins.c) and the instruction that failed asked
 * for an attribute or item of None: the values the eager rest receives
 * followed the True branch, which leaves out what eager would make
 * (transformers' SwitchTransformers and LongT5 make their attention mask
 * only when not compiling, then read it), and the eager instruction would
 * raise. Then the frame falls back, its reason saying why. Other values of
 * that branch are the same values computed another way (builtins.c). */
static int graph_may_end_at(Interp *I, long step) {
    if (!I->compiling_step || I->compiling_step > step || I->none_step != I->top_steps) return 1;
    if (I->reason) {
        WkStr s = {0};
        wk_str_printf(&s, "%s (no graph break: torch.compiler.is_compiling() answered True before it, and eager code "
                          "at a break would read None where eager's branch made a value)", I->reason);
        free(I->reason);
        I->reason = s.data;
    }
    return 0;
}

/* The top-level step to stop before, or 0 when no break can help. */
long cap_break_step(Interp *I, PyCodeObject *code) {
    if (backend_limit(I->reason)) return 0;
    /* a failure inside an inlined call leaves I->f at the callee: the break
     * is at the call in the compiled frame all the same (top_pc) */
    if (I->no_break || I->propagate || I->top_steps < 2) return 0;
    /* inside an except block entered during capture, the code run at the
     * break would not see the handled exception (sys.exc_info, __context__) */
    if (I->handled) return 0;
    long step = I->top_steps - 1;
    int pc = I->top_pc;
    if (I->effect_step > 0 && I->effect_step <= I->top_steps) {
        /* a write to an outside object capture modelled but cannot replay: break before it */
        step = I->effect_step - 1;
        pc = I->effect_pc;
    }
    int prologue;
    PyCodeObject *orig = origin_of(code, &prologue);
    int n = 0;
    WkInstr *raw = wk_bc_decode(orig, &n);
    if (!raw) {
        PyErr_Clear();
        return 0;
    }
    WkBreak b = {0};
    int null_first;
    int opc = pc - prologue;
    /* a failure inside a loop: split before the outermost loop around it
     * (its GET_ITER for a for loop), so that the code before the loop is
     * a graph and the loop with the rest runs in the resume function, where
     * the same failure finds nothing before the loop to split off: that
     * frame runs eagerly, never one resume call deeper per iteration */
    int head = -1;
    unsigned char *normal = normal_flow(raw, n);
    for (int j = 0; opc >= 0 && opc < n && j < n; j++) {
        int t = wk_bc_jump_target(raw, n, j);
        if (!normal[j]) continue;
        if (t >= 0 && t <= j && t <= opc && opc <= j && (head < 0 || t < head)) head = t;
    }
    free(normal);
    if (head >= 0) {
        int at = head > 0 && raw[head - 1].opcode == GET_ITER ? head - 1 : head;
        long first = I->brk && at + prologue < I->brk->first_step.len ? I->brk->first_step.data[at + prologue] : 0;
        if (at != head && first == 0) { /* a resume function that starts at the head, its iterator made */
            at = head;
            first = I->brk && at + prologue < I->brk->first_step.len ? I->brk->first_step.data[at + prologue] : 0;
        }
        /* a loop whose body can be a function of its own (loops.c) is
         * worth the split even with nothing before it */
        CapLoop lo;
        const char *why;
        int outlined = first - 1 >= 1 && cap_loop_find(orig, raw, n, at, &lo, &why) == 0;
        if (outlined) cap_loop_free(&lo);
        free(raw);
        /* something of the original ran before it (not only the prologue) */
        return (first - 1 > prologue || outlined) && graph_may_end_at(I, first - 1) ? -(first - 1) : 0;
    }
    int ok = opc >= 0 && opc < n && classify(orig, &raw[opc], &b, &null_first) == 0;
    free(raw);
    return ok && step >= 1 && graph_may_end_at(I, step) ? step : 0;
}

/* ---- rebuilding live values ------------------------------------------------- */

static WkRet *ret_new_items(RetPlan *p, WkRetKind kind, int n) {
    WkRet *r = cap_ret_new(p, kind);
    r->nitems = n;
    r->items = wk_xcalloc((size_t)n + 1, sizeof(WkRet *));
    return r;
}

static PyObject *keep(Interp *I, PyObject *o_Steal) {
    if (o_Steal) wk_vec_push(&I->keep, o_Steal);
    return o_Steal;
}

/* Whether s is or holds an exception capture raised itself (I->raised). */
static int is_raised(Interp *I, PyObject *o, int depth) {
    if (!o || depth > 2) return 0;
    for (int i = 0; i < I->raised.len; i++)
        if (I->raised.data[i] == o) return 1;
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o))
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++)
            if (is_raised(I, PySequence_Fast_ITEMS(o)[i], depth + 1)) return 1;
    return 0;
}

static int holds_raised(Interp *I, const Sv *s, int depth) {
    if (!s || depth > 32) return 0;
    if (is_raised(I, s->obj, 0)) return 1;
    for (int i = 0; i < s->items.len; i++)
        if (holds_raised(I, s->items.data[i], depth + 1)) return 1;
    return holds_raised(I, s->self, depth + 1) || holds_raised(I, s->cell, depth + 1);
}

/* One live value as the transformed code rebuilds it. */
static WkRet *live_value(Interp *I, RetPlan *p, Sv *s) {
    if (s->kind == SV_NULL) return cap_ret_new(p, WK_RET_NULL);
    if (I->raised.len && holds_raised(I, s, 0))
        return cap_unsupported(I, "an exception capture raised, live across a graph break"), NULL;
    for (int i = 0; I->brk && i < I->brk->arg_dicts.len; i++) {
        ArgDict *d = &I->brk->arg_dicts.data[i];
        if (d->dict != s) continue;
        /* a changed one is the argument itself too: its changes are replayed before the break's instruction */
        if (d->arg < 0) return cap_unsupported(I, "a dict nested in an argument, live across a graph break"), NULL;
        WkRet *r = cap_ret_new(p, WK_RET_ARG);
        r->index = d->arg;
        return r;
    }
    /* an argument (or a global) as it is: a constant read from one may be
     * unguarded (capture only passed it on), so its value is the call's */
    if (s->arg >= 0 || s->gname) return cap_reconstruct(I, p, s, 0);
    if (s->kind == SV_CONST) {
        if (PyUnicode_CheckExact(s->obj) && !PyUnicode_CHECK_INTERNED(s->obj)) {
            /* a code object interns its str constants, which would make a
             * string computed during capture `is` an equal literal: load it
             * from a list instead, identity kept */
            PyObject *holder = keep(I, PyList_New(1));
            PyObject *get = holder ? keep(I, PyObject_GetAttrString(holder, "__getitem__")) : NULL;
            if (!get) return cap_py_failed(I, "graph break"), NULL;
            PyList_SET_ITEM(holder, 0, Py_NewRef(s->obj));
            WkRet *r = ret_new_items(p, WK_RET_CALL, 1);
            r->value = get;
            r->items[0] = cap_ret_new(p, WK_RET_CONST);
            if (!(r->items[0]->value = keep(I, PyLong_FromLong(0)))) return cap_py_failed(I, "graph break"), NULL;
            return r;
        }
        WkRet *r = cap_ret_new(p, WK_RET_CONST);
        r->value = s->obj;
        return r;
    }
    if (s->kind == SV_METHOD && s->self && s->name) {
        WkRet *r = ret_new_items(p, WK_RET_ATTR, 1);
        if (!(r->value = keep(I, PyUnicode_FromString(s->name)))) return cap_py_failed(I, "graph break"), NULL;
        if (!(r->items[0] = live_value(I, p, s->self))) return NULL;
        return r;
    }
    /* an unrolled iterator (SV_ITER) is not rebuilt: it may stand for a
     * generator or another iterator whose type and identity Python sees */
    /* a function the frame made (SV_FUNC) is not rebuilt: a second function
     * object would differ in identity, attributes and annotations */
    return cap_reconstruct(I, p, s, 0);
}

static int is_mutable_kind(const Sv *s) {
    return s->kind == SV_LIST || s->kind == SV_DICT || s->kind == SV_OBJECT || s->kind == SV_ITER || s->kind == SV_SET;
}

/* Each mutable value made during capture is rebuilt as a new object per
 * occurrence: two live references to one would become two objects. */
static int is_arg_dict(Interp *I, const Sv *s) {
    for (int i = 0; I->brk && i < I->brk->arg_dicts.len; i++)
        if (I->brk->arg_dicts.data[i].dict == s) return 1;
    return 0;
}

/* A set made in the frame (vals/set.c) shared by two live values: the
 * break can move to before the instruction that made it (the set is then
 * made by Python in the resume function). The step to retry with, or 0. */
static long retry_step;

long cap_break_take_retry(void) {
    long r = retry_step;
    retry_step = 0;
    return r;
}

static int check_sharing(Interp *I, Sv *s, SvList *seen, int depth) {
    if (!s || depth > 32) return 0;
    if (s->kind == SV_LIST && s->name) /* a dict view modelled as a list (vals/dict.c) */
        return cap_unsupported(I, "a %s live across a graph break", s->name);
    if (is_arg_dict(I, s)) return 0; /* rebuilt by identity (live_value) */
    if (is_mutable_kind(s) && s->arg < 0 && !s->gname) {
        for (int i = 0; i < seen->len; i++)
            if (seen->data[i] == s) {
                if (s->kind == SV_SET && s->value > 1 && !I->split) retry_step = s->value - 1;
                return cap_unsupported(I, "a %s shared by two live values across a graph break", sv_desc(s));
            }
        wk_vec_push(seen, s);
    }
    if (s->kind == SV_TUPLE || s->kind == SV_LIST || s->kind == SV_DICT || s->kind == SV_ITER)
        for (int i = 0; i < s->items.len; i++)
            if (check_sharing(I, s->items.data[i], seen, depth + 1) < 0) return -1;
    if (s->kind == SV_OBJECT || s->kind == SV_METHOD) return check_sharing(I, s->self, seen, depth + 1);
    return 0;
}

/* ---- side effects ------------------------------------------------------------- */

static int effect_push(CapBreakState *st, WkEffectKind kind, WkRet *target, WkRet *value, PyObject *name) {
    WkEffect e = {kind, target, value, NULL, name};
    wk_vec_push(&st->effects, e);
    return 0;
}

/* Not a mutable value made in the frame, or one cap_reconstruct rebuilds as
 * one object for all its references (lists, dicts, sets, user objects; not
 * iterators or dict views) */
static int rebuildable_once(const Sv *v) {
    if (!is_mutable_kind(v) || v->arg >= 0 || v->gname) return 1;
    return v->kind != SV_ITER && !(v->kind == SV_LIST && (v->name || v->obj));
}

static int effects_fail(Interp *I, const char *what) {
    if (I->brk) I->brk->effects_failed = 1;
    return cap_unsupported(I, "%s (not replayed)", what);
}

int cap_effects_plan(Interp *I, RetPlan *p, WkEffects *out) {
    CapBreakState *st = I->brk;
    out->n = 0;
    out->items = NULL;
    if (!st) return 0;
    st->effects.len = 0;
    st->written.len = 0;
    /* real __exit__ calls: run first, right after the graph (transform.c) */
    for (int i = 0; i < st->exits.len; i++) {
        WkRet *target = live_value(I, p, st->exits.data[i]);
        if (!target) return effects_fail(I, "an __exit__ call");
        effect_push(st, WK_EFFECT_EXIT, target, NULL, NULL);
    }
    /* input tensors written in place, first: their targets are read from
     * their sources before any attribute write below could rebind them */
    for (int i = 0; i < I->writes.len; i++) {
        CapWrite *w = &I->writes.data[i];
        int input = -1;
        for (int k = 0; k < wk_graph_ninputs(I->g) && input < 0; k++)
            if (wk_graph_input_value(I->g, k) == w->input) input = k;
        WkRet *target = input >= 0 ? cap_ret_new(p, WK_RET_WRITTEN) : NULL; /* the loader hands it over */
        if (target) target->index = st->written.len;
        Sv *now = target ? sv_tensor(I, w->value) : NULL;
        WkRet *value = now ? cap_reconstruct(I, p, now, 0) : NULL;
        if (!value) return effects_fail(I, "an in-place write into an input tensor");
        if (w->no_grad) {
            static PyObject *copy_no_grad;
            if (!copy_no_grad) {
                PyObject *m = PyImport_ImportModule("wick._capture_meta");
                copy_no_grad = m ? PyObject_GetAttrString(m, "copy_no_grad") : NULL;
                Py_XDECREF(m);
                if (!copy_no_grad) return cap_py_failed(I, "wick._capture_meta.copy_no_grad");
            }
            effect_push(st, WK_EFFECT_CALL, target, value, copy_no_grad);
        } else {
            effect_push(st, WK_EFFECT_COPY, target, value, NULL);
        }
        wk_vec_push(&st->written, input);
    }
    /* attribute writes to argument objects: the last value of each */
    for (int i = 0; i < I->overlay.len; i++) {
        CapOverlay *e = &I->overlay.data[i];
        PyObject **dp = _PyObject_GetDictPtr(e->obj);
        PyObject *cur = dp && *dp ? PyDict_GetItemWithError(*dp, e->name) : NULL;
        PyErr_Clear();
        int same = e->value ? (cur && e->value->obj == cur && (e->value->kind == SV_CONST || e->value->arg >= 0))
                            : cur == NULL;
        if (same) continue;
        WkRet *target = live_value(I, p, e->owner);
        WkRet *value = e->value ? live_value(I, p, e->value) : NULL;
        if (!target || (e->value && !value)) return effects_fail(I, "an attribute write");
        effect_push(st, e->value ? WK_EFFECT_SETATTR : WK_EFFECT_DELATTR, target, value, e->name);
    }
    /* dict arguments: their items as the frame left them */
    for (int i = 0; i < st->arg_dicts.len; i++) {
        ArgDict *d = &st->arg_dicts.data[i];
        if (!arg_dict_changed(d)) continue;
        if (d->arg < 0) return effects_fail(I, "a change to a dict nested in an argument");
        Sv *s = d->dict;
        for (int k = 0; d->path && k < I->overlay.len; k++) /* the path must reach the same dict at the replay */
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(d->path); j++)
                if (PyUnicode_Check(PyTuple_GET_ITEM(d->path, j)) &&
                    PyUnicode_Compare(PyTuple_GET_ITEM(d->path, j), I->overlay.data[k].name) == 0)
                    return effects_fail(I, "a change to a dict whose path the frame rebinds");
        PyErr_Clear();
        WkRet *target = cap_ret_new(p, WK_RET_ARG);
        target->index = d->arg;
        target->path = d->path;
        /* kept keys stay in place: assignments; a removed key: clear, then all items */
        int removed = PyList_GET_SIZE(s->obj) < d->nkeys;
        for (int k = 0; !removed && k < d->nkeys; k++)
            removed = PyList_GET_ITEM(s->obj, k) != PyTuple_GET_ITEM(d->keys, k);
        if (removed) effect_push(st, WK_EFFECT_CLEAR, target, NULL, NULL);
        for (int k = 0; k < s->items.len; k++) {
            if (!removed && k < d->nkeys && s->items.data[k] == d->items[k]) continue;
            WkRet *value = live_value(I, p, s->items.data[k]);
            if (!value) return effects_fail(I, "a dict argument item");
            effect_push(st, WK_EFFECT_SETITEM, target, value, PyList_GET_ITEM(s->obj, k));
        }
    }
    /* list arguments capture read and changed: cleared, then given their
     * final items (the same list object, as eager leaves it) */
    for (int i = 0; i < st->arg_lists.len; i++) {
        ArgList *l = &st->arg_lists.data[i];
        if (!arg_list_changed(l)) continue;
        Sv *s = l->list;
        for (int k = 0; k < s->items.len; k++)
            if (!rebuildable_once(s->items.data[k]))
                return effects_fail(I, "a list argument holding a mutable value made by the frame");
        WkRet *target = cap_ret_new(p, WK_RET_ARG);
        target->index = s->arg;
        WkRet *items = ret_new_items(p, WK_RET_LIST, s->items.len);
        for (int k = 0; k < s->items.len; k++)
            if (!(items->items[k] = live_value(I, p, s->items.data[k]))) return effects_fail(I, "a list argument item");
        PyObject *clear = keep(I, PyObject_GetAttrString((PyObject *)&PyList_Type, "clear"));
        PyObject *extend = keep(I, PyObject_GetAttrString((PyObject *)&PyList_Type, "extend"));
        if (!clear || !extend) return cap_py_failed(I, "list methods");
        effect_push(st, WK_EFFECT_CALL, target, NULL, clear);
        effect_push(st, WK_EFFECT_CALL, target, items, extend);
    }
    /* closure cells of real functions (nonlocal writes in inlined closures) */
    static PyObject *s_contents;
    if (!s_contents && !(s_contents = PyUnicode_InternFromString("cell_contents"))) return cap_py_failed(I, "cells");
    for (int i = 0; i < st->cells.len; i++) {
        RealCell *c = &st->cells.data[i];
        if (c->sv->cell == c->initial) continue;
        /* a cell of the compiled frame's own closure is this call's (its
         * guards check what it holds, not which cell it is); a callee's
         * cell is pinned by identity */
        Frame *top = I->f;
        while (top->parent) top = top->parent;
        PyObject *closure = top->fn ? top->fn->func_closure : NULL;
        int own = -1;
        for (Py_ssize_t k = 0; closure && PyTuple_Check(closure) && k < PyTuple_GET_SIZE(closure); k++)
            if (PyTuple_GET_ITEM(closure, k) == c->cell) own = (int)k;
        WkRet *target = cap_ret_new(p, own >= 0 ? WK_RET_FREEVAR : WK_RET_CONST);
        target->value = c->cell;
        target->index = own;
        WkRet *value = c->sv->cell ? live_value(I, p, c->sv->cell) : NULL;
        if (c->sv->cell && !value) return effects_fail(I, "a closure cell write");
        effect_push(st, value ? WK_EFFECT_SETATTR : WK_EFFECT_DELATTR, target, value, s_contents);
    }
    /* appends to list arguments, in program order; a mutable value made
     * during capture is rebuilt once, shared with every other reference to
     * it (cap_reconstruct); an iterator or a dict view is not rebuilt.
     * Logging calls among them: the effects replayed before the appends
     * must all come before the first one, as in eager */
    unsigned long long others = effects_fingerprint(I, 0);
    for (int i = 0; i < st->appends.len; i++) {
        ListAppend *e = &st->appends.data[i];
        if (strcmp(e->method, "log") == 0 && e->others != others)
            return effects_fail(I, "a side effect after a logging call");
    }
    for (int i = 0; i < st->appends.len; i++) {
        ListAppend *e = &st->appends.data[i];
        if (strcmp(e->method, "log") == 0) { /* site(fn, args, kwargs), its result dropped */
            WkRet *rets[3];
            for (int k = 0; k < 3; k++) {
                rets[k] = cap_ret_new(p, WK_RET_CONST);
                rets[k]->value = e->log[k + 1];
            }
            effect_push(st, WK_EFFECT_CALL, rets[0], rets[2], e->log[0]);
            st->effects.data[st->effects.len - 1].index = rets[1];
            continue;
        }
        if (e->value && !rebuildable_once(e->value))
            return effects_fail(I, "a list.append of a mutable value made by the frame");
        WkRet *target = live_value(I, p, e->list);
        WkRet *value = target && e->value ? live_value(I, p, e->value) : NULL;
        if (!target || (e->value && !value)) return effects_fail(I, "a list or set method on an argument");
        if (strcmp(e->method, "append") == 0) {
            effect_push(st, WK_EFFECT_APPEND, target, value, NULL);
            continue;
        }
        /* type(container).method(container, [index,] value), its result dropped */
        PyObject *fn = keep(I, PyObject_GetAttrString((PyObject *)Py_TYPE(e->list->obj), e->method));
        if (!fn) return cap_py_failed(I, "a container method");
        WkRet *index = e->index ? live_value(I, p, e->index) : NULL;
        if (e->index && !index) return effects_fail(I, "list.insert on an argument");
        effect_push(st, WK_EFFECT_CALL, target, value, fn);
        st->effects.data[st->effects.len - 1].index = index;
    }
    /* module globals */
    for (int i = 0; i < st->globals.len; i++) {
        WkRet *value = live_value(I, p, st->globals.data[i].value);
        if (!value) return effects_fail(I, "a global write");
        effect_push(st, WK_EFFECT_GLOBAL, NULL, value, st->globals.data[i].name);
    }
    out->n = st->effects.len;
    out->items = st->effects.data;
    out->nwritten = st->written.len;
    out->written = st->written.data;
    return 0;
}

int cap_effects_failed(Interp *I) { return I->brk && I->brk->effects_failed; }

/* ---- the plan ------------------------------------------------------------------ */

int cap_break_plan(Interp *I, PyCodeObject *code, RetPlan *p, WkBreak **out, PyObject *options) {
    Frame *F = I->f;
    int prologue, n = 0, rc = -1;
    PyCodeObject *orig = origin_of(code, &prologue);
    WkInstr *raw = NULL;
    unsigned char *live = NULL;
    ExcRanges ex = {0};
    SvList slots = {0}, seen = {0};
    PyObject *local_names = NULL, *cur_names = NULL;
    char *layout = NULL;
    WkBreak *b = wk_xcalloc(1, sizeof(WkBreak));
    WkVec(WkRet *) args = {0};
    CapLoop loop = {0};

    if (F->depth != 0) {
        cap_unsupported(I, "graph break stopped outside the compiled frame");
        goto done;
    }
    if (code != orig && code->co_ncellvars) { /* a resume frame's cells are free variables */
        cap_unsupported(I, "graph break in a frame with cell variables of its own");
        goto done;
    }
    p->cells_ok = 1; /* cells made in capture are made again at the break */
    if (!(raw = wk_bc_decode(orig, &n))) {
        cap_py_failed(I, "decoding bytecode");
        goto done;
    }
    int pc = I->top_pc - prologue, null_first = 0;
    if (I->split && pc >= 0 && pc < n) { /* nothing runs here: resume at pc itself */
        b->split = 1;
        b->kind = WK_BREAK_INSTR;
        b->opcode = NOP;
    } else if (pc < 0 || pc >= n || classify(orig, &raw[pc], b, &null_first) < 0) {
        cap_unsupported(I, "graph break at an instruction that cannot run on its own");
        goto done;
    }
    b->line = raw[pc].line;
    b->col = -1;
    int bl;
    if (!PyCode_Addr2Location(orig, raw[pc].offset * 2, &bl, &b->col, &b->endline, &b->endcol) || bl != b->line)
        b->col = -1;
    /* A frame that may read its own locals (locals(), vars(), dir(), eval,
     * exec) would see the resume function's, which hold only the live ones;
     * one that looks at frames (sys._getframe, a traceback's tb_frame) would
     * see the resume function's frame, not its own */
    static const char *const introspect[] = {"locals", "vars", "dir", "eval", "exec",
                                             "_getframe", "currentframe", "tb_frame", "f_back"};
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(orig->co_names); i++) {
        const char *nm = PyUnicode_AsUTF8(PyTuple_GET_ITEM(orig->co_names, i));
        for (size_t k = 0; nm && k < sizeof introspect / sizeof introspect[0]; k++)
            if (strcmp(nm, introspect[k]) == 0) {
                cap_unsupported(I, "graph break in a frame that may read its locals (%s)", nm);
                goto done;
            }
    }
    PyErr_Clear();
    /* Inside a loop, the resume function would reach the break again and
     * call the next resume function from within itself, one Python frame
     * deeper per iteration: as PyTorch's capture does, run such a frame
     * eagerly (the code before the loop is not worth the recursion). */
    unsigned char *normal = normal_flow(raw, n);
    for (int j = 0; j < n; j++) {
        int t = wk_bc_jump_target(raw, n, j);
        if (!b->split && normal[j] && t >= 0 && t <= j && t <= pc && pc <= j) {
            free(normal);
            cap_unsupported(I, "graph break inside a loop");
            goto done;
        }
    }
    free(normal);
    if (exc_ranges(orig, raw, n, &ex) < 0) {
        cap_unsupported(I, "graph break: exception table not understood");
        goto done;
    }
    /* the exception-table entry covering the instruction (entries are
     * disjoint): an exception it raises goes to that handler, run by a
     * resume function of its own (the protected break, transform.c) */
    const ExcRange *guard = NULL;
    for (int e = 0; !b->split && e < ex.len; e++)
        if (pc >= ex.data[e].start && pc < ex.data[e].end) guard = &ex.data[e];
    if (cap_ctxvar_check(I) < 0) goto done;
    if (F->sp < b->nin) {
        cap_unsupported(I, "graph break: symbolic stack underflow");
        goto done;
    }
    if (b->opcode == CALL && F->kwnames) b->kwnames = F->kwnames;

    /* live locals after the instruction (either way of a branch) */
    int nloc = orig->co_nlocals, targets[2] = {b->split ? pc : pc + 1, -1};
    if (b->kind == WK_BREAK_BRANCH) targets[1] = wk_bc_jump_target(raw, n, pc);
    if ((b->kind != WK_BREAK_RAISE && targets[0] >= n) || (b->kind == WK_BREAK_BRANCH && targets[1] < 0)) {
        cap_unsupported(I, "graph break at the end of the code");
        goto done;
    }
    live = liveness(raw, n, nloc, &ex);
    PyObject *orig_names = PyCode_GetVarnames(orig);
    cur_names = PyCode_GetVarnames(code);
    local_names = PyList_New(0);
    if (!orig_names || !cur_names || !local_names) {
        Py_XDECREF(orig_names);
        cap_py_failed(I, "graph break");
        goto done;
    }
    /* the locals the resume function(s) take (one set for both): every
     * bound one, live or not, since the original frame holds a value until
     * the local is overwritten or the frame ends, and whether it is alive
     * can be seen (weakrefs, finalizers, `with`-less cleanup in __del__).
     * Not passed: a tensor the graph made that is not live after the
     * instruction (it would only hold memory, as PyTorch's capture also
     * frees such a value at the break), and everything at a raise that no
     * handler of the frame catches (no resume function runs). */
    for (int j = 0; j < nloc; j++) {
        int is_live = (b->kind != WK_BREAK_RAISE && (live[(size_t)targets[0] * (size_t)nloc + (size_t)j] ||
                                                     (targets[1] >= 0 && live[(size_t)targets[1] * (size_t)nloc + (size_t)j]))) ||
                      (guard && live[(size_t)guard->handler * (size_t)nloc + (size_t)j]);
        if (b->kind == WK_BREAK_RAISE && !guard) continue;
        PyObject *nm = PyTuple_GET_ITEM(orig_names, j);
        int cj = j;
        if (code != orig) { /* a resume frame: its locals are in another order */
            cj = -1;
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(cur_names); k++)
                if (PyUnicode_Compare(PyTuple_GET_ITEM(cur_names, k), nm) == 0) cj = (int)k;
        }
        if (is_cell_slot(orig, j)) continue; /* passed in the resume function's closure */
        Sv *v = cj >= 0 && cj < F->nlocals ? F->locals[cj] : NULL;
        if (!v || v->kind == SV_NULL) continue; /* unbound: stays unbound in the resume function */
        if (!is_live && v->kind == SV_TENSOR && v->arg < 0 && !v->gname) continue;
        if (PyList_Append(local_names, nm) < 0) break;
        wk_vec_push(&slots, v);
    }
    Py_DECREF(orig_names);
    if (PyErr_Occurred()) {
        cap_py_failed(I, "graph break");
        goto done;
    }
    int nlive = slots.len;
    /* the stack: a [method, self] pair made by a modelled LOAD_METHOD becomes
     * [NULL, bound method], which CALL treats alike */
    Sv **stack = wk_xcalloc((size_t)F->sp + 1, sizeof(Sv *));
    memcpy(stack, F->stack, sizeof(Sv *) * (size_t)F->sp);
    for (int i = 0; i < slots.len; i++)
        if (check_sharing(I, slots.data[i], &seen, 0) < 0) break;
    for (int i = 0; !I->reason && i < F->sp; i++)
        if (check_sharing(I, stack[i], &seen, 0) < 0) break;
    if (I->reason) {
        free(stack);
        goto done;
    }
    WkRet **stack_ret = wk_xcalloc((size_t)F->sp + 1, sizeof(WkRet *));
    for (int i = 0; i < F->sp; i++) {
        Sv *s = stack[i];
        if (s->kind == SV_METHOD && !s->self && s->name && i + 1 < F->sp) {
            Sv *bound = sv_new(I, SV_METHOD);
            bound->name = wk_xstrdup(s->name);
            bound->self = stack[i + 1];
            stack[i] = I->null_sv;
            stack[i + 1] = bound;
        }
    }
    /* open grad-mode blocks, outermost first: each is entered again with
     * the mode it set (the next one's restore mode, or the mode now) */
    int ok = 1, mode = I->grad_base >= 0 ? I->grad_base : I->entry_grad;
    b->restore_grad = -1;
    for (int i = 0; ok && i < F->sp; i++) {
        if (stack[i]->kind != SV_GRAD_EXIT) continue;
        int inner = I->grad_enabled;
        for (int j = i + 1; j < F->sp; j++)
            if (stack[j]->kind == SV_GRAD_EXIT) {
                inner = stack[j]->value;
                break;
            }
        if (stack[i]->value != mode || !cap_torch_mod) {
            ok = 0;
            cap_unsupported(I, "graph break in grad-mode blocks that do not nest");
            break;
        }
        if (!b->set_grad) {
            PyObject *c = PyObject_GetAttrString(cap_torch_mod, "_C");
            PyObject *fn = c ? PyObject_GetAttrString(c, "_set_grad_enabled") : NULL;
            Py_XDECREF(c);
            b->set_grad = keep(I, fn);
            b->restore_grad = I->grad_base >= 0 ? I->grad_base : I->entry_grad;
        }
        WkRet *r = cap_ret_new(p, WK_RET_ENTER);
        r->value = keep(I, PyObject_GetAttrString(cap_torch_mod, "set_grad_enabled"));
        r->index = inner;
        if (!r->value || !b->set_grad) {
            ok = 0;
            cap_py_failed(I, "graph break");
            break;
        }
        stack_ret[i] = r;
        mode = inner;
    }
    if (ok && mode != I->grad_enabled) {
        ok = 0;
        cap_unsupported(I, "graph break with the grad mode changed outside a with block");
    }
    /* open autocast blocks, outermost first: each is entered again as
     * torch.autocast(device, dtype=, enabled=, cache_enabled=); replayed
     * from the entry state they must give the state the frame has now */
    int ac_dt[2] = {I->autocast_base_dt[0], I->autocast_base_dt[1]};
    int ac_fast[2] = {I->autocast_base_fast[0], I->autocast_base_fast[1]};
    for (int i = 0; ok && i < F->sp; i++) {
        if (stack[i]->kind != SV_AUTOCAST_EXIT) continue;
        PyObject *st = stack[i]->obj;
        int k = PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(st, 0), "cuda") == 0;
        if (stack[i]->value != ac_dt[k] || (ac_dt[k] != CAP_AUTOCAST_ENTRY && stack[i]->version != ac_fast[k])) {
            ok = 0;
            cap_unsupported(I, "graph break in autocast blocks that do not nest");
            break;
        }
        ac_fast[k] = cap_dtype_of_obj(PyTuple_GET_ITEM(st, 2));
        ac_dt[k] = PyTuple_GET_ITEM(st, 1) == Py_True ? ac_fast[k] : -1;
        if (!b->autocast_restore) {
            PyObject *m = PyImport_ImportModule("wick._capture_meta");
            b->autocast_save = keep(I, m ? PyObject_GetAttrString(m, "autocast_save") : NULL);
            b->autocast_restore = keep(I, m ? PyObject_GetAttrString(m, "autocast_restore") : NULL);
            Py_XDECREF(m);
        }
        PyObject *ft = PyImport_ImportModule("functools");
        PyObject *partial = ft ? PyObject_GetAttrString(ft, "partial") : NULL;
        PyObject *ac = PyObject_GetAttrString(cap_torch_mod, "autocast");
        PyObject *pargs = ac ? Py_BuildValue("(OO)", ac, PyTuple_GET_ITEM(st, 0)) : NULL;
        PyObject *kw = pargs ? Py_BuildValue("{sOsOsO}", "dtype", PyTuple_GET_ITEM(st, 2), "enabled",
                                             PyTuple_GET_ITEM(st, 1), "cache_enabled", PyTuple_GET_ITEM(st, 3))
                             : NULL;
        WkRet *r = cap_ret_new(p, WK_RET_ENTER);
        r->value = keep(I, kw ? PyObject_Call(partial, pargs, kw) : NULL);
        r->index = -1; /* called with no arguments */
        Py_XDECREF(ft);
        Py_XDECREF(partial);
        Py_XDECREF(ac);
        Py_XDECREF(pargs);
        Py_XDECREF(kw);
        if (!r->value || !b->autocast_save || !b->autocast_restore) {
            ok = 0;
            cap_py_failed(I, "graph break");
            break;
        }
        stack_ret[i] = r;
    }
    for (int k = 0; ok && k < 2; k++)
        if (ac_dt[k] != I->autocast_dt[k] || (ac_dt[k] != CAP_AUTOCAST_ENTRY && ac_fast[k] != I->autocast_fast[k])) {
            ok = 0;
            cap_unsupported(I, "graph break with the autocast state changed outside a with block");
        }
    for (int i = 0; ok && i < F->sp; i++)
        if (!stack_ret[i]) ok = (stack_ret[i] = live_value(I, p, stack[i])) != NULL;
    for (int i = 0; ok && i < nlive; i++) {
        WkRet *r = live_value(I, p, slots.data[i]);
        ok = r != NULL;
        if (ok) wk_vec_push(&args, r);
    }
    int ndeep = F->sp - b->nin;
    if (ok && guard && guard->depth > ndeep) {
        ok = 0;
        cap_unsupported(I, "graph break: the handler's stack is deeper than the break's");
    }
    /* resume layout: the deep stack, then the instruction's results */
    layout = wk_xcalloc((size_t)ndeep + (size_t)b->nout + 2, 1);
    for (int i = 0; ok && i < ndeep; i++) {
        layout[i] = stack[i]->kind == SV_NULL ? 'N' : 'V';
        if (layout[i] == 'V') wk_vec_push(&args, stack_ret[i]);
    }
    int nl = ndeep;
    if (null_first) layout[nl++] = 'N';
    for (int i = 0; i < b->nout; i++) layout[nl + i] = 'V';
    b->in = wk_xcalloc((size_t)b->nin + 1, sizeof(WkRet *));
    for (int i = 0; ok && i < b->nin; i++) b->in[i] = stack_ret[ndeep + i];
    Sv *callable = NULL;
    if (ok && (b->opcode == CALL || b->opcode == CALL_FUNCTION_EX)) { /* both: [NULL or self, callable, ...] */
        Sv *c0 = stack[ndeep], *c1 = stack[ndeep + 1];
        callable = c0->kind == SV_NULL ? c1 : c0;
        if (callable->kind == SV_METHOD && callable->self) callable = NULL;
    }
    free(stack);
    free(stack_ret);
    if (!ok) goto done;
    if (b->split) { /* the loop's body compiled one iteration at a time, where it can be */
        const char *why;
        int found = cap_loop_find(orig, raw, n, pc, &loop, &why) == 0;
        /* the driver passes the stack below the loop to the body function as
         * arguments: no NULL there (3.12 inlines comprehensions into calls'
         * argument expressions) */
        for (int i = 0; found && i < ndeep; i++)
            if (layout[i] == 'N') found = 0;
        if (found && !(b->loop_body = cap_loop_body_function(orig, raw, n, &loop, F->globals, options))) {
            cap_py_failed(I, "making the loop's body function");
            goto done;
        }
    }
    if (b->split && !b->loop_body && p->outputs.len == 0) { /* only a Python call deeper: not worth it */
        cap_unsupported(I, "no tensor work before the loop to compile");
        goto done;
    }
    b->nargs = args.len;
    b->nfree = code->co_nfreevars;
    if (code == orig && orig->co_ncellvars) {
        /* the frame's own cells, made at the break: closures made before it
         * and the resume function share each */
        b->cells = wk_xcalloc((size_t)orig->co_nlocalsplus + 1, sizeof(WkRet *));
        for (int i = 0; i < orig->co_nlocalsplus && i < F->nlocals; i++) {
            if (!is_cell_slot(orig, i)) continue;
            Sv *c = F->locals[i];
            if (!c || c->kind != SV_CELL) {
                cap_unsupported(I, "graph break before the frame's cells are made");
                goto done;
            }
            if (!(b->cells[b->ncells++] = cap_reconstruct(I, p, c, 0))) goto done;
        }
    }

    b->nlocals = nlive;
    b->args = args.data;
    args.data = NULL;
    PyObject *ln = PyList_AsTuple(local_names);
    if (!ln) {
        cap_py_failed(I, "graph break");
        goto done;
    }
    Py_SETREF(local_names, ln);
    if (b->kind != WK_BREAK_RAISE) {
        char *lay2 = layout; /* a branch pops its condition: the resume sees the deep stack only */
        for (int k = 0; k < 2; k++) {
            if (targets[k] < 0) continue;
            b->resume[k] = resume_function(orig, raw, n, &ex, targets[k], lay2, local_names, F->globals, options,
                                           k == 0 && b->loop_body ? &loop : NULL, k == 0 ? b->loop_body : NULL);
            if (!b->resume[k]) {
                cap_py_failed(I, "making the resume function");
                goto done;
            }
        }
    }
    if (guard) {
        /* the handler's resume: [stack below the try, lasti?, exception] */
        char *hl = wk_xcalloc((size_t)guard->depth + 3, 1);
        memcpy(hl, layout, (size_t)guard->depth);
        for (int i = 0; i < guard->depth; i++) b->handler_nstack += hl[i] == 'V';
        strcat(hl, guard->lasti ? "VV" : "V");
        b->handler = resume_function(orig, raw, n, &ex, guard->handler, hl, local_names, F->globals, options, NULL,
                                     NULL);
        free(hl);
        if (b->handler && guard->lasti) b->handler_lasti = keep(I, resume_instr_offset_Ref(b->handler, pc));
        if (!b->handler || (guard->lasti && !b->handler_lasti)) {
            cap_py_failed(I, "making the handler's resume function");
            goto done;
        }
    }
    if (callable) b->callee = mark_callee(callable, options);
    *out = b;
    b = NULL;
    rc = 0;
done:
    if (rc < 0) p->cells_ok = 0;
    if (b) {
        free(b->args);
        free(b->in);
        free(b->cells);
        free(b->cell_table);
        free(b);
    }
    wk_vec_free(&args);
    cap_loop_free(&loop);
    free(layout);
    free(raw);
    free(live);
    wk_vec_free(&ex);
    wk_vec_free(&slots);
    wk_vec_free(&seen);
    Py_XDECREF(local_names);
    Py_XDECREF(cur_names);
    return rc;
}
