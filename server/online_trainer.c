/*
 * online_trainer.c — one model's trainer thread (online.h): it learns the
 * queued frames into the active version's store, after learning its sample
 * log again when the server restarted, and publishes the progressive
 * figures.
 *
 * BATCHES: up to BATCH_RECORDS records per hold of the model's writer lock
 * (server_slot_t.writer), so a fold waiting for the lock waits for one
 * batch; the active version is pinned per batch (a fold's drain waits for
 * pins).  While the active version has overlays the trainer waits: the fold
 * is due, and the overlay would hide its writes.
 *
 * VERSIONS AND THE STATE FILE: when the active version changes the trainer
 * starts over from its weights (a fresh optimizer state) and, with a sample
 * log, writes <log>/trainer.state: "version created_unix from_position",
 * the position of the first record it learns into that version (then trims
 * the log's segments before it).  At a restart, if the active version is
 * the one the file names, the records from from_position to the log's end
 * at start are learned again before any new one: the same records, in the
 * same order, from the same weights, with a deterministic trainer, give the
 * same model.  Another version active at restart (the repository moved on)
 * means those records were learned into a version no longer served: they
 * are not replayed.
 *
 * EXPORTS (online_export.c, the calls marked EXPORT): a step marks its keys;
 * the loop hands them over when an export is due; attach keeps the
 * optimizer state when the new version is the trainer's own export (and
 * trainer.state then names it with the position it covers); a restart
 * whose active version is an export replays from that position, after
 * restoring the optimizer state the exports carry (restore_state): so the
 * restarted trainer is, float for float, the one that never crashed.
 * Without a sample log (and without the bus) the state is restored at the
 * first attach: what the export holds continues as its trainer left it.
 * With the bus in replay mode too, and the stream messages the active
 * export holds (online__export_bus_restart) are skipped, not learned twice.
 * In partitioned mode the replay first resumes the update exchange where
 * the export left it (online__sync_resume, online_sync_export.c).
 *
 * FIGURES: over the last ONLINE_WINDOW samples (a ring the trainer owns):
 * logloss, AUC (rank sum, ties averaged), calibration (mean prediction over
 * mean label), and freshness, arrival at the worker to the weight written
 * (the next PREDICT reads it), p50 and p99; recomputed at most every
 * PUBLISH_MS (and when the queue empties) and published as atomics.
 */
#define _GNU_SOURCE
#include "online_impl.h"

#include "log.h"
#include "model/model.h"
#include "model/overlay.h"
#include "store/delta.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define G online__G
#define BATCH_RECORDS 64
#define PUBLISH_MS 1000

static uint64_t dbits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* ---- the state file ----------------------------------------------------------- */

int online__state_read(const char *dir, uint64_t *version, uint64_t *created, uint64_t *from)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/trainer.state", dir);
    FILE *f = fopen(p, "r");
    if (!f)
        return errno == ENOENT ? -ENOENT : -EINVAL;
    unsigned long long v, c, fr;
    char tail;
    int n = fscanf(f, "%llu %llu %llu%c", &v, &c, &fr, &tail);
    fclose(f);
    if (n != 4 || tail != '\n')
        return -EINVAL;
    *version = v;
    *created = c;
    *from = fr;
    return 0;
}

