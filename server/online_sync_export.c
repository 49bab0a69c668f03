/*
 * online_sync_export.c — online exports in partitioned bus mode: what an
 * export records of the update exchange (online_sync.c) so that a replica
 * restarted from it continues as the one that never crashed, and the
 * restart that reads it back.  The file format is online_sync_state.c's.
 *
 * WHAT A VERSION HOLDS.  An exported value is the snapshot plus this
 * replica's own steps on the sample-log records below P (the producer's
 * "log=P", as without the bus) plus every peer message the consumer had
 * applied.  So the export also records, in SYNC_STATE beside TRAIN_STATE:
 *   peers     per peer producer, the last sequence applied into the values:
 *             the restart applies only its messages after it;
 *   own_last  this replica's last published sequence, and
 *   residual  what its accumulators held (learned, not yet sent): the
 *             restart puts the residual back, learns the log from P (the
 *             hook adds those steps), and subtracts its own messages after
 *             own_last read from the stream (they were encoded from that
 *             residual after the cut); its peers then lack exactly what
 *             the accumulators hold, as before the kill;
 *   base      the lineage's first version, which every message carries as
 *             base_version: the trainer's own exports going live do not
 *             start a lineage (q->sync_base), so a peer (on its own
 *             exports, numbered in its own repository) still applies them.
 *   a DNN's MLP (online_sync_dense.c: DENSE messages, 1-bit Adam) is not
 *             in the accumulators: its part is the trainer's MLP x and its
 *             1-bit Adam state (moments, variance, warm-up and step counts,
 *             the pending delta and the error vector: what was learned here
 *             and not sent, its residual).  DENSE messages take their
 *             sequence from the one counter of the rows', and the consumer
 *             notes a peer's DENSE message applied as it notes a row one, so
 *             the positions above cover both.  x is the trainer's copy, not
 *             the one served (that is installed at the turns, so it lags):
 *             the trainer's is the one the positions describe.  A full
 *             export writes that x as its MLP arrays too.  The restart puts
 *             x and the state back (x served at once), learns the log from P
 *             into them, and subtracts its own DENSE messages after own_last
 *             from the pending delta: x = snapshot + peers' messages + own
 *             messages + pending holds after it as before the kill.
 *
 * THE CUT (online__sync_cut, from the hand-over under the model's writer
 * lock, the instant the values and TRAIN_STATE are copied).  The writer
 * lock covers the trainer's steps and hook, the consumer's applies and the
 * accumulators' swap; two things run outside it and are excluded:
 *   - a message the consumer applies spans several holds (APPLY_BATCH
 *     keys each): s->applying is set through it, and a cut then waits;
 *   - the publisher encodes the retired accumulator outside the lock (and
 *     a DNN's MLP under it), and an encode takes the message's values out
 *     of the residual (the pending delta) before the stream has stored it.
 *     It holds S.pub_lock from the encode to the
 *     acknowledgement (next_seq moved), and the cut try-locks it: so every
 *     own message up to own_last = next_seq - 1 is stored and out of the
 *     residual, and every later one is encoded from the residual copied.
 *     A publish given up (stopping with NATS away) loses that message's
 *     keys from the residual: S.unsent, and no cut is taken after it (the
 *     restart then starts from the previous export, which is consistent).
 * Before the consumer has read the stream once (S.caught_up), own messages
 * of an earlier run are still being subtracted: no cut either.  A cut not
 * taken is not an error: the export waits for the next tick (try-locks,
 * never a wait under the writer lock).  The residual is both accumulators'
 * keys as they are (a key in both is listed twice: the restart adds both).
 *
 * PEERS' KEYS.  The dirty set of online_export.c is the trainer's; a key
 * only a peer's message wrote must be exported too, so the consumer marks
 * it here (peer_keys, PEER_KEYS_SLOTS open-addressed, under the writer
 * lock; peer_slots lists the slots filled, so that the cut visits and
 * clears those, not 8 MB) and the cut hands them to the dirty set; past
 * half the slots the export takes every key of the store (as an
 * overflowed dirty set does).
 *
 * THE RESTART (online__sync_state_check at start, online__sync_resume in
 * the trainer's replay): when the newest version of the repository is an
 * online export above the lineage's first version (trainer.state's: in
 * partitioned mode an export going live moves neither trainer.state nor
 * the log's trim, see FALLBACK), its SYNC_STATE is read before the
 * repository loads; the trainer attaches to the export, restores the
 * optimizer state (restore_state), then the resume puts the residual, the
 * positions and a DNN's MLP and 1-bit Adam in place under the writer lock,
 * and the log from P is learned.  The consumer applies nothing of that
 * model until the replay is done (online_sync_apply.c, online_sync_dense.c
 * wait while replay_pending), then skips a
 * peer's message at or below its position and an own message at or below
 * own_last (tlserve_sync_resume_skipped_total), and subtracts own later
 * ones as it does at any restart.
 *
 * FALLBACK.  A SYNC_STATE missing, damaged or not this replica's: the
 * values cannot be split into the peers' part and ours.  The start logs a
 * WARN naming the file and sets the online exports above the lineage's
 * first version aside (renamed void-<v>-<unix time>, kept for the
 * operator), so the repository loads that first version, trainer.state
 * (still naming it) replays the whole log and the consumer reads every
 * message from the stream's start: the restart without exports.
 *
 * ITS COST.  The cut copies under the writer lock: up to the accumulators'
 * 2 x --sync-max-keys residual entries, the peers' keys (at most half of
 * PEER_KEYS_SLOTS) and a DNN's 5 x n MLP floats; the trainer and the
 * consumer wait through it (PREDICT does not).  So the residual is two
 * memcpy of the accumulators' dense arrays (update_acc_copy) into buffers
 * the export job keeps from one cut to the next (st->keys_cap; the export
 * thread is done with them before the next hand-over): fresh ones cost a
 * page fault every 4 KiB under the lock, tens of ms at 10^6 keys.  The
 * price is memory: as much as the largest residual copied, at most the
 * accumulators' own.  online__sync_cut_note records each cut's hold and
 * what it copied (tlserve_sync_cut_*, and the export's log line); the
 * figures are docs/performance.md's (server/bench/sync_cut_cost.py).
 *
 * THREAD SAFETY: the cut, the peer marks and the resume run under the
 * model's writer lock (the cut also try-locks S.pub_lock); the start's
 * check runs before any thread of the model.
 */
