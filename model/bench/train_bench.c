/*
 * train_bench.c — training throughput on one thread, without the reader.
 *
 *   train_bench --data FILE [--format libffm] [--model lr|fm|ffm|dnn] [--epochs 3]
 *               [--optimizer ftrl|adagrad|sgd] [--fields F] [--k 4] [--json]
 *
 * Parses the whole file into memory first (ids, values, labels), then runs
 * `epochs` passes of train_update() (train.h: the interface tltrain and the
 * server drive) over it with the tuned defaults (tltrain's), timing each
 * pass with two clock reads: so the figure is the optimizer's alone, with
 * no parsing and no per-sample timer in it (tltrain's "in updates" figure
 * reads the clock around every sample).  Prints, per
 * epoch, seconds and feature updates per second (one update per feature of
 * a sample; the bias's step is not counted), and the best epoch.  Epoch 1
 * includes growing the trainer's store as ids arrive; later epochs only
 * update.  The trainer's store is sized for the file's distinct ids up
 * front (--no-presize grows it as tltrain does).  --live (LR) attaches a
 * served store (train_attach_live), as the server's online trainer does:
 * every step also writes the new weight there.  A benchmark: it never fails
 * on timing.
 *
 * --threads T (LR, FM, FFM): also trains two more models from scratch with
 * train_threads_epoch (train_threads.h), on 1 and on T threads, for the
 * same epochs, and prints samples/s of the best epoch of each and the
 * ratios: T threads against 1 thread of the same (Hogwild) path, and
 * against train_update's one thread (the path tltrain takes without
 * --threads).  With --test FILE each model's test logloss is printed too.
 *
 * THREAD SAFETY: a program; train_threads_epoch runs its own threads.
 */
#include "model/metrics.h"
#include "model/reader.h"
#include "model/train.h"
#include "model/train_threads.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
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

/* All samples of a file, back to back. */
struct data {
    uint64_t *ids;
    float *values;
    uint64_t *start; /* samples + 1 offsets into ids/values */
    float *labels;
    uint64_t samples, features;
    uint64_t cap_ids, cap_values, cap_start, cap_labels;
    uint32_t max_field, max_n;
};

static int grow(void **p, uint64_t *cap, uint64_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    uint64_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * size);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

static int load(const char *path, reader_format_t fmt, struct data *d)
{
    reader_options_t o = {.format = fmt};
    reader_t *r;
    char why[512];
    if (reader_open(path, &o, &r, why, sizeof why) != 0) {
        fprintf(stderr, "train_bench: %s\n", why);
        return -1;
    }
    reader_sample_t s;
    int rc;
    while ((rc = reader_next(r, &s)) == 1) {
        if (grow((void **)&d->ids, &d->cap_ids, d->features + s.n, sizeof *d->ids) ||
            grow((void **)&d->values, &d->cap_values, d->features + s.n, sizeof *d->values) ||
            grow((void **)&d->start, &d->cap_start, d->samples + 2, sizeof *d->start) ||
            grow((void **)&d->labels, &d->cap_labels, d->samples + 2, sizeof *d->labels)) {
            fprintf(stderr, "train_bench: out of memory at sample %llu\n",
                    (unsigned long long)d->samples);
            reader_close(r);
            return -1;
        }
        memcpy(d->ids + d->features, s.ids, (size_t)s.n * sizeof *d->ids);
        for (uint32_t j = 0; j < s.n; j++)
            d->values[d->features + j] = s.values ? s.values[j] : 1.0f;
        for (uint32_t j = 0; j < s.n; j++)
            if ((uint32_t)(s.ids[j] >> 56) > d->max_field)
                d->max_field = (uint32_t)(s.ids[j] >> 56);
        if (s.n > d->max_n)
            d->max_n = s.n;
        d->start[d->samples] = d->features;
        d->labels[d->samples] = s.label;
        d->features += s.n;
        d->samples++;
    }
    if (d->start)
        d->start[d->samples] = d->features;
    if (rc < 0)
        fprintf(stderr, "train_bench: %s\n", reader_error(r));
    reader_close(r);
    return rc < 0 ? -1 : 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t distinct_ids(const struct data *d)
{
    uint64_t *c = malloc(d->features * sizeof *c), n = 0;
    if (!c)
        return d->features;
    memcpy(c, d->ids, d->features * sizeof *c);
    qsort(c, d->features, sizeof *c, cmp_u64);
    for (uint64_t i = 0; i < d->features; i++)
        n += i == 0 || c[i] != c[i - 1];
    free(c);
    return n;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: train_bench --data FILE [--format libffm|libsvm|criteo]\n"
               "                   [--model lr|fm|ffm|dnn]\n"
               "                   [--epochs 3] [--optimizer ftrl|adagrad|sgd] [--fields F]\n"
               "                   [--k 4] [--no-presize] [--live] [--json]\n"
               "                   [--threads T [--test FILE]]\n");
}

