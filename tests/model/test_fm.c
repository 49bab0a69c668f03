/*
 * test_fm.c — FM scoring (model.c) and training (train_fm.c).
 *
 *   - the trainer's gradient (read back from one SGD step with alpha 1)
 *     matches central finite differences of the naive pairwise margin, for
 *     w, v and the bias, on a random sample: without instance
 *     normalisation, with it (the naive margin on x / |x|), and with it plus
 *     L2 on w, v and the frequency-adaptive L2 on v (l2_v + l2_v_freq / c at
 *     an id's c-th occurrence) taken out of the step;
 *   - model_score's shared-block decomposition equals the naive pairwise
 *     formula over shared + item (to 1e-6 relative) on random requests:
 *     k from 1 to 63, values or binary, unknown ids, empty blocks, blocks
 *     contiguous in memory or not; with normalisation (a snapshot with param
 *     norm = 1: |x| over shared + item) and without (no param, as every FM
 *     snapshot written before normalisation existed);
 *   - train -> export -> model_load -> model_score equals the trainer's own
 *     predictions bit for bit (SGD, Adagrad, FTRL; norm on and off), repeated
 *     ids included; the export carries norm = 1 exactly when norm is on; a
 *     snapshot whose norm is neither 0 nor 1 is refused;
 *   - bad options are refused with a sentence;
 *   - with --quality: FM with tltrain's defaults (train_fm_defaults(Adagrad),
 *     TRAIN_FM_DEFAULT_EPOCHS) on the four sets under TL_SHARED_DATA
 *     (../shared/data) must reach xLearn FM's figures (k 4, lr 0.2, lambda
 *     2e-5, 10 epochs) within 0.005: logloss <= xLearn + 0.005 and AUC >=
 *     xLearn - 0.005; exits 77 when none of the sets is there.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/metrics.h"
#include "model/model.h"
#include "model/reader.h"
#include "model/train_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Naive FM margin: bias + sum w x + sum_{a<b} <v_a, v_b> x_a x_b; rows are
 * [w | v_1..v_k] (stride k + 1), one per feature, in double. */
static double naive_margin(double bias, const double *rows, const double *x, uint32_t n,
                           uint32_t k)
{
    double m = bias;
    for (uint32_t a = 0; a < n; a++) {
        m += rows[a * (k + 1)] * x[a];
        for (uint32_t b = a + 1; b < n; b++) {
            double dot = 0;
            for (uint32_t f = 0; f < k; f++)
                dot += rows[a * (k + 1) + 1 + f] * rows[b * (k + 1) + 1 + f];
            m += dot * x[a] * x[b];
        }
    }
    return m;
}

/* ---- gradient check ------------------------------------------------------ */

/* One gradient check: SGD with alpha 1, so that a step is the gradient
 * (plus the L2 terms, which are taken out again: l2 on w, l2_v + l2_v_freq
 * / 2 on v at the checked, second, occurrence). */
