/*
 * test_fill.c — the snapshot loader's ordered fill (store_filler_*, in
 * store/tl_hash_map_fill.c): records in another store's bucket order, with that
 * store's hash seed, go in place; in any other order they still all go in;
 * and a duplicate key anywhere in the stream is refused.
 *
 * A source store gets N keys; store_foreach_raw lists each shard's records in
 * bucket order, as the snapshot writer does.  A target store is created as
 * store_snapshot_load creates one (same K, dtype, shards and expected keys,
 * each sub-table reserved for its exact count) and filled shard by shard:
 *   - with the source's seed: the target must hold exactly the source's
 *     keys and values, and, listed again and filled into a third store,
 *     (nearly) every record of the target must go in order;
 *   - with another seed, and with the records shuffled: the same contents,
 *     most records set aside;
 *   - with one record's key replaced by another record's: add or finish must
 *     return -EEXIST, for every pair tried: neighbours (which share a
 *     bucket), and pairs far apart (which meet in the check of queued
 *     alternate-bucket placements, or in the path for records set aside).
 *
 * THREAD SAFETY: single-threaded.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store.h"
#include "store/store_internal.h"
#include "store/synthetic.h"

struct recs {
    uint8_t *p;
    size_t n, cap, rec;
};

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        fail_msg("out of memory (%zu bytes)", n);
    return p;
}

static uint64_t get_key(const struct recs *r, size_t i)
{
    const uint8_t *p = r->p + i * r->rec;
    uint64_t k = 0;
    for (int b = 7; b >= 0; b--)
        k = k << 8 | p[b];
    return k;
}

static void put_key(struct recs *r, size_t i, uint64_t k)
{
    for (int b = 0; b < 8; b++)
        r->p[i * r->rec + b] = (uint8_t)(k >> (8 * b));
}

static int append_raw(void *ctx, uint64_t key, const void *raw)
{
    struct recs *r = ctx;
    if (r->n == r->cap)
        fail_msg("foreach_raw gave more records than the store counts");
    put_key(r, r->n, key);
    memcpy(r->p + r->n * r->rec + 8, raw, r->rec - 8);
    r->n++;
    return 0;
}

/* A store of n keys created for `expected` (it grows when that is less),
 * and its records per shard in bucket order. */
/* The sources' bucket placement seed, fixed: with about one random seed in
 * 75 (e.g. 125 and 145) no duplicate pair of test_duplicates_in_both_buckets
 * lands in order in both of its buckets, so that test would exercise
 * nothing and fail; a fixed seed makes every run check the same layout. */
#define SOURCE_SEED 1

static store_t *source_sized(uint32_t k, store_dtype_t dt, uint32_t shards, size_t n,
                             size_t expected, struct recs *out)
{
    store_options_t opt = {.value_floats = k, .dtype = dt, .shards = shards,
                           .expected_keys = expected, .hash_seed = SOURCE_SEED};
    store_t *s = NULL;
    assert_int_equal(store_create(&opt, &s), 0);
    uint64_t x = 7 + n;
    float v[STORE_MAX_VALUE_FLOATS];
    for (size_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < k; j++)
            v[j] = (float)(int64_t)(store_splitmix64(&x) % 20001) / 1000.0f - 10.0f;
        if (store_upsert(s, store_splitmix64(&x), v) != 1)
            fail_msg("source: upsert %zu of a new key failed", i);
    }
    size_t rec = 8 + store_value_bytes(s);
    for (uint32_t sh = 0; sh < shards; sh++) {
        size_t c = (size_t)store_shard_count(s, sh);
        out[sh] = (struct recs){.p = xmalloc(c * rec), .cap = c, .rec = rec};
        assert_int_equal(store_foreach_raw(s, sh, append_raw, &out[sh]), 0);
        assert_int_equal(out[sh].n, c);
    }
    return s;
}

/* A store of n keys sized for n. */
static store_t *source(uint32_t k, store_dtype_t dt, uint32_t shards, size_t n, struct recs *out)
{
    return source_sized(k, dt, shards, n, n, out);
}

/* Creates a store as the loader does and fills it from recs.  Returns the
 * first nonzero filler result (0 when all went in); *t is the store. */
