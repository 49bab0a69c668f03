/*
 * test_dnn.c — the Wide & Deep scorer (dnn.c) and its trainer (train_dnn.c).
 *
 *   - model_dnn_scores equals a naive double-precision forward pass (to 2e-5 on
 *     the score) on random nets and rows: 0, 1 and 300 items (more than
 *     DNN_CHUNK), values or binary, wide on and off, no hidden layer up to
 *     three, empty blocks; a misaligned work space gives the same floats;
 *   - the trainer's gradient (train_dnn_gradient) matches central finite
 *     differences of the naive logloss for the bias, every wide weight and
 *     embedding of the sample, and every W and b of every layer;
 *   - model_dnn_net_from_extras refuses a missing param, a dim that disagrees with
 *     K, wrong dense sizes, a missing or extra layer and bad "hidden" text,
 *     each with a sentence naming it; model_dnn_net_to_extras round-trips;
 *   - train -> export -> model_load -> model_score equals train_dnn_predict
 *     bit for bit (repeated ids included), and so does the snapshot scored
 *     directly with model_dnn_scores;
 *   - bad trainer options are refused with a sentence;
 *   - --quality: the DNN with tltrain's defaults on ../shared/data/
 *     criteo_tiny (TL_SHARED_DATA) reaches test AUC >= 0.62; exits 77 when
 *     the data is absent;
 *   - --bench: model_dnn_scores on the standard request (26 fields x 16, 416 ->
 *     256 -> 128 -> 1, 200 items x 200 features + 300 shared), p50/p99 over
 *     2000 runs.  Prints figures, never fails on timing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/dnn.h"
#include "model/train_impl.h"
#include "model/metrics.h"
#include "model/model.h"
#include "model/reader.h"

#include <cblas.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* uniform in [lo, hi) */
static double urand(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * (double)(rnd(s) >> 11) * 0x1.0p-53;
}

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

/* ---- the naive reference ------------------------------------------------- */

/* Dense parameters in double, layer by layer, as dnn_net_t lays them out. */
struct dparams {
    double *W[DNN_MAX_LAYERS];
    double *b[DNN_MAX_LAYERS];
};

static void dparams_from(const dnn_net_t *net, struct dparams *p)
{
    for (uint32_t l = 0; l < net->n_layers; l++) {
        size_t nw = (size_t)net->width[l] * net->width[l + 1];
        p->W[l] = malloc(nw * sizeof(double));
        p->b[l] = malloc(net->width[l + 1] * sizeof(double));
        for (size_t i = 0; i < nw; i++)
            p->W[l][i] = net->W[l][i];
        for (uint32_t i = 0; i < net->width[l + 1]; i++)
            p->b[l][i] = net->b[l][i];
    }
}

static void dparams_free(const dnn_net_t *net, struct dparams *p)
{
    for (uint32_t l = 0; l < net->n_layers; l++) {
        free(p->W[l]);
        free(p->b[l]);
    }
}

/* The margin of one sample with plain loops in double: n features with ids,
 * values x and rows (K = 1 + dim doubles each). */
static double naive_margin(const dnn_net_t *net, const struct dparams *p, double bias,
                           const uint64_t *ids, const double *x, const double *rows, uint32_t n)
{
    const uint32_t d = net->dim, K = d + 1;
    uint32_t widest = 0;
    for (uint32_t l = 0; l <= net->n_layers; l++)
        widest = net->width[l] > widest ? net->width[l] : widest;
    double *a = calloc(widest, sizeof *a), *z = calloc(widest, sizeof *z);
    double wide = 0;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t f = (uint32_t)((ids[j] >> 56) % net->fields);
        wide += rows[(size_t)j * K] * x[j];
        for (uint32_t k = 0; k < d; k++)
            a[f * d + k] += rows[(size_t)j * K + 1 + k] * x[j];
    }
    for (uint32_t l = 0; l < net->n_layers; l++) {
        const uint32_t fi = net->width[l], fo = net->width[l + 1];
        for (uint32_t o = 0; o < fo; o++) {
            double s = p->b[l][o];
            for (uint32_t i = 0; i < fi; i++)
                s += a[i] * p->W[l][(size_t)i * fo + o];
            z[o] = (l + 1 < net->n_layers && s < 0) ? 0 : s;
        }
        memcpy(a, z, fo * sizeof *a);
    }
    double m = bias + a[0] + (net->wide ? wide : 0);
    free(a);
    free(z);
    return m;
}

