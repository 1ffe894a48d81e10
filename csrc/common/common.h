/* common.h — what every layer of wick's C core shares: visibility, error
 * shape, growable arrays, the arena, hashing, and the one registry of WICK_*
 * environment knobs.
 *
 * This header is Python-free on purpose: the compiler core (graph, lower,
 * schedule, codegen) builds into plain C unit tests that run under ASan and
 * UBSan without an interpreter. Only capture/ and runtime/ include Python.h.
 *
 * Conventions for all of csrc/:
 *   - exported names carry their layer's prefix (wk_sym_, wk_graph_, wk_lower_,
 *     wk_sched_, wk_cgen_, wk_cc_, wk_rt_, wk_cap_, wk_hook_, wk_bc_, wk_guard_);
 *     file-local helpers are static and unprefixed.
 *   - functions returning int use 0 for success and -1 for failure; functions
 *     returning pointers use NULL for failure. Failures that a user should see
 *     carry a message: wk_error_set() stores it, wk_error_get() reads it.
 *   - functions that touch PyObject* say ownership in their name or their
 *     header comment: _Ref returns a new reference, _Borrow a borrowed one,
 *     _Steal takes over its argument's reference.
 */
#ifndef WICK_COMMON_H
#define WICK_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__GNUC__)
#define WK_HIDDEN __attribute__((visibility("hidden")))
#define WK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define WK_UNUSED __attribute__((unused))
#else
#define WK_HIDDEN
#define WK_PRINTF(f, a)
#define WK_UNUSED
#endif

#define WK_MAX_DIMS 8 /* tensors of higher rank are not captured (fallback) */

/* ---- errors (common.c) ------------------------------------------------- */
/* One message per thread; the last failure wins. Layers set it where the
 * failure is detected; the caller that reports (capture's fallback reason,
 * a Python exception) reads it. */
void wk_error_set(const char *fmt, ...) WK_PRINTF(1, 2);
const char *wk_error_get(void); /* never NULL; "" when nothing was set */
void wk_error_clear(void);

/* ---- memory (common.c) ------------------------------------------------- */
void *wk_xmalloc(size_t n);  /* aborts on OOM: allocation failure in the
                                compiler is not a recoverable state */
void *wk_xcalloc(size_t n, size_t size);
void *wk_xrealloc(void *p, size_t n);
char *wk_xstrdup(const char *s);

/* An arena frees everything it handed out at once. IR nodes (symbolic
 * expressions, graph nodes, loop-IR expressions) live in arenas owned by the
 * object that owns the IR. */
typedef struct WkArena WkArena;
WkArena *wk_arena_new(void);
void *wk_arena_alloc(WkArena *a, size_t n); /* zeroed, 16-byte aligned */
char *wk_arena_strdup(WkArena *a, const char *s);
void wk_arena_free(WkArena *a);

/* Growable array of T: `WkVec(int) v = {0}; wk_vec_push(&v, 3);` */
#define WkVec(T) struct { T *data; int len, cap; }
#define wk_vec_push(v, x)                                                     \
    do {                                                                      \
        if ((v)->len == (v)->cap) {                                           \
            (v)->cap = (v)->cap ? 2 * (v)->cap : 8;                           \
            (v)->data = wk_xrealloc((v)->data, sizeof(*(v)->data) * (size_t)(v)->cap); \
        }                                                                     \
        (v)->data[(v)->len++] = (x);                                          \
    } while (0)
#define wk_vec_free(v) (free((v)->data), (v)->data = NULL, (v)->len = (v)->cap = 0)

/* Growable string, for generated source and log lines. */
typedef struct { char *data; size_t len, cap; } WkStr;
void wk_str_printf(WkStr *s, const char *fmt, ...) WK_PRINTF(2, 3);
void wk_str_append(WkStr *s, const char *text);
void wk_str_free(WkStr *s);

/* ---- hashing (common.c) ------------------------------------------------ */
uint64_t wk_hash_bytes(const void *p, size_t n, uint64_t seed); /* FNV-1a 64 */
uint64_t wk_hash_mix(uint64_t h, uint64_t v);
/* SHA-256, hex digest (65 bytes with NUL): names cache artifacts by content
 * and checks them for corruption. */
