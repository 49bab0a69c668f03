/*
 * sample_log.h — the local sample log: training samples appended to disk
 * before they are acknowledged, so that a restart replays what the last
 * exported delta does not cover (issue 17, "Nothing lost").
 *
 * MODEL.  A log is a directory of segment files `<first position, 20
 * digits>.slog`.  A POSITION is the index of a record from the start of the
 * log (u64, never reused, contiguous across segments): a delta records "covers
 * records < P" and a restart reads from P.  One RECORD is one page view's
 * training samples: a shared feature block and 1..CODEC_MAX_ITEMS samples of
 * (label, weight, item block), the shape of a TRAIN frame (codec_train_t)
 * plus a weight per sample.
 *
 * DURABILITY.  sample_log_append writes a batch of records with one write()
 * into the page cache; when it returns, a kill -9 of the process loses none
 * of them, so the caller acknowledges after it returns, never before.
 * Against power loss, the sync policy:
 *   NEVER         the log never calls fdatasync (tests, throwaway logs);
 *   EVERY_APPEND  fdatasync before append returns: nothing acknowledged is
 *                 ever lost, at one disk flush per batch (batch the acks);
 *   INTERVAL      (default) the caller calls sample_log_sync_if_due() from
 *                 its loop; the log flushes at most every sync_interval_ms
 *                 (default 1000) and on roll and close.
 * INTERVAL is the default because the process crash (kill -9, OOM, a bug) is
 * the failure the server must survive without loss, and it costs nothing
 * there; a machine's power loss also loses the trainer's in-memory updates
 * since the last delta, and bounding the loss of acknowledged samples to one
 * second is the JetStream-style trade (its default sync is slower still) that
 * keeps a flush off every acknowledgement.
 *
 * OPENING scans the last segment.  A torn tail (the last record partial, or
 * failing its checksum with nothing after it, or zero bytes to the end of the
 * file: what a kill -9 or a power cut mid-write leaves) is truncated away and
 * its size reported.  A bad record anywhere else, a gap in positions, or a
 * segment whose name does not match its first record is corruption: the open
 * is refused with a sentence naming the file and byte offset.  Acknowledged
 * data is never skipped in silence.
 *
 * ROLLS.  A segment past segment_bytes is followed by a new one.  Under
 * NEVER and EVERY_APPEND the append rolls at once (with EVERY_APPEND the
 * finished segment's fdatasync and the directory's fsync first).  Under
 * INTERVAL the append only opens <first>.slog.new and goes on there; the
 * caller's next flush (sample_log_sync*, at once, not at the interval)
 * commits the roll off the append path: fdatasync of the finished segment,
 * the rename to <first>.slog, fsync of the directory.  Until then the new
 * segment grows past segment_bytes rather than rolling again.  So a final
 * name always follows a durable segment, and open reads a pending one
 * accordingly: right after the segments before it (a kill -9: the page
 * cache kept everything) it is committed; past a gap (a power cut took the
 * finished segment's unflushed tail, which the interval allows) it is set
 * aside as <first>.slog.orphan, its bytes counted as cut (torn_bytes).  Readers read
 * pending segments as any other.
 *
 * THREAD SAFETY.  A sample_log_t (the writer) belongs to one thread at a
 * time: append, sync, trim and close must be serialized by the caller.  One
 * writer per directory (flock; a second open gets -EBUSY).  Readers are
 * independent handles, in any thread or process, and may run while the
 * writer appends: a reader sees every record that was complete when it
 * looked and reports the end otherwise (call next again later).
 *
 * ERRORS.  Functions return 0 (or a count) on success, -errno for system
 * failures, and for refused input or a corrupt log a negative errno with
 * *err filled (code and one sentence naming the file and offset or the
 * record and field): -EINVAL (SAMPLE_LOG_E_RECORD, a record the codec
 * refuses), -E2BIG (SAMPLE_LOG_E_TOO_LARGE, over CODEC_MAX_ITEMS samples,
 * CODEC_MAX_REQUEST_FEATURES features or CODEC_MAX_PAYLOAD bytes), -EBADMSG
 * (SAMPLE_LOG_E_CORRUPT), -ERANGE (SAMPLE_LOG_E_POSITION: a reader's start
 * before the first kept record or after the end).  err may be NULL.
 */
#ifndef TL_SERVER_SAMPLE_LOG_H
#define TL_SERVER_SAMPLE_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec/codec.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SAMPLE_LOG_SEGMENT_DEFAULT (64u << 20) /* bytes before a segment rolls */
#define SAMPLE_LOG_SEGMENT_MIN 4096u           /* smallest segment_bytes accepted */
#define SAMPLE_LOG_SYNC_INTERVAL_DEFAULT 1000u /* ms, SAMPLE_LOG_SYNC_INTERVAL */
#define SAMPLE_LOG_REC_HEADER 24u              /* bytes of a record before its payload */
#define SAMPLE_LOG_MARK_BYTES 40u                /* a record's mark: see sample_log_rec_t */
/* Largest record on disk: header, payload, one f32 weight per sample, a mark. */
#define SAMPLE_LOG_REC_MAX                                                                         \
    (SAMPLE_LOG_REC_HEADER + CODEC_MAX_PAYLOAD + 4u * CODEC_MAX_ITEMS + SAMPLE_LOG_MARK_BYTES)
