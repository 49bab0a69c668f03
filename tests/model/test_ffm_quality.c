/*
 * test_ffm_quality.c — FFM quality: tltrain's FFM defaults on the four data
 * sets under TL_SHARED_DATA must reach the better of LIBFFM/xLearn + 0.005
 * logloss, - 0.005 AUC (exit 77 when the data is absent).  A program, not a
 * cmocka test: it prints the table and exits 0, 1 or 77.
 */

#include "ffm_testutil.h"

/* ---- quality (--quality) ------------------------------------------------------ */

/* A libffm reader of path, NULL (said on stderr) when it cannot be opened. */
static reader_t *open_libffm(const char *path)
{
    reader_options_t ro = {.format = READER_LIBFFM};
    reader_t *r;
    char err[512];
    if (reader_open(path, &ro, &r, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    return r;
}

/* Streams path once: trains (m == NULL) or evaluates into m. */
static int run_file(train_ffm_t *t, const char *path, metrics_t *m, uint32_t *max_field)
{
    reader_t *r = open_libffm(path);
    if (!r)
        return -1;
    reader_sample_t s;
    int rc;
    while ((rc = reader_next(r, &s)) == 1) {
        if (max_field) {
            for (uint32_t j = 0; j < s.n; j++)
                if ((uint32_t)(s.ids[j] >> 56) > *max_field)
                    *max_field = (uint32_t)(s.ids[j] >> 56);
        } else if (!m) {
            train_ffm_update(t, s.ids, s.values, s.n, s.label, 1.0f, NULL);
        } else {
            metrics_add(m, train_ffm_predict(t, s.ids, s.values, s.n), s.label);
        }
    }
    if (rc < 0)
        fprintf(stderr, "%s: %s\n", path, reader_error(r));
    reader_close(r);
    return rc;
}

/* The mean label of path's samples (*n of them): the constant predictor. */
static int mean_label(const char *path, double *mean, uint64_t *n)
{
    reader_t *r = open_libffm(path);
    if (!r)
        return -1;
    reader_sample_t smp;
    int rc;
    double sum = 0;
    *n = 0;
    while ((rc = reader_next(r, &smp)) == 1) {
        sum += smp.label;
        ++*n;
    }
    reader_close(r);
    *mean = *n ? sum / (double)*n : 0;
    return rc;
}

/* FFM with optimizer o's defaults (its fields from the training file)
 * trained the default epochs on tr, then scored on te into *res; *opt gets
 * the options used.  0, or -1 when a file cannot be read or the trainer
 * not made. */
static int train_and_test(train_optimizer_t o, const char *tr, const char *te,
                          train_ffm_options_t *opt, metrics_result_t *res)
{
    uint32_t maxf = 0;
    if (run_file(NULL, tr, NULL, &maxf) != 0)
        return -1;
    train_ffm_defaults(o, opt);
    opt->fields = maxf + 1;
    train_ffm_t *t;
    metrics_t *m;
    if (train_ffm_create(opt, &t, NULL, 0) != 0)
        return -1;
    if (metrics_create(&m) != 0) {
        train_ffm_destroy(t);
        return -1;
    }
    int rc = 0;
    for (int ep = 0; ep < TRAIN_FFM_DEFAULT_EPOCHS && rc == 0; ep++)
        rc = run_file(t, tr, NULL, NULL) != 0 ? -1 : 0;
    if (rc == 0 && run_file(t, te, m, NULL) != 0)
        rc = -1;
    if (rc == 0)
        metrics_compute(m, res);
    metrics_destroy(m);
    train_ffm_destroy(t);
    return rc;
}

/* FFM-FTRL with its defaults (no tuning to the data) on criteo_tiny: the
 * test logloss is finite and beats the constant predictor (the training
 * set's click rate on every test row).  -1 when the set is absent. */
static int quality_ftrl(const char *data)
{
    char tr[1024], te[1024];
    snprintf(tr, sizeof tr, "%s/criteo_tiny/train.ffm", data);
    snprintf(te, sizeof te, "%s/criteo_tiny/test.ffm", data);
    if (access(tr, R_OK) != 0 || access(te, R_OK) != 0)
        return -1;
    double p0, q;
    uint64_t ntr, nte;
    if (mean_label(tr, &p0, &ntr) != 0 || mean_label(te, &q, &nte) != 0 || p0 <= 0 || p0 >= 1)
        return 0;
    const double constant = -(q * log(p0) + (1 - q) * log(1 - p0));
    train_ffm_options_t opt;
    metrics_result_t res;
    if (train_and_test(TRAIN_FTRL, tr, te, &opt, &res) != 0)
        return 0;
    int pass = isfinite(res.logloss) && res.logloss < constant;
    printf("criteo_tiny    FFM-FTRL defaults (F %u, k %u, %d epochs): logloss %.4f (constant "
           "predictor %.4f) auc %.4f calibration %.3f: %s\n",
           opt.fields, opt.k, TRAIN_FFM_DEFAULT_EPOCHS, res.logloss, constant, res.auc,
           res.calibration, pass ? "ok" : "FAIL");
    return pass;
}

static int quality(void)
{
    /* target: the better of LIBFFM's and xLearn's FFM + 0.005 logloss / - 0.005 AUC.
     * guard: what this test enforces.  The defaults (train_ffm.c: Adagrad, alpha 0.4,
     * w_ratio 0.5, beta 1, l2 0.002, l2_v 0.005, U(0, 0.5) start, 11 epochs) meet every
     * target, so the guard is the target.  Measured (seed 1): criteo_tiny .4901/.6669,
     * xlearn_criteo .5238/.6095, avazu_rx .3854/.7258, ipinyou .0206/.5865; seeds 2..5
     * meet every target at 10, 11 and 12 epochs too. */
    static const struct {
        const char *name;
        double max_ll, min_auc;     /* target */
        double guard_ll, guard_auc; /* enforced */
    } sets[] = {{"criteo_tiny", 0.5031, 0.666, 0.5031, 0.666},
                {"xlearn_criteo", 0.5372, 0.604, 0.5372, 0.604},
                {"avazu_rx", 0.3885, 0.724, 0.3885, 0.724},
                {"ipinyou", 0.0318, 0.578, 0.0318, 0.578}};
    const char *data = getenv("TL_SHARED_DATA");
    int ran = 0, ok = 1;
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        char tr[1024], te[1024];
        snprintf(tr, sizeof tr, "%s/%s/train.ffm", data ? data : "", sets[i].name);
        snprintf(te, sizeof te, "%s/%s/test.ffm", data ? data : "", sets[i].name);
        if (!data || access(tr, R_OK) != 0 || access(te, R_OK) != 0)
            continue;
        train_ffm_options_t opt;
        metrics_result_t res;
        if (train_and_test(TRAIN_ADAGRAD, tr, te, &opt, &res) != 0)
            return 1;
        int target = res.logloss <= sets[i].max_ll && res.auc >= sets[i].min_auc;
        int pass = res.logloss <= sets[i].guard_ll && res.auc >= sets[i].guard_auc;
        printf("%-14s FFM defaults (F %u, k %u, %d epochs): logloss %.4f (target <= %.4f) auc "
               "%.4f (target >= %.4f) calibration %.3f: target %s; guard %s\n",
               sets[i].name, opt.fields, opt.k, TRAIN_FFM_DEFAULT_EPOCHS, res.logloss,
               sets[i].max_ll, res.auc, sets[i].min_auc, res.calibration,
               target ? "met" : "MISSED", pass ? "ok" : "FAIL");
        ok &= pass;
        ran++;
    }
    if (!ran) {
        fprintf(stderr, "test_ffm_quality: no data sets under TL_SHARED_DATA: skipped\n");
        return 77;
    }
    int ftrl = quality_ftrl(data);
    if (ftrl == -1)
        printf("criteo_tiny absent: FFM-FTRL's quality not checked\n");
    else
        ok &= ftrl;
    return ok ? 0 : 1;
}

int main(void)
{
    return quality();
}
