/* graph.h — the graph IR, where capture and compile meet.
 *
 * Types, grouped by the file that implements them:
 *   sym.c    symbolic integer expressions (sizes, strides, loop indices)
 *   graph.c  dtypes, values, nodes, graphs; the builder runs each op's shape
 *            and dtype rule from ops.def as nodes are added
 *   ops.c    the op table's metadata (names, kinds, signatures, torch names)
 *
 * Python-free: this layer builds into C unit tests without an interpreter.
 *
 * Ownership: a WkGraph owns everything reachable from it (values, nodes,
 * attributes, strings, its WkSymPool). Pointers returned by accessors are
 * borrowed and valid until wk_graph_free().
 */
#ifndef WICK_GRAPH_H
#define WICK_GRAPH_H

#include "../common/common.h"

/* ---- dtypes (graph.c) -------------------------------------------------- */
/*       name  C type     torch name   bytes  category: 0 bool, 1 integral, 2 floating, 3 complex
 *
 * Complex values are carried, never computed: a graph may hold them as
 * inputs, extern outputs and graph outputs (an FFT, torch.polar), but no
 * table op reads or makes one (wk_dtype_supported is 0 for them, so the
 * builder refuses such a node and the ATen importer makes it an extern
 * call). Their C type column is void: no kernel has a C type for them. */
#define WK_DTYPE_TABLE(X)                            \
    X(BOOL, uint8_t, "bool", 1, 0)                   \
    X(U8, uint8_t, "uint8", 1, 1)                    \
    X(I8, int8_t, "int8", 1, 1)                      \
    X(I16, int16_t, "int16", 2, 1)                   \
    X(I32, int32_t, "int32", 4, 1)                   \
    X(I64, int64_t, "int64", 8, 1)                   \
    X(F16, uint16_t, "float16", 2, 2)                \
    X(BF16, uint16_t, "bfloat16", 2, 2)              \
    X(F32, float, "float32", 4, 2)                   \
    X(F64, double, "float64", 8, 2)                  \
    X(C32, void, "complex32", 4, 3)                  \
    X(C64, void, "complex64", 8, 3)                  \
    X(C128, void, "complex128", 16, 3)

typedef enum {
#define WK_DT_ENUM(name, ctype, tname, bytes, cat) WK_##name,
    WK_DTYPE_TABLE(WK_DT_ENUM)
#undef WK_DT_ENUM
    WK_NDTYPES
} WkDType;

const char *wk_dtype_name(WkDType dt);       /* torch spelling: "float32" */
int wk_dtype_from_name(const char *name);    /* -1 if unknown */
int wk_dtype_size(WkDType dt);
int wk_dtype_is_float(WkDType dt);
int wk_dtype_is_integral(WkDType dt);        /* bool excluded */
int wk_dtype_is_complex(WkDType dt);
/* torch.promote_types (complex included: complex32 with float32 is
 * complex64, with int64 complex32) */
WkDType wk_dtype_promote(WkDType a, WkDType b);
/* The dtypes the code generators handle: all but the complex ones
 * (float16/bfloat16 load into float32 and round to nearest even on store).
 * A table op reading or making another dtype makes the graph builder fail
 * with a clear reason (capture falls back, the ATen importer calls the op
 * through PyTorch); lowering and the code generators refuse them again. */
int wk_dtype_supported(WkDType dt);

typedef enum { WK_DEV_CPU = 0, WK_DEV_CUDA = 1 } WkDeviceType;
typedef struct { WkDeviceType type; int index; } WkDevice;

/* ---- symbolic integers (sym.c) ---------------------------------------- */
/* Immutable and hash-consed within their pool: two structurally equal
 * expressions are the same pointer, so `a == b` is equality. Constructors
 * simplify (constant folding, x+0, x*1, x*0, sums of constants collected,
 * nested constant products merged) and keep a canonical operand order. */
typedef enum {
    WK_SYM_CONST,
    WK_SYM_VAR,      /* a named integer: a dynamic size, or a loop index */
    WK_SYM_ADD,
    WK_SYM_MUL,
    WK_SYM_FLOORDIV, /* a // b, b > 0 */
    WK_SYM_MOD,      /* a % b, b > 0, result >= 0 for a >= 0 */
    WK_SYM_MIN,
    WK_SYM_MAX,
} WkSymKind;

