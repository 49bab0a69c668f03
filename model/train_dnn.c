/*
 * train_dnn.c — Wide & Deep training (train.h; the table train__dnn_ops):
 * Adagrad for the sparse rows, Adam for the MLP, one step per sample.
 *
 *   margin = bias + out(input) + sum_j w_j x_j,   loss = logloss(sigmoid(margin), y)
 *   g      = d loss / d margin = p - y
 *
 * One sample is one step:
 *
 *   1. one batched store lookup of the sample's ids gives each feature's
 *      state row; a row not found is a new id: w = 0, e drawn from
 *      N(0, init_stdev^2) by a hash of (seed, id, coordinate), sums 0;
 *   2. the serving rows [w | e] are copied out (stride 1 + d, the bias row
 *      first) and scored by model_dnn_scores() as a request whose shared block is
 *      the sample and whose only item is empty: the very code model.c runs,
 *      so an export scores bit for bit as the trainer predicted.  The
 *      activations stay in the work space (model_dnn_activations());
 *   3. backprop through the MLP, row 0 of each activation:
 *
 *        dz_L = g;  for l = L-1 .. 0:
 *          dW_l = a_l^T dz_{l+1}      (outer product)
 *          db_l = dz_{l+1}
 *          da_l = W_l dz_{l+1}        (cblas_sgemv)
 *          dz_l = da_l where a_l > 0 else 0   (ReLU; l > 0)
 *
 *      da_0 is d loss / d input; feature j of field f gets
 *      d e_j = x_j da_0[f*d ..], d w_j = g x_j (wide only), d bias = g;
 *   4. Adam on every MLP parameter (L2 on the weights folded into the
 *      gradient), Adagrad on each feature's row and the bias, each row
 *      written back with store_upsert().
 *
 * State rows (fp32; the serving row is the prefix, so export copies 1 + d
 * floats):  [ w | e_1..e_d | Gw | Ge_1..Ge_d ].  The bias row is
 * [ b | 0..0 | Gb | 0..0 ].  The MLP lives in one array, W_0 | b_0 | W_1 |
 * b_1 | ..., with Adam's moments m, v beside it; weights start He-normal
 * (std sqrt(2 / fan_in)) before a ReLU and Xavier-normal (std
 * sqrt(2 / (fan_in + fan_out))) on the output layer, from a hash of (seed,
 * layer, index); biases start at 0.
 *
 * A sample's weight scales g (weight 1 is exact: the same arithmetic).
 *
 * A feature id repeated within one sample: its gradient is taken at the
 * forward values, then the row is re-read from the store (it already holds
 * the first occurrence's step) before this occurrence's step is applied —
 * the rule train_lr.c and train_fm.c follow.  A feature id equal to
 * MODEL_BIAS_ID reads the bias row ([b | 0..0], as served) and is not
 * stepped.
 *
 * LIVE (train_attach_live_model): the served store of a DNN holds each id's
 * serving row [w | e] (1 + d fp32 floats; the bias row [b | 0..0]) and
 * the served model's extras its MLP.  Attached, the trainer copies that
 * MLP over its own and freezes it (no Adam step: the MLP is dense, and a
 * served copy stepped per sample would be read torn by every request;
 * the online part is the wide weights, the embeddings and the bias), each
 * step writes the stepped rows' prefixes, the bias's included, into the
 * served store with store_upsert_relaxed (a key new to it is inserted; no
 * request waits for a trainer preempted mid-row), an id the
 * state lacks starts from its served row with zero sums (an id the served
 * store lacks too, as a new id), and predictions read the served rows of
 * the ids the state lacks, so train_predict equals the served score.  A
 * row whose serving floats would not be finite is not written: -ERANGE.
 * Detached, the MLP learns again (Adam from its moments as they were).
 * With a train_dnn_sync_t attached (SYNC below) the MLP learns while
 * attached: it is the trainer's private copy, never the served one.
 *
 * SYNC (train_sync.h: ROWS, partitioned replicas): R = K = 1 + d
 * coordinates, G at K + i.  A hooked step copies each row before stepping
 * it.  The MLP (train_sync.h: DENSE) is synced only when a
 * train_dnn_sync_t is attached (train_dnn_sync_attach): the step then
 * hands the MLP's gradient to its 1-bit Adam instead of adam(), and the
 * replicas exchange the MLP at intervals (train_dnn_sync_publish_mlp,
 * _apply_mlp); attached LIVE too, the MLP then learns (the frozen rule is
 * for a trainer alone: the server swaps whole copies in for its scorers,
 * model_dnn_install_mlp, from train_dnn_sync_net).  Without one, replicas
 * agree on the rows' scores only while the MLP is frozen (LIVE).
 *
 * THREAD SAFETY: one thread drives a trainer (train.h).
 */
