/*
 * sample_log_read.c — the sample log's record parser (over memory, so the
 * fuzzer and the readers share it) and its readers (sample_log.h); the record
 * and segment layout is drawn atop sample_log.c.
 *
 * A reader never trusts a file size it saw earlier: it reads, and a short read
 * is the end of the log, unless the segment after the current one exists (a
 * finished segment is complete, so a short read there is corruption).  The
 * writer extends a file only after the bytes are in the page cache, so what a
 * read returns is what was written; a record failing its checksum at the very
 * end of the newest segment is a torn tail the next writer's open truncates,
 * and reads as the end.
 *
 * THREAD SAFETY: a reader is one thread's at a time; readers share nothing.
 */
#define _GNU_SOURCE
#include "sample_log_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

struct sample_log_reader {
    char dir[PATH_MAX];
    int dirfd;         /* the log's directory */
    int fd;            /* the segment being read */
    uint64_t seg;      /* its first position */
    uint64_t off;      /* byte offset of the next record in it */
    uint64_t pos;      /* position of the next record */
    uint8_t *buf;      /* one record */
    size_t buf_cap;
};

static void *arena_alloc(codec_arena_t *a, size_t n)
{
    size_t at = (a->used + 7) & ~(size_t)7;
    if (at > a->cap || a->cap - at < n)
        return NULL;
    a->used = at + n;
    return a->base + at;
}
/* ---- the record parser ------------------------------------------------------ */

size_t sample_log_arena_bound(void)
{
    return codec_arena_bound(CODEC_MAX_PAYLOAD) + 4u * CODEC_MAX_ITEMS + SAMPLE_LOG_MARK_BYTES +
           64;
}

int sample_log_parse(const uint8_t *buf, size_t len, uint64_t want_pos, codec_arena_t *arena,
                     sample_log_rec_t *rec, uint64_t *pos, size_t *rec_len,
                     sample_log_error_t *err)
{
    if (len < 16)
        return SAMPLE_LOG_END;
    uint32_t body_len = get32(buf);
    if (body_len < 8 || body_len > BODY_MAX)
        return sample_log__fail(err, -EBADMSG, SAMPLE_LOG_E_CORRUPT, NULL, 0,
                    "record length %u is outside 8..%u", body_len, (unsigned)BODY_MAX);
    if (len - 16 < body_len)
        return SAMPLE_LOG_END;
    uint32_t want = check_of(buf, body_len), got = get32(buf + 4);
    if (want != got)
        return sample_log__fail(err, -EBADMSG, SAMPLE_LOG_E_CORRUPT, NULL, 0,
                    "record checksum %08x does not match its bytes (%08x)", got, want);
    uint64_t p = get64(buf + 8);
    if (want_pos != UINT64_MAX && p != want_pos)
        return sample_log__fail(err, -EBADMSG, SAMPLE_LOG_E_CORRUPT, NULL, 0,
                    "record position %llu where %llu was due (a gap or a misplaced record)",
                    (unsigned long long)p, (unsigned long long)want_pos);
    uint32_t pay_len = get32(buf + 16), flags = get32(buf + 20);
    if (flags & ~(FLAG_WEIGHTS | FLAG_MARK))
        return sample_log__fail(err, -EBADMSG, SAMPLE_LOG_E_CORRUPT, NULL, 20,
                    "record flags %#x have undefined bits", flags);
    if (pay_len > body_len - 8)
        return sample_log__fail(err, -EBADMSG, SAMPLE_LOG_E_CORRUPT, NULL, 16,
                    "record payload length %u is over its body's %u bytes", pay_len,
                    body_len - 8);
    codec_error_t cerr = {0};
    int rc = codec_decode_train(buf + 24, pay_len, 0, arena, &rec->train, &cerr);
    if (rc == CODEC_E_INTERNAL)
        return -ENOMEM;
    if (rc)
        return sample_log__fail(err, -EBADMSG, SAMPLE_LOG_E_CORRUPT, NULL, 24 + (int64_t)cerr.offset,
                    "record body refused by the codec: %s", cerr.msg);
    uint32_t samples = rec->train.samples;
    size_t rest = body_len - 8 - pay_len;
    size_t wbytes = (flags & FLAG_WEIGHTS) ? 4 * (size_t)samples : 0;
    size_t mbytes = (flags & FLAG_MARK) ? SAMPLE_LOG_MARK_BYTES : 0;
    if (rest != wbytes + mbytes)
        return sample_log__fail(err, -EBADMSG, SAMPLE_LOG_E_CORRUPT, NULL, 24 + (int64_t)pay_len,
                    "record has %zu bytes after its payload where its flags want %zu", rest,
                    wbytes + mbytes);
    rec->mark = NULL;
    if (mbytes) {
        uint8_t *m = arena_alloc(arena, SAMPLE_LOG_MARK_BYTES);
        if (!m)
            return -ENOMEM;
        memcpy(m, buf + 24 + pay_len + wbytes, SAMPLE_LOG_MARK_BYTES);
        rec->mark = m;
    }
    float *w = arena_alloc(arena, 4 * (size_t)samples);
    if (!w)
        return -ENOMEM;
    const uint8_t *wp = buf + 24 + pay_len;
    for (uint32_t i = 0; i < samples; i++) {
        if (flags & FLAG_WEIGHTS) {
            uint32_t bits = get32(wp + 4 * (size_t)i);
            memcpy(&w[i], &bits, 4);
            if (!isfinite(w[i]) || w[i] < 0.0f)
                return sample_log__fail(err, -EBADMSG, SAMPLE_LOG_E_CORRUPT, NULL,
                            24 + (int64_t)pay_len + 4 * (int64_t)i,
                            "record sample[%u] weight is not finite and >= 0", i);
        } else {
            w[i] = 1.0f;
        }
    }
    rec->weights = w;
    if (pos)
        *pos = p;
    *rec_len = 16 + (size_t)body_len;
    return 0;
}

