/*
 * train_fm.c — FM training (train.h; the table train__fm_ops): SGD, Adagrad, or FTRL-Proximal for
 * the linear weights with Adagrad for the factors.
 *
 *   margin = bias + s sum_j w_j x_j + s^2 0.5 sum_f [S_f^2 - Q_f]
 *   S_f = sum_j v_jf x_j,  Q_f = sum_j (v_jf x_j)^2
 *   d margin / d w_j  = s x_j
 *   d margin / d v_jf = s^2 x_j (S_f - v_jf x_j)
 *
 * s = 1 / sqrt(sum_j x_j^2) with instance normalisation (opt.norm; s = 1
 * when that sum is 0), else s = 1: normalising scales every x_j by s, and
 * the sums above are kept on the raw x so that serving can split them over
 * a request's blocks.  Normalising makes a sample's step size independent
 * of how many features it has, which is what lets one learning rate suit
 * data sets with 16 and with 39 fields.
 *
 * One sample is one step:
 *
 *   1. one batched store lookup of the sample's ids gives each feature's
 *      state row; a row not found is a new id: w = 0, v drawn from
 *      N(0, init_stdev^2) by a hash of (seed, id, f), optimizer sums and
 *      occurrence count 0;
 *   2. p = sigmoid(margin), summed in double in feature order exactly as
 *      model.c's fm_score() sums a request whose shared block is the sample
 *      and whose item is empty (so exports score bit for bit as predicted);
 *   3. g = p - y; the id's occurrence count c goes up by one, each
 *      coordinate takes its own step and the row is written back with
 *      store_upsert().  The bias row is [b | 0..0 | optimizer sums | 0]; its
 *      v's stay 0 and it has no L1/L2.
 *
 * State rows (fp32; the serving row [w | v] is always the prefix, so export
 * copies 1 + k floats):
 *
 *   SGD      [ w | v_1..v_k | c ]
 *   Adagrad  [ w | v_1..v_k | Gw | Gv_1..Gv_k | c ]
 *   FTRL     [ w | v_1..v_k | z | n | Gv_1..Gv_k | c ]
 *
 * c counts the id's occurrences (exact to 2^24, then it stops growing:
 * harmless, the term it scales is negligible by then).
 *
 * Steps, per coordinate with gradient g_c (L2 folded in as g_c += l2 c):
 * SGD c -= alpha g_c; Adagrad G += g_c^2, c -= alpha g_c / (sqrt(G) + beta);
 * FTRL for w as in train_lr.c (w computed from z, n; L2 in the closed form).
 * The factors' L2 is frequency-adaptive: l2_v + l2_v_freq / c at an id's
 * c-th occurrence.  A plain per-occurrence L2 is a penalty proportional to
 * how often an id occurs, i.e. to the data: tuned to stop a 1,600-row set
 * from fitting noise into its factors, it also flattens the real
 * interactions of a million rows.  The 1/c term (DIN's frequency-adaptive
 * regularisation, in online form) shrinks the factors of ids seen a few
 * times hard and leaves those of frequent ids to the data.
 *
 * A sample's weight scales g (weight 1 is exact: the same arithmetic).
 *
 * A feature id repeated within one sample: its gradient is taken at the
 * forward values, then the row is re-read from the store (it already holds
 * the first occurrence's step) before this occurrence's step is applied —
 * the same rule train_lr.c follows.
 *
 * LIVE (train_attach_live): the served store of an FM model holds each
 * id's serving row [w | v_1..v_k] (1 + k fp32 floats; the bias row
 * [b | 0..0]).  Attached, every step writes the stepped rows' prefixes,
 * the bias's included, into it with store_upsert_relaxed (a key new to it
 * is inserted; an existing row is overwritten float by float, so no
 * request waits for a trainer preempted mid-row, and one may read a row
 * half old, half new), and an id the state lacks starts from its served
 * row:
 *
 *   served row found   [w | v] copied, optimizer sums 0, FTRL's z chosen as
 *                      train_lr.c's so that w does not move before the
 *                      id's first step, and the occurrence count c at its
 *                      cap (2^24): the served model learned that id from
 *                      data the trainer never saw, so the 1/c shrinkage
 *                      meant for barely seen ids does not apply (with
 *                      c = 0 the defaults' first step would cut its served
 *                      factors by about a half);
 *   not found          the usual new id (w 0, v drawn from the hash).
 *
 * Predictions read the same rows (an id absent from both is 0, as
 * served), so train_predict equals the served score.
 *
 * NOT FINITE: a step whose serving row would not be finite (feature values
 * near FLT_MAX, unnormalised) returns -ERANGE before that row is written,
 * to the state or the served store, live or not (the caller's alarm:
 * training stops), so no value held is ever NaN or infinite in w or v.
 *
 * BATCH (train_fm_batch.c): train_update gives a frame (a shared block and
 * its items) to train_fm_update_batch, which makes the very steps of this
 * file's update item by item on shared ++ item while finding the shared
 * rows once per frame; update here stays the one-sample step that tests
 * hold the batch to, and a sample given alone to train_update is a batch
 * of one.
 *
 * SYNC (train_sync.h: ROWS, partitioned replicas): R = 1 + k coordinates,
 * the serving prefix; G at 1 + k + i (Adagrad), none (SGD), and under
 * FTRL w's (z, n) at 1 + k, 2 + k with v_f's G at 2 + k + f.  A hooked
 * step copies each row before stepping it (the only cost when hooked);
 * train_rows_sync_apply starts a row as a step would (train__fm_served_or_init).
 *
 * ON THREADS (train_threads.c): workers step a mirror of the store in a
 * row table (train_impl.h); a trainer attached live is refused there (its
 * writes would need one writer per shard).  A worker copies the sample's rows (the
 * forward values the gradient needs) and steps the rows in place; another
 * worker may step the same row meanwhile (Hogwild: a step may be lost or
 * mixed coordinate by coordinate, memory never).
 *
 * THREAD SAFETY: one thread drives a trainer (train.h); a trainer's
 * workers run on many threads while that thread waits (train_threads.c).
 */
