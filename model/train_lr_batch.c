/*
 * train_lr_batch.c — LR's update of a batch (train_lr_update_batch; every
 * sample goes through it, train_lr_update as a batch of one).
 *
 * A frame of the standard request's shape is one shared block (the user's
 * and the context's ids) and many items, each a sample shared ++ item.  The
 * shared rows are looked up once per batch, stepped in place by every item,
 * and written back (state and served store) once at its end; each item's
 * own rows are stepped where they lie in the state (point_item) and their
 * weights written to the served store per item.  Every position j
 * of a sample steps the row its id's FIRST occurrence owns (an id repeated,
 * or an item id that is also a shared id, steps on from the earlier step),
 * and the bias steps first, as update() always did: the same arithmetic in
 * the same order as item-by-item updates.  What differs is when the stores
 * see it: a shared id's new weight is served when the batch ends (a frame
 * of 100 items: a few milliseconds), an item id's when its item ends.
 *
 * A step that would not be finite returns -ERANGE: the items before it are
 * learned and written, the failing item's own rows are restored from its
 * undo, and the batch's shared rows are not written at all (they hold part
 * of the failing item's steps).
 *
 * THREAD SAFETY: the trainer's one thread (train.h).
 */
#include "train_lr_impl.h"
#include "model.h"
#include "sigmoid.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void train__lr_batch_free(lr_batch_t *b)
{
    free(b->srows);
    free(b->irows);
    free(b->sp);
    free(b->ip);
    free(b->islot);
    free(b->iown);
    free(b->sfound);
    free(b->ids_out);
    free(b->out);
    free(b->miss_ids);
    free(b->miss_w);
    free(b->miss_at);
    train__id_index_free(&b->sidx);
    *b = (lr_batch_t){0};
}

/* Room for a shared block of ns ids and items of up to ni ids. */
static int batch_reserve(train_lr_t *t, uint32_t ns, uint32_t ni)
{
    lr_batch_t *b = &t->b;
    const size_t k = t->k;
    if (ns > b->cap_s || !b->srows) {
        uint32_t cap = train__grow(b->cap_s, ns);
        if (!cap || train__realloc_array((void **)&b->srows, cap * k, sizeof *b->srows) ||
            train__realloc_array((void **)&b->sp, cap, sizeof *b->sp) ||
            train__realloc_array((void **)&b->sfound, cap, 1) ||
            train__id_index_reserve(&b->sidx, cap))
            return -ENOMEM;
        b->cap_s = cap;
    }
    if (ni > b->cap_i || !b->irows) {
        uint32_t cap = train__grow(b->cap_i, ni);
        if (!cap || train__realloc_array((void **)&b->irows, cap * k, sizeof *b->irows) ||
            train__realloc_array((void **)&b->ip, cap, sizeof *b->ip) ||
            train__realloc_array((void **)&b->islot, cap, sizeof *b->islot) ||
            train__realloc_array((void **)&b->iown, cap, sizeof *b->iown))
            return -ENOMEM;
        b->cap_i = cap;
    }
    size_t out = b->cap_s > b->cap_i ? b->cap_s : b->cap_i;
    if (train__realloc_array((void **)&b->ids_out, out, sizeof *b->ids_out) ||
        train__realloc_array((void **)&b->out, out, sizeof *b->out) ||
        train__realloc_array((void **)&b->miss_ids, out, sizeof *b->miss_ids) ||
        train__realloc_array((void **)&b->miss_w, out, sizeof *b->miss_w) ||
        train__realloc_array((void **)&b->miss_at, out, sizeof *b->miss_at))
        return -ENOMEM;
    return 0;
}

/* Looks up the n rows of ids into rows (k floats each; an id the state lacks
 * starts from the served weight when live, else from zeros).  The ids the
 * state lacks are looked up in the served store in one batch: after a new
 * version goes live every id is one of them until it is first learned. */
static void load_rows(train_lr_t *t, const uint64_t *ids, uint32_t n, float *rows,
                      uint8_t *found)
{
    store_lookup_batch(t->store, ids, n, rows, found);
    if (!t->live)
        return;
    lr_batch_t *b = &t->b;
    uint32_t m = 0;
    for (uint32_t j = 0; j < n; j++)
        if (!found[j]) {
            b->miss_ids[m] = ids[j];
            b->miss_at[m++] = j;
        }
    if (m == 0)
        return;
    store_lookup_batch(t->live, b->miss_ids, m, b->miss_w, NULL);
    for (uint32_t i = 0; i < m; i++)
        train__lr_init_from_weight(t, b->miss_ids[i], b->miss_w[i],
                                   rows + (size_t)b->miss_at[i] * t->k);
}

