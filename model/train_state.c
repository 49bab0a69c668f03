/*
 * train_state.c — a trainer's optimizer state out and in (train.h: the
 * optimizer state, the state file), so that the online server's exports
 * carry the state of the keys they carry and a restart continues the
 * trainer that crashed instead of a fresh optimizer over the same weights.
 *
 * Where each kind keeps its rows (train.h: WHERE THE SERVED WEIGHTS ARE):
 *
 *   LR, FM, DNN   a store_t (train_store): get is one batched lookup, put
 *                 store_upsert.  LR caches the bias's row in the trainer
 *                 (its hot path never reads the store's copy back): a put
 *                 of MODEL_BIAS_ID refreshes the cache (train_state_lr.c).  LR and FM mirror
 *                 the store in a row table while they train on threads: a
 *                 put marks the mirror stale, as a step does.
 *   FFM           its private row table: find / upsert and a row copy.
 *
 * A put writes the state only, never an attached served store: the server
 * restores after loading the chain, whose versions already hold the served
 * floats that the rows' prefixes repeat (the export read both under one
 * writer lock).
 *
 * The file (layout in train.h):
 *
 *   +----------+--------+------+-----+-------+-------+---------+----------------+-------+
 *   | TLTSTAT1 | format | kind | opt | width | count | version | rows ...       | XXH3  |
 *   +----------+--------+------+-----+-------+-------+---------+----------------+-------+
 *   0          8        12     16    20      24      32        40               len-8
 *
 * Its parser trusts nothing: the length first, then the magic, the format,
 * the checksum over everything before the trailer, the width and the count
 * against the length (no multiplication that can wrap), every value finite,
 * and the header against the trainer's, all before the first row is
 * visited, so a bad file changes nothing.
 *
 * THREAD SAFETY: get and put are the trainer's one writer's (train.h); the
 * file functions touch no trainer but through put.
 */
#define _GNU_SOURCE
#include "train_ffm_impl.h"
#include "train_fm_impl.h"
#include "train_impl.h"
#include "train_state_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define TRAILER_BYTES 8u
#define WRITE_BUF (1u << 16)

/* ---- rows ------------------------------------------------------------------ */

/* The state store of t (LR, FM, DNN), NULL for FFM.  Writable: the trainer
 * owns it and the caller is its writer. */
static store_t *state_store(train_t *t)
{
    return (store_t *)train_store(t);
}

uint32_t train_state_width(const train_t *t)
{
    if (train_ops(t)->kind == STORE_MODEL_FFM)
        return ((const train_ffm_t *)train__impl(t))->sk;
    return store_value_floats(train_store(t));
}

size_t train_state_get(train_t *t, const uint64_t *ids, size_t n, float *rows, uint8_t *found)
{
    const uint32_t w = train_state_width(t);
    size_t hits = 0;
    if (train_ops(t)->kind == STORE_MODEL_FFM) {
        const train_ffm_t *f = train__impl(t);
        for (size_t i = 0; i < n; i++) {
            const float *r = train__row_table_find(f->table, ids[i]);
            found[i] = r != NULL;
            if (r) {
                memcpy(rows + i * w, r, (size_t)w * sizeof *rows);
                hits++;
            }
        }
        return hits;
    }
    return store_lookup_batch(train_store(t), ids, n, rows, found);
}

static bool finite_row(const float *row, uint32_t w)
{
    for (uint32_t c = 0; c < w; c++)
        if (!isfinite(row[c]))
            return false;
    return true;
}

int train_state_put(train_t *t, const uint64_t *ids, size_t n, const float *rows)
{
    const uint32_t w = train_state_width(t);
    const store_model_kind_t kind = train_ops(t)->kind;
    void *impl = train__impl(t);
    for (size_t i = 0; i < n; i++) {
        const float *row = rows + i * w;
        if (!finite_row(row, w))
            return -ERANGE;
        if (kind == STORE_MODEL_FFM) {
            bool created;
            float *r = train__row_table_upsert(((train_ffm_t *)impl)->table, ids[i], &created);
            if (!r)
                return -ENOMEM;
            memcpy(r, row, (size_t)w * sizeof *r);
            continue;
        }
        int rc = kind == STORE_MODEL_LR ? train__lr_state_put(impl, ids[i], row)
                                        : store_upsert(state_store(t), ids[i], row);
        if (rc < 0)
            return rc;
        if (kind == STORE_MODEL_FM)
            ((train_fm_t *)impl)->rows_stale = true;
    }
    return 0;
}

