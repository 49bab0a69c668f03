/*
 * tl_hash_map.c — the parameter store: a sharded, bucketised cuckoo hash map
 * from 64-bit feature ids to K floats, built to hold 10^8..10^9 keys in less
 * memory than the raw 8-byte key + value.
 *
 * KEY DECOMPOSITION
 *   Every key is first scrambled with a reversible 64-bit mixer (murmur3's
 *   fmix64, whose inverse is below), so x = mix(key) is uniform even for
 *   sequential ids.  Its top bits choose the shard and the sub-table; the
 *   remaining m bits, y, choose the bucket and the fingerprint:
 *
 *     x = [ shard | sub |            y  (m bits)            ]
 *     p = y * B  (128-bit product, B = buckets in the sub-table)
 *     i1 = p >> m                primary bucket, uniform in [0, B)
 *     t  = (p mod 2^m) >> c      "remainder", c = floor(log2 B)
 *
 *   (i1, t) determine y exactly (consecutive y move p mod 2^m by B >= 2^c),
 *   so a slot stores only t: the key bits the bucket index does not already
 *   imply.  The alternate bucket is i2 = (f(t) - i1) mod B, an involution,
 *   and a slot's keypart is (t << 1 | in_alternate), stored inverted so that
 *   zeroed memory means "empty".
 *
 * BUCKET LAYOUT (one 64-byte cache line)
 *   A W-bit keypart is split into an 8-bit tag and a (W-8)-bit rest; a
 *   lookup compares all S tags at once (SSE2) and checks the rest of the
 *   (usually single) candidate.
 *
 *   inline values (value is 4 bytes: K=1 fp32, or K=2 fp16), S slots,
 *   W = min(63, (511 - 32S) / S); at S=7, W=41:
 *     +----------------+-----------+----------------------+---+
 *     | S values x 4 B | S tags x1B| S rests x (W-8) bits | O |
 *     +----------------+-----------+----------------------+---+
 *     byte 0            byte 4S     bit 32S+8S              bit 511
 *   wider values, S slots, W = min(63, 511 / S); at S=12, W=42:
 *     | S tags | S rests | O |     value of slot j of bucket b at
 *                                  values + (b*S + j) * stride
 *   O = the bucket's overflow flag (below).
 *   S is chosen per sub-table to minimise memory subject to load <= max_load
 *   and W >= bits(t) + 1.  At 100M LR keys: S = 7, W = 41, 10.7 B/entry.
 *
 *   Bit 511 of a bucket is its overflow flag: set when a key whose primary
 *   bucket this is gets placed in (or moved to) its alternate bucket, cleared
 *   only by a rebuild.  A lookup reads the primary bucket; only when the key
 *   is not there and the flag is set does it read the alternate (prefetched
 *   in a second pipeline stage).  So most misses cost one cache line, not two.
 *   Keys that cuckoo insertion could not place at all go to a small
 *   per-sub-table stash, read only when it is non-empty.
 *
 * SUB-TABLES AND GROWTH
 *   Each shard has 2^u sub-tables, each its own mmap (2 MiB aligned,
 *   MADV_HUGEPAGE).  When a sub-table passes max_load its writer builds a
 *   larger copy, publishes the new pointer and frees the old one after an
 *   epoch grace period (epoch.c).  Only one sub-table is ever duplicated, so
 *   growth adds 1/(shards*2^u) of the table at the peak, never 2x.
 *
 * BATCHED LOOKUP (store_lookup_batch)
 *   A request looks up tens of thousands of keys at once, each a cache
 *   miss (and, in a VM, a TLB miss: the nested page walk costs as much as
 *   the line), so the batch is a software pipeline with group prefetching:
 *   keys go in groups of LOOKUP_GROUP = 16, and round r runs
 *     stage 1 on group r      hash, locate, prefetch the primary bucket;
 *     stage 2 on group r - 1  read the primary bucket: an inline hit or a
 *                             sure miss (no tag, overflow flag clear) is
 *                             done; an out-of-line hit prefetches its value
 *                             (every line: 68 bytes span two); a possible
 *                             alternate prefetches b2;
 *     stage 3 on group r - 2  copy the values and re-check the versions;
 *                             read the alternates (an out-of-line hit there
 *                             prefetches its value, copied by stage 4 of
 *                             the next round).
 *   Each stage is a tight loop over its group (structure of arrays), so
 *   every line is prefetched a group's worth of work before it is read and
 *   the per-key bookkeeping is small.  Before this (a ring of 32 keys in
 *   flight, values prefetched 16 keys ahead and copied through a stack
 *   buffer and a memcpy call, alternates read without a value prefetch)
 *   one 40,300-key batch (lookup_floor p50, 2-core VM) took 2.8 ms at K=17
 *   on 20M keys, 6.2 ms at K=81 on 5M, 3.7 ms at K=17 fp16 and 0.78 ms at
 *   K=1 on 100M keys; now 1.16, 3.25, 1.22 and 0.66 ms.  Group sizes from 8
 *   to 128 measured the same; interleaving the stages key by key was 10%
 *   slower.
 *   Values are written into the caller's floats directly: fp32 with one
 *   memcpy (plain vector loads; relaxed 4-byte atomic loads, which GCC
 *   gathered into vectors with vpinsrd, made a K=17 lookup 12% slower, and
 *   8-byte ones mispredict on the half of odd-K values that start 4 bytes
 *   off), fp16 with F16C and a plain 16-byte load where the CPU has it,
 *   1.5x faster than half_to_float and 2x faster than calling
 *   store_f16_to_f32 (a value holding an Inf or NaN half takes
 *   the software path, which keeps signalling NaNs as store_f16_to_f32
 *   does).  Anything unusual (an odd or moved version, a non-empty stash)
 *   goes to lookup_one(), the whole seqlock read of one key with its retry
 *   loop, which is also store_lookup() and a batch of one: the trainers'
 *   per-key path, 2x faster than the old pipeline of one key.
 *
 * THREAD SAFETY AND MEMORY ORDERING
 *   One writer per shard (the caller serialises), any number of readers.
 *   - Sub-table pointers: writer publishes with a seq_cst store; readers load
 *     them inside epoch_enter/epoch_exit, so a retired sub-table is freed
 *     only after every reader that could see it has left.
 *   - Bucket contents: each sub-table has a version counter (a seqlock) on
 *     its own cache line.  A writer that changes keyparts or a multi-word
 *     value makes it odd (relaxed store + release fence), writes with relaxed
 *     atomic stores, then makes it even (release store).  A reader loads it
 *     (acquire), reads the buckets with relaxed atomic 64-bit loads (the
 *     SSE2 tag compare excepted, see find_in_words) and out-of-line values
 *     with plain loads (put_value's memcpy and F16C load: the same
 *     exception, a torn copy being rewritten), issues an acquire fence and
 *     reloads it; odd or changed means retry the key.  store_lookup_batch
 *     reads a key's bucket and its value in different stages, all between
 *     the same two version loads, and holds sub-table pointers across
 *     stages inside one epoch.
 *     Cuckoo moves copy an entry to its new slot before clearing the old one,
 *     and a whole path is one write section, so a reader either sees the
 *     state before or after, never a false miss.
 *   - A K=1 fp32 overwrite of an existing key is a single relaxed 64-bit
 *     store of the word that holds the value (the writer owns that word), so
 *     readers see the old or the new float, never a torn one, without a
 *     version bump.
 *   - Counts are relaxed atomics written only by the shard's writer.
 */
#include "epoch.h"
#include "store_internal.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h> /* F16C, compiled per function: see put_f16c */
#endif

/* store_lookup_batch is compiled twice, for x86-64-v3 (BMI2's flag-free
 * shifts, AVX2's byte broadcast: 8% fewer instructions per key) and for the
 * baseline, and the loader picks one by CPU (an ifunc). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define BATCH_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define BATCH_CLONES
#endif
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define BUCKET_BYTES 64
#define BUCKET_WORDS 8
#define STASH_MAX 8
#define BFS_MAX_NODES 512
#define OVERFLOW_WORD 7
#define OVERFLOW_BIT (1ULL << 63) /* bit 511: a key whose primary is this bucket lives in its alternate */
#define LOOKUP_GROUP 16 /* keys per group in store_lookup_batch (8..128 measured flat) */
#define SMALL_BATCH 2   /* smaller batches (one key) skip the pipeline */
#define INSERT_DISTANCE 16   /* records in flight in store_insert_entries */
#define HUGE_PAGE (2u << 20)
#define KEYS_PER_SUBTABLE (1u << 20) /* sizing target at create time */
#define MAX_SUBTABLES 4096
#define GROWTH_FACTOR 1.3

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

