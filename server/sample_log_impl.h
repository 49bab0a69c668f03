/*
 * sample_log_impl.h — private to server/sample_log*.c: the record layout's
 * constants, the byte helpers and the file helpers that the writer
 * (sample_log.c) and the reader (sample_log_read.c) share.  Not a public
 * header: the trainer includes sample_log.h only.
 */
#ifndef TL_SERVER_SAMPLE_LOG_IMPL_H
#define TL_SERVER_SAMPLE_LOG_IMPL_H

#include "sample_log.h"

#include <endian.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <xxhash.h>

#define SEG_NAME_LEN 25                    /* 20 digits + ".slog" */
#define SEG_PENDING_SUFFIX ".new"          /* a segment whose roll is not committed */
#define SEG_ORPHAN_SUFFIX ".orphan"        /* set aside at open: past a gap */
#define SEG_PATH_MAX (SEG_NAME_LEN + 8)    /* a name with either suffix, and its NUL */
#define BATCH_MAX ((size_t)1 << 30)        /* bytes of one append's batch */
#define BODY_MAX (SAMPLE_LOG_REC_MAX - 16u) /* largest body_len */
#define FLAG_WEIGHTS 0x1u
#define FLAG_MARK 0x2u /* the record's mark follows its weights */

/* Fills *err (may be NULL) and returns rc. */
int sample_log__fail(sample_log_error_t *err, int rc, sample_log_errc_t code, const char *file,
                     int64_t offset, const char *fmt, ...)
    __attribute__((cold, format(printf, 6, 7)));

/* The segments of dir, first positions ascending, into a malloc'ed *out
 * (caller frees), pending ones (<first>.slog.new: a roll not yet committed,
 * sample_log.h ROLLS) among them; *cap (may be NULL) gets its capacity in
 * entries, *npending (may be NULL) how many were pending. */
int sample_log__list_segments(const char *dir, uint64_t **out, size_t *n, size_t *cap,
                              size_t *npending);

/* Opens segment first of dir read-only by either name (final or pending: a
 * commit renames it between the two tries, so final is tried again): an fd
 * or -errno.  sample_log__segment_exists: 1 when either name exists. */
int sample_log__open_segment_ro(int dirfd, uint64_t first);
int sample_log__segment_exists(int dirfd, uint64_t first);

/* The writer (sample_log.c; the roll's commit and the pending segment at
 * open: sample_log_roll.c). */
struct sample_log {
    char dir[PATH_MAX];
    int dirfd;               /* the directory, flock'ed: one writer */
    int fd;                  /* the segment being written */
    int prev_fd;             /* a roll not committed: the finished segment, -1 none */
    uint64_t *segs;          /* first positions of the segments, ascending */
    size_t nsegs, segs_cap;  /* segs[nsegs - 1] is the segment being written */
    uint64_t seg_size;       /* bytes in the segment being written */
    uint64_t next_pos;       /* position of the next record appended */
    sample_log_config_t cfg; /* defaults filled in */
    uint8_t *buf;            /* encode buffer of one batch */
    size_t buf_cap;
    bool dirty;              /* written since the last fdatasync */
    bool prev_dirty;         /* the finished segment of the pending roll needs its fdatasync */
    bool roll_pending;       /* the segment being written is named <first>.slog.new */
    bool broken;             /* a failed write could not be cut back */
    uint64_t last_sync_ms;   /* sample_log_sync_if_due's clock */
};

/* Checks segs[from..to) as open does (records, positions, contiguity with
 * log->next_pos when from > 0) and recovers the torn tail of segs[to - 1],
 * adding the bytes cut to *torn; sets next_pos and seg_size from it. */
int sample_log__recover(sample_log_t *log, size_t from, size_t to, uint64_t *torn,
                        sample_log_error_t *err);

/* Makes room for one more entry in log->segs: 0 or -ENOMEM. */
int sample_log__segs_room(sample_log_t *log);

/* The roll under SAMPLE_LOG_SYNC_INTERVAL: starts <next_pos>.slog.new and
 * keeps the finished segment's fd for the commit.  No fsync. */
int sample_log__roll_pending(sample_log_t *log, sample_log_error_t *err);

/* Commits a pending roll in the caller's thread (fdatasync of the finished
 * segment, the rename, fsync of the directory): 0 or -errno. */
int sample_log__commit_roll(sample_log_t *log);

/* At open, after the final segments were recovered: a pending segment
 * (segs[nsegs - 1], named .new) right after them is committed; one past a
 * gap (a power cut lost the finished segment's unflushed tail) is set aside
 * as <name>.orphan, its bytes added to *cut. */
int sample_log__recover_pending(sample_log_t *log, uint64_t *cut, sample_log_error_t *err);

/* pread of exactly n bytes unless the file ends: bytes read or -errno. */
ssize_t sample_log__pread_full(int fd, void *buf, size_t n, uint64_t off);

/* Grows *buf (realloc, doubling from 64 KiB) to at least need bytes: 0 or -ENOMEM. */
int sample_log__grow(uint8_t **buf, size_t *cap, size_t need);

/* inline defs */

static inline uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return le32toh(v);
}

static inline uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return le64toh(v);
}

static inline void put32(uint8_t *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, 4);
}

static inline void put64(uint8_t *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, 8);
}

static inline uint32_t check_of(const uint8_t *rec, uint32_t body_len)
{
    return (uint32_t)XXH3_64bits(rec + 8, 8 + (size_t)body_len);
}

static inline void seg_name(char out[SEG_NAME_LEN + 1], uint64_t first)
{
    snprintf(out, SEG_NAME_LEN + 1, "%020llu.slog", (unsigned long long)first);
}

/* The segment's name with a suffix (SEG_PENDING_SUFFIX, SEG_ORPHAN_SUFFIX). */
static inline void seg_name_suffixed(char out[SEG_PATH_MAX], uint64_t first, const char *suffix)
{
    snprintf(out, SEG_PATH_MAX, "%020llu.slog%s", (unsigned long long)first, suffix);
}

#endif /* TL_SERVER_SAMPLE_LOG_IMPL_H */