#include "train_impl.h"
#include "model.h"
#include "train_export.h"
#include "train_sync_impl.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ADAM_BETA1 0.9
#define ADAM_BETA2 0.999
#define ADAM_EPS 1e-8
#define ADAGRAD_EPS 1e-6

struct train_dnn {
    train_dnn_options_t opt;
    store_t *store;     /* owned: state rows, sk floats per id */
    uint32_t d;         /* embedding size */
    uint32_t K;         /* serving floats per id: 1 + d */
    uint32_t sk;        /* state floats per id: 2 K */
    dnn_net_t net;      /* W, b point into dense */
    size_t n_dense;     /* floats of dense, grad, adam_m, adam_v */
    float *dense;       /* owned: W_0 | b_0 | W_1 | b_1 ... */
    float *grad;        /* owned: d loss / d dense of the last sample */
    float *adam_m;      /* owned: first moments */
    float *adam_v;      /* owned: second moments */
    uint64_t steps;     /* Adam steps taken */
    double b1t, b2t;    /* beta1^steps, beta2^steps */
    float *work;        /* owned: model_dnn_work_floats(&net) */
    float *delta;       /* owned: 2 x the widest layer, backprop buffers */
    train__work_t w;    /* the current sample's state rows (sk floats each) */
    uint32_t rows_cap;  /* features rows holds */
    float *rows;        /* (cap + 1) * K: serving rows, bias row first */
    store_t *served;    /* not owned, NULL = none: the served store written through (LIVE) */
    bool frozen;        /* the MLP takes no step (LIVE) */
    train__rows_sync_t sync; /* SYNC: the layout, and the hook (NULL = none) */
    train_dnn_sync_t *dense_sync; /* not owned, NULL = none: steps the MLP instead of adam() */
};

void train_dnn_defaults(train_dnn_options_t *o)
{
    memset(o, 0, sizeof *o);
    o->fields = 26;
    o->dim = 16;
    o->n_hidden = 2;
    o->hidden[0] = 256;
    o->hidden[1] = 128;
    o->wide = true;
    o->lr_sparse = 0.03; /* both from a grid over criteo_tiny, xlearn_criteo, avazu_rx */
    o->lr_dense = 3e-4;
    o->l2 = 1e-4;
    o->l2_dense = 0;
    o->init_stdev = 0.01;
    o->seed = 1;
}

static void *alloc_floats(size_t n)
{
    void *p = NULL;
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        return NULL;
    return p;
}

/* A new id's state row (train__init_fn; ctx is the trainer). */
static void init_row(const void *ctx, uint64_t id, float *row)
{
    const train_dnn_t *t = ctx;
    memset(row, 0, (size_t)t->sk * sizeof *row);
    if (id == MODEL_BIAS_ID)
        return; /* served as [b | 0..0] */
    for (uint32_t k = 0; k < t->d; k++)
        row[1 + k] = (float)(t->opt.init_stdev * train__gauss(t->opt.seed, id, k));
}

/* The MLP's starting weights: a function of (seed, layer, index) only. */
static void init_dense(train_dnn_t *t)
{
    const dnn_net_t *n = &t->net;
    for (uint32_t l = 0; l < n->n_layers; l++) {
        const uint32_t fi = n->width[l], fo = n->width[l + 1];
        const double sd = l + 1 < n->n_layers ? sqrt(2.0 / fi) : sqrt(2.0 / (fi + fo));
        float *W = (float *)n->W[l];
        uint64_t key = UINT64_C(0xd1b54a32d192ed03) * (l + 1);
        for (size_t i = 0; i < (size_t)fi * fo; i++)
            W[i] = (float)(sd * train__gauss(t->opt.seed, key, i));
        memset((float *)n->b[l], 0, fo * sizeof(float));
    }
}

static const char *check_options(const train_dnn_options_t *o, char *buf, size_t len)
{
    if (o->fields < 1 || o->fields > 256)
        return "fields must be 1..256";
    if (o->dim < 1 || o->dim > TRAIN_DNN_MAX_DIM) {
        snprintf(buf, len, "dim must be 1..%d", TRAIN_DNN_MAX_DIM);
        return buf;
    }
    if ((uint64_t)o->fields * o->dim > DNN_MAX_WIDTH) {
        snprintf(buf, len, "fields x dim = %u x %u is more than %d inputs", o->fields, o->dim,
                 DNN_MAX_WIDTH);
        return buf;
    }
    if (o->n_hidden > DNN_MAX_LAYERS - 1) {
        snprintf(buf, len, "at most %d hidden layers", DNN_MAX_LAYERS - 1);
        return buf;
    }
    for (uint32_t l = 0; l < o->n_hidden; l++)
        if (o->hidden[l] < 1 || o->hidden[l] > DNN_MAX_WIDTH) {
            snprintf(buf, len, "hidden layer %u: width %u is not in 1..%d", l + 1, o->hidden[l],
                     DNN_MAX_WIDTH);
            return buf;
        }
    const train__check_t checks[] = {
        {o->lr_sparse, true, "sparse learning rate must be > 0"},
        {o->lr_dense, true, "dense learning rate must be > 0"},
        {o->l2, false, "l2 must be >= 0"},
        {o->l2_dense, false, "dense l2 must be >= 0"},
        {o->init_stdev, false, "init stdev must be >= 0"},
    };
    return train__check_all(checks, sizeof checks / sizeof *checks);
}

