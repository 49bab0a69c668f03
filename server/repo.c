/*
 * repo.c — the model repository: a watcher thread that finds the version to
 * serve in <repo>/<model>/ and queues it to the loader, and the chain loader
 * the loader runs for it (repo.h states the policy).
 *
 *   inotify (repo dir, model dir) ─┐
 *   every REPO_RESCAN_MS ──────────┼─> scan: list versions, sign each one's files,
 *   a refused load (wake pipe) ────┘         forget refusals whose files changed,
 *                                            if the listing changed: pick the highest
 *                                            version not refused, queue it (loader.c)
 *   loader thread: repo_open_version (chain: full + deltas) ── swap ── done hook:
 *                                            FAILED -> refused, wake the watcher
 *
 * SIGNATURES
 *   A version's signature hashes the stat (inode, size, mtime) of its
 *   directory and of every file in it; a refusal records the hash of the
 *   signatures of the version and of every lower one, since only those can
 *   be links of its chain.  A refusal is forgotten, and the version tried
 *   again, when that hash changes: the version was replaced, a file of it
 *   rewritten, or a missing parent appeared.  Adding a higher version does
 *   not retry a refused lower one.  The listing's signature (all versions)
 *   decides whether the repository "changed": only then does the watcher
 *   pick again, so an admin load stays active until the next change.
 *
 * INOTIFY
 *   Watches are (re)added at every scan, so a repository or model directory
 *   that vanished and came back is watched again; events are not parsed,
 *   any of them (IN_Q_OVERFLOW too) only triggers a scan.  Without inotify
 *   the periodic rescan alone finds versions, within REPO_RESCAN_MS.
 *
 * COST
 *   A chain is rebuilt in a new store: the full snapshot loaded, every delta
 *   applied, so memory during the load is the active version plus the whole
 *   new one, as for a full load.  A scan stats every file of every version.
 *
 * THREAD SAFETY
 *   One state (repo_impl.h; one repository per process), under S.lock; the
 *   watcher drops it to list and stat the directories.  The done hook runs
 *   on the loader thread (or loader_stop's) and only takes the lock.
 */
#define _GNU_SOURCE
#include "repo.h"
#include "repo_impl.h"

#include "log.h"
#include "model/overlay.h"
#include "store/delta.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define REPO_WATCH_MASK                                                                     \
    (IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | \
     IN_ATTRIB | IN_CLOSE_WRITE)

struct repo S = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = {-1, -1}, .ino = -1};

uint64_t repo__mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 29);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void note_apply(uint64_t keys, double seconds)
{
    pthread_mutex_lock(&S.lock);
    S.metrics.overlay_applies++;
    S.metrics.overlay_keys += keys;
    S.metrics.last_apply_keys = keys;
    S.metrics.last_apply_seconds = seconds;
    pthread_mutex_unlock(&S.lock);
}

static uint64_t stat_sig(uint64_t h, const struct stat *st)
{
    h = repo__mix(h, (uint64_t)st->st_ino);
    h = repo__mix(h, (uint64_t)st->st_size);
    h = repo__mix(h, (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec);
    return repo__mix(h, (uint64_t)st->st_ctim.tv_nsec);
}

/* Signature of one version directory: its stat and its files' (in
 * directory order, which changes only when the directory does).  0 when
 * it cannot be read (a changed state too). */
uint64_t repo__version_sig(const char *model_dir, uint64_t v)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%" PRIu64, model_dir, v);
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    uint64_t h = repo__mix(0x5eed, v);
    if (fstat(fd, &st) == 0)
        h = stat_sig(h, &st);
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return h;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
            h = stat_sig(h, &st);
        for (const char *c = e->d_name; *c; c++)
            h = repo__mix(h, (unsigned char)*c);
    }
    closedir(d);
    return h;
}

uint64_t repo_pick_version(const uint64_t *versions, size_t n,
                           int (*refused)(void *arg, uint64_t version), void *arg)
{
    for (size_t i = n; i-- > 0;)
        if (!refused || !refused(arg, versions[i]))
            return versions[i];
    return 0;
}

static int valid_model_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= 64 || s[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '.' || s[i] == '-'))
            return 0;
    return 1;
}

