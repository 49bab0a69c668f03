/*
 * test_ffm.c — FFM scoring (ffm.c) and training (train_ffm.c).
 *
 *   - model_ffm_scores() equals the naive O(n^2) pairwise margin (to 1e-5
 *     relative on the score) on random rows: F from 1 to 20, k from 1 to 13
 *     (4, 8 and odd k), with and without instance normalisation, values or
 *     binary, shared-only / item-only / both, fields >= F (taken mod F);
 *     the same request gives the same floats twice, a sample scores to the
 *     bit the same however it is split between shared block and item, and
 *     the work space holds the shared block's field aggregates B;
 *     model_ffm_score_sample() on row pointers gives that float and B too;
 *   - the portable and AVX2 row loops and pair readings give the same
 *     floats;
 *   - the trainer's analytic margin gradient matches central finite
 *     differences of the naive margin (fields with one, several or no
 *     features, a repeated id, norm on and off);
 *   - one SGD step on a 2-feature sample equals the step computed by hand,
 *     and the v blocks without a data gradient do not move;
 *   - train -> export -> model_load -> model_score (the sample as shared
 *     block, one empty item) equals train_ffm_predict bit for bit (SGD,
 *     Adagrad, norm off, repeated and unseen ids); skipped when model_load
 *     does not serve FFM yet;
 *   - the initialisation depends on the seed only; bad options are refused
 *     with a sentence;
 *   - with --quality: tltrain's FFM defaults on the four data sets under
 *     TL_SHARED_DATA must reach the better of LIBFFM/xLearn + 0.005 logloss,
 *     - 0.005 AUC (exit 77 when the data is absent);
 *   - with --bench: model_ffm_scores() time for the standard request (F 20, k 4,
 *     300 shared features, 200 items x 200 features), rows already fetched.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

/* ffm.c itself, to reach its static row loops (the portable and the AVX2
 * one); the library's copy of ffm.o is then not linked in. */
#include "model/ffm.c"
#include "model/train_impl.h"
#include "model/metrics.h"
#include "model/model.h"
#include "model/reader.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* uniform in [lo, hi) */
static double urand(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * (double)(rnd(s) >> 11) * 0x1.0p-53;
}

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Naive FFM margin over n features: rows[a] = [w | v_0 .. v_{F-1}] (stride
 * 1 + F k, double), fld[a] their fields, x[a] their values. */
