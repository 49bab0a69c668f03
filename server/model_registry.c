/*
 * model_registry.c — the active version of each model: acquire, release,
 * open, swap, retire, kept versions, rollback, and the fold's steps on the
 * lists (the fold itself: model_fold.c).
 *
 * MODELS
 *   The server holds up to SERVER_MODELS_MAX models, one slot each
 *   (server.h: an active pointer and a name), claimed under R.lock at the
 *   model's first swap and published by a release store of srv->nmodels; a
 *   request finds its model's slot by a scan of the names (a few compares)
 *   and pins the slot's active version as below.  Everything that follows
 *   holds per slot; "srv->active" is the slot's pointer.
 *
 * WHAT IT SOLVES
 *   Workers pin the active version per request with a reference count
 *   (server_model_acquire / server_model_release); the loader thread swaps in
 *   a new version and drops the server's own reference to the old one.  The
 *   naive acquire
 *
 *       sm = load(srv->active);  fetch_add(&sm->refs, 1);
 *
 *   has a window: between the load and the increment the loader thread may
 *   swap, drop the last reference and free sm, and the increment then writes
 *   into freed memory.  We close it with one HAZARD SLOT per thread:
 *
 *     worker (acquire)                      loader (swap + retire old)
 *     ----------------                      -------------------------
 *     do {                                  old = exchange(&active, new)
 *       sm = load(active)                   for each hazard slot h:
 *       h->ptr = sm          (seq_cst)        while (h->ptr == old) yield
 *     } while (load(active) != sm)          release(old)   (drop server ref)
 *     fetch_add(&sm->refs, 1)
 *     h->ptr = NULL          (release)
 *
 *   Why it is enough: all the marked operations are seq_cst, so they have one
 *   total order.  If the worker's re-check saw old still active, that
 *   re-check — and the hazard store before it — precede the exchange, so the
 *   loader's scan sees h->ptr == old (and waits) or a later value of h->ptr,
 *   which the worker wrote after its increment.  Either way the increment
 *   happens before the loader's release, and the count cannot reach 0 while
 *   the worker holds a reference.  If the re-check saw the new pointer, the
 *   worker retries and never touches old.  After the scan no thread can be
 *   between "load" and "increment" on old, so from then on old->refs only
 *   falls.
 *
 *   The hazard is held for a few instructions, so the loader's wait is
 *   nanoseconds (unless a worker is preempted right there; then it yields
 *   until that worker runs).  Workers need no quiescent points and no
 *   worker id: acquire/release keep the signatures in server.h, and an idle
 *   worker blocked in io_uring_enter holds nothing the loader waits for.
 *   Per request the cost is one seq_cst store to the thread's own line, two
 *   loads of srv->active (read-mostly), and the refcount's two atomic ops.
 *
 * WHO FREES
 *   Whoever drops the count to 0 frees (model_destroy + free).  To keep a
 *   multi-GB munmap off the data plane, the loader thread, after the scan,
 *   waits (sleeping 1 ms at a time, at most RETIRE_WAIT_MS) for the workers'
 *   in-flight requests on the old version to finish, and then usually drops
 *   the last reference itself.  If a request outlives the wait, the worker
 *   that finishes it frees the old version.
 *
 * HAZARD SLOTS
 *
 *   slots ──> [ptr|in_use|next] ──> [ptr|in_use|next] ──> ... ──> NULL
 *              one 64-byte line each; push-only list, never freed
 *
 *   A thread claims a free slot (CAS in_use false->true) or pushes a new one
 *   on its first acquire, keeps it in a thread-local pointer, and gives it
 *   back at thread exit (pthread key destructor).  Slots are never unlinked,
 *   so the loader's scan may walk the list while threads come and go.
 *
 * STANDBY
 *   server_model_swap does not drop the swapped-out version: in the same
 *   step as the exchange (under R.lock, so no listing sees it neither active
 *   nor kept) it pushes it on a short list of standby versions (newest
 *   first, at most cfg.keep_versions) with a reference of the registry's
 *   own, and queues the one that falls off the end; server_model_retire
 *   then drops the caller's reference and retires what was queued.  A
 *   rollback or an activation of a kept version is then a pointer exchange
 *   under the registry lock: no load, no copy.  The version it replaces is
 *   either pushed on the list (activate) or retired (rollback).  Retires
 *   that follow an admin call run on a detached thread, so that the retire
 *   wait never holds the admin thread.  Memory: keep_versions whole
 *   versions beside the active one.
 *
 *     active ──> v3          standby: [v2] [v1]      (keep_versions 2)
 *     swap v4:   active ──> v4, standby: [v3] [v2],  v1 retired
 *     rollback:  active ──> v3, standby: [v2],       v4 retired
 *
 * THREAD SAFETY
 *   The exchange of srv->active and the standby list are under R.lock, a
 *   leaf lock (the loader calls the swap with its own lock held; nothing
 *   is taken while holding R.lock, and it is never held while waiting).
 *   One server per process: the list belongs to the server of the last
 *   swap (R.srv), whose keep_versions it reads.  A rollback right after a
 *   swap finds the previous version already kept.
 *   server_model_acquire/_release: any thread, lock-free (acquire may retry
 *   while a swap is under way).  server_model_open: any thread, blocks for
 *   the whole load.  server_model_swap and _retire: one thread at a time,
 *   main for the first model (server_model_load) before the admin plane
 *   starts, then the loader thread alone; retire blocks for the retire wait.
 *   Memory: during a load the old and the new version are both resident.
 *
 * ERRORS
 *   A refused snapshot is described by the model layer's store_error_t; a
 *   resource failure here is -errno and leaves err->msg empty (this file
 *   does not invent store error codes).
 */
