/*
 * online_file_marks.c — how far each --train-file was learned, in the forms
 * a restart reads: the 40-byte MARK a frame's sample log record carries,
 * the trainer's table of the latest mark per file, and the TRAINFILE_MARKS
 * file an export writes beside its delta.
 *
 * WHY AN EXPORT CARRIES THEM: the sample log is trimmed behind an export,
 * whole segments at a time, so the record holding a file's last mark may be
 * gone by the restart (a file learned long before the export), and without
 * --sample-log-dir there is no record at all.  What an export covers is
 * what the trainer had learned at its hand-over, so the marks of the
 * records the trainer had learned then are exactly the files' progress
 * inside that version.  The trainer keeps them (online__file_marks_note,
 * from every record it learns or replays), the hand-over copies them with
 * the keys' values, and the export thread writes them into the version's
 * directory before its MANIFEST (store_delta_side_file), as the optimizer
 * state: version and marks appear together.  A restart seeds the trainer's
 * table from the active version's file (so the next export still names
 * files learned before it) and the feeder merges that file with the log's
 * marks, the later position winning (online_file.c, find_marks).
 *
 * An attach to a new version trims the log too, and that version carries
 * no marks: the trainer writes its table into the log's directory first
 * (the same file format), which seeds it and the feeder the same way.
 *
 * THE FILE (little-endian), read back as untrusted input:
 *
 *   0         8       12      16
 *   +---------+-------+-------+------------------------------+-----------+
 *   |"TLFMARK1"| count |   0   | count x (mark 40 | pos u64)  | XXH3_64   |
 *   +---------+-------+-------+------------------------------+-----------+
 *   pos: the sample log position of the record the mark came with (0
 *   without a log); the XXH3_64 covers every byte before it.
 *
 * AT A START the feeder asks online__file_marks_find for the latest mark of
 * each listed file: the kept files (the active version's, the log
 * directory's), then every record the sample log keeps, read before the
 * feeder appends anything; a later position wins.
 *
 * THREAD SAFETY: the table is the trainer thread's (online_model_t); the
 * finding is the feeder's (one thread: its buffer is static); nothing
 * else here holds state.
 */
#define _GNU_SOURCE
#include "online_impl.h"

#include "file_replace.h"
#include "le_bytes.h"
#include "log.h"
#include "model/model.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define G online__G
#define MAGIC "TLFMARK1"
#define ENTRY_BYTES (SAMPLE_LOG_MARK_BYTES + 8u)
#define HEAD_BYTES 16u

void online__file_mark_encode(const online_file_mark_t *m, uint8_t out[SAMPLE_LOG_MARK_BYTES])
{
    put_le64(out, m->key);
    put_le64(out + 8, m->offset);
    put_le64(out + 16, m->line);
    put_le64(out + 24, m->prefix);
    put_le64(out + 32, m->samples);
}

int online__file_mark_decode(const uint8_t in[SAMPLE_LOG_MARK_BYTES], online_file_mark_t *m,
                             char *why, size_t why_len)
{
    m->key = get_le64(in);
    m->offset = get_le64(in + 8);
    m->line = get_le64(in + 16);
    m->prefix = get_le64(in + 24);
    m->samples = get_le64(in + 32);
    /* a line takes a byte at least, a sample a line */
    if (m->line > m->offset || m->samples > m->line || (m->offset > 0 && m->line == 0)) {
        snprintf(why, why_len,
                 "a --train-file mark of %" PRIu64 " bytes, %" PRIu64 " lines and %" PRIu64
                 " samples cannot be (a line takes a byte, a sample a line)",
                 m->offset, m->line, m->samples);
        return -EINVAL;
    }
    return 0;
}

void online__file_marks_put(online_file_progress_t *t, uint32_t *n, const online_file_mark_t *m,
                            uint64_t pos)
{
    uint32_t oldest = 0;
    for (uint32_t i = 0; i < *n; i++) {
        if (t[i].m.key == m->key) {
            if (pos >= t[i].pos)
                t[i] = (online_file_progress_t){*m, pos};
            return;
        }
        if (t[i].pos < t[oldest].pos)
            oldest = i;
    }
    if (*n < ONLINE_FILE_MARKS_MAX)
        oldest = (*n)++;
    t[oldest] = (online_file_progress_t){*m, pos};
}

