/*
 * online.c — the workers' side of online learning (online.h): per model a
 * bounded queue of TRAIN payloads, appended to the model's sample log before
 * they are acknowledged; the impression log that PREDICTs flagged LOG fill
 * and FEEDBACK frames join; the negatives of impressions nobody clicked.
 * The trainer threads that empty the queues are
 * online_trainer.c.
 *
 * THE QUEUE is a byte ring of records (online_impl.h); a record never
 * straddles the end (a len of WRAP there sends the reader back to 0).
 * Producers write under the queue's lock and publish by moving head; the one
 * consumer notes head under the lock, reads the records up to it without the
 * lock (producers write only into free space, which excludes them), and
 * gives the space back under the lock.  used counts the bytes held, the
 * wasted end before a wrap included, so head == tail is empty or full by
 * used.  The sample log is appended under the same lock, so the log's order
 * is the queue's order is the order the trainer learns in: a restart that
 * replays the log learns exactly what was learned before it.
 *
 * JOINED SAMPLES (a FEEDBACK's events, the negatives of expired or evicted
 * impressions) are queued one record per sample, as a TRAIN of one sample,
 * from inside the impression log's emit: lock order impression-log stripe,
 * then queue, everywhere.  The figures' exposition is online_metrics.c.
 */
#define _GNU_SOURCE
#include "online_impl.h"

#include "bus.h"

#include "log.h"
#include "model/model.h"
#include "online_sync_state.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

struct online_state online__G = {.lock = PTHREAD_MUTEX_INITIALIZER,
                                 .expiry_cond = PTHREAD_COND_INITIALIZER};
#define G online__G

uint64_t online__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ms(void) { return online__now_ns() / 1000000; }

/* ---- models ------------------------------------------------------------------- */

static online_model_t *model_find(const char *name)
{
    uint32_t n = atomic_load_explicit(&G.nmodels, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        online_model_t *q = atomic_load_explicit(&G.models[i], memory_order_acquire);
        if (q && strcmp(q->name, name) == 0)
            return q;
    }
    return NULL;
}

static void model_free(online_model_t *q)
{
    if (!q)
        return;
    sample_log_close(q->slog);
    online__sync_model_free(q);
    if (q->sync_resume) {
        sync_state_free(q->sync_resume);
        free(q->sync_resume);
    }
    train_destroy(q->t);
    free(q->arena.base);
    free(q->ring);
    free(q->fmarks);
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->cond);
    free(q);
}

/* The model's queue and trainer, made on its first use (or at start for a
 * model with a sample log to replay).  G.lock held.  NULL with why. */
