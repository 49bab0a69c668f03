/*
 * store.h — tlserve's parameter store: tl_hash_map and model snapshots.
 *
 * A store maps 64-bit feature ids to fixed-width values (K floats, kept as
 * fp32 or fp16).  It is split into 2^b shards chosen from the key's hash; each
 * shard has its own sub-tables, its own single writer and any number of
 * lock-free readers.  A snapshot is a directory (a FlatBuffers manifest plus
 * one file per shard) that store_snapshot_write() produces and
 * store_snapshot_load() turns back into a store, one thread per core.
 *
 * THREAD SAFETY
 *   - Lookups (store_lookup*, store_count*, store_stats) may run on any number
 *     of threads at once, alongside writers.  They take no lock.
 *   - Writers (store_upsert, store_delete, store_reserve_shard, ...) must be
 *     serialised per shard by the caller: at most one writer per shard at a
 *     time.  Writers of different shards may run in parallel.
 *   - store_destroy() and iteration need no concurrent writer of the shard(s)
 *     they touch; store_destroy() needs no concurrent reader at all.
 *
 * ERRORS
 *   Functions return 0 (or a count) on success and -errno on failure; the
 *   snapshot functions also fill a store_error_t that names the file, the
 *   byte offset and what was wrong, and return the errno its code maps to
 *   (store_errc_errno): -EIO, -ENOMEM, -EEXIST, -ENOENT (no MANIFEST),
 *   -EINVAL (bad arguments), -EBADMSG (any bad content: a corrupt,
 *   truncated or inconsistent file, or a model the model layer refuses).
 */
#ifndef TL_STORE_H
#define TL_STORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct store store_t; /* opaque */

#define STORE_MAX_VALUE_FLOATS 1024 /* FFM rows are 1 + fields x k floats */
#define STORE_MAX_SHARDS 256

typedef enum store_dtype {
    STORE_DTYPE_F32 = 0, /* 4 bytes per float */
    STORE_DTYPE_F16 = 1, /* IEEE half, 2 bytes per float; lookups return fp32 */
} store_dtype_t;

typedef struct store_options {
    uint32_t value_floats;  /* K: 1..STORE_MAX_VALUE_FLOATS */
    store_dtype_t dtype;    /* storage type of the values */
    uint32_t shards;        /* power of two, 1..STORE_MAX_SHARDS; 0 = 16 */
    uint64_t expected_keys; /* sizing hint for the whole store; 0 = small */
    double max_load;        /* slot fill that triggers growth; 0 = 0.95 */
    uint64_t hash_seed;     /* seed of the bucket placement; 0 = a random one.
                             * Snapshots record it and a load reuses it: see
                             * store_hash_seed */
} store_options_t;

typedef struct store_stats {
    uint64_t entries;      /* exact number of keys */
    uint64_t slots;        /* bucket slots in all sub-tables */
    uint64_t table_bytes;  /* bytes mapped for buckets, values and stashes */
    uint64_t subtables;    /* sub-tables in all shards */
    uint64_t stashed;      /* entries that live in overflow stashes */
    uint64_t rebuilds;     /* sub-table rebuilds (growth) so far */
} store_stats_t;

/* Creates an empty store.  Returns 0 and sets *out, or -EINVAL (bad options,
 * named on stderr-free terms by store_options_check) or -ENOMEM.  The caller
 * owns *out and frees it with store_destroy().  May block (mmap). */
int store_create(const store_options_t *opt, store_t **out);

/* Checks options without creating anything; returns 0 or -EINVAL and, when
 * why != NULL, a sentence naming the bad field. */
int store_options_check(const store_options_t *opt, char *why, size_t why_len);

/* Frees the store and every sub-table.  No reader or writer may be active. */
void store_destroy(store_t *s);

uint32_t store_value_floats(const store_t *s);
store_dtype_t store_dtype(const store_t *s);
uint32_t store_shards(const store_t *s);
/* The store's bucket placement seed (never 0): opt->hash_seed, or the random
 * one store_create drew.  Keys go to buckets by their hash mixed with it, so
 * that two stores place the same keys differently (a stream in one store's
 * bucket order does not pile into a few buckets of another).  A snapshot
 * records it and store_snapshot_load creates the store with it: the records,
 * written in the bucket order of a store sized as the loader sizes it (the
 * writer re-places a shard of a grown or over-sized store first), then fill
 * the new table front to back instead of at random (1.5x faster loads at
 * 100M keys; 2-2.9x for a grown store's snapshot). */
