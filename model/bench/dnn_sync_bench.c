/*
 * dnn_sync_bench.c — R partitioned replicas of the DNN in one process, the
 * MLP exchanged (a) as fp32 Adam deltas, (b) with 1-bit Adam
 * (model/train_dnn_sync.c), on a real data set:
 *
 *   dnn_sync_bench --train FILE --test FILE [--format libffm|libsvm]
 *                  [--replicas 2,4] [--interval 50] [--epochs 3]
 *                  [--warmup 200] [--chunk 256] [--bits 4|1]
 *
 * Sample i of the training file belongs to replica i mod R.  Each interval
 * every replica trains on its next --interval samples of its partition
 * (train_update: Adagrad rows, the MLP stepped by its train_dnn_sync_t),
 * then publishes its MLP message, then every replica applies every peer's
 * message.  The rows (embeddings, wide part, bias) are exchanged exactly
 * and at once in both runs (train_rows_sync_hook into each peer's
 * train_rows_sync_apply), so the runs differ only in the MLP's exchange.
 * fp32: every message exact (an endless warm-up); compressed: exact for
 * --warmup local steps, then --bits (4 or 1) per value with error feedback.
 *
 * Prints, per R and run: MLP bytes published (all replicas), and each
 * replica's test logloss and AUC; then the byte ratio and the logloss
 * difference of the replicas' mean.  A benchmark: it fails only on errors.
 *
 * THREAD SAFETY: a program; single-threaded.
 */
#include "bench_data.h"
#include "model/metrics.h"
#include "model/reader.h"
#include "model/train.h"
#include "model/train_sync.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPLICAS 16

static codec_block_t sample_of(const struct data *d, uint64_t i)
{
    return (codec_block_t){.ids = d->ids + d->start[i], .values = d->values + d->start[i],
                           .n = (uint32_t)(d->start[i + 1] - d->start[i])};
}

struct cluster {
    int R;
    train_t *t[MAX_REPLICAS];
    train_dnn_sync_t *s[MAX_REPLICAS];
    uint8_t *buf[MAX_REPLICAS];
    long len[MAX_REPLICAS];
    size_t cap;
    int who[MAX_REPLICAS]; /* hook contexts: the replica's index */
    int failed;            /* a row apply failed */
};

static struct cluster *hook_cluster; /* the cluster the row hooks forward into */

static void row_hook(void *ctx, uint64_t id, const float *d, uint32_t n)
{
    (void)n;
    int from = *(const int *)ctx;
    for (int r = 0; r < hook_cluster->R; r++)
        if (r != from) {
            int rc = train_rows_sync_apply(hook_cluster->t[r], id, d);
            if (rc != 0 && !hook_cluster->failed++)
                fprintf(stderr, "dnn_sync_bench: replica %d: id %016llx from replica %d: %s (d[0] %g, dG[0] %g)\n", r,
                        (unsigned long long)id, from, strerror(-rc), d[0], d[n / 2]);
        }
}

struct result {
    uint64_t bytes;
    double logloss[MAX_REPLICAS], auc[MAX_REPLICAS], mean_logloss;
};

