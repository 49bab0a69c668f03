/*
 * snapshot_load.c — store_snapshot_load(): a snapshot directory (format in
 * snapshot.c) back into a store, trusting none of its bytes.
 *
 * LOADING reads and decodes the MANIFEST, creates the store sized for the
 * sum of the entries, and loads the shards on `threads` threads that take
 * the next shard number from an atomic counter (the MANIFEST and the dense
 * files, small, are read before it by snapshot_meta.c: size, then XXH3 of
 * the whole file before the header or any value is looked at, then header,
 * then every value finite).  Each shard:
 *   1. size: the file must be exactly the manifest's bytes (TRUNCATED when
 *      shorter, offset = its size; SIZE when longer, offset = where the
 *      extra bytes begin);
 *   2. header: magic (HEADER at 0), header checksum (HEADER at 56), format
 *      version (HEADER at 8), zero padding, fields valid on their own
 *      (HEADER at the field), then fields equal to the manifest's (MISMATCH
 *      at the field, with both values).  The header is checked before the
 *      whole-file checksum on purpose: a flipped byte in bytes 0..63 is
 *      always a HEADER error, anywhere after it always a CHECKSUM error;
 *   3. pass 1, mmap windows of 1..8 MiB (MAP_POPULATE, unmapped after use):
 *      streaming XXH3 of the whole file, and keys counted per sub-table.  A
 *      wrong checksum is STORE_E_CHECKSUM with offset -1 (the whole file is
 *      wrong; the message names the byte range).  No record is validated or
 *      inserted before the checksum holds;
 *   4. each sub-table reserved for its exact count (no growth while loading);
 *   5. pass 2, windows again: values must be finite (VALUE), then records go
 *      to a store_filler in chunks.  The store was created with the
 *      writer's hash seed (MANIFEST hash_seed), and the writer wrote in
 *      the bucket order of a store sized as this one (its own, or one it
 *      re-placed the shard into: relay_shard in snapshot_write.c), so the
 *      filler puts records where they were and writes the table front to
 *      back (73M entries/s at 100M keys on 2 cores, against 33M/s inserting
 *      at random with store_insert_entries).
 *   6. a bad record (VALUE, DUPLICATE, WRONG_SHARD) stops the load, but the
 *      filler cannot name a duplicate's offset, so the load starts over on
 *      a new store with store_insert_entries in place of the filler: every
 *      error at the exact byte offset of its record; within a chunk the
 *      lowest offset wins, so errors come out in file order.  A bad file
 *      costs two loads; a good one, one.
 * Resident memory while loading is the table plus one window per thread:
 * file pages count towards RSS only while mapped.  Windows are 8 MiB, or
 * less (down to 1 MiB) so that all threads' windows together stay under
 * 1/64 of the snapshot's bytes: 8 MiB per thread would be 5% of a 330 MB
 * table with 2 threads, and more with more cores (measured: 30M K=1 keys,
 * 338 MB of table, 2 threads: peak RSS 1.016x the RSS after loading).
 *
 * The first error wins; other threads notice it between windows and stop;
 * the store is destroyed and *out stays untouched.  Finally every shard's
 * count must equal the manifest's entries.  A manifest with parent_version
 * != 0 is a delta, not a model, and is refused (STORE_E_MANIFEST);
 * store_snapshot_read_meta lists it all the same.
 *
 * The per-shard code (build_shard) reads through a `struct shard_src` that
 * is either mmap windows of a file or a plain memory buffer, so that
 * store__snapshot_load_mem() (snapshot_internal.h: tests, fuzz_snapshot) runs
 * exactly the checks the file loader runs.
 *
 * THREAD SAFETY
 *   - store_snapshot_load: each shard has exactly one loader thread, which is
 *     its only writer; the first error is recorded under load_ctl.lock.  The
 *     files must not change while loading: a change between the passes is
 *     still caught by pass 2's checks where it breaks an invariant, but a
 *     file truncated under a live mapping raises SIGBUS (mmap's contract).
 *   - Everything else here is reentrant; no global state.
 */
#define _GNU_SOURCE
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */

#include "snapshot_internal.h"

