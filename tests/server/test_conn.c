/*
 * test_conn.c — the connection state machine (server/conn.c) driven
 * directly: bytes in through conn_feed, response frames out of c->out, no
 * sockets and no threads.  The test plays the I/O driver: it feeds received
 * bytes, decodes what conn.c queued and marks it sent with conn_sent.
 *
 * SET-UP
 *   The worker is built as workers.c builds one (arena sized by
 *   codec_arena_bound(max-frame-bytes), block and score arrays, an LR-sized
 *   scratch), with the settings parsed by the real config table, so a test
 *   that needs --max-frame-bytes or --max-inflight passes the flag.  The model
 *   is a small LR snapshot written under $TL_TEST_TMP and made active with
 *   server_model_load, the registry's own path.
 *
 * WHAT IS CHECKED (docs/wire.md, conn.c's ERRORS)
 *   - every request type whole: PREDICT (scores equal model_score's), PING,
 *     TRAIN and LOOKUP (UNKNOWN_TYPE: not served here), an unknown type;
 *   - a stream split at every byte boundary and fed a byte at a time gives
 *     the same response bytes as one feed; frames pipelined in one buffer
 *     are answered in order;
 *   - framing errors (bad magic, version, header, payload over the codec's or
 *     --max-frame-bytes): one ERROR with request id 0, the connection closes
 *     and later bytes are ignored; --max-input-bytes: OVERLOADED and close;
 *     --max-output-bytes: the largest backlog is closed;
 *   - payload errors (truncated, trailing bytes, bad varint, name, items,
 *     order, values; unknown model or version, decided after the payload
 *     decodes): ERROR with the request's id, the connection stays usable;
 *   - per-connection back-pressure (no worker-wide OVERLOADED),
 *     SHUTTING_DOWN, reaping (slow frame, stuck output, idle), buffer
 *     trimming, eviction at the connection limit, an allocation failure;
 *   - the scratch sized once per version a worker pins (server_model_t.gen).
 *
 * conn.c is #included (STYLE.md: a unit test may reach statics) so that its
 * malloc/realloc can be made to fail on demand.
 */
#define _GNU_SOURCE /* memmem */
/* cmocka needs these first, in this order */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- conn.c with failing allocations on demand ---------------------------- */

static int alloc_fail_at; /* > 0: conn.c's alloc_fail_at-th allocation from now fails */

static int alloc_should_fail(void)
{
    return alloc_fail_at > 0 && --alloc_fail_at == 0;
}

static void *test_malloc_(size_t n)
{
    return alloc_should_fail() ? NULL : malloc(n);
}

static void *test_realloc_(void *p, size_t n)
{
    return alloc_should_fail() ? NULL : realloc(p, n);
}

#define malloc(n) test_malloc_(n)
#define realloc(p, n) test_realloc_(p, n)
#include "server/conn.c"
#undef malloc
#undef realloc

#include "server/server.h"
#include "server/worker.h"
#include "tests/test_fs.h"

/* ---- fixture -------------------------------------------------------------- */

#define MODEL_NAME "ctr"
#define MODEL_VERSION 7u
#define NKEYS 64u

static server_t srv;
static worker_t w;
static char model_dir[PATH_MAX];
static model_scratch_t *ref_scratch; /* for the expected scores */
static codec_arena_t rd;             /* decodes what conn.c queued */

static float weight_of(uint64_t id)
{
    return (float)((int)(id % 7) - 3) / 8.0f;
}

/* Parses flags (NULL-terminated, after "tlserve") into srv.cfg with the real
 * config table. */
static void configure(const char *const *flags)
{
    char *argv[32] = {"tlserve", "--log-level", "error"};
    int argc = 3;
    for (; flags && *flags; flags++)
        argv[argc++] = (char *)*flags;
    assert_int_equal(server_config_load(&srv.cfg, argc, argv), 0);
}

