/*
 * snapshot.c — model snapshots on disk: the format, the names, the error
 * mapping and the helpers the loader (snapshot_load.c) and the writer
 * (snapshot_write.c) share.  store_snapshot_write() turns a store into a
 * directory of files, store_snapshot_load() turns such a directory back into
 * a store, trusting none of its bytes.
 *
 * A SNAPSHOT DIRECTORY holds
 *   MANIFEST          model meta, K, dtype, the store's hash seed, and per
 *                     shard: file name, entries, size and XXH3_64bits of
 *                     the whole file (FlatBuffers + trailer checksum:
 *                     manifest.h)
 *   shard-00000.tls   one file per shard, named "shard-%05u.tls"
 *   ...
 *   dense-00.tld      optional: one file per dense array of the extras
 *   ...               (store.h): "TLDENSE1", u64 count, count x f32 LE;
 *                     the manifest holds their names, sizes and XXH3s, and
 *                     the model's params ("fields" -> "20")
 *
 * A SHARD FILE is a 64-byte header and then `entries` packed records, all
 * little-endian:
 *
 *   0               8        12       16       20       24       28       32
 *   +---------------+--------+--------+--------+--------+--------+--------+
 *   | magic         | format | shard  | shard  | value  | dtype  | value  |
 *   | "TLSHARD1"    | version| index  | count  | floats | 0 f32  | bytes  |
 *   | (no NUL)      | = 1    |        |        | = K    | 1 f16  |        |
 *   +---------------+--------+--------+--------+--------+--------+--------+
 *   32              40                               56               64
 *   +---------------+--------------------------------+----------------+
 *   | entries (u64) | zero padding                   | XXH3_64bits of |
 *   |               |                                | bytes 0..55    |
 *   +---------------+--------------------------------+----------------+
 *   64      record 0 = { u64 key | value: K x f32 or K x f16 (value_bytes) }
 *   64 + R  record 1, R = 8 + value_bytes; packed, no alignment
 *   ...
 *   file size = 64 + entries * R, exactly
 *
 * ERRORS: every failure fills store_error_t: code, the file inside the
 * snapshot dir ("" for the dir itself), the byte offset (-1 when no single
 * offset applies) and one sentence "file: offset N: what was wrong".  The
 * public calls return 0 or the negative errno store_errc_errno gives for
 * the code (store.h): -EIO, -ENOMEM, -EEXIST, -ENOENT (no MANIFEST),
 * -EINVAL (bad arguments) and -EBADMSG for every kind of bad content.
 *
 * THREAD SAFETY: everything here is reentrant; no global state.
 */
#define _GNU_SOURCE

#include "snapshot_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *store__snap_errtext(int e, char *buf, size_t len)
{
    return strerror_r(e, buf, len);
}

void store__snap_err_clear(store_error_t *err)
{
    err->code = STORE_OK;
    err->file[0] = '\0';
    err->offset = -1;
    err->msg[0] = '\0';
}

/* Fills *err: code, file, offset and "file: offset N: <fmt>". */
cold __attribute__((format(printf, 5, 6))) void store__snap_fail(store_error_t *err,
                                                                 store_errc_t code,
                                                                 const char *file, int64_t offset,
                                                                 const char *fmt, ...)
{
    err->code = code;
    snprintf(err->file, sizeof err->file, "%s", file ? file : "");
    err->offset = offset;
    size_t n = 0;
    if (file && file[0])
        n += (size_t)snprintf(err->msg, sizeof err->msg, "%s: ", file);
    if (offset >= 0 && n < sizeof err->msg)
        n += (size_t)snprintf(err->msg + n, sizeof err->msg - n, "offset %" PRId64 ": ", offset);
    if (n < sizeof err->msg) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg + n, sizeof err->msg - n, fmt, ap);
        va_end(ap);
    }
}