__attribute__((cold)) int train_dnn_create(const train_dnn_options_t *opt, train_dnn_t **out,
                                           char *why, size_t why_len)
{
    char buf[128];
    const char *bad = check_options(opt, buf, sizeof buf);
    if (bad)
        return train__refuse(bad, why, why_len);
    model_dnn_blas_init();
    train_dnn_t *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->opt = *opt;
    t->d = opt->dim;
    t->K = 1 + opt->dim;
    t->sk = 2 * t->K;
    t->w.sk = t->sk;
    t->sync = (train__rows_sync_t){.r = t->K, .g0 = t->K};
    t->b1t = t->b2t = 1.0;

    dnn_net_t *n = &t->net;
    n->fields = opt->fields;
    n->dim = opt->dim;
    n->wide = opt->wide;
    n->n_layers = opt->n_hidden + 1;
    n->width[0] = opt->fields * opt->dim;
    for (uint32_t l = 0; l < opt->n_hidden; l++)
        n->width[l + 1] = opt->hidden[l];
    n->width[n->n_layers] = 1;
    size_t off_w[DNN_MAX_LAYERS], off_b[DNN_MAX_LAYERS], widest = 0;
    for (uint32_t l = 0; l < n->n_layers; l++) {
        off_w[l] = t->n_dense;
        t->n_dense += ((size_t)n->width[l] * n->width[l + 1] + 15) & ~(size_t)15;
        off_b[l] = t->n_dense;
        t->n_dense += ((size_t)n->width[l + 1] + 15) & ~(size_t)15;
    }
    for (uint32_t l = 0; l <= n->n_layers; l++)
        widest = n->width[l] > widest ? n->width[l] : widest;

    int rc = -ENOMEM;
    t->dense = alloc_floats(t->n_dense);
    t->grad = alloc_floats(t->n_dense);
    t->adam_m = alloc_floats(t->n_dense);
    t->adam_v = alloc_floats(t->n_dense);
    t->delta = alloc_floats(2 * widest);
    if (!t->dense || !t->grad || !t->adam_m || !t->adam_v || !t->delta)
        goto fail;
    /* padding between the arrays stays 0 for ever: the dense-array view
     * (train_dnn_dense) and the optimizers may run over it */
    memset(t->dense, 0, t->n_dense * sizeof(float));
    memset(t->grad, 0, t->n_dense * sizeof(float));
    memset(t->adam_m, 0, t->n_dense * sizeof(float));
    memset(t->adam_v, 0, t->n_dense * sizeof(float));
    for (uint32_t l = 0; l < n->n_layers; l++) {
        n->W[l] = t->dense + off_w[l];
        n->b[l] = t->dense + off_b[l];
    }
    init_dense(t);
    t->work = alloc_floats(model_dnn_work_floats(n));
    if (!t->work)
        goto fail;
    rc = train__store_create(t->sk, opt->shards, opt->expected_keys, &t->store, why, why_len);
    if (rc != 0) {
        train_dnn_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
fail:
    if (why_len)
        snprintf(why, why_len, "could not create the DNN trainer: %s", strerror(-rc));
    train_dnn_destroy(t);
    return rc;
}

void train_dnn_destroy(train_dnn_t *t)
{
    if (!t)
        return;
    store_destroy(t->store);
    free(t->dense);
    free(t->grad);
    free(t->adam_m);
    free(t->adam_v);
    free(t->work);
    free(t->delta);
    train__work_free(&t->w);
    free(t->rows);
    free(t);
}

const store_t *train_dnn_store(const train_dnn_t *t) { return t->store; }
const dnn_net_t *train_dnn_net(const train_dnn_t *t) { return &t->net; }
const float *train_dnn_dense(const train_dnn_t *t) { return t->dense; }
size_t train_dnn_dense_floats(const train_dnn_t *t) { return t->n_dense; }

int train_dnn_reserve(train_dnn_t *t, uint32_t n)
{
    if (n <= t->rows_cap && t->rows)
        return 0;
    int rc = train__work_reserve(&t->w, n);
    if (rc != 0)
        return rc;
    float *rows = malloc(((size_t)t->w.cap + 1) * t->K * sizeof *rows);
    if (!rows)
        return -ENOMEM;
    free(t->rows);
    t->rows = rows;
    t->rows_cap = t->w.cap;
    return 0;
}

/* train__init_fn of an update with a served store (LIVE): the served row
 * with zero sums, or a new id's row when the served store lacks it too. */
static void served_or_init(const void *ctx, uint64_t id, float *row)
{
    const train_dnn_t *t = ctx;
    memset(row, 0, (size_t)t->sk * sizeof *row);
    if (!store_lookup(t->served, id, row))
        init_row(ctx, id, row);
}

/* train__init_fn of a prediction with a served store: the served row, or 0
 * (an id nobody has scores as served). */
static void served_or_zero(const void *ctx, uint64_t id, float *row)
{
    const train_dnn_t *t = ctx;
    memset(row, 0, (size_t)t->sk * sizeof *row);
    (void)store_lookup(t->served, id, row);
}

/* LIVE: row's serving prefix (K floats) into the served store.  0,
 * -ERANGE when not finite (nothing written), or store_upsert's -errno. */
static int write_served(const train_dnn_t *t, uint64_t id, const float *row)
{
    for (uint32_t c = 0; c < t->K; c++)
        if (!isfinite(row[c]))
            return -ERANGE;
    int rc = store_upsert_relaxed(t->served, id, row);
    return rc < 0 ? rc : 0;
}

/* Scores the n state rows in t->w.state (bias b) through model_dnn_scores, leaving
 * the activations in t->work. */
static float forward(train_dnn_t *t, const uint64_t *ids, const float *values, uint32_t n,
                     float b)
{
    const uint32_t K = t->K, sk = t->sk;
    float *r = t->rows;
    memset(r, 0, K * sizeof *r);
    r[0] = b;
    for (uint32_t j = 0; j < n; j++)
        memcpy(r + (size_t)(j + 1) * K, t->w.state + (size_t)j * sk, K * sizeof *r);
    codec_block_t shared = {.ids = ids, .values = values, .n = n};
    codec_block_t empty = {.ids = ids, .values = NULL, .n = 0};
    float p;
    model_dnn_scores(&t->net, &shared, &empty, 1, t->rows, t->work, &p);
    return p;
}

float train_dnn_predict(train_dnn_t *t, const uint64_t *ids, const float *values, uint32_t n)
{
    if ((n > t->rows_cap || !t->rows) && train_dnn_reserve(t, n) != 0)
        return NAN;
    float b = 0;
    if (t->served) { /* the state's rows, else the served ones (LIVE) */
        train__work_load(&t->w, t->store, &(uint64_t){MODEL_BIAS_ID}, 1, served_or_zero, t);
        b = t->w.state[0];
        train__work_load(&t->w, t->store, ids, n, served_or_zero, t);
    } else {
        store_lookup_batch(t->store, &(uint64_t){MODEL_BIAS_ID}, 1, t->w.state, NULL);
        b = t->w.state[0];
        store_lookup_batch(t->store, ids, n, t->w.state, NULL);
    }
    for (uint32_t j = 0; j < n; j++)
        if (ids[j] == MODEL_BIAS_ID) /* served as [b | 0..0] */
            memset(t->w.state + (size_t)j * t->sk + 1, 0, t->d * sizeof(float));
    return forward(t, ids, values, n, b);
}

/* Loads the bias row into brow and the sample's rows into t->w.state (new ids
 * initialised), then the forward pass.  Returns p. */
static float load_and_forward(train_dnn_t *t, const uint64_t *ids, const float *values,
                              uint32_t n, float *brow)
{
    const uint32_t sk = t->sk;
    memset(brow, 0, sk * sizeof *brow);
    if (!store_lookup(t->store, MODEL_BIAS_ID, brow) && t->served)
        served_or_zero(t, MODEL_BIAS_ID, brow);
    train__work_load(&t->w, t->store, ids, n, t->served ? served_or_init : init_row, t);
    for (uint32_t j = 0; j < n; j++) {
        if (ids[j] == MODEL_BIAS_ID) { /* served as [b | 0..0] */
            float *row = t->w.state + (size_t)j * sk;
            memcpy(row, brow, sk * sizeof *row);
            memset(row + 1, 0, t->d * sizeof *row);
        }
    }
    return forward(t, ids, values, n, brow[0]);
}

/* Backprop of g = d loss / d margin through the MLP: fills t->grad (when
 * dense: a frozen MLP takes no step) and returns d loss / d input
 * (width[0] floats, in t->delta). */
static const float *backward(train_dnn_t *t, double g, bool dense)
{
    const dnn_net_t *n = &t->net;
    const uint32_t L = n->n_layers;
    uint32_t widest = 0;
    for (uint32_t l = 0; l <= L; l++)
        widest = n->width[l] > widest ? n->width[l] : widest;
    float *dz = t->delta, *da = t->delta + widest;
    dz[0] = (float)g;
    for (uint32_t l = L; l-- > 0;) {
        const uint32_t fi = n->width[l], fo = n->width[l + 1];
        const float *a = model_dnn_activations(n, t->work, l); /* row 0: our sample */
        float *gW = t->grad + (n->W[l] - t->dense), *gb = t->grad + (n->b[l] - t->dense);
        for (uint32_t i = 0; i < fi && dense; i++) {
            float *gr = gW + (size_t)i * fo;
            const float ai = a[i];
            for (uint32_t k = 0; k < fo; k++)
                gr[k] = ai * dz[k];
        }
        if (dense)
            memcpy(gb, dz, fo * sizeof *gb);
        /* da = W_l dz: row-major fi x fo times fo */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)fi, (int)fo, 1.0f, n->W[l], (int)fo, dz, 1,
                    0.0f, da, 1);
        if (l > 0)
            for (uint32_t i = 0; i < fi; i++)
                da[i] = a[i] > 0.0f ? da[i] : 0.0f; /* ReLU: a > 0 iff its input was */
        float *tmp = dz;
        dz = da;
        da = tmp;
    }
    return dz;
}

