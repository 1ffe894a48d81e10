/* bytecode.c — reading and writing CPython bytecode: decoding a code object
 * into base instructions with lines, and the assembler (WkAsm) that builds
 * the code objects capture runs in place of a frame. Needs no torch.
 *
 * Opcode numbers come from <opcode.h> of the interpreter we are built for.
 * Tables that only exist as private C data (names, inline cache counts, which
 * opcodes jump) are read once from the running interpreter's `opcode` module,
 * which is the source dis uses, so decode agrees with dis by construction.
 * Version differences in emitted code live in the wk_asm_* helpers below.
 */
#include "capture.h"
#include "frame.h"

#include <opcode.h>
#include <stdlib.h>
#include <string.h>

#if PY_VERSION_HEX >= 0x030D0000
#define BC_PY313 1
#else
#define BC_PY313 0
#endif

/* ---- opcode tables ------------------------------------------------------ */

#define BC_MAXOP 512
static int tables_ready;
static char *op_names[BC_MAXOP];
static unsigned char op_caches[256];
static unsigned char op_jrel[BC_MAXOP];
static unsigned char op_backward[BC_MAXOP];
static unsigned char op_noreturn[256]; /* flow never falls through */

static int load_tables(void) {
    if (tables_ready) return 0;
    int rc = -1;
    PyObject *mod = PyImport_ImportModule("opcode");
    PyObject *names = NULL, *caches = NULL, *jrel = NULL, *opmap = NULL;
    if (!mod) goto done;
    if (!(names = PyObject_GetAttrString(mod, "opname"))) goto done;
    if (!(caches = PyObject_GetAttrString(mod, "_inline_cache_entries"))) goto done;
    if (!(jrel = PyObject_GetAttrString(mod, "hasjrel"))) goto done;
    if (!(opmap = PyObject_GetAttrString(mod, "opmap"))) goto done;
    Py_ssize_t nn = PySequence_Size(names);
    if (nn < 0) goto done;
    for (Py_ssize_t i = 0; i < nn && i < BC_MAXOP; i++) {
        PyObject *s = PySequence_GetItem(names, i);
        if (!s) goto done;
        const char *c = PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : NULL;
        if (c && strncmp(c, "<", 1) != 0) {
            free(op_names[i]);
            op_names[i] = wk_xstrdup(c);
            op_backward[i] = strstr(c, "JUMP_BACKWARD") != NULL;
        }
        Py_DECREF(s);
        if (!c) PyErr_Clear();
    }
    if (PyDict_Check(caches)) { /* 3.13: {name: count} */
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(caches, &pos, &k, &v)) {
            PyObject *num = PyDict_GetItemWithError(opmap, k);
            if (!num) {
                if (PyErr_Occurred()) goto done;
                continue;
            }
            long op = PyLong_AsLong(num), c = PyLong_AsLong(v);
            if (PyErr_Occurred()) goto done;
            if (op >= 0 && op < 256) op_caches[op] = (unsigned char)c;
        }
    } else { /* 3.11/3.12: list indexed by opcode */
        Py_ssize_t nc = PySequence_Size(caches);
        if (nc < 0) goto done;
        for (Py_ssize_t i = 0; i < nc && i < 256; i++) {
            PyObject *v = PySequence_GetItem(caches, i);
            if (!v) goto done;
            long c = PyLong_AsLong(v);
            Py_DECREF(v);
            if (c == -1 && PyErr_Occurred()) goto done;
            op_caches[i] = (unsigned char)c;
        }
    }
    Py_ssize_t nj = PySequence_Size(jrel);
    if (nj < 0) goto done;
    for (Py_ssize_t i = 0; i < nj; i++) {
        PyObject *v = PySequence_GetItem(jrel, i);
        if (!v) goto done;
        long op = PyLong_AsLong(v);
        Py_DECREF(v);
        if (op == -1 && PyErr_Occurred()) goto done;
        if (op >= 0 && op < BC_MAXOP) op_jrel[op] = 1;
    }
    static const char *const stops[] = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE",
                                        "JUMP_FORWARD", "JUMP_BACKWARD",
                                        "JUMP_BACKWARD_NO_INTERRUPT"};
    for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++) {
        PyObject *num = PyDict_GetItemString(opmap, stops[i]);
        if (num) {
            long op = PyLong_AsLong(num);
            if (op >= 0 && op < 256) op_noreturn[op] = 1;
        }
    }
    if (PyErr_Occurred()) goto done;
    /* the C opcode numbers we emit must be the interpreter's */
    PyObject *num = PyDict_GetItemString(opmap, "EXTENDED_ARG");
    if (!num || PyLong_AsLong(num) != EXTENDED_ARG) {
        PyErr_SetString(PyExc_ImportError, "wick._C was built for another Python version (opcode mismatch)");
        goto done;
    }
    tables_ready = 1;
    rc = 0;
done:
    Py_XDECREF(mod);
    Py_XDECREF(names);
    Py_XDECREF(caches);
    Py_XDECREF(jrel);
    Py_XDECREF(opmap);
    return rc;
}

const char *wk_bc_opname(int opcode) {
    static char unknown[BC_MAXOP][8];
    if (opcode < 0 || opcode >= BC_MAXOP) return "<?>";
    if (op_names[opcode]) return op_names[opcode];
    if (!unknown[opcode][0]) snprintf(unknown[opcode], sizeof(unknown[opcode]), "<%d>", opcode);
    return unknown[opcode];
}

/* ---- decoding ----------------------------------------------------------- */

static unsigned read_varint(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos) {
    if (*pos >= n) return 0;
    unsigned b = p[(*pos)++], val = b & 63, shift = 0;
    while ((b & 64) && *pos < n) {
        b = p[(*pos)++];
        shift += 6;
        val |= (b & 63) << shift;
    }
    return val;
}

static int read_svarint(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos) {
    unsigned v = read_varint(p, n, pos);
    return (v & 1) ? -(int)(v >> 1) : (int)(v >> 1);
}

/* Exception-table varints: 6-bit chunks, most significant first, 0x40 on
 * all but the last (the start bit 0x80 marks an entry's first). -1 when
 * the table ends inside one. */
