/*
 * test_conn_payload.c — the connection state machine (server/conn.c) driven
 * directly (fixture and helpers: conn_testutil.h): payload errors (truncated, trailing bytes, bad varint,
 * name, items, order, values; unknown model or version, decided after the
 * payload decodes): ERROR with the request's id, the connection stays usable;
 * the scratch sized once per version a worker pins (server_model_t.gen).
 *
 * THREAD SAFETY: single-threaded.
 */

#include "conn_testutil.h"

/* ---- payload errors: ERROR with the request's id, the connection goes on ------------- */

typedef struct bad_payload {
    const char *what;
    int code;
    void (*build)(bytes_t *p);
} bad_payload_t;

static void bp_truncated(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, 2);
    put_block(p, sh_ids, NULL, 3);
    put_block(p, it0_ids, NULL, 3);
    put_varint(p, 2); /* the second item's block ends after its count */
}
static void bp_truncated_values(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, 1);
    put_block(p, NULL, NULL, 0);
    put_block(p, it1_ids, it1_vals, 2);
    p->len -= 1; /* the last value is cut */
}
static void bp_truncated_version(bytes_t *p)
{
    put_u8(p, 3);
    put(p, MODEL_NAME, 3);
    put_u8(p, 0); /* 1 of the version's 8 bytes */
}
static void bp_empty(bytes_t *p)
{
    (void)p;
}
static void bp_trailing(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, 1);
    put_block(p, NULL, NULL, 0);
    put_block(p, sh_ids, NULL, 3);
    put_u8(p, 0);
}
static void bp_bad_varint(bytes_t *p)
{
    put_u8(p, 3);
    put(p, MODEL_NAME, 3);
    put_u64(p, 0);
    for (int i = 0; i < 11; i++)
        put_u8(p, 0xff); /* items: a varint over 10 bytes */
    put_u8(p, 0);
}
static void bp_bad_name(bytes_t *p)
{
    put_predict_head(p, "a b!", 0, 1);
    put_block(p, NULL, NULL, 0);
    put_block(p, NULL, NULL, 0);
}
static void bp_empty_name(bytes_t *p)
{
    put_predict_head(p, "", 0, 1);
    put_block(p, NULL, NULL, 0);
    put_block(p, NULL, NULL, 0);
}
static void bp_no_items(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, 0);
    put_block(p, NULL, NULL, 0);
}
static void bp_too_many_items(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, CODEC_MAX_ITEMS + 1);
    put_block(p, NULL, NULL, 0);
}
static void bp_too_many_features(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, 1);
    put_varint(p, CODEC_MAX_BLOCK_FEATURES + 1);
    put_u8(p, CODEC_BLOCK_FIXED);
}
static void bp_unsorted(bytes_t *p)
{
    static const uint64_t ids[] = {5, 5};
    put_predict_head(p, MODEL_NAME, 0, 1);
    put_block(p, NULL, NULL, 0);
    put_block(p, ids, NULL, 2);
}
static void bp_nan(bytes_t *p)
{
    static const float vals[] = {1.0f, NAN};
    put_predict_head(p, MODEL_NAME, 0, 1);
    put_block(p, it1_ids, vals, 2);
    put_block(p, NULL, NULL, 0);
}
static void bp_block_flags(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, 1);
    put_varint(p, 0);
    put_u8(p, 0x04);
    put_block(p, NULL, NULL, 0);
}
/* unknown model and version are decided after the payload decodes */
static void bp_unknown_model_truncated(bytes_t *p)
{
    put_predict_head(p, "other", 0, 1);
    put_block(p, NULL, NULL, 0);
}
static void bp_unknown_version_unsorted(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 99, 1);
    static const uint64_t ids[] = {9, 3};
    put_block(p, NULL, NULL, 0);
    put_block(p, ids, NULL, 2);
}
static void bp_unknown_model(bytes_t *p)
{
    put_predict_head(p, "other", 0, 1);
    put_block(p, NULL, NULL, 0);
    put_block(p, NULL, NULL, 0);
}
static void bp_unknown_version(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, MODEL_VERSION + 1, 1);
    put_block(p, NULL, NULL, 0);
    put_block(p, NULL, NULL, 0);
}

static const bad_payload_t bad_payloads[] = {
    {"truncated block", CODEC_E_TRUNCATED, bp_truncated},
    {"truncated values", CODEC_E_TRUNCATED, bp_truncated_values},
    {"truncated version", CODEC_E_TRUNCATED, bp_truncated_version},
    {"empty payload", CODEC_E_TRUNCATED, bp_empty},
    {"trailing byte", CODEC_E_TRAILING_BYTES, bp_trailing},
    {"11-byte varint", CODEC_E_BAD_VARINT, bp_bad_varint},
    {"bad name", CODEC_E_BAD_NAME, bp_bad_name},
    {"empty name", CODEC_E_BAD_NAME, bp_empty_name},
    {"0 items", CODEC_E_NO_ITEMS, bp_no_items},
    {"4097 items", CODEC_E_TOO_MANY_ITEMS, bp_too_many_items},
    {"65537 features", CODEC_E_TOO_MANY_FEATURES, bp_too_many_features},
    {"repeated id", CODEC_E_UNSORTED_FEATURES, bp_unsorted},
    {"NaN value", CODEC_E_BAD_VALUE, bp_nan},
    {"block flag bit 2", CODEC_E_BAD_VALUE, bp_block_flags},
    {"unknown model, truncated", CODEC_E_TRUNCATED, bp_unknown_model_truncated},
    {"unknown version, unsorted", CODEC_E_UNSORTED_FEATURES, bp_unknown_version_unsorted},
    {"unknown model", CODEC_E_UNKNOWN_MODEL, bp_unknown_model},
    {"unknown version", CODEC_E_UNKNOWN_VERSION, bp_unknown_version},
};

