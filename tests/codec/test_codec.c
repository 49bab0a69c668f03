/*
 * test_codec.c — libtlcodec: varints, feature ids, round trips of every
 * message, and hostile payloads.
 *
 * Every refusal is checked for its exact wire code and payload offset.  The
 * hostile payloads are built byte by byte here from docs/wire.md (struct
 * bld), not with the encoder, so that the decoder is tested against the spec
 * rather than against itself.  The feature-id vectors come from
 * codec/test_vectors.txt (TL_CODEC_VECTORS), which the Python implementation
 * checks too.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec/codec.h"

/* ---- helpers --------------------------------------------------------------------- */

/* A growable byte string for crafting payloads. */
struct bld {
    uint8_t *b;
    size_t n, cap;
};

static void put(struct bld *x, const void *p, size_t n)
{
    if (x->n + n > x->cap) {
        x->cap = (x->n + n) * 2 + 64;
        x->b = realloc(x->b, x->cap);
        assert_non_null(x->b);
    }
    memcpy(x->b + x->n, p, n);
    x->n += n;
}

static void u8(struct bld *x, uint8_t v)
{
    put(x, &v, 1);
}

static void u16le(struct bld *x, uint16_t v)
{
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    put(x, b, 2);
}

static void u32le(struct bld *x, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(x, b, 4);
}

static void u64le(struct bld *x, uint64_t v)
{
    u32le(x, (uint32_t)v);
    u32le(x, (uint32_t)(v >> 32));
}

static void f32le(struct bld *x, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u32le(x, u);
}

static void vint(struct bld *x, uint64_t v)
{
    uint8_t b[10];
    put(x, b, codec_varint_encode(b, v));
}

static void name(struct bld *x, const char *s)
{
    u8(x, (uint8_t)strlen(s));
    put(x, s, strlen(s));
}

/* PREDICT prefix: name "ctr", version 0, items. */
static void predict_head(struct bld *x, uint64_t items)
{
    name(x, "ctr");
    u64le(x, 0);
    vint(x, items);
}

/* A binary block of ids 1..n. */
static void block_seq(struct bld *x, uint32_t n)
{
    vint(x, n);
    u8(x, 0);
    for (uint32_t i = 0; i < n; i++)
        vint(x, 1);
}

static codec_arena_t arena_new(size_t cap)
{
    codec_arena_t a = {.base = aligned_alloc(8, (cap + 7) & ~(size_t)7), .cap = cap};
    assert_non_null(a.base);
    return a;
}

static codec_arena_t arena_for(size_t payload_len)
{
    return arena_new(codec_arena_bound(payload_len));
}

/* Decodes x as a PREDICT and checks the refusal's code and offset. */
static void predict_fails(const struct bld *x, int code, uint32_t offset)
{
    codec_arena_t a = arena_for(x->n);
    codec_predict_t p;
    codec_error_t e = {0};
    int rc = codec_decode_predict(x->b, x->n, &a, &p, &e);
    if (rc != code || e.offset != offset)
        fail_msg("want %s at %u, got %s at %u: %s", codec_errc_name(code), offset,
                 codec_errc_name(rc), e.offset, e.msg);
    assert_int_equal(e.code, code);
    assert_true(strlen(e.msg) > 10);
    assert_non_null(strstr(e.msg, "PREDICT"));
    free(a.base);
}

static bool block_eq(const codec_block_t *a, const codec_block_t *b)
{
    if (a->n != b->n || (a->values == NULL) != (b->values == NULL))
        return false;
    if (a->n && memcmp(a->ids, b->ids, a->n * sizeof *a->ids) != 0)
        return false;
    return !a->values || !a->n || memcmp(a->values, b->values, a->n * sizeof(float)) == 0;
}

/* ---- varints ------------------------------------------------------------------------ */

static void varint_one(uint64_t v, unsigned len)
{
    uint8_t b[10];
    uint64_t got = 0;
    assert_int_equal(codec_varint_encode(b, v), len);
    assert_int_equal(codec_varint_size(v), len);
    assert_int_equal(codec_varint_decode(b, len, &got), (int)len);
    assert_true(got == v);
    /* every strict prefix is truncated */
    for (unsigned k = 0; k < len; k++)
        assert_int_equal(codec_varint_decode(b, k, &got), 0);
}

