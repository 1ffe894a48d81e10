/* loader.c — the call from a transformed frame into its compiled graph.
 *
 * Graph inputs are mostly attributes of the frame's arguments (a module's
 * parameters: self.layers[3].lin.weight). Loading each with LOAD_ATTR and
 * BINARY_SUBSCR would run nn.Module.__getattr__ and ModuleList.__getitem__
 * in Python for every step of every path on every call. Instead the
 * transformed code loads only the roots (arguments and globals) and calls
 * a GraphLoader, which resolves every path in C with the same fast steps
 * the guards use (wk_source_step_Ref: plain dict reads where the classes
 * keep nn.Module's lookup), then vectorcalls the compiled graph.
 *
 * Owns: the GraphLoader type; each loader owns its compiled graph, its
 * paths and its input-to-root map. */
#include <string.h>

#include "symbolic.h"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *compiled;  /* owned callable: inputs -> tuple of outputs */
    int ninputs;
    int *roots;          /* malloc'd: the root (positional argument) of each input */
    int *nodes;          /* malloc'd: each input's node in `sources`, -1: the root itself */
    WkSrcTree sources;   /* the inputs' paths; shared prefixes resolved once per call */
    int nroots;
    int *arg_of_root;    /* malloc'd: the frame argument each root is, -1: a global */
    uint64_t token;      /* the guards that hand resolved inputs over (0: none) */
    int *guard_nodes;    /* malloc'd after wk_loader_share: each input's node in the guards' tree */
    int nwritten;
    int *written;        /* malloc'd: inputs the caller writes back into (wk_loader_set_written) */
} LoaderObject;

#define NODES_ON_STACK 256

/* Every input into inputs[0..n) (new references); 0, or -1 with the
 * exception (what eager attribute reads would raise) and nothing held. */
static int resolve_inputs(LoaderObject *self, PyObject *const *roots, Py_ssize_t nroots, PyObject **inputs) {
    int nn = self->sources.nodes.len, rc = -1, got = 0, nhand = 0;
    PyObject **hand = NULL;
    if (self->guard_nodes && nroots == self->nroots)
        hand = wk_guards_take_handover(self->token, roots, self->arg_of_root, self->nroots, &nhand);
    PyObject *stack[NODES_ON_STACK];
    PyObject **cache = nn <= NODES_ON_STACK ? stack : wk_xcalloc((size_t)nn + 1, sizeof(PyObject *));
    for (int i = 0; cache == stack && i < nn; i++) stack[i] = NULL;
    for (; got < self->ninputs; got++) {
        int r = self->roots[got];
        if (r < 0 || r >= nroots) {
            PyErr_SetString(PyExc_SystemError, "wick: GraphLoader called with too few roots");
            goto finish;
        }
        int gn = hand ? self->guard_nodes[got] : -1;
        PyObject *x = self->nodes[got] < 0        ? roots[r]
                      : gn >= 0 && gn < nhand && hand[gn] ? hand[gn]
                      : wk_srctree_get(&self->sources, self->nodes[got], roots, (int)nroots, cache);
        if (!x) goto finish;
        inputs[got] = Py_NewRef(x);
    }
    rc = 0;
finish:
    if (rc < 0)
        for (int i = 0; i < got; i++) Py_DECREF(inputs[i]);
    for (int i = 0; i < nn; i++) Py_XDECREF(cache[i]);
    if (cache != stack) free(cache);
    for (int i = 0; i < nhand; i++) Py_XDECREF(hand[i]);
    free(hand);
    return rc;
}

#define INPUTS_ON_STACK 64

/* t's storage as [*start, *start + *nbytes); 0, or -1 with an exception. */
static int storage_range(PyObject *t, long long *start, long long *nbytes) {
    PyObject *st = PyObject_CallMethod(t, "untyped_storage", NULL);
    PyObject *p = st ? PyObject_CallMethod(st, "data_ptr", NULL) : NULL;
    PyObject *nb = p ? PyObject_CallMethod(st, "nbytes", NULL) : NULL;
    if (nb) {
        *start = PyLong_AsLongLong(p);
        *nbytes = PyLong_AsLongLong(nb);
    }
    Py_XDECREF(st);
    Py_XDECREF(p);
    Py_XDECREF(nb);
    return !nb || PyErr_Occurred() ? -1 : 0;
}

