/*
 * train_export.h — the export step every trainer shares: the serving row of
 * an id is K floats of its trainer state row (the prefix, but for LR-FTRL's
 * w), so an export copies those floats of every row into a fresh fp32 store
 * and writes it as a snapshot.  Internal to model/.
 */
#ifndef TL_MODEL_TRAIN_EXPORT_H
#define TL_MODEL_TRAIN_EXPORT_H

#include "row_table.h"
#include "store/delta.h"
#include "store/store.h"
#include "train.h"

#include <stdint.h>

/* Writes K floats of every row of state (the trainer's store), starting at
 * float first (0 for the kinds whose serving row is the state row's prefix;
 * LR-FTRL's w sits after z and n), into dir as a snapshot of the given kind
 * with params/dense arrays x (NULL: none): rows whose K floats are all zero
 * are left out (an absent id scores as zero), and the bias row
 * (MODEL_BIAS_ID) is always present, with only its first float kept.
 * meta->model_kind is replaced by kind.  Blocks.  Returns 0, or -errno
 * with *err filled (err may be NULL): the store's (code STORE_E_NOMEM) when
 * the export store cannot be made or filled, else store_snapshot_write_ex's. */
int train__export_rows(const store_t *state, uint32_t first, uint32_t K,
                       store_model_kind_t kind, const store_extras_t *x, const char *dir,
                       const store_meta_t *meta, store_error_t *err);

/* The refusal of an export whose params (x) did not fit a snapshot's
 * extras: *err (when non-NULL) gets code STORE_E_MODEL and "dir: what";
 * returns -EINVAL. */
int train__export_refuse(const char *dir, const char *what, store_error_t *err);

/* The same (first = 0) for a trainer whose state rows live in a row table. */
int train__export_table(const train__row_table_t *rows, uint32_t K, store_model_kind_t kind,
                        const store_extras_t *x, const char *dir, const store_meta_t *meta,
                        store_error_t *err);

/* ---- deltas: what training changed since a parent version ------------------
 *
 * tltrain --export-delta OUT --parent DIR: the trainer's export (exactly
 * what train_export writes) is diffed, bit for bit, against the parent
 * version: upserts are the keys whose exported value differs from the
 * parent's or that the parent lacks, deletes the parent's keys the export
 * lacks, so that applying the delta to the parent gives the full export key
 * for key.  The parent is a full snapshot, or any version DIR =
 * "<repo>/<model>/<version>" whose chain (store_version_chain) resolves in
 * its repository.  A delta carries sparse keys only: params and dense
 * arrays (a DNN's MLP) must equal the parent's, else the delta is refused
 * and a full export is needed.  Errors use store_error_t: STORE_E_MISMATCH
 * names both sides of a layout or params mismatch, STORE_E_INVALID a
 * version not above the parent's. */

/* The cheap checks before training (manifests only): parent_dir is a full
 * version, or a version whose chain resolves, of model meta->model_name and
 * kind meta->model_kind, and meta->version is above its version (set in
 * *parent_version); out (the delta's directory) does not exist and, when
 * its name is a version number, names meta->version (a repository reader
 * refuses a directory holding another version than its name).  0, or
 * store_errc_errno(err->code) < 0 with *err filled.  Blocks (reads
 * manifests). */
int train__delta_check(const char *parent_dir, const char *out, const store_meta_t *meta,
                       uint64_t *parent_version, store_error_t *err);

/* Writes what t changed since parent_dir as the delta version meta->version
 * (parent: parent_dir's version, producer "tltrain") into out, which must
 * not exist (its parent directories are created).  full_dir: a full export
 * of t already written (tltrain --export) to diff against, or NULL: the
 * export then goes to a temporary ".tmp-tltrain-*" directory beside out,
 * removed whatever the outcome.  Loads the parent (its chain: full load +
 * delta applies) and the export, so peak memory is both models.  *upserts,
 * *deletes (may be NULL) get the counts.  0, or store_errc_errno(err->code)
 * < 0 with *err filled (refusals as train__delta_check, plus a
 * layout, params or dense-array mismatch; the store's load and write
 * errors).  Blocks. */
int train__export_delta(const train_t *t, const char *parent_dir, const char *full_dir,
                        const char *out, const store_meta_t *meta, uint64_t *upserts,
                        uint64_t *deletes, store_error_t *err);

#endif /* TL_MODEL_TRAIN_EXPORT_H */