static int fill(const store_t *src, const struct recs *recs, uint64_t seed, store_t **t,
                uint64_t *in_order, uint64_t *aside)
{
    uint32_t shards = store_shards(src);
    uint64_t total = 0;
    for (uint32_t sh = 0; sh < shards; sh++)
        total += recs[sh].n;
    store_options_t opt = {.value_floats = store_value_floats(src), .dtype = store_dtype(src),
                           .shards = shards, .expected_keys = total, .hash_seed = seed};
    assert_int_equal(store_create(&opt, t), 0);
    uint32_t subs = store_subs_per_shard(*t);
    uint64_t *counts = calloc(subs, sizeof *counts);
    assert_non_null(counts);
    *in_order = *aside = 0;
    int rc = 0;
    for (uint32_t sh = 0; sh < shards && rc == 0; sh++) {
        memset(counts, 0, subs * sizeof *counts);
        for (size_t i = 0; i < recs[sh].n; i++)
            counts[store_sub_of(*t, get_key(&recs[sh], i))]++;
        assert_int_equal(store_reserve_shard_exact(*t, sh, counts, NULL), 0);
        store_filler_t *f = NULL;
        assert_int_equal(store_filler_new(*t, sh, &f), 0);
        /* in pieces, as the loader hands them over */
        for (size_t i = 0; i < recs[sh].n && rc == 0; i += 1000) {
            size_t m = recs[sh].n - i < 1000 ? recs[sh].n - i : 1000;
            rc = store_filler_add(f, recs[sh].p + i * recs[sh].rec, m);
        }
        if (rc == 0)
            rc = store_filler_finish(f);
        uint64_t a, b;
        store_filler_counts(f, &a, &b);
        *in_order += a;
        *aside += b;
        store_filler_free(f);
    }
    free(counts);
    return rc;
}

/* t holds exactly src's keys and values. */
static void assert_same_contents(const store_t *src, const struct recs *recs, const store_t *t,
                                 const char *what)
{
    uint32_t k = store_value_floats(src);
    float a[STORE_MAX_VALUE_FLOATS], b[STORE_MAX_VALUE_FLOATS];
    for (uint32_t sh = 0; sh < store_shards(src); sh++) {
        if (store_shard_count(t, sh) != recs[sh].n)
            fail_msg("%s: shard %u holds %llu keys, expected %zu", what, sh,
                     (unsigned long long)store_shard_count(t, sh), recs[sh].n);
        for (size_t i = 0; i < recs[sh].n; i++) {
            uint64_t key = get_key(&recs[sh], i);
            if (store_lookup(src, key, a) != 1 || store_lookup(t, key, b) != 1 ||
                memcmp(a, b, k * sizeof(float)) != 0)
                fail_msg("%s: key %#llx (shard %u record %zu) lost or changed", what,
                         (unsigned long long)key, sh, i);
        }
    }
}

static void free_recs(struct recs *r, uint32_t shards)
{
    for (uint32_t sh = 0; sh < shards; sh++)
        free(r[sh].p);
}

