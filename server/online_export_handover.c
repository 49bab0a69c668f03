/*
 * online_export_handover.c — the trainer's side of the online exports
 * (online_export.c has the design): the dirty set its steps mark, and the
 * hand-over that, under the model's writer lock, turns the set into a job
 * of keys, values, optimizer state and (partitioned bus mode) the update
 * exchange's cut for the export thread.
 *
 * THREAD SAFETY: the trainer thread's (the set); the hand-over takes the
 * model's writer lock, e->lock and e->commit as online_export.c says.
 */
#define _GNU_SOURCE
#include "online_export_impl.h"

#include "log.h"
#include "model/model.h"
#include "model/overlay.h"
#include "store/delta.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define G online__G

/* ---- the dirty set (trainer thread) ---------------------------------------------- */

static inline void dirty_add(struct online_export *e, uint64_t key)
{
    if (key == 0) {
        e->count += !e->has_zero;
        e->has_zero = true;
        return;
    }
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - DIRTY_BITS));
    for (;;) {
        uint64_t k = e->slots[i];
        if (k == key)
            return;
        if (k == 0)
            break;
        i = (i + 1) & (DIRTY_SLOTS - 1);
    }
    if (e->count >= DIRTY_KEYS) {
        e->overflow = true; /* the next export carries every key */
        return;
    }
    e->slots[i] = key;
    e->count++;
}

/* Marks ids[0..n), the slots prefetched a group ahead (a block's ids land
 * at random slots of a table larger than the caches). */
static void dirty_add_block(struct online_export *e, const uint64_t *ids, uint32_t n)
{
    enum { AHEAD = 16 };
    for (uint32_t j = 0; j < n && j < AHEAD; j++)
        __builtin_prefetch(&e->slots[(ids[j] * 0x9E3779B97F4A7C15ull) >> (64 - DIRTY_BITS)], 1);
    for (uint32_t j = 0; j < n; j++) {
        if (j + AHEAD < n)
            __builtin_prefetch(
                &e->slots[(ids[j + AHEAD] * 0x9E3779B97F4A7C15ull) >> (64 - DIRTY_BITS)], 1);
        dirty_add(e, ids[j]);
    }
}

void online__export_mark(online_model_t *q, const codec_train_t *req)
{
    struct online_export *e = q->exp;
    if (!e || e->overflow)
        return;
    dirty_add(e, MODEL_BIAS_ID);
    dirty_add_block(e, req->shared.ids, req->shared.n);
    for (uint32_t i = 0; i < req->samples; i++)
        dirty_add_block(e, req->sample[i].ids, req->sample[i].n);
}

/* online__sync_cut_keys's mark: a key a peer's message wrote. */
static void mark_key(void *ctx, uint64_t key)
{
    dirty_add(ctx, key);
}

void online__export_learned(online_model_t *q, uint64_t next_pos)
{
    if (q->exp)
        q->exp->next_pos = next_pos;
}

void online__export_dirty_clear(struct online_export *e)
{
    if (e->count > 0)
        memset(e->slots, 0, DIRTY_SLOTS * sizeof *e->slots);
    e->count = 0;
    e->has_zero = e->overflow = false;
}

static int collect_row(void *ctx, uint64_t key, const float *value)
{
    struct export_job *j = ctx;
    if (j->n == j->cap)
        return 1; /* grew meanwhile: impossible with one writer, but never overrun */
    j->keys[j->n] = key;
    memcpy(j->vals + j->n * j->K, value, j->K * sizeof *value);
    j->n++;
    return 0;
}

/* Sizes the job for n keys of K floats: 0 or -ENOMEM (the job unchanged). */
static int job_reserve(struct export_job *j, size_t n, uint32_t K)
{
    if (n <= j->cap && K == j->K)
        return 0;
    size_t cap = n < 1024 ? 1024 : n;
    uint64_t *k = malloc(cap * sizeof *k);
    float *v = malloc(cap * K * sizeof *v);
    uint8_t *f = malloc(cap);
    if (!k || !v || !f) {
        free(k);
        free(v);
        free(f);
        return -ENOMEM;
    }
    free(j->keys);
    free(j->vals);
    free(j->found);
    j->keys = k;
    j->vals = v;
    j->found = f;
    j->cap = cap;
    j->K = K;
    return 0;
}

/* Keys a job keeps room for between exports; past it, its buffers go back
 * after a full export (the next ones are deltas) or one that held under a
 * quarter of them. */
#define JOB_KEEP_KEYS (1u << 16)

