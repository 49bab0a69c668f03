/*
 * train_export.c — train__export_rows / train__export_table (train_export.h):
 * the export step of every kind: one fp32 store the size of the trainer's
 * state, filled with each row's served floats by visiting its rows (a
 * store's shards or a row table), then store_snapshot_write_ex; and
 * train__export_refuse, the one refusal when a kind's params do not fit;
 * and train__export_delta, the export as a delta against a parent version
 * (tltrain --export-delta: see "deltas" below).  Cold code: it runs once
 * per export.  THREAD SAFETY: the trainer must not be updated meanwhile.
 */
#include "train_export.h"
#include "model.h"

#include "store/cli.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ---- deltas ---------------------------------------------------------------
 *
 * The simplest correct path: the full export (train_export, the very bytes
 * a --export writes) is loaded back and store_delta_diff compares it with
 * the parent, key by key and bit by bit.  A direct path (diffing the
 * trainer's rows without writing them) would save one write and one load,
 * but each kind builds its export inside its own export op, and a second
 * route to the served values is a second place for them to disagree. */

#define PATH_MAX_LEN 4096

/* Where a parent version comes from: a full snapshot directory (chain ==
 * NULL), or a chain of versions inside model_dir. */
struct parent_src {
    const char *dir;                  /* as given */
    char model_dir[PATH_MAX_LEN];     /* dir's parent, for a chain */
    store_chain_t *chain;             /* heap (~32 KiB); NULL: dir is loaded as a full one */
    store_meta_t head;                /* the full version's manifest: name, kind */
    uint64_t version;                 /* the parent's version (the chain's last link) */
};

static void parent_src_free(struct parent_src *p)
{
    free(p->chain);
    p->chain = NULL;
}

/* Splits dir into model_dir and the last component; 1 when that component
 * names a version (store_version_parse), else 0. */
static int split_version_dir(const char *dir, char *model_dir, size_t len, uint64_t *version)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/')
        b--;
    char base[32];
    if (n - b == 0 || n - b >= sizeof base || b >= len)
        return 0;
    memcpy(base, dir + b, n - b);
    base[n - b] = '\0';
    if (!store_version_parse(base, version))
        return 0;
    size_t m = b;
    while (m > 1 && dir[m - 1] == '/')
        m--; /* "repo/lr//1": the model dir is "repo/lr" ("/1": "/") */
    if (b == 0) {
        snprintf(model_dir, len, ".");
    } else {
        memcpy(model_dir, dir, m);
        model_dir[m] = '\0';
    }
    return 1;
}

/* Resolves dir: through its repository's chain when its name is a version
 * and the chain resolves, else as a full snapshot (whose error, a delta's
 * "not a full snapshot" included, is the one reported, with the
 * chain's reason appended).  Reads manifests only.  0 or -errno (*err). */
static int parent_resolve(const char *dir, struct parent_src *p, store_error_t *err)
{
    memset(p, 0, sizeof *p);
    p->dir = dir;
    uint64_t v;
    char chain_why[200] = "";
    if (split_version_dir(dir, p->model_dir, sizeof p->model_dir, &v)) {
        p->chain = malloc(sizeof *p->chain);
        if (!p->chain)
            return store_error_set(err, STORE_E_NOMEM, "%s: out of memory", dir);
        if (store_version_chain(p->model_dir, v, p->chain, err) == 0) {
            char head[PATH_MAX_LEN + 32];
            snprintf(head, sizeof head, "%s/%" PRIu64, p->model_dir, p->chain->versions[0]);
            uint64_t entries;
            int rc = store_snapshot_read_meta(head, &p->head, &entries, err);
            if (rc != 0) {
                parent_src_free(p);
                return rc;
            }
            p->version = v;
            return 0;
        }
        snprintf(chain_why, sizeof chain_why, " (as a chain: %.160s)", err->msg);
        parent_src_free(p);
    }
    uint64_t entries;
    int rc = store_snapshot_read_meta(dir, &p->head, &entries, err);
    if (rc != 0) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "parent %.100s: %.200s%s", dir, err->msg, chain_why);
        memcpy(err->msg, msg, sizeof msg);
        return rc;
    }
    p->version = p->head.version;
    return 0;
}

