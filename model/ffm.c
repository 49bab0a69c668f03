/*
 * ffm.c — FFM scoring by field aggregation (ffm.h).
 *
 * The pair sum of an FFM, sum_{j<l} <v_{j,field(l)}, v_{l,field(j)}> x_j x_l,
 * costs O(n^2 k) feature by feature.  Grouping the features by field turns
 * it into F*F vectors of k:
 *
 *   B[g][h] = sum over features j of field g of v_{j,h} x_j
 *
 *   pairs = sum_{g<h} <B[g][h], B[h][g]>
 *         + 0.5 sum_g ( |B[g][g]|^2 - sum_{j of field g} |v_{j,g}|^2 x_j^2 )
 *
 * (two features of different fields g < h meet once in <B[g][h], B[h][g]>;
 * two of the same field g meet in the square of B[g][g], whose own squares
 * the last term takes back out).  Building B costs O(F k) per feature —
 * one feature adds its whole v block (F*k contiguous floats) times x to the
 * row B[field] (F*k contiguous doubles) — and reading it O(F F k).
 *
 * Work space (doubles; B index (g*F + h)*k + f, row g = B[g][0..F)):
 *
 *   work  [ Bs: F*F*k  the shared block's B, built once per request    ]
 *         [ B:  F*F*k  rows the current item touches: Bs[g] + its part ]
 *         [ touched: F bytes, rounded up to doubles                    ]
 *
 * The shared block's B, linear sum, sum of x^2 and diagonal squares are
 * computed once.  An item copies row g of Bs into B the first time one of
 * its features lies in field g, adds its features there in block order, and
 * reads the rows it did not touch from Bs: O(F k (its features) + F F k) per
 * item.  The sums of a sample are the same floats however it is split
 * between the shared block and the item, and everything is summed in double
 * in a fixed order (features in block order; the B reads as pair_sum()
 * says): a request always gives the same floats, and the trainer, which
 * predicts through model_ffm_scores() with the sample as the shared block and one
 * empty item, predicts bit for bit what a server scores.
 *
 * The hot loop is the row update B[g] += v x: one float-to-double
 * conversion, multiply and add per element, bound by the conversions.  It
 * has an AVX2 version (4 conversions per instruction instead of SSE2's 2;
 * chosen at run time) besides the portable one.  Both multiply then add,
 * elementwise, without FMA (the avx2 target does not enable it), so they
 * give the same floats.  The pair reading is instantiated with constant k
 * (4, 8) so that the compiler unrolls it, portable and for AVX2.
 *
 * THREAD SAFETY: pure functions; the caller owns the work space.
 */
#include "ffm.h"
#include "sigmoid.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#endif

#define INLINE static inline __attribute__((always_inline))

size_t model_ffm_work_doubles(uint32_t F, uint32_t k)
{
    return 2 * (size_t)F * F * k + (F + sizeof(double) - 1) / sizeof(double);
}

/* ffm_field() without a division for the usual id whose field is < F. */
INLINE uint32_t field_of(uint64_t id, uint32_t F)
{
    uint32_t f = (uint32_t)(id >> 56);
    return f < F ? f : f % F;
}

/* Where one block adds its features: rows of B.  An item's rows start, on
 * first touch, as copies of the shared block's (Bs); the shared block's own
 * (Bs == NULL) start as the first feature's v x, written rather than added
 * to zeros (the rows no feature touched are zeroed afterwards).  The
 * block's parameter rows are rowp[j] when rowp is set (model_ffm_score_sample),
 * else consecutive from the rows argument. */
struct target {
    double *B;
    const double *Bs;
    uint8_t *touched;
    const float *const *rowp;
};

/* Row g of B, and whether it is to be written (*fresh) or added to. */
INLINE double *row_for(const struct target *t, uint32_t g, uint32_t Fk, bool *fresh)
{
    double *r = t->B + (size_t)g * Fk;
    *fresh = false;
    if (!t->touched[g]) {
        t->touched[g] = 1;
        if (t->Bs)
            memcpy(r, t->Bs + (size_t)g * Fk, (size_t)Fk * sizeof *r);
        else
            *fresh = true;
    }
    return r;
}

