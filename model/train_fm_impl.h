/*
 * train_fm_impl.h — FM's trainer state shared by its two files: train_fm.c
 * (options, predict, update of one sample, export, live, sync, threads) and
 * train_fm_batch.c (train_fm_update_batch: a frame's shared block and its
 * items, the update train_update runs).  Both step rows with the one step()
 * below, so a batch and update() item by item make the same floats.
 * Internal to model/.
 */
#ifndef TL_MODEL_TRAIN_FM_IMPL_H
#define TL_MODEL_TRAIN_FM_IMPL_H

#include "model.h"
#include "id_index.h"
#include "train_impl.h"
#include "train_sync_impl.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* The widest state row: FTRL's 4 + 2k floats at k = MODEL_FM_MAX_K. */
#define FM_MAX_STATE (4 + 2 * MODEL_FM_MAX_K)


/* A position that steps a row an earlier position of its sample stepped
 * (a repeated id, an item id of the shared block, the bias's id): its
 * gradient is taken at the forward values before any step of the sample
 * (train_fm_batch.c). */
typedef struct fm_rep {
    uint32_t pos;  /* its position in its block */
    uint32_t first; /* item blocks: the position of the id's first occurrence */
    float *target; /* the row it steps */
} fm_rep_t;

/* train_fm_update_batch's work space: the shared block's rows and row
 * pointers (s*), the current item's (i*); grown, never shrunk. */
typedef struct fm_batch {
    uint32_t cap_s, cap_i;
    float *srows;      /* cap_s * sk: the shared rows as looked up, then stepped */
    float *sundo;      /* cap_s * sk: srows at the current item's start (its undo) */
    float **sp;        /* cap_s: the row position j's forward reads (first occurrence's) */
    uint8_t *sfound;   /* cap_s */
    fm_rep_t *srep;    /* cap_s: the shared block's repeats, in order */
    float *irows;      /* cap_i * sk: new ids' rows, then the item's own rows (its undo) */
    float **ip;        /* cap_i: as sp, for the item */
    float **islot;     /* cap_i: the item's own rows in the state (store_locate_batch) */
    uint32_t *iown;    /* cap_i: their positions in the item */
    uint64_t *ids_out; /* max(cap_s, cap_i): ids of rows located or written */
    float *out;        /* max(cap_s, cap_i) * (1 + k): their serving rows, for the served store */
    uint8_t *written;  /* max(cap_s, cap_i): which of them the served store held */
    uint64_t *miss_ids; /* cap_i: own ids the state lacked (inserted for this item) */
    fm_rep_t *irep;    /* cap_i: the item's repeats, in order */
    double *rgv;       /* (cap_s + cap_i) * k: the repeats' v gradients */
    id_index_t sidx, iidx; /* the shared block's ids, the item's own ids */
    uint32_t nsrep;    /* srep's entries */
    uint32_t nmiss;    /* miss_ids' entries */
    float bst[FM_MAX_STATE];   /* the bias's state row, stepped by every item */
    float bfw[FM_MAX_STATE];   /* the bias's row as the item's forward reads it */
    float bundo[FM_MAX_STATE]; /* bst at the item's start */
} fm_batch_t;

struct train_fm {
    train_fm_options_t opt;
    store_t *store;     /* owned: state rows, sk floats per id */
    uint32_t k;         /* factors */
    uint32_t sk;        /* floats per state row */
    train__work_t w;    /* the current sample's state rows (sk floats each) */
    double S[MODEL_FM_MAX_K]; /* per-factor sums of the last forward */
    double Q[MODEL_FM_MAX_K];
    double s, s2;             /* the last forward's scale s and s^2 (1 without norm) */
    train__row_table_t *rows; /* owned, NULL until trained on threads: the
                                 store's mirror that workers step */
    bool rows_stale;          /* the store changed since rows was copied from it */
    store_t *served;          /* not owned, NULL = none: the served store written
                                 through (LIVE) */
    train__rows_sync_t sync;  /* SYNC: the layout, and the hook (NULL = none) */
    fm_batch_t b;             /* train_fm_update_batch's work space */
};

/* Adagrad step of one coordinate c with accumulator G. */
static inline void adagrad(float *c, float *G, double g, double alpha, double eps)
{
    double g2 = (double)*G + g * g;
    *G = (float)g2;
    *c = (float)((double)*c - alpha * g / (sqrt(g2) + eps));
}

