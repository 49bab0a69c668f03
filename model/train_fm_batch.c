/*
 * train_fm_batch.c — FM's update of a frame (train_fm_update_batch, the
 * train_ops_t.update_batch that train_update runs): one shared block (the
 * user's and the context's ids) and n items, item i the sample
 * shared ++ items[i], learned with the very floats train_fm_update
 * (train_fm.c) makes item by item on the joined samples.
 *
 * A frame of the standard shape is ~300 shared ids and 100 items of ~200:
 * item by item, every shared row would be found again in the state and
 * written again to the state and the served store 100 times.  Here:
 *
 *   shared rows   looked up once per frame into srows (a row the state
 *                 lacks made as update() makes it: from the served row when
 *                 live, else a new id's), stepped there by every item,
 *                 written back to the state and the served store once, at
 *                 the frame's end;
 *   item rows     an item's ids the shared block lacks are stepped where
 *                 they lie in the state (store_locate_batch: the state is
 *                 the trainer's alone, train.h), new ones inserted first;
 *                 their serving rows go to the served store per item;
 *   the bias      one row (bst), stepped first by every item and written
 *                 to the state and the served store per item.
 *
 * The served store sees a shared id's new row when the frame ends (a frame
 * of 100 items: ~10 ms at live_train_bench's rate), an item id's when its
 * item ends.  Served rows are written as update() writes them
 * (store_upsert_relaxed: float by float, no version change, so no reader
 * waits on a preempted trainer), the ones the served store holds in one
 * pipelined pass (store_overwrite_batch, the same writes), new ids after.
 *
 * SAME FLOATS.  update() reads every row of the joined sample before any
 * step (the forward values), then steps the bias, then each position in
 * order; a position whose id came earlier in the sample (a repeat in a
 * block, an item id of the shared block, the bias's id as a feature) takes
 * its gradient at the forward values but steps the row as the earlier
 * step left it.  So each position here has a forward pointer (sp, ip: the
 * id's first occurrence's row, which no step of this item has touched
 * yet) and, for those repeats, an fm_rep_t with the row it steps and its
 * gradient taken before any step.  The bias's id as a feature reads bfw
 * (the bias row at the item's start, or, while the state lacks the bias
 * and no served store is attached, a new id's row, as update()'s lookup
 * makes it) and steps bst.  Sums run as forward_at's: features in order,
 * the shared block's sum of squares once per frame and the item's added
 * to it, which is the same sequence of double additions.
 *
 * A sync hook (train_sync.h: ROWS) sees every step as update() reports
 * it, the same deltas in the same order; a shared row's steps are reported
 * as they are taken, before the frame's end writes the row.
 *
 * NOT FINITE.  A step whose serving row is not finite returns -ERANGE with
 * the failing item undone whole: the shared rows, the bias and the item's
 * own rows restored from their copies at the item's start (srows is
 * copied once per item: ~20 KB, a small part of the item's steps), the
 * ids it inserted deleted; the items before it are written (state and
 * served), so the trainer holds exactly items 0..i-1 learned and no w or
 * v anywhere is NaN or infinite.  A sync hook (train_sync.h) has seen the failing
 * item's steps up to the failure: -ERANGE is the caller's alarm that stops
 * training.  -ENOMEM: the items before are written, the failing item's
 * steps may be partly kept.
 *
 * THREAD SAFETY: the trainer's one thread (train.h).
 */
#include "train_fm_impl.h"
#include "sigmoid.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- work space ----------------------------------------------------------------- */

void train__fm_batch_free(fm_batch_t *b)
{
    free(b->srows);
    free(b->sundo);
    free(b->sp);
    free(b->sfound);
    free(b->srep);
    free(b->irows);
    free(b->ip);
    free(b->islot);
    free(b->iown);
    free(b->ids_out);
    free(b->out);
    free(b->written);
    free(b->miss_ids);
    free(b->irep);
    free(b->rgv);
    train__id_index_free(&b->sidx);
    train__id_index_free(&b->iidx);
    *b = (fm_batch_t){0};
}

/* Room for a shared block of ns ids and items of up to ni ids: 0 or
 * -ENOMEM.  Allocates only when it grows. */