static online_model_t *model_create_locked(const char *name, char *why, size_t why_len)
{
    const server_config_t *c = &G.srv->cfg;
    uint32_t n = atomic_load_explicit(&G.nmodels, memory_order_relaxed);
    if (n == ONLINE_MODELS_MAX) {
        snprintf(why, why_len, "online learning holds %d models at most", ONLINE_MODELS_MAX);
        return NULL;
    }
    online_model_t *q = calloc(1, sizeof *q);
    if (!q) {
        snprintf(why, why_len, "no memory for the trainer of model '%s'", name);
        return NULL;
    }
    snprintf(q->name, sizeof q->name, "%s", name);
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->cond, NULL);
    q->cap = (size_t)c->online_queue_bytes & ~(size_t)7;
    q->ring = malloc(q->cap);
    q->fmarks = calloc(ONLINE_FILE_MARKS_MAX, sizeof *q->fmarks); /* NULL: exports name no file */
    q->tokens = c->online_max_samples_per_s;
    q->tokens_ns = online__now_ns();
    if (!q->ring) {
        snprintf(why, why_len, "no memory for the %zu-byte queue of model '%s'", q->cap, name);
        model_free(q);
        return NULL;
    }
    /* no log to replay (the bus's replay mode: the stream from the export on) */
    q->restore_pending = !c->bus_servers[0] ? !c->sample_log_dir[0] : !online__sync_mode(c);
    if (c->sample_log_dir[0]) {
        snprintf(q->slog_dir, sizeof q->slog_dir, "%s/%s", c->sample_log_dir, name);
        sample_log_config_t lc = {.sync = SAMPLE_LOG_SYNC_INTERVAL,
                                  .sync_interval_ms = (uint32_t)c->sample_log_sync_ms,
                                  .segment_bytes = (uint64_t)c->sample_log_segment_kib << 10};
        sample_log_error_t lerr;
        uint64_t torn = 0;
        int rc = sample_log_open(q->slog_dir, &lc, &q->slog, &torn, &lerr);
        if (rc != 0) {
            snprintf(why, why_len, "sample log %s: %s", q->slog_dir, lerr.msg);
            model_free(q);
            return NULL;
        }
        if (torn)
            LOG(LL_WARN, "online: sample log %s: %" PRIu64 " bytes at its end cut away: a "
                "last record that fails its checksum or is cut short (a record a crash tore, "
                "never acknowledged; after a power cut, what was written after the last flush: "
                "--sample-log-sync-ms; or a last record damaged on disk, then lost)",
                q->slog_dir, torn);
        q->next_pos = sample_log_next_pos(q->slog); /* older records: replayed or not */
        uint64_t v, cr, from;
        rc = online__state_read(q->slog_dir, &v, &cr, &from);
        if (c->bus_servers[0] && !online__sync_mode(c)) { /* the stream is learned again */
            uint64_t f = online__outbox_read(q->slog_dir);
            atomic_store(&q->fwd_pos, f < sample_log_first_pos(q->slog)
                                          ? sample_log_first_pos(q->slog)
                                          : f);
            q->bus_from = rc == 0 && from > 0 ? from : 1;
        } else if (rc == 0 && from <= sample_log_next_pos(q->slog)) {
            if (online__sync_mode(c)) /* an export to resume from, or set aside */
                online__sync_state_check(q, v);
            q->replay_pending = true;
            q->replay_version = v;
            q->replay_created = cr;
            q->replay_from = from < sample_log_first_pos(q->slog) ? sample_log_first_pos(q->slog)
                                                                  : from;
            q->replay_end = sample_log_next_pos(q->slog);
        } else if (rc == -ENOENT &&
                   sample_log_next_pos(q->slog) > sample_log_first_pos(q->slog)) {
            /* acknowledged records and no trainer.state: the server stopped before its
             * trainer first attached, so none was learned: into the version active now */
            q->replay_pending = true;
            q->replay_any = true;
            q->replay_from = sample_log_first_pos(q->slog);
            q->replay_end = sample_log_next_pos(q->slog);
        } else if (rc == -EINVAL &&
                   sample_log_next_pos(q->slog) > sample_log_first_pos(q->slog)) {
            /* which version the logged records were learned into, and from where, is
             * unknown: replaying none would drop acknowledged samples, all may learn some
             * twice; the operator decides */
            snprintf(why, why_len, "sample log %s: its trainer.state is unreadable or not "
                     "'VERSION CREATED FROM', beside acknowledged records at positions "
                     "%" PRIu64 "..%" PRIu64 ": remove trainer.state to learn them all again "
                     "into the version active at start, or move the directory away to learn "
                     "none", q->slog_dir, sample_log_first_pos(q->slog),
                     sample_log_next_pos(q->slog));
            model_free(q);
            return NULL;
        } else if (rc == -EINVAL || rc == 0) {
            LOG(LL_WARN, "online: %s/trainer.state is unreadable (the log is empty) or past "
                "the log's end: nothing replayed", q->slog_dir);
        }
    }
    if (pthread_create(&q->thread, NULL, online__trainer_main, q) != 0) {
        snprintf(why, why_len, "cannot start the trainer thread of model '%s'", name);
        model_free(q);
        return NULL;
    }
    char tn[16];
    snprintf(tn, sizeof tn, "tl-train-%u", n % 100u);
    pthread_setname_np(q->thread, tn);
    atomic_store_explicit(&G.models[n], q, memory_order_release);
    atomic_store_explicit(&G.nmodels, n + 1, memory_order_release);
    LOG(LL_INFO, "online: trainer of model '%s' started%s", name,
        q->replay_pending ? " (replaying its sample log)" : "");
    return q;
}

online_model_t *online__model_get(const char *name, char *why, size_t why_len)
{
    online_model_t *q = model_find(name);
    if (q)
        return q;
    pthread_mutex_lock(&G.lock);
    q = model_find(name);
    if (!q && G.started)
        q = model_create_locked(name, why, why_len);
    else if (!q)
        snprintf(why, why_len, "the server is stopping");
    pthread_mutex_unlock(&G.lock);
    return q;
}

/* ---- the queue ---------------------------------------------------------------- */

static size_t rec_size(uint32_t len) { return ONLINE_REC_HDR + (((size_t)len + 7) & ~(size_t)7); }

/* Room for a record of size sz at head, wrapping when the end is short:
 * the offset, or SIZE_MAX when full.  Lock held; nothing changes when full. */
static size_t room_locked(online_model_t *q, size_t sz)
{
    if (q->used == 0)
        q->head = q->tail = 0;
    if (q->used == 0 || q->head > q->tail) {
        if (q->cap - q->head >= sz)
            return q->head;
        if (sz < q->tail || (q->used == 0 && sz <= q->cap)) { /* wrap to the start */
            size_t waste = q->cap - q->head;
            if (waste >= 4)
                memcpy(q->ring + q->head, &(uint32_t){ONLINE_WRAP}, 4);
            q->used += waste;
            q->head = 0;
            return 0;
        }
        return SIZE_MAX;
    }
    if (q->head < q->tail && q->tail - q->head >= sz)
        return q->head;
    return SIZE_MAX;
}

/* THE FRESHNESS BOOST.  The trainer runs at --online-nice so that a
 * contended core goes to the workers first.  Under CFS a nice-19 thread
 * beside busy nice-0 threads gets a slice about every 70 of theirs: it can
 * sit a hundred milliseconds or more without running, and every queued
 * sample (a click among them) waits with it.  So whoever queues a record
 * looks at the oldest one still queued: past --online-boost-ms, it sets the
 * trainer thread's nice to --online-boost-nice (0 by default: level with the
 * workers; a starved trainer cannot do it itself), and the trainer goes back
 * to --online-nice when its queue is empty.  Lowering
 * a nice needs CAP_SYS_NICE (or RLIMIT_NICE); without it the first refusal
 * is logged and the trainer stays at --online-nice; the first boost is
 * logged too.  A syscall only when the state changes.  Lock held. */
