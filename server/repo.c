/*
 * repo.c — the model repository: a watcher thread that finds, for every
 * model <repo>/<model>/ served, the version to serve and queues it to the
 * loader, which builds it with the chain loader (repo_chain.c; repo.h
 * states the policy).
 *
 *   inotify (repo dir, model dirs) ─┐   for each model (its own struct repo_model):
 *   every REPO_RESCAN_MS ───────────┼─> scan: list versions, sign each one's files,
 *   a refused load (wake pipe) ─────┘        forget refusals whose files changed,
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
 *   not retry a refused lower one.  A refusal kept across restarts (the
 *   gate's, the lineage check's) is signed by its own chain instead (KEPT
 *   REFUSALS, below).  The listing's signature (all versions)
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
 *   A scan stats every file of every version of every model, reads the
 *   manifests of the kept refusals' chains, and lists the repository for
 *   new models (repo_models.c).  Loads of several models are queued to the
 *   one loader thread and run one after the other.
 *
 * THREAD SAFETY
 *   One state (repo_impl.h; one repository per process, one struct
 *   repo_model per model), all under R.lock; the watcher drops it to list
 *   and stat the directories.  The done hook runs
 *   on the loader thread (or loader_stop's) and only takes the lock.
 */
#define _GNU_SOURCE
#include "repo.h"
#include "repo_impl.h"

#include "log.h"
#include "online.h"
#include "store/delta.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define REPO_WATCH_MASK                                                                     \
    (IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | \
     IN_ATTRIB | IN_CLOSE_WRITE)

struct repo R = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = {-1, -1}, .ino = -1};

uint64_t repo__mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 29);
}

