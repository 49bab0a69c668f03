/*
 * test_sync_state.c — SYNC_STATE (server/online_sync_state.c): what an
 * export's cut can record is what a restart reads back.  The consumer
 * (online_sync_apply.c) follows any producer id the stream carries, 0
 * included (the update codec does not refuse it, track() follows it from
 * its sequence 1), so the cut can list producer 0 among the peers: the
 * file must round-trip, else one foreign message on the stream sets every
 * later export aside at the restart.  Also: a cut file refused by name.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "online_sync_state.h"

#include <stdlib.h>
#include <string.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peers_round_trip),
        cmocka_unit_test(test_producer_zero_round_trips),
        cmocka_unit_test(test_cut_short_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