static void boost_locked(online_model_t *q, uint64_t now_ns)
{
    const server_config_t *c = &G.srv->cfg;
    if (q->boosted || q->boost_denied || c->online_boost_ms <= 0 ||
        c->online_nice <= c->online_boost_nice || q->used == 0)
        return;
    size_t t = q->tail;
    uint32_t len;
    if (q->cap - t < ONLINE_REC_HDR || (memcpy(&len, q->ring + t, 4), len == ONLINE_WRAP))
        t = 0; /* the end a producer skipped: the oldest is at the start */
    uint64_t oldest;
    memcpy(&oldest, q->ring + t + 8, 8);
    int tid = atomic_load_explicit(&q->trainer_tid, memory_order_acquire);
    if (tid <= 0 || now_ns - oldest < (uint64_t)c->online_boost_ms * 1000000u)
        return;
    if (setpriority(PRIO_PROCESS, (id_t)tid, c->online_boost_nice) == 0) {
        q->boosted = true;
        atomic_fetch_add_explicit(&q->boosts, 1, memory_order_relaxed);
        if (!q->boost_said) {
            q->boost_said = true;
            LOG(LL_INFO, "online: model '%s': a queued sample waited %d ms or more: the trainer "
                "runs at nice %d until its queue is empty (logged once; "
                "tlserve_online_boosts_total counts them)", q->name, c->online_boost_ms,
                c->online_boost_nice);
        }
    } else {
        q->boost_denied = true;
        LOG(LL_WARN, "online: model '%s': cannot lower the trainer's nice to %d for the "
            "freshness boost (%s; needs CAP_SYS_NICE or LimitNICE): samples may wait while it "
            "is starved", q->name, c->online_boost_nice, strerror(errno));
    }
}

/* Queues one record (payload len bytes, with the log position it got, and
 * a --train-file mark or NULL).  Lock held; the room was found by
 * room_locked(rec_size(len + the mark's bytes)) at `at`. */
static void put_locked(online_model_t *q, size_t at, uint16_t flags, const uint8_t *payload,
                       uint32_t len, const uint8_t *mark, uint64_t pos, uint64_t arrival)
{
    uint8_t *r = q->ring + at;
    uint16_t has_mark = mark != NULL;
    uint32_t total = len + (mark ? SAMPLE_LOG_MARK_BYTES : 0);
    memcpy(r, &total, 4);
    memcpy(r + 4, &flags, 2);
    memcpy(r + 6, &has_mark, 2);
    memcpy(r + 8, &arrival, 8);
    memcpy(r + 16, &pos, 8);
    memcpy(r + ONLINE_REC_HDR, payload, len);
    if (mark)
        memcpy(r + ONLINE_REC_HDR + len, mark, SAMPLE_LOG_MARK_BYTES);
    q->head = at + rec_size(total);
    q->used += rec_size(total);
    atomic_store_explicit(&q->queue_bytes, q->used, memory_order_relaxed);
    pthread_cond_signal(&q->cond);
    boost_locked(q, arrival);
}

int online__enqueue(online_model_t *q, uint16_t flags, const uint8_t *payload, uint32_t len,
                    uint64_t pos)
{
    size_t sz = rec_size(len);
    if (sz > q->cap / 2)
        return -E2BIG;
    int rc = -1;
    pthread_mutex_lock(&q->lock);
    size_t at = room_locked(q, sz);
    if (at != SIZE_MAX) {
        put_locked(q, at, flags, payload, len, NULL, pos, online__now_ns());
        rc = 0;
    }
    pthread_mutex_unlock(&q->lock);
    return rc;
}

/* An append that held the worker longer than this is counted and logged. */
#define SLOW_APPEND_NS (20 * 1000000ull)

/* Appends rec to the model's sample log (when it has one): 0 with its
 * position, or -1 with why.  Lock held. */
static int log_locked(online_model_t *q, const codec_train_t *req, const uint8_t *mark,
                      uint64_t *pos, char *why, size_t why_len)
{
    *pos = 0;
    if (!q->slog)
        return 0;
    sample_log_rec_t rec = {.train = *req, .weights = req->weights, .mark = mark};
    sample_log_error_t err;
    uint64_t t0 = online__now_ns();
    int rc = sample_log_append(q->slog, &rec, 1, pos, &err);
    uint64_t took = online__now_ns() - t0;
    if (took > SLOW_APPEND_NS) { /* the worker and every frame behind it waited */
        atomic_fetch_add_explicit(&q->log_slow, 1, memory_order_relaxed);
        LOG(LL_WARN, "online: model '%s': a sample log append took %.1f ms (the disk)", q->name,
            (double)took * 1e-6);
    }
    if (rc == 0)
        return 0;
    atomic_fetch_add_explicit(&q->log_failed, 1, memory_order_relaxed);
    snprintf(why, why_len, "sample log %s: %s", q->slog_dir, err.msg);
    return -1;
}

/* The kinds that learn online: LR, FM, FFM and the DNN (their trainers
 * write a served store: train_attach_live_model), in every bus mode
 * (online_sync.c syncs LR-FTRL's statistics and the others' rows). */