static void gradient_fd(bool norm, double l2, double l2_v, double l2_v_freq)
{
    enum { N = 12, K = 5, R = K + 1 };
    uint64_t s = 0x1234567887654321ULL;
    uint64_t ids[N];
    float vals[N];
    double x[N], sq = 0;
    for (uint32_t j = 0; j < N; j++) {
        ids[j] = ((uint64_t)(j + 1) << 56) | (rnd(&s) >> 20);
        vals[j] = (float)urand(&s, 0.25, 1.5);
        x[j] = vals[j];
        sq += x[j] * x[j];
    }
    if (norm) /* the naive margin of the normalised sample */
        for (uint32_t j = 0; j < N; j++)
            x[j] /= sqrt(sq);
    train_fm_options_t opt;
    train_fm_defaults(TRAIN_SGD, &opt);
    opt.k = K;
    opt.alpha = 1.0;
    opt.l2 = l2;
    opt.l2_v = l2_v;
    opt.l2_v_freq = l2_v_freq;
    opt.norm = norm;
    opt.init_stdev = 0.3;
    opt.seed = 7;
    train_fm_t *t;
    char why[128];
    if (train_fm_create(&opt, &t, why, sizeof why) != 0)
        fail_msg("train_fm_create: %s", why);
    float p;
    /* a first step moves w and the bias off 0 */
    assert_int_equal(train_fm_update(t, ids, vals, N, 1.0f, 1.0f, &p), 0);

    const store_t *st = train_fm_store(t);
    double before[N * R], after[N * R], bias0, bias1;
    float row[STORE_MAX_VALUE_FLOATS]; /* a state row: [w | v | c] with SGD */
    assert_int_equal(store_lookup(st, MODEL_BIAS_ID, row), 1);
    bias0 = row[0];
    for (uint32_t j = 0; j < N; j++) {
        assert_int_equal(store_lookup(st, ids[j], row), 1);
        for (uint32_t i = 0; i < R; i++)
            before[j * R + i] = row[i];
    }
    /* the trainer's prediction is sigmoid(naive margin) */
    float pred = train_fm_predict(t, ids, vals, N);
    assert_float_equal(pred, sigmoid_d(naive_margin(bias0, before, x, N, K)), 1e-6);

    /* SGD, alpha 1: param_new = param - (g * d margin / d param + L2 term) */
    assert_int_equal(train_fm_update(t, ids, vals, N, 0.0f, 1.0f, &p), 0);
    assert_true(p == pred);
    double g = (double)p - 0.0;
    assert_int_equal(store_lookup(st, MODEL_BIAS_ID, row), 1);
    bias1 = row[0];
    for (uint32_t j = 0; j < N; j++) {
        assert_int_equal(store_lookup(st, ids[j], row), 1);
        for (uint32_t i = 0; i < R; i++)
            after[j * R + i] = row[i];
        assert_true(row[R] == 2.0f); /* SGD row [w | v | c]: two occurrences */
    }
    assert_float_equal((bias0 - bias1) / g, 1.0, 1e-5);

    const double h = 1e-5;
    const double lambda_v = l2_v + l2_v_freq / 2; /* every id's second occurrence */
    double probe[N * R];
    int checked = 0;
    for (uint32_t c = 0; c < N * R; c++) {
        memcpy(probe, before, sizeof probe);
        probe[c] = before[c] + h;
        double up = naive_margin(bias0, probe, x, N, K);
        probe[c] = before[c] - h;
        double down = naive_margin(bias0, probe, x, N, K);
        double fd = (up - down) / (2 * h);
        double reg = (c % R ? lambda_v : l2) * before[c];
        double analytic = (before[c] - after[c] - reg) / g;
        double tol = 1e-4 * fmax(1.0, fabs(fd)) + 1e-5;
        if (fabs(fd - analytic) > tol)
            fail_msg("norm %d l2_v_freq %g: param %u (feature %u, %s%u): finite difference "
                     "%.9g, trainer %.9g",
                     (int)norm, l2_v_freq, c, c / R, c % R ? "v_" : "w", c % R, fd, analytic);
        checked++;
    }
    assert_int_equal(checked, N * R);
    train_fm_destroy(t);
}

static void test_gradient_fd(void **state)
{
    (void)state;
    gradient_fd(false, 0, 0, 0);
    gradient_fd(true, 0, 0, 0);
    gradient_fd(true, 0.01, 0.02, 0.5);
}

/* ---- decomposition vs naive ---------------------------------------------- */

#define MAXF 4096

/* st as a model: without norm straight from the store (no params, as an
 * FM snapshot from before normalisation); with norm through a snapshot
 * whose params say norm = 1.  Takes st. */
static model_t *fm_model(store_t *st, bool norm)
{
    store_meta_t meta = {.model_name = "fm", .model_kind = STORE_MODEL_FM, .version = 1};
    model_t *m;
    if (!norm) {
        assert_int_equal(model_from_store(st, &meta, &m), 0);
        return m;
    }
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/tl_fm_norm_%d", (int)getpid());
    store_extras_t x = {0};
    assert_int_equal(store_extras_set(&x, "norm", "1"), 0);
    store_error_t err;
    if (store_snapshot_write_ex(st, dir, &meta, &x, &err) != 0)
        fail_msg("snapshot: %s", err.msg);
    store_destroy(st);
    if (model_load(dir, 1, &m, &err) != 0)
        fail_msg("model_load: %s", err.msg);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    return m;
}

