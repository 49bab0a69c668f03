/*
 * test_train_fm_batch.c — FM's batch update (train_update of a frame: one
 * shared block, many items; model/train_fm_batch.c) against FM's update()
 * of one sample (train_ops_t.update on shared ++ item, joined by the test):
 * two trainers with the same options, one fed frames, the other item by
 * item, must hold the same floats bit for bit:
 *
 *   - for SGD, Adagrad and FTRL, with and without instance normalisation,
 *     with and without a served store (half the ids and the bias already
 *     served): every prediction the updates report, every state row
 *     (train_store), every served row and train_predict of joined samples;
 *     ids drawn from a small pool, so ids repeat inside the shared block
 *     and inside an item, item ids are shared ids, and the bias's id is a
 *     feature of both blocks; blocks with values and without, an empty
 *     shared block, empty items, weights other than 1, a sample given
 *     alone (items NULL, as tltrain gives it); and what a sync hook
 *     (train_sync.h: ROWS) sees, the same deltas in the same order;
 *   - a step that is not finite (values near FLT_MAX, unnormalised) makes
 *     the frame return -ERANGE at the item where update() returns it, and
 *     leaves the trainer exactly as a trainer that learned the items
 *     before it, nothing non-finite in the state or the served store;
 *   - FFM's batch (update() per item, the shared rows served once a frame)
 *     gives the same predictions, rows and served rows as item by item
 *     (Adagrad, SGD and FTRL).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/model.h"
#include "model/train.h"
#include "model/train_impl.h"
#include "model/train_sync.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { POOL = 24, FRAMES = 24, ITEMS = 9, SH = 10, IT = 6, K = 3 };

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint64_t pool_id(int i)
{
    return i == 0 ? MODEL_BIAS_ID : ((uint64_t)(i % 3 + 1) << 56) | (uint64_t)(i * 7919);
}

/* The reference: update() of one sample, shared ++ item joined as train.c
 * joins them (values NULL when neither block has any). */
static int update_joined(train_t *t, const codec_block_t *sh, const codec_block_t *it,
                         float label, float weight, float *p)
{
    uint64_t ids[SH + IT + 64];
    float vals[SH + IT + 64];
    assert_true(sh->n + it->n <= SH + IT + 64);
    for (uint32_t j = 0; j < sh->n; j++) {
        ids[j] = sh->ids[j];
        vals[j] = sh->values ? sh->values[j] : 1.0f;
    }
    for (uint32_t j = 0; j < it->n; j++) {
        ids[sh->n + j] = it->ids[j];
        vals[sh->n + j] = it->values ? it->values[j] : 1.0f;
    }
    const float *v = sh->values || it->values ? vals : NULL;
    return train_ops(t)->update(train__impl(t), ids, v, sh->n + it->n, label, weight, p);
}

/* Two trainers hold the same floats: each pool id's state row (and whether
 * it has one) and served row, and the bias's. */
static void check_same(train_t *a, train_t *b, store_t *sa, store_t *sb, const char *what)
{
    const store_t *ta = train_store(a), *tb = train_store(b);
    const uint32_t sk = store_value_floats(ta);
    for (int i = 0; i < POOL; i++) {
        float ra[STORE_MAX_VALUE_FLOATS] = {0}, rb[STORE_MAX_VALUE_FLOATS] = {0};
        int fa = store_lookup(ta, pool_id(i), ra), fb = store_lookup(tb, pool_id(i), rb);
        if (fa != fb || memcmp(ra, rb, sk * sizeof *ra) != 0)
            fail_msg("%s: pool id %d's state row differs (found %d/%d, w %.9g/%.9g)", what, i,
                     fa, fb, ra[0], rb[0]);
        for (uint32_t c = 0; fa && c <= K; c++)
            if (!isfinite(ra[c]))
                fail_msg("%s: pool id %d's state holds %g", what, i, ra[c]);
        if (!sa)
            continue;
        memset(ra, 0, sizeof ra);
        memset(rb, 0, sizeof rb);
        fa = store_lookup(sa, pool_id(i), ra);
        fb = store_lookup(sb, pool_id(i), rb);
        if (fa != fb || memcmp(ra, rb, (1 + K) * sizeof *ra) != 0)
            fail_msg("%s: pool id %d's served row differs (found %d/%d)", what, i, fa, fb);
        for (uint32_t c = 0; fa && c <= K; c++)
            if (!isfinite(ra[c]))
                fail_msg("%s: pool id %d is served %g", what, i, ra[c]);
    }
    assert_int_equal(store_count(ta), store_count(tb));
}