#include "train_fm_impl.h"
#include "sigmoid.h"
#include "train_export.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The occurrence count an id taken from the served store starts with (LIVE):
 * the count's cap, where float stops counting. */
#define FM_LIVE_COUNT 16777216.0f

static uint32_t state_floats(train_optimizer_t o, uint32_t k)
{
    return 1 + (o == TRAIN_SGD ? 1 + k : o == TRAIN_ADAGRAD ? 2 + 2 * k : 3 + 2 * k);
}

void train_fm_defaults(train_optimizer_t opt, train_fm_options_t *o)
{
    memset(o, 0, sizeof *o);
    o->optimizer = opt;
    o->k = 4;
    o->init_stdev = 0.01;
    o->seed = 1;
    switch (opt) {
    case TRAIN_FTRL:
        o->alpha = 0.05;
        o->beta = 1.0;
        o->l1 = 0.1;
        o->l2 = 1.0;
        o->l2_v = 0.01;
        break;
    case TRAIN_ADAGRAD:
        /* xLearn's FM recipe (norm, lr 0.2, L2 2e-5, 10 epochs: see
         * TRAIN_FM_DEFAULT_EPOCHS), with beta 1 in place of its Adagrad sums
         * starting at 1: either way a step is at most alpha |g|, where
         * beta ~ 0 makes an id's first step alpha sign(g) however small g
         * is — noise for the ids seen once or twice that fill small sets.
         * l2_v_freq 3 (alpha l2_v_freq = 0.6 < 1: the penalty's step
         * shrinks a factor, never flips it) is on a plateau: 2..30 all
         * reach xLearn's figures on the four reference sets (0 and 1 do
         * not: criteo_tiny's factors fit noise by the 10th pass), and 3..10
         * do best on planted data (tlsynth, 1M rows: 1.11 x the planted
         * logloss against 1.12 with a plain L2 of 1e-3).  On sets of a few
         * hundred rows it keeps the factors near 0, so there the model is
         * close to a normalised LR: those sets do not support pairs. */
        o->norm = true;
        o->alpha = 0.2;
        o->beta = 1.0;
        o->l2 = 2e-5;
        o->l2_v = 2e-5;
        o->l2_v_freq = 3.0;
        break;
    case TRAIN_SGD:
        o->alpha = 0.05;
        o->l2 = 1e-3;
        o->l2_v = 0.01;
        break;
    }
}