/* A small LR model, "ctr" version 7: bias 0.25, ids 1..64 weight_of(id). */
static int group_setup(void **state)
{
    (void)state;
    configure(NULL);
    srv.nworkers = 1;
    srv.metrics = calloc(1, sizeof *srv.metrics);
    assert_non_null(srv.metrics);

    store_options_t opt = {.value_floats = 1, .shards = 2, .expected_keys = NKEYS + 1};
    store_t *s;
    assert_int_equal(store_create(&opt, &s), 0);
    float bias = 0.25f;
    assert_int_equal(store_upsert(s, MODEL_BIAS_ID, &bias), 1);
    for (uint64_t id = 1; id <= NKEYS; id++) {
        float v = weight_of(id);
        assert_int_equal(store_upsert(s, id, &v), 1);
    }
    const char *root = getenv("TL_TEST_TMP");
    if (!root || !root[0])
        root = "/tmp/tl_test_tmp";
    test_mkdir_p(root);
    snprintf(model_dir, sizeof model_dir, "%s/connXXXXXX", root);
    assert_non_null(mkdtemp(model_dir));
    store_meta_t meta = {
        .model_name = MODEL_NAME, .model_kind = STORE_MODEL_LR, .version = MODEL_VERSION};
    store_error_t err;
    assert_int_equal(store_snapshot_write(s, model_dir, &meta, &err), 0);
    store_destroy(s);
    assert_int_equal(server_model_load(&srv, model_dir, &err), 0);

    assert_int_equal(model_scratch_create(CODEC_MAX_REQUEST_FEATURES, &ref_scratch), 0);
    rd.cap = codec_arena_bound(CODEC_MAX_PAYLOAD);
    rd.base = malloc(rd.cap);
    assert_non_null(rd.base);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    server_model_release(atomic_exchange(&srv.models[0].active, NULL));
    model_scratch_destroy(ref_scratch);
    free(rd.base);
    free(srv.metrics);
    test_rm_rf(model_dir);
    return 0;
}

/* A fresh worker (as workers.c's worker_init builds it, minus the socket)
 * under the given flags, with zeroed metrics. */
static void start(const char *const *flags)
{
    configure(flags);
    memset(srv.metrics, 0, sizeof *srv.metrics);
    atomic_store(&srv.stopping, false);
    memset(&w, 0, sizeof w);
    w.srv = &srv;
    w.m = &srv.metrics[0];
    w.listen_fd = -1;
    w.arena.cap = codec_arena_bound((size_t)srv.cfg.max_frame_bytes);
    w.arena.base = malloc(w.arena.cap);
    w.blocks = calloc(CODEC_MAX_ITEMS, sizeof *w.blocks);
    w.scores = calloc(CODEC_MAX_ITEMS, sizeof *w.scores);
    assert_non_null(w.arena.base);
    assert_non_null(w.blocks);
    assert_non_null(w.scores);
    assert_int_equal(model_scratch_create(CODEC_MAX_REQUEST_FEATURES, &w.scratch), 0);
}

/* Frees the worker; every connection must be gone, and with them every
 * byte of input budget and every in-flight count. */
static void finish(void)
{
    assert_int_equal(w.nconns, 0);
    assert_int_equal(w.inflight, 0);
    assert_int_equal(w.in_bytes, 0);
    assert_int_equal(w.out_bytes, 0);
    assert_int_equal(atomic_load(&w.m->output_bytes), 0);
    assert_null(w.conns);
    assert_int_equal(atomic_load(&w.m->inflight), 0);
    assert_int_equal(atomic_load(&w.m->connections), 0);
    free(w.arena.base);
    free(w.blocks);
    free(w.scores);
    model_scratch_destroy(w.scratch);
    alloc_fail_at = 0;
}

static conn_t *open_conn(void)
{
    conn_t *c = conn_new(&w, -1);
    assert_non_null(c);
    return c;
}

/* ---- building requests ------------------------------------------------------ */

typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
} bytes_t;

static uint8_t *grow(bytes_t *b, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    uint8_t *at = b->p + b->len;
    b->len += n;
    return at;
}