static void test_varint_values(void **state)
{
    (void)state;
    varint_one(0, 1);
    varint_one(1, 1);
    varint_one(127, 1);
    varint_one(128, 2);
    varint_one(16383, 2);
    varint_one(16384, 3);
    varint_one((UINT64_C(1) << 56) - 1, 8);
    varint_one(UINT64_C(1) << 56, 9);
    varint_one((UINT64_C(1) << 63) - 1, 9);
    varint_one(UINT64_C(1) << 63, 10);
    varint_one(UINT64_MAX, 10);

    uint8_t b[12];
    codec_varint_encode(b, 128);
    assert_int_equal(b[0], 0x80);
    assert_int_equal(b[1], 0x01);
    codec_varint_encode(b, UINT64_C(1) << 63);
    for (int i = 0; i < 9; i++)
        assert_int_equal(b[i], 0x80);
    assert_int_equal(b[9], 0x01);
}

static void test_varint_forms(void **state)
{
    (void)state;
    uint8_t b[12];
    uint64_t v = 99;

    /* non-minimal forms are accepted */
    uint8_t nm[] = {0x80, 0x00};
    assert_int_equal(codec_varint_decode(nm, 2, &v), 2);
    assert_true(v == 0);
    memset(b, 0x80, 9);
    b[9] = 0x00; /* 10-byte zero */
    assert_int_equal(codec_varint_decode(b, 10, &v), 10);
    assert_true(v == 0);
    memset(b, 0xff, 9);
    b[9] = 0x01; /* 10-byte UINT64_MAX, the longest legal form */
    assert_int_equal(codec_varint_decode(b, 12, &v), 10);
    assert_true(v == UINT64_MAX);

    /* 10th byte over 1: overflows 64 bits */
    b[9] = 0x02;
    assert_int_equal(codec_varint_decode(b, 10, &v), -1);
    b[9] = 0x7f;
    assert_int_equal(codec_varint_decode(b, 10, &v), -1);
    /* 11-byte forms: the 10th byte has the continuation bit */
    memset(b, 0x80, 10);
    b[10] = 0x00;
    assert_int_equal(codec_varint_decode(b, 11, &v), -1);
    b[9] = 0x81;
    assert_int_equal(codec_varint_decode(b, 11, &v), -1);
    /* ...also when the buffer ends right after the 10th byte */
    assert_int_equal(codec_varint_decode(b, 10, &v), -1);

    /* truncated */
    assert_int_equal(codec_varint_decode(b, 0, &v), 0);
    assert_int_equal(codec_varint_decode(b, 9, &v), 0);
    uint8_t t[] = {0xff};
    assert_int_equal(codec_varint_decode(t, 1, &v), 0);
}

/* ---- feature ids ------------------------------------------------------------------------ */

static int unhex(const char *s, uint8_t *out, size_t cap)
{
    if (strcmp(s, "-") == 0)
        return 0;
    size_t n = strlen(s);
    if (n % 2 || n / 2 > cap)
        return -1;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return (int)(n / 2);
}

static void test_feature_vectors(void **state)
{
    (void)state;
    FILE *f = fopen(TL_CODEC_VECTORS, "r");
    assert_non_null(f);
    char line[512];
    int vectors = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        unsigned field;
        char raw_hex[256];
        unsigned long long want;
        assert_int_equal(sscanf(line, "%u %255s %llx", &field, raw_hex, &want), 3);
        assert_true(field <= 255);
        uint8_t raw[128];
        int n = unhex(raw_hex, raw, sizeof raw);
        assert_true(n >= 0);
        uint64_t id = codec_feature_id((uint8_t)field, raw, (size_t)n);
        if (id != want)
            fail_msg("vector %d: field %u raw %s: want %016llx got %016llx", vectors, field,
                     raw_hex, want, (unsigned long long)id);
        assert_true(id >> 56 == field);
        vectors++;
    }
    fclose(f);
    assert_true(vectors >= 10);
    /* XXH3_64bits("") = 0x2d06800538d394c2 is xxHash's own published value */
    assert_true(codec_feature_id(0, "", 0) == UINT64_C(0x0006800538d394c2));
}