__attribute__((cold)) int train_fm_create(const train_fm_options_t *opt, train_fm_t **out,
                                          char *why, size_t why_len)
{
    const train__check_t checks[] = {
        {opt->alpha, true, "learning rate (alpha) must be > 0"},
        {opt->beta, false, "beta must be >= 0"},
        {opt->l1, false, "l1 must be >= 0"},
        {opt->l2, false, "l2 must be >= 0"},
        {opt->l2_v, false, "l2 on v must be >= 0"},
        {opt->l2_v_freq, false, "frequency-adaptive l2 on v must be >= 0"},
        {opt->init_stdev, false, "init stdev must be >= 0"},
    };
    const char *bad = NULL;
    char buf[96];
    if ((unsigned)opt->optimizer > TRAIN_SGD)
        bad = "unknown optimizer";
    else if (opt->k < 1 || opt->k > MODEL_FM_MAX_K) {
        snprintf(buf, sizeof buf, "k must be 1..%u for FM", MODEL_FM_MAX_K);
        bad = buf;
    } else
        bad = train__check_all(checks, sizeof checks / sizeof *checks);
    if (bad)
        return train__refuse(bad, why, why_len);
    train_fm_t *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->opt = *opt;
    t->k = opt->k;
    t->sk = state_floats(opt->optimizer, opt->k);
    t->w.sk = t->sk;
    t->sync = (train__rows_sync_t){
        .r = 1 + opt->k,
        .g0 = opt->optimizer == TRAIN_ADAGRAD ? 1 + opt->k
              : opt->optimizer == TRAIN_FTRL  ? 2 + opt->k
                                              : TRAIN__ROWS_NO_G,
        .z = opt->optimizer == TRAIN_FTRL ? 1 + opt->k : 0,
        .alpha = opt->alpha, .beta = opt->beta, .l1 = opt->l1, .l2 = opt->l2};
    int rc = train__store_create(t->sk, opt->shards, opt->expected_keys, &t->store, why, why_len);
    if (rc != 0) {
        train_fm_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

void train_fm_destroy(train_fm_t *t)
{
    if (!t)
        return;
    store_destroy(t->store);
    train__work_free(&t->w);
    train__fm_batch_free(&t->b);
    train__row_table_destroy(t->rows);
    free(t);
}

const store_t *train_fm_store(const train_fm_t *t) { return t->store; }

int train_fm_reserve(train_fm_t *t, uint32_t n)
{
    return train__work_reserve(&t->w, n);
}

/* train_fm_impl.h */
void train__fm_init_row(const void *ctx, uint64_t id, float *row)
{
    const train_fm_t *t = ctx;
    memset(row, 0, (size_t)t->sk * sizeof *row);
    for (uint32_t f = 0; f < t->k; f++)
        row[1 + f] = (float)(t->opt.init_stdev * train__gauss(t->opt.seed, id, f));
}

/* The state row of an id the state lacks whose serving row [w | v] the
 * served store holds (LIVE): l1, l2 are 0 for the bias. */
static void state_from_served(const train_fm_t *t, const float *sv, bool bias, float *row)
{
    const uint32_t k = t->k;
    memset(row, 0, (size_t)t->sk * sizeof *row);
    memcpy(row, sv, (size_t)(1 + k) * sizeof *row);
    if (t->opt.optimizer == TRAIN_FTRL && row[0] != 0) {
        /* n = 0 (1 when beta and l2 are 0: at n = 0 every z gives w = 0) and
         * the z whose closed form is the served w (train_lr.c's LIVE) */
        const double l1 = bias ? 0 : t->opt.l1, l2 = bias ? 0 : t->opt.l2;
        const double n0 = t->opt.beta == 0 && l2 == 0 ? 1 : 0;
        const double d = (t->opt.beta + sqrt(n0)) / t->opt.alpha + l2;
        const double w = row[0];
        row[1 + k] = (float)(-w * d - copysign(l1, w));
        row[2 + k] = (float)n0;
    }
    if (!bias)
        row[t->sk - 1] = FM_LIVE_COUNT;
}

/* train_fm_impl.h */
void train__fm_served_or_init(const void *ctx, uint64_t id, float *row)
{
    const train_fm_t *t = ctx;
    float sv[1 + MODEL_FM_MAX_K];
    if (store_lookup(t->served, id, sv))
        state_from_served(t, sv, id == MODEL_BIAS_ID, row);
    else if (id == MODEL_BIAS_ID)
        memset(row, 0, (size_t)t->sk * sizeof *row);
    else
        train__fm_init_row(t, id, row);
}

/* train__init_fn of a prediction with a served store: the served row, or
 * 0 (an id nobody has scores 0, as served). */
static void served_or_zero(const void *ctx, uint64_t id, float *row)
{
    const train_fm_t *t = ctx;
    memset(row, 0, (size_t)t->sk * sizeof *row);
    float sv[1 + MODEL_FM_MAX_K];
    if (store_lookup(t->served, id, sv))
        memcpy(row, sv, (size_t)(1 + t->k) * sizeof *row);
}

/* The margin's probability from the n rows at state (stride sk) and the
 * bias; fills S, Q (k each) and the scales *s, *s2.  Summed exactly as
 * model.c's fm_block/fm_score sum a shared block followed by an empty item. */
static float forward_at(const train_fm_t *t, const float *state, const float *values, uint32_t n,
                        float bias, double *S, double *Q, double *s_out, double *s2_out)
{
    const uint32_t k = t->k, sk = t->sk;
    memset(S, 0, k * sizeof *S);
    memset(Q, 0, k * sizeof *Q);
    double lin = 0;
    const float *w = state;
    for (uint32_t j = 0; j < n; j++, w += sk) {
        double x = values ? (double)values[j] : 1.0;
        lin += (double)w[0] * x;
        for (uint32_t f = 0; f < k; f++) {
            double vx = (double)w[1 + f] * x;
            S[f] += vx;
            Q[f] += vx * vx;
        }
    }
    double pair = 0;
    for (uint32_t f = 0; f < k; f++)
        pair += S[f] * S[f] - Q[f];
    *s_out = *s2_out = 1;
    if (!t->opt.norm) {
        double base = (double)bias + lin;
        return sigmoid(base + 0.5 * pair);
    }
    /* as model.c's fm_score: the sum of squares in feature order (the
     * shared block's, plus an empty item's 0), then the same expression */
    double sq = 0;
    for (uint32_t j = 0; j < n; j++) {
        double x = values ? (double)values[j] : 1.0;
        sq += x * x;
    }
    if (sq > 0) {
        *s2_out = 1.0 / sq;
        *s_out = sqrt(*s2_out);
    }
    return sigmoid((double)bias + *s_out * lin + *s2_out * (0.5 * pair));
}

/* forward_at over t->w.state into t->S, t->Q, t->s, t->s2. */
static float forward(train_fm_t *t, const float *values, uint32_t n, float bias)
{
    return forward_at(t, t->w.state, values, n, bias, t->S, t->Q, &t->s, &t->s2);
}

float train_fm_predict(train_fm_t *t, const uint64_t *ids, const float *values, uint32_t n)
{
    if ((n > t->w.cap || !t->w.state) && train_fm_reserve(t, n) != 0)
        return NAN;
    float bias = 0;
    train__init_fn init = t->served ? served_or_zero : NULL;
    if (init)
        train__work_load(&t->w, t->store, &(uint64_t){MODEL_BIAS_ID}, 1, init, t);
    else
        store_lookup_batch(t->store, &(uint64_t){MODEL_BIAS_ID}, 1, t->w.state, NULL);
    bias = t->w.state[0];
    if (init)
        train__work_load(&t->w, t->store, ids, n, init, t);
    else
        store_lookup_batch(t->store, ids, n, t->w.state, NULL);
    return forward(t, values, n, bias);
}

/* One step on logloss x weight. */
int train_fm_update(train_fm_t *t, const uint64_t *ids, const float *values, uint32_t n,
                    float label, float weight, float *p_out)
{
    if (n > t->w.cap || !t->w.state) {
        int rc = train_fm_reserve(t, n);
        if (rc != 0)
            return rc;
    }
    const uint32_t k = t->k, sk = t->sk;
    t->rows_stale = true; /* the mirror (ON THREADS) no longer holds the state */
    float brow[STORE_MAX_VALUE_FLOATS];
    memset(brow, 0, sizeof brow);
    store_t *served = t->served;
    if (!store_lookup(t->store, MODEL_BIAS_ID, brow) && served)
        train__fm_served_or_init(t, MODEL_BIAS_ID, brow);
    train__init_fn init = served ? train__fm_served_or_init : train__fm_init_row;
    train__work_load(&t->w, t->store, ids, n, init, t);
    float p = forward(t, values, n, brow[0]);
    if (p_out)
        *p_out = p;
    double g = ((double)p - (double)label) * (double)weight;

    const train__rows_sync_t *sync = &t->sync;
    float before[STORE_MAX_VALUE_FLOATS]; /* SYNC: a row before its step */
    if (sync->fn)
        memcpy(before, brow, (size_t)sk * sizeof *brow);
    step(t, brow, g, NULL, true);
    if (!serving_finite(t, brow))
        return -ERANGE;
    int rc = store_upsert(t->store, MODEL_BIAS_ID, brow);
    if (rc >= 0 && served)
        rc = store_upsert_relaxed(served, MODEL_BIAS_ID, brow);
    if (rc < 0)
        return rc;
    if (sync->fn)
        train__rows_note(sync, MODEL_BIAS_ID, before, brow);

    seen_set_next(&t->w.seen);
    double gv[MODEL_FM_MAX_K];
    const double gs = g * t->s, gs2 = g * t->s2; /* exactly g without norm */
    for (uint32_t j = 0; j < n; j++) {
        float *row = t->w.state + (size_t)j * sk;
        double x = values ? (double)values[j] : 1.0;
        double gx = gs * x, gvx = gs2 * x;
        for (uint32_t f = 0; f < k; f++)
            gv[f] = gvx * (t->S[f] - (double)row[1 + f] * x);
        train__work_repeat(&t->w, t->store, ids[j], ids[j] == MODEL_BIAS_ID, row, init, t);
        row[sk - 1] += 1.0f;
        if (sync->fn)
            memcpy(before, row, (size_t)sk * sizeof *row);
        step(t, row, gx, gv, false);
        if (!serving_finite(t, row))
            return -ERANGE;
        rc = store_upsert(t->store, ids[j], row);
        if (rc >= 0 && served)
            rc = store_upsert_relaxed(served, ids[j], row);
        if (rc < 0)
            return rc;
        if (sync->fn)
            train__rows_note(sync, ids[j], before, row);
    }
    return 0;
}

__attribute__((cold)) int train_fm_export(const train_fm_t *t, const char *dir,
                                          const store_meta_t *meta, store_error_t *err)
{
    /* "norm" only when on: a snapshot without it scores unnormalised, as
     * every FM snapshot written before normalisation existed does */
    store_extras_t x = {0};
    if (t->opt.norm && store_extras_set(&x, "norm", "1") != 0)
        return train__export_refuse(dir, "cannot record the FM params", err);
    return train__export_rows(t->store, 0, 1 + t->k, STORE_MODEL_FM, &x, dir, meta, err);
}

/* train_attach_live (LIVE): 0, or -EINVAL with a sentence when live's rows
 * are not this trainer's serving rows. */
__attribute__((cold)) static int attach_live(train_fm_t *t, store_t *live, char *why,
                                             size_t why_len)
{
    if (live && (store_value_floats(live) != 1 + t->k || store_dtype(live) != STORE_DTYPE_F32)) {
        char buf[200];
        snprintf(buf, sizeof buf,
                 "the served store has %u %s floats per key; this FM trainer (k = %u) learns "
                 "online into 1 + k = %u fp32 floats per key",
                 store_value_floats(live), store_dtype(live) == STORE_DTYPE_F32 ? "fp32" : "non-fp32",
                 t->k, 1 + t->k);
        return train__refuse(buf, why, why_len);
    }
    t->served = live;
    t->rows_stale = true;
    return 0;
}

/* ---- on threads (train_threads.c) -------------------------------------------- */

struct fm_worker {
    const train_fm_t *t;
    train__row_table_t *rows; /* t->rows, shared with the other workers */
    uint32_t cap;
    float **row;              /* cap: the sample's rows in the table */
    float *state;             /* cap * sk: copies of them as the forward read them */
    double S[MODEL_FM_MAX_K], Q[MODEL_FM_MAX_K];
};

static int par_begin(void *impl, train__row_table_t **rows, store_t **mirror_of, char *why,
                     size_t why_len)
{
    train_fm_t *t = impl;
    return train__par_mirror(t->store, t->served != NULL, "FM", &t->rows, &t->rows_stale, rows,
                             mirror_of, why, why_len);
}

static int par_worker_create(void *impl, void **out)
{
    struct fm_worker *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    w->t = impl;
    w->rows = w->t->rows;
    *out = w;
    return 0;
}

static void par_worker_destroy(void *wp)
{
    struct fm_worker *w = wp;
    if (!w)
        return;
    free(w->row);
    free(w->state);
    free(w);
}

/* train_fm_update on the worker's rows (ON THREADS). */
static int par_update(void *wp, const uint64_t *ids, const float *values, uint32_t n,
                      float label, float weight, float *p_out)
{
    struct fm_worker *w = wp;
    const train_fm_t *t = w->t;
    const uint32_t k = t->k, sk = t->sk;
    if (n > w->cap) {
        uint32_t cap = train__grow(w->cap, n);
        float **row = cap ? malloc((size_t)cap * sizeof *row) : NULL;
        float *state = cap ? malloc((size_t)cap * sk * sizeof *state) : NULL;
        if (!row || !state) {
            free(row);
            free(state);
            return -ENOMEM;
        }
        free(w->row);
        free(w->state);
        w->row = row;
        w->state = state;
        w->cap = cap;
    }
    float *b = train__row_table_upsert_mt(w->rows, MODEL_BIAS_ID, NULL, NULL);
    if (!b)
        return -ENOMEM;
    for (uint32_t j = 0; j < n; j++) {
        if (!(w->row[j] = train__row_table_upsert_mt(w->rows, ids[j], train__fm_init_row, t)))
            return -ENOMEM;
        float *cp = w->state + (size_t)j * sk; /* float by float: tsan_hogwild.supp */
        for (uint32_t c = 0; c < sk; c++)
            cp[c] = w->row[j][c];
    }
    double s, s2;
    float p = forward_at(t, w->state, values, n, b[0], w->S, w->Q, &s, &s2);
    if (p_out)
        *p_out = p;
    double g = ((double)p - (double)label) * (double)weight;

    step(t, b, g, NULL, true);
    double gv[MODEL_FM_MAX_K];
    const double gs = g * s, gs2 = g * s2;
    for (uint32_t j = 0; j < n; j++) {
        const float *fwd = w->state + (size_t)j * sk;
        float *row = w->row[j]; /* as it is now: an id named twice holds its first step */
        double x = values ? (double)values[j] : 1.0;
        double gx = gs * x, gvx = gs2 * x;
        for (uint32_t f = 0; f < k; f++)
            gv[f] = gvx * (w->S[f] - (double)fwd[1 + f] * x);
        row[sk - 1] += 1.0f;
        step(t, row, gx, gv, false);
    }
    return 0;
}

const train__par_ops_t train__fm_par_ops = {
    .begin = par_begin, .worker_create = par_worker_create,
    .worker_destroy = par_worker_destroy, .update = par_update, .end = NULL,
};

/* ---- train_ops_t -------------------------------------------------------------- */

static int ops_create(const train_options_t *o, void **impl, char *why, size_t why_len)
{
    return train_fm_create(&o->fm, (train_fm_t **)impl, why, why_len);
}
static void ops_destroy(void *impl) { train_fm_destroy(impl); }
static int ops_reserve(void *impl, uint32_t n) { return train_fm_reserve(impl, n); }
static float ops_predict(void *impl, const uint64_t *ids, const float *values, uint32_t n)
{
    return train_fm_predict(impl, ids, values, n);
}
static int ops_update(void *impl, const uint64_t *ids, const float *values, uint32_t n,
                      float label, float weight, float *p)
{
    return train_fm_update(impl, ids, values, n, label, weight, p);
}
static int ops_update_batch(void *impl, const codec_block_t *shared, const codec_block_t *items,
                            uint32_t n_items, const float *labels, const float *weights, float *p)
{
    return train_fm_update_batch(impl, shared, items, n_items, labels, weights, p);
}
static int ops_export(const void *impl, const char *dir, const store_meta_t *meta,
                      store_error_t *err)
{
    return train_fm_export(impl, dir, meta, err);
}
static const store_t *ops_store(const void *impl) { return train_fm_store(impl); }
static void ops_describe(const void *impl, char *buf, size_t len)
{
    const train_fm_options_t *o = &((const train_fm_t *)impl)->opt;
    snprintf(buf, len,
             "fm/%s k=%u norm=%d alpha=%g beta=%g l1=%g l2=%g l2_v=%g l2_v_freq=%g "
             "init_stdev=%g seed=%llu",
             train_optimizer_name(o->optimizer), o->k, (int)o->norm, o->alpha, o->beta, o->l1,
             o->l2, o->l2_v, o->l2_v_freq, o->init_stdev, (unsigned long long)o->seed);
}

static int ops_attach_live(void *impl, store_t *live, const store_extras_t *x, char *why,
                           size_t why_len)
{
    (void)x; /* the store holds the whole served model */
    return attach_live(impl, live, why, why_len);
}

/* ---- SYNC (train_sync.h: ROWS) ------------------------------------------------ */

static train__rows_sync_t *rows_sync(void *impl) { return &((train_fm_t *)impl)->sync; }

static int rows_apply(void *impl, uint64_t id, const float *d)
{
    train_fm_t *t = impl;
    float row[STORE_MAX_VALUE_FLOATS];
    if (!store_lookup(t->store, id, row)) { /* as a step starts it */
        if (t->served)
            train__fm_served_or_init(t, id, row);
        else if (id == MODEL_BIAS_ID)
            memset(row, 0, (size_t)t->sk * sizeof *row);
        else
            train__fm_init_row(t, id, row);
    }
    int rc = train__rows_add(&t->sync, id, row, d);
    if (rc != 0)
        return rc;
    t->rows_stale = true; /* the mirror (ON THREADS) no longer holds the state */
    rc = store_upsert(t->store, id, row);
    if (rc >= 0 && t->served)
        rc = store_upsert_relaxed(t->served, id, row);
    return rc < 0 ? rc : 0;
}

const train__rows_ops_t train__fm_rows_ops = {.sync = rows_sync, .apply = rows_apply};

const train_ops_t train__fm_ops = {
    .kind = STORE_MODEL_FM, .name = "fm", .create = ops_create, .destroy = ops_destroy,
    .reserve = ops_reserve, .predict = ops_predict, .update = ops_update,
    .export_snapshot = ops_export, .store = ops_store, .describe = ops_describe,
    .attach_live = ops_attach_live, .update_batch = ops_update_batch, .par = &train__fm_par_ops,
    .rows = &train__fm_rows_ops,
};
