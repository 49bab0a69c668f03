/*
 * test_hash_map_reserve.c — single-threaded tests of tl_hash_map
 * (store/tl_hash_map*.c): exact reservation: no growth up to the reserved
 * count, growth after, and churn at full load.
 *
 * Shared helpers and the reference map: hash_map_testutil.h.  SIZES: see there.
 *
 * THREAD SAFETY: single-threaded; test_concurrent.c covers readers during
 * writes.
 */

#include "hash_map_testutil.h"

/* ---- (d) exact reservation ----------------------------------------------- */

static void run_reserved(uint32_t shards, uint64_t n, uint32_t k, store_dtype_t dtype, bool by_sub,
                         uint64_t expected)
{
    struct rng r = {n * 7 + shards + by_sub};
    struct ref m;
    ref_init(&m, k, dtype, 2 * n + 1);
    store_t *s = make_store(k, dtype, shards, expected, 0);
    uint32_t subs = store_subs_per_shard(s);
    uint64_t *per = xcalloc((size_t)shards * subs, sizeof *per);
    for (uint64_t id = 0; id < n; id++) {
        uint64_t key = key_of(id);
        uint32_t sh = store_shard_of(s, key), sub = store_sub_of(s, key);
        if (sh >= shards || sub >= subs)
            fail_msg("key %#llx: shard %u of %u, sub %u of %u", (unsigned long long)key, sh,
                     shards, sub, subs);
        per[(size_t)sh * subs + (by_sub ? sub : 0)]++;
    }
    for (uint32_t sh = 0; sh < shards; sh++)
        for (uint32_t sub = 0; sub < (by_sub ? subs : 1); sub++) {
            uint64_t c = per[(size_t)sh * subs + sub];
            int rc = by_sub ? store_reserve_sub(s, sh, sub, c) : store_reserve_shard(s, sh, c);
            if (rc != 0)
                fail_msg("reserve(shard %u, sub %u, %llu keys) = %d", sh, sub,
                         (unsigned long long)c, rc);
        }
    store_stats_t before, after;
    stats_of(s, &before);
    for (uint64_t id = 0; id < n; id++)
        ref_upsert(s, &m, id, &r, (size_t)id);
    stats_of(s, &after);
    if (after.rebuilds != before.rebuilds || after.slots != before.slots)
        fail_msg("reserved %llu keys (%u shards, %s), inserting them grew the store: rebuilds "
                 "%llu -> %llu, slots %llu -> %llu",
                 (unsigned long long)n, shards, by_sub ? "per sub-table" : "per shard",
                 (unsigned long long)before.rebuilds, (unsigned long long)after.rebuilds,
                 (unsigned long long)before.slots, (unsigned long long)after.slots);
    check_store_equals_ref(s, &m, "reserved: full");
    for (uint64_t id = 0; id <= 2 * n; id++)
        ref_lookup(s, &m, id, (size_t)id);
    /* Past the reservation: it must grow and stay right. */
    for (uint64_t id = n; id <= 2 * n; id++)
        ref_upsert(s, &m, id, &r, (size_t)id);
    stats_of(s, &after);
    /* 2n+1 keys that no longer fit the reserved slots force a rebuild. */
    if (after.entries - after.stashed > before.slots &&
        (after.rebuilds <= before.rebuilds || after.slots <= before.slots))
        fail_msg("reserved %llu keys (%llu slots) then inserted %llu more: rebuilds %llu -> %llu, "
                 "slots %llu -> %llu",
                 (unsigned long long)n, (unsigned long long)before.slots, (unsigned long long)n + 1,
                 (unsigned long long)before.rebuilds, (unsigned long long)after.rebuilds,
                 (unsigned long long)before.slots, (unsigned long long)after.slots);
    if (after.slots < after.entries - after.stashed)
        fail_msg("after growth: %llu entries in %llu slots", (unsigned long long)after.entries,
                 (unsigned long long)after.slots);
    check_store_equals_ref(s, &m, "reserved: past the reservation");
    for (uint64_t id = 0; id <= 2 * n; id++)
        ref_lookup(s, &m, id, (size_t)id);
    free(per);
    store_destroy(s);
    ref_free(&m);
}

