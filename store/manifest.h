/*
 * manifest.h — the snapshot MANIFEST: a FlatBuffers table (schema in
 * manifest.fbs) followed by an 8-byte little-endian xxh3-64 of the table.
 * flatc emits C++, so manifest.cc is the thin shim that gives C this API.
 * Internal to store/.
 */
#ifndef TL_STORE_MANIFEST_H
#define TL_STORE_MANIFEST_H

#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MANIFEST_FORMAT_VERSION 1       /* a full snapshot's manifest */
#define MANIFEST_FORMAT_VERSION_DELTA 2 /* a delta's: refused by readers of full snapshots only */
#define MANIFEST_PRODUCER_MAX 64        /* bytes incl. NUL: 0..63 printable ASCII */

/* What a version directory holds (manifest.fbs VersionKind). */
typedef enum manifest_kind {
    MANIFEST_KIND_FULL = 0,  /* the whole model, one shard file per shard */
    MANIFEST_KIND_DELTA = 1, /* upserts and deletes against meta.parent_version */
} manifest_kind_t;
#define MANIFEST_FILE_NAME "MANIFEST"
#define MANIFEST_MAX_BYTES (1u << 20) /* a manifest larger than this is refused */
#define SHARD_HEADER_BYTES 64u

typedef struct manifest_shard {
    uint32_t index;    /* 0..shard_count-1, equal to its position */
    char file[64];     /* plain file name in the snapshot dir: "shard-00003.tls" */
    uint64_t entries;  /* records in the file */
    uint64_t bytes;    /* file size: SHARD_HEADER_BYTES + entries * (8 + value bytes)
                        * + deletes * 8 */
    uint64_t xxh3;     /* XXH3_64bits of the whole file */
    uint64_t deletes;  /* DELTA: deleted keys after the entries (upserts); FULL: 0 */
} manifest_shard_t;

/* One dense array file (store_extras_t's dense[i]): "dense-NN.tld". */
#define DENSE_HEADER_BYTES 16u
#define DENSE_MAGIC "TLDENSE1"
typedef struct manifest_dense {
    char name[STORE_DENSE_NAME_MAX]; /* what it holds: "mlp.0.weight" */
    char file[64];                   /* plain file name, same rules as shard files */
    uint64_t bytes;                  /* DENSE_HEADER_BYTES + 4 x count, count 1..STORE_DENSE_MAX_FLOATS */
    uint64_t xxh3;                   /* XXH3_64bits of the whole file */
} manifest_dense_t;

typedef struct manifest {
    uint32_t format_version;   /* MANIFEST_FORMAT_VERSION */
    store_meta_t meta;         /* model name, kind, version, parent, created */
    uint32_t value_floats;     /* K: 1..STORE_MAX_VALUE_FLOATS */
    store_dtype_t dtype;       /* F32 or F16 */
    uint32_t shard_count;      /* power of two, 1..STORE_MAX_SHARDS */
    manifest_shard_t *shards;  /* shard_count entries; owned (store__manifest_free) */
    uint32_t n_params;         /* 0..STORE_MAX_PARAMS: hyper-parameters, distinct keys */
    store_param_t params[STORE_MAX_PARAMS];
    uint32_t n_dense;          /* 0..STORE_MAX_DENSE: dense array files, distinct names */
    manifest_dense_t dense[STORE_MAX_DENSE];
    uint64_t hash_seed;        /* store_hash_seed of the written store; 0 = none */
    manifest_kind_t kind;      /* FULL (format_version 1) or DELTA (format_version 2) */
    char producer[MANIFEST_PRODUCER_MAX]; /* who wrote it; "" when not recorded */
} manifest_t;

/* Serialises m.  On success returns 0 and sets *buf (malloc'd; caller frees)
 * and *len.  Returns -EINVAL when m itself fails the checks
 * store__manifest_decode applies (why says which), -ENOMEM on allocation
 * failure. */
int store__manifest_encode(const manifest_t *m, uint8_t **buf, size_t *len, char *why,
                           size_t why_len);

/* Parses and verifies untrusted bytes: size limit, trailer checksum,
 * FlatBuffers verifier, file identifier, then every field (version, name
 * characters, kind, K, dtype, shard count a power of two equal to the shard
 * list's length, index == position, safe file names, bytes consistent with
 * entries, no overflow; params: at most STORE_MAX_PARAMS, keys 1..31 bytes
 * of [A-Za-z0-9_.-] and distinct, values 0..127 printable ASCII bytes;
 * dense files: at most STORE_MAX_DENSE, names like keys and distinct, file
 * names like shard files and distinct from every other file, bytes =
 * 16 + 4 x count with count 1..STORE_DENSE_MAX_FLOATS; versions:
 * format_version 1 with kind FULL and no deletes, or 2 with kind DELTA,
 * parent_version > 0 and != version, no dense files; producer 0..63
 * printable ASCII bytes).  Returns 0 and
 * fills *out (out->shards malloc'd; free with store__manifest_free), or
 * -EBADMSG with a sentence in why; -ENOMEM when an allocation fails, -EINVAL
 * when out is NULL.  On failure *out is zeroed, so store__manifest_free(out)
 * is always safe. */
int store__manifest_decode(const uint8_t *buf, size_t len, manifest_t *out, char *why,
                           size_t why_len);

void store__manifest_free(manifest_t *m);

#ifdef __cplusplus
}
#endif
#endif /* TL_STORE_MANIFEST_H */
