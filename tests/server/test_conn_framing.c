/*
 * test_conn_framing.c — the connection state machine (server/conn.c) driven
 * directly (fixture and helpers: conn_testutil.h): framing errors (bad magic, version, header, payload
 * over the codec's or --max-frame-bytes): one ERROR with request id 0, the
 * connection closes and later bytes are ignored; --max-input-bytes:
 * OVERLOADED and close; --max-output-bytes: the largest backlog is closed.
 *
 * THREAD SAFETY: single-threaded.
 */

#include "conn_testutil.h"

/* ---- framing errors: one ERROR with id 0, then the connection closes ------------------ */

/* Feeds [good PING][frame][good PING] and expects the first PONG, then one
 * ERROR code with request id 0, the connection closing and the PING after it
 * ignored; later bytes are ignored too. */
static void expect_framing_error(const bytes_t *bad, int code)
{
    conn_t *c = open_conn();
    bytes_t b = {0};
    put_ping(&b, 1, "before");
    put(&b, bad->p, bad->len);
    put_ping(&b, 2, "after");
    uint64_t errs = errors_of(code);
    assert_int_equal(feed(c, &b), -EPROTO);
    assert_true(c->closing);
    expect_pong(c, 1, "before");
    expect_error(c, 0, code);
    assert_int_equal(errors_of(code), errs + 1);

    b.len = 0;
    put_ping(&b, 3, "later");
    expect_closed(c, &b);
    conn_free(&w, c);
    free(b.p);
}

static void test_framing_errors(void **state)
{
    (void)state;
    start(NULL);
    bytes_t f = {0};

    put_ping(&f, 5, "hi");
    f.p[0] = 'X';
    expect_framing_error(&f, CODEC_E_BAD_MAGIC);

    f.len = 0;
    put_ping(&f, 5, "hi");
    f.p[4] = 2;
    expect_framing_error(&f, CODEC_E_BAD_VERSION);

    f.len = 0;
    put_ping(&f, 5, "hi");
    f.p[20] = 1; /* reserved */
    expect_framing_error(&f, CODEC_E_BAD_HEADER);

    f.len = 0;
    put_predict(&f, 5, MODEL_NAME, 0);
    f.p[6] = 2; /* PREDICT defines bit 0 (LOG) only */
    expect_framing_error(&f, CODEC_E_BAD_HEADER);

    f.len = 0;
    put_lookup(&f, 5);
    f.p[7] = 0x80; /* LOOKUP defines bit 0 only */
    expect_framing_error(&f, CODEC_E_BAD_HEADER);

    /* a payload over the wire's 16 MiB: refused on the header alone */
    f.len = 0;
    put_ping(&f, 5, "");
    uint32_t big = CODEC_MAX_PAYLOAD + 1;
    memcpy(f.p + 16, &big, 4);
    expect_framing_error(&f, CODEC_E_FRAME_TOO_LARGE);

    /* a bad magic is seen once the whole header is in, not before */
    conn_t *c = open_conn();
    f.len = 0;
    put_ping(&f, 5, "hi");
    f.p[0] = 'X';
    assert_int_equal(conn_feed(&w, c, f.p, CODEC_HEADER_SIZE - 1), 0);
    expect_nothing(c);
    assert_int_equal(conn_feed(&w, c, f.p + CODEC_HEADER_SIZE - 1, 1), -EPROTO);
    expect_error(c, 0, CODEC_E_BAD_MAGIC);
    expect_closed(c, &f);
    conn_free(&w, c);

    free(f.p);
    finish();
}

/* --max-frame-bytes: a payload of exactly the limit is read (and skipped,
 * here: an unknown type); one byte more is a framing error as soon as the
 * header arrives, before any payload byte is held. */
