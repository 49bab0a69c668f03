/*
 * fuzz_update_codec.c — libFuzzer target for the update message decoder
 * (model/update_codec.h: update_msg_decode, update_msg_foreach,
 * update_msg_dense).
 *
 * The input is one message.  If its last 8 bytes (the checksum) are all
 * zero the target writes the right XXH3 there first, so mutations reach past
 * the checksum into the keys, scales, values and padding.
 * Oracle: a refused message has a code, an offset inside the input and a
 * sentence naming the code; an accepted one iterates exactly count keys,
 * strictly ascending (offset..offset+count-1 when dense: 0 unless a part,
 * whose range lies inside its vector), each value finite and, in
 * 1-bit mode, +-scale of a finite scale >= 0 (with NONNEG_LAST the last
 * column 0 or +scale, with NONNEG_HALF the last K/2 columns; with LOG4
 * +-scale x 2^-e or 0, those columns never negative); a dense one also
 * decodes into a vector.  Anything else abort()s.
 *
 *   cmake -DTL_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ ..
 *   ./fuzz_update_codec -max_len=4096 ../tests/fuzz/corpus/update_codec
 *
 * The seeds in corpus/update_codec/ are small messages (1 bit and exact,
 * sparse and dense, 0 keys, NONNEG_LAST, NONNEG_HALF in version 2, a dense part, LOG4 with
 * each one-sided flag and with a padding nibble, LOG4 dense whole and a part, Rice-coded keys
 * in 1 bit and LOG4) and broken ones (order, scale, padding).
 * Without TL_FUZZ this target replays them under ctest.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_seal.h"

#include "model/update_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_update_codec: %s\n", what);
        abort();
    }
}

struct walk {
    const update_msg_t *m;
    uint32_t n;
    uint64_t prev;
};

static int visit(void *ctx, uint64_t key, const float *vals)
{
    struct walk *w = ctx;
    if (w->m->flags & UPDATE_F_DENSE)
        check(key == (uint64_t)w->m->dense_offset + w->n, "dense key is not its index");
    else
        check(w->n == 0 || key > w->prev, "keys not strictly ascending");
    w->prev = key;
    for (uint32_t j = 0; j < w->m->k; j++)
        check(isfinite(vals[j]), "value not finite");
    if (w->m->flags & UPDATE_F_NONNEG_LAST)
        check(vals[w->m->k - 1] >= 0.0f, "NONNEG_LAST column negative");
    if (w->m->flags & UPDATE_F_NONNEG_HALF)
        for (uint32_t j = w->m->k / 2; j < w->m->k; j++)
            check(vals[j] >= 0.0f, "NONNEG_HALF column negative");
    w->n++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = fuzz_copy_sealed(data, size);
    if (!buf)
        return 0;
    update_msg_t m;
    update_error_t err = {0};
    int rc = update_msg_decode(buf, size, &m, &err);
    if (rc) {
        check(rc < 0, "refusal not negative");
        check(err.code != UPDATE_OK, "refusal without a code");
        check(err.offset <= size, "refusal offset beyond the input");
        check(strstr(err.msg, update_errc_name(err.code)) != NULL, "message does not name the code");
    } else {
        check(m.k >= 1 && m.k <= UPDATE_MAX_K && m.chunk >= 1 && m.count <= UPDATE_MAX_COUNT, "limits");
        check((const uint8_t *)m.model >= buf && m.end == buf + size - 8, "pointers outside the input");
        struct walk w = {&m, 0, 0};
        check(update_msg_foreach(&m, visit, &w) == 0, "foreach failed on a decoded message");
        check(w.n == m.count, "foreach count differs from the header");
        if (m.flags & UPDATE_F_DENSE) {
            check((uint64_t)m.dense_offset + m.count <= m.dense_total &&
                      m.dense_total <= UPDATE_MAX_COUNT &&
                      ((m.flags & UPDATE_F_PART) ? m.count > 0
                                                 : m.dense_offset == 0 && m.dense_total == m.count),
                  "dense range outside its vector");
            /* a part's vector may be large: decode it into a vector of its own size when small */
            if (m.dense_total <= (1u << 20)) {
                float *out = malloc(sizeof(float) * (m.dense_total ? m.dense_total : 1));
                if (out) {
                    check(update_msg_dense(&m, out, m.dense_total) == 0, "dense decode failed");
                    free(out);
                }
            }
        }
    }
    free(buf);
    return 0;
}
