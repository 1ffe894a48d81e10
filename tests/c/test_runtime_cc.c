/* test_runtime_cc.c — the compiler driver and artifact cache (cc.c), without
 * Python: compile, cache hit, corrupt/missing/unloadable artifacts rebuilt,
 * compile errors and a missing compiler reported, unwritable cache dir
 * fallback, processes sharing an empty cache, and threads compiling at once
 * (the compiler runs outside the process mutex). */
#define _GNU_SOURCE
#include "runtime/runtime.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static const char *SRC =
    "#include <stdint.h>\n"
    "int wk_test_add(int a, int b) { return a + b; }\n"
    "double wk_test_sum(int64_t n) {\n"
    "  double s = 0;\n"
    "  #pragma omp parallel for reduction(+:s)\n"
    "  for (int64_t i = 0; i < n; i++) s += (double)i;\n"
    "  return s;\n"
    "}\n";

static char tmp_root[256];

static void set_env(const char *name, const char *value) {
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
    wk_env_reload();
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *d = malloc((size_t)n + 1);
    size_t got = fread(d, 1, (size_t)n, f);
    fclose(f);
    d[got] = '\0';
    *len = got;
    return d;
}

/* Replaces a file by a new inode (never rewrites a mapped library in place). */
static void replace_file(const char *path, const void *data, size_t n) {
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.testtmp", path);
    FILE *f = fopen(tmp, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
    rename(tmp, path);
}

static void sidecar_of(const char *so, char *out, size_t cap) { snprintf(out, cap, "%s.sha256", so); }

static int sidecar_matches(const char *so) {
    char side[600], hex[65];
    size_t n, m;
    sidecar_of(so, side, sizeof side);
    char *bytes = slurp(so, &n), *sum = slurp(side, &m);
    int ok = bytes && sum && m >= 64;
    if (ok) {
        wk_sha256_hex(bytes, n, hex);
        ok = strncmp(hex, sum, 64) == 0;
    }
    free(bytes);
    free(sum);
    return ok;
}

static int call_add(WkLib *lib) {
    int (*add)(int, int);
    *(void **)&add = wk_cc_symbol(lib, "wk_test_add");
    return add ? add(2, 3) : -1;
}

static void rm_rf(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            rm_rf(sub);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static void test_compile_and_hit(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/a/b/cache", tmp_root); /* created with parents */
    set_env("WICK_CACHE_DIR", dir);
    CHECK(strcmp(wk_cc_cache_dir(), dir) == 0);

    int hit = -1;
    WkLib *lib = wk_cc_load(SRC, &hit);
    CHECK(lib != NULL);
    if (!lib) {
        fprintf(stderr, "error: %s\n", wk_error_get());
        return;
    }
    CHECK_EQ_INT(hit, 0);
    CHECK_EQ_INT(call_add(lib), 5);
    double (*sum)(int64_t);
    *(void **)&sum = wk_cc_symbol(lib, "wk_test_sum");
    CHECK(sum && sum(1000) == 499500.0);
    CHECK(wk_cc_symbol(lib, "no_such_symbol") == NULL);
    CHECK_STR_CONTAINS(wk_error_get(), "no_such_symbol");
    char path[512];
    snprintf(path, sizeof path, "%s", wk_cc_path(lib));
    CHECK_STR_CONTAINS(path, dir);
    CHECK(file_exists(path));
    CHECK(sidecar_matches(path));
    wk_cc_close(lib);

    /* Second load: a cache hit at the same path. */
    lib = wk_cc_load(SRC, &hit);
    CHECK(lib != NULL);
    CHECK_EQ_INT(hit, 1);
    CHECK(lib && strcmp(wk_cc_path(lib), path) == 0);
    CHECK_EQ_INT(call_add(lib), 5);
    wk_cc_close(lib);

    /* Corrupt bytes: detected by the checksum, rebuilt. */
    size_t n;
    char *bytes = slurp(path, &n);
    CHECK(bytes && n > 100);
    if (bytes) {
        bytes[n / 2] ^= 0x5a;
        bytes[n / 3] ^= 0x33;
        replace_file(path, bytes, n);
        free(bytes);
    }
    CHECK(!sidecar_matches(path));
    lib = wk_cc_load(SRC, &hit);
    CHECK(lib != NULL);
    CHECK_EQ_INT(hit, 0);
    CHECK(sidecar_matches(path));
    CHECK_EQ_INT(call_add(lib), 5);
    wk_cc_close(lib);

    /* Truncated file. */
    bytes = slurp(path, &n);
    if (bytes) {
        replace_file(path, bytes, n / 4);
        free(bytes);
    }
    lib = wk_cc_load(SRC, &hit);
    CHECK(lib != NULL);
    CHECK_EQ_INT(hit, 0);
    CHECK_EQ_INT(call_add(lib), 5);
    wk_cc_close(lib);

    /* Missing sidecar: not trusted, rebuilt. */
    char side[600];
    sidecar_of(path, side, sizeof side);
    CHECK_EQ_INT(unlink(side), 0);
    lib = wk_cc_load(SRC, &hit);
    CHECK(lib != NULL);
    CHECK_EQ_INT(hit, 0);
    CHECK(file_exists(side));
    wk_cc_close(lib);

    /* A file that checks out but is no library: dlopen fails, rebuilt. */
    const char junk[] = "this is not an ELF file";
    char hex[66];
    wk_sha256_hex(junk, sizeof junk, hex);
    replace_file(path, junk, sizeof junk);
    strcat(hex, "\n");
    replace_file(side, hex, 65);
    lib = wk_cc_load(SRC, &hit);
    CHECK(lib != NULL);
    CHECK_EQ_INT(hit, 0);
    CHECK_EQ_INT(call_add(lib), 5);
    CHECK(sidecar_matches(path));
    wk_cc_close(lib);

    /* Extra flags are part of the key: a different artifact. */
    set_env("WICK_CFLAGS", "-DWICK_TEST_FLAG=1");
    lib = wk_cc_load(SRC, &hit);
    CHECK(lib != NULL);
    CHECK_EQ_INT(hit, 0);
    CHECK(lib && strcmp(wk_cc_path(lib), path) != 0);
    wk_cc_close(lib);
    set_env("WICK_CFLAGS", NULL);

    /* A source that asks for flags in its header is compiled with them. */
    lib = wk_cc_load("// wick-cflags: -DWICK_ANSWER=42\nint wk_answer(void) { return WICK_ANSWER; }\n",
                     &hit);
    CHECK(lib != NULL);
    if (lib) {
        int (*answer)(void);
        *(void **)&answer = wk_cc_symbol(lib, "wk_answer");
        CHECK(answer && answer() == 42);
        wk_cc_close(lib);
    }
}

static void test_errors(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/errors", tmp_root);
    set_env("WICK_CACHE_DIR", dir);

    int hit = -1;
    wk_error_clear();
    WkLib *lib = wk_cc_load("int broken(void) { return undeclared_thing; }\n", &hit);
    CHECK(lib == NULL);
    CHECK_STR_CONTAINS(wk_error_get(), "failed");
    CHECK_STR_CONTAINS(wk_error_get(), "undeclared_thing");
    CHECK_EQ_INT(hit, 0);

    CHECK(wk_cc_load(NULL, &hit) == NULL);

    set_env("WICK_CC", "/nonexistent/wick-cc-xyz");
    wk_error_clear();
    lib = wk_cc_load(SRC, &hit);
    CHECK(lib == NULL);
    CHECK_STR_CONTAINS(wk_error_get(), "wick: C compiler '/nonexistent/wick-cc-xyz' not found (set WICK_CC)");
    set_env("WICK_CC", "wick-no-such-compiler-xyz");
    lib = wk_cc_load(SRC, &hit);
    CHECK(lib == NULL);
    CHECK_STR_CONTAINS(wk_error_get(), "'wick-no-such-compiler-xyz' not found");

    /* A compiler given with arguments works. */
    set_env("WICK_CC", "cc -DWICK_VIA_ARGS=1");
    lib = wk_cc_load(SRC, &hit);
    CHECK(lib != NULL);
    wk_cc_close(lib);
    set_env("WICK_CC", NULL);
}

static void test_unwritable_dir(void) {
    set_env("WICK_CACHE_DIR", "/dev/null/wick-cache");
    const char *dir = wk_cc_cache_dir();
    CHECK(strcmp(dir, "/dev/null/wick-cache") != 0);
    CHECK(access(dir, W_OK) == 0);
    int hit = -1;
    WkLib *lib = wk_cc_load(SRC, &hit);
    CHECK(lib != NULL);
    CHECK_EQ_INT(call_add(lib), 5);
    wk_cc_close(lib);
}

static void test_concurrent_processes(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/shared", tmp_root);
    set_env("WICK_CACHE_DIR", dir);
    const char *src = "int wk_conc(void) { return 7; }\n";
    enum { NPROC = 4 };
    pid_t pids[NPROC];
    for (int i = 0; i < NPROC; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            int hit;
            WkLib *lib = wk_cc_load(src, &hit);
            int ok = 0;
            if (lib) {
                int (*f)(void);
                *(void **)&f = wk_cc_symbol(lib, "wk_conc");
                ok = f && f() == 7;
                wk_cc_close(lib);
            }
            _exit(ok ? 0 : 1);
        }
    }
    for (int i = 0; i < NPROC; i++) {
        int st = -1;
        waitpid(pids[i], &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    int hit = -1;
    WkLib *lib = wk_cc_load(src, &hit);
    CHECK(lib != NULL);
    CHECK_EQ_INT(hit, 1);
    CHECK(lib && sidecar_matches(wk_cc_path(lib)));
    /* A stale temporary (a compile killed long ago) is swept on the next miss;
     * a fresh one (a compile in progress elsewhere) is left alone. */
    char stale[700], fresh[700];
    snprintf(stale, sizeof stale, "%s/deadbeef.tmpAAAAAA.so", dir);
    snprintf(fresh, sizeof fresh, "%s/deadbeef.tmpBBBBBB.so", dir);
    replace_file(stale, "x", 1);
    replace_file(fresh, "y", 1);
    struct timespec old_times[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    utimensat(AT_FDCWD, stale, old_times, 0);
    WkLib *lib2 = wk_cc_load("int wk_sweep(void) { return 1; }\n", &hit);
    CHECK(lib2 != NULL);
    wk_cc_close(lib2);
    CHECK(!file_exists(stale));
    CHECK(file_exists(fresh));
    unlink(fresh);
    /* No temporaries left behind. */
    DIR *d = opendir(dir);
    int tmps = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, "tmp")) tmps++;
    if (d) closedir(d);
    CHECK_EQ_INT(tmps, 0);
    wk_cc_close(lib);
}

/* Threads of one process compiling at once: two distinct sources (their
 * compilers overlap) and each of them twice (the same key: the per-key
 * flock makes one thread build it and the other load that build). */
typedef struct {
    int which;
    int result;
} ThreadJob;

static void *thread_compile(void *arg) {
    ThreadJob *job = arg;
    char src[200];
    snprintf(src, sizeof src, "int wk_thr%d(int x) { return x * %d + 1; }\n", job->which, job->which + 2);
    WkLib *lib = wk_cc_load(src, NULL);
    job->result = -1;
    if (lib) {
        char name[32];
        snprintf(name, sizeof name, "wk_thr%d", job->which);
        int (*f)(int);
        *(void **)&f = wk_cc_symbol(lib, name);
        job->result = f ? f(10) : -2;
        wk_cc_close(lib);
    }
    return NULL;
}

static void test_concurrent_threads(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/threads", tmp_root);
    set_env("WICK_CACHE_DIR", dir);
    enum { NTHREADS = 4 };
    pthread_t tids[NTHREADS];
    ThreadJob jobs[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        jobs[i].which = i % 2;
        CHECK(pthread_create(&tids[i], NULL, thread_compile, &jobs[i]) == 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(tids[i], NULL);
        CHECK_EQ_INT(jobs[i].result, 10 * (jobs[i].which + 2) + 1);
    }
    /* one library per source, each with its checksum; no temporaries */
    DIR *d = opendir(dir);
    int libs = 0, tmps = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n > 3 && !strcmp(e->d_name + n - 3, ".so") && !strstr(e->d_name, "tmp")) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            CHECK(sidecar_matches(path));
            libs++;
        }
        tmps += strstr(e->d_name, "tmp") != NULL;
    }
    if (d) closedir(d);
    CHECK_EQ_INT(libs, 2);
    CHECK_EQ_INT(tmps, 0);
}

