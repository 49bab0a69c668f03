/*
 * snapshot_write.c — store_snapshot_write(): a store (and its extras) into a
 * snapshot directory (format in snapshot.c).
 *
 * WRITING goes shard by shard through one large buffer (store_foreach_raw ->
 * buffer -> write(2)), hashing with streaming XXH3 as the buffer drains, so
 * each byte is produced once and hashed once.  A NaN or infinite value is
 * refused (STORE_E_VALUE) rather than written: the loader would refuse it.
 * Each shard goes to "<file>.tmp", is fsynced and renamed; the directory is
 * fsynced; then MANIFEST.tmp is written, fsynced and renamed to MANIFEST
 * without replacing one (renameat2 RENAME_NOREPLACE where the filesystem
 * has it), and the directory is fsynced again.  So a MANIFEST exists only
 * once every file it names is complete and durable.  A failed write
 * removes what it created.
 *
 * THREAD SAFETY: store_snapshot_write needs no concurrent writer of s
 * (readers are fine); two writes into the same directory at once are not
 * supported (they share the .tmp names), though RENAME_NOREPLACE keeps the
 * second MANIFEST from replacing the first.  No global state.
 */
#define _GNU_SOURCE
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */

#include "snapshot_internal.h"
#include "delta.h"

#include "manifest.h"
#include "store_internal.h"

#include <dirent.h>
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

#define WRITE_BUF_BYTES (4u << 20) /* writer's buffer */
#define SHARD_NAME_FMT "shard-%05u.tls"
#define DENSE_NAME_FMT "dense-%02u.tld"
#define DENSE_CHUNK_FLOATS 16384u  /* floats converted and hashed per write/read */
#define TMP_SUFFIX ".tmp"
#define MANIFEST_TMP MANIFEST_FILE_NAME TMP_SUFFIX

/* ---- shard header ------------------------------------------------------- */

void store__snapshot_header_encode(const snapshot_header_t *h, uint8_t out[SHARD_HEADER_BYTES])
{
    memset(out, 0, SHARD_HEADER_BYTES);
    memcpy(out + H_MAGIC, SNAPSHOT_SHARD_MAGIC, 8);
    put_le32(out + H_FORMAT, h->format_version);
    put_le32(out + H_INDEX, h->shard_index);
    put_le32(out + H_COUNT, h->shard_count);
    put_le32(out + H_FLOATS, h->value_floats);
    put_le32(out + H_DTYPE, h->dtype);
    put_le32(out + H_VBYTES, h->value_bytes);
    put_le64(out + H_ENTRIES, h->entries);
    put_le64(out + H_XXH3, XXH3_64bits(out, H_XXH3));
}


/* ---- public: write --------------------------------------------------------- */

int store_model_name_check(const char *name, char *why, size_t len)
{
    size_t n = strnlen(name, sizeof ((store_meta_t *)0)->model_name);
    if (n == sizeof ((store_meta_t *)0)->model_name) {
        snprintf(why, len, "model_name is longer than %zu bytes",
                 sizeof ((store_meta_t *)0)->model_name - 1);
        return -1;
    }
    if (n == 0) {
        snprintf(why, len, "model_name is empty");
        return -1;
    }
    for (size_t j = 0; j < n; j++) {
        unsigned char ch = (unsigned char)name[j];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-';
        if (!ok) {
            snprintf(why, len, "model_name has byte 0x%02x at %zu, allowed: [A-Za-z0-9_.-]", ch, j);
            return -1;
        }
    }
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
        snprintf(why, len, "model_name \"%s\" is a path component", name);
        return -1;
    }
    return 0;
}

/* Checks meta for a full snapshot; returns 0 or -1 with why filled. */
static int check_meta(const store_meta_t *meta, char *why, size_t len)
{
    if (store_model_name_check(meta->model_name, why, len) != 0)
        return -1;
    if ((unsigned)meta->model_kind > STORE_MODEL_DNN) {
        snprintf(why, len, "model_kind is %d, expected 0..3 (LR, FM, FFM, DNN)",
                 (int)meta->model_kind);
        return -1;
    }
    if (meta->version == 0) {
        snprintf(why, len, "version is 0, expected > 0");
        return -1;
    }
    if (meta->parent_version != 0) {
        snprintf(why, len, "parent_version is %" PRIu64 ", a full snapshot has 0",
                 meta->parent_version);
        return -1;
    }
    return 0;
}

