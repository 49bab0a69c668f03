/*
 * metrics.h — offline quality metrics for click models: logloss, exact AUC
 * and calibration.
 *
 * A metrics_t collects (prediction, label) pairs as a trainer evaluates a
 * test file; the pairs are kept (8 bytes each) because exact AUC needs a
 * sort.  Labels are 0 or 1 (anything > 0.5 counts as 1).
 *
 * THREAD SAFETY: one thread per metrics_t; the pure functions are reentrant.
 */
#ifndef TL_MODEL_METRICS_H
#define TL_MODEL_METRICS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Mean of -[y log p + (1-y) log(1-p)], p clipped to [1e-15, 1 - 1e-15].
 * NAN when n == 0. */
double metrics_logloss(const float *pred, const float *label, size_t n);

/* Exact ROC AUC: the probability that a random positive scores above a
 * random negative, ties counting one half (average ranks).  Sorts a copy:
 * O(n log n) time, O(n) memory.  NAN when there are no positives or no
 * negatives, or when the copy cannot be allocated. */
double metrics_auc(const float *pred, const float *label, size_t n);

/* mean(pred) / mean(label); NAN without positives. */
double metrics_calibration(const float *pred, const float *label, size_t n);

typedef struct metrics metrics_t; /* opaque accumulator */

/* Returns 0 or -ENOMEM. */
int metrics_create(metrics_t **out);
void metrics_destroy(metrics_t *m);
/* Adds one pair; 0 or -ENOMEM (the pair is then not counted). */
int metrics_add(metrics_t *m, float pred, float label);
size_t metrics_count(const metrics_t *m);

typedef struct metrics_result {
    size_t n;
    double logloss, auc, calibration;
} metrics_result_t;

void metrics_compute(const metrics_t *m, metrics_result_t *out);

#ifdef __cplusplus
}
#endif
#endif /* TL_MODEL_METRICS_H */
