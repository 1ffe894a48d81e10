/* vals/tensor.c — the tensor kind: a graph value (or a frame input not yet
 * read into the graph), its metadata answered at capture time from the
 * guarded example (shape, dtype, device, requires_grad, ...), its methods
 * (the method kind: a tensor method, maybe bound) and the operators on
 * tensors, each adding nodes to the graph. */
#include <string.h>

#include "../interp.h"

static int device_of(PyObject *t, WkDevice *dev, int *ok) {
    PyObject *d = PyObject_GetAttr(t, cap_s_device);
    if (!d) return -1;
    int r = cap_device_of(d, dev, ok);
    Py_DECREF(d);
    return r;
}

int cap_device_of(PyObject *d, WkDevice *dev, int *ok) {
    PyObject *type = PyObject_GetAttrString(d, "type");
    PyObject *index = type ? PyObject_GetAttrString(d, "index") : NULL;
    if (!index) {
        Py_XDECREF(type);
        return -1;
    }
    const char *ts = PyUnicode_Check(type) ? PyUnicode_AsUTF8(type) : NULL;
    *ok = 1;
    dev->index = index == Py_None ? 0 : (int)PyLong_AsLong(index);
    if (ts && strcmp(ts, "cpu") == 0) dev->type = WK_DEV_CPU;
    else if (ts && strcmp(ts, "cuda") == 0) dev->type = WK_DEV_CUDA;
    else *ok = 0;
    Py_DECREF(type);
    Py_DECREF(index);
    return PyErr_Occurred() ? -1 : 0;
}

/* value_rg holds two bits per graph value: RG_REQUIRES (the value requires
 * grad, as eager would say) and RG_NO_GRAD (a node output computed with grad
 * mode off, inside a no_grad block): the FX path replays those grad modes. */
enum { RG_REQUIRES = 1, RG_NO_GRAD = 2, RG_ALIASED = 4, RG_STALE = 8, RG_PRIVATE_BASE = 16, RG_EAGER_LAYOUT = 32 };

static void set_rg_bits(Interp *I, int value, char bits) {
    while (I->value_rg.len <= value) wk_vec_push(&I->value_rg, 0);
    I->value_rg.data[value] =
        (char)((I->value_rg.data[value] & (RG_ALIASED | RG_STALE | RG_PRIVATE_BASE | RG_EAGER_LAYOUT)) | bits);
}

/* A sixth bit, RG_EAGER_LAYOUT: the value's strides in the graph are the
 * ones eager's tensor has (views.c cap_eager_laid laid it out so). */
void cap_mark_eager_layout(Interp *I, int value) {
    while (I->value_rg.len <= value) wk_vec_push(&I->value_rg, 0);
    I->value_rg.data[value] |= RG_EAGER_LAYOUT;
}

int cap_has_eager_layout(const Interp *I, int value) {
    return value >= 0 && value < I->value_rg.len && (I->value_rg.data[value] & RG_EAGER_LAYOUT);
}

/* A fourth bit, RG_STALE: a VIEW of a value that was then written in place
 * (x[:, 0] read before x[...] = v). The graph's view still holds the values
 * from before the write, eager's would see it: using it again is refused. */
static int is_stale(const Interp *I, int value) {
    return value >= 0 && value < I->value_rg.len && (I->value_rg.data[value] & RG_STALE);
}

static void mark_views_stale(Interp *I, int v) {
    for (int i = 0; i < wk_graph_nnodes(I->g); i++) { /* nodes are in order: views of views follow */
        const WkNode *n = wk_graph_node(I->g, i);
        if (n->op != WK_OP_VIEW || (n->inputs[0] != v && !is_stale(I, n->inputs[0]))) continue;
        int out = n->outputs[0];
        while (I->value_rg.len <= out) wk_vec_push(&I->value_rg, 0);
        I->value_rg.data[out] |= RG_STALE;
    }
}

static void set_stale(Interp *I, int v) {
    while (I->value_rg.len <= v) wk_vec_push(&I->value_rg, 0);
    I->value_rg.data[v] |= RG_STALE;
}

/* A third bit, RG_ALIASED: the value shares storage with another graph
 * value (an extern view of it, or the base it views). An in-place update is
 * modelled by rebinding one Sv to a new value, which the aliases would not
 * see, so it is refused for these. */
void cap_mark_aliased(Interp *I, int value) {
    while (I->value_rg.len <= value) wk_vec_push(&I->value_rg, 0);
    I->value_rg.data[value] |= RG_ALIASED;
}

int cap_is_aliased(const Interp *I, int value) {
    return value >= 0 && value < I->value_rg.len && (I->value_rg.data[value] & RG_ALIASED);
}

/* Is value `v` a VIEW? Writing into it would reach its base: an in-place
 * update cannot be a new value. (Views *of* v go stale instead.) */
static int value_is_view(const WkGraph *g, int v) {
    const WkValue *m = wk_graph_value(g, v);
    return m->node >= 0 && wk_graph_node(g, m->node)->op == WK_OP_VIEW;
}

/* A fifth bit, RG_PRIVATE_BASE: the buffer under a *_like result laid out
 * with eager's strides (structural.c full_with_strides, and the copy an
 * in-place update of it makes, views.c cap_relaid_like), which no Python
 * value names: only that one VIEW reads it. */
void cap_mark_private_base(Interp *I, int value) {
    while (I->value_rg.len <= value) wk_vec_push(&I->value_rg, 0);
    I->value_rg.data[value] |= RG_PRIVATE_BASE;
}

/* v is the one VIEW of a private base: an in-place update may rebind it (to
 * a copy in its layout, cap_relaid_like) as it rebinds a tensor without views. */
static int private_like_view(const Interp *I, int v) {
    const WkGraph *g = I->g;
    if (!value_is_view(g, v)) return 0;
    int base = wk_graph_node(g, wk_graph_value(g, v)->node)->inputs[0];
    if (base >= I->value_rg.len || !(I->value_rg.data[base] & RG_PRIVATE_BASE)) return 0;
    int readers = 0;
    for (int i = 0; i < wk_graph_nnodes(g); i++) {
        const WkNode *n = wk_graph_node(g, i);
        for (int k = 0; k < n->ninputs; k++) readers += n->inputs[k] == base;
    }
    return readers == 1;
}

/* The base a view v reaches through VIEWs when that base is a value the
 * graph computed (not an input, nothing aliasing it or the views between):
 * an in-place update of v can then be a new value for v while the base is
 * marked stale (timm's GhostNet: `x += shortcut` where x is a channel slice
 * of a concatenation its block returned). -1 otherwise. */
static int computed_view_root(const Interp *I, int v) {
    const WkGraph *g = I->g;
    int base = v;
    while (value_is_view(g, base)) {
        if (cap_is_aliased(I, base)) return -1;
        base = wk_graph_node(g, wk_graph_value(g, base)->node)->inputs[0];
    }
    if (cap_is_aliased(I, base) || is_stale(I, base) || wk_graph_value(g, base)->node < 0) return -1;
    for (int i = 0; i < wk_graph_ninputs(g); i++)
        if (wk_graph_input_value(g, i) == base) return -1;
    for (int i = 0; i < I->writes.len; i++)
        if (I->writes.data[i].value == base) return -1;
    return base;
}

/* Do values a and b have the same sizes and the same concrete strides? */
static int same_strides(const WkGraph *g, int a, int b) {
    const WkValue *am = wk_graph_value(g, a), *bm = wk_graph_value(g, b);
    int64_t as[WK_MAX_DIMS], bs[WK_MAX_DIMS];
    if (am->ndim != bm->ndim || cap_value_strides(am, as) < 0 || cap_value_strides(bm, bs) < 0) return 0;
    for (int d = 0; d < am->ndim; d++)
        if (cap_const_size(am, d) != cap_const_size(bm, d) || as[d] != bs[d]) return 0;
    return 1;
}

