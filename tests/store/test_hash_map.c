/*
 * test_hash_map.c — single-threaded tests of tl_hash_map (store/tl_hash_map*.c)
 * and of the fp16 conversions it stores values with.
 *
 * The main test runs a long random sequence of upserts, deletes and lookups
 * against the store and against a reference map kept next to it, and checks
 * every return value and every value the store hands back.  The reference
 * is deliberately dull so that it is obviously right:
 *
 *   key id  0 .. universe-1       key = id * KEY_MUL  (KEY_MUL odd, so this is
 *                                  a bijection on uint64 and id = key * KEY_INV)
 *   present[id]   1 when the key is in the map
 *   vals[id*K ..] the K floats a lookup must return (already rounded to fp16
 *                 when the store keeps fp16)
 *
 * Keys outside the universe (id >= universe) are never inserted, so they
 * double as "certainly absent" probes, and store_foreach output maps back to
 * ids with one multiplication.
 *
 * The other tests cover batch/single lookup agreement, adversarial key sets
 * (sequential, high-bit-only, multiples of 2^32, 0 and UINT64_MAX) and
 * adversarial insertion orders (another store's iteration order), exact
 * reservation (no growth up to the reserved count, growth after), fp16
 * conversion (known values, an exhaustive round trip of all 65536 halves and
 * random floats against an independent reference rounding), option checking
 * and the store_internal.h bulk/raw entry points.
 *
 * SIZES: TL_TEST_SCALE (a positive float, default 1, 0.25 under ASan) scales
 * the operation counts and key counts so that the sanitizer build stays well
 * under a minute.
 *
 * THREAD SAFETY: single-threaded; test_concurrent.c covers readers during
 * writes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "store/store_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

#define KEY_MUL 0x9E3779B97F4A7C15ull /* odd: key_of() is a bijection */

static double g_scale = 1.0; /* TL_TEST_SCALE */
static uint64_t g_key_inv;   /* KEY_MUL^-1 mod 2^64 */

/* ---- small helpers ------------------------------------------------------ */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

struct rng {
    uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
    r->s += 0x9E3779B97F4A7C15ull;
    return mix64(r->s);
}

/* Uniform in [0, n); n > 0.  The modulo bias is irrelevant here. */
static uint64_t rng_below(struct rng *r, uint64_t n)
{
    return rng_next(r) % n;
}

static size_t scaled(size_t n)
{
    double v = (double)n * g_scale;
    return v < 1.0 ? 1 : (size_t)v;
}

static uint64_t key_of(uint64_t id)
{
    return id * KEY_MUL;
}

static uint64_t id_of(uint64_t key)
{
    return key * g_key_inv;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL)
        fail_msg("out of memory (%zu x %zu)", n, size);
    return p;
}

static store_t *make_seeded_store(uint32_t k, store_dtype_t dtype, uint32_t shards,
                                  uint64_t expected, double max_load, uint64_t seed)
{
    store_options_t opt = {
        .value_floats = k,
        .dtype = dtype,
        .shards = shards,
        .expected_keys = expected,
        .max_load = max_load,
        .hash_seed = seed,
    };
    store_t *s = NULL;
    char why[256] = "";
    if (store_options_check(&opt, why, sizeof why) != 0)
        fail_msg("store_options_check refused good options: %s", why);
    int rc = store_create(&opt, &s);
    if (rc != 0 || s == NULL)
        fail_msg("store_create(K=%u, dtype=%d, shards=%u, expected=%llu) = %d", k, (int)dtype,
                 shards, (unsigned long long)expected, rc);
    if (seed != 0 && store_hash_seed(s) != seed)
        fail_msg("store_hash_seed is %#llx, created with %#llx",
                 (unsigned long long)store_hash_seed(s), (unsigned long long)seed);
    if (store_hash_seed(s) == 0)
        fail_msg("store_hash_seed is 0");
    return s;
}

static store_t *make_store(uint32_t k, store_dtype_t dtype, uint32_t shards, uint64_t expected,
                           double max_load)
{
    return make_seeded_store(k, dtype, shards, expected, max_load, 0);
}

static float f16_round(float f)
{
    return store_f16_to_f32(store_f32_to_f16(f));
}

static const char *dtype_name(store_dtype_t d)
{
    return d == STORE_DTYPE_F16 ? "f16" : "f32";
}

/* A random value: multiples of 2^-20 in [-8, 8), and now and then one far
 * outside that (large, tiny, zero) so fp16 rounding and subnormals show up. */
static void random_value(struct rng *r, uint32_t k, store_dtype_t dtype, float *in, float *expect)
{
    for (uint32_t j = 0; j < k; j++) {
        uint64_t x = rng_next(r);
        float f;
        switch (x & 15) {
        case 0: f = ldexpf((float)(int32_t)((x >> 8) & 0xFFFFFF) - 8388608.0f, -(int)((x >> 40) % 60)); break;
        case 1: f = 0.0f; break;
        default: f = (float)((int32_t)((x >> 8) & 0xFFFFFF) - 8388608) * 0x1p-20f; break;
        }
        in[j] = f;
        expect[j] = dtype == STORE_DTYPE_F16 ? f16_round(f) : f;
    }
}

/* Bitwise equality (so -0 vs +0 or a changed NaN would show). */
static bool same_floats(const float *a, const float *b, uint32_t k)
{
    return memcmp(a, b, (size_t)k * sizeof(float)) == 0;
}

static bool all_zero(const float *a, uint32_t k)
{
    for (uint32_t j = 0; j < k; j++)
        if (a[j] != 0.0f)
            return false;
    return true;
}

static void stats_of(const store_t *s, store_stats_t *st)
{
    memset(st, 0xA5, sizeof *st);
    store_stats(s, st);
}

/* ---- the reference map -------------------------------------------------- */

struct ref {
    uint32_t k;
    store_dtype_t dtype;
    uint64_t universe; /* ids 0..universe-1 may be present */
    uint64_t size;     /* number of present ids */
    uint8_t *present;  /* [universe] */
    float *vals;       /* [universe * k]: what a lookup must return */
};

static void ref_init(struct ref *m, uint32_t k, store_dtype_t dtype, uint64_t universe)
{
    m->k = k;
    m->dtype = dtype;
    m->universe = universe;
    m->size = 0;
    m->present = xcalloc(universe, 1);
    m->vals = xcalloc(universe * k, sizeof(float));
}

static void ref_free(struct ref *m)
{
    free(m->present);
    free(m->vals);
}

struct visit_ctx {
    const struct ref *m;
    const store_t *s;
    uint32_t shard;
    uint8_t *seen;     /* [universe] */
    uint64_t visited;  /* entries seen in this shard */
    char err[256];
};

static int visit_check(void *vctx, uint64_t key, const float *value)
{
    struct visit_ctx *c = vctx;
    uint64_t id = id_of(key);
    if (id >= c->m->universe || !c->m->present[id]) {
        snprintf(c->err, sizeof c->err, "foreach gave key %#llx that is not in the map",
                 (unsigned long long)key);
        return -1;
    }
    if (c->seen[id]) {
        snprintf(c->err, sizeof c->err, "foreach gave key %#llx twice", (unsigned long long)key);
        return -1;
    }
    if (store_shard_of(c->s, key) != c->shard) {
        snprintf(c->err, sizeof c->err, "foreach(shard %u) gave key %#llx of shard %u", c->shard,
                 (unsigned long long)key, store_shard_of(c->s, key));
        return -1;
    }
    if (!same_floats(value, c->m->vals + id * c->m->k, c->m->k)) {
        snprintf(c->err, sizeof c->err, "foreach gave key %#llx value[0] %a, expected %a",
                 (unsigned long long)key, (double)value[0], (double)c->m->vals[id * c->m->k]);
        return -1;
    }
    c->seen[id] = 1;
    c->visited++;
    return 0;
}

