/*
 * test_ffm_train.c — FFM training (train_ffm.c).
 *
 *   - the trainer's analytic margin gradient matches central finite
 *     differences of the naive margin (fields with one, several or no
 *     features, a repeated id, norm on and off);
 *   - one SGD step on a 2-feature sample equals the step computed by hand,
 *     and the v blocks without a data gradient do not move;
 *   - train -> export -> model_load -> model_score (the sample as shared
 *     block, one empty item) equals train_ffm_predict bit for bit (SGD,
 *     Adagrad, norm off, repeated and unseen ids); skipped when model_load
 *     does not serve FFM yet;
 *   - the initialisation depends on the seed only; bad options are refused
 *     with a sentence.
 *
 * Helpers: ffm_testutil.h.
 */

#include "ffm_testutil.h"
#include "model/ffm.h"

/* ---- trainer: gradient -------------------------------------------------------- */

static train_ffm_t *make_ffm(train_optimizer_t o, uint32_t F, uint32_t k, double alpha,
                             double l2, double sd, bool norm)
{
    train_ffm_options_t opt;
    train_ffm_defaults(TRAIN_ADAGRAD, &opt);
    opt.optimizer = o;
    opt.fields = F;
    opt.k = k;
    opt.alpha = alpha;
    opt.l2 = l2;
    opt.l2_v = l2;
    opt.init_stdev = sd;
    opt.norm = norm;
    opt.seed = 7;
    train_ffm_t *t;
    char why[160];
    if (train_ffm_create(&opt, &t, why, sizeof why) != 0)
        fail_msg("train_ffm_create: %s", why);
    return t;
}

static void test_gradient_fd(void **state)
{
    (void)state;
    enum { N = 11, F = 5, KF = 3, K = 1 + F * KF };
    /* fields: 0 x1, 1 x3, 2 none, 3 x2 (one of them repeated), 4 x1, and
     * 6 (= 1 mod 5) x1; one value 0 */
    static const uint32_t fields[N] = {0, 1, 1, 3, 1, 4, 3, 6, 3, 1, 0};
    uint64_t s = 0x1234567887654321ULL;
    for (int norm = 0; norm < 2; norm++) {
        uint64_t ids[N];
        float vals[N];
        for (uint32_t j = 0; j < N; j++) {
            ids[j] = ((uint64_t)fields[j] << 56) | (rnd(&s) >> 20);
            vals[j] = (float)urand(&s, 0.25, 1.5);
        }
        ids[8] = ids[3]; /* a repeated id */
        vals[10] = 0;    /* no gradient at all */
        train_ffm_t *t = make_ffm(TRAIN_SGD, F, KF, 0.05, 0.0, 0.3, norm);
        assert_int_equal(train_ffm_update(t, ids, vals, N, 1.0f, 1.0f, NULL), 0);

        double rows[N * K], x[N], bias, db;
        uint32_t fld[N];
        float row[K];
        assert_int_equal(train_ffm_weights(t, MODEL_BIAS_ID, row), 1);
        bias = row[0];
        for (uint32_t j = 0; j < N; j++) {
            /* the x = 0 feature took no step, so it has no row yet (its row
             * does not matter to the margin) */
            assert_int_equal(train_ffm_weights(t, ids[j], row), j != 10);
            for (uint32_t c = 0; c < K; c++)
                rows[j * K + c] = j != 10 ? row[c] : 0.0;
            x[j] = vals[j];
            fld[j] = ffm_field(ids[j], F);
        }
        double m0 = naive_margin(bias, rows, fld, x, N, F, KF, norm);
        float pred = train_ffm_predict(t, ids, vals, N);
        assert_float_equal(pred, sigmoid_d(m0), 1e-6);

        static double grad[N * K];
        assert_int_equal(train_ffm_margin_gradient(t, ids, vals, N, &db, grad), 0);
        assert_true(db == 1.0);
        const double h = 1e-5;
        int nonzero = 0, zero = 0;
        for (uint32_t j = 0; j < N; j++) {
            if (j == 8)
                continue; /* ids[8] is ids[3]: checked with it */
            for (uint32_t c = 0; c < K; c++) {
                double probe[N * K];
                memcpy(probe, rows, sizeof probe);
                double analytic = grad[j * K + c];
                if (j == 3)
                    analytic += grad[8 * K + c];
                probe[j * K + c] += h;
                if (j == 3)
                    probe[8 * K + c] += h;
                double up = naive_margin(bias, probe, fld, x, N, F, KF, norm);
                probe[j * K + c] -= 2 * h;
                if (j == 3)
                    probe[8 * K + c] -= 2 * h;
                double down = naive_margin(bias, probe, fld, x, N, F, KF, norm);
                double fd = (up - down) / (2 * h);
                if (fabs(fd - analytic) > 1e-6 + 1e-5 * fabs(fd))
                    fail_msg("norm %d feature %u coordinate %u: finite difference %.9g, "
                             "analytic %.9g",
                             norm, j, c, fd, analytic);
                if (fd == 0) {
                    zero++;
                    assert_true(analytic == 0); /* exactly: those blocks are skipped */
                } else {
                    nonzero++;
                }
            }
        }
        /* field 2 has no feature: every v_{j,2} has no gradient, nor has
         * the x = 0 feature, nor v_{j,0} of feature 0 (alone in field 0 but
         * for the x = 0 one) */
        assert_true(zero >= (N - 2) * KF + K - 1);
        assert_true(nonzero > N * K / 2);
        train_ffm_destroy(t);
    }
}