static uint64_t unmix64(uint64_t k)
{
    k ^= k >> 33; /* x ^= x >> 33 is its own inverse (33 >= 64/2) */
    k *= 0x9cb4b2f8129337dbULL; /* inverse of 0xc4ceb9fe1a85ec53 mod 2^64 */
    k ^= k >> 33;
    k *= 0x4f74430c22a54005ULL; /* inverse of 0xff51afd7ed558ccd mod 2^64 */
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

static uint64_t seed_unmix(const store_t *s, uint64_t y)
{
    y ^= y >> s->seed_shift; /* self-inverse: 2 * shift >= m */
    return ((y * s->seed_mul_inv) & s->y_mask) ^ s->seed_xor;
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

/* Copies a raw value into the table with relaxed 4-byte atomic stores
 * (seqlock readers copy it with plain loads and discard a torn copy by the
 * version check: put_value).  Whole words are copied with fixed-size loads
 * (a variable-length memcpy into a stack word compiled to a byte loop whose
 * store-to-load forwarding stall cost two thirds of an update); only an
 * fp16 value with an odd K ends in a 2-byte half word, zero-padded. */
static inline void copy_raw_out(uint8_t *dst, const uint8_t *src, uint32_t vbytes)
{
    uint32_t i = 0;
    for (; i + 4 <= vbytes; i += 4) {
        uint32_t w;
        memcpy(&w, src + i, 4);
        __atomic_store_n((uint32_t *)(void *)(dst + i), w, __ATOMIC_RELAXED);
    }
    if (i < vbytes) {
        uint16_t h;
        memcpy(&h, src + i, 2); /* vbytes is a multiple of 2 */
        __atomic_store_n((uint32_t *)(void *)(dst + i), (uint32_t)h, __ATOMIC_RELAXED); /* LE */
    }
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

static inline void f32_to_raw(const store_t *s, const float *in, uint8_t *raw)
{
    if (s->dtype == STORE_DTYPE_F32) {
        memcpy(raw, in, (size_t)s->K * 4);
    } else {
        for (uint32_t i = 0; i < s->K; i++) {
            uint16_t h = store_f32_to_f16(in[i]);
            memcpy(raw + 2 * i, &h, 2);
        }
    }
}

static inline void write_begin(struct subtable *st)
{
    uint32_t v = atomic_load_explicit(&st->version, memory_order_relaxed);
    atomic_store_explicit(&st->version, v + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

static inline void write_end(struct subtable *st)
{
    uint32_t v = atomic_load_explicit(&st->version, memory_order_relaxed);
    atomic_store_explicit(&st->version, v + 1, memory_order_release);
}

/* Marks bucket b as overflowed (writer, inside a write section). */
static inline void set_overflow(struct subtable *st, uint64_t b)
{
    uint8_t *p = st->buckets + b * BUCKET_BYTES;
    uint64_t w = load_word(p, OVERFLOW_WORD);
    if (!(w & OVERFLOW_BIT))
        store_word(p, OVERFLOW_WORD, w | OVERFLOW_BIT);
}

/* ---- memory ------------------------------------------------------------- */

/* Maps zeroed memory; regions of 2 MiB or more start on a huge page boundary
 * and ask for transparent huge pages.  *base and *mapped are what to unmap. */
__attribute__((cold)) static void *map_table(size_t bytes, uint8_t **base, size_t *mapped)
{
    size_t page = 4096;
    bytes = (bytes + page - 1) & ~(page - 1);
    bool huge = bytes >= HUGE_PAGE;
    size_t len = huge ? bytes + HUGE_PAGE : bytes;
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uint8_t *start = p;
    if (huge) {
        uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
        start = (uint8_t *)a;
        if (start > p)
            munmap(p, (size_t)(start - p));
        size_t tail = (size_t)((p + len) - (start + bytes));
        if (tail)
            munmap(start + bytes, tail);
        madvise(start, bytes, MADV_HUGEPAGE);
        *base = start;
        *mapped = bytes;
    } else {
        *base = p;
        *mapped = len;
    }
    return start;
}

static void subtable_free(struct subtable *st)
{
    if (!st)
        return;
    if (st->bucket_map)
        munmap(st->bucket_map, st->bucket_map_bytes);
    if (st->value_map)
        munmap(st->value_map, st->value_map_bytes);
    free(st);
}

/* Chooses S, W and B for a sub-table that must hold `target` entries with the
 * least memory.  See the layout comment at the top. */
static void choose_geometry(const store_t *s, uint64_t target, uint32_t *S_out, uint32_t *W_out,
                            uint64_t *B_out)
{
    double best_mem = 0;
    uint32_t lo = s->inline_values ? 4 : 8, hi = s->inline_values ? 7 : 14;
    for (uint32_t S = hi; S >= lo; S--) {
        /* bit 511 is the bucket's overflow flag */
        uint32_t bits = s->inline_values ? 511 - 32 * S : 511;
        uint32_t W = bits / S > 63 ? 63 : bits / S;
        /* t has m - c bits; need m - c <= W - 1 */
        int32_t c_min = (int32_t)s->m - (int32_t)(W - 1);
        uint64_t B_bits = c_min > 0 ? (uint64_t)1 << c_min : 1;
        double need = (double)target / ((double)S * s->max_load);
        uint64_t B_load = need < 1 ? 1 : (uint64_t)ceil(need);
        uint64_t B = B_bits > B_load ? B_bits : B_load;
        double mem = (double)B * (BUCKET_BYTES + (s->inline_values ? 0 : (double)S * s->vstride));
        if (best_mem == 0 || mem < best_mem) {
            best_mem = mem;
            *S_out = S;
            *W_out = W;
            *B_out = B;
        }
    }
}

static int subtable_new(const store_t *s, uint64_t target, struct subtable **out)
{
    uint32_t S = 0, W = 0;
    uint64_t B = 0;
    choose_geometry(s, target, &S, &W, &B);

    struct subtable *st = aligned_alloc(64, (sizeof *st + (size_t)STASH_MAX * s->vstride + 63) & ~(size_t)63);
    if (!st)
        return -ENOMEM;
    memset(st, 0, sizeof *st);
    st->nbuckets = B;
    st->slots = S;
    st->kp_bits = W;
    st->tag_byte = s->inline_values ? 4 * S : 0;
    st->rest_off = 8 * (st->tag_byte + S);
    st->rest_bits = W - 8;
    st->rest_mask = (1ULL << st->rest_bits) - 1;
    st->slot_mask = (1u << S) - 1;
    st->c_shift = floor_log2(B);
    st->t_shift = 64 - s->m + st->c_shift; /* < 64: B < 2^m */
    st->kp_mask = W == 64 ? ~0ULL : ((1ULL << W) - 1);
    st->capacity = (uint64_t)((double)B * S * s->max_load);
    if (st->capacity == 0)
        st->capacity = 1;
    st->buckets = map_table(B * BUCKET_BYTES, &st->bucket_map, &st->bucket_map_bytes);
    if (!st->buckets)
        goto fail;
    if (!s->inline_values) {
        st->values = map_table(B * S * s->vstride, &st->value_map, &st->value_map_bytes);
        if (!st->values)
            goto fail;
    }
    *out = st;
    return 0;
fail:
    subtable_free(st);
    return -ENOMEM;
}

/* ---- reads -------------------------------------------------------------- */

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

/* IEEE binary16 -> binary32, bit-exact with store_f16_to_f32 (NaN payloads
 * and signalling NaNs included), without its call and normalising loop. */
static inline float half_to_float(uint32_t h)
{
    uint32_t o = (h & 0x7fffu) << 13, e = o & 0x0f800000u;
    float f;
    o += (uint32_t)(127 - 15) << 23;
    if (e == 0x0f800000u) { /* Inf, NaN */
        o += (uint32_t)(128 - 16) << 23;
        memcpy(&f, &o, 4);
    } else if (e == 0) { /* zero, subnormal: exact in float arithmetic */
        o += 1u << 23;
        memcpy(&f, &o, 4);
        f -= 0x1p-14f;
    } else {
        memcpy(&f, &o, 4);
    }
    memcpy(&o, &f, 4);
    o |= (h & 0x8000u) << 16;
    memcpy(&f, &o, 4);
    return f;
}

/* Writes an inline value (4 bytes: K=1 fp32, or K<=2 fp16) as K floats. */
static inline void put_inline(float *dst, uint32_t bits, uint32_t K, bool f16)
{
    if (!f16) {
        float f;
        memcpy(&f, &bits, 4);
        dst[0] = f;
    } else {
        dst[0] = half_to_float(bits & 0xffff);
        if (K == 2)
            dst[1] = half_to_float(bits >> 16);
    }
}

static inline uint32_t load32(const uint8_t *p)
{
    return __atomic_load_n((const uint32_t *)(const void *)p, __ATOMIC_RELAXED);
}

#if defined(__x86_64__) || defined(__i386__)

/* fp16 values with the F16C instructions, 8 halves per step, each read
 * with one plain 16-byte load (a seqlock read: see put_value).  Returns false
 * as soon as it meets an Inf or NaN half (exponent all ones): F16C quiets
 * signalling NaNs where store_f16_to_f32 keeps them, so the caller converts
 * such a value in software.  Not inlined: it is compiled for F16C and runs
 * only where the CPU has it. */
__attribute__((target("f16c"), noinline)) static bool put_f16c(float *dst, const uint8_t *src,
                                                              uint32_t K, uint32_t vstride)
{
    const __m128i expo = _mm_set1_epi16(0x7c00);
    uint32_t i = 0;
    for (; i + 8 <= K; i += 8) {
        const uint8_t *q = src + 2 * i;
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)q);
        if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, expo), expo)))
            return false;
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; 2 * i < vstride; i += 2) { /* the last few halves, two per word */
        __m128i h = _mm_cvtsi32_si128((int)load32(src + 2 * i));
        if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, expo), expo)) & 0xf)
            return false;
        __m128 f = _mm_cvtph_ps(h);
        dst[i] = _mm_cvtss_f32(f);
        if (i + 1 < K)
            dst[i + 1] = _mm_cvtss_f32(_mm_shuffle_ps(f, f, 1));
    }
    return true;
}

