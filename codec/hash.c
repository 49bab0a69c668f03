/*
 * hash.c — feature ids and the sort/dedup helper that makes a block legal.
 *
 * A feature id puts the field in the top 8 bits and a 56-bit hash of the raw
 * bytes below it:
 *
 *   63      56 55                                                  0
 *   +---------+-----------------------------------------------------+
 *   |  field  |  XXH3_64bits_withSeed(raw, len, seed = field) & M56 |
 *   +---------+-----------------------------------------------------+
 *
 * Seeding with the field makes equal raw strings of different fields hash
 * apart even below the field bits.  XXH3 is the store's hash too, and it is
 * what the Python implementation (xxhash.xxh3_64) computes bit for bit;
 * codec/test_vectors.txt pins the values.
 *
 * codec_sort_unique is a heapsort that moves values along with ids: no
 * scratch memory, O(n log n) worst case, which is what a client building up
 * to 65536-feature blocks wants more than the last 2x of an introsort.
 * Heapsort is not stable, so duplicate ids keep the largest value, a rule
 * that does not depend on the order they arrived in.
 *
 * THREAD SAFETY: pure functions.
 */
#include "codec_internal.h"

#include <xxhash.h>

#define HASH_BITS 56
#define HASH_MASK ((UINT64_C(1) << HASH_BITS) - 1)

uint64_t codec_feature_id(uint8_t field, const void *raw, size_t len)
{
    return ((uint64_t)field << HASH_BITS) | (XXH3_64bits_withSeed(raw, len, field) & HASH_MASK);
}

static inline void swap2(uint64_t *ids, float *values, size_t a, size_t b)
{
    uint64_t t = ids[a];
    ids[a] = ids[b];
    ids[b] = t;
    if (values) {
        float f = values[a];
        values[a] = values[b];
        values[b] = f;
    }
}

static void sift_down(uint64_t *ids, float *values, size_t root, size_t n)
{
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n)
            return;
        if (child + 1 < n && ids[child + 1] > ids[child])
            child++;
        if (ids[root] >= ids[child])
            return;
        swap2(ids, values, root, child);
        root = child;
    }
}

/* Total order for the dedup rule: larger value wins, +0.0 over -0.0. */
static bool value_wins(float a, float b)
{
    if (a != b)
        return a > b;
    uint32_t ua, ub;
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    return ua < ub;
}

uint32_t codec_sort_unique(uint64_t *ids, float *values, uint32_t n)
{
    if (n < 2)
        return n;
    for (size_t i = n / 2; i-- > 0;)
        sift_down(ids, values, i, n);
    for (size_t end = n - 1; end > 0; end--) {
        swap2(ids, values, 0, end);
        sift_down(ids, values, 0, end);
    }

    uint32_t out = 0;
    for (uint32_t i = 1; i < n; i++) {
        if (ids[i] != ids[out]) {
            out++;
            ids[out] = ids[i];
            if (values)
                values[out] = values[i];
        } else if (values && value_wins(values[i], values[out])) {
            values[out] = values[i];
        }
    }
    return out + 1;
}
