/*
 * train_lr.c — LR training: FTRL-Proximal, Adagrad, SGD (train.h); the
 * table train__lr_ops.
 *
 * One sample is one step:
 *
 *   1. one batched locate of the sample's ids in the state store
 *      (store_locate_batch: the state is the trainer's alone) gives each
 *      feature's optimizer state where it lies, ids it lacks inserted
 *      first (the bias's state is cached in the trainer and written
 *      through to the store after each step);
 *   2. p = sigmoid(w_bias + sum_j w_j x_j), summed in double in feature
 *      order and with the bias added last, exactly as model_score() does;
 *   3. g = p - y; each coordinate takes its own step with g_j = g x_j, in
 *      place (an undo restores the rows if a step is not finite);
 *   4. the new weights go to the served store (LIVE below) in one
 *      store_upsert_batch(), whose prefetches let the misses of a store
 *      larger than the cache overlap.
 *
 * Samples arrive as batches (a shared block and its items) and are learned
 * by train_lr_batch.c, which looks the shared rows up once a batch; the
 * step itself (step(), train_lr_impl.h) is the one below.
 *
 * FTRL-Proximal (McMahan et al. 2013, per-coordinate), state [z | n | w]:
 *
 *   sigma = (sqrt(n + g^2) - sqrt(n)) / alpha
 *   z    += g - sigma * w
 *   n    += g^2
 *   w     = |z| <= l1 ? 0 : -(z - sign(z) l1) / ((beta + sqrt(n)) / alpha + l2)
 *
 * w is cached in the state (so predicting costs no sqrt) and is exactly the
 * float that export writes, which is what makes exports score bit for bit
 * like the trainer.  Adagrad, state [w | G]: g += l2 w; G += g^2;
 * w -= alpha g / (sqrt(G) + beta).  SGD, state [w]: w -= alpha (g + l2 w).
 * The bias takes the same step with l1 = l2 = 0.
 *
 * A sample's weight scales g (weight 1 is exact: the same arithmetic).
 *
 * LIVE (train_attach_live): each step also writes the id's new w into the
 * served store, and an id the state lacks starts from the served w with
 * zero statistics: Adagrad [w | 0], SGD [w], FTRL n = 0 and the z whose w
 * is the served one, z = -w D - sign(w) l1 with D = beta / alpha + l2 the
 * denominator at n = 0 (n = 1 instead when beta and l2 are both 0, where
 * n = 0 gives every z the weight 0).  The float w itself is kept, so the
 * served value does not move until the id's first step.
 *
 * SYNC (train_sync.h, partitioned replicas, FTRL only): a hook installed by
 * train_lr_sync_hook sees each step's (dz, dn); train_lr_sync_apply
 * adds a peer's and recomputes w from the closed form above.
 *
 * A feature id that occurs twice in one sample must see its own first
 * update, so repeats are found with a small per-sample hash set (generation
 * stamps: no clearing) and step on from the row of their previous
 * occurrence (found by a scan back: repeats are rare).
 *
 * ON THREADS (train_threads.c): workers step a mirror of the store in a
 * row table (train_impl.h), the same arithmetic on rows found in place:
 * the forward sums the rows as they are when read, and each coordinate's
 * step is computed on a copy of its row and written back only when finite.
 * Another worker may step the same row between the read and the write
 * (Hogwild): one of the two steps is then lost, never memory.  A live
 * store is refused there (its writes would need one writer per shard).
 *
 * THREAD SAFETY: one thread drives a trainer (train.h); a trainer's
 * workers run on many threads while that thread waits (train_threads.c).
 */
#include "train_lr_impl.h"
#include "model.h"
#include "sigmoid.h"
#include "train_export.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void train_lr_defaults(train_optimizer_t opt, train_lr_options_t *o)
{
    memset(o, 0, sizeof *o);
    o->optimizer = opt;
    switch (opt) {
    case TRAIN_FTRL:
        o->alpha = 0.1;
        o->beta = 1.0;
        o->l1 = 0.1;
        o->l2 = 1.0;
        break;
    case TRAIN_ADAGRAD:
        /* epsilon 1, as FM's and FFM's: with a tiny one an id's first step is alpha x sign(g)
         * whatever the size of g, so ids seen once or twice (most of a sparse file) get full
         * steps of noise; with 1 no step exceeds alpha x |g|.  Test AUC on xlearn_criteo and
         * ipinyou: .587 and .581 with 1, .563 and .519 with 1e-6 (xLearn .580, .571). */
        o->alpha = 0.05;
        o->beta = 1.0;
        o->l2 = 1e-4;
        break;
    case TRAIN_SGD:
        o->alpha = 0.05;
        o->l2 = 1e-4;
        break;
    }
}

