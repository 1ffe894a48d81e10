/* common.c — errors, allocation, arenas, strings and hashing shared by every
 * layer. Nothing here knows about Python or torch. */
#include "common.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------ */
static _Thread_local char error_message[1024];

void wk_error_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
}

const char *wk_error_get(void) { return error_message; }
void wk_error_clear(void) { error_message[0] = '\0'; }

/* ---- memory ------------------------------------------------------------ */
static void *check_alloc(void *p) {
    if (!p) {
        fputs("wick: out of memory\n", stderr);
        abort();
    }
    return p;
}

void *wk_xmalloc(size_t n) { return check_alloc(malloc(n ? n : 1)); }
void *wk_xcalloc(size_t n, size_t size) { return check_alloc(calloc(n ? n : 1, size ? size : 1)); }
void *wk_xrealloc(void *p, size_t n) { return check_alloc(realloc(p, n ? n : 1)); }
char *wk_xstrdup(const char *s) { return strcpy(wk_xmalloc(strlen(s) + 1), s); }

/* Blocks are chained; a request larger than the block size gets its own. */
typedef struct ArenaBlock {
    struct ArenaBlock *next;
    size_t used, size;
    _Alignas(16) unsigned char data[];
} ArenaBlock;

struct WkArena {
    ArenaBlock *head;
};

enum { ARENA_BLOCK = 64 * 1024 };

WkArena *wk_arena_new(void) { return wk_xcalloc(1, sizeof(WkArena)); }

void *wk_arena_alloc(WkArena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->used + n > a->head->size) {
        size_t size = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        ArenaBlock *b = wk_xmalloc(sizeof(ArenaBlock) + size);
        b->used = 0;
        b->size = size;
        b->next = a->head;
        a->head = b;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}

char *wk_arena_strdup(WkArena *a, const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(wk_arena_alloc(a, n), s, n);
}

void wk_arena_free(WkArena *a) {
    if (!a) return;
    for (ArenaBlock *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(a);
}

/* ---- strings ----------------------------------------------------------- */
static void str_reserve(WkStr *s, size_t extra) {
    if (s->len + extra + 1 <= s->cap) return;
    size_t cap = s->cap ? s->cap : 256;
    while (cap < s->len + extra + 1) cap *= 2;
    s->data = wk_xrealloc(s->data, cap);
    s->cap = cap;
}

void wk_str_append(WkStr *s, const char *text) {
    size_t n = strlen(text);
    str_reserve(s, n);
    memcpy(s->data + s->len, text, n + 1);
    s->len += n;
}

void wk_str_printf(WkStr *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    str_reserve(s, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(s->data + s->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    s->len += (size_t)n;
}

void wk_str_free(WkStr *s) {
    free(s->data);
    s->data = NULL;
    s->len = s->cap = 0;
}

/* ---- hashing ----------------------------------------------------------- */
uint64_t wk_hash_bytes(const void *p, size_t n, uint64_t seed) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}

uint64_t wk_hash_mix(uint64_t h, uint64_t v) {
    /* splitmix64 finaliser over the combination: cheap and well spread */
    uint64_t x = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* SHA-256 (FIPS 180-4), written from the standard's description. */
static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha_block(uint32_t st[8], const unsigned char *blk) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)blk[4 * i] << 24 | (uint32_t)blk[4 * i + 1] << 16 |
               (uint32_t)blk[4 * i + 2] << 8 | blk[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = st[0], b = st[1], c = st[2], d = st[3], e = st[4], f = st[5], g = st[6], h = st[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + sha_k[i] + w[i];
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    st[0] += a; st[1] += b; st[2] += c; st[3] += d; st[4] += e; st[5] += f; st[6] += g; st[7] += h;
}

void wk_sha256_hex(const void *p, size_t n, char out[65]) {
    uint32_t st[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const unsigned char *b = p;
    size_t full = n / 64;
    for (size_t i = 0; i < full; i++) sha_block(st, b + 64 * i);
    unsigned char tail[128] = {0};
    size_t rest = n - full * 64;
    memcpy(tail, b + full * 64, rest);
    tail[rest] = 0x80;
    size_t tail_len = rest + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)n * 8;
    for (int i = 0; i < 8; i++) tail[tail_len - 1 - i] = (unsigned char)(bits >> (8 * i));
    sha_block(st, tail);
    if (tail_len == 128) sha_block(st, tail + 64);
    for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", st[i]);
}
