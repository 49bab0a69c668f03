/*
 * test_update_keys.c — the key section of sparse update messages
 * (model/update_keys.c): varints or a Rice code, whichever is shorter.
 *
 *   - hashed 64-bit keys (uniform): the encoder picks Rice, the keys come
 *     back exactly and in order, and the section takes under 55 bits a key
 *     (log2(2^64 / 2000) + 1.5 is 54.5; varints take 63);
 *   - consecutive keys (gaps of 1, parameter 0) and a handful of extreme
 *     ones (1, 2, 2^63, 2^64 - 2, 2^64 - 1) round trip through the coder
 *     directly, and a message of 5 and 9 keeps its varints (shorter);
 *   - every refusal of a Rice section: a parameter over 63, a unary code
 *     that runs off the section, a byte left over, a padding bit, a gap
 *     past 2^64, and the flag with DENSE or in a format version 1 message.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/update_codec.h"
#include "model/update_codec_impl.h"

#include <stdlib.h>
#include <string.h>

#include "test_rng.h"
#include "test_update_msg.h"

#define N 2000
#define KEYS_AT (UPDATE_HEADER_BYTES + 6) /* "ctr-lr" */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct walk {
    const uint64_t *want;
    uint32_t n;
};

static int check_key(void *ctx, uint64_t key, const float *v)
{
    (void)v;
    struct walk *w = ctx;
    assert_true(w->n < N);
    assert_true(key == w->want[w->n]);
    w->n++;
    return 0;
}

/* An accumulator of n keys from keys[], all selected, encoded with flags:
 * the message (in buf) and its length. */
static long encode_all(const uint64_t *keys, uint32_t n, uint32_t flags, uint8_t *buf, size_t cap)
{
    update_acc_t *acc = make_acc(2, N, 256);
    for (uint32_t i = 0; i < n; i++) {
        float v[2] = {(float)(i % 7) - 3.0f, 0.5f};
        assert_int_equal(update_acc_add(acc, keys[i], v), 0);
    }
    update_encode_opts_t o = {.flags = flags, .select_count = UINT32_MAX};
    long len = update_acc_encode(acc, &o, buf, cap);
    assert_true(len > 0);
    update_acc_destroy(acc);
    return len;
}

static void test_hashed_keys_take_rice(void **state)
{
    (void)state;
    rng_state = 17;
    static uint64_t keys[N];
    for (uint32_t i = 0; i < N; i++)
        keys[i] = rnd() | 1; /* distinct with overwhelming odds; checked below */
    qsort(keys, N, sizeof *keys, cmp_u64);
    for (uint32_t i = 1; i < N; i++)
        assert_true(keys[i] > keys[i - 1]);
    size_t cap = 64 * N;
    uint8_t *buf = malloc(cap);
    long len = encode_all(keys, N, UPDATE_F_LOG4, buf, cap);
    update_msg_t m;
    update_error_t err;
    if (update_msg_decode(buf, (size_t)len, &m, &err) != 0)
        fail_msg("%s", err.msg);
    assert_true(m.flags & UPDATE_F_RICE);
    assert_int_equal(buf[4] | buf[5] << 8, UPDATE_FORMAT_VERSION);
    struct walk w = {keys, 0};
    assert_int_equal(update_msg_foreach(&m, check_key, &w), 0);
    assert_int_equal(w.n, N);
    size_t section = (size_t)(m.payload - m.keys);
    size_t varint = update__keys_varint_bytes(keys, sizeof *keys, N);
    assert_true(section < varint);
    if (section * 8 >= 55 * (size_t)N) /* log2(2^64 / 2000) + 1.5 = 54.5 bits a key */
        fail_msg("%zu bytes for %d keys (varints: %zu)", section, N, varint);
    free(buf);
}

/* The coder alone: put, then read back every key and the end. */
static void round_trip(const uint64_t *keys, uint32_t n)
{
    unsigned r = update__rice_param(keys, sizeof *keys, n);
    size_t bytes = update__keys_rice_bytes(keys, sizeof *keys, n, r);
    uint8_t *sec = malloc(bytes + 1);
    assert_int_equal(update__put_keys_rice(sec, keys, sizeof *keys, n, r), bytes);
    update_key_reader_t kr;
    update__keys_begin(&kr, sec, sec + bytes, true);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t key;
        if (update__keys_next(&kr, &key) != 0)
            fail_msg("key %u: %s", i, kr.why);
        assert_true(key == keys[i]);
    }
    assert_int_equal(update__keys_end(&kr), 0);
    free(sec);
}

