/*
 * fold_write.c — step 3 of the fold (overlay.h): the overlays written into
 * the base, on up to FOLD_THREADS_MAX threads, each the one writer of the
 * shards s with s % parts == part.
 *
 * ONE PASS (model_fold_write): the upserts go through store_upsert_batch,
 * FOLD_BATCH keys at a time (their buckets' misses overlapped), and a
 * delete after the batch before it, so that the base sees the overlays'
 * operations in their order.
 *
 * TWO PASSES (model_fold_overwrite, then model_fold_rest), for a caller
 * that runs them at different priorities.  The first writes the values of
 * the keys the base holds with store_overwrite_batch: no version change,
 * so no reader ever waits for it (it may run when nothing else wants a
 * core), and no reader reads those rows from the base meanwhile, since
 * every reader of those keys takes them from an overlay (the version's, or
 * the undo of step 2).  It keeps the rest, per part and in overlay order:
 * the keys the base lacks with their values, and the deletes.  The second
 * writes only those, which readers do wait for (inserts and deletes hold a
 * sub-table's version odd).  With several overlays (one may upsert a key
 * another deletes: only one pass keeps their order) the first does nothing
 * and the second everything.
 *
 * THREAD SAFETY: overlay.h (the base's one writer, after step 2's drain).
 */
#include "model_impl.h"
#include "overlay.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Keys a writer hands to the store at once. */
#define FOLD_BATCH 256
#define FOLD_THREADS_MAX 16

enum fold_pass { FOLD_ALL, FOLD_OVERWRITE, FOLD_REST };

/* One part's operations the overwrite pass left: inserts (with values)
 * and deletes, in overlay order. */
struct rest_part {
    uint64_t *keys;
    float *vals;   /* K per entry; a delete's unused */
    uint8_t *del;  /* 1: delete */
    size_t n, cap;
};

struct model_fold_rest {
    uint32_t parts;
    bool all; /* several overlays: the second pass does everything */
    struct rest_part part[FOLD_THREADS_MAX];
};

struct writer {
    const model_t *m;
    enum fold_pass pass;
    uint32_t part, parts;
    uint32_t K;
    uint32_t n; /* upserts batched */
    uint64_t keys[FOLD_BATCH];
    float *vals; /* FOLD_BATCH x K */
    uint8_t written[FOLD_BATCH];
    struct rest_part *rest; /* FOLD_OVERWRITE: where the rest goes */
    int rc;
};

static int rest_add(struct rest_part *r, uint32_t K, uint64_t key, const float *value)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 1024;
        uint64_t *k = realloc(r->keys, cap * sizeof *k);
        if (k)
            r->keys = k;
        float *v = realloc(r->vals, cap * K * sizeof *v);
        if (v)
            r->vals = v;
        uint8_t *d = realloc(r->del, cap);
        if (d)
            r->del = d;
        if (!k || !v || !d)
            return -ENOMEM;
        r->cap = cap;
    }
    r->keys[r->n] = key;
    r->del[r->n] = value == NULL;
    if (value)
        memcpy(r->vals + r->n * K, value, K * sizeof *value);
    r->n++;
    return 0;
}

/* The batch into the base: FOLD_OVERWRITE the keys it holds (the others
 * to the rest), otherwise every key. */
static int flush_writes(struct writer *w)
{
    store_t *s = w->m->store;
    int rc = 0;
    if (w->n && w->pass == FOLD_OVERWRITE) {
        store_overwrite_batch(s, w->keys, w->vals, w->n, w->written);
        for (uint32_t i = 0; i < w->n && rc == 0; i++)
            if (!w->written[i])
                rc = rest_add(w->rest, w->K, w->keys[i], w->vals + (size_t)i * w->K);
    } else if (w->n && store_upsert_batch(s, w->keys, w->vals, w->n) < 0) {
        rc = -ENOMEM;
    }
    w->n = 0;
    return rc;
}

static int write_key(void *ctx, uint64_t key, const float *value)
{
    struct writer *w = ctx;
    store_t *s = w->m->store;
    if (store_shard_of(s, key) % w->parts != w->part)
        return 0;
    if (value) {
        w->keys[w->n] = key;
        memcpy(w->vals + (size_t)w->n * w->K, value, w->K * sizeof *value);
        return ++w->n == FOLD_BATCH ? flush_writes(w) : 0;
    }
    int rc = flush_writes(w);
    if (rc == 0 && w->pass == FOLD_OVERWRITE)
        return rest_add(w->rest, w->K, key, NULL);
    store_delete(s, key);
    return rc;
}

