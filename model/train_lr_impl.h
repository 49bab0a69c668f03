/*
 * train_lr_impl.h — LR's trainer state shared by its two files: train_lr.c
 * (options, the optimizers' step, predict, export, live, sync, threads) and
 * train_lr_batch.c (train_lr_update_batch, the update every sample goes
 * through).  Internal to model/.
 */
#ifndef TL_MODEL_TRAIN_LR_IMPL_H
#define TL_MODEL_TRAIN_LR_IMPL_H

#include "id_index.h"
#include "train_impl.h"
#include "train_sync.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* One batch's work space (train_lr_batch.c): rows and their positions' row
 * pointers for the shared block (s*) and the current item (i*); grown, never
 * shrunk. */
typedef struct lr_batch {
    uint32_t cap_s, cap_i;
    float *srows;          /* cap_s * k floats: the shared rows as looked up, then stepped */
    float *irows;          /* cap_i * k floats: an item's own rows before its step (the undo) */
    float **sp, **ip;      /* cap: the row position j steps (its first occurrence's) */
    float **islot;         /* cap_i: an item's own rows in the state (store_locate_batch) */
    uint32_t *iown;        /* cap_i: their positions in the item */
    uint8_t *sfound;
    uint64_t *ids_out;     /* max(cap_s, cap_i): the ids of the rows written */
    float *out;            /* max(cap_s, cap_i): their served weights */
    uint64_t *miss_ids;    /* max(cap_s, cap_i): ids the state lacks, looked up in the */
    float *miss_w;         /*   served store in one batch (their misses overlapped), */
    uint32_t *miss_at;     /*   their weights and their positions in the block */
    id_index_t sidx;
} lr_batch_t;

struct train_lr {
    train_lr_options_t opt;
    store_t *store;     /* owned: optimizer state, K floats per id */
    uint32_t k;         /* floats per id */
    train__work_t w;    /* the current sample's state rows (k floats each) */
    float bias[3];      /* the bias's state, as last written to the store: the
                           store copy is never read back on the hot path */
    store_t *live;      /* not owned, NULL = none: the served store written
                           through (train_attach_live) */
    lr_batch_t b;       /* train_lr_update_batch's work space */
    train_sync_fn sync_fn; /* NULL = none: each step's (dz, dn) out (train_lr.c: SYNC) */
    void *sync_ctx;
    train__row_table_t *rows; /* owned, NULL until trained on threads: the
                                 store's mirror that workers step */
    bool rows_stale;    /* the store changed since rows was copied from it */
};

/* The served weight of a state vector. */
static inline float weight_of(const train_lr_t *t, const float *st)
{
    return t->k == 3 ? st[2] : st[0];
}

/* One coordinate's step; st is its state, updated in place. */
static inline void step(const train_lr_t *t, float *st, double g, double l1, double l2)
{
    const double alpha = t->opt.alpha;
    switch (t->opt.optimizer) {
    case TRAIN_FTRL: {
        double z = st[0], nn = st[1], w = st[2];
        double n2 = nn + g * g;
        double sq2 = sqrt(n2);
        double sigma = (sq2 - sqrt(nn)) / alpha;
        z += g - sigma * w;
        double az = fabs(z);
        double nw = 0;
        if (az > l1)
            nw = -(z - copysign(l1, z)) / ((t->opt.beta + sq2) / alpha + l2);
        st[0] = (float)z;
        st[1] = (float)n2;
        st[2] = (float)nw;
        break;
    }
    case TRAIN_ADAGRAD: {
        double w = st[0];
        g += l2 * w;
        double G = (double)st[1] + g * g;
        st[0] = (float)(w - alpha * g / (sqrt(G) + t->opt.beta));
        st[1] = (float)G;
        break;
    }
    case TRAIN_SGD:
        st[0] = (float)(st[0] - alpha * (g + l2 * st[0]));
        break;
    }
}

/* Whether a state row is finite: a step that is not (feature values near
 * FLT_MAX make g x and n overflow) is never written, so neither the state
 * nor the served store ever holds a non-finite value. */
static inline bool row_finite(const float *st, uint32_t k)
{
    for (uint32_t i = 0; i < k; i++)
        if (!isfinite(st[i]))
            return false;
    return true;
}

/* train__init_fn for an id the state lacks (train_lr.c: LIVE). */
void train__lr_init_from_live(const void *ctx, uint64_t id, float *row);

/* The state row of an id the state lacks whose served weight is w. */
void train__lr_init_from_weight(const train_lr_t *t, uint64_t id, float w, float *row);

/* Frees a batch work space (train_lr_batch.c). */
void train__lr_batch_free(lr_batch_t *b);

#endif /* TL_MODEL_TRAIN_LR_IMPL_H */
