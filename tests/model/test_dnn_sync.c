/*
 * test_dnn_sync.c — the DNN's MLP under 1-bit Adam between partitioned
 * replicas (model/train_dnn_sync.c, train_sync.h):
 *
 *   - round trip: a replica's exact warm-up messages and 1-bit messages,
 *     applied by a peer, leave both with the same parameters (float
 *     rounding aside): the sender's correction holds what it sent;
 *   - error feedback: over 40 intervals the sum of what the messages
 *     carried plus the sender's residual equals the sum of its true
 *     deltas, value by value;
 *   - four replicas on a noisy quadratic reach the optimum with 1 bit as
 *     with fp32, for a fraction of the bytes;
 *   - refusals: truncated (every prefix), wrong n, another model, own
 *     message, not DENSE, a non-finite result, a NaN gradient;
 *   - the variance floor: a parameter with no gradient during the warm-up
 *     steps afterwards by at most lr / sqrt(floor), not lr / eps;
 *   - parts: with a message limit under the MLP's exact message, a turn goes
 *     out as several messages (each within the limit, consecutive sequence
 *     numbers, on chunk boundaries); applied in any order they leave the
 *     receiver bit for bit where the same turns sent whole leave another,
 *     through the warm-up and the 1-bit turns, and a part of a vector of
 *     another length is refused;
 *   - save and restore (a partitioned export's SYNC_STATE): a sync restored
 *     from another's saved state, mid warm-up and after the freeze, then
 *     steps and publishes bit for bit as the one saved (the same message
 *     bytes, the same parameters); a state that cannot be is refused
 *     whole (another n, v below 0, a NaN, a power past 1, warm-up 0); a
 *     reset afterwards goes back to the configured warm-up length;
 *   - two real DNN trainers (train_dnn_sync_attach), rows exchanged at once
 *     through the ROWS hook and the MLP every interval with 1-bit Adam,
 *     score every sample alike after the last exchange; the attach and
 *     publish refusals (not a DNN, wrong n, nothing attached).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/train.h"
#include "model/train_sync.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N 1000u
#define CHUNK 64u

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float uniform(void) /* [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* A sync of n floats; max_msg_bytes 0: no message limit. */
static train_dnn_sync_t *make_with(uint32_t n, uint64_t producer, uint32_t warmup, const char *model,
                                   size_t max_msg_bytes)
{
    train_dnn_sync_config_t cfg = {.n = n, .chunk = CHUNK, .warmup_steps = warmup, .lr = 0.01f,
                                   .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .producer = producer,
                                   .model = model, .max_msg_bytes = max_msg_bytes};
    train_dnn_sync_t *s = NULL;
    assert_int_equal(train_dnn_sync_create(&s, &cfg), 0);
    return s;
}

static train_dnn_sync_t *make(uint32_t n, uint64_t producer, uint32_t warmup, const char *model)
{
    return make_with(n, producer, warmup, model, 0);
}

static void gradient(float *g, const float *x, uint32_t n) /* of 0.5 |x - t|^2 + noise, t_i = sin(i) */
{
    for (uint32_t i = 0; i < n; i++)
        g[i] = x[i] - sinf((float)i) + 0.3f * uniform();
}

static void test_round_trip_agree(void **state)
{
    (void)state;
    train_dnn_sync_t *a = make(N, 1, 20, "dnn"), *b = make(N, 2, 20, "dnn");
    float *xa = calloc(N, 4), *xb = calloc(N, 4), *g = malloc(4 * N);
    size_t cap = train_dnn_sync_bound(a);
    uint8_t *buf = malloc(cap);
    size_t exact_len = 0, onebit_len = 0;
    for (int interval = 0; interval < 10; interval++) {
        for (int k = 0; k < 5; k++) {
            gradient(g, xa, N);
            assert_int_equal(train_dnn_sync_step(a, xa, g), 0);
        }
        bool frozen = train_dnn_sync_frozen(a);
        long len = train_dnn_sync_publish(a, xa, buf, cap);
        assert_true(len > 0);
        if (frozen)
            onebit_len = (size_t)len;
        else
            exact_len = (size_t)len;
        update_error_t err;
        assert_int_equal(train_dnn_sync_apply(b, xb, buf, (size_t)len, &err), 0);
        for (uint32_t i = 0; i < N; i++)
            assert_float_equal(xa[i], xb[i], 1e-5);
    }
    assert_true(train_dnn_sync_frozen(a));
    assert_true(exact_len > 4 * N && onebit_len < exact_len / 8); /* ~1 bit + scales per value */
    free(xa), free(xb), free(g), free(buf);
    train_dnn_sync_destroy(a), train_dnn_sync_destroy(b);
}

