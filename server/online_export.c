/*
 * online_export.c — the online updates of a model exported as delta
 * versions, and now and then a full one, into its repository (online.h:
 * EXPORTS), so that a restart, a replica or an operator finds them there,
 * and the sample log can be trimmed behind them.  The trainer's side (the
 * dirty set, the hand-over) is online_export_handover.c; the full version
 * online_export_full.c.
 *
 *   trainer thread                                export thread (one per model)
 *   step ─ mark(keys) ─> dirty set (bounded)
 *   tick: due? ─ writer lock: keys -> values ─ job ─> delta <repo>/<m>/<v+1>/
 *                (lookups, no write)                  (begin, put, commit: tmp
 *                                                      dir, rename, MANIFEST last)
 *   watcher ─ chain loader: own export of the active version ─> model_derive
 *             (same base store, new meta: no copy, no fold, no value changes)
 *   attach: own export above its version ─> adopt: trainer.state, trim the log
 *
 * THE DIRTY SET: an open-addressed table of DIRTY_KEYS keys in 2x slots,
 * allocated once when the trainer starts; a step adds its ids (and the
 * bias, MODEL_BIAS_ID) with no allocation.  Past DIRTY_EARLY keys the
 * export is due at once; if the set still fills (the export thread busy or
 * failing), marking stops and the next export carries EVERY key of the
 * store (a "full diff" as a delta: the trainer never deletes a key, so
 * upserting every key is exact and needs no copy of the parent to diff
 * against).  The hand-over looks the keys up under the model's writer
 * lock, which the trainer alone takes to write: the values are exactly the
 * trainer's after the records below the position recorded, and the write
 * itself (fsyncs) runs on the export thread with no lock the trainer or
 * the workers wait for.
 *
 * THE OPTIMIZER STATE: the hand-over also reads, under that lock, the
 * trainer's state rows of those keys (train_state_get), and the export
 * thread writes them as TRAIN_STATE_FILE (model/train.h) into the
 * version's temporary directory before its MANIFEST
 * (store_delta_side_file): version and state appear together and agree.
 * A restart restores them (online_trainer.c: restore_state); the loader
 * and tlsnap ignore the file, which the manifest does not list.  The same
 * side file writer also writes the trainer's --train-file marks at the
 * hand-over (TRAINFILE_MARKS, online_file_marks.c): how far each file is
 * in the version.
 *
 * THE POSITION: the delta's producer (a manifest field, so it is published
 * with the version atomically, with no sidecar file to write first or to
 * miss) is "tlserve-online log=P id=X": every sample-log record below P is
 * in the version; X is this process's random id, so the chain loader tells
 * its own exports (served from the live store as they are) from anyone
 * else's (a restarted server's: loaded from the files).  A restart
 * (online__export_restart) replays the log from P when the active version
 * is such an export, whether or not trainer.state was rewritten before a
 * kill.  With the bus in replay mode the sample log is only the outbox and
 * the trainer's positions are stream sequences: the producer is then
 * "tlserve-online stream=S id=X", every stream message up to sequence S is
 * in the version, and a restart whose active version is such an export
 * (online__export_bus_restart) restores its optimizer state and learns
 * from S + 1 (the consumer starts at trainer.state's position, which each
 * export that goes live moves to S + 1).  Each replica exports into its
 * own repository: a replica's exports are its own lineage.  In the
 * partitioned bus mode the producer is "log=P" again, the hand-over also
 * takes the update exchange's cut (online_sync_export.c: SYNC_STATE, and
 * the keys only peers' messages wrote), and an export going live moves
 * neither trainer.state nor the log's trim (its restart's fallback).
 *
 * LINEAGE: an export's parent is the newest version of the trainer's
 * lineage (head: the version it attached to, then each export); its
 * number is the repository's highest + 1 (above our own exports a
 * rollback replaced, too).  A highest version above head that is not ours
 * (an offline producer's) makes the export wait (FAILED, retried
 * every tick, keys kept) until that version goes live and the trainer
 * starts over, which drops the set: its updates were learned into a
 * version being replaced, as without exports.  A reset (a new version) and
 * a rollback (online_export_drop) bump the epoch under the commit lock, so
 * a job of the old lineage is never committed after them; that is the one
 * place the trainer (in attach, q->lock held) waits for a write under way.
 * A rollback also voids this process's exports past its target: the
 * repository refuses them as rolled back, and the next export is numbered
 * above them with the rolled-back-to version as its parent.
 *
 * CHAIN LENGTH, FULL EXPORTS: every delta export adds a link, a chain is
 * refused past STORE_CHAIN_MAX links and a restart loads every link; so
 * every --online-full-every-th export (and, whatever the setting, one
 * before the chain passes STORE_CHAIN_MAX / 2) is a FULL version: the
 * hand-over takes every key of the store (as an overflowed set does), the
 * state rows of those keys and a copy of the model's extras (params, dense
 * arrays), and the export thread puts the rows into a store of the live
 * one's layout and publishes it with store_snapshot_publish (the snapshot
 * writer in a temporary directory, TRAINER_STATE, rename): the same
 * producer, no parent, no version or a whole one after a kill.  The chain
 * loader serves it as the live store relabelled (repo_chain.c:
 * open_own_full) and the trainer adopts it as a delta; a restart starts
 * the chain, and the optimizer state (online_trainer.c: restore_state), at
 * it.  The chain's length is the export thread's (links, under commit):
 * the first export of a lineage reads it from the repository, each later
 * one counts, and the next hand-over decides.  Its cost: the copy under
 * the writer lock, which the trainer waits for (requests do not), about
 * 0.07-0.1 s per million LR keys on the 2-core test machine (the log line
 * says how long each hand-over held it); the write then holds a second
 * copy of the rows on the export thread.
 *
 * FAILURES (a full disk, an unwritable repository): an ERROR line per try
 * (one a tick), counted; the job's keys go back into the set at the next tick and are
 * exported with fresh values; nothing acknowledged is lost meanwhile, the
 * sample log is trimmed only behind an export that went live.
 *
 * THREAD SAFETY: the set, next_pos and due_ms are the trainer thread's.
 * state and the job are under e->lock (the job is the export thread's
 * while BUSY, the trainer's otherwise); head and epoch under e->commit,
 * which the export thread holds across a commit.  The registry of own
 * exports is online_export_own.c's, with its own leaf lock: the chain
 * loader's thread asks it.
 */
