/*
 * loader.c — background model loads: a bounded queue and one loader thread,
 * so that a load (seconds to minutes for a large snapshot) and the retire
 * wait after the swap never run on the admin thread, which keeps answering
 * /healthz, /readyz and /metrics throughout.
 *
 *   admin thread                loader thread                    admin thread
 *   ------------                -------------                    ------------
 *   loader_submit ─> queue ──>  pop, LOADING
 *     (202, or waits)           server_model_open (blocks)
 *                               server_model_swap, DONE ─ done() ─> event: answer
 *                               server_model_retire (blocks)       ?wait=1 requests
 *                               next ...
 *
 * RECORDS
 *   One record per model name holds that model's latest load; the queue
 *   holds pointers to records.  At most one load per model is queued or
 *   running: a second one is refused (-EBUSY) until the first ends, so a
 *   record is never overwritten while it is in the queue or running, and
 *   "the latest load of demo" is always well defined.  A new name takes a
 *   free record, or the oldest ended one among LOADER_MODELS_MAX; at most
 *   LOADER_QUEUE_MAX + 1 records are unfinished, so one can always be taken.
 *
 *   records: [demo: DONE #3] [big: LOADING #5] [other: QUEUED #6] [ ]...
 *   (a record's states: QUEUED -> LOADING -> VALIDATING -> DONE | FAILED)
 *   queue:   head -> &other
 *
 * PRIORITY
 *   The loader thread lowers its own scheduling priority (nice LOADER_NICE)
 *   before it loads anything, and with --load-sched-idle (the default) runs
 *   as SCHED_IDLE; the threads it starts (the snapshot loader's, the gate's,
 *   the fold's) inherit both.  A load, a gate's shadow scoring or a fold is
 *   bulk work that may take every core for seconds: at equal priority it
 *   competes with the admin thread and the workers for the CPU, and on a
 *   machine of few cores a request's split lookup (store_team) waits for
 *   it; niced it still takes a tenth of a core from them, as SCHED_IDLE it
 *   takes only what they leave (and under a CPU-bound load it barely
 *   progresses: turn the option off to give loads their nice share).
 *
 * HOOKS
 *   A load queued with loader_submit_job may bring its own open function
 *   (how its version is built: a repository chain, repo.c) and its own done
 *   hook (told before the global one, so the repository watcher learns
 *   about its loads without the admin plane knowing it exists).  Admin
 *   loads have neither and open one snapshot directory.
 *
 * GATE
 *   Between the open and the swap, the candidate passes the validation gate
 *   (gate_check, on this thread, without L.lock; the record says VALIDATING)
 *   unless its job is forced;
 *   a refusal fails the load with the gate's message and the version is
 *   released unserved.
 *
 * SHUTDOWN
 *   loader_stop fails the queued loads at once (shutdown = true), lets the
 *   running load finish (model_load cannot be interrupted half-way), then
 *   discards that version instead of swapping it in: the process is exiting,
 *   and a swap would only add a retire wait to the drain.
 *
 * THREAD SAFETY
 *   One static state (one loader per process).  Records, queue and counters
 *   are protected by L.lock; the loader thread drops the lock for the load
 *   and the retire wait.  done() is called without the lock.
 */
#define _GNU_SOURCE /* SCHED_IDLE */
#include "gate.h"
#include "guard.h"
#include "log.h"
#include "server.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#define LOADER_NICE 10 /* added to the process's nice value, for this thread and its helpers */

/* A record's own way to open its version and its own done hook (loader_job_t);
 * set with the record, read by the loader thread after it pops the record. */
struct hooks {
    loader_open_fn *open; /* NULL: server_model_open(path) */
    void *open_arg;
    loader_done_fn *done; /* NULL: none */
    void *done_arg;
    bool force;           /* skip the validation gate */
};

