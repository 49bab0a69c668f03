/*
 * online_sync.c — partitioned replicas (--bus-mode partitioned): each
 * replica learns only the samples it receives, and the replicas exchange
 * their trainers' additive statistics over one NATS JetStream stream,
 * compressed after 1-bit SGD with error feedback (model/update_codec.h has
 * the message).  Per model, by its trainer (model/train_sync.h):
 *
 *   LR (FTRL)        K = 2 values a key: (dz, dn); 1-bit turns NONNEG_LAST
 *   FM, FFM, DNN     K = 2R: a row's (dx_0..dx_R-1, dG_0..dG_R-1), R its
 *                    served floats (FM's w under FTRL: dz, dn); 1-bit turns
 *                    NONNEG_HALF (every dG column one-sided)
 *
 * and everything below (turns, exact flushes, gaps, restarts) is the same
 * for both.
 *
 *   trainer (online_trainer.c), per coordinate (row) a step writes, under
 *     the model's writer lock: hook on_step (on_rows) adds its increments
 *     into acc[cur]
 *   publisher thread, every --sync-interval-ms (at once when acc[cur] is
 *     full): under the writer lock swaps cur (the trainer now feeds the
 *     other accumulator) and merges the residual the last turn left there
 *     into the retired one (merge_residual); outside it encodes the retired
 *     one into messages (top --sync-topk of its keys by magnitude; with --sync-bits 4, the
 *     default, each value a sign and a power of two under its chunk's
 *     largest (update_codec.h: UPDATE_F_LOG4), n's column rounded down so
 *     that it stays >= 0; with --sync-bits 1, z's column as sign + chunk
 *     mean, n's column as NONNEG_LAST bits, the messages builds before
 *     --sync-bits read) and publishes each on
 *     <prefix>.<model>.updates with message id <node>/sync/<seq>; what a
 *     message does not carry stays in that accumulator as the residual and
 *     goes out on a later turn
 *   consumer thread: the stream from sequence 1 in order; a peer's message
 *     adds its increments to the trainer's state (train_lr_sync_apply: z,
 *     n, then w from the closed form; train_rows_sync_apply: x, G), written
 *     into the live store under the writer lock, APPLY_BATCH keys per hold,
 *     exactly as the trainer writes; a message whose K is not the model's
 *     is refused (counted as bad)
 *
 * WHY ADDITIVE.  FTRL's z and n are sums over the samples seen (dz = g -
 * sigma w, dn = g^2) and w is a function of (z, n) alone.  Sums commute:
 * once every increment has arrived every replica holds the same z and n
 * (float rounding aside) whatever the order, so nobody waits and a late or
 * repaired message is added when it comes.  (A replica's dz uses its own w:
 * the replicas agree with each other, and approximately with one node that
 * learned every sample.)
 *
 * ROWS (FM, FFM, the DNN's embeddings and wide part: Adagrad).  A
 * coordinate's state is (x, G); a step adds dG = g^2 and moves x by
 * dx = -alpha g / sqrt(G).  Replicas send and add (dx, dG): sums again,
 * so order does not matter and a late message is simply added.  Each
 * replica's dx is made with its own G (its peers' latest dG not yet in
 * it): replicas agree with each other once all messages arrived, and
 * approximately with one node that saw every sample.  The alternative,
 * sending gradients and letting each receiver step, needs the sender's G
 * at the time of the step (not additive) and costs the same bits.  A row
 * of R floats is a key of 2R values: an FFM row of 1 + 39 x 4 floats
 * makes ~1.3 kB a key exact, so a turn is split into messages of at most
 * MSG_MAX_BYTES by keys (per_msg), and a row accumulator holds at most
 * ROWS_ACC_BYTES (--sync-max-keys capped to fit).
 *
 * n (G) MUST STAY >= 0 (sqrt(n) in the step and in w).  Plain 1-bit sends +-s:
 * a key whose dn is small against its chunk's mean is sent +s, its residual
 * goes negative, a later message sends -s, and a receiver's n can fall below
 * 0.  So n's column is quantized one-sided (UPDATE_F_NONNEG_LAST): a bit
 * means +s or 0, set only where the residual is >= s (the chunk's mean), so
 * a receiver only ever adds >= 0 to n and the sender's residual never goes
 * below 0 either; it still costs 1 bit.  Rows: every dG column the same way
 * (UPDATE_F_NONNEG_HALF), and train_rows_sync_apply refuses (-ERANGE,
 * counted) whatever would still take a G below 0.  (Sending dn exact would cost 4 B a
 * key, twice the key itself; quantizing sqrt(dn) is not additive.)
 *
 * WHEN TO SEND EXACT.  A 1-bit message leaves each sent key its quantization
 * error: residuals shrink but rarely reach 0.  A turn whose accumulator got
 * nothing in its interval (training paused), or holds over 3/4 of
 * --sync-max-keys, is sent exact (f32, every key) and empties it: replicas
 * that stop training converge to the same weights in two quiet intervals.
 *
 * --sync-exact: every turn is sent exact (f32, every held key), so nothing
 * stays as a residual: the uncompressed exchange the 1-bit one is measured
 * against (loadgen/sync_bench.py).  Off, nothing here changes.
 *
 * WHAT IT SAVES.  tlserve_sync_bytes_total counts the bytes published;
 * tlserve_sync_fp32_bytes_total what an uncompressed fp32 exchange of the
 * same turns would cost: the distinct keys the trainer stepped since the
 * last turn (a touched set, struct touched_set) x (8 B + 4 B x K).  Not
 * the keys the turn holds: in 1-bit mode those include residuals of earlier
 * turns, which an uncompressed exchange would not have, and counting them
 * would flatter the ratio.  The set costs one probe a key the trainer
 * steps, in partitioned mode only: about a third of the accumulator's own
 * add (5 ns against 15 at 3k keys a turn, 25 against 85 at 200k).
 *
 * FULL (--sync-max-keys keys): a NEW key's increment stays in this
 * replica's model only (tlserve_sync_overflow_total) and the publisher
 * sends at once.  Size it above the keys touched per interval.
 *
 * NATS DOWN AT START.  The bus is opened in the background (bus.h:
 * connect_in_background): with no server reachable tlserve starts, serves
 * PREDICT and learns TRAIN here (WARN once); the consumer waits for
 * bus_ready (INFO when it succeeds) and the publisher for the consumer to
 * have read the stream (its own next sequence), so no turn runs meanwhile:
 * acc[cur] keeps every increment of the keys it holds, a new key past
 * --sync-max-keys stays local (FULL above), and the first turns send it
 * (all of it at once, exact, when crowded).  A bad --bus-servers is still refused at start.
 * A NATS lost later: nats.c reconnects, publish() sends each message again
 * (its id makes that safe) and the trainer feeds the other accumulator.
 *
 * PRODUCERS AND GAPS.  A replica's producer id is a hash of its --bus-node
 * name (stable across restarts); its sequence runs 1, 2, ... over all its
 * models.  At start the consumer reads the whole stream (learning this
 * replica's next sequence from its own messages) before the publisher
 * sends.  A sequence past the next one expected from its producer is a
 * gap: counted, logged, and the stream read again from after that
 * producer's last message (a new JetStream consumer at that sequence;
 * messages handled already are skipped).  Missing from the stream too: the
 * loss is counted (tlserve_sync_gap_unrepaired_total) and the producer
 * followed from what arrived.  An UNKNOWN producer's first message in the
 * stream is not its sequence 1 (the rest of its sum aged out): all its
 * messages are refused.  Refused and counted, never applied: a message that
 * does not parse; for a model not served here or not its subject's; made
 * on another version than the one active here; a key whose sum would not
 * be finite.
 *
 * RESTART.  The sample log is the local outbox, as without a bus: a restart
 * learns it again (online_trainer.c) with the hook on, so the accumulator
 * gets R, this replica's increments since the version began.  Its peers
 * hold P, the sum of its messages in the stream: R less what was not yet
 * sent at the kill (last turn, residuals), and with another interleaving of
 * its peers' updates.  So own messages read before the consumer caught up
 * (earlier runs': the publisher waits for it) are subtracted from the
 * accumulator instead of skipped: it holds R - P, the peers end with R and
 * so does this replica.  Nothing acknowledged is lost (with
 * --sample-log-dir) and the replicas agree again.
 *
 * EXPORTS (online_sync_export.c).  With --model-repo and --online-export-ms
 * each export also records the exchange's position (SYNC_STATE: per peer
 * the last sequence applied, this replica's last sequence, its residual;
 * a DNN's MLP and its 1-bit Adam state, online_sync_dense.c),
 * taken under the writer lock with the values; S.pub_lock, held from a
 * message's encode to its acknowledgement, keeps the cut off a message in
 * flight.  A restart from the export learns the log after it only, skips
 * what the export holds, and subtracts its own later messages as above.
 * Messages carry the lineage's first version (q->sync_base) as their base:
 * a replica's own exports going live do not change it.
 *
 * THE DNN's MLP (online_sync_dense.c).  Dense, so not in the accumulators:
 * model/train_dnn_sync.c's 1-bit Adam steps the trainer's private copy, and
 * each turn here publishes one DENSE message of its interval's delta (the
 * same producer, sequence and gap repair as the rows') and swaps a copy in
 * for the scorers (model_dnn_install_mlp: a request never sees a half-
 * written matrix).  The consumer hands DENSE messages there.
 *
 * FILES: this one (the trainer's side, publishing, start, stop, metrics),
 * online_sync_apply.c (consuming: apply, producers, gaps) and
 * online_sync_dense.c (the DNN's MLP), online_sync_export.c (exports: the
 * cut and the restart from one) and online_sync_state.c (its SYNC_STATE
 * file); online_sync_impl.h has what they share.
 *
 * THREAD SAFETY
 *   acc[], cur, base[], adds[] of a model: its writer lock (the trainer's
 *   hook, the swap, online__sync_attach); the retired accumulator is the
 *   publisher's alone between swaps.  The producer table and the re-read
 *   state are the consumer thread's.  Counters are relaxed atomics.
 */
