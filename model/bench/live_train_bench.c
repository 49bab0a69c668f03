/*
 * live_train_bench.c — the server's online trainer without the server: LR
 * (FTRL by default) learning frames of the standard request's shape into a
 * served store, as server/online_trainer.c drives it (train_attach_live,
 * then train_update over a frame's items), on one thread.
 *
 *   live_train_bench [--keys 10000000] [--frames 16] [--shared 300] [--items 100]
 *                    [--item-ids 200] [--seconds 5] [--optimizer ftrl|adagrad|sgd]
 *                    [--no-live]
 *
 * The served store holds --keys synthetic keys (store/synthetic.h, as
 * tlsynth makes them); --frames distinct frames, each a shared block of
 * --shared ids and --items item blocks of --item-ids ids, all drawn
 * uniformly from the model's keys (ids sorted in a block, as a TRAIN frame
 * holds them), are learned round-robin for --seconds.  Prints feature
 * updates per second (shared + item ids per item; the bias not counted):
 * the figure loadgen/online_bench.py measures through a real server, with
 * no decoding, queueing or serving beside it.  Then the floor, for as long:
 * only the writes into the served store that any trainer writing it makes
 * (each item's ids, and the shared block's once a frame), in the same
 * pipelined batches: random writes into a table larger than the caches,
 * the part no trainer design removes; the trainer's figure over the
 * floor's is the ratio to quote.  --no-live trains the
 * trainer's own state only (tltrain's loop) on the same frames.  A benchmark: never fails on
 * timing.
 *
 * THREAD SAFETY: a program; single-threaded.
 */
#include "model/train.h"
#include "store/synthetic.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* n distinct keys of the model drawn uniformly, sorted. */
static void draw_block(uint64_t *out, uint32_t n, uint64_t keys, uint64_t *rng)
{
    for (uint32_t i = 0; i < n;) {
        uint64_t k = store_synthetic_key(store_splitmix64(rng) % keys, 42);
        uint32_t j = 0;
        while (j < i && out[j] != k)
            j++;
        if (j == i)
            out[i++] = k;
    }
    qsort(out, n, sizeof *out, cmp_u64);
}

