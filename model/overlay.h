/*
 * overlay.h — a delta served without copying the model: a small immutable
 * table of (key -> K floats, or deleted) that lookups consult after the base
 * store, and the model versions made of a base plus overlays.
 *
 * A delta of 1% of a 100M-key model must go live in well under a second, in
 * memory that grows with the delta, and every request must see exactly one
 * version.  Rebuilding the model (load the parent, apply the delta) costs the
 * whole model twice; writing the delta into the live store key by key lets a
 * request mix versions.  So a version is
 *
 *     base store (shared, refcounted)  +  overlays[0..n)  (first match wins)
 *
 * A delta becomes one overlay on top of its parent's base: building it costs
 * the delta, swapping it in is a pointer exchange, and requests pinned to the
 * parent still read the parent (the base is unchanged).  Afterwards a
 * background FOLD writes the overlays into the base so lookups are one probe
 * again:
 *
 *   1. undo = the base's current values of every overlay key (deleted where
 *      absent): model_fold_undo;
 *   2. every other version sharing the base gets undo appended to its
 *      overlays (model_derive), so its values no longer depend on the keys
 *      about to be written; the old handles drain (the server waits until the
 *      base's sharers are exactly the new ones: model_base_sharers);
 *   3. the overlays are written into the base (model_fold_write): readers of
 *      the active version see the overlay's value for every written key, so
 *      a request may see any mix of folded and unfolded keys and still gets
 *      the same floats;
 *   4. the active version is replaced by one with no overlays.
 *
 * Folding changes no value any version returns.  Memory: the overlay and the
 * undo, each about 1.4x the delta's keys and values, plus the base's growth
 * for keys the delta adds; while an overlay is built, its records are staged
 * once more (the largest delta's keys and values), so the build can fill
 * the table one L2-sized slot range at a time.
 *
 * THREAD SAFETY
 *   An overlay is written by its builder alone (model_overlay_put), then
 *   published and immutable: any number of threads read it.  References
 *   (model_overlay_ref/unref) are atomic.  model_fold_write needs the base's
 *   writer rules (store.h: one writer) and the drain of step 2.
 */
#ifndef TL_MODEL_OVERLAY_H
#define TL_MODEL_OVERLAY_H

#include "model.h"
#include "store/delta.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Overlays one version may stack (new deltas on a rolled-back version, undos
 * of several folds on a kept one); past it a delta is rebuilt in full. */
#define MODEL_OVERLAYS_MAX 8

typedef struct model_overlay model_overlay_t; /* opaque, refcounted */

/* ---- the table ---------------------------------------------------------------- */

/* An empty overlay for up to max_keys distinct keys of K floats (the caller
 * counts them: a delta's upserts + deletes).  One reference, the caller's.
 * Returns 0 or -ENOMEM / -EINVAL (K 0 or past STORE_MAX_VALUE_FLOATS). */
int model_overlay_create(uint32_t K, uint64_t max_keys, model_overlay_t **out);

/* Records key -> value (K floats), or a delete when value is NULL; a key put
 * again is overwritten.  Returns 1 new key, 0 overwritten, -ENOSPC past
 * max_keys.  Builder only, before the overlay is shared. */
int model_overlay_put(model_overlay_t *o, uint64_t key, const float *value);

/* model_overlay_put for n keys, with the table's lines prefetched a group
 * ahead (a delta's keys land at random slots): key i -> values[i*K..], or a
 * delete when deleted[i].  0 or -ENOSPC (the keys before the one that did
 * not fit are in). */
int model_overlay_put_batch(model_overlay_t *o, const uint64_t *keys, size_t n,
                            const float *values, const uint8_t *deleted);

/* One key: 1 and out[0..K) filled when o holds a value, 2 when o deletes it
 * (out untouched), 0 when o says nothing of it. */
int model_overlay_get(const model_overlay_t *o, uint64_t key, float *out);

/* For each keys[i] that o holds: its value into out[i*K..] and found[i] = 1;
 * a deleted key gets K zeros and found[i] = 0; other rows are untouched
 * (found may be NULL).  Prefetches across the batch.  Never allocates. */
void model_overlay_lookup(const model_overlay_t *o, const uint64_t *keys, size_t n, float *out,
                          uint8_t *found);