/* A random net with the given hidden widths; arrays malloc'd (free_net). */
static void random_net(dnn_net_t *net, uint32_t F, uint32_t d, const uint32_t *hidden,
                       uint32_t n_hidden, bool wide, uint64_t *s)
{
    memset(net, 0, sizeof *net);
    net->fields = F;
    net->dim = d;
    net->wide = wide;
    net->n_layers = n_hidden + 1;
    net->width[0] = F * d;
    for (uint32_t l = 0; l < n_hidden; l++)
        net->width[l + 1] = hidden[l];
    net->width[net->n_layers] = 1;
    for (uint32_t l = 0; l < net->n_layers; l++) {
        size_t nw = (size_t)net->width[l] * net->width[l + 1];
        float *W = malloc(nw * sizeof *W), *b = malloc(net->width[l + 1] * sizeof *b);
        double sc = 1.5 / sqrt((double)net->width[l]);
        for (size_t i = 0; i < nw; i++)
            W[i] = (float)urand(s, -sc, sc);
        for (uint32_t i = 0; i < net->width[l + 1]; i++)
            b[i] = (float)urand(s, -0.3, 0.3);
        net->W[l] = W;
        net->b[l] = b;
    }
}

static void free_net(dnn_net_t *net)
{
    for (uint32_t l = 0; l < net->n_layers; l++) {
        free((float *)net->W[l]);
        free((float *)net->b[l]);
    }
}

/* ---- model_dnn_scores vs naive ------------------------------------------------- */

static void test_scores_vs_naive(void **state)
{
    (void)state;
    static const uint32_t h0[] = {0}, h1[] = {8}, h2[] = {16, 8}, h3[] = {9, 7, 5};
    static const struct {
        uint32_t F, d;
        const uint32_t *hidden;
        uint32_t n_hidden;
    } nets[] = {
        {1, 1, h0, 0}, {3, 4, h1, 1}, {5, 16, h2, 2}, {4, 7, h3, 3}, {26, 8, h2, 2},
    };
    static const uint32_t n_items_list[] = {0, 1, 300};
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    int checked = 0;
    for (size_t ni = 0; ni < sizeof nets / sizeof nets[0]; ni++) {
        for (int wide = 0; wide < 2; wide++) {
            dnn_net_t net;
            random_net(&net, nets[ni].F, nets[ni].d, nets[ni].hidden, nets[ni].n_hidden, wide, &s);
            struct dparams dp;
            dparams_from(&net, &dp);
            const uint32_t K = net.dim + 1;
            size_t wf = model_dnn_work_floats(&net);
            float *work = malloc((wf + 1) * sizeof *work);
            float *work2 = malloc(wf * sizeof *work2);
            for (size_t ii = 0; ii < sizeof n_items_list / sizeof n_items_list[0]; ii++) {
                for (int use_vals = 0; use_vals < 2; use_vals++) {
                    const uint32_t n_items = n_items_list[ii];
                    uint32_t ns = (uint32_t)(rnd(&s) % 40) + (n_items == 1 ? 0 : 1);
                    uint32_t *ni_ = malloc((n_items + 1) * sizeof *ni_);
                    uint32_t total = ns;
                    for (uint32_t i = 0; i < n_items; i++) {
                        ni_[i] = i % 7 == 3 ? 0 : (uint32_t)(rnd(&s) % 30);
                        total += ni_[i];
                    }
                    uint64_t *ids = malloc((total + 1) * sizeof *ids);
                    float *vals = malloc((total + 1) * sizeof *vals);
                    float *rows = malloc(((size_t)total + 1) * K * sizeof *rows);
                    for (uint32_t j = 0; j < total; j++) {
                        ids[j] = (rnd(&s) & 0xff00000000000000ULL) | (rnd(&s) >> 40);
                        vals[j] = (float)urand(&s, -1.5, 1.5);
                    }
                    for (size_t c = 0; c < ((size_t)total + 1) * K; c++)
                        rows[c] = (float)urand(&s, -0.5, 0.5);
                    codec_block_t shared = {ids, use_vals ? vals : NULL, ns};
                    codec_block_t *items = malloc((n_items + 1) * sizeof *items);
                    uint32_t off = ns;
                    for (uint32_t i = 0; i < n_items; i++) {
                        items[i] = (codec_block_t){ids + off, use_vals ? vals + off : NULL,
                                                   ni_[i]};
                        off += ni_[i];
                    }
                    float *scores = malloc((n_items + 1) * sizeof *scores);
                    float *scores2 = malloc((n_items + 1) * sizeof *scores2);
                    model_dnn_scores(&net, &shared, items, n_items, rows, work + 1, scores);
                    model_dnn_scores(&net, &shared, items, n_items, rows, work2, scores2);
                    if (n_items)
                        assert_memory_equal(scores, scores2, n_items * sizeof *scores);

                    double *r = malloc(((size_t)total + 1) * K * sizeof *r);
                    double *x = malloc((total + 1) * sizeof *x);
                    uint64_t *sid = malloc((total + 1) * sizeof *sid);
                    off = ns;
                    for (uint32_t i = 0; i < n_items; i++) {
                        uint32_t n = 0;
                        for (uint32_t pass = 0; pass < 2; pass++) {
                            uint32_t from = pass == 0 ? 0 : off, cnt = pass == 0 ? ns : ni_[i];
                            for (uint32_t j = from; j < from + cnt; j++, n++) {
                                for (uint32_t c = 0; c < K; c++)
                                    r[(size_t)n * K + c] = rows[(size_t)(j + 1) * K + c];
                                x[n] = use_vals ? (double)vals[j] : 1.0;
                                sid[n] = ids[j];
                            }
                        }
                        double want = sigmoid_d(naive_margin(&net, &dp, rows[0], sid, x, r, n));
                        if (fabs((double)scores[i] - want) > 2e-5)
                            fail_msg("net %zu wide %d items %u vals %d item %u: dnn %.9g naive "
                                     "%.9g",
                                     ni, wide, n_items, use_vals, i, scores[i], want);
                        checked++;
                        off += ni_[i];
                    }
                    free(r);
                    free(x);
                    free(sid);
                    free(scores);
                    free(scores2);
                    free(items);
                    free(rows);
                    free(vals);
                    free(ids);
                    free(ni_);
                }
            }
            free(work);
            free(work2);
            dparams_free(&net, &dp);
            free_net(&net);
        }
    }
    assert_int_equal(checked, 5 * 2 * 2 * (1 + 300));
}

