/*
 * repo_admin.c — the admin's overrides of the repository's policy (repo.h:
 * PINNING, ROLLED BACK): a version refused because a rollback replaced it,
 * a pin that suspends the latest policy, an activation that swaps in a
 * kept version or queues the load of one on disk.
 *
 *   per model (struct repo_model):
 *   rolled_back: [3] [5] [9]   ascending, at most REPO_ROLLED_BACK_MAX;
 *                              is_refused (repo.c) consults it
 *   pinned:      7 (0: none)   scan (repo.c) picks nothing for it while set
 *
 * THREAD SAFETY
 *   Called from the admin thread; every call takes R.lock (repo_impl.h)
 *   for its update only, and touches the state of its model argument
 *   only.  repo_activate lists and stats the versions without the lock,
 *   then takes it (and, under it, the registry's leaf lock for a kept
 *   version, or the loader's for a queued load: the same order as the
 *   watcher's scan).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "repo.h"
#include "repo_impl.h"

#include "log.h"
#include "online.h"
#include "store/delta.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- admin: rollback, activate, pin ------------------------------------------ */

/* Copies the directory of model into dir under R.lock, for calls that
 * then read the disk without the lock.  1 when the watcher runs and serves
 * model, else 0 (dir empty). */
static int model_dir_of(const char *model, char dir[static sizeof R.models[0].model_dir])
{
    pthread_mutex_lock(&R.lock);
    const struct repo_model *r = repo__find(model);
    snprintf(dir, sizeof R.models[0].model_dir, "%s", r ? r->model_dir : "");
    pthread_mutex_unlock(&R.lock);
    return r != NULL;
}

void repo__forget_rolled_back(struct repo_model *r, uint64_t version)
{
    for (unsigned i = 0; i < r->n_rolled_back; i++)
        if (r->rolled_back[i] == version) {
            memmove(&r->rolled_back[i], &r->rolled_back[i + 1],
                    (r->n_rolled_back - i - 1) * sizeof r->rolled_back[0]);
            r->n_rolled_back--;
            return;
        }
}

int repo__add_rolled_back(struct repo_model *r, uint64_t version)
{
    repo__forget_rolled_back(r, version);
    int dropped = 0;
    if (r->n_rolled_back == REPO_ROLLED_BACK_MAX) {
        /* The lowest goes: the one least likely to be picked again. */
        memmove(&r->rolled_back[0], &r->rolled_back[1],
                (REPO_ROLLED_BACK_MAX - 1) * sizeof r->rolled_back[0]);
        r->n_rolled_back--;
        dropped = 1;
    }
    unsigned at = r->n_rolled_back;
    while (at > 0 && r->rolled_back[at - 1] > version)
        at--;
    memmove(&r->rolled_back[at + 1], &r->rolled_back[at],
            (r->n_rolled_back - at) * sizeof r->rolled_back[0]);
    r->rolled_back[at] = version;
    r->n_rolled_back++;
    return dropped;
}

/* The prefix signature of version in dir, as the watcher's scan computes it
 * (repo.c: SIGNATURES): 0 with *sig, -ENOENT when the listing lacks it, or
 * the listing's -errno.  Reads the directory without the lock. */
static int version_sig(const char *dir, uint64_t version, uint64_t *sig)
{
    size_t cap = REPO_VERSIONS_START;
    uint64_t *v = NULL;
    long n;
    for (;;) {
        free(v);
        v = malloc(cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        n = store_version_list(dir, v, cap);
        if (n < 0 || (size_t)n <= cap)
            break;
        cap = (size_t)n + 256;
    }
    long at = -1;
    uint64_t h = 0x7265706f;
    for (long i = 0; i < n; i++) {
        h = repo__mix(h, repo__version_sig(dir, v[i]));
        if (v[i] == version) {
            at = i;
            *sig = h;
        }
    }
    free(v);
    return at >= 0 ? 0 : n < 0 ? (int)n : -ENOENT;
}

/* Queues the load of version from its files for r (R.lock held): 0 queued
 * (*st filled), or the loader's -errno. */
static int admin_queue_load(struct repo_model *r, const char *dir, uint64_t version, uint64_t sig,
                            bool force, loader_status_t *st)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%" PRIu64, dir, version);
    loader_job_t job = {.name = r->model,
                        .dir = path,
                        .version = version,
                        .open = repo__open,
                        .open_arg = r,
                        .done = repo__load_ended,
                        .done_arg = r,
                        .force = force};
    r->loading = version;
    r->loading_sig = sig;
    int rc = loader_submit_job(&job, st);
    if (rc != 0)
        r->loading = 0;
    return rc;
}