static void test_error_feedback_sum(void **state)
{
    (void)state;
    train_dnn_sync_t *a = make(N, 1, 1, "dnn"), *b = make(N, 2, 1, "dnn");
    float *xa = calloc(N, 4), *xb = calloc(N, 4), *g = malloc(4 * N), *before = malloc(4 * N);
    double *truth = calloc(N, sizeof(double));
    size_t cap = train_dnn_sync_bound(a);
    uint8_t *buf = malloc(cap);
    for (int interval = 0; interval < 40; interval++) {
        memcpy(before, xa, 4 * N);
        for (int k = 0; k < 3; k++) {
            gradient(g, xa, N);
            assert_int_equal(train_dnn_sync_step(a, xa, g), 0);
        }
        for (uint32_t i = 0; i < N; i++)
            truth[i] += (double)xa[i] - before[i];
        long len = train_dnn_sync_publish(a, xa, buf, cap);
        assert_true(len > 0 && (size_t)len < cap / 8);
        assert_int_equal(train_dnn_sync_apply(b, xb, buf, (size_t)len, NULL), 0);
    }
    const float *res = train_dnn_sync_residual(a);
    double max_res = 0;
    for (uint32_t i = 0; i < N; i++) {
        /* xb = 0 + sum of decoded messages. */
        assert_float_equal((double)xb[i] + res[i], truth[i], 1e-4);
        max_res = fmax(max_res, fabs(res[i]));
    }
    assert_true(max_res > 0); /* 1 bit did leave something behind */
    free(xa), free(xb), free(g), free(before), free(truth), free(buf);
    train_dnn_sync_destroy(a), train_dnn_sync_destroy(b);
}

/* R replicas, each stepping on its own noisy gradients, all messages
 * delivered at the end of each interval; returns the mean squared distance
 * to the optimum of replica 0 and the bytes exchanged. */
static double run_replicas(int R, bool onebit, uint64_t *bytes)
{
    enum { RMAX = 4, INTERVALS = 150, STEPS = 4 };
    train_dnn_sync_t *s[RMAX];
    float *x[RMAX], *g = malloc(4 * N);
    uint8_t *buf[RMAX];
    size_t cap = 0;
    long len[RMAX];
    rng_state = 0x1234567ull;
    for (int r = 0; r < R; r++) {
        s[r] = make(N, (uint64_t)r + 1, onebit ? 40 : UINT32_MAX, "dnn");
        x[r] = calloc(N, 4);
        cap = train_dnn_sync_bound(s[r]);
        buf[r] = malloc(cap);
    }
    *bytes = 0;
    for (int t = 0; t < INTERVALS; t++) {
        for (int r = 0; r < R; r++) {
            for (int k = 0; k < STEPS; k++) {
                gradient(g, x[r], N);
                assert_int_equal(train_dnn_sync_step(s[r], x[r], g), 0);
            }
            len[r] = train_dnn_sync_publish(s[r], x[r], buf[r], cap);
            assert_true(len[r] > 0);
            *bytes += (uint64_t)len[r];
        }
        for (int r = 0; r < R; r++) /* each replica applies its peers' in a different order */
            for (int j = 1; j < R; j++) {
                int p = (r + (r % 2 ? R - j : j)) % R;
                assert_int_equal(train_dnn_sync_apply(s[r], x[r], buf[p], (size_t)len[p], NULL), 0);
            }
    }
    double d = 0;
    for (uint32_t i = 0; i < N; i++) {
        double e = x[0][i] - sin((double)i);
        d += e * e;
        for (int r = 1; r < R; r++) /* replicas agree once all messages are in */
            assert_float_equal(x[r][i], x[0][i], 1e-4);
    }
    for (int r = 0; r < R; r++) {
        train_dnn_sync_destroy(s[r]);
        free(x[r]), free(buf[r]);
    }
    free(g);
    return d / N;
}