void online__file_marks_note(online_model_t *q, const uint8_t *mark, uint64_t pos)
{
    online_file_mark_t m;
    char why[200];
    if (!q->fmarks || online__file_mark_decode(mark, &m, why, sizeof why) != 0)
        return; /* the feeder wrote it: a bad one is not the trainer's to judge */
    online__file_marks_put(q->fmarks, &q->nfmarks, &m, pos);
}

size_t online__file_marks_size(uint32_t n)
{
    return HEAD_BYTES + (size_t)n * ENTRY_BYTES + 8;
}

void online__file_marks_encode(const online_file_progress_t *t, uint32_t n, uint8_t *out)
{
    memcpy(out, MAGIC, 8);
    uint8_t *p = out + 8;
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(n >> (8 * i));
    memset(out + 12, 0, 4);
    p = out + HEAD_BYTES;
    for (uint32_t i = 0; i < n; i++, p += ENTRY_BYTES) {
        online__file_mark_encode(&t[i].m, p);
        put_le64(p + SAMPLE_LOG_MARK_BYTES, t[i].pos);
    }
    put_le64(p, XXH3_64bits(out, (size_t)(p - out)));
}

int online__file_marks_parse(const uint8_t *buf, size_t len, online_file_progress_t *t, uint32_t *n,
                             char *why, size_t why_len)
{
    *n = 0;
    if (len < HEAD_BYTES + 8 || memcmp(buf, MAGIC, 8) != 0) {
        snprintf(why, why_len, "not a marks file (%zu bytes, no " MAGIC " header)", len);
        return -EINVAL;
    }
    uint32_t count = (uint32_t)buf[8] | (uint32_t)buf[9] << 8 | (uint32_t)buf[10] << 16 |
                     (uint32_t)buf[11] << 24;
    if (count > ONLINE_FILE_MARKS_MAX) {
        snprintf(why, why_len, "%u marks, more than the %u a table holds", count,
                 ONLINE_FILE_MARKS_MAX);
        return -EINVAL;
    }
    if (len != online__file_marks_size(count)) {
        snprintf(why, why_len, "%zu bytes where %u marks take %zu (cut or padded)", len, count,
                 online__file_marks_size(count));
        return -EINVAL;
    }
    if (buf[12] | buf[13] | buf[14] | buf[15]) {
        snprintf(why, why_len, "reserved header bytes 12..15 are not zero");
        return -EINVAL;
    }
    if (XXH3_64bits(buf, len - 8) != get_le64(buf + len - 8)) {
        snprintf(why, why_len, "its checksum does not match its bytes");
        return -EINVAL;
    }
    const uint8_t *p = buf + HEAD_BYTES;
    for (uint32_t i = 0; i < count; i++, p += ENTRY_BYTES) {
        char mwhy[200];
        if (online__file_mark_decode(p, &t[i].m, mwhy, sizeof mwhy) != 0) {
            snprintf(why, why_len, "mark %u: %s", i, mwhy);
            return -EINVAL;
        }
        t[i].pos = get_le64(p + SAMPLE_LOG_MARK_BYTES);
    }
    *n = count;
    return 0;
}