/* ONLINE: a kept version swapped back in (a rollback, an activation) shares
 * its base store with the versions after it, and the online trainer writes
 * that base: it would serve the trainer's updates, not its files' values.
 * Such a version is loaded again from the repository (a new store; the
 * swap replaces the one on the shared base, and the trainer starts over on
 * it: online.h, online_store_trained).  Until then the trainer waits and
 * the version serves the updates.  The load skips the gate: it would judge
 * the version's files against its trained copy (the same number, other
 * weights: a mean shift the trainer made), refuse the very version the
 * rollback chose, and keep that refusal across a restart; the files passed
 * the gate when they first went live.  Takes R.lock; never waits for the
 * load. */
static void reload_if_trained(const char *model, uint64_t version)
{
    if (!R.srv)
        return; /* the watcher never ran: nothing served from the repository */
    server_model_t *sm = server_model_acquire_named(R.srv, model);
    int trained = sm && model_meta(sm->model)->version == version &&
                  online_store_trained(model, model_store(sm->model));
    server_model_release(sm);
    char dir[sizeof R.models[0].model_dir];
    uint64_t sig = 0;
    if (!trained || !model_dir_of(model, dir))
        return;
    int rc = version_sig(dir, version, &sig);
    loader_status_t st;
    pthread_mutex_lock(&R.lock);
    struct repo_model *r = repo__find(model);
    if (rc == 0 && r && r->loading)
        rc = -EBUSY;
    if (rc == 0 && r)
        rc = admin_queue_load(r, dir, version, sig, true, &st);
    pthread_mutex_unlock(&R.lock);
    if (rc == 0)
        LOG(LL_INFO, "repo: load %" PRIu64 " of %s version %" PRIu64 " queued: the online "
            "trainer wrote the store it was kept on; reloaded from its files (no gate: they "
            "passed it when they first went live)", st.id, model, version);
    else
        LOG(LL_ERROR, "repo: %s version %" PRIu64 " serves the online trainer's updates (it was "
            "kept on the store the trainer writes) and cannot be reloaded now: %s; "
            "activate it again to retry", model, version, strerror(-rc));
}

int repo_rolled_back(const char *model, uint64_t from, uint64_t to)
{
    uint64_t exported[ONLINE_EXPORT_OWN_MAX]; /* the online trainer's exports past to */
    size_t nx = online_export_drop(model, to, exported, ONLINE_EXPORT_OWN_MAX);
    pthread_mutex_lock(&R.lock);
    int rc = -ENOENT;
    struct repo_model *r = repo__find(model);
    if (r) {
        repo__add_rolled_back(r, from);
        for (size_t i = 0; i < nx; i++)
            if (exported[i] != from)
                repo__add_rolled_back(r, exported[i]);
        if (r->pinned == from)
            r->pinned = to;
        r->marks_dirty = true;
        rc = 0;
        LOG(LL_INFO,
            "repo: %s version %" PRIu64 " rolled back: refused by the policy until "
            "activated again",
            model, from);
    }
    pthread_mutex_unlock(&R.lock);
    repo__marks_flush(); /* on disk before the rollback is answered */
    if (rc == 0)
        reload_if_trained(model, to);
    return rc;
}

int repo_loading(const char *model, uint64_t *version)
{
    pthread_mutex_lock(&R.lock);
    const struct repo_model *r = repo__find(model);
    int busy = r && r->loading != 0;
    *version = busy ? r->loading : 0;
    pthread_mutex_unlock(&R.lock);
    return busy;
}

long repo_list_versions(const char *model, uint64_t *out, size_t cap)
{
    char dir[sizeof R.models[0].model_dir];
    int ok = model_dir_of(model, dir);
    if (!ok)
        return -ENOENT;
    return store_version_list(dir, out, cap);
}

