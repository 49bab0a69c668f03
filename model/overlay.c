/*
 * overlay.c — the overlay table (overlay.h): an immutable open-addressing
 * map of key -> K floats or "deleted", built once from a delta (or a fold's
 * undo) and then read by every request of the versions that hold it.
 *
 * LAYOUT
 *   keys[slots]    u64, 0 = empty (key 0, the bias, lives in its own slot)
 *   vals[slots*K]  the values, by slot
 *   dels[slots/64] one bit per slot: the key is deleted (vals unused)
 *
 *   slots = max_keys / 0.7 (not a power of two: the slot is the high half of
 *   hash x slots), linear probing.  A request's keys mostly miss (a delta is
 *   a few percent of the model), and a miss at 0.7 reads about 6 slots of
 *   one or two lines; the lookup hashes a group of keys and prefetches their
 *   first lines before it probes the previous group, as the store's batch
 *   does, so the misses overlap.  The hash is mixed with a per-process random
 *   seed: a crafted delta cannot line its keys up into one long probe run.
 *
 * Memory: about 1.43 x (8 + 4K) bytes per key, plus the slot bits.
 */
#define _GNU_SOURCE
#include "overlay.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define OVERLAY_LOAD 0.7
#define OVERLAY_GROUP 16

struct model_overlay {
    _Atomic uint32_t refs;
    uint32_t K;
    uint64_t slots, max_keys, count, deletes;
    uint64_t *keys;
    float *vals;
    uint64_t *dels;
    bool has_zero, zero_deleted; /* key 0 (the bias row) */
    float *zero_val;             /* K floats */
};

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

static inline uint64_t slot_of(const model_overlay_t *o, uint64_t key)
{
    uint64_t h = key ^ seed;
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 31;
    return (uint64_t)(((unsigned __int128)h * o->slots) >> 64);
}

static inline bool is_deleted(const model_overlay_t *o, uint64_t slot)
{
    return (o->dels[slot >> 6] >> (slot & 63)) & 1;
}

int model_overlay_create(uint32_t K, uint64_t max_keys, model_overlay_t **out)
{
    if (K == 0 || K > STORE_MAX_VALUE_FLOATS || !out)
        return -EINVAL;
    pthread_once(&seed_once, seed_init);
    uint64_t slots = (uint64_t)((double)max_keys / OVERLAY_LOAD) + 16;
    if (slots > (UINT64_C(1) << 40) / K) /* far past any memory: refuse before multiplying */
        return -ENOMEM;
    model_overlay_t *o = calloc(1, sizeof *o);
    if (!o)
        return -ENOMEM;
    atomic_init(&o->refs, 1);
    o->K = K;
    o->slots = slots;
    o->max_keys = max_keys;
    o->keys = calloc(slots, sizeof *o->keys); /* zero pages: untouched slots cost nothing */
    o->vals = malloc(slots * K * sizeof *o->vals);
    o->dels = calloc((slots + 63) / 64, sizeof *o->dels);
    o->zero_val = calloc(K, sizeof *o->zero_val);
    if (!o->keys || !o->vals || !o->dels || !o->zero_val) {
        model_overlay_unref(o);
        return -ENOMEM;
    }
    *out = o;
    return 0;
}

int model_overlay_put(model_overlay_t *o, uint64_t key, const float *value)
{
    const uint32_t K = o->K;
    if (key == 0) {
        int fresh = !o->has_zero;
        if (fresh && o->count >= o->max_keys)
            return -ENOSPC;
        o->deletes += (uint64_t)(!value) - (uint64_t)(o->has_zero && o->zero_deleted);
        o->count += (uint64_t)fresh;
        o->has_zero = true;
        o->zero_deleted = !value;
        if (value)
            memcpy(o->zero_val, value, K * sizeof *value);
        return fresh;
    }
    uint64_t s = slot_of(o, key);
    while (o->keys[s] != 0 && o->keys[s] != key)
        s = s + 1 == o->slots ? 0 : s + 1;
    int fresh = o->keys[s] == 0;
    if (fresh && o->count >= o->max_keys)
        return -ENOSPC; /* also keeps one slot empty: probes end */
    bool was_del = !fresh && is_deleted(o, s);
    o->keys[s] = key;
    o->count += (uint64_t)fresh;
    o->deletes += (uint64_t)(!value) - (uint64_t)was_del;
    if (value) {
        o->dels[s >> 6] &= ~(UINT64_C(1) << (s & 63));
        memcpy(o->vals + s * K, value, K * sizeof *value);
    } else {
        o->dels[s >> 6] |= UINT64_C(1) << (s & 63);
    }
    return fresh;
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
    uint64_t s = slot_of(o, key);
    for (;;) {
        uint64_t k = o->keys[s];
        if (k == 0)
            return 0;
        if (k == key) {
            if (is_deleted(o, s))
                return 2;
            memcpy(out, o->vals + s * o->K, o->K * sizeof *out);
            return 1;
        }
        s = s + 1 == o->slots ? 0 : s + 1;
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
    for (;;) {
        uint64_t k = o->keys[s];
        if (k == 0)
            return;
        if (k == key)
            break;
        s = s + 1 == o->slots ? 0 : s + 1;
    }
    bool del = is_deleted(o, s);
    if (del)
        memset(row, 0, o->K * sizeof *row);
    else
        memcpy(row, o->vals + s * o->K, o->K * sizeof *row);
    if (found)
        *found = !del;
}

void model_overlay_lookup(const model_overlay_t *o, const uint64_t *keys, size_t n, float *out,
                          uint8_t *found)
{
    const uint32_t K = o->K;
    if (o->count == 0)
        return;
    uint64_t slot[2][OVERLAY_GROUP];
    size_t g = 0, cur = 0;
    /* Round r hashes and prefetches group r, then probes group r - 1. */
    for (size_t start = 0; start < n + OVERLAY_GROUP; start += OVERLAY_GROUP, cur ^= 1) {
        size_t m = start < n ? (n - start < OVERLAY_GROUP ? n - start : OVERLAY_GROUP) : 0;
        for (size_t j = 0; j < m; j++) {
            uint64_t s = slot_of(o, keys[start + j]);
            slot[cur][j] = s;
            __builtin_prefetch(&o->keys[s]);
        }
        if (start > 0) {
            size_t prev = start - OVERLAY_GROUP;
            for (size_t j = 0; j < g; j++)
                put_row(o, keys[prev + j], slot[cur ^ 1][j], out + (prev + j) * K,
                        found ? found + prev + j : NULL);
        }
        g = m;
    }
}

int model_overlay_foreach(const model_overlay_t *o, model_overlay_fn fn, void *ctx)
{
    int rc;
    if (o->has_zero && (rc = fn(ctx, 0, o->zero_deleted ? NULL : o->zero_val)) != 0)
        return rc;
    for (uint64_t s = 0; s < o->slots; s++) {
        if (o->keys[s] == 0)
            continue;
        rc = fn(ctx, o->keys[s], is_deleted(o, s) ? NULL : o->vals + s * o->K);
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
    return sizeof *o + o->slots * (sizeof *o->keys + o->K * sizeof *o->vals) +
           (o->slots + 63) / 64 * sizeof *o->dels + o->K * sizeof *o->zero_val;
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
    free(o->keys);
    free(o->vals);
    free(o->dels);
    free(o->zero_val);
    free(o);
}