int online__state_write(const char *dir, uint64_t version, uint64_t created, uint64_t from)
{
    char p[1200], tmp[1220];
    snprintf(p, sizeof p, "%s/trainer.state", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    char line[80];
    int n = snprintf(line, sizeof line, "%" PRIu64 " %" PRIu64 " %" PRIu64 "\n", version, created,
                     from);
    int rc = write(fd, line, (size_t)n) == n && fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    if (rc == 0 && rename(tmp, p) != 0)
        rc = -errno;
    return rc;
}

/* ---- learning ------------------------------------------------------------------ */

/* An unsigned param of m's snapshot in lo..hi: 0 with *out, or -1. */
static int param_u32(const model_t *m, const char *key, uint32_t lo, uint32_t hi, uint32_t *out)
{
    const char *v = store_extras_get(model_extras(m), key);
    char *end;
    if (!v)
        return -1;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return -1;
    *out = (uint32_t)x;
    return 0;
}

/* The trainer's options for m (KINDS in online.h): LR takes G.opts (the
 * --online-* settings, checked at start); FM and FFM the kind's defaults
 * for --online-optimizer (with ftrl: FTRL for w, Adagrad for v), their
 * shape and norm from the served model (the scorer's, so the
 * trainer predicts what is served), and --online-alpha, -beta, -l2 where
 * set (l2 on w; -l1 applies to w under FTRL only); the DNN its defaults
 * (Adagrad, whatever --online-optimizer says) with its shape from the
 * served MLP, --online-alpha as the sparse step and -l2.  0, or -1 with a
 * sentence; note gets a sentence naming the --online-* settings given that
 * the kind does not use (empty when none), for a warning at attach (the
 * default ftrl for the DNN is documented, not warned about). */
static int options_for(const model_t *m, train_options_t *o, char *why, size_t why_len,
                       char *note, size_t note_len)
{
    note[0] = '\0';
    const store_meta_t *meta = model_meta(m);
    const server_config_t *c = &G.srv->cfg;
    train_optimizer_t opt = G.opts.lr.optimizer;
    uint32_t norm = 0; /* FM's and FFM's: absent is 0, as model.c reads it */
    bool has_norm = meta->model_kind == STORE_MODEL_FM || meta->model_kind == STORE_MODEL_FFM;
    if (has_norm && store_extras_get(model_extras(m), "norm") &&
        param_u32(m, "norm", 0, 1, &norm) != 0) {
        snprintf(why, why_len, "its param norm is not 0 or 1");
        return -1;
    }
    switch (meta->model_kind) {
    case STORE_MODEL_LR:
        *o = G.opts;
        return 0;
    case STORE_MODEL_FM: {
        uint32_t K = model_value_floats(m);
        if (K < 2 || K - 1 > MODEL_FM_MAX_K) {
            snprintf(why, why_len, "an FM model of %u floats per key", K);
            return -1;
        }
        if (opt != TRAIN_FTRL && c->online_l1 >= 0)
            snprintf(note, note_len, "FM uses --online-l1 with ftrl only: not used");
        (void)train_defaults(STORE_MODEL_FM, opt, o);
        o->fm.k = K - 1;
        o->fm.norm = norm != 0;
        if (c->online_alpha >= 0)
            o->fm.alpha = c->online_alpha;
        if (c->online_beta >= 0)
            o->fm.beta = c->online_beta;
        if (c->online_l1 >= 0)
            o->fm.l1 = c->online_l1;
        if (c->online_l2 >= 0)
            o->fm.l2 = c->online_l2;
        return 0;
    }
    case STORE_MODEL_FFM: {
        uint32_t F, k;
        if (param_u32(m, "fields", 1, UINT32_MAX, &F) != 0 ||
            param_u32(m, "k", 1, UINT32_MAX, &k) != 0) {
            snprintf(why, why_len, "its params fields and k are missing or bad");
            return -1;
        }
        if (opt != TRAIN_FTRL && c->online_l1 >= 0)
            snprintf(note, note_len, "FFM uses --online-l1 with ftrl only: not used");
        (void)train_defaults(STORE_MODEL_FFM, opt, o);
        o->ffm.fields = F;
        o->ffm.k = k;
        o->ffm.norm = norm != 0;
        if (c->online_alpha >= 0)
            o->ffm.alpha = c->online_alpha;
        if (c->online_beta >= 0)
            o->ffm.beta = c->online_beta;
        if (c->online_l1 >= 0)
            o->ffm.l1 = c->online_l1;
        if (c->online_l2 >= 0)
            o->ffm.l2 = c->online_l2;
        return 0;
    }
    case STORE_MODEL_DNN: {
        dnn_net_t net;
        char bad[160];
        if (model_dnn_net_from_extras(model_extras(m), model_value_floats(m), &net, bad,
                                      sizeof bad) != 0) {
            snprintf(why, why_len, "its MLP: %s", bad);
            return -1;
        }
        if (opt == TRAIN_SGD || c->online_beta >= 0 || c->online_l1 >= 0)
            snprintf(note, note_len, "the DNN's embeddings and wide part learn with adagrad "
                     "(--online-alpha and --online-l2 apply):%s%s%s not used",
                     opt == TRAIN_SGD ? " --online-optimizer sgd" : "",
                     c->online_beta >= 0 ? " --online-beta" : "",
                     c->online_l1 >= 0 ? " --online-l1" : "");
        train_dnn_defaults(&o->dnn);
        o->kind = STORE_MODEL_DNN;
        o->dnn.fields = net.fields;
        o->dnn.dim = net.dim;
        o->dnn.wide = net.wide;
        o->dnn.n_hidden = net.n_layers - 1;
        for (uint32_t l = 0; l + 1 < net.n_layers; l++)
            o->dnn.hidden[l] = net.width[l + 1];
        if (c->online_alpha >= 0)
            o->dnn.lr_sparse = c->online_alpha;
        if (c->online_l2 >= 0)
            o->dnn.l2 = c->online_l2;
        return 0;
    }
    default:
        snprintf(why, why_len, "the model is %s: online learning takes LR, FM, FFM and DNN "
                 "models", store_model_kind_name(meta->model_kind));
        return -1;
    }
}

/* At the first attach of this process: the --train-file marks the version
 * (an online export) carries, so that the trainer's next export still names
 * the files learned before the restart (online_file_marks.c).  A missing
 * file is no mark; a bad one is a WARN and no mark. */
static void seed_file_marks(online_model_t *q, uint64_t version)
{
    const server_config_t *c = &G.srv->cfg;
    if (q->fmarks_seeded || !q->fmarks)
        return;
    q->fmarks_seeded = true;
    static online_file_progress_t got[ONLINE_FILE_MARKS_MAX];
    static pthread_mutex_t got_lock = PTHREAD_MUTEX_INITIALIZER; /* trainers of two models */
    char path[1400], why[300];
    for (int k = 0; k < 2; k++) { /* the export's marks, then those its sample log set aside */
        if (k == 0 && c->model_repo[0])
            snprintf(path, sizeof path, "%s/%s/%" PRIu64 "/" ONLINE_FILE_MARKS_FILE,
                     c->model_repo, q->name, version);
        else if (k == 1 && q->slog)
            snprintf(path, sizeof path, "%s/" ONLINE_FILE_MARKS_FILE, q->slog_dir);
        else
            continue;
        uint32_t n = 0;
        pthread_mutex_lock(&got_lock);
        int rc = online__file_marks_read(path, got, &n, why, sizeof why);
        if (rc != 0 && rc != -ENOENT)
            LOG(LL_WARN, "online: model '%s': %s: %s; its --train-file marks are not carried on",
                q->name, path, why);
        for (uint32_t i = 0; i < n; i++)
            online__file_marks_put(q->fmarks, &q->nfmarks, &got[i].m, got[i].pos);
        pthread_mutex_unlock(&got_lock);
    }
}

/* Before the log is trimmed behind pos at an attach: the marks of the
 * records about to go, into <log dir>/TRAINFILE_MARKS (the new version
 * carries none; online__file_marks_find and seed_file_marks read it).  Logged when it
 * fails: a restart would then read those files again. */
static void keep_file_marks(online_model_t *q)
{
    if (!q->fmarks || q->nfmarks == 0)
        return;
    int dirfd = open(q->slog_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = dirfd < 0 ? -errno : online__file_marks_write_at(dirfd, q->fmarks, q->nfmarks);
    if (dirfd >= 0)
        close(dirfd);
    if (rc != 0)
        LOG(LL_WARN, "online: %s/" ONLINE_FILE_MARKS_FILE " not written (%s): a restart would "
            "read the --train-file files learned so far again", q->slog_dir, strerror(-rc));
}

/* (Re)attaches the trainer to sm's store when the active version changed;
 * pos: the log position of the first record it will learn into it.  0, or
 * -1 (the records are dropped, counted and logged).  online_impl.h. */
int online__attach(online_model_t *q, server_model_t *sm, uint64_t pos)
{
    model_t *m = sm->model;
    const store_meta_t *meta = model_meta(m);
    if (q->t && q->attached == model_store(m) && q->att_version == meta->version &&
        q->att_created == meta->created_unix)
        return 0;
    if (q->t && q->attached == model_store(m) && online__export_adopt(q, meta))
        return 0; /* EXPORT: its own export went live; the optimizer state stays */
    if (q->t && online__sync_mode(&G.srv->cfg)) /* the DNN's learned MLP */
        online__sync_dense_detach(q, m);
    train_destroy(q->t);
    q->t = NULL;
    q->attached = NULL;
    char why[240], note[200];
    train_options_t o;
    int rc = options_for(m, &o, why, sizeof why, note, sizeof note) != 0
                 ? -EINVAL
                 : train_create(&o, &q->t, why, sizeof why);
    if (rc == 0 && note[0])
        LOG(LL_WARN, "online: model '%s': %s", q->name, note);
    if (rc == 0)
        rc = train_attach_live_model(q->t, model_base_store(m), model_extras(m), why, sizeof why);
    if (rc != 0) {
        LOG(LL_WARN, "online: model '%s' version %" PRIu64 ": cannot learn (%s); queued samples "
            "are dropped", q->name, meta->version, why);
        train_destroy(q->t);
        q->t = NULL;
        return -1;
    }
    q->attached = model_store(m);
    seed_file_marks(q, meta->version);
    if (online__sync_mode(&G.srv->cfg)) { /* partitioned replicas: (dz, dn) out */
        q->sync_base = meta->version;     /* a new lineage (a restart's resume may set it back) */
        online__sync_attach(q, m);
    }
    atomic_store_explicit(&q->halted, 0, memory_order_relaxed); /* a new version: learn again */
    q->att_version = meta->version;
    q->att_created = meta->created_unix;
    atomic_store_explicit(&q->last_version, meta->version, memory_order_relaxed);
    atomic_fetch_add_explicit(&q->resets, 1, memory_order_relaxed);
    online__export_reset(q, meta); /* EXPORT: a new lineage */
    bool replaying = q->replay_pending && meta->version == q->replay_version &&
                     meta->created_unix == q->replay_created;
    if (q->slog && !replaying) {
        rc = online__state_write(q->slog_dir, meta->version, meta->created_unix, pos);
        if (rc != 0)
            LOG(LL_WARN, "online: %s/trainer.state not written (%s): a restart would not learn "
                "the log again", q->slog_dir, strerror(-rc));
        else if (!online__bus_on()) { /* with the bus, pos is the stream's: the forwarder trims */
            keep_file_marks(q);
            (void)sample_log_trim(q->slog, pos); /* under q->lock: see the caller */
        }
    }
    char desc[200];
    train_describe(q->t, desc, sizeof desc);
    LOG(LL_INFO, "online: model '%s' learns into version %" PRIu64 "%s (%s)", q->name,
        meta->version, replaying ? ", after its sample log from the restart" : "", desc);
    return 0;
}

static int cmp_win(const void *a, const void *b)
{
    float x = ((const struct online_win *)a)->p, y = ((const struct online_win *)b)->p;
    return (x > y) - (x < y);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The window's figures, published. */
static void publish(online_model_t *q)
{
    size_t n = q->nwin < ONLINE_WINDOW ? (size_t)q->nwin : ONLINE_WINDOW;
    if (n == 0)
        return;
    static _Thread_local struct online_win w[ONLINE_WINDOW];
    static _Thread_local uint32_t f[ONLINE_WINDOW];
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
        double pos = 0;
        while (j < n && w[j].p == w[i].p)
            pos += w[j++].y;
        rank_pos += (double)(i + 1 + j) / 2 * pos;
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
    uint64_t all = atomic_load_explicit(&q->samples, memory_order_relaxed);
    atomic_store_explicit(&q->logloss_bits, dbits(all ? q->logloss_sum / (double)all : NAN),
                          memory_order_relaxed);
}

/* Learns one decoded TRAIN; arrival_ns 0: a replayed record (no freshness). */
static void learn_req(online_model_t *q, const codec_train_t *req, uint64_t arrival_ns)
{
    codec_block_t shared = {req->shared.ids, req->shared.values, req->shared.n};
    if (atomic_load_explicit(&q->halted, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&q->dropped, 1, memory_order_relaxed);
        return;
    }
    uint64_t bad_id;
    float bad_v;
    if (online__value_beyond(req, G.srv->cfg.online_max_feature_value, &bad_id, &bad_v)) {
        /* a FEEDBACK's joined sample or a replayed record: TRAIN refuses them at the door */
        uint64_t n = atomic_fetch_add_explicit(&q->bad_values, 1, memory_order_relaxed) + 1;
        if (n <= 10 || n % 1000 == 0)
            LOG(LL_WARN, "online: model '%s': a queued sample not learned (%" PRIu64 " so far): "
                "feature %" PRIu64 " has value %g, beyond +-%g (--online-max-feature-value)",
                q->name, n, bad_id, (double)bad_v, G.srv->cfg.online_max_feature_value);
        return;
    }
    int rc = train_update(q->t, &shared, req->sample, req->samples, req->labels, req->weights,
                          q->p);
    online__export_mark(q, req); /* EXPORT: its keys are dirty */
    if (rc == -ERANGE) { /* the alarm: nothing non-finite was written, nothing more is */
        atomic_store_explicit(&q->halted, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&q->dropped, 1, memory_order_relaxed);
        LOG(LL_ERROR, "online: model '%s' version %" PRIu64 ": a step would have made a weight "
            "infinite or NaN (a sample with huge feature values?); training stopped, the served "
            "weights are all finite; a new version starts it again", q->name, q->att_version);
        return;
    }
    if (rc != 0) {
        atomic_fetch_add_explicit(&q->dropped, 1, memory_order_relaxed);
        LOG(LL_WARN, "online: model '%s': no memory for a sample's step", q->name);
        return;
    }
    uint64_t fresh = arrival_ns ? (online__now_ns() - arrival_ns) / 1000 : 0;
    uint64_t pos = 0;
    for (uint32_t i = 0; i < req->samples; i++) {
        double p = fmin(fmax(q->p[i], 1e-7), 1 - 1e-7);
        bool y = req->labels[i] > 0.5f;
        q->logloss_sum -= y ? log(p) : log(1 - p);
        q->win[q->nwin++ % ONLINE_WINDOW] =
            (struct online_win){q->p[i], y, fresh > UINT32_MAX ? UINT32_MAX : (uint32_t)fresh};
        pos += y;
    }
    atomic_fetch_add_explicit(&q->samples, req->samples, memory_order_relaxed);
    atomic_fetch_add_explicit(&q->positives, pos, memory_order_relaxed);
}

/* Decodes and learns one queued payload. */
static void learn(online_model_t *q, const uint8_t *payload, uint32_t len, uint16_t flags,
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
    learn_req(q, &req, arrival_ns);
}

/* ---- the restart's optimizer state (EXPORT STATE) ---------------------------------- */

/* 1 when "<mdir>/<v>" is a version, delta or full, whose producer is an
 * online export (any process's); 0 otherwise (another producer,
 * unreadable). */
static int is_online_export(const char *mdir, uint64_t v)
{
    char dir[1200], producer[STORE_PRODUCER_MAX];
    snprintf(dir, sizeof dir, "%s/%" PRIu64, mdir, v);
    uint64_t pos;
    return store_version_producer(dir, producer, NULL, NULL, NULL) == 0 &&
           (online_export_producer_pos(producer, &pos) ||
            online_export_producer_stream(producer, &pos));
}

/* A restart attached a fresh trainer to the active version: when that
 * version is an online export, the state files of every export of its
 * chain since the last version no export wrote (an offline full version
 * or delta) are put into the trainer, oldest first (a later row wins), so
 * the replay that follows continues the trainer that wrote them.  A chain
 * that starts at a full online export starts at its state file, which
 * holds every key's state (online_export.c: FULL EXPORTS).
 * All are checked before any is put: a missing, truncated or corrupt file
 * (untrusted: train_state_parse checks every length, count, width, kind) is
 * a WARN naming it and what was wrong, and the trainer keeps its fresh
 * state (the behaviour without state files: served weights, fresh sums).
 * A put that fails midway (no memory) swaps in a fresh trainer. */
static void restore_state(online_model_t *q, server_model_t *sm)
{
    const server_config_t *c = &G.srv->cfg;
    if (!c->model_repo[0] || !q->t)
        return;
    char mdir[1100], path[1300];
    snprintf(mdir, sizeof mdir, "%s/%s", c->model_repo, q->name);
    store_chain_t *ch = malloc(sizeof *ch);
    if (!ch || store_version_chain(mdir, q->att_version, ch, NULL) != 0 ||
        ch->created_unix[ch->n - 1] != q->att_created) {
        free(ch); /* not a version of the repository (or no memory): nothing to restore */
        return;
    }
    uint32_t first = ch->n;
    while (first > 1 && is_online_export(mdir, ch->versions[first - 1]))
        first--;
    if (first == 1 && is_online_export(mdir, ch->versions[0]))
        first = 0; /* a full export: its state holds every key */
    train_state_error_t err;
    int rc = 0;
    uint32_t i;
    for (i = first; i < ch->n && rc == 0; i++) { /* 1. check every file */
        snprintf(path, sizeof path, "%s/%" PRIu64 "/" TRAIN_STATE_FILE, mdir, ch->versions[i]);
        rc = train_state_load(q->t, path, ch->versions[i], false, &err);
    }
    if (rc != 0) {
        LOG(LL_WARN, "online: model '%s': %s: %s; the optimizer state starts afresh from the "
            "served weights (the restarted model then differs from one that never crashed)",
            q->name, path, rc == -ENOENT ? "missing" : err.msg);
        free(ch);
        return;
    }
    for (i = first; i < ch->n && rc == 0; i++) { /* 2. put them, oldest first */
        snprintf(path, sizeof path, "%s/%" PRIu64 "/" TRAIN_STATE_FILE, mdir, ch->versions[i]);
        rc = train_state_load(q->t, path, ch->versions[i], true, &err);
    }
    if (rc == 0 && first < ch->n)
        LOG(LL_INFO, "online: model '%s': the optimizer state of versions %" PRIu64 "..%" PRIu64
            " (online exports) restored", q->name, ch->versions[first], ch->versions[ch->n - 1]);
    else if (rc != 0) { /* rows were put: back to a fresh state */
        LOG(LL_WARN, "online: model '%s': %s: %s; the optimizer state starts afresh",
            q->name, path, err.msg);
        train_t *fresh = NULL;
        char why[200];
        if (train_create(train_options(q->t), &fresh, why, sizeof why) == 0 &&
            train_attach_live_model(fresh, model_base_store(sm->model), model_extras(sm->model),
                                    why, sizeof why) == 0) {
            train_destroy(q->t);
            q->t = fresh;
            if (online__sync_mode(c)) /* the hook was the old trainer's */
                online__sync_attach(q, sm->model);
        } else {
            train_destroy(fresh);
        }
    }
    free(ch);
}

/* Learns the sample log from replay_from to replay_end into the version
 * attached (the same one as before the restart). */
static void replay(online_model_t *q)
{
    sample_log_reader_t *r = NULL;
    sample_log_error_t err;
    codec_arena_t arena = {.cap = sample_log_arena_bound()};
    arena.base = malloc(arena.cap);
    uint64_t pos = q->replay_from, n = 0;
    int rc = arena.base ? sample_log_reader_open(q->slog_dir, pos, &r, &err) : -ENOMEM;
    while (rc == 0 && pos < q->replay_end) {
        sample_log_rec_t rec;
        codec_arena_reset(&arena);
        rc = sample_log_next(r, &arena, &rec, &pos, &err);
        if (rc != 0)
            break;
        rec.train.weights = rec.weights;
        learn_req(q, &rec.train, 0);
        if (rec.mark)
            online__file_marks_note(q, rec.mark, pos);
        n += rec.train.samples;
        pos++;
    }
    if (rc < 0 || pos < q->replay_end)
        LOG(LL_ERROR, "online: model '%s': the sample log's replay stopped at position %" PRIu64
            " of %" PRIu64 ": %s", q->name, pos, q->replay_end,
            rc == -ENOMEM ? "no memory" : rc < 0 ? err.msg : "the log ended early");
    else
        LOG(LL_INFO, "online: model '%s': %" PRIu64 " samples of positions %" PRIu64 "..%" PRIu64
            " learned again from the sample log", q->name, n, q->replay_from, q->replay_end);
    atomic_fetch_add_explicit(&q->replayed, n, memory_order_relaxed);
    online__export_learned(q, pos); /* EXPORT */
    sample_log_reader_close(r);
    free(arena.base);
}

/* Learns up to BATCH_RECORDS of the avail bytes from *tail on (moved past
 * them): returns the bytes consumed, wasted ends included (0: nothing
 * learned, the records stay queued).  A pending replay goes first. */
static size_t learn_batch(online_model_t *q, size_t *tail, size_t avail)
{
    server_t *srv = G.srv;
    server_slot_t *ms = server_slot_named(srv, q->name);
    if (!ms)
        return 0; /* no version of it yet */
    pthread_mutex_lock(&ms->writer);
    server_model_t *sm = server_model_acquire_named(srv, q->name);
    if (!sm || model_overlays(sm->model, NULL) > 0 || /* none yet, or a fold due: let it run */
        online__export_stale(q, sm->model)) {           /* EXPORT: a rollback's reload due */
        server_model_release(sm);
        pthread_mutex_unlock(&ms->writer);
        return 0;
    }
    size_t consumed = 0, t = *tail;
    if (q->replay_pending) {
        if (q->replay_any) { /* no trainer.state (online.c): the version active now */
            const store_meta_t *meta = model_meta(sm->model);
            q->replay_version = meta->version;
            q->replay_created = meta->created_unix;
        }
        online__export_restart(q, sm->model); /* EXPORT: the active one may be an export */
        pthread_mutex_lock(&q->lock); /* attach may trim the log */
        bool can = online__attach(q, sm, q->replay_end) == 0;
        pthread_mutex_unlock(&q->lock);
        if (can && q->att_version == q->replay_version && q->att_created == q->replay_created) {
            if (q->replay_any) { /* from now on a restart replays as any other */
                int src = online__state_write(q->slog_dir, q->att_version, q->att_created,
                                              q->replay_from);
                LOG(LL_INFO, "online: model '%s': no trainer.state beside %" PRIu64 " logged "
                    "records (a stop before the trainer's first sample): learned now%s", q->name,
                    q->replay_end - q->replay_from, src ? ", trainer.state not written" : "");
            }
            restore_state(q, sm); /* EXPORT STATE: the exports' optimizer state first */
            online__sync_resume(q, sm->model); /* EXPORT, partitioned: where it stood */
            replay(q);
        }
        else
            LOG(LL_WARN, "online: model '%s': version %" PRIu64 " is active, not %" PRIu64
                " that the sample log was learned into: not replayed", q->name, q->att_version,
                q->replay_version);
        online__sync_resume(q, sm->model); /* not resumed above: freed */
        q->replay_pending = false;
        q->replay_any = false;
    }
    if (q->restore_pending && online__bus_on() && !q->bus_skip_below) { /* EXPORT: a start */
        uint64_t next = online__export_bus_restart(q, sm->model);
        q->bus_skip_below = next ? next : 1;
    }
    for (int r = 0; r < BATCH_RECORDS && consumed < avail;) {
        uint32_t len;
        if (q->cap - t < ONLINE_REC_HDR || (memcpy(&len, q->ring + t, 4), len == ONLINE_WRAP)) {
            consumed += q->cap - t; /* the end a producer skipped */
            t = 0;
            continue;
        }
        uint16_t flags, has_mark;
        uint64_t arrival, pos;
        memcpy(&flags, q->ring + t + 4, 2);
        memcpy(&has_mark, q->ring + t + 6, 2);
        uint32_t plen = has_mark && len >= SAMPLE_LOG_MARK_BYTES ? len - SAMPLE_LOG_MARK_BYTES
                                                                 : len; /* the mark after */
        memcpy(&arrival, q->ring + t + 8, 8);
        memcpy(&pos, q->ring + t + 16, 8);
        size_t sz = ONLINE_REC_HDR + (((size_t)len + 7) & ~(size_t)7);
        if (pos < q->bus_skip_below) { /* in the active export already (a restart) */
            atomic_fetch_add_explicit(&q->bus_skipped, 1, memory_order_relaxed);
            consumed += sz;
            t += sz;
            r++;
            continue;
        }
        pthread_mutex_lock(&q->lock);
        bool can = online__attach(q, sm, pos) == 0;
        pthread_mutex_unlock(&q->lock);
        if (can && q->restore_pending) { /* EXPORT STATE: no log to replay after it */
            restore_state(q, sm);
            q->restore_pending = false;
        }
        if (can)
            learn(q, q->ring + t + ONLINE_REC_HDR, plen, flags, arrival);
        else
            atomic_fetch_add_explicit(&q->dropped, 1, memory_order_relaxed);
        if (plen != len) /* learned or dropped, the file's samples are behind us */
            online__file_marks_note(q, q->ring + t + ONLINE_REC_HDR + plen, pos);
        online__export_learned(q, pos + 1); /* EXPORT */
        q->next_pos = pos + 1;
        consumed += sz;
        t += sz;
        r++;
    }
    server_model_release(sm);
    pthread_mutex_unlock(&ms->writer);
    *tail = t == q->cap ? 0 : t;
    return consumed;
}

/* The sample log's interval flush and its segment rolls' commits, called
 * with q->lock held: the disk work runs with the lock released (a worker
 * appending a frame waits for the lock, and must not wait for the disk). */
static void sync_log(online_model_t *q)
{
    sample_log_flush_t f;
    if (!q->slog || !sample_log_sync_begin(q->slog, online__now_ns() / 1000000, &f))
        return;
    pthread_mutex_unlock(&q->lock);
    int rc = sample_log_sync_end(&f);
    if (rc < 0)
        LOG(LL_ERROR, "online: model '%s': the sample log's flush failed: %s", q->name,
            strerror(-rc));
    pthread_mutex_lock(&q->lock);
    sample_log_sync_done(q->slog, &f, rc);
}

void *online__trainer_main(void *arg)
{
    online_model_t *q = arg;
    uint64_t stop_by = 0;
    /* Serving first: with a nice above the workers' a contended core goes
     * to them (Linux sets a thread's nice by its tid).  Best effort. */
    if (G.srv->cfg.online_nice > 0 &&
        setpriority(PRIO_PROCESS, (id_t)gettid(), G.srv->cfg.online_nice) != 0)
        LOG(LL_WARN, "online: model '%s': cannot set the trainer's nice to %d: %s", q->name,
            G.srv->cfg.online_nice, strerror(errno));
    atomic_store_explicit(&q->trainer_tid, (int)gettid(), memory_order_release);
    bool fresh = false; /* learned since the last publish */
    (void)online__export_init(q); /* EXPORT: logged when it cannot */
    for (;;) {
        pthread_mutex_lock(&q->lock);
        if (q->used == 0 && q->boosted) { /* caught up: serving first again (online.c) */
            (void)setpriority(PRIO_PROCESS, (id_t)gettid(), G.srv->cfg.online_nice);
            q->boosted = false;
        }
        while (q->used == 0 && !q->stop && !q->replay_pending) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&q->cond, &q->lock, &ts);
            sync_log(q);
            if (q->used == 0 && fresh)
                break; /* idle: publish what was learned */
            if (q->used == 0 && online__export_due(q))
                break; /* EXPORT: idle, the timer's export */
        }
        if (q->stop && stop_by == 0)
            stop_by = online__now_ns() + 1000000000ull;
        size_t tail = q->tail, avail = q->used;
        sync_log(q);
        pthread_mutex_unlock(&q->lock);
        if ((avail == 0 && !q->replay_pending && q->stop) ||
            (stop_by && online__now_ns() > stop_by))
            break;
        uint64_t replayed = atomic_load_explicit(&q->replayed, memory_order_relaxed);
        size_t got = avail || q->replay_pending ? learn_batch(q, &tail, avail) : 0;
        online__export_tick(q); /* EXPORT */
        size_t left = 0;
        if (atomic_load_explicit(&q->replayed, memory_order_relaxed) != replayed)
            fresh = true;
        if (got) {
            pthread_mutex_lock(&q->lock);
            q->used -= got;
            q->tail = tail;
            left = q->used;
            atomic_store_explicit(&q->queue_bytes, q->used, memory_order_relaxed);
            pthread_mutex_unlock(&q->lock);
            fresh = true;
        }
        uint64_t ms = online__now_ns() / 1000000;
        if (fresh && (ms - q->published_ms >= PUBLISH_MS ||
                      (left == 0 && ms - q->published_ms >= 100))) {
            publish(q);
            q->published_ms = ms;
            fresh = false;
        }
        if (!got) {
            struct timespec nap = {0, 2 * 1000000}; /* no version yet, or a fold due */
            nanosleep(&nap, NULL);
        }
    }
    online__export_stop(q); /* EXPORT: the shutdown's export */
    publish(q);
    return NULL;
}