/* What a sync hook saw (train_sync.h: ROWS): the calls, and a hash of
 * their ids and deltas in order. */
struct notes {
    uint64_t calls, hash;
};

static void on_rows(void *ctx, uint64_t id, const float *d, uint32_t n)
{
    struct notes *no = ctx;
    uint64_t h = no->hash ^ id;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &d[i], sizeof u);
        h = (h ^ u) * 0x100000001b3ULL;
    }
    no->hash = h * 0x9e3779b97f4a7c15ULL;
    no->calls++;
}

/* A trainer (and its served store when live: every other pool id and the
 * bias served, with non-zero rows). */
static train_t *make(const train_options_t *o, bool live, store_t **served)
{
    train_t *t;
    char why[256];
    if (train_create(o, &t, why, sizeof why) != 0)
        fail_msg("create: %s", why);
    *served = NULL;
    if (!live)
        return t;
    store_options_t so = {.value_floats = 1 + K};
    assert_int_equal(store_create(&so, served), 0);
    for (int i = 0; i < POOL; i += 2) {
        float row[1 + K];
        for (int c = 0; c <= K; c++)
            row[c] = i == 0 && c > 0 ? 0.0f : 0.01f * (float)(i + 1) * (c % 2 ? -1.0f : 1.0f);
        assert_true(store_upsert(*served, pool_id(i), row) >= 0);
    }
    if (train_attach_live(t, *served, why, sizeof why) != 0)
        fail_msg("attach: %s", why);
    return t;
}

