/*
 * snapshot_internal.h — snapshot.c's entry points for store/'s own tests and
 * fuzz targets: the shard file header codec and the loader's in-memory path
 * (the same verification and build code that store_snapshot_load runs on
 * mmap windows of real files).  Not for other folders: they use store.h.
 */
#ifndef TL_STORE_SNAPSHOT_INTERNAL_H
#define TL_STORE_SNAPSHOT_INTERNAL_H

#include "manifest.h"
#include "store.h"

#include <stddef.h>
#include <stdint.h>

#define SNAPSHOT_SHARD_MAGIC "TLSHARD1" /* 8 bytes, no NUL in the file */
#define SNAPSHOT_FORMAT_VERSION 1u
#define SNAPSHOT_HEADER_XXH3_AT 56u /* header checksum covers bytes 0..55 */

/* The fields of a shard file header (layout: the picture in snapshot.c). */
typedef struct snapshot_header {
    uint32_t format_version; /* SNAPSHOT_FORMAT_VERSION */
    uint32_t shard_index;    /* which shard the records belong to */
    uint32_t shard_count;    /* shards in the snapshot */
    uint32_t value_floats;   /* K */
    uint32_t dtype;          /* store_dtype_t */
    uint32_t value_bytes;    /* K * 4 (f32) or K * 2 (f16) */
    uint64_t entries;        /* records after the header */
} snapshot_header_t;

/* Encodes h into out[0..63]: magic, fields, zero padding and the header
 * checksum.  Never fails, never blocks. */
void snapshot_header_encode(const snapshot_header_t *h, uint8_t out[SHARD_HEADER_BYTES]);

/* Builds a store from shard files that are already in memory: files[i] and
 * sizes[i] hold the bytes of shard i of m (m->shard_count of them).  Runs
 * every check store_snapshot_load runs after reading the MANIFEST (sizes,
 * header, checksum, values, duplicates, ownership, counts), on the calling
 * thread, with the same error codes, files, offsets and messages.  Returns 0
 * and sets *out (the caller owns it: store_destroy), or -1 with *err filled
 * (err may be NULL), *out untouched and nothing left allocated.  m is
 * trusted to be well formed only in the ways manifest_decode guarantees for
 * shard_count and the shards array; sizes, counts and checksums are not
 * trusted.  Does not block on I/O; allocates the store. */
int snapshot_load_mem(const manifest_t *m, const uint8_t *const *files, const size_t *sizes,
                      store_t **out, store_error_t *err);

#endif /* TL_STORE_SNAPSHOT_INTERNAL_H */
