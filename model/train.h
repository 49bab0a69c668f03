/*
 * train.h — offline / online training of LR and FM (FFM, DNN come later
 * behind the same shape): per-sample updates with FTRL-Proximal, Adagrad or
 * SGD, optimizer state in the trainer's own store, and an export to a
 * serving snapshot that model_load() and tlserve accept.
 *
 * LR trainer state (one store entry per feature id, fp32):
 *
 *   FTRL     K = 3  [ z | n | w ]   w = the weight implied by z, n (cached)
 *   Adagrad  K = 2  [ w | sum g^2 ]
 *   SGD      K = 1  [ w ]
 *
 * The bias is the entry under MODEL_BIAS_ID, trained like a feature of value
 * 1 but never regularised (no L1/L2).  Predictions are computed exactly as
 * model_score() computes them (double sums in feature order, bias added to
 * the block sum, the same sigmoid), so an exported model scores every sample
 * bit for bit as the trainer did.
 *
 * THREAD SAFETY: a trainer is driven by one thread.  Its store may be read
 * concurrently through train_lr_store() (lock-free store reads).
 */
#ifndef TL_MODEL_TRAIN_H
#define TL_MODEL_TRAIN_H

#include "store/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum train_optimizer {
    TRAIN_FTRL = 0,
    TRAIN_ADAGRAD = 1,
    TRAIN_SGD = 2,
} train_optimizer_t;

typedef struct train_lr_options {
    train_optimizer_t optimizer;
    double alpha;           /* learning rate (FTRL alpha, Adagrad/SGD step); > 0 */
    double beta;            /* FTRL beta (>= 0); Adagrad: epsilon added to sqrt(sum g^2) */
    double l1;              /* FTRL only; >= 0 */
    double l2;              /* >= 0 */
    uint64_t expected_keys; /* sizing hint; 0 = small */
    uint32_t shards;        /* trainer store shards; 0 = 16 */
} train_lr_options_t;

typedef struct train_lr train_lr_t; /* opaque */

/* Fills o with the tuned defaults for the optimizer (see train_lr.c). */
void train_lr_defaults(train_optimizer_t opt, train_lr_options_t *o);

/* "ftrl" / "adagrad" / "sgd" -> optimizer; 0 or -EINVAL. */
int train_optimizer_parse(const char *name, train_optimizer_t *out);
const char *train_optimizer_name(train_optimizer_t opt);

/* Creates a trainer with an empty model.  Returns 0, -EINVAL (bad options;
 * a sentence in why when why_len > 0) or -ENOMEM.  Caller frees with
 * train_lr_destroy(). */
int train_lr_create(const train_lr_options_t *opt, train_lr_t **out, char *why, size_t why_len);
void train_lr_destroy(train_lr_t *t);

/* The click probability of one sample under the current weights (values may
 * be NULL: all 1).  Equal bit for bit to model_score() on an export.  Never
 * allocates; n must be <= the largest n passed so far to train_lr_update or
 * train_lr_reserve. */
float train_lr_predict(train_lr_t *t, const uint64_t *ids, const float *values, uint32_t n);

/* Sizes the per-sample work space for samples of up to n features (0 or
 * -ENOMEM).  train_lr_update() grows it itself. */
int train_lr_reserve(train_lr_t *t, uint32_t n);

/* One optimizer step on one sample (label 0 or 1).  Writes the prediction
 * made BEFORE the step to *p (when p != NULL).  Returns 0, or -ENOMEM when
 * the store could not grow (the model is then partially updated). */
int train_lr_update(train_lr_t *t, const uint64_t *ids, const float *values, uint32_t n,
                    float label, float *p);

/* Writes the current weights as an LR serving snapshot (value_floats 1,
 * fp32, model_kind LR, bias under MODEL_BIAS_ID; zero weights omitted) into
 * dir (store_snapshot_write rules).  meta->model_kind is forced to LR.
 * Blocks.  Returns 0, or -1 with *err filled. */
int train_lr_export(const train_lr_t *t, const char *dir, const store_meta_t *meta,
                    store_error_t *err);

/* The trainer's own state store (K as above), e.g. for tests. */
const store_t *train_lr_store(const train_lr_t *t);

/* Weight of one id as the trainer would serve it (0 when absent). */
float train_lr_weight(const train_lr_t *t, uint64_t id);