static void test_decomposition_vs_naive(void **state)
{
    (void)state;
    static const uint32_t ks[] = {1, 2, 4, 16, 63};
    uint64_t s = 0xfeedfacecafebeefULL;
    for (size_t ki = 0; ki < 2 * sizeof ks / sizeof ks[0]; ki++) {
        const bool norm = ki >= sizeof ks / sizeof ks[0];
        const uint32_t k = ks[ki % (sizeof ks / sizeof ks[0])], K = k + 1;
        enum { NKEYS = 600 };
        store_options_t so = {.value_floats = K, .shards = 4, .expected_keys = NKEYS + 1};
        store_t *st;
        assert_int_equal(store_create(&so, &st), 0);
        /* key i (1..NKEYS) -> row; keys above NKEYS are unknown */
        double *rows = calloc((size_t)(NKEYS + 1) * K, sizeof *rows);
        float frow[64];
        double scale = 0.6 / sqrt((double)k);
        for (uint32_t i = 0; i <= NKEYS; i++) {
            for (uint32_t c = 0; c < K; c++) {
                frow[c] = (float)urand(&s, -scale, scale);
                if (i == 0 && c > 0)
                    frow[c] = (float)urand(&s, -1, 1); /* the bias's v must be ignored */
                rows[(size_t)i * K + c] = frow[c];
            }
            uint64_t key = i == 0 ? MODEL_BIAS_ID : (((uint64_t)(i % 7) << 56) | (i * 977u));
            assert_int_equal(store_upsert(st, key, frow), 1);
        }
        model_t *m = fm_model(st, norm);
        model_scratch_t *sc;
        assert_int_equal(model_scratch_create(MAXF, &sc), 0);
        assert_int_equal(model_scratch_reserve(sc, MAXF, K), 1);

        static uint64_t ids[MAXF];
        static float vals[MAXF];
        static uint32_t which[MAXF]; /* key index, or 0 for unknown */
        for (int trial = 0; trial < 24; trial++) {
            enum { ITEMS = 9 };
            uint32_t ns = trial % 5 == 0 ? 0 : (uint32_t)(rnd(&s) % 60);
            uint32_t ni[ITEMS], total = ns;
            for (int i = 0; i < ITEMS; i++) {
                ni[i] = (i == 3) ? 0 : (uint32_t)(rnd(&s) % 40);
                total += ni[i];
            }
            int use_vals = trial % 2;
            for (uint32_t j = 0; j < total; j++) {
                uint32_t i = (uint32_t)(rnd(&s) % (NKEYS + 80)) + 1;
                if (i > NKEYS) {
                    which[j] = 0;
                    ids[j] = ((uint64_t)3 << 56) | (UINT64_C(1) << 40) | i; /* unknown */
                } else {
                    which[j] = i;
                    ids[j] = ((uint64_t)(i % 7) << 56) | (i * 977u);
                }
                vals[j] = (float)urand(&s, -2, 2);
            }
            /* contiguous layout (as the decoder leaves it) or a gap after each
             * block (trial % 3 == 0 moves item blocks to a second region) */
            static uint64_t ids2[MAXF];
            static float vals2[MAXF];
            int gather = trial % 3 == 0;
            codec_block_t shared = {ids, use_vals ? vals : NULL, ns};
            codec_block_t items[ITEMS];
            uint32_t off = ns;
            for (int i = 0; i < ITEMS; i++) {
                const uint64_t *ip = ids + off;
                const float *vp = vals + off;
                if (gather) {
                    memcpy(ids2 + off, ids + off, ni[i] * sizeof *ids);
                    memcpy(vals2 + off, vals + off, ni[i] * sizeof *vals);
                    ip = ids2 + off;
                    vp = vals2 + off;
                }
                items[i] = (codec_block_t){ip, use_vals ? vp : NULL, ni[i]};
                off += ni[i];
            }
            float scores[ITEMS];
            assert_int_equal(model_score(m, &shared, items, ITEMS, scores, sc), 0);

            static double r[MAXF * 64], x[MAXF];
            off = ns;
            for (int i = 0; i < ITEMS; i++) {
                uint32_t n = 0;
                double sq = 0;
                for (uint32_t pass = 0; pass < 2; pass++) {
                    uint32_t from = pass == 0 ? 0 : off, cnt = pass == 0 ? ns : ni[i];
                    for (uint32_t j = from; j < from + cnt; j++, n++) {
                        for (uint32_t c = 0; c < K; c++)
                            r[(size_t)n * K + c] =
                                which[j] ? rows[(size_t)which[j] * K + c] : 0.0;
                        x[n] = use_vals ? (double)vals[j] : 1.0;
                        sq += x[n] * x[n];
                    }
                }
                if (norm && sq > 0) /* the sample (shared + item) at unit length */
                    for (uint32_t j = 0; j < n; j++)
                        x[j] /= sqrt(sq);
                double want = sigmoid_d(naive_margin(rows[0], r, x, n, k));
                double err = fabs((double)scores[i] - want);
                if (err > 1e-6 * fabs(want) + 1e-30)
                    fail_msg("norm %d k %u trial %d item %d: model %.9g naive %.9g", (int)norm,
                             k, trial, i, scores[i], want);
                off += ni[i];
            }
        }
        model_scratch_destroy(sc);
        model_destroy(m);
        free(rows);
    }
}