static void test_four_replicas_converge(void **state)
{
    (void)state;
    uint64_t bytes_fp32, bytes_1bit;
    double d_fp32 = run_replicas(4, false, &bytes_fp32);
    double d_1bit = run_replicas(4, true, &bytes_1bit);
    /* From 0.5 (mean sin^2) to the noise floor, 1 bit as close as fp32. */
    assert_true(d_fp32 < 0.01);
    assert_true(d_1bit < 0.01);
    assert_true(d_1bit < 2 * d_fp32 + 1e-3);
    assert_true(bytes_1bit * 4 < bytes_fp32);
}

static void test_refusals(void **state)
{
    (void)state;
    train_dnn_sync_t *a = make(N, 1, 1, "dnn"), *b = make(N, 2, 1, "dnn");
    train_dnn_sync_t *wrong_n = make(N + 1, 3, 1, "dnn"), *other = make(N, 4, 1, "wide");
    float *xa = calloc(N + 1, 4), *xb = calloc(N, 4), *g = malloc(4 * (N + 1));
    size_t cap = train_dnn_sync_bound(wrong_n);
    uint8_t *buf = malloc(cap);
    update_error_t err;
    gradient(g, xa, N + 1);

    g[7] = NAN;
    assert_int_equal(train_dnn_sync_step(a, xa, g), -EINVAL);
    g[7] = 0;
    assert_int_equal(train_dnn_sync_step(a, xa, g), 0);
    long len = train_dnn_sync_publish(a, xa, buf, 16);
    assert_int_equal(len, -ENOBUFS);
    len = train_dnn_sync_publish(a, xa, buf, cap);
    assert_true(len > 0);

    for (size_t n = 0; n < (size_t)len; n++) /* no truncation passes */
        assert_int_equal(train_dnn_sync_apply(b, xb, buf, n, &err), -EBADMSG);
    assert_int_equal(train_dnn_sync_apply(a, xa, buf, (size_t)len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "this replica"));

    xb[5] = INFINITY; /* a result not finite (FLT_MAX + a small delta rounds back): nothing written */
    float *copy = malloc(4 * N);
    memcpy(copy, xb, 4 * N);
    int rc = train_dnn_sync_apply(b, xb, buf, (size_t)len, &err);
    assert_int_equal(rc, -EINVAL);
    assert_non_null(strstr(err.msg, "non-finite"));
    assert_memory_equal(copy, xb, 4 * N);
    memset(xb, 0, 4 * N);

    assert_int_equal(train_dnn_sync_step(wrong_n, xa, g), 0);
    len = train_dnn_sync_publish(wrong_n, xa, buf, cap);
    assert_true(len > 0);
    assert_int_equal(train_dnn_sync_apply(b, xb, buf, (size_t)len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "values, the MLP has"));

    assert_int_equal(train_dnn_sync_step(other, xa, g), 0);
    len = train_dnn_sync_publish(other, xa, buf, cap);
    assert_true(len > 0);
    assert_int_equal(train_dnn_sync_apply(b, xb, buf, (size_t)len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "model name"));

    /* A sparse message of the same model. */
    update_acc_t *acc = NULL;
    update_acc_config_t acfg = {.k = 1, .chunk = 8, .max_keys = 16, .producer = 9, .first_seq = 1, .model = "dnn"};
    assert_int_equal(update_acc_create(&acc, &acfg), 0);
    float one = 1.0f;
    assert_int_equal(update_acc_add(acc, 42, &one), 0);
    update_encode_opts_t opts = {.flags = UPDATE_F_EXACT, .select_count = UINT32_MAX};
    len = update_acc_encode(acc, &opts, buf, cap);
    assert_true(len > 0);
    assert_int_equal(train_dnn_sync_apply(b, xb, buf, (size_t)len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "not DENSE"));
    for (uint32_t i = 0; i < N; i++)
        assert_true(xb[i] == 0.0f);
    update_acc_destroy(acc);

    train_dnn_sync_config_t bad = {.n = 0, .chunk = CHUNK, .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                                   .eps = 1e-8f, .producer = 1, .model = "dnn"};
    train_dnn_sync_t *none = NULL;
    assert_int_equal(train_dnn_sync_create(&none, &bad), -EINVAL);
    bad.n = N, bad.producer = 0;
    assert_int_equal(train_dnn_sync_create(&none, &bad), -EINVAL);
    assert_null(none);

    free(xa), free(xb), free(g), free(buf), free(copy);
    train_dnn_sync_destroy(a), train_dnn_sync_destroy(b), train_dnn_sync_destroy(wrong_n),
        train_dnn_sync_destroy(other);
}