static void test_sort_unique(void **state)
{
    (void)state;
    uint64_t ids[] = {9, 3, 7, 3, 1, 9, 9, 0};
    float vals[] = {0.5f, 2.0f, 1.0f, -1.0f, 4.0f, 0.25f, 3.0f, -0.0f};
    uint32_t n = codec_sort_unique(ids, vals, 8);
    assert_int_equal(n, 5);
    uint64_t want_ids[] = {0, 1, 3, 7, 9};
    float want_vals[] = {-0.0f, 4.0f, 2.0f, 1.0f, 3.0f};
    for (uint32_t i = 0; i < n; i++) {
        assert_true(ids[i] == want_ids[i]);
        assert_true(vals[i] == want_vals[i]);
    }
    /* +0.0 beats -0.0 whatever the order */
    uint64_t z[] = {5, 5};
    float zv[] = {-0.0f, 0.0f};
    assert_int_equal(codec_sort_unique(z, zv, 2), 1);
    assert_false(signbit(zv[0]));

    /* binary, larger, reverse order with repeats */
    enum {
        N = 5000
    };
    uint64_t *big = malloc(N * sizeof *big);
    for (uint32_t i = 0; i < N; i++)
        big[i] = (uint64_t)(N - i) / 2 * UINT64_C(0x9e3779b97f4a7c15);
    n = codec_sort_unique(big, NULL, N);
    assert_int_equal(n, N / 2 + 1);
    for (uint32_t i = 1; i < n; i++)
        assert_true(big[i] > big[i - 1]);
    free(big);
    assert_int_equal(codec_sort_unique(NULL, NULL, 0), 0);
}

/* ---- round trips ---------------------------------------------------------------------------- */

static uint64_t rng = 0x243f6a8885a308d3u;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A block of n features hashed from random raw values over the 39 Criteo
 * fields; values when with_values. */
static codec_block_t make_block(uint32_t n, bool with_values)
{
    uint64_t *ids = malloc((n ? n : 1) * sizeof *ids);
    float *values = with_values ? malloc((n ? n : 1) * sizeof *values) : NULL;
    for (uint32_t i = 0; i < n; i++) {
        char raw[24];
        int len = snprintf(raw, sizeof raw, "%llx", (unsigned long long)next());
        ids[i] = codec_feature_id((uint8_t)(i % 39), raw, (size_t)len);
        if (with_values)
            values[i] = (float)(next() % 1000) / 100.0f - 5.0f;
    }
    return (codec_block_t){.ids = ids, .values = values, .n = codec_sort_unique(ids, values, n)};
}

static void free_predict(codec_predict_t *p)
{
    free((void *)p->shared.ids); /* make_block's, cast back from the block's const view */
    free((void *)p->shared.values);
    for (uint32_t i = 0; i < p->items; i++) {
        free((void *)p->item[i].ids);
        free((void *)p->item[i].values);
    }
    free(p->item);
}

static codec_predict_t make_predict(uint32_t items, uint32_t shared, uint32_t per_item,
                                    bool with_values)
{
    codec_predict_t p = {.version = 42, .items = items};
    strcpy(p.name, "criteo-lr_v2.1");
    p.shared = make_block(shared, with_values);
    p.item = calloc(items, sizeof *p.item);
    for (uint32_t i = 0; i < items; i++)
        p.item[i] = make_block(per_item, with_values);
    return p;
}

static size_t predict_round_trip(const codec_predict_t *p)
{
    size_t len = 0;
    codec_error_t e;
    assert_int_equal(codec_encode_predict(NULL, 0, 7, p, &len, &e), CODEC_NEED_MORE);
    uint8_t *buf = malloc(len);
    size_t len2 = 0;
    assert_int_equal(codec_encode_predict(buf, len - 1, 7, p, &len2, &e), CODEC_NEED_MORE);
    assert_int_equal(len2, len);
    int rc = codec_encode_predict(buf, len, 7, p, &len2, &e);
    if (rc)
        fail_msg("encode: %s", e.msg);
    assert_int_equal(len2, len);

    codec_arena_t a = arena_for(len);
    codec_msg_t m;
    rc = codec_decode_frame(buf, len, &a, &m, &e);
    if (rc)
        fail_msg("decode: %s: %s", codec_errc_name(rc), e.msg);
    assert_int_equal(m.hdr.type, CODEC_PREDICT);
    assert_true(m.hdr.request_id == 7);
    assert_int_equal(m.hdr.payload_len, len - CODEC_HEADER_SIZE);
    const codec_predict_t *q = &m.u.predict;
    assert_string_equal(q->name, p->name);
    assert_true(q->version == p->version);
    assert_int_equal(q->items, p->items);
    assert_true(block_eq(&q->shared, &p->shared));
    for (uint32_t i = 0; i < p->items; i++)
        assert_true(block_eq(&q->item[i], &p->item[i]));
    assert_true(a.used <= a.cap);

    /* every shorter prefix of the frame is NEED_MORE, never an error */
    for (size_t k = 0; k < len; k += 1 + k / 3) {
        codec_arena_reset(&a);
        assert_int_equal(codec_decode_frame(buf, k, &a, &m, &e), CODEC_NEED_MORE);
    }
    free(a.base);
    free(buf);
    return len;
}

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

