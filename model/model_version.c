/*
 * model_version.c — versions made of a shared base and overlays (overlay.h):
 * deriving one, turning a chain of deltas into one overlay over the active
 * version, and the fold's undo (its writes: fold_write.c).
 *
 * A delta is checked as it is turned into an overlay: its layout against the
 * parent's, its parent link, and every delete against the version it
 * applies to (a delete of an absent key refuses the delta, as
 * store_delta_apply does for a rebuild).  The same pass counts the keys the
 * new version holds.  Presence is asked of the parent in batches
 * (store_lookup_batch, then the parent's overlays) so that a million-key
 * delta costs a few batched probes per key, not a cache miss each; the
 * records are then put into the overlay grouped by slot range (overlay.c:
 * BUILDING A BIG ONE), for the same reason.
 *
 * THREAD SAFETY: model_apply_deltas and model_fold_undo only read the parent
 * (any number of readers may share it); their helper threads (one faulting
 * the new table in, and during the build's puts one answering presence)
 * touch only memory nobody else holds yet or the parent.  The fold's writes
 * are fold_write.c's.
 */
#define _GNU_SOURCE
#include "model_impl.h"
#include "overlay.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* Keys per batched presence query: at most 1 MiB of looked-up floats. */
#define BATCH_FLOATS ((size_t)1 << 18)
#define BATCH_KEYS_MAX 8192

int model_derive(const model_t *m, const store_meta_t *meta, model_overlay_t *const *ov,
                 uint32_t n, uint64_t keys, model_t **out)
{
    if (!m || !out || n > MODEL_OVERLAYS_MAX || (n && !ov))
        return -EINVAL;
    model_t *d = malloc(sizeof *d);
    if (!d)
        return -ENOMEM;
    *d = *m;
    atomic_fetch_add_explicit(&m->base->sharers, 1, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++)
        d->overlays[i] = model_overlay_ref(ov[i]);
    d->n_overlays = n;
    d->keys = keys;
    if (meta)
        d->meta = *meta;
    *out = d;
    return 0;
}

uint32_t model_overlays(const model_t *m, model_overlay_t **ov)
{
    if (ov)
        memcpy(ov, m->overlays, m->n_overlays * sizeof *ov);
    return m->n_overlays;
}

uint64_t model_key_count(const model_t *m)
{
    return m->n_overlays ? m->keys : store_count(m->store);
}

int model_same_base(const model_t *a, const model_t *b)
{
    return a && b && a->base == b->base;
}

int model_same_weights(const model_t *a, const model_t *b)
{
    return model_same_base(a, b) && a->n_overlays == b->n_overlays &&
           memcmp(a->overlays, b->overlays, a->n_overlays * sizeof a->overlays[0]) == 0;
}

uint32_t model_base_sharers(const model_t *m)
{
    return atomic_load_explicit(&m->base->sharers, memory_order_acquire);
}

/* Keys per batch for K floats a key: BATCH_FLOATS of them, 1..BATCH_KEYS_MAX. */
static size_t batch_keys(uint32_t K)
{
    size_t n = BATCH_FLOATS / K;
    return n > BATCH_KEYS_MAX ? BATCH_KEYS_MAX : n ? n : 1;
}

/* Presence of keys in a version: the base, then its overlays (last first). */
static void version_lookup(const model_t *m, const uint64_t *keys, size_t n, float *vals,
                           uint8_t *found)
{
    store_lookup_batch(m->store, keys, n, vals, found);
    for (uint32_t o = m->n_overlays; o-- > 0;)
        model_overlay_lookup(m->overlays[o], keys, n, vals, found);
}

/* ---- a chain of deltas -> one overlay ------------------------------------------------ */

