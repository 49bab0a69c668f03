/*
 * delta_read.c — opening a delta (store_delta_open: every byte verified
 * before the caller sees any), iterating it, and the repository side:
 * version names, listings and chains (store_version_chain).
 *
 * OPEN reads the MANIFEST with the snapshot loader's reader
 * (store__snap_read_manifest: size limit, checksum, every field), refuses a
 * full version, then reads each shard file whole into memory (store__open_sized: a
 * regular file of the manifest's size, a FIFO cannot hang us;
 * store__pread_all) and hands it to store__delta_check_file.  A delta is
 * small next to its model, so holding it whole costs what applying it
 * costs anyway, and a caller never starts applying a delta that turns out
 * bad halfway.
 *
 * CHAIN walks parents by manifest only, newest first, then reverses: each
 * link's directory is "<model_dir>/<version>", its manifest must say that
 * version, a delta's parent must carry its layout; a version seen twice is a
 * cycle.  Cheap (one small file per link), so a watcher may call it on
 * every change.
 *
 * THREAD SAFETY: an opened delta is immutable: any number of threads may
 * iterate it.  Everything else is reentrant.
 */
#define _GNU_SOURCE

#include "delta_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- open ---------------------------------------------------------------- */

/* Reads ms's file (ms->bytes expected) whole into *out (malloc'd).  The size must
 * match; 0 or -1 with *err filled. */
static int read_file(int dirfd, const manifest_shard_t *ms, uint8_t **out, store_error_t *err)
{
    const char *file = ms->file;
    *out = NULL;
    int fd = store__open_sized(dirfd, file, ms->bytes, err);
    if (fd < 0)
        return -1;
    int rc = -1;
    uint8_t *buf = NULL;
    if (ms->bytes > SIZE_MAX / 2) {
        store__snap_fail(err, STORE_E_NOMEM, file, -1, "%" PRIu64 " bytes do not fit in memory",
                         ms->bytes);
        goto out;
    }
    buf = malloc(ms->bytes ? (size_t)ms->bytes : 1);
    if (!buf) {
        store__snap_fail(err, STORE_E_NOMEM, file, -1, "out of memory for %" PRIu64 " bytes",
                         ms->bytes);
        goto out;
    }
    if (store__pread_all(fd, buf, ms->bytes, 0, file, err) != 0)
        goto out;
    *out = buf;
    buf = NULL;
    rc = 0;
out:
    free(buf);
    close(fd);
    return rc;
}

/* A delta for m with empty shards; NULL on allocation failure. */
static store_delta_t *delta_new(const manifest_t *m)
{
    store_delta_t *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->shard = calloc(m->shard_count, sizeof *d->shard);
    if (!d->shard) {
        free(d);
        return NULL;
    }
    d->info.meta = m->meta;
    store__delta_layout_of_manifest(m, &d->info.layout);
    memcpy(d->info.producer, m->producer, sizeof d->info.producer);
    d->value_bytes = m->value_floats * (m->dtype == STORE_DTYPE_F16 ? 2u : 4u);
    return d;
}

/* Refuses a manifest that is not a delta. */
static int want_delta(const manifest_t *m, store_error_t *err)
{
    if (m->kind == MANIFEST_KIND_DELTA)
        return 0;
    store__snap_fail(err, STORE_E_MANIFEST, MANIFEST_FILE_NAME, -1,
                     "version %" PRIu64 " is full, not a delta: load it with "
                     "store_snapshot_load",
                     m->meta.version);
    return -1;
}

/* Checks shard i's bytes and records them in d (data borrowed). */
static int take_shard(store_delta_t *d, const manifest_t *m, uint32_t i, const uint8_t *p,
                      size_t n, store_error_t *err)
{
    if (store__delta_check_file(m, i, p, n, err) != 0)
        return -1;
    d->shard[i].data = p;
    d->shard[i].upserts = m->shards[i].entries;
    d->shard[i].deletes = m->shards[i].deletes;
    d->info.upserts += m->shards[i].entries;
    d->info.deletes += m->shards[i].deletes;
    return 0;
}

int store_delta_open(const char *dir, store_delta_t **out, store_error_t *err)
{
    store_error_t scratch;
    if (!err)
        err = &scratch;
    store__snap_err_clear(err);
    if (!dir || !dir[0] || !out) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "store_delta_open: a NULL argument");
        return store_errc_errno(err->code);
    }
    *out = NULL;
    int dirfd = store__snap_open_dir(dir, err);
    if (dirfd < 0)
        return store_errc_errno(err->code);
    manifest_t m;
    store_delta_t *d = NULL;
    int rc = store__snap_read_manifest(dirfd, dir, &m, err);
    if (rc != 0)
        goto out_dir;
    rc = want_delta(&m, err);
    if (rc == 0 && !(d = delta_new(&m))) {
        store__snap_fail(err, STORE_E_NOMEM, "", -1, "out of memory");
        rc = -1;
    }
    for (uint32_t i = 0; rc == 0 && i < m.shard_count; i++) {
        rc = read_file(dirfd, &m.shards[i], &d->shard[i].owned, err);
        if (rc == 0)
            rc = take_shard(d, &m, i, d->shard[i].owned, (size_t)m.shards[i].bytes, err);
    }
    store__manifest_free(&m);
    if (rc == 0)
        *out = d;
    else
        store_delta_close(d);