/* A restart (server/online_sync_dense.c): a fresh state that replays the
 * same steps and subtracts its earlier run's message has nothing left to
 * send; another producer's message is not subtracted; reset empties. */
static void test_subtract_own_and_reset(void **state)
{
    (void)state;
    enum { STEPS = 3 };
    train_dnn_sync_t *a = make(N, 1, 1000, "dnn"), *b = make(N, 2, 1000, "dnn");
    float *x = calloc(N, 4), *xb = calloc(N, 4), *g = malloc(4 * (size_t)N * STEPS);
    size_t cap = train_dnn_sync_bound(a);
    uint8_t *earlier = malloc(cap), *buf = malloc(cap);
    update_error_t err;
    for (int k = 0; k < STEPS; k++) {
        gradient(g + (size_t)k * N, x, N);
        assert_int_equal(train_dnn_sync_step(a, x, g + (size_t)k * N), 0);
    }
    long elen = train_dnn_sync_publish(a, x, earlier, cap); /* exact: in the warm-up */
    assert_true(elen > 0);
    train_dnn_sync_destroy(a);

    train_dnn_sync_t *a2 = make(N, 1, 1000, "dnn"); /* restarted: replays the same steps */
    memset(x, 0, 4 * N);
    for (int k = 0; k < STEPS; k++)
        assert_int_equal(train_dnn_sync_step(a2, x, g + (size_t)k * N), 0);
    assert_int_equal(train_dnn_sync_steps(a2), STEPS);
    assert_int_equal(train_dnn_sync_subtract_own(a2, earlier, (size_t)elen, &err), 0);
    long len = train_dnn_sync_publish(a2, x, buf, cap);
    assert_true(len > 0);
    assert_int_equal(train_dnn_sync_apply(b, xb, buf, (size_t)len, &err), 0);
    for (uint32_t i = 0; i < N; i++) /* the peer already had it all: nothing more */
        assert_true(xb[i] == 0.0f);

    /* b's message is not a2's to subtract; a truncated one neither */
    assert_int_equal(train_dnn_sync_step(b, xb, g), 0);
    len = train_dnn_sync_publish(b, xb, buf, cap);
    assert_true(len > 0);
    assert_int_equal(train_dnn_sync_subtract_own(a2, buf, (size_t)len, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "not this replica"));
    assert_int_equal(train_dnn_sync_subtract_own(a2, earlier, (size_t)elen - 1, &err), -EBADMSG);

    /* reset: a fresh state, nothing pending */
    assert_int_equal(train_dnn_sync_step(a2, x, g), 0);
    train_dnn_sync_reset(a2);
    assert_int_equal(train_dnn_sync_steps(a2), 0);
    assert_false(train_dnn_sync_frozen(a2));
    memset(xb, 0, 4 * N);
    len = train_dnn_sync_publish(a2, x, buf, cap);
    assert_true(len > 0);
    train_dnn_sync_t *c = make(N, 3, 1000, "dnn");
    assert_int_equal(train_dnn_sync_apply(c, xb, buf, (size_t)len, &err), 0);
    for (uint32_t i = 0; i < N; i++)
        assert_true(xb[i] == 0.0f);

    free(x), free(xb), free(g), free(earlier), free(buf);
    train_dnn_sync_destroy(a2), train_dnn_sync_destroy(b), train_dnn_sync_destroy(c);
}

/* A quiet interval's flush: after 1-bit turns the peer lacks a's
 * residual; the flush sends it exact and both hold every step of a. */
