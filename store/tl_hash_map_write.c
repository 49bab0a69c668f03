/*
 * tl_hash_map_write.c — the store's write path: upsert, delete, the
 * snapshot loader's bulk insert, reservation, and the cuckoo placement and
 * sub-table rebuild behind them.
 *
 * PLACEMENT
 *   A new key goes to a free slot of its primary bucket b1, else of its
 *   alternate b2 (setting b1's overflow flag), else a breadth-first search
 *   over at most BFS_MAX_NODES buckets finds the shortest chain of entries
 *   to move, each to its other bucket, that frees a slot in b1 or b2; else
 *   it goes to the sub-table's stash (STASH_MAX entries).  When even that
 *   is full, or the sub-table is at capacity (max_load), the sub-table is
 *   rebuilt GROWTH_FACTOR larger (rebuild): every entry is copied into a new
 *   sub-table, the pointer is swapped, and the old one is freed after an
 *   epoch grace period.  A rebuild that meets a cuckoo cycle retries a
 *   little larger.
 *
 * THREAD SAFETY: one writer per shard (the caller serialises); readers run
 * alongside.  Every change of keyparts or of a multi-word value is one write
 * section (write_begin/write_end: the sub-table's seqlock), cuckoo moves copy
 * before they clear, and a K=1 fp32 overwrite is one relaxed 64-bit store;
 * the reader's side is in tl_hash_map_lookup.c, the whole argument in
 * tl_hash_map.c.
 */
#include "tl_hash_map_impl.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define BFS_MAX_NODES 512
#define INSERT_DISTANCE 16 /* records in flight in store_insert_entries */
#define GROWTH_FACTOR 1.3

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
cold static int rebuild(store_t *s, uint32_t shard, uint32_t sub, uint64_t target)
{
    struct subtable *old = sub_ptr(s, shard, sub);
    uint64_t count = atomic_load_explicit(&old->count, memory_order_relaxed);
    if (target < count)
        target = count;
    for (int attempt = 0; attempt < 8; attempt++) {
        struct subtable *nt;
        int rc = store__subtable_new(s, target, &nt);
        if (rc)
            return rc;
        struct rebuild_ctx c = {s, nt, shard, sub, 0};
        if (store__sub_foreach_raw(s, old, shard, sub, copy_into, &c) == 0) {
            atomic_store_explicit(&s->subs[(size_t)shard * s->nsubs + sub], nt, memory_order_seq_cst);
            atomic_fetch_add_explicit(&s->shards[shard].rebuilds, 1, memory_order_relaxed);
            store__epoch_synchronize();
            store__subtable_free(old);
            return 0;
        }
        store__subtable_free(nt); /* unlucky cuckoo cycle: try a little larger */
        target = target + target / 8 + 64;
    }
    return -ENOMEM;
}

/* Upsert of a key already located in st (l filled by locate_in). */
/* An inline value (K = 1 fp32) into slot j of bucket b: one 64-bit store
 * of the word that holds it, so readers see the old or the new float,
 * never a torn one, with no version change. */
static inline void inline_write(struct subtable *st, uint64_t b, int j, const uint8_t *raw)
{
    uint8_t *p = bucket_at(st, b);
    unsigned wi = (unsigned)j >> 1, sh = 32 * ((unsigned)j & 1);
    uint32_t v;
    memcpy(&v, raw, 4);
    uint64_t w = load_word(p, wi);
    store_word(p, wi, (w & ~(0xffffffffULL << sh)) | ((uint64_t)v << sh));
}