/* ---- export round trip ----------------------------------------------------- */

static void test_export_roundtrip(void **state)
{
    (void)state;
    static const train_optimizer_t opts[] = {TRAIN_SGD, TRAIN_ADAGRAD, TRAIN_FTRL};
    static const uint32_t ks[] = {8, 4, 3};
    for (size_t ci = 0; ci < 6; ci++) { /* each optimizer with norm off, then on */
        const size_t oi = ci % 3;
        const bool norm = ci >= 3;
        train_fm_options_t opt;
        train_fm_defaults(opts[oi], &opt);
        opt.k = ks[oi];
        opt.init_stdev = 0.1;
        opt.norm = norm;
        train_fm_t *t;
        assert_int_equal(train_fm_create(&opt, &t, NULL, 0), 0);
        enum { ROWS = 2000, NF = 20 };
        static uint64_t ids[ROWS][NF];
        static float vals[ROWS][NF];
        uint64_t s = 88172645463325252ULL + oi;
        for (int i = 0; i < ROWS; i++) {
            for (int j = 0; j < NF; j++) {
                ids[i][j] = ((uint64_t)j << 56) | (rnd(&s) % 150 + 1);
                vals[i][j] = (float)(rnd(&s) % 1000) / 1000.0f;
            }
            if (i % 10 == 0)
                ids[i][NF - 1] = ids[i][0]; /* a repeated id */
            if (i % 97 == 5)
                memset(vals[i], 0, sizeof vals[i]); /* |x| = 0: s = 1 */
            float y = ((ids[i][0] ^ ids[i][1]) & 3) == 0 ? 1.0f : 0.0f;
            assert_int_equal(train_fm_update(t, ids[i], vals[i], NF, y, 1.0f, NULL), 0);
        }
        char dir[512];
        snprintf(dir, sizeof dir, "/tmp/tl_fm_export_%d_%s_%d", (int)getpid(),
                 train_optimizer_name(opts[oi]), (int)norm);
        store_meta_t meta = {.model_name = "fm_test", .version = 3};
        store_error_t err;
        if (train_fm_export(t, dir, &meta, &err) != 0)
            fail_msg("export: %s", err.msg);
        model_t *m;
        if (model_load(dir, 1, &m, &err) != 0)
            fail_msg("model_load: %s", err.msg);
        assert_int_equal(model_meta(m)->model_kind, STORE_MODEL_FM);
        assert_int_equal(model_meta(m)->version, 3);
        assert_int_equal(model_value_floats(m), 1 + ks[oi]);
        const char *np = store_extras_get(model_extras(m), "norm");
        if (norm)
            assert_true(np && strcmp(np, "1") == 0);
        else
            assert_null(np); /* the same snapshot as before normalisation existed */
        model_scratch_t *sc;
        assert_int_equal(model_scratch_create(NF, &sc), 0);
        assert_int_equal(model_scratch_reserve(sc, NF, model_value_floats(m)), 1);
        double sumsq = 0;
        for (int i = 0; i < ROWS; i++) {
            codec_block_t shared = {.ids = ids[i], .values = vals[i], .n = NF};
            codec_block_t item = {.ids = ids[i] + NF, .values = NULL, .n = 0};
            float score;
            assert_int_equal(model_score(m, &shared, &item, 1, &score, sc), 0);
            float mine = train_fm_predict(t, ids[i], vals[i], NF);
            if (memcmp(&score, &mine, sizeof score) != 0)
                fail_msg("%s norm %d row %d: served %.9g, trainer %.9g",
                         train_optimizer_name(opts[oi]), (int)norm, i, score, mine);
            /* the same row split as shared + item agrees to rounding */
            codec_block_t sh2 = {ids[i], vals[i], NF / 2};
            codec_block_t it2 = {ids[i] + NF / 2, vals[i] + NF / 2, NF - NF / 2};
            float split;
            assert_int_equal(model_score(m, &sh2, &it2, 1, &split, sc), 0);
            assert_float_equal(split, mine, 1e-6);
            sumsq += (double)(mine - 0.5f) * (mine - 0.5f);
        }
        assert_true(sumsq > 1.0); /* the model learned something */
        model_scratch_destroy(sc);
        model_destroy(m);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        assert_int_equal(system(cmd), 0);
        train_fm_destroy(t);
    }
}

