/* program.h — what the compiler pipeline hands to the runtime: one C
 * translation unit plus the plan of buffers its entry point expects.
 *
 *   wk_compile_graph (csrc/codegen/pipeline.c) runs, in order:
 *     lower    (csrc/lower/)    graph nodes -> loop-IR buffers, define-by-run
 *     schedule (csrc/schedule/) buffers -> kernels: fusion, materialisation
 *     codegen  (csrc/codegen/)  kernels -> C with OpenMP + SIMD loops
 *
 * Python-free. The generated source exports one function
 *     void <entry>(void **buffers);
 * where buffers[i] is the data pointer (already offset by the storage
 * offset) of plan buffer i. The runtime allocates OUTPUT and TEMP buffers,
 * passes INPUT data pointers, and returns outputs.
 *
 * Ownership: a WkProgram owns its strings and arrays; free with
 * wk_program_free. It does not point into the graph it came from.
 */
#ifndef WICK_PROGRAM_H
#define WICK_PROGRAM_H

#include "../graph/graph.h"

typedef enum { WK_BUF_INPUT, WK_BUF_OUTPUT, WK_BUF_TEMP } WkBufKind;

typedef struct {
    WkBufKind kind;
    int index;        /* INPUT: graph input position; OUTPUT: first graph output position it serves; TEMP: -1 */
    WkDType dtype;
    int ndim;
    int64_t sizes[WK_MAX_DIMS];
    int64_t strides[WK_MAX_DIMS]; /* in elements */
    int64_t nbytes;   /* storage the buffer spans (TEMP: what to allocate) */
} WkBufferPlan;

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
} WkProgram;

/* Lowers, schedules and generates code for g. Returns NULL with wk_error set
 * when some node has no lowering for its dtypes (capture then falls back). */
WkProgram *wk_compile_graph(const WkGraph *g);
void wk_program_free(WkProgram *p);

#endif /* WICK_PROGRAM_H */