#define _GNU_SOURCE /* SCHED_IDLE */
#include "log.h"
#include "model/overlay.h"
#include "server.h"
#include "server_impl.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RETIRE_WAIT_MS 5000

typedef struct hazard {
    _Atomic(server_model_t *)
        ptr;             /* version being pinned by the owner (load..increment), or NULL */
    _Atomic bool in_use; /* a live thread owns this slot */
    struct hazard *next; /* immutable once pushed */
} __attribute__((aligned(64))) hazard_t;

_Static_assert(sizeof(hazard_t) == 64, "hazard slot is one cache line");

static _Atomic(hazard_t *) slots;       /* push-only list of every slot */
static _Thread_local hazard_t *my_slot; /* this thread's slot, NULL before first acquire */
static pthread_key_t slot_key;          /* destructor gives the slot back */
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t last_gen;       /* server_model_t.gen of the newest handle */

static struct registry {
    pthread_mutex_t lock;                             /* orders swaps; guards the list */
    server_model_t *standby[SERVER_KEPT_MAX];         /* newest first; server's refs */
    size_t n;                                         /* standby entries in use */
    server_t *srv;                                    /* set by the first swap */
    server_model_t *pending[2 * (SERVER_KEPT_MAX + 1)]; /* dropped by swaps, for
                                                       * the next server_model_retire */
    size_t npending;
} R = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void slot_give_back(void *p)
{
    hazard_t *h = p;
    atomic_store_explicit(&h->ptr, NULL, memory_order_release);
    atomic_store_explicit(&h->in_use, false, memory_order_release);
}

static void slot_key_create(void)
{
    if (pthread_key_create(&slot_key, slot_give_back) != 0)
        abort();
}

/* This thread's hazard slot; claims or creates one on first use.  Aborts
 * when a 64-byte slot cannot be allocated (control-plane tier). */
