/*
 * train_lr.c — LR training: FTRL-Proximal, Adagrad, SGD (train.h); the
 * table train__lr_ops.
 *
 * One sample is one step:
 *
 *   1. one batched store lookup of the sample's ids gives each feature's
 *      optimizer state (the bias's state is cached in the trainer and
 *      written through to the store after each step);
 *   2. p = sigmoid(w_bias + sum_j w_j x_j), summed in double in feature
 *      order and with the bias added last, exactly as model_score() does;
 *   3. g = p - y; each coordinate takes its own step with g_j = g x_j, and
 *      its new state is written back with store_upsert().
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
 * A feature id that occurs twice in one sample must see its own first
 * update, so repeats are found with a small per-sample hash set (generation
 * stamps: no clearing) and re-read from the store before their step.
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
#include "train_impl.h"
#include "model.h"
#include "sigmoid.h"
#include "train_export.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct train_lr {
    train_lr_options_t opt;
    store_t *store;     /* owned: optimizer state, K floats per id */
    uint32_t k;         /* floats per id */
    train__work_t w;    /* the current sample's state rows (k floats each) */
    float bias[3];      /* the bias's state, as last written to the store: the
                           store copy is never read back on the hot path */
    store_t *live;      /* not owned, NULL = none: the served store written
                           through (train_attach_live) */
    train__row_table_t *rows; /* owned, NULL until trained on threads: the
                                 store's mirror that workers step */
    bool rows_stale;    /* the store changed since rows was copied from it */
};

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
        o->alpha = 0.05;
        o->beta = 1e-6;
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
    train__row_table_destroy(t->rows);
    free(t);
}

const store_t *train_lr_store(const train_lr_t *t) { return t->store; }

int train_lr_reserve(train_lr_t *t, uint32_t n)
{
    return train__work_reserve(&t->w, n);
}

/* The served weight of a state vector. */
static inline float weight_of(const train_lr_t *t, const float *st)
{
    return t->k == 3 ? st[2] : st[0];
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

/* train__init_fn for an id the state lacks: from the served store. */
static void init_from_live(const void *ctx, uint64_t id, float *row)
{
    const train_lr_t *t = ctx;
    float w = 0;
    store_lookup(t->live, id, &w);
    bool bias = id == MODEL_BIAS_ID;
    state_from_weight(t, w, bias ? 0 : t->opt.l1, bias ? 0 : t->opt.l2, row);
}

/* Looks up bias + features into bst / t->w.state and returns the margin's
 * probability, summed as model_score() sums. */
static float forward(train_lr_t *t, const uint64_t *ids, const float *values, uint32_t n,
                     float *bst)
{
    memcpy(bst, t->bias, sizeof t->bias);
    if (t->live)
        train__work_load(&t->w, t->store, ids, n, init_from_live, t);
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

/* One step on logloss x weight. */
int train_lr_update(train_lr_t *t, const uint64_t *ids, const float *values, uint32_t n,
                    float label, float weight, float *p_out)
{
    if (n > t->w.cap || !t->w.state) {
        int rc = train_lr_reserve(t, n);
        if (rc != 0)
            return rc;
    }
    t->rows_stale = true; /* the mirror (ON THREADS) no longer holds the state */
    float bst[3];
    if (t->live) /* its buckets arrive while the state is looked up */
        store_prefetch_write(t->live, ids, n);
    float p = forward(t, ids, values, n, bst);
    if (p_out)
        *p_out = p;
    double g = ((double)p - (double)label) * (double)weight;

    step(t, bst, g, 0, 0);
    if (!row_finite(bst, t->k))
        return -ERANGE;
    int rc = store_upsert(t->store, MODEL_BIAS_ID, bst);
    if (rc >= 0 && t->live)
        rc = store_upsert(t->live, MODEL_BIAS_ID, &bst[t->k == 3 ? 2 : 0]);
    if (rc < 0)
        return rc;
    memcpy(t->bias, bst, sizeof t->bias);

    seen_set_next(&t->w.seen);
    const uint32_t k = t->k;
    const double l1 = t->opt.l1, l2 = t->opt.l2;
    for (uint32_t j = 0; j < n; j++) {
        float *st = t->w.state + (size_t)j * k;
        train__work_repeat(&t->w, t->store, ids[j], ids[j] == MODEL_BIAS_ID, st,
                           t->live ? init_from_live : NULL, t);
        step(t, st, values ? g * values[j] : g, l1, l2);
        if (!row_finite(st, k))
            return -ERANGE;
        rc = store_upsert(t->store, ids[j], st);
        if (rc >= 0 && t->live)
            rc = store_upsert(t->live, ids[j], &st[k == 3 ? 2 : 0]);
        if (rc < 0)
            return rc;
        if (ids[j] == MODEL_BIAS_ID) /* a sample may name the bias's id: keep the cache */
            memcpy(t->bias, st, k * sizeof *st);
    }
    return 0;
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
        init_from_live(t, MODEL_BIAS_ID, st);
        memcpy(t->bias, st, sizeof st);
    }
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
    if (t->live)
        return train__refuse("an LR trainer attached to a live store trains on one thread",
                             why, why_len);
    int rc = train__par_mirror(t->store, &t->rows, &t->rows_stale);
    if (rc != 0)
        return rc;
    *rows = t->rows;
    *mirror_of = t->store;
    return 0;
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

static int ops_attach_live(void *impl, store_t *live, char *why, size_t why_len)
{
    return train_lr_attach_live(impl, live, why, why_len);
}

const train_ops_t train__lr_ops = {
    .kind = STORE_MODEL_LR, .name = "lr", .create = ops_create, .destroy = ops_destroy,
    .reserve = ops_reserve, .predict = ops_predict, .update = ops_update,
    .export_snapshot = ops_export, .store = ops_store, .describe = ops_describe,
    .attach_live = ops_attach_live, .par = &train__lr_par_ops,
};