/* The whole store equals the reference: counts, stats and a full foreach. */
static void check_store_equals_ref(const store_t *s, const struct ref *m, const char *where)
{
    if (store_count(s) != m->size)
        fail_msg("%s: store_count %llu, reference %llu", where,
                 (unsigned long long)store_count(s), (unsigned long long)m->size);
    store_stats_t st;
    stats_of(s, &st);
    if (st.entries != m->size)
        fail_msg("%s: stats.entries %llu, reference %llu", where, (unsigned long long)st.entries,
                 (unsigned long long)m->size);
    if (st.stashed > st.entries || st.entries - st.stashed > st.slots)
        fail_msg("%s: stats: %llu entries (%llu stashed) in %llu slots", where,
                 (unsigned long long)st.entries, (unsigned long long)st.stashed,
                 (unsigned long long)st.slots);
    if (st.subtables != (uint64_t)store_shards(s) * store_subs_per_shard(s))
        fail_msg("%s: stats.subtables %llu != %u shards x %u", where,
                 (unsigned long long)st.subtables, store_shards(s), store_subs_per_shard(s));

    struct visit_ctx c = {.m = m, .s = s, .seen = xcalloc(m->universe, 1)};
    uint64_t total = 0, shard_sum = 0;
    for (uint32_t sh = 0; sh < store_shards(s); sh++) {
        c.shard = sh;
        c.visited = 0;
        int rc = store_foreach(s, sh, visit_check, &c);
        if (rc != 0) {
            free(c.seen);
            fail_msg("%s: shard %u: %s (foreach returned %d)", where, sh,
                     c.err[0] ? c.err : "foreach failed", rc);
        }
        if (store_shard_count(s, sh) != c.visited) {
            free(c.seen);
            fail_msg("%s: shard %u: store_shard_count %llu, foreach visited %llu", where, sh,
                     (unsigned long long)store_shard_count(s, sh), (unsigned long long)c.visited);
        }
        total += c.visited;
        shard_sum += store_shard_count(s, sh);
    }
    free(c.seen);
    if (total != m->size || shard_sum != m->size)
        fail_msg("%s: foreach visited %llu, shard counts sum to %llu, reference has %llu", where,
                 (unsigned long long)total, (unsigned long long)shard_sum,
                 (unsigned long long)m->size);
}

static void ref_upsert(store_t *s, struct ref *m, uint64_t id, struct rng *r, size_t op)
{
    float in[STORE_MAX_VALUE_FLOATS], expect[STORE_MAX_VALUE_FLOATS];
    random_value(r, m->k, m->dtype, in, expect);
    uint64_t key = key_of(id);
    int rc = store_upsert(s, key, in);
    int want = m->present[id] ? 0 : 1;
    if (rc != want)
        fail_msg("op %zu: upsert(%#llx) returned %d, expected %d (%s)", op,
                 (unsigned long long)key, rc, want, want ? "new key" : "existing key");
    if (!m->present[id])
        m->size++;
    m->present[id] = 1;
    memcpy(m->vals + id * m->k, expect, m->k * sizeof(float));
}

static void ref_delete(store_t *s, struct ref *m, uint64_t id, size_t op)
{
    uint64_t key = key_of(id);
    int rc = store_delete(s, key);
    int want = id < m->universe && m->present[id] ? 1 : 0;
    if (rc != want)
        fail_msg("op %zu: delete(%#llx) returned %d, expected %d", op, (unsigned long long)key, rc,
                 want);
    if (want) {
        m->present[id] = 0;
        m->size--;
    }
}

static void ref_lookup(const store_t *s, const struct ref *m, uint64_t id, size_t op)
{
    float out[STORE_MAX_VALUE_FLOATS + 1];
    for (uint32_t j = 0; j <= m->k; j++)
        out[j] = -1234.5f;
    uint64_t key = key_of(id);
    int rc = store_lookup(s, key, out);
    bool want = id < m->universe && m->present[id];
    if (rc != (want ? 1 : 0))
        fail_msg("op %zu: lookup(%#llx) returned %d, key is %s", op, (unsigned long long)key, rc,
                 want ? "present" : "absent");
    if (want && !same_floats(out, m->vals + id * m->k, m->k))
        fail_msg("op %zu: lookup(%#llx) value[0] %a, expected %a", op, (unsigned long long)key,
                 (double)out[0], (double)m->vals[id * m->k]);
    if (out[m->k] != -1234.5f)
        fail_msg("op %zu: lookup(%#llx) wrote past K floats", op, (unsigned long long)key);
}

/* Batch of n random ids (present, absent-in-universe, outside universe,
 * duplicates) checked against the reference. */
static void ref_lookup_batch(const store_t *s, const struct ref *m, struct rng *r, size_t n,
                             size_t op)
{
    uint64_t *ids = xcalloc(n, sizeof *ids);
    uint64_t *keys = xcalloc(n, sizeof *keys);
    float *out = xcalloc(n * m->k + 1, sizeof *out);
    uint8_t *found = xcalloc(n + 1, 1);
    for (size_t i = 0; i < n; i++) {
        uint64_t x = rng_next(r);
        if (i > 0 && (x & 15) == 0)
            ids[i] = ids[x % i]; /* duplicate */
        else if ((x & 15) == 1)
            ids[i] = m->universe + (x >> 20) % 1000000; /* never inserted */
        else
            ids[i] = (x >> 8) % m->universe;
        keys[i] = key_of(ids[i]);
    }
    for (size_t i = 0; i <= n * m->k; i++)
        out[i] = -1234.5f;
    memset(found, 0xAA, n + 1);
    size_t got = store_lookup_batch(s, keys, n, out, found);
    size_t want = 0;
    for (size_t i = 0; i < n; i++) {
        bool p = ids[i] < m->universe && m->present[ids[i]];
        want += p;
        if (found[i] != p)
            fail_msg("op %zu: batch[%zu/%zu] key %#llx found=%u, expected %d", op, i, n,
                     (unsigned long long)keys[i], found[i], p);
        if (p ? !same_floats(out + i * m->k, m->vals + ids[i] * m->k, m->k)
              : !all_zero(out + i * m->k, m->k))
            fail_msg("op %zu: batch[%zu/%zu] key %#llx (%s) wrong value, [0] = %a", op, i, n,
                     (unsigned long long)keys[i], p ? "present" : "absent",
                     (double)out[i * m->k]);
    }
    if (got != want)
        fail_msg("op %zu: batch of %zu returned %zu, expected %zu found", op, n, got, want);
    if (out[n * m->k] != -1234.5f || found[n] != 0xAA)
        fail_msg("op %zu: batch of %zu wrote past its end", op, n);
    free(ids);
    free(keys);
    free(out);
    free(found);
}

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

/* ---- (b) batch and single lookups agree --------------------------------- */

static void check_batch_vs_single(const store_t *s, const uint64_t *keys, size_t n)
{
    uint32_t k = store_value_floats(s);
    float *out = xcalloc(n * k + 4, sizeof *out);
    float *out2 = xcalloc(n * k + 4, sizeof *out2);
    uint8_t *found = xcalloc(n + 4, 1);
    for (size_t i = 0; i < n * k + 4; i++)
        out[i] = out2[i] = -1234.5f;
    memset(found, 0xAA, n + 4);

    size_t got = store_lookup_batch(s, keys, n, out, found);
    size_t got2 = store_lookup_batch(s, keys, n, out2, NULL);
    size_t singles = 0;
    for (size_t i = 0; i < n; i++) {
        float one[STORE_MAX_VALUE_FLOATS];
        int rc = store_lookup(s, keys[i], one);
        if (rc != 0 && rc != 1)
            fail_msg("lookup(%#llx) returned %d", (unsigned long long)keys[i], rc);
        singles += (size_t)rc;
        if (found[i] != rc)
            fail_msg("batch of %zu: key %zu (%#llx) found=%u, store_lookup says %d", n, i,
                     (unsigned long long)keys[i], found[i], rc);
        if (rc ? !same_floats(out + i * k, one, k) : !all_zero(out + i * k, k))
            fail_msg("batch of %zu: key %zu (%#llx) value differs from store_lookup (%s)", n, i,
                     (unsigned long long)keys[i], rc ? "present" : "absent: not zeros");
    }
    if (got != singles || got2 != singles)
        fail_msg("batch of %zu returned %zu (%zu with found=NULL), single lookups found %zu", n,
                 got, got2, singles);
    if (n && memcmp(out, out2, n * k * sizeof *out) != 0)
        fail_msg("batch of %zu: values differ with found=NULL", n);
    for (size_t i = n * k; i < n * k + 4; i++)
        if (out[i] != -1234.5f || out2[i] != -1234.5f)
            fail_msg("batch of %zu wrote past out[n*K]", n);
    for (size_t i = n; i < n + 4; i++)
        if (found[i] != 0xAA)
            fail_msg("batch of %zu wrote past found[n]", n);
    free(out);
    free(out2);
    free(found);
}