static int write_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* The buffered writer of one shard file.  Bytes are hashed as they leave
 * the buffer, so the hash covers exactly what write(2) was given. */
struct writer {
    int fd;
    uint8_t *buf;                                    /* WRITE_BUF_BYTES */
    size_t used;                                     /* bytes waiting in buf */
    size_t vbytes;                                   /* value bytes per record */
    uint32_t K;                                      /* floats per value */
    store_dtype_t dt;                                /* their storage type */
    uint64_t records;                                /* records appended */
    int error;                                       /* -errno of the first failed write, or 0 */
    bool bad_value;                                  /* record `records` holds a NaN or infinity */
    uint32_t bad_float;                              /* which float of it */
    uint8_t bad_rec[8 + 4 * STORE_MAX_VALUE_FLOATS]; /* copy of that record */
    XXH3_state_t xxh;                                /* of every byte flushed so far */
};

static int writer_flush(struct writer *w)
{
    XXH3_64bits_update(&w->xxh, w->buf, w->used);
    int e = write_all(w->fd, w->buf, w->used);
    w->used = 0;
    if (e)
        w->error = e;
    return e;
}

static int put_record(void *ctx, uint64_t key, const void *raw)
{
    struct writer *w = ctx;
    size_t rec = 8 + w->vbytes;
    if (unlikely(WRITE_BUF_BYTES - w->used < rec) && writer_flush(w) != 0)
        return 1;
    uint8_t *p = w->buf + w->used;
    put_le64(p, key);
    memcpy(p + 8, raw, w->vbytes);
    if (unlikely(store__snap_first_bad_value(p, 1, rec, w->K, w->dt, &w->bad_float) == 0)) {
        /* the loader would refuse the snapshot: refuse to write it */
        w->bad_value = true;
        memcpy(w->bad_rec, p, rec);
        return 1;
    }
    w->used += rec;
    w->records++;
    return 0;
}

/* ---- writing in the loader's bucket order --------------------------------
 *
 * The loader rebuilds shard i in a store created for the snapshot's total
 * entries with each sub-table reserved for its exact count (create_store,
 * build_shard), and its ordered fill is fastest when the file lists the
 * records in that store's bucket order.  A store sized that way (the
 * trainers' exports; store_reserve_shard_exact after a count, as tlsynth
 * model does) already has that order and is written as it is.  One
 * that grew, or was sized for more keys than it holds, has other
 * sub-table sizes, and its order would send most records aside at load (3x
 * slower: store_bench --expected-keys).  Such a shard is first inserted into
 * a store sized as the loader will size it (the same calls, the same seed)
 * and written from there: the same records in the loader's order, for one
 * insert per record and one shard's share of the table in memory at a time.
 */
struct relay {
    store_t *t;         /* the loader-sized store */
    uint32_t shard;
    uint64_t *counts;   /* keys per sub-table of t (first pass) */
    uint8_t *buf;       /* records waiting for store_insert_entries */
    size_t n, cap, rec; /* waiting, room, bytes per record */
    uint64_t records;   /* records seen in this pass */
    int rc;             /* store_insert_entries' first error */
};

static int relay_count(void *ctx, uint64_t key, const void *raw)
{
    struct relay *r = ctx;
    (void)raw;
    r->counts[store_sub_of(r->t, key)]++;
    r->records++;
    return 0;
}

static int relay_flush(struct relay *r)
{
    size_t bad;
    if (r->n && r->rc == 0)
        r->rc = store_insert_entries(r->t, r->shard, r->buf, r->n, &bad);
    r->n = 0;
    return r->rc;
}

static int relay_put(void *ctx, uint64_t key, const void *raw)
{
    struct relay *r = ctx;
    if (r->n == r->cap && relay_flush(r) != 0)
        return 1;
    uint8_t *p = r->buf + r->n * r->rec;
    put_le64(p, key);
    memcpy(p + 8, raw, r->rec - 8);
    r->n++;
    r->records++;
    return 0;
}

/* Sets *out to a store holding shard i of s in the loader's sizes, or to
 * NULL when s's own shard i has them (write it as it is).  total: the keys
 * of s when the write began; buf: WRITE_BUF_BYTES of scratch.  Returns 0,
 * or -1 with *err filled. */
