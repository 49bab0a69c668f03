/*
 * online.c — the online trainers (online.h): per model a bounded queue of
 * TRAIN payloads that the workers fill and one trainer thread empties into
 * the served store, with progressive-validation figures.
 *
 * THE QUEUE is a byte ring of records [len u32 | flags u16 | pad u16 |
 * arrival ns u64 | payload, padded to 8]; a record never straddles the end
 * (a len of WRAP there sends the reader back to 0).  Producers write under
 * the queue's lock and publish by moving head; the one consumer notes head
 * under the lock, reads the records up to it without the lock (producers
 * write only into free space, which excludes them), and gives the space
 * back under the lock.  used counts the bytes held, the wasted tail before
 * a wrap included, so head == tail is empty or full by used.
 *
 * THE TRAINER takes up to BATCH_RECORDS records per hold of the model's
 * writer lock (so a fold waiting for the lock waits for one batch), and the
 * active version is pinned per batch (a fold's drain waits for pins).
 *
 * FIGURES: counters since start, and over the last WINDOW samples (a ring
 * the trainer owns): logloss, AUC (rank sum, ties averaged), calibration
 * (mean prediction over mean label), and the freshness of the samples
 * learned, arrival at the worker to the weight written (the next PREDICT
 * reads it), p50 and p99.  The trainer recomputes the window figures at most
 * every PUBLISH_MS and publishes them as atomics.
 */
#define _GNU_SOURCE
#include "online.h"

#include "log.h"
#include "model/model.h"
#include "model/overlay.h"
#include "model/train.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REC_HDR 16u
#define WRAP UINT32_MAX
#define BATCH_RECORDS 64
#define WINDOW 8192
#define PUBLISH_MS 1000
#define FRESH_BUCKETS 40 /* log2 of microseconds */

struct win {
    float p;
    uint8_t y;
    uint32_t fresh_us;
};

struct om {
    int slot;             /* index in srv->models */
    char name[64];
    /* the queue */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint8_t *ring;
    size_t cap, head, tail, used;
    bool stop;
    double tokens;        /* the samples/s cap's bucket */
    uint64_t tokens_ns;
    pthread_t thread;
    /* the trainer's own (its thread only) */
    train_t *t;
    const store_t *attached; /* the store t writes, with its version */
    uint64_t att_version, att_created;
    codec_arena_t arena;
    float p[CODEC_MAX_ITEMS];
    struct win win[WINDOW];
    uint64_t nwin;
    uint64_t published_ms;
    double logloss_sum;
    /* published */
    _Atomic uint64_t frames, samples, positives, overloaded, refused_full, resets, dropped;
    _Atomic uint64_t queue_bytes, last_version;
    _Atomic uint64_t logloss_bits, win_logloss_bits, win_auc_bits, win_calib_bits;
    _Atomic uint64_t fresh_p50_us, fresh_p99_us;
};

