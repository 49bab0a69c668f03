/*
 * config_check.c — what is checked once every source of the settings is
 * read (a setting that depends on another, or on a file), and --help.
 *
 * THE ADMIN TOKEN
 *   Whoever holds it can make the server load any directory it can read, so
 *   it is taken from where other users cannot see it: --admin-token-file
 *   (read once here; one trailing newline stripped; missing, unreadable,
 *   empty or not a regular file is an error; readable by others is a
 *   warning) or TLSERVE_ADMIN_TOKEN.  --admin-token still works, with a
 *   warning.  A token and a token file together are refused: which one is
 *   in force must not depend on a precedence rule the operator forgot.
 *
 * THE MODEL ROOT
 *   --model-root limits what the token can load: admin loads (admin.c) and
 *   --model must resolve (realpath: symlinks and '..' followed) to a path
 *   strictly under the root's real path, with a '/' boundary.  The root
 *   must exist as a directory when the settings are read (config_table.c
 *   checks that).  --model-repo must lie under it too, and is then watched
 *   by its real path.
 *
 * --help
 *   Prints the table (config_table.c) as one line per setting: flag,
 *   default, what is allowed, meaning, and its environment variable.
 *
 * THREAD SAFETY
 *   server__cfg_validate() and server__cfg_print_help() run on the main
 *   thread from server_config_load(); server_path_under_root() is also
 *   called by the admin thread and keeps no state.
 */
#include "config_impl.h"
#include "log.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- the model root ------------------------------------------------------------ */

int server_path_under_root(const char *root, const char *path, char *resolved, size_t len,
                           char *why, size_t why_len)
{
    char rroot[PATH_MAX], rpath[PATH_MAX];
    if (!realpath(root, rroot)) {
        snprintf(why, why_len, "the model root '%s' cannot be resolved: %s", root, strerror(errno));
        return -1;
    }
    if (!realpath(path, rpath)) {
        snprintf(why, why_len, "'%s' cannot be resolved: %s", path, strerror(errno));
        return -1;
    }
    /* realpath never ends in '/' except for "/" itself: under root means
     * root's path, a '/', then at least one byte (so "/models2" is not
     * under "/models" and the root itself is not under itself). */
    size_t n = strlen(rroot);
    bool under = n == 1 ? rpath[1] != '\0'
                        : strncmp(rpath, rroot, n) == 0 && rpath[n] == '/' && rpath[n + 1] != '\0';
    if (!under) {
        snprintf(why, why_len, "'%s' resolves to '%s', which is not under the model root '%s'",
                 path, rpath, rroot);
        return -1;
    }
    if (strlen(rpath) >= len) {
        snprintf(why, why_len, "'%s' resolves to a path of %zu bytes (at most %zu)", path,
                 strlen(rpath), len - 1);
        return -1;
    }
    memcpy(resolved, rpath, strlen(rpath) + 1);
    return 0;
}

/* ---- the admin token file ------------------------------------------------------ */

/* Reads cfg->admin_token_file into cfg->admin_token.  Returns 0, or -1 with
 * the reason on stderr.  Warns (LL_WARN) when others may read the file. */
static int read_token_file(server_config_t *cfg)
{
    const char *path = cfg->admin_token_file;
    char buf[sizeof cfg->admin_token + 2]; /* the longest token, "\r\n" */
    char why[400];
    int rc = -1;
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "tlserve: --admin-token-file: cannot open '%s': %s\n", path,
                strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "tlserve: --admin-token-file: '%s' is not a regular file\n", path);
        goto out;
    }
    size_t n = fread(buf, 1, sizeof buf, f);
    if (ferror(f)) {
        fprintf(stderr, "tlserve: --admin-token-file: cannot read '%s': %s\n", path,
                strerror(errno));
        goto out;
    }
    if (n == sizeof buf) {
        fprintf(stderr,
                "tlserve: --admin-token-file: '%s' is too long (a token is at most %zu bytes)\n",
                path, sizeof cfg->admin_token - 1);
        goto out;
    }
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    buf[n] = '\0';
    if (n == 0) {
        fprintf(stderr, "tlserve: --admin-token-file: '%s' is empty (it must hold the token)\n",
                path);
        goto out;
    }
    if (n >= sizeof cfg->admin_token) {
        fprintf(stderr,
                "tlserve: --admin-token-file: '%s' is too long (a token is at most %zu bytes)\n",
                path, sizeof cfg->admin_token - 1);
        goto out;
    }
    if (memchr(buf, '\0', n) || server__cfg_check_token(buf, why, sizeof why) != 0) {
        fprintf(stderr, "tlserve: --admin-token-file: '%s': %s\n", path,
                memchr(buf, '\0', n) ? "the token has a NUL byte" : why);
        goto out;
    }
    memcpy(cfg->admin_token, buf, n + 1);
    if (st.st_mode & S_IROTH)
        LOG(LL_WARN,
            "--admin-token-file: '%s' is readable by every local user (mode %04o): "
            "chmod o-r it",
            path, (unsigned)(st.st_mode & 07777));
    rc = 0;
