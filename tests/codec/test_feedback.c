/*
 * test_feedback.c — codec/feedback.c and the online-learning additions to
 * PREDICT and TRAIN: FEEDBACK and FEEDBACK_ACK round trips and every refusal
 * in decoding order, the PREDICT LOG flag (impression id first), the TRAIN
 * WEIGHTS flag, the header flag table for types 1..11, and the frame
 * vectors of codec/test_vectors.txt (TL_CODEC_VECTORS), which the Python
 * client replays too.  Hostile payloads are built byte by byte from
 * docs/wire.md, not with the encoder.
 */
#include "codec_test_util.h"

/* Decodes x as a FEEDBACK and checks the refusal's code and offset. */
static void feedback_fails(const struct bld *x, int code, uint32_t offset)
{
    codec_arena_t a = arena_for(x->n);
    codec_feedback_t fb;
    codec_error_t e = {0};
    int rc = codec_decode_feedback(x->b, x->n, &a, &fb, &e);
    if (rc != code || e.offset != offset)
        fail_msg("want %s at %u, got %s at %u: %s", codec_errc_name(code), offset,
                 codec_errc_name(rc), e.offset, e.msg);
    assert_non_null(strstr(e.msg, "FEEDBACK"));
    free(a.base);
}

static void ack_fails(const struct bld *x, int code, uint32_t offset)
{
    codec_arena_t a = arena_for(x->n);
    codec_feedback_ack_t ack;
    codec_error_t e = {0};
    int rc = codec_decode_feedback_ack(x->b, x->n, &a, &ack, &e);
    if (rc != code || e.offset != offset)
        fail_msg("want %s at %u, got %s at %u: %s", codec_errc_name(code), offset,
                 codec_errc_name(rc), e.offset, e.msg);
    assert_non_null(strstr(e.msg, "FEEDBACK_ACK"));
    free(a.base);
}

static void event(struct bld *x, uint64_t id, uint64_t item, float label, float weight)
{
    u64le(x, id);
    vint(x, item);
    f32le(x, label);
    f32le(x, weight);
}

static void test_feedback_round_trip(void **state)
{
    (void)state;
    codec_feedback_event_t ev[3] = {
        {.impression_id = 1, .item = 0, .label = 1.0f, .weight = 1.0f},
        {.impression_id = UINT64_MAX, .item = 4095, .label = 0.0f, .weight = 0.0f},
        {.impression_id = 77, .item = 200, .label = 1.0f, .weight = 1e6f},
    };
    codec_feedback_t fb = {.events = 3, .event = ev};
    strcpy(fb.name, "ctr_lr");
    uint8_t buf[256];
    size_t len;
    codec_error_t e;
    assert_int_equal(codec_encode_feedback(NULL, 0, 9, &fb, &len, &e), CODEC_NEED_MORE);
    /* 7 name + 1 events + (8 + 1 + 8) + (8 + 2 + 8) + (8 + 2 + 8) */
    assert_int_equal(len, CODEC_HEADER_SIZE + 7 + 1 + 17 + 18 + 18);
    assert_int_equal(codec_encode_feedback(buf, sizeof buf, 9, &fb, &len, &e), CODEC_OK);
    assert_int_equal(buf[5], CODEC_FEEDBACK);
    codec_arena_t a = arena_for(len);
    codec_msg_t m;
    assert_int_equal(codec_decode_frame(buf, len, &a, &m, &e), CODEC_OK);
    assert_int_equal(m.hdr.request_id, 9);
    assert_string_equal(m.u.feedback.name, "ctr_lr");
    assert_int_equal(m.u.feedback.events, 3);
    for (int i = 0; i < 3; i++) {
        const codec_feedback_event_t *g = &m.u.feedback.event[i];
        assert_true(g->impression_id == ev[i].impression_id);
        assert_int_equal(g->item, ev[i].item);
        assert_true(g->label == ev[i].label && g->weight == ev[i].weight);
    }
    uint8_t again[256];
    size_t len2;
    assert_int_equal(codec_encode_msg(again, sizeof again, &m, &len2, &e), CODEC_OK);
    assert_int_equal(len2, len);
    assert_memory_equal(again, buf, len);

    /* the encoder refuses what the decoder would */
    ev[1].impression_id = 0;
    assert_int_equal(codec_encode_feedback(buf, sizeof buf, 9, &fb, &len, &e), CODEC_E_BAD_VALUE);
    ev[1].impression_id = 5;
    ev[1].item = 4096;
    assert_int_equal(codec_encode_feedback(buf, sizeof buf, 9, &fb, &len, &e), CODEC_E_BAD_VALUE);
    ev[1].item = 1;
    ev[1].label = 0.5f;
    assert_int_equal(codec_encode_feedback(buf, sizeof buf, 9, &fb, &len, &e), CODEC_E_BAD_VALUE);
    ev[1].label = 0.0f;
    ev[1].weight = -1.0f;
    assert_int_equal(codec_encode_feedback(buf, sizeof buf, 9, &fb, &len, &e), CODEC_E_BAD_VALUE);
    ev[1].weight = NAN;
    assert_int_equal(codec_encode_feedback(buf, sizeof buf, 9, &fb, &len, &e), CODEC_E_BAD_VALUE);
    ev[1].weight = 2e6f;
    assert_int_equal(codec_encode_feedback(buf, sizeof buf, 9, &fb, &len, &e), CODEC_E_BAD_VALUE);
    ev[1].weight = 1.0f;
    fb.events = 0;
    assert_int_equal(codec_encode_feedback(buf, sizeof buf, 9, &fb, &len, &e), CODEC_E_NO_ITEMS);
    fb.events = CODEC_MAX_ITEMS + 1;
    assert_int_equal(codec_encode_feedback(buf, sizeof buf, 9, &fb, &len, &e),
                     CODEC_E_TOO_MANY_ITEMS);
    fb.events = 1;
    strcpy(fb.name, "bad name");
    assert_int_equal(codec_encode_feedback(buf, sizeof buf, 9, &fb, &len, &e), CODEC_E_BAD_NAME);
    free(a.base);
}