static void test_batch_equals_one_at_a_time(void **state)
{
    (void)state;
    for (int oi = 0; oi < 3; oi++)
        for (int norm = 0; norm < 2; norm++)
            for (int live = 0; live < 2; live++) {
                char what[96];
                snprintf(what, sizeof what, "fm/%s%s%s", train_optimizer_name((train_optimizer_t)oi),
                         norm ? " norm" : "", live ? " live" : "");
                train_options_t o;
                assert_int_equal(train_defaults(STORE_MODEL_FM, (train_optimizer_t)oi, &o), 0);
                o.fm.k = K;
                o.fm.norm = norm;
                o.fm.init_stdev = 0.1; /* factors large enough that pairs move p */
                store_t *sa, *sb;
                train_t *a = make(&o, live, &sa), *b = make(&o, live, &sb);
                struct notes na = {0, 0}, nb = {0, 0};
                assert_int_equal(train_rows_sync_hook(a, on_rows, &na), 0);
                assert_int_equal(train_rows_sync_hook(b, on_rows, &nb), 0);
                uint64_t s = 99 + (uint64_t)(oi * 4 + norm * 2 + live);
                for (int f = 0; f < FRAMES; f++) {
                    uint64_t sid[SH], iid[ITEMS][IT];
                    float sv[SH], iv[ITEMS][IT], labels[ITEMS], w8[ITEMS];
                    const uint32_t ns = f == 5 ? 0 : SH;
                    for (uint32_t j = 0; j < ns; j++) {
                        sid[j] = pool_id((int)(rnd(&s) % POOL));
                        sv[j] = (float)(rnd(&s) % 1000 + 1) / 500.0f;
                    }
                    codec_block_t items[ITEMS];
                    for (int i = 0; i < ITEMS; i++) {
                        for (int j = 0; j < IT; j++) {
                            iid[i][j] = pool_id((int)(rnd(&s) % POOL));
                            iv[i][j] = (float)(rnd(&s) % 1000 + 1) / 500.0f;
                        }
                        labels[i] = (float)(rnd(&s) % 3 == 0);
                        w8[i] = (float)(rnd(&s) % 4 + 1) / 2.0f;
                        items[i] = (codec_block_t){.ids = iid[i], .values = f % 4 >= 2 ? NULL : iv[i],
                                                   .n = i == 3 ? 0 : IT};
                    }
                    const codec_block_t sh = {.ids = sid, .values = f % 2 ? NULL : sv, .n = ns};
                    const float *wp = f % 3 ? w8 : NULL;
                    float pa[ITEMS], pb[ITEMS];
                    assert_int_equal(train_update(a, &sh, items, ITEMS, labels, wp, pa), 0);
                    for (int i = 0; i < ITEMS; i++)
                        assert_int_equal(update_joined(b, &sh, &items[i], labels[i],
                                                       wp ? wp[i] : 1.0f, &pb[i]),
                                         0);
                    if (memcmp(pa, pb, sizeof pa) != 0)
                        fail_msg("%s frame %d: predictions differ", what, f);
                    for (int i = 0; i < ITEMS; i++) { /* the served score, as trained */
                        float qa = train_predict(a, &sh, &items[i]);
                        float qb = train_predict(b, &sh, &items[i]);
                        if (memcmp(&qa, &qb, sizeof qa) != 0 || !isfinite(qa))
                            fail_msg("%s frame %d item %d: train_predict %.9g / %.9g", what, f,
                                     i, qa, qb);
                    }
                }
                check_same(a, b, sa, sb, what);
                if (na.calls != nb.calls || na.hash != nb.hash || na.calls == 0)
                    fail_msg("%s: the sync hook saw %llu steps from the frames, %llu one at a "
                             "time, or other deltas", what, (unsigned long long)na.calls,
                             (unsigned long long)nb.calls);
                /* a sample alone, as tltrain gives it */
                for (int r = 0; r < 5; r++) {
                    uint64_t ids[IT];
                    float v[IT], y = (float)(r & 1), pa, pb;
                    for (int j = 0; j < IT; j++) {
                        ids[j] = pool_id((int)(rnd(&s) % POOL));
                        v[j] = (float)(rnd(&s) % 1000 + 1) / 500.0f;
                    }
                    const codec_block_t whole = {.ids = ids, .values = v, .n = IT};
                    const codec_block_t empty = {.ids = NULL, .values = NULL, .n = 0};
                    assert_int_equal(train_update(a, &whole, NULL, 1, &y, NULL, &pa), 0);
                    assert_int_equal(update_joined(b, &whole, &empty, y, 1.0f, &pb), 0);
                    assert_memory_equal(&pa, &pb, sizeof pa);
                }
                check_same(a, b, sa, sb, what);
                train_destroy(a);
                train_destroy(b);
                store_destroy(sa);
                store_destroy(sb);
            }
}

/* Items whose two own features have values near FLT_MAX, unnormalised: the
 * factors' gradient overflows.  The frame fails where update() fails, and
 * the trainer then equals one that learned only the items before. */
