/*
 * overlay.c — the overlay table (overlay.h): an immutable open-addressing
 * map of key -> K floats or "deleted", built once from a delta (or a fold's
 * undo) and then read by every request of the versions that hold it.
 *
 * LAYOUT
 *   slots[n]   one slot = key (u64, 0 = empty) | deleted (u32) | K floats,
 *              padded to 8 bytes: a probe that finds its key has its value
 *              in the same line (an LR slot is 16 bytes)
 *   key 0 (the bias) lives in a slot of its own beside the table
 *
 *   n = max_keys / 0.7 (not a power of two: the slot is the high half of
 *   hash x n), linear probing; the table is mapped with transparent huge
 *   pages where the kernel allows them (random probes of a table of tens of
 *   megabytes miss the TLB otherwise).  A request's keys mostly miss (a
 *   delta is a few percent of the model), and a miss at 0.7 reads a few
 *   slots of one or two lines.  Lookups and batched puts hash a group of
 *   keys and prefetch their first lines before they probe the previous
 *   group, as the store's batch does, so the misses overlap.  The hash is
 *   mixed with a per-process random seed: a crafted delta cannot line its
 *   keys up into one long probe run.
 *
 * BUILDING A BIG ONE
 *   A million keys put in delta order land at random slots of a table of
 *   tens of megabytes: a cache miss each, most of the build.  The builder
 *   (model_version.c) instead sorts the records by PARTITION first, the top
 *   bits of the hash, which are the table's slot ranges (the slot is the
 *   high half of hash x n), sized so one range fits in L2, and puts them
 *   partition by partition (model__overlay_put_records): each line of the
 *   table is then fetched once and the probes hit L2.  The table's memory is
 *   faulted in (model__overlay_populate) on a helper thread while the
 *   builder reads the delta, so zeroing fresh pages overlaps that work.
 *
 * Memory: about 1.43 x (12 + 4K, padded to 8) bytes per key, and while a
 * big one is built, its records once more (staged by the builder).
 */
#define _GNU_SOURCE
#include "overlay.h"
#include "model_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>

#define OVERLAY_LOAD 0.7
#define OVERLAY_GROUP 16
#define FILTER_BITS_PER_KEY 8
#define HUGE_MIN ((size_t)2 << 20) /* tables from 2 MiB up are mapped (huge pages) */
#define PART_BYTES ((size_t)256 << 10) /* a partition's slot range: half of a 512 KiB L2 */
#define PART_BITS_MAX 12

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

struct model_overlay {
    _Atomic uint32_t refs;
    uint32_t K;
    size_t stride;  /* bytes per slot */
    uint64_t nslots, max_keys, count, deletes;
    uint8_t *slots; /* nslots * stride */
    size_t map_bytes; /* > 0: slots is an mmap of that size; 0: calloc */
    uint64_t *filter;            /* FILTER_BITS_PER_KEY bits a key, two set per key */
    uint32_t filter_shift;       /* 64 - log2(words): the word is the hash's top bits */
    uint32_t part_bits;          /* build partitions: 1 << part_bits slot ranges */
    bool has_zero, zero_deleted; /* key 0 (the bias row) */
    float *zero_val;             /* K floats */
};

#define SLOT(o, s) ((o)->slots + (s) * (o)->stride)
#define SLOT_KEY(p) (*(uint64_t *)(p))
#define SLOT_DEL(p) (*(uint32_t *)((p) + 8))
#define SLOT_VAL(p) ((float *)((p) + 12))

static uint64_t seed;
static pthread_once_t seed_once = PTHREAD_ONCE_INIT;

static void seed_init(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
    }
    seed = s | 1;
}

static inline uint64_t hash_of(uint64_t key)
{
    uint64_t h = key ^ seed;
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBull;
    return h ^ (h >> 31);
}

static inline uint64_t slot_of_hash(const model_overlay_t *o, uint64_t h)
{
    return (uint64_t)(((unsigned __int128)h * o->nslots) >> 64);
}

/* The filter: one 64-bit word a key, two bits in it (a blocked Bloom filter
 * of one word: one cache line read, about 5% false positives at 8 bits a
 * key).  Bits from the middle of the hash; word from its high bits, as the
 * slot and the build's partition are, so a partition's puts set bits in one
 * stretch of the filter instead of all over it. */
static inline uint64_t filter_bits(uint64_t h)
{
    return (UINT64_C(1) << ((h >> 20) & 63)) | (UINT64_C(1) << ((h >> 26) & 63));
}

static inline uint64_t *filter_word(const model_overlay_t *o, uint64_t h)
{
    return &o->filter[h >> o->filter_shift];
}

