/*
 * online_file.c — --train-file: files of samples learned by a model's online
 * trainer at start, through the very path a TRAIN frame takes, so the
 * trainer cannot tell the two apart.
 *
 * THE PATH
 *   One feeder thread (tl-trainfile), started by online_start, waits until
 *   the model (--train-file-model, or the only one served) is active, then
 *   reads each file of the comma-separated list in order with tltrain's
 *   reader (model/reader.h: the same ids tltrain gives the same lines) and
 *   gathers samples into a frame:
 *
 *     shared block: empty      one sample per line: its features sorted and
 *                              deduplicated (codec_sort_unique: the wire's
 *                              rule; a duplicate keeps its largest value),
 *                              its label, weight 1
 *
 *   A frame holds up to ONLINE_FILE_FRAME_SAMPLES samples (fewer under a
 *   small --online-max-samples-per-s: a quarter second's worth, so a frame
 *   can always pass the cap's bucket) and FRAME_FEATURES features.  It is
 *   encoded as a TRAIN (codec_encode_train: the decoder's checks) and
 *   handed to online__submit_file, which is online_submit's body: the
 *   model's kind check, the cap, the sample log, the queue.  A frame larger
 *   than half the queue (what online_submit refuses as TOO_BIG) or than
 *   CODEC_MAX_PAYLOAD is split in halves before it is submitted; a single
 *   sample that large stops its file.
 *
 * BACKPRESSURE, NEVER A DROP
 *   A full queue, the cap reached, a sample log that refused the append or
 *   the model not active make the feeder wait WAIT_MS and submit the same
 *   frame again, for as long as it takes: a file's samples are all learned,
 *   in file order.  These waits are not client refusals
 *   (tlserve_online_refused_total does not count them); they are counted in
 *   tlserve_online_file_waits_total.  The feeder shares the cap with the
 *   clients: while it reads, TRAIN and FEEDBACK find fewer tokens.
 *
 * ERRORS
 *   A line the reader refuses (its message names file:line and why), a
 *   sample too large for a frame, or a frame the trainer refuses for good
 *   (the model's kind) stops that file: ERROR in the log naming file:line,
 *   the samples before the line are submitted (they stay learned), the
 *   next file is read.  PREDICT never waits for any of this.  A file that
 *   cannot be opened fails the same way; a missing one was refused at start
 *   by the config check.
 *
 * RESTARTS resume each file where its learned samples end.  Every frame's
 * sample log record carries a MARK (sample_log_rec_t.mark, 40 bytes,
 * online_file_mark_t): the file's key (XXH3 of the path as listed, seeded
 * with its occurrence in the list), the bytes and lines read through the
 * frame's last sample, the XXH3 of those bytes, and the file's samples so
 * far.  The mark is in the record because the record is what a restart
 * learns again: committed by the same append, it can be neither ahead of
 * nor behind the samples (a file beside the log could be either after a
 * kill -9 between two writes).  At start, before it appends anything, the
 * feeder reads the log's kept records for the latest mark of each listed
 * file (find_marks), hashes the file's first mark.offset bytes and, when
 * they hash the same, seeks there (reader_seek): the replay learns the
 * logged frames again and the feeder goes on after them, so each line is
 * learned once.  A file appended to resumes at its old end; a head that
 * changed or a file that shrank is a WARN and a read from the start; a
 * file with no mark (listed anew) is read from the start.  A log that
 * cannot be read to its end, or a mark whose figures cannot be, is a WARN
 * and every file is read from the start.  The prefix hash is kept as the
 * file is read: at each frame the bytes since the last one are read again
 * (pread, page cache) into a streaming XXH3 (hash_to).  The log is
 * trimmed behind exports (and an attach), and may be absent: an online
 * export carries the marks of the records it covers, an attach sets them
 * aside in the log's directory (TRAINFILE_MARKS, online_file_marks.c), and
 * find_marks (online__file_marks_find) takes those files first, the log's
 * later marks winning.  With neither a log nor exports the files are read
 * from the start at every start.
 *
 * THREAD SAFETY
 *   online__file_start and online__file_stop run on main (online_start,
 *   online_stop); the feeder owns its frame; F.lock guards stop and the
 *   condition the feeder waits on; the counters are atomics, read by the
 *   admin thread (online__file_metrics).
 */