static int batch_reserve(train_fm_t *t, uint32_t ns, uint32_t ni)
{
    fm_batch_t *b = &t->b;
    const size_t sk = t->sk;
    bool grown = false;
    if (ns > b->cap_s || !b->srows) {
        uint32_t cap = train__grow(b->cap_s, ns);
        if (!cap || train__realloc_array((void **)&b->srows, cap * sk, sizeof *b->srows) ||
            train__realloc_array((void **)&b->sundo, cap * sk, sizeof *b->sundo) ||
            train__realloc_array((void **)&b->sp, cap, sizeof *b->sp) ||
            train__realloc_array((void **)&b->sfound, cap, 1) ||
            train__realloc_array((void **)&b->srep, cap, sizeof *b->srep) ||
            train__id_index_reserve(&b->sidx, cap))
            return -ENOMEM;
        b->cap_s = cap;
        grown = true;
    }
    if (ni > b->cap_i || !b->irows) {
        uint32_t cap = train__grow(b->cap_i, ni);
        if (!cap || train__realloc_array((void **)&b->irows, cap * sk, sizeof *b->irows) ||
            train__realloc_array((void **)&b->ip, cap, sizeof *b->ip) ||
            train__realloc_array((void **)&b->islot, cap, sizeof *b->islot) ||
            train__realloc_array((void **)&b->iown, cap, sizeof *b->iown) ||
            train__realloc_array((void **)&b->miss_ids, cap, sizeof *b->miss_ids) ||
            train__realloc_array((void **)&b->irep, cap, sizeof *b->irep) ||
            train__id_index_reserve(&b->iidx, cap))
            return -ENOMEM;
        b->cap_i = cap;
        grown = true;
    }
    if (grown) {
        size_t out = b->cap_s > b->cap_i ? b->cap_s : b->cap_i;
        if (train__realloc_array((void **)&b->ids_out, out, sizeof *b->ids_out) ||
            train__realloc_array((void **)&b->out, out * (1 + t->k), sizeof *b->out) ||
            train__realloc_array((void **)&b->written, out, 1) ||
            train__realloc_array((void **)&b->rgv, ((size_t)b->cap_s + b->cap_i) * t->k,
                                 sizeof *b->rgv)) {
            b->cap_s = b->cap_i = 0; /* grown again next time */
            return -ENOMEM;
        }
    }
    return 0;
}

/* ---- pointing positions at rows --------------------------------------------------- */

/* The shared block's rows into srows (one batched lookup; a row the state
 * lacks made as update() makes it), each position pointed at its id's
 * first occurrence (sp), the repeats and the bias's positions into srep. */
static void load_shared(train_fm_t *t, const codec_block_t *sh)
{
    fm_batch_t *b = &t->b;
    const uint32_t sk = t->sk;
    train__init_fn init = t->served ? train__fm_served_or_init : train__fm_init_row;
    store_lookup_batch(t->store, sh->ids, sh->n, b->srows, b->sfound);
    train__id_index_next(&b->sidx);
    uint32_t nrep = 0;
    for (uint32_t j = 0; j < sh->n; j++) {
        const uint64_t id = sh->ids[j];
        if (id == MODEL_BIAS_ID) {
            b->sp[j] = b->bfw;
            b->srep[nrep++] = (fm_rep_t){.pos = j, .first = j, .target = b->bst};
            continue;
        }
        uint32_t first = train__id_index_add(&b->sidx, id, j);
        b->sp[j] = b->srows + (size_t)first * sk;
        if (first != j)
            b->srep[nrep++] = (fm_rep_t){.pos = j, .first = first, .target = b->sp[j]};
        else if (!b->sfound[j])
            init(t, id, b->srows + (size_t)j * sk);
    }
    b->nsrep = nrep;
}

/* Points each position of item it at its forward row (ip): the bias's
 * bfw, the shared copy of an id the shared block holds, else the id's own
 * row in the state, stepped in place.  Ids the state lacks are inserted
 * first (miss_ids), made as update() makes them.  The item's repeats go to
 * irep (*nrep), its own ids to ids_out and their rows to islot.  Returns
 * the own count, or -ENOMEM. */
