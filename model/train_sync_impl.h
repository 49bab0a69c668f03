/*
 * train_sync_impl.h — what the row trainers (train_fm.c, train_ffm.c,
 * train_dnn.c) share with train_sync_rows.c for partitioned replicas
 * (train_sync.h: ROWS).  Not public: other folders include train_sync.h.
 *
 * A trainer keeps one train__rows_sync_t describing where each synced
 * coordinate's statistics sit in its state row, sets its layout at create,
 * and, on its single-threaded step path only:
 *
 *   if (s->fn) memcpy(before, row, sk floats);   before the step
 *   ... step, write the state and served rows ...
 *   if (s->fn) train__rows_note(s, id, before, row);
 *
 * Its train__rows_ops_t apply finds (or starts, as a step would) the state
 * row, calls train__rows_add and writes the row as a step writes it.
 */
#ifndef TL_MODEL_TRAIN_SYNC_IMPL_H
#define TL_MODEL_TRAIN_SYNC_IMPL_H

#include "train_sync.h"

#include <stdint.h>

#define TRAIN__ROWS_NO_G UINT32_MAX /* SGD: no accumulator, dG is 0 */

typedef struct train__rows_sync {
    train_rows_sync_fn fn; /* NULL = no hook */
    void *ctx;
    uint32_t r;            /* R: coordinates, the serving row's floats (state columns 0..R-1) */
    uint32_t g0;           /* coordinate i's accumulator G at state column g0 + i, or NO_G */
    uint32_t z;            /* 0, or coordinate 0 (w) is FTRL's: z, n at columns z, z + 1 */
    double alpha, beta, l1, l2; /* with z: FTRL's, for w (the bias: l1 = l2 = 0) */
} train__rows_sync_t;

typedef struct train__rows_ops {
    /* The trainer's descriptor, NULL when its options cannot sync. */
    train__rows_sync_t *(*sync)(void *impl);
    /* train_rows_sync_apply for this kind: 0, -ERANGE (nothing written), -ENOMEM. */
    int (*apply)(void *impl, uint64_t id, const float *d);
} train__rows_ops_t;

extern const train__rows_ops_t train__fm_rows_ops, train__ffm_rows_ops, train__dnn_rows_ops;

/* Reports a step of id's state row (before -> after, state columns) to the
 * hook as d[0..2R) (train_sync.h: ROWS).  Call only when s->fn is set.  No
 * allocation, lock or syscall. */
void train__rows_note(const train__rows_sync_t *s, uint64_t id, const float *before, const float *after);

/* Adds a peer's d[0..2R) to the state row in place (w from FTRL's closed
 * form with z).  0, or -ERANGE when a value of d or of the result is not
 * finite or an accumulator would go below 0: then nothing was written. */
int train__rows_add(const train__rows_sync_t *s, uint64_t id, float *row, const float *d);

#endif