static void run_batch(uint32_t k, store_dtype_t dtype, uint32_t shards)
{
    struct rng r = {k * 31 + shards};
    const uint64_t universe = 20000;
    struct ref m;
    ref_init(&m, k, dtype, universe);
    store_t *s = make_store(k, dtype, shards, 0, 0);
    for (uint64_t id = 0; id < universe; id++)
        if (rng_below(&r, 2))
            ref_upsert(s, &m, id, &r, 0);
    ref_upsert(s, &m, 0, &r, 0); /* key 0 present */

    static const size_t sizes[] = {0, 1, 7, 63, 64, 65, 1000, 4096};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        uint64_t *keys = xcalloc(n, sizeof *keys);
        for (int round = 0; round < 4; round++) {
            for (size_t i = 0; i < n; i++) {
                uint64_t x = rng_next(&r);
                switch (round) {
                case 0: keys[i] = key_of(x % universe); break;            /* mixed */
                case 1: keys[i] = key_of(universe + x % universe); break; /* all absent */
                case 2: keys[i] = key_of(2 * (x % (universe / 2))); break;
                default:                                                  /* with duplicates */
                    keys[i] = i && (x & 3) == 0 ? keys[x % i]
                              : (x & 3) == 1    ? UINT64_MAX
                                                : key_of(x % universe);
                    break;
                }
            }
            check_batch_vs_single(s, keys, n);
        }
        /* all present */
        size_t filled = 0;
        for (uint64_t id = 0; id < universe && filled < n; id++)
            if (m.present[id])
                keys[filled++] = key_of(id);
        check_batch_vs_single(s, keys, filled);
        free(keys);
    }
    check_store_equals_ref(s, &m, "batch");
    store_destroy(s);
    ref_free(&m);
}

static void test_batch_vs_single(void **state)
{
    (void)state;
    run_batch(1, STORE_DTYPE_F32, 1);
    run_batch(4, STORE_DTYPE_F32, 4);
    run_batch(16, STORE_DTYPE_F16, 16);
    run_batch(64, STORE_DTYPE_F32, 2);
}

/* store_upsert_batch against store_upsert one key at a time, on twin
 * stores that start small (inserts rebuild sub-tables in the middle of a
 * batch, under keys already located), with keys repeated inside a batch
 * (the last value wins) and batches shorter and longer than the pipeline. */
static void run_upsert_batch(uint32_t k, store_dtype_t dtype)
{
    store_t *a = make_store(k, dtype, 4, 16, 0), *b = make_store(k, dtype, 4, 16, 0);
    const size_t universe = scaled(20000), rounds = scaled(600);
    uint64_t *keys = xcalloc(1000, sizeof *keys);
    float *vals = xcalloc(1000 * (size_t)k, sizeof *vals);
    uint64_t rng = 99, added_b = 0;
    for (size_t r = 0; r < rounds; r++) {
        size_t n = (size_t)(mix64(rng++) % (r % 3 == 0 ? 20 : 1000)); /* 0..999 */
        for (size_t i = 0; i < n; i++) {
            /* a repeat of an earlier key of this batch now and then */
            keys[i] = i > 0 && mix64(rng) % 8 == 0 ? keys[mix64(rng + 1) % i]
                                                    : key_of(mix64(rng + 2) % universe);
            rng += 3;
            for (uint32_t j = 0; j < k; j++)
                vals[i * k + j] = (float)(int32_t)(mix64(rng++) & 0x3FF) - 512.0f;
        }
        int added = 0;
        for (size_t i = 0; i < n; i++) {
            int rc = store_upsert(a, keys[i], vals + i * k);
            assert_true(rc == 0 || rc == 1);
            added += rc;
        }
        int rb = store_upsert_batch(b, keys, vals, n);
        if (rb != added)
            fail_msg("round %zu (%zu keys, K=%u %s): store_upsert_batch added %d, one at a time "
                     "%d", r, n, k, dtype_name(dtype), rb, added);
        added_b += (uint64_t)rb;
    }
    assert_int_equal(store_count(a), store_count(b));
    assert_int_equal(store_count(b), added_b);
    float va[64], vb[64];
    for (size_t id = 0; id < universe + 100; id++) {
        int fa = store_lookup(a, key_of(id), va), fb = store_lookup(b, key_of(id), vb);
        if (fa != fb || (fa && memcmp(va, vb, k * sizeof *va) != 0))
            fail_msg("id %zu (K=%u %s): one at a time %s, batch %s or another value", id, k,
                     dtype_name(dtype), fa ? "present" : "absent", fb ? "present" : "absent");
    }
    store_destroy(a);
    store_destroy(b);
    free(keys);
    free(vals);
}

static void test_upsert_batch(void **state)
{
    (void)state;
    run_upsert_batch(1, STORE_DTYPE_F32); /* values inline in the bucket */
    run_upsert_batch(3, STORE_DTYPE_F32);
    run_upsert_batch(5, STORE_DTYPE_F16);
}

/* store_locate_batch: a pointer for every present key (the same one for a
 * key repeated), NULL for an absent one, the values store_lookup reads, and
 * a write through it is what the next lookup reads; an fp16 store refused. */
static void run_locate_batch(uint32_t k)
{
    store_t *s = make_store(k, STORE_DTYPE_F32, 4, 16, 0);
    const size_t universe = scaled(20000), n = 700;
    float v[64], w[64];
    for (size_t id = 0; id < universe; id += 2) { /* the even ids present */
        for (uint32_t j = 0; j < k; j++)
            v[j] = (float)(id * 7 + j);
        assert_true(store_upsert(s, key_of(id), v) >= 0);
    }
    uint64_t *keys = xcalloc(n, sizeof *keys), rng = 5;
    float **slots = xcalloc(n, sizeof *slots);
    size_t *ids = xcalloc(n, sizeof *ids);
    for (int round = 0; round < 20; round++) {
        int want = 0;
        for (size_t i = 0; i < n; i++) {
            ids[i] = i > 0 && mix64(rng) % 8 == 0 ? ids[mix64(rng + 1) % i]
                                                   : mix64(rng + 2) % (universe + 50);
            rng += 3;
            keys[i] = key_of(ids[i]);
            want += store_lookup(s, keys[i], v);
        }
        assert_int_equal(store_locate_batch(s, keys, n, slots), want);
        for (size_t i = 0; i < n; i++) {
            int present = store_lookup(s, keys[i], v);
            if (present != (slots[i] != NULL))
                fail_msg("id %zu (K=%u): lookup says %s, locate %s", ids[i], k,
                         present ? "present" : "absent", slots[i] ? "present" : "absent");
            if (!present)
                continue;
            assert_memory_equal(slots[i], v, k * sizeof *v);
            for (size_t e = 0; e < i; e++)
                if (keys[e] == keys[i])
                    assert_ptr_equal(slots[e], slots[i]);
        }
        for (size_t i = 0; i < n; i++) /* in place: each present key's values moved by 1 */
            if (slots[i]) {
                bool first = true;
                for (size_t e = 0; e < i && first; e++)
                    first = keys[e] != keys[i];
                if (!first)
                    continue;
                store_lookup(s, keys[i], v);
                for (uint32_t j = 0; j < k; j++)
                    slots[i][j] += 1.0f;
                store_lookup(s, keys[i], w);
                for (uint32_t j = 0; j < k; j++)
                    assert_true(w[j] == v[j] + 1.0f);
            }
        for (size_t i = 0; i < 50; i++) { /* inserts between rounds: the pointers are redone */
            for (uint32_t j = 0; j < k; j++)
                v[j] = (float)j;
            assert_true(store_upsert(s, key_of(universe + 100 + (size_t)round * 50 + i), v) >= 0);
        }
    }
    store_destroy(s);
    store_t *h = make_store(k, STORE_DTYPE_F16, 4, 16, 0);
    assert_int_equal(store_locate_batch(h, keys, n, slots), -EINVAL);
    store_destroy(h);
    free(keys);
    free(slots);
    free(ids);
}

static void test_locate_batch(void **state)
{
    (void)state;
    run_locate_batch(1); /* values inline in the bucket */
    run_locate_batch(3);
}

/* store_upsert_relaxed against store_upsert on twin stores (inserts that
 * rebuild sub-tables, overwrites, inline and out-of-line values), an fp16
 * store refused; then a reader beside a relaxed writer: every float it
 * reads is one the writer wrote whole (rows of all-equal integers: a row
 * may mix two of them, a float never). */
struct relaxed_run {
    store_t *s;
    uint32_t k;
    atomic_bool stop;
    int bad;
};

static void *relaxed_reader(void *arg)
{
    struct relaxed_run *r = arg;
    float v[64];
    while (!atomic_load(&r->stop))
        for (uint64_t id = 0; id < 64; id++)
            if (store_lookup(r->s, key_of(id), v))
                for (uint32_t j = 0; j < r->k; j++)
                    if (v[j] != floorf(v[j]) || v[j] < 0 || v[j] > 1e6f)
                        r->bad++;
    return NULL;
}