/* Every FEEDBACK refusal, at the offset of the first bad field in wire order. */
static void test_feedback_refusals(void **state)
{
    (void)state;
    struct bld x = {0};
    size_t ev0 = 1 + 3 + 1; /* name_len, "ctr", events (one byte) */

    u8(&x, 0); /* empty name */
    feedback_fails(&x, CODEC_E_BAD_NAME, 0);
    x.n = 0;
    name(&x, "ctr");
    feedback_fails(&x, CODEC_E_TRUNCATED, 4); /* events missing */
    vint(&x, 0);
    event(&x, 0, 0, 2.0f, -1.0f); /* bad everything: the count is first */
    feedback_fails(&x, CODEC_E_NO_ITEMS, 4);
    x.n = 0;
    name(&x, "ctr");
    vint(&x, CODEC_MAX_ITEMS + 1);
    feedback_fails(&x, CODEC_E_TOO_MANY_ITEMS, 4);
    x.n = 0;
    name(&x, "ctr");
    vint(&x, 2); /* 2 events need >= 34 bytes: checked before the first event */
    event(&x, 0, 0, 0.0f, 1.0f);
    u8(&x, 0);
    feedback_fails(&x, CODEC_E_TRUNCATED, 4);

    x.n = 0;
    name(&x, "ctr");
    vint(&x, 1);
    event(&x, 0, 9999, 0.5f, -1.0f); /* id 0 is the first bad field */
    feedback_fails(&x, CODEC_E_BAD_VALUE, (uint32_t)ev0);
    x.n = 0;
    name(&x, "ctr");
    vint(&x, 1);
    event(&x, 3, 4096, 0.5f, -1.0f); /* item over the limit */
    feedback_fails(&x, CODEC_E_BAD_VALUE, (uint32_t)ev0 + 8);
    x.n = 0;
    name(&x, "ctr");
    vint(&x, 1);
    u64le(&x, 3);
    put(&x, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11); /* item: 11-byte varint */
    u32le(&x, 0);
    u32le(&x, 0);
    feedback_fails(&x, CODEC_E_BAD_VARINT, (uint32_t)ev0 + 8);
    x.n = 0;
    name(&x, "ctr");
    vint(&x, 1);
    event(&x, 3, 4095, 0.5f, -1.0f); /* label, then the weight */
    feedback_fails(&x, CODEC_E_BAD_VALUE, (uint32_t)ev0 + 8 + 2);
    const float bad_weights[] = {-1.0f, -1e-30f, 1.0000001e6f, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < sizeof bad_weights / sizeof bad_weights[0]; i++) {
        x.n = 0;
        name(&x, "ctr");
        vint(&x, 1);
        event(&x, 3, 1, 1.0f, bad_weights[i]);
        feedback_fails(&x, CODEC_E_BAD_VALUE, (uint32_t)ev0 + 8 + 1 + 4);
    }
    x.n = 0;
    name(&x, "ctr");
    vint(&x, 1);
    event(&x, 3, 1, -0.0f, 0.0f); /* -0.0 is a label 0, 0 a legal weight */
    u8(&x, 0);
    feedback_fails(&x, CODEC_E_TRAILING_BYTES, (uint32_t)ev0 + 17);
    /* the 17-byte floor is met by the count check, but a 2-byte item varint
     * leaves the weight short */
    x.n = 0;
    name(&x, "ctr");
    vint(&x, 1);
    u64le(&x, 3);
    vint(&x, 300);
    f32le(&x, 1.0f);
    u8(&x, 0);
    u8(&x, 0);
    u8(&x, 0);
    feedback_fails(&x, CODEC_E_TRUNCATED, (uint32_t)ev0 + 8 + 2 + 4);
    free(x.b);
}