static struct loader {
    server_t *srv;
    loader_done_fn *done;
    void *done_arg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;                        /* queue not empty, or stopping */
    bool running;                               /* loader_start .. loader_stop */
    bool stopping;                              /* no new loads; the thread exits */
    loader_status_t records[LOADER_MODELS_MAX]; /* latest load per model name; id 0: free */
    struct hooks hooks[LOADER_MODELS_MAX];      /* records[i]'s open and done hooks */
    loader_status_t *queue[LOADER_QUEUE_MAX];   /* FIFO ring of queued records */
    unsigned qhead, qlen;
    uint64_t last_id;
    loader_metrics_t metrics;
} L = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *loader_state_name(loader_state_t st)
{
    switch (st) {
    case LOADER_QUEUED:
        return "queued";
    case LOADER_LOADING:
        return "loading";
    case LOADER_VALIDATING:
        return "validating";
    case LOADER_DONE:
        return "done";
    case LOADER_FAILED:
        return "failed";
    }
    return "?";
}

uint64_t loader_elapsed_ms(const loader_status_t *st)
{
    uint64_t end = st->finished_ns ? st->finished_ns : now_ns();
    return (end - st->queued_ns) / 1000000u;
}

/* The record of model name, or NULL.  L.lock held. */
static loader_status_t *find(const char *name)
{
    for (int i = 0; i < LOADER_MODELS_MAX; i++)
        if (L.records[i].id && strcmp(L.records[i].model, name) == 0)
            return &L.records[i];
    return NULL;
}

/* A free record, else the one whose load ended first.  L.lock held. */
static loader_status_t *take(void)
{
    loader_status_t *best = NULL;
    for (int i = 0; i < LOADER_MODELS_MAX; i++) {
        loader_status_t *r = &L.records[i];
        if (!r->id)
            return r;
        if (r->finished_ns && (!best || r->finished_ns < best->finished_ns))
            best = r;
    }
    return best; /* never NULL: at most LOADER_QUEUE_MAX + 1 are unfinished */
}

/* Takes the oldest queued record off the queue.  L.lock held, L.qlen > 0. */
static loader_status_t *pop(void)
{
    loader_status_t *r = L.queue[L.qhead];
    L.qhead = (L.qhead + 1) % LOADER_QUEUE_MAX;
    L.qlen--;
    return r;
}

/* Marks r ended and counts it.  L.lock held. */
static void finish(loader_status_t *r, loader_state_t state, uint64_t started_ns)
{
    r->state = state;
    r->finished_ns = now_ns();
    if (state == LOADER_DONE)
        L.metrics.ok++;
    else
        L.metrics.failed++;
    L.metrics.in_progress--;
    if (started_ns)
        L.metrics.last_seconds = (double)(r->finished_ns - started_ns) * 1e-9;
}

