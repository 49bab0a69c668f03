/*
 * test_frame.c — codec/frame.c and msg.c: the frame header (each framing
 * error at its header offset), unknown types that parse but do not decode,
 * ERROR and PING/PONG round trips and refusals, and the error code names.
 */
#include "codec_test_util.h"

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
    header(h, CODEC_PREDICT, 2, 1); /* bit 0 is LOG, bit 1 undefined */
    header_fails(h, CODEC_E_BAD_HEADER, 6);
    header(h, CODEC_FEEDBACK, 1, 1); /* FEEDBACK defines no flags */
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
    uint8_t types[] = {0, CODEC_LOOKUP, CODEC_LOOKUP_RESULT, 12, 255};
    for (size_t i = 0; i < sizeof types; i++) {
        header(h, types[i], types[i] > 11 ? 0xffff : 0, 16);
        memset(h + 24, 0, 16);
        assert_int_equal(codec_parse_header(h, 24, &hd, &e), CODEC_OK);
        assert_int_equal(codec_decode_frame(h, 39, &a, &m, &e), CODEC_NEED_MORE);
        assert_int_equal(codec_decode_frame(h, 40, &a, &m, &e), CODEC_E_UNKNOWN_TYPE);
        assert_int_equal(m.hdr.payload_len, 16);
    }
    free(a.base);
}

/* ERROR and PING/PONG: round trips in place, and every refusal. */
static void test_control_round_trips(void **state)
{
    (void)state;
    uint8_t buf[2048];
    size_t len;
    codec_error_t e;
    codec_msg_t m;
    codec_arena_t a = arena_for(0);

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

    struct bld x = {0};
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_control_round_trips),
        cmocka_unit_test(test_errc_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
