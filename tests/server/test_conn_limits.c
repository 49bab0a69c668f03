/*
 * test_conn_limits.c — the connection state machine (server/conn.c) driven
 * directly (fixture and helpers: conn_testutil.h): per-connection back-pressure (no worker-wide
 * OVERLOADED, in-flight and unsent-byte limits, the connection share),
 * SHUTTING_DOWN, and allocation failures in conn.c.
 *
 * THREAD SAFETY: single-threaded.
 */

#include "conn_testutil.h"

/* ---- load shedding ----------------------------------------------------------------------- */

/* --max-inflight is a connection's own limit: one peer's unsent answers,
 * however many, never get another peer OVERLOADED (there is no worker-wide
 * count to refuse by); the worker's total shows in the inflight gauge. */
static void test_no_worker_wide_overload(void **state)
{
    (void)state;
    start((const char *const[]){"--max-inflight", "2", NULL});
    conn_t *a = open_conn(), *b = open_conn(), *d = open_conn();
    bytes_t x = {0};
    for (uint64_t id = 1; id <= 3; id++)
        put_ping(&x, id, "a");
    assert_int_equal(feed(a, &x), 0);
    assert_true(a->paused);
    x.len = 0;
    put_predict(&x, 4, MODEL_NAME, 0);
    put_ping(&x, 5, "b");
    assert_int_equal(feed(b, &x), 0);
    assert_int_equal(feed(d, &x), 0);
    assert_int_equal(w.inflight, 6);
    assert_int_equal(atomic_load(&w.m->inflight), 6);
    expect_scores(b, 4);
    expect_pong(b, 5, "b");
    expect_scores(d, 4);
    expect_pong(d, 5, "b");
    assert_int_equal(atomic_load(&w.m->overloaded_total), 0);
    expect_pong(a, 1, "a");
    expect_pong(a, 2, "a");
    assert_int_equal(conn_resume(&w, a), 1);
    expect_pong(a, 3, "a");
    assert_int_equal(w.inflight, 0);
    conn_free(&w, a);
    conn_free(&w, b);
    conn_free(&w, d);
    free(x.p);
    finish();
}

/* A response stops counting against --max-inflight once its last byte is
 * sent, even while later responses are still queued behind it: the io_uring
 * driver's send completes for the bytes it took while the next burst has
 * been answered into c->out.  A partial send of a frame releases nothing. */
static void test_inflight_released_per_response(void **state)
{
    (void)state;
    start((const char *const[]){"--max-inflight", "4", NULL});
    conn_t *c = open_conn();
    bytes_t x = {0};
    for (uint64_t id = 1; id <= 3; id++)
        put_ping(&x, id, "burst");
    assert_int_equal(feed(c, &x), 0);
    size_t first_burst = c->out_len; /* what a send in flight took */
    size_t one = first_burst / 3;
    assert_int_equal(w.inflight, 3);
    x.len = 0;
    put_ping(&x, 4, "next");
    assert_int_equal(feed(c, &x), 0); /* answered while the send is in flight */
    assert_int_equal(w.inflight, 4);
    conn_sent(&w, c, one - 1); /* part of the first frame */
    assert_int_equal(w.inflight, 4);
    conn_sent(&w, c, first_burst - (one - 1)); /* the send completes */
    assert_int_equal(w.inflight, 1);
    assert_int_equal(c->queued, 1);
    assert_int_equal(atomic_load(&w.m->inflight), 1);
    x.len = 0;
    for (uint64_t id = 5; id <= 7; id++)
        put_ping(&x, id, "burst");
    assert_int_equal(feed(c, &x), 0); /* 4 queued: all answered, nothing held back */
    assert_false(c->paused);
    assert_int_equal(atomic_load(&w.m->overloaded_total), 0);
    expect_pong(c, 4, "next");
    for (uint64_t id = 5; id <= 7; id++)
        expect_pong(c, id, "burst");
    expect_nothing(c);
    assert_int_equal(w.inflight, 0);
    conn_free(&w, c);
    free(x.p);
    finish();
}

/* Back-pressure: a connection holds at most --max-inflight unsent
 * responses; the frames after that wait unanswered (no OVERLOADED)
 * and c->paused tells the driver to stop reading, while another connection
 * of the worker is still served.  conn_resume answers what waited once the
 * peer has read. */