static double cpu_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The test logloss of t on d (NAN when there is no test set). */
static double test_logloss(train_t *t, const struct data *d)
{
    if (!d->samples)
        return NAN;
    metrics_t *m;
    metrics_result_t r;
    if (metrics_create(&m) != 0)
        return NAN;
    for (uint64_t i = 0; i < d->samples; i++) {
        const codec_block_t b = {.ids = d->ids + d->start[i], .values = d->values + d->start[i],
                                 .n = (uint32_t)(d->start[i + 1] - d->start[i])};
        metrics_add(m, train_predict(t, &b, NULL), d->labels[i]);
    }
    metrics_compute(m, &r);
    metrics_destroy(m);
    return r.logloss;
}

/* Trains a fresh trainer of options o on s for epochs passes on `threads`
 * threads (train_threads_epoch); the best epoch's samples/s, or -1. */
static double threads_run(const train_options_t *o, const train_samples_t *s, long epochs,
                          uint32_t threads, const struct data *test, double *ll)
{
    train_t *t;
    char why[256];
    if (train_create(o, &t, why, sizeof why) != 0) {
        fprintf(stderr, "train_bench: %s\n", why);
        return -1;
    }
    double best = 0;
    for (long ep = 1; ep <= epochs; ep++) {
        train_threads_stats_t st;
        double a = now_sec(), c = cpu_sec();
        if (train_threads_epoch(t, s, threads, &st, why, sizeof why) != 0) {
            fprintf(stderr, "train_bench: %s\n", why);
            train_destroy(t);
            return -1;
        }
        double dt = now_sec() - a, dc = cpu_sec() - c;
        printf("  threads %u epoch %ld: %.3f s (%.3f s cpu: %.2f cores), %.0f samples/s, "
               "progressive logloss %.6f\n",
               threads, ep, dt, dc, dc / dt, st.samples / dt, st.logloss);
        if (st.samples / dt > best)
            best = st.samples / dt;
    }
    *ll = test_logloss(t, test);
    train_destroy(t);
    return best;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'},   {"format", required_argument, 0, 'f'},
        {"model", required_argument, 0, 'm'},  {"epochs", required_argument, 0, 'e'},
        {"optimizer", required_argument, 0, 'o'}, {"fields", required_argument, 0, 'F'},
        {"k", required_argument, 0, 'k'},      {"no-presize", no_argument, 0, 'n'},
        {"json", no_argument, 0, 'j'},         {"help", no_argument, 0, 'h'},
        {"live", no_argument, 0, 'L'},
        {"threads", required_argument, 0, 'T'}, {"test", required_argument, 0, 't'},
        {0, 0, 0, 0},
    };
    const char *path = NULL, *model = "lr", *test_path = NULL;
    long threads = 0;
    reader_format_t fmt = READER_LIBFFM;
    train_optimizer_t opt_kind = TRAIN_FTRL;
    bool opt_given = false;
    long epochs = 3, fields = 0, k = 4;
    int json = 0, presize = 1, live = 0, c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *e = NULL;
        switch (c) {
        case 'd': path = optarg; break;
        case 'm': model = optarg; break;
        case 'j': json = 1; break;
        case 'n': presize = 0; break;
        case 'L': live = 1; break;
        case 't': test_path = optarg; break;
        case 'T':
            threads = strtol(optarg, &e, 10);
            if (*e || e == optarg || threads < 1 || threads > TRAIN_THREADS_MAX) {
                fprintf(stderr, "train_bench: --threads: '%s' is not a number in 1..%d\n",
                        optarg, TRAIN_THREADS_MAX);
                return 2;
            }
            e = NULL;
            break;
        case 'h': usage(stdout); return 0;
        case 'f':
            if (reader_format_parse(optarg, &fmt) != 0) {
                fprintf(stderr, "train_bench: --format: '%s' is not libsvm, libffm or criteo\n",
                        optarg);
                return 2;
            }
            break;
        case 'o':
            if (train_optimizer_parse(optarg, &opt_kind) != 0) {
                fprintf(stderr, "train_bench: --optimizer: '%s' is not ftrl, adagrad or sgd\n",
                        optarg);
                return 2;
            }
            opt_given = true;
            break;
        case 'e': epochs = strtol(optarg, &e, 10); break;
        case 'F': fields = strtol(optarg, &e, 10); break;
        case 'k': k = strtol(optarg, &e, 10); break;
        default: usage(stderr); return 2;
        }
        if (e && (*e || e == optarg || epochs < 1 || fields < 0 || k < 1)) {
            fprintf(stderr, "train_bench: --%s: '%s' is not a positive number\n",
                    c == 'e' ? "epochs" : c == 'F' ? "fields" : "k", optarg);
            return 2;
        }
    }
    const train_ops_t *ops = train_ops_named(model);
    if (!path || !ops) {
        fprintf(stderr, "train_bench: %s\n", !path ? "--data FILE is required"
                                                   : "--model must be lr, fm, ffm or dnn");
        usage(stderr);
        return 2;
    }
    const store_model_kind_t kind = ops->kind;
    if (!opt_given)
        opt_kind = train_default_optimizer(kind); /* tltrain's default */

    struct data d = {0};
    double t0 = now_sec();
    if (load(path, fmt, &d) != 0)
        return 1;
    uint64_t distinct = distinct_ids(&d), keys = presize ? distinct : 0;
    fprintf(stderr, "train_bench: %s: %llu samples, %llu features (%llu distinct), parsed in %.2f s\n",
            path, (unsigned long long)d.samples, (unsigned long long)d.features,
            (unsigned long long)distinct, now_sec() - t0);

    train_options_t o;
    train_defaults(kind, opt_kind, &o);
    uint32_t *nf = train_options_fields(&o);
    if (nf)
        *nf = fields ? (uint32_t)fields : d.max_field + 1;
    switch (kind) { /* --k and the sizing hint, in each kind's struct */
    case STORE_MODEL_FM:
        o.fm.k = (uint32_t)k;
        o.fm.expected_keys = keys;
        break;
    case STORE_MODEL_FFM:
        o.ffm.k = (uint32_t)k;
        o.ffm.expected_keys = keys;
        break;
    case STORE_MODEL_DNN: o.dnn.expected_keys = keys; break;
    default: o.lr.expected_keys = keys; break;
    }
    train_t *t = NULL;
    char why[256];
    int rc = train_create(&o, &t, why, sizeof why);
    if (rc == 0)
        rc = train_reserve(t, d.max_n);
    store_t *served = NULL;
    if (rc == 0 && live) {
        store_options_t so = {.value_floats = 1, .expected_keys = keys};
        rc = store_create(&so, &served);
        if (rc == 0)
            rc = train_attach_live(t, served, why, sizeof why);
        else
            snprintf(why, sizeof why, "no memory for the served store");
    }
    if (rc != 0) {
        fprintf(stderr, "train_bench: cannot create the trainer: %s\n", why);
        return 1;
    }
    train_describe(t, why, sizeof why);
    fprintf(stderr, "train_bench: %s\n", why);

    double best = 0, sink = 0;
    for (long ep = 1; ep <= epochs; ep++) {
        double a = now_sec();
        for (uint64_t i = 0; i < d.samples; i++) {
            const uint64_t *ids = d.ids + d.start[i];
            const float *vals = d.values + d.start[i];
            uint32_t n = (uint32_t)(d.start[i + 1] - d.start[i]);
            const codec_block_t sample = {.ids = ids, .values = vals, .n = n};
            const codec_block_t none = {.ids = NULL, .values = NULL, .n = 0};
            float p;
            rc = train_update(t, &sample, &none, 1, &d.labels[i], NULL, &p);
            if (rc != 0) {
                fprintf(stderr, "train_bench: update failed at sample %llu: %s\n",
                        (unsigned long long)i, strerror(-rc));
                return 1;
            }
            sink += p;
        }
        double dt = now_sec() - a, rate = d.features / dt;
        if (rate > best)
            best = rate;
        printf("epoch %ld: %.3f s, %.2f M feature updates/s, %.0f samples/s\n", ep, dt,
               rate / 1e6, d.samples / dt);
    }
    printf("best: %.2f M feature updates/s (%s, one thread)%s\n", best / 1e6, model,
           sink == -1 ? "!" : "");
    if (threads) {
        struct data test = {0};
        if (test_path && load(test_path, fmt, &test) != 0)
            return 1;
        train_samples_t *ts;
        if (train_samples_create(0, &ts) != 0)
            return 1;
        for (uint64_t i = 0; i < d.samples && rc == 0; i++)
            rc = train_samples_add(ts, d.ids + d.start[i], d.values + d.start[i],
                                   (uint32_t)(d.start[i + 1] - d.start[i]), d.labels[i]);
        if (rc != 0) {
            fprintf(stderr, "train_bench: out of memory for the samples\n");
            return 1;
        }
        double ll0 = test_logloss(t, &test), ll1 = NAN, llT = NAN;
        double serial = best / ((double)d.features / (double)d.samples);
        double one = threads_run(&o, ts, epochs, 1, &test, &ll1);
        double many = threads_run(&o, ts, epochs, (uint32_t)threads, &test, &llT);
        if (one <= 0 || many <= 0)
            return 1;
        printf("samples/s (%s, best epoch): train_update %.0f | 1 thread %.0f | %ld threads %.0f\n",
               model, serial, one, threads, many);
        printf("ratio %ld threads / 1 thread: %.2fx; / train_update: %.2fx\n", threads,
               many / one, many / serial);
        if (test_path)
            printf("test logloss: train_update %.6f | 1 thread %.6f | %ld threads %.6f "
                   "(%+.6f against train_update)\n",
                   ll0, ll1, threads, llT, llT - ll0);
        train_samples_destroy(ts);
        free(test.ids);
        free(test.values);
        free(test.start);
        free(test.labels);
    }
    if (json)
        printf("{\"model\":\"%s\",\"samples\":%llu,\"features\":%llu,\"best_updates_per_s\":%.0f}\n",
               model, (unsigned long long)d.samples, (unsigned long long)d.features, best);
    train_destroy(t);
    store_destroy(served);
    free(d.ids);
    free(d.values);
    free(d.start);
    free(d.labels);
    return 0;
}
