/*
 * test_model.c — LR scoring through model.h against a direct computation:
 * sigmoid(bias + shared + item) in double, block by block, from the weights
 * the test itself put in the store.  Scores must be equal exactly (same
 * order of additions), unknown ids must count 0, and the guard rails
 * (-E2BIG, -ENOTSUP) must hold: which kinds and widths a model accepts, and
 * a scratch that must grow before it can score an FM model.
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lr_scores_exact),
        cmocka_unit_test(test_unknown_ids_and_extremes),
        cmocka_unit_test(test_kinds_accepted),
        cmocka_unit_test(test_scratch_reserve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
