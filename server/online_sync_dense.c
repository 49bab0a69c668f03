/*
 * online_sync_dense.c — the DNN's MLP under partitioned replicas
 * (online_sync.c has the rows' design; model/train_dnn_sync.c the 1-bit
 * Adam).  The MLP is dense, so it is not in the rows' accumulators: per
 * model a train_dnn_sync_t steps the trainer's private MLP, and every turn
 * of the publisher (--sync-interval-ms, the rows' turn) does, under the
 * model's writer lock:
 *
 *   1. train_dnn_sync_publish_mlp: the interval's delta as one DENSE
 *      message (exact f32 during the first --sync-dnn-warmup local steps,
 *      then --sync-bits (4 or 1) a value with the sender's error
 *      feedback), or, for an
 *      MLP whose message would pass the bus's MSG_MAX_BYTES, as parts of
 *      it (update_codec.h: UPDATE_F_PART), each a whole message over a
 *      range of the parameters; each takes its sequence from this
 *      producer's one counter (S.next_seq, shared with the rows' messages,
 *      so the consumer's gap repair covers both);
 *   2. model_dnn_install_mlp: a copy of the trainer's MLP (its own steps
 *      and the peers' messages applied since) becomes what requests score
 *      with, by pointer swap (model/model_mlp.c: a request never sees a
 *      half-written matrix; the replaced copy is reused once no request
 *      reads it).
 *
 * and publishes the message outside the lock on <prefix>.<model>.updates
 * with id <node>/sync/<seq>, as the rows'.  A quiet turn (no local step
 * since the last) or the final one at shutdown sends what is still owed
 * exact (train_dnn_sync_flush: the pending delta and the 1-bit error
 * vector), as the rows' quiet turns do, so replicas that stop learning end
 * with all of each other's steps; then nothing until the next step.  A
 * turn installs only if it published or a peer's message was applied.
 *
 * The consumer (online_sync_apply.c) hands a DENSE message here: it is
 * refused (tlserve_sync_dnn_refused_total, WARN with the reason) when made
 * on another lineage (its base_version, the lineage's first version, is
 * not q->sync_base), when the model here is not a DNN
 * learning its MLP, or when train_dnn_sync_apply_mlp refuses it (another
 * length n, another model, this replica's own, a value or a result not
 * finite); else it is added to the trainer's MLP
 * (tlserve_sync_dnn_applied_total), which the next turn installs.
 *
 * WHERE IT LEARNS.  Only in partitioned mode: alone, or with replay
 * replicas, the served MLP stays frozen (train_dnn.c: LIVE).  Learning it
 * there too would cost an install per interval and a second MLP copy for
 * no exchange; the replicas' reason to learn it (they see different
 * samples) is not there.
 *
 * VERSIONS.  A new trainer starts its MLP from the one served
 * (model_dnn_served_mlp).  A version on the same base (a fold): the old
 * trainer's MLP is installed first (online__sync_dense_detach), so the new
 * one starts exactly where the old stopped, and the 1-bit Adam state
 * (moments, frozen variance, pending delta, error vector) carries on.  A
 * version of another snapshot: that state starts afresh.
 *
 * RESTART (online_sync.c: RESTART, the same arithmetic).  x, the
 * trainer's MLP, is always the snapshot's plus every message applied
 * (peers') or sent (own) plus the pending delta; the error vector is what
 * was learned and is not in x yet.  Without an export the trainer starts
 * from the served snapshot's MLP and learns its sample log again: its
 * pending delta gets R, its own steps since the version began; its peers
 * hold P, the sum of its DENSE messages in the stream.  Those read before
 * the consumer caught up are subtracted from the pending delta
 * (train_dnn_sync_subtract_own), so it sends R - P and the peers end with
 * R; the peers' messages in the stream are applied to it as they are read,
 * so it ends with what they hold.  From an export (online_sync_export.c)
 * the same from the cut: x, the moments, counts, pending delta and error
 * vector put back (online__sync_dense_resume: SYNC_STATE's MLP section),
 * the log after the export's position learned, the messages up to the
 * recorded positions skipped (peers') or left alone (own: the state is
 * after them), later own ones subtracted.  Nothing is applied or
 * subtracted while the replay is pending (hold): the resume would
 * overwrite it.
 *
 * EXPORTS.  The cut (online__sync_dense_cut, under the writer lock) copies
 * x and the 1-bit Adam state; a turn holds S.pub_lock from its encode
 * (which moves the pending delta and error vector into the message) to
 * JetStream's acknowledgement, so a cut sees either the message stored
 * (its sequence at most own_last) or its delta still pending.  A peer's
 * DENSE message applied moves that peer's position (applied_note), as a
 * row message does; messages carry the lineage's first version
 * (q->sync_base), which the replica's own exports going live do not move.
 *
 * THREAD SAFETY: the train_dnn_sync_t and the trainer's MLP under the
 * model's writer lock (trainer steps, turns, applies, cuts, the resume);
 * buf is the publisher's, under S.pub_lock from encode to acknowledgement
 * (taken before the writer lock; the cut only try-locks it); counters are
 * relaxed atomics.
 */
