/* loops.c — a loop that capture cannot unroll, compiled one iteration at a
 * time. Owns the analysis of a loop in the original bytecode (its body,
 * where control leaves it, which locals go in and come out, the stack below
 * it), the body function's code, and the driver's part of a resume
 * function (breaks.c assembles the rest of it).
 *
 * A failure inside a loop (an unknown trip count, a break in the body, a
 * loop too long to unroll) splits the frame before the loop (breaks.c).
 * The resume function that continues there is the driver: the original
 * code from the loop on, with the body replaced by a call
 *     (k, v...) = body(locals in..., stack...)
 * after which it stores the locals exit k hands back and jumps where exit k
 * goes in the original: back to the loop head (k = 0), or out of the loop
 * (a `break`, a `return` or `raise` in the body, the condition of a while
 * loop false). The driver is plain Python and never captured; the body
 * function is marked for the hook, so it is captured as a frame of its own
 * with its own cache entries (and breaks, and a branch on a tensor
 * condition), reused in every iteration and every call. Its code is the
 * body's instructions of the original (lines and columns kept, so
 * tracebacks show the user's source), after a prologue that pushes the
 * stack the body runs on, with every edge out of the body turned into a
 * `return (k, locals out...)`.
 *
 * The loop is refused (the frame splits as before and the loop runs
 * eagerly) when this would not be exact: a generator or a closure's code, a
 * body entered other than at its start, an exit at another stack depth
 * than the body's statements (inside a with or except block opened in the
 * body), a local the body may leave unbound that is read after it, a local
 * read in the body that may be unbound when the loop starts, or an
 * exception the body raises that would go to a handler other than the one
 * around the whole loop. */
#include <stdint.h>
#include <string.h>

#include "interp.h"

#define LOOP_PREFIX "wick_loop_body_in_"

static PyObject *body_funcs; /* dict: (code, head offset, globals) -> body function */

void cap_loops_reset(void) {
    if (body_funcs) PyDict_Clear(body_funcs);
}

void cap_loop_free(CapLoop *lo) {
    free(lo->in);
    free(lo->in_locals);
    for (int k = 0; k < lo->nexits; k++) free(lo->exit_locals[k]);
    free(lo->exit_locals);
    free(lo->exit_nlocals);
    free(lo->exit_target);
    memset(lo, 0, sizeof *lo);
}

static int refuse(const char **why, const char *reason) {
    *why = reason;
    return -1;
}

/* The exception-table entry covering instruction i, or -1 (entries are disjoint). */
static int entry_of(const WkExcRange *ex, int nex, int i) {
    for (int e = 0; e < nex; e++)
        if (i >= ex[e].start && i < ex[e].end) return e;
    return -1;
}

/* Stack depth before each instruction reachable from 0 (-1: unreachable);
 * NULL when the code is not consistent (the caller refuses the loop). */
static int *stack_depths(const WkInstr *raw, int n, const int *jt, const WkExcRange *ex, int nex) {
    int *depth = wk_xmalloc(sizeof(int) * (size_t)(n + 1)), *work = wk_xmalloc(sizeof(int) * (size_t)(n + 1) * 3);
    int nwork = 0, ok = 1;
    for (int i = 0; i <= n; i++) depth[i] = -1;
#define FLOW(t, d)                                          \
    do {                                                    \
        int t_ = (t), d_ = (d);                             \
        if (t_ < 0 || t_ >= n || d_ < 0) break;             \
        if (depth[t_] < 0) {                                \
            depth[t_] = d_;                                 \
            work[nwork++] = t_;                             \
        } else if (depth[t_] != d_) {                       \
            ok = 0;                                         \
        }                                                   \
    } while (0)
    if (n > 0) FLOW(0, 0);
    while (nwork > 0 && ok) {
        int i = work[--nwork], d = depth[i], op = raw[i].opcode;
        int eff = PyCompile_OpcodeStackEffectWithJump(op, raw[i].oparg, 0);
        if (eff == PY_INVALID_STACK_EFFECT) {
            ok = 0;
            break;
        }
        int e = entry_of(ex, nex, i);
        if (e >= 0) FLOW(ex[e].handler, ex[e].depth + ex[e].lasti + 1);
        if (jt[i] >= 0) FLOW(jt[i], d + PyCompile_OpcodeStackEffectWithJump(op, raw[i].oparg, 1));
        if (wk_bc_falls_through(op)) FLOW(i + 1, d + eff);
    }
#undef FLOW
    free(work);
    if (!ok) {
        free(depth);
        return NULL;
    }
    return depth;
}

