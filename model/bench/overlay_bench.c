/*
 * overlay_bench.c — what a delta costs as an overlay (model/overlay.h):
 * overlay_bench --model DIR --delta DIR [--threads T]
 *
 * Loads the full version, opens the delta, then times (wall and the
 * process's CPU, which counts the helper threads model_apply_deltas and
 * model_fold_undo run beside the caller): turning it into an overlay
 * (model_apply_deltas), the fold's undo (model_fold_undo) and writes
 * (model_fold_overwrite, then model_fold_rest, on T threads), and prints
 * keys per second for each.
 * Wall above CPU: the machine was busy; CPU above wall: helpers ran beside
 * the caller.  Then what a request pays while the overlay is there: a
 * batch of 40,000 keys of the model (a standard request's lookup) through
 * the base alone and through the base plus the overlay, best of 50.
 */
#define _GNU_SOURCE
#include "model/model.h"
#include "model/overlay.h"
#include "store/delta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void report(const char *what, uint64_t keys, double w0, double c0)
{
    double w = now(CLOCK_MONOTONIC) - w0, c = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
    printf("%-28s %10llu keys  wall %7.3f s (%6.2f M keys/s)  cpu %7.3f s (%6.2f M keys/s)\n",
           what, (unsigned long long)keys, w, (double)keys / w * 1e-6, c,
           (double)keys / c * 1e-6);
}

static int collect(void *ctx, uint64_t key, const float *value)
{
    (void)value;
    uint64_t *k = ctx;
    if (k[0] < 40000)
        k[1 + k[0]++] = key;
    return k[0] == 40000;
}

/* 40,000 keys of the model at random: base lookup alone vs base + overlay. */
static void lookup_cost(const model_t *m, const model_t *ov)
{
    const store_t *s = model_store(m);
    uint32_t K = store_value_floats(s), shards = store_shards(s);
    uint64_t *keys = malloc((1 + 40000 * (size_t)shards) * sizeof *keys);
    float *out = malloc(40000 * (size_t)K * sizeof *out);
    uint64_t n = 0;
    for (uint32_t sh = 0; sh < shards; sh++) { /* the first 40000/shards keys of each shard */
        keys[n] = 0;
        uint64_t *k = keys + n;
        store_foreach(s, sh, collect, k);
        uint64_t got = k[0] < 40000 / shards ? k[0] : 40000 / shards;
        memmove(keys + n, k + 1, got * sizeof *keys);
        n += got;
    }
    uint64_t x = 88172645463325252ull; /* shuffle: a request's ids are in no order */
    for (uint64_t i = n; i > 1; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t j = x % i, t = keys[i - 1];
        keys[i - 1] = keys[j];
        keys[j] = t;
    }
    model_overlay_t *o[MODEL_OVERLAYS_MAX];
    uint32_t no = model_overlays(ov, o);
    double best_base = 1e9, best_ov = 1e9;
    for (int r = 0; r < 50; r++) {
        double t0 = now(CLOCK_MONOTONIC);
        store_lookup_batch(s, keys, n, out, NULL);
        double t1 = now(CLOCK_MONOTONIC);
        store_lookup_batch(s, keys, n, out, NULL);
        for (uint32_t i = no; i-- > 0;)
            model_overlay_lookup(o[i], keys, n, out, NULL);
        double t2 = now(CLOCK_MONOTONIC);
        best_base = t1 - t0 < best_base ? t1 - t0 : best_base;
        best_ov = t2 - t1 < best_ov ? t2 - t1 : best_ov;
    }
    printf("lookup of %llu keys            base %7.1f us   base + overlay %7.1f us   ratio %.2f\n",
           (unsigned long long)n, best_base * 1e6, best_ov * 1e6, best_ov / best_base);
    free(keys);
    free(out);
}

int main(int argc, char **argv)
{
    const char *mdir = NULL, *ddir = NULL;
    int threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            mdir = argv[i + 1];
        else if (!strcmp(argv[i], "--delta"))
            ddir = argv[i + 1];
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
    }
    if (!mdir || !ddir) {
        fprintf(stderr, "usage: overlay_bench --model DIR --delta DIR [--threads T]\n");
        return 2;
    }
    model_t *m;
    store_error_t err;
    if (model_load(mdir, 2, &m, &err) != 0) {
        fprintf(stderr, "overlay_bench: %s\n", err.msg);
        return 1;
    }
    double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    store_delta_t *d;
    if (store_delta_open(ddir, &d, &err) != 0) {
        fprintf(stderr, "overlay_bench: %s\n", err.msg);
        return 1;
    }
    const store_delta_info_t *in = store_delta_info(d);
    uint64_t keys = in->upserts + in->deletes;
    report("delta read and verified", keys, w0, c0);
    w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    model_t *ov;
    if (model_apply_deltas(m, &d, 1, &ov, &err) != 0) {
        fprintf(stderr, "overlay_bench: %s\n", err.msg);
        return 1;
    }
    report("overlay built", keys, w0, c0);
    store_delta_close(d);
    lookup_cost(m, ov);
    w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    model_overlay_t *undo;
    if (model_fold_undo(ov, &undo) != 0)
        return 1;
    report("fold: undo", keys, w0, c0);
    w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    model_fold_rest_t *rest;
    if (model_fold_overwrite(ov, threads, &rest) != 0)
        return 1;
    report("fold: overwrites", keys, w0, c0);
    uint64_t left = model_fold_rest_count(rest);
    w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    if (model_fold_rest(ov, rest) != 0)
        return 1;
    report("fold: inserts, deletes", left, w0, c0);
    model_fold_rest_free(rest);
    model_overlay_unref(undo);
    model_destroy(ov);
    model_destroy(m);
    return 0;
}