static bool kind_learns(const server_t *srv, store_model_kind_t kind)
{
    (void)srv;
    return kind == STORE_MODEL_LR || kind == STORE_MODEL_FM || kind == STORE_MODEL_FFM ||
           kind == STORE_MODEL_DNN;
}

/* The model's kind check and slot: ONLINE_QUEUED when it learns online. */
static int check_model(server_t *srv, const char *name, uint32_t *model_id, char *why,
                       size_t why_len)
{
    server_model_t *sm = server_model_acquire_named(srv, name);
    if (!sm) {
        snprintf(why, why_len, "model '%s' is not served", name);
        return ONLINE_NO_MODEL;
    }
    store_model_kind_t kind = model_meta(sm->model)->model_kind;
    bool f32 = store_dtype(model_store(sm->model)) == STORE_DTYPE_F32;
    server_model_release(sm);
    if (!kind_learns(srv, kind) || !f32) {
        snprintf(why, why_len, "model '%s' is %s%s; online learning takes LR, FM, FFM and DNN "
                 "models stored as fp32", name, store_model_kind_name(kind),
                 f32 ? "" : " stored as fp16");
        return ONLINE_KIND;
    }
    server_slot_t *slot = server_slot_named(srv, name);
    *model_id = slot ? (uint32_t)(slot - srv->models) : 0;
    return ONLINE_QUEUED;
}

/* The samples/s cap (--online-max-samples-per-s), a token bucket holding a
 * second's burst: true when n samples may be learned now (always without a
 * cap).  Lock held. */
static bool tokens_enough_locked(online_model_t *q, uint32_t n, uint64_t now_ns)
{
    int cap = G.srv->cfg.online_max_samples_per_s;
    if (cap <= 0)
        return true;
    q->tokens += (double)(now_ns - q->tokens_ns) * 1e-9 * cap;
    if (q->tokens > cap)
        q->tokens = cap;
    q->tokens_ns = now_ns;
    return q->tokens >= n;
}

/* Spends n samples' tokens.  The negatives the server makes itself are never
 * refused, only spent (down to a second's debt), so that TRAIN and FEEDBACK
 * make room for them and the cap holds for everything learned.  Lock held. */
static void tokens_spend_locked(online_model_t *q, uint32_t n)
{
    int cap = G.srv->cfg.online_max_samples_per_s;
    if (cap <= 0)
        return;
    q->tokens -= n;
    if (q->tokens < -cap)
        q->tokens = -cap;
}

static int block_beyond(const codec_block_t *b, double bound, uint64_t *id, float *value)
{
    if (!b->values)
        return 0; /* all 1.0 */
    for (uint32_t i = 0; i < b->n; i++)
        if (fabsf(b->values[i]) > bound) {
            *id = b->ids[i];
            *value = b->values[i];
            return 1;
        }
    return 0;
}

int online__value_beyond(const codec_train_t *req, double bound, uint64_t *id, float *value)
{
    if (block_beyond(&req->shared, bound, id, value))
        return 1;
    for (uint32_t s = 0; s < req->samples; s++)
        if (block_beyond(&req->sample[s], bound, id, value))
            return 1;
    return 0;
}

/* The first few and then every 1000th of a count: a WARN's rate limit. */
static bool warn_due(uint64_t count) { return count <= 10 || count % 1000 == 0; }

/* Counts a sample-log append that failed a client (TRAIN or FEEDBACK
 * answered OVERLOADED with why) and says so in the log, rate-limited: a
 * full disk must not show only in the clients' errors.  (The feeder of
 * --train-file and the negatives of expired impressions say their own.) */
static void log_failed(online_model_t *q, const char *why)
{
    uint64_t n = atomic_fetch_add_explicit(&q->refused_log, 1, memory_order_relaxed) + 1;
    if (warn_due(n))
        LOG(LL_WARN, "online: model '%s': %s; TRAIN and FEEDBACK are answered OVERLOADED until "
            "it takes appends again (refusal %" PRIu64 ", tlserve_online_refused_total"
            "{reason=\"log_failed\"})", q->name, why, n);
}

/* online_submit's body; client false: a refusal is not counted (the
 * --train-file feeder waits and retries: online__submit_file), mark the
 * sample log record's (NULL: none). */