static void run_upsert_relaxed(uint32_t k)
{
    store_t *a = make_store(k, STORE_DTYPE_F32, 4, 16, 0), *b = make_store(k, STORE_DTYPE_F32, 4, 16, 0);
    float v[64], va[64], vb[64];
    uint64_t rng = 7;
    const size_t universe = scaled(20000);
    for (size_t i = 0; i < scaled(60000); i++) {
        size_t id = mix64(rng++) % universe;
        for (uint32_t j = 0; j < k; j++)
            v[j] = (float)(int32_t)(mix64(rng++) & 0x3FF) - 512.0f;
        int ra = store_upsert(a, key_of(id), v), rb = store_upsert_relaxed(b, key_of(id), v);
        if (ra != rb)
            fail_msg("K=%u key %zu: store_upsert %d, relaxed %d", k, id, ra, rb);
    }
    assert_int_equal(store_count(a), store_count(b));
    for (size_t id = 0; id < universe; id++) {
        int fa = store_lookup(a, key_of(id), va), fb = store_lookup(b, key_of(id), vb);
        assert_int_equal(fa, fb);
        if (fa)
            assert_memory_equal(va, vb, k * sizeof *va);
    }
    store_destroy(a);
    store_t *h = make_store(k, STORE_DTYPE_F16, 4, 16, 0);
    assert_int_equal(store_upsert_relaxed(h, key_of(1), v), -EINVAL);
    store_destroy(h);

    for (uint32_t j = 0; j < k; j++)
        v[j] = 0;
    for (uint64_t id = 0; id < 64; id++) /* the reader's keys, present before it starts */
        assert_true(store_upsert_relaxed(b, key_of(id), v) >= 0);
    struct relaxed_run r = {.s = b, .k = k, .bad = 0};
    atomic_init(&r.stop, false);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, relaxed_reader, &r), 0);
    for (uint32_t c = 0; c < 20000; c++) {
        for (uint32_t j = 0; j < k; j++)
            v[j] = (float)c;
        assert_int_equal(store_upsert_relaxed(b, key_of(c % 64), v), 0); /* present: overwrites */
    }
    atomic_store(&r.stop, true);
    pthread_join(th, NULL);
    assert_int_equal(r.bad, 0);
    store_destroy(b);
}

/* store_overwrite_batch against store_upsert of the present keys alone,
 * present and absent keys mixed in every batch (an absent key must neither
 * be written nor disturb the pipeline of the keys after it). */
static void run_overwrite_batch(uint32_t k, store_dtype_t dtype)
{
    store_t *a = make_store(k, dtype, 4, 16, 0), *b = make_store(k, dtype, 4, 16, 0);
    const size_t universe = scaled(20000), n = 500;
    float v[64], va[64], vb[64];
    for (size_t id = 0; id < universe; id += 3) { /* a third present */
        for (uint32_t j = 0; j < k; j++)
            v[j] = (float)j;
        assert_true(store_upsert(a, key_of(id), v) == 1 && store_upsert(b, key_of(id), v) == 1);
    }
    uint64_t *keys = xcalloc(n, sizeof *keys), rng = 11;
    float *vals = xcalloc(n * (size_t)k, sizeof *vals);
    for (int round = 0; round < 30; round++) {
        int want = 0;
        for (size_t i = 0; i < n; i++) {
            size_t id = mix64(rng++) % universe;
            keys[i] = key_of(id);
            for (uint32_t j = 0; j < k; j++)
                vals[i * k + j] = (float)(int32_t)(mix64(rng++) & 0x3FF) - 512.0f;
            if (id % 3 == 0) {
                assert_int_equal(store_upsert(a, keys[i], vals + i * k), 0);
                want++;
            }
        }
        uint8_t written[500];
        assert_int_equal(store_overwrite_batch(b, keys, vals, n, written), want);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(written[i], store_lookup(a, keys[i], va));
    }
    assert_int_equal(store_count(a), store_count(b));
    for (size_t id = 0; id < universe; id++) {
        int fa = store_lookup(a, key_of(id), va), fb = store_lookup(b, key_of(id), vb);
        assert_int_equal(fa, fb);
        if (fa && memcmp(va, vb, k * sizeof *va) != 0)
            fail_msg("id %zu (K=%u %s): store_overwrite_batch wrote another value", id, k,
                     dtype_name(dtype));
    }
    store_destroy(a);
    store_destroy(b);
    free(keys);
    free(vals);
}

static void test_overwrite_batch(void **state)
{
    (void)state;
    run_overwrite_batch(1, STORE_DTYPE_F32);
    run_overwrite_batch(3, STORE_DTYPE_F32);
    run_overwrite_batch(5, STORE_DTYPE_F16);
}

static void test_upsert_relaxed(void **state)
{
    (void)state;
    run_upsert_relaxed(1); /* inline: one word */
    run_upsert_relaxed(3);
    run_upsert_relaxed(17);
}

/* ---- (c) adversarial key sets -------------------------------------------- */

