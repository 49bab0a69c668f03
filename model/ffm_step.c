/*
 * ffm_step.c — the FFM trainer's factor gradient and steps (ffm_step.h),
 * each one loop over a feature's whole row that the compiler vectorises,
 * with clones for
 * x86-64-v4 (AVX-512) and x86-64-v3 (AVX2, FMA) beside the baseline; the
 * loader picks one by CPU (an ifunc).
 *
 * The loop is branch-free: a masked coordinate's gradient is multiplied by
 * 0, so its step and its Adagrad sum's increment are exactly 0.  Built with
 * -fno-math-errno so that sqrtf vectorises.  The AVX-512 clone was worth
 * 11% of an FFM epoch over the AVX2 one here (8.66 against 7.76 M feature
 * updates/s, train_bench, one run); reciprocal estimates instead of the
 * divider (-ffast-math -mrecip) were tried and were 4% slower.
 */
#include "ffm_step.h"

#include <float.h>
#include <math.h>
#include <stddef.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define STEP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define STEP_CLONES
#endif

/* The gradient, instantiated with constant k (4) so that a block is a few
 * vector instructions. */
static inline __attribute__((always_inline)) void
gradient_blocks(float *restrict gv, const double *restrict B, const float *restrict vs, uint32_t F,
                uint32_t k, uint32_t fj, double sx, double x)
{
    for (uint32_t h = 0; h < F; h++) {
        const double *b = B + ((size_t)h * F + fj) * k;
        for (uint32_t f = 0; f < k; f++)
            gv[(size_t)h * k + f] = (float)(sx * b[f]);
    }
    const double *b = B + ((size_t)fj * F + fj) * k;
    for (uint32_t f = 0; f < k; f++)
        gv[(size_t)fj * k + f] = (float)(sx * (b[f] - (double)vs[f] * x));
}

STEP_CLONES static void gradient_4(float *gv, const double *B, const float *vs, uint32_t F,
                                   uint32_t fj, double sx, double x)
{
    gradient_blocks(gv, B, vs, F, 4, fj, sx, x);
}

STEP_CLONES static void gradient_any(float *gv, const double *B, const float *vs, uint32_t F,
                                     uint32_t k, uint32_t fj, double sx, double x)
{
    gradient_blocks(gv, B, vs, F, k, fj, sx, x);
}

void train__ffm_factor_gradient(float *gv, const double *B, const float *vs, uint32_t F, uint32_t k,
                                uint32_t fj, double sx, double x)
{
    if (k == 4)
        gradient_4(gv, B, vs, F, fj, sx, x);
    else
        gradient_any(gv, B, vs, F, k, fj, sx, x);
}

STEP_CLONES void train__ffm_adagrad_v(float *restrict c, float *restrict G, const float *restrict g,
                                      const float *restrict mask, uint32_t n, float l2, float alpha,
                                      float eps)
{
    for (uint32_t i = 0; i < n; i++) {
        float gi = mask[i] * (g[i] + l2 * c[i]); /* 0 where masked: c and G stay */
        float g2 = G[i] + gi * gi;
        G[i] = g2;
        float d = sqrtf(g2) + eps;
        d = d > FLT_MIN ? d : FLT_MIN; /* G = 0 with eps = 0: a 0 step, not 0 / 0 */
        c[i] -= alpha * gi / d;
    }
}

STEP_CLONES void train__ffm_sgd_v(float *restrict c, const float *restrict g,
                                  const float *restrict mask, uint32_t n, float l2, float alpha)
{
    for (uint32_t i = 0; i < n; i++)
        c[i] -= alpha * mask[i] * (g[i] + l2 * c[i]);
}
