/*
 * online_sync_apply.c — the consuming side of partitioned replicas
 * (online_sync.c has the design): the consumer thread reads the update
 * stream in order, tracks each producer's sequence (gaps re-read, unknown
 * producers refused), and adds each peer message's increments to its
 * model's trainer under the model's writer lock, APPLY_BATCH keys a hold:
 * train_lr_sync_apply for LR-FTRL, train_rows_sync_apply for FM, FFM and
 * the DNN (K = 2R; a message of another K is refused); a DENSE message (the
 * DNN's MLP) goes to online_sync_dense.c.  This replica's own
 * messages of an earlier run are subtracted from its accumulator instead
 * (online_sync.c: RESTART).
 *
 * A RESTART FROM AN EXPORT (online_sync_export.c): nothing of a model is
 * applied while its trainer's replay is pending (the resume puts the
 * export's positions in place first); then a peer's message at or below
 * the last sequence applied into the model (s->applied, which the export
 * recorded) and an own one at or below s->own_skip are skipped.  A model
 * restarting from its sample log whose version the repository has not
 * loaded yet holds the consumer up to RESTART_WAIT_MS (its messages would
 * be refused as for a model not served).  A message spans several holds
 * of the writer lock: s->applying keeps an export's cut out of it.
 *
 * NATS DOWN AT START: the bus is opened in the background (online_sync.c);
 * the consumer first waits for bus_ready, then reads from 1.  The publisher
 * sends only once the consumer has read to the end (S.caught_up), so it
 * waits for the bus too, and the trainer's increments accumulate meanwhile.
 *
 * THREAD SAFETY: the consumer thread alone reads and writes the producer
 * table and the re-read state (S.prod, nprod, max_sseq, repair_until);
 * trainer state and accumulators only under the model's writer lock.
 */
#define _GNU_SOURCE
#include "online_sync_impl.h"

#include "log.h"
#include "model/model.h"
#include "model/overlay.h"
#include "model/train_sync.h"
#include "model/update_codec.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct apply_ctx {
    online_model_t *q;
    server_slot_t *ms;
    server_model_t *sm;  /* pinned while the writer lock is held */
    uint64_t version;
    uint32_t in_batch;
    uint64_t keys, refused;
    bool own;            /* this replica's own earlier message: subtracted from the accumulator */
    bool rows;           /* the trainer syncs rows (train_rows_sync_apply), else LR-FTRL */
    uint32_t k;          /* the message's values per key (the trainer's) */
    bool aborted;        /* the version changed mid-message: the rest is not applied */
    struct online_sync_model *s; /* the model's accumulators (NULL: none) */
};

/* Takes the writer lock and pins the active version with no overlay (a fold
 * due goes first, as for the trainer): true, or false (lock not held) when
 * stopping or no version is live. */
static bool hold(struct apply_ctx *a)
{
    while (!atomic_load(&S.stop)) {
        pthread_mutex_lock(&a->ms->writer);
        a->sm = server_model_acquire_named(G.srv, a->q->name);
        if (a->sm && model_overlays(a->sm->model, NULL) == 0)
            return true;
        bool none = !a->sm;
        server_model_release(a->sm);
        a->sm = NULL;
        pthread_mutex_unlock(&a->ms->writer);
        if (none)
            return false;
        sync__nap_ms(2);
    }
    return false;
}

static void unhold(struct apply_ctx *a)
{
    server_model_release(a->sm);
    a->sm = NULL;
    pthread_mutex_unlock(&a->ms->writer);
}