#include "delta.h"
#include "manifest.h"
#include "store_internal.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define WINDOW_MAX (8u << 20)      /* mmap window while loading ... */
#define WINDOW_MIN (1u << 20)      /* ... shrunk towards this for small loads */
#define WINDOW_SHARE 64            /* all windows together <= file bytes / this */
#define CHUNK_RECORDS 4096u        /* records per value check + insert */
#define REDO_EXACT 2               /* build_shard: bad records, the filler cannot say which */

_Static_assert(WINDOW_MIN >= 2 * (65536 + 8 + 4 * STORE_MAX_VALUE_FLOATS),
               "a window must hold a record after page alignment");

static size_t dtype_bytes(store_dtype_t dt)
{
    return dt == STORE_DTYPE_F16 ? 2 : 4;
}


/* Copies a manifest file name (64 bytes, maybe not NUL-terminated when m did
 * not come from store__manifest_decode) into a C string. */
static void shard_name(const manifest_shard_t *ms, char out[sizeof ms->file])
{
    size_t n = strnlen(ms->file, sizeof ms->file - 1);
    memcpy(out, ms->file, n);
    out[n] = '\0';
}


/* ---- shard header ------------------------------------------------------- */

/* Checks header bytes h of shard i (file name `file`) against themselves and
 * against m.  Returns 0 or -1 with *err filled. */
static int check_header(const uint8_t *h, const manifest_t *m, uint32_t i, const char *file,
                        store_error_t *err)
{
    if (memcmp(h + H_MAGIC, SNAPSHOT_SHARD_MAGIC, 8) != 0) {
        char shown[8 * 4 + 1]; /* printable bytes as they are, others as \xNN */
        size_t n = 0;
        for (int j = 0; j < 8; j++) {
            if (h[j] >= 0x20 && h[j] < 0x7f && h[j] != '"' && h[j] != '\\')
                shown[n++] = (char)h[j];
            else
                n += (size_t)snprintf(shown + n, sizeof shown - n, "\\x%02x", h[j]);
        }
        shown[n] = '\0';
        store__snap_fail(
            err, STORE_E_HEADER, file, H_MAGIC,
            "magic is \"%s\", not \"" SNAPSHOT_SHARD_MAGIC "\": not a tlserve shard file", shown);
        return -1;
    }
    uint64_t stored = get_le64(h + H_XXH3), actual = XXH3_64bits(h, H_XXH3);
    if (stored != actual) {
        store__snap_fail(err, STORE_E_HEADER, file, H_XXH3,
                         "header checksum is 0x%016" PRIx64
                         " but header bytes 0..55 hash to 0x%016" PRIx64 ": the header is corrupt",
                         stored, actual);
        return -1;
    }
    snapshot_header_t f = {
        .format_version = get_le32(h + H_FORMAT),
        .shard_index = get_le32(h + H_INDEX),
        .shard_count = get_le32(h + H_COUNT),
        .value_floats = get_le32(h + H_FLOATS),
        .dtype = get_le32(h + H_DTYPE),
        .value_bytes = get_le32(h + H_VBYTES),
        .entries = get_le64(h + H_ENTRIES),
    };
    if (f.format_version != SNAPSHOT_FORMAT_VERSION) {
        store__snap_fail(err, STORE_E_HEADER, file, H_FORMAT,
                         "format_version is %" PRIu32 ", this build reads %u", f.format_version,
                         SNAPSHOT_FORMAT_VERSION);
        return -1;
    }
    for (unsigned j = H_PAD; j < H_XXH3; j++) {
        if (h[j] != 0) {
            store__snap_fail(err, STORE_E_HEADER, file, j,
                             "header padding byte is 0x%02x, must be 0", h[j]);
            return -1;
        }
    }
    /* fields that are wrong on their own */
    if (f.shard_count < 1 || f.shard_count > STORE_MAX_SHARDS ||
        (f.shard_count & (f.shard_count - 1)) != 0) {
        store__snap_fail(err, STORE_E_HEADER, file, H_COUNT,
                         "shard_count is %" PRIu32 ", must be a power of two in 1..%d",
                         f.shard_count, STORE_MAX_SHARDS);
        return -1;
    }
    if (f.shard_index >= f.shard_count) {
        store__snap_fail(err, STORE_E_HEADER, file, H_INDEX,
                         "shard_index is %" PRIu32 ", shard_count is %" PRIu32, f.shard_index,
                         f.shard_count);
        return -1;
    }
    if (f.value_floats < 1 || f.value_floats > STORE_MAX_VALUE_FLOATS) {
        store__snap_fail(err, STORE_E_HEADER, file, H_FLOATS,
                         "value_floats is %" PRIu32 ", must be 1..%d", f.value_floats,
                         STORE_MAX_VALUE_FLOATS);
        return -1;
    }
    if (f.dtype != STORE_DTYPE_F32 && f.dtype != STORE_DTYPE_F16) {
        store__snap_fail(err, STORE_E_HEADER, file, H_DTYPE,
                         "dtype is %" PRIu32 ", must be 0 (f32) or 1 (f16)", f.dtype);
        return -1;
    }
    uint32_t vb = f.value_floats * (uint32_t)dtype_bytes((store_dtype_t)f.dtype);
    if (f.value_bytes != vb) {
        store__snap_fail(err, STORE_E_HEADER, file, H_VBYTES,
                         "value_bytes is %" PRIu32 ", but %" PRIu32 " %s floats take %" PRIu32,
                         f.value_bytes, f.value_floats, f.dtype == STORE_DTYPE_F16 ? "f16" : "f32",
                         vb);
        return -1;
    }
    /* fields that disagree with the manifest */
    const manifest_shard_t *ms = &m->shards[i];
#define MISMATCH(field, off, hv, mv)                                                            \
    do {                                                                                        \
        if ((uint64_t)(hv) != (uint64_t)(mv)) {                                                 \
            store__snap_fail(err, STORE_E_MISMATCH, file, (off),                                \
                             "header says " field " = %" PRIu64 ", the manifest says %" PRIu64, \
                             (uint64_t)(hv), (uint64_t)(mv));                                   \
            return -1;                                                                          \
        }                                                                                       \
    } while (0)
    MISMATCH("shard_index", H_INDEX, f.shard_index, i);
    MISMATCH("shard_count", H_COUNT, f.shard_count, m->shard_count);
    MISMATCH("value_floats", H_FLOATS, f.value_floats, m->value_floats);
    MISMATCH("dtype", H_DTYPE, f.dtype, m->dtype);
    MISMATCH("entries", H_ENTRIES, f.entries, ms->entries);
#undef MISMATCH
    return 0;
}

