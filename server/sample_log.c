/*
 * sample_log.c — the local sample log's writer (sample_log.h): segment files
 * of checksummed records, appended in batches, recovered on open, trimmed by
 * whole segments.  The parser and the readers are sample_log_read.c's.
 *
 * A RECORD on disk (little-endian), the body being a codec TRAIN payload so
 * that the codec's encoder validates what is written and its decoder checks
 * what is read:
 *
 *   0        4        8                16       20       24
 *   +--------+--------+----------------+--------+--------+-------------+----------------+
 *   |body_len| check  | position u64   |pay_len | flags  | TRAIN       | f32 weight x   |
 *   |  u32   |  u32   |                |  u32   |  u32   | payload     | samples (bit 0)|
 *   +--------+--------+----------------+--------+--------+-------------+----------------+
 *                     |<----------------- checked: low 32 bits of XXH3_64 ------------->|
 *
 *   body_len = bytes after offset 16 = 8 + pay_len + (flags bit 0 ? 4 * samples : 0)
 *              + (flags bit 1 ? SAMPLE_LOG_MARK_BYTES : 0);
 *   flags: bit 0 = weights follow (absent: every weight is 1.0), bit 1 = the
 *   record's mark follows the weights (sample_log_rec_t), other bits 0.
 * The checksum covers the position too, so a record copied to the wrong
 * place or a torn position fails it.  The encoder writes a whole TRAIN frame
 * (24-byte header + payload) at the record's start and the record header then
 * overwrites the frame header, so the payload is never copied.
 *
 * A SEGMENT is `<position of its first record, %020llu>.slog`; its records'
 * positions follow on from its name, and the next segment's name is the
 * position after its last record.  The newest may be `<...>.slog.new`, a
 * roll not yet committed (sample_log.h ROLLS, sample_log_roll.c).  A batch is written by one pwrite loop into
 * one segment: a torn write can only leave a prefix of the batch at the end
 * of the newest segment, which open truncates (sample_log.h, OPENING).
 *
 * OPEN checks every segment's records by length, checksum and position
 * (contiguity within and across segments), not by the codec's body rules:
 * those are the readers' (every record read is decoded anyway).
 *
 * THREAD SAFETY: sample_log_t is single-threaded (sample_log.h).
 */
#define _GNU_SOURCE
#include "sample_log_impl.h"

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- helpers ---------------------------------------------------------------- */

