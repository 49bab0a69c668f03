/*
 * test_guard.c — the post-swap guard (server/guard.c, #included for its
 * statics): the pure decision (counts in, verdict out) at and past each
 * bound, the workers' tallies (non-finite scores fail, slots recycled by
 * generation, summed over workers), and the thread end to end on real
 * model handles: a far-off version rolled back to the kept one, a good
 * version passing, nothing to roll back to raising the stuck counter, and
 * two models' new versions watched at once, each judged on its own.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "server/guard.c"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* repo.h's record of a rollback: no repository here; counts the calls. */
static int rolled_back_calls;
static uint64_t rolled_back_from;
int repo_rolled_back(const char *model, uint64_t from, uint64_t to)
{
    (void)model;
    (void)to;
    rolled_back_calls++;
    rolled_back_from = from;
    return -ENOENT;
}

static const guard_limits_t LIM = {.min_requests = 100, .max_error_rate = 0.01,
                                   .max_mean_ratio = 1.5};

static guard_counts_t counts(uint64_t req, uint64_t failed, uint64_t items, double mean)
{
    return (guard_counts_t){req, failed, items, 0, mean * (double)items};
}

/* ---- the decision ----------------------------------------------------------------- */

static void decide_needs_min_requests(void **state)
{
    (void)state;
    guard_counts_t base = counts(1000, 0, 10000, 0.1);
    guard_counts_t cur = counts(99, 99, 990, 0.9); /* all failed, mean 9x: but 99 < 100 */
    guard_decision_t d;
    assert_int_equal(guard_decide(&LIM, &base, &cur, &d), GUARD_OK);
    assert_non_null(strstr(d.why, "99 of 100"));
    cur.requests = 100;
    assert_int_equal(guard_decide(&LIM, &base, &cur, &d), GUARD_BAD_ERRORS);
}

static void decide_error_rate(void **state)
{
    (void)state;
    guard_counts_t base = counts(1000, 0, 10000, 0.1);
    guard_counts_t cur = counts(1000, 10, 10000, 0.1); /* 0.01: at the bound, not over */
    guard_decision_t d;
    assert_int_equal(guard_decide(&LIM, &base, &cur, &d), GUARD_OK);
    assert_true(fabs(d.error_rate - 0.01) < 1e-12);
    cur.failed = 11;
    assert_int_equal(guard_decide(&LIM, &base, &cur, &d), GUARD_BAD_ERRORS);
    assert_non_null(strstr(d.why, "--guard-max-error-rate"));
    assert_non_null(strstr(d.why, "11 of 1000"));
    /* The error check comes first when both are out. */
    cur.sum = 0.9 * (double)cur.items;
    assert_int_equal(guard_decide(&LIM, &base, &cur, &d), GUARD_BAD_ERRORS);
}

static void decide_mean_ratio(void **state)
{
    (void)state;
    guard_counts_t base = counts(1000, 0, 10000, 0.2);
    guard_decision_t d;
    guard_counts_t up = counts(500, 0, 5000, 0.3); /* 1.5: at the bound */
    assert_int_equal(guard_decide(&LIM, &base, &up, &d), GUARD_OK);
    assert_true(fabs(d.ratio - 1.5) < 1e-9);
    up.sum = 0.31 * (double)up.items;
    assert_int_equal(guard_decide(&LIM, &base, &up, &d), GUARD_BAD_MEAN);
    assert_non_null(strstr(d.why, "--guard-max-mean-ratio"));
    guard_counts_t down = counts(500, 0, 5000, 0.1); /* old/new = 2 */
    assert_int_equal(guard_decide(&LIM, &base, &down, &d), GUARD_BAD_MEAN);
    assert_true(fabs(d.ratio - 2.0) < 1e-9);
    guard_counts_t zero = counts(500, 0, 5000, 0.0); /* a zero mean: infinitely far */
    assert_int_equal(guard_decide(&LIM, &base, &zero, &d), GUARD_BAD_MEAN);
    assert_true(isinf(d.ratio));
    guard_counts_t same = counts(500, 0, 5000, 0.2);
    assert_int_equal(guard_decide(&LIM, &base, &same, &d), GUARD_OK);
    assert_non_null(strstr(d.why, "in bounds"));
}

