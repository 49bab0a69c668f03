/*
 * fuzz_dnn_sync_apply.c — libFuzzer target for the checks a partitioned
 * replica makes on a peer's DENSE message before adding it to its DNN's
 * MLP (model/train_dnn_sync.c: train_dnn_sync_apply, which the server's
 * consumer calls through train_dnn_sync_apply_mlp).
 *
 * The input is one message.  If its last 8 bytes (the checksum) are all
 * zero the target writes the right XXH3 there first, so mutations reach
 * the header's fields (flags, count, producer, model name) and the payload.
 * The receiver: an MLP of N = 24 floats, chunk 8, model "dnn", producer 7.
 * Oracle: a refused message leaves x bit for bit as it was and names its
 * reason (a non-empty sentence); an accepted one is DENSE of a vector of N
 * (whole, or a part whose range lies inside it), model "dnn", another
 * producer, leaves every x finite and changes no x outside its range.
 * Anything else abort()s.
 *
 *   ./fuzz_dnn_sync_apply -max_len=1024 ../tests/fuzz/corpus/dnn_sync_apply
 *
 * Seeds in corpus/dnn_sync_apply/: exact, 1-bit and 4-bit messages of producer 9
 * that apply, and ones of another length, model and of producer 7 (this
 * replica), a truncated one and one with a NaN value, a part that applies,
 * one past the vector's end and one of a vector of another length
 * (checksum zeroed: the target fixes it).  Without TL_FUZZ this target
 * replays them under ctest.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_seal.h"

#include "model/train_sync.h"

#define N 24

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_dnn_sync_apply: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static train_dnn_sync_t *s;
    if (!s) {
        train_dnn_sync_config_t c = {.n = N, .chunk = 8, .warmup_steps = 4, .lr = 1e-3f,
                                     .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                     .producer = 7, .model = "dnn"};
        check(train_dnn_sync_create(&s, &c) == 0, "create");
    }
    uint8_t *buf = fuzz_copy_sealed(data, size);
    if (!buf)
        return 0;
    float x[N], before[N];
    for (int i = 0; i < N; i++)
        x[i] = before[i] = 0.5f - 0.03f * (float)i;
    update_error_t err = {0};
    int rc = train_dnn_sync_apply(s, x, buf, size, &err);
    if (rc != 0) {
        check(rc == -EBADMSG || rc == -EINVAL, "refused with an unexpected code");
        check(memcmp(x, before, sizeof x) == 0, "a refused message changed x");
        check(err.msg[0] != 0, "a refusal names no reason");
    } else {
        update_msg_t m;
        check(update_msg_decode(buf, size, &m, NULL) == 0, "applied a message that does not decode");
        check((m.flags & UPDATE_F_DENSE) && m.dense_total == N &&
                  (uint64_t)m.dense_offset + m.count <= N, "applied another shape");
        check(m.model_len == 3 && memcmp(m.model, "dnn", 3) == 0, "applied another model's");
        check(m.producer != 7, "applied this replica's own");
        for (int i = 0; i < N; i++) {
            check(isfinite(x[i]), "x not finite after apply");
            if ((uint32_t)i < m.dense_offset || (uint32_t)i >= m.dense_offset + m.count)
                check(memcmp(&x[i], &before[i], sizeof x[i]) == 0, "changed x outside the part");
        }
    }
    free(buf);
    return 0;
}
