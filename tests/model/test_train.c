/*
 * test_train.c — LR training.
 *
 *   - FTRL-Proximal against a sequence of updates computed by hand (two
 *     samples, bias + two coordinates, L1 zeroing a weight);
 *   - Adagrad and SGD single steps;
 *   - a repeated id in one sample sees its own first update;
 *   - train -> export -> model_load -> model_score equals the trainer's own
 *     predictions bit for bit;
 *   - with --quality: LR-FTRL on ../shared/data/criteo_tiny (TL_SHARED_DATA)
 *     must reach xLearn's figures (logloss <= 0.5794 + 0.005, AUC >= 0.623 -
 *     0.005); exits 77 when the data is absent.
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

#define A_ID ((UINT64_C(1) << 56) | 11)
#define B_ID ((UINT64_C(2) << 56) | 22)

static train_lr_t *make(train_optimizer_t o, double alpha, double beta, double l1, double l2)
{
    train_lr_options_t opt = {.optimizer = o, .alpha = alpha, .beta = beta, .l1 = l1, .l2 = l2};
    train_lr_t *t;
    char why[128];
    assert_int_equal(train_lr_create(&opt, &t, why, sizeof why), 0);
    return t;
}

static void state_is(const train_lr_t *t, uint64_t id, double z, double n, double w)
{
    float st[3];
    assert_int_equal(store_lookup(train_lr_store(t), id, st), 1);
    assert_float_equal(st[0], z, 1e-6);
    assert_float_equal(st[1], n, 1e-6);
    assert_float_equal(st[2], w, 1e-6);
}

/* alpha 0.1, beta 1, l1 0.1, l2 1; the bias is unregularised.
 *
 * Sample 1: x = {A: 1, B: 2}, y = 1.  All weights 0 -> p = 0.5, g = -0.5.
 *   bias: sigma = (sqrt(.25) - 0) / .1 = 5; z = -0.5; n = .25;
 *         w = 0.5 / ((1 + 0.5) / 0.1)            = 0.0333333
 *   A:    z = -0.5; n = .25; w = (0.5 - 0.1) / (15 + 1) = 0.025
 *   B:    g = -1: z = -1; n = 1; w = (1 - 0.1) / (20 + 1) = 0.0428571
 * Sample 2: x = {A: 1}, y = 0.  p = sigmoid(0.0333333 + 0.025) = 0.5145792
 *   bias: n = .25 + p^2 = .5147917; sigma = (sqrt(n) - .5) / .1 = 2.17494;
 *         z = -0.5 + p - sigma * 0.0333333 = -0.0579175;
 *         w = 0.0579175 / ((1 + sqrt(n)) / 0.1) = 0.0033722
 *   A:    z = -0.5 + p - sigma * 0.025 = -0.0397933: |z| <= l1 -> w = 0 */
static void test_ftrl_by_hand(void **state)
{
    (void)state;
    train_lr_t *t = make(TRAIN_FTRL, 0.1, 1.0, 0.1, 1.0);
    const uint64_t ids1[] = {A_ID, B_ID};
    const float x1[] = {1.0f, 2.0f};
    float p;
    assert_int_equal(train_lr_update(t, ids1, x1, 2, 1.0f, 1.0f, &p), 0);
    assert_true(p == 0.5f);
    state_is(t, MODEL_BIAS_ID, -0.5, 0.25, 0.0333333351);
    state_is(t, A_ID, -0.5, 0.25, 0.025);
    state_is(t, B_ID, -1.0, 1.0, 0.0428571440);

    const uint64_t ids2[] = {A_ID};
    assert_int_equal(train_lr_update(t, ids2, NULL, 1, 0.0f, 1.0f, &p), 0);
    assert_float_equal(p, 0.514579177, 1e-7);
    state_is(t, MODEL_BIAS_ID, -0.0579174533, 0.514791727, 0.0033722152);
    state_is(t, A_ID, -0.0397932939, 0.514791727, 0.0);
    state_is(t, B_ID, -1.0, 1.0, 0.0428571440); /* untouched */
    assert_true(train_lr_weight(t, A_ID) == 0.0f);
    /* Next prediction uses the new weights. */
    assert_float_equal(train_lr_predict(t, ids1, x1, 2),
                       1.0 / (1.0 + exp(-(0.0033722152 + 0.0 + 2 * 0.0428571440))), 1e-6);
    train_lr_destroy(t);
}