/* ---- readers ---------------------------------------------------------------- */

static int reader_switch(sample_log_reader_t *r, uint64_t first)
{
    int fd = sample_log__open_segment_ro(r->dirfd, first); /* final or pending */
    if (fd < 0)
        return fd;
    if (r->fd >= 0)
        close(r->fd);
    r->fd = fd;
    r->seg = first;
    r->off = 0;
    return 0;
}

/* 1 when the segment after the current one exists, final or pending (so
 * the current one is complete: the writer rolled past it). */
static int next_segment_exists(const sample_log_reader_t *r)
{
    return r->pos != r->seg && sample_log__segment_exists(r->dirfd, r->pos) == 1;
}

static int reader_corrupt(const sample_log_reader_t *r, sample_log_error_t *err, const char *why)
{
    char name[SEG_NAME_LEN + 1];
    seg_name(name, r->seg);
    return sample_log__fail(err, -EBADMSG, SAMPLE_LOG_E_CORRUPT, name, (int64_t)r->off,
                "%s/%s is corrupt at byte offset %llu: %s", r->dir, name,
                (unsigned long long)r->off, why);
}

/* 1 when the current segment is zero from r->off to its end, 0 if not,
 * -errno. */
static int zero_to_end(sample_log_reader_t *r)
{
    uint8_t tmp[4096];
    for (uint64_t off = r->off;;) {
        ssize_t k = sample_log__pread_full(r->fd, tmp, sizeof tmp, off);
        if (k <= 0)
            return k < 0 ? (int)k : 1;
        for (ssize_t i = 0; i < k; i++)
            if (tmp[i])
                return 0;
        off += (uint64_t)k;
    }
}

/* Reads the record at r->off into r->buf: 0 and *len, END, or -errno. */
static int reader_fetch(sample_log_reader_t *r, size_t *len, sample_log_error_t *err)
{
    for (;;) {
        uint8_t h[16];
        ssize_t k = sample_log__pread_full(r->fd, h, 16, r->off);
        if (k < 0)
            return (int)k;
        if (k == 0 && next_segment_exists(r)) {
            int rc = reader_switch(r, r->pos);
            if (rc)
                return rc;
            continue;
        }
        size_t need = 16;
        if (k == 16) {
            uint32_t body_len = get32(h);
            if (body_len < 8 || body_len > BODY_MAX)
                return !next_segment_exists(r) && zero_to_end(r) == 1
                           ? SAMPLE_LOG_END /* a power cut's zero pages: open cuts them */
                           : reader_corrupt(r, err, "a record length out of range");
            need = 16 + (size_t)body_len;
            int rc = sample_log__grow(&r->buf, &r->buf_cap, need);
            if (rc)
                return rc;
            k = sample_log__pread_full(r->fd, r->buf, need, r->off);
            if (k < 0)
                return (int)k;
        }
        if ((size_t)k < need)
            return next_segment_exists(r) ? reader_corrupt(r, err, "a partial record")
                                          : SAMPLE_LOG_END;
        *len = need;
        return 0;
    }
}