/* A unit marked into stages (as a plan's is) and big enough to be cut:
 * compiled in parts by parallel compilers and linked, every stage's symbol
 * works; one job compiles it whole, to the same results; a part that does
 * not compile falls back to the whole unit, whose error names the source. */
static void build_staged(WkStr *src, int nstages, int broken) {
    src->len = 0;
    wk_str_append(src, "");
    for (int k = 0; k < nstages; k++) {
        wk_str_append(src, WK_CC_PART_MARK);
        wk_str_append(src, "#ifndef WK_T_PRELUDE\n#define WK_T_PRELUDE\n#include <stdint.h>\n#endif\n");
        for (int f = 0; f < 100; f++) /* bulk, so the unit is worth cutting */
            wk_str_printf(src, "static int64_t s%d_f%d(int64_t x) { return x * %d + %d; }\n", k, f, f + 1, k);
        wk_str_printf(src, "__attribute__((visibility(\"default\"))) int64_t wk_stage_%d(int64_t x) {\n"
                           "    int64_t acc = 0;\n", k);
        for (int f = 0; f < 100; f++) wk_str_printf(src, "    acc += s%d_f%d(x);\n", k, f);
        wk_str_printf(src, "    return acc%s;\n}\n", broken && k == nstages - 1 ? " +" : "");
    }
}