#define SAMPLE_LOG_END 1 /* sample_log_next: no complete record after the last one read */

typedef enum sample_log_sync {
    SAMPLE_LOG_SYNC_INTERVAL = 0, /* default: the caller drives sample_log_sync_if_due */
    SAMPLE_LOG_SYNC_NEVER = 1,
    SAMPLE_LOG_SYNC_EVERY_APPEND = 2,
} sample_log_sync_t;

typedef enum sample_log_errc {
    SAMPLE_LOG_OK = 0,
    SAMPLE_LOG_E_RECORD = 1,   /* a record the codec refuses (names the field) */
    SAMPLE_LOG_E_TOO_LARGE = 2, /* over a limit of codec.h */
    SAMPLE_LOG_E_CORRUPT = 3,  /* a bad record or a gap on disk: file and offset */
    SAMPLE_LOG_E_POSITION = 4, /* a reader's start outside the kept records */
    SAMPLE_LOG_E_IO = 5,       /* a system call failed: names it and the file */
} sample_log_errc_t;

typedef struct sample_log_error {
    sample_log_errc_t code;
    char file[64];  /* segment file name ("" when none) */
    int64_t offset; /* byte offset in that file, -1 when not applicable */
    char msg[384];  /* one sentence: file, offset and what was wrong */
} sample_log_error_t;

/* One record: a TRAIN frame's content and a weight per sample.  On append
 * the blocks follow the codec's rules (ids ascending and unique, values
 * finite, labels 0 or 1); name is a model name as codec.h allows (the log
 * keeps it, so one log can serve several models). */
typedef struct sample_log_rec {
    codec_train_t train; /* name, samples, shared, labels, sample blocks */
    float *weights;      /* samples weights, finite and >= 0; NULL on append = all 1.0 */
    /* NULL, or SAMPLE_LOG_MARK_BYTES the log keeps with the record and does
     * not interpret: what the record's producer needs to know at a restart
     * about where the record came from, committed by the same append (the
     * --train-file feeder's progress, online_file.c).  On read: in the
     * arena, or NULL when the record has none. */
    const uint8_t *mark;
} sample_log_rec_t;

typedef struct sample_log_config {
    uint64_t segment_bytes;     /* 0 = SAMPLE_LOG_SEGMENT_DEFAULT; else >= SEGMENT_MIN */
    sample_log_sync_t sync;     /* SAMPLE_LOG_SYNC_INTERVAL when zero-initialized */
    uint32_t sync_interval_ms;  /* 0 = SAMPLE_LOG_SYNC_INTERVAL_DEFAULT */
} sample_log_config_t;

typedef struct sample_log sample_log_t;
typedef struct sample_log_reader sample_log_reader_t;

/* ---- the writer (one thread) --------------------------------------------- */

/* Opens (creating dir and an empty first segment when needed) the log in
 * dir for appending.  Recovers a torn tail of the last segment (truncated;
 * *torn_bytes, when not NULL, says how many bytes went, 0 when none;
 * a pending segment set aside past a gap counts there too: ROLLS) and
 * refuses corruption (-EBADMSG, *err names file and offset).  cfg may be
 * NULL (defaults).  Blocks on disk I/O (reads the last segment whole).  The
 * caller owns *out and closes it. */
int sample_log_open(const char *dir, const sample_log_config_t *cfg, sample_log_t **out,
                    uint64_t *torn_bytes, sample_log_error_t *err);

/* Flushes (unless the policy is NEVER) and frees log.  NULL is a no-op.
 * Returns the flush's error, the handle is freed either way. */
int sample_log_close(sample_log_t *log);

/* Appends recs[0..n) as positions next_pos.. next_pos + n - 1, with one
 * write() (the batch lives in one segment; a batch that does not fit what is
 * left of the current segment starts a new one, and a batch larger than
 * segment_bytes gets a segment of its own; a batch over 1 GiB is -E2BIG).
 * Every record is checked first: one refused record refuses the batch,
 * nothing is written, and *err
 * names the record's index.  On success *first_pos (may be NULL) is the
 * first record's position; the records survive a kill -9 from then on.  On a
 * failed write the file is cut back to where it was; if even that fails the
 * log refuses further appends (-EIO) until reopened.  Blocks on write()
 * (and fdatasync under EVERY_APPEND).  No allocation once the log's encode
 * buffer has grown to the largest batch seen. */
int sample_log_append(sample_log_t *log, const sample_log_rec_t *recs, size_t n,
                      uint64_t *first_pos, sample_log_error_t *err);

/* fdatasync of the current segment when something is unsynced (whatever the
 * policy).  Blocks on the disk. */
int sample_log_sync(sample_log_t *log);

/* Under SAMPLE_LOG_SYNC_INTERVAL: sample_log_sync when something is unsynced
 * and at least sync_interval_ms have passed since the last flush by
 * now_ms (the caller's monotonic clock in ms); else nothing.  Returns 1 when
 * it flushed, 0 when not due, -errno on failure. */