#define _GNU_SOURCE
#include "online_impl.h"
#include "online_file_format.h"

#include "log.h"
#include "model/model.h"
#include "model/reader.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define G online__G
#define FRAME_FEATURES (1u << 18) /* per frame, before deduplication: 3 MiB of ids and values */
#define WAIT_MS 5                 /* backpressure: the queue drains, the bucket refills */
#define MODEL_WAIT_MS 50          /* until the model is active */

_Static_assert(FRAME_FEATURES <= CODEC_MAX_REQUEST_FEATURES, "a frame's features fit a TRAIN");
_Static_assert(ONLINE_FILE_FRAME_SAMPLES <= CODEC_MAX_ITEMS, "a frame's samples fit a TRAIN");

static struct {
    pthread_mutex_t lock; /* stop and cond */
    pthread_cond_t cond;  /* the feeder's waits; signalled by online__file_stop */
    _Atomic bool stop;
    bool running;    /* main only: the thread exists */
    bool configured; /* --train-file set and started: the metrics are shown */
    pthread_t thread;
    char model[CODEC_MAX_NAME + 1];
    bool sniff;             /* --train-file-format auto */
    reader_format_t format; /* otherwise */
    _Atomic uint64_t samples, done, failed, reading, waits, skipped;
} F = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* The frame being gathered: the feeder's own. */
struct frame {
    uint64_t *ids;      /* FRAME_FEATURES */
    float *vals;        /* FRAME_FEATURES */
    uint32_t used;      /* features held */
    uint32_t n;         /* samples held */
    uint32_t max;       /* samples per frame */
    size_t max_payload; /* TRAIN payload bytes a frame may take */
    codec_block_t blk[ONLINE_FILE_FRAME_SAMPLES];
    float label[ONLINE_FILE_FRAME_SAMPLES];
    uint64_t line[ONLINE_FILE_FRAME_SAMPLES];
    uint64_t end_off[ONLINE_FILE_FRAME_SAMPLES]; /* the file's bytes read through the sample */
    uint8_t *buf;                                /* the encoded frame, grown (checked) */
    size_t cap;
};

static const char *format_name(reader_format_t f)
{
    return f == READER_LIBFFM ? "libffm" : f == READER_CRITEO ? "criteo" : "libsvm";
}

static bool stopping(void)
{
    return atomic_load_explicit(&F.stop, memory_order_acquire) ||
           atomic_load_explicit(&G.srv->stopping, memory_order_acquire);
}

/* Waits ms (less when stopped): true when the feeder is to stop. */
static bool pause_ms(unsigned ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000;
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
    pthread_mutex_lock(&F.lock);
    if (!atomic_load(&F.stop))
        pthread_cond_timedwait(&F.cond, &F.lock, &ts);
    pthread_mutex_unlock(&F.lock);
    return stopping();
}

/* ---- progress: the marks ---------------------------------------------------------- */

/* One file of the list as the feeder reads it: what its marks say. */
struct progress {
    uint64_t key;     /* the path's hash, seeded with its occurrence in the list */
    int fd;           /* the file again, for the prefix's hash (-1: none) */
    XXH3_state_t *xx; /* the hash of bytes [0, hashed) */
    uint64_t hashed;  /* bytes hashed */
    uint64_t samples; /* the file's samples submitted, from its start (resumed ones too) */
    /* the latest mark found in the sample log at start (found false: none) */
    bool found;
    uint64_t m_offset, m_line, m_prefix, m_samples, m_pos;
};

/* Hashes p's file up to byte `to` (p->hashed <= to): 0; -EIO when the file
 * ends before it (it shrank), else -errno. */
static int hash_to(struct progress *p, uint64_t to)
{
    static uint8_t chunk[1u << 16]; /* the feeder's only */
    while (p->hashed < to) {
        size_t want = to - p->hashed < sizeof chunk ? (size_t)(to - p->hashed) : sizeof chunk;
        ssize_t r = pread(p->fd, chunk, want, (off_t)p->hashed);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -EIO;
        XXH3_64bits_update(p->xx, chunk, (size_t)r);
        p->hashed += (uint64_t)r;
    }
    return 0;
}

