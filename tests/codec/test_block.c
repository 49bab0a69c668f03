/*
 * test_block.c — codec/block.c, the feature-block coder, through PREDICT:
 * hostile blocks (each refusal checked for its exact wire code and payload
 * offset), the per-block and per-request feature limits, the arena running
 * out, deltas of every varint length on the fast and the byte-by-byte path,
 * and fixed-width ids.
 */
#include "codec_test_util.h"

static void test_block_limit_round_trip(void **state)
{
    (void)state;
    codec_predict_t p = make_predict(1, CODEC_MAX_BLOCK_FEATURES, 0, true);
    assert_int_equal(p.shared.n, CODEC_MAX_BLOCK_FEATURES); /* no hash collisions */
    predict_round_trip(&p);
    free_predict(&p);
}

static void test_predict_block_errors(void **state)
{
    (void)state;
    struct bld x = {0};
    const uint32_t shared_at = 1 + 3 + 8 + 1;

    /* block over MAX_BLOCK_FEATURES */
    predict_head(&x, 1);
    vint(&x, CODEC_MAX_BLOCK_FEATURES + 1);
    u8(&x, 0);
    predict_fails(&x, CODEC_E_TOO_MANY_FEATURES, shared_at);

    /* feature count: bad varint, truncated */
    x.n = 0;
    predict_head(&x, 1);
    for (int i = 0; i < 9; i++)
        u8(&x, 0xff);
    u8(&x, 0x02);
    block_seq(&x, 0);
    predict_fails(&x, CODEC_E_BAD_VARINT, shared_at);

    /* undefined block flag bit (bits 0 and 1 are defined) */
    x.n = 0;
    predict_head(&x, 1);
    block_seq(&x, 0);
    vint(&x, 1);
    u8(&x, 0x05);
    vint(&x, 5);
    f32le(&x, 1.0f);
    predict_fails(&x, CODEC_E_BAD_VALUE, shared_at + 3);

    /* n = 3 but only 2 bytes left */
    x.n = 0;
    predict_head(&x, 1);
    block_seq(&x, 0);
    vint(&x, 3);
    u8(&x, 0);
    vint(&x, 1);
    vint(&x, 1);
    predict_fails(&x, CODEC_E_TRUNCATED, shared_at + 4);

    /* duplicate id (delta 0 after the first); delta[0] = 0 is id 0 and fine */
    x.n = 0;
    predict_head(&x, 1);
    block_seq(&x, 0);
    vint(&x, 3);
    u8(&x, 0);
    vint(&x, 0);
    vint(&x, 7);
    vint(&x, 0);
    predict_fails(&x, CODEC_E_UNSORTED_FEATURES, shared_at + 6);

    /* ids overflowing 64 bits (i.e. not increasing) */
    x.n = 0;
    predict_head(&x, 1);
    block_seq(&x, 0);
    vint(&x, 2);
    u8(&x, 0);
    vint(&x, UINT64_MAX);
    vint(&x, 1);
    predict_fails(&x, CODEC_E_UNSORTED_FEATURES, shared_at + 2 + 2 + 10);

    /* a bad varint delta */
    x.n = 0;
    predict_head(&x, 1);
    block_seq(&x, 0);
    vint(&x, 1);
    u8(&x, 0);
    for (int i = 0; i < 11; i++)
        u8(&x, 0x80);
    u8(&x, 0);
    predict_fails(&x, CODEC_E_BAD_VARINT, shared_at + 4);

    /* deltas longer than 1 byte leave too little for the values */
    x.n = 0;
    predict_head(&x, 1);
    block_seq(&x, 0);
    vint(&x, 2);
    u8(&x, CODEC_BLOCK_VALUES);
    vint(&x, UINT64_C(1) << 60);
    vint(&x, UINT64_C(1) << 40);
    f32le(&x, 1.0f); /* 19 bytes >= 2 * 5, but the deltas took 9 + 6 */
    predict_fails(&x, CODEC_E_TRUNCATED, shared_at + 4 + 15);

    /* NaN and infinite values */
    float bad[] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        x.n = 0;
        predict_head(&x, 1);
        block_seq(&x, 0);
        vint(&x, 2);
        u8(&x, CODEC_BLOCK_VALUES);
        vint(&x, 3);
        vint(&x, 4);
        f32le(&x, 0.5f);
        f32le(&x, bad[k]);
        predict_fails(&x, CODEC_E_BAD_VALUE, shared_at + 4 + 2 + 4);
    }

    /* trailing bytes after the last block */
    x.n = 0;
    predict_head(&x, 2);
    block_seq(&x, 1);
    block_seq(&x, 2);
    block_seq(&x, 3);
    size_t end = x.n;
    u8(&x, 0);
    predict_fails(&x, CODEC_E_TRAILING_BYTES, (uint32_t)end);
    free(x.b);
}