uint64_t store_hash_seed(const store_t *s);
/* Which shard owns key: route writes for one shard to one writer thread. */
uint32_t store_shard_of(const store_t *s, uint64_t key);

/* Exact number of keys in the store / in one shard (relaxed: exact once the
 * writers are quiet). */
uint64_t store_count(const store_t *s);
uint64_t store_shard_count(const store_t *s, uint32_t shard);
void store_stats(const store_t *s, store_stats_t *st);

/* Where entries sit, for benchmarks and diagnostics: a hit reads
 * 1 + alternate/entries cache lines on average, a miss
 * 1 + overflowed/buckets.  Scans every bucket (seconds at 10^9 keys), so
 * never on a request path; relaxed: exact once the writers are quiet. */
typedef struct store_layout {
    uint64_t buckets;            /* buckets in all sub-tables */
    uint64_t overflowed_buckets; /* buckets whose overflow flag is set */
    uint64_t alternate_entries;  /* entries that sit in their alternate bucket */
} store_layout_t;
void store_layout(const store_t *s, store_layout_t *out);

/* ---- reads (lock-free; any thread) ------------------------------------ */

/* Looks up n keys.  For key i, copies its K floats to out[i*K .. i*K+K-1]
 * (converted to fp32) or writes K zeros when the key is absent; found[i] is
 * set to 1 or 0 when found != NULL.  Returns the number of keys found.
 * Prefetches across the batch, so large batches (>= 64) run much faster than
 * n single lookups.  Never blocks, never allocates. */
size_t store_lookup_batch(const store_t *s, const uint64_t *keys, size_t n,
                          float *out, uint8_t *found);

/* One key: returns 1 and fills out[0..K-1] when present, 0 when absent. */
int store_lookup(const store_t *s, uint64_t key, float *out);

/* ---- epoch-based reclamation for memory beside a store (epoch.c) ------ */

/* The store's own read sections, for a library that swaps memory readers
 * use beside the store (the model's served DNN MLP): a reader brackets its
 * use of the shared pointer with store_epoch_enter() / _exit() (two stores
 * to a thread-private line; sections nest), and a writer that unlinked the
 * old memory calls store_epoch_synchronize(), which blocks (spins, then
 * yields) until every read section begun before it has ended; then the old
 * memory is the writer's again.  Never call synchronize inside a section. */
void store_epoch_enter(void);
void store_epoch_exit(void);
void store_epoch_synchronize(void);

/* ---- split lookups over helper threads (store_team.c) ----------------- */

/* A request of 200 items looks up ~40,000 ids; on one core that takes about a
 * millisecond, nearly all of a request's service time.  A team is a few
 * helper threads that sleep until a caller hands them such a lookup; caller
 * and helpers then take chunks of it until none are left, so one request's
 * lookups finish in about 1/(helpers+1) of the time when cores are free, and
 * in no more than the caller's own time when they are not (a busy helper
 * simply takes no chunk).
 *
 * The team runs one shared lookup at a time: a caller that finds it taken
 * (another thread's lookup) does its own lookup alone, at once — its core is
 * then as busy as splitting would make it.  Lookups smaller than the team's
 * min_keys are never split (waking a helper costs more than they take).
 *
 * THREAD SAFETY: store_team_lookup() may be called from any number of
 * threads at once; store_team_destroy() only when no call is running.  The
 * store looked up must outlive the call, as for store_lookup_batch().
 */
typedef struct store_team store_team_t; /* opaque */

#define STORE_TEAM_MAX_HELPERS 64

/* Starts `helpers` threads (1..STORE_TEAM_MAX_HELPERS).  Lookups of fewer
 * than min_keys keys (0: 8192) are not split.  Returns 0 or -errno. */
int store_team_create(int helpers, size_t min_keys, store_team_t **out);

/* Stops and joins the helpers, frees the team.  NULL is a no-op. */
void store_team_destroy(store_team_t *t);

/* store_lookup_batch() with the same arguments and result, split over the
 * team when it is free and n >= min_keys.  t may be NULL (no split). */
size_t store_team_lookup(store_team_t *t, const store_t *s, const uint64_t *keys, size_t n,
                         float *out, uint8_t *found);

/* Lookups split so far (the rest ran alone); for metrics and tests. */
uint64_t store_team_splits(const store_team_t *t);

/* Split lookups whose caller slept waiting for a helper's last chunk (a
 * helper preempted inside it: the caller frees its core rather than spin
 * through the helper's wait for one); for metrics and tests. */