static void value_for_key(uint64_t key, uint32_t k, float *v)
{
    uint64_t h = mix64(key ^ 0x5555);
    for (uint32_t j = 0; j < k; j++)
        v[j] = (float)(int32_t)((h >> (j & 31)) & 0x7FF) - 1024.0f; /* exact in fp16 too */
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

struct set_visit {
    const uint64_t *sorted; /* the keys, sorted */
    size_t n;
    const uint8_t *in;      /* [n]: which of them must be present */
    uint8_t *seen;          /* [n] */
    uint32_t k;
    uint64_t visited;
    char err[200];
};

static int visit_set(void *vctx, uint64_t key, const float *value)
{
    struct set_visit *c = vctx;
    const uint64_t *p = bsearch(&key, c->sorted, c->n, sizeof key, cmp_u64);
    float want[STORE_MAX_VALUE_FLOATS];
    if (p == NULL || !c->in[p - c->sorted]) {
        snprintf(c->err, sizeof c->err, "foreach gave key %#llx that is not in the store",
                 (unsigned long long)key);
        return 1;
    }
    size_t i = (size_t)(p - c->sorted);
    if (c->seen[i]++) {
        snprintf(c->err, sizeof c->err, "foreach gave key %#llx twice", (unsigned long long)key);
        return 1;
    }
    value_for_key(key, c->k, want);
    if (!same_floats(value, want, c->k)) {
        snprintf(c->err, sizeof c->err, "foreach gave key %#llx a wrong value",
                 (unsigned long long)key);
        return 1;
    }
    c->visited++;
    return 0;
}

/* Inserts keys[0..n-1] (distinct), checks them all, deletes every other
 * one, checks, re-inserts, checks. */
static void run_key_set(const char *name, const uint64_t *keys, size_t n, uint32_t shards)
{
    const uint32_t k = 2;
    store_t *s = make_store(k, STORE_DTYPE_F32, shards, 0, 0);
    float v[STORE_MAX_VALUE_FLOATS], out[STORE_MAX_VALUE_FLOATS];
    uint64_t *sorted = xcalloc(n, sizeof *sorted);
    uint8_t *in = xcalloc(n, 1);
    memcpy(sorted, keys, n * sizeof *keys);
    qsort(sorted, n, sizeof *sorted, cmp_u64);
    for (size_t i = 1; i < n; i++)
        if (sorted[i] == sorted[i - 1])
            fail_msg("%s: test bug: duplicate key %#llx", name, (unsigned long long)sorted[i]);

    /* Nothing is found in the empty store, including 0 and UINT64_MAX,
     * which a table might use as empty/deleted markers. */
    for (size_t i = 0; i < n; i++)
        if (store_lookup(s, keys[i], out) != 0)
            fail_msg("%s: key %#llx found in an empty store", name, (unsigned long long)keys[i]);

    for (int pass = 0; pass < 3; pass++) {
        for (size_t i = 0; i < n; i++) {
            bool want_in = pass != 1 || (i & 1) == 0;
            size_t si = (size_t)((const uint64_t *)bsearch(&keys[i], sorted, n, sizeof *sorted,
                                                          cmp_u64) - sorted);
            value_for_key(keys[i], k, v);
            if (want_in && !in[si]) {
                if (store_lookup(s, keys[i], out) != 0) /* 0/~0 as empty markers? */
                    fail_msg("%s pass %d: key %#llx found before it was inserted", name, pass,
                             (unsigned long long)keys[i]);
                int rc = store_upsert(s, keys[i], v);
                if (rc != 1)
                    fail_msg("%s pass %d: upsert(%#llx) of a new key returned %d", name, pass,
                             (unsigned long long)keys[i], rc);
            } else if (!want_in && in[si]) {
                int rc = store_delete(s, keys[i]);
                if (rc != 1)
                    fail_msg("%s pass %d: delete(%#llx) of a present key returned %d", name, pass,
                             (unsigned long long)keys[i], rc);
                rc = store_delete(s, keys[i]);
                if (rc != 0)
                    fail_msg("%s pass %d: second delete(%#llx) returned %d", name, pass,
                             (unsigned long long)keys[i], rc);
            }
            in[si] = want_in;
        }
        uint64_t present = 0;
        for (size_t i = 0; i < n; i++) {
            size_t si = (size_t)((const uint64_t *)bsearch(&keys[i], sorted, n, sizeof *sorted,
                                                          cmp_u64) - sorted);
            present += in[si];
            int rc = store_lookup(s, keys[i], out);
            if (rc != in[si])
                fail_msg("%s pass %d: lookup(%#llx) returned %d, expected %d", name, pass,
                         (unsigned long long)keys[i], rc, in[si]);
            value_for_key(keys[i], k, v);
            if (rc == 1 && !same_floats(out, v, k))
                fail_msg("%s pass %d: lookup(%#llx) returned a wrong value", name, pass,
                         (unsigned long long)keys[i]);
        }
        if (store_count(s) != present)
            fail_msg("%s pass %d: store_count %llu, expected %llu", name, pass,
                     (unsigned long long)store_count(s), (unsigned long long)present);
        struct set_visit c = {.sorted = sorted, .n = n, .in = in, .k = k,
                              .seen = xcalloc(n, 1)};
        for (uint32_t sh = 0; sh < shards; sh++) {
            int rc = store_foreach(s, sh, visit_set, &c);
            if (rc != 0) {
                free(c.seen);
                fail_msg("%s pass %d shard %u: %s", name, pass, sh, c.err);
            }
        }
        free(c.seen);
        if (c.visited != present)
            fail_msg("%s pass %d: foreach visited %llu, expected %llu", name, pass,
                     (unsigned long long)c.visited, (unsigned long long)present);
        /* Overwrite everything present: still one entry per key. */
        if (pass == 2)
            for (size_t i = 0; i < n; i++) {
                value_for_key(keys[i], k, v);
                int rc = store_upsert(s, keys[i], v);
                if (rc != 0)
                    fail_msg("%s: upsert(%#llx) of a present key returned %d", name,
                             (unsigned long long)keys[i], rc);
            }
        if (pass == 2 && store_count(s) != n)
            fail_msg("%s: count %llu after overwriting %zu keys", name,
                     (unsigned long long)store_count(s), n);
    }
    free(sorted);
    free(in);
    store_destroy(s);
}

static void test_adversarial_keys(void **state)
{
    (void)state;
    size_t n = scaled(200000);
    if (n > (1u << 20))
        n = 1u << 20;
    if (n < 1000)
        n = 1000;
    uint64_t *keys = xcalloc(n, sizeof *keys);
    static const uint32_t shard_counts[] = {1, 16};

    for (size_t si = 0; si < 2; si++) {
        uint32_t sh = shard_counts[si];
        for (size_t i = 0; i < n; i++)
            keys[i] = i; /* 0, 1, 2, ... */
        run_key_set("sequential", keys, n, sh);
        for (size_t i = 0; i < n; i++)
            keys[i] = UINT64_MAX - i; /* ..., UINT64_MAX-1, UINT64_MAX */
        run_key_set("sequential down from UINT64_MAX", keys, n, sh);
        for (size_t i = 0; i < n; i++) /* differ only in the top 20 bits */
            keys[i] = ((uint64_t)i << 44) | 0x00000ABCDEF01234ull;
        run_key_set("high bits only", keys, n, sh);
        for (size_t i = 0; i < n; i++)
            keys[i] = (uint64_t)i << 32; /* multiples of 2^32, 0 included */
        run_key_set("multiples of 2^32", keys, n, sh);
        for (size_t i = 0; i < n; i++)
            keys[i] = (uint64_t)i << 40 | (uint64_t)i; /* same low and high bits */
        run_key_set("mirrored", keys, n, sh);

        size_t e = 0; /* 0, ~0, single bits and single holes */
        keys[e++] = 0;
        keys[e++] = UINT64_MAX;
        for (int b = 0; b < 64; b++) {
            keys[e++] = 1ull << b;
            keys[e++] = ~(1ull << b);
        }
        keys[e++] = 0x7FFFFFFFFFFFFFFEull;
        keys[e++] = 0x8000000000000001ull;
        run_key_set("edge values", keys, e, sh);
        run_key_set("key 0 alone", (const uint64_t[]){0}, 1, sh);
        run_key_set("UINT64_MAX alone", (const uint64_t[]){UINT64_MAX}, 1, sh);
        run_key_set("0 and UINT64_MAX", (const uint64_t[]){UINT64_MAX, 0}, 2, sh);
    }
    free(keys);
}

/* Insertion orders that defeat a hash whose bucket is monotonic in the
 * key's hash: another store's iteration order (keys sorted by bucket, as
 * when a store or a snapshot is copied into a new, growing store), that order
 * reversed, and keys whose murmur3-fmix64 images (the store's pre-mixer) are
 * consecutive.  Before commit 602bc75 the first one made store_upsert loop
 * forever (growth rebuilt a table no larger than the one that had failed);
 * a hang here fails through SIGALRM. */
static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_hash_map: an insert did not finish in 120 s "
                              "(growth is not making progress)\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(3);
    _exit(2);
}

struct collect {
    uint64_t *keys;
    size_t n, cap;
};

static int collect_key(void *vctx, uint64_t key, const float *value)
{
    (void)value;
    struct collect *c = vctx;
    if (c->n == c->cap)
        return 1;
    c->keys[c->n++] = key;
    return 0;
}

/* The inverse of murmur3's fmix64. */
static uint64_t unfmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0x9cb4b2f8129337dbULL; /* 0xc4ceb9fe1a85ec53^-1 */
    k ^= k >> 33;
    k *= 0x4f74430c22a54005ULL; /* 0xff51afd7ed558ccd^-1 */
    k ^= k >> 33;
    return k;
}

static void copy_in_order(const char *name, const uint64_t *keys, size_t n, uint32_t k,
                          store_dtype_t dtype, uint32_t shards, uint64_t seed)
{
    store_t *b = make_seeded_store(k, dtype, shards, 0, 0, seed);
    float v[STORE_MAX_VALUE_FLOATS], out[STORE_MAX_VALUE_FLOATS];
    for (size_t i = 0; i < n; i++) {
        value_for_key(keys[i], k, v);
        int rc = store_upsert(b, keys[i], v);
        if (rc != 1)
            fail_msg("%s: upsert #%zu of a new key returned %d", name, i, rc);
    }
    if (store_count(b) != n)
        fail_msg("%s: count %llu after %zu inserts", name, (unsigned long long)store_count(b), n);
    for (size_t i = 0; i < n; i++) {
        value_for_key(keys[i], k, v);
        if (store_lookup(b, keys[i], out) != 1 || !same_floats(out, v, k))
            fail_msg("%s: key #%zu lost or wrong after the copy", name, i);
    }
    store_stats_t st;
    stats_of(b, &st);
    print_message("    %s (K=%u %s, %u shards): %zu keys, %llu rebuilds, %llu slots\n", name, k,
                  dtype_name(dtype), shards, n, (unsigned long long)st.rebuilds,
                  (unsigned long long)st.slots);
    store_destroy(b);
}