static void test_flush_sends_what_is_owed(void **state)
{
    (void)state;
    train_dnn_sync_t *a = make(N, 1, 1, "dnn"), *b = make(N, 2, 1, "dnn");
    float *xa = calloc(N, 4), *xb = calloc(N, 4), *g = malloc(4 * N);
    size_t cap = train_dnn_sync_bound(a);
    uint8_t *buf = malloc(cap);
    update_error_t err;
    assert_false(train_dnn_sync_owes(a));
    for (int k = 0; k < 5; k++) {
        gradient(g, xa, N);
        assert_int_equal(train_dnn_sync_step(a, xa, g), 0);
        long len = train_dnn_sync_publish(a, xa, buf, cap); /* 1 bit: past the warm-up of 1 */
        assert_true(len > 0 && (size_t)len < cap / 4);
        assert_int_equal(train_dnn_sync_apply(b, xb, buf, (size_t)len, &err), 0);
    }
    assert_true(train_dnn_sync_owes(a));
    double before = 0;
    for (uint32_t i = 0; i < N; i++)
        before = fmax(before, fabs(xa[i] - xb[i])); /* a's x is what it sent: equal already */
    float *sent = malloc(4 * N);
    memcpy(sent, xa, 4 * N);
    long len = train_dnn_sync_flush(a, xa, buf, cap);
    assert_true(len > 0);
    assert_false(train_dnn_sync_owes(a));
    assert_int_equal(train_dnn_sync_apply(b, xb, buf, (size_t)len, &err), 0);
    double after = 0, moved = 0;
    for (uint32_t i = 0; i < N; i++) {
        after = fmax(after, fabs(xa[i] - xb[i]));
        moved = fmax(moved, fabs(xa[i] - sent[i]));
    }
    assert_true(before < 1e-6 && after < 1e-6);
    assert_true(moved > 1e-5); /* the residual was real, and both now hold it */
    assert_int_equal(train_dnn_sync_flush(a, xa, buf, 16), -ENOBUFS);
    free(xa), free(xb), free(g), free(buf), free(sent);
    train_dnn_sync_destroy(a), train_dnn_sync_destroy(b);
}

static void test_variance_floor(void **state)
{
    (void)state;
    enum { M = 512 };
    train_dnn_sync_t *a = make(M, 1, 10, "dnn");
    float x[M] = {0}, g[M];
    for (int k = 0; k < 10; k++) { /* warm-up: parameter 0 never has a gradient */
        for (uint32_t i = 0; i < M; i++)
            g[i] = i == 0 ? 0.0f : 1.0f;
        assert_int_equal(train_dnn_sync_step(a, x, g), 0);
    }
    assert_true(train_dnn_sync_frozen(a));
    float x0 = x[0];
    g[0] = 1.0f;
    assert_int_equal(train_dnn_sync_step(a, x, g), 0);
    /* floor = 1% of the mean v (~1): sqrt 0.1; m's bias-corrected value
     * after 11 steps is ~0.1/0.69; the step stays under lr (0.01) x 2. */
    assert_true(fabsf(x[0] - x0) > 0.0f);
    assert_true(fabsf(x[0] - x0) < 0.02f);
    train_dnn_sync_destroy(a);
}

/* ---- two real DNN trainers ---- */

struct pair {
    train_t *t[2];
    int who[2];
};
static struct pair *the_pair;

static void row_to_peer(void *ctx, uint64_t id, const float *d, uint32_t n)
{
    (void)n;
    int from = *(const int *)ctx;
    assert_int_equal(train_rows_sync_apply(the_pair->t[1 - from], id, d), 0);
}

/* Saved into arrays of n each; the caller frees sv->m (one block). */
static train_dnn_sync_saved_t saved_of(const train_dnn_sync_t *s, uint32_t n)
{
    float *block = calloc(4 * (size_t)n, sizeof(float));
    assert_non_null(block);
    train_dnn_sync_saved_t sv = {.n = n, .m = block, .v = block + n, .pending = block + 2 * n,
                                 .error = block + 3 * n};
    assert_int_equal(train_dnn_sync_save(s, &sv), 0);
    return sv;
}

