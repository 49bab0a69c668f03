/*
 * test_conn_stream.c — the connection state machine (server/conn.c) driven
 * directly (fixture and helpers: conn_testutil.h): a stream split at every byte boundary and fed a byte at
 * a time gives the same response bytes as one feed; frames pipelined in one
 * buffer are answered in order; the reaping clocks (slow frame, stuck output,
 * idle), buffer trimming and eviction.
 *
 * THREAD SAFETY: single-threaded.
 */

#include "conn_testutil.h"

/* ---- splitting and pipelining ------------------------------------------------------ */

/* One of each request, as one stream. */
static void mixed_stream(bytes_t *b)
{
    put_predict(b, 1, MODEL_NAME, 0);
    put_ping(b, 2, "abc");
    put_train(b, 3);
    put_lookup(b, 4);
    put_predict(b, 5, "other", 0);
    put_ping(b, 6, "");
}

/* The bytes conn.c queues for stream fed in pieces cut at cuts[0..ncuts). */
static void responses_of(const bytes_t *stream, const size_t *cuts, int ncuts, bytes_t *out)
{
    conn_t *c = open_conn();
    size_t at = 0;
    for (int i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : stream->len;
        assert_int_equal(conn_feed(&w, c, stream->p + at, end - at), 0);
        at = end;
    }
    assert_false(c->closing);
    assert_int_equal(c->in_len, 0);
    assert_int_equal(c->partial_since_ms, 0);
    out->len = 0;
    put(out, c->out + c->out_off, c->out_len - c->out_off);
    conn_free(&w, c);
}

static void test_split_every_byte(void **state)
{
    (void)state;
    start(NULL);
    bytes_t s = {0}, whole = {0}, split = {0};
    mixed_stream(&s);
    responses_of(&s, NULL, 0, &whole);

    /* what the whole stream gets, in order */
    conn_t *c = open_conn();
    assert_int_equal(feed(c, &s), 0);
    expect_scores(c, 1);
    expect_pong(c, 2, "abc");
    expect_error(c, 3, CODEC_E_UNKNOWN_TYPE);
    expect_error(c, 4, CODEC_E_UNKNOWN_TYPE);
    expect_error(c, 5, CODEC_E_UNKNOWN_MODEL);
    expect_pong(c, 6, "");
    expect_nothing(c);
    conn_free(&w, c);

    for (size_t k = 1; k < s.len; k++) { /* two pieces, cut at every byte */
        responses_of(&s, &k, 1, &split);
        assert_int_equal(split.len, whole.len);
        assert_memory_equal(split.p, whole.p, whole.len);
    }
    size_t *cuts = malloc(s.len * sizeof *cuts); /* one byte at a time */
    for (size_t k = 1; k < s.len; k++)
        cuts[k - 1] = k;
    responses_of(&s, cuts, (int)s.len - 1, &split);
    assert_int_equal(split.len, whole.len);
    assert_memory_equal(split.p, whole.p, whole.len);

    free(cuts);
    free(s.p);
    free(whole.p);
    free(split.p);
    finish();
}

/* A frame arrives in pieces: nothing is answered until its last byte, the
 * partial frame starts the frame clock (--frame-timeout-ms), the last byte
 * stops it. */
static void test_partial_frame_clock(void **state)
{
    (void)state;
    start((const char *const[]){"--frame-timeout-ms", "1000", "--idle-timeout-ms", "3600000",
                                NULL});
    uint64_t now = worker_now_ms();
    w.now_ms = now;
    conn_t *c = open_conn();
    bytes_t b = {0};
    put_ping(&b, 9, "x");
    assert_int_equal(conn_reap_reason(&w, c, now + 5000), -1); /* nothing pending */
    assert_int_equal(conn_feed(&w, c, b.p, 10), 0);            /* inside the header */
    expect_nothing(c);
    assert_true(c->partial_since_ms != 0);
    assert_int_equal(conn_reap_reason(&w, c, c->partial_since_ms + 1000), -1);
    assert_int_equal(conn_reap_reason(&w, c, c->partial_since_ms + 1001),
                     SERVER_REAP_FRAME_TIMEOUT);
    assert_int_equal(conn_feed(&w, c, b.p + 10, b.len - 11), 0); /* all but the last byte */
    expect_nothing(c);
    assert_true(c->partial_since_ms != 0);
    assert_int_equal(conn_feed(&w, c, b.p + b.len - 1, 1), 0);
    expect_pong(c, 9, "x");
    assert_int_equal(c->partial_since_ms, 0);
    assert_int_equal(conn_reap_reason(&w, c, now + 1000000), -1);
    conn_free(&w, c);
    free(b.p);
    finish();
}

/* The other two clocks.  Output that does not move for --send-timeout-ms
 * (a peer that does not read): SEND_TIMEOUT, and every byte sent restarts
 * it.  Nothing received, answered or sent for --idle-timeout-ms: IDLE, and
 * a received byte restarts it.  conn_reap counts the reason and drops the
 * buffers (the peer will read nothing more). */