void train_state_header_of(const train_t *t, train_state_header_t *h)
{
    const train_options_t *o = train_options(t);
    memset(h, 0, sizeof *h);
    h->kind = (uint32_t)o->kind;
    switch (o->kind) {
    case STORE_MODEL_LR:
        h->optimizer = (uint32_t)o->lr.optimizer;
        break;
    case STORE_MODEL_FM:
        h->optimizer = (uint32_t)o->fm.optimizer;
        break;
    case STORE_MODEL_FFM:
        h->optimizer = (uint32_t)o->ffm.optimizer;
        break;
    default:
        h->optimizer = (uint32_t)TRAIN_ADAGRAD; /* the DNN's embeddings: fixed */
        break;
    }
    h->width = train_state_width(t);
}

/* ---- the file: writing ---------------------------------------------------------- */

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

struct out {
    int fd;
    uint8_t *buf;
    size_t used;
    XXH3_state_t *xxh;
};

static int out_flush(struct out *o)
{
    size_t off = 0;
    while (off < o->used) {
        ssize_t k = write(o->fd, o->buf + off, o->used - off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -EIO;
        off += (size_t)k;
    }
    o->used = 0;
    return 0;
}

/* Appends len bytes (hashed when hash). */
static int out_put(struct out *o, const void *p, size_t len, bool hash)
{
    if (hash)
        XXH3_64bits_update(o->xxh, p, len);
    const uint8_t *b = p;
    while (len > 0) {
        size_t k = WRITE_BUF - o->used < len ? WRITE_BUF - o->used : len;
        memcpy(o->buf + o->used, b, k);
        o->used += k;
        b += k;
        len -= k;
        if (o->used == WRITE_BUF) {
            int rc = out_flush(o);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

int train_state_write_at(int dirfd, const char *name, const train_state_header_t *h,
                         const uint64_t *ids, const float *rows)
{
    if (h->width == 0 || h->width > STORE_MAX_VALUE_FLOATS)
        return -EINVAL;
    struct out o = {.fd = -1};
    o.buf = malloc(WRITE_BUF);
    o.xxh = XXH3_createState();
    int rc = o.buf && o.xxh ? 0 : -ENOMEM;
    if (rc == 0) {
        o.fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (o.fd < 0)
            rc = -errno;
    }
    if (rc == 0) {
        XXH3_64bits_reset(o.xxh);
        uint8_t head[TRAIN_STATE_HEADER_BYTES];
        memcpy(head, TRAIN_STATE_MAGIC, 8);
        put_le32(head + 8, TRAIN_STATE_FORMAT);
        put_le32(head + 12, h->kind);
        put_le32(head + 16, h->optimizer);
        put_le32(head + 20, h->width);
        put_le64(head + 24, h->count);
        put_le64(head + 32, h->version);
        rc = out_put(&o, head, sizeof head, true);
    }
    for (uint64_t i = 0; rc == 0 && i < h->count; i++) {
        uint8_t k8[8], f4[4];
        put_le64(k8, ids[i]);
        rc = out_put(&o, k8, 8, true);
        const float *row = rows + i * h->width;
        for (uint32_t c = 0; rc == 0 && c < h->width; c++) {
            uint32_t u;
            memcpy(&u, &row[c], 4);
            put_le32(f4, u);
            rc = out_put(&o, f4, 4, true);
        }
    }
    if (rc == 0) {
        uint8_t t8[8];
        put_le64(t8, XXH3_64bits_digest(o.xxh));
        rc = out_put(&o, t8, 8, false);
    }
    if (rc == 0)
        rc = out_flush(&o);
    if (rc == 0 && fsync(o.fd) != 0)
        rc = -errno;
    if (o.fd >= 0 && close(o.fd) != 0 && rc == 0)
        rc = -errno;
    free(o.buf);
    XXH3_freeState(o.xxh);
    return rc;
}

/* ---- the file: reading -------------------------------------------------------------- */

__attribute__((format(printf, 3, 4))) static int bad(train_state_error_t *err, size_t at,
                                                     const char *fmt, ...)
{
    if (err) {
        int n = snprintf(err->msg, sizeof err->msg, "byte %zu: ", at);
        va_list ap;
        va_start(ap, fmt);
        if (n > 0 && (size_t)n < sizeof err->msg)
            vsnprintf(err->msg + n, sizeof err->msg - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -EBADMSG;
}

/* Row i's id and floats out of buf (unaligned, little-endian). */
static uint64_t row_at(const uint8_t *rows, uint64_t i, uint32_t width, float *out)
{
    const uint8_t *p = rows + i * (8 + 4 * (uint64_t)width);
    for (uint32_t c = 0; c < width; c++) {
        uint32_t u = get_le32(p + 8 + 4 * c);
        memcpy(&out[c], &u, 4);
    }
    return get_le64(p);
}

int train_state_parse(const void *buf, size_t len, const train_state_header_t *expect,
                      train_state_header_t *out, train_state_visit_fn fn, void *ctx,
                      train_state_error_t *err)
{
    const uint8_t *b = buf;
    if (len < TRAIN_STATE_HEADER_BYTES + TRAILER_BYTES)
        return bad(err, len, "the file ends inside its header (%zu bytes, at least %u)", len,
                   TRAIN_STATE_HEADER_BYTES + TRAILER_BYTES);
    if (memcmp(b, TRAIN_STATE_MAGIC, 8) != 0)
        return bad(err, 0, "not a trainer state file (magic)");
    uint32_t format = get_le32(b + 8);
    if (format != TRAIN_STATE_FORMAT)
        return bad(err, 8, "format %u, this build reads %u", format, TRAIN_STATE_FORMAT);
    if (XXH3_64bits(b, len - TRAILER_BYTES) != get_le64(b + len - TRAILER_BYTES))
        return bad(err, len - TRAILER_BYTES, "checksum mismatch (a torn or corrupt file)");
    train_state_header_t h = {
        .kind = get_le32(b + 12),
        .optimizer = get_le32(b + 16),
        .width = get_le32(b + 20),
        .count = get_le64(b + 24),
        .version = get_le64(b + 32),
    };
    if (h.width == 0 || h.width > STORE_MAX_VALUE_FLOATS)
        return bad(err, 20, "width %u outside 1..%u", h.width, STORE_MAX_VALUE_FLOATS);
    const uint64_t row_bytes = 8 + 4 * (uint64_t)h.width;
    const uint64_t body = len - TRAIN_STATE_HEADER_BYTES - TRAILER_BYTES;
    if (body % row_bytes != 0 || body / row_bytes != h.count)
        return bad(err, 24, "count %llu rows of %llu bytes do not fill the %llu bytes between "
                   "header and trailer", (unsigned long long)h.count,
                   (unsigned long long)row_bytes, (unsigned long long)body);
    if (expect) {
        if (h.kind != expect->kind)
            return bad(err, 12, "kind %u, the trainer's is %u", h.kind, expect->kind);
        if (h.optimizer != expect->optimizer)
            return bad(err, 16, "optimizer %u, the trainer's is %u", h.optimizer,
                       expect->optimizer);
        if (h.width != expect->width)
            return bad(err, 20, "width %u, the trainer's rows have %u floats", h.width,
                       expect->width);
        if (h.version != expect->version)
            return bad(err, 32, "version %llu, expected %llu", (unsigned long long)h.version,
                       (unsigned long long)expect->version);
    }
    const uint8_t *rows = b + TRAIN_STATE_HEADER_BYTES;
    float row[STORE_MAX_VALUE_FLOATS];
    for (uint64_t i = 0; i < h.count; i++) {
        (void)row_at(rows, i, h.width, row);
        for (uint32_t c = 0; c < h.width; c++)
            if (!isfinite(row[c]))
                return bad(err, TRAIN_STATE_HEADER_BYTES + (size_t)(i * row_bytes) + 8 + 4 * c,
                           "row %llu: float %u is not finite", (unsigned long long)i, c);
    }
    if (out)
        *out = h;
    for (uint64_t i = 0; fn && i < h.count; i++) {
        uint64_t id = row_at(rows, i, h.width, row);
        int rc = fn(ctx, id, row);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int put_one(void *ctx, uint64_t id, const float *row)
{
    return train_state_put(ctx, &id, 1, row);
}

int train_state_load(train_t *t, const char *path, uint64_t version, bool apply,
                     train_state_error_t *err)
{
    if (err)
        err->msg[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (err)
            snprintf(err->msg, sizeof err->msg, "cannot open: %s", strerror(e));
        return -e;
    }
    struct stat st;
    int rc = 0;
    uint8_t *buf = NULL;
    size_t len = 0;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
    } else if (st.st_size < (off_t)(TRAIN_STATE_HEADER_BYTES + TRAILER_BYTES)) {
        rc = bad(err, (size_t)st.st_size, "the file ends inside its header (%lld bytes)",
                 (long long)st.st_size);
    } else if ((uint64_t)st.st_size > SIZE_MAX / 2 || !(buf = malloc((size_t)st.st_size))) {
        rc = -ENOMEM;
    }
    /* read, not mmap: a file cut short meanwhile is a short read, not a SIGBUS */
    while (rc == 0 && len < (size_t)st.st_size) {
        ssize_t k = read(fd, buf + len, (size_t)st.st_size - len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            rc = -errno;
        else if (k == 0)
            break; /* shorter than fstat said: the parser finds what is wrong */
        else
            len += (size_t)k;
    }
    close(fd);
    if (rc == 0) {
        train_state_header_t want;
        train_state_header_of(t, &want);
        want.version = version;
        rc = train_state_parse(buf, len, &want, NULL, apply ? put_one : NULL, t, err);
        if (rc != 0 && rc != -EBADMSG && err)
            snprintf(err->msg, sizeof err->msg, "putting its rows: %s", strerror(-rc));
    } else if (rc != -EBADMSG && err) {
        snprintf(err->msg, sizeof err->msg, "cannot read: %s", strerror(-rc));
    }
    free(buf);
    return rc;
}