void repo__note_apply(uint64_t keys, double seconds)
{
    pthread_mutex_lock(&R.lock);
    R.metrics.overlay_applies++;
    R.metrics.overlay_keys += keys;
    R.metrics.last_apply_keys = keys;
    R.metrics.last_apply_seconds = seconds;
    pthread_mutex_unlock(&R.lock);
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

/* ---- the watcher ---------------------------------------------------------------- */

/* Wakes the watcher.  R.lock held (repo_stop closes the pipe under it). */
void repo__wake(void)
{
    if (R.wake[1] >= 0) {
        char c = 1;
        ssize_t n = write(R.wake[1], &c, 1); /* a full pipe already wakes it */
        (void)n;
    }
}

struct repo_model *repo__find(const char *model)
{
    if (!R.running || !model)
        return NULL;
    for (unsigned i = 0; i < R.n_models; i++)
        if (strcmp(R.models[i].model, model) == 0)
            return &R.models[i];
    return NULL;
}

/* refused(arg, version) of repo_pick_version: arg is the model's state. */
static int is_refused(void *arg, uint64_t version)
{
    const struct repo_model *r = arg;
    if (version <= r->refused_floor)
        return 1;
    for (unsigned i = 0; i < r->n_rolled_back; i++)
        if (r->rolled_back[i] == version)
            return 1;
    for (unsigned i = 0; i < r->n_refused; i++)
        if (r->refused[i].version == version)
            return 1;
    return 0;
}

/* Records the refusal of version in r (R.lock held): kept ascending by
 * version, the lowest forgotten when full. */
void repo__add_refusal(struct repo_model *r, uint64_t version, uint64_t sig, const char *error)
{
    for (unsigned i = 0; i < r->n_refused; i++)
        if (r->refused[i].version == version) {
            snprintf(r->refused[i].error, sizeof r->refused[i].error, "%s", error);
            r->refused_sig[i] = sig;
            r->refused[i].by_admin = false;
            r->refused[i].by_gate = r->refused[i].by_lineage = false;
            r->marks_dirty = true; /* it may have been a kept one */
            return;
        }
    if (r->n_refused == REPO_REFUSED_MAX) {
        /* Forgetting the lowest must not make it a candidate again (with
         * every higher one refused it would be retried forever). */
        if (r->refused[0].version > r->refused_floor)
            r->refused_floor = r->refused[0].version;
        memmove(&r->refused[0], &r->refused[1], (REPO_REFUSED_MAX - 1) * sizeof r->refused[0]);
        memmove(&r->refused_sig[0], &r->refused_sig[1],
                (REPO_REFUSED_MAX - 1) * sizeof r->refused_sig[0]);
        r->n_refused--;
        r->marks_dirty = true;
    }
    unsigned at = r->n_refused;
    while (at > 0 && r->refused[at - 1].version > version)
        at--;
    memmove(&r->refused[at + 1], &r->refused[at], (r->n_refused - at) * sizeof r->refused[0]);
    memmove(&r->refused_sig[at + 1], &r->refused_sig[at],
            (r->n_refused - at) * sizeof r->refused_sig[0]);
    r->refused[at].version = version;
    r->refused[at].by_admin = false;
    r->refused[at].by_gate = r->refused[at].by_lineage = false;
    snprintf(r->refused[at].error, sizeof r->refused[at].error, "%s", error);
    r->refused_sig[at] = sig;
    r->n_refused++;
}

/* loader_done_fn of the watcher's loads (loader thread, or loader_stop's). */
void repo__load_ended(const loader_status_t *st, void *arg)
{
    struct repo_model *r = arg;
    pthread_mutex_lock(&R.lock);
    if (r->loading == st->version)
        r->loading = 0;
    if (st->state == LOADER_DONE) { /* its chain's files as they are: the next scan signs them */
        r->served = st->version;
        r->served_sig = 0;
    }
    bool pin_load = r->pin_loading && st->version == r->pinned;
    if (st->version == r->pinned)
        r->pin_loading = false;
    uint64_t lineage_refused = r->lineage_refused;
    if (r->lineage_refused == st->version)
        r->lineage_refused = 0;
    if (st->state == LOADER_FAILED && !st->shutdown) {
        repo__add_refusal(r, st->version, r->loading_sig, st->error);
        /* Kept across a restart: the gate's traffic is gone then, and a
         * restart has no active version to check the lineage against. */
        bool by_lineage = lineage_refused == st->version;
        if (st->gate_refused || by_lineage) {
            for (unsigned i = 0; i < r->n_refused; i++)
                if (r->refused[i].version == st->version) {
                    r->refused[i].by_gate = st->gate_refused;
                    r->refused[i].by_lineage = !st->gate_refused;
                    r->refused_sig[i] = 0; /* its chain's, signed by the next scan */
                }
            r->marks_dirty = true;
        }
        R.metrics.refused++;
        r->pending = true; /* try the next lower version */
        LOG(LL_WARN,
            "repo: version %" PRIu64 " of %s refused (load %" PRIu64 " above says why); not "
            "tried again until its files or a lower version's change",
            st->version, r->model, st->id);
        if (pin_load) {
            LOG(LL_WARN, "repo: %s was pinned to version %" PRIu64 " before the restart, which "
                "does not load now: unpinned, the latest policy serves", r->model, st->version);
            r->pinned = 0;
            r->marks_dirty = true;
        }
    }
    repo__wake(); /* also after a success: a version that appeared meanwhile is picked at once */
    /* Once the watcher is stopping it flushes no more (a load loader_stop
     * lets finish can still be refused by the gate): write the marks here. */
    bool flush_now = R.stopping && r->marks_dirty;
    pthread_mutex_unlock(&R.lock);
    if (flush_now)
        repo__marks_flush();
}

int repo__open(server_t *srv, const loader_status_t *st, void *arg, server_model_t **out,
               store_error_t *err)
{
    struct repo_model *r = arg;
    repo_open_opts_t o = {.explicit_load = false};
    pthread_mutex_lock(&R.lock);
    o.explicit_load = r->pinned == st->version; /* the admin's activation (or its pin) */
    o.n_rolled_back = r->n_rolled_back;
    memcpy(o.rolled_back, r->rolled_back, r->n_rolled_back * sizeof r->rolled_back[0]);
    pthread_mutex_unlock(&R.lock);
    int rc = repo__open_chain(srv, r->model_dir, st->version, &o, out, err);
    if (o.lineage_refused) { /* repo__load_ended keeps this refusal in the marks */
        pthread_mutex_lock(&R.lock);
        r->lineage_refused = st->version;
        pthread_mutex_unlock(&R.lock);
    }
    return rc;
}

/* The active version of model and its manifest's model name (0 when none). */
static uint64_t active_version(server_t *srv, const char *model, char *name, size_t len)
{
    server_model_t *sm = server_model_acquire_named(srv, model);
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

/* Queues the load of version target of r (R.lock held); prefix_sig is its
 * prefix signature.  0 when queued, else the loader's -errno. */
static int queue_load(struct repo_model *r, uint64_t target, uint64_t prefix_sig)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%" PRIu64, r->model_dir, target);
    loader_job_t job = {.name = r->model,
                        .dir = path,
                        .version = target,
                        .open = repo__open,
                        .open_arg = r,
                        .done = repo__load_ended,
                        .done_arg = r};
    loader_status_t st;
    r->loading = target; /* before the submit: the done hook may run at once */
    r->loading_sig = prefix_sig;
    int rc = loader_submit_job(&job, &st);
    if (rc == 0) {
        r->pending = false;
        LOG(LL_INFO, "repo: load %" PRIu64 " of %s version %" PRIu64 " queued (latest that is "
            "not refused)", st.id, r->model, target);
    } else {
        r->loading = 0; /* busy (an admin load, a full queue) or stopping: next scan */
        LOG(LL_DEBUG, "repo: cannot queue %s version %" PRIu64 " yet: %s", r->model, target,
            strerror(-rc));
    }
    return rc;
}

/* The first entry of model_dir that the version listing skips although a
 * user may have meant it as a version ("001", "v2", "2.bak"; not dot names
 * or temporaries) into out, for the "no servable version" warning: "" when
 * none.  Blocks (one readdir). */
cold static void first_non_version(const char *model_dir, char *out, size_t len)
{
    out[0] = '\0';
    DIR *d = opendir(model_dir);
    if (!d)
        return;
    struct dirent *e;
    uint64_t v;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && !store_version_is_temp(e->d_name) &&
            !store_version_parse(e->d_name, &v)) {
            snprintf(out, len, "%s", e->d_name);
            break;
        }
    closedir(d);
}

