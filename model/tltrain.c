/*
 * tltrain.c — the offline trainer: reads a training file (libsvm, libffm or
 * raw Criteo), trains a model for some epochs, evaluates it on a test file
 * and exports a serving snapshot that tlserve loads.
 *
 *   tltrain --train FILE [--test FILE] --format libffm|libsvm|criteo --model lr|fm|ffm|dnn
 *           [--optimizer ftrl|adagrad|sgd] [--lr X] [--beta X] [--l1 X] [--l2 X]
 *           [--k K] [--l2-v X] [--init-stdev X] [--seed N]
 *           [--dim D] [--hidden W,W] [--wide|--no-wide] [--fields F] [--lr-dense X]
 *           [--epochs N] [--export DIR] [--name NAME] [--version N] [--skip-bad]
 *           [--json] [--help]
 *
 * The two model kinds sit behind a small struct trainer (update, predict,
 * export) so that the epoch and evaluation loops are written once.
 *
 * Human-readable progress goes to stderr; stdout gets one line per epoch and
 * (with --json) a last line {"logloss":..,"auc":..,"calibration":..}.
 * Exit codes: 0 ok, 1 runtime error (bad data, I/O), 2 usage error or an
 * unimplemented model.  Single-threaded; the files are streamed, once per
 * epoch.
 */