static void test_bad_payloads(void **state)
{
    (void)state;
    start(NULL);
    conn_t *c = open_conn();
    bytes_t p = {0}, f = {0};
    size_t n = sizeof bad_payloads / sizeof bad_payloads[0];
    for (size_t i = 0; i < n; i++) {
        const bad_payload_t *bp = &bad_payloads[i];
        p.len = f.len = 0;
        bp->build(&p);
        put_frame(&f, CODEC_PREDICT, 0, 500 + i, &p);
        int rc = feed(c, &f);
        if (rc != 0)
            fail_msg("%s: conn_feed returned %d", bp->what, rc);
        codec_msg_t m;
        next_frame(c, &m);
        if (m.hdr.type != CODEC_ERROR || m.u.error.code != bp->code)
            fail_msg("%s: got type %u code %s, expected ERROR %s", bp->what, m.hdr.type,
                     m.hdr.type == CODEC_ERROR ? codec_errc_name(m.u.error.code) : "-",
                     codec_errc_name(bp->code));
        assert_int_equal(m.hdr.request_id, 500 + i);
        expect_nothing(c);
        assert_false(c->closing);
        assert_int_equal(c->in_len, 0);
    }
    /* PING's own payload errors the same way */
    p.len = f.len = 0;
    grow(&p, CODEC_MAX_PING + 1);
    memset(p.p, 'x', p.len);
    put_frame(&f, CODEC_PING, 0, 600, &p);
    assert_int_equal(feed(c, &f), 0);
    expect_error(c, 600, CODEC_E_BAD_VALUE);
    expect_usable(c);
    assert_int_equal(atomic_load(&w.m->errors_total), n + 1);
    assert_int_equal(atomic_load(&w.m->predict_total), 0);
    conn_free(&w, c);
    free(p.p);
    free(f.p);
    finish();
}

/* No model loaded at all: UNKNOWN_MODEL that says so; PING still works. */
static void test_no_model(void **state)
{
    (void)state;
    start(NULL);
    server_model_t *sm = atomic_exchange(&srv.models[0].active, NULL);
    conn_t *c = open_conn();
    bytes_t b = {0};
    put_predict(&b, 70, MODEL_NAME, 0);
    assert_int_equal(feed(c, &b), 0);
    expect_error_naming(c, 70, CODEC_E_UNKNOWN_MODEL, "no model");
    expect_usable(c);
    atomic_store(&srv.models[0].active, sm);
    b.len = 0;
    put_predict(&b, 71, MODEL_NAME, 0);
    assert_int_equal(feed(c, &b), 0);
    expect_scores(c, 71);
    conn_free(&w, c);
    free(b.p);
    finish();
}

/* The scratch follows the version: a worker sizes it for each version it
 * pins for the first time (server_model_t.gen), before scoring with it, and
 * not again for the requests after. */
static void test_scratch_follows_version(void **state)
{
    (void)state;
    start(NULL);
    conn_t *c = open_conn();
    bytes_t b = {0};
    put_predict(&b, 1, MODEL_NAME, 0);
    server_model_t *first = server_model_acquire(&srv);
    assert_non_null(first);
    uint64_t gen1 = first->gen;
    server_model_release(first);
    assert_true(gen1 > 0);
    assert_int_equal(w.scratch_gen, 0);
    assert_int_equal(feed(c, &b), 0);
    expect_scores(c, 1);
    assert_int_equal(w.scratch_gen, gen1);

    /* the same snapshot opened again is another version handle */
    server_model_t *sm;
    store_error_t err;
    assert_int_equal(server_model_open(&srv, model_dir, &sm, &err), 0);
    assert_true(sm->gen > gen1);
    server_model_retire(server_model_swap(&srv, sm));
    assert_int_equal(feed(c, &b), 0);
    expect_scores(c, 1);
    assert_int_equal(w.scratch_gen, sm->gen);
    assert_int_equal(feed(c, &b), 0);
    expect_scores(c, 1);
    assert_int_equal(w.scratch_gen, sm->gen);
    conn_free(&w, c);
    free(b.p);
    finish();
}

/* ---- main ------------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_payloads),
        cmocka_unit_test(test_no_model),
        cmocka_unit_test(test_scratch_follows_version),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