/* Adam on every MLP parameter, gradient t->grad (+ L2 on the weights). */
static void adam(train_dnn_t *t)
{
    const dnn_net_t *n = &t->net;
    t->steps++;
    t->b1t *= ADAM_BETA1;
    t->b2t *= ADAM_BETA2;
    const float lr = (float)(t->opt.lr_dense * sqrt(1.0 - t->b2t) / (1.0 - t->b1t));
    const float b1 = (float)ADAM_BETA1, b2 = (float)ADAM_BETA2, eps = (float)ADAM_EPS;
    for (uint32_t l = 0; l < n->n_layers; l++) {
        for (int bias = 0; bias < 2; bias++) {
            size_t off = (bias ? n->b[l] : n->W[l]) - t->dense;
            size_t cnt = bias ? n->width[l + 1] : (size_t)n->width[l] * n->width[l + 1];
            const float l2 = bias ? 0.0f : (float)t->opt.l2_dense;
            float *restrict w = t->dense + off, *restrict m = t->adam_m + off,
                            *restrict v = t->adam_v + off;
            const float *restrict gr = t->grad + off;
            for (size_t i = 0; i < cnt; i++) {
                float gi = gr[i] + l2 * w[i];
                m[i] = b1 * m[i] + (1.0f - b1) * gi;
                v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
                w[i] -= lr * m[i] / (sqrtf(v[i]) + eps);
            }
        }
    }
}

