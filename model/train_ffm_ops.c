/*
 * train_ffm_ops.c — FFM's trainer as the rest of the library drives it
 * (train_ffm.c holds the model and its step): the train_ops_t table, the
 * workers of train_threads_epoch (ON THREADS), a frame's update (BATCH) and
 * partitioned replicas' row sync (SYNC).  Apart so that each file keeps
 * one job: train_ffm.c the arithmetic, this one the ways it is called.
 *
 * THREAD SAFETY: as train_ffm.c: one thread drives a trainer; workers run
 * on many threads while it waits.
 */
#include "train_ffm_impl.h"
#include "ffm.h"
#include "model.h"
#include "row_table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- on threads (train_threads.c) -------------------------------------------- */

static int par_begin(void *impl, train__row_table_t **rows, store_t **mirror_of, char *why,
                     size_t why_len)
{
    if (((train_ffm_t *)impl)->served)
        return train__refuse("an FFM trainer attached to a live store trains on one thread",
                             why, why_len);
    *rows = ((train_ffm_t *)impl)->table;
    *mirror_of = NULL; /* the rows are the state */
    return 0;
}

/* A worker: the trainer's options, table and zero row, its own work space. */
static int par_worker_create(void *impl, void **out)
{
    const train_ffm_t *t = impl;
    train_ffm_t *w = malloc(sizeof *w);
    if (!w)
        return -ENOMEM;
    *w = *t;
    w->worker = true;
    w->sync.fn = NULL; /* the hook is the one writer's */
    w->cap = 0;
    w->live = NULL;
    w->selfv = NULL;
    w->scratch = NULL;
    w->jids = NULL;
    w->jvals = NULL;
    w->jcap = w->defer_n = 0;
    w->work = malloc(model_ffm_work_doubles(t->F, t->k) * sizeof *w->work);
    w->gv = calloc((size_t)t->F * t->k, sizeof *w->gv);
    w->mask = calloc((size_t)t->F * t->k, sizeof *w->mask);
    w->cnt = calloc(t->F, sizeof *w->cnt);
    if (!w->work || !w->gv || !w->mask || !w->cnt) {
        train_ffm_destroy(w);
        return -ENOMEM;
    }
    *out = w;
    return 0;
}

static void par_worker_destroy(void *w) { train_ffm_destroy(w); }

static int par_update(void *w, const uint64_t *ids, const float *values, uint32_t n,
                      float label, float weight, float *p)
{
    return train_ffm_update(w, ids, values, n, label, weight, p);
}

const train__par_ops_t train__ffm_par_ops = {
    .begin = par_begin, .worker_create = par_worker_create,
    .worker_destroy = par_worker_destroy, .update = par_update, .end = NULL,
};

/* train_ops_t.update_batch (BATCH): update() per item on shared ++ item,
 * the shared positions' served rows written once, at the frame's end. */
static int update_batch(train_ffm_t *t, const codec_block_t *shared, const codec_block_t *items,
                        uint32_t n_items, const float *labels, const float *weights, float *p)
{
    const codec_block_t none = {.ids = NULL, .values = NULL, .n = 0};
    if (!shared)
        shared = &none;
    const uint32_t ns = shared->n;
    uint64_t most = ns;
    for (uint32_t i = 0; items && i < n_items; i++)
        if ((uint64_t)ns + items[i].n > most)
            most = (uint64_t)ns + items[i].n;
    if (most > t->jcap) {
        uint32_t cap = most > UINT32_MAX ? 0 : train__grow(t->jcap, (uint32_t)most);
        uint64_t *ids = cap ? realloc(t->jids, (size_t)cap * sizeof *ids) : NULL;
        if (ids)
            t->jids = ids;
        float *vals = ids ? realloc(t->jvals, (size_t)cap * sizeof *vals) : NULL;
        if (!vals)
            return -ENOMEM;
        t->jvals = vals;
        t->jcap = cap;
    }
    for (uint32_t j = 0; j < ns; j++) {
        t->jids[j] = shared->ids[j];
        t->jvals[j] = shared->values ? shared->values[j] : 1.0f;
    }
    t->defer_n = t->served ? ns : 0;
    t->defer_done = 0;
    int rc = 0;
    for (uint32_t i = 0; i < n_items && rc == 0; i++) {
        const codec_block_t *it = items ? &items[i] : &none;
        for (uint32_t j = 0; j < it->n; j++) {
            t->jids[ns + j] = it->ids[j];
            t->jvals[ns + j] = it->values ? it->values[j] : 1.0f;
        }
        const float *v = shared->values || it->values ? t->jvals : NULL;
        rc = train_ffm_update(t, t->jids, v, ns + it->n, labels[i], weights ? weights[i] : 1.0f,
                              p ? &p[i] : NULL);
    }
    /* the shared rows stepped, as update() would have left them served (a
     * row spoilt by a step that was not finite stays unserved) */
    for (uint32_t j = 0; j < t->defer_done; j++) {
        if (shared->values && shared->values[j] == 0)
            continue; /* never stepped, never written */
        const float *row = train__row_table_find(t->table, shared->ids[j]);
        int wrc = row ? train__ffm_write_served(t, shared->ids[j], row, true) : 0;
        if (wrc != 0 && wrc != -ERANGE && rc == 0)
            rc = wrc;
    }
    t->defer_n = t->defer_done = 0;
    return rc;
}