/* F16C and the AVX state it needs saved by the OS (CPUID: a VM exit, so
 * asked once per store). */
__attribute__((cold)) static bool cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_F16C) || !(c & bit_AVX) ||
        !(c & bit_OSXSAVE))
        return false;
    uint32_t xcr0_lo, xcr0_hi;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    return (xcr0_lo & 6) == 6; /* SSE and AVX state */
}
#else
static bool put_f16c(float *dst, const uint8_t *src, uint32_t K, uint32_t vstride)
{
    (void)dst, (void)src, (void)K, (void)vstride;
    return false;
}

static bool cpu_has_f16c(void)
{
    return false;
}
#endif

/* Writes an out-of-line value as K floats.  fp32 is one memcpy: plain
 * (vector) loads, like find_in_words' SSE2 tag load, racing with a writer's
 * relaxed 4-byte stores (copy_raw_out); a torn copy is discarded by the
 * caller's version check, which rewrites dst.  12% off a 40,300-id K=17
 * lookup against relaxed 4-byte atomic loads, which GCC gathers into
 * vectors with vpinsrd (score_bench, 2026-11-25: 1.88 -> 1.65 ms). */
static inline void put_value(float *dst, const uint8_t *src, uint32_t K, bool f16, bool f16c,
                             uint32_t vstride)
{
    if (!f16) {
        memcpy(dst, src, (size_t)K * 4);
        return;
    }
    if (f16c && put_f16c(dst, src, K, vstride))
        return;
    for (uint32_t i = 0; 2 * i < vstride; i += 2) {
        uint32_t w = load32(src + 2 * i);
        dst[i] = half_to_float(w & 0xffff);
        if (i + 1 < K)
            dst[i + 1] = half_to_float(w >> 16);
    }
}

static inline void put_zeros(float *dst, uint32_t K)
{
    if (K == 1) /* LR: no memset call per miss */
        dst[0] = 0;
    else
        memset(dst, 0, (size_t)K * sizeof(float));
}

static inline bool version_unchanged(struct subtable *st, uint32_t v)
{
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&st->version, memory_order_relaxed) == v;
}

/* Where key's value is in st's stash, or NULL (seqlock reader). */
static inline const uint8_t *stash_lookup(const store_t *s, struct subtable *st, uint64_t key)
{
    uint32_t n = atomic_load_explicit(&st->stash_n, memory_order_relaxed);
    for (uint32_t i = 0; i < n && i < STASH_MAX; i++)
        if (atomic_load_explicit(&st->stash_keys[i], memory_order_relaxed) == key)
            return stash_value_at(s, st, i);
    return NULL;
}

/* One key from start to finish, retrying while a writer is in the way:
 * store_lookup (the trainers' per-key path) and the keys of a batch that
 * met a writer or a stash.  Writes K floats to out and returns 1 when key
 * is present, 0 (and zeros) when not.  The caller is inside an epoch. */
static int lookup_one(const store_t *s, uint64_t key, float *out)
{
    const uint32_t K = s->K;
    const bool inl = s->inline_values, f16 = s->dtype == STORE_DTYPE_F16;
    const bool f16c = s->f16c;
    struct loc l;
    uint64_t y;
    split_key(s, key, &l.shard, &l.sub, &y);
    struct subtable *st = sub_ptr(s, l.shard, l.sub);
    locate_in(s, st, y, &l);
    for (;;) {
        uint32_t v = atomic_load_explicit(&st->version, memory_order_acquire);
        if (unlikely(v & 1)) {
            cpu_relax();
            continue;
        }
        uint64_t b = l.b1;
        const uint64_t *w = bucket_words(st, b);
        int j = find_in_words(st, w, l.want1), hit = 1;
        if (j < 0 && l.want2 && overflowed(w)) {
            locate_alt(st, &l);
            b = l.b2;
            w = bucket_words(st, b);
            j = find_in_words(st, w, l.want2);
        }
        const uint8_t *val;
        if (j >= 0 && inl) {
            uint64_t word = __atomic_load_n(&w[j >> 1], __ATOMIC_RELAXED);
            put_inline(out, (uint32_t)(word >> (32 * (j & 1))), K, f16);
        } else if (j >= 0) {
            put_value(out, value_at(s, st, b, (uint32_t)j), K, f16, f16c, s->vstride);
        } else if ((val = stash_lookup(s, st, key)) != NULL) {
            if (inl)
                put_inline(out, load32(val), K, f16);
            else
                put_value(out, val, K, f16, f16c, s->vstride);
        } else {
            put_zeros(out, K);
            hit = 0;
        }
        if (likely(version_unchanged(st, v)))
            return hit;
    }
}

/* What lookup_slow needs to finish a key of a batch. */
struct batch {
    const store_t *s;
    const uint64_t *keys;
    float *out;
    uint8_t *found;
    size_t hits;
};

/* lookup_one for key k of a batch: rare, so kept out of the pipeline loop. */
__attribute__((noinline)) static void lookup_slow(struct batch *bt, size_t k)
{
    int hit = lookup_one(bt->s, bt->keys[k], bt->out + k * bt->s->K);
    bt->hits += (size_t)hit;
    if (bt->found)
        bt->found[k] = (uint8_t)hit;
}

/* Prefetches every line of an out-of-line value. */
static inline void prefetch_value(const uint8_t *p, uint32_t vstride)
{
    uintptr_t a = (uintptr_t)p, last = (a + vstride - 1) & ~(uintptr_t)63;
    for (uintptr_t line = a & ~(uintptr_t)63; line <= last; line += 64)
        __builtin_prefetch((const void *)line);
}

/* One group of keys in flight (structure of arrays, indexed by key).
 * Stage 2 finishes most keys; the bits of `value` and `alt` name the keys it
 * leaves to stage 3, so stage 3 visits only those. */
struct group {
    struct subtable *st[LOOKUP_GROUP];
    const uint8_t *b1[LOOKUP_GROUP]; /* primary bucket */
    uint64_t t[LOOKUP_GROUP];        /* remainder; alt: the keypart to find in b2 */
    const uint8_t *p[LOOKUP_GROUP];  /* value: the value; alt: bucket b2 */
    uint32_t v[LOOKUP_GROUP];        /* sub-table version when b1 was read */
    uint32_t value, alt;             /* keys left to stage 3: copy p / search p */
};
_Static_assert(LOOKUP_GROUP <= 32, "group masks are 32 bits");

/* A value found in an alternate bucket: prefetched, copied a round later. */
struct late_value {
    struct subtable *st;
    const uint8_t *p;
    size_t k;   /* index in the batch */
    uint32_t v; /* as in struct group */
};

/* Group prefetching in three stages plus the late values: see BATCHED
 * LOOKUP at the top.  Never blocks (the epoch is entered once, for the
 * whole batch), never allocates. */
