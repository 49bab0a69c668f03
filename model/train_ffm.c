/*
 * train_ffm.c — FFM training (train.h; the table train__ffm_ops): Adagrad
 * or SGD on every coordinate, or FTRL-Proximal for the bias and w with
 * Adagrad for the factors (as train_fm.c's FTRL), logistic loss.
 *
 *   margin = bias + s sum_j w_j x_j + s^2 sum_{j<l} <v_{j,f(l)}, v_{l,f(j)}> x_j x_l
 *
 *   d margin / d w_j     = s x_j
 *   d margin / d v_{j,h} = s^2 x_j (B[h][f(j)] - [h == f(j)] v_{j,h} x_j)
 *
 * with f = ffm_field and B[g][h] = sum over the sample's features l of
 * field g of v_{l,h} x_l — the aggregates model_ffm_scores() leaves in its work
 * space.  One sample is one step:
 *
 *   1. each id's state row is found in the trainer's row table
 *      (row_table.h), created when new: w = 0, v drawn from a hash of
 *      (seed, id, coordinate), optimizer sums 0;
 *   2. p = model_ffm_score_sample() of those rows' serving prefixes [w | v]: the
 *      float model_ffm_scores() gives for the sample as the shared block and one
 *      empty item, so the prediction is by construction what a server
 *      scores on an export;
 *   3. g = p - y; each coordinate takes its own step, in place in the
 *      table.  The bias row is [b | 0..0 | its w statistics | 0..0]; its
 *      v's stay 0 and it has no L1 or L2.
 *
 * The forward pass reads the rows where the table keeps them; each
 * feature's own v_fj block is saved first, as the gradient needs the
 * forward values.  The factors' gradient and step each
 * run over a feature's whole v (F k floats) in one vectorised loop
 * (ffm_step.c), with a 0/1 mask for the blocks that have no data gradient
 * (below).  The state is not in a store: a copy out per lookup, a copy
 * back and a second probe per upsert cost more than the arithmetic
 * (row_table.h).
 *
 * State rows (fp32, K = 1 + F k; the serving row is the prefix, so export
 * copies K floats):
 *
 *   SGD      [ w | v_0 .. v_{F-1} ]
 *   Adagrad  [ w | v_0 .. v_{F-1} | Gw | Gv_0 .. Gv_{F-1} ]
 *   FTRL     [ w | v_0 .. v_{F-1} | z | n | Gv_0 .. Gv_{F-1} ]
 *
 * (the factors' sums start at column gv0: K + 1, or K + 2 under FTRL).
 * Steps, per coordinate with gradient g_c (L2 folded in as g_c += l2 c):
 * SGD c -= a g_c; Adagrad G += g_c^2, c -= a g_c / (sqrt(G) + beta), with
 * a = alpha for the factors and alpha w_ratio for the bias and w.  FTRL
 * steps the bias and w as train_fm.c does (FTRL-Proximal, McMahan et al.
 * 2013): z += g - (sqrt(n + g^2) - sqrt(n)) / a w, n += g^2, and w the
 * closed form of (z, n) with a = alpha w_ratio, beta, l1 and l2 (0 and 0
 * for the bias; L2 in the closed form, not in g); the factors take
 * Adagrad's step above, whose defaults are the tuned ones.  Why FTRL for w:
 * its L1 leaves rare ids' w at exactly 0, and its (z, n) are sums that
 * partitioned replicas add in any order (SYNC).
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
 * A sample's weight scales g (weight 1 is exact: the same arithmetic).
 *
 * A feature id repeated within one sample: its gradient is taken at the
 * forward values (its own v_fj block, saved before any step) and its step
 * applied to the row in the table, which already holds the first
 * occurrence's step — the rule train_lr.c and train_fm.c follow.
 *
 * LIVE (train_attach_live): the served store of an FFM model holds each
 * id's serving row [w | v_0 .. v_{F-1}] (K = 1 + F k fp32 floats; the bias
 * row [b | 0..0]).  Attached, every step writes the prefixes of the rows it
 * stepped (the bias's and each feature's with x != 0) into it with
 * store_upsert_relaxed (a key new to it is inserted; an existing row float
 * by float, so that no request waits for a trainer preempted mid-row).  A row the table lacks
 * starts from the served row (optimizer sums 0; under FTRL n = 0 and z the
 * value whose closed form is the served w, as train_fm.c chooses it, so
 * that w does not move before the id's first step) when the served store
 * has one, else as a new id (w 0, v from the hash); predictions read an id
 * the table lacks from the served store (0 when absent, as served), so
 * train_predict equals the served score.  A step whose serving row would
 * not be finite returns -ERANGE before that row reaches the served store
 * (the caller's alarm; the trainer's own row is then spoilt, and the
 * caller drops the trainer).
 *
 * BATCH (train_ops_t.update_batch): a frame (a shared block and its items)
 * is update() per item on shared ++ item, except that the shared
 * positions' served rows are written once, at the frame's end (each was
 * checked finite after its step, as write_served checks): a frame of 100
 * items served its ~300 shared rows 100 times, the largest cost of the
 * online trainer.  State, predictions and the served rows at the frame's
 * end are update()'s item by item, bit for bit (test_train_fm_batch); a
 * shared id's new row is served when its frame ends.  After -ERANGE the
 * shared rows stepped are served as stepped, except the spoilt one.
 *
 * SYNC (train_sync.h: ROWS, partitioned replicas): R = K coordinates, G
 * at K + i (Adagrad) or none (SGD); under FTRL w's additive (z, n) at K,
 * K + 1 (w recomputed from them, as LR and FM-FTRL sync) and v_i's G at
 * K + 1 + i; rows of K over STORE_MAX_VALUE_FLOATS do not sync.  A hooked
 * step copies each row before stepping it; workers on threads never call
 * the hook.
 *
 * ON THREADS (train_threads.c): each worker is a copy of the trainer with
 * its own work space over the same row table; new ids are made through
 * train__row_table_upsert_mt (initialised before any other worker can see
 * them), and the steps land in place while other workers read and step the
 * same rows (Hogwild, as LIBFFM and xLearn train: a step may be lost or
 * mixed coordinate by coordinate, memory never).
 *
 * THREAD SAFETY: one thread drives a trainer, and only that thread may
 * read it (train_ffm_weights() included): the rows are stepped in place.
 * A trainer's workers run on many threads while that thread waits.
 */
