/*
 * test_update_dense.c — the dense update messages (model/update_codec.h) that
 * partitioned DNN replicas exchange for their MLP:
 *
 *   - error feedback loses nothing, in 1 bit and in 4 bits (LOG4): what was
 *     decoded plus the error left equals what went in; a value far above its
 *     chunk's others goes out at its size in 4 bits; LOG4 with EXACT is
 *     refused;
 *   - exact dense is bit for bit; a part (a range of the vector) decodes
 *     into its range only, and bad ranges are refused on encode and decode;
 *   - 1-bit and 4-bit Adam (exact warm-up, frozen variance, the momentum
 *     compressed with error feedback) on a toy quadratic shared by 4
 *     replicas end within a small tolerance of plain Adam.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/update_codec.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_rng.h"
#include "test_update_msg.h"

#define DN 300

/* 40 vectors through an encoder of flags (0: 1 bit, or LOG4): what was
 * decoded plus the error left equals what went in. */
static update_dense_t *dense_conserve(uint32_t flags)
{
    update_dense_t *d = NULL;
    assert_int_equal(update_dense_create(&d, DN, 32, 9, 1, "mlp"), 0);
    size_t cap = update_dense_bound(d, flags);
    uint8_t *buf = malloc(cap);
    double truth[DN] = {0}, got[DN] = {0}, mass[DN] = {0};
    float v[DN], out[DN];
    rng_state = 11;
    for (int t = 0; t < 40; t++) {
        for (int i = 0; i < DN; i++) {
            v[i] = (float)((unif() - 0.3) * (i % 7 + 1));
            truth[i] += v[i];
            mass[i] += fabsf(v[i]);
        }
        long len = update_dense_encode(d, v, flags, 3, buf, cap);
        assert_int_equal(len, (long)cap);
        update_msg_t m;
        assert_int_equal(update_msg_decode(buf, (size_t)len, &m, NULL), 0);
        assert_int_equal(m.seq, (uint64_t)t + 1);
        assert_int_equal(m.flags, flags | UPDATE_F_DENSE);
        assert_int_equal(update_msg_dense(&m, out, DN), 0);
        for (int i = 0; i < DN; i++) {
            got[i] += out[i];
            mass[i] += fabsf(out[i]);
        }
    }
    const float *e = update_dense_error(d);
    for (int i = 0; i < DN; i++)
        assert_true(fabs(got[i] + e[i] - truth[i]) <= 1e-5 * mass[i]);
    free(buf);
    return d;
}

/* LOG4 dense: conserving as 1 bit is; a value far above its chunk's others
 * goes out at its own size (its chunk's scale), where 1 bit sends it at the
 * chunk's mean and keeps the rest as error, message after message. */
static void test_dense_log4(void **state)
{
    (void)state;
    update_dense_destroy(dense_conserve(UPDATE_F_LOG4));
    for (int bits = 1; bits <= 4; bits += 3) {
        uint32_t flags = bits == 4 ? UPDATE_F_LOG4 : 0;
        update_dense_t *d = NULL;
        assert_int_equal(update_dense_create(&d, 64, 32, 9, 1, "mlp"), 0);
        size_t cap = update_dense_bound(d, flags);
        assert_int_equal(cap, update_dense_bound(d, 0) + (bits == 4 ? 24 : 0)); /* 32 vs 8 bytes */
        uint8_t buf[512];
        float v[64], out[64];
        for (int i = 0; i < 64; i++)
            v[i] = i == 5 ? 100.0f : (i % 2 ? 1.0f : -1.0f);
        long len = update_dense_encode(d, v, flags, 3, buf, sizeof buf);
        assert_int_equal(len, (long)cap);
        update_msg_t m;
        assert_int_equal(update_msg_decode(buf, (size_t)len, &m, NULL), 0);
        assert_int_equal(update_msg_dense(&m, out, 64), 0);
        if (bits == 4) {
            assert_float_equal(out[5], 100.0f, 0);  /* the chunk's largest: its scale */
            assert_float_equal(out[7], 100.0f / 64, 0); /* 1 is nearest 2^-6 of it */
            assert_float_equal(out[40], -1.0f, 0);  /* the second chunk's own scale */
        } else {
            assert_true(out[5] < 5.0f);             /* +- the chunk's mean, (100 + 31) / 32 */
            assert_true(update_dense_error(d)[5] > 95.0f);
        }
        update_dense_destroy(d);
    }
    update_dense_t *d = NULL;
    assert_int_equal(update_dense_create(&d, 8, 4, 9, 1, "mlp"), 0);
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint8_t buf[256];
    assert_int_equal(update_dense_encode(d, v, UPDATE_F_LOG4 | UPDATE_F_EXACT, 3, buf, sizeof buf), -EINVAL);
    update_dense_destroy(d);
}