/* The refusals a manifest can tell: another model or kind, a version not
 * above the parent's. */
static int parent_check(const struct parent_src *p, const store_meta_t *meta, store_error_t *err)
{
    if (strcmp(p->head.model_name, meta->model_name) != 0 ||
        p->head.model_kind != meta->model_kind)
        return store_error_set(err, STORE_E_MISMATCH,
                    "parent %s is model %s (%s) but this export is model %s (%s)", p->dir,
                    p->head.model_name, store_model_kind_name(p->head.model_kind),
                    meta->model_name, store_model_kind_name(meta->model_kind));
    if (meta->version <= p->version)
        return store_error_set(err, STORE_E_INVALID,
                    "--version %" PRIu64 " must be above the parent's version %" PRIu64
                    " (%s)",
                    meta->version, p->version, p->dir);
    return 0;
}

int train__delta_check(const char *parent_dir, const char *out, const store_meta_t *meta,
                       uint64_t *parent_version, store_error_t *err)
{
    store_error_t local;
    if (!err)
        err = &local;
    struct parent_src p;
    int rc = parent_resolve(parent_dir, &p, err);
    if (rc != 0)
        return rc;
    rc = parent_check(&p, meta, err);
    parent_src_free(&p);
    if (rc != 0)
        return rc;
    char scratch[PATH_MAX_LEN];
    uint64_t named;
    if (split_version_dir(out, scratch, sizeof scratch, &named) && named != meta->version)
        return store_error_set(err, STORE_E_INVALID,
                    "%s is named version %" PRIu64 " but --version is %" PRIu64
                    ": a repository refuses a directory holding another version than its name",
                    out, named, meta->version);
    struct stat st;
    if (stat(out, &st) == 0)
        return store_error_set(err, STORE_E_EXISTS, "%s already exists", out);
    if (parent_version)
        *parent_version = p.version;
    return 0;
}

/* Loads the parent: its full version (with its extras, which deltas never
 * change), then each delta of the chain applied in order.  0 or -errno. */
static int parent_load(const struct parent_src *p, store_t **out, store_meta_t *m,
                       store_extras_t *x, store_error_t *err)
{
    if (!p->chain)
        return store_snapshot_load_ex(p->dir, 0, out, m, x, err);
    char path[PATH_MAX_LEN + 32];
    snprintf(path, sizeof path, "%s/%" PRIu64, p->model_dir, p->chain->versions[0]);
    int rc = store_snapshot_load_ex(path, 0, out, m, x, err);
    for (uint32_t i = 1; i < p->chain->n && rc == 0; i++) {
        snprintf(path, sizeof path, "%s/%" PRIu64, p->model_dir, p->chain->versions[i]);
        store_delta_t *d = NULL;
        rc = store_delta_open(path, &d, err);
        if (rc == 0)
            rc = store_delta_apply(*out, m, d, err);
        store_delta_close(d);
    }
    if (rc != 0 && *out) {
        store_destroy(*out);
        *out = NULL;
        store_extras_free(x);
    }
    return rc;
}

static const char *dtype_name(store_dtype_t d)
{
    return d == STORE_DTYPE_F32 ? "f32" : d == STORE_DTYPE_F16 ? "f16" : "?";
}

/* Refuses (STORE_E_MISMATCH, both sides named) an export whose layout,
 * params or dense arrays differ from the parent's: a delta carries sparse
 * keys only. */