static cold __attribute__((noinline)) hazard_t *slot_claim(void)
{
    pthread_once(&slot_once, slot_key_create);
    hazard_t *h;
    for (h = atomic_load_explicit(&slots, memory_order_acquire); h; h = h->next) {
        bool free_slot = false;
        if (!atomic_load_explicit(&h->in_use, memory_order_relaxed) &&
            atomic_compare_exchange_strong(&h->in_use, &free_slot, true))
            goto got;
    }
    h = aligned_alloc(64, sizeof *h);
    if (!h)
        abort();
    atomic_init(&h->ptr, NULL);
    atomic_init(&h->in_use, true);
    h->next = atomic_load_explicit(&slots, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&slots, &h->next, h, memory_order_release,
                                                  memory_order_relaxed))
        ;
got:
    my_slot = h;
    pthread_setspecific(slot_key, h);
    return h;
}

static server_model_t *acquire_slot(server_slot_t *ms)
{
    hazard_t *h = my_slot;
    if (unlikely(h == NULL))
        h = slot_claim();
    server_model_t *sm;
    for (;;) {
        sm = atomic_load(&ms->active);
        if (!sm)
            break; /* clear the slot below: a stale hazard would stall a retire */
        atomic_store(&h->ptr, sm);
        if (atomic_load(&ms->active) == sm) {
            atomic_fetch_add_explicit(&sm->refs, 1, memory_order_relaxed);
            break;
        }
    }
    atomic_store_explicit(&h->ptr, NULL, memory_order_release);
    return sm;
}

/* The slot of model name, or NULL.  Any thread: names are written before the
 * count that publishes them. */
static server_slot_t *slot_named(server_t *srv, const char *name)
{
    uint32_t n = atomic_load_explicit(&srv->nmodels, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(srv->models[i].name, name) == 0)
            return &srv->models[i];
    return NULL;
}

server_slot_t *server_slot_named(server_t *srv, const char *name)
{
    return slot_named(srv, name);
}

/* The slot of model name, claimed when new; NULL when all are taken.  R.lock
 * held (claims are serialised). */
static server_slot_t *slot_claim_locked(server_t *srv, const char *name)
{
    server_slot_t *ms = slot_named(srv, name);
    uint32_t n = atomic_load_explicit(&srv->nmodels, memory_order_relaxed);
    if (ms || n == SERVER_MODELS_MAX)
        return ms;
    ms = &srv->models[n];
    snprintf(ms->name, sizeof ms->name, "%s", name);
    pthread_mutex_init(&ms->writer, NULL);
    atomic_store_explicit(&ms->active, NULL, memory_order_relaxed);
    atomic_store_explicit(&srv->nmodels, n + 1, memory_order_release);
    return ms;
}

server_model_t *server_model_acquire_named(server_t *srv, const char *name)
{
    server_slot_t *ms = slot_named(srv, name);
    return ms ? acquire_slot(ms) : NULL;
}

server_model_t *server_model_acquire(server_t *srv)
{
    return atomic_load_explicit(&srv->nmodels, memory_order_acquire) ? acquire_slot(&srv->models[0])
                                                                      : NULL;
}

size_t server_model_names(server_t *srv, char (*names)[64], size_t max)
{
    uint32_t n = atomic_load_explicit(&srv->nmodels, memory_order_acquire);
    for (uint32_t i = 0; i < n && i < max; i++)
        memcpy(names[i], srv->models[i].name, sizeof names[i]);
    return n;
}

int server_model_any_active(server_t *srv)
{
    uint32_t n = atomic_load_explicit(&srv->nmodels, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++)
        if (atomic_load(&srv->models[i].active))
            return 1;
    return 0;
}

int server_model_reserve(server_t *srv, const char *name)
{
    pthread_mutex_lock(&R.lock);
    server_slot_t *ms = slot_claim_locked(srv, name);
    pthread_mutex_unlock(&R.lock);
    return ms ? 0 : -ENOSPC;
}