int repo_pick_model(const server_config_t *cfg, char *model, size_t len, char *why,
                    size_t why_len)
{
    if (cfg->model_name[0]) {
        snprintf(model, len, "%s", cfg->model_name);
        return 0;
    }
    DIR *d = opendir(cfg->model_repo);
    if (!d) {
        snprintf(why, why_len, "cannot read the model repository '%s': %s", cfg->model_repo,
                 strerror(errno));
        return -1;
    }
    unsigned n = 0;
    char first[64] = "", second[64] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!valid_model_name(e->d_name) || store_version_is_temp(e->d_name))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, 0) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if (n == 0)
            snprintf(first, sizeof first, "%s", e->d_name);
        else if (n == 1)
            snprintf(second, sizeof second, "%s", e->d_name);
        n++;
    }
    closedir(d);
    if (n == 0) {
        snprintf(why, why_len,
                 "the model repository '%s' holds no model directory (<repo>/<model>/<version>/); "
                 "name the model to wait for with --model-name",
                 cfg->model_repo);
        return -1;
    }
    if (n > 1) {
        snprintf(why, why_len,
                 "the model repository '%s' holds %u models ('%s', '%s'...): name the one to "
                 "serve with --model-name",
                 cfg->model_repo, n, first, second);
        return -1;
    }
    snprintf(model, len, "%s", first);
    return 0;
}

/* ---- the chain loader (loader thread) ----------------------------------------- */

