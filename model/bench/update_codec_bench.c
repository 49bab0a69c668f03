/*
 * update_codec_bench.c — the partitioned replicas' update codec
 * (model/update_codec.h), one thread:
 *
 *   - encode and decode speed: an accumulator holding --keys active keys
 *     (default 1M) with K = 2 (FTRL's dz, dn), one message of the top
 *     --fraction (default 10%) in 1 bit; decode = update_msg_decode plus
 *     update_msg_foreach into a sum;
 *   - bytes on the wire per key sent, 1 bit against exact f32, and per
 *     interval against sending every touched key as exact f32;
 *   - error feedback at work: every interval each key gets a new increment
 *     (dz zero-mean noise plus a small drift, dn > 0); after 1 and after 10
 *     intervals, the relative L2 error of what the receiver applied against
 *     the true sums, per column.
 *
 *   update_codec_bench [--keys N] [--fraction F] [--chunk C] [--intervals T]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/update_codec.h"

#define GOLDEN 0x9e3779b97f4a7c15ull

static uint64_t rng_state = 42;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += GOLDEN);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double unif(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* key i = i * GOLDEN: spread like hashed ids, and invertible (index = key * inv). */
static uint64_t inv_golden(void)
{
    uint64_t x = GOLDEN; /* Newton: x = x (2 - a x), doubling correct bits */
    for (int i = 0; i < 6; i++)
        x *= 2 - GOLDEN * x;
    return x;
}

struct recv {
    double *applied; /* [n][2] */
    uint64_t inv;
    uint32_t n;
    uint32_t seen;
};

static int apply(void *ctx, uint64_t key, const float *vals)
{
    struct recv *r = ctx;
    uint64_t i = key * r->inv;
    if (i >= r->n)
        return -1;
    r->applied[2 * i] += vals[0];
    r->applied[2 * i + 1] += vals[1];
    r->seen++;
    return 0;
}

static int count_only(void *ctx, uint64_t key, const float *vals)
{
    struct recv *r = ctx;
    r->seen += (uint32_t)(key & 1) + (vals[0] > vals[1]);
    return 0;
}

static void rel_err(const double *truth, const double *applied, uint32_t n, double out[2])
{
    for (int j = 0; j < 2; j++) {
        double num = 0, den = 0;
        for (uint32_t i = 0; i < n; i++) {
            double d = truth[2 * i + j] - applied[2 * i + j];
            num += d * d;
            den += truth[2 * i + j] * truth[2 * i + j];
        }
        out[j] = den > 0 ? sqrt(num / den) : 0;
    }
}