/* Each delta of the chain is read twice: once to count its keys per overlay
 * partition, once to copy each key's record to its partition's place in
 * recs and to list the keys whose presence the version must answer (those
 * an earlier delta of the chain did not touch).  Then two threads: this one
 * puts recs into the overlay partition by partition (overlay.c: BUILDING A
 * BIG ONE) while a helper asks the version, in batches, whether it holds
 * the listed keys (new keys counted, deletes of absent keys refused); both
 * only read what the other writes to.  A delta's keys are unique
 * (store/delta.h), so their order inside a partition does not matter; the
 * deltas of a chain go in one after the other, so a later one overwrites. */

/* The presence questions of one delta, answered on the helper thread. */
struct presence {
    const model_t *parent;
    const uint64_t *keys;  /* n keys the chain had not touched yet */
    const uint8_t *del;    /* 1: a delete (must be present), 0: an upsert */
    size_t n, cap;         /* cap: keys per batch (found, vals) */
    uint8_t *found;
    float *vals;
    uint64_t added, removed; /* keys the version gains, loses */
    uint64_t bad_key;      /* a delete of an absent key */
    int bad;
};

static void presence_run(struct presence *p)
{
    for (size_t at = 0; at < p->n; at += p->cap) {
        size_t m = p->n - at < p->cap ? p->n - at : p->cap;
        version_lookup(p->parent, p->keys + at, m, p->vals, p->found);
        for (size_t i = 0; i < m; i++) {
            if (p->del[at + i]) {
                if (!p->found[i] && !p->bad) {
                    p->bad = 1;
                    p->bad_key = p->keys[at + i];
                }
                p->removed += p->found[i];
            } else {
                p->added += !p->found[i];
            }
        }
    }
}

static void *presence_main(void *arg)
{
    presence_run(arg);
    return NULL;
}

struct apply {
    const model_t *parent;
    model_overlay_t *ov;
    uint32_t K;
    bool later_delta;    /* not the chain's first: the overlay may hold the key already */
    uint64_t keys;       /* keys of the version being built */
    /* The current delta's records, grouped by partition, and its questions:
     * recs_cap of each, in one mapping (recs_map bytes) or one malloc. */
    uint8_t *recs;
    uint64_t *pend;
    uint8_t *pend_del;
    size_t rec_bytes, nrecs, recs_cap, written, recs_map, npend;
    size_t *cursor;      /* per partition: pass 1 its count, pass 2 its next record */
    uint8_t *found;      /* the helper's batch buffers */
    float *vals;
    size_t cap;
    uint64_t bad_key;    /* a delete of a key an earlier delta of the chain deleted */
    int bad, full;
};

static int count_key(struct apply *a, uint64_t key)
{
    a->cursor[model__overlay_part_of(a->ov, key)]++;
    a->nrecs++;
    return 0;
}

static int count_upsert(void *ctx, uint64_t key, const float *value)
{
    (void)value;
    return count_key(ctx, key);
}

static int count_delete(void *ctx, uint64_t key)
{
    return count_key(ctx, key);
}

/* One key of a delta: counted now when the overlay knows whether the version
 * held it (an earlier delta of the chain), else listed for the parent's
 * batched answer; then its record written to its partition's place. */
static int take(struct apply *a, uint64_t key, const float *value)
{
    bool del = !value;
    if (a->written == a->nrecs) { /* more keys than pass 1 counted */
        a->full = 1;
        return -ENOSPC;
    }
    if (a->later_delta) {
        float tmp[STORE_MAX_VALUE_FLOATS];
        int st = model_overlay_get(a->ov, key, tmp);
        if (st == 1) { /* present */
            a->keys -= del;
        } else if (st == 2) { /* deleted by an earlier delta of the chain */
            if (del && !a->bad) {
                a->bad = 1;
                a->bad_key = key;
            }
            a->keys += !del;
        }
        if (st != 0)
            goto record;
    }
    a->pend[a->npend] = key;
    a->pend_del[a->npend++] = del;
record:;
    size_t at = a->cursor[model__overlay_part_of(a->ov, key)]++;
    model__overlay_record(a->ov, a->recs + at * a->rec_bytes, key, value);
    a->written++;
    return 0;
}

static int on_upsert(void *ctx, uint64_t key, const float *value)
{
    return take(ctx, key, value);
}

