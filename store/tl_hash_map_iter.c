/*
 * tl_hash_map_iter.c — walking the store: store_foreach (fp32 values),
 * store_foreach_raw (storage format, for the snapshot writer), counts, stats
 * and the layout scan.
 *
 * A slot stores only the key bits its bucket does not imply (tl_hash_map.c,
 * KEY DECOMPOSITION), so iteration rebuilds each key from its bucket index,
 * its keypart and the sub-table's place: undo the bucket multiply, then the
 * per-store seed mix (seed_unmix), then the key mixer (unmix64).
 *
 * THREAD SAFETY: iteration needs no concurrent writer of the shard it walks
 * (it reads buckets without the seqlock) and holds one epoch per sub-table,
 * so a callback may block without stalling other shards' growth.  Counts and
 * stats are relaxed reads, exact once the writers are quiet.
 */
#include "tl_hash_map_impl.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

static uint64_t unmix64(uint64_t k)
{
    k ^= k >> 33; /* x ^= x >> 33 is its own inverse (33 >= 64/2) */
    k *= 0x9cb4b2f8129337dbULL; /* inverse of 0xc4ceb9fe1a85ec53 mod 2^64 */
    k ^= k >> 33;
    k *= 0x4f74430c22a54005ULL; /* inverse of 0xff51afd7ed558ccd mod 2^64 */
    k ^= k >> 33;
    return k;
}

static uint64_t seed_unmix(const store_t *s, uint64_t y)
{
    y ^= y >> s->seed_shift; /* self-inverse: 2 * shift >= m */
    return ((y * s->seed_mul_inv) & s->y_mask) ^ s->seed_xor;
}

static inline uint64_t key_of(const store_t *s, const struct subtable *st, uint32_t shard,
                              uint32_t sub, uint64_t bucket, uint64_t kp)
{
    uint64_t t = kp >> 1;
    uint64_t b1 = (kp & 1) ? alt_bucket(bucket, t, st->nbuckets) : bucket;
    u128 num = ((u128)b1 << s->m) + ((u128)t << st->c_shift);
    uint64_t y = seed_unmix(s, (uint64_t)((num + st->nbuckets - 1) / st->nbuckets));
    uint64_t top = ((uint64_t)shard << s->sub_bits) | sub;
    uint64_t x = s->m == 64 ? y : (top << s->m) | y;
    return unmix64(x);
}

static inline void raw_to_f32(const store_t *s, const uint8_t *raw, float *out)
{
    if (s->dtype == STORE_DTYPE_F32) {
        memcpy(out, raw, (size_t)s->K * 4);
    } else {
        for (uint32_t i = 0; i < s->K; i++) {
            uint16_t h;
            memcpy(&h, raw + 2 * i, 2);
            out[i] = store_f16_to_f32(h);
        }
    }
}

int store__sub_foreach_raw(const store_t *s, const struct subtable *st, uint32_t shard,
                           uint32_t sub, store_visit_raw_fn fn, void *ctx)
{
    uint8_t raw[STORE_MAX_VALUE_FLOATS * 4];
    uint64_t w[BUCKET_WORDS];
    for (uint64_t b = 0; b < st->nbuckets; b++) {
        load_bucket(st, b, w);
        for (uint32_t j = 0; j < st->slots; j++) {
            uint64_t kp = slot_kp(st, w, j);
            if (kp == 0)
                continue;
            uint64_t key = key_of(s, st, shard, sub, b, ~kp & st->kp_mask);
            slot_value(s, st, b, j, raw);
            int rc = fn(ctx, key, raw);
            if (rc)
                return rc;
        }
    }
    uint32_t n = atomic_load_explicit(&st->stash_n, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++) {
        memcpy(raw, st->stash_values + (size_t)i * s->vstride, s->vstride);
        int rc = fn(ctx, atomic_load_explicit(&st->stash_keys[i], memory_order_relaxed), raw);
        if (rc)
            return rc;
    }
    return 0;
}

int store_foreach_raw(const store_t *s, uint32_t shard, store_visit_raw_fn fn, void *ctx)
{
    if (shard >= s->nshards)
        return -EINVAL;
    int rc = 0;
    /* one read section per sub-table: fn may block (the snapshot writer
     * writes files), and a long section would stall other shards' growth */
    for (uint32_t u = 0; u < s->nsubs && rc == 0; u++) {
        store__epoch_enter();
        rc = store__sub_foreach_raw(s, sub_ptr(s, shard, u), shard, u, fn, ctx);
        store__epoch_exit();
    }
    return rc;
}

struct f32_visit {
    const store_t *s;
    store_visit_fn fn;
    void *ctx;
};

static int visit_as_f32(void *vctx, uint64_t key, const void *raw)
{
    struct f32_visit *v = vctx;
    float out[STORE_MAX_VALUE_FLOATS];
    raw_to_f32(v->s, raw, out);
    return v->fn(v->ctx, key, out);
}

int store_foreach(const store_t *s, uint32_t shard, store_visit_fn fn, void *ctx)
{
    struct f32_visit v = {s, fn, ctx};
    return store_foreach_raw(s, shard, visit_as_f32, &v);
}

/* ---- counts and stats ---------------------------------------------------- */

uint64_t store_shard_count(const store_t *s, uint32_t shard)
{
    if (shard >= s->nshards)
        return 0;
    uint64_t n = 0;
    store__epoch_enter();
    for (uint32_t u = 0; u < s->nsubs; u++)
        n += atomic_load_explicit(&sub_ptr(s, shard, u)->count, memory_order_relaxed);
    store__epoch_exit();
    return n;
}

uint64_t store_count(const store_t *s)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < s->nshards; i++)
        n += store_shard_count(s, i);
    return n;
}

void store_stats(const store_t *s, store_stats_t *st)
{
    memset(st, 0, sizeof *st);
    store__epoch_enter();
    for (uint32_t i = 0; i < s->nshards; i++) {
        st->rebuilds += atomic_load_explicit(&s->shards[i].rebuilds, memory_order_relaxed);
        for (uint32_t u = 0; u < s->nsubs; u++) {
            const struct subtable *t = sub_ptr(s, i, u);
            st->entries += atomic_load_explicit(&t->count, memory_order_relaxed);
            st->slots += t->nbuckets * t->slots;
            st->table_bytes += t->bucket_map_bytes + t->value_map_bytes;
            st->stashed += atomic_load_explicit(&t->stash_n, memory_order_relaxed);
            st->subtables++;
        }
    }
    store__epoch_exit();
}

void store_layout(const store_t *s, store_layout_t *out)
{
    memset(out, 0, sizeof *out);
    store__epoch_enter();
    for (size_t i = 0; i < (size_t)s->nshards * s->nsubs; i++) {
        const struct subtable *t = atomic_load_explicit(&s->subs[i], memory_order_seq_cst);
        for (uint64_t b = 0; b < t->nbuckets; b++) {
            const uint64_t *w = bucket_words(t, b);
            out->overflowed_buckets += overflowed(w);
            for (uint32_t j = 0; j < t->slots; j++) {
                uint64_t kp = slot_kp(t, w, j); /* stored (inverted) form; 0 = empty */
                out->alternate_entries += kp != 0 && !(kp & 1);
            }
        }
        out->buckets += t->nbuckets;
    }
    store__epoch_exit();
}