static int point_item(train_fm_t *t, const codec_block_t *it, uint32_t *nrep)
{
    fm_batch_t *b = &t->b;
    const uint32_t sk = t->sk;
    uint32_t m = 0, r = 0, s;
    train__id_index_next(&b->iidx);
    b->nmiss = 0;
    for (uint32_t j = 0; j < it->n; j++) {
        const uint64_t id = it->ids[j];
        if (id == MODEL_BIAS_ID) {
            b->ip[j] = b->bfw;
            b->irep[r++] = (fm_rep_t){.pos = j, .first = j, .target = b->bst};
        } else if ((s = train__id_index_find(&b->sidx, id)) != UINT32_MAX) {
            b->ip[j] = b->sp[s];
            b->irep[r++] = (fm_rep_t){.pos = j, .first = j, .target = b->sp[s]};
        } else {
            uint32_t first = train__id_index_add(&b->iidx, id, j);
            if (first != j) {
                b->irep[r++] = (fm_rep_t){.pos = j, .first = first, .target = NULL};
            } else {
                b->iown[m] = j;
                b->ids_out[m++] = id;
            }
        }
    }
    if (t->served) /* their served rows' misses overlap the state's */
        store_prefetch_write(t->served, b->ids_out, m);
    int found = store_locate_batch(t->store, b->ids_out, m, b->islot);
    if (found >= 0 && (uint32_t)found < m) {
        train__init_fn init = t->served ? train__fm_served_or_init : train__fm_init_row;
        uint32_t q = 0;
        for (uint32_t i = 0; i < m; i++)
            if (!b->islot[i]) {
                b->miss_ids[q] = b->ids_out[i];
                init(t, b->ids_out[i], b->irows + (size_t)q * sk);
                q++;
            }
        int rc = store_upsert_batch(t->store, b->miss_ids, b->irows, q);
        if (rc < 0)
            return rc;
        b->nmiss = q;
        found = store_locate_batch(t->store, b->ids_out, m, b->islot); /* inserts move rows */
    }
    if (found < 0 || (uint32_t)found != m)
        return found < 0 ? found : -EIO; /* an fp16 state, or a row lost: never */
    for (uint32_t i = 0; i < m; i++)
        b->ip[b->iown[i]] = b->islot[i];
    for (uint32_t i = 0; i < r; i++)
        if (!b->irep[i].target) {
            b->irep[i].target = b->ip[b->irep[i].first];
            b->ip[b->irep[i].pos] = b->irep[i].target;
        }
    *nrep = r;
    return (int)m;
}

/* ---- the arithmetic: train_fm.c's forward_at and update, split by block ------------ */

/* Adds a block's terms to lin, S, Q in feature order; returns lin. */
static inline double forward_block(const train_fm_t *t, float *const *ptr, const float *values,
                                   uint32_t n, double lin, double *S, double *Q)
{
    const uint32_t k = t->k;
    for (uint32_t j = 0; j < n; j++) {
        double x = values ? (double)values[j] : 1.0;
        const float *w = ptr[j];
        lin += (double)w[0] * x;
        for (uint32_t f = 0; f < k; f++) {
            double vx = (double)w[1 + f] * x;
            S[f] += vx;
            Q[f] += vx * vx;
        }
    }
    return lin;
}

/* p of shared ++ it at the forward rows, the bias's weight bias; fills
 * t->S, t->Q, t->s, t->s2.  sq_s: the shared block's sum of squares. */
static float forward(train_fm_t *t, const codec_block_t *sh, const codec_block_t *it, float bias,
                     double sq_s)
{
    const uint32_t k = t->k;
    double *S = t->S, *Q = t->Q;
    memset(S, 0, k * sizeof *S);
    memset(Q, 0, k * sizeof *Q);
    double lin = forward_block(t, t->b.sp, sh->values, sh->n, 0, S, Q);
    lin = forward_block(t, t->b.ip, it->values, it->n, lin, S, Q);
    double pair = 0;
    for (uint32_t f = 0; f < k; f++)
        pair += S[f] * S[f] - Q[f];
    t->s = t->s2 = 1;
    if (!t->opt.norm) {
        double base = (double)bias + lin;
        return sigmoid(base + 0.5 * pair);
    }
    double sq = sq_s;
    for (uint32_t j = 0; j < it->n; j++) {
        double x = it->values ? (double)it->values[j] : 1.0;
        sq += x * x;
    }
    if (sq > 0) {
        t->s2 = 1.0 / sq;
        t->s = sqrt(t->s2);
    }
    return sigmoid((double)bias + t->s * lin + t->s2 * (0.5 * pair));
}

/* The v gradients of a block's repeats, at the forward rows (before any
 * step of the item), into rgv (k each). */