#include "metrics.h"
#include "model.h"
#include "reader.h"
#include "train.h"
#include "dnn_train.h"
#include "ffm_train.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tltrain --train FILE [--test FILE] --format libffm|libsvm|criteo\n"
            "               --model lr|fm|ffm|dnn [--norm|--no-norm]\n"
            "               [--optimizer ftrl|adagrad|sgd|adam] [--lr X] [--beta X] [--l1 X] [--l2 X]\n"
            "               [--k K] [--l2-v X] [--init-stdev X] [--seed N]\n"
            "               [--dim D] [--hidden W,W] [--wide|--no-wide] [--fields F] [--lr-dense X]\n"
            "               [--epochs N] [--export DIR] [--name NAME] [--version N]\n"
            "               [--threads T] [--skip-bad] [--json] [--help]\n"
            "       tltrain predict --model-dir DIR --data FILE --format F [--out FILE] [--json]\n"
            "\n"
            "  --train FILE     training data (streamed once per epoch)\n"
            "  --test FILE      evaluation data: logloss, AUC, calibration after each epoch\n"
            "  --format F       libsvm (label idx:val), libffm (label field:idx:val) or criteo\n"
            "                   (raw TSV/CSV: label, I1-I13, C1-C26; hashed per field)\n"
            "  --model M        lr, fm, ffm (field-aware FM) or dnn (Wide & Deep)\n"
            "  --optimizer O    ftrl, adagrad or sgd (default: ftrl for lr, adagrad for fm;\n"
            "                   fm with ftrl: FTRL for the linear weights, Adagrad for v);\n"
            "                   dnn: adam (its only mode: Adam for the MLP, Adagrad for the\n"
            "                   embeddings and wide weights)\n"
            "  --lr X           learning rate (FTRL alpha); lr: ftrl 0.1, adagrad 0.05, sgd 0.05;\n"
            "                   fm: adagrad 0.2, ftrl/sgd 0.05; ffm: 0.4 for the factors, half\n"
            "                   that for the bias and linear weights\n"
            "  --beta X         FTRL beta (default 1); Adagrad epsilon (default 1e-6;\n"
            "                   fm, ffm: 1, so that no step exceeds lr x |gradient|)\n"
            "  --l1 X           L1 (FTRL only; default 0.1)\n"
            "  --l2 X           L2 on the linear weights (lr: ftrl 1, adagrad/sgd 1e-4;\n"
            "                   fm: ftrl 1, adagrad 2e-5, sgd 0.001; ffm: 0.002;\n"
            "                   dnn: 1e-4 on w and e)\n"
            "  --k K            fm: factors per id (default 4, at most 64); ffm: factors per\n"
            "                   id and field (default 4; 1 + fields x k <= 512 with adagrad)\n"
            "  --norm, --no-norm  ffm, fm: instance normalisation, x / |x| (default on;\n"
            "                   fm with ftrl or sgd: off)\n"
            "  --l2-v X         fm: L2 on the factors (adagrad 2e-5 + 3 / the id's occurrences\n"
            "                   so far; ftrl, sgd 0.01); ffm: 0.005\n"
            "  --init-stdev X   fm: factors start as N(0, X^2) (default 0.01); ffm: uniform\n"
            "                   in [0, X) (default 0.5); dnn: embeddings\n"
            "  --seed N         fm: seed of the factor initialisation (default 1); dnn: of the\n"
            "                   embeddings and the MLP's starting weights\n"
            "  --dim D          dnn: embedding floats per id (default 16)\n"
            "  --hidden W,W     dnn: hidden layer widths (default 256,128; \"\" for none)\n"
            "  --wide, --no-wide  dnn: with (default) or without the wide (LR) part\n"
            "  --fields F       dnn, ffm: an id's field is (id >> 56) %% F (default: the largest\n"
            "                   field in the training file + 1, from a first pass)\n"
            "  --lr-dense X     dnn: Adam step of the MLP (default 0.0003); --lr is the Adagrad\n"
            "                   step of the embeddings, wide weights and bias (default 0.03)\n"
            "  --epochs N       passes over the training file (default 3 for lr, 10 for fm\n"
            "                   (1 with ftrl or sgd), 11 for ffm, 1 for dnn)\n"
            "  --export DIR     write a serving snapshot into DIR (LR: one float per id,\n"
            "                   FM: 1 + k floats per id, FFM: 1 + fields x k)\n"
            "  --name NAME      model name in the snapshot (default: the model kind)\n"
            "  --version N      snapshot version (default 1)\n"
            "  --skip-bad       skip (and count) malformed lines instead of stopping\n"
            "  --threads T      accepted for LIBFFM/xLearn compatibility; training runs on one\n"
            "                   thread (T > 1 prints a note)\n"
            "  --json           last stdout line: {\"logloss\":..,\"auc\":..,\"calibration\":..}\n"
            "\n"
            "tltrain predict scores FILE with the snapshot in DIR as tlserve would, one score\n"
            "per line ('tltrain predict --help').\n");
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_double(const char *opt, const char *s, double *out)
{
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (errno || e == s || *e || !isfinite(v) || v < 0) {
        fprintf(stderr, "tltrain: %s: '%s' is not a non-negative number\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* One model kind's trainer behind one set of calls. */
struct trainer {
    train_lr_t *lr; /* exactly one of lr, fm is set; owned */
    train_fm_t *fm;
    train_dnn_t *dnn; /* DNN: when set, lr and fm are NULL; owned */
    train_ffm_t *ffm; /* FFM: when set, the others are NULL; owned */
};

static int tr_update(struct trainer *t, const reader_sample_t *s, float *p)
{
    if (t->ffm)
        return train_ffm_update(t->ffm, s->ids, s->values, s->n, s->label, p);
    if (t->dnn)
        return train_dnn_update(t->dnn, s->ids, s->values, s->n, s->label, p);
    return t->fm ? train_fm_update(t->fm, s->ids, s->values, s->n, s->label, p)
                 : train_lr_update(t->lr, s->ids, s->values, s->n, s->label, p);
}

static float tr_predict(struct trainer *t, const reader_sample_t *s)
{
    if (t->ffm)
        return train_ffm_predict(t->ffm, s->ids, s->values, s->n);
    if (t->dnn)
        return train_dnn_predict(t->dnn, s->ids, s->values, s->n);
    return t->fm ? train_fm_predict(t->fm, s->ids, s->values, s->n)
                 : train_lr_predict(t->lr, s->ids, s->values, s->n);
}

static int tr_export(const struct trainer *t, const char *dir, const store_meta_t *meta,
                     store_error_t *err)
{
    if (t->ffm)
        return train_ffm_export(t->ffm, dir, meta, err);
    if (t->dnn)
        return train_dnn_export(t->dnn, dir, meta, err);
    return t->fm ? train_fm_export(t->fm, dir, meta, err) : train_lr_export(t->lr, dir, meta, err);
}

/* One pass of the training file.  Returns 0 or 1 (error printed). */
static int train_epoch(reader_t *r, struct trainer *t, double *loss, uint64_t *rows,
                       uint64_t *updates, double *busy)
{
    reader_sample_t s;
    int rc;
    double ll = 0, t_train = 0;
    uint64_t n = 0, u = 0;
    if (reader_rewind(r) != 0) {
        fprintf(stderr, "tltrain: cannot rewind the training file\n");
        return 1;
    }
    while ((rc = reader_next(r, &s)) == 1) {
        float p;
        double t0 = now_sec();
        if (tr_update(t, &s, &p) != 0) {
            fprintf(stderr, "tltrain: out of memory while training\n");
            return 1;
        }
        t_train += now_sec() - t0;
        double q = p < 1e-15 ? 1e-15 : p > 1 - 1e-15 ? 1 - 1e-15 : p;
        ll -= s.label > 0.5f ? log(q) : log1p(-q);
        n++;
        u += s.n + 1;
    }
    if (rc < 0) {
        fprintf(stderr, "tltrain: %s\n", reader_error(r));
        return 1;
    }
    *loss = n ? ll / (double)n : NAN;
    *rows = n;
    *updates = u;
    *busy = t_train;
    return 0;
}

static int evaluate(reader_t *r, struct trainer *t, metrics_result_t *res)
{
    metrics_t *m;
    reader_sample_t s;
    int rc;
    if (reader_rewind(r) != 0 || metrics_create(&m) != 0) {
        fprintf(stderr, "tltrain: cannot evaluate (rewind or out of memory)\n");
        return 1;
    }
    while ((rc = reader_next(r, &s)) == 1) {
        if (metrics_add(m, tr_predict(t, &s), s.label) != 0) {
            rc = -ENOMEM;
            break;
        }
    }
    if (rc < 0) {
        fprintf(stderr, "tltrain: %s\n", rc == -ENOMEM ? "out of memory" : reader_error(r));
        metrics_destroy(m);
        return 1;
    }
    metrics_compute(m, res);
    metrics_destroy(m);
    return 0;
}

static void json_num(FILE *f, const char *key, double v, int last)
{
    if (isfinite(v))
        fprintf(f, "\"%s\":%.6f%s", key, v, last ? "" : ",");
    else
        fprintf(f, "\"%s\":null%s", key, last ? "" : ",");
}

/* --hidden "256,128" (or "" for none) into o->hidden; 0 or -1 (printed). */
static int parse_hidden(const char *s, train_dnn_options_t *o)
{
    o->n_hidden = 0;
    for (const char *p = s; *s;) {
        char *e;
        long w = strtol(p, &e, 10);
        if (e == p || (*e && *e != ',') || w < 1 || w > DNN_MAX_WIDTH ||
            o->n_hidden == DNN_MAX_LAYERS - 1) {
            fprintf(stderr,
                    "tltrain: --hidden: '%s' is not up to %d widths in 1..%d separated by "
                    "commas\n",
                    s, DNN_MAX_LAYERS - 1, DNN_MAX_WIDTH);
            return -1;
        }
        o->hidden[o->n_hidden++] = (uint32_t)w;
        if (!*e)
            break;
        p = e + 1;
    }
    return 0;
}

/* DNN: fields from a first pass over the training file when not given (the
 * largest field + 1), then the trainer.  0, 1 (bad data) or 2 (bad
 * options); the error is printed. */
static int dnn_setup(reader_t *r, int fields_given, train_dnn_options_t *o, train_dnn_t **out)
{
    if (!fields_given) {
        reader_sample_t s;
        uint32_t top = 0;
        int rc;
        while ((rc = reader_next(r, &s)) == 1)
            for (uint32_t j = 0; j < s.n; j++)
                if ((uint32_t)(s.ids[j] >> 56) > top)
                    top = (uint32_t)(s.ids[j] >> 56);
        if (rc < 0) {
            fprintf(stderr, "tltrain: %s\n", reader_error(r));
            return 1;
        }
        o->fields = top + 1;
    }
    char why[256];
    if (train_dnn_create(o, out, why, sizeof why) != 0) {
        fprintf(stderr, "tltrain: %s\n", why);
        return 2;
    }
    char hid[96] = "";
    for (uint32_t l = 0, len = 0; l < o->n_hidden && len < sizeof hid; l++)
        len += (uint32_t)snprintf(hid + len, sizeof hid - len, "%s%u", l ? "," : "", o->hidden[l]);
    fprintf(stderr,
            "tltrain: dnn fields=%u%s dim=%u hidden=%s wide=%d lr=%g (adagrad) lr_dense=%g "
            "(adam) l2=%g init_stdev=%g seed=%llu\n",
            o->fields, fields_given ? "" : " (from the data)", o->dim, hid[0] ? hid : "none",
            (int)o->wide, o->lr_sparse, o->lr_dense, o->l2, o->init_stdev,
            (unsigned long long)o->seed);
    return 0;
}

/* FFM: fields from a first pass over the training file when not given (the
 * largest field + 1), then the trainer.  0, 1 (bad data) or 2 (bad
 * options); the error is printed. */
static int ffm_setup(reader_t *r, int fields_given, train_ffm_options_t *o, train_ffm_t **out)
{
    if (!fields_given) {
        reader_sample_t s;
        uint32_t top = 0;
        int rc;
        while ((rc = reader_next(r, &s)) == 1)
            for (uint32_t j = 0; j < s.n; j++)
                if ((uint32_t)(s.ids[j] >> 56) > top)
                    top = (uint32_t)(s.ids[j] >> 56);
        if (rc < 0) {
            fprintf(stderr, "tltrain: %s\n", reader_error(r));
            return 1;
        }
        o->fields = top + 1;
    }
    char why[256];
    if (train_ffm_create(o, out, why, sizeof why) != 0) {
        fprintf(stderr, "tltrain: %s\n", why);
        return 2;
    }
    fprintf(stderr,
            "tltrain: ffm/%s fields=%u%s k=%u norm=%d alpha=%g beta=%g l2=%g l2_v=%g "
            "init_stdev=%g seed=%llu\n",
            train_optimizer_name(o->optimizer), o->fields, fields_given ? "" : " (from the data)",
            o->k, (int)o->norm, o->alpha, o->beta, o->l2, o->l2_v, o->init_stdev,
            (unsigned long long)o->seed);
    return 0;
}

int tltrain_predict_main(int argc, char **argv); /* tltrain_predict.c */

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "predict") == 0)
        return tltrain_predict_main(argc - 1, argv + 1);
    enum { O_TRAIN = 256, O_TEST, O_FORMAT, O_MODEL, O_OPT, O_LR, O_BETA, O_L1, O_L2,
           O_EPOCHS, O_EXPORT, O_NAME, O_VERSION, O_SKIP, O_JSON, O_K, O_L2V, O_INIT, O_SEED };
    enum { O_DIM = 512, O_HIDDEN, O_WIDE, O_NO_WIDE, O_FIELDS, O_LR_DENSE };
    enum { O_NORM = 768, O_NO_NORM };
    enum { O_THREADS = 1024 };
    static const struct option longopts[] = {
        {"train", required_argument, 0, O_TRAIN},   {"test", required_argument, 0, O_TEST},
        {"format", required_argument, 0, O_FORMAT}, {"model", required_argument, 0, O_MODEL},
        {"optimizer", required_argument, 0, O_OPT}, {"lr", required_argument, 0, O_LR},
        {"beta", required_argument, 0, O_BETA},     {"l1", required_argument, 0, O_L1},
        {"l2", required_argument, 0, O_L2},         {"epochs", required_argument, 0, O_EPOCHS},
        {"export", required_argument, 0, O_EXPORT}, {"name", required_argument, 0, O_NAME},
        {"version", required_argument, 0, O_VERSION}, {"skip-bad", no_argument, 0, O_SKIP},
        {"json", no_argument, 0, O_JSON},           {"help", no_argument, 0, 'h'},
        {"k", required_argument, 0, O_K},           {"l2-v", required_argument, 0, O_L2V},
        {"init-stdev", required_argument, 0, O_INIT}, {"seed", required_argument, 0, O_SEED},
        {"dim", required_argument, 0, O_DIM},       {"hidden", required_argument, 0, O_HIDDEN},
        {"wide", no_argument, 0, O_WIDE},           {"no-wide", no_argument, 0, O_NO_WIDE},
        {"fields", required_argument, 0, O_FIELDS}, {"lr-dense", required_argument, 0, O_LR_DENSE},
        {"threads", required_argument, 0, O_THREADS},
        {"norm", no_argument, 0, O_NORM},           {"no-norm", no_argument, 0, O_NO_NORM},
        {0, 0, 0, 0}};
    const char *train_path = NULL, *test_path = NULL, *format = NULL, *model = NULL;
    const char *optimizer = NULL, *export_dir = NULL, *name = NULL;
    double lr = -1, beta = -1, l1 = -1, l2 = -1, l2v = -1, init_sd = -1;
    long k = 4;
    unsigned long long seed = 1;
    long epochs = 0; /* 0: the model's default */
    unsigned long long version = 1;
    int json = 0, skip_bad = 0, c;
    train_dnn_options_t dno; /* --model dnn */
    train_dnn_defaults(&dno);
    int dnn_fields_given = 0;
    int ffm_norm = 1; /* --model ffm: instance normalisation */
    int fm_norm = -1; /* --model fm: 1 on, 0 off, -1 train_fm_defaults' */
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        char *e;
        switch (c) {
        case O_TRAIN: train_path = optarg; break;
        case O_TEST: test_path = optarg; break;
        case O_FORMAT: format = optarg; break;
        case O_MODEL: model = optarg; break;
        case O_OPT: optimizer = optarg; break;
        case O_THREADS: {
            char *e;
            long th = strtol(optarg, &e, 10);
            if (*e || e == optarg || th < 1 || th > 1024) {
                fprintf(stderr, "tltrain: --threads: '%s' is not a number in 1..1024\n", optarg);
                return 2;
            }
            if (th > 1)
                fprintf(stderr, "tltrain: --threads %ld: training runs on one thread (parallel "
                                "training is not implemented); continuing with 1\n", th);
            break;
        }
        case O_LR: if (parse_double("--lr", optarg, &lr)) return 2; break;
        case O_BETA: if (parse_double("--beta", optarg, &beta)) return 2; break;
        case O_L1: if (parse_double("--l1", optarg, &l1)) return 2; break;
        case O_L2: if (parse_double("--l2", optarg, &l2)) return 2; break;
        case O_L2V: if (parse_double("--l2-v", optarg, &l2v)) return 2; break;
        case O_INIT: if (parse_double("--init-stdev", optarg, &init_sd)) return 2; break;
        case O_K:
            k = strtol(optarg, &e, 10);
            if (*e || e == optarg || k < 1 || k > MODEL_FM_MAX_K) {
                fprintf(stderr, "tltrain: --k: '%s' is not a number in 1..%d\n", optarg,
                        MODEL_FM_MAX_K);
                return 2;
            }
            break;
        case O_SEED:
            errno = 0;
            seed = strtoull(optarg, &e, 10);
            if (errno || *e || e == optarg) {
                fprintf(stderr, "tltrain: --seed: '%s' is not a number\n", optarg);
                return 2;
            }
            break;
        case O_EPOCHS:
            epochs = strtol(optarg, &e, 10);
            if (*e || e == optarg || epochs < 1 || epochs > 1000000) {
                fprintf(stderr, "tltrain: --epochs: '%s' is not a number in 1..1000000\n", optarg);
                return 2;
            }
            break;
        case O_EXPORT: export_dir = optarg; break;
        case O_NAME: name = optarg; break;
        case O_VERSION:
            version = strtoull(optarg, &e, 10);
            if (*e || e == optarg || version == 0) {
                fprintf(stderr, "tltrain: --version: '%s' is not a number > 0\n", optarg);
                return 2;
            }
            break;
        case O_SKIP: skip_bad = 1; break;
        case O_JSON: json = 1; break;
        case O_DIM:
            dno.dim = (uint32_t)strtoul(optarg, &e, 10);
            if (*e || e == optarg || dno.dim < 1 || dno.dim > TRAIN_DNN_MAX_DIM) {
                fprintf(stderr, "tltrain: --dim: '%s' is not a number in 1..%d\n", optarg,
                        TRAIN_DNN_MAX_DIM);
                return 2;
            }
            break;
        case O_FIELDS:
            dno.fields = (uint32_t)strtoul(optarg, &e, 10);
            if (*e || e == optarg || dno.fields < 1 || dno.fields > 256) {
                fprintf(stderr, "tltrain: --fields: '%s' is not a number in 1..256\n", optarg);
                return 2;
            }
            dnn_fields_given = 1;
            break;
        case O_HIDDEN: if (parse_hidden(optarg, &dno)) return 2; break;
        case O_WIDE: dno.wide = true; break;
        case O_NO_WIDE: dno.wide = false; break;
        case O_NORM: ffm_norm = fm_norm = 1; break;
        case O_NO_NORM: ffm_norm = fm_norm = 0; break;
        case O_LR_DENSE: if (parse_double("--lr-dense", optarg, &dno.lr_dense)) return 2; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "tltrain: unknown or incomplete option '%s' (see --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tltrain: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (!train_path || !format || !model) {
        fprintf(stderr, "tltrain: --train, --format and --model are required (see --help)\n");
        return 2;
    }
    reader_options_t ro = {.skip_bad = skip_bad};
    if (reader_format_parse(format, &ro.format) != 0) {
        fprintf(stderr, "tltrain: --format: '%s' is not libsvm, libffm or criteo\n", format);
        return 2;
    }
    int fm = strcmp(model, "fm") == 0, dnn = strcmp(model, "dnn") == 0;
    int ffm = strcmp(model, "ffm") == 0;
    if (!fm && !ffm && !dnn && strcmp(model, "lr") != 0) {
        fprintf(stderr, "tltrain: --model: '%s' is not lr, fm, ffm or dnn\n", model);
        return 2;
    }
    if (optimizer && strcmp(optimizer, "adam") == 0) {
        if (!dnn) {
            fprintf(stderr, "tltrain: --optimizer adam: Adam trains a dnn's dense layers; "
                            "use ftrl, adagrad or sgd for %s\n", model);
            return 2;
        }
        optimizer = NULL; /* the dnn's default: Adam for the MLP, Adagrad for the embeddings */
    }
    if (!optimizer)
        optimizer = fm || ffm ? "adagrad" : "ftrl";
    if (!epochs)
        epochs = dnn   ? TRAIN_DNN_DEFAULT_EPOCHS
                 : ffm ? TRAIN_FFM_DEFAULT_EPOCHS
                 : fm  ? (strcmp(optimizer, "adagrad") == 0 ? TRAIN_FM_DEFAULT_EPOCHS : 1)
                       : 3; /* fm ftrl/sgd: untuned, they overfit the small sets from pass 2 */
    if (!name)
        name = model;
    train_optimizer_t ot;
    if (train_optimizer_parse(optimizer, &ot) != 0) {
        fprintf(stderr, "tltrain: --optimizer: '%s' is not ftrl, adagrad or sgd\n", optimizer);
        return 2;
    }
    train_lr_options_t to;
    train_fm_options_t fo;
    train_lr_defaults(ot, &to);
    train_fm_defaults(ot, &fo);
    if (lr >= 0) to.alpha = fo.alpha = lr;
    if (beta >= 0) to.beta = fo.beta = beta;
    if (l1 >= 0) to.l1 = fo.l1 = l1;
    if (l2 >= 0) to.l2 = fo.l2 = l2;
    if (l2v >= 0) fo.l2_v = l2v;
    if (init_sd >= 0) fo.init_stdev = init_sd;
    fo.k = (uint32_t)k;
    fo.seed = seed;
    if (fm_norm >= 0) fo.norm = fm_norm;
    if (lr >= 0) dno.lr_sparse = lr;
    if (l2 >= 0) dno.l2 = l2;
    if (init_sd >= 0) dno.init_stdev = init_sd;
    train_ffm_options_t ffo; /* --model ffm; fields from --fields or the data */
    train_ffm_defaults(&ffo);
    ffo.optimizer = ot;
    if (lr >= 0) ffo.alpha = lr;
    if (beta >= 0) ffo.beta = beta;
    if (l2 >= 0) ffo.l2 = l2;
    if (l2v >= 0) ffo.l2_v = l2v;
    if (init_sd >= 0) ffo.init_stdev = init_sd;
    ffo.k = (uint32_t)k;
    ffo.seed = seed;
    ffo.norm = ffm_norm;
    ffo.fields = dnn_fields_given ? dno.fields : 0;
    dno.seed = seed;
    store_meta_t meta = {.model_kind = dnn   ? STORE_MODEL_DNN
                                       : ffm ? STORE_MODEL_FFM
                                       : fm  ? STORE_MODEL_FM
                                            : STORE_MODEL_LR,
                         .version = version};
    if (strlen(name) >= sizeof meta.model_name) {
        fprintf(stderr, "tltrain: --name: longer than %zu bytes\n", sizeof meta.model_name - 1);
        return 2;
    }
    strcpy(meta.model_name, name);

    int status = 1;
    char err[512];
    reader_t *rtrain = NULL, *rtest = NULL;
    struct trainer tr = {0}, *t = &tr;
    char why[256];
    if (!dnn && !ffm && (fm ? train_fm_create(&fo, &tr.fm, why, sizeof why)
            : train_lr_create(&to, &tr.lr, why, sizeof why)) != 0) {
        fprintf(stderr, "tltrain: %s\n", why);
        status = 2;
        goto out;
    }
    if (reader_open(train_path, &ro, &rtrain, err, sizeof err) != 0 ||
        (test_path && reader_open(test_path, &ro, &rtest, err, sizeof err) != 0)) {
        fprintf(stderr, "tltrain: %s\n", err);
        goto out;
    }
    if (dnn) {
        int rc = dnn_setup(rtrain, dnn_fields_given, &dno, &tr.dnn);
        if (rc != 0) {
            status = rc;
            goto out;
        }
    } else if (ffm) {
        int rc = ffm_setup(rtrain, dnn_fields_given, &ffo, &tr.ffm);
        if (rc != 0) {
            status = rc;
            goto out;
        }
        fprintf(stderr, "tltrain: ffm epochs=%ld\n", epochs);
    } else if (fm)
        fprintf(stderr,
                "tltrain: fm/%s k=%u norm=%d alpha=%g beta=%g l1=%g l2=%g l2_v=%g "
                "l2_v_freq=%g init_stdev=%g seed=%llu epochs=%ld\n",
                train_optimizer_name(ot), fo.k, (int)fo.norm, fo.alpha, fo.beta, fo.l1, fo.l2,
                fo.l2_v, fo.l2_v_freq, fo.init_stdev, (unsigned long long)fo.seed, epochs);
    else
        fprintf(stderr, "tltrain: lr/%s alpha=%g beta=%g l1=%g l2=%g epochs=%ld\n",
                train_optimizer_name(ot), to.alpha, to.beta, to.l1, to.l2, epochs);
    metrics_result_t res = {.logloss = NAN, .auc = NAN, .calibration = NAN};
    for (long ep = 1; ep <= epochs; ep++) {
        double loss, busy, t0 = now_sec();
        uint64_t rows, updates;
        if (train_epoch(rtrain, t, &loss, &rows, &updates, &busy) != 0)
            goto out;
        double wall = now_sec() - t0;
        printf("epoch %ld: train rows %llu progressive logloss %.6f", ep,
               (unsigned long long)rows, loss);
        if (reader_skipped(rtrain))
            printf(" skipped %llu", (unsigned long long)reader_skipped(rtrain));
        if (rtest) {
            if (evaluate(rtest, t, &res) != 0)
                goto out;
            printf(" | test rows %zu logloss %.6f auc %.6f calibration %.4f", res.n, res.logloss,
                   res.auc, res.calibration);
        }
        printf("\n");
        fprintf(stderr,
                "tltrain: epoch %ld: %.3f s wall, %.3f s in updates, %.1f M feature updates/s "
                "(%.1f M/s with reading)\n",
                ep, wall, busy, busy > 0 ? updates / busy / 1e6 : 0.0,
                wall > 0 ? updates / wall / 1e6 : 0.0);
    }
    if (export_dir) {
        store_error_t se;
        if (tr_export(t, export_dir, &meta, &se) != 0) {
            fprintf(stderr, "tltrain: export: %s\n", se.msg);
            goto out;
        }
        fprintf(stderr, "tltrain: exported %s version %llu to %s\n", meta.model_name, version,
                export_dir);
    }
    if (json) {
        printf("{");
        json_num(stdout, "logloss", res.logloss, 0);
        json_num(stdout, "auc", res.auc, 0);
        json_num(stdout, "calibration", res.calibration, 1);
        printf("}\n");
    }
    status = 0;
out:
    reader_close(rtrain);
    reader_close(rtest);
    train_lr_destroy(tr.lr);
    train_fm_destroy(tr.fm);
    train_dnn_destroy(tr.dnn);
    train_ffm_destroy(tr.ffm);
    return status;
}
