/*
 * repo.h — serving from a model repository (--model-repo DIR): the watcher
 * that discovers versions of <DIR>/<model>/<version>/ while the server runs,
 * and the chain loader that builds a version from its full snapshot and its
 * deltas (store/delta.h).  Internal to server/.
 *
 * MODELS
 *   Every model directory of DIR is served (at most SERVER_MODELS_MAX; more
 *   are refused at the start), each with its own policy state below: its
 *   active version, pin, refusals and rolled-back versions never affect
 *   another model's.  --model-name X serves X only.  A model directory that
 *   appears while running is picked up at the next scan (not with
 *   --model-name; not past SERVER_MODELS_MAX).  Calls that take a model
 *   name find that model's state, and answer -ENODEV/-ENOENT for a model
 *   the repository does not serve.
 *
 * POLICY (latest, unless pinned)
 *   The server serves the highest version of the model that resolves and
 *   loads.  A version that does not (corrupt file, a gap in its chain, a
 *   foreign parent, another model, a NaN...) is REFUSED: logged once with
 *   the reason, counted, listed by repo_get_status, and not tried again
 *   until the files of it or of a lower version change; the next lower
 *   version is tried instead, and the active version keeps serving.
 *   An explicit admin load wins until the repository changes again.
 *   Two admin overrides (below): a PIN (repo_activate) suspends the policy
 *   until repo_unpin, and a ROLLED-BACK version is refused until activated.
 *   The pin, the rolled-back versions and the refusals a restart could not
 *   make again (the admin's, the gate's, the lineage check's) are kept in the model's marks file
 *   and read back when a restart lists the model (repo_marks.h).
 *   A version the policy picks that is still kept loaded as a standby
 *   (model_registry.c) is made active by a pointer swap, not loaded.
 *
 * THREADS
 *   One watcher thread (repo_start .. repo_stop) scans every model on
 *   inotify events and every REPO_RESCAN_MS; it never loads anything itself: it queues
 *   loads to the loader thread (loader_submit_job) with repo_open_version
 *   as their open function, and learns their end through the job's done
 *   hook.  repo_get_status/_metrics may be called from any thread.
 */
#ifndef TL_SERVER_REPO_H
#define TL_SERVER_REPO_H

#include "server.h"

#include <stddef.h>
#include <stdint.h>

#define REPO_RESCAN_MS 2000   /* periodic rescan: the fallback when inotify misses or overflows */
#define REPO_VERSIONS_START 256 /* listing entries first allocated; grows with the model */
#define REPO_ROLLED_BACK_MAX 16 /* rolled-back versions remembered (the lowest is forgotten) */
#define REPO_REFUSED_MAX 64   /* refusals listed; past it the lowest is dropped from the list
                               * but stays refused (a floor) until restart */

/* The models of the repository cfg->model_repo to serve: cfg->model_name
 * alone when set, else every model directory in it (names that are not
 * valid model names, and temporary directories, are skipped), sorted.
 * Returns their count (1..cap) with the names in models[0..count), or -1
 * with why naming the repository and the problem (unreadable, no model,
 * more than cap models).  Reads the directory; for main before anything
 * starts, and for the watcher's look for new models. */
int repo_list_models(const server_config_t *cfg, char (*models)[64], unsigned cap, char *why,
                     size_t why_len);

/* The version to serve among versions[0..n) (ascending): the highest one
 * for which refused(arg, version) is 0; 0 when none.  Pure. */
uint64_t repo_pick_version(const uint64_t *versions, size_t n,
                           int (*refused)(void *arg, uint64_t version), void *arg);

/* Builds version `version` of the model in model_dir ("<repo>/<model>"):
 * resolves its chain (store_version_chain), loads the chain's full
 * snapshot into a new store and applies the deltas in order
 * (store_delta_apply), then wraps it as a handle not yet active (*out holds
 * one reference, as server_model_open).  Every manifest must name the
 * model of model_dir's last path component.  Returns 0, or -errno with
 * *err naming the version and what was wrong.  Blocks for the whole load.
 * Memory: the whole new version (the active one stays resident beside it). */
int repo_open_version(server_t *srv, const char *model_dir, uint64_t version,
                      server_model_t **out, store_error_t *err);

/* Starts the watcher on srv->cfg.model_repo for models[0..n)
 * (repo_list_models; 1 <= n <= SERVER_MODELS_MAX, else -EINVAL); the loader
 * must be running (admin_start).  The first scan runs at once and queues
 * each model's latest version.  0 or -errno. */
int repo_start(server_t *srv, const char (*models)[64], unsigned n);

/* Stops and joins the watcher (before loader_stop).  No-op when not
 * started.  The models' states stay allocated: a load dropped by
 * loader_stop still reports to them. */
void repo_stop(void);

/* The names of the models served, in the order they were first listed
 * (the first is the start's first), into names[0..cap): their count (may
 * exceed cap), 0 when the watcher does not run.  Never waits for a scan. */
unsigned repo_models(char (*names)[64], unsigned cap);