static void repeat_grads(const train_fm_t *t, float *const *ptr, const float *values,
                         const fm_rep_t *rep, uint32_t nrep, double gs2, double *rgv)
{
    const uint32_t k = t->k;
    for (uint32_t r = 0; r < nrep; r++, rgv += k) {
        const uint32_t j = rep[r].pos;
        double x = values ? (double)values[j] : 1.0;
        double gvx = gs2 * x;
        const float *row = ptr[j];
        for (uint32_t f = 0; f < k; f++)
            rgv[f] = gvx * (t->S[f] - (double)row[1 + f] * x);
    }
}

/* Steps every position of a block, in order (update()'s loop): -ERANGE at
 * the first row whose serving floats are not finite. */
static int step_block(const train_fm_t *t, const uint64_t *ids, float *const *ptr,
                      const float *values, uint32_t n, const fm_rep_t *rep, uint32_t nrep,
                      const double *rgv, double gs, double gs2)
{
    const uint32_t k = t->k, sk = t->sk;
    const train__rows_sync_t *sync = &t->sync;
    double gv[MODEL_FM_MAX_K];
    float before[FM_MAX_STATE]; /* SYNC: a row before its step */
    uint32_t r = 0, next = nrep ? rep[0].pos : UINT32_MAX;
    for (uint32_t j = 0; j < n; j++) {
        double x = values ? (double)values[j] : 1.0;
        double gx = gs * x, gvx = gs2 * x;
        float *row;
        const double *g = gv;
        if (j == next) { /* the row an earlier position stepped; gradient taken before */
            row = rep[r].target;
            g = rgv + (size_t)r * k;
            r++;
            next = r < nrep ? rep[r].pos : UINT32_MAX;
        } else {
            row = ptr[j];
            for (uint32_t f = 0; f < k; f++)
                gv[f] = gvx * (t->S[f] - (double)row[1 + f] * x);
        }
        row[sk - 1] += 1.0f;
        if (sync->fn)
            memcpy(before, row, (size_t)sk * sizeof *row);
        step(t, row, gx, g, false);
        if (!serving_finite(t, row))
            return -ERANGE;
        if (sync->fn)
            train__rows_note(sync, ids[j], before, row);
    }
    return 0;
}

/* ---- writes and the undo ----------------------------------------------------------- */

/* Writes the serving rows [w | v] of the n rows (row[i], ids ids_out) to
 * the served store as store_upsert_relaxed writes them: the rows it holds
 * in one pipelined pass (store_overwrite_batch, whose writes are
 * store_upsert_relaxed's: float by float, no version change), the ids new
 * to it inserted after.  0 or -ENOMEM. */
static int write_served(train_fm_t *t, float *const *row, uint32_t n)
{
    fm_batch_t *b = &t->b;
    const size_t r = 1 + t->k;
    for (uint32_t i = 0; i < n; i++)
        memcpy(b->out + i * r, row[i], r * sizeof *b->out);
    int rc = store_overwrite_batch(t->served, b->ids_out, b->out, n, b->written);
    for (uint32_t i = 0; rc >= 0 && i < n; i++)
        if (!b->written[i])
            rc = store_upsert_relaxed(t->served, b->ids_out[i], b->out + i * r);
    return rc < 0 ? rc : 0;
}

/* Writes the shared block's rows (each id once: its first occurrence's
 * row) to the state and their serving rows to the served store.  Moves the
 * rows to the front of srows and reuses sp: the frame's pointers are gone
 * after. */
static int write_shared(train_fm_t *t, const codec_block_t *sh)
{
    fm_batch_t *b = &t->b;
    const uint32_t sk = t->sk;
    uint32_t m = 0;
    for (uint32_t j = 0; j < sh->n; j++) {
        if (b->sp[j] != b->srows + (size_t)j * sk) /* the bias, or a repeat */
            continue;
        if (m != j)
            memcpy(b->srows + (size_t)m * sk, b->srows + (size_t)j * sk, sk * sizeof *b->srows);
        b->ids_out[m++] = sh->ids[j];
    }
    int rc = store_upsert_batch(t->store, b->ids_out, b->srows, m);
    if (rc >= 0 && t->served) {
        for (uint32_t q = 0; q < m; q++)
            b->sp[q] = b->srows + (size_t)q * sk;
        rc = write_served(t, b->sp, m);
    }
    return rc < 0 ? rc : 0;
}

/* Undoes the current item (own rows in the state) after a step that was not
 * finite: the shared rows, the bias and the item's own rows as they were at
 * its start, the ids it inserted deleted. */