int sample_log__fail(sample_log_error_t *err, int rc, sample_log_errc_t code, const char *file,
                int64_t offset, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        snprintf(err->file, sizeof err->file, "%s", file ? file : "");
        err->offset = offset;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* 1 and *first when name is a segment's name, 2 when it is a pending
 * segment's (<first>.slog.new), else 0. */
static int seg_parse(const char *name, uint64_t *first)
{
    size_t len = strlen(name);
    int kind = len == SEG_NAME_LEN ? 1
             : len == SEG_NAME_LEN + strlen(SEG_PENDING_SUFFIX) &&
                       strcmp(name + SEG_NAME_LEN, SEG_PENDING_SUFFIX) == 0
                 ? 2
                 : 0;
    if (!kind || strncmp(name + 20, ".slog", 5) != 0)
        return 0;
    uint64_t v = 0;
    for (int i = 0; i < 20; i++) {
        if (name[i] < '0' || name[i] > '9')
            return 0;
        unsigned d = (unsigned)(name[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *first = v;
    return kind;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The segments of dir, ascending, into a malloc'ed *out (caller frees). */
int sample_log__list_segments(const char *dir, uint64_t **out, size_t *n, size_t *cap,
                              size_t *npending)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    uint64_t *a = NULL;
    size_t k = 0, c = 0, pending = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        uint64_t first;
        int kind = seg_parse(e->d_name, &first);
        if (!kind)
            continue;
        pending += kind == 2;
        if (k == c) {
            size_t nc = c ? 2 * c : 16;
            uint64_t *na = realloc(a, nc * sizeof *a);
            if (!na) {
                rc = -ENOMEM;
                goto out;
            }
            a = na;
            c = nc;
        }
        a[k++] = first;
    }
    if (k > 1)
        qsort(a, k, sizeof *a, cmp_u64);
out:
    closedir(d);
    if (rc) {
        free(a);
        return rc;
    }
    *out = a;
    *n = k;
    if (cap)
        *cap = c;
    if (npending)
        *npending = pending;
    return 0;
}

int sample_log__open_segment_ro(int dirfd, uint64_t first)
{
    char name[SEG_PATH_MAX];
    for (int attempt = 0; attempt < 3; attempt++) { /* final, pending, final */
        seg_name_suffixed(name, first, attempt == 1 ? SEG_PENDING_SUFFIX : "");
        int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
        if (fd >= 0 || errno != ENOENT)
            return fd >= 0 ? fd : -errno;
    }
    return -ENOENT;
}

int sample_log__segment_exists(int dirfd, uint64_t first)
{
    char name[SEG_PATH_MAX];
    for (int attempt = 0; attempt < 3; attempt++) {
        seg_name_suffixed(name, first, attempt == 1 ? SEG_PENDING_SUFFIX : "");
        if (faccessat(dirfd, name, F_OK, 0) == 0)
            return 1;
    }
    return 0;
}

int sample_log__segs_room(sample_log_t *log)
{
    if (log->nsegs < log->segs_cap)
        return 0;
    size_t nc = log->segs_cap ? 2 * log->segs_cap : 16;
    uint64_t *na = realloc(log->segs, nc * sizeof *na);
    if (!na)
        return -ENOMEM;
    log->segs = na;
    log->segs_cap = nc;
    return 0;
}

/* pread of exactly n bytes unless the file ends: returns bytes read or -errno. */
ssize_t sample_log__pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (uint8_t *)buf + got, n - got, (off_t)(off + got));
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (k == 0)
            break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

int sample_log__grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 64 * 1024;
    while (nc < need)
        nc *= 2;
    uint8_t *nb = realloc(*buf, nc);
    if (!nb)
        return -ENOMEM;
    *buf = nb;
    *cap = nc;
    return 0;
}

/* ---- scanning a segment at open ------------------------------------------- */

enum scan_end { SCAN_CLEAN, SCAN_TORN, SCAN_BAD };

struct scan {
    enum scan_end end;
    bool bad_check;    /* SCAN_BAD by a checksum (a torn write if nothing follows) */
    uint64_t good;     /* bytes of whole good records */
    uint64_t next;     /* position after the last good record */
    uint64_t size;     /* file size */
    char why[160];     /* SCAN_BAD/TORN: what was wrong at offset good */
};

/* 1 when the file is zero from off to its end. */
static int zero_tail(int fd, uint64_t off, uint64_t size, uint8_t *tmp, size_t tmp_cap)
{
    while (off < size) {
        size_t n = size - off < tmp_cap ? (size_t)(size - off) : tmp_cap;
        ssize_t k = sample_log__pread_full(fd, tmp, n, off);
        if (k <= 0)
            return k < 0 ? (int)k : 0;
        for (ssize_t i = 0; i < k; i++)
            if (tmp[i])
                return 0;
        off += (uint64_t)k;
    }
    return 1;
}

/* Walks the records of fd from first, checking length, extent, checksum and
 * position (not the body's codec rules: readers check those).  Uses *buf. */
static int scan_segment(int fd, uint64_t first, uint8_t **buf, size_t *cap, struct scan *s)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    s->size = (uint64_t)st.st_size;
    s->good = 0;
    s->next = first;
    s->end = SCAN_CLEAN;
    s->bad_check = false;
    int rc;
    if ((rc = sample_log__grow(buf, cap, 4096)))
        return rc;
    while (s->good < s->size) {
        uint64_t left = s->size - s->good;
        uint8_t h[16];
        if (left < 16) {
            s->end = SCAN_TORN;
            snprintf(s->why, sizeof s->why, "a partial record header (%llu bytes)",
                     (unsigned long long)left);
            return 0;
        }
        ssize_t k = sample_log__pread_full(fd, h, 16, s->good);
        if (k < 16)
            return k < 0 ? (int)k : -EIO;
        uint32_t body_len = get32(h);
        if (body_len < 8 || body_len > BODY_MAX) {
            s->end = SCAN_BAD;
            snprintf(s->why, sizeof s->why, "record length %u is outside 8..%u", body_len,
                     (unsigned)BODY_MAX);
            return 0;
        }
        if (left - 16 < body_len) {
            s->end = SCAN_TORN;
            snprintf(s->why, sizeof s->why, "a partial record (%llu of %llu bytes)",
                     (unsigned long long)left, 16ull + body_len);
            return 0;
        }
        if ((rc = sample_log__grow(buf, cap, 16 + (size_t)body_len)))
            return rc;
        k = sample_log__pread_full(fd, *buf, 16 + (size_t)body_len, s->good);
        if (k < (ssize_t)(16 + (size_t)body_len))
            return k < 0 ? (int)k : -EIO;
        if (check_of(*buf, body_len) != get32(*buf + 4)) {
            s->end = SCAN_BAD;
            s->bad_check = true;
            snprintf(s->why, sizeof s->why, "record checksum does not match its bytes");
            return 0;
        }
        if (get64(*buf + 8) != s->next) {
            s->end = SCAN_BAD;
            snprintf(s->why, sizeof s->why, "record position %llu where %llu was due",
                     (unsigned long long)get64(*buf + 8), (unsigned long long)s->next);
            return 0;
        }
        s->good += 16 + (uint64_t)body_len;
        s->next++;
    }
    return 0;
}

