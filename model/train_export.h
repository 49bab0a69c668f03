/*
 * train_export.h — the export step every trainer shares: the serving row of
 * an id is K floats of its trainer state row (the prefix, but for LR-FTRL's
 * w), so an export copies those floats of every row into a fresh fp32 store
 * and writes it as a snapshot.  Internal to model/.
 */
#ifndef TL_MODEL_TRAIN_EXPORT_H
#define TL_MODEL_TRAIN_EXPORT_H

#include "row_table.h"
#include "store/store.h"

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

#endif /* TL_MODEL_TRAIN_EXPORT_H */
