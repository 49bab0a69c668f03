/*
 * online_export_full.c — FULL EXPORTS (online_export.c's design comment):
 * the full version an export writes every --online-full-every links, and
 * the chain length that decides it.  A full version is the snapshot
 * writer's (store_snapshot_publish): the job's rows go into a store of the
 * live one's layout on the export thread, no lock the trainer or the
 * workers wait for held.
 */
#define _GNU_SOURCE
#include "online_export_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define G online__G

/* The chain length past which an export is FULL: --online-full-every,
 * and never past half of STORE_CHAIN_MAX whatever the setting. */
uint32_t online__export_full_every(void)
{
    int every = G.srv->cfg.online_full_every;
    uint32_t n = every > 0 ? (uint32_t)every : 1;
    return n < STORE_CHAIN_MAX / 2 ? n : STORE_CHAIN_MAX / 2;
}

/* j->x := x, the dense arrays copied into j->dense (the trainer may write
 * them once the writer lock is released).  0 or -ENOMEM (j->x empty). */
int online__export_copy_extras(struct export_job *j, const store_extras_t *x)
{
    memset(&j->x, 0, sizeof j->x);
    if (!x)
        return 0;
    size_t total = 0;
    for (uint32_t i = 0; i < x->n_dense; i++)
        total += x->dense[i].count;
    if (total > j->dense_cap) {
        float *d = malloc(total * sizeof *d);
        if (!d)
            return -ENOMEM;
        free(j->dense);
        j->dense = d;
        j->dense_cap = total;
    }
    j->x = *x;
    size_t at = 0;
    for (uint32_t i = 0; i < x->n_dense; i++) {
        memcpy(j->dense + at, x->dense[i].data, x->dense[i].count * sizeof *j->dense);
        j->x.dense[i].data = j->dense + at;
        at += x->dense[i].count;
    }
    return 0;
}

/* Writes job j as the full version dir (FULL EXPORTS): its rows into a
 * store of the live one's layout, published with the producer and the
 * side files by the snapshot writer.  0 or -errno with *err. */
int online__export_write_full(struct export_job *j, const char *dir, uint64_t version,
                              const char *producer, store_snapshot_side_fn side,
                              store_error_t *err)
{
    store_options_t o = {.value_floats = j->K, .dtype = j->layout.dtype,
                         .shards = j->layout.shards, .expected_keys = j->n,
                         .hash_seed = j->layout.hash_seed};
    store_t *s = NULL;
    int rc = store_create(&o, &s);
    if (rc != 0)
        return store_error_set(err, rc == -ENOMEM ? STORE_E_NOMEM : STORE_E_INVALID,
                               "cannot create a store of %zu keys for the full version: %s",
                               j->n, strerror(-rc));
    enum { BATCH = 4096 };
    for (size_t i = 0; rc >= 0 && i < j->n; i += BATCH) /* the number of new keys, or -ENOMEM */
        rc = store_upsert_batch(s, j->keys + i, j->vals + i * j->K,
                                j->n - i < BATCH ? j->n - i : BATCH);
    if (rc < 0) {
        store_destroy(s);
        return store_error_set(err, STORE_E_NOMEM, "no memory to gather %zu keys for the full "
                               "version", j->n);
    }
    store_meta_t meta = j->meta;
    meta.version = version;
    meta.parent_version = 0; /* a full version has none; the log line names the lineage */
    meta.created_unix = 0;
    j->sh.version = version;
    rc = store_snapshot_publish(s, dir, &meta, &j->x, producer,
                                j->has_state || j->nfm ? side : NULL, j, err);
    store_destroy(s);
    return rc;
}

/* After an export of version went live (e->commit held): the chain's
 * length, which the next hand-over reads to decide a full export.  The
 * first export of a lineage reads it from the repository once. */
void online__export_note_links(struct online_export *e, bool full, uint64_t version)
{
    if (full) {
        e->links = 0;
        e->links_known = true;
    } else if (e->links_known) {
        e->links++;
    } else {
        store_chain_t *ch = malloc(sizeof *ch);
        /* a chain that does not resolve (too long, or no memory): the next one is full */
        e->links = ch && store_version_chain(e->model_dir, version, ch, NULL) == 0
                       ? ch->n - 1
                       : STORE_CHAIN_MAX;
        e->links_known = true;
        free(ch);
    }
}
