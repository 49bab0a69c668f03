/*
 * ffm_step.h — the FFM trainer's per-row optimizer steps over a feature's
 * factors (F k floats): Adagrad and SGD with a 0/1 mask of the coordinates
 * that have a data gradient.  Internal to model/ (ffm_train.c).
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

void ffm_adagrad_v(float *restrict c, float *restrict G, const float *restrict g,
                   const float *restrict mask, uint32_t n, float l2, float alpha, float eps);

void ffm_sgd_v(float *restrict c, const float *restrict g, const float *restrict mask, uint32_t n,
               float l2, float alpha);

#endif /* TL_MODEL_FFM_STEP_H */