/* ---- where a shard's bytes come from ------------------------------------ */

/* Either a memory buffer (mem != NULL) or a file read through mmap windows.
 * At most one window is mapped at a time. */
struct shard_src {
    const uint8_t *mem; /* whole file in memory, or NULL */
    int fd;             /* file, when mem == NULL */
    uint64_t size;      /* file size */
    size_t window;      /* bytes per window, WINDOW_MIN..WINDOW_MAX */
    void *map;          /* current window mapping, or NULL */
    size_t map_len;     /* its length */
};

static void src_release(struct shard_src *src)
{
    if (src->map) {
        munmap(src->map, src->map_len);
        src->map = NULL;
    }
}

/* Reads len bytes at off (small reads: the header).  Returns 0 or -errno. */
static int src_read(struct shard_src *src, uint64_t off, void *buf, size_t len)
{
    if (src->mem) {
        memcpy(buf, src->mem + off, len);
        return 0;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(src->fd, (uint8_t *)buf + got, len - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -ENODATA; /* the file shrank after fstat */
        got += (size_t)r;
    }
    return 0;
}

/* Makes whole records from pos on addressable: *p points at pos, *n >= 1 is
 * how many (at most ~src->window bytes of them).  The caller ensures that pos <
 * size and (size - pos) is a multiple of rec.  Unmaps the previous window.
 * Returns 0 or -errno (mmap). */
static int src_window(struct shard_src *src, uint64_t pos, size_t rec, const uint8_t **p, size_t *n)
{
    uint64_t left = (src->size - pos) / rec;
    if (src->mem) {
        uint64_t room = src->window / rec;
        *n = (size_t)(left < room ? left : room);
        *p = src->mem + pos;
        return 0;
    }
    src_release(src);
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t map_off = pos & ~(page - 1);
    uint64_t room = (src->window - (pos - map_off)) / rec;
    *n = (size_t)(left < room ? left : room);
    size_t len = (size_t)(pos - map_off) + *n * rec;
    void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, src->fd, (off_t)map_off);
    if (m == MAP_FAILED)
        return -errno;
    src->map = m;
    src->map_len = len;
    *p = (const uint8_t *)m + (pos - map_off);
    return 0;
}