/* Do a and b name the same input (the same argument path, or global)? */
static int same_source(const Sv *a, const Sv *b) {
    if (a->gname || b->gname) {
        int eq = a->gname && b->gname ? PyUnicode_Compare(a->gname, b->gname) : 1;
        if (eq == -1 && PyErr_Occurred()) PyErr_Clear();
        return eq == 0;
    }
    if (a->arg < 0 || a->arg != b->arg) return 0;
    if (!a->path || !b->path) return a->path == b->path;
    int eq = PyObject_RichCompareBool(a->path, b->path, Py_EQ);
    if (eq < 0) PyErr_Clear();
    return eq == 1;
}

CapWrite *cap_write_of(Interp *I, const Sv *s) {
    if (s->kind != SV_TENSOR || (s->arg < 0 && !s->gname)) return NULL;
    for (int i = 0; i < I->writes.len; i++)
        if (same_source(I->writes.data[i].source, s)) return &I->writes.data[i];
    return NULL;
}

int cap_check_view_of(Interp *I, int v, const char *what) {
    for (int i = 0; i < I->writes.len; i++)
        if (I->writes.data[i].value == v)
            return cap_unsupported(I, "%s of an input tensor the frame wrote in place", what);
    return 0;
}

/* A VIEW node output (through VIEWs) of an input the frame wrote is, in
 * the graph, a view of the written value: fine to read there, but not a
 * view of the input's memory, which eager's would be. It never leaves the
 * graph (and a write into it is refused as into any view). */
static int check_leaving_view(Interp *I, int v) {
    int base = v;
    for (;;) {
        const WkValue *m = wk_graph_value(I->g, base);
        if (m->node < 0 || wk_graph_node(I->g, m->node)->op != WK_OP_VIEW) break;
        base = wk_graph_node(I->g, m->node)->inputs[0];
    }
    return base == v ? 0 : cap_check_view_of(I, base, "a view");
}

/* What eager refuses, or what the write-back after the graph could not
 * reproduce, for an in-place write into input tensor x with result r. */
static int input_write_check(Interp *I, Sv *x, Sv *r, int input, const char *what) {
    if (!I->brk || !x->obj) return cap_unsupported(I, "in-place %s on an input tensor capture cannot write back", what);
    /* eager refuses a leaf that requires grad outside no_grad (and records
     * autograd history into a non-leaf): only inside a no_grad block */
    if (cap_get_rg(I, input) && I->grad_enabled)
        return cap_unsupported(I, "in-place %s on an input tensor that requires grad", what);
    if (I->grad_enabled && cap_get_rg(I, r->value))
        return cap_unsupported(I, "in-place %s on an input tensor with a result that requires grad", what);
    const WkValue *m = wk_graph_value(I->g, input);
    for (int d = 0; d < m->ndim; d++) {
        int64_t size = 0, stride = 1;
        /* more than one element at one address (an expanded tensor): eager refuses the write */
        if (wk_sym_is_const(m->sizes[d], &size) && size > 1 && m->strides[d] &&
            wk_sym_is_const(m->strides[d], &stride) && stride == 0)
            return cap_unsupported(I, "in-place %s on an expanded input tensor", what);
    }
    PyObject *inf = PyObject_CallMethod(x->obj, "is_inference", NULL);
    int is_inf = inf == Py_True;
    Py_XDECREF(inf);
    if (!inf) return cap_py_failed(I, "is_inference");
    if (is_inf) return cap_unsupported(I, "in-place %s on an inference tensor", what);
    return 0;
}

/* x's tensor becomes r's value, as `x op= y`, x.add_(y) or F.relu(x,
 * inplace=True) do, keeping x's shape and dtype; every value that is x
 * (the same graph value, or read from the same input) follows. Refused
 * where a view of x would not see the write. An input tensor is written
 * back after the graph (cap_effects_plan: x.copy_(value)). Returns x. */
Sv *cap_inplace_update(Interp *I, Sv *x, Sv *r, const char *what) {
    if (x->kind != SV_TENSOR) return r;
    int is_input = x->arg >= 0 || x->gname;
    int old = cap_tensor_value(I, x);
    if (old < 0) return NULL;
    CapWrite *w = is_input ? cap_write_of(I, x) : NULL;
    if (is_input && input_write_check(I, x, r, w ? w->input : old, what) < 0) return NULL;
    /* an input written before holds its result laid out as the input
     * (cap_eager_laid): a private view too, rebound the same way */
    int like = private_like_view(I, old);
    int into_view = !is_input && !like && value_is_view(I->g, old) ? computed_view_root(I, old) : -1;
    if (cap_is_aliased(I, old) || (value_is_view(I->g, old) && !like && into_view < 0))
        return cap_unsupported(I, "in-place %s on a tensor that is a view or has views", what), NULL;
    const WkValue *xm = wk_graph_value(I->g, old), *rm = wk_graph_value(I->g, r->value);
    int same_shape = xm->ndim == rm->ndim;
    for (int d = 0; same_shape && d < xm->ndim; d++) same_shape = xm->sizes[d] == rm->sizes[d];
    if (!same_shape) return cap_unsupported(I, "in-place %s would change the shape", what), NULL;
    /* eager writes into x's memory, which keeps x's strides: r laid out by
     * eager's rule (cap_eager_laid) only where that is x's layout, else the
     * node output under it, in wick's own layout */
    int raw = like ? -1 : cap_relaid_raw(I, r->value);
    if (raw >= 0 && !same_strides(I->g, old, r->value)) {
        r = sv_tensor(I, raw);
        rm = wk_graph_value(I->g, r->value);
    }
    if (rm->dtype != xm->dtype) {
        if (!(wk_dtype_is_float(rm->dtype) && wk_dtype_is_float(xm->dtype)))
            return cap_unsupported(I, "in-place %s would change the dtype", what), NULL;
        Sv *c = cap_convert(I, r, xm->dtype);
        if (!c) return NULL;
        r = c;
    }
    if (like && same_strides(I->g, old, r->value) && private_like_view(I, r->value)) {
        /* r is laid out as x already, in a buffer of its own (cap_eager_laid) */
    } else if (like) { /* the update keeps the *_like's layout (eager writes into its memory) */
        Sv *relaid = cap_relaid_like(I, r, x);
        if (!relaid) return cap_unsupported(I, "in-place %s on a tensor that is a view or has views", what), NULL;
        r = relaid;
    }
    if (is_input && !w) {
        CapWrite nw = {x, old, r->value, cap_get_rg(I, old)};
        wk_vec_push(&I->writes, nw);
    } else if (w) {
        w->value = r->value;
    }
    for (int i = 0; i < I->all.len; i++) {
        Sv *s = I->all.data[i];
        if (s->kind == SV_TENSOR && (s->value == old || (is_input && s->value < 0 && same_source(s, x))))
            s->value = r->value;
    }
    x->value = r->value;
    mark_views_stale(I, old);
    if (into_view >= 0) {
        /* the write reached the view's base in eager: the base, and every
         * other view of it, is now refused wherever it is read again */
        set_stale(I, into_view);
        mark_views_stale(I, into_view);
    }
    return x;
}

/* Two tensors read from the arguments are the objects found there now,
 * and the answer is guarded (a later call passing the same tensor twice
 * recompiles). Otherwise one is a value the frame computed: distinct graph
 * values are distinct objects, since an in-place write returns its own Sv
 * (cap_inplace_update) and the methods eager answers with self itself
 * (contiguous(), to() of the same dtype, dropout in eval...) return their
 * argument's Sv. One graph value under two Svs (a detach, an alias) may or
 * may not be one object: refused. */