static double naive_margin(double bias, const double *rows, const uint32_t *fld, const double *x,
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

/* ---- model_ffm_scores vs naive ---------------------------------------------------- */

enum { NKEYS = 300, MAXN = 512 };

struct kcase {
    uint32_t F, k;
};

static void test_scores_vs_naive(void **state)
{
    (void)state;
    static const struct kcase cases[] = {{1, 1}, {1, 4}, {2, 3}, {3, 4}, {4, 8},
                                         {7, 5}, {5, 13}, {20, 4}, {9, 8}, {6, 1}};
    uint64_t s = 0xfeedfacecafebeefULL;
    int checked = 0, unsaturated = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const uint32_t F = cases[ci].F, k = cases[ci].k, K = 1 + F * k;
        /* key i (1..NKEYS) -> a random row; key index 0 = unknown (zeros) */
        double *keyrow = calloc((size_t)(NKEYS + 1) * K, sizeof *keyrow);
        uint64_t *keyid = calloc(NKEYS + 1, sizeof *keyid);
        float *rows = malloc((size_t)(MAXN + 1) * K * sizeof *rows);
        double *ref = malloc((size_t)MAXN * K * sizeof *ref);
        double *work = malloc(model_ffm_work_doubles(F, k) * sizeof *work);
        assert_non_null(keyrow);
        assert_non_null(keyid);
        assert_non_null(rows);
        assert_non_null(ref);
        assert_non_null(work);
        for (int trial = 0; trial < 36; trial++) {
            const bool norm = trial & 1, use_vals = (trial >> 1) & 1;
            const int layout = (trial >> 2) % 3; /* 0 shared only, 1 items only, 2 both */
            const double a = norm ? 0.8 : 0.12;
            for (uint32_t i = 1; i <= NKEYS; i++) {
                keyid[i] = ((rnd(&s) % (F + 3)) << 56) | (rnd(&s) >> 20); /* field may be >= F */
                for (uint32_t c = 0; c < K; c++)
                    keyrow[(size_t)i * K + c] = (float)urand(&s, -a, a);
            }
            enum { ITEMS = 6 };
            static uint64_t ids[MAXN];
            static float vals[MAXN];
            static uint32_t which[MAXN];
            uint32_t ns = layout == 1 ? 0 : (uint32_t)(rnd(&s) % 50) + 1;
            uint32_t ni[ITEMS], total = ns;
            for (int i = 0; i < ITEMS; i++) {
                ni[i] = layout == 0 || i == 2 ? 0 : (uint32_t)(rnd(&s) % 30) + 1;
                total += ni[i];
            }
            for (uint32_t j = 0; j < total; j++) {
                uint32_t i = (uint32_t)(rnd(&s) % (NKEYS + 30));
                which[j] = i <= NKEYS ? i : 0;
                ids[j] = which[j] ? keyid[which[j]] : ((uint64_t)(j % 5) << 56) | (UINT64_C(1) << 50) | j;
                vals[j] = j % 17 == 3 ? 0.0f : (float)urand(&s, -2, 2);
            }
            /* rows as model.c lays them out: bias, shared, item 0, item 1 ... */
            const double bias = urand(&s, -1, 1);
            for (uint32_t c = 0; c < K; c++)
                rows[c] = c == 0 ? (float)bias : (float)urand(&s, -9, 9); /* bias's v unused */
            for (uint32_t j = 0; j < total; j++)
                for (uint32_t c = 0; c < K; c++)
                    rows[(size_t)(1 + j) * K + c] = (float)keyrow[(size_t)which[j] * K + c];
            codec_block_t shared = {ids, use_vals ? vals : NULL, ns};
            codec_block_t items[ITEMS];
            uint32_t off = ns;
            for (int i = 0; i < ITEMS; i++) {
                items[i] = (codec_block_t){ids + off, use_vals ? vals + off : NULL, ni[i]};
                off += ni[i];
            }
            float scores[ITEMS], again[ITEMS];
            model_ffm_scores(&shared, items, ITEMS, rows, F, k, norm, work, scores);

            /* the shared block's B is left in work[0, F F k) */
            for (uint32_t g = 0; g < F; g++)
                for (uint32_t h = 0; h < F; h++)
                    for (uint32_t f = 0; f < k; f++) {
                        double want = 0;
                        for (uint32_t j = 0; j < ns; j++)
                            if (ffm_field(ids[j], F) == g)
                                want += keyrow[(size_t)which[j] * K + 1 + h * k + f] *
                                        (use_vals ? (double)vals[j] : 1.0);
                        double got = work[((size_t)g * F + h) * k + f];
                        if (fabs(got - want) > 1e-12 * (1 + fabs(want)))
                            fail_msg("F %u k %u: B[%u][%u][%u] = %.17g, want %.17g", F, k, g, h,
                                     f, got, want);
                    }

            off = ns;
            for (int i = 0; i < ITEMS; i++) {
                uint32_t n = 0;
                static uint32_t fld[MAXN];
                static double x[MAXN];
                for (uint32_t pass = 0; pass < 2; pass++) {
                    uint32_t from = pass == 0 ? 0 : off, cnt = pass == 0 ? ns : ni[i];
                    for (uint32_t j = from; j < from + cnt; j++, n++) {
                        memcpy(ref + (size_t)n * K, keyrow + (size_t)which[j] * K,
                               K * sizeof *ref);
                        fld[n] = (uint32_t)((ids[j] >> 56) % F);
                        x[n] = use_vals ? (double)vals[j] : 1.0;
                    }
                }
                double want = sigmoid_d(naive_margin(bias, ref, fld, x, n, F, k, norm));
                if (fabs((double)scores[i] - want) > 1e-5 * want)
                    fail_msg("F %u k %u norm %d values %d layout %d item %d: ffm %.9g naive %.9g",
                             F, k, norm, use_vals, layout, i, scores[i], want);
                checked++;
                unsaturated += want > 0.02 && want < 0.98;
                off += ni[i];
            }

            /* the same request, the same floats */
            model_ffm_scores(&shared, items, ITEMS, rows, F, k, norm, work, again);
            assert_memory_equal(scores, again, sizeof scores);

            /* item 1's sample as one shared block and an empty item: the same
             * float as split (rows copied so that they are contiguous) */
            if (ni[1] > 0) {
                static float rows2[(MAXN + 1) * (1 + 20 * 13)];
                static uint64_t ids2[MAXN];
                static float vals2[MAXN];
                uint32_t o1 = ns + ni[0];
                memcpy(rows2, rows, (size_t)(1 + ns) * K * sizeof *rows);
                memcpy(rows2 + (size_t)(1 + ns) * K, rows + (size_t)(1 + o1) * K,
                       (size_t)ni[1] * K * sizeof *rows);
                memcpy(ids2, ids, ns * sizeof *ids);
                memcpy(ids2 + ns, ids + o1, ni[1] * sizeof *ids);
                memcpy(vals2, vals, ns * sizeof *vals);
                memcpy(vals2 + ns, vals + o1, ni[1] * sizeof *vals);
                codec_block_t whole = {ids2, use_vals ? vals2 : NULL, ns + ni[1]};
                codec_block_t none = {NULL, NULL, 0};
                float one;
                model_ffm_scores(&whole, &none, 1, rows2, F, k, norm, work, &one);
                if (memcmp(&one, &scores[1], sizeof one) != 0)
                    fail_msg("F %u k %u: split %.9g, unsplit %.9g", F, k, scores[1], one);
                /* ... and model_ffm_score_sample on row pointers (rows reversed in
                 * memory, so that consecutive ones would be wrong): the same
                 * float and the same B */
                static float rows3[(MAXN + 1) * (1 + 20 * 13)];
                static const float *rp[MAXN];
                static double bcopy[20 * 20 * 13];
                const size_t FFk = (size_t)F * F * k;
                for (uint32_t j = 0; j < whole.n; j++) {
                    float *dst = rows3 + (size_t)(whole.n - 1 - j) * K;
                    memcpy(dst, rows2 + (size_t)(1 + j) * K, K * sizeof *dst);
                    rp[j] = dst;
                }
                memcpy(bcopy, work, FFk * sizeof *bcopy);
                memset(work, 0x55, FFk * sizeof *work);
                float viap = model_ffm_score_sample(&whole, rp, rows2[0], F, k, norm, work);
                if (memcmp(&viap, &one, sizeof one) != 0)
                    fail_msg("F %u k %u: model_ffm_score_sample %.9g, model_ffm_scores %.9g", F, k,
                             viap, one);
                assert_memory_equal(work, bcopy, FFk * sizeof *bcopy);
            }
        }
        free(keyrow);
        free(keyid);
        free(rows);
        free(ref);
        free(work);
    }
    assert_int_equal(checked, 10 * 36 * 6);
    assert_true(unsaturated > checked / 4); /* the comparisons were not all 0 == 0 or 1 == 1 */
}