/* ---- one shard: verify and build ---------------------------------------- */

static cold void fail_insert(store_error_t *err, const store_t *s, uint32_t shard, int rc,
                             const char *file, uint64_t off, const uint8_t *rec)
{
    uint64_t key = get_le64(rec);
    switch (rc) {
    case -EEXIST:
        store__snap_fail(err, STORE_E_DUPLICATE, file, (int64_t)off,
                         "key 0x%" PRIx64 " appears twice", key);
        break;
    case -EXDEV:
        store__snap_fail(err, STORE_E_WRONG_SHARD, file, (int64_t)off,
                         "key 0x%" PRIx64 " belongs to shard %" PRIu32 ", not to shard %" PRIu32,
                         key, store_shard_of(s, key), shard);
        break;
    case -ENOMEM:
        store__snap_fail(err, STORE_E_NOMEM, file, (int64_t)off,
                         "out of memory inserting key 0x%" PRIx64, key);
        break;
    default:
        store__snap_fail(err, STORE_E_INVALID, file, (int64_t)off,
                         "key 0x%" PRIx64 " was refused: %s", key, ERRTEXT(-rc));
        break;
    }
}

/* Verifies shard i of m, read through src, and inserts its records into s:
 * with a store_filler when `ordered`, else with store_insert_entries.  The
 * caller is shard i's only writer.  Returns 0; -1 with *err filled; 1 when
 * *stop was raised (another shard failed; *err untouched); or REDO_EXACT
 * when a record is bad and the filler cannot say which (*err untouched). */
