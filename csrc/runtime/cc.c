/* cc.c — the system C compiler behind wick, and the on-disk artifact cache.
 * Python-free (built into the ASan C unit tests).
 *
 * A source maps to <cache>/<key>.so, key = SHA-256 of (source, compiler
 * command, its `--version` line, flags, CPU identity: -march=native code
 * must not be shared between different CPUs). Beside it, <key>.so.sha256
 * holds the SHA-256 of the .so bytes; a load verifies it, so a truncated or
 * corrupt artifact is rebuilt instead of crashing the process.
 *
 * Concurrency: within a process one mutex guards the caches (compiler
 * identity, cache directory) and is let go while the compiler runs (callers
 * drop the GIL around wk_cc_load). Across processes and threads, a per-key flock()
 * serialises compiles of the same key, and every file is written to a
 * unique temporary name, fsync'd and renamed into place, so a reader never
 * sees half a file; if locking is unavailable, the last rename wins with an
 * identical file. */
#define _GNU_SOURCE /* pipe2 */
#include "runtime.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

struct WkLib {
    void *handle;
    char *path;
};

static pthread_mutex_t cc_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t cc_once = PTHREAD_ONCE_INIT;

/* A child forked while another thread compiles must not inherit a mutex
 * that nobody will unlock; its caches are plain pointers, consistent
 * between statements. */
static void cc_child_after_fork(void) { pthread_mutex_init(&cc_mutex, NULL); }
static void cc_init_once(void) { pthread_atfork(NULL, NULL, cc_child_after_fork); }

static void cc_lock(void) {
    pthread_once(&cc_once, cc_init_once);
    pthread_mutex_lock(&cc_mutex);
}

/* -O2, not -O3: the kernels' loops carry `omp simd`, which vectorises them
 * at -O2 too; -O3's extra loop transforms cost a third more compile time
 * for no measured kernel speed (bench/results/2026-12-01-1345-cpu2-compile). */
static const char *const base_flags[] = {
    "-O2", "-march=native", "-fopenmp", "-fPIC", "-shared", "-fno-math-errno", "-ffp-contract=fast",
};

/* ---- small file helpers ------------------------------------------------ */

