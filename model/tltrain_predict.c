/*
 * tltrain_predict.c — `tltrain predict`: scores a data file with an exported
 * snapshot, one probability per line, through the serving path.
 *
 *   tltrain predict --model-dir DIR --data FILE --format libffm|libsvm|criteo
 *                   [--out FILE] [--skip-bad] [--json]
 *
 * The snapshot is loaded with model_load() and every sample is scored with
 * model_score() as a request whose shared block is the sample and whose one
 * item is empty: the very code tlserve runs, so a score printed here is the
 * score tlserve answers for the same features (and, for a snapshot tltrain
 * exported, the trainer's own prediction, bit for bit).  Labels in the file
 * are read (the formats need them) and, with --json, give logloss, AUC and
 * calibration on the last stdout line; the scores go to --out (default
 * stdout, then before the JSON line).  Any model kind.
 *
 * Exit codes: 0 ok, 1 runtime error (bad snapshot, bad data, I/O), 2 usage
 * (--out naming the --data file among them).
 * Single-threaded; the file is streamed.
 */
#include "metrics.h"
#include "model.h"
#include "reader.h"

#include <errno.h>
#include <stdbool.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

int tltrain_predict_main(int argc, char **argv);

/* "key":v with six decimals, or "key":null for a metric that has no value
 * (AUC of a one-class file, anything of zero samples): JSON has no NaN. */
static void json_metric(const char *key, double v, const char *sep)
{
    if (isfinite(v))
        printf("\"%s\":%.6f%s", key, v, sep);
    else
        printf("\"%s\":null%s", key, sep);
}

/* Whether paths a and b name one file (hard links and symlinks included). */
static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tltrain predict --model-dir DIR --data FILE --format libffm|libsvm|criteo\n"
            "                       [--out FILE] [--skip-bad] [--json] [--help]\n"
            "\n"
            "Scores every sample of FILE with the snapshot in DIR (any model kind, exactly as\n"
            "tlserve scores it) and writes one probability per sample line, in file order\n"
            "(a blank line, or a criteo header, is not a sample: it gets no line).\n"
            "\n"
            "  --model-dir DIR  a snapshot directory (tltrain --export, tlsynth model)\n"
            "  --data FILE      samples to score (their labels are only used by --json)\n"
            "  --format F       libsvm, libffm or criteo\n"
            "  --out FILE       where the scores go (default: stdout)\n"
            "  --skip-bad       skip (and count) malformed lines instead of stopping; each\n"
            "                   gets the score nan, so the scores stay one per sample line\n"
            "  --json           last stdout line: {\"samples\":..,\"logloss\":..,\"auc\":..,"
            "\"calibration\":..}\n");
}

