/* cgen.h — code generators from a schedule to source text (the codegen
 * layer's header; program.h is the contract with the runtime).
 *
 *   cgen_c.c    C + OpenMP + SIMD for CPUs
 *   cgen_triton.c  Triton (Python source of @triton.jit kernels) for GPUs
 *   pipeline.c  wk_compile_graph: lower -> schedule -> codegen, the flat driver
 *
 * The generated C needs (and says so in its first comment):
 *   cc -O2 -march=native -fopenmp -fno-math-errno -fPIC -shared ... -lmvec -lm
 * It is correct without -fopenmp (pragmas ignored, serial, no libmvec calls).
 */
#ifndef WICK_CGEN_H
#define WICK_CGEN_H

#include "../schedule/schedule.h"

/* The flags the generated C is written for; the runtime's cc.c may use them.
 * WK_CGEN_C_EXTRA is also requested by the source itself on a
 * `wick-cflags:` line (512-bit vectors: libmvec's AVX-512 exp/tanh are
 * ~1.5x faster than the 256-bit ones gcc picks by default). */
#define WK_CGEN_C_CFLAGS "-O2 -march=native -fopenmp -fno-math-errno -fPIC -shared"
#define WK_CGEN_C_EXTRA "-mprefer-vector-width=512"
#define WK_CGEN_C_LIBS "-lmvec -lm"

/* The OpenMP thread count CPU kernels will run with, for the C generated
 * from now on (process-wide): 1 emits no parallel regions (serial loops,
 * `omp simd` kept), 0 (unknown, the default) or more parallelises the loops
 * with enough work. The source differs, so does its cache key. */
void wk_cgen_c_set_threads(int n);

/* Appends the translation unit for S to out; its entry point is `entry`.
 * Returns 0, or -1 with wk_error set. */
int wk_cgen_c(const WkSchedule *S, const char *entry, WkStr *out);

/* Appends @triton.jit kernels for S, named <prefix>_k<i>, to out, and
 * returns their launch descriptions (new array of *nkernels, owned by the
 * caller: free each name and params, then the array). The module prelude
 * (imports and helper functions) is wk_cgen_triton_prelude(), emitted once
 * per module. When no graph value is float64, the loop IR's internal float64
 * (decompositions' accumulators) is computed in float32 and S's float64
 * TEMP buffers are retyped float32. Returns 0, or -1 with wk_error set. */
int wk_cgen_triton(const WkSchedule *S, const char *prefix, WkStr *out, WkTritonKernel **kernels,
                   int *nkernels);
const char *wk_cgen_triton_prelude(void);

#endif /* WICK_CGEN_H */