static int read_exc_varint(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, int *out) {
    if (*pos >= n) return -1;
    unsigned b = p[(*pos)++], v = b & 63;
    while (b & 64) {
        if (*pos >= n) return -1;
        b = p[(*pos)++];
        v = (v << 6) | (b & 63);
    }
    *out = (int)v;
    return 0;
}

/* The first instruction starting at code unit `unit` (or after it, when at_or_after). */
static int index_of_unit(const WkInstr *raw, int n, int unit, int at_or_after) {
    for (int k = 0; k < n; k++)
        if (raw[k].start == unit || (at_or_after && raw[k].start > unit)) return k;
    return at_or_after ? n : -1;
}

int wk_bc_exc_ranges(PyCodeObject *co, const WkInstr *raw, int n, WkExcRange **out) {
    *out = NULL;
    PyObject *t = co->co_exceptiontable;
    if (!t || !PyBytes_Check(t)) return 0;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(t);
    Py_ssize_t len = PyBytes_GET_SIZE(t), pos = 0;
    WkVec(WkExcRange) ranges = {0};
    while (pos < len) {
        int start, length, target, dl;
        if (read_exc_varint(p, len, &pos, &start) < 0 || read_exc_varint(p, len, &pos, &length) < 0 ||
            read_exc_varint(p, len, &pos, &target) < 0 || read_exc_varint(p, len, &pos, &dl) < 0)
            goto error;
        WkExcRange r = {index_of_unit(raw, n, start, 0), index_of_unit(raw, n, start + length, 1),
                        index_of_unit(raw, n, target, 0), dl >> 1, dl & 1};
        if (r.start < 0 || r.handler < 0) goto error;
        wk_vec_push(&ranges, r);
    }
    *out = ranges.data;
    return ranges.len;
error:
    wk_vec_free(&ranges);
    return -1;
}

/* Line of every code unit from the PEP 626/657 location table; -1 = none. */
static int *unit_lines(PyCodeObject *co, int nunits) {
    int *lines = wk_xmalloc(sizeof(int) * (size_t)(nunits > 0 ? nunits : 1));
    for (int i = 0; i < nunits; i++) lines[i] = -1;
    PyObject *lt = co->co_linetable;
    if (!lt || !PyBytes_Check(lt)) return lines;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(lt);
    Py_ssize_t n = PyBytes_GET_SIZE(lt), pos = 0;
    int line = co->co_firstlineno, unit = 0;
    while (pos < n && unit < nunits) {
        unsigned b = p[pos++];
        int code = (b >> 3) & 15, len = (b & 7) + 1, l = line;
        switch (code) {
        case 15: l = -1; break;
        case 14:
            line += read_svarint(p, n, &pos);
            read_varint(p, n, &pos);
            read_varint(p, n, &pos);
            read_varint(p, n, &pos);
            l = line;
            break;
        case 13: line += read_svarint(p, n, &pos); l = line; break;
        case 10: case 11: case 12: line += code - 10; pos += 2; l = line; break;
        default: pos += 1; l = line; break;
        }
        for (int k = 0; k < len && unit < nunits; k++) lines[unit++] = l;
    }
    return lines;
}

WkInstr *wk_bc_decode(PyCodeObject *co, int *n) {
    *n = 0;
    if (load_tables() < 0) return NULL;
    PyObject *bytes = PyCode_GetCode(co);
    if (!bytes) return NULL;
    if (!PyBytes_Check(bytes)) {
        Py_DECREF(bytes);
        PyErr_SetString(PyExc_TypeError, "co_code is not bytes");
        return NULL;
    }
    const unsigned char *code = (const unsigned char *)PyBytes_AS_STRING(bytes);
    int nunits = (int)(PyBytes_GET_SIZE(bytes) / 2);
    int *lines = unit_lines(co, nunits);
    WkInstr *out = wk_xmalloc(sizeof(WkInstr) * (size_t)(nunits > 0 ? nunits : 1));
    int k = 0, start = -1;
    unsigned ext = 0;
    for (int i = 0; i < nunits;) {
        int op = code[2 * i], arg = code[2 * i + 1];
        if (start < 0) start = i;
        if (op == EXTENDED_ARG) {
            ext = (ext | (unsigned)arg) << 8;
            i++;
            continue;
        }
        out[k].offset = i;
        out[k].start = start;
        out[k].opcode = op;
        out[k].oparg = (int)(ext | (unsigned)arg);
        out[k].line = lines[i];
        k++;
        ext = 0;
        start = -1;
        i += 1 + op_caches[op];
    }
    free(lines);
    Py_DECREF(bytes);
    *n = k;
    return out;
}

int wk_bc_ncaches(int opcode) { return opcode >= 0 && opcode < 256 ? op_caches[opcode] : 0; }

int wk_bc_jump_target(const WkInstr *ins, int n, int i) {
    if (load_tables() < 0) {
        PyErr_Clear();
        return -2;
    }
    int op = ins[i].opcode;
    if (op < 0 || op >= BC_MAXOP || !op_jrel[op]) return -1;
    int next_start = i + 1 < n ? ins[i + 1].start : ins[i].offset + 1 + wk_bc_ncaches(op);
    int t = op_backward[op] ? next_start - ins[i].oparg : next_start + ins[i].oparg;
    for (int k = 0; k < n; k++)
        if (ins[k].start == t) return k;
    return -2;
}

int wk_bc_opcode(const char *name) {
    if (load_tables() < 0) {
        PyErr_Clear();
        return -1;
    }
    for (int i = 0; i < BC_MAXOP; i++)
        if (op_names[i] && strcmp(op_names[i], name) == 0) return i;
    return -1;
}

int wk_bc_falls_through(int opcode) { return !(opcode >= 0 && opcode < 256 && op_noreturn[opcode]); }

int wk_bc_find(const WkInstr *instrs, int n, int offset) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (instrs[mid].offset == offset) return mid;
        if (instrs[mid].offset < offset) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* ---- assembler ---------------------------------------------------------- */

typedef struct {
    int op, arg, line;
    int label; /* jump target label, -1 if none */
    int deref; /* arg is a free-variable index, made a localsplus index by finish */
    int endline, col, endcol; /* source columns (tracebacks' carets); col -1: the line only */
} AsmIns;