uint64_t online__export_job_bytes(const struct export_job *j)
{
    return (uint64_t)j->cap * (sizeof *j->keys + (uint64_t)j->K * sizeof *j->vals + 1) +
           (uint64_t)j->scap * sizeof *j->skeys + (uint64_t)j->sfloats * sizeof *j->srows;
}

void online__export_job_trim(struct export_job *j)
{
    if (j->cap > JOB_KEEP_KEYS && (j->full || j->cap / 4 > j->n))
        online__export_job_free_rows(j);
}

void online__export_job_free_rows(struct export_job *j)
{
    free(j->keys);
    free(j->vals);
    free(j->found);
    free(j->skeys);
    free(j->srows);
    j->keys = NULL;
    j->vals = NULL;
    j->found = NULL;
    j->skeys = NULL;
    j->srows = NULL;
    j->cap = j->scap = j->sfloats = 0;
}

/* The trainer's state rows of the job's keys into skeys / srows (the
 * writer lock held: they agree with the values).  Without memory, none. */
static void gather_state(online_model_t *q, struct export_job *j)
{
    const uint32_t W = train_state_width(q->t);
    j->has_state = false;
    if (j->n > j->scap || j->n * W > j->sfloats) {
        size_t cap = j->cap; /* >= n */
        uint64_t *k = malloc(cap * sizeof *k);
        float *r = malloc(cap * W * sizeof *r);
        if (!k || !r) {
            free(k);
            free(r);
            LOG(LL_WARN, "online: model '%s': no memory for the optimizer state of %zu keys: "
                "the export goes without it (a restart from it starts afresh)", q->name, j->n);
            return;
        }
        free(j->skeys);
        free(j->srows);
        j->skeys = k;
        j->srows = r;
        j->scap = cap;
        j->sfloats = cap * W;
    }
    train_state_header_of(q->t, &j->sh);
    (void)train_state_get(q->t, j->keys, j->n, j->srows, j->found);
    size_t w = 0; /* keys the state lacks (served, never stepped) stay out */
    for (size_t i = 0; i < j->n; i++)
        if (j->found[i]) {
            j->skeys[w] = j->keys[i];
            if (w != i)
                memmove(j->srows + w * W, j->srows + i * W, W * sizeof *j->srows);
            w++;
        }
    j->sh.count = w;
    j->has_state = true;
}

/* Builds the job from the set and hands it to the export thread: 1 handed
 * over, 0 not now (the thread busy, a version change pending, nothing
 * dirty). */