int sample_log_sync_if_due(sample_log_t *log, uint64_t now_ms);

/* sample_log_sync_if_due split in three for a caller whose appends run
 * under a lock that the disk must not hold up:
 *   sample_log_sync_begin, under that lock: 0 when nothing is due (no
 *     unsynced bytes, or sync_interval_ms not passed, and no roll pending),
 *     else 1 with *f filled (descriptors dup'ed) and the log counted as
 *     flushed;
 *   sample_log_sync_end(f), with the lock released: the disk work (the
 *     pending roll's commit, then the current segment's fdatasync); closes
 *     f's descriptors; 0 or -errno;
 *   sample_log_sync_done(log, f, rc), under the lock again: a committed roll
 *     lets the next one start; after a failure the next begin tries again.
 * Appends made meanwhile are flushed by the next due call.  A log has at
 * most one flush in flight (the caller's one thread runs all three). */
typedef struct sample_log_flush {
    int prev_fd;   /* the pending roll's finished segment (dup), -1: no roll */
    int dirfd;     /* the directory (dup), when a roll commits */
    int cur_fd;    /* the segment being written (dup), -1: nothing to flush */
    uint64_t roll_first; /* the pending segment's first position; 0: no roll (a
                          * pending segment never starts at 0) */
} sample_log_flush_t;
int sample_log_sync_begin(sample_log_t *log, uint64_t now_ms, sample_log_flush_t *f);
int sample_log_sync_end(sample_log_flush_t *f);
void sample_log_sync_done(sample_log_t *log, const sample_log_flush_t *f, int rc);

/* Deletes the segments whose records are all < before_pos (a delta covering
 * them was exported), never the segment being written.  Returns the number
 * of segments deleted or -errno.  Blocks on unlink. */
int sample_log_trim(sample_log_t *log, uint64_t before_pos);

/* The position the next appended record gets (= records ever appended). */
uint64_t sample_log_next_pos(const sample_log_t *log);

/* The position of the first record still kept (after trims). */
uint64_t sample_log_first_pos(const sample_log_t *log);

/* ---- readers (any thread or process, concurrent with the writer) -------- */

/* Opens a reader of the log in dir that starts at position from_pos: the
 * segment whose name is the largest <= from_pos (a binary search over the
 * sorted names), then a scan within it.  from_pos may equal the end (the
 * reader returns END until more is appended).  A reader follows the
 * writer into new segments by name; a segment trimmed under it stays
 * readable through its open fd, but reader_open racing a trim may get
 * -ENOENT.  -ERANGE
 * (SAMPLE_LOG_E_POSITION) when from_pos is before the first kept record or
 * after the end; -EBADMSG on a corrupt record on the way.  Blocks on disk
 * I/O.  The caller owns *out. */
int sample_log_reader_open(const char *dir, uint64_t from_pos, sample_log_reader_t **out,
                           sample_log_error_t *err);

/* Reads the next record into *rec and its position into *pos (may be NULL).
 * Every array of *rec (blocks' ids and values, labels, sample blocks,
 * weights: always non-NULL after a read) is carved from arena, which must
 * hold codec_arena_bound(CODEC_MAX_PAYLOAD) + 4 * CODEC_MAX_ITEMS + 64 bytes
 * to read any record (sample_log_arena_bound); the caller resets it between
 * records it no longer needs.  Returns 0, SAMPLE_LOG_END when no complete
 * record follows (yet: a later call sees what was appended since),
 * -EBADMSG with *err on a bad record (checksum, position, a body the codec
 * refuses) that is not the tail being written, -ENOMEM when arena is too
 * small (the record is not consumed), or -errno.  Blocks on disk I/O. */
int sample_log_next(sample_log_reader_t *r, codec_arena_t *arena, sample_log_rec_t *rec,
                    uint64_t *pos, sample_log_error_t *err);

/* The position of the record the next sample_log_next returns. */
uint64_t sample_log_reader_pos(const sample_log_reader_t *r);

/* Frees r.  NULL is a no-op. */
void sample_log_reader_close(sample_log_reader_t *r);

/* Arena bytes that always suffice for sample_log_next. */
size_t sample_log_arena_bound(void);

/* ---- the record parser, over memory (fuzzing, tools) ---------------------- */

/* Parses the record at buf[0..len) expected at position want_pos
 * (UINT64_MAX: any) into *rec (arrays in arena) and *pos; *rec_len gets the
 * record's size on disk.  Returns 0; SAMPLE_LOG_END when buf holds only part
 * of a record (a partial header or body); -EBADMSG with *err (offset 0 =
 * the record's first byte) for a bad length, checksum, position or body;
 * -ENOMEM when arena is too small.  Pure, never blocks. */
int sample_log_parse(const uint8_t *buf, size_t len, uint64_t want_pos, codec_arena_t *arena,
                     sample_log_rec_t *rec, uint64_t *pos, size_t *rec_len,
                     sample_log_error_t *err);

#ifdef __cplusplus
}
#endif
#endif /* TL_SERVER_SAMPLE_LOG_H */
