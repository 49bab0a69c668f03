/*
 * hash_map_testutil.c — helpers shared by the tl_hash_map test programs
 * (test_hash_map_*.c, declared in hash_map_testutil.h) and the reference map:
 *
 * The tests run sequences of upserts, deletes and lookups against the store
 * and against a reference map kept next to it, and check every return value
 * and every value the store hands back.  The reference is deliberately dull
 * so that it is obviously right:
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
 * SIZES: TL_TEST_SCALE (a positive float, default 1, 0.25 under ASan) scales
 * the operation counts and key counts so that the sanitizer build stays well
 * under a minute.
 *
 * THREAD SAFETY: single-threaded.
 */

#include "hash_map_testutil.h"

double g_scale = 1.0; /* TL_TEST_SCALE */
uint64_t g_key_inv;   /* KEY_MUL^-1 mod 2^64 */

/* ---- small helpers ------------------------------------------------------ */

uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t rng_next(struct rng *r)
{
    r->s += 0x9E3779B97F4A7C15ull;
    return mix64(r->s);
}

/* Uniform in [0, n); n > 0.  The modulo bias is irrelevant here. */
uint64_t rng_below(struct rng *r, uint64_t n)
{
    return rng_next(r) % n;
}

size_t scaled(size_t n)
{
    double v = (double)n * g_scale;
    return v < 1.0 ? 1 : (size_t)v;
}

uint64_t key_of(uint64_t id)
{
    return id * KEY_MUL;
}

uint64_t id_of(uint64_t key)
{
    return key * g_key_inv;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL)
        fail_msg("out of memory (%zu x %zu)", n, size);
    return p;
}

store_t *make_seeded_store(uint32_t k, store_dtype_t dtype, uint32_t shards,
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

store_t *make_store(uint32_t k, store_dtype_t dtype, uint32_t shards, uint64_t expected,
                    double max_load)
{
    return make_seeded_store(k, dtype, shards, expected, max_load, 0);
}

float f16_round(float f)
{
    return store_f16_to_f32(store_f32_to_f16(f));
}

const char *dtype_name(store_dtype_t d)
{
    return d == STORE_DTYPE_F16 ? "f16" : "f32";
}

/* A random value: multiples of 2^-20 in [-8, 8), and now and then one far
 * outside that (large, tiny, zero) so fp16 rounding and subnormals show up. */
void random_value(struct rng *r, uint32_t k, store_dtype_t dtype, float *in, float *expect)
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
bool same_floats(const float *a, const float *b, uint32_t k)
{
    return memcmp(a, b, (size_t)k * sizeof(float)) == 0;
}

bool all_zero(const float *a, uint32_t k)
{
    for (uint32_t j = 0; j < k; j++)
        if (a[j] != 0.0f)
            return false;
    return true;
}

void stats_of(const store_t *s, store_stats_t *st)
{
    memset(st, 0xA5, sizeof *st);
    store_stats(s, st);
}

float f32_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

uint32_t bits_f32(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}


/* ---- the reference map -------------------------------------------------- */

void ref_init(struct ref *m, uint32_t k, store_dtype_t dtype, uint64_t universe)
{
    m->k = k;
    m->dtype = dtype;
    m->universe = universe;
    m->size = 0;
    m->present = xcalloc(universe, 1);
    m->vals = xcalloc(universe * k, sizeof(float));
}

void ref_free(struct ref *m)
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

int visit_check(void *vctx, uint64_t key, const float *value)
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
void check_store_equals_ref(const store_t *s, const struct ref *m, const char *where)
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

void ref_upsert(store_t *s, struct ref *m, uint64_t id, struct rng *r, size_t op)
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

void ref_delete(store_t *s, struct ref *m, uint64_t id, size_t op)
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

void ref_lookup(const store_t *s, const struct ref *m, uint64_t id, size_t op)
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
void ref_lookup_batch(const store_t *s, const struct ref *m, struct rng *r, size_t n,
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

/* ---- group setup ---------------------------------------------------------- */

int setup_globals(void **state)
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