int main(int argc, char **argv)
{
    uint32_t n = 1000000, chunk = 256, intervals = 10;
    float fraction = 0.1f;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--keys"))
            n = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--fraction"))
            fraction = strtof(argv[i + 1], NULL);
        else if (!strcmp(argv[i], "--chunk"))
            chunk = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--intervals"))
            intervals = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [--keys N] [--fraction F] [--chunk C] [--intervals T]\n", argv[0]);
            return 2;
        }
    }
    if (n == 0 || chunk == 0 || chunk > 65535 || intervals == 0 || !(fraction > 0 && fraction <= 1)) {
        fprintf(stderr, "update_codec_bench: bad option\n");
        return 2;
    }
    update_acc_t *acc = NULL;
    update_acc_config_t cfg = {.k = 2, .max_keys = n, .producer = 1, .chunk = chunk, .model = "bench"};
    if (update_acc_create(&acc, &cfg)) {
        fprintf(stderr, "update_codec_bench: cannot allocate %u keys\n", n);
        return 1;
    }
    update_encode_opts_t onebit = {.select_fraction = fraction};
    update_encode_opts_t exact = {.flags = UPDATE_F_EXACT, .select_fraction = fraction};
    update_encode_opts_t all = {.flags = UPDATE_F_EXACT, .select_count = UINT32_MAX};
    size_t cap = update_acc_encode_bound(acc, &all) + (size_t)n * 16 + 4096;
    uint8_t *buf = malloc(cap);
    double *truth = calloc((size_t)n * 2, sizeof(double));
    struct recv r = {.applied = calloc((size_t)n * 2, sizeof(double)), .inv = inv_golden(), .n = n};
    if (!buf || !truth || !r.applied)
        return 1;

    printf("update_codec_bench: %u active keys, K = 2, top %.0f%%, chunk %u, %u intervals\n", n,
           100.0 * fraction, chunk, intervals);
    double err1[2] = {0, 0}, exact_bytes = 0, onebit_bytes = 0, enc_best = 1e9, dec_best = 1e9;
    uint32_t held_best = 0, sent_best = 0;
    for (uint32_t t = 1; t <= intervals; t++) {
        for (uint32_t i = 0; i < n; i++) {
            double g = (unif() - 0.5) * 0.1 + 0.01 * ((double)(i % 3) - 1.0);
            float inc[2] = {(float)g, (float)(g * g)};
            if (update_acc_add(acc, (uint64_t)i * GOLDEN, inc))
                return 1;
            truth[2 * i] += inc[0];
            truth[2 * i + 1] += inc[1];
        }
        uint32_t held = update_acc_count(acc);
        double t0 = now_s();
        long len = update_acc_encode(acc, &onebit, buf, cap);
        double t1 = now_s();
        if (len < 0)
            return 1;
        update_msg_t m;
        update_error_t err;
        if (update_msg_decode(buf, (size_t)len, &m, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double t15 = now_s();
        struct recv none = {.n = 0};
        if (update_msg_foreach(&m, count_only, &none))
            return 1;
        double t16 = now_s();
        if (t1 - t0 < enc_best) {
            enc_best = t1 - t0;
            held_best = held;
            sent_best = m.count;
        }
        if (t16 - t1 < dec_best)
            dec_best = t16 - t1;
        r.seen = 0;
        if (update_msg_foreach(&m, apply, &r))
            return 1;
        double t2 = now_s() - (t16 - t15);
        onebit_bytes += (double)len;
        exact_bytes += (double)n * 16; /* every touched key as exact f32: 8 B key + 2 x 4 B */
        if (t == 1) {
            printf("first interval: encode %.1f ms for %u held keys (%u sent): %.2f M held keys/s, %.2f M sent keys/s\n",
                   1e3 * (t1 - t0), held, m.count, held / (t1 - t0) / 1e6, m.count / (t1 - t0) / 1e6);
            printf("decode (verify) %.1f ms, foreach %.1f ms: %.2f M keys/s; with the bench's apply (random "
                   "writes) %.1f ms\n",
                   1e3 * (t15 - t1), 1e3 * (t16 - t15), m.count / (t16 - t1) / 1e6, 1e3 * (t2 - t1));
            printf("bytes per key sent: 1 bit %.2f (message %ld B for %u keys)\n", (double)len / m.count, len,
                   m.count);
            rel_err(truth, r.applied, n, err1);
        }
        if (t == intervals) {
            printf("best of %u intervals: encode %.1f ms (%.2f M held keys/s, %.2f M sent keys/s), decode + "
                   "foreach %.1f ms (%.2f M keys/s)\n",
                   intervals, 1e3 * enc_best, held_best / enc_best / 1e6, sent_best / enc_best / 1e6,
                   1e3 * dec_best, sent_best / dec_best / 1e6);
            double errT[2];
            rel_err(truth, r.applied, n, errT);
            printf("relative L2 error, applied vs true sums: after 1 interval dz %.3f dn %.3f; after %u dz %.3f "
                   "dn %.3f\n",
                   err1[0], err1[1], intervals, errT[0], errT[1]);
            printf("bus bytes over %u intervals: 1 bit top-k %.1f MB, exact f32 of every touched key %.1f MB: "
                   "%.1fx fewer (%.2f B per key-interval)\n",
                   intervals, onebit_bytes / 1e6, exact_bytes / 1e6, exact_bytes / onebit_bytes,
                   onebit_bytes / ((double)n * intervals));
        }
    }
    /* exact f32 of the same top-k selection, for bytes per key sent */
    uint32_t esent = (uint32_t)ceil((double)fraction * update_acc_count(acc));
    long elen = update_acc_encode(acc, &exact, buf, cap);
    if (elen > 0)
        printf("bytes per key sent: exact f32 %.2f (same selection rule)\n", (double)elen / (esent ? esent : 1));
    free(buf);
    free(truth);
    free(r.applied);
    update_acc_destroy(acc);
    return 0;
}