static int set_err(store_error_t *err, store_errc_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int set_err(store_error_t *err, store_errc_t code, const char *fmt, ...)
{
    memset(err, 0, sizeof *err);
    err->code = code;
    err->offset = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return store_errc_errno(code);
}

/* The chain's deltas after the active version, as one overlay over it
 * (overlay.h): memory and time of the deltas, not of the model.  Applies when
 * the active version is a link of the chain (same model, version and
 * manifest time: the very version of this repository) and not the last.
 * Returns -ENOENT when it does not apply (the caller rebuilds the chain),
 * else 0 or the refusal. */
static int open_over_active(server_t *srv, const char *model, const char *model_dir,
                            const store_chain_t *chain, server_model_t **out, store_error_t *err)
{
    server_model_t *act = server_model_acquire_named(srv, model);
    if (!act)
        return -ENOENT;
    const store_meta_t *am = model_meta(act->model);
    uint32_t at = chain->n;
    if (strcmp(am->model_name, model) == 0)
        for (uint32_t i = 0; i + 1 < chain->n; i++)
            if (chain->versions[i] == am->version && chain->created_unix[i] == am->created_unix)
                at = i;
    if (at == chain->n) {
        server_model_release(act);
        return -ENOENT;
    }
    uint32_t n = chain->n - 1 - at;
    store_delta_t **d = calloc(n, sizeof *d);
    model_t *m = NULL;
    int rc = d ? 0 : set_err(err, STORE_E_NOMEM, "no memory for %u deltas", n);
    uint64_t t0 = now_ns(), keys = 0;
    for (uint32_t i = 0; i < n && rc == 0; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%" PRIu64, model_dir, chain->versions[at + 1 + i]);
        rc = store_delta_open(path, &d[i], err);
        if (rc == 0)
            keys += store_delta_info(d[i])->upserts + store_delta_info(d[i])->deletes;
    }
    uint64_t t1 = now_ns();
    if (rc == 0)
        rc = model_apply_deltas(act->model, d, n, &m, err);
    for (uint32_t i = 0; d && i < n; i++)
        store_delta_close(d[i]);
    free(d);
    if (rc == -E2BIG) { /* too many overlays stacked: rebuild */
        LOG(LL_INFO, "repo: %s", err->msg);
        rc = -ENOENT;
    }
    if (rc == 0) {
        uint64_t t2 = now_ns();
        rc = server_model_wrap(m, out);
        if (rc != 0) {
            model_destroy(m);
            rc = set_err(err, STORE_E_NOMEM, "no memory for the handle of version %" PRIu64,
                         chain->versions[chain->n - 1]);
        } else {
            double s = (double)(t2 - t0) * 1e-9;
            LOG(LL_INFO,
                "repo: version %" PRIu64 " = version %" PRIu64 " + %u delta(s), %" PRIu64
                " keys as an overlay in %.3f s (read and verified %.3f s; %.1f M keys/s)",
                chain->versions[chain->n - 1], am->version, n, keys, s,
                (double)(t1 - t0) * 1e-9, s > 0 ? (double)keys / s * 1e-6 : 0.0);
            note_apply(keys, s);
        }
    }
    server_model_release(act);
    return rc;
}

int repo_open_version(server_t *srv, const char *model_dir, uint64_t version,
                      server_model_t **out, store_error_t *err)
{
    const char *slash = strrchr(model_dir, '/');
    const char *model = slash ? slash + 1 : model_dir;
    store_chain_t *chain = malloc(sizeof *chain);
    store_t *s = NULL;
    store_extras_t x;
    memset(&x, 0, sizeof x);
    model_t *m = NULL;
    char path[1200];
    int rc;
    if (!chain)
        return set_err(err, STORE_E_NOMEM, "no memory to resolve the chain of version %" PRIu64,
                    version);
    rc = store_version_chain(model_dir, version, chain, err);
    if (rc != 0)
        goto out;
    rc = open_over_active(srv, model, model_dir, chain, out, err);
    if (rc != -ENOENT)
        goto out; /* applied as an overlay, or refused */
    store_meta_t meta;
    snprintf(path, sizeof path, "%s/%" PRIu64, model_dir, chain->versions[0]);
    if (chain->n == 1) {
        /* A full version: loaded with its extras, as an admin load is. */
        rc = model_load(path, srv->cfg.load_threads, &m, err);
        if (rc != 0)
            goto out;
        meta = *model_meta(m);
    } else {
        rc = store_snapshot_load_ex(path, srv->cfg.load_threads, &s, &meta, &x, err);
        if (rc != 0)
            goto out;
    }
    if (strcmp(meta.model_name, model) != 0) {
        rc = set_err(err, STORE_E_MISMATCH,
                  "version %" PRIu64 " holds model '%s', not '%s' (its repository directory)",
                  chain->versions[0], meta.model_name, model);
        goto out;
    }
    if (chain->n > 1) {
        for (uint32_t i = 1; i < chain->n; i++) {
            store_delta_t *d = NULL;
            snprintf(path, sizeof path, "%s/%" PRIu64, model_dir, chain->versions[i]);
            rc = store_delta_open(path, &d, err);
            if (rc == 0)
                rc = store_delta_apply(s, &meta, d, err);
            store_delta_close(d);
            if (rc != 0)
                goto out;
        }
        /* The extras (params, dense arrays) are the full snapshot's: deltas
         * carry none, and their producers refuse a change of params. */
        rc = model_from_store_ex(s, &meta, &x, &m, err);
        if (rc != 0)
            goto out;
        s = NULL; /* the model owns it and x's arrays */
    }
    rc = server_model_wrap(m, out);
    if (rc != 0)
        rc = set_err(err, STORE_E_NOMEM, "no memory for the handle of version %" PRIu64, version);
    else
        m = NULL;
out:
    model_destroy(m);
    store_destroy(s);
    store_extras_free(&x);
    free(chain);
    return rc;
}

/* ---- the watcher ---------------------------------------------------------------- */

/* Wakes the watcher.  S.lock held (repo_stop closes the pipe under it). */
void repo__wake(void)
{
    if (S.wake[1] >= 0) {
        char c = 1;
        ssize_t n = write(S.wake[1], &c, 1); /* a full pipe already wakes it */
        (void)n;
    }
}

static int is_refused(void *arg, uint64_t version)
{
    (void)arg;
    if (version <= S.refused_floor)
        return 1;
    for (unsigned i = 0; i < S.n_rolled_back; i++)
        if (S.rolled_back[i] == version)
            return 1;
    for (unsigned i = 0; i < S.n_refused; i++)
        if (S.refused[i].version == version)
            return 1;
    return 0;
}

/* Records the refusal of version (S.lock held): kept ascending by
 * version, the lowest forgotten when full. */
static void add_refusal(uint64_t version, uint64_t sig, const char *error)
{
    for (unsigned i = 0; i < S.n_refused; i++)
        if (S.refused[i].version == version) {
            snprintf(S.refused[i].error, sizeof S.refused[i].error, "%s", error);
            S.refused_sig[i] = sig;
            return;
        }
    if (S.n_refused == REPO_REFUSED_MAX) {
        /* Forgetting the lowest must not make it a candidate again (with
         * every higher one refused it would be retried forever). */
        if (S.refused[0].version > S.refused_floor)
            S.refused_floor = S.refused[0].version;
        memmove(&S.refused[0], &S.refused[1], (REPO_REFUSED_MAX - 1) * sizeof S.refused[0]);
        memmove(&S.refused_sig[0], &S.refused_sig[1], (REPO_REFUSED_MAX - 1) * sizeof S.refused_sig[0]);
        S.n_refused--;
    }
    unsigned at = S.n_refused;
    while (at > 0 && S.refused[at - 1].version > version)
        at--;
    memmove(&S.refused[at + 1], &S.refused[at], (S.n_refused - at) * sizeof S.refused[0]);
    memmove(&S.refused_sig[at + 1], &S.refused_sig[at], (S.n_refused - at) * sizeof S.refused_sig[0]);
    S.refused[at].version = version;
    snprintf(S.refused[at].error, sizeof S.refused[at].error, "%s", error);
    S.refused_sig[at] = sig;
    S.n_refused++;
}

/* loader_done_fn of the watcher's loads (loader thread, or loader_stop's). */
void repo__load_ended(const loader_status_t *st, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&S.lock);
    if (S.loading == st->version)
        S.loading = 0;
    if (st->state == LOADER_FAILED && !st->shutdown) {
        add_refusal(st->version, S.loading_sig, st->error);
        S.metrics.refused++;
        S.pending = true; /* try the next lower version */
        LOG(LL_WARN,
            "repo: version %" PRIu64 " of %s refused (load %" PRIu64 " above says why); not "
            "tried again until its files or a lower version's change",
            st->version, S.model, st->id);
    }
    repo__wake(); /* also after a success: a version that appeared meanwhile is picked at once */
    pthread_mutex_unlock(&S.lock);
}