static void local_effect(const WkInstr *in, int *store, int *clear) {
    *store = *clear = -1;
    switch (in->opcode) {
    case STORE_FAST: *store = in->oparg; break;
    case DELETE_FAST: *clear = in->oparg; break;
#ifdef LOAD_FAST_AND_CLEAR
    case LOAD_FAST_AND_CLEAR: *clear = in->oparg; break;
#endif
    default: break;
    }
}

/* bound[i * nloc + j]: local j is bound on every path that reaches
 * instruction i from `entry` (where the locals in entry_set are bound),
 * following only instructions in `mask` (NULL: all). Malloc'd. */
static unsigned char *must_bound(const WkInstr *raw, int n, int nloc, const int *jt, const WkExcRange *ex, int nex,
                                 int entry, const unsigned char *entry_set, const unsigned char *mask) {
    size_t w = (size_t)nloc + 1;
    unsigned char *in = wk_xmalloc((size_t)(n + 1) * w), *seen = wk_xcalloc((size_t)n + 1, 1);
    unsigned char *out = wk_xmalloc(w);
    memset(in, 1, (size_t)(n + 1) * w);
    for (int j = 0; j < nloc; j++) in[(size_t)entry * w + (size_t)j] = entry_set[j];
    seen[entry] = 1;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < n; i++) {
            if (!seen[i]) continue;
            unsigned char *row = &in[(size_t)i * w];
            int store, clear;
            local_effect(&raw[i], &store, &clear);
            memcpy(out, row, w);
            if (store >= 0 && store < nloc) out[store] = 1;
            if (clear >= 0 && clear < nloc) out[clear] = 0;
            int e = entry_of(ex, nex, i);
            int succ[3] = {wk_bc_falls_through(raw[i].opcode) && i + 1 < n ? i + 1 : -1, jt[i],
                           e >= 0 ? ex[e].handler : -1};
            for (int s = 0; s < 3; s++) {
                int t = succ[s];
                if (t < 0 || t >= n || (mask && !mask[t]) || t == entry) continue;
                unsigned char *dst = &in[(size_t)t * w];
                for (int j = 0; j < nloc; j++) {
                    /* an exception may leave before the instruction's store */
                    unsigned char v = s == 2 ? (unsigned char)(row[j] & out[j]) : out[j];
                    unsigned char nv = seen[t] ? (unsigned char)(dst[j] & v) : v;
                    if (nv != dst[j]) {
                        dst[j] = nv;
                        changed = 1;
                    }
                }
                if (!seen[t]) {
                    seen[t] = 1;
                    changed = 1;
                }
            }
        }
    }
    free(out);
    free(seen);
    return in;
}

/* The forward form of a relative jump opcode (the body function's exits
 * follow its instructions), or -1. */
static int forward_jump(int op) {
    const char *name = wk_bc_opname(op);
    if (!strstr(name, "JUMP_BACKWARD")) return op;
    char buf[64];
    if (strncmp(name, "JUMP_BACKWARD", 13) == 0) return JUMP_FORWARD; /* _NO_INTERRUPT too */
    /* POP_JUMP_BACKWARD_IF_<X> (3.11) */
    const char *rest = strstr(name, "JUMP_BACKWARD") + 13;
    if (snprintf(buf, sizeof buf, "POP_JUMP_FORWARD%s", rest) >= (int)sizeof buf) return -1;
    return wk_bc_opcode(buf);
}

