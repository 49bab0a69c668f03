/*
 * train_impl.h — inside the training library (opaque: use train.h).  Each
 * kind's typed handle, which its train_ops_t wraps and which the tests
 * drive directly, and what the kinds share (train.c): the option
 * checks, the state store's creation, the work space's growth rule, and
 * the per-sample work space of the store-backed kinds with its load step
 * and repeat rule, and the hash draws a new id's initial values come from.
 *
 * The typed calls keep the contract of train.h's: one writer thread;
 * predictions computed exactly as model_score() computes them for a request
 * whose shared block is the sample and whose item is empty, so an export
 * scores such requests bit for bit as the trainer predicted; update takes
 * one step on logloss x weight (the function train_ops_t's update calls),
 * writes the prediction made BEFORE its step to *p (when non-NULL), new ids
 * already initialised, and returns 0 or -ENOMEM (partially updated).
 * create returns 0, -EINVAL (a sentence in why) or -ENOMEM; export 0 or
 * -errno with *err filled (train_export's contract).
 */
#ifndef TL_MODEL_TRAIN_IMPL_H
#define TL_MODEL_TRAIN_IMPL_H

#include "row_table.h"
#include "seen_set.h"
#include "store/synthetic.h"
#include "train.h"

#include <math.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- shared by the kinds (train.c) ------------------------------------------ */

/* One option's bound: finite and > 0 (positive) or >= 0. */
typedef struct train__check {
    double value;
    bool positive;
    const char *why; /* the sentence when it fails */
} train__check_t;

/* The first failing check's sentence, or NULL. */
const char *train__check_all(const train__check_t *c, size_t n);

/* Copies bad into why (when why_len > 0); returns -EINVAL. */
int train__refuse(const char *bad, char *why, size_t why_len);

/* The trainer state store: value_floats fp32 floats per id.  0 or -errno
 * with a sentence in why. */
int train__store_create(uint32_t value_floats, uint32_t shards, uint64_t expected_keys,
                        store_t **out, char *why, size_t why_len);

/* The work-space capacity for n features: 64 doubled until it holds n
 * (from cap when non-zero).  0 when it would pass UINT32_MAX. */
uint32_t train__grow(uint32_t cap, uint32_t n);

/* *p reallocated to n elements of size bytes (contents kept up to the old
 * size): 0, or -ENOMEM with *p unchanged.  The batch work spaces' growth. */
int train__realloc_array(void **p, size_t n, size_t size);

/* The per-sample work space of a kind whose state is a store (LR, FM, DNN):
 * the sample's state rows as looked up, which of them the store had, and
 * the ids already stepped in this sample.  Grown, never shrunk. */
typedef struct train__work {
    uint32_t cap;    /* features the buffers hold (0: none yet) */
    uint32_t sk;     /* floats per state row; set before the first reserve */
    float *state;    /* cap * sk: the current sample's state rows */
    uint8_t *found;  /* cap: 1 where the store had the row */
    float *out;      /* cap: one float per feature (LR's served weights, written
                        to the live store in one batch) */
    seen_set_t seen; /* ids of the current sample already stepped */
} train__work_t;

/* Makes a new id's state row (sk floats) in row. */
typedef void (*train__init_fn)(const void *ctx, uint64_t id, float *row);

/* Room for samples of up to n features: 0, or -ENOMEM (w unchanged and
 * usable).  Allocates only when it grows. */
int train__work_reserve(train__work_t *w, uint32_t n);
void train__work_free(train__work_t *w);

/* The n ids' state rows into w->state (hits in w->found) with one batched
 * lookup; a row the store lacks is made by init(ctx, id, row). */
void train__work_load(train__work_t *w, const store_t *s, const uint64_t *ids, uint32_t n,
                      train__init_fn init, const void *ctx);

/* The repeat rule every store-backed kind follows, called once per feature
 * in sample order before its step: an id this sample named before (or any
 * id when force) has its row re-read from the store, which already holds
 * the earlier step; absent, the row is made by init (NULL: all 0). */
static inline void train__work_repeat(train__work_t *w, const store_t *s, uint64_t id,
                                      bool force, float *row, train__init_fn init,
                                      const void *ctx)
{
    if (seen_set_add(&w->seen, id) || force) {
        if (!store_lookup(s, id, row)) {
            if (init)
                init(ctx, id, row);
            else
                memset(row, 0, (size_t)w->sk * sizeof *row);
        }
    }
}

/* A new id's initial values are draws from a hash of (seed, id), so they do
 * not depend on the order samples arrive in.  seed and id go through
 * separate rounds (store_mix64(0) = 0: seed ^ id alone would start id ==
 * seed at 0). */
