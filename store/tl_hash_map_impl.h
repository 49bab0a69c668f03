/*
 * tl_hash_map_impl.h — the parameter store's structs and the inline helpers
 * its files share (create, lookup, write, fill, iteration).
 *
 * opaque: use store.h.  Nothing outside store/tl_hash_map*.c includes this:
 * other store files use store_internal.h, other folders store.h.
 *
 * The locate and bucket helpers are static inline here, not functions of one
 * file, so that store_lookup_batch's pipeline (tl_hash_map_lookup.c) and the
 * writer's loops inline them as they did when the map was one file.  Data
 * layout and memory ordering: the essay in tl_hash_map.c.
 */
#ifndef TL_STORE_TL_HASH_MAP_IMPL_H
#define TL_STORE_TL_HASH_MAP_IMPL_H

#include "epoch.h"
#include "store_internal.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define BUCKET_BYTES 64
#define BUCKET_WORDS 8
#define STASH_MAX 8
#define OVERFLOW_WORD 7
#define OVERFLOW_BIT (1ULL << 63) /* bit 511: a key whose primary is this bucket lives in its alternate */

typedef unsigned __int128 u128;

/* ---- key scrambling ---------------------------------------------------- */

static inline uint64_t mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/* ---- data structures ---------------------------------------------------- */

struct subtable {
    /* read-mostly geometry: fixed for the sub-table's life */
    uint8_t *buckets;        /* nbuckets * 64 bytes */
    uint8_t *values;         /* out-of-line values, NULL when inline */
    uint64_t nbuckets;       /* B */
    uint64_t capacity;       /* entries allowed before growth */
    uint32_t slots;          /* S per bucket */
    uint32_t kp_bits;        /* W = 8 tag bits + rest_bits */
    uint32_t tag_byte;       /* byte offset of the S tag bytes in the bucket */
    uint32_t rest_off;       /* bit offset of rest 0 (S fields of rest_bits) */
    uint32_t rest_bits;      /* W - 8 */
    uint32_t slot_mask;      /* (1 << S) - 1 */
    uint64_t rest_mask;      /* (1 << rest_bits) - 1 */
    uint32_t c_shift;        /* floor(log2 B) */
    uint32_t t_shift;        /* 64 - m + c: t from the low half of the top-aligned product */
    uint64_t kp_mask;        /* (1 << W) - 1 */
    size_t bucket_map_bytes; /* for munmap */
    size_t value_map_bytes;
    uint8_t *bucket_map;     /* mapping bases (buckets/values are aligned inside) */
    uint8_t *value_map;
    /* writer-owned, read relaxed by stats */
    _Atomic uint64_t count;  /* entries in buckets + stash */
    _Atomic uint32_t stash_n;
    /* seqlock: own cache line, written by the shard's writer only */
    _Alignas(64) _Atomic uint32_t version;
    /* stash: keys and values of entries that no bucket could take */
    _Alignas(64) _Atomic uint64_t stash_keys[STASH_MAX];
    _Alignas(8) uint8_t stash_values[]; /* STASH_MAX * value stride */
};

struct shard_state {
    _Atomic uint64_t rebuilds; /* written by the shard's writer */
    char pad[56];
};

struct store {
    uint32_t K;            /* floats per value */
    store_dtype_t dtype;
    uint32_t vbytes;       /* K * 4 or K * 2 */
    uint32_t vstride;      /* vbytes rounded up to 4 */
    bool inline_values;    /* vbytes == 4 */
    bool f16c;             /* out-of-line fp16 values, converted with F16C */
    uint32_t shard_bits, sub_bits, m; /* m = 64 - shard_bits - sub_bits */
    uint64_t y_mask;       /* low m bits */
    uint64_t hash_seed;    /* what seed_init made the next three from */
    uint64_t seed_xor, seed_mul, seed_mul_inv; /* per-store bijection of y (seed_mix) */
    uint32_t seed_shift;   /* ceil(m / 2) */
    /* the same bijection on y kept in the top m bits of a word (locate_top) */
    uint32_t y_shift;      /* 64 - m */
    uint32_t sub_shift;    /* m - 1: subs index = (x >> 1) >> sub_shift, defined for m = 64 */
    uint64_t seed_xor_top; /* seed_xor << y_shift */
    uint64_t y_top_mask;   /* ~0 << y_shift */
    uint32_t nshards, nsubs;
    double max_load;
    _Atomic(struct subtable *) *subs; /* [shard * nsubs + sub] */
    struct shard_state *shards;
};

/* Where a key lives, computed once per key. */
struct loc {
    uint32_t shard, sub;
    uint64_t t;            /* remainder */
    uint64_t b1, b2;       /* candidate buckets */
    uint64_t want1, want2; /* stored (inverted) keypart in b1 / b2; 0 = impossible */
};

/* ---- small helpers ------------------------------------------------------ */

