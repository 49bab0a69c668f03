/*
 * test_ffm_score.c — FFM scoring (ffm.c).
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
 *   - with --bench: model_ffm_scores() time for the standard request (F 20, k 4,
 *     300 shared features, 200 items x 200 features), rows already fetched.
 *
 * Helpers: ffm_testutil.h.
 */

#include "ffm_testutil.h"

/* ffm.c itself, to reach its static row loops (the portable and the AVX2
 * one); the library's copy of ffm.o is then not linked in. */
#include "model/ffm.c"

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
    if (argc > 1 && strcmp(argv[1], "--bench") == 0)
        return bench(20, 4) || bench(20, 8) || bench(20, 5) || bench(39, 4);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scores_vs_naive),
        cmocka_unit_test(test_empty_request),
        cmocka_unit_test(test_row_loops_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