/* Points each position of the shared block at the row it steps: the
 * bias's state, or its id's first occurrence's row in rows.  idx is the
 * block's id index, started anew. */
static void point_rows(const uint64_t *ids, uint32_t n, float *rows, uint32_t k, float *bias,
                       id_index_t *idx, float **ptr)
{
    train__id_index_next(idx);
    for (uint32_t j = 0; j < n; j++)
        ptr[j] =
            ids[j] == MODEL_BIAS_ID ? bias : rows + (size_t)train__id_index_add(idx, ids[j], j) * k;
}

/* Points each position of an item at the row it steps: the bias's state,
 * the shared copy of an id the shared block holds, else the id's own row
 * in the state, stepped in place (store_locate_batch: the state is the
 * trainer's alone; an id repeated points at the same row, which steps on
 * from its first step).  Ids the state lacks are inserted first, from
 * their served weights (one batch) when live, else from zeros.  The own
 * positions go to b->iown, their ids to b->ids_out, their rows to b->islot.
 * Returns their count, or -ENOMEM. */
static int point_item(train_lr_t *t, const codec_block_t *it, float *bias, float **ptr)
{
    lr_batch_t *b = &t->b;
    const uint32_t k = t->k;
    uint32_t m = 0, s;
    for (uint32_t j = 0; j < it->n; j++) {
        if (it->ids[j] == MODEL_BIAS_ID) {
            ptr[j] = bias;
        } else if ((s = train__id_index_find(&b->sidx, it->ids[j])) != UINT32_MAX) {
            ptr[j] = b->sp[s];
        } else {
            b->iown[m] = j;
            b->ids_out[m++] = it->ids[j];
        }
    }
    if (t->live) /* their served rows' misses overlap the state's */
        store_prefetch_write(t->live, b->ids_out, m);
    int found = store_locate_batch(t->store, b->ids_out, m, b->islot);
    if (found >= 0 && (uint32_t)found < m) {
        uint32_t q = 0;
        for (uint32_t i = 0; i < m; i++)
            if (!b->islot[i])
                b->miss_ids[q++] = b->ids_out[i];
        if (t->live) {
            store_lookup_batch(t->live, b->miss_ids, q, b->miss_w, NULL);
            for (uint32_t i = 0; i < q; i++)
                train__lr_init_from_weight(t, b->miss_ids[i], b->miss_w[i],
                                           b->irows + (size_t)i * k);
        } else {
            memset(b->irows, 0, (size_t)q * k * sizeof *b->irows);
        }
        int rc = store_upsert_batch(t->store, b->miss_ids, b->irows, q);
        if (rc < 0)
            return rc;
        found = store_locate_batch(t->store, b->ids_out, m, b->islot); /* inserts move rows */
    }
    if (found < 0 || (uint32_t)found != m)
        return found < 0 ? found : -EIO; /* an fp16 state, or a row lost: never */
    for (uint32_t i = 0; i < m; i++)
        ptr[b->iown[i]] = b->islot[i];
    return (int)m;
}

/* Adds the block's served weights times its values to *sum, in order. */
static inline void sum_block(float *const *ptr, const float *values, uint32_t n, uint32_t wo,
                             double *sum)
{
    double s = *sum;
    if (values) {
        for (uint32_t j = 0; j < n; j++)
            s += (double)ptr[j][wo] * values[j];
    } else {
        for (uint32_t j = 0; j < n; j++)
            s += ptr[j][wo];
    }
    *sum = s;
}

/* SYNC (train_sync.h): a step's dz, dn, taken in double from the floats
 * before and after so that what a replica sends is what its own state moved
 * by. */
static inline void sync_note(const train_lr_t *t, uint64_t id, float z0, float n0, const float *st)
{
    if (t->sync_fn)
        t->sync_fn(t->sync_ctx, id, (float)((double)st[0] - z0), (float)((double)st[1] - n0));
}

/* Steps every position of a block with g x_j: -ERANGE at a non-finite row. */
static inline int step_block(const train_lr_t *t, const uint64_t *ids, float *const *ptr,
                             const float *values, uint32_t n, double g)
{
    const double l1 = t->opt.l1, l2 = t->opt.l2;
    for (uint32_t j = 0; j < n; j++) {
        float *st = ptr[j];
        const float z0 = st[0], n0 = t->k > 1 ? st[1] : 0;
        step(t, st, values ? g * values[j] : g, l1, l2);
        if (!row_finite(st, t->k))
            return -ERANGE;
        sync_note(t, ids[j], z0, n0, st);
    }
    return 0;
}

/* Writes the rows a block's positions own (each id once, with its last
 * step) to the state, and their weights to the served store.  Moves the
 * owned rows to the front of rows: the block's pointers are stale after. */
