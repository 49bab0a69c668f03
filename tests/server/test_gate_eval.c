/*
 * test_gate_eval.c — the gate's labeled evaluation file (server/gate_eval.c,
 * #included for its statics): libsvm and libffm rows in memory, bad files
 * refused with the file and the line, the row bounds, logloss by hand, the
 * refusal rule, and gate_check refusing a candidate that predicts the
 * labels worse than the active version (and passing an equal one, and a
 * first load with only its own figure); a changed file is read again, a
 * changed file that does not read keeps the rows held.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "server/gate_eval.c"
#include "server/gate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NKEYS 64

static server_t srv;
static char dir[512];

static void configure(const char *const *flags)
{
    char *argv[32] = {"tlserve", "--log-level", "error"};
    int argc = 3;
    for (; flags && *flags; flags++)
        argv[argc++] = (char *)*flags;
    memset(&srv.cfg, 0, sizeof srv.cfg);
    assert_int_equal(server_config_load(&srv.cfg, argc, argv), 0);
}

static float weight(uint64_t id, float scale)
{
    return scale * (float)((int)(id % 7) - 3) / 8.0f;
}

/* LR model "ctr": bias, ids 1..NKEYS with weight(id, scale). */
static server_model_t *make_model(float bias, float scale, uint64_t version)
{
    store_options_t opt = {.value_floats = 1, .shards = 4, .expected_keys = NKEYS + 1};
    store_t *s;
    assert_int_equal(store_create(&opt, &s), 0);
    float v = bias;
    assert_int_equal(store_upsert(s, MODEL_BIAS_ID, &v), 1);
    for (uint64_t id = 1; id <= NKEYS; id++) {
        v = weight(id, scale);
        assert_int_equal(store_upsert(s, id, &v), 1);
    }
    store_meta_t meta = {.model_kind = STORE_MODEL_LR, .version = version};
    snprintf(meta.model_name, sizeof meta.model_name, "ctr");
    model_t *m;
    assert_int_equal(model_from_store(s, &meta, &m), 0);
    server_model_t *sm;
    assert_int_equal(server_model_wrap(m, &sm), 0);
    return sm;
}

/* libsvm rows "label idx:1" for idx 0..NKEYS-1 (id idx + 1), labelled 1
 * where the scale-1 model's weight is positive: that model is right. */
static size_t good_rows(char *buf, size_t cap)
{
    size_t n = 0;
    for (uint64_t idx = 0; idx < NKEYS; idx++)
        n += (size_t)snprintf(buf + n, cap - n, "%d %llu:1\n", weight(idx + 1, 1) > 0,
                              (unsigned long long)idx);
    return n;
}

static void write_file(const char *path, const char *text)
{
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(rename(tmp, path), 0); /* a new inode: seen as a change */
}