static int build_shard(store_t *s, const manifest_t *m, uint32_t i, struct shard_src *src,
                       bool ordered, atomic_bool *stop, store_error_t *err)
{
    const manifest_shard_t *ms = &m->shards[i];
    char file[sizeof ms->file];
    shard_name(ms, file);
    const store_dtype_t dt = store_dtype(s);
    const uint32_t K = store_value_floats(s);
    const size_t rec = 8 + store_value_bytes(s);
    const uint32_t subs = store_subs_per_shard(s);
    uint64_t *counts = NULL;
    store_filler_t *filler = NULL;
    int rc = -1;

    if (ms->entries > (UINT64_MAX - SHARD_HEADER_BYTES) / rec ||
        ms->bytes != SHARD_HEADER_BYTES + ms->entries * rec) {
        store__snap_fail(err, STORE_E_MANIFEST, MANIFEST_FILE_NAME, -1,
                         "shards[%" PRIu32 "] (%s): bytes %" PRIu64
                         " is not the 64-byte header plus %" PRIu64 " records of %zu bytes",
                         i, file, ms->bytes, ms->entries, rec);
        goto out;
    }
    if (src->size < ms->bytes) {
        store__snap_fail(err, STORE_E_TRUNCATED, file, (int64_t)src->size,
                         "the file ends after %" PRIu64 " bytes, the manifest says %" PRIu64,
                         src->size, ms->bytes);
        goto out;
    }
    if (src->size > ms->bytes) {
        store__snap_fail(err, STORE_E_SIZE, file, (int64_t)ms->bytes,
                         "the file has %" PRIu64 " bytes, %" PRIu64
                         " more than the manifest's %" PRIu64,
                         src->size, src->size - ms->bytes, ms->bytes);
        goto out;
    }

    uint8_t hdr[SHARD_HEADER_BYTES];
    int e = src_read(src, 0, hdr, sizeof hdr);
    if (e) {
        store__snap_fail(err, STORE_E_IO, file, 0, "cannot read the header: %s", ERRTEXT(-e));
        goto out;
    }
    if (check_header(hdr, m, i, file, err) != 0)
        goto out;

    /* pass 1: checksum, and keys per sub-table */
    counts = calloc(subs, sizeof *counts);
    if (!counts) {
        store__snap_fail(err, STORE_E_NOMEM, file, -1,
                         "out of memory for %" PRIu32 " sub-table counters", subs);
        goto out;
    }
    XXH3_state_t xs;
    XXH3_INITSTATE(&xs);
    XXH3_64bits_reset(&xs);
    XXH3_64bits_update(&xs, hdr, sizeof hdr);
    for (uint64_t pos = SHARD_HEADER_BYTES; pos < src->size;) {
        if (atomic_load_explicit(stop, memory_order_relaxed)) {
            rc = 1;
            goto out;
        }
        const uint8_t *p;
        size_t n;
        e = src_window(src, pos, rec, &p, &n);
        if (e) {
            store__snap_fail(err, STORE_E_NOMEM, file, (int64_t)pos, "cannot map the file: %s",
                             ERRTEXT(-e));
            goto out;
        }
        XXH3_64bits_update(&xs, p, n * rec);
        for (size_t r = 0; r < n; r++) {
            uint32_t sub = store_sub_of(s, get_le64(p + r * rec));
            if (likely(sub < subs)) /* always; a guard against a store bug */
                counts[sub]++;
        }
        pos += (uint64_t)n * rec;
    }
    src_release(src);
    uint64_t sum = XXH3_64bits_digest(&xs);
    if (sum != ms->xxh3) {
        store__snap_fail(err, STORE_E_CHECKSUM, file, -1,
                         "bytes 0..%" PRIu64 " hash to xxh3 0x%016" PRIx64
                         ", the manifest says 0x%016" PRIx64
                         ": the file is corrupt or belongs to another snapshot",
                         src->size - 1, sum, ms->xxh3);
        goto out;
    }

    uint32_t bad_sub = 0; /* set with -ENOMEM; i is in range */
    if ((e = store_reserve_shard_exact(s, i, counts, &bad_sub)) != 0) {
        store__snap_fail(err, e == -ENOMEM ? STORE_E_NOMEM : STORE_E_INVALID, file, -1,
                         "cannot reserve sub-table %" PRIu32 " for %" PRIu64 " keys: %s", bad_sub,
                         counts[bad_sub], ERRTEXT(-e));
        goto out;
    }

    /* pass 2: values, then insert; the lowest offset's error wins */
    if (ordered && (e = store_filler_new(s, i, &filler)) != 0) {
        store__snap_fail(err, STORE_E_NOMEM, file, -1, "out of memory for the loader: %s",
                         ERRTEXT(-e));
        goto out;
    }
    for (uint64_t pos = SHARD_HEADER_BYTES; pos < src->size;) {
        if (atomic_load_explicit(stop, memory_order_relaxed)) {
            rc = 1;
            goto out;
        }
        const uint8_t *p;
        size_t n;
        e = src_window(src, pos, rec, &p, &n);
        if (e) {
            store__snap_fail(err, STORE_E_NOMEM, file, (int64_t)pos, "cannot map the file: %s",
                             ERRTEXT(-e));
            goto out;
        }
        for (size_t done = 0; done < n;) {
            size_t c = n - done < CHUNK_RECORDS ? n - done : CHUNK_RECORDS;
            const uint8_t *q = p + done * rec;
            uint64_t qoff = pos + (uint64_t)done * rec;
            uint32_t which = 0;
            size_t v = store__snap_first_bad_value(q, c, rec, K, dt, &which);
            size_t bad = 0;
            if (filler) {
                if (unlikely(v < c || (v && store_filler_add(filler, q, v) != 0))) {
                    rc = REDO_EXACT; /* an error, but the filler does not say where */
                    goto out;
                }
                done += c;
                continue;
            }
            e = v ? store_insert_entries(s, i, q, v, &bad) : 0;
            if (unlikely(e)) {
                if (bad >= v) /* store bug: blame the chunk's first record */
                    bad = 0;
                fail_insert(err, s, i, e, file, qoff + (uint64_t)bad * rec, q + bad * rec);
                goto out;
            }
            if (unlikely(v < c)) {
                store__snap_fail_value(err, file, qoff + (uint64_t)v * rec, q + v * rec, which, dt);
                goto out;
            }
            done += c;
        }
        pos += (uint64_t)n * rec;
    }
    src_release(src); /* the last window goes before the records set aside go in */
    rc = filler && store_filler_finish(filler) != 0 ? REDO_EXACT : 0;
out:
    src_release(src);
    store_filler_free(filler);
    free(counts);
    return rc;
}

/* ---- all shards, in parallel -------------------------------------------- */