/* mkdir -p; 0 if the directory exists afterwards. */
static int mkdir_p(const char *path) {
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
    struct stat st;
    return stat(buf, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -1;
}

/* Reads a whole file (malloc'd, NUL-terminated). NULL if it cannot. */
static char *read_file(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return NULL;
    }
    size_t cap = (size_t)st.st_size + 1, n = 0;
    char *data = wk_xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) data = wk_xrealloc(data, cap *= 2);
        ssize_t r = read(fd, data + n, cap - n - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            free(data);
            close(fd);
            return NULL;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    data[n] = '\0';
    if (len) *len = n;
    return data;
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Writes `data` to a unique temporary beside `path`, fsyncs, renames. */
static int write_atomic(const char *path, const void *data, size_t n) {
    WkStr tmp = {0};
    wk_str_printf(&tmp, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp.data), rc = -1;
    if (fd < 0) goto done;
    if (write_all(fd, data, n) == 0 && fsync(fd) == 0 && fchmod(fd, 0644) == 0) rc = 0;
    close(fd);
    if (rc == 0 && rename(tmp.data, path) != 0) rc = -1;
    if (rc != 0) unlink(tmp.data);
done:
    if (rc != 0) wk_error_set("wick: cannot write %s: %s", path, strerror(errno));
    wk_str_free(&tmp);
    return rc;
}

static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the cache directory ----------------------------------------------- */

static char cache_dir[PATH_MAX];
static char *cache_dir_from; /* the WICK_CACHE_DIR/HOME value cache_dir was derived from */

static int dir_usable(const char *dir) { return mkdir_p(dir) == 0 && access(dir, W_OK | X_OK) == 0; }

static const char *resolve_cache_dir(void) {
    const char *env = wk_env_str(WK_ENV_CACHE_DIR);
    const char *home = getenv("HOME");
    WkStr want = {0};
    if (*env)
        wk_str_append(&want, env);
    else
        wk_str_printf(&want, "%s/.cache/wick", home && *home ? home : "/nonexistent");
    if (cache_dir_from && !strcmp(cache_dir_from, want.data)) {
        wk_str_free(&want);
        return cache_dir;
    }
    free(cache_dir_from);
    cache_dir_from = wk_xstrdup(want.data);
    if (strlen(want.data) < sizeof cache_dir && dir_usable(want.data)) {
        strcpy(cache_dir, want.data);
    } else {
        /* Not writable: a private per-user temporary cache keeps wick working. */
        const char *tmpdir = getenv("TMPDIR");
        WkStr fb = {0};
        wk_str_printf(&fb, "%s/wick-cache-%ld", tmpdir && *tmpdir ? tmpdir : "/tmp", (long)getuid());
        struct stat st;
        int ok = (mkdir(fb.data, 0700) == 0 || errno == EEXIST) && lstat(fb.data, &st) == 0 &&
                 S_ISDIR(st.st_mode) && st.st_uid == getuid() && access(fb.data, W_OK | X_OK) == 0;
        if (!ok) {
            wk_str_free(&fb);
            wk_str_printf(&fb, "%s/wick-cache-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
            ok = mkdtemp(fb.data) != NULL;
        }
        snprintf(cache_dir, sizeof cache_dir, "%s", ok ? fb.data : "/tmp");
        fprintf(stderr, "[wick] cache directory %s is not writable; using %s\n", want.data, cache_dir);
        wk_str_free(&fb);
    }
    wk_str_free(&want);
    return cache_dir;
}

const char *wk_cc_cache_dir(void) {
    cc_lock();
    const char *d = resolve_cache_dir();
    pthread_mutex_unlock(&cc_mutex);
    return d;
}

/* ---- running the compiler ---------------------------------------------- */

typedef WkVec(char *) Argv;

static void argv_split(Argv *v, const char *s) {
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        const char *start = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n') p++;
        char *word = wk_xmalloc((size_t)(p - start) + 1);
        memcpy(word, start, (size_t)(p - start));
        word[p - start] = '\0';
        wk_vec_push(v, word);
    }
}

static void argv_free(Argv *v) {
    for (int i = 0; i < v->len; i++) free(v->data[i]);
    wk_vec_free(v);
}

/* A started child whose stdout+stderr go to the pipe `fd`. */
typedef struct {
    pid_t pid;
    int fd;
} Child;

/* Starts argv (no shell). 0, or -1 with errno when it could not start. */
static int spawn_capture(Argv *argv, Child *ch) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    wk_vec_push(argv, NULL);
    pid_t pid;
    int err = posix_spawnp(&pid, argv->data[0], &fa, NULL, argv->data, environ);
    argv->len--;
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (err != 0) {
        close(fds[0]);
        errno = err;
        return -1;
    }
    ch->pid = pid;
    ch->fd = fds[0];
    return 0;
}

/* Collects a started child's output (up to a bound) into out and reaps it.
 * Returns its exit status (128+sig when killed), or -1 with errno. */