static void put(bytes_t *b, const void *data, size_t n)
{
    memcpy(grow(b, n), data, n);
}

static void put_u8(bytes_t *b, uint8_t v)
{
    put(b, &v, 1);
}

static void put_u64(bytes_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        put_u8(b, (uint8_t)(v >> (8 * i)));
}

static void put_f32(bytes_t *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    for (int i = 0; i < 4; i++)
        put_u8(b, (uint8_t)(u >> (8 * i)));
}

static void put_varint(bytes_t *b, uint64_t v)
{
    uint8_t tmp[CODEC_MAX_VARINT];
    put(b, tmp, codec_varint_encode(tmp, v));
}

/* A frame of any type around payload p (header written by the codec). */
static void put_frame(bytes_t *b, uint8_t type, uint16_t flags, uint64_t id, const bytes_t *p)
{
    codec_header_t h = {
        .type = type, .flags = flags, .request_id = id, .payload_len = (uint32_t)p->len};
    codec_write_header(grow(b, CODEC_HEADER_SIZE), &h);
    if (p->len)
        put(b, p->p, p->len);
}

/* The head of a PREDICT payload: name, version, item count (not checked). */
static void put_predict_head(bytes_t *p, const char *name, uint64_t version, uint64_t items)
{
    put_u8(p, (uint8_t)strlen(name));
    put(p, name, strlen(name));
    put_u64(p, version);
    put_varint(p, items);
}

/* A block with fixed (u64) ids, values when vals != NULL (not checked). */
static void put_block(bytes_t *p, const uint64_t *ids, const float *vals, uint32_t n)
{
    put_varint(p, n);
    put_u8(p, (uint8_t)(CODEC_BLOCK_FIXED | (vals ? CODEC_BLOCK_VALUES : 0)));
    for (uint32_t i = 0; i < n; i++)
        put_u64(p, ids[i]);
    for (uint32_t i = 0; vals && i < n; i++)
        put_f32(p, vals[i]);
}

/* The standard test request: 3 items over a shared block, one item with
 * values, one empty, one id (1000) the model has not seen. */
static const uint64_t sh_ids[] = {1, 2, 3};
static const uint64_t it0_ids[] = {10, 11, 1000};
static const uint64_t it1_ids[] = {12, 40};
static const float it1_vals[] = {0.5f, 2.0f};

static void std_blocks(codec_block_t *shared, codec_block_t items[3])
{
    *shared = (codec_block_t){sh_ids, NULL, 3};
    items[0] = (codec_block_t){it0_ids, NULL, 3};
    items[1] = (codec_block_t){it1_ids, it1_vals, 2};
    items[2] = (codec_block_t){NULL, NULL, 0};
}

static void put_predict(bytes_t *b, uint64_t id, const char *name, uint64_t version)
{
    codec_predict_t req = {.version = version, .items = 3};
    codec_block_t items[3];
    snprintf(req.name, sizeof req.name, "%s", name);
    std_blocks(&req.shared, items);
    req.item = items;
    size_t len;
    assert_int_equal(codec_encode_predict(NULL, 0, id, &req, &len, NULL), CODEC_NEED_MORE);
    uint8_t *at = grow(b, len);
    assert_int_equal(codec_encode_predict(at, len, id, &req, &len, NULL), CODEC_OK);
}

static void put_ping(bytes_t *b, uint64_t id, const char *data)
{
    codec_ping_t p = {(const uint8_t *)data, (uint32_t)strlen(data)};
    size_t len = CODEC_HEADER_SIZE + p.len;
    assert_int_equal(codec_encode_ping(grow(b, len), len, CODEC_PING, id, &p, &len, NULL),
                     CODEC_OK);
}

static void put_train(bytes_t *b, uint64_t id)
{
    codec_block_t shared, items[3];
    std_blocks(&shared, items);
    float labels[3] = {1.0f, 0.0f, 0.0f};
    codec_train_t t = {
        .name = MODEL_NAME, .samples = 3, .shared = shared, .labels = labels, .sample = items};
    size_t len;
    assert_int_equal(codec_encode_train(NULL, 0, id, &t, &len, NULL), CODEC_NEED_MORE);
    uint8_t *at = grow(b, len);
    assert_int_equal(codec_encode_train(at, len, id, &t, &len, NULL), CODEC_OK);
}