int cap_tensor_is(Interp *I, Sv *x, Sv *y) {
    int xs = x->obj && x->arg >= 0 && !x->gname, ys = y->obj && y->arg >= 0 && !y->gname;
    if (xs && ys) {
        int same = x->obj == y->obj;
        wk_guard_same_as_at(I->guards, x->arg, x->path, y->arg, y->path, same);
        return same;
    }
    if (x->obj || y->obj) {
        /* a tensor read from a global, or an argument tensor against a
         * computed one: the argument's value is its input (or what an
         * in-place write made of it) */
        int xv = x->obj ? cap_tensor_value(I, x) : x->value, yv = y->obj ? cap_tensor_value(I, y) : y->value;
        if (xv < 0 || yv < 0) return -1;
        if (x->obj && y->obj) return cap_unsupported(I, "'is' between a global tensor and another tensor");
        if (xv != yv) return 0;
        return cap_unsupported(I, "'is' between a tensor and another name for its value");
    }
    if (x->value >= 0 && y->value >= 0 && x->value != y->value) return 0;
    return cap_unsupported(I, "'is' between a tensor and another name for its value");
}

void cap_set_rg(Interp *I, int value, int rg) { set_rg_bits(I, value, rg ? RG_REQUIRES : 0); }

int cap_get_rg(const Interp *I, int value) {
    return value >= 0 && value < I->value_rg.len && (I->value_rg.data[value] & RG_REQUIRES);
}

void cap_set_node_output_rg(Interp *I, int value, int rg) {
    set_rg_bits(I, value, (char)((rg ? RG_REQUIRES : 0) | (I->grad_enabled ? 0 : RG_NO_GRAD)));
}

int cap_get_no_grad(const Interp *I, int value) {
    return value >= 0 && value < I->value_rg.len && (I->value_rg.data[value] & RG_NO_GRAD);
}

/* Some node output requires grad: running the graph needs autograd (the
 * FX path through AOTAutograd), not wick's own runtime. */
int cap_graph_needs_autograd(const Interp *I) {
    int ninputs = wk_graph_ninputs(I->g);
    for (int v = 0; v < I->value_rg.len; v++) {
        if (!(I->value_rg.data[v] & RG_REQUIRES)) continue;
        int is_input = 0;
        for (int i = 0; i < ninputs && !is_input; i++) is_input = wk_graph_input_value(I->g, i) == v;
        if (!is_input) return 1;
    }
    return 0;
}

/* "L['self'].weight": where an argument-derived value comes from. */
static int sv_source(Interp *I, const Sv *s, char *buf, size_t n) {
    if (s->gname) {
        const char *g = PyUnicode_AsUTF8(s->gname);
        if (!g) return cap_py_failed(I, "reading a global name");
        snprintf(buf, n, "G['%s']", g);
        return 0;
    }
    const char *an = PyUnicode_AsUTF8(PyTuple_GET_ITEM(I->argnames, s->arg));
    if (!an) return cap_py_failed(I, "reading an argument name");
    size_t k = (size_t)snprintf(buf, n, "L['%s']", an);
    for (Py_ssize_t i = 0; s->path && i < PyTuple_GET_SIZE(s->path) && k < n; i++) {
        PyObject *elem = PyTuple_GET_ITEM(s->path, i);
        if (PyTuple_Check(elem)) {
            PyObject *r = PyObject_Repr(PyTuple_GET_ITEM(elem, 0));
            const char *rs = r ? PyUnicode_AsUTF8(r) : NULL;
            if (!rs) {
                Py_XDECREF(r);
                return cap_py_failed(I, "reading an item key");
            }
            k += (size_t)snprintf(buf + k, n - k, "[%s]", rs);
            Py_DECREF(r);
            continue;
        }
        const char *a = PyUnicode_AsUTF8(elem);
        if (!a) return cap_py_failed(I, "reading an attribute name");
        k += (size_t)snprintf(buf + k, n - k, ".%s", a);
    }
    return 0;
}

/* 1 where tensor t answers True to the method (is_neg, is_conj), 0 where
 * not, -1 with a Python error. */
static int lazy_bit_set(PyObject *t, const char *method) {
    PyObject *r = PyObject_CallMethod(t, method, NULL);
    if (!r) return -1;
    int set = r == Py_True;
    Py_DECREF(r);
    return set;
}

/* The graph value of a tensor Sv, adding the argument as a graph input on
 * first use. -1 on fallback. */
int cap_tensor_value(Interp *I, Sv *s) {
    if (s->value >= 0 && is_stale(I, s->value))
        return cap_unsupported(I, "a view of a tensor read again after the tensor was written in place");
    CapWrite *w = s->value < 0 ? cap_write_of(I, s) : NULL; /* an input the frame wrote: what it holds now */
    if (w) s->value = w->value;
    for (int i = 0; I->grad_enabled && s->value >= 0 && i < I->writes.len; i++)
        if (I->writes.data[i].no_grad && I->writes.data[i].value == s->value) /* eager's is a leaf: its graph value is not */
            return cap_unsupported(I, "a tensor that requires grad, written under no_grad, read with grad on");
    if (s->value >= 0) return s->value;
    PyObject *t = s->obj;
    char src[256];
    if (sv_source(I, s, src, sizeof src) < 0) return -1;
    PyObject *dt = NULL, *shape = NULL, *stride = NULL, *rg = NULL;
    int64_t sizes[WK_MAX_DIMS], strides[WK_MAX_DIMS];
    int rc = -1;
    if (!(dt = PyObject_GetAttr(t, cap_s_dtype))) goto pyerr;
    int d = cap_dtype_of_obj_any(dt);
    if (d < 0) {
        PyObject *str = PyObject_Str(dt);
        cap_unsupported(I, "%s: unsupported dtype %s", src, str ? PyUnicode_AsUTF8(str) : "?");
        Py_XDECREF(str);
        PyErr_Clear();
        goto done;
    }
    /* a lazily negated view (z.conj().imag) or conjugated one: its memory
     * holds the negation or the conjugates, which kernels would read as
     * they are */
    int negated = lazy_bit_set(t, "is_neg");
    int conjugated = negated || !wk_dtype_is_complex((WkDType)d) ? 0 : lazy_bit_set(t, "is_conj");
    if (negated < 0 || conjugated < 0) goto pyerr;
    if (negated || conjugated) {
        cap_unsupported(I, "%s: a tensor with the %s bit set (%s() makes it plain)", src,
                        negated ? "negation" : "conjugate", negated ? "resolve_neg" : "resolve_conj");
        goto done;
    }
    WkDevice dev;
    int dev_ok;
    if (device_of(t, &dev, &dev_ok) < 0) goto pyerr;
    if (!dev_ok) {
        cap_unsupported(I, "%s: unsupported device", src);
        goto done;
    }
    if (!(rg = PyObject_GetAttr(t, cap_s_requires_grad))) goto pyerr;
    int requires_grad = rg == Py_True;
    if (!(shape = PyObject_GetAttr(t, cap_s_shape))) goto pyerr;
    if (!(stride = PyObject_CallMethodNoArgs(t, cap_s_stride))) goto pyerr;
    Py_ssize_t nd = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : -1;
    if (nd < 0 || !PyTuple_Check(stride) || PyTuple_GET_SIZE(stride) != nd) {
        cap_unsupported(I, "%s: unreadable shape", src);
        goto done;
    }
    if (nd > WK_MAX_DIMS) {
        cap_unsupported(I, "%s: tensors of rank %d are not supported (at most %d dims)", src, (int)nd,
                    WK_MAX_DIMS);
        goto done;
    }
    for (Py_ssize_t i = 0; i < nd; i++) {
        sizes[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        strides[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride, i));
    }
    if (PyErr_Occurred()) goto pyerr;
    /* a complex input only reaches externs (cap_args_complex) */
    int v = (wk_dtype_is_complex((WkDType)d) ? wk_graph_input_any : wk_graph_input)(I->g, (WkDType)d, dev, (int)nd,
                                                                                    sizes, strides, 0, src);
    if (v < 0) {
        cap_graph_failed(I, src);
        goto done;
    }
    s->value = v;
    cap_set_rg(I, v, requires_grad);
    wk_vec_push(&I->input_args, s->arg);
    wk_vec_push(&I->input_paths, s->gname ? s->gname : s->path);
    wk_vec_push(&I->input_tensors, t);
    rc = v;
    goto done;
pyerr:
    cap_py_failed(I, src);
done:
    Py_XDECREF(dt);
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    Py_XDECREF(rg);
    return rc;
}

