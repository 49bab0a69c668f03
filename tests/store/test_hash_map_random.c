/*
 * test_hash_map_random.c — single-threaded tests of tl_hash_map
 * (store/tl_hash_map*.c): random sequences of upserts, deletes and lookups
 * against the reference map, and growth from a small table while the
 * contents stay equal to the reference.
 *
 * Shared helpers and the reference map: hash_map_testutil.h.  SIZES: see there.
 *
 * THREAD SAFETY: single-threaded; test_concurrent.c covers readers during
 * writes.
 */

#include "hash_map_testutil.h"

/* ---- (a) random operations against the reference ------------------------ */

struct random_cfg {
    uint32_t k;
    store_dtype_t dtype;
    uint32_t shards;
    uint64_t expected;
};

static void run_random(const struct random_cfg *cfg, size_t nops, uint64_t universe,
                       uint64_t seed)
{
    struct rng r = {seed};
    struct ref m;
    ref_init(&m, cfg->k, cfg->dtype, universe);
    store_t *s = make_store(cfg->k, cfg->dtype, cfg->shards, cfg->expected, 0);
    store_stats_t st0;
    stats_of(s, &st0);
    uint64_t peak = 0;
    size_t check_every = nops / 8 + 1;
    char where[128];

    for (size_t op = 0; op < nops; op++) {
        /* Three phases: grow to ~2/3 of the universe, shrink to ~1/5,
         * grow again (so deleted keys are re-inserted into used tables). */
        unsigned ins, del;
        if (op < nops * 2 / 5) {
            ins = 40; del = 60;
        } else if (op < nops * 3 / 5) {
            ins = 10; del = 50;
        } else {
            ins = 45; del = 60;
        }
        uint64_t x = rng_below(&r, 1000);
        uint64_t id = rng_below(&r, universe);
        if (x < ins * 10) {
            ref_upsert(s, &m, id, &r, op);
        } else if (x < del * 10) {
            if ((x & 15) == 0)
                id = universe + rng_below(&r, universe); /* never present */
            ref_delete(s, &m, id, op);
        } else if (x < 990) {
            if ((x & 7) == 0)
                id = universe + rng_below(&r, universe);
            ref_lookup(s, &m, id, op);
        } else {
            ref_lookup_batch(s, &m, &r, rng_below(&r, 130), op);
        }
        if (m.size > peak)
            peak = m.size;
        if (op % check_every == check_every - 1) {
            snprintf(where, sizeof where, "K=%u %s shards=%u after op %zu", cfg->k,
                     dtype_name(cfg->dtype), cfg->shards, op);
            check_store_equals_ref(s, &m, where);
        }
    }
    /* Every id, present or not, once more. */
    for (uint64_t id = 0; id < universe; id++)
        ref_lookup(s, &m, id, nops);
    snprintf(where, sizeof where, "K=%u %s shards=%u at the end", cfg->k, dtype_name(cfg->dtype),
             cfg->shards);
    check_store_equals_ref(s, &m, where);

    store_stats_t st;
    stats_of(s, &st);
    print_message("    K=%-2u %s shards=%-2u: %zu ops, %llu keys left, %llu rebuilds, %llu stashed\n",
                  cfg->k, dtype_name(cfg->dtype), cfg->shards, nops,
                  (unsigned long long)m.size, (unsigned long long)st.rebuilds,
                  (unsigned long long)st.stashed);
    if (peak > st0.slots && st.rebuilds == 0)
        fail_msg("%s: grew from %llu slots to %llu keys without a rebuild", where,
                 (unsigned long long)st0.slots, (unsigned long long)peak);
    store_destroy(s);
    ref_free(&m);
}

