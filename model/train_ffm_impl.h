/*
 * train_ffm_impl.h — the FFM trainer's state, shared by train_ffm.c (the
 * model and its step) and train_ffm_ops.c (the ops table, threads, the
 * frame's update, row sync).  Library-private: nothing outside model/
 * includes it.
 */
#ifndef TL_MODEL_TRAIN_FFM_IMPL_H
#define TL_MODEL_TRAIN_FFM_IMPL_H

#include "train_impl.h"
#include "train_sync_impl.h"

#include <stdbool.h>
#include <stdint.h>

struct train_ffm {
    train_ffm_options_t opt;
    train__row_table_t *table; /* owned: state rows, sk floats per id, stepped in place */
    uint32_t F, k;      /* fields, factors */
    uint32_t K;         /* serving floats per id: 1 + F k */
    uint32_t sk;        /* state floats per id: K (SGD), 2K (Adagrad), 2K + 1 (FTRL) */
    uint32_t gv0;       /* the state column of v's first Adagrad sum: K + 1 (FTRL: K + 2) */
    uint32_t cap;       /* features the work space holds */
    float **live;       /* cap: each feature's state row in the table (or zero) */
    float *selfv;       /* cap * k: each feature's v block of its own field, as forward saw it */
    float *scratch;     /* cap * sk: new ids' rows when nothing may be created */
    float *zero;        /* K: the row of a feature that has none */
    double *work;       /* model_ffm_work_doubles(F, k); [0, F F k) = B after a forward */
    float *gv;          /* F k: one feature's v gradient */
    float *mask;        /* F k: 1 where the feature's v has a data gradient, else 0 */
    uint32_t *cnt;      /* F: features with x != 0 per field in the sample */
    bool worker;        /* a worker's copy (ON THREADS): table and zero not owned */
    store_t *served;    /* not owned, NULL = none: the served store written through (LIVE) */
    train__rows_sync_t sync; /* SYNC: the layout, and the hook (NULL = none) */
    uint64_t *jids;     /* jcap: a frame's sample, shared ++ item (BATCH) */
    float *jvals;       /* jcap */
    uint32_t jcap;
    uint32_t defer_n;   /* BATCH: positions below it are shared: served at the frame's end */
    uint32_t defer_done; /* BATCH: the shared positions stepped so far are below it */
};

/* A new row of id (sk floats): from the served store's row when attached
 * and it has one (LIVE), else w = 0 and v from a hash of (seed, id,
 * coordinate), optimizer sums 0 (all 0 for the bias). */
void train__ffm_new_row(const train_ffm_t *t, uint64_t id, float *row);

/* LIVE: row's serving prefix (K floats) into the served store when
 * attached (only checked when not write).  0, -ERANGE when it is not
 * finite (nothing written), or store_upsert_relaxed's -errno. */
int train__ffm_write_served(const train_ffm_t *t, uint64_t id, const float *row, bool write);

/* train_attach_live (LIVE): live (fp32, 1 + F k floats a key) written
 * through from now on; NULL detaches.  0, or -EINVAL with a sentence when
 * live's rows are not this trainer's serving rows. */
int train__ffm_attach_live(train_ffm_t *t, store_t *live, char *why, size_t why_len);

#endif