static void test_predict_request_limit(void **state)
{
    (void)state;
    /* 16 full blocks reach 1,048,576; one more feature is one too many */
    struct bld x = {0};
    predict_head(&x, 16);
    block_seq(&x, CODEC_MAX_BLOCK_FEATURES);
    for (int i = 0; i < 15; i++)
        block_seq(&x, CODEC_MAX_BLOCK_FEATURES);
    size_t last = x.n;
    block_seq(&x, 1);
    predict_fails(&x, CODEC_E_TOO_MANY_FEATURES, (uint32_t)last);

    /* exactly at the limit decodes */
    x.n = last;
    block_seq(&x, 0);
    codec_arena_t a = arena_for(x.n);
    codec_predict_t p;
    codec_error_t e;
    assert_int_equal(codec_decode_predict(x.b, x.n, 0, &a, &p, &e), CODEC_OK);
    assert_int_equal(p.items, 16);
    assert_true(p.item[14].ids[CODEC_MAX_BLOCK_FEATURES - 1] == CODEC_MAX_BLOCK_FEATURES);
    assert_true(a.used <= codec_arena_bound(x.n));

    /* the same payload with too small an arena: INTERNAL, not a crash */
    codec_arena_t small = arena_new(4096);
    assert_int_equal(codec_decode_predict(x.b, x.n, 0, &small, &p, &e), CODEC_E_INTERNAL);
    assert_non_null(strstr(e.msg, "arena"));
    free(small.base);
    free(a.base);
    free(x.b);
}

/* Block deltas of every varint length (1..10 bytes), at every alignment, in
 * one request: the decoder's one-load fast path and its byte-by-byte path
 * must give the same ids (and the block must end where it should). */