static void test_empty_request(void **state)
{
    (void)state;
    const uint32_t F = 3, k = 2, K = 1 + F * k;
    float rows[K];
    for (uint32_t c = 0; c < K; c++)
        rows[c] = c == 0 ? -0.75f : 5.0f;
    assert_true(model_ffm_work_doubles(F, k) >= 2 * F * F * k);
    double *work = malloc(model_ffm_work_doubles(F, k) * sizeof *work);
    assert_non_null(work);
    codec_block_t none = {NULL, NULL, 0};
    codec_block_t items[2] = {{NULL, NULL, 0}, {NULL, NULL, 0}};
    float sc[2];
    for (int norm = 0; norm < 2; norm++) {
        model_ffm_scores(&none, items, 2, rows, F, k, norm, work, sc);
        assert_float_equal(sc[0], sigmoid_d(-0.75), 1e-7); /* s = 1 for an empty sample */
        assert_memory_equal(&sc[0], &sc[1], sizeof sc[0]);
    }
    free(work);
}

/* The portable and the AVX2 row loops give the same B and sums to the bit
 * (k 4, 8 and others; values or binary; a touched-row target as items use). */
static void test_row_loops_agree(void **state)
{
    (void)state;
#ifdef HAVE_AVX2_PATH
    if (!__builtin_cpu_supports("avx2")) {
        fprintf(stderr, "no AVX2 on this host: only the portable loop runs here\n");
        skip();
    }
    static const struct kcase cases[] = {{20, 4}, {3, 8}, {7, 5}, {1, 1}, {13, 3}, {2, 9}};
    uint64_t s = 0xabcdef12345ULL;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const uint32_t F = cases[ci].F, k = cases[ci].k, K = 1 + F * k, n = 97;
        const size_t FFk = (size_t)F * F * k;
        float *rows = malloc((size_t)n * K * sizeof *rows);
        uint64_t ids[97];
        float vals[97];
        double *Bs = malloc(FFk * sizeof *Bs), *B[2];
        B[0] = malloc(FFk * sizeof(double));
        B[1] = malloc(FFk * sizeof(double));
        assert_non_null(rows);
        assert_non_null(Bs);
        assert_non_null(B[0]);
        assert_non_null(B[1]);
        for (size_t i = 0; i < (size_t)n * K; i++)
            rows[i] = (float)urand(&s, -1, 1);
        for (uint32_t j = 0; j < n; j++) {
            ids[j] = ((rnd(&s) % (F + 2)) << 56) | j;
            vals[j] = (float)urand(&s, -3, 3);
        }
        for (size_t i = 0; i < FFk; i++)
            Bs[i] = urand(&s, -1, 1);
        for (int use_vals = 0; use_vals < 4; use_vals++) {
            /* 0, 1: an item's rows (first touch copies Bs); 2, 3: the shared
             * block's (first touch writes) */
            codec_block_t blk = {ids, use_vals & 1 ? vals : NULL, n};
            struct sums sm[2];
            uint8_t touched[2][FFM_MAX_FIELDS];
            for (int path = 0; path < 2; path++) {
                memset(B[path], 0x7f, FFk * sizeof(double)); /* untouched rows: garbage */
                memset(touched[path], 0, F);
                sm[path] = (struct sums){0.25, 1.5, {0.125, 0, 0, 2}};
                struct target t = {
                    .B = B[path], .Bs = use_vals < 2 ? Bs : NULL, .touched = touched[path]};
                accumulate(path == 1, &t, rows, &blk, F, k, &sm[path]);
            }
            assert_memory_equal(touched[0], touched[1], F);
            /* the pair readings agree too, on the rows just built */
            const double *R[FFM_MAX_FIELDS];
            for (uint32_t g = 0; g < F; g++)
                R[g] = (touched[0][g] ? B[0] : Bs) + (size_t)g * F * k;
            double pp[2] = {pairs_of(false, R, F, k, 0.5), pairs_of(true, R, F, k, 0.5)};
            assert_memory_equal(&pp[0], &pp[1], sizeof pp[0]);
            assert_true(pp[0] != 0);
            for (uint32_t g = 0; g < F; g++)
                if (touched[0][g])
                    assert_memory_equal(B[0] + (size_t)g * F * k, B[1] + (size_t)g * F * k,
                                        (size_t)F * k * sizeof(double));
            assert_memory_equal(&sm[0], &sm[1], sizeof sm[0]);
            assert_true(sm[0].lin != 0.25 && sm[0].diag[0] != 0.125);
        }
        free(rows);
        free(Bs);
        free(B[0]);
        free(B[1]);
    }
#else
    fprintf(stderr, "not x86-64: only the portable loop exists\n");
    skip();
#endif
}

/* ---- trainer: gradient -------------------------------------------------------- */