#define _GNU_SOURCE
#include "online_sync_impl.h"

#include "log.h"
#include "model/train_sync.h"
#include "store/delta.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void online__sync_peer_keys_init(struct online_sync_model *s)
{
    const server_config_t *c = &G.srv->cfg;
    if (s->peer_keys || s->peer_all || c->online_export_ms <= 0 || !c->model_repo[0])
        return;
    s->peer_keys = calloc(PEER_KEYS_SLOTS, sizeof *s->peer_keys);
    s->peer_slots = malloc(PEER_KEYS_SLOTS / 2 * sizeof *s->peer_slots);
    if (!s->peer_keys || !s->peer_slots) {
        free(s->peer_keys);
        free(s->peer_slots);
        s->peer_keys = NULL;
        s->peer_slots = NULL;
        s->peer_all = true; /* no memory: every export takes every key */
    }
}

bool online__sync_peer_pending(const online_model_t *q)
{
    struct online_sync_model *s = atomic_load_explicit(&q->sync, memory_order_relaxed);
    return s && atomic_load_explicit(&s->peer_pending, memory_order_relaxed);
}

void online__sync_peer_mark(struct online_sync_model *s, uint64_t key)
{
    atomic_store_explicit(&s->peer_pending, true, memory_order_relaxed);
    if (!s->peer_keys || s->peer_all)
        return;
    if (key == 0) {
        s->peer_zero = true;
        return;
    }
    uint32_t i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - PEER_KEYS_BITS));
    for (;; i = (i + 1) & (PEER_KEYS_SLOTS - 1)) {
        if (s->peer_keys[i] == key)
            return;
        if (s->peer_keys[i] == 0)
            break;
    }
    if (s->peer_count >= PEER_KEYS_SLOTS / 2) {
        s->peer_all = true;
        return;
    }
    s->peer_keys[i] = key;
    s->peer_slots[s->peer_count++] = i;
}

void online__sync_applied_note(struct online_sync_model *s, uint64_t producer, uint64_t seq)
{
    for (uint32_t i = 0; i < s->napplied; i++)
        if (s->applied[i].id == producer) {
            if (seq > s->applied[i].last_seq)
                s->applied[i].last_seq = seq;
            return;
        }
    if (s->napplied < PRODUCERS_MAX) /* the consumer tracks at most as many */
        s->applied[s->napplied++] = (sync_state_peer_t){producer, seq};
}