struct load_ctl {
    store_t *s;                  /* being built; each shard by one thread */
    const manifest_t *m;         /* decoded MANIFEST (read-only) */
    int dirfd;                   /* snapshot dir, or -1 for the memory path */
    const uint8_t *const *files; /* memory path: bytes of each shard file */
    const size_t *sizes;         /* memory path: their sizes */
    size_t window;               /* mmap window bytes per thread */
    bool ordered;                /* pass 2 with store_filler (else store_insert_entries) */
    _Atomic uint32_t next;       /* next shard to take */
    atomic_bool failed;          /* an error was recorded, or redo is set: stop */
    bool redo;                   /* a shard returned REDO_EXACT; protected by lock */
    pthread_mutex_t lock;        /* protects err and redo */
    store_error_t err;           /* the first error; protected by lock */
};

/* Opens shard i's file and builds it; same returns as build_shard. */
static int load_shard(struct load_ctl *c, uint32_t i, store_error_t *err)
{
    static const uint8_t no_bytes[1];
    struct shard_src src = {.fd = -1, .window = c->window};
    if (c->files) {
        src.mem = c->files[i] ? c->files[i] : no_bytes;
        src.size = c->files[i] ? c->sizes[i] : 0; /* no file: reported as truncated */
        return build_shard(c->s, c->m, i, &src, c->ordered, &c->failed, err);
    }
    char file[sizeof c->m->shards[i].file];
    shard_name(&c->m->shards[i], file);
    /* O_NONBLOCK: a FIFO planted as a shard file must not hang the load */
    int fd = openat(c->dirfd, file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        store__snap_fail(err, STORE_E_IO, file, -1, "cannot open: %s", ERRTEXT(errno));
        return -1;
    }
    int rc = -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        store__snap_fail(err, STORE_E_IO, file, -1, "cannot stat: %s", ERRTEXT(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        store__snap_fail(err, STORE_E_IO, file, -1, "not a regular file");
        goto out;
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    src.fd = fd;
    src.size = (uint64_t)st.st_size;
    rc = build_shard(c->s, c->m, i, &src, c->ordered, &c->failed, err);
out:
    close(fd);
    return rc;
}

static void *load_worker(void *arg)
{
    struct load_ctl *c = arg;
    store_error_t e;
    store__snap_err_clear(&e);
    while (!atomic_load_explicit(&c->failed, memory_order_relaxed)) {
        uint32_t i = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (i >= c->m->shard_count)
            break;
        int rc = load_shard(c, i, &e);
        if (rc < 0 || rc == REDO_EXACT) {
            pthread_mutex_lock(&c->lock);
            if (!atomic_load_explicit(&c->failed, memory_order_relaxed)) {
                if (rc < 0)
                    c->err = e;
                c->redo = rc == REDO_EXACT;
                atomic_store_explicit(&c->failed, true, memory_order_relaxed);
            }
            pthread_mutex_unlock(&c->lock);
            break;
        }
    }
    return NULL;
}

/* Sum of the manifest's entries; -1 with *err filled on overflow. */
static int total_entries(const manifest_t *m, uint64_t *total, store_error_t *err)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < m->shard_count; i++) {
        if (m->shards[i].entries > UINT64_MAX - sum) {
            store__snap_fail(err, STORE_E_MANIFEST, MANIFEST_FILE_NAME, -1,
                             "the shards' entries add up to more than 2^64");
            return -1;
        }
        sum += m->shards[i].entries;
    }
    *total = sum;
    return 0;
}

/* Creates c->s as the manifest describes it, with the writer's hash seed
 * (records then come in its bucket order).  -1 with *err filled. */
static int create_store(struct load_ctl *c, uint64_t total, store_error_t *err)
{
    const manifest_t *m = c->m;
    store_options_t opt =
        store__snap_loader_options(m->value_floats, m->dtype, m->shard_count, total, m->hash_seed);
    char why[256];
    int e = store_options_check(&opt, why, sizeof why);
    if (e == 0)
        e = store_create(&opt, &c->s);
    if (e) {
        if (e == -ENOMEM)
            store__snap_fail(err, STORE_E_NOMEM, "", -1,
                             "out of memory creating a store for %" PRIu64 " keys", total);
        else
            store__snap_fail(err, STORE_E_MANIFEST, MANIFEST_FILE_NAME, -1, "%s", why);
        return -1;
    }
    return 0;
}