/* Capture read each written input as one tensor of its own: another input
 * from another source that is the same tensor or shares its storage (its
 * first element lies in the written storage: storages do not overlap) would
 * see the write in eager, not in the graph. Then raise before the graph
 * runs (the transformed code's handler runs the frame eagerly). 0 or -1. */
static int check_written_alone(LoaderObject *self, PyObject *const *inputs) {
    for (int k = 0; k < self->nwritten; k++) {
        int w = self->written[k];
        long long start = 0, nbytes = 0;
        if (storage_range(inputs[w], &start, &nbytes) < 0) return -1;
        for (int i = 0; i < self->ninputs; i++) {
            if (i == w || (self->roots[i] == self->roots[w] && self->nodes[i] == self->nodes[w])) continue;
            int alias = inputs[i] == inputs[w];
            if (!alias && nbytes > 0) {
                PyObject *p = PyObject_CallMethod(inputs[i], "data_ptr", NULL);
                long long at = p ? PyLong_AsLongLong(p) : -1;
                Py_XDECREF(p);
                if (at == -1 && PyErr_Occurred()) return -1;
                alias = at >= start && at < start + nbytes;
            }
            if (alias) {
                PyErr_SetString(PyExc_RuntimeError,
                                "wick: a tensor the frame writes in place shares memory with another graph input");
                return -1;
            }
        }
    }
    return 0;
}

static PyObject *loader_vectorcall(PyObject *self_obj, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    LoaderObject *self = (LoaderObject *)self_obj;
    Py_ssize_t nroots = PyVectorcall_NARGS(nargsf);
    if (kwnames && PyTuple_GET_SIZE(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "wick: GraphLoader takes positional roots only");
        return NULL;
    }
    PyObject *stack[INPUTS_ON_STACK + 1];
    PyObject **inputs = self->ninputs + 1 <= INPUTS_ON_STACK + 1 ? stack
                                                                 : wk_xcalloc((size_t)self->ninputs + 1, sizeof(PyObject *));
    PyObject *res = NULL;
    int got = 0;
    if (resolve_inputs(self, args, nroots, inputs + 1) < 0) goto finish;
    got = self->ninputs;
    if (self->nwritten && check_written_alone(self, inputs + 1) < 0) goto finish;
    res = PyObject_Vectorcall(self->compiled, inputs + 1, (size_t)self->ninputs | PY_VECTORCALL_ARGUMENTS_OFFSET,
                              NULL);
finish:
    for (int i = 0; i < got; i++) Py_DECREF(inputs[1 + i]);
    if (inputs != stack) free(inputs);
    return res;
}

static void loader_dealloc(PyObject *self_obj) {
    LoaderObject *self = (LoaderObject *)self_obj;
    PyObject_GC_UnTrack(self_obj);
    Py_CLEAR(self->compiled);
    wk_srctree_clear(&self->sources);
    free(self->nodes);
    free(self->roots);
    free(self->arg_of_root);
    free(self->guard_nodes);
    free(self->written);
    Py_TYPE(self_obj)->tp_free(self_obj);
}

static int loader_traverse(PyObject *self_obj, visitproc visit, void *arg) {
    Py_VISIT(((LoaderObject *)self_obj)->compiled);
    return 0;
}

/* loader.compiled: the graph it calls (benchmarks time it directly) */
static PyObject *loader_get_compiled(PyObject *self_obj, void *closure) {
    (void)closure;
    return Py_NewRef(((LoaderObject *)self_obj)->compiled);
}

/* loader.inputs(*roots): the graph inputs it would pass, as a list */
static PyObject *loader_inputs(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs) {
    LoaderObject *self = (LoaderObject *)self_obj;
    PyObject **inputs = wk_xcalloc((size_t)self->ninputs + 1, sizeof(PyObject *));
    PyObject *list = NULL;
    if (resolve_inputs(self, args, nargs, inputs) == 0) {
        list = PyList_New(self->ninputs);
        for (int i = 0; i < self->ninputs; i++) {
            if (list) PyList_SET_ITEM(list, i, inputs[i]);
            else Py_DECREF(inputs[i]);
        }
    }
    free(inputs);
    return list;
}

