/*
 * test_fm.c — FM scoring (model.c) and training (fm_train.c).
 *
 *   - the trainer's gradient (read back from one SGD step with alpha 1 and
 *     no L2) matches central finite differences of the naive pairwise
 *     margin, for w, v and the bias, on a random sample;
 *   - model_score's shared-block decomposition equals the naive pairwise
 *     formula over shared + item (to 1e-6 relative) on random requests:
 *     k from 1 to 63, values or binary, unknown ids, empty blocks, blocks
 *     contiguous in memory or not;
 *   - train -> export -> model_load -> model_score equals the trainer's own
 *     predictions bit for bit (SGD, Adagrad, FTRL), repeated ids included;
 *   - bad options are refused with a sentence;
 *   - with --quality: FM (tltrain's defaults) on ../shared/data/criteo_tiny
 *     (TL_SHARED_DATA) must reach xLearn FM's figures (logloss <= 0.4937 +
 *     0.005, AUC >= 0.667 - 0.005); exits 77 when the data is absent.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/metrics.h"
#include "model/model.h"
#include "model/reader.h"
#include "model/train.h"

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

static train_fm_t *make_fm(train_optimizer_t o, uint32_t k, double alpha, double l2, double sd)
{
    train_fm_options_t opt;
    train_fm_defaults(o, &opt);
    opt.k = k;
    opt.alpha = alpha;
    opt.l1 = 0;
    opt.l2 = l2;
    opt.l2_v = l2;
    opt.init_stdev = sd;
    opt.seed = 7;
    train_fm_t *t;
    char why[128];
    if (train_fm_create(&opt, &t, why, sizeof why) != 0)
        fail_msg("train_fm_create: %s", why);
    return t;
}

static void test_gradient_fd(void **state)
{
    (void)state;
    enum { N = 12, K = 5, R = K + 1 };
    uint64_t s = 0x1234567887654321ULL;
    uint64_t ids[N];
    float vals[N];
    double x[N];
    for (uint32_t j = 0; j < N; j++) {
        ids[j] = ((uint64_t)(j + 1) << 56) | (rnd(&s) >> 20);
        vals[j] = (float)urand(&s, 0.25, 1.5);
        x[j] = vals[j];
    }
    train_fm_t *t = make_fm(TRAIN_SGD, K, 1.0, 0.0, 0.3);
    float p;
    /* a first step moves w and the bias off 0 */
    assert_int_equal(train_fm_update(t, ids, vals, N, 1.0f, &p), 0);

    const store_t *st = train_fm_store(t);
    double before[N * R], after[N * R], bias0, bias1;
    float row[R];
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

    /* SGD, alpha 1, no L2: param_new = param - g * d margin / d param */
    assert_int_equal(train_fm_update(t, ids, vals, N, 0.0f, &p), 0);
    assert_true(p == pred);
    double g = (double)p - 0.0;
    assert_int_equal(store_lookup(st, MODEL_BIAS_ID, row), 1);
    bias1 = row[0];
    for (uint32_t j = 0; j < N; j++) {
        assert_int_equal(store_lookup(st, ids[j], row), 1);
        for (uint32_t i = 0; i < R; i++)
            after[j * R + i] = row[i];
    }
    assert_float_equal((bias0 - bias1) / g, 1.0, 1e-5);

    const double h = 1e-5;
    double probe[N * R];
    int checked = 0;
    for (uint32_t c = 0; c < N * R; c++) {
        memcpy(probe, before, sizeof probe);
        probe[c] = before[c] + h;
        double up = naive_margin(bias0, probe, x, N, K);
        probe[c] = before[c] - h;
        double down = naive_margin(bias0, probe, x, N, K);
        double fd = (up - down) / (2 * h);
        double analytic = (before[c] - after[c]) / g;
        double tol = 1e-4 * fmax(1.0, fabs(fd)) + 1e-5;
        if (fabs(fd - analytic) > tol)
            fail_msg("param %u (feature %u, %s%u): finite difference %.9g, trainer %.9g", c,
                     c / R, c % R ? "v_" : "w", c % R, fd, analytic);
        checked++;
    }
    assert_int_equal(checked, N * R);
    train_fm_destroy(t);
}

/* ---- decomposition vs naive ---------------------------------------------- */

#define MAXF 4096