/* A Python number as a wrapped 0-d graph value. */
int cap_scalar_value(Interp *I, PyObject *o) {
    int v;
    if (PyBool_Check(o)) {
        v = wk_graph_scalar(I->g, WK_BOOL, 0, o == Py_True);
    } else if (PyLong_CheckExact(o)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow) return cap_unsupported(I, "integer constant out of int64 range");
        v = wk_graph_scalar(I->g, WK_I64, (double)x, x);
    } else if (PyFloat_CheckExact(o)) {
        v = wk_graph_scalar(I->g, WK_F64, PyFloat_AS_DOUBLE(o), 0);
    } else {
        return cap_unsupported(I, "%s as a tensor operand", cap_type_name(o));
    }
    if (v < 0) return cap_graph_failed(I, "scalar");
    return v;
}

/* Tensor or Python-number operand -> graph value id. */
int cap_operand_value(Interp *I, Sv *s, const char *what) {
    if (s->kind == SV_TENSOR) return cap_tensor_value(I, s);
    if (s->kind == SV_CONST && cap_is_number(s->obj)) return cap_scalar_value(I, s->obj);
    return cap_unsupported(I, "%s of type %s", what, sv_desc(s));
}

const WkValue *cap_sv_meta(Interp *I, Sv *s) {
    int v = cap_tensor_value(I, s);
    return v < 0 ? NULL : wk_graph_value(I->g, v);
}

/* Result Sv of a graph op, or NULL (reason set). In grad mode, a floating
 * output of an input that requires grad requires grad too (eager's rule for
 * these differentiable ops); such a graph is compiled through AOTAutograd. */
/* Inside torch.autocast, an op autocast runs in float32 on the inputs'
 * device (cap_autocast_fp32_op) gets float32 copies of its 16-bit floating
 * tensor inputs first, as eager's autocast casts them: eager's dtype and
 * precision. Python numbers (SCALAR nodes) keep their wrapped-number role.
 * Autocast on or off is in the tensor guards' dispatch keys. in_out: the
 * operands, replaced by their casts; -1 on failure. */
static int autocast_fp32_operands(Interp *I, WkOp op, int *in_out, int n) {
    const WkValue *first = NULL;
    for (int i = 0; i < n && !first; i++) {
        const WkValue *v = wk_graph_value(I->g, in_out[i]);
        if (v->node < 0 || wk_graph_node(I->g, v->node)->op != WK_OP_SCALAR) first = v;
    }
    if (!first || !cap_autocast_fp32_op(op, first->device.type)) return 0;
    for (int i = 0; i < n; i++) {
        const WkValue *v = wk_graph_value(I->g, in_out[i]);
        if (v->node >= 0 && wk_graph_node(I->g, v->node)->op == WK_OP_SCALAR) continue;
        Sv *c = cap_autocast_to_fp32(I, sv_tensor(I, in_out[i]));
        if (!c) return -1;
        in_out[i] = c->value;
    }
    return 0;
}

Sv *cap_graph_op(Interp *I, WkOp op, const int *in, int n, const WkAttrs *attrs) {
    int cast[4]; /* the fp32-policy ops have at most three operands */
    if (n <= 4 && (cap_autocast_fp32_op(op, WK_DEV_CUDA) || cap_autocast_fp32_op(op, WK_DEV_CPU))) {
        for (int i = 0; i < n; i++) cast[i] = in[i];
        if (autocast_fp32_operands(I, op, cast, n) < 0) return NULL;
        in = cast;
    }
    Sv *r = cap_graph_op_try(I, op, in, n, attrs);
    if (!r) cap_graph_failed(I, wk_op_info(op)->name);
    return r;
}

Sv *cap_graph_op_try(Interp *I, WkOp op, const int *in, int n, const WkAttrs *attrs) {
    int rg = 0;
    for (int i = 0; I->grad_enabled && i < n; i++) rg |= cap_get_rg(I, in[i]);
    int v = wk_graph_op(I->g, op, in, n, attrs);
    if (v < 0) return NULL;
    WkDType dt = wk_graph_value(I->g, v)->dtype;
    cap_set_node_output_rg(I, v, rg && wk_dtype_is_float(dt));
    return sv_tensor(I, v);
}

Sv *cap_convert(Interp *I, Sv *t, int dtype) {
    const WkValue *m = cap_sv_meta(I, t);
    if (!m) return NULL;
    if ((int)m->dtype == dtype) return t; /* torch returns self */
    WkAttrs at = {0};
    at.dtype = (WkDType)dtype;
    at.has_dtype = 1;
    int in = m->id;
    return cap_graph_op(I, WK_OP_CONVERT, &in, 1, &at);
}

Sv *cap_user_convert(Interp *I, Sv *t, int dtype) {
    const WkValue *m = cap_sv_meta(I, t);
    if (!m) return NULL;
    if ((int)m->dtype == dtype) return t;
    return cap_laid_or_raw(I, cap_convert(I, t, dtype), CAP_LAID_CONVERT);
}

PyObject *cap_torch_size_Ref(const WkValue *m) {
    PyObject *t = PyTuple_New(m->ndim);
    if (!t) return NULL;
    for (int i = 0; i < m->ndim; i++) {
        int64_t n = 0;
        wk_sym_is_const(m->sizes[i], &n);
        PyObject *x = PyLong_FromLongLong(n);
        if (!x) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    PyObject *r = PyObject_CallOneArg(cap_size_type, t);
    Py_DECREF(t);
    return r;
}

/* ---- tensor methods and attributes -------------------------------------- */

static const struct {
    const char *name;
    WkDType dtype;
} convert_methods[] = {
    {"float", WK_F32}, {"double", WK_F64}, {"half", WK_F16},  {"bfloat16", WK_BF16},
    {"long", WK_I64},  {"int", WK_I32},    {"short", WK_I16}, {"char", WK_I8},
    {"byte", WK_U8},   {"bool", WK_BOOL},
};

static int is_special_method(const char *name) {
    static const char *const names[] = {"size", "dim", "ndimension", "numel", "nelement", "to", "type_as",
                                        "is_floating_point", "is_contiguous", "stride"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i], name) == 0) return 1;
    for (size_t i = 0; i < sizeof convert_methods / sizeof convert_methods[0]; i++)
        if (strcmp(convert_methods[i].name, name) == 0) return 1;
    return 0;
}

int64_t cap_const_size(const WkValue *m, int d) {
    int64_t n = 0;
    wk_sym_is_const(m->sizes[d], &n);
    return n;
}

/* self.name(*args) */
/* x.add_(y) and the other elementwise in-place methods whose out-of-place
 * form is an op of the table: that op, fused with the rest of the graph,
 * then x takes the result (cap_inplace_update). Others (x.index_add_,
 * x.copy_, x.uniform_, ...) are extern calls that write on a clone
 * (vals/extern.c). NULL without a reason when not such a method. */