static void test_max_frame_bytes(void **state)
{
    (void)state;
    start((const char *const[]){"--max-frame-bytes", "4096", NULL});
    assert_int_equal(w.arena.cap, codec_arena_bound(4096));
    bytes_t p = {0}, f = {0};
    grow(&p, 4096);
    memset(p.p, 0xab, p.len);
    put_frame(&f, 77, 0, 31, &p);
    conn_t *c = open_conn();
    assert_int_equal(feed(c, &f), 0);
    expect_error(c, 31, CODEC_E_UNKNOWN_TYPE);
    expect_usable(c);
    conn_free(&w, c);

    grow(&p, 1);
    f.len = 0;
    put_frame(&f, 77, 0, 32, &p);
    c = open_conn();
    assert_int_equal(conn_feed(&w, c, f.p, CODEC_HEADER_SIZE), -EPROTO);
    assert_true(c->closing);
    expect_error_naming(c, 0, CODEC_E_FRAME_TOO_LARGE, "4096"); /* names the limit */
    expect_closed(c, &(bytes_t){.p = f.p + CODEC_HEADER_SIZE, .len = 100});
    conn_free(&w, c);

    /* a PREDICT over the limit the same way */
    f.len = 0;
    p.len = 0;
    put_predict_head(&p, MODEL_NAME, 0, 1);
    put_block(&p, NULL, NULL, 0);
    uint64_t ids[600];
    for (int i = 0; i < 600; i++)
        ids[i] = (uint64_t)i + 1;
    put_block(&p, ids, NULL, 600); /* 4800 bytes of ids */
    put_frame(&f, CODEC_PREDICT, 0, 33, &p);
    expect_framing_error(&f, CODEC_E_FRAME_TOO_LARGE);

    free(p.p);
    free(f.p);
    finish();
}

/* --max-input-bytes: the input buffers of all a worker's connections
 * together.  When a connection's buffer would pass it, the connections
 * holding more input than it are closed (reaped, input_cap) until it fits;
 * when it holds the most itself it gets OVERLOADED (id 0) and closes.  A
 * closed connection's buffer goes back to the budget at once. */
static void fill_to_budget(conn_t *a, const bytes_t *hdr, const bytes_t *chunk)
{
    assert_int_equal(feed(a, hdr), 0);
    size_t held = CODEC_HEADER_SIZE;
    while (held + chunk->len <= 65536) {
        assert_int_equal(feed(a, chunk), 0);
        held += chunk->len;
    }
    assert_int_equal(conn_feed(&w, a, chunk->p, 65536 - held), 0);
    expect_nothing(a);
}

static void test_max_input_bytes(void **state)
{
    (void)state;
    start((const char *const[]){"--max-input-bytes", "65536", NULL});
    bytes_t hdr = {0}, chunk = {0};
    bytes_t p = {.len = 100000}; /* header of a frame of 100000 payload bytes */
    codec_header_t h = {.type = 77, .request_id = 5, .payload_len = (uint32_t)p.len};
    codec_write_header(grow(&hdr, CODEC_HEADER_SIZE), &h);
    grow(&chunk, 1000);
    memset(chunk.p, 0, chunk.len);

    /* a grows to exactly the budget (65536 bytes held) */
    conn_t *a = open_conn();
    fill_to_budget(a, &hdr, &chunk);
    assert_int_equal(w.in_bytes, 65536);

    /* b needs its first 4096 bytes: a, holding the most, is closed for it */
    conn_t *b = open_conn();
    bytes_t ping = {0};
    put_ping(&ping, 6, "b");
    assert_int_equal(feed(b, &ping), 0);
    expect_pong(b, 6, "b");
    assert_true(a->closing && a->dead);
    assert_int_equal(a->in_cap, 0);
    assert_int_equal(atomic_load(&w.m->reaped[SERVER_REAP_INPUT_CAP]), 1);
    assert_int_equal(w.in_bytes, b->in_cap);
    conn_free(&w, a);

    /* a2 holds all but b's buffer, then wants more: it holds the most itself */
    conn_t *a2 = open_conn();
    assert_int_equal(feed(a2, &hdr), 0);
    int rc = 0;
    while (rc == 0)
        rc = feed(a2, &chunk);
    assert_int_equal(rc, -ENOBUFS);
    assert_true(a2->closing);
    assert_false(b->closing);
    expect_error(a2, 0, CODEC_E_OVERLOADED);
    expect_closed(a2, &chunk);
    assert_int_equal(atomic_load(&w.m->overloaded_total), 1);
    assert_int_equal(errors_of(CODEC_E_OVERLOADED), 1);
    conn_free(&w, a2);
    expect_usable(b);
    conn_free(&w, b);
    assert_int_equal(w.in_bytes, 0);

    conn_t *c = open_conn(); /* the budget is back */
    expect_usable(c);
    conn_free(&w, c);

    free(hdr.p);
    free(chunk.p);
    free(ping.p);
    finish();
}

/* Peers that send but never read: once a worker's output buffers pass
 * --max-output-bytes, the connection with the most unsent bytes is closed
 * (reaped, buffers dropped), whether or not it is the one being fed;
 * the others go on. */
