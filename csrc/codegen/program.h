/* program.h — what the compiler pipeline hands to the runtime: one C
 * translation unit plus the plan of buffers its entry point expects.
 *
 *   wk_compile_graph (csrc/codegen/pipeline.c) runs, in order:
 *     lower    (csrc/lower/)    graph nodes -> loop-IR buffers, define-by-run
 *     schedule (csrc/schedule/) buffers -> kernels: fusion, materialisation
 *     codegen  (csrc/codegen/)  kernels -> C with OpenMP + SIMD loops
 *
 * Python-free. The generated source exports one function
 *     int <entry>(void **buffers);
 * which returns nonzero when a kernel met an index out of range (an indirect
 * load's BOUND check, lower.h); the runtime then raises IndexError.
 * where buffers[i] is the data pointer (already offset by the storage
 * offset) of plan buffer i. The runtime allocates OUTPUT buffers and one
 * block of temps_bytes for the TEMP buffers (each at its plan offset),
 * passes INPUT data pointers, and returns outputs.
 *
 * Ownership: a WkProgram owns its strings and arrays; free with
 * wk_program_free. It does not point into the graph it came from.
 */
#ifndef WICK_PROGRAM_H
#define WICK_PROGRAM_H

#include "../graph/graph.h"

typedef enum { WK_BUF_INPUT, WK_BUF_OUTPUT, WK_BUF_TEMP } WkBufKind;

/* Code generation targets, both fed by the same loop IR and schedule:
 *   C       one C translation unit (OpenMP + SIMD) for CPU tensors;
 *   TRITON  one Python module of @triton.jit kernels for CUDA tensors (or,
 *           under TRITON_INTERPRET=1, CPU tensors run by Triton's
 *           interpreter); the runtime compiles each kernel with Triton and
 *           launches it through the CUDA driver API. */
typedef enum { WK_TARGET_C, WK_TARGET_TRITON } WkTarget;

/* One Triton kernel of a TRITON program: a launch of ceil(xnumel / XBLOCK)
 * programs whose pointer arguments are the plan buffers params[0..nparams),
 * in order. XBLOCK (and RBLOCK when has_r) are constexpr parameters chosen
 * from configs: configs[0] is the default, the others are what the
 * autotuner times. A split reduction (few outputs, a long reduced extent) is
 * two launches: partials into a scratch buffer the runtime allocates, then
 * their reduction with the epilogue. */
enum { WK_TRITON_MAX_CONFIGS = 6 };
typedef struct { int xblock, rblock, num_warps; } WkTritonConfig;
typedef struct {
    char *name;
    int nparams;
    int *params;          /* -1: the scratch buffer (split reductions' partials) */
    int64_t xnumel;
    int has_r;
    int nconfigs;
    WkTritonConfig configs[WK_TRITON_MAX_CONFIGS];
    int scratch;          /* 0 none; 1 this launch gets a new scratch buffer of scratch_elems
                             elements of scratch_dtype; 2 it reads the previous launch's */
    int64_t scratch_elems;
    WkDType scratch_dtype;
} WkTritonKernel;

typedef struct {
    WkBufKind kind;
    int index;        /* INPUT: graph input position; OUTPUT: first graph output position it serves; TEMP: -1 */
    WkDType dtype;
    int ndim;
    int64_t sizes[WK_MAX_DIMS];
    int64_t strides[WK_MAX_DIMS]; /* in elements */
    int64_t nbytes;   /* storage the buffer spans (TEMP: what to allocate) */
    int64_t offset;   /* TEMP: byte offset in the program's block of temporaries; TEMPs
                         whose lifetimes (first store .. last read, in kernel order)
                         do not overlap share bytes */
} WkBufferPlan;

/* The bytes a buffer of these sizes and strides (in elements) spans from its
 * first element: what a plan's nbytes holds; 0 for an empty buffer. */
static inline int64_t wk_buffer_span_bytes(WkDType dt, int ndim, const int64_t *sizes, const int64_t *strides,
                                           int64_t numel) {
    if (numel == 0) return 0;
    int64_t span = 1;
    for (int d = 0; d < ndim; d++)
        if (sizes[d] > 1) span += (sizes[d] - 1) * (strides[d] < 0 ? -strides[d] : strides[d]);
    return span * wk_dtype_size(dt);
}

typedef struct {
    char *source;     /* the C translation unit */
    char *entry;      /* name of the exported entry function */
    int nbufs;
    WkBufferPlan *bufs;
    int noutputs;
    int *output_buf;  /* graph output i is buffer output_buf[i]; it may be an INPUT
                         buffer (the graph returns an input unchanged) or repeat */
    int nkernels;     /* loop nests in the source, for logs and explain() */
    char *summary;    /* one line per kernel: kind, fused nodes, iteration space */
    int64_t temps_bytes; /* the block all TEMP buffers live in (offsets 64-byte aligned; C target) */
    WkTarget target;
    int ntriton;      /* TRITON: the launches `entry` stands for, in order */
    WkTritonKernel *triton;
} WkProgram;

/* Lowers, schedules and generates code for g, a graph without EXTERN nodes.
 * Returns NULL with wk_error set when some node has no lowering for its
 * dtypes (capture then falls back), or when g has EXTERN nodes. */
