/* wick: generated C for one graph (3 kernels).
 * Build: cc -O2 -march=native -fopenmp -fno-math-errno -fPIC -shared src.c -o lib.so -lmvec -lm
 * (correct without -fopenmp too: serial, no libmvec)
 * wick-cflags: -mprefer-vector-width=512
 */
#ifndef WICK_PRELUDE
#define WICK_PRELUDE
#include <stdint.h>
#include <math.h>
#include <stdbool.h>

#if defined(_OPENMP)
/* vector variants from glibc's libmvec (link with -lmvec) */
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float logf(float);
#pragma omp declare simd notinbranch
float tanhf(float);
#pragma omp declare simd notinbranch
double exp(double);
#pragma omp declare simd notinbranch
double log(double);
#pragma omp declare simd notinbranch
double tanh(double);
#pragma omp declare simd notinbranch
float sinf(float);
#pragma omp declare simd notinbranch
float cosf(float);
#pragma omp declare simd notinbranch
double sin(double);
#pragma omp declare simd notinbranch
double cos(double);
#if __GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35)
/* libmvec from glibc 2.35 on */
/* (the parameter is not called f: f##f would paste two arguments, erferf) */
#define WK_SIMD2(name) _Pragma("omp declare simd notinbranch") float name##f(float); \
    _Pragma("omp declare simd notinbranch") double name(double);
WK_SIMD2(tan) WK_SIMD2(asin) WK_SIMD2(acos) WK_SIMD2(atan) WK_SIMD2(sinh) WK_SIMD2(cosh)
WK_SIMD2(asinh) WK_SIMD2(acosh) WK_SIMD2(atanh) WK_SIMD2(erf) WK_SIMD2(erfc) WK_SIMD2(log1p)
WK_SIMD2(expm1) WK_SIMD2(log2) WK_SIMD2(log10) WK_SIMD2(exp2)
#endif
#endif

#include <string.h>
/* a row group's function: loops unrolled (gcc; see gen_group) */
#if defined(__GNUC__) && !defined(__clang__)
#define WK_ROW_GROUP __attribute__((optimize("unroll-loops")))
#else
#define WK_ROW_GROUP
#endif
#ifndef WICK_BF16
#define WICK_BF16
static inline float wk_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint16_t wk_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
#endif

/* torch's integer pow: repeated squaring, wrapping; negative exponents
   give 0 except for bases 1 and -1 */
static inline int64_t wk_ipow(int64_t b, int64_t e) {
    if (e < 0) return b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)b;
    while (e) {
        if (e & 1) r *= x;
        x *= x;
        e >>= 1;
    }
    return (int64_t)r;
}

/* integer division with a non-zero divisor (the lowering guarantees it);
   -1 is special-cased so INT64_MIN / -1 wraps instead of trapping */
static inline int64_t wk_ifmod(int64_t a, int64_t b) { return b == -1 ? 0 : a % b; }
static inline int64_t wk_irem(int64_t a, int64_t b) {
    int64_t r = b == -1 ? 0 : a % b;
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
static inline int64_t wk_ifloordiv(int64_t a, int64_t b) {
    if (b == -1) return (int64_t)(0 - (uint64_t)a);
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
/* torch's floating floor division and remainder (div_floor, remainder) */
#define WK_FLOORDIV(T, S) \
static inline T wk_floordiv##S(T a, T b) { \
    if (b == 0) return a / b; \
    T mod = fmod##S(a, b); \
    T div = (a - mod) / b; \
    if (mod != 0 && (b < 0) != (mod < 0)) div -= 1; \
    if (div == 0) return copysign##S(0, a / b); \
    T fl = floor##S(div); \
    if (div - fl > (T)0.5) fl += 1; \
    return fl; \
} \
static inline T wk_rem##S(T a, T b) { \
    T mod = fmod##S(a, b); \
    if (mod != 0 && (b < 0) != (mod < 0)) mod += b; \
    return mod; \
}
WK_FLOORDIV(float, f)
WK_FLOORDIV(double, )
/* erfinv: a rational first guess refined by Newton steps on erf */
static inline double wk_erfinv(double y) {
    if (!(y > -1 && y < 1)) return y == 1 ? INFINITY : y == -1 ? -INFINITY : NAN;
    double w = -log((1 - y) * (1 + y)), x;
    if (w < 5) {
        w -= 2.5;
        x = 2.81022636e-08; x = 3.43273939e-07 + x * w; x = -3.5233877e-06 + x * w;
        x = -4.39150654e-06 + x * w; x = 0.00021858087 + x * w; x = -0.00125372503 + x * w;
        x = -0.00417768164 + x * w; x = 0.246640727 + x * w; x = 1.50140941 + x * w;
    } else {
        w = sqrt(w) - 3;
        x = -0.000200214257; x = 0.000100950558 + x * w; x = 0.00134934322 + x * w;
        x = -0.00367342844 + x * w; x = 0.00573950773 + x * w; x = -0.0076224613 + x * w;
        x = 0.00943887047 + x * w; x = 1.00167406 + x * w; x = 2.83297682 + x * w;
    }
    x *= y;
    for (int k = 0; k < 2; k++)
        x -= (erf(x) - y) / (1.1283791670955126 * exp(-x * x));
    return x;
}
static inline float wk_erfinvf(float y) { return (float)wk_erfinv((double)y); }
/* a finished piece of a large output, written around the caches (no read
   for ownership, no eviction of the rows being read); the fence orders
   the weakly ordered stores before other threads read them */