static Sv *inplace_method(Interp *I, const char *name, const Args *a) {
    static const char *const elementwise[] = {
        "add_", "sub_", "mul_", "div_", "pow_", "neg_", "abs_", "exp_", "log_", "sqrt_", "rsqrt_", "sigmoid_",
        "tanh_", "relu_", "clamp_", "clamp_min_", "clamp_max_", "sin_", "cos_", "floor_", "ceil_", "round_",
        "sign_", "reciprocal_", "square_", "erf_", "masked_fill_", "lerp_", "addcmul_", "addcdiv_", "fmod_",
        "remainder_", "log1p_", "expm1_", "trunc_", "frac_", "hardtanh_", "silu_", "gelu_"};
    int known = 0;
    for (size_t i = 0; i < sizeof elementwise / sizeof *elementwise && !known; i++)
        known = strcmp(name, elementwise[i]) == 0;
    if (!known) return NULL;
    char base[32];
    snprintf(base, sizeof base, "%.*s", (int)strlen(name) - 1, name);
    int op = cap_method_op(base);
    if (op < 0 || op == WK_OP_VIEW) return NULL;
    Sv *r = cap_tensor_method_call(I, base, a);
    if (!r) return NULL;
    if (r->kind != SV_TENSOR || r == a->pos[0])
        return cap_unsupported(I, "Tensor.%s(): its out-of-place form gave no new tensor", name), NULL;
    char what[48];
    snprintf(what, sizeof what, "Tensor.%s()", name);
    return cap_inplace_update(I, a->pos[0], r, what);
}