static inline uint32_t floor_log2(uint64_t v)
{
    return 63u - (uint32_t)__builtin_clzll(v);
}

static inline uint64_t load_word(const uint8_t *bucket, unsigned w)
{
    return __atomic_load_n((const uint64_t *)(const void *)bucket + w, __ATOMIC_RELAXED);
}

static inline void store_word(uint8_t *bucket, unsigned w, uint64_t v)
{
    __atomic_store_n((uint64_t *)(void *)bucket + w, v, __ATOMIC_RELAXED);
}

static inline uint64_t get_bits(const uint64_t *words, uint32_t off, uint32_t width, uint64_t mask)
{
    uint32_t lo = off >> 6, sh = off & 63;
    uint64_t v = __atomic_load_n(&words[lo], __ATOMIC_RELAXED) >> sh;
    if (sh + width > 64)
        v |= __atomic_load_n(&words[lo + 1], __ATOMIC_RELAXED) << (64 - sh);
    return v & mask;
}

static inline uint64_t alt_bucket(uint64_t b, uint64_t t, uint64_t B)
{
    uint64_t f = (uint64_t)(((u128)(t * 0x9e3779b97f4a7c15ULL) * B) >> 64);
    return f >= b ? f - b : f + B - b;
}

static inline struct subtable *sub_ptr(const store_t *s, uint32_t shard, uint32_t sub)
{
    return atomic_load_explicit(&s->subs[(size_t)shard * s->nsubs + sub], memory_order_seq_cst);
}

/* A per-store bijection on the m low bits, applied before they choose the
 * bucket.  Without it the primary bucket is monotonic in the key's hash, so a
 * stream in another store's iteration order (sorted by bucket) would pile
 * into a few buckets of a table still growing.  Its constants come from the
 * store's hash_seed and m, so stores with the same seed and split place keys
 * alike: a snapshot load uses that to fill its table in order. */
static inline uint64_t seed_mix(const store_t *s, uint64_t y)
{
    y = ((y ^ s->seed_xor) * s->seed_mul) & s->y_mask;
    return y ^ (y >> s->seed_shift);
}

static inline void split_key(const store_t *s, uint64_t key, uint32_t *shard, uint32_t *sub,
                             uint64_t *y)
{
    uint64_t x = mix64(key);
    uint64_t top = s->m == 64 ? 0 : x >> s->m;
    *shard = (uint32_t)(top >> s->sub_bits);
    *sub = (uint32_t)(top & (s->nsubs - 1));
    *y = seed_mix(s, x & s->y_mask);
}

/* Fills the bucket part of loc for sub-table st. */
static inline void locate_in(const store_t *s, const struct subtable *st, uint64_t y, struct loc *l)
{
    u128 p = (u128)y * st->nbuckets;
    l->b1 = (uint64_t)(p >> s->m);
    l->t = ((uint64_t)p & s->y_mask) >> st->c_shift;
    l->want1 = ~(l->t << 1) & st->kp_mask;
    l->want2 = ~((l->t << 1) | 1) & st->kp_mask; /* 0 when t is all ones: never stored */
}

/* The batch's locate: seed_mix and locate_in computed on y shifted to the
 * top of a word, where the product's high half is b1 with no 128-bit shift
 * and t is one shift of its low half.  Same buckets as split_key+locate_in
 * (the multiply mod 2^64 of a top-aligned y is the multiply mod 2^m). */
static inline struct subtable *locate_top(const store_t *s, uint64_t key, uint64_t *b1,
                                          uint64_t *t)
{
    uint64_t x = mix64(key);
    struct subtable *st = atomic_load_explicit(&s->subs[(x >> 1) >> s->sub_shift],
                                               memory_order_seq_cst);
    uint64_t y = ((x << s->y_shift) ^ s->seed_xor_top) * s->seed_mul;
    y ^= (y >> s->seed_shift) & s->y_top_mask;
    u128 p = (u128)y * st->nbuckets;
    *b1 = (uint64_t)(p >> 64);
    *t = (uint64_t)p >> st->t_shift;
    return st;
}

/* The alternate bucket costs two multiplies; most lookups never need it. */
static inline void locate_alt(const struct subtable *st, struct loc *l)
{
    l->b2 = alt_bucket(l->b1, l->t, st->nbuckets);
}

static inline uint8_t *bucket_at(const struct subtable *st, uint64_t b)
{
    return st->buckets + b * BUCKET_BYTES;
}

static inline uint8_t *value_at(const store_t *s, const struct subtable *st, uint64_t b, uint32_t j)
{
    return st->values + (b * st->slots + j) * s->vstride;
}

static inline uint8_t *stash_value_at(const store_t *s, struct subtable *st, uint32_t i)
{
    return st->stash_values + (size_t)i * s->vstride;
}

