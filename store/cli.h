/*
 * cli.h — small helpers of the command-line tools that make and inspect
 * snapshots (tlsnap in store/, tlsynth model in model/): flags and counts
 * with k/M/G suffixes (a bad one is a usage error: exit status 2), sizes in
 * human units, the core count, wall time, and "mkdir -p" for a snapshot's
 * parent directories.
 *
 * Header-only (static inline) so that a tool includes it without linking
 * anything.  Not part of the store's interface (store.h): the store never
 * calls these.  THREAD SAFETY: pure functions of their arguments, except
 * store_cli_mkdir_parents, which creates directories, and the usage errors,
 * which exit.
 */
#ifndef TL_STORE_CLI_H
#define TL_STORE_CLI_H

#include "store/store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STORE_CLI_MAX_PATH 4096

/* Whom a usage error names and what it prints after the reason: e.g.
 * {"tlsnap verify", usage_verify}. */
typedef struct store_cli_usage {
    const char *prog; /* "tlsnap verify", "tlsynth model" */
    const char *text; /* the command's usage text */
} store_cli_usage_t;

/* Prints "<prog>: <reason>", a blank line and the usage text to stderr and
 * exits with status 2. */
static inline __attribute__((cold, format(printf, 2, 3))) _Noreturn void
store_cli_usage_error(const store_cli_usage_t *u, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", u->prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n\n%s", u->text);
    exit(2);
}

/* Monotonic wall time in seconds. */
static inline double store_cli_now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Online cores, clamped to 1..max. */
static inline uint32_t store_cli_cpu_count(uint32_t max)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (unsigned long)n > max ? max : (uint32_t)n;
}

/* "12.3 MB" style, decimal units, written into buf (32 bytes suffice);
 * returns buf. */
static inline const char *store_cli_human_bytes(uint64_t b, char *buf, size_t len)
{
    static const char *unit[] = {"B", "kB", "MB", "GB", "TB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1000.0 && u < 4) {
        v /= 1000.0;
        u++;
    }
    snprintf(buf, len, u == 0 ? "%.0f %s" : "%.1f %s", v, unit[u]);
    return buf;
}

/* Parses an unsigned count with an optional suffix: k/K, M, G, T (powers of
 * 1000) or Ki, Mi, Gi, Ti (powers of 1024).  "10M" = 10000000.  Returns 0 or
 * -EINVAL (not a number, unknown suffix, overflow). */
static inline int store_cli_parse_count(const char *s, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return -EINVAL; /* also refuses "-1", which strtoull would wrap */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return -EINVAL;
    uint64_t mul = 1;
    if (*end != '\0') {
        const char *sfx = "kMGT";
        const char *p = strchr(sfx, *end == 'K' ? 'k' : *end);
        if (p == NULL)
            return -EINVAL;
        int power = (int)(p - sfx) + 1;
        uint64_t base = 1000;
        end++;
        if (*end == 'i') {
            base = 1024;
            end++;
        }
        if (*end != '\0')
            return -EINVAL;
        for (int i = 0; i < power; i++)
            mul *= base;
    }
    if (v != 0 && mul > UINT64_MAX / v)
        return -EINVAL;
    *out = (uint64_t)v * mul;
    return 0;
}

/* Prints "<prog>: <dir>: <CODE>: <message>" for a failed snapshot call
 * (the store's message names the file inside dir and the offset). */
static inline __attribute__((cold)) void store_cli_print_error(const char *prog, const char *dir,
                                                               const store_error_t *err)
{
    fprintf(stderr, "%s: %s: %s: %s\n", prog, dir, store_errc_name(err->code),
            err->msg[0] ? err->msg : "(no message)");
}

/* Returns 1 when argv[*i] is the flag `name` given as "--name V" or
 * "--name=V" (then *val points at V and *i is past it), 0 when it is not.
 * A matching flag without a value is a usage error. */
static inline int store_cli_flag(const store_cli_usage_t *u, int argc, char **argv, int *i,
                                 const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    if (*i + 1 >= argc)
        store_cli_usage_error(u, "option %s needs a value", name);
    *val = argv[++*i];
    return 1;
}

/* The count v (store_cli_parse_count) of flag `name`, in min..max; anything
 * else is a usage error. */
static inline uint64_t store_cli_count_arg(const store_cli_usage_t *u, const char *name,
                                           const char *v, uint64_t min, uint64_t max)
{
    uint64_t x;
    if (store_cli_parse_count(v, &x) != 0)
        store_cli_usage_error(u, "%s: '%s' is not a count (digits with an optional k/M/G/T suffix)",
                              name, v);
    if (x < min || x > max)
        store_cli_usage_error(u, "%s: %" PRIu64 " is out of range %" PRIu64 "..%" PRIu64, name, x,
                              min, max);
    return x;
}

/* The parent directories one store_cli_mkdir_parents call created, so that
 * a failure can remove them again: prefix lengths of the path, in the order
 * they were made. */
struct store_cli_made_dirs {
    uint32_t n;
    uint32_t len[64]; /* deeper ones are created but not recorded (left behind) */
};

/* Creates the missing parent directories of path (mode 0755), like
 * "mkdir -p $(dirname path)"; the last component is left to the snapshot
 * writer.  Records what it created in *made unless made is NULL.  Returns 0
 * or -errno. */
static inline int store_cli_mkdir_parents(const char *path, struct store_cli_made_dirs *made)
{
    char buf[STORE_CLI_MAX_PATH];
    size_t n = strlen(path);
    if (n >= sizeof buf)
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0'; /* "a/b/" names b */
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) == 0) {
            if (made && made->n < sizeof made->len / sizeof made->len[0])
                made->len[made->n++] = (uint32_t)(p - buf);
        } else if (errno != EEXIST) {
            return -errno;
        }
        *p = '/';
    }
    return 0;
}

/* Removes the directories store_cli_mkdir_parents recorded in *made,
 * deepest first (rmdir: only while empty). */
static inline void store_cli_undo_parents(const char *path, const struct store_cli_made_dirs *made)
{
    char buf[STORE_CLI_MAX_PATH];
    for (uint32_t i = made->n; i-- > 0;) {
        memcpy(buf, path, made->len[i]);
        buf[made->len[i]] = '\0';
        rmdir(buf);
    }
}

#endif /* TL_STORE_CLI_H */