/* The path's key: its occurrence-th appearance in the list (0 the first). */
static uint64_t path_key(const char *path, unsigned occurrence)
{
    return XXH3_64bits_withSeed(path, strlen(path), occurrence);
}

/* The latest mark of each file of ps (online__file_marks_find), taken as
 * where it resumes. */
static void find_marks(struct progress *ps, size_t n)
{
    uint64_t *keys = calloc(n ? n : 1, sizeof *keys);
    online_file_progress_t *got = calloc(n ? n : 1, sizeof *got);
    bool *found = calloc(n ? n : 1, sizeof *found);
    if (!keys || !got || !found) {
        LOG(LL_WARN, "online: --train-file: no memory to read the files' progress: every file "
                     "is read from the start as new data");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = ps[i].key;
    online__file_marks_find(F.model, keys, n, got, found);
    for (size_t i = 0; i < n; i++) {
        if (!found[i])
            continue;
        ps[i].found = true;
        ps[i].m_offset = got[i].m.offset;
        ps[i].m_line = got[i].m.line;
        ps[i].m_prefix = got[i].m.prefix;
        ps[i].m_samples = got[i].m.samples;
        ps[i].m_pos = got[i].pos;
    }
out:
    free(keys);
    free(got);
    free(found);
}

/* ---- submitting ------------------------------------------------------------------ */

/* Submits samples [first, first + count) of fr as TRAIN frames, split in
 * halves while a frame is too large, waiting for room as long as it takes.
 * 0; -ECANCELED when stopped; else -errno with why naming file:line. */
static int submit_range(struct frame *fr, struct progress *pg, uint32_t first, uint32_t count,
                        const char *path, char *why, size_t why_len)
{
    codec_train_t req = {.samples = count, .labels = fr->label + first, .sample = fr->blk + first};
    snprintf(req.name, sizeof req.name, "%s", F.model);
    codec_error_t err;
    size_t len = 0;
    int rc = codec_encode_train(NULL, 0, 0, &req, &len, &err);
    bool big = rc == CODEC_NEED_MORE && len - CODEC_HEADER_SIZE > fr->max_payload;
    if ((rc != CODEC_NEED_MORE && rc != CODEC_OK) || big) {
        if (count > 1) { /* split: attributes an error to its line too */
            uint32_t half = count / 2;
            rc = submit_range(fr, pg, first, half, path, why, why_len);
            return rc ? rc : submit_range(fr, pg, first + half, count - half, path, why, why_len);
        }
        if (big)
            snprintf(why, why_len,
                     "%s:%" PRIu64 ": a sample of %zu bytes, more than a frame may "
                     "take (%zu: half of --online-queue-bytes, at most the wire's payload)",
                     path, fr->line[first], len - CODEC_HEADER_SIZE, fr->max_payload);
        else
            snprintf(why, why_len, "%s:%" PRIu64 ": %s", path, fr->line[first], err.msg);
        return big ? -E2BIG : -EINVAL;
    }
    if (len > fr->cap) {
        uint8_t *b = realloc(fr->buf, len);
        if (!b) {
            snprintf(why, why_len, "%s:%" PRIu64 ": no memory for a frame of %zu bytes", path,
                     fr->line[first], len);
            return -ENOMEM;
        }
        fr->buf = b;
        fr->cap = len;
    }
    if (codec_encode_train(fr->buf, fr->cap, 0, &req, &len, &err) != CODEC_OK) {
        snprintf(why, why_len, "%s:%" PRIu64 ": %s", path, fr->line[first], err.msg);
        return -EINVAL;
    }
    uint16_t flags;
    memcpy(&flags, fr->buf + 6, 2);
    const uint8_t *payload = fr->buf + CODEC_HEADER_SIZE;
    uint32_t plen = (uint32_t)(len - CODEC_HEADER_SIZE);
    uint32_t last = first + count - 1;
    online_file_mark_t m = {.key = pg->key,
                            .offset = fr->end_off[last],
                            .line = fr->line[last],
                            .samples = pg->samples + count};
    uint8_t mark[SAMPLE_LOG_MARK_BYTES];
    if ((rc = hash_to(pg, m.offset)) != 0) {
        snprintf(why, why_len, "%s:%" PRIu64 ": the file cannot be read again for its hash: %s",
                 path, fr->line[first], rc == -EIO ? "it shrank while read" : strerror(-rc));
        return rc;
    }
    m.prefix = XXH3_64bits_digest(pg->xx);
    online__file_mark_encode(&m, mark);
    bool warned = false;
    for (;;) {
        if (stopping())
            return -ECANCELED;
        char msg[512];
        rc = online__submit_file(G.srv, &req, flags, payload, plen, mark, msg, sizeof msg);
        switch (rc) {
        case ONLINE_QUEUED:
            pg->samples += count;
            atomic_fetch_add_explicit(&F.samples, count, memory_order_relaxed);
            return 0;
        case ONLINE_FULL:
        case ONLINE_RATE:
        case ONLINE_NO_MODEL:
        case ONLINE_LOG:
            atomic_fetch_add_explicit(&F.waits, 1, memory_order_relaxed);
            if ((rc == ONLINE_NO_MODEL || rc == ONLINE_LOG) && !warned) {
                LOG(LL_WARN, "online: --train-file %s: waiting at line %" PRIu64 ": %s", path,
                    fr->line[first], msg);
                warned = true;
            }
            if (pause_ms(WAIT_MS))
                return -ECANCELED;
            continue;
        case ONLINE_TOO_BIG:
        case ONLINE_BAD_VALUE: /* halves: the lines before the bad one are learned, it is named */
            if (count > 1) {
                uint32_t half = count / 2;
                rc = submit_range(fr, pg, first, half, path, why, why_len);
                return rc ? rc
                          : submit_range(fr, pg, first + half, count - half, path, why, why_len);
            }
            if (rc == ONLINE_BAD_VALUE) {
                char qwhy[200];
                online_model_t *q = online__model_get(F.model, qwhy, sizeof qwhy);
                if (q)
                    atomic_fetch_add_explicit(&q->bad_values, 1, memory_order_relaxed);
            }
            /* fall through */
        default:
            snprintf(why, why_len, "%s:%" PRIu64 ": %s", path, fr->line[first], msg);
            return -EIO;
        }
    }
}

/* Submits the frame gathered and empties it: submit_range's result. */
static int flush(struct frame *fr, struct progress *pg, const char *path, char *why, size_t why_len)
{
    int rc = fr->n ? submit_range(fr, pg, 0, fr->n, path, why, why_len) : 0;
    fr->n = fr->used = 0;
    return rc;
}

/* ---- one file --------------------------------------------------------------------- */

/* Reads path to its end (or its first bad line, or the stop), submitting
 * every sample; logs the outcome and counts it. */
/* Resumes r after what pg's mark says was submitted when the file's first
 * mark.offset bytes still hash as they did; else reads from the start
 * (WARN).  Leaves pg's hash at the resume point.  0, or -errno of the seek
 * with why. */
static int resume(reader_t *r, struct progress *pg, const char *path, uint64_t *line, char *why,
                  size_t why_len)
{
    XXH3_64bits_reset(pg->xx);
    pg->hashed = pg->samples = 0;
    if (!pg->found)
        return 0;
    int rc = hash_to(pg, pg->m_offset);
    if (rc == 0 && XXH3_64bits_digest(pg->xx) == pg->m_prefix) {
        if ((rc = reader_seek(r, pg->m_offset, pg->m_line)) != 0) {
            snprintf(why, why_len, "%s: cannot seek to byte %" PRIu64 ": %s", path, pg->m_offset,
                     strerror(-rc));
            return rc;
        }
        pg->samples = pg->m_samples;
        *line = pg->m_line;
        atomic_fetch_add_explicit(&F.skipped, pg->m_samples, memory_order_relaxed);
        LOG(LL_INFO,
            "online: --train-file %s resumed at byte %" PRIu64 " (line %" PRIu64 "), %" PRIu64
            " samples already learned (sample log position %" PRIu64 ")",
            path, pg->m_offset, pg->m_line, pg->m_samples, pg->m_pos);
        return 0;
    }
    LOG(LL_WARN,
        "online: --train-file %s: %s since %" PRIu64 " samples of its first %" PRIu64
        " bytes were learned: read from the start as new data",
        path,
        rc == -EIO ? "the file is shorter"
        : rc != 0  ? "the file's head cannot be read again"
                   : "the file's head changed",
        pg->m_samples, pg->m_offset);
    XXH3_64bits_reset(pg->xx);
    pg->hashed = 0;
    return 0;
}

static void feed_file(struct frame *fr, struct progress *pg, const char *path)
{
    char why[1400] = "";
    uint64_t t0 = online__now_ns(), s0 = atomic_load(&F.samples), line = 0;
    reader_format_t fmt = F.format;
    reader_t *r = NULL;
    int rc = F.sniff ? online__file_sniff(path, &fmt, why, sizeof why) : 0;
    reader_options_t ro = {.format = fmt};
    if (rc == 0 && (pg->fd = reader_open_regular(path, why, sizeof why)) < 0)
        rc = pg->fd;
    if (rc == 0) { /* the reader reads its own descriptor of the same open file */
        int rfd = fcntl(pg->fd, F_DUPFD_CLOEXEC, 0);
        rc = rfd < 0 ? -errno : reader_open_fd(rfd, path, &ro, &r, why, sizeof why);
        if (rfd < 0)
            snprintf(why, sizeof why, "%s: %s", path, strerror(-rc));
    }
    if (rc == 0)
        rc = resume(r, pg, path, &line, why, sizeof why);
    if (rc != 0) {
        atomic_fetch_add_explicit(&F.failed, 1, memory_order_relaxed);
        LOG(LL_ERROR, "online: --train-file %s: %s; nothing more of it learned", path, why);
        reader_close(r);
        if (pg->fd >= 0)
            close(pg->fd);
        pg->fd = -1;
        return;
    }
    atomic_store(&F.reading, 1);
    fr->n = fr->used = 0;
    reader_sample_t s;
    int got;
    bool unfinished = false; /* the last line has no newline yet: not learned */
    uint64_t dup_lines = 0, dup_first = 0; /* lines that repeat a feature id */
    while ((got = reader_next(r, &s)) == 1) {
        line = reader_line(r);
        if (reader_line_unterminated(r)) {
            unfinished = true;
            break;
        }
        if (stopping()) {
            rc = -ECANCELED;
            break;
        }
        if (s.n > FRAME_FEATURES) {
            snprintf(why, sizeof why, "%s:%" PRIu64 ": %u features, more than a frame holds (%u)",
                     path, line, s.n, FRAME_FEATURES);
            rc = -E2BIG;
            break;
        }
        if (fr->n == fr->max || fr->used + s.n > FRAME_FEATURES) {
            if ((rc = flush(fr, pg, path, why, sizeof why)) != 0)
                break;
        }
        uint64_t *ids = fr->ids + fr->used;
        float *v = fr->vals + fr->used;
        memcpy(ids, s.ids, (size_t)s.n * sizeof *ids);
        if (s.values)
            memcpy(v, s.values, (size_t)s.n * sizeof *v);
        else
            for (uint32_t i = 0; i < s.n; i++)
                v[i] = 1.0f;
        uint32_t n = codec_sort_unique(ids, v, s.n);
        if (n < s.n && dup_lines++ == 0)
            dup_first = line;
        if (n > CODEC_MAX_BLOCK_FEATURES) {
            snprintf(why, sizeof why,
                     "%s:%" PRIu64 ": %u distinct features, more than a TRAIN "
                     "sample carries (%u)",
                     path, line, n, CODEC_MAX_BLOCK_FEATURES);
            rc = -E2BIG;
            break;
        }
        fr->blk[fr->n] = (codec_block_t){ids, v, n};
        fr->label[fr->n] = s.label;
        fr->line[fr->n] = line;
        fr->end_off[fr->n] = reader_offset(r);
        fr->n++;
        fr->used += n;
    }
    if (got < 0 && rc == 0 && reader_line_unterminated(r)) {
        line = reader_line(r);
        unfinished = true;
    } else if (got < 0 && rc == 0) {
        snprintf(why, sizeof why, "%s", reader_error(r));
        rc = got;
    }
    if (dup_lines)
        LOG(LL_WARN,
            "online: --train-file %s: %" PRIu64 " lines repeat a feature (the first: line %" PRIu64
            "): each kept one value of it, the largest, as the wire does, where tltrain learns "
            "every copy",
            path, dup_lines, dup_first);
    if (unfinished) /* a writer may be mid-line: a restart reads it again, whole by then */
        LOG(LL_WARN,
            "online: --train-file %s:%" PRIu64 ": the last line has no newline: not learned "
            "(a writer may still be writing it; a restart resumes before it, so end the "
            "file with a newline to have it learned)",
            path, line);
    if (rc != -ECANCELED) { /* the samples before an error are learned */
        char fwhy[1400];
        int frc = flush(fr, pg, path, fwhy, sizeof fwhy);
        if (frc != 0 && rc == 0) {
            rc = frc;
            memcpy(why, fwhy, sizeof why);
        } else if (frc != 0) { /* both: the frame read before the error was not learned */
            size_t at = strlen(why);
            snprintf(why + at, sizeof why - at, "; the lines read before it could not be "
                     "submitted either: %.600s", fwhy);
        }
    }
    fr->n = fr->used = 0;
    uint64_t header = reader_header_line(r);
    reader_close(r);
    close(pg->fd);
    pg->fd = -1;
    atomic_store(&F.reading, 0);
    uint64_t n = atomic_load(&F.samples) - s0;
    double secs = (double)(online__now_ns() - t0) * 1e-9;
    if (rc == 0) {
        atomic_fetch_add_explicit(&F.done, 1, memory_order_relaxed);
        char hdr[64] = "";
        if (header)
            snprintf(hdr, sizeof hdr, " (line %" PRIu64 " read as a header)", header);
        LOG(LL_INFO,
            "online: --train-file %s (%s) done: %" PRIu64 " samples into model '%s' in "
            "%.2f s%s",
            path, format_name(fmt), n, F.model, secs, hdr);
    } else if (rc == -ECANCELED) {
        LOG(LL_WARN,
            "online: --train-file %s: stopped by the shutdown after line %" PRIu64 ": %" PRIu64
            " samples submitted, the rest of the file not learned",
            path, line, n);
    } else {
        atomic_fetch_add_explicit(&F.failed, 1, memory_order_relaxed);
        LOG(LL_ERROR,
            "online: --train-file %s stopped: %s; the %" PRIu64 " samples before it "
            "are learned, the rest of the file is not (%.2f s)",
            path, why, n, secs);
    }
}

/* ---- the thread ---------------------------------------------------------------------- */

/* The feeder's frame sized for c (the cap, the queue): NULL without memory.
 * Free with frame_free. */
static struct frame *frame_new(const server_config_t *c)
{
    struct frame *fr = calloc(1, sizeof *fr);
    if (!fr)
        return NULL;
    fr->ids = malloc((size_t)FRAME_FEATURES * sizeof *fr->ids);
    fr->vals = malloc((size_t)FRAME_FEATURES * sizeof *fr->vals);
    if (!fr->ids || !fr->vals) {
        free(fr->ids);
        free(fr->vals);
        free(fr);
        return NULL;
    }
    int cap = c->online_max_samples_per_s; /* a frame must fit the cap's bucket */
    fr->max = ONLINE_FILE_FRAME_SAMPLES;
    if (cap > 0 && (unsigned)cap / 4 < fr->max)
        fr->max = cap / 4 > 0 ? (uint32_t)cap / 4 : 1;
    size_t half = ((size_t)c->online_queue_bytes & ~(size_t)7) / 2; /* online_submit's TOO_BIG */
    size_t hdr = ONLINE_REC_HDR + SAMPLE_LOG_MARK_BYTES; /* the mark rides in the queue too */
    fr->max_payload = half > hdr ? (half - hdr) & ~(size_t)7 : 0;
    if (fr->max_payload > CODEC_MAX_PAYLOAD)
        fr->max_payload = CODEC_MAX_PAYLOAD;
    return fr;
}

static void frame_free(struct frame *fr)
{
    if (!fr)
        return;
    free(fr->ids);
    free(fr->vals);
    free(fr->buf);
    free(fr);
}

static void *feeder_main(void *arg)
{
    (void)arg;
    const server_config_t *c = &G.srv->cfg;
    struct progress *ps = NULL;
    XXH3_state_t *xx = NULL;
    char **paths = NULL;
    struct frame *fr = frame_new(c);
    if (!fr) {
        LOG(LL_ERROR, "online: --train-file: no memory for the feeder's frame: no file learned");
        goto out;
    }
    for (bool said = false;;) { /* the model active */
        server_model_t *sm = server_model_acquire_named(G.srv, F.model);
        if (sm) {
            server_model_release(sm);
            break;
        }
        if (!said)
            LOG(LL_INFO, "online: --train-file waits for model '%s' to be active", F.model);
        said = true;
        if (pause_ms(MODEL_WAIT_MS))
            goto out;
    }
    static char list[sizeof c->train_file]; /* the feeder's only */
    snprintf(list, sizeof list, "%s", c->train_file);
    size_t n = 0, cap = strlen(list) / 2 + 1;
    paths = calloc(cap, sizeof *paths);
    ps = calloc(cap, sizeof *ps);
    xx = XXH3_createState();
    if (!paths || !ps || !xx) {
        LOG(LL_ERROR, "online: --train-file: no memory for the files' progress: no file learned");
        goto out;
    }
    char *save = NULL;
    for (char *p = strtok_r(list, ",", &save); p && n < cap; p = strtok_r(NULL, ",", &save)) {
        unsigned occurrence = 0;
        for (size_t i = 0; i < n; i++)
            occurrence += strcmp(paths[i], p) == 0;
        paths[n] = p;
        ps[n] = (struct progress){.key = path_key(p, occurrence), .fd = -1, .xx = xx};
        n++;
    }
    find_marks(ps, n);
    for (size_t i = 0; i < n && !stopping(); i++)
        feed_file(fr, &ps[i], paths[i]);
out:
    XXH3_freeState(xx);
    free(ps);
    free(paths);
    frame_free(fr);
    return NULL;
}

/* ---- start, stop, metrics ----------------------------------------------------------- */

/* The one model directory of --model-repo: 1 with its name, else the
 * count (0, or more than 1 with the first two named in names). */
static int repo_models(const char *repo, char *names, size_t names_len, char *one, size_t one_len)
{
    DIR *d = opendir(repo);
    int n = 0;
    names[0] = '\0';
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        char p[1400];
        struct stat st;
        if (de->d_name[0] == '.' || strlen(de->d_name) > CODEC_MAX_NAME)
            continue;
        snprintf(p, sizeof p, "%s/%s", repo, de->d_name);
        if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if (n == 0)
            snprintf(one, one_len, "%s", de->d_name);
        if (n < 2) {
            size_t o = strlen(names);
            snprintf(names + o, names_len - o, "%s'%s'", n ? ", " : "", de->d_name);
        }
        n++;
    }
    if (d)
        closedir(d);
    return n;
}