/* ---- the writer ------------------------------------------------------------- */

static int open_segment(sample_log_t *log, uint64_t first, int flags)
{
    char name[SEG_NAME_LEN + 1];
    seg_name(name, first);
    int fd = openat(log->dirfd, name, O_WRONLY | O_CLOEXEC | flags, 0644);
    return fd < 0 ? -errno : fd;
}

/* Checks every segment and recovers the last one's torn tail. */
int sample_log__recover(sample_log_t *log, size_t from, size_t to, uint64_t *torn,
                        sample_log_error_t *err)
{
    char name[SEG_NAME_LEN + 1];
    struct scan s;
    for (size_t i = from; i < to; i++) {
        bool last = i + 1 == to;
        seg_name(name, log->segs[i]);
        int fd = openat(log->dirfd, name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return sample_log__fail(err, -errno, SAMPLE_LOG_E_IO, name, -1, "%s/%s: open: %s", log->dir,
                        name, strerror(errno));
        int rc = scan_segment(fd, log->segs[i], &log->buf, &log->buf_cap, &s);
        if (rc == 0 && s.end != SCAN_CLEAN && last) {
            /* The tail of the newest segment: torn when the bad record runs to
             * the end of the file or only zeros follow (a power cut's pages). */
            int z = zero_tail(fd, s.good, s.size, log->buf, log->buf_cap);
            bool to_end = false;
            if (s.end == SCAN_BAD && s.bad_check) {
                uint8_t h[4];
                if (sample_log__pread_full(fd, h, 4, s.good) == 4)
                    to_end = s.good + 16 + get32(h) == s.size;
            }
            if (z < 0)
                rc = z;
            else if (s.end == SCAN_TORN || z == 1 || to_end)
                s.end = SCAN_TORN;
        }
        close(fd);
        if (rc)
            return sample_log__fail(err, rc, SAMPLE_LOG_E_IO, name, -1, "%s/%s: read: %s", log->dir, name,
                        strerror(-rc));
        if (s.end == SCAN_BAD || (s.end == SCAN_TORN && !last))
            return sample_log__fail(err, -EBADMSG, SAMPLE_LOG_E_CORRUPT, name, (int64_t)s.good,
                        "%s/%s is corrupt at byte offset %llu: %s", log->dir, name,
                        (unsigned long long)s.good, s.why);
        if (i == from && from > 0 && log->segs[i] != log->next_pos)
            return sample_log__fail(err, -EBADMSG, SAMPLE_LOG_E_CORRUPT, name, 0,
                        "%s/%s: positions jump from %llu to %llu (a gap)", log->dir, name,
                        (unsigned long long)log->next_pos, (unsigned long long)log->segs[i]);
        if (!last && s.next != log->segs[i + 1]) {
            char next[SEG_NAME_LEN + 1];
            seg_name(next, log->segs[i + 1]);
            return sample_log__fail(err, -EBADMSG, SAMPLE_LOG_E_CORRUPT, next, 0,
                        "%s/%s: positions jump from %llu (end of %s) to %llu (a gap)", log->dir,
                        next, (unsigned long long)s.next, name,
                        (unsigned long long)log->segs[i + 1]);
        }
        if (last) {
            if (s.end == SCAN_TORN) {
                int wfd = open_segment(log, log->segs[i], 0);
                if (wfd < 0 || ftruncate(wfd, (off_t)s.good) < 0 || fsync(wfd) < 0) {
                    int e = wfd < 0 ? -wfd : errno;
                    if (wfd >= 0)
                        close(wfd);
                    return sample_log__fail(err, -e, SAMPLE_LOG_E_IO, name, (int64_t)s.good,
                                "%s/%s: truncating the torn tail at %llu: %s", log->dir, name,
                                (unsigned long long)s.good, strerror(e));
                }
                close(wfd);
            }
            *torn += s.size - s.good;
            log->seg_size = s.good;
            log->next_pos = s.next;
        }
    }
    return 0;
}

int sample_log_open(const char *dir, const sample_log_config_t *cfg, sample_log_t **out,
                    uint64_t *torn_bytes, sample_log_error_t *err)
{
    sample_log_config_t c = cfg ? *cfg : (sample_log_config_t){0};
    if (c.segment_bytes == 0)
        c.segment_bytes = SAMPLE_LOG_SEGMENT_DEFAULT;
    if (c.sync_interval_ms == 0)
        c.sync_interval_ms = SAMPLE_LOG_SYNC_INTERVAL_DEFAULT;
    if (c.segment_bytes < SAMPLE_LOG_SEGMENT_MIN || c.sync > SAMPLE_LOG_SYNC_EVERY_APPEND)
        return sample_log__fail(err, -EINVAL, SAMPLE_LOG_E_RECORD, NULL, -1,
                    "sample log config: segment_bytes under %u or an unknown sync policy",
                    SAMPLE_LOG_SEGMENT_MIN);
    if (strlen(dir) >= PATH_MAX - SEG_NAME_LEN - 2)
        return sample_log__fail(err, -ENAMETOOLONG, SAMPLE_LOG_E_IO, NULL, -1, "sample log dir too long");
    sample_log_t *log = calloc(1, sizeof *log);
    if (!log)
        return -ENOMEM;
    snprintf(log->dir, sizeof log->dir, "%s", dir);
    log->cfg = c;
    log->fd = -1;
    log->prev_fd = -1;
    log->dirfd = -1;
    uint64_t torn = 0;
    int rc;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        rc = sample_log__fail(err, -errno, SAMPLE_LOG_E_IO, NULL, -1, "%s: mkdir: %s", dir, strerror(errno));
        goto fail_out;
    }
    log->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (log->dirfd < 0) {
        rc = sample_log__fail(err, -errno, SAMPLE_LOG_E_IO, NULL, -1, "%s: open: %s", dir, strerror(errno));
        goto fail_out;
    }
    if (flock(log->dirfd, LOCK_EX | LOCK_NB) < 0) {
        rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
        sample_log__fail(err, rc, SAMPLE_LOG_E_IO, NULL, -1, "%s: another writer holds the log (%s)", dir,
             strerror(-rc));
        goto fail_out;
    }
    size_t npending = 0;
    if ((rc = sample_log__list_segments(dir, &log->segs, &log->nsegs, &log->segs_cap,
                                        &npending))) {
        sample_log__fail(err, rc, SAMPLE_LOG_E_IO, NULL, -1, "%s: listing: %s", dir, strerror(-rc));
        goto fail_out;
    }
    if (log->nsegs == 0) {
        free(log->segs);
        if (!(log->segs = malloc(16 * sizeof *log->segs))) {
            rc = -ENOMEM;
            goto fail_out;
        }
        log->segs_cap = 16;
        log->segs[log->nsegs++] = 0;
        if ((log->fd = open_segment(log, 0, O_CREAT | O_EXCL)) < 0 || fsync(log->dirfd) < 0) {
            rc = log->fd < 0 ? log->fd : -errno;
            sample_log__fail(err, rc, SAMPLE_LOG_E_IO, NULL, -1, "%s: creating the first segment: %s", dir,
                 strerror(-rc));
            goto fail_out;
        }
    } else {
        size_t n = log->nsegs;
        char pend[SEG_PATH_MAX];
        seg_name_suffixed(pend, log->segs[n - 1], SEG_PENDING_SUFFIX);
        if (npending > 0 && (npending > 1 || faccessat(log->dirfd, pend, F_OK, 0) != 0 ||
                             (n > 1 && log->segs[n - 2] == log->segs[n - 1]))) {
            rc = sample_log__fail(err, -EBADMSG, SAMPLE_LOG_E_CORRUPT, NULL, -1,
                      "%s: %zu segments named *.slog" SEG_PENDING_SUFFIX ", or one that is not "
                      "the newest: only the newest segment's roll can be pending", dir, npending);
            goto fail_out;
        }
        if ((rc = sample_log__recover(log, 0, n - npending, &torn, err)) ||
            (npending && (rc = sample_log__recover_pending(log, &torn, err))))
            goto fail_out;
        if ((log->fd = open_segment(log, log->segs[log->nsegs - 1], 0)) < 0) {
            rc = sample_log__fail(err, log->fd, SAMPLE_LOG_E_IO, NULL, -1, "%s: opening the last segment: %s",
                      dir, strerror(-log->fd));
            goto fail_out;
        }
    }
    if (torn_bytes)
        *torn_bytes = torn;
    *out = log;
    return 0;
fail_out:
    if (log->fd >= 0)
        close(log->fd);
    if (log->prev_fd >= 0)
        close(log->prev_fd);
    if (log->dirfd >= 0)
        close(log->dirfd);
    free(log->segs);
    free(log->buf);
    free(log);
    return rc;
}