#include "train_ffm_impl.h"
#include "ffm.h"
#include "ffm_step.h"
#include "model.h"
#include "row_table.h"
#include "train_export.h"
#include "train_sync_impl.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* FTRL's defaults for w (train_ffm_defaults): L1 and closed-form L2. */
#define FFM_FTRL_L1 0.1
#define FFM_FTRL_L2 1.0

static uint32_t state_floats(train_optimizer_t o, uint64_t K)
{
    uint64_t sk = o == TRAIN_SGD ? K : o == TRAIN_FTRL ? 2 * K + 1 : 2 * K;
    return sk > UINT32_MAX ? UINT32_MAX : (uint32_t)sk;
}

void train_ffm_defaults(train_optimizer_t opt, train_ffm_options_t *o)
{
    memset(o, 0, sizeof *o);
    o->optimizer = opt;
    o->fields = 0;
    o->k = 4;
    /* Tuned on the four sets of the quality table (test_ffm_quality) with
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
    if (opt == TRAIN_FTRL) {
        /* v keeps Adagrad's tuned step above; w's FTRL alpha is the same
         * alpha x w_ratio.  l1 and l2 are LR's and FM's FTRL ones (l2 in
         * the closed form: a penalty on w as a whole, not per occurrence
         * as Adagrad's).  On the four quality sets l1 0..0.1 and l2 0..1
         * moved test logloss by under .002; docs/performance.md has the
         * figures against Adagrad's. */
        o->l1 = FFM_FTRL_L1;
        o->l2 = FFM_FTRL_L2;
    }
}

static void free_work(train_ffm_t *t)
{
    free(t->live);
    free(t->selfv);
    free(t->scratch);
}