static int write_block(train_lr_t *t, const uint64_t *ids, uint32_t n, float *rows,
                       float *const *ptr)
{
    const uint32_t k = t->k, wo = k == 3 ? 2 : 0;
    const uint64_t *wids = ids; /* ids itself until a position is skipped */
    uint32_t m = 0;
    for (uint32_t j = 0; j < n; j++) {
        if (ptr[j] != rows + (size_t)j * k) { /* the bias, a shared row, or a repeat */
            if (wids == ids) {
                memcpy(t->b.ids_out, ids, (size_t)m * sizeof *ids);
                wids = t->b.ids_out;
            }
            continue;
        }
        if (m != j) {
            memcpy(rows + (size_t)m * k, rows + (size_t)j * k, k * sizeof *rows);
            t->b.ids_out[m] = ids[j];
        }
        if (t->live)
            t->b.out[m] = rows[(size_t)m * k + wo];
        m++;
    }
    int rc = store_upsert_batch(t->store, wids, rows, m);
    if (rc >= 0 && t->live)
        rc = store_upsert_batch(t->live, wids, t->b.out, m);
    return rc < 0 ? rc : 0;
}

int train_lr_update_batch(train_lr_t *t, const codec_block_t *shared,
                          const codec_block_t *items, uint32_t n_items, const float *labels,
                          const float *weights, float *p)
{
    const codec_block_t none = {.ids = NULL, .values = NULL, .n = 0};
    if (!shared)
        shared = &none;
    uint32_t ni = 0;
    for (uint32_t i = 0; items && i < n_items; i++) /* items NULL: none has ids */
        if (items[i].n > ni)
            ni = items[i].n;
    int rc = batch_reserve(t, shared->n, ni);
    if (rc != 0)
        return rc;
    t->rows_stale = true; /* the mirror (ON THREADS) no longer holds the state */
    lr_batch_t *b = &t->b;
    const uint32_t k = t->k, wo = k == 3 ? 2 : 0, ns = shared->n;
    float bst[3];
    memcpy(bst, t->bias, sizeof bst);
    load_rows(t, shared->ids, ns, b->srows, b->sfound);
    point_rows(shared->ids, ns, b->srows, k, bst, &b->sidx, b->sp);

    for (uint32_t i = 0; i < n_items; i++) {
        const codec_block_t *it = items ? &items[i] : &none;
        int own = point_item(t, it, bst, b->ip);
        if (own < 0)
            return own;
        for (int r = 0; r < own; r++) /* the undo of a step that is not finite */
            for (uint32_t c = 0; c < k; c++)
                b->irows[(size_t)r * k + c] = b->islot[r][c];
        /* the margin, summed as model_score() sums: features in order, bias last */
        double sum = 0;
        sum_block(b->sp, shared->values, ns, wo, &sum);
        sum_block(b->ip, it->values, it->n, wo, &sum);
        float pi = sigmoid((double)bst[wo] + sum);
        if (p)
            p[i] = pi;
        double g = ((double)pi - (double)labels[i]) * (double)(weights ? weights[i] : 1.0f);
        const float bz = bst[0], bn = bst[1];
        step(t, bst, g, 0, 0); /* the bias first, unregularised */
        if (!row_finite(bst, k))
            return -ERANGE;
        sync_note(t, MODEL_BIAS_ID, bz, bn, bst);
        rc = step_block(t, shared->ids, b->sp, shared->values, ns, g);
        if (rc == 0)
            rc = step_block(t, it->ids, b->ip, it->values, it->n, g);
        if (rc != 0) {
            for (int r = own - 1; r >= 0; r--)
                for (uint32_t c = 0; c < k; c++)
                    b->islot[r][c] = b->irows[(size_t)r * k + c];
            return rc;
        }
        if (t->live) {
            for (int r = 0; r < own; r++) /* a repeated id: its one row, written twice */
                b->out[r] = b->islot[r][wo];
            rc = store_upsert_batch(t->live, b->ids_out, b->out, (size_t)own);
        }
        if (rc >= 0)
            rc = store_upsert(t->store, MODEL_BIAS_ID, bst);
        if (rc >= 0 && t->live)
            rc = store_upsert(t->live, MODEL_BIAS_ID, &bst[wo]);
        if (rc < 0)
            return rc;
        memcpy(t->bias, bst, sizeof bst);
    }
    return write_block(t, shared->ids, ns, b->srows, b->sp);
}

int train_lr_update(train_lr_t *t, const uint64_t *ids, const float *values, uint32_t n,
                    float label, float weight, float *p_out)
{
    const codec_block_t sample = {.ids = ids, .values = values, .n = n};
    const codec_block_t none = {.ids = NULL, .values = NULL, .n = 0};
    return train_lr_update_batch(t, &sample, &none, 1, &label, &weight, p_out);
}