int sample_log_sync(sample_log_t *log)
{
    int rc = log->roll_pending ? sample_log__commit_roll(log) : 0;
    if (rc || !log->dirty)
        return rc;
    if (fdatasync(log->fd) < 0)
        return -errno;
    log->dirty = false;
    return 0;
}

int sample_log_sync_if_due(sample_log_t *log, uint64_t now_ms)
{
    if (log->cfg.sync != SAMPLE_LOG_SYNC_INTERVAL ||
        (!log->roll_pending &&
         (!log->dirty || now_ms - log->last_sync_ms < log->cfg.sync_interval_ms)))
        return 0;
    int rc = sample_log_sync(log);
    if (rc)
        return rc;
    log->last_sync_ms = now_ms;
    return 1;
}

int sample_log_close(sample_log_t *log)
{
    if (!log)
        return 0;
    int rc = log->cfg.sync == SAMPLE_LOG_SYNC_NEVER && !log->roll_pending ? 0
                                                                          : sample_log_sync(log);
    if (log->prev_fd >= 0)
        close(log->prev_fd);
    close(log->fd);
    close(log->dirfd);
    free(log->segs);
    free(log->buf);
    free(log);
    return rc;
}

uint64_t sample_log_next_pos(const sample_log_t *log)
{
    return log->next_pos;
}