int cap_loop_find(PyCodeObject *orig, const WkInstr *raw, int n, int at, CapLoop *lo, const char **why) {
    memset(lo, 0, sizeof *lo);
    int rc = -1, nloc = orig->co_nlocals, nex = 0;
    WkExcRange *ex = NULL;
    int *jt = NULL, *depth = NULL, *work = NULL;
    unsigned char *live = NULL, *reach = NULL, *bound0 = NULL, *boundb = NULL, *entry_set = NULL, *written = NULL;
    *why = NULL;
    if (orig->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR))
        return refuse(why, "a loop in a generator");
    if (orig->co_ncellvars || orig->co_nfreevars) return refuse(why, "a loop in a frame with cell or free variables");
    if ((nex = wk_bc_exc_ranges(orig, raw, n, &ex)) < 0) {
        PyErr_Clear();
        return refuse(why, "a loop in code whose exception table is not understood");
    }
    jt = wk_xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        jt[i] = wk_bc_jump_target(raw, n, i);
        if (jt[i] == -2) {
            refuse(why, "a loop with a jump capture cannot follow");
            goto done;
        }
    }
    /* the head: what the back edges jump to; a for loop's FOR_ITER follows its GET_ITER */
    int head = at < n - 1 && raw[at].opcode == GET_ITER && raw[at + 1].opcode == FOR_ITER ? at + 1 : at;
    int back = -1;
    for (int j = head; j < n; j++)
        if (jt[j] == head) back = j;
    if (head >= n || back < 0) {
        refuse(why, "no loop at the split");
        goto done;
    }
    lo->head = head;
    lo->at = at;
    lo->back = back;
    lo->is_for = raw[head].opcode == FOR_ITER;
    lo->start = lo->is_for ? head + 1 : head;
    lo->line = raw[head].line >= 0 ? raw[head].line : orig->co_firstlineno;
    /* `for name in`: the item is the body function's argument `name`, so
     * that capture guards its value only where the body reads it */
    lo->item_local = lo->is_for && lo->start + 1 < n && raw[lo->start].opcode == STORE_FAST ? raw[lo->start].oparg : -1;
    if (!(depth = stack_depths(raw, n, jt, ex, nex)) || depth[head] < 0) {
        refuse(why, "a loop whose stack depths are not consistent");
        goto done;
    }
    lo->base = depth[head];
    lo->nstack = lo->is_for ? lo->base + 1 : lo->base;
    if (depth[lo->start] != lo->nstack) {
        refuse(why, "a loop whose body starts at another stack depth");
        goto done;
    }

    /* the body: instructions reached from its start, not through the head,
     * that reach a back edge again */
    lo->in = wk_xcalloc((size_t)n + 1, 1);
    reach = wk_xcalloc((size_t)n + 1, 1);
    work = wk_xmalloc(sizeof(int) * (size_t)(n + 1) * 3);
    int nwork = 0;
    reach[lo->start] = 1;
    work[nwork++] = lo->start;
    while (nwork > 0) {
        int i = work[--nwork], e = entry_of(ex, nex, i);
        int succ[3] = {wk_bc_falls_through(raw[i].opcode) && i + 1 < n ? i + 1 : -1, jt[i], e >= 0 ? ex[e].handler : -1};
        for (int s = 0; s < 3; s++) {
            int t = succ[s];
            if (t < 0 || t >= n || t == head || reach[t]) continue;
            reach[t] = 1;
            work[nwork++] = t;
        }
    }
    for (int i = 0; i < n; i++) lo->in[i] = (unsigned char)(reach[i] && jt[i] == head);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < n; i++) {
            if (lo->in[i] || !reach[i]) continue;
            int e = entry_of(ex, nex, i);
            int succ[3] = {wk_bc_falls_through(raw[i].opcode) && i + 1 < n ? i + 1 : -1, jt[i],
                           e >= 0 ? ex[e].handler : -1};
            for (int s = 0; s < 3; s++)
                if (succ[s] >= 0 && succ[s] < n && succ[s] != head && lo->in[succ[s]]) {
                    lo->in[i] = 1;
                    changed = 1;
                    break;
                }
        }
    }
    if (!lo->in[lo->start]) {
        refuse(why, "a loop whose body never comes back to its head");
        goto done;
    }
    /* entered only at its start */
    for (int i = 0; i < n; i++) {
        if (lo->in[i] || depth[i] < 0) continue;
        int e = entry_of(ex, nex, i);
        int succ[3] = {wk_bc_falls_through(raw[i].opcode) && i + 1 < n ? i + 1 : -1, jt[i], e >= 0 ? ex[e].handler : -1};
        for (int s = 0; s < 3; s++)
            if (succ[s] >= 0 && succ[s] < n && lo->in[succ[s]] && succ[s] != lo->start) {
                refuse(why, "a loop body entered other than at its start");
                goto done;
            }
    }
    /* exceptions: handled inside the body, or by the one handler around the whole loop */
    lo->exc = entry_of(ex, nex, back);
    if (lo->exc >= 0 && lo->in[ex[lo->exc].handler]) {
        refuse(why, "a loop whose back edge is inside a try block of its body");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        if (!lo->in[i]) continue;
        int e = entry_of(ex, nex, i);
        if (e < 0 ? lo->exc < 0 : (lo->in[ex[e].handler] || (lo->exc >= 0 && ex[e].handler == ex[lo->exc].handler &&
                                                                ex[e].depth == ex[lo->exc].depth &&
                                                                ex[e].lasti == ex[lo->exc].lasti)))
            continue;
        refuse(why, "a loop body raising to a handler that does not enclose the whole loop");
        goto done;
    }
    if (lo->exc >= 0) lo->exc_range = ex[lo->exc];

    /* locals in: those live at the start, bound on every path there */
    live = cap_liveness(raw, n, nloc, ex, nex);
    entry_set = wk_xcalloc((size_t)nloc + 1, 1);
    int nargs = orig->co_argcount + orig->co_kwonlyargcount + !!(orig->co_flags & CO_VARARGS) +
                !!(orig->co_flags & CO_VARKEYWORDS);
    for (int j = 0; j < nargs && j < nloc; j++) entry_set[j] = 1;
    bound0 = must_bound(raw, n, nloc, jt, ex, nex, 0, entry_set, NULL);
    lo->in_locals = wk_xmalloc(sizeof(int) * (size_t)(nloc + 1));
    memset(entry_set, 0, (size_t)nloc + 1);
    for (int j = 0; j < nloc; j++) {
        if (!live[(size_t)lo->start * (size_t)nloc + (size_t)j]) continue;
        if (!bound0[(size_t)lo->start * (size_t)(nloc + 1) + (size_t)j]) {
            refuse(why, "a loop reading a local that may be unbound when it starts");
            goto done;
        }
        lo->in_locals[lo->nin_locals++] = j;
        entry_set[j] = 1;
    }
    written = wk_xcalloc((size_t)nloc + 1, 1);
    for (int i = 0; i < n; i++) {
        int store, clear;
        if (!lo->in[i]) continue;
        local_effect(&raw[i], &store, &clear);
        if (store >= 0 && store < nloc) written[store] = 1;
        if (clear >= 0 && clear < nloc) written[clear] = 1;
    }
    boundb = must_bound(raw, n, nloc, jt, ex, nex, lo->start, entry_set, lo->in);

    /* exits: every edge out of the body; exit 0 goes back to the head */
    lo->exit_target = wk_xmalloc(sizeof(int) * (size_t)(n + 2));
    lo->exit_locals = wk_xcalloc((size_t)n + 2, sizeof(int *));
    lo->exit_nlocals = wk_xcalloc((size_t)n + 2, sizeof(int));
    unsigned char *exit_bound = wk_xmalloc((size_t)(n + 2) * (size_t)(nloc + 1));
    memset(exit_bound, 1, (size_t)(n + 2) * (size_t)(nloc + 1));
    lo->exit_target[lo->nexits++] = head;
    for (int i = 0; i < n; i++) {
        if (!lo->in[i]) continue;
        int succ[2] = {wk_bc_falls_through(raw[i].opcode) && i + 1 < n ? i + 1 : -1, jt[i]};
        int store, clear;
        local_effect(&raw[i], &store, &clear);
        for (int s = 0; s < 2; s++) {
            int t = succ[s];
            if (t < 0 || (lo->in[t] && t != head)) continue;
            if (t >= n || depth[t] != lo->base) {
                free(exit_bound);
                refuse(why, "a loop exit at another stack depth (inside a with or except block of the body)");
                goto done;
            }
            int k = 0;
            while (k < lo->nexits && lo->exit_target[k] != t) k++;
            if (k == lo->nexits) lo->exit_target[lo->nexits++] = t;
            unsigned char *eb = &exit_bound[(size_t)k * (size_t)(nloc + 1)];
            const unsigned char *b = &boundb[(size_t)i * (size_t)(nloc + 1)];
            for (int j = 0; j < nloc; j++) {
                unsigned char v = (unsigned char)(b[j] || j == store) && j != clear;
                eb[j] &= v;
            }
        }
    }
    for (int k = 0; k < lo->nexits; k++) {
        int t = lo->exit_target[k];
        const unsigned char *eb = &exit_bound[(size_t)k * (size_t)(nloc + 1)];
        lo->exit_locals[k] = wk_xmalloc(sizeof(int) * (size_t)(nloc + 1));
        for (int j = 0; j < nloc; j++) {
            if (!live[(size_t)t * (size_t)nloc + (size_t)j]) continue;
            if (eb[j]) lo->exit_locals[k][lo->exit_nlocals[k]++] = j;
            else if (written[j]) {
                free(exit_bound);
                refuse(why, "a loop body that may leave unbound a local read after it");
                goto done;
            }
        }
    }
    free(exit_bound);
    rc = 0;