uint64_t online__sync_applied_seq(const struct online_sync_model *s, uint64_t producer)
{
    for (uint32_t i = 0; i < s->napplied; i++)
        if (s->applied[i].id == producer)
            return s->applied[i].last_seq;
    return 0;
}

/* ---- the cut ---------------------------------------------------------------------- */

int online__sync_cut(online_model_t *q, sync_state_t *st, char *why, size_t why_len)
{
    struct online_sync_model *s = atomic_load(&q->sync);
    if (!s || !q->t) {
        snprintf(why, why_len, "its trainer publishes nothing to its peers here (no "
                 "accumulators): an export could not place their updates");
        return -ENOTSUP;
    }
    if (!atomic_load(&S.caught_up)) {
        snprintf(why, why_len, "the update stream has not been read to its end since the start "
                 "(NATS unreachable, or a long stream; tlserve_sync_caught_up)");
        return -EAGAIN;
    }
    if (atomic_load(&S.unsent)) {
        snprintf(why, why_len, "an update message was given up unsent (its keys left the "
                 "residual): exports resume after a restart");
        return -EAGAIN;
    }
    if (s->applying || pthread_mutex_trylock(&S.pub_lock) != 0) {
        snprintf(why, why_len, "a peer's message half applied, or one of ours between its "
                 "encoding and the stream's acknowledgement (a publish retrying?)");
        return -EAGAIN;
    }
    free(st->dense); /* the last cut's residual buffers serve again (see ITS COST) */
    st->dense = NULL;
    st->dense_n = 0;
    st->nkeys = 0;
    uint64_t n = 0;
    for (int i = 0; i < 2; i++)
        if (s->base[i] == q->sync_base)
            n += update_acc_count(s->acc[i]);
    int rc = 0;
    if (n > st->keys_cap || st->k != s->k) { /* grown by half: a residual grows by steps */
        uint64_t cap = n + n / 2 + 1, most = 2 * (uint64_t)s->max_keys; /* 1: never malloc(0) */
        cap = cap > most && n <= most ? most : cap;
        sync_state_free(st);
        st->keys = malloc(cap * sizeof *st->keys);
        st->vals = malloc(cap * s->k * sizeof *st->vals);
        if (!st->keys || !st->vals) {
            sync_state_free(st);
            snprintf(why, why_len, "no memory for the %" PRIu64 " residual keys of the "
                     "accumulators", n);
            rc = -ENOMEM;
            goto out;
        }
        st->keys_cap = cap;
    }
    st->k = s->k;
    for (int i = 0; i < 2; i++)
        if (s->base[i] == q->sync_base)
            st->nkeys += update_acc_copy(s->acc[i], st->keys + st->nkeys,
                                         st->vals + st->nkeys * st->k);
    st->base = q->sync_base;
    st->producer = S.producer;
    st->own_last = atomic_load(&S.next_seq) - 1;
    st->npeers = s->napplied;
    memcpy(st->peers, s->applied, s->napplied * sizeof *st->peers);
    rc = online__sync_dense_cut(q, s, st, why, why_len); /* a DNN's MLP, the same instant */
    if (rc != 0)
        sync_state_free(st);
out:
    pthread_mutex_unlock(&S.pub_lock);
    return rc;
}

bool online__sync_cut_keys(online_model_t *q, void (*mark)(void *ctx, uint64_t key), void *ctx)
{
    struct online_sync_model *s = atomic_load(&q->sync);
    if (!s)
        return false;
    bool all = s->peer_all;
    if (!all && s->peer_zero)
        mark(ctx, 0);
    for (uint32_t j = 0; j < s->peer_count; j++) { /* the slots filled: not all 2^20 */
        uint32_t i = s->peer_slots[j];
        if (!all)
            mark(ctx, s->peer_keys[i]);
        s->peer_keys[i] = 0;
    }
    s->cut_peer_keys = s->peer_count + s->peer_zero;
    s->peer_count = 0;
    s->peer_zero = false;
    s->peer_all = !s->peer_keys; /* no memory: always every key */
    atomic_store_explicit(&s->peer_pending, false, memory_order_relaxed);
    return all;
}

