/*
 * repo_persist.c — the marks of each model served from the repository
 * (repo_marks.h: pin, rolled-back versions, the admin's, the gate's and
 * the lineage check's refusals) written to a file whenever they change,
 * and read back when the model is first listed, so that a restarted
 * server keeps a bad version off the service and serves the version it
 * was pinned to.
 *
 * WHERE: <model dir>/.tlserve-marks (beside the versions; dot names are not
 * versions), or <--repo-marks-dir>/<model>.marks when the repository is
 * shared by several servers, synchronized with deletion, or read-only.  A
 * model with no marks has no file.
 *
 * WHEN: the admin's calls (repo_admin.c) flush before they answer, so an
 * answered rollback, pin or refusal is on disk (repo_marks_kept says
 * whether it is); the gate's and the lineage check's refusals and the
 * marks the watcher changes (a restored pin that cannot be served) are
 * flushed by the watcher after its scans, and once more when it stops.  A
 * write is a temporary file, fsync and rename (file_replace.c): a reader
 * sees the old marks or the new ones whole.
 *
 * A RESTORED PIN is loaded by the first scan (repo.c); when that version is
 * gone, refused or does not load, the pin is dropped with a WARN and the
 * latest policy serves: a restart must not leave the model without a
 * version.  A marks file that does not parse stops the start (repo_start)
 * naming the file and line: serving the newest version instead could serve
 * one the operator rolled back.
 *
 * ONE WRITER A PLACE: two servers writing one model's marks would each
 * overwrite the other's rollbacks and pins, so repo_start locks the place
 * (repo__marks_lock: flock on .tlserve-marks.lock in --repo-marks-dir, else
 * in the repository).  A second server there (replicas sharing one
 * repository) still starts and reads the marks, but writes none while the
 * first holds the lock: a WARN tells it to take a --repo-marks-dir of its
 * own, and its admin answers say "marks_kept": false.  The kernel drops
 * the lock when the holder dies, however it dies; the next write takes it.
 *
 * THREAD SAFETY: io_lock serializes the writes and is taken before R.lock,
 * which is held only to copy a model's marks.
 */
#define _GNU_SOURCE
#include "file_replace.h"
#include "log.h"
#include "repo_impl.h"
#include "repo_marks.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define MARKS_LOCK_NAME ".tlserve-marks.lock"

static pthread_mutex_t io_lock = PTHREAD_MUTEX_INITIALIZER;

/* The directory and the file name of r's marks. */
static void marks_place(const struct repo_model *r, char *dir, size_t dir_len, char *name,
                        size_t name_len)
{
    if (R.marks_dir[0]) {
        snprintf(dir, dir_len, "%s", R.marks_dir);
        snprintf(name, name_len, "%s.marks", r->model);
    } else {
        snprintf(dir, dir_len, "%s", r->model_dir);
        snprintf(name, name_len, ".tlserve-marks");
    }
}

