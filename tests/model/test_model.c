/*
 * test_model.c — LR scoring through model.h against a direct computation:
 * sigmoid(bias + shared + item) in double, block by block, from the weights
 * the test itself put in the store.  Scores must be equal exactly (same
 * order of additions), unknown ids must count 0, and the guard rails
 * (-E2BIG, -ENOTSUP) must hold: which kinds and widths a model accepts, and
 * a scratch that must grow before it can score an FM model and that gives
 * its memory back when fitted to a narrower model afterwards.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/model.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NKEYS 5000

static float weight_of(uint64_t id) { return (float)((int64_t)(id % 2001) - 1000) / 4096.0f; }
static uint64_t id_of(uint32_t i) { return ((uint64_t)(i % 39) << 56) | (i * 0x9e3779b97f4a7c15ULL >> 8); }

static model_t *make_model(float bias)
{
    store_options_t opt = {.value_floats = 1, .shards = 4, .expected_keys = NKEYS + 1};
    store_t *s;
    assert_int_equal(store_create(&opt, &s), 0);
    for (uint32_t i = 1; i <= NKEYS; i++) {
        float w = weight_of(id_of(i));
        assert_int_equal(store_upsert(s, id_of(i), &w), 1);
    }
    assert_int_equal(store_upsert(s, MODEL_BIAS_ID, &bias), 1);
    store_meta_t meta = {.model_name = "t", .model_kind = STORE_MODEL_LR, .version = 1};
    model_t *m;
    assert_int_equal(model_from_store(s, &meta, &m), 0);
    return m;
}

static double ref_block(const codec_block_t *b)
{
    double sum = 0;
    for (uint32_t j = 0; j < b->n; j++) {
        uint64_t id = b->ids[j];
        int known = 0;
        for (uint32_t i = 1; i <= NKEYS && !known; i++)
            known = id_of(i) == id;
        double w = known ? weight_of(id) : 0.0;
        sum += b->values ? w * b->values[j] : w;
    }
    return sum;
}

static float ref_sigmoid(double x)
{
    if (x >= 0)
        return (float)(1.0 / (1.0 + exp(-x)));
    double e = exp(x);
    return (float)(e / (1.0 + e));
}

static void test_lr_scores_exact(void **state)
{
    (void)state;
    const float bias = -1.25f;
    model_t *m = make_model(bias);
    enum { ITEMS = 50, SHARED = 30, PER = 20 };
    uint64_t shared_ids[SHARED], item_ids[ITEMS][PER];
    float item_vals[ITEMS][PER];
    codec_block_t items[ITEMS];
    for (uint32_t j = 0; j < SHARED; j++)
        shared_ids[j] = id_of(1 + j * 7);
    for (uint32_t i = 0; i < ITEMS; i++) {
        for (uint32_t j = 0; j < PER; j++) {
            uint32_t k = 1 + (i * 131 + j * 17) % (NKEYS + 500); /* some unknown */
            item_ids[i][j] = id_of(k);
            item_vals[i][j] = 0.5f + (float)j / 8.0f;
        }
        items[i] = (codec_block_t){item_ids[i], i % 2 ? item_vals[i] : NULL, PER};
    }
    codec_block_t shared = {shared_ids, NULL, SHARED};
    model_scratch_t *sc;
    assert_int_equal(model_scratch_create(SHARED + ITEMS * PER, &sc), 0);
    float scores[ITEMS];
    assert_int_equal(model_score(m, &shared, items, ITEMS, scores, sc), 0);
    double base = (double)bias + ref_block(&shared);
    for (uint32_t i = 0; i < ITEMS; i++) {
        float want = ref_sigmoid(base + ref_block(&items[i]));
        assert_true(scores[i] == want);
        assert_true(scores[i] > 0.0f && scores[i] < 1.0f);
    }
    /* too many features for the scratch */
    model_scratch_t *small;
    assert_int_equal(model_scratch_create(10, &small), 0);
    assert_int_equal(model_score(m, &shared, items, ITEMS, scores, small), -E2BIG);
    model_scratch_destroy(small);
    model_scratch_destroy(sc);
    model_destroy(m);
}

static void test_unknown_ids_and_extremes(void **state)
{
    (void)state;
    model_t *m = make_model(0.0f);
    uint64_t unknown[3] = {id_of(NKEYS + 1), id_of(NKEYS + 2), UINT64_MAX};
    codec_block_t shared = {NULL, NULL, 0};
    codec_block_t item = {unknown, NULL, 3};
    model_scratch_t *sc;
    assert_int_equal(model_scratch_create(16, &sc), 0);
    float score;
    assert_int_equal(model_score(m, &shared, &item, 1, &score, sc), 0);
    assert_true(score == 0.5f); /* sigmoid(0): nothing known, bias 0 */
    float big = 1e30f, vals[1] = {big};
    uint64_t one[1] = {id_of(1)};
    codec_block_t huge = {one, vals, 1};
    assert_int_equal(model_score(m, &shared, &huge, 1, &score, sc), 0);
    assert_false(isnan(score));
    assert_true(score == 0.0f || score == 1.0f);
    model_scratch_destroy(sc);
    model_destroy(m);
}