BATCH_CLONES
size_t store_lookup_batch(const store_t *s, const uint64_t *keys, size_t n, float *out,
                          uint8_t *found)
{
    const size_t G = LOOKUP_GROUP;
    struct group grp[3];
    struct late_value late[2][LOOKUP_GROUP];
    uint32_t nlate[2] = {0, 0};
    struct batch slow = {s, keys, out, found, 0};
    const uint32_t K = s->K, vstride = s->vstride;
    const bool inl = s->inline_values, f16 = s->dtype == STORE_DTYPE_F16;
    const bool f16c = s->f16c;
    const size_t ngroups = (n + G - 1) / G;
    size_t hits = 0;

    epoch_enter();
    if (n < SMALL_BATCH) { /* nothing to overlap */
        for (size_t k = 0; k < n; k++)
            lookup_slow(&slow, k);
        epoch_exit();
        return slow.hits;
    }
    for (size_t r = 0; r < ngroups + 3; r++) {
        if (r < ngroups) { /* stage 1 */
            struct group *g = &grp[r % 3];
            size_t base = r * G, cnt = n - base < G ? n - base : G;
            for (size_t u = 0; u < cnt; u++) {
                uint64_t b1, t;
                struct subtable *st = locate_top(s, keys[base + u], &b1, &t);
                const uint8_t *bp = bucket_at(st, b1);
                g->st[u] = st;
                g->b1[u] = bp;
                g->t[u] = t;
                __builtin_prefetch(bp);
            }
        }
        if (r >= 1 && r - 1 < ngroups) { /* stage 2 */
            struct group *g = &grp[(r - 1) % 3];
            size_t base = (r - 1) * G, cnt = n - base < G ? n - base : G;
            g->value = g->alt = 0;
            for (size_t u = 0; u < cnt; u++) {
                struct subtable *st = g->st[u];
                const uint64_t *w = (const uint64_t *)(const void *)g->b1[u];
                uint64_t t = g->t[u];
                size_t k = base + u;
                uint32_t v = atomic_load_explicit(&st->version, memory_order_acquire);
                int j = find_in_words(st, w, ~(t << 1) & st->kp_mask);
                uint64_t want2;
                if (unlikely(v & 1)) {
                    lookup_slow(&slow, k);
                } else if (j >= 0 && inl) {
                    uint64_t word = __atomic_load_n(&w[j >> 1], __ATOMIC_RELAXED);
                    put_inline(out + k * K, (uint32_t)(word >> (32 * (j & 1))), K, f16);
                    if (unlikely(!version_unchanged(st, v))) {
                        lookup_slow(&slow, k);
                        continue;
                    }
                    hits++;
                    if (found)
                        found[k] = 1;
                } else if (j >= 0) {
                    uint64_t b1 = (uint64_t)(g->b1[u] - st->buckets) / BUCKET_BYTES;
                    const uint8_t *val = value_at(s, st, b1, (uint32_t)j);
                    prefetch_value(val, vstride);
                    g->p[u] = val;
                    g->v[u] = v;
                    g->value |= 1u << u;
                } else if (overflowed(w) && (want2 = ~((t << 1) | 1) & st->kp_mask) != 0) {
                    /* want2 == 0: t is all ones, never stored in an alternate */
                    uint64_t b1 = (uint64_t)(g->b1[u] - st->buckets) / BUCKET_BYTES;
                    const uint8_t *b2 = bucket_at(st, alt_bucket(b1, t, st->nbuckets));
                    __builtin_prefetch(b2);
                    g->p[u] = b2;
                    g->t[u] = want2;
                    g->v[u] = v;
                    g->alt |= 1u << u;
                } else if (atomic_load_explicit(&st->stash_n, memory_order_relaxed) == 0 &&
                           likely(version_unchanged(st, v))) {
                    put_zeros(out + k * K, K);
                    if (found)
                        found[k] = 0;
                } else {
                    lookup_slow(&slow, k);
                }
            }
        }
        struct late_value *lv = late[r & 1];
        uint32_t nlv = 0;
        if (r >= 2 && r - 2 < ngroups) { /* stage 3 */
            struct group *g = &grp[(r - 2) % 3];
            size_t base = (r - 2) * G;
            for (uint32_t todo = g->value; todo; todo &= todo - 1) {
                uint32_t u = (uint32_t)__builtin_ctz(todo);
                size_t k = base + u;
                put_value(out + k * K, g->p[u], K, f16, f16c, vstride);
                if (unlikely(!version_unchanged(g->st[u], g->v[u]))) {
                    lookup_slow(&slow, k);
                    continue;
                }
                hits++;
                if (found)
                    found[k] = 1;
            }
            for (uint32_t todo = g->alt; todo; todo &= todo - 1) {
                uint32_t u = (uint32_t)__builtin_ctz(todo);
                struct subtable *st = g->st[u];
                size_t k = base + u;
                const uint64_t *w = (const uint64_t *)(const void *)g->p[u];
                int j = find_in_words(st, w, g->t[u]);
                if (j < 0) { /* absent, unless a stash or a writer says otherwise */
                    if (atomic_load_explicit(&st->stash_n, memory_order_relaxed) == 0 &&
                        likely(version_unchanged(st, g->v[u]))) {
                        put_zeros(out + k * K, K);
                        if (found)
                            found[k] = 0;
                    } else {
                        lookup_slow(&slow, k);
                    }
                    continue;
                }
                if (!inl) {
                    uint64_t b2 = (uint64_t)(g->p[u] - st->buckets) / BUCKET_BYTES;
                    const uint8_t *val = value_at(s, st, b2, (uint32_t)j);
                    prefetch_value(val, vstride);
                    lv[nlv++] = (struct late_value){st, val, k, g->v[u]};
                    continue;
                }
                uint64_t word = __atomic_load_n(&w[j >> 1], __ATOMIC_RELAXED);
                put_inline(out + k * K, (uint32_t)(word >> (32 * (j & 1))), K, f16);
                if (unlikely(!version_unchanged(st, g->v[u]))) {
                    lookup_slow(&slow, k);
                    continue;
                }
                hits++;
                if (found)
                    found[k] = 1;
            }
        }
        nlate[r & 1] = nlv;
        if (r >= 1) { /* stage 4 */
            const struct late_value *pv = late[(r - 1) & 1];
            for (uint32_t u = 0; u < nlate[(r - 1) & 1]; u++) {
                size_t k = pv[u].k;
                put_value(out + k * K, pv[u].p, K, f16, f16c, vstride);
                if (unlikely(!version_unchanged(pv[u].st, pv[u].v))) {
                    lookup_slow(&slow, k);
                    continue;
                }
                hits++;
                if (found)
                    found[k] = 1;
            }
        }
    }
    epoch_exit();
    return hits + slow.hits;
}

int store_lookup(const store_t *s, uint64_t key, float *out)
{
    epoch_enter();
    int hit = lookup_one(s, key, out);
    epoch_exit();
    return hit;
}

/* ---- writes ------------------------------------------------------------- */

/* Writer's view (no seqlock needed: only the writer mutates).  Returns the
 * slot and sets *bucket, or -1; -2 - i for stash entry i. */
static int find_slot(const struct subtable *st, uint64_t key, struct loc *l, uint64_t *bucket)
{
    const uint64_t *w = bucket_words(st, l->b1);
    int j = find_in_words(st, w, l->want1);
    if (j >= 0) {
        *bucket = l->b1;
        return j;
    }
    /* a key sits in its alternate bucket only if its primary overflowed */
    if (l->want2 && overflowed(w)) {
        locate_alt(st, l);
        j = find_in_words(st, bucket_words(st, l->b2), l->want2);
        if (j >= 0) {
            *bucket = l->b2;
            return j;
        }
    }
    uint32_t n = atomic_load_explicit(&st->stash_n, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++)
        if (atomic_load_explicit(&st->stash_keys[i], memory_order_relaxed) == key)
            return -2 - (int)i;
    return -1;
}

static inline uint64_t slot_kp(const struct subtable *st, const uint64_t *words, uint32_t j)
{
    uint64_t tag = ((const uint8_t *)words)[st->tag_byte + j];
    uint64_t rest = get_bits(words, st->rest_off + j * st->rest_bits, st->rest_bits, st->rest_mask);
    return tag | rest << 8;
}

/* Writes keypart kp (stored form) and value raw into slot j of bucket b.
 * Caller is inside write_begin/write_end. */
static inline void word_update(uint8_t *p, unsigned wi, uint64_t clear, uint64_t set)
{
    store_word(p, wi, (load_word(p, wi) & ~clear) | set);
}

static void slot_write(const store_t *s, struct subtable *st, uint64_t b, uint32_t j, uint64_t kp,
                       const uint8_t *raw)
{
    /* word by word, in place: each word is one relaxed atomic store */
    uint8_t *p = bucket_at(st, b);
    uint32_t tb = st->tag_byte + j, tsh = 8 * (tb & 7);
    word_update(p, tb >> 3, 0xffULL << tsh, (kp & 0xff) << tsh);
    uint32_t off = st->rest_off + j * st->rest_bits, lo = off >> 6, sh = off & 63;
    uint64_t rest = kp >> 8;
    word_update(p, lo, st->rest_mask << sh, rest << sh);
    if (sh + st->rest_bits > 64)
        word_update(p, lo + 1, st->rest_mask >> (64 - sh), rest >> (64 - sh));
    if (s->inline_values && raw) {
        uint32_t v;
        memcpy(&v, raw, 4);
        unsigned vsh = 32 * (j & 1);
        word_update(p, j >> 1, 0xffffffffULL << vsh, (uint64_t)v << vsh);
    } else if (raw) {
        copy_raw_out(value_at(s, st, b, j), raw, s->vbytes);
    }
}

