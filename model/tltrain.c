/*
 * tltrain.c — the offline trainer: reads a training file (libsvm, libffm or
 * raw Criteo), trains a model for some epochs, evaluates it on a test file
 * and exports a serving snapshot that tlserve loads.
 *
 *   tltrain --train FILE [--test FILE] --format libffm|libsvm|criteo --model lr|fm|ffm|dnn
 *           [--optimizer ftrl|adagrad|sgd] [--lr X] [--beta X] [--l1 X] [--l2 X]
 *           [--k K] [--l2-v X] [--init-stdev X] [--seed N]
 *           [--dim D] [--hidden W,W] [--wide|--no-wide] [--fields F] [--lr-dense X]
 *           [--epochs N] [--no-auto-stop] [--validation FILE] [--patience P]
 *           [--export DIR] [--name NAME] [--version N] [--skip-bad]
 *           [--export-delta OUT --parent DIR] [--json] [--help]
 *
 * How many epochs: tltrain_fit.c (early stopping on a validation slice by
 * default, then a retrain on all of the data; or a fixed count).  This file
 * is the command line, one epoch (train_epoch) and one evaluation.
 *
 * Every model kind is driven through train.h's one trainer interface
 * (train_t): the epoch and evaluation loops, the export and the first pass
 * that learns the field count are written once and switch on nothing; only
 * the mapping of the command line onto a kind's options knows the kinds.
 *
 * Human-readable progress goes to stderr; stdout gets one line per epoch and
 * (with --json) a last line {"logloss":..,"auc":..,"calibration":..,"epochs":..}.
 * Exit codes: 0 ok, 1 runtime error (bad data, I/O), 2 usage error, an
 * unimplemented model, or a data file that holds no samples or cannot be
 * read more than once (a pipe: every file is read once per epoch).  One
 * thread streams the files, once per epoch; --threads T parses the training
 * file into memory once and trains on T threads (train_threads.h).
 */