/* SYNC (DENSE): the MLP's step by the replicas' 1-bit Adam instead of
 * adam(), L2 on the weights folded into the gradient as adam() folds it.
 * -ERANGE (the MLP untouched) when the step would not be finite. */
static int dense_sync_step(train_dnn_t *t)
{
    const dnn_net_t *n = &t->net;
    const float l2 = (float)t->opt.l2_dense;
    for (uint32_t l = 0; l < n->n_layers && l2 != 0.0f; l++) {
        size_t off = n->W[l] - t->dense, cnt = (size_t)n->width[l] * n->width[l + 1];
        for (size_t i = 0; i < cnt; i++)
            t->grad[off + i] += l2 * t->dense[off + i];
    }
    return train_dnn_sync_step(t->dense_sync, t->dense, t->grad) == 0 ? 0 : -ERANGE;
}

/* Adagrad step of one coordinate c with accumulator G. */
static inline void adagrad(float *c, float *G, double g, double alpha)
{
    double g2 = (double)*G + g * g;
    *G = (float)g2;
    *c = (float)((double)*c - alpha * g / (sqrt(g2) + ADAGRAD_EPS));
}

/* d loss / d [w | e] of feature j (row at forward values) into out. */
static inline void sparse_grad(const train_dnn_t *t, uint64_t id, double x, double g,
                               const float *dinput, float *out)
{
    const uint32_t d = t->d;
    const float *di = dinput + (size_t)((id >> 56) % t->net.fields) * d;
    out[0] = t->net.wide ? (float)(g * x) : 0.0f;
    for (uint32_t k = 0; k < d; k++)
        out[1 + k] = (float)(x * di[k]);
}