int tltrain_predict_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model-dir", required_argument, 0, 'm'}, {"data", required_argument, 0, 'd'},
        {"format", required_argument, 0, 'f'},    {"out", required_argument, 0, 'o'},
        {"skip-bad", no_argument, 0, 's'},        {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},            {0, 0, 0, 0},
    };
    const char *dir = NULL, *data = NULL, *out_path = NULL;
    reader_options_t ro = {.format = READER_LIBFFM};
    int have_format = 0, json = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': dir = optarg; break;
        case 'd': data = optarg; break;
        case 'o': out_path = optarg; break;
        case 's': ro.skip_bad = true; break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        case 'f':
            if (reader_format_parse(optarg, &ro.format) != 0) {
                fprintf(stderr, "tltrain predict: --format: '%s' is not libsvm, libffm or criteo\n",
                        optarg);
                return 2;
            }
            have_format = 1;
            break;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc || !dir || !data || !have_format) {
        fprintf(stderr, "tltrain predict: %s\n",
                optind < argc ? "unexpected argument"
                : !dir        ? "--model-dir DIR is required"
                : !data       ? "--data FILE is required"
                              : "--format is required");
        usage(stderr);
        return 2;
    }

    if (out_path && same_file(out_path, data)) { /* "w" would empty it before it is read */
        fprintf(stderr, "tltrain predict: --out %s is the --data file: the scores would "
                        "overwrite the samples\n", out_path);
        return 2;
    }

    int rc = 1;
    model_t *m = NULL;
    model_scratch_t *sc = NULL;
    reader_t *r = NULL;
    metrics_t *met = NULL;
    FILE *out = stdout;
    char tmp_path[4096] = ""; /* --out's temporary name while it is written */
    store_error_t err;
    char why[512];
    if (model_load(dir, 0, &m, &err) != 0) {
        fprintf(stderr, "tltrain predict: %s\n", err.msg);
        return 1;
    }
    if (reader_open(data, &ro, &r, why, sizeof why) != 0) {
        fprintf(stderr, "tltrain predict: %s\n", why);
        goto out;
    }
    if (model_scratch_create(1024, &sc) != 0 || model_scratch_fit(sc, m, 1024) < 0 ||
        metrics_create(&met) != 0) {
        fprintf(stderr, "tltrain predict: out of memory\n");
        goto out;
    }
    /* A regular --out (or a new one) is written under a temporary name and
     * renamed at the end: a run that fails leaves no partial file that looks
     * like a result.  Anything else (/dev/null, a FIFO) is written in place:
     * a rename would replace the device with a file. */
    struct stat ost;
    bool in_place = out_path && stat(out_path, &ost) == 0 && !S_ISREG(ost.st_mode);
    if (out_path && !in_place)
        snprintf(tmp_path, sizeof tmp_path, "%s.tmp-%ld", out_path, (long)getpid());
    if (out_path && !(out = fopen(in_place ? out_path : tmp_path, "w"))) {
        fprintf(stderr, "tltrain predict: %s: %s\n", out_path, strerror(errno));
        out = stdout;
        tmp_path[0] = '\0';
        goto out;
    }
    reader_sample_t s;
    int got;
    uint64_t n = 0, nan_lines = 0;
    while ((got = reader_next(r, &s)) == 1) {
        for (; nan_lines < reader_skipped(r); nan_lines++)
            fputs("nan\n", out); /* --skip-bad: a malformed line's place */
        codec_block_t shared = {s.ids, s.values, s.n}, item = {NULL, NULL, 0};
        float p;
        int e = model_score(m, &shared, &item, 1, &p, sc);
        if (e == -E2BIG) { /* a longer sample than any before: grow once */
            if (model_scratch_fit(sc, m, s.n) < 0) {
                fprintf(stderr, "tltrain predict: out of memory for %u features\n", s.n);
                goto out;
            }
            e = model_score(m, &shared, &item, 1, &p, sc);
        }
        if (e != 0) {
            fprintf(stderr, "tltrain predict: %s line %llu: scoring failed: %s\n", data,
                    (unsigned long long)reader_line(r), strerror(-e));
            goto out;
        }
        fprintf(out, "%.9g\n", (double)p);
        if (metrics_add(met, p, s.label) != 0) {
            fprintf(stderr, "tltrain predict: out of memory\n");
            goto out;
        }
        n++;
    }
    if (got < 0) {
        fprintf(stderr, "tltrain predict: %s\n", reader_error(r));
        goto out;
    }
    for (; nan_lines < reader_skipped(r); nan_lines++)
        fputs("nan\n", out);
    if (fflush(out) != 0 || ferror(out)) {
        fprintf(stderr, "tltrain predict: writing %s: %s\n", out_path ? out_path : "stdout",
                strerror(errno));
        goto out;
    }
    if (reader_skipped(r))
        fprintf(stderr, "tltrain predict: skipped %llu malformed lines\n",
                (unsigned long long)reader_skipped(r));
    fprintf(stderr, "tltrain predict: %llu samples scored with %s (%s)\n", (unsigned long long)n,
            dir, store_model_kind_name(model_meta(m)->model_kind));
    if (json) {
        metrics_result_t res;
        metrics_compute(met, &res);
        printf("{\"samples\":%llu,", (unsigned long long)n);
        json_metric("logloss", res.logloss, ",");
        json_metric("auc", res.auc, ",");
        json_metric("calibration", res.calibration, "}\n");
    }
    rc = 0;
out:
    if (out != stdout && fclose(out) != 0 && rc == 0) {
        fprintf(stderr, "tltrain predict: closing %s: %s\n", out_path, strerror(errno));
        rc = 1;
    }
    if (tmp_path[0] && rc == 0 && rename(tmp_path, out_path) != 0) {
        fprintf(stderr, "tltrain predict: %s: %s\n", out_path, strerror(errno));
        rc = 1;
    }
    if (tmp_path[0] && rc != 0)
        (void)unlink(tmp_path);
    metrics_destroy(met);
    reader_close(r);
    model_scratch_destroy(sc);
    model_destroy(m);
    return rc;
}