static void test_feedback_ack(void **state)
{
    (void)state;
    codec_refused_t ref[3] = {{0, CODEC_REFUSE_UNKNOWN_IMPRESSION},
                              {2, CODEC_REFUSE_ITEM_OUT_OF_RANGE},
                              {200, CODEC_REFUSE_DUPLICATE}};
    codec_feedback_ack_t ack = {.accepted = 198, .refused = 3, .refusal = ref};
    uint8_t buf[256];
    size_t len;
    codec_error_t e;
    assert_int_equal(codec_encode_feedback_ack(buf, sizeof buf, 4, &ack, &len, &e), CODEC_OK);
    assert_int_equal(len, CODEC_HEADER_SIZE + 2 + 1 + 2 + 2 + 3);
    codec_arena_t a = arena_for(len);
    codec_msg_t m;
    assert_int_equal(codec_decode_frame(buf, len, &a, &m, &e), CODEC_OK);
    assert_int_equal(m.hdr.type, CODEC_FEEDBACK_ACK);
    assert_int_equal(m.u.feedback_ack.accepted, 198);
    assert_int_equal(m.u.feedback_ack.refused, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(m.u.feedback_ack.refusal[i].event, ref[i].event);
        assert_int_equal(m.u.feedback_ack.refusal[i].reason, ref[i].reason);
    }
    /* all accepted: no refusal array */
    codec_feedback_ack_t all = {.accepted = 5};
    assert_int_equal(codec_encode_feedback_ack(buf, sizeof buf, 4, &all, &len, &e), CODEC_OK);
    assert_int_equal(len, CODEC_HEADER_SIZE + 2);
    assert_int_equal(codec_decode_frame(buf, len, &a, &m, &e), CODEC_OK);
    assert_int_equal(m.u.feedback_ack.refused, 0);
    assert_null(m.u.feedback_ack.refusal);

    /* encoder refusals */
    ref[1].event = 0; /* not ascending */
    assert_int_equal(codec_encode_feedback_ack(buf, sizeof buf, 4, &ack, &len, &e),
                     CODEC_E_BAD_VALUE);
    ref[1].event = 2;
    ref[2].event = 201; /* = accepted + refused */
    assert_int_equal(codec_encode_feedback_ack(buf, sizeof buf, 4, &ack, &len, &e),
                     CODEC_E_BAD_VALUE);
    ref[2].event = 200;
    ref[0].reason = 5;
    assert_int_equal(codec_encode_feedback_ack(buf, sizeof buf, 4, &ack, &len, &e),
                     CODEC_E_BAD_VALUE);
    ref[0].reason = 1;
    all.accepted = 0;
    assert_int_equal(codec_encode_feedback_ack(buf, sizeof buf, 4, &all, &len, &e),
                     CODEC_E_NO_ITEMS);
    all.accepted = CODEC_MAX_ITEMS;
    all.refused = 1;
    assert_int_equal(codec_encode_feedback_ack(buf, sizeof buf, 4, &all, &len, &e),
                     CODEC_E_TOO_MANY_ITEMS);

    /* decoder refusals, in wire order */
    struct bld x = {0};
    ack_fails(&x, CODEC_E_TRUNCATED, 0);
    vint(&x, CODEC_MAX_ITEMS + 1);
    ack_fails(&x, CODEC_E_TOO_MANY_ITEMS, 0); /* before refused is even read */
    x.n = 0;
    vint(&x, 1);
    ack_fails(&x, CODEC_E_TRUNCATED, 1);
    vint(&x, CODEC_MAX_ITEMS + 1);
    ack_fails(&x, CODEC_E_TOO_MANY_ITEMS, 1);
    x.n = 0;
    vint(&x, 0);
    vint(&x, 0);
    ack_fails(&x, CODEC_E_NO_ITEMS, 1);
    x.n = 0;
    vint(&x, 4000);
    vint(&x, 97);
    ack_fails(&x, CODEC_E_TOO_MANY_ITEMS, 2);
    x.n = 0;
    vint(&x, 1);
    vint(&x, 2); /* 2 refusals need >= 4 bytes */
    vint(&x, 0);
    u8(&x, 9);
    u8(&x, 1);
    ack_fails(&x, CODEC_E_TRUNCATED, 1);
    x.n = 0;
    vint(&x, 1);
    vint(&x, 2);
    vint(&x, 1);
    u8(&x, 1);
    vint(&x, 1); /* not ascending */
    u8(&x, 9);
    ack_fails(&x, CODEC_E_BAD_VALUE, 4);
    x.n = 0;
    vint(&x, 1);
    vint(&x, 1);
    vint(&x, 2); /* events = 2: index 2 is out */
    u8(&x, 1);
    ack_fails(&x, CODEC_E_BAD_VALUE, 2);
    for (unsigned reason = 0; reason < 256; reason += 5) { /* 0, 5, 10, ...: all bad */
        x.n = 0;
        vint(&x, 1);
        vint(&x, 1);
        vint(&x, 1);
        u8(&x, (uint8_t)reason);
        ack_fails(&x, CODEC_E_BAD_VALUE, 3);
    }
    x.n = 0;
    vint(&x, 1);
    vint(&x, 1);
    vint(&x, 0);
    u8(&x, CODEC_REFUSE_WRONG_MODEL);
    u8(&x, 0);
    ack_fails(&x, CODEC_E_TRAILING_BYTES, 4);
    x.n = 0;
    vint(&x, 1);
    vint(&x, 1);
    put(&x, "\x80\x80", 2); /* event varint cut off (count floor met) */
    ack_fails(&x, CODEC_E_TRUNCATED, 2);
    free(x.b);
    free(a.base);
}