static int relay_shard(const store_t *s, uint32_t i, uint64_t total, uint8_t *buf, store_t **out,
                       store_error_t *err)
{
    *out = NULL;
    store_options_t opt = store__snap_loader_options(store_value_floats(s), store_dtype(s),
                                                     store_shards(s), total, store_hash_seed(s));
    const uint64_t entries = store_shard_count(s, i);
    struct relay r = {.shard = i, .buf = buf, .rec = 8 + store_value_bytes(s)};
    r.cap = WRITE_BUF_BYTES / r.rec;
    int e = store_create(&opt, &r.t);
    if (e == 0) {
        r.counts = calloc(store_subs_per_shard(r.t), sizeof *r.counts);
        e = r.counts ? 0 : -ENOMEM;
    }
    if (e == 0 && store_subs_per_shard(s) == store_subs_per_shard(r.t)) {
        for (uint32_t u = 0; u < store_subs_per_shard(s); u++) /* the same split */
            r.counts[u] = store_sub_count(s, i, u);
    } else if (e == 0) {
        store_foreach_raw(s, i, relay_count, &r);
    }
    if (e == 0)
        e = store_reserve_shard_exact(r.t, i, r.counts, NULL);
    if (e == 0 && store_shard_layout_equal(s, r.t, i)) {
        free(r.counts);
        store_destroy(r.t);
        return 0;
    }
    if (e == 0) {
        r.records = 0;
        store_foreach_raw(s, i, relay_put, &r);
        e = relay_flush(&r);
    }
    free(r.counts);
    if (e == 0 && (r.records != entries || store_shard_count(r.t, i) != entries))
        e = -EEXIST; /* a key seen twice, or keys come and gone */
    if (e != 0) {
        store_destroy(r.t);
        if (e == -ENOMEM)
            store__snap_fail(err, STORE_E_NOMEM, "", -1,
                             "out of memory putting shard %" PRIu32 " in the loader's order", i);
        else if (e != -EEXIST)
            store__snap_fail(err, STORE_E_INVALID, "", -1,
                             "cannot put shard %" PRIu32 " in the loader's order: %s", i,
                             ERRTEXT(-e));
        else
            store__snap_fail(err, STORE_E_INVALID, "", -1,
                             "shard %" PRIu32 " had %" PRIu64 " keys at the start and %" PRIu64
                             " at the end: written while being changed?",
                             i, entries, r.records);
        return -1;
    }
    *out = r.t;
    return 0;
}

/* Writes shard i to "<name>.tmp", fsyncs it and renames it to its name;
 * fills *ms.  Returns 0 or -1 with *err filled (the .tmp removed). */
static int write_shard(const store_t *s, int dirfd, uint32_t i, uint8_t *buf, manifest_shard_t *ms,
                       store_error_t *err)
{
    char name[sizeof ms->file], tmp[sizeof ms->file + sizeof TMP_SUFFIX];
    snprintf(name, sizeof name, SHARD_NAME_FMT, i);
    snprintf(tmp, sizeof tmp, "%s" TMP_SUFFIX, name);
    const size_t vb = store_value_bytes(s);
    const uint64_t entries = store_shard_count(s, i);
    int rc = -1;

    struct writer w = {
        .fd = -1, .buf = buf, .vbytes = vb, .K = store_value_floats(s), .dt = store_dtype(s)};
    w.fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w.fd < 0) {
        store__snap_fail(err, STORE_E_IO, tmp, -1, "cannot create: %s", ERRTEXT(errno));
        return -1;
    }
    XXH3_INITSTATE(&w.xxh);
    XXH3_64bits_reset(&w.xxh);
    snapshot_header_t h = {
        .format_version = SNAPSHOT_FORMAT_VERSION,
        .shard_index = i,
        .shard_count = store_shards(s),
        .value_floats = store_value_floats(s),
        .dtype = (uint32_t)store_dtype(s),
        .value_bytes = (uint32_t)vb,
        .entries = entries,
    };
    store__snapshot_header_encode(&h, w.buf);
    w.used = SHARD_HEADER_BYTES;
    store_foreach_raw(s, i, put_record, &w);
    if (w.bad_value) {
        store__snap_fail_value(err, name, SHARD_HEADER_BYTES + w.records * (8 + vb), w.bad_rec,
                               w.bad_float, w.dt);
        snprintf(err->msg + strlen(err->msg), sizeof err->msg - strlen(err->msg),
                 ": such a snapshot could not be loaded");
        goto out;
    }
    if (w.error == 0)
        writer_flush(&w);
    if (w.error) {
        store__snap_fail(err, STORE_E_IO, tmp, -1, "cannot write: %s", ERRTEXT(-w.error));
        goto out;
    }
    if (w.records != entries) {
        store__snap_fail(err, STORE_E_INVALID, tmp, -1,
                         "shard %" PRIu32 " had %" PRIu64 " keys at the start and %" PRIu64
                         " at the end: written while being changed?",
                         i, entries, w.records);
        goto out;
    }
    if (fsync(w.fd) != 0) {
        store__snap_fail(err, STORE_E_IO, tmp, -1, "cannot fsync: %s", ERRTEXT(errno));
        goto out;
    }
    int fd = w.fd;
    w.fd = -1;
    if (close(fd) != 0) {
        store__snap_fail(err, STORE_E_IO, tmp, -1, "cannot close: %s", ERRTEXT(errno));
        goto out;
    }
    if (renameat(dirfd, tmp, dirfd, name) != 0) {
        store__snap_fail(err, STORE_E_IO, tmp, -1, "cannot rename to %s: %s", name, ERRTEXT(errno));
        goto out;
    }
    ms->index = i;
    snprintf(ms->file, sizeof ms->file, "%s", name);
    ms->entries = entries;
    ms->bytes = SHARD_HEADER_BYTES + entries * (8 + vb);
    ms->xxh3 = XXH3_64bits_digest(&w.xxh);
    rc = 0;
