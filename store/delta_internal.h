/*
 * delta_internal.h — what the delta files (delta_format.c: the shard file
 * format and its verifier; delta_write.c; delta_read.c; delta_apply.c)
 * share, and their entry points for store/'s own tests and fuzz target.
 * Not for other folders: they use delta.h.
 */
#ifndef TL_STORE_DELTA_INTERNAL_H
#define TL_STORE_DELTA_INTERNAL_H

#include "delta.h"
#include "store_internal.h"
#include "snapshot_internal.h"

#include <stdint.h>

#define DELTA_SHARD_MAGIC "TLDELTA1" /* 8 bytes, no NUL in the file */
#define DELTA_FORMAT_VERSION 1u
#define DELTA_SHARD_NAME_FMT "delta-%05u.tld"
#define DELTA_TMP_PREFIX ".tmp-"

/* Header field offsets (the picture in delta_format.c). */
enum {
    D_MAGIC = 0,
    D_FORMAT = 8,
    D_INDEX = 12,
    D_COUNT = 16,
    D_FLOATS = 20,
    D_DTYPE = 24,
    D_VBYTES = 28,
    D_UPSERTS = 32,
    D_DELETES = 40,
    D_PAD = 48,
    D_XXH3 = 56,
};
_Static_assert(D_XXH3 + 8 == SHARD_HEADER_BYTES, "delta header layout");

/* One shard of an opened delta: the verified file bytes. */
struct delta_shard {
    const uint8_t *data; /* the whole file: header, upserts, deletes */
    uint8_t *owned;      /* data when read from disk (freed on close), or NULL */
    uint64_t upserts;    /* records after the header */
    uint64_t deletes;    /* u64 keys after the records */
};

struct store_delta {
    store_delta_info_t info;
    uint32_t value_bytes;      /* K x 4 or K x 2 */
    struct delta_shard *shard; /* info.layout.shards of them */
};

/* The shard of a key in any store of `shards` shards: store__shard_of_key
 * (store_internal.h). */


/* Encodes a delta shard header for shard i of m with the given counts. */
void store__delta_header_encode(const manifest_t *m, uint32_t i, uint64_t upserts,
                                uint64_t deletes, uint8_t out[SHARD_HEADER_BYTES]);

/* Verifies the n bytes at p as shard i's file of delta manifest m (file is
 * its name for messages): size, XXH3, header, order, uniqueness, ownership,
 * values.  0, or -1 with *err filled.  Does not block or allocate. */
int store__delta_check_file(const manifest_t *m, uint32_t i, const uint8_t *p, size_t n,
                            store_error_t *err);

/* Builds an opened delta from a decoded delta manifest m and its shard files
 * already in memory (borrowed: they must outlive *out), verifying every
 * file as store_delta_open does.  0 and *out set (store_delta_close), or
 * store_errc_errno(err->code) < 0.  For the fuzz target and tests. */
int store__delta_open_mem(const manifest_t *m, const uint8_t *const *files, const size_t *sizes,
                          store_delta_t **out, store_error_t *err);

/* The layout recorded in a manifest. */
void store__delta_layout_of_manifest(const manifest_t *m, store_delta_layout_t *out);

/* Names the first field in which a and b differ ("K 4 vs 8"), into why;
 * returns 0 when equal.  The hash seed is not compared: see delta.h. */
int store__delta_layout_diff(const store_delta_layout_t *a, const store_delta_layout_t *b,
                             char *why, size_t len);

/* Test hook: when > 0, store_delta_commit raises SIGKILL at its
 * store__delta_kill_at-th step (each mkdir, file write chunk, fsync,
 * rename), so a test can kill a writer at every point.  0 in production. */
extern int store__delta_kill_at;

#endif /* TL_STORE_DELTA_INTERNAL_H */