static inline bool maybe_has(const model_overlay_t *o, uint64_t h)
{
    uint64_t b = filter_bits(h);
    return (*filter_word(o, h) & b) == b;
}

static inline uint64_t next_slot(const model_overlay_t *o, uint64_t s)
{
    return s + 1 == o->nslots ? 0 : s + 1;
}

static inline void prefetch_slot(const model_overlay_t *o, uint64_t s)
{
    const uint8_t *p = SLOT(o, s);
    __builtin_prefetch(p);
    __builtin_prefetch(p + o->stride - 1); /* a wide or straddling slot's last line */
}

/* `bytes` of zeroed memory starting on a 2 MiB boundary, so every one of its
 * huge pages can be one (an unaligned mapping leaves its first and last
 * 2 MiB in small pages); NULL when the mapping fails. */
static uint8_t *map_huge(size_t bytes)
{
    size_t len = bytes + HUGE_MIN;
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)p + HUGE_MIN - 1) & ~(uintptr_t)(HUGE_MIN - 1));
    if (a > p)
        munmap(p, (size_t)(a - p));
    size_t tail = len - (size_t)(a - p) - bytes;
    if (tail)
        munmap(a + bytes, tail);
    (void)madvise(a, bytes, MADV_HUGEPAGE); /* best effort */
    return a;
}

int model_overlay_create(uint32_t K, uint64_t max_keys, model_overlay_t **out)
{
    if (K == 0 || K > STORE_MAX_VALUE_FLOATS || !out)
        return -EINVAL;
    pthread_once(&seed_once, seed_init);
    size_t stride = (12 + 4 * (size_t)K + 7) & ~(size_t)7;
    uint64_t nslots = (uint64_t)((double)max_keys / OVERLAY_LOAD) + 16;
    if (nslots > (UINT64_C(1) << 42) / stride) /* far past any memory: refuse before multiplying */
        return -ENOMEM;
    model_overlay_t *o = calloc(1, sizeof *o);
    if (!o)
        return -ENOMEM;
    atomic_init(&o->refs, 1);
    o->K = K;
    o->stride = stride;
    o->nslots = nslots;
    o->max_keys = max_keys;
    size_t bytes = nslots * stride;
    if (bytes >= HUGE_MIN) {
        o->slots = map_huge(bytes);
        o->map_bytes = o->slots ? bytes : 0;
    } else {
        o->slots = calloc(nslots, stride);
    }
    uint64_t words = 8;
    while (words * 64 < max_keys * FILTER_BITS_PER_KEY)
        words *= 2;
    o->filter_shift = 64 - (uint32_t)__builtin_ctzll(words); /* words >= 8: shift <= 61 */
    while (o->part_bits < PART_BITS_MAX && (bytes >> o->part_bits) > PART_BYTES)
        o->part_bits++;
    o->filter = calloc(words, sizeof *o->filter);
    o->zero_val = calloc(K, sizeof *o->zero_val);
    if (!o->slots || !o->filter || !o->zero_val) {
        model_overlay_unref(o);
        return -ENOMEM;
    }
    *out = o;
    return 0;
}

/* Puts key (not 0, hash h) at or after its slot. */
static int put_at(model_overlay_t *o, uint64_t key, uint64_t h, const float *value)
{
    uint64_t s = slot_of_hash(o, h);
    uint8_t *p = SLOT(o, s);
    while (SLOT_KEY(p) != 0 && SLOT_KEY(p) != key) {
        s = next_slot(o, s);
        p = SLOT(o, s);
    }
    int fresh = SLOT_KEY(p) == 0;
    if (fresh && o->count >= o->max_keys)
        return -ENOSPC; /* also keeps a slot empty: probes end */
    bool was_del = !fresh && SLOT_DEL(p);
    if (fresh)
        *filter_word(o, h) |= filter_bits(h);
    SLOT_KEY(p) = key;
    SLOT_DEL(p) = !value;
    o->count += (uint64_t)fresh;
    o->deletes += (uint64_t)(!value) - (uint64_t)was_del;
    if (value)
        memcpy(SLOT_VAL(p), value, o->K * sizeof *value);
    return fresh;
}

static int put_zero(model_overlay_t *o, const float *value)
{
    int fresh = !o->has_zero;
    if (fresh && o->count >= o->max_keys)
        return -ENOSPC;
    o->deletes += (uint64_t)(!value) - (uint64_t)(o->has_zero && o->zero_deleted);
    o->count += (uint64_t)fresh;
    o->has_zero = true;
    o->zero_deleted = !value;
    if (value)
        memcpy(o->zero_val, value, o->K * sizeof *value);
    return fresh;
}

