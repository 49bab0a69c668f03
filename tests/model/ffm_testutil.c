/*
 * ffm_testutil.c — helpers of the FFM tests (test_ffm_*.c, declared in
 * ffm_testutil.h).  The naive margin is deliberately the textbook double loop
 * so that it is obviously right.
 *
 * THREAD SAFETY: the rng state is the caller's.
 */

#include "ffm_testutil.h"

uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* uniform in [lo, hi) */
double urand(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * (double)(rnd(s) >> 11) * 0x1.0p-53;
}

double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Naive FFM margin over n features: rows[a] = [w | v_0 .. v_{F-1}] (stride
 * 1 + F k, double), fld[a] their fields, x[a] their values. */
double naive_margin(double bias, const double *rows, const uint32_t *fld, const double *x,
                    uint32_t n, uint32_t F, uint32_t k, bool norm)
{
    const uint32_t K = 1 + F * k;
    double lin = 0, pair = 0, sq = 0;
    for (uint32_t a = 0; a < n; a++) {
        lin += rows[(size_t)a * K] * x[a];
        sq += x[a] * x[a];
        for (uint32_t b = a + 1; b < n; b++) {
            const double *va = rows + (size_t)a * K + 1 + (size_t)fld[b] * k;
            const double *vb = rows + (size_t)b * K + 1 + (size_t)fld[a] * k;
            double dot = 0;
            for (uint32_t f = 0; f < k; f++)
                dot += va[f] * vb[f];
            pair += dot * x[a] * x[b];
        }
    }
    double s = 1, s2 = 1;
    if (norm && sq > 0) {
        s2 = 1.0 / sq;
        s = sqrt(s2);
    }
    return bias + s * lin + s2 * pair;
}
