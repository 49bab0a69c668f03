/*
 * tl_hash_map_fill.c — the ordered filler (store_filler_*): how the
 * snapshot loader fills an unpublished store front to back.
 *
 * A snapshot holds its store's entries in bucket order (sub-table by
 * sub-table, bucket by bucket; a store of other sizes than the loader's is
 * re-placed into the loader's sizes first: snapshot_write.c relay_shard),
 * and a load creates its store with the writer's hash seed and the same sizes, so
 * record i's bucket in the writer is one of its two buckets here too, and
 * those buckets never go backwards within a sub-table.  The filler puts
 * each record there, so a sub-table is written front to back (its lines
 * stream through the cache) instead of at random: about 2x faster at 100M
 * keys than store_insert_entries, which waits on two random lines per
 * record.  The cursor's bucket fills from slot 0 up, so a record takes the
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
 *
 * THREAD SAFETY: one filler per shard and thread, into a store nobody else
 * reads or writes yet (store_internal.h).
 */
#include "tl_hash_map_impl.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

void store_filler_counts(const store_filler_t *f, uint64_t *in_order, uint64_t *set_aside)
{
    *in_order = f->in_order;
    *set_aside = f->set_aside;
}
