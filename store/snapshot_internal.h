/*
 * snapshot_internal.h — what the snapshot files (snapshot.c: format, names
 * and shared helpers; snapshot_load.c; snapshot_meta.c; snapshot_write.c)
 * share, and their entry points for store/'s own tests and fuzz targets: the shard file
 * header codec and the loader's in-memory path (the same verification and
 * build code that store_snapshot_load runs on mmap windows of real files).
 * Not for other folders: they use store.h.
 */
#ifndef TL_STORE_SNAPSHOT_INTERNAL_H
#define TL_STORE_SNAPSHOT_INTERNAL_H

#include "manifest.h"
#include "store.h"
#include "store_internal.h"

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
void store__snapshot_header_encode(const snapshot_header_t *h, uint8_t out[SHARD_HEADER_BYTES]);

/* Builds a store from shard files that are already in memory: files[i] and
 * sizes[i] hold the bytes of shard i of m (m->shard_count of them).  Runs
 * every check store_snapshot_load runs after reading the MANIFEST (sizes,
 * header, checksum, values, duplicates, ownership, counts), on the calling
 * thread, with the same error codes, files, offsets and messages.  Returns 0
 * and sets *out (the caller owns it: store_destroy), or -1 with *err filled
 * (err may be NULL), *out untouched and nothing left allocated.  m is
 * trusted to be well formed only in the ways store__manifest_decode guarantees for
 * shard_count and the shards array; sizes, counts and checksums are not
 * trusted.  Does not block on I/O; allocates the store. */
int store__snapshot_load_mem(const manifest_t *m, const uint8_t *const *files, const size_t *sizes,
                      store_t **out, store_error_t *err);

/* ---- shared by snapshot.c, snapshot_load.c and snapshot_write.c --------- */

/* Header field offsets (the picture in snapshot.c). */
enum {
    H_MAGIC = 0,
    H_FORMAT = 8,
    H_INDEX = 12,
    H_COUNT = 16,
    H_FLOATS = 20,
    H_DTYPE = 24,
    H_VBYTES = 28,
    H_ENTRIES = 32,
    H_PAD = 40,
    H_XXH3 = SNAPSHOT_HEADER_XXH3_AT,
};
_Static_assert(H_XXH3 + 8 == SHARD_HEADER_BYTES, "header layout");
_Static_assert(sizeof SNAPSHOT_SHARD_MAGIC == 9, "magic is 8 bytes");

static inline uint32_t get_le32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return le32toh(v);
}

static inline uint64_t get_le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return le64toh(v);
}

static inline void put_le32(uint8_t *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, sizeof v);
}

static inline void put_le64(uint8_t *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, sizeof v);
}

/* The text of errno e, in buf or static (strerror_r in its GNU form). */
const char *store__snap_errtext(int e, char *buf, size_t len);
#define ERRTEXT(e) store__snap_errtext((e), (char[128]){0}, 128)

/* manifest.cc's sentences start with "manifest: "; ours name the file
 * already. */
static inline const char *unprefixed(const char *why)
{
    return strncmp(why, "manifest: ", 10) == 0 ? why + 10 : why;
}

/* Sets *err to "no error": code STORE_OK, no file, offset -1. */
void store__snap_err_clear(store_error_t *err);

/* Fills *err: code, file, offset and "file: offset N: <fmt>". */
cold __attribute__((format(printf, 5, 6))) void
store__snap_fail(store_error_t *err, store_errc_t code, const char *file, int64_t offset,
                 const char *fmt, ...);

/* Index of the first of n records (at p, rec bytes apart) whose value holds
 * a NaN or an infinity, or n.  *which is the float's index in the value. */
size_t store__snap_first_bad_value(const uint8_t *p, size_t n, size_t rec, uint32_t K,
                                   store_dtype_t dt, uint32_t *which);

/* Fills *err with STORE_E_VALUE for float j of record rec at offset off. */
cold void store__snap_fail_value(store_error_t *err, const char *file, uint64_t off,
                                 const uint8_t *rec, uint32_t j, store_dtype_t dt);

/* The options a loader creates its store with for a snapshot of `total`
 * entries; the writer's relay_shard sizes its shards with the same. */
store_options_t store__snap_loader_options(uint32_t K, store_dtype_t dt, uint32_t shards,
                                           uint64_t total, uint64_t seed);

/* Opens dir (O_DIRECTORY).  The fd, or -1 with *err filled (STORE_E_IO). */
int store__snap_open_dir(const char *dir, store_error_t *err);

/* Removes the files of a writer's temporary directory, then the directory
 * (one level: a version being written holds files only).  Best effort. */
void store__remove_tmp_dir(const char *path);

/* Reads and decodes dir's MANIFEST (dirfd open on dir; dir for messages).
 * Returns 0 with *m filled (store__manifest_free it) or -1 with *err filled
 * (snapshot_meta.c). */
int store__snap_read_manifest(int dirfd, const char *dir, manifest_t *m, store_error_t *err);

/* Fills x from m: the params, and every dense file read and verified (data
 * malloc'd: store_extras_free).  0, or -1 with *err filled and x empty
 * (snapshot_meta.c). */
int store__snap_load_extras(int dirfd, const manifest_t *m, store_extras_t *x, store_error_t *err);

/* Opens file under dirfd for reading (O_NONBLOCK: a FIFO in its place
 * cannot hang the caller) and checks that it is a regular file of exactly
 * bytes bytes, the size its manifest gives.  The fd (the caller closes it),
 * or -1 with *err filled: STORE_E_IO (cannot open, not a regular file),
 * STORE_E_TRUNCATED (shorter; offset: its size) or STORE_E_SIZE (longer;
 * offset: bytes).  Does not block on a FIFO; stats the file (snapshot_meta.c). */
int store__open_sized(int dirfd, const char *file, uint64_t bytes, store_error_t *err);

/* Reads exactly len bytes of fd at file offset off into buf, at most 16 MiB
 * per pread(2), retrying EINTR.  0, or -1 with *err filled naming file and
 * the offset reached: STORE_E_IO (a read failed) or STORE_E_TRUNCATED (the
 * file ended first: it shrank after it was checked).  Blocks on the disk
 * (snapshot_meta.c). */
int store__pread_all(int fd, void *buf, uint64_t len, uint64_t off, const char *file,
                     store_error_t *err);

/* Index of the first NaN or infinity among n floats, or n. */
size_t store__snap_first_nonfinite(const float *v, size_t n);

#endif /* TL_STORE_SNAPSHOT_INTERNAL_H */