/* ---- finite-difference gradient check ------------------------------------ */

static train_dnn_t *make_trainer(uint32_t F, uint32_t d, const uint32_t *hidden, uint32_t nh,
                                 bool wide, double init_sd)
{
    train_dnn_options_t o;
    train_dnn_defaults(&o);
    o.fields = F;
    o.dim = d;
    o.n_hidden = nh;
    for (uint32_t l = 0; l < nh; l++)
        o.hidden[l] = hidden[l];
    o.wide = wide;
    o.init_stdev = init_sd;
    o.seed = 11;
    o.shards = 4;
    train_dnn_t *t;
    char why[160];
    if (train_dnn_create(&o, &t, why, sizeof why) != 0)
        fail_msg("train_dnn_create: %s", why);
    return t;
}

static double logloss_d(double margin, double y)
{
    double p = sigmoid_d(margin);
    return -(y * log(p) + (1 - y) * log1p(-p));
}

static void gradient_check(const uint32_t *hidden, uint32_t nh, bool wide)
{
    enum { N = 9, F = 3, D = 4, K = D + 1 };
    uint64_t s = 0x1234567887654321ULL + nh * 7 + wide;
    train_dnn_t *t = make_trainer(F, D, hidden, nh, wide, 0.3);
    uint64_t ids[N];
    float vals[N];
    double x[N];
    for (uint32_t j = 0; j < N; j++) {
        ids[j] = ((uint64_t)(j % 5) << 56) | (rnd(&s) >> 24 | 1); /* fields 0,1,2,0,1 (% 3) */
        vals[j] = (float)urand(&s, 0.25, 1.5);
        x[j] = vals[j];
    }
    /* a few steps move the bias, w and the MLP's biases off their start */
    for (int i = 0; i < 5; i++)
        assert_int_equal(train_dnn_update(t, ids, vals, N, (float)(i & 1), 1.0f, NULL), 0);

    const float y = 1.0f;
    float g_rows[N * K], g_bias, p;
    size_t nd = train_dnn_dense_floats(t);
    float *g_dense = malloc(nd * sizeof *g_dense);
    assert_int_equal(train_dnn_gradient(t, ids, vals, N, y, &p, g_rows, &g_bias, g_dense), 0);
    assert_true(p == train_dnn_predict(t, ids, vals, N));

    const dnn_net_t *net = train_dnn_net(t);
    const float *dense = train_dnn_dense(t);
    struct dparams dp;
    dparams_from(net, &dp);
    double rows[N * K], bias;
    float frow[2 * K];
    assert_int_equal(store_lookup(train_dnn_store(t), MODEL_BIAS_ID, frow), 1);
    bias = frow[0];
    assert_true(bias != 0);
    for (uint32_t j = 0; j < N; j++) {
        assert_int_equal(store_lookup(train_dnn_store(t), ids[j], frow), 1);
        for (uint32_t c = 0; c < K; c++)
            rows[j * K + c] = frow[c];
    }
    double m0 = naive_margin(net, &dp, bias, ids, x, rows, N);
    assert_float_equal(p, sigmoid_d(m0), 2e-6);

    const double h = 1e-5;
    int checked = 0;
#define CHECK(param, analytic, what, ...)                                                         \
    do {                                                                                          \
        double keep = (param);                                                                    \
        (param) = keep + h;                                                                       \
        double up = logloss_d(naive_margin(net, &dp, bias, ids, x, rows, N), y);                  \
        (param) = keep - h;                                                                       \
        double down = logloss_d(naive_margin(net, &dp, bias, ids, x, rows, N), y);                \
        (param) = keep;                                                                           \
        double fd = (up - down) / (2 * h), an = (analytic);                                       \
        if (fabs(fd - an) > 2e-4 * fmax(1.0, fabs(fd)) + 2e-5)                                    \
            fail_msg("hidden %u wide %d: " what ": finite difference %.9g, trainer %.9g", nh,      \
                     (int)wide, __VA_ARGS__, fd, an);                                             \
        checked++;                                                                                \
    } while (0)

    CHECK(bias, g_bias, "bias%s", "");
    for (uint32_t j = 0; j < N; j++)
        for (uint32_t c = 0; c < K; c++) {
            if (c == 0 && !wide) { /* w plays no part: its gradient is 0 */
                assert_true(g_rows[j * K] == 0.0f);
                continue;
            }
            CHECK(rows[j * K + c], g_rows[j * K + c], "feature %u coordinate %u", j, c);
        }
    for (uint32_t l = 0; l < net->n_layers; l++) {
        size_t nw = (size_t)net->width[l] * net->width[l + 1];
        size_t ow = (size_t)(net->W[l] - dense), ob = (size_t)(net->b[l] - dense);
        for (size_t i = 0; i < nw; i++)
            CHECK(dp.W[l][i], g_dense[ow + i], "layer %u W[%zu]", l, i);
        for (uint32_t i = 0; i < net->width[l + 1]; i++)
            CHECK(dp.b[l][i], g_dense[ob + i], "layer %u b[%u]", l, i);
    }
#undef CHECK
    size_t want = 1 + N * (wide ? K : K - 1);
    for (uint32_t l = 0; l < net->n_layers; l++)
        want += (size_t)net->width[l] * net->width[l + 1] + net->width[l + 1];
    assert_int_equal(checked, want);
    dparams_free(net, &dp);
    free(g_dense);
    train_dnn_destroy(t);
}