#define _GNU_SOURCE
#include "online_sync_impl.h"

#include "log.h"
#include "model/dnn.h"
#include "model/model.h"
#include "model/overlay.h"
#include "model/train_sync.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct online_sync_dense {
    train_dnn_sync_t *s;   /* writer lock */
    uint8_t *buf;          /* publisher: a turn's messages, train_dnn_sync_bound bytes */
    size_t cap;
    uint64_t steps_sent;   /* writer lock: local steps at the last turn */
    uint64_t applied;      /* writer lock: peers' messages applied since the last install */
    bool own_subtracted;   /* writer lock: a restart's own message changed the pending delta */
    _Atomic bool warm;     /* the warm-up is over, as of the last turn (the metrics read it) */
};

int online__sync_dense_warm(const struct online_sync_dense *d)
{
    return atomic_load_explicit(&d->warm, memory_order_relaxed) ? 1 : 0;
}

void online__sync_dense_free(struct online_sync_dense *d)
{
    if (!d)
        return;
    train_dnn_sync_destroy(d->s);
    free(d->buf);
    free(d);
}

void online__sync_dense_attach(online_model_t *q, struct online_sync_model *s, const model_t *m)
{
    const server_config_t *c = &G.srv->cfg;
    size_t n = train_dnn_mlp_floats(q->t);
    if (!n)
        return;
    if (s->dense && train_dnn_sync_count(s->dense->s) != n) {
        LOG(LL_WARN, "online: model '%s': an MLP of %zu parameters, %u before: its MLP stays "
            "frozen here until a restart", q->name, n, train_dnn_sync_count(s->dense->s));
        return;
    }
    if (!s->dense) {
        train_dnn_sync_config_t sc = {.n = (uint32_t)n, .chunk = (uint32_t)c->sync_dnn_chunk,
                                      .warmup_steps = (uint32_t)c->sync_dnn_warmup,
                                      .value_bits = (uint32_t)c->sync_bits,
                                      .lr = (float)c->sync_dnn_lr, .beta1 = 0.9f,
                                      .beta2 = 0.999f, .eps = 1e-8f, .producer = S.producer,
                                      .model = q->name, .max_msg_bytes = MSG_MAX_BYTES};
        struct online_sync_dense *d = calloc(1, sizeof *d);
        int rc = d ? train_dnn_sync_create(&d->s, &sc) : -ENOMEM;
        if (rc == 0) {
            d->cap = train_dnn_sync_bound(d->s);
            d->buf = malloc(d->cap);
            rc = d->buf ? 0 : -ENOMEM;
        }
        if (rc != 0) {
            LOG(LL_WARN, "online: model '%s': its MLP of %zu parameters cannot be synced (%s): "
                "it stays frozen here", q->name, n, strerror(-rc));
            online__sync_dense_free(d);
            return;
        }
        s->dense = d;
    }
    const dnn_net_t *served = model_dnn_served_mlp(m);
    if (served && train_dnn_sync_load_mlp(q->t, served) != 0)
        LOG(LL_WARN, "online: model '%s': the served MLP does not fit its trainer", q->name);
    s->dense->applied = 0; /* steps_sent stays: a pending delta is still owed */
    (void)train_dnn_sync_attach(q->t, s->dense->s);
}

void online__sync_dense_detach(online_model_t *q, model_t *m)
{
    struct online_sync_model *s = atomic_load(&q->sync);
    struct online_sync_dense *d = s ? s->dense : NULL;
    if (!d || !q->t || !train_dnn_sync_net(q->t))
        return;
    if (model_store(m) == q->attached) { /* the same base: its MLP goes on */
        int rc = model_dnn_install_mlp(m, train_dnn_sync_net(q->t));
        if (rc != 0)
            LOG(LL_WARN, "online: model '%s': the learned MLP was not carried to the new "
                "version (%s)", q->name, strerror(-rc));
        else
            COUNT(dnn_installs);
    } else { /* another snapshot's MLP: the old one's deltas mean nothing for it */
        train_dnn_sync_reset(d->s);
        d->steps_sent = 0;
        d->own_subtracted = false;
    }
    (void)train_dnn_sync_attach(q->t, NULL);
}

