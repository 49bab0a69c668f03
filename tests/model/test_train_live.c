/*
 * test_train_live.c — FM, FFM and DNN trainers learning into a served store
 * (train_attach_live_model), as the server's online trainer drives them:
 * the served model is an export of another trainer, loaded with
 * model_load() and scored with model_score(), and a fresh trainer (the
 * DNN's with another seed: another MLP) is attached to its store and
 * extras.  For every optimizer the kind has (the DNN: its MLP frozen):
 *
 *   - before any step the attached trainer predicts exactly the served
 *     scores (it reads the served rows), and its first update reports the
 *     served score as its prediction before the step: it starts from the
 *     served values, not from a fresh initialisation;
 *   - after N updates (ids already served, ids new to the served model,
 *     one shared block with several items) model_score() of the served
 *     store equals train_predict() float for float on every sample, the
 *     new ids are in the served store, and a positive sample's served
 *     score rose: a trainer that wrote nothing fails all three;
 *   - a store of another width (LR's one float, FM's of another k) is
 *     refused with a sentence; detaching works;
 *   - FFM-FTRL: an id the trainer lacks starts from its served w with the
 *     z whose closed form is that w, so a step of weight 0 (g = 0) leaves
 *     every served w where it was (a z left 0 would drop each to 0);
 *   - a step whose serving row would not be finite is -ERANGE (SGD and
 *     FFM-FTRL for sure) and never reaches the served store.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/model.h"
#include "model/train.h"
#include "train_samples.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { SAMPLES = 300, NS = 5, NI = 3, NF = NS + NI, FIELDS = 4, NEW_BASE = 1000 };

/* Samples over FIELDS fields (field in the top byte), values in (0, 1];
 * with fresh, ids from NEW_BASE up: none of them in the served model. */
struct data {
    uint64_t ids[SAMPLES][NF];
    float vals[SAMPLES][NF];
    float labels[SAMPLES];
};

static void make_data(struct data *d, uint64_t seed, bool fresh)
{
    make_samples(&d->ids[0][0], &d->vals[0][0], d->labels, SAMPLES, NF, FIELDS, NEW_BASE, seed,
                 fresh, false);
}

struct config {
    store_model_kind_t kind;
    train_optimizer_t opt;
};

static const struct config configs[] = {
    {STORE_MODEL_FM, TRAIN_ADAGRAD}, {STORE_MODEL_FM, TRAIN_FTRL},
    {STORE_MODEL_FM, TRAIN_SGD},     {STORE_MODEL_FFM, TRAIN_ADAGRAD},
    {STORE_MODEL_FFM, TRAIN_SGD},    {STORE_MODEL_FFM, TRAIN_FTRL},
    {STORE_MODEL_DNN, TRAIN_ADAGRAD},
};

static void options_for(const struct config *c, train_options_t *o)
{
    assert_int_equal(train_defaults(c->kind, c->opt, o), 0);
    if (c->kind == STORE_MODEL_FFM) {
        o->ffm.optimizer = c->opt;
        o->ffm.fields = FIELDS;
        o->ffm.k = 2;
    } else if (c->kind == STORE_MODEL_DNN) {
        o->dnn.fields = FIELDS;
        o->dnn.dim = 3;
        o->dnn.n_hidden = 1;
        o->dnn.hidden[0] = 8;
        o->dnn.lr_sparse = 0.1;
    } else {
        o->fm.k = 3;
    }
}

/* The served model: a trainer's export after one pass over d, loaded. */
static model_t *served_model(const train_options_t *o, const struct data *d, const char *tag)
{
    train_t *t;
    char why[256];
    if (train_create(o, &t, why, sizeof why) != 0)
        fail_msg("create: %s", why);
    for (int i = 0; i < SAMPLES; i++) {
        codec_block_t whole = {.ids = d->ids[i], .values = d->vals[i], .n = NF};
        assert_int_equal(train_update(t, &whole, NULL, 1, &d->labels[i], NULL, NULL), 0);
    }
    char dir[400], cmd[1000];
    const char *tmp = getenv("TL_TEST_TMP");
    if (!tmp || !*tmp || strlen(tmp) > 300)
        tmp = "/tmp";
    snprintf(dir, sizeof dir, "%s/train_live_%d_%s", tmp, (int)getpid(), tag);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && rm -rf '%s'", tmp, dir);
    assert_int_equal(system(cmd), 0);
    store_meta_t meta = {.model_name = "live", .version = 1};
    store_error_t err;
    if (train_export(t, dir, &meta, &err) != 0)
        fail_msg("export: %s", err.msg);
    model_t *m;
    if (model_load(dir, 1, &m, &err) != 0)
        fail_msg("model_load: %s", err.msg);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    train_destroy(t);
    return m;
}