static void test_gradient_fd(void **state)
{
    (void)state;
    static const uint32_t h2[] = {6, 5}, h1[] = {7};
    gradient_check(h2, 2, true);
    gradient_check(h2, 2, false);
    gradient_check(h1, 1, true);
    gradient_check(NULL, 0, true);
}

/* ---- model_dnn_net_from_extras -------------------------------------------------- */

/* Params (NULL = absent) and the dense arrays of net, minus layer skip_layer
 * (its weight when skip_bias == 0, its bias when 1), with layer bad_layer's
 * weight one float short. */
static void make_extras(store_extras_t *x, const dnn_net_t *net, const char *fields,
                        const char *dim, const char *hidden, const char *wide, int skip_layer,
                        int skip_bias, int bad_layer)
{
    memset(x, 0, sizeof *x);
    if (fields)
        assert_int_equal(store_extras_set(x, "fields", fields), 0);
    if (dim)
        assert_int_equal(store_extras_set(x, "dim", dim), 0);
    if (hidden)
        assert_int_equal(store_extras_set(x, "hidden", hidden), 0);
    if (wide)
        assert_int_equal(store_extras_set(x, "wide", wide), 0);
    for (uint32_t l = 0; l < net->n_layers; l++) {
        char name[32];
        uint64_t nw = (uint64_t)net->width[l] * net->width[l + 1];
        snprintf(name, sizeof name, "mlp.%u.weight", l);
        if (!(skip_layer == (int)l && skip_bias == 0))
            assert_int_equal(
                store_extras_add_dense(x, name, net->W[l], nw - (bad_layer == (int)l)), 0);
        snprintf(name, sizeof name, "mlp.%u.bias", l);
        if (!(skip_layer == (int)l && skip_bias == 1))
            assert_int_equal(store_extras_add_dense(x, name, net->b[l], net->width[l + 1]), 0);
    }
}

static void expect_bad(const store_extras_t *x, uint32_t K, const char *needle)
{
    dnn_net_t got;
    char why[256] = "";
    assert_int_equal(model_dnn_net_from_extras(x, K, &got, why, sizeof why), -EINVAL);
    if (!strstr(why, needle))
        fail_msg("why \"%s\" does not name \"%s\"", why, needle);
}