out:
    memset(buf, 0, sizeof buf);
    fclose(f);
    return rc;
}

/* ---- --help -------------------------------------------------------------------- */

void server__cfg_print_help(FILE *f)
{
    int w = (int)strlen("setting"); /* the flag column: as wide as the longest flag */
    for (size_t i = 0; i < server__cfg_ntable; i++) {
        int n = 2 + (int)strlen(server__cfg_table[i].name);
        w = n > w ? n : w;
    }
    fprintf(f,
            "usage: tlserve [--config FILE] [--name value | --name=value ...]\n"
            "\n"
            "tlserve: CTR prediction server (binary protocol on --port, HTTP admin on "
            "--admin-port).\n"
            "Settings apply in order: defaults, then the INI file given by --config (keys in a\n"
            "[server] section, same names as the flags, '_' or '-'), then flags.\n"
            "\n"
            "  %-*s %-12s %-24s %s\n",
            w, "setting", "default", "allowed", "meaning");
    fprintf(f, "  %-*s %-12s %-24s %s\n", w, "--config", "", "a file path",
            "INI file read before the flags");
    fprintf(f, "  %-*s %-12s %-24s %s\n", w, "--help", "", "", "print this and exit");
    for (size_t i = 0; i < server__cfg_ntable; i++) {
        const cfg_entry_t *e = &server__cfg_table[i];
        char flag[64], range[64];
        snprintf(flag, sizeof flag, "--%s", e->name);
        switch (e->type) {
        case CFG_INT: /* a check may narrow the range: it names what it allows */
            if (e->allowed)
                snprintf(range, sizeof range, "%s", e->allowed);
            else
                snprintf(range, sizeof range, "%lld..%lld", (long long)e->min, (long long)e->max);
            break;
        case CFG_BOOL:
            snprintf(range, sizeof range, "true|false");
            break;
        case CFG_STRING:
            snprintf(range, sizeof range, "%s", e->allowed ? e->allowed : "a string");
            break;
        case CFG_DOUBLE:
            snprintf(range, sizeof range, "%g..%g (real)", e->min, e->max);
            break;
        }
        fprintf(f, "  %-*s %-12s %-24s %s%s%s%s\n", w, flag, e->def[0] ? e->def : "\"\"", range,
                e->help, e->env ? " (env " : "", e->env ? e->env : "", e->env ? ")" : "");
    }
}

/* ---- after every source ------------------------------------------------------ */

/* Whether dir, given as --flag, lies under --model-root: 0 with its real
 * path in real (len bytes), or -1 with the reason on stderr. */
static int under_root(const server_config_t *cfg, const char *flag, const char *dir, char *real,
                      size_t len)
{
    char why[400];
    if (server_path_under_root(cfg->model_root, dir, real, len, why, sizeof why) == 0)
        return 0;
    fprintf(stderr, "tlserve: --%s '%s' is not under --model-root '%s': %s\n", flag, dir,
            cfg->model_root, why);
    return -1;
}

/* Whether two listen addresses can collide on one port: the same address, or
 * either one a wildcard (0.0.0.0, ::) that covers the other. */