void server_model_drop_all(server_t *srv)
{
    uint32_t n = atomic_load_explicit(&srv->nmodels, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++)
        server_model_release(atomic_exchange(&srv->models[i].active, NULL));
}

/* The active handle of sm's model (NULL when none).  R.lock held. */
static server_model_t *active_of(server_t *srv, const server_model_t *sm)
{
    server_slot_t *ms = slot_named(srv, model_meta(sm->model)->model_name);
    return ms ? atomic_load(&ms->active) : NULL;
}

static void destroy(server_model_t *sm)
{
    model_destroy(sm->model);
    free(sm);
}

void server_model_release(server_model_t *sm)
{
    if (!sm)
        return;
    if (atomic_fetch_sub_explicit(&sm->refs, 1, memory_order_acq_rel) == 1)
        destroy(sm);
}

/* Drops the server's reference to old after the hazard scan and the
 * bounded wait for its requests. */
void server__retire_now(server_model_t *old)
{
    if (!old)
        return;
    for (hazard_t *h = atomic_load(&slots); h; h = h->next)
        while (atomic_load(&h->ptr) == old)
            sched_yield();

    struct timespec ms = {0, 1000000};
    for (int waited = 0; waited < RETIRE_WAIT_MS; waited++) {
        if (atomic_load_explicit(&old->refs, memory_order_acquire) == 1)
            break;
        nanosleep(&ms, NULL);
    }
    if (atomic_load_explicit(&old->refs, memory_order_acquire) != 1)
        LOG(LL_WARN,
            "old model version still pinned by requests after %d ms; the last one frees it",
            RETIRE_WAIT_MS);
    server_model_release(old);
}

static void *retire_thread(void *arg)
{
    server__retire_now(arg);
    return NULL;
}

/* Retires old on a detached thread (the caller must not wait); inline when
 * no thread can be started. */
static void retire_async(server_model_t *old)
{
    if (!old)
        return;
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, retire_thread, old) != 0)
        server__retire_now(old);
    pthread_attr_destroy(&a);
}

static int same_version(const server_model_t *a, const server_model_t *b)
{
    const store_meta_t *ma = model_meta(a->model), *mb = model_meta(b->model);
    return ma->version == mb->version && strcmp(ma->model_name, mb->model_name) == 0;
}

/* Unlinks standby[i] and returns it.  R.lock held. */
static server_model_t *unlink_standby(size_t i)
{
    server_model_t *sm = R.standby[i];
    memmove(&R.standby[i], &R.standby[i + 1], (R.n - i - 1) * sizeof R.standby[0]);
    R.n--;
    return sm;
}

/* Pushes old (the server's reference) as the newest standby; fills drop[]
 * with what no longer fits or duplicates the active version or old, and
 * returns how many.  R.lock held. */
static size_t push_standby(server_t *srv, server_model_t *old,
                           server_model_t *drop[SERVER_KEPT_MAX + 1])
{
    size_t nd = 0;
    server_model_t *active = active_of(srv, old);
    const char *name = model_meta(old->model)->model_name;
    size_t keep = (size_t)(srv->cfg.keep_versions < 0 ? 0 : srv->cfg.keep_versions);
    if (keep > SERVER_KEEP_VERSIONS_MAX)
        keep = SERVER_KEEP_VERSIONS_MAX;
    if (keep == 0 || (active && same_version(active, old))) {
        drop[nd++] = old;
        return nd;
    }
    for (size_t i = 0; i < R.n;) {
        if (same_version(R.standby[i], old) || (active && same_version(R.standby[i], active)))
            drop[nd++] = unlink_standby(i);
        else
            i++;
    }
    size_t mine = 0, oldest = 0; /* this model's kept versions; its oldest one */
    for (size_t i = 0; i < R.n; i++)
        if (strcmp(model_meta(R.standby[i]->model)->model_name, name) == 0) {
            mine++;
            oldest = i;
        }
    if (mine == keep || R.n == SERVER_KEPT_MAX)
        drop[nd++] = unlink_standby(mine ? oldest : R.n - 1);
    memmove(&R.standby[1], &R.standby[0], R.n * sizeof R.standby[0]);
    R.standby[0] = old;
    R.n++;
    return nd;
}