/* One run: R replicas, the MLP exchanged exact (warmup UINT32_MAX) or in `bits` bits. */
static int run(const train_options_t *o, const struct data *tr, const struct data *te, int R, uint32_t interval,
               int epochs, uint32_t warmup, uint32_t chunk, uint32_t bits, struct result *res)
{
    struct cluster c = {.R = R};
    char why[256];
    int rc = 0;
    hook_cluster = &c;
    for (int r = 0; r < R && rc == 0; r++) {
        c.who[r] = r;
        rc = train_create(o, &c.t[r], why, sizeof why);
        if (rc != 0) {
            fprintf(stderr, "dnn_sync_bench: cannot create the trainer: %s\n", why);
            break;
        }
        train_dnn_sync_config_t sc = {.n = 0, .chunk = chunk, .warmup_steps = warmup, .value_bits = bits,
                                      .lr = (float)o->dnn.lr_dense,
                                      .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .producer = (uint64_t)r + 1,
                                      .model = "dnn"};
        sc.n = (uint32_t)train_dnn_mlp_floats(c.t[r]);
        rc = train_reserve(c.t[r], tr->max_n > te->max_n ? tr->max_n : te->max_n);
        if (rc == 0)
            rc = train_dnn_sync_create(&c.s[r], &sc);
        if (rc == 0)
            rc = train_dnn_sync_attach(c.t[r], c.s[r]);
        if (rc == 0)
            rc = train_rows_sync_hook(c.t[r], row_hook, &c.who[r]);
        if (rc == 0) {
            c.cap = train_dnn_sync_bound(c.s[r]);
            c.buf[r] = malloc(c.cap);
            rc = c.buf[r] ? 0 : -ENOMEM;
        }
    }
    uint64_t per_replica = tr->samples / (uint64_t)R; /* the tail (< R samples) is left out */
    const codec_block_t none = {0};
    for (int ep = 0; ep < epochs && rc == 0; ep++)
        for (uint64_t k0 = 0; k0 < per_replica && rc == 0; k0 += interval) {
            uint64_t k1 = k0 + interval < per_replica ? k0 + interval : per_replica;
            for (int r = 0; r < R && rc == 0; r++)
                for (uint64_t k = k0; k < k1 && rc == 0; k++) {
                    uint64_t i = k * (uint64_t)R + (uint64_t)r;
                    codec_block_t b = sample_of(tr, i);
                    rc = train_update(c.t[r], &b, &none, 1, &tr->labels[i], NULL, NULL);
                    if (rc != 0)
                        fprintf(stderr, "dnn_sync_bench: replica %d, sample %llu (epoch %d): train_update: %d\n", r,
                                (unsigned long long)i, ep + 1, rc);
                }
            for (int r = 0; r < R && rc == 0; r++) {
                c.len[r] = train_dnn_sync_publish_mlp(c.t[r], c.buf[r], c.cap);
                rc = c.len[r] < 0 ? (int)c.len[r] : 0;
            }
            for (int r = 0; r < R && rc == 0; r++)
                for (int p = 0; p < R && rc == 0; p++) {
                    update_error_t err;
                    if (p != r && (rc = train_dnn_sync_apply_mlp(c.t[r], c.buf[p], (size_t)c.len[p], &err)) != 0)
                        fprintf(stderr, "dnn_sync_bench: apply: %s\n", err.msg);
                }
            if (c.failed) {
                fprintf(stderr, "dnn_sync_bench: a peer's row did not apply\n");
                rc = -ERANGE;
            }
        }
    if (rc != 0)
        fprintf(stderr, "dnn_sync_bench: training failed: %s\n", strerror(-rc));
    res->bytes = 0;
    res->mean_logloss = 0;
    for (int r = 0; r < R && rc == 0; r++) {
        res->bytes += train_dnn_sync_bytes_sent(c.s[r]);
        metrics_t *m;
        metrics_result_t mr;
        if (metrics_create(&m) != 0) {
            rc = -ENOMEM;
            break;
        }
        for (uint64_t i = 0; i < te->samples; i++) {
            codec_block_t b = sample_of(te, i);
            metrics_add(m, train_predict(c.t[r], &b, NULL), te->labels[i]);
        }
        metrics_compute(m, &mr);
        metrics_destroy(m);
        res->logloss[r] = mr.logloss;
        res->auc[r] = mr.auc;
        res->mean_logloss += mr.logloss / R;
    }
    for (int r = 0; r < R; r++) {
        train_destroy(c.t[r]);
        train_dnn_sync_destroy(c.s[r]);
        free(c.buf[r]);
    }
    return rc;
}

static void print(const char *name, int R, const struct result *res)
{
    printf("R=%d %-6s MLP bytes %12llu  test logloss/AUC:", R, name, (unsigned long long)res->bytes);
    for (int r = 0; r < R; r++)
        printf(" %.5f/%.4f", res->logloss[r], res->auc[r]);
    printf("  (mean logloss %.5f)\n", res->mean_logloss);
}