static void test_non_finite_undoes_the_item(void **state)
{
    (void)state;
    enum { N = 10 };
    for (int oi = 0; oi < 3; oi++)
        for (int live = 0; live < 2; live++) {
            char what[96];
            snprintf(what, sizeof what, "fm/%s%s non-finite",
                     train_optimizer_name((train_optimizer_t)oi), live ? " live" : "");
            train_options_t o;
            assert_int_equal(train_defaults(STORE_MODEL_FM, (train_optimizer_t)oi, &o), 0);
            o.fm.k = K;
            o.fm.norm = false;
            o.fm.init_stdev = 0.1;
            store_t *sa, *sb, *sc;
            train_t *a = make(&o, live, &sa), *b = make(&o, live, &sb), *c = make(&o, live, &sc);
            uint64_t sid[4] = {pool_id(1), pool_id(2), pool_id(0), pool_id(1)};
            float sv[4] = {0.5f, 1.5f, 1.0f, 0.25f};
            uint64_t iid[N][3];
            float iv[N][3], labels[N];
            codec_block_t items[N];
            for (int i = 0; i < N; i++) {
                iid[i][0] = pool_id(3 + i);    /* new to the state */
                iid[i][1] = pool_id(13 + i % 5);
                iid[i][2] = pool_id(2);        /* a shared id */
                bool huge = i >= 2;
                iv[i][0] = huge ? 3e38f : 0.5f;
                iv[i][1] = huge ? 3e38f : 0.75f;
                iv[i][2] = 1.0f;
                labels[i] = (float)(i & 1);
                items[i] = (codec_block_t){.ids = iid[i], .values = iv[i], .n = 3};
            }
            const codec_block_t sh = {.ids = sid, .values = sv, .n = 4};
            /* a frame learned first, so the failing frame starts from trained rows */
            assert_int_equal(train_update(a, &sh, items, 2, labels, NULL, NULL), 0);
            float pa[N], pb[N];
            int rb = 0, fail_at = N;
            for (int i = 0; i < 2; i++) {
                assert_int_equal(update_joined(b, &sh, &items[i], labels[i], 1.0f, NULL), 0);
                assert_int_equal(update_joined(c, &sh, &items[i], labels[i], 1.0f, NULL), 0);
            }
            int ra = train_update(a, &sh, items, N, labels, NULL, pa);
            for (int i = 0; i < N && rb == 0; i++) {
                rb = update_joined(b, &sh, &items[i], labels[i], 1.0f, &pb[i]);
                if (rb != 0)
                    fail_at = i;
            }
            if (ra != rb)
                fail_msg("%s: the frame returned %d, update() item by item %d", what, ra, rb);
            if (oi == TRAIN_SGD && ra != -ERANGE)
                fail_msg("%s: no -ERANGE (%d)", what, ra);
            if (ra == 0) { /* stayed finite: the same floats */
                check_same(a, b, sa, sb, what);
            } else {
                if (memcmp(pa, pb, (size_t)(fail_at + 1) * sizeof *pa) != 0)
                    fail_msg("%s: predictions up to the failing item differ", what);
                /* c learns the items before the failing one: a must equal it */
                for (int i = 0; i < fail_at; i++)
                    assert_int_equal(update_joined(c, &sh, &items[i], labels[i], 1.0f, NULL), 0);
                check_same(a, c, sa, sc, what);
            }
            train_destroy(a);
            train_destroy(b);
            train_destroy(c);
            store_destroy(sa);
            store_destroy(sb);
            store_destroy(sc);
        }
}

/* FFM's batch (train_ffm.c, BATCH): update() per item, the shared rows
 * served once at the frame's end: predictions, every row's serving floats
 * in the trainer (train_ffm_weights) and in the served store bit for bit
 * against update() item by item, for Adagrad, SGD and FTRL, live or not. */