static void test_orders(void **state)
{
    (void)state;
    static const struct { uint32_t k; store_dtype_t dt; uint32_t shards; size_t n; } kinds[] = {
        {1, STORE_DTYPE_F32, 1, 30000},
        {5, STORE_DTYPE_F16, 4, 20000},
        {16, STORE_DTYPE_F32, 2, 8000},
    };
    for (size_t c = 0; c < sizeof kinds / sizeof kinds[0]; c++) {
        uint32_t shards = kinds[c].shards;
        size_t n = kinds[c].n;
        struct recs recs[4];
        store_t *src = source(kinds[c].k, kinds[c].dt, shards, n, recs);
        uint64_t seed = store_hash_seed(src), in_order, aside;
        store_t *t = NULL;

        /* the writer's seed and bucket order: in place.  The source was
         * filled by upserts, its sub-tables sized by expected_keys (and
         * grown if need be), so where its sizes differ from the exact
         * reservation here its records may go aside (none did in the runs
         * so far).  A store filled as the loader fills (t) has the loader's
         * sizes: its records must all go in place. */
        assert_int_equal(fill(src, recs, seed, &t, &in_order, &aside), 0);
        print_message("    K=%u %u shards, %zu keys, a grown store's order: %llu in order, "
                      "%llu aside\n",
                      kinds[c].k, shards, n, (unsigned long long)in_order,
                      (unsigned long long)aside);
        assert_int_equal(in_order + aside, n);
        assert_same_contents(src, recs, t, "same seed, grown source");
        struct recs again[4];
        for (uint32_t sh = 0; sh < shards; sh++) {
            again[sh] = (struct recs){.p = xmalloc(recs[sh].n * recs[sh].rec), .cap = recs[sh].n,
                                      .rec = recs[sh].rec};
            assert_int_equal(store_foreach_raw(t, sh, append_raw, &again[sh]), 0);
        }
        store_t *t2 = NULL;
        assert_int_equal(fill(t, again, seed, &t2, &in_order, &aside), 0);
        print_message("    a loaded store's order: %llu in order, %llu aside\n",
                      (unsigned long long)in_order, (unsigned long long)aside);
        if (aside > n / 1000)
            fail_msg("a loaded store's order, same seed: %llu of %zu records set aside, "
                     "expected < 0.1%%",
                     (unsigned long long)aside, n);
        assert_same_contents(src, recs, t2, "same seed, loaded source");
        store_destroy(t2);
        free_recs(again, shards);
        store_destroy(t);

        /* another seed: the order means nothing, all must still go in */
        assert_int_equal(fill(src, recs, seed ^ 0x5555, &t, &in_order, &aside), 0);
        print_message("    other seed: %llu in order, %llu aside\n", (unsigned long long)in_order,
                      (unsigned long long)aside);
        if (aside < n / 2)
            fail_msg("another seed: only %llu of %zu records set aside", (unsigned long long)aside,
                     n);
        assert_same_contents(src, recs, t, "other seed");
        store_destroy(t);

        /* the writer's seed, records shuffled */
        uint64_t x = 99;
        uint8_t tmp[8 + STORE_MAX_VALUE_FLOATS * 4];
        for (uint32_t sh = 0; sh < shards; sh++) {
            size_t rec = recs[sh].rec;
            for (size_t i = recs[sh].n; i > 1; i--) {
                size_t j = (size_t)(store_splitmix64(&x) % i);
                memcpy(tmp, recs[sh].p + (i - 1) * rec, rec);
                memcpy(recs[sh].p + (i - 1) * rec, recs[sh].p + j * rec, rec);
                memcpy(recs[sh].p + j * rec, tmp, rec);
            }
        }
        assert_int_equal(fill(src, recs, seed, &t, &in_order, &aside), 0);
        print_message("    shuffled: %llu in order, %llu aside\n", (unsigned long long)in_order,
                      (unsigned long long)aside);
        assert_same_contents(src, recs, t, "shuffled");
        store_destroy(t);

        store_destroy(src);
        free_recs(recs, shards);
    }
}

static void test_duplicates_refused(void **state)
{
    (void)state;
    const size_t n = 3000;
    struct recs recs[1];
    store_t *src = source(1, STORE_DTYPE_F32, 1, n, recs);
    uint64_t seed = store_hash_seed(src), in_order, aside;
    struct recs dup = recs[0];
    dup.p = xmalloc(n * dup.rec);
    static const size_t steps[] = {1, 2, 5, 11, 97, 1000, 2999};
    size_t trials = 0;
    for (size_t i = 0; i < n; i += 3) {
        for (size_t q = 0; q < sizeof steps / sizeof steps[0]; q++) {
            size_t j = (i + steps[q]) % n;
            memcpy(dup.p, recs[0].p, n * dup.rec);
            put_key(&dup, j, get_key(&recs[0], i)); /* record j repeats record i's key */
            store_t *t = NULL;
            int rc = fill(src, &dup, seed, &t, &in_order, &aside);
            if (rc != -EEXIST)
                fail_msg("records %zu and %zu share a key: the fill returned %d, expected %d", i,
                         j, rc, -EEXIST);
            store_destroy(t);
            trials++;
        }
    }
    print_message("    %zu duplicate pairs refused\n", trials);
    free(dup.p);
    store_destroy(src);
    free_recs(recs, 1);
}