typedef struct WkSym WkSym;
struct WkSym {
    WkSymKind kind;
    int64_t value;      /* CONST: the value */
    int var;            /* VAR: index into the pool's variable names */
    const WkSym *a, *b; /* operands of binary kinds */
    uint64_t hash;
};

typedef struct WkSymPool WkSymPool;
WkSymPool *wk_sympool_new(void);
void wk_sympool_free(WkSymPool *p);
const WkSym *wk_sym_const(WkSymPool *p, int64_t v);
/* A variable named `name` (copied); the same name gives the same variable. */
const WkSym *wk_sym_var(WkSymPool *p, const char *name);
const char *wk_sym_var_name(const WkSymPool *p, int var);
const WkSym *wk_sym_add(WkSymPool *p, const WkSym *a, const WkSym *b);
const WkSym *wk_sym_mul(WkSymPool *p, const WkSym *a, const WkSym *b);
const WkSym *wk_sym_floordiv(WkSymPool *p, const WkSym *a, const WkSym *b);
const WkSym *wk_sym_mod(WkSymPool *p, const WkSym *a, const WkSym *b);
const WkSym *wk_sym_min(WkSymPool *p, const WkSym *a, const WkSym *b);
const WkSym *wk_sym_max(WkSymPool *p, const WkSym *a, const WkSym *b);
int wk_sym_is_const(const WkSym *s, int64_t *out); /* 1 and *out set if constant */
/* s rewritten knowing that var vars[k] ranges over [0, extents[k]) (loop
 * indices): divisions and remainders that cancel go, so a composed view's
 * index becomes affine where it is. Other variables are left as they are.
 * Equal to s for every value of the variables within those ranges. */
const WkSym *wk_sym_simplify_bounded(WkSymPool *p, const WkSym *s, const int *vars, const int64_t *extents,
                                     int n);
/* Evaluates with var i bound to values[i]; values may be NULL if s has no vars. */
int64_t wk_sym_eval(const WkSym *s, const int64_t *values);
/* Appends C syntax for s to out; `var_name` maps a var to its C spelling
 * (NULL uses the pool's names). Integer arithmetic is int64_t. */
void wk_sym_to_c(const WkSymPool *p, const WkSym *s, WkStr *out,
                 const char *(*var_name)(void *ctx, int var), void *ctx);

/* ---- ops (ops.c, table in ops.def) ------------------------------------ */
/* push/pop keep a WK_OP that an includer defined for its own expansion */
#pragma push_macro("WK_OP")
#undef WK_OP
typedef enum {
#define WK_OP(name, kind, arity, shape, dtype, sig, torch) WK_OP_##name,
#include "ops.def"
#undef WK_OP
    WK_NOPS,
    /* Not a table op: a node that calls PyTorch at run time (see "Extern
     * nodes" below). It has no lowering; the pipeline cuts the graph around
     * it. Arrays indexed by op (sized WK_NOPS) never see it. */
    WK_OP_EXTERN = WK_NOPS
} WkOp;
#pragma pop_macro("WK_OP")

typedef enum { WK_KIND_POINTWISE, WK_KIND_REDUCTION, WK_KIND_CONSTANT, WK_KIND_EXTERN } WkOpKind;
typedef enum { WK_SHAPE_BROADCAST, WK_SHAPE_REDUCE, WK_SHAPE_SAME_DIM, WK_SHAPE_SCALAR, WK_SHAPE_VIEW,
               WK_SHAPE_CAT, WK_SHAPE_PAD, WK_SHAPE_INDEX, WK_SHAPE_GATHER, WK_SHAPE_ONE_HOT,
               WK_SHAPE_SIZES, WK_SHAPE_SCATTER } WkShapeRule;
typedef enum {
    WK_DTR_PROMOTE, WK_DTR_PROMOTE_FLOAT, WK_DTR_COMPARE, WK_DTR_WHERE, WK_DTR_SUM,
    WK_DTR_SAME, WK_DTR_SAME_NOBOOL, WK_DTR_FLOAT_ONLY, WK_DTR_FLOAT_FIRST, WK_DTR_INTEGRAL,
    WK_DTR_SQUARE, WK_DTR_MASKED, WK_DTR_ANY, WK_DTR_INDEX, WK_DTR_VAR, WK_DTR_ATTR
} WkDTypeRule;

