/*
 * test_hash_map_keys.c — single-threaded tests of tl_hash_map
 * (store/tl_hash_map*.c): adversarial key sets (sequential, high-bit-only,
 * multiples of 2^32, 0 and UINT64_MAX) and adversarial insertion orders
 * (another store's iteration order).
 *
 * Shared helpers and the reference map: hash_map_testutil.h.  SIZES: see there.
 *
 * THREAD SAFETY: single-threaded; test_concurrent.c covers readers during
 * writes.
 */

#include "hash_map_testutil.h"

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

/* ---- main ------------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adversarial_keys),
        cmocka_unit_test(test_insertion_orders),
    };
    return cmocka_run_group_tests(tests, setup_globals, NULL);
}