/* The running sums of a sample besides B, in feature order. */
struct sums {
    double lin;     /* sum w x */
    double sq;      /* sum x^2 */
    double diag[4]; /* sum |v_{j,field(j)}|^2 x^2, lane f mod 4 */
};

/* Adds one feature (row [w | v], field g, value x) to s.  Summed in the
 * same loop as its B update so that these short dependency chains overlap
 * the row arithmetic. */
INLINE void add_sums(struct sums *s, const float *row, uint32_t g, uint32_t k, double x)
{
    const float *vg = row + 1 + (size_t)g * k;
    s->lin += (double)row[0] * x;
    s->sq += x * x;
    for (uint32_t f = 0; f < k; f++) {
        double d = (double)vg[f] * x;
        s->diag[f & 3] += d * d;
    }
}

/* Portable: b[0..n) += v[0..n) * x (= when fresh), four at a time through
 * vector extensions (SSE2 on plain x86-64).  0 + y is y (up to the sign of
 * a zero), so writing a fresh row gives the sums adding to zeros gave. */
typedef float f32x4 __attribute__((vector_size(16)));
typedef double f64x2 __attribute__((vector_size(16)));

INLINE void axpy_portable(double *restrict b, const float *restrict v, double x, uint32_t n,
                          bool fresh)
{
    uint32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        f32x4 f;
        f64x2 lo = {0, 0}, hi = {0, 0};
        memcpy(&f, v + i, sizeof f);
        f64x2 plo = __builtin_convertvector(__builtin_shufflevector(f, f, 0, 1), f64x2) * x;
        f64x2 phi = __builtin_convertvector(__builtin_shufflevector(f, f, 2, 3), f64x2) * x;
        if (!fresh) {
            memcpy(&lo, b + i, sizeof lo);
            memcpy(&hi, b + i + 2, sizeof hi);
            plo += lo;
            phi += hi;
        }
        memcpy(b + i, &plo, sizeof plo);
        memcpy(b + i + 2, &phi, sizeof phi);
    }
    for (; i < n; i++)
        b[i] = fresh ? (double)v[i] * x : b[i] + (double)v[i] * x;
}

/* B[field(j)] += v_j x_j and s += feature j for every feature of blk
 * (rows at t->rowp[j], else at rows, stride 1 + F k), in block order.  x = 1 when values ==
 * NULL (x * 1 is exact). */
INLINE void accumulate_portable(const struct target *t, const float *rows, const codec_block_t *blk,
                                uint32_t F, uint32_t k, struct sums *s)
{
    const uint32_t Fk = F * k, K = 1 + Fk;
    struct sums a = *s;
    for (uint32_t j = 0; j < blk->n; j++) {
        const float *r = t->rowp ? t->rowp[j] : rows + (size_t)j * K;
        const double x = blk->values ? (double)blk->values[j] : 1.0;
        const uint32_t g = field_of(blk->ids[j], F);
        add_sums(&a, r, g, k, x);
        bool fresh;
        double *b = row_for(t, g, Fk, &fresh);
        axpy_portable(b, r + 1, x, Fk, fresh);
    }
    *s = a;
}

