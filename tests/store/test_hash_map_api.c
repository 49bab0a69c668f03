/*
 * test_hash_map_api.c — single-threaded tests of tl_hash_map
 * (store/tl_hash_map*.c): store option checking (each bad field named in the
 * error) and the store_internal.h bulk/raw entry points.
 *
 * Shared helpers and the reference map: hash_map_testutil.h.  SIZES: see there.
 *
 * THREAD SAFETY: single-threaded; test_concurrent.c covers readers during
 * writes.
 */

#include "hash_map_testutil.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options_check),
        cmocka_unit_test(test_internal_api),
    };
    return cmocka_run_group_tests(tests, setup_globals, NULL);
}