static void test_from_extras(void **state)
{
    (void)state;
    uint64_t s = 77;
    static const uint32_t hid[] = {6, 4};
    dnn_net_t net;
    random_net(&net, 3, 5, hid, 2, true, &s);
    static store_extras_t x; /* ~7 KB */
    dnn_net_t got;
    char why[256];

    make_extras(&x, &net, "3", "5", "6,4", "1", -1, 0, -1);
    assert_int_equal(model_dnn_net_from_extras(&x, 6, &got, why, sizeof why), 0);
    assert_int_equal(got.n_layers, 3);
    assert_int_equal(got.width[0], 15);
    assert_int_equal(got.width[1], 6);
    assert_int_equal(got.width[2], 4);
    assert_int_equal(got.width[3], 1);
    assert_true(got.wide);
    for (uint32_t l = 0; l < 3; l++) {
        assert_ptr_equal(got.W[l], store_extras_dense(&x, l == 0 ? "mlp.0.weight"
                                                          : l == 1 ? "mlp.1.weight"
                                                                   : "mlp.2.weight")
                                       ->data);
        assert_memory_equal(got.W[l], net.W[l],
                            (size_t)net.width[l] * net.width[l + 1] * sizeof(float));
        assert_memory_equal(got.b[l], net.b[l], net.width[l + 1] * sizeof(float));
    }

    /* to_extras then from_extras gives the same net */
    static store_extras_t x2;
    memset(&x2, 0, sizeof x2);
    assert_int_equal(model_dnn_net_to_extras(&net, &x2), 0);
    assert_string_equal(store_extras_get(&x2, "hidden"), "6,4");
    assert_string_equal(store_extras_get(&x2, "wide"), "1");
    assert_int_equal(model_dnn_net_from_extras(&x2, 6, &got, why, sizeof why), 0);
    assert_int_equal(got.fields, 3);
    assert_int_equal(got.dim, 5);
    for (uint32_t l = 0; l < 3; l++) {
        assert_ptr_equal(got.W[l], net.W[l]);
        assert_ptr_equal(got.b[l], net.b[l]);
    }

    /* missing params */
    make_extras(&x, &net, NULL, "5", "6,4", "1", -1, 0, -1);
    expect_bad(&x, 6, "param \"fields\" is missing");
    make_extras(&x, &net, "3", NULL, "6,4", "1", -1, 0, -1);
    expect_bad(&x, 6, "param \"dim\" is missing");
    make_extras(&x, &net, "3", "5", NULL, "1", -1, 0, -1);
    expect_bad(&x, 6, "param \"hidden\" is missing");
    make_extras(&x, &net, "3", "5", "6,4", NULL, -1, 0, -1);
    expect_bad(&x, 6, "param \"wide\" is missing");
    /* bad values */
    make_extras(&x, &net, "0", "5", "6,4", "1", -1, 0, -1);
    expect_bad(&x, 6, "fields \"0\"");
    make_extras(&x, &net, "3", "five", "6,4", "1", -1, 0, -1);
    expect_bad(&x, 6, "dim \"five\"");
    make_extras(&x, &net, "3", "5", "6,4", "yes", -1, 0, -1);
    expect_bad(&x, 6, "wide \"yes\"");
    /* dim against K */
    make_extras(&x, &net, "3", "5", "6,4", "1", -1, 0, -1);
    expect_bad(&x, 7, "dim 5 needs 6 floats per key");
    expect_bad(&x, 5, "the store has 5");
    /* bad hidden text */
    static const char *bad_hidden[] = {"6,", ",4", "6,,4", " 6,4", "6;4", "-6,4", "0,4", "x",
                                       "99999999999,4", "1,1,1,1,1,1,1,1"};
    for (size_t i = 0; i < sizeof bad_hidden / sizeof bad_hidden[0]; i++) {
        make_extras(&x, &net, "3", "5", bad_hidden[i], "1", -1, 0, -1);
        expect_bad(&x, 6, "DNN param hidden");
    }
    /* hidden disagrees with the arrays */
    make_extras(&x, &net, "3", "5", "6,5", "1", -1, 0, -1);
    expect_bad(&x, 6, "mlp.1.weight has 24 floats, want 6 x 5 = 30");
    make_extras(&x, &net, "3", "5", "6", "1", -1, 0, -1);
    expect_bad(&x, 6, "mlp.1.weight has 24 floats, want 6 x 1 = 6");
    make_extras(&x, &net, "3", "5", "6,4,2", "1", -1, 0, -1);
    expect_bad(&x, 6, "mlp.2.weight has 4 floats, want 4 x 2 = 8");
    /* wrong dense sizes */
    make_extras(&x, &net, "3", "5", "6,4", "1", -1, 0, 0);
    expect_bad(&x, 6, "mlp.0.weight has 89 floats, want 15 x 6 = 90");
    make_extras(&x, &net, "3", "5", "6,4", "1", -1, 0, 2);
    expect_bad(&x, 6, "mlp.2.weight has 3 floats, want 4 x 1 = 4");
    /* a missing layer */
    make_extras(&x, &net, "3", "5", "6,4", "1", 1, 0, -1);
    expect_bad(&x, 6, "mlp.1.weight is missing");
    make_extras(&x, &net, "3", "5", "6,4", "1", 2, 1, -1);
    expect_bad(&x, 6, "mlp.2.bias is missing");
    /* an extra layer: hidden "6" but three layers of arrays... */
    make_extras(&x, &net, "3", "5", "6,4", "1", -1, 0, -1);
    assert_int_equal(store_extras_add_dense(&x, "mlp.3.weight", net.W[2], 4), 0);
    expect_bad(&x, 6, "mlp.3.weight is present but hidden \"6,4\" gives 3 weight layers");
    /* ...and a bias with the wrong count */
    uint64_t s2 = 5;
    make_extras(&x, &net, "3", "5", "6,4", "0", -1, 0, -1);
    memset(&x2, 0, sizeof x2);
    x2 = x;
    for (uint32_t i = 0; i < x2.n_dense; i++)
        if (strcmp(x2.dense[i].name, "mlp.1.bias") == 0)
            x2.dense[i].count = 3;
    expect_bad(&x2, 6, "mlp.1.bias has 3 floats, want 4");
    /* no hidden layer at all is fine */
    dnn_net_t lin;
    random_net(&lin, 2, 3, NULL, 0, false, &s2);
    make_extras(&x, &lin, "2", "3", "", "0", -1, 0, -1);
    assert_int_equal(model_dnn_net_from_extras(&x, 4, &got, why, sizeof why), 0);
    assert_int_equal(got.n_layers, 1);
    assert_int_equal(got.width[0], 6);
    assert_int_equal(got.width[1], 1);
    assert_false(got.wide);
    free_net(&lin);
    free_net(&net);
}

