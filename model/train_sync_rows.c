/*
 * train_sync_rows.c — partitioned replicas for the row trainers (FM, FFM,
 * the DNN's embeddings and wide part): the public calls of train_sync.h's
 * ROWS, and the two helpers every row trainer shares (train_sync_impl.h).
 *
 * Why (dx, dG) and not the gradients: a replica's step already turned its
 * gradient into a move of the served floats with its own accumulators;
 * sending that move and the accumulator's growth lets a receiver add both
 * with no optimizer arithmetic of its own (no per-peer G to keep, no order
 * to respect), and dG >= 0 is what keeps every replica's G >= 0, which the
 * 1-bit encoding then preserves by quantizing the dG half one-sided
 * (update_codec.h: UPDATE_F_NONNEG_HALF).  For FM's w under FTRL the
 * additive pair is (z, n) as in LR: w is a function of them, not a sum.
 *
 * Layout a trainer describes (train__rows_sync_t), per coordinate i < R:
 *
 *   x_i at state column i (the serving prefix)
 *   G_i at column g0 + i           (Adagrad; none for SGD)
 *   FTRL w: z, n at columns z, z+1, and x_0 = w(z, n)
 *
 * d is built in double from the floats before and after a step, so the
 * float sent is the nearest to what this replica's row moved by; a
 * receiver adding it lands on the sender's float whenever the move is
 * exact in float (Sterbenz: a step under half the value), else one
 * rounding away.
 *
 * THREAD SAFETY: the trainer's one writer (train.h); nothing here locks.
 */
#include "train_sync_impl.h"

#include "train_impl.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>

/* The largest d: two halves of a served row. */
#define D_MAX (2 * STORE_MAX_VALUE_FLOATS)

void train__rows_note(const train__rows_sync_t *s, uint64_t id, const float *before, const float *after)
{
    float d[D_MAX];
    const uint32_t r = s->r;
    for (uint32_t i = 0; i < r; i++) {
        d[i] = (float)((double)after[i] - (double)before[i]);
        if (s->g0 == TRAIN__ROWS_NO_G) {
            d[r + i] = 0.0f;
            continue;
        }
        uint32_t gc = s->g0 + i;
        double dg = (double)after[gc] - (double)before[gc];
        d[r + i] = dg > 0 ? (float)dg : 0.0f; /* a sum of squares: never below 0 */
    }
    if (s->z) {
        d[0] = (float)((double)after[s->z] - (double)before[s->z]);
        double dn = (double)after[s->z + 1] - (double)before[s->z + 1];
        d[r] = dn > 0 ? (float)dn : 0.0f;
    }
    s->fn(s->ctx, id, d, 2 * r);
}

/* G + dG for an accumulator: the new value, or -1 when it is not finite or
 * below 0. */
static double grow(float G, float dg)
{
    double v = (double)G + dg;
    return isfinite(v) && v >= 0 && isfinite((float)v) ? v : -1;
}

int train__rows_add(const train__rows_sync_t *s, uint64_t id, float *row, const float *d)
{
    const uint32_t r = s->r;
    /* 1. check everything: a refused d writes nothing */
    for (uint32_t i = 0; i < 2 * r; i++)
        if (!isfinite(d[i]))
            return -ERANGE;
    for (uint32_t i = 0; i < r; i++) {
        if (s->z && i == 0)
            continue;
        double x = (double)row[i] + d[i];
        if (!isfinite(x) || !isfinite((float)x))
            return -ERANGE;
        if (s->g0 != TRAIN__ROWS_NO_G && grow(row[s->g0 + i], d[r + i]) < 0)
            return -ERANGE;
    }
    float w = 0;
    double z = 0, n = 0;
    if (s->z) {
        bool bias = id == MODEL_BIAS_ID;
        z = (double)row[s->z] + d[0];
        n = grow(row[s->z + 1], d[r]);
        if (!isfinite(z) || !isfinite((float)z) || n < 0)
            return -ERANGE;
        w = train_lr_ftrl_weight((float)z, (float)n, s->alpha, s->beta, bias ? 0 : s->l1, bias ? 0 : s->l2);
        if (!isfinite(w))
            return -ERANGE;
    }
    /* 2. write */
    for (uint32_t i = s->z ? 1 : 0; i < r; i++) {
        row[i] = (float)((double)row[i] + d[i]);
        if (s->g0 != TRAIN__ROWS_NO_G)
            row[s->g0 + i] = (float)grow(row[s->g0 + i], d[r + i]);
    }
    if (s->z) {
        row[s->z] = (float)z;
        row[s->z + 1] = (float)n;
        row[0] = w;
    }
    return 0;
}

/* The descriptor of t's kind, NULL when it has none or cannot sync. */
static train__rows_sync_t *rows_of(const train_t *t)
{
    const train_ops_t *o = t ? train_ops(t) : NULL;
    return o && o->rows ? o->rows->sync(train__impl(t)) : NULL;
}

uint32_t train_rows_sync_width(const train_t *t)
{
    const train__rows_sync_t *s = rows_of(t);
    return s ? s->r : 0;
}

int train_rows_sync_hook(train_t *t, train_rows_sync_fn fn, void *ctx)
{
    train__rows_sync_t *s = rows_of(t);
    if (!s)
        return -ENOTSUP;
    s->fn = fn;
    s->ctx = fn ? ctx : NULL;
    return 0;
}

int train_rows_sync_apply(train_t *t, uint64_t id, const float *d)
{
    if (!rows_of(t))
        return -ENOTSUP;
    return train_ops(t)->rows->apply(train__impl(t), id, d);
}
