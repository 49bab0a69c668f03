/*
 * tl_hash_map.c — the parameter store: a sharded, bucketised cuckoo hash map
 * from 64-bit feature ids to K floats, built to hold 10^8..10^9 keys in less
 * memory than the raw 8-byte key + value.  This file lays out and creates
 * the table; the rest of the map is split by job:
 *   tl_hash_map_impl.h    structs and the inline locate/bucket helpers
 *   tl_hash_map_lookup.c  the read path (the batched lookup pipeline)
 *   tl_hash_map_write.c   upsert, delete, cuckoo placement, rebuild, reserve
 *   tl_hash_map_fill.c    the snapshot loader's ordered fill
 *   tl_hash_map_iter.c    iteration, counts, stats
 *
 * KEY DECOMPOSITION
 *   Every key is first scrambled with a reversible 64-bit mixer (murmur3's
 *   fmix64, whose inverse is in tl_hash_map_iter.c), so x = mix(key) is uniform even for
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
 * THREAD SAFETY AND MEMORY ORDERING
 *   One writer per shard (the caller serialises), any number of readers.
 *   - Sub-table pointers: writer publishes with a seq_cst store; readers load
 *     them inside store__epoch_enter/store__epoch_exit, so a retired sub-table is freed
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
#include "tl_hash_map_impl.h"

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
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#define HUGE_PAGE (2u << 20)
#define KEYS_PER_SUBTABLE (1u << 20) /* sizing target at create time */
#define MAX_SUBTABLES 4096

/* ---- memory ------------------------------------------------------------- */

/* Maps zeroed memory; regions of 2 MiB or more start on a huge page boundary
 * and ask for transparent huge pages.  *base and *mapped are what to unmap. */
cold static void *map_table(size_t bytes, uint8_t **base, size_t *mapped)
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

void store__subtable_free(struct subtable *st)
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

int store__subtable_new(const store_t *s, uint64_t target, struct subtable **out)
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
    store__subtable_free(st);
    return -ENOMEM;
}

#if defined(__x86_64__) || defined(__i386__)
/* F16C and the AVX state it needs saved by the OS (CPUID: a VM exit, so
 * asked once per store). */
cold static bool cpu_has_f16c(void)
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
static bool cpu_has_f16c(void)
{
    return false;
}
#endif

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
cold static void seed_init(store_t *s, uint64_t seed)
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
        rc = store__subtable_new(s, target, &st);
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
            store__subtable_free(atomic_load_explicit(&s->subs[i], memory_order_relaxed));
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

uint32_t store__shard_of_key(uint64_t key, uint32_t shards)
{
    if (shards <= 1)
        return 0;
    unsigned bits = (unsigned)__builtin_ctz(shards);
    return (uint32_t)(mix64(key) >> (64 - bits));
}

uint32_t store_sub_of(const store_t *s, uint64_t key)
{
    uint32_t shard, sub;
    uint64_t y;
    split_key(s, key, &shard, &sub, &y);
    return sub;
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
