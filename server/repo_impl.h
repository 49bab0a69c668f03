/*
 * repo_impl.h — the watcher's state and helpers shared by repo.c (the
 * watcher), repo_chain.c (the chain loader) and repo_admin.c (the admin's
 * rollback, activate and pin).  Private to those files and their unit test.
 *
 *   struct repo R (one per process): dir, thread, inotify, wake pipe, lock, metrics
 *     models[0 .. n_models): struct repo_model, one per model directory served:
 *       name, dir, listing signature, latest, loading, refusals, pin, rolled back
 *
 * A model's state is passed explicitly (struct repo_model *r); slots are
 * only appended (a model that appears while running), never removed or
 * moved, so a pointer to one stays valid for the life of the process (the
 * loader's done hook may run after repo_stop, from loader_stop).
 */
#ifndef TL_SERVER_REPO_IMPL_H
#define TL_SERVER_REPO_IMPL_H

#include "repo.h"

#include <pthread.h>

/* One model of the repository: its own policy state.  Every field is
 * protected by R.lock, except the immutable ones marked so. */
struct repo_model {
    char model[64];       /* the model's name (immutable once listed) */
    char model_dir[1100]; /* <repo>/<model> (immutable once listed) */
    bool readable;        /* the last scan listed the versions */
    bool pending;   /* pick and queue at the next scan: the listing changed or a load failed */
    bool said_none; /* "no servable version" logged since the last change */
    uint64_t listing_sig; /* signature of the last listing (0: none yet) */
    uint64_t latest;      /* highest version in the last listing */
    uint64_t loading;     /* version queued or loading (0: none) */
    uint64_t loading_sig; /* its prefix signature when queued */
    uint64_t served;      /* the version the watcher's last load made active (0: none) */
    uint64_t served_sig;  /* its chain's signature when a scan first saw it active (0: not yet) */
    uint64_t active_sig;    /* the active version's chain signature as a scan last read it */
    uint64_t active_sig_of; /* the version it was read for (0: none): a rewrite seen while
                             * another version was picked is acted on once that one is done */
    unsigned n_refused;
    uint64_t refused_floor;                   /* versions <= it count as refused (forgotten ones) */
    repo_refusal_t refused[REPO_REFUSED_MAX]; /* ascending by version */
    uint64_t refused_sig[REPO_REFUSED_MAX];   /* prefix signature at refusal */
    uint64_t pinned;                          /* version pinned by the admin (0: latest policy) */
    bool pin_restored;  /* pinned from the marks file: the next scan loads it (repo_persist.c) */
    bool pin_loading;   /* that load is queued or running: a failure unpins */
    uint64_t lineage_refused; /* the version repo__open last refused for its lineage */
    bool marks_dirty;   /* the marks changed since the marks file was written */
    bool marks_failed;  /* the last write of the marks file failed (said once) */
    unsigned n_rolled_back;
    uint64_t rolled_back[REPO_ROLLED_BACK_MAX]; /* ascending; refused until activated */
};

/* One repository per process.  Every field is protected by R.lock, except
 * the immutable-while-running ones marked so. */
struct repo {
    pthread_mutex_t lock;
    server_t *srv;
    pthread_t thread;
    bool running;      /* repo_start .. repo_stop */
    bool stopping;     /* the watcher exits at its next wake */
    bool fixed;        /* --model-name: serve that model only, never pick up new ones */
    int wake[2];       /* pipe: repo_stop and the done hook wake the watcher */
    int ino;           /* inotify fd, -1 when unavailable */
    char dir[1024];    /* the repository (immutable while running) */
    char marks_dir[1024]; /* --repo-marks-dir, "" = each model's directory (immutable) */
    unsigned n_models; /* models[0 .. n_models) in use */
    struct repo_model models[SERVER_MODELS_MAX]; /* in the order first listed */
    repo_metrics_t metrics;                      /* all models' */
};

#define R repo__state
extern struct repo R;

/* The state of model, or NULL when the watcher does not run or does not
 * serve it.  R.lock held; the pointer stays valid (see above). */
