/*
 * dnn.h — a Wide & Deep network: its description (layer sizes and dense
 * weights, carried in a snapshot's extras) and the scoring forward pass over
 * rows already fetched from the store.  No store access here: model.c looks
 * the rows up, train_dnn.c keeps its own.
 *
 * The sparse part is the store, one row of K = 1 + dim fp32 per id:
 *
 *   [ w (wide weight) | e_1 .. e_dim (embedding) ]
 *
 * with the global bias in the first float of MODEL_BIAS_ID's row.  An id's
 * field is (id >> 56) % fields.  For one sample x (ids, values):
 *
 *   pooled[f] = sum over features j of field f of e_j x_j   (dim floats)
 *   input     = pooled[0] | pooled[1] | ... | pooled[fields-1]
 *   h_1       = relu(input W_0 + b_0), ..., out = h_{L-1} W_{L-1} + b_{L-1}
 *   margin    = bias + out + (wide ? sum_j w_j x_j : 0),  score = sigmoid(margin)
 *
 * THREAD SAFETY
 *   A dnn_net_t is read-only once built: any number of threads may score
 *   with it at once, each with its own work space.  model_dnn_blas_init() pins
 *   OpenBLAS to one thread per call (the caller's); call it once before the
 *   first score (model.c does so at load).
 */
#ifndef TL_MODEL_DNN_H
#define TL_MODEL_DNN_H

#include "model.h"
#include "store/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DNN_MAX_LAYERS 8    /* weight layers, the output layer included */
#define DNN_CHUNK 256       /* items per batched forward pass */
#define DNN_MAX_WIDTH 16384 /* any layer's width, the input's included */

typedef struct dnn_net {
    uint32_t fields, dim;               /* F, d: input width F*d */
    bool wide;                          /* add sum_j w_j x_j to the margin */
    uint32_t n_layers;                  /* weight layers; the last has 1 output */
    uint32_t width[DNN_MAX_LAYERS + 1]; /* width[0] = F*d, width[n_layers] = 1 */
    const float *W[DNN_MAX_LAYERS];     /* width[l] x width[l+1], row-major (in x out) */
    const float *b[DNN_MAX_LAYERS];     /* width[l+1] */
} dnn_net_t;

/* Reads params "fields", "dim", "hidden" ("256,128"; "" = no hidden layer),
 * "wide" ("0"/"1") and dense arrays "mlp.L.weight", "mlp.L.bias"
 * (L = 0..n_layers-1) from x, and checks every size against K = value_floats
 * (which must be 1 + dim) and against each other.  On success returns 0 and
 * fills *net, whose W and b point into x's arrays (x must outlive net).
 * Returns -EINVAL with a sentence in why (when why_len > 0) naming what was
 * wrong.  Never blocks. */
int model_dnn_net_from_extras(const store_extras_t *x, uint32_t value_floats, dnn_net_t *net,
                        char *why, size_t why_len);

/* The inverse, for export: sets the four params and adds the dense arrays
 * to x, borrowing net's W and b (they must outlive the snapshot write).
 * Returns 0 or -EINVAL (x is full, or net is not well formed). */
int model_dnn_net_to_extras(const dnn_net_t *net, store_extras_t *x);

/* The names of weight layer l's two dense arrays in a snapshot's extras:
 * "mlp.L.weight" (width[l] x width[l+1]) and "mlp.L.bias" (width[l+1]).
 * The one place that spells them: the scorer, the trainer's export and
 * tlsynth's synthetic models all ask here.  Each buffer holds
 * STORE_DENSE_NAME_MAX bytes.  Never blocks. */
void model_dnn_layer_names(uint32_t layer, char weight[STORE_DENSE_NAME_MAX],
                     char bias[STORE_DENSE_NAME_MAX]);

/* Floats of work space model_dnn_scores() needs for net, whatever the request. */
size_t model_dnn_work_floats(const dnn_net_t *net);

/* Sets OpenBLAS to one thread (scoring runs on the caller's core).
 * Idempotent; cheap.  Its file (blas_init.c) also makes OpenBLAS use the
 * kernels this CPU can run when the library does not know the CPU. */
void model_dnn_blas_init(void);

/* Scores n_items items, each a sample shared ∪ items[i].  rows holds K =
 * 1 + net->dim floats per id in lookup order:
 *
 *   [ bias row | shared ids ... | item 0 ids ... | item 1 ids ... ]
 *
 * (absent ids as zero rows).  The shared block is pooled once; items go
 * through the MLP DNN_CHUNK at a time, one matrix product per layer.  work
 * holds model_dnn_work_floats(net) floats (any alignment; contents are scratch).
 * The same request always gives the same floats.  Never allocates, never
 * blocks. */
void model_dnn_scores(const dnn_net_t *net, const codec_block_t *shared, const codec_block_t *items,
                uint32_t n_items, const float *rows, float *work, float *scores);

/* For the trainer: after model_dnn_scores(net, ..., work, ...), the activations of
 * the last chunk's items at layer l (0 = the pooled input, 1..n_layers-1 the
 * hidden layers after ReLU, n_layers the MLP's output, its last bias added
 * but not the global bias nor the wide sum), row-major, width[l] floats per
 * item.  Points into work. */
const float *model_dnn_activations(const dnn_net_t *net, const float *work, uint32_t layer);

#ifdef __cplusplus
}
#endif
#endif /* TL_MODEL_DNN_H */