int repo__marks_restore(struct repo_model *r, char *why, size_t why_len)
{
    char dir[1100], name[80], path[1200];
    marks_place(r, dir, sizeof dir, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    /* O_NONBLOCK: a FIFO there must not block the start (and R.lock). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        int e = errno;
        snprintf(why, why_len, "cannot read the marks of %s in %s: %s; make it readable (or "
                 "remove it to forget its pins, rollbacks and refusals)", r->model, path,
                 strerror(e));
        return -EINVAL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(why, why_len, "the marks of %s in %s: not a regular file; remove it (the model "
                 "then forgets its pins, rollbacks and refusals)", r->model, path);
        close(fd);
        return -EINVAL;
    }
    repo_marks_t *m = malloc(sizeof *m);
    char *buf = malloc(REPO_MARKS_FILE_MAX + 1);
    int rc = -EINVAL;
    size_t len = 0;
    if (!m || !buf) {
        snprintf(why, why_len, "no memory to read the marks of %s in %s", r->model, path);
        goto out;
    }
    for (;;) {
        ssize_t n = read(fd, buf + len, REPO_MARKS_FILE_MAX + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(why, why_len, "cannot read the marks of %s in %s: %s", r->model, path,
                     strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > REPO_MARKS_FILE_MAX) {
            snprintf(why, why_len, "the marks of %s in %s are larger than %d bytes: not a marks "
                     "file; remove it to forget its pins, rollbacks and refusals", r->model, path,
                     REPO_MARKS_FILE_MAX);
            goto out;
        }
    }
    char what[400];
    if (repo_marks_parse(buf, len, r->model, m, what, sizeof what) != 0) {
        snprintf(why, why_len, "the marks of %s in %s are damaged: %s; fix the file or remove it "
                 "(the model then forgets its pin, rollbacks and refusals and serves its latest "
                 "version)", r->model, path, what);
        goto out;
    }
    r->pinned = m->pinned;
    r->pin_restored = m->pinned != 0;
    r->n_rolled_back = m->n_rolled_back;
    memcpy(r->rolled_back, m->rolled_back, m->n_rolled_back * sizeof r->rolled_back[0]);
    r->n_refused = m->n_refused;
    for (unsigned i = 0; i < m->n_refused; i++) {
        repo_refusal_t *f = &r->refused[i];
        f->version = m->refused[i].version;
        f->by_admin = m->refused[i].by_admin;
        f->by_lineage = !m->refused[i].by_admin && m->refused[i].by_lineage;
        f->by_gate = !m->refused[i].by_admin && !m->refused[i].by_lineage;
        snprintf(f->error, sizeof f->error, "%s", m->refused[i].reason);
        r->refused_sig[i] = m->refused[i].sig;
    }
    if (m->pinned || m->n_rolled_back || m->n_refused) /* %.0: 0 prints nothing */
        LOG(LL_INFO, "repo: %s keeps its marks from %s: %s%.0" PRIu64 ", %u rolled back, %u "
            "refused", r->model, path, m->pinned ? "pinned to version " : "not pinned",
            m->pinned, m->n_rolled_back, m->n_refused);
    rc = 0;
out:
    close(fd);
    free(m);
    free(buf);
    return rc;
}

/* Copies r's marks (R.lock held): the pin, the rolled-back versions, and
 * the refusals a restart could not make again (the admin's, the gate's,
 * the lineage check's). */
static void marks_of(const struct repo_model *r, repo_marks_t *m)
{
    memset(m, 0, sizeof *m);
    m->pinned = r->pinned;
    m->n_rolled_back = r->n_rolled_back;
    memcpy(m->rolled_back, r->rolled_back, r->n_rolled_back * sizeof r->rolled_back[0]);
    for (unsigned i = 0; i < r->n_refused; i++) {
        const repo_refusal_t *f = &r->refused[i];
        if (!f->by_admin && !f->by_gate && !f->by_lineage)
            continue;
        struct repo_marked_refusal *t = &m->refused[m->n_refused++];
        t->version = f->version;
        t->by_admin = f->by_admin;
        t->by_lineage = !f->by_admin && f->by_lineage;
        t->sig = f->by_admin ? 0 : r->refused_sig[i];
        snprintf(t->reason, sizeof t->reason, "%s", f->error);
    }
}

/* Under io_lock: the lock file's fd, -1 when not held; whether another
 * process was found holding it (writes then wait for it). */
static int lock_fd = -1;
static bool lock_busy;

/* Takes the place's lock if it is free: 0, or -EBUSY (another process
 * holds it; *holder its pid, as the file says).  io_lock held. */
static int take_lock_locked(char *path, size_t path_len, char *holder, size_t holder_len)
{
    const char *dir = R.marks_dir[0] ? R.marks_dir : R.dir;
    snprintf(path, path_len, "%s/%s", dir, MARKS_LOCK_NAME);
    if (lock_fd >= 0)
        return 0;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) { /* a read-only place: its marks cannot be written either */
        int e = errno;
        LOG(e == EROFS || e == EACCES || e == EPERM ? LL_DEBUG : LL_WARN,
            "repo: cannot open the marks lock %s (%s): the marks are written unlocked", path,
            strerror(e));
        return 0;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        ssize_t n = pread(fd, holder, holder_len - 1, 0);
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        if (!holder[0])
            snprintf(holder, holder_len, "unknown");
        close(fd);
        if (e == EWOULDBLOCK)
            return -EBUSY;
        LOG(LL_WARN, "repo: cannot lock %s (%s): the marks are written unlocked", path, strerror(e));
        return 0;
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        LOG(LL_DEBUG, "repo: cannot write the pid into %s: %s", path, strerror(errno));
    lock_fd = fd;
    if (lock_busy)
        LOG(LL_INFO, "repo: took the marks lock %s: this server keeps its marks again", path);
    lock_busy = false;
    return 0;
}

/* Writes (or, empty, removes) the marks of r: 0 or -errno with what failed. */
static int marks_write(const struct repo_model *r, const repo_marks_t *m, char *buf,
                       const char **what)
{
    char dir[1100], name[80];
    if (lock_busy) { /* until the other process lets the place go */
        char path[1100], holder[32];
        if (take_lock_locked(path, sizeof path, holder, sizeof holder) == -EBUSY) {
            *what = "write there while another process holds its lock";
            return -EBUSY;
        }
    }
    marks_place(r, dir, sizeof dir, name, sizeof name);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        *what = "open its directory";
        return -errno;
    }
    int rc = 0;
    if (!m->pinned && !m->n_rolled_back && !m->n_refused) {
        if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT) {
            rc = -errno;
            *what = "remove it";
        }
    } else {
        size_t len = repo_marks_format(m, r->model, buf, REPO_MARKS_FILE_MAX);
        rc = len ? file_replace_at(dfd, name, buf, len) : -EOVERFLOW;
        *what = "write it";
    }
    if (rc == 0 && fsync(dfd) != 0) { /* the rename itself survives a power cut */
        rc = -errno;
        *what = "sync its directory";
    }
    close(dfd);
    return rc;
}

