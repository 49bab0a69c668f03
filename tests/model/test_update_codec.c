/*
 * test_update_codec.c — the update messages of partitioned replicas
 * (model/update_codec.h):
 *
 *   - 50 intervals of random sparse increments (fixed seed), 1-bit top-10%
 *     and exact top-30%: what the receiver applied plus the sender's
 *     residuals equal the true sums to float rounding, key by key, column by
 *     column; keys sent exactly leave the map (index consistency checked);
 *   - exact mode with k = all: the receiver gets the sender's floats bit for
 *     bit and the accumulator empties;
 *   - top-k picks the largest, each column counted relative to its mean;
 *   - producer, sequence, base version, model name, K and chunk round trip;
 *   - a full accumulator refuses a new key, an exact flush makes room;
 *   - every decoding refusal, one test each, and no truncation is accepted;
 *   - a message of 0 keys;
 *   - the rows' NONNEG_HALF and the 4-bit LOG4 values.
 * The dense messages (the DNN's MLP): test_update_dense.c.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/update_codec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "test_rng.h"
#include "test_update_msg.h"

/* ------------------------------------------------ conservation over time */

#define NU 3000 /* key universe */
#define KC 2

struct ref {
    uint64_t keys[NU];   /* sorted */
    double truth[NU][KC];
    double applied[NU][KC];
    double mass[NU][KC]; /* sum of |increments| and |applied|: the rounding scale */
    uint32_t seen;       /* keys in the last message */
};

