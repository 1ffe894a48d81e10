/* Checks expinl.h's wk_expf_s bit for bit against the prelude wk_expf8 (copied from sm0.c) on 16M points and the specials; prints the largest relative error against exp in double. */
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <stdlib.h>
#include "expinl.h"
typedef float wk_v8f __attribute__((vector_size(32)));
typedef int wk_v8i __attribute__((vector_size(32)));
typedef float wk_v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
#define WK_V8(c) ((wk_v8f){c, c, c, c, c, c, c, c})
#define WK_FMA(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))
static inline wk_v8f wk_expf_poly8(wk_v8f r) {
    wk_v8f q = WK_FMA(WK_V8(0x1.6a244cp-10f), r, WK_V8(0x1.1239d4p-7f));
    q = WK_FMA(q, r, WK_V8(0x1.5558f2p-5f));
    q = WK_FMA(q, r, WK_V8(0x1.555492p-3f));
    q = WK_FMA(q, r, WK_V8(0x1.fffffcp-2f));
    return WK_FMA(q, r * r, r) + WK_V8(1.0f);
}
static inline wk_v8f wk_expf8(wk_v8f x) {
    const wk_v8f ln2hi = WK_V8(0x1.62e43p-1f), ln2lo = WK_V8(-0x1.05c61p-29f), log2e = WK_V8(0x1.715476p+0f);
    wk_v8f ax = (wk_v8f)((wk_v8i)x & 0x7fffffff);
    if (__builtin_ia32_movmskps256((wk_v8f)(ax <= WK_V8(87.0f))) == 0xff) {
        /* 1.5 * 2^23 + 127: t's low bits hold n + 127, the exponent field of 2^n */
        const wk_v8f sh = WK_V8(0x1.8000fep23f);
        wk_v8f t = WK_FMA(x, log2e, sh), n = t - sh;
        wk_v8f r = WK_FMA(-n, ln2lo, WK_FMA(-n, ln2hi, x));
        return wk_expf_poly8(r) * (wk_v8f)((wk_v8i)t << 23);
    }
    /* max, then min, with x first: a NaN lane clamps to a number (replaced below) */
    wk_v8f xc = __builtin_ia32_minps256(__builtin_ia32_maxps256(x, WK_V8(-110.0f)), WK_V8(100.0f));
    wk_v8f n = __builtin_ia32_roundps256(xc * log2e, 8); /* to nearest, no exceptions */
    wk_v8f r = WK_FMA(-n, ln2lo, WK_FMA(-n, ln2hi, xc));
    wk_v8i ni = __builtin_convertvector(n, wk_v8i), n1 = ni >> 1, n2 = ni - n1;
    wk_v8f s1 = (wk_v8f)((n1 + 127) << 23), s2 = (wk_v8f)((n2 + 127) << 23);
    wk_v8f y = wk_expf_poly8(r) * s1 * s2;
    wk_v8i nan = x != x;
    return (wk_v8f)(((wk_v8i)(x + x) & nan) | ((wk_v8i)y & ~nan));
}
__attribute__((noinline)) void vs(float *d, const float *s, long n) {
  #pragma omp simd
  for (long i = 0; i < n; i++) d[i] = wk_expf_s(s[i]);
}
int main(void) {
  long n = 1 << 24; float *x = malloc(n*4), *a = malloc(n*4), *b = malloc(n*4);
  for (long i = 0; i < n; i++) { x[i] = -120.0f + 215.0f * (float)i / n; }
  x[0] = NAN; x[1] = -INFINITY; x[2] = INFINITY; x[3] = -0.0f; x[4] = 88.8f; x[5] = -104.0f; x[6]=-87.5f; x[7]=1e30f;
  vs(a, x, n);
  for (long i = 0; i < n; i += 8) *(wk_v8f_u *)(b + i) = wk_expf8(*(const wk_v8f_u *)(x + i));
  long diff = 0, diffn = 0; double maxrel = 0;
  for (long i = 0; i < n; i++) {
    if (memcmp(a + i, b + i, 4)) { diff++; if (fabsf(x[i]) <= 87.0f) diffn++; }
    double ref = exp((double)x[i]);
    if (isfinite(a[i]) && ref > 1.2e-38 && ref < 3e38) { double rel = fabs(a[i] - ref) / ref; if (rel > maxrel) maxrel = rel; }
  }
  printf("differ %ld (in |x|<=87: %ld), maxrel vs exp(double) %.3g\n", diff, diffn, maxrel);
  for (int i = 0; i < 8; i++) printf("x=%g s=%g v8=%g\n", x[i], a[i], b[i]);
  return 0;
}
