/*
 * snapshot_meta.c — a snapshot's small files, read whole and checked before
 * the shards are touched: the MANIFEST (store__snap_read_manifest, for the
 * loader and store_snapshot_read_meta) and the dense arrays it lists
 * (store__snap_load_extras).  The shards, large, are snapshot_load.c's.
 *
 * Each file is opened O_NONBLOCK (a FIFO in its place cannot hang the
 * load), must be a regular file of the size the manifest says, and is read
 * with read(2)/pread(2) in one buffer.  A dense file is hashed as it comes
 * in, 16 MiB at a time; its header and values are looked at only once the
 * checksum holds.  Errors name the file and byte offset, as the loader's do.
 * The two steps for a file of known size (store__open_sized,
 * store__pread_all) serve delta_read.c's shard files too.
 *
 * THREAD SAFETY: reentrant; no global state.
 */
#define _GNU_SOURCE
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */

#include "snapshot_internal.h"
#include "delta.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- reading a file of known size ---------------------------------------- */

int store__open_sized(int dirfd, const char *file, uint64_t bytes, store_error_t *err)
{
    int fd = openat(dirfd, file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        store__snap_fail(err, STORE_E_IO, file, -1, "cannot open: %s", ERRTEXT(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        store__snap_fail(err, STORE_E_IO, file, -1, "not a readable regular file");
        goto fail;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size != bytes) {
        store__snap_fail(err, size < bytes ? STORE_E_TRUNCATED : STORE_E_SIZE, file,
                         (int64_t)(size < bytes ? size : bytes),
                         "%" PRIu64 " bytes, the manifest says %" PRIu64, size, bytes);
        goto fail;
    }
    return fd;
fail:
    close(fd);
    return -1;
}

int store__pread_all(int fd, void *buf, uint64_t len, uint64_t off, const char *file,
                     store_error_t *err)
{
    uint64_t got = 0;
    while (got < len) {
        size_t want = len - got > (1u << 24) ? (1u << 24) : (size_t)(len - got);
        ssize_t r = pread(fd, (uint8_t *)buf + got, want, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            store__snap_fail(err, STORE_E_IO, file, (int64_t)(off + got), "cannot read: %s",
                             ERRTEXT(errno));
            return -1;
        }
        if (r == 0) {
            store__snap_fail(err, STORE_E_TRUNCATED, file, (int64_t)(off + got),
                             "shrank while being read");
            return -1;
        }
        got += (uint64_t)r;
    }
    return 0;
}

/* ---- MANIFEST ------------------------------------------------------------ */

/* Reads and decodes dir's MANIFEST.  Returns 0 with *m filled (store__manifest_free
 * it) or -1 with *err filled. */
int store__snap_read_manifest(int dirfd, const char *dir, manifest_t *m, store_error_t *err)
{
    const char *file = MANIFEST_FILE_NAME;
    uint8_t *buf = NULL;
    int rc = -1;
    int fd = openat(dirfd, file, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* FIFO: no hang */
    if (fd < 0) {
        if (errno == ENOENT)
            store__snap_fail(err, STORE_E_NO_MANIFEST, file, -1,
                             "missing in %s: not a snapshot, or its write did not finish", dir);
        else
            store__snap_fail(err, STORE_E_IO, file, -1, "cannot open: %s", ERRTEXT(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        store__snap_fail(err, STORE_E_IO, file, -1, "cannot stat: %s", ERRTEXT(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        store__snap_fail(err, STORE_E_MANIFEST, file, -1, "not a regular file");
        goto out;
    }
    if ((uint64_t)st.st_size > MANIFEST_MAX_BYTES) {
        store__snap_fail(err, STORE_E_MANIFEST, file, -1,
                         "%" PRIu64 " bytes, over the %u-byte limit", (uint64_t)st.st_size,
                         MANIFEST_MAX_BYTES);
        goto out;
    }
    size_t len = (size_t)st.st_size, got = 0;
    buf = malloc(len ? len : 1);
    if (!buf) {
        store__snap_fail(err, STORE_E_NOMEM, file, -1, "out of memory for %zu bytes", len);
        goto out;
    }
    while (got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            store__snap_fail(err, STORE_E_IO, file, (int64_t)got, "cannot read: %s",
                             ERRTEXT(errno));
            goto out;
        }
        if (r == 0)
            break; /* shrank: decode what is there, which will fail */
        got += (size_t)r;
    }
    char why[400];
    if (store__manifest_decode(buf, got, m, why, sizeof why) != 0) {
        store__snap_fail(err, STORE_E_MANIFEST, file, -1, "%s", unprefixed(why));
        goto out;
    }
    rc = 0;
out:
    free(buf);
    close(fd);
    return rc;
}

/* ---- dense arrays (extras) ---------------------------------------------- */

/* Reads the dense file md into d (data malloc'd): size, checksum, header and
 * values are checked before d is filled.  0, or -1 with *err filled and
 * nothing allocated. */
static int read_dense(int dirfd, const manifest_dense_t *md, store_dense_t *d, store_error_t *err)
{
    char file[sizeof md->file];
    snprintf(file, sizeof file, "%.*s", (int)strnlen(md->file, sizeof md->file - 1), md->file);
    const uint64_t count =
        (md->bytes - DENSE_HEADER_BYTES) / 4; /* store__manifest_decode checked */
    float *data = NULL;
    int rc = -1;
    int fd = store__open_sized(dirfd, file, md->bytes, err);
    if (fd < 0)
        return -1;
    uint8_t head[DENSE_HEADER_BYTES];
    data = malloc(count * sizeof *data);
    if (!data) {
        store__snap_fail(err, STORE_E_NOMEM, file, -1, "out of memory for %" PRIu64 " floats",
                         count);
        goto out;
    }
    /* read everything, hashing as it comes; nothing is interpreted before
     * the checksum holds */
    XXH3_state_t xxh;
    XXH3_INITSTATE(&xxh);
    XXH3_64bits_reset(&xxh);
    uint64_t off = 0;
    while (off < md->bytes) {
        uint8_t *dst = off < DENSE_HEADER_BYTES ? head + off
                                                : (uint8_t *)data + (off - DENSE_HEADER_BYTES);
        uint64_t want = off < DENSE_HEADER_BYTES ? DENSE_HEADER_BYTES - off : md->bytes - off;
        if (want > (1u << 24)) /* hashed while still in cache */
            want = 1u << 24;
        if (store__pread_all(fd, dst, want, off, file, err) != 0)
            goto out;
        XXH3_64bits_update(&xxh, dst, (size_t)want);
        off += want;
    }
    uint64_t sum = XXH3_64bits_digest(&xxh);
    if (sum != md->xxh3) {
        store__snap_fail(err, STORE_E_CHECKSUM, file, -1,
                         "bytes 0..%" PRIu64 " hash to 0x%016" PRIx64
                         ", the manifest says 0x%016" PRIx64,
                         md->bytes, sum, md->xxh3);
        goto out;
    }
    if (memcmp(head, DENSE_MAGIC, 8) != 0) {
        store__snap_fail(err, STORE_E_HEADER, file, 0, "magic is not \"" DENSE_MAGIC "\"");
        goto out;
    }
    if (get_le64(head + 8) != count) {
        store__snap_fail(err, STORE_E_MISMATCH, file, 8,
                         "header count %" PRIu64 " but the manifest's size implies %" PRIu64,
                         get_le64(head + 8), count);
        goto out;
    }
    for (uint64_t i = 0; i < count; i++) /* no-op on little-endian hosts */
        ((uint32_t *)data)[i] = le32toh(((uint32_t *)data)[i]);
    size_t bad = store__snap_first_nonfinite(data, (size_t)count);
    if (bad < count) {
        store__snap_fail(err, STORE_E_VALUE, file, (int64_t)(DENSE_HEADER_BYTES + 4 * bad),
                         "float %zu of %s is %g", bad, md->name, (double)data[bad]);
        goto out;
    }
    snprintf(d->name, sizeof d->name, "%.*s", (int)strnlen(md->name, sizeof md->name - 1),
             md->name);
    d->data = data;
    d->count = count;
    data = NULL;
    rc = 0;
out:
    free(data);
    close(fd);
    return rc;
}

/* Fills x from m: the params, and every dense file read and verified. */
int store__snap_load_extras(int dirfd, const manifest_t *m, store_extras_t *x, store_error_t *err)
{
    memset(x, 0, sizeof *x);
    x->n_params = m->n_params;
    memcpy(x->params, m->params, sizeof x->params);
    for (uint32_t i = 0; i < m->n_dense; i++) {
        if (read_dense(dirfd, &m->dense[i], &x->dense[i], err) != 0) {
            store_extras_free(x);
            return -1;
        }
        x->n_dense = i + 1;
    }
    return 0;
}

int store_version_producer(const char *dir, char producer[STORE_PRODUCER_MAX], bool *full,
                           store_meta_t *meta, store_error_t *err)
{
    store_error_t scratch;
    if (!err)
        err = &scratch;
    producer[0] = '\0';
    int dirfd = store__snap_open_dir(dir, err);
    if (dirfd < 0)
        return store_errc_errno(err->code);
    manifest_t m;
    memset(&m, 0, sizeof m);
    int rc = store__snap_read_manifest(dirfd, dir, &m, err);
    close(dirfd);
    if (rc != 0)
        return store_errc_errno(err->code);
    snprintf(producer, STORE_PRODUCER_MAX, "%s", m.producer);
    if (full)
        *full = m.kind == MANIFEST_KIND_FULL;
    if (meta)
        *meta = m.meta;
    store__manifest_free(&m);
    return 0;
}
