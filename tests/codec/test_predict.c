/*
 * test_predict.c — codec/predict.c: PREDICT round trips (the standard
 * request first, whose frame size docs/wire.md quotes; odd shapes; extreme
 * ids), PREDICT_RESULT, hostile PREDICT heads (name, version, item count),
 * and the encoder's refusals.
 */
#include "codec_test_util.h"

static void test_standard_request(void **state)
{
    (void)state;
    codec_predict_t p = make_predict(200, 300, 200, false);
    uint32_t ids = p.shared.n;
    for (uint32_t i = 0; i < p.items; i++)
        ids += p.item[i].n;
    size_t len = predict_round_trip(&p);
    printf("standard request (200 items, 300 shared + 200/item, binary): %u ids, "
           "%zu bytes frame, %.2f bytes/id\n",
           ids, len, (double)(len - CODEC_HEADER_SIZE) / ids);
    free_predict(&p);

    p = make_predict(200, 300, 200, true);
    len = predict_round_trip(&p);
    printf("standard request with f32 values: %zu bytes frame\n", len);
    free_predict(&p);
}

static void test_predict_shapes(void **state)
{
    (void)state;
    /* one item, empty blocks, with and without values */
    codec_predict_t p = make_predict(1, 0, 0, false);
    predict_round_trip(&p);
    free_predict(&p);
    p = make_predict(3, 0, 5, true);
    predict_round_trip(&p);
    free_predict(&p);
    p = make_predict(CODEC_MAX_ITEMS, 1, 1, false);
    predict_round_trip(&p);
    free_predict(&p);

    /* extreme ids: 0 and UINT64_MAX in one block (a 10-byte delta) */
    uint64_t ids[] = {0, 1, UINT64_MAX};
    float vals[] = {-1e30f, 0.0f, 1e-30f};
    codec_block_t it = {.ids = ids, .values = vals, .n = 3};
    codec_predict_t q = {.name = "m", .version = UINT64_MAX, .items = 1, .item = &it};
    predict_round_trip(&q);
}

static void test_result_round_trip(void **state)
{
    (void)state;
    float scores[] = {0.0f, 1.0f, 0.5f, 1e-9f};
    codec_result_t r = {.version = 9, .items = 4, .scores = scores};
    uint8_t buf[128];
    size_t len;
    codec_error_t e;
    assert_int_equal(codec_encode_result(buf, sizeof buf, 11, &r, &len, &e), CODEC_OK);
    assert_int_equal(len, CODEC_HEADER_SIZE + 8 + 1 + 16);
    codec_arena_t a = arena_for(len);
    codec_msg_t m;
    assert_int_equal(codec_decode_frame(buf, len, &a, &m, &e), CODEC_OK);
    assert_int_equal(m.hdr.type, CODEC_PREDICT_RESULT);
    assert_true(m.u.result.version == 9);
    assert_int_equal(m.u.result.items, 4);
    assert_memory_equal(m.u.result.scores, scores, sizeof scores);

    /* scores outside [0, 1] or NaN: refused both ways */
    scores[2] = 1.5f;
    assert_int_equal(codec_encode_result(buf, sizeof buf, 11, &r, &len, &e), CODEC_E_BAD_VALUE);
    struct bld x = {0};
    u64le(&x, 1);
    vint(&x, 2);
    f32le(&x, 0.5f);
    f32le(&x, NAN);
    codec_arena_reset(&a);
    assert_int_equal(codec_decode_result(x.b, x.n, &a, &m.u.result, &e), CODEC_E_BAD_VALUE);
    assert_int_equal(e.offset, 13);
    x.n = 0;
    u64le(&x, 1);
    vint(&x, 0);
    assert_int_equal(codec_decode_result(x.b, x.n, &a, &m.u.result, &e), CODEC_E_NO_ITEMS);
    assert_int_equal(e.offset, 8);
    x.n = 0;
    u64le(&x, 1);
    vint(&x, 2);
    f32le(&x, 0.5f);
    assert_int_equal(codec_decode_result(x.b, x.n, &a, &m.u.result, &e), CODEC_E_TRUNCATED);
    f32le(&x, 0.5f);
    u8(&x, 0);
    assert_int_equal(codec_decode_result(x.b, x.n, &a, &m.u.result, &e), CODEC_E_TRAILING_BYTES);
    assert_int_equal(e.offset, 17);
    free(x.b);
    free(a.base);
}

static void test_predict_name_errors(void **state)
{
    (void)state;
    struct bld x = {0};
    predict_fails(&x, CODEC_E_TRUNCATED, 0); /* empty payload */
    u8(&x, 0);
    predict_fails(&x, CODEC_E_BAD_NAME, 0);
    x.n = 0;
    u8(&x, 65);
    for (int i = 0; i < 65; i++)
        u8(&x, 'a');
    predict_fails(&x, CODEC_E_BAD_NAME, 0);
    x.n = 0;
    name(&x, "ctr/v1");
    predict_fails(&x, CODEC_E_BAD_NAME, 4);
    x.n = 0;
    name(&x, "ctr v1");
    predict_fails(&x, CODEC_E_BAD_NAME, 4);
    x.n = 0;
    u8(&x, 3);
    put(&x, "c\0r", 3);
    predict_fails(&x, CODEC_E_BAD_NAME, 2);
    x.n = 0;
    u8(&x, 5);
    put(&x, "ctr", 3);
    predict_fails(&x, CODEC_E_TRUNCATED, 1); /* name runs past the payload */
    x.n = 0;
    name(&x, "ctr");
    u32le(&x, 0); /* half a version */
    predict_fails(&x, CODEC_E_TRUNCATED, 4);
    free(x.b);
}