static int finish_capture(Child *ch, WkStr *out) {
    char buf[4096];
    for (;;) {
        ssize_t r = read(ch->fd, buf, sizeof buf - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        buf[r] = '\0';
        if (out->len < 256 * 1024) wk_str_append(out, buf);
    }
    close(ch->fd);
    int status;
    while (waitpid(ch->pid, &status, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* Runs argv (no shell), collecting stdout+stderr (up to a bound) into out.
 * Returns the exit status (128+sig when killed), or -1 with errno when it
 * could not start. */
static int run_capture(Argv *argv, WkStr *out) {
    Child ch;
    if (spawn_capture(argv, &ch) < 0) return -1;
    return finish_capture(&ch, out);
}

/* Compiler identity: the command and its `--version` first line, cached
 * per command string. */
static char *ident_cc, *ident_version;

static int compiler_identity(const char *cc, const char **version) {
    if (ident_cc && !strcmp(ident_cc, cc)) {
        *version = ident_version;
        return 0;
    }
    Argv argv = {0};
    argv_split(&argv, cc);
    if (argv.len == 0) {
        argv_free(&argv);
        wk_error_set("wick: WICK_CC is empty");
        return -1;
    }
    wk_vec_push(&argv, wk_xstrdup("--version"));
    WkStr out = {0};
    int st = run_capture(&argv, &out);
    int rc = -1;
    if (st < 0 && (errno == ENOENT || errno == EACCES || errno == ENOTDIR)) {
        wk_error_set("wick: C compiler '%s' not found (set WICK_CC)", cc);
    } else if (st < 0) {
        wk_error_set("wick: cannot run C compiler '%s': %s", cc, strerror(errno));
    } else if (st == 127) {
        wk_error_set("wick: C compiler '%s' not found (set WICK_CC)", cc);
    } else if (st != 0) {
        wk_error_set("wick: C compiler '%s' failed on --version (exit %d)", cc, st);
    } else {
        char *line = out.data ? out.data : wk_xstrdup("");
        line[strcspn(line, "\n")] = '\0';
        if (!out.data) out.data = line;
        free(ident_cc);
        free(ident_version);
        ident_cc = wk_xstrdup(cc);
        ident_version = wk_xstrdup(line);
        *version = ident_version;
        rc = 0;
    }
    wk_str_free(&out);
    argv_free(&argv);
    return rc;
}

/* The CPU's model and feature flags (code built with -march=native). */
static const char *cpu_identity(void) {
    static char *ident;
    if (ident) return ident;
    WkStr s = {0};
    wk_str_append(&s, "");
    char *info = read_file("/proc/cpuinfo", NULL);
    if (info) {
        int got = 0;
        char *save = NULL;
        for (char *line = strtok_r(info, "\n", &save); line && got < 2;
             line = strtok_r(NULL, "\n", &save)) {
            if (!strncmp(line, "model name", 10) || !strncmp(line, "flags", 5)) {
                wk_str_append(&s, line);
                wk_str_append(&s, "\n");
                got++;
            }
        }
        free(info);
    }
    ident = s.data;
    return ident;
}

/* Extra flags a generated source asks for, on a line of its first 2 KiB
 * (the first such line only: a plan's unit holds one header per stage):
 *     // wick-cflags: -fno-trapping-math ...           */
static void source_flags(const char *source, Argv *flags) {
    const char *tag = "wick-cflags:";
    size_t limit = strnlen(source, 2048);
    const char *p = source;
    while (p < source + limit) {
        const char *nl = memchr(p, '\n', (size_t)(source + limit - p));
        const char *end = nl ? nl : source + limit;
        const char *hit = NULL;
        for (const char *q = p; q + strlen(tag) <= end; q++)
            if (!memcmp(q, tag, strlen(tag))) {
                hit = q + strlen(tag);
                break;
            }
        if (hit) {
            size_t n = (size_t)(end - hit);
            char *line = wk_xmalloc(n + 1);
            memcpy(line, hit, n);
            line[n] = '\0';
            char *close = strstr(line, "*/");
            if (close) *close = '\0';
            argv_split(flags, line);
            free(line);
            break;
        }
        if (!nl) break;
        p = nl + 1;
    }
}

/* ---- loading ------------------------------------------------------------ */

/* 1 loaded, 0 missing or rejected (caller rebuilds). */
static int try_load(const char *so_path, const char *sum_path, void **handle) {
    size_t len;
    char *bytes = read_file(so_path, &len);
    if (!bytes) return 0;
    char *sum = read_file(sum_path, NULL);
    char hex[65];
    wk_sha256_hex(bytes, len, hex);
    free(bytes);
    const char *why = NULL;
    if (!sum)
        why = "its checksum file is missing";
    else if (strncmp(sum, hex, 64) != 0)
        why = "its checksum does not match (corrupt or truncated)";
    free(sum);
    if (!why) {
        *handle = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
        if (*handle) return 1;
        why = "dlopen failed";
        const char *e = dlerror();
        wk_log(WK_LOG_CODE, "dlopen %s: %s", so_path, e ? e : "?");
    }
    fprintf(stderr, "[wick] cached kernel %s is unusable (%s); rebuilding it\n", so_path, why);
    unlink(so_path);
    unlink(sum_path);
    return 0;
}

/* ---- compiling a unit in parts -------------------------------------------
 * A plan's unit is marked (WK_CC_PART_MARK) before each stage. A big unit
 * is cut at marks into about equal parts, compiled to objects by parallel
 * compiler processes and linked once: the wall time of a cold compile
 * shrinks with the CPUs. Any failure here falls back to compiling the unit
 * whole, which reports errors against the one source. */
enum { PARTS_MAX = 4, PART_MIN_BYTES = 16 * 1024 };

static int usable_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Cut offsets (starts of parts 1..n-1) at marks; returns the number of parts. */
static int plan_parts(const char *source, size_t *cuts) {
    long jobs = *wk_env_str(WK_ENV_CC_JOBS) ? wk_env_int(WK_ENV_CC_JOBS) : usable_cpus();
    size_t len = strlen(source);
    int want = jobs < 1 ? 1 : jobs > PARTS_MAX ? PARTS_MAX : (int)jobs;
    if ((size_t)want > len / PART_MIN_BYTES) want = (int)(len / PART_MIN_BYTES);
    int n = 1;
    const char *p = source;
    while (n < want && (p = strstr(p + 1, WK_CC_PART_MARK))) {
        size_t at = (size_t)(p - source);
        if (at >= len * (size_t)n / (size_t)want) cuts[n++ - 1] = at;
    }
    return n;
}

/* 0: tmp_so linked from parts compiled in parallel; -1: not done (the
 * caller compiles the unit whole). */
static int compile_parts(const char *source, const char *cc, Argv *flags, const char *tmp_so) {
    size_t cuts[PARTS_MAX];
    int n = plan_parts(source, cuts);
    if (n < 2) return -1;
    WkStr src_path[PARTS_MAX] = {{0}}, obj_path[PARTS_MAX] = {{0}}, out = {0};
    Child kids[PARTS_MAX];
    int started = 0, ok = 1;
    size_t len = strlen(source);
    double t0 = now_s();
    for (int i = 0; i < n && ok; i++) {
        size_t from = i == 0 ? 0 : cuts[i - 1], to = i == n - 1 ? len : cuts[i];
        wk_str_printf(&src_path[i], "%s.p%d.c", tmp_so, i);
        wk_str_printf(&obj_path[i], "%s.p%d.o", tmp_so, i);
        if (write_atomic(src_path[i].data, source + from, to - from) < 0) {
            ok = 0;
            break;
        }
        Argv argv = {0};
        argv_split(&argv, cc);
        for (int f = 0; f < flags->len; f++)
            if (strcmp(flags->data[f], "-shared")) wk_vec_push(&argv, wk_xstrdup(flags->data[f]));
        wk_vec_push(&argv, wk_xstrdup("-c"));
        wk_vec_push(&argv, wk_xstrdup("-o"));
        wk_vec_push(&argv, wk_xstrdup(obj_path[i].data));
        wk_vec_push(&argv, wk_xstrdup(src_path[i].data));
        if (spawn_capture(&argv, &kids[i]) < 0) ok = 0;
        else started++;
        argv_free(&argv);
    }
    for (int i = 0; i < started; i++) { /* reap every child, even after a failure */
        out.len = 0;
        if (finish_capture(&kids[i], &out) != 0) ok = 0;
    }
    for (int with_mvec = 1; ok && with_mvec >= 0; with_mvec--) {
        Argv argv = {0};
        argv_split(&argv, cc);
        for (int f = 0; f < flags->len; f++) wk_vec_push(&argv, wk_xstrdup(flags->data[f]));
        wk_vec_push(&argv, wk_xstrdup("-o"));
        wk_vec_push(&argv, wk_xstrdup(tmp_so));
        for (int i = 0; i < n; i++) wk_vec_push(&argv, wk_xstrdup(obj_path[i].data));
        if (with_mvec) wk_vec_push(&argv, wk_xstrdup("-lmvec"));
        wk_vec_push(&argv, wk_xstrdup("-lm"));
        out.len = 0;
        if (out.data) out.data[0] = '\0';
        int st = run_capture(&argv, &out);
        argv_free(&argv);
        if (st == 0) break;
        if (!(with_mvec && st > 0 && out.data && strstr(out.data, "mvec"))) ok = 0; /* no libmvec: retry */
    }
    if (ok) wk_log(WK_LOG_PERF, "cc %d parts in parallel: %.3fs", n, now_s() - t0);
    for (int i = 0; i < n; i++) {
        if (src_path[i].data) unlink(src_path[i].data);
        if (obj_path[i].data) unlink(obj_path[i].data);
        wk_str_free(&src_path[i]);
        wk_str_free(&obj_path[i]);
    }
    wk_str_free(&out);
    if (!ok) wk_error_clear(); /* the whole-unit compile reports its own */
    return ok ? 0 : -1;
}

/* Compiles into a temporary, then publishes checksum and library. */
static int compile_into(const char *dir, const char *key, const char *source, const char *cc,
                        Argv *flags) {
    WkStr c_path = {0}, tmp_so = {0}, so_path = {0}, sum_path = {0}, out = {0};
    Argv argv = {0};
    int rc = -1;
    wk_str_printf(&c_path, "%s/%s.c", dir, key);
    wk_str_printf(&so_path, "%s/%s.so", dir, key);
    wk_str_printf(&sum_path, "%s/%s.so.sha256", dir, key);
    wk_str_printf(&tmp_so, "%s/%s.tmpXXXXXX.so", dir, key);
    if (write_atomic(c_path.data, source, strlen(source)) < 0) goto done;
    int fd = mkstemps(tmp_so.data, 3);
    if (fd < 0) {
        wk_error_set("wick: cannot create a file in %s: %s", dir, strerror(errno));
        goto done;
    }
    close(fd);
    int in_parts = compile_parts(source, cc, flags, tmp_so.data) == 0;
    for (int with_mvec = 1; !in_parts && with_mvec >= 0; with_mvec--) {
        argv_free(&argv);
        argv_split(&argv, cc);
        for (int i = 0; i < flags->len; i++) wk_vec_push(&argv, wk_xstrdup(flags->data[i]));
        wk_vec_push(&argv, wk_xstrdup("-o"));
        wk_vec_push(&argv, wk_xstrdup(tmp_so.data));
        wk_vec_push(&argv, wk_xstrdup(c_path.data));
        if (with_mvec) wk_vec_push(&argv, wk_xstrdup("-lmvec"));
        wk_vec_push(&argv, wk_xstrdup("-lm"));
        out.len = 0;
        if (out.data) out.data[0] = '\0';
        double t0 = now_s();
        int st = run_capture(&argv, &out);
        if (st < 0) {
            if (errno == ENOENT || errno == EACCES)
                wk_error_set("wick: C compiler '%s' not found (set WICK_CC)", cc);
            else
                wk_error_set("wick: cannot run C compiler '%s': %s", cc, strerror(errno));
            goto done;
        }
        if (st == 0) {
            wk_log(WK_LOG_PERF, "cc %s.c: %.3fs", key, now_s() - t0);
            break;
        }
        if (with_mvec && out.data && strstr(out.data, "mvec")) continue; /* no libmvec here */
        const char *msg = out.data ? out.data : "";
        size_t n = strlen(msg);
        wk_error_set("wick: C compiler '%s' failed (exit %d) on %s:\n%.*s%s", cc, st, c_path.data,
                     (int)(n > 700 ? 700 : n), msg, n > 700 ? "\n[...]" : "");
        goto done;
    }
    size_t len;
    char *bytes = read_file(tmp_so.data, &len);
    if (!bytes) {
        wk_error_set("wick: compiler produced no readable %s", tmp_so.data);
        goto done;
    }
    char hex[66];
    wk_sha256_hex(bytes, len, hex);
    free(bytes);
    int sfd = open(tmp_so.data, O_RDONLY | O_CLOEXEC);
    if (sfd >= 0) {
        fsync(sfd);
        close(sfd);
    }
    strcat(hex, "\n");
    if (write_atomic(sum_path.data, hex, 65) < 0) goto done;
    if (rename(tmp_so.data, so_path.data) != 0) {
        wk_error_set("wick: cannot rename into %s: %s", so_path.data, strerror(errno));
        goto done;
    }
    fsync_dir(dir);
    rc = 0;
done:
    if (rc != 0 && tmp_so.data) unlink(tmp_so.data);
    argv_free(&argv);
    wk_str_free(&c_path);
    wk_str_free(&tmp_so);
    wk_str_free(&so_path);
    wk_str_free(&sum_path);
    wk_str_free(&out);
    return rc;
}

/* Temporaries of a process killed mid-compile are never renamed; remove
 * those older than an hour (a live compile takes seconds). */
static void sweep_stale_temporaries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".tmp")) continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            now - st.st_mtime > 3600)
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

/* OpenMP's runtime must outlive every kernel library: unloading libgomp
 * while its idle thread pool exists would crash. */
static void pin_openmp(void) {
    static int pinned;
    if (pinned) return;
    if (dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE)) pinned = 1;
}