#if defined(__AVX__) && (defined(__GNUC__) || defined(__clang__))
/* the compilers' builtins, not <immintrin.h>: parsing that header costs
   ~0.4 s of CPU per compiled part, more than a typical graph's kernels */
typedef float wk_v8sf __attribute__((vector_size(32)));
typedef float wk_v8sf_u __attribute__((vector_size(32), aligned(4), may_alias));
static inline void wk_nt_store8(float *dst, wk_v8sf v) {
#if defined(__clang__)
    __builtin_nontemporal_store(v, (wk_v8sf *)dst);
#else
    __builtin_ia32_movntps256(dst, v);
#endif
}
static inline void wk_stream_f32(float *dst, const float *src, int64_t n) {
    int64_t k = 0;
    for (; k < n && ((uintptr_t)(dst + k) & 31); k++) dst[k] = src[k];
    for (; k + 8 <= n; k += 8) {
        wk_v8sf v = *(const wk_v8sf_u *)(src + k);
        wk_nt_store8(dst + k, v);
    }
    for (; k < n; k++) dst[k] = src[k];
}
/* src * scale streamed straight from the vector loop, with no staging
   chunk (a lagged softmax row, gen_group); the same product as a
   scalar loop's */
static inline void wk_stream_scaled_f32(float *dst, const float *src, float scale, int64_t n) {
    int64_t k = 0;
    for (; k < n && ((uintptr_t)(dst + k) & 31); k++) dst[k] = src[k] * scale;
    const wk_v8sf s8 = {scale, scale, scale, scale, scale, scale, scale, scale};
    for (; k + 8 <= n; k += 8) {
        wk_v8sf v = *(const wk_v8sf_u *)(src + k) * s8;
        wk_nt_store8(dst + k, v);
    }
    for (; k < n; k++) dst[k] = src[k] * scale;
}
static inline void wk_stream_fence(void) { __builtin_ia32_sfence(); }
#else
static inline void wk_stream_f32(float *dst, const float *src, int64_t n) { memcpy(dst, src, (size_t)n * sizeof *dst); }
static inline void wk_stream_scaled_f32(float *dst, const float *src, float scale, int64_t n) {
    for (int64_t k = 0; k < n; k++) dst[k] = src[k] * scale;
}
static inline void wk_stream_fence(void) {}
#endif
#if defined(__AVX2__) && defined(__FMA__) && (defined(__GNUC__) || defined(__clang__))
/* vector types and the compilers' builtins, not <immintrin.h> (see wk_stream_f32) */
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
/* the tail goes through a padded vector too: every element of a row gets
   the same function, whatever its position */
static inline void wk_expf_block(float *a, int64_t n) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) *(wk_v8f_u *)(a + k) = wk_expf8(*(const wk_v8f_u *)(a + k));
    if (k < n) {
        wk_v8f v = WK_V8(0.0f);
        for (int64_t q = k; q < n; q++) v[q - k] = a[q];
        v = wk_expf8(v);
        for (int64_t q = k; q < n; q++) a[q] = v[q - k];
    }
}
#else
static inline void wk_expf_block(float *a, int64_t n) {
    _Pragma("omp simd")
    for (int64_t k = 0; k < n; k++) a[k] = expf(a[k]);
}
#endif
#endif