static int on_delete(void *ctx, uint64_t key)
{
    return take(ctx, key, NULL);
}

/* One delta into a->ov: count, group, then put and check at once.  0, or
 * -ENOSPC (more keys than the manifests counted); a->bad set for a bad
 * delete. */
static int apply_one(struct apply *a, const store_delta_t *d)
{
    const uint32_t parts = model__overlay_parts(a->ov), shards = store_delta_info(d)->layout.shards;
    memset(a->cursor, 0, parts * sizeof *a->cursor);
    a->nrecs = a->written = a->npend = 0;
    for (uint32_t s = 0; s < shards; s++)
        (void)store_delta_foreach(d, s, count_upsert, count_delete, a);
    if (a->nrecs > a->recs_cap) /* more than its manifest counts */
        return -ENOSPC;
    for (size_t p = 0, at = 0; p < parts; p++) { /* counts -> first places */
        size_t c = a->cursor[p];
        a->cursor[p] = at;
        at += c;
    }
    int rc = 0;
    for (uint32_t s = 0; s < shards && rc == 0; s++)
        rc = store_delta_foreach(d, s, on_upsert, on_delete, a);
    if (rc != 0 || a->bad)
        return rc;
    struct presence q = {.parent = a->parent, .keys = a->pend, .del = a->pend_del,
                         .n = a->npend, .cap = a->cap, .found = a->found, .vals = a->vals};
    pthread_t th;
    bool helper = pthread_create(&th, NULL, presence_main, &q) == 0;
    rc = model__overlay_put_records(a->ov, a->recs, a->written);
    if (helper)
        pthread_join(th, NULL);
    else
        presence_run(&q);
    a->keys += q.added;
    a->keys -= q.removed;
    if (q.bad && !a->bad) {
        a->bad = 1;
        a->bad_key = q.bad_key;
    }
    return rc;
}

/* What a helper thread faults in while the builder reads: the staging
 * records first (written first), then the table. */
struct populate {
    uint8_t *recs;
    size_t recs_map;     /* 0: nothing to populate there */
    model_overlay_t *ov;
};

/* Whether a populating helper helps here: not for a SCHED_IDLE caller (the
 * server's loader), whose helper inherits SCHED_IDLE.  MADV_POPULATE_WRITE
 * holds the address space's lock (for reading) while it faults pages in; a
 * SCHED_IDLE thread preempted there by the workers, with a munmap waiting
 * for that lock, leaves every later page fault of the process queued
 * behind them: request latency then spikes by the populate's length. */
static bool populate_helps(void)
{
    int policy;
    struct sched_param sp;
    return pthread_getschedparam(pthread_self(), &policy, &sp) != 0 || policy != SCHED_IDLE;
}

static void *populate_main(void *arg)
{
    struct populate *p = arg;
    if (p->recs_map)
        (void)madvise(p->recs, p->recs_map, MADV_POPULATE_WRITE); /* best effort */
    model__overlay_populate(p->ov);
    return NULL;
}

/* The staging records and questions for n keys: mapped with huge pages from
 * 2 MiB up (a million keys' records in 4 KiB pages cost thousands of
 * faults), else malloc'd. */
static int recs_alloc(struct apply *a, size_t n)
{
    n = n ? n : 1;
    size_t bytes = n * (a->rec_bytes + sizeof *a->pend + 1); /* rec_bytes: a multiple of 8 */
    if (bytes >= ((size_t)2 << 20)) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED) {
            (void)madvise(p, bytes, MADV_HUGEPAGE); /* best effort */
            a->recs = p;
            a->recs_map = bytes;
        }
    } else {
        a->recs = malloc(bytes);
    }
    if (!a->recs)
        return -ENOMEM;
    a->pend = (uint64_t *)(void *)(a->recs + n * a->rec_bytes);
    a->pend_del = (uint8_t *)(a->pend + n);
    a->recs_cap = n;
    return 0;
}