/* Reads the raw value of slot j of bucket b (writer side). */
static void slot_value(const store_t *s, const struct subtable *st, uint64_t b, uint32_t j,
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

static int empty_slot(const struct subtable *st, uint64_t b)
{
    return find_in_words(st, bucket_words(st, b), 0); /* stored keypart 0 = empty */
}

struct bfs_node {
    uint64_t bucket;
    int32_t parent;   /* index of parent node, -1 for a root */
    uint32_t slot;    /* slot in the parent's bucket whose entry moves here */
};

static bool on_path(const struct bfs_node *nodes, int32_t i, uint64_t bucket)
{
    for (; i >= 0; i = nodes[i].parent)
        if (nodes[i].bucket == bucket)
            return true;
    return false;
}

/* Moves the entry in slot j of bucket `from` to slot `to_slot` of its other
 * bucket `to`.  Copy first, clear second. */
static void move_entry(const store_t *s, struct subtable *st, uint64_t from, uint32_t j, uint64_t to,
                       uint32_t to_slot)
{
    uint64_t w[BUCKET_WORDS];
    load_bucket(st, from, w);
    uint64_t kp = ~slot_kp(st, w, j) & st->kp_mask; /* logical keypart */
    uint64_t nkp = ~(kp ^ 1) & st->kp_mask;         /* flip "in alternate" */
    uint8_t raw[STORE_MAX_VALUE_FLOATS * 4];
    slot_value(s, st, from, j, raw);
    slot_write(s, st, to, to_slot, nkp, raw);
    slot_write(s, st, from, j, 0, NULL);
    if (!(kp & 1)) /* left its primary bucket */
        set_overflow(st, from);
}

/* Inserts a key known to be absent.  Returns 0, or -ENOSPC when neither a
 * cuckoo path nor the stash has room (the caller grows the sub-table). */
static int place_new(const store_t *s, struct subtable *st, uint64_t key, struct loc *l,
                     const uint8_t *raw)
{
    locate_alt(st, l);
    int j = empty_slot(st, l->b1);
    if (j >= 0) {
        write_begin(st);
        slot_write(s, st, l->b1, (uint32_t)j, l->want1, raw);
        write_end(st);
        return 0;
    }
    if (l->want2) {
        j = empty_slot(st, l->b2);
        if (j >= 0) {
            write_begin(st);
            slot_write(s, st, l->b2, (uint32_t)j, l->want2, raw);
            set_overflow(st, l->b1);
            write_end(st);
            return 0;
        }
    }

    /* Breadth-first search for a short chain of moves that frees a slot. */
    static _Thread_local struct bfs_node nodes[BFS_MAX_NODES];
    int32_t n = 0, head = 0;
    nodes[n++] = (struct bfs_node){l->b1, -1, 0};
    if (l->want2 && l->b2 != l->b1)
        nodes[n++] = (struct bfs_node){l->b2, -1, 0};
    while (head < n) {
        int32_t cur = head++;
        uint64_t b = nodes[cur].bucket;
        int e = cur < 2 && nodes[cur].parent < 0 ? -1 : empty_slot(st, b);
        if (e >= 0) {
            /* Execute the path from the free end back to the root. */
            write_begin(st);
            int32_t i = cur;
            uint32_t free_slot = (uint32_t)e;
            while (nodes[i].parent >= 0) {
                int32_t p = nodes[i].parent;
                move_entry(s, st, nodes[p].bucket, nodes[i].slot, nodes[i].bucket, free_slot);
                free_slot = nodes[i].slot;
                i = p;
            }
            bool in_alt = nodes[i].bucket != l->b1;
            slot_write(s, st, nodes[i].bucket, free_slot, in_alt ? l->want2 : l->want1, raw);
            if (in_alt)
                set_overflow(st, l->b1);
            write_end(st);
            return 0;
        }
        uint64_t w[BUCKET_WORDS];
        load_bucket(st, b, w);
        for (uint32_t k = 0; k < st->slots && n < BFS_MAX_NODES; k++) {
            uint64_t kp = ~slot_kp(st, w, k) & st->kp_mask;
            if ((kp ^ 1) == st->kp_mask)
                continue; /* would become all ones (empty) in its other bucket */
            uint64_t other = alt_bucket(b, kp >> 1, st->nbuckets);
            if (other == b || on_path(nodes, cur, other))
                continue;
            __builtin_prefetch(bucket_at(st, other)); /* checked a level later */
            nodes[n++] = (struct bfs_node){other, cur, k};
        }
    }

    uint32_t sn = atomic_load_explicit(&st->stash_n, memory_order_relaxed);
    if (sn >= STASH_MAX)
        return -ENOSPC;
    write_begin(st);
    copy_raw_out(stash_value_at(s, st, sn), raw, s->vbytes);
    atomic_store_explicit(&st->stash_keys[sn], key, memory_order_relaxed);
    atomic_store_explicit(&st->stash_n, sn + 1, memory_order_relaxed);
    write_end(st);
    return 0;
}

struct rebuild_ctx {
    const store_t *s;
    struct subtable *dst;
    uint32_t shard, sub;
    int err;
};

static int sub_foreach_raw(const store_t *s, const struct subtable *st, uint32_t shard, uint32_t sub,
                           store_visit_raw_fn fn, void *ctx);

static int copy_into(void *vctx, uint64_t key, const void *raw)
{
    struct rebuild_ctx *c = vctx;
    uint32_t shard, sub;
    uint64_t y;
    struct loc l;
    split_key(c->s, key, &shard, &sub, &y);
    locate_in(c->s, c->dst, y, &l);
    if (place_new(c->s, c->dst, key, &l, raw) != 0)
        return -ENOSPC;
    atomic_fetch_add_explicit(&c->dst->count, 1, memory_order_relaxed);
    return 0;
}

/* Replaces sub-table (shard, sub) by a copy sized for at least `target`
 * entries.  Readers keep using the old one until they leave their epoch. */
__attribute__((cold)) static int rebuild(store_t *s, uint32_t shard, uint32_t sub, uint64_t target)
{
    struct subtable *old = sub_ptr(s, shard, sub);
    uint64_t count = atomic_load_explicit(&old->count, memory_order_relaxed);
    if (target < count)
        target = count;
    for (int attempt = 0; attempt < 8; attempt++) {
        struct subtable *nt;
        int rc = subtable_new(s, target, &nt);
        if (rc)
            return rc;
        struct rebuild_ctx c = {s, nt, shard, sub, 0};
        if (sub_foreach_raw(s, old, shard, sub, copy_into, &c) == 0) {
            atomic_store_explicit(&s->subs[(size_t)shard * s->nsubs + sub], nt, memory_order_seq_cst);
            atomic_fetch_add_explicit(&s->shards[shard].rebuilds, 1, memory_order_relaxed);
            epoch_synchronize();
            subtable_free(old);
            return 0;
        }
        subtable_free(nt); /* unlucky cuckoo cycle: try a little larger */
        target = target + target / 8 + 64;
    }
    return -ENOMEM;
}

/* Upsert of a key already located in st (l filled by locate_in). */
static int upsert_located(store_t *s, struct subtable *st, struct loc *l, uint64_t y, uint64_t key,
                          const uint8_t *raw)
{
    const uint32_t shard = l->shard, sub = l->sub;
    uint64_t b = 0;
    int j = find_slot(st, key, l, &b);
    if (j >= 0) {
        if (s->inline_values) { /* one 64-bit store: never torn */
            uint8_t *p = bucket_at(st, b);
            unsigned wi = (unsigned)j >> 1, sh = 32 * ((unsigned)j & 1);
            uint32_t v;
            memcpy(&v, raw, 4);
            uint64_t w = load_word(p, wi);
            store_word(p, wi, (w & ~(0xffffffffULL << sh)) | ((uint64_t)v << sh));
        } else {
            write_begin(st);
            copy_raw_out(value_at(s, st, b, (uint32_t)j), raw, s->vbytes);
            write_end(st);
        }
        return 0;
    }
    if (j <= -2) {
        write_begin(st);
        copy_raw_out(stash_value_at(s, st, (uint32_t)(-2 - j)), raw, s->vbytes);
        write_end(st);
        return 0;
    }

    for (;;) {
        uint64_t count = atomic_load_explicit(&st->count, memory_order_relaxed);
        int rc = -ENOSPC;
        if (count < st->capacity)
            rc = place_new(s, st, key, l, raw);
        if (rc == 0) {
            atomic_store_explicit(&st->count, count + 1, memory_order_relaxed);
            return 1;
        }
        /* grow from the larger of count and capacity, so that a table that
         * failed below its capacity still ends up strictly larger */
        uint64_t base = count + 1 > st->capacity ? count + 1 : st->capacity;
        uint64_t target = (uint64_t)((double)base * GROWTH_FACTOR) + 16;
        rc = rebuild(s, shard, sub, target);
        if (rc)
            return rc;
        st = sub_ptr(s, shard, sub);
        locate_in(s, st, y, l);
    }
}

static int upsert_raw(store_t *s, uint64_t key, const uint8_t *raw)
{
    struct loc l;
    uint64_t y;
    split_key(s, key, &l.shard, &l.sub, &y);
    struct subtable *st = sub_ptr(s, l.shard, l.sub);
    locate_in(s, st, y, &l);
    return upsert_located(s, st, &l, y, key, raw);
}

/* Values are stored vstride bytes wide (vbytes rounded up to 4): zero the
 * last word, so the padding is zero, without clearing the whole 4 KiB
 * buffer on every write. */
static inline void zero_pad(const store_t *s, uint8_t *raw)
{
    memset(raw + s->vstride - 4, 0, 4);
}

int store_upsert_raw(store_t *s, uint64_t key, const void *raw)
{
    uint8_t buf[STORE_MAX_VALUE_FLOATS * 4];
    zero_pad(s, buf);
    memcpy(buf, raw, s->vbytes);
    return upsert_raw(s, key, buf);
}

int store_upsert(store_t *s, uint64_t key, const float *value)
{
    uint8_t raw[STORE_MAX_VALUE_FLOATS * 4];
    zero_pad(s, raw);
    f32_to_raw(s, value, raw);
    return upsert_raw(s, key, raw);
}

int store_delete(store_t *s, uint64_t key)
{
    uint32_t shard, sub;
    uint64_t y;
    split_key(s, key, &shard, &sub, &y);
    struct subtable *st = sub_ptr(s, shard, sub);
    struct loc l;
    locate_in(s, st, y, &l);
    uint64_t b = 0;
    int j = find_slot(st, key, &l, &b);
    if (j == -1)
        return 0;
    write_begin(st);
    if (j >= 0) {
        slot_write(s, st, b, (uint32_t)j, 0, NULL);
    } else {
        uint32_t i = (uint32_t)(-2 - j);
        uint32_t last = atomic_load_explicit(&st->stash_n, memory_order_relaxed) - 1;
        if (i != last) {
            uint64_t k = atomic_load_explicit(&st->stash_keys[last], memory_order_relaxed);
            uint8_t raw[STORE_MAX_VALUE_FLOATS * 4];
            memcpy(raw, stash_value_at(s, st, last), s->vstride);
            copy_raw_out(stash_value_at(s, st, i), raw, s->vbytes);
            atomic_store_explicit(&st->stash_keys[i], k, memory_order_relaxed);
        }
        atomic_store_explicit(&st->stash_n, last, memory_order_relaxed);
    }
    write_end(st);
    atomic_fetch_sub_explicit(&st->count, 1, memory_order_relaxed);
    return 1;
}

static inline uint64_t shard_rebuilds(const store_t *s, uint32_t shard)
{
    return atomic_load_explicit(&s->shards[shard].rebuilds, memory_order_relaxed);
}

int store_insert_entries(store_t *s, uint32_t shard, const uint8_t *entries, size_t n, size_t *bad)
{
    const size_t rec = 8 + s->vbytes;
    struct loc ring[INSERT_DISTANCE];
    uint64_t ring_y[INSERT_DISTANCE];
    uint64_t ring_gen[INSERT_DISTANCE]; /* shard's rebuild count when located */
    uint8_t raw[STORE_MAX_VALUE_FLOATS * 4] = {0};
    if (shard >= s->nshards)
        return -EINVAL;
    /* A ring of located records: record i + D is located and its buckets
     * prefetched (for writing) while record i is inserted. */
    for (size_t i = 0; i < n + INSERT_DISTANCE; i++) {
        if (i >= INSERT_DISTANCE) {
            size_t k = i - INSERT_DISTANCE;
            unsigned r = k % INSERT_DISTANCE;
            int rc = -EXDEV;
            if (ring[r].shard == shard) {
                uint64_t key;
                memcpy(&key, entries + k * rec, 8);
                memcpy(raw, entries + k * rec + 8, s->vbytes);
                /* locate again only if a sub-table of the shard was rebuilt
                 * since (a counter, not the pointer: a new sub-table may
                 * reuse a freed one's address) */
                struct subtable *st = sub_ptr(s, shard, ring[r].sub);
                if (unlikely(shard_rebuilds(s, shard) != ring_gen[r])) {
                    locate_in(s, st, ring_y[r], &ring[r]);
                    locate_alt(st, &ring[r]);
                }
                rc = upsert_located(s, st, &ring[r], ring_y[r], key, raw);
                if (rc == 1)
                    rc = 0;
                else if (rc == 0)
                    rc = -EEXIST;
            }
            if (rc) {
                if (bad)
                    *bad = k;
                return rc;
            }
        }
        if (i < n) {
            unsigned r = i % INSERT_DISTANCE;
            uint64_t key;
            memcpy(&key, entries + i * rec, 8);
            split_key(s, key, &ring[r].shard, &ring[r].sub, &ring_y[r]);
            if (ring[r].shard == shard) {
                struct subtable *st = sub_ptr(s, shard, ring[r].sub);
                ring_gen[r] = shard_rebuilds(s, shard);
                locate_in(s, st, ring_y[r], &ring[r]);
                locate_alt(st, &ring[r]);
                __builtin_prefetch(bucket_at(st, ring[r].b1), 1);
                __builtin_prefetch(bucket_at(st, ring[r].b2), 1);
            }
        }
    }
    return 0;
}

/* ---- ordered fill (the snapshot loader) ---------------------------------- */

/* A snapshot holds its store's entries in bucket order (sub-table by
 * sub-table, bucket by bucket; a store of other sizes than the loader's is
 * re-placed into the loader's sizes first, snapshot.c relay_shard), and a
 * load creates its store with the writer's hash seed and the same sizes, so
 * record i's bucket in the writer is one of its two buckets here too, and
 * those buckets never go backwards within a sub-table.  The filler puts
 * each record there, so a sub-table is
 * written front to back (its lines stream through the cache) instead of at
 * random: 2x faster at 100M keys than store_insert_entries, which waits on
 * two random lines per record (4.99 -> 2.25-2.41 s of CPU for the whole
 * load).  The cursor's bucket fills from slot 0 up, so a record takes the
 * next slot without a search, written with plain stores (fill_write).
 * The store is not published while it fills, so no write takes the seqlock.
 *
 *   in order   of the record's buckets b1 and b2, the nearer one at or after
 *              the sub-table's cursor (the highest bucket filled so far; the
 *              other bucket is anywhere) is within FILL_AHEAD of it and has
 *              a free slot: the record goes there, after a check that the
 *              bucket lacks its keypart.  One placed in b2 is queued: b1
 *              still needs its overflow flag and a check that it does not
 *              hold the same key.
 *   queued     checked and flagged, with b1 prefetched a few entries ahead,
 *              when the stream leaves the sub-table (or before records set
 *              aside go in).  The sub-table is then sealed: every in-order
 *              placement into it is done, so two records of one key have
 *              met, in one bucket's check or in the queue's check; a later
 *              record of a sealed sub-table goes aside.  While the queue is
 *              full, records bound for b2 go aside.
 *   aside      everything else (no bucket near the cursor, the bucket full,
 *              a sealed sub-table) is copied aside and inserted with
 *              store_insert_entries once every sub-table is sealed, so that
 *              the overflow flags it relies on are true; from then on every
 *              record goes aside.  That happens when the copies fill their
 *              buffer, and at finish: a file in another order degrades to
 *              store_insert_entries plus a copy.
 */
#define FILL_AHEAD 16              /* buckets after the cursor that count as in order */
#define FILL_QUEUE (256u << 10)    /* queued b2 placements (16 B each) */
#define FILL_ASIDE_BYTES (4u << 20) /* out-of-order records kept before inserting them */
#define FILL_PREFETCH 16           /* queue entries prefetched ahead while checking */

struct fill_alt {
    uint64_t b1, want1;
};

struct store_filler {
    store_t *s;
    uint32_t shard;
    uint32_t cur;              /* sub-table of the queue; nsubs = none yet */
    uint64_t *cursor;          /* [sub]: highest bucket filled in order */
    uint32_t *nfill;           /* [sub]: slots taken in the cursor's bucket */
    bool *sealed;              /* [sub]: queue checked; records go aside */
    struct fill_alt *queue;    /* FILL_QUEUE entries, of sub-table cur */
    uint32_t nqueue;
    uint8_t *aside;            /* FILL_ASIDE_BYTES / rec records */
    size_t naside, aside_cap;
    uint64_t in_order, set_aside; /* records so far, by the way they went */
};

int store_filler_new(store_t *s, uint32_t shard, store_filler_t **out)
{
    if (shard >= s->nshards || store_shard_count(s, shard) != 0)
        return -EINVAL; /* fill_in_order relies on empty buckets */
    store_filler_t *f = calloc(1, sizeof *f);
    size_t rec = 8 + s->vbytes;
    if (f) {
        *f = (store_filler_t){.s = s, .shard = shard, .cur = s->nsubs,
                              .aside_cap = FILL_ASIDE_BYTES / rec};
        f->cursor = calloc(s->nsubs, sizeof *f->cursor);
        f->nfill = calloc(s->nsubs, sizeof *f->nfill);
        f->sealed = calloc(s->nsubs, sizeof *f->sealed);
        f->queue = malloc(FILL_QUEUE * sizeof *f->queue); /* pages touched as used */
        f->aside = malloc(f->aside_cap * rec);
    }
    if (!f || !f->cursor || !f->nfill || !f->sealed || !f->queue || !f->aside) {
        store_filler_free(f);
        return -ENOMEM;
    }
    *out = f;
    return 0;
}

void store_filler_free(store_filler_t *f)
{
    if (!f)
        return;
    free(f->cursor);
    free(f->nfill);
    free(f->sealed);
    free(f->queue);
    free(f->aside);
    free(f);
}

/* Checks and flags the queued b2 placements of sub-table f->cur, and seals
 * it.  -EEXIST when a b1 already holds the queued key. */
static int fill_seal(store_filler_t *f)
{
    if (f->cur >= f->s->nsubs)
        return 0;
    struct subtable *st = sub_ptr(f->s, f->shard, f->cur);
    const struct fill_alt *q = f->queue;
    for (uint32_t i = 0; i < f->nqueue; i++) {
        if (i + FILL_PREFETCH < f->nqueue)
            __builtin_prefetch(bucket_at(st, q[i + FILL_PREFETCH].b1), 1);
        if (find_in_words(st, bucket_words(st, q[i].b1), q[i].want1) >= 0)
            return -EEXIST;
        set_overflow(st, q[i].b1);
    }
    f->nqueue = 0;
    f->sealed[f->cur] = true;
    f->cur = f->s->nsubs;
    return 0;
}

/* Seals every sub-table, then inserts the records set aside. */
static int fill_aside(store_filler_t *f)
{
    int rc = fill_seal(f);
    if (rc || f->naside == 0)
        return rc;
    for (uint32_t u = 0; u < f->s->nsubs; u++)
        f->sealed[u] = true;
    size_t bad;
    rc = store_insert_entries(f->s, f->shard, f->aside, f->naside, &bad);
    f->naside = 0;
    return rc;
}

/* Writes keypart kp and value raw into slot j of bucket b, whose bits are
 * all zero and which no reader can see: plain stores and ORs, no
 * read-modify-write of other slots' bits. */
static inline void fill_write(const store_t *s, struct subtable *st, uint64_t b, uint32_t j,
                              uint64_t kp, const uint8_t *raw)
{
    uint8_t *p = bucket_at(st, b);
    uint64_t *w = (uint64_t *)(void *)p;
    p[st->tag_byte + j] = (uint8_t)kp;
    uint32_t off = st->rest_off + j * st->rest_bits, lo = off >> 6, sh = off & 63;
    uint64_t rest = kp >> 8;
    w[lo] |= rest << sh;
    if (sh + st->rest_bits > 64)
        w[lo + 1] |= rest >> (64 - sh);
    if (s->inline_values)
        memcpy(p + 4 * j, raw, 4); /* value j is bytes 4j..4j+3 (little-endian words) */
    else
        memcpy(value_at(s, st, b, j), raw, s->vbytes); /* padding stays zero */
}

/* Places one record of sub-table sub in order; false when it must go aside. */
static inline bool fill_in_order(store_filler_t *f, uint32_t sub, uint64_t y, const uint8_t *p)
{
    store_t *s = f->s;
    struct subtable *st = sub_ptr(s, f->shard, sub);
    uint64_t count = atomic_load_explicit(&st->count, memory_order_relaxed);
    if (count >= st->capacity)
        return false;
    struct loc l;
    locate_in(s, st, y, &l);
    /* The writer's bucket is the nearer one at or after the cursor: the other
     * is anywhere.  (Taking a farther one would move the cursor past buckets
     * whose records are still to come.)  Distances are unsigned: a bucket
     * behind the cursor is far. */
    const uint64_t c = f->cursor[sub];
    uint64_t d1 = l.b1 - c, d2 = UINT64_MAX;
    if (d1 != 0) {
        locate_alt(st, &l);
        if (l.want2 && l.b2 != l.b1)
            d2 = l.b2 - c;
    }
    uint64_t w = l.b1, want = l.want1;
    if (d2 < d1) {
        if (d2 > FILL_AHEAD || f->nqueue == FILL_QUEUE)
            return false;
        w = l.b2;
        want = l.want2;
    } else if (d1 > FILL_AHEAD) {
        return false;
    }
    /* The cursor's bucket fills from slot 0 up; a bucket after it is empty
     * (in-order placements never go back, nothing else writes here yet). */
    uint32_t j = w == c ? f->nfill[sub] : 0;
    if (j == st->slots || (j > 0 && find_in_words(st, bucket_words(st, w), want) >= 0))
        return false; /* full, or a duplicate: store_insert_entries will name it */
    if (w != l.b1) {
        f->cur = sub; /* store_filler_add sealed any other */
        f->queue[f->nqueue++] = (struct fill_alt){l.b1, l.want1};
    }
    fill_write(s, st, w, j, want, p + 8);
    atomic_store_explicit(&st->count, count + 1, memory_order_relaxed);
    f->cursor[sub] = w;
    f->nfill[sub] = j + 1;
    return true;
}

int store_filler_add(store_filler_t *f, const uint8_t *entries, size_t n)
{
    store_t *s = f->s;
    const size_t rec = 8 + s->vbytes;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = entries + i * rec;
        uint64_t key;
        memcpy(&key, p, 8);
        uint32_t shard, sub;
        uint64_t y;
        split_key(s, key, &shard, &sub, &y);
        if (shard != f->shard)
            return -EXDEV;
        if (sub != f->cur && f->cur < s->nsubs) { /* the stream left sub-table cur */
            int rc = fill_seal(f);
            if (rc)
                return rc;
        }
        if (!f->sealed[sub] && fill_in_order(f, sub, y, p)) {
            f->in_order++;
            continue;
        }
        f->set_aside++;
        if (f->naside == f->aside_cap) {
            int rc = fill_aside(f);
            if (rc)
                return rc;
        }
        memcpy(f->aside + f->naside++ * rec, p, rec);
    }
    return 0;
}