static int apply_key(void *ctx, uint64_t key, const float *v)
{
    struct apply_ctx *a = ctx;
    if (a->in_batch == APPLY_BATCH) { /* let the trainer and a fold in */
        unhold(a);
        if (!hold(a) || a->q->sync_base != a->version || !a->q->t) { /* a new lineage */
            a->aborted = true;
            return 1;
        }
        a->in_batch = 0;
    }
    int rc;
    if (a->own) { /* RESTART above: R - P */
        struct online_sync_model *s = atomic_load(&a->q->sync);
        float neg[UPDATE_MAX_K];
        for (uint32_t j = 0; j < a->k; j++)
            neg[j] = -v[j];
        rc = s ? update_acc_add(s->acc[s->cur], key, neg) : 0;
        if (rc == -ENOSPC)
            COUNT(overflow);
        rc = rc == -EINVAL ? -ERANGE : 0;
    } else {
        rc = a->rows ? train_rows_sync_apply(a->q->t, key, v)
                     : train_lr_sync_apply(a->q->t, key, v[0], v[1]);
        if (rc == 0 && a->s)
            online__sync_peer_mark(a->s, key); /* the next export carries it */
    }
    if (rc == -ERANGE)
        a->refused++;
    else if (rc < 0) {
        a->aborted = true;
        return 1;
    }
    a->in_batch++;
    a->keys++;
    return 0;
}

/* Applies a verified peer message to model (served here); own: one of this
 * replica's earlier messages, subtracted from its accumulator (RESTART). */
static void apply(const update_msg_t *m, const char *model, bool count_it, bool own)
{
    char why[200];
    online_model_t *q = online__model_get(model, why, sizeof why);
    struct apply_ctx a = {.q = q, .ms = server_slot_named(G.srv, model), .own = own};
    if (!q || !a.ms) {
        static _Atomic uint64_t unapplied; /* logged at the first ten, then every 1000th */
        uint64_t n = atomic_fetch_add_explicit(&unapplied, 1, memory_order_relaxed) + 1;
        if (sync__log_due(n))
            LOG(LL_WARN, "online: an update for model '%s' not applied (%" PRIu64 " so far): %s",
                model, n, q ? "no version of it is live" : why);
        return;
    }
    if (!hold(&a))
        return;
    while (q->replay_pending) { /* a restart's replay (and resume from an export) first */
        unhold(&a);
        sync__nap_ms(5);
        if (!hold(&a))
            return;
    }
    const store_meta_t *meta = model_meta(a.sm->model);
    /* Attached here first, the version's first record learned is the next
     * the trainer takes, not the log's end: records logged and still queued
     * are learned into it, so a restart must replay them. */
    pthread_mutex_lock(&q->lock); /* attach may write trainer.state and trim the log */
    int rc = online__attach(q, a.sm, q->next_pos);
    pthread_mutex_unlock(&q->lock);
    if (rc == 0 && q->t && q->sync_base != m->base_version) { /* the lineage's first version */
        unhold(&a);
        if (count_it && !own) {
            uint64_t n = atomic_fetch_add_explicit(&S.stale, 1, memory_order_relaxed) + 1;
            if (sync__log_due(n))
                LOG(LL_WARN, "online: update %" PRIu64 " of producer %016" PRIx64 " for model '%s' "
                    "was made on version %" PRIu64 ", version %" PRIu64 " is active here (its "
                    "lineage from %" PRIu64 "): not applied", m->seq, m->producer, model,
                    m->base_version, meta->version, q->sync_base);
        }
        return;
    }
    struct online_sync_model *s = atomic_load(&q->sync);
    if (rc == 0 && q->t && s &&
        m->seq <= (own ? s->own_skip : online__sync_applied_seq(s, m->producer))) {
        unhold(&a); /* EXPORTS: the active export holds it (or its residual counts it) */
        COUNT(resumed);
        return;
    }
    bool shaped = true;
    if (rc == 0 && q->t) {
        const uint32_t r = train_rows_sync_width(q->t);
        a.rows = r != 0;
        a.k = r ? 2 * r : SYNC_K;
        a.version = q->sync_base;
        a.s = s;
        shaped = m->k == a.k;
        if (s)
            s->applying = true; /* no export's cut inside a message */
        if (shaped)
            (void)update_msg_foreach(m, apply_key, &a);
    }
    if (!a.sm && s) { /* stopping, or no version live any more: the lock was let go */
        pthread_mutex_lock(&a.ms->writer);
        s->applying = false;
        pthread_mutex_unlock(&a.ms->writer);
    } else if (a.sm) {
        if (s) {
            s->applying = false;
            if (!own && shaped && rc == 0 && q->t && !a.aborted)
                online__sync_applied_note(s, m->producer, m->seq);
        }
        unhold(&a);
    }
    if (!shaped) { /* a peer with another model of that name, or a corrupt producer */
        if (count_it || own) {
            uint64_t n = atomic_fetch_add_explicit(&S.bad, 1, memory_order_relaxed) + 1;
            if (sync__log_due(n))
                LOG(LL_WARN, "online: update %" PRIu64 " of producer %016" PRIx64 " for model "
                    "'%s' carries %u values a key; its trainer here syncs %u: not applied",
                    m->seq, m->producer, model, m->k, a.k);
        }
        return;
    }
    if (a.refused) {
        atomic_fetch_add_explicit(&S.range, a.refused, memory_order_relaxed);
        LOG(LL_WARN, "online: update %" PRIu64 " of producer %016" PRIx64 ": %" PRIu64 " keys "
            "would have made a value not finite (or n < 0): not applied", m->seq, m->producer,
            a.refused);
    }
    if (a.aborted)
        LOG(LL_WARN, "online: update %" PRIu64 " of producer %016" PRIx64 " for model '%s': "
            "applied %" PRIu64 " of %u keys (the version changed, or no memory)", m->seq,
            m->producer, model, a.keys, m->count);
    if (own) {
        COUNT(own);
        return;
    }
    COUNT(applied);
    atomic_fetch_add_explicit(&S.applied_keys, a.keys, memory_order_relaxed);
}