#ifdef HAVE_AVX2_PATH
/* The same with 4-wide conversions. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void
accumulate_avx2(const struct target *t, const float *rows, const codec_block_t *blk, uint32_t F,
                uint32_t k, struct sums *s)
{
    const uint32_t Fk = F * k, K = 1 + Fk;
    struct sums a = *s;
    for (uint32_t j = 0; j < blk->n; j++) {
        const float *r = t->rowp ? t->rowp[j] : rows + (size_t)j * K;
        const double x = blk->values ? (double)blk->values[j] : 1.0;
        const uint32_t g = field_of(blk->ids[j], F);
        add_sums(&a, r, g, k, x);
        bool fresh;
        double *b = row_for(t, g, Fk, &fresh);
        const float *v = r + 1;
        const __m256d vx = _mm256_set1_pd(x);
        uint32_t i = 0;
        if (fresh) {
            for (; i + 4 <= Fk; i += 4)
                _mm256_storeu_pd(b + i, _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(v + i)), vx));
            for (; i < Fk; i++)
                b[i] = (double)v[i] * x;
            continue;
        }
        for (; i + 8 <= Fk; i += 8) {
            __m256d a0 = _mm256_cvtps_pd(_mm_loadu_ps(v + i));
            __m256d a1 = _mm256_cvtps_pd(_mm_loadu_ps(v + i + 4));
            a0 = _mm256_add_pd(_mm256_loadu_pd(b + i), _mm256_mul_pd(a0, vx));
            a1 = _mm256_add_pd(_mm256_loadu_pd(b + i + 4), _mm256_mul_pd(a1, vx));
            _mm256_storeu_pd(b + i, a0);
            _mm256_storeu_pd(b + i + 4, a1);
        }
        for (; i + 4 <= Fk; i += 4) {
            __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(v + i));
            _mm256_storeu_pd(b + i, _mm256_add_pd(_mm256_loadu_pd(b + i), _mm256_mul_pd(a, vx)));
        }
        for (; i < Fk; i++)
            b[i] += (double)v[i] * x;
    }
    *s = a;
}
#endif

/* Instances with constant k, so that the diagonal lanes stay in registers. */
static void acc_portable_4(const struct target *t, const float *rows, const codec_block_t *blk,
                           uint32_t F, struct sums *s)
{
    accumulate_portable(t, rows, blk, F, 4, s);
}

static void acc_portable_8(const struct target *t, const float *rows, const codec_block_t *blk,
                           uint32_t F, struct sums *s)
{
    accumulate_portable(t, rows, blk, F, 8, s);
}

static void acc_portable_any(const struct target *t, const float *rows, const codec_block_t *blk,
                             uint32_t F, uint32_t k, struct sums *s)
{
    accumulate_portable(t, rows, blk, F, k, s);
}

#ifdef HAVE_AVX2_PATH
__attribute__((target("avx2"))) static void acc_avx2_4(const struct target *t, const float *rows,
                                                       const codec_block_t *blk, uint32_t F,
                                                       struct sums *s)
{
    accumulate_avx2(t, rows, blk, F, 4, s);
}

__attribute__((target("avx2"))) static void acc_avx2_8(const struct target *t, const float *rows,
                                                       const codec_block_t *blk, uint32_t F,
                                                       struct sums *s)
{
    accumulate_avx2(t, rows, blk, F, 8, s);
}

__attribute__((target("avx2"))) static void acc_avx2_any(const struct target *t, const float *rows,
                                                         const codec_block_t *blk, uint32_t F,
                                                         uint32_t k, struct sums *s)
{
    accumulate_avx2(t, rows, blk, F, k, s);
}
#endif

/* B and s += the features of blk with the best loop for the CPU and k. */
static void accumulate(bool avx2, const struct target *t, const float *rows,
                       const codec_block_t *blk, uint32_t F, uint32_t k, struct sums *s)
{
#ifdef HAVE_AVX2_PATH
    if (avx2) {
        switch (k) {
        case 4:
            acc_avx2_4(t, rows, blk, F, s);
            return;
        case 8:
            acc_avx2_8(t, rows, blk, F, s);
            return;
        default:
            acc_avx2_any(t, rows, blk, F, k, s);
            return;
        }
    }
#endif
    (void)avx2;
    switch (k) {
    case 4:
        acc_portable_4(t, rows, blk, F, s);
        return;
    case 8:
        acc_portable_8(t, rows, blk, F, s);
        return;
    default:
        acc_portable_any(t, rows, blk, F, k, s);
        return;
    }
}