static void test_bad_options(void **state)
{
    (void)state;
    train_fm_options_t opt;
    train_fm_t *t;
    char why[128];
    train_fm_defaults(TRAIN_ADAGRAD, &opt);
    opt.k = 65;
    assert_int_equal(train_fm_create(&opt, &t, why, sizeof why), -EINVAL);
    assert_string_equal(why, "k must be 1..64 for FM");
    opt.k = 0;
    assert_int_equal(train_fm_create(&opt, &t, why, sizeof why), -EINVAL);
    train_fm_defaults(TRAIN_FTRL, &opt);
    opt.k = 64;
    assert_int_equal(train_fm_create(&opt, &t, why, sizeof why), 0);
    train_fm_destroy(t);
    opt.init_stdev = -1;
    assert_int_equal(train_fm_create(&opt, &t, why, sizeof why), -EINVAL);
    assert_string_equal(why, "init stdev must be >= 0");
    train_fm_defaults(TRAIN_ADAGRAD, &opt);
    opt.l2_v_freq = -1;
    assert_int_equal(train_fm_create(&opt, &t, why, sizeof why), -EINVAL);
    assert_string_equal(why, "frequency-adaptive l2 on v must be >= 0");
    opt.l2_v_freq = NAN;
    assert_int_equal(train_fm_create(&opt, &t, why, sizeof why), -EINVAL);
}

/* An FM snapshot whose param norm is not 0 or 1 is refused, naming norm;
 * norm = 0 loads as unnormalised. */
static void test_bad_norm_param(void **state)
{
    (void)state;
    static const char *const vals[] = {"2", "yes", "", "-1", "0"};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        store_options_t so = {.value_floats = 5, .shards = 1, .expected_keys = 4};
        store_t *st;
        assert_int_equal(store_create(&so, &st), 0);
        float row[5] = {0.5f, 0.1f, 0.2f, 0.3f, 0.4f};
        assert_int_equal(store_upsert(st, MODEL_BIAS_ID, row), 1);
        assert_int_equal(store_upsert(st, 42, row), 1);
        char dir[256];
        snprintf(dir, sizeof dir, "/tmp/tl_fm_badnorm_%d_%zu", (int)getpid(), i);
        store_meta_t meta = {.model_name = "fm", .model_kind = STORE_MODEL_FM, .version = 1};
        store_extras_t x = {0};
        assert_int_equal(store_extras_set(&x, "norm", vals[i]), 0);
        store_error_t err;
        if (store_snapshot_write_ex(st, dir, &meta, &x, &err) != 0)
            fail_msg("snapshot: %s", err.msg);
        store_destroy(st);
        model_t *m = NULL;
        int rc = model_load(dir, 1, &m, &err);
        if (strcmp(vals[i], "0") == 0) {
            assert_int_equal(rc, 0);
            model_scratch_t *sc;
            assert_int_equal(model_scratch_create(4, &sc), 0);
            assert_int_equal(model_scratch_fit(sc, m, 4), 1);
            uint64_t id = 42;
            float xv = 3.0f, score;
            codec_block_t shared = {&id, &xv, 1}, item = {NULL, NULL, 0};
            assert_int_equal(model_score(m, &shared, &item, 1, &score, sc), 0);
            assert_float_equal(score, sigmoid_d(0.5 + 0.5 * 3.0), 1e-6); /* not 0.5 + 0.5 */
            model_scratch_destroy(sc);
            model_destroy(m);
        } else {
            assert_int_equal(rc, -EBADMSG); /* a sound snapshot, a model it refuses */
            assert_int_equal(err.code, STORE_E_MODEL);
            if (!strstr(err.msg, "norm"))
                fail_msg("norm '%s': the error does not name norm: %s", vals[i], err.msg);
        }
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        assert_int_equal(system(cmd), 0);
    }
}