#include "metrics.h"
#include "model.h"
#include "reader.h"
#include "train.h"
#include "train_export.h"
#include "tltrain_fit.h"
#include "train_threads.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tltrain --train FILE [--test FILE] --format libffm|libsvm|criteo\n"
            "               --model lr|fm|ffm|dnn [--norm|--no-norm]\n"
            "               [--optimizer ftrl|adagrad|sgd|adam] [--lr X] [--beta X] [--l1 X] [--l2 X]\n"
            "               [--k K] [--l2-v X] [--init-stdev X] [--seed N]\n"
            "               [--dim D] [--hidden W,W] [--wide|--no-wide] [--fields F] [--lr-dense X]\n"
            "               [--epochs N] [--no-auto-stop] [--validation FILE] [--patience P]\n"
            "               [--export DIR] [--name NAME] [--version N]\n"
            "               [--export-delta OUT --parent DIR]\n"
            "               [--threads T] [--skip-bad] [--json] [--help]\n"
            "       tltrain predict --model-dir DIR --data FILE --format F [--out FILE] [--json]\n"
            "\n"
            "  --train FILE     training data (streamed once per epoch)\n"
            "  --test FILE      evaluation data: logloss, AUC, calibration after each epoch\n"
            "  --format F       libsvm (label idx:val), libffm (label field:idx:val) or criteo\n"
            "                   (raw TSV/CSV: label, I1-I13, C1-C26, an Id column first and a\n"
            "                   header line allowed, CSV fields quoted or not; hashed per field)\n"
            "  --model M        lr, fm, ffm (field-aware FM) or dnn (Wide & Deep)\n"
            "  --optimizer O    ftrl, adagrad or sgd (default: ftrl for lr, adagrad for fm\n"
            "                   and ffm; fm, ffm with ftrl: FTRL for the bias and linear\n"
            "                   weights, Adagrad for v);\n"
            "                   dnn: adam (its only mode: Adam for the MLP, Adagrad for the\n"
            "                   embeddings and wide weights)\n"
            "  --lr X           learning rate (FTRL alpha); lr: ftrl 0.1, adagrad 0.05, sgd 0.05;\n"
            "                   fm: adagrad 0.2, ftrl/sgd 0.05; ffm: 0.4 for the factors, half\n"
            "                   that for the bias and linear weights (ftrl: their FTRL alpha)\n"
            "  --beta X         FTRL beta (default 1); Adagrad epsilon (default 1, so that\n"
            "                   no step exceeds lr x |gradient|; ffm with ftrl: both)\n"
            "  --l1 X           L1 (FTRL only; default 0.1)\n"
            "  --l2 X           L2 on the linear weights (lr: ftrl 1, adagrad/sgd 1e-4;\n"
            "                   fm: ftrl 1, adagrad 2e-5, sgd 0.001; ffm: ftrl 1,\n"
            "                   adagrad/sgd 0.002;\n"
            "                   dnn: 1e-4 on w and e)\n"
            "  --k K            fm: factors per id (default 4, at most 64); ffm: factors per\n"
            "                   id and field (default 4; 1 + fields x k <= 512 with adagrad,\n"
            "                   511 with ftrl)\n"
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
            "  --epochs N       with auto-stop (the default): the most epochs (default 100);\n"
            "                   with --no-auto-stop: exactly N passes (default 3 for lr, 10\n"
            "                   for fm (1 with ftrl or sgd), 11 for ffm, 1 for dnn)\n"
            "  auto-stop        by default 10%% of the training lines (by a hash of each\n"
            "                   line) are held out; after each epoch the validation logloss\n"
            "                   is measured; training stops after --patience epochs without\n"
            "                   an improvement (> 0.01%%), and a fresh model then learns ALL\n"
            "                   of the training file for the best epoch count E (stderr:\n"
            "                   'auto-stop: best epoch E of M').  When the held-out slice\n"
            "                   has fewer than 100 clicks or non-clicks (too few to rank\n"
            "                   epochs), auto-stop is off: --epochs N, else the default above\n"
            "  --validation FILE  auto-stop on FILE instead of a held-out slice (the search\n"
            "                   trains on all of the training file; the best epoch's model\n"
            "                   is kept by retraining E epochs).  Unparsable or empty: exit 2\n"
            "  --patience P     auto-stop: epochs without improvement before stopping\n"
            "                   (1..%d, default %d)\n"
            "  --no-auto-stop   fixed epochs, nothing held out\n"
            "  --export DIR     write a serving snapshot into DIR (LR: one float per id,\n"
            "                   FM: 1 + k floats per id, FFM: 1 + fields x k)\n"
            "  --name NAME      model name in the snapshot (default: the model kind)\n"
            "  --version N      snapshot version, 1..2^63-1 (default: DIR's name when it is a\n"
            "                   version number, as in a repository's <model>/<N>; else 1)\n"
            "  --export-delta OUT  write what training changed since --parent as a delta\n"
            "                   version into OUT (e.g. <repo>/<model>/<N>, N = --version;\n"
            "                   must not exist):\n"
            "                   upserts are the ids whose exported value differs from the\n"
            "                   parent's (bitwise), deletes the parent's ids the export lacks;\n"
            "                   parent = the parent's version, producer \"tltrain\".  With\n"
            "                   --export, that full export is the one diffed.  Training still\n"
            "                   starts from scratch (a snapshot lacks the optimizer state)\n"
            "  --parent DIR     the parent version: a full snapshot, or <repo>/<model>/<P>\n"
            "                   whose chain of deltas resolves; same --name, model, K, dtype,\n"
            "                   shards and params; --version must be above P.  Checked before\n"
            "                   training.  A DNN's MLP cannot be in a delta: refused unless\n"
            "                   unchanged (use --export).  Exit 2 when the parent or OUT is refused\n"
            "                   before training, 1 when it is missing or refused after\n"
            "  --skip-bad       skip (and count) malformed lines instead of stopping\n"
            "  --threads T      train lr, fm and ffm on T threads (default 1): lock-free\n"
            "                   Hogwild updates over the training file parsed once into memory\n"
            "                   (one thread and streaming when it needs more than half the RAM);\n"
            "                   runs differ a little from each other and from one thread.\n"
            "                   dnn trains on one thread\n"
            "  --json           last stdout line: {\"logloss\":..,\"auc\":..,\"calibration\":..,\n"
            "                   \"epochs\":..} (the test metrics; the epochs the final model made)\n"
            "\n"
            "tltrain predict scores FILE with the snapshot in DIR as tlserve would, one score\n"
            "per line ('tltrain predict --help').\n",
            TLTRAIN_FIT_MAX_PATIENCE, TLTRAIN_FIT_PATIENCE);
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* An unsigned decimal: digits only (strtoull alone takes "-1" as 2^64-1 and
 * clamps an overflow to it).  0, or -1. */
