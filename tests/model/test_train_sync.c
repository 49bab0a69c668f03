/*
 * test_train_sync.c — the math of partitioned replicas (model/train_sync.h,
 * UPDATE_F_NONNEG_LAST of model/update_codec.h), with real trainers:
 *
 *   - the hook's (dz, dn) of one trainer, summed per id, equal its final z
 *     and n (to float rounding): what it sends is what its state moved by;
 *   - apply: z += dz, n += dn, w = FTRL's closed form (bias without l1,
 *     l2); n below 0, a non-finite sum: -ERANGE and nothing written; not
 *     FTRL: -ENOTSUP;
 *   - two replicas each learn half of a sample stream and exchange their
 *     accumulated (dz, dn) through real update messages (1-bit top-k
 *     turns, then exact flushes): after the exchange both hold the same z,
 *     n, w for every id (to float rounding of the sums in another order),
 *     and applying the messages in another order gives the same;
 *   - the one-sided 1-bit column: every value a receiver decodes for n is
 *     >= 0, and the sender's residual of n never goes below 0.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/model.h"
#include "model/train.h"
#include "model/train_sync.h"
#include "model/update_codec.h"
#include "store/store.h"
#include "test_rng.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NID 200   /* feature ids 1..NID */
#define NS 3000   /* samples */
#define NF 6      /* features a sample */


static train_t *ftrl(void)
{
    train_options_t o;
    assert_int_equal(train_defaults(STORE_MODEL_LR, TRAIN_FTRL, &o), 0);
    train_t *t = NULL;
    char why[200];
    assert_int_equal(train_create(&o, &t, why, sizeof why), 0);
    return t;
}

/* Sample i: NF distinct ascending ids of 1..NID, label from a planted rule. */
static void sample(uint64_t i, uint64_t *ids, float *label)
{
    rng_state = i * 7919 + 13;
    uint64_t base = 1 + rnd() % (NID - NF * 3);
    for (int j = 0; j < NF; j++)
        ids[j] = base + (uint64_t)j * 3 + rnd() % 3;
    *label = (ids[0] % 5 == 0 || rnd() % 7 == 0) ? 1.0f : 0.0f;
}

static void learn(train_t *t, uint64_t i)
{
    uint64_t ids[NF];
    float y;
    sample(i, ids, &y);
    codec_block_t shared = {ids, NULL, NF};
    codec_block_t item = {NULL, NULL, 0};
    assert_int_equal(train_update(t, &shared, &item, 1, &y, NULL, NULL), 0);
}

static void state(train_t *t, uint64_t id, float st[3])
{
    st[0] = st[1] = st[2] = 0;
    store_lookup(train_store(t), id, st);
}

/* ---- the hook's sums are the state ---- */

static double sum_z[NID + 2], sum_n[NID + 2];
static uint64_t slot_of(uint64_t id) { return id == MODEL_BIAS_ID ? NID + 1 : id; }

static void sum_hook(void *ctx, uint64_t id, float dz, float dn)
{
    (void)ctx;
    assert_true(dn >= 0);
    sum_z[slot_of(id)] += dz;
    sum_n[slot_of(id)] += dn;
}

static void test_hook_sums_are_the_state(void **st_)
{
    (void)st_;
    memset(sum_z, 0, sizeof sum_z);
    memset(sum_n, 0, sizeof sum_n);
    train_t *t = ftrl();
    assert_int_equal(train_lr_sync_hook(t, sum_hook, NULL), 0);
    for (uint64_t i = 0; i < NS; i++)
        learn(t, i);
    int seen = 0;
    for (uint64_t id = 1; id <= NID + 1; id++) {
        uint64_t key = id == NID + 1 ? MODEL_BIAS_ID : id;
        float st[3];
        state(t, key, st);
        if (st[1] == 0)
            continue;
        seen++;
        assert_true(fabs(sum_z[slot_of(key)] - st[0]) <= 1e-4 * (1 + fabs(st[0])));
        assert_true(fabs(sum_n[slot_of(key)] - st[1]) <= 1e-4 * (1 + fabs(st[1])));
    }
    assert_true(seen > NID / 2);
    train_destroy(t);
}

/* ---- apply's arithmetic ---- */