done:
    if (rc < 0) cap_loop_free(lo);
    free(ex);
    free(jt);
    free(depth);
    free(work);
    free(live);
    free(reach);
    free(bound0);
    free(boundb);
    free(entry_set);
    free(written);
    return rc;
}

/* ---- the body function --------------------------------------------------------- */

static PyObject *body_code_Ref(PyCodeObject *orig, const WkInstr *raw, int n, const CapLoop *lo) {
    PyObject *res = NULL, *argnames = NULL, *varnames = NULL, *name = NULL;
    int *labels = NULL, *local_map = NULL, *stub = NULL, *next_in = NULL;
    WkExcRange *ex = NULL;
    int nex = wk_bc_exc_ranges(orig, raw, n, &ex);
    if (nex < 0) return NULL;
    WkAsm *a = wk_asm_new(orig);
    if (!a) goto done;
    const char *base = PyUnicode_AsUTF8(orig->co_name);
    int line = raw[lo->start].line >= 0 ? raw[lo->start].line : orig->co_firstlineno;
    if (!base || !(name = PyUnicode_FromFormat(LOOP_PREFIX "%s_at_%d", base, line))) goto done;
    varnames = PyCode_GetVarnames(orig);
    int item = lo->item_local >= 0, nin = lo->nin_locals + item, nst = lo->nstack - item;
    argnames = PyTuple_New(nin + nst);
    if (!varnames || !argnames) goto done;
    for (int i = 0; i < lo->nin_locals; i++)
        PyTuple_SET_ITEM(argnames, i, Py_NewRef(PyTuple_GET_ITEM(varnames, lo->in_locals[i])));
    if (item) PyTuple_SET_ITEM(argnames, lo->nin_locals, Py_NewRef(PyTuple_GET_ITEM(varnames, lo->item_local)));
    for (int i = 0; i < nst; i++) {
        PyObject *s = PyUnicode_FromFormat("___stack%d", i);
        if (!s) goto done;
        PyTuple_SET_ITEM(argnames, nin + i, s);
    }
    wk_asm_set_signature(a, argnames, name);
    /* the copy keeps co_names and co_consts indexes: only locals move */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(orig->co_names); i++) {
        const char *s = PyUnicode_AsUTF8(PyTuple_GET_ITEM(orig->co_names, i));
        if (!s || wk_asm_name(a, s) != i) goto layout_changed;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(orig->co_consts); i++)
        if (wk_asm_const(a, PyTuple_GET_ITEM(orig->co_consts, i)) != i) goto layout_changed;
    int nv = (int)PyTuple_GET_SIZE(varnames);
    local_map = wk_xcalloc((size_t)nv + 1, sizeof(int));
    for (int j = 0; j < nv; j++) {
        const char *s = PyUnicode_AsUTF8(PyTuple_GET_ITEM(varnames, j));
        if (!s) goto done;
        local_map[j] = wk_asm_local(a, s);
    }
    labels = wk_xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i <= n; i++) labels[i] = wk_asm_new_label(a);
    stub = wk_xmalloc(sizeof(int) * (size_t)(lo->nexits + 1));
    for (int k = 0; k < lo->nexits; k++) stub[k] = wk_asm_new_label(a);
    /* a region [s, e) of the original covers the body instructions in it:
     * in the body's order, from the first at or after s to the first at or after e */
    next_in = wk_xmalloc(sizeof(int) * (size_t)(n + 1));
    next_in[n] = labels[n];
    for (int i = n - 1; i >= 0; i--) next_in[i] = lo->in[i] ? labels[i] : next_in[i + 1];

    wk_asm_set_line(a, line);
    wk_asm_resume(a);
    for (int i = 0; i < nst; i++) wk_asm_op(a, LOAD_FAST, nin + i);
    wk_asm_jump(a, JUMP_FORWARD, labels[item ? lo->start + 1 : lo->start]);
    for (int i = 0; i < n; i++) {
        if (!lo->in[i]) continue;
        const WkInstr *in = &raw[i];
        wk_asm_bind_label(a, labels[i]);
        int ln, col, eln, ecol;
        if (PyCode_Addr2Location(orig, in->offset * 2, &ln, &col, &eln, &ecol) && ln == in->line)
            wk_asm_set_position(a, ln, eln, col, ecol);
        else
            wk_asm_set_line(a, in->line);
        int t = wk_bc_jump_target(raw, n, i), store, clear;
        local_effect(in, &store, &clear);
        int use = -1;
        switch (in->opcode) {
        case LOAD_FAST:
#ifdef LOAD_FAST_CHECK
        case LOAD_FAST_CHECK:
#endif
#ifdef LOAD_FAST_AND_CLEAR
        case LOAD_FAST_AND_CLEAR:
#endif
        case DELETE_FAST:
            use = in->oparg;
            break;
        default:
            break;
        }
        if (in->opcode == RESUME || in->opcode == COPY_FREE_VARS || in->opcode == MAKE_CELL) {
            wk_asm_op(a, NOP, 0);
        } else if (t >= 0) {
            int k = -1;
            if (t == lo->head || !lo->in[t])
                for (k = 0; k < lo->nexits && lo->exit_target[k] != t; k++) {
                }
            if (k >= 0) {
                int op = forward_jump(in->opcode);
                if (op < 0 || k >= lo->nexits) {
                    PyErr_SetString(PyExc_SystemError, "wick: a loop exit the body function cannot make");
                    goto done;
                }
                wk_asm_jump(a, op, stub[k]);
            } else {
                wk_asm_jump(a, in->opcode, labels[t]);
            }
        } else if (use >= 0 || store >= 0) {
            wk_asm_op(a, in->opcode, local_map[use >= 0 ? use : store]);
        } else {
            wk_asm_op(a, in->opcode, in->oparg);
        }
        if (wk_bc_falls_through(in->opcode) && i + 1 < n && (!lo->in[i + 1] || i + 1 == lo->head)) {
            int k = 0;
            while (k < lo->nexits && lo->exit_target[k] != i + 1) k++;
            if (k == lo->nexits) {
                PyErr_SetString(PyExc_SystemError, "wick: a loop exit the body function cannot make");
                goto done;
            }
            wk_asm_jump(a, JUMP_FORWARD, stub[k]);
        }
    }
    wk_asm_bind_label(a, labels[n]);
    /* exits: drop the stack below the body, return (k, the locals exit k hands back) */
    for (int k = 0; k < lo->nexits; k++) {
        wk_asm_bind_label(a, stub[k]);
        for (int i = 0; i < lo->base; i++) wk_asm_op(a, POP_TOP, 0);
        PyObject *kobj = PyLong_FromLong(k);
        if (!kobj) goto done;
        wk_asm_load_const(a, kobj);
        Py_DECREF(kobj);
        for (int i = 0; i < lo->exit_nlocals[k]; i++) wk_asm_op(a, LOAD_FAST, local_map[lo->exit_locals[k][i]]);
        wk_asm_build_tuple(a, 1 + lo->exit_nlocals[k]);
        wk_asm_return_value(a);
    }
    /* the body's own handlers; an exception for the handler around the loop leaves the function */
    for (int e = 0; e < nex; e++) {
        const WkExcRange *r = &ex[e];
        if (!lo->in[r->handler]) continue;
        wk_asm_try(a, next_in[r->start], next_in[r->end], labels[r->handler], r->depth, r->lasti);
    }
    res = wk_asm_finish_Ref(a);
    goto done;
