/* env.c — the one registry of WICK_* knobs (table in common.h), the log
 * channels of WICK_LOG, and WICK_DEBUG_DIR dumps. */
#include "common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const env_names[WK_ENV_COUNT] = {
#define WK_ENV_NAME(name, dflt, doc) "WICK_" #name,
    WK_ENV_TABLE(WK_ENV_NAME)
#undef WK_ENV_NAME
};
static const char *const env_defaults[WK_ENV_COUNT] = {
#define WK_ENV_DEFAULT(name, dflt, doc) dflt,
    WK_ENV_TABLE(WK_ENV_DEFAULT)
#undef WK_ENV_DEFAULT
};

static char *env_values[WK_ENV_COUNT];
static int env_loaded;
static unsigned log_mask;

static const struct { const char *name; unsigned bit; } log_channels[] = {
    {"graphs", WK_LOG_GRAPHS}, {"breaks", WK_LOG_BREAKS}, {"guards", WK_LOG_GUARDS},
    {"recompiles", WK_LOG_RECOMPILES}, {"code", WK_LOG_CODE}, {"perf", WK_LOG_PERF},
};

static void parse_log(const char *spec) {
    log_mask = 0;
    char *copy = wk_xstrdup(spec), *save = NULL;
    for (char *tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        if (!strcmp(tok, "all")) log_mask = ~0u;
        for (size_t i = 0; i < sizeof log_channels / sizeof *log_channels; i++)
            if (!strcmp(tok, log_channels[i].name)) log_mask |= log_channels[i].bit;
    }
    free(copy);
}

void wk_env_reload(void) {
    for (int i = 0; i < WK_ENV_COUNT; i++) {
        free(env_values[i]);
        const char *v = getenv(env_names[i]);
        env_values[i] = wk_xstrdup(v && *v ? v : env_defaults[i]);
    }
    parse_log(env_values[WK_ENV_LOG]);
    env_loaded = 1;
}

const char *wk_env_str(WkEnv e) {
    if (!env_loaded) wk_env_reload();
    return env_values[e];
}

long wk_env_int(WkEnv e) {
    const char *s = wk_env_str(e);
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0') v = strtol(env_defaults[e], NULL, 10);
    return v;
}

int wk_log_on(WkLogChannel c) {
    if (!env_loaded) wk_env_reload();
    return (log_mask & (unsigned)c) != 0;
}

void wk_log(WkLogChannel c, const char *fmt, ...) {
    if (!wk_log_on(c)) return;
    const char *name = "log";
    for (size_t i = 0; i < sizeof log_channels / sizeof *log_channels; i++)
        if (log_channels[i].bit == (unsigned)c) name = log_channels[i].name;
    fprintf(stderr, "[wick:%s] ", name);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void wk_debug_dump(const char *name, const char *text) {
    const char *dir = wk_env_str(WK_ENV_DEBUG_DIR);
    if (!*dir) return;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return;
    WkStr path = {0};
    wk_str_printf(&path, "%s/%s", dir, name);
    FILE *f = fopen(path.data, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    wk_str_free(&path);
}