static void test_apply_math(void **st_)
{
    (void)st_;
    train_t *t = ftrl();
    const train_lr_options_t *o = &train_options(t)->lr;
    float st[3];
    assert_int_equal(train_lr_sync_apply(t, 42, 0.75f, 2.0f), 0);
    state(t, 42, st);
    assert_true(st[0] == 0.75f && st[1] == 2.0f);
    float w = train_lr_ftrl_weight(0.75, 2.0, o->alpha, o->beta, o->l1, o->l2);
    assert_true(st[2] == w);
    /* the closed form by hand: -(z - l1) / ((beta + sqrt(n)) / alpha + l2) */
    double want = -(0.75 - o->l1) / ((o->beta + sqrt(2.0)) / o->alpha + o->l2);
    assert_true(fabs(st[2] - want) < 1e-6);
    assert_true(st[2] < 0);
    /* add more: sums */
    assert_int_equal(train_lr_sync_apply(t, 42, -1.5f, 0.5f), 0);
    state(t, 42, st);
    assert_true(st[0] == -0.75f && st[1] == 2.5f);
    assert_true(st[2] == train_lr_ftrl_weight(-0.75, 2.5, o->alpha, o->beta, o->l1, o->l2));
    assert_true(st[2] > 0);
    /* |z| <= l1: weight 0 */
    assert_int_equal(train_lr_sync_apply(t, 43, (float)(o->l1 * 0.5), 1.0f), 0);
    state(t, 43, st);
    assert_true(st[2] == 0.0f);
    /* the bias: no l1, l2 */
    assert_int_equal(train_lr_sync_apply(t, MODEL_BIAS_ID, 0.05f, 1.0f), 0);
    state(t, MODEL_BIAS_ID, st);
    assert_true(st[2] == train_lr_ftrl_weight(0.05, 1.0, o->alpha, o->beta, 0, 0));
    assert_true(st[2] != 0.0f);
    /* refusals write nothing */
    assert_int_equal(train_lr_sync_apply(t, 42, 0.0f, -3.0f), -ERANGE);
    assert_int_equal(train_lr_sync_apply(t, 42, INFINITY, 0.0f), -ERANGE);
    assert_int_equal(train_lr_sync_apply(t, 42, 3e38f, 0.0f), 0);
    assert_int_equal(train_lr_sync_apply(t, 42, 3e38f, 0.0f), -ERANGE);
    state(t, 42, st);
    assert_true(st[1] == 2.5f && isfinite(st[0]));
    train_destroy(t);

    train_options_t ao;
    assert_int_equal(train_defaults(STORE_MODEL_LR, TRAIN_ADAGRAD, &ao), 0);
    char why[200];
    assert_int_equal(train_create(&ao, &t, why, sizeof why), 0);
    assert_int_equal(train_lr_sync_hook(t, sum_hook, NULL), -ENOTSUP);
    assert_int_equal(train_lr_sync_apply(t, 1, 1, 1), -ENOTSUP);
    train_destroy(t);
}

/* ---- two replicas exchange through real messages ---- */

#define MSG_CAP (1u << 20)
#define MAX_MSGS 64

struct replica {
    train_t *t;
    update_acc_t *acc;
    uint8_t *msgs[MAX_MSGS]; /* what it published */
    size_t lens[MAX_MSGS];
    int nmsg;
};

static void acc_hook(void *ctx, uint64_t id, float dz, float dn)
{
    struct replica *r = ctx;
    float inc[2] = {dz, dn};
    assert_int_equal(update_acc_add(r->acc, id, inc), 0);
}

static void turn(struct replica *r, uint32_t flags, float fraction)
{
    assert_true(r->nmsg < MAX_MSGS);
    update_encode_opts_t o = {.flags = flags, .select_fraction = fraction, .base_version = 1};
    if (flags & UPDATE_F_EXACT)
        o.select_count = UINT32_MAX;
    uint8_t *buf = malloc(MSG_CAP);
    assert_non_null(buf);
    long len = update_acc_encode(r->acc, &o, buf, MSG_CAP);
    assert_true(len > 0);
    r->msgs[r->nmsg] = buf;
    r->lens[r->nmsg++] = (size_t)len;
}

static int apply_cb(void *ctx, uint64_t key, const float *v)
{
    assert_int_equal(train_lr_sync_apply(ctx, key, v[0], v[1]), 0);
    return 0;
}

static int nonneg_cb(void *ctx, uint64_t key, const float *v)
{
    (void)ctx;
    (void)key;
    assert_true(v[1] >= 0.0f);
    return 0;
}

static int sum_cb(void *ctx, uint64_t key, const float *v)
{
    double *sent = ctx;
    assert_true(key >= 1 && key <= 100);
    sent[key] += v[1];
    return 0;
}

static int residual_cb(void *ctx, uint64_t key, const float *v)
{
    (void)ctx;
    (void)key;
    assert_true(v[1] >= 0.0f);
    return 0;
}

static void deliver(struct replica *from, train_t *to, int i)
{
    update_msg_t m;
    update_error_t err;
    assert_int_equal(update_msg_decode(from->msgs[i], from->lens[i], &m, &err), 0);
    assert_int_equal(update_msg_foreach(&m, nonneg_cb, NULL), 0);
    assert_int_equal(update_msg_foreach(&m, apply_cb, to), 0);
}

