/*
 * train.c — the trainer handle of train.h: a train_t is a kind's table of
 * functions (train_ops_t) and its state, plus the one thing every kind
 * needs from a caller that holds samples the way the server does: the
 * shared block and an item block joined into one run of features; and the
 * list of kinds with their defaults.  What the kinds share lives apart, in
 * train_common.c, so that calls run one way: train.c -> train_<kind>.c ->
 * train_common.c.
 *
 * Joining: a sample's features are the shared block's then the item's.
 * When one of the two is empty the other is passed as it is (no copy:
 * tltrain's samples, all in the shared block, cost nothing); otherwise both
 * are copied into the handle's buffers, values filled with 1 where a block
 * has none (x = 1 is what NULL values mean, and a product with 1.0 is
 * exact, so the arithmetic does not change).
 *
 * THREAD SAFETY: one writer thread per train_t (train.h).
 */
#include "train_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct train {
    const train_ops_t *ops;
    void *impl;          /* owned: the kind's state */
    train_options_t opt; /* as created */
    uint32_t cap;        /* features ids/values hold */
    uint64_t *ids;       /* cap: a joined sample's ids */
    float *values;       /* cap: its values */
};

/* ---- options ------------------------------------------------------------------ */

/* Every kind that trains: a new kind is one file and one entry here. */
static const train_ops_t *const all_ops[] = {&train__lr_ops, &train__fm_ops, &train__ffm_ops,
                                             &train__dnn_ops};

const train_ops_t *train_ops_for(store_model_kind_t kind)
{
    for (size_t i = 0; i < sizeof all_ops / sizeof *all_ops; i++)
        if (all_ops[i]->kind == kind)
            return all_ops[i];
    return NULL;
}

const train_ops_t *train_ops_named(const char *name)
{
    for (size_t i = 0; i < sizeof all_ops / sizeof *all_ops; i++)
        if (strcmp(all_ops[i]->name, name) == 0)
            return all_ops[i];
    return NULL;
}

int train_defaults(store_model_kind_t kind, train_optimizer_t opt, train_options_t *o)
{
    memset(o, 0, sizeof *o);
    o->kind = kind;
    switch (kind) {
    case STORE_MODEL_LR:
        train_lr_defaults(opt, &o->lr);
        return 0;
    case STORE_MODEL_FM:
        train_fm_defaults(opt, &o->fm);
        return 0;
    case STORE_MODEL_FFM:
        train_ffm_defaults(opt, &o->ffm);
        return 0;
    case STORE_MODEL_DNN:
        train_dnn_defaults(&o->dnn);
        return 0;
    default:
        return -EINVAL;
    }
}

train_optimizer_t train_default_optimizer(store_model_kind_t kind)
{
    return kind == STORE_MODEL_LR ? TRAIN_FTRL : TRAIN_ADAGRAD;
}

uint32_t train_default_epochs(const train_options_t *o)
{
    switch (o->kind) {
    case STORE_MODEL_FM: /* ftrl/sgd: untuned, they overfit the small sets from pass 2 */
        return o->fm.optimizer == TRAIN_ADAGRAD ? TRAIN_FM_DEFAULT_EPOCHS : 1;
    case STORE_MODEL_FFM:
        return TRAIN_FFM_DEFAULT_EPOCHS;
    case STORE_MODEL_DNN:
        return TRAIN_DNN_DEFAULT_EPOCHS;
    default:
        return 3;
    }
}

uint32_t *train_options_fields(train_options_t *o)
{
    return o->kind == STORE_MODEL_FFM   ? &o->ffm.fields
           : o->kind == STORE_MODEL_DNN ? &o->dnn.fields
                                        : NULL;
}

/* ---- the handle --------------------------------------------------------------- */