/* One step on logloss x weight. */
int train_dnn_update(train_dnn_t *t, const uint64_t *ids, const float *values, uint32_t n,
                     float label, float weight, float *p_out)
{
    if (n > t->rows_cap || !t->rows) {
        int rc = train_dnn_reserve(t, n);
        if (rc != 0)
            return rc;
    }
    const uint32_t d = t->d, sk = t->sk, K = t->K;
    float brow[STORE_MAX_VALUE_FLOATS];
    float p = load_and_forward(t, ids, values, n, brow);
    if (p_out)
        *p_out = p;
    const double g = ((double)p - (double)label) * (double)weight;
    const bool mlp_learns = !t->frozen || t->dense_sync; /* SYNC: the replicas' 1-bit Adam */
    const float *dinput = backward(t, g, mlp_learns);

    const train__rows_sync_t *sync = &t->sync;
    float before[STORE_MAX_VALUE_FLOATS]; /* SYNC: a row before its step */
    if (sync->fn)
        memcpy(before, brow, (size_t)sk * sizeof *brow);
    adagrad(&brow[0], &brow[K], g, t->opt.lr_sparse);
    int rc = t->served ? write_served(t, MODEL_BIAS_ID, brow) : 0;
    if (rc == 0)
        rc = store_upsert(t->store, MODEL_BIAS_ID, brow);
    if (rc < 0)
        return rc;
    if (sync->fn)
        train__rows_note(sync, MODEL_BIAS_ID, before, brow);

    seen_set_next(&t->w.seen);
    const double alpha = t->opt.lr_sparse, l2 = t->opt.l2;
    float gr[STORE_MAX_VALUE_FLOATS / 2];
    for (uint32_t j = 0; j < n; j++) {
        if (ids[j] == MODEL_BIAS_ID)
            continue;
        float *row = t->w.state + (size_t)j * sk;
        const double x = values ? (double)values[j] : 1.0;
        sparse_grad(t, ids[j], x, g, dinput, gr);
        train__work_repeat(&t->w, t->store, ids[j], false, row,
                           t->served ? served_or_init : init_row, t);
        if (sync->fn)
            memcpy(before, row, (size_t)sk * sizeof *row);
        if (t->net.wide)
            adagrad(&row[0], &row[K], (double)gr[0] + l2 * row[0], alpha);
        for (uint32_t k = 0; k < d; k++)
            adagrad(&row[1 + k], &row[K + 1 + k], (double)gr[1 + k] + l2 * row[1 + k], alpha);
        rc = t->served ? write_served(t, ids[j], row) : 0;
        if (rc == 0)
            rc = store_upsert(t->store, ids[j], row);
        if (rc < 0)
            return rc;
        if (sync->fn)
            train__rows_note(sync, ids[j], before, row);
    }
    if (t->dense_sync) /* every gradient above was taken at the weights of the forward pass */
        return dense_sync_step(t);
    if (t->frozen)
        return 0;
    adam(t);
    return 0;
}

int train_dnn_gradient(train_dnn_t *t, const uint64_t *ids, const float *values, uint32_t n,
                       float label, float *p_out, float *g_rows, float *g_bias, float *g_dense)
{
    if (n > t->rows_cap || !t->rows) {
        int rc = train_dnn_reserve(t, n);
        if (rc != 0)
            return rc;
    }
    float brow[STORE_MAX_VALUE_FLOATS];
    float p = load_and_forward(t, ids, values, n, brow);
    if (p_out)
        *p_out = p;
    const double g = (double)p - (double)label;
    const float *dinput = backward(t, g, true);
    for (uint32_t j = 0; j < n; j++) {
        const double x = values ? (double)values[j] : 1.0;
        sparse_grad(t, ids[j], x, g, dinput, g_rows + (size_t)j * t->K);
        if (ids[j] != MODEL_BIAS_ID && !t->w.found[j]) {
            int rc = store_upsert(t->store, ids[j], t->w.state + (size_t)j * t->sk);
            if (rc < 0)
                return rc;
        }
    }
    *g_bias = (float)g;
    memcpy(g_dense, t->grad, t->n_dense * sizeof *g_dense);
    return 0;
}

__attribute__((cold)) int train_dnn_export(const train_dnn_t *t, const char *dir,
                                           const store_meta_t *meta, store_error_t *err)
{
    store_extras_t x = {0};
    if (model_dnn_net_to_extras(&t->net, &x) != 0)
        return train__export_refuse(dir, "the network does not fit a snapshot's extras", err);
    return train__export_rows(t->store, 0, t->K, STORE_MODEL_DNN, &x, dir, meta, err);
}

/* train_attach_live_model (LIVE): checks live's rows and x's MLP against
 * the trainer's shape, copies the MLP and freezes it.  0, or -EINVAL with
 * a sentence. */
