/*
 * fuzz_fill.c — libFuzzer target for the snapshot loader's ordered fill
 * (store_filler_*, store/tl_hash_map_fill.c): the records of a real store in its
 * bucket order, disturbed by the input, must load exactly, or be refused
 * when two of them share a key.
 *
 * The input drives everything:
 *   byte 0      keys n = 64 + 24 * (byte % 64) (64..1576), and K (1 or 3)
 *   bytes 1..8  the seed of the source store's keys and values
 *   then ops    3 bytes each: op, i, j (indexes scaled to n):
 *                 0 swap records i and j          1 record j takes i's key
 *                 2 reverse records i..j          3 move record i to j
 *                 4 the next chunk size is i + 1  (records handed to add)
 * A source store with n keys (its hash seed from its own random draw) is
 * listed with store_foreach_raw, in bucket order as the snapshot writer
 * writes; the ops disturb that list; a target store is created as the
 * loader creates it (same K, shards and expected keys, the source's seed,
 * every sub-table reserved for its exact count) and filled through
 * store_filler_add in the chunk sizes the input chose, then
 * store_filler_finish.
 * Oracle: when two records share a key the fill must return -EEXIST; else
 * it must return 0 and the target must hold exactly the records (count, and
 * every key's value bit for bit).  Anything else abort()s.
 *
 *   cmake -DTL_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ ..
 *   ./fuzz_fill -max_len=512 ../tests/fuzz/corpus/fill
 *
 * Without TL_FUZZ this target replays corpus/fill/ under ctest.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "store/store_internal.h"
#include "store/synthetic.h"

#define SHARDS 2

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_fill: %s\n", what);
        abort();
    }
}

struct list {
    uint8_t *p;
    size_t n, cap, rec;
};

static int append(void *ctx, uint64_t key, const void *raw)
{
    struct list *l = ctx;
    check(l->n < l->cap, "foreach_raw gave more records than the store counts");
    memcpy(l->p + l->n * l->rec, &key, 8); /* little-endian hosts only (x86-64) */
    memcpy(l->p + l->n * l->rec + 8, raw, l->rec - 8);
    l->n++;
    return 0;
}

static uint64_t key_at(const struct list *l, size_t i)
{
    uint64_t k;
    memcpy(&k, l->p + i * l->rec, 8);
    return k;
}

static void swap_recs(struct list *l, size_t i, size_t j, uint8_t *tmp)
{
    memcpy(tmp, l->p + i * l->rec, l->rec);
    memcpy(l->p + i * l->rec, l->p + j * l->rec, l->rec);
    memcpy(l->p + j * l->rec, tmp, l->rec);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 9)
        return 0;
    const size_t n = 64 + 24 * (size_t)(data[0] % 64);
    const uint32_t K = data[0] & 64 ? 3 : 1;
    uint64_t seed;
    memcpy(&seed, data + 1, 8);

    store_options_t opt = {.value_floats = K, .shards = SHARDS, .expected_keys = n};
    store_t *src = NULL;
    check(store_create(&opt, &src) == 0, "store_create (source)");
    float v[3];
    for (size_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < K; j++)
            v[j] = (float)(int32_t)(store_splitmix64(&seed) >> 40) / 4096.0f;
        check(store_upsert(src, store_splitmix64(&seed), v) >= 0, "store_upsert (source)");
    }
    const size_t rec = 8 + 4 * K;
    struct list l[SHARDS];
    for (uint32_t sh = 0; sh < SHARDS; sh++) {
        size_t c = (size_t)store_shard_count(src, sh);
        l[sh] = (struct list){.p = malloc(c * rec + 1), .cap = c, .rec = rec};
        check(l[sh].p != NULL, "out of memory");
        check(store_foreach_raw(src, sh, append, &l[sh]) == 0 && l[sh].n == c, "foreach_raw");
    }

    /* The ops disturb shard 0's list (shard 1 stays as written). */
    struct list *d = &l[0];
    uint8_t tmp[8 + 12];
    size_t chunk = 4096;
    size_t chunks[64], nchunks = 0;
    for (size_t o = 9; o + 3 <= size && d->n > 1; o += 3) {
        size_t i = data[o + 1] * d->n / 256, j = data[o + 2] * d->n / 256;
        switch (data[o] % 5) {
        case 0:
            swap_recs(d, i, j, tmp);
            break;
        case 1:
            memcpy(d->p + j * rec, d->p + i * rec, 8);
            break;
        case 2:
            for (size_t a = i < j ? i : j, b = i < j ? j : i; a < b; a++, b--)
                swap_recs(d, a, b, tmp);
            break;
        case 3:
            for (size_t a = i; a < j; a++)
                swap_recs(d, a, a + 1, tmp);
            for (size_t a = i; a > j; a--)
                swap_recs(d, a, a - 1, tmp);
            break;
        default:
            if (nchunks < 64)
                chunks[nchunks++] = (size_t)data[o + 1] + 1;
        }
    }

    /* Duplicates? */
    uint64_t *keys = malloc((d->n + 1) * sizeof *keys);
    check(keys != NULL, "out of memory");
    for (size_t i = 0; i < d->n; i++)
        keys[i] = key_at(d, i);
    qsort(keys, d->n, sizeof *keys, cmp_u64);
    bool dup = false;
    for (size_t i = 1; i < d->n; i++)
        dup |= keys[i] == keys[i - 1];
    free(keys);

    /* Fill as the loader does. */
    opt.expected_keys = l[0].n + l[1].n;
    opt.hash_seed = store_hash_seed(src);
    store_t *t = NULL;
    check(store_create(&opt, &t) == 0, "store_create (target)");
    uint32_t subs = store_subs_per_shard(t);
    uint64_t *counts = calloc(subs, sizeof *counts);
    check(counts != NULL, "out of memory");
    int rc = 0;
    for (uint32_t sh = 0; sh < SHARDS && rc == 0; sh++) {
        memset(counts, 0, subs * sizeof *counts);
        for (size_t i = 0; i < l[sh].n; i++)
            counts[store_sub_of(t, key_at(&l[sh], i))]++;
        check(store_reserve_shard_exact(t, sh, counts, NULL) == 0, "store_reserve_shard_exact");
        store_filler_t *f = NULL;
        check(store_filler_new(t, sh, &f) == 0, "store_filler_new");
        size_t k = 0;
        for (size_t i = 0; i < l[sh].n && rc == 0; i += chunk) {
            chunk = sh == 0 && nchunks ? chunks[k++ % nchunks] : 4096;
            size_t m = l[sh].n - i < chunk ? l[sh].n - i : chunk;
            rc = store_filler_add(f, l[sh].p + i * rec, m);
        }
        if (rc == 0)
            rc = store_filler_finish(f);
        store_filler_free(f);
    }
    free(counts);

    if (dup) {
        check(rc == -EEXIST, "two records share a key, but the fill did not return -EEXIST");
    } else {
        check(rc == 0, "a valid list of records was refused");
        for (uint32_t sh = 0; sh < SHARDS; sh++) {
            check(store_shard_count(t, sh) == l[sh].n, "the filled shard's count is wrong");
            for (size_t i = 0; i < l[sh].n; i++) {
                float got[3];
                check(store_lookup(t, key_at(&l[sh], i), got) == 1, "a record's key is missing");
                check(memcmp(got, l[sh].p + i * rec + 8, 4 * K) == 0, "a record's value differs");
            }
        }
    }
    store_destroy(t);
    store_destroy(src);
    for (uint32_t sh = 0; sh < SHARDS; sh++)
        free(l[sh].p);
    return 0;
}
