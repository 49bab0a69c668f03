/*
 * test_update_msg.h — what the update message tests share
 * (test_update_codec.c, test_update_dense.c): an accumulator of the usual
 * config, a small sample message, resealing a message after an edit, and
 * the check that a decode refuses with a given code at a given offset.
 * Include cmocka and model/update_codec.h first.
 */
#ifndef TL_TEST_UPDATE_MSG_H
#define TL_TEST_UPDATE_MSG_H

#include <errno.h>
#include <string.h>

#include <xxhash.h>

static inline update_acc_t *make_acc(uint32_t k, uint32_t max_keys, uint32_t chunk)
{
    update_acc_t *acc = NULL;
    update_acc_config_t cfg = {.k = k, .max_keys = max_keys, .producer = 77, .first_seq = 1000,
                               .chunk = chunk, .model = "ctr-lr"};
    assert_int_equal(update_acc_create(&acc, &cfg), 0);
    return acc;
}

/* A valid sparse message in flags (1 bit, exact, ...): keys 5 and 9, K = 2,
 * chunk 64. */
static inline size_t sample(uint8_t *buf, uint32_t flags)
{
    update_acc_t *acc = make_acc(2, 16, 64);
    float a[2] = {0.25f, 3.0f}, b[2] = {-0.5f, 1.0f};
    assert_int_equal(update_acc_add(acc, 5, a), 0);
    assert_int_equal(update_acc_add(acc, 9, b), 0);
    update_encode_opts_t o = {.flags = flags, .select_count = UINT32_MAX};
    long len = update_acc_encode(acc, &o, buf, 512);
    assert_true(len > 0);
    update_acc_destroy(acc);
    return (size_t)len;
}

/* The checksum recomputed after a test edits a message. */
static inline void reseal(uint8_t *buf, size_t len)
{
    uint64_t h = XXH3_64bits(buf, len - 8);
    memcpy(buf + len - 8, &h, 8);
}

static inline void expect(const uint8_t *buf, size_t len, update_errc_t code, size_t offset)
{
    update_msg_t m;
    update_error_t err = {0};
    assert_int_equal(update_msg_decode(buf, len, &m, &err), -EBADMSG);
    if (err.code != code || err.offset != offset)
        fail_msg("want %s at %zu, got %s at %zu: %s", update_errc_name(code), offset, update_errc_name(err.code),
                 err.offset, err.msg);
    assert_non_null(strstr(err.msg, update_errc_name(code)));
}

#endif