int online__file_marks_read(const char *path, online_file_progress_t *t, uint32_t *n, char *why,
                            size_t why_len)
{
    *n = 0;
    static const size_t max = HEAD_BYTES + (size_t)ONLINE_FILE_MARKS_MAX * ENTRY_BYTES + 8;
    uint8_t *buf = malloc(max + 1);
    if (!buf) {
        snprintf(why, why_len, "no memory");
        return -ENOMEM;
    }
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        snprintf(why, why_len, "%s", strerror(-rc));
        goto out;
    }
    size_t got = 0;
    while (got <= max) {
        ssize_t r = read(fd, buf + got, max + 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            snprintf(why, why_len, "%s", strerror(-rc));
            break;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (rc == 0)
        rc = online__file_marks_parse(buf, got, t, n, why, why_len);
out:
    free(buf);
    return rc;
}

int online__file_marks_write_at(int dirfd, const online_file_progress_t *t, uint32_t n)
{
    size_t len = online__file_marks_size(n);
    uint8_t *buf = malloc(len);
    if (!buf)
        return -ENOMEM;
    online__file_marks_encode(t, n, buf);
    int rc = file_replace_at(dirfd, ONLINE_FILE_MARKS_FILE, buf, len);
    free(buf);
    return rc;
}

/* ---- reading them back at a start (the feeder) ------------------------------------ */

struct found {
    const uint64_t *keys;
    size_t n;
    online_file_progress_t *out;
    bool *found;
};

/* Takes m (of log position pos) for its file when no later one was. */
static void take(struct found *f, const online_file_mark_t *m, uint64_t pos)
{
    for (size_t i = 0; i < f->n; i++) {
        if (f->keys[i] == m->key && (!f->found[i] || pos >= f->out[i].pos)) {
            f->found[i] = true;
            f->out[i] = (online_file_progress_t){*m, pos};
        }
    }
}

/* The marks of a TRAINFILE_MARKS file; a missing file is none, a bad one a
 * WARN and none. */
static void take_file(struct found *f, const char *path)
{
    static online_file_progress_t got[ONLINE_FILE_MARKS_MAX]; /* the feeder's only */
    char why[300];
    uint32_t k = 0;
    int rc = online__file_marks_read(path, got, &k, why, sizeof why);
    if (rc != 0 && rc != -ENOENT)
        LOG(LL_WARN, "online: --train-file: %s: %s; the files' progress is what the rest holds",
            path, why);
    for (uint32_t i = 0; i < k; i++)
        take(f, &got[i].m, got[i].pos);
}

/* The marks the active version carries when it is an online export, and
 * those the model's sample log set aside at its last trim by an attach. */
static void take_kept(struct found *f, const char *model, const online_model_t *q)
{
    const server_config_t *c = &G.srv->cfg;
    char path[1400];
    server_model_t *sm = c->model_repo[0] ? server_model_acquire_named(G.srv, model) : NULL;
    if (sm) {
        uint64_t version = model_meta(sm->model)->version;
        server_model_release(sm);
        snprintf(path, sizeof path, "%s/%s/%" PRIu64 "/" ONLINE_FILE_MARKS_FILE, c->model_repo,
                 model, version);
        take_file(f, path);
    }
    if (q && q->slog) {
        snprintf(path, sizeof path, "%s/" ONLINE_FILE_MARKS_FILE, q->slog_dir);
        take_file(f, path);
    }
}

void online__file_marks_find(const char *model, const uint64_t *keys, size_t n,
                             online_file_progress_t *out, bool *found)
{
    struct found f = {keys, n, out, found};
    char why[512];
    memset(found, 0, n * sizeof *found);
    online_model_t *q = online__model_get(model, why, sizeof why);
    take_kept(&f, model, q);
    if (!q || !q->slog)
        return;
    pthread_mutex_lock(&q->lock);
    uint64_t from = sample_log_first_pos(q->slog), end = sample_log_next_pos(q->slog);
    pthread_mutex_unlock(&q->lock);
    if (from == end)
        return;
    codec_arena_t arena = {0};
    arena.cap = sample_log_arena_bound();
    arena.base = malloc(arena.cap);
    sample_log_reader_t *r = NULL;
    sample_log_error_t err = {0};
    int rc = arena.base ? sample_log_reader_open(q->slog_dir, from, &r, &err) : -ENOMEM;
    uint64_t pos = from, marks = 0;
    while (rc == 0 && pos < end) {
        sample_log_rec_t rec;
        arena.used = 0;
        rc = sample_log_next(r, &arena, &rec, &pos, &err);
        if (rc == SAMPLE_LOG_END) {
            snprintf(err.msg, sizeof err.msg,
                     "the log ends at position %" PRIu64 " before %" PRIu64, pos, end);
            rc = -EIO;
        }
        if (rc != 0)
            break;
        if (rec.mark && strcmp(rec.train.name, model) == 0) {
            online_file_mark_t m;
            if ((rc = online__file_mark_decode(rec.mark, &m, err.msg, sizeof err.msg)) != 0)
                break;
            take(&f, &m, pos);
            marks++;
        }
        pos++;
    }
    sample_log_reader_close(r);
    free(arena.base);
    if (rc != 0) {
        LOG(LL_WARN,
            "online: --train-file: the sample log %s cannot tell how far the files were learned "
            "(position %" PRIu64 ": %s): every file is read from the start as new data",
            q->slog_dir, pos, rc == -ENOMEM ? "no memory for a record" : err.msg);
        memset(found, 0, n * sizeof *found);
        return;
    }
    LOG(LL_DEBUG,
        "online: --train-file: %" PRIu64 " marks in sample log positions %" PRIu64 "..%" PRIu64,
        marks, from, end);
}