static int parse_u64_arg(const char *s, unsigned long long *out)
{
    char *e;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    *out = strtoull(s, &e, 10);
    return errno || *e ? -1 : 0;
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

/* A reader's sample as the trainer takes it: all features in the shared
 * block, no item block. */
static codec_block_t sample_block(const reader_sample_t *s)
{
    return (codec_block_t){.ids = s->ids, .values = s->values, .n = s->n};
}

/* --threads: T, and the training file parsed once for the threads (freed
 * at exit). */
static uint32_t threads_n = 1;
static train_samples_t *threads_data;
static const reader_t *threads_from; /* the reader threads_data was parsed from */

static void threads_data_free(void)
{
    train_samples_destroy(threads_data);
    threads_data = NULL;
}

/* One pass of the training file.  Returns 0 or 1 (error printed).  With
 * --threads T > 1 and a kind that trains on threads: the first call parses
 * the file into memory (train_threads.h), every call trains on T threads;
 * when the file does not fit in half the RAM, one thread and streaming. */
static int train_epoch(reader_t *r, train_t *t, double *loss, uint64_t *rows,
                       uint64_t *updates, double *busy)
{
    if (threads_n > 1 && !train_threads_supported(t)) {
        fprintf(stderr, "tltrain: --threads %u: this model kind trains on one thread\n",
                threads_n);
        threads_n = 1;
    }
    if (threads_data && r != threads_from) /* another file (auto-stop's part, then all) */
        threads_data_free();
    if (threads_n > 1 && !threads_data) {
        threads_from = r;
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        uint64_t budget = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : 0;
        reader_sample_t s;
        int rc = reader_rewind(r) == 0 ? train_samples_create(budget, &threads_data) : -EIO;
        while (rc == 0 && (rc = reader_next(r, &s)) == 1)
            rc = train_samples_add(threads_data, s.ids, s.values, s.n, s.label);
        if (rc < 0 && rc != -E2BIG && rc != -ENOMEM) {
            fprintf(stderr, "tltrain: %s\n", rc == -EIO ? "cannot rewind the training file"
                                                        : reader_error(r));
            return 1;
        }
        if (rc < 0) {
            fprintf(stderr, "tltrain: --threads %u: the training data does not fit in half "
                            "the memory: one thread, streaming\n", threads_n);
            threads_data_free();
            threads_n = 1;
        }
    }
    if (threads_n > 1) {
        train_threads_stats_t st;
        char why[256];
        double t0 = now_sec();
        int rc = train_threads_epoch(t, threads_data, threads_n, &st, why, sizeof why);
        if (rc != 0) {
            fprintf(stderr, "tltrain: %s%s\n", why,
                    rc == -ERANGE ? ": training stopped" : "");
            return 1;
        }
        *loss = st.logloss;
        *rows = st.samples;
        *updates = st.updates;
        *busy = now_sec() - t0;
        return 0;
    }
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
        const codec_block_t shared = sample_block(&s), none = {.ids = NULL, .values = NULL, .n = 0};
        int urc = train_update(t, &shared, &none, 1, &s.label, NULL, &p);
        if (urc != 0) {
            fprintf(stderr, "tltrain: %s\n",
                    urc == -ERANGE ? "a step made a weight infinite or NaN (feature values too "
                                     "large?): training stopped"
                                   : "out of memory while training");
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

static int evaluate(reader_t *r, train_t *t, metrics_result_t *res)
{
    metrics_t *m;
    reader_sample_t s;
    int rc;
    if (reader_rewind(r) != 0 || metrics_create(&m) != 0) {
        fprintf(stderr, "tltrain: cannot evaluate (rewind or out of memory)\n");
        return 1;
    }
    while ((rc = reader_next(r, &s)) == 1) {
        const codec_block_t shared = sample_block(&s);
        if (metrics_add(m, train_predict(t, &shared, NULL), s.label) != 0) {
            rc = -ENOMEM;
            break;
        }
    }
    if (rc < 0) {
        fprintf(stderr, "tltrain: %s\n", rc == -ENOMEM ? "out of memory" : reader_error(r));
        metrics_destroy(m);
        return 1;
    }
    if (reader_skipped(r)) /* --skip-bad: the figures leave these lines out; say so */
        fprintf(stderr, "tltrain: %s: %llu malformed lines skipped by --skip-bad, not scored\n",
                reader_name(r), (unsigned long long)reader_skipped(r));
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

/* tltrain reads each data file more than once (a check, the auto-stop split,
 * every epoch): a pipe or a FIFO would block or come back empty, a device is
 * no data set.  0 (a regular file, or one stat cannot see: the open names
 * that), or 2 (printed). */
__attribute__((cold)) static int check_rereadable(const char *opt, const char *path)
{
    struct stat st;
    if (!path || stat(path, &st) != 0 || S_ISREG(st.st_mode))
        return 0;
    if (S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tltrain: %s %s: a directory, not a data file\n", opt, path);
        return 2;
    }
    const char *what = S_ISFIFO(st.st_mode)   ? "a pipe or FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    fprintf(stderr,
            "tltrain: %s %s: %s; tltrain reads its data files more than once (once per "
            "epoch), so each must be a regular file (save a stream to a file first)\n",
            opt, path, what);
    return 2;
}

/* What would make the --export write fail once training is done: a file
 * there, a snapshot already there (never overwritten), a parent directory
 * missing (the writer creates DIR, not its parents).  Checked first so that
 * no training is lost to it.  0, or 2 (printed). */
__attribute__((cold)) static int check_export_dir(const char *dir)
{
    struct stat st;
    char path[PATH_MAX];
    if (!dir[0]) {
        fprintf(stderr, "tltrain: --export: the path is empty\n");
        return 2;
    }
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            fprintf(stderr, "tltrain: --export %s: exists and is not a directory\n", dir);
            return 2;
        }
        if ((size_t)snprintf(path, sizeof path, "%s/MANIFEST", dir) < sizeof path &&
            lstat(path, &st) == 0) {
            fprintf(stderr, "tltrain: --export %s already holds a snapshot (a MANIFEST); "
                            "snapshots are never overwritten: give a new directory\n", dir);
            return 2;
        }
        return 0;
    }
    if (errno != ENOENT) {
        fprintf(stderr, "tltrain: --export %s: %s\n", dir, strerror(errno));
        return 2;
    }
    if ((size_t)snprintf(path, sizeof path, "%s", dir) >= sizeof path) {
        fprintf(stderr, "tltrain: --export: the path is longer than %d bytes\n", PATH_MAX - 1);
        return 2;
    }
    const char *parent = dirname(path);
    if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tltrain: --export %s: its parent directory %s does not exist\n", dir,
                parent);
        return 2;
    }
    if (access(parent, W_OK | X_OK) != 0) {
        fprintf(stderr, "tltrain: --export %s: its parent directory %s is not writable here: %s\n",
                dir, parent, strerror(errno));
        return 2;
    }
    return 0;
}