/* Calls fn(ctx, key, value or NULL for a delete) for every entry, in table
 * order; stops at and returns fn's first non-zero value. */
typedef int (*model_overlay_fn)(void *ctx, uint64_t key, const float *value);
int model_overlay_foreach(const model_overlay_t *o, model_overlay_fn fn, void *ctx);

uint64_t model_overlay_count(const model_overlay_t *o);   /* entries (values + deletes) */
uint64_t model_overlay_deletes(const model_overlay_t *o); /* of which deletes */
size_t model_overlay_bytes(const model_overlay_t *o);     /* memory held */
uint32_t model_overlay_value_floats(const model_overlay_t *o);

model_overlay_t *model_overlay_ref(model_overlay_t *o); /* returns o; NULL-safe */
void model_overlay_unref(model_overlay_t *o);           /* frees at 0; NULL-safe */

/* ---- versions made of a base and overlays ----------------------------------------- */

/* A new version over m's base (and extras) with exactly the overlays ov[0..n)
 * (n <= MODEL_OVERLAYS_MAX; each gets a reference), meta *meta (NULL: m's)
 * and key count keys.  0, -EINVAL, -ENOMEM. */
int model_derive(const model_t *m, const store_meta_t *meta, model_overlay_t *const *ov,
                 uint32_t n, uint64_t keys, model_t **out);

/* Version v = parent + the deltas d[0..n) in order (d[0]'s parent is parent's
 * version, each next one's the previous one's), as one new overlay on top of
 * parent's overlays.  Refused (STORE_E_MISMATCH, nothing built): a delta of
 * another model name, kind, K, dtype or shard count, a broken parent link, a
 * delete of a key the version it applies to does not hold, too many
 * overlays.  The result's meta is the last delta's version and created time
 * over parent's meta.  Returns 0 or store_errc_errno(err->code) < 0.
 * Blocks for the work (about 0.1 s a million LR keys); runs helper threads
 * (one faulting the new table's memory in, one answering the parent's
 * presence while the caller fills the table) and joins them before
 * returning. */
int model_apply_deltas(const model_t *parent, store_delta_t *const *d, uint32_t n, model_t **out,
                       store_error_t *err);

uint32_t model_overlays(const model_t *m, model_overlay_t **ov); /* count; ov may be NULL */
int model_same_base(const model_t *a, const model_t *b);
/* 1 when a and b serve the same weights by construction: one base seen
 * through the same overlays (a version relabelled, e.g. an online export
 * of the live store), so a score of one is the other's. */
int model_same_weights(const model_t *a, const model_t *b);
uint32_t model_base_sharers(const model_t *m); /* versions alive on m's base */

/* Step 1 of the fold: the undo overlay (base values of every key of m's
 * overlays, deleted where the base lacks it).  0, -ENOMEM.  Blocks; like
 * model_apply_deltas, runs one helper thread that faults the table in. */
int model_fold_undo(const model_t *m, model_overlay_t **undo);

/* Step 3: writes m's overlays into its base (lowest priority first, so the
 * first overlay's value wins), on up to `threads` threads, each the one
 * writer of its shards.  -ENOMEM leaves the base partly written, which is
 * harmless while every sharer still has the undo or the overlays. */
int model_fold_write(const model_t *m, int threads);

/* Step 3 in two passes, for a caller that runs them at different
 * priorities (fold_write.c says why it is safe).  model_fold_overwrite
 * writes the overlay's values of the keys the base holds, without the
 * base's version changes: no reader ever waits for it.  It leaves the rest
 * (the keys the base lacks, the deletes) in *rest, which model_fold_rest
 * writes (readers wait for those writes).  Together: the base
 * model_fold_write leaves.  With more than one overlay the first writes
 * nothing and the second everything.  Threads and errors as
 * model_fold_write; *rest is the caller's to free (model_fold_rest_free). */
typedef struct model_fold_rest model_fold_rest_t;
int model_fold_overwrite(const model_t *m, int threads, model_fold_rest_t **rest);
int model_fold_rest(const model_t *m, const model_fold_rest_t *rest);
uint64_t model_fold_rest_count(const model_fold_rest_t *rest); /* operations left */
void model_fold_rest_free(model_fold_rest_t *rest);

#ifdef __cplusplus
}
#endif
#endif /* TL_MODEL_OVERLAY_H */
