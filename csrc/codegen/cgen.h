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

/* bfloat16 in generated C: the high half of a float32; stores round to
 * nearest even (NaN stays a quiet NaN), as torch converts. Guarded: the
 * prelude and the hand-written plan steps (pipeline.c) may share a unit.
 * Needs <stdint.h> and <string.h>. */
#define WK_CGEN_C_BF16_TEXT \
    "#ifndef WICK_BF16\n" \
    "#define WICK_BF16\n" \
    "static inline float wk_bf16_to_f32(uint16_t h) {\n" \
    "    uint32_t u = (uint32_t)h << 16;\n" \
    "    float f;\n" \
    "    memcpy(&f, &u, sizeof f);\n" \
    "    return f;\n" \
    "}\n" \
    "static inline uint16_t wk_f32_to_bf16(float f) {\n" \
    "    uint32_t u;\n" \
    "    memcpy(&u, &f, sizeof u);\n" \
    "    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);\n" \
    "    u += 0x7fffu + ((u >> 16) & 1u);\n" \
    "    return (uint16_t)(u >> 16);\n" \
    "}\n" \
    "#endif\n"

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