layout_changed:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "wick: the loop body cannot keep the original's tables");
done:
    if (a) wk_asm_free(a);
    free(ex);
    free(labels);
    free(local_map);
    free(stub);
    free(next_in);
    Py_XDECREF(argnames);
    Py_XDECREF(varnames);
    Py_XDECREF(name);
    return res;
}

PyObject *cap_loop_body_function(PyCodeObject *orig, const WkInstr *raw, int n, const CapLoop *lo, PyObject *globals,
                                 PyObject *options) {
    if (!body_funcs && !(body_funcs = PyDict_New())) return NULL;
    PyObject *key = Py_BuildValue("(Oin)", (PyObject *)orig, raw[lo->head].offset, (Py_ssize_t)(uintptr_t)globals);
    if (!key) return NULL;
    PyObject *fn = PyDict_GetItemWithError(body_funcs, key);
    if (!fn && !PyErr_Occurred()) {
        PyObject *code = body_code_Ref(orig, raw, n, lo);
        PyObject *f = code ? PyFunction_New(code, globals) : NULL;
        if (f && PyDict_SetItem(body_funcs, key, f) == 0) fn = f;
        Py_XDECREF(f);
        Py_XDECREF(code);
    }
    Py_DECREF(key);
    if (!fn) return NULL;
    if (wk_hook_mark_code((PyCodeObject *)PyFunction_GetCode(fn), options ? options : Py_None) < 0) return NULL;
    return fn;
}

