/*
 * gate_eval.c — the gate's labeled evaluation file (gate_eval.h): a libsvm or
 * libffm file read once into memory and scored by every candidate version
 * and the active one, so that a candidate that predicts known labels worse
 * than what is serving is refused before it goes live.
 *
 * ROWS IN MEMORY
 *   The file is read through model/reader.h (the trainer's parser: the ids
 *   are the ones the trainer built the model with) into four arrays:
 *
 *     label[rows]      float, 0 or 1
 *     start[rows + 1]  uint32, row i's features are [start[i], start[i + 1])
 *     id[features]     uint64
 *     value[features]  float
 *
 *   Bounded by --gate-eval-max-rows and GATE_EVAL_FEATURES_PER_ROW per row
 *   on average (whose product fits start's uint32; the config caps the
 *   rows); the arrays grow by doubling with checked allocations.
 *
 * SCORING
 *   One row at a time, as a request whose shared block is the row and whose
 *   one item is empty: tltrain predict's call, so the figures here are its
 *   figures.  Scoring each row apart rather than as the items of one request
 *   keeps that equality for every model kind (instance normalisation, FFM
 *   pairs across the shared block) at a cost of a call per row; the cost is
 *   in the log and the verdict (seconds).
 *
 * CHANGES
 *   gate_eval_run stats the file before it scores: another inode, size or
 *   mtime and it is read again.  A changed file that no longer reads is
 *   logged and the rows held are used (the verdict says "stale"): a file
 *   being rewritten must neither let a candidate through unchecked nor stop
 *   every version.
 *
 * THREAD SAFETY
 *   E.lock guards the configured rows (E.rows) and their file identity;
 *   gate_eval_run holds it while it scores (one loader thread; the admin
 *   thread never takes it).  A gate_eval_t is read-only after its load.
 */
#include "gate_eval.h"

#include "log.h"
#include "model/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The format is told from the first line with a feature within this many
 * leading bytes of the file. */
#define SNIFF_BYTES (1u << 20)

struct gate_eval {
    uint32_t rows;
    uint32_t max_row_features; /* the longest row: the scratch's size */
    bool truncated;
    reader_format_t format;
    float *label;
    uint32_t *start;
    uint64_t *id;
    float *value;
    uint64_t features, cap_features;
    uint32_t cap_rows;
    char name[1024];
};