static void test_connection_share(void **state)
{
    (void)state;
    start((const char *const[]){"--max-inflight", "4", NULL});
    conn_t *a = open_conn(), *b = open_conn();
    bytes_t x = {0};
    for (uint64_t id = 1; id <= 6; id++)
        put_ping(&x, id, "a");
    assert_int_equal(feed(a, &x), 0);
    assert_true(a->paused);
    assert_int_equal(a->queued, 4);
    assert_true(a->in_len > 0); /* pings 5 and 6 wait */
    assert_int_equal(a->partial_since_ms, 0); /* not the peer's stall */
    assert_int_equal(conn_resume(&w, a), 0);  /* still at the limit */
    assert_int_equal(atomic_load(&w.m->backpressure_total), 1);
    x.len = 0;
    put_ping(&x, 7, "b");
    assert_int_equal(feed(b, &x), 0);
    expect_pong(b, 7, "b"); /* the other peer is served */
    assert_false(b->paused);
    expect_pong(a, 1, "a"); /* the peer reads one */
    assert_int_equal(conn_resume(&w, a), 1);
    assert_true(a->paused); /* ping 5 answered: at the limit again */
    for (uint64_t id = 2; id <= 5; id++)
        expect_pong(a, id, "a");
    assert_int_equal(conn_resume(&w, a), 1);
    assert_false(a->paused);
    expect_pong(a, 6, "a");
    expect_nothing(a);
    assert_int_equal(a->in_len, 0);
    assert_int_equal(atomic_load(&w.m->overloaded_total), 0);
    conn_free(&w, a);
    conn_free(&w, b);
    free(x.p);
    finish();
}

/* Back-pressure by bytes: large answers reach --max-unsent-bytes long before
 * --max-inflight, and the connection is paused there. */
static void test_unsent_bytes_limit(void **state)
{
    (void)state;
    start((const char *const[]){"--max-unsent-bytes", "40000", NULL});
    bytes_t p = {0}, f = {0};
    put_widest_predict(&p);
    for (int i = 0; i < 5; i++)
        put_frame(&f, CODEC_PREDICT, 0, (uint64_t)i + 1, &p);
    conn_t *c = open_conn();
    assert_int_equal(feed(c, &f), 0);
    assert_true(c->paused);
    assert_int_equal(c->queued, 3); /* 3 x ~16 KB passes 40000; the 4th waits */
    assert_int_equal(atomic_load(&w.m->predict_total), 3);
    assert_int_equal(conn_resume(&w, c), 0); /* nothing read yet */
    codec_msg_t m;
    next_frame(c, &m); /* the peer reads one: 2 x 16 KB unsent, under the limit */
    assert_int_equal(conn_resume(&w, c), 1);
    assert_true(c->paused); /* the 4th answered: at the limit again */
    assert_int_equal(atomic_load(&w.m->predict_total), 4);
    for (int i = 0; i < 3; i++)
        next_frame(c, &m);
    assert_int_equal(conn_resume(&w, c), 1);
    assert_false(c->paused);
    assert_int_equal(atomic_load(&w.m->predict_total), 5);
    next_frame(c, &m);
    assert_int_equal(m.hdr.request_id, 5);
    assert_int_equal(atomic_load(&w.m->overloaded_total), 0);
    conn_free(&w, c);
    free(p.p);
    free(f.p);
    finish();
}

/* Draining: requests get SHUTTING_DOWN, PING is still answered. */
static void test_shutting_down(void **state)
{
    (void)state;
    start(NULL);
    atomic_store(&srv.stopping, true);
    conn_t *c = open_conn();
    bytes_t b = {0};
    put_predict(&b, 80, MODEL_NAME, 0);
    put_train(&b, 81);
    put_ping(&b, 82, "z");
    assert_int_equal(feed(c, &b), 0);
    expect_error(c, 80, CODEC_E_SHUTTING_DOWN);
    expect_error(c, 81, CODEC_E_SHUTTING_DOWN);
    expect_pong(c, 82, "z");
    atomic_store(&srv.stopping, false);
    conn_free(&w, c);
    free(b.p);
    finish();
}

/* ---- allocation failures ------------------------------------------------------------------ */

/* The response buffer cannot grow: -ENOMEM, and the connection closes. */
static void test_out_of_memory_output(void **state)
{
    (void)state;
    start(NULL);
    conn_t *c = open_conn();
    bytes_t b = {0};
    put_ping(&b, 90, "m");
    alloc_fail_at = 2; /* 1: c->in grows, 2: c->out */
    assert_int_equal(feed(c, &b), -ENOMEM);
    expect_closed(c, &b);
    conn_free(&w, c);
    free(b.p);
    finish();
}

/* The input buffer cannot grow: the received bytes are lost, so the stream
 * can no longer be framed and the connection must close. */
static void test_out_of_memory_input(void **state)
{
    (void)state;
    start(NULL);
    conn_t *c = open_conn();
    bytes_t b = {0};
    put_ping(&b, 91, "m");
    assert_int_equal(conn_feed(&w, c, b.p, 5), 0); /* part of a frame */
    uint8_t big[5000] = {0};                       /* more than c->in holds: it must grow */
    alloc_fail_at = 1;
    assert_int_equal(conn_feed(&w, c, big, sizeof big), -ENOMEM);
    expect_closed(c, &b);
    conn_free(&w, c);
    free(b.p);
    finish();
}

/* ---- main ------------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_worker_wide_overload),
        cmocka_unit_test(test_inflight_released_per_response),
        cmocka_unit_test(test_connection_share),
        cmocka_unit_test(test_unsent_bytes_limit),
        cmocka_unit_test(test_shutting_down),
        cmocka_unit_test(test_out_of_memory_output),
        cmocka_unit_test(test_out_of_memory_input),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