out:
    if (w.fd >= 0)
        close(w.fd);
    if (rc != 0)
        unlinkat(dirfd, tmp, 0);
    return rc;
}

/* Writes dense array d as file i ("dense-NN.tld" via a .tmp, fsynced and
 * renamed); fills *md.  0, or -1 with *err filled (the .tmp removed). */
static int write_dense(int dirfd, const store_dense_t *d, uint32_t i, manifest_dense_t *md,
                       store_error_t *err)
{
    char name[sizeof md->file], tmp[sizeof md->file + sizeof TMP_SUFFIX];
    snprintf(name, sizeof name, DENSE_NAME_FMT, i);
    snprintf(tmp, sizeof tmp, "%s" TMP_SUFFIX, name);
    size_t bad = store__snap_first_nonfinite(d->data, (size_t)d->count);
    if (bad < d->count) {
        store__snap_fail(err, STORE_E_VALUE, name, -1, "float %zu of dense array %s is %g", bad,
                         d->name, (double)d->data[bad]);
        return -1;
    }
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        store__snap_fail(err, STORE_E_IO, tmp, -1, "cannot create: %s", ERRTEXT(errno));
        return -1;
    }
    XXH3_state_t xxh;
    XXH3_INITSTATE(&xxh);
    XXH3_64bits_reset(&xxh);
    uint8_t head[DENSE_HEADER_BYTES];
    memcpy(head, DENSE_MAGIC, 8);
    put_le64(head + 8, d->count);
    XXH3_64bits_update(&xxh, head, sizeof head);
    int e = write_all(fd, head, sizeof head);
    uint32_t chunk[DENSE_CHUNK_FLOATS];
    for (uint64_t at = 0; e == 0 && at < d->count; at += DENSE_CHUNK_FLOATS) {
        size_t n = d->count - at < DENSE_CHUNK_FLOATS ? (size_t)(d->count - at)
                                                      : DENSE_CHUNK_FLOATS;
        memcpy(chunk, d->data + at, n * 4);
        for (size_t j = 0; j < n; j++)
            chunk[j] = htole32(chunk[j]);
        XXH3_64bits_update(&xxh, chunk, n * 4);
        e = write_all(fd, (const uint8_t *)chunk, n * 4);
    }
    if (e == 0 && fsync(fd) != 0)
        e = -errno;
    if (close(fd) != 0 && e == 0)
        e = -errno;
    if (e == 0 && renameat(dirfd, tmp, dirfd, name) != 0)
        e = -errno;
    if (e) {
        store__snap_fail(err, STORE_E_IO, tmp, -1, "cannot write %s: %s", name, ERRTEXT(-e));
        unlinkat(dirfd, tmp, 0);
        return -1;
    }
    snprintf(md->name, sizeof md->name, "%s", d->name);
    snprintf(md->file, sizeof md->file, "%s", name);
    md->bytes = DENSE_HEADER_BYTES + 4 * d->count;
    md->xxh3 = XXH3_64bits_digest(&xxh);
    return 0;
}