static void *loader_main(void *arg)
{
    (void)arg;
    server_t *srv = L.srv;
    /* Per thread on Linux; threads created from here on inherit it. */
    id_t tid = (id_t)syscall(SYS_gettid);
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, tid);
    if (!(nice == -1 && errno) && setpriority(PRIO_PROCESS, tid, nice + LOADER_NICE) != 0)
        LOG(LL_WARN, "loader: cannot lower its priority: %s (loads compete with the admin plane)",
            strerror(errno));
    if (srv->cfg.load_sched_idle) {
        struct sched_param sp = {.sched_priority = 0};
        if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp) != 0)
            LOG(LL_WARN, "loader: cannot run as SCHED_IDLE (loads stay at nice +%d)",
                LOADER_NICE);
    }
    pthread_mutex_lock(&L.lock);
    for (;;) {
        while (!L.stopping && L.qlen == 0)
            pthread_cond_wait(&L.wake, &L.lock);
        if (L.qlen == 0) /* stopping: loader_stop emptied the queue */
            break;
        loader_status_t *r = pop();
        struct hooks hk = L.hooks[r - L.records];
        r->state = LOADER_LOADING;
        char dir[sizeof r->path];
        memcpy(dir, r->path, sizeof dir); /* the record is only read by others now */
        uint64_t id = r->id, t0 = now_ns();
        pthread_mutex_unlock(&L.lock);

        LOG(LL_INFO, "load %llu: loading %s from %s", (unsigned long long)id, r->model, dir);
        server_model_t *sm = NULL, *old = NULL;
        store_error_t err;
        int rc;
        if (hk.open) {
            memset(&err, 0, sizeof err);
            err.offset = -1;
            rc = hk.open(srv, r, hk.open_arg, &sm, &err); /* r is stable: see RECORDS */
        } else {
            rc = server_model_open(srv, dir, &sm, &err);
        }
        /* The gate (gate.h) before the swap: a refused version is never served. */
        gate_verdict_t gv;
        pthread_mutex_lock(&L.lock);
        bool stopping = L.stopping; /* discarded below: the drain does not wait for a gate */
        pthread_mutex_unlock(&L.lock);
        bool gated = rc == 0 && !hk.force && !stopping;
        if (gated) {
            pthread_mutex_lock(&L.lock);
            r->state = LOADER_VALIDATING;
            pthread_mutex_unlock(&L.lock);
        }
        bool refused = gated && gate_check(srv, sm, &gv) != 0;
        /* The active version's number again (an admin load of another build under
         * it; the repository's reloads say why themselves): it replaces the active
         * one, and the replaced weights cannot be kept beside it (versions are
         * found by number), so say so. */
        uint64_t same_number = 0;
        if (rc == 0 && !refused) {
            server_model_t *act = server_model_acquire_named(srv, model_meta(sm->model)->model_name);
            if (act && model_meta(act->model)->version == model_meta(sm->model)->version)
                same_number = model_meta(act->model)->version;
            server_model_release(act);
        }

        pthread_mutex_lock(&L.lock);
        if (rc != 0) {
            const char *what = hk.open ? "version" : "snapshot";
            if (err.msg[0])
                snprintf(r->error, sizeof r->error, "cannot load %s %s (%s): %s", what, dir,
                         store_errc_name(err.code), err.msg);
            else
                snprintf(r->error, sizeof r->error, "cannot load %s %s: %s", what, dir,
                         strerror(rc < 0 ? -rc : EIO));
            finish(r, LOADER_FAILED, t0);
        } else if (refused) {
            snprintf(r->error, sizeof r->error, "version %llu from %s refused by the gate: %s",
                     (unsigned long long)model_meta(sm->model)->version, dir, gv.msg);
            r->gate_refused = true;
            finish(r, LOADER_FAILED, t0);
        } else if (L.stopping) {
            snprintf(r->error, sizeof r->error,
                     "the server is shutting down: the version loaded from %s was discarded", dir);
            r->shutdown = true;
            finish(r, LOADER_FAILED, t0);
        } else if (server_model_reserve(srv, model_meta(sm->model)->model_name) != 0) {
            snprintf(r->error, sizeof r->error,
                     "model '%s' from %s is not served: this server holds %d models already",
                     model_meta(sm->model)->model_name, dir, SERVER_MODELS_MAX);
            finish(r, LOADER_FAILED, t0);
        } else {
            const store_meta_t *meta = model_meta(sm->model);
            r->version = meta->version;
            snprintf(r->kind, sizeof r->kind, "%s", store_model_kind_name(meta->model_kind));
            r->keys = model_key_count(sm->model);
            guard_arm(srv, sm); /* the post-swap guard watches it (guard.h) */
            old = server_model_swap(srv, sm); /* DONE only once requests see it */
            sm = NULL;
            finish(r, LOADER_DONE, t0);
        }
        loader_status_t copy = *r;
        pthread_mutex_unlock(&L.lock);

        if (copy.state == LOADER_DONE) {
            LOG(LL_INFO, "load %llu: %s version %llu active after %.3f s", (unsigned long long)id,
                copy.model, (unsigned long long)copy.version,
                (double)(copy.finished_ns - t0) * 1e-9);
            if (same_number && !hk.open) /* the repository's reloads say why themselves */
                LOG(LL_WARN,
                    "load %llu: %s version %llu from %s replaced the active version %llu (the "
                    "same number): the replaced weights are not kept for a rollback (give a new "
                    "build a new version number)",
                    (unsigned long long)id, copy.model, (unsigned long long)copy.version, dir,
                    (unsigned long long)same_number);
        } else if (copy.shutdown)
            LOG(LL_INFO, "load %llu: %s", (unsigned long long)id, copy.error);
        else
            LOG(LL_WARN, "load %llu: %s (the current version keeps serving)",
                (unsigned long long)id, copy.error);
        if (hk.done)
            hk.done(&copy, hk.done_arg);
        if (L.done)
            L.done(&copy, L.done_arg);
        server_model_release(sm); /* discarded at shutdown, or refused by the gate */
        server_model_retire(old);
        if (copy.state == LOADER_DONE)
            server_model_fold(srv, copy.model); /* a delta's overlay into the base (overlay.h) */

        pthread_mutex_lock(&L.lock);
    }
    pthread_mutex_unlock(&L.lock);
    return NULL;
}