/* FOLD_REST: the part's operations the overwrite pass left, in order. */
static int write_rest(struct writer *w)
{
    const struct rest_part *r = w->rest;
    int rc = 0;
    for (size_t i = 0; i < r->n && rc == 0; i++)
        rc = write_key(w, r->keys[i], r->del[i] ? NULL : r->vals + i * w->K);
    return rc;
}

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    w->vals = malloc((size_t)FOLD_BATCH * w->K * sizeof *w->vals);
    if (!w->vals)
        w->rc = -ENOMEM;
    else if (w->pass == FOLD_REST)
        w->rc = write_rest(w);
    for (uint32_t o = w->m->n_overlays; o-- > 0 && w->rc == 0 && w->pass != FOLD_REST;)
        w->rc = model_overlay_foreach(w->m->overlays[o], write_key, w);
    if (w->rc == 0)
        w->rc = flush_writes(w);
    free(w->vals);
    return NULL;
}

static uint32_t parts_for(const model_t *m, int threads)
{
    uint32_t parts = threads < 1 ? 1 : threads > FOLD_THREADS_MAX ? FOLD_THREADS_MAX
                                                                   : (uint32_t)threads;
    return parts > store_shards(m->store) ? store_shards(m->store) : parts;
}

/* One pass on `parts` threads (the caller's among them); rest: the parts'
 * lists (FOLD_OVERWRITE fills them, FOLD_REST writes them), else NULL. */
static int fold_pass(const model_t *m, uint32_t parts, enum fold_pass pass,
                     struct rest_part *rest)
{
    struct writer *w = calloc(parts, sizeof *w);
    if (!w)
        return -ENOMEM;
    pthread_t th[FOLD_THREADS_MAX];
    uint32_t started = 0;
    for (uint32_t p = 0; p < parts; p++)
        w[p] = (struct writer){.m = m, .pass = pass, .part = p, .parts = parts,
                               .K = store_value_floats(m->store), .rest = rest ? &rest[p] : NULL};
    for (uint32_t p = 1; p < parts; p++) /* shards are disjoint: one writer each */
        if (pthread_create(&th[p], NULL, writer_main, &w[p]) == 0)
            started |= 1u << p;
        else
            writer_main(&w[p]);
    writer_main(&w[0]);
    int rc = w[0].rc;
    for (uint32_t p = 1; p < parts; p++) {
        if (started & (1u << p))
            pthread_join(th[p], NULL);
        if (w[p].rc != 0)
            rc = w[p].rc;
    }
    free(w);
    return rc;
}

int model_fold_write(const model_t *m, int threads)
{
    return fold_pass(m, parts_for(m, threads), FOLD_ALL, NULL);
}

int model_fold_overwrite(const model_t *m, int threads, model_fold_rest_t **rest)
{
    model_fold_rest_t *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->parts = parts_for(m, threads);
    r->all = m->n_overlays != 1;
    int rc = r->all ? 0 : fold_pass(m, r->parts, FOLD_OVERWRITE, r->part);
    if (rc != 0) {
        model_fold_rest_free(r);
        return rc;
    }
    *rest = r;
    return 0;
}

int model_fold_rest(const model_t *m, const model_fold_rest_t *rest)
{
    if (rest->all)
        return fold_pass(m, rest->parts, FOLD_ALL, NULL);
    return fold_pass(m, rest->parts, FOLD_REST, (struct rest_part *)rest->part);
}

uint64_t model_fold_rest_count(const model_fold_rest_t *rest)
{
    uint64_t n = 0;
    for (uint32_t p = 0; p < rest->parts; p++)
        n += rest->part[p].n;
    return n;
}

void model_fold_rest_free(model_fold_rest_t *rest)
{
    if (!rest)
        return;
    for (uint32_t p = 0; p < FOLD_THREADS_MAX; p++) {
        free(rest->part[p].keys);
        free(rest->part[p].vals);
        free(rest->part[p].del);
    }
    free(rest);
}