/* sum_{g<h} <B[g][h], B[h][g]> + 0.5 (sum_g |B[g][g]|^2 - diag), row g of B
 * at R[g].  The pairs (g, h) are read in (g, h, f) order into four
 * accumulators, pair (g, h) into accumulator (h - g - 1) mod 4, each of
 * four lanes f mod 4, and added ((a0 + a1) + (a2 + a3)) lane by lane, then
 * (l0 + l1) + (l2 + l3); the diagonal squares go to lanes f mod 4 of their
 * own.  (With one accumulator the chain of dependent adds was the loop's
 * limit.)  Elementwise multiplies and adds in a fixed order, never fused
 * (ffm.c is built with -ffp-contract=off): the SSE2 and AVX2 instances give
 * the same floats. */
typedef double f64x4 __attribute__((vector_size(32)));

/* acc's lanes f mod 4 += a[f] b[f], f < k. */
INLINE void dot_into(f64x4 *acc, const double *a, const double *b, uint32_t k)
{
    uint32_t f = 0;
    for (; f + 4 <= k; f += 4) {
        f64x4 x, y;
        memcpy(&x, a + f, sizeof x);
        memcpy(&y, b + f, sizeof y);
        *acc += x * y;
    }
    for (; f < k; f++)
        (*acc)[f & 3] += a[f] * b[f];
}