static struct producer *producer_find(uint64_t id)
{
    for (int i = 0; i < S.nprod; i++)
        if (S.prod[i].id == id)
            return &S.prod[i];
    return NULL;
}

enum { TRACK_APPLY, TRACK_SKIP };

/* A peer's message at stream sequence sseq against its producer's sequence
 * (PRODUCERS AND GAPS above): TRACK_APPLY, or TRACK_SKIP, with *again set
 * to the stream sequence to read again from when it found a gap. */
static int track(const update_msg_t *m, uint64_t sseq, bool reread, bool giving_up, uint64_t *again)
{
    struct producer *p = producer_find(m->producer);
    if (!p) {
        struct producer *slot = S.nprod < PRODUCERS_MAX ? &S.prod[S.nprod] : NULL;
        for (int i = 0; !slot && m->seq == 1 && i < S.nprod; i++)
            if (S.prod[i].refused) /* a refused producer holds no state: its slot is reused */
                slot = &S.prod[i];
        if (!slot || m->seq != 1) {
            if (slot) {
                *slot = (struct producer){.id = m->producer, .refused = true};
                S.nprod += slot == &S.prod[S.nprod];
            }
            if (!reread) {
                COUNT(unknown);
                static uint64_t logged_ns, lines, quiet;
                uint64_t now = online__now_ns();
                if (++lines <= 10 || now - logged_ns >= 5000000000ull) {
                    LOG(LL_WARN, "online: producer %016" PRIx64 " first seen at its sequence %"
                        PRIu64 " (stream %" PRIu64 "): %s; its updates are refused (%" PRIu64
                        " more refusals not logged)", m->producer, m->seq, sseq,
                        m->seq != 1 ? "its earlier ones are not in the stream"
                                    : "the producer table is full (every replica that ever "
                                      "published takes a slot: keep --bus-node stable across "
                                      "restarts)", quiet);
                    logged_ns = now;
                    quiet = 0;
                } else {
                    quiet++;
                }
            }
            return TRACK_SKIP;
        }
        S.nprod += slot == &S.prod[S.nprod];
        p = slot;
        *p = (struct producer){.id = m->producer, .next = 1};
    }
    if (p->refused) {
        if (!reread)
            COUNT(unknown);
        return TRACK_SKIP;
    }
    if (m->seq < p->next)
        return TRACK_SKIP; /* had it (a re-read, or JetStream stored a retry twice) */
    if (m->seq > p->next) {
        if (!reread) {
            COUNT(gaps);
            LOG(LL_WARN, "online: producer %016" PRIx64 ": sequence %" PRIu64 " arrived (stream %"
                PRIu64 "), %" PRIu64 " expected: reading the stream again from %" PRIu64,
                m->producer, m->seq, sseq, p->next, p->last_sseq + 1);
            S.repair_until = sseq;
            *again = p->last_sseq + 1;
            return TRACK_SKIP;
        }
        if (!giving_up && S.repair_until) /* another producer's gap inside a re-read */
            return TRACK_SKIP;
        COUNT(unrepaired);
        LOG(LL_ERROR, "online: producer %016" PRIx64 ": updates %" PRIu64 "..%" PRIu64 " are not "
            "in the stream: lost; following it from %" PRIu64, m->producer, p->next, m->seq - 1,
            m->seq);
    }
    p->next = m->seq + 1;
    p->last_sseq = sseq;
    return TRACK_APPLY;
}