uint64_t store_team_sleeps(const store_team_t *t);

/* ---- writes (one writer per shard) ------------------------------------ */

/* Inserts key or overwrites its value (K floats, converted to the storage
 * dtype).  Returns 1 when the key is new, 0 when it existed, -ENOMEM when a
 * sub-table could not grow (the store is unchanged).  A K=1 fp32 overwrite is
 * a single atomic 4-byte store that readers never see torn. */
int store_upsert(store_t *s, uint64_t key, const float *value);

/* store_upsert for a writer that must never make readers wait: the online
 * trainer, which runs at a low priority and, preempted inside a versioned
 * write, would leave every reader of that sub-table spinning until it runs
 * again.  An existing key's floats are overwritten one by one (relaxed
 * 4-byte stores) without the version change, so a reader may see a row
 * with some floats old and some new (each float whole, none torn); a new
 * key is inserted as store_upsert inserts it.  fp32 stores only (-EINVAL);
 * otherwise store_upsert's returns. */
int store_upsert_relaxed(store_t *s, uint64_t key, const float *value);

/* The keys of keys[0..n) that s holds get values[i * K ..] as
 * store_upsert_relaxed writes them (no version change: a reader may see a
 * row mixing old and new floats), the absent ones nothing (written[i], when
 * not NULL, says which); pipelined as store_upsert_batch.  For a writer
 * whose readers never use these keys' rows from s while it writes (a
 * delta's fold: they read the overlay's).  Returns the number written.
 * Any dtype. */
int store_overwrite_batch(store_t *s, const uint64_t *keys, const float *values, size_t n,
                          uint8_t *written);

/* Prefetches, for writing, the primary bucket (and its values) of each of
 * the n keys: a writer about to upsert keys of a store larger than the
 * cache calls it first, so that the upserts' misses overlap instead of
 * coming one by one.  The writer's call (store.h's rule: no concurrent
 * writer of those shards); changes nothing. */
void store_prefetch_write(const store_t *s, const uint64_t *keys, size_t n);

/* store_upsert() of n keys in order, values[i * K ..] the i-th key's K
 * floats (a key given twice ends with its last value), with the buckets of
 * the keys PIPELINE_AHEAD (16) positions ahead prefetched while the current
 * one is written: a writer of a store larger than the cache gets its misses
 * overlapped.  Returns the number of new keys, or -ENOMEM when a sub-table
 * could not grow (the keys before the failing one are written). */
int store_upsert_batch(store_t *s, const uint64_t *keys, const float *values, size_t n);

/* For the store's writer when NO OTHER THREAD READS the store (a trainer's
 * private state): slots[i] = where key i's K floats lie, to be read and
 * written in place, or NULL when it is absent; the buckets pipelined as in
 * store_upsert_batch.  The pointers hold until the next write of any kind
 * to the store (an insert may move entries).  In-place writes bypass the
 * readers' version checks, hence the rule.  Returns the number found, or
 * -EINVAL for an fp16 store. */
int store_locate_batch(store_t *s, const uint64_t *keys, size_t n, float **slots);

/* Removes key.  Returns 1 when it was present, 0 when absent. */
int store_delete(store_t *s, uint64_t key);

/* Sizes one shard's sub-tables for `keys` entries in all so that inserting
 * them causes no growth.  Returns 0 or -ENOMEM. */
int store_reserve_shard(store_t *s, uint32_t shard, uint64_t keys);

/* Sub-tables: every shard has the same power-of-two number of them, fixed
 * at store_create() from expected_keys; store_sub_of says which one of its
 * shard a key goes to.  Pure functions of the store's shape: any thread. */
uint32_t store_subs_per_shard(const store_t *s);
uint32_t store_sub_of(const store_t *s, uint64_t key);

/* Sizes each sub-table u of shard for exactly counts[u] keys (counts has
 * store_subs_per_shard(s) entries; the keys the caller will insert, counted
 * with store_sub_of), as the snapshot loader sizes a shard.  A store created
 * with expected_keys = its final count and filled after this has the
 * loader's layout, so store_snapshot_write writes it as it is (a store sized
 * otherwise is re-laid out shard by shard first).  Returns 0, -EINVAL for a
 * shard out of range, or -ENOMEM with *bad_sub (may be NULL) the sub-table
 * that could not be sized. */
int store_reserve_shard_exact(store_t *s, uint32_t shard, const uint64_t *counts,
                              uint32_t *bad_sub);