int store_filler_finish(store_filler_t *f)
{
    return fill_aside(f);
}

int store_key_buckets(const store_t *s, uint64_t key, uint64_t cand[2], uint64_t *holder)
{
    struct loc l;
    uint64_t y, b = 0;
    split_key(s, key, &l.shard, &l.sub, &y);
    struct subtable *st = sub_ptr(s, l.shard, l.sub);
    locate_in(s, st, y, &l);
    locate_alt(st, &l);
    cand[0] = l.b1;
    cand[1] = l.want2 ? l.b2 : l.b1;
    int j = find_slot(st, key, &l, &b);
    if (j < 0)
        return j == -1 ? 0 : -1;
    *holder = b;
    return 1;
}

void store_filler_counts(const store_filler_t *f, uint64_t *in_order, uint64_t *set_aside)
{
    *in_order = f->in_order;
    *set_aside = f->set_aside;
}

/* ---- sizing ------------------------------------------------------------- */

int store_reserve_sub(store_t *s, uint32_t shard, uint32_t sub, uint64_t keys)
{
    if (shard >= s->nshards || sub >= s->nsubs)
        return -EINVAL;
    struct subtable *st = sub_ptr(s, shard, sub);
    if (st->capacity >= keys)
        return 0;
    return rebuild(s, shard, sub, keys);
}