/* A protected region: instructions bound between labels start and end
 * unwind to label handler (wk_asm_try). */
typedef struct {
    int start, end, handler; /* labels */
    int depth, lasti;
} AsmTry;

struct WkAsm {
    PyCodeObject *like;  /* strong */
    PyObject *consts;    /* list */
    PyObject *names;     /* list of str */
    PyObject *varnames;  /* list of str; the first nargs are like's arguments */
    int nargs;
    int line;
    int endline, col, endcol; /* wk_asm_set_position; col -1 when unset */
    WkVec(AsmIns) ins;
    WkVec(int) labels;       /* label -> instruction index it is bound before, -1 unbound */
    WkVec(int) pending_null; /* 3.13: PUSH_NULLs still to be moved under their callable */
    WkVec(AsmTry) tries;     /* in the order given: a later region nested in an earlier wins */
    PyObject *sig_name;      /* wk_asm_set_signature: the new co_qualname (str), or NULL */
    PyObject *freevars;      /* wk_asm_set_freevars: co_freevars (tuple of str), or NULL */
    PyObject *err_type, *err_value, *err_tb; /* first failure, re-raised by finish */
};

static void asm_fail(WkAsm *a) {
    if (a->err_type || !PyErr_Occurred()) {
        PyErr_Clear();
        return;
    }
    PyErr_Fetch(&a->err_type, &a->err_value, &a->err_tb);
}

WkAsm *wk_asm_new(PyCodeObject *like) {
    if (load_tables() < 0) return NULL;
    WkAsm *a = wk_xcalloc(1, sizeof(WkAsm));
    a->like = (PyCodeObject *)Py_NewRef(like);
    a->line = like->co_firstlineno;
    a->col = -1;
    a->nargs = wk_frame_nargs(like);
    a->consts = PyList_New(0);
    a->names = PyList_New(0);
    a->varnames = PyList_New(0);
    PyObject *vn = PyCode_GetVarnames(like);
    if (!a->consts || !a->names || !a->varnames || !vn) goto fail;
    for (int i = 0; i < a->nargs; i++) {
        if (i >= PyTuple_GET_SIZE(vn)) {
            PyErr_SetString(PyExc_SystemError, "wick: code has fewer varnames than arguments");
            goto fail;
        }
        if (PyList_Append(a->varnames, PyTuple_GET_ITEM(vn, i)) < 0) goto fail;
    }
    Py_DECREF(vn);
    return a;
fail:
    Py_XDECREF(vn);
    wk_asm_free(a);
    return NULL;
}

void wk_asm_free(WkAsm *a) {
    if (!a) return;
    Py_XDECREF(a->like);
    Py_XDECREF(a->consts);
    Py_XDECREF(a->names);
    Py_XDECREF(a->varnames);
    Py_XDECREF(a->sig_name);
    Py_XDECREF(a->freevars);
    Py_XDECREF(a->err_type);
    Py_XDECREF(a->err_value);
    Py_XDECREF(a->err_tb);
    wk_vec_free(&a->ins);
    wk_vec_free(&a->labels);
    wk_vec_free(&a->pending_null);
    wk_vec_free(&a->tries);
    free(a);
}

int wk_asm_const(WkAsm *a, PyObject *value) {
    Py_ssize_t n = PyList_GET_SIZE(a->consts);
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyList_GET_ITEM(a->consts, i) == value) return (int)i;
    if (PyList_Append(a->consts, value) < 0) {
        asm_fail(a);
        return 0;
    }
    return (int)n;
}

static int str_index(WkAsm *a, PyObject *list, const char *name) {
    Py_ssize_t n = PyList_GET_SIZE(list);
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *s = PyUnicode_AsUTF8(PyList_GET_ITEM(list, i));
        if (!s) {
            asm_fail(a);
            return 0;
        }
        if (strcmp(s, name) == 0) return (int)i;
    }
    PyObject *s = PyUnicode_InternFromString(name);
    if (!s || PyList_Append(list, s) < 0) {
        Py_XDECREF(s);
        asm_fail(a);
        return 0;
    }
    Py_DECREF(s);
    return (int)n;
}

int wk_asm_name(WkAsm *a, const char *name) { return str_index(a, a->names, name); }
int wk_asm_local(WkAsm *a, const char *name) { return str_index(a, a->varnames, name); }
int wk_asm_nlocals(WkAsm *a) { return (int)PyList_GET_SIZE(a->varnames); }

void wk_asm_set_signature(WkAsm *a, PyObject *argnames, PyObject *name) {
    PyObject *vn = PySequence_List(argnames);
    if (!vn) {
        asm_fail(a);
        return;
    }
    Py_SETREF(a->varnames, vn);
    a->nargs = (int)PyList_GET_SIZE(vn);
    Py_XSETREF(a->sig_name, Py_XNewRef(name));
}
void wk_asm_set_line(WkAsm *a, int line) {
    a->line = line;
    a->col = -1;
}

void wk_asm_set_position(WkAsm *a, int line, int endline, int col, int endcol) {
    a->line = line;
    a->endline = endline;
    a->col = line >= 0 && endline >= line && col >= 0 && endcol >= 0 ? col : -1;
    a->endcol = endcol;
}

void wk_asm_op(WkAsm *a, int opcode, int oparg) {
    AsmIns i = {opcode, oparg, a->line, -1, 0, a->endline, a->col, a->endcol};
    wk_vec_push(&a->ins, i);
}

int wk_asm_new_label(WkAsm *a) {
    wk_vec_push(&a->labels, -1);
    return a->labels.len - 1;
}

void wk_asm_bind_label(WkAsm *a, int label) {
    if (label >= 0 && label < a->labels.len) a->labels.data[label] = a->ins.len;
}

void wk_asm_jump(WkAsm *a, int opcode, int label) {
    AsmIns i = {opcode, 0, a->line, label, 0, a->endline, a->col, a->endcol};
    wk_vec_push(&a->ins, i);
}

void wk_asm_resume(WkAsm *a) { wk_asm_op(a, RESUME, 0); }

void wk_asm_set_freevars(WkAsm *a, PyObject *names) {
    Py_XSETREF(a->freevars, Py_XNewRef(names));
}