/* LOOKUP as docs/wire.md lays it out: name, version, n, delta varints. */
static void put_lookup(bytes_t *b, uint64_t id)
{
    bytes_t p = {0};
    put_u8(&p, 3);
    put(&p, MODEL_NAME, 3);
    put_u64(&p, 0);
    put_varint(&p, 3);
    put_varint(&p, 1);
    put_varint(&p, 1);
    put_varint(&p, 38);
    put_frame(b, CODEC_LOOKUP, 0, id, &p);
    free(p.p);
}

/* ---- reading responses ---------------------------------------------------------- */

/* Decodes the next frame conn.c queued on c into *m and marks it sent, as a
 * driver would; m's byte strings point into c->out (valid until the next
 * conn_feed).  Fails the test when no whole frame is queued. */
static void next_frame(conn_t *c, codec_msg_t *m)
{
    size_t avail = c->out_len - c->out_off;
    assert_true(avail >= CODEC_HEADER_SIZE);
    codec_error_t err;
    codec_arena_reset(&rd);
    int rc = codec_decode_frame(c->out + c->out_off, avail, &rd, m, &err);
    if (rc != CODEC_OK)
        fail_msg("queued frame does not decode: %s", err.msg);
    conn_sent(&w, c, CODEC_HEADER_SIZE + m->hdr.payload_len);
}

/* The next frame is an ERROR with this id and code, whose sentence
 * contains needle (any sentence when needle is NULL). */
static void expect_error_naming(conn_t *c, uint64_t id, int code, const char *needle)
{
    codec_msg_t m;
    next_frame(c, &m);
    assert_int_equal(m.hdr.type, CODEC_ERROR);
    assert_int_equal(m.hdr.request_id, id);
    if (m.u.error.code != code)
        fail_msg("ERROR code %u (%s), expected %d (%s): %.*s", m.u.error.code,
                 codec_errc_name(m.u.error.code), code, codec_errc_name(code),
                 (int)m.u.error.msg_len, m.u.error.msg);
    assert_true(m.u.error.msg_len > 0);
    if (needle && !memmem(m.u.error.msg, m.u.error.msg_len, needle, strlen(needle)))
        fail_msg("ERROR %s does not name '%s': %.*s", codec_errc_name(code), needle,
                 (int)m.u.error.msg_len, m.u.error.msg);
}

static void expect_error(conn_t *c, uint64_t id, int code)
{
    expect_error_naming(c, id, code, NULL);
}

static void expect_pong(conn_t *c, uint64_t id, const char *data)
{
    codec_msg_t m;
    next_frame(c, &m);
    assert_int_equal(m.hdr.type, CODEC_PONG);
    assert_int_equal(m.hdr.request_id, id);
    assert_int_equal(m.u.ping.len, strlen(data));
    if (m.u.ping.len)
        assert_memory_equal(m.u.ping.data, data, m.u.ping.len);
}

/* A PREDICT_RESULT for the standard request: the active version and, bit
 * for bit, the scores model_score gives the same blocks. */
static void expect_scores(conn_t *c, uint64_t id)
{
    codec_block_t shared, items[3];
    std_blocks(&shared, items);
    float want[3];
    server_model_t *sm = server_model_acquire(&srv);
    assert_non_null(sm);
    assert_int_equal(model_score(sm->model, &shared, items, 3, want, ref_scratch), 0);
    server_model_release(sm);
    /* and by hand: sigmoid(bias + shared + item) */
    double base = 0.25 + weight_of(1) + weight_of(2) + weight_of(3);
    double z[3] = {base + weight_of(10) + weight_of(11),
                   base + 0.5 * weight_of(12) + 2.0 * weight_of(40), base};
    for (int i = 0; i < 3; i++)
        assert_true(fabs(want[i] - 1.0 / (1.0 + exp(-z[i]))) < 1e-6);

    codec_msg_t m;
    next_frame(c, &m);
    assert_int_equal(m.hdr.type, CODEC_PREDICT_RESULT);
    assert_int_equal(m.hdr.request_id, id);
    assert_int_equal(m.u.result.version, MODEL_VERSION);
    assert_int_equal(m.u.result.items, 3);
    assert_memory_equal(m.u.result.scores, want, sizeof want);
}