static float served_score(const model_t *m, model_scratch_t *sc, const uint64_t *ids,
                          const float *vals, uint32_t n)
{
    codec_block_t whole = {.ids = ids, .values = vals, .n = n};
    codec_block_t none = {.ids = NULL, .values = NULL, .n = 0};
    float s = NAN;
    assert_int_equal(model_score(m, &whole, &none, 1, &s, sc), 0);
    return s;
}

/* Every sample of d: the served score equals the trainer's prediction. */
static void check_equal(train_t *t, const model_t *m, model_scratch_t *sc, const struct data *d,
                        const char *what)
{
    for (int i = 0; i < SAMPLES; i++) {
        codec_block_t whole = {.ids = d->ids[i], .values = d->vals[i], .n = NF};
        float mine = train_predict(t, &whole, NULL);
        float served = served_score(m, sc, d->ids[i], d->vals[i], NF);
        if (memcmp(&mine, &served, sizeof mine) != 0)
            fail_msg("%s sample %d: served %.9g, trainer %.9g", what, i, served, mine);
    }
}

static void test_learns_into_the_served_store(void **state)
{
    (void)state;
    struct data *old = malloc(sizeof *old), *fresh = malloc(sizeof *fresh);
    assert_non_null(old);
    assert_non_null(fresh);
    make_data(old, 0x2545f4914f6cdd1dULL, false);
    make_data(fresh, 0x9e3779b97f4a7c15ULL, true);
    for (size_t ci = 0; ci < sizeof configs / sizeof *configs; ci++) {
        const struct config *c = &configs[ci];
        char what[64], tag[64];
        snprintf(what, sizeof what, "%s/%s", store_model_kind_name(c->kind),
                 train_optimizer_name(c->opt));
        snprintf(tag, sizeof tag, "%s_%s", store_model_kind_name(c->kind),
                 train_optimizer_name(c->opt));
        train_options_t o;
        options_for(c, &o);
        model_t *m = served_model(&o, old, tag);
        model_scratch_t *sc;
        assert_int_equal(model_scratch_create(NF, &sc), 0);
        assert_true(model_scratch_fit(sc, m, NF) >= 0);
        store_t *live = model_base_store(m);
        const uint32_t K = store_value_floats(live);

        /* served values are not zero: the bias and an id's factors */
        float row[STORE_MAX_VALUE_FLOATS];
        assert_int_equal(store_lookup(live, MODEL_BIAS_ID, row), 1);
        assert_true(row[0] != 0);
        assert_int_equal(store_lookup(live, old->ids[0][1], row), 1);
        assert_true(row[0] != 0 && row[1] != 0);

        train_t *t;
        char why[256];
        if (c->kind == STORE_MODEL_DNN)
            o.dnn.seed = 7; /* another MLP than the served one: it must be copied */
        assert_int_equal(train_create(&o, &t, why, sizeof why), 0);
        if (c->kind == STORE_MODEL_DNN) {
            /* the DNN needs the served MLP, of its own shape */
            why[0] = 0;
            assert_int_equal(train_attach_live(t, live, why, sizeof why), -EINVAL);
            assert_non_null(strstr(why, "train_attach_live_model"));
            train_options_t other = o;
            other.dnn.hidden[0] = 9;
            train_t *t9;
            assert_int_equal(train_create(&other, &t9, why, sizeof why), 0);
            why[0] = 0;
            assert_int_equal(train_attach_live_model(t9, live, model_extras(m), why, sizeof why),
                             -EINVAL);
            assert_non_null(strstr(why, "not this trainer's"));
            train_destroy(t9);
        }
        if (train_attach_live_model(t, live, model_extras(m), why, sizeof why) != 0)
            fail_msg("%s attach: %s", what, why);
        check_equal(t, m, sc, old, what); /* nothing stepped: it reads the served rows */

        /* the first update's prediction is the served score: the rows it
         * steps start from the served values */
        float before = served_score(m, sc, old->ids[3], old->vals[3], NF), p = NAN;
        codec_block_t whole = {.ids = old->ids[3], .values = old->vals[3], .n = NF};
        assert_int_equal(train_update(t, &whole, NULL, 1, &old->labels[3], NULL, &p), 0);
        if (memcmp(&p, &before, sizeof p) != 0)
            fail_msg("%s: first update saw %.9g, served %.9g", what, p, before);

        /* N updates: served ids and new ones, one at a time and as a batch */
        for (int pass = 0; pass < 2; pass++) {
            const struct data *d = pass ? fresh : old;
            for (int i = 0; i < SAMPLES; i++) {
                codec_block_t w = {.ids = d->ids[i], .values = d->vals[i], .n = NF};
                assert_int_equal(train_update(t, &w, NULL, 1, &d->labels[i], NULL, NULL), 0);
            }
        }
        codec_block_t shared = {.ids = fresh->ids[0], .values = fresh->vals[0], .n = NS};
        codec_block_t items[3];
        float labels[3] = {1, 0, 1};
        for (int i = 0; i < 3; i++)
            items[i] = (codec_block_t){.ids = fresh->ids[i] + NS, .values = fresh->vals[i] + NS,
                                       .n = NI};
        assert_int_equal(train_update(t, &shared, items, 3, labels, NULL, NULL), 0);

        check_equal(t, m, sc, old, what);
        check_equal(t, m, sc, fresh, what);
        /* the new ids were inserted, with their serving rows */
        for (int i = 0; i < SAMPLES; i++) {
            memset(row, 0, sizeof row);
            assert_int_equal(store_lookup(live, fresh->ids[i][NF - 1], row), 1);
            bool any = false;
            for (uint32_t f = 0; f < K; f++)
                any |= row[f] != 0;
            assert_true(any);
        }
        /* a clicked sample's served score rises */
        float one = 1, up0 = served_score(m, sc, fresh->ids[7], fresh->vals[7], NF);
        codec_block_t w7 = {.ids = fresh->ids[7], .values = fresh->vals[7], .n = NF};
        for (int r = 0; r < 5; r++)
            assert_int_equal(train_update(t, &w7, NULL, 1, &one, NULL, NULL), 0);
        float up1 = served_score(m, sc, fresh->ids[7], fresh->vals[7], NF);
        if (!(up1 > up0))
            fail_msg("%s: the clicked sample's served score went %.9g -> %.9g", what, up0, up1);

        /* another width is refused, with a sentence; NULL detaches */
        store_options_t so1 = {.value_floats = 1}, so2 = {.value_floats = K + 1};
        store_t *narrow, *wide;
        assert_int_equal(store_create(&so1, &narrow), 0);
        assert_int_equal(store_create(&so2, &wide), 0);
        why[0] = 0;
        assert_int_equal(train_attach_live(t, narrow, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "floats per key"));
        why[0] = 0;
        assert_int_equal(train_attach_live(t, wide, why, sizeof why), -EINVAL);
        assert_non_null(strstr(why, "floats per key"));
        assert_int_equal(train_attach_live(t, NULL, why, sizeof why), 0);
        /* detached: steps no longer reach the served store */
        float d0 = served_score(m, sc, fresh->ids[7], fresh->vals[7], NF);
        assert_int_equal(train_update(t, &w7, NULL, 1, &one, NULL, NULL), 0);
        float d1 = served_score(m, sc, fresh->ids[7], fresh->vals[7], NF);
        assert_memory_equal(&d0, &d1, sizeof d0);

        store_destroy(narrow);
        store_destroy(wide);
        train_destroy(t);
        model_scratch_destroy(sc);
        model_destroy(m);
    }
    free(old);
    free(fresh);
}