void wk_asm_deref(WkAsm *a, int opcode, int free_index) {
    AsmIns i = {opcode, free_index, a->line, -1, 1, a->endline, a->col, a->endcol};
    wk_vec_push(&a->ins, i);
}

void wk_asm_copy_free_vars(WkAsm *a) {
    int n = a->freevars ? (int)PyTuple_GET_SIZE(a->freevars) : 0;
    if (n) wk_asm_op(a, COPY_FREE_VARS, n);
}

void wk_asm_make_closure(WkAsm *a, PyObject *code) {
    int n = a->freevars ? (int)PyTuple_GET_SIZE(a->freevars) : 0;
    for (int i = 0; i < n; i++)
#if PY_VERSION_HEX >= 0x030D0000 /* LOAD_CLOSURE is a pseudo-op: the cell is the slot's value */
        wk_asm_deref(a, LOAD_FAST, i);
#else
        wk_asm_deref(a, LOAD_CLOSURE, i);
#endif
    wk_asm_build_tuple(a, n);
    wk_asm_load_const(a, code);
#if PY_VERSION_HEX >= 0x030D0000
    wk_asm_op(a, MAKE_FUNCTION, 0);
    wk_asm_op(a, SET_FUNCTION_ATTRIBUTE, 8);
#else
    wk_asm_op(a, MAKE_FUNCTION, 8); /* the closure tuple below the code */
#endif
}

void wk_asm_pop_jump_if(WkAsm *a, int if_true, int label) {
#if PY_VERSION_HEX >= 0x030C0000
    wk_asm_jump(a, if_true ? POP_JUMP_IF_TRUE : POP_JUMP_IF_FALSE, label);
#else
    wk_asm_jump(a, if_true ? POP_JUMP_FORWARD_IF_TRUE : POP_JUMP_FORWARD_IF_FALSE, label);
#endif
}

void wk_asm_push_null(WkAsm *a) {
#if BC_PY313
    /* 3.13 wants the NULL above the callable; wk_asm_call moves it there */
    wk_vec_push(&a->pending_null, a->ins.len);
#endif
    wk_asm_op(a, PUSH_NULL, 0);
}

void wk_asm_load_const(WkAsm *a, PyObject *value) { wk_asm_op(a, LOAD_CONST, wk_asm_const(a, value)); }

void wk_asm_load_fast(WkAsm *a, int local) {
#if PY_VERSION_HEX >= 0x030C0000
    wk_asm_op(a, LOAD_FAST_CHECK, local); /* 3.12 LOAD_FAST does not check for NULL */
#else
    wk_asm_op(a, LOAD_FAST, local);       /* 3.11 LOAD_FAST raises UnboundLocalError */
#endif
}

void wk_asm_store_fast(WkAsm *a, int local) { wk_asm_op(a, STORE_FAST, local); }

void wk_asm_load_global(WkAsm *a, const char *name, int push_null) {
    wk_asm_op(a, LOAD_GLOBAL, (wk_asm_name(a, name) << 1) | !!push_null);
}

void wk_asm_load_attr(WkAsm *a, const char *name) {
#if PY_VERSION_HEX >= 0x030C0000
    wk_asm_op(a, LOAD_ATTR, wk_asm_name(a, name) << 1);
#else
    wk_asm_op(a, LOAD_ATTR, wk_asm_name(a, name));
#endif
}

void wk_asm_compare_op(WkAsm *a, int cmp) {
    /* masks: 1 unordered, 2 less, 4 greater, 8 equal, for < <= == != > >= */
    static const int mask[6] = {2, 10, 8, 7, 4, 12};
    if (cmp < 0 || cmp > 5) cmp = 2;
#if BC_PY313
    wk_asm_op(a, COMPARE_OP, (cmp << 5) | mask[cmp]);
#elif PY_VERSION_HEX >= 0x030C0000
    wk_asm_op(a, COMPARE_OP, (cmp << 4) | mask[cmp]);
#else
    (void)mask;
    wk_asm_op(a, COMPARE_OP, cmp);
#endif
}

void wk_asm_load_method(WkAsm *a, const char *name) {
#if PY_VERSION_HEX >= 0x030C0000
    wk_asm_op(a, LOAD_ATTR, (wk_asm_name(a, name) << 1) | 1);
#else
    wk_asm_op(a, LOAD_METHOD, wk_asm_name(a, name));
#endif
}

#if BC_PY313
/* 3.13 CALL expects [callable, NULL, args]; move the matching PUSH_NULL from
 * below the callable to just after the instructions that pushed it. */
/* Only the innermost pending NULL can belong to this call, and it does when
 * the stack above it is exactly [callable, args...]; a call whose callable
 * came with its own NULL (wk_asm_load_method, load_global with push_null)
 * leaves at least two more values above an outer pending NULL. */
static void move_pending_null(WkAsm *a, int nargs) {
    if (a->pending_null.len == 0) return;
    int j = a->pending_null.data[a->pending_null.len - 1];
    if (j < 0 || j >= a->ins.len || a->ins.data[j].op != PUSH_NULL) {
        a->pending_null.len--;
        return;
    }
    int depth = 0, last = -1;
    for (int k = j + 1; k < a->ins.len; k++) {
        depth += PyCompile_OpcodeStackEffectWithJump(a->ins.data[k].op, a->ins.data[k].arg, 0);
        if (depth == 1) last = k;
    }
    if (last < 0 || depth != 1 + nargs) return;
    a->pending_null.len--;
    AsmIns null_ins = a->ins.data[j];
    memmove(&a->ins.data[j], &a->ins.data[j + 1], sizeof(AsmIns) * (size_t)(last - j));
    a->ins.data[last] = null_ins;
    for (int l = 0; l < a->labels.len; l++)
        if (a->labels.data[l] > j && a->labels.data[l] <= last) a->labels.data[l]--;
}
#endif