static train_ffm_t *make_ffm(train_optimizer_t o, uint32_t F, uint32_t k, double alpha,
                             double l2, double sd, bool norm)
{
    train_ffm_options_t opt;
    train_ffm_defaults(TRAIN_ADAGRAD, &opt);
    opt.optimizer = o;
    opt.fields = F;
    opt.k = k;
    opt.alpha = alpha;
    opt.l2 = l2;
    opt.l2_v = l2;
    opt.init_stdev = sd;
    opt.norm = norm;
    opt.seed = 7;
    train_ffm_t *t;
    char why[160];
    if (train_ffm_create(&opt, &t, why, sizeof why) != 0)
        fail_msg("train_ffm_create: %s", why);
    return t;
}

static void test_gradient_fd(void **state)
{
    (void)state;
    enum { N = 11, F = 5, KF = 3, K = 1 + F * KF };
    /* fields: 0 x1, 1 x3, 2 none, 3 x2 (one of them repeated), 4 x1, and
     * 6 (= 1 mod 5) x1; one value 0 */
    static const uint32_t fields[N] = {0, 1, 1, 3, 1, 4, 3, 6, 3, 1, 0};
    uint64_t s = 0x1234567887654321ULL;
    for (int norm = 0; norm < 2; norm++) {
        uint64_t ids[N];
        float vals[N];
        for (uint32_t j = 0; j < N; j++) {
            ids[j] = ((uint64_t)fields[j] << 56) | (rnd(&s) >> 20);
            vals[j] = (float)urand(&s, 0.25, 1.5);
        }
        ids[8] = ids[3]; /* a repeated id */
        vals[10] = 0;    /* no gradient at all */
        train_ffm_t *t = make_ffm(TRAIN_SGD, F, KF, 0.05, 0.0, 0.3, norm);
        assert_int_equal(train_ffm_update(t, ids, vals, N, 1.0f, 1.0f, NULL), 0);

        double rows[N * K], x[N], bias, db;
        uint32_t fld[N];
        float row[K];
        assert_int_equal(train_ffm_weights(t, MODEL_BIAS_ID, row), 1);
        bias = row[0];
        for (uint32_t j = 0; j < N; j++) {
            /* the x = 0 feature took no step, so it has no row yet (its row
             * does not matter to the margin) */
            assert_int_equal(train_ffm_weights(t, ids[j], row), j != 10);
            for (uint32_t c = 0; c < K; c++)
                rows[j * K + c] = j != 10 ? row[c] : 0.0;
            x[j] = vals[j];
            fld[j] = ffm_field(ids[j], F);
        }
        double m0 = naive_margin(bias, rows, fld, x, N, F, KF, norm);
        float pred = train_ffm_predict(t, ids, vals, N);
        assert_float_equal(pred, sigmoid_d(m0), 1e-6);

        static double grad[N * K];
        assert_int_equal(train_ffm_margin_gradient(t, ids, vals, N, &db, grad), 0);
        assert_true(db == 1.0);
        const double h = 1e-5;
        int nonzero = 0, zero = 0;
        for (uint32_t j = 0; j < N; j++) {
            if (j == 8)
                continue; /* ids[8] is ids[3]: checked with it */
            for (uint32_t c = 0; c < K; c++) {
                double probe[N * K];
                memcpy(probe, rows, sizeof probe);
                double analytic = grad[j * K + c];
                if (j == 3)
                    analytic += grad[8 * K + c];
                probe[j * K + c] += h;
                if (j == 3)
                    probe[8 * K + c] += h;
                double up = naive_margin(bias, probe, fld, x, N, F, KF, norm);
                probe[j * K + c] -= 2 * h;
                if (j == 3)
                    probe[8 * K + c] -= 2 * h;
                double down = naive_margin(bias, probe, fld, x, N, F, KF, norm);
                double fd = (up - down) / (2 * h);
                if (fabs(fd - analytic) > 1e-6 + 1e-5 * fabs(fd))
                    fail_msg("norm %d feature %u coordinate %u: finite difference %.9g, "
                             "analytic %.9g",
                             norm, j, c, fd, analytic);
                if (fd == 0) {
                    zero++;
                    assert_true(analytic == 0); /* exactly: those blocks are skipped */
                } else {
                    nonzero++;
                }
            }
        }
        /* field 2 has no feature: every v_{j,2} has no gradient, nor has
         * the x = 0 feature, nor v_{j,0} of feature 0 (alone in field 0 but
         * for the x = 0 one) */
        assert_true(zero >= (N - 2) * KF + K - 1);
        assert_true(nonzero > N * K / 2);
        train_ffm_destroy(t);
    }
}

/* ---- trainer: one SGD step by hand ------------------------------------------- */

