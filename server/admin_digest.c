/*
 * admin_digest.c — GET /v1/models/{name}/digest: a fingerprint of the
 * weights a model serves, so that an operator (or a test) can tell whether
 * two replicas hold the same model bit for bit, not merely score a few
 * probes alike.
 *
 *   200 {"model","version","keys","value_floats","dense_floats",
 *        "digest":"<16 hex>","mlp":"<16 hex>","mlp_installs","micros"}
 *
 * The digest is the sum, modulo 2^64, of a 64-bit mix of each entry (its
 * key and the bit patterns of its served floats), so it does not depend on
 * the order entries sit in the table (two replicas that inserted the same
 * keys in another order, or into stores of other shard counts or
 * capacities, agree), plus a mix of every dense array the version carries
 * (the DNN's MLP as its snapshot has it), name and floats in order.  "mlp"
 * mixes the MLP a DNN serves NOW (partitioned replicas learn it online and
 * install copies: model_dnn_install_mlp; "mlp_installs" counts them), 0
 * for other kinds.  Floats count by their bits:
 * 0.0 and -0.0 differ, as they would in a snapshot file.
 *
 * What a version serves is its base store seen through its overlays (a
 * delta not yet folded, or the undo a kept version got from a fold;
 * model/overlay.h: first match wins), so the walk takes each base entry's
 * value from the first overlay that names it (skipped when that overlay
 * deletes it), then the overlays' keys the base lacks, each once, from the
 * first overlay that names it: a version with overlays and the same weights
 * folded into a base have one digest.
 *
 * It walks under the model's writer lock (server_slot_t.writer): the online
 * trainer and a delta's fold wait for it, so the figure is of one state of
 * the model; requests never wait (they do not take the lock).  The walk
 * runs on a thread of its own, not the admin thread: getting the lock can
 * wait seconds for the trainer, a fold or an export's handover, and the walk
 * takes as long again on a large model (millions of entries a second, slower
 * per overlay), while /healthz, /metrics and the rest must answer at once.
 * The admin thread answers when the walk is done.  One digest at a time (it
 * is an operator's check, not something to poll): another asked meanwhile
 * gets 503.  404 when name has no active version.
 */
#include "admin_impl.h"
#include "log.h"
#include "model/dnn.h"
#include "model/model.h"
#include "model/overlay.h"
#include "store/synthetic.h"

#include <event2/event.h>
#include <event2/http.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct digest {
    uint64_t sum;
    uint64_t keys;
    uint32_t floats;
    const store_t *base;
    model_overlay_t *ov[MODEL_OVERLAYS_MAX];
    uint32_t nov, cur; /* overlays; the one whose entries are walked */
    float *row;        /* one row of scratch */
} digest_t;

/* One float's bits folded into the running mix h. */
static inline uint64_t mix_float(uint64_t h, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return store_mix64(h ^ bits);
}

static void add_entry(digest_t *d, uint64_t key, const float *value)
{
    uint64_t h = store_mix64(key ^ 0x9e3779b97f4a7c15ULL);
    for (uint32_t i = 0; i < d->floats; i++)
        h = mix_float(h + i, value[i]);
    d->sum += h;
    d->keys++;
}

/* The first of overlays [0, upto) that names key: 1 value (in d->row), 2
 * deleted, 0 none. */
static int overlays_say(digest_t *d, uint64_t key, uint32_t upto)
{
    for (uint32_t i = 0; i < upto; i++) {
        int r = model_overlay_get(d->ov[i], key, d->row);
        if (r)
            return r;
    }
    return 0;
}

static int visit_base(void *ctx, uint64_t key, const float *value)
{
    digest_t *d = ctx;
    int r = overlays_say(d, key, d->nov);
    if (r != 2)
        add_entry(d, key, r == 1 ? d->row : value);
    return 0;
}

/* An entry of overlay d->cur: counted here when the base lacks its key and
 * no overlay before it names it (the base's keys were counted by visit_base). */
static int visit_overlay(void *ctx, uint64_t key, const float *value)
{
    digest_t *d = ctx;
    if (value && !store_lookup(d->base, key, d->row) && overlays_say(d, key, d->cur) == 0)
        add_entry(d, key, value);
    return 0;
}

/* The dense arrays' mix (their names and floats in order); their float
 * count in *floats. */
static uint64_t dense_mix(const store_extras_t *x, uint64_t *floats)
{
    uint64_t h = 0;
    *floats = 0;
    for (uint32_t i = 0; x && i < x->n_dense; i++) {
        const store_dense_t *d = &x->dense[i];
        for (const char *c = d->name; *c; c++)
            h = store_mix64(h ^ (uint8_t)*c);
        for (uint64_t j = 0; j < d->count; j++)
            h = mix_float(h + j, d->data[j]);
        *floats += d->count;
    }
    return h;
}

/* The MLP a DNN serves now (installed online, else the snapshot's), its
 * layers' weights and biases in order; 0 for other kinds.  Writer lock
 * held: no install runs meanwhile. */