static PyGetSetDef loader_getset[] = {
    {"compiled", loader_get_compiled, NULL, "the compiled graph this loader calls", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef loader_methods[] = {
    {"inputs", (PyCFunction)(void (*)(void))loader_inputs, METH_FASTCALL,
     "inputs(*roots) -> the list of graph inputs resolved from the roots"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject Loader_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "wick._C.GraphLoader",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Resolves a captured frame's graph inputs from its roots in C and calls the compiled graph.",
    .tp_dealloc = loader_dealloc,
    .tp_traverse = loader_traverse,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(LoaderObject, vectorcall),
    .tp_getset = loader_getset,
    .tp_methods = loader_methods,
};

PyObject *wk_loader_new_Ref(PyObject *compiled, const int *input_roots, PyObject *const *input_paths, int ninputs,
                            const int *arg_of_root, int nroots) {
    if (!(Loader_Type.tp_flags & Py_TPFLAGS_READY) && PyType_Ready(&Loader_Type) < 0) return NULL;
    LoaderObject *self = PyObject_GC_New(LoaderObject, &Loader_Type);
    if (!self) return NULL;
    self->vectorcall = loader_vectorcall;
    self->compiled = Py_NewRef(compiled);
    self->ninputs = ninputs;
    self->roots = wk_xcalloc((size_t)ninputs + 1, sizeof(int));
    self->nodes = wk_xcalloc((size_t)ninputs + 1, sizeof(int));
    memset(&self->sources, 0, sizeof self->sources);
    for (int i = 0; i < ninputs; i++) {
        PyObject *path = input_paths && input_paths[i] && PyTuple_Check(input_paths[i]) ? input_paths[i] : NULL;
        self->roots[i] = input_roots[i];
        self->nodes[i] = wk_srctree_node(&self->sources, input_roots[i], path);
    }
    self->nroots = nroots;
    self->arg_of_root = wk_xcalloc((size_t)nroots + 1, sizeof(int));
    for (int r = 0; r < nroots; r++) self->arg_of_root[r] = arg_of_root[r];
    self->token = 0;
    self->guard_nodes = NULL;
    self->nwritten = 0;
    self->written = NULL;
    PyObject_GC_Track((PyObject *)self);
    return (PyObject *)self;
}

int wk_loader_set_written(PyObject *loader, const int *inputs, int n) {
    if (Py_TYPE(loader) != &Loader_Type) {
        PyErr_SetString(PyExc_SystemError, "wick: not a GraphLoader");
        return -1;
    }
    LoaderObject *self = (LoaderObject *)loader;
    for (int k = 0; k < n; k++)
        if (inputs[k] < 0 || inputs[k] >= self->ninputs) {
            PyErr_SetString(PyExc_SystemError, "wick: a written input out of range");
            return -1;
        }
    free(self->written);
    self->written = wk_xcalloc((size_t)n + 1, sizeof(int));
    memcpy(self->written, inputs, sizeof(int) * (size_t)n);
    self->nwritten = n;
    return 0;
}

int wk_loader_share(PyObject *code, WkGuards *g) {
    PyObject *consts = code && PyCode_Check(code) ? ((PyCodeObject *)code)->co_consts : NULL;
    for (Py_ssize_t i = 0; consts && i < PyTuple_GET_SIZE(consts); i++) {
        PyObject *c = PyTuple_GET_ITEM(consts, i);
        if (Py_TYPE(c) != &Loader_Type) continue;
        LoaderObject *self = (LoaderObject *)c;
        int *nodes = wk_xcalloc((size_t)self->ninputs + 1, sizeof(int));
        for (int k = 0; k < self->ninputs; k++) {
            int arg = self->arg_of_root[self->roots[k]];
            /* the path, rebuilt from the loader's own tree: root to node */
            PyObject *path = NULL;
            int depth = 0;
            for (int n = self->nodes[k]; n >= 0; n = self->sources.nodes.data[n].parent) depth++;
            if (arg >= 0 && depth > 0 && (path = PyTuple_New(depth)) != NULL) {
                int at = depth;
                for (int n = self->nodes[k]; n >= 0; n = self->sources.nodes.data[n].parent)
                    PyTuple_SET_ITEM(path, --at, Py_NewRef(self->sources.nodes.data[n].elem));
            }
            if (arg >= 0 && depth > 0 && !path) {
                free(nodes);
                return -1;
            }
            nodes[k] = path ? wk_guards_input_node(g, arg, path) : -1;
            Py_XDECREF(path);
        }
        free(self->guard_nodes);
        self->guard_nodes = nodes;
        self->token = wk_guards_token(g);
    }
    return 0;
}