Sv *cap_tensor_method_call(Interp *I, const char *name, const Args *a) {
    Sv *self = a->pos[0];
    char fname[80];
    snprintf(fname, sizeof fname, "Tensor.%s", name);
    const WkValue *m = cap_sv_meta(I, self);
    if (!m) return NULL;
    int nargs = a->npos - 1 + a->nkw;
    if (strcmp(name, "size") == 0) {
        Sv *dim = a->npos > 1 ? a->pos[1] : NULL;
        if (a->nkw == 1 && !dim && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(a->kwnames, 0), "dim") == 0)
            dim = a->kw[0];
        if (nargs > 1 || (nargs == 1 && !dim)) return cap_unsupported(I, "%s() arguments", fname), NULL;
        if (!dim || (dim->kind == SV_CONST && dim->obj == Py_None)) {
            PyObject *sz = cap_torch_size_Ref(m);
            if (!sz) return cap_py_failed(I, "size()"), NULL;
            return sv_const_Steal(I, sz);
        }
        if (dim->kind != SV_CONST || !PyLong_CheckExact(dim->obj))
            return cap_unsupported(I, "%s(): dim of type %s", fname, sv_desc(dim)), NULL;
        long d = PyLong_AsLong(dim->obj);
        int wrap = m->ndim ? m->ndim : 1;
        if (d < -wrap || d >= wrap) return cap_unsupported(I, "%s(): dimension out of range", fname), NULL;
        if (d < 0) d += wrap;
        return sv_const_Steal(I, PyLong_FromLongLong(m->ndim ? cap_const_size(m, (int)d) : 1));
    }
    if (strcmp(name, "dim") == 0 || strcmp(name, "ndimension") == 0) {
        if (nargs) return cap_unsupported(I, "%s() arguments", fname), NULL;
        return sv_const_Steal(I, PyLong_FromLong(m->ndim));
    }
    if (strcmp(name, "is_floating_point") == 0) {
        if (nargs) return cap_unsupported(I, "%s() arguments", fname), NULL;
        return sv_const(I, wk_dtype_is_float(m->dtype) ? Py_True : Py_False);
    }
    if (strcmp(name, "is_contiguous") == 0) {
        if (nargs) return cap_unsupported(I, "%s() arguments", fname), NULL;
        /* inputs answer from guarded strides; eager's node outputs follow
         * their inputs' layouts, which the graph does not model */
        if (!self->obj) {
            /* a computed tensor whose strides in the graph are eager's:
             * answered from them (they follow from the guarded inputs') */
            int64_t strides[WK_MAX_DIMS];
            if (cap_layout_is_eagers(I, self) && cap_value_strides(m, strides) == 0) {
                int contiguous = 1;
                int64_t expect = 1;
                for (int d = m->ndim - 1; d >= 0; d--) {
                    int64_t size = cap_const_size(m, d);
                    if (size == 0) {
                        contiguous = 1;
                        break;
                    }
                    if (size != 1 && strides[d] != expect) contiguous = 0;
                    expect *= size;
                }
                return sv_const(I, contiguous ? Py_True : Py_False);
            }
            if (CAP_FAILED(I)) return NULL;
            /* nor may Python ask after a graph break where the graph's
             * output has wick's layout, not eager's: the frame runs eagerly */
            if (!cap_layout_is_eagers(I, self)) I->no_break = 1;
            return cap_unsupported(I, "%s() of a computed tensor", fname), NULL;
        }
        PyObject *r = PyObject_CallMethod(self->obj, "is_contiguous", NULL);
        if (!r) return cap_py_failed(I, fname), NULL;
        return sv_const_Steal(I, r);
    }
    if (strcmp(name, "stride") == 0 && !(self->obj && m->node < 0) && nargs <= 1 && cap_layout_is_eagers(I, self)) {
        /* a computed tensor whose strides in the graph are eager's: its
         * answer (a dim out of range goes the generic way below: eager's error) */
        int64_t strides[WK_MAX_DIMS];
        Sv *dim = a->npos > 1 ? a->pos[1] : NULL;
        if (a->nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(a->kwnames, 0), "dim") == 0)
            dim = a->kw[0];
        if (dim && dim->kind == SV_CONST && dim->obj == Py_None) dim = NULL;
        long d = 0;
        int known = cap_value_strides(m, strides) == 0 && (nargs == 0 || dim);
        if (known && dim) {
            known = dim->kind == SV_CONST && PyLong_CheckExact(dim->obj);
            d = known ? PyLong_AsLong(dim->obj) : 0;
            if (PyErr_Occurred()) PyErr_Clear(), known = 0;
            if (d < 0) d += m->ndim;
            known = known && d >= 0 && d < m->ndim;
        }
        if (known && dim) return sv_const_Steal(I, PyLong_FromLongLong(strides[d]));
        if (known) {
            PyObject *t = PyTuple_New(m->ndim);
            for (int k = 0; t && k < m->ndim; k++) {
                PyObject *x = PyLong_FromLongLong(strides[k]);
                if (!x) Py_CLEAR(t);
                else PyTuple_SET_ITEM(t, k, x);
            }
            if (!t) return cap_py_failed(I, fname), NULL;
            return sv_const_Steal(I, t);
        }
    }
    if (CAP_FAILED(I)) return NULL;
    if (strcmp(name, "stride") == 0 && !(self->obj && m->node < 0) && !cap_layout_is_eagers(I, self)) {
        /* Python would read wick's layout after a graph break, not eager's */
        I->no_break = 1;
        return cap_unsupported(I, "%s() of a result whose eager layout wick does not keep", fname), NULL;
    }
    if (strcmp(name, "stride") == 0 && self->obj && m->node < 0 && nargs <= 1) {
        /* a graph input's strides are guarded whole (size-1 dims included):
         * the real tensor's answer holds for every call the guards admit.
         * A computed tensor's strides (eager's only where the layout pass
         * says so; a view an in-place op rebound is a node), other
         * arguments and a dim out of range go the generic way below (a
         * graph break, or eager's error). */
        Sv *dim = a->npos > 1 ? a->pos[1] : NULL;
        if (a->nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(a->kwnames, 0), "dim") == 0)
            dim = a->kw[0];
        if (dim && dim->kind == SV_CONST && dim->obj == Py_None) dim = NULL;
        if ((nargs == 0 || dim) && (!dim || (dim->kind == SV_CONST && PyLong_CheckExact(dim->obj)))) {
            PyObject *r = dim ? PyObject_CallMethod(self->obj, "stride", "O", dim->obj)
                              : PyObject_CallMethod(self->obj, "stride", NULL);
            if (r) return sv_const_Steal(I, r);
            PyErr_Clear();
        }
    }
    if (strcmp(name, "contiguous") == 0 && nargs == 0) {
        /* already contiguous by its (guarded or computed) strides: the
         * tensor itself, as eager returns it; otherwise an extern copy */
        int contiguous = 1;
        int64_t expect = 1;
        for (int d = m->ndim - 1; d >= 0 && contiguous; d--) {
            int64_t size = 0, stride = 0;
            if (!wk_sym_is_const(m->sizes[d], &size))
                contiguous = 0;
            else if (!m->strides[d]) /* a node output without strides: contiguous (graph.h) */
                stride = expect;
            else if (!wk_sym_is_const(m->strides[d], &stride))
                contiguous = 0;
            if (contiguous && size != 1 && stride != expect)
                contiguous = 0;
            expect *= size;
        }
        for (int d = 0; d < m->ndim && !contiguous; d++) { /* an empty tensor is contiguous */
            int64_t size = -1;
            if (wk_sym_is_const(m->sizes[d], &size) && size == 0) contiguous = 1;
        }
        if (contiguous) return self;
        /* a contiguous copy, as eager makes (of a complex tensor: PyTorch's, below) */
        Sv *copy = wk_dtype_is_complex(m->dtype) ? NULL : cap_tensor_contiguous(I, self);
        if (copy || CAP_FAILED(I)) return copy;
    }
    if (strcmp(name, "numel") == 0 || strcmp(name, "nelement") == 0) {
        if (nargs) return cap_unsupported(I, "%s() arguments", fname), NULL;
        int64_t n = 1;
        for (int d = 0; d < m->ndim; d++) n *= cap_const_size(m, d);
        return sv_const_Steal(I, PyLong_FromLongLong(n));
    }
    if (strcmp(name, "is_complex") == 0) {
        if (nargs) return cap_unsupported(I, "%s() arguments", fname), NULL;
        return sv_const(I, wk_dtype_is_complex(m->dtype) ? Py_True : Py_False);
    }
    int complex_args = cap_args_complex(I, a);
    if (complex_args) { /* no kernel computes complex values: the method runs in PyTorch */
        if (complex_args < 0) return NULL;
        PyObject *fn = PyObject_GetAttrString((PyObject *)cap_tensor_type, name);
        if (!fn) return cap_py_failed(I, fname), NULL;
        Sv *r = cap_extern_call(I, fn, fname, a->pos, a->npos, a->kwnames, a->kw, a->nkw);
        Py_DECREF(fn);
        return r;
    }
    for (size_t i = 0; i < sizeof convert_methods / sizeof convert_methods[0]; i++) {
        if (strcmp(convert_methods[i].name, name) != 0) continue;
        if (nargs) return cap_unsupported(I, "%s() arguments", fname), NULL;
        return cap_user_convert(I, self, convert_methods[i].dtype);
    }
    if (strcmp(name, "type_as") == 0) {
        if (a->npos != 2 || a->nkw || a->pos[1]->kind != SV_TENSOR)
            return cap_unsupported(I, "%s() arguments", fname), NULL;
        const WkValue *o = cap_sv_meta(I, a->pos[1]);
        if (!o) return NULL;
        return cap_user_convert(I, self, o->dtype);
    }
    if (strcmp(name, "type") == 0 && nargs == 1) {
        /* x.type(dtype): a conversion as x.to(dtype) (x itself when it has
         * that dtype, as eager returns it); a type name string goes to
         * PyTorch below */
        Sv *dt = a->npos == 2 ? a->pos[1] : NULL;
        if (a->nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(a->kwnames, 0), "dtype") == 0) dt = a->kw[0];
        int d = dt && dt->kind == SV_CONST ? cap_dtype_of_obj(dt->obj) : -1;
        if (d >= 0) return cap_user_convert(I, self, d);
    }
    if (strcmp(name, "to") == 0) {
        /* x.to(dtype), x.to(device), x.to(device, dtype), x.to(device=, dtype=,
         * non_blocking=, copy=False): staying on x's device, a dtype conversion
         * (x itself when nothing changes, as eager returns it) */
        Sv *dev_sv = NULL, *dt_sv = NULL;
        int bad = a->npos > 3;
        for (int i = 1; i < a->npos && !bad; i++) {
            Sv *v = a->pos[i];
            int is_dev = v->kind == SV_CONST && (PyUnicode_Check(v->obj) ||
                                                 (cap_device_type && Py_TYPE(v->obj) == (PyTypeObject *)cap_device_type));
            if (is_dev && !dev_sv && !dt_sv && i == 1) dev_sv = v;
            else if (!dt_sv) dt_sv = v;
            else bad = 1;
        }
        for (int k = 0; k < a->nkw && !bad; k++) {
            const char *kn = PyUnicode_AsUTF8(PyTuple_GET_ITEM(a->kwnames, k));
            Sv *v = a->kw[k];
            if (kn && strcmp(kn, "dtype") == 0 && !dt_sv) dt_sv = v;
            else if (kn && strcmp(kn, "device") == 0 && !dev_sv) dev_sv = v;
            else if (kn && strcmp(kn, "non_blocking") == 0 && v->kind == SV_CONST && PyBool_Check(v->obj)) continue;
            else if (kn && strcmp(kn, "copy") == 0 && v->kind == SV_CONST && v->obj == Py_False) continue;
            else bad = 1;
        }
        if (bad) return cap_unsupported(I, "%s() with these arguments", fname), NULL;
        if (dev_sv && !(dev_sv->kind == SV_CONST && dev_sv->obj == Py_None)) {
            if (dev_sv->kind != SV_CONST) return cap_unsupported(I, "%s() to a %s device", fname, sv_desc(dev_sv)), NULL;
            PyObject *dev_obj = PyUnicode_Check(dev_sv->obj) ? PyObject_CallOneArg(cap_device_type, dev_sv->obj)
                                                             : Py_NewRef(dev_sv->obj);
            if (!dev_obj) return cap_raise_current(I, fname), NULL; /* a bad device string raises in Python too */
            WkDevice dev;
            int ok = 0;
            int rc = cap_device_of(dev_obj, &dev, &ok);
            Py_DECREF(dev_obj);
            if (rc < 0) return cap_py_failed(I, fname), NULL;
            if (!ok || dev.type != m->device.type || (dev.type != WK_DEV_CPU && dev.index >= 0 && dev.index != m->device.index))
                return cap_unsupported(I, "%s() to another device", fname), NULL;
        }
        if (!dt_sv || (dt_sv->kind == SV_CONST && dt_sv->obj == Py_None)) return self;
        int d = dt_sv->kind == SV_CONST ? cap_dtype_of_obj(dt_sv->obj) : -1;
        if (d < 0) return cap_unsupported(I, "%s() with arguments other than a dtype", fname), NULL;
        return cap_user_convert(I, self, d);
    }
    Sv *written = inplace_method(I, name, a);
    if (written || CAP_FAILED(I)) return written;
    int op = cap_method_op(name);
    if (op < 0) { /* Tensor.<name>(self, ...) through PyTorch */
        Sv *more = cap_more_tensor_method(I, name, a);
        if (more || CAP_FAILED(I)) return more;
        PyObject *fn = PyObject_GetAttrString((PyObject *)cap_tensor_type, name);
        if (!fn) return cap_py_failed(I, fname), NULL;
        Sv *r = cap_extern_call(I, fn, fname, a->pos, a->npos, a->kwnames, a->kw, a->nkw);
        Py_DECREF(fn);
        return r;
    }
    PyObject *fn = PyObject_GetAttrString((PyObject *)cap_tensor_type, name);
    if (!fn) return cap_py_failed(I, fname), NULL;
    Sv *r = cap_call_op(I, (WkOp)op, a, fname, 1, fn);
    Py_DECREF(fn);
    return r;
}