static void test_two_replicas_agree(void **st_)
{
    (void)st_;
    struct replica r[2];
    memset(r, 0, sizeof r);
    for (int k = 0; k < 2; k++) {
        update_acc_config_t ac = {.k = 2, .max_keys = 4096, .producer = 10 + (uint64_t)k,
                                  .first_seq = 1, .chunk = 16, .model = "ctr"};
        assert_int_equal(update_acc_create(&r[k].acc, &ac), 0);
        r[k].t = ftrl();
        assert_int_equal(train_lr_sync_hook(r[k].t, acc_hook, &r[k]), 0);
    }
    /* four intervals of learning, each followed by a 1-bit top-25% turn
     * (peers apply at once, so later steps see them), then two exact turns */
    for (int interval = 0; interval < 4; interval++) {
        for (uint64_t i = 0; i < NS / 4; i++)
            learn(r[i & 1].t, (uint64_t)interval * (NS / 4) + i);
        for (int k = 0; k < 2; k++) {
            turn(&r[k], UPDATE_F_NONNEG_LAST, 0.25f);
            assert_int_equal(update_acc_foreach(r[k].acc, residual_cb, NULL), 0);
            deliver(&r[k], r[1 - k].t, r[k].nmsg - 1);
        }
    }
    for (int k = 0; k < 2; k++) {
        turn(&r[k], UPDATE_F_EXACT, 0);
        assert_int_equal(update_acc_count(r[k].acc), 0);
        deliver(&r[k], r[1 - k].t, r[k].nmsg - 1);
    }
    /* every id: the same z, n, w on both (the sums in another order) */
    int learned = 0;
    for (uint64_t id = 1; id <= NID + 1; id++) {
        uint64_t key = id == NID + 1 ? MODEL_BIAS_ID : id;
        float a[3], b[3];
        state(r[0].t, key, a);
        state(r[1].t, key, b);
        learned += a[1] > 0;
        for (int j = 0; j < 3; j++)
            assert_true(fabsf(a[j] - b[j]) <= 1e-4f * (1 + fabsf(a[j])));
        assert_true(a[1] >= 0 && b[1] >= 0);
    }
    assert_true(learned > NID / 2);

    /* order-free: replica 1's messages applied in reverse order and in
     * order to two fresh trainers give the same state */
    train_t *c = ftrl();
    train_t *d = ftrl();
    for (int i = r[1].nmsg - 1; i >= 0; i--)
        deliver(&r[1], c, i);
    for (int i = 0; i < r[1].nmsg; i++)
        deliver(&r[1], d, i);
    for (uint64_t id = 1; id <= NID; id++) {
        float x[3], y[3];
        state(c, id, x);
        state(d, id, y);
        for (int j = 0; j < 3; j++)
            assert_true(fabsf(x[j] - y[j]) <= 1e-5f * (1 + fabsf(x[j])));
    }
    train_destroy(c);
    train_destroy(d);
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < r[k].nmsg; i++)
            free(r[k].msgs[i]);
        update_acc_destroy(r[k].acc);
        train_destroy(r[k].t);
    }
}

/* ---- the one-sided column alone ---- */

static void test_nonneg_column(void **st_)
{
    (void)st_;
    update_acc_config_t ac = {.k = 2, .max_keys = 1024, .producer = 5, .first_seq = 1,
                              .chunk = 8, .model = "m"};
    update_acc_t *a = NULL;
    assert_int_equal(update_acc_create(&a, &ac), 0);
    static uint8_t buf[1 << 16];
    double sent[101] = {0}, truth[101] = {0};
    rng_state = 99;
    for (int round = 0; round < 30; round++) {
        for (uint64_t key = 1; key <= 100; key++) {
            float inc[2] = {(float)((double)(rnd() % 1000) / 500.0 - 1.0),
                            (float)((double)(rnd() % 1000) / (key % 3 ? 10000.0 : 10.0))};
            truth[key] += inc[1];
            assert_int_equal(update_acc_add(a, key, inc), 0);
        }
        update_encode_opts_t o = {.flags = UPDATE_F_NONNEG_LAST, .select_fraction = 0.5f};
        long len = update_acc_encode(a, &o, buf, sizeof buf);
        assert_true(len > 0);
        update_msg_t m;
        assert_int_equal(update_msg_decode(buf, (size_t)len, &m, NULL), 0);
        assert_int_equal(m.flags & ~UPDATE_F_RICE, UPDATE_F_NONNEG_LAST);
        assert_int_equal(update_msg_foreach(&m, nonneg_cb, NULL), 0);
        assert_int_equal(update_msg_foreach(&m, sum_cb, sent), 0);
        for (uint64_t key = 1; key <= 100; key++) {
            const float *v = update_acc_get(a, key);
            assert_true(!v || v[1] >= 0.0f);
            /* nothing lost: sent + residual = the true sum */
            double r = v ? v[1] : 0;
            assert_true(fabs(sent[key] + r - truth[key]) <= 1e-3 * (1 + truth[key]));
        }
    }
    /* NONNEG_LAST with EXACT: refused by the encoder */
    update_encode_opts_t bad = {.flags = UPDATE_F_NONNEG_LAST | UPDATE_F_EXACT, .select_count = 1};
    assert_int_equal(update_acc_encode(a, &bad, buf, sizeof buf), -EINVAL);
    update_acc_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hook_sums_are_the_state),
        cmocka_unit_test(test_apply_math),
        cmocka_unit_test(test_two_replicas_agree),
        cmocka_unit_test(test_nonneg_column),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