/* Renames MANIFEST.tmp to MANIFEST unless a MANIFEST exists.  Returns 0 or
 * -errno (-EEXIST when one exists). */
static int publish_manifest(int dirfd)
{
    if (renameat2(dirfd, MANIFEST_TMP, dirfd, MANIFEST_FILE_NAME, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -errno;
    /* filesystem without RENAME_NOREPLACE: check, then rename (racy, but
     * concurrent writers into one dir are unsupported anyway) */
    struct stat st;
    if (fstatat(dirfd, MANIFEST_FILE_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return -EEXIST;
    if (renameat(dirfd, MANIFEST_TMP, dirfd, MANIFEST_FILE_NAME) != 0)
        return -errno;
    return 0;
}

/* The extras rules store.h states, checked before anything is written (the
 * manifest encoder checks the names again). */
static int check_extras(const store_extras_t *x, char *why, size_t len)
{
    if (x->n_params > STORE_MAX_PARAMS || x->n_dense > STORE_MAX_DENSE) {
        snprintf(why, len, "%u params and %u dense arrays, the limits are %d and %d",
                 x->n_params, x->n_dense, STORE_MAX_PARAMS, STORE_MAX_DENSE);
        return -1;
    }
    for (uint32_t i = 0; i < x->n_dense; i++) {
        const store_dense_t *d = &x->dense[i];
        if (!d->data || d->count == 0 || d->count > STORE_DENSE_MAX_FLOATS) {
            snprintf(why, len, "dense[%u] (%.31s) has %" PRIu64 " floats%s, expected 1..%" PRIu64,
                     i, d->name, d->count, d->data ? "" : " and no data",
                     (uint64_t)STORE_DENSE_MAX_FLOATS);
            return -1;
        }
    }
    return 0;
}

int store_snapshot_write(const store_t *s, const char *dir, const store_meta_t *meta,
                         store_error_t *err)
{
    return store_snapshot_write_ex(s, dir, meta, NULL, err);
}

static int snapshot_write(const store_t *s, const char *dir, const store_meta_t *meta,
                          const store_extras_t *x, const char *producer, store_error_t *err);

int store_snapshot_write_ex(const store_t *s, const char *dir, const store_meta_t *meta,
                            const store_extras_t *x, store_error_t *err)
{
    return snapshot_write(s, dir, meta, x, NULL, err);
}

static int snapshot_write(const store_t *s, const char *dir, const store_meta_t *meta,
                          const store_extras_t *x, const char *producer, store_error_t *err)
{
    store_error_t scratch;
    if (!err)
        err = &scratch;
    store__snap_err_clear(err);
    if (!s || !dir || !dir[0] || !meta) {
        const char *what = !s ? "store" : !meta ? "meta" : "dir";
        store__snap_fail(err, STORE_E_INVALID, "", -1, "store_snapshot_write: %s is NULL or empty",
                         what);
        return store_errc_errno(err->code);
    }
    char why[256];
    if (check_meta(meta, why, sizeof why) != 0) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "meta: %s", why);
        return store_errc_errno(err->code);
    }
    static const store_extras_t no_extras;
    if (!x)
        x = &no_extras;
    if (check_extras(x, why, sizeof why) != 0) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "extras: %s", why);
        return store_errc_errno(err->code);
    }

    const uint32_t nshards = store_shards(s);
    int dirfd = -1, rc = -1;
    uint32_t written = 0;      /* shard files renamed into place */
    uint32_t dense_written = 0; /* dense files renamed into place */
    bool manifest_tmp = false; /* MANIFEST.tmp may exist */
    bool published = false;    /* MANIFEST renamed into place */
    uint8_t *buf = NULL, *mbuf = NULL;
    manifest_shard_t *shards = NULL;
    manifest_t *m = NULL; /* heap: it carries the params and dense tables */

    bool created = mkdir(dir, 0755) == 0;
    if (!created && errno != EEXIST) {
        store__snap_fail(err, STORE_E_IO, "", -1, "%s: cannot create the directory: %s", dir,
                         ERRTEXT(errno));
        return store_errc_errno(err->code);
    }
    dirfd = store__snap_open_dir(dir, err);
    if (dirfd < 0)
        return store_errc_errno(err->code);
    struct stat st;
    if (fstatat(dirfd, MANIFEST_FILE_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        store__snap_fail(err, STORE_E_EXISTS, MANIFEST_FILE_NAME, -1, "%s already holds a snapshot",
                         dir);
        goto out;
    }
    if (errno != ENOENT) {
        store__snap_fail(err, STORE_E_IO, MANIFEST_FILE_NAME, -1, "cannot stat: %s",
                         ERRTEXT(errno));
        goto out;
    }
    if (created) { /* make the new directory's own entry durable */
        int pfd = openat(dirfd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (pfd >= 0) {
            fsync(pfd);
            close(pfd);
        }
    }

    buf = malloc(WRITE_BUF_BYTES);
    shards = calloc(nshards, sizeof *shards);
    if (!buf || !shards) {
        store__snap_fail(err, STORE_E_NOMEM, "", -1, "out of memory for the write buffer");
        goto out;
    }
    const uint64_t total = store_count(s);
    for (; written < nshards; written++) {
        store_t *ordered;
        if (relay_shard(s, written, total, buf, &ordered, err) != 0)
            goto out;
        int w = write_shard(ordered ? ordered : s, dirfd, written, buf, &shards[written], err);
        store_destroy(ordered);
        if (w != 0)
            goto out;
    }
    if (fsync(dirfd) != 0) { /* the shards' renames before the MANIFEST's */
        store__snap_fail(err, STORE_E_IO, "", -1, "%s: cannot fsync the directory: %s", dir,
                         ERRTEXT(errno));
        goto out;
    }

    m = calloc(1, sizeof *m);
    if (!m) {
        store__snap_fail(err, STORE_E_NOMEM, "", -1, "out of memory for the manifest");
        goto out;
    }
    *m = (manifest_t){
        .format_version = MANIFEST_FORMAT_VERSION,
        .meta = *meta,
        .value_floats = store_value_floats(s),
        .dtype = store_dtype(s),
        .shard_count = nshards,
        .shards = shards,
        .n_params = x->n_params,
        .n_dense = x->n_dense,
        .hash_seed = store_hash_seed(s),
    };
    memcpy(m->params, x->params, sizeof m->params);
    if (producer)
        snprintf(m->producer, sizeof m->producer, "%s", producer);
    for (; dense_written < x->n_dense; dense_written++) {
        if (write_dense(dirfd, &x->dense[dense_written], dense_written,
                        &m->dense[dense_written], err) != 0)
            goto out;
    }
    if (x->n_dense > 0 && fsync(dirfd) != 0) {
        store__snap_fail(err, STORE_E_IO, "", -1, "%s: cannot fsync the directory: %s", dir,
                         ERRTEXT(errno));
        goto out;
    }
    if (m->meta.created_unix == 0)
        m->meta.created_unix = (uint64_t)time(NULL);
    size_t mlen;
    int e = store__manifest_encode(m, &mbuf, &mlen, why, sizeof why);
    if (e) {
        store__snap_fail(err, e == -ENOMEM ? STORE_E_NOMEM : STORE_E_INVALID, MANIFEST_FILE_NAME,
                         -1, "cannot encode: %s", unprefixed(why));
        goto out;
    }
    manifest_tmp = true;
    int fd = openat(dirfd, MANIFEST_TMP, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        store__snap_fail(err, STORE_E_IO, MANIFEST_TMP, -1, "cannot create: %s", ERRTEXT(errno));
        goto out;
    }
    e = write_all(fd, mbuf, mlen);
    if (e == 0 && fsync(fd) != 0)
        e = -errno;
    if (close(fd) != 0 && e == 0)
        e = -errno;
    if (e) {
        store__snap_fail(err, STORE_E_IO, MANIFEST_TMP, -1, "cannot write: %s", ERRTEXT(-e));
        goto out;
    }
    e = publish_manifest(dirfd);
    if (e == -EEXIST) {
        store__snap_fail(err, STORE_E_EXISTS, MANIFEST_FILE_NAME, -1,
                         "another writer published a snapshot in %s first", dir);
        goto out;
    }
    if (e) {
        store__snap_fail(err, STORE_E_IO, MANIFEST_TMP, -1,
                         "cannot rename to " MANIFEST_FILE_NAME ": %s", ERRTEXT(-e));
        goto out;
    }
    manifest_tmp = false;
    published = true;
    if (fsync(dirfd) != 0) {
        store__snap_fail(err, STORE_E_IO, "", -1, "%s: cannot fsync the directory: %s", dir,
                         ERRTEXT(errno));
        goto out;
    }
    rc = 0;
out:
    if (rc != 0 && dirfd >= 0) { /* leave no snapshot, whole or partial */
        if (published)
            unlinkat(dirfd, MANIFEST_FILE_NAME, 0);
        if (manifest_tmp)
            unlinkat(dirfd, MANIFEST_TMP, 0);
        for (uint32_t i = 0; i < written; i++)
            unlinkat(dirfd, shards[i].file, 0);
        for (uint32_t i = 0; i < dense_written; i++)
            unlinkat(dirfd, m->dense[i].file, 0);
        if (created)
            rmdir(dir); /* only succeeds when nothing else is in it */
    }
    free(mbuf);
    free(m);
    free(shards);
    free(buf);
    if (dirfd >= 0)
        close(dirfd);
    return rc == 0 ? 0 : store_errc_errno(err->code);
}

void store__remove_tmp_dir(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL)
            if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                unlinkat(dirfd(d), de->d_name, 0);
        closedir(d);
    }
    rmdir(path);
}