static int submit(server_t *srv, const codec_train_t *req, uint16_t flags, const uint8_t *payload,
                  uint32_t len, char *why, size_t why_len, bool client, const uint8_t *mark)
{
    if (!srv->cfg.online) {
        snprintf(why, why_len, "online learning is not enabled on this server (--online)");
        return ONLINE_OFF;
    }
    uint32_t model_id;
    int rc = check_model(srv, req->name, &model_id, why, why_len);
    if (rc != ONLINE_QUEUED)
        return rc;
    online_model_t *q = online__model_get(req->name, why, why_len);
    if (!q)
        return ONLINE_NOMEM;
    uint64_t bad_id;
    float bad_v;
    if (online__value_beyond(req, srv->cfg.online_max_feature_value, &bad_id, &bad_v)) {
        snprintf(why, why_len, "TRAIN: feature %" PRIu64 " has value %g, beyond +-%g "
                 "(--online-max-feature-value): a step on it could make a weight infinite",
                 bad_id, (double)bad_v, srv->cfg.online_max_feature_value);
        if (client) /* the feeder narrows a refused frame down to its line and counts it */
            atomic_fetch_add_explicit(&q->bad_values, 1, memory_order_relaxed);
        return ONLINE_BAD_VALUE;
    }
    if (online__bus_on() && CODEC_HEADER_SIZE + (uint64_t)len > BUS_MAX_DATA) {
        snprintf(why, why_len, "TRAIN of %u bytes: larger than a bus message may be (%u bytes "
                 "with its frame header: nats-server's max_payload less the message headers), so "
                 "never forwarded: split it", len, BUS_MAX_DATA);
        if (client)
            atomic_fetch_add_explicit(&q->refused_full, 1, memory_order_relaxed);
        return ONLINE_TOO_BIG;
    }
    size_t sz = rec_size(len + (mark ? SAMPLE_LOG_MARK_BYTES : 0));
    if (sz > q->cap / 2) {
        snprintf(why, why_len, "TRAIN of %u bytes: larger than half the trainer's queue "
                 "(--online-queue-bytes %zu), so never taken: split it", len, q->cap);
        if (client)
            atomic_fetch_add_explicit(&q->refused_full, 1, memory_order_relaxed);
        return ONLINE_TOO_BIG;
    }
    int cap = srv->cfg.online_max_samples_per_s;
    if (cap > 0 && req->samples > (uint32_t)cap) { /* more than a second's burst: never */
        snprintf(why, why_len, "TRAIN of %u samples: model '%s' learns at most %d samples/s "
                 "(--online-max-samples-per-s), so never takes it at once: split it",
                 req->samples, req->name, cap);
        if (client)
            atomic_fetch_add_explicit(&q->refused_rate, 1, memory_order_relaxed);
        return ONLINE_TOO_BIG;
    }
    uint64_t t = online__now_ns(), pos = 0;
    pthread_mutex_lock(&q->lock);
    if (!tokens_enough_locked(q, req->samples, t))
        rc = ONLINE_RATE;
    size_t at = SIZE_MAX;
    bool bus = online__bus_on(), bus_lag = false;
    if (rc == ONLINE_QUEUED && bus && (bus_lag = online__bus_lagging(q, why, why_len)))
        rc = ONLINE_FULL; /* why says so; counted in tlserve_bus_lag_refused_total */
    else if (rc == ONLINE_QUEUED && !bus && (at = room_locked(q, sz)) == SIZE_MAX)
        rc = ONLINE_FULL;
    if (rc == ONLINE_QUEUED && log_locked(q, req, mark, &pos, why, why_len) != 0)
        rc = ONLINE_LOG;
    if (rc == ONLINE_QUEUED) {
        tokens_spend_locked(q, req->samples);
        if (!bus)
            put_locked(q, at, flags, payload, len, mark, pos, t);
    }
    pthread_mutex_unlock(&q->lock);
    if (rc == ONLINE_QUEUED) {
        atomic_fetch_add_explicit(&q->frames, 1, memory_order_relaxed);
    } else if (rc == ONLINE_RATE) {
        if (client)
            atomic_fetch_add_explicit(&q->refused_rate, 1, memory_order_relaxed);
        snprintf(why, why_len, "TRAIN: model '%s' learns at most %d samples/s "
                 "(--online-max-samples-per-s)", req->name, cap);
    } else if (rc == ONLINE_LOG) { /* why names the append's error */
        if (client)
            log_failed(q, why);
    } else if (rc == ONLINE_FULL && !bus_lag) {
        if (client)
            atomic_fetch_add_explicit(&q->refused_full, 1, memory_order_relaxed);
        snprintf(why, why_len, "TRAIN: the trainer of model '%s' has its %zu-byte queue full "
                 "(--online-queue-bytes)", req->name, q->cap);
    }
    return rc;
}

int online_submit(server_t *srv, const codec_train_t *req, uint16_t flags, const uint8_t *payload,
                  uint32_t len, char *why, size_t why_len)
{
    return submit(srv, req, flags, payload, len, why, why_len, true, NULL);
}

/* --train-file's frames (online_file.c): online_submit's path, refusals not
 * counted as a client's. */
int online__submit_file(server_t *srv, const codec_train_t *req, uint16_t flags,
                        const uint8_t *payload, uint32_t len, const uint8_t *mark, char *why,
                        size_t why_len)
{
    return submit(srv, req, flags, payload, len, why, why_len, false, mark);
}

/* ---- joined samples: FEEDBACK events, negatives ------------------------------- */

/* The frame buffer of this thread for one-sample TRAINs: grown, never shrunk,
 * freed when the thread exits (one_key's destructor). */
static _Thread_local uint8_t *one_buf;
static _Thread_local size_t one_cap;
static pthread_key_t one_key;
static pthread_once_t one_once = PTHREAD_ONCE_INIT;
static bool one_key_ok;

static void one_key_make(void) { one_key_ok = pthread_key_create(&one_key, free) == 0; }

/* Queues one TRAIN record of samples (from inside an impression-log emit):
 * 0, ONLINE_RATE when a client's samples (capped) find the samples/s cap
 * reached, ONLINE_TOO_BIG when the record could not be encoded or is over
 * half the queue (a caller may split it), ONLINE_LOG when the sample log's
 * append failed (a client's, capped: counted and warned), or ONLINE_FULL
 * when the queue (or the bus's outbox) had no room. */
