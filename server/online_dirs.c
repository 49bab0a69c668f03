/*
 * online_dirs.c — online_start's checks of the directories online learning
 * writes in, made once at start so that a setting that cannot work stops the
 * start with the flag's name: --sample-log-dir (made when missing, else a
 * directory this process can list and write in: otherwise every TRAIN would
 * be refused, or a restart could not list the logs it must learn again) and,
 * with exports on, --model-repo (otherwise every export would fail and,
 * without a sample log, the updates with them).
 */
#define _GNU_SOURCE
#include "online_impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* 0, or the reason --sample-log-dir cannot be the sample logs' directory in why. */
static int sample_log_dir_usable(const char *dir, char *why, size_t why_len)
{
    struct stat st;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        snprintf(why, why_len, "--sample-log-dir %s: cannot make it: %s", dir, strerror(e));
        return -e;
    }
    if (stat(dir, &st) != 0) {
        int e = errno;
        snprintf(why, why_len, "--sample-log-dir %s: %s", dir, strerror(e));
        return -e;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, why_len, "--sample-log-dir %s: not a directory; name a directory "
                 "(made when missing)", dir);
        return -ENOTDIR;
    }
    if (access(dir, R_OK | W_OK | X_OK) != 0) {
        int e = errno;
        snprintf(why, why_len, "--sample-log-dir %s: this process (uid %u) cannot list and write "
                 "in it: %s; fix its owner or mode", dir, (unsigned)geteuid(), strerror(e));
        return -e;
    }
    return 0;
}

int online__check_dirs(const server_config_t *c, char *why, size_t why_len)
{
    int rc;
    if (c->sample_log_dir[0] && (rc = sample_log_dir_usable(c->sample_log_dir, why,
                                                           why_len)) != 0)
        return rc;
    if (c->model_repo[0] && c->online_export_ms > 0 && access(c->model_repo, W_OK | X_OK) != 0) {
        int e = errno;
        snprintf(why, why_len, "--online exports into --model-repo %s every %d ms "
                 "(--online-export-ms), but this process cannot write in it: %s; make it "
                 "writable, or --online-export-ms 0 to learn without exports", c->model_repo,
                 c->online_export_ms, strerror(e));
        return -e;
    }
    return 0;
}
