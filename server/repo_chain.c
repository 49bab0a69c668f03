/*
 * repo_chain.c — the chain loader of the model repository (repo.h:
 * repo_open_version): builds a version from its chain, the full snapshot
 * and the deltas after it, on the loader thread.  When the model's active
 * version is a link of the chain, only the deltas after it are read and
 * applied as an overlay over it (model/overlay.h); otherwise the chain is
 * rebuilt in a new store.
 *
 *   <repo>/<model>/3 (full) ── 5 (delta of 3) ── 8 (delta of 5)
 *   active = 5:  overlay(8) over the active model         (memory of the delta)
 *   else:        load 3, apply 5 and 8, wrap as a model   (memory of a full load)
 *
 * LINEAGE: a delta must extend what serves.  When the model serves a
 * version A of this repository, a delta version whose parent is neither A
 * nor one of A's links is refused (check_lineage): it was made from
 * another line of versions (a producer on a stale base, or one building on
 * a version rolled back or refused), and serving it would silently drop
 * what A holds beyond that parent.  A chain whose full version is newer
 * than A starts a new line, as that full version alone would.  A delta whose chain runs through a
 * rolled-back version is refused too (check_rolled_back_links), even when
 * the chain runs through A and at a start: it would bring back what the
 * rollback took off.  An explicit activation of it (the admin's) loads it
 * anyway; a server with nothing active (a start) has no line to keep; a
 * served A no longer in the repository cannot be checked.
 *
 * The online trainer's own exports of the active version (online.h:
 * online_export_is_own) are neither: their values are in the active
 * store already (the trainer wrote them, and more since), so the version
 * is the active model relabelled (model_derive, no overlay, no fold that
 * would write the export's older values over the newer live ones); so is
 * a full version the trainer exported from the active store (open_own_full).
 *
 * THREAD SAFETY
 *   Runs on the loader thread; touches no watcher state but the metrics
 *   (repo__note_apply, under the repository's lock).  Several models'
 *   chains never load at once: the loader runs one load at a time.
 */
#define _GNU_SOURCE
#include "repo.h"
#include "repo_impl.h"

#include "log.h"
#include "model/overlay.h"
#include "online.h"
#include "store/delta.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CPU time of the calling thread: the loader's, which runs SCHED_IDLE by
 * default, so its wall time is mostly waiting for what serving leaves. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}


/* err names the version directory of a link of the chain to target when the
 * failing file is not target's own (a bad delta-00005.tld of version 3 makes
 * version 4 fail too: the operator looks in 3/). */
static int name_link(int rc, store_error_t *err, uint64_t link, uint64_t target)
{
    if (rc == 0 || link == target || !err)
        return rc;
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "in version %" PRIu64 " (a link of %" PRIu64 "'s chain): %.430s", link,
             target, err->msg);
    memcpy(err->msg, msg, sizeof msg);
    return rc;
}
/* The chain's deltas after the active version, as one overlay over it
 * (overlay.h): memory and time of the deltas, not of the model.  Applies when
 * the active version is a link of the chain (same model, version and
 * manifest time: the very version of this repository) and not the last.
 * Returns -ENOENT when it does not apply (the caller rebuilds the chain),
 * else 0 or the refusal. */