static uint64_t served_mlp_mix(const model_t *m)
{
    const dnn_net_t *n = model_dnn_served_mlp(m);
    uint64_t h = 0, j = 0;
    for (uint32_t l = 0; n && l < n->n_layers; l++) {
        for (size_t i = 0; i < (size_t)n->width[l] * n->width[l + 1]; i++)
            h = mix_float(h + j++, n->W[l][i]);
        for (size_t i = 0; i < n->width[l + 1]; i++)
            h = mix_float(h + j++, n->b[l][i]);
    }
    return h;
}

/* One digest in flight: walked on its thread, answered on the admin thread. */
typedef struct digest_job {
    server_t *srv;
    struct evhttp_request *req;
    struct event *done_ev; /* activated by the walk's thread when it is done */
    pthread_t thread;
    char name[64];
    bool found; /* the model had an active version */
    uint64_t version, keys, dense_floats, digest, mlp, installs, micros;
    uint32_t floats;
} digest_job_t;

static digest_job_t *running; /* admin thread only */

static void *digest_main(void *arg)
{
    digest_job_t *job = arg;
    server_slot_t *slot = server_slot_named(job->srv, job->name);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_mutex_lock(&slot->writer);
    server_model_t *sm = server_model_acquire_named(job->srv, job->name);
    if (sm) {
        const model_t *m = sm->model;
        const store_t *s = model_store(m);
        float row[STORE_MAX_VALUE_FLOATS];
        digest_t d = {.floats = store_value_floats(s), .base = s, .row = row};
        d.nov = model_overlays(m, d.ov);
        for (uint32_t sh = 0; sh < store_shards(s); sh++)
            (void)store_foreach(s, sh, visit_base, &d);
        for (d.cur = 0; d.cur < d.nov; d.cur++)
            (void)model_overlay_foreach(d.ov[d.cur], visit_overlay, &d);
        job->found = true;
        job->version = model_meta(m)->version;
        job->keys = d.keys;
        job->floats = d.floats;
        job->digest = d.sum + dense_mix(model_extras(m), &job->dense_floats);
        job->mlp = served_mlp_mix(m);
        job->installs = model_dnn_mlp_installs(m);
    }
    server_model_release(sm);
    pthread_mutex_unlock(&slot->writer);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    job->micros = (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000);
    event_active(job->done_ev, EV_READ, 0); /* the admin base is notifiable (evthread) */
    return NULL;
}

static void job_free(digest_job_t *job)
{
    event_free(job->done_ev);
    free(job);
    running = NULL;
}

/* Admin thread: the walk is done; answer. */
static void on_digest_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    digest_job_t *job = arg;
    pthread_join(job->thread, NULL);
    admin__unhold(job->req);
    if (!job->found) {
        admin__reply_error(job->req, 404, "model '%s' has no active version", job->name);
        job_free(job);
        return;
    }
    char hex[17], mlp_hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, job->digest);
    snprintf(mlp_hex, sizeof mlp_hex, "%016" PRIx64, job->mlp);
    json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:I, s:s, s:s, s:I, s:I}", "model", job->name,
                          "version", (json_int_t)job->version, "keys", (json_int_t)job->keys,
                          "value_floats", (json_int_t)job->floats, "dense_floats",
                          (json_int_t)job->dense_floats, "digest", hex, "mlp", mlp_hex,
                          "mlp_installs", (json_int_t)job->installs, "micros",
                          (json_int_t)job->micros);
    if (j)
        admin__reply_json(job->req, 200, j);
    else
        admin__reply_error(job->req, 500, "no memory for the answer");
    job_free(job);
}

void admin__on_digest(server_t *srv, struct evhttp_request *req, const char *name)
{
    if (!server_slot_named(srv, name)) {
        admin__reply_error(req, 404, "model '%s' has no active version", name);
        return;
    }
    if (admin__stop_begun()) { /* the stop joined the last walk: none may start now */
        admin__reply_error(req, 503, "the server is shutting down");
        return;
    }
    if (running) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
        admin__reply_error(req, 503, "a digest of model '%s' is being computed (one at a time: "
                           "it walks every weight); retry when it is done", running->name);
        return;
    }
    digest_job_t *job = calloc(1, sizeof *job);
    if (!job) {
        admin__reply_error(req, 503, "no memory for the digest");
        return;
    }
    job->srv = srv;
    job->req = req;
    snprintf(job->name, sizeof job->name, "%s", name);
    job->done_ev = event_new(admin__base(), -1, 0, on_digest_done, job);
    int rc = job->done_ev ? pthread_create(&job->thread, NULL, digest_main, job) : ENOMEM;
    if (rc != 0) {
        if (job->done_ev)
            event_free(job->done_ev);
        free(job);
        admin__reply_error(req, 503, "cannot start the digest's thread: %s", strerror(rc));
        return;
    }
    running = job;
    admin__hold(req); /* answered by on_digest_done, however long the walk takes */
}

int admin__digest_stop(void)
{
    if (!running)
        return 0;
    digest_job_t *job = running;
    pthread_join(job->thread, NULL); /* a walk ends: the trainer releases the lock often */
    admin__unhold(job->req);
    admin__reply_error(job->req, 503, "the server is shutting down");
    job_free(job);
    return 1;
}