out_dir:
    close(dirfd);
    return rc == 0 ? 0 : store_errc_errno(err->code);
}

int store__delta_open_mem(const manifest_t *m, const uint8_t *const *files, const size_t *sizes,
                          store_delta_t **out, store_error_t *err)
{
    store_error_t scratch;
    if (!err)
        err = &scratch;
    store__snap_err_clear(err);
    if (!m || !files || !sizes || !out) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "delta_open_mem: a NULL argument");
        return store_errc_errno(err->code);
    }
    *out = NULL;
    if (want_delta(m, err) != 0)
        return store_errc_errno(err->code);
    store_delta_t *d = delta_new(m);
    if (!d) {
        store__snap_fail(err, STORE_E_NOMEM, "", -1, "out of memory");
        return store_errc_errno(err->code);
    }
    for (uint32_t i = 0; i < m->shard_count; i++) {
        if (take_shard(d, m, i, files[i], sizes[i], err) != 0) {
            store_delta_close(d);
            return store_errc_errno(err->code);
        }
    }
    *out = d;
    return 0;
}

void store_delta_close(store_delta_t *d)
{
    if (!d)
        return;
    for (uint32_t i = 0; i < d->info.layout.shards; i++)
        free(d->shard[i].owned);
    free(d->shard);
    free(d);
}

const store_delta_info_t *store_delta_info(const store_delta_t *d)
{
    return &d->info;
}

int store_delta_shard_counts(const store_delta_t *d, uint32_t shard, uint64_t *upserts,
                             uint64_t *deletes)
{
    if (shard >= d->info.layout.shards)
        return -EINVAL;
    if (upserts)
        *upserts = d->shard[shard].upserts;
    if (deletes)
        *deletes = d->shard[shard].deletes;
    return 0;
}

int store_delta_foreach(const store_delta_t *d, uint32_t shard, store_delta_upsert_fn upsert,
                        store_delta_del_fn del, void *ctx)
{
    if (shard >= d->info.layout.shards)
        return -EINVAL;
    const struct delta_shard *sh = &d->shard[shard];
    const uint32_t K = d->info.layout.value_floats;
    const size_t rec = 8 + d->value_bytes;
    const uint8_t *p = sh->data + SHARD_HEADER_BYTES;
    if (upsert) {
        float v[STORE_MAX_VALUE_FLOATS];
        for (uint64_t r = 0; r < sh->upserts; r++, p += rec) {
            const uint8_t *vb = p + 8;
            for (uint32_t j = 0; j < K; j++) {
                if (d->info.layout.dtype == STORE_DTYPE_F16) {
                    uint16_t h;
                    memcpy(&h, vb + 2 * j, 2);
                    v[j] = store_f16_to_f32(le16toh(h));
                } else {
                    uint32_t b = get_le32(vb + 4 * j);
                    memcpy(&v[j], &b, 4);
                }
            }
            int rc = upsert(ctx, get_le64(p), v);
            if (rc != 0)
                return rc;
        }
    } else {
        p += sh->upserts * rec;
    }
    if (del) {
        for (uint64_t r = 0; r < sh->deletes; r++, p += 8) {
            int rc = del(ctx, get_le64(p));
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

/* ---- repository: names, listings, chains ---------------------------------- */

int store_version_is_temp(const char *name)
{
    return name && strncmp(name, DELTA_TMP_PREFIX, sizeof DELTA_TMP_PREFIX - 1) == 0;
}

int store_version_parse(const char *name, uint64_t *version)
{
    if (!name || name[0] < '1' || name[0] > '9')
        return 0;
    uint64_t v = 0;
    for (const char *c = name; *c; c++) {
        if (*c < '0' || *c > '9')
            return 0;
        unsigned dgt = (unsigned)(*c - '0');
        if (v > (UINT64_MAX - dgt) / 10)
            return 0;
        v = v * 10 + dgt;
    }
    if (v > (uint64_t)INT64_MAX) /* a manifest's version is at most 2^63-1 (manifest.h) */
        return 0;
    if (version)
        *version = v;
    return 1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

long store_version_list(const char *model_dir, uint64_t *versions, size_t max)
{
    DIR *dp = opendir(model_dir);
    if (!dp)
        return -errno;
    size_t n = 0, cap = 64;
    uint64_t *all = malloc(cap * sizeof *all);
    long rc = all ? 0 : -ENOMEM;
    struct dirent *e;
    while (rc == 0 && (e = readdir(dp)) != NULL) {
        uint64_t v;
        if (store_version_is_temp(e->d_name) || !store_version_parse(e->d_name, &v))
            continue;
        if (n == cap) {
            uint64_t *p = realloc(all, 2 * cap * sizeof *all);
            if (!p) {
                rc = -ENOMEM;
                break;
            }
            all = p;
            cap *= 2;
        }
        all[n++] = v;
    }
    closedir(dp);
    if (rc == 0) {
        qsort(all, n, sizeof *all, cmp_u64);
        for (size_t i = 0; i < n && i < max; i++)
            versions[i] = all[i];
        rc = (long)n;
    }
    free(all);
    return rc;
}

/* Reads the manifest of "<model_dir>/<v>"; 0 or -1 with *err filled. */
static int read_version(const char *model_dir, uint64_t v, manifest_t *m, store_error_t *err)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%" PRIu64, model_dir, v) >= (int)sizeof path) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "%s: path too long", model_dir);
        return -1;
    }
    int dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        int e = errno;
        store__snap_fail(err, e == ENOENT ? STORE_E_NO_MANIFEST : STORE_E_IO, "", -1,
                         "version %" PRIu64 ": %s: %s", v, path, ERRTEXT(e));
        return -1;
    }
    int rc = store__snap_read_manifest(dirfd, path, m, err);
    close(dirfd);
    if (rc != 0) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "version %" PRIu64 ": %.400s", v, err->msg);
        memcpy(err->msg, msg, sizeof msg);
        return -1;
    }
    if (m->meta.version != v) {
        store__snap_fail(err, STORE_E_MISMATCH, MANIFEST_FILE_NAME, -1,
                         "directory %s holds version %" PRIu64 ", not %" PRIu64
                         " (a copied or foreign version)",
                         path, m->meta.version, v);
        store__manifest_free(m);
        return -1;
    }
    return 0;
}