#define _GNU_SOURCE
#include "online_export_impl.h"

#include "log.h"
#include "model/model.h"
#include "model/overlay.h"
#include "store/delta.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#define G online__G

size_t online_export_drop(const char *model, uint64_t to, uint64_t *out, size_t cap)
{
    uint32_t nm = atomic_load_explicit(&G.nmodels, memory_order_acquire);
    for (uint32_t i = 0; i < nm; i++) {
        online_model_t *q = atomic_load_explicit(&G.models[i], memory_order_acquire);
        struct online_export *e = q && strcmp(q->name, model) == 0 ? q->exp : NULL;
        if (e) {
            pthread_mutex_lock(&e->commit);
            e->epoch++; /* the trainer's next reset sets head */
            pthread_mutex_unlock(&e->commit);
        }
    }
    return online__export_own_void_above(model, to, out, cap);
}

/* ---- the export thread ------------------------------------------------------------ */

/* The highest version in dir: 0 when none, or -errno. */
static online_refused_fn *_Atomic refused_fn; /* the repository's policy (online.h) */

void online_export_set_refused(online_refused_fn *fn) { atomic_store(&refused_fn, fn); }

/* The highest version in the model's directory, and into *wait the highest
 * one above head that another producer wrote and the repository's policy
 * has not refused (0: none): the export waits for that one to go live and
 * then deltas on it.  One the policy refused (a corrupt version, one the
 * gate refused, one rolled back) never goes live: waiting for it would
 * stop every export for good.  The highest or -errno. */
static int64_t highest_version(const char *dir, const char *model, uint64_t head, uint64_t *wait)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    uint64_t top = 0, v, pos;
    online_refused_fn *refused = atomic_load(&refused_fn);
    *wait = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (store_version_is_temp(de->d_name) || !store_version_parse(de->d_name, &v))
            continue;
        top = v > top ? v : top;
        if (v > head && v > *wait && !online__export_own_pos(model, v, &pos, true) &&
            !(refused && refused(model, v)))
            *wait = v;
    }
    closedir(d);
    return top > INT64_MAX ? -EOVERFLOW : (int64_t)top;
}

