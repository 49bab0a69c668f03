/*
 * store_internal.h — what store/'s own files (snapshot loader and writer,
 * tools, tests) need beyond store.h: values in their raw storage format and
 * per-sub-table sizing.  Not for other folders: they include store.h only.
 */
#ifndef TL_STORE_INTERNAL_H
#define TL_STORE_INTERNAL_H

#include "store.h"

#include <stdbool.h>

/* Branch hints for error branches, and the mark for setup and error paths:
 * defined here once for every store file. */
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define cold __attribute__((__cold__))

/* A spin-wait hint (x86 PAUSE): for loops that wait on another thread. */
#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* The shard of key in any store of `shards` shards (a power of two): the
 * top log2(shards) bits of the table's key mix, without a store at hand
 * (delta files are split by shard before any store exists); equal to
 * store_shard_of of every such store. */
uint32_t store__shard_of_key(uint64_t key, uint32_t shards);

/* Bytes of one value as stored: K*4 (fp32) or K*2 (fp16). */
size_t store_value_bytes(const store_t *s);

/* Like store_foreach, but hands out the value in storage format (fp32 or
 * fp16 bits, little-endian, store_value_bytes long). */
typedef int (*store_visit_raw_fn)(void *ctx, uint64_t key, const void *raw);
int store_foreach_raw(const store_t *s, uint32_t shard, store_visit_raw_fn fn, void *ctx);

/* Like store_upsert with a value in storage format. */
int store_upsert_raw(store_t *s, uint64_t key, const void *raw);

/* Bulk insert for the snapshot loader.  entries points at n packed records
 * of {uint64 key little-endian, raw value (store_value_bytes)}.  Every key
 * must belong to `shard` and be new.  Prefetches across the batch.
 * Returns 0; -EEXIST (duplicate key) or -EXDEV (key of another shard) with
 * *bad set to the record's index and nothing after it inserted (a duplicate
 * has already overwritten the earlier value: callers discard the store); or
 * -ENOMEM. */
int store_insert_entries(store_t *s, uint32_t shard, const uint8_t *entries, size_t n,
                         size_t *bad);

/* Ordered fill for the snapshot loader: the records of one shard, handed
 * in file order, go to the buckets they held in the store that wrote them
 * (same hash seed and sizes: store_hash_seed), so the table is written
 * front to back; records out of that order are set aside and inserted
 * with store_insert_entries at the end (tl_hash_map_fill.c says how).  Only
 * for a store nobody else reads or writes yet, into a shard that is empty
 * (store_filler_new returns -EINVAL otherwise).  One filler per shard and
 * thread; n records as for store_insert_entries.  add and finish return 0,
 * or -EEXIST (duplicate key), -EXDEV (key of another shard), -ENOMEM: the
 * records are not a valid shard, the store is half filled (discard it), and
 * no record is named: store_insert_entries on a new store names it. */
typedef struct store_filler store_filler_t;
int store_filler_new(store_t *s, uint32_t shard, store_filler_t **out);
int store_filler_add(store_filler_t *f, const uint8_t *entries, size_t n);
int store_filler_finish(store_filler_t *f); /* inserts what was set aside */
void store_filler_free(store_filler_t *f);
/* Records placed in order and set aside so far (tests, benchmarks). */
void store_filler_counts(const store_filler_t *f, uint64_t *in_order, uint64_t *set_aside);

/* Where key may live and lives (tests): cand[0] its primary bucket in its
 * sub-table, cand[1] its alternate (= cand[0] when it has none); returns 1
 * with *holder the one that holds it, 0 when absent, -1 when stashed.  Only
 * with no concurrent writer. */
int store_key_buckets(const store_t *s, uint64_t key, uint64_t cand[2], uint64_t *holder);

/* Sizes one sub-table for `keys` entries (store_reserve_shard_exact, in
 * store.h, does it for each sub-table of a shard).  0 or -ENOMEM/-EINVAL. */
int store_reserve_sub(store_t *s, uint32_t shard, uint32_t sub, uint64_t keys);
/* Keys in one sub-table (its buckets and stash); 0 when out of range.  Two
 * stores with the same shard and sub-table counts split keys alike. */
uint64_t store_sub_count(const store_t *s, uint32_t shard, uint32_t sub);

/* True when shard `shard` of a and of b would place every key in the same
 * buckets: same shard and sub-table split, hash seed, value type and, per
 * sub-table, bucket count, slots and keypart width.  The snapshot writer
 * asks it of the store it writes and one sized as the loader will size it.
 * Only with no concurrent writer to either. */
bool store_shard_layout_equal(const store_t *a, const store_t *b, uint32_t shard);

/* IEEE 754 binary16 conversions (round to nearest even; NaN kept NaN). */
uint16_t store_f32_to_f16(float f);
float store_f16_to_f32(uint16_t h);

#endif /* TL_STORE_INTERNAL_H */