static int find_key(const struct ref *r, uint64_t key)
{
    size_t lo = 0, hi = NU;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r->keys[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < NU && r->keys[lo] == key ? (int)lo : -1;
}

static int apply_ref(void *ctx, uint64_t key, const float *vals)
{
    struct ref *r = ctx;
    int i = find_key(r, key);
    assert_true(i >= 0);
    for (int j = 0; j < KC; j++) {
        r->applied[i][j] += vals[j];
        r->mass[i][j] += fabsf(vals[j]);
    }
    r->seen++;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void run_intervals(uint32_t flags, float fraction)
{
    static struct ref r;
    memset(&r, 0, sizeof r);
    rng_state = 17;
    for (int i = 0; i < NU; i++)
        r.keys[i] = rnd() >> (i % 3 ? 20 : 0);
    qsort(r.keys, NU, sizeof r.keys[0], cmp_u64);
    update_acc_t *acc = make_acc(KC, NU, 64);
    update_encode_opts_t o = {.flags = flags, .select_fraction = fraction, .base_version = 5};
    size_t cap = (size_t)NU * 32 + 1024; /* over any bound for NU keys, K = 2 */
    uint8_t *buf = malloc(cap);
    uint64_t seq = 1000;
    for (int t = 0; t < 50; t++) {
        for (int s = 0; s < 800; s++) {
            int i = (int)(rnd() % NU);
            float inc[KC] = {(float)((unif() - 0.5) * 0.2), (float)(unif() * unif() * 5.0)}; /* dz, dn */
            assert_int_equal(update_acc_add(acc, r.keys[i], inc), 0);
            for (int j = 0; j < KC; j++) {
                r.truth[i][j] += inc[j];
                r.mass[i][j] += fabsf(inc[j]);
            }
        }
        uint32_t held = update_acc_count(acc);
        long len = update_acc_encode(acc, &o, buf, cap);
        assert_true(len > 0);
        update_msg_t m;
        update_error_t err;
        assert_int_equal(update_msg_decode(buf, (size_t)len, &m, &err), 0);
        assert_int_equal(m.seq, seq++);
        assert_int_equal(m.producer, 77);
        assert_int_equal(m.count, (uint32_t)ceil((double)fraction * held));
        r.seen = 0;
        assert_int_equal(update_msg_foreach(&m, apply_ref, &r), 0);
        assert_int_equal(r.seen, m.count);
        if (flags & UPDATE_F_EXACT)
            assert_int_equal(update_acc_count(acc), held - m.count);
    }
    uint32_t present = 0;
    for (int i = 0; i < NU; i++) {
        const float *res = update_acc_get(acc, r.keys[i]);
        present += res != NULL;
        for (int j = 0; j < KC; j++) {
            double got = r.applied[i][j] + (res ? res[j] : 0.0);
            double tol = 1e-5 * r.mass[i][j] + 1e-30;
            if (fabs(got - r.truth[i][j]) > tol)
                fail_msg("key %d col %d: applied + residual %.9g, true sum %.9g (tol %.3g)", i, j, got,
                         r.truth[i][j], tol);
        }
    }
    assert_int_equal(present, update_acc_count(acc)); /* every held key found by its index */
    free(buf);
    update_acc_destroy(acc);
}

static void test_conservation_onebit(void **state) { (void)state; run_intervals(0, 0.1f); }
static void test_conservation_exact(void **state) { (void)state; run_intervals(UPDATE_F_EXACT, 0.3f); }

/* ------------------------------------------------------------ exactness */

struct snap {
    uint64_t keys[4096];
    float vals[4096][KC];
    uint32_t n;
};

static int snap_put(void *ctx, uint64_t key, const float *vals)
{
    struct snap *s = ctx;
    s->keys[s->n] = key;
    memcpy(s->vals[s->n], vals, sizeof s->vals[0]);
    s->n++;
    return 0;
}

/* One message of acc's top select_count keys with flags, decoded into a
 * snapshot (static: valid until the next call). */
static const struct snap *encode_snap(update_acc_t *acc, uint32_t flags, uint32_t select_count)
{
    static struct snap got;
    static uint8_t buf[8192];
    update_encode_opts_t o = {.flags = flags, .select_count = select_count};
    long len = update_acc_encode(acc, &o, buf, sizeof buf);
    assert_true(len > 0);
    got.n = 0;
    update_msg_t m;
    assert_int_equal(update_msg_decode(buf, (size_t)len, &m, NULL), 0);
    assert_int_equal(update_msg_foreach(&m, snap_put, &got), 0);
    return &got;
}

static void test_exact_all_bit_for_bit(void **state)
{
    (void)state;
    static struct snap before, after;
    before.n = after.n = 0;
    rng_state = 3;
    update_acc_t *acc = make_acc(KC, 4096, 128);
    for (int s = 0; s < 10000; s++) {
        float inc[KC] = {(float)(unif() - 0.5) * 1e-3f, (float)unif() * 7.0f};
        assert_int_equal(update_acc_add(acc, rnd() % 2000 + (rnd() & 1 ? 0 : UINT64_MAX - 2000), inc), 0);
    }
    update_acc_foreach(acc, snap_put, &before);
    static uint64_t ckeys[4096];
    static float cvals[4096][KC];
    assert_int_equal(update_acc_copy(acc, ckeys, &cvals[0][0]), before.n); /* the same snapshot */
    assert_memory_equal(ckeys, before.keys, before.n * sizeof *ckeys);
    assert_memory_equal(cvals, before.vals, before.n * sizeof *cvals);
    update_encode_opts_t o = {.flags = UPDATE_F_EXACT, .select_count = UINT32_MAX};
    size_t cap = update_acc_encode_bound(acc, &o);
    uint8_t *buf = malloc(cap);
    long len = update_acc_encode(acc, &o, buf, cap);
    assert_true(len > 0);
    assert_int_equal(update_acc_count(acc), 0);
    update_msg_t m;
    assert_int_equal(update_msg_decode(buf, (size_t)len, &m, NULL), 0);
    assert_int_equal(update_msg_foreach(&m, snap_put, &after), 0);
    assert_int_equal(after.n, before.n);
    for (uint32_t i = 0; i < after.n; i++) {
        uint32_t b = 0;
        while (before.keys[b] != after.keys[i])
            b++;
        assert_memory_equal(before.vals[b], after.vals[i], sizeof after.vals[i]);
        if (i)
            assert_true(after.keys[i] > after.keys[i - 1]);
    }
    free(buf);
    update_acc_destroy(acc);
}

/* ----------------------------------------------------------------- top-k */

static void test_topk_largest(void **state)
{
    (void)state;
    /* K = 2: column 1 is 1000x larger and the same for every key; column 0
     * orders the keys.  Plain |v| would pick by column 1 (ties); the column
     * means make column 0 decide. */
    update_acc_t *acc = make_acc(2, 256, 16);
    for (uint32_t i = 1; i <= 100; i++) {
        uint64_t key = (uint64_t)((i * 37) % 101) << 40;
        float inc[2] = {(i & 1 ? -1.0f : 1.0f) * (float)((i * 37) % 101), 1000.0f};
        assert_int_equal(update_acc_add(acc, key, inc), 0);
    }
    const struct snap *got = encode_snap(acc, UPDATE_F_EXACT, 10);
    assert_int_equal(got->n, 10);
    for (uint32_t i = 0; i < 10; i++) {
        assert_int_equal(got->keys[i], (uint64_t)(91 + i) << 40);
        assert_float_equal(fabsf(got->vals[i][0]), (float)(91 + i), 0);
    }
    assert_int_equal(update_acc_count(acc), 90);
    assert_null(update_acc_get(acc, (uint64_t)95 << 40));
    assert_non_null(update_acc_get(acc, (uint64_t)90 << 40));
    update_acc_destroy(acc);
}

/* The key one message of select_count 1 and flags carries, out of
 * (key, dz, dn) triples (K = 2, dn one-sided). */
static uint64_t first_chosen(const float (*v)[2], size_t n, uint32_t flags)
{
    update_acc_t *acc = make_acc(2, 16, 4);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(update_acc_add(acc, i + 1, v[i]), 0);
    const struct snap *got = encode_snap(acc, flags, 1);
    assert_int_equal(got->n, 1);
    update_acc_destroy(acc);
    return got->keys[0];
}

/* A 4-bit message chooses keys by their moves (dz), the one-sided sums (dn)
 * only breaking ties; a 1-bit one counts both columns, each against its
 * mean.  Key 1 moved most; key 2's dn grew most. */
static void test_select_by_moves(void **state)
{
    (void)state;
    const float v[3][2] = {{1.0f, 0.01f}, {-0.1f, 10.0f}, {0.5f, 0.1f}};
    assert_int_equal(first_chosen(v, 3, UPDATE_F_LOG4 | UPDATE_F_NONNEG_LAST), 1);
    assert_int_equal(first_chosen(v, 3, UPDATE_F_NONNEG_LAST), 2);
    const float tie[2][2] = {{0.5f, 1.0f}, {-0.5f, 5.0f}}; /* equal moves: the larger dn */
    assert_int_equal(first_chosen(tie, 2, UPDATE_F_LOG4 | UPDATE_F_NONNEG_LAST), 2);
}

/* ------------------------------------------------------- header, limits */

static void test_header_round_trip(void **state)
{
    (void)state;
    update_acc_t *acc = NULL;
    update_acc_config_t cfg = {.k = 3, .max_keys = 8, .producer = 0xfeedface12345678ull,
                               .first_seq = UINT64_MAX - 1, .chunk = 5, .model = "m.dnn_v2"};
    assert_int_equal(update_acc_create(&acc, &cfg), 0);
    float inc[3] = {1, -2, 3};
    assert_int_equal(update_acc_add(acc, 42, inc), 0);
    uint8_t buf[512];
    update_encode_opts_t o = {.select_count = UINT32_MAX, .base_version = 0x0123456789abcdefull};
    long len = update_acc_encode(acc, &o, buf, sizeof buf);
    assert_true(len > 0);
    update_msg_t m;
    assert_int_equal(update_msg_decode(buf, (size_t)len, &m, NULL), 0);
    assert_int_equal(m.producer, 0xfeedface12345678ull);
    assert_int_equal(m.seq, UINT64_MAX - 1);
    assert_int_equal(m.base_version, 0x0123456789abcdefull);
    assert_int_equal(m.k, 3);
    assert_int_equal(m.chunk, 5);
    assert_int_equal(m.count, 1);
    assert_int_equal(m.flags, 0);
    assert_int_equal(m.model_len, 8);
    assert_memory_equal(m.model, "m.dnn_v2", 8);
    assert_int_equal(update_acc_next_seq(acc), UINT64_MAX);
    /* one key, 1 bit: each value is its own chunk's scale, so exact, and the key leaves */
    assert_int_equal(update_acc_count(acc), 0);

    cfg.model = "bad name";
    update_acc_t *bad = NULL;
    assert_int_equal(update_acc_create(&bad, &cfg), -EINVAL);
    cfg.model = "ok";
    cfg.k = 0;
    assert_int_equal(update_acc_create(&bad, &cfg), -EINVAL);
    assert_null(bad);
    /* non-finite increments are refused, a short buffer changes nothing */
    float nan_inc[3] = {0, NAN, 0};
    assert_int_equal(update_acc_add(acc, 7, nan_inc), -EINVAL);
    assert_int_equal(update_acc_count(acc), 0);
    assert_int_equal(update_acc_add(acc, 7, inc), 0);
    assert_int_equal(update_acc_encode(acc, &o, buf, 20), -ENOBUFS);
    assert_int_equal(update_acc_count(acc), 1);
    assert_int_equal(update_acc_next_seq(acc), UINT64_MAX);
    update_encode_opts_t bad_o = {.select_fraction = 1.5f};
    assert_int_equal(update_acc_encode(acc, &bad_o, buf, sizeof buf), -EINVAL);
    update_acc_destroy(acc);
}

static void test_full_then_flush(void **state)
{
    (void)state;
    update_acc_t *acc = make_acc(2, 100, 8);
    float inc[2] = {0.5f, 1.0f};
    for (uint64_t k = 0; k < 100; k++)
        assert_int_equal(update_acc_add(acc, k * 1000003, inc), 0);
    assert_int_equal(update_acc_add(acc, 5, inc), -ENOSPC);
    assert_int_equal(update_acc_add(acc, 1000003, inc), 0); /* a held key still adds */
    assert_float_equal(update_acc_get(acc, 1000003)[0], 1.0f, 0);
    update_encode_opts_t flush = {.flags = UPDATE_F_EXACT, .select_count = UINT32_MAX};
    uint8_t buf[4096];
    assert_true(update_acc_encode(acc, &flush, buf, sizeof buf) > 0);
    assert_int_equal(update_acc_count(acc), 0);
    assert_int_equal(update_acc_add(acc, 5, inc), 0);
    update_acc_destroy(acc);
}

static void test_zero_keys(void **state)
{
    (void)state;
    update_acc_t *acc = make_acc(2, 16, 8);
    uint8_t buf[256];
    for (uint32_t flags = 0; flags <= UPDATE_F_EXACT; flags += UPDATE_F_EXACT) {
        update_encode_opts_t o = {.flags = flags, .select_fraction = 0.1f};
        long len = update_acc_encode(acc, &o, buf, sizeof buf);
        assert_int_equal(len, UPDATE_HEADER_BYTES + 6 + 8);
        update_msg_t m;
        assert_int_equal(update_msg_decode(buf, (size_t)len, &m, NULL), 0);
        assert_int_equal(m.count, 0);
        static struct snap s;
        s.n = 0;
        assert_int_equal(update_msg_foreach(&m, snap_put, &s), 0);
        assert_int_equal(s.n, 0);
    }
    update_acc_destroy(acc);
}

/* ------------------------------------------------------------- refusals */

/* sample() (test_update_msg.h): keys 5 and 9, K = 2, chunk 64. */
#define NAME_AT UPDATE_HEADER_BYTES
#define KEYS_AT (UPDATE_HEADER_BYTES + 6) /* "ctr-lr" */

static void test_refuse_size(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = sample(buf, 0);
    expect(buf, len - 1, UPDATE_E_SIZE, 40);
    expect(buf, 3, UPDATE_E_SIZE, 0);
    expect(buf, 40, UPDATE_E_SIZE, 0);
    for (size_t n = 0; n < len; n++) { /* no truncation passes */
        update_msg_t m;
        assert_int_equal(update_msg_decode(buf, n, &m, NULL), -EBADMSG);
    }
}

static void test_refuse_magic(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = sample(buf, 0);
    buf[0] ^= 1;
    expect(buf, len, UPDATE_E_MAGIC, 0);
}

static void test_refuse_version(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = sample(buf, 0);
    buf[4] = 3; /* 1 and 2 are read */
    reseal(buf, len);
    expect(buf, len, UPDATE_E_VERSION, 4);
}

static void test_refuse_flags(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = sample(buf, 0);
    buf[6] = 0x8;
    reseal(buf, len);
    expect(buf, len, UPDATE_E_FLAGS, 6);
    buf[6] = 0;
    buf[46] = 1;
    reseal(buf, len);
    expect(buf, len, UPDATE_E_FLAGS, 46);
}

static void test_refuse_limits(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = sample(buf, 0);
    uint8_t k0[2] = {0, 0}, big[4] = {0xff, 0xff, 0xff, 0x7f};
    memcpy(buf + 36, k0, 2);
    expect(buf, len, UPDATE_E_LIMIT, 36);
    len = sample(buf, 0);
    memcpy(buf + 38, k0, 2);
    expect(buf, len, UPDATE_E_LIMIT, 38);
    len = sample(buf, 0);
    memcpy(buf + 32, big, 4);
    expect(buf, len, UPDATE_E_LIMIT, 32);
    len = sample(buf, 0);
    memcpy(buf + 44, k0, 2);
    expect(buf, len, UPDATE_E_LIMIT, 44);
}

static void test_refuse_length(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = sample(buf, 0);
    buf[32] = 3; /* 3 keys cannot fit 2 varint bytes */
    reseal(buf, len);
    expect(buf, len, UPDATE_E_LENGTH, 40);
}

static void test_refuse_checksum(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = sample(buf, 0);
    buf[KEYS_AT] ^= 2;
    expect(buf, len, UPDATE_E_CHECKSUM, len - 8);
}

static void test_refuse_name(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = sample(buf, 0);
    buf[NAME_AT + 3] = ' ';
    reseal(buf, len);
    expect(buf, len, UPDATE_E_NAME, NAME_AT + 3);
}

static void test_refuse_keys(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = sample(buf, 0);
    assert_int_equal(buf[KEYS_AT], 5);
    buf[KEYS_AT] = 0x85; /* continues into the second key: the second runs into the payload */
    reseal(buf, len);
    expect(buf, len, UPDATE_E_KEYS, KEYS_AT + 2);
}

static void test_refuse_order(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = sample(buf, 0);
    assert_int_equal(buf[KEYS_AT + 1], 4);
    buf[KEYS_AT + 1] = 0; /* key 2 == key 1 */
    reseal(buf, len);
    expect(buf, len, UPDATE_E_ORDER, KEYS_AT + 1);
}

static void test_refuse_scale(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = sample(buf, 0);
    size_t scales = len - 8 - 1 - 8; /* 2 scales, 1 sign byte, checksum */
    float bad[3] = {NAN, INFINITY, -1.0f};
    for (int i = 0; i < 3; i++) {
        len = sample(buf, 0);
        memcpy(buf + scales + 4, &bad[i], 4);
        reseal(buf, len);
        expect(buf, len, UPDATE_E_SCALE, scales + 4);
    }
}

static void test_refuse_value(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = sample(buf, UPDATE_F_EXACT);
    float inf = INFINITY;
    memcpy(buf + len - 8 - 4, &inf, 4);
    reseal(buf, len);
    expect(buf, len, UPDATE_E_VALUE, len - 12);
}

static void test_refuse_padding(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = sample(buf, 0);
    buf[len - 9] |= 0x80; /* 4 sign bits used */
    reseal(buf, len);
    expect(buf, len, UPDATE_E_PADDING, len - 9);
}

/* NONNEG_HALF: the rows' (dx, dG) messages.  K = 6 (three coordinates):
 * the last three columns only ever decode to 0 or +scale, their residuals
 * never go below 0 at the sender over many turns, the sum sent plus the
 * residual is what was added (error feedback), the message says format
 * version 2 while an LR message (NONNEG_LAST, K = 2) still says 1, and
 * the flag is refused in a version 1 message, with an odd K, with EXACT or
 * with NONNEG_LAST. */
/* What the decoded messages sent, per key (< 64) and column (k <= 6),
 * and whether a value of the last k/2 columns was ever negative. */
struct sent_sum {
    double sent[64][6];
    bool neg_half;
    int k;
};

static int sum_put(void *ctx, uint64_t key, const float *v)
{
    struct sent_sum *h = ctx;
    for (int j = 0; j < h->k; j++)
        h->sent[key][j] += v[j];
    for (int j = h->k / 2; j < h->k; j++)
        h->neg_half |= v[j] < 0;
    return 0;
}

/* Encodes acc with o into buf and decodes it into *m: a format version 2
 * message with exactly o's flags (and RICE or not), or the test fails.  Its
 * length. */
static long encode_v2(update_acc_t *acc, const update_encode_opts_t *o, uint8_t *buf, size_t cap,
                      update_msg_t *m)
{
    long len = update_acc_encode(acc, o, buf, cap);
    assert_true(len > 0);
    assert_int_equal(buf[4] | buf[5] << 8, UPDATE_FORMAT_VERSION);
    update_error_t err;
    if (update_msg_decode(buf, (size_t)len, m, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(m->flags & ~UPDATE_F_RICE, o->flags); /* the key coding is the encoder's choice */
    return len;
}

/* 200 turns of an accumulator of K = 6 (64 keys, the last 3 columns
 * one-sided: squared gradients, mostly tiny, sometimes large), 20 random
 * adds a turn, then half its keys encoded with flags and decoded: each
 * message version 2 with exactly flags, no one-sided value sent or held
 * below 0, and at the end sent + residual = added.  big_moves: the moves
 * are sometimes 1, not always 0.01. */
static void conserve_turns(update_acc_t *acc, uint32_t flags, bool big_moves)
{
    static struct sent_sum h;
    memset(&h, 0, sizeof h);
    h.k = 6;
    static double added[64][6];
    memset(added, 0, sizeof added);
    static uint8_t buf[8192];
    for (int turn = 0; turn < 200; turn++) {
        for (int i = 0; i < 20; i++) {
            uint64_t key = (uint64_t)(unif() * 64) % 64;
            float inc[6];
            for (int j = 0; j < 3; j++)
                inc[j] = (float)(unif() * 2 - 1) * (big_moves && unif() < 0.1 ? 1.0f : 0.01f);
            for (int j = 3; j < 6; j++) /* g^2: mostly tiny, sometimes large */
                inc[j] = (float)(unif() < 0.1 ? unif() : unif() * 1e-4);
            assert_int_equal(update_acc_add(acc, key, inc), 0);
            for (int j = 0; j < 6; j++)
                added[key][j] += inc[j];
        }
        update_encode_opts_t o = {.flags = flags, .select_fraction = 0.5f};
        update_msg_t m;
        encode_v2(acc, &o, buf, sizeof buf, &m);
        assert_int_equal(update_msg_foreach(&m, sum_put, &h), 0);
        for (uint64_t key = 0; key < 64; key++) {
            const float *r = update_acc_get(acc, key);
            for (int j = 3; r && j < 6; j++)
                assert_true(r[j] >= 0.0f);
        }
    }
    assert_false(h.neg_half);
    for (uint64_t key = 0; key < 64; key++) { /* sent + residual = added */
        const float *r = update_acc_get(acc, key);
        for (int j = 0; j < 6; j++)
            assert_true(fabs(h.sent[key][j] + (r ? r[j] : 0) - added[key][j]) < 1e-4);
    }
}

static void test_nonneg_half(void **state)
{
    (void)state;
    update_acc_t *acc = make_acc(6, 64, 8);
    static uint8_t buf[8192];
    rng_state = 5;
    conserve_turns(acc, UPDATE_F_NONNEG_HALF, false);

    /* refusals: version 1 with the flag; odd K; with EXACT or NONNEG_LAST */
    update_encode_opts_t o = {.flags = UPDATE_F_NONNEG_HALF, .select_count = UINT32_MAX};
    long len = update_acc_encode(acc, &o, buf, sizeof buf);
    assert_true(len > 0);
    buf[4] = 1;
    reseal(buf, (size_t)len);
    expect(buf, (size_t)len, UPDATE_E_FLAGS, 6);
    update_encode_opts_t bad = {.flags = UPDATE_F_NONNEG_HALF | UPDATE_F_EXACT, .select_count = 1};
    assert_int_equal(update_acc_encode(acc, &bad, buf, sizeof buf), -EINVAL);
    bad.flags = UPDATE_F_NONNEG_HALF | UPDATE_F_NONNEG_LAST;
    assert_int_equal(update_acc_encode(acc, &bad, buf, sizeof buf), -EINVAL);
    update_acc_destroy(acc);
    update_acc_t *odd = make_acc(3, 4, 8);
    float inc[3] = {1, 1, 1};
    assert_int_equal(update_acc_add(odd, 1, inc), 0);
    bad.flags = UPDATE_F_NONNEG_HALF;
    assert_int_equal(update_acc_encode(odd, &bad, buf, sizeof buf), -EINVAL);
    update_acc_destroy(odd);

    /* an LR message stays version 1, readable by builds before the flag */
    uint8_t lr[512];
    size_t n = sample(lr, UPDATE_F_NONNEG_LAST);
    assert_int_equal(lr[4] | lr[5] << 8, UPDATE_FORMAT_VERSION_V1);
    update_msg_t m;
    assert_int_equal(update_msg_decode(lr, n, &m, NULL), 0);
}

/* LOG4: a chunk's values go out as +-scale x 2^-e (scale its largest |v|)
 * or 0: the nearest level for a two-sided column, the largest not above
 * for a one-sided one (whose residual stays >= 0); sent + residual = added
 * over many turns, with NONNEG_LAST and with NONNEG_HALF; refusals name
 * the field. */
static void test_log4(void **state)
{
    (void)state;
    /* one message, by hand: chunk of 4 keys, K = 2 (dz, dn) */
    update_acc_t *acc = make_acc(2, 16, 4);
    float in[4][2] = {{8.0f, 4.0f}, {-3.1f, 1.9f}, {0.2f, 0.01f}, {-0.06f, 0.0f}};
    for (uint64_t key = 0; key < 4; key++)
        assert_int_equal(update_acc_add(acc, key + 1, in[key]), 0);
    static uint8_t buf[8192];
    update_encode_opts_t o = {.flags = UPDATE_F_LOG4 | UPDATE_F_NONNEG_LAST, .select_count = UINT32_MAX};
    update_msg_t m;
    long len = encode_v2(acc, &o, buf, sizeof buf, &m);
    static struct sent_sum h;
    memset(&h, 0, sizeof h);
    h.k = 2;
    assert_int_equal(update_msg_foreach(&m, sum_put, &h), 0);
    /* dz, scale 8 (levels 8, 4, ..., 0.125 and 0): -3.1 -> -4 (nearer than -2), 0.2 -> 0.25
     * (nearer than 0.125), -0.06 -> 0 (nearer than 0.125) */
    assert_float_equal(h.sent[1][0], 8.0, 0);
    assert_float_equal(h.sent[2][0], -4.0, 0);
    assert_float_equal(h.sent[3][0], 0.25, 0);
    assert_float_equal(h.sent[4][0], 0.0, 0);
    /* dn, one-sided, scale 4: 1.9 -> 1 (the largest level not above), 0.01 -> 0 (under 4/64) */
    assert_float_equal(h.sent[1][1], 4.0, 0);
    assert_float_equal(h.sent[2][1], 1.0, 0);
    assert_float_equal(h.sent[3][1], 0.0, 0);
    const float *r = update_acc_get(acc, 2);
    assert_non_null(r);
    assert_float_equal(r[0], -3.1f + 4.0f, 1e-6);
    assert_float_equal(r[1], 0.9f, 1e-6);

    /* many turns, K = 6 with NONNEG_HALF: nothing lost, one-sided never negative */
    update_acc_destroy(acc);
    acc = make_acc(6, 64, 8);
    rng_state = 9;
    conserve_turns(acc, UPDATE_F_LOG4 | UPDATE_F_NONNEG_HALF, true);

    /* refusals: with EXACT (encode), in a version 1 message, a one-sided value negative, a
     * padding nibble set, with EXACT (decode) */
    update_encode_opts_t bad = {.flags = UPDATE_F_LOG4 | UPDATE_F_EXACT, .select_count = 1};
    assert_int_equal(update_acc_encode(acc, &bad, buf, sizeof buf), -EINVAL);
    update_acc_destroy(acc);
    acc = make_acc(2, 16, 4);
    for (uint64_t key = 0; key < 3; key++) /* 3 keys x 2 columns: 6 nibbles, 3 bytes */
        assert_int_equal(update_acc_add(acc, key + 1, in[key]), 0);
    len = update_acc_encode(acc, &o, buf, sizeof buf);
    assert_true(len > 0);
    static uint8_t bad_buf[8192];
    const size_t nibs = (size_t)len - 8 - 3; /* the nibbles end at the checksum */
    memcpy(bad_buf, buf, (size_t)len);
    bad_buf[4] = 1;
    reseal(bad_buf, (size_t)len);
    expect(bad_buf, (size_t)len, UPDATE_E_FLAGS, 6);
    memcpy(bad_buf, buf, (size_t)len); /* the dn column starts at nibble 3: byte 1's high nibble */
    bad_buf[nibs + 1] |= 0x80;
    reseal(bad_buf, (size_t)len);
    expect(bad_buf, (size_t)len, UPDATE_E_VALUE, nibs + 1);
    memcpy(bad_buf, buf, (size_t)len);
    bad_buf[6] |= UPDATE_F_EXACT;
    reseal(bad_buf, (size_t)len);
    expect(bad_buf, (size_t)len, UPDATE_E_FLAGS, 6);
    update_acc_destroy(acc);
    acc = make_acc(1, 16, 4); /* K = 1, 3 keys: 3 nibbles, the 4th padding */
    for (uint64_t key = 0; key < 3; key++)
        assert_int_equal(update_acc_add(acc, key + 1, in[key]), 0);
    update_encode_opts_t one = {.flags = UPDATE_F_LOG4, .select_count = UINT32_MAX};
    len = update_acc_encode(acc, &one, buf, sizeof buf);
    assert_true(len > 0);
    memcpy(bad_buf, buf, (size_t)len);
    bad_buf[len - 9] |= 0x10;
    reseal(bad_buf, (size_t)len);
    expect(bad_buf, (size_t)len, UPDATE_E_PADDING, (size_t)len - 9);
    update_acc_destroy(acc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conservation_onebit),
        cmocka_unit_test(test_conservation_exact),
        cmocka_unit_test(test_exact_all_bit_for_bit),
        cmocka_unit_test(test_topk_largest),
        cmocka_unit_test(test_select_by_moves),
        cmocka_unit_test(test_header_round_trip),
        cmocka_unit_test(test_full_then_flush),
        cmocka_unit_test(test_zero_keys),
        cmocka_unit_test(test_refuse_size),
        cmocka_unit_test(test_refuse_magic),
        cmocka_unit_test(test_refuse_version),
        cmocka_unit_test(test_refuse_flags),
        cmocka_unit_test(test_refuse_limits),
        cmocka_unit_test(test_refuse_length),
        cmocka_unit_test(test_refuse_checksum),
        cmocka_unit_test(test_refuse_name),
        cmocka_unit_test(test_refuse_keys),
        cmocka_unit_test(test_refuse_order),
        cmocka_unit_test(test_refuse_scale),
        cmocka_unit_test(test_refuse_value),
        cmocka_unit_test(test_refuse_padding),
        cmocka_unit_test(test_nonneg_half),
        cmocka_unit_test(test_log4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
