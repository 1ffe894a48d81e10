/* A scalar float32 exp that gcc vectorises inline in an `omp simd` loop (no
 * libmvec call, no stack block): the prelude wk_expf8 steps written on scalars,
 * with the out-of-range path made branch-free (clamp, split 2^n scale, NaN by
 * a bit mask; a `?:` on the NaN test stops the vectoriser). Same bits as wk_expf8
 * on 16M points in [-120, 95] and the specials. Measured slower than both
 * wk_expf_block and libmvec: the clamps become compare + blendv. */
static inline float wk_f32_from_bits(int32_t u) { union { int32_t i; float f; } c = {.i = u}; return c.f; }
static inline int32_t wk_f32_bits(float f) { union { float f; int32_t i; } c = {.f = f}; return c.i; }
static inline float wk_expf_s(float x) {
    const float sh = 0x1.8p23f;
    float xc = __builtin_isgreater(x, -110.0f) ? x : -110.0f; /* NaN: -110, replaced below */
    xc = __builtin_isless(xc, 100.0f) ? xc : 100.0f;
    float t = fmaf(xc, 0x1.715476p+0f, sh), n = t - sh;
    float r = fmaf(-n, -0x1.05c61p-29f, fmaf(-n, 0x1.62e43p-1f, xc));
    float q = fmaf(0x1.6a244cp-10f, r, 0x1.1239d4p-7f);
    q = fmaf(q, r, 0x1.5558f2p-5f);
    q = fmaf(q, r, 0x1.555492p-3f);
    q = fmaf(q, r, 0x1.fffffcp-2f);
    float p = fmaf(q, r * r, r) + 1.0f;
    int32_t ni = wk_f32_bits(t) << 10 >> 10; /* n, sign-extended from t's low 22 bits */
    int32_t n1 = ni >> 1, n2 = ni - n1;
    float y = p * wk_f32_from_bits((n1 + 127) << 23) * wk_f32_from_bits((n2 + 127) << 23);
    int32_t nan = -(int32_t)(x != x); /* all ones in a NaN lane */
    return wk_f32_from_bits((wk_f32_bits(x + x) & nan) | (wk_f32_bits(y) & ~nan));
}
