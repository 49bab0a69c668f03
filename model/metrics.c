/*
 * metrics.c — logloss, exact AUC, calibration (metrics.h).
 *
 * AUC by ranks (Mann-Whitney U): sort the predictions ascending, give each
 * run of equal predictions the average of the ranks it spans, then
 *
 *   AUC = (sum of positive ranks - P (P + 1) / 2) / (P N)
 *
 * which counts a positive/negative tie as one half.  Sums run in double.
 * The accumulator keeps pairs in one growing array (the pairs are the whole
 * state; a test file of 10^8 rows costs 800 MB, so stream-evaluate larger
 * sets in slices).
 *
 * THREAD SAFETY: none shared; see metrics.h.
 */
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

struct pair {
    float p; /* prediction */
    float y; /* label: 0 or 1 */
};

struct metrics {
    struct pair *v; /* n pairs, cap allocated */
    size_t n, cap;
};

double metrics_logloss(const float *pred, const float *label, size_t n)
{
    if (n == 0)
        return NAN;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        double p = pred[i];
        if (p < 1e-15)
            p = 1e-15;
        if (p > 1 - 1e-15)
            p = 1 - 1e-15;
        sum -= label[i] > 0.5f ? log(p) : log1p(-p);
    }
    return sum / (double)n;
}

double metrics_calibration(const float *pred, const float *label, size_t n)
{
    double sp = 0, sy = 0;
    for (size_t i = 0; i < n; i++) {
        sp += pred[i];
        sy += label[i] > 0.5f ? 1.0 : 0.0;
    }
    return sy > 0 ? sp / sy : NAN;
}

static int cmp_pair(const void *a, const void *b)
{
    float x = ((const struct pair *)a)->p, y = ((const struct pair *)b)->p;
    return (x > y) - (x < y);
}

/* AUC of pairs, sorting them in place. */
static double auc_sorted(struct pair *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_pair);
    double pos = 0, rank_sum = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        double run_pos = 0;
        while (j < n && v[j].p == v[i].p) {
            run_pos += v[j].y > 0.5f;
            j++;
        }
        /* ranks i+1 .. j, average (i + 1 + j) / 2 */
        rank_sum += run_pos * ((double)(i + 1) + (double)j) / 2.0;
        pos += run_pos;
        i = j;
    }
    double neg = (double)n - pos;
    if (pos == 0 || neg == 0)
        return NAN;
    return (rank_sum - pos * (pos + 1) / 2.0) / (pos * neg);
}

double metrics_auc(const float *pred, const float *label, size_t n)
{
    struct pair *v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return NAN;
    for (size_t i = 0; i < n; i++) {
        v[i].p = pred[i];
        v[i].y = label[i] > 0.5f ? 1.0f : 0.0f;
    }
    double a = auc_sorted(v, n);
    free(v);
    return a;
}

int metrics_create(metrics_t **out)
{
    metrics_t *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    *out = m;
    return 0;
}

void metrics_destroy(metrics_t *m)
{
    if (!m)
        return;
    free(m->v);
    free(m);
}

int metrics_add(metrics_t *m, float pred, float label)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        struct pair *v = realloc(m->v, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        m->v = v;
        m->cap = cap;
    }
    m->v[m->n].p = pred;
    m->v[m->n].y = label > 0.5f ? 1.0f : 0.0f;
    m->n++;
    return 0;
}

size_t metrics_count(const metrics_t *m) { return m->n; }

void metrics_compute(const metrics_t *m, metrics_result_t *out)
{
    out->n = m->n;
    out->logloss = out->auc = out->calibration = NAN;
    if (m->n == 0)
        return;
    double ll = 0, sp = 0, sy = 0;
    for (size_t i = 0; i < m->n; i++) {
        double p = m->v[i].p;
        if (p < 1e-15)
            p = 1e-15;
        if (p > 1 - 1e-15)
            p = 1 - 1e-15;
        ll -= m->v[i].y > 0.5f ? log(p) : log1p(-p);
        sp += m->v[i].p;
        sy += m->v[i].y;
    }
    out->logloss = ll / (double)m->n;
    out->calibration = sy > 0 ? sp / sy : NAN;
    struct pair *v = malloc(m->n * sizeof *v);
    if (!v)
        return;
    for (size_t i = 0; i < m->n; i++)
        v[i] = m->v[i];
    out->auc = auc_sorted(v, m->n);
    free(v);
}