static void test_save_restore(void **state)
{
    (void)state;
    const uint32_t n = 300;
    float *xa = calloc(n, sizeof(float)), *xb = calloc(n, sizeof(float)),
          *g = calloc(n, sizeof(float));
    size_t cap = 0;
    uint8_t *ba = NULL, *bb = NULL;
    assert_non_null(xa);
    assert_non_null(xb);
    assert_non_null(g);
    for (int cut = 0; cut < 2; cut++) { /* mid warm-up, then after the freeze */
        train_dnn_sync_t *a = make(n, 1, 6, "m");
        if (!ba) {
            cap = train_dnn_sync_bound(a);
            ba = malloc(cap);
            bb = malloc(cap);
            assert_non_null(ba);
            assert_non_null(bb);
        }
        memset(xa, 0, n * sizeof(float));
        for (int t = 0; t < (cut ? 11 : 3); t++) { /* steps and 1-bit turns: an error vector */
            gradient(g, xa, n);
            assert_int_equal(train_dnn_sync_step(a, xa, g), 0);
            if (t % 2)
                assert_true(train_dnn_sync_publish(a, xa, ba, cap) > 0);
        }
        gradient(g, xa, n);
        assert_int_equal(train_dnn_sync_step(a, xa, g), 0); /* a pending delta at the save */
        train_dnn_sync_saved_t sv = saved_of(a, n);
        /* another warm-up length configured: the saved one wins */
        train_dnn_sync_t *b = make(n, 1, cut ? 100 : 2, "m");
        assert_int_equal(train_dnn_sync_restore(b, &sv), 0);
        memcpy(xb, xa, n * sizeof(float));
        assert_int_equal(train_dnn_sync_steps(b), train_dnn_sync_steps(a));
        assert_int_equal(train_dnn_sync_frozen(b), train_dnn_sync_frozen(a));
        for (int t = 0; t < 8; t++) { /* through the freeze when cut is 0 */
            gradient(g, xa, n);
            assert_int_equal(train_dnn_sync_step(a, xa, g), 0);
            assert_int_equal(train_dnn_sync_step(b, xb, g), 0);
            train_dnn_sync_set_header(a, 5 + t, 1);
            train_dnn_sync_set_header(b, 5 + t, 1);
            long la = train_dnn_sync_publish(a, xa, ba, cap);
            long lb = train_dnn_sync_publish(b, xb, bb, cap);
            assert_true(la > 0);
            assert_int_equal(la, lb);
            assert_memory_equal(ba, bb, (size_t)la);
            assert_memory_equal(xa, xb, n * sizeof(float));
        }
        assert_memory_equal(train_dnn_sync_residual(a), train_dnn_sync_residual(b),
                            n * sizeof(float));
        /* refusals: nothing changed */
        train_dnn_sync_saved_t bad = sv;
        bad.n = n - 1;
        assert_int_equal(train_dnn_sync_restore(b, &bad), -EINVAL);
        bad = sv;
        bad.warmup_steps = 0;
        assert_int_equal(train_dnn_sync_restore(b, &bad), -EINVAL);
        bad = sv;
        bad.b2_pow = 1.5;
        assert_int_equal(train_dnn_sync_restore(b, &bad), -EINVAL);
        float keep = sv.v[7];
        sv.v[7] = -1e-3f;
        assert_int_equal(train_dnn_sync_restore(b, &sv), -EINVAL);
        sv.v[7] = keep;
        sv.error[3] = NAN;
        assert_int_equal(train_dnn_sync_restore(b, &sv), -EINVAL);
        train_dnn_sync_saved_t now = saved_of(b, n), wrong = {.n = n + 1};
        assert_int_equal(train_dnn_sync_save(b, &wrong), -EINVAL);
        assert_int_equal(now.steps, train_dnn_sync_steps(a)); /* the refusals left b as it was */
        free(now.m);
        /* a reset (another snapshot) goes back to the configured warm-up: 100 after the
         * freeze's cut (7 steps: not frozen), 2 mid warm-up (frozen) */
        train_dnn_sync_reset(b);
        for (int t = 0; t < 7; t++) {
            gradient(g, xb, n);
            assert_int_equal(train_dnn_sync_step(b, xb, g), 0);
        }
        assert_int_equal(train_dnn_sync_frozen(b), !cut);
        free(sv.m);
        train_dnn_sync_destroy(a);
        train_dnn_sync_destroy(b);
    }
    free(ba);
    free(bb);
    free(xa);
    free(xb);
    free(g);
}