int cap_tensor_attr(Interp *I, Sv *t, PyObject *name_obj, int method) {
    const char *name = PyUnicode_AsUTF8(name_obj);
    if (!name) return cap_py_failed(I, "attribute name");
    const WkValue *m = cap_sv_meta(I, t);
    if (!m) return -1;
    PyObject *c = NULL;
    if (strcmp(name, "shape") == 0) {
        c = cap_torch_size_Ref(m);
    } else if (strcmp(name, "ndim") == 0) {
        c = PyLong_FromLong(m->ndim);
    } else if (strcmp(name, "dtype") == 0) {
        c = Py_NewRef(cap_dtype_objs[m->dtype]);
    } else if (strcmp(name, "device") == 0) {
        c = m->device.type == WK_DEV_CPU ? PyObject_CallFunction(cap_device_type, "s", "cpu")
                                         : PyObject_CallFunction(cap_device_type, "si", "cuda", m->device.index);
    } else if (strcmp(name, "is_cuda") == 0) {
        c = PyBool_FromLong(m->device.type == WK_DEV_CUDA);
    } else if (strcmp(name, "is_cpu") == 0) {
        c = PyBool_FromLong(m->device.type == WK_DEV_CPU);
    } else if (strcmp(name, "layout") == 0) {
        c = Py_NewRef(cap_strided_layout); /* graph tensors are dense and strided */
    } else if (strcmp(name, "is_nested") == 0 || strcmp(name, "is_sparse") == 0 || strcmp(name, "is_quantized") == 0 ||
               strcmp(name, "is_mkldnn") == 0 || strcmp(name, "is_meta") == 0) {
        /* nn.MultiheadAttention's fast-path checks: graph values are dense
         * strided tensors of a wick dtype on the CPU or CUDA; an input is
         * asked (an old-style nested tensor is strided too, and its sizes,
         * which the guards read, raise) */
        if (t->obj) {
            PyObject *r = PyObject_GetAttr(t->obj, name_obj);
            if (!r) return cap_py_failed(I, name);
            Py_DECREF(r);
            if (r != Py_False) return cap_unsupported(I, "a tensor input whose .%s is not False", name);
        }
        c = Py_NewRef(Py_False);
    } else if (strcmp(name, "requires_grad") == 0) {
        /* inputs: read (and guarded) when loaded, unchanged by a write
         * into them (one that requires grad stays a leaf); node outputs: tracked */
        CapWrite *w = cap_write_of(I, t);
        c = PyBool_FromLong(cap_get_rg(I, w ? w->input : m->id));
    }
    if (c || PyErr_Occurred()) {
        if (!c) return cap_py_failed(I, name);
        if (method && sv_push(I, I->null_sv) < 0) {
            Py_DECREF(c);
            return -1;
        }
        return sv_push(I, sv_const_Steal(I, c));
    }
    if (cap_method_op(name) < 0 && !is_special_method(name)) {
        PyObject *d = _PyType_Lookup(cap_tensor_type, name_obj);
        if (!d) return cap_unsupported(I, "unknown tensor attribute .%s", name);
        if (!PyObject_TypeCheck(d, &PyMethodDescr_Type) && !PyFunction_Check(d)) {
            /* .T and .mT are views (of a complex tensor: PyTorch's); other
             * computed attributes (.real, .H): getattr through PyTorch */
            Sv *view = wk_dtype_is_complex(m->dtype) ? NULL : cap_tensor_transpose_attr(I, t, name);
            if (view) return method && sv_push(I, I->null_sv) < 0 ? -1 : sv_push(I, view);
            if (I->reason) return -1;
            PyObject *getter = PyObject_CallMethod(cap_operator_mod, "attrgetter", "O", name_obj);
            if (!getter) return cap_py_failed(I, name);
            char fname[80];
            snprintf(fname, sizeof fname, "Tensor.%s", name);
            Sv *r = cap_extern_call(I, getter, fname, &t, 1, NULL, NULL, 0);
            Py_DECREF(getter);
            if (!r) return -1;
            if (method && sv_push(I, I->null_sv) < 0) return -1;
            return sv_push(I, r);
        }
    }
    return cap_push_method(I, t, name, method);
}

/* ---- calls -------------------------------------------------------------- */

/* ---- operators ----------------------------------------------------------- */

static const char *nb_operator_name(int base) {
    switch (base) {
    case NB_FLOOR_DIVIDE: return "floordiv";
    case NB_REMAINDER: return "mod";
    case NB_MATRIX_MULTIPLY: return "matmul";
    case NB_AND: return "and_";
    case NB_OR: return "or_";
    case NB_XOR: return "xor";
    case NB_LSHIFT: return "lshift";
    case NB_RSHIFT: return "rshift";
    case NB_ADD: return "add";
    case NB_SUBTRACT: return "sub";
    case NB_MULTIPLY: return "mul";
    case NB_TRUE_DIVIDE: return "truediv";
    case NB_POWER: return "pow";
    }
    return NULL;
}

/* operator.<name>(*operands) through PyTorch as an extern node */
Sv *cap_tensor_operator(Interp *I, const char *name, Sv *x, Sv *y) {
    if (!name) return cap_unsupported(I, "an operator on tensors"), NULL;
    PyObject *fn = PyObject_GetAttrString(cap_operator_mod, name);
    if (!fn) return cap_py_failed(I, name), NULL;
    Sv *ops[2] = {x, y};
    char fname[64];
    snprintf(fname, sizeof fname, "operator.%s", name);
    Sv *r = cap_extern_call(I, fn, fname, ops, y ? 2 : 1, NULL, NULL, 0);
    Py_DECREF(fn);
    return r;
}


/* 1 when x or y is a complex tensor or number (the operator then runs in
 * PyTorch), 0 when not, -1 on failure */
static int operands_complex(Interp *I, Sv *x, Sv *y) {
    int c = cap_sv_complex(I, x);
    return c || !y ? c : cap_sv_complex(I, y);
}

static Sv *tensor_binary(Interp *I, int nb, Sv *x, Sv *y) {
    if (x->kind != SV_TENSOR && y->kind != SV_TENSOR) return NULL;
    int inplace = nb >= NB_INPLACE_ADD;
    int base = inplace ? nb - NB_INPLACE_ADD : nb;
    int complex_operands = operands_complex(I, x, y);
    if (complex_operands) {
        if (complex_operands < 0) return NULL;
        static const char *const inplace_names[] = {
            [NB_ADD] = "iadd", [NB_SUBTRACT] = "isub", [NB_MULTIPLY] = "imul", [NB_TRUE_DIVIDE] = "itruediv",
            [NB_POWER] = "ipow", [NB_MATRIX_MULTIPLY] = "imatmul", [NB_FLOOR_DIVIDE] = "ifloordiv",
            [NB_REMAINDER] = "imod", [NB_AND] = "iand", [NB_OR] = "ior", [NB_XOR] = "ixor",
            [NB_LSHIFT] = "ilshift", [NB_RSHIFT] = "irshift"};
        if (!inplace) return cap_tensor_operator(I, nb_operator_name(base), x, y);
        /* x op= y: the extern's write into x is rebound (vals/extern.c) */
        return cap_tensor_operator(I, base < (int)(sizeof inplace_names / sizeof *inplace_names) ? inplace_names[base]
                                                                                                 : NULL, x, y);
    }
    WkOp op;
    switch (base) {
    case NB_ADD: op = WK_OP_ADD; break;
    case NB_SUBTRACT: op = WK_OP_SUB; break;
    case NB_MULTIPLY: op = WK_OP_MUL; break;
    case NB_TRUE_DIVIDE: op = WK_OP_DIV; break;
    case NB_POWER: op = WK_OP_POW; break;
    case NB_AND:
    case NB_OR:
    case NB_XOR: {
        /* & | ^ on integer or bool operands are the bitwise ops; on anything
         * else eager raises or calls a reflected method: its own call */
        int bitwise = 1;
        Sv *operands[2] = {x, y};
        for (int i = 0; i < 2 && bitwise; i++) {
            Sv *o = operands[i];
            if (o->kind == SV_TENSOR) {
                const WkValue *om = cap_sv_meta(I, o);
                if (!om) return NULL;
                bitwise = om->dtype == WK_BOOL || wk_dtype_is_integral(om->dtype);
            } else {
                bitwise = o->kind == SV_CONST && (PyLong_CheckExact(o->obj) || PyBool_Check(o->obj));
            }
        }
        if (!bitwise) return cap_tensor_operator(I, nb_operator_name(base), x, y);
        op = base == NB_AND ? WK_OP_BITWISE_AND : base == NB_OR ? WK_OP_BITWISE_OR : WK_OP_BITWISE_XOR;
        break;
    }
    default: return cap_tensor_operator(I, nb_operator_name(base), x, y);
    }
    /* number / tensor is Tensor.__rtruediv__, reciprocal(y) * x in eager:
     * in autocast's float32 on CUDA when y is a 16-bit floating tensor */
    if (op == WK_OP_DIV && x->kind != SV_TENSOR && y->kind == SV_TENSOR) {
        const WkValue *ym = cap_sv_meta(I, y);
        if (!ym) return NULL;
        if (cap_autocast_fp32_op(WK_OP_RECIPROCAL, ym->device.type) && !(y = cap_autocast_to_fp32(I, y)))
            return NULL;
    }
    int in[2];
    if ((in[0] = cap_operand_value(I, x, "left operand")) < 0) return NULL;
    if ((in[1] = cap_operand_value(I, y, "right operand")) < 0) return NULL;
    /* x ** 2 is pow(Tensor, Scalar): the number is no operand of eager's iterator */
    Sv *r = cap_laid_or_raw(I, cap_graph_op(I, op, in, 2, NULL),
                            op == WK_OP_POW ? CAP_LAID_POINTWISE_UNARY : CAP_LAID_POINTWISE);
    if (!r) return NULL;
    if (inplace && x->kind == SV_TENSOR) {
        char what[48];
        snprintf(what, sizeof what, "operator %s", cap_nb_symbol(nb));
        return cap_inplace_update(I, x, r, what);
    }
    return r;
}