int model_overlay_put(model_overlay_t *o, uint64_t key, const float *value)
{
    return key == 0 ? put_zero(o, value) : put_at(o, key, hash_of(key), value);
}

int model_overlay_put_batch(model_overlay_t *o, const uint64_t *keys, size_t n,
                            const float *values, const uint8_t *deleted)
{
    const uint32_t K = o->K;
    uint64_t slot[2][OVERLAY_GROUP]; /* the keys' hashes */
    size_t g = 0, cur = 0;
    for (size_t start = 0; start < n + OVERLAY_GROUP; start += OVERLAY_GROUP, cur ^= 1) {
        size_t m = start < n ? (n - start < OVERLAY_GROUP ? n - start : OVERLAY_GROUP) : 0;
        for (size_t j = 0; j < m; j++) {
            uint64_t h = hash_of(keys[start + j]);
            slot[cur][j] = h;
            prefetch_slot(o, slot_of_hash(o, h));
        }
        if (start > 0) {
            size_t prev = start - OVERLAY_GROUP;
            for (size_t j = 0; j < g; j++) {
                size_t i = prev + j;
                const float *v = deleted[i] ? NULL : values + i * K;
                int rc = keys[i] == 0 ? put_zero(o, v) : put_at(o, keys[i], slot[cur ^ 1][j], v);
                if (rc < 0)
                    return rc;
            }
        }
        g = m;
    }
    return 0;
}

int model_overlay_get(const model_overlay_t *o, uint64_t key, float *out)
{
    if (key == 0) {
        if (!o->has_zero)
            return 0;
        if (o->zero_deleted)
            return 2;
        memcpy(out, o->zero_val, o->K * sizeof *out);
        return 1;
    }
    uint64_t h = hash_of(key);
    if (!maybe_has(o, h))
        return 0;
    for (uint64_t s = slot_of_hash(o, h);; s = next_slot(o, s)) {
        const uint8_t *p = SLOT(o, s);
        if (SLOT_KEY(p) == 0)
            return 0;
        if (SLOT_KEY(p) == key) {
            if (SLOT_DEL(p))
                return 2;
            memcpy(out, SLOT_VAL(p), o->K * sizeof *out);
            return 1;
        }
    }
}

/* Writes what o says of key into row (and *found); untouched when nothing. */
static inline void put_row(const model_overlay_t *o, uint64_t key, uint64_t s, float *row,
                           uint8_t *found)
{
    if (key == 0) {
        if (!o->has_zero)
            return;
        if (o->zero_deleted)
            memset(row, 0, o->K * sizeof *row);
        else
            memcpy(row, o->zero_val, o->K * sizeof *row);
        if (found)
            *found = !o->zero_deleted;
        return;
    }
    const uint8_t *p;
    for (;; s = next_slot(o, s)) {
        p = SLOT(o, s);
        if (SLOT_KEY(p) == 0)
            return;
        if (SLOT_KEY(p) == key)
            break;
    }
    bool del = SLOT_DEL(p) != 0;
    if (del)
        memset(row, 0, o->K * sizeof *row);
    else
        memcpy(row, SLOT_VAL(p), o->K * sizeof *row);
    if (found)
        *found = !del;
}

void model_overlay_lookup(const model_overlay_t *o, const uint64_t *keys, size_t n, float *out,
                          uint8_t *found)
{
    const uint32_t K = o->K;
    if (o->count == 0)
        return;
    /* Three stages a group apart: round r hashes group r and prefetches its
     * filter words, filters group r - 1 and prefetches the slots of the keys
     * that may be there, and probes those of group r - 2.  Most keys are not
     * in a delta: the filter (a byte per delta key) turns them away without
     * touching the table. */
    enum { G = OVERLAY_GROUP };
    uint64_t hash[3][G];
    uint32_t idx[3][G];
    size_t cand[3] = {0, 0, 0};
    for (size_t r = 0, start = 0; start < n + 2 * G; r++, start += G) {
        size_t a = r % 3, b = (r + 2) % 3, c = (r + 1) % 3; /* groups r, r - 1, r - 2 */
        size_t m = start < n ? (n - start < G ? n - start : G) : 0;
        for (size_t j = 0; j < m; j++) {
            uint64_t h = hash_of(keys[start + j]);
            hash[a][j] = h;
            __builtin_prefetch(filter_word(o, h));
        }
        if (start >= G) {
            size_t base = start - G, k = 0;
            size_t mb = base >= n ? 0 : n - base < G ? n - base : G;
            for (size_t j = 0; j < mb; j++) {
                uint64_t h = hash[b][j];
                if (keys[base + j] == 0 || maybe_has(o, h)) {
                    idx[b][k] = (uint32_t)j;
                    hash[b][k++] = h; /* compacted in place: k <= j */
                    prefetch_slot(o, slot_of_hash(o, h));
                }
            }
            cand[b] = k;
        }
        if (start >= 2 * G) {
            size_t base = start - 2 * G;
            for (size_t j = 0; j < cand[c]; j++) {
                size_t i = base + idx[c][j];
                put_row(o, keys[i], slot_of_hash(o, hash[c][j]), out + i * K,
                        found ? found + i : NULL);
            }
        }
    }
}