int repo_activate(const char *model, uint64_t version, bool force, loader_status_t *st)
{
    char dir[sizeof R.models[0].model_dir];
    int ok = model_dir_of(model, dir);
    if (!ok)
        return -ENODEV;
    /* The listing, read without the lock, decides whether it exists. */
    uint64_t sig = 0;
    int found = version_sig(dir, version, &sig);
    if (found != 0)
        return found;

    pthread_mutex_lock(&R.lock);
    int rc;
    bool kept = false;
    uint64_t from;
    struct repo_model *r = repo__find(model);
    if (!r) {
        rc = -ENODEV;
        goto out;
    }
    if (r->loading && r->loading != version) {
        rc = -EBUSY;
        goto out;
    }
    /* An explicit activation overrides a rollback or a refusal of it. */
    repo__forget_rolled_back(r, version);
    for (unsigned i = 0; i < r->n_refused; i++)
        if (r->refused[i].version == version) {
            memmove(&r->refused[i], &r->refused[i + 1],
                    (r->n_refused - i - 1) * sizeof r->refused[0]);
            memmove(&r->refused_sig[i], &r->refused_sig[i + 1],
                    (r->n_refused - i - 1) * sizeof r->refused_sig[0]);
            r->n_refused--;
            break;
        }
    r->pinned = version;
    r->pin_restored = false; /* an activation replaces a pin the restart restored */
    r->marks_dirty = true;
    if (r->loading == version) {
        rc = 1; /* already on its way */
        loader_status(model, st);
        goto out;
    }
    if (server_model_activate_kept(R.srv, model, version, &from) == 0) {
        rc = 0;
        kept = true;
        goto out;
    }
    rc = admin_queue_load(r, dir, version, sig, force, st);
    if (rc == 0) {
        rc = 1;
        LOG(LL_INFO,
            "repo: load %" PRIu64 " of %s version %" PRIu64 " queued (activated by the "
            "admin; pinned%s)",
            st->id, model, version, force ? "; forced: no validation gate" : "");
    }
out:
    pthread_mutex_unlock(&R.lock);
    repo__marks_flush();
    if (kept) {
        uint64_t exported[ONLINE_EXPORT_OWN_MAX]; /* pinned below them: void, not refused */
        (void)online_export_drop(model, version, exported, ONLINE_EXPORT_OWN_MAX);
        reload_if_trained(model, version);
    }
    return rc;
}

int repo_unpin(const char *model)
{
    pthread_mutex_lock(&R.lock);
    int rc = -ENODEV;
    struct repo_model *r = repo__find(model);
    if (r) {
        if (r->pinned)
            LOG(LL_INFO, "repo: %s unpinned from version %" PRIu64 ": latest policy", model,
                r->pinned);
        r->pinned = 0;
        r->pin_restored = r->pin_loading = false;
        r->pending = true;
        r->marks_dirty = true;
        repo__wake();
        rc = 0;
    }
    pthread_mutex_unlock(&R.lock);
    repo__marks_flush();
    return rc;
}

int repo_refuse(const char *model, uint64_t version, const char *why)
{
    pthread_mutex_lock(&R.lock);
    int rc = -ENODEV;
    struct repo_model *r = repo__find(model);
    if (r) {
        char msg[400];
        snprintf(msg, sizeof msg, "refused by admin%s%s", why && why[0] ? ": " : "",
                 why ? why : "");
        repo__forget_rolled_back(r, version); /* refused now, not rolled back */
        repo__add_refusal(r, version, 0, msg);
        for (unsigned i = 0; i < r->n_refused; i++)
            if (r->refused[i].version == version)
                r->refused[i].by_admin = true;
        if (r->pinned == version) {
            LOG(LL_INFO, "repo: %s unpinned from refused version %" PRIu64 ": latest policy",
                model, version);
            r->pinned = 0;
            r->pin_restored = r->pin_loading = false;
        }
        r->pending = true;
        r->marks_dirty = true;
        repo__wake();
        rc = 0;
        LOG(LL_INFO, "repo: %s version %" PRIu64 " %s: never served until activated", model,
            version, msg);
    }
    pthread_mutex_unlock(&R.lock);
    repo__marks_flush();
    return rc;
}
