/*
 * model.c — a loaded model version and batched scoring.
 *
 * A model is a store (the sparse parameters) plus its manifest meta.  LR is
 * the only kind so far:
 *
 *   score(item) = sigmoid(bias + sum_{f in shared} w_f x_f + sum_{f in item} w_f x_f)
 *
 * The bias is the weight stored under MODEL_BIAS_ID.  One request does ONE
 * batched store lookup for all its ids, in the order
 *
 *   [ bias | shared ids ... | item 0 ids ... | item 1 ids ... | ... ]
 *
 * so that the store's prefetching covers the whole request; when the blocks
 * already lie back to back in memory (as the wire decoder leaves them) the
 * lookup reads them in place, otherwise they are gathered into the scratch.
 * The shared sum is computed once and added to every item.  Sums run in double, in
 * block order, so that the same request always gives the same float.
 *
 * THREAD SAFETY: the model is read-only; each thread scores with its own
 * scratch (model.h).
 */
#include "model.h"

#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct model {
    store_t *store;     /* owned */
    store_meta_t meta;
};

struct model_scratch {
    size_t cap;         /* ids the arrays hold, bias included */
    uint64_t *keys;
    float *weights;
};

int model_from_store(store_t *s, const store_meta_t *meta, model_t **out)
{
    if (!s || !meta || !out)
        return -EINVAL;
    if (meta->model_kind != STORE_MODEL_LR || store_value_floats(s) != 1)
        return -ENOTSUP;
    model_t *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->store = s;
    m->meta = *meta;
    *out = m;
    return 0;
}

int model_load(const char *dir, int threads, model_t **out, store_error_t *err)
{
    store_t *s;
    store_meta_t meta;
    if (store_snapshot_load(dir, threads, &s, &meta, err) != 0)
        return -1;
    int rc = model_from_store(s, &meta, out);
    if (rc != 0) {
        store_destroy(s);
        if (err) {
            memset(err, 0, sizeof *err);
            err->code = STORE_E_INVALID;
            err->offset = -1;
            snprintf(err->msg, sizeof err->msg,
                     "%s: model kind %s with %u floats per key is not supported yet (LR only)",
                     dir, store_model_kind_name(meta.model_kind), store_value_floats(s));
        }
        return -1;
    }
    return 0;
}

void model_destroy(model_t *m)
{
    if (!m)
        return;
    store_destroy(m->store);
    free(m);
}

const store_meta_t *model_meta(const model_t *m) { return &m->meta; }
const store_t *model_store(const model_t *m) { return m->store; }

int model_scratch_create(size_t max_features, model_scratch_t **out)
{
    model_scratch_t *sc = calloc(1, sizeof *sc);
    if (!sc)
        return -ENOMEM;
    sc->cap = max_features + 1;
    sc->keys = malloc(sc->cap * sizeof *sc->keys);
    sc->weights = malloc(sc->cap * sizeof *sc->weights);
    if (!sc->keys || !sc->weights) {
        model_scratch_destroy(sc);
        return -ENOMEM;
    }
    *out = sc;
    return 0;
}

void model_scratch_destroy(model_scratch_t *sc)
{
    if (!sc)
        return;
    free(sc->keys);
    free(sc->weights);
    free(sc);
}

static inline double block_sum(const model_block_t *b, const float *w)
{
    double sum = 0;
    if (b->values) {
        for (uint32_t j = 0; j < b->n; j++)
            sum += (double)w[j] * b->values[j];
    } else {
        for (uint32_t j = 0; j < b->n; j++)
            sum += w[j];
    }
    return sum;
}

static inline float sigmoid(double x)
{
    if (x >= 0)
        return (float)(1.0 / (1.0 + exp(-x)));
    double e = exp(x); /* no overflow for very negative x */
    return (float)(e / (1.0 + e));
}

int model_score(const model_t *m, const model_block_t *shared, const model_block_t *items,
                uint32_t n_items, float *scores, model_scratch_t *sc)
{
    size_t total = 1 + shared->n;
    for (uint32_t i = 0; i < n_items; i++)
        total += items[i].n;
    if (total > sc->cap)
        return -E2BIG;

    /* The decoder lays a request's blocks out back to back; then the ids are
     * looked up where they are.  Otherwise they are gathered first. */
    const uint64_t *next = shared->ids + shared->n;
    bool contiguous = shared->n > 0;
    for (uint32_t i = 0; i < n_items && contiguous; i++) {
        contiguous = items[i].n == 0 || items[i].ids == next;
        next += items[i].n;
    }
    if (contiguous) {
        store_lookup(m->store, MODEL_BIAS_ID, sc->weights);
        store_lookup_batch(m->store, shared->ids, total - 1, sc->weights + 1, NULL);
    } else {
        uint64_t *k = sc->keys;
        *k++ = MODEL_BIAS_ID;
        memcpy(k, shared->ids, (size_t)shared->n * sizeof *k);
        k += shared->n;
        for (uint32_t i = 0; i < n_items; i++) {
            memcpy(k, items[i].ids, (size_t)items[i].n * sizeof *k);
            k += items[i].n;
        }
        store_lookup_batch(m->store, sc->keys, total, sc->weights, NULL);
    }

    const float *w = sc->weights;
    double base = (double)w[0] + block_sum(shared, w + 1);
    w += 1 + shared->n;
    for (uint32_t i = 0; i < n_items; i++) {
        scores[i] = sigmoid(base + block_sum(&items[i], w));
        w += items[i].n;
    }
    return 0;
}
