/*
 * model_fold.c — the background pass after a delta went live as an overlay
 * (model/overlay.h: why and the four steps): the undo, the drain, the
 * writes and the handle without overlays, on the loader thread, with its
 * metrics.  The steps that change the registry's lists (give the kept
 * versions the undo, replace the active handle) are model_registry.c's
 * (server_impl.h).
 *
 * PRIORITY: the loader runs as SCHED_IDLE (--load-sched-idle), and so do
 * the undo and the overwrites of keys the base holds (model_fold_overwrite:
 * no reader waits for them); the inserts and deletes alone run under
 * SCHED_OTHER (fold_write_normal_policy says why).
 */
#define _GNU_SOURCE /* SCHED_IDLE */
#include "log.h"
#include "model/overlay.h"
#include "server.h"
#include "server_impl.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#define FOLD_WAIT_MS 30000 /* the drain's bound: a request pinning an older handle that long stops the fold */

static struct {
    _Atomic uint64_t folds, aborted, keys;
    _Atomic uint64_t last_keys, last_us;
} F;

void server_model_fold_metrics(server_fold_metrics_t *out)
{
    out->folds = atomic_load(&F.folds);
    out->aborted = atomic_load(&F.aborted);
    out->keys = atomic_load(&F.keys);
    out->last_keys = atomic_load(&F.last_keys);
    out->last_seconds = (double)atomic_load(&F.last_us) * 1e-6;
}

static double secs(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) * 1e-9;
}

/* A handle for m, or NULL (logged). */
static server_model_t *wrap_or_log(model_t *m)
{
    server_model_t *sm = NULL;
    if (m && server_model_wrap(m, &sm) == 0)
        return sm;
    model_destroy(m);
    LOG(LL_WARN, "fold: no memory for a version handle");
    return NULL;
}

/* model_fold_rest under SCHED_OTHER when the loader runs as SCHED_IDLE
 * (--load-sched-idle), back to SCHED_IDLE after.  The writes of inserts and
 * deletes hold a sub-table's version odd for a moment, and readers retry
 * until it is even: a SCHED_IDLE writer preempted there (any worker waking
 * preempts it) leaves the workers spinning until a core is idle, up to a
 * second under load.  At the loader's nice it is back within a time slice. */
static int fold_write_normal_policy(const model_t *m, const model_fold_rest_t *rest)
{
    int policy;
    struct sched_param sp;
    bool idle = pthread_getschedparam(pthread_self(), &policy, &sp) == 0 && policy == SCHED_IDLE;
    struct sched_param normal = {.sched_priority = 0};
    int err = idle ? pthread_setschedparam(pthread_self(), SCHED_OTHER, &normal) : 0;
    if (err) {
        LOG(LL_WARN, "fold: cannot leave SCHED_IDLE for the writes (%s): requests may stall on "
                     "a preempted write", strerror(err));
        idle = false;
    }
    int rc = model_fold_rest(m, rest); /* its writer threads inherit the policy */
    if (idle)
        (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    return rc;
}

int server_model_fold(server_t *srv, const char *name)
{
    server_model_t *a = server_model_acquire_named(srv, name);
    if (!a || model_overlays(a->model, NULL) == 0) {
        server_model_release(a);
        return 0;
    }
    struct timespec t0, t1, t_undo = {0, 0}, t_wait = {0, 0}, t_over = {0, 0}, t_write = {0, 0};
    server_model_t *gone = NULL;
    /* the base's one writer: the online trainer (online.h) waits meanwhile */
    server_slot_t *slot = server_slot_named(srv, name);
    pthread_mutex_lock(&slot->writer);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const store_meta_t *meta = model_meta(a->model);
    uint64_t keys = 0;
    model_overlay_t *ov[MODEL_OVERLAYS_MAX], *undo = NULL;
    uint32_t nov = model_overlays(a->model, ov);
    for (uint32_t i = 0; i < nov; i++)
        keys += model_overlay_count(ov[i]);
    const char *why = NULL;
    int rc = model_fold_undo(a->model, &undo);
    if (rc != 0) {
        why = "no memory for the undo";
        goto out;
    }
    clock_gettime(CLOCK_MONOTONIC, &t_undo);
    rc = server__give_standbys_undo(srv, a, undo);
    if (rc < 0) {
        why = rc == -EAGAIN ? "the version is no longer active" : "a kept version has too many overlays or no memory";
        goto out;
    }
    /* No reader of the base may lack the overlay or the undo of a key about
     * to be written: wait until its versions are exactly a and the kept ones
     * just made (older handles finish their requests and go). */
    uint32_t want = 1 + (uint32_t)rc;
    struct timespec ms = {0, 1000000};
    for (int waited = 0; model_base_sharers(a->model) > want; waited++) {
        if (waited == FOLD_WAIT_MS) {
            rc = -ETIMEDOUT;
            why = "versions on the same base still pinned after the wait";
            goto out;
        }
        nanosleep(&ms, NULL);
    }
    clock_gettime(CLOCK_MONOTONIC, &t_wait);
    model_fold_rest_t *rest = NULL;
    rc = model_fold_overwrite(a->model, srv->cfg.load_threads, &rest);
    clock_gettime(CLOCK_MONOTONIC, &t_over);
    if (rc == 0)
        rc = fold_write_normal_policy(a->model, rest);
    model_fold_rest_free(rest);
    if (rc != 0) {
        why = "no memory to grow the base (the overlay keeps serving)";
        goto out;
    }
    model_t *folded = NULL;
    if (model_derive(a->model, NULL, NULL, 0, 0, &folded) != 0) {
        rc = -ENOMEM;
        why = "no memory for the folded version";
        goto out;
    }
    clock_gettime(CLOCK_MONOTONIC, &t_write);
    server_model_t *fresh = wrap_or_log(folded);
    if (fresh)
        gone = server__replace_handle(srv, a, fresh);
out:
    clock_gettime(CLOCK_MONOTONIC, &t1);
    uint64_t us = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000u +
                  (uint64_t)((t1.tv_nsec - t0.tv_nsec) / 1000);
    if (rc >= 0) {
        atomic_fetch_add(&F.folds, 1);
        atomic_fetch_add(&F.keys, keys);
        atomic_store(&F.last_keys, keys);
        atomic_store(&F.last_us, us);
        LOG(LL_INFO,
            "model %s version %llu: %llu overlay keys folded into the base in %.3f s (undo "
            "%.3f s, drain %.3f s, overwrites %.3f s, inserts and deletes %.3f s)",
            meta->model_name, (unsigned long long)meta->version, (unsigned long long)keys,
            (double)us * 1e-6, secs(&t0, &t_undo), secs(&t_undo, &t_wait),
            secs(&t_wait, &t_over), secs(&t_over, &t_write));
    } else {
        atomic_fetch_add(&F.aborted, 1);
        LOG(LL_WARN, "model %s version %llu: fold stopped: %s; it serves with its overlay",
            meta->model_name, (unsigned long long)meta->version, why);
    }
    pthread_mutex_unlock(&slot->writer);
    model_overlay_unref(undo);
    server_model_release(a); /* before the retire, which waits for a's requests */
    server__retire_now(gone);
    return rc < 0 ? rc : 0;
}