/* ---- the driver ---------------------------------------------------------------- */

void cap_loop_emit_call(WkAsm *a, const CapLoop *lo, const int *labels, const int *local_map, PyObject *body,
                        int call_label) {
    int start = wk_asm_new_label(a), end = wk_asm_new_label(a);
    wk_asm_bind_label(a, call_label);
    wk_asm_bind_label(a, start);
    wk_asm_set_line(a, lo->line);
    /* [stack..., (iterator, item)] -> body(locals in..., stack...) */
    wk_asm_push_null(a);
    wk_asm_load_const(a, body);
    for (int i = 0; i < lo->nin_locals; i++) wk_asm_load_fast(a, local_map[lo->in_locals[i]]);
    if (lo->item_local >= 0) { /* the item, then the stack below it */
        wk_asm_op(a, COPY, 3 + lo->nin_locals);
        for (int i = 0; i < lo->base; i++) wk_asm_op(a, COPY, lo->base + 4 + lo->nin_locals);
    } else {
        for (int i = 0; i < lo->nstack; i++) wk_asm_op(a, COPY, lo->nstack + 2 + lo->nin_locals);
    }
    wk_asm_call(a, lo->nstack + lo->nin_locals);
    if (lo->is_for) { /* the item FOR_ITER pushed */
        wk_asm_op(a, SWAP, 2);
        wk_asm_op(a, POP_TOP, 0);
    }
    /* [stack..., (k, v...)]: the exit number, then each exit's locals */
    int *exit_label = wk_xmalloc(sizeof(int) * (size_t)(lo->nexits + 1));
    for (int k = 0; k < lo->nexits; k++) exit_label[k] = wk_asm_new_label(a);
    wk_asm_op(a, COPY, 1);
    PyObject *zero = PyLong_FromLong(0);
    if (zero) {
        wk_asm_load_const(a, zero);
        Py_DECREF(zero);
    }
    wk_asm_op(a, BINARY_SUBSCR, 0);
    for (int k = 0; k + 1 < lo->nexits; k++) {
        PyObject *kobj = PyLong_FromLong(k);
        wk_asm_op(a, COPY, 1);
        if (kobj) {
            wk_asm_load_const(a, kobj);
            Py_DECREF(kobj);
        }
        wk_asm_compare_op(a, 2);
        wk_asm_pop_jump_if(a, 1, exit_label[k]);
    }
    for (int k = lo->nexits - 1; k >= 0; k--) { /* the compares fall through to the last */
        wk_asm_bind_label(a, exit_label[k]);
        wk_asm_op(a, POP_TOP, 0);
        wk_asm_unpack_sequence(a, 1 + lo->exit_nlocals[k]);
        wk_asm_op(a, POP_TOP, 0);
        for (int i = 0; i < lo->exit_nlocals[k]; i++) wk_asm_store_fast(a, local_map[lo->exit_locals[k][i]]);
        int t = lo->exit_target[k];
        /* back to the head: a while loop's head is the body, called again */
        wk_asm_jump(a, JUMP_BACKWARD, k == 0 && !lo->is_for ? call_label : labels[t]);
    }
    wk_asm_bind_label(a, end);
    if (lo->exc >= 0)
        wk_asm_try(a, start, end, labels[lo->exc_range.handler], lo->exc_range.depth, lo->exc_range.lasti);
    free(exit_label);
}