/* ---- iteration (no concurrent writer on the shard) -------------------- */

/* Calls fn(ctx, key, value) for every entry of shard, value as K fp32
 * floats (valid during the call only).  Stops and returns fn's value when fn
 * returns non-zero; returns 0 after the last entry. */
typedef int (*store_visit_fn)(void *ctx, uint64_t key, const float *value);
int store_foreach(const store_t *s, uint32_t shard, store_visit_fn fn, void *ctx);

/* ---- snapshots ---------------------------------------------------------- */

typedef enum store_model_kind {
    STORE_MODEL_LR = 0,
    STORE_MODEL_FM = 1,
    STORE_MODEL_FFM = 2,
    STORE_MODEL_DNN = 3,
} store_model_kind_t;

typedef struct store_meta {
    char model_name[64];         /* [A-Za-z0-9_.-]+, NUL-terminated */
    store_model_kind_t model_kind;
    uint64_t version;            /* > 0 */
    uint64_t parent_version;     /* 0 for a full snapshot */
    uint64_t created_unix;       /* seconds; 0 = now on write */
} store_meta_t;

/* Whether name is a model name a snapshot may carry (1..63 bytes of
 * [A-Za-z0-9_.-], not "." or ".."): 0, or -1 with a sentence naming the
 * offending byte in why.  Tools call it on a --name before long work, so a
 * bad name is refused at once rather than at the write. */
int store_model_name_check(const char *name, char *why, size_t why_len);

typedef enum store_errc {
    STORE_OK = 0,
    STORE_E_IO,            /* open/read/write/fsync/rename failed (msg has errno text) */
    STORE_E_NOMEM,         /* allocation or mmap failed */
    STORE_E_EXISTS,        /* write: the directory already holds a snapshot */
    STORE_E_NO_MANIFEST,   /* load: the directory has no MANIFEST */
    STORE_E_MANIFEST,      /* load: manifest fails verification or has bad fields */
    STORE_E_TRUNCATED,     /* a file is shorter than its header/manifest says */
    STORE_E_SIZE,          /* a file's size differs from the manifest (longer) */
    STORE_E_CHECKSUM,      /* xxh3 of a file differs from the manifest */
    STORE_E_HEADER,        /* bad magic/version/fields in a shard file header */
    STORE_E_MISMATCH,      /* header fields disagree with the manifest */
    STORE_E_DUPLICATE,     /* a key appears twice */
    STORE_E_WRONG_SHARD,   /* a key in the file of a shard that does not own it */
    STORE_E_VALUE,         /* a value is NaN or infinite */
    STORE_E_INVALID,       /* bad arguments (meta, dir name, thread count) */
    STORE_E_MODEL,         /* a sound snapshot whose model the model layer refuses
                              (kind, params or dense arrays it cannot score or train);
                              set by model/, never by the store */
} store_errc_t;

typedef struct store_error {
    store_errc_t code;
    char file[256];  /* file name inside the snapshot dir ("" when none) */
    int64_t offset;  /* byte offset in that file, -1 when not applicable */
    char msg[512];   /* one sentence: file, offset and what was wrong */
} store_error_t;

/* Writes s as a full snapshot into directory dir (created if missing; it
 * must not already contain a MANIFEST).  Each shard file is written to a
 * temporary name, fsynced and renamed; the MANIFEST is written last, the same
 * way, and the directory is fsynced.  Needs no concurrent writer.  Blocks.
 * Returns 0, or store_errc_errno(err->code) < 0 with *err filled (err may
 * be NULL). */
int store_snapshot_write(const store_t *s, const char *dir, const store_meta_t *meta,
                         store_error_t *err);

/* Loads the snapshot in dir with `threads` loader threads (0 = one per
 * core), verifying every checksum, count and key.  On success returns 0,
 * sets *out (caller owns it) and fills *meta when non-NULL.  On any failure
 * returns store_errc_errno(err->code) < 0 with *err filled (err may be
 * NULL) and leaves nothing allocated.  Blocks. */
int store_snapshot_load(const char *dir, int threads, store_t **out, store_meta_t *meta,
                        store_error_t *err);

/* Reads and verifies only the manifest of dir (cheap: for listings).  0, or
 * store_errc_errno(err->code) < 0 with *err filled (err may be NULL). */
int store_snapshot_read_meta(const char *dir, store_meta_t *meta, uint64_t *entries,
                             store_error_t *err);

const char *store_errc_name(store_errc_t code);