static void decide_without_baseline(void **state)
{
    (void)state;
    guard_counts_t none = {0};
    guard_counts_t small = counts(99, 0, 990, 0.2); /* under min_requests: no baseline */
    guard_counts_t cur = counts(1000, 0, 10000, 0.9);
    guard_decision_t d;
    assert_int_equal(guard_decide(&LIM, &none, &cur, &d), GUARD_OK);
    assert_true(isnan(d.ratio));
    assert_true(isnan(d.base_mean));
    assert_int_equal(guard_decide(&LIM, &small, &cur, &d), GUARD_OK);
    cur.failed = 20; /* the error rate needs no baseline */
    assert_int_equal(guard_decide(&LIM, &none, &cur, &d), GUARD_BAD_ERRORS);
    /* Every item non-finite: no mean, only failures. */
    guard_counts_t base = counts(1000, 0, 10000, 0.2);
    guard_counts_t nan = {1000, 1000, 0, 10000, 0};
    assert_int_equal(guard_decide(&LIM, &base, &nan, &d), GUARD_BAD_ERRORS);
    assert_true(isnan(d.mean));
}

/* ---- the tallies ----------------------------------------------------------------------- */

static server_metrics_t *metrics_new(int n)
{
    server_metrics_t *m = aligned_alloc(64, ((size_t)n * sizeof *m + 63) & ~(size_t)63);
    assert_non_null(m);
    memset(m, 0, (size_t)n * sizeof *m);
    return m;
}

static void tally_counts_and_nan(void **state)
{
    (void)state;
    server_t s = {.nworkers = 2};
    s.metrics = metrics_new(2);
    float ok[3] = {0.25f, 0.5f, 0.25f};
    float bad[3] = {0.5f, NAN, INFINITY};
    guard_account(&s.metrics[0], 7, ok, 3, false);
    guard_account(&s.metrics[1], 7, ok, 3, false);
    guard_account(&s.metrics[1], 7, bad, 3, false);
    guard_account(&s.metrics[0], 7, NULL, 0, true);
    guard_account(&s.metrics[0], 8, ok, 3, false); /* another version: counted apart */
    guard_counts_t c = totals_of(&s, 7);
    assert_int_equal(c.requests, 4);
    assert_int_equal(c.failed, 2); /* the NaN request and the failed one */
    assert_int_equal(c.items, 7);
    assert_int_equal(c.bad_items, 2);
    assert_true(fabs(c.sum - 2.5) < 1e-6);
    c = totals_of(&s, 8);
    assert_int_equal(c.requests, 1);
    assert_int_equal(c.failed, 0);
    c = totals_of(&s, 9);
    assert_int_equal(c.requests, 0);
    free(s.metrics);
}

static void tally_recycles_oldest(void **state)
{
    (void)state;
    server_t s = {.nworkers = 1};
    s.metrics = metrics_new(1);
    float one = 1.0f;
    for (uint64_t g = 1; g <= SERVER_TALLY_SLOTS; g++)
        for (uint64_t k = 0; k < g; k++)
            guard_account(&s.metrics[0], g, &one, 1, false);
    for (uint64_t g = 1; g <= SERVER_TALLY_SLOTS; g++)
        assert_int_equal(totals_of(&s, g).requests, g);
    /* A new generation takes the oldest's slot (1), and starts from zero. */
    guard_account(&s.metrics[0], 100, &one, 1, false);
    assert_int_equal(totals_of(&s, 1).requests, 0);
    assert_int_equal(totals_of(&s, 2).requests, 2);
    assert_int_equal(totals_of(&s, 100).requests, 1);
    /* minus clamps a count that went down (a recycled slot). */
    guard_counts_t a = counts(5, 0, 5, 1), b = counts(9, 1, 9, 1);
    guard_counts_t d = minus(&a, &b);
    assert_int_equal(d.requests, 0);
    assert_int_equal(d.items, 0);
    assert_true(d.sum == 0);
    free(s.metrics);
}