/* ---- trainer: one SGD step by hand ------------------------------------------- */

static void test_sgd_step_by_hand(void **state)
{
    (void)state;
    enum { F = 2, KF = 2, K = 1 + F * KF };
    const double alpha = 0.1, ratio = 0.5, l2 = 0.01, l2v = 0.02;
    const double alpha_w = alpha * ratio; /* the bias and w step at alpha x w_ratio */
    train_ffm_options_t opt;
    train_ffm_defaults(TRAIN_ADAGRAD, &opt);
    opt.optimizer = TRAIN_SGD;
    opt.fields = F;
    opt.k = KF;
    opt.alpha = alpha;
    opt.w_ratio = ratio;
    opt.l2 = l2;
    opt.l2_v = l2v;
    opt.init_stdev = 0.5;
    opt.norm = true;
    train_ffm_t *t;
    assert_int_equal(train_ffm_create(&opt, &t, NULL, 0), 0);
    const uint64_t ids[2] = {(UINT64_C(0) << 56) | 1, (UINT64_C(1) << 56) | 2};
    const float vals[2] = {0.5f, 2.0f};
    const double xa = 0.5, xb = 2.0;
    assert_int_equal(train_ffm_update(t, ids, vals, 2, 1.0f, 1.0f, NULL), 0);

    float b0[K], a0[K], c0[K], b1[K], a1[K], c1[K];
    assert_int_equal(train_ffm_weights(t, MODEL_BIAS_ID, b0), 1);
    assert_int_equal(train_ffm_weights(t, ids[0], a0), 1);
    assert_int_equal(train_ffm_weights(t, ids[1], c0), 1);
    /* a (field 0) meets b (field 1) through v_{a,1} and v_{b,0} */
    const double s2 = 1.0 / (xa * xa + xb * xb), s = sqrt(s2);
    double dot = 0;
    for (int f = 0; f < KF; f++)
        dot += (double)a0[1 + 1 * KF + f] * c0[1 + 0 * KF + f];
    double margin = b0[0] + s * (a0[0] * xa + c0[0] * xb) + s2 * dot * xa * xb;
    double p = sigmoid_d(margin);
    float pout;
    assert_int_equal(train_ffm_update(t, ids, vals, 2, 0.0f, 1.0f, &pout), 0);
    assert_float_equal(pout, p, 1e-6);
    const double g = (double)pout; /* label 0 */
    assert_int_equal(train_ffm_weights(t, MODEL_BIAS_ID, b1), 1);
    assert_int_equal(train_ffm_weights(t, ids[0], a1), 1);
    assert_int_equal(train_ffm_weights(t, ids[1], c1), 1);
    assert_float_equal(b1[0], b0[0] - alpha_w * g, 1e-6);
    assert_float_equal(a1[0], a0[0] - alpha_w * (g * s * xa + l2 * a0[0]), 1e-6);
    assert_float_equal(c1[0], c0[0] - alpha_w * (g * s * xb + l2 * c0[0]), 1e-6);
    for (int f = 0; f < KF; f++) {
        double va = a0[1 + KF + f], vc = c0[1 + f];
        assert_float_equal(a1[1 + KF + f], va - alpha * (g * s2 * xa * xb * vc + l2v * va), 1e-6);
        assert_float_equal(c1[1 + f], vc - alpha * (g * s2 * xa * xb * va + l2v * vc), 1e-6);
    }
    /* v_{a,0} and v_{b,1} have no data gradient: untouched, not even by L2 */
    assert_memory_equal(a1 + 1, a0 + 1, KF * sizeof(float));
    assert_memory_equal(c1 + 1 + KF, c0 + 1 + KF, KF * sizeof(float));
    assert_true(a1[1] != 0); /* ... and not trivially 0 */
    train_ffm_destroy(t);
}