/* ---- export round trip ------------------------------------------------------ */

static void test_export_roundtrip(void **state)
{
    (void)state;
    static const uint32_t hid[] = {16, 8};
    for (int wide = 0; wide < 2; wide++) {
        train_dnn_t *t = make_trainer(5, 8, hid, 2, wide, 0.05);
        enum { ROWS = 1500, NF = 12 };
        static uint64_t ids[ROWS][NF];
        static float vals[ROWS][NF];
        uint64_t s = 88172645463325252ULL + (uint64_t)wide;
        for (int i = 0; i < ROWS; i++) {
            for (int j = 0; j < NF; j++) {
                ids[i][j] = ((uint64_t)(j % 7) << 56) | (rnd(&s) % 60 + 1);
                vals[i][j] = (float)(rnd(&s) % 1000) / 1000.0f;
            }
            if (i % 10 == 0)
                ids[i][NF - 1] = ids[i][0]; /* a repeated id */
            float y = ((ids[i][0] ^ ids[i][1]) & 3) == 0 ? 1.0f : 0.0f;
            assert_int_equal(train_dnn_update(t, ids[i], vals[i], NF, y, 1.0f, NULL), 0);
        }
        char dir[512];
        snprintf(dir, sizeof dir, "%s/tl_dnn_export_%d_%d",
                 getenv("TL_TEST_TMP") ? getenv("TL_TEST_TMP") : "/tmp", (int)getpid(), wide);
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s' && rm -rf '%s'", dir, dir);
        assert_int_equal(system(cmd), 0);
        store_meta_t meta = {.model_name = "dnn_test", .model_kind = STORE_MODEL_LR,
                             .version = 4};
        store_error_t err;
        if (train_dnn_export(t, dir, &meta, &err) != 0)
            fail_msg("export: %s", err.msg);

        /* the snapshot scored directly through model_dnn_scores */
        store_t *st;
        store_meta_t m2;
        static store_extras_t x;
        if (store_snapshot_load_ex(dir, 1, &st, &m2, &x, &err) != 0)
            fail_msg("store_snapshot_load_ex: %s", err.msg);
        assert_int_equal(m2.model_kind, STORE_MODEL_DNN);
        dnn_net_t net;
        char why[256];
        if (model_dnn_net_from_extras(&x, store_value_floats(st), &net, why, sizeof why) != 0)
            fail_msg("model_dnn_net_from_extras: %s", why);
        assert_int_equal(net.wide, wide);
        float *work = malloc(model_dnn_work_floats(&net) * sizeof *work);
        float rows[(NF + 1) * 9];

        model_t *m;
        if (model_load(dir, 1, &m, &err) != 0)
            fail_msg("model_load: %s", err.msg);
        assert_int_equal(model_meta(m)->model_kind, STORE_MODEL_DNN);
        assert_int_equal(model_meta(m)->version, 4);
        assert_int_equal(model_value_floats(m), 9);
        model_scratch_t *sc;
        assert_int_equal(model_scratch_create(NF, &sc), 0);
        assert_int_equal(model_scratch_fit(sc, m, NF), 1);
        double sumsq = 0;
        for (int i = 0; i < ROWS; i++) {
            float mine = train_dnn_predict(t, ids[i], vals[i], NF);
            codec_block_t shared = {.ids = ids[i], .values = vals[i], .n = NF};
            codec_block_t item = {.ids = ids[i] + NF, .values = NULL, .n = 0};
            float score, direct;
            assert_int_equal(model_score(m, &shared, &item, 1, &score, sc), 0);
            if (memcmp(&score, &mine, sizeof score) != 0)
                fail_msg("wide %d row %d: served %.9g, trainer %.9g", wide, i, score, mine);
            store_lookup(st, MODEL_BIAS_ID, rows);
            store_lookup_batch(st, ids[i], NF, rows + 9, NULL);
            model_dnn_scores(&net, &shared, &item, 1, rows, work, &direct);
            if (memcmp(&direct, &mine, sizeof direct) != 0)
                fail_msg("wide %d row %d: model_dnn_scores %.9g, trainer %.9g", wide, i, direct,
                         mine);
            /* the same row split as shared + item agrees to rounding */
            codec_block_t sh2 = {ids[i], vals[i], NF / 2};
            codec_block_t it2 = {ids[i] + NF / 2, vals[i] + NF / 2, NF - NF / 2};
            float split;
            assert_int_equal(model_score(m, &sh2, &it2, 1, &split, sc), 0);
            assert_float_equal(split, mine, 1e-5);
            sumsq += (double)(mine - 0.5f) * (mine - 0.5f);
        }
        assert_true(sumsq > 1.0); /* the model learned something */
        free(work);
        store_extras_free(&x);
        store_destroy(st);
        model_scratch_destroy(sc);
        model_destroy(m);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        assert_int_equal(system(cmd), 0);
        train_dnn_destroy(t);
    }
}