static void test_sgd_step_by_hand(void **state)
{
    (void)state;
    enum { F = 2, KF = 2, K = 1 + F * KF };
    const double alpha = 0.1, ratio = 0.5, l2 = 0.01, l2v = 0.02;
    const double alpha_w = alpha * ratio; /* the bias and w step at alpha x w_ratio */
    train_ffm_options_t opt;
    train_ffm_defaults(TRAIN_ADAGRAD, &opt);
    opt.optimizer = TRAIN_SGD;
    opt.fields = F;
    opt.k = KF;
    opt.alpha = alpha;
    opt.w_ratio = ratio;
    opt.l2 = l2;
    opt.l2_v = l2v;
    opt.init_stdev = 0.5;
    opt.norm = true;
    train_ffm_t *t;
    assert_int_equal(train_ffm_create(&opt, &t, NULL, 0), 0);
    const uint64_t ids[2] = {(UINT64_C(0) << 56) | 1, (UINT64_C(1) << 56) | 2};
    const float vals[2] = {0.5f, 2.0f};
    const double xa = 0.5, xb = 2.0;
    assert_int_equal(train_ffm_update(t, ids, vals, 2, 1.0f, 1.0f, NULL), 0);

    float b0[K], a0[K], c0[K], b1[K], a1[K], c1[K];
    assert_int_equal(train_ffm_weights(t, MODEL_BIAS_ID, b0), 1);
    assert_int_equal(train_ffm_weights(t, ids[0], a0), 1);
    assert_int_equal(train_ffm_weights(t, ids[1], c0), 1);
    /* a (field 0) meets b (field 1) through v_{a,1} and v_{b,0} */
    const double s2 = 1.0 / (xa * xa + xb * xb), s = sqrt(s2);
    double dot = 0;
    for (int f = 0; f < KF; f++)
        dot += (double)a0[1 + 1 * KF + f] * c0[1 + 0 * KF + f];
    double margin = b0[0] + s * (a0[0] * xa + c0[0] * xb) + s2 * dot * xa * xb;
    double p = sigmoid_d(margin);
    float pout;
    assert_int_equal(train_ffm_update(t, ids, vals, 2, 0.0f, 1.0f, &pout), 0);
    assert_float_equal(pout, p, 1e-6);
    const double g = (double)pout; /* label 0 */
    assert_int_equal(train_ffm_weights(t, MODEL_BIAS_ID, b1), 1);
    assert_int_equal(train_ffm_weights(t, ids[0], a1), 1);
    assert_int_equal(train_ffm_weights(t, ids[1], c1), 1);
    assert_float_equal(b1[0], b0[0] - alpha_w * g, 1e-6);
    assert_float_equal(a1[0], a0[0] - alpha_w * (g * s * xa + l2 * a0[0]), 1e-6);
    assert_float_equal(c1[0], c0[0] - alpha_w * (g * s * xb + l2 * c0[0]), 1e-6);
    for (int f = 0; f < KF; f++) {
        double va = a0[1 + KF + f], vc = c0[1 + f];
        assert_float_equal(a1[1 + KF + f], va - alpha * (g * s2 * xa * xb * vc + l2v * va), 1e-6);
        assert_float_equal(c1[1 + f], vc - alpha * (g * s2 * xa * xb * va + l2v * vc), 1e-6);
    }
    /* v_{a,0} and v_{b,1} have no data gradient: untouched, not even by L2 */
    assert_memory_equal(a1 + 1, a0 + 1, KF * sizeof(float));
    assert_memory_equal(c1 + 1 + KF, c0 + 1 + KF, KF * sizeof(float));
    assert_true(a1[1] != 0); /* ... and not trivially 0 */
    train_ffm_destroy(t);
}

/* ---- export round trip ----------------------------------------------------- */

struct rt_case {
    train_optimizer_t opt;
    uint32_t F, k;
    bool norm;
};

static void test_export_roundtrip(void **state)
{
    (void)state;
    static const struct rt_case cases[] = {
        {TRAIN_SGD, 6, 3, true}, {TRAIN_ADAGRAD, 20, 4, true}, {TRAIN_ADAGRAD, 4, 8, false}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const struct rt_case *rc = &cases[ci];
        train_ffm_options_t opt;
        train_ffm_defaults(TRAIN_ADAGRAD, &opt);
        opt.optimizer = rc->opt;
        opt.fields = rc->F;
        opt.k = rc->k;
        opt.norm = rc->norm;
        opt.alpha = rc->opt == TRAIN_SGD ? 0.1 : 0.05;
        train_ffm_t *t;
        char why[160];
        if (train_ffm_create(&opt, &t, why, sizeof why) != 0)
            fail_msg("create: %s", why);
        enum { ROWS = 400, NF = 16 };
        static uint64_t ids[ROWS][NF];
        static float vals[ROWS][NF];
        uint64_t s = 88172645463325252ULL + ci;
        for (int i = 0; i < ROWS; i++) {
            for (int j = 0; j < NF; j++) {
                ids[i][j] = ((uint64_t)(j % (rc->F + 1)) << 56) | (rnd(&s) % 60 + 1);
                vals[i][j] = (float)(rnd(&s) % 1000) / 500.0f;
            }
            if (i % 10 == 0)
                ids[i][NF - 1] = ids[i][0]; /* a repeated id */
            float y = ((ids[i][0] ^ ids[i][1]) & 3) == 0 ? 1.0f : 0.0f;
            if (i < ROWS - 50) /* the last rows keep unseen ids */
                assert_int_equal(train_ffm_update(t, ids[i], vals[i], NF, y, 1.0f, NULL), 0);
        }
        char dir[512];
        snprintf(dir, sizeof dir, "/tmp/tl_ffm_export_%d_%zu", (int)getpid(), ci);
        store_meta_t meta = {.model_name = "ffm_test", .version = 5};
        store_error_t err;
        if (train_ffm_export(t, dir, &meta, &err) != 0)
            fail_msg("export: %s", err.msg);
        model_t *m;
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (model_load(dir, 1, &m, &err) != 0) {
            assert_int_equal(system(cmd), 0);
            train_ffm_destroy(t);
            if (strstr(err.msg, "is not supported")) { /* model.c without FFM */
                fprintf(stderr, "model_load does not serve FFM yet (%s): skipped\n", err.msg);
                skip();
            }
            fail_msg("model_load: %s", err.msg);
        }
        assert_int_equal(model_meta(m)->model_kind, STORE_MODEL_FFM);
        assert_int_equal(model_meta(m)->version, 5);
        assert_int_equal(model_value_floats(m), 1 + rc->F * rc->k);
        char want[16];
        snprintf(want, sizeof want, "%u", rc->F);
        assert_string_equal(store_extras_get(model_extras(m), "fields"), want);
        snprintf(want, sizeof want, "%u", rc->k);
        assert_string_equal(store_extras_get(model_extras(m), "k"), want);
        assert_string_equal(store_extras_get(model_extras(m), "norm"), rc->norm ? "1" : "0");
        model_scratch_t *sc;
        assert_int_equal(model_scratch_create(NF, &sc), 0);
        assert_true(model_scratch_fit(sc, m, NF) >= 0);
        double sumsq = 0;
        for (int i = 0; i < ROWS; i++) {
            codec_block_t shared = {.ids = ids[i], .values = vals[i], .n = NF};
            codec_block_t item = {.ids = ids[i] + NF, .values = NULL, .n = 0};
            float score, split;
            assert_int_equal(model_score(m, &shared, &item, 1, &score, sc), 0);
            float mine = train_ffm_predict(t, ids[i], vals[i], NF);
            if (memcmp(&score, &mine, sizeof score) != 0)
                fail_msg("case %zu row %d: served %.9g, trainer %.9g", ci, i, score, mine);
            /* split as shared + item: the same float (ffm.c sums in block order) */
            codec_block_t sh2 = {ids[i], vals[i], NF / 2};
            codec_block_t it2 = {ids[i] + NF / 2, vals[i] + NF / 2, NF - NF / 2};
            assert_int_equal(model_score(m, &sh2, &it2, 1, &split, sc), 0);
            if (memcmp(&split, &mine, sizeof split) != 0)
                fail_msg("case %zu row %d: split %.9g, trainer %.9g", ci, i, split, mine);
            sumsq += (double)(mine - 0.5f) * (mine - 0.5f);
        }
        assert_true(sumsq > 1.0); /* the model learned something */
        model_scratch_destroy(sc);
        model_destroy(m);
        assert_int_equal(system(cmd), 0);
        train_ffm_destroy(t);
    }
}

