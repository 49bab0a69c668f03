/*
 * ffm_train.c — FFM training (ffm_train.h): Adagrad or SGD on every
 * coordinate, logistic loss.
 *
 *   margin = bias + s sum_j w_j x_j + s^2 sum_{j<l} <v_{j,f(l)}, v_{l,f(j)}> x_j x_l
 *
 *   d margin / d w_j     = s x_j
 *   d margin / d v_{j,h} = s^2 x_j (B[h][f(j)] - [h == f(j)] v_{j,h} x_j)
 *
 * with f = ffm_field and B[g][h] = sum over the sample's features l of
 * field g of v_{l,h} x_l — the aggregates ffm_scores() leaves in its work
 * space.  One sample is one step:
 *
 *   1. one batched store lookup of the sample's ids gives each feature's
 *      state row; a row not found is a new id: w = 0, v drawn from a hash
 *      of (seed, id, coordinate), optimizer sums 0;
 *   2. the serving prefixes [w | v] are copied to a row array laid out as
 *      model.c lays out a request (bias row first) and p = ffm_scores() of
 *      the sample as the shared block and one empty item: the prediction is
 *      by construction what a server scores on an export;
 *   3. g = p - y; each coordinate takes its own step and the row is written
 *      back with store_upsert().  The bias row is [b | 0..0 | Gb | 0..0];
 *      its v's stay 0 and it has no L2.
 *
 * State rows (fp32, K = 1 + F k; the serving row is the prefix, so export
 * copies K floats):
 *
 *   SGD      [ w | v_0 .. v_{F-1} ]
 *   Adagrad  [ w | v_0 .. v_{F-1} | Gw | Gv_0 .. Gv_{F-1} ]
 *
 * Steps, per coordinate with gradient g_c (L2 folded in as g_c += l2 c):
 * SGD c -= a g_c; Adagrad G += g_c^2, c -= a g_c / (sqrt(G) + beta), with
 * a = alpha for the factors and alpha w_ratio for the bias and w.
 *
 * Sparse updates.  v_{j,h} has a data gradient only when another feature of
 * the sample lies in field h (B[h][f(j)] minus j's own share is otherwise
 * exactly 0), and no coordinate of a feature with x = 0 has one.  Such
 * coordinates are left alone — no L2 step either — as LIBFFM does (it
 * regularises v_{j,h} only inside the pair loop).  This matters beyond
 * speed: with Adagrad a lone L2 gradient on a fresh accumulator would move
 * the coordinate by a full alpha.
 *
 * Initialisation: v_{j,h,f} uniform in [0, init_stdev) from a hash of
 * (seed, id, h k + f), LIBFFM's start (its 1/sqrt(k) is the default 0.5 for
 * k = 4).  N(0, sd^2) starts, sd 0.1 .. 0.3, were tried and lost on the
 * quality sets: avazu_rx by .005 AUC at equal logloss.
 *
 * A feature id repeated within one sample: its gradient is taken at the
 * forward values, then the row is re-read from the store (it already holds
 * the first occurrence's step) before this occurrence's step is applied —
 * the rule train_lr.c and fm_train.c follow.
 *
 * THREAD SAFETY: one thread drives a trainer (ffm_train.h).
 */
#include "ffm_train.h"
#include "ffm.h"
#include "model.h"
#include "seen_set.h"
#include "train_export.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct train_ffm {
    train_ffm_options_t opt;
    store_t *store;     /* owned: state rows, sk floats per id */
    uint32_t F, k;      /* fields, factors */
    uint32_t K;         /* serving floats per id: 1 + F k */
    uint32_t sk;        /* state floats per id: K (SGD) or 2K (Adagrad) */
    uint32_t cap;       /* features the work space holds */
    float *state;       /* cap * sk: state rows of the current sample */
    float *bstate;      /* sk: the bias's state row */
    float *rows;        /* (1 + cap) * K: serving rows, bias first (ffm_scores) */
    uint8_t *found;     /* cap: lookup hits */
    seen_set_t seen;    /* ids of the current sample already stepped */
    double *work;       /* ffm_work_doubles(F, k); [0, F F k) = B after a forward */
    double *gv;         /* F k: one feature's v gradient */
    uint32_t *cnt;      /* F: features with x != 0 per field in the sample */
    uint8_t *active;    /* F: v blocks of the current feature with a data gradient */
};

