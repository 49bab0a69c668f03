/*
 * delta.h — delta versions of a model: upserts and deletes against a named
 * parent version, written atomically, read with every byte checked, and
 * resolved into chains (full + deltas) inside a model repository.
 *
 * A REPOSITORY holds one directory per model and, in it, one directory per
 * version, named by the version number in decimal:
 *
 *   <repo>/<model>/<version>/MANIFEST ...
 *
 * A version is full (store_snapshot_write) or a delta (this header).  A
 * delta's MANIFEST has kind DELTA, the parent's version, the producer ("tlsnap
 * diff", "tltrain", "online"), the layout it was written for (model name and
 * kind, K, dtype, shard count: all equal to the parent's; the parent's hash
 * seed, informative), and per
 * shard the upsert and delete counts, the file size and XXH3 (format:
 * store/delta_format.c).  Its format_version is 2, so a reader of full
 * snapshots only refuses it, and store_snapshot_load says it is a delta.
 *
 * ATOMICITY: a writer builds the version in "<dir's parent>/.tmp-<name>-<pid>",
 * fsyncs every file, writes the MANIFEST last, fsyncs, renames the directory
 * to its final name (never replacing one) and fsyncs the parent.  Readers
 * never see half a version; kill -9 at any point leaves either no version or
 * a whole one, plus perhaps a ".tmp-*" directory that readers ignore
 * (store_version_is_temp) and that ops may delete.
 *
 * THREAD SAFETY
 *   - A writer is one object for one thread: no call on it may run
 *     concurrently with another call on the same writer.  Writers of
 *     different versions are independent.
 *   - An opened delta (store_delta_t) is immutable: any number of threads may
 *     read and iterate it at once.
 *   - store_delta_apply needs the store's writer rules (store.h): no other
 *     writer on any shard and, because it deletes and overwrites, readers that
 *     must see one version should read another store (a copy) meanwhile.
 *
 * ERRORS: as store.h: 0 or -errno (store_errc_errno of err->code), with
 * *err naming the file, the byte offset and what was wrong (err may be NULL).
 */
#ifndef TL_STORE_DELTA_H
#define TL_STORE_DELTA_H

#include "store.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STORE_PRODUCER_MAX 64 /* bytes incl. NUL: 0..63 printable ASCII */
#define STORE_CHAIN_MAX 4096  /* links in a chain (full + deltas) */

/* What a delta must share with its parent and with the store it is applied
 * to.  Fill it from the parent (store_delta_layout_of) rather than by hand.
 *
 * The hash seed is recorded but never refuses a delta: it places keys in
 * buckets inside a shard and does not choose the shard (that is the top
 * bits of the key's hash and the shard count), so a delta applies the same
 * to any store of the model.  Two stores holding the same version may have
 * different seeds (a full snapshot written by a trainer, the same version
 * rebuilt from a chain), and refusing on it would refuse a sound delta. */
typedef struct store_delta_layout {
    char model_name[64];           /* [A-Za-z0-9_.-]+, NUL-terminated */
    store_model_kind_t model_kind; /* LR, FM, FFM, DNN */
    uint32_t value_floats;         /* K: 1..STORE_MAX_VALUE_FLOATS */
    store_dtype_t dtype;           /* storage type of the values */
    uint32_t shards;               /* power of two, 1..STORE_MAX_SHARDS */
    uint64_t hash_seed;            /* the parent's store_hash_seed (informative, see above) */
} store_delta_layout_t;

/* The layout of the full snapshot in dir, read from its MANIFEST alone (as
 * store_snapshot_read_meta, which it extends): the one a delta of that
 * version must have.  0, or -errno with err. */
int store_snapshot_read_layout(const char *dir, store_delta_layout_t *lay, store_meta_t *meta,
                               uint64_t *entries, store_error_t *err);

/* The layout of a loaded store s whose meta is meta (its model name and
 * kind): the one to give store_delta_begin for a delta of that version. */
void store_delta_layout_of(const store_t *s, const store_meta_t *meta, store_delta_layout_t *out);

/* ---- writing ------------------------------------------------------------ */

typedef struct store_delta_writer store_delta_writer_t; /* opaque */

/* Starts a delta of version `version` against `parent_version` (> 0, not
 * equal) for a parent of layout `parent`, to be published as directory dir
 * (e.g. "<repo>/<model>/<version>"; its parent directory must exist and dir
 * must not).  producer: 0..63 printable ASCII bytes (NULL = "").  Nothing
 * touches the disk before store_delta_commit.  Returns 0 and sets *out
 * (freed by store_delta_commit or store_delta_abort, exactly one of them),
 * or -EINVAL with *err filled (STORE_E_INVALID), -EEXIST when dir exists,
 * -ENOMEM.  Does not block. */
int store_delta_begin(const char *dir, const store_delta_layout_t *parent,
                      uint64_t parent_version, uint64_t version, const char *producer,
                      store_delta_writer_t **out, store_error_t *err);

