/*
 * tltrain_fit.c — tltrain's epoch driver (tltrain_fit.h): fixed epochs, or
 * early stopping on a validation slice followed by a retrain on all of the
 * training data.
 *
 * Why a retrain rather than keeping the search's model: the search learned
 * 90% of the lines; the final model must learn them all (on the small sets
 * users start with, a tenth of the data is worth more than the epochs
 * saved).  Why the split goes to files rather than a reader that filters
 * lines by hash: every later pass is then a plain reader over a file (the
 * per-epoch training function, possibly threaded, takes a reader_t and
 * knows nothing of slices), and the split costs one sequential pass.
 *
 * The split streams bytes through stdio; it never holds more than
 * TLTRAIN_FIT_HASH_BYTES of a line (the bytes that choose its side), so a
 * line of any length costs no memory.  Parse errors are found before the
 * split, by the caller's first pass over the original file, so messages
 * name the user's file and line, not a temporary part.
 *
 *   train file ──split by XXH3(line) % 1000 < 100──┬─> part T (unlinked) ─> search epochs
 *                                                 └─> part V (unlinked) ─> validation logloss
 *   best epoch E ─> fresh trainer, E epochs over the train file ─> test, export
 *
 * A Criteo header (the first non-blank line, when it does not start with a
 * digit or a sign) goes to both parts, so each part reads as its source.
 *
 * THREAD SAFETY: one thread drives it (tltrain's main).
 */
#define _GNU_SOURCE
#include "tltrain_fit.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define SPLIT_SEED 0x746c747261696eULL /* "tltrain": fixed, so a file always splits alike */

enum {
    SIDE_TRAIN = 0,
    SIDE_VALID = 1,
    SIDE_BOTH = 2
};

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the split ------------------------------------------------------------------ */

/* An unlinked read-write file under $TMPDIR (or /tmp): fd, or -errno. */
__attribute__((cold)) static int open_unlinked(void)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
        dir = "/tmp";
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0)
        return fd;
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
        return -errno;
    char path[PATH_MAX]; /* a file system without O_TMPFILE: create, then unlink */
    if ((size_t)snprintf(path, sizeof path, "%s/tltrain-split-XXXXXX", dir) >= sizeof path)
        return -ENAMETOOLONG;
    fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0)
        return -errno;
    unlink(path);
    return fd;
}

/* The side of a line whose first n bytes are head; ended: head holds the
 * whole line, its '\n' included, which is not hashed (nor a '\r' before
 * it), so that the last line of a file splits alike with or without one. */
static int line_side(const char *head, size_t n, int ended)
{
    if (ended && n && head[n - 1] == '\n')
        n--;
    if (ended && n && head[n - 1] == '\r')
        n--;
    uint64_t h = XXH3_64bits_withSeed(head, n, SPLIT_SEED);
    return h % 1000 < TLTRAIN_FIT_HOLDOUT_PERMILLE ? SIDE_VALID : SIDE_TRAIN;
}

static int is_blank(const char *head, size_t n)
{
    return (n == 1 && head[0] == '\n') || (n == 2 && head[0] == '\r' && head[1] == '\n');
}

static void emit(FILE *out[2], int side, const char *p, size_t n)
{
    if (side != SIDE_VALID)
        fwrite(p, 1, n, out[0]);
    if (side != SIDE_TRAIN)
        fwrite(p, 1, n, out[1]);
}

/* Decides the side of the line in head (n bytes; ended: it is whole), writes
 * head there and counts it.  *first: no non-blank line seen yet. */
static int place(FILE *out[2], const char *head, size_t n, int ended, int criteo, int *first,
                 uint64_t rows[2])
{
    int side;
    if (is_blank(head, n)) {
        side = SIDE_TRAIN;
    } else if (*first && criteo && (unsigned)(head[0] - '0') > 9 && head[0] != '-' &&
               head[0] != '+') {
        side = SIDE_BOTH; /* a header: each part needs it */
        *first = 0;
    } else {
        side = line_side(head, n, ended);
        rows[side]++;
        *first = 0;
    }
    emit(out, side, head, n);
    return side;
}

/* Splits the lines of in into out[0] (train) and out[1] (validation),
 * counting the non-blank, non-header lines of each in rows.  0, or -EIO (a
 * read error; the outputs' errors are the caller's to check). */