__attribute__((cold)) int train_create(const train_options_t *o, train_t **out, char *why,
                                       size_t why_len)
{
    const train_ops_t *ops = train_ops_for(o->kind);
    if (!ops)
        return train__refuse("no trainer for this model kind", why, why_len);
    train_t *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->ops = ops;
    t->opt = *o;
    int rc = ops->create(o, &t->impl, why, why_len);
    if (rc == 0 && (rc = ops->reserve(t->impl, 64)) != 0 && why_len)
        snprintf(why, why_len, "could not size the trainer's work space: %s", strerror(-rc));
    if (rc != 0) {
        train_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

void train_destroy(train_t *t)
{
    if (!t)
        return;
    if (t->impl)
        t->ops->destroy(t->impl);
    free(t->ids);
    free(t->values);
    free(t);
}

void *train__impl(const train_t *t) { return t->impl; }

const train_ops_t *train_ops(const train_t *t)
{
    return t->ops;
}
const train_options_t *train_options(const train_t *t)
{
    return &t->opt;
}
const store_t *train_store(const train_t *t)
{
    return t->ops->store(t->impl);
}

void train_describe(const train_t *t, char *buf, size_t len)
{
    t->ops->describe(t->impl, buf, len);
}

/* Grows the join buffers to n features: 0 or -ENOMEM (unchanged). */
static int join_reserve(train_t *t, uint32_t n)
{
    if (n <= t->cap)
        return 0;
    uint32_t cap = train__grow(t->cap, n);
    if (!cap)
        return -ENOMEM;
    uint64_t *ids = realloc(t->ids, (size_t)cap * sizeof *ids);
    if (!ids)
        return -ENOMEM;
    t->ids = ids;
    float *values = realloc(t->values, (size_t)cap * sizeof *values);
    if (!values)
        return -ENOMEM;
    t->values = values;
    t->cap = cap;
    return 0;
}

int train_reserve(train_t *t, uint32_t n)
{
    return t->ops->reserve(t->impl, n);
}

static void copy_values(float *dst, const codec_block_t *b)
{
    if (b->values)
        memcpy(dst, b->values, (size_t)b->n * sizeof *dst);
    else
        for (uint32_t j = 0; j < b->n; j++)
            dst[j] = 1.0f;
}

/* The sample (shared, item) as one run: *ids, *values (NULL = all 1), *n.
 * 0 or -ENOMEM (more features than fit in 32 bits, or no memory). */
static int join(train_t *t, const codec_block_t *shared, const codec_block_t *item,
                const uint64_t **ids, const float **values, uint32_t *n)
{
    const codec_block_t *one = !item || item->n == 0 ? shared : shared->n == 0 ? item : NULL;
    if (one) {
        *ids = one->ids;
        *values = one->values;
        *n = one->n;
        return 0;
    }
    uint64_t total = (uint64_t)shared->n + item->n;
    if (total > UINT32_MAX || join_reserve(t, (uint32_t)total) != 0)
        return -ENOMEM;
    memcpy(t->ids, shared->ids, (size_t)shared->n * sizeof *t->ids);
    memcpy(t->ids + shared->n, item->ids, (size_t)item->n * sizeof *t->ids);
    if (shared->values || item->values) {
        copy_values(t->values, shared);
        copy_values(t->values + shared->n, item);
        *values = t->values;
    } else {
        *values = NULL;
    }
    *ids = t->ids;
    *n = (uint32_t)total;
    return 0;
}

float train_predict(train_t *t, const codec_block_t *shared, const codec_block_t *item)
{
    const uint64_t *ids;
    const float *values;
    uint32_t n;
    if (join(t, shared, item, &ids, &values, &n) != 0)
        return NAN;
    return t->ops->predict(t->impl, ids, values, n);
}

int train_update(train_t *t, const codec_block_t *shared, const codec_block_t *items,
                 uint32_t n_items, const float *labels, const float *weights, float *p)
{
    if (t->ops->update_batch)
        return t->ops->update_batch(t->impl, shared, items, n_items, labels, weights, p);
    for (uint32_t i = 0; i < n_items; i++) {
        const uint64_t *ids;
        const float *values;
        uint32_t n;
        int rc = join(t, shared, &items[i], &ids, &values, &n);
        if (rc == 0)
            rc = t->ops->update(t->impl, ids, values, n, labels[i], weights ? weights[i] : 1.0f,
                                p ? &p[i] : NULL);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int train_attach_live_model(train_t *t, store_t *live, const store_extras_t *x, char *why,
                            size_t why_len)
{
    if (!t->ops->attach_live)
        return train__refuse("this model kind cannot learn online into a served store yet",
                             why, why_len);
    return t->ops->attach_live(t->impl, live, x, why, why_len);
}

int train_attach_live(train_t *t, store_t *live, char *why, size_t why_len)
{
    return train_attach_live_model(t, live, NULL, why, why_len);
}

int train_export(const train_t *t, const char *dir, const store_meta_t *meta, store_error_t *err)
{
    return t->ops->export_snapshot(t->impl, dir, meta, err);
}