typedef struct repo_refusal {
    uint64_t version;
    bool by_admin;    /* refused by the admin (repo_refuse): kept until activated */
    bool by_gate;     /* refused by the validation gate (kept across a restart, repo_marks.h) */
    bool by_lineage;  /* refused for its lineage (repo_chain.c: LINEAGE; kept the same way) */
    char error[2048]; /* the loader's sentence: the version's path, the store's code and message */
} repo_refusal_t;

typedef struct repo_status {
    bool enabled;            /* --model-repo given and the watcher running */
    char dir[1024];          /* the repository */
    char model[64];          /* the model this state is of */
    bool readable;           /* the last scan could list the model's versions */
    uint64_t latest;         /* highest version seen by the last scan (0: none) */
    uint64_t loading;        /* version queued or loading now (0: none) */
    unsigned n_refused;
    repo_refusal_t refused[REPO_REFUSED_MAX]; /* ascending by version */
    uint64_t pinned;         /* version pinned by the admin (0: the latest policy) */
    unsigned n_rolled_back;
    uint64_t rolled_back[REPO_ROLLED_BACK_MAX]; /* ascending; by the admin API or the guard */
} repo_status_t;

/* The version model is pinned to (0: none, or the watcher does not serve
 * it), and whether the policy refuses version (refused by a load or the
 * gate, rolled back, or forgotten below the refusals kept).  Take the
 * watcher's lock for a moment. */
uint64_t repo_pinned(const char *model);
bool repo_refuses(const char *model, uint64_t version);

/* A copy of the state of model (NULL: the first model served) into *out
 * (about 140 KiB: allocate it): 0, or -ENOENT with out->enabled false when
 * the watcher does not run or does not serve model.  Takes the watcher's
 * lock for the copy only; never waits for a scan or a load. */
int repo_get_status(const char *model, repo_status_t *out);

/* Summed over every model of the repository. */
typedef struct repo_metrics {
    uint64_t refused;     /* versions refused (each once per change of its files) */
    uint64_t repo_errors; /* times the repository became unreadable or vanished */
    uint64_t scans;       /* scans done */
    uint64_t marks_write_errors;  /* marks files (repo_marks.h) that could not be written */
    uint64_t overlay_applies;     /* versions opened as an overlay over the active one */
    uint64_t overlay_keys;        /* delta keys (upserts + deletes) those overlays took */
    uint64_t last_apply_keys;     /* the last one's keys and time: delta files read and */
    double last_apply_seconds;    /* verified, overlay built (gate and swap not included) */
} repo_metrics_t;

void repo_get_metrics(repo_metrics_t *out);

/* ---- the admin's calls (rollback, activate, pin) ----------------------------
 *
 * PINNING
 *   repo_activate pins the version: the watcher stops picking (the latest
 *   policy is suspended) until repo_unpin; refusals are still recorded.
 * ROLLED BACK
 *   A version replaced by a rollback is refused by the policy (listed, not
 *   picked) whatever its files do, until an explicit repo_activate of it.
 *   Each call acts on the state of its model argument only, which must be
 *   served from the repository (else -ENODEV/-ENOENT).  Every call takes
 *   the watcher's lock briefly; none waits for a load. */

/* 1 when the marks of model (pin, rollbacks, refusals: repo_marks.h) are on
 * disk as they are in memory, 0 when the last write of its marks file
 * failed (a restart would not keep them), -1 when the repository does not
 * serve model.  The admin's answers carry it as "marks_kept". */
int repo_marks_kept(const char *model);

/* Records that a rollback replaced version from by version to: from is
 * refused (listed "rolled_back"); a pin on from moves to to.  0, or
 * -ENOENT when the repository does not serve model. */
int repo_rolled_back(const char *model, uint64_t from, uint64_t to);

/* 1 with *version when a load of the watcher (or of repo_activate) is
 * queued or running for model; else 0. */
int repo_loading(const char *model, uint64_t *version);

/* The versions of model in the repository, ascending, into out[0..cap):
 * the count (may exceed cap), -ENOENT when not served, or the listing's
 * -errno.  Reads the directory. */
long repo_list_versions(const char *model, uint64_t *out, size_t cap);

/* Activates version of model and pins it: 0 when it was active or kept
 * (a pointer swap, done on return); 1 with *st when a background load of
 * it was queued (or was already under way); -ENOENT when the repository
 * has no such version; -ENODEV when the repository does not serve model;
 * -EBUSY when a load of another version is under way; the loader's
 * -EAGAIN/-ECANCELED; -ENOMEM.  Clears a rollback or refusal of version.
 * force: the load it queues skips the validation gate (ops overruling a
 * refusal).  Reads the directory (stats the versions' files). */
int repo_activate(const char *model, uint64_t version, bool force, loader_status_t *st);

/* Refuses version of model for good (the admin's :refuse): refused by the
 * policy, listed with "refused by admin: why", whatever its files do, until
 * repo_activate names it; a pin on it is lifted (the latest policy picks
 * again).  The caller takes it off the served and kept versions
 * (model_registry.c).  0, or -ENODEV when the repository does not serve
 * model. */
int repo_refuse(const char *model, uint64_t version, const char *why);

/* Unpins model: the latest policy applies again at once (the watcher is
 * woken).  0, or -ENODEV when the repository does not serve model. */
int repo_unpin(const char *model);

#endif /* TL_SERVER_REPO_H */