INLINE double pair_sum(const double *const *R, uint32_t F, uint32_t k, double diag)
{
    f64x4 a0 = {0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0, d = a0;
    for (uint32_t g = 0; g < F; g++) {
        const double *Bg = R[g];
        const size_t gk = (size_t)g * k;
        dot_into(&d, Bg + gk, Bg + gk, k);
        uint32_t h = g + 1;
        for (; h + 4 <= F; h += 4) {
            dot_into(&a0, Bg + (size_t)h * k, R[h] + gk, k);
            dot_into(&a1, Bg + (size_t)(h + 1) * k, R[h + 1] + gk, k);
            dot_into(&a2, Bg + (size_t)(h + 2) * k, R[h + 2] + gk, k);
            dot_into(&a3, Bg + (size_t)(h + 3) * k, R[h + 3] + gk, k);
        }
        if (h < F)
            dot_into(&a0, Bg + (size_t)h * k, R[h] + gk, k);
        if (h + 1 < F)
            dot_into(&a1, Bg + (size_t)(h + 1) * k, R[h + 1] + gk, k);
        if (h + 2 < F)
            dot_into(&a2, Bg + (size_t)(h + 2) * k, R[h + 2] + gk, k);
    }
    f64x4 p = (a0 + a1) + (a2 + a3);
    double pairs = (p[0] + p[1]) + (p[2] + p[3]);
    double sqr = (d[0] + d[1]) + (d[2] + d[3]);
    return pairs + 0.5 * (sqr - diag);
}

/* Instances with constant k (unrolled), portable and AVX2 (one
 * instruction per four lanes instead of two). */
#define PAIR_INSTANCES(attr, name)                                                             \
    attr static double name##_4(const double *const *R, uint32_t F, double diag)               \
    {                                                                                          \
        return pair_sum(R, F, 4, diag);                                                        \
    }                                                                                          \
    attr static double name##_8(const double *const *R, uint32_t F, double diag)               \
    {                                                                                          \
        return pair_sum(R, F, 8, diag);                                                        \
    }                                                                                          \
    attr static double name##_any(const double *const *R, uint32_t F, uint32_t k, double diag) \
    {                                                                                          \
        return pair_sum(R, F, k, diag);                                                        \
    }

PAIR_INSTANCES(, pair_portable)
#ifdef HAVE_AVX2_PATH
PAIR_INSTANCES(__attribute__((target("avx2"))), pair_avx2)
#endif

static inline double pairs_of(bool avx2, const double *const *R, uint32_t F, uint32_t k,
                              double diag)
{
#ifdef HAVE_AVX2_PATH
    if (avx2) {
        switch (k) {
        case 4:
            return pair_avx2_4(R, F, diag);
        case 8:
            return pair_avx2_8(R, F, diag);
        default:
            return pair_avx2_any(R, F, k, diag);
        }
    }
#endif
    (void)avx2;
    switch (k) {
    case 4:
        return pair_portable_4(R, F, diag);
    case 8:
        return pair_portable_8(R, F, diag);
    default:
        return pair_portable_any(R, F, k, diag);
    }
}

static inline double diag_of(const struct sums *s)
{
    return (s->diag[0] + s->diag[1]) + (s->diag[2] + s->diag[3]);
}

static inline float finish(double bias, const struct sums *s, double pairs, bool norm)
{
    if (norm && s->sq > 0) {
        double inv = 1.0 / s->sq;
        return sigmoid(bias + sqrt(inv) * s->lin + inv * pairs);
    }
    return sigmoid(bias + s->lin + pairs);
}

/* Builds the shared block's B in Bs and its sums in *ss (rows from rows or
 * rowp, as struct target says); returns its pair sum. */
static double shared_part(bool avx2, const float *rows, const float *const *rowp,
                          const codec_block_t *shared, uint32_t F, uint32_t k, double *Bs,
                          uint8_t *touched, struct sums *ss)
{
    const uint32_t Fk = F * k;
    const double *R[FFM_MAX_FIELDS];
    *ss = (struct sums){0, 0, {0, 0, 0, 0}};
    struct target ts = {.B = Bs, .Bs = NULL, .touched = touched, .rowp = rowp};
    memset(touched, 0, F);
    accumulate(avx2, &ts, rows, shared, F, k, ss);
    for (uint32_t g = 0; g < F; g++)
        if (!touched[g])
            memset(Bs + (size_t)g * Fk, 0, (size_t)Fk * sizeof *Bs);
    for (uint32_t g = 0; g < F; g++)
        R[g] = Bs + (size_t)g * Fk;
    return pairs_of(avx2, R, F, k, diag_of(ss));
}

static bool have_avx2(void)
{
#ifdef HAVE_AVX2_PATH
    return __builtin_cpu_supports("avx2");
#else
    return false;
#endif
}

void model_ffm_scores(const codec_block_t *shared, const codec_block_t *items, uint32_t n_items,
                const float *rows, uint32_t F, uint32_t k, bool norm, double *work, float *scores)
{
    const uint32_t Fk = F * k, K = 1 + Fk;
    const size_t FFk = (size_t)F * Fk;
    double *Bs = work, *B = work + FFk;
    uint8_t *touched = (uint8_t *)(work + 2 * FFk);
    const double *R[FFM_MAX_FIELDS];
    const bool avx2 = have_avx2();
    const double bias = (double)rows[0];
    rows += K;

    struct sums ss;
    const double base_pairs = shared_part(avx2, rows, NULL, shared, F, k, Bs, touched, &ss);
    rows += (size_t)shared->n * K;

    struct target ti = {.B = B, .Bs = Bs, .touched = touched, .rowp = NULL};
    for (uint32_t i = 0; i < n_items; i++) {
        const codec_block_t *it = &items[i];
        if (it->n == 0) {
            scores[i] = finish(bias, &ss, base_pairs, norm);
            continue;
        }
        struct sums s = ss;
        memset(touched, 0, F);
        accumulate(avx2, &ti, rows, it, F, k, &s);
        rows += (size_t)it->n * K;
        for (uint32_t g = 0; g < F; g++)
            R[g] = (touched[g] ? B : Bs) + (size_t)g * Fk;
        scores[i] = finish(bias, &s, pairs_of(avx2, R, F, k, diag_of(&s)), norm);
    }
}

float model_ffm_score_sample(const codec_block_t *blk, const float *const *rowp, float bias,
                             uint32_t F, uint32_t k, bool norm, double *work)
{
    struct sums ss;
    const size_t FFk = (size_t)F * F * k;
    const double pairs =
        shared_part(have_avx2(), NULL, rowp, blk, F, k, work, (uint8_t *)(work + 2 * FFk), &ss);
    return finish((double)bias, &ss, pairs, norm);
}