void wk_asm_call(WkAsm *a, int nargs) {
#if BC_PY313
    move_pending_null(a, nargs);
    wk_asm_op(a, CALL, nargs);
#elif PY_VERSION_HEX >= 0x030C0000
    wk_asm_op(a, CALL, nargs);
#else
    if (nargs > 255) { /* PRECALL+CALL must not carry EXTENDED_ARG */
        wk_asm_op(a, BUILD_TUPLE, nargs);
        wk_asm_op(a, CALL_FUNCTION_EX, 0);
        return;
    }
    wk_asm_op(a, PRECALL, nargs);
    wk_asm_op(a, CALL, nargs);
#endif
}

void wk_asm_call_kw(WkAsm *a, int nargs, PyObject *kwnames) {
    if (!kwnames || !PyTuple_Check(kwnames) || PyTuple_GET_SIZE(kwnames) > nargs) {
        if (!a->err_type) {
            PyErr_SetString(PyExc_SystemError, "wick assembler: call_kw needs a tuple of at most nargs names");
            asm_fail(a);
        }
        return;
    }
    if (PyTuple_GET_SIZE(kwnames) == 0) {
        wk_asm_call(a, nargs);
        return;
    }
#if BC_PY313
    move_pending_null(a, nargs);
    wk_asm_load_const(a, kwnames);
    wk_asm_op(a, CALL_KW, nargs);
#elif PY_VERSION_HEX >= 0x030C0000
    wk_asm_op(a, KW_NAMES, wk_asm_const(a, kwnames)); /* nothing may come between it and CALL */
    wk_asm_op(a, CALL, nargs);
#else
    if (nargs > 255) {
        if (!a->err_type) {
            PyErr_SetString(PyExc_SystemError, "wick assembler: more than 255 arguments with keywords");
            asm_fail(a);
        }
        return;
    }
    wk_asm_op(a, KW_NAMES, wk_asm_const(a, kwnames));
    wk_asm_op(a, PRECALL, nargs);
    wk_asm_op(a, CALL, nargs);
#endif
}

void wk_asm_build_tuple(WkAsm *a, int n) { wk_asm_op(a, BUILD_TUPLE, n); }
void wk_asm_unpack_sequence(WkAsm *a, int n) { wk_asm_op(a, UNPACK_SEQUENCE, n); }
void wk_asm_return_value(WkAsm *a) { wk_asm_op(a, RETURN_VALUE, 0); }

void wk_asm_try(WkAsm *a, int start_label, int end_label, int handler_label, int depth, int lasti) {
    AsmTry t = {start_label, end_label, handler_label, depth, !!lasti};
    wk_vec_push(&a->tries, t);
}

static int n_prefixes(int arg) {
    unsigned u = (unsigned)arg;
    return u > 0xFFFFFF ? 3 : u > 0xFFFF ? 2 : u > 0xFF ? 1 : 0;
}

static int ins_units(const AsmIns *i) {
    return n_prefixes(i->arg) + 1 + (i->op >= 0 && i->op < 256 ? op_caches[i->op] : 0);
}

/* Resolves label jumps: offsets depend on EXTENDED_ARG counts, which depend
 * on jump distances, so iterate to a fixed point (distances only grow). */
static int resolve_jumps(WkAsm *a, int *start) {
    int n = a->ins.len;
    for (int iter = 0; iter < 8; iter++) {
        int off = 0;
        for (int k = 0; k < n; k++) {
            start[k] = off;
            off += ins_units(&a->ins.data[k]);
        }
        start[n] = off;
        int changed = 0;
        for (int k = 0; k < n; k++) {
            AsmIns *i = &a->ins.data[k];
            if (i->label < 0) continue;
            if (i->label >= a->labels.len || a->labels.data[i->label] < 0) {
                PyErr_SetString(PyExc_SystemError, "wick assembler: jump to an unbound label");
                return -1;
            }
            if (i->op < 0 || i->op >= BC_MAXOP || !op_jrel[i->op]) {
                PyErr_Format(PyExc_SystemError, "wick assembler: %s is not a relative jump",
                             wk_bc_opname(i->op));
                return -1;
            }
            int target = start[a->labels.data[i->label]];
            int after = start[k] + ins_units(i);
            int arg = op_backward[i->op] ? after - target : target - after;
            if (arg < 0) {
                PyErr_Format(PyExc_SystemError, "wick assembler: %s jumps the wrong way",
                             wk_bc_opname(i->op));
                return -1;
            }
            if (arg != i->arg) {
                i->arg = arg;
                changed = 1;
            }
        }
        if (!changed) return 0;
    }
    PyErr_SetString(PyExc_SystemError, "wick assembler: jump offsets do not converge");
    return -1;
}

/* The innermost protected region of each instruction (index into a->tries,
 * -1 for none): the last region given that covers it. Malloc'd, n entries,
 * or NULL with an exception for a region with unbound labels. */
static int *handler_of(WkAsm *a) {
    int n = a->ins.len;
    int *h = wk_xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int k = 0; k <= n; k++) h[k] = -1;
    for (int t = 0; t < a->tries.len; t++) {
        const AsmTry *r = &a->tries.data[t];
        int ok = r->start >= 0 && r->end >= 0 && r->handler >= 0 && r->start < a->labels.len &&
                 r->end < a->labels.len && r->handler < a->labels.len && r->depth >= 0;
        int s = ok ? a->labels.data[r->start] : -1, e = ok ? a->labels.data[r->end] : -1;
        if (!ok || s < 0 || e < 0 || a->labels.data[r->handler] < 0 || e < s ||
            a->labels.data[r->handler] >= n) {
            PyErr_SetString(PyExc_SystemError, "wick assembler: protected region with unbound labels");
            free(h);
            return NULL;
        }
        for (int k = s; k < e && k < n; k++) h[k] = t;
    }
    return h;
}

/* co_stacksize by a worklist over the flow graph; an instruction in a
 * protected region also flows to its handler, with the region's depth plus
 * lasti plus the exception. */