static inline uint64_t train__init_hash(uint64_t seed, uint64_t id)
{
    return store_mix64(store_mix64(seed ^ STORE_PHI) ^ id);
}

/* Draw i of h, uniform in [0, 1). */
static inline double train__uniform(uint64_t h, uint64_t i)
{
    return (double)(store_mix64(h + 2 * i + 1) >> 11) * 0x1.0p-53;
}

/* Draw i of (seed, key), N(0, 1) by Box-Muller. */
static inline double train__gauss(uint64_t seed, uint64_t key, uint64_t i)
{
    uint64_t h = train__init_hash(seed, key);
    uint64_t a = store_mix64(h + 2 * i + 1), b = store_mix64(h + 2 * i + 2);
    double u1 = ((double)(a >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
    double u2 = (double)(b >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

extern const train_ops_t train__lr_ops, train__fm_ops, train__ffm_ops, train__dnn_ops;

/* The kind's state behind a handle (train.c), for train_threads.c. */
void *train__impl(const train_t *t);

/* ---- training on threads (train_threads.c) -----------------------------------
 *
 * What a kind gives train_threads_epoch: its rows as a row table that
 * threads step in place (row_table.h: lock-free finds, an insert lock on a
 * miss, Hogwild floats), and per-thread workers with their own work space.
 * LR and FM keep their state in a store, which allows one writer per shard
 * and moves rows as a shard grows: on threads they step a MIRROR of the
 * store in a row table (copied in once, when the store changed since), and
 * train_threads.c writes the rows back into the store after the threads
 * join, each thread the shards it owns.  FFM's rows are its state. */
struct train__par_ops {
    /* Readies the rows: *rows (owned by the kind) and *mirror_of, the store
     * they mirror (NULL: the rows are the state).  0, -EINVAL (a sentence
     * in why) or -ENOMEM.  One thread; blocks. */
    int (*begin)(void *impl, train__row_table_t **rows, store_t **mirror_of, char *why,
                 size_t why_len);
    /* A thread's worker over impl's rows: 0 or -ENOMEM. */
    int (*worker_create)(void *impl, void **worker);
    void (*worker_destroy)(void *worker);
    /* train_ops_t's update by a worker: new ids through
     * train__row_table_upsert_mt, steps in place.  0, -ENOMEM or -ERANGE. */
    int (*update)(void *worker, const uint64_t *ids, const float *values, uint32_t n,
                  float label, float weight, float *p);
    /* After the threads joined (and the rows were written back): the
     * kind's caches made current.  NULL: nothing to do. */
    void (*end)(void *impl);
};
typedef struct train__par_ops train__par_ops_t;

extern const train__par_ops_t train__lr_par_ops, train__fm_par_ops, train__ffm_par_ops;

/* LR's and FM's begin (train__par_ops_t.begin), whose rows mirror their
 * store: refused with a sentence naming kind when the trainer is attached
 * live (its writes need one writer per shard); else *mirror made a copy of
 * store (row_floats = its value_floats) when NULL or *stale, *stale =
 * false, and *rows = *mirror, *mirror_of = store.  0, -EINVAL or -ENOMEM.
 * Blocks (one pass over the store). */
int train__par_mirror(store_t *store, bool live, const char *kind, train__row_table_t **mirror,
                      bool *stale, train__row_table_t **rows, store_t **mirror_of, char *why,
                      size_t why_len);

/* ---- LR (train_lr.c) --------------------------------------------------------- */

typedef struct train_lr train_lr_t;
int train_lr_create(const train_lr_options_t *opt, train_lr_t **out, char *why, size_t why_len);
void train_lr_destroy(train_lr_t *t);
/* n must be <= the largest n passed so far to update or reserve, else it
 * grows (NAN when it cannot). */
float train_lr_predict(train_lr_t *t, const uint64_t *ids, const float *values, uint32_t n);
int train_lr_reserve(train_lr_t *t, uint32_t n);
int train_lr_update(train_lr_t *t, const uint64_t *ids, const float *values, uint32_t n,
                    float label, float weight, float *p);
/* LR serving snapshot: value_floats 1, bias under MODEL_BIAS_ID, zero
 * weights omitted. */
int train_lr_export(const train_lr_t *t, const char *dir, const store_meta_t *meta,
                    store_error_t *err);
const store_t *train_lr_store(const train_lr_t *t);
/* Weight of one id as the trainer would serve it (0 when absent). */
float train_lr_weight(const train_lr_t *t, uint64_t id);
int train_lr_attach_live(train_lr_t *t, store_t *live, char *why, size_t why_len);
/* train_ops_t.update_batch (train_lr.c, BATCH). */
int train_lr_update_batch(train_lr_t *t, const codec_block_t *shared,
                          const codec_block_t *items, uint32_t n_items, const float *labels,
                          const float *weights, float *p);

/* ---- FM (train_fm.c) --------------------------------------------------------- */

typedef struct train_fm train_fm_t;
int train_fm_create(const train_fm_options_t *opt, train_fm_t **out, char *why, size_t why_len);
void train_fm_destroy(train_fm_t *t);
float train_fm_predict(train_fm_t *t, const uint64_t *ids, const float *values, uint32_t n);
int train_fm_reserve(train_fm_t *t, uint32_t n);
int train_fm_update(train_fm_t *t, const uint64_t *ids, const float *values, uint32_t n,
                    float label, float weight, float *p);
/* FM serving snapshot: value_floats 1 + k, rows [w | v], bias row
 * [bias | 0..0], all-zero rows omitted, param norm when on. */
int train_fm_export(const train_fm_t *t, const char *dir, const store_meta_t *meta,
                    store_error_t *err);
const store_t *train_fm_store(const train_fm_t *t);

/* ---- FFM (train_ffm.c) ------------------------------------------------------- */

typedef struct train_ffm train_ffm_t;
int train_ffm_create(const train_ffm_options_t *opt, train_ffm_t **out, char *why, size_t why_len);
void train_ffm_destroy(train_ffm_t *t);
int train_ffm_reserve(train_ffm_t *t, uint32_t n);
float train_ffm_predict(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n);
int train_ffm_update(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n,
                     float label, float weight, float *p);
/* FFM serving snapshot: value_floats 1 + F k, rows [w | v], bias row
 * [bias | 0..0], all-zero rows omitted; params fields, k, norm. */
int train_ffm_export(const train_ffm_t *t, const char *dir, const store_meta_t *meta,
                     store_error_t *err);
/* Copies id's serving row [w | v] (1 + F k floats) into out: 1, or 0 when
 * the trainer has no row for id. */
int train_ffm_weights(const train_ffm_t *t, uint64_t id, float *out);
/* For tests: the derivatives of the margin (not of the loss) at the current
 * parameters, new ids initialised as an update would (nothing is created or
 * written).  *d_bias = 1; grad gets 1 + F k doubles per feature,
 * [d/dw_j | d/dv_{j,0..F-1}], in sample order.  0 or -ENOMEM. */
int train_ffm_margin_gradient(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n,
                              double *d_bias, double *grad);

/* ---- DNN (train_dnn.c) ------------------------------------------------------- */

typedef struct train_dnn train_dnn_t;
int train_dnn_create(const train_dnn_options_t *opt, train_dnn_t **out, char *why, size_t why_len);
void train_dnn_destroy(train_dnn_t *t);
float train_dnn_predict(train_dnn_t *t, const uint64_t *ids, const float *values, uint32_t n);
int train_dnn_reserve(train_dnn_t *t, uint32_t n);
/* A feature whose id is MODEL_BIAS_ID counts with e = 0 and w = the bias
 * but is not stepped (the bias takes its own step). */
int train_dnn_update(train_dnn_t *t, const uint64_t *ids, const float *values, uint32_t n,
                     float label, float weight, float *p);
/* The gradient of the sample's logloss at the current parameters, without a
 * step (new ids are initialised as by an update, and stored): g_rows gets
 * n rows of 1 + d floats, d loss / d [w | e] of each feature occurrence
 * (w's entry is 0 without wide), *g_bias the bias's, and g_dense
 * train_dnn_dense_floats() floats laid out as train_dnn_dense() (L2 not
 * included).  0 or -ENOMEM. */
int train_dnn_gradient(train_dnn_t *t, const uint64_t *ids, const float *values, uint32_t n,
                       float label, float *p, float *g_rows, float *g_bias, float *g_dense);
/* The MLP's parameters, one array: W_0 | b_0 | W_1 | b_1 | ... (each as in
 * dnn_net_t).  Read-only; valid until the next update or destroy. */
const float *train_dnn_dense(const train_dnn_t *t);
size_t train_dnn_dense_floats(const train_dnn_t *t);
/* The trainer's network; W and b point into train_dnn_dense(). */
const dnn_net_t *train_dnn_net(const train_dnn_t *t);
/* DNN serving snapshot: value_floats 1 + d, rows [w | e] (w = 0 without
 * wide), bias row [bias | 0..0], the MLP as extras. */
int train_dnn_export(const train_dnn_t *t, const char *dir, const store_meta_t *meta,
                     store_error_t *err);
const store_t *train_dnn_store(const train_dnn_t *t);

#ifdef __cplusplus
}
#endif
#endif /* TL_MODEL_TRAIN_IMPL_H */