/* PREDICT with the LOG flag: the impression id first, then a plain PREDICT. */
static void test_predict_log(void **state)
{
    (void)state;
    codec_predict_t p = make_predict(3, 5, 4, true);
    size_t plain_len, len;
    codec_error_t e;
    assert_int_equal(codec_encode_predict(NULL, 0, 2, &p, &plain_len, &e), CODEC_NEED_MORE);
    uint8_t *plain = malloc(plain_len);
    assert_int_equal(codec_encode_predict(plain, plain_len, 2, &p, &plain_len, &e), CODEC_OK);
    assert_int_equal(plain[6], 0); /* flags */
    p.impression_id = UINT64_C(0x1122334455667788);
    assert_int_equal(codec_encode_predict(NULL, 0, 2, &p, &len, &e), CODEC_NEED_MORE);
    assert_int_equal(len, plain_len + 8);
    uint8_t *buf = malloc(len);
    assert_int_equal(codec_encode_predict(buf, len, 2, &p, &len, &e), CODEC_OK);
    assert_int_equal(buf[6], CODEC_PREDICT_LOG);
    assert_int_equal(buf[CODEC_HEADER_SIZE], 0x88);
    assert_int_equal(buf[CODEC_HEADER_SIZE + 7], 0x11);
    /* after the id, the plain PREDICT's payload, byte for byte */
    assert_memory_equal(buf + CODEC_HEADER_SIZE + 8, plain + CODEC_HEADER_SIZE,
                        plain_len - CODEC_HEADER_SIZE);
    codec_arena_t a = arena_for(len);
    codec_msg_t m;
    assert_int_equal(codec_decode_frame(buf, len, &a, &m, &e), CODEC_OK);
    assert_true(m.u.predict.impression_id == p.impression_id);
    assert_int_equal(m.u.predict.items, 3);
    assert_true(block_eq(&m.u.predict.item[2], &p.item[2]));
    codec_arena_reset(&a);
    assert_int_equal(codec_decode_frame(plain, plain_len, &a, &m, &e), CODEC_OK);
    assert_true(m.u.predict.impression_id == 0);

    /* refusals: id cut off, id 0 (before the name), then the plain rules at +8 */
    struct bld x = {0};
    codec_predict_t q;
    u32le(&x, 1);
    assert_int_equal(codec_decode_predict(x.b, x.n, CODEC_PREDICT_LOG, &a, &q, &e),
                     CODEC_E_TRUNCATED);
    assert_int_equal(e.offset, 0);
    x.n = 0;
    u64le(&x, 0);
    u8(&x, 0); /* empty name too: the id is first */
    assert_int_equal(codec_decode_predict(x.b, x.n, CODEC_PREDICT_LOG, &a, &q, &e),
                     CODEC_E_BAD_VALUE);
    assert_int_equal(e.offset, 0);
    x.n = 0;
    u64le(&x, 5);
    u8(&x, 0);
    assert_int_equal(codec_decode_predict(x.b, x.n, CODEC_PREDICT_LOG, &a, &q, &e),
                     CODEC_E_BAD_NAME);
    assert_int_equal(e.offset, 8);
    x.n = 0;
    u64le(&x, 5);
    predict_head(&x, 0);
    assert_int_equal(codec_decode_predict(x.b, x.n, CODEC_PREDICT_LOG, &a, &q, &e),
                     CODEC_E_NO_ITEMS);
    assert_int_equal(e.offset, 8 + 4 + 8);
    /* a LOG payload read as a plain one does not decode */
    assert_int_equal(codec_decode_predict(buf + CODEC_HEADER_SIZE, len - CODEC_HEADER_SIZE, 0, &a,
                                          &q, &e) == CODEC_OK,
                     0);
    /* flags the type does not define */
    assert_int_equal(codec_decode_predict(plain + CODEC_HEADER_SIZE, plain_len - CODEC_HEADER_SIZE,
                                          0x0002, &a, &q, &e),
                     CODEC_E_BAD_HEADER);
    free(x.b);
    free(a.base);
    free(buf);
    free(plain);
    free_predict(&p);
}