int online__export_hand_over(online_model_t *q)
{
    struct online_export *e = q->exp;
    struct export_job *j = &e->job;
    if (e->refused) /* said once: this model is not exported */
        return 0;
    pthread_mutex_lock(&e->lock);
    int st = e->state;
    pthread_mutex_unlock(&e->lock);
    if (st == EXP_PENDING || st == EXP_BUSY)
        return 0;
    if (st == EXP_FAILED) { /* its keys are dirty again; exported with fresh values */
        if (j->all)
            e->overflow = true;
        for (size_t i = 0; i < j->n && !e->overflow; i++)
            dirty_add(e, j->keys[i]);
        j->n = 0;
        pthread_mutex_lock(&e->lock);
        e->state = EXP_IDLE;
        pthread_mutex_unlock(&e->lock);
    }
    if (e->count == 0 && !e->overflow && !online__sync_peer_pending(q))
        return 0;
    server_slot_t *ms = server_slot_named(G.srv, q->name);
    if (!ms)
        return 0;
    int handed = 0;
    uint64_t t0 = online__now_ns();
    pthread_mutex_lock(&ms->writer);
    server_model_t *sm = server_model_acquire_named(G.srv, q->name);
    const store_meta_t *meta = sm ? model_meta(sm->model) : NULL;
    if (sm && q->t && model_store(sm->model) == q->attached &&
        meta->version != q->att_version) { /* its last export went live: take it up now */
        pthread_mutex_lock(&q->lock);
        (void)online__export_adopt(q, meta);
        pthread_mutex_unlock(&q->lock);
    }
    if (!sm || model_overlays(sm->model, NULL) > 0 || model_store(sm->model) != q->attached ||
        meta->version != q->att_version || meta->created_unix != q->att_created)
        goto out; /* a version change pending: attach decides first */
    j->has_sync = false;
    if (online__sync_mode(&G.srv->cfg)) { /* the exchange's position, with the values */
        char why[240];
        uint64_t cut0 = online__now_ns();
        int rc = online__sync_cut(q, &j->sync, why, sizeof why);
        if (rc == -ENOTSUP) {
            e->refused = true;
            LOG(LL_WARN, "online: model '%s': no exports in the partitioned bus mode: %s",
                q->name, why);
        } else if (rc == -ENOMEM) {
            atomic_fetch_add_explicit(&q->export_failures, 1, memory_order_relaxed);
            LOG(LL_ERROR, "online: model '%s': %s; the export is retried at the next tick",
                q->name, why);
        } else if (rc == -EAGAIN) { /* said once a wait passes CUT_WAIT_WARN_MS */
            uint64_t now = online__now_ns() / 1000000;
            if (!e->cut_wait_ms)
                e->cut_wait_ms = now;
            if (!e->cut_wait_said && now - e->cut_wait_ms >= CUT_WAIT_WARN_MS) {
                e->cut_wait_said = true;
                LOG(LL_WARN, "online: model '%s': no export for %" PRIu64 " s: %s (the export "
                    "runs once it can; logged once)", q->name, (now - e->cut_wait_ms) / 1000,
                    why);
            }
        }
        if (rc != 0)
            goto out;
        e->cut_wait_ms = 0;
        e->cut_wait_said = false;
        j->has_sync = true;
        if (online__sync_cut_keys(q, mark_key, e)) /* keys only peers' messages wrote */
            e->overflow = true;
        j->cut_ns = online__now_ns() - cut0;
        online__sync_cut_note(q, &j->sync, j->cut_ns);
    }
    const store_t *s = model_store(sm->model);
    uint32_t K = store_value_floats(s);
    pthread_mutex_lock(&e->commit);
    bool full = e->links_known && e->links + 1 >= online__export_full_every();
    pthread_mutex_unlock(&e->commit);
    if (full && online__export_copy_extras(j, model_extras(sm->model)) != 0) {
        LOG(LL_WARN, "online: model '%s': no memory to copy the dense arrays for a full "
            "export: a delta this time", q->name);
        full = false;
    }
    if (full && j->has_sync) /* a DNN's MLP as the cut recorded it, not the snapshot's */
        online__sync_dense_to_extras(q, &j->x);
    if (full)
        e->overflow = true; /* every key */
    size_t n = e->overflow ? (size_t)store_count(s) : e->count;
    if (job_reserve(j, n, K) != 0) {
        atomic_fetch_add_explicit(&q->export_failures, 1, memory_order_relaxed);
        LOG(LL_ERROR, "online: model '%s': no memory to export %zu keys; retried at the next "
            "tick", q->name, n);
        goto out;
    }
    j->n = 0;
    if (e->overflow) {
        for (uint32_t sh = 0; sh < store_shards(s); sh++)
            (void)store_foreach(s, sh, collect_row, j);
    } else {
        if (e->has_zero)
            j->keys[j->n++] = 0;
        for (size_t i = 0; i < DIRTY_SLOTS && j->n < n; i++)
            if (e->slots[i])
                j->keys[j->n++] = e->slots[i];
        store_lookup_batch(s, j->keys, j->n, j->vals, j->found);
        size_t w = 0; /* a key marked but never written (a refused step) stays out */
        for (size_t i = 0; i < j->n; i++)
            if (j->found[i]) {
                j->keys[w] = j->keys[i];
                memmove(j->vals + w * K, j->vals + i * K, K * sizeof *j->vals);
                w++;
            }
        j->n = w;
    }
    gather_state(q, j); /* the same lock, the same instant as the values */
    atomic_store_explicit(&q->export_buf_bytes, online__export_job_bytes(j), memory_order_relaxed);
    j->nfm = q->fmarks ? q->nfmarks : 0; /* and the files' progress in them */
    if (j->nfm)
        memcpy(j->fm, q->fmarks, j->nfm * sizeof *j->fm);
    store_delta_layout_of(s, meta, &j->layout);
    j->all = e->overflow;
    j->full = full;
    j->meta = *meta;
    j->pos = e->next_pos;
    pthread_mutex_lock(&e->commit);
    j->parent = e->head;
    j->epoch = e->epoch;
    pthread_mutex_unlock(&e->commit);
    online__export_dirty_clear(e);
    j->held_ns = online__now_ns() - t0;
    pthread_mutex_lock(&e->lock);
    e->state = EXP_PENDING;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->lock);
    handed = 1;
out:
    server_model_release(sm);
    pthread_mutex_unlock(&ms->writer);
    return handed;
}