uint64_t sample_log_first_pos(const sample_log_t *log)
{
    return log->segs[0];
}

/* Encodes recs into log->buf; *total gets the batch's bytes. */
static int encode_batch(sample_log_t *log, const sample_log_rec_t *recs, size_t n, size_t *total,
                        sample_log_error_t *err)
{
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const sample_log_rec_t *r = &recs[i];
        codec_error_t cerr = {0};
        size_t flen = 0;
        int rc;
        /* the weights go after the payload (the record's flags), not in it */
        codec_train_t plain = r->train;
        plain.weights = NULL;
        for (;;) {
            rc = codec_encode_train(log->buf ? log->buf + off : NULL, log->buf_cap - off, 0,
                                    &plain, &flen, &cerr);
            if (rc != CODEC_NEED_MORE)
                break;
            size_t need = off + flen + 4 * (size_t)r->train.samples + SAMPLE_LOG_MARK_BYTES;
            if (need > BATCH_MAX)
                return sample_log__fail(err, -E2BIG, SAMPLE_LOG_E_TOO_LARGE, NULL, -1,
                            "sample log: batch of %zu records is over %zu bytes at record %zu", n,
                            BATCH_MAX, i);
            if ((rc = sample_log__grow(&log->buf, &log->buf_cap, need)))
                return rc;
        }
        if (rc == CODEC_E_TOO_MANY_ITEMS || rc == CODEC_E_TOO_MANY_FEATURES ||
            rc == CODEC_E_FRAME_TOO_LARGE)
            return sample_log__fail(err, -E2BIG, SAMPLE_LOG_E_TOO_LARGE, NULL, -1,
                        "sample log: record %zu is too large: %s", i, cerr.msg);
        if (rc)
            return sample_log__fail(err, -EINVAL, SAMPLE_LOG_E_RECORD, NULL, -1,
                        "sample log: record %zu refused: %s", i, cerr.msg);
        uint32_t samples = r->train.samples;
        size_t wbytes = r->weights ? 4 * (size_t)samples : 0;
        size_t mbytes = r->mark ? SAMPLE_LOG_MARK_BYTES : 0;
        if ((rc = sample_log__grow(&log->buf, &log->buf_cap, off + flen + wbytes + mbytes)))
            return rc;
        uint8_t *rec = log->buf + off;
        if (r->weights) {
            for (uint32_t k = 0; k < samples; k++) {
                float w = r->weights[k];
                if (!isfinite(w) || w < 0.0f)
                    return sample_log__fail(err, -EINVAL, SAMPLE_LOG_E_RECORD, NULL, -1,
                                "sample log: record %zu sample[%u] weight is not finite and >= 0",
                                i, k);
                uint32_t bits;
                memcpy(&bits, &w, 4);
                put32(rec + flen + 4 * (size_t)k, bits);
            }
        }
        if (r->mark)
            memcpy(rec + flen + wbytes, r->mark, SAMPLE_LOG_MARK_BYTES);
        uint32_t pay_len = (uint32_t)(flen - CODEC_HEADER_SIZE);
        uint32_t body_len = 8 + pay_len + (uint32_t)(wbytes + mbytes);
        put32(rec, body_len);
        put64(rec + 8, log->next_pos + i);
        put32(rec + 16, pay_len);
        put32(rec + 20, (r->weights ? FLAG_WEIGHTS : 0) | (r->mark ? FLAG_MARK : 0));
        put32(rec + 4, check_of(rec, body_len));
        off += 16 + (size_t)body_len;
    }
    *total = off;
    return 0;
}