static int split_stream(FILE *in, int criteo, FILE *out[2], uint64_t rows[2])
{
    char head[TLTRAIN_FIT_HASH_BYTES];
    size_t n = 0;
    int side = -1, first = 1, c; /* side -1: the line's side is not chosen yet */
    while ((c = getc_unlocked(in)) != EOF) {
        if (side >= 0) { /* past the head of a long line: stream it */
            if (side != SIDE_VALID)
                putc_unlocked(c, out[0]);
            if (side != SIDE_TRAIN)
                putc_unlocked(c, out[1]);
            if (c == '\n')
                side = -1;
            continue;
        }
        head[n++] = (char)c;
        if (c == '\n' || n == sizeof head) {
            side = place(out, head, n, c == '\n', criteo, &first, rows);
            n = 0;
            if (c == '\n')
                side = -1;
        }
    }
    if (n)
        place(out, head, n, 1, criteo, &first, rows); /* a last line without '\n' */
    return ferror(in) ? -EIO : 0;
}

/* split_stream over the file at path.  0, or -errno with a sentence in
 * err. */
__attribute__((cold)) static int split_file(const char *path, int criteo, FILE *out[2],
                                            uint64_t rows[2], char *err, size_t err_len)
{
    FILE *in = fopen(path, "re");
    if (!in) {
        int e = errno;
        snprintf(err, err_len, "%s: %s", path, strerror(e));
        return -e;
    }
    unsigned char bom[3]; /* a UTF-8 byte-order mark opens the file, not its first line */
    if (fread(bom, 1, 3, in) != 3 || memcmp(bom, "\xEF\xBB\xBF", 3) != 0)
        rewind(in);
    int rc = split_stream(in, criteo, out, rows);
    if (rc != 0)
        snprintf(err, err_len, "%s: read error while holding out the validation slice", path);
    fclose(in);
    for (int i = 0; rc == 0 && i < 2; i++)
        if (fflush(out[i]) != 0 || ferror(out[i])) {
            rc = errno ? -errno : -EIO;
            snprintf(err, err_len, "cannot write the held-out parts of %s under %s: %s", path,
                     getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
                     strerror(-rc));
        }
    return rc;
}

/* The parts of the training file as two readers (train, validation) over
 * unlinked files.  0, or 1 (printed). */
__attribute__((cold)) static int hold_out(const tltrain_fit_t *f, reader_t *part[2],
                                          uint64_t rows[2])
{
    FILE *out[2] = {NULL, NULL};
    char err[512];
    int status = 1;
    for (int i = 0; i < 2; i++) {
        int fd = open_unlinked();
        if (fd < 0) {
            fprintf(stderr, "tltrain: auto-stop: cannot create a temporary file under %s: %s\n",
                    getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
                    strerror(-fd));
            goto out;
        }
        if (!(out[i] = fdopen(fd, "w+"))) {
            close(fd);
            fprintf(stderr, "tltrain: auto-stop: out of memory\n");
            goto out;
        }
    }
    if (split_file(f->train_path, f->ro.format == READER_CRITEO, out, rows, err, sizeof err) != 0) {
        fprintf(stderr, "tltrain: auto-stop: %s\n", err);
        goto out;
    }
    for (int i = 0; i < 2; i++) {
        char proc[64]; /* the unlinked file's name while our descriptor lives */
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fileno(out[i]));
        if (reader_open(proc, &f->ro, &part[i], err, sizeof err) != 0) {
            fprintf(stderr, "tltrain: auto-stop: %s\n", err);
            goto out;
        }
    }
    status = 0;
out:
    for (int i = 0; i < 2; i++)
        if (out[i])
            fclose(out[i]); /* the readers hold their own descriptors */
    if (status != 0)
        for (int i = 0; i < 2; i++) {
            reader_close(part[i]);
            part[i] = NULL;
        }
    return status;
}

/* Positive and negative samples of r (read to its end).  0, or 1 (printed). */
static int count_classes(reader_t *r, uint64_t cls[2])
{
    reader_sample_t s;
    int rc;
    cls[0] = cls[1] = 0;
    while ((rc = reader_next(r, &s)) == 1)
        cls[s.label > 0.5f]++;
    if (rc < 0) {
        fprintf(stderr, "tltrain: auto-stop: %s\n", reader_error(r));
        return 1;
    }
    return 0;
}

/* ---- epochs --------------------------------------------------------------------- */

/* The stop for a file that gave no sample (empty, blank lines, a header only,
 * or every line skipped as bad): a model of nothing, or metrics of nothing,
 * is no result.  Returns 2 (printed). */