/* ---- the thread, end to end --------------------------------------------------------------- */

static server_t srv;

static void configure(const char *const *flags)
{
    char *argv[32] = {"tlserve", "--log-level", "error"};
    int argc = 3;
    for (; flags && *flags; flags++)
        argv[argc++] = (char *)*flags;
    memset(&srv.cfg, 0, sizeof srv.cfg);
    assert_int_equal(server_config_load(&srv.cfg, argc, argv), 0);
}

/* An LR model of the given name and version: a bias and one key. */
static server_model_t *make_named(const char *name, uint64_t version, float bias)
{
    store_options_t opt = {.value_floats = 1, .shards = 1, .expected_keys = 4};
    store_t *s;
    assert_int_equal(store_create(&opt, &s), 0);
    float v[1] = {bias};
    assert_int_equal(store_upsert(s, MODEL_BIAS_ID, v), 1);
    v[0] = 0.5f;
    assert_int_equal(store_upsert(s, 1, v), 1);
    store_meta_t meta = {.model_kind = STORE_MODEL_LR, .version = version};
    snprintf(meta.model_name, sizeof meta.model_name, "%s", name);
    model_t *m;
    assert_int_equal(model_from_store(s, &meta, &m), 0);
    server_model_t *sm;
    assert_int_equal(server_model_wrap(m, &sm), 0);
    return sm;
}

static server_model_t *make_model(uint64_t version, float bias)
{
    return make_named("ctr", version, bias);
}

/* n requests of 10 items, each scoring `score`, on model name's active
 * version ("": the first model's). */
static void serve_named(const char *name, int n, float score)
{
    float scores[10];
    for (int i = 0; i < 10; i++)
        scores[i] = score;
    for (int i = 0; i < n; i++) {
        server_model_t *sm = name[0] ? server_model_acquire_named(&srv, name)
                                     : server_model_acquire(&srv);
        assert_non_null(sm);
        guard_account(&srv.metrics[i % srv.nworkers], sm->gen, scores, 10, false);
        server_model_release(sm);
    }
}

static void serve(int n, float score)
{
    serve_named("", n, score);
}

static uint64_t active_version(void)
{
    server_model_t *sm = server_model_acquire(&srv);
    assert_non_null(sm);
    uint64_t v = model_meta(sm->model)->version;
    server_model_release(sm);
    return v;
}

/* Waits (at most 5 s) until model name's watch (NULL: the one armed or
 * judged last) leaves WATCHING; its status. */
static guard_status_t wait_verdict_of(const char *name)
{
    guard_status_t st;
    for (int i = 0; i < 500; i++) {
        guard_get_status(name, &st);
        if (st.state != GUARD_WATCHING)
            return st;
        usleep(10000);
    }
    fail_msg("the guard gave no verdict on %s in 5 s", name ? name : "the last model");
    return st;
}

static guard_status_t wait_verdict(void)
{
    return wait_verdict_of(NULL);
}

/* Starts a server with keep (standby versions) serving version 1 (mean
 * 0.2) for a while, then loads version 2 through guard_arm + swap as the
 * loader does, and serves mean2 on it. */