static void test_dense_error_feedback(void **state)
{
    (void)state;
    update_dense_t *d = dense_conserve(0);
    uint8_t *buf = malloc(update_dense_bound(d, UPDATE_F_EXACT));
    size_t cap = update_dense_bound(d, 0);
    float v[DN], out[DN];
    for (int i = 0; i < DN; i++)
        v[i] = (float)((unif() - 0.3) * (i % 7 + 1));
    const float *e = update_dense_error(d);
    /* exact: bit for bit, the error untouched */
    float e0 = e[0];
    long len = update_dense_encode(d, v, UPDATE_F_EXACT, 3, buf, update_dense_bound(d, UPDATE_F_EXACT));
    update_msg_t m;
    assert_int_equal(update_msg_decode(buf, (size_t)len, &m, NULL), 0);
    assert_int_equal(update_msg_dense(&m, out, DN), 0);
    assert_memory_equal(out, v, sizeof v);
    assert_float_equal(update_dense_error(d)[0], e0, 0);
    assert_int_equal(update_msg_dense(&m, out, DN - 1), -EINVAL);
    v[7] = NAN;
    assert_int_equal(update_dense_encode(d, v, 0, 3, buf, cap), -EINVAL);
    free(buf);
    update_dense_destroy(d);
}

/* A part (UPDATE_F_PART): a range of the vector, its place in the header's
 * part field; decoded into that range only; the whole vector is not a
 * part; bad ranges refused on encode and on decode. */
