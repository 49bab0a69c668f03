/*
 * ffm.h — the field-aware factorization machine (FFM) scoring kernel: pure
 * arithmetic on parameter rows already fetched from the store, shared by
 * model.c (serving) and train_ffm.c (the trainer's predictions), so that an
 * exported model scores bit for bit what the trainer predicted.
 *
 * An FFM with F fields and k factors keeps K = 1 + F*k floats per feature id:
 *
 *   [ w | v_0 (k floats, used against field 0) | v_1 | ... | v_{F-1} ]
 *
 * and the bias is the first float of MODEL_BIAS_ID's row (the rest unused).
 * A feature's field is ffm_field(id, F).  For one sample x (the shared block
 * and one item's block together):
 *
 *   margin = bias + s sum_j w_j x_j
 *                 + s^2 sum_{j<l} <v_{j,field(l)}, v_{l,field(j)}> x_j x_l
 *
 * s = 1 / sqrt(sum_j x_j^2) with instance normalisation (norm; s = 1 for a
 * sample whose sum is 0), s = 1 without; score = sigmoid(margin).  The pair
 * sum is computed by field aggregation (ffm.c), never pair by pair.
 *
 * THREAD SAFETY: pure functions; each caller brings its own work space.
 */
#ifndef TL_MODEL_FFM_H
#define TL_MODEL_FFM_H

#include "model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The field number lives in the top 8 bits of an id. */
#define FFM_MAX_FIELDS 256

/* The field of id in a model with F fields (1..FFM_MAX_FIELDS). */
static inline uint32_t ffm_field(uint64_t id, uint32_t F)
{
    return (uint32_t)((id >> 56) % F);
}

/* Doubles of work space model_ffm_scores() needs for F fields and k factors
 * (2 F F k accumulators and a small index area), whatever the request's
 * size.  The caller allocates it once (per thread). */
size_t model_ffm_work_doubles(uint32_t F, uint32_t k);

/* Scores n_items items, item i's sample being shared ∪ items[i].  rows
 * holds K = 1 + F*k floats per id in the order
 *
 *   [ bias row | shared ids' rows | item 0's rows | item 1's rows | ... ]
 *
 * (an unknown id's row is all 0).  F is 1..FFM_MAX_FIELDS, k >= 1; work has
 * model_ffm_work_doubles(F, k) doubles.  Writes scores[0 .. n_items).  On return
 * work[0 .. F*F*k) holds the shared block's field aggregates
 * B[g][h][f] = sum over shared features j of field g of v_{j,h,f} x_j
 * (unnormalised x; index (g*F + h)*k + f), which the trainer reuses for its
 * gradient.  Sums run in double in a fixed order: the same call always
 * gives the same floats.  Never allocates, never blocks. */
void model_ffm_scores(const codec_block_t *shared, const codec_block_t *items, uint32_t n_items,
                const float *rows, uint32_t F, uint32_t k, bool norm, double *work, float *scores);

/* The score of one sample whose rows are not consecutive: rowp[j] is
 * feature j's row (K floats) for blk's features, bias the bias.  The same
 * float as model_ffm_scores() with blk as the shared block and one empty item,
 * and the same B left in work (model_ffm_work_doubles(F, k) doubles).  For the
 * trainer, whose rows lie where its table keeps them.  Never allocates,
 * never blocks. */
float model_ffm_score_sample(const codec_block_t *blk, const float *const *rowp, float bias,
                             uint32_t F, uint32_t k, bool norm, double *work);

#ifdef __cplusplus
}
#endif
#endif /* TL_MODEL_FFM_H */