/* 1 when sm is in the standby list or waiting to be retired.  R.lock held. */
static int registry_holds(const server_model_t *sm)
{
    for (size_t i = 0; i < R.n; i++)
        if (R.standby[i] == sm)
            return 1;
    for (size_t i = 0; i < R.npending; i++)
        if (R.pending[i] == sm)
            return 1;
    return 0;
}

void server_model_retire(server_model_t *old)
{
    server_model_t *drop[2 * (SERVER_KEPT_MAX + 1)];
    pthread_mutex_lock(&R.lock);
    int held = old && registry_holds(old);
    size_t nd = R.npending;
    memcpy(drop, R.pending, nd * sizeof drop[0]);
    R.npending = 0;
    pthread_mutex_unlock(&R.lock);
    if (held)
        server_model_release(old); /* the swap's reference; the registry holds another */
    else
        server__retire_now(old);
    for (size_t i = 0; i < nd; i++)
        server__retire_now(drop[i]);
}

static void kept_info(const server_model_t *sm, server_kept_t *k)
{
    const store_meta_t *meta = model_meta(sm->model);
    snprintf(k->name, sizeof k->name, "%s", meta->model_name);
    k->version = meta->version;
    snprintf(k->kind, sizeof k->kind, "%s", store_model_kind_name(meta->model_kind));
    k->keys = model_key_count(sm->model);
}

size_t server_model_standby(server_t *srv, server_kept_t *out, size_t max)
{
    (void)srv;
    pthread_mutex_lock(&R.lock);
    size_t n = R.n;
    for (size_t i = 0; i < n && i < max; i++)
        kept_info(R.standby[i], &out[i]);
    pthread_mutex_unlock(&R.lock);
    return n;
}