int repo__open(server_t *srv, const loader_status_t *st, void *arg, server_model_t **out,
                     store_error_t *err)
{
    (void)arg;
    return repo_open_version(srv, S.model_dir, st->version, out, err);
}

/* The active version's model name and version (0 when none). */
static uint64_t active_version(server_t *srv, char *name, size_t len)
{
    server_model_t *sm = server_model_acquire_named(srv, S.model);
    uint64_t v = 0;
    name[0] = '\0';
    if (sm) {
        const store_meta_t *meta = model_meta(sm->model);
        v = meta->version;
        snprintf(name, len, "%s", meta->model_name);
        server_model_release(sm);
    }
    return v;
}

/* One scan; *versions and *prefix (*cap entries each) grow with the
 * listing. */
static void scan(uint64_t **versions_p, uint64_t **prefix_p, size_t *cap)
{
    if (S.ino >= 0) {
        inotify_add_watch(S.ino, S.dir, REPO_WATCH_MASK);
        inotify_add_watch(S.ino, S.model_dir, REPO_WATCH_MASK);
    }
    long n = store_version_list(S.model_dir, *versions_p, *cap);
    if (n > (long)*cap) {
        size_t want = (size_t)n + 256;
        uint64_t *v = realloc(*versions_p, want * sizeof *v);
        if (v)
            *versions_p = v;
        uint64_t *p = v ? realloc(*prefix_p, want * sizeof *p) : NULL;
        if (p) {
            *prefix_p = p;
            *cap = want;
            n = store_version_list(S.model_dir, *versions_p, *cap);
        }
    }
    uint64_t *versions = *versions_p, *prefix = *prefix_p;
    pthread_mutex_lock(&S.lock);
    S.metrics.scans++;
    if (n < 0) {
        if (S.readable || S.listing_sig == 0) {
            S.metrics.repo_errors++;
            LOG(LL_WARN, "repo: cannot list the versions in %s: %s (the active version keeps "
                "serving; rescanning every %d ms)", S.model_dir, strerror((int)-n), REPO_RESCAN_MS);
        }
        S.readable = false;
        S.listing_sig = 1; /* any later listing differs */
        pthread_mutex_unlock(&S.lock);
        return;
    }
    if (!S.readable && S.listing_sig != 0)
        LOG(LL_INFO, "repo: %s is readable again", S.model_dir);
    S.readable = true;
    pthread_mutex_unlock(&S.lock);

    if (n > (long)*cap) {
        LOG(LL_WARN, "repo: no memory to list the %ld versions of %s; only the %zu lowest are "
            "considered", n, S.model_dir, *cap);
        n = (long)*cap;
    }
    uint64_t h = 0x7265706f;
    for (long i = 0; i < n; i++) {
        h = repo__mix(h, repo__version_sig(S.model_dir, versions[i]));
        prefix[i] = h;
    }
    uint64_t listing = repo__mix(h, (uint64_t)n) | 2; /* never 0 or 1 */

    char active_name[64];
    uint64_t active = active_version(S.srv, active_name, sizeof active_name);

    pthread_mutex_lock(&S.lock);
    if (listing != S.listing_sig) {
        S.listing_sig = listing;
        S.pending = true;
        S.said_none = false;
    }
    S.latest = n > 0 ? versions[n - 1] : 0;
    /* Forget refusals whose version or lower ones changed. */
    for (unsigned i = 0; i < S.n_refused;) {
        long at = -1;
        for (long j = 0; j < n; j++)
            if (versions[j] == S.refused[i].version)
                at = j;
        if (at < 0 || prefix[at] != S.refused_sig[i]) {
            LOG(LL_INFO, "repo: version %" PRIu64 " %s: it will be tried again if picked",
                S.refused[i].version, at < 0 ? "is gone" : "or a lower one changed");
            memmove(&S.refused[i], &S.refused[i + 1], (S.n_refused - i - 1) * sizeof S.refused[0]);
            memmove(&S.refused_sig[i], &S.refused_sig[i + 1],
                    (S.n_refused - i - 1) * sizeof S.refused_sig[0]);
            S.n_refused--;
            S.pending = true;
        } else {
            i++;
        }
    }
    if (!S.pending || S.loading || S.pinned) {
        pthread_mutex_unlock(&S.lock);
        return;
    }
    uint64_t target = repo_pick_version(versions, (size_t)n, is_refused, NULL);
    if (target == 0) {
        if (!S.said_none)
            LOG(LL_WARN, "repo: %s has no servable version (%ld versions, %u refused)%s",
                S.model_dir, n, S.n_refused,
                active ? ": the active version keeps serving" : "");
        S.said_none = true;
        S.pending = false;
        pthread_mutex_unlock(&S.lock);
        return;
    }
    if (active == target && strcmp(active_name, S.model) == 0) {
        S.pending = false;
        pthread_mutex_unlock(&S.lock);
        return;
    }
    uint64_t from;
    if (server_model_activate_kept(S.srv, S.model, target, &from) == 0) {
        S.pending = false; /* kept loaded: made active by a pointer swap, no load */
        LOG(LL_INFO, "repo: %s version %" PRIu64 " active again (it was kept loaded)", S.model,
            target);
        pthread_mutex_unlock(&S.lock);
        return;
    }
    long at = 0;
    while (versions[at] != target)
        at++;
    char path[1200];
    snprintf(path, sizeof path, "%s/%" PRIu64, S.model_dir, target);
    loader_job_t job = {.name = S.model,
                        .dir = path,
                        .version = target,
                        .open = repo__open,
                        .done = repo__load_ended};
    loader_status_t st;
    S.loading = target; /* before the submit: the done hook may run at once */
    S.loading_sig = prefix[at];
    int rc = loader_submit_job(&job, &st);
    if (rc == 0) {
        S.pending = false;
        LOG(LL_INFO, "repo: load %" PRIu64 " of %s version %" PRIu64 " queued (latest that is "
            "not refused)", st.id, S.model, target);
    } else {
        S.loading = 0; /* busy (an admin load, a full queue) or stopping: next scan */
        LOG(LL_DEBUG, "repo: cannot queue version %" PRIu64 " yet: %s", target, strerror(-rc));
    }
    pthread_mutex_unlock(&S.lock);
}

