/*
 * train_state_impl.h — what train_state.c needs from LR's private struct,
 * kept in train_state_lr.c because train_lr_impl.h and train_fm_impl.h
 * cannot share a translation unit (each has its own static step()).
 * Library-private.
 */
#ifndef TL_MODEL_TRAIN_STATE_IMPL_H
#define TL_MODEL_TRAIN_STATE_IMPL_H

#include <stdint.h>

/* train_state_put of one LR row: the state store, the bias's cached row
 * when id is MODEL_BIAS_ID, the threads' mirror marked stale.  0 or
 * store_upsert's -errno. */
int train__lr_state_put(void *lr, uint64_t id, const float *row);

#endif