__attribute__((cold)) static int attach_live(train_dnn_t *t, store_t *live,
                                             const store_extras_t *x, char *why, size_t why_len)
{
    char buf[240];
    if (!live) {
        t->served = NULL;
        t->frozen = false;
        return 0;
    }
    if (store_value_floats(live) != t->K || store_dtype(live) != STORE_DTYPE_F32) {
        snprintf(buf, sizeof buf,
                 "the served store has %u %s floats per key; this DNN trainer (dim %u) learns "
                 "online into 1 + dim = %u fp32 floats per key", store_value_floats(live),
                 store_dtype(live) == STORE_DTYPE_F32 ? "fp32" : "non-fp32", t->d, t->K);
        return train__refuse(buf, why, why_len);
    }
    if (!x)
        return train__refuse("a DNN learns online with its served MLP frozen: attach it with "
                             "train_attach_live_model and the served model's extras",
                             why, why_len);
    dnn_net_t net;
    char bad[160];
    if (model_dnn_net_from_extras(x, t->K, &net, bad, sizeof bad) != 0) {
        snprintf(buf, sizeof buf, "the served model's MLP: %s", bad);
        return train__refuse(buf, why, why_len);
    }
    const dnn_net_t *mine = &t->net;
    bool same = net.fields == mine->fields && net.dim == mine->dim && net.wide == mine->wide &&
                net.n_layers == mine->n_layers;
    for (uint32_t l = 0; same && l <= net.n_layers; l++)
        same = net.width[l] == mine->width[l];
    if (!same) {
        snprintf(buf, sizeof buf,
                 "the served DNN (fields %u, dim %u, wide %d, %u layers) is not this trainer's "
                 "(fields %u, dim %u, wide %d, %u layers, or other widths)", net.fields, net.dim,
                 (int)net.wide, net.n_layers, mine->fields, mine->dim, (int)mine->wide,
                 mine->n_layers);
        return train__refuse(buf, why, why_len);
    }
    for (uint32_t l = 0; l < net.n_layers; l++) {
        memcpy((float *)mine->W[l], net.W[l],
               (size_t)net.width[l] * net.width[l + 1] * sizeof(float));
        memcpy((float *)mine->b[l], net.b[l], (size_t)net.width[l + 1] * sizeof(float));
    }
    t->served = live;
    t->frozen = true;
    return 0;
}

/* ---- train_ops_t -------------------------------------------------------------- */

static int ops_create(const train_options_t *o, void **impl, char *why, size_t why_len)
{
    return train_dnn_create(&o->dnn, (train_dnn_t **)impl, why, why_len);
}
static void ops_destroy(void *impl) { train_dnn_destroy(impl); }
static int ops_reserve(void *impl, uint32_t n) { return train_dnn_reserve(impl, n); }
static float ops_predict(void *impl, const uint64_t *ids, const float *values, uint32_t n)
{
    return train_dnn_predict(impl, ids, values, n);
}
static int ops_update(void *impl, const uint64_t *ids, const float *values, uint32_t n,
                      float label, float weight, float *p)
{
    return train_dnn_update(impl, ids, values, n, label, weight, p);
}
static int ops_export(const void *impl, const char *dir, const store_meta_t *meta,
                      store_error_t *err)
{
    return train_dnn_export(impl, dir, meta, err);
}
static const store_t *ops_store(const void *impl) { return train_dnn_store(impl); }
static void ops_describe(const void *impl, char *buf, size_t len)
{
    const train_dnn_options_t *o = &((const train_dnn_t *)impl)->opt;
    char hid[96] = "";
    for (uint32_t l = 0, n = 0; l < o->n_hidden && n < sizeof hid; l++)
        n += (uint32_t)snprintf(hid + n, sizeof hid - n, "%s%u", l ? "," : "", o->hidden[l]);
    snprintf(buf, len,
             "dnn fields=%u dim=%u hidden=%s wide=%d lr=%g (adagrad) lr_dense=%g (adam) l2=%g "
             "init_stdev=%g seed=%llu",
             o->fields, o->dim, hid[0] ? hid : "none", (int)o->wide, o->lr_sparse, o->lr_dense,
             o->l2, o->init_stdev, (unsigned long long)o->seed);
}

static int ops_attach_live(void *impl, store_t *live, const store_extras_t *x, char *why,
                           size_t why_len)
{
    return attach_live(impl, live, x, why, why_len);
}

/* ---- SYNC (train_sync.h: ROWS) ------------------------------------------------ */

static train__rows_sync_t *rows_sync(void *impl) { return &((train_dnn_t *)impl)->sync; }