static int stack_depth(WkAsm *a, const int *start, const int *handler, int *out) {
    int n = a->ins.len, rc = -1, maxd = 0;
    int total = start[n];
    int *unit_to_ins = wk_xmalloc(sizeof(int) * (size_t)(total + 1));
    int *depth = wk_xmalloc(sizeof(int) * (size_t)(n + 1));
    int *work = wk_xmalloc(sizeof(int) * (size_t)(n + 1));
    int nwork = 0;
    for (int u = 0; u <= total; u++) unit_to_ins[u] = -1;
    for (int k = 0; k < n; k++) unit_to_ins[start[k]] = k;
    for (int k = 0; k <= n; k++) depth[k] = -1;
#define PUSH_WORK(idx, d)                                                                  \
    do {                                                                                   \
        int idx_ = (idx), d_ = (d);                                                        \
        if (d_ < 0) {                                                                      \
            PyErr_SetString(PyExc_SystemError, "wick assembler: stack underflow");        \
            goto done;                                                                     \
        }                                                                                  \
        if (d_ > maxd) maxd = d_;                                                          \
        if (idx_ < n && depth[idx_] < 0) {                                                 \
            depth[idx_] = d_;                                                              \
            work[nwork++] = idx_;                                                          \
        } else if (idx_ < n && depth[idx_] != d_) {                                        \
            PyErr_Format(PyExc_SystemError,                                                \
                         "wick assembler: inconsistent stack depth at instruction %d", idx_); \
            goto done;                                                                     \
        }                                                                                  \
    } while (0)
    if (n > 0) PUSH_WORK(0, 0);
    while (nwork > 0) {
        int k = work[--nwork], d = depth[k];
        const AsmIns *i = &a->ins.data[k];
        if (i->op < 0 || i->op >= 256) {
            PyErr_Format(PyExc_SystemError, "wick assembler: opcode %d is not real", i->op);
            goto done;
        }
        int eff = PyCompile_OpcodeStackEffectWithJump(i->op, i->arg, 0);
        if (eff == PY_INVALID_STACK_EFFECT) {
            PyErr_Format(PyExc_SystemError, "wick assembler: invalid opcode %s(%d)",
                         wk_bc_opname(i->op), i->arg);
            goto done;
        }
        if (d + eff < 0) {
            PyErr_Format(PyExc_SystemError, "wick assembler: stack underflow at %s",
                         wk_bc_opname(i->op));
            goto done;
        }
        if (handler[k] >= 0) {
            const AsmTry *r = &a->tries.data[handler[k]];
            PUSH_WORK(a->labels.data[r->handler], r->depth + r->lasti + 1);
        }
        if (op_jrel[i->op]) {
            int after = start[k] + ins_units(i);
            int tu = op_backward[i->op] ? after - i->arg : after + i->arg;
            int t = tu >= 0 && tu <= total ? unit_to_ins[tu] : -1;
            if (t < 0 || t >= n) {
                PyErr_Format(PyExc_SystemError, "wick assembler: %s jumps outside the code",
                             wk_bc_opname(i->op));
                goto done;
            }
            PUSH_WORK(t, d + PyCompile_OpcodeStackEffectWithJump(i->op, i->arg, 1));
        }
        if (!op_noreturn[i->op]) {
            if (k + 1 >= n) {
                PyErr_SetString(PyExc_SystemError, "wick assembler: code falls off its end");
                goto done;
            }
            PUSH_WORK(k + 1, d + eff);
        }
    }
#undef PUSH_WORK
    *out = maxd;
    rc = 0;
done:
    free(unit_to_ins);
    free(depth);
    free(work);
    return rc;
}

typedef WkVec(char) ByteVec;

static void put_varint(ByteVec *s, unsigned v) {
    while (v >= 64) {
        wk_vec_push(s, (char)(64 | (v & 63)));
        v >>= 6;
    }
    wk_vec_push(s, (char)v);
}

/* Exception-table varint: 6-bit chunks, most significant first, 0x40 on
 * every chunk but the last; `mark` (0x80) on the first byte of an entry. */
static void put_exc_varint(ByteVec *s, unsigned v, int mark) {
    int shift = 0;
    while ((v >> shift) >= 64) shift += 6;
    for (; shift >= 0; shift -= 6) {
        char b = (char)((v >> shift) & 63);
        if (shift) b |= 64;
        if (mark) b |= (char)0x80, mark = 0;
        wk_vec_push(s, b);
    }
}

/* co_exceptiontable: the innermost region of each instruction, as runs of
 * (start, length, target, depth << 1 | lasti) in code units. */
static void exception_table(WkAsm *a, const int *start, const int *handler, ByteVec *out) {
    int n = a->ins.len;
    for (int k = 0; k < n;) {
        int t = handler[k], j = k;
        while (j < n && handler[j] == t) j++;
        if (t >= 0) {
            const AsmTry *r = &a->tries.data[t];
            put_exc_varint(out, (unsigned)start[k], 1);
            put_exc_varint(out, (unsigned)(start[j] - start[k]), 0);
            put_exc_varint(out, (unsigned)start[a->labels.data[r->handler]], 0);
            put_exc_varint(out, (unsigned)(r->depth << 1 | r->lasti), 0);
        }
        k = j;
    }
}

