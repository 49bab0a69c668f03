/*
 * gate.c — the validation gate (gate.h): a candidate version is checked on
 * the loader thread before it is swapped in, so that a model with broken
 * values, the wrong shape or predictions far from the live ones is never
 * served.
 *
 * SANITY
 *   Every float of the candidate's store is read once (store_foreach, one
 *   shard per task, cfg.load_threads threads taking shards from a shared
 *   counter) and must be finite with |v| <= --gate-max-abs; the dense arrays
 *   of its extras (DNN layers) likewise.  The first bad value stops the pass
 *   and is named (key, float index, value).  Against the active version of
 *   the same model name: the same kind and floats per key, unless
 *   --gate-allow-kind-change.  A candidate of another model name (the
 *   server holds one active model: loading "b" replaces "a") has no active
 *   version to compare with: only its values are checked, as for a first
 *   load.
 *
 * SHADOW SCORING
 *   The sample (the workers' rings, see gate.h) is copied out, each payload
 *   decoded again (it came off the wire: it is checked like any request),
 *   and scored with the active version and with the candidate, with the
 *   gate's own arena and scratch.  Requests for another model name are
 *   skipped.  With --gate-items-per-request, at most that many items of
 *   each request are scored, spread evenly over its list (the cost is a
 *   lookup of every id scored; the PSI gets noisier); by default all.  Over
 *   the items scored:
 *     mean shift = |mean_c - mean_a| / mean_a       > --gate-max-mean-shift: refuse
 *     PSI = sum over bins (c_i - a_i) ln(c_i / a_i)  > --gate-max-psi: refuse
 *   with the bins the deciles of the active's scores (a_i ~ 0.1 each) and
 *   empty bins counted as 1e-4 so that the logarithm stays finite.
 *
 * EVALUATION FILE
 *   With --gate-eval-file, last: gate_eval.h scores its labeled rows with the
 *   candidate and the active version (or the candidate alone on a first
 *   load) and refuses when logloss_c > logloss_a + --gate-max-logloss-increase.
 *   Runs only when sanity and shadow passed: the first refusal is the reason.
 *
 * RING SLOTS
 *   ring: [slot 0][slot 1]...[slot n-1], stride = 8 + slot_bytes rounded to 64
 *   slot: [seq u32][len u32][payload ... slot_bytes]
 *   The worker makes seq odd, copies, stores len, makes seq even (release);
 *   the reader keeps a copy only when seq was even, non-zero and unchanged
 *   around it (a seqlock).  The rings are mmap'd: a slot's pages cost memory
 *   only once a request has been written there.
 *
 * THREAD SAFETY
 *   G.lock guards the ring table against gate_sample_stop and the verdict
 *   counters; workers never take it.  gate_check runs on the loader thread.
 */
#include "gate.h"

#include "codec/codec.h"
#include "gate_eval.h"
#include "log.h"
#include "model/overlay.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define PSI_BINS 10
#define PSI_FLOOR 1e-4

static struct gate_state {
    pthread_mutex_t lock;
    gate_ring_t *rings; /* [nrings], NULL when sampling is off */
    int nrings;
    uint64_t passed, refused; /* verdicts */
    double last_psi, last_shift, last_seconds;
    bool eval_ran;                       /* some check scored the evaluation file */
    uint64_t eval_version_c, eval_version_a; /* of the last check that scored it */
    double eval_logloss_c, eval_logloss_a;   /* a: NAN without an active version */
    uint32_t eval_rows;
    double eval_seconds;
} G = {.lock = PTHREAD_MUTEX_INITIALIZER};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The calling thread's CPU time: the loader runs SCHED_IDLE by default, so
 * the check's wall time is mostly waiting for what serving leaves. */
static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the sample ---------------------------------------------------------------- */

static gate_slot_t *slot_at(const gate_ring_t *r, uint32_t i)
{
    return (gate_slot_t *)(r->base + (size_t)i * r->stride);
}