static struct {
    pthread_mutex_t lock; /* creation of models[] entries, stop */
    server_t *srv;
    train_options_t opts;
    struct om *_Atomic models[SERVER_MODELS_MAX];
    bool started;
} G = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t dbits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double bitsd(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

int online_start(server_t *srv, char *why, size_t why_len)
{
    const server_config_t *c = &srv->cfg;
    G.srv = srv;
    if (!c->online)
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
    pthread_mutex_lock(&G.lock);
    G.started = true;
    pthread_mutex_unlock(&G.lock);
    LOG(LL_INFO, "online learning on: %s, queue %d bytes per model, cap %d samples/s", desc,
        c->online_queue_bytes, c->online_max_samples_per_s);
    return 0;
}

/* ---- the queue ----------------------------------------------------------------- */

static size_t rec_size(uint32_t len) { return REC_HDR + (((size_t)len + 7) & ~(size_t)7); }

/* Room for a record of size sz at head, wrapping when the end is short:
 * the offset, or SIZE_MAX when full.  Lock held. */
static size_t room_locked(struct om *q, size_t sz)
{
    if (q->used == 0)
        q->head = q->tail = 0;
    if (q->used == 0 || q->head > q->tail) {
        if (q->cap - q->head >= sz)
            return q->head;
        if (sz < q->tail || (q->used == 0 && sz <= q->cap)) { /* wrap to the start */
            size_t waste = q->cap - q->head;
            if (waste >= 4)
                memcpy(q->ring + q->head, &(uint32_t){WRAP}, 4);
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

static void *trainer_main(void *arg);

/* The model's trainer, started on its first TRAIN; NULL with why when it
 * cannot start. */
static struct om *om_get(int slot, const char *name, char *why, size_t why_len)
{
    struct om *q = atomic_load_explicit(&G.models[slot], memory_order_acquire);
    if (q)
        return q;
    pthread_mutex_lock(&G.lock);
    q = atomic_load_explicit(&G.models[slot], memory_order_relaxed);
    if (!q && G.started) {
        q = calloc(1, sizeof *q);
        size_t cap = (size_t)G.srv->cfg.online_queue_bytes & ~(size_t)7;
        if (q) {
            q->slot = slot;
            memcpy(q->name, G.srv->models[slot].name, sizeof q->name);
            q->cap = cap;
            q->ring = malloc(cap);
            q->tokens = G.srv->cfg.online_max_samples_per_s;
            q->tokens_ns = now_ns();
            pthread_mutex_init(&q->lock, NULL);
            pthread_cond_init(&q->cond, NULL);
        }
        if (!q || !q->ring || pthread_create(&q->thread, NULL, trainer_main, q) != 0) {
            if (q) {
                free(q->ring);
                free(q);
            }
            q = NULL;
            snprintf(why, why_len, "no memory to start the trainer of model '%s'", name);
        } else {
            char tn[16];
            snprintf(tn, sizeof tn, "tl-train-%u", (unsigned)slot % 100u);
            pthread_setname_np(q->thread, tn);
            atomic_store_explicit(&G.models[slot], q, memory_order_release);
            LOG(LL_INFO, "online: trainer of model '%s' started", name);
        }
    } else if (!q) {
        snprintf(why, why_len, "the server is stopping");
    }
    pthread_mutex_unlock(&G.lock);
    return q;
}

int online_submit(server_t *srv, const codec_train_t *req, uint16_t flags, const uint8_t *payload,
                  uint32_t len, char *why, size_t why_len)
{
    if (!srv->cfg.online) {
        snprintf(why, why_len, "TRAIN: online learning is not enabled on this server (--online)");
        return ONLINE_OFF;
    }
    server_model_t *sm = server_model_acquire_named(srv, req->name);
    if (!sm) {
        snprintf(why, why_len, "TRAIN: model '%s' is not served", req->name);
        return ONLINE_NO_MODEL;
    }
    store_model_kind_t kind = model_meta(sm->model)->model_kind;
    server_model_release(sm);
    if (kind != STORE_MODEL_LR) {
        snprintf(why, why_len, "TRAIN: model '%s' is %s; online learning takes LR models",
                 req->name, store_model_kind_name(kind));
        return ONLINE_KIND;
    }
    int slot = -1;
    uint32_t n = atomic_load_explicit(&srv->nmodels, memory_order_acquire);
    for (uint32_t i = 0; i < n && slot < 0; i++)
        if (strcmp(srv->models[i].name, req->name) == 0)
            slot = (int)i;
    if (slot < 0) {
        snprintf(why, why_len, "TRAIN: model '%s' is not served", req->name);
        return ONLINE_NO_MODEL;
    }
    struct om *q = om_get(slot, req->name, why, why_len);
    if (!q)
        return ONLINE_NOMEM;
    size_t sz = rec_size(len);
    if (sz > q->cap / 2) {
        snprintf(why, why_len, "TRAIN of %u bytes: larger than half the trainer's queue "
                 "(--online-queue-bytes %zu)", len, q->cap);
        return ONLINE_TOO_BIG;
    }
    int rc = ONLINE_QUEUED;
    pthread_mutex_lock(&q->lock);
    int cap = srv->cfg.online_max_samples_per_s;
    uint64_t t = now_ns();
    if (cap > 0) {
        q->tokens += (double)(t - q->tokens_ns) * 1e-9 * cap;
        if (q->tokens > cap)
            q->tokens = cap; /* a second's burst */
        q->tokens_ns = t;
        if (q->tokens < req->samples)
            rc = ONLINE_RATE;
    }
    size_t at = rc == ONLINE_QUEUED ? room_locked(q, sz) : SIZE_MAX;
    if (rc == ONLINE_QUEUED && at == SIZE_MAX)
        rc = ONLINE_FULL;
    if (rc == ONLINE_QUEUED) {
        if (cap > 0)
            q->tokens -= req->samples;
        uint8_t *r = q->ring + at;
        uint32_t l = len;
        uint16_t f = flags, pad = 0;
        memcpy(r, &l, 4);
        memcpy(r + 4, &f, 2);
        memcpy(r + 6, &pad, 2);
        memcpy(r + 8, &t, 8);
        memcpy(r + REC_HDR, payload, len);
        q->head = at + sz;
        q->used += sz;
        atomic_store_explicit(&q->queue_bytes, q->used, memory_order_relaxed);
        pthread_cond_signal(&q->cond);
    }
    pthread_mutex_unlock(&q->lock);
    if (rc == ONLINE_QUEUED) {
        atomic_fetch_add_explicit(&q->frames, 1, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(rc == ONLINE_RATE ? &q->overloaded : &q->refused_full, 1,
                                  memory_order_relaxed);
        if (rc == ONLINE_RATE)
            snprintf(why, why_len, "TRAIN: model '%s' learns at most %d samples/s "
                     "(--online-max-samples-per-s)", req->name, cap);
        else
            snprintf(why, why_len, "TRAIN: the trainer of model '%s' has %zu bytes queued, "
                     "no room for %zu more (--online-queue-bytes)", req->name, q->cap, sz);
    }
    return rc;
}

/* ---- the trainer ------------------------------------------------------------- */

/* (Re)attaches the trainer to sm's store when the active version changed:
 * 0, or -1 (the records are dropped, counted and logged). */
static int attach(struct om *q, server_model_t *sm)
{
    model_t *m = sm->model;
    const store_meta_t *meta = model_meta(m);
    if (q->t && q->attached == model_store(m) && q->att_version == meta->version &&
        q->att_created == meta->created_unix)
        return 0;
    train_destroy(q->t);
    q->t = NULL;
    q->attached = NULL;
    char why[200];
    int rc = meta->model_kind == STORE_MODEL_LR ? train_create(&G.opts, &q->t, why, sizeof why)
                                                : -EINVAL;
    if (rc == 0)
        rc = train_attach_live(q->t, model_base_store(m), why, sizeof why);
    if (rc != 0) {
        if (meta->model_kind != STORE_MODEL_LR)
            snprintf(why, sizeof why, "the model is %s now", store_model_kind_name(meta->model_kind));
        LOG(LL_WARN, "online: model '%s' version %" PRIu64 ": cannot learn (%s); queued samples "
            "are dropped", q->name, meta->version, why);
        train_destroy(q->t);
        q->t = NULL;
        return -1;
    }
    q->attached = model_store(m);
    q->att_version = meta->version;
    q->att_created = meta->created_unix;
    atomic_store_explicit(&q->last_version, meta->version, memory_order_relaxed);
    atomic_fetch_add_explicit(&q->resets, 1, memory_order_relaxed);
    LOG(LL_INFO, "online: model '%s' learns into version %" PRIu64, q->name, meta->version);
    return 0;
}

static int cmp_win(const void *a, const void *b)
{
    float x = ((const struct win *)a)->p, y = ((const struct win *)b)->p;
    return (x > y) - (x < y);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The window's figures, published. */
static void publish(struct om *q)
{
    size_t n = q->nwin < WINDOW ? (size_t)q->nwin : WINDOW;
    if (n == 0)
        return;
    static _Thread_local struct win w[WINDOW];
    static _Thread_local uint32_t f[WINDOW];
    memcpy(w, q->win, n * sizeof *w);
    double ll = 0, sp = 0, sy = 0;
    for (size_t i = 0; i < n; i++) {
        double p = fmin(fmax(w[i].p, 1e-7), 1 - 1e-7);
        ll -= w[i].y ? log(p) : log(1 - p);
        sp += w[i].p;
        sy += w[i].y;
        f[i] = w[i].fresh_us;
    }
    qsort(w, n, sizeof *w, cmp_win);
    double rank_pos = 0, npos = 0;
    for (size_t i = 0; i < n;) { /* ranks 1..n, ties averaged */
        size_t j = i;
        while (j < n && w[j].p == w[i].p)
            j++;
        double r = (double)(i + 1 + j) / 2, pos = 0;
        for (size_t k = i; k < j; k++)
            pos += w[k].y;
        rank_pos += r * pos;
        npos += pos;
        i = j;
    }
    double nneg = (double)n - npos;
    double auc = npos > 0 && nneg > 0 ? (rank_pos - npos * (npos + 1) / 2) / (npos * nneg) : NAN;
    qsort(f, n, sizeof *f, cmp_u32);
    atomic_store_explicit(&q->win_logloss_bits, dbits(ll / (double)n), memory_order_relaxed);
    atomic_store_explicit(&q->win_auc_bits, dbits(auc), memory_order_relaxed);
    atomic_store_explicit(&q->win_calib_bits, dbits(sy > 0 ? sp / sy : NAN), memory_order_relaxed);
    atomic_store_explicit(&q->fresh_p50_us, f[n / 2], memory_order_relaxed);
    atomic_store_explicit(&q->fresh_p99_us, f[(size_t)((double)(n - 1) * 0.99)],
                          memory_order_relaxed);
    atomic_store_explicit(&q->logloss_bits,
                          dbits(q->logloss_sum / (double)atomic_load(&q->samples)),
                          memory_order_relaxed);
}

/* Learns one queued TRAIN payload. */
static void learn(struct om *q, const uint8_t *payload, uint32_t len, uint16_t flags,
                  uint64_t arrival_ns)
{
    size_t need = codec_arena_bound(len);
    if (need > q->arena.cap) {
        void *b = realloc(q->arena.base, need);
        if (!b) {
            atomic_fetch_add_explicit(&q->dropped, 1, memory_order_relaxed);
            return;
        }
        q->arena.base = b;
        q->arena.cap = need;
    }
    codec_arena_reset(&q->arena);
    codec_train_t req;
    codec_error_t err;
    if (codec_decode_train(payload, len, flags, &q->arena, &req, &err) != CODEC_OK) {
        atomic_fetch_add_explicit(&q->dropped, 1, memory_order_relaxed); /* checked at submit */
        return;
    }
    codec_block_t shared = {req.shared.ids, req.shared.values, req.shared.n};
    if (train_update(q->t, &shared, req.sample, req.samples, req.labels, req.weights, q->p) != 0) {
        atomic_fetch_add_explicit(&q->dropped, 1, memory_order_relaxed);
        LOG(LL_WARN, "online: model '%s': no memory for a sample's step", q->name);
        return;
    }
    uint64_t done = now_ns();
    uint64_t fresh = (done - arrival_ns) / 1000;
    uint64_t pos = 0;
    for (uint32_t i = 0; i < req.samples; i++) {
        double p = fmin(fmax(q->p[i], 1e-7), 1 - 1e-7);
        bool y = req.labels[i] > 0.5f;
        q->logloss_sum -= y ? log(p) : log(1 - p);
        q->win[q->nwin++ % WINDOW] =
            (struct win){q->p[i], y, fresh > UINT32_MAX ? UINT32_MAX : (uint32_t)fresh};
        pos += y;
    }
    atomic_fetch_add_explicit(&q->samples, req.samples, memory_order_relaxed);
    atomic_fetch_add_explicit(&q->positives, pos, memory_order_relaxed);
}

/* Learns up to BATCH_RECORDS of the avail bytes from *tail on (moved past
 * them): returns the bytes consumed, wasted ends included (0: nothing
 * learned, the records stay queued). */
static size_t learn_batch(struct om *q, size_t *tail, size_t avail)
{
    server_t *srv = G.srv;
    server_slot_t *ms = &srv->models[q->slot];
    pthread_mutex_lock(&ms->writer);
    server_model_t *sm = server_model_acquire_named(srv, q->name);
    if (!sm || model_overlays(sm->model, NULL) > 0) { /* none yet, or a fold due: let it run */
        server_model_release(sm);
        pthread_mutex_unlock(&ms->writer);
        return 0;
    }
    bool can = attach(q, sm) == 0;
    size_t consumed = 0, t = *tail;
    for (int r = 0; r < BATCH_RECORDS && consumed < avail;) {
        uint32_t len;
        if (q->cap - t < REC_HDR || (memcpy(&len, q->ring + t, 4), len == WRAP)) {
            consumed += q->cap - t; /* the end a producer skipped */
            t = 0;
            continue;
        }
        uint64_t arrival;
        uint16_t flags;
        memcpy(&flags, q->ring + t + 4, 2);
        memcpy(&arrival, q->ring + t + 8, 8);
        if (can)
            learn(q, q->ring + t + REC_HDR, len, flags, arrival);
        else
            atomic_fetch_add_explicit(&q->dropped, 1, memory_order_relaxed);
        size_t sz = rec_size(len);
        consumed += sz;
        t += sz;
        r++;
    }
    server_model_release(sm);
    pthread_mutex_unlock(&ms->writer);
    *tail = t == q->cap ? 0 : t;
    return consumed;
}

static void *trainer_main(void *arg)
{
    struct om *q = arg;
    uint64_t stop_by = 0;
    bool fresh = false; /* learned since the last publish */
    for (;;) {
        pthread_mutex_lock(&q->lock);
        while (q->used == 0 && !q->stop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&q->cond, &q->lock, &ts);
            if (q->used == 0 && fresh)
                break; /* idle: publish what was learned */
        }
        if (q->stop && stop_by == 0)
            stop_by = now_ns() + 1000000000ull;
        size_t tail = q->tail, avail = q->used;
        pthread_mutex_unlock(&q->lock);
        if ((avail == 0 && q->stop) || (stop_by && now_ns() > stop_by))
            break;
        size_t got = avail ? learn_batch(q, &tail, avail) : 0;
        size_t left = 0;
        if (got) {
            pthread_mutex_lock(&q->lock);
            q->used -= got;
            q->tail = tail;
            left = q->used;
            atomic_store_explicit(&q->queue_bytes, q->used, memory_order_relaxed);
            pthread_mutex_unlock(&q->lock);
            fresh = true;
        }
        uint64_t ms = now_ns() / 1000000;
        if (fresh && (ms - q->published_ms >= PUBLISH_MS || (left == 0 && ms - q->published_ms >= 100))) {
            publish(q);
            q->published_ms = ms;
            fresh = false;
        }
        if (!got && avail) {
            struct timespec nap = {0, 2 * 1000000}; /* no version yet, or a fold due */
            nanosleep(&nap, NULL);
        }
    }
    publish(q);
    return NULL;
}

void online_stop(void)
{
    pthread_mutex_lock(&G.lock);
    G.started = false;
    pthread_mutex_unlock(&G.lock);
    for (int i = 0; i < SERVER_MODELS_MAX; i++) {
        struct om *q = atomic_load(&G.models[i]);
        if (!q)
            continue;
        pthread_mutex_lock(&q->lock);
        q->stop = true;
        pthread_cond_signal(&q->cond);
        pthread_mutex_unlock(&q->lock);
        pthread_join(q->thread, NULL);
        uint64_t left = atomic_load(&q->queue_bytes);
        LOG(left ? LL_WARN : LL_INFO, "online: trainer of model '%s' stopped: %" PRIu64
            " samples learned, %" PRIu64 " bytes left unlearned", q->name,
            atomic_load(&q->samples), left);
        atomic_store(&G.models[i], NULL);
        train_destroy(q->t);
        free(q->arena.base);
        free(q->ring);
        pthread_mutex_destroy(&q->lock);
        pthread_cond_destroy(&q->cond);
        free(q);
    }
}

/* ---- /metrics ----------------------------------------------------------------- */

size_t online_metrics_format(char *buf, size_t len)
{
    size_t off = 0;
#define PUT(...)                                                                     \
    do {                                                                             \
        int n_ = snprintf(buf + off, len - off, __VA_ARGS__);                        \
        if (n_ < 0 || (size_t)n_ >= len - off) {                                     \
            buf[off] = '\0';                                                         \
            return off;                                                              \
        }                                                                            \
        off += (size_t)n_;                                                           \
    } while (0)
    if (len == 0)
        return 0;
    buf[0] = '\0';
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"tlserve_online_frames_total", "counter", "TRAIN frames queued for the trainer"},
        {"tlserve_online_samples_total", "counter", "samples learned"},
        {"tlserve_online_positives_total", "counter", "samples learned with label 1"},
        {"tlserve_online_refused_total", "counter",
         "TRAIN frames answered OVERLOADED (reason: queue full, rate cap)"},
        {"tlserve_online_dropped_total", "counter",
         "queued frames not learned (the model's kind changed, or no memory)"},
        {"tlserve_online_resets_total", "counter",
         "times the trainer started over from a new active version"},
        {"tlserve_online_queue_bytes", "gauge", "bytes queued for the trainer"},
        {"tlserve_online_version", "gauge", "the version the trainer writes"},
        {"tlserve_online_logloss", "gauge", "progressive logloss since start (scored before learned)"},
        {"tlserve_online_window_logloss", "gauge", "progressive logloss of the last 8192 samples"},
        {"tlserve_online_window_auc", "gauge", "progressive AUC of the last 8192 samples"},
        {"tlserve_online_window_calibration", "gauge",
         "mean prediction over mean label, last 8192 samples"},
        {"tlserve_online_freshness_seconds", "gauge",
         "arrival at the worker to weight written (the next PREDICT reads it), last 8192 samples"},
    };
    for (size_t fi = 0; fi < sizeof fam / sizeof *fam; fi++) {
        PUT("# HELP %s %s\n# TYPE %s %s\n", fam[fi].name, fam[fi].help, fam[fi].name, fam[fi].type);
        for (int i = 0; i < SERVER_MODELS_MAX; i++) {
            struct om *q = atomic_load_explicit(&G.models[i], memory_order_acquire);
            if (!q)
                continue;
            const char *m = q->name;
#define LD(x) atomic_load_explicit(&q->x, memory_order_relaxed)
            switch (fi) {
            case 0: PUT("%s{model=\"%s\"} %" PRIu64 "\n", fam[fi].name, m, LD(frames)); break;
            case 1: PUT("%s{model=\"%s\"} %" PRIu64 "\n", fam[fi].name, m, LD(samples)); break;
            case 2: PUT("%s{model=\"%s\"} %" PRIu64 "\n", fam[fi].name, m, LD(positives)); break;
            case 3:
                PUT("%s{model=\"%s\",reason=\"queue_full\"} %" PRIu64 "\n"
                    "%s{model=\"%s\",reason=\"rate\"} %" PRIu64 "\n",
                    fam[fi].name, m, LD(refused_full), fam[fi].name, m, LD(overloaded));
                break;
            case 4: PUT("%s{model=\"%s\"} %" PRIu64 "\n", fam[fi].name, m, LD(dropped)); break;
            case 5: PUT("%s{model=\"%s\"} %" PRIu64 "\n", fam[fi].name, m, LD(resets)); break;
            case 6: PUT("%s{model=\"%s\"} %" PRIu64 "\n", fam[fi].name, m, LD(queue_bytes)); break;
            case 7: PUT("%s{model=\"%s\"} %" PRIu64 "\n", fam[fi].name, m, LD(last_version)); break;
            case 8: PUT("%s{model=\"%s\"} %.6f\n", fam[fi].name, m, bitsd(LD(logloss_bits))); break;
            case 9:
                PUT("%s{model=\"%s\"} %.6f\n", fam[fi].name, m, bitsd(LD(win_logloss_bits)));
                break;
            case 10: PUT("%s{model=\"%s\"} %.6f\n", fam[fi].name, m, bitsd(LD(win_auc_bits))); break;
            case 11:
                PUT("%s{model=\"%s\"} %.6f\n", fam[fi].name, m, bitsd(LD(win_calib_bits)));
                break;
            case 12:
                PUT("%s{model=\"%s\",quantile=\"0.5\"} %.6f\n%s{model=\"%s\",quantile=\"0.99\"} "
                    "%.6f\n",
                    fam[fi].name, m, (double)LD(fresh_p50_us) * 1e-6, fam[fi].name, m,
                    (double)LD(fresh_p99_us) * 1e-6);
                break;
            }
#undef LD
        }
    }
#undef PUT
    return off;
}
