/*
 * repo_models.c — the models of a repository: the model directories listed
 * at the start (repo_list_models), and each one's state added to the
 * watcher's (repo__add_model, with the marks its file kept), also for a
 * directory that appears while running (repo__find_new_models).  A model
 * directory is named [A-Za-z0-9_.-]+, not starting with '.'; temporary
 * names are skipped.
 *
 * THREAD SAFETY: repo_list_models reads the directory only; the others
 * under R.lock (repo_impl.h) as each says.
 */
#define _GNU_SOURCE
#include "repo.h"
#include "repo_impl.h"

#include "codec/codec.h"
#include "log.h"
#include "store/delta.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int valid_model_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= 64 || s[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!codec_name_char((unsigned char)s[i]))
            return 0;
    return 1;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

int repo_list_models(const server_config_t *cfg, char (*models)[64], unsigned cap, char *why,
                     size_t why_len)
{
    if (cfg->model_name[0]) {
        snprintf(models[0], 64, "%s", cfg->model_name);
        return 1;
    }
    DIR *d = opendir(cfg->model_repo);
    if (!d) {
        snprintf(why, why_len, "cannot read the model repository '%s': %s", cfg->model_repo,
                 strerror(errno));
        return -1;
    }
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!valid_model_name(e->d_name) || store_version_is_temp(e->d_name))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if (n < cap)
            snprintf(models[n], 64, "%s", e->d_name);
        n++;
    }
    closedir(d);
    if (n == 0) {
        snprintf(why, why_len,
                 "the model repository '%s' holds no model directory (<repo>/<model>/<version>/); "
                 "name the model to wait for with --model-name",
                 cfg->model_repo);
        return -1;
    }
    if (n > cap) {
        snprintf(why, why_len,
                 "the model repository '%s' holds %u models, more than the %u one server serves: "
                 "name the one to serve with --model-name, or split the repository",
                 cfg->model_repo, n, cap);
        return -1;
    }
    /* Sorted: the first model (GET /v1/models' "repository") does not
     * depend on the directory's order. */
    qsort(models, n, sizeof models[0], cmp_name);
    return (int)n;
}

/* repo_impl.h */
int repo__add_model(const char *name, char *why, size_t why_len)
{
    for (unsigned i = 0; i < R.n_models; i++)
        if (strcmp(R.models[i].model, name) == 0)
            return -EEXIST;
    if (R.n_models == SERVER_MODELS_MAX)
        return -ENOSPC;
    struct repo_model *r = &R.models[R.n_models];
    memset(r, 0, sizeof *r);
    snprintf(r->model, sizeof r->model, "%s", name);
    snprintf(r->model_dir, sizeof r->model_dir, "%s/%s", R.dir, name);
    r->pending = true;
    int rc = repo__marks_restore(r, why, why_len); /* a small file, read under the lock */
    if (rc != 0)
        return rc;
    R.n_models++; /* last: a reader of n_models under the lock sees it whole */
    return 0;
}

/* Picks up model directories that appeared in the repository since the
 * start (not with --model-name).  Lists without the lock. */
void repo__find_new_models(void)
{
    if (R.fixed)
        return;
    server_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.model_repo, sizeof cfg.model_repo, "%s", R.dir);
    char (*names)[64] = malloc(SERVER_MODELS_MAX * sizeof *names);
    char why[2400];
    if (!names)
        return;
    int n = repo_list_models(&cfg, names, SERVER_MODELS_MAX, why, sizeof why);
    pthread_mutex_lock(&R.lock);
    if (n < 0 && strstr(why, "more than")) {
        static bool said; /* the watcher thread only */
        if (!said)
            LOG(LL_WARN, "repo: %s; the new ones are not served", why);
        said = true;
    }
    for (int i = 0; i < n; i++) {
        char bad[2400];
        int rc = repo__add_model(names[i], bad, sizeof bad);
        if (rc == -EINVAL) {
            /* Said once per name (the watcher thread only): it is retried every scan. */
            static char said_bad[SERVER_MODELS_MAX][64];
            bool said = false;
            for (unsigned k = 0; k < SERVER_MODELS_MAX && said_bad[k][0] && !said; k++)
                said = strcmp(said_bad[k], names[i]) == 0;
            for (unsigned k = 0; k < SERVER_MODELS_MAX && !said; k++)
                if (!said_bad[k][0]) {
                    snprintf(said_bad[k], sizeof said_bad[k], "%s", names[i]);
                    break;
                }
            if (!said)
                LOG(LL_WARN, "repo: new model %s not served: %s", names[i], bad);
        } else if (rc == 0)
            LOG(LL_INFO, "repo: new model %s in %s: served (latest version)", names[i], R.dir);
        else if (rc == -ENOSPC)
            LOG(LL_WARN, "repo: new model %s in %s not served: %d models already", names[i],
                R.dir, SERVER_MODELS_MAX);
    }
    pthread_mutex_unlock(&R.lock);
    free(names);
}
