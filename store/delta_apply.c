/*
 * delta_apply.c — deltas against loaded stores: applying one in place
 * (store_delta_apply: tests, tlsnap compact, a restart that replays a
 * chain) and producing one as the exact difference of two stores
 * (store_delta_diff: tlsnap diff).
 *
 * APPLY checks everything that can refuse the delta before it changes a
 * key: the parent version, the layout (model name and kind, K, dtype,
 * shards; not the hash seed, which delta.h explains), and that every deleted key is
 * present (a delete of an absent key means the delta was made against
 * something else).  Only an allocation failure can stop it halfway; that is
 * reported as such and the store must be discarded.  Serving does not use
 * this path: it needs a request to see exactly one version, which an
 * in-place apply cannot give (see delta.h).
 *
 * DIFF iterates NEW's shards and looks each key up in OLD (an upsert when
 * absent or when any value bit differs, -0.0 vs 0.0 included), then OLD's
 * shards against NEW (a delete when absent), feeding a delta writer; it
 * costs one lookup per key of each store and memory for the difference.
 *
 * THREAD SAFETY: store_delta_apply is a writer of every shard of s;
 * store_delta_diff reads both stores (no writer may run on them).
 */
#include "delta_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void store_delta_layout_of(const store_t *s, const store_meta_t *meta, store_delta_layout_t *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->model_name, sizeof out->model_name, "%.63s", meta->model_name);
    out->model_kind = meta->model_kind;
    out->value_floats = store_value_floats(s);
    out->dtype = store_dtype(s);
    out->shards = store_shards(s);
    out->hash_seed = store_hash_seed(s);
}

/* ---- apply ---------------------------------------------------------------- */

struct apply_ctx {
    store_t *s;
    float *scratch;      /* K floats for presence lookups */
    uint64_t missing;    /* out: the first deleted key the store lacks */
    int rc;              /* first store error */
};

static int check_present(void *ctx, uint64_t key)
{
    struct apply_ctx *a = ctx;
    if (store_lookup(a->s, key, a->scratch))
        return 0;
    a->missing = key;
    return 1;
}

static int do_upsert(void *ctx, uint64_t key, const float *value)
{
    struct apply_ctx *a = ctx;
    int rc = store_upsert(a->s, key, value);
    if (rc < 0) {
        a->rc = rc;
        return 1;
    }
    return 0;
}

static int do_delete(void *ctx, uint64_t key)
{
    struct apply_ctx *a = ctx;
    store_delete(a->s, key);
    return 0;
}

int store_delta_apply(store_t *s, store_meta_t *meta, const store_delta_t *d,
                      store_error_t *err)
{
    store_error_t scratch;
    if (!err)
        err = &scratch;
    store__snap_err_clear(err);
    if (!s || !meta || !d) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "store_delta_apply: a NULL argument");
        return store_errc_errno(err->code);
    }
    const store_delta_info_t *in = &d->info;
    if (in->meta.parent_version != meta->version) {
        store__snap_fail(err, STORE_E_MISMATCH, MANIFEST_FILE_NAME, -1,
                         "delta %" PRIu64 " is against version %" PRIu64
                         ", the store holds version %" PRIu64,
                         in->meta.version, in->meta.parent_version, meta->version);
        return store_errc_errno(err->code);
    }
    store_delta_layout_t have;
    store_delta_layout_of(s, meta, &have);
    char why[256];
    if (store__delta_layout_diff(&in->layout, &have, why, sizeof why) != 0) {
        store__snap_fail(err, STORE_E_MISMATCH, MANIFEST_FILE_NAME, -1,
                         "delta %" PRIu64 " does not fit the store (delta vs store): %s",
                         in->meta.version, why);
        return store_errc_errno(err->code);
    }
    float buf[STORE_MAX_VALUE_FLOATS];
    struct apply_ctx a = {.s = s, .scratch = buf};
    for (uint32_t i = 0; i < have.shards; i++) {
        if (store_delta_foreach(d, i, NULL, check_present, &a) != 0) {
            char file[64];
            snprintf(file, sizeof file, DELTA_SHARD_NAME_FMT, i);
            store__snap_fail(err, STORE_E_MISMATCH, file, -1,
                             "deletes key 0x%" PRIx64 ", which version %" PRIu64
                             " does not hold",
                             a.missing, meta->version);
            return store_errc_errno(err->code);
        }
    }
    for (uint32_t i = 0; i < have.shards; i++) {
        if (store_delta_foreach(d, i, do_upsert, do_delete, &a) != 0) {
            store__snap_fail(err, STORE_E_NOMEM, "", -1,
                             "shard %" PRIu32 " could not grow (%s): the store is partly "
                             "updated, discard it",
                             i, ERRTEXT(-a.rc));
            return store_errc_errno(err->code);
        }
    }
    meta->version = in->meta.version;
    meta->created_unix = in->meta.created_unix;
    meta->parent_version = 0;
    return 0;
}