static WkLib *load_locked(const char *source, int *cache_hit) {
    const char *cc = wk_env_str(WK_ENV_CC);
    if (!*cc) cc = "cc";
    const char *version;
    if (compiler_identity(cc, &version) < 0) return NULL;
    const char *dir = resolve_cache_dir();

    Argv flags = {0};
    for (size_t i = 0; i < sizeof base_flags / sizeof *base_flags; i++)
        wk_vec_push(&flags, wk_xstrdup(base_flags[i]));
    source_flags(source, &flags);
    argv_split(&flags, wk_env_str(WK_ENV_CFLAGS));

    WkStr keytext = {0}, so_path = {0}, sum_path = {0}, lock_path = {0};
    wk_str_printf(&keytext, "wick-cc-1\n%s\n%s\n", cc, version);
    for (int i = 0; i < flags.len; i++) wk_str_printf(&keytext, "%s ", flags.data[i]);
    wk_str_printf(&keytext, "-lmvec -lm\n%s\n", cpu_identity());
    wk_str_append(&keytext, source);
    char key[65];
    wk_sha256_hex(keytext.data, keytext.len, key);
    wk_str_free(&keytext);
    wk_str_printf(&so_path, "%s/%s.so", dir, key);
    wk_str_printf(&sum_path, "%s/%s.so.sha256", dir, key);
    wk_str_printf(&lock_path, "%s/%s.lock", dir, key);

    WkLib *lib = NULL;
    void *handle = NULL;
    int hit = try_load(so_path.data, sum_path.data, &handle);
    if (!hit) {
        /* The compiler runs without the process mutex, so that two graphs'
         * compiles (a forward's and the backward started early beside it)
         * overlap; what it uses is this call's own (copies of the cache
         * directory and command, which a later call may change), and the
         * per-key flock serialises compiles of one key, between threads
         * too (each opens the lock file anew). */
        char *own_dir = wk_xstrdup(dir), *own_cc = wk_xstrdup(cc);
        pthread_mutex_unlock(&cc_mutex);
        int lfd = open(lock_path.data, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
        if (lfd >= 0)
            while (flock(lfd, LOCK_EX) != 0 && errno == EINTR) {}
        /* Another process or thread may have built it while we waited. */
        hit = try_load(so_path.data, sum_path.data, &handle);
        if (!hit) sweep_stale_temporaries(own_dir);
        if (!hit && compile_into(own_dir, key, source, own_cc, &flags) == 0) {
            handle = dlopen(so_path.data, RTLD_NOW | RTLD_LOCAL);
            if (!handle) {
                const char *e = dlerror();
                wk_error_set("wick: dlopen %s: %s", so_path.data, e ? e : "?");
            }
        }
        if (lfd >= 0) close(lfd); /* releases the lock */
        free(own_dir);
        free(own_cc);
        cc_lock();
    }
    if (handle) {
        pin_openmp();
        lib = wk_xcalloc(1, sizeof *lib);
        lib->handle = handle;
        lib->path = wk_xstrdup(so_path.data);
        if (cache_hit) *cache_hit = hit;
        wk_log(WK_LOG_CODE, "%s %s", hit ? "loaded cached" : "compiled", so_path.data);
    }
    argv_free(&flags);
    wk_str_free(&so_path);
    wk_str_free(&sum_path);
    wk_str_free(&lock_path);
    return lib;
}

WkLib *wk_cc_load(const char *source, int *cache_hit) {
    if (cache_hit) *cache_hit = 0;
    if (!source) {
        wk_error_set("wick: no source to compile");
        return NULL;
    }
    cc_lock();
    WkLib *lib = load_locked(source, cache_hit);
    pthread_mutex_unlock(&cc_mutex);
    return lib;
}

void *wk_cc_symbol(WkLib *lib, const char *name) {
    if (!lib) return NULL;
    void *p = dlsym(lib->handle, name);
    if (!p) wk_error_set("wick: symbol '%s' not found in %s", name, lib->path);
    return p;
}

const char *wk_cc_path(const WkLib *lib) { return lib ? lib->path : ""; }

void wk_cc_close(WkLib *lib) {
    if (!lib) return;
    dlclose(lib->handle);
    free(lib->path);
    free(lib);
}
