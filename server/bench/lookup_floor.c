/*
 * lookup_floor.c — the floor under tlserve's request time: how long the
 * store's batched lookup of one request's worth of keys takes, on the same
 * snapshot the server serves.
 *
 *   lookup_floor --model DIR [--keys 40300] [--batches 2000] [--key-space N] [--seed 42]
 *                [--gap-us 0]
 *
 * Each batch is `keys` ids drawn like tlpredict draws them (tlsynth model's
 * store_synthetic_key(i, seed), i uniform in [0, key-space)), looked up
 * with one store_lookup_batch on one thread.  Prints p50/p99/mean of the
 * per-batch time; the last line is JSON {"floor_p50_us":..,"floor_p99_us":..,
 * "floor_mean_us":..}.  Key generation is outside the timed span.  With
 * --gap-us the thread sleeps that long between batches, as a server idles
 * between requests at 1e6/gap requests/s: on a VM a core that idles tends to
 * find its caches cold and its clock low, and this shows by how much.
 */
#include "store/store.h"
#include "store/synthetic.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    long long keys = 40300, batches = 2000, key_space = 0, seed = 42, gap_us = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            puts("usage: lookup_floor --model DIR [--keys 40300] [--batches 2000] "
                 "[--key-space N (default: the model's key count)] [--seed 42] [--gap-us 0]");
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "lookup_floor: %s needs a value\n", argv[i]);
            return 2;
        }
        const char *f = argv[i], *v = argv[++i];
        char *end;
        long long x = strtoll(v, &end, 10);
        if (!strcmp(f, "--model")) {
            dir = v;
            continue;
        }
        bool zero_ok = strcmp(f, "--gap-us") == 0;
        if (*end || x < (zero_ok ? 0 : 1)) {
            fprintf(stderr, "lookup_floor: %s '%s' is not a %s number\n", f, v,
                    zero_ok ? "non-negative" : "positive");
            return 2;
        }
        if (!strcmp(f, "--keys"))
            keys = x;
        else if (!strcmp(f, "--batches"))
            batches = x;
        else if (!strcmp(f, "--key-space"))
            key_space = x;
        else if (!strcmp(f, "--gap-us"))
            gap_us = x;
        else if (!strcmp(f, "--seed"))
            seed = x;
        else {
            fprintf(stderr, "lookup_floor: unknown option '%s'\n", f);
            return 2;
        }
    }
    if (!dir) {
        fputs("lookup_floor: --model DIR is required\n", stderr);
        return 2;
    }
    store_t *s;
    store_error_t err;
    if (store_snapshot_load(dir, 0, &s, NULL, &err) != 0) {
        fprintf(stderr, "lookup_floor: %s\n", err.msg);
        return 1;
    }
    if (!key_space)
        key_space = (long long)store_count(s);
    uint32_t K = store_value_floats(s);
    uint64_t *ids = malloc((size_t)keys * sizeof *ids);
    float *out = malloc((size_t)keys * K * sizeof *out);
    double *t = malloc((size_t)batches * sizeof *t);
    if (!ids || !out || !t) {
        fputs("lookup_floor: out of memory\n", stderr);
        return 1;
    }
    uint64_t rng = (uint64_t)seed ^ 0xf100full, found = 0;
    double total = 0;
    for (long long b = 0; b < batches; b++) {
        for (long long j = 0; j < keys; j++)
            ids[j] = store_synthetic_key(store_splitmix64(&rng) % (uint64_t)key_space, (uint64_t)seed);
        if (gap_us > 0)
            nanosleep(&(struct timespec){gap_us / 1000000, gap_us % 1000000 * 1000}, NULL);
        double t0 = now_us();
        found += store_lookup_batch(s, ids, (size_t)keys, out, NULL);
        t[b] = now_us() - t0;
        total += t[b];
    }
    qsort(t, (size_t)batches, sizeof *t, cmp_double);
    printf("lookup_floor: %lld batches of %lld keys (%.1f%% found), one thread: "
           "p50 %.0f us, p99 %.0f us, mean %.0f us\n",
           batches, keys, 100.0 * (double)found / ((double)batches * (double)keys),
           t[batches / 2], t[batches * 99 / 100], total / (double)batches);
    printf("{\"floor_p50_us\":%.1f,\"floor_p99_us\":%.1f,\"floor_mean_us\":%.1f}\n",
           t[batches / 2], t[batches * 99 / 100], total / (double)batches);
    free(ids);
    free(out);
    free(t);
    store_destroy(s);
    return 0;
}