/* Records an upsert of key with K floats (converted to the layout's dtype).
 * Puts and deletes may come in any order and for any shard; for a key given
 * more than once, the LAST call wins (a put after a delete is an upsert, a
 * delete after a put is a delete), so a trainer may stream its changes as
 * they happen.  Memory grows with the calls (8 + 8 + value bytes each), not
 * with the model.  Returns 0, -EINVAL when a value is NaN or infinite (or
 * overflows fp16; nothing recorded) or -ENOMEM.  Never blocks. */
int store_delta_put(store_delta_writer_t *w, uint64_t key, const float *value);

/* Records a delete of key (last call wins, as above).  0 or -ENOMEM. */
int store_delta_del(store_delta_writer_t *w, uint64_t key);

/* Writes the delta (sorted per shard, one file per shard, MANIFEST last)
 * into a temporary directory next to dir and renames it to dir, with the
 * fsyncs of the header above; created_unix is now.  Frees w whatever the
 * outcome.  On failure removes the temporary directory and returns
 * store_errc_errno(err->code) < 0: -EEXIST when dir appeared meanwhile,
 * -EIO, -ENOMEM, -EINVAL (a path too long).  One failure comes after the
 * rename: -EIO naming the parent directory's fsync, with the version in
 * place, whole, but perhaps not durable.  Blocks (writes and fsyncs). */
int store_delta_commit(store_delta_writer_t *w, store_error_t *err);

/* A file of the producer's own in the version (the online trainer's
 * optimizer state): at commit, after the shard files and before the
 * MANIFEST, fn(ctx, dirfd) is called with the temporary directory open as
 * dirfd and writes its file(s) there (fsynced, names other than the shard
 * files' and MANIFEST), so they appear with the version atomically.  fn
 * returns 0 or -errno; a failure fails the commit, naming `what`.  Readers
 * of versions ignore files the manifest does not list.  One per writer (a
 * later call replaces it); fn NULL removes it.  Never blocks. */
typedef int (*store_delta_side_fn)(void *ctx, int dirfd);
void store_delta_side_file(store_delta_writer_t *w, const char *what, store_delta_side_fn fn,
                           void *ctx);

/* Drops w and everything recorded.  NULL is a no-op.  Never blocks. */
void store_delta_abort(store_delta_writer_t *w);

/* ---- reading ------------------------------------------------------------ */

typedef struct store_delta store_delta_t; /* opaque, immutable once opened */

typedef struct store_delta_info {
    store_meta_t meta;           /* name, kind, version, parent_version (> 0), created */
    store_delta_layout_t layout; /* what the parent must match */
    char producer[STORE_PRODUCER_MAX];
    uint64_t upserts;            /* in all shards */
    uint64_t deletes;            /* in all shards */
} store_delta_info_t;

/* Opens the delta in dir and verifies all of it before returning: the
 * MANIFEST (checksum, fields, kind DELTA), every shard file's size and
 * XXH3, its header against the manifest, keys sorted ascending and unique
 * within the upserts and within the deletes, no key both upserted and
 * deleted, every key in its shard's file, values finite.  Files are read
 * into memory (the delta's size).  Returns 0 and sets *out (free with
 * store_delta_close), or store_errc_errno(err->code) < 0: -ENOENT (no
 * MANIFEST), -EIO, -ENOMEM, -EBADMSG (any bad content, including a full
 * snapshot: "version N is full, not a delta").  Blocks (reads). */
int store_delta_open(const char *dir, store_delta_t **out, store_error_t *err);

/* Frees d (NULL-safe).  No other thread may still use it. */
void store_delta_close(store_delta_t *d);

/* The delta's manifest facts; valid until store_delta_close. */
const store_delta_info_t *store_delta_info(const store_delta_t *d);

/* Counts of one shard (shard < layout.shards): 0, or -EINVAL. */
int store_delta_shard_counts(const store_delta_t *d, uint32_t shard, uint64_t *upserts,
                             uint64_t *deletes);

/* Calls upsert(ctx, key, value) for every upsert of shard in ascending key
 * order (value: K fp32 floats, valid during the call), then del(ctx, key)
 * for every delete in ascending key order.  Either callback may be NULL
 * (skipped).  Stops and returns the first non-zero callback value; 0 after
 * the last; -EINVAL for a shard out of range.  Never blocks, never
 * allocates. */
typedef int (*store_delta_upsert_fn)(void *ctx, uint64_t key, const float *value);
typedef int (*store_delta_del_fn)(void *ctx, uint64_t key);
int store_delta_foreach(const store_delta_t *d, uint32_t shard, store_delta_upsert_fn upsert,
                        store_delta_del_fn del, void *ctx);

/* ---- applying ------------------------------------------------------------- */

/* Applies d to s, whose meta is *meta: refuses (STORE_E_MISMATCH, nothing
 * changed) a delta whose parent_version is not meta->version, or whose model
 * name, kind, K, dtype or shard count differ from s's, or that deletes a key
 * s does not hold; then upserts and
 * deletes shard by shard and sets meta->version and meta->created_unix to the
 * delta's (parent_version stays 0: s now holds a whole model).  Returns 0 or
 * store_errc_errno(err->code) < 0.  On -ENOMEM (STORE_E_NOMEM) s is partly
 * updated and must be discarded.  Needs no concurrent writer; blocks for
 * as long as the delta takes. */