static void test_dnn_trainers_agree(void **state)
{
    (void)state;
    train_options_t o;
    assert_int_equal(train_defaults(STORE_MODEL_DNN, TRAIN_ADAGRAD, &o), 0);
    o.dnn.fields = 3;
    o.dnn.dim = 4;
    o.dnn.n_hidden = 1;
    o.dnn.hidden[0] = 8;
    struct pair p = {.who = {0, 1}};
    the_pair = &p;
    train_dnn_sync_t *s[2];
    char why[256];
    uint8_t *buf[2];
    size_t n = 0, cap = 0;
    for (int r = 0; r < 2; r++) {
        if (train_create(&o, &p.t[r], why, sizeof why) != 0)
            fail_msg("%s", why);
        n = train_dnn_mlp_floats(p.t[r]);
        assert_true(n > 3 * 4 * 8);
        s[r] = make((uint32_t)n, (uint64_t)r + 1, 20, "dnn");
        assert_int_equal(train_dnn_sync_publish_mlp(p.t[r], NULL, 0), -ENOTSUP);
        assert_int_equal(train_dnn_sync_attach(p.t[r], s[r]), 0);
        assert_int_equal(train_rows_sync_hook(p.t[r], row_to_peer, &p.who[r]), 0);
        cap = train_dnn_sync_bound(s[r]);
        buf[r] = malloc(cap);
    }
    train_dnn_sync_t *wrong = make((uint32_t)n + 1, 9, 20, "dnn");
    assert_int_equal(train_dnn_sync_attach(p.t[0], wrong), -EINVAL);
    train_options_t lo;
    assert_int_equal(train_defaults(STORE_MODEL_LR, TRAIN_FTRL, &lo), 0);
    train_t *lr = NULL;
    if (train_create(&lo, &lr, why, sizeof why) != 0)
        fail_msg("%s", why);
    assert_int_equal(train_dnn_sync_attach(lr, wrong), -ENOTSUP);
    assert_int_equal(train_dnn_mlp_floats(lr), 0);
    train_destroy(lr);
    train_dnn_sync_destroy(wrong);

    enum { SAMPLES = 64 };
    uint64_t ids[SAMPLES][3];
    float labels[SAMPLES];
    for (int i = 0; i < SAMPLES; i++) {
        for (uint64_t f = 0; f < 3; f++)
            ids[i][f] = (f << 56) | (uint64_t)(1 + (i * 7 + (int)f) % 11);
        labels[i] = (i % 3 == 0) ? 1.0f : 0.0f;
    }
    const codec_block_t none = {0};
    for (int interval = 0; interval < 12; interval++) {
        for (int r = 0; r < 2; r++)
            for (int k = 0; k < 8; k++) {
                int i = (interval * 16 + 2 * k + r) % SAMPLES;
                codec_block_t b = {.ids = ids[i], .values = NULL, .n = 3};
                assert_int_equal(train_update(p.t[r], &b, &none, 1, &labels[i], NULL, NULL), 0);
            }
        long len[2];
        for (int r = 0; r < 2; r++) {
            len[r] = train_dnn_sync_publish_mlp(p.t[r], buf[r], cap);
            assert_true(len[r] > 0);
        }
        for (int r = 0; r < 2; r++)
            assert_int_equal(train_dnn_sync_apply_mlp(p.t[r], buf[1 - r], (size_t)len[1 - r], NULL), 0);
    }
    assert_true(train_dnn_sync_frozen(s[0]) && train_dnn_sync_frozen(s[1]));
    double spread = 0;
    for (int i = 0; i < SAMPLES; i++) {
        codec_block_t b = {.ids = ids[i], .values = NULL, .n = 3};
        float p0 = train_predict(p.t[0], &b, NULL), p1 = train_predict(p.t[1], &b, NULL);
        assert_float_equal(p0, p1, 1e-5);
        spread = fmax(spread, fabs(p0 - 0.5));
    }
    assert_true(spread > 0.01); /* they learned something */
    for (int r = 0; r < 2; r++) {
        train_destroy(p.t[r]);
        train_dnn_sync_destroy(s[r]);
        free(buf[r]);
    }
}