/* The delta's layout and link against the version it applies to. */
static int check_delta(const model_t *parent, uint64_t parent_version, const store_delta_t *d,
                       store_error_t *err)
{
    const store_delta_info_t *in = store_delta_info(d);
    const store_delta_layout_t *l = &in->layout;
    const store_meta_t *pm = &parent->meta;
    unsigned long long v = (unsigned long long)in->meta.version;
    if (in->meta.parent_version != parent_version)
        return store_error_set(err, STORE_E_MISMATCH,
                    "delta version %llu applies to version %llu, not to version %llu", v,
                    (unsigned long long)in->meta.parent_version,
                    (unsigned long long)parent_version);
    if (strcmp(l->model_name, pm->model_name) != 0 || l->model_kind != pm->model_kind)
        return store_error_set(err, STORE_E_MISMATCH,
                    "delta version %llu is for model '%s' kind %s, the version it applies to is "
                    "'%s' kind %s",
                    v, l->model_name, store_model_kind_name(l->model_kind), pm->model_name,
                    store_model_kind_name(pm->model_kind));
    if (l->value_floats != store_value_floats(parent->store) ||
        l->dtype != store_dtype(parent->store) || l->shards != store_shards(parent->store))
        return store_error_set(err, STORE_E_MISMATCH,
                    "delta version %llu has %u floats per key, dtype %d and %u shards; the "
                    "version it applies to has %u, %d and %u",
                    v, l->value_floats, (int)l->dtype, l->shards,
                    store_value_floats(parent->store), (int)store_dtype(parent->store),
                    store_shards(parent->store));
    return 0;
}

int model_apply_deltas(const model_t *parent, store_delta_t *const *d, uint32_t n, model_t **out,
                       store_error_t *err)
{
    if (!parent || !d || n == 0 || !out)
        return store_error_set(err, STORE_E_INVALID, "model_apply_deltas: no parent or no delta");
    if (parent->n_overlays + 1 > MODEL_OVERLAYS_MAX) {
        store_error_set(err, STORE_E_MISMATCH, "version %llu already has %u overlays",
             (unsigned long long)parent->meta.version, parent->n_overlays);
        return -E2BIG; /* the caller rebuilds instead */
    }
    uint64_t total = 0, most = 0, prev = parent->meta.version;
    for (uint32_t i = 0; i < n; i++) {
        int rc = check_delta(parent, prev, d[i], err);
        if (rc != 0)
            return rc;
        const store_delta_info_t *in = store_delta_info(d[i]);
        total += in->upserts + in->deletes;
        most = in->upserts + in->deletes > most ? in->upserts + in->deletes : most;
        prev = in->meta.version;
    }
    const uint32_t K = store_value_floats(parent->store);
    struct apply a = {.parent = parent, .K = K, .keys = model_key_count(parent)};
    pthread_t populating = 0;
    struct populate job; /* the helper's, until joined */
    a.cap = batch_keys(K);
    a.found = malloc(a.cap);
    a.vals = malloc(a.cap * K * sizeof *a.vals);
    int rc = model_overlay_create(K, total, &a.ov);
    if (rc == 0) {
        a.rec_bytes = model__overlay_record_bytes(a.ov);
        a.cursor = malloc(model__overlay_parts(a.ov) * sizeof *a.cursor);
        if (most > SIZE_MAX / (a.rec_bytes + 9) || recs_alloc(&a, (size_t)most) != 0)
            rc = -ENOMEM;
    }
    if (rc != 0 || !a.cursor || !a.found || !a.vals) {
        rc = store_error_set(err, STORE_E_NOMEM, "no memory for an overlay of %llu keys",
                  (unsigned long long)total);
        goto out;
    }
    /* Zeroing the table's fresh pages overlaps reading the first delta (and
     * meets the puts, which go front to back, in the middle). */
    job = (struct populate){.recs = a.recs, .recs_map = a.recs_map, .ov = a.ov};
    if (!populate_helps() || pthread_create(&populating, NULL, populate_main, &job) != 0)
        populating = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        const store_delta_info_t *in = store_delta_info(d[i]);
        a.later_delta = i > 0;
        rc = apply_one(&a, d[i]);
        if (rc != 0 || a.full) {
            rc = store_error_set(err, STORE_E_NOMEM, "delta version %llu: more keys than its manifest counts",
                      (unsigned long long)in->meta.version);
        } else if (a.bad) {
            rc = store_error_set(err, STORE_E_MISMATCH,
                      "delta version %llu deletes key %llu, which the version it applies to "
                      "does not hold",
                      (unsigned long long)in->meta.version, (unsigned long long)a.bad_key);
        }
    }
    if (rc == 0) {
        model_overlay_t *ov[MODEL_OVERLAYS_MAX];
        ov[0] = a.ov;
        memcpy(ov + 1, parent->overlays, parent->n_overlays * sizeof *ov);
        const store_delta_info_t *last = store_delta_info(d[n - 1]);
        store_meta_t meta = parent->meta;
        meta.version = last->meta.version;
        meta.created_unix = last->meta.created_unix;
        meta.parent_version = 0;
        if (model_derive(parent, &meta, ov, parent->n_overlays + 1, a.keys, out) != 0)
            rc = store_error_set(err, STORE_E_NOMEM, "no memory for version %llu",
                      (unsigned long long)meta.version);
    }