static void expect_nothing(const conn_t *c)
{
    assert_int_equal(c->out_len - c->out_off, 0);
}

static int feed(conn_t *c, const bytes_t *b)
{
    return conn_feed(&w, c, b->p, b->len);
}

/* The connection still answers: a PING gets its PONG. */
static void expect_usable(conn_t *c)
{
    bytes_t b = {0};
    put_ping(&b, 4242, "still here");
    assert_int_equal(feed(c, &b), 0);
    expect_pong(c, 4242, "still here");
    expect_nothing(c);
    assert_false(c->closing);
    free(b.p);
}

/* c is closing with nothing left to send, and ignores what comes later:
 * feeding it later (any bytes) returns -EPIPE and queues nothing. */
static void expect_closed(conn_t *c, const bytes_t *later)
{
    assert_true(c->closing);
    expect_nothing(c);
    assert_int_equal(feed(c, later), -EPIPE);
    expect_nothing(c);
}

static uint64_t errors_of(int code)
{
    return atomic_load(&w.m->errors_by_code[code]);
}

/* ---- whole frames ---------------------------------------------------------------- */

static void test_predict(void **state)
{
    (void)state;
    start(NULL);
    conn_t *c = open_conn();
    bytes_t b = {0};
    put_predict(&b, 11, MODEL_NAME, 0);
    put_predict(&b, 12, MODEL_NAME, MODEL_VERSION); /* pinned to the active version */
    assert_int_equal(feed(c, &b), 0);
    expect_scores(c, 11);
    expect_scores(c, 12);
    expect_nothing(c);
    assert_false(c->closing);
    assert_int_equal(c->in_len, 0);
    assert_int_equal(c->partial_since_ms, 0);
    assert_int_equal(atomic_load(&w.m->requests_total), 2);
    assert_int_equal(atomic_load(&w.m->predict_total), 2);
    assert_int_equal(atomic_load(&w.m->items_total), 6);
    assert_int_equal(atomic_load(&w.m->errors_total), 0);
    assert_int_equal(atomic_load(&w.m->bytes_in_total), b.len);
    uint64_t lat = 0;
    for (unsigned i = 0; i < SERVER_LAT_BUCKETS; i++)
        lat += atomic_load(&w.m->latency_bucket[i]);
    assert_int_equal(lat, 2);
    conn_free(&w, c);
    free(b.p);
    finish();
}

static void test_ping(void **state)
{
    (void)state;
    start(NULL);
    conn_t *c = open_conn();
    bytes_t b = {0};
    put_ping(&b, 1, "");
    put_ping(&b, UINT64_MAX, "0123456789012345678901234567890123456789012345678901234567890123");
    assert_int_equal(feed(c, &b), 0);
    expect_pong(c, 1, "");
    expect_pong(c, UINT64_MAX, "0123456789012345678901234567890123456789012345678901234567890123");
    expect_nothing(c);
    assert_int_equal(atomic_load(&w.m->bytes_out_total), 2 * CODEC_HEADER_SIZE + 64);
    conn_free(&w, c);
    free(b.p);
    finish();
}

/* TRAIN and LOOKUP are well-formed requests this server does not serve yet:
 * UNKNOWN_TYPE with their ids, and the connection goes on; so for a type
 * nobody defined, whose payload is skipped. */