/* Starts the segment <next_pos>.slog (the current one is complete). */
static int roll(sample_log_t *log, sample_log_error_t *err)
{
    bool sync = log->cfg.sync != SAMPLE_LOG_SYNC_NEVER;
    int rc;
    if (sync && (rc = sample_log_sync(log)))
        return sample_log__fail(err, rc, SAMPLE_LOG_E_IO, NULL, -1, "%s: fdatasync before roll: %s",
                    log->dir, strerror(-rc));
    if ((rc = sample_log__segs_room(log)))
        return rc;
    int fd = open_segment(log, log->next_pos, O_CREAT | O_EXCL);
    if (fd < 0 || (sync && fsync(log->dirfd) < 0)) {
        rc = fd < 0 ? fd : -errno;
        if (fd >= 0) {
            char name[SEG_NAME_LEN + 1];
            seg_name(name, log->next_pos);
            close(fd);
            unlinkat(log->dirfd, name, 0);
        }
        return sample_log__fail(err, rc, SAMPLE_LOG_E_IO, NULL, -1, "%s: starting a segment at %llu: %s",
                    log->dir, (unsigned long long)log->next_pos, strerror(-rc));
    }
    close(log->fd);
    log->fd = fd;
    log->segs[log->nsegs++] = log->next_pos;
    log->seg_size = 0;
    log->dirty = false;
    return 0;
}