int store_version_chain(const char *model_dir, uint64_t version, store_chain_t *out,
                        store_error_t *err)
{
    store_error_t scratch;
    if (!err)
        err = &scratch;
    store__snap_err_clear(err);
    if (!model_dir || !model_dir[0] || !out || version == 0) {
        store__snap_fail(err, STORE_E_INVALID, "", -1,
                         "store_version_chain: a NULL argument or version 0");
        return store_errc_errno(err->code);
    }
    out->n = 0;
    uint64_t v = version;
    store_delta_layout_t child_layout;
    uint64_t child = 0; /* the delta whose parent v is; 0 for the first link */
    for (;;) {
        for (uint32_t j = 0; j < out->n; j++) {
            if (out->versions[j] == v) {
                store__snap_fail(err, STORE_E_MISMATCH, "", -1,
                                 "version %" PRIu64 ": the chain from %" PRIu64
                                 " comes back to it (a cycle)",
                                 v, version);
                return store_errc_errno(err->code);
            }
        }
        if (out->n == STORE_CHAIN_MAX) {
            store__snap_fail(err, STORE_E_MISMATCH, "", -1,
                             "version %" PRIu64 ": the chain has more than %d links", version,
                             STORE_CHAIN_MAX);
            return store_errc_errno(err->code);
        }
        manifest_t m;
        if (read_version(model_dir, v, &m, err) != 0) {
            if (child && err->code == STORE_E_NO_MANIFEST) {
                char msg[sizeof err->msg];
                snprintf(msg, sizeof msg,
                         "delta %" PRIu64 " names parent %" PRIu64
                         ", which is missing (a gap in the chain): %.350s",
                         child, v, err->msg);
                memcpy(err->msg, msg, sizeof msg);
            }
            return store_errc_errno(err->code);
        }
        store_delta_layout_t layout;
        store__delta_layout_of_manifest(&m, &layout);
        char why[256];
        if (child && store__delta_layout_diff(&child_layout, &layout, why, sizeof why) != 0) {
            store__snap_fail(err, STORE_E_MISMATCH, "", -1,
                             "delta %" PRIu64 " names parent %" PRIu64
                             ", a foreign version: %s",
                             child, v, why);
            store__manifest_free(&m);
            return store_errc_errno(err->code);
        }
        out->created_unix[out->n] = m.meta.created_unix;
        out->versions[out->n++] = v;
        const int delta = m.kind == MANIFEST_KIND_DELTA;
        const uint64_t parent = m.meta.parent_version;
        store__manifest_free(&m);
        if (!delta)
            break;
        child = v;
        child_layout = layout;
        v = parent;
    }
    for (uint32_t i = 0, j = out->n - 1; i < j; i++, j--) {
        uint64_t t = out->versions[i];
        out->versions[i] = out->versions[j];
        out->versions[j] = t;
        t = out->created_unix[i];
        out->created_unix[i] = out->created_unix[j];
        out->created_unix[j] = t;
    }
    return 0;
}