uint64_t store_sub_count(const store_t *s, uint32_t shard, uint32_t sub)
{
    if (shard >= s->nshards || sub >= s->nsubs)
        return 0;
    return atomic_load_explicit(&sub_ptr(s, shard, sub)->count, memory_order_relaxed);
}

bool store_shard_layout_equal(const store_t *a, const store_t *b, uint32_t shard)
{
    if (a->nshards != b->nshards || a->nsubs != b->nsubs || a->hash_seed != b->hash_seed ||
        a->K != b->K || a->dtype != b->dtype || shard >= a->nshards)
        return false;
    for (uint32_t u = 0; u < a->nsubs; u++) {
        const struct subtable *x = sub_ptr(a, shard, u), *y = sub_ptr(b, shard, u);
        if (x->nbuckets != y->nbuckets || x->slots != y->slots || x->kp_bits != y->kp_bits)
            return false;
    }
    return true;
}

int store_reserve_shard(store_t *s, uint32_t shard, uint64_t keys)
{
    if (shard >= s->nshards)
        return -EINVAL;
    double per = (double)keys / s->nsubs;
    /* binomial spread of keys over sub-tables: mean + 4 sigma + slack */
    uint64_t want = (uint64_t)(per + 4.0 * sqrt(per) + 16.0);
    for (uint32_t u = 0; u < s->nsubs; u++) {
        int rc = store_reserve_sub(s, shard, u, want);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- iteration ---------------------------------------------------------- */

static int sub_foreach_raw(const store_t *s, const struct subtable *st, uint32_t shard, uint32_t sub,
                           store_visit_raw_fn fn, void *ctx)
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
        epoch_enter();
        rc = sub_foreach_raw(s, sub_ptr(s, shard, u), shard, u, fn, ctx);
        epoch_exit();
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

/* ---- lifecycle and accessors -------------------------------------------- */

int store_options_check(const store_options_t *opt, char *why, size_t why_len)
{
    char dummy[1];
    if (!why) {
        why = dummy;
        why_len = sizeof dummy;
    }
    if (!opt) {
        snprintf(why, why_len, "store options: NULL");
        return -EINVAL;
    }
    if (opt->value_floats < 1 || opt->value_floats > STORE_MAX_VALUE_FLOATS) {
        snprintf(why, why_len, "store options: value_floats is %u, must be 1..%d",
                 opt->value_floats, STORE_MAX_VALUE_FLOATS);
        return -EINVAL;
    }
    if (opt->dtype != STORE_DTYPE_F32 && opt->dtype != STORE_DTYPE_F16) {
        snprintf(why, why_len, "store options: dtype is %d, must be f32 (0) or f16 (1)",
                 (int)opt->dtype);
        return -EINVAL;
    }
    if (opt->shards != 0 &&
        (opt->shards > STORE_MAX_SHARDS || (opt->shards & (opt->shards - 1)) != 0)) {
        snprintf(why, why_len, "store options: shards is %u, must be a power of two 1..%d",
                 opt->shards, STORE_MAX_SHARDS);
        return -EINVAL;
    }
    if (opt->max_load != 0 && !(opt->max_load >= 0.3 && opt->max_load <= 0.98)) {
        snprintf(why, why_len, "store options: max_load is %g, must be 0.3..0.98", opt->max_load);
        return -EINVAL;
    }
    if (opt->expected_keys > (1ULL << 40)) {
        snprintf(why, why_len, "store options: expected_keys is %llu, more than 2^40",
                 (unsigned long long)opt->expected_keys);
        return -EINVAL;
    }
    return 0;
}

/* seed_mix's constants from `seed` (0: a random one). */
__attribute__((cold)) static void seed_init(store_t *s, uint64_t seed)
{
    static _Atomic uint64_t stores_created;
    uint64_t r = seed;
    if (r == 0) {
        if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            r = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32);
        }
        r = mix64(r + atomic_fetch_add(&stores_created, 1) * 0x9e3779b97f4a7c15ULL);
        r += r == 0; /* 0 means "draw one" */
    }
    s->hash_seed = r;
    s->seed_xor = r & s->y_mask;
    s->seed_mul = mix64(r ^ 0x5851f42d4c957f2dULL) | 1; /* odd: invertible mod 2^m */
    uint64_t inv = s->seed_mul; /* Newton: each step doubles the correct low bits */
    for (int i = 0; i < 6; i++)
        inv *= 2 - s->seed_mul * inv;
    s->seed_mul_inv = inv;
    s->seed_shift = (s->m + 1) / 2;
    s->y_shift = 64 - s->m;
    s->sub_shift = s->m - 1;
    s->seed_xor_top = s->seed_xor << s->y_shift;
    s->y_top_mask = ~0ULL << s->y_shift;
}