/* kernel 0: reduction {AMAX}, 4096 x 4096 iterations, row-fused */
/* kernel 1: reduction {SUB EXP SUM}, 4096 x 4096 iterations, row-fused */
/* kernel 2: pointwise {SUB EXP DIV}, 16777216 x 1 iterations, row-fused */
WK_ROW_GROUP static int kernel0(void **bufs) {
    int wk_oob = 0; /* set by index checks (BOUND): an index out of range */
    const float *restrict b0 = (const float *)bufs[0];
    float *restrict b1 = (float *)bufs[1];
    float *restrict b2 = (float *)bufs[2];
    float *restrict b3 = (float *)bufs[3];
    #pragma omp parallel
    {
        float wk_rowbuf0[2][4096];
        int64_t wk_lag = -1; /* the row whose last phase is still to run */
        #pragma omp for schedule(static) nowait
        for (int64_t i0 = 0; i0 < 4096; i0++) {
            float *const wk_row0 = wk_rowbuf0[i0 & 1];
            { /* kernel 0 */
                float acc = -INFINITY;
                int nanf = 0;
                #pragma omp simd reduction(max:acc) reduction(|:nanf)
                for (int64_t r0 = 0; r0 < 4096; r0++) {
                    const float t15 = b0[((i0 * 4096) + r0)];
                    acc = t15 > acc ? t15 : acc;
                    nanf |= t15 != t15;
                }
                b2[i0] = (float)(nanf ? NAN : acc);
            }
            { /* kernel 1 */
                const float t22 = b2[i0];
                double acc = 0;
                for (int64_t rb = 0; rb < 4096; rb += 256) {
                    const int64_t re = rb + 256 < 4096 ? rb + 256 : 4096;
                    float accb = 0;
                    if (i0 + 1 < 4096)
                        for (int64_t wk_p = rb; wk_p < re; wk_p += 16) __builtin_prefetch(&b0[(((i0 + 1) * 4096) + wk_p)], 0, 3);
                    float wk_ex0[256];
                    #pragma omp simd
                    for (int64_t r0 = rb; r0 < re; r0++) {
                        const float t15 = b0[((i0 * 4096) + r0)];
                        const float t23 = t15 - t22;
                        wk_ex0[r0 - rb] = t23;
                    }
                    wk_expf_block(wk_ex0, re - rb);
                    #pragma omp simd reduction(+:accb)
                    for (int64_t r0 = rb; r0 < re; r0++) {
                        const float t15 = b0[((i0 * 4096) + r0)];
                        const float t23 = t15 - t22;
                        const float t24 = wk_ex0[r0 - rb];
                        const double t25 = (double)t24;
                        wk_row0[r0] = t24;
                        accb += t24;
                    }
                    acc += accb;
                    if (wk_lag >= 0) { /* kernel 2, one row late */
                        const int64_t i0 = wk_lag;
                        const float *const wk_row0 = wk_rowbuf0[i0 & 1];
                        const float t28 = b3[i0];
                        { const int64_t i1 = rb; wk_stream_scaled_f32(&b1[((i0 * 4096) + i1)], &wk_row0[i1], ((float)1 / t28), re - rb); }
                    }
                }
                b3[i0] = (float)acc;
            }
            wk_lag = i0;
        }
        if (wk_lag >= 0) { /* kernel 2, one row late */
            const int64_t i0 = wk_lag;
            const float *const wk_row0 = wk_rowbuf0[i0 & 1];
            const float t28 = b3[i0];
            { const int64_t i1 = 0; wk_stream_scaled_f32(&b1[((i0 * 4096) + i1)], &wk_row0[i1], ((float)1 / t28), 4096); }
        }
        wk_stream_fence(); /* this thread's streamed rows, before the region's end */
    }
    return wk_oob;
}

__attribute__((visibility("default"))) int wick_graph_cb1bf35760a0c09c(void **buffers) {
    if (kernel0(buffers)) return 1;
    return 0;
}