static void test_parts(void **state)
{
    (void)state;
    const size_t max = 1200; /* an exact message of N = 1000 floats is ~4 KB: 4 parts */
    const uint32_t warmup = 12;
    train_dnn_sync_t *whole = make(N, 1, warmup, "dnn"), *parted = make_with(N, 1, warmup, "dnn", max);
    train_dnn_sync_t *rw = make(N, 2, warmup, "dnn"), *rp = make(N, 2, warmup, "dnn");
    assert_int_equal(train_dnn_sync_max_parts(whole), 1);
    assert_int_equal(train_dnn_sync_max_parts(parted), 4);
    float *xw = calloc(N, 4), *xp = calloc(N, 4), *yw = calloc(N, 4), *yp = calloc(N, 4);
    float *g = malloc(4 * N);
    size_t capw = train_dnn_sync_bound(whole), capp = train_dnn_sync_bound(parted);
    assert_true(capp > capw && capp < capw + 4 * 100); /* the parts' headers */
    uint8_t *bw = malloc(capw), *bp = malloc(capp);
    uint64_t seq = 100;
    int parted_turns = 0;
    for (int interval = 0; interval < 8; interval++) {
        for (int k = 0; k < 3; k++) {
            gradient(g, xw, N);
            assert_int_equal(train_dnn_sync_step(whole, xw, g), 0);
            assert_int_equal(train_dnn_sync_step(parted, xp, g), 0);
        }
        train_dnn_sync_set_header(parted, seq, 7);
        train_dnn_sync_set_header(whole, 1, 7);
        long lw = interval == 7 ? train_dnn_sync_flush(whole, xw, bw, capw)
                                : train_dnn_sync_publish(whole, xw, bw, capw);
        long lp = interval == 7 ? train_dnn_sync_flush(parted, xp, bp, capp)
                                : train_dnn_sync_publish(parted, xp, bp, capp);
        assert_true(lw > 0 && lp > 0);
        assert_int_equal(train_dnn_sync_apply(rw, yw, bw, (size_t)lw, NULL), 0);
        const uint8_t *part[8];
        size_t plen[8], np = 0;
        uint32_t covered = 0;
        for (size_t off = 0; off < (size_t)lp; np++) {
            assert_true(np < 8);
            plen[np] = update_msg_span(bp + off, (size_t)lp - off);
            assert_true(plen[np] > 0 && plen[np] <= max);
            update_msg_t m;
            assert_int_equal(update_msg_decode(bp + off, plen[np], &m, NULL), 0);
            assert_int_equal(m.seq, seq++); /* one sequence number a message */
            assert_int_equal(m.dense_total, N);
            assert_int_equal(m.dense_offset, covered);
            assert_int_equal(m.dense_offset % CHUNK, 0);
            assert_int_equal(!!(m.flags & UPDATE_F_PART), lp > (long)max);
            covered += m.count;
            part[np] = bp + off;
            off += plen[np];
        }
        assert_int_equal(covered, N);
        parted_turns += np > 1;
        for (size_t i = np; i-- > 0;) /* last part first: any order adds up alike */
            assert_int_equal(train_dnn_sync_apply(rp, yp, part[i], plen[i], NULL), 0);
        /* the same values sent, framed otherwise: bit for bit */
        assert_memory_equal(xw, xp, 4 * N);
        assert_memory_equal(yw, yp, 4 * N);
    }
    assert_true(train_dnn_sync_frozen(parted));
    assert_int_equal(parted_turns, 4); /* the exact turns: 3 of the warm-up, the flush */

    /* a part of a vector of another length is refused, naming both */
    train_dnn_sync_t *other = make_with(2 * N, 3, warmup, "dnn", max);
    float *xo = calloc(2 * N, 4);
    uint8_t *bo = malloc(train_dnn_sync_bound(other));
    gradient(g, xo, N);
    float *go = calloc(2 * N, 4);
    memcpy(go, g, 4 * N);
    assert_int_equal(train_dnn_sync_step(other, xo, go), 0);
    long lo = train_dnn_sync_publish(other, xo, bo, train_dnn_sync_bound(other));
    assert_true(lo > 0);
    update_error_t err;
    size_t first = update_msg_span(bo, (size_t)lo);
    assert_true(first > 0 && first < (size_t)lo);
    assert_int_equal(train_dnn_sync_apply(rp, yp, bo, first, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "of a vector of 2000 values, the MLP has 1000"));
    free(xo), free(bo), free(go);
    train_dnn_sync_destroy(other);

    /* a limit under a message of one value: refused at create */
    train_dnn_sync_config_t tiny = {.n = N, .chunk = CHUNK, .warmup_steps = 1, .lr = 0.01f,
                                    .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .producer = 1,
                                    .model = "dnn", .max_msg_bytes = 40};
    train_dnn_sync_t *t = NULL;
    assert_int_equal(train_dnn_sync_create(&t, &tiny), -EINVAL);
    free(xw), free(xp), free(yw), free(yp), free(g), free(bw), free(bp);
    train_dnn_sync_destroy(whole), train_dnn_sync_destroy(parted);
    train_dnn_sync_destroy(rw), train_dnn_sync_destroy(rp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_agree),
        cmocka_unit_test(test_error_feedback_sum),
        cmocka_unit_test(test_four_replicas_converge),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_subtract_own_and_reset),
        cmocka_unit_test(test_flush_sends_what_is_owed),
        cmocka_unit_test(test_variance_floor),
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_save_restore),
        cmocka_unit_test(test_dnn_trainers_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