static int open_over_active(server_t *srv, const char *model, const char *model_dir,
                            const store_chain_t *chain, server_model_t **out, store_error_t *err)
{
    server_model_t *act = server_model_acquire_named(srv, model);
    if (!act)
        return -ENOENT;
    const store_meta_t *am = model_meta(act->model);
    uint32_t at = chain->n;
    if (strcmp(am->model_name, model) == 0)
        for (uint32_t i = 0; i + 1 < chain->n; i++)
            if (chain->versions[i] == am->version && chain->created_unix[i] == am->created_unix)
                at = i;
    if (at == chain->n) {
        server_model_release(act);
        return -ENOENT;
    }
    uint32_t n = chain->n - 1 - at;
    store_delta_t **d = calloc(n, sizeof *d);
    model_t *m = NULL;
    int rc = d ? 0 : store_error_set(err, STORE_E_NOMEM, "no memory for %u deltas", n);
    uint64_t t0 = now_ns(), c0 = thread_cpu_ns(), keys = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%" PRIu64, model_dir, chain->versions[at + 1 + i]);
        rc = name_link(store_delta_open(path, &d[i], err), err, chain->versions[at + 1 + i],
                       chain->versions[chain->n - 1]);
        if (rc == 0)
            keys += store_delta_info(d[i])->upserts + store_delta_info(d[i])->deletes;
    }
    uint64_t t1 = now_ns();
    bool own = rc == 0 && model_overlays(act->model, NULL) == 0;
    for (uint32_t i = 0; own && i < n; i++)
        own = online_export_is_own(model, chain->versions[at + 1 + i],
                                   store_delta_info(d[i])->producer);
    if (own) { /* the online trainer's own exports: the live store holds them already */
        store_meta_t meta = *model_meta(act->model);
        meta.version = store_delta_info(d[n - 1])->meta.version;
        meta.created_unix = store_delta_info(d[n - 1])->meta.created_unix;
        rc = model_derive(act->model, &meta, NULL, 0, model_key_count(act->model), &m);
        if (rc != 0)
            rc = store_error_set(err, STORE_E_NOMEM, "no memory for version %" PRIu64,
                                 meta.version);
    } else if (rc == 0)
        rc = model_apply_deltas(act->model, d, n, &m, err);
    for (uint32_t i = 0; d && i < n; i++)
        store_delta_close(d[i]);
    free(d);
    if (rc == -E2BIG) { /* too many overlays stacked: rebuild */
        LOG(LL_INFO, "repo: %s", err->msg);
        rc = -ENOENT;
    }
    if (rc == 0) {
        uint64_t t2 = now_ns(), c2 = thread_cpu_ns();
        rc = server_model_wrap(m, out);
        if (rc != 0) {
            model_destroy(m);
            rc = store_error_set(err, STORE_E_NOMEM, "no memory for the handle of version %" PRIu64,
                         chain->versions[chain->n - 1]);
        } else {
            double s = (double)(t2 - t0) * 1e-9;
            LOG(LL_INFO,
                "repo: version %" PRIu64 " = version %" PRIu64 " + %u delta(s), %" PRIu64
                " keys %s in %.3f s (read and verified %.3f s; %.1f M keys/s; this "
                "thread's CPU %.3f s, %.1f M keys per CPU second)",
                chain->versions[chain->n - 1], am->version, n, keys,
                own ? "exported by the online trainer: its live store, relabelled"
                    : "as an overlay",
                s, (double)(t1 - t0) * 1e-9, s > 0 ? (double)keys / s * 1e-6 : 0.0,
                (double)(c2 - c0) * 1e-9,
                c2 > c0 ? (double)keys / ((double)(c2 - c0) * 1e-9) * 1e-6 : 0.0);
            repo__note_apply(keys, s);
        }
    }
    server_model_release(act);
    return rc;
}

/* A full version the online trainer exported from the active model's
 * store (online_export.c: FULL EXPORTS): the active model relabelled, as
 * its own deltas are.  -ENOENT when it is not (the caller loads it). */
