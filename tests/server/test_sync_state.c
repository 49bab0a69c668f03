/*
 * test_sync_state.c — SYNC_STATE (server/online_sync_state.c): what an
 * export's cut can record is what a restart reads back.  The consumer
 * (online_sync_apply.c) follows any producer id the stream carries, 0
 * included (the update codec does not refuse it, track() follows it from
 * its sequence 1), so the cut can list producer 0 among the peers: the
 * file must round-trip, else one foreign message on the stream sets every
 * later export aside at the restart.  Also: a cut file refused by name.
 * A DNN's MLP section (TLSYNCS2): its five arrays and 1-bit Adam's counts
 * round-trip; an MLP of 0 parameters under TLSYNCS2, a negative variance,
 * a NaN parameter, a power past 1 and a warm-up of 0 are refused, each
 * with the checksum made right (so the check itself refuses it).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "online_sync_state.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static sync_state_t cut_like(uint64_t peer0)
{
    static uint64_t keys[2] = {0, 77};
    static float vals[4] = {0.5f, 1.0f, -0.25f, 0.0f};
    sync_state_t st = {.version = 9, .base = 1, .producer = 0xabcdef, .own_last = 12, .k = 2,
                       .npeers = 2, .nkeys = 2, .keys = keys, .vals = vals};
    st.peers[0] = (sync_state_peer_t){peer0, 3};
    st.peers[1] = (sync_state_peer_t){0x1234, 40};
    return st;
}

static void round_trip(uint64_t peer0)
{
    sync_state_t st = cut_like(peer0), back;
    size_t len = sync_state_size(&st);
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    sync_state_encode(&st, buf);
    char why[300] = "";
    int rc = sync_state_parse(buf, len, &back, why, sizeof why);
    if (rc != 0)
        fail_msg("refused: %s", why);
    assert_int_equal(back.npeers, 2);
    assert_int_equal(back.peers[0].id, peer0);
    assert_int_equal(back.peers[0].last_seq, 3);
    assert_int_equal(back.own_last, 12);
    assert_int_equal(back.nkeys, 2);
    assert_int_equal(back.keys[1], 77);
    assert_memory_equal(back.vals, st.vals, sizeof(float) * 4);
    sync_state_free(&back);
    free(buf);
}

static void test_peers_round_trip(void **state)
{
    (void)state;
    round_trip(0x99);
}

static void test_producer_zero_round_trips(void **state)
{
    (void)state;
    round_trip(0);
}

static void test_cut_short_refused(void **state)
{
    (void)state;
    sync_state_t st = cut_like(0x99), back;
    size_t len = sync_state_size(&st);
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    sync_state_encode(&st, buf);
    char why[300] = "";
    assert_int_equal(sync_state_parse(buf, len - 4, &back, why, sizeof why), -22);
    assert_true(why[0] != 0);
    assert_null(back.keys);
    free(buf);
}

#define DN 5u

static sync_state_t dnn_like(float *dense)
{
    sync_state_t st = cut_like(0x99);
    for (uint32_t i = 0; i < DN * SYNC_DENSE_ARRAYS; i++)
        dense[i] = 0.125f * (float)i - 1.0f;
    st.dense_n = DN;
    st.dense_warmup = 10;
    st.dense_steps = 42;
    st.dense_b1_pow = pow(0.9, 42);
    st.dense_b2_pow = pow(0.999, 10);
    st.dense = dense;
    for (uint32_t i = 0; i < DN; i++) /* a variance is never below 0 */
        sync_state_dense(&st, SYNC_DENSE_V)[i] = 0.5f * (float)i;
    return st;
}

/* st encoded, then bytes [at, at + n) replaced by with and the checksum
 * made right: the parse's result, why filled. */
