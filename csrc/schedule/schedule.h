/* schedule.h — loop-IR buffers grouped into kernels: which buffers are
 * materialised, which pointwise work is inlined (recomputed) into which
 * kernel, and the loop nest each kernel runs. Target-neutral: the C backend
 * turns a kernel into loops, a GPU backend would turn it into blocks.
 *
 * Types and functions, grouped by the file that implements them:
 *   schedule.c     WkSchedule lifetime, the flat pass order, printing, verifier
 *   materialise.c  fill_materialised: which values get memory, the buffer plan
 *   fuse.c         kernels: grouping, inlining, loads -> READs, dim collapsing
 *   rows.c         row groups: consecutive kernels sharing their outer loop
 *   temps.c        TEMP buffers placed in one block, sharing bytes by liveness
 *
 * Kernel loop variables. A kernel iterates the loop IR's i0..i{nloops-1}
 * (outer to inner) and, for a reduction, r0..r{nred-1} inside them. After
 * fuse.c, every expression in a kernel reads memory only through READ nodes
 * whose offset (in elements) is a WkSym over those variables, and each store
 * has an offset over i* only.
 *
 * Invariants (checked by wk_sched_check):
 *   - kernels are in execution order: a kernel READs only plan buffers that
 *     are INPUTs or stored by an earlier kernel, or stored by itself at the
 *     same offset it reads (never another iteration's element);
 *   - a REDUCTION kernel's stores[0].value is a REDUCE whose body uses r*;
 *     its other stores (epilogue) read only i* and the reduction's result;
 *   - every OUTPUT and TEMP buffer is stored by exactly one kernel;
 *   - in a row group, a kernel reads what an earlier phase of the group
 *     stored only where that phase stored it in the same iteration of i0
 *     (wk_sched_row_read_ok): at the same offset, a function of i0 alone,
 *     or within the row a [rows, cols] pointwise phase stored whole.
 *
 * Ownership: a WkSchedule borrows its WkLoopIR (expressions live in its
 * arena) and owns its arrays and strings. Free it before the loop IR.
 */
#ifndef WICK_SCHEDULE_H
#define WICK_SCHEDULE_H

#include "../lower/lower.h"
#include "../codegen/program.h"

typedef struct {
    int buf;                 /* plan buffer written */
    int value;               /* graph value stored */
    const WkSym *offset;     /* element offset over the kernel's i* */
    const WkLExpr *expr;     /* what is stored (REDUCE for a reduction's own store) */
} WkSchedStore;

typedef enum { WK_SCHED_POINTWISE, WK_SCHED_REDUCTION } WkSchedKind;

typedef struct {
    WkSchedKind kind;
    int nloops;                      /* loops over i0.. (output space) */
    int64_t sizes[WK_MAX_DIMS];
    int nred;                        /* loops over r0.. inside them */
    int64_t red_sizes[WK_MAX_DIMS];
    int reduce_outer;                /* REDUCTION: reads walk the innermost output loop
                                        contiguously and the reduction loops with a
                                        stride (a column sum): vectorise across outputs */
    int64_t numel;                   /* product of sizes */
    int64_t red_numel;               /* product of red_sizes (1 without) */
    int nstores;
    WkSchedStore *stores;
    char *desc;                      /* the ops fused into it, in graph order */
    int group;                       /* rows.c: first kernel of its row group (itself if alone);
                                        a group's kernels are consecutive and share loop i0 */
} WkSchedKernel;

typedef struct WkSchedule {
    WkLoopIR *L;                     /* borrowed */
    int nbufs;
    WkBufferPlan *bufs;              /* the plan handed to the runtime */
    int *buf_value;                  /* [nbufs] loop-IR buffer each plan buffer holds */
    int *value_buf;                  /* [L->nbufs] plan buffer of a loop-IR buffer, -1 if inlined
                                        ("value" here is a loop-IR buffer id: internal buffers of
                                        decompositions have no graph value) */
    int noutputs;
    int *output_buf;                 /* [noutputs] */
    int nkernels;
    WkSchedKernel *kernels;
    int64_t temps_bytes;             /* temps.c: the TEMP block (bufs[].offset place each TEMP) */
    int gpu;                         /* materialise.c: recomputation judged per consumer kernel, not
                                        per broadcast copy (a GPU kernel that streams memory has
                                        arithmetic to spare; a materialised vector costs a launch) */
} WkSchedule;

/* schedule.c */
/* Runs materialise, fuse, fuse_rows. NULL with wk_error set on failure. */
WkSchedule *wk_sched_build(WkLoopIR *L);
/* The same for a target: gpu != 0 sets WkSchedule.gpu (the Triton target). */
WkSchedule *wk_sched_build_for(WkLoopIR *L, int gpu);
void wk_sched_free(WkSchedule *S);
char *wk_sched_print(const WkSchedule *S); /* caller frees */
int wk_sched_check(const WkSchedule *S);   /* 0, or -1 with wk_error set */

/* materialise.c */
int wk_sched_materialise(WkSchedule *S);
/* Weighted op count of a value's body with every non-materialised
 * pointwise producer inlined: the recompute cost of one element. */
int wk_sched_inline_cost(WkSchedule *S, int value);

/* fuse.c */
int wk_sched_fuse(WkSchedule *S);

/* rows.c */
int wk_sched_fuse_rows(WkSchedule *S);
/* Whether kernel Kr, a later phase of the row group of kernel Ks, may read
 * Ks's store st at offset `read` (over Kr's loop variables): the element
 * read is one Ks stored in the same iteration of i0. */
int wk_sched_row_read_ok(const WkSchedule *S, const WkSchedKernel *Ks, const WkSchedStore *st,
                         const WkSchedKernel *Kr, const WkSym *read);

/* temps.c: after fuse_rows (a row group's kernels run interleaved, so a
 * TEMP touched in a group is live for all of it). Sets bufs[].offset of
 * every TEMP and temps_bytes. */
void wk_sched_place_temps(WkSchedule *S);

#endif /* WICK_SCHEDULE_H */
