/*
 * sample_log_roll.c — the sample log's roll under SAMPLE_LOG_SYNC_INTERVAL
 * (sample_log.h ROLLS): the append opens the next segment as
 * <first>.slog.new and goes on; the caller's flush commits it off the
 * append path; open commits or sets aside a pending segment left by a
 * crash.
 *
 * Why not roll in the append: the finished segment must be durable before
 * a segment after it has a final name (open reads a gap between final
 * segments as corruption), and its fdatasync flushes up to a whole
 * interval's writes.  The append runs in a server worker under the
 * trainer's queue lock, so that flush would stall every connection of the
 * worker and every frame behind it for tens of milliseconds.  The pending
 * name carries the order instead: a segment is final only after the one
 * before it was flushed.
 *
 * THREAD SAFETY: the writer's (sample_log.h); sample_log_sync_end touches
 * only its own descriptors, so the caller runs it without its lock while
 * appends go on into the pending segment.
 */
#define _GNU_SOURCE
#include "sample_log_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int sample_log__roll_pending(sample_log_t *log, sample_log_error_t *err)
{
    int rc = sample_log__segs_room(log);
    if (rc)
        return rc;
    char name[SEG_PATH_MAX];
    seg_name_suffixed(name, log->next_pos, SEG_PENDING_SUFFIX);
    int fd = openat(log->dirfd, name, O_WRONLY | O_CLOEXEC | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return sample_log__fail(err, -errno, SAMPLE_LOG_E_IO, NULL, -1,
                    "%s: starting the segment %s: %s", log->dir, name, strerror(errno));
    log->prev_fd = log->fd;
    log->prev_dirty = log->dirty;
    log->fd = fd;
    log->segs[log->nsegs++] = log->next_pos;
    log->seg_size = 0;
    log->dirty = false;
    log->roll_pending = true;
    return 0;
}

/* fdatasync of the finished segment (when it needs one), the rename, fsync
 * of the directory: 0 or -errno.  Touches only the descriptors given. */
static int commit(int prev_fd, bool prev_dirty, int dirfd, uint64_t first)
{
    if (prev_dirty && fdatasync(prev_fd) < 0)
        return -errno;
    char from[SEG_PATH_MAX], to[SEG_PATH_MAX];
    seg_name_suffixed(from, first, SEG_PENDING_SUFFIX);
    seg_name_suffixed(to, first, "");
    if (renameat(dirfd, from, dirfd, to) < 0 || fsync(dirfd) < 0)
        return -errno;
    return 0;
}

/* The roll committed: the finished segment's descriptor goes. */
static void committed(sample_log_t *log)
{
    close(log->prev_fd);
    log->prev_fd = -1;
    log->prev_dirty = false;
    log->roll_pending = false;
}

int sample_log__commit_roll(sample_log_t *log)
{
    int rc = commit(log->prev_fd, log->prev_dirty, log->dirfd, log->segs[log->nsegs - 1]);
    if (rc == 0)
        committed(log);
    return rc;
}

int sample_log_sync_begin(sample_log_t *log, uint64_t now_ms, sample_log_flush_t *f)
{
    *f = (sample_log_flush_t){.prev_fd = -1, .dirfd = -1, .cur_fd = -1};
    bool due = log->cfg.sync == SAMPLE_LOG_SYNC_INTERVAL && log->dirty &&
               now_ms - log->last_sync_ms >= log->cfg.sync_interval_ms;
    if (!due && !log->roll_pending)
        return 0;
    if (log->roll_pending) {
        f->prev_fd = fcntl(log->prev_fd, F_DUPFD_CLOEXEC, 0);
        f->dirfd = fcntl(log->dirfd, F_DUPFD_CLOEXEC, 0);
        f->roll_first = log->segs[log->nsegs - 1];
        if (f->prev_fd < 0 || f->dirfd < 0) { /* out of descriptors: the next call tries again */
            sample_log_flush_t g = *f;
            (void)sample_log_sync_end(&g);
            return 0;
        }
    }
    if (due && (f->cur_fd = fcntl(log->fd, F_DUPFD_CLOEXEC, 0)) >= 0) {
        log->dirty = false; /* an append from here on makes it dirty again */
        log->last_sync_ms = now_ms;
    }
    return f->prev_fd >= 0 || f->cur_fd >= 0;
}

int sample_log_sync_end(sample_log_flush_t *f)
{
    int rc = 0;
    if (f->prev_fd >= 0 && f->dirfd >= 0)
        rc = commit(f->prev_fd, true, f->dirfd, f->roll_first);
    if (f->cur_fd >= 0 && fdatasync(f->cur_fd) < 0 && rc == 0)
        rc = -errno;
    if (f->prev_fd >= 0)
        close(f->prev_fd);
    if (f->dirfd >= 0)
        close(f->dirfd);
    if (f->cur_fd >= 0)
        close(f->cur_fd);
    f->prev_fd = f->dirfd = f->cur_fd = -1;
    return rc;
}

void sample_log_sync_done(sample_log_t *log, const sample_log_flush_t *f, int rc)
{
    if (rc != 0)
        log->dirty = true; /* the next due flush tries again */
    if (f->roll_first == 0 || !log->roll_pending || log->segs[log->nsegs - 1] != f->roll_first)
        return;
    char name[SEG_PATH_MAX];
    seg_name_suffixed(name, f->roll_first, "");
    /* a failure after the rename (the directory's fsync, the current
     * segment's flush) still committed the name: the next flush must not
     * rename again, only sync */
    if (rc == 0 || faccessat(log->dirfd, name, F_OK, 0) == 0)
        committed(log);
}

int sample_log__recover_pending(sample_log_t *log, uint64_t *cut, sample_log_error_t *err)
{
    uint64_t first = log->segs[log->nsegs - 1];
    char from[SEG_PATH_MAX], to[SEG_PATH_MAX];
    seg_name_suffixed(from, first, SEG_PENDING_SUFFIX);
    bool contiguous = log->nsegs == 1 || log->next_pos == first;
    seg_name_suffixed(to, first, contiguous ? "" : SEG_ORPHAN_SUFFIX);
    struct stat st;
    if (fstatat(log->dirfd, from, &st, 0) < 0 || renameat(log->dirfd, from, log->dirfd, to) < 0 ||
        fsync(log->dirfd) < 0)
        return sample_log__fail(err, -errno, SAMPLE_LOG_E_IO, from, -1, "%s/%s: renaming to %s: %s",
                    log->dir, from, to, strerror(errno));
    if (contiguous)
        return sample_log__recover(log, log->nsegs - 1, log->nsegs, cut, err);
    /* the records before it ended early: a power cut took them, and the
     * pending segment's with them (none was flushed: its roll was not) */
    log->nsegs--;
    *cut += (uint64_t)st.st_size;
    return 0;
}