static uint32_t state_floats(train_optimizer_t o, uint64_t K)
{
    uint64_t sk = o == TRAIN_SGD ? K : 2 * K;
    return sk > UINT32_MAX ? UINT32_MAX : (uint32_t)sk;
}

void train_ffm_defaults(train_ffm_options_t *o)
{
    memset(o, 0, sizeof *o);
    o->optimizer = TRAIN_ADAGRAD;
    o->fields = 0;
    o->k = 4;
    /* Tuned on the four sets of the quality table (test_ffm --quality) with
     * TRAIN_FFM_DEFAULT_EPOCHS passes.  beta 1: no first step is larger than
     * alpha |g| (with 1e-6 the first steps were a full alpha and FFM overfit
     * the small sets from its second epoch).  The linear part steps at half
     * the factors' rate: it overfits the rare features of the smallest sets
     * (xlearn_criteo) long before the factors have learned what the denser
     * ones (avazu_rx) need. */
    o->alpha = 0.4;
    o->w_ratio = 0.5;
    o->beta = 1.0;
    o->l2 = 2e-3;
    o->l2_v = 5e-3;
    o->init_stdev = 0.5;
    o->norm = true;
    o->seed = 1;
}

static void free_work(train_ffm_t *t)
{
    free(t->state);
    free(t->rows);
    free(t->found);
}