static int parse_altered(const sync_state_t *st, size_t at, const void *with, size_t n,
                         char *why, size_t why_len)
{
    size_t len = sync_state_size(st);
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    sync_state_encode(st, buf);
    if (n)
        memcpy(buf + at, with, n);
    uint64_t sum = XXH3_64bits(buf, len - 8);
    for (int i = 0; i < 8; i++)
        buf[len - 8 + i] = (uint8_t)(sum >> (8 * i));
    sync_state_t back;
    why[0] = 0;
    int rc = sync_state_parse(buf, len, &back, why, why_len);
    if (rc == 0) {
        assert_int_equal(back.dense_n, st->dense_n);
        assert_int_equal(back.dense_warmup, st->dense_warmup);
        assert_int_equal(back.dense_steps, st->dense_steps);
        assert_true(back.dense_b1_pow == st->dense_b1_pow);
        assert_true(back.dense_b2_pow == st->dense_b2_pow);
        assert_memory_equal(back.dense, st->dense,
                            sizeof(float) * SYNC_DENSE_ARRAYS * st->dense_n);
        assert_int_equal(back.nkeys, 2);
        assert_int_equal(back.npeers, 2);
        sync_state_free(&back);
        assert_null(back.dense);
    } else {
        assert_null(back.dense);
        assert_true(why[0] != 0);
    }
    free(buf);
    return rc;
}

static void test_dnn_round_trip(void **state)
{
    (void)state;
    float dense[DN * SYNC_DENSE_ARRAYS];
    sync_state_t st = dnn_like(dense);
    char why[300];
    if (parse_altered(&st, 0, NULL, 0, why, sizeof why) != 0)
        fail_msg("refused: %s", why);
    sync_state_t none = cut_like(0x99); /* the same without an MLP: TLSYNCS1, 32 + 5n x 4 less */
    assert_int_equal(sync_state_size(&st), sync_state_size(&none) + 32 + 4 * DN * 5);
    uint8_t *buf = malloc(sync_state_size(&st));
    assert_non_null(buf);
    sync_state_encode(&st, buf);
    assert_memory_equal(buf, "TLSYNCS2", 8);
    sync_state_encode(&none, buf);
    assert_memory_equal(buf, "TLSYNCS1", 8);
    free(buf);
}

static void test_dnn_refusals(void **state)
{
    (void)state;
    float dense[DN * SYNC_DENSE_ARRAYS];
    sync_state_t st = dnn_like(dense);
    char why[300];
    const size_t arrays = 88 + 2 * 16 + 2 * (8 + 4 * 2); /* where x starts */
    const uint32_t zero = 0;
    const double past_one = 1.5, nan_d = NAN;
    const float neg = -0.5f, nan_f = NAN;
    assert_int_equal(parse_altered(&st, 60, &zero, 4, why, sizeof why), -22); /* warm-up 0 */
    assert_non_null(strstr(why, "warm-up 0"));
    assert_int_equal(parse_altered(&st, 72, &past_one, 8, why, sizeof why), -22);
    assert_int_equal(parse_altered(&st, 80, &nan_d, 8, why, sizeof why), -22);
    assert_int_equal(parse_altered(&st, arrays + 4 * (SYNC_DENSE_V * DN + 2), &neg, 4, why,
                                   sizeof why), -22);
    assert_non_null(strstr(why, "v[2]"));
    assert_int_equal(parse_altered(&st, arrays + 4, &nan_f, 4, why, sizeof why), -22);
    assert_non_null(strstr(why, "x[1]"));
    /* steps 0 with powers below 1: not a state 1-bit Adam reaches */
    const uint64_t no_steps = 0;
    assert_int_equal(parse_altered(&st, 64, &no_steps, 8, why, sizeof why), -22);
    /* TLSYNCS2 of an MLP of 0 parameters: a second encoding of a TLSYNCS1 state */
    sync_state_t none = cut_like(0x99);
    size_t len = sync_state_size(&none) + 32;
    uint8_t *buf = calloc(1, len);
    assert_non_null(buf);
    sync_state_encode(&none, buf);
    memmove(buf + 88, buf + 56, sync_state_size(&none) - 56);
    memcpy(buf, "TLSYNCS2", 8);
    memset(buf + 56, 0, 32);
    uint64_t sum = XXH3_64bits(buf, len - 8);
    for (int i = 0; i < 8; i++)
        buf[len - 8 + i] = (uint8_t)(sum >> (8 * i));
    sync_state_t back;
    assert_int_equal(sync_state_parse(buf, len, &back, why, sizeof why), -22);
    assert_non_null(strstr(why, "0 parameters"));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peers_round_trip),
        cmocka_unit_test(test_producer_zero_round_trips),
        cmocka_unit_test(test_cut_short_refused),
        cmocka_unit_test(test_dnn_round_trip),
        cmocka_unit_test(test_dnn_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