void online__sync_cut_note(online_model_t *q, const sync_state_t *st, uint64_t ns)
{
    struct online_sync_model *s = atomic_load(&q->sync);
    if (!s)
        return;
    atomic_store_explicit(&s->cut_ns, ns, memory_order_relaxed);
    if (ns > atomic_load_explicit(&s->cut_max_ns, memory_order_relaxed))
        atomic_store_explicit(&s->cut_max_ns, ns, memory_order_relaxed); /* one writer: the lock */
    atomic_fetch_add_explicit(&s->cut_sum_ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->cuts, 1, memory_order_relaxed);
    atomic_store_explicit(&s->cut_keys, st->nkeys, memory_order_relaxed);
    atomic_store_explicit(&s->cut_peers, s->cut_peer_keys, memory_order_relaxed);
    atomic_store_explicit(&s->cut_floats,
                          st->nkeys * st->k + (uint64_t)st->dense_n * SYNC_DENSE_ARRAYS,
                          memory_order_relaxed);
}

/* ---- the restart -------------------------------------------------------------------- */

void online__sync_resume(online_model_t *q, model_t *m)
{
    sync_state_t *st = q->sync_resume;
    if (!st)
        return;
    q->sync_resume = NULL;
    struct online_sync_model *s = atomic_load(&q->sync);
    if (q->att_version != st->version) {
        LOG(LL_WARN, "online: model '%s': version %" PRIu64 " is active, not the export %" PRIu64
            " whose update exchange was kept: a new lineage, whose updates its peers refuse "
            "(and it theirs) until the replicas serve the same version", q->name,
            q->att_version, st->version);
    } else if (!q->t || !s || s->k != st->k) {
        LOG(LL_WARN, "online: model '%s': version %" PRIu64 "'s " SYNC_STATE_FILE " holds %u "
            "values a key, its trainer here syncs %u: the exchange is not resumed (its peers' "
            "updates are applied again: this replica will differ from them)", q->name,
            st->version, st->k, s ? s->k : 0);
    } else {
        q->sync_base = st->base;
        s->base[0] = s->base[1] = st->base;
        uint64_t lost = 0;
        for (uint64_t i = 0; i < st->nkeys; i++) {
            const float *v = st->vals + i * st->k;
            if (update_acc_add(s->acc[s->cur], st->keys[i], v) != 0 &&
                update_acc_add(s->acc[s->cur ^ 1], st->keys[i], v) != 0)
                lost++; /* both full: --sync-max-keys smaller than at the export */
        }
        if (lost) {
            atomic_fetch_add_explicit(&S.overflow, lost, memory_order_relaxed);
            LOG(LL_WARN, "online: model '%s': %" PRIu64 " residual keys of the export did not "
                "fit the accumulators (--sync-max-keys %u): they stay in this replica only",
                q->name, lost, s->max_keys);
        }
        s->napplied = st->npeers;
        memcpy(s->applied, st->peers, st->npeers * sizeof *s->applied);
        s->own_skip = st->own_last;
        char why[200];
        if (online__sync_dense_resume(q, s, m, st, why, sizeof why) != 0)
            LOG(LL_WARN, "online: model '%s': the MLP of export %" PRIu64 " is not resumed: %s; "
                "it learns on from the served one (this replica will differ from its peers)",
                q->name, st->version, why);
        else if (st->dense_n)
            LOG(LL_INFO, "online: model '%s': resumes its MLP of %u parameters and its 1-bit "
                "Adam after %" PRIu64 " local steps from export %" PRIu64, q->name, st->dense_n,
                st->dense_steps, st->version);
        LOG(LL_INFO, "online: model '%s': resumes the update exchange of export %" PRIu64
            " (lineage of version %" PRIu64 "): %" PRIu64 " residual keys back in its "
            "accumulators, its own messages after sequence %" PRIu64 " subtracted, %u peers "
            "followed after their positions", q->name, st->version, st->base, st->nkeys,
            st->own_last, st->npeers);
        for (uint32_t i = 0; i < st->npeers; i++)
            LOG(LL_INFO, "online: model '%s': producer %016" PRIx64 " resumes after sequence %"
                PRIu64 " (the export holds its updates up to it)", q->name, st->peers[i].id,
                st->peers[i].last_seq);
    }
    sync_state_free(st);
    free(st);
}