static void test_reserved_full_table(void **state)
{
    (void)state;
    for (int by_sub = 0; by_sub < 2; by_sub++) {
        run_reserved(1, 1, 1, STORE_DTYPE_F32, by_sub, 0);
        run_reserved(1, 1000, 1, STORE_DTYPE_F32, by_sub, 0);
        run_reserved(16, 7, 4, STORE_DTYPE_F32, by_sub, 0);
        run_reserved(4, scaled(100000), 1, STORE_DTYPE_F32, by_sub, 0);
        run_reserved(16, scaled(250000), 8, STORE_DTYPE_F16, by_sub, 0);
        /* many sub-tables per shard */
        run_reserved(2, scaled(200000), 1, STORE_DTYPE_F32, by_sub, scaled(4000000));
    }
    for (uint64_t n = 1; n < 5000; n = n * 3 + 1) /* sizes around small-table boundaries */
        run_reserved(4, n, 2, STORE_DTYPE_F32, true, 0);
}

/* Churn at the reserved size with max_load 0.98: every insert lands in a
 * table at its load limit, so cuckoo paths are long and some keys go to the
 * overflow stash; keys keep changing (delete one, insert another), values are
 * overwritten wherever they live, and everything is checked against the
 * reference. */
static void run_full_churn(uint32_t k, store_dtype_t dtype, uint64_t n, size_t ops, uint64_t seed,
                           uint64_t *max_stashed, uint64_t *rebuilds)
{
    struct rng r = {seed};
    struct ref m;
    ref_init(&m, k, dtype, 3 * n);
    store_t *s = make_store(k, dtype, 1, 0, 0.98);
    if (store_reserve_sub(s, 0, 0, n) != 0)
        fail_msg("store_reserve_sub(%llu) failed", (unsigned long long)n);
    store_stats_t st0, st;
    stats_of(s, &st0);
    for (uint64_t id = 0; id < n; id++)
        ref_upsert(s, &m, id, &r, (size_t)id);
    for (size_t op = 0; op < ops; op++) {
        uint64_t x = rng_next(&r), id = (x >> 8) % m.universe;
        switch (x % 8) {
        case 0: case 1: case 2: /* keep the size at n: delete when full, insert otherwise */
            if (m.size >= n)
                while (!m.present[id])
                    id = (id + 1) % m.universe;
            else
                while (m.present[id])
                    id = (id + 1) % m.universe;
            if (m.present[id])
                ref_delete(s, &m, id, op);
            else
                ref_upsert(s, &m, id, &r, op);
            break;
        case 3: /* overwrite a present key (stashed ones included) */
            while (!m.present[id])
                id = (id + 1) % m.universe;
            ref_upsert(s, &m, id, &r, op);
            break;
        case 4: ref_lookup_batch(s, &m, &r, (size_t)(x >> 40) % 100, op); break;
        default: ref_lookup(s, &m, id, op); break;
        }
        if ((op & 1023) == 0) {
            stats_of(s, &st);
            if (st.stashed > *max_stashed)
                *max_stashed = st.stashed;
        }
    }
    check_store_equals_ref(s, &m, "full-load churn");
    stats_of(s, &st);
    *rebuilds += st.rebuilds - st0.rebuilds;
    store_destroy(s);
    ref_free(&m);
}

static void test_full_load_churn(void **state)
{
    (void)state;
    static const struct { uint32_t k; store_dtype_t dtype; } kinds[] = {
        {1, STORE_DTYPE_F32}, {2, STORE_DTYPE_F16}, {4, STORE_DTYPE_F32}, {1, STORE_DTYPE_F16},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        uint64_t max_stashed = 0, rebuilds = 0;
        int tables = 0;
        for (uint64_t n = 200; n < 20000; n = n * 2 + 37, tables++)
            run_full_churn(kinds[i].k, kinds[i].dtype, n, scaled(20 * n), n * 13 + i,
                           &max_stashed, &rebuilds);
        print_message("    K=%u %s at max_load 0.98: %d tables, up to %llu keys stashed, "
                      "%llu rebuilds\n",
                      kinds[i].k, dtype_name(kinds[i].dtype), tables,
                      (unsigned long long)max_stashed, (unsigned long long)rebuilds);
    }
}

/* ---- main ------------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserved_full_table),
        cmocka_unit_test(test_full_load_churn),
    };
    return cmocka_run_group_tests(tests, setup_globals, NULL);
}
