/*
 * train_export.c — train__export_rows / train__export_table (train_export.h):
 * the export step of every kind: one fp32 store the size of the trainer's
 * state, filled with each row's served floats by visiting its rows (a
 * store's shards or a row table), then store_snapshot_write_ex; and
 * train__export_refuse, the one refusal when a kind's params do not fit.
 * Cold code: it runs once per export.
 */
#include "train_export.h"
#include "model.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

struct export_ctx {
    uint32_t first; /* of the served floats in a state row */
    uint32_t K;
    store_t *out;
    int rc;
};

static int export_row(void *ctx, uint64_t key, const float *value)
{
    struct export_ctx *c = ctx;
    float row[STORE_MAX_VALUE_FLOATS];
    bool zero = true;
    value += c->first;
    for (uint32_t i = 0; i < c->K; i++) {
        row[i] = value[i];
        zero = zero && value[i] == 0;
    }
    if (key == MODEL_BIAS_ID)
        memset(row + 1, 0, (size_t)(c->K - 1) * sizeof *row); /* the bias is one float */
    else if (zero)
        return 0; /* absent scores as 0: same sums, smaller snapshot */
    int rc = store_upsert(c->out, key, row);
    if (rc < 0) {
        c->rc = rc;
        return 1;
    }
    return 0;
}

/* Calls fn for every row of the trainer's state: a store's shards or a
 * row table. */
struct source {
    const store_t *store;
    const train__row_table_t *table;
};

static void visit_all(const struct source *src, struct export_ctx *c)
{
    if (src->table) {
        train__row_table_foreach(src->table, export_row, c);
        return;
    }
    for (uint32_t s = 0; s < store_shards(src->store) && c->rc == 0; s++)
        store_foreach(src->store, s, export_row, c);
}

static int export_from(const struct source *src, uint32_t shards, uint64_t count, uint32_t first,
                       uint32_t K, store_model_kind_t kind, const store_extras_t *x,
                       const char *dir, const store_meta_t *meta, store_error_t *err)
{
    store_error_t local;
    if (!err)
        err = &local;
    memset(err, 0, sizeof *err);
    err->offset = -1;
    store_options_t so = {
        .value_floats = K, .dtype = STORE_DTYPE_F32, .shards = shards, .expected_keys = count + 1};
    struct export_ctx c = {.first = first, .K = K, .rc = 0};
    int rc = store_create(&so, &c.out);
    if (rc != 0) {
        err->code = STORE_E_NOMEM;
        snprintf(err->msg, sizeof err->msg, "%s: cannot create the export store: %s", dir,
                 strerror(-rc));
        return rc;
    }
    float bias[STORE_MAX_VALUE_FLOATS] = {0};
    rc = store_upsert(c.out, MODEL_BIAS_ID, bias); /* present even when never trained */
    if (rc < 0)
        c.rc = rc;
    if (c.rc == 0)
        visit_all(src, &c);
    if (c.rc != 0) {
        store_destroy(c.out);
        err->code = STORE_E_NOMEM;
        snprintf(err->msg, sizeof err->msg, "%s: export store full: %s", dir, strerror(-c.rc));
        return c.rc;
    }
    store_meta_t m = *meta;
    m.model_kind = kind;
    rc = store_snapshot_write_ex(c.out, dir, &m, x, err);
    store_destroy(c.out);
    return rc; /* 0 or the store's -errno */
}

__attribute__((cold)) int train__export_refuse(const char *dir, const char *what,
                                               store_error_t *err)
{
    if (err) {
        memset(err, 0, sizeof *err);
        err->offset = -1;
        err->code = STORE_E_MODEL;
        snprintf(err->msg, sizeof err->msg, "%s: %s", dir, what);
    }
    return -EINVAL;
}

int train__export_rows(const store_t *state, uint32_t first, uint32_t K, store_model_kind_t kind,
                       const store_extras_t *x, const char *dir, const store_meta_t *meta,
                       store_error_t *err)
{
    const struct source src = {.store = state};
    return export_from(&src, store_shards(state), store_count(state), first, K, kind, x, dir, meta,
                       err);
}

int train__export_table(const train__row_table_t *rows, uint32_t K, store_model_kind_t kind,
                        const store_extras_t *x, const char *dir, const store_meta_t *meta,
                        store_error_t *err)
{
    const struct source src = {.table = rows};
    return export_from(&src, 0, train__row_table_count(rows), 0, K, kind, x, dir, meta, err);
}