PyObject *wk_asm_finish_Ref(WkAsm *a) {
    if (a->err_type) {
        PyErr_Restore(a->err_type, a->err_value, a->err_tb);
        a->err_type = a->err_value = a->err_tb = NULL;
        return NULL;
    }
    int n = a->ins.len, stacksize = 0;
    /* free variables follow the locals in localsplus (no cell variables) */
    for (int k = 0; k < n; k++)
        if (a->ins.data[k].deref) {
            a->ins.data[k].arg += (int)PyList_GET_SIZE(a->varnames);
            a->ins.data[k].deref = 0;
        }
    int *start = wk_xmalloc(sizeof(int) * (size_t)(n + 1));
    PyObject *code = NULL, *lt = NULL, *consts = NULL, *names = NULL, *varnames = NULL;
    PyObject *empty = NULL, *replace = NULL, *kw = NULL, *args = NULL, *res = NULL;
    ByteVec lines = {0}, exc = {0};
    PyObject *exctable = NULL;
    int *handler = NULL;
    if (resolve_jumps(a, start) < 0) goto done;
    if (!(handler = handler_of(a))) goto done;
    if (stack_depth(a, start, handler, &stacksize) < 0) goto done;
    exception_table(a, start, handler, &exc);
    exctable = PyBytes_FromStringAndSize(exc.data ? exc.data : "", (Py_ssize_t)exc.len);
    if (!exctable) goto done;

    int total = start[n];
    code = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total * 2);
    if (!code) goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(code);
    memset(p, 0, (size_t)total * 2);
    for (int k = 0; k < n; k++) {
        const AsmIns *i = &a->ins.data[k];
        unsigned char *q = p + 2 * start[k];
        for (int e = n_prefixes(i->arg); e > 0; e--) {
            *q++ = EXTENDED_ARG;
            *q++ = (unsigned char)(((unsigned)i->arg >> (8 * e)) & 0xFF);
        }
        *q++ = (unsigned char)i->op;
        *q++ = (unsigned char)(i->arg & 0xFF);
    }

    /* location table: lines only (codes 13 and 15), every unit covered;
     * an instruction with columns gets a long entry of its own (code 14) */
    int prev_line = a->like->co_firstlineno;
    for (int k = 0; k < n;) {
        int line = a->ins.data[k].line, units = 0;
        if (a->ins.data[k].col >= 0 && line >= 0) {
            const AsmIns *c = &a->ins.data[k];
            for (int left = start[k + 1] - start[k]; left > 0;) {
                int len = left > 8 ? 8 : left;
                wk_vec_push(&lines, (char)(0x80 | (14 << 3) | (len - 1)));
                int delta = line - prev_line;
                put_varint(&lines, delta < 0 ? ((unsigned)(-delta) << 1) | 1 : (unsigned)delta << 1);
                put_varint(&lines, (unsigned)(c->endline - line));
                put_varint(&lines, (unsigned)c->col + 1);
                put_varint(&lines, (unsigned)c->endcol + 1);
                prev_line = line;
                left -= len;
            }
            k++;
            continue;
        }
        while (k < n && a->ins.data[k].line == line && a->ins.data[k].col < 0)
            units += start[k + 1] - start[k], k++;
        while (units > 0) {
            int len = units > 8 ? 8 : units;
            char head = (char)(0x80 | ((line < 0 ? 15 : 13) << 3) | (len - 1));
            wk_vec_push(&lines, head);
            if (line >= 0) {
                int delta = line - prev_line;
                put_varint(&lines, delta < 0 ? ((unsigned)(-delta) << 1) | 1 : (unsigned)delta << 1);
                prev_line = line;
            }
            units -= len;
        }
    }
    lt = PyBytes_FromStringAndSize(lines.data ? lines.data : "", (Py_ssize_t)lines.len);
    consts = PyList_AsTuple(a->consts);
    names = PyList_AsTuple(a->names);
    varnames = PyList_AsTuple(a->varnames);
    empty = PyTuple_New(0);
    args = PyTuple_New(0);
    if (!lt || !consts || !names || !varnames || !empty || !args) goto done;
    int flags = a->like->co_flags &
                ~(CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE);
    if (a->sig_name) flags &= ~(CO_VARARGS | CO_VARKEYWORDS);
    kw = Py_BuildValue("{sOsOsOsOsnsOsOsisOsOsi}", "co_code", code, "co_consts", consts,
                       "co_names", names, "co_varnames", varnames, "co_nlocals",
                       PyTuple_GET_SIZE(varnames), "co_cellvars", empty, "co_freevars", a->freevars ? a->freevars : empty,
                       "co_stacksize", stacksize, "co_linetable", lt, "co_exceptiontable", exctable,
                       "co_flags", flags);
    if (!kw) goto done;
    if (a->sig_name) { /* a new function: plain positional arguments, its own name */
        PyObject *nargs = PyLong_FromLong(a->nargs), *zero = PyLong_FromLong(0);
        int bad = !nargs || !zero || PyDict_SetItemString(kw, "co_argcount", nargs) < 0 ||
                  PyDict_SetItemString(kw, "co_posonlyargcount", zero) < 0 ||
                  PyDict_SetItemString(kw, "co_kwonlyargcount", zero) < 0 ||
                  PyDict_SetItemString(kw, "co_qualname", a->sig_name) < 0;
        Py_XDECREF(nargs);
        Py_XDECREF(zero);
        if (bad) goto done;
    }
    replace = PyObject_GetAttrString((PyObject *)a->like, "replace");
    if (!replace) goto done;
    res = PyObject_Call(replace, args, kw);
done:
    free(start);
    free(handler);
    wk_vec_free(&lines);
    wk_vec_free(&exc);
    Py_XDECREF(exctable);
    Py_XDECREF(code);
    Py_XDECREF(lt);
    Py_XDECREF(consts);
    Py_XDECREF(names);
    Py_XDECREF(varnames);
    Py_XDECREF(empty);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    Py_XDECREF(replace);
    return res;
}

/* ---- test-only entries -------------------------------------------------- */

static int opcode_from(PyObject *o) {
    if (PyLong_Check(o)) return (int)PyLong_AsLong(o);
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
    if (!s) {
        PyErr_SetString(PyExc_TypeError, "opcode must be a name or a number");
        return -1;
    }
    for (int i = 0; i < BC_MAXOP; i++)
        if (op_names[i] && strcmp(op_names[i], s) == 0) return i;
    PyErr_Format(PyExc_ValueError, "unknown opcode %s", s);
    return -1;
}

/* _bc_decode(code) -> [(offset, start, opname, oparg, line)] */
static PyObject *py_bc_decode(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyCode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "expected a code object");
        return NULL;
    }
    int n;
    WkInstr *ins = wk_bc_decode((PyCodeObject *)arg, &n);
    if (!ins) return NULL;
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        PyObject *t = Py_BuildValue("(iisii)", ins[i].offset, ins[i].start, wk_bc_opname(ins[i].opcode),
                                    ins[i].oparg, ins[i].line);
        if (!t) Py_CLEAR(list);
        else PyList_SET_ITEM(list, i, t);
    }
    free(ins);
    return list;
}

/* _asm_demo(like_code, program) -> code. program: list of tuples
 * ("resume",) ("push_null",) ("const", v) ("load", name) ("store", name)
 * ("global", name, push_null) ("attr", name) ("method", name) ("call", n)
 * ("call_kw", n, kwnames) ("tuple", n)
 * ("unpack", n) ("return",) ("line", n) ("op", opcode, arg) ("label", k)
 * ("jump", opcode, k) ("compare", cmp)
 * ("try", start_label, end_label, handler_label, depth, lasti) */