int store_create(const store_options_t *opt, store_t **out)
{
    int rc = store_options_check(opt, NULL, 0);
    if (rc)
        return rc;
    store_t *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->K = opt->value_floats;
    s->dtype = opt->dtype;
    s->vbytes = s->K * (s->dtype == STORE_DTYPE_F32 ? 4 : 2);
    s->vstride = (s->vbytes + 3) & ~3u;
    s->inline_values = s->vbytes == 4;
    s->f16c = s->dtype == STORE_DTYPE_F16 && !s->inline_values && cpu_has_f16c();
    s->nshards = opt->shards ? opt->shards : 16;
    s->max_load = opt->max_load ? opt->max_load : 0.95;
    s->shard_bits = floor_log2(s->nshards);
    uint64_t per_shard = opt->expected_keys / s->nshards;
    uint32_t nsubs = 1;
    while ((uint64_t)nsubs * KEYS_PER_SUBTABLE < per_shard && nsubs * s->nshards < MAX_SUBTABLES)
        nsubs <<= 1;
    s->nsubs = nsubs;
    s->sub_bits = floor_log2(nsubs);
    s->m = 64 - s->shard_bits - s->sub_bits;
    s->y_mask = s->m == 64 ? ~0ULL : (1ULL << s->m) - 1;
    seed_init(s, opt->hash_seed);

    size_t nsub_total = (size_t)s->nshards * s->nsubs;
    s->subs = calloc(nsub_total, sizeof *s->subs);
    s->shards = aligned_alloc(64, s->nshards * sizeof *s->shards);
    if (!s->subs || !s->shards) {
        rc = -ENOMEM;
        goto fail;
    }
    memset(s->shards, 0, s->nshards * sizeof *s->shards);
    double per_sub = (double)opt->expected_keys / (double)nsub_total;
    uint64_t target = opt->expected_keys ? (uint64_t)(per_sub + 4.0 * sqrt(per_sub) + 16.0) : 0;
    for (size_t i = 0; i < nsub_total; i++) {
        struct subtable *st;
        rc = subtable_new(s, target, &st);
        if (rc)
            goto fail;
        atomic_store_explicit(&s->subs[i], st, memory_order_relaxed);
    }
    *out = s;
    return 0;
fail:
    store_destroy(s);
    return rc;
}

void store_destroy(store_t *s)
{
    if (!s)
        return;
    if (s->subs) {
        for (size_t i = 0; i < (size_t)s->nshards * s->nsubs; i++)
            subtable_free(atomic_load_explicit(&s->subs[i], memory_order_relaxed));
        free(s->subs);
    }
    free(s->shards);
    free(s);
}

uint32_t store_value_floats(const store_t *s) { return s->K; }
store_dtype_t store_dtype(const store_t *s) { return s->dtype; }
uint32_t store_shards(const store_t *s) { return s->nshards; }
uint64_t store_hash_seed(const store_t *s) { return s->hash_seed; }
size_t store_value_bytes(const store_t *s) { return s->vbytes; }
uint32_t store_subs_per_shard(const store_t *s) { return s->nsubs; }

uint32_t store_shard_of(const store_t *s, uint64_t key)
{
    uint32_t shard, sub;
    uint64_t y;
    split_key(s, key, &shard, &sub, &y);
    return shard;
}

uint32_t store_sub_of(const store_t *s, uint64_t key)
{
    uint32_t shard, sub;
    uint64_t y;
    split_key(s, key, &shard, &sub, &y);
    return sub;
}

uint64_t store_shard_count(const store_t *s, uint32_t shard)
{
    if (shard >= s->nshards)
        return 0;
    uint64_t n = 0;
    epoch_enter();
    for (uint32_t u = 0; u < s->nsubs; u++)
        n += atomic_load_explicit(&sub_ptr(s, shard, u)->count, memory_order_relaxed);
    epoch_exit();
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
    epoch_enter();
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
    epoch_exit();
}

void store_layout(const store_t *s, store_layout_t *out)
{
    memset(out, 0, sizeof *out);
    epoch_enter();
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
    epoch_exit();
}
