/*
 * store_internal.h — what store/'s own files (snapshot loader and writer,
 * tools, tests) need beyond store.h: values in their raw storage format and
 * per-sub-table sizing.  Not for other folders: they include store.h only.
 */
#ifndef TL_STORE_INTERNAL_H
#define TL_STORE_INTERNAL_H

#include "store.h"

#include <stdbool.h>

/* A spin-wait hint (x86 PAUSE): for loops that wait on another thread. */
#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() ((void)0)
#endif

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

/* Sub-tables: every shard has the same power-of-two number of them, fixed at
 * store_create() from expected_keys.  The loader counts keys per sub-table
 * and reserves each exactly, so that a load never grows a table. */
uint32_t store_subs_per_shard(const store_t *s);
uint32_t store_sub_of(const store_t *s, uint64_t key);
int store_reserve_sub(store_t *s, uint32_t shard, uint32_t sub, uint64_t keys);

/* IEEE 754 binary16 conversions (round to nearest even; NaN kept NaN). */
uint16_t store_f32_to_f16(float f);
float store_f16_to_f32(uint16_t h);

#endif /* TL_STORE_INTERNAL_H */