static void test_dense_parts(void **state)
{
    (void)state;
    update_dense_t *d = NULL;
    assert_int_equal(update_dense_create(&d, 100, 8, 9, 1, "mlp"), 0);
    float v[100], out[100];
    for (int i = 0; i < 100; i++)
        v[i] = (float)i - 50.5f;
    size_t cap = update_dense_part_bound(d, 40, UPDATE_F_EXACT);
    assert_int_equal(cap, UPDATE_HEADER_BYTES + 3 + 8 + 4 * 40 + 8); /* header, name, part, values, sum */
    uint8_t buf[1024];
    long len = update_dense_encode_part(d, v, 16, 40, UPDATE_F_EXACT, 3, buf, cap);
    assert_int_equal(len, (long)cap);
    update_msg_t m;
    assert_int_equal(update_msg_decode(buf, (size_t)len, &m, NULL), 0);
    assert_int_equal(m.flags, UPDATE_F_EXACT | UPDATE_F_DENSE | UPDATE_F_PART);
    assert_int_equal(buf[4], UPDATE_FORMAT_VERSION);
    assert_int_equal(m.count, 40);
    assert_int_equal(m.dense_total, 100);
    assert_int_equal(m.dense_offset, 16);
    assert_int_equal(update_msg_span(buf, sizeof buf), (size_t)len);
    assert_int_equal(update_msg_span(buf, (size_t)len - 1), 0);
    for (int i = 0; i < 100; i++)
        out[i] = -1;
    assert_int_equal(update_msg_dense(&m, out, 100), 0);
    for (int i = 0; i < 100; i++)
        assert_true(out[i] == (i >= 16 && i < 56 ? v[i] : -1.0f));
    assert_int_equal(update_msg_dense(&m, out, 99), -EINVAL); /* another vector's length */
    /* 1 bit: the error vector moves on the range only */
    len = update_dense_encode_part(d, v, 96, 4, 0, 3, buf, sizeof buf);
    assert_true(len > 0);
    assert_int_equal(update_msg_decode(buf, (size_t)len, &m, NULL), 0);
    assert_int_equal(m.dense_offset, 96);
    const float *e = update_dense_error(d);
    for (int i = 0; i < 96; i++)
        assert_true(e[i] == 0.0f);
    /* the whole vector is one plain DENSE message */
    len = update_dense_encode_part(d, v, 0, 100, UPDATE_F_EXACT, 3, buf, sizeof buf);
    assert_int_equal(update_msg_decode(buf, (size_t)len, &m, NULL), 0);
    assert_int_equal(m.flags, UPDATE_F_EXACT | UPDATE_F_DENSE);
    assert_int_equal(m.dense_total, 100);
    assert_int_equal(m.dense_offset, 0);
    /* ranges the encoder refuses */
    assert_int_equal(update_dense_encode_part(d, v, 0, 0, 0, 3, buf, sizeof buf), -EINVAL);
    assert_int_equal(update_dense_encode_part(d, v, 90, 11, 0, 3, buf, sizeof buf), -EINVAL);
    assert_int_equal(update_dense_encode_part(d, v, 101, 1, 0, 3, buf, sizeof buf), -EINVAL);
    /* ranges the decoder refuses: the part field says more than the vector holds */
    len = update_dense_encode_part(d, v, 16, 40, UPDATE_F_EXACT, 3, buf, sizeof buf);
    const size_t part_at = UPDATE_HEADER_BYTES + 3;
    uint32_t off61 = 61, total_big = UPDATE_MAX_COUNT + 1;
    memcpy(buf + part_at + 4, &off61, 4); /* 61 + 40 > 100 */
    reseal(buf, (size_t)len);
    expect(buf, (size_t)len, UPDATE_E_LIMIT, part_at);
    len = update_dense_encode_part(d, v, 16, 40, UPDATE_F_EXACT, 3, buf, sizeof buf);
    memcpy(buf + part_at, &total_big, 4);
    reseal(buf, (size_t)len);
    expect(buf, (size_t)len, UPDATE_E_LIMIT, part_at);
    /* PART in a version 1 message, and PART on a sparse one */
    len = update_dense_encode_part(d, v, 16, 40, UPDATE_F_EXACT, 3, buf, sizeof buf);
    buf[4] = UPDATE_FORMAT_VERSION_V1;
    reseal(buf, (size_t)len);
    expect(buf, (size_t)len, UPDATE_E_FLAGS, 6);
    len = (long)sample(buf, 0);
    buf[4] = UPDATE_FORMAT_VERSION;
    buf[6] |= UPDATE_F_PART;
    reseal(buf, (size_t)len);
    expect(buf, (size_t)len, UPDATE_E_FLAGS, 6);
    update_dense_destroy(d);
}

/* 1-bit Adam vs plain Adam on f(x) = 1/2 sum_i a_i (x_i - c_i)^2, shared by
 * W replicas whose local targets differ (their mean is c): each replica's
 * gradient stays far from zero at the optimum, the hard case for 1 bit.
 * Learning rate 0.01, x0.1 at half the steps, x0.01 at three quarters. */
#define AD 64
#define AW 4
#ifndef ASTEPS
#define ASTEPS 3000
#endif
#ifndef AWARM
#define AWARM 300
#endif

struct quad {
    float a[AD], c[AD], cw[AW][AD];
};

static void grad(const struct quad *q, int w, const float *x, float *g)
{
    for (int i = 0; i < AD; i++)
        g[i] = q->a[i] * (x[i] - q->cw[w][i]);
}

static double loss(const struct quad *q, const float *x)
{
    double f = 0;
    for (int i = 0; i < AD; i++)
        f += 0.5 * q->a[i] * (x[i] - q->c[i]) * (x[i] - q->c[i]);
    return f;
}