static int export_matches(const char *pdir, const store_t *ps, const store_meta_t *pm,
                          const store_extras_t *px, const store_t *es, const store_meta_t *em,
                          const store_extras_t *ex, store_error_t *err)
{
    store_delta_layout_t a, b;
    store_delta_layout_of(ps, pm, &a);
    store_delta_layout_of(es, em, &b);
    if (strcmp(a.model_name, b.model_name) != 0 || a.model_kind != b.model_kind ||
        a.value_floats != b.value_floats || a.dtype != b.dtype || a.shards != b.shards)
        return store_error_set(err, STORE_E_MISMATCH,
                    "parent %s is model %s (%s, K=%u, %s, %u shards) but this export is "
                    "model %s (%s, K=%u, %s, %u shards)",
                    pdir, a.model_name, store_model_kind_name(a.model_kind), a.value_floats,
                    dtype_name(a.dtype), a.shards, b.model_name,
                    store_model_kind_name(b.model_kind), b.value_floats, dtype_name(b.dtype),
                    b.shards);
    for (int side = 0; side < 2; side++) { /* each side's params found, equal, in the other */
        const store_extras_t *from = side ? px : ex, *other = side ? ex : px;
        for (uint32_t i = 0; i < from->n_params; i++) {
            const char *v = store_extras_get(other, from->params[i].key);
            if (v && strcmp(v, from->params[i].value) == 0)
                continue;
            const char *pv = side ? from->params[i].value : v;
            const char *ev = side ? v : from->params[i].value;
            return store_error_set(err, STORE_E_MISMATCH,
                        "param %s is %s%s%s in parent %s but %s%s%s in this export: a delta "
                        "carries sparse keys only; write a full version (--export)",
                        from->params[i].key, pv ? "\"" : "", pv ? pv : "absent", pv ? "\"" : "",
                        pdir, ev ? "\"" : "", ev ? ev : "absent", ev ? "\"" : "");
        }
        for (uint32_t i = 0; i < from->n_dense; i++) {
            const store_dense_t *d = store_extras_dense(other, from->dense[i].name);
            if (d && d->count == from->dense[i].count &&
                memcmp(d->data, from->dense[i].data, d->count * sizeof(float)) == 0)
                continue;
            return store_error_set(err, STORE_E_MISMATCH,
                        "dense array %s %s between parent %s and this export: a delta carries "
                        "sparse keys only (a DNN's MLP cannot be in one); write a full version "
                        "(--export)",
                        from->dense[i].name, d ? "differs" : "is in only one", pdir);
        }
    }
    return 0;
}

/* Removes a snapshot directory (flat: shard, dense and MANIFEST files). */
static void remove_flat_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, ".."))
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
}

int train__export_delta(const train_t *t, const char *parent_dir, const char *full_dir,
                        const char *out, const store_meta_t *meta, uint64_t *upserts,
                        uint64_t *deletes, store_error_t *err)
{
    store_error_t local;
    if (!err)
        err = &local;
    struct parent_src p;
    store_t *ps = NULL, *es = NULL;
    store_meta_t pm, em;
    store_extras_t px, ex;
    memset(&px, 0, sizeof px);
    memset(&ex, 0, sizeof ex);
    char tmp[PATH_MAX_LEN + 64] = "";
    int rc = parent_resolve(parent_dir, &p, err);
    if (rc != 0)
        return rc;
    rc = parent_check(&p, meta, err);
    if (rc != 0)
        goto out;
    rc = store_cli_mkdir_parents(out, NULL);
    if (rc != 0) {
        rc = store_error_set(err, STORE_E_IO, "%s: cannot create its parent directories: %s", out,
                  strerror(-rc));
        goto out;
    }
    if (!full_dir) {
        /* beside out, so that a repository's readers skip it (".tmp-") */
        size_t n = strlen(out);
        while (n > 1 && out[n - 1] == '/')
            n--;
        size_t b = n;
        while (b > 0 && out[b - 1] != '/')
            b--;
        if (b >= PATH_MAX_LEN) {
            rc = store_error_set(err, STORE_E_INVALID, "%s: path too long", out);
            goto out;
        }
        snprintf(tmp, sizeof tmp, "%.*s.tmp-tltrain-%" PRIu64 "-%ld", (int)b, out,
                 meta->version, (long)getpid());
        rc = train_export(t, tmp, meta, err);
        if (rc != 0)
            goto out;
        full_dir = tmp;
    }
    rc = store_snapshot_load_ex(full_dir, 0, &es, &em, &ex, err);
    if (rc == 0)
        rc = parent_load(&p, &ps, &pm, &px, err);
    if (rc == 0)
        rc = export_matches(parent_dir, ps, &pm, &px, es, &em, &ex, err);
    if (rc == 0)
        rc = store_delta_diff(ps, &pm, es, &em, out, "tltrain", upserts, deletes, err);
out:
    if (tmp[0])
        remove_flat_dir(tmp);
    store_extras_free(&px);
    store_extras_free(&ex);
    store_destroy(ps);
    store_destroy(es);
    parent_src_free(&p);
    return rc;
}