void online__sync_dense_turn(online_model_t *q, struct online_sync_model *s, server_slot_t *ms,
                             bool final)
{
    struct online_sync_dense *d = s->dense;
    if (!d)
        return;
    long len = 0;
    uint64_t seq = 0;
    /* EXPORTS: from the encode (the pending delta and the error vector
     * move into the message) to the stream's acknowledgement, no cut. */
    pthread_mutex_lock(&S.pub_lock);
    pthread_mutex_lock(&ms->writer);
    server_model_t *sm = server_model_acquire_named(G.srv, q->name);
    bool mine = sm && q->t && model_store(sm->model) == q->attached &&
                train_dnn_sync_net(q->t) != NULL;
    uint64_t steps = train_dnn_sync_steps(d->s);
    bool stepped = steps != d->steps_sent || d->own_subtracted;
    bool quiet = !stepped || final; /* what is owed goes out exact */
    if (mine && (stepped || (quiet && train_dnn_sync_owes(d->s)))) {
        seq = atomic_load(&S.next_seq);
        train_dnn_sync_set_header(d->s, seq, q->sync_base); /* the lineage's, as the rows' */
        len = quiet ? train_dnn_sync_flush_mlp(q->t, d->buf, d->cap)
                    : train_dnn_sync_publish_mlp(q->t, d->buf, d->cap);
        d->steps_sent = steps;
        d->own_subtracted = false;
    }
    if (mine && (len > 0 || d->applied)) {
        int rc = model_dnn_install_mlp(sm->model, train_dnn_sync_net(q->t));
        if (rc != 0)
            LOG(LL_WARN, "online: model '%s': the learned MLP was not installed (%s)", q->name,
                strerror(-rc));
        else
            COUNT(dnn_installs);
        d->applied = 0;
    }
    atomic_store_explicit(&d->warm, train_dnn_sync_frozen(d->s), memory_order_relaxed);
    server_model_release(sm);
    pthread_mutex_unlock(&ms->writer);
    if (len < 0)
        LOG(LL_ERROR, "online: model '%s': MLP message not encoded (%s)", q->name,
            strerror((int)-len));
    /* One message, or the parts of one too large for the bus, end to end,
     * each with the next sequence number (train_dnn_sync_publish). */
    for (size_t off = 0; len > 0 && off < (size_t)len;) {
        size_t one = update_msg_span(d->buf + off, (size_t)len - off);
        if (!one) { /* cannot happen: the parts were encoded here */
            LOG(LL_ERROR, "online: model '%s': MLP message at byte %zu of %ld does not parse",
                q->name, off, len);
            atomic_store(&S.unsent, true); /* its delta left the pending one */
            break;
        }
        if (online__sync_publish(d->buf + off, one, q->name, seq) != 0) {
            atomic_store(&S.unsent, true); /* shutting down: no cut is consistent any more */
            break;
        }
        atomic_store(&S.next_seq, ++seq);
        COUNT(dnn_sent);
        atomic_fetch_add_explicit(&S.dnn_bytes, (uint64_t)one, memory_order_relaxed);
        off += one;
    }
    pthread_mutex_unlock(&S.pub_lock);
}

/* Takes the writer lock and pins the active version of model with no
 * overlay (a fold due goes first, as for the trainer) and no restart's
 * replay pending (its resume puts the export's MLP and positions in
 * place first): the version (NULL: none live, or stopping; the lock is held
 * either way). */
static server_model_t *hold(online_model_t *q, server_slot_t *ms, const char *model)
{
    pthread_mutex_lock(&ms->writer);
    server_model_t *sm = server_model_acquire_named(G.srv, model);
    while (sm && (model_overlays(sm->model, NULL) > 0 || q->replay_pending) &&
           !atomic_load(&S.stop)) {
        server_model_release(sm);
        pthread_mutex_unlock(&ms->writer);
        sync__nap_ms(2);
        pthread_mutex_lock(&ms->writer);
        sm = server_model_acquire_named(G.srv, model);
    }
    if (sm && atomic_load(&S.stop)) {
        server_model_release(sm);
        sm = NULL;
    }
    return sm;
}