static int open_own_full(server_t *srv, const char *model, const char *model_dir,
                         uint64_t version, server_model_t **out, store_error_t *err)
{
    char path[1200], producer[STORE_PRODUCER_MAX];
    store_meta_t vm;
    bool full = false;
    snprintf(path, sizeof path, "%s/%" PRIu64, model_dir, version);
    if (store_version_producer(path, producer, &full, &vm, NULL) != 0 || !full ||
        !online_export_is_own(model, version, producer))
        return -ENOENT;
    server_model_t *act = server_model_acquire_named(srv, model);
    if (!act)
        return -ENOENT;
    int rc = -ENOENT;
    model_t *m = NULL;
    if (model_overlays(act->model, NULL) == 0 &&
        online_store_trained(model, model_store(act->model))) {
        store_meta_t meta = *model_meta(act->model);
        meta.version = vm.version;
        meta.parent_version = vm.parent_version;
        meta.created_unix = vm.created_unix;
        rc = model_derive(act->model, &meta, NULL, 0, model_key_count(act->model), &m);
        if (rc != 0)
            rc = store_error_set(err, STORE_E_NOMEM, "no memory for version %" PRIu64, version);
        else if ((rc = server_model_wrap(m, out)) != 0) {
            model_destroy(m);
            rc = store_error_set(err, STORE_E_NOMEM, "no memory for the handle of version %" PRIu64,
                                 version);
        } else
            LOG(LL_INFO, "repo: version %" PRIu64 " = a full version exported by the online "
                "trainer: its live store, relabelled", version);
    }
    server_model_release(act);
    return rc;
}

/* LINEAGE (above): 0 when the delta chain may be rebuilt over what model
 * serves, else the refusal in err. */
static int check_lineage(server_t *srv, const char *model, const char *model_dir,
                         const store_chain_t *chain, store_error_t *err)
{
    if (chain->n < 2)
        return 0; /* a full version starts a line of its own */
    server_model_t *act = server_model_acquire_named(srv, model);
    if (!act)
        return 0;
    const store_meta_t am = *model_meta(act->model);
    server_model_release(act);
    uint64_t parent = chain->versions[chain->n - 2];
    uint64_t parent_created = chain->created_unix[chain->n - 2];
    if (strcmp(am.model_name, model) != 0)
        return 0;
    /* Through the active version itself: a rebuild only because its stack
     * of overlays was full. */
    for (uint32_t i = 0; i + 1 < chain->n; i++)
        if (chain->versions[i] == am.version && chain->created_unix[i] == am.created_unix)
            return 0;
    /* On a full version newer than the active one: a new line, as that full
     * version alone is (a full version and a delta on it appearing together). */
    if (chain->versions[0] > am.version)
        return 0;
    store_chain_t *ac = malloc(sizeof *ac);
    store_error_t aerr;
    if (!ac || store_version_chain(model_dir, am.version, ac, &aerr) != 0 ||
        ac->created_unix[ac->n - 1] != am.created_unix) {
        free(ac);
        return 0; /* the served version is not (or no longer) this repository's */
    }
    char links[256];
    size_t off = 0;
    int found = 0;
    links[0] = '\0';
    for (uint32_t i = 0; i < ac->n; i++) {
        found |= ac->versions[i] == parent && ac->created_unix[i] == parent_created;
        if (off < sizeof links - 24)
            off += (size_t)snprintf(links + off, sizeof links - off, "%s%" PRIu64,
                                    i ? " <- " : "", ac->versions[ac->n - 1 - i]);
    }
    free(ac);
    if (found)
        return 0;
    return store_error_set(err, STORE_E_MISMATCH,
                           "delta version %" PRIu64 " extends version %" PRIu64 ", which is "
                           "neither the active version %" PRIu64 " nor one of its ancestors "
                           "(%s): it was made from another line of versions, and serving it "
                           "would drop what %" PRIu64 " holds; activate it explicitly to serve "
                           "it anyway",
                           chain->versions[chain->n - 1], parent, am.version, links, am.version);
}

int repo_open_version(server_t *srv, const char *model_dir, uint64_t version, server_model_t **out,
                      store_error_t *err)
{
    return repo__open_chain(srv, model_dir, version, NULL, out, err);
}

/* LINEAGE (above): 0 when no link of chain below its last is a rolled-back
 * version, else the refusal in err. */