/* ---- quality on the reference sets (--quality) ---------------------------- */

static int run_file(train_fm_t *t, const char *path, int train, metrics_result_t *res)
{
    reader_options_t ro = {.format = READER_LIBFFM};
    reader_t *r;
    char err[512];
    if (reader_open(path, &ro, &r, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    metrics_t *m = NULL;
    if (!train && metrics_create(&m) != 0) {
        reader_close(r);
        return -1;
    }
    reader_sample_t s;
    int rc;
    while ((rc = reader_next(r, &s)) == 1) {
        if (train) {
            if (train_fm_update(t, s.ids, s.values, s.n, s.label, 1.0f, NULL) != 0) {
                rc = -1;
                break;
            }
        } else if (metrics_add(m, train_fm_predict(t, s.ids, s.values, s.n), s.label) != 0) {
            rc = -1;
            break;
        }
    }
    if (rc < 0)
        fprintf(stderr, "%s: %s\n", path, reader_error(r));
    reader_close(r);
    if (m) {
        if (rc == 0)
            metrics_compute(m, res);
        metrics_destroy(m);
    }
    return rc;
}

/* xLearn FM's test figures (k 4, lr 0.2, lambda 2e-5, 10 epochs, instance
 * normalisation): ours must be within QUALITY_SLACK of them. */
static const struct {
    const char *set;
    double logloss, auc;
} xlearn_fm[] = {
    {"criteo_tiny", 0.4937, 0.667},
    {"xlearn_criteo", 0.5376, 0.589},
    {"avazu_rx", 0.3850, 0.724},
    {"ipinyou", 0.0249, 0.584},
};
#define QUALITY_SLACK 0.005

static int quality(void)
{
    const char *data = getenv("TL_SHARED_DATA");
    int ran = 0, failed = 0;
    for (size_t d = 0; d < sizeof xlearn_fm / sizeof xlearn_fm[0]; d++) {
        char tr[1024], te[1024];
        snprintf(tr, sizeof tr, "%s/%s/train.ffm", data ? data : "", xlearn_fm[d].set);
        snprintf(te, sizeof te, "%s/%s/test.ffm", data ? data : "", xlearn_fm[d].set);
        if (!data || access(tr, R_OK) != 0 || access(te, R_OK) != 0) {
            fprintf(stderr, "test_fm --quality: no %s under TL_SHARED_DATA: skipped\n",
                    xlearn_fm[d].set);
            continue;
        }
        /* exactly tltrain --model fm with no options */
        train_fm_options_t opt;
        train_fm_defaults(TRAIN_ADAGRAD, &opt);
        train_fm_t *t;
        if (train_fm_create(&opt, &t, NULL, 0) != 0)
            return 1;
        metrics_result_t res;
        int rc = 0;
        for (int ep = 0; ep < TRAIN_FM_DEFAULT_EPOCHS && rc == 0; ep++)
            rc = run_file(t, tr, 1, NULL);
        if (rc == 0)
            rc = run_file(t, te, 0, &res);
        train_fm_destroy(t);
        if (rc != 0)
            return 1;
        const double max_ll = xlearn_fm[d].logloss + QUALITY_SLACK;
        const double min_auc = xlearn_fm[d].auc - QUALITY_SLACK;
        int ok = res.logloss <= max_ll && res.auc >= min_auc;
        printf("%-13s FM-Adagrad (defaults: k %u, norm %d, %d epochs): logloss %.4f (<= %.4f) "
               "auc %.4f (>= %.4f) calibration %.3f: %s\n",
               xlearn_fm[d].set, opt.k, (int)opt.norm, TRAIN_FM_DEFAULT_EPOCHS, res.logloss,
               max_ll, res.auc, min_auc, res.calibration, ok ? "ok" : "FAIL");
        ran++;
        failed += !ok;
    }
    if (!ran) {
        fprintf(stderr, "test_fm --quality: none of the reference sets found: skipped\n");
        return 77;
    }
    return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--quality") == 0)
        return quality();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradient_fd),
        cmocka_unit_test(test_decomposition_vs_naive),
        cmocka_unit_test(test_export_roundtrip),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_bad_norm_param),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