/* store_delta_side_file's: the job's state rows and --train-file marks
 * into the version's directory. */
static int write_side(void *ctx, int dirfd)
{
    const struct export_job *j = ctx;
    int rc = j->has_state ? train_state_write_at(dirfd, TRAIN_STATE_FILE, &j->sh, j->skeys,
                                                 j->srows)
                          : 0;
    if (rc == 0 && j->has_sync)
        rc = sync_state_write_at(dirfd, &j->sync);
    return rc == 0 && j->nfm ? online__file_marks_write_at(dirfd, j->fm, j->nfm) : rc;
}

/* Writes e->job as the next version.  0 written; else -errno with why. */
static int write_job(struct online_export *e, uint64_t *version, char *why, size_t why_len)
{
    struct export_job *j = &e->job;
    store_error_t err = {0};
    store_delta_writer_t *w = NULL;
    char producer[STORE_PRODUCER_MAX], dir[1200];
    int rc = 0;
    pthread_mutex_lock(&e->commit);
    if (j->epoch != e->epoch) {
        snprintf(why, why_len, "the trainer started over on another version");
        rc = -ESTALE;
        goto out;
    }
    uint64_t wait = 0;
    int64_t top = highest_version(e->model_dir, e->q->name, e->head, &wait);
    if (top < 0) {
        rc = (int)top;
        snprintf(why, why_len, "cannot list %s: %s", e->model_dir, strerror(-rc));
        goto out;
    }
    if (wait) {
        snprintf(why, why_len, "version %" PRIu64 " appeared above %" PRIu64 " (another "
                 "producer's): waiting for it to go live (or be refused)", wait, e->head);
        rc = -EAGAIN;
        goto out;
    }
    *version = (uint64_t)top + 1;
    snprintf(dir, sizeof dir, "%s/%" PRIu64, e->model_dir, *version);
    online__export_producer(j->pos, producer);
    online__export_own_add(e->q->name, *version, j->pos); /* before the watcher can see it */
    j->sync.version = *version;
    if (j->full) {
        rc = online__export_write_full(j, dir, *version, producer, write_side, &err);
        goto written;
    }
    rc = store_delta_begin(dir, &j->layout, j->parent, *version, producer, &w, &err);
    if (rc == 0 && (j->has_state || j->nfm || j->has_sync)) {
        j->sh.version = *version;
        store_delta_side_file(w, j->has_state ? TRAIN_STATE_FILE : ONLINE_FILE_MARKS_FILE,
                              write_side, j);
    }
    for (size_t i = 0; rc == 0 && i < j->n; i++)
        rc = store_delta_put(w, j->keys[i], j->vals + i * j->K);
    if (rc == 0) {
        rc = store_delta_commit(w, &err); /* frees w */
        w = NULL;
    }
written:
    if (rc == 0) {
        e->head = *version;
        online__export_note_links(e, j->full, *version);
    } else {
        snprintf(why, why_len, "%s", err.msg[0] ? err.msg : strerror(-rc));
    }
out:
    pthread_mutex_unlock(&e->commit);
    store_delta_abort(w);
    return rc;
}