/* Two records of one key, each where the fill puts it in order: one in
 * its primary bucket, the other in its alternate.  They never meet in one
 * bucket; the check of the queued alternate placement must catch them. */
static void test_duplicates_in_both_buckets(void **state)
{
    (void)state;
    const size_t n = 20000;
    struct recs recs[1], loaded[1];
    store_t *src = source(1, STORE_DTYPE_F32, 1, n, recs);
    uint64_t seed = store_hash_seed(src), in_order, aside;
    store_t *t = NULL;
    assert_int_equal(fill(src, recs, seed, &t, &in_order, &aside), 0);
    loaded[0] = (struct recs){.p = xmalloc(n * recs[0].rec), .cap = n, .rec = recs[0].rec};
    assert_int_equal(store_foreach_raw(t, 0, append_raw, &loaded[0]), 0);
    /* holder[r]: the bucket of record r in t, nondecreasing (bucket order) */
    uint64_t *holder = xmalloc(n * sizeof *holder), cand[2];
    for (size_t r = 0; r < n; r++)
        assert_int_equal(store_key_buckets(t, get_key(&loaded[0], r), cand, &holder[r]), 1);
    struct recs dup = loaded[0];
    dup.p = xmalloc(n * dup.rec);
    size_t trials = 0, in_order_trials = 0;
    for (size_t i = 0; i < n && trials < 400; i += 7) {
        uint64_t key = get_key(&loaded[0], i), h;
        assert_int_equal(store_key_buckets(t, key, cand, &h), 1);
        uint64_t other = h == cand[0] ? cand[1] : cand[0];
        size_t j = 0;
        while (j < n && holder[j] < other)
            j++;
        if (other == h || j == n || holder[j] != other)
            continue; /* no alternate, or no record in that bucket to stand in for */
        memcpy(dup.p, loaded[0].p, n * dup.rec);
        put_key(&dup, j, key); /* record j, in bucket `other`, becomes record i's key */
        store_t *d = NULL;
        int rc = fill(t, &dup, seed, &d, &in_order, &aside);
        if (rc != -EEXIST)
            fail_msg("records %zu (bucket %llu) and %zu (bucket %llu) share a key: the fill "
                     "returned %d, expected %d",
                     i, (unsigned long long)h, j, (unsigned long long)other, rc, -EEXIST);
        in_order_trials += aside == 0;
        store_destroy(d);
        trials++;
    }
    print_message("    %zu duplicate pairs refused, %zu of them placed in order in both buckets\n",
                  trials, in_order_trials);
    if (trials < 100 || in_order_trials < trials * 9 / 10)
        fail_msg("only %zu of %zu pairs were placed in order (expected most)", in_order_trials,
                 trials);
    free(holder);
    free(dup.p);
    store_destroy(t);
    store_destroy(src);
    free_recs(recs, 1);
    free_recs(loaded, 1);
}

/* A key of another shard is refused; so is a shard that is not empty. */
static void test_wrong_shard_refused(void **state)
{
    (void)state;
    struct recs recs[2];
    store_t *src = source(1, STORE_DTYPE_F32, 2, 2000, recs);
    store_t *t = NULL;
    uint64_t in_order, aside;
    put_key(&recs[0], 500, get_key(&recs[1], 0));
    recs[1].n = 0; /* only shard 0's records, one of them shard 1's */
    assert_int_equal(fill(src, recs, store_hash_seed(src), &t, &in_order, &aside), -EXDEV);
    store_destroy(t);
    /* the filler takes only an empty shard (it relies on empty buckets) */
    store_filler_t *f = NULL;
    assert_int_equal(store_filler_new(src, 0, &f), -EINVAL);
    assert_null(f);
    assert_int_equal(store_filler_new(src, 2, &f), -EINVAL); /* no such shard */
    store_destroy(src);
    free_recs(recs, 2);
}

/* Reads shard sh's records out of the snapshot in dir (a 64-byte header,
 * then records of rec bytes: store/snapshot.c). */