/* TRAIN with the WEIGHTS flag. */
static void test_train_weights(void **state)
{
    (void)state;
    codec_predict_t p = make_predict(3, 4, 5, false);
    float labels[3] = {1.0f, 0.0f, 1.0f};
    float weights[3] = {0.0f, 2.5f, 1e6f};
    codec_train_t t = {.samples = 3, .shared = p.shared, .labels = labels, .sample = p.item};
    strcpy(t.name, "ctr");
    size_t plain_len, len;
    codec_error_t e;
    assert_int_equal(codec_encode_train(NULL, 0, 1, &t, &plain_len, &e), CODEC_NEED_MORE);
    t.weights = weights;
    assert_int_equal(codec_encode_train(NULL, 0, 1, &t, &len, &e), CODEC_NEED_MORE);
    assert_int_equal(len, plain_len + 3 * 4);
    uint8_t *buf = malloc(len);
    assert_int_equal(codec_encode_train(buf, len, 1, &t, &len, &e), CODEC_OK);
    assert_int_equal(buf[6], CODEC_TRAIN_WEIGHTS);
    codec_arena_t a = arena_for(len);
    codec_msg_t m;
    assert_int_equal(codec_decode_frame(buf, len, &a, &m, &e), CODEC_OK);
    assert_non_null(m.u.train.weights);
    assert_memory_equal(m.u.train.weights, weights, sizeof weights);
    assert_memory_equal(m.u.train.labels, labels, sizeof labels);
    assert_true(block_eq(&m.u.train.sample[1], &p.item[1]));
    /* without the flag: weights NULL, meaning 1.0 each */
    t.weights = NULL;
    assert_int_equal(codec_encode_train(buf, len, 1, &t, &len, &e), CODEC_OK);
    assert_int_equal(buf[6], 0);
    codec_arena_reset(&a);
    assert_int_equal(codec_decode_frame(buf, len, &a, &m, &e), CODEC_OK);
    assert_null(m.u.train.weights);

    t.weights = weights;
    weights[1] = -0.5f;
    assert_int_equal(codec_encode_train(buf, len, 1, &t, &len, &e), CODEC_E_BAD_VALUE);

    /* decoder: the weight after its label, before the block */
    struct bld x = {0};
    codec_train_t q;
    const float bad[] = {-1.0f, 1.5e6f, INFINITY, NAN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        x.n = 0;
        name(&x, "ctr");
        vint(&x, 1);
        block_seq(&x, 0);
        f32le(&x, 1.0f);
        f32le(&x, bad[i]);
        u8(&x, 7); /* a block that is bad too: the weight comes first */
        u8(&x, 9);
        assert_int_equal(codec_decode_train(x.b, x.n, CODEC_TRAIN_WEIGHTS, &a, &q, &e),
                         CODEC_E_BAD_VALUE);
        assert_int_equal(e.offset, 1 + 3 + 1 + 2 + 4);
    }
    /* 1 sample with weights needs >= 10 bytes after the count */
    x.n = 0;
    name(&x, "ctr");
    vint(&x, 1);
    block_seq(&x, 0);
    f32le(&x, 1.0f);
    block_seq(&x, 0); /* 8 bytes: enough without weights, not with */
    assert_int_equal(codec_decode_train(x.b, x.n, 0, &a, &q, &e), CODEC_OK);
    assert_int_equal(codec_decode_train(x.b, x.n, CODEC_TRAIN_WEIGHTS, &a, &q, &e),
                     CODEC_E_TRUNCATED);
    assert_int_equal(e.offset, 4);
    assert_int_equal(codec_decode_train(x.b, x.n, 0x8000, &a, &q, &e), CODEC_E_BAD_HEADER);
    free(x.b);
    free(a.base);
    free(buf);
    free_predict(&p);
}