void online__sync_dense_own(const update_msg_t *m, const uint8_t *buf, size_t len,
                            const char *model)
{
    char why[320];
    online_model_t *q = online__model_get(model, why, sizeof why);
    server_slot_t *ms = server_slot_named(G.srv, model);
    if (!q || !ms)
        return;
    server_model_t *sm = hold(q, ms, model);
    why[0] = 0;
    bool skipped = false;
    if (sm) {
        pthread_mutex_lock(&q->lock); /* attach may write trainer.state and trim the log */
        int rc = online__attach(q, sm, q->next_pos);
        pthread_mutex_unlock(&q->lock);
        struct online_sync_model *s = atomic_load(&q->sync);
        update_error_t err = {.code = UPDATE_OK};
        if (rc != 0 || !q->t || !s || !s->dense || q->sync_base != m->base_version) {
            skipped = true; /* another lineage's (or no MLP learning here): nothing owed */
        } else if (m->seq <= s->own_skip) {
            skipped = true; /* EXPORTS: the export's state is after it */
            COUNT(resumed);
        } else if ((rc = train_dnn_sync_subtract_own(s->dense->s, buf, len, &err)) != 0) {
            snprintf(why, sizeof why, "%s", err.msg[0] ? err.msg : strerror(-rc));
        } else {
            s->dense->own_subtracted = true;
        }
    }
    server_model_release(sm);
    pthread_mutex_unlock(&ms->writer);
    if (why[0])
        LOG(LL_WARN, "online: model '%s': own MLP update %" PRIu64 " of an earlier run not "
            "subtracted: %s", model, m->seq, why);
    else if (sm && !skipped)
        COUNT(own);
}

/* Counts a refusal of a peer's DENSE message and says why (rate-limited). */
static void refused(const update_msg_t *m, const char *model, const char *why)
{
    uint64_t n = atomic_fetch_add_explicit(&S.dnn_refused, 1, memory_order_relaxed) + 1;
    if (sync__log_due(n))
        LOG(LL_WARN, "online: MLP update %" PRIu64 " of producer %016" PRIx64 " for model '%s' "
            "not applied: %s", m->seq, m->producer, model, why);
}

void online__sync_dense_apply(const update_msg_t *m, const uint8_t *buf, size_t len,
                              const char *model)
{
    char why[320];
    online_model_t *q = online__model_get(model, why, sizeof why);
    server_slot_t *ms = server_slot_named(G.srv, model);
    if (!q || !ms) {
        refused(m, model, q ? "no version of it is live" : why);
        return;
    }
    server_model_t *sm = hold(q, ms, model);
    bool skipped = false;
    if (!sm) {
        snprintf(why, sizeof why, "no version of it is live");
    } else {
        pthread_mutex_lock(&q->lock); /* attach may write trainer.state and trim the log */
        int rc = online__attach(q, sm, q->next_pos);
        pthread_mutex_unlock(&q->lock);
        struct online_sync_model *s = atomic_load(&q->sync);
        update_error_t err = {.code = UPDATE_OK};
        if (rc != 0 || !q->t || !s || !s->dense) {
            snprintf(why, sizeof why, "its MLP does not learn here (not a DNN, or no trainer)");
        } else if (q->sync_base != m->base_version) {
            snprintf(why, sizeof why, "made on version %" PRIu64 ", version %" PRIu64 " is "
                     "active here (its lineage from %" PRIu64 ")", m->base_version,
                     model_meta(sm->model)->version, q->sync_base);
        } else if (m->seq <= online__sync_applied_seq(s, m->producer)) {
            skipped = true; /* EXPORTS: the active export holds it */
            why[0] = 0;
        } else if ((rc = train_dnn_sync_apply_mlp(q->t, buf, len, &err)) != 0) {
            snprintf(why, sizeof why, "%s", err.msg[0] ? err.msg : strerror(-rc));
        } else {
            s->dense->applied++;
            online__sync_applied_note(s, m->producer, m->seq); /* an export's position */
            why[0] = 0;
        }
    }
    server_model_release(sm);
    pthread_mutex_unlock(&ms->writer);
    if (why[0])
        refused(m, model, why);
    else if (skipped)
        COUNT(resumed);
    else
        COUNT(dnn_applied);
}

/* ---- EXPORTS (online_sync_export.c): the MLP's part of the cut and the resume ---- */