static int push_train(online_model_t *q, codec_train_t *t, bool capped)
{
    snprintf(t->name, sizeof t->name, "%s", q->name);
    size_t len = 0;
    if (codec_encode_train(NULL, 0, 0, t, &len, NULL) != CODEC_NEED_MORE)
        return ONLINE_TOO_BIG;
    if (len > one_cap) {
        uint8_t *b = realloc(one_buf, len);
        if (!b)
            return ONLINE_FULL;
        one_buf = b;
        one_cap = len;
        pthread_once(&one_once, one_key_make);
        if (one_key_ok)
            (void)pthread_setspecific(one_key, b);
    }
    if (codec_encode_train(one_buf, one_cap, 0, t, &len, NULL) != CODEC_OK)
        return ONLINE_TOO_BIG;
    uint16_t flags;
    memcpy(&flags, one_buf + 6, 2);
    uint32_t plen = (uint32_t)(len - CODEC_HEADER_SIZE);
    size_t sz = rec_size(plen);
    if (sz > q->cap / 2 || (online__bus_on() && len > BUS_MAX_DATA)) /* never taken, never sent */
        return ONLINE_TOO_BIG;
    uint64_t pos, now = online__now_ns();
    char why[256];
    int rc = ONLINE_FULL;
    pthread_mutex_lock(&q->lock);
    if (capped && !tokens_enough_locked(q, t->samples, now)) {
        rc = ONLINE_RATE;
    } else if (online__bus_on()) { /* the outbox: the stream brings it to the queue */
        if (!online__bus_lagging(q, NULL, 0))
            rc = log_locked(q, t, NULL, &pos, why, sizeof why) == 0 ? 0 : ONLINE_LOG;
    } else {
        size_t at = room_locked(q, sz);
        if (at != SIZE_MAX) {
            rc = log_locked(q, t, NULL, &pos, why, sizeof why) == 0 ? 0 : ONLINE_LOG;
            if (rc == 0)
                put_locked(q, at, flags, one_buf + CODEC_HEADER_SIZE, plen, NULL, pos, now);
        }
    }
    if (rc == 0)
        tokens_spend_locked(q, t->samples);
    pthread_mutex_unlock(&q->lock);
    if (rc == ONLINE_LOG && capped) /* a FEEDBACK's sample; negatives are warned by the caller */
        log_failed(q, why);
    return rc;
}

/* One joined sample (a FEEDBACK's event) as its own record. */
static int push_sample(online_model_t *q, const impression_sample_t *s, bool capped)
{
    float label = s->label >= 0.5f ? 1.0f : 0.0f, weight = s->weight;
    codec_block_t item = s->block;
    codec_train_t one = {.samples = 1, .shared = s->shared, .labels = &label,
                         .weights = weight == 1.0f ? NULL : &weight, .sample = &item};
    int rc = push_train(q, &one, capped);
    return rc == ONLINE_TOO_BIG ? ONLINE_FULL : rc;
}

/* Items [from, from + n) of an impression's negatives as one record, split
 * in halves while a record of them is too big for the queue or a bus
 * message (an item too big even alone is dropped, the others go on): how
 * many went in.  *stop: the queue or the log could not take one, so
 * nothing more is tried. */
static uint32_t push_negative_range(online_model_t *q, const impression_negatives_t *b,
                                    uint32_t from, uint32_t n, bool *stop)
{
    static float zeros[IMPRESSION_NEGATIVES_MAX]; /* the labels: never written */
    float weights[IMPRESSION_NEGATIVES_MAX];
    for (uint32_t i = 0; b->weight != 1.0f && i < n; i++)
        weights[i] = b->weight;
    codec_train_t t = {.samples = n, .shared = b->shared, .labels = zeros,
                       .weights = b->weight == 1.0f ? NULL : weights,
                       .sample = (codec_block_t *)(uintptr_t)(b->block + from)};
    int rc = push_train(q, &t, false);
    if (rc == 0)
        return n;
    if (rc != ONLINE_TOO_BIG) {
        *stop = true;
        return 0;
    }
    if (n == 1)
        return 0;
    uint32_t took = push_negative_range(q, b, from, n / 2, stop);
    return *stop ? took : took + push_negative_range(q, b, from + n / 2, n - n / 2, stop);
}

/* Negatives of expired or evicted impressions: to their model's queue, an
 * impression's as one record (the shared block once).  How many it took.
 * The rest are lost: what nobody clicked then goes unlearned while clicks
 * (FEEDBACK, retried by their clients) still are, so the model leans
 * positive; a rate-limited WARN says so, not only a counter. */