/* KEPT REFUSALS (the gate's, the lineage check's: repo_marks.h) are signed
 * by their own chain, not by every lower version as a load's refusal is:
 * they outlive a restart, and deleting an old version that is not a link
 * of theirs (retention) must not forget them, or the restarted gate, with
 * no traffic, would pass what it refused.  The signature mixes the version
 * signature of every link, 1 when the chain does not resolve.  Blocks
 * (reads the chain's manifests); never 0. */
static uint64_t chain_sig(const char *model_dir, uint64_t version)
{
    store_chain_t *c = malloc(sizeof *c);
    store_error_t err;
    if (!c || store_version_chain(model_dir, version, c, &err) != 0) {
        free(c);
        return 1;
    }
    uint64_t h = 0x636861696e;
    for (uint32_t i = 0; i < c->n; i++)
        h = repo__mix(h, repo__version_sig(model_dir, c->versions[i]));
    free(c);
    return h | 2;
}

/* The first scan after a restart of a model pinned in its marks file
 * (repo_persist.c): serves the pinned version, or unpins when it is gone.
 * R.lock held. */
static void restore_pin(struct repo_model *r, const uint64_t *versions, const uint64_t *prefix,
                        long n, uint64_t active, const char *active_name)
{
    long at = -1;
    for (long j = 0; j < n; j++)
        if (versions[j] == r->pinned)
            at = j;
    uint64_t from;
    if (at < 0 || is_refused(r, r->pinned)) {
        /* Refused too: its load failed while pinned (the gate's refusal
         * is kept), and the version served then is not known. */
        LOG(LL_WARN, "repo: %s was pinned to version %" PRIu64 " before the restart, which is "
            "%s %s: unpinned, the latest policy serves", r->model, r->pinned,
            at < 0 ? "no longer in" : "refused in", r->model_dir);
        r->pinned = 0;
        r->pin_restored = false;
        r->pending = true;
        r->marks_dirty = true;
    } else if ((active == r->pinned && strcmp(active_name, r->model) == 0) ||
               server_model_activate_kept(R.srv, r->model, r->pinned, &from) == 0) {
        r->pin_restored = false;
    } else if (queue_load(r, r->pinned, prefix[at]) == 0) {
        r->pin_restored = false;
        r->pin_loading = true;
        LOG(LL_INFO, "repo: %s is pinned to version %" PRIu64 " (its marks file): loading it, "
            "not the latest", r->model, r->pinned);
    } /* else the loader is busy: the next scan tries again */
}