/* Feature values near FLT_MAX, unnormalised: a step whose serving row
 * would not be finite is refused with -ERANGE (SGD's factors overflow for
 * sure; Adagrad's steps are bounded by alpha, so it may stay finite) and
 * nothing non-finite ever reaches the served store. */
static void test_non_finite_is_not_served(void **state)
{
    (void)state;
    for (size_t ci = 0; ci < sizeof configs / sizeof *configs; ci++) {
        if (configs[ci].kind == STORE_MODEL_DNN)
            continue; /* needs a served MLP: test_learns_into_the_served_store */
        train_options_t o;
        options_for(&configs[ci], &o);
        if (configs[ci].kind == STORE_MODEL_FM)
            o.fm.norm = false;
        else
            o.ffm.norm = false;
        train_t *t;
        char why[256];
        assert_int_equal(train_create(&o, &t, why, sizeof why), 0);
        store_options_t so = {.value_floats = configs[ci].kind == STORE_MODEL_FM
                                                   ? 1 + o.fm.k
                                                   : 1 + o.ffm.fields * o.ffm.k};
        store_t *live;
        assert_int_equal(store_create(&so, &live), 0);
        assert_int_equal(train_attach_live(t, live, why, sizeof why), 0);
        uint64_t ids[2] = {(1ULL << 56) | 5, (2ULL << 56) | 6};
        float vals[2] = {3e38f, 3e38f}, y = 1;
        codec_block_t b = {.ids = ids, .values = vals, .n = 2};
        int rc = 0;
        for (int r = 0; r < 50 && rc == 0; r++) { /* both labels: one has |g| ~ 1 */
            y = (float)(r & 1);
            rc = train_update(t, &b, NULL, 1, &y, NULL, NULL);
        }
        const bool must = configs[ci].opt == TRAIN_SGD ||
                          (configs[ci].kind == STORE_MODEL_FFM && configs[ci].opt == TRAIN_FTRL);
        if ((must || rc != 0) && rc != -ERANGE)
            fail_msg("%s/%s: rc %d", store_model_kind_name(configs[ci].kind),
                     train_optimizer_name(configs[ci].opt), rc);
        float row[STORE_MAX_VALUE_FLOATS];
        for (int j = 0; j < 2; j++)
            if (store_lookup(live, ids[j], row))
                for (uint32_t f = 0; f < so.value_floats; f++)
                    assert_true(isfinite(row[f]));
        train_destroy(t);
        store_destroy(live);
    }
}