static void test_block_limit_round_trip(void **state)
{
    (void)state;
    codec_predict_t p = make_predict(1, CODEC_MAX_BLOCK_FEATURES, 0, true);
    assert_int_equal(p.shared.n, CODEC_MAX_BLOCK_FEATURES); /* no hash collisions */
    predict_round_trip(&p);
    free_predict(&p);
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

static void test_train_round_trip(void **state)
{
    (void)state;
    codec_predict_t p = make_predict(5, 10, 7, true);
    float labels[5] = {1.0f, 0.0f, 0.0f, 1.0f, -0.0f};
    codec_train_t t = {.samples = 5, .shared = p.shared, .labels = labels, .sample = p.item};
    strcpy(t.name, "ctr");
    size_t len;
    codec_error_t e;
    assert_int_equal(codec_encode_train(NULL, 0, 1, &t, &len, &e), CODEC_NEED_MORE);
    uint8_t *buf = malloc(len);
    assert_int_equal(codec_encode_train(buf, len, 1, &t, &len, &e), CODEC_OK);
    codec_arena_t a = arena_for(len);
    codec_msg_t m;
    assert_int_equal(codec_decode_frame(buf, len, &a, &m, &e), CODEC_OK);
    assert_int_equal(m.hdr.type, CODEC_TRAIN);
    assert_string_equal(m.u.train.name, "ctr");
    assert_int_equal(m.u.train.samples, 5);
    assert_memory_equal(m.u.train.labels, labels, sizeof labels);
    assert_true(block_eq(&m.u.train.shared, &t.shared));
    for (int i = 0; i < 5; i++)
        assert_true(block_eq(&m.u.train.sample[i], &t.sample[i]));

    /* a label of 0.5, on the wire and in the encoder */
    size_t label0 = 1 + 3 + 1; /* name_len, "ctr", samples */
    {
        codec_arena_t a2 = arena_for(len);
        codec_train_t tmp;
        struct bld x = {0};
        name(&x, "ctr");
        vint(&x, 1);
        block_seq(&x, 0);
        f32le(&x, 0.5f);
        block_seq(&x, 1);
        assert_int_equal(codec_decode_train(x.b, x.n, &a2, &tmp, &e), CODEC_E_BAD_VALUE);
        assert_int_equal(e.offset, label0 + 2);
        x.n = 0;
        name(&x, "ctr");
        vint(&x, 2); /* 2 samples need >= 12 bytes */
        block_seq(&x, 0);
        f32le(&x, 1.0f);
        block_seq(&x, 1);
        assert_int_equal(codec_decode_train(x.b, x.n, &a2, &tmp, &e), CODEC_E_TRUNCATED);
        assert_int_equal(e.offset, 4);
        free(x.b);
        free(a2.base);
    }
    labels[2] = 0.5f;
    assert_int_equal(codec_encode_train(buf, len, 1, &t, &len, &e), CODEC_E_BAD_VALUE);
    t.samples = 0;
    assert_int_equal(codec_encode_train(buf, len, 1, &t, &len, &e), CODEC_E_NO_ITEMS);
    free(buf);
    free(a.base);
    free_predict(&p);
}

static void test_control_round_trips(void **state)
{
    (void)state;
    uint8_t buf[2048];
    size_t len;
    codec_error_t e;
    codec_msg_t m;
    codec_arena_t a = arena_for(0);

    codec_train_ack_t ack = {.accepted = 300};
    assert_int_equal(codec_encode_train_ack(buf, sizeof buf, 5, &ack, &len, &e), CODEC_OK);
    assert_int_equal(len, CODEC_HEADER_SIZE + 2);
    assert_int_equal(codec_decode_frame(buf, len, &a, &m, &e), CODEC_OK);
    assert_int_equal(m.u.ack.accepted, 300);

    const char *msg = "PREDICT item[3] block: delta[1] at offset 17 is 0 (duplicate id)";
    codec_errmsg_t em = {
        .code = CODEC_E_UNSORTED_FEATURES, .msg = msg, .msg_len = (uint16_t)strlen(msg)};
    assert_int_equal(codec_encode_errmsg(buf, sizeof buf, 5, &em, &len, &e), CODEC_OK);
    assert_int_equal(codec_decode_frame(buf, len, &a, &m, &e), CODEC_OK);
    assert_int_equal(m.hdr.type, CODEC_ERROR);
    assert_int_equal(m.u.error.code, CODEC_E_UNSORTED_FEATURES);
    assert_int_equal(m.u.error.msg_len, strlen(msg));
    assert_memory_equal(m.u.error.msg, msg, strlen(msg));
    assert_ptr_equal(m.u.error.msg, (const char *)buf + CODEC_HEADER_SIZE + 4); /* in place */

    uint8_t data[64];
    for (int i = 0; i < 64; i++)
        data[i] = (uint8_t)i;
    codec_ping_t pg = {.data = data, .len = 64};
    assert_int_equal(codec_encode_ping(buf, sizeof buf, CODEC_PONG, 99, &pg, &len, &e), CODEC_OK);
    assert_int_equal(codec_decode_frame(buf, len, &a, &m, &e), CODEC_OK);
    assert_int_equal(m.hdr.type, CODEC_PONG);
    assert_int_equal(m.u.ping.len, 64);
    assert_memory_equal(m.u.ping.data, data, 64);
    pg.len = 0;
    assert_int_equal(codec_encode_ping(buf, sizeof buf, CODEC_PING, 99, &pg, &len, &e), CODEC_OK);
    assert_int_equal(len, CODEC_HEADER_SIZE);
    assert_int_equal(codec_decode_frame(buf, len, &a, &m, &e), CODEC_OK);
    assert_int_equal(m.u.ping.len, 0);

    /* refusals */
    pg.len = 65;
    assert_int_equal(codec_encode_ping(buf, sizeof buf, CODEC_PING, 1, &pg, &len, &e),
                     CODEC_E_BAD_VALUE);
    assert_int_equal(codec_decode_ping(buf, 65, &m.u.ping, &e), CODEC_E_BAD_VALUE);
    assert_int_equal(e.offset, 64);
    ack.accepted = CODEC_MAX_ITEMS + 1;
    assert_int_equal(codec_encode_train_ack(buf, sizeof buf, 5, &ack, &len, &e),
                     CODEC_E_TOO_MANY_ITEMS);
    struct bld x = {0};
    vint(&x, CODEC_MAX_ITEMS + 1);
    assert_int_equal(codec_decode_train_ack(x.b, x.n, &m.u.ack, &e), CODEC_E_TOO_MANY_ITEMS);
    x.n = 0;
    vint(&x, 1);
    u8(&x, 0);
    assert_int_equal(codec_decode_train_ack(x.b, x.n, &m.u.ack, &e), CODEC_E_TRAILING_BYTES);
    assert_int_equal(e.offset, 1);
    x.n = 0;
    assert_int_equal(codec_decode_train_ack(x.b, x.n, &m.u.ack, &e), CODEC_E_TRUNCATED);

    x.n = 0;
    u16le(&x, 0);
    u16le(&x, 0);
    assert_int_equal(codec_decode_errmsg(x.b, x.n, &m.u.error, &e), CODEC_E_BAD_VALUE);
    assert_int_equal(e.offset, 0);
    x.n = 0;
    u16le(&x, 6);
    u16le(&x, CODEC_MAX_ERROR_MSG + 1);
    assert_int_equal(codec_decode_errmsg(x.b, x.n, &m.u.error, &e), CODEC_E_BAD_VALUE);
    assert_int_equal(e.offset, 2);
    x.n = 0;
    u16le(&x, 6);
    u16le(&x, 5);
    put(&x, "abcd", 4);
    assert_int_equal(codec_decode_errmsg(x.b, x.n, &m.u.error, &e), CODEC_E_TRUNCATED);
    assert_int_equal(e.offset, 4);
    put(&x, "ef", 2);
    assert_int_equal(codec_decode_errmsg(x.b, x.n, &m.u.error, &e), CODEC_E_TRAILING_BYTES);
    assert_int_equal(e.offset, 9);
    x.n = 3;
    assert_int_equal(codec_decode_errmsg(x.b, x.n, &m.u.error, &e), CODEC_E_TRUNCATED);
    em.code = 0;
    assert_int_equal(codec_encode_errmsg(buf, sizeof buf, 5, &em, &len, &e), CODEC_E_BAD_VALUE);
    free(x.b);
    free(a.base);
}

/* ---- frame headers ------------------------------------------------------------------------ */

static void header(uint8_t h[24], uint8_t type, uint16_t flags, uint32_t payload_len)
{
    codec_header_t hd = {.type = type,
                         .flags = flags,
                         .request_id = 0x0102030405060708u,
                         .payload_len = payload_len};
    codec_write_header(h, &hd);
}

static void header_fails(const uint8_t h[24], int code, uint32_t offset)
{
    codec_header_t hd;
    codec_error_t e = {0};
    int rc = codec_parse_header(h, 24, &hd, &e);
    if (rc != code || e.offset != offset)
        fail_msg("want %s at %u, got %s at %u: %s", codec_errc_name(code), offset,
                 codec_errc_name(rc), e.offset, e.msg);
    assert_non_null(strstr(e.msg, "frame"));
}

static void test_header(void **state)
{
    (void)state;
    uint8_t h[40];
    codec_header_t hd;
    codec_error_t e;

    header(h, CODEC_PREDICT, 0, 100);
    assert_memory_equal(h,
                        "TLW1\x01\x01\x00\x00\x08\x07\x06\x05\x04\x03\x02\x01"
                        "\x64\x00\x00\x00\x00\x00\x00\x00",
                        24);
    assert_int_equal(codec_parse_header(h, 24, &hd, &e), CODEC_OK);
    assert_int_equal(hd.type, CODEC_PREDICT);
    assert_true(hd.request_id == 0x0102030405060708u);
    assert_int_equal(hd.payload_len, 100);
    for (size_t k = 0; k < 24; k++)
        assert_int_equal(codec_parse_header(h, k, &hd, &e), CODEC_NEED_MORE);

    header(h, CODEC_PREDICT, 0, 100);
    h[3] = '2';
    header_fails(h, CODEC_E_BAD_MAGIC, 0);
    header(h, CODEC_PREDICT, 0, 100);
    h[4] = 2;
    header_fails(h, CODEC_E_BAD_VERSION, 4);
    header(h, CODEC_PREDICT, 0, CODEC_MAX_PAYLOAD + 1);
    header_fails(h, CODEC_E_FRAME_TOO_LARGE, 16);
    header(h, CODEC_PREDICT, 0, CODEC_MAX_PAYLOAD);
    assert_int_equal(codec_parse_header(h, 24, &hd, &e), CODEC_OK);
    header(h, CODEC_PREDICT, 0, 1);
    h[23] = 0x80;
    header_fails(h, CODEC_E_BAD_HEADER, 20);
    header(h, CODEC_PREDICT, 1, 1);
    header_fails(h, CODEC_E_BAD_HEADER, 6);
    header(h, CODEC_PING, 0x8000, 0);
    header_fails(h, CODEC_E_BAD_HEADER, 6);
    header(h, CODEC_LOOKUP, CODEC_LOOKUP_PARTIAL, 0);
    assert_int_equal(codec_parse_header(h, 24, &hd, &e), CODEC_OK);
    header(h, CODEC_LOOKUP, 2, 0);
    header_fails(h, CODEC_E_BAD_HEADER, 6);

    /* unknown types parse (so the payload can be skipped) but do not decode */
    codec_arena_t a = arena_for(16);
    codec_msg_t m;
    uint8_t types[] = {0, CODEC_LOOKUP, CODEC_LOOKUP_RESULT, 10, 255};
    for (size_t i = 0; i < sizeof types; i++) {
        header(h, types[i], types[i] > 9 ? 0xffff : 0, 16);
        memset(h + 24, 0, 16);
        assert_int_equal(codec_parse_header(h, 24, &hd, &e), CODEC_OK);
        assert_int_equal(codec_decode_frame(h, 39, &a, &m, &e), CODEC_NEED_MORE);
        assert_int_equal(codec_decode_frame(h, 40, &a, &m, &e), CODEC_E_UNKNOWN_TYPE);
        assert_int_equal(m.hdr.payload_len, 16);
    }
    free(a.base);
}

/* ---- hostile PREDICT payloads ---------------------------------------------------------------- */

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
    assert_int_equal(codec_decode_predict(x.b, x.n, &a, &p, &e), CODEC_OK);
    assert_int_equal(p.items, 16);
    assert_true(p.item[14].ids[CODEC_MAX_BLOCK_FEATURES - 1] == CODEC_MAX_BLOCK_FEATURES);
    assert_true(a.used <= codec_arena_bound(x.n));

    /* the same payload with too small an arena: INTERNAL, not a crash */
    codec_arena_t small = arena_new(4096);
    assert_int_equal(codec_decode_predict(x.b, x.n, &small, &p, &e), CODEC_E_INTERNAL);
    assert_non_null(strstr(e.msg, "arena"));
    free(small.base);
    free(a.base);
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

static void test_errc_names(void **state)
{
    (void)state;
    assert_string_equal(codec_errc_name(CODEC_E_BAD_MAGIC), "BAD_MAGIC");
    assert_string_equal(codec_errc_name(CODEC_E_INTERNAL), "INTERNAL");
    assert_string_equal(codec_errc_name(CODEC_NEED_MORE), "NEED_MORE");
    assert_string_equal(codec_errc_name(20), "?");
    assert_int_equal(CODEC_E_TOO_MANY_FEATURES, 14);
    assert_int_equal(CODEC_E_UNSORTED_FEATURES, 15);
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
    assert_int_equal(codec_decode_predict(buf + CODEC_HEADER_SIZE, len - CODEC_HEADER_SIZE, &a,
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
    assert_int_equal(codec_decode_predict(over, sizeof over, &a, &q, &e), CODEC_E_BAD_VARINT);
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
    assert_int_equal(codec_decode_predict(pl, plen, &a, &q, &e), CODEC_OK);
    for (uint32_t i = 0; i < N; i++)
        assert_true(q.item[0].ids[i] == ids[i]);
    /* a duplicate id at index 7: UNSORTED at its offset */
    static uint8_t bad[N * 12 + 256];
    memcpy(bad, pl, plen);
    memcpy(bad + 16 + 7 * 8, bad + 16 + 6 * 8, 8);
    codec_arena_reset(&a);
    assert_int_equal(codec_decode_predict(bad, plen, &a, &q, &e), CODEC_E_UNSORTED_FEATURES);
    assert_int_equal(e.offset, 16 + 7 * 8);
    /* cut short: TRUNCATED before any id is read */
    codec_arena_reset(&a);
    assert_int_equal(codec_decode_predict(pl, plen - 1, &a, &q, &e), CODEC_E_TRUNCATED);
    /* ids of a few bits each stay delta varints */
    for (uint32_t i = 0; i < N; i++)
        ids[i] = 1000 + 3 * i;
    assert_int_equal(codec_encode_predict(buf, sizeof buf, 1, &p, &len, &e), CODEC_OK);
    assert_int_equal(buf[CODEC_HEADER_SIZE + 15], 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varint_values),
        cmocka_unit_test(test_varint_forms),
        cmocka_unit_test(test_feature_vectors),
        cmocka_unit_test(test_sort_unique),
        cmocka_unit_test(test_standard_request),
        cmocka_unit_test(test_predict_shapes),
        cmocka_unit_test(test_block_limit_round_trip),
        cmocka_unit_test(test_result_round_trip),
        cmocka_unit_test(test_train_round_trip),
        cmocka_unit_test(test_control_round_trips),
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_predict_name_errors),
        cmocka_unit_test(test_predict_count_errors),
        cmocka_unit_test(test_predict_block_errors),
        cmocka_unit_test(test_predict_request_limit),
        cmocka_unit_test(test_encoder_refusals),
        cmocka_unit_test(test_errc_names),
        cmocka_unit_test(test_block_varint_lengths),
        cmocka_unit_test(test_block_fixed_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