static void test_kinds_accepted(void **state)
{
    (void)state;
    static const struct { store_model_kind_t kind; uint32_t K; int rc; } cases[] = {
        {STORE_MODEL_FM, 4, 0},           {STORE_MODEL_FM, 2, 0},
        {STORE_MODEL_FM, 64, 0},          {STORE_MODEL_FM, 1, -ENOTSUP},
        {STORE_MODEL_LR, 4, -ENOTSUP},    {STORE_MODEL_FFM, 4, -ENOTSUP},
        {STORE_MODEL_DNN, 8, -ENOTSUP},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        store_options_t opt = {.value_floats = cases[c].K};
        store_t *s;
        assert_int_equal(store_create(&opt, &s), 0);
        store_meta_t meta = {.model_name = "m", .model_kind = cases[c].kind, .version = 1};
        model_t *m = NULL;
        assert_int_equal(model_from_store(s, &meta, &m), cases[c].rc);
        if (cases[c].rc == 0) {
            assert_int_equal(model_value_floats(m), cases[c].K);
            model_destroy(m);
        } else {
            assert_null(m);
            store_destroy(s);
        }
    }
}

/* A scratch made for LR says -E2BIG to an FM model until it is grown; growing
 * is idempotent and never shrinks. */
static void test_scratch_reserve(void **state)
{
    (void)state;
    store_options_t opt = {.value_floats = 5};
    store_t *s;
    assert_int_equal(store_create(&opt, &s), 0);
    store_meta_t meta = {.model_name = "fm", .model_kind = STORE_MODEL_FM, .version = 1};
    model_t *m;
    assert_int_equal(model_from_store(s, &meta, &m), 0);
    uint64_t ids[3] = {1, 2, 3};
    codec_block_t shared = {ids, NULL, 2}, item = {ids + 2, NULL, 1};
    model_scratch_t *sc;
    float score;
    assert_int_equal(model_scratch_create(8, &sc), 0);
    assert_int_equal(model_score(m, &shared, &item, 1, &score, sc), -E2BIG);
    assert_int_equal(model_scratch_reserve(sc, 8, model_value_floats(m)), 1);
    assert_int_equal(model_scratch_reserve(sc, 8, model_value_floats(m)), 0);
    assert_int_equal(model_scratch_reserve(sc, 4, 1), 0);
    assert_int_equal(model_score(m, &shared, &item, 1, &score, sc), 0);
    assert_true(score == 0.5f); /* empty model */
    codec_block_t big = {ids, NULL, 3};
    codec_block_t many[4] = {big, big, big, big};
    assert_int_equal(model_score(m, &shared, many, 4, &score, sc), -E2BIG);
    model_scratch_destroy(sc);
    model_destroy(m);
}

/* An FM model of width K (k = K - 1) over the ids id_of(1..NKEYS). */
static model_t *make_fm(uint32_t K)
{
    store_options_t opt = {.value_floats = K, .shards = 4, .expected_keys = NKEYS + 1};
    store_t *s;
    assert_int_equal(store_create(&opt, &s), 0);
    float row[1 + MODEL_FM_MAX_K];
    for (uint32_t i = 0; i <= NKEYS; i++) {
        uint64_t id = i ? id_of(i) : MODEL_BIAS_ID;
        for (uint32_t f = 0; f < K; f++)
            row[f] = weight_of(id + f * 977) / 8.0f;
        assert_int_equal(store_upsert(s, id, row), 1);
    }
    store_meta_t meta = {.model_name = "fm", .model_kind = STORE_MODEL_FM, .version = 1};
    model_t *m;
    assert_int_equal(model_from_store(s, &meta, &m), 0);
    return m;
}

/* Scores SC_ITEMS items of SC_PER ids behind SC_SHARED shared ids with sc. */
enum {
    SC_ITEMS = 40,
    SC_SHARED = 25,
    SC_PER = 30
};
static void score_fixed(const model_t *m, model_scratch_t *sc, float *scores)
{
    uint64_t shared_ids[SC_SHARED], item_ids[SC_ITEMS][SC_PER];
    codec_block_t items[SC_ITEMS];
    for (uint32_t j = 0; j < SC_SHARED; j++)
        shared_ids[j] = id_of(1 + j * 11);
    for (uint32_t i = 0; i < SC_ITEMS; i++) {
        for (uint32_t j = 0; j < SC_PER; j++)
            item_ids[i][j] = id_of(1 + (i * 97 + j * 13) % (NKEYS + 300)); /* some unknown */
        items[i] = (codec_block_t){item_ids[i], NULL, SC_PER};
    }
    codec_block_t shared = {shared_ids, NULL, SC_SHARED};
    assert_int_equal(model_score(m, &shared, items, SC_ITEMS, scores, sc), 0);
}