__attribute__((cold)) static int no_samples(const char *what, const char *path,
                                            const reader_t *r)
{
    fprintf(stderr, "tltrain: %s %s holds no samples", what, path);
    if (reader_skipped(r))
        fprintf(stderr, " (%llu malformed lines skipped by --skip-bad)",
                (unsigned long long)reader_skipped(r));
    fprintf(stderr, "\n");
    return 2;
}

/* One pass of r into t, then (when score) scores score: one stdout line
 * "<label> <ep>: train ... | <score_name> ...", one stderr timing line.  0,
 * 1 (printed) or 2 (a file without samples: printed). */
static int one_epoch(const tltrain_fit_t *f, reader_t *r, train_t *t, const char *label, long ep,
                     reader_t *score, const char *score_name, metrics_result_t *res)
{
    double loss, busy, t0 = now_sec();
    uint64_t rows, updates;
    if (f->epoch(r, t, &loss, &rows, &updates, &busy) != 0)
        return 1;
    if (rows == 0) /* r: the training file or the auto-stop search's part of it */
        return no_samples(r == f->train ? "--train" : "the part of --train kept for training,",
                          f->train_path, r);
    double wall = now_sec() - t0;
    if (ep == 1 && reader_header_line(r)) /* criteo: a first line taken as a header, said once */
        fprintf(stderr, "tltrain: %s:%llu read as a header, not a sample\n", reader_name(r),
                (unsigned long long)reader_header_line(r));
    printf("%s %ld: train rows %llu progressive logloss %.6f", label, ep, (unsigned long long)rows,
           loss);
    if (reader_skipped(r))
        printf(" skipped %llu", (unsigned long long)reader_skipped(r));
    if (score) {
        if (f->eval(score, t, res) != 0)
            return 1;
        if (res->n == 0) /* --validation and the held-out slice are checked before */
            return no_samples(score == f->test ? "--test" : score_name, reader_name(score),
                              score);
        printf(" | %s rows %zu logloss %.6f auc %.6f calibration %.4f", score_name, res->n,
               res->logloss, res->auc, res->calibration);
    }
    printf("\n");
    fflush(stdout);
    fprintf(stderr,
            "tltrain: %s %ld: %.3f s wall, %.3f s in updates, %.1f M feature updates/s "
            "(%.1f M/s with reading)\n",
            label, ep, wall, busy, busy > 0 ? updates / busy / 1e6 : 0.0,
            wall > 0 ? updates / wall / 1e6 : 0.0);
    return 0;
}

/* n epochs of t over the whole training file, the test file scored after
 * each: the final model.  0, or one_epoch's error. */
static int final_epochs(tltrain_fit_t *f, train_t *t, long n)
{
    for (long ep = 1; ep <= n; ep++) {
        int rc = one_epoch(f, f->train, t, "epoch", ep, f->test, "test", &f->test_res);
        if (rc != 0)
            return rc;
    }
    f->chosen = n;
    return 0;
}

/* A fresh trainer in place of *model, trained for n epochs on the whole
 * training file.  0 or 1 (printed). */
static int retrain(tltrain_fit_t *f, train_t **model, long n)
{
    char why[256];
    train_t *t;
    if (train_create(f->opt, &t, why, sizeof why) != 0) {
        fprintf(stderr, "tltrain: auto-stop: cannot create the final trainer: %s\n", why);
        return 1;
    }
    train_destroy(*model);
    *model = t;
    fprintf(stderr, "tltrain: auto-stop: training a fresh model on all of %s for %ld epoch%s\n",
            f->train_path, n, n == 1 ? "" : "s");
    return final_epochs(f, t, n);
}

/* The given validation file: a reader, checked by one full parse that counts
 * its non-clicks and clicks into cls.  0, 1 (cannot open: printed) or 2
 * (unparsable or empty: printed). */
__attribute__((cold)) static int open_validation(const tltrain_fit_t *f, reader_t **out,
                                                 uint64_t cls[2])
{
    char err[512];
    reader_sample_t s;
    uint64_t n = 0;
    int rc;
    if (reader_open(f->validation_path, &f->ro, out, err, sizeof err) != 0) {
        fprintf(stderr, "tltrain: --validation: %s\n", err);
        return 1;
    }
    cls[0] = cls[1] = 0;
    while ((rc = reader_next(*out, &s)) == 1) {
        cls[s.label > 0.5f]++;
        n++;
    }
    if (rc < 0) {
        fprintf(stderr, "tltrain: --validation: %s\n", reader_error(*out));
        return rc == -EINVAL || rc == -E2BIG ? 2 : 1;
    }
    if (n == 0) {
        fprintf(stderr, "tltrain: --validation: %s holds no samples\n", f->validation_path);
        return 2;
    }
    return 0;
}

