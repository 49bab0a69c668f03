/*
 * test_metrics.c — logloss, exact AUC (with ties) and calibration against
 * values computed by hand, and AUC against an O(n^2) pair count on random
 * data full of ties.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/metrics.h"

#include <math.h>
#include <stdlib.h>

static void test_logloss(void **state)
{
    (void)state;
    const float p[] = {0.5f, 0.5f};
    const float y[] = {1, 0};
    assert_float_equal(metrics_logloss(p, y, 2), log(2.0), 1e-12);
    /* -(log 0.8 + log(1 - 0.25)) / 2 */
    const float p2[] = {0.8f, 0.25f};
    assert_float_equal(metrics_logloss(p2, y, 2), -(log((double)0.8f) + log1p(-(double)0.25f)) / 2,
                       1e-12);
    /* clipping: p = 0 for a positive costs -log(1e-15), not infinity */
    const float p3[] = {0.0f};
    const float y3[] = {1};
    assert_float_equal(metrics_logloss(p3, y3, 1), -log(1e-15), 1e-9);
    assert_true(isnan(metrics_logloss(p, y, 0)));
}

static void test_auc_hand(void **state)
{
    (void)state;
    /* The classic example: 3 of 4 pairs ordered right. */
    const float p[] = {0.1f, 0.4f, 0.35f, 0.8f};
    const float y[] = {0, 0, 1, 1};
    assert_float_equal(metrics_auc(p, y, 4), 0.75, 1e-12);
    /* Ties: positives {0.5, 0.9}, negatives {0.5, 0.5}: two ties (1/2 each)
     * and two wins -> 3/4. */
    const float pt[] = {0.5f, 0.5f, 0.5f, 0.9f};
    const float yt[] = {0, 1, 0, 1};
    assert_float_equal(metrics_auc(pt, yt, 4), 0.75, 1e-12);
    /* All equal: 1/2.  Perfect: 1.  Reversed: 0. */
    const float pe[] = {0.3f, 0.3f, 0.3f};
    const float ye[] = {1, 0, 0};
    assert_float_equal(metrics_auc(pe, ye, 3), 0.5, 1e-12);
    const float pp[] = {0.1f, 0.2f, 0.9f};
    const float yp[] = {0, 0, 1};
    assert_float_equal(metrics_auc(pp, yp, 3), 1.0, 1e-12);
    const float yr[] = {1, 1, 0};
    assert_float_equal(metrics_auc(pp, yr, 3), 0.0, 1e-12);
    /* One class only: undefined. */
    const float y0[] = {0, 0, 0};
    assert_true(isnan(metrics_auc(pp, y0, 3)));
}

static void test_auc_brute(void **state)
{
    (void)state;
    enum { N = 3000 };
    float *p = malloc(N * sizeof *p), *y = malloc(N * sizeof *y);
    srand(7);
    for (int i = 0; i < N; i++) {
        p[i] = (float)(rand() % 50) / 50.0f; /* many ties */
        y[i] = (rand() % 100) < 20 + (int)(p[i] * 40) ? 1.0f : 0.0f;
    }
    double wins = 0, pairs = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            if (y[i] == 1 && y[j] == 0) {
                pairs++;
                wins += p[i] > p[j] ? 1.0 : p[i] == p[j] ? 0.5 : 0.0;
            }
    assert_float_equal(metrics_auc(p, y, N), wins / pairs, 1e-12);

    metrics_t *m;
    assert_int_equal(metrics_create(&m), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(metrics_add(m, p[i], y[i]), 0);
    metrics_result_t r;
    metrics_compute(m, &r);
    assert_int_equal(r.n, N);
    assert_float_equal(r.auc, wins / pairs, 1e-12);
    assert_float_equal(r.logloss, metrics_logloss(p, y, N), 1e-12);
    assert_float_equal(r.calibration, metrics_calibration(p, y, N), 1e-12);
    metrics_destroy(m);
    free(p);
    free(y);
}

static void test_calibration(void **state)
{
    (void)state;
    /* mean prediction 0.4, mean label 0.5 -> 0.8 */
    const float p[] = {0.2f, 0.6f, 0.3f, 0.5f};
    const float y[] = {1, 1, 0, 0};
    assert_float_equal(metrics_calibration(p, y, 4), ((double)0.2f + 0.6f + 0.3f + 0.5f) / 2.0,
                       1e-9);
    const float y0[] = {0, 0, 0, 0};
    assert_true(isnan(metrics_calibration(p, y0, 4)));
    metrics_t *m;
    assert_int_equal(metrics_create(&m), 0);
    metrics_result_t r;
    metrics_compute(m, &r);
    assert_int_equal(r.n, 0);
    assert_true(isnan(r.auc) && isnan(r.logloss));
    metrics_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logloss),
        cmocka_unit_test(test_auc_hand),
        cmocka_unit_test(test_auc_brute),
        cmocka_unit_test(test_calibration),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