typedef struct {
    const char *name;      /* "ADD" */
    WkOpKind kind;
    int arity;             /* tensor inputs; -1: any number (a variadic op such as cat) */
    WkShapeRule shape;
    WkDTypeRule dtype;
    const char *signature; /* "input, other, *, alpha=1" */
    const char *torch;     /* space-separated: "torch.add Tensor.add" */
} WkOpInfo;

/* The row of a table op, or the EXTERN pseudo-row (name "EXTERN", kind
 * WK_KIND_EXTERN, arity -1) for WK_OP_EXTERN; NULL for anything else. */
const WkOpInfo *wk_op_info(WkOp op);
int wk_op_from_name(const char *name); /* "ADD" or "add"; -1 if unknown */

/* ---- graph (graph.c) --------------------------------------------------- */
typedef struct {
    WkDType dtype;     /* for SCALAR/CONVERT, and SUM/MEAN's dtype= (else -1 casted: see has_dtype) */
    int has_dtype;
    int ndims;         /* REDUCE: number of dims in dims[]; 0 means all dims */
    int dims[WK_MAX_DIMS]; /* REDUCE: normalised to 0..ndim-1, sorted, unique */
    int keepdim;
    double fvalue;     /* SCALAR: value when dtype is floating; VAR/STD: the correction when ivalue is 1 */
    int64_t ivalue;    /* SCALAR: value when dtype is integral or bool; INDEX: an embedding's
                          padding_idx + 1 (0: none; ops.def note 11); VAR/STD: 1 if fvalue is
                          set (zeroed attrs mean torch's default correction, 1) */
    /* An open-ended int list (sizes, a permutation, dims, slice bounds...)
     * for ops that need one. The builder copies it into the graph: the
     * caller's array may be freed after wk_graph_op returns. Kept only when
     * nints > 0; printed as ints=[...] and hashed. */
    int nints;
    const int64_t *ints;
    /* The device of a node whose inputs are all scalars (FULL, ARANGE: a
     * causal mask built on CUDA); without it such a node is on the CPU.
     * Ignored for a node with a tensor input (it goes with its inputs). */
    int has_device;
    WkDevice device;
} WkAttrs;

/* A value is a tensor produced by a graph input or a node. */
typedef struct {
    int id;                 /* index in the graph's values */
    WkDType dtype;
    WkDevice device;
    int ndim;
    const WkSym *sizes[WK_MAX_DIMS];
    const WkSym *strides[WK_MAX_DIMS]; /* inputs and EXTERN outputs: as given by the builder;
                                          other node outputs: contiguous */
    int requires_grad;
    int is_wrapped_number;  /* a Python scalar made a 0-d value: weaker in type promotion */
    int node;               /* producing node index, or -1 for a graph input */
    int node_output;        /* which output of that node it is (0 for single-output nodes) */
    int input_index;        /* position among graph inputs, or -1 */
    const char *source;     /* inputs: how to fetch it from the frame, e.g. "L['x']" */
} WkValue;

/* A node reads any number of values and defines one or more values. Its
 * arrays live in the graph's arena. outputs[0] == output; a multi-output
 * node's outputs have consecutive value ids. */
typedef struct {
    WkOp op;
    int ninputs;
    int *inputs;            /* value ids, ninputs of them */
    int output;             /* value id of the first (usually only) output */
    int noutputs;
    int *outputs;           /* value ids */
    WkAttrs attrs;          /* attrs.ints points into the graph's arena */
    int extern_index;       /* EXTERN: which entry of the extern table it calls; else -1 */
    const char *extern_name;/* EXTERN: for printing and logs ("aten.mm"); else NULL */
} WkNode;

typedef struct WkGraph WkGraph;

WkGraph *wk_graph_new(void);
void wk_graph_free(WkGraph *g);
WkSymPool *wk_graph_syms(WkGraph *g);

/* Adds an input tensor. sizes/strides are concrete; dynamic inputs use
 * wk_graph_input_sym. Returns the value id, or -1 (wk_error set) for an
 * unsupported dtype or rank. */
int wk_graph_input(WkGraph *g, WkDType dt, WkDevice dev, int ndim, const int64_t *sizes,
                   const int64_t *strides, int requires_grad, const char *source);
