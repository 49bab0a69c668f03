/*
 * impression_log.c — the impression log (impression_log.h): logged PREDICT
 * blocks in striped FIFO byte rings, an index per stripe from impression id
 * to entry, feedback joined in place, expiry and eviction into negatives.
 *
 * STRIPES
 *   An impression id is hashed with SipHash-1-3 under a 128-bit key drawn
 *   from getrandom at create: the top bits pick the stripe, the low bits the
 *   home slot of the stripe's index.  Clients choose impression ids, so an
 *   unkeyed mix would let one send ids that pile into one stripe and one
 *   probe run (ids that differ only above bit 32 do that to a plain mask);
 *   with a secret key they cannot aim.  Each stripe is independent: its own
 *   mutex, arena, index and counters, one 64-byte-aligned struct, so workers
 *   logging different impressions rarely meet and never share a line.
 *
 * ARENA: a FIFO ring of bytes per stripe (cap = max_bytes / stripes)
 *
 *     not wrapped:  [ free | e1 e2 e3 ... | free ]      data = [head, tail)
 *                          ^head          ^tail
 *     wrapped:      [ e7 e8 | free | e4 e5 e6 |pad]    data = [head, wrap_end) + [0, tail)
 *                           ^tail  ^head      ^wrap_end
 *
 *   Entries are appended at tail in put order, with logged times made
 *   monotonic per stripe (t = max(now, last t)), so the head is always the
 *   oldest: expiry pops from the head while it is past the window, and a
 *   put that does not fit pops from the head (eviction) until it does.  An
 *   entry never straddles the end: when it does not fit after tail it goes
 *   to offset 0 and the bytes from tail to the end are skipped (wrap_end).
 *   The index's slot count also bounds entries per stripe (max_entries /
 *   stripes): a put past it evicts the oldest too.  Expiry (the trainer's
 *   thread, every 100 ms) also evicts a stripe down to 7/8 of its bytes and
 *   entries, so that in steady state the negatives of evicted impressions
 *   are made there, not by a put on a worker serving a PREDICT.
 *
 * ENTRY (8-byte aligned, size a multiple of 8, at most UINT32_MAX)
 *
 *     +-------------------------------------------------------------+
 *     | id u64 | version u64 | t_ms u64                              |
 *     | size u32 | model_id u32 | n_items u32 | n_labeled u32        |
 *     | shared_n u32 | shared_values u32 (0/1)                       |  48 B
 *     +-------------------------------------------------------------+
 *     | labeled bitmap: ceil(n_items / 64) u64, a bit per item        |
 *     | item table: n_items x { off u32 (from entry start),           |
 *     |                         n u32 | ITEM_VALUES (bit 31) }       |
 *     | shared ids u64[shared_n] [values f32[shared_n], pad to 8]     |
 *     | item 0 ids [values] | item 1 ids [values] | ...               |
 *     +-------------------------------------------------------------+
 *
 *   The standard request (300 shared ids, 200 items of 50 ids, no values)
 *   is 48 + 32 + 1,600 + 2,400 + 80,000 = 84,080 bytes: the ids are random
 *   64-bit hashes, so there is nothing to compress, and a GiB holds about
 *   12,700 impressions.
 *
 * INDEX: open addressing, linear probing, per stripe
 *
 *     slot = { id u64 | off8 u32 ((offset / 8) + 1, 0 = empty) | hash u32 }
 *
 *   At least twice as many slots as entries (load <= 1/2) and a keyed hash
 *   keep probe runs short; deletion shifts the run back (Knuth's algorithm
 *   R), so there are no tombstones and a lookup never walks dead slots.  The
 *   low 32 bits of the hash are kept in the slot to find a moved slot's home
 *   without rehashing.  The longest probe seen is exported (probe_max).
 *
 * NEGATIVES
 *   An entry that leaves the ring (expired or evicted) emits, when
 *   emit_negatives is set, a sample with label 0 and negative_weight for
 *   each item whose bit is clear, all of them in one call (in calls of
 *   IMPRESSION_NEGATIVES_MAX past that) with the shared block once: the
 *   sink makes one TRAIN record of them, one log append per impression,
 *   not one per item.  Evicted entries get exactly the treatment of expired
 *   ones, through cfg.evict_emit on the putting thread.
 *
 * THREAD SAFETY
 *   Everything in a stripe is protected by its lock.  put and feedback take
 *   one stripe's lock once; expire and stats take each in turn.  Emit
 *   callbacks run under the lock (documented in the header: copy, do not
 *   call back).  Nothing allocates after create.
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE, getrandom */
#include "impression_log.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>