int online__file_start(char *why, size_t why_len)
{
    const server_config_t *c = &G.srv->cfg;
    if (!c->train_file[0])
        return 0;
    F.sniff = strcmp(c->train_file_format, "auto") == 0;
    if (!F.sniff && reader_format_parse(c->train_file_format, &F.format) != 0) {
        snprintf(why, why_len, "--train-file-format '%s': use auto, libsvm, libffm or criteo",
                 c->train_file_format);
        return -EINVAL;
    }
    server_t *srv = G.srv;
    uint32_t served = atomic_load_explicit(&srv->nmodels, memory_order_acquire);
    if (c->train_file_model[0]) {
        snprintf(F.model, sizeof F.model, "%s", c->train_file_model);
        if (c->model_dir[0] && served == 1 && strcmp(srv->models[0].name, F.model) != 0) {
            snprintf(why, why_len,
                     "--train-file-model '%s': the server serves model '%s' "
                     "(--model)",
                     F.model, srv->models[0].name);
            return -EINVAL;
        }
        if (c->model_name[0] && strcmp(c->model_name, F.model) != 0) {
            snprintf(why, why_len,
                     "--train-file-model '%s': the server serves model '%s' "
                     "(--model-name)",
                     F.model, c->model_name);
            return -EINVAL;
        }
    } else if (c->model_dir[0] && served == 1) {
        snprintf(F.model, sizeof F.model, "%s", srv->models[0].name);
    } else if (c->model_name[0]) {
        snprintf(F.model, sizeof F.model, "%s", c->model_name);
    } else if (c->model_repo[0]) {
        char names[200];
        int n = repo_models(c->model_repo, names, sizeof names, F.model, sizeof F.model);
        if (n != 1) {
            snprintf(why, why_len,
                     "--train-file: the repository %s holds %d models%s%s%s: name "
                     "the one to train with --train-file-model",
                     c->model_repo, n, n ? " (" : "", names,
                     n > 2 ? ", ...)"
                     : n   ? ")"
                           : "");
            return -EINVAL;
        }
    } else {
        snprintf(why, why_len,
                 "--train-file: no model is served at start (--model or "
                 "--model-repo): name the one to train with --train-file-model");
        return -EINVAL;
    }
    atomic_store(&F.stop, false);
    atomic_store(&F.samples, 0);
    atomic_store(&F.done, 0);
    atomic_store(&F.failed, 0);
    atomic_store(&F.reading, 0);
    atomic_store(&F.waits, 0);
    atomic_store(&F.skipped, 0);
    if (pthread_create(&F.thread, NULL, feeder_main, NULL) != 0) {
        snprintf(why, why_len, "--train-file: cannot start the feeder thread");
        return -EAGAIN;
    }
    pthread_setname_np(F.thread, "tl-trainfile");
    F.running = F.configured = true;
    LOG(LL_INFO, "online: --train-file: %s into model '%s' (format %s)", c->train_file, F.model,
        F.sniff ? "told per file" : format_name(F.format));
    return 0;
}