static int setup(void **state)
{
    (void)state;
    const char *base = getenv("TL_TEST_TMP");
    snprintf(dir, sizeof dir, "%s/gate_eval_XXXXXX", base && *base ? base : "/tmp");
    char mk[600];
    snprintf(mk, sizeof mk, "mkdir -p %s", base && *base ? base : "/tmp");
    assert_int_equal(system(mk), 0);
    assert_non_null(mkdtemp(dir));
    configure(NULL);
    srv.nworkers = 1;
    atomic_store(&srv.models[0].active, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    server_model_retire(atomic_exchange(&srv.models[0].active, NULL));
    gate_eval_stop();
    char rm[600];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    return system(rm) == 0 ? 0 : -1;
}

/* ---- rows ---------------------------------------------------------------------- */

static void test_reads_libsvm_and_libffm(void **state)
{
    (void)state;
    gate_eval_t *e;
    gate_eval_error_t err;
    const char *svm = "\n1 0:1 5:0.5\n0 7:2\n-1\n";
    assert_int_equal(gate_eval_load_mem(svm, strlen(svm), "a.svm", 10, &e, &err), 0);
    assert_string_equal(gate_eval_format(e), "libsvm");
    assert_int_equal(gate_eval_rows(e), 3);
    assert_false(gate_eval_truncated(e));
    assert_true(e->label[0] == 1 && e->label[1] == 0 && e->label[2] == 0);
    assert_int_equal(e->start[0], 0);
    assert_int_equal(e->start[1], 2);
    assert_int_equal(e->start[3], 3);
    assert_int_equal(e->id[0], 1); /* idx + 1: 0 is the bias */
    assert_int_equal(e->id[1], 6);
    assert_true(e->value[1] == 0.5f);
    gate_eval_free(e);

    const char *ffm = "1 2:3:1 4:5:1\n0 1:0:1\n";
    assert_int_equal(gate_eval_load_mem(ffm, strlen(ffm), "a.ffm", 10, &e, &err), 0);
    assert_string_equal(gate_eval_format(e), "libffm");
    assert_int_equal(gate_eval_rows(e), 2);
    assert_int_equal(e->id[0], ((uint64_t)2 << 56) | 4);
    assert_int_equal(e->id[2], ((uint64_t)1 << 56) | 1);
    gate_eval_free(e);

    /* max_rows: the first rows only, and said so */
    assert_int_equal(gate_eval_load_mem(svm, strlen(svm), "a.svm", 2, &e, &err), 0);
    assert_int_equal(gate_eval_rows(e), 2);
    assert_true(gate_eval_truncated(e));
    assert_int_equal(e->start[2], 3);
    gate_eval_free(e);
}

static void refuse(const char *text, const char *name, uint32_t max_rows, gate_eval_errc_t code,
                   uint64_t line, const char *want)
{
    gate_eval_t *e = (gate_eval_t *)1;
    gate_eval_error_t err;
    int rc = gate_eval_load_mem(text, strlen(text), name, max_rows, &e, &err);
    print_message("%s\n", err.msg);
    assert_true(rc < 0);
    assert_null(e);
    assert_int_equal(err.code, code);
    assert_int_equal(err.line, line);
    assert_non_null(strstr(err.msg, name));
    assert_non_null(strstr(err.msg, want));
}

static void test_refuses_bad_files(void **state)
{
    (void)state;
    refuse("", "empty.svm", 10, GATE_EVAL_EMPTY, 0, "no labeled row");
    refuse("\n\n", "blank.svm", 10, GATE_EVAL_EMPTY, 0, "no labeled row");
    refuse("1 abc\n", "words.svm", 10, GATE_EVAL_FORMAT, 1,
           "words.svm:1: the first feature 'abc' is neither idx:val");
    refuse("1 1:2:3:4\n", "colons.svm", 10, GATE_EVAL_FORMAT, 1, "neither idx:val");
    refuse("1 3:1\n0 4:1\n2 5:1\n", "label.svm", 10, GATE_EVAL_FORMAT, 3, "label.svm:3:");
    refuse("1 3:1\n0 1:4:1\n", "mixed.svm", 10, GATE_EVAL_FORMAT, 2, "mixed.svm:2:");
    refuse("1 2:3:1\n0 4:1\n", "mixed.ffm", 10, GATE_EVAL_FORMAT, 2, "mixed.ffm:2:");
    refuse("1 72057594037927935:1\n", "bigid.svm", 10, GATE_EVAL_FORMAT, 1, "bigid.svm:1:");
    refuse("1 3:nan\n", "nan.svm", 10, GATE_EVAL_FORMAT, 1, "nan.svm:1:");
    /* 257 features in one row with max_rows 1: over 256 per row */
    char big[8192];
    size_t n = (size_t)snprintf(big, sizeof big, "1");
    for (int i = 0; i < 257; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, " %d:1", i);
    snprintf(big + n, sizeof big - n, "\n");
    refuse(big, "wide.svm", 1, GATE_EVAL_TOO_BIG, 1, "wide.svm:1: more than 256 features");

    gate_eval_t *e;
    gate_eval_error_t err;
    char path[600];
    snprintf(path, sizeof path, "%s/missing.svm", dir);
    assert_int_equal(gate_eval_load(path, 10, &e, &err), -ENOENT);
    assert_int_equal(err.code, GATE_EVAL_IO);
    assert_non_null(strstr(err.msg, path));
    assert_int_equal(gate_eval_load(dir, 10, &e, &err), -EINVAL); /* a directory */
    assert_non_null(strstr(err.msg, "not a regular file"));
}

/* ---- logloss -------------------------------------------------------------------- */

static void test_logloss_by_hand(void **state)
{
    (void)state;
    assert_true(fabs(gate_eval_row_loss(0.25f, 1) - -log(0.25)) < 1e-9);
    assert_true(fabs(gate_eval_row_loss(0.25f, 0) - -log(0.75)) < 1e-9);
    assert_true(fabs(gate_eval_row_loss(0.0f, 1) - -log(1e-15)) < 1e-6); /* clipped */
    assert_true(fabs(gate_eval_row_loss(1.0f, 0) - -log(1e-15)) < 1e-3);
    assert_true(fabs(gate_eval_row_loss(NAN, 1) - -log(1e-15)) < 1e-6);
    assert_true(gate_eval_row_loss(1.0f, 1) < 1e-9);

    server_model_t *m = make_model(0.1f, 1, 1);
    const char *svm = "1 0:1\n0 1:2\n1\n";
    gate_eval_t *e;
    gate_eval_error_t err;
    assert_int_equal(gate_eval_load_mem(svm, strlen(svm), "h.svm", 10, &e, &err), 0);
    double want = 0;
    want += -log(1 / (1 + exp(-(0.1 + weight(1, 1)))));
    want += -log(1 - 1 / (1 + exp(-(0.1 + 2 * weight(2, 1)))));
    want += -log(1 / (1 + exp(-0.1)));
    want /= 3;
    double got;
    assert_int_equal(gate_eval_logloss(e, m->model, &got), 0);
    assert_true(fabs(got - want) < 1e-6);
    gate_eval_free(e);
    server_model_release(m);
}

static void test_refusal_rule(void **state)
{
    (void)state;
    assert_true(gate_eval_worse(0.52, 0.45, 0.01));
    assert_false(gate_eval_worse(0.455, 0.45, 0.01));
    assert_false(gate_eval_worse(0.46, 0.45, 0.01 + 1e-12));
    assert_false(gate_eval_worse(0.45, 0.45, 0));
    assert_true(gate_eval_worse(0.45 + 1e-9, 0.45, 0));
    assert_false(gate_eval_worse(0.30, 0.45, 0.01)); /* better */
    assert_true(gate_eval_worse(NAN, 0.45, 0.01));
    assert_true(gate_eval_worse(0.3, NAN, 0.01));
}

/* ---- in gate_check ---------------------------------------------------------------- */

static void test_gate_check_refuses_a_worse_candidate(void **state)
{
    (void)state;
    char path[600], text[4096];
    snprintf(path, sizeof path, "%s/eval.svm", dir);
    good_rows(text, sizeof text);
    write_file(path, text);
    const char *flags[] = {"--gate-eval-file", path, NULL};
    configure(flags);
    assert_int_equal(gate_eval_start(&srv.cfg), 0);

    /* first load: the candidate's figure only */
    server_model_t *v1 = make_model(0, 1, 1);
    gate_verdict_t v;
    assert_int_equal(gate_check(&srv, v1, &v), 0);
    assert_true(v.eval);
    assert_int_equal(v.eval_rows, NKEYS);
    assert_true(isnan(v.eval_logloss_active));
    assert_true(v.eval_logloss_candidate > 0 && v.eval_logloss_candidate < 0.6);
    assert_non_null(strstr(v.msg, "eval logloss"));
    double good = v.eval_logloss_candidate;
    server_model_retire(server_model_swap(&srv, v1));

    /* the same weights: equal logloss, passes */
    server_model_t *v2 = make_model(0, 1, 2);
    assert_int_equal(gate_check(&srv, v2, &v), 0);
    assert_true(v.eval_logloss_candidate == good && v.eval_logloss_active == good);
    server_model_release(v2);

    /* negated weights: predicts the labels backwards; mean and PSI are not
     * run (no sample), so the eval file is what refuses it */
    server_model_t *v3 = make_model(0, -1, 3);
    assert_int_equal(gate_check(&srv, v3, &v), -EPERM);
    print_message("%s\n", v.msg);
    assert_false(v.pass);
    assert_true(v.eval_logloss_candidate > good + 0.01);
    assert_non_null(strstr(v.msg, "is worse than the active version's"));
    assert_non_null(strstr(v.msg, path));
    assert_non_null(strstr(v.msg, "(64 rows)"));
    assert_non_null(strstr(v.msg, "by more than 0.01"));
    char metrics[4096];
    gate_metrics_format(metrics, sizeof metrics);
    assert_non_null(strstr(metrics, "tlserve_gate_eval_logloss{role=\"candidate\",version=\"3\"}"));
    assert_non_null(strstr(metrics, "tlserve_gate_eval_logloss{role=\"active\",version=\"1\"}"));
    assert_non_null(strstr(metrics, "tlserve_gate_eval_rows 64"));

    /* a large enough bound lets it through */
    const char *loose[] = {"--gate-eval-file", path, "--gate-max-logloss-increase", "100", NULL};
    configure(loose);
    assert_int_equal(gate_check(&srv, v3, &v), 0);
    server_model_release(v3);
}

static void test_changed_file_is_read_again(void **state)
{
    (void)state;
    char path[600], text[4096];
    snprintf(path, sizeof path, "%s/change.svm", dir);
    write_file(path, "1 0:1\n");
    const char *flags[] = {"--gate-eval-file", path, NULL};
    configure(flags);
    assert_int_equal(gate_eval_start(&srv.cfg), 0);
    server_model_t *m = make_model(0, 1, 1);
    gate_eval_result_t r;
    assert_int_equal(gate_eval_run(&srv.cfg, m->model, NULL, &r), 0);
    assert_true(r.ran);
    assert_int_equal(r.rows, 1);

    good_rows(text, sizeof text);
    write_file(path, text);
    assert_int_equal(gate_eval_run(&srv.cfg, m->model, m->model, &r), 0);
    assert_int_equal(r.rows, NKEYS);
    assert_false(r.stale);
    assert_false(r.refused);

    write_file(path, "1 0:1\nbroken\n");
    assert_int_equal(gate_eval_run(&srv.cfg, m->model, m->model, &r), 0);
    assert_true(r.stale);
    assert_int_equal(r.rows, NKEYS); /* the rows held */
    server_model_release(m);

    /* at start a bad file is an error */
    assert_true(gate_eval_start(&srv.cfg) < 0);
    gate_eval_stop();
    assert_int_equal(gate_eval_run(&srv.cfg, NULL, NULL, &r), 0);
    assert_false(r.ran);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_libsvm_and_libffm),
        cmocka_unit_test(test_refuses_bad_files),
        cmocka_unit_test(test_logloss_by_hand),
        cmocka_unit_test(test_refusal_rule),
        cmocka_unit_test_setup_teardown(test_gate_check_refuses_a_worse_candidate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_changed_file_is_read_again, setup, teardown),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