#define unlikely(x) __builtin_expect(!!(x), 0)
#define COLD __attribute__((cold))

#define STRIPES_DEFAULT 64u
#define STRIPES_MAX 4096u
#define STRIPE_MIN_BYTES 4096u
#define STRIPE_MAX_BYTES ((UINT64_C(1) << 35) - 8) /* off8 is u32 in 8-byte units */
#define ENTRIES_PER_STRIPE_MAX (UINT32_C(1) << 30)
#define ITEM_VALUES 0x80000000u
#define MIN_ENTRY_BYTES 64u /* header, one bitmap word, one item's descriptor */
#define MAX_WEIGHT 1e6f

struct slot {
    uint64_t id;   /* impression id */
    uint32_t off8; /* (entry offset / 8) + 1; 0 = empty */
    uint32_t hash; /* low 32 bits of the keyed hash (home = hash & mask) */
};
_Static_assert(sizeof(struct slot) == 16, "slot grew");

struct entry {
    uint64_t id;      /* impression id */
    uint64_t version; /* model version that scored it */
    uint64_t t_ms;    /* logged at (monotonic per stripe) */
    uint32_t size;    /* bytes of the entry, a multiple of 8 */
    uint32_t model_id;
    uint32_t n_items;       /* >= 1 */
    uint32_t n_labeled;     /* items with feedback */
    uint32_t shared_n;      /* ids in the shared block */
    uint32_t shared_values; /* 1: f32 values follow the shared ids */
};
_Static_assert(sizeof(struct entry) == 48, "entry header grew");

struct item_desc {
    uint32_t off; /* of the item's ids, from the entry's start */
    uint32_t n;   /* ids | ITEM_VALUES */
};
_Static_assert(MIN_ENTRY_BYTES == sizeof(struct entry) + 8 + sizeof(struct item_desc),
               "the smallest entry");

struct stripe {
    pthread_mutex_t lock;
    /* Protected by lock: */
    uint8_t *arena;     /* cap bytes (a slice of the log's mapping) */
    uint64_t cap;       /* a multiple of 8 */
    uint64_t head;      /* offset of the oldest entry */
    uint64_t tail;      /* where the next entry goes */
    uint64_t wrap_end;  /* wrapped: end of the data before offset 0 */
    bool wrapped;       /* data is [head, wrap_end) + [0, tail) */
    uint64_t count;     /* entries held */
    uint64_t bytes;     /* bytes they use */
    uint64_t last_t;    /* the newest entry's t_ms */
    struct slot *index; /* mask + 1 slots */
    uint32_t mask;
    uint32_t max_entries; /* count bound, <= (mask + 1) / 2 */
    uint32_t probe_max;   /* longest probe seen */
#define STRIPE_FIELD_(name, help) uint64_t name;
    IMPRESSION_LOG_COUNTERS(STRIPE_FIELD_)
#undef STRIPE_FIELD_
} __attribute__((aligned(64)));

struct impression_log {
    struct stripe *stripes; /* nstripes, 64-byte aligned */
    uint32_t nstripes;
    uint32_t stripe_shift; /* 64 - log2(nstripes); 64 when one stripe */
    uint64_t k0, k1;       /* SipHash key */
    uint64_t window_ms;
    bool emit_negatives;
    float negative_weight;
    impression_log_negatives_fn evict_emit;
    void *evict_ctx;
    uint8_t *arena_map; /* one mapping for all arenas */
    size_t arena_map_len;
    struct slot *index_map; /* one mapping for all indexes */
    size_t index_map_len;
};

/* ---- hashing ------------------------------------------------------------------ */

#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND           \
    do {                   \
        v0 += v1;          \
        v1 = ROTL(v1, 13); \
        v1 ^= v0;          \
        v0 = ROTL(v0, 32); \
        v2 += v3;          \
        v3 = ROTL(v3, 16); \
        v3 ^= v2;          \
        v0 += v3;          \
        v3 = ROTL(v3, 21); \
        v3 ^= v0;          \
        v2 += v1;          \
        v1 = ROTL(v1, 17); \
        v1 ^= v2;          \
        v2 = ROTL(v2, 32); \
    } while (0)