static void *export_main(void *arg)
{
    struct online_export *e = arg;
    online_model_t *q = e->q;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (e->state != EXP_PENDING && !e->stop)
            pthread_cond_wait(&e->cond, &e->lock);
        if (e->state != EXP_PENDING)
            break;
        e->state = EXP_BUSY;
        pthread_mutex_unlock(&e->lock);
        char why[1600] = "";
        uint64_t version = 0, t0 = online__now_ns();
        int rc = write_job(e, &version, why, sizeof why);
        double s = (double)(online__now_ns() - t0) * 1e-9;
        if (rc == 0) {
            /* before the counters: a reader that saw the export counted sees its memory */
            online__export_job_trim(&e->job); /* a full export's buffers: the whole model */
            atomic_store_explicit(&q->export_buf_bytes, online__export_job_bytes(&e->job),
                                  memory_order_relaxed);
            atomic_fetch_add_explicit(&q->exports, 1, memory_order_relaxed);
            if (e->job.full)
                atomic_fetch_add_explicit(&q->full_exports, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&q->export_keys, e->job.n, memory_order_relaxed);
            atomic_store_explicit(&q->export_version, version, memory_order_relaxed);
            atomic_store_explicit(&q->export_pos, e->job.pos, memory_order_relaxed);
            char cut[160] = ""; /* partitioned: the exchange's cut, part of that hold */
            if (e->job.has_sync)
                snprintf(cut, sizeof cut, "; the update exchange's cut %.4f s of it, copying %"
                         PRIu64 " residual keys and %u MLP parameters", (double)e->job.cut_ns *
                         1e-9, e->job.sync.nkeys, e->job.sync.dense_n);
            LOG(LL_INFO, "online: model '%s': online updates exported as version %" PRIu64
                " (%s of %" PRIu64 ", %zu keys%s, sample log below position %" PRIu64
                ") in %.3f s (the trainer's writer lock held %.3f s to gather them%s)", q->name,
                version, e->job.full ? "full, lineage" : "delta", e->job.parent, e->job.n,
                e->job.all ? ": every key" : "", e->job.pos, s, (double)e->job.held_ns * 1e-9,
                cut);
        } else if (rc == -ESTALE) {
            LOG(LL_INFO, "online: model '%s': an export of version %" PRIu64 "'s updates "
                "dropped: %s", q->name, e->job.parent, why);
        } else {
            atomic_fetch_add_explicit(&q->export_failures, 1, memory_order_relaxed);
            LOG(LL_ERROR, "online: model '%s': the export of the online updates (%zu keys, "
                "sample log below position %" PRIu64 ") failed: %s; training goes on, the "
                "export is retried at the next tick and at shutdown%s", q->name, e->job.n,
                e->job.pos, why, q->slog ? ", the sample log keeps the samples"
                                         : " (no --sample-log-dir: nothing else keeps them)");
        }
        pthread_mutex_lock(&e->lock);
        e->state = rc == 0 || rc == -ESTALE ? EXP_IDLE : EXP_FAILED;
        pthread_cond_broadcast(&e->cond);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* ---- the trainer's side ----------------------------------------------------------- */

int online__export_init(online_model_t *q)
{
    const server_config_t *c = &G.srv->cfg;
    if (c->online_export_ms <= 0 || !c->model_repo[0])
        return 0;
    if (online__sync_mode(c) && !c->sample_log_dir[0]) {
        LOG(LL_WARN,
            "online: model '%s': --online-export-ms in the partitioned bus mode needs "
            "--sample-log-dir (a restart resumes from an export by learning the log after it): "
            "no exports",
            q->name);
        return 0;
    }
    struct online_export *e = calloc(1, sizeof *e);
    uint64_t *slots = calloc(DIRTY_SLOTS, sizeof *slots);
    if (!e || !slots) {
        free(e);
        free(slots);
        LOG(LL_ERROR, "online: model '%s': no memory for the export's key set: no exports",
            q->name);
        return -ENOMEM;
    }
    e->slots = slots;
    e->q = q;
    e->due_ms = online__now_ns() / 1000000 + (uint64_t)c->online_export_ms;
    snprintf(e->model_dir, sizeof e->model_dir, "%s/%s", c->model_repo, q->name);
    /* two servers exporting into one repository would each take the other's exports for an
     * offline producer's and their lineages would interleave: the second one refuses */
    e->repo_lock = open(e->model_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (e->repo_lock < 0 || flock(e->repo_lock, LOCK_EX | LOCK_NB) != 0) {
        LOG(LL_ERROR,
            "online: model '%s': %s: %s: no exports (give each replica its own "
            "--model-repo)",
            q->name, e->model_dir,
            e->repo_lock < 0 ? strerror(errno) : "another tlserve process exports into it");
        if (e->repo_lock >= 0)
            close(e->repo_lock);
        free(slots);
        free(e);
        return 0;
    }
    pthread_mutex_init(&e->lock, NULL);
    pthread_mutex_init(&e->commit, NULL);
    pthread_cond_init(&e->cond, NULL);
    if (pthread_create(&e->thread, NULL, export_main, e) != 0) {
        pthread_mutex_destroy(&e->lock);
        pthread_mutex_destroy(&e->commit);
        pthread_cond_destroy(&e->cond);
        close(e->repo_lock);
        free(slots);
        free(e);
        LOG(LL_ERROR, "online: model '%s': cannot start the export thread: no exports",
            q->name);
        return -EAGAIN;
    }
    pthread_setname_np(e->thread, "tl-export");
    online__export_own_id();
    /* partitioned bus mode: the consumer's first peer message may have attached the trainer
     * already (online__attach, writer lock), its online__export_reset finding no e: the
     * lineage's head is the version attached */
    server_slot_t *ms = server_slot_named(G.srv, q->name);
    if (ms)
        pthread_mutex_lock(&ms->writer);
    if (q->t)
        e->head = q->att_version;
    q->exp = e;
    if (ms)
        pthread_mutex_unlock(&ms->writer);
    return 0;
}

bool online__export_adopt(online_model_t *q, const store_meta_t *meta)
{
    uint64_t pos;
    if (!q->exp || meta->version <= q->att_version || !online__export_own_pos(q->name, meta->version, &pos, false))
        return false;
    q->att_version = meta->version;
    q->att_created = meta->created_unix;
    atomic_store_explicit(&q->last_version, meta->version, memory_order_relaxed);
    if (q->slog && !online__sync_mode(&G.srv->cfg)) { /* partitioned: the log stays whole,
                                                        trainer.state at the lineage's start
                                                        (online_sync_export.c: FALLBACK) */
        int rc = online__state_write(q->slog_dir, meta->version, meta->created_unix, pos);
        if (rc != 0)
            LOG(LL_WARN, "online: %s/trainer.state not written (%s): a restart replays from "
                "the export's position all the same", q->slog_dir, strerror(-rc));
        if (!online__bus_on()) /* with the bus, pos is the stream's: the forwarder trims */
            (void)sample_log_trim(q->slog, pos); /* under q->lock: see attach */
    }
    LOG(LL_INFO, "online: model '%s' serves its own export, version %" PRIu64 ", and learns on "
        "(optimizer state kept)", q->name, meta->version);
    return true;
}

void online__export_reset(online_model_t *q, const store_meta_t *meta)
{
    struct online_export *e = q->exp;
    atomic_store_explicit(&q->trained_store, (const void *)q->attached, memory_order_release);
    if (!e)
        return;
    e->stale_said = false;
    pthread_mutex_lock(&e->commit); /* waits for a commit under way */
    e->epoch++;
    e->head = meta->version;
    e->links_known = false;
    pthread_mutex_unlock(&e->commit);
    pthread_mutex_lock(&e->lock);
    if (e->state == EXP_FAILED)
        e->state = EXP_IDLE; /* its keys were of the version replaced */
    pthread_mutex_unlock(&e->lock);
    online__export_dirty_clear(e);
    e->due_ms = online__now_ns() / 1000000 + (uint64_t)G.srv->cfg.online_export_ms;
}

void online__export_restart(online_model_t *q, const model_t *m)
{
    if (!q->exp || !q->replay_pending)
        return;
    const store_meta_t *meta = model_meta(m);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%" PRIu64, q->exp->model_dir, meta->version);
    char producer[STORE_PRODUCER_MAX];
    store_meta_t vm;
    uint64_t pos;
    if (store_version_producer(dir, producer, NULL, &vm, NULL) != 0)
        return; /* unreadable: trainer.state decides */
    if (vm.created_unix == meta->created_unix &&
        online_export_producer_pos(producer, &pos) && pos <= q->replay_end &&
        pos >= sample_log_first_pos(q->slog)) {
        if (q->replay_version != meta->version || q->replay_from != pos)
            LOG(LL_INFO, "online: model '%s': version %" PRIu64 " is an online export covering "
                "the sample log below %" PRIu64 ": replayed from there", q->name, meta->version,
                pos);
        q->replay_version = meta->version;
        q->replay_created = meta->created_unix;
        q->replay_from = pos;
    }
}

uint64_t online__export_bus_restart(online_model_t *q, const model_t *m)
{
    if (!q->exp)
        return 0;
    const store_meta_t *meta = model_meta(m);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%" PRIu64, q->exp->model_dir, meta->version);
    char producer[STORE_PRODUCER_MAX];
    store_meta_t vm;
    uint64_t seq, next = 0;
    if (store_version_producer(dir, producer, NULL, &vm, NULL) != 0)
        return 0; /* unreadable: trainer.state decides */
    if (vm.created_unix == meta->created_unix &&
        online_export_producer_stream(producer, &seq) && seq < UINT64_MAX) {
        next = seq + 1;
        LOG(LL_INFO,
            "online: model '%s': version %" PRIu64 " is an online export holding the "
            "stream up to sequence %" PRIu64 ": learning from %" PRIu64,
            q->name, meta->version, seq, next);
    }
    return next;
}

int online_store_trained(const char *model, const void *store)
{
    uint32_t n = atomic_load_explicit(&G.nmodels, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        const online_model_t *q = atomic_load_explicit(&G.models[i], memory_order_acquire);
        if (q && strcmp(q->name, model) == 0)
            return store && atomic_load_explicit(&q->trained_store, memory_order_acquire) == store;
    }
    return 0;
}

bool online__export_stale(online_model_t *q, const model_t *m)
{
    struct online_export *e = q->exp;
    const store_meta_t *meta = model_meta(m);
    uint64_t pos;
    if (!e || !q->t || model_store(m) != q->attached ||
        (meta->version == q->att_version && meta->created_unix == q->att_created) ||
        (meta->version > q->att_version && online__export_own_pos(q->name, meta->version, &pos, false)))
        return false;
    if (!e->stale_said)
        LOG(LL_INFO, "online: model '%s': version %" PRIu64 " went live again on the store the "
            "trainer wrote (a rollback): learning waits for its reload from the repository",
            q->name, meta->version);
    e->stale_said = true;
    return true;
}

bool online__export_due(const online_model_t *q)
{
    const struct online_export *e = q->exp;
    return e && !e->refused && (e->count >= DIRTY_EARLY || e->overflow ||
                 ((e->count > 0 || online__sync_peer_pending(q)) &&
                  online__now_ns() / 1000000 >= e->due_ms));
}

void online__export_tick(online_model_t *q)
{
    struct online_export *e = q->exp;
    if (!online__export_due(q))
        return;
    uint64_t ms = online__now_ns() / 1000000;
    if (online__export_hand_over(q) || ms >= e->due_ms)
        e->due_ms = ms + (uint64_t)G.srv->cfg.online_export_ms;
}

/* Waits until the export thread holds no job. */
static void wait_idle(struct online_export *e)
{
    pthread_mutex_lock(&e->lock);
    while (e->state == EXP_PENDING || e->state == EXP_BUSY)
        pthread_cond_wait(&e->cond, &e->lock);
    pthread_mutex_unlock(&e->lock);
}

/* How long the shutdown's export is tried again while the hand-over says
 * "not now" (a version going live or a fold due, the exchange's cut
 * waiting for a turn's messages) or a write fails. */
#define STOP_EXPORT_WAIT_MS 5000

void online__export_stop(online_model_t *q)
{
    struct online_export *e = q->exp;
    if (!e)
        return;
    wait_idle(e);
    uint64_t until = online__now_ns() / 1000000 + STOP_EXPORT_WAIT_MS;
    bool failed;
    for (;;) {
        if (online__export_hand_over(q))
            wait_idle(e);
        pthread_mutex_lock(&e->lock);
        failed = e->state == EXP_FAILED;
        pthread_mutex_unlock(&e->lock);
        bool owed = !e->refused && (failed || e->count > 0 || e->overflow);
        if (!owed || online__now_ns() / 1000000 >= until)
            break;
        struct timespec nap = {0, 20 * 1000000};
        nanosleep(&nap, NULL);
    }
    pthread_mutex_lock(&e->lock);
    e->stop = true;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    q->export_lost = !e->refused && (failed || e->count > 0 || e->overflow);
    if (q->export_lost)
        LOG(LL_ERROR, "online: model '%s': the online updates since version %" PRIu64 " were "
            "not exported at shutdown; %s", q->name, e->head,
            q->slog ? "the sample log keeps their samples: a restart learns them again"
                    : "no --sample-log-dir keeps their samples: they are lost");
    pthread_mutex_destroy(&e->lock);
    pthread_mutex_destroy(&e->commit);
    pthread_cond_destroy(&e->cond);
    close(e->repo_lock);
    online__export_job_free_rows(&e->job);
    free(e->job.dense);
    sync_state_free(&e->job.sync);
    free(e->slots);
    free(e);
    q->exp = NULL;
}