static void test_train_lookup_unknown_type(void **state)
{
    (void)state;
    start(NULL);
    conn_t *c = open_conn();
    bytes_t b = {0}, junk = {0};
    put_train(&b, 21);
    put_lookup(&b, 22);
    for (int i = 0; i < 100; i++)
        put_u8(&junk, (uint8_t)i);
    put_frame(&b, 42, 0xffff, 23, &junk);            /* flags of an unknown type are not checked */
    put_frame(&b, CODEC_PONG, 0, 24, &(bytes_t){0}); /* a response type is not a request */
    assert_int_equal(feed(c, &b), 0);
    expect_error(c, 21, CODEC_E_UNKNOWN_TYPE);
    expect_error(c, 22, CODEC_E_UNKNOWN_TYPE);
    expect_error(c, 23, CODEC_E_UNKNOWN_TYPE);
    expect_error(c, 24, CODEC_E_UNKNOWN_TYPE);
    expect_nothing(c);
    assert_int_equal(errors_of(CODEC_E_UNKNOWN_TYPE), 4);
    assert_int_equal(atomic_load(&w.m->errors_total), 4);
    expect_usable(c);
    conn_free(&w, c);
    free(b.p);
    free(junk.p);
    finish();
}

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
    size_t held = CODEC_HEADER_SIZE;
    int rc = 0;
    while (rc == 0) {
        rc = feed(a2, &chunk);
        held += chunk.len;
    }
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

/* The payload of a PREDICT with CODEC_MAX_ITEMS empty items (and an empty
 * shared block): small to send, the largest answer to queue (~16 KB). */
static void put_widest_predict(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, CODEC_MAX_ITEMS);
    for (uint32_t i = 0; i <= CODEC_MAX_ITEMS; i++)
        put_block(p, NULL, NULL, 0);
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

/* ---- payload errors: ERROR with the request's id, the connection goes on ------------- */

typedef struct bad_payload {
    const char *what;
    int code;
    void (*build)(bytes_t *p);
} bad_payload_t;

static void bp_truncated(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, 2);
    put_block(p, sh_ids, NULL, 3);
    put_block(p, it0_ids, NULL, 3);
    put_varint(p, 2); /* the second item's block ends after its count */
}
static void bp_truncated_values(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, 1);
    put_block(p, NULL, NULL, 0);
    put_block(p, it1_ids, it1_vals, 2);
    p->len -= 1; /* the last value is cut */
}
static void bp_truncated_version(bytes_t *p)
{
    put_u8(p, 3);
    put(p, MODEL_NAME, 3);
    put_u8(p, 0); /* 1 of the version's 8 bytes */
}
static void bp_empty(bytes_t *p)
{
    (void)p;
}
static void bp_trailing(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, 1);
    put_block(p, NULL, NULL, 0);
    put_block(p, sh_ids, NULL, 3);
    put_u8(p, 0);
}
static void bp_bad_varint(bytes_t *p)
{
    put_u8(p, 3);
    put(p, MODEL_NAME, 3);
    put_u64(p, 0);
    for (int i = 0; i < 11; i++)
        put_u8(p, 0xff); /* items: a varint over 10 bytes */
    put_u8(p, 0);
}
static void bp_bad_name(bytes_t *p)
{
    put_predict_head(p, "a b!", 0, 1);
    put_block(p, NULL, NULL, 0);
    put_block(p, NULL, NULL, 0);
}
static void bp_empty_name(bytes_t *p)
{
    put_predict_head(p, "", 0, 1);
    put_block(p, NULL, NULL, 0);
    put_block(p, NULL, NULL, 0);
}
static void bp_no_items(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, 0);
    put_block(p, NULL, NULL, 0);
}
static void bp_too_many_items(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, CODEC_MAX_ITEMS + 1);
    put_block(p, NULL, NULL, 0);
}
static void bp_too_many_features(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, 1);
    put_varint(p, CODEC_MAX_BLOCK_FEATURES + 1);
    put_u8(p, CODEC_BLOCK_FIXED);
}
static void bp_unsorted(bytes_t *p)
{
    static const uint64_t ids[] = {5, 5};
    put_predict_head(p, MODEL_NAME, 0, 1);
    put_block(p, NULL, NULL, 0);
    put_block(p, ids, NULL, 2);
}
static void bp_nan(bytes_t *p)
{
    static const float vals[] = {1.0f, NAN};
    put_predict_head(p, MODEL_NAME, 0, 1);
    put_block(p, it1_ids, vals, 2);
    put_block(p, NULL, NULL, 0);
}
static void bp_block_flags(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 0, 1);
    put_varint(p, 0);
    put_u8(p, 0x04);
    put_block(p, NULL, NULL, 0);
}
/* unknown model and version are decided after the payload decodes */
static void bp_unknown_model_truncated(bytes_t *p)
{
    put_predict_head(p, "other", 0, 1);
    put_block(p, NULL, NULL, 0);
}
static void bp_unknown_version_unsorted(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, 99, 1);
    static const uint64_t ids[] = {9, 3};
    put_block(p, NULL, NULL, 0);
    put_block(p, ids, NULL, 2);
}
static void bp_unknown_model(bytes_t *p)
{
    put_predict_head(p, "other", 0, 1);
    put_block(p, NULL, NULL, 0);
    put_block(p, NULL, NULL, 0);
}
static void bp_unknown_version(bytes_t *p)
{
    put_predict_head(p, MODEL_NAME, MODEL_VERSION + 1, 1);
    put_block(p, NULL, NULL, 0);
    put_block(p, NULL, NULL, 0);
}