/* A request too large for a slot is kept as its shared block and as many of
 * its first items as fit, re-encoded into the slot (frame header, then moved
 * over it): shadow scoring compares item scores, and a ranking request's
 * size is in its hundreds of items, so a sample of large requests is not
 * lost.  Returns the payload length, or 0 when not even one item fits. */
static size_t put_truncated(uint8_t *dst, size_t cap, const codec_predict_t *req)
{
    codec_predict_t part = *req;
    part.impression_id = 0; /* the ring keeps plain PREDICT payloads */
    size_t len;
    while (part.items > 0) {
        if (codec_encode_predict(dst, cap, 0, &part, &len, NULL) == CODEC_OK) {
            memmove(dst, dst + CODEC_HEADER_SIZE, len - CODEC_HEADER_SIZE);
            return len - CODEC_HEADER_SIZE;
        }
        part.items /= 2;
    }
    return 0;
}

void gate__ring_put(gate_ring_t *r, const uint8_t *payload, size_t len, const codec_predict_t *req)
{
    if (len > r->slot_bytes && (!req || r->slot_bytes <= CODEC_HEADER_SIZE)) {
        r->skipped++;
        return;
    }
    gate_slot_t *s = slot_at(r, r->head);
    uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    if (len <= r->slot_bytes) {
        memcpy(s->bytes, payload, len);
    } else {
        len = put_truncated(s->bytes, r->slot_bytes, req);
        if (len == 0) { /* the slot is left empty: its seq moves on, its length 0 */
            r->skipped++;
        }
    }
    atomic_store_explicit(&s->len, (uint32_t)len, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
    r->head = r->head + 1 == r->nslots ? 0 : r->head + 1;
    if (r->filled < r->nslots)
        r->filled++;
}

static void rings_free(gate_ring_t *rings, int n)
{
    for (int i = 0; i < n; i++)
        if (rings[i].base)
            munmap(rings[i].base, rings[i].stride * rings[i].nslots);
    free(rings);
}

cold int gate_sample_start(int nworkers, int total, size_t slot_bytes)
{
    if (nworkers < 1 || slot_bytes == 0 || slot_bytes > UINT32_MAX || total < 0)
        return -EINVAL;
    if (total == 0)
        return 0;
    gate_ring_t *rings = calloc((size_t)nworkers, sizeof *rings);
    if (!rings)
        return -ENOMEM;
    uint32_t per = (uint32_t)((total + nworkers - 1) / nworkers);
    size_t stride = (sizeof(gate_slot_t) + slot_bytes + 63) & ~(size_t)63;
    for (int i = 0; i < nworkers; i++) {
        gate_ring_t *r = &rings[i];
        void *p = mmap(NULL, stride * per, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED) {
            rings_free(rings, nworkers);
            return -ENOMEM;
        }
        *r = (gate_ring_t){.base = p, .stride = stride, .slot_bytes = slot_bytes, .nslots = per};
    }
    pthread_mutex_lock(&G.lock);
    gate_ring_t *old = G.rings;
    int nold = G.nrings;
    G.rings = rings;
    G.nrings = nworkers;
    pthread_mutex_unlock(&G.lock);
    rings_free(old, nold);
    return 0;
}

gate_ring_t *gate_sample_ring(int i)
{
    pthread_mutex_lock(&G.lock);
    gate_ring_t *r = G.rings && i >= 0 && i < G.nrings ? &G.rings[i] : NULL;
    pthread_mutex_unlock(&G.lock);
    return r;
}

cold void gate_sample_stop(void)
{
    pthread_mutex_lock(&G.lock);
    gate_ring_t *rings = G.rings;
    int n = G.nrings;
    G.rings = NULL;
    G.nrings = 0;
    pthread_mutex_unlock(&G.lock);
    rings_free(rings, n);
}

int gate_sample_copy(uint8_t **buf, uint32_t *lens, int max)
{
    *buf = NULL;
    int n = 0;
    pthread_mutex_lock(&G.lock);
    /* Sized by what the slots hold now, not by their capacity (--gate-sample
     * x --gate-slot-bytes); a slot rewritten longer meanwhile is skipped. */
    size_t cap = 0;
    for (int i = 0; i < G.nrings; i++)
        for (uint32_t k = 0; k < G.rings[i].nslots; k++) {
            uint32_t len = atomic_load_explicit(&slot_at(&G.rings[i], k)->len,
                                                memory_order_relaxed);
            cap += len <= G.rings[i].slot_bytes ? len : 0;
        }
    uint8_t *out = cap ? malloc(cap) : NULL;
    if (cap && !out) {
        pthread_mutex_unlock(&G.lock);
        return -ENOMEM;
    }
    size_t off = 0;
    for (int i = 0; i < G.nrings && n < max; i++) {
        const gate_ring_t *r = &G.rings[i];
        for (uint32_t k = 0; k < r->nslots && n < max; k++) {
            gate_slot_t *s = slot_at(r, k);
            uint32_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
            if (seq == 0 || (seq & 1))
                continue;
            uint32_t len = atomic_load_explicit(&s->len, memory_order_relaxed);
            if (len == 0 || len > r->slot_bytes || len > cap - off)
                continue; /* an empty payload is no PREDICT */
            memcpy(out + off, s->bytes, len);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&s->seq, memory_order_relaxed) != seq)
                continue; /* rewritten while copied */
            lens[n++] = len;
            off += len;
        }
    }
    pthread_mutex_unlock(&G.lock);
    if (n == 0) {
        free(out);
        out = NULL;
    }
    *buf = out;
    return n;
}

