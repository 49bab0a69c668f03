/*
 * tl_hash_map_lookup.c — the store's read path: store_lookup_batch (a
 * request's tens of thousands of keys) and store_lookup (one key: the
 * trainers' per-key path).  Structs, bucket layout and the memory-ordering
 * rules are in tl_hash_map_impl.h and tl_hash_map.c's essay.
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
 *   the per-key bookkeeping is small.  Group sizes from 8 to 128 measure
 *   the same; interleaving the stages key by key is 10% slower.
 *   Values are written into the caller's floats directly: fp32 with one
 *   memcpy (plain vector loads: relaxed 4-byte atomic loads, which GCC
 *   gathers into vectors with vpinsrd, make a K=17 lookup 12% slower, and
 *   8-byte ones mispredict on the half of odd-K values that start 4 bytes
 *   off), fp16 with F16C and a plain 16-byte load where the CPU has it,
 *   1.5x faster than half_to_float and 2x faster than calling
 *   store_f16_to_f32 (a value holding an Inf or NaN half takes
 *   the software path, which keeps signalling NaNs as store_f16_to_f32
 *   does).  Anything unusual (an odd or moved version, a non-empty stash)
 *   goes to lookup_one(), the whole seqlock read of one key with its retry
 *   loop, which is also store_lookup() and a batch of one.
 *
 * THREAD SAFETY: readers only; any number of threads, alongside the shards'
 * writers.  A reader loads a sub-table's version (acquire), reads with
 * relaxed or plain loads, and retries the key when the version was odd or
 * changed; sub-table pointers are held inside one epoch for the whole batch.
 */
#include "tl_hash_map_impl.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
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

#define LOOKUP_GROUP 16 /* keys per group in store_lookup_batch (8..128 measure the same) */
#define SMALL_BATCH 2   /* smaller batches (one key) skip the pipeline */

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

#else
static bool put_f16c(float *dst, const uint8_t *src, uint32_t K, uint32_t vstride)
{
    (void)dst, (void)src, (void)K, (void)vstride;
    return false;
}
#endif

/* Writes an out-of-line value as K floats.  fp32 is one memcpy: plain
 * (vector) loads, like find_in_words' SSE2 tag load, racing with a writer's
 * relaxed 4-byte stores (copy_raw_out); a torn copy is discarded by the
 * caller's version check, which rewrites dst.  Relaxed 4-byte atomic
 * loads, which GCC gathers into vectors with vpinsrd, make a 40,300-id K=17
 * lookup 12% slower. */
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

    store__epoch_enter();
    if (n < SMALL_BATCH) { /* nothing to overlap */
        for (size_t k = 0; k < n; k++)
            lookup_slow(&slow, k);
        store__epoch_exit();
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
    store__epoch_exit();
    return hits + slow.hits;
}

int store_lookup(const store_t *s, uint64_t key, float *out)
{
    store__epoch_enter();
    int hit = lookup_one(s, key, out);
    store__epoch_exit();
    return hit;
}
