/*
 * fuzz_sync_state.c — libFuzzer target for the parser of SYNC_STATE
 * (server/online_sync_state.c), the side file of an online export in
 * partitioned bus mode that a restart reads back from the repository.  The
 * input is the file's bytes, parsed twice: as given, and with its last 8
 * bytes replaced by the checksum of the rest (so the fuzzer reaches past
 * the checksum).  A parse must refuse them with a sentence, or give counts
 * within their bounds, distinct peers that are not the producer,
 * finite values, and encode back to exactly the input bytes (nothing
 * accepted is ignored); a DNN's MLP section (TLSYNCS2) of 1..DENSE_MAX
 * parameters, every one finite, no variance below 0, a warm-up >= 1 and
 * powers in [0, 1].  Anything else abort()s.
 *
 *   ./fuzz_sync_state ../tests/fuzz/corpus/sync_state
 *
 * Without TL_FUZZ the same target replays the seed corpus under ctest.
 */
#include "online_sync_state.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const uint8_t *data, size_t size)
{
    sync_state_t st;
    char why[300] = "";
    int rc = sync_state_parse(data, size, &st, why, sizeof why);
    if (rc != 0) {
        if (!why[0] || st.keys || st.vals || st.nkeys || st.dense || st.dense_n)
            abort(); /* a refusal says why and hands nothing back */
        return;
    }
    if (st.k < 2 || st.k > SYNC_STATE_K_MAX || st.k % 2 || st.npeers > SYNC_STATE_PEERS_MAX ||
        st.nkeys > SYNC_STATE_KEYS_MAX || st.producer == 0 || st.base == 0 ||
        st.base > st.version)
        abort();
    for (uint32_t i = 0; i < st.npeers; i++) {
        if (st.peers[i].id == st.producer || st.peers[i].last_seq == 0)
            abort();
        for (uint32_t j = 0; j < i; j++)
            if (st.peers[j].id == st.peers[i].id)
                abort();
    }
    for (uint64_t i = 0; i < st.nkeys * st.k; i++)
        if (!isfinite(st.vals[i]))
            abort();
    if (st.dense_n > SYNC_STATE_DENSE_MAX || (st.dense_n && !st.dense) ||
        (st.dense_n && (st.dense_warmup == 0 || !(st.dense_b1_pow >= 0) ||
                        !(st.dense_b1_pow <= 1) || !(st.dense_b2_pow >= 0) ||
                        !(st.dense_b2_pow <= 1))))
        abort();
    for (uint64_t i = 0; i < (uint64_t)st.dense_n * SYNC_DENSE_ARRAYS; i++)
        if (!isfinite(st.dense[i]))
            abort();
    for (uint32_t i = 0; i < st.dense_n; i++)
        if (sync_state_dense(&st, SYNC_DENSE_V)[i] < 0)
            abort();
    if (sync_state_size(&st) != size)
        abort();
    uint8_t *back = malloc(size);
    if (!back)
        abort();
    sync_state_encode(&st, back);
    if (memcmp(back, data, size) != 0)
        abort();
    free(back);
    sync_state_free(&st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    if (size < 8 || size > (1u << 20))
        return 0;
    uint8_t *fixed = malloc(size);
    if (!fixed)
        abort();
    memcpy(fixed, data, size);
    uint64_t sum = XXH3_64bits(fixed, size - 8);
    for (int i = 0; i < 8; i++)
        fixed[size - 8 + i] = (uint8_t)(sum >> (8 * i));
    check(fixed, size);
    free(fixed);
    return 0;
}