static void test_ffm_batch_equals_one_at_a_time(void **state)
{
    (void)state;
    enum { F = 3, FK = 2, R = 1 + F * FK };
    static const train_optimizer_t opts[] = {TRAIN_ADAGRAD, TRAIN_SGD, TRAIN_FTRL};
    for (int oi = 0; oi < 3; oi++)
        for (int live = 0; live < 2; live++) {
            char what[96];
            snprintf(what, sizeof what, "ffm/%s%s", train_optimizer_name(opts[oi]),
                     live ? " live" : "");
            train_options_t o;
            assert_int_equal(train_defaults(STORE_MODEL_FFM, opts[oi], &o), 0);
            o.ffm.fields = F;
            o.ffm.k = FK;
            train_t *t[2];
            store_t *sv[2] = {NULL, NULL};
            char why[256];
            for (int x = 0; x < 2; x++) {
                if (train_create(&o, &t[x], why, sizeof why) != 0)
                    fail_msg("create: %s", why);
                if (!live)
                    continue;
                store_options_t so = {.value_floats = R};
                assert_int_equal(store_create(&so, &sv[x]), 0);
                for (int i = 0; i < POOL; i += 2) {
                    float row[R];
                    for (int c = 0; c < R; c++)
                        row[c] = i == 0 && c > 0 ? 0.0f : 0.02f * (float)(i + c + 1);
                    assert_true(store_upsert(sv[x], pool_id(i), row) >= 0);
                }
                assert_int_equal(train_attach_live(t[x], sv[x], why, sizeof why), 0);
            }
            uint64_t s = 7 + (uint64_t)(oi * 2 + live);
            for (int f = 0; f < FRAMES; f++) {
                uint64_t sid[SH], iid[ITEMS][IT];
                float shv[SH], iv[ITEMS][IT], labels[ITEMS];
                for (int j = 0; j < SH; j++) {
                    sid[j] = pool_id((int)(rnd(&s) % POOL));
                    shv[j] = j == 4 ? 0.0f : (float)(rnd(&s) % 1000 + 1) / 500.0f;
                }
                codec_block_t items[ITEMS];
                for (int i = 0; i < ITEMS; i++) {
                    for (int j = 0; j < IT; j++) {
                        iid[i][j] = pool_id((int)(rnd(&s) % POOL));
                        iv[i][j] = (float)(rnd(&s) % 1000 + 1) / 500.0f;
                    }
                    labels[i] = (float)(rnd(&s) % 3 == 0);
                    items[i] = (codec_block_t){.ids = iid[i], .values = f % 4 >= 2 ? NULL : iv[i],
                                               .n = i == 3 ? 0 : IT};
                }
                const codec_block_t sh = {.ids = sid, .values = f % 2 ? NULL : shv, .n = SH};
                float pa[ITEMS], pb[ITEMS];
                assert_int_equal(train_update(t[0], &sh, items, ITEMS, labels, NULL, pa), 0);
                for (int i = 0; i < ITEMS; i++)
                    assert_int_equal(update_joined(t[1], &sh, &items[i], labels[i], 1.0f, &pb[i]),
                                     0);
                if (memcmp(pa, pb, sizeof pa) != 0)
                    fail_msg("%s frame %d: predictions differ", what, f);
            }
            for (int i = 0; i < POOL; i++) {
                float ra[R] = {0}, rb[R] = {0};
                int fa = train_ffm_weights(train__impl(t[0]), pool_id(i), ra);
                int fb = train_ffm_weights(train__impl(t[1]), pool_id(i), rb);
                if (fa != fb || memcmp(ra, rb, sizeof ra) != 0)
                    fail_msg("%s: pool id %d's row differs", what, i);
                if (!live)
                    continue;
                memset(ra, 0, sizeof ra);
                memset(rb, 0, sizeof rb);
                fa = store_lookup(sv[0], pool_id(i), ra);
                fb = store_lookup(sv[1], pool_id(i), rb);
                if (fa != fb || memcmp(ra, rb, sizeof ra) != 0)
                    fail_msg("%s: pool id %d's served row differs (found %d/%d)", what, i, fa, fb);
            }
            for (int x = 0; x < 2; x++) {
                train_destroy(t[x]);
                store_destroy(sv[x]);
            }
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_equals_one_at_a_time),
        cmocka_unit_test(test_non_finite_undoes_the_item),
        cmocka_unit_test(test_ffm_batch_equals_one_at_a_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
