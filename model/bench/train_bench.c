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
 * --threads T (LR, FM, FFM) [--rounds R]: then, R times, trains three
 * contenders from scratch with train_threads_epoch (train_threads.h), one
 * epoch of each in turn: Hogwild on 1 thread, Hogwild on T threads, and T
 * independent trainers at once, each on its own slice, sharing nothing:
 * what T threads of this work can get from this machine (its ceiling: on a
 * VM whose cores share caches, memory and a host, less than T).  Prints
 * samples/s per epoch, each round's best-epoch ratios (T threads / 1
 * thread, the ceiling / 1 thread, T threads / the ceiling) and their
 * medians, and against train_update's one thread (the path tltrain takes
 * without --threads).  With --test FILE, round 1's test loglosses.
 *
 * THREAD SAFETY: a program; train_threads_epoch runs its own threads.
 */
#include "bench_data.h"
#include "model/metrics.h"
#include "model/reader.h"
#include "model/train.h"
#include "model/train_threads.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
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
               "                   [--threads T [--rounds R] [--test FILE]]\n");
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

/* ---- --threads: Hogwild against one thread and against the machine -------- */

/* One contender of the thread comparison: n trainers, each stepping its own
 * samples on `threads` threads per epoch, the n at once (n > 1 only for the
 * independent trainers: T trainers, one thread each, sharing nothing). */
struct contender {
    const char *name;
    train_t *t[TRAIN_THREADS_MAX];
    train_samples_t *s[TRAIN_THREADS_MAX];
    uint32_t n, threads;
    double best; /* samples/s of the best epoch */
};

struct epoch_job {
    train_t *t;
    const train_samples_t *s;
    uint32_t threads;
    int rc;
    char why[256];
};

static void *epoch_job_run(void *arg)
{
    struct epoch_job *j = arg;
    train_threads_stats_t st;
    j->rc = train_threads_epoch(j->t, j->s, j->threads, &st, j->why, sizeof j->why);
    return NULL;
}

/* One epoch of every trainer of c, at once; samples/s over the wall time, or -1. */
static double contender_epoch(struct contender *c)
{
    struct epoch_job jobs[TRAIN_THREADS_MAX];
    pthread_t tid[TRAIN_THREADS_MAX];
    bool started[TRAIN_THREADS_MAX] = {0};
    uint64_t samples = 0;
    double a = now_sec();
    for (uint32_t i = 0; i < c->n; i++) {
        jobs[i] = (struct epoch_job){.t = c->t[i], .s = c->s[i], .threads = c->threads};
        samples += train_samples_count(c->s[i]);
    }
    for (uint32_t i = 1; i < c->n; i++)
        started[i] = pthread_create(&tid[i], NULL, epoch_job_run, &jobs[i]) == 0;
    epoch_job_run(&jobs[0]);
    for (uint32_t i = 1; i < c->n; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            epoch_job_run(&jobs[i]); /* no thread: here, after (the figure shows it) */
    }
    double dt = now_sec() - a;
    int rc = 0;
    for (uint32_t i = 0; i < c->n; i++)
        if (jobs[i].rc != 0) {
            fprintf(stderr, "train_bench: %s\n", jobs[i].why);
            rc = -1;
        }
    return rc != 0 ? -1 : (double)samples / dt;
}

/* The samples [from, to) of d, or NULL when memory ran out. */
static train_samples_t *samples_of(const struct data *d, uint64_t from, uint64_t to)
{
    train_samples_t *s;
    if (train_samples_create(0, &s) != 0)
        return NULL;
    for (uint64_t i = from; i < to; i++)
        if (train_samples_add(s, d->ids + d->start[i], d->values + d->start[i],
                              (uint32_t)(d->start[i + 1] - d->start[i]), d->labels[i]) != 0) {
            train_samples_destroy(s);
            return NULL;
        }
    return s;
}

static void contender_free(struct contender *c)
{
    for (uint32_t i = 0; i < c->n; i++) {
        train_destroy(c->t[i]);
        if (c->n > 1)
            train_samples_destroy(c->s[i]); /* its own slice; one trainer shares `all` */
    }
}

/* n fresh trainers of options o; one steps all of d (`all`), n > 1 step
 * slice i of d each (train_threads.c's slices).  0 or -1. */