static void test_random_ops(void **state)
{
    (void)state;
    static const struct { uint32_t k; store_dtype_t dtype; } kinds[] = {
        {1, STORE_DTYPE_F32},
        {4, STORE_DTYPE_F32},
        {16, STORE_DTYPE_F16},
    };
    static const uint32_t shards[] = {1, 4, 16};
    uint64_t seed = 1;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        for (size_t j = 0; j < sizeof shards / sizeof shards[0]; j++) {
            struct random_cfg cfg = {kinds[i].k, kinds[i].dtype, shards[j], 0};
            run_random(&cfg, scaled(2000000), scaled(150000), seed++);
        }
    /* 4-byte fp16 values (K=2) and 2-byte ones (K=1) take other paths than
     * K=1 fp32 and wide values; one more store is pre-sized. */
    static const struct random_cfg more[] = {
        {2, STORE_DTYPE_F16, 4, 0},
        {1, STORE_DTYPE_F16, 4, 0},
        {2, STORE_DTYPE_F32, 8, 200000},
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        run_random(&more[i], scaled(1000000), scaled(150000), seed++);
}

/* Growth: from a tiny hint to 1M keys, then overwrite, delete, re-insert. */
static void run_growth(uint32_t k, store_dtype_t dtype, uint32_t shards, uint64_t expected,
                       double max_load, uint64_t n)
{
    struct rng r = {0xC0FFEE + n + shards};
    struct ref m;
    ref_init(&m, k, dtype, n);
    store_t *s = make_store(k, dtype, shards, expected, max_load);
    store_stats_t st0;
    stats_of(s, &st0);
    uint64_t prev_slots = st0.slots;
    for (uint64_t id = 0; id < n; id++) {
        ref_upsert(s, &m, id, &r, (size_t)id);
        if ((id & (id + 1)) == 0) { /* at powers of two: stats stay consistent */
            store_stats_t st;
            stats_of(s, &st);
            if (st.entries != id + 1 || store_count(s) != id + 1)
                fail_msg("growth: after %llu inserts stats.entries %llu, count %llu",
                         (unsigned long long)id + 1, (unsigned long long)st.entries,
                         (unsigned long long)store_count(s));
            if (st.slots < prev_slots)
                fail_msg("growth: slots shrank from %llu to %llu", (unsigned long long)prev_slots,
                         (unsigned long long)st.slots);
            prev_slots = st.slots;
        }
    }
    store_stats_t st;
    stats_of(s, &st);
    if (st.rebuilds == 0)
        fail_msg("growth: %llu keys inserted from expected_keys=%llu without a rebuild",
                 (unsigned long long)n, (unsigned long long)expected);
    double ml = max_load > 0 ? max_load : 0.95;
    /* The fill that triggers growth bounds the fill reached (one insert of
     * slack per sub-table, since growth may be checked before an insert). */
    if ((double)(st.entries - st.stashed) > ml * (double)st.slots + (double)st.subtables)
        fail_msg("growth: %llu entries (%llu stashed) in %llu slots exceeds max_load %.2f",
                 (unsigned long long)st.entries, (unsigned long long)st.stashed,
                 (unsigned long long)st.slots, ml);
    print_message("    growth K=%u %s shards=%u max_load=%.2f expected=%llu: %llu keys, %llu slots, "
                  "%llu sub-tables, %llu rebuilds, %llu stashed, %.1f B/key\n",
                  k, dtype_name(dtype), shards, ml, (unsigned long long)expected,
                  (unsigned long long)st.entries,
                  (unsigned long long)st.slots, (unsigned long long)st.subtables,
                  (unsigned long long)st.rebuilds, (unsigned long long)st.stashed,
                  (double)st.table_bytes / (double)st.entries);
    check_store_equals_ref(s, &m, "growth: after inserts");
    for (uint64_t id = 0; id < n; id++)
        ref_lookup(s, &m, id, (size_t)id);
    for (uint64_t id = 0; id < n; id += 2) /* overwrite half */
        ref_upsert(s, &m, id, &r, (size_t)id);
    for (uint64_t id = 0; id < n; id += 3) /* delete a third */
        ref_delete(s, &m, id, (size_t)id);
    check_store_equals_ref(s, &m, "growth: after overwrites and deletes");
    for (uint64_t id = 0; id < n; id += 6) /* re-insert some deleted */
        ref_upsert(s, &m, id, &r, (size_t)id);
    for (uint64_t id = 0; id < n; id++)
        ref_lookup(s, &m, id, (size_t)id);
    check_store_equals_ref(s, &m, "growth: after re-inserts");
    store_destroy(s);
    ref_free(&m);
}

static void test_growth(void **state)
{
    (void)state;
    run_growth(4, STORE_DTYPE_F32, 4, 100, 0, scaled(1000000) < 200000 ? 200000 : scaled(1000000));
    run_growth(1, STORE_DTYPE_F32, 1, 0, 0, scaled(300000));
    run_growth(3, STORE_DTYPE_F16, 16, 0, 0.5, scaled(300000));
    run_growth(2, STORE_DTYPE_F16, 2, 0, 0.98, scaled(300000));
    /* A hint just over the per-sub-table target gives two sub-tables per
     * shard; inserting past it grows each of them separately. */
    run_growth(1, STORE_DTYPE_F32, 1, 1100000, 0, 1500000);
}

/* ---- main ------------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_growth),
        cmocka_unit_test(test_random_ops),
    };
    return cmocka_run_group_tests(tests, setup_globals, NULL);
}