/* qflags: the compressed messages' flags (0: 1 bit, UPDATE_F_LOG4: 4 bits) */
static double adam(const struct quad *q, bool onebit, uint32_t qflags)
{
    const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float x[AD] = {0}, m[AW][AD] = {{0}}, v[AD] = {0}, g[AD], mean[AD], out[AD];
    update_dense_t *enc[AW];
    for (int w = 0; w < AW; w++)
        assert_int_equal(update_dense_create(&enc[w], AD, 16, (uint64_t)w, 0, "mlp"), 0);
    size_t cap = update_dense_bound(enc[0], UPDATE_F_EXACT);
    uint8_t *buf = malloc(cap);
    for (int t = 1; t <= ASTEPS; t++) {
        float step_lr = lr * (t > ASTEPS * 3 / 4 ? 0.01f : t > ASTEPS / 2 ? 0.1f : 1.0f);
        bool compressed = onebit && t > AWARM;
        memset(mean, 0, sizeof mean);
        for (int w = 0; w < AW; w++) {
            grad(q, w, x, g);
            /* warm-up / plain: exchange gradients exactly; 1 bit: local momentum */
            float *send = g;
            if (compressed) {
                for (int i = 0; i < AD; i++)
                    m[w][i] = b1 * m[w][i] + (1 - b1) * g[i];
                send = m[w];
            }
            long len = update_dense_encode(enc[w], send, compressed ? qflags : UPDATE_F_EXACT, 0, buf, cap);
            assert_true(len > 0);
            update_msg_t msg;
            assert_int_equal(update_msg_decode(buf, (size_t)len, &msg, NULL), 0);
            assert_int_equal(update_msg_dense(&msg, out, AD), 0);
            for (int i = 0; i < AD; i++)
                mean[i] += out[i] / AW;
        }
        for (int i = 0; i < AD; i++) {
            if (compressed) {
                for (int w = 0; w < AW; w++)
                    m[w][i] = mean[i]; /* every replica adopts the decoded mean */
            } else {
                m[0][i] = b1 * m[0][i] + (1 - b1) * mean[i];
                v[i] = b2 * v[i] + (1 - b2) * mean[i] * mean[i];
                for (int w = 1; w < AW; w++)
                    m[w][i] = m[0][i];
            }
            float mh = m[0][i] / (1 - powf(b1, (float)t));
            float vh = v[i] / (1 - powf(b2, (float)(compressed ? AWARM : t))); /* frozen */
            x[i] -= step_lr * mh / (sqrtf(vh) + eps);
        }
    }
    for (int w = 0; w < AW; w++)
        update_dense_destroy(enc[w]);
    free(buf);
    return loss(q, x);
}

static void test_onebit_adam_quadratic(void **state)
{
    (void)state;
    static struct quad q;
    rng_state = 23;
    for (int i = 0; i < AD; i++) {
        q.a[i] = (float)(0.5 + 4.5 * unif());
        q.c[i] = (float)(unif() * 4 - 2);
        float off_sum = 0;
        for (int w = 0; w < AW; w++) {
            float off = w < AW - 1 ? (float)(unif() * 2 - 1) : -off_sum;
            off_sum += off;
            q.cw[w][i] = q.c[i] + off;
        }
    }
    float zero[AD] = {0};
    double f0 = loss(&q, zero);
    double plain = adam(&q, false, 0), onebit = adam(&q, true, 0), log4 = adam(&q, true, UPDATE_F_LOG4);
    print_message("quadratic: f(x0) %.4g, plain Adam %.3g, 1-bit Adam %.3g, 4-bit %.3g\n", f0, plain,
                  onebit, log4);
    /* compression leaves a floor that shrinks with the learning rate (about 30x for each 10x
     * step of the schedule); after the last step it is ~1.5e-6 of f(x0) */
    assert_true(plain < 1e-6 * f0);
    assert_true(fabs(onebit - plain) < 1e-5 * f0);
    assert_true(fabs(log4 - plain) < 1e-5 * f0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_log4),
        cmocka_unit_test(test_dense_error_feedback),
        cmocka_unit_test(test_dense_parts),
        cmocka_unit_test(test_onebit_adam_quadratic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
