/*
 * train_threads.h — one pass of training over samples held in memory, on T
 * threads, for the kinds that can (LR, FM, FFM; the DNN trains on one
 * thread: train_threads_supported).  tltrain --threads drives it; so can a
 * benchmark or the server's trainer.
 *
 * HOW: lock-free Hogwild updates, as LIBFFM and xLearn train.  Thread i
 * takes the i-th of T contiguous slices of the samples, in order, and
 * steps the rows of the ids it meets in place, with no lock, while other threads
 * step the same rows.  A row's floats may then mix two steps or lose one
 * (a race accepted by design: the sparse rows of CTR data are rarely hit
 * by two threads at once, and every step is small); the memory never is:
 * rows live in a row table whose rows never move (row_table.h); a new id's
 * row is made and initialised under an insert lock, taken only on a miss,
 * before any other thread can find it.  LR's and FM's state is a store,
 * whose rule is one writer per shard with rows that move as a shard grows:
 * there the threads step a mirror of the store in a row table, written
 * back after they join, each thread the store shards it owns
 * (shard % T == i).  Why Hogwild rather than ids partitioned by shard:
 * every sample touches ids of most shards, so partitioning would send
 * each feature's gradient to its owner thread; Hogwild needs no messages
 * and scales with the cores.
 *
 * WHAT VARIES with T > 1: the order in which the threads' steps land, so
 * the model (and the progressive logloss) differs from run to run within
 * the noise of SGD; one thread (train_update) stays deterministic and is
 * not this path.  Row creation order also varies, which changes nothing
 * but the rows' places.
 *
 * MEMORY: the samples are held in memory (train_samples_t: 12 bytes per
 * feature + 12 per sample), parsed once and reused by every epoch; its
 * byte budget refuses a data set that does not fit (-E2BIG) so that the
 * caller can fall back to streaming on one thread.
 *
 * THREAD SAFETY: train_threads_epoch takes the train_t whole while it
 * runs: no other call on it (update, predict, export, attach) may run
 * meanwhile.  A train_samples_t is built by one thread and then only read.
 */
#ifndef TL_MODEL_TRAIN_THREADS_H
#define TL_MODEL_TRAIN_THREADS_H

#include "train.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRAIN_THREADS_MAX 1024

/* Samples in memory, back to back. */
typedef struct train_samples train_samples_t; /* opaque */

/* An empty set that refuses to grow past max_bytes (0: no limit).  0 or
 * -ENOMEM.  The caller owns *out (train_samples_destroy). */
int train_samples_create(uint64_t max_bytes, train_samples_t **out);
void train_samples_destroy(train_samples_t *s);

/* Appends a sample: n features (ids, values; values NULL = all 1) and a
 * label.  0, -E2BIG (past max_bytes: the set is unchanged) or -ENOMEM. */
int train_samples_add(train_samples_t *s, const uint64_t *ids, const float *values, uint32_t n,
                      float label);
uint64_t train_samples_count(const train_samples_t *s);
uint64_t train_samples_bytes(const train_samples_t *s);

/* Whether t's kind trains on threads (LR, FM, FFM). */
bool train_threads_supported(const train_t *t);

typedef struct train_threads_stats {
    uint64_t samples;    /* samples stepped */
    uint64_t updates;    /* feature updates: each sample's n + 1 (the bias) */
    double logloss;      /* progressive: mean logloss of the prediction made before
                          * each sample's step (p clamped to [1e-15, 1 - 1e-15]),
                          * summed over the threads; NAN with no samples */
} train_threads_stats_t;

/* One pass over s: one optimizer step per sample (weight 1) as
 * train_update takes it, on `threads` threads (1..TRAIN_THREADS_MAX; 1
 * runs the same Hogwild path on the calling thread).  Blocks until every
 * thread is done; the model is then complete in t (its store for LR and
 * FM, written back) for predict and export.
 * Returns 0, or:
 *   -EINVAL  a kind that cannot (the DNN), an LR trainer attached to a live
 *            store, a thread count out of range: a sentence in why;
 *   -ENOMEM  the rows or a work space could not grow (the model holds the
 *            steps taken; LR/FM: the rows written back so far);
 *   -ERANGE  LR: a step would have made a value non-finite (not written).
 * A thread that cannot be started leaves its slice to the calling thread.
 * The stats cover the samples stepped, also on error. */
int train_threads_epoch(train_t *t, const train_samples_t *s, uint32_t threads,
                        train_threads_stats_t *st, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* TL_MODEL_TRAIN_THREADS_H */