/* The version an --export directory's name says (a repository's <model>/<N>),
 * 0 when its last component is not a version name. */
static uint64_t export_dir_version(const char *dir)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s", dir) >= sizeof path)
        return 0;
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        path[--n] = '\0';
    uint64_t v = 0;
    return store_version_parse(basename(path), &v) ? v : 0;
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

/* The largest field in the training file + 1 (a first pass), for a kind
 * that needs its field count when none was given.  0, or 1 (bad data;
 * printed). */
static int fields_from_data(reader_t *r, uint32_t *fields)
{
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
    *fields = top + 1;
    return 0;
}

/* --test read through once before any training: a malformed line or a file
 * without samples is named now, not after the first epoch.  0 (rewound), 1
 * (a bad line, printed) or 2 (no samples, printed). */
static int check_test_file(reader_t *r, const char *path)
{
    reader_sample_t s;
    uint64_t n = 0;
    int rc;
    while ((rc = reader_next(r, &s)) == 1)
        n++;
    if (rc < 0) {
        fprintf(stderr, "tltrain: --test: %s\n", reader_error(r));
        return 1;
    }
    if (n == 0) {
        fprintf(stderr, "tltrain: --test %s holds no samples", path);
        if (reader_skipped(r))
            fprintf(stderr, " (%llu malformed lines skipped by --skip-bad)",
                    (unsigned long long)reader_skipped(r));
        fprintf(stderr, "\n");
        return 2;
    }
    if (reader_rewind(r) != 0) {
        fprintf(stderr, "tltrain: --test %s: cannot read it again\n", path);
        return 1;
    }
    return 0;
}

/* The command line's hyper-parameters (negative: not given) onto a kind's
 * options, which hold that kind's defaults. */
struct cli_params {
    double lr, beta, l1, l2, l2v, init_sd;
    long k;
    unsigned long long seed;
    int norm; /* 1 on, 0 off, -1 the kind's default */
};