static void test_decomposition_vs_naive(void **state)
{
    (void)state;
    static const uint32_t ks[] = {1, 2, 4, 16, 63};
    uint64_t s = 0xfeedfacecafebeefULL;
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        const uint32_t k = ks[ki], K = k + 1;
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
        store_meta_t meta = {.model_name = "fm", .model_kind = STORE_MODEL_FM, .version = 1};
        model_t *m;
        assert_int_equal(model_from_store(st, &meta, &m), 0);
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
            model_block_t shared = {ids, use_vals ? vals : NULL, ns};
            model_block_t items[ITEMS];
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
                items[i] = (model_block_t){ip, use_vals ? vp : NULL, ni[i]};
                off += ni[i];
            }
            float scores[ITEMS];
            assert_int_equal(model_score(m, &shared, items, ITEMS, scores, sc), 0);

            static double r[MAXF * 64], x[MAXF];
            off = ns;
            for (int i = 0; i < ITEMS; i++) {
                uint32_t n = 0;
                for (uint32_t pass = 0; pass < 2; pass++) {
                    uint32_t from = pass == 0 ? 0 : off, cnt = pass == 0 ? ns : ni[i];
                    for (uint32_t j = from; j < from + cnt; j++, n++) {
                        for (uint32_t c = 0; c < K; c++)
                            r[(size_t)n * K + c] =
                                which[j] ? rows[(size_t)which[j] * K + c] : 0.0;
                        x[n] = use_vals ? (double)vals[j] : 1.0;
                    }
                }
                double want = sigmoid_d(naive_margin(rows[0], r, x, n, k));
                double err = fabs((double)scores[i] - want);
                if (err > 1e-6 * fabs(want) + 1e-30)
                    fail_msg("k %u trial %d item %d: model %.9g naive %.9g", k, trial, i,
                             scores[i], want);
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
    for (size_t oi = 0; oi < 3; oi++) {
        train_fm_options_t opt;
        train_fm_defaults(opts[oi], &opt);
        opt.k = ks[oi];
        opt.init_stdev = 0.1;
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
            float y = ((ids[i][0] ^ ids[i][1]) & 3) == 0 ? 1.0f : 0.0f;
            assert_int_equal(train_fm_update(t, ids[i], vals[i], NF, y, NULL), 0);
        }
        char dir[512];
        snprintf(dir, sizeof dir, "/tmp/tl_fm_export_%d_%s", (int)getpid(),
                 train_optimizer_name(opts[oi]));
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
        model_scratch_t *sc;
        assert_int_equal(model_scratch_create(NF, &sc), 0);
        assert_int_equal(model_scratch_reserve(sc, NF, model_value_floats(m)), 1);
        double sumsq = 0;
        for (int i = 0; i < ROWS; i++) {
            model_block_t shared = {.ids = ids[i], .values = vals[i], .n = NF};
            model_block_t item = {.ids = ids[i] + NF, .values = NULL, .n = 0};
            float score;
            assert_int_equal(model_score(m, &shared, &item, 1, &score, sc), 0);
            float mine = train_fm_predict(t, ids[i], vals[i], NF);
            if (memcmp(&score, &mine, sizeof score) != 0)
                fail_msg("%s row %d: served %.9g, trainer %.9g",
                         train_optimizer_name(opts[oi]), i, score, mine);
            /* the same row split as shared + item agrees to rounding */
            model_block_t sh2 = {ids[i], vals[i], NF / 2};
            model_block_t it2 = {ids[i] + NF / 2, vals[i] + NF / 2, NF - NF / 2};
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
}

/* ---- quality on criteo_tiny (--quality) ---------------------------------- */

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
    if (!train && metrics_create(&m) != 0)
        return -1;
    reader_sample_t s;
    int rc;
    while ((rc = reader_next(r, &s)) == 1) {
        if (train)
            train_fm_update(t, s.ids, s.values, s.n, s.label, NULL);
        else
            metrics_add(m, train_fm_predict(t, s.ids, s.values, s.n), s.label);
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
        fprintf(stderr, "test_fm --quality: no criteo_tiny under TL_SHARED_DATA: skipped\n");
        return 77;
    }
    train_fm_options_t opt;
    train_fm_defaults(TRAIN_ADAGRAD, &opt);
    train_fm_t *t;
    if (train_fm_create(&opt, &t, NULL, 0) != 0)
        return 1;
    metrics_result_t res;
    if (run_file(t, tr, 1, NULL) != 0 || run_file(t, te, 0, &res) != 0)
        return 1;
    train_fm_destroy(t);
    const double max_ll = 0.4937 + 0.005, min_auc = 0.667 - 0.005;
    int ok = res.logloss <= max_ll && res.auc >= min_auc;
    printf("criteo_tiny FM-Adagrad (defaults, k %u, 1 epoch): logloss %.4f (<= %.4f) auc %.4f "
           "(>= %.4f) calibration %.3f: %s\n",
           opt.k, res.logloss, max_ll, res.auc, min_auc, res.calibration, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