/* Marks bucket b as overflowed (writer, inside a write section). */
static inline void set_overflow(struct subtable *st, uint64_t b)
{
    uint8_t *p = st->buckets + b * BUCKET_BYTES;
    uint64_t w = load_word(p, OVERFLOW_WORD);
    if (!(w & OVERFLOW_BIT))
        store_word(p, OVERFLOW_WORD, w | OVERFLOW_BIT);
}

/* ---- bucket reads (lookup, writer, fill, iteration) ---------------------- */

/* Bitmask of the slots whose tag byte equals tag (SSE2: one compare). */
static inline uint32_t tag_matches(const struct subtable *st, const uint64_t *words, uint8_t tag)
{
#ifdef __SSE2__
    __m128i tags = _mm_loadu_si128((const __m128i *)(const void *)((const uint8_t *)words + st->tag_byte));
    return (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(tags, _mm_set1_epi8((char)tag))) & st->slot_mask;
#else
    uint32_t m = 0;
    for (uint32_t j = 0; j < st->slots; j++)
        m |= (uint32_t)(((const uint8_t *)words)[st->tag_byte + j] == tag) << j;
    return m;
#endif
}

/* The rest_bits (<= 55) at bit `off` of a bucket: one 8-byte load from the
 * field's first byte, or from byte 56 for a field that ends in the last
 * word (never past the bucket's line: a second line would be a second
 * cache miss).  A plain load, like the SSE2 tag load: readers discard a
 * torn result by the version check. */
static inline uint64_t get_rest(const uint64_t *words, uint32_t off, uint64_t mask)
{
    uint32_t byte = off >> 3;
    byte = byte > BUCKET_BYTES - 8 ? BUCKET_BYTES - 8 : byte;
    uint64_t v;
    memcpy(&v, (const uint8_t *)words + byte, 8);
    return (v >> (off - 8 * byte)) & mask;
}

/* Finds want among the keyparts of a bucket; returns the slot or -1.  words
 * is the bucket in the table; readers call it under the seqlock: the SSE2
 * tag load and get_rest are plain loads, and a torn result is discarded by
 * the version check as in any seqlock reader. */
static inline int find_in_words(const struct subtable *st, const uint64_t *words, uint64_t want)
{
    uint32_t cand = tag_matches(st, words, (uint8_t)want);
    uint64_t rest = want >> 8;
    while (cand) {
        uint32_t j = (uint32_t)__builtin_ctz(cand);
        if (get_rest(words, st->rest_off + j * st->rest_bits, st->rest_mask) == rest)
            return (int)j;
        cand &= cand - 1;
    }
    return -1;
}

static inline const uint64_t *bucket_words(const struct subtable *st, uint64_t b)
{
    return (const uint64_t *)(const void *)bucket_at(st, b);
}

static inline bool overflowed(const uint64_t *words)
{
    return __atomic_load_n(&words[OVERFLOW_WORD], __ATOMIC_RELAXED) & OVERFLOW_BIT;
}

static inline void load_bucket(const struct subtable *st, uint64_t b, uint64_t *words)
{
    const uint8_t *p = bucket_at(st, b);
    for (unsigned w = 0; w < BUCKET_WORDS; w++)
        words[w] = load_word(p, w);
}

static inline uint64_t slot_kp(const struct subtable *st, const uint64_t *words, uint32_t j)
{
    uint64_t tag = ((const uint8_t *)words)[st->tag_byte + j];
    uint64_t rest = get_bits(words, st->rest_off + j * st->rest_bits, st->rest_bits, st->rest_mask);
    return tag | rest << 8;
}

/* Reads the raw value of slot j of bucket b (writer side). */
static inline void slot_value(const store_t *s, const struct subtable *st, uint64_t b, uint32_t j,
                              uint8_t *raw)
{
    if (s->inline_values) {
        uint64_t w = load_word(bucket_at(st, b), j >> 1);
        uint32_t v = (uint32_t)(w >> (32 * (j & 1)));
        memcpy(raw, &v, 4);
    } else {
        memcpy(raw, value_at(s, st, b, j), s->vstride);
    }
}

/* ---- shared between the map's files (tl_hash_map*.c only) ----------------- */

/* A sub-table sized for `target` entries (tl_hash_map.c).  0 or -ENOMEM. */
int store__subtable_new(const store_t *s, uint64_t target, struct subtable **out);
void store__subtable_free(struct subtable *st);

/* Calls fn for every entry of sub-table st of (shard, sub), value in storage
 * format; stops at fn's first non-zero return and returns it
 * (tl_hash_map_iter.c).  The caller is inside an epoch or the writer. */
int store__sub_foreach_raw(const store_t *s, const struct subtable *st, uint32_t shard,
                           uint32_t sub, store_visit_raw_fn fn, void *ctx);

#endif /* TL_STORE_TL_HASH_MAP_IMPL_H */
