/*
 * ffm_train.h — online / offline training of field-aware factorization
 * machines (ffm.h) with Adagrad or SGD, optimizer state beside the weights
 * in the trainer's own rows (stepped in place), and an export to an FFM serving snapshot that model_load() and
 * tlserve accept.
 *
 *   margin = bias + s sum_j w_j x_j
 *                 + s^2 sum_{j<l} <v_{j,field(l)}, v_{l,field(j)}> x_j x_l
 *
 * (s = 1/|x| with instance normalisation, else 1).  Trainer state per id
 * (fp32, K = 1 + F k); the serving row [w | v_0 .. v_{F-1}] is its prefix:
 *
 *   SGD      [ w | v (F k) ]                    1 + F k  <= STORE_MAX_VALUE_FLOATS
 *   Adagrad  [ w | v (F k) | Gw | Gv (F k) ]    2 + 2F k <= STORE_MAX_VALUE_FLOATS
 *
 * A new id's v starts uniform in [0, init_stdev) from a hash of (seed, id,
 * coordinate): the same for any sample order.  The bias
 * (MODEL_BIAS_ID, first float) is never regularised.  Predictions go
 * through model_ffm_scores() with the sample as the shared block and one empty
 * item, so an export scores such requests bit for bit as the trainer
 * predicted.
 *
 * THREAD SAFETY: a trainer is driven by one thread, and only that thread may
 * read it (train_ffm_weights() included).
 */
#ifndef TL_MODEL_FFM_TRAIN_H
#define TL_MODEL_FFM_TRAIN_H

#include "store/store.h"
#include "train.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct train_ffm_options {
    train_optimizer_t optimizer; /* TRAIN_ADAGRAD (default) or TRAIN_SGD */
    uint32_t fields, k;     /* F in 1..FFM_MAX_FIELDS, k >= 1; the state row must fit
                             * STORE_MAX_VALUE_FLOATS */
    double alpha;           /* learning rate of v; > 0 */
    double w_ratio;         /* the bias and w step at alpha x w_ratio; > 0 */
    double beta;            /* Adagrad: added to sqrt(sum g^2); >= 0 */
    double l2;              /* L2 on w; >= 0 */
    double l2_v;            /* L2 on v; >= 0 */
    double init_stdev;      /* v starts uniform in [0, init_stdev) (LIBFFM's 1/sqrt(k)
                             * for k = 4 by default); >= 0 */
    bool norm;              /* instance normalisation (s = 1/|x|) */
    uint64_t seed;          /* of the v initialisation */
    uint64_t expected_keys; /* sizing hint; 0 = small */
} train_ffm_options_t;

typedef struct train_ffm train_ffm_t; /* opaque */

/* Passes over the training data that the defaults are tuned for (tltrain's
 * default --epochs for ffm). */
#define TRAIN_FFM_DEFAULT_EPOCHS 11

/* Fills o with the tuned defaults (Adagrad, k = 4, norm on; see
 * ffm_train.c).  fields is left 0: the caller must set it. */
void train_ffm_defaults(train_ffm_options_t *o);

/* Creates a trainer with an empty model.  Returns 0, -EINVAL (bad options,
 * FTRL included; a sentence in why when why_len > 0) or -ENOMEM.  The
 * caller frees it with train_ffm_destroy().  May block (mmap). */
int train_ffm_create(const train_ffm_options_t *opt, train_ffm_t **out, char *why,
                     size_t why_len);
void train_ffm_destroy(train_ffm_t *t);

/* Sizes the per-sample work space for samples of up to n features (0 or
 * -ENOMEM).  train_ffm_update() and train_ffm_predict() grow it
 * themselves. */
int train_ffm_reserve(train_ffm_t *t, uint32_t n);

/* Click probability of one sample (values may be NULL: all 1) under the
 * current parameters; unseen ids count 0 (as served).  Equal bit for bit to
 * model_score() on an export with the sample as the shared block and one
 * empty item.  NAN when the work space cannot grow. */
float train_ffm_predict(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n);

/* One optimizer step on one sample (label 0 or 1).  *p (when non-NULL) gets
 * the prediction made BEFORE the step, new ids already initialised.
 * Returns 0, or -ENOMEM when the work space or the rows could not grow
 * (the model is then partially updated). */
int train_ffm_update(train_ffm_t *t, const uint64_t *ids, const float *values, uint32_t n,
                     float label, float *p);

/* Writes an FFM serving snapshot (value_floats 1 + F k, fp32, model_kind
 * FFM, rows [w | v], bias row [bias | 0..0], all-zero rows omitted; params
 * "fields", "k", "norm") into dir.  Blocks.  Returns 0, or -1 with *err
 * filled. */
int train_ffm_export(const train_ffm_t *t, const char *dir, const store_meta_t *meta,
                     store_error_t *err);

/* Copies id's serving row [w | v] (1 + F k floats; the bias: its first
 * float) into out: 1, or 0 when the trainer has no row for id.  Ids it
 * holds rows for: train_ffm_count(). */
int train_ffm_weights(const train_ffm_t *t, uint64_t id, float *out);
uint64_t train_ffm_count(const train_ffm_t *t);
uint32_t train_ffm_fields(const train_ffm_t *t);
uint32_t train_ffm_k(const train_ffm_t *t);

/* For tests: the derivatives of the margin (not of the loss) at the current
 * parameters, new ids initialised as train_ffm_update() would (nothing is
 * created or written).  *d_bias = 1; grad gets 1 + F k doubles per
 * feature, [d/dw_j | d/dv_{j,0..F-1}], in sample order.  0 or -ENOMEM. */
int train_ffm_margin_gradient(train_ffm_t *t, const uint64_t *ids, const float *values,
                              uint32_t n, double *d_bias, double *grad);

#ifdef __cplusplus
}
#endif
#endif /* TL_MODEL_FFM_TRAIN_H */