int sample_log_next(sample_log_reader_t *r, codec_arena_t *arena, sample_log_rec_t *rec,
                    uint64_t *pos, sample_log_error_t *err)
{
    size_t len = 0, rec_len = 0;
    int rc = reader_fetch(r, &len, err);
    if (rc)
        return rc;
    sample_log_error_t perr;
    rc = sample_log_parse(r->buf, len, r->pos, arena, rec, pos, &rec_len, &perr);
    if (rc == -EBADMSG) {
        /* A newest record failing its checksum is the torn tail the next
         * writer's open truncates: the end, as it will be. */
        struct stat st;
        if (strstr(perr.msg, "checksum") && !next_segment_exists(r) && fstat(r->fd, &st) == 0 &&
            r->off + len == (uint64_t)st.st_size)
            return SAMPLE_LOG_END;
        return reader_corrupt(r, err, perr.msg);
    }
    if (rc)
        return rc;
    r->off += rec_len;
    r->pos++;
    return 0;
}

int sample_log_reader_open(const char *dir, uint64_t from_pos, sample_log_reader_t **out,
                           sample_log_error_t *err)
{
    if (strlen(dir) >= PATH_MAX - SEG_NAME_LEN - 2)
        return sample_log__fail(err, -ENAMETOOLONG, SAMPLE_LOG_E_IO, NULL, -1, "sample log dir too long");
    uint64_t *segs = NULL;
    size_t n = 0;
    int rc = sample_log__list_segments(dir, &segs, &n, NULL, NULL);
    if (rc)
        return sample_log__fail(err, rc, SAMPLE_LOG_E_IO, NULL, -1, "%s: listing: %s", dir, strerror(-rc));
    sample_log_reader_t *r = calloc(1, sizeof *r);
    if (!r) {
        free(segs);
        return -ENOMEM;
    }
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    r->fd = -1;
    r->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (r->dirfd < 0) {
        rc = sample_log__fail(err, -errno, SAMPLE_LOG_E_IO, NULL, -1, "%s: open: %s", dir,
                              strerror(errno));
        goto out;
    }
    if (n == 0 || from_pos < segs[0]) {
        rc = sample_log__fail(err, -ERANGE, SAMPLE_LOG_E_POSITION, NULL, -1,
                  "%s: position %llu is before the first kept record (%llu)", dir,
                  (unsigned long long)from_pos, n ? (unsigned long long)segs[0] : 0ull);
        goto out;
    }
    size_t lo = 0, hi = n; /* the last segment whose first position is <= from_pos */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (segs[mid] <= from_pos)
            lo = mid;
        else
            hi = mid;
    }
    if ((rc = reader_switch(r, segs[lo]))) {
        sample_log__fail(err, rc, SAMPLE_LOG_E_IO, NULL, -1, "%s: opening a segment: %s", dir,
             strerror(-rc));
        goto out;
    }
    r->pos = segs[lo];
    struct stat st;
    if (fstat(r->fd, &st) < 0) {
        rc = -errno;
        goto out;
    }
    while (r->pos < from_pos) { /* skip by headers: the checksums are next's job */
        uint8_t h[16];
        ssize_t k = sample_log__pread_full(r->fd, h, 16, r->off);
        if (k < 0) {
            rc = (int)k;
            goto out;
        }
        if (k < 16 || r->off + 16 + get32(h) > (uint64_t)st.st_size) {
            rc = sample_log__fail(err, -ERANGE, SAMPLE_LOG_E_POSITION, NULL, -1,
                      "%s: position %llu is after the end (%llu)", dir,
                      (unsigned long long)from_pos, (unsigned long long)r->pos);
            goto out;
        }
        uint32_t body_len = get32(h);
        if (body_len < 8 || body_len > BODY_MAX || get64(h + 8) != r->pos) {
            rc = reader_corrupt(r, err, "a bad record length or position while seeking");
            goto out;
        }
        r->off += 16 + (uint64_t)body_len;
        r->pos++;
    }
out:
    free(segs);
    if (rc) {
        sample_log_reader_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

uint64_t sample_log_reader_pos(const sample_log_reader_t *r)
{
    return r->pos;
}

void sample_log_reader_close(sample_log_reader_t *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    if (r->dirfd >= 0)
        close(r->dirfd);
    free(r->buf);
    free(r);
}