static void apply_params(const struct cli_params *c, const train_dnn_options_t *dno,
                         train_options_t *o)
{
    switch (o->kind) {
    case STORE_MODEL_LR:
        if (c->lr >= 0) o->lr.alpha = c->lr;
        if (c->beta >= 0) o->lr.beta = c->beta;
        if (c->l1 >= 0) o->lr.l1 = c->l1;
        if (c->l2 >= 0) o->lr.l2 = c->l2;
        break;
    case STORE_MODEL_FM:
        if (c->lr >= 0) o->fm.alpha = c->lr;
        if (c->beta >= 0) o->fm.beta = c->beta;
        if (c->l1 >= 0) o->fm.l1 = c->l1;
        if (c->l2 >= 0) o->fm.l2 = c->l2;
        if (c->l2v >= 0) o->fm.l2_v = c->l2v;
        if (c->init_sd >= 0) o->fm.init_stdev = c->init_sd;
        o->fm.k = (uint32_t)c->k;
        o->fm.seed = c->seed;
        if (c->norm >= 0) o->fm.norm = c->norm;
        break;
    case STORE_MODEL_FFM:
        if (c->lr >= 0) o->ffm.alpha = c->lr;
        if (c->beta >= 0) o->ffm.beta = c->beta;
        if (c->l1 >= 0) o->ffm.l1 = c->l1;
        if (c->l2 >= 0) o->ffm.l2 = c->l2;
        if (c->l2v >= 0) o->ffm.l2_v = c->l2v;
        if (c->init_sd >= 0) o->ffm.init_stdev = c->init_sd;
        o->ffm.k = (uint32_t)c->k;
        o->ffm.seed = c->seed;
        o->ffm.norm = c->norm != 0; /* on unless --no-norm */
        break;
    case STORE_MODEL_DNN:
        o->dnn = *dno; /* --dim, --hidden, --wide, --fields, --lr-dense */
        if (c->lr >= 0) o->dnn.lr_sparse = c->lr;
        if (c->l2 >= 0) o->dnn.l2 = c->l2;
        if (c->init_sd >= 0) o->dnn.init_stdev = c->init_sd;
        o->dnn.seed = c->seed;
        break;
    default:
        break;
    }
}

/* Options that shape one kind's model or training, and the kinds they apply
 * to: given for another kind they would be ignored without a word. */
#define K_(kind) (1u << (kind))
static const struct {
    const char *name; /* the long option, as in longopts */
    unsigned kinds;
} KIND_OPTS[] = {
    {"beta", K_(STORE_MODEL_LR) | K_(STORE_MODEL_FM) | K_(STORE_MODEL_FFM)},
    {"l1", K_(STORE_MODEL_LR) | K_(STORE_MODEL_FM) | K_(STORE_MODEL_FFM)},
    {"l2-v", K_(STORE_MODEL_FM) | K_(STORE_MODEL_FFM)},
    {"k", K_(STORE_MODEL_FM) | K_(STORE_MODEL_FFM)},
    {"norm", K_(STORE_MODEL_FM) | K_(STORE_MODEL_FFM)},
    {"no-norm", K_(STORE_MODEL_FM) | K_(STORE_MODEL_FFM)},
    {"init-stdev", K_(STORE_MODEL_FM) | K_(STORE_MODEL_FFM) | K_(STORE_MODEL_DNN)},
    {"seed", K_(STORE_MODEL_FM) | K_(STORE_MODEL_FFM) | K_(STORE_MODEL_DNN)},
    {"fields", K_(STORE_MODEL_FFM) | K_(STORE_MODEL_DNN)},
    {"dim", K_(STORE_MODEL_DNN)},
    {"hidden", K_(STORE_MODEL_DNN)},
    {"wide", K_(STORE_MODEL_DNN)},
    {"no-wide", K_(STORE_MODEL_DNN)},
    {"lr-dense", K_(STORE_MODEL_DNN)},
};
#undef K_

/* The bit of long option name in KIND_OPTS, 0 when it is not one of them. */
static unsigned kind_opt_bit(const char *name)
{
    for (size_t i = 0; i < sizeof KIND_OPTS / sizeof *KIND_OPTS; i++)
        if (strcmp(KIND_OPTS[i].name, name) == 0)
            return 1u << i;
    return 0;
}

/* 0, or 2 (said) when an option of given (KIND_OPTS bits) does not apply to
 * kind. */
