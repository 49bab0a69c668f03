/*
 * test_train.c — codec/train.c: TRAIN round trips and label refusals on the
 * wire and in the encoder, and TRAIN_ACK.
 */
#include "codec_test_util.h"

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
        assert_int_equal(codec_decode_train(x.b, x.n, 0, &a2, &tmp, &e), CODEC_E_BAD_VALUE);
        assert_int_equal(e.offset, label0 + 2);
        x.n = 0;
        name(&x, "ctr");
        vint(&x, 2); /* 2 samples need >= 12 bytes */
        block_seq(&x, 0);
        f32le(&x, 1.0f);
        block_seq(&x, 1);
        assert_int_equal(codec_decode_train(x.b, x.n, 0, &a2, &tmp, &e), CODEC_E_TRUNCATED);
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

/* TRAIN_ACK: a round trip, and counts over the item limit, trailing or
 * missing bytes refused. */
static void test_train_ack_round_trip(void **state)
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
    free(x.b);
    free(a.base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_round_trip),
        cmocka_unit_test(test_train_ack_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
