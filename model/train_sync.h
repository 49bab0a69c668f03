/*
 * train_sync.h — what partitioned replicas need from an LR-FTRL trainer
 * (server/online_sync.c): each step's additive statistics out, and peers'
 * statistics in.
 *
 * FTRL's per-coordinate state is [z | n | w] with w a closed form of (z, n)
 * (train_lr.c).  A step changes z by dz and n by dn; both are sums over the
 * samples seen, so replicas that exchange (dz, dn) and add them hold, once
 * every increment has arrived, the same z and n whatever the order of
 * arrival (float rounding of the sums aside), and so the same w.  dn >= 0
 * always (a sum of squared gradients).
 *
 * THREAD SAFETY
 *   Both calls belong to the trainer's one writer (train.h): the hook runs
 *   on the thread that calls train_update, and train_lr_sync_apply must be
 *   called under the same exclusion as train_update (the server: the
 *   model's writer lock).
 */
#ifndef TL_MODEL_TRAIN_SYNC_H
#define TL_MODEL_TRAIN_SYNC_H

#include "train.h"

#include <stdint.h>

/* Called once per coordinate a step wrote (the bias included, under
 * MODEL_BIAS_ID), after the write, with the step's dz and dn.  Must not
 * block or allocate: it runs on the training hot path. */
typedef void (*train_sync_fn)(void *ctx, uint64_t id, float dz, float dn);

/* Installs fn (NULL removes it).  0, or -ENOTSUP when t is not LR with
 * FTRL (the only trainer whose statistics are additive today). */
int train_lr_sync_hook(train_t *t, train_sync_fn fn, void *ctx);

/* Adds a peer's (dz, dn) to id's state: z += dz, n += dn, w recomputed
 * from the closed form, the row written to the state and, when attached,
 * w to the live store (an id the state lacks starts as a step would start
 * it: from the live weight).  The hook is NOT called (a peer's increment is
 * not this replica's to send).  0; -ENOTSUP (not LR-FTRL); -ERANGE when a
 * value or the result is not finite or n would go below 0 (nothing
 * written); -ENOMEM from the stores. */
int train_lr_sync_apply(train_t *t, uint64_t id, float dz, float dn);

/* FTRL's weight of (z, n) with the trainer's alpha, beta and l1, l2 (0 for
 * the bias): what train_lr_sync_apply writes.  Exposed for the tests. */
float train_lr_ftrl_weight(double z, double n, double alpha, double beta, double l1, double l2);

#endif