/* ---- export round trip ----------------------------------------------------- */

struct rt_case {
    train_optimizer_t opt;
    uint32_t F, k;
    bool norm;
};

static void test_export_roundtrip(void **state)
{
    (void)state;
    static const struct rt_case cases[] = {
        {TRAIN_SGD, 6, 3, true}, {TRAIN_ADAGRAD, 20, 4, true}, {TRAIN_ADAGRAD, 4, 8, false}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const struct rt_case *rc = &cases[ci];
        train_ffm_options_t opt;
        train_ffm_defaults(TRAIN_ADAGRAD, &opt);
        opt.optimizer = rc->opt;
        opt.fields = rc->F;
        opt.k = rc->k;
        opt.norm = rc->norm;
        opt.alpha = rc->opt == TRAIN_SGD ? 0.1 : 0.05;
        train_ffm_t *t;
        char why[160];
        if (train_ffm_create(&opt, &t, why, sizeof why) != 0)
            fail_msg("create: %s", why);
        enum { ROWS = 400, NF = 16 };
        static uint64_t ids[ROWS][NF];
        static float vals[ROWS][NF];
        uint64_t s = 88172645463325252ULL + ci;
        for (int i = 0; i < ROWS; i++) {
            for (int j = 0; j < NF; j++) {
                ids[i][j] = ((uint64_t)(j % (rc->F + 1)) << 56) | (rnd(&s) % 60 + 1);
                vals[i][j] = (float)(rnd(&s) % 1000) / 500.0f;
            }
            if (i % 10 == 0)
                ids[i][NF - 1] = ids[i][0]; /* a repeated id */
            float y = ((ids[i][0] ^ ids[i][1]) & 3) == 0 ? 1.0f : 0.0f;
            if (i < ROWS - 50) /* the last rows keep unseen ids */
                assert_int_equal(train_ffm_update(t, ids[i], vals[i], NF, y, 1.0f, NULL), 0);
        }
        char dir[512];
        snprintf(dir, sizeof dir, "/tmp/tl_ffm_export_%d_%zu", (int)getpid(), ci);
        store_meta_t meta = {.model_name = "ffm_test", .version = 5};
        store_error_t err;
        if (train_ffm_export(t, dir, &meta, &err) != 0)
            fail_msg("export: %s", err.msg);
        model_t *m;
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (model_load(dir, 1, &m, &err) != 0) {
            assert_int_equal(system(cmd), 0);
            train_ffm_destroy(t);
            if (strstr(err.msg, "is not supported")) { /* model.c without FFM */
                fprintf(stderr, "model_load does not serve FFM yet (%s): skipped\n", err.msg);
                skip();
            }
            fail_msg("model_load: %s", err.msg);
        }
        assert_int_equal(model_meta(m)->model_kind, STORE_MODEL_FFM);
        assert_int_equal(model_meta(m)->version, 5);
        assert_int_equal(model_value_floats(m), 1 + rc->F * rc->k);
        char want[16];
        snprintf(want, sizeof want, "%u", rc->F);
        assert_string_equal(store_extras_get(model_extras(m), "fields"), want);
        snprintf(want, sizeof want, "%u", rc->k);
        assert_string_equal(store_extras_get(model_extras(m), "k"), want);
        assert_string_equal(store_extras_get(model_extras(m), "norm"), rc->norm ? "1" : "0");
        model_scratch_t *sc;
        assert_int_equal(model_scratch_create(NF, &sc), 0);
        assert_true(model_scratch_fit(sc, m, NF) >= 0);
        double sumsq = 0;
        for (int i = 0; i < ROWS; i++) {
            codec_block_t shared = {.ids = ids[i], .values = vals[i], .n = NF};
            codec_block_t item = {.ids = ids[i] + NF, .values = NULL, .n = 0};
            float score, split;
            assert_int_equal(model_score(m, &shared, &item, 1, &score, sc), 0);
            float mine = train_ffm_predict(t, ids[i], vals[i], NF);
            if (memcmp(&score, &mine, sizeof score) != 0)
                fail_msg("case %zu row %d: served %.9g, trainer %.9g", ci, i, score, mine);
            /* split as shared + item: the same float (ffm.c sums in block order) */
            codec_block_t sh2 = {ids[i], vals[i], NF / 2};
            codec_block_t it2 = {ids[i] + NF / 2, vals[i] + NF / 2, NF - NF / 2};
            assert_int_equal(model_score(m, &sh2, &it2, 1, &split, sc), 0);
            if (memcmp(&split, &mine, sizeof split) != 0)
                fail_msg("case %zu row %d: split %.9g, trainer %.9g", ci, i, split, mine);
            sumsq += (double)(mine - 0.5f) * (mine - 0.5f);
        }
        assert_true(sumsq > 1.0); /* the model learned something */
        model_scratch_destroy(sc);
        model_destroy(m);
        assert_int_equal(system(cmd), 0);
        train_ffm_destroy(t);
    }
}