/* ---- initialisation and options ------------------------------------------- */

static void test_seeded_init(void **state)
{
    (void)state;
    const uint64_t ids[3] = {(UINT64_C(0) << 56) | 5, (UINT64_C(1) << 56) | 6,
                             (UINT64_C(2) << 56) | 7};
    float p[3];
    for (int i = 0; i < 3; i++) {
        train_ffm_options_t opt;
        train_ffm_defaults(TRAIN_ADAGRAD, &opt);
        opt.fields = 3;
        opt.seed = i == 2 ? 99 : 1;
        train_ffm_t *t;
        assert_int_equal(train_ffm_create(&opt, &t, NULL, 0), 0);
        assert_int_equal(train_ffm_update(t, ids, NULL, 3, 1.0f, 1.0f, &p[i]), 0);
        train_ffm_destroy(t);
    }
    assert_memory_equal(&p[0], &p[1], sizeof p[0]);
    assert_true(p[0] != p[2]);
}

static void expect_bad(const train_ffm_options_t *opt, const char *sentence)
{
    train_ffm_t *t = NULL;
    char why[160] = "";
    assert_int_equal(train_ffm_create(opt, &t, why, sizeof why), -EINVAL);
    assert_null(t);
    assert_string_equal(why, sentence);
}

static void test_bad_options(void **state)
{
    (void)state;
    train_ffm_options_t opt;
    train_ffm_t *t;
    train_ffm_defaults(TRAIN_ADAGRAD, &opt);
    expect_bad(&opt, "fields must be 1..256 for FFM"); /* the caller must set fields */
    opt.fields = 257;
    expect_bad(&opt, "fields must be 1..256 for FFM");
    opt.fields = 20;
    opt.optimizer = TRAIN_FTRL; /* [w | v | z | n | Gv]: 2 (1 + F k) + 1 floats */
    opt.k = 26;
    expect_bad(&opt, "k must be 1..25 for FFM with 20 fields and ftrl "
                     "(1 + fields x k must be <= 511)");
    opt.k = 25; /* 2 (1 + 500) + 1 = 1003 floats of state */
    assert_int_equal(train_ffm_create(&opt, &t, NULL, 0), 0);
    train_ffm_destroy(t);
    opt.fields = 255;
    opt.k = 2; /* 2 (1 + 510) + 1 = 1023: the widest FTRL row */
    assert_int_equal(train_ffm_create(&opt, &t, NULL, 0), 0);
    train_ffm_destroy(t);
    opt.fields = 256;
    expect_bad(&opt, "k must be 1..1 for FFM with 256 fields and ftrl "
                     "(1 + fields x k must be <= 511)");
    opt.fields = 20;
    opt.k = 4;
    opt.l1 = -1;
    expect_bad(&opt, "l1 must be >= 0");
    opt.l1 = 0.01;
    opt.optimizer = TRAIN_ADAGRAD;
    opt.k = 26;
    expect_bad(&opt, "k must be 1..25 for FFM with 20 fields and adagrad "
                     "(1 + fields x k must be <= 512)");
    opt.k = 25; /* 2 (1 + 500) = 1002 floats of state */
    assert_int_equal(train_ffm_create(&opt, &t, NULL, 0), 0);
    train_ffm_destroy(t);
    opt.optimizer = TRAIN_SGD;
    opt.k = 51; /* 1 + 1020 */
    assert_int_equal(train_ffm_create(&opt, &t, NULL, 0), 0);
    train_ffm_destroy(t);
    opt.k = 0;
    expect_bad(&opt, "k must be 1..51 for FFM with 20 fields and sgd "
                     "(1 + fields x k must be <= 1024)");
    opt.k = 4;
    opt.alpha = 0;
    expect_bad(&opt, "learning rate (alpha) must be > 0");
    opt.alpha = 0.1;
    opt.w_ratio = 0;
    expect_bad(&opt, "the linear step ratio (w_ratio) must be > 0");
    opt.w_ratio = 0.5;
    opt.l2_v = -1;
    expect_bad(&opt, "l2 on v must be >= 0");
    opt.l2_v = 0;
    opt.init_stdev = NAN;
    expect_bad(&opt, "init stdev must be >= 0");
}