/* ---- shadow statistics ----------------------------------------------------------- */

double gate_mean(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    return n ? s / (double)n : 0;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Bin of x among the sorted edges (PSI_BINS - 1 of them): how many are <= x. */
static int bin_of(const float *edges, float x)
{
    int b = 0;
    while (b < PSI_BINS - 1 && edges[b] <= x)
        b++;
    return b;
}

double gate_psi(const float *active, size_t n_a, const float *cand, size_t n_c)
{
    if (n_a == 0 || n_c == 0)
        return 0;
    float *sorted = malloc(n_a * sizeof *sorted);
    if (!sorted)
        return -ENOMEM;
    memcpy(sorted, active, n_a * sizeof *sorted);
    qsort(sorted, n_a, sizeof *sorted, cmp_float);
    float edges[PSI_BINS - 1];
    for (int b = 1; b < PSI_BINS; b++)
        edges[b - 1] = sorted[(size_t)b * n_a / PSI_BINS];
    free(sorted);
    uint64_t ca[PSI_BINS] = {0}, cc[PSI_BINS] = {0};
    for (size_t i = 0; i < n_a; i++)
        ca[bin_of(edges, active[i])]++;
    for (size_t i = 0; i < n_c; i++)
        cc[bin_of(edges, cand[i])]++;
    double psi = 0;
    for (int b = 0; b < PSI_BINS; b++) {
        double pa = (double)ca[b] / (double)n_a, pc = (double)cc[b] / (double)n_c;
        if (pa < PSI_FLOOR)
            pa = PSI_FLOOR;
        if (pc < PSI_FLOOR)
            pc = PSI_FLOOR;
        psi += (pc - pa) * log(pc / pa);
    }
    return psi;
}

/* ---- sanity ------------------------------------------------------------------------ */

struct sanity {
    const store_t *store;
    uint32_t nshards;
    float max_abs;
    _Atomic uint32_t next_shard;
    _Atomic uint64_t checked;
    _Atomic bool bad;            /* set once by the first finder; everyone stops */
    pthread_mutex_t lock;        /* the first bad value */
    uint64_t bad_key;
    uint32_t bad_index;
    float bad_value;
};

struct visit {
    struct sanity *s;
    uint64_t checked;
    uint32_t k;
};

static int visit_value(void *ctx, uint64_t key, const float *value)
{
    struct visit *v = ctx;
    for (uint32_t i = 0; i < v->k; i++) {
        float x = value[i];
        if (unlikely(!isfinite(x) || fabsf(x) > v->s->max_abs)) {
            pthread_mutex_lock(&v->s->lock);
            if (!atomic_load(&v->s->bad)) {
                v->s->bad_key = key;
                v->s->bad_index = i;
                v->s->bad_value = x;
                atomic_store(&v->s->bad, true);
            }
            pthread_mutex_unlock(&v->s->lock);
            return 1;
        }
    }
    v->checked += v->k;
    /* another thread found one: stop every 4096 keys at the latest */
    if (unlikely((v->checked & 4095) < v->k) && atomic_load_explicit(&v->s->bad, memory_order_relaxed))
        return 1;
    return 0;
}

static void *sanity_main(void *arg)
{
    struct sanity *s = arg;
    struct visit v = {s, 0, store_value_floats(s->store)};
    for (;;) {
        uint32_t shard = atomic_fetch_add(&s->next_shard, 1);
        if (shard >= s->nshards || atomic_load(&s->bad))
            break;
        if (store_foreach(s->store, shard, visit_value, &v) != 0)
            break;
    }
    atomic_fetch_add(&s->checked, v.checked);
    return NULL;
}

struct overlay_visit {
    uint32_t K;
    float max_abs;
    uint64_t checked, bad_key;
    uint32_t bad_index;
    float bad_value;
};

static int visit_overlay(void *ctx, uint64_t key, const float *value)
{
    struct overlay_visit *o = ctx;
    const uint32_t K = o->K;
    for (uint32_t i = 0; value && i < K; i++) {
        if (!isfinite(value[i]) || fabsf(value[i]) > o->max_abs) {
            o->bad_key = key;
            o->bad_index = i;
            o->bad_value = value[i];
            return 1;
        }
    }
    o->checked += value ? K : 0;
    return 0;
}

/* A delta served as an overlay over the active version (model/overlay.h):
 * only its values are new, so only they are checked.  Loader thread only. */
static int check_overlay(const server_t *srv, model_overlay_t *ov, gate_verdict_t *v)
{
    struct overlay_visit o = {.K = model_overlay_value_floats(ov),
                              .max_abs = (float)srv->cfg.gate_max_abs};
    int bad = model_overlay_foreach(ov, visit_overlay, &o);
    v->values_checked = o.checked;
    if (bad) {
        snprintf(v->msg, sizeof v->msg,
                 "sanity: key %llu float %u of the delta is %g (values must be finite, "
                 "|value| <= --gate-max-abs %g)",
                 (unsigned long long)o.bad_key, o.bad_index, (double)o.bad_value,
                 srv->cfg.gate_max_abs);
        return -EPERM;
    }
    return 0;
}

/* The values pass: 0, or -EPERM with msg naming the first bad value. */
static int check_values(const server_t *srv, const model_t *m, const model_t *act,
                        gate_verdict_t *v)
{
    model_overlay_t *ov[MODEL_OVERLAYS_MAX];
    if (act && model_same_base(m, act) && model_overlays(m, ov) > model_overlays(act, NULL))
        return check_overlay(srv, ov[0], v);
    const store_t *st = model_store(m);
    double max_abs = srv->cfg.gate_max_abs;
    struct sanity s = {.store = st, .nshards = store_shards(st), .max_abs = (float)max_abs,
                       .lock = PTHREAD_MUTEX_INITIALIZER};
    int nthreads = srv->cfg.load_threads > 0 ? srv->cfg.load_threads : 1;
    if ((uint32_t)nthreads > s.nshards)
        nthreads = (int)s.nshards;
    pthread_t th[64];
    if (nthreads > 64)
        nthreads = 64;
    int started = 0;
    for (int i = 1; i < nthreads; i++)
        if (pthread_create(&th[started], NULL, sanity_main, &s) == 0)
            started++;
    sanity_main(&s); /* this thread too: progress even when no helper could start */
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    v->values_checked = atomic_load(&s.checked);
    if (atomic_load(&s.bad)) {
        snprintf(v->msg, sizeof v->msg,
                 "sanity: key %llu float %u of the store is %g (values must be finite, "
                 "|value| <= --gate-max-abs %g)",
                 (unsigned long long)s.bad_key, s.bad_index, (double)s.bad_value, max_abs);
        return -EPERM;
    }
    const store_extras_t *x = model_extras(m);
    for (uint32_t d = 0; x && d < x->n_dense; d++) {
        const store_dense_t *dn = &x->dense[d];
        for (uint64_t i = 0; i < dn->count; i++) {
            float f = dn->data[i];
            if (!isfinite(f) || fabs((double)f) > max_abs) {
                snprintf(v->msg, sizeof v->msg,
                         "sanity: dense array '%s' float %llu is %g (values must be finite, "
                         "|value| <= --gate-max-abs %g)",
                         dn->name, (unsigned long long)i, (double)f, max_abs);
                return -EPERM;
            }
        }
        v->values_checked += dn->count;
    }
    return 0;
}

/* Name, kind and width against the active version: 0 or -EPERM. */
static int check_shape(const server_t *srv, const model_t *cand, const model_t *act,
                       gate_verdict_t *v)
{
    if (!act || srv->cfg.gate_allow_kind_change)
        return 0;
    const store_meta_t *c = model_meta(cand), *a = model_meta(act);
    if (c->model_kind != a->model_kind || model_value_floats(cand) != model_value_floats(act)) {
        snprintf(v->msg, sizeof v->msg,
                 "sanity: the candidate is model '%s' kind %s with %u floats per key, the active "
                 "version %llu is '%s' kind %s with %u (pass --gate-allow-kind-change to allow it)",
                 c->model_name, store_model_kind_name(c->model_kind), model_value_floats(cand),
                 (unsigned long long)a->version, a->model_name,
                 store_model_kind_name(a->model_kind), model_value_floats(act));
        return -EPERM;
    }
    return 0;
}

/* ---- shadow scoring ---------------------------------------------------------------- */

struct floats {
    float *x;
    size_t n, cap;
};

static int floats_add(struct floats *f, const float *x, size_t n)
{
    if (f->n + n > f->cap) {
        size_t cap = f->cap ? f->cap : 4096;
        while (cap < f->n + n)
            cap *= 2;
        float *p = realloc(f->x, cap * sizeof *p);
        if (!p)
            return -ENOMEM;
        f->x = p;
        f->cap = cap;
    }
    memcpy(f->x + f->n, x, n * sizeof *x);
    f->n += n;
    return 0;
}

/* Replays the sample through act and cand, at most cap_items items of each
 * request (0: all): 0 with the figures in v (n_sampled 0 when there was
 * nothing to replay), or -ENOMEM. */
static int shadow(const model_t *cand, const model_t *act, int cap_items, gate_verdict_t *v)
{
    enum { MAX_SAMPLE = 1 << 16 };
    uint32_t *lens = malloc(MAX_SAMPLE * sizeof *lens);
    uint8_t *buf = NULL;
    codec_arena_t arena = {0};
    model_scratch_t *sc = NULL;
    codec_block_t *blocks = malloc(CODEC_MAX_ITEMS * sizeof *blocks);
    float *scores = malloc(2 * CODEC_MAX_ITEMS * sizeof *scores); /* active's, candidate's */
    struct floats fa = {0}, fc = {0};
    int rc = -ENOMEM;
    if (!lens || !blocks || !scores)
        goto out;
    int n = gate_sample_copy(&buf, lens, MAX_SAMPLE);
    if (n < 0)
        goto out;
    size_t maxlen = 0;
    for (int i = 0; i < n; i++)
        maxlen = lens[i] > maxlen ? lens[i] : maxlen;
    if (n > 0) {
        arena.cap = codec_arena_bound(maxlen);
        arena.base = malloc(arena.cap);
        if (!arena.base || model_scratch_create(CODEC_MAX_REQUEST_FEATURES, &sc) != 0 ||
            model_scratch_fit(sc, act, CODEC_MAX_REQUEST_FEATURES) < 0 ||
            model_scratch_fit(sc, cand, CODEC_MAX_REQUEST_FEATURES) < 0)
            goto out;
    }
    const char *name = model_meta(cand)->model_name;
    const uint32_t per_req = cap_items > 0 ? (uint32_t)cap_items : CODEC_MAX_ITEMS;
    size_t off = 0;
    for (int i = 0; i < n; off += lens[i], i++) {
        codec_predict_t req;
        codec_error_t err;
        codec_arena_reset(&arena);
        if (codec_decode_predict(buf + off, lens[i], 0, &arena, &req, &err) != CODEC_OK ||
            strcmp(req.name, name) != 0)
            continue;
        /* Items spread evenly over the request: positions differ (a ranked
         * list's head and tail), and every request counts alike. */
        uint32_t take = req.items < per_req ? req.items : per_req;
        for (uint32_t k = 0; k < take; k++) {
            uint32_t at = (uint32_t)((uint64_t)k * req.items / take);
            blocks[k] = (codec_block_t){req.item[at].ids, req.item[at].values, req.item[at].n};
        }
        codec_block_t shared = {req.shared.ids, req.shared.values, req.shared.n};
        /* One lookup for both when the candidate is a delta over act (overlay.h). */
        if (model_score_pair(act, cand, &shared, blocks, take, scores, scores + CODEC_MAX_ITEMS,
                             sc) != 0)
            continue;
        if (floats_add(&fa, scores, take) != 0 ||
            floats_add(&fc, scores + CODEC_MAX_ITEMS, take) != 0)
            goto out;
        v->n_sampled++;
    }
    v->n_items = fa.n;
    if (fa.n) {
        v->mean_active = gate_mean(fa.x, fa.n);
        v->mean_candidate = gate_mean(fc.x, fc.n);
        double d = fabs(v->mean_candidate - v->mean_active);
        v->mean_shift = v->mean_active > 1e-12 ? d / v->mean_active : (d > 1e-12 ? INFINITY : 0);
        v->psi = gate_psi(fa.x, fa.n, fc.x, fc.n);
        if (v->psi < 0)
            goto out;
        v->shadow = true;
    }
    rc = 0;
out:
    free(lens);
    free(buf);
    free(arena.base);
    model_scratch_destroy(sc);
    free(blocks);
    free(scores);
    free(fa.x);
    free(fc.x);
    return rc;
}

/* ---- the evaluation file ------------------------------------------------------------ */

/* Scores --gate-eval-file (gate_eval.h) with cand and act (NULL: first
 * load, nothing to compare with): 0 (also when no file is configured),
 * -EPERM with msg when cand is worse by more than the bound, -ENOMEM or
 * -EPERM when it could not score (a version that was not checked is not
 * served). */
static int check_eval(const server_t *srv, const model_t *cand, const model_t *act,
                      gate_verdict_t *v)
{
    gate_eval_result_t r;
    int rc = gate_eval_run(&srv->cfg, cand, act, &r);
    v->eval_logloss_active = NAN;
    if (rc != 0) {
        snprintf(v->msg, sizeof v->msg, "eval: cannot score %.600s: %s", r.file, strerror(-rc));
        return rc == -ENOMEM ? -ENOMEM : -EPERM;
    }
    if (!r.ran)
        return 0;
    v->eval = true;
    v->eval_rows = r.rows;
    v->eval_logloss_candidate = r.logloss_candidate;
    v->eval_logloss_active = r.logloss_active;
    v->eval_seconds = r.seconds;
    if (!r.refused)
        return 0;
    snprintf(v->msg, sizeof v->msg,
             "eval: logloss %.6f on %.600s (%u rows) is worse than the active version's %.6f "
             "by more than %g (--gate-max-logloss-increase)%s",
             r.logloss_candidate, r.file, r.rows, r.logloss_active, r.bound,
             r.stale ? "; the file changed and did not read: its earlier rows were used" : "");
    return -EPERM;
}

/* ---- the check -------------------------------------------------------------------- */

static void count(const gate_verdict_t *v, uint64_t version_c, uint64_t version_a)
{
    pthread_mutex_lock(&G.lock);
    if (v->eval) {
        G.eval_ran = true;
        G.eval_version_c = version_c;
        G.eval_version_a = version_a;
        G.eval_logloss_c = v->eval_logloss_candidate;
        G.eval_logloss_a = v->eval_logloss_active;
        G.eval_rows = v->eval_rows;
        G.eval_seconds = v->eval_seconds;
    }
    if (v->pass)
        G.passed++;
    else
        G.refused++;
    G.last_psi = v->psi;
    G.last_shift = v->mean_shift;
    G.last_seconds = v->seconds;
    pthread_mutex_unlock(&G.lock);
}

int gate_check(server_t *srv, server_model_t *candidate, gate_verdict_t *v)
{
    memset(v, 0, sizeof *v);
    v->pass = true;
    if (!srv->cfg.gate)
        return 0;
    double t0 = now_s(), c0 = thread_cpu_s();
    const model_t *cand = candidate->model;
    const store_meta_t *cm = model_meta(cand);
    server_model_t *act = server_model_acquire_named(srv, cm->model_name);
    const model_t *am = act ? act->model : NULL;
    /* The active version's own weights under a new label (an online export
     * of the live store): every check would compare them with themselves,
     * and the sanity pass alone walks the whole model. */
    bool relabel = am && model_same_weights(cand, am);
    int rc = check_shape(srv, cand, am, v);
    if (rc == 0 && !relabel)
        rc = check_values(srv, cand, am, v);
    if (rc == 0 && !relabel && am && srv->cfg.gate_sample > 0) {
        rc = shadow(cand, am, srv->cfg.gate_items_per_request, v);
        if (rc == -ENOMEM)
            snprintf(v->msg, sizeof v->msg, "out of memory for the shadow scoring");
    }
    if (rc == 0 && v->shadow) {
        const char *why = NULL;
        double bound = 0, got = 0;
        if (v->mean_shift > srv->cfg.gate_max_mean_shift) {
            why = "the mean prediction moved by";
            got = v->mean_shift;
            bound = srv->cfg.gate_max_mean_shift;
        } else if (v->psi > srv->cfg.gate_max_psi) {
            why = "the score distribution's PSI is";
            got = v->psi;
            bound = srv->cfg.gate_max_psi;
        }
        if (why) {
            snprintf(v->msg, sizeof v->msg,
                     "shadow scoring: %s %.4f, over the bound %.4f (mean_active %.6f, "
                     "mean_candidate %.6f, mean_shift %.4f, psi %.4f, n_sampled %u, items %llu)",
                     why, got, bound, v->mean_active, v->mean_candidate, v->mean_shift, v->psi,
                     v->n_sampled, (unsigned long long)v->n_items);
            rc = -EPERM;
        }
    }
    if (rc == 0 && !relabel)
        rc = check_eval(srv, cand, am, v);
    v->seconds = now_s() - t0;
    v->cpu_seconds = thread_cpu_s() - c0;
    v->pass = rc == 0;
    if (v->pass) {
        char eval[256] = "";
        if (v->eval && !isnan(v->eval_logloss_active))
            snprintf(eval, sizeof eval, ", eval logloss %.6f (active %.6f) on %u rows",
                     v->eval_logloss_candidate, v->eval_logloss_active, v->eval_rows);
        else if (v->eval)
            snprintf(eval, sizeof eval, ", eval logloss %.6f on %u rows (no active version)",
                     v->eval_logloss_candidate, v->eval_rows);
        snprintf(v->msg, sizeof v->msg,
                 "passed: %llu values checked, mean_active %.6f, mean_candidate %.6f, "
                 "mean_shift %.4f, psi %.4f, n_sampled %u%s%s",
                 (unsigned long long)v->values_checked, v->mean_active, v->mean_candidate,
                 v->mean_shift, v->psi, v->n_sampled,
                 relabel ? " (the active version's weights relabelled: nothing new to check)"
                 : v->shadow ? "" : " (no shadow scoring: no active version or empty sample)",
                 eval);
    }
    LOG(v->pass ? LL_INFO : LL_WARN, "gate: %s version %llu %s; %.3f s (this thread's CPU %.3f s)",
        cm->model_name, (unsigned long long)cm->version, v->pass ? v->msg : "refused",
        v->seconds, v->cpu_seconds);
    if (!v->pass)
        LOG(LL_WARN, "gate: %s version %llu refused: %s", cm->model_name,
            (unsigned long long)cm->version, v->msg);
    count(v, cm->version, am ? model_meta(am)->version : 0);
    server_model_release(act);
    return rc;
}

size_t gate_metrics_format(char *buf, size_t len)
{
    pthread_mutex_lock(&G.lock);
    int n = snprintf(buf, len,
                     "# HELP tlserve_gate_verdicts_total Validation gate verdicts on candidate "
                     "versions\n"
                     "# TYPE tlserve_gate_verdicts_total counter\n"
                     "tlserve_gate_verdicts_total{result=\"pass\"} %llu\n"
                     "tlserve_gate_verdicts_total{result=\"refuse\"} %llu\n"
                     "# HELP tlserve_gate_last_psi PSI of the last gated candidate's scores "
                     "against the active's\n"
                     "# TYPE tlserve_gate_last_psi gauge\n"
                     "tlserve_gate_last_psi %.6f\n"
                     "# HELP tlserve_gate_last_mean_shift Relative mean prediction shift of the "
                     "last gated candidate\n"
                     "# TYPE tlserve_gate_last_mean_shift gauge\n"
                     "tlserve_gate_last_mean_shift %.6f\n"
                     "# HELP tlserve_gate_seconds Time the last gate check took\n"
                     "# TYPE tlserve_gate_seconds gauge\n"
                     "tlserve_gate_seconds %.6f\n",
                     (unsigned long long)G.passed, (unsigned long long)G.refused, G.last_psi,
                     isfinite(G.last_shift) ? G.last_shift : 1e308, G.last_seconds);
    if (n >= 0 && (size_t)n < len && G.eval_ran) {
        int m = snprintf(buf + n, len - (size_t)n,
                         "# HELP tlserve_gate_eval_logloss Logloss on --gate-eval-file of the "
                         "last candidate that scored it and of the active version then\n"
                         "# TYPE tlserve_gate_eval_logloss gauge\n"
                         "tlserve_gate_eval_logloss{role=\"candidate\",version=\"%llu\"} %.6f\n",
                         (unsigned long long)G.eval_version_c, G.eval_logloss_c);
        if (m >= 0 && !isnan(G.eval_logloss_a) && (size_t)(n + m) < len)
            m += snprintf(buf + n + m, len - (size_t)(n + m),
                          "tlserve_gate_eval_logloss{role=\"active\",version=\"%llu\"} %.6f\n",
                          (unsigned long long)G.eval_version_a, G.eval_logloss_a);
        if (m >= 0 && (size_t)(n + m) < len)
            m += snprintf(buf + n + m, len - (size_t)(n + m),
                          "# HELP tlserve_gate_eval_rows Rows of --gate-eval-file the last "
                          "check scored with each version\n"
                          "# TYPE tlserve_gate_eval_rows gauge\n"
                          "tlserve_gate_eval_rows %u\n"
                          "# HELP tlserve_gate_eval_seconds Time the last check spent on "
                          "--gate-eval-file\n"
                          "# TYPE tlserve_gate_eval_seconds gauge\n"
                          "tlserve_gate_eval_seconds %.6f\n",
                          G.eval_rows, G.eval_seconds);
        n = m < 0 ? n : n + m;
    }
    pthread_mutex_unlock(&G.lock);
    if (n < 0)
        return 0;
    return (size_t)n < len ? (size_t)n : len ? len - 1 : 0;
}