/* One scan of model r; *versions and *prefix (*cap entries each) grow with
 * the listing.  r's name and dir are immutable: read without the lock. */
static void scan(struct repo_model *r, uint64_t **versions_p, uint64_t **prefix_p, size_t *cap)
{
    if (R.ino >= 0)
        inotify_add_watch(R.ino, r->model_dir, REPO_WATCH_MASK);
    long n = store_version_list(r->model_dir, *versions_p, *cap);
    if (n > (long)*cap) {
        size_t want = (size_t)n + 256;
        uint64_t *v = realloc(*versions_p, want * sizeof *v);
        if (v)
            *versions_p = v;
        uint64_t *p = v ? realloc(*prefix_p, want * sizeof *p) : NULL;
        if (p) {
            *prefix_p = p;
            *cap = want;
            n = store_version_list(r->model_dir, *versions_p, *cap);
        }
    }
    uint64_t *versions = *versions_p, *prefix = *prefix_p;
    pthread_mutex_lock(&R.lock);
    R.metrics.scans++;
    if (n < 0) {
        if (r->readable || r->listing_sig == 0) {
            R.metrics.repo_errors++;
            LOG(LL_WARN, "repo: cannot list the versions in %s: %s (the active version keeps "
                "serving; rescanning every %d ms)", r->model_dir, strerror((int)-n),
                REPO_RESCAN_MS);
        }
        r->readable = false;
        r->listing_sig = 1; /* any later listing differs */
        pthread_mutex_unlock(&R.lock);
        return;
    }
    if (!r->readable && r->listing_sig != 0)
        LOG(LL_INFO, "repo: %s is readable again", r->model_dir);
    r->readable = true;
    pthread_mutex_unlock(&R.lock);

    if (n > (long)*cap) {
        LOG(LL_WARN, "repo: no memory to list the %ld versions of %s; only the %zu lowest are "
            "considered", n, r->model_dir, *cap);
        n = (long)*cap;
    }
    uint64_t h = 0x7265706f;
    for (long i = 0; i < n; i++) {
        h = repo__mix(h, repo__version_sig(r->model_dir, versions[i]));
        prefix[i] = h;
    }
    uint64_t listing = repo__mix(h, (uint64_t)n) | 2; /* never 0 or 1 */

    /* The kept refusals' chain signatures (KEPT REFUSALS), read without the lock. */
    uint64_t kept_v[REPO_REFUSED_MAX], kept_sig[REPO_REFUSED_MAX];
    unsigned nk = 0;
    pthread_mutex_lock(&R.lock);
    for (unsigned i = 0; i < r->n_refused; i++)
        if (r->refused[i].by_gate || r->refused[i].by_lineage)
            kept_v[nk++] = r->refused[i].version;
    /* a rewrite changes the listing: sign the active chain then, or when not signed yet */
    bool sign_active = listing != r->listing_sig || !r->served_sig;
    pthread_mutex_unlock(&R.lock);
    for (unsigned k = 0; k < nk; k++)
        kept_sig[k] = chain_sig(r->model_dir, kept_v[k]);

    char active_name[64];
    uint64_t active = active_version(R.srv, r->model, active_name, sizeof active_name);
    /* The active version's chain, to see it rewritten in place (same number, new files);
     * 0: not read this scan. */
    uint64_t active_chain = sign_active && active && strcmp(active_name, r->model) == 0
                                ? chain_sig(r->model_dir, active)
                                : 0;
    char skipped[NAME_MAX + 1]; /* with no version: a name the user may have meant as one */
    if (n == 0)
        first_non_version(r->model_dir, skipped, sizeof skipped);
    else
        skipped[0] = '\0';

    pthread_mutex_lock(&R.lock);
    if (r->served == active && !r->served_sig)
        r->served_sig = active_chain; /* the first scan since its load */
    if (active_chain) {
        r->active_sig = active_chain;
        r->active_sig_of = active;
    }
    /* Its files changed since it was loaded: as read this scan, or by an
     * earlier one whose pick was another version (which may fail). */
    bool rewritten = r->served == active && r->served_sig && r->active_sig_of == active &&
                     r->active_sig != r->served_sig;
    if (listing != r->listing_sig) {
        r->listing_sig = listing;
        r->pending = true;
        r->said_none = false;
    }
    r->latest = n > 0 ? versions[n - 1] : 0;
    /* Forget refusals whose version or lower ones changed (a kept one: its
     * own chain). */
    for (unsigned i = 0; i < r->n_refused;) {
        long at = -1;
        for (long j = 0; j < n; j++)
            if (versions[j] == r->refused[i].version)
                at = j;
        bool changed = at < 0 || prefix[at] != r->refused_sig[i];
        if (r->refused[i].by_gate || r->refused[i].by_lineage) {
            long k = -1;
            for (unsigned q = 0; q < nk; q++)
                if (kept_v[q] == r->refused[i].version)
                    k = q;
            if (k < 0) { /* refused since the signatures were read: the next scan */
                changed = false;
            } else if (r->refused_sig[i] == 0) { /* just refused: its chain as it is now */
                r->refused_sig[i] = kept_sig[k];
                r->marks_dirty = true;
                changed = at < 0;
            } else {
                changed = at < 0 || kept_sig[k] != r->refused_sig[i];
            }
        }
        if (!r->refused[i].by_admin && changed) {
            if (r->refused[i].by_gate || r->refused[i].by_lineage)
                r->marks_dirty = true;
            LOG(LL_INFO, "repo: %s version %" PRIu64 " %s: it will be tried again if picked",
                r->model, r->refused[i].version, at < 0 ? "is gone" : "or a lower one changed");
            memmove(&r->refused[i], &r->refused[i + 1],
                    (r->n_refused - i - 1) * sizeof r->refused[0]);
            memmove(&r->refused_sig[i], &r->refused_sig[i + 1],
                    (r->n_refused - i - 1) * sizeof r->refused_sig[0]);
            r->n_refused--;
            r->pending = true;
        } else {
            i++;
        }
    }
    uint64_t target = 0, from;
    if (r->pin_restored && !r->loading)
        restore_pin(r, versions, prefix, n, active, active_name);
    if (!r->pending || r->loading || r->pinned)
        goto out;
    target = repo_pick_version(versions, (size_t)n, is_refused, r);
    if (target == 0) {
        if (!r->said_none)
            LOG(LL_WARN, "repo: %s has no servable version (%ld versions, %u refused)%s%s%s%s",
                r->model_dir, n, r->n_refused, active ? ": the active version keeps serving" : "",
                skipped[0] ? "; '" : "", skipped,
                skipped[0] ? "' is not a version name (a version directory is named by its "
                             "number: 1, 2, ..., no leading zero)"
                           : "");
        r->said_none = true;
        r->pending = false;
    } else if (active == target && strcmp(active_name, r->model) == 0 && !rewritten) {
        r->pending = false;
    } else if (active == target && strcmp(active_name, r->model) == 0) {
        LOG(LL_WARN, "repo: %s version %" PRIu64 " was rewritten in place (its files changed "
            "since it was loaded): loading it again", r->model, target);
        long at = 0;
        while (versions[at] != target)
            at++;
        queue_load(r, target, prefix[at]);
    } else if (server_model_activate_kept(R.srv, r->model, target, &from) == 0) {
        r->pending = false; /* kept loaded: made active by a pointer swap, no load */
        LOG(LL_INFO, "repo: %s version %" PRIu64 " active again (it was kept loaded)", r->model,
            target);
    } else {
        long at = 0;
        while (versions[at] != target)
            at++;
        queue_load(r, target, prefix[at]);
    }
out:
    pthread_mutex_unlock(&R.lock);
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
        pthread_mutex_lock(&R.lock);
        bool stop = R.stopping;
        pthread_mutex_unlock(&R.lock);
        if (stop)
            break;
        if (R.ino >= 0)
            inotify_add_watch(R.ino, R.dir, REPO_WATCH_MASK);
        repo__find_new_models();
        pthread_mutex_lock(&R.lock);
        unsigned n_models = R.n_models; /* slots below it never change name or dir */
        pthread_mutex_unlock(&R.lock);
        for (unsigned i = 0; i < n_models; i++)
            scan(&R.models[i], &versions, &prefix, &cap);
        repo__marks_flush(); /* the gate's and lineage refusals, a restored pin dropped */
        struct pollfd p[2] = {{.fd = R.wake[0], .events = POLLIN}, {.fd = R.ino, .events = POLLIN}};
        int rc = poll(p, R.ino >= 0 ? 2 : 1, REPO_RESCAN_MS);
        if (rc <= 0)
            continue;
        char buf[4096] __attribute__((aligned(8)));
        if (p[0].revents & POLLIN)
            while (read(R.wake[0], buf, sizeof buf) > 0)
                ;
        if (R.ino >= 0 && (p[1].revents & POLLIN)) {
            /* Any event means "scan"; let a burst (a writer's renames) settle. */
            usleep(20000);
            while (read(R.ino, buf, sizeof buf) > 0)
                ;
        }
    }
    free(versions);
    free(prefix);
    return NULL;
}