static void test_bad_options(void **state)
{
    (void)state;
    train_dnn_options_t o;
    train_dnn_t *t;
    char why[160];
    train_dnn_defaults(&o);
    o.dim = 512;
    assert_int_equal(train_dnn_create(&o, &t, why, sizeof why), -EINVAL);
    assert_string_equal(why, "dim must be 1..511");
    train_dnn_defaults(&o);
    o.fields = 0;
    assert_int_equal(train_dnn_create(&o, &t, why, sizeof why), -EINVAL);
    assert_string_equal(why, "fields must be 1..256");
    train_dnn_defaults(&o);
    o.hidden[1] = 0;
    assert_int_equal(train_dnn_create(&o, &t, why, sizeof why), -EINVAL);
    assert_string_equal(why, "hidden layer 2: width 0 is not in 1..16384");
    train_dnn_defaults(&o);
    o.n_hidden = DNN_MAX_LAYERS;
    assert_int_equal(train_dnn_create(&o, &t, why, sizeof why), -EINVAL);
    assert_string_equal(why, "at most 7 hidden layers");
    train_dnn_defaults(&o);
    o.lr_dense = 0;
    assert_int_equal(train_dnn_create(&o, &t, why, sizeof why), -EINVAL);
    assert_string_equal(why, "dense learning rate must be > 0");
    train_dnn_defaults(&o);
    o.fields = 256;
    o.dim = 128;
    assert_int_equal(train_dnn_create(&o, &t, why, sizeof why), -EINVAL);
    assert_string_equal(why, "fields x dim = 256 x 128 is more than 16384 inputs");
    train_dnn_defaults(&o);
    assert_int_equal(train_dnn_create(&o, &t, why, sizeof why), 0);
    train_dnn_destroy(t);
}

/* ---- quality on criteo_tiny (--quality) ---------------------------------- */