/* A model restarting from its sample log (replay_pending, set at start)
 * whose version is not served yet (a repository still loading it): its
 * messages wait for it (refused, they would be lost to it), up to
 * RESTART_WAIT_MS (then WARN, and refused as for a model not served). */
static void wait_restart_version(const char *model)
{
    static bool gave_up[ONLINE_MODELS_MAX]; /* the consumer thread's */
    online_model_t *q = NULL;
    uint32_t n = atomic_load_explicit(&G.nmodels, memory_order_acquire), i;
    for (i = 0; i < n && !q; i++) {
        online_model_t *m = atomic_load_explicit(&G.models[i], memory_order_acquire);
        if (m && strcmp(m->name, model) == 0)
            q = m;
    }
    if (!q || gave_up[i - 1] || !__atomic_load_n(&q->replay_pending, __ATOMIC_RELAXED))
        return;
    const uint64_t until = sync__now_ms() + RESTART_WAIT_MS;
    while (!atomic_load(&S.stop) && !server_slot_named(G.srv, model)) {
        if (sync__now_ms() > until) {
            LOG(LL_WARN, "online: model '%s' restarts from its sample log and no version of it "
                "is served after %d s: its peers' updates are refused meanwhile", model,
                RESTART_WAIT_MS / 1000);
            gave_up[i - 1] = true;
            return;
        }
        sync__nap_ms(20);
    }
}

/* Handles the message at stream sequence sseq.  Returns 0, or the stream
 * sequence to read again from (a gap to repair). */
static uint64_t handle(const bus_msg_t *bm)
{
    const uint64_t sseq = bm->seq;
    const bool reread = sseq <= S.max_sseq; /* counted the first time already */
    if (!reread)
        S.max_sseq = sseq;
    if (S.repair_until && sseq >= S.repair_until)
        S.repair_until = 0; /* a re-read reached where its gap was seen (handled below) */
    const bool giving_up = S.repair_until == 0 && reread;
    update_msg_t m;
    update_error_t err;
    err.code = UPDATE_OK;
    if (update_msg_decode(bm->data, bm->len, &m, &err) != 0) {
        if (!reread) {
            uint64_t n = atomic_fetch_add_explicit(&S.bad, 1, memory_order_relaxed) + 1;
            if (sync__log_due(n))
                LOG(LL_WARN, "online: stream message %" PRIu64 " on %s is not an update: %s",
                    sseq, bm->subject, err.msg);
        }
        return 0;
    }
    const bool own = m.producer == S.producer;
    if (own) { /* learn where our sequence is; an earlier run's is subtracted (RESTART) */
        if (m.seq + 1 > atomic_load(&S.next_seq))
            atomic_store(&S.next_seq, m.seq + 1);
        if (reread || atomic_load(&S.caught_up))
            return 0;
    }
    uint64_t again = 0;
    if (!own && track(&m, sseq, reread, giving_up, &again) != TRACK_APPLY)
        return again;
    /* the subject names the model: <prefix>.<model>.updates */
    char model[UPDATE_NAME_MAX + 1];
    size_t plen = strlen(S.prefix), slen = strlen(bm->subject);
    const char *tail = ".updates";
    bool named = slen > plen + 1 + strlen(tail) && strncmp(bm->subject, S.prefix, plen) == 0 &&
                 bm->subject[plen] == '.' && strcmp(bm->subject + slen - strlen(tail), tail) == 0;
    size_t mlen = named ? slen - plen - 1 - strlen(tail) : 0;
    named = named && mlen == m.model_len && memcmp(bm->subject + plen + 1, m.model, mlen) == 0;
    if (named) {
        memcpy(model, m.model, mlen); /* m.model_len <= UPDATE_NAME_MAX (decoded) */
        model[mlen] = 0;
    }
    if (named && !server_slot_named(G.srv, model))
        wait_restart_version(model);
    if (!named || !server_slot_named(G.srv, model)) {
        if (!reread || giving_up) {
            uint64_t n = atomic_fetch_add_explicit(&S.model, 1, memory_order_relaxed) + 1;
            if (sync__log_due(n))
                LOG(LL_WARN, "online: update %" PRIu64 " of producer %016" PRIx64 " on %s names "
                    "model '%.*s': not served here, or not its subject's", m.seq, m.producer,
                    bm->subject, (int)m.model_len, m.model);
        }
        return 0;
    }
    if (m.flags & UPDATE_F_DENSE) { /* the DNN's MLP (online_sync_dense.c) */
        if (own)                     /* an earlier run's: R - P (RESTART) */
            online__sync_dense_own(&m, bm->data, bm->len, model);
        else
            online__sync_dense_apply(&m, bm->data, bm->len, model);
        return 0;
    }
    apply(&m, model, !reread, own);
    return 0;
}