static void *repo_main(void *arg)
{
    (void)arg;
    size_t cap = REPO_VERSIONS_START;
    uint64_t *versions = malloc(cap * sizeof *versions);
    uint64_t *prefix = malloc(cap * sizeof *prefix);
    if (!versions || !prefix)
        abort(); /* a few KiB of control plane */
    for (;;) {
        pthread_mutex_lock(&S.lock);
        bool stop = S.stopping;
        pthread_mutex_unlock(&S.lock);
        if (stop)
            break;
        scan(&versions, &prefix, &cap);
        struct pollfd p[2] = {{.fd = S.wake[0], .events = POLLIN}, {.fd = S.ino, .events = POLLIN}};
        int rc = poll(p, S.ino >= 0 ? 2 : 1, REPO_RESCAN_MS);
        if (rc <= 0)
            continue;
        char buf[4096] __attribute__((aligned(8)));
        if (p[0].revents & POLLIN)
            while (read(S.wake[0], buf, sizeof buf) > 0)
                ;
        if (S.ino >= 0 && (p[1].revents & POLLIN)) {
            /* Any event means "scan"; let a burst (a writer's renames) settle. */
            usleep(20000);
            while (read(S.ino, buf, sizeof buf) > 0)
                ;
        }
    }
    free(versions);
    free(prefix);
    return NULL;
}