void wk_sha256_hex(const void *p, size_t n, char out[65]);

/* ---- environment knobs (env.c) ----------------------------------------- */
/* Every WICK_* variable is one row here: name, default, doc. Read once at
 * first use; wk_env_reload() re-reads (tests change them per scope). */
#define WK_ENV_TABLE(X)                                                           \
    X(LOG, "", "comma list of graphs,breaks,guards,recompiles,code,perf (or all)") \
    X(DEBUG_DIR, "", "directory that receives every graph, kernel source and transformed bytecode") \
    X(CACHE_DIR, "", "compiled-artifact cache; default ~/.cache/wick")                \
    X(CC, "", "C compiler for CPU kernels; default cc")                               \
    X(CFLAGS, "", "extra flags appended to the kernel compile line")                  \
    X(CC_JOBS, "", "compiler processes per C unit (parts in parallel); default: usable CPUs, at most 4") \
    X(CACHE_LIMIT, "8", "compiled entries per code object before it runs eagerly")    \
    X(NUM_THREADS, "", "OpenMP threads for CPU kernels; default: all cores")           \
    X(SHIM, "1", "0: allocate outputs through torch.empty_strided, not PyTorch's C shim") \
    X(NATIVE_EXTERNS, "1", "0: matmul, convolution and attention extern calls through Python, not PyTorch's C shim") \
    X(OUTPUT_POOL, "256", "MiB of freed large CPU outputs kept warm for later outputs (runtime/shim.c); 0 = off") \
    X(TRITON, "", "'interpret': CPU graphs use the Triton backend, run by Triton's interpreter (tests)") \
    X(TRITON_TUNE, "later", "when Triton kernels are autotuned: later = first call in the first config, the others compiled in the background and timed at a later call; first = all at the first call") \
    X(HOST_PROFILE, "0", "1: graphs compiled from now on time their host work per phase (wick._C.host_profile())") \
    X(CUDA_INDEXING, "1", "1: indirect loads (embedding, gather, index) as Triton kernels on CUDA (device asserts, as eager raises); 0 = extern calls") \
    X(EARLY_BACKWARD, "1", "1: a grad-mode graph's backward starts compiling (C compiler in the background) when its forward is compiled (wick/backends.py); 0 = at the first backward") \
    X(CHANNELS_LAST, "auto", "convolutions channels-last (wick/_layout.py): auto = CUDA inference graphs, 1 = CPU too, 0 = off") \
    X(LAYOUT_PASS, "graph", "graph: wick.compile's convolutional graphs get the channels-last pass on the captured graph (wick/_graph_layout.py): inference graphs compile natively, training ones take wick's autodiff; fx: both through AOTAutograd and wick/_layout.py") \
    X(AUTODIFF, "own", "own: a grad-mode graph of wick's capture gets wick's own backward (wick/_autodiff.py, AOTAutograd for what its rules do not cover); aot: AOTAutograd for every one")

typedef enum {
#define WK_ENV_ENUM(name, dflt, doc) WK_ENV_##name,
    WK_ENV_TABLE(WK_ENV_ENUM)
#undef WK_ENV_ENUM
    WK_ENV_COUNT
} WkEnv;

const char *wk_env_str(WkEnv e); /* value or default, never NULL */
long wk_env_int(WkEnv e);
void wk_env_reload(void);

/* WICK_LOG channels. wk_log_on(WK_LOG_GRAPHS) is cheap (a bit test). */
typedef enum {
    WK_LOG_GRAPHS = 1 << 0,
    WK_LOG_BREAKS = 1 << 1,
    WK_LOG_GUARDS = 1 << 2,
    WK_LOG_RECOMPILES = 1 << 3,
    WK_LOG_CODE = 1 << 4,
    WK_LOG_PERF = 1 << 5,
} WkLogChannel;
int wk_log_on(WkLogChannel c);
void wk_log(WkLogChannel c, const char *fmt, ...) WK_PRINTF(2, 3); /* to stderr, "[wick:<channel>] ..." */
/* Writes `text` to $WICK_DEBUG_DIR/<name> when the knob is set; no-op otherwise. */
void wk_debug_dump(const char *name, const char *text);

#endif /* WICK_COMMON_H */