/* A scratch follows its model both ways: fitted to a wide FM model it
 * grows, fitted to LR afterwards it gives the rows back (its size drops to
 * what LR needs), and it still scores as a fresh scratch does; fitting
 * again to the same model allocates nothing. */
static void test_scratch_fit_shrinks(void **state)
{
    (void)state;
    enum { MAXF = 100000 }; /* rows of the FM model: 26 MB, mapped buffers */
    const uint32_t K = 1 + MODEL_FM_MAX_K;
    model_t *fm = make_fm(K), *lr = make_model(0.75f);
    model_scratch_t *sc, *fresh;
    assert_int_equal(model_scratch_create(MAXF, &sc), 0);
    const size_t lr_bytes = model_scratch_bytes(sc);
    assert_int_equal(lr_bytes, (MAXF + 1) * (sizeof(uint64_t) + sizeof(float)));

    assert_int_equal(model_scratch_fit(sc, fm, MAXF), 1);
    const size_t fm_bytes = model_scratch_bytes(sc);
    assert_int_equal(fm_bytes, (MAXF + 1) * (sizeof(uint64_t) + K * sizeof(float)));
    assert_int_equal(model_scratch_fit(sc, fm, MAXF), 0);
    float got[SC_ITEMS], want[SC_ITEMS];
    score_fixed(fm, sc, got);
    assert_int_equal(model_scratch_create(MAXF, &fresh), 0);
    assert_int_equal(model_scratch_fit(fresh, fm, MAXF), 1);
    score_fixed(fm, fresh, want);
    assert_memory_equal(got, want, sizeof got);
    model_scratch_destroy(fresh);

    /* LR after FM: back to LR's size, same scores as a fresh LR scratch. */
    assert_int_equal(model_scratch_fit(sc, lr, MAXF), 1);
    assert_int_equal(model_scratch_bytes(sc), lr_bytes);
    assert_true(model_scratch_bytes(sc) < fm_bytes / 10);
    assert_int_equal(model_scratch_fit(sc, lr, MAXF), 0);
    score_fixed(lr, sc, got);
    assert_int_equal(model_scratch_create(MAXF, &fresh), 0);
    score_fixed(lr, fresh, want);
    assert_memory_equal(got, want, sizeof got);
    model_scratch_destroy(fresh);

    /* The narrow scratch refuses a request of the wide model's rows that
     * the LR rows cannot hold, until it is fitted again. */
    enum { WIDE = (MAXF + 1) / (1 + MODEL_FM_MAX_K) + 1 };
    static uint64_t ids[WIDE + 1];
    for (uint32_t j = 0; j <= WIDE; j++)
        ids[j] = id_of(1 + j % NKEYS);
    float one;
    codec_block_t shared = {ids, NULL, WIDE}, item = {ids + WIDE, NULL, 1};
    assert_int_equal(model_score(fm, &shared, &item, 1, &one, sc), -E2BIG);
    assert_int_equal(model_scratch_fit(sc, fm, MAXF), 1);
    assert_int_equal(model_scratch_bytes(sc), fm_bytes);
    assert_int_equal(model_score(fm, &shared, &item, 1, &one, sc), 0);
    score_fixed(fm, sc, got);
    assert_int_equal(model_scratch_create(MAXF, &fresh), 0);
    assert_int_equal(model_scratch_fit(fresh, fm, MAXF), 1);
    score_fixed(fm, fresh, want);
    assert_memory_equal(got, want, sizeof got);
    model_scratch_destroy(fresh);

    /* Within twice the need it is kept: an FM k = 32 model fits in the
     * k = 64 scratch (65 vs 33 floats a row, under twice) without a new
     * allocation. */
    model_t *fm33 = make_fm(33);
    assert_int_equal(model_scratch_fit(sc, fm33, MAXF), 0);
    assert_int_equal(model_scratch_bytes(sc), fm_bytes);
    score_fixed(fm33, sc, got);
    model_destroy(fm33);

    model_scratch_destroy(sc);
    model_destroy(fm);
    model_destroy(lr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lr_scores_exact),
        cmocka_unit_test(test_unknown_ids_and_extremes),
        cmocka_unit_test(test_kinds_accepted),
        cmocka_unit_test(test_scratch_reserve),
        cmocka_unit_test(test_scratch_fit_shrinks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