static const bad_payload_t bad_payloads[] = {
    {"truncated block", CODEC_E_TRUNCATED, bp_truncated},
    {"truncated values", CODEC_E_TRUNCATED, bp_truncated_values},
    {"truncated version", CODEC_E_TRUNCATED, bp_truncated_version},
    {"empty payload", CODEC_E_TRUNCATED, bp_empty},
    {"trailing byte", CODEC_E_TRAILING_BYTES, bp_trailing},
    {"11-byte varint", CODEC_E_BAD_VARINT, bp_bad_varint},
    {"bad name", CODEC_E_BAD_NAME, bp_bad_name},
    {"empty name", CODEC_E_BAD_NAME, bp_empty_name},
    {"0 items", CODEC_E_NO_ITEMS, bp_no_items},
    {"4097 items", CODEC_E_TOO_MANY_ITEMS, bp_too_many_items},
    {"65537 features", CODEC_E_TOO_MANY_FEATURES, bp_too_many_features},
    {"repeated id", CODEC_E_UNSORTED_FEATURES, bp_unsorted},
    {"NaN value", CODEC_E_BAD_VALUE, bp_nan},
    {"block flag bit 2", CODEC_E_BAD_VALUE, bp_block_flags},
    {"unknown model, truncated", CODEC_E_TRUNCATED, bp_unknown_model_truncated},
    {"unknown version, unsorted", CODEC_E_UNSORTED_FEATURES, bp_unknown_version_unsorted},
    {"unknown model", CODEC_E_UNKNOWN_MODEL, bp_unknown_model},
    {"unknown version", CODEC_E_UNKNOWN_VERSION, bp_unknown_version},
};

static void test_bad_payloads(void **state)
{
    (void)state;
    start(NULL);
    conn_t *c = open_conn();
    bytes_t p = {0}, f = {0};
    size_t n = sizeof bad_payloads / sizeof bad_payloads[0];
    for (size_t i = 0; i < n; i++) {
        const bad_payload_t *bp = &bad_payloads[i];
        p.len = f.len = 0;
        bp->build(&p);
        put_frame(&f, CODEC_PREDICT, 0, 500 + i, &p);
        int rc = feed(c, &f);
        if (rc != 0)
            fail_msg("%s: conn_feed returned %d", bp->what, rc);
        codec_msg_t m;
        next_frame(c, &m);
        if (m.hdr.type != CODEC_ERROR || m.u.error.code != bp->code)
            fail_msg("%s: got type %u code %s, expected ERROR %s", bp->what, m.hdr.type,
                     m.hdr.type == CODEC_ERROR ? codec_errc_name(m.u.error.code) : "-",
                     codec_errc_name(bp->code));
        assert_int_equal(m.hdr.request_id, 500 + i);
        expect_nothing(c);
        assert_false(c->closing);
        assert_int_equal(c->in_len, 0);
    }
    /* PING's own payload errors the same way */
    p.len = f.len = 0;
    grow(&p, CODEC_MAX_PING + 1);
    memset(p.p, 'x', p.len);
    put_frame(&f, CODEC_PING, 0, 600, &p);
    assert_int_equal(feed(c, &f), 0);
    expect_error(c, 600, CODEC_E_BAD_VALUE);
    expect_usable(c);
    assert_int_equal(atomic_load(&w.m->errors_total), n + 1);
    assert_int_equal(atomic_load(&w.m->predict_total), 0);
    conn_free(&w, c);
    free(p.p);
    free(f.p);
    finish();
}

