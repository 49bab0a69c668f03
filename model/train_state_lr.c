/*
 * train_state_lr.c — LR's part of train_state_put (train_state.c): LR
 * caches its bias's row in the trainer, which its hot path reads instead
 * of the store's copy, and mirrors the store in a row table while it
 * trains on threads; a put must refresh the one and mark the other stale,
 * as a step does.  Apart from train_state.c only because train_lr_impl.h
 * and train_fm_impl.h cannot share a file.
 *
 * THREAD SAFETY: the trainer's one writer.
 */
#include "train_lr_impl.h"
#include "train_state_impl.h"

#include <string.h>

int train__lr_state_put(void *impl, uint64_t id, const float *row)
{
    train_lr_t *lr = impl;
    int rc = store_upsert(lr->store, id, row);
    if (rc < 0)
        return rc;
    lr->rows_stale = true;
    if (id == MODEL_BIAS_ID)
        memcpy(lr->bias, row, (size_t)lr->k * sizeof *row); /* k <= 3 */
    return 0;
}
