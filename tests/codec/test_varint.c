/*
 * test_varint.c — codec/varint.c: every varint length, the prefixes that are
 * truncated, the non-minimal forms that are accepted, and the 10- and
 * 11-byte forms that overflow 64 bits.
 */
#include "codec_test_util.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varint_values),
        cmocka_unit_test(test_varint_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