server_model_t *server_model_acquire_kept(server_t *srv, const char *name, uint64_t version)
{
    (void)srv;
    server_model_t *sm = NULL;
    pthread_mutex_lock(&R.lock);
    for (size_t i = 0; i < R.n && !sm; i++) {
        const store_meta_t *m = model_meta(R.standby[i]->model);
        if (m->version == version && strcmp(m->model_name, name) == 0) {
            sm = R.standby[i];
            atomic_fetch_add_explicit(&sm->refs, 1, memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(&R.lock);
    return sm;
}

/* Model name's slot and its active version (0 when none).  R.lock held (the
 * active handle cannot be retired meanwhile). */
static uint64_t active_locked(server_t *srv, const char *name, server_slot_t **ms)
{
    *ms = slot_named(srv, name);
    server_model_t *a = *ms ? atomic_load(&(*ms)->active) : NULL;
    return a ? model_meta(a->model)->version : 0;
}

int server_model_rollback(server_t *srv, const char *name, uint64_t *from, uint64_t *to)
{
    server_slot_t *ms;
    int rc = 0;
    server_model_t *old = NULL;
    pthread_mutex_lock(&R.lock);
    uint64_t av = active_locked(srv, name, &ms);
    if (av == 0) {
        rc = -ENOENT;
        goto out;
    }
    size_t i = 0;
    while (i < R.n && strcmp(model_meta(R.standby[i]->model)->model_name, name) != 0)
        i++;
    if (i == R.n) {
        rc = -ESRCH;
        goto out;
    }
    server_model_t *sm = unlink_standby(i);
    old = atomic_exchange(&ms->active, sm);
    *from = av;
    *to = model_meta(sm->model)->version;
out:
    pthread_mutex_unlock(&R.lock);
    if (old) {
        LOG(LL_INFO, "model %s rolled back from version %llu to kept version %llu", name,
            (unsigned long long)*from, (unsigned long long)*to);
        retire_async(old);
    }
    return rc;
}

int server_model_activate_kept(server_t *srv, const char *name, uint64_t version,
                               uint64_t *from)
{
    server_slot_t *ms;
    int rc = 0;
    server_model_t *old = NULL, *drop[SERVER_KEPT_MAX + 1];
    size_t nd = 0;
    pthread_mutex_lock(&R.lock);
    uint64_t av = active_locked(srv, name, &ms);
    *from = av;
    if (av == version)
        goto out;
    size_t i = 0;
    while (i < R.n && !(model_meta(R.standby[i]->model)->version == version &&
                        strcmp(model_meta(R.standby[i]->model)->model_name, name) == 0))
        i++;
    if (i == R.n) {
        rc = -ESRCH;
        goto out;
    }
    server_model_t *sm = unlink_standby(i);
    ms = slot_claim_locked(srv, name); /* kept, so it was live: the slot exists */
    old = atomic_exchange(&ms->active, sm);
    if (old)
        nd = push_standby(srv, old, drop);
out:
    pthread_mutex_unlock(&R.lock);
    if (rc == 0 && old)
        LOG(LL_INFO, "model %s version %llu active again (kept); version %llu is standby", name,
            (unsigned long long)version, (unsigned long long)av);
    for (size_t k = 0; k < nd; k++)
        retire_async(drop[k]);
    return rc;
}

int server_model_drop_kept(server_t *srv, const char *name, uint64_t version)
{
    (void)srv;
    server_model_t *sm = NULL;
    pthread_mutex_lock(&R.lock);
    for (size_t i = 0; i < R.n && !sm; i++) {
        const store_meta_t *m = model_meta(R.standby[i]->model);
        if (m->version == version && strcmp(m->model_name, name) == 0)
            sm = unlink_standby(i);
    }
    pthread_mutex_unlock(&R.lock);
    retire_async(sm);
    return sm ? 0 : -ESRCH;
}

void server_model_drop_standby(server_t *srv)
{
    (void)srv;
    pthread_mutex_lock(&R.lock);
    server_model_t *drop[SERVER_KEPT_MAX];
    size_t n = R.n;
    memcpy(drop, R.standby, n * sizeof drop[0]);
    R.n = 0;
    pthread_mutex_unlock(&R.lock);
    for (size_t i = 0; i < n; i++)
        server__retire_now(drop[i]);
}

int server_model_wrap(model_t *m, server_model_t **out)
{
    /* Own cache line: refs is written by every worker on every request. */
    server_model_t *sm = aligned_alloc(64, 64);
    if (!sm)
        return -ENOMEM;
    _Static_assert(sizeof(server_model_t) <= 64, "server_model_t fits its line");
    sm->model = m;
    atomic_init(&sm->refs, 1); /* the caller's, then the server's while active */
    sm->gen = atomic_fetch_add(&last_gen, 1) + 1;
    *out = sm;
    return 0;
}

int server_model_open(server_t *srv, const char *dir, server_model_t **out, store_error_t *err)
{
    model_t *m = NULL;
    memset(err, 0, sizeof *err);
    err->offset = -1;
    int rc = model_load(dir, srv->cfg.load_threads, &m, err);
    if (rc != 0)
        return rc;
    rc = server_model_wrap(m, out);
    if (rc != 0)
        model_destroy(m);
    return rc;
}

server_model_t *server_model_swap(server_t *srv, server_model_t *sm)
{
    pthread_mutex_lock(&R.lock);
    R.srv = srv;
    server_slot_t *ms = slot_claim_locked(srv, model_meta(sm->model)->model_name);
    if (!ms) { /* no server_model_reserve: refuse rather than replace another model */
        pthread_mutex_unlock(&R.lock);
        LOG(LL_ERROR, "model %s not made active: the server holds %d models already",
            model_meta(sm->model)->model_name, SERVER_MODELS_MAX);
        return sm;
    }
    server_model_t *old = atomic_exchange(&ms->active, sm);
    /* Kept (or queued to retire) in the same step as the exchange: no listing
     * sees the old version neither active nor kept.  The registry takes a
     * reference of its own; the caller's goes with server_model_retire. */
    if (old && R.npending + SERVER_KEPT_MAX + 1 <= sizeof R.pending / sizeof R.pending[0]) {
        atomic_fetch_add_explicit(&old->refs, 1, memory_order_relaxed);
        R.npending += push_standby(srv, old, R.pending + R.npending);
    }
    pthread_mutex_unlock(&R.lock);
    const store_meta_t *meta = model_meta(sm->model);
    LOG(LL_INFO, "model %s version %llu (%s, %llu keys) active", meta->model_name,
        (unsigned long long)meta->version, store_model_kind_name(meta->model_kind),
        (unsigned long long)model_key_count(sm->model));
    return old;
}

/* ---- the fold's registry steps (model_fold.c) ---------------------------------------- */

/* Step 2: every kept version on a's base gets undo appended; the replaced
 * handles are retired.  Returns how many now hold it, or -errno (the fold
 * stops: what was replaced is still exact). */
int server__give_standbys_undo(server_t *srv, server_model_t *a, model_overlay_t *undo)
{
    server_model_t *old[SERVER_KEPT_MAX];
    size_t nold = 0;
    int rc = 0;
    pthread_mutex_lock(&R.lock);
    if (active_of(srv, a) != a)
        rc = -EAGAIN; /* rolled back or replaced meanwhile: the next delta folds */
    for (size_t i = 0; i < R.n && rc == 0; i++) {
        server_model_t *sb = R.standby[i];
        if (!model_same_base(sb->model, a->model))
            continue;
        model_overlay_t *ov[MODEL_OVERLAYS_MAX];
        uint32_t n = model_overlays(sb->model, ov);
        if (n + 1 > MODEL_OVERLAYS_MAX) {
            rc = -E2BIG;
            break;
        }
        ov[n] = undo;
        model_t *dm = NULL;
        if (model_derive(sb->model, NULL, ov, n + 1, model_key_count(sb->model), &dm) != 0) {
            rc = -ENOMEM;
            break;
        }
        server_model_t *nsm = NULL;
        if (server_model_wrap(dm, &nsm) != 0) {
            model_destroy(dm);
            rc = -ENOMEM;
            break;
        }
        R.standby[i] = nsm;
        old[nold++] = sb;
    }
    pthread_mutex_unlock(&R.lock);
    for (size_t i = 0; i < nold; i++)
        server__retire_now(old[i]);
    return rc < 0 ? rc : (int)nold;
}

/* Step 4: a's place (active or kept) goes to fresh.  Returns a (the
 * server's reference, for the caller to retire) or NULL when a is in neither
 * any more (fresh is dropped). */
server_model_t *server__replace_handle(server_t *srv, server_model_t *a, server_model_t *fresh)
{
    server_model_t *gone = NULL;
    pthread_mutex_lock(&R.lock);
    server_slot_t *ms = slot_named(srv, model_meta(a->model)->model_name);
    if (ms && atomic_load(&ms->active) == a) {
        gone = atomic_exchange(&ms->active, fresh);
    } else {
        for (size_t i = 0; i < R.n && !gone; i++)
            if (R.standby[i] == a) {
                gone = a;
                R.standby[i] = fresh;
            }
    }
    pthread_mutex_unlock(&R.lock);
    if (!gone)
        server_model_release(fresh);
    return gone;
}

int server_model_load(server_t *srv, const char *dir, store_error_t *err)
{
    server_model_t *sm;
    int rc = server_model_open(srv, dir, &sm, err);
    if (rc != 0)
        return rc;
    server_model_retire(server_model_swap(srv, sm));
    return 0;
}
