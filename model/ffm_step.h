/*
 * ffm_step.h — the FFM trainer's per-row kernels over a feature's factors
 * (F k floats): their gradient from the field aggregates B, and Adagrad and
 * SGD steps with a 0/1 mask of the coordinates that have a data gradient.
 * Internal to model/ (train_ffm.c).
 *
 * Masked coordinates (mask 0) are left exactly as they were: no L2 step,
 * and Adagrad's sum unchanged.  An active coordinate i with gradient g_i:
 *
 *   Adagrad  gi = g_i + l2 c_i;  G_i += gi^2;  c_i -= alpha gi / (sqrt(G_i) + eps)
 *   SGD      c_i -= alpha (g_i + l2 c_i)
 */
#ifndef TL_MODEL_FFM_STEP_H
#define TL_MODEL_FFM_STEP_H

#include <stdint.h>

/* gv[h k + f] = sx (B[h][fj][f] - [h == fj] vs[f] x), computed in double
 * and rounded: the v gradient of a feature of field fj with value x, sx =
 * the loss gradient times s^2 x, vs its own v_fj block as the forward pass
 * read it, B the aggregates model_ffm_scores() leaves (index (h F + g) k + f). */
void train__ffm_factor_gradient(float *gv, const double *B, const float *vs, uint32_t F, uint32_t k,
                                uint32_t fj, double sx, double x);

void train__ffm_adagrad_v(float *restrict c, float *restrict G, const float *restrict g,
                          const float *restrict mask, uint32_t n, float l2, float alpha, float eps);

void train__ffm_sgd_v(float *restrict c, const float *restrict g, const float *restrict mask,
                      uint32_t n, float l2, float alpha);

#endif /* TL_MODEL_FFM_STEP_H */
