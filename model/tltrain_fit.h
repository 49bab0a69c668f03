/*
 * tltrain_fit.h — tltrain's epoch driver (internal to the tltrain program):
 * how many passes a model trains, fixed or chosen by early stopping.
 *
 * AUTO-STOP (the default), as LIBFFM's --auto-stop and xLearn's early
 * stopping: after each epoch the model is scored on a validation slice
 * (logloss); the run stops when TLTRAIN_FIT_PATIENCE epochs in a row (or
 * f->patience) have not lowered the best validation logloss by more than
 * TLTRAIN_FIT_MIN_DELTA of it, or at f->epochs (the maximum).  The best
 * epoch E is the last one that did.
 *
 *   no validation file   the slice is held out of the training file: each
 *                        line goes to the validation part when a hash of its
 *                        bytes (XXH3, seeded; the first TLTRAIN_FIT_HASH_BYTES
 *                        of a longer line) falls in the lowest
 *                        TLTRAIN_FIT_HOLDOUT_PERMILLE / 1000 of the range:
 *                        deterministic, independent of line order, and equal
 *                        lines land on the same side.  One pass splits the
 *                        file into two unlinked temporary files under $TMPDIR
 *                        (/tmp without it), removed by the kernel when the
 *                        driver closes them, even on a crash.  The search
 *                        trains on the train part; then a FRESH trainer
 *                        learns ALL of the training file for E epochs: the
 *                        slice does not cost the final model its data.
 *   f->validation_path   the slice is that file; the search trains on all of
 *                        the training file, and the best epoch's model is
 *                        kept by retraining a fresh trainer for E epochs (the
 *                        trainers are deterministic for a given sample order,
 *                        so that is the search's epoch-E model; no retrain
 *                        when E is the last epoch the search ran).
 *
 * A held-out slice with fewer than TLTRAIN_FIT_MIN_CLASS clicks or
 * non-clicks turns auto-stop off: f->fallback_epochs are trained (tltrain:
 * --epochs N when given, else the kind's fixed default), saying so on
 * stderr.  Why: the logloss of
 * a slice with a few dozen clicks moves more from one epoch to the next by
 * chance than by learning (on a 200-line file, a 20-line slice chose 78 LR
 * epochs where 3 are best on the test file), and a model that stops on
 * noise is worse than one that trains the tuned defaults.  A given
 * --validation file is used whatever it holds (a note says when it is
 * that small).
 *
 * OUTPUT: stdout gets one line per search epoch ("auto-stop epoch e: train
 * ... | validation ...") and one per final epoch ("epoch e: train ... |
 * test ..."); stderr the chosen epoch ("tltrain: auto-stop: best epoch E of
 * M (validation logloss X)") and timings.
 *
 * THREAD SAFETY: single-threaded driver; the epoch function it is given may
 * use threads of its own.
 */
#ifndef TL_MODEL_TLTRAIN_FIT_H
#define TL_MODEL_TLTRAIN_FIT_H

#include "metrics.h"
#include "reader.h"
#include "train.h"

#include <stdbool.h>
#include <stdint.h>

#define TLTRAIN_FIT_MAX_EPOCHS 100       /* auto-stop's maximum unless --epochs */
#define TLTRAIN_FIT_PATIENCE 2           /* epochs without improvement before stopping */
#define TLTRAIN_FIT_MAX_PATIENCE 1000    /* --patience accepts 1..this */
#define TLTRAIN_FIT_MIN_DELTA 1e-4       /* relative: an improvement lowers the best by more */
#define TLTRAIN_FIT_HOLDOUT_PERMILLE 100 /* the held-out slice: 10% of the lines */
#define TLTRAIN_FIT_HASH_BYTES 4096      /* a line's bytes that choose its side */
#define TLTRAIN_FIT_MIN_CLASS 100 /* a held-out slice needs this many clicks and non-clicks */

/* One pass of training over r into t (tltrain.c's train_epoch): the mean
 * progressive logloss, rows, feature updates and seconds spent in updates.
 * 0, or 1 with the error printed. */
typedef int (*tltrain_epoch_fn)(reader_t *r, train_t *t, double *loss, uint64_t *rows,
                                uint64_t *updates, double *busy);
/* Scores every sample of r with t: logloss, AUC, calibration.  0, or 1 with
 * the error printed. */
typedef int (*tltrain_eval_fn)(reader_t *r, train_t *t, metrics_result_t *res);

typedef struct tltrain_fit {
    /* in: every field but the results */
    const train_options_t *opt;  /* the trainer's options (fields set): for fresh trainers */
    const char *train_path;      /* the training file (split when holding out) */
    reader_t *train;             /* a reader over train_path (the caller's) */
    reader_t *test;              /* NULL or the test file (the caller's): scored per final epoch */
    reader_options_t ro;         /* how to read the parts and the validation file */
    bool auto_stop;              /* false: exactly `epochs` passes, nothing held out */
    const char *validation_path; /* auto-stop: NULL = hold out a slice of train_path */
    long epochs;                 /* fixed: the count; auto-stop: the maximum (>= 1) */
    long fallback_epochs;        /* auto-stop without a usable slice: this many (>= 1;
                                  * tltrain: --epochs when given, else the kind's default) */
    long patience;               /* auto-stop: 1..TLTRAIN_FIT_MAX_PATIENCE */
    tltrain_epoch_fn epoch;      /* tltrain's per-epoch training */
    tltrain_eval_fn eval;        /* tltrain's evaluation */
    /* out */
    long chosen;               /* passes the final model made over its data */
    double validation_logloss; /* at the chosen epoch; NAN when none */
    metrics_result_t test_res; /* after the last final epoch; NANs without a test file */
} tltrain_fit_t;

/* Runs the training f describes.  *model is a fresh trainer made from
 * f->opt, which the driver takes over; on return *model is the final
 * trainer (possibly another one: the first is then destroyed), which the
 * caller owns (train_destroy), also on failure (NULL then possible).
 * Returns 0; 1 on a runtime failure (I/O, bad training data, no memory;
 * printed); 2 on a bad --validation file (unparsable or without samples)
 * or a training or test file without samples (printed).  Blocks for the
 * whole training. */
int tltrain_fit_run(tltrain_fit_t *f, train_t **model);

#endif /* TL_MODEL_TLTRAIN_FIT_H */