static PyObject *py_asm_demo(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *like, *prog;
    if (!PyArg_ParseTuple(args, "O!O!", &PyCode_Type, &like, &PyList_Type, &prog)) return NULL;
    WkAsm *a = wk_asm_new((PyCodeObject *)like);
    if (!a) return NULL;
    enum { MAXL = 64 };
    int labels[MAXL];
    for (int i = 0; i < MAXL; i++) labels[i] = -1;
    PyObject *res = NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(prog); k++) {
        PyObject *t = PyList_GET_ITEM(prog, k);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(t, 0))) {
            PyErr_SetString(PyExc_TypeError, "program items are tuples (name, ...)");
            goto done;
        }
        const char *what = PyUnicode_AsUTF8(PyTuple_GET_ITEM(t, 0));
        Py_ssize_t nt = PyTuple_GET_SIZE(t);
        PyObject *x = nt > 1 ? PyTuple_GET_ITEM(t, 1) : Py_None;
        PyObject *y = nt > 2 ? PyTuple_GET_ITEM(t, 2) : Py_None;
        const char *xs = PyUnicode_Check(x) ? PyUnicode_AsUTF8(x) : NULL;
        long xi = PyLong_Check(x) ? PyLong_AsLong(x) : -1;
        long yi = PyLong_Check(y) ? PyLong_AsLong(y) : 0;
        if (!what || PyErr_Occurred()) goto done;
        int needs_str = !strcmp(what, "load") || !strcmp(what, "store") || !strcmp(what, "global") ||
                        !strcmp(what, "attr") || !strcmp(what, "method");
        if (!strcmp(what, "try")) {
            long v[5];
            for (int j = 0; j < 5; j++) {
                PyObject *o = nt > 1 + j ? PyTuple_GET_ITEM(t, 1 + j) : NULL;
                v[j] = o && PyLong_Check(o) ? PyLong_AsLong(o) : -1;
            }
            if (v[0] < 0 || v[0] >= MAXL || v[1] < 0 || v[1] >= MAXL || v[2] < 0 || v[2] >= MAXL ||
                v[3] < 0 || v[4] < 0) {
                PyErr_SetString(PyExc_ValueError, "try needs (start, end, handler, depth, lasti)");
                goto done;
            }
            for (int j = 0; j < 3; j++)
                if (labels[v[j]] < 0) labels[v[j]] = wk_asm_new_label(a);
            wk_asm_try(a, labels[v[0]], labels[v[1]], labels[v[2]], (int)v[3], (int)v[4]);
            continue;
        }
        int needs_label = !strcmp(what, "label") || !strcmp(what, "jump");
        if (needs_str && !xs) {
            PyErr_Format(PyExc_TypeError, "%s needs a name", what);
            goto done;
        }
        long li = !strcmp(what, "jump") ? yi : xi;
        if (needs_label && (li < 0 || li >= MAXL)) {
            PyErr_SetString(PyExc_ValueError, "label out of range");
            goto done;
        }
        if (needs_label && labels[li] < 0) labels[li] = wk_asm_new_label(a);
        if (!strcmp(what, "resume")) wk_asm_resume(a);
        else if (!strcmp(what, "push_null")) wk_asm_push_null(a);
        else if (!strcmp(what, "const")) wk_asm_load_const(a, x);
        else if (!strcmp(what, "load")) wk_asm_load_fast(a, wk_asm_local(a, xs));
        else if (!strcmp(what, "store")) wk_asm_store_fast(a, wk_asm_local(a, xs));
        else if (!strcmp(what, "global")) wk_asm_load_global(a, xs, (int)yi);
        else if (!strcmp(what, "attr")) wk_asm_load_attr(a, xs);
        else if (!strcmp(what, "call")) wk_asm_call(a, (int)xi);
        else if (!strcmp(what, "call_kw")) wk_asm_call_kw(a, (int)xi, y);
        else if (!strcmp(what, "method")) wk_asm_load_method(a, xs);
        else if (!strcmp(what, "tuple")) wk_asm_build_tuple(a, (int)xi);
        else if (!strcmp(what, "unpack")) wk_asm_unpack_sequence(a, (int)xi);
        else if (!strcmp(what, "return")) wk_asm_return_value(a);
        else if (!strcmp(what, "line")) wk_asm_set_line(a, (int)xi);
        else if (!strcmp(what, "compare")) wk_asm_compare_op(a, (int)xi);
        else if (!strcmp(what, "label")) wk_asm_bind_label(a, labels[li]);
        else if (!strcmp(what, "op") || !strcmp(what, "jump")) {
            int op = opcode_from(x);
            if (op < 0) goto done;
            if (op >= 256) {
                PyErr_SetString(PyExc_ValueError, "not a real opcode");
                goto done;
            }
            if (!strcmp(what, "op")) wk_asm_op(a, op, (int)yi);
            else wk_asm_jump(a, op, labels[li]);
        } else {
            PyErr_Format(PyExc_ValueError, "unknown program item %s", what);
            goto done;
        }
        if (PyErr_Occurred()) goto done;
    }
    res = wk_asm_finish_Ref(a);
done:
    wk_asm_free(a);
    return res;
}

/* _bc_cache_entries() -> list of 256 inline-cache counts, as the assembler sees them */
static PyObject *py_bc_caches(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    PyObject *list = PyList_New(256);
    for (int i = 0; list && i < 256; i++) PyList_SET_ITEM(list, i, PyLong_FromLong(op_caches[i]));
    return list;
}

static PyMethodDef bc_methods[] = {
    {"_bc_decode", py_bc_decode, METH_O, "Test only: wk_bc_decode(code) as tuples."},
    {"_asm_demo", py_asm_demo, METH_VARARGS, "Test only: assemble a small program like a code object."},
    {"_bc_cache_entries", py_bc_caches, METH_NOARGS, "Test only: the inline cache table."},
    {NULL, NULL, 0, NULL},
};

int wk_bc_init(PyObject *module) {
    if (load_tables() < 0) return -1;
    return PyModule_AddFunctions(module, bc_methods);
}
