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
 * runs on the admin thread at the store's iteration speed (millions of
 * entries a second, slower per overlay), so other admin calls wait that
 * long on a large model: an operator's check, not something to poll.  404
 * when name has no active version.
 */
#include "admin_impl.h"
#include "model/dnn.h"
#include "model/model.h"
#include "model/overlay.h"
#include "store/synthetic.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
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

void admin__on_digest(server_t *srv, struct evhttp_request *req, const char *name)
{
    server_slot_t *slot = server_slot_named(srv, name);
    if (!slot) {
        admin__reply_error(req, 404, "model '%s' has no active version", name);
        return;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_mutex_lock(&slot->writer);
    server_model_t *sm = server_model_acquire_named(srv, name);
    if (!sm) {
        pthread_mutex_unlock(&slot->writer);
        admin__reply_error(req, 404, "model '%s' has no active version", name);
        return;
    }
    const model_t *m = sm->model;
    uint64_t version = model_meta(m)->version;
    const store_t *s = model_store(m);
    float row[STORE_MAX_VALUE_FLOATS];
    digest_t d = {.floats = store_value_floats(s), .base = s, .row = row};
    d.nov = model_overlays(m, d.ov);
    for (uint32_t sh = 0; sh < store_shards(s); sh++)
        (void)store_foreach(s, sh, visit_base, &d);
    for (d.cur = 0; d.cur < d.nov; d.cur++)
        (void)model_overlay_foreach(d.ov[d.cur], visit_overlay, &d);
    uint64_t dense_floats;
    uint64_t digest = d.sum + dense_mix(model_extras(m), &dense_floats);
    uint64_t mlp = served_mlp_mix(m), installs = model_dnn_mlp_installs(m);
    server_model_release(sm);
    pthread_mutex_unlock(&slot->writer);
    clock_gettime(CLOCK_MONOTONIC, &t1);

    char hex[17], mlp_hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, digest);
    snprintf(mlp_hex, sizeof mlp_hex, "%016" PRIx64, mlp);
    json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:I, s:s, s:s, s:I, s:I}", "model", name,
                          "version", (json_int_t)version, "keys", (json_int_t)d.keys,
                          "value_floats", (json_int_t)d.floats, "dense_floats",
                          (json_int_t)dense_floats, "digest", hex, "mlp", mlp_hex,
                          "mlp_installs", (json_int_t)installs, "micros",
                          (json_int_t)((t1.tv_sec - t0.tv_sec) * 1000000 +
                                       (t1.tv_nsec - t0.tv_nsec) / 1000));
    if (!j) {
        admin__reply_error(req, 500, "no memory for the answer");
        return;
    }
    admin__reply_json(req, 200, j);
}