static int contender_make(struct contender *c, const char *name, const train_options_t *o,
                          uint32_t n, uint32_t threads, const struct data *d,
                          train_samples_t *all)
{
    *c = (struct contender){.name = name, .threads = threads};
    for (uint32_t i = 0; i < n; i++) {
        char why[256];
        c->s[i] = n == 1 ? all : samples_of(d, i * d->samples / n, (i + 1) * d->samples / n);
        if (!c->s[i] || train_create(o, &c->t[i], why, sizeof why) != 0) {
            fprintf(stderr, "train_bench: no memory for the %s\n", name);
            if (n > 1)
                train_samples_destroy(c->s[i]);
            contender_free(c);
            return -1;
        }
        c->n = i + 1;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define ROUNDS_MAX 64

/* --threads T: each round trains three contenders from scratch, epoch by
 * epoch in turn (the order rotating), so that the machine's drift falls on
 * all three alike: Hogwild on 1 thread, Hogwild on T threads, and T
 * independent trainers at once, each on its own slice, sharing nothing
 * (the most T threads of this work can get on this machine: its ceiling).
 * Prints every epoch, each round's best-epoch ratios and their medians;
 * with a test set, round 1's test loglosses against train_update's (ll0). */
static int compare_threads(const train_options_t *o, const struct data *d, uint32_t T,
                           long epochs, long rounds, const struct data *test, double ll0,
                           double serial)
{
    train_samples_t *all = samples_of(d, 0, d->samples);
    if (!all) {
        fprintf(stderr, "train_bench: out of memory for the samples\n");
        return 1;
    }
    double hog[ROUNDS_MAX], ceiling[ROUNDS_MAX], share[ROUNDS_MAX], vs_serial[ROUNDS_MAX];
    char n1[32], nT[32], nI[48];
    snprintf(n1, sizeof n1, "1 thread");
    snprintf(nT, sizeof nT, "%u threads", T);
    snprintf(nI, sizeof nI, "%u independent", T);
    for (long r = 0; r < rounds; r++) {
        struct contender c[3];
        if (contender_make(&c[0], n1, o, 1, 1, d, all) != 0)
            return 1;
        if (contender_make(&c[1], nT, o, 1, T, d, all) != 0)
            return 1;
        if (contender_make(&c[2], nI, o, T, 1, d, all) != 0)
            return 1;
        for (long ep = 1; ep <= epochs; ep++) {
            double v[3];
            for (int k = 0; k < 3; k++) {
                int i = (int)((ep + r + k) % 3);
                if ((v[i] = contender_epoch(&c[i])) < 0)
                    return 1;
                if (v[i] > c[i].best)
                    c[i].best = v[i];
            }
            printf("  round %ld epoch %ld, samples/s: %s %.0f | %s %.0f | %s %.0f\n", r + 1, ep,
                   n1, v[0], nT, v[1], nI, v[2]);
        }
        hog[r] = c[1].best / c[0].best;
        ceiling[r] = c[2].best / c[0].best;
        share[r] = c[1].best / c[2].best;
        vs_serial[r] = c[1].best / serial;
        printf("round %ld, best epochs: %s / %s %.2fx; %s / %s (the machine's ceiling) %.2fx; "
               "Hogwild at %.2f of the ceiling\n",
               r + 1, nT, n1, hog[r], nI, n1, ceiling[r], share[r]);
        if (r == 0 && test->samples) {
            double ll1 = test_logloss(c[0].t[0], test), llT = test_logloss(c[1].t[0], test);
            printf("test logloss: train_update %.6f | 1 thread %.6f | %u threads %.6f "
                   "(%+.6f against train_update)\n",
                   ll0, ll1, T, llT, llT - ll0);
        }
        for (int k = 0; k < 3; k++)
            contender_free(&c[k]);
    }
    train_samples_destroy(all);
    printf("ratio %u threads / 1 thread: %.2fx (median of %ld rounds); / train_update: %.2fx; "
           "the machine's ceiling (%u independent / 1): %.2fx; Hogwild at %.2f of it\n",
           T, median(hog, rounds), rounds, median(vs_serial, rounds), T, median(ceiling, rounds),
           median(share, rounds));
    return 0;
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
        {"rounds", required_argument, 0, 'r'},
        {0, 0, 0, 0},
    };
    const char *path = NULL, *model = "lr", *test_path = NULL;
    long threads = 0, rounds = 1;
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
        case 'r':
            rounds = strtol(optarg, &e, 10);
            if (*e || e == optarg || rounds < 1 || rounds > ROUNDS_MAX) {
                fprintf(stderr, "train_bench: --rounds: '%s' is not a number in 1..%d\n",
                        optarg, ROUNDS_MAX);
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
    if (bench_data_load("train_bench", path, fmt, &d) != 0)
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
        if (test_path && bench_data_load("train_bench", test_path, fmt, &test) != 0)
            return 1;
        double ll0 = test_logloss(t, &test);
        double serial = best / ((double)d.features / (double)d.samples);
        if (compare_threads(&o, &d, (uint32_t)threads, epochs, rounds, &test, ll0, serial) != 0)
            return 1;
        bench_data_free(&test);
    }
    if (json)
        printf("{\"model\":\"%s\",\"samples\":%llu,\"features\":%llu,\"best_updates_per_s\":%.0f}\n",
               model, (unsigned long long)d.samples, (unsigned long long)d.features, best);
    train_destroy(t);
    store_destroy(served);
    bench_data_free(&d);
    return 0;
}