static void run(const char *keep, float mean2, bool nan)
{
    const char *flags[] = {"--keep-versions", keep, "--guard-window-ms", "400",
                           "--guard-min-requests", "20", NULL};
    configure(flags);
    srv.nworkers = 2;
    srv.metrics = metrics_new(2);
    atomic_store(&srv.models[0].active, NULL);
    memset(G.w, 0, sizeof G.w);
    G.last = -1;
    rolled_back_calls = 0;
    server_model_retire(server_model_swap(&srv, make_model(1, 0)));
    assert_int_equal(guard_start(&srv), 0);
    serve(50, 0.2f);
    usleep(3 * GUARD_TICK_MS * 1000); /* the ring holds version 1's totals */
    serve(50, 0.2f);
    server_model_t *next = make_model(2, 0);
    guard_arm(&srv, next);
    server_model_retire(server_model_swap(&srv, next));
    guard_status_t st;
    guard_get_status(NULL, &st);
    assert_int_equal(st.state, GUARD_WATCHING);
    assert_int_equal(st.version, 2);
    usleep(2 * GUARD_TICK_MS * 1000); /* seen active: the watch starts */
    if (nan) {
        float s[2] = {NAN, mean2};
        for (int i = 0; i < 30; i++) {
            server_model_t *sm = server_model_acquire(&srv);
            guard_account(&srv.metrics[0], sm->gen, s, 2, false);
            server_model_release(sm);
        }
    } else {
        serve(30, mean2);
    }
}

static void stop_all(void)
{
    guard_stop();
    server_model_retire(atomic_exchange(&srv.models[0].active, NULL)); /* swap takes no NULL */
    server_model_drop_standby(&srv); /* after: the retire above may keep the active */
    free(srv.metrics);
    srv.metrics = NULL;
}

static void thread_rolls_back_far_mean(void **state)
{
    (void)state;
    run("1", 0.9f, false);
    guard_status_t st = wait_verdict();
    assert_int_equal(st.state, GUARD_ROLLED_BACK);
    assert_int_equal(st.rolled_back_to, 1);
    assert_int_equal(st.rollbacks, 1);
    assert_true(st.last.ratio > 4.4 && st.last.ratio < 4.6);
    assert_true(fabs(st.last.base_mean - 0.2) < 1e-6);
    assert_int_equal(active_version(), 1);
    assert_int_equal(rolled_back_calls, 1);
    assert_int_equal(rolled_back_from, 2);
    char buf[2048];
    guard_metrics_format(buf, sizeof buf);
    assert_non_null(strstr(buf, "tlserve_guard_rollbacks_total 1\n"));
    assert_non_null(strstr(buf, "tlserve_guard_watching 0\n"));
    stop_all();
}

static void thread_rolls_back_nan(void **state)
{
    (void)state;
    run("1", 0.2f, true);
    guard_status_t st = wait_verdict();
    assert_int_equal(st.state, GUARD_ROLLED_BACK);
    assert_int_equal(st.last.call, GUARD_BAD_ERRORS);
    assert_true(st.last.error_rate == 1.0);
    assert_int_equal(active_version(), 1);
    stop_all();
}

static void thread_passes_good_version(void **state)
{
    (void)state;
    run("1", 0.21f, false);
    guard_status_t st = wait_verdict();
    assert_int_equal(st.state, GUARD_PASSED);
    assert_int_equal(st.rollbacks, 0);
    assert_int_equal(st.counts.requests, 30);
    assert_int_equal(active_version(), 2);
    assert_int_equal(rolled_back_calls, 0);
    stop_all();
}

static void thread_stuck_without_standby(void **state)
{
    (void)state;
    run("0", 0.9f, false);
    guard_status_t st = wait_verdict();
    assert_int_equal(st.state, GUARD_STUCK);
    assert_int_equal(st.stuck, 1);
    assert_int_equal(active_version(), 2); /* nothing to roll back to: it keeps serving */
    char buf[2048];
    guard_metrics_format(buf, sizeof buf);
    assert_non_null(strstr(buf, "tlserve_guard_stuck_total 1\n"));
    stop_all();
}

/* Two models, each with a new version watched at once: the load of "b"
 * neither ends nor hides the watch of "ctr", whose far-off version is
 * still rolled back, while b's passes its own window. */