static int upsert_located(store_t *s, struct subtable *st, struct loc *l, uint64_t y, uint64_t key,
                          const uint8_t *raw)
{
    const uint32_t shard = l->shard, sub = l->sub;
    uint64_t b = 0;
    int j = find_slot(st, key, l, &b);
    if (j >= 0) {
        if (s->inline_values) {
            inline_write(st, b, j, raw);
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

void store_prefetch_write(const store_t *s, const uint64_t *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct loc l;
        uint64_t y;
        split_key(s, keys[i], &l.shard, &l.sub, &y);
        const struct subtable *st = sub_ptr(s, l.shard, l.sub);
        locate_in(s, st, y, &l);
        __builtin_prefetch(bucket_at(st, l.b1), 1, 3);
        if (!s->inline_values)
            __builtin_prefetch(value_at(s, st, l.b1, 0), 1, 3);
    }
}

#define PIPELINE_AHEAD 16 /* store_upsert_batch: keys located and prefetched ahead */

/* The pipelines' first stage, after a key's location l in sub-table st:
 * its buckets prefetched for writing: the primary (and its first value
 * line), and the alternate too.  A key sits in its alternate only when its
 * primary overflowed, which is not known until the primary's line arrives;
 * fetching both at once costs a line that is often not read, but waiting
 * for the primary first left find_slot stalled on the alternate's miss: in
 * a loaded table (a served LR store) the batch writes run 1.2-1.4x faster
 * with it.  A macro, not a function: GCC finds a function of prefetches
 * alone free of side effects and deletes its calls. */
#define PREFETCH_BUCKETS(s, st, l)                                                                \
    do {                                                                                          \
        if ((l)->want2)                                                                           \
            __builtin_prefetch(bucket_at((st), alt_bucket((l)->b1, (l)->t, (st)->nbuckets)), 1, 3); \
        __builtin_prefetch(bucket_at((st), (l)->b1), 1, 3);                                       \
        if (!(s)->inline_values)                                                                  \
            __builtin_prefetch(value_at((s), (st), (l)->b1, 0), 1, 3);                            \
    } while (0)

int store_upsert_batch(store_t *s, const uint64_t *keys, const float *values, size_t n)
{
    struct {
        struct loc l;
        uint64_t y;
        uint64_t nbuckets; /* of the sub-table it was located in */
    } ring[PIPELINE_AHEAD]; /* key i's location in slot i % PIPELINE_AHEAD */
    uint8_t raw[STORE_MAX_VALUE_FLOATS * 4];
    zero_pad(s, raw);
    int added = 0;
    for (size_t i = 0; i < n + PIPELINE_AHEAD; i++) {
        if (i >= PIPELINE_AHEAD) { /* write key `at`, whose bucket was prefetched */
            size_t at = i - PIPELINE_AHEAD;
            struct loc *l = &ring[at % PIPELINE_AHEAD].l;
            /* an insert before it may have rebuilt its table: the location
             * depends on the table's size alone */
            struct subtable *st = sub_ptr(s, l->shard, l->sub);
            if (st->nbuckets != ring[at % PIPELINE_AHEAD].nbuckets)
                locate_in(s, st, ring[at % PIPELINE_AHEAD].y, l);
            f32_to_raw(s, values + at * s->K, raw);
            int rc = upsert_located(s, st, l, ring[at % PIPELINE_AHEAD].y, keys[at], raw);
            if (rc < 0)
                return rc;
            added += rc;
        }
        if (i < n) { /* locate key i into the slot just freed; start fetching its bucket */
            struct loc *l = &ring[i % PIPELINE_AHEAD].l;
            split_key(s, keys[i], &l->shard, &l->sub, &ring[i % PIPELINE_AHEAD].y);
            const struct subtable *st = sub_ptr(s, l->shard, l->sub);
            locate_in(s, st, ring[i % PIPELINE_AHEAD].y, l);
            ring[i % PIPELINE_AHEAD].nbuckets = st->nbuckets;
            PREFETCH_BUCKETS(s, st, l);
        }
    }
    return added;
}

/* The pipelines' first stage: key located into l, its buckets prefetched. */
static inline void locate_ahead(const store_t *s, uint64_t key, struct loc *l)
{
    uint64_t y;
    split_key(s, key, &l->shard, &l->sub, &y);
    const struct subtable *st = sub_ptr(s, l->shard, l->sub);
    locate_in(s, st, y, l);
    PREFETCH_BUCKETS(s, st, l);
}

/* Where the value of find_slot's answer j (>= 0 in bucket b, <= -2 in the
 * stash) lies: an inline value is its 4-byte half of the bucket word. */
static inline uint8_t *value_bytes(const store_t *s, struct subtable *st, uint64_t b, int j)
{
    if (j >= 0 && s->inline_values)
        return bucket_at(st, b) + 8 * ((unsigned)j >> 1) + 4 * ((unsigned)j & 1);
    if (j >= 0)
        return value_at(s, st, b, (uint32_t)j);
    return stash_value_at(s, st, (uint32_t)(-2 - j));
}

int store_upsert_relaxed(store_t *s, uint64_t key, const float *value)
{
    if (s->dtype != STORE_DTYPE_F32)
        return -EINVAL;
    uint8_t raw[STORE_MAX_VALUE_FLOATS * 4];
    zero_pad(s, raw);
    f32_to_raw(s, value, raw);
    struct loc l;
    uint64_t y, b = 0;
    split_key(s, key, &l.shard, &l.sub, &y);
    struct subtable *st = sub_ptr(s, l.shard, l.sub);
    locate_in(s, st, y, &l);
    int j = find_slot(st, key, &l, &b);
    if ((j >= 0 && !s->inline_values) || j <= -2) { /* float by float, the version untouched */
        copy_raw_out(value_bytes(s, st, b, j), raw, s->vbytes);
        return 0;
    }
    return upsert_located(s, st, &l, y, key, raw); /* an inline overwrite, or an insert */
}

int store_overwrite_batch(store_t *s, const uint64_t *keys, const float *values, size_t n,
                          uint8_t *written)
{
    struct loc ring[PIPELINE_AHEAD]; /* key i's location in slot i % PIPELINE_AHEAD */
    uint8_t raw[STORE_MAX_VALUE_FLOATS * 4];
    zero_pad(s, raw);
    int count = 0;
    for (size_t i = 0; i < n + PIPELINE_AHEAD; i++) {
        if (i >= PIPELINE_AHEAD) { /* key `at`, whose bucket was prefetched: written if present */
            size_t at = i - PIPELINE_AHEAD;
            struct loc *l = &ring[at % PIPELINE_AHEAD];
            struct subtable *st = sub_ptr(s, l->shard, l->sub);
            uint64_t b = 0;
            int j = find_slot(st, keys[at], l, &b);
            if (j != -1)
                f32_to_raw(s, values + at * s->K, raw);
            if (j == -1) {
                /* absent: not written */
            } else if (j >= 0 && s->inline_values) {
                inline_write(st, b, j, raw);
            } else {
                copy_raw_out(value_bytes(s, st, b, j), raw, s->vbytes);
            }
            if (written)
                written[at] = j != -1;
            count += j != -1;
        }
        if (i < n)
            locate_ahead(s, keys[i], &ring[i % PIPELINE_AHEAD]);
    }
    return count;
}

int store_locate_batch(store_t *s, const uint64_t *keys, size_t n, float **slots)
{
    if (s->dtype != STORE_DTYPE_F32)
        return -EINVAL;
    struct loc ring[PIPELINE_AHEAD]; /* key i's location in slot i % PIPELINE_AHEAD */
    int found = 0;
    for (size_t i = 0; i < n + PIPELINE_AHEAD; i++) {
        if (i >= PIPELINE_AHEAD) { /* find key `at`, whose bucket was prefetched */
            size_t at = i - PIPELINE_AHEAD;
            struct loc *l = &ring[at % PIPELINE_AHEAD];
            struct subtable *st = sub_ptr(s, l->shard, l->sub);
            uint64_t b = 0;
            int j = find_slot(st, keys[at], l, &b);
            float *v = j == -1 ? NULL : (float *)(void *)value_bytes(s, st, b, j);
            slots[at] = v;
            found += v != NULL;
        }
        if (i < n)
            locate_ahead(s, keys[i], &ring[i % PIPELINE_AHEAD]);
    }
    return found;
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

int store_reserve_shard_exact(store_t *s, uint32_t shard, const uint64_t *counts,
                              uint32_t *bad_sub)
{
    if (shard >= s->nshards)
        return -EINVAL;
    for (uint32_t u = 0; u < s->nsubs; u++) {
        if (counts[u] == 0)
            continue;
        int rc = store_reserve_sub(s, shard, u, counts[u]);
        if (rc) {
            if (bad_sub)
                *bad_sub = u;
            return rc;
        }
    }
    return 0;
}