struct repo_model *repo__find(const char *model);
/* Hash step of the version signatures (repo.c: SIGNATURES). */
uint64_t repo__mix(uint64_t h, uint64_t v);
/* Signature of one version directory; 0 when unreadable. */
uint64_t repo__version_sig(const char *model_dir, uint64_t v);
/* Wakes the watcher.  R.lock held. */
void repo__wake(void);
/* Counts an overlay apply of keys delta keys that took seconds (takes R.lock). */
void repo__note_apply(uint64_t keys, double seconds);
/* loader_done_fn of the watcher's loads and of repo_activate's: arg is the
 * model's struct repo_model. */
void repo__load_ended(const loader_status_t *st, void *arg);
/* loader_open_fn: repo_open_version of the model_dir of arg (the model's
 * struct repo_model; model_dir is immutable, read without the lock). */
int repo__open(server_t *srv, const loader_status_t *st, void *arg, server_model_t **out,
               store_error_t *err);
/* How the watcher opens a version (repo__open_chain). */
typedef struct repo_open_opts {
    bool explicit_load;   /* the admin's activation (or its pin): LINEAGE not checked */
    unsigned n_rolled_back;
    uint64_t rolled_back[REPO_ROLLED_BACK_MAX]; /* the model's, copied under R.lock */
    bool lineage_refused; /* out: refused by LINEAGE */
} repo_open_opts_t;
/* repo_open_version, and with o (not explicit) refusing a delta that does
 * not extend the active version's line or is built on a rolled-back
 * version (repo_chain.c: LINEAGE; then o->lineage_refused is set); the
 * watcher's loads check it, the admin's activations do not. */
int repo__open_chain(server_t *srv, const char *model_dir, uint64_t version, repo_open_opts_t *o,
                     server_model_t **out, store_error_t *err);
/* Drops version from r's rolled-back list (no-op when absent).  R.lock held. */
void repo__forget_rolled_back(struct repo_model *r, uint64_t version);
/* Adds version to r's rolled-back list (R.lock held or single-threaded):
 * 1 when the lowest had to be forgotten, else 0. */
int repo__add_rolled_back(struct repo_model *r, uint64_t version);

/* repo_models.c: adds a model directory named name to the served models
 * (R.lock held), with the marks its file kept (repo_persist.c): 0,
 * -EEXIST when served already, -ENOSPC past SERVER_MODELS_MAX, or -EINVAL
 * with why when the marks file is damaged (the model is not added). */
int repo__add_model(const char *name, char *why, size_t why_len);
/* repo_models.c: picks up model directories that appeared since the start
 * (not with --model-name); the watcher thread, without R.lock. */
void repo__find_new_models(void);

/* Records the refusal of version in r with its prefix signature sig (a
 * load's, forgotten when the files change; by_admin false), kept ascending,
 * the lowest forgotten when full.  R.lock held. */
void repo__add_refusal(struct repo_model *r, uint64_t version, uint64_t sig, const char *error);

/* repo_persist.c: the marks files (repo_marks.h).
 * Reads the marks file of r (its name and dir set, not yet listed) into
 * r: 0 (also when there is none), or -EINVAL with why naming the file, the
 * line and the fix.  R.lock held or single-threaded; reads a small file. */
int repo__marks_restore(struct repo_model *r, char *why, size_t why_len);
/* The lock of the place the marks are kept (--repo-marks-dir, else the
 * repository): a file .tlserve-marks.lock there, flock'd from the start
 * until repo_stop, holding the pid.  When another process holds it, a
 * WARN says so and this server writes no marks until it gets the lock
 * (each write tries again).  A place where the file cannot be made (a
 * read-only repository) is not locked: no marks are written there either.
 * repo__marks_unlock closes it (idempotent).  Both take io_lock: not with
 * R.lock held. */
void repo__marks_lock(void);
void repo__marks_unlock(void);

/* Writes the marks file of every model whose marks changed (marks_dirty),
 * or removes it when it would hold nothing.  Called without R.lock (takes
 * it to copy the marks); writes are serialized, so the file ends with the
 * latest marks.  A failure is logged (once until a write succeeds) and
 * counted; the marks stay in memory. */
void repo__marks_flush(void);

#endif /* TL_SERVER_REPO_IMPL_H */