/* ---- diff ----------------------------------------------------------------- */

struct diff_ctx {
    const store_t *other;   /* the store the keys are looked up in */
    store_delta_writer_t *w;
    uint32_t K;
    float *got;             /* K floats */
    uint64_t count;         /* out: upserts or deletes made */
    int rc;                 /* first writer error */
};

static int diff_new_key(void *ctx, uint64_t key, const float *value)
{
    struct diff_ctx *c = ctx;
    if (store_lookup(c->other, key, c->got) &&
        memcmp(c->got, value, (size_t)c->K * sizeof(float)) == 0)
        return 0;
    c->count++;
    c->rc = store_delta_put(c->w, key, value);
    return c->rc != 0;
}

static int diff_old_key(void *ctx, uint64_t key, const float *value)
{
    (void)value;
    struct diff_ctx *c = ctx;
    if (store_lookup(c->other, key, c->got))
        return 0;
    c->count++;
    c->rc = store_delta_del(c->w, key);
    return c->rc != 0;
}

int store_delta_diff(const store_t *old_s, const store_meta_t *old_meta, const store_t *new_s,
                     const store_meta_t *new_meta, const char *dir, const char *producer,
                     uint64_t *upserts, uint64_t *deletes, store_error_t *err)
{
    store_error_t scratch;
    if (!err)
        err = &scratch;
    store__snap_err_clear(err);
    if (!old_s || !old_meta || !new_s || !new_meta || !dir) {
        store__snap_fail(err, STORE_E_INVALID, "", -1, "store_delta_diff: a NULL argument");
        return store_errc_errno(err->code);
    }
    store_delta_layout_t lo, ln;
    store_delta_layout_of(old_s, old_meta, &lo);
    store_delta_layout_of(new_s, new_meta, &ln);
    char why[256];
    if (store__delta_layout_diff(&lo, &ln, why, sizeof why) != 0) {
        store__snap_fail(err, STORE_E_MISMATCH, "", -1,
                         "OLD (version %" PRIu64 ") and NEW (version %" PRIu64
                         ") differ in layout: %s",
                         old_meta->version, new_meta->version, why);
        return store_errc_errno(err->code);
    }
    store_delta_writer_t *w = NULL;
    int rc = store_delta_begin(dir, &lo, old_meta->version, new_meta->version, producer, &w, err);
    if (rc != 0)
        return rc;
    float got[STORE_MAX_VALUE_FLOATS];
    struct diff_ctx up = {.other = old_s, .w = w, .K = lo.value_floats, .got = got};
    struct diff_ctx del = {.other = new_s, .w = w, .K = lo.value_floats, .got = got};
    for (uint32_t i = 0; i < lo.shards && up.rc == 0 && del.rc == 0; i++) {
        store_foreach(new_s, i, diff_new_key, &up);
        if (up.rc == 0)
            store_foreach(old_s, i, diff_old_key, &del);
    }
    if (up.rc != 0 || del.rc != 0) {
        int e = up.rc ? up.rc : del.rc;
        store_delta_abort(w);
        store__snap_fail(err, e == -ENOMEM ? STORE_E_NOMEM : STORE_E_VALUE, "", -1,
                         "store_delta_diff: cannot record a change: %s", ERRTEXT(-e));
        return store_errc_errno(err->code);
    }
    rc = store_delta_commit(w, err);
    if (rc == 0) {
        if (upserts)
            *upserts = up.count;
        if (deletes)
            *deletes = del.count;
    }
    return rc;
}