/* ---- FM (fm_train.c) ------------------------------------------------------
 *
 * margin = bias + s sum_j w_j x_j + s^2 0.5 sum_f [(sum_j v_jf x_j)^2 - sum_j (v_jf x_j)^2]
 *
 * s = 1 / sqrt(sum_j x_j^2) with instance normalisation (norm: every sample
 * scaled to unit L2 norm, as xLearn does; s = 1 for a sample whose x are all
 * 0), else s = 1.  The export records norm in the snapshot's params.
 *
 * Trainer state per id (fp32); the serving row [w | v_1..v_k] is its prefix:
 *
 *   SGD      K = 2 + k       [ w | v_1..v_k | c ]                      k <= 64
 *   Adagrad  K = 3 + 2k      [ w | v_1..v_k | Gw | Gv_1..Gv_k | c ]    k <= 64
 *   FTRL     K = 4 + 2k      [ w | v_1..v_k | z | n | Gv_1..Gv_k | c ] k <= 64
 *                            (FTRL-Proximal for w, Adagrad for v;
 *                            c: the id's occurrences so far)
 *
 * A new id's v starts as N(0, init_stdev^2) drawn from a hash of (seed, id,
 * f): the same for any sample order.  The bias (MODEL_BIAS_ID, first float)
 * is never regularised.  The factors' L2 at an id's c-th occurrence is
 * l2_v + l2_v_freq / c (frequency-adaptive: rare ids' factors shrink hard,
 * frequent ids' are left to the data; fm_train.c says why).  Predictions
 * are computed exactly as model_score() computes them for a request whose
 * shared block is the sample and whose item is empty, so an export scores
 * such requests bit for bit as the trainer predicted. */

typedef struct train_fm_options {
    train_optimizer_t optimizer;
    uint32_t k;             /* factors: 1..64 (MODEL_FM_MAX_K) */
    double alpha;           /* learning rate (w and v; FTRL alpha for w); > 0 */
    double beta;            /* FTRL beta for w; Adagrad epsilon; >= 0 */
    double l1;              /* FTRL (w) only; >= 0 */
    double l2;              /* L2 on w; >= 0 */
    double l2_v;            /* L2 on v; >= 0 */
    double l2_v_freq;       /* + l2_v_freq / c on v at an id's c-th occurrence; >= 0 */
    double init_stdev;      /* v ~ N(0, init_stdev^2); >= 0 */
    bool norm;              /* instance normalisation (s = 1/|x|) */
    uint64_t seed;          /* of the v initialisation */
    uint64_t expected_keys; /* sizing hint; 0 = small */
    uint32_t shards;        /* trainer store shards; 0 = 16 */
} train_fm_options_t;

typedef struct train_fm train_fm_t; /* opaque */

/* Passes over the training data that the Adagrad defaults are tuned for
 * (tltrain's default for --model fm). */
#define TRAIN_FM_DEFAULT_EPOCHS 10

/* Fills o with the defaults for the optimizer and k = 4.  Adagrad's are
 * tuned (with TRAIN_FM_DEFAULT_EPOCHS): norm on, alpha 0.2, beta 1, l2 and
 * l2_v 2e-5, l2_v_freq 3.  FTRL's and SGD's are untuned starting points
 * (norm off, l2_v_freq 0). */
void train_fm_defaults(train_optimizer_t opt, train_fm_options_t *o);

/* Same contract as train_lr_create (0, -EINVAL with a sentence, -ENOMEM). */
int train_fm_create(const train_fm_options_t *opt, train_fm_t **out, char *why, size_t why_len);
void train_fm_destroy(train_fm_t *t);

/* Click probability under the current parameters; unseen ids count 0 (as
 * served).  Equal bit for bit to model_score() on an export with the sample
 * as the shared block and one empty item.  NAN when the work space cannot
 * grow. */
float train_fm_predict(train_fm_t *t, const uint64_t *ids, const float *values, uint32_t n);

/* Sizes the work space for samples of up to n features (0 or -ENOMEM). */
int train_fm_reserve(train_fm_t *t, uint32_t n);

/* One step on one sample; *p (when non-NULL) gets the prediction made
 * before the step (with new ids already initialised).  0 or -ENOMEM. */
int train_fm_update(train_fm_t *t, const uint64_t *ids, const float *values, uint32_t n,
                    float label, float *p);

/* Writes an FM serving snapshot (value_floats 1 + k, fp32, model_kind FM,
 * rows [w | v], bias row [bias | 0..0]; all-zero rows omitted) into dir.
 * Blocks.  Returns 0, or -1 with *err filled. */
int train_fm_export(const train_fm_t *t, const char *dir, const store_meta_t *meta,
                    store_error_t *err);

/* The trainer's own state store (K as above), e.g. for tests. */
const store_t *train_fm_store(const train_fm_t *t);
uint32_t train_fm_k(const train_fm_t *t);

#ifdef __cplusplus
}
#endif
#endif /* TL_MODEL_TRAIN_H */
