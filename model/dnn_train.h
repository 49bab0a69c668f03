/*
 * dnn_train.h — training the Wide & Deep network of dnn.h: Adagrad for the
 * sparse part (wide weights, embeddings, the global bias), Adam for the
 * dense MLP, one step per sample, and an export to a serving snapshot
 * (model_kind DNN: rows [w | e], the MLP in the snapshot's extras).
 *
 * Trainer state per id (fp32); the serving row [w | e] is its prefix:
 *
 *   [ w | e_1..e_d | Gw | Ge_1..Ge_d ]     K = 2 + 2d, d <= 511
 *
 * A new id's e starts as N(0, init_stdev^2) drawn from a hash of (seed, id,
 * coordinate): the same for any sample order.  Predictions go through
 * model_dnn_scores() with the sample as the shared block and one empty item, so
 * an export scores such requests bit for bit as the trainer predicted.
 *
 * THREAD SAFETY: a trainer is driven by one thread.  Its store may be read
 * concurrently through train_dnn_store() (lock-free store reads).
 */
#ifndef TL_MODEL_DNN_TRAIN_H
#define TL_MODEL_DNN_TRAIN_H

#include "dnn.h"
#include "store/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRAIN_DNN_MAX_DIM ((STORE_MAX_VALUE_FLOATS - 2) / 2) /* 511 */
#define TRAIN_DNN_DEFAULT_EPOCHS 1 /* passes tltrain makes unless told */

typedef struct train_dnn_options {
    uint32_t fields;        /* F: an id's field is (id >> 56) % F; 1..256 */
    uint32_t dim;           /* d: embedding size, 1..TRAIN_DNN_MAX_DIM; F*d <= DNN_MAX_WIDTH */
    uint32_t n_hidden;      /* hidden layers: 0..DNN_MAX_LAYERS-1 */
    uint32_t hidden[DNN_MAX_LAYERS - 1]; /* their widths, 1..DNN_MAX_WIDTH */
    bool wide;              /* train and serve the wide weights w */
    double lr_sparse;       /* Adagrad step for w, e and the bias; > 0 */
    double lr_dense;        /* Adam step for the MLP (beta1 .9, beta2 .999, eps 1e-8); > 0 */
    double l2;              /* L2 on w and e; >= 0 */
    double l2_dense;        /* L2 on the MLP weights (not its biases); >= 0 */
    double init_stdev;      /* e ~ N(0, init_stdev^2); >= 0 */
    uint64_t seed;          /* of the embedding and MLP initialisation */
    uint64_t expected_keys; /* sizing hint; 0 = small */
    uint32_t shards;        /* trainer store shards; 0 = 16 */
} train_dnn_options_t;

typedef struct train_dnn train_dnn_t; /* opaque */

/* Fills o with the tuned defaults: 26 fields, d 16, hidden 256,128, wide
 * (see dnn_train.c for the rates). */
void train_dnn_defaults(train_dnn_options_t *o);

/* Creates a trainer with a fresh model.  Returns 0, -EINVAL (bad options;
 * a sentence in why when why_len > 0) or -ENOMEM.  Caller frees with
 * train_dnn_destroy().  Allocates the MLP and its work space (~1 MB for the
 * defaults). */
int train_dnn_create(const train_dnn_options_t *opt, train_dnn_t **out, char *why,
                     size_t why_len);
void train_dnn_destroy(train_dnn_t *t);

/* Click probability under the current parameters; unseen ids count 0 (as
 * served).  Equal bit for bit to model_score() on an export with the sample
 * as the shared block and one empty item.  NAN when the work space cannot
 * grow. */
float train_dnn_predict(train_dnn_t *t, const uint64_t *ids, const float *values, uint32_t n);

/* Sizes the per-sample work space for samples of up to n features (0 or
 * -ENOMEM).  Update and predict grow it themselves. */
int train_dnn_reserve(train_dnn_t *t, uint32_t n);

/* One step on one sample (label 0 or 1); *p (when non-NULL) gets the
 * prediction made before the step, new ids already initialised.  A feature
 * whose id is MODEL_BIAS_ID counts with e = 0 and w = the bias but is not
 * stepped (the bias takes its own step).  0 or -ENOMEM (the model is then
 * partially updated). */
int train_dnn_update(train_dnn_t *t, const uint64_t *ids, const float *values, uint32_t n,
                     float label, float *p);

/* The gradient of the sample's logloss at the current parameters, without a
 * step (new ids are initialised as by an update, and stored): g_rows gets
 * n rows of 1 + d floats, d loss / d [w | e] of each feature occurrence
 * (w's entry is 0 without wide), *g_bias the bias's, and g_dense
 * train_dnn_dense_floats() floats laid out as train_dnn_dense() (L2 not
 * included).  For tests and checks.  0 or -ENOMEM. */
int train_dnn_gradient(train_dnn_t *t, const uint64_t *ids, const float *values, uint32_t n,
                       float label, float *p, float *g_rows, float *g_bias, float *g_dense);

/* The MLP's parameters, one array: W_0 | b_0 | W_1 | b_1 | ... (each as in
 * dnn_net_t).  Read-only; valid until the next update or destroy. */
const float *train_dnn_dense(const train_dnn_t *t);
size_t train_dnn_dense_floats(const train_dnn_t *t);

/* The trainer's network; W and b point into train_dnn_dense(). */
const dnn_net_t *train_dnn_net(const train_dnn_t *t);

/* Writes a DNN serving snapshot into dir: value_floats 1 + d, fp32,
 * model_kind DNN, rows [w | e] (w = 0 without wide), the bias row
 * [bias | 0..0], all-zero rows omitted, and the MLP as extras
 * (model_dnn_net_to_extras).  meta->model_kind is forced to DNN.  Blocks.
 * Returns 0, or -1 with *err filled. */
int train_dnn_export(const train_dnn_t *t, const char *dir, const store_meta_t *meta,
                     store_error_t *err);

/* The trainer's own state store (rows as above), e.g. for tests. */
const store_t *train_dnn_store(const train_dnn_t *t);

#ifdef __cplusplus
}
#endif
#endif /* TL_MODEL_DNN_TRAIN_H */