static void test_insertion_orders(void **state)
{
    (void)state;
    void (*old)(int) = signal(SIGALRM, on_alarm);
    alarm(120);
    size_t n = scaled(200000) < 50000 ? 50000 : scaled(200000);
    static const struct { uint32_t k; store_dtype_t dtype; uint32_t shards; } kinds[] = {
        {1, STORE_DTYPE_F32, 4}, {8, STORE_DTYPE_F32, 1}, {2, STORE_DTYPE_F16, 16},
    };
    struct collect c = {.keys = xcalloc(n, sizeof(uint64_t)), .cap = n};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        uint32_t k = kinds[i].k, shards = kinds[i].shards;
        store_t *a = make_store(k, kinds[i].dtype, shards, 0, 0);
        uint64_t seed = store_hash_seed(a);
        float v[STORE_MAX_VALUE_FLOATS];
        for (size_t j = 0; j < n; j++) {
            value_for_key(key_of(j), k, v);
            if (store_upsert(a, key_of(j), v) != 1)
                fail_msg("source store: upsert of new key %zu failed", j);
        }
        c.n = 0;
        for (uint32_t sh = 0; sh < shards; sh++)
            if (store_foreach(a, sh, collect_key, &c) != 0)
                fail_msg("foreach of the source store failed");
        store_destroy(a);
        if (c.n != n)
            fail_msg("foreach of the source store gave %zu of %zu keys", c.n, n);
        copy_in_order("another store's iteration order", c.keys, n, k, kinds[i].dtype, shards, 0);
        /* the same seed: keys come in bucket order of a table that grows */
        copy_in_order("iteration order of a store with the same seed", c.keys, n, k,
                      kinds[i].dtype, shards, seed);
        for (size_t j = 0; j < n / 2; j++) {
            uint64_t t = c.keys[j];
            c.keys[j] = c.keys[n - 1 - j];
            c.keys[n - 1 - j] = t;
        }
        copy_in_order("reversed iteration order", c.keys, n, k, kinds[i].dtype, shards, 0);
        for (size_t j = 0; j < n; j++)
            c.keys[j] = unfmix64(0x123456789ABCDEF0ull + j);
        copy_in_order("consecutive fmix64 images", c.keys, n, k, kinds[i].dtype, shards, 0);
        for (size_t j = 0; j < n; j++) /* the same, spread over the shard bits */
            c.keys[j] = unfmix64(0x123456789ABCDEF0ull + (uint64_t)j * 0x0100000000000001ull);
        copy_in_order("fmix64 images differing in shard bits", c.keys, n, k, kinds[i].dtype,
                      shards, 0);
    }
    free(c.keys);
    alarm(0);
    signal(SIGALRM, old);
}

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

/* ---- (e) fp16 -------------------------------------------------------------- */

/* The exact value of a finite half, from the definition of binary16. */
static double half_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static bool half_is_nan(uint16_t h)
{
    return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
}

/* Round-to-nearest-even fp32 -> fp16 by search over the finite halves:
 * slow and independent of any bit trick. */
static uint16_t ref_f32_to_f16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000);
    if (isnan(f))
        return sign | 0x7E00;
    double a = fabs((double)f);
    if (a >= 65520.0) /* MAX + half an ulp rounds to infinity (tie: inf is even) */
        return sign | 0x7C00;
    uint32_t lo = 0, hi = 0x7C00; /* value(lo) <= a < value(hi); value(0x7C00) := 65536 */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (half_value((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double vlo = half_value((uint16_t)lo), vhi = hi == 0x7C00 ? 65536.0 : half_value((uint16_t)hi);
    double midpoint = (vlo + vhi) / 2; /* exact: both have 11 significant bits */
    uint32_t h = a < midpoint ? lo : a > midpoint ? hi : (lo & 1) ? hi : lo;
    return (uint16_t)(sign | h);
}

static float f32_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint32_t bits_f32(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static void check_to_f16(float f, uint16_t want, const char *what)
{
    uint16_t got = store_f32_to_f16(f);
    if (half_is_nan(want) ? !half_is_nan(got) : got != want)
        fail_msg("store_f32_to_f16(%s = %a, bits %#010x) = %#06x, expected %#06x", what,
                 (double)f, bits_f32(f), got, want);
}

static void check_from_f16(uint16_t h, float want, const char *what)
{
    float got = store_f16_to_f32(h);
    bool ok = isnan(want) ? isnan(got) : bits_f32(got) == bits_f32(want);
    if (!ok)
        fail_msg("store_f16_to_f32(%#06x, %s) = %a, expected %a", h, what, (double)got,
                 (double)want);
}

static void test_f16_known_values(void **state)
{
    (void)state;
    check_to_f16(0.0f, 0x0000, "0");
    check_to_f16(-0.0f, 0x8000, "-0");
    check_to_f16(1.0f, 0x3C00, "1");
    check_to_f16(-2.0f, 0xC000, "-2");
    check_to_f16(0.5f, 0x3800, "0.5");
    check_to_f16(65504.0f, 0x7BFF, "65504 (max)");
    check_to_f16(65519.0f, 0x7BFF, "65519 (below the overflow tie)");
    check_to_f16(65520.0f, 0x7C00, "65520 (overflow tie -> inf)");
    check_to_f16(1e6f, 0x7C00, "1e6");
    check_to_f16(-1e6f, 0xFC00, "-1e6");
    check_to_f16(INFINITY, 0x7C00, "inf");
    check_to_f16(-INFINITY, 0xFC00, "-inf");
    check_to_f16(NAN, 0x7E00, "NaN");
    check_to_f16(f32_bits(0x7F800001), 0x7E00, "NaN with only low payload bits");
    check_to_f16(f32_bits(0xFF800001), 0x7E00, "-NaN with only low payload bits");
    check_to_f16(f32_bits(0x7FC00000), 0x7E00, "quiet NaN");
    check_to_f16(1e-8f, 0x0000, "1e-8 (underflows to 0)");
    check_to_f16(-1e-8f, 0x8000, "-1e-8 (underflows to -0)");
    check_to_f16(1e-30f, 0x0000, "1e-30");
    check_to_f16(f32_bits(1), 0x0000, "smallest fp32 subnormal");
    check_to_f16(0x1p-24f, 0x0001, "2^-24 (smallest subnormal)");
    check_to_f16(3e-8f, 0x0001, "3e-8 (just above half the smallest subnormal)");
    check_to_f16(0x1p-25f, 0x0000, "2^-25 (tie -> even 0)");
    check_to_f16(0x1.8p-24f, 0x0002, "1.5 * 2^-24 (tie -> even 2)");
    check_to_f16(0x1.4p-23f, 0x0002, "2.5 * 2^-24 (tie -> even 2)");
    check_to_f16(1023.0f * 0x1p-24f, 0x03FF, "largest subnormal");
    check_to_f16(1023.5f * 0x1p-24f, 0x0400, "largest subnormal + half (tie -> min normal)");
    check_to_f16(0x1p-14f, 0x0400, "2^-14 (min normal)");
    check_to_f16(1.0f + 0x1p-11f, 0x3C00, "1 + 2^-11 (tie -> even 1)");
    check_to_f16(1.0f + 3 * 0x1p-11f, 0x3C02, "1 + 3*2^-11 (tie -> even 1 + 2^-9)");
    check_to_f16(1.0f + 0x1p-11f + 0x1p-20f, 0x3C01, "just above the tie");
    check_to_f16(1.0f + 0x1p-11f - 0x1p-20f, 0x3C00, "just below the tie");
    check_to_f16(2047.0f, 0x67FF, "2047");
    check_to_f16(2049.0f, 0x6800, "2049 (tie -> even 2048)");
    check_to_f16(2051.0f, 0x6802, "2051 (tie -> even 2052)");
    check_to_f16(0.1f, 0x2E66, "0.1");
    check_to_f16(1.0f / 3.0f, 0x3555, "1/3");

    check_from_f16(0x0000, 0.0f, "0");
    check_from_f16(0x8000, -0.0f, "-0");
    check_from_f16(0x3C00, 1.0f, "1");
    check_from_f16(0xC000, -2.0f, "-2");
    check_from_f16(0x7BFF, 65504.0f, "max");
    check_from_f16(0x0001, 0x1p-24f, "smallest subnormal");
    check_from_f16(0x03FF, 1023.0f * 0x1p-24f, "largest subnormal");
    check_from_f16(0x0400, 0x1p-14f, "min normal");
    check_from_f16(0x3555, 0.333251953125f, "1/3");
    check_from_f16(0x7C00, INFINITY, "inf");
    check_from_f16(0xFC00, -INFINITY, "-inf");
    check_from_f16(0x7E00, NAN, "qNaN");
    check_from_f16(0x7C01, NAN, "sNaN");
    check_from_f16(0xFFFF, NAN, "-NaN");
}

static void test_f16_exhaustive(void **state)
{
    (void)state;
    /* Every half: decodes to its exact value and encodes back to itself. */
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        float f = store_f16_to_f32((uint16_t)h);
        if (half_is_nan((uint16_t)h)) {
            if (!isnan(f))
                fail_msg("half %#06x (NaN) decoded to %a", h, (double)f);
            if (!half_is_nan(store_f32_to_f16(f)))
                fail_msg("half %#06x (NaN) did not round-trip to a NaN", h);
            continue;
        }
        double want = (h & 0x7C00) == 0x7C00 ? ((h & 0x8000) ? -INFINITY : INFINITY)
                                             : half_value((uint16_t)h);
        if ((double)f != want || !signbit(f) != !signbit(want))
            fail_msg("half %#06x decoded to %a, expected %a", h, (double)f, want);
        uint16_t back = store_f32_to_f16(f);
        if (back != h)
            fail_msg("half %#06x -> %a -> %#06x", h, (double)f, back);
    }
    /* Around every rounding boundary: the midpoints between neighbouring
     * halves and the floats either side of them. */
    for (uint32_t h = 0; h < 0x7C00; h++) {
        double lo = half_value((uint16_t)h), hi = h == 0x7BFF ? 65536.0 : half_value((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2);
        const float probes[] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY), (float)lo};
        for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
            check_to_f16(probes[i], ref_f32_to_f16(probes[i]), "boundary probe");
            check_to_f16(-probes[i], ref_f32_to_f16(-probes[i]), "negative boundary probe");
        }
    }
    /* Random fp32 bit patterns (all exponents, NaNs, infinities). */
    struct rng r = {0xF16};
    size_t n = scaled(4000000);
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)rng_next(&r);
        if (i & 1) /* half the time, near the fp16 range */
            b = (b & 0x807FFFFF) | ((uint32_t)(100 + (b >> 23) % 50) << 23);
        float f = f32_bits(b);
        check_to_f16(f, ref_f32_to_f16(f), "random");