#define _GNU_SOURCE
#include "online_sync_impl.h"

#include "log.h"
#include "model/model.h"
#include "model/train_sync.h"
#include "model/update_codec.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct online__sync_state online__sync_S = {.identity = PTHREAD_ONCE_INIT,
                                            .pub_lock = PTHREAD_MUTEX_INITIALIZER};

bool online__sync_mode(const server_config_t *c)
{
    return c->bus_servers[0] && strcmp(c->bus_mode, "partitioned") == 0;
}

/* Whether a publish may go on: running, or the last turn within its time. */
static bool may_send(void) { return !atomic_load(&S.stop) || sync__now_ms() < S.final_until; }

/* This replica's name and producer id (FNV-1a of the name): from the config
 * alone, so a trainer that attaches before the bus is open (a restart's
 * replay) already writes the right producer into its accumulators. */
static void identity(void)
{
    const server_config_t *c = &G.srv->cfg;
    if (c->bus_node[0]) {
        snprintf(S.node, sizeof S.node, "%s", c->bus_node);
    } else {
        char host[128] = "tlserve";
        (void)gethostname(host, sizeof host - 1);
        snprintf(S.node, sizeof S.node, "%s:%d", host, c->port);
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = S.node; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    S.producer = h ? h : 1;
}

uint64_t online__sync_producer(void)
{
    pthread_once(&S.identity, identity);
    return S.producer;
}

/* ---- the trainer's side ---------------------------------------------------------- */

/* Puts id into the touched set (writer lock).  At most max_keys keys a
 * generation (only keys the accumulator took), half the slots: a probe
 * finds an empty slot; past half (cannot happen) the count stops, a floor. */
static void touched_put(struct touched_set *t, uint64_t id)
{
    if (t->count > t->mask / 2)
        return;
    uint64_t h = id * 0x9E3779B97F4A7C15ull;
    for (uint32_t i = (uint32_t)(h >> 32) & t->mask;; i = (i + 1) & t->mask) {
        if (t->gen[i] != t->cur) {
            t->key[i] = id;
            t->gen[i] = t->cur;
            t->count++;
            return;
        }
        if (t->key[i] == id)
            return;
    }
}

/* Empties the touched set and returns how many keys it held (writer lock). */
static uint32_t touched_take(struct touched_set *t)
{
    uint32_t n = t->count;
    t->count = 0;
    if (++t->cur == 0) { /* wrapped: every stamp could look current again */
        memset(t->gen, 0, ((size_t)t->mask + 1) * sizeof *t->gen);
        t->cur = 1;
    }
    return n;
}

/* Adds a step's increments to acc[cur]; the trainer thread, writer lock. */
static void accumulate(online_model_t *q, uint64_t id, const float *inc)
{
    struct online_sync_model *s = atomic_load_explicit(&q->sync, memory_order_relaxed);
    int rc = update_acc_add(s->acc[s->cur], id, inc);
    if (rc == 0) {
        s->adds[s->cur]++;
        touched_put(&s->touched, id);
    } else if (rc == -ENOSPC) {
        COUNT(overflow);
        atomic_store_explicit(&s->urgent, true, memory_order_relaxed);
    } else {
        COUNT(range);
    }
}

/* train_sync_fn (LR-FTRL): runs in the trainer thread under the writer lock. */
static void on_step(void *ctx, uint64_t id, float dz, float dn)
{
    float inc[SYNC_K] = {dz, dn > 0 ? dn : 0};
    accumulate(ctx, id, inc);
}

/* train_rows_sync_fn (FM, FFM, DNN): n = 2R, the model's k (checked at attach). */
static void on_rows(void *ctx, uint64_t id, const float *d, uint32_t n)
{
    (void)n;
    accumulate(ctx, id, d);
}

static cold void model_free_sync(struct online_sync_model *s)
{
    if (!s)
        return;
    update_acc_destroy(s->acc[0]);
    update_acc_destroy(s->acc[1]);
    free(s->touched.key);
    free(s->touched.gen);
    free(s->buf);
    free(s->peer_keys);
    free(s->peer_slots);
    online__sync_dense_free(s->dense);
    free(s);
}

/* k: values per key (SYNC_K, or 2R for a row trainer). */
static cold struct online_sync_model *model_new(const online_model_t *q, uint32_t k, bool rows)
{
    struct online_sync_model *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->k = k;
    s->rows = rows;
    s->max_keys = (uint32_t)G.srv->cfg.sync_max_keys;
    uint32_t fit = ROWS_ACC_BYTES / (64 + 4 * k); /* wide rows: bounded memory, more exact turns */
    if (rows && s->max_keys > fit)
        s->max_keys = fit;
    update_acc_config_t ac = {.k = k, .max_keys = s->max_keys, .producer = S.producer,
                              .first_seq = 1, .chunk = SYNC_CHUNK, .model = q->name};
    uint64_t slots = 2;
    while (slots < 2 * (uint64_t)s->max_keys)
        slots <<= 1;
    s->touched.mask = (uint32_t)(slots - 1); /* max_keys <= 2^26: slots <= 2^27 */
    s->touched.cur = 1;
    s->touched.key = malloc(slots * sizeof *s->touched.key);
    s->touched.gen = calloc(slots, sizeof *s->touched.gen);
    s->buf = malloc(MSG_MAX_BYTES);
    if (!s->buf || !s->touched.key || !s->touched.gen ||
        update_acc_create(&s->acc[0], &ac) != 0 ||
        update_acc_create(&s->acc[1], &ac) != 0) {
        model_free_sync(s);
        return NULL;
    }
    /* an exact message's bound per key: a 10-byte varint and K floats
     * (an FFM row of 1 + 39 x 4 floats: ~790 keys a message) */
    size_t fixed = UPDATE_HEADER_BYTES + UPDATE_NAME_MAX + 8;
    s->per_msg = (uint32_t)((MSG_MAX_BYTES - fixed) / (10 + 4 * (size_t)k));
    return s;
}

void online__sync_attach(online_model_t *q, const model_t *m)
{
    const uint64_t version = q->sync_base ? q->sync_base : model_meta(m)->version;
    if (atomic_load(&S.stopped))
        return;
    pthread_once(&S.identity, identity);
    const uint32_t r = q->t ? train_rows_sync_width(q->t) : 0;
    const uint32_t k = r ? 2 * r : SYNC_K;
    if (k > UPDATE_MAX_K) { /* cannot happen: a row is at most STORE_MAX_VALUE_FLOATS */
        LOG(LL_WARN, "online: model '%s': rows of %u floats are too wide to sync: it learns "
            "here without publishing", q->name, r);
        return;
    }
    struct online_sync_model *s = atomic_load(&q->sync);
    if (s && s->k != k) { /* the publisher may hold s: it stays, unhooked */
        LOG(LL_WARN, "online: model '%s': a version of another shape (%u values a key, %u "
            "before) under partitioned replicas: it learns here without publishing until a "
            "restart", q->name, k, s->k);
        return;
    }
    if (!s) {
        s = model_new(q, k, r != 0);
        if (!s) {
            LOG(LL_ERROR, "online: model '%s': no memory for the update accumulators "
                "(--sync-max-keys %d): it learns here without publishing to its peers", q->name,
                G.srv->cfg.sync_max_keys);
            return;
        }
        atomic_store(&q->sync, s);
    }
    online__sync_peer_keys_init(s);
    update_acc_clear(s->acc[s->cur]);
    s->base[s->cur] = version;
    s->adds[s->cur] = 0;
    int rc = r ? train_rows_sync_hook(q->t, on_rows, q) : train_lr_sync_hook(q->t, on_step, q);
    if (rc != 0)
        LOG(LL_WARN, "online: model '%s': its trainer has no statistics partitioned replicas "
            "can add (LR needs FTRL): it learns here without publishing", q->name);
    else
        online__sync_dense_attach(q, s, m); /* a DNN: its MLP too */
}

/* ---- publishing -------------------------------------------------------------------- */

int online__sync_publish(const uint8_t *buf, size_t len, const char *model, uint64_t seq)
{
    char subject[200], id[256];
    snprintf(subject, sizeof subject, "%s.%s.updates", S.prefix, model);
    snprintf(id, sizeof id, "%s/sync/%" PRIu64, S.node, seq);
    while (may_send()) {
        bus_ack_t ack;
        bus_error_t err;
        if (bus_publish(S.bus, subject, buf, len, id, &ack, &err) == 0)
            return 0;
        uint64_t n = atomic_fetch_add_explicit(&S.failed, 1, memory_order_relaxed) + 1;
        if (sync__log_due(n))
            LOG(LL_WARN, "online: update %" PRIu64 " of model '%s' not stored (%s); sending it "
                "again", seq, model, err.msg);
        sync__nap_ms(100);
    }
    return -ECANCELED;
}

/* One residual key into the accumulator a turn sends.  A key whose merged
 * sum would not be finite is dropped and counted, as an increment that would
 * make it so is (accumulate); none is left out for want of room: the merge
 * runs only when both fit one accumulator. */
static int merge_key(void *ctx, uint64_t key, const float *vals)
{
    int rc = update_acc_add(ctx, key, vals);
    if (rc == -ENOSPC)
        COUNT(overflow);
    else if (rc != 0)
        COUNT(range);
    return 0;
}

/* Under the writer lock, at a turn (cur already swapped): the residual the
 * last turn left in acc[cur] joins the retired acc[r], so that the selection
 * sees each key's whole pending sum (with two accumulators taking turns, a
 * key's residual waited in the idle one while its new steps went to the
 * other: the top-k chose by half sums).  The smaller goes into the larger
 * (the pointers are swapped when that is acc[r]), so the lock is held for
 * min(held, residual) adds; skipped, the old way, when the two might not fit
 * one accumulator or belong to different lineages. */
static void merge_residual(struct online_sync_model *s, int r)
{
    update_acc_t *res = s->acc[s->cur], *ret = s->acc[r];
    uint32_t nres = update_acc_count(res), nret = update_acc_count(ret);
    if (nres == 0 || s->base[s->cur] != s->base[r] || (uint64_t)nres + nret > s->max_keys)
        return;
    uint64_t t0 = online__now_ns();
    update_acc_t *from = nres <= nret ? res : ret, *into = from == res ? ret : res;
    (void)update_acc_foreach(from, merge_key, into);
    update_acc_clear(from);
    s->acc[r] = into; /* the retired one holds the sum, the trainer's is empty */
    s->acc[s->cur] = from;
    uint64_t ns = online__now_ns() - t0;
    atomic_store_explicit(&s->merge_ns, ns, memory_order_relaxed);
    if (ns > atomic_load_explicit(&s->merge_max_ns, memory_order_relaxed))
        atomic_store_explicit(&s->merge_max_ns, ns, memory_order_relaxed); /* one writer */
}

/* One turn of q: swap its accumulators, merge the residual into the retired
 * one and send its top keys (all of them, exact, when final, quiet or
 * crowded). */
static void publish_model(online_model_t *q, bool final)
{
    struct online_sync_model *s = atomic_load(&q->sync);
    server_slot_t *ms = server_slot_named(G.srv, q->name);
    if (!s || !ms)
        return;
    pthread_mutex_lock(&ms->writer);
    int r = s->cur;
    s->cur ^= 1;
    uint64_t adds = s->adds[r];
    s->adds[r] = 0;
    uint64_t fp32 = (uint64_t)touched_take(&s->touched) * (8 + 4 * (uint64_t)s->k);
    atomic_store_explicit(&s->urgent, false, memory_order_relaxed);
    if (q->t && s->base[s->cur] != q->sync_base) { /* residuals of an old lineage */
        update_acc_clear(s->acc[s->cur]);
        s->base[s->cur] = q->sync_base;
        s->adds[s->cur] = 0;
    }
    merge_residual(s, r);
    pthread_mutex_unlock(&ms->writer);
    atomic_fetch_add_explicit(&S.fp32_bytes, fp32, memory_order_relaxed);

    update_acc_t *a = s->acc[r];
    uint32_t held = update_acc_count(a);
    bool exact = final || adds == 0 || held > s->max_keys / 4 * 3 || G.srv->cfg.sync_exact;
    uint32_t want = exact ? held : (uint32_t)ceil(G.srv->cfg.sync_topk * held);
    while (want > 0 && may_send()) {
        uint32_t n = want < s->per_msg ? want : s->per_msg;
        uint32_t onebit = (s->rows ? UPDATE_F_NONNEG_HALF : UPDATE_F_NONNEG_LAST) |
                          (G.srv->cfg.sync_bits == 4 ? UPDATE_F_LOG4 : 0);
        update_encode_opts_t o = {.flags = exact ? UPDATE_F_EXACT : onebit,
                                  .select_count = n, .base_version = s->base[r]};
        pthread_mutex_lock(&S.pub_lock); /* EXPORTS: no cut between encode and store */
        uint64_t seq = atomic_load(&S.next_seq);
        update_acc_set_next_seq(a, seq);
        long len = update_acc_encode(a, &o, s->buf, MSG_MAX_BYTES);
        if (len < 0) { /* cannot happen: per_msg keeps the bound under the buffer */
            pthread_mutex_unlock(&S.pub_lock);
            LOG(LL_ERROR, "online: model '%s': update encode failed (%s)", q->name, strerror((int)-len));
            break;
        }
        if (online__sync_publish(s->buf, (size_t)len, q->name, seq) != 0) {
            atomic_store(&S.unsent, true); /* its keys left the residual, not for the stream */
            pthread_mutex_unlock(&S.pub_lock);
            break;
        }
        atomic_store(&S.next_seq, seq + 1);
        pthread_mutex_unlock(&S.pub_lock);
        COUNT(sent);
        if (exact)
            COUNT(exact);
        atomic_fetch_add_explicit(&S.sent_keys, n, memory_order_relaxed);
        atomic_fetch_add_explicit(&S.bytes, (uint64_t)len, memory_order_relaxed);
        want -= n;
    }
    atomic_store_explicit(&s->residual_keys, update_acc_count(a), memory_order_relaxed);
    online__sync_dense_turn(q, s, ms, final); /* the DNN's MLP: its message, then the swap */
}

static void publish_all(bool final)
{
    uint32_t n = atomic_load_explicit(&G.nmodels, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        online_model_t *q = atomic_load_explicit(&G.models[i], memory_order_acquire);
        if (q)
            publish_model(q, final);
    }
}

static void *publisher_main(void *arg)
{
    (void)arg;
    const uint64_t interval = (uint64_t)G.srv->cfg.sync_interval_ms;
    uint64_t due = sync__now_ms() + interval;
    while (!atomic_load(&S.stop)) {
        sync__nap_ms(10);
        bool urgent = false;
        uint32_t n = atomic_load_explicit(&G.nmodels, memory_order_acquire);
        for (uint32_t i = 0; i < n && !urgent; i++) {
            online_model_t *q = atomic_load_explicit(&G.models[i], memory_order_acquire);
            struct online_sync_model *s = q ? atomic_load(&q->sync) : NULL;
            urgent = s && atomic_load_explicit(&s->urgent, memory_order_relaxed);
        }
        urgent = urgent || atomic_load(&S.turn_asked);
        if ((!urgent && sync__now_ms() < due) || !atomic_load(&S.caught_up))
            continue;
        due = sync__now_ms() + interval;
        atomic_store(&S.turn_asked, false); /* asked before this turn: this turn answers it */
        publish_all(false);
        COUNT(turns);
    }
    return NULL;
}

int online_sync_turn(void)
{
    if (!G.srv || !online__sync_mode(&G.srv->cfg) || atomic_load(&S.stopped))
        return -ENOTSUP;
    atomic_store(&S.turn_asked, true);
    return 0;
}

/* ---- start, stop, metrics ---------------------------------------------------- */

/* nats.c's thread: the connection went down or came back after the bus was
 * ready (logged; not while opening or stopping).  Must not block. */
static void on_state(bool up, void *arg)
{
    (void)arg;
    if (atomic_load(&S.stop) || !atomic_load(&S.ready))
        return;
    if (!up)
        LOG(LL_WARN, "online: the bus lost its NATS connection (%s): PREDICT and TRAIN go on "
            "here; updates accumulate until a server answers", G.srv->cfg.bus_servers);
    else
        LOG(LL_INFO, "online: the bus is connected again: the update exchange resumes");
}

int online__sync_start(char *why, size_t why_len)
{
    const server_config_t *c = &G.srv->cfg;
    if (G.opts.lr.optimizer != TRAIN_FTRL) {
        snprintf(why, why_len, "--bus-mode partitioned exchanges LR's FTRL statistics (z, n): "
                 "use --online-optimizer ftrl");
        return -EINVAL;
    }
    pthread_once(&S.identity, identity);
    snprintf(S.prefix, sizeof S.prefix, "%s", c->bus_subject_prefix);
    atomic_store(&S.next_seq, 1);
    atomic_store(&S.ready, false);
    atomic_store(&S.caught_up, false);
    atomic_store(&S.stopped, false);
    S.nprod = 0;
    S.max_sseq = S.repair_until = 0;
    char subject[200];
    snprintf(subject, sizeof subject, "%s.>", c->bus_subject_prefix);
    const char *subjects[1] = {subject};
    bus_options_t o = {.servers = c->bus_servers, .stream = c->bus_stream, .subjects = subjects,
                       .n_subjects = 1, .replicas = c->bus_replicas, .name = S.node,
                       .connect_in_background = true, .on_state = on_state};
    bus_error_t err;
    atomic_store(&S.stop, true); /* no state logs from a bus that fails to open */
    int rc = bus_open(&o, &S.bus, &err);
    if (rc != 0) { /* a bad URL or a stream with other settings: retrying cannot cure it */
        snprintf(why, why_len, "the bus: %s", err.msg);
        return rc;
    }
    if (!bus_connected(S.bus))
        LOG(LL_WARN, "online: the bus is not reachable yet (%s): PREDICT is served and TRAIN "
            "learned here; updates accumulate (at most --sync-max-keys %d keys a model, then "
            "new keys stay local) and the exchange with the peers starts when a server answers",
            c->bus_servers, c->sync_max_keys);
    atomic_store(&S.stop, false);
    bool con = pthread_create(&S.consumer, NULL, online__sync_consumer_main, NULL) == 0;
    if (!con || pthread_create(&S.publisher, NULL, publisher_main, NULL) != 0) {
        atomic_store(&S.stop, true);
        if (con)
            pthread_join(S.consumer, NULL);
        bus_close(S.bus);
        S.bus = NULL;
        snprintf(why, why_len, "cannot start the update consumer and publisher threads");
        return -EAGAIN;
    }
    S.running = true;
    LOG(LL_INFO, "online: partitioned replicas over stream %s on %s: node %s (producer %016"
        PRIx64 "), updates on %s.<model>.updates every %d ms, %s %g of the keys, %d bits a value",
        c->bus_stream, c->bus_servers, S.node, S.producer, S.prefix, c->sync_interval_ms,
        c->sync_exact ? "every key exact (--sync-exact), not the top" : "top", c->sync_topk,
        c->sync_exact ? 32 : c->sync_bits);
    return 0;
}

void online__sync_stop(void)
{
    if (!S.running)
        return;
    atomic_store(&S.stop, true);
    pthread_join(S.publisher, NULL);
    pthread_join(S.consumer, NULL);
    /* what the accumulators hold: both, exact, best effort for 2 s (a NATS
     * that is down does not hold the shutdown) */
    S.final_until = sync__now_ms() + 2000;
    if (atomic_load(&S.caught_up)) {
        publish_all(true);
        publish_all(true);
    }
    S.final_until = 0;
    bus_close(S.bus);
    S.bus = NULL;
    S.running = false;
    /* the trainers still run (each drains its queue before it stops): the
     * LR and rows hooks stay, so what they learn now is in the accumulators
     * for the shutdown's export (its cut: a restart from it sends that
     * residual to the peers), which live until online__sync_model_free; the
     * MLP's sync goes under each model's writer lock (the trainer steps
     * under it), and no attach installs anything again */
    atomic_store(&S.stopped, true);
    uint32_t n = atomic_load(&G.nmodels);
    for (uint32_t i = 0; i < n; i++) {
        online_model_t *q = atomic_load(&G.models[i]);
        server_slot_t *ms = q ? server_slot_named(G.srv, q->name) : NULL;
        if (!ms || !atomic_load(&q->sync)) /* sync is made under a live version's slot */
            continue;
        pthread_mutex_lock(&ms->writer);
        if (q->t)
            (void)train_dnn_sync_attach(q->t, NULL); /* the MLP is frozen again */
        pthread_mutex_unlock(&ms->writer);
    }
}

void online__sync_model_free(online_model_t *q)
{
    model_free_sync(atomic_exchange(&q->sync, NULL));
}

size_t online__sync_metrics(char *buf, size_t len)
{
    if (!S.bus || len == 0)
        return 0;
    uint64_t residual = 0;
    uint32_t nm = atomic_load(&G.nmodels);
    for (uint32_t i = 0; i < nm; i++) {
        online_model_t *q = atomic_load(&G.models[i]);
        struct online_sync_model *s = q ? atomic_load(&q->sync) : NULL;
        if (s)
            residual += atomic_load_explicit(&s->residual_keys, memory_order_relaxed);
    }
    size_t off = 0;
    int n = snprintf(buf, len,
                     "# HELP tlserve_bus_connected 1 while the NATS connection is up\n"
                     "# TYPE tlserve_bus_connected gauge\ntlserve_bus_connected %d\n"
                     "# HELP tlserve_sync_residual_keys Keys waiting as residuals after the "
                     "last turn (all models; a residual that did not fit beside the turn's "
                     "keys waits in the other accumulator, not counted)\n# TYPE tlserve_sync_residual_keys gauge\n"
                     "tlserve_sync_residual_keys %" PRIu64 "\n"
                     "# HELP tlserve_bus_ready 1 once the stream was checked or created (the "
                     "update exchange runs)\n# TYPE tlserve_bus_ready gauge\n"
                     "tlserve_bus_ready %d\n"
                     "# HELP tlserve_sync_caught_up 1 once the consumer read the update stream "
                     "to its end (publishing and exports' cuts run from then on)\n"
                     "# TYPE tlserve_sync_caught_up gauge\ntlserve_sync_caught_up %d\n"
                     "# HELP tlserve_sync_dnn_warmup_over 1 once the DNN MLP's 1-bit Adam "
                     "froze its variance and sends --sync-bits a value (exact f32 before)\n"
                     "# TYPE tlserve_sync_dnn_warmup_over gauge\n",
                     bus_connected(S.bus) ? 1 : 0, residual, atomic_load(&S.ready) ? 1 : 0,
                     atomic_load(&S.caught_up) ? 1 : 0);
    off = n < 0 ? 0 : (size_t)n >= len ? len - 1 : (size_t)n;
    for (uint32_t i = 0; i < nm && off < len; i++) { /* one sample a DNN whose MLP is synced */
        online_model_t *q = atomic_load(&G.models[i]);
        struct online_sync_model *s = q ? atomic_load(&q->sync) : NULL;
        if (!s || !s->dense)
            continue;
        n = snprintf(buf + off, len - off, "tlserve_sync_dnn_warmup_over{model=\"%s\"} %d\n",
                     q->name, online__sync_dense_warm(s->dense));
        off += n < 0 ? 0 : (size_t)n >= len - off ? len - off - 1 : (size_t)n;
    }
    static const struct {
        const char *name, *type, *help;
        size_t field; /* offsetof into struct online_sync_model */
        bool ns;      /* nanoseconds, printed as seconds */
    } cut[] = {
#define CUT_FAM(n, t, h, f, ns) {n, t, h, offsetof(struct online_sync_model, f), ns}
        CUT_FAM("tlserve_sync_cut_seconds", "gauge", "the writer lock held by the last export's "
                "cut of the update exchange (residual, peers' keys, a DNN's MLP)", cut_ns, true),
        CUT_FAM("tlserve_sync_cut_max_seconds", "gauge", "the longest cut since the start",
                cut_max_ns, true),
        CUT_FAM("tlserve_sync_cut_seconds_total", "counter", "the cuts' writer lock holds, summed",
                cut_sum_ns, true),
        CUT_FAM("tlserve_sync_cuts_total", "counter", "cuts taken (one an export)", cuts, false),
        CUT_FAM("tlserve_sync_cut_keys", "gauge", "residual entries the last cut copied (a key "
                "in both accumulators counts twice)", cut_keys, false),
        CUT_FAM("tlserve_sync_cut_peer_keys", "gauge", "keys only peers' messages wrote that "
                "the last cut handed to the export", cut_peers, false),
        CUT_FAM("tlserve_sync_cut_floats", "gauge", "floats the last cut copied (the residual's "
                "and a DNN's MLP state)", cut_floats, false),
        CUT_FAM("tlserve_sync_merge_seconds", "gauge", "the writer lock held by the last turn's "
                "merge of the residual into the accumulator it sends", merge_ns, true),
        CUT_FAM("tlserve_sync_merge_max_seconds", "gauge", "the longest merge since the start",
                merge_max_ns, true),
#undef CUT_FAM
    };
    for (size_t fi = 0; fi < sizeof cut / sizeof *cut && off < len; fi++) {
        n = snprintf(buf + off, len - off, "# HELP %s %s\n# TYPE %s %s\n", cut[fi].name,
                     cut[fi].help, cut[fi].name, cut[fi].type);
        off += n < 0 ? 0 : (size_t)n >= len - off ? len - off - 1 : (size_t)n;
        for (uint32_t i = 0; i < nm && off < len; i++) {
            online_model_t *q = atomic_load(&G.models[i]);
            struct online_sync_model *s = q ? atomic_load(&q->sync) : NULL;
            if (!s)
                continue;
            uint64_t v = atomic_load_explicit(
                (const _Atomic uint64_t *)((const char *)s + cut[fi].field), memory_order_relaxed);
            if (cut[fi].ns)
                n = snprintf(buf + off, len - off, "%s{model=\"%s\"} %.6f\n", cut[fi].name,
                             q->name, (double)v * 1e-9);
            else
                n = snprintf(buf + off, len - off, "%s{model=\"%s\"} %" PRIu64 "\n",
                             cut[fi].name, q->name, v);
            off += n < 0 ? 0 : (size_t)n >= len - off ? len - off - 1 : (size_t)n;
        }
    }
#define SYNC_X_TEXT(f, name, help)                                                                 \
    if (off < len) {                                                                               \
        n = snprintf(buf + off, len - off, "# HELP " name " " help "\n# TYPE " name                \
                     " counter\n" name " %" PRIu64 "\n",                                           \
                     atomic_load_explicit(&S.f, memory_order_relaxed));                            \
        off += n < 0 ? 0 : (size_t)n >= len - off ? len - off - 1 : (size_t)n;                     \
    }
    SYNC_COUNTERS(SYNC_X_TEXT)
#undef SYNC_X_TEXT
    return off;
}