/* Builds every shard on `threads` threads, the caller's among them. */
static void run_workers(struct load_ctl *c, int threads)
{
    pthread_t tid[STORE_MAX_SHARDS];
    int started = 0;
    for (int t = 1; t < threads; t++) {
        if (pthread_create(&tid[started], NULL, load_worker, c) != 0)
            break; /* fewer threads: slower, not wrong */
        started++;
    }
    load_worker(c);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
}

/* Creates the store m describes, builds every shard with `threads` threads
 * (the caller's among them) and checks the counts.  Returns 0 and sets *out,
 * or -1 with *err filled and nothing allocated. */
static int load_all(struct load_ctl *c, int threads, store_t **out, store_error_t *err)
{
    const manifest_t *m = c->m;
    if (m->shard_count < 1 || m->shard_count > STORE_MAX_SHARDS || !m->shards) {
        store__snap_fail(err, STORE_E_MANIFEST, MANIFEST_FILE_NAME, -1,
                         "shard_count is %" PRIu32 ", expected 1..%d shards", m->shard_count,
                         STORE_MAX_SHARDS);
        return -1;
    }
    uint64_t total;
    if (total_entries(m, &total, err) != 0)
        return -1;
    if (threads > (int)m->shard_count)
        threads = (int)m->shard_count;
    /* All threads' windows together stay under 1/WINDOW_SHARE of the data,
     * so that they add at most ~1.5% to peak RSS whatever the thread count. */
    uint64_t file_bytes = 0;
    for (uint32_t i = 0; i < m->shard_count; i++)
        file_bytes = m->shards[i].bytes > UINT64_MAX - file_bytes ? UINT64_MAX
                                                                  : file_bytes + m->shards[i].bytes;
    uint64_t w = file_bytes / WINDOW_SHARE / (uint64_t)threads;
    c->window = w > WINDOW_MAX ? WINDOW_MAX : w < WINDOW_MIN ? WINDOW_MIN : (size_t)w;

    /* First with the filler.  Records that are not a valid shard make it
     * fail without saying which one, so the load starts over with
     * store_insert_entries, which names the first bad record. */
    for (c->ordered = true;; c->ordered = false) {
        if (create_store(c, total, err) != 0)
            return -1;
        run_workers(c, threads);
        if (!c->redo)
            break;
        store_destroy(c->s);
        c->s = NULL;
        c->redo = false;
        atomic_store(&c->next, 0);
        atomic_store(&c->failed, false);
    }

    if (!atomic_load(&c->failed)) {
        for (uint32_t i = 0; i < m->shard_count; i++) {
            uint64_t have = store_shard_count(c->s, i);
            if (have != m->shards[i].entries) {
                char file[sizeof m->shards[i].file];
                shard_name(&m->shards[i], file);
                store__snap_fail(&c->err, STORE_E_MISMATCH, file, -1,
                                 "shard %" PRIu32 " holds %" PRIu64
                                 " keys after loading, the manifest says %" PRIu64,
                                 i, have, m->shards[i].entries);
                atomic_store(&c->failed, true);
                break;
            }
        }
    }
    if (atomic_load(&c->failed)) {
        *err = c->err;
        store_destroy(c->s);
        c->s = NULL;
        return -1;
    }
    *out = c->s;
    return 0;
}

/* ---- public: load --------------------------------------------------------- */

int store_snapshot_load(const char *dir, int threads, store_t **out, store_meta_t *meta,
                        store_error_t *err)
{
    return store_snapshot_load_ex(dir, threads, out, meta, NULL, err);
}