__attribute__((cold)) int train_ffm_create(const train_ffm_options_t *opt, train_ffm_t **out,
                                           char *why, size_t why_len)
{
    const char *bad = NULL;
    char buf[160];
    if (opt->optimizer == TRAIN_FTRL)
        bad = "FTRL is not supported for FFM: use adagrad or sgd";
    else if (opt->optimizer != TRAIN_ADAGRAD && opt->optimizer != TRAIN_SGD)
        bad = "unknown optimizer";
    else if (opt->fields < 1 || opt->fields > FFM_MAX_FIELDS) {
        snprintf(buf, sizeof buf, "fields must be 1..%d for FFM", FFM_MAX_FIELDS);
        bad = buf;
    } else if (opt->k < 1 ||
               state_floats(opt->optimizer, 1 + (uint64_t)opt->fields * opt->k) >
                   STORE_MAX_VALUE_FLOATS) {
        uint32_t per = opt->optimizer == TRAIN_SGD ? STORE_MAX_VALUE_FLOATS
                                                   : STORE_MAX_VALUE_FLOATS / 2;
        snprintf(buf, sizeof buf,
                 "k must be 1..%u for FFM with %u fields and %s (1 + fields x k must be <= %u)",
                 (per - 1) / opt->fields, opt->fields, train_optimizer_name(opt->optimizer),
                 per);
        bad = buf;
    } else if (!(opt->alpha > 0) || !isfinite(opt->alpha))
        bad = "learning rate (alpha) must be > 0";
    else if (!(opt->w_ratio > 0) || !isfinite(opt->w_ratio))
        bad = "the linear step ratio (w_ratio) must be > 0";
    else if (!(opt->beta >= 0) || !isfinite(opt->beta))
        bad = "beta must be >= 0";
    else if (!(opt->l2 >= 0) || !isfinite(opt->l2))
        bad = "l2 must be >= 0";
    else if (!(opt->l2_v >= 0) || !isfinite(opt->l2_v))
        bad = "l2 on v must be >= 0";
    else if (!(opt->init_stdev >= 0) || !isfinite(opt->init_stdev))
        bad = "init stdev must be >= 0";
    if (bad) {
        if (why_len)
            snprintf(why, why_len, "%s", bad);
        return -EINVAL;
    }
    train_ffm_t *t = calloc(1, sizeof *t);
    if (!t)
        goto nomem;
    t->opt = *opt;
    t->F = opt->fields;
    t->k = opt->k;
    t->K = 1 + opt->fields * opt->k;
    t->sk = state_floats(opt->optimizer, t->K);
    t->bstate = calloc(t->sk, sizeof *t->bstate);
    t->work = malloc(ffm_work_doubles(t->F, t->k) * sizeof *t->work);
    t->gv = calloc((size_t)t->F * t->k, sizeof *t->gv);
    t->cnt = calloc(t->F, sizeof *t->cnt);
    t->active = calloc(t->F, sizeof *t->active);
    if (!t->bstate || !t->work || !t->gv || !t->cnt || !t->active)
        goto nomem;
    store_options_t so = {.value_floats = t->sk, .dtype = STORE_DTYPE_F32,
                          .shards = opt->shards, .expected_keys = opt->expected_keys};
    int rc = store_create(&so, &t->store);
    if (rc == 0)
        rc = train_ffm_reserve(t, 64);
    if (rc != 0) {
        if (why_len)
            snprintf(why, why_len, "could not create the trainer store: %s", strerror(-rc));
        train_ffm_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
nomem:
    if (why_len)
        snprintf(why, why_len, "out of memory for the FFM trainer");
    train_ffm_destroy(t);
    return -ENOMEM;
}

void train_ffm_destroy(train_ffm_t *t)
{
    if (!t)
        return;
    store_destroy(t->store);
    free_work(t);
    seen_set_free(&t->seen);
    free(t->bstate);
    free(t->work);
    free(t->gv);
    free(t->cnt);
    free(t->active);
    free(t);
}

const store_t *train_ffm_store(const train_ffm_t *t) { return t->store; }
uint32_t train_ffm_fields(const train_ffm_t *t) { return t->F; }
uint32_t train_ffm_k(const train_ffm_t *t) { return t->k; }

int train_ffm_reserve(train_ffm_t *t, uint32_t n)
{
    if (n <= t->cap && t->state)
        return 0;
    uint32_t cap = t->cap ? t->cap : 64;
    while (cap < n) {
        if (cap > UINT32_MAX / 2)
            return -ENOMEM;
        cap *= 2;
    }
    if (seen_set_reserve(&t->seen, cap) != 0)
        return -ENOMEM;
    float *st = malloc((size_t)cap * t->sk * sizeof *st);
    float *rows = calloc((size_t)(cap + 1) * t->K, sizeof *rows);
    uint8_t *found = malloc(cap);
    if (!st || !rows || !found) {
        free(st);
        free(rows);
        free(found);
        return -ENOMEM;
    }
    free_work(t);
    t->state = st;
    t->rows = rows;
    t->found = found;
    t->cap = cap;
    return 0;
}

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* A new id's state row: w = 0, v_c uniform in [0, init_stdev) from a hash
 * of (seed, id, c), optimizer sums 0.  LIBFFM's start (U(0, 1/sqrt(k))):
 * on the quality sets it beat N(0, sd^2) for every sd tried. */
static void init_row(const train_ffm_t *t, uint64_t id, float *row)
{
    memset(row, 0, (size_t)t->sk * sizeof *row);
    if (t->opt.init_stdev == 0)
        return;
    /* seed and id through separate rounds (mix64(0) = 0: seed ^ id alone
     * would start id == seed at v = 0) */
    const uint64_t h = mix64(mix64(t->opt.seed ^ UINT64_C(0x9e3779b97f4a7c15)) ^ id);
    for (uint32_t c = 0; c < t->K - 1; c++) {
        double u = (double)(mix64(h + 2 * (uint64_t)c + 1) >> 11) * 0x1.0p-53; /* [0, 1) */
        row[1 + c] = (float)(t->opt.init_stdev * u);
    }
}

/* Fetches the bias and the sample's state rows (new ids initialised when
 * init, else left 0 as a server sees them). */
static void fetch(train_ffm_t *t, const uint64_t *ids, uint32_t n, bool init)
{
    if (!store_lookup(t->store, MODEL_BIAS_ID, t->bstate))
        memset(t->bstate, 0, (size_t)t->sk * sizeof *t->bstate);
    store_lookup_batch(t->store, ids, n, t->state, t->found);
    if (init)
        for (uint32_t j = 0; j < n; j++)
            if (!t->found[j])
                init_row(t, ids[j], t->state + (size_t)j * t->sk);
}

/* p of the fetched rows through ffm_scores (the sample as the shared block,
 * one empty item); leaves B in t->work. */
static float forward(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n)
{
    const uint32_t K = t->K, sk = t->sk;
    float *r = t->rows;
    r[0] = t->bstate[0]; /* the rest of the bias row stays 0 (calloc) */
    for (uint32_t j = 0; j < n; j++)
        memcpy(r + (size_t)(1 + j) * K, t->state + (size_t)j * sk, (size_t)K * sizeof *r);
    model_block_t shared = {.ids = ids, .values = values, .n = n};
    model_block_t item = {.ids = NULL, .values = NULL, .n = 0};
    float p;
    ffm_scores(&shared, &item, 1, r, t->F, t->k, t->opt.norm, t->work, &p);
    return p;
}

float train_ffm_predict(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n)
{
    if (n > t->cap && train_ffm_reserve(t, n) != 0)
        return NAN;
    fetch(t, ids, n, false);
    return forward(t, ids, values, n);
}

/* The scales of the linear and pair terms: s and s^2, from sum x^2 summed
 * as ffm.c sums it. */
static void scales(const train_ffm_t *t, const float *values, uint32_t n, double *s,
                   double *s2)
{
    double sq = 0;
    for (uint32_t j = 0; j < n; j++) {
        double x = values ? (double)values[j] : 1.0;
        sq += x * x;
    }
    *s = *s2 = 1;
    if (t->opt.norm && sq > 0) {
        *s2 = 1.0 / sq;
        *s = sqrt(*s2);
    }
}

/* Counts the features with x != 0 per field into t->cnt. */
static void count_fields(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n)
{
    memset(t->cnt, 0, t->F * sizeof *t->cnt);
    for (uint32_t j = 0; j < n; j++)
        if (!values || values[j] != 0)
            t->cnt[ffm_field(ids[j], t->F)]++;
}

/* gv[h k + f] = scale x (B[h][fj][f] - [h == fj] v_{h,f} x) for the blocks h
 * where another feature lies in field h (active[h] = 1); the other blocks
 * are exactly 0 (active[h] = 0, gv left as it was).  v is the feature's
 * v (F k floats, forward values). */
static void v_gradient(train_ffm_t *t, const float *v, uint32_t fj, double x, double scale)
{
    const uint32_t F = t->F, k = t->k;
    const double *B = t->work;
    const double sx = scale * x;
    for (uint32_t h = 0; h < F; h++) {
        uint32_t others = t->cnt[h] - (h == fj);
        t->active[h] = others != 0;
        if (!others)
            continue;
        const double *b = B + ((size_t)h * F + fj) * k;
        double *gv = t->gv + (size_t)h * k;
        if (h == fj) {
            const float *vh = v + (size_t)h * k;
            for (uint32_t f = 0; f < k; f++)
                gv[f] = sx * (b[f] - (double)vh[f] * x);
        } else {
            for (uint32_t f = 0; f < k; f++)
                gv[f] = sx * b[f];
        }
    }
}

/* Adagrad step of n coordinates c with accumulators G, gradients g (L2 l2
 * added here). */
static inline void adagrad(float *restrict c, float *restrict G, const double *restrict g,
                           uint32_t n, double l2, double alpha, double eps)
{
    for (uint32_t i = 0; i < n; i++) {
        double gi = g[i] + l2 * (double)c[i];
        double g2 = (double)G[i] + gi * gi;
        G[i] = (float)g2;
        c[i] = (float)((double)c[i] - alpha * gi / (sqrt(g2) + eps));
    }
}

/* adagrad() for the factors, in float: the steps of all a sample's fields
 * in one loop the compiler vectorises (this file is built with
 * -fno-math-errno so that sqrtf vectorises).  Per coordinate the same
 * formula as adagrad(); the factors' steps were 40% of a training step in
 * double. */
static inline void adagrad_v(float *restrict c, float *restrict G, const double *restrict g,
                             uint32_t n, float l2, float alpha, float eps)
{
    for (uint32_t i = 0; i < n; i++) {
        float gi = (float)g[i] + l2 * c[i];
        float g2 = G[i] + gi * gi;
        G[i] = g2;
        c[i] -= alpha * gi / (sqrtf(g2) + eps);
    }
}

static inline void sgd(float *restrict c, const double *restrict g, uint32_t n, double l2,
                       double alpha)
{
    for (uint32_t i = 0; i < n; i++)
        c[i] = (float)((double)c[i] - alpha * (g[i] + l2 * (double)c[i]));
}

/* Applies gradient gw to w (L2 l2 unless the bias) and t->gv to the active
 * v blocks of row. */
static void step(const train_ffm_t *t, float *row, double gw, double l2, bool with_v)
{
    const uint32_t F = t->F, k = t->k, K = t->K;
    const double alpha = t->opt.alpha, l2v = t->opt.l2_v, alpha_w = alpha * t->opt.w_ratio;
    if (t->opt.optimizer == TRAIN_SGD) {
        sgd(row, &gw, 1, l2, alpha_w);
        if (with_v)
            for (uint32_t h = 0; h < F; h++)
                if (t->active[h])
                    sgd(row + 1 + (size_t)h * k, t->gv + (size_t)h * k, k, l2v, alpha);
        return;
    }
    const double eps = t->opt.beta;
    adagrad(row, row + K, &gw, 1, l2, alpha_w, eps);
    if (!with_v)
        return;
    for (uint32_t h = 0; h < F;) { /* runs of consecutive active fields: one loop each */
        if (!t->active[h]) {
            h++;
            continue;
        }
        uint32_t e = h + 1;
        while (e < F && t->active[e])
            e++;
        size_t at = 1 + (size_t)h * k;
        adagrad_v(row + at, row + K + at, t->gv + (size_t)h * k, (e - h) * k, (float)l2v,
                  (float)alpha, (float)eps);
        h = e;
    }
}

int train_ffm_update(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n,
                     float label, float *p_out)
{
    if (n > t->cap) {
        int rc = train_ffm_reserve(t, n);
        if (rc != 0)
            return rc;
    }
    const uint32_t sk = t->sk;
    fetch(t, ids, n, true);
    float p = forward(t, ids, values, n);
    if (p_out)
        *p_out = p;
    double g = (double)p - (double)label;

    step(t, t->bstate, g, 0, false);
    int rc = store_upsert(t->store, MODEL_BIAS_ID, t->bstate);
    if (rc < 0)
        return rc;

    double s, s2;
    scales(t, values, n, &s, &s2);
    count_fields(t, ids, values, n);
    seen_set_next(&t->seen);
    for (uint32_t j = 0; j < n; j++) {
        double x = values ? (double)values[j] : 1.0;
        if (x == 0)
            continue; /* no data gradient on any coordinate */
        float *row = t->state + (size_t)j * sk;
        v_gradient(t, row + 1, ffm_field(ids[j], t->F), x, g * s2);
        if (seen_set_add(&t->seen, ids[j]) || ids[j] == MODEL_BIAS_ID) {
            if (!store_lookup(t->store, ids[j], row))
                init_row(t, ids[j], row);
        }
        step(t, row, g * s * x, t->opt.l2, true);
        rc = store_upsert(t->store, ids[j], row);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int train_ffm_margin_gradient(train_ffm_t *t, const uint64_t *ids, const float *values,
                              uint32_t n, double *d_bias, double *grad)
{
    if (n > t->cap) {
        int rc = train_ffm_reserve(t, n);
        if (rc != 0)
            return rc;
    }
    const uint32_t K = t->K;
    fetch(t, ids, n, true);
    (void)forward(t, ids, values, n);
    double s, s2;
    scales(t, values, n, &s, &s2);
    count_fields(t, ids, values, n);
    *d_bias = 1;
    for (uint32_t j = 0; j < n; j++) {
        double x = values ? (double)values[j] : 1.0;
        double *out = grad + (size_t)j * K;
        memset(out, 0, (size_t)K * sizeof *out);
        if (x == 0)
            continue;
        out[0] = s * x;
        v_gradient(t, t->state + (size_t)j * t->sk + 1, ffm_field(ids[j], t->F), x, s2);
        for (uint32_t h = 0; h < t->F; h++)
            if (t->active[h])
                memcpy(out + 1 + (size_t)h * t->k, t->gv + (size_t)h * t->k,
                       t->k * sizeof *out);
    }
    return 0;
}

__attribute__((cold)) int train_ffm_export(const train_ffm_t *t, const char *dir,
                                           const store_meta_t *meta, store_error_t *err)
{
    store_extras_t x = {0};
    char fields[16], k[16];
    snprintf(fields, sizeof fields, "%u", t->F);
    snprintf(k, sizeof k, "%u", t->k);
    if (store_extras_set(&x, "fields", fields) != 0 || store_extras_set(&x, "k", k) != 0 ||
        store_extras_set(&x, "norm", t->opt.norm ? "1" : "0") != 0) {
        if (err) {
            memset(err, 0, sizeof *err);
            err->offset = -1;
            err->code = STORE_E_INVALID;
            snprintf(err->msg, sizeof err->msg, "%s: cannot record the FFM params", dir);
        }
        return -1;
    }
    return train_export_rows(t->store, t->K, STORE_MODEL_FFM, &x, dir, meta, err);
}