static void read_shard_file(const char *dir, uint32_t sh, size_t rec, struct recs *out)
{
    char path[512];
    snprintf(path, sizeof path, "%s/shard-%05u.tls", dir, sh);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_true(len >= 64 && (size_t)(len - 64) % rec == 0);
    size_t n = (size_t)(len - 64) / rec;
    *out = (struct recs){.p = xmalloc(n * rec), .n = n, .cap = n, .rec = rec};
    assert_int_equal(fseek(f, 64, SEEK_SET), 0);
    assert_int_equal(fread(out->p, rec, n, f), n);
    fclose(f);
}

static void remove_snapshot(const char *dir, uint32_t shards)
{
    char path[512];
    for (uint32_t sh = 0; sh < shards; sh++) {
        snprintf(path, sizeof path, "%s/shard-%05u.tls", dir, sh);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    unlink(path);
    rmdir(dir);
}

/* A store sized for other than the keys it holds (grown from a small hint,
 * or created for more) lists its shards in its own bucket order, which the
 * loader's exactly sized store does not share: most records would go
 * aside.  store_snapshot_write writes such shards in the loader's order: the
 * written files, filled as the loader fills, go (nearly) all in place, and
 * load back exactly. */
static void test_written_in_loader_order(void **state)
{
    (void)state;
    static const struct { uint32_t k; store_dtype_t dt; size_t n, expected; } cases[] = {
        {1, STORE_DTYPE_F32, 30000, 1000},  /* grew 30x */
        {5, STORE_DTYPE_F16, 20000, 40000}, /* created for twice its keys */
        {1, STORE_DTYPE_F32, 40000, 42000}, /* created for 5% more */
    };
    const uint32_t shards = 4;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const size_t n = cases[c].n;
        struct recs own[4], written[4];
        store_t *src = source_sized(cases[c].k, cases[c].dt, shards, n, cases[c].expected, own);
        uint64_t seed = store_hash_seed(src), in_order, aside;
        store_t *t = NULL;

        /* the store's own order: what the writer wrote before */
        assert_int_equal(fill(src, own, seed, &t, &in_order, &aside), 0);
        store_destroy(t);
        print_message("    K=%u, %zu keys in a store sized for %zu: its own order %llu in order, "
                      "%llu aside\n",
                      cases[c].k, n, cases[c].expected, (unsigned long long)in_order,
                      (unsigned long long)aside);
        if (aside < n / 10)
            fail_msg("the case tests nothing: the store's own order sent only %llu of %zu "
                     "records aside",
                     (unsigned long long)aside, n);

        char dir[] = "/tmp/test_fill.XXXXXX";
        assert_non_null(mkdtemp(dir));
        rmdir(dir); /* store_snapshot_write creates it */
        store_meta_t meta = {.model_kind = STORE_MODEL_LR, .version = 1};
        snprintf(meta.model_name, sizeof meta.model_name, "fill");
        store_error_t err;
        if (store_snapshot_write(src, dir, &meta, &err) != 0)
            fail_msg("store_snapshot_write: %s", err.msg);
        for (uint32_t sh = 0; sh < shards; sh++) {
            read_shard_file(dir, sh, own[sh].rec, &written[sh]);
            assert_int_equal(written[sh].n, own[sh].n);
        }
        assert_int_equal(fill(src, written, seed, &t, &in_order, &aside), 0);
        print_message("    as written: %llu in order, %llu aside\n", (unsigned long long)in_order,
                      (unsigned long long)aside);
        if (aside > n / 1000)
            fail_msg("as written: %llu of %zu records set aside, expected < 0.1%%",
                     (unsigned long long)aside, n);
        assert_same_contents(src, written, t, "as written");
        store_destroy(t);

        store_t *loaded = NULL;
        if (store_snapshot_load(dir, 2, &loaded, NULL, &err) != 0)
            fail_msg("store_snapshot_load: %s", err.msg);
        assert_same_contents(src, written, loaded, "loaded");
        store_destroy(loaded);

        remove_snapshot(dir, shards);
        store_destroy(src);
        free_recs(own, shards);
        free_recs(written, shards);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orders),
        cmocka_unit_test(test_duplicates_refused),
        cmocka_unit_test(test_duplicates_in_both_buckets),
        cmocka_unit_test(test_wrong_shard_refused),
        cmocka_unit_test(test_written_in_loader_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