__attribute__((cold)) int train_ffm_create(const train_ffm_options_t *opt, train_ffm_t **out,
                                           char *why, size_t why_len)
{
    const train__check_t checks[] = {
        {opt->alpha, true, "learning rate (alpha) must be > 0"},
        {opt->w_ratio, true, "the linear step ratio (w_ratio) must be > 0"},
        {opt->beta, false, "beta must be >= 0"},
        {opt->l1, false, "l1 must be >= 0"},
        {opt->l2, false, "l2 must be >= 0"},
        {opt->l2_v, false, "l2 on v must be >= 0"},
        {opt->init_stdev, false, "init stdev must be >= 0"},
    };
    const char *bad = NULL;
    char buf[160];
    if ((unsigned)opt->optimizer > TRAIN_SGD)
        bad = "unknown optimizer";
    else if (opt->fields < 1 || opt->fields > FFM_MAX_FIELDS) {
        snprintf(buf, sizeof buf, "fields must be 1..%d for FFM", FFM_MAX_FIELDS);
        bad = buf;
    } else if (opt->k < 1 || state_floats(opt->optimizer, 1 + (uint64_t)opt->fields * opt->k) >
                                 STORE_MAX_VALUE_FLOATS) {
        /* the largest K = 1 + F k whose state row fits */
        uint32_t per = opt->optimizer == TRAIN_SGD    ? STORE_MAX_VALUE_FLOATS
                       : opt->optimizer == TRAIN_FTRL ? (STORE_MAX_VALUE_FLOATS - 1) / 2
                                                      : STORE_MAX_VALUE_FLOATS / 2;
        snprintf(buf, sizeof buf,
                 "k must be 1..%u for FFM with %u fields and %s (1 + fields x k must be <= %u)",
                 (per - 1) / opt->fields, opt->fields, train_optimizer_name(opt->optimizer), per);
        bad = buf;
    } else
        bad = train__check_all(checks, sizeof checks / sizeof *checks);
    if (bad)
        return train__refuse(bad, why, why_len);
    train_ffm_t *t = calloc(1, sizeof *t);
    if (!t)
        goto nomem;
    t->opt = *opt;
    t->F = opt->fields;
    t->k = opt->k;
    t->K = 1 + opt->fields * opt->k;
    t->sk = state_floats(opt->optimizer, t->K);
    t->gv0 = opt->optimizer == TRAIN_FTRL ? t->K + 2 : t->K + 1;
    const bool ftrl = opt->optimizer == TRAIN_FTRL;
    t->sync = (train__rows_sync_t){
        .r = t->K,
        .g0 = opt->optimizer == TRAIN_SGD ? TRAIN__ROWS_NO_G : t->gv0 - 1,
        .z = ftrl ? t->K : 0,
        .alpha = opt->alpha * opt->w_ratio, .beta = opt->beta, .l1 = opt->l1, .l2 = opt->l2};
    const size_t Fk = (size_t)t->F * t->k;
    t->zero = calloc(t->K, sizeof *t->zero);
    t->work = malloc(model_ffm_work_doubles(t->F, t->k) * sizeof *t->work);
    t->gv = calloc(Fk, sizeof *t->gv);
    t->mask = calloc(Fk, sizeof *t->mask);
    t->cnt = calloc(t->F, sizeof *t->cnt);
    if (!t->zero || !t->work || !t->gv || !t->mask || !t->cnt)
        goto nomem;
    int rc = train__row_table_create(t->sk, opt->expected_keys, &t->table);
    if (rc != 0) {
        if (why_len)
            snprintf(why, why_len, "could not create the trainer's rows: %s", strerror(-rc));
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
    if (!t->worker) {
        train__row_table_destroy(t->table);
        free(t->zero);
    }
    free_work(t);
    free(t->work);
    free(t->gv);
    free(t->mask);
    free(t->cnt);
    free(t->jids);
    free(t->jvals);
    free(t);
}

int train_ffm_weights(const train_ffm_t *t, uint64_t id, float *out)
{
    const float *row = train__row_table_find(t->table, id);
    if (!row)
        return 0;
    memcpy(out, row, (size_t)t->K * sizeof *out);
    return 1;
}

int train_ffm_reserve(train_ffm_t *t, uint32_t n)
{
    if (n <= t->cap && t->live)
        return 0;
    uint32_t cap = train__grow(t->cap, n);
    if (!cap)
        return -ENOMEM;
    float **live = malloc((size_t)cap * sizeof *live);
    float *selfv = malloc((size_t)cap * t->k * sizeof *selfv);
    float *scratch = malloc((size_t)cap * t->sk * sizeof *scratch);
    if (!live || !selfv || !scratch) {
        free(live);
        free(selfv);
        free(scratch);
        return -ENOMEM;
    }
    free_work(t);
    t->live = live;
    t->selfv = selfv;
    t->scratch = scratch;
    t->cap = cap;
    return 0;
}

/* A new id's state row: w = 0, v_c uniform in [0, init_stdev) from a hash
 * of (seed, id, c), optimizer sums 0.  LIBFFM's start (U(0, 1/sqrt(k))):
 * on the quality sets it beat N(0, sd^2) for every sd tried. */
static void init_row(const train_ffm_t *t, uint64_t id, float *row)
{
    memset(row, 0, (size_t)t->sk * sizeof *row);
    if (t->opt.init_stdev == 0)
        return;
    const uint64_t h = train__init_hash(t->opt.seed, id);
    for (uint32_t c = 0; c < t->K - 1; c++)
        row[1 + c] = (float)(t->opt.init_stdev * train__uniform(h, c));
}

/* Asks for a row's cache lines (it is read, then stepped, soon): the
 * sample's rows then arrive together instead of one miss after another. */
static inline void prefetch_row(const float *row, uint32_t floats)
{
    const char *p = (const char *)row, *end = (const char *)(row + floats);
    for (; p < end; p += 64)
        __builtin_prefetch(p, 1, 3);
    __builtin_prefetch(end - 1, 1, 3);
}

/* Finds (creates and initialises) the bias's and the sample's rows in the
 * table: t->live[j], the bias's returned.  A feature with x = 0 takes no
 * step, so its row is only looked for (live[j] = t->zero when it has none:
 * it adds 0 to the margin whatever its row).  NULL when the table cannot
 * grow. */
static void init_row_cb(const void *ctx, uint64_t id, float *row)
{
    init_row(ctx, id, row);
}

/* attach() for a worker (ON THREADS): rows made by upsert_mt, initialised
 * before other workers can find them. */
static float *attach_mt(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n)
{
    float *bias = train__row_table_upsert_mt(t->table, MODEL_BIAS_ID, NULL, NULL);
    if (!bias)
        return NULL;
    for (uint32_t j = 0; j < n; j++) {
        if (values && values[j] == 0) {
            float *found = train__row_table_find(t->table, ids[j]);
            t->live[j] = found ? found : t->zero;
            continue;
        }
        float *row = train__row_table_upsert_mt(t->table, ids[j], init_row_cb, t);
        if (!row)
            return NULL;
        prefetch_row(row, t->sk);
        t->live[j] = row;
    }
    return bias;
}

/* FTRL (LIVE): row's z, n for its served w (row[0]) with zero statistics:
 * n = 0 (1 when beta and l2 are 0: at n = 0 every z gives w = 0) and the z
 * whose closed form is w, train_fm.c's choice, so that w does not move
 * before the id's first step.  l1, l2 are 0 for the bias. */
static void ftrl_from_served(const train_ffm_t *t, bool bias, float *row)
{
    if (row[0] == 0)
        return; /* z = n = 0 gives w = 0 */
    const double alpha = t->opt.alpha * t->opt.w_ratio;
    const double l1 = bias ? 0 : t->opt.l1, l2 = bias ? 0 : t->opt.l2;
    const double n0 = t->opt.beta == 0 && l2 == 0 ? 1 : 0;
    const double d = (t->opt.beta + sqrt(n0)) / alpha + l2;
    const double w = row[0];
    row[t->K] = (float)(-w * d - copysign(l1, w));
    row[t->K + 1] = (float)n0;
}

/* A new row of id (created in the table, sk floats): from the served
 * store's row when attached and it has one (LIVE), else init_row (or all 0
 * for the bias). */
void train__ffm_new_row(const train_ffm_t *t, uint64_t id, float *row)
{
    if (t->served) {
        memset(row, 0, (size_t)t->sk * sizeof *row);
        if (store_lookup(t->served, id, row)) {
            if (t->opt.optimizer == TRAIN_FTRL)
                ftrl_from_served(t, id == MODEL_BIAS_ID, row);
            return;
        }
    }
    if (id != MODEL_BIAS_ID)
        init_row(t, id, row);
}

static float *attach(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n)
{
    if (t->worker)
        return attach_mt(t, ids, values, n);
    bool created;
    float *bias = train__row_table_upsert(t->table, MODEL_BIAS_ID, &created);
    if (!bias)
        return NULL; /* a new bias row is all 0: nothing more to initialise */
    if (created && t->served)
        train__ffm_new_row(t, MODEL_BIAS_ID, bias);
    for (uint32_t j = 0; j < n; j++) {
        if (values && values[j] == 0) {
            float *found = train__row_table_find(t->table, ids[j]);
            t->live[j] = found ? found : t->zero; /* never stepped: x = 0 */
            continue;
        }
        float *row = train__row_table_upsert(t->table, ids[j], &created);
        if (!row)
            return NULL;
        if (created)
            train__ffm_new_row(t, ids[j], row);
        else
            prefetch_row(row, t->sk);
        t->live[j] = row;
    }
    return bias;
}

/* t->live for a sample whose rows must not be created: each id's row as
 * found; an unknown id's row as a new one would start (init: built in
 * scratch) or 0 (as a server sees it).  Returns the bias. */
static float gather(train_ffm_t *t, const uint64_t *ids, uint32_t n, bool init)
{
    for (uint32_t j = 0; j < n; j++) {
        float *row = train__row_table_find(t->table, ids[j]);
        if (!row && init) {
            row = t->scratch + (size_t)j * t->sk;
            train__ffm_new_row(t, ids[j], row);
        } else if (!row && t->served) { /* as served: its row, or 0 */
            float *sv = t->scratch + (size_t)j * t->sk;
            if (store_lookup(t->served, ids[j], sv))
                row = sv;
        }
        t->live[j] = row ? row : t->zero;
    }
    const float *bias = train__row_table_find(t->table, MODEL_BIAS_ID);
    float sv[STORE_MAX_VALUE_FLOATS];
    if (!bias && t->served && store_lookup(t->served, MODEL_BIAS_ID, sv))
        bias = sv;
    return bias ? bias[0] : 0;
}

/* p of the rows in t->live through model_ffm_score_sample: what model_ffm_scores()
 * gives for the sample as the shared block and one empty item; leaves B
 * in t->work. */
static float forward(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n,
                     float bias)
{
    codec_block_t blk = {.ids = ids, .values = values, .n = n};
    return model_ffm_score_sample(&blk, (const float *const *)t->live, bias, t->F, t->k,
                                  t->opt.norm, t->work);
}

float train_ffm_predict(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n)
{
    if ((n > t->cap || !t->live) && train_ffm_reserve(t, n) != 0)
        return NAN;
    return forward(t, ids, values, n, gather(t, ids, n, false));
}

/* The scales of the linear and pair terms: s and s^2, from sum x^2 summed
 * as ffm.c sums it. */
static void scales(const train_ffm_t *t, const float *values, uint32_t n, double *s, double *s2)
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

/* Sets the k mask floats of block h to on. */
static inline void mask_block(train_ffm_t *t, uint32_t h, float on)
{
    for (uint32_t f = 0; f < t->k; f++)
        t->mask[(size_t)h * t->k + f] = on;
}

/* After a forward: counts the features with x != 0 per field (t->cnt) and
 * sets the mask of every block h to "another feature lies in field h" as
 * seen from outside it (cnt[h] > 0); factor_gradient() corrects a
 * feature's own block. */
static void prepare_backward(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n)
{
    const uint32_t F = t->F;
    memset(t->cnt, 0, F * sizeof *t->cnt);
    for (uint32_t j = 0; j < n; j++)
        if (!values || values[j] != 0)
            t->cnt[ffm_field(ids[j], F)]++;
    for (uint32_t g = 0; g < F; g++)
        mask_block(t, g, t->cnt[g] > 0);
}

/* t->gv = feature j's v gradient; sets the mask of its own block fj to
 * "another feature lies in fj" (cnt[fj] >= 2).  Blocks whose mask is 0
 * have no data gradient; their gv is not used.  Undo the mask change with
 * mask_block(t, fj, 1) before the next feature. */
static void factor_gradient(train_ffm_t *t, const float *vs, uint32_t fj, double x, double scale)
{
    train__ffm_factor_gradient(t->gv, t->work, vs, t->F, t->k, fj, scale * x, x);
    mask_block(t, fj, t->cnt[fj] >= 2);
}

/* One coordinate's step (the bias, a w) in double: gradient g, L2 l2.
 * Adagrad keeps its sum at *G. */
static inline void adagrad_1(float *c, float *G, double g, double l2, double alpha, double eps)
{
    double gi = g + l2 * (double)*c;
    double g2 = (double)*G + gi * gi;
    *G = (float)g2;
    *c = (float)((double)*c - alpha * gi / (sqrt(g2) + eps));
}

static inline void sgd_1(float *c, double g, double l2, double alpha)
{
    *c = (float)((double)*c - alpha * (g + l2 * (double)*c));
}

/* FTRL-Proximal step of w (*w) with its z, n at zn[0], zn[1]: train_fm.c's
 * ftrl(), the closed form train_lr_ftrl_weight's. */
static inline void ftrl_1(float *w, float *zn, double g, double l1, double l2, double alpha,
                          double beta)
{
    double z = zn[0], n = zn[1];
    double n2 = n + g * g;
    double sq2 = sqrt(n2);
    z += g - (sq2 - sqrt(n)) / alpha * (double)*w;
    double nw = 0;
    if (fabs(z) > l1)
        nw = -(z - copysign(l1, z)) / ((beta + sq2) / alpha + l2);
    zn[0] = (float)z;
    zn[1] = (float)n2;
    *w = (float)nw;
}

/* Steps w (row[0]) by gradient gw with L1 l1 (FTRL only) and L2 l2. */
static void step_w(const train_ffm_t *t, float *row, double gw, double l1, double l2)
{
    const double alpha_w = t->opt.alpha * t->opt.w_ratio;
    switch (t->opt.optimizer) {
    case TRAIN_SGD:
        sgd_1(row, gw, l2, alpha_w);
        break;
    case TRAIN_ADAGRAD:
        adagrad_1(row, row + t->K, gw, l2, alpha_w, t->opt.beta);
        break;
    case TRAIN_FTRL:
        ftrl_1(row, row + t->K, gw, l1, l2, alpha_w, t->opt.beta);
        break;
    }
}

/* Steps row's v by t->gv where t->mask says. */
static void step_v(const train_ffm_t *t, float *row)
{
    const uint32_t Fk = t->F * t->k;
    const float alpha = (float)t->opt.alpha, l2v = (float)t->opt.l2_v;
    if (t->opt.optimizer == TRAIN_SGD)
        train__ffm_sgd_v(row + 1, t->gv, t->mask, Fk, l2v, alpha);
    else
        train__ffm_adagrad_v(row + 1, row + t->gv0, t->gv, t->mask, Fk, l2v, alpha,
                             (float)t->opt.beta); /* FTRL's factors too */
}

/* LIVE: row's serving prefix (K floats) into the served store when
 * attached (only checked when not write).  0, -ERANGE when it is not
 * finite (nothing written), or store_upsert's -errno. */
int train__ffm_write_served(const train_ffm_t *t, uint64_t id, const float *row, bool write)
{
    if (!t->served)
        return 0;
    for (uint32_t c = 0; c < t->K; c++)
        if (!isfinite(row[c]))
            return -ERANGE;
    if (!write)
        return 0;
    int rc = store_upsert_relaxed(t->served, id, row);
    return rc < 0 ? rc : 0;
}

/* One step on logloss x weight. */
int train_ffm_update(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n,
                     float label, float weight, float *p_out)
{
    if (n > t->cap || !t->live) {
        int rc = train_ffm_reserve(t, n);
        if (rc != 0)
            return rc;
    }
    float *bias = attach(t, ids, values, n);
    if (!bias)
        return -ENOMEM;
    for (uint32_t j = 0; j < n; j++) { /* before any step: an id may come twice */
        /* float by float, not memcpy: on threads this read races with other
         * workers' steps (Hogwild), which tests/model/tsan_hogwild.supp names */
        const float *v = t->live[j] + 1 + (size_t)ffm_field(ids[j], t->F) * t->k;
        float *sv = t->selfv + (size_t)j * t->k;
        for (uint32_t f = 0; f < t->k; f++)
            sv[f] = v[f];
    }
    float p = forward(t, ids, values, n, bias[0]);
    if (p_out)
        *p_out = p;
    double g = ((double)p - (double)label) * (double)weight;

    const train__rows_sync_t *sync = &t->sync;
    float before[2 * STORE_MAX_VALUE_FLOATS]; /* SYNC: a row before its step (sk <= 2K + 1) */
    if (sync->fn)
        memcpy(before, bias, (size_t)t->sk * sizeof *bias);
    step_w(t, bias, g, 0, 0);
    int rc = train__ffm_write_served(t, MODEL_BIAS_ID, bias, true);
    if (rc != 0)
        return rc;
    if (sync->fn)
        train__rows_note(sync, MODEL_BIAS_ID, before, bias);
    double s, s2;
    scales(t, values, n, &s, &s2);
    prepare_backward(t, ids, values, n);
    for (uint32_t j = 0; j < n; j++) {
        double x = values ? (double)values[j] : 1.0;
        if (x == 0)
            continue; /* no data gradient on any coordinate */
        /* the gradient at the forward values; the step on the row as it is
         * now (an id named twice already holds its first step) */
        const uint32_t fj = ffm_field(ids[j], t->F);
        factor_gradient(t, t->selfv + (size_t)j * t->k, fj, x, g * s2);
        if (sync->fn)
            memcpy(before, t->live[j], (size_t)t->sk * sizeof *before);
        step_w(t, t->live[j], g * s * x, t->opt.l1, t->opt.l2);
        step_v(t, t->live[j]);
        mask_block(t, fj, 1);
        if (j < t->defer_n) { /* BATCH: served at the frame's end; refused as below */
            rc = train__ffm_write_served(t, ids[j], t->live[j], false);
            t->defer_done = j + 1 > t->defer_done ? j + 1 : t->defer_done;
        } else {
            rc = train__ffm_write_served(t, ids[j], t->live[j], true);
        }
        if (rc != 0)
            return rc;
        if (sync->fn)
            train__rows_note(sync, ids[j], before, t->live[j]);
    }
    return 0;
}

int train_ffm_margin_gradient(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n,
                              double *d_bias, double *grad)
{
    if (n > t->cap || !t->live) {
        int rc = train_ffm_reserve(t, n);
        if (rc != 0)
            return rc;
    }
    const uint32_t K = t->K, Fk = t->F * t->k;
    (void)forward(t, ids, values, n, gather(t, ids, n, true));
    double s, s2;
    scales(t, values, n, &s, &s2);
    prepare_backward(t, ids, values, n);
    *d_bias = 1;
    for (uint32_t j = 0; j < n; j++) {
        double x = values ? (double)values[j] : 1.0;
        double *out = grad + (size_t)j * K;
        memset(out, 0, (size_t)K * sizeof *out);
        if (x == 0)
            continue;
        const uint32_t fj = ffm_field(ids[j], t->F);
        out[0] = s * x;
        factor_gradient(t, t->live[j] + 1 + (size_t)fj * t->k, fj, x, s2); /* not stepped */
        for (uint32_t c = 0; c < Fk; c++)
            if (t->mask[c] != 0)
                out[1 + c] = t->gv[c];
        mask_block(t, fj, 1);
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
        store_extras_set(&x, "norm", t->opt.norm ? "1" : "0") != 0)
        return train__export_refuse(dir, "cannot record the FFM params", err);
    return train__export_table(t->table, t->K, STORE_MODEL_FFM, &x, dir, meta, err);
}

/* train_attach_live (LIVE): 0, or -EINVAL with a sentence when live's rows
 * are not this trainer's serving rows. */
__attribute__((cold)) int train__ffm_attach_live(train_ffm_t *t, store_t *live, char *why,
                                                 size_t why_len)
{
    if (live && (store_value_floats(live) != t->K || store_dtype(live) != STORE_DTYPE_F32)) {
        char buf[200];
        snprintf(buf, sizeof buf,
                 "the served store has %u %s floats per key; this FFM trainer (%u fields, "
                 "k = %u) learns online into 1 + fields x k = %u fp32 floats per key",
                 store_value_floats(live),
                 store_dtype(live) == STORE_DTYPE_F32 ? "fp32" : "non-fp32", t->F, t->k, t->K);
        return train__refuse(buf, why, why_len);
    }
    t->served = live;
    return 0;
}