static struct {
    pthread_mutex_t lock;
    gate_eval_t *rows; /* NULL: no file configured */
    struct stat st;    /* the file as it was when rows were read */
} E = {.lock = PTHREAD_MUTEX_INITIALIZER};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int set_error(gate_eval_error_t *err, gate_eval_errc_t code, uint64_t line, int rc,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int set_error(gate_eval_error_t *err, gate_eval_errc_t code, uint64_t line, int rc,
                     const char *fmt, ...)
{
    err->code = code;
    err->line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return rc;
}

/* ---- the format ---------------------------------------------------------- */

/* libsvm or libffm (model/reader.h's sniff, criteo not allowed): 0, or
 * -EINVAL naming the line. */
static int sniff(const char *buf, size_t len, const char *name, reader_format_t *out,
                 gate_eval_error_t *err)
{
    uint64_t line;
    const char *bad;
    int shown;
    if (reader_sniff_format(buf, len, true, false, out, &line, &bad, &shown) == 0)
        return 0;
    return set_error(err, GATE_EVAL_FORMAT, line, -EINVAL,
                     "%s:%llu: the first feature '%.*s' is neither idx:val (libsvm) "
                     "nor field:idx:val (libffm)",
                     name, (unsigned long long)line, shown, bad);
}

/* ---- loading ------------------------------------------------------------- */

void gate_eval_free(gate_eval_t *e)
{
    if (!e)
        return;
    free(e->label);
    free(e->start);
    free(e->id);
    free(e->value);
    free(e);
}

static int grow_rows(gate_eval_t *e, uint32_t max_rows)
{
    uint64_t cap = e->cap_rows ? (uint64_t)e->cap_rows * 2 : 1024;
    if (cap > max_rows)
        cap = max_rows;
    float *l = realloc(e->label, cap * sizeof *l);
    if (!l)
        return -ENOMEM;
    e->label = l;
    uint32_t *s = realloc(e->start, (cap + 1) * sizeof *s);
    if (!s)
        return -ENOMEM;
    e->start = s;
    e->cap_rows = (uint32_t)cap;
    return 0;
}

static int grow_features(gate_eval_t *e, uint64_t need, uint64_t limit)
{
    uint64_t cap = e->cap_features ? e->cap_features : 16384;
    while (cap < need)
        cap *= 2;
    if (cap > limit)
        cap = limit;
    uint64_t *id = realloc(e->id, cap * sizeof *id);
    if (!id)
        return -ENOMEM;
    e->id = id;
    float *v = realloc(e->value, cap * sizeof *v);
    if (!v)
        return -ENOMEM;
    e->value = v;
    e->cap_features = cap;
    return 0;
}

/* Reads every row of r (up to max_rows) into e.  0 or -errno with err. */
static int read_rows(reader_t *r, gate_eval_t *e, uint32_t max_rows, gate_eval_error_t *err)
{
    const uint64_t limit = (uint64_t)max_rows * GATE_EVAL_FEATURES_PER_ROW;
    reader_sample_t s;
    int got;
    while ((got = reader_next(r, &s)) == 1) {
        uint64_t line = reader_line(r);
        if (e->rows == max_rows) {
            e->truncated = true;
            break;
        }
        if (s.n > GATE_EVAL_MAX_ROW_FEATURES)
            return set_error(err, GATE_EVAL_TOO_BIG, line, -EINVAL,
                             "%s:%llu: %u features in one row (at most %u)", e->name,
                             (unsigned long long)line, s.n, GATE_EVAL_MAX_ROW_FEATURES);
        if (e->features + s.n > limit)
            return set_error(err, GATE_EVAL_TOO_BIG, line, -EINVAL,
                             "%s:%llu: more than %llu features in the first %u rows (%u per "
                             "row on average at most)",
                             e->name, (unsigned long long)line, (unsigned long long)limit,
                             e->rows + 1, GATE_EVAL_FEATURES_PER_ROW);
        if (e->rows == e->cap_rows && grow_rows(e, max_rows) != 0)
            return set_error(err, GATE_EVAL_NOMEM, line, -ENOMEM, "%s: out of memory at line %llu",
                             e->name, (unsigned long long)line);
        if (e->features + s.n > e->cap_features && grow_features(e, e->features + s.n, limit) != 0)
            return set_error(err, GATE_EVAL_NOMEM, line, -ENOMEM, "%s: out of memory at line %llu",
                             e->name, (unsigned long long)line);
        e->label[e->rows] = s.label;
        e->start[e->rows] = (uint32_t)e->features;
        if (s.n) {
            memcpy(e->id + e->features, s.ids, s.n * sizeof *s.ids);
            memcpy(e->value + e->features, s.values, s.n * sizeof *s.values);
        }
        e->features += s.n;
        if (s.n > e->max_row_features)
            e->max_row_features = s.n;
        e->rows++;
    }
    if (got < 0)
        return set_error(err,
                         got == -ENOMEM                    ? GATE_EVAL_NOMEM
                         : got == -EINVAL || got == -E2BIG ? GATE_EVAL_FORMAT
                                                           : GATE_EVAL_IO,
                         reader_line(r), got, "%s", reader_error(r));
    if (e->rows == 0)
        return set_error(err, GATE_EVAL_EMPTY, 0, -EINVAL, "%s: no labeled row", e->name);
    e->start[e->rows] = (uint32_t)e->features;
    return 0;
}

/* Both loaders: sniffed bytes -> format -> reader -> rows.  fd: the file's
 * descriptor, at its start (the reader takes it), or -1 for data. */
static int load(int fd, const void *data, size_t len, const char *name, const char *head,
                size_t head_len, uint32_t max_rows, gate_eval_t **out, gate_eval_error_t *err)
{
    *out = NULL;
    int rc = 0;
    gate_eval_t *e = NULL;
    if (max_rows == 0 || max_rows > UINT32_MAX / GATE_EVAL_FEATURES_PER_ROW)
        rc = set_error(err, GATE_EVAL_TOO_BIG, 0, -EINVAL, "%s: max_rows %u is outside 1..%u",
                       name, max_rows, UINT32_MAX / GATE_EVAL_FEATURES_PER_ROW);
    else if (!(e = calloc(1, sizeof *e)))
        rc = set_error(err, GATE_EVAL_NOMEM, 0, -ENOMEM, "%s: out of memory", name);
    if (rc != 0) {
        if (fd >= 0)
            close(fd);
        return rc;
    }
    snprintf(e->name, sizeof e->name, "%s", name);
    reader_t *r = NULL;
    char why[512];
    rc = sniff(head, head_len, e->name, &e->format, err);
    if (rc != 0) {
        if (fd >= 0)
            close(fd);
        goto out;
    }
    reader_options_t ro = {.format = e->format};
    rc = fd >= 0 ? reader_open_fd(fd, e->name, &ro, &r, why, sizeof why)
                 : reader_open_mem(data, len, e->name, &ro, &r, why, sizeof why);
    fd = -1; /* the reader's now, or closed */
    if (rc != 0) {
        rc = set_error(err, rc == -ENOMEM ? GATE_EVAL_NOMEM : GATE_EVAL_IO, 0, rc, "%s", why);
        goto out;
    }
    rc = read_rows(r, e, max_rows, err);
out:
    reader_close(r);
    if (rc != 0)
        gate_eval_free(e);
    else
        *out = e;
    return rc;
}

int gate_eval_load_mem(const void *data, size_t len, const char *name, uint32_t max_rows,
                       gate_eval_t **out, gate_eval_error_t *err)
{
    memset(err, 0, sizeof *err);
    return load(-1, data, len, name, data, len < SNIFF_BYTES ? len : SNIFF_BYTES, max_rows, out,
                err);
}

int gate_eval_load(const char *path, uint32_t max_rows, gate_eval_t **out, gate_eval_error_t *err)
{
    memset(err, 0, sizeof *err);
    *out = NULL;
    char *head = malloc(SNIFF_BYTES);
    if (!head)
        return set_error(err, GATE_EVAL_NOMEM, 0, -ENOMEM, "%s: out of memory", path);
    int rc;
    char why[512];
    int fd = reader_open_regular(path, why, sizeof why); /* a FIFO must not block the loader */
    if (fd < 0) {
        rc = set_error(err, GATE_EVAL_IO, 0, fd, "%s", why);
        goto out;
    }
    size_t n = 0;
    while (n < SNIFF_BYTES) {
        ssize_t got = read(fd, head + n, SNIFF_BYTES - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = -errno;
            set_error(err, GATE_EVAL_IO, 0, rc, "%s: cannot read: %s", path, strerror(-rc));
            goto out;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    if (lseek(fd, 0, SEEK_SET) != 0) {
        rc = -errno;
        set_error(err, GATE_EVAL_IO, 0, rc, "%s: cannot read: %s", path, strerror(-rc));
        goto out;
    }
    rc = load(fd, NULL, 0, path, head, n, max_rows, out, err);
    fd = -1; /* load's */
out:
    if (fd >= 0)
        close(fd);
    free(head);
    return rc;
}

uint32_t gate_eval_rows(const gate_eval_t *e)
{
    return e->rows;
}
bool gate_eval_truncated(const gate_eval_t *e)
{
    return e->truncated;
}
const char *gate_eval_name(const gate_eval_t *e)
{
    return e->name;
}
const char *gate_eval_format(const gate_eval_t *e)
{
    return e->format == READER_LIBFFM ? "libffm" : "libsvm";
}

/* ---- scoring --------------------------------------------------------------- */

double gate_eval_row_loss(float p, float label)
{
    double q = (double)p;
    if (!(q >= GATE_EVAL_CLIP)) /* NaN too: the worst clipped value */
        q = GATE_EVAL_CLIP;
    if (q > 1 - GATE_EVAL_CLIP)
        q = 1 - GATE_EVAL_CLIP;
    return label > 0.5f ? -log(q) : -log(1 - q);
}

bool gate_eval_worse(double cand, double active, double bound)
{
    if (isnan(cand) || isnan(active) || isnan(bound))
        return true;
    return cand > active + bound;
}

int gate_eval_logloss(const gate_eval_t *e, const model_t *m, double *logloss)
{
    model_scratch_t *sc = NULL;
    size_t maxf = e->max_row_features ? e->max_row_features : 1;
    if (model_scratch_create(maxf, &sc) != 0 || model_scratch_fit(sc, m, maxf) < 0) {
        model_scratch_destroy(sc);
        return -ENOMEM;
    }
    double sum = 0;
    int rc = 0;
    for (uint32_t i = 0; i < e->rows; i++) {
        uint32_t a = e->start[i], n = e->start[i + 1] - a;
        /* A row of no features (or a file of none): no pointer arithmetic on NULL. */
        codec_block_t shared = {n ? e->id + a : NULL, n ? e->value + a : NULL, n};
        codec_block_t item = {NULL, NULL, 0};
        float p;
        rc = model_score(m, &shared, &item, 1, &p, sc);
        if (rc != 0)
            break;
        sum += gate_eval_row_loss(p, e->label[i]);
    }
    model_scratch_destroy(sc);
    if (rc == 0)
        *logloss = sum / (double)e->rows;
    return rc;
}

/* ---- the configured file ------------------------------------------------------ */

int gate_eval_start(const server_config_t *cfg)
{
    if (!cfg->gate || !cfg->gate_eval_file[0])
        return 0;
    double t0 = now_s();
    gate_eval_t *e;
    gate_eval_error_t err;
    struct stat st;
    int rc = gate_eval_load(cfg->gate_eval_file, (uint32_t)cfg->gate_eval_max_rows, &e, &err);
    if (rc != 0) {
        LOG(LL_ERROR, "--gate-eval-file: %s", err.msg);
        return rc;
    }
    if (stat(cfg->gate_eval_file, &st) != 0)
        memset(&st, 0, sizeof st);
    LOG(LL_INFO, "gate: evaluation file %s: %u %s rows%s in %.3f s", e->name, e->rows,
        gate_eval_format(e),
        e->truncated ? " (the first --gate-eval-max-rows; the rest is not read)" : "",
        now_s() - t0);
    pthread_mutex_lock(&E.lock);
    gate_eval_t *old = E.rows;
    E.rows = e;
    E.st = st;
    pthread_mutex_unlock(&E.lock);
    gate_eval_free(old);
    return 0;
}

static bool same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Re-reads the file when it changed; E.lock held.  Sets r->stale when it
 * changed and could not be read. */
static void refresh(const server_config_t *cfg, gate_eval_result_t *r)
{
    struct stat st;
    if (stat(cfg->gate_eval_file, &st) == 0 && same_file(&st, &E.st))
        return;
    gate_eval_t *e;
    gate_eval_error_t err;
    if (gate_eval_load(cfg->gate_eval_file, (uint32_t)cfg->gate_eval_max_rows, &e, &err) != 0) {
        LOG(LL_WARN,
            "gate: the evaluation file changed and does not read (%s): the %u rows "
            "read before are used",
            err.msg, E.rows->rows);
        r->stale = true;
        return;
    }
    if (stat(cfg->gate_eval_file, &st) != 0)
        memset(&st, 0, sizeof st);
    LOG(LL_INFO, "gate: evaluation file %s changed: %u %s rows now", e->name, e->rows,
        gate_eval_format(e));
    gate_eval_free(E.rows);
    E.rows = e;
    E.st = st;
}

int gate_eval_run(const server_config_t *cfg, const model_t *cand, const model_t *active,
                  gate_eval_result_t *r)
{
    memset(r, 0, sizeof *r);
    r->logloss_active = NAN;
    r->bound = cfg->gate_max_logloss_increase;
    double t0 = now_s();
    pthread_mutex_lock(&E.lock);
    if (!E.rows) {
        pthread_mutex_unlock(&E.lock);
        return 0;
    }
    refresh(cfg, r);
    const gate_eval_t *e = E.rows;
    snprintf(r->file, sizeof r->file, "%s", e->name);
    r->rows = e->rows;
    int rc = gate_eval_logloss(e, cand, &r->logloss_candidate);
    if (rc == 0 && active) {
        rc = gate_eval_logloss(e, active, &r->logloss_active);
        r->have_active = rc == 0;
    }
    pthread_mutex_unlock(&E.lock);
    r->seconds = now_s() - t0;
    if (rc != 0)
        return rc;
    r->ran = true;
    r->refused =
        r->have_active && gate_eval_worse(r->logloss_candidate, r->logloss_active, r->bound);
    return 0;
}

void gate_eval_stop(void)
{
    pthread_mutex_lock(&E.lock);
    gate_eval_t *e = E.rows;
    E.rows = NULL;
    pthread_mutex_unlock(&E.lock);
    gate_eval_free(e);
}