/* ---- initialisation and options ------------------------------------------- */

static void test_seeded_init(void **state)
{
    (void)state;
    const uint64_t ids[3] = {(UINT64_C(0) << 56) | 5, (UINT64_C(1) << 56) | 6,
                             (UINT64_C(2) << 56) | 7};
    float p[3];
    for (int i = 0; i < 3; i++) {
        train_ffm_options_t opt;
        train_ffm_defaults(TRAIN_ADAGRAD, &opt);
        opt.fields = 3;
        opt.seed = i == 2 ? 99 : 1;
        train_ffm_t *t;
        assert_int_equal(train_ffm_create(&opt, &t, NULL, 0), 0);
        assert_int_equal(train_ffm_update(t, ids, NULL, 3, 1.0f, 1.0f, &p[i]), 0);
        train_ffm_destroy(t);
    }
    assert_memory_equal(&p[0], &p[1], sizeof p[0]);
    assert_true(p[0] != p[2]);
}

static void expect_bad(const train_ffm_options_t *opt, const char *sentence)
{
    train_ffm_t *t = NULL;
    char why[160] = "";
    assert_int_equal(train_ffm_create(opt, &t, why, sizeof why), -EINVAL);
    assert_null(t);
    assert_string_equal(why, sentence);
}

static void test_bad_options(void **state)
{
    (void)state;
    train_ffm_options_t opt;
    train_ffm_t *t;
    train_ffm_defaults(TRAIN_ADAGRAD, &opt);
    expect_bad(&opt, "fields must be 1..256 for FFM"); /* the caller must set fields */
    opt.fields = 257;
    expect_bad(&opt, "fields must be 1..256 for FFM");
    opt.fields = 20;
    opt.optimizer = TRAIN_FTRL; /* [w | v | z | n | Gv]: 2 (1 + F k) + 1 floats */
    opt.k = 26;
    expect_bad(&opt, "k must be 1..25 for FFM with 20 fields and ftrl "
                     "(1 + fields x k must be <= 511)");
    opt.k = 25; /* 2 (1 + 500) + 1 = 1003 floats of state */
    assert_int_equal(train_ffm_create(&opt, &t, NULL, 0), 0);
    train_ffm_destroy(t);
    opt.fields = 255;
    opt.k = 2; /* 2 (1 + 510) + 1 = 1023: the widest FTRL row */
    assert_int_equal(train_ffm_create(&opt, &t, NULL, 0), 0);
    train_ffm_destroy(t);
    opt.fields = 256;
    expect_bad(&opt, "k must be 1..1 for FFM with 256 fields and ftrl "
                     "(1 + fields x k must be <= 511)");
    opt.fields = 20;
    opt.k = 4;
    opt.l1 = -1;
    expect_bad(&opt, "l1 must be >= 0");
    opt.l1 = 0.01;
    opt.optimizer = TRAIN_ADAGRAD;
    opt.k = 26;
    expect_bad(&opt, "k must be 1..25 for FFM with 20 fields and adagrad "
                     "(1 + fields x k must be <= 512)");
    opt.k = 25; /* 2 (1 + 500) = 1002 floats of state */
    assert_int_equal(train_ffm_create(&opt, &t, NULL, 0), 0);
    train_ffm_destroy(t);
    opt.optimizer = TRAIN_SGD;
    opt.k = 51; /* 1 + 1020 */
    assert_int_equal(train_ffm_create(&opt, &t, NULL, 0), 0);
    train_ffm_destroy(t);
    opt.k = 0;
    expect_bad(&opt, "k must be 1..51 for FFM with 20 fields and sgd "
                     "(1 + fields x k must be <= 1024)");
    opt.k = 4;
    opt.alpha = 0;
    expect_bad(&opt, "learning rate (alpha) must be > 0");
    opt.alpha = 0.1;
    opt.w_ratio = 0;
    expect_bad(&opt, "the linear step ratio (w_ratio) must be > 0");
    opt.w_ratio = 0.5;
    opt.l2_v = -1;
    expect_bad(&opt, "l2 on v must be >= 0");
    opt.l2_v = 0;
    opt.init_stdev = NAN;
    expect_bad(&opt, "init stdev must be >= 0");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradient_fd),
        cmocka_unit_test(test_sgd_step_by_hand),
        cmocka_unit_test(test_export_roundtrip),
        cmocka_unit_test(test_seeded_init),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