static void test_parts(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/parts", tmp_root);
    set_env("WICK_CACHE_DIR", dir);
    WkStr src = {0};
    build_staged(&src, 8, 0);
    CHECK(src.len > 2 * 16 * 1024);
    for (int jobs = 1; jobs <= 3; jobs += 2) {
        char j[16];
        snprintf(j, sizeof j, "%d", jobs);
        set_env("WICK_CC_JOBS", j);
        wk_str_printf(&src, "/* jobs %d */\n", jobs); /* a new key each time */
        int hit = -1;
        WkLib *lib = wk_cc_load(src.data, &hit);
        CHECK(lib != NULL);
        if (!lib) {
            fprintf(stderr, "error: %s\n", wk_error_get());
            continue;
        }
        CHECK_EQ_INT(hit, 0);
        for (int k = 0; k < 8; k++) {
            int64_t (*fn)(int64_t);
            *(void **)&fn = wk_cc_symbol(lib, k == 0 ? "wk_stage_0" : k == 7 ? "wk_stage_7" : "wk_stage_3");
            /* sum over f of (x*(f+1) + k) at x = 2: 2*5050 + 100k */
            int kk = k == 0 ? 0 : k == 7 ? 7 : 3;
            CHECK(fn && fn(2) == 10100 + 100 * kk);
        }
        wk_cc_close(lib);
    }
    /* no temporaries left behind */
    DIR *d = opendir(dir);
    int stray = 0;
    for (struct dirent *e; d && (e = readdir(d));) stray += strstr(e->d_name, ".tmp") != NULL;
    if (d) closedir(d);
    CHECK_EQ_INT(stray, 0);
    set_env("WICK_CC_JOBS", "2");
    build_staged(&src, 8, 1);
    CHECK(wk_cc_load(src.data, NULL) == NULL);
    CHECK_STR_CONTAINS(wk_error_get(), "failed");
    CHECK_STR_CONTAINS(wk_error_get(), ".c");
    set_env("WICK_CC_JOBS", NULL);
    wk_str_free(&src);
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/wick-test-cc-XXXXXX");
    if (!mkdtemp(tmp_root)) return 2;
    set_env("WICK_CC", NULL);
    set_env("WICK_CFLAGS", NULL);
    test_compile_and_hit();
    test_errors();
    test_unwritable_dir();
    test_concurrent_processes();
    test_concurrent_threads();
    test_parts();
    rm_rf(tmp_root);
    return CHECK_DONE();
}