static void test_adagrad_sgd(void **state)
{
    (void)state;
    const uint64_t ids[] = {A_ID};
    const float x[] = {2.0f};
    /* Adagrad (lr .1, eps 0, l2 0): g = -0.5 * 2 = -1; G = 1; w = 0.1. */
    train_lr_t *t = make(TRAIN_ADAGRAD, 0.1, 0.0, 0.0, 0.0);
    assert_int_equal(train_lr_update(t, ids, x, 1, 1.0f, 1.0f, NULL), 0);
    float st[2];
    assert_int_equal(store_lookup(train_lr_store(t), A_ID, st), 1);
    assert_float_equal(st[0], 0.1, 1e-7);
    assert_float_equal(st[1], 1.0, 1e-7);
    /* second step: p = sigmoid(0.1 [bias: g=-0.5, G=.25 -> .1] + 0.2) */
    float p;
    assert_int_equal(train_lr_update(t, ids, x, 1, 1.0f, 1.0f, &p), 0);
    double pe = 1.0 / (1.0 + exp(-0.3));
    assert_float_equal(p, pe, 1e-6);
    double g = (pe - 1) * 2, G = 1 + g * g;
    assert_int_equal(store_lookup(train_lr_store(t), A_ID, st), 1);
    assert_float_equal(st[0], 0.1 - 0.1 * g / sqrt(G), 1e-6);
    train_lr_destroy(t);

    /* SGD (lr .1, l2 .5): w = 0 - .1 * (-1 + 0) = 0.1; then bias .05. */
    t = make(TRAIN_SGD, 0.1, 0.0, 0.0, 0.5);
    assert_int_equal(train_lr_update(t, ids, x, 1, 1.0f, 1.0f, NULL), 0);
    assert_float_equal(train_lr_weight(t, A_ID), 0.1, 1e-7);
    assert_float_equal(train_lr_weight(t, MODEL_BIAS_ID), 0.05, 1e-7);
    train_lr_destroy(t);
}

static void test_repeated_id(void **state)
{
    (void)state;
    /* {A, A} must equal two sequential FTRL steps on A with the same g. */
    train_lr_t *t = make(TRAIN_FTRL, 0.1, 1.0, 0.0, 0.0);
    const uint64_t ids[] = {A_ID, A_ID};
    assert_int_equal(train_lr_update(t, ids, NULL, 2, 1.0f, 1.0f, NULL), 0);
    /* step 1: z=-.5 n=.25 w=.5/15; step 2: g=-.5 again, n=.5,
     * sigma=(sqrt(.5)-.5)/.1, z=-1 - sigma*w */
    double w1 = 0.5 / 15, sigma = (sqrt(0.5) - 0.5) / 0.1, z = -1 - sigma * w1;
    state_is(t, A_ID, z, 0.5, -z / ((1 + sqrt(0.5)) / 0.1));
    train_lr_destroy(t);
}

/* One FTRL step (l1 = l2 = 0) on (z, n, w) with gradient g, in double. */
static void ftrl_ref(double *z, double *n, double *w, double g)
{
    double n2 = *n + g * g, sigma = (sqrt(n2) - sqrt(*n)) / 0.1;
    *z += g - sigma * *w;
    *n = n2;
    *w = -*z / ((1 + sqrt(n2)) / 0.1);
}