static long arg_long(const char *opt, const char *s, long lo, long hi)
{
    char *e;
    long v = strtol(s, &e, 10);
    if (*e || e == s || v < lo || v > hi) {
        fprintf(stderr, "live_train_bench: --%s: '%s' is not a number in %ld..%ld\n", opt, s,
                lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"keys", required_argument, 0, 'K'},   {"frames", required_argument, 0, 'F'},
        {"shared", required_argument, 0, 'S'}, {"items", required_argument, 0, 'I'},
        {"item-ids", required_argument, 0, 'N'}, {"seconds", required_argument, 0, 'T'},
        {"optimizer", required_argument, 0, 'O'}, {"no-live", no_argument, 0, 'L'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    long keys = 10000000, frames = 16, shared_n = 300, items = 100, item_n = 200, seconds = 5;
    train_optimizer_t opt = TRAIN_FTRL;
    int c, live = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'K': keys = arg_long("keys", optarg, 1000, 2000000000L); break;
        case 'F': frames = arg_long("frames", optarg, 1, 100000); break;
        case 'S': shared_n = arg_long("shared", optarg, 0, 10000); break;
        case 'I': items = arg_long("items", optarg, 1, 10000); break;
        case 'N': item_n = arg_long("item-ids", optarg, 1, 10000); break;
        case 'T': seconds = arg_long("seconds", optarg, 1, 3600); break;
        case 'O':
            if (train_optimizer_parse(optarg, &opt) != 0) {
                fprintf(stderr, "live_train_bench: --optimizer: '%s' is not ftrl, adagrad or "
                                "sgd\n", optarg);
                return 2;
            }
            break;
        case 'L': live = 0; break;
        case 'h':
            printf("usage: live_train_bench [--keys N] [--frames N] [--shared N] [--items N]\n"
                   "                        [--item-ids N] [--seconds S] [--optimizer O] [--no-live]\n");
            return 0;
        default: return 2;
        }
    }
    if (shared_n + item_n > (long)keys) {
        fprintf(stderr, "live_train_bench: a sample's ids exceed the model's keys\n");
        return 2;
    }

    double t0 = now_sec();
    store_t *served = NULL;
    store_options_t so = {.value_floats = 1, .expected_keys = (uint64_t)keys};
    if (store_create(&so, &served) != 0) {
        fprintf(stderr, "live_train_bench: no memory for the served store\n");
        return 1;
    }
    uint64_t rng = 7;
    for (long i = 0; i < keys; i++) {
        float w = (float)((double)(store_splitmix64(&rng) >> 11) / 9007199254740992.0 - 0.5);
        if (store_upsert(served, store_synthetic_key((uint64_t)i, 42), &w) < 0) {
            fprintf(stderr, "live_train_bench: cannot fill the served store\n");
            return 1;
        }
    }
    uint64_t *ids = malloc(sizeof *ids * (size_t)frames * (size_t)(shared_n + items * item_n));
    codec_block_t *blocks = malloc(sizeof *blocks * (size_t)frames * (size_t)(items + 1));
    float *labels = malloc(sizeof *labels * (size_t)items), *p = malloc(sizeof *p * items);
    if (!ids || !blocks || !labels || !p) {
        fprintf(stderr, "live_train_bench: out of memory\n");
        return 1;
    }
    uint64_t *at = ids;
    for (long f = 0; f < frames; f++) {
        codec_block_t *b = blocks + f * (items + 1);
        for (long i = 0; i <= items; i++) {
            uint32_t n = (uint32_t)(i == 0 ? shared_n : item_n);
            draw_block(at, n, (uint64_t)keys, &rng);
            b[i] = (codec_block_t){.ids = at, .values = NULL, .n = n};
            at += n;
        }
    }
    for (long i = 0; i < items; i++)
        labels[i] = (store_splitmix64(&rng) % 10) == 0;
    fprintf(stderr, "live_train_bench: %ld keys served, %ld frames made in %.1f s\n", keys,
            frames, now_sec() - t0);

    train_options_t o;
    train_defaults(STORE_MODEL_LR, opt, &o);
    train_t *t = NULL;
    char why[256];
    if (train_create(&o, &t, why, sizeof why) != 0 ||
        (live && train_attach_live(t, served, why, sizeof why) != 0)) {
        fprintf(stderr, "live_train_bench: %s\n", why);
        return 1;
    }
    /* one round over the frames first: the trainer's state holds their ids */
    double a = now_sec(), sink = 0;
    uint64_t done = 0;
    long f = 0;
    for (int round = 0; round < 2; round++) {
        done = 0;
        a = now_sec();
        double end = a + seconds;
        for (long n = 0; round == 0 ? n < frames : now_sec() < end; n++, f = (f + 1) % frames) {
            const codec_block_t *b = blocks + f * (items + 1);
            int rc = train_update(t, &b[0], &b[1], (uint32_t)items, labels, NULL, p);
            if (rc != 0) {
                fprintf(stderr, "live_train_bench: update failed: %d\n", rc);
                return 1;
            }
            sink += p[0];
            done++;
        }
        if (round == 0)
            fprintf(stderr, "live_train_bench: first round (the state's inserts) %.2f s\n",
                    now_sec() - a);
    }
    double dt = now_sec() - a;
    double feats = (double)done * (double)items * (double)(shared_n + item_n);
    printf("%s LR-%s: %.2f M feature updates/s, %.0f samples/s (%llu frames in %.2f s)%s\n",
           live ? "live" : "state only", train_optimizer_name(opt), feats / dt / 1e6, (double)done * items / dt,
           (unsigned long long)done, dt, sink == -1 ? "!" : "");

    /* The floor: the served store's writes alone, which any trainer writing
     * it must make (each item's ids per item, the shared block's once per
     * frame), in the same pipelined batches, for the same time. */
    float *w = calloc((size_t)(shared_n > item_n ? shared_n : item_n), sizeof *w);
    uint64_t floor_done = 0;
    a = now_sec();
    for (double end = a + seconds; now_sec() < end; floor_done++, f = (f + 1) % frames) {
        const codec_block_t *b = blocks + f * (items + 1);
        for (long i = 1; i <= items; i++)
            store_upsert_batch(served, b[i].ids, w, b[i].n);
        store_upsert_batch(served, b[0].ids, w, b[0].n);
    }
    double fdt = now_sec() - a;
    double ffeats = (double)floor_done * (double)items * (double)(shared_n + item_n);
    printf("floor (the served store's writes alone): %.2f M feature updates/s; the trainer at "
           "%.2fx the floor\n", ffeats / fdt / 1e6, (feats / dt) / (ffeats / fdt));
    free(w);
    train_destroy(t);
    store_destroy(served);
    free(ids);
    free(blocks);
    free(labels);
    free(p);
    return 0;
}