static int run_file(train_dnn_t *t, const char *path, int train, metrics_result_t *res,
                    uint32_t *max_field)
{
    reader_options_t ro = {.format = READER_LIBFFM};
    reader_t *r;
    char err[512];
    if (reader_open(path, &ro, &r, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    metrics_t *m = NULL;
    if (res && metrics_create(&m) != 0)
        return -1;
    reader_sample_t s;
    int rc;
    while ((rc = reader_next(r, &s)) == 1) {
        if (max_field)
            for (uint32_t j = 0; j < s.n; j++)
                if ((uint32_t)(s.ids[j] >> 56) > *max_field)
                    *max_field = (uint32_t)(s.ids[j] >> 56);
        if (!t)
            continue;
        if (train)
            train_dnn_update(t, s.ids, s.values, s.n, s.label, 1.0f, NULL);
        else
            metrics_add(m, train_dnn_predict(t, s.ids, s.values, s.n), s.label);
    }
    if (rc < 0)
        fprintf(stderr, "%s\n", reader_error(r));
    reader_close(r);
    if (m) {
        metrics_compute(m, res);
        metrics_destroy(m);
    }
    return rc;
}

static int quality(void)
{
    const char *data = getenv("TL_SHARED_DATA");
    char tr[1024], te[1024];
    snprintf(tr, sizeof tr, "%s/criteo_tiny/train.ffm", data ? data : "");
    snprintf(te, sizeof te, "%s/criteo_tiny/test.ffm", data ? data : "");
    if (!data || access(tr, R_OK) != 0 || access(te, R_OK) != 0) {
        fprintf(stderr, "test_dnn --quality: no criteo_tiny under TL_SHARED_DATA: skipped\n");
        return 77;
    }
    uint32_t max_field = 0; /* tltrain's default: fields = max field + 1 */
    if (run_file(NULL, tr, 1, NULL, &max_field) != 0)
        return 1;
    train_dnn_options_t opt;
    train_dnn_defaults(&opt);
    opt.fields = max_field + 1;
    train_dnn_t *t;
    char why[160];
    if (train_dnn_create(&opt, &t, why, sizeof why) != 0) {
        fprintf(stderr, "%s\n", why);
        return 1;
    }
    metrics_result_t res;
    for (uint32_t ep = 0; ep < TRAIN_DNN_DEFAULT_EPOCHS; ep++)
        if (run_file(t, tr, 1, NULL, NULL) != 0)
            return 1;
    if (run_file(t, te, 0, &res, NULL) != 0)
        return 1;
    train_dnn_destroy(t);
    const double min_auc = 0.62;
    int ok = res.auc >= min_auc;
    printf("criteo_tiny DNN (defaults: fields %u, d %u, hidden %u,%u, wide, %d epoch(s)): "
           "logloss %.4f auc %.4f (>= %.2f) calibration %.3f: %s\n",
           opt.fields, opt.dim, opt.hidden[0], opt.hidden[1], TRAIN_DNN_DEFAULT_EPOCHS,
           res.logloss, res.auc, min_auc, res.calibration, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

/* ---- speed on the standard request (--bench) ------------------------------ */

static double now_us(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int bench(int runs)
{
    enum { F = 26, D = 16, K = D + 1, ITEMS = 200, PER = 200, SHARED = 300 };
    enum { TOTAL = SHARED + ITEMS * PER, REQS = 8 };
    static const uint32_t hid[] = {256, 128};
    uint64_t s = 42;
    dnn_net_t net;
    random_net(&net, F, D, hid, 2, true, &s);
    model_dnn_blas_init();
    float *work = malloc(model_dnn_work_floats(&net) * sizeof *work);
    /* several requests so that the rows are not all in cache at once */
    uint64_t *ids = malloc((size_t)REQS * TOTAL * sizeof *ids);
    float *rows = malloc((size_t)REQS * (TOTAL + 1) * K * sizeof *rows);
    for (size_t i = 0; i < (size_t)REQS * TOTAL; i++)
        ids[i] = ((rnd(&s) % F) << 56) | (rnd(&s) >> 8);
    for (size_t i = 0; i < (size_t)REQS * (TOTAL + 1) * K; i++)
        rows[i] = (float)urand(&s, -0.05, 0.05);
    codec_block_t items[ITEMS];
    float scores[ITEMS];
    /* wall time, and the thread's CPU time: on a shared host the wall tail
     * holds other processes' time slices, the CPU time does not */
    double *t = malloc((size_t)runs * sizeof *t), *c = malloc((size_t)runs * sizeof *c);
    double sink = 0;
    for (int r = -50; r < runs; r++) {
        int q = (r + 50) % REQS;
        const uint64_t *qi = ids + (size_t)q * TOTAL;
        codec_block_t shared = {qi, NULL, SHARED};
        for (int i = 0; i < ITEMS; i++)
            items[i] = (codec_block_t){qi + SHARED + (size_t)i * PER, NULL, PER};
        double c0 = now_us(CLOCK_THREAD_CPUTIME_ID), t0 = now_us(CLOCK_MONOTONIC);
        model_dnn_scores(&net, &shared, items, ITEMS, rows + (size_t)q * (TOTAL + 1) * K, work,
                   scores);
        double dt = now_us(CLOCK_MONOTONIC) - t0, dc = now_us(CLOCK_THREAD_CPUTIME_ID) - c0;
        sink += scores[r & 127];
        if (r >= 0) {
            t[r] = dt;
            c[r] = dc;
        }
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_d);
    qsort(c, (size_t)runs, sizeof *c, cmp_d);
    printf("model_dnn_scores, %d fields x %d, 416 -> 256 -> 128 -> 1, %d items x %d + %d shared, "
           "one core, %d runs (checksum %.3f)\n"
           "  wall us: p50 %.1f  p90 %.1f  p99 %.1f  max %.1f\n"
           "  cpu  us: p50 %.1f  p90 %.1f  p99 %.1f  max %.1f\n",
           F, D, ITEMS, PER, SHARED, runs, sink, t[runs / 2], t[runs * 9 / 10],
           t[runs * 99 / 100], t[runs - 1], c[runs / 2], c[runs * 9 / 10], c[runs * 99 / 100],
           c[runs - 1]);
    free(c);
    free(t);
    free(rows);
    free(ids);
    free(work);
    free_net(&net);
    return 0;
}

/* model/blas_init.c: on a CPU with AVX2 and FMA, OpenBLAS must not be left
 * on its generic Prescott kernels (3x slower MLP layers), unless the user
 * chose a core type or the library cannot switch (no DYNAMIC_ARCH). */
extern void gotoblas_dynamic_init(void) __attribute__((weak));

static void test_blas_kernels(void **state)
{
    (void)state;
    const char *core = openblas_get_corename();
    print_message("    OpenBLAS core: %s\n", core ? core : "(null)");
#if defined(__x86_64__)
    __builtin_cpu_init();
    const char *forced = getenv("OPENBLAS_CORETYPE"); /* the user's, or blas_init.c's */
    if ((forced && strcasecmp(forced, "Prescott") == 0) || !gotoblas_dynamic_init ||
        !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        skip();
    assert_non_null(core);
    assert_true(strcasecmp(core, "Prescott") != 0);
#else
    skip();
#endif
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--quality") == 0)
        return quality();
    if (argc > 1 && strcmp(argv[1], "--bench") == 0)
        return bench(argc > 2 ? atoi(argv[2]) : 2000);
    model_dnn_blas_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scores_vs_naive),
        cmocka_unit_test(test_gradient_fd),
        cmocka_unit_test(test_from_extras),
        cmocka_unit_test(test_export_roundtrip),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_blas_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