static void test_send_and_idle_clocks(void **state)
{
    (void)state;
    start((const char *const[]){"--send-timeout-ms", "500", "--idle-timeout-ms", "2000", NULL});
    w.now_ms = 10000;
    conn_t *c = open_conn();
    assert_int_equal(conn_reap_reason(&w, c, 12000), -1);
    assert_int_equal(conn_reap_reason(&w, c, 12001), SERVER_REAP_IDLE);
    bytes_t b = {0};
    put_ping(&b, 1, "one");
    put_ping(&b, 2, "two");
    w.now_ms = 11000;
    assert_int_equal(feed(c, &b), 0); /* two answers queued at 11000, unsent */
    assert_int_equal(conn_reap_reason(&w, c, 11500), -1);
    assert_int_equal(conn_reap_reason(&w, c, 11501), SERVER_REAP_SEND_TIMEOUT);
    w.now_ms = 11400;
    conn_sent(&w, c, 3); /* progress, however small, restarts the clock */
    assert_int_equal(conn_reap_reason(&w, c, 11900), -1);
    assert_int_equal(conn_reap_reason(&w, c, 11901), SERVER_REAP_SEND_TIMEOUT);
    assert_int_equal(conn_reap_reason(&w, c, 20000), SERVER_REAP_SEND_TIMEOUT); /* not idle */
    conn_reap(&w, c, SERVER_REAP_SEND_TIMEOUT);
    assert_true(c->closing && c->dead);
    assert_int_equal(c->queued, 0);
    assert_int_equal(w.inflight, 0);
    assert_int_equal(w.out_bytes, 0);
    assert_int_equal(atomic_load(&w.m->reaped[SERVER_REAP_SEND_TIMEOUT]), 1);
    assert_int_equal(conn_reap_reason(&w, c, 99999), -1); /* reaped once */
    conn_free(&w, c);
    free(b.p);
    finish();
}

/* A connection quiet for a second gives its buffers back; one that is
 * busy, or was active less than a second ago, keeps them. */
static void test_trim(void **state)
{
    (void)state;
    start(NULL);
    w.now_ms = 5000;
    conn_t *c = open_conn();
    bytes_t b = {0};
    put_ping(&b, 1, "x");
    assert_int_equal(feed(c, &b), 0);
    assert_true(c->in_cap > 0 && c->out_cap > 0);
    assert_int_equal(w.out_bytes, c->out_cap);
    conn_trim(&w, c, 5999); /* output pending, and active 999 ms ago */
    assert_true(c->in_cap > 0 && c->out_cap > 0);
    expect_pong(c, 1, "x");
    conn_trim(&w, c, 5999);
    assert_true(c->out_cap > 0);
    conn_trim(&w, c, 6000);
    assert_int_equal(c->in_cap, 0);
    assert_int_equal(c->out_cap, 0);
    assert_int_equal(w.in_bytes, 0);
    assert_int_equal(w.out_bytes, 0);
    expect_usable(c); /* buffers grow again on demand */
    conn_free(&w, c);
    free(b.p);
    finish();
}

/* At the connection limit the longest idle connection may go, if it has
 * been idle CONN_EVICT_IDLE_MS; one with input, output or a pause is busy. */
static void test_evictable(void **state)
{
    (void)state;
    start(NULL);
    w.now_ms = 1000;
    conn_t *old = open_conn();
    w.now_ms = 1500;
    conn_t *young = open_conn();
    w.now_ms = 1200;
    conn_t *busy = open_conn();
    bytes_t b = {0};
    put_ping(&b, 1, "x");
    b.len -= 1; /* a partial frame */
    assert_int_equal(feed(busy, &b), 0);
    assert_null(conn_evictable(&w, 1999)); /* none idle a whole second */
    assert_ptr_equal(conn_evictable(&w, 2000), old);
    assert_ptr_equal(conn_evictable(&w, 9000), old);
    conn_reap(&w, old, SERVER_REAP_EVICTED);
    assert_ptr_equal(conn_evictable(&w, 9000), young); /* a reaped one is not picked twice */
    assert_int_equal(atomic_load(&w.m->reaped[SERVER_REAP_EVICTED]), 1);
    conn_free(&w, old);
    conn_free(&w, young);
    conn_free(&w, busy);
    free(b.p);
    finish();
}

/* Many frames in one buffer, good and bad mixed: answered in order, each
 * with its own id; the next feed goes on where this one stopped.  (A
 * --max-inflight that holds all 200.) */
static void test_pipelined(void **state)
{
    (void)state;
    start((const char *const[]){"--max-inflight", "1024", NULL});
    conn_t *c = open_conn();
    bytes_t b = {0};
    for (uint64_t i = 0; i < 200; i++) {
        switch (i % 4) {
        case 0:
            put_predict(&b, 1000 + i, MODEL_NAME, 0);
            break;
        case 1:
            put_ping(&b, 1000 + i, "p");
            break;
        case 2:
            put_predict(&b, 1000 + i, MODEL_NAME, 99);
            break; /* unknown version */
        case 3:
            put_lookup(&b, 1000 + i);
            break;
        }
    }
    size_t half = b.len / 2 + 7; /* a cut inside some frame */
    assert_int_equal(conn_feed(&w, c, b.p, half), 0);
    assert_true(c->in_len > 0);
    assert_int_equal(conn_feed(&w, c, b.p + half, b.len - half), 0);
    assert_int_equal(w.inflight, 200);
    for (uint64_t i = 0; i < 200; i++) {
        switch (i % 4) {
        case 0:
            expect_scores(c, 1000 + i);
            break;
        case 1:
            expect_pong(c, 1000 + i, "p");
            break;
        case 2:
            expect_error(c, 1000 + i, CODEC_E_UNKNOWN_VERSION);
            break;
        case 3:
            expect_error(c, 1000 + i, CODEC_E_UNKNOWN_TYPE);
            break;
        }
    }
    expect_nothing(c);
    assert_int_equal(w.inflight, 0);
    assert_int_equal(c->queued, 0);
    assert_int_equal(atomic_load(&w.m->requests_total), 200);
    assert_int_equal(atomic_load(&w.m->predict_total), 50);
    conn_free(&w, c);
    free(b.p);
    finish();
}

/* ---- main ------------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_every_byte),
        cmocka_unit_test(test_partial_frame_clock),
        cmocka_unit_test(test_send_and_idle_clocks),
        cmocka_unit_test(test_trim),
        cmocka_unit_test(test_evictable),
        cmocka_unit_test(test_pipelined),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