/* FFM-FTRL attached: the served w of every id the trainer lacks (the
 * bias's too: no l1, l2) survives a step of weight 0, which recomputes w
 * from (z, n); with beta 1 (n starts at 0) and beta 0 (the bias's n starts
 * at 1: at n = 0 its closed form has no denominator). */
static void test_ffm_ftrl_starts_at_the_served_w(void **state)
{
    (void)state;
    enum { FK = 2, R = 1 + FIELDS * FK, N = 12 };
    for (int variant = 0; variant < 2; variant++) {
        train_options_t o;
        const struct config c = {STORE_MODEL_FFM, TRAIN_FTRL};
        options_for(&c, &o);
        assert_int_equal(o.ffm.k, FK);
        o.ffm.beta = variant ? 0.0 : 1.0;
        train_t *t;
        char why[256];
        assert_int_equal(train_create(&o, &t, why, sizeof why), 0);
        store_options_t so = {.value_floats = R};
        store_t *live;
        assert_int_equal(store_create(&so, &live), 0);
        uint64_t ids[N + 1];
        float served[N + 1][R];
        for (int i = 0; i <= N; i++) { /* ids[N]: the bias */
            ids[i] = i == N ? MODEL_BIAS_ID : ((uint64_t)(i % FIELDS) << 56) | (uint64_t)(i + 1);
            for (int f = 0; f < R; f++)
                served[i][f] = i == N && f > 0 ? 0.0f : 0.01f * (float)((i * 7 + f) % 11 + 1);
            served[i][0] = (i % 2 ? -1.0f : 1.0f) * (0.003f + 0.4f * (float)i / N);
            assert_true(store_upsert(live, ids[i], served[i]) >= 0);
        }
        assert_int_equal(train_attach_live(t, live, why, sizeof why), 0);
        codec_block_t b = {.ids = ids, .values = NULL, .n = N};
        float y = 1, zero = 0, p = NAN;
        assert_int_equal(train_update(t, &b, NULL, 1, &y, &zero, &p), 0);
        assert_true(isfinite(p));
        const double l1d = o.ffm.l1 / (o.ffm.beta / (o.ffm.alpha * o.ffm.w_ratio) + o.ffm.l2);
        for (int i = 0; i <= N; i++) {
            float now[R];
            assert_int_equal(store_lookup(live, ids[i], now), 1);
            /* z rounds to a float: |dw| <= eps (|w| + l1 / d) */
            double tol = 1e-6 * (fabs((double)served[i][0]) + (i == N ? 0 : l1d));
            if (fabs((double)now[0] - served[i][0]) > tol)
                fail_msg("beta %g, %s: served w %.9g became %.9g", o.ffm.beta,
                         i == N ? "the bias" : "an id", served[i][0], now[0]);
        }
        /* and the step of a real gradient moves them */
        assert_int_equal(train_update(t, &b, NULL, 1, &y, NULL, NULL), 0);
        float now[R];
        assert_int_equal(store_lookup(live, MODEL_BIAS_ID, now), 1);
        assert_true(now[0] > served[N][0]);
        train_destroy(t);
        store_destroy(live);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_learns_into_the_served_store),
        cmocka_unit_test(test_non_finite_is_not_served),
        cmocka_unit_test(test_ffm_ftrl_starts_at_the_served_w),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