static uint32_t push_negatives(const impression_negatives_t *b, void *ctx)
{
    (void)ctx;
    server_t *srv = G.srv;
    uint32_t took = 0;
    if (b->model_id < atomic_load_explicit(&srv->nmodels, memory_order_acquire)) {
        char why[200];
        online_model_t *q = online__model_get(srv->models[b->model_id].name, why, sizeof why);
        bool stop = false;
        if (q)
            took = push_negative_range(q, b, 0, b->n, &stop);
        uint64_t n;
        if (q && took < b->n &&
            warn_due(n = atomic_fetch_add_explicit(&q->negatives_lost, 1, memory_order_relaxed) + 1))
            LOG(LL_WARN, "online: model '%s': %u of an impression's %u negatives not learned "
                "(%s; %" PRIu64 " impressions with some lost so far; "
                "tlserve_impression_log_negatives_dropped_total counts them): unclicked items "
                "go unlearned, so the model leans toward clicks until the trainer keeps up",
                q->name, b->n - took, b->n,
                stop ? "the trainer's queue is full or its sample log failed"
                     : "an item too big for a record",
                n);
    }
    return took; /* the log counts the rest in negatives_dropped */
}

struct joined {
    online_model_t *q;
    int rc; /* push_sample's last answer */
};

static int push_joined(const impression_sample_t *s, void *ctx)
{
    struct joined *j = ctx;
    return j->rc = push_sample(j->q, s, true);
}

void online_log_impression(server_t *srv, const codec_predict_t *req, const codec_block_t *items,
                           const store_meta_t *meta)
{
    /* the logged blocks (shared, items) are a whole sample of any kind that learns */
    if (!G.imp || req->impression_id == 0 || !kind_learns(srv, meta->model_kind))
        return;
    uint64_t version = meta->version;
    server_slot_t *slot = server_slot_named(srv, req->name);
    if (!slot)
        return;
    codec_block_t shared = {req->shared.ids, req->shared.values, req->shared.n};
    int rc = impression_log_put(G.imp, req->impression_id, (uint32_t)(slot - srv->models),
                                version, now_ms(), &shared, items, req->items);
    if (rc != 0)
        atomic_fetch_add_explicit(&G.imp_refused, 1, memory_order_relaxed);
}

int online_feedback(server_t *srv, const codec_feedback_t *req, codec_feedback_ack_t *ack,
                    codec_refused_t *refusals, char *why, size_t why_len)
{
    if (!srv->cfg.online || !G.imp) {
        snprintf(why, why_len, "online learning is not enabled on this server (--online)");
        return ONLINE_OFF;
    }
    uint32_t model_id;
    int rc = check_model(srv, req->name, &model_id, why, why_len);
    if (rc != ONLINE_QUEUED)
        return rc;
    online_model_t *q = online__model_get(req->name, why, why_len);
    if (!q)
        return ONLINE_NOMEM;
    ack->accepted = ack->refused = 0;
    ack->refusal = refusals;
    uint64_t now = now_ms();
    struct joined j = {q, 0};
    for (uint32_t i = 0; i < req->events; i++) {
        const codec_feedback_event_t *e = &req->event[i];
        uint8_t reason = 0;
        switch (impression_log_feedback(G.imp, e->impression_id, model_id, e->item, e->label,
                                        e->weight, now, push_joined, &j)) {
        case IMPRESSION_FB_OK: ack->accepted++; continue;
        case IMPRESSION_FB_UNKNOWN_IMPRESSION: reason = CODEC_REFUSE_UNKNOWN_IMPRESSION; break;
        case IMPRESSION_FB_ITEM_OUT_OF_RANGE: reason = CODEC_REFUSE_ITEM_OUT_OF_RANGE; break;
        case IMPRESSION_FB_WRONG_MODEL: reason = CODEC_REFUSE_WRONG_MODEL; break;
        case IMPRESSION_FB_DUPLICATE: reason = CODEC_REFUSE_DUPLICATE; break;
        default: /* NOT_TAKEN: the cap, the queue or the log; BAD_VALUE cannot pass the codec */
            if (j.rc == ONLINE_RATE) {
                atomic_fetch_add_explicit(&q->refused_rate, 1, memory_order_relaxed);
                snprintf(why, why_len, "FEEDBACK: model '%s' learns at most %d samples/s "
                         "(--online-max-samples-per-s): event %u not taken; the %u events "
                         "before it were accepted: a retry gets DUPLICATE for them", req->name,
                         srv->cfg.online_max_samples_per_s, i, ack->accepted);
                return ONLINE_RATE;
            }
            if (j.rc == ONLINE_LOG) { /* counted and warned by push_train */
                snprintf(why, why_len, "FEEDBACK: the sample log of model '%s' could not take "
                         "event %u (its append failed: the server's log says why); the %u "
                         "events before it were accepted: a retry gets DUPLICATE for them",
                         req->name, i, ack->accepted);
                return ONLINE_FULL;
            }
            atomic_fetch_add_explicit(&q->refused_full, 1, memory_order_relaxed);
            snprintf(why, why_len, "FEEDBACK: the trainer of model '%s' could not take event %u "
                     "(its %zu-byte queue is full, or its outbox waits for the bus); the %u "
                     "events before it were accepted: a retry gets DUPLICATE for them",
                     req->name, i, q->cap, ack->accepted);
            return ONLINE_FULL;
        }
        refusals[ack->refused++] = (codec_refused_t){i, reason};
    }
    return ONLINE_QUEUED;
}

/* ---- expiry: the negatives of impressions nobody clicked ---------------------- */