static void thread_watches_each_model(void **state)
{
    (void)state;
    const char *flags[] = {"--keep-versions", "1", "--guard-window-ms", "400",
                           "--guard-min-requests", "20", NULL};
    configure(flags);
    srv.nworkers = 2;
    srv.metrics = metrics_new(2);
    memset(G.w, 0, sizeof G.w);
    G.last = -1;
    rolled_back_calls = 0;
    server_model_retire(server_model_swap(&srv, make_named("ctr", 1, 0)));
    server_model_retire(server_model_swap(&srv, make_named("b", 1, 0)));
    assert_int_equal(guard_start(&srv), 0);
    for (int r = 0; r < 2; r++) { /* the rings hold both models' version 1 */
        serve_named("ctr", 50, 0.2f);
        serve_named("b", 50, 0.4f);
        usleep(3 * GUARD_TICK_MS * 1000);
    }
    server_model_t *next = make_named("ctr", 2, 0);
    guard_arm(&srv, next);
    server_model_retire(server_model_swap(&srv, next));
    usleep(2 * GUARD_TICK_MS * 1000);
    next = make_named("b", 2, 0);
    guard_arm(&srv, next);
    server_model_retire(server_model_swap(&srv, next));
    usleep(2 * GUARD_TICK_MS * 1000);
    guard_status_t st;
    guard_get_status("ctr", &st);
    assert_int_equal(st.state, GUARD_WATCHING); /* b's load did not end it */
    assert_int_equal(st.version, 2);
    serve_named("b", 30, 0.41f);
    serve_named("ctr", 30, 0.9f);
    st = wait_verdict_of("ctr");
    assert_int_equal(st.state, GUARD_ROLLED_BACK);
    assert_true(fabs(st.last.base_mean - 0.2) < 1e-6); /* ctr's own baseline, not b's */
    assert_int_equal(rolled_back_from, 2);
    st = wait_verdict_of("b");
    assert_int_equal(st.state, GUARD_PASSED);
    assert_true(fabs(st.last.base_mean - 0.4) < 1e-6);
    assert_int_equal(rolled_back_calls, 1);
    char buf[2048];
    guard_metrics_format(buf, sizeof buf);
    assert_non_null(strstr(buf, "tlserve_guard_rollbacks_total 1\n"));
    assert_non_null(strstr(buf, "tlserve_guard_passed_total 1\n"));
    guard_stop();
    for (int i = 0; i < 2; i++)
        server_model_retire(atomic_exchange(&srv.models[i].active, NULL));
    server_model_drop_standby(&srv);
    free(srv.metrics);
    srv.metrics = NULL;
}

static void config_refuses_bad_values(void **state)
{
    (void)state;
    const char *bad[][3] = {{"--guard-window-ms", "-1", "guard-window-ms"},
                            {"--guard-max-error-rate", "1.5", "guard-max-error-rate"},
                            {"--guard-max-mean-ratio", "0.5", "guard-max-mean-ratio"},
                            {"--guard-min-requests", "0", "guard-min-requests"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[] = {"tlserve", (char *)bad[i][0], (char *)bad[i][1], NULL};
        server_config_t cfg;
        assert_int_equal(server_config_load(&cfg, 3, argv), -1);
    }
    configure(NULL);
    assert_int_equal(srv.cfg.guard_window_ms, 30000);
    assert_int_equal(srv.cfg.guard_min_requests, 100);
    assert_true(srv.cfg.guard_max_error_rate == 0.01);
    assert_true(srv.cfg.guard_max_mean_ratio == 1.5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decide_needs_min_requests),
        cmocka_unit_test(decide_error_rate),
        cmocka_unit_test(decide_mean_ratio),
        cmocka_unit_test(decide_without_baseline),
        cmocka_unit_test(tally_counts_and_nan),
        cmocka_unit_test(tally_recycles_oldest),
        cmocka_unit_test(thread_watches_each_model),
        cmocka_unit_test(config_refuses_bad_values),
        cmocka_unit_test(thread_rolls_back_far_mean),
        cmocka_unit_test(thread_rolls_back_nan),
        cmocka_unit_test(thread_passes_good_version),
        cmocka_unit_test(thread_stuck_without_standby),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