static bool planes_may_clash(const char *a, const char *b)
{
    return strcmp(a, b) == 0 || strcmp(a, "0.0.0.0") == 0 || strcmp(b, "0.0.0.0") == 0 ||
           strcmp(a, "::") == 0 || strcmp(b, "::") == 0;
}

int server__cfg_validate(server_config_t *cfg, const cfg_entry_t *secret_flag)
{
    int level = server__cfg_log_level(cfg->log_level);

    if (level >= 0)
        server_log_level = level;

    if (cfg->admin_token_file[0]) {
        if (cfg->admin_token[0]) {
            fprintf(stderr, "tlserve: --admin-token-file: an admin token is given as well "
                            "(--admin-token, TLSERVE_ADMIN_TOKEN or the config file): give one\n");
            return -1;
        }
        if (read_token_file(cfg) != 0)
            return -1;
    }
    if (cfg->model_root[0] && cfg->model_dir[0]) {
        char real[sizeof cfg->model_dir];
        if (under_root(cfg, "model", cfg->model_dir, real, sizeof real) != 0)
            return -1;
    }
    if (cfg->model_repo[0] && cfg->model_dir[0]) {
        fprintf(stderr, "tlserve: --model and --model-repo together: serve one snapshot "
                        "(--model) or a repository (--model-repo), not both\n");
        return -1;
    }
    if (cfg->model_name[0] && !cfg->model_repo[0]) {
        fprintf(stderr, "tlserve: --model-name '%s' needs --model-repo\n", cfg->model_name);
        return -1;
    }
    if (!cfg->online && (cfg->train_file[0] || cfg->sample_log_dir[0])) {
        fprintf(stderr, "tlserve: %s needs --online%s\n",
                cfg->train_file[0] ? "--train-file" : "--sample-log-dir",
                cfg->train_file[0] ? "" : " (without it nothing is logged)");
        return -1;
    }
    if (!cfg->online && cfg->bus_servers[0]) {
        fprintf(stderr, "tlserve: --bus-servers needs --online (the bus carries online "
                        "learning's samples and updates; without it no bus is used)\n");
        return -1;
    }
    if (cfg->online && cfg->online_boost_ms > 0 && cfg->online_boost_nice > cfg->online_nice) {
        fprintf(stderr,
                "tlserve: --online-boost-nice %d is above --online-nice %d: a boost would "
                "lower the starved trainer's priority (give 0..%d, or --online-boost-ms 0)\n",
                cfg->online_boost_nice, cfg->online_nice, cfg->online_nice);
        return -1;
    }
    if (cfg->online && cfg->bus_servers[0] && strcmp(cfg->bus_mode, "partitioned") != 0 &&
        !cfg->sample_log_dir[0]) {
        fprintf(stderr, "tlserve: --bus-servers needs --sample-log-dir (the outbox a sample is "
                        "acknowledged in before it is forwarded to the stream)\n");
        return -1;
    }
    if (cfg->repo_marks_dir[0] && !cfg->model_repo[0]) {
        fprintf(stderr, "tlserve: --repo-marks-dir '%s' needs --model-repo (it keeps the "
                        "repository's pins, rollbacks and refusals)\n", cfg->repo_marks_dir);
        return -1;
    }
    if (cfg->model_root[0] && cfg->model_repo[0]) {
        char real[sizeof cfg->model_repo];
        if (under_root(cfg, "model-repo", cfg->model_repo, real, sizeof real) != 0)
            return -1;
        memcpy(cfg->model_repo, real, sizeof real); /* watched by its real path */
    }
    if (cfg->port == cfg->admin_port && planes_may_clash(cfg->bind, cfg->admin_bind)) {
        /* the second listen would fail as "address in use", blaming another process */
        fprintf(stderr, "tlserve: --port and --admin-port are both %d: the data plane and the "
                        "admin plane each need a port of their own\n", cfg->port);
        return -1;
    }
    if (secret_flag)
        LOG(LL_WARN,
            "--%s on the command line is visible to every local user in "
            "/proc/PID/cmdline: use --admin-token-file or $%s",
            secret_flag->name, secret_flag->env ? secret_flag->env : "the config file");
    return 0;
}