static int check_rolled_back_links(const store_chain_t *chain, const repo_open_opts_t *o,
                                   store_error_t *err)
{
    for (uint32_t i = 0; i + 1 < chain->n; i++)
        for (unsigned k = 0; k < o->n_rolled_back && k < REPO_ROLLED_BACK_MAX; k++)
            if (chain->versions[i] == o->rolled_back[k])
                return store_error_set(err, STORE_E_MISMATCH,
                                       "delta version %" PRIu64 " is built on version %" PRIu64
                                       ", which was rolled back: serving it would bring back "
                                       "what the rollback took off; activate it explicitly to "
                                       "serve it anyway",
                                       chain->versions[chain->n - 1], chain->versions[i]);
    return 0;
}

int repo__open_chain(server_t *srv, const char *model_dir, uint64_t version, repo_open_opts_t *o,
                     server_model_t **out, store_error_t *err)
{
    const char *slash = strrchr(model_dir, '/');
    const char *model = slash ? slash + 1 : model_dir;
    store_chain_t *chain = malloc(sizeof *chain);
    store_t *s = NULL;
    store_extras_t x;
    memset(&x, 0, sizeof x);
    model_t *m = NULL;
    char path[1200];
    int rc;
    if (!chain)
        return store_error_set(err, STORE_E_NOMEM, "no memory to resolve the chain of version %" PRIu64,
                       version);
    rc = store_version_chain(model_dir, version, chain, err);
    if (rc != 0)
        goto out;
    if (o && !o->explicit_load && (rc = check_rolled_back_links(chain, o, err)) != 0) {
        o->lineage_refused = true;
        goto out;
    }
    rc = open_over_active(srv, model, model_dir, chain, out, err);
    if (rc == -ENOENT && chain->n == 1)
        rc = open_own_full(srv, model, model_dir, chain->versions[0], out, err);
    if (rc != -ENOENT)
        goto out; /* applied as an overlay, or refused */
    if (o && !o->explicit_load && (rc = check_lineage(srv, model, model_dir, chain, err)) != 0) {
        o->lineage_refused = true;
        goto out;
    }
    store_meta_t meta;
    snprintf(path, sizeof path, "%s/%" PRIu64, model_dir, chain->versions[0]);
    if (chain->n == 1) {
        /* A full version: loaded with its extras, as an admin load is. */
        rc = model_load(path, srv->cfg.load_threads, &m, err);
        if (rc != 0)
            goto out;
        meta = *model_meta(m);
    } else {
        rc = name_link(store_snapshot_load_ex(path, srv->cfg.load_threads, &s, &meta, &x, err),
                       err, chain->versions[0], version);
        if (rc != 0)
            goto out;
    }
    if (strcmp(meta.model_name, model) != 0) {
        rc = store_error_set(err, STORE_E_MISMATCH,
                     "version %" PRIu64 " holds model '%s', not '%s' (its repository directory)",
                     chain->versions[0], meta.model_name, model);
        goto out;
    }
    if (chain->n > 1) {
        for (uint32_t i = 1; i < chain->n; i++) {
            store_delta_t *d = NULL;
            snprintf(path, sizeof path, "%s/%" PRIu64, model_dir, chain->versions[i]);
            rc = store_delta_open(path, &d, err);
            if (rc == 0)
                rc = store_delta_apply(s, &meta, d, err);
            rc = name_link(rc, err, chain->versions[i], version);
            store_delta_close(d);
            if (rc != 0)
                goto out;
        }
        /* The extras (params, dense arrays) are the full snapshot's: deltas
         * carry none, and their producers refuse a change of params. */
        rc = model_from_store_ex(s, &meta, &x, &m, err);
        if (rc != 0)
            goto out;
        s = NULL; /* the model owns it and x's arrays */
    }
    rc = server_model_wrap(m, out);
    if (rc != 0)
        rc = store_error_set(err, STORE_E_NOMEM, "no memory for the handle of version %" PRIu64, version);
    else
        m = NULL;
out:
    model_destroy(m);
    store_destroy(s);
    store_extras_free(&x);
    free(chain);
    return rc;
}
