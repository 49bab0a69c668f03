/*
 * admin_digest.c — GET /v1/models/{name}/digest: a fingerprint of the
 * weights a model serves, so that an operator (or a test) can tell whether
 * two replicas hold the same model bit for bit, not merely score a few
 * probes alike.
 *
 *   200 {"model","version","keys","value_floats","dense_floats",
 *        "digest":"<16 hex>","micros"}
 *
 * The digest is the sum, modulo 2^64, of a 64-bit mix of each entry (its
 * key and the bit patterns of its served floats), so it does not depend on
 * the order entries sit in the table (two replicas that inserted the same
 * keys in another order, or into stores of other shard counts or
 * capacities, agree), plus a mix of every dense array the version carries
 * (the DNN's MLP), name and floats in order.  Floats count by their bits:
 * 0.0 and -0.0 differ, as they would in a snapshot file.
 *
 * It walks the active version's base store under the model's writer lock
 * (server_slot_t.writer): the online trainer and a delta's fold wait for
 * it, so the figure is of one state of the model; requests never wait (they
 * do not take the lock).  The walk runs on the admin thread at the
 * store's iteration speed (tens of millions of entries a second), so other
 * admin calls wait that long on a large model: this is an operator's
 * check, not something to poll.  A version with an overlay (a delta not yet
 * folded) answers 409: its served weights are the base and the overlay
 * together, and the fold is about to make them one; retry after it.
 * 404 when name has no active version.
 */
#include "admin_impl.h"
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
} digest_t;

/* One float's bits folded into the running mix h. */
static inline uint64_t mix_float(uint64_t h, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return store_mix64(h ^ bits);
}

static int visit(void *ctx, uint64_t key, const float *value)
{
    digest_t *d = ctx;
    uint64_t h = store_mix64(key ^ 0x9e3779b97f4a7c15ULL);
    for (uint32_t i = 0; i < d->floats; i++)
        h = mix_float(h + i, value[i]);
    d->sum += h;
    d->keys++;
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
    if (model_overlays(m, NULL) > 0) {
        server_model_release(sm);
        pthread_mutex_unlock(&slot->writer);
        admin__reply_error(req, 409,
                           "model '%s' version %" PRIu64 " has a delta not yet folded into its "
                           "base; retry once it is (tlserve_folds_total)",
                           name, version);
        return;
    }
    const store_t *s = model_store(m);
    digest_t d = {.sum = 0, .keys = 0, .floats = store_value_floats(s)};
    for (uint32_t sh = 0; sh < store_shards(s); sh++)
        (void)store_foreach(s, sh, visit, &d);
    uint64_t dense_floats;
    uint64_t digest = d.sum + dense_mix(model_extras(m), &dense_floats);
    server_model_release(sm);
    pthread_mutex_unlock(&slot->writer);
    clock_gettime(CLOCK_MONOTONIC, &t1);

    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, digest);
    json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:I, s:s, s:I}", "model", name, "version",
                          (json_int_t)version, "keys", (json_int_t)d.keys, "value_floats",
                          (json_int_t)d.floats, "dense_floats", (json_int_t)dense_floats,
                          "digest", hex, "micros",
                          (json_int_t)((t1.tv_sec - t0.tv_sec) * 1000000 +
                                       (t1.tv_nsec - t0.tv_nsec) / 1000));
    if (!j) {
        admin__reply_error(req, 500, "no memory for the answer");
        return;
    }
    admin__reply_json(req, 200, j);
}