/* Adagrad steps of the k factors v[f] with accumulators G[f] for
 * gradients gv[f] + l2v v[f]: adagrad() per factor, written over two
 * arrays that do not overlap so that the compiler may run the factors side
 * by side (per-lane operations: the same floats). */
static inline void adagrad_v(float *restrict v, float *restrict G, const double *restrict gv,
                             double l2v, uint32_t k, double alpha, double eps)
{
    for (uint32_t f = 0; f < k; f++) {
        double g = gv[f] + l2v * v[f];
        double g2 = (double)G[f] + g * g;
        G[f] = (float)g2;
        v[f] = (float)((double)v[f] - alpha * g / (sqrt(g2) + eps));
    }
}

/* FTRL-Proximal step of w (row[0]) with z, n at row[zi], row[zi + 1]. */
static inline void ftrl(const train_fm_t *t, float *row, uint32_t zi, double g, double l1,
                        double l2)
{
    const double alpha = t->opt.alpha;
    double z = row[zi], nn = row[zi + 1], w = row[0];
    double n2 = nn + g * g;
    double sq2 = sqrt(n2);
    z += g - (sq2 - sqrt(nn)) / alpha * w;
    double nw = 0;
    if (fabs(z) > l1)
        nw = -(z - copysign(l1, z)) / ((t->opt.beta + sq2) / alpha + l2);
    row[zi] = (float)z;
    row[zi + 1] = (float)n2;
    row[0] = (float)nw;
}

/* Applies the step for gradient gw (w, L2 not yet added) and gv[f] (v, L2
 * not yet added) to row; is_bias: no regularisation and no v.  A feature's
 * row has its occurrence count (this one included) in its last float. */
static inline void step(const train_fm_t *t, float *row, double gw, const double *gv,
                        bool is_bias)
{
    const uint32_t k = t->k;
    const double alpha = t->opt.alpha;
    const double l2 = is_bias ? 0 : t->opt.l2;
    const double l2v = is_bias ? 0 : t->opt.l2_v + t->opt.l2_v_freq / (double)row[t->sk - 1];
    switch (t->opt.optimizer) {
    case TRAIN_SGD:
        row[0] = (float)((double)row[0] - alpha * (gw + l2 * row[0]));
        if (!is_bias)
            for (uint32_t f = 0; f < k; f++)
                row[1 + f] = (float)((double)row[1 + f] - alpha * (gv[f] + l2v * row[1 + f]));
        break;
    case TRAIN_ADAGRAD:
        adagrad(&row[0], &row[1 + k], gw + l2 * row[0], alpha, t->opt.beta);
        if (!is_bias)
            adagrad_v(&row[1], &row[2 + k], gv, l2v, k, alpha, t->opt.beta);
        break;
    case TRAIN_FTRL:
        ftrl(t, row, 1 + k, gw, is_bias ? 0 : t->opt.l1, l2);
        if (!is_bias)
            adagrad_v(&row[1], &row[3 + k], gv, l2v, k, alpha, 1e-6);
        break;
    }
}

/* 1 when the serving prefix [w | v] of row is finite: a step whose serving
 * row is not (feature values near FLT_MAX) is never written, to the state
 * or the served store. */
static inline bool serving_finite(const train_fm_t *t, const float *row)
{
    for (uint32_t c = 0; c <= t->k; c++)
        if (!isfinite(row[c]))
            return false;
    return true;
}

/* train__init_fn of a new id's state row (ctx is the trainer): w 0, v from
 * the hash, sums and count 0. */
void train__fm_init_row(const void *ctx, uint64_t id, float *row);

/* train__init_fn of an update with a served store: the state row made from
 * the served row (train_fm.c: LIVE), or a new id's row when the served
 * store lacks it too (the bias's: all 0). */
void train__fm_served_or_init(const void *ctx, uint64_t id, float *row);

/* train_ops_t.update_batch (train_fm_batch.c); train.h's train_update
 * contract. */
int train_fm_update_batch(train_fm_t *t, const codec_block_t *shared,
                          const codec_block_t *items, uint32_t n_items, const float *labels,
                          const float *weights, float *p);

/* Frees a batch work space (train_fm_batch.c). */
void train__fm_batch_free(fm_batch_t *b);

#endif /* TL_MODEL_TRAIN_FM_IMPL_H */
