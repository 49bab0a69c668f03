/*
 * manifest_testutil.h — test-only: build MANIFEST bytes with no field checks,
 * to reach decode errors that store__manifest_encode() refuses to write (names of 64+
 * bytes, a shard list whose length differs from shard_count, absent fields,
 * enum values out of range).  Linked into the test_manifest_* programs only.
 */
#ifndef TL_TESTS_MANIFEST_TESTUTIL_H
#define TL_TESTS_MANIFEST_TESTUTIL_H

#include "store/manifest.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct manifest_raw_shard {
    uint32_t index;
    const char *file; /* NULL: field absent */
    size_t file_len;  /* 0: strlen(file); else exact bytes (may hold NULs) */
    uint64_t entries;
    uint64_t bytes;
    uint64_t xxh3;
} manifest_raw_shard_t;

typedef struct manifest_raw {
    uint32_t format_version;
    const char *model_name; /* NULL: field absent */
    size_t model_name_len;  /* 0: strlen(model_name); else exact bytes */
    uint8_t model_kind;     /* written as is: any value */
    uint64_t version;
    uint64_t parent_version;
    uint64_t created_unix;
    uint32_t value_floats;
    uint8_t value_type; /* written as is: any value */
    uint32_t shard_count;
    const manifest_raw_shard_t *shards; /* NULL: list absent */
    size_t n_shards;                    /* list length, need not equal shard_count */
    int with_extras;                    /* also write params and dense_files (ignored by decode) */
} manifest_raw_t;

/* Serialises r exactly as given: FlatBuffer with identifier "TLMF", then the
 * 8-byte little-endian XXH3_64bits trailer.  Returns 0 and sets *buf
 * (malloc'd; caller frees) and *len, or -ENOMEM. */
int manifest_encode_unchecked(const manifest_raw_t *r, uint8_t **buf, size_t *len);

/* Rewrites the 8-byte trailer of buf[0..len) to the checksum of what precedes
 * it, so that a test can corrupt the FlatBuffer and still pass the checksum. */
void manifest_fix_trailer(uint8_t *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* TL_TESTS_MANIFEST_TESTUTIL_H */