/* SipHash-1-3 of one 8-byte message: the id. */
static uint64_t hash_id(const impression_log_t *log, uint64_t m)
{
    uint64_t v0 = log->k0 ^ 0x736f6d6570736575ull, v1 = log->k1 ^ 0x646f72616e646f6dull;
    uint64_t v2 = log->k0 ^ 0x6c7967656e657261ull, v3 = log->k1 ^ 0x7465646279746573ull;
    v3 ^= m;
    SIPROUND;
    v0 ^= m;
    const uint64_t b = UINT64_C(8) << 56;
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static struct stripe *stripe_of(const impression_log_t *log, uint64_t h)
{
    return &log->stripes[log->stripe_shift == 64 ? 0 : h >> log->stripe_shift];
}

/* ---- index -------------------------------------------------------------------- */

static void note_probe(struct stripe *s, uint32_t probes)
{
    if (probes > s->probe_max)
        s->probe_max = probes;
}

/* The slot holding id, or -1. */
static int64_t index_find(struct stripe *s, uint64_t id, uint32_t h)
{
    uint32_t i = h & s->mask, probes = 1;
    for (;; i = (i + 1) & s->mask, probes++) {
        const struct slot *sl = &s->index[i];
        if (sl->off8 == 0)
            break;
        if (sl->id == id) {
            note_probe(s, probes);
            return i;
        }
    }
    note_probe(s, probes);
    return -1;
}

/* Caller guarantees a free slot (count < max_entries <= slots / 2). */
static void index_insert(struct stripe *s, uint64_t id, uint32_t h, uint64_t off)
{
    uint32_t i = h & s->mask, probes = 1;
    while (s->index[i].off8 != 0) {
        i = (i + 1) & s->mask;
        probes++;
    }
    note_probe(s, probes);
    s->index[i] = (struct slot){.id = id, .off8 = (uint32_t)(off / 8 + 1), .hash = h};
}

/* Empties slot i and shifts the rest of its run back (no tombstones). */
static void index_delete(struct stripe *s, uint32_t i)
{
    for (;;) {
        s->index[i].off8 = 0;
        uint32_t j = i;
        for (;;) {
            j = (j + 1) & s->mask;
            if (s->index[j].off8 == 0)
                return;
            uint32_t k = s->index[j].hash & s->mask; /* j's home */
            /* j stays when its home lies cyclically in (i, j] */
            bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
            if (!stays)
                break;
        }
        s->index[i] = s->index[j];
        i = j;
    }
}

/* ---- entries ------------------------------------------------------------------ */

static uint64_t block_bytes(const codec_block_t *b)
{
    uint64_t n = b->n;
    return 8 * n + (b->values ? (4 * n + 7) / 8 * 8 : 0);
}

static uint64_t *bitmap_of(struct entry *e)
{
    return (uint64_t *)(e + 1);
}

static struct item_desc *items_of(struct entry *e)
{
    return (struct item_desc *)(bitmap_of(e) + (e->n_items + 63) / 64);
}

static codec_block_t block_at(struct entry *e, uint32_t off, uint32_t n, bool values)
{
    const uint64_t *ids = (const uint64_t *)((uint8_t *)e + off);
    return (codec_block_t){.ids = ids, .values = values ? (const float *)(ids + n) : NULL, .n = n};
}

static codec_block_t shared_of(struct entry *e)
{
    uint32_t off = (uint32_t)((uint8_t *)(items_of(e) + e->n_items) - (uint8_t *)e);
    return block_at(e, off, e->shared_n, e->shared_values != 0);
}

static codec_block_t item_of(struct entry *e, uint32_t i)
{
    const struct item_desc *d = &items_of(e)[i];
    return block_at(e, d->off, d->n & ~ITEM_VALUES, (d->n & ITEM_VALUES) != 0);
}

/* Copies b at e + off; returns the offset past it. */
static uint32_t write_block(struct entry *e, uint32_t off, const codec_block_t *b)
{
    uint8_t *p = (uint8_t *)e + off;
    if (b->n) {
        memcpy(p, b->ids, 8 * (size_t)b->n);
        if (b->values) {
            memcpy(p + 8 * (size_t)b->n, b->values, 4 * (size_t)b->n);
            if (b->n & 1) /* the pad: no stale bytes in the log */
                memset(p + 12 * (size_t)b->n, 0, 4);
        }
    }
    return off + (uint32_t)block_bytes(b);
}

/* Hands the entry's unlabeled items to emit, IMPRESSION_NEGATIVES_MAX at a
 * time.  Returns how many it took. */
static uint64_t emit_negatives(const impression_log_t *log, struct stripe *s, struct entry *e,
                               impression_src_t src, impression_log_negatives_fn emit, void *ctx)
{
    if (!log->emit_negatives || e->n_labeled == e->n_items)
        return 0;
    if (!emit) {
        s->negatives_dropped += e->n_items - e->n_labeled;
        return 0;
    }
    uint32_t item[IMPRESSION_NEGATIVES_MAX];
    codec_block_t block[IMPRESSION_NEGATIVES_MAX];
    impression_negatives_t b = {
        .impression_id = e->id,
        .version = e->version,
        .impression_ms = e->t_ms,
        .model_id = e->model_id,
        .n_items = e->n_items,
        .weight = log->negative_weight,
        .src = src,
        .shared = shared_of(e),
        .item = item,
        .block = block,
    };
    const uint64_t *bits = bitmap_of(e);
    uint64_t n = 0;
    for (uint32_t i = 0; i < e->n_items; i++) {
        if (!(bits[i / 64] >> (i % 64) & 1)) {
            item[b.n] = i;
            block[b.n++] = item_of(e, i);
        }
        if (b.n == IMPRESSION_NEGATIVES_MAX || (i + 1 == e->n_items && b.n > 0)) {
            uint32_t took = emit(&b, ctx);
            took = took < b.n ? took : b.n;
            n += took;
            s->negatives_dropped += b.n - took;
            b.n = 0;
        }
    }
    s->negatives_emitted += n;
    return n;
}

/* Pops the oldest entry of s (count > 0), emitting its negatives.  Returns
 * how many it emitted. */
static uint64_t pop_oldest(const impression_log_t *log, struct stripe *s, impression_src_t src,
                           impression_log_negatives_fn emit, void *ctx)
{
    struct entry *e = (struct entry *)(s->arena + s->head);
    int64_t slot = index_find(s, e->id, (uint32_t)hash_id(log, e->id));
    if (slot >= 0) /* always: every entry in the ring is indexed */
        index_delete(s, (uint32_t)slot);
    uint64_t n = emit_negatives(log, s, e, src, emit, ctx);
    s->head += e->size;
    s->bytes -= e->size;
    s->count--;
    if (s->wrapped && s->head == s->wrap_end) {
        s->head = 0;
        s->wrapped = false;
    }
    if (s->count == 0) {
        s->head = s->tail = s->wrap_end = 0;
        s->wrapped = false;
    }
    if (src == IMPRESSION_SRC_EVICTED)
        s->evicted++;
    else
        s->expired++;
    return n;
}

/* Room for size bytes (size <= cap), evicting the oldest entries as needed.
 * Returns the offset. */
static uint64_t ring_alloc(const impression_log_t *log, struct stripe *s, uint64_t size)
{
    for (;;) {
        if (s->count < s->max_entries) {
            if (!s->wrapped) {
                if (s->cap - s->tail >= size) {
                    uint64_t off = s->tail;
                    s->tail += size;
                    return off;
                }
                if (s->head >= size) {
                    s->wrap_end = s->tail;
                    s->wrapped = true;
                    s->tail = size;
                    return 0;
                }
            } else if (s->head - s->tail >= size) {
                uint64_t off = s->tail;
                s->tail += size;
                return off;
            }
        }
        /* count == 0 always fits above (head = tail = 0, size <= cap) */
        pop_oldest(log, s, IMPRESSION_SRC_EVICTED, log->evict_emit, log->evict_ctx);
    }
}

/* ---- public ------------------------------------------------------------------- */

impression_log_config_t impression_log_config_default(void)
{
    return (impression_log_config_t){
        .max_bytes = UINT64_C(1) << 30,
        .window_ms = 10 * 60 * 1000,
        .stripes = STRIPES_DEFAULT,
        .emit_negatives = true,
        .negative_weight = 1.0f,
    };
}

COLD static void draw_key(uint64_t *k0, uint64_t *k1)
{
    uint64_t k[2];
    if (getrandom(k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
        /* No entropy yet (early boot): a clock is still unknown to clients. */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        k[0] = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
        clock_gettime(CLOCK_REALTIME, &ts);
        k[1] = (uint64_t)ts.tv_nsec * 0xBF58476D1CE4E5B9ull ^ (uint64_t)(uintptr_t)k0;
    }
    *k0 = k[0];
    *k1 = k[1];
}

COLD int impression_log_create(const impression_log_config_t *cfg, impression_log_t **out)
{
    *out = NULL;
    uint32_t ns = cfg->stripes ? cfg->stripes : STRIPES_DEFAULT;
    if (ns > STRIPES_MAX || (ns & (ns - 1)) != 0 || cfg->window_ms == 0)
        return -EINVAL;
    if (cfg->emit_negatives && !(isfinite(cfg->negative_weight) && cfg->negative_weight > 0 &&
                                 cfg->negative_weight <= MAX_WEIGHT))
        return -EINVAL;
    uint64_t cap = cfg->max_bytes / ns / 8 * 8;
    if (cap < STRIPE_MIN_BYTES || cap > STRIPE_MAX_BYTES)
        return -EINVAL;
    uint64_t max_entries = cfg->max_entries ? cfg->max_entries : cfg->max_bytes / 1024;
    uint64_t per = (max_entries + ns - 1) / ns;
    if (per < 1)
        per = 1;
    if (per > cap / MIN_ENTRY_BYTES) /* no more slots than entries that can fit */
        per = cap / MIN_ENTRY_BYTES;
    if (per > ENTRIES_PER_STRIPE_MAX)
        per = ENTRIES_PER_STRIPE_MAX;
    uint64_t nslots = 2;
    while (nslots < 2 * per)
        nslots *= 2;

    int rc = -ENOMEM;
    impression_log_t *log = calloc(1, sizeof *log);
    if (!log)
        return -ENOMEM;
    log->nstripes = ns;
    unsigned bits = (unsigned)__builtin_ctz(ns);
    log->stripe_shift = 64 - bits;
    log->window_ms = cfg->window_ms;
    log->emit_negatives = cfg->emit_negatives;
    log->negative_weight = cfg->negative_weight;
    log->evict_emit = cfg->evict_emit;
    log->evict_ctx = cfg->evict_ctx;
    draw_key(&log->k0, &log->k1);
    log->arena_map = MAP_FAILED;
    log->index_map = MAP_FAILED;

    if (posix_memalign((void **)&log->stripes, 64, ns * sizeof(struct stripe)) != 0) {
        log->stripes = NULL;
        goto out;
    }
    memset(log->stripes, 0, ns * sizeof(struct stripe));
    /* Reserved, not committed: pages are touched as entries arrive. */
    log->arena_map_len = (size_t)(cap * ns);
    log->arena_map = mmap(NULL, log->arena_map_len, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (log->arena_map == MAP_FAILED)
        goto out;
    log->index_map_len = (size_t)(nslots * ns * sizeof(struct slot));
    log->index_map = mmap(NULL, log->index_map_len, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (log->index_map == MAP_FAILED)
        goto out;
    for (uint32_t i = 0; i < ns; i++) {
        struct stripe *s = &log->stripes[i];
        pthread_mutex_init(&s->lock, NULL);
        s->arena = log->arena_map + (size_t)i * cap;
        s->cap = cap;
        s->index = log->index_map + (size_t)i * nslots;
        s->mask = (uint32_t)(nslots - 1);
        s->max_entries = (uint32_t)per;
    }
    *out = log;
    return 0;
out:
    impression_log_destroy(log);
    return rc;
}

void impression_log_destroy(impression_log_t *log)
{
    if (!log)
        return;
    if (log->stripes && log->index_map != MAP_FAILED) /* locks initialised */
        for (uint32_t i = 0; i < log->nstripes; i++)
            pthread_mutex_destroy(&log->stripes[i].lock);
    if (log->arena_map != MAP_FAILED)
        munmap(log->arena_map, log->arena_map_len);
    if (log->index_map != MAP_FAILED)
        munmap(log->index_map, log->index_map_len);
    free(log->stripes);
    free(log);
}

static bool block_ok(const codec_block_t *b)
{
    return b->n <= CODEC_MAX_BLOCK_FEATURES && (b->n == 0 || b->ids != NULL);
}

int impression_log_put(impression_log_t *log, uint64_t impression_id, uint32_t model_id,
                       uint64_t version, uint64_t now_ms, const codec_block_t *shared,
                       const codec_block_t *items, uint32_t n_items)
{
    uint64_t h = hash_id(log, impression_id);
    struct stripe *s = stripe_of(log, h);

    /* Size and checks before the lock; u64 cannot overflow: n_items < 2^32
     * blocks of at most 2^16 ids of 12 bytes. */
    bool ok = shared && items && n_items > 0 && block_ok(shared);
    uint64_t size = 0;
    if (ok) {
        size = sizeof(struct entry) + 8 * (((uint64_t)n_items + 63) / 64) +
               sizeof(struct item_desc) * (uint64_t)n_items + block_bytes(shared);
        for (uint32_t i = 0; i < n_items && ok; i++) {
            ok = block_ok(&items[i]);
            size += block_bytes(&items[i]);
        }
    }

    int rc = 0;
    pthread_mutex_lock(&s->lock);
    if (unlikely(!ok)) {
        s->refused_invalid++;
        rc = -EINVAL;
        goto out;
    }
    if (unlikely(size > s->cap || size > UINT32_MAX)) {
        s->refused_too_big++;
        rc = -E2BIG;
        goto out;
    }
    if (unlikely(index_find(s, impression_id, (uint32_t)h) >= 0)) {
        s->refused_duplicate++;
        rc = -EEXIST;
        goto out;
    }
    uint64_t off = ring_alloc(log, s, size);
    struct entry *e = (struct entry *)(s->arena + off);
    uint64_t t = now_ms > s->last_t ? now_ms : s->last_t;
    s->last_t = t;
    *e = (struct entry){
        .id = impression_id,
        .version = version,
        .t_ms = t,
        .size = (uint32_t)size,
        .model_id = model_id,
        .n_items = n_items,
        .n_labeled = 0,
        .shared_n = shared->n,
        .shared_values = shared->values != NULL,
    };
    memset(bitmap_of(e), 0, 8 * (((size_t)n_items + 63) / 64));
    struct item_desc *d = items_of(e);
    uint32_t p = (uint32_t)((uint8_t *)(d + n_items) - (uint8_t *)e);
    p = write_block(e, p, shared);
    for (uint32_t i = 0; i < n_items; i++) {
        d[i].off = p;
        d[i].n = items[i].n | (items[i].values ? ITEM_VALUES : 0);
        p = write_block(e, p, &items[i]);
    }
    index_insert(s, impression_id, (uint32_t)h, off);
    s->count++;
    s->bytes += size;
    s->puts++;
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

const char *impression_log_fb_str(impression_log_fb_t st)
{
    switch (st) {
    case IMPRESSION_FB_OK:
        return "ok";
    case IMPRESSION_FB_UNKNOWN_IMPRESSION:
        return "unknown impression (never logged, expired or evicted)";
    case IMPRESSION_FB_ITEM_OUT_OF_RANGE:
        return "item index out of range";
    case IMPRESSION_FB_WRONG_MODEL:
        return "impression logged for another model";
    case IMPRESSION_FB_DUPLICATE:
        return "item already has feedback";
    case IMPRESSION_FB_BAD_VALUE:
        return "label not in [0, 1] or weight not in [0, 1e6]";
    case IMPRESSION_FB_NOT_TAKEN:
        return "the trainer could not take the sample (its queue is full)";
    case IMPRESSION_FB_COUNT_:
        break;
    }
    return "unknown status";
}

impression_log_fb_t impression_log_feedback(impression_log_t *log, uint64_t impression_id,
                                            uint32_t model_id, uint32_t item, float label,
                                            float weight, uint64_t now_ms,
                                            impression_log_emit_fn emit, void *ctx)
{
    uint64_t h = hash_id(log, impression_id);
    struct stripe *s = stripe_of(log, h);
    impression_log_fb_t st;
    struct entry *e = NULL;

    pthread_mutex_lock(&s->lock);
    if (unlikely(!(label >= 0.0f && label <= 1.0f) || !(weight >= 0.0f && weight <= MAX_WEIGHT))) {
        st = IMPRESSION_FB_BAD_VALUE;
        s->fb_bad_value++;
        goto out;
    }
    int64_t slot = index_find(s, impression_id, (uint32_t)h);
    if (slot >= 0) {
        e = (struct entry *)(s->arena + ((uint64_t)s->index[slot].off8 - 1) * 8);
        if (now_ms > e->t_ms && now_ms - e->t_ms > log->window_ms)
            e = NULL; /* past its window: expire has not popped it yet */
    }
    if (unlikely(!e)) {
        st = IMPRESSION_FB_UNKNOWN_IMPRESSION;
        s->fb_unknown++;
    } else if (unlikely(e->model_id != model_id)) {
        st = IMPRESSION_FB_WRONG_MODEL;
        s->fb_wrong_model++;
    } else if (unlikely(item >= e->n_items)) {
        st = IMPRESSION_FB_ITEM_OUT_OF_RANGE;
        s->fb_out_of_range++;
    } else {
        uint64_t *w = &bitmap_of(e)[item / 64], bit = UINT64_C(1) << (item % 64);
        if (unlikely(*w & bit)) {
            st = IMPRESSION_FB_DUPLICATE;
            s->fb_duplicate++;
            goto out;
        }
        st = IMPRESSION_FB_OK;
        if (emit && weight > 0) { /* weight 0: the item is marked, nothing is learned */
            impression_sample_t smp = {
                .impression_id = e->id,
                .version = e->version,
                .impression_ms = e->t_ms,
                .model_id = e->model_id,
                .item = item,
                .n_items = e->n_items,
                .label = label,
                .weight = weight,
                .src = IMPRESSION_SRC_FEEDBACK,
                .shared = shared_of(e),
                .block = item_of(e, item),
            };
            if (emit(&smp, ctx) != 0) {
                st = IMPRESSION_FB_NOT_TAKEN;
                s->fb_not_taken++;
                goto out;
            }
        }
        *w |= bit;
        e->n_labeled++;
        s->fb_ok++;
    }
out:
    pthread_mutex_unlock(&s->lock);
    return st;
}

impression_log_expired_t impression_log_expire(impression_log_t *log, uint64_t now_ms,
                                               impression_log_negatives_fn emit, void *ctx)
{
    impression_log_expired_t r = {0, 0, 0};
    for (uint32_t i = 0; i < log->nstripes; i++) {
        struct stripe *s = &log->stripes[i];
        pthread_mutex_lock(&s->lock);
        while (s->count > 0) {
            const struct entry *e = (const struct entry *)(s->arena + s->head);
            if (!(now_ms > e->t_ms && now_ms - e->t_ms > log->window_ms))
                break; /* the head is the oldest: the rest are younger */
            r.negatives += pop_oldest(log, s, IMPRESSION_SRC_EXPIRED, emit, ctx);
            r.entries++;
        }
        /* the high-water mark: past 7/8 of its bytes or entries a stripe is evicted down
         * here, so that a put (a worker serving a PREDICT) seldom has to */
        while (s->count > 0 && (s->bytes > s->cap - s->cap / 8 ||
                                s->count > s->max_entries - s->max_entries / 8)) {
            r.negatives += pop_oldest(log, s, IMPRESSION_SRC_EVICTED, emit, ctx);
            r.entries++;
            r.early++;
        }
        pthread_mutex_unlock(&s->lock);
    }
    return r;
}

void impression_log_stats(impression_log_t *log, impression_log_stats_t *out)
{
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < log->nstripes; i++) {
        struct stripe *s = &log->stripes[i];
        pthread_mutex_lock(&s->lock);
#define SUM_(name, help) out->name += s->name;
        IMPRESSION_LOG_COUNTERS(SUM_)
#undef SUM_
        out->entries += s->count;
        out->bytes += s->bytes;
        out->max_bytes += s->cap;
        if (s->probe_max > out->probe_max)
            out->probe_max = s->probe_max;
        pthread_mutex_unlock(&s->lock);
    }
}
