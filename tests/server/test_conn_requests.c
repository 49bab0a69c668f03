/*
 * test_conn_requests.c — the connection state machine (server/conn.c) driven
 * directly (fixture and helpers: conn_testutil.h): every request type sent whole: PREDICT (scores equal
 * model_score's), PING, TRAIN and LOOKUP (UNKNOWN_TYPE: not served here), an
 * unknown type.
 *
 * THREAD SAFETY: single-threaded.
 */

#include "conn_testutil.h"

/* ---- whole frames ---------------------------------------------------------------- */

static void test_predict(void **state)
{
    (void)state;
    start(NULL);
    conn_t *c = open_conn();
    bytes_t b = {0};
    put_predict(&b, 11, MODEL_NAME, 0);
    put_predict(&b, 12, MODEL_NAME, MODEL_VERSION); /* pinned to the active version */
    assert_int_equal(feed(c, &b), 0);
    expect_scores(c, 11);
    expect_scores(c, 12);
    expect_nothing(c);
    assert_false(c->closing);
    assert_int_equal(c->in_len, 0);
    assert_int_equal(c->partial_since_ms, 0);
    assert_int_equal(atomic_load(&w.m->requests_total), 2);
    assert_int_equal(atomic_load(&w.m->predict_total), 2);
    assert_int_equal(atomic_load(&w.m->items_total), 6);
    assert_int_equal(atomic_load(&w.m->errors_total), 0);
    assert_int_equal(atomic_load(&w.m->bytes_in_total), b.len);
    uint64_t lat = 0;
    for (unsigned i = 0; i < SERVER_LAT_BUCKETS; i++)
        lat += atomic_load(&w.m->latency_bucket[i]);
    assert_int_equal(lat, 2);
    conn_free(&w, c);
    free(b.p);
    finish();
}

static void test_ping(void **state)
{
    (void)state;
    start(NULL);
    conn_t *c = open_conn();
    bytes_t b = {0};
    put_ping(&b, 1, "");
    put_ping(&b, UINT64_MAX, "0123456789012345678901234567890123456789012345678901234567890123");
    assert_int_equal(feed(c, &b), 0);
    expect_pong(c, 1, "");
    expect_pong(c, UINT64_MAX, "0123456789012345678901234567890123456789012345678901234567890123");
    expect_nothing(c);
    assert_int_equal(atomic_load(&w.m->bytes_out_total), 2 * CODEC_HEADER_SIZE + 64);
    conn_free(&w, c);
    free(b.p);
    finish();
}

/* TRAIN and LOOKUP are well-formed requests this server does not serve yet:
 * UNKNOWN_TYPE with their ids, and the connection goes on; so for a type
 * nobody defined, whose payload is skipped. */
static void test_train_lookup_unknown_type(void **state)
{
    (void)state;
    start(NULL);
    conn_t *c = open_conn();
    bytes_t b = {0}, junk = {0};
    put_train(&b, 21);
    put_lookup(&b, 22);
    for (int i = 0; i < 100; i++)
        put_u8(&junk, (uint8_t)i);
    put_frame(&b, 42, 0xffff, 23, &junk);            /* flags of an unknown type are not checked */
    put_frame(&b, CODEC_PONG, 0, 24, &(bytes_t){0}); /* a response type is not a request */
    assert_int_equal(feed(c, &b), 0);
    expect_error(c, 21, CODEC_E_UNKNOWN_TYPE);
    expect_error(c, 22, CODEC_E_UNKNOWN_TYPE);
    expect_error(c, 23, CODEC_E_UNKNOWN_TYPE);
    expect_error(c, 24, CODEC_E_UNKNOWN_TYPE);
    expect_nothing(c);
    assert_int_equal(errors_of(CODEC_E_UNKNOWN_TYPE), 4);
    assert_int_equal(atomic_load(&w.m->errors_total), 4);
    expect_usable(c);
    conn_free(&w, c);
    free(b.p);
    free(junk.p);
    finish();
}

/* ---- main ------------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_predict),
        cmocka_unit_test(test_ping),
        cmocka_unit_test(test_train_lookup_unknown_type),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