int store_snapshot_load_ex(const char *dir, int threads, store_t **out, store_meta_t *meta,
                           store_extras_t *x, store_error_t *err)
{
    store_error_t scratch;
    if (!err)
        err = &scratch;
    store__snap_err_clear(err);
    if (x)
        memset(x, 0, sizeof *x);
    if (!dir || !dir[0] || !out) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "store_snapshot_load: %s is NULL or empty",
                         !out ? "out" : "dir");
        return store_errc_errno(err->code);
    }
    if (threads < 0) {
        store__snap_fail(err, STORE_E_INVALID, "", -1,
                         "store_snapshot_load: threads is %d, must be >= 0", threads);
        return store_errc_errno(err->code);
    }
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)(n < STORE_MAX_SHARDS ? n : STORE_MAX_SHARDS) : 1;
    }
    int dirfd = store__snap_open_dir(dir, err);
    if (dirfd < 0)
        return store_errc_errno(err->code);
    manifest_t m;
    int rc = store__snap_read_manifest(dirfd, dir, &m, err);
    if (rc == 0 && (m.kind == MANIFEST_KIND_DELTA || m.meta.parent_version != 0)) {
        /* a delta's records are changes against its parent, not a model */
        store__snap_fail(err, STORE_E_MANIFEST, MANIFEST_FILE_NAME, -1,
                         "version %" PRIu64 " is a delta of %" PRIu64
                         ", not a full snapshot: it is served through its chain (a "
                         "repository's version: activate it; offline: tlsnap compact)",
                         m.meta.version, m.meta.parent_version);
        store__manifest_free(&m);
        rc = -1;
    }
    if (rc == 0) {
        /* the dense arrays are small: read and verify them first */
        store_extras_t none;
        store_extras_t *ex = x ? x : &none;
        rc = store__snap_load_extras(dirfd, &m, ex, err);
        if (rc == 0) {
            struct load_ctl c = {.m = &m, .dirfd = dirfd, .lock = PTHREAD_MUTEX_INITIALIZER};
            store__snap_err_clear(&c.err);
            rc = load_all(&c, threads, out, err);
            pthread_mutex_destroy(&c.lock);
        }
        if (rc != 0 || !x)
            store_extras_free(ex);
        if (rc == 0 && meta)
            *meta = m.meta;
        store__manifest_free(&m);
    }
    close(dirfd);
    return rc == 0 ? 0 : store_errc_errno(err->code);
}

int store__snapshot_load_mem(const manifest_t *m, const uint8_t *const *files, const size_t *sizes,
                             store_t **out, store_error_t *err)
{
    store_error_t scratch;
    if (!err)
        err = &scratch;
    store__snap_err_clear(err);
    if (!m || !files || !sizes || !out) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "snapshot_load_mem: a NULL argument");
        return store_errc_errno(err->code);
    }
    struct load_ctl c = {
        .m = m, .dirfd = -1, .files = files, .sizes = sizes, .lock = PTHREAD_MUTEX_INITIALIZER};
    store__snap_err_clear(&c.err);
    int rc = load_all(&c, 1, out, err);
    pthread_mutex_destroy(&c.lock);
    return rc == 0 ? 0 : store_errc_errno(err->code);
}

int store_snapshot_read_meta(const char *dir, store_meta_t *meta, uint64_t *entries,
                             store_error_t *err)
{
    return store_snapshot_read_layout(dir, NULL, meta, entries, err);
}

int store_snapshot_read_layout(const char *dir, store_delta_layout_t *lay, store_meta_t *meta,
                               uint64_t *entries, store_error_t *err)
{
    store_error_t scratch;
    if (!err)
        err = &scratch;
    store__snap_err_clear(err);
    if (!dir || !dir[0]) {
        store__snap_fail(err, STORE_E_INVALID, "", -1,
                         "store_snapshot_read_meta: dir is NULL or empty");
        return store_errc_errno(err->code);
    }
    int dirfd = store__snap_open_dir(dir, err);
    if (dirfd < 0)
        return store_errc_errno(err->code);
    manifest_t m;
    int rc = store__snap_read_manifest(dirfd, dir, &m, err);
    if (rc == 0) {
        uint64_t total = 0;
        rc = total_entries(&m, &total, err);
        if (rc == 0 && meta)
            *meta = m.meta;
        if (rc == 0 && entries)
            *entries = total;
        if (rc == 0 && lay) {
            memset(lay, 0, sizeof *lay);
            snprintf(lay->model_name, sizeof lay->model_name, "%s", m.meta.model_name);
            lay->model_kind = m.meta.model_kind;
            lay->value_floats = m.value_floats;
            lay->dtype = m.dtype;
            lay->shards = m.shard_count;
            lay->hash_seed = m.hash_seed;
        }
        store__manifest_free(&m);
    }
    close(dirfd);
    return rc == 0 ? 0 : store_errc_errno(err->code);
}