WkProgram *wk_compile_graph(const WkGraph *g);
void wk_program_free(WkProgram *p);

/* A line a plan's C unit carries before each stage: the unit may be cut at
 * these lines into parts that compile on their own (each stage carries the
 * guarded prelude), which runtime/cc.c compiles in parallel. */
#define WK_CC_PART_MARK "/* wick-part */\n"

/* ---- plans: a program as a sequence of steps ----------------------------
 * wk_compile_plan accepts any graph, EXTERN nodes included. It cuts the
 * graph into alternating stages, kernels and externs:
 *
 *     KERNELS 0, EXTERN group 0, KERNELS 1, EXTERN group 1, ...
 *
 * Every non-extern node goes to the earliest KERNELS stage after all its
 * inputs exist (so pointwise work right after a matmul fuses with other
 * pointwise work of that stage); every extern to the earliest extern group
 * after its inputs (externs of one group keep graph order). Each KERNELS
 * stage is a subgraph compiled by wk_compile_graph into its own entry
 * point; all stages share one C translation unit (one .so per graph).
 * SCALAR (wrapped-number) nodes are copied into each stage that reads them,
 * so promotion is unchanged.
 *
 * Values that cross a stage boundary (graph inputs, extern outputs, kernel
 * results read by a later stage, graph outputs) are SLOTS: the runtime keeps
 * one tensor per slot during a call, and drops it after its last reader
 * (slot.last_step) unless it is a graph output. Values inside a stage stay
 * kernel temporaries.
 *
 * A KERNELS step runs `entry` with buffers laid out as program->bufs: an
 * INPUT buffer i of the stage program reads slot in_slots[bufs[b].index];
 * stage output j is written to slot out_slots[j] (its buffer is
 * program->output_buf[j]). An EXTERN step calls extern `extern_index` with
 * the tensors of in_slots, and stores its outputs into out_slots. The
 * kernels after an extern read its output with the slot's strides (the
 * node's metadata): the runtime checks the tensor it got against the slot
 * and copies it into that layout when the strides differ.
 *
 * VIEW nodes (ops.def note 8) are no step of their own where only kernels
 * read them: each KERNELS stage that reads one lowers it again over its
 * base (an index remap inside the kernels). Where a tensor is needed (an
 * extern reads the view, or it is a graph output), a VIEW step after the
 * base's producer makes it: in_slots[0] is the base, out_slots[0] the view,
 * and the runtime calls base.as_strided(slot sizes, slot strides,
 * base.storage_offset() + view_offset). The base slot is then checked
 * against its layout like a slot kernels read (read_by_kernels).
 *
 * Ownership: a WkPlan owns its steps, their programs and arrays; it does not
 * point into the graph. */
typedef enum { WK_STEP_KERNELS, WK_STEP_EXTERN, WK_STEP_VIEW } WkStepKind;

typedef struct {
    WkStepKind kind;
    int nin;
    int *in_slots;       /* KERNELS: slot of stage input i; EXTERN: slot of tensor input i */
    int nout;
    int *out_slots;      /* KERNELS: slot of stage output j; EXTERN: slot of output k */
    WkProgram *program;  /* KERNELS: the stage (its source is part of WkPlan.source) */
    int extern_index;    /* EXTERN */
    char *extern_name;   /* EXTERN */
    int64_t view_offset; /* VIEW: elements past the base's first element */
} WkStep;

typedef struct {
    WkDType dtype;
    int ndim;
    int64_t sizes[WK_MAX_DIMS];
    int64_t strides[WK_MAX_DIMS];
    int64_t numel;
    int input_index;     /* graph input position, or -1 */
    int value;           /* graph value id */
    int producer;        /* step that writes it; -1 for graph inputs */
    int last_step;       /* last step that reads it (-1: none) */
    int is_output;       /* a graph output: kept to the end */
    int read_by_kernels; /* a KERNELS or VIEW step reads it: an extern producing it must honour strides */
} WkSlot;

typedef struct {
    char *source;        /* all KERNELS stages, one translation unit; "" if none */
    int nslots;
    WkSlot *slots;
    int nsteps;
    WkStep *steps;
    int noutputs;
    int *output_slot;    /* graph output i is slot output_slot[i] */
    int nkernels;        /* loop nests over all stages */
    int nnative;         /* graph nodes compiled to kernels (SCALARs not counted) */
    int nextern;         /* EXTERN nodes */
    int nviews;          /* VIEW nodes (index remaps; VIEW steps where a tensor is needed) */
    char *summary;       /* one line per step (and per kernel) */
    WkTarget target;     /* TRITON: source is a Python module, steps' programs list their kernels */
} WkPlan;

/* NULL with wk_error set when a stage cannot be compiled, or a slot has
 * symbolic sizes. */
WkPlan *wk_compile_plan(const WkGraph *g);
/* wk_compile_plan for a target (wk_compile_plan is the C target). */
WkPlan *wk_compile_plan_for(const WkGraph *g, WkTarget target);
void wk_plan_free(WkPlan *p);

#endif /* WICK_PROGRAM_H */
