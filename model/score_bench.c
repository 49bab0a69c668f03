/*
 * score_bench.c — model_score() time for the standard request on one core,
 * any model kind (LR, FM, FFM, DNN).
 *
 *   score_bench --model DIR [--requests N] [--items 200] [--shared 300]
 *            [--per-item 200] [--key-space N] [--seed 42] [--values]
 *
 * Loads a snapshot (e.g. `tlsnap gen --kind fm --value-floats 17`, or the
 * FFM and DNN examples in `tlsnap gen --help`), builds `requests` distinct
 * requests whose ids are tlsnap
 * gen's synthetic keys store_synthetic_key(i, seed), i uniform in
 * [0, key-space) — so every id is known to a model made with the same seed
 * and key count — laid out back to back as the wire decoder leaves them,
 * and times model_score() on each (one thread: the caller's core).  Prints
 * p50/p90/p99/max in microseconds and the lookup share (the same batched
 * store lookup alone, on another request's ids so that the cache is as cold
 * as model_score() found it).  A benchmark: it never fails on
 * timing.
 *
 * THREAD SAFETY: a program; single-threaded.
 */
#include "model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static double pct(const double *s, size_t n, double p)
{
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return s[i < n ? i : n - 1];
}

static long arg_long(const char *name, const char *v, long lo, long hi)
{
    char *e;
    long x = strtol(v, &e, 10);
    if (*e || e == v || x < lo || x > hi) {
        fprintf(stderr, "score_bench: %s: '%s' is not a number in %ld..%ld\n", name, v, lo, hi);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    long requests = 2000, items = 200, shared = 300, per = 200, key_space = 20000000, seed = 42;
    int values = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--values")) {
            values = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "score_bench: %s needs a value (see the header of score_bench.c)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--model"))
            dir = v;
        else if (!strcmp(a, "--requests"))
            requests = arg_long(a, v, 1, 1000000);
        else if (!strcmp(a, "--items"))
            items = arg_long(a, v, 1, 100000);
        else if (!strcmp(a, "--shared"))
            shared = arg_long(a, v, 0, 1000000);
        else if (!strcmp(a, "--per-item"))
            per = arg_long(a, v, 0, 100000);
        else if (!strcmp(a, "--key-space"))
            key_space = arg_long(a, v, 1, 1L << 40);
        else if (!strcmp(a, "--seed"))
            seed = arg_long(a, v, 0, 1L << 40);
        else {
            fprintf(stderr, "score_bench: unknown option %s\n", a);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "usage: score_bench --model DIR [--requests N] [--items 200] [--shared 300]\n"
                        "                [--per-item 200] [--key-space N] [--seed 42] [--values]\n");
        return 2;
    }
    model_t *m;
    store_error_t err;
    double t0 = now_us();
    if (model_load(dir, 0, &m, &err) != 0) {
        fprintf(stderr, "score_bench: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "score_bench: loaded %s (%s, %u floats per key, %llu keys) in %.1f s\n", dir,
            store_model_kind_name(model_meta(m)->model_kind), model_value_floats(m),
            (unsigned long long)store_count(model_store(m)), (now_us() - t0) / 1e6);

    size_t total = (size_t)shared + (size_t)items * (size_t)per;
    enum { DISTINCT = 64 }; /* distinct requests cycled through */
    uint64_t *ids = malloc(DISTINCT * total * sizeof *ids);
    float *vals = malloc(total * sizeof *vals);
    model_block_t *blocks = malloc((size_t)items * sizeof *blocks);
    float *scores = malloc((size_t)items * sizeof *scores);
    float *wbuf = malloc((total + 1) * model_value_floats(m) * sizeof *wbuf);
    double *lat = malloc((size_t)requests * sizeof *lat), *look = malloc((size_t)requests * sizeof *look);
    model_scratch_t *sc;
    if (!ids || !vals || !blocks || !scores || !wbuf || !lat || !look ||
        model_scratch_create(total, &sc) != 0 || model_scratch_fit(sc, m, total) < 0) {
        fprintf(stderr, "score_bench: out of memory\n");
        return 1;
    }
    uint64_t rng = 12345;
    for (size_t j = 0; j < DISTINCT * total; j++) {
        ids[j] = store_synthetic_key(store_splitmix64(&rng) % (uint64_t)key_space, (uint64_t)seed);
    }
    for (size_t j = 0; j < total; j++)
        vals[j] = 0.5f + (float)(j % 7) / 7.0f;

    double sink = 0;
    for (long r = 0; r < requests; r++) {
        const uint64_t *rid = ids + (size_t)(r % DISTINCT) * total;
        model_block_t sh = {rid, values ? vals : NULL, (uint32_t)shared};
        for (long i = 0; i < items; i++)
            blocks[i] = (model_block_t){rid + shared + (size_t)i * per,
                                        values ? vals + shared + (size_t)i * per : NULL,
                                        (uint32_t)per};
        double a = now_us();
        if (model_score(m, &sh, blocks, (uint32_t)items, scores, sc) != 0) {
            fprintf(stderr, "score_bench: model_score failed\n");
            return 1;
        }
        lat[r] = now_us() - a;
        sink += scores[r % items];
        /* another request's ids: the ones just scored are in cache */
        a = now_us();
        store_lookup_batch(model_store(m), ids + (size_t)((r + DISTINCT / 2) % DISTINCT) * total,
                           total, wbuf, NULL);
        look[r] = now_us() - a;
        sink += wbuf[r % total];
    }
    qsort(lat, (size_t)requests, sizeof *lat, cmp_d);
    qsort(look, (size_t)requests, sizeof *look, cmp_d);
    printf("model_score: %ld requests x (%ld items, %ld shared + %ld per item = %zu features), "
           "1 thread: us p50 %.0f p90 %.0f p99 %.0f max %.0f\n",
           requests, items, shared, per, total, pct(lat, requests, .5), pct(lat, requests, .9),
           pct(lat, requests, .99), lat[requests - 1]);
    printf("lookup alone (store_lookup_batch of the same ids): us p50 %.0f p99 %.0f%s\n",
           pct(look, requests, .5), pct(look, requests, .99), sink == 12345.678 ? "!" : "");
    model_scratch_destroy(sc);
    model_destroy(m);
    free(ids);
    free(vals);
    free(blocks);
    free(scores);
    free(wbuf);
    free(lat);
    free(look);
    return 0;
}