out:
    if (populating)
        pthread_join(populating, NULL);
    model_overlay_unref(a.ov);
    if (a.recs_map)
        munmap(a.recs, a.recs_map);
    else
        free(a.recs);
    free(a.cursor);
    free(a.found);
    free(a.vals);
    return rc;
}

/* ---- the fold ------------------------------------------------------------------------ */

struct undo {
    const model_t *m;
    model_overlay_t *undo;
    uint64_t *keys;
    uint8_t *found;
    float *vals;
    size_t n, cap;
};

static void undo_flush(struct undo *u)
{
    store_lookup_batch(u->m->store, u->keys, u->n, u->vals, u->found);
    for (size_t i = 0; i < u->n; i++)
        u->found[i] = !u->found[i]; /* now: deleted */
    (void)model_overlay_put_batch(u->undo, u->keys, u->n, u->vals, u->found); /* sized for all */
    u->n = 0;
}

static int undo_key(void *ctx, uint64_t key, const float *value)
{
    (void)value;
    struct undo *u = ctx;
    u->keys[u->n] = key;
    if (++u->n == u->cap)
        undo_flush(u);
    return 0;
}

int model_fold_undo(const model_t *m, model_overlay_t **undo)
{
    const uint32_t K = store_value_floats(m->store);
    uint64_t total = 0;
    for (uint32_t o = 0; o < m->n_overlays; o++)
        total += model_overlay_count(m->overlays[o]);
    struct undo u = {.m = m};
    u.cap = batch_keys(K);
    u.keys = malloc(u.cap * sizeof *u.keys);
    u.found = malloc(u.cap);
    u.vals = malloc(u.cap * K * sizeof *u.vals);
    int rc = model_overlay_create(K, total, &u.undo);
    pthread_t populating = 0;
    struct populate job = {.recs_map = 0}; /* the helper's, until joined */
    if (rc == 0 && u.keys && u.found && u.vals) {
        /* The undo's keys come in the overlays' table order, which is (one
         * overlay, same size) the undo's: its puts go front to back while
         * the helper faults pages in from the back. */
        job.ov = u.undo;
        if (!populate_helps() || pthread_create(&populating, NULL, populate_main, &job) != 0)
            populating = 0;
        for (uint32_t o = 0; o < m->n_overlays; o++)
            model_overlay_foreach(m->overlays[o], undo_key, &u);
        undo_flush(&u);
    } else {
        rc = -ENOMEM;
    }
    if (populating)
        pthread_join(populating, NULL);
    if (rc == 0) {
        *undo = u.undo;
        u.undo = NULL;
    }
    model_overlay_unref(u.undo);
    free(u.keys);
    free(u.found);
    free(u.vals);
    return rc;
}