int sample_log_append(sample_log_t *log, const sample_log_rec_t *recs, size_t n,
                      uint64_t *first_pos, sample_log_error_t *err)
{
    if (log->broken)
        return sample_log__fail(err, -EIO, SAMPLE_LOG_E_IO, NULL, -1,
                    "%s: a failed write could not be cut back; reopen the log", log->dir);
    if (n == 0 || !recs) {
        if (first_pos)
            *first_pos = log->next_pos;
        return n == 0 ? 0 : -EINVAL;
    }
    size_t total = 0;
    int rc = encode_batch(log, recs, n, &total, err);
    if (rc)
        return rc;
    if (log->seg_size > 0 && log->seg_size + total > log->cfg.segment_bytes) {
        /* Under INTERVAL the finished segment's fdatasync is the caller's
         * next flush (sample_log.h ROLLS); until it commits, this segment
         * grows past segment_bytes. */
        if (log->cfg.sync != SAMPLE_LOG_SYNC_INTERVAL)
            rc = roll(log, err);
        else if (!log->roll_pending)
            rc = sample_log__roll_pending(log, err);
        if (rc)
            return rc;
    }
    size_t done = 0;
    while (done < total) {
        ssize_t k = pwrite(log->fd, log->buf + done, total - done, (off_t)(log->seg_size + done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int e = k < 0 ? errno : EIO;
            if (ftruncate(log->fd, (off_t)log->seg_size) < 0)
                log->broken = true;
            return sample_log__fail(err, -e, SAMPLE_LOG_E_IO, NULL, -1, "%s: write: %s", log->dir,
                        strerror(e));
        }
        done += (size_t)k;
    }
    if (first_pos)
        *first_pos = log->next_pos;
    log->seg_size += total;
    log->next_pos += n;
    log->dirty = true;
    if (log->cfg.sync == SAMPLE_LOG_SYNC_EVERY_APPEND && (rc = sample_log_sync(log)))
        return sample_log__fail(err, rc, SAMPLE_LOG_E_IO, NULL, -1, "%s: fdatasync: %s", log->dir,
                    strerror(-rc));
    return 0;
}

int sample_log_trim(sample_log_t *log, uint64_t before_pos)
{
    size_t k = 0;
    /* Segment i holds positions segs[i] .. segs[i + 1] - 1. */
    while (k + 1 < log->nsegs && log->segs[k + 1] <= before_pos) {
        char name[SEG_NAME_LEN + 1];
        seg_name(name, log->segs[k]);
        if (unlinkat(log->dirfd, name, 0) < 0 && errno != ENOENT) {
            int e = errno;
            memmove(log->segs, log->segs + k, (log->nsegs - k) * sizeof *log->segs);
            log->nsegs -= k;
            return -e;
        }
        k++;
    }
    memmove(log->segs, log->segs + k, (log->nsegs - k) * sizeof *log->segs);
    log->nsegs -= k;
    return (int)k;
}