static void test_repeats_and_bias_in_a_sample(void **state)
{
    (void)state;
    /* {bias, A, bias, A, A}: the bias steps first (always), then each
     * occurrence steps on from the one before it, with the same g; the
     * served store (live) gets every id's last weight. */
    train_lr_t *t = make(TRAIN_FTRL, 0.1, 1.0, 0.0, 0.0);
    store_options_t so = {.value_floats = 1};
    store_t *live;
    assert_int_equal(store_create(&so, &live), 0);
    assert_int_equal(train_lr_attach_live(t, live, NULL, 0), 0);
    const uint64_t ids[] = {MODEL_BIAS_ID, A_ID, MODEL_BIAS_ID, A_ID, A_ID};
    float p;
    assert_int_equal(train_lr_update(t, ids, NULL, 5, 1.0f, 1.0f, &p), 0);
    assert_float_equal(p, 0.5, 1e-7);
    double bz = 0, bn = 0, bw = 0, az = 0, an = 0, aw = 0;
    for (int i = 0; i < 3; i++) {
        ftrl_ref(&bz, &bn, &bw, -0.5);
        ftrl_ref(&az, &an, &aw, -0.5);
    }
    state_is(t, MODEL_BIAS_ID, bz, bn, bw);
    state_is(t, A_ID, az, an, aw);
    float w;
    assert_int_equal(store_lookup(live, A_ID, &w), 1);
    assert_float_equal(w, aw, 1e-6);
    assert_int_equal(store_lookup(live, MODEL_BIAS_ID, &w), 1);
    assert_float_equal(w, bw, 1e-6);
    /* the next sample reads the bias's latest state: p = sigmoid(bw) */
    const uint64_t none[] = {B_ID};
    assert_int_equal(train_lr_update(t, none, NULL, 1, 0.0f, 1.0f, &p), 0);
    assert_float_equal(p, 1 / (1 + exp(-bw)), 1e-6);
    train_lr_destroy(t);
    store_destroy(live);
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void test_export_roundtrip(void **state)
{
    (void)state;
    const char *opts[] = {"ftrl", "adagrad", "sgd"};
    for (int oi = 0; oi < 3; oi++) {
        train_optimizer_t o;
        assert_int_equal(train_optimizer_parse(opts[oi], &o), 0);
        train_lr_options_t opt;
        train_lr_defaults(o, &opt);
        train_lr_t *t;
        assert_int_equal(train_lr_create(&opt, &t, NULL, 0), 0);
        enum { ROWS = 3000, NF = 24 };
        uint64_t ids[ROWS][NF];
        float vals[ROWS][NF];
        uint64_t s = 88172645463325252ULL;
        for (int i = 0; i < ROWS; i++) {
            for (int j = 0; j < NF; j++) {
                ids[i][j] = ((uint64_t)j << 56) | (rnd(&s) % 200 + 1);
                vals[i][j] = (float)(rnd(&s) % 1000) / 1000.0f;
            }
            float y = (ids[i][0] & 7) < 2 ? 1.0f : 0.0f;
            assert_int_equal(train_lr_update(t, ids[i], vals[i], NF, y, 1.0f, NULL), 0);
        }
        const char *tmp = getenv("TL_TEST_TMP");
        char dir[512];
        snprintf(dir, sizeof dir, "/tmp/tl_train_export_%d_%s", (int)getpid(), opts[oi]);
        (void)tmp;
        store_meta_t meta = {.model_name = "lr_test", .version = 7};
        store_error_t err;
        if (train_lr_export(t, dir, &meta, &err) != 0)
            fail_msg("export: %s", err.msg);
        model_t *m;
        if (model_load(dir, 1, &m, &err) != 0)
            fail_msg("model_load: %s", err.msg);
        assert_int_equal(model_meta(m)->model_kind, STORE_MODEL_LR);
        assert_int_equal(model_meta(m)->version, 7);
        model_scratch_t *sc;
        assert_int_equal(model_scratch_create(NF, &sc), 0);
        for (int i = 0; i < ROWS; i++) {
            codec_block_t shared = {.ids = ids[i], .values = vals[i], .n = NF};
            codec_block_t item = {.ids = ids[i] + NF, .values = NULL, .n = 0};
            float score;
            assert_int_equal(model_score(m, &shared, &item, 1, &score, sc), 0);
            float mine = train_lr_predict(t, ids[i], vals[i], NF);
            if (memcmp(&score, &mine, sizeof score) != 0)
                fail_msg("%s row %d: served %.9g, trainer %.9g", opts[oi], i, score, mine);
        }
        model_scratch_destroy(sc);
        model_destroy(m);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        assert_int_equal(system(cmd), 0);
        train_lr_destroy(t);
    }
}

static void test_bad_options(void **state)
{
    (void)state;
    train_lr_options_t opt;
    train_lr_defaults(TRAIN_FTRL, &opt);
    opt.alpha = 0;
    train_lr_t *t;
    char why[128];
    assert_int_equal(train_lr_create(&opt, &t, why, sizeof why), -EINVAL);
    assert_string_equal(why, "learning rate (alpha) must be > 0");
    train_lr_defaults(TRAIN_FTRL, &opt);
    opt.l1 = -1;
    assert_int_equal(train_lr_create(&opt, &t, why, sizeof why), -EINVAL);
    assert_string_equal(why, "l1 must be >= 0");
}

/* ---- quality on criteo_tiny (--quality) ---------------------------------- */

static int run_file(train_lr_t *t, const char *path, int train, metrics_result_t *res)
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
            train_lr_update(t, s.ids, s.values, s.n, s.label, 1.0f, NULL);
        else
            metrics_add(m, train_lr_predict(t, s.ids, s.values, s.n), s.label);
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
        fprintf(stderr, "test_train --quality: no criteo_tiny under TL_SHARED_DATA: skipped\n");
        return 77;
    }
    train_lr_options_t opt;
    train_lr_defaults(TRAIN_FTRL, &opt);
    train_lr_t *t;
    if (train_lr_create(&opt, &t, NULL, 0) != 0)
        return 1;
    metrics_result_t res;
    for (int ep = 0; ep < 3; ep++)
        if (run_file(t, tr, 1, NULL) != 0)
            return 1;
    if (run_file(t, te, 0, &res) != 0)
        return 1;
    train_lr_destroy(t);
    int ok = res.logloss <= 0.5794 + 0.005 && res.auc >= 0.623 - 0.005;
    printf("criteo_tiny LR-FTRL (defaults, 3 epochs): logloss %.4f (<= %.4f) auc %.4f (>= %.4f) "
           "calibration %.3f: %s\n",
           res.logloss, 0.5794 + 0.005, res.auc, 0.623 - 0.005, res.calibration,
           ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--quality") == 0)
        return quality();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ftrl_by_hand),   cmocka_unit_test(test_adagrad_sgd),
        cmocka_unit_test(test_repeated_id),
        cmocka_unit_test(test_repeats_and_bias_in_a_sample),    cmocka_unit_test(test_export_roundtrip),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