static Sv *tensor_compare(Interp *I, int cmp, Sv *x, Sv *y) {
    static const WkOp ops[] = {WK_OP_LT, WK_OP_LE, WK_OP_EQ, WK_OP_NE, WK_OP_GT, WK_OP_GE};
    static const char *const names[] = {"lt", "le", "eq", "ne", "gt", "ge"};
    if (x->kind != SV_TENSOR && y->kind != SV_TENSOR) return NULL;
    int complex_operands = operands_complex(I, x, y);
    if (complex_operands) return complex_operands < 0 ? NULL : cap_tensor_operator(I, names[cmp], x, y);
    int in[2];
    if ((in[0] = cap_operand_value(I, x, "left operand")) < 0) return NULL;
    if ((in[1] = cap_operand_value(I, y, "right operand")) < 0) return NULL;
    return cap_laid_or_raw(I, cap_graph_op(I, ops[cmp], in, 2, NULL), CAP_LAID_POINTWISE);
}

static Sv *tensor_unary(Interp *I, int opcode, Sv *x) {
    int complex_operand = operands_complex(I, x, NULL);
    if (complex_operand)
        return complex_operand < 0 ? NULL
                                   : cap_tensor_operator(I, opcode == UNARY_NEGATIVE ? "neg"
                                                            : opcode == UNARY_INVERT ? "invert"
                                                                                     : "pos", x, NULL);
    if (opcode == UNARY_INVERT) {
        /* ~ of an integer or bool tensor is bitwise_not; eager raises on others */
        const WkValue *m = cap_sv_meta(I, x);
        if (!m) return NULL;
        if (m->dtype != WK_BOOL && !wk_dtype_is_integral(m->dtype)) return cap_tensor_operator(I, "invert", x, NULL);
        return cap_laid_or_raw(I, cap_graph_op(I, WK_OP_BITWISE_NOT, &m->id, 1, NULL), CAP_LAID_POINTWISE);
    }
    if (opcode != UNARY_NEGATIVE) return cap_tensor_operator(I, "pos", x, NULL);
    int in = cap_tensor_value(I, x);
    if (in < 0) return NULL;
    return cap_laid_or_raw(I, cap_graph_op(I, WK_OP_NEG, &in, 1, NULL), CAP_LAID_POINTWISE);
}

static Sv *tensor_subscript(Interp *I, Sv *s, Sv *key) { return cap_tensor_getitem(I, s, key); }

static int tensor_iterate(Interp *I, Sv *s, SvList *out) {
    /* for row in t: t[0], t[1], ... (the length is guarded metadata) */
    const WkValue *m = cap_sv_meta(I, s);
    if (!m) return -1;
    if (m->ndim == 0) return cap_unsupported(I, "iteration over a 0-d tensor");
    int64_t n = cap_const_size(m, 0);
    if (n > 4096) return cap_unsupported(I, "iterating a tensor of %lld rows", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        Sv *r = tensor_subscript(I, s, sv_const_Steal(I, PyLong_FromLongLong(i)));
        if (!r) return -1;
        wk_vec_push(out, r);
    }
    return 0;
}

static int tensor_truth(Interp *I, Sv *s, int *out) {
    (void)s;
    (void)out;
    return cap_unsupported(I, "data-dependent branch on a tensor");
}

static int tensor_getattr(Interp *I, Sv *s, PyObject *name, int method) {
    return cap_tensor_attr(I, s, name, method);
}

static WkRet *tensor_reconstruct(Interp *I, RetPlan *p, Sv *s, int depth) {
    (void)depth;
    if (is_stale(I, s->value))
        return cap_unsupported(I, "a view of a tensor live after the tensor was written in place"), NULL;
    if (check_leaving_view(I, s->value) < 0) return NULL;
    WkRet *r = cap_ret_new(p, WK_RET_OUTPUT);
    r->index = -1;
    for (int i = 0; i < p->outputs.len; i++)
        if (p->outputs.data[i] == s->value) r->index = i;
    if (r->index < 0) {
        r->index = p->outputs.len;
        wk_vec_push(&p->outputs, s->value);
    }
    return r;
}

const SvOps cap_tensor_kind = {
    .name = "Tensor",
    .truth = tensor_truth,
    .getattr = tensor_getattr,
    .binary = tensor_binary,
    .compare = tensor_compare,
    .subscript = tensor_subscript,
    .iterate = tensor_iterate,
    .unary = tensor_unary,
    .reconstruct = tensor_reconstruct,
};

/* ---- the method kind: Tensor.<name>, maybe bound to self ------------------ */

/* A method of a symbolic value (a tensor, list, dict): self is the first
 * argument, the family of self's kind answers the call. */
static Sv *method_call(Interp *I, Sv *m, const Args *a) {
    if (a->npos < 1) return cap_unsupported(I, "method call without self"), NULL;
    switch (a->pos[0]->kind) {
    case SV_TENSOR: return cap_tensor_method_call(I, m->name, a);
    case SV_TUPLE:
    case SV_LIST: return cap_seq_method_call(I, m->name, a);
    case SV_DICT: return cap_dict_method_call(I, m->name, a);
    case SV_SET: return cap_set_method_call(I, m->name, a);
    case SV_OBJECT: return cap_userobj_method_call(I, m->name, a);
    case SV_CONST: /* a pinned list's append (vals/const.c) */
        if (strcmp(m->name, "append") == 0 && a->npos == 2 && !a->nkw && PyList_CheckExact(a->pos[0]->obj))
            return cap_list_append_effect(I, a->pos[0], a->pos[1]);
        return cap_unsupported(I, "method %s() of a %s", m->name, sv_desc(a->pos[0])), NULL;
    case SV_OPAQUE: /* a list or set argument's method (vals/object.c): a side effect */
        return cap_container_effect(I, m->name, a);
    default: return cap_unsupported(I, "method %s() of a %s", m->name, sv_desc(a->pos[0])), NULL;
    }
}

static int method_truth(Interp *I, Sv *s, int *out) {
    (void)I;
    (void)s;
    *out = 1;
    return 0;
}

const SvOps cap_method_kind = {.name = "method", .call = method_call, .truth = method_truth};
