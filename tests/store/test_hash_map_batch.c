/*
 * test_hash_map_batch.c — single-threaded tests of tl_hash_map
 * (store/tl_hash_map*.c): the batch entry points agree with the single ones:
 * batch vs single lookups, upsert/overwrite batches, locate batches and
 * relaxed upserts with a reader running.
 *
 * Shared helpers and the reference map: hash_map_testutil.h.  SIZES: see there.
 *
 * THREAD SAFETY: single-threaded except the relaxed-upsert reader thread; test_concurrent.c covers readers during
 * writes.
 */

#include "hash_map_testutil.h"

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

/* ---- main ------------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_vs_single),
        cmocka_unit_test(test_upsert_batch),
        cmocka_unit_test(test_locate_batch),
        cmocka_unit_test(test_upsert_relaxed),
        cmocka_unit_test(test_overwrite_batch),
    };
    return cmocka_run_group_tests(tests, setup_globals, NULL);
}