void online__file_stop(void)
{
    if (!F.running)
        return;
    pthread_mutex_lock(&F.lock);
    atomic_store(&F.stop, true);
    pthread_cond_broadcast(&F.cond);
    pthread_mutex_unlock(&F.lock);
    pthread_join(F.thread, NULL);
    F.running = false;
}

size_t online__file_metrics(char *buf, size_t len)
{
    if (!F.configured || len == 0)
        return 0;
    static const struct {
        const char *name, *type, *help;
        _Atomic uint64_t *v;
    } fam[] = {
        {"tlserve_online_file_samples_total", "counter",
         "samples of --train-file submitted to the trainer (queued as a TRAIN's)", &F.samples},
        {"tlserve_online_file_done_total", "counter", "training files read to their end", &F.done},
        {"tlserve_online_file_failed_total", "counter",
         "training files stopped by an error (a bad line: logged at ERROR with file:line)",
         &F.failed},
        {"tlserve_online_file_reading", "gauge", "1 while a training file is being read",
         &F.reading},
        {"tlserve_online_file_waits_total", "counter",
         "waits for room (queue full, samples/s cap, model not active): backpressure, nothing "
         "dropped",
         &F.waits},
        {"tlserve_online_file_resumed_samples_total", "counter",
         "samples of --train-file not submitted again at this start: the sample log says they "
         "were (each file resumes after them)",
         &F.skipped},
    };
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof fam / sizeof *fam; i++) {
        int n = snprintf(buf + off, len - off,
                         "# HELP %s %s\n# TYPE %s %s\n%s{model=\"%s\"} %" PRIu64 "\n", fam[i].name,
                         fam[i].help, fam[i].name, fam[i].type, fam[i].name, F.model,
                         atomic_load_explicit(fam[i].v, memory_order_relaxed));
        if (n < 0 || (size_t)n >= len - off) {
            buf[off] = '\0';
            break;
        }
        off += (size_t)n;
    }
    return off;
}