static int rows_apply(void *impl, uint64_t id, const float *d)
{
    train_dnn_t *t = impl;
    float row[STORE_MAX_VALUE_FLOATS];
    if (!store_lookup(t->store, id, row)) /* as a step starts it */
        (t->served ? served_or_init : init_row)(t, id, row);
    int rc = train__rows_add(&t->sync, id, row, d);
    if (rc != 0)
        return rc;
    rc = t->served ? write_served(t, id, row) : 0;
    if (rc == 0)
        rc = store_upsert(t->store, id, row);
    return rc < 0 ? rc : 0;
}

/* ---- SYNC (DENSE): the MLP under the replicas' 1-bit Adam (train_sync.h) ---- */

static train_dnn_t *dnn_of(train_t *t)
{
    return t && train_ops(t) == &train__dnn_ops ? train__impl(t) : NULL;
}

size_t train_dnn_mlp_floats(const train_t *t)
{
    const train_dnn_t *d = t && train_ops(t) == &train__dnn_ops ? train__impl(t) : NULL;
    return d ? d->n_dense : 0;
}

int train_dnn_sync_attach(train_t *t, train_dnn_sync_t *s)
{
    train_dnn_t *d = dnn_of(t);
    if (!d)
        return -ENOTSUP;
    if (s && train_dnn_sync_count(s) != d->n_dense)
        return -EINVAL;
    d->dense_sync = s;
    return 0;
}

const dnn_net_t *train_dnn_sync_net(const train_t *t)
{
    const train_dnn_t *d = t && train_ops(t) == &train__dnn_ops ? train__impl(t) : NULL;
    return d ? &d->net : NULL;
}

int train_dnn_sync_load_mlp(train_t *t, const dnn_net_t *net)
{
    train_dnn_t *d = dnn_of(t);
    if (!d)
        return -ENOTSUP;
    const dnn_net_t *mine = &d->net;
    bool same = net->n_layers == mine->n_layers && net->fields == mine->fields &&
                net->dim == mine->dim && net->wide == mine->wide;
    for (uint32_t l = 0; same && l <= net->n_layers; l++)
        same = net->width[l] == mine->width[l];
    if (!same)
        return -EINVAL;
    for (uint32_t l = 0; l < net->n_layers; l++) {
        memcpy((float *)mine->W[l], net->W[l], (size_t)net->width[l] * net->width[l + 1] * sizeof(float));
        memcpy((float *)mine->b[l], net->b[l], (size_t)net->width[l + 1] * sizeof(float));
    }
    return 0;
}

int train_dnn_sync_get_params(const train_t *t, float *x, size_t n)
{
    const train_dnn_t *d = t && train_ops(t) == &train__dnn_ops ? train__impl(t) : NULL;
    if (!d)
        return -ENOTSUP;
    if (n != d->n_dense)
        return -EINVAL;
    memcpy(x, d->dense, n * sizeof *x);
    return 0;
}

int train_dnn_sync_set_params(train_t *t, const float *x, size_t n)
{
    train_dnn_t *d = dnn_of(t);
    if (!d)
        return -ENOTSUP;
    if (n != d->n_dense)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return -EINVAL;
    memcpy(d->dense, x, n * sizeof *x);
    return 0;
}

long train_dnn_sync_publish_mlp(train_t *t, uint8_t *buf, size_t cap)
{
    train_dnn_t *d = dnn_of(t);
    if (!d || !d->dense_sync)
        return -ENOTSUP;
    return train_dnn_sync_publish(d->dense_sync, d->dense, buf, cap);
}

long train_dnn_sync_flush_mlp(train_t *t, uint8_t *buf, size_t cap)
{
    train_dnn_t *d = dnn_of(t);
    if (!d || !d->dense_sync)
        return -ENOTSUP;
    return train_dnn_sync_flush(d->dense_sync, d->dense, buf, cap);
}

int train_dnn_sync_apply_mlp(train_t *t, const uint8_t *buf, size_t len, update_error_t *err)
{
    train_dnn_t *d = dnn_of(t);
    if (!d || !d->dense_sync)
        return -ENOTSUP;
    return train_dnn_sync_apply(d->dense_sync, d->dense, buf, len, err);
}

const train__rows_ops_t train__dnn_rows_ops = {.sync = rows_sync, .apply = rows_apply};

const train_ops_t train__dnn_ops = {
    .kind = STORE_MODEL_DNN, .name = "dnn", .create = ops_create, .destroy = ops_destroy,
    .reserve = ops_reserve, .predict = ops_predict, .update = ops_update,
    .export_snapshot = ops_export, .store = ops_store, .describe = ops_describe,
    .attach_live = ops_attach_live, .rows = &train__dnn_rows_ops,
};