#ifdef __FLT16_MAX__
        /* The compiler's own conversion, a third opinion. */
        _Float16 hw = (_Float16)f;
        uint16_t hb;
        memcpy(&hb, &hw, 2);
        if (!isnan(f) && hb != ref_f32_to_f16(f))
            fail_msg("test bug: reference rounding of %a gives %#06x, _Float16 gives %#06x",
                     (double)f, ref_f32_to_f16(f), hb);
#endif
    }
}

/* Input float j of a test value: subnormal ties, the overflow edge, -0,
 * ties at 1, and random floats across the whole fp16 range. */
static float f16_test_input(uint64_t x, uint32_t j)
{
    switch (j) {
    case 0: return 0x1p-25f * (float)(x % 4);
    case 1: return 65504.0f + (float)(x % 32);
    case 2: return -0.0f;
    case 3: return 1.0f + (float)(x % 8) * 0x1p-11f;
    default: return f32_bits(((uint32_t)x & 0x807FFFFF) | (uint32_t)(103 + (x >> 32) % 40) << 23);
    }
}

/* A K=16 fp16 store returns exactly the fp16-rounded inputs (rounded by the
 * test's own reference, not by the store's converter). */
static void test_f16_store_values(void **state)
{
    (void)state;
    const uint32_t k = 16;
    store_t *s = make_store(k, STORE_DTYPE_F16, 4, 0, 0);
    assert_int_equal(store_value_bytes(s), k * 2);
    const size_t n = 20000;
    float in[16], out[16];
    struct rng r = {16};
    for (size_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < k; j++)
            in[j] = f16_test_input(rng_next(&r), j);
        if (store_upsert(s, key_of(i), in) != 1)
            fail_msg("fp16 store: upsert of new key %zu failed", i);
    }
    r.s = 16; /* the same inputs again */
    for (size_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < k; j++)
            in[j] = f16_test_input(rng_next(&r), j);
        if (store_lookup(s, key_of(i), out) != 1)
            fail_msg("fp16 store: key %zu missing", i);
        for (uint32_t j = 0; j < k; j++) {
            float want = (float)half_value(ref_f32_to_f16(in[j]));
            if ((ref_f32_to_f16(in[j]) & 0x7C00) == 0x7C00)
                want = copysignf(INFINITY, in[j]);
            if (bits_f32(out[j]) != bits_f32(want))
                fail_msg("fp16 store: key %zu float %u: input %a, got %a, expected %a", i, j,
                         (double)in[j], (double)out[j], (double)want);
        }
    }
    store_destroy(s);
}

/* ---- (f) option checking ----------------------------------------------------- */

static void expect_bad_options(const store_options_t *opt, const char *field, const char *what)
{
    char why[256];
    memset(why, 0, sizeof why);
    int rc = store_options_check(opt, why, sizeof why);
    if (rc != -EINVAL)
        fail_msg("store_options_check(%s) = %d, expected -EINVAL", what, rc);
    if (strstr(why, field) == NULL)
        fail_msg("store_options_check(%s): message \"%s\" does not name the field %s", what, why,
                 field);
    if (store_options_check(opt, NULL, 0) != -EINVAL)
        fail_msg("store_options_check(%s) with why=NULL did not return -EINVAL", what);
    char tiny[8];
    memset(tiny, 'x', sizeof tiny);
    if (store_options_check(opt, tiny, sizeof tiny) != -EINVAL || memchr(tiny, 0, sizeof tiny) == NULL)
        fail_msg("store_options_check(%s) with an 8-byte buffer: not NUL-terminated", what);
    store_t *s = NULL;
    rc = store_create(opt, &s);
    if (rc != -EINVAL) {
        if (rc == 0)
            store_destroy(s);
        fail_msg("store_create(%s) = %d, expected -EINVAL", what, rc);
    }
}

static void test_options_check(void **state)
{
    (void)state;
    const store_options_t good = {.value_floats = 4, .dtype = STORE_DTYPE_F32, .shards = 4};
    store_options_t o;

    o = good; o.value_floats = 0;
    expect_bad_options(&o, "value_floats", "K=0");
    o = good; o.value_floats = STORE_MAX_VALUE_FLOATS + 1;
    expect_bad_options(&o, "value_floats", "K=65");
    o = good; o.shards = 3;
    expect_bad_options(&o, "shards", "shards=3");
    o = good; o.shards = 512;
    expect_bad_options(&o, "shards", "shards=512");
    o = good; o.shards = 6;
    expect_bad_options(&o, "shards", "shards=6");
    o = good; o.max_load = 1.5;
    expect_bad_options(&o, "max_load", "max_load=1.5");
    o = good; o.max_load = -0.5;
    expect_bad_options(&o, "max_load", "max_load=-0.5");
    o = good; o.max_load = NAN;
    expect_bad_options(&o, "max_load", "max_load=NaN");
    o = good; o.dtype = (store_dtype_t)7;
    expect_bad_options(&o, "dtype", "dtype=7");

    static const store_options_t ok[] = {
        {.value_floats = 1, .dtype = STORE_DTYPE_F32, .shards = 1},
        {.value_floats = STORE_MAX_VALUE_FLOATS, .dtype = STORE_DTYPE_F16, .shards = STORE_MAX_SHARDS},
        {.value_floats = 8, .dtype = STORE_DTYPE_F16, .shards = 0, .max_load = 0.5},
        {.value_floats = 3, .dtype = STORE_DTYPE_F32, .shards = 2, .expected_keys = 1000, .max_load = 0.9},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char why[256] = "";
        int rc = store_options_check(&ok[i], why, sizeof why);
        if (rc != 0)
            fail_msg("good options %zu refused: %d %s", i, rc, why);
        store_t *s = NULL;
        rc = store_create(&ok[i], &s);
        if (rc != 0 || s == NULL)
            fail_msg("store_create(good options %zu) = %d", i, rc);
        uint32_t want_shards = ok[i].shards ? ok[i].shards : 16;
        if (store_value_floats(s) != ok[i].value_floats || store_dtype(s) != ok[i].dtype ||
            store_shards(s) != want_shards)
            fail_msg("options %zu: store reports K=%u dtype=%d shards=%u", i, store_value_floats(s),
                     (int)store_dtype(s), store_shards(s));
        if (store_value_bytes(s) != ok[i].value_floats * (ok[i].dtype == STORE_DTYPE_F16 ? 2u : 4u))
            fail_msg("options %zu: store_value_bytes %zu", i, store_value_bytes(s));
        if (store_count(s) != 0)
            fail_msg("options %zu: new store has %llu keys", i, (unsigned long long)store_count(s));
        uint32_t subs = store_subs_per_shard(s);
        if (subs == 0 || (subs & (subs - 1)) != 0)
            fail_msg("options %zu: %u sub-tables per shard, not a power of two", i, subs);
        for (uint64_t key = 0; key < 1000; key++)
            if (store_shard_of(s, key * KEY_MUL) >= want_shards || store_sub_of(s, key * KEY_MUL) >= subs)
                fail_msg("options %zu: key routed outside the store", i);
        store_destroy(s);
    }
}

