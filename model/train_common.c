/*
 * train_common.c — what every trainer kind (train_lr.c, train_fm.c,
 * train_ffm.c, train_dnn.c) shares, kept apart from the handle (train.c) so
 * that calls run one way, handle -> kind -> common: the optimizer names, the
 * option checks (train__check_all), the state store's creation
 * (train__store_create), the work space's growth rule (train__grow), and
 * for LR, FM and DNN, whose state is a store, the per-sample work space
 * (train__work_t: the sample's rows, one batched load that initialises new
 * ids, the seen-set behind the repeat rule).
 *
 * THREAD SAFETY: pure functions, or functions of one writer's own work
 * space (train.h's rule: one writer thread per train_t).
 */
#include "train_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int train_optimizer_parse(const char *name, train_optimizer_t *out)
{
    if (strcmp(name, "ftrl") == 0)
        *out = TRAIN_FTRL;
    else if (strcmp(name, "adagrad") == 0)
        *out = TRAIN_ADAGRAD;
    else if (strcmp(name, "sgd") == 0)
        *out = TRAIN_SGD;
    else
        return -EINVAL;
    return 0;
}

const char *train_optimizer_name(train_optimizer_t opt)
{
    static const char *const names[] = {"ftrl", "adagrad", "sgd"};
    return (unsigned)opt <= TRAIN_SGD ? names[opt] : "?";
}

/* ---- shared by the kinds ------------------------------------------------------ */

const char *train__check_all(const train__check_t *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double v = c[i].value;
        if (!isfinite(v) || (c[i].positive ? !(v > 0) : !(v >= 0)))
            return c[i].why;
    }
    return NULL;
}

int train__refuse(const char *bad, char *why, size_t why_len)
{
    if (why_len)
        snprintf(why, why_len, "%s", bad);
    return -EINVAL;
}

__attribute__((cold)) int train__store_create(uint32_t value_floats, uint32_t shards,
                                              uint64_t expected_keys, store_t **out, char *why,
                                              size_t why_len)
{
    store_options_t so = {.value_floats = value_floats,
                          .dtype = STORE_DTYPE_F32,
                          .shards = shards,
                          .expected_keys = expected_keys};
    int rc = store_create(&so, out);
    if (rc != 0 && why_len)
        snprintf(why, why_len, "could not create the trainer store: %s", strerror(-rc));
    return rc;
}

uint32_t train__grow(uint32_t cap, uint32_t n)
{
    if (!cap)
        cap = 64;
    while (cap < n) {
        if (cap > UINT32_MAX / 2)
            return 0;
        cap *= 2;
    }
    return cap;
}

int train__realloc_array(void **p, size_t n, size_t size)
{
    void *q = realloc(*p, n * size);
    if (!q)
        return -ENOMEM;
    *p = q;
    return 0;
}

int train__work_reserve(train__work_t *w, uint32_t n)
{
    if (n <= w->cap && w->state)
        return 0;
    uint32_t cap = train__grow(w->cap, n);
    if (!cap || seen_set_reserve(&w->seen, cap) != 0)
        return -ENOMEM;
    float *st = malloc((size_t)cap * w->sk * sizeof *st);
    uint8_t *found = malloc(cap);
    float *out = malloc((size_t)cap * sizeof *out);
    if (!st || !found || !out) {
        free(st);
        free(found);
        free(out);
        return -ENOMEM;
    }
    free(w->state);
    free(w->found);
    free(w->out);
    w->state = st;
    w->found = found;
    w->out = out;
    w->cap = cap;
    return 0;
}

void train__work_free(train__work_t *w)
{
    free(w->state);
    free(w->found);
    free(w->out);
    seen_set_free(&w->seen);
    memset(w, 0, sizeof *w);
}

void train__work_load(train__work_t *w, const store_t *s, const uint64_t *ids, uint32_t n,
                      train__init_fn init, const void *ctx)
{
    store_lookup_batch(s, ids, n, w->state, w->found);
    for (uint32_t j = 0; j < n; j++)
        if (!w->found[j])
            init(ctx, ids[j], w->state + (size_t)j * w->sk);
}