int wk_graph_input_sym(WkGraph *g, WkDType dt, WkDevice dev, int ndim, const WkSym *const *sizes,
                       const WkSym *const *strides, int requires_grad, const char *source);
/* A Python scalar as a 0-d wrapped-number value: dt is BOOL, I64 or F64. */
int wk_graph_scalar(WkGraph *g, WkDType dt, double fvalue, int64_t ivalue);
/* torch.result_type of values: dimensioned tensors outrank 0-d tensors,
 * which outrank wrapped Python numbers, unless the weaker group is of a
 * higher category (bool < integral < floating). The one implementation:
 * dtype rules and lowerings both call it. */
WkDType wk_result_type(const WkValue *const *values, int n);
/* Appends a node; runs the op's shape and dtype rules. Returns the output
 * value id, or -1 with wk_error set to a message torch users recognise
 * ("where: condition must be bool", "amax: reduction over zero elements"). */
int wk_graph_op(WkGraph *g, WkOp op, const int *inputs, int ninputs, const WkAttrs *attrs);
/* ---- Extern nodes ----
 * An EXTERN node calls PyTorch at run time (matmul, convolution, attention,
 * views, any op wick does not lower). The Python-free core sees only:
 *   - its tensor inputs (value ids; wrapped-number scalars are refused:
 *     Python constants belong in the call template, see runtime.h);
 *   - the metadata of each output (dtype, device, sizes, strides,
 *     requires_grad), which the builder supplies (from fake tensors or meta
 *     functions) and the runtime enforces: kernels that read an extern
 *     output index it with exactly these strides;
 *   - an integer extern index: item `extern_index` of the extern table the
 *     caller hands to the runtime with the graph (wk_rt_compile_externs_Ref
 *     or Graph.compile(externs=...)). Several nodes may share an index.
 * Output k of the node is value id (returned id + k). An extern may return a
 * view of its input (transpose) or a tuple (native_layer_norm); the table
 * entry says which tuple items are the node's outputs. Extern outputs may
 * have dtypes the code generator does not support (float16): such a value
 * can flow to other externs and to graph outputs, and wk_graph_op refuses
 * a node that would read it. */
typedef struct {
    WkDType dtype;
    WkDevice device;
    int ndim;
    int64_t sizes[WK_MAX_DIMS];
    int64_t strides[WK_MAX_DIMS];  /* in elements */
    int requires_grad;
} WkTensorMeta;

/* Appends an EXTERN node. `name` (copied; may be NULL) is for printing.
 * Returns the value id of output 0 (outputs are consecutive ids), or -1
 * with wk_error set. noutputs may be 0 (an extern called for effect is not
 * supported: it would be dropped; so 0 is refused). */
int wk_graph_extern(WkGraph *g, int extern_index, const char *name, const int *inputs, int ninputs,
                    const WkTensorMeta *outputs, int noutputs);
/* The same with an int list kept in the node's attrs (hashed with the graph):
 * what the compiler may know of the call's constant arguments, so that it
 * can replace the call by generated code (codegen/pipeline.c: the embedding
 * backward, ints = [padding_idx, scale_grad_by_freq]). */
int wk_graph_extern_ints(WkGraph *g, int extern_index, const char *name, const int *inputs, int ninputs,
                         const WkTensorMeta *outputs, int noutputs, const int64_t *ints, int nints);
/* Adds a graph input whose dtype the code generator may not support (it can
 * only flow to externs and outputs). Otherwise like wk_graph_input. */
int wk_graph_input_any(WkGraph *g, WkDType dt, WkDevice dev, int ndim, const int64_t *sizes,
                       const int64_t *strides, int requires_grad, const char *source);
/* Number of EXTERN nodes, and one more than the largest extern index (0 if none). */
int wk_graph_nexterns(const WkGraph *g);
int wk_graph_extern_table_size(const WkGraph *g);