static void *expiry_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&G.lock);
    while (!G.expiry_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&G.expiry_cond, &G.lock, &ts);
        pthread_mutex_unlock(&G.lock);
        impression_log_expire(G.imp, now_ms(), push_negatives, NULL);
        pthread_mutex_lock(&G.lock);
    }
    pthread_mutex_unlock(&G.lock);
    return NULL;
}

/* ---- start, stop ------------------------------------------------------------------ */

int online_start(server_t *srv, char *why, size_t why_len)
{
    const server_config_t *c = &srv->cfg;
    G.srv = srv;
    if (!c->online) /* --train-file, --sample-log-dir without it: config_check.c */
        return 0;
    train_optimizer_t opt;
    if (train_optimizer_parse(c->online_optimizer, &opt) != 0) {
        snprintf(why, why_len, "--online-optimizer '%s': use ftrl, adagrad or sgd",
                 c->online_optimizer);
        return -EINVAL;
    }
    train_options_t *o = &G.opts;
    if (train_defaults(STORE_MODEL_LR, opt, o) != 0)
        return -EINVAL;
    if (c->online_alpha >= 0)
        o->lr.alpha = c->online_alpha;
    if (c->online_beta >= 0)
        o->lr.beta = c->online_beta;
    if (c->online_l1 >= 0)
        o->lr.l1 = c->online_l1;
    if (c->online_l2 >= 0)
        o->lr.l2 = c->online_l2;
    train_t *probe; /* the options' checks, once, at start */
    int rc = train_create(o, &probe, why, why_len);
    if (rc != 0)
        return rc;
    char desc[160];
    train_describe(probe, desc, sizeof desc);
    train_destroy(probe);

    if ((rc = online__check_dirs(c, why, why_len)) != 0) /* online_dirs.c */
        return rc;

    impression_log_config_t ic = impression_log_config_default();
    ic.max_bytes = (uint64_t)c->impression_log_mib << 20;
    ic.window_ms = (uint64_t)c->impression_window_ms;
    ic.emit_negatives = c->impression_negatives;
    ic.evict_emit = push_negatives;
    if ((rc = impression_log_create(&ic, &G.imp)) != 0) {
        snprintf(why, why_len, "the impression log (--impression-log-mib %d) could not be made: %s",
                 c->impression_log_mib, strerror(-rc));
        return rc;
    }
    pthread_mutex_lock(&G.lock);
    G.started = true;
    /* a model with a sample log learns it again first (a restart) */
    DIR *d = c->sample_log_dir[0] ? opendir(c->sample_log_dir) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL && rc == 0) {
        if (de->d_name[0] == '.' || strlen(de->d_name) > CODEC_MAX_NAME)
            continue;
        char p[1200];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", c->sample_log_dir, de->d_name);
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode) && !model_create_locked(de->d_name, why, why_len))
            rc = -EIO;
    }
    if (d)
        closedir(d);
    G.expiry_stop = false;
    if (rc == 0 && pthread_create(&G.expiry, NULL, expiry_main, NULL) == 0)
        G.expiry_running = true;
    pthread_mutex_unlock(&G.lock);
    if (rc == 0)
        rc = online__bus_start(why, why_len);
    if (rc == 0)
        rc = online__file_start(why, why_len); /* online_file.c */
    if (rc != 0) {
        online_stop();
        return rc;
    }
    LOG(LL_INFO, "online learning on: LR models %s (other kinds: their trainer's options at "
        "attach); queue %d bytes per model, cap %d samples/s; impression log %d MiB, window %d "
        "ms; sample log %s", desc, c->online_queue_bytes,
        c->online_max_samples_per_s, c->impression_log_mib, c->impression_window_ms,
        c->sample_log_dir[0] ? c->sample_log_dir : "none (acknowledged = queued)");
    return 0;
}

int online_stop(void)
{
    int lost = 0;
    online__file_stop(); /* online_file.c: it submits to the trainers, so first */
    online__bus_stop(); /* nothing more reaches the queues from the stream */
    pthread_mutex_lock(&G.lock);
    G.started = false;
    G.expiry_stop = true;
    pthread_cond_signal(&G.expiry_cond);
    bool join = G.expiry_running;
    G.expiry_running = false;
    pthread_mutex_unlock(&G.lock);
    if (join)
        pthread_join(G.expiry, NULL);
    uint32_t n = atomic_load(&G.nmodels);
    for (uint32_t i = 0; i < n; i++) {
        online_model_t *q = atomic_load(&G.models[i]);
        if (!q)
            continue;
        pthread_mutex_lock(&q->lock);
        q->stop = true;
        pthread_cond_signal(&q->cond);
        pthread_mutex_unlock(&q->lock);
        pthread_join(q->thread, NULL);
        uint64_t left = atomic_load(&q->queue_bytes);
        LOG(left ? LL_WARN : LL_INFO, "online: trainer of model '%s' stopped: %" PRIu64
            " samples learned, %" PRIu64 " bytes left unlearned%s", q->name,
            atomic_load(&q->samples), left, left && q->slog ? " (in its sample log)" : "");
        lost += q->export_lost;
        atomic_store(&G.models[i], NULL);
        model_free(q);
    }
    atomic_store(&G.nmodels, 0);
    impression_log_destroy(G.imp);
    G.imp = NULL;
    return lost;
}