/* Whether version v of mdir is an online export written in log mode. */
static bool online_export_at(const char *mdir, uint64_t v)
{
    char dir[1200], producer[STORE_PRODUCER_MAX];
    uint64_t pos;
    snprintf(dir, sizeof dir, "%s/%" PRIu64, mdir, v);
    return store_version_producer(dir, producer, NULL, NULL, NULL) == 0 &&
           online_export_producer_pos(producer, &pos);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The versions of mdir above root, ascending, into *out (allocated, the caller frees it):
 * how many (every one: the newest decides, the fallback sets each aside); -1 with no memory. */
static long versions_above(const char *mdir, uint64_t root, uint64_t **out)
{
    DIR *d = opendir(mdir);
    size_t n = 0, cap = 0;
    uint64_t *vs = NULL, v;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (store_version_is_temp(de->d_name) || !store_version_parse(de->d_name, &v) ||
            v <= root)
            continue;
        if (n == cap) {
            uint64_t *grown = realloc(vs, (cap ? 2 * cap : 256) * sizeof *vs);
            if (!grown) {
                closedir(d);
                free(vs);
                *out = NULL;
                return -1;
            }
            vs = grown;
            cap = cap ? 2 * cap : 256;
        }
        vs[n++] = v;
    }
    if (d)
        closedir(d);
    if (n)
        qsort(vs, n, sizeof *vs, cmp_u64);
    *out = vs;
    return (long)n;
}

void online__sync_state_check(online_model_t *q, uint64_t root)
{
    const server_config_t *c = &G.srv->cfg;
    if (c->online_export_ms <= 0 || !c->model_repo[0])
        return;
    char mdir[1100], path[1300], why[300];
    snprintf(mdir, sizeof mdir, "%s/%s", c->model_repo, q->name);
    uint64_t *vs = NULL;
    long listed = versions_above(mdir, root, &vs);
    if (listed < 0)
        LOG(LL_ERROR, "online: model '%s': no memory to list the versions of %s: the update "
            "exchange of its newest export is not resumed", q->name, mdir);
    size_t n = listed > 0 ? (size_t)listed : 0;
    if (n == 0 || !online_export_at(mdir, vs[n - 1])) {
        free(vs); /* the newest is the lineage's first or another producer's: nothing to resume */
        return;
    }
    uint64_t top = vs[n - 1];
    snprintf(path, sizeof path, "%s/%" PRIu64 "/" SYNC_STATE_FILE, mdir, top);
    sync_state_t *st = calloc(1, sizeof *st);
    int rc = st ? sync_state_read(path, st, why, sizeof why) : -ENOMEM;
    if (!st)
        snprintf(why, sizeof why, "no memory");
    if (rc == 0 && st->version != top)
        snprintf(why, sizeof why, "it names version %" PRIu64, st->version);
    else if (rc == 0 && st->producer != online__sync_producer())
        snprintf(why, sizeof why, "producer %016" PRIx64 " wrote it, this replica is %016" PRIx64
                 " (another --bus-node)", st->producer, online__sync_producer());
    if (rc == 0 && st->version == top && st->producer == online__sync_producer()) {
        q->sync_resume = st;
        free(vs);
        return;
    }
    if (st)
        sync_state_free(st);
    free(st);
    LOG(LL_WARN, "online: model '%s': %s: %s; the restart cannot tell its peers' updates in "
        "version %" PRIu64 " from its own: the online exports above version %" PRIu64 " are set "
        "aside (void-<version>-<time> in %s), version %" PRIu64 " loads and the whole sample log "
        "and update stream are learned again", q->name, path, why, top, root, mdir, root);
    long now = (long)time(NULL);
    for (size_t i = 0; i < n; i++) {
        if (!online_export_at(mdir, vs[i]))
            continue;
        char from[1200], to[1300];
        snprintf(from, sizeof from, "%s/%" PRIu64, mdir, vs[i]);
        snprintf(to, sizeof to, "%s/void-%" PRIu64 "-%ld", mdir, vs[i], now);
        if (rename(from, to) != 0)
            LOG(LL_ERROR, "online: model '%s': %s not set aside (%s): it may load, and its "
                "peers' updates would then count twice here", q->name, from, strerror(errno));
    }
    free(vs);
}
