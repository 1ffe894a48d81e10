/* cgen.h — code generators from a schedule to source text (the codegen
 * layer's header; program.h is the contract with the runtime).
 *
 *   cgen_c.c    C + OpenMP + SIMD for CPUs
 *   pipeline.c  wk_compile_graph: lower -> schedule -> codegen, the flat driver
 *
 * The generated C needs (and says so in its first comment):
 *   cc -O3 -march=native -fopenmp -fno-math-errno -fPIC -shared ... -lmvec -lm
 * It is correct without -fopenmp (pragmas ignored, serial, no libmvec calls).
 */
#ifndef WICK_CGEN_H
#define WICK_CGEN_H

#include "../schedule/schedule.h"

/* The flags the generated C is written for; the runtime's cc.c may use them.
 * WK_CGEN_C_EXTRA is also requested by the source itself on a
 * `wick-cflags:` line (512-bit vectors: libmvec's AVX-512 exp/tanh are
 * ~1.5x faster than the 256-bit ones gcc picks by default). */
#define WK_CGEN_C_CFLAGS "-O3 -march=native -fopenmp -fno-math-errno -fPIC -shared"
#define WK_CGEN_C_EXTRA "-mprefer-vector-width=512"
#define WK_CGEN_C_LIBS "-lmvec -lm"

/* Appends the translation unit for S to out; its entry point is `entry`.
 * Returns 0, or -1 with wk_error set. */
int wk_cgen_c(const WkSchedule *S, const char *entry, WkStr *out);

#endif /* WICK_CGEN_H */