/* ---- views ----
 * How a VIEW (ops.def note 8) reads its base: for each base dim k, the base
 * index as a function of the view index i0..i{n-1}.
 *   affine: base index k = base_off[k] + sum over view dims d with
 *           dim_of[d] == k of mult[d] * i_d (dim_of[d] == -1: dim d moves
 *           nothing: size 1 or stride 0). Permute, expand, slice, select,
 *           squeeze/unsqueeze and reshapes that split dims are affine.
 *   linear: (a contiguous base) the element number s = offset + sum i_d *
 *           strides[d], base index k = (s / stride_k) % size_k. Reshapes
 *           that merge dims need it.
 * Both are exact for every in-range view index (wk_view_map verifies it).
 * Base sizes/strides are those of the VIEW node's input value. */
typedef struct {
    int affine;
    int64_t base_off[WK_MAX_DIMS];
    int dim_of[WK_MAX_DIMS];
    int64_t mult[WK_MAX_DIMS];
} WkViewMap;
/* 0 and *m filled, or -1 with wk_error set when the view leaves the base's
 * memory or neither form expresses it. */
int wk_view_map(int bnd, const int64_t *bsizes, const int64_t *bstrides, int vnd, const int64_t *vsizes,
                const int64_t *vstrides, int64_t offset, WkViewMap *m);
/* attrs.ints of a VIEW node, unpacked; -1 (wk_error set) if malformed. */
int wk_view_attrs(const WkAttrs *at, int *ndim, const int64_t **sizes, const int64_t **strides, int64_t *offset);

/* Marks a value as the next graph output (a value may be output twice). */
int wk_graph_output(WkGraph *g, int value);

int wk_graph_nvalues(const WkGraph *g);
int wk_graph_nnodes(const WkGraph *g);
int wk_graph_ninputs(const WkGraph *g);
int wk_graph_noutputs(const WkGraph *g);
const WkValue *wk_graph_value(const WkGraph *g, int id);
const WkNode *wk_graph_node(const WkGraph *g, int index);
int wk_graph_input_value(const WkGraph *g, int i);  /* value id of input i */
int wk_graph_output_value(const WkGraph *g, int i); /* value id of output i */
/* Number of nodes reading value id (outputs not counted). */
int wk_graph_nusers(const WkGraph *g, int value);
/* Node `node` reads `value` where it read input k: value must be defined
 * before the node and hold the same tensor (dtype, device, sizes; strides
 * may differ), as a copy in another layout does for a node that reads by
 * logical index (any but VIEW and EXTERN: capture's layout pass, vals/views.c).
 * 0, or -1 with wk_error set. */
int wk_graph_replace_input(WkGraph *g, int node, int k, int value);

/* A copy of g with the same inputs (in order), nodes and outputs. With
 * extra_outputs (NULL: none), node n of g gains extra_outputs[n] outputs
 * after its own (extern nodes only), described by the next entries of
 * extra_metas (node order). value_map (g's nvalues entries, caller's) gets
 * each value's id in the copy; node n's extra output k is the id of its
 * last own output + 1 + k. New graph (caller frees), or NULL with wk_error
 * set (a symbolic size, an extra output on a table op, a builder refusal). */
WkGraph *wk_graph_copy(const WkGraph *g, const int *extra_outputs, const WkTensorMeta *extra_metas, int *value_map);
/* A graph holding only g's inputs (in order); value_map as for
 * wk_graph_copy (-1 for the values of nodes). The start of a rewrite that
 * replays g's nodes one by one (wick/_graph_layout.py). New graph, or NULL
 * with wk_error set (a symbolic size). */
WkGraph *wk_graph_copy_inputs(const WkGraph *g, int *value_map);
/* Table node `node` of src appended to dst, reading `inputs` (dst's value
 * ids) with src's attributes; ndims >= 0 replaces attrs.dims by dims (a
 * reduction over permuted dims). The shape and dtype rules run again. Not
 * for EXTERN nodes (their outputs need metadata: wk_graph_extern_ints).
 * Returns the first output's id, or -1 with wk_error set. Borrows all. */
int wk_graph_replay(WkGraph *dst, const WkGraph *src, int node, const int *inputs, int ninputs, const int *dims,
                    int ndims);

/* Human-readable listing, one node per line; caller frees. Stable: used for
 * logs, explain() and the codegen replay tests. */
char *wk_graph_print(const WkGraph *g);
/* Structural hash of nodes, attrs and input metadata (not sources). */
uint64_t wk_graph_hash(const WkGraph *g);

#endif /* WICK_GRAPH_H */