/* ---- store_internal.h entry points -------------------------------------------- */

struct stop_ctx {
    int calls;
};

static int stop_at_third(void *vctx, uint64_t key, const float *value)
{
    (void)key;
    (void)value;
    struct stop_ctx *c = vctx;
    return ++c->calls == 3 ? 42 : 0;
}

struct raw_ctx {
    const store_t *s;
    uint64_t n;
    int bad;
};

static int raw_matches_lookup(void *vctx, uint64_t key, const void *raw)
{
    struct raw_ctx *c = vctx;
    uint32_t k = store_value_floats(c->s);
    float out[STORE_MAX_VALUE_FLOATS];
    if (store_lookup(c->s, key, out) != 1) {
        c->bad = 1;
        return 1;
    }
    for (uint32_t j = 0; j < k; j++) {
        float f;
        if (store_dtype(c->s) == STORE_DTYPE_F16) {
            uint16_t h;
            memcpy(&h, (const uint8_t *)raw + 2 * j, 2);
            f = store_f16_to_f32(h);
        } else {
            memcpy(&f, (const uint8_t *)raw + 4 * j, 4);
        }
        if (bits_f32(f) != bits_f32(out[j])) {
            c->bad = 2;
            return 1;
        }
    }
    c->n++;
    return 0;
}

static void test_internal_api(void **state)
{
    (void)state;
    for (int dt = 0; dt < 2; dt++) {
        store_dtype_t dtype = dt ? STORE_DTYPE_F16 : STORE_DTYPE_F32;
        const uint32_t k = 3, shards = 4;
        store_t *s = make_store(k, dtype, shards, 0, 0);
        size_t vb = store_value_bytes(s), rec = 8 + vb;

        /* foreach stops at the callback's non-zero value */
        float v[3] = {1, 2, 3};
        for (uint64_t i = 0; i < 100; i++)
            assert_int_equal(store_upsert(s, key_of(i), v), 1);
        struct stop_ctx sc = {0};
        int rc = 0;
        uint32_t sh;
        for (sh = 0; sh < shards && rc == 0; sh++)
            rc = store_foreach(s, sh, stop_at_third, &sc);
        if (rc != 42 || sc.calls != 3)
            fail_msg("foreach returned %d after %d calls, expected 42 after 3", rc, sc.calls);

        /* upsert_raw / foreach_raw */
        uint8_t raw[3 * 4];
        for (uint32_t j = 0; j < k; j++) {
            float f = (float)j + 0.5f;
            if (dtype == STORE_DTYPE_F16) {
                uint16_t h = store_f32_to_f16(f);
                memcpy(raw + 2 * j, &h, 2);
            } else {
                memcpy(raw + 4 * j, &f, 4);
            }
        }
        assert_int_equal(store_upsert_raw(s, key_of(1000), raw), 1);
        assert_int_equal(store_upsert_raw(s, key_of(1000), raw), 0);
        float out[3];
        assert_int_equal(store_lookup(s, key_of(1000), out), 1);
        for (uint32_t j = 0; j < k; j++)
            if (out[j] != (float)j + 0.5f)
                fail_msg("upsert_raw: float %u reads back as %a", j, (double)out[j]);
        struct raw_ctx rcx = {.s = s};
        for (sh = 0; sh < shards; sh++)
            if (store_foreach_raw(s, sh, raw_matches_lookup, &rcx) != 0)
                fail_msg("foreach_raw disagrees with lookup (%d) in shard %u", rcx.bad, sh);
        if (rcx.n != store_count(s))
            fail_msg("foreach_raw visited %llu of %llu", (unsigned long long)rcx.n,
                     (unsigned long long)store_count(s));

        /* insert_entries: good batch, duplicate, wrong shard */
        const uint32_t target = 1;
        uint64_t keys[64];
        size_t nk = 0;
        for (uint64_t id = 5000; nk < 64; id++)
            if (store_shard_of(s, key_of(id)) == target)
                keys[nk++] = key_of(id);
        uint64_t other = 0;
        for (uint64_t id = 9000;; id++)
            if (store_shard_of(s, key_of(id)) != target) {
                other = key_of(id);
                break;
            }
        uint8_t *buf = xcalloc(64, rec);
        for (size_t i = 0; i < 64; i++) {
            for (int b = 0; b < 8; b++) /* little-endian, whatever the host */
                buf[i * rec + b] = (uint8_t)(keys[i] >> (8 * b));
            memcpy(buf + i * rec + 8, raw, vb);
        }
        uint64_t before = store_count(s);
        size_t bad = 999;
        assert_int_equal(store_insert_entries(s, target, buf, 20, &bad), 0);
        assert_int_equal(store_count(s), before + 20);
        for (size_t i = 0; i < 20; i++)
            assert_int_equal(store_lookup(s, keys[i], out), 1);

        /* Record 5 of the next batch (buf record 25) repeats the key of
         * record 3, already in the store.  Records before the bad one may or
         * may not be in (the contract only says nothing after it is); the
         * count must agree with what lookups find either way. */
        memcpy(buf + 25 * rec, buf + 3 * rec, 8);
        bad = 999;
        rc = store_insert_entries(s, target, buf + 20 * rec, 10, &bad);
        if (rc != -EEXIST || bad != 5)
            fail_msg("insert_entries with a duplicate at 5: rc %d bad %zu", rc, bad);
        uint64_t found_before = 0;
        for (size_t i = 20; i < 30; i++) {
            if (i == 25)
                continue;
            int got = store_lookup(s, keys[i], out);
            if (i > 25 && got != 0)
                fail_msg("insert_entries stopped at 5, but record %zu was inserted", i - 20);
            found_before += (uint64_t)got;
        }
        if (store_count(s) != before + 20 + found_before)
            fail_msg("insert_entries: count %llu, lookups find %llu",
                     (unsigned long long)store_count(s),
                     (unsigned long long)(before + 20 + found_before));
        if (store_lookup(s, keys[3], out) != 1)
            fail_msg("insert_entries with a duplicate lost the existing key");
        before = store_count(s);

        /* A key of another shard at record 3 of the next batch. */
        for (int b = 0; b < 8; b++)
            buf[33 * rec + b] = (uint8_t)(other >> (8 * b));
        bad = 999;
        rc = store_insert_entries(s, target, buf + 30 * rec, 10, &bad);
        if (rc != -EXDEV || bad != 3)
            fail_msg("insert_entries with a wrong-shard key at 3: rc %d bad %zu", rc, bad);
        if (store_lookup(s, other, out) != 0)
            fail_msg("insert_entries inserted the wrong-shard key");
        found_before = 0;
        for (size_t i = 30; i < 40; i++) {
            if (i == 33)
                continue;
            int got = store_lookup(s, keys[i], out);
            if (i > 33 && got != 0)
                fail_msg("insert_entries stopped at 3, but record %zu was inserted", i - 30);
            found_before += (uint64_t)got;
        }
        if (store_count(s) != before + found_before)
            fail_msg("insert_entries: count %llu, lookups find %llu",
                     (unsigned long long)store_count(s),
                     (unsigned long long)(before + found_before));
        free(buf);
        store_destroy(s);
    }
}

/* ---- main ------------------------------------------------------------------- */

static int setup_globals(void **state)
{
    (void)state;
    const char *e = getenv("TL_TEST_SCALE");
    g_scale = UNDER_SANITIZER ? 0.25 : 1.0;
    if (e != NULL && *e) {
        double v = strtod(e, NULL);
        if (v > 0)
            g_scale = v;
    }
    uint64_t inv = KEY_MUL; /* Newton: each step doubles the correct low bits */
    for (int i = 0; i < 6; i++)
        inv *= 2 - KEY_MUL * inv;
    g_key_inv = inv;
    if (KEY_MUL * g_key_inv != 1)
        return -1;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options_check),
        cmocka_unit_test(test_f16_known_values),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_f16_store_values),
        cmocka_unit_test(test_adversarial_keys),
        cmocka_unit_test(test_insertion_orders),
        cmocka_unit_test(test_batch_vs_single),
        cmocka_unit_test(test_upsert_batch),
        cmocka_unit_test(test_locate_batch),
        cmocka_unit_test(test_upsert_relaxed),
        cmocka_unit_test(test_overwrite_batch),
        cmocka_unit_test(test_reserved_full_table),
        cmocka_unit_test(test_full_load_churn),
        cmocka_unit_test(test_internal_api),
        cmocka_unit_test(test_growth),
        cmocka_unit_test(test_random_ops),
    };
    return cmocka_run_group_tests(tests, setup_globals, NULL);
}
