#include <stdint.h>
#include <stdlib.h>
#include <string.h>
int eb(void **buffers) {
    const float *restrict g = (const float *)buffers[0];
    const int64_t *restrict ix = (const int64_t *)buffers[1];
    float *restrict o = (float *)buffers[2];
    if (131072LL > 0) memset(o, 0, (size_t)524288LL);
    {
        for (int64_t n0 = 0; n0 < 2LL; n0++) {
            for (int64_t n1 = 0; n1 < 64LL; n1++) {
                const int64_t k = (int64_t)ix[0 + n0 * 64LL + n1 * 1LL];
                if (k == 0LL || k < 0 || k >= 1024LL) continue;
                float *restrict row = o + k * 128LL;
                const float *restrict gr = g + n0 * 8192LL + n1 * 128LL;
                for (int64_t h = 0; h < 128LL; h++) row[h] = row[h] + gr[h * 1LL];
            }
        }
    }
    return 0;
}