static void test_output_cap(void **state)
{
    (void)state;
    start((const char *const[]){"--max-inflight", "1048576", "--max-output-bytes", "262144",
                                NULL});
    bytes_t p = {0}, f = {0}, ping = {0};
    put_widest_predict(&p);
    put_frame(&f, CODEC_PREDICT, 0, 1, &p);
    put_ping(&ping, 5, "small");
    size_t resp = CODEC_HEADER_SIZE + 8 + codec_varint_size(CODEC_MAX_ITEMS) + 4 * CODEC_MAX_ITEMS;
    conn_t *hog = open_conn(), *small = open_conn(), *next = open_conn();
    assert_int_equal(feed(small, &ping), 0); /* a little unsent output */
    int rc = 0;
    size_t n = 0;
    while (rc == 0 && n < 64) {
        rc = feed(hog, &f);
        n++;
    }
    assert_int_equal(rc, -ENOBUFS); /* the hog was the worst: itself closed */
    assert_true(hog->closing && hog->dead);
    assert_true(n * resp > 262144 / 2); /* it held a fair part of the cap first */
    assert_int_equal(hog->out_cap, 0);
    assert_int_equal(hog->queued, 0);
    assert_int_equal(atomic_load(&w.m->reaped[SERVER_REAP_OUTPUT_CAP]), 1);
    assert_true(w.out_bytes <= 262144);
    assert_false(small->closing);
    expect_pong(small, 5, "small");

    /* Now the worst is another connection: next's feed closes small's backlog. */
    for (int i = 0; i < 8; i++)
        assert_int_equal(feed(small, &f), 0);
    rc = 0;
    n = 0;
    while (rc == 0 && !small->dead && n < 64) {
        rc = feed(next, &ping);
        n++;
    }
    assert_true(small->dead);
    assert_int_equal(rc, 0);
    assert_false(next->closing);
    assert_int_equal(atomic_load(&w.m->reaped[SERVER_REAP_OUTPUT_CAP]), 2);
    conn_free(&w, hog);
    conn_free(&w, small);
    conn_free(&w, next);
    free(p.p);
    free(f.p);
    free(ping.p);
    finish();
}

/* The io_uring case: the hog is closed while its send is in flight, so its
 * buffer stays until the send ends.  That buffer counts as given back: the
 * next feeds do not close anyone else for it, and a connection with nothing
 * unsent is never closed for the cap (its idle buffer is given back
 * instead). */
static void test_output_cap_spares_readers(void **state)
{
    (void)state;
    start((const char *const[]){"--max-inflight", "1048576", "--max-output-bytes", "262144",
                                NULL});
    bytes_t p = {0}, f = {0}, ping = {0};
    put_widest_predict(&p);
    put_frame(&f, CODEC_PREDICT, 0, 1, &p);
    put_ping(&ping, 5, "r");
    conn_t *reader = open_conn(), *hog = open_conn();
    for (int i = 0; i < 4; i++) /* reader's buffer grows to ~64 KB, then is all read */
        assert_int_equal(feed(reader, &f), 0);
    for (int i = 0; i < 4; i++) {
        codec_msg_t m;
        next_frame(reader, &m);
        assert_int_equal(m.hdr.type, CODEC_PREDICT_RESULT);
    }
    assert_true(reader->out_cap >= 65536);
    hog->send_busy = true; /* a send of the hog's is in flight from here on */
    int rc = 0;
    for (int n = 0; rc == 0 && n < 64; n++)
        rc = feed(hog, &f);
    assert_int_equal(rc, -ENOBUFS);
    assert_true(hog->dead);
    assert_true(hog->out_cap > 0); /* kept for the send */
    assert_false(reader->closing);
    for (int i = 0; i < 8; i++) { /* the reader goes on: nobody is closed for the hog's buffer */
        assert_int_equal(feed(reader, &ping), 0);
        expect_pong(reader, 5, "r");
    }
    assert_false(reader->closing);
    assert_int_equal(atomic_load(&w.m->reaped[SERVER_REAP_OUTPUT_CAP]), 1);
    hog->send_busy = false; /* the send ends (failed: the socket was shut down) */
    conn_free(&w, hog);
    conn_free(&w, reader);
    free(p.p);
    free(f.p);
    free(ping.p);
    finish();
}

/* ---- main ------------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_framing_errors),
        cmocka_unit_test(test_max_frame_bytes),
        cmocka_unit_test(test_max_input_bytes),
        cmocka_unit_test(test_output_cap),
        cmocka_unit_test(test_output_cap_spares_readers),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