static void test_predict_count_errors(void **state)
{
    (void)state;
    struct bld x = {0};
    const uint32_t items_at = 1 + 3 + 8;

    name(&x, "ctr");
    u64le(&x, 0);
    predict_fails(&x, CODEC_E_TRUNCATED, items_at); /* no items varint */
    u8(&x, 0x80);
    predict_fails(&x, CODEC_E_TRUNCATED, items_at); /* items varint cut */
    x.n = items_at;
    for (int i = 0; i < 10; i++)
        u8(&x, 0x80);
    u8(&x, 0x00);
    predict_fails(&x, CODEC_E_BAD_VARINT, items_at); /* 11-byte varint */

    x.n = 0;
    predict_head(&x, 0);
    block_seq(&x, 1);
    predict_fails(&x, CODEC_E_NO_ITEMS, items_at);
    x.n = 0;
    predict_head(&x, CODEC_MAX_ITEMS + 1);
    for (uint32_t i = 0; i < CODEC_MAX_ITEMS + 2; i++)
        block_seq(&x, 0);
    predict_fails(&x, CODEC_E_TOO_MANY_ITEMS, items_at);
    x.n = 0;
    predict_head(&x, UINT64_MAX);
    predict_fails(&x, CODEC_E_TOO_MANY_ITEMS, items_at);
    x.n = 0;
    predict_head(&x, 100); /* 100 items need >= 200 bytes */
    for (int i = 0; i < 50; i++)
        block_seq(&x, 0);
    predict_fails(&x, CODEC_E_TRUNCATED, items_at);

    /* the shared block is missing */
    x.n = 0;
    predict_head(&x, 1);
    u8(&x, 0);
    u8(&x, 0); /* 2 bytes: enough for the item count check, then shared = {0, 0} */
    predict_fails(&x, CODEC_E_TRUNCATED, items_at + 3);
    free(x.b);
}

static void test_encoder_refusals(void **state)
{
    (void)state;
    uint64_t ids[] = {1, 5, 3};
    float vals[] = {1, 1, 1};
    codec_block_t it = {.ids = ids, .n = 3};
    codec_predict_t p = {.name = "m", .items = 1, .item = &it};
    size_t len;
    codec_error_t e;
    uint8_t buf[256];

    assert_int_equal(codec_encode_predict(buf, sizeof buf, 0, &p, &len, &e),
                     CODEC_E_UNSORTED_FEATURES);
    assert_non_null(strstr(e.msg, "item[0]"));
    ids[2] = 5; /* duplicate */
    assert_int_equal(codec_encode_predict(buf, sizeof buf, 0, &p, &len, &e),
                     CODEC_E_UNSORTED_FEATURES);
    it.n = codec_sort_unique(ids, NULL, 3);
    assert_int_equal(it.n, 2);
    assert_int_equal(codec_encode_predict(buf, sizeof buf, 0, &p, &len, &e), CODEC_OK);

    it.values = vals;
    vals[1] = NAN;
    assert_int_equal(codec_encode_predict(buf, sizeof buf, 0, &p, &len, &e), CODEC_E_BAD_VALUE);
    vals[1] = 2;
    strcpy(p.name, "bad name");
    assert_int_equal(codec_encode_predict(buf, sizeof buf, 0, &p, &len, &e), CODEC_E_BAD_NAME);
    p.name[0] = '\0';
    assert_int_equal(codec_encode_predict(buf, sizeof buf, 0, &p, &len, &e), CODEC_E_BAD_NAME);
    memset(p.name, 'x', 64);
    p.name[64] = '\0';
    assert_int_equal(codec_encode_predict(buf, sizeof buf, 0, &p, &len, &e), CODEC_OK);
    p.items = 0;
    assert_int_equal(codec_encode_predict(buf, sizeof buf, 0, &p, &len, &e), CODEC_E_NO_ITEMS);
    p.items = CODEC_MAX_ITEMS + 1;
    assert_int_equal(codec_encode_predict(buf, sizeof buf, 0, &p, &len, &e),
                     CODEC_E_TOO_MANY_ITEMS);
    p.items = 1;
    it.n = CODEC_MAX_BLOCK_FEATURES + 1;
    assert_int_equal(codec_encode_predict(buf, sizeof buf, 0, &p, &len, &e),
                     CODEC_E_TOO_MANY_FEATURES);
    it.n = 2;
    assert_int_equal(codec_encode_predict(buf, 10, 0, &p, &len, &e), CODEC_NEED_MORE);
    assert_int_equal(len, CODEC_HEADER_SIZE + 1 + 64 + 8 + 1 + 2 + 2 + 2 + 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_standard_request),
        cmocka_unit_test(test_predict_shapes),
        cmocka_unit_test(test_result_round_trip),
        cmocka_unit_test(test_predict_name_errors),
        cmocka_unit_test(test_predict_count_errors),
        cmocka_unit_test(test_encoder_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