/* No model loaded at all: UNKNOWN_MODEL that says so; PING still works. */
static void test_no_model(void **state)
{
    (void)state;
    start(NULL);
    server_model_t *sm = atomic_exchange(&srv.models[0].active, NULL);
    conn_t *c = open_conn();
    bytes_t b = {0};
    put_predict(&b, 70, MODEL_NAME, 0);
    assert_int_equal(feed(c, &b), 0);
    expect_error_naming(c, 70, CODEC_E_UNKNOWN_MODEL, "no model");
    expect_usable(c);
    atomic_store(&srv.models[0].active, sm);
    b.len = 0;
    put_predict(&b, 71, MODEL_NAME, 0);
    assert_int_equal(feed(c, &b), 0);
    expect_scores(c, 71);
    conn_free(&w, c);
    free(b.p);
    finish();
}

/* The scratch follows the version: a worker sizes it for each version it
 * pins for the first time (server_model_t.gen), before scoring with it, and
 * not again for the requests after. */
static void test_scratch_follows_version(void **state)
{
    (void)state;
    start(NULL);
    conn_t *c = open_conn();
    bytes_t b = {0};
    put_predict(&b, 1, MODEL_NAME, 0);
    server_model_t *first = server_model_acquire(&srv);
    assert_non_null(first);
    uint64_t gen1 = first->gen;
    server_model_release(first);
    assert_true(gen1 > 0);
    assert_int_equal(w.scratch_gen, 0);
    assert_int_equal(feed(c, &b), 0);
    expect_scores(c, 1);
    assert_int_equal(w.scratch_gen, gen1);

    /* the same snapshot opened again is another version handle */
    server_model_t *sm;
    store_error_t err;
    assert_int_equal(server_model_open(&srv, model_dir, &sm, &err), 0);
    assert_true(sm->gen > gen1);
    server_model_retire(server_model_swap(&srv, sm));
    assert_int_equal(feed(c, &b), 0);
    expect_scores(c, 1);
    assert_int_equal(w.scratch_gen, sm->gen);
    assert_int_equal(feed(c, &b), 0);
    expect_scores(c, 1);
    assert_int_equal(w.scratch_gen, sm->gen);
    conn_free(&w, c);
    free(b.p);
    finish();
}

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_predict),
        cmocka_unit_test(test_ping),
        cmocka_unit_test(test_train_lookup_unknown_type),
        cmocka_unit_test(test_split_every_byte),
        cmocka_unit_test(test_partial_frame_clock),
        cmocka_unit_test(test_send_and_idle_clocks),
        cmocka_unit_test(test_trim),
        cmocka_unit_test(test_evictable),
        cmocka_unit_test(test_pipelined),
        cmocka_unit_test(test_framing_errors),
        cmocka_unit_test(test_max_frame_bytes),
        cmocka_unit_test(test_max_input_bytes),
        cmocka_unit_test(test_output_cap),
        cmocka_unit_test(test_output_cap_spares_readers),
        cmocka_unit_test(test_bad_payloads),
        cmocka_unit_test(test_no_model),
        cmocka_unit_test(test_scratch_follows_version),
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