/* ---- train_ops_t -------------------------------------------------------------- */

static int ops_create(const train_options_t *o, void **impl, char *why, size_t why_len)
{
    return train_ffm_create(&o->ffm, (train_ffm_t **)impl, why, why_len);
}
static void ops_destroy(void *impl) { train_ffm_destroy(impl); }
static int ops_reserve(void *impl, uint32_t n) { return train_ffm_reserve(impl, n); }
static float ops_predict(void *impl, const uint64_t *ids, const float *values, uint32_t n)
{
    return train_ffm_predict(impl, ids, values, n);
}
static int ops_update(void *impl, const uint64_t *ids, const float *values, uint32_t n,
                      float label, float weight, float *p)
{
    return train_ffm_update(impl, ids, values, n, label, weight, p);
}
static int ops_update_batch(void *impl, const codec_block_t *shared, const codec_block_t *items,
                            uint32_t n_items, const float *labels, const float *weights, float *p)
{
    return update_batch(impl, shared, items, n_items, labels, weights, p);
}
static int ops_export(const void *impl, const char *dir, const store_meta_t *meta,
                      store_error_t *err)
{
    return train_ffm_export(impl, dir, meta, err);
}
static const store_t *ops_store(const void *impl)
{
    (void)impl;
    return NULL; /* rows in a row table, read by the writer alone */
}
static void ops_describe(const void *impl, char *buf, size_t len)
{
    const train_ffm_options_t *o = &((const train_ffm_t *)impl)->opt;
    snprintf(buf, len,
             "ffm/%s fields=%u k=%u norm=%d alpha=%g w_ratio=%g beta=%g l1=%g l2=%g l2_v=%g "
             "init_stdev=%g seed=%llu",
             train_optimizer_name(o->optimizer), o->fields, o->k, (int)o->norm, o->alpha,
             o->w_ratio, o->beta, o->optimizer == TRAIN_FTRL ? o->l1 : 0.0, o->l2, o->l2_v,
             o->init_stdev, (unsigned long long)o->seed);
}

static int ops_attach_live(void *impl, store_t *live, const store_extras_t *x, char *why,
                           size_t why_len)
{
    (void)x; /* the store holds the whole served model */
    return train__ffm_attach_live(impl, live, why, why_len);
}

/* ---- SYNC (train_sync.h: ROWS) ------------------------------------------------ */

static train__rows_sync_t *rows_sync(void *impl)
{
    train_ffm_t *t = impl;
    return t->K <= STORE_MAX_VALUE_FLOATS && !t->worker ? &t->sync : NULL;
}

static int rows_apply(void *impl, uint64_t id, const float *d)
{
    train_ffm_t *t = impl;
    float *row = train__row_table_find(t->table, id);
    if (!row) { /* started as a step starts it (attach), in the table only if d adds */
        float fresh[2 * STORE_MAX_VALUE_FLOATS];
        memset(fresh, 0, (size_t)t->sk * sizeof *fresh);
        train__ffm_new_row(t, id, fresh);
        int rc = train__rows_add(&t->sync, id, fresh, d);
        if (rc != 0)
            return rc;
        bool created;
        if (!(row = train__row_table_upsert(t->table, id, &created)))
            return -ENOMEM;
        memcpy(row, fresh, (size_t)t->sk * sizeof *row);
    } else {
        int rc = train__rows_add(&t->sync, id, row, d);
        if (rc != 0)
            return rc;
    }
    return train__ffm_write_served(t, id, row, true); /* finite: train__rows_add checked */
}

const train__rows_ops_t train__ffm_rows_ops = {.sync = rows_sync, .apply = rows_apply};

const train_ops_t train__ffm_ops = {
    .kind = STORE_MODEL_FFM, .name = "ffm", .create = ops_create, .destroy = ops_destroy,
    .reserve = ops_reserve, .predict = ops_predict, .update = ops_update,
    .export_snapshot = ops_export, .store = ops_store, .describe = ops_describe,
    .attach_live = ops_attach_live, .update_batch = ops_update_batch, .par = &train__ffm_par_ops,
    .rows = &train__ffm_rows_ops,
};