/* Header flags: bit 0 defined for PREDICT, TRAIN and LOOKUP, nothing for the
 * other known types 1..11; unknown types are not checked. */
static void test_header_flags(void **state)
{
    (void)state;
    for (unsigned type = 0; type < 16; type++) {
        for (unsigned flags = 1; flags <= 4; flags <<= 1) {
            codec_header_t h = {.type = (uint8_t)type, .flags = (uint16_t)flags, .request_id = 1};
            uint8_t b[CODEC_HEADER_SIZE];
            codec_write_header(b, &h);
            codec_header_t got;
            codec_error_t e;
            bool known = type >= 1 && type <= 11;
            bool defined = flags == 1 && (type == CODEC_PREDICT || type == CODEC_TRAIN ||
                                          type == CODEC_LOOKUP);
            int want = known && !defined ? CODEC_E_BAD_HEADER : CODEC_OK;
            if (codec_parse_header(b, sizeof b, &got, &e) != want)
                fail_msg("type %u flags %u: want %s", type, flags, codec_errc_name(want));
        }
    }
}

/* ---- codec/test_vectors.txt: "frame <name> <verdict> <hex>" lines ---------------------- */

static void test_frame_vectors(void **state)
{
    (void)state;
    FILE *f = fopen(TL_CODEC_VECTORS, "r");
    assert_non_null(f);
    char line[2048], vname[64], verdict[32], hex[1800];
    int vectors = 0, valid = 0, types = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "frame ", 6) != 0)
            continue;
        assert_int_equal(sscanf(line, "frame %63s %31s %1799s", vname, verdict, hex), 3);
        uint8_t frame[900];
        int n = unhex(hex, frame, sizeof frame);
        assert_true(n >= CODEC_HEADER_SIZE);
        codec_arena_t a = arena_for((size_t)n);
        codec_msg_t m;
        codec_error_t e = {0};
        int rc = codec_decode_frame(frame, (size_t)n, &a, &m, &e);
        if (strcmp(codec_errc_name(rc), verdict) != 0)
            fail_msg("vector %s: want %s, got %s (%s)", vname, verdict, codec_errc_name(rc), e.msg);
        if (rc == CODEC_OK) { /* vectors are minimal encodings: the encoder writes them back */
            uint8_t again[900];
            size_t len;
            assert_int_equal(codec_encode_msg(again, sizeof again, &m, &len, &e), CODEC_OK);
            assert_int_equal(len, (size_t)n);
            assert_memory_equal(again, frame, len);
            types |= 1 << m.hdr.type;
            valid++;
        }
        free(a.base);
        vectors++;
    }
    fclose(f);
    assert_true(vectors >= 10);
    assert_true(valid >= 4);
    /* a LOG PREDICT, a weighted TRAIN, FEEDBACK and FEEDBACK_ACK at least */
    assert_true((types & (1 << CODEC_PREDICT)) && (types & (1 << CODEC_TRAIN)) &&
                (types & (1 << CODEC_FEEDBACK)) && (types & (1 << CODEC_FEEDBACK_ACK)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_feedback_round_trip), cmocka_unit_test(test_feedback_refusals),
        cmocka_unit_test(test_feedback_ack),        cmocka_unit_test(test_predict_log),
        cmocka_unit_test(test_train_weights),       cmocka_unit_test(test_header_flags),
        cmocka_unit_test(test_frame_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