int store_snapshot_publish(const store_t *s, const char *dir, const store_meta_t *meta,
                           const store_extras_t *x, const char *producer,
                           store_snapshot_side_fn side, void *ctx, store_error_t *err)
{
    store_error_t scratch;
    if (!err)
        err = &scratch;
    store__snap_err_clear(err);
    if (producer && strlen(producer) >= MANIFEST_PRODUCER_MAX) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "producer '%s' is over %d bytes",
                         producer, MANIFEST_PRODUCER_MAX - 1);
        return store_errc_errno(err->code);
    }
    const char *slash = dir ? strrchr(dir, '/') : NULL;
    char tmp[4096];
    int n = dir ? snprintf(tmp, sizeof tmp, "%.*s.tmp-%s-%ld", slash ? (int)(slash - dir + 1) : 0,
                           dir, slash ? slash + 1 : dir, (long)getpid())
                : -1;
    if (n < 0 || (size_t)n >= sizeof tmp) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "store_snapshot_publish: dir %s",
                         dir ? "is too long" : "is NULL");
        return store_errc_errno(err->code);
    }
    store__remove_tmp_dir(tmp); /* a killed write of this pid's number, long ago */
    int rc = snapshot_write(s, tmp, meta, x, producer, err);
    if (rc != 0) {
        store__remove_tmp_dir(tmp);
        return rc;
    }
    if (side) {
        int fd = store__snap_open_dir(tmp, err);
        int e = fd < 0 ? -EIO : side(ctx, fd);
        if (fd >= 0 && e == 0 && fsync(fd) != 0)
            e = -errno;
        if (fd >= 0)
            close(fd);
        if (e != 0) {
            if (fd >= 0)
                store__snap_fail(err, STORE_E_IO, "", -1, "%s: the producer's side file: %s",
                                 tmp, ERRTEXT(-e));
            store__remove_tmp_dir(tmp);
            return store_errc_errno(err->code);
        }
    }
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_NOREPLACE) != 0) {
        int e = errno;
        bool exists = e == EEXIST || e == ENOTEMPTY;
        store__snap_fail(err, exists ? STORE_E_EXISTS : STORE_E_IO, "", -1,
                         "cannot rename %s to %s: %s", tmp, dir, ERRTEXT(e));
        store__remove_tmp_dir(tmp);
        return store_errc_errno(err->code);
    }
    char parent[4096];
    snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash - dir) : 1, slash ? dir : ".");
    int pfd = open(parent[0] ? parent : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0 || fsync(pfd) != 0) {
        store__snap_fail(err, STORE_E_IO, "", -1, "%s: cannot fsync the directory (version %s "
                         "in place, perhaps not durable): %s", parent, dir, ERRTEXT(errno));
        if (pfd >= 0)
            close(pfd);
        return store_errc_errno(err->code);
    }
    close(pfd);
    return 0;
}
