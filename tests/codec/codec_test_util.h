/*
 * codec_test_util.h — what the codec's test programs share: a byte builder
 * for crafting payloads by hand from docs/wire.md (struct bld), arenas, the
 * PREDICT refusal check, random blocks and requests, and the PREDICT round
 * trip.  The hostile payloads are built byte by byte with these, not with
 * the encoder, so that the decoder is tested against the spec rather than
 * against itself.
 *
 * Header-only: every helper is static inline, so each test program (one per
 * codec source: test_varint.c, test_hash.c, test_block.c, test_frame.c,
 * test_predict.c, test_train.c, test_feedback.c; and test_tlclient.c)
 * compiles the ones it uses and exports
 * nothing.  The random generator's state is per program, and each starts
 * from the same seed; codec/bench/codec_bench.c builds its standard request
 * with the same generator and seed, so test_predict.c's first request (the
 * standard one) is the same frame.
 */
#ifndef TL_TESTS_CODEC_TEST_UTIL_H
#define TL_TESTS_CODEC_TEST_UTIL_H

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

/* ---- test vectors (codec/test_vectors.txt) ----------------------------------------- */

/* Hex text into out ("-" is empty): the byte count, or -1 when it is not hex
 * or does not fit cap. */
static inline int unhex(const char *s, uint8_t *out, size_t cap)
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

/* ---- payload builder -------------------------------------------------------------- */

/* A growable byte string for crafting payloads. */
struct bld {
    uint8_t *b;
    size_t n, cap;
};

static inline void put(struct bld *x, const void *p, size_t n)
{
    if (x->n + n > x->cap) {
        x->cap = (x->n + n) * 2 + 64;
        x->b = realloc(x->b, x->cap);
        assert_non_null(x->b);
    }
    memcpy(x->b + x->n, p, n);
    x->n += n;
}

static inline void u8(struct bld *x, uint8_t v)
{
    put(x, &v, 1);
}

static inline void u16le(struct bld *x, uint16_t v)
{
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    put(x, b, 2);
}

static inline void u32le(struct bld *x, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(x, b, 4);
}

static inline void u64le(struct bld *x, uint64_t v)
{
    u32le(x, (uint32_t)v);
    u32le(x, (uint32_t)(v >> 32));
}

static inline void f32le(struct bld *x, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u32le(x, u);
}

static inline void vint(struct bld *x, uint64_t v)
{
    uint8_t b[10];
    put(x, b, codec_varint_encode(b, v));
}

static inline void name(struct bld *x, const char *s)
{
    u8(x, (uint8_t)strlen(s));
    put(x, s, strlen(s));
}

/* PREDICT prefix: name "ctr", version 0, items. */
static inline void predict_head(struct bld *x, uint64_t items)
{
    name(x, "ctr");
    u64le(x, 0);
    vint(x, items);
}

/* A binary block of ids 1..n. */
static inline void block_seq(struct bld *x, uint32_t n)
{
    vint(x, n);
    u8(x, 0);
    for (uint32_t i = 0; i < n; i++)
        vint(x, 1);
}

static inline codec_arena_t arena_new(size_t cap)
{
    codec_arena_t a = {.base = aligned_alloc(8, (cap + 7) & ~(size_t)7), .cap = cap};
    assert_non_null(a.base);
    return a;
}

static inline codec_arena_t arena_for(size_t payload_len)
{
    return arena_new(codec_arena_bound(payload_len));
}

/* Decodes x as a PREDICT and checks the refusal's code and offset. */
static inline void predict_fails(const struct bld *x, int code, uint32_t offset)
{
    codec_arena_t a = arena_for(x->n);
    codec_predict_t p;
    codec_error_t e = {0};
    int rc = codec_decode_predict(x->b, x->n, 0, &a, &p, &e);
    if (rc != code || e.offset != offset)
        fail_msg("want %s at %u, got %s at %u: %s", codec_errc_name(code), offset,
                 codec_errc_name(rc), e.offset, e.msg);
    assert_int_equal(e.code, code);
    assert_true(strlen(e.msg) > 10);
    assert_non_null(strstr(e.msg, "PREDICT"));
    free(a.base);
}

static inline bool block_eq(const codec_block_t *a, const codec_block_t *b)
{
    if (a->n != b->n || (a->values == NULL) != (b->values == NULL))
        return false;
    if (a->n && memcmp(a->ids, b->ids, a->n * sizeof *a->ids) != 0)
        return false;
    return !a->values || !a->n || memcmp(a->values, b->values, a->n * sizeof(float)) == 0;
}

/* ---- random blocks and requests, round trips ---------------------------------------- */

static uint64_t rng = 0x243f6a8885a308d3u;

static inline uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A block of n features hashed from random raw values over the 39 Criteo
 * fields; values when with_values. */
static inline codec_block_t make_block(uint32_t n, bool with_values)
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

static inline void free_predict(codec_predict_t *p)
{
    free((void *)p->shared.ids); /* make_block's, cast back from the block's const view */
    free((void *)p->shared.values);
    for (uint32_t i = 0; i < p->items; i++) {
        free((void *)p->item[i].ids);
        free((void *)p->item[i].values);
    }
    free(p->item);
}

static inline codec_predict_t make_predict(uint32_t items, uint32_t shared, uint32_t per_item,
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

static inline size_t predict_round_trip(const codec_predict_t *p)
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

#endif /* TL_TESTS_CODEC_TEST_UTIL_H */