/* The negative errno a snapshot call returns for code (0 for STORE_OK):
 * STORE_E_IO -EIO, STORE_E_NOMEM -ENOMEM, STORE_E_EXISTS -EEXIST,
 * STORE_E_NO_MANIFEST -ENOENT, STORE_E_INVALID -EINVAL, every content error
 * (MANIFEST, TRUNCATED, SIZE, CHECKSUM, HEADER, MISMATCH, DUPLICATE,
 * WRONG_SHARD, VALUE) and STORE_E_MODEL -EBADMSG.  For callers that fill a
 * store_error_t themselves and return as these calls do. */
int store_errc_errno(store_errc_t code);

/* Fills *err (NULL: nothing) with code, no file, offset -1 and the formatted
 * message, for an error found outside a file (a model layer's refusal, a
 * chain that does not apply); returns store_errc_errno(code). */
int store_error_set(store_error_t *err, store_errc_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- snapshot extras: hyper-parameters and dense arrays ----------------
 *
 * Beside its sparse table a model version may carry named hyper-parameters
 * (FFM's "fields" and "k", a DNN's layer sizes) and dense float arrays (MLP
 * weights).  They travel in the same snapshot: params inside the MANIFEST,
 * each dense array in its own file ("dense-NN.tld": 16-byte header "TLDENSE1"
 * + u64 count, then count little-endian fp32), checked like shard files
 * (size, xxh3 in the manifest, finite values) before anything reads them. */
#define STORE_MAX_PARAMS 32
#define STORE_PARAM_KEY_MAX 32    /* bytes incl. NUL: 1..31 of [A-Za-z0-9_.-] */
#define STORE_PARAM_VALUE_MAX 128 /* bytes incl. NUL: 0..127 printable ASCII */
#define STORE_MAX_DENSE 32
#define STORE_DENSE_NAME_MAX 32   /* bytes incl. NUL: 1..31 of [A-Za-z0-9_.-] */
#define STORE_DENSE_MAX_FLOATS (UINT64_C(1) << 28) /* 1 GiB per array */

typedef struct store_param {
    char key[STORE_PARAM_KEY_MAX];
    char value[STORE_PARAM_VALUE_MAX];
} store_param_t;

typedef struct store_dense {
    char name[STORE_DENSE_NAME_MAX]; /* "mlp.0.weight" */
    float *data;                     /* count floats; owned after a load */
    uint64_t count;                  /* 1..STORE_DENSE_MAX_FLOATS */
} store_dense_t;

typedef struct store_extras {
    uint32_t n_params;
    store_param_t params[STORE_MAX_PARAMS]; /* distinct keys */
    uint32_t n_dense;
    store_dense_t dense[STORE_MAX_DENSE];   /* distinct names */
} store_extras_t;

/* store_snapshot_write plus extras x (NULL: none).  Returns -EINVAL with
 * STORE_E_INVALID when x breaks a rule above. */
int store_snapshot_write_ex(const store_t *s, const char *dir, const store_meta_t *meta,
                            const store_extras_t *x, store_error_t *err);

/* store_snapshot_load plus the extras: on success *x (when x != NULL) holds
 * the params and the dense arrays (data malloc'd: free with
 * store_extras_free).  On failure *x is zeroed and nothing stays allocated. */
int store_snapshot_load_ex(const char *dir, int threads, store_t **out, store_meta_t *meta,
                           store_extras_t *x, store_error_t *err);

/* Frees the dense arrays of a loaded x and zeroes it (NULL-safe).  Only for
 * extras store_snapshot_load_ex filled: writers keep their own memory. */
void store_extras_free(store_extras_t *x);

/* Adds (or replaces) param key = value.  0, or -EINVAL (bad key or value,
 * or the table is full). */
int store_extras_set(store_extras_t *x, const char *key, const char *value);

/* The value of param key, or NULL when absent. */
const char *store_extras_get(const store_extras_t *x, const char *key);

/* Adds dense array name (data is borrowed: it must outlive the write).
 * 0, or -EINVAL (bad name, duplicate, count 0 or too large, table full). */
int store_extras_add_dense(store_extras_t *x, const char *name, const float *data,
                           uint64_t count);

/* The dense array called name, or NULL. */
const store_dense_t *store_extras_dense(const store_extras_t *x, const char *name);

/* "lr", "fm", "ffm", "dnn" (or "unknown"): for messages and tlsnap info. */
const char *store_model_kind_name(store_model_kind_t kind);

#ifdef __cplusplus
}
#endif
#endif /* TL_STORE_H */