static int check_kind_opts(unsigned given, store_model_kind_t kind, const char *model)
{
    for (size_t i = 0; i < sizeof KIND_OPTS / sizeof *KIND_OPTS; i++)
        if ((given & (1u << i)) && !(KIND_OPTS[i].kinds & (1u << kind))) {
            fprintf(stderr, "tltrain: --%s does not apply to --model %s (see --help)\n",
                    KIND_OPTS[i].name, model);
            return 2;
        }
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
    enum { O_THREADS = 1024, O_EXPORT_DELTA, O_PARENT };
    enum { O_NO_AUTO_STOP = 1280, O_VALIDATION, O_PATIENCE };
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
        {"export-delta", required_argument, 0, O_EXPORT_DELTA},
        {"parent", required_argument, 0, O_PARENT},
        {"norm", no_argument, 0, O_NORM},           {"no-norm", no_argument, 0, O_NO_NORM},
        {"no-auto-stop", no_argument, 0, O_NO_AUTO_STOP},
        {"validation", required_argument, 0, O_VALIDATION},
        {"patience", required_argument, 0, O_PATIENCE},
        {0, 0, 0, 0}};
    const char *train_path = NULL, *test_path = NULL, *format = NULL, *model = NULL;
    const char *optimizer = NULL, *export_dir = NULL, *name = NULL;
    const char *delta_dir = NULL, *parent_dir = NULL; /* --export-delta, --parent */
    double lr = -1, beta = -1, l1 = -1, l2 = -1, l2v = -1, init_sd = -1;
    long k = 4;
    unsigned long long seed = 1;
    long epochs = 0; /* 0: the model's default (fixed) or TLTRAIN_FIT_MAX_EPOCHS (auto-stop) */
    const char *validation = NULL; /* --validation */
    long patience = 0;             /* --patience; 0: not given */
    int auto_stop = 1;
    unsigned long long version = 1;
    int version_given = 0;
    int json = 0, skip_bad = 0, c;
    train_dnn_options_t dno; /* --model dnn */
    train_dnn_defaults(&dno);
    int fields_given = 0; /* --fields (ffm, dnn; kept in dno.fields) */
    int norm = -1;        /* --norm 1, --no-norm 0, else -1: the kind's default */
    unsigned given = 0; /* KIND_OPTS bits of the options given */
    opterr = 0;
    int li = -1;
    while ((c = getopt_long(argc, argv, "h", longopts, &li)) != -1) {
        char *e;
        unsigned long long u;
        if (li >= 0)
            given |= kind_opt_bit(longopts[li].name);
        li = -1;
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
            threads_n = (uint32_t)th;
            if (th > 1)
                atexit(threads_data_free);
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
            if (parse_u64_arg(optarg, &seed) != 0) {
                fprintf(stderr, "tltrain: --seed: '%s' is not a number in 0..2^64-1\n", optarg);
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
        case O_NO_AUTO_STOP: auto_stop = 0; break;
        case O_VALIDATION: validation = optarg; break;
        case O_PATIENCE:
            patience = strtol(optarg, &e, 10);
            if (*e || e == optarg || patience < 1 || patience > TLTRAIN_FIT_MAX_PATIENCE) {
                fprintf(stderr, "tltrain: --patience: '%s' is not a number in 1..%d\n", optarg,
                        TLTRAIN_FIT_MAX_PATIENCE);
                return 2;
            }
            break;
        case O_EXPORT: export_dir = optarg; break;
        case O_EXPORT_DELTA: delta_dir = optarg; break;
        case O_PARENT: parent_dir = optarg; break;
        case O_NAME: name = optarg; break;
        case O_VERSION:
            if (parse_u64_arg(optarg, &version) != 0 || version == 0 || version > INT64_MAX) {
                fprintf(stderr, "tltrain: --version: '%s' is not a number in 1..2^63-1\n", optarg);
                return 2;
            }
            version_given = 1;
            break;
        case O_SKIP: skip_bad = 1; break;
        case O_JSON: json = 1; break;
        case O_DIM:
            if (parse_u64_arg(optarg, &u) != 0 || u < 1 || u > TRAIN_DNN_MAX_DIM) {
                fprintf(stderr, "tltrain: --dim: '%s' is not a number in 1..%d\n", optarg,
                        TRAIN_DNN_MAX_DIM);
                return 2;
            }
            dno.dim = (uint32_t)u;
            break;
        case O_FIELDS:
            if (parse_u64_arg(optarg, &u) != 0 || u < 1 || u > 256) {
                fprintf(stderr, "tltrain: --fields: '%s' is not a number in 1..256\n", optarg);
                return 2;
            }
            dno.fields = (uint32_t)u;
            fields_given = 1;
            break;
        case O_HIDDEN: if (parse_hidden(optarg, &dno)) return 2; break;
        case O_WIDE: dno.wide = true; break;
        case O_NO_WIDE: dno.wide = false; break;
        case O_NORM: norm = 1; break;
        case O_NO_NORM: norm = 0; break;
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
    if (!auto_stop && (validation || patience)) {
        fprintf(stderr, "tltrain: --%s is an auto-stop option: it cannot go with "
                        "--no-auto-stop (see --help)\n", validation ? "validation" : "patience");
        return 2;
    }
    if (check_rereadable("--train", train_path) || check_rereadable("--test", test_path) ||
        check_rereadable("--validation", validation))
        return 2;
    if (export_dir && check_export_dir(export_dir) != 0)
        return 2;
    if (export_dir && delta_dir && strcmp(export_dir, delta_dir) == 0) {
        fprintf(stderr, "tltrain: --export and --export-delta name the same directory %s: a "
                        "full version and a delta each need their own\n", export_dir);
        return 2;
    }
    uint64_t named = export_dir ? export_dir_version(export_dir) : 0;
    if (named && version_given && named != version) {
        fprintf(stderr, "tltrain: --export %s is named version %" PRIu64 " but --version is %llu: "
                        "a repository refuses a directory holding another version than its name\n",
                export_dir, named, version);
        return 2;
    }
    if (named && !version_given)
        version = named; /* <model>/<N>: the snapshot says N, as a repository reads it */
    if (!delta_dir != !parent_dir) {
        fprintf(stderr, "tltrain: --export-delta and --parent go together (see --help)\n");
        return 2;
    }
    reader_options_t ro = {.skip_bad = skip_bad};
    if (reader_format_parse(format, &ro.format) != 0) {
        fprintf(stderr, "tltrain: --format: '%s' is not libsvm, libffm or criteo\n", format);
        return 2;
    }
    const train_ops_t *ops = train_ops_named(model);
    if (!ops) {
        fprintf(stderr, "tltrain: --model: '%s' is not lr, fm, ffm or dnn\n", model);
        return 2;
    }
    if (check_kind_opts(given, ops->kind, model) != 0)
        return 2;
    if (optimizer && strcmp(optimizer, "adam") == 0) {
        if (ops->kind != STORE_MODEL_DNN) {
            fprintf(stderr, "tltrain: --optimizer adam: Adam trains a dnn's dense layers; "
                            "use ftrl, adagrad or sgd for %s\n", model);
            return 2;
        }
        optimizer = NULL; /* the dnn's default: Adam for the MLP, Adagrad for the embeddings */
    } else if (optimizer && ops->kind == STORE_MODEL_DNN) {
        fprintf(stderr, "tltrain: --optimizer %s: a dnn trains its MLP with Adam and its "
                        "embeddings and wide weights with Adagrad, its only mode (give adam, "
                        "or no --optimizer)\n", optimizer);
        return 2;
    }
    if (!name)
        name = model;
    train_optimizer_t ot = train_default_optimizer(ops->kind);
    if (optimizer && train_optimizer_parse(optimizer, &ot) != 0) {
        fprintf(stderr, "tltrain: --optimizer: '%s' is not ftrl, adagrad or sgd\n", optimizer);
        return 2;
    }
    train_options_t o;
    train_defaults(ops->kind, ot, &o);
    const struct cli_params cp = {.lr = lr, .beta = beta, .l1 = l1, .l2 = l2, .l2v = l2v,
                                  .init_sd = init_sd, .k = k, .seed = seed, .norm = norm};
    apply_params(&cp, &dno, &o);
    uint32_t *fields = train_options_fields(&o); /* FFM, DNN: --fields or the data */
    if (fields)
        *fields = fields_given ? dno.fields : 0;
    const long fixed_epochs = epochs ? epochs : (long)train_default_epochs(&o);
    if (!epochs)
        epochs = auto_stop ? TLTRAIN_FIT_MAX_EPOCHS : fixed_epochs;
    store_meta_t meta = {.model_kind = ops->kind, .version = version};
    char bad_name[128];
    if (store_model_name_check(name, bad_name, sizeof bad_name) != 0) { /* now, not at export */
        fprintf(stderr, "tltrain: --name '%s': %s\n", name, bad_name);
        return 2;
    }
    strcpy(meta.model_name, name);
    if (parent_dir) { /* refuse a wrong parent before training, not after */
        store_error_t se;
        uint64_t pv;
        if (train__delta_check(parent_dir, delta_dir, &meta, &pv, &se) != 0) {
            fprintf(stderr, "tltrain: --export-delta: %s\n", se.msg);
            return se.code == STORE_E_INVALID || se.code == STORE_E_MISMATCH ||
                           se.code == STORE_E_EXISTS
                       ? 2
                       : 1;
        }
        fprintf(stderr, "tltrain: delta parent %s: version %llu\n", parent_dir,
                (unsigned long long)pv);
    }

    int status = 1;
    char err[512];
    reader_t *rtrain = NULL, *rtest = NULL;
    train_t *t = NULL;
    char why[256];
    const int scan = fields && !fields_given; /* the trainer waits for the data's fields */
    /* Holding a slice out copies lines unparsed: parse the file first, so that a bad line is
     * named in the user's file (the same pass learns the fields). */
    const int check = scan || (auto_stop && !validation);
    if (!scan && train_create(&o, &t, why, sizeof why) != 0) {
        fprintf(stderr, "tltrain: %s\n", why);
        status = 2;
        goto out;
    }
    if (reader_open(train_path, &ro, &rtrain, err, sizeof err) != 0 ||
        (test_path && reader_open(test_path, &ro, &rtest, err, sizeof err) != 0)) {
        fprintf(stderr, "tltrain: %s: %s\n", rtrain ? "--test" : "--train", err);
        goto out;
    }
    if (rtest) {
        int bad = check_test_file(rtest, test_path);
        if (bad) {
            status = bad;
            goto out;
        }
    }
    if (check) {
        uint32_t seen;
        if (fields_from_data(rtrain, &seen) != 0)
            goto out;
        if (scan)
            *fields = seen;
    }
    if (scan) {
        if (train_create(&o, &t, why, sizeof why) != 0) {
            fprintf(stderr, "tltrain: %s\n", why);
            status = 2;
            goto out;
        }
    }
    train_describe(t, why, sizeof why);
    if (auto_stop)
        fprintf(stderr, "tltrain: %s%s auto-stop: at most %ld epochs, patience %ld, on %s\n", why,
                scan ? " (fields from the data)" : "", epochs,
                patience ? patience : TLTRAIN_FIT_PATIENCE,
                validation ? validation : "a held-out 10% of the training lines");
    else
        fprintf(stderr, "tltrain: %s%s epochs=%ld\n", why, scan ? " (fields from the data)" : "",
                epochs);
    tltrain_fit_t fit = {.opt = &o, .train_path = train_path, .train = rtrain, .test = rtest,
                         .ro = ro, .auto_stop = auto_stop, .validation_path = validation,
                         .epochs = epochs, .fallback_epochs = fixed_epochs,
                         .patience = patience ? patience : TLTRAIN_FIT_PATIENCE,
                         .epoch = train_epoch, .eval = evaluate};
    if ((status = tltrain_fit_run(&fit, &t)) != 0)
        goto out;
    status = 1;
    const metrics_result_t res = fit.test_res;
    if (export_dir) {
        store_error_t se;
        if (train_export(t, export_dir, &meta, &se) != 0) {
            fprintf(stderr, "tltrain: export: %s\n", se.msg);
            goto out;
        }
        fprintf(stderr, "tltrain: exported %s version %llu to %s\n", meta.model_name, version,
                export_dir);
    }
    if (delta_dir) {
        store_error_t se;
        uint64_t ups = 0, dels = 0;
        if (train__export_delta(t, parent_dir, export_dir, delta_dir, &meta, &ups, &dels, &se) !=
            0) {
            fprintf(stderr, "tltrain: export-delta: %s\n", se.msg);
            goto out;
        }
        fprintf(stderr,
                "tltrain: exported %s version %llu to %s as a delta of %s: %llu upserts, %llu "
                "deletes\n",
                meta.model_name, version, delta_dir, parent_dir, (unsigned long long)ups,
                (unsigned long long)dels);
    }
    if (json) {
        printf("{");
        json_num(stdout, "logloss", res.logloss, 0);
        json_num(stdout, "auc", res.auc, 0);
        json_num(stdout, "calibration", res.calibration, 0);
        printf("\"epochs\":%ld}\n", fit.chosen);
    }
    status = 0;
out:
    reader_close(rtrain);
    reader_close(rtest);
    train_destroy(t);
    return status;
}