int store_error_set(store_error_t *err, store_errc_t code, const char *fmt, ...)
{
    if (err) {
        memset(err, 0, sizeof *err);
        err->code = code;
        err->offset = -1;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return store_errc_errno(code);
}

/* ---- names -------------------------------------------------------------- */

const char *store_errc_name(store_errc_t code)
{
    switch (code) {
    case STORE_OK:
        return "ok";
    case STORE_E_IO:
        return "io";
    case STORE_E_NOMEM:
        return "nomem";
    case STORE_E_EXISTS:
        return "exists";
    case STORE_E_NO_MANIFEST:
        return "no_manifest";
    case STORE_E_MANIFEST:
        return "manifest";
    case STORE_E_TRUNCATED:
        return "truncated";
    case STORE_E_SIZE:
        return "size";
    case STORE_E_CHECKSUM:
        return "checksum";
    case STORE_E_HEADER:
        return "header";
    case STORE_E_MISMATCH:
        return "mismatch";
    case STORE_E_DUPLICATE:
        return "duplicate";
    case STORE_E_WRONG_SHARD:
        return "wrong_shard";
    case STORE_E_VALUE:
        return "value";
    case STORE_E_INVALID:
        return "invalid";
    case STORE_E_MODEL:
        return "model";
    }
    return "unknown";
}

const char *store_model_kind_name(store_model_kind_t kind)
{
    switch (kind) {
    case STORE_MODEL_LR:
        return "lr";
    case STORE_MODEL_FM:
        return "fm";
    case STORE_MODEL_FFM:
        return "ffm";
    case STORE_MODEL_DNN:
        return "dnn";
    }
    return "unknown";
}

int store_errc_errno(store_errc_t code)
{
    switch (code) {
    case STORE_OK:
        return 0;
    case STORE_E_IO:
        return -EIO;
    case STORE_E_NOMEM:
        return -ENOMEM;
    case STORE_E_EXISTS:
        return -EEXIST;
    case STORE_E_NO_MANIFEST:
        return -ENOENT;
    case STORE_E_INVALID:
        return -EINVAL;
    case STORE_E_MANIFEST:
    case STORE_E_TRUNCATED:
    case STORE_E_SIZE:
    case STORE_E_CHECKSUM:
    case STORE_E_HEADER:
    case STORE_E_MISMATCH:
    case STORE_E_DUPLICATE:
    case STORE_E_WRONG_SHARD:
    case STORE_E_VALUE:
    case STORE_E_MODEL:
        return -EBADMSG;
    }
    return -EINVAL;
}

/* ---- shared by the loader and the writer ---------------------------------- */

/* Index of the first of n records (at p, rec bytes apart) whose value holds
 * a NaN or an infinity, or n.  *which is the float's index in the value. */
size_t store__snap_first_bad_value(const uint8_t *p, size_t n, size_t rec, uint32_t K,
                                   store_dtype_t dt, uint32_t *which)
{
    for (size_t r = 0; r < n; r++, p += rec) {
        const uint8_t *v = p + 8;
        if (dt == STORE_DTYPE_F32) {
            for (uint32_t j = 0; j < K; j++) {
                if (unlikely((get_le32(v + 4 * j) & 0x7f800000u) == 0x7f800000u)) {
                    *which = j;
                    return r;
                }
            }
        } else {
            for (uint32_t j = 0; j < K; j++) {
                uint16_t h;
                memcpy(&h, v + 2 * j, 2);
                if (unlikely((le16toh(h) & 0x7c00u) == 0x7c00u)) {
                    *which = j;
                    return r;
                }
            }
        }
    }
    return n;
}

cold void store__snap_fail_value(store_error_t *err, const char *file, uint64_t off,
                                 const uint8_t *rec, uint32_t j, store_dtype_t dt)
{
    uint64_t key = get_le64(rec);
    bool nan, neg;
    if (dt == STORE_DTYPE_F32) {
        uint32_t b = get_le32(rec + 8 + 4 * j);
        nan = (b & 0x7fffffu) != 0;
        neg = b >> 31;
    } else {
        uint16_t h;
        memcpy(&h, rec + 8 + 2 * j, 2);
        h = le16toh(h);
        nan = (h & 0x3ffu) != 0;
        neg = h >> 15;
    }
    const char *what = nan ? "NaN" : neg ? "-inf" : "+inf";
    store__snap_fail(err, STORE_E_VALUE, file, (int64_t)off,
                     "value %" PRIu32 " of key 0x%" PRIx64 " is %s", j, key, what);
}

/* The options a loader creates its store with for a snapshot of `total`
 * entries; the writer's relay_shard sizes its shards with the same. */
store_options_t store__snap_loader_options(uint32_t K, store_dtype_t dt, uint32_t shards,
                                           uint64_t total, uint64_t seed)
{
    return (store_options_t){.value_floats = K,
                             .dtype = dt,
                             .shards = shards,
                             .expected_keys = total,
                             .hash_seed = seed};
}

int store__snap_open_dir(const char *dir, store_error_t *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        store__snap_fail(err, STORE_E_IO, "", -1, "%s: cannot open the directory: %s", dir,
                         ERRTEXT(errno));
    return fd;
}

/* Index of the first NaN or infinity among n floats, or n. */
size_t store__snap_first_nonfinite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return i;
    return n;
}