/* Closes the wake pipe and the inotify fd (R.lock held; the watcher gone). */
static void close_fds_locked(void)
{
    close(R.wake[0]);
    close(R.wake[1]);
    R.wake[0] = R.wake[1] = -1;
    if (R.ino >= 0)
        close(R.ino);
    R.ino = -1;
}

/* 0, or -errno with why when --repo-marks-dir cannot hold the marks
 * files (made when missing). */
static int marks_dir_usable(const char *dir, char *why, size_t why_len)
{
    struct stat st;
    int e = 0;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        e = errno;
    else if (stat(dir, &st) != 0)
        e = errno;
    else if (!S_ISDIR(st.st_mode))
        e = ENOTDIR;
    else if (access(dir, R_OK | W_OK | X_OK) != 0)
        e = errno;
    if (e)
        snprintf(why, why_len, "--repo-marks-dir %s cannot hold the models' marks files: %s "
                 "(uid %u); name a directory this process can write in (made when missing)",
                 dir, strerror(e), (unsigned)geteuid());
    return -e;
}

int repo_start(server_t *srv, const char (*models)[64], unsigned n)
{
    if (n == 0 || n > SERVER_MODELS_MAX)
        return -EINVAL;
    online_export_set_refused(repo_refuses); /* the exporter waits for no refused version */
    pthread_mutex_lock(&R.lock);
    R.srv = srv;
    snprintf(R.dir, sizeof R.dir, "%s", srv->cfg.model_repo);
    R.fixed = srv->cfg.model_name[0] != '\0';
    R.stopping = false;
    R.n_models = 0;
    snprintf(R.marks_dir, sizeof R.marks_dir, "%s", srv->cfg.repo_marks_dir);
    char why[2400];
    int rc = R.marks_dir[0] ? marks_dir_usable(R.marks_dir, why, sizeof why) : 0;
    for (unsigned i = 0; i < n && rc == 0; i++)
        if ((rc = repo__add_model(models[i], why, sizeof why)) == -EEXIST)
            rc = 0;
    pthread_mutex_unlock(&R.lock);
    if (rc != 0) {
        LOG(LL_ERROR, "repo: %s", why);
        return rc;
    }
    repo__marks_lock();
    if (pipe2(R.wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        rc = -errno;
        repo__marks_unlock();
        return rc;
    }
    R.ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (R.ino < 0)
        LOG(LL_WARN, "repo: no inotify (%s): new versions are found by the rescan every %d ms",
            strerror(errno), REPO_RESCAN_MS);
    /* running before the thread: its first scan's repo__find must see it */
    pthread_mutex_lock(&R.lock);
    R.running = true;
    pthread_mutex_unlock(&R.lock);
    rc = -pthread_create(&R.thread, NULL, repo_main, NULL);
    if (rc != 0) {
        pthread_mutex_lock(&R.lock);
        R.running = false;
        close_fds_locked();
        pthread_mutex_unlock(&R.lock);
        repo__marks_unlock();
        return rc;
    }
    for (unsigned i = 0; i < n; i++)
        LOG(LL_INFO, "repo: serving model %s from %s (latest version; rescan every %d ms)",
            models[i], R.dir, REPO_RESCAN_MS);
    return 0;
}

void repo_stop(void)
{
    pthread_mutex_lock(&R.lock);
    bool running = R.running;
    R.stopping = true;
    if (running)
        repo__wake();
    pthread_mutex_unlock(&R.lock);
    if (!running)
        return;
    pthread_join(R.thread, NULL);
    repo__marks_flush(); /* a refusal the watcher had not written yet */
    pthread_mutex_lock(&R.lock);
    R.running = false;
    close_fds_locked();
    pthread_mutex_unlock(&R.lock);
    repo__marks_unlock(); /* after the last write */
}

unsigned repo_models(char (*names)[64], unsigned cap)
{
    pthread_mutex_lock(&R.lock);
    unsigned n = R.running ? R.n_models : 0;
    for (unsigned i = 0; i < n && i < cap; i++)
        snprintf(names[i], 64, "%s", R.models[i].model);
    pthread_mutex_unlock(&R.lock);
    return n;
}

uint64_t repo_pinned(const char *model)
{
    pthread_mutex_lock(&R.lock);
    const struct repo_model *r = repo__find(model);
    uint64_t pinned = r ? r->pinned : 0;
    pthread_mutex_unlock(&R.lock);
    return pinned;
}

bool repo_refuses(const char *model, uint64_t version)
{
    pthread_mutex_lock(&R.lock);
    struct repo_model *r = repo__find(model);
    bool refused = r && is_refused(r, version);
    pthread_mutex_unlock(&R.lock);
    return refused;
}

int repo_get_status(const char *model, repo_status_t *out)
{
    pthread_mutex_lock(&R.lock);
    memset(out, 0, sizeof *out);
    const struct repo_model *r =
        model ? repo__find(model) : R.running && R.n_models ? &R.models[0] : NULL;
    if (r) {
        out->enabled = true;
        snprintf(out->dir, sizeof out->dir, "%s", R.dir);
        snprintf(out->model, sizeof out->model, "%s", r->model);
        out->readable = r->readable;
        out->latest = r->latest;
        out->loading = r->loading;
        out->n_refused = r->n_refused;
        memcpy(out->refused, r->refused, r->n_refused * sizeof r->refused[0]);
        out->pinned = r->pinned;
        out->n_rolled_back = r->n_rolled_back;
        memcpy(out->rolled_back, r->rolled_back, r->n_rolled_back * sizeof r->rolled_back[0]);
    }
    pthread_mutex_unlock(&R.lock);
    return r ? 0 : -ENOENT;
}

void repo_get_metrics(repo_metrics_t *out)
{
    pthread_mutex_lock(&R.lock);
    *out = R.metrics;
    pthread_mutex_unlock(&R.lock);
}