static void test_block_varint_lengths(void **state)
{
    (void)state;
    enum { N = 4000 };
    static uint64_t ids[N];
    static uint8_t buf[N * 10 + 4096];
    static uint8_t arena_mem[N * 16 + 65536];
    uint64_t x = 0x12345678abcdefull, id = 0;
    for (uint32_t i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        unsigned bits = 1 + (unsigned)((x >> 33) % 49); /* 1..49 bits: 1..7 bytes */
        uint64_t d = ((x >> 7) | (1ull << 56)) >> (57 - bits);
        if (i % 40 == 39)
            d = (1ull << 56) + (x >> 20); /* 9 bytes; 100 of them fit in 2^63 */
        if (i == 1)
            d = (1ull << 63) + 4;         /* 10 bytes */
        id += d ? d : 1;
        ids[i] = id;
    }
    /* the shared block: one id, sent fixed-width (a lone varint would take 10 bytes) */
    uint64_t top[1] = {(1ull << 63) + 12345};
    codec_block_t item = {ids, NULL, N};
    codec_predict_t p = {.name = "m", .version = 0, .items = 1, .shared = {top, NULL, 1},
                         .item = &item};
    size_t len;
    codec_error_t e;
    assert_int_equal(codec_encode_predict(buf, sizeof buf, 1, &p, &len, &e), CODEC_OK);
    codec_arena_t a = {arena_mem, sizeof arena_mem, 0};
    codec_predict_t q;
    assert_int_equal(codec_decode_predict(buf + CODEC_HEADER_SIZE, len - CODEC_HEADER_SIZE, 0, &a,
                                          &q, &e), CODEC_OK);
    assert_int_equal(q.shared.n, 1);
    assert_true(q.shared.ids[0] == top[0]);
    assert_int_equal(q.item[0].n, N);
    for (uint32_t i = 0; i < N; i++)
        assert_true(q.item[0].ids[i] == ids[i]);
    /* a 10th byte over 1 is refused on the fast path too */
    static const uint8_t over[] = {0x01, 'm', 0, 0, 0, 0, 0, 0, 0, 0, /* name, version */
                                   0x01,                               /* items */
                                   0x00, 0x00,                         /* shared: empty */
                                   0x01, 0x00,                         /* item 0: 1 id */
                                   0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
                                   0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    codec_arena_reset(&a);
    assert_int_equal(codec_decode_predict(over, sizeof over, 0, &a, &q, &e), CODEC_E_BAD_VARINT);
}

/* Fixed-width ids (block flag bit 1): what the encoder picks for ids spread
 * over the 64-bit space, decoded with a copy and one order check; the
 * decoder refuses them out of order, duplicated or cut short. */
static void test_block_fixed_ids(void **state)
{
    (void)state;
    enum { N = 300 };
    static uint64_t ids[N];
    static uint8_t buf[N * 12 + 256], arena_mem[N * 16 + 65536];
    uint64_t x = 99;
    for (uint32_t i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = x;
    }
    codec_sort_unique(ids, NULL, N);
    codec_block_t item = {ids, NULL, N};
    codec_predict_t p = {.name = "m", .items = 1, .item = &item};
    size_t len;
    codec_error_t e;
    assert_int_equal(codec_encode_predict(buf, sizeof buf, 1, &p, &len, &e), CODEC_OK);
    const uint8_t *pl = buf + CODEC_HEADER_SIZE;
    size_t plen = len - CODEC_HEADER_SIZE;
    /* name (2) + version (8) + items (1) + empty shared block (2) + n (2) + flags */
    assert_int_equal(pl[15], CODEC_BLOCK_FIXED);
    assert_int_equal(plen, 16 + (size_t)N * 8);
    codec_arena_t a = {arena_mem, sizeof arena_mem, 0};
    codec_predict_t q;
    assert_int_equal(codec_decode_predict(pl, plen, 0, &a, &q, &e), CODEC_OK);
    for (uint32_t i = 0; i < N; i++)
        assert_true(q.item[0].ids[i] == ids[i]);
    /* a duplicate id at index 7: UNSORTED at its offset */
    static uint8_t bad[N * 12 + 256];
    memcpy(bad, pl, plen);
    memcpy(bad + 16 + 7 * 8, bad + 16 + 6 * 8, 8);
    codec_arena_reset(&a);
    assert_int_equal(codec_decode_predict(bad, plen, 0, &a, &q, &e), CODEC_E_UNSORTED_FEATURES);
    assert_int_equal(e.offset, 16 + 7 * 8);
    /* cut short: TRUNCATED before any id is read */
    codec_arena_reset(&a);
    assert_int_equal(codec_decode_predict(pl, plen - 1, 0, &a, &q, &e), CODEC_E_TRUNCATED);
    /* ids of a few bits each stay delta varints */
    for (uint32_t i = 0; i < N; i++)
        ids[i] = 1000 + 3 * i;
    assert_int_equal(codec_encode_predict(buf, sizeof buf, 1, &p, &len, &e), CODEC_OK);
    assert_int_equal(buf[CODEC_HEADER_SIZE + 15], 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_limit_round_trip),
        cmocka_unit_test(test_predict_block_errors),
        cmocka_unit_test(test_predict_request_limit),
        cmocka_unit_test(test_block_varint_lengths),
        cmocka_unit_test(test_block_fixed_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