static uint32_t k_of(train_optimizer_t o) { return o == TRAIN_FTRL ? 3 : o == TRAIN_ADAGRAD ? 2 : 1; }

__attribute__((cold)) int train_lr_create(const train_lr_options_t *opt, train_lr_t **out,
                                          char *why, size_t why_len)
{
    const train__check_t checks[] = {
        {opt->alpha, true, "learning rate (alpha) must be > 0"},
        {opt->beta, false, "beta must be >= 0"},
        {opt->l1, false, "l1 must be >= 0"},
        {opt->l2, false, "l2 must be >= 0"},
    };
    const char *bad = (unsigned)opt->optimizer > TRAIN_SGD
                          ? "unknown optimizer"
                          : train__check_all(checks, sizeof checks / sizeof *checks);
    if (bad)
        return train__refuse(bad, why, why_len);
    train_lr_t *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->opt = *opt;
    t->k = k_of(opt->optimizer);
    t->w.sk = t->k;
    int rc = train__store_create(t->k, opt->shards, opt->expected_keys, &t->store, why, why_len);
    if (rc != 0) {
        train_lr_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

void train_lr_destroy(train_lr_t *t)
{
    if (!t)
        return;
    store_destroy(t->store);
    train__work_free(&t->w);
    train__lr_batch_free(&t->b);
    train__row_table_destroy(t->rows);
    free(t);
}

const store_t *train_lr_store(const train_lr_t *t) { return t->store; }

int train_lr_reserve(train_lr_t *t, uint32_t n)
{
    return train__work_reserve(&t->w, n);
}

float train_lr_weight(const train_lr_t *t, uint64_t id)
{
    float st[3] = {0, 0, 0};
    store_lookup(t->store, id, st);
    return weight_of(t, st);
}

/* The state row of an id whose served weight is w and which the state
 * lacks (LIVE above); l1 and l2 are 0 for the bias. */
static void state_from_weight(const train_lr_t *t, float w, double l1, double l2, float *row)
{
    switch (t->opt.optimizer) {
    case TRAIN_FTRL: {
        double n0 = t->opt.beta == 0 && l2 == 0 ? 1 : 0;
        double d = (t->opt.beta + sqrt(n0)) / t->opt.alpha + l2;
        row[0] = w == 0 ? 0.0f : (float)(-(double)w * d - copysign(l1, (double)w));
        row[1] = (float)n0;
        row[2] = w;
        break;
    }
    case TRAIN_ADAGRAD:
        row[0] = w;
        row[1] = 0;
        break;
    case TRAIN_SGD:
        row[0] = w;
        break;
    }
}

/* The state row of an id the state lacks whose served weight is w. */
void train__lr_init_from_weight(const train_lr_t *t, uint64_t id, float w, float *row)
{
    bool bias = id == MODEL_BIAS_ID;
    state_from_weight(t, w, bias ? 0 : t->opt.l1, bias ? 0 : t->opt.l2, row);
}

/* train__init_fn for an id the state lacks: from the served store. */
void train__lr_init_from_live(const void *ctx, uint64_t id, float *row)
{
    const train_lr_t *t = ctx;
    float w = 0;
    store_lookup(t->live, id, &w);
    train__lr_init_from_weight(t, id, w, row);
}

/* Looks up bias + features into bst / t->w.state and returns the margin's
 * probability, summed as model_score() sums. */
static float forward(train_lr_t *t, const uint64_t *ids, const float *values, uint32_t n,
                     float *bst)
{
    memcpy(bst, t->bias, sizeof t->bias);
    if (t->live)
        train__work_load(&t->w, t->store, ids, n, train__lr_init_from_live, t);
    else
        store_lookup_batch(t->store, ids, n, t->w.state, NULL);
    const uint32_t k = t->k;
    const float *st = t->w.state + (k == 3 ? 2 : 0);
    double sum = 0;
    if (values) {
        for (uint32_t j = 0; j < n; j++)
            sum += (double)st[(size_t)j * k] * values[j];
    } else {
        for (uint32_t j = 0; j < n; j++)
            sum += st[(size_t)j * k];
    }
    return sigmoid((double)weight_of(t, bst) + sum);
}

float train_lr_predict(train_lr_t *t, const uint64_t *ids, const float *values, uint32_t n)
{
    float bst[3];
    if ((n > t->w.cap || !t->w.state) && train_lr_reserve(t, n) != 0)
        return NAN;
    return forward(t, ids, values, n, bst);
}

__attribute__((cold)) int train_lr_export(const train_lr_t *t, const char *dir,
                                          const store_meta_t *meta, store_error_t *err)
{
    /* the served weight: w, after z and n with FTRL */
    return train__export_rows(t->store, t->k == 3 ? 2 : 0, 1, STORE_MODEL_LR, NULL, dir, meta,
                              err);
}

__attribute__((cold)) int train_lr_attach_live(train_lr_t *t, store_t *live, char *why,
                                               size_t why_len)
{
    if (live && (store_value_floats(live) != 1 || store_dtype(live) != STORE_DTYPE_F32))
        return train__refuse("the served store of an LR model has one fp32 float per key",
                             why, why_len);
    t->live = live;
    t->rows_stale = true;
    if (!live)
        return 0;
    /* the bias's cached state: from the served bias unless trained already */
    float st[3];
    if (!store_lookup(t->store, MODEL_BIAS_ID, st)) {
        train__lr_init_from_live(t, MODEL_BIAS_ID, st);
        memcpy(t->bias, st, sizeof st);
    }
    return 0;
}

/* ---- partitioned replicas (train_sync.h) ------------------------------------- */

float train_lr_ftrl_weight(double z, double n, double alpha, double beta, double l1, double l2)
{
    if (fabs(z) <= l1)
        return 0.0f;
    return (float)(-(z - copysign(l1, z)) / ((beta + sqrt(n)) / alpha + l2));
}

/* The LR-FTRL trainer inside t, or NULL. */
static train_lr_t *ftrl_of(train_t *t)
{
    if (!t || train_ops(t) != &train__lr_ops)
        return NULL;
    train_lr_t *lr = train__impl(t);
    return lr->opt.optimizer == TRAIN_FTRL ? lr : NULL;
}

int train_lr_sync_hook(train_t *t, train_sync_fn fn, void *ctx)
{
    train_lr_t *lr = ftrl_of(t);
    if (!lr)
        return -ENOTSUP;
    lr->sync_fn = fn;
    lr->sync_ctx = ctx;
    return 0;
}

int train_lr_sync_apply(train_t *t, uint64_t id, float dz, float dn)
{
    train_lr_t *lr = ftrl_of(t);
    if (!lr)
        return -ENOTSUP;
    float st[3];
    if (!store_lookup(lr->store, id, st)) {
        if (lr->live) {
            train__lr_init_from_live(lr, id, st);
        } else {
            st[0] = st[1] = st[2] = 0;
        }
    }
    bool bias = id == MODEL_BIAS_ID;
    double z = (double)st[0] + dz, n = (double)st[1] + dn;
    if (!isfinite(z) || !isfinite(n) || n < 0 || !isfinite((float)z) || !isfinite((float)n))
        return -ERANGE;
    st[0] = (float)z;
    st[1] = (float)n;
    st[2] = train_lr_ftrl_weight(st[0], st[1], lr->opt.alpha, lr->opt.beta, bias ? 0 : lr->opt.l1,
                                 bias ? 0 : lr->opt.l2);
    if (!isfinite(st[2]))
        return -ERANGE;
    lr->rows_stale = true; /* the mirror (ON THREADS) no longer holds the state */
    int rc = store_upsert(lr->store, id, st);
    if (rc >= 0 && lr->live)
        rc = store_upsert(lr->live, id, &st[2]);
    if (rc < 0)
        return rc;
    if (bias)
        memcpy(lr->bias, st, sizeof st);
    return 0;
}

/* ---- on threads (train_threads.c) -------------------------------------------- */

struct lr_worker {
    const train_lr_t *t;
    train__row_table_t *rows; /* t->rows, shared with the other workers */
    float **row;              /* cap: the sample's rows in the table */
    uint32_t cap;
};

static int par_begin(void *impl, train__row_table_t **rows, store_t **mirror_of, char *why,
                     size_t why_len)
{
    train_lr_t *t = impl;
    return train__par_mirror(t->store, t->live != NULL, "LR", &t->rows, &t->rows_stale, rows,
                             mirror_of, why, why_len);
}

static int par_worker_create(void *impl, void **out)
{
    struct lr_worker *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    w->t = impl;
    w->rows = w->t->rows;
    *out = w;
    return 0;
}

static void par_worker_destroy(void *wp)
{
    struct lr_worker *w = wp;
    if (!w)
        return;
    free(w->row);
    free(w);
}

/* train_lr_update on the worker's rows (ON THREADS). */
static int par_update(void *wp, const uint64_t *ids, const float *values, uint32_t n,
                      float label, float weight, float *p_out)
{
    struct lr_worker *w = wp;
    const train_lr_t *t = w->t;
    if (n > w->cap) {
        uint32_t cap = train__grow(w->cap, n);
        float **row = cap ? realloc(w->row, (size_t)cap * sizeof *row) : NULL;
        if (!row)
            return -ENOMEM;
        w->row = row;
        w->cap = cap;
    }
    float *b = train__row_table_upsert_mt(w->rows, MODEL_BIAS_ID, NULL, NULL);
    if (!b)
        return -ENOMEM;
    for (uint32_t j = 0; j < n; j++)
        if (!(w->row[j] = train__row_table_upsert_mt(w->rows, ids[j], NULL, NULL)))
            return -ENOMEM;
    const uint32_t k = t->k, wi = k == 3 ? 2 : 0;
    double sum = 0;
    if (values) {
        for (uint32_t j = 0; j < n; j++)
            sum += (double)w->row[j][wi] * values[j];
    } else {
        for (uint32_t j = 0; j < n; j++)
            sum += w->row[j][wi];
    }
    float p = sigmoid((double)b[wi] + sum);
    if (p_out)
        *p_out = p;
    double g = ((double)p - (double)label) * (double)weight;

    /* rows are copied float by float, not by memcpy: the Hogwild races
     * stay in this function, where tests/model/tsan_hogwild.supp names them */
    float st[3] = {0, 0, 0};
    for (uint32_t c = 0; c < k; c++)
        st[c] = b[c];
    step(t, st, g, 0, 0);
    if (!row_finite(st, k))
        return -ERANGE;
    for (uint32_t c = 0; c < k; c++)
        b[c] = st[c];
    const double l1 = t->opt.l1, l2 = t->opt.l2;
    for (uint32_t j = 0; j < n; j++) {
        /* the row as it is now: an id named twice already holds its first step */
        float *row = w->row[j];
        for (uint32_t c = 0; c < k; c++)
            st[c] = row[c];
        step(t, st, values ? g * values[j] : g, l1, l2);
        if (!row_finite(st, k))
            return -ERANGE;
        for (uint32_t c = 0; c < k; c++)
            row[c] = st[c];
    }
    return 0;
}

/* The bias's cached state, from the rows written back. */
static void par_end(void *impl)
{
    train_lr_t *t = impl;
    float st[3] = {0, 0, 0};
    store_lookup(t->store, MODEL_BIAS_ID, st);
    memcpy(t->bias, st, sizeof st);
}

const train__par_ops_t train__lr_par_ops = {
    .begin = par_begin, .worker_create = par_worker_create,
    .worker_destroy = par_worker_destroy, .update = par_update, .end = par_end,
};

/* ---- train_ops_t -------------------------------------------------------------- */

static int ops_create(const train_options_t *o, void **impl, char *why, size_t why_len)
{
    return train_lr_create(&o->lr, (train_lr_t **)impl, why, why_len);
}
static void ops_destroy(void *impl) { train_lr_destroy(impl); }
static int ops_reserve(void *impl, uint32_t n) { return train_lr_reserve(impl, n); }
static float ops_predict(void *impl, const uint64_t *ids, const float *values, uint32_t n)
{
    return train_lr_predict(impl, ids, values, n);
}
static int ops_update(void *impl, const uint64_t *ids, const float *values, uint32_t n,
                      float label, float weight, float *p)
{
    return train_lr_update(impl, ids, values, n, label, weight, p);
}
static int ops_export(const void *impl, const char *dir, const store_meta_t *meta,
                      store_error_t *err)
{
    return train_lr_export(impl, dir, meta, err);
}
static const store_t *ops_store(const void *impl) { return train_lr_store(impl); }
static void ops_describe(const void *impl, char *buf, size_t len)
{
    const train_lr_options_t *o = &((const train_lr_t *)impl)->opt;
    snprintf(buf, len, "lr/%s alpha=%g beta=%g l1=%g l2=%g", train_optimizer_name(o->optimizer),
             o->alpha, o->beta, o->l1, o->l2);
}

static int ops_attach_live(void *impl, store_t *live, const store_extras_t *x, char *why,
                           size_t why_len)
{
    (void)x; /* the store holds the whole served model */
    return train_lr_attach_live(impl, live, why, why_len);
}
static int ops_update_batch(void *impl, const codec_block_t *shared, const codec_block_t *items,
                            uint32_t n_items, const float *labels, const float *weights, float *p)
{
    return train_lr_update_batch(impl, shared, items, n_items, labels, weights, p);
}

const train_ops_t train__lr_ops = {
    .kind = STORE_MODEL_LR, .name = "lr", .create = ops_create, .destroy = ops_destroy,
    .reserve = ops_reserve, .predict = ops_predict, .update = ops_update,
    .export_snapshot = ops_export, .store = ops_store, .describe = ops_describe,
    .attach_live = ops_attach_live, .update_batch = ops_update_batch,
    .par = &train__lr_par_ops,
};