/* Waits until bus_ready has succeeded once (the bus was opened in the
 * background: NATS may be down at start), logging a failure other than "no
 * server yet" once per distinct sentence: true, or false when stopping. */
static bool wait_ready(void)
{
    char last[256] = "";
    while (!atomic_load(&S.stop)) {
        bus_error_t err;
        int rc = bus_ready(S.bus, 200, &err);
        if (rc == 0) {
            const server_config_t *c = &G.srv->cfg;
            LOG(LL_INFO, "online: the bus is connected: stream %s on %s ready; reading the "
                "peers' updates from sequence 1, publishing once read to the end",
                c->bus_stream, c->bus_servers);
            atomic_store(&S.ready, true);
            return true;
        }
        if (rc != -ENOTCONN) { /* reachable, JetStream not answering yet (a leader election) */
            if (strcmp(err.msg, last) != 0)
                LOG(LL_WARN, "online: the bus is reachable but not ready: %s; trying again",
                    err.msg);
            snprintf(last, sizeof last, "%s", err.msg);
            sync__nap_ms(200);
        }
    }
    return false;
}

void *online__sync_consumer_main(void *arg)
{
    (void)arg;
    bus_reader_t *r = NULL;
    bus_error_t err;
    uint64_t from = 1;
    if (!wait_ready())
        return NULL;
    while (!atomic_load(&S.stop)) {
        if (!r && bus_reader_open(S.bus, NULL, from, &r, &err) != 0) {
            LOG(LL_WARN, "online: the update reader did not open at %" PRIu64 " (%s); trying "
                "again", from, err.msg);
            r = NULL;
            sleep(1);
            continue;
        }
        bus_msg_t m;
        int rc = bus_reader_next(r, READ_WAIT_MS, &m, &err);
        if (rc == BUS_READ_TIMEOUT) {
            atomic_store(&S.caught_up, true);
            continue;
        }
        if (rc < 0) {
            LOG(LL_WARN, "online: the update reader: %s", err.msg);
            sleep(1);
            continue;
        }
        if (rc == BUS_READ_GAP)
            LOG(LL_WARN, "online: the stream has no messages %" PRIu64 "..%" PRIu64 " (aged out "
                "or deleted); a producer's missing update shows as its gap", m.seq - m.skipped,
                m.seq - 1);
        uint64_t again = handle(&m);
        if (again) {
            bus_reader_close(r);
            r = NULL;
            from = again;
        }
    }
    bus_reader_close(r);
    return NULL;
}