/* ---- the partitioned build (model_impl.h) ---------------------------------------- */

uint32_t model__overlay_parts(const model_overlay_t *o) { return UINT32_C(1) << o->part_bits; }
size_t model__overlay_record_bytes(const model_overlay_t *o) { return o->stride; }

uint32_t model__overlay_part_of(const model_overlay_t *o, uint64_t key)
{
    return o->part_bits ? (uint32_t)(hash_of(key) >> (64 - o->part_bits)) : 0;
}

void model__overlay_record(const model_overlay_t *o, uint8_t *rec, uint64_t key,
                           const float *value)
{
    SLOT_KEY(rec) = key;
    SLOT_DEL(rec) = !value;
    if (value)
        memcpy(SLOT_VAL(rec), value, o->K * sizeof *value);
}

int model__overlay_put_records(model_overlay_t *o, const uint8_t *recs, size_t n)
{
    enum { G = OVERLAY_GROUP };
    const size_t stride = o->stride;
    uint64_t hash[2][G];
    size_t g = 0, cur = 0;
    for (size_t start = 0; start < n + G; start += G, cur ^= 1) {
        size_t m = start < n ? (n - start < G ? n - start : G) : 0;
        for (size_t j = 0; j < m; j++) {
            uint64_t h = hash_of(SLOT_KEY(recs + (start + j) * stride));
            hash[cur][j] = h;
            prefetch_slot(o, slot_of_hash(o, h));
        }
        if (start > 0) {
            for (size_t j = 0; j < g; j++) {
                const uint8_t *r = recs + (start - G + j) * stride;
                uint64_t key = SLOT_KEY(r);
                const float *v = SLOT_DEL(r) ? NULL : SLOT_VAL(r);
                int rc = key == 0 ? put_zero(o, v) : put_at(o, key, hash[cur ^ 1][j], v);
                if (rc < 0)
                    return rc;
            }
        }
        g = m;
    }
    return 0;
}

void model__overlay_populate(model_overlay_t *o)
{
    /* Last huge page first: a builder writing in table order (the fold's
     * undo) meets this thread in the middle instead of waiting behind it. */
    for (size_t end = o->map_bytes; end > 0;) {
        size_t start = end > HUGE_MIN ? (end - 1) / HUGE_MIN * HUGE_MIN : 0;
        if (madvise(o->slots + start, end - start, MADV_POPULATE_WRITE) != 0)
            return; /* best effort: the puts fault what is left */
        end = start;
    }
}

int model_overlay_foreach(const model_overlay_t *o, model_overlay_fn fn, void *ctx)
{
    int rc;
    if (o->has_zero && (rc = fn(ctx, 0, o->zero_deleted ? NULL : o->zero_val)) != 0)
        return rc;
    for (uint64_t s = 0; s < o->nslots; s++) {
        const uint8_t *p = SLOT(o, s);
        if (SLOT_KEY(p) == 0)
            continue;
        rc = fn(ctx, SLOT_KEY(p), SLOT_DEL(p) ? NULL : SLOT_VAL(p));
        if (rc != 0)
            return rc;
    }
    return 0;
}

uint64_t model_overlay_count(const model_overlay_t *o) { return o->count; }
uint64_t model_overlay_deletes(const model_overlay_t *o) { return o->deletes; }
uint32_t model_overlay_value_floats(const model_overlay_t *o) { return o->K; }

size_t model_overlay_bytes(const model_overlay_t *o)
{
    return sizeof *o + o->nslots * o->stride + o->K * sizeof *o->zero_val;
}

model_overlay_t *model_overlay_ref(model_overlay_t *o)
{
    if (o)
        atomic_fetch_add_explicit(&o->refs, 1, memory_order_relaxed);
    return o;
}

void model_overlay_unref(model_overlay_t *o)
{
    if (!o || atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (o->map_bytes)
        munmap(o->slots, o->map_bytes);
    else
        free(o->slots);
    free(o->filter);
    free(o->zero_val);
    free(o);
}
