/*
 * tlpredict.c — sends standard ranking requests to a tlserve with
 * libtlclient and prints the scores of the first one and the latency of all
 * of them (closed loop: one request at a time; tlgen measures open loop).
 *
 * Request shape (the "standard request" by default): `items` items, one
 * shared block of `shared` ids and one block of `per-item` ids per item.
 * Ids are tlsynth model's synthetic keys, store_synthetic_key(i, seed)
 * (store/synthetic.h), for i drawn uniformly from [0, key-space): with the
 * same --seed as the model, every id is a key the model knows.
 *
 * THREAD SAFETY: a program; single-threaded.
 */
#include "tlclient.h"

#include "store/synthetic.h"

#include <errno.h>
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

static const char usage[] =
    "usage: tlpredict --port P --model NAME [--host 127.0.0.1] [--requests 100]\n"
    "                 [--items 200] [--shared 300] [--per-item 200] [--key-space 10000000]\n"
    "                 [--seed 42] [--print 5] [--timeout-ms 5000]\n"
    "Sends standard ranking requests (closed loop) and prints scores and latency.\n";

static long long arg_num(const char *flag, const char *v, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < lo || x > hi) {
        fprintf(stderr, "tlpredict: %s '%s' is not a number in %lld..%lld\n%s", flag, v, lo, hi,
                usage);
        exit(2);
    }
    return x;
}

static void fill_block(codec_block_t *b, uint64_t *ids, uint32_t n, uint64_t key_space,
                       uint64_t seed, uint64_t *rng)
{
    for (uint32_t j = 0; j < n; j++)
        ids[j] = store_synthetic_key(store_splitmix64(rng) % key_space, seed);
    b->ids = ids;
    b->values = NULL;
    b->n = codec_sort_unique(ids, NULL, n);
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1", *model = NULL;
    long long port = 0, requests = 100, items = 200, shared = 300, per_item = 200;
    long long key_space = 10000000, seed = 42, print = 5, timeout_ms = 5000;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "tlpredict: %s needs a value\n%s", f, usage);
            return 2;
        }
        i++;
        if (!strcmp(f, "--host"))
            host = v;
        else if (!strcmp(f, "--model"))
            model = v;
        else if (!strcmp(f, "--port"))
            port = arg_num(f, v, 1, 65535);
        else if (!strcmp(f, "--requests"))
            requests = arg_num(f, v, 1, 100000000);
        else if (!strcmp(f, "--items"))
            items = arg_num(f, v, 1, CODEC_MAX_ITEMS);
        else if (!strcmp(f, "--shared"))
            shared = arg_num(f, v, 0, CODEC_MAX_BLOCK_FEATURES);
        else if (!strcmp(f, "--per-item"))
            per_item = arg_num(f, v, 0, CODEC_MAX_BLOCK_FEATURES);
        else if (!strcmp(f, "--key-space"))
            key_space = arg_num(f, v, 1, 1LL << 62);
        else if (!strcmp(f, "--seed"))
            seed = arg_num(f, v, 0, 1LL << 62);
        else if (!strcmp(f, "--print"))
            print = arg_num(f, v, 0, CODEC_MAX_ITEMS);
        else if (!strcmp(f, "--timeout-ms"))
            timeout_ms = arg_num(f, v, 1, 3600000);
        else {
            fprintf(stderr, "tlpredict: unknown option '%s'\n%s", f, usage);
            return 2;
        }
    }
    if (!port || !model) {
        fprintf(stderr, "tlpredict: --port and --model are required\n%s", usage);
        return 2;
    }
    if (strlen(model) > CODEC_MAX_NAME) { /* req.name would cut it: another model's name */
        fprintf(stderr, "tlpredict: --model: '%.16s...' is %zu bytes; a model name is 1..%u\n",
                model, strlen(model), CODEC_MAX_NAME);
        return 2;
    }
    if ((unsigned long long)(shared + items * per_item) > CODEC_MAX_REQUEST_FEATURES) {
        fprintf(stderr, "tlpredict: %lld features per request is over the wire limit %u\n",
                shared + items * per_item, CODEC_MAX_REQUEST_FEATURES);
        return 2;
    }

    tlclient_t *c;
    int rc = tlclient_connect(host, (int)port, (int)timeout_ms, &c);
    if (rc != 0) {
        if (rc == -ENXIO)
            fprintf(stderr, "tlpredict: cannot resolve '%s' to an IPv4 address\n", host);
        else
            fprintf(stderr, "tlpredict: cannot connect to %s:%lld: %s\n", host, port,
                    strerror(-rc));
        return 1;
    }
    uint64_t *ids = malloc((size_t)(shared + items * per_item) * sizeof *ids);
    codec_block_t *blocks = malloc((size_t)items * sizeof *blocks);
    float *scores = malloc((size_t)items * sizeof *scores);
    double *lat = malloc((size_t)requests * sizeof *lat);
    if (!ids || !blocks || !scores || !lat) {
        fputs("tlpredict: out of memory\n", stderr);
        return 1;
    }
    codec_predict_t req = {.version = 0, .items = (uint32_t)items, .item = blocks};
    snprintf(req.name, sizeof req.name, "%s", model);
    uint64_t rng = (uint64_t)seed ^ 0x7e57ull;
    uint64_t version = 0;
    for (long long r = 0; r < requests; r++) {
        fill_block(&req.shared, ids, (uint32_t)shared, (uint64_t)key_space, (uint64_t)seed, &rng);
        for (long long i = 0; i < items; i++)
            fill_block(&blocks[i], ids + shared + i * per_item, (uint32_t)per_item,
                       (uint64_t)key_space, (uint64_t)seed, &rng);
        codec_error_t err;
        double t0 = now_us();
        rc = tlclient_predict(c, &req, scores, &version, (int)timeout_ms, &err);
        lat[r] = now_us() - t0;
        if (rc != 0) {
            if (rc > 0)
                fprintf(stderr, "tlpredict: server error %s: %s\n", codec_errc_name(rc), err.msg);
            else if (rc == -EPROTO) /* err says what in the bytes was not a frame */
                fprintf(stderr, "tlpredict: %s:%lld answered what is not a tlserve frame: %s\n",
                        host, port, err.msg);
            else
                fprintf(stderr, "tlpredict: %s\n", strerror(-rc));
            return 1;
        }
        if (r == 0) {
            printf("model %s version %llu, %lld items; first scores:", model,
                   (unsigned long long)version, items);
            for (long long i = 0; i < print && i < items; i++)
                printf(" %.6f", scores[i]);
            printf("\n");
        }
    }
    qsort(lat, (size_t)requests, sizeof *lat, cmp_double);
    printf("requests %lld (closed loop, %lld features each): latency us p50 %.0f p90 %.0f p99 %.0f "
           "max %.0f\n",
           requests, shared + items * per_item, lat[requests / 2], lat[requests * 9 / 10],
           lat[requests * 99 / 100], lat[requests - 1]);
    tlclient_close(c);
    free(ids);
    free(blocks);
    free(scores);
    free(lat);
    return 0;
}