static void usage(void)
{
    fprintf(stderr, "usage: dnn_sync_bench --train FILE --test FILE [--format libffm|libsvm]\n"
                    "                      [--replicas 2,4] [--interval 50] [--epochs 3]\n"
                    "                      [--warmup 200] [--chunk 256] [--bits 4|1]\n");
}

int main(int argc, char **argv)
{
    const char *train_path = NULL, *test_path = NULL, *replicas = "2,4";
    reader_format_t fmt = READER_LIBFFM;
    long interval = 50, epochs = 3, warmup = 200, chunk = 256, bits = 4;
    static const struct option opts[] = {
        {"train", 1, 0, 't'}, {"test", 1, 0, 'T'},   {"format", 1, 0, 'f'}, {"replicas", 1, 0, 'r'},
        {"interval", 1, 0, 'i'}, {"epochs", 1, 0, 'e'}, {"warmup", 1, 0, 'w'}, {"chunk", 1, 0, 'c'},
        {"bits", 1, 0, 'b'}, {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 't': train_path = optarg; break;
        case 'T': test_path = optarg; break;
        case 'f':
            if (reader_format_parse(optarg, &fmt) != 0) {
                usage();
                return 2;
            }
            break;
        case 'r': replicas = optarg; break;
        case 'i': interval = atol(optarg); break;
        case 'e': epochs = atol(optarg); break;
        case 'w': warmup = atol(optarg); break;
        case 'c': chunk = atol(optarg); break;
        case 'b': bits = atol(optarg); break;
        default: usage(); return 2;
        }
    }
    if (!train_path || !test_path || interval < 1 || epochs < 1 || warmup < 1 || chunk < 1 || chunk > 65535 ||
        (bits != 1 && bits != 4)) {
        usage();
        return 2;
    }
    struct data tr = {0}, te = {0};
    if (bench_data_load("dnn_sync_bench", train_path, fmt, &tr) != 0 ||
        bench_data_load("dnn_sync_bench", test_path, fmt, &te) != 0)
        return 1;
    train_options_t o;
    train_defaults(STORE_MODEL_DNN, train_default_optimizer(STORE_MODEL_DNN), &o);
    uint32_t *nf = train_options_fields(&o);
    *nf = (tr.max_field > te.max_field ? tr.max_field : te.max_field) + 1;
    printf("dnn_sync_bench: %llu train / %llu test samples, interval %ld samples per replica, %ld epochs, "
           "warm-up %ld local steps, then %ld bits a value, chunk %ld\n",
           (unsigned long long)tr.samples, (unsigned long long)te.samples, interval, epochs, warmup, bits, chunk);
    for (const char *p = replicas; *p;) {
        char *end;
        long R = strtol(p, &end, 10);
        if (end == p || R < 1 || R > MAX_REPLICAS) {
            usage();
            return 2;
        }
        struct result exact, compressed;
        if (run(&o, &tr, &te, (int)R, (uint32_t)interval, (int)epochs, UINT32_MAX, (uint32_t)chunk, 1, &exact) != 0 ||
            run(&o, &tr, &te, (int)R, (uint32_t)interval, (int)epochs, (uint32_t)warmup, (uint32_t)chunk, (uint32_t)bits,
                &compressed) != 0)
            return 1;
        print("fp32", (int)R, &exact);
        print(bits == 4 ? "4-bit" : "1-bit", (int)R, &compressed);
        printf("R=%ld bytes fp32/%ld-bit %.1fx, mean test logloss %ld-bit - fp32 %+.5f\n", R, bits,
               (double)exact.bytes / (double)compressed.bytes, bits,
               compressed.mean_logloss - exact.mean_logloss);
        p = *end == ',' ? end + 1 : end;
    }
    bench_data_free(&tr);
    bench_data_free(&te);
    return 0;
}