int loader_start(server_t *srv, loader_done_fn *done, void *arg)
{
    pthread_mutex_lock(&L.lock);
    L.srv = srv;
    L.done = done;
    L.done_arg = arg;
    L.stopping = false;
    L.qhead = L.qlen = 0;
    int rc = -pthread_create(&L.thread, NULL, loader_main, NULL);
    L.running = rc == 0;
    pthread_mutex_unlock(&L.lock);
    return rc;
}

void loader_stop(void)
{
    loader_status_t dropped[LOADER_QUEUE_MAX];
    struct hooks dropped_hooks[LOADER_QUEUE_MAX];
    unsigned n = 0;
    pthread_mutex_lock(&L.lock);
    if (!L.running) {
        pthread_mutex_unlock(&L.lock);
        return;
    }
    L.stopping = true;
    while (L.qlen) {
        loader_status_t *r = pop();
        snprintf(r->error, sizeof r->error,
                 "the server is shutting down: the load of %s was dropped before it started",
                 r->path);
        r->shutdown = true;
        finish(r, LOADER_FAILED, 0);
        dropped_hooks[n] = L.hooks[r - L.records];
        dropped[n++] = *r;
    }
    pthread_cond_signal(&L.wake);
    pthread_mutex_unlock(&L.lock);

    for (unsigned i = 0; i < n; i++) {
        LOG(LL_INFO, "load %llu: %s", (unsigned long long)dropped[i].id, dropped[i].error);
        if (dropped_hooks[i].done)
            dropped_hooks[i].done(&dropped[i], dropped_hooks[i].done_arg);
        if (L.done)
            L.done(&dropped[i], L.done_arg);
    }
    pthread_join(L.thread, NULL);
    pthread_mutex_lock(&L.lock);
    L.running = false;
    pthread_mutex_unlock(&L.lock);
}

int loader_submit(const char *name, const char *dir, uint64_t version, loader_status_t *out)
{
    loader_job_t job = {.name = name, .dir = dir, .version = version};
    return loader_submit_job(&job, out);
}

int loader_submit_job(const loader_job_t *job, loader_status_t *out)
{
    const char *name = job->name, *dir = job->dir;
    int rc = 0;
    pthread_mutex_lock(&L.lock);
    loader_status_t *r = find(name);
    if (!L.running || L.stopping) {
        rc = -ECANCELED;
    } else if (r && !r->finished_ns) {
        *out = *r;
        rc = -EBUSY;
    } else if (L.qlen == LOADER_QUEUE_MAX) {
        rc = -EAGAIN;
    } else {
        if (!r)
            r = take();
        memset(r, 0, sizeof *r);
        r->id = ++L.last_id;
        r->state = LOADER_QUEUED;
        snprintf(r->model, sizeof r->model, "%s", name);
        snprintf(r->path, sizeof r->path, "%s", dir);
        r->version = job->version;
        r->queued_ns = now_ns();
        L.hooks[r - L.records] =
            (struct hooks){job->open, job->open_arg, job->done, job->done_arg, job->force};
        L.queue[(L.qhead + L.qlen) % LOADER_QUEUE_MAX] = r;
        L.qlen++;
        L.metrics.in_progress++;
        *out = *r;
        pthread_cond_signal(&L.wake);
    }
    pthread_mutex_unlock(&L.lock);
    return rc;
}

int loader_status(const char *name, loader_status_t *out)
{
    pthread_mutex_lock(&L.lock);
    loader_status_t *r = find(name);
    if (r)
        *out = *r;
    pthread_mutex_unlock(&L.lock);
    return r ? 0 : -ENOENT;
}

void loader_get_metrics(loader_metrics_t *out)
{
    pthread_mutex_lock(&L.lock);
    *out = L.metrics;
    pthread_mutex_unlock(&L.lock);
}