int repo_start(server_t *srv, const char *model)
{
    pthread_mutex_lock(&S.lock);
    S.srv = srv;
    snprintf(S.dir, sizeof S.dir, "%s", srv->cfg.model_repo);
    snprintf(S.model, sizeof S.model, "%s", model);
    snprintf(S.model_dir, sizeof S.model_dir, "%s/%s", S.dir, S.model);
    S.stopping = false;
    S.readable = false;
    S.pending = true;
    S.listing_sig = 0;
    S.loading = 0;
    S.n_refused = 0;
    S.refused_floor = 0;
    S.pinned = 0;
    S.n_rolled_back = 0;
    pthread_mutex_unlock(&S.lock);
    if (pipe2(S.wake, O_NONBLOCK | O_CLOEXEC) != 0)
        return -errno;
    S.ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (S.ino < 0)
        LOG(LL_WARN, "repo: no inotify (%s): new versions are found by the rescan every %d ms",
            strerror(errno), REPO_RESCAN_MS);
    int rc = -pthread_create(&S.thread, NULL, repo_main, NULL);
    if (rc != 0) {
        close(S.wake[0]);
        close(S.wake[1]);
        S.wake[0] = S.wake[1] = -1;
        if (S.ino >= 0)
            close(S.ino);
        S.ino = -1;
        return rc;
    }
    pthread_mutex_lock(&S.lock);
    S.running = true;
    pthread_mutex_unlock(&S.lock);
    LOG(LL_INFO, "repo: serving model %s from %s (latest version; rescan every %d ms)", model,
        S.dir, REPO_RESCAN_MS);
    return 0;
}

void repo_stop(void)
{
    pthread_mutex_lock(&S.lock);
    bool running = S.running;
    S.stopping = true;
    if (running)
        repo__wake();
    pthread_mutex_unlock(&S.lock);
    if (!running)
        return;
    pthread_join(S.thread, NULL);
    pthread_mutex_lock(&S.lock);
    S.running = false;
    close(S.wake[0]);
    close(S.wake[1]);
    S.wake[0] = S.wake[1] = -1;
    if (S.ino >= 0)
        close(S.ino);
    S.ino = -1;
    pthread_mutex_unlock(&S.lock);
}

void repo_get_status(repo_status_t *out)
{
    pthread_mutex_lock(&S.lock);
    memset(out, 0, sizeof *out);
    out->enabled = S.running;
    if (S.running) {
        snprintf(out->dir, sizeof out->dir, "%s", S.dir);
        snprintf(out->model, sizeof out->model, "%s", S.model);
        out->readable = S.readable;
        out->latest = S.latest;
        out->loading = S.loading;
        out->n_refused = S.n_refused;
        memcpy(out->refused, S.refused, S.n_refused * sizeof S.refused[0]);
        out->pinned = S.pinned;
        out->n_rolled_back = S.n_rolled_back;
        memcpy(out->rolled_back, S.rolled_back, S.n_rolled_back * sizeof S.rolled_back[0]);
    }
    pthread_mutex_unlock(&S.lock);
}

void repo_get_metrics(repo_metrics_t *out)
{
    pthread_mutex_lock(&S.lock);
    *out = S.metrics;
    pthread_mutex_unlock(&S.lock);
}