int online__sync_dense_cut(online_model_t *q, struct online_sync_model *s, sync_state_t *st,
                           char *why, size_t why_len)
{
    struct online_sync_dense *d = s->dense;
    if (!d || !q->t || !train_dnn_sync_net(q->t))
        return 0; /* no MLP learning here: nothing but rows */
    uint32_t n = train_dnn_sync_count(d->s);
    st->dense = malloc((size_t)n * SYNC_DENSE_ARRAYS * sizeof *st->dense);
    if (!st->dense) {
        snprintf(why, why_len, "no memory for the MLP's %u parameters and its 1-bit Adam "
                 "state", n);
        return -ENOMEM;
    }
    st->dense_n = n;
    train_dnn_sync_saved_t sv = {.n = n, .m = sync_state_dense(st, SYNC_DENSE_M),
                                 .v = sync_state_dense(st, SYNC_DENSE_V),
                                 .pending = sync_state_dense(st, SYNC_DENSE_PENDING),
                                 .error = sync_state_dense(st, SYNC_DENSE_ERROR)};
    if (train_dnn_sync_get_params(q->t, sync_state_dense(st, SYNC_DENSE_X), n) != 0 ||
        train_dnn_sync_save(d->s, &sv) != 0) { /* cannot happen: attach checked n */
        snprintf(why, why_len, "the MLP's %u parameters are not its trainer's", n);
        return -ENOTSUP;
    }
    st->dense_warmup = sv.warmup_steps;
    st->dense_steps = sv.steps;
    st->dense_b1_pow = sv.b1_pow;
    st->dense_b2_pow = sv.b2_pow;
    return 0;
}

int online__sync_dense_resume(online_model_t *q, struct online_sync_model *s, model_t *m,
                              const sync_state_t *st, char *why, size_t why_len)
{
    struct online_sync_dense *d = s->dense;
    if (!st->dense_n && !d)
        return 0;
    if (!d || !q->t || !train_dnn_sync_net(q->t) || st->dense_n != train_dnn_sync_count(d->s)) {
        snprintf(why, why_len, "it holds an MLP of %u parameters, the trainer here syncs %u",
                 st->dense_n, d ? train_dnn_sync_count(d->s) : 0);
        return -EINVAL;
    }
    train_dnn_sync_saved_t sv = {.n = st->dense_n, .warmup_steps = st->dense_warmup,
                                 .steps = st->dense_steps, .b1_pow = st->dense_b1_pow,
                                 .b2_pow = st->dense_b2_pow,
                                 .m = sync_state_dense(st, SYNC_DENSE_M),
                                 .v = sync_state_dense(st, SYNC_DENSE_V),
                                 .pending = sync_state_dense(st, SYNC_DENSE_PENDING),
                                 .error = sync_state_dense(st, SYNC_DENSE_ERROR)};
    if (train_dnn_sync_restore(d->s, &sv) != 0 ||
        train_dnn_sync_set_params(q->t, sync_state_dense(st, SYNC_DENSE_X), st->dense_n) != 0) {
        snprintf(why, why_len, "its 1-bit Adam state or MLP does not fit the trainer");
        train_dnn_sync_reset(d->s); /* as a restart without exports would start it */
        return -EINVAL;
    }
    if (st->dense_warmup != (uint32_t)G.srv->cfg.sync_dnn_warmup)
        LOG(LL_WARN, "online: model '%s': the export's MLP warm-up of %u steps goes on (not "
            "--sync-dnn-warmup %d) until a new version starts its 1-bit Adam afresh", q->name,
            st->dense_warmup, G.srv->cfg.sync_dnn_warmup);
    d->steps_sent = st->dense_steps; /* its turns were taken up to the cut */
    d->own_subtracted = false;
    d->applied = 0;
    int rc = model_dnn_install_mlp(m, train_dnn_sync_net(q->t));
    if (rc != 0)
        LOG(LL_WARN, "online: model '%s': the export's MLP is not served until the next turn "
            "(%s)", q->name, strerror(-rc));
    else
        COUNT(dnn_installs);
    atomic_store_explicit(&d->warm, train_dnn_sync_frozen(d->s), memory_order_relaxed);
    return 0;
}

void online__sync_dense_to_extras(online_model_t *q, store_extras_t *x)
{
    const dnn_net_t *net = q->t ? train_dnn_sync_net(q->t) : NULL;
    struct online_sync_model *s = atomic_load(&q->sync);
    if (!net || !s || !s->dense)
        return; /* the MLP does not learn here: the snapshot's is the one served */
    char wname[STORE_DENSE_NAME_MAX], bname[STORE_DENSE_NAME_MAX];
    for (uint32_t l = 0; l < net->n_layers; l++) {
        model_dnn_layer_names(l, wname, bname);
        uint64_t wn = (uint64_t)net->width[l] * net->width[l + 1], bn = net->width[l + 1];
        for (uint32_t i = 0; i < x->n_dense; i++) {
            store_dense_t *a = &x->dense[i];
            if (strcmp(a->name, wname) == 0 && a->count == wn)
                memcpy(a->data, net->W[l], wn * sizeof *a->data);
            else if (strcmp(a->name, bname) == 0 && a->count == bn)
                memcpy(a->data, net->b[l], bn * sizeof *a->data);
        }
    }
}