static void undo_item(train_fm_t *t, uint32_t ns, int own)
{
    fm_batch_t *b = &t->b;
    const size_t sk = t->sk;
    memcpy(b->srows, b->sundo, (size_t)ns * sk * sizeof *b->srows);
    memcpy(b->bst, b->bundo, sk * sizeof *b->bst);
    for (int r = 0; r < own; r++)
        memcpy(b->islot[r], b->irows + (size_t)r * sk, sk * sizeof *b->irows);
    for (uint32_t q = 0; q < b->nmiss; q++)
        store_delete(t->store, b->miss_ids[q]);
}

int train_fm_update_batch(train_fm_t *t, const codec_block_t *shared,
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
    fm_batch_t *b = &t->b;
    const uint32_t k = t->k, sk = t->sk, ns = shared->n;
    store_t *served = t->served;
    const train__rows_sync_t *sync = &t->sync;

    /* the bias as update() starts it: the state's row, else the served
     * row (or zeros) */
    memset(b->bst, 0, sizeof b->bst);
    bool bias_in = store_lookup(t->store, MODEL_BIAS_ID, b->bst);
    if (!bias_in && served)
        train__fm_served_or_init(t, MODEL_BIAS_ID, b->bst);
    load_shared(t, shared);
    double sq_s = 0; /* the sum of squares' first terms: the same every item */
    for (uint32_t j = 0; j < ns; j++) {
        double x = shared->values ? (double)shared->values[j] : 1.0;
        sq_s += x * x;
    }

    bool dirty = false; /* the shared rows hold steps to write */
    for (uint32_t i = 0; i < n_items; i++) {
        const codec_block_t *it = items ? &items[i] : &none;
        uint32_t nirep = 0;
        int own = point_item(t, it, &nirep);
        if (own < 0) {
            rc = own;
            goto out;
        }
        if (bias_in || served) /* as update()'s lookup of the bias's id reads it */
            memcpy(b->bfw, b->bst, sk * sizeof *b->bst);
        else
            train__fm_init_row(t, MODEL_BIAS_ID, b->bfw);
        memcpy(b->sundo, b->srows, (size_t)ns * sk * sizeof *b->srows);
        memcpy(b->bundo, b->bst, sk * sizeof *b->bst);
        for (int r = 0; r < own; r++)
            memcpy(b->irows + (size_t)r * sk, b->islot[r], sk * sizeof *b->irows);

        float pi = forward(t, shared, it, b->bst[0], sq_s);
        if (p)
            p[i] = pi;
        double g = ((double)pi - (double)labels[i]) * (double)(weights ? weights[i] : 1.0f);
        const double gs = g * t->s, gs2 = g * t->s2; /* exactly g without norm */
        double *irgv = b->rgv + (size_t)b->nsrep * k;
        repeat_grads(t, b->sp, shared->values, b->srep, b->nsrep, gs2, b->rgv);
        repeat_grads(t, b->ip, it->values, b->irep, nirep, gs2, irgv);

        float before[FM_MAX_STATE]; /* SYNC: the bias before its step */
        if (sync->fn)
            memcpy(before, b->bst, sk * sizeof *b->bst);
        step(t, b->bst, g, NULL, true);
        rc = serving_finite(t, b->bst) ? 0 : -ERANGE;
        if (rc == 0 && sync->fn)
            train__rows_note(sync, MODEL_BIAS_ID, before, b->bst);
        if (rc == 0)
            rc = step_block(t, shared->ids, b->sp, shared->values, ns, b->srep, b->nsrep, b->rgv,
                            gs, gs2);
        if (rc == 0)
            rc = step_block(t, it->ids, b->ip, it->values, it->n, b->irep, nirep, irgv, gs, gs2);
        if (rc != 0) {
            undo_item(t, ns, own);
            goto out;
        }
        dirty = true;
        if (served && (rc = write_served(t, b->islot, (uint32_t)own)) < 0)
            goto out;
        rc = store_upsert(t->store, MODEL_BIAS_ID, b->bst);
        if (rc >= 0 && served)
            rc = store_upsert_relaxed(served, MODEL_BIAS_ID, b->bst);
        if (rc < 0)
            goto out;
        bias_in = true;
    }
    rc = 0;
out:
    if (dirty) {
        int wrc = write_shared(t, shared);
        if (rc == 0)
            rc = wrc;
    }
    return rc;
}