/* ---- quality (--quality) ------------------------------------------------------ */

/* A libffm reader of path, NULL (said on stderr) when it cannot be opened. */
static reader_t *open_libffm(const char *path)
{
    reader_options_t ro = {.format = READER_LIBFFM};
    reader_t *r;
    char err[512];
    if (reader_open(path, &ro, &r, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    return r;
}

/* Streams path once: trains (m == NULL) or evaluates into m. */
static int run_file(train_ffm_t *t, const char *path, metrics_t *m, uint32_t *max_field)
{
    reader_t *r = open_libffm(path);
    if (!r)
        return -1;
    reader_sample_t s;
    int rc;
    while ((rc = reader_next(r, &s)) == 1) {
        if (max_field) {
            for (uint32_t j = 0; j < s.n; j++)
                if ((uint32_t)(s.ids[j] >> 56) > *max_field)
                    *max_field = (uint32_t)(s.ids[j] >> 56);
        } else if (!m) {
            train_ffm_update(t, s.ids, s.values, s.n, s.label, 1.0f, NULL);
        } else {
            metrics_add(m, train_ffm_predict(t, s.ids, s.values, s.n), s.label);
        }
    }
    if (rc < 0)
        fprintf(stderr, "%s: %s\n", path, reader_error(r));
    reader_close(r);
    return rc;
}

/* The mean label of path's samples (*n of them): the constant predictor. */
static int mean_label(const char *path, double *mean, uint64_t *n)
{
    reader_t *r = open_libffm(path);
    if (!r)
        return -1;
    reader_sample_t smp;
    int rc;
    double sum = 0;
    *n = 0;
    while ((rc = reader_next(r, &smp)) == 1) {
        sum += smp.label;
        ++*n;
    }
    reader_close(r);
    *mean = *n ? sum / (double)*n : 0;
    return rc;
}

/* FFM with optimizer o's defaults (its fields from the training file)
 * trained the default epochs on tr, then scored on te into *res; *opt gets
 * the options used.  0, or -1 when a file cannot be read or the trainer
 * not made. */
static int train_and_test(train_optimizer_t o, const char *tr, const char *te,
                          train_ffm_options_t *opt, metrics_result_t *res)
{
    uint32_t maxf = 0;
    if (run_file(NULL, tr, NULL, &maxf) != 0)
        return -1;
    train_ffm_defaults(o, opt);
    opt->fields = maxf + 1;
    train_ffm_t *t;
    metrics_t *m;
    if (train_ffm_create(opt, &t, NULL, 0) != 0)
        return -1;
    if (metrics_create(&m) != 0) {
        train_ffm_destroy(t);
        return -1;
    }
    int rc = 0;
    for (int ep = 0; ep < TRAIN_FFM_DEFAULT_EPOCHS && rc == 0; ep++)
        rc = run_file(t, tr, NULL, NULL) != 0 ? -1 : 0;
    if (rc == 0 && run_file(t, te, m, NULL) != 0)
        rc = -1;
    if (rc == 0)
        metrics_compute(m, res);
    metrics_destroy(m);
    train_ffm_destroy(t);
    return rc;
}

/* FFM-FTRL with its defaults (no tuning to the data) on criteo_tiny: the
 * test logloss is finite and beats the constant predictor (the training
 * set's click rate on every test row).  -1 when the set is absent. */
static int quality_ftrl(const char *data)
{
    char tr[1024], te[1024];
    snprintf(tr, sizeof tr, "%s/criteo_tiny/train.ffm", data);
    snprintf(te, sizeof te, "%s/criteo_tiny/test.ffm", data);
    if (access(tr, R_OK) != 0 || access(te, R_OK) != 0)
        return -1;
    double p0, q;
    uint64_t ntr, nte;
    if (mean_label(tr, &p0, &ntr) != 0 || mean_label(te, &q, &nte) != 0 || p0 <= 0 || p0 >= 1)
        return 0;
    const double constant = -(q * log(p0) + (1 - q) * log(1 - p0));
    train_ffm_options_t opt;
    metrics_result_t res;
    if (train_and_test(TRAIN_FTRL, tr, te, &opt, &res) != 0)
        return 0;
    int pass = isfinite(res.logloss) && res.logloss < constant;
    printf("criteo_tiny    FFM-FTRL defaults (F %u, k %u, %d epochs): logloss %.4f (constant "
           "predictor %.4f) auc %.4f calibration %.3f: %s\n",
           opt.fields, opt.k, TRAIN_FFM_DEFAULT_EPOCHS, res.logloss, constant, res.auc,
           res.calibration, pass ? "ok" : "FAIL");
    return pass;
}

static int quality(void)
{
    /* target: the better of LIBFFM's and xLearn's FFM + 0.005 logloss / - 0.005 AUC.
     * guard: what this test enforces.  The defaults (train_ffm.c: Adagrad, alpha 0.4,
     * w_ratio 0.5, beta 1, l2 0.002, l2_v 0.005, U(0, 0.5) start, 11 epochs) meet every
     * target, so the guard is the target.  Measured (seed 1): criteo_tiny .4901/.6669,
     * xlearn_criteo .5238/.6095, avazu_rx .3854/.7258, ipinyou .0206/.5865; seeds 2..5
     * meet every target at 10, 11 and 12 epochs too. */
    static const struct {
        const char *name;
        double max_ll, min_auc;     /* target */
        double guard_ll, guard_auc; /* enforced */
    } sets[] = {{"criteo_tiny", 0.5031, 0.666, 0.5031, 0.666},
                {"xlearn_criteo", 0.5372, 0.604, 0.5372, 0.604},
                {"avazu_rx", 0.3885, 0.724, 0.3885, 0.724},
                {"ipinyou", 0.0318, 0.578, 0.0318, 0.578}};
    const char *data = getenv("TL_SHARED_DATA");
    int ran = 0, ok = 1;
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        char tr[1024], te[1024];
        snprintf(tr, sizeof tr, "%s/%s/train.ffm", data ? data : "", sets[i].name);
        snprintf(te, sizeof te, "%s/%s/test.ffm", data ? data : "", sets[i].name);
        if (!data || access(tr, R_OK) != 0 || access(te, R_OK) != 0)
            continue;
        train_ffm_options_t opt;
        metrics_result_t res;
        if (train_and_test(TRAIN_ADAGRAD, tr, te, &opt, &res) != 0)
            return 1;
        int target = res.logloss <= sets[i].max_ll && res.auc >= sets[i].min_auc;
        int pass = res.logloss <= sets[i].guard_ll && res.auc >= sets[i].guard_auc;
        printf("%-14s FFM defaults (F %u, k %u, %d epochs): logloss %.4f (target <= %.4f) auc "
               "%.4f (target >= %.4f) calibration %.3f: target %s; guard %s\n",
               sets[i].name, opt.fields, opt.k, TRAIN_FFM_DEFAULT_EPOCHS, res.logloss,
               sets[i].max_ll, res.auc, sets[i].min_auc, res.calibration,
               target ? "met" : "MISSED", pass ? "ok" : "FAIL");
        ok &= pass;
        ran++;
    }
    if (!ran) {
        fprintf(stderr, "test_ffm --quality: no data sets under TL_SHARED_DATA: skipped\n");
        return 77;
    }
    int ftrl = quality_ftrl(data);
    if (ftrl == -1)
        printf("criteo_tiny absent: FFM-FTRL's quality not checked\n");
    else
        ok &= ftrl;
    return ok ? 0 : 1;
}

/* ---- benchmark (--bench) ------------------------------------------------------ */

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int bench(uint32_t F, uint32_t k)
{
    enum { SHARED = 300, ITEMS = 200, PER = 200, REQS = 300 };
    const uint32_t K = 1 + F * k, total = SHARED + ITEMS * PER;
    float *rows = malloc((size_t)(1 + total) * K * sizeof *rows);
    uint64_t *ids = malloc((size_t)total * sizeof *ids);
    double *work = malloc(model_ffm_work_doubles(F, k) * sizeof *work);
    double *t = malloc(REQS * sizeof *t);
    float scores[ITEMS];
    if (!rows || !ids || !work || !t)
        return 1;
    uint64_t s = 42;
    for (size_t i = 0; i < (size_t)(1 + total) * K; i++)
        rows[i] = (float)urand(&s, -0.1, 0.1);
    for (uint32_t j = 0; j < total; j++)
        ids[j] = ((rnd(&s) % F) << 56) | (rnd(&s) >> 20);
    codec_block_t shared = {ids, NULL, SHARED}, items[ITEMS];
    for (uint32_t i = 0; i < ITEMS; i++)
        items[i] = (codec_block_t){ids + SHARED + i * PER, NULL, PER};
    double sink = 0;
    for (int r = 0; r < REQS; r++) {
        double t0 = now_us();
        model_ffm_scores(&shared, items, ITEMS, rows, F, k, true, work, scores);
        t[r] = now_us() - t0;
        sink += scores[r % ITEMS];
    }
    qsort(t, REQS, sizeof *t, cmp_d);
    printf("model_ffm_scores F %u k %u, %d shared + %d items x %d (rows fetched, %.1f MB): "
           "p50 %.0f us p99 %.0f us max %.0f us (%.3f)\n",
           F, k, SHARED, ITEMS, PER, (double)(1 + total) * K * 4 / 1e6, t[REQS / 2],
           t[REQS * 99 / 100], t[REQS - 1], sink);
    free(rows);
    free(ids);
    free(work);
    free(t);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--quality") == 0)
        return quality();
    if (argc > 1 && strcmp(argv[1], "--bench") == 0)
        return bench(20, 4) || bench(20, 8) || bench(20, 5) || bench(39, 4);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scores_vs_naive),
        cmocka_unit_test(test_empty_request),
        cmocka_unit_test(test_row_loops_agree),
        cmocka_unit_test(test_gradient_fd),
        cmocka_unit_test(test_sgd_step_by_hand),
        cmocka_unit_test(test_export_roundtrip),
        cmocka_unit_test(test_seeded_init),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
