/*
 * repo_impl.h — the watcher's state and helpers shared by repo.c (the
 * watcher, the chain loader) and repo_admin.c (the admin's rollback,
 * activate and pin).  Private to those two files and their unit test.
 */
#ifndef TL_SERVER_REPO_IMPL_H
#define TL_SERVER_REPO_IMPL_H

#include "repo.h"

#include <pthread.h>

/* One repository per process.  Every field is protected by S.lock, except
 * the immutable-while-running ones marked so. */
struct repo {
    pthread_mutex_t lock;
    server_t *srv;
    pthread_t thread;
    bool running;         /* repo_start .. repo_stop */
    bool stopping;        /* the watcher exits at its next wake */
    int wake[2];          /* pipe: repo_stop and the done hook wake the watcher */
    int ino;              /* inotify fd, -1 when unavailable */
    char dir[1024];       /* the repository (immutable while running) */
    char model[64];       /* the model served (immutable while running) */
    char model_dir[1100]; /* dir/model */
    bool readable;        /* the last scan listed the versions */
    bool pending;   /* pick and queue at the next scan: the listing changed or a load failed */
    bool said_none; /* "no servable version" logged since the last change */
    uint64_t listing_sig; /* signature of the last listing (0: none yet) */
    uint64_t latest;      /* highest version in the last listing */
    uint64_t loading;     /* version queued or loading (0: none) */
    uint64_t loading_sig; /* its prefix signature when queued */
    unsigned n_refused;
    uint64_t refused_floor;                   /* versions <= it count as refused (forgotten ones) */
    repo_refusal_t refused[REPO_REFUSED_MAX]; /* ascending by version */
    uint64_t refused_sig[REPO_REFUSED_MAX];   /* prefix signature at refusal */
    uint64_t pinned;                          /* version pinned by the admin (0: latest policy) */
    unsigned n_rolled_back;
    uint64_t rolled_back[REPO_ROLLED_BACK_MAX]; /* ascending; refused until activated */
    repo_metrics_t metrics;
};

#define S repo__state
extern struct repo S;

/* Hash step of the version signatures (repo.c: SIGNATURES). */
uint64_t repo__mix(uint64_t h, uint64_t v);
/* Signature of one version directory; 0 when unreadable. */
uint64_t repo__version_sig(const char *model_dir, uint64_t v);
/* Wakes the watcher.  S.lock held. */
void repo__wake(void);
/* loader_done_fn of the watcher's loads and of repo_activate's. */
void repo__load_ended(const loader_status_t *st, void *arg);
/* loader_open_fn: repo_open_version of S.model_dir. */
int repo__open(server_t *srv, const loader_status_t *st, void *arg, server_model_t **out,
               store_error_t *err);
/* Drops version from the rolled-back list (no-op when absent).  S.lock held. */
void repo__forget_rolled_back(uint64_t version);

#endif /* TL_SERVER_REPO_IMPL_H */
