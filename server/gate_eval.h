/*
 * gate_eval.h — the validation gate's labeled evaluation file (internal to
 * server/): rows of a libsvm or libffm file held in memory, scored by the
 * candidate and the active version, and the logloss comparison that
 * refuses a candidate that predicts the labels worse.
 *
 *   start (main thread)                    gate_check (loader thread)
 *   -------------------                    --------------------------
 *   gate_eval_start(cfg)                   gate_eval_run(cfg, cand, active, &r)
 *     --gate-eval-file read once,            the file changed (stat)? read it again;
 *     at most --gate-eval-max-rows           a bad new file: keep the rows held and warn
 *     rows; a bad file: -EINVAL and          logloss of cand (and active) over the rows
 *     the server does not start              r.refused = cand > active + bound
 *
 * A row is scored as tltrain predict scores it: a request whose shared block
 * is the row's features and whose one item is empty, so the logloss here is
 * the one `tltrain predict --json` prints for the same snapshot and file.
 * p is clipped to [1e-15, 1 - 1e-15] before the logarithm.
 *
 * FORMAT
 *   Told from the first line with a feature: "label idx:val ..." is libsvm,
 *   "label field:idx:val ..." libffm (model/reader.h, ids as the trainer
 *   builds them).  The rest of the file must be in that format: a line that
 *   is not stops the load with the file and the line named.
 *
 * ERRORS
 *   Untrusted input: a missing or unreadable file, a line the reader
 *   refuses (bad label, bad number, an index over 2^56 - 2), a row with
 *   more than GATE_EVAL_MAX_ROW_FEATURES features, more features in all
 *   than GATE_EVAL_FEATURES_PER_ROW x max_rows, or no row at all: the load
 *   fails with a gate_eval_error_t naming the file, the line and what was
 *   wrong.  Rows past max_rows are not read (logged, not an error).
 *
 * THREAD SAFETY
 *   A gate_eval_t is immutable once loaded: any number of threads may score
 *   it.  The configured file (gate_eval_start / _run / _stop) is guarded by
 *   the module's own lock; _run is meant for the loader thread, one call at
 *   a time (it blocks while it scores).
 */
#ifndef TL_SERVER_GATE_EVAL_H
#define TL_SERVER_GATE_EVAL_H

#include "model/model.h"
#include "server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Features in one row: a request could hold no more (codec.h). */
#define GATE_EVAL_MAX_ROW_FEATURES 1048576u
/* The file's features in all, at most this many per row on average:
 * with max_rows this bounds the memory (12 bytes a feature). */
#define GATE_EVAL_FEATURES_PER_ROW 256u
/* Probabilities are clipped to [GATE_EVAL_CLIP, 1 - GATE_EVAL_CLIP]. */
#define GATE_EVAL_CLIP 1e-15

typedef struct gate_eval gate_eval_t; /* opaque: the rows of one file */

typedef enum gate_eval_errc {
    GATE_EVAL_OK = 0,
    GATE_EVAL_IO,      /* cannot open or read the file */
    GATE_EVAL_FORMAT,  /* neither libsvm nor libffm, or a line the reader refuses */
    GATE_EVAL_EMPTY,   /* no row */
    GATE_EVAL_TOO_BIG, /* a row or the whole over the feature bounds above */
    GATE_EVAL_NOMEM,
} gate_eval_errc_t;

typedef struct gate_eval_error {
    gate_eval_errc_t code;
    uint64_t line;  /* 1-based line of the problem, 0 when none */
    char msg[1280]; /* a sentence naming the file, the line and what was wrong */
} gate_eval_error_t;

/* ---- one file's rows (pure: no global state) ------------------------------ */

/* Reads up to max_rows (>= 1) rows of the libsvm or libffm file at path
 * into memory.  Returns 0 with *out (the caller frees it with
 * gate_eval_free), -EINVAL (bad input: err says what and where), -errno
 * (I/O), or -ENOMEM; err is filled on every failure.  Blocks (read(2)). */
int gate_eval_load(const char *path, uint32_t max_rows, gate_eval_t **out, gate_eval_error_t *err);

/* The same over a memory buffer the caller keeps alive during the call;
 * name stands for the file in messages.  For tests and the fuzz target. */
int gate_eval_load_mem(const void *data, size_t len, const char *name, uint32_t max_rows,
                       gate_eval_t **out, gate_eval_error_t *err);

void gate_eval_free(gate_eval_t *e); /* NULL: nothing */

uint32_t gate_eval_rows(const gate_eval_t *e);
bool gate_eval_truncated(const gate_eval_t *e);     /* rows past max_rows were left unread */
const char *gate_eval_name(const gate_eval_t *e);   /* the path (or name) it was read from */
const char *gate_eval_format(const gate_eval_t *e); /* "libsvm" or "libffm" */

/* Mean logloss of model m over e's rows (each scored as its own request,
 * see above).  Returns 0 with *logloss, -ENOMEM (no scratch) or the
 * negative errno model_score gave.  Blocks for the scoring; never changes e. */
int gate_eval_logloss(const gate_eval_t *e, const model_t *m, double *logloss);

/* Logloss of one prediction p of label y (0 or 1), p clipped as above. */
double gate_eval_row_loss(float p, float label);

/* The refusal rule: true when cand is worse than active by more than bound
 * (cand > active + bound).  A NaN on either side refuses. */
bool gate_eval_worse(double cand, double active, double bound);

/* ---- the configured file (--gate-eval-file) ------------------------------- */

/* Reads cfg->gate_eval_file (nothing when it is "" or the gate is off) and
 * keeps it for gate_eval_run.  Returns 0, or a negative errno after logging
 * an error that names the file and line: the caller must not start serving.
 * Main thread, before the loader starts. */
int gate_eval_start(const server_config_t *cfg);

/* What gate_eval_run found (ran false: no file configured). */
typedef struct gate_eval_result {
    bool ran;                 /* the file was scored */
    bool have_active;         /* an active version was scored too */
    bool refused;             /* candidate worse than active by more than the bound */
    bool stale;               /* the file changed and could not be read: the rows held were used */
    uint32_t rows;            /* rows scored by each version */
    double logloss_candidate; /* mean logloss of the candidate */
    double logloss_active;    /* of the active version; NAN when have_active is false */
    double bound;             /* --gate-max-logloss-increase */
    double seconds;           /* reading (when changed) and scoring */
    char file[1024];          /* the file's path, for messages */
} gate_eval_result_t;

/* Scores the configured rows with cand and, when not NULL, active (same
 * model name: the caller decides), re-reading the file first when its
 * size, mtime or inode changed.  Returns 0 (r filled; r->ran false when no
 * file is configured) or a negative errno when it could not score (-ENOMEM,
 * a model_score failure): the caller refuses the candidate.  Blocks.
 * Loader thread. */
int gate_eval_run(const server_config_t *cfg, const model_t *cand, const model_t *active,
                  gate_eval_result_t *r);

/* Frees the rows held; after the loader has stopped.  Safe to call twice. */
void gate_eval_stop(void);

#endif /* TL_SERVER_GATE_EVAL_H */