int tltrain_fit_run(tltrain_fit_t *f, train_t **model)
{
    reader_t *part[2] = {NULL, NULL}, *val = NULL, *search = f->train;
    int status = 1;
    f->chosen = 0;
    f->validation_logloss = NAN;
    f->test_res = (metrics_result_t){.logloss = NAN, .auc = NAN, .calibration = NAN};
    if (!f->auto_stop)
        return final_epochs(f, *model, f->epochs);
    if (f->validation_path) {
        uint64_t cls[2];
        if ((status = open_validation(f, &val, cls)) != 0)
            goto out;
        status = 1;
        if (cls[0] < TLTRAIN_FIT_MIN_CLASS || cls[1] < TLTRAIN_FIT_MIN_CLASS)
            fprintf(stderr,
                    "tltrain: auto-stop: note: %s holds %llu clicks and %llu "
                    "non-clicks; epochs ranked on fewer than %d of either are noise\n",
                    f->validation_path, (unsigned long long)cls[1], (unsigned long long)cls[0],
                    TLTRAIN_FIT_MIN_CLASS);
    } else {
        uint64_t rows[2] = {0, 0}, cls[2] = {0, 0};
        if (hold_out(f, part, rows) != 0 || count_classes(part[1], cls) != 0)
            goto out;
        fprintf(stderr,
                "tltrain: auto-stop: %llu of %llu lines of %s held out for validation (%llu "
                "clicks, %llu non-clicks)\n",
                (unsigned long long)rows[1], (unsigned long long)(rows[0] + rows[1]), f->train_path,
                (unsigned long long)cls[1], (unsigned long long)cls[0]);
        if (rows[0] == 0 || cls[0] < TLTRAIN_FIT_MIN_CLASS || cls[1] < TLTRAIN_FIT_MIN_CLASS) {
            long n = f->fallback_epochs;
            fprintf(stderr,
                    "tltrain: auto-stop: off: the held-out slice has fewer than %d clicks or "
                    "non-clicks, too few to rank epochs (give more data or --validation FILE): "
                    "training the fixed %ld epoch%s\n",
                    TLTRAIN_FIT_MIN_CLASS, n, n == 1 ? "" : "s");
            status = final_epochs(f, *model, n);
            goto out;
        }
        search = part[0];
        val = part[1];
    }
    double best = INFINITY;
    long best_ep = 0, since = 0, ep;
    for (ep = 1; ep <= f->epochs; ep++) {
        metrics_result_t res;
        int rc = one_epoch(f, search, *model, "auto-stop epoch", ep, val, "validation", &res);
        if (rc != 0) {
            status = rc;
            goto out;
        }
        if (isfinite(res.logloss) &&
            (best_ep == 0 || res.logloss < best - TLTRAIN_FIT_MIN_DELTA * best)) {
            best = res.logloss;
            best_ep = ep;
            since = 0;
        } else if (++since >= f->patience) {
            ep++;
            break;
        }
    }
    long last = ep - 1;
    if (best_ep == 0) {
        fprintf(stderr, "tltrain: auto-stop: the validation logloss was never a number (the "
                        "model diverged?)\n");
        goto out;
    }
    f->validation_logloss = best;
    fprintf(stderr, "tltrain: auto-stop: best epoch %ld of %ld (validation logloss %.6f)%s\n",
            best_ep, last, best,
            last == f->epochs && since < f->patience
                ? "; the maximum was reached (--epochs raises it)"
                : "");
    if (val == part[1] || best_ep < last) { /* held out: the final model learns every line */
        status = retrain(f, model, best_ep);
        goto out;
    }
    /* --validation and the best epoch is the last: the search's model is the final one */
    f->chosen = best_ep;
    printf("epoch %ld: the auto-stop search's model", best_ep);
    if (f->test) {
        if (f->eval(f->test, *model, &f->test_res) != 0)
            goto out;
        printf(" | test rows %zu logloss %.6f auc %.6f calibration %.4f", f->test_res.n,
               f->test_res.logloss, f->test_res.auc, f->test_res.calibration);
    }
    printf("\n");
    status = 0;
out:
    if (val != part[1])
        reader_close(val);
    reader_close(part[0]);
    reader_close(part[1]);
    return status;
}