static void test_edges_round_trip(void **state)
{
    (void)state;
    static uint64_t run[N];
    for (uint32_t i = 0; i < N; i++)
        run[i] = 1000 + i;
    assert_int_equal(update__rice_param(run, sizeof *run, N), 0);
    round_trip(run, N);
    assert_int_equal(update__keys_rice_bytes(run, sizeof *run, N, 0), 9 + (N - 1 + 7) / 8);
    const uint64_t far[] = {1, 2, UINT64_C(1) << 63, UINT64_MAX - 1, UINT64_MAX};
    for (uint32_t n = 1; n <= 5; n++)
        round_trip(far, n);
    const uint64_t one[] = {UINT64_MAX};
    round_trip(one, 1);
    /* 5 and 9: two varint bytes against a 9-byte Rice start */
    uint8_t buf[512];
    size_t len = sample(buf, 0);
    update_msg_t m;
    assert_int_equal(update_msg_decode(buf, len, &m, NULL), 0);
    assert_false(m.flags & UPDATE_F_RICE);
}

/* A 1-bit Rice message of 64 consecutive keys (parameter 0: a gap is the
 * bit 0): its section is r, the first key, then 63 zero bits in 8 bytes. */
static size_t rice_sample(uint8_t *buf, size_t cap)
{
    uint64_t keys[64];
    for (uint32_t i = 0; i < 64; i++)
        keys[i] = 100 + i;
    long len = encode_all(keys, 64, 0, buf, cap);
    update_msg_t m;
    assert_int_equal(update_msg_decode(buf, (size_t)len, &m, NULL), 0);
    assert_true(m.flags & UPDATE_F_RICE);
    assert_int_equal(m.payload - m.keys, 9 + 8);
    return (size_t)len;
}

static void test_refusals(void **state)
{
    (void)state;
    uint8_t buf[2048];
    size_t len = rice_sample(buf, sizeof buf);
    const size_t bits_at = KEYS_AT + 9;

    buf[KEYS_AT] = 64; /* parameter */
    reseal(buf, len);
    expect(buf, len, UPDATE_E_KEYS, KEYS_AT);

    len = rice_sample(buf, sizeof buf);
    memset(buf + bits_at, 0xff, 8); /* every gap's unary part runs on */
    reseal(buf, len);
    expect(buf, len, UPDATE_E_KEYS, bits_at + 7);

    len = rice_sample(buf, sizeof buf);
    buf[bits_at + 7] |= 0x80; /* 63 bits used: the 64th is padding */
    reseal(buf, len);
    expect(buf, len, UPDATE_E_PADDING, bits_at + 7);

    len = rice_sample(buf, sizeof buf);
    memset(buf + KEYS_AT + 1, 0xff, 8); /* the first key 2^64 - 1: the next passes 2^64 */
    reseal(buf, len);
    expect(buf, len, UPDATE_E_ORDER, bits_at);

    len = rice_sample(buf, sizeof buf); /* the flag in a version 1 message */
    buf[4] = UPDATE_FORMAT_VERSION_V1;
    reseal(buf, len);
    expect(buf, len, UPDATE_E_FLAGS, 6);

    len = rice_sample(buf, sizeof buf); /* one byte short of 64 keys' gaps */
    update_msg_t m;
    assert_int_equal(update_msg_decode(buf, len, &m, NULL), 0);
    memmove(buf + bits_at + 7, buf + bits_at + 8, len - (bits_at + 8));
    len--;
    uint32_t body;
    memcpy(&body, buf + 40, 4);
    body--;
    memcpy(buf + 40, &body, 4);
    reseal(buf, len);
    expect(buf, len, UPDATE_E_LENGTH, 40);

    /* the flag on a dense message */
    update_dense_t *d = NULL;
    assert_int_equal(update_dense_create(&d, 300, 256, 5, 1, "ctr-lr"), 0);
    float v[300];
    for (int i = 0; i < 300; i++)
        v[i] = (float)i;
    long dl = update_dense_encode(d, v, UPDATE_F_EXACT, 0, buf, sizeof buf);
    assert_true(dl > 0);
    assert_int_equal(update_msg_decode(buf, (size_t)dl, &m, NULL), 0);
    buf[6] |= UPDATE_F_RICE;
    buf[4] = UPDATE_FORMAT_VERSION;
    reseal(buf, (size_t)dl);
    expect(buf, (size_t)dl, UPDATE_E_FLAGS, 6);
    update_dense_destroy(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hashed_keys_take_rice),
        cmocka_unit_test(test_edges_round_trip),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