int repo_marks_kept(const char *model)
{
    pthread_mutex_lock(&R.lock);
    const struct repo_model *r = repo__find(model);
    int kept = !r ? -1 : !r->marks_failed && !r->marks_dirty;
    pthread_mutex_unlock(&R.lock);
    return kept;
}

void repo__marks_flush(void)
{
    static char *buf; /* under io_lock */
    static repo_marks_t *m;
    pthread_mutex_lock(&io_lock);
    if (!buf)
        buf = malloc(REPO_MARKS_FILE_MAX);
    if (!m)
        m = malloc(sizeof *m);
    pthread_mutex_lock(&R.lock);
    unsigned n_models = R.n_models;
    pthread_mutex_unlock(&R.lock);
    for (unsigned i = 0; i < n_models; i++) {
        struct repo_model *r = &R.models[i];
        pthread_mutex_lock(&R.lock);
        bool dirty = r->marks_dirty;
        if (dirty && buf && m) {
            marks_of(r, m);
            r->marks_dirty = false;
        }
        pthread_mutex_unlock(&R.lock);
        if (!dirty)
            continue;
        const char *what = "allocate its buffer";
        int rc = buf && m ? marks_write(r, m, buf, &what) : -ENOMEM;
        char dir[1100], name[80];
        marks_place(r, dir, sizeof dir, name, sizeof name);
        pthread_mutex_lock(&R.lock);
        if (rc != 0) {
            R.metrics.marks_write_errors++;
            r->marks_dirty = true; /* retried after the watcher's next scan */
            if (!r->marks_failed)
                LOG(LL_WARN, "repo: cannot keep the marks of %s (pin, rollbacks, refusals) in "
                    "%s/%s: cannot %s: %s; they hold in memory, but a restart would use the "
                    "last ones written there, or none (--repo-marks-dir puts them elsewhere)",
                    r->model, dir, name, what, strerror(-rc));
            r->marks_failed = true;
        } else if (r->marks_failed) {
            LOG(LL_INFO, "repo: the marks of %s are kept in %s/%s again", r->model, dir, name);
            r->marks_failed = false;
        }
        pthread_mutex_unlock(&R.lock);
    }
    pthread_mutex_unlock(&io_lock);
}

void repo__marks_lock(void)
{
    char path[1100], holder[32];
    pthread_mutex_lock(&io_lock);
    if (take_lock_locked(path, sizeof path, holder, sizeof holder) == -EBUSY) {
        LOG(LL_WARN, "repo: another process (pid %s) keeps its models' marks in %s (it holds "
            "%s): this server reads them but writes none while that one runs, so its rollbacks, "
            "pins and refusals would not survive its restart (\"marks_kept\": false); give it "
            "a --repo-marks-dir of its own", holder, R.marks_dir[0] ? R.marks_dir : R.dir, path);
        lock_busy = true;
    }
    pthread_mutex_unlock(&io_lock);
}

void repo__marks_unlock(void)
{
    pthread_mutex_lock(&io_lock);
    if (lock_fd >= 0)
        close(lock_fd);
    lock_fd = -1;
    lock_busy = false;
    pthread_mutex_unlock(&io_lock);
}