int store_delta_apply(store_t *s, store_meta_t *meta, const store_delta_t *d,
                      store_error_t *err);

/* Writes the exact difference NEW - OLD as a delta of old_meta->version
 * named new_meta->version into dir: every key of NEW that OLD lacks or
 * holds with other value bits as an upsert, every key of OLD that NEW lacks
 * as a delete.  The two must share model name, kind, K, dtype and shard
 * count (STORE_E_MISMATCH otherwise); the delta records OLD's hash seed.
 * new_meta->version must differ from old_meta->version.  Needs no concurrent
 * writer on either store.  Returns 0 or store_errc_errno(err->code) < 0;
 * *upserts / *deletes (may be NULL) receive the counts.  Blocks. */
int store_delta_diff(const store_t *old_s, const store_meta_t *old_meta, const store_t *new_s,
                     const store_meta_t *new_meta, const char *dir, const char *producer,
                     uint64_t *upserts, uint64_t *deletes, store_error_t *err);

/* ---- repositories: chains and listings ------------------------------------ */

/* A full version written as a delta is (store_delta_commit): store_snapshot_write_ex
 * of s, meta and x (NULL: none) with producer (NULL = "") in its manifest,
 * into "<dir's parent>/.tmp-<name>-<pid>"; then side(ctx, dirfd) (NULL: none)
 * writes the producer's own files there (store_delta_side_file's rule);
 * then the directory is renamed to dir (never replacing one) and the parent
 * fsynced.  A kill at any point leaves no version or a whole one.  Needs no
 * concurrent writer of s.  0, or store_errc_errno(err->code) < 0: -EEXIST
 * when dir exists, -EIO (the last, after the rename: the parent's fsync,
 * the version in place but perhaps not durable), -ENOMEM, -EINVAL.  Blocks. */
typedef int (*store_snapshot_side_fn)(void *ctx, int dirfd);
int store_snapshot_publish(const store_t *s, const char *dir, const store_meta_t *meta,
                           const store_extras_t *x, const char *producer,
                           store_snapshot_side_fn side, void *ctx, store_error_t *err);

/* The producer recorded in the MANIFEST of version directory dir, full or
 * delta ("" when none); *full (may be NULL) whether it is a full version,
 * *meta (may be NULL) its meta.  Reads the manifest only.  0, or
 * store_errc_errno(err->code) < 0 (err may be NULL). */
int store_version_producer(const char *dir, char producer[STORE_PRODUCER_MAX], bool *full,
                           store_meta_t *meta, store_error_t *err);

typedef struct store_chain {
    uint32_t n;                         /* links: 1 (a full version) .. STORE_CHAIN_MAX */
    uint64_t versions[STORE_CHAIN_MAX]; /* versions[0] is full, the rest deltas, in order;
                                         * versions[n-1] is the one asked for */
    uint64_t created_unix[STORE_CHAIN_MAX]; /* each link's manifest created time: with the
                                             * version, tells a loaded version from another
                                             * of the same number */
} store_chain_t;

/* Resolves the chain leading to `version` in model_dir ("<repo>/<model>"):
 * reads "<model_dir>/<version>/MANIFEST", then its parent's, and so on until
 * a full version.  Each manifest must record the version its directory is
 * named by; each delta's parent must exist, have the delta's model name and
 * layout, and be the previous link.  A missing parent (a gap), a cycle, a
 * foreign parent (other model or layout) or a chain longer than
 * STORE_CHAIN_MAX is STORE_E_MISMATCH (missing: STORE_E_NO_MANIFEST) naming
 * the version.  Reads manifests only (not the shard files: opening each
 * link verifies those).  Returns 0 with *out filled, or
 * store_errc_errno(err->code) < 0.  *out is about 64 KiB: allocate it.
 * Blocks. */
int store_version_chain(const char *model_dir, uint64_t version, store_chain_t *out,
                        store_error_t *err);

/* 1 when name is a temporary directory of an unfinished or killed write
 * (".tmp-..."), which every reader ignores; 0 otherwise. */
int store_version_is_temp(const char *name);

/* Parses a version directory name: decimal digits only, no leading zero,
 * 1 .. 2^63-1 (a manifest's range).  Returns 1 and sets *version, or 0 (not a version:
 * temporaries, dot names, anything else). */
int store_version_parse(const char *name, uint64_t *version);

/* Lists the versions in model_dir (directory names store_version_parse
 * accepts; temporaries and other names are skipped), ascending, at most
 * max of them into versions.  Returns the number found (which may exceed
 * max: then only the max smallest are stored), or -errno.  Blocks. */
long store_version_list(const char *model_dir, uint64_t *versions, size_t max);

#ifdef __cplusplus
}
#endif
#endif /* TL_STORE_DELTA_H */
